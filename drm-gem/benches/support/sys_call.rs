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
            // A failure cannot be reported from Drop, which never panics.
            let _ = unsafe { munmap(self.ptr.as_ptr().cast(), self.len) };
        } else {
            // SAFETY: ptr/len are exactly the mapping made in `shared`/`anon`, unmapped only here.
            // A failure cannot be reported from Drop, which never panics.
            let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
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

// ---------------------------------------------------------------------------------------

/// libdrm's KMS calls (xf86drmMode.h of libdrm 2.4.114), for `benches/kms.rs`. Only the
/// structs whose fields the benchmark reads are declared field by field; the others are
/// opaque and only ever passed back to their free function.
pub(crate) mod kms {
    // benches/peers.rs compiles this module too and uses none of it.
    #![allow(dead_code)]

    use super::{check, sys};
    use rustix::fd::{AsRawFd, BorrowedFd};
    use std::ffi::{c_char, c_int, c_void};
    use std::io;
    use std::ptr::NonNull;

    // ---------------------------------------------------------------------------------------
    // libdrm's KMS calls (xf86drmMode.h of libdrm 2.4.114), for benches/kms.rs. Only the
    // structs whose fields the benchmark reads are declared field by field; the others are
    // opaque and only ever passed back to their free function.

    /// `drmModeRes`.
    #[repr(C)]
    struct DrmModeResC {
        count_fbs: c_int,
        fbs: *mut u32,
        count_crtcs: c_int,
        crtcs: *mut u32,
        count_connectors: c_int,
        connectors: *mut u32,
        count_encoders: c_int,
        encoders: *mut u32,
        min_width: u32,
        max_width: u32,
        min_height: u32,
        max_height: u32,
    }

    /// `drmModeConnector`.
    #[repr(C)]
    struct DrmModeConnectorC {
        connector_id: u32,
        encoder_id: u32,
        connector_type: u32,
        connector_type_id: u32,
        connection: c_int,
        mm_width: u32,
        mm_height: u32,
        subpixel: c_int,
        count_modes: c_int,
        modes: *mut sys::drm_mode_modeinfo,
        count_props: c_int,
        props: *mut u32,
        prop_values: *mut u64,
        count_encoders: c_int,
        encoders: *mut u32,
    }

    /// `drmModePlaneRes`.
    #[repr(C)]
    struct DrmModePlaneResC {
        count_planes: u32,
        planes: *mut u32,
    }

    /// `drmModePlane`.
    #[repr(C)]
    struct DrmModePlaneC {
        count_formats: u32,
        formats: *mut u32,
        plane_id: u32,
        crtc_id: u32,
        fb_id: u32,
        crtc_x: u32,
        crtc_y: u32,
        x: u32,
        y: u32,
        possible_crtcs: u32,
        gamma_size: u32,
    }

    /// `drmModeObjectProperties`.
    #[repr(C)]
    struct DrmModeObjectPropertiesC {
        count_props: u32,
        props: *mut u32,
        prop_values: *mut u64,
    }

    /// `drmModePropertyRes`.
    #[repr(C)]
    struct DrmModePropertyC {
        prop_id: u32,
        flags: u32,
        name: [c_char; 32],
        count_values: c_int,
        values: *mut u64,
        count_enums: c_int,
        enums: *mut c_void,
        count_blobs: c_int,
        blob_ids: *mut u32,
    }

    /// `drmModePropertyBlobRes`.
    #[repr(C)]
    struct DrmModePropertyBlobC {
        id: u32,
        length: u32,
        data: *mut c_void,
    }

    /// `drmEventContext` (version 2).
    #[repr(C)]
    struct DrmEventContextC {
        version: c_int,
        vblank_handler: Option<unsafe extern "C" fn(c_int, u32, u32, u32, *mut c_void)>,
        page_flip_handler: Option<unsafe extern "C" fn(c_int, u32, u32, u32, *mut c_void)>,
    }

    /// Opaque libdrm objects, only passed back to libdrm.
    #[repr(C)]
    struct Opaque {
        _p: [u8; 0],
    }

    #[link(name = "drm")]
    unsafe extern "C" {
        fn drmSetClientCap(fd: c_int, capability: u64, value: u64) -> c_int;
        fn drmModeGetResources(fd: c_int) -> *mut DrmModeResC;
        fn drmModeFreeResources(p: *mut DrmModeResC);
        fn drmModeGetConnectorCurrent(fd: c_int, id: u32) -> *mut DrmModeConnectorC;
        fn drmModeFreeConnector(p: *mut DrmModeConnectorC);
        fn drmModeGetEncoder(fd: c_int, id: u32) -> *mut Opaque;
        fn drmModeFreeEncoder(p: *mut Opaque);
        fn drmModeGetCrtc(fd: c_int, id: u32) -> *mut Opaque;
        fn drmModeFreeCrtc(p: *mut Opaque);
        fn drmModeGetPlaneResources(fd: c_int) -> *mut DrmModePlaneResC;
        fn drmModeFreePlaneResources(p: *mut DrmModePlaneResC);
        fn drmModeGetPlane(fd: c_int, id: u32) -> *mut DrmModePlaneC;
        fn drmModeFreePlane(p: *mut DrmModePlaneC);
        fn drmModeObjectGetProperties(
            fd: c_int,
            id: u32,
            kind: u32,
        ) -> *mut DrmModeObjectPropertiesC;
        fn drmModeFreeObjectProperties(p: *mut DrmModeObjectPropertiesC);
        fn drmModeGetProperty(fd: c_int, id: u32) -> *mut DrmModePropertyC;
        fn drmModeFreeProperty(p: *mut DrmModePropertyC);
        fn drmModeGetPropertyBlob(fd: c_int, id: u32) -> *mut DrmModePropertyBlobC;
        fn drmModeFreePropertyBlob(p: *mut DrmModePropertyBlobC);
        fn drmModeAtomicAlloc() -> *mut Opaque;
        fn drmModeAtomicFree(req: *mut Opaque);
        fn drmModeAtomicAddProperty(req: *mut Opaque, obj: u32, prop: u32, value: u64) -> c_int;
        fn drmModeAtomicCommit(
            fd: c_int,
            req: *mut Opaque,
            flags: u32,
            user_data: *mut c_void,
        ) -> c_int;
        fn drmModePageFlip(
            fd: c_int,
            crtc: u32,
            fb: u32,
            flags: u32,
            user_data: *mut c_void,
        ) -> c_int;
        fn drmHandleEvent(fd: c_int, ctx: *mut DrmEventContextC) -> c_int;
    }

    /// What one KMS snapshot saw, the same summary for every implementation (compared by the
    /// agreement check).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub(crate) struct KmsSummary {
        /// Connectors.
        pub(crate) connectors: usize,
        /// Modes over all connectors.
        pub(crate) modes: usize,
        /// Encoders.
        pub(crate) encoders: usize,
        /// CRTCs.
        pub(crate) crtcs: usize,
        /// Planes.
        pub(crate) planes: usize,
        /// Formats over all planes.
        pub(crate) formats: usize,
        /// Property values over all connectors, CRTCs and planes.
        pub(crate) props: usize,
        /// Bytes of the `EDID` and `IN_FORMATS` blobs fetched.
        pub(crate) blob_bytes: usize,
    }

    /// `DRM_MODE_OBJECT_*` of the objects whose properties the snapshot reads.
    const OBJ_CONNECTOR: u32 = 0xc0c0_c0c0;
    const OBJ_CRTC: u32 = 0xcccc_cccc;
    const OBJ_PLANE: u32 = 0xeeee_eeee;
    /// `DRM_MODE_PROP_BLOB`.
    const PROP_BLOB: u32 = 1 << 4;

    /// Views a libdrm array as a slice (empty for NULL or a non-positive count).
    ///
    /// # Safety
    /// `p` is NULL or points to `n` live `T`s that outlive the returned slice.
    unsafe fn arr<'a, T>(p: *const T, n: impl TryInto<usize>) -> &'a [T] {
        let n = n.try_into().unwrap_or(0);
        if p.is_null() || n == 0 {
            &[]
        } else {
            // SAFETY: the caller's contract.
            unsafe { core::slice::from_raw_parts(p, n) }
        }
    }

    fn null_err<T>(p: *mut T) -> io::Result<NonNull<T>> {
        NonNull::new(p).ok_or_else(io::Error::last_os_error)
    }

    /// `drmModeObjectGetProperties` of one object, then `drmModeGetProperty` of every property
    /// (no cache, as modetest and drm_info do), and `drmModeGetPropertyBlob` of the `EDID` and
    /// `IN_FORMATS` blobs. Adds to `s`.
    fn libdrm_object_props(fd: c_int, id: u32, kind: u32, s: &mut KmsSummary) -> io::Result<()> {
        // SAFETY: a plain call; the result is NULL or owned here and freed below.
        let op = null_err(unsafe { drmModeObjectGetProperties(fd, id, kind) })?;
        // SAFETY: libdrm keeps `props`/`prop_values` (count_props entries each) alive until
        // drmModeFreeObjectProperties, called once after the last use of the slices.
        let (ids, vals) = unsafe {
            let o = op.as_ref();
            (
                arr(o.props, o.count_props).to_vec(),
                arr(o.prop_values, o.count_props).to_vec(),
            )
        };
        // SAFETY: the pointer came from drmModeObjectGetProperties; freed once.
        unsafe { drmModeFreeObjectProperties(op.as_ptr()) };
        s.props += ids.len();
        for (&pid, &val) in ids.iter().zip(&vals) {
            // SAFETY: a plain call; the result is NULL or owned here and freed below.
            let pp = null_err(unsafe { drmModeGetProperty(fd, pid) })?;
            // SAFETY: the struct lives until drmModeFreeProperty; `name` is a fixed array.
            let (flags, name) = unsafe {
                let p = pp.as_ref();
                let name: Vec<u8> = p
                    .name
                    .iter()
                    .take_while(|&&c| c != 0)
                    .map(|&c| c as u8)
                    .collect();
                (p.flags, name)
            };
            // SAFETY: from drmModeGetProperty; freed once.
            unsafe { drmModeFreeProperty(pp.as_ptr()) };
            if flags & PROP_BLOB != 0 && val != 0 && (name == b"EDID" || name == b"IN_FORMATS") {
                let bid = u32::try_from(val).map_err(|_| io::Error::other("blob id over u32"))?;
                // SAFETY: a plain call; the result is NULL or owned here and freed below.
                let bp = null_err(unsafe { drmModeGetPropertyBlob(fd, bid) })?;
                // SAFETY: `data` holds `length` bytes until drmModeFreePropertyBlob.
                let len = unsafe { arr(bp.as_ref().data.cast::<u8>(), bp.as_ref().length).len() };
                // SAFETY: from drmModeGetPropertyBlob; freed once.
                unsafe { drmModeFreePropertyBlob(bp.as_ptr()) };
                s.blob_bytes += len;
            }
        }
        Ok(())
    }

    /// The whole KMS state through libdrm: `drmSetClientCap` (UNIVERSAL_PLANES, ATOMIC,
    /// WRITEBACK_CONNECTORS, as `Snapshot::take` does), `drmModeGetResources`,
    /// `drmModeGetConnectorCurrent`, `drmModeGetEncoder`, `drmModeGetCrtc`,
    /// `drmModeGetPlaneResources`, `drmModeGetPlane`, and the properties of every connector,
    /// CRTC and plane (see `libdrm_object_props`). Everything is freed before it returns.
    pub(crate) fn libdrm_snapshot(fd: BorrowedFd<'_>) -> io::Result<KmsSummary> {
        let fd = fd.as_raw_fd();
        for cap in [
            sys::DRM_CLIENT_CAP_UNIVERSAL_PLANES,
            sys::DRM_CLIENT_CAP_ATOMIC,
            sys::DRM_CLIENT_CAP_WRITEBACK_CONNECTORS,
        ] {
            // SAFETY: plain values; a refusal is ignored, as Snapshot::take ignores it.
            let _ = unsafe { drmSetClientCap(fd, u64::from(cap), 1) };
        }
        let mut s = KmsSummary::default();
        // SAFETY: a plain call; the result is NULL or owned here and freed below.
        let rp = null_err(unsafe { drmModeGetResources(fd) })?;
        // SAFETY: the arrays live (with their counts) until drmModeFreeResources, called once
        // right after they are copied.
        let (conns, encs, crtcs) = unsafe {
            let r = rp.as_ref();
            (
                arr(r.connectors, r.count_connectors).to_vec(),
                arr(r.encoders, r.count_encoders).to_vec(),
                arr(r.crtcs, r.count_crtcs).to_vec(),
            )
        };
        // SAFETY: from drmModeGetResources; freed once.
        unsafe { drmModeFreeResources(rp.as_ptr()) };
        for &id in &conns {
            // SAFETY: a plain call; the result is NULL or owned here and freed below.
            let cp = null_err(unsafe { drmModeGetConnectorCurrent(fd, id) })?;
            // SAFETY: `count_modes` is the length of `modes` until drmModeFreeConnector.
            s.modes += unsafe { arr(cp.as_ref().modes, cp.as_ref().count_modes).len() };
            // SAFETY: from drmModeGetConnectorCurrent; freed once.
            unsafe { drmModeFreeConnector(cp.as_ptr()) };
            s.connectors += 1;
            libdrm_object_props(fd, id, OBJ_CONNECTOR, &mut s)?;
        }
        for &id in &encs {
            // SAFETY: a plain call; the result is NULL or owned and freed at once.
            let e = null_err(unsafe { drmModeGetEncoder(fd, id) })?;
            // SAFETY: from drmModeGetEncoder; freed once.
            unsafe { drmModeFreeEncoder(e.as_ptr()) };
            s.encoders += 1;
        }
        for &id in &crtcs {
            // SAFETY: as for encoders.
            let c = null_err(unsafe { drmModeGetCrtc(fd, id) })?;
            // SAFETY: from drmModeGetCrtc; freed once.
            unsafe { drmModeFreeCrtc(c.as_ptr()) };
            s.crtcs += 1;
            libdrm_object_props(fd, id, OBJ_CRTC, &mut s)?;
        }
        // SAFETY: a plain call; the result is NULL or owned here and freed below.
        let pr = null_err(unsafe { drmModeGetPlaneResources(fd) })?;
        // SAFETY: `planes` holds `count_planes` ids until drmModeFreePlaneResources.
        let planes = unsafe { arr(pr.as_ref().planes, pr.as_ref().count_planes).to_vec() };
        // SAFETY: from drmModeGetPlaneResources; freed once.
        unsafe { drmModeFreePlaneResources(pr.as_ptr()) };
        for &id in &planes {
            // SAFETY: a plain call; the result is NULL or owned here and freed below.
            let pp = null_err(unsafe { drmModeGetPlane(fd, id) })?;
            // SAFETY: `formats` holds `count_formats` entries until drmModeFreePlane.
            s.formats += unsafe { arr(pp.as_ref().formats, pp.as_ref().count_formats).len() };
            // SAFETY: from drmModeGetPlane; freed once.
            unsafe { drmModeFreePlane(pp.as_ptr()) };
            s.planes += 1;
            libdrm_object_props(fd, id, OBJ_PLANE, &mut s)?;
        }
        Ok(s)
    }

    /// `drmModeAtomicAlloc`, one `drmModeAtomicAddProperty` per entry, `drmModeAtomicCommit`
    /// with `flags`, `drmModeAtomicFree`: how a libdrm client issues one atomic request.
    pub(crate) fn libdrm_atomic(
        fd: BorrowedFd<'_>,
        entries: &[(u32, u32, u64)],
        flags: u32,
    ) -> io::Result<()> {
        // SAFETY: a plain call; the request is NULL or owned here and freed below.
        let req = NonNull::new(unsafe { drmModeAtomicAlloc() })
            .ok_or_else(|| io::Error::other("drmModeAtomicAlloc"))?;
        let mut r = Ok(());
        for &(o, p, v) in entries {
            // SAFETY: `req` is the live request from drmModeAtomicAlloc.
            if unsafe { drmModeAtomicAddProperty(req.as_ptr(), o, p, v) } < 0 {
                r = Err(io::Error::other("drmModeAtomicAddProperty"));
                break;
            }
        }
        if r.is_ok() {
            // SAFETY: `req` is live; no user data pointer.
            r = check(unsafe {
                drmModeAtomicCommit(fd.as_raw_fd(), req.as_ptr(), flags, core::ptr::null_mut())
            });
        }
        // SAFETY: from drmModeAtomicAlloc; freed once.
        unsafe { drmModeAtomicFree(req.as_ptr()) };
        r
    }

    unsafe extern "C" fn on_flip(_fd: c_int, _seq: u32, _sec: u32, _usec: u32, data: *mut c_void) {
        // SAFETY: `libdrm_flip_and_wait` passes a pointer to its live u64 counter as the flip's
        // user data, and drmHandleEvent calls this only from within that function.
        unsafe { *data.cast::<u64>() += 1 };
    }

    /// `drmModePageFlip(DRM_MODE_PAGE_FLIP_EVENT)` to `fb` on `crtc`, then `poll` and
    /// `drmHandleEvent` until the flip-complete event has been handled (10 s at most).
    pub(crate) fn libdrm_flip_and_wait(fd: BorrowedFd<'_>, crtc: u32, fb: u32) -> io::Result<()> {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let done = std::cell::Cell::new(0u64);
        let raw = fd.as_raw_fd();
        // SAFETY: `done` (a Cell: `on_flip` writes through its pointer) outlives the call
        // and every drmHandleEvent below, the only place where the kernel's event, which
        // carries this pointer back, is consumed.
        check(unsafe {
            drmModePageFlip(
                raw,
                crtc,
                fb,
                sys::DRM_MODE_PAGE_FLIP_EVENT,
                done.as_ptr().cast(),
            )
        })?;
        let mut ctx = DrmEventContextC {
            version: 2,
            vblank_handler: None,
            page_flip_handler: Some(on_flip),
        };
        let ts = Timespec {
            tv_sec: 10,
            tv_nsec: 0,
        };
        while done.get() == 0 {
            let mut fds = [PollFd::new(&fd, PollFlags::IN)];
            match poll(&mut fds, Some(&ts)) {
                Ok(0) => return Err(io::Error::other("no flip event in 10 s")),
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
            // SAFETY: `ctx` is a live version-2 context whose handler matches libdrm's
            // signature; `done` is still alive (see above).
            check(unsafe { drmHandleEvent(raw, &mut ctx) })?;
        }
        Ok(())
    }
}
