//! The only module in this crate that issues syscalls with raw arguments.
//!
//! # Safety
//! Every request number comes from `ioctl_sys` (generated from the pinned uapi headers) and
//! is paired with the exact struct type the kernel copies for it; `ioctl-sys/tests/opcodes.rs`
//! checks each pairing, because the request number encodes the struct's size. Calls whose
//! struct embeds user pointers are `unsafe fn`: their callers vouch for the pointers.
#![allow(unsafe_code)]

use crate::error::Error;
use ioctl_sys::drm as sys;
use rustix::fd::BorrowedFd;
use rustix::io::Errno;
use rustix::ioctl::{Opcode, Updater, ioctl};

/// Retries `f` while it fails with EINTR or EAGAIN, as libdrm's `drmIoctl` does.
fn retry<T>(mut f: impl FnMut() -> rustix::io::Result<T>) -> rustix::io::Result<T> {
    loop {
        match f() {
            Err(Errno::INTR | Errno::AGAIN) => continue,
            other => return other,
        }
    }
}

macro_rules! drm_ioctl {
    // Plain-data argument: any value of the type is harmless to pass.
    (safe $(#[$m:meta])* $cname:ident => $fname:ident(&mut $ty:ty)) => {
        $(#[$m])*
        #[doc = concat!("Issues `", stringify!($cname), "` (retrying on EINTR/EAGAIN).")]
        pub(crate) fn $fname(fd: BorrowedFd<'_>, arg: &mut $ty) -> Result<(), Error> {
            retry(|| {
                // SAFETY: `$cname` is an ioctl over exactly one `$ty` (checked by
                // ioctl-sys/tests/opcodes.rs); `$ty` has no pointer fields, and `arg` is an
                // exclusive borrow valid for the whole call.
                unsafe { ioctl(fd, Updater::<{ sys::$cname as Opcode }, $ty>::new(&mut *arg)) }
            })
            .map_err(|errno| Error::ioctl(stringify!($cname), errno))
        }
    };
    // The argument embeds user pointers: the caller vouches for them.
    (unsafe $(#[$m:meta])* $cname:ident => $fname:ident(&mut $ty:ty)) => {
        $(#[$m])*
        #[doc = concat!("Issues `", stringify!($cname), "` (retrying on EINTR/EAGAIN).")]
        ///
        /// # Safety
        /// Every pointer/length pair in `arg` must describe memory that the kernel may read
        /// or write (as the ioctl specifies) for the duration of the call.
        pub(crate) unsafe fn $fname(fd: BorrowedFd<'_>, arg: &mut $ty) -> Result<(), Error> {
            retry(|| {
                // SAFETY: request/type pairing as above; pointer validity is the caller's
                // contract, stated in this function's `# Safety` section.
                unsafe { ioctl(fd, Updater::<{ sys::$cname as Opcode }, $ty>::new(&mut *arg)) }
            })
            .map_err(|errno| Error::ioctl(stringify!($cname), errno))
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
