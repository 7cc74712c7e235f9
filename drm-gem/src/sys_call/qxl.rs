//! Raw calls for `qxl` (see the module header of `sys_call` for the safety argument).
//!
//! Every qxl ioctl here takes plain data (EXECBUFFER, which carries command pointers, is not
//! wrapped). All need an authenticated primary-node file (`DRM_AUTH`).

use crate::error::Error;
use rustix::fd::BorrowedFd;
use rustix::ioctl::{Opcode, Updater, ioctl};

drm_ioctl!(safe
    /// Allocates a buffer object in qxl VRAM and returns its handle.
    qxl::DRM_IOCTL_QXL_ALLOC => qxl_alloc(&mut ioctl_sys::qxl::drm_qxl_alloc));
drm_ioctl!(safe
    /// Gets the fake mmap offset of a qxl buffer object.
    qxl::DRM_IOCTL_QXL_MAP => qxl_map(&mut ioctl_sys::qxl::drm_qxl_map));
drm_ioctl!(safe
    /// Reads one driver parameter (`QXL_PARAM_*`) into `value`.
    qxl::DRM_IOCTL_QXL_GETPARAM => qxl_getparam(&mut ioctl_sys::qxl::drm_qxl_getparam));
drm_ioctl!(safe
    /// Asks whether the device announces one client capability bit (`_IOW`: nothing is
    /// written back; success means "set", ENOSYS means "not set").
    qxl::DRM_IOCTL_QXL_CLIENTCAP => qxl_clientcap(&mut ioctl_sys::qxl::drm_qxl_clientcap));
drm_ioctl!(safe
    /// Allocates a surface buffer object (in the surface BAR) and returns its handle.
    qxl::DRM_IOCTL_QXL_ALLOC_SURF => qxl_alloc_surf(&mut ioctl_sys::qxl::drm_qxl_alloc_surf));
