//! Driver capabilities (`DRM_IOCTL_GET_CAP`) and client capabilities
//! (`DRM_IOCTL_SET_CLIENT_CAP`), learned by asking the kernel, never from its version.

use crate::device::Device;
use crate::error::{Error, Result};
use crate::sys_call;
use ioctl_sys::drm as sys;
use rustix::fd::AsFd;
use rustix::io::Errno;

/// A `DRM_CAP_*` the kernel can be asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DriverCap {
    /// `DRM_CAP_DUMB_BUFFER`.
    DumbBuffer,
    /// `DRM_CAP_VBLANK_HIGH_CRTC`.
    VblankHighCrtc,
    /// `DRM_CAP_DUMB_PREFERRED_DEPTH`.
    DumbPreferredDepth,
    /// `DRM_CAP_DUMB_PREFER_SHADOW`.
    DumbPreferShadow,
    /// `DRM_CAP_PRIME` (bits `DRM_PRIME_CAP_IMPORT`, `DRM_PRIME_CAP_EXPORT`).
    Prime,
    /// `DRM_CAP_TIMESTAMP_MONOTONIC`.
    TimestampMonotonic,
    /// `DRM_CAP_ASYNC_PAGE_FLIP`.
    AsyncPageFlip,
    /// `DRM_CAP_CURSOR_WIDTH`.
    CursorWidth,
    /// `DRM_CAP_CURSOR_HEIGHT`.
    CursorHeight,
    /// `DRM_CAP_ADDFB2_MODIFIERS`.
    AddFb2Modifiers,
    /// `DRM_CAP_PAGE_FLIP_TARGET`.
    PageFlipTarget,
    /// `DRM_CAP_CRTC_IN_VBLANK_EVENT`.
    CrtcInVblankEvent,
    /// `DRM_CAP_SYNCOBJ`.
    Syncobj,
    /// `DRM_CAP_SYNCOBJ_TIMELINE`.
    SyncobjTimeline,
    /// `DRM_CAP_ATOMIC_ASYNC_PAGE_FLIP` (since Linux 6.8).
    AtomicAsyncPageFlip,
}

impl DriverCap {
    /// Every cap, in `DRM_CAP_*` order.
    pub const ALL: [DriverCap; 15] = [
        Self::DumbBuffer,
        Self::VblankHighCrtc,
        Self::DumbPreferredDepth,
        Self::DumbPreferShadow,
        Self::Prime,
        Self::TimestampMonotonic,
        Self::AsyncPageFlip,
        Self::CursorWidth,
        Self::CursorHeight,
        Self::AddFb2Modifiers,
        Self::PageFlipTarget,
        Self::CrtcInVblankEvent,
        Self::Syncobj,
        Self::SyncobjTimeline,
        Self::AtomicAsyncPageFlip,
    ];

    /// The `DRM_CAP_*` number.
    pub fn raw(self) -> u32 {
        match self {
            Self::DumbBuffer => sys::DRM_CAP_DUMB_BUFFER,
            Self::VblankHighCrtc => sys::DRM_CAP_VBLANK_HIGH_CRTC,
            Self::DumbPreferredDepth => sys::DRM_CAP_DUMB_PREFERRED_DEPTH,
            Self::DumbPreferShadow => sys::DRM_CAP_DUMB_PREFER_SHADOW,
            Self::Prime => sys::DRM_CAP_PRIME,
            Self::TimestampMonotonic => sys::DRM_CAP_TIMESTAMP_MONOTONIC,
            Self::AsyncPageFlip => sys::DRM_CAP_ASYNC_PAGE_FLIP,
            Self::CursorWidth => sys::DRM_CAP_CURSOR_WIDTH,
            Self::CursorHeight => sys::DRM_CAP_CURSOR_HEIGHT,
            Self::AddFb2Modifiers => sys::DRM_CAP_ADDFB2_MODIFIERS,
            Self::PageFlipTarget => sys::DRM_CAP_PAGE_FLIP_TARGET,
            Self::CrtcInVblankEvent => sys::DRM_CAP_CRTC_IN_VBLANK_EVENT,
            Self::Syncobj => sys::DRM_CAP_SYNCOBJ,
            Self::SyncobjTimeline => sys::DRM_CAP_SYNCOBJ_TIMELINE,
            Self::AtomicAsyncPageFlip => sys::DRM_CAP_ATOMIC_ASYNC_PAGE_FLIP,
        }
    }

    /// The C name.
    pub fn name(self) -> &'static str {
        match self {
            Self::DumbBuffer => "DRM_CAP_DUMB_BUFFER",
            Self::VblankHighCrtc => "DRM_CAP_VBLANK_HIGH_CRTC",
            Self::DumbPreferredDepth => "DRM_CAP_DUMB_PREFERRED_DEPTH",
            Self::DumbPreferShadow => "DRM_CAP_DUMB_PREFER_SHADOW",
            Self::Prime => "DRM_CAP_PRIME",
            Self::TimestampMonotonic => "DRM_CAP_TIMESTAMP_MONOTONIC",
            Self::AsyncPageFlip => "DRM_CAP_ASYNC_PAGE_FLIP",
            Self::CursorWidth => "DRM_CAP_CURSOR_WIDTH",
            Self::CursorHeight => "DRM_CAP_CURSOR_HEIGHT",
            Self::AddFb2Modifiers => "DRM_CAP_ADDFB2_MODIFIERS",
            Self::PageFlipTarget => "DRM_CAP_PAGE_FLIP_TARGET",
            Self::CrtcInVblankEvent => "DRM_CAP_CRTC_IN_VBLANK_EVENT",
            Self::Syncobj => "DRM_CAP_SYNCOBJ",
            Self::SyncobjTimeline => "DRM_CAP_SYNCOBJ_TIMELINE",
            Self::AtomicAsyncPageFlip => "DRM_CAP_ATOMIC_ASYNC_PAGE_FLIP",
        }
    }
}

/// A `DRM_CLIENT_CAP_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ClientCap {
    /// `DRM_CLIENT_CAP_STEREO_3D`.
    Stereo3d,
    /// `DRM_CLIENT_CAP_UNIVERSAL_PLANES`.
    UniversalPlanes,
    /// `DRM_CLIENT_CAP_ATOMIC`.
    Atomic,
    /// `DRM_CLIENT_CAP_ASPECT_RATIO`.
    AspectRatio,
    /// `DRM_CLIENT_CAP_WRITEBACK_CONNECTORS` (needs `Atomic` first).
    WritebackConnectors,
    /// `DRM_CLIENT_CAP_CURSOR_PLANE_HOTSPOT` (since Linux 6.8).
    CursorPlaneHotspot,
}

impl ClientCap {
    /// The `DRM_CLIENT_CAP_*` number.
    pub fn raw(self) -> u32 {
        match self {
            Self::Stereo3d => sys::DRM_CLIENT_CAP_STEREO_3D,
            Self::UniversalPlanes => sys::DRM_CLIENT_CAP_UNIVERSAL_PLANES,
            Self::Atomic => sys::DRM_CLIENT_CAP_ATOMIC,
            Self::AspectRatio => sys::DRM_CLIENT_CAP_ASPECT_RATIO,
            Self::WritebackConnectors => sys::DRM_CLIENT_CAP_WRITEBACK_CONNECTORS,
            Self::CursorPlaneHotspot => sys::DRM_CLIENT_CAP_CURSOR_PLANE_HOTSPOT,
        }
    }

    /// The C name, `DRM_CLIENT_CAP_*`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Stereo3d => "DRM_CLIENT_CAP_STEREO_3D",
            Self::UniversalPlanes => "DRM_CLIENT_CAP_UNIVERSAL_PLANES",
            Self::Atomic => "DRM_CLIENT_CAP_ATOMIC",
            Self::AspectRatio => "DRM_CLIENT_CAP_ASPECT_RATIO",
            Self::WritebackConnectors => "DRM_CLIENT_CAP_WRITEBACK_CONNECTORS",
            Self::CursorPlaneHotspot => "DRM_CLIENT_CAP_CURSOR_PLANE_HOTSPOT",
        }
    }
}

/// What the running kernel and driver support, learned by asking them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Caps {
    /// Dumb buffers can be created (a driver without KMS answers "unsupported" here even if
    /// its create ioctl works: vgem).
    pub dumb_buffer: bool,
    /// PRIME import.
    pub prime_import: bool,
    /// PRIME export.
    pub prime_export: bool,
    /// Sync objects.
    pub syncobj: bool,
    /// Timeline sync objects.
    pub syncobj_timeline: bool,
    /// ADDFB2 with modifiers.
    pub addfb2_modifiers: bool,
    /// Vblank timestamps are CLOCK_MONOTONIC.
    pub timestamp_monotonic: bool,
    /// Legacy async page flips.
    pub async_page_flip: bool,
    /// Cursor size the driver prefers (width, height), when it says.
    pub cursor: Option<(u64, u64)>,
}

impl Device {
    /// `DRM_IOCTL_GET_CAP` for one capability. `Ok(None)` when the kernel does not know it
    /// (EINVAL: older kernel) or the driver does not implement it (EOPNOTSUPP: no KMS).
    #[inline]
    pub fn driver_cap(&self, cap: DriverCap) -> Result<Option<u64>> {
        let mut a = sys::drm_get_cap {
            capability: u64::from(cap.raw()),
            value: 0,
        };
        match sys_call::get_cap(self.as_fd(), &mut a) {
            Ok(()) => Ok(Some(a.value)),
            Err(e) => absent_or(e),
        }
    }

    /// `DRM_IOCTL_SET_CLIENT_CAP`. A kernel that does not know the cap answers EINVAL, which
    /// comes back as [`Error::Unsupported`].
    pub fn set_client_cap(&self, cap: ClientCap, value: u64) -> Result<()> {
        let mut a = sys::drm_set_client_cap {
            capability: u64::from(cap.raw()),
            value,
        };
        sys_call::set_client_cap(self.as_fd(), &mut a).map_err(|e| match e.errno() {
            Some(Errno::INVAL) => Error::Unsupported {
                feature: "client cap",
                reason: format!("DRM_IOCTL_SET_CLIENT_CAP({cap:?}={value}) answered EINVAL"),
                errno: Some(Errno::INVAL),
            },
            _ => e,
        })
    }
}

/// `Ok(None)` for the errnos of a cap the kernel or driver lacks (EINVAL, EOPNOTSUPP), else
/// the error (out of line: [`Device::driver_cap`]'s success path is one test).
#[cold]
#[inline(never)]
fn absent_or(e: Error) -> Result<Option<u64>> {
    if matches!(e.errno(), Some(Errno::INVAL | Errno::OPNOTSUPP)) {
        Ok(None)
    } else {
        Err(e)
    }
}

impl Caps {
    /// Probes every capability; unknown ones read as absent, never as an error.
    pub fn probe(dev: &Device) -> Result<Self> {
        let get = |c| dev.driver_cap(c).map(|v| v.unwrap_or(0));
        let prime = get(DriverCap::Prime)?;
        let w = dev.driver_cap(DriverCap::CursorWidth)?;
        let h = dev.driver_cap(DriverCap::CursorHeight)?;
        Ok(Self {
            dumb_buffer: get(DriverCap::DumbBuffer)? != 0,
            prime_import: prime & u64::from(sys::DRM_PRIME_CAP_IMPORT) != 0,
            prime_export: prime & u64::from(sys::DRM_PRIME_CAP_EXPORT) != 0,
            syncobj: get(DriverCap::Syncobj)? != 0,
            syncobj_timeline: get(DriverCap::SyncobjTimeline)? != 0,
            addfb2_modifiers: get(DriverCap::AddFb2Modifiers)? != 0,
            timestamp_monotonic: get(DriverCap::TimestampMonotonic)? != 0,
            async_page_flip: get(DriverCap::AsyncPageFlip)? != 0,
            cursor: w.zip(h),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_numbers_are_distinct_and_named() {
        let mut seen = std::collections::HashSet::new();
        for c in DriverCap::ALL {
            assert!(seen.insert(c.raw()), "{c:?}");
            assert!(c.name().starts_with("DRM_CAP_"));
        }
        assert_eq!(DriverCap::DumbBuffer.raw(), 1);
        assert_eq!(ClientCap::Atomic.raw(), 3);
    }
}
