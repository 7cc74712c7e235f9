//! Every unsafe operation of the benchmarks, in one place: the raw-rustix baseline (one
//! `ioctl` per call, no retry, no bookkeeping), the hand-written FFI to Debian's libdrm,
//! the memory mappings the mapping benchmarks write, and drm-gem's unsafe slice view.
//!
//! # Safety
//! Request numbers come from `ioctl_sys` and are paired with the struct the kernel copies for
//! them (the same pairing drm-gem uses, checked by `ioctl-sys/tests/opcodes.rs`). The libdrm
//! declarations follow `xf86drm.h` of libdrm 2.4.114. Mappings are owned by the types here
//! and unmapped exactly once, on drop; nothing outside this module sees their pointers.
#![allow(unsafe_code)]

use ioctl_sys::drm as sys;
use rustix::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use rustix::ioctl::{Opcode, Updater, ioctl};
use std::ffi::{c_char, c_int, c_ulong, c_void};
use std::io;
use std::ptr::NonNull;

/// Sets `CRITERION_HOME` for criterion, which reads it once when the first `Criterion` is
/// made. Call it first thing in `main`, before any thread exists.
pub(crate) fn set_criterion_home(dir: &std::path::Path) {
    // SAFETY: `main` calls this first, before it builds a `Criterion` or anything else that
    // could start a thread, so no other thread can read the environment concurrently.
    unsafe { std::env::set_var("CRITERION_HOME", dir) };
}

// ---------------------------------------------------------------------------------------
// The raw baseline: exactly one rustix ioctl over the uapi struct, nothing else.

macro_rules! raw_ioctl {
    ($(#[$m:meta])* $fname:ident: $cname:ident($ty:ty)) => {
        $(#[$m])*
        pub(crate) fn $fname(fd: BorrowedFd<'_>, arg: &mut $ty) -> io::Result<()> {
            // SAFETY: `$cname` is an ioctl over exactly one `$ty` (ioctl-sys/tests/opcodes.rs
            // checks the pairing); `$ty` has no pointer fields and `arg` is an exclusive
            // borrow that outlives the call.
            unsafe { ioctl(fd, Updater::<{ sys::$cname as Opcode }, $ty>::new(arg)) }
                .map_err(io::Error::from)
        }
    };
}

raw_ioctl!(
    /// `DRM_IOCTL_GET_CAP`.
    raw_get_cap: DRM_IOCTL_GET_CAP(sys::drm_get_cap));
raw_ioctl!(
    /// `DRM_IOCTL_MODE_CREATE_DUMB`.
    raw_create_dumb: DRM_IOCTL_MODE_CREATE_DUMB(sys::drm_mode_create_dumb));
raw_ioctl!(
    /// `DRM_IOCTL_MODE_MAP_DUMB`.
    raw_map_dumb: DRM_IOCTL_MODE_MAP_DUMB(sys::drm_mode_map_dumb));
raw_ioctl!(
    /// `DRM_IOCTL_MODE_DESTROY_DUMB`.
    raw_destroy_dumb: DRM_IOCTL_MODE_DESTROY_DUMB(sys::drm_mode_destroy_dumb));
raw_ioctl!(
    /// `DRM_IOCTL_GEM_CLOSE`.
    raw_gem_close: DRM_IOCTL_GEM_CLOSE(sys::drm_gem_close));
raw_ioctl!(
    /// `DRM_IOCTL_PRIME_FD_TO_HANDLE` (the fd field is an input: no ownership moves).
    raw_prime_fd_to_handle: DRM_IOCTL_PRIME_FD_TO_HANDLE(sys::drm_prime_handle));
raw_ioctl!(
    /// `DRM_IOCTL_PRIME_HANDLE_TO_FD`, leaving the new fd in the struct; see
    /// [`raw_prime_handle_to_fd`].
    raw_prime_handle_to_fd_struct: DRM_IOCTL_PRIME_HANDLE_TO_FD(sys::drm_prime_handle));

/// `DRM_IOCTL_PRIME_HANDLE_TO_FD`, returning the dma-buf the kernel made.
pub(crate) fn raw_prime_handle_to_fd(
    fd: BorrowedFd<'_>,
    handle: u32,
    flags: u32,
) -> io::Result<OwnedFd> {
    let mut a = sys::drm_prime_handle {
        handle,
        flags,
        fd: -1,
    };
    raw_prime_handle_to_fd_struct(fd, &mut a)?;
    adopt(a.fd)
}

/// `DRM_IOCTL_VERSION` into three caller buffers, one ioctl. The returned lengths are the
/// kernel's full string lengths (they may exceed the buffers); the pointers are cleared.
pub(crate) fn raw_version(
    fd: BorrowedFd<'_>,
    name: &mut [u8],
    date: &mut [u8],
    desc: &mut [u8],
) -> io::Result<sys::drm_version> {
    let mut v = sys::drm_version {
        name_len: name.len() as u64,
        name: name.as_mut_ptr().cast(),
        date_len: date.len() as u64,
        date: date.as_mut_ptr().cast(),
        desc_len: desc.len() as u64,
        desc: desc.as_mut_ptr().cast(),
        ..Default::default()
    };
    // SAFETY: DRM_IOCTL_VERSION is an _IOWR over one drm_version; each pointer/length pair
    // names one of the three exclusive slice borrows, which outlive the call, and the kernel
    // writes at most `*_len` bytes to each.
    unsafe {
        ioctl(
            fd,
            Updater::<{ sys::DRM_IOCTL_VERSION as Opcode }, sys::drm_version>::new(&mut v),
        )
    }?;
    v.name = core::ptr::null_mut();
    v.date = core::ptr::null_mut();
    v.desc = core::ptr::null_mut();
    Ok(v)
}

/// Takes ownership of an fd the kernel just returned in an ioctl struct.
fn adopt(raw: c_int) -> io::Result<OwnedFd> {
    if raw < 0 {
        return Err(io::Error::from_raw_os_error(
            rustix::io::Errno::BADF.raw_os_error(),
        ));
    }
    // SAFETY: the kernel created this fd for us in the call that just returned; nothing else
    // owns it, so it is closed exactly once, by the returned OwnedFd.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// A shared or anonymous read-write mapping, made and unmapped with rustix (or with the C
/// library's `mmap`/`munmap` for the libdrm flavour, as a C client of libdrm does).
#[derive(Debug)]
pub(crate) struct Map {
    ptr: NonNull<u8>,
    len: usize,
    libc: bool,
}

impl Map {
    /// `mmap(MAP_SHARED)` of `len` (> 0) bytes of `fd` at `offset`, through rustix.
    pub(crate) fn shared(fd: BorrowedFd<'_>, offset: u64, len: usize) -> io::Result<Self> {
        use rustix::mm::{MapFlags, ProtFlags, mmap};
        // SAFETY: a null hint lets the kernel pick the address, so no mapping is replaced;
        // the result is owned by the returned Map, which unmaps it once.
        let p = unsafe {
            mmap(
                core::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                offset,
            )
        }?;
        Self::owned(p, len, false)
    }

    /// `mmap(MAP_SHARED)` through the C library, as a libdrm client maps a dumb buffer.
    pub(crate) fn shared_libc(fd: BorrowedFd<'_>, offset: u64, len: usize) -> io::Result<Self> {
        let off = i64::try_from(offset).map_err(|_| io::Error::other("offset over i64"))?;
        // SAFETY: as for `shared`; the arguments are plain values (PROT_READ|PROT_WRITE = 3,
        // MAP_SHARED = 1 on Linux) and MAP_FAILED is checked before the pointer is used.
        let p = unsafe { mmap(core::ptr::null_mut(), len, 3, 1, fd.as_raw_fd(), off) };
        if p as isize == -1 {
            return Err(io::Error::last_os_error());
        }
        Self::owned(p, len, true)
    }

    /// Private anonymous memory: the `memset` baseline of the fill benchmark.
    pub(crate) fn anon(len: usize) -> io::Result<Self> {
        use rustix::mm::{MapFlags, ProtFlags, mmap_anonymous};
        // SAFETY: a null hint, as above; the mapping is owned by the returned Map.
        let p = unsafe {
            mmap_anonymous(
                core::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        }?;
        Self::owned(p, len, false)
    }

    fn owned(p: *mut c_void, len: usize, libc: bool) -> io::Result<Self> {
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave NULL"))?;
        Ok(Self { ptr, len, libc })
    }

    /// Copies `src` in at offset 0 (panics if it does not fit: a bench bug).
    pub(crate) fn write(&mut self, src: &[u8]) {
        assert!(src.len() <= self.len, "{} > {}", src.len(), self.len);
        // SAFETY: the range is inside this live mapping (asserted); `src` is a Rust slice,
        // which cannot overlap a mapping this module never exposes.
        unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr(), src.len()) };
    }

    /// Copies the first `dst.len()` bytes out (panics if they do not fit).
    pub(crate) fn read(&self, dst: &mut [u8]) {
        assert!(dst.len() <= self.len, "{} > {}", dst.len(), self.len);
        // SAFETY: as for `write`, in the other direction.
        unsafe { core::ptr::copy_nonoverlapping(self.ptr.as_ptr(), dst.as_mut_ptr(), dst.len()) };
    }

    /// Sets every byte to `v` (`memset`).
    pub(crate) fn fill(&mut self, v: u8) {
        // SAFETY: exactly this live mapping, which nothing else writes (the buffers of the
        // benchmarks are never exported and the benchmark is single-threaded).
        unsafe { core::ptr::write_bytes(self.ptr.as_ptr(), v, self.len) };
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        if self.libc {
            // SAFETY: ptr/len are exactly the mapping made in `shared_libc`, unmapped only here.
            let r = unsafe { munmap(self.ptr.as_ptr().cast(), self.len) };
            debug_assert_eq!(r, 0, "munmap: {}", io::Error::last_os_error());
        } else {
            // SAFETY: ptr/len are exactly the mapping made in `shared`/`anon`, unmapped only here.
            let r = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
            debug_assert!(r.is_ok(), "munmap: {r:?}");
        }
    }
}

/// Fills a drm-gem mapping through its unsafe slice view (the zero-copy way to write pixels).
pub(crate) fn fill_gem_mapping(m: &mut drm_gem::Mapping<'_>, v: u8) {
    // SAFETY: the mapped buffer is never exported and this single-threaded benchmark holds
    // no other view of it, so the slice is the only accessor while it lives.
    unsafe { m.as_mut_slice() }.fill(v);
}

// ---------------------------------------------------------------------------------------
// libdrm (Debian's libdrm2 / libdrm-dev), declarations from xf86drm.h.

/// `drmVersion` from xf86drm.h.
#[repr(C)]
struct DrmVersionC {
    version_major: c_int,
    version_minor: c_int,
    version_patchlevel: c_int,
    name_len: c_int,
    name: *mut c_char,
    date_len: c_int,
    date: *mut c_char,
    desc_len: c_int,
    desc: *mut c_char,
}

#[link(name = "drm")]
unsafe extern "C" {
    fn drmGetCap(fd: c_int, capability: u64, value: *mut u64) -> c_int;
    fn drmGetVersion(fd: c_int) -> *mut DrmVersionC;
    fn drmFreeVersion(v: *mut DrmVersionC);
    fn drmIoctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int;
    fn drmPrimeHandleToFD(fd: c_int, handle: u32, flags: u32, prime_fd: *mut c_int) -> c_int;
    fn drmPrimeFDToHandle(fd: c_int, prime_fd: c_int, handle: *mut u32) -> c_int;
    fn drmCloseBufferHandle(fd: c_int, handle: u32) -> c_int;
}

// The C library's mmap/munmap, which a libdrm client calls for dumb buffers.
unsafe extern "C" {
    fn mmap(
        addr: *mut c_void,
        len: usize,
        prot: c_int,
        flags: c_int,
        fd: c_int,
        off: i64,
    ) -> *mut c_void;
    fn munmap(addr: *mut c_void, len: usize) -> c_int;
}

/// libdrm's convention: 0 on success, -1 (or -errno) with `errno` set on failure.
fn check(r: c_int) -> io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `drmGetCap`.
pub(crate) fn libdrm_get_cap(fd: BorrowedFd<'_>, cap: u32) -> io::Result<u64> {
    let mut v = 0u64;
    // SAFETY: `v` is a live u64 the call writes once.
    check(unsafe { drmGetCap(fd.as_raw_fd(), u64::from(cap), &mut v) })?;
    Ok(v)
}

/// What `drmGetVersion` returned; `drmFreeVersion` on drop.
#[derive(Debug)]
pub(crate) struct LibdrmVersion(NonNull<DrmVersionC>);

impl LibdrmVersion {
    /// The driver name.
    pub(crate) fn name(&self) -> &[u8] {
        // SAFETY: libdrm allocated this struct and keeps it (and its strings) alive until
        // drmFreeVersion, which only our Drop calls; `name` holds `name_len` bytes.
        unsafe {
            let v = self.0.as_ref();
            let len = usize::try_from(v.name_len).unwrap_or(0);
            if v.name.is_null() || len == 0 {
                return &[];
            }
            core::slice::from_raw_parts(v.name.cast::<u8>(), len)
        }
    }
}

impl Drop for LibdrmVersion {
    fn drop(&mut self) {
        // SAFETY: the pointer came from drmGetVersion and is freed once, here.
        unsafe { drmFreeVersion(self.0.as_ptr()) };
    }
}

/// `drmGetVersion` (two VERSION ioctls and the copies libdrm makes).
pub(crate) fn libdrm_version(fd: BorrowedFd<'_>) -> io::Result<LibdrmVersion> {
    // SAFETY: a plain call on a valid fd; the result is NULL or an owned drmVersion.
    let p = unsafe { drmGetVersion(fd.as_raw_fd()) };
    NonNull::new(p)
        .map(LibdrmVersion)
        .ok_or_else(io::Error::last_os_error)
}

macro_rules! libdrm_ioctl {
    ($(#[$m:meta])* $fname:ident: $cname:ident($ty:ty)) => {
        $(#[$m])*
        pub(crate) fn $fname(fd: BorrowedFd<'_>, arg: &mut $ty) -> io::Result<()> {
            // SAFETY: `drmIoctl` passes `arg` to `$cname`, an ioctl over exactly one `$ty`
            // (no pointer fields); `arg` is an exclusive borrow that outlives the call.
            check(unsafe {
                drmIoctl(fd.as_raw_fd(), c_ulong::from(sys::$cname), (arg as *mut $ty).cast())
            })
        }
    };
}

libdrm_ioctl!(
    /// `drmIoctl(DRM_IOCTL_MODE_CREATE_DUMB)`.
    libdrm_create_dumb: DRM_IOCTL_MODE_CREATE_DUMB(sys::drm_mode_create_dumb));
libdrm_ioctl!(
    /// `drmIoctl(DRM_IOCTL_MODE_MAP_DUMB)`.
    libdrm_map_dumb: DRM_IOCTL_MODE_MAP_DUMB(sys::drm_mode_map_dumb));
libdrm_ioctl!(
    /// `drmIoctl(DRM_IOCTL_MODE_DESTROY_DUMB)`.
    libdrm_destroy_dumb: DRM_IOCTL_MODE_DESTROY_DUMB(sys::drm_mode_destroy_dumb));

/// `drmPrimeHandleToFD`.
pub(crate) fn libdrm_prime_handle_to_fd(
    fd: BorrowedFd<'_>,
    handle: u32,
    flags: u32,
) -> io::Result<OwnedFd> {
    let mut out: c_int = -1;
    // SAFETY: `out` is a live c_int the call writes once.
    check(unsafe { drmPrimeHandleToFD(fd.as_raw_fd(), handle, flags, &mut out) })?;
    adopt(out)
}

/// `drmPrimeFDToHandle`.
pub(crate) fn libdrm_prime_fd_to_handle(
    fd: BorrowedFd<'_>,
    buf: BorrowedFd<'_>,
) -> io::Result<u32> {
    let mut h = 0u32;
    // SAFETY: `h` is a live u32 the call writes once; `buf` is only read as a number.
    check(unsafe { drmPrimeFDToHandle(fd.as_raw_fd(), buf.as_raw_fd(), &mut h) })?;
    Ok(h)
}

/// `drmCloseBufferHandle` (GEM_CLOSE).
pub(crate) fn libdrm_close_buffer_handle(fd: BorrowedFd<'_>, handle: u32) -> io::Result<()> {
    // SAFETY: plain values only.
    check(unsafe { drmCloseBufferHandle(fd.as_raw_fd(), handle) })
}
