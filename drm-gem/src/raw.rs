//! The fence ioctls with every field as the kernel sees it: no capability probe, no
//! ownership, no checks beyond what the ioctl structs can hold. Only with the cargo feature
//! `conformance`.
//!
//! **This module bypasses ownership.** A handle number is just a number here:
//! [`syncobj_destroy`] can destroy a handle a [`Syncobj`](crate::Syncobj) owns, and that
//! `Syncobj`'s drop then destroys whatever object the kernel gave the number to next (the
//! same for fence ids of [`Vgem`] fences). Nothing here can cause undefined behaviour, but
//! it can break the typed API's guarantees, which is why it is behind a feature that only
//! conformance tests (`kernel-tests`) enable.
//!
//! This is for conformance tests (bad flags, non-zero padding, handles and fd numbers that
//! do not exist, calls on drivers without support) and for fields newer than this crate.
//! Everything else should use the typed API ([`Syncobj`](crate::Syncobj),
//! [`DmaBuf`](crate::DmaBuf), [`Vgem`]), which cannot express these
//! mistakes.
//!
//! - Handles here are plain `u32`s, 0 included, and are **not owned**: a handle a call
//!   creates stays until it is destroyed with [`syncobj_destroy`] or the device file closes.
//! - fd numbers passed *to* the kernel are plain `i32`s, because a closed or invalid fd
//!   cannot be a `BorrowedFd`; the kernel only looks them up, never closes them. fds the
//!   kernel *returns* come back as `OwnedFd`.
//! - Errors name the ioctl and carry the kernel's errno, as everywhere in this crate.

use crate::device::Device;
use crate::driver::vgem::Vgem;
use crate::error::Result;
use crate::sys_call::{self, ArrayOp};
use ioctl_sys::{dma_buf as dsys, drm as sys, vgem as vsys};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};

/// `DRM_IOCTL_SYNCOBJ_CREATE` with any `flags`; returns the new (unowned) handle.
pub fn syncobj_create(dev: &Device, flags: u32) -> Result<u32> {
    let mut a = sys::drm_syncobj_create { handle: 0, flags };
    sys_call::syncobj_create(dev.as_fd(), &mut a)?;
    Ok(a.handle)
}

/// `DRM_IOCTL_SYNCOBJ_DESTROY` with any handle and `pad`.
pub fn syncobj_destroy(dev: &Device, handle: u32, pad: u32) -> Result<()> {
    let mut a = sys::drm_syncobj_destroy { handle, pad };
    sys_call::syncobj_destroy(dev.as_fd(), &mut a)
}

/// `DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD` with any handle, `flags` and `pad`; returns the new fd.
pub fn syncobj_handle_to_fd(dev: &Device, handle: u32, flags: u32, pad: u32) -> Result<OwnedFd> {
    let mut a = sys::drm_syncobj_handle {
        handle,
        flags,
        fd: -1,
        pad,
    };
    sys_call::syncobj_handle_to_fd(dev.as_fd(), &mut a)?;
    sys_call::own_fd("DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD", a.fd)
}

/// `DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE` with any fd number, target `handle` (read only with the
/// import-sync-file flag), `flags` and `pad`; returns the `handle` field afterwards (a new,
/// unowned handle for a plain import).
pub fn syncobj_fd_to_handle(
    dev: &Device,
    fd: i32,
    handle: u32,
    flags: u32,
    pad: u32,
) -> Result<u32> {
    let mut a = sys::drm_syncobj_handle {
        handle,
        flags,
        fd,
        pad,
    };
    sys_call::syncobj_fd_to_handle(dev.as_fd(), &mut a)?;
    Ok(a.handle)
}

/// `DRM_IOCTL_SYNCOBJ_WAIT` with any handles, absolute timeout and `flags`; returns
/// `first_signaled` (ETIME on timeout is an error here).
pub fn syncobj_wait(dev: &Device, handles: &[u32], timeout_nsec: i64, flags: u32) -> Result<u32> {
    sys_call::syncobj_wait(dev.as_fd(), handles, timeout_nsec, flags)
}

/// `DRM_IOCTL_SYNCOBJ_RESET` with any handles and `pad`.
pub fn syncobj_reset(dev: &Device, handles: &[u32], pad: u32) -> Result<()> {
    sys_call::syncobj_array(dev.as_fd(), ArrayOp::Reset, handles, pad)
}

/// `DRM_IOCTL_SYNCOBJ_SIGNAL` with any handles and `pad`.
pub fn syncobj_signal(dev: &Device, handles: &[u32], pad: u32) -> Result<()> {
    sys_call::syncobj_array(dev.as_fd(), ArrayOp::Signal, handles, pad)
}

/// `DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL` with any handles, points (same length) and `flags`.
pub fn syncobj_timeline_signal(
    dev: &Device,
    handles: &[u32],
    points: &[u64],
    flags: u32,
) -> Result<()> {
    sys_call::syncobj_timeline_signal(dev.as_fd(), handles, points, flags)
}

/// `DRM_IOCTL_SYNCOBJ_QUERY` with any handles and `flags`, into `points` (same length).
pub fn syncobj_query(dev: &Device, handles: &[u32], points: &mut [u64], flags: u32) -> Result<()> {
    sys_call::syncobj_query(dev.as_fd(), handles, points, flags)
}

/// `DRM_IOCTL_SYNCOBJ_EVENTFD` with every field as given.
pub fn syncobj_eventfd(
    dev: &Device,
    handle: u32,
    point: u64,
    eventfd: i32,
    flags: u32,
    pad: u32,
) -> Result<()> {
    let mut a = sys::drm_syncobj_eventfd {
        handle,
        flags,
        point,
        fd: eventfd,
        pad,
    };
    sys_call::syncobj_eventfd(dev.as_fd(), &mut a)
}

/// `DMA_BUF_IOCTL_SYNC` with any `flags`. A successful `START` must be paired with an
/// `END` by the caller.
pub fn dma_buf_sync(buf: BorrowedFd<'_>, flags: u64) -> Result<()> {
    let mut a = dsys::dma_buf_sync { flags };
    sys_call::dma_buf_sync(buf, &mut a)
}

/// `DMA_BUF_IOCTL_IMPORT_SYNC_FILE` with any fd number and `flags`.
pub fn dma_buf_import_sync_file(buf: BorrowedFd<'_>, sync_file: i32, flags: u32) -> Result<()> {
    let mut a = dsys::dma_buf_import_sync_file {
        flags,
        fd: sync_file,
    };
    sys_call::dma_buf_import_sync_file(buf, &mut a)
}

/// `DRM_IOCTL_VGEM_FENCE_ATTACH` with any handle, `flags` and `pad`; returns the fence id,
/// which is not owned (signal it with [`vgem_fence_signal`], or the kernel does after 10 s).
pub fn vgem_fence_attach(
    vgem: &Vgem<impl crate::DeviceRef>,
    handle: u32,
    flags: u32,
    pad: u32,
) -> Result<u32> {
    let mut a = vsys::drm_vgem_fence_attach {
        handle,
        flags,
        out_fence: 0,
        pad,
    };
    sys_call::vgem_fence_attach(vgem.device().as_fd(), &mut a)?;
    Ok(a.out_fence)
}

/// `DRM_IOCTL_VGEM_FENCE_SIGNAL` with any fence id and `flags`.
pub fn vgem_fence_signal(vgem: &Vgem<impl crate::DeviceRef>, fence: u32, flags: u32) -> Result<()> {
    let mut a = vsys::drm_vgem_fence_signal { fence, flags };
    sys_call::vgem_fence_signal(vgem.device().as_fd(), &mut a)
}
