//! vblank counters and waits, sequence events, and the legacy page flip.

use super::FramebufferId;
use super::ids::CrtcId;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::sys_call;
use ioctl_sys::drm as sys;
use rustix::fd::AsFd;

/// A CRTC's vblank counter at one moment (`DRM_IOCTL_CRTC_GET_SEQUENCE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sequence {
    /// Whether the CRTC is on.
    pub active: bool,
    /// vblank count.
    pub sequence: u64,
    /// Time of that vblank, in ns (CLOCK_MONOTONIC).
    pub time_ns: i64,
}

/// EOPNOTSUPP from a vblank call means the driver has no vblank support (virtio-gpu, for
/// one): a typed [`Error::Unsupported`] that keeps the ioctl's error in its reason.
fn no_vblank(e: Error) -> Error {
    match e {
        Error::Ioctl { name, errno } if errno == rustix::io::Errno::OPNOTSUPP => {
            Error::Unsupported {
                feature: "vblank",
                reason: format!("{name}: {errno}: the driver has no vblank interrupts"),
                errno: Some(errno),
            }
        }
        e => e,
    }
}

impl Device {
    /// `DRM_IOCTL_CRTC_GET_SEQUENCE`: the CRTC's current vblank count and time. EINVAL on
    /// an off CRTC or a driver without vblank support (virtio-gpu).
    pub fn crtc_sequence(&self, crtc: CrtcId) -> Result<Sequence> {
        let mut a = sys::drm_crtc_get_sequence {
            crtc_id: crtc.get(),
            ..Default::default()
        };
        sys_call::crtc_get_sequence(self.as_fd(), &mut a).map_err(no_vblank)?;
        Ok(Sequence {
            active: a.active != 0,
            sequence: a.sequence,
            time_ns: a.sequence_ns,
        })
    }

    /// `DRM_IOCTL_CRTC_QUEUE_SEQUENCE`: asks for a
    /// [`Event::CrtcSequence`](super::Event::CrtcSequence) when the CRTC reaches `sequence`
    /// (relative to now when `relative`; the next one if missed when `next_on_miss`).
    /// Returns the absolute sequence queued.
    pub fn queue_sequence(
        &self,
        crtc: CrtcId,
        sequence: u64,
        relative: bool,
        next_on_miss: bool,
        user_data: u64,
    ) -> Result<u64> {
        let mut flags = 0;
        if relative {
            flags |= sys::DRM_CRTC_SEQUENCE_RELATIVE;
        }
        if next_on_miss {
            flags |= sys::DRM_CRTC_SEQUENCE_NEXT_ON_MISS;
        }
        let mut a = sys::drm_crtc_queue_sequence {
            crtc_id: crtc.get(),
            flags,
            sequence,
            user_data,
        };
        sys_call::crtc_queue_sequence(self.as_fd(), &mut a).map_err(no_vblank)?;
        Ok(a.sequence)
    }

    /// `DRM_IOCTL_WAIT_VBLANK` (legacy): waits `count` vblanks on the CRTC at `index` in
    /// [`Resources::crtcs`](super::Resources::crtcs), or with `event` queues a
    /// [`Event::Vblank`](super::Event::Vblank) carrying `user_data` instead of waiting.
    /// Returns the target sequence.
    pub fn wait_vblank(&self, index: u32, count: u32, event: Option<u64>) -> Result<u32> {
        let mut ty = sys::_DRM_VBLANK_RELATIVE;
        ty |= match index {
            0 => 0,
            1 => sys::_DRM_VBLANK_SECONDARY,
            n => (n << sys::_DRM_VBLANK_HIGH_CRTC_SHIFT) & sys::_DRM_VBLANK_HIGH_CRTC_MASK,
        };
        let mut signal = 0;
        if let Some(data) = event {
            ty |= sys::_DRM_VBLANK_EVENT;
            signal = data as core::ffi::c_ulong;
        }
        let reply = sys_call::wait_vblank(
            self.as_fd(),
            sys::drm_wait_vblank_request {
                type_: ty,
                sequence: count,
                signal,
            },
        )
        .map_err(no_vblank)?;
        Ok(reply.sequence)
    }

    /// `DRM_IOCTL_MODE_PAGE_FLIP` (legacy): shows `fb` on the CRTC's primary plane at the
    /// next vblank, with a [`Event::FlipComplete`](super::Event::FlipComplete) carrying
    /// `event` when given. EBUSY while a flip is pending.
    pub fn page_flip(&self, crtc: CrtcId, fb: FramebufferId, event: Option<u64>) -> Result<()> {
        let mut a = sys::drm_mode_crtc_page_flip {
            crtc_id: crtc.get(),
            fb_id: fb.get(),
            flags: if event.is_some() {
                sys::DRM_MODE_PAGE_FLIP_EVENT
            } else {
                0
            },
            reserved: 0,
            user_data: event.unwrap_or(0),
        };
        sys_call::mode_page_flip(self.as_fd(), &mut a)
    }
}
