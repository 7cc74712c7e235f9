//! Raw calls for `syncobj` (see the module header of `sys_call` for the safety argument).
//!
//! The array ioctls (`WAIT`, `RESET`, `SIGNAL`, `TIMELINE_*`, `QUERY`) carry user pointers,
//! so their raw forms are `unsafe fn`; the safe wrappers below build the pointers from
//! slices that outlive the call.

use super::{BorrowedFd, Error};
use ioctl_sys::drm as sys;
use rustix::ioctl::{Opcode, Updater, ioctl};

drm_ioctl!(safe
    /// Creates a sync object (`flags`: `DRM_SYNCOBJ_CREATE_SIGNALED`). Nodes: primary and
    /// render. EOPNOTSUPP where the driver lacks `DRIVER_SYNCOBJ`.
    DRM_IOCTL_SYNCOBJ_CREATE => syncobj_create(&mut sys::drm_syncobj_create));
drm_ioctl!(safe
    /// Destroys a sync object handle of this open file (EINVAL for an unknown handle).
    DRM_IOCTL_SYNCOBJ_DESTROY => syncobj_destroy(&mut sys::drm_syncobj_destroy));
drm_ioctl!(safe
    /// Exports a sync object as an fd, or its current fence as a sync_file
    /// (`DRM_SYNCOBJ_HANDLE_TO_FD_FLAGS_EXPORT_SYNC_FILE`). The new fd comes back in `fd`.
    DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD => syncobj_handle_to_fd(&mut sys::drm_syncobj_handle));
drm_ioctl!(safe
    /// Imports a sync object fd as a new handle, or (with
    /// `DRM_SYNCOBJ_FD_TO_HANDLE_FLAGS_IMPORT_SYNC_FILE`) a sync_file's fence into the
    /// existing handle named in `handle`. The kernel only reads the fd number.
    DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE => syncobj_fd_to_handle(&mut sys::drm_syncobj_handle));
drm_ioctl!(safe
    /// Copies the fence at one point of a sync object to a point of another (point 0:
    /// binary). Needs `DRIVER_SYNCOBJ_TIMELINE`.
    DRM_IOCTL_SYNCOBJ_TRANSFER => syncobj_transfer(&mut sys::drm_syncobj_transfer));
drm_ioctl!(safe
    /// Registers an eventfd that the kernel signals when a point signals (or becomes
    /// available). Since Linux 6.6; needs `DRIVER_SYNCOBJ_TIMELINE`.
    DRM_IOCTL_SYNCOBJ_EVENTFD => syncobj_eventfd(&mut sys::drm_syncobj_eventfd));
drm_ioctl!(unsafe
    /// Waits for binary sync objects (`handles` points at `count_handles` u32s).
    DRM_IOCTL_SYNCOBJ_WAIT => syncobj_wait_raw(&mut sys::drm_syncobj_wait));
drm_ioctl!(unsafe
    /// Waits for points of timeline sync objects (`handles` and `points` arrays).
    DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT => syncobj_timeline_wait_raw(&mut sys::drm_syncobj_timeline_wait));
drm_ioctl!(unsafe
    /// Removes the fence of each sync object in the `handles` array.
    DRM_IOCTL_SYNCOBJ_RESET => syncobj_reset_raw(&mut sys::drm_syncobj_array));
drm_ioctl!(unsafe
    /// Gives each sync object in the `handles` array a signalled fence.
    DRM_IOCTL_SYNCOBJ_SIGNAL => syncobj_signal_raw(&mut sys::drm_syncobj_array));
drm_ioctl!(unsafe
    /// Adds a signalled point to each timeline in `handles` (the kernel reads `points`).
    DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL => syncobj_timeline_signal_raw(&mut sys::drm_syncobj_timeline_array));
drm_ioctl!(unsafe
    /// Reads the current point of each timeline in `handles` (the kernel writes `points`).
    DRM_IOCTL_SYNCOBJ_QUERY => syncobj_query_raw(&mut sys::drm_syncobj_timeline_array));

fn count(len: usize) -> Result<u32, Error> {
    u32::try_from(len).map_err(|_| Error::InvalidArgument {
        what: format!("{len} sync objects do not fit the ioctl's u32 count"),
    })
}

fn same_len(handles: &[u32], points: usize) -> Result<(), Error> {
    if handles.len() == points {
        Ok(())
    } else {
        Err(Error::InvalidArgument {
            what: format!(
                "{} sync object handles but {points} timeline points",
                handles.len()
            ),
        })
    }
}

/// An array pointer as the kernel takes it; 0 for an empty slice (the kernel never reads it
/// then).
fn ptr_of<T>(s: &[T]) -> u64 {
    if s.is_empty() { 0 } else { s.as_ptr() as u64 }
}

/// `DRM_IOCTL_SYNCOBJ_WAIT` over `handles`; returns the kernel's `first_signaled`.
pub(crate) fn syncobj_wait(
    fd: BorrowedFd<'_>,
    handles: &[u32],
    timeout_nsec: i64,
    flags: u32,
) -> Result<u32, Error> {
    let mut a = sys::drm_syncobj_wait {
        handles: ptr_of(handles),
        timeout_nsec,
        count_handles: count(handles.len())?,
        flags,
        ..Default::default()
    };
    // SAFETY: `handles`/`count_handles` describe the `handles` slice, which the kernel only
    // reads and which outlives the call.
    unsafe { syncobj_wait_raw(fd, &mut a)? };
    Ok(a.first_signaled)
}

/// `DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT` over `handles` and `points` (same length).
pub(crate) fn syncobj_timeline_wait(
    fd: BorrowedFd<'_>,
    handles: &[u32],
    points: &[u64],
    timeout_nsec: i64,
    flags: u32,
) -> Result<u32, Error> {
    same_len(handles, points.len())?;
    let mut a = sys::drm_syncobj_timeline_wait {
        handles: ptr_of(handles),
        points: ptr_of(points),
        timeout_nsec,
        count_handles: count(handles.len())?,
        flags,
        ..Default::default()
    };
    // SAFETY: both arrays are slices of exactly `count_handles` entries that the kernel only
    // reads and that outlive the call.
    unsafe { syncobj_timeline_wait_raw(fd, &mut a)? };
    Ok(a.first_signaled)
}

/// Which of the two `drm_syncobj_array` ioctls to issue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArrayOp {
    /// `DRM_IOCTL_SYNCOBJ_RESET`.
    Reset,
    /// `DRM_IOCTL_SYNCOBJ_SIGNAL`.
    Signal,
}

/// `DRM_IOCTL_SYNCOBJ_RESET` or `_SIGNAL` over `handles`, with `pad` as given (the kernel
/// wants 0).
pub(crate) fn syncobj_array(
    fd: BorrowedFd<'_>,
    op: ArrayOp,
    handles: &[u32],
    pad: u32,
) -> Result<(), Error> {
    let mut a = sys::drm_syncobj_array {
        handles: ptr_of(handles),
        count_handles: count(handles.len())?,
        pad,
    };
    // SAFETY: `handles`/`count_handles` describe the `handles` slice, which the kernel only
    // reads and which outlives the call.
    unsafe {
        match op {
            ArrayOp::Reset => syncobj_reset_raw(fd, &mut a),
            ArrayOp::Signal => syncobj_signal_raw(fd, &mut a),
        }
    }
}

/// `DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL`: signals `points[i]` on `handles[i]`.
pub(crate) fn syncobj_timeline_signal(
    fd: BorrowedFd<'_>,
    handles: &[u32],
    points: &[u64],
    flags: u32,
) -> Result<(), Error> {
    same_len(handles, points.len())?;
    let mut a = sys::drm_syncobj_timeline_array {
        handles: ptr_of(handles),
        points: ptr_of(points),
        count_handles: count(handles.len())?,
        flags,
    };
    // SAFETY: both arrays are slices of exactly `count_handles` entries that the kernel only
    // reads (TIMELINE_SIGNAL copies points in, never out) and that outlive the call.
    unsafe { syncobj_timeline_signal_raw(fd, &mut a) }
}

/// `DRM_IOCTL_SYNCOBJ_QUERY`: writes the point of `handles[i]` into `points[i]`.
pub(crate) fn syncobj_query(
    fd: BorrowedFd<'_>,
    handles: &[u32],
    points: &mut [u64],
    flags: u32,
) -> Result<(), Error> {
    same_len(handles, points.len())?;
    let mut a = sys::drm_syncobj_timeline_array {
        handles: ptr_of(handles),
        points: if points.is_empty() {
            0
        } else {
            points.as_mut_ptr() as u64
        },
        count_handles: count(handles.len())?,
        flags,
    };
    // SAFETY: `handles` is read and `points` (an exclusive borrow) is written, each exactly
    // `count_handles` entries, both outliving the call.
    unsafe { syncobj_query_raw(fd, &mut a) }
}

/// Reinterprets typed handles as the `u32` array the kernel reads, without copying.
pub(crate) fn handles_u32(h: &[crate::syncobj::SyncobjHandle]) -> &[u32] {
    // SAFETY: `SyncobjHandle` is `repr(transparent)` over `NonZeroU32`, which has the layout
    // of `u32`; every `NonZeroU32` is a valid `u32`; the new slice borrows `h` for the same
    // lifetime and length.
    unsafe { core::slice::from_raw_parts(h.as_ptr().cast::<u32>(), h.len()) }
}
