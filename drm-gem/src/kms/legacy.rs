//! Legacy (pre-atomic) KMS calls: SETCRTC, SETPLANE, the cursor, gamma, DIRTYFB, and
//! CLOSEFB where the kernel has it.

use super::ids::{ConnectorId, CrtcId, PlaneId};
use super::{FramebufferId, Mode};
use crate::device::{Device, DeviceRef};
use crate::error::{Error, Result};
use crate::gem::GemHandle;
use crate::sys_call;
use ioctl_sys::drm as sys;
use rustix::fd::AsFd;

/// Where a plane shows what (`DRM_IOCTL_MODE_SETPLANE`): destination in CRTC pixels,
/// source in 16.16 fixed point framebuffer pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlaneRect {
    /// Destination x, y on the CRTC.
    pub crtc_pos: (i32, i32),
    /// Destination width, height.
    pub crtc_size: (u32, u32),
    /// Source x, y (16.16).
    pub src_pos: (u32, u32),
    /// Source width, height (16.16).
    pub src_size: (u32, u32),
}

impl PlaneRect {
    /// The whole `w` x `h` framebuffer shown unscaled at the CRTC's origin.
    pub fn full(w: u32, h: u32) -> Self {
        Self {
            crtc_pos: (0, 0),
            crtc_size: (w, h),
            src_pos: (0, 0),
            src_size: (w << 16, h << 16),
        }
    }
}

impl Device {
    /// `DRM_IOCTL_MODE_SETCRTC`: shows `fb` at (x, y) on the CRTC with `mode`, driving
    /// `connectors` (master only).
    pub fn set_crtc(
        &self,
        crtc: CrtcId,
        fb: FramebufferId,
        pos: (u32, u32),
        connectors: &[ConnectorId],
        mode: &Mode,
    ) -> Result<()> {
        let ids: Vec<u32> = connectors.iter().map(|c| c.get()).collect();
        let arg = sys::drm_mode_crtc {
            crtc_id: crtc.get(),
            fb_id: fb.get(),
            x: pos.0,
            y: pos.1,
            mode_valid: 1,
            mode: mode.to_raw(),
            ..Default::default()
        };
        sys_call::mode_setcrtc(self.as_fd(), arg, &ids)
    }

    /// `DRM_IOCTL_MODE_SETCRTC` turning the CRTC off.
    pub fn disable_crtc(&self, crtc: CrtcId) -> Result<()> {
        let arg = sys::drm_mode_crtc {
            crtc_id: crtc.get(),
            ..Default::default()
        };
        sys_call::mode_setcrtc(self.as_fd(), arg, &[])
    }

    /// `DRM_IOCTL_MODE_SETPLANE`: shows `fb` on `plane` of `crtc` (`None`: plane off).
    pub fn set_plane(
        &self,
        plane: PlaneId,
        crtc: CrtcId,
        fb: Option<FramebufferId>,
        rect: PlaneRect,
    ) -> Result<()> {
        let mut a = sys::drm_mode_set_plane {
            plane_id: plane.get(),
            crtc_id: crtc.get(),
            fb_id: fb.map_or(0, FramebufferId::get),
            flags: 0,
            crtc_x: rect.crtc_pos.0,
            crtc_y: rect.crtc_pos.1,
            crtc_w: rect.crtc_size.0,
            crtc_h: rect.crtc_size.1,
            src_x: rect.src_pos.0,
            src_y: rect.src_pos.1,
            src_h: rect.src_size.1,
            src_w: rect.src_size.0,
        };
        sys_call::mode_setplane(self.as_fd(), &mut a)
    }

    /// `DRM_IOCTL_MODE_CURSOR2` with `DRM_MODE_CURSOR_BO`: sets the cursor image to the
    /// `size` buffer `bo` (a dumb buffer of ARGB8888; `None` hides the cursor) with a
    /// hotspot.
    pub fn set_cursor(
        &self,
        crtc: CrtcId,
        bo: Option<GemHandle>,
        size: (u32, u32),
        hotspot: (i32, i32),
    ) -> Result<()> {
        let mut a = sys::drm_mode_cursor2 {
            flags: sys::DRM_MODE_CURSOR_BO,
            crtc_id: crtc.get(),
            width: size.0,
            height: size.1,
            handle: bo.map_or(0, GemHandle::get),
            hot_x: hotspot.0,
            hot_y: hotspot.1,
            ..Default::default()
        };
        sys_call::mode_cursor2(self.as_fd(), &mut a)
    }

    /// `DRM_IOCTL_MODE_CURSOR2` with `DRM_MODE_CURSOR_MOVE`.
    pub fn move_cursor(&self, crtc: CrtcId, pos: (i32, i32)) -> Result<()> {
        let mut a = sys::drm_mode_cursor2 {
            flags: sys::DRM_MODE_CURSOR_MOVE,
            crtc_id: crtc.get(),
            x: pos.0,
            y: pos.1,
            ..Default::default()
        };
        sys_call::mode_cursor2(self.as_fd(), &mut a)
    }

    /// `DRM_IOCTL_MODE_GETGAMMA`: the CRTC's ramps (each [`Crtc::gamma_size`](super::Crtc)
    /// long; an empty result when the CRTC has no gamma).
    pub fn gamma(&self, crtc: CrtcId, size: usize) -> Result<[Vec<u16>; 3]> {
        let (mut r, mut g, mut b) = (vec![0u16; size], vec![0u16; size], vec![0u16; size]);
        if size > 0 {
            sys_call::mode_gamma(self.as_fd(), crtc.get(), &mut r, &mut g, &mut b, false)?;
        }
        Ok([r, g, b])
    }

    /// `DRM_IOCTL_MODE_SETGAMMA`: sets the CRTC's ramps (all three the CRTC's gamma size).
    pub fn set_gamma(&self, crtc: CrtcId, ramps: &[Vec<u16>; 3]) -> Result<()> {
        let [mut r, mut g, mut b] = ramps.clone();
        sys_call::mode_gamma(self.as_fd(), crtc.get(), &mut r, &mut g, &mut b, true)
    }

    /// `DRM_IOCTL_MODE_DIRTYFB`: tells the driver which rectangles (x1, y1, x2, y2) of `fb`
    /// changed (empty: all). ENOSYS on drivers that need no flushing: mapped to Ok(false).
    pub fn dirty_framebuffer(
        &self,
        fb: FramebufferId,
        rects: &[(u16, u16, u16, u16)],
    ) -> Result<bool> {
        let clips: Vec<sys::drm_clip_rect> = rects
            .iter()
            .map(|&(x1, y1, x2, y2)| sys::drm_clip_rect { x1, y1, x2, y2 })
            .collect();
        match sys_call::mode_dirtyfb(self.as_fd(), fb.get(), &clips) {
            Ok(()) => Ok(true),
            Err(Error::Ioctl { errno, .. }) if errno == rustix::io::Errno::NOSYS => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `DRM_IOCTL_MODE_CLOSEFB` (Linux 6.8+): removes a framebuffer without turning off the
    /// planes that show it. Kernels without it answer EINVAL for the unknown request number
    /// (the id is ours and the pad zero, so EINVAL can mean nothing else): then the
    /// framebuffer is removed the old way (RMFB, by dropping it) and the answer is
    /// [`Error::Unsupported`].
    pub fn close_framebuffer(&self, fb: super::Framebuffer<impl DeviceRef>) -> Result<()> {
        let id = fb.id();
        let mut a = sys::drm_mode_closefb {
            fb_id: id.get(),
            pad: 0,
        };
        match sys_call::mode_closefb(self.as_fd(), &mut a) {
            Ok(()) => {
                fb.into_raw();
                Ok(())
            }
            Err(Error::Ioctl { name, errno })
                if matches!(errno, rustix::io::Errno::INVAL | rustix::io::Errno::NOTTY) =>
            {
                // Unknown ioctl on this kernel: the framebuffer is untouched and `fb`
                // (dropped here) removes it the old way.
                Err(Error::Unsupported {
                    feature: "CLOSEFB",
                    reason: format!("{name}: {errno} (Linux 6.8+); RMFB was used instead"),
                    errno: Some(errno),
                })
            }
            Err(e) => Err(e),
        }
    }
}
