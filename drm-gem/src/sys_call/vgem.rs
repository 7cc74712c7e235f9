//! Raw calls for `vgem` (see the module header of `sys_call` for the safety argument).
//!
//! Driver ioctl numbers are private to each driver (`DRM_COMMAND_BASE + n`): the same
//! request means something else to another driver, so callers check that the device is
//! vgem before issuing these.

use super::{BorrowedFd, Error};
use ioctl_sys::vgem as vsys;
use rustix::ioctl::{Opcode, Updater, ioctl};

drm_ioctl!(safe
    /// Attaches a new fence (read, or write with `VGEM_FENCE_WRITE`) to a GEM object's
    /// reservation; its id comes back in `out_fence`. EBUSY if a conflicting fence is
    /// still unsignalled.
    vgem::DRM_IOCTL_VGEM_FENCE_ATTACH => vgem_fence_attach(&mut vsys::drm_vgem_fence_attach));
drm_ioctl!(safe
    /// Signals a fence made by `DRM_IOCTL_VGEM_FENCE_ATTACH` on this open file. ENOENT for an
    /// unknown or already signalled id; ETIMEDOUT if the kernel's 10 s timer fired first.
    vgem::DRM_IOCTL_VGEM_FENCE_SIGNAL => vgem_fence_signal(&mut vsys::drm_vgem_fence_signal));
