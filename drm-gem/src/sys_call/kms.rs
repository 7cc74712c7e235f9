//! Raw KMS calls (framebuffers so far); see the module header of `sys_call` for the safety
//! argument.

use super::*;

drm_ioctl!(safe
    /// Adds a framebuffer over up to four GEM handles (primary nodes).
    DRM_IOCTL_MODE_ADDFB2 => mode_addfb2(&mut sys::drm_mode_fb_cmd2));
drm_ioctl!(safe
    /// Removes a framebuffer (and disables the planes showing it).
    DRM_IOCTL_MODE_RMFB => mode_rmfb(&mut u32));
drm_ioctl!(safe
    /// Reads a framebuffer's layout back; with master or CAP_SYS_ADMIN also fresh GEM
    /// handles to its objects.
    DRM_IOCTL_MODE_GETFB2 => mode_getfb2(&mut sys::drm_mode_fb_cmd2));
