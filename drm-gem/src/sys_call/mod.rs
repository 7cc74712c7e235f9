//! The only module in this crate that issues syscalls with raw arguments.
//!
//! # Safety
//! Every request number comes from `ioctl_sys` (generated from the pinned uapi headers) and
//! is paired with the exact struct type the kernel copies for it; `ioctl-sys/tests/opcodes.rs`
//! checks each pairing, because the request number encodes the struct's size. Calls whose
//! struct embeds user pointers are `unsafe fn`: their callers vouch for the pointers.
//!
//! The module is one file per area (this file: core DRM, GEM, PRIME, dma-buf, sync_file);
//! the `drm_ioctl!` macro below is declared before the submodules so that they use it too.
#![allow(unsafe_code)]

use crate::error::Error;
use ioctl_sys::drm as sys;
use rustix::fd::BorrowedFd;
use rustix::io::Errno;
use rustix::ioctl::{Opcode, Updater, ioctl};

/// How many times [`retry`] repeats an ioctl that answers EAGAIN before passing it on.
const EAGAIN_RETRIES: u32 = 100;

/// Retries `f` while it fails with EINTR, as libdrm's `drmIoctl` does; EAGAIN too, but at
/// most [`EAGAIN_RETRIES`] times (yielding the CPU in between), after which the caller gets
/// it: libdrm's unbounded EAGAIN loop spins for ever on a request that keeps answering it.
///
/// The first call is inlined into every ioctl wrapper and everything after a failure is out
/// of line ([`retry_cold`]): a call that succeeds the first time costs what a bare ioctl
/// costs, without the loop's registers and spills (`drm-gem/BENCHMARKS.md`, user-space
/// instructions per call).
#[inline(always)]
fn retry<T>(mut f: impl FnMut() -> rustix::io::Result<T>) -> rustix::io::Result<T> {
    match f() {
        Ok(v) => Ok(v),
        Err(e) => retry_cold(e, f),
    }
}

/// [`retry`] with a failure named after the ioctl (`Error::Ioctl { name, errno }`); the
/// retries and the error are built out of line, so that a caller's success path is one
/// test of the syscall's result.
#[inline(always)]
fn retry_named<T>(
    name: &'static str,
    mut f: impl FnMut() -> rustix::io::Result<T>,
) -> Result<T, Error> {
    match f() {
        Ok(v) => Ok(v),
        Err(e) => failed(name, e, f),
    }
}

/// [`retry_named`]'s path after a failed first call.
#[cold]
#[inline(never)]
fn failed<T>(
    name: &'static str,
    first: Errno,
    f: impl FnMut() -> rustix::io::Result<T>,
) -> Result<T, Error> {
    retry_cold(first, f).map_err(|errno| Error::ioctl(name, errno))
}

/// [`retry`]'s loop, after a first call that answered `first`: again after EINTR, and
/// after EAGAIN a bounded number of times; any other answer is returned.
#[cold]
#[inline(never)]
fn retry_cold<T>(
    first: Errno,
    mut f: impl FnMut() -> rustix::io::Result<T>,
) -> rustix::io::Result<T> {
    let mut again = 0;
    let mut r = Err(first);
    loop {
        match r {
            Err(Errno::INTR) => {}
            Err(Errno::AGAIN) if again < EAGAIN_RETRIES => {
                again += 1;
                std::thread::yield_now();
            }
            other => return other,
        }
        r = f();
    }
}

/// `open(2)`, repeated while a signal interrupts it (EINTR).
pub(crate) fn open(
    path: impl rustix::path::Arg + Copy,
    flags: rustix::fs::OFlags,
    mode: rustix::fs::Mode,
) -> rustix::io::Result<rustix::fd::OwnedFd> {
    loop {
        match rustix::fs::open(path, flags, mode) {
            Err(Errno::INTR) => continue,
            other => return other,
        }
    }
}

macro_rules! drm_ioctl {
    // Plain-data argument: any value of the type is harmless to pass.
    (safe $(#[$m:meta])* $cname:ident => $fname:ident(&mut $ty:ty)) => {
        drm_ioctl!(safe $(#[$m])* drm::$cname => $fname(&mut $ty));
    };
    (safe $(#[$m:meta])* $module:ident::$cname:ident => $fname:ident(&mut $ty:ty)) => {
        $(#[$m])*
        #[doc = concat!("Issues `", stringify!($cname), "` (retrying on EINTR, and a bounded number of times on EAGAIN).")]
        #[inline]
        pub(crate) fn $fname(fd: BorrowedFd<'_>, arg: &mut $ty) -> Result<(), Error> {
            $crate::sys_call::retry_named(stringify!($cname), || {
                // SAFETY: `$cname` is an ioctl over exactly one `$ty` (checked by
                // ioctl-sys/tests/opcodes.rs); `$ty` has no pointer fields, and `arg` is an
                // exclusive borrow valid for the whole call.
                unsafe {
                    ioctl(
                        fd,
                        Updater::<{ ioctl_sys::$module::$cname as Opcode }, $ty>::new(&mut *arg),
                    )
                }
            })
        }
    };
    // The argument embeds user pointers: the caller vouches for them.
    (unsafe $(#[$m:meta])* $cname:ident => $fname:ident(&mut $ty:ty)) => {
        drm_ioctl!(unsafe $(#[$m])* drm::$cname => $fname(&mut $ty));
    };
    (unsafe $(#[$m:meta])* $module:ident::$cname:ident => $fname:ident(&mut $ty:ty)) => {
        $(#[$m])*
        #[doc = concat!("Issues `", stringify!($cname), "` (retrying on EINTR, and a bounded number of times on EAGAIN).")]
        ///
        /// # Safety
        /// Every pointer/length pair in `arg` must describe memory that the kernel may read
        /// or write (as the ioctl specifies) for the duration of the call.
        #[inline]
        pub(crate) unsafe fn $fname(fd: BorrowedFd<'_>, arg: &mut $ty) -> Result<(), Error> {
            $crate::sys_call::retry_named(stringify!($cname), || {
                // SAFETY: request/type pairing as above; pointer validity is the caller's
                // contract, stated in this function's `# Safety` section.
                unsafe {
                    ioctl(
                        fd,
                        Updater::<{ ioctl_sys::$module::$cname as Opcode }, $ty>::new(&mut *arg),
                    )
                }
            })
        }
    };
}

/// An ioctl without an argument (`_IO`).
macro_rules! drm_ioctl_noarg {
    ($(#[$m:meta])* $cname:ident => $fname:ident) => {
        $(#[$m])*
        #[doc = concat!("Issues `", stringify!($cname), "` (retrying on EINTR, and a bounded number of times on EAGAIN).")]
        #[inline]
        pub(crate) fn $fname(fd: BorrowedFd<'_>) -> Result<(), Error> {
            $crate::sys_call::retry_named(stringify!($cname), || {
                // SAFETY: `$cname` is an `_IO` request: the kernel reads and writes no
                // memory of ours (checked by ioctl-sys/tests/opcodes.rs).
                unsafe { ioctl(fd, rustix::ioctl::NoArg::<{ sys::$cname as Opcode }>::new()) }
            })
        }
    };
}

drm_ioctl!(safe
    /// Queries one driver capability. Nodes: primary and render. Permissions: none.
    DRM_IOCTL_GET_CAP => get_cap(&mut sys::drm_get_cap));
drm_ioctl!(unsafe
    /// Reads the driver name, date and description into caller buffers. Nodes: any.
    DRM_IOCTL_VERSION => version_raw(&mut sys::drm_version));

/// `DRM_IOCTL_VERSION` into three byte buffers. The returned struct's `*_len` fields hold
/// the full string lengths, which may exceed the buffers (then the copies were truncated).
#[inline]
pub(crate) fn version(
    fd: BorrowedFd<'_>,
    name: &mut [u8],
    date: &mut [u8],
    desc: &mut [u8],
) -> Result<sys::drm_version, Error> {
    let mut v = sys::drm_version {
        name_len: name.len() as u64,
        name: name.as_mut_ptr().cast(),
        date_len: date.len() as u64,
        date: date.as_mut_ptr().cast(),
        desc_len: desc.len() as u64,
        desc: desc.as_mut_ptr().cast(),
        ..Default::default()
    };
    // SAFETY: each pointer/length pair describes one of the three exclusive slice borrows,
    // which live for the whole call; the kernel writes at most `*_len` bytes to each.
    unsafe { version_raw(fd, &mut v)? };
    // The raw pointers must not escape: clear them before handing the struct out.
    v.name = core::ptr::null_mut();
    v.date = core::ptr::null_mut();
    v.desc = core::ptr::null_mut();
    Ok(v)
}

drm_ioctl!(safe
    /// Sets a client capability on this open file. Nodes: primary and render.
    DRM_IOCTL_SET_CLIENT_CAP => set_client_cap(&mut sys::drm_set_client_cap));
drm_ioctl!(safe
    /// Creates a dumb buffer. Nodes: primary (and render on vgem). Permissions: none.
    DRM_IOCTL_MODE_CREATE_DUMB => mode_create_dumb(&mut sys::drm_mode_create_dumb));
drm_ioctl!(safe
    /// Gets the fake mmap offset of a dumb buffer.
    DRM_IOCTL_MODE_MAP_DUMB => mode_map_dumb(&mut sys::drm_mode_map_dumb));
drm_ioctl!(safe
    /// Destroys a dumb buffer's handle (the object lives on while mapped or shared).
    DRM_IOCTL_MODE_DESTROY_DUMB => mode_destroy_dumb(&mut sys::drm_mode_destroy_dumb));
drm_ioctl!(safe
    /// Closes a GEM handle of this open file.
    DRM_IOCTL_GEM_CLOSE => gem_close(&mut sys::drm_gem_close));
drm_ioctl!(safe
    /// Exports a GEM handle as a dma-buf fd (the kernel returns a new fd in `fd`).
    DRM_IOCTL_PRIME_HANDLE_TO_FD => prime_handle_to_fd(&mut sys::drm_prime_handle));
drm_ioctl!(safe
    /// Imports a dma-buf fd as a GEM handle of this open file.
    DRM_IOCTL_PRIME_FD_TO_HANDLE => prime_fd_to_handle(&mut sys::drm_prime_handle));
drm_ioctl!(safe
    /// Begins or ends CPU access to a dma-buf.
    dma_buf::DMA_BUF_IOCTL_SYNC => dma_buf_sync(&mut ioctl_sys::dma_buf::dma_buf_sync));

impl crate::mapping::Mapping<'_> {
    /// Views the mapping as a slice.
    ///
    /// # Safety
    /// While the slice lives nothing may write this memory: no device job, no importer of
    /// an exported dma-buf, no other process or mapping.
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: forwarded: the caller guarantees no concurrent writer.
        unsafe { self.map.slice_unchecked() }
    }

    /// Views the mapping as a mutable slice.
    ///
    /// # Safety
    /// While the slice lives nothing else may read or write this memory: no device job, no
    /// importer of an exported dma-buf, no other process or mapping.
    pub unsafe fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: forwarded: the caller guarantees exclusive access.
        unsafe { self.map.slice_mut_unchecked() }
    }
}

/// Adopts an fd the kernel just returned in the struct of the ioctl `ioctl` (a negative
/// one is [`Error::BadReply`]).
#[inline]
pub(crate) fn own_fd(ioctl: &'static str, raw: i32) -> Result<rustix::fd::OwnedFd, Error> {
    use rustix::fd::FromRawFd;
    if raw < 0 {
        return Err(Error::BadReply {
            ioctl,
            what: "a negative fd",
        });
    }
    // SAFETY: the kernel created this fd for us in the ioctl that just returned; nothing
    // else owns it, so taking ownership closes it exactly once.
    Ok(unsafe { rustix::fd::OwnedFd::from_raw_fd(raw) })
}

drm_ioctl!(safe
    /// Gives a GEM object a global name. Nodes: primary only; needs an authenticated file.
    DRM_IOCTL_GEM_FLINK => gem_flink(&mut sys::drm_gem_flink));
drm_ioctl!(safe
    /// Opens a GEM object by global name. Nodes: primary only; needs an authenticated file.
    DRM_IOCTL_GEM_OPEN => gem_open(&mut sys::drm_gem_open));

drm_ioctl!(safe
    /// Merges two sync_files into a new one (returned in `fence`).
    sync_file::SYNC_IOC_MERGE => sync_merge(&mut ioctl_sys::sync_file::sync_merge_data));
drm_ioctl!(safe
    /// Creates a fence on a sw_sync timeline (debugfs), returned as a sync_file fd.
    sync_file::SW_SYNC_IOC_CREATE_FENCE => sw_sync_create_fence(&mut ioctl_sys::sync_file::sw_sync_create_fence_data));
drm_ioctl!(safe
    /// Advances a sw_sync timeline, signalling fences at or below the new value.
    sync_file::SW_SYNC_IOC_INC => sw_sync_inc(&mut u32));

/// `SYNC_IOC_FILE_INFO` filling `fences` (at most `fences.len()` entries; with an empty
/// slice the kernel reports only the count). EINVAL if the file has more fences than fit.
pub(crate) fn sync_file_info(
    fd: BorrowedFd<'_>,
    fences: &mut [ioctl_sys::sync_file::sync_fence_info],
) -> Result<ioctl_sys::sync_file::sync_file_info, Error> {
    use ioctl_sys::sync_file as ssys;
    let mut info = ssys::sync_file_info {
        num_fences: u32::try_from(fences.len()).unwrap_or(u32::MAX),
        sync_fence_info: if fences.is_empty() {
            0
        } else {
            fences.as_mut_ptr() as u64
        },
        ..Default::default()
    };
    retry(|| {
        // SAFETY: SYNC_IOC_FILE_INFO is an _IOWR over exactly one sync_file_info (checked by
        // ioctl-sys/tests/opcodes.rs); its pointer names `fences`, an exclusive borrow of
        // exactly `num_fences` entries that outlives the call.
        unsafe {
            ioctl(
                fd,
                Updater::<{ ssys::SYNC_IOC_FILE_INFO as Opcode }, ssys::sync_file_info>::new(
                    &mut info,
                ),
            )
        }
    })
    .map_err(|errno| Error::ioctl("SYNC_IOC_FILE_INFO", errno))?;
    info.sync_fence_info = 0;
    Ok(info)
}

// One file per area; declared after the macro so that they can use it.
mod dma_buf;
mod kms;
mod mmap;
mod qxl;
mod syncobj;
mod vgem;
mod virtio_gpu;
pub(crate) use dma_buf::*;
pub(crate) use kms::*;
pub use mmap::Mmap;
pub(crate) use qxl::*;
pub(crate) use syncobj::*;
pub(crate) use vgem::*;
pub(crate) use virtio_gpu::*;

drm_ioctl_noarg!(
    /// Becomes DRM master of the device (primary nodes; needs no other master, or
    /// CAP_SYS_ADMIN).
    DRM_IOCTL_SET_MASTER => set_master);
drm_ioctl_noarg!(
    /// Gives up DRM master.
    DRM_IOCTL_DROP_MASTER => drop_master);
drm_ioctl!(safe
    /// Gets this open file's authentication magic (primary nodes).
    DRM_IOCTL_GET_MAGIC => get_magic(&mut sys::drm_auth));
drm_ioctl!(safe
    /// Authenticates another open file by its magic (master only).
    DRM_IOCTL_AUTH_MAGIC => auth_magic(&mut sys::drm_auth));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_repeats_eintr_but_passes_eagain_on_after_its_bound() {
        let mut calls = 0;
        let r = retry(|| {
            calls += 1;
            if calls < 1000 {
                Err(Errno::INTR)
            } else {
                Ok(7)
            }
        });
        assert_eq!(
            (r, calls),
            (Ok(7), 1000),
            "EINTR is retried without a bound"
        );
        let mut calls = 0;
        let r: rustix::io::Result<()> = retry(|| {
            calls += 1;
            Err(Errno::AGAIN)
        });
        assert_eq!((r, calls), (Err(Errno::AGAIN), EAGAIN_RETRIES + 1));
        let mut calls = 0;
        let r = retry(|| {
            calls += 1;
            if calls < 3 { Err(Errno::AGAIN) } else { Ok(()) }
        });
        assert_eq!((r, calls), (Ok(()), 3));
    }
}
