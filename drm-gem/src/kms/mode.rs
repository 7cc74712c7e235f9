//! Display modes (`drm_mode_modeinfo`).

use ioctl_sys::drm as sys;

/// A display mode: timings as the kernel reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Mode {
    /// Name (`"1024x768"`).
    #[cfg_attr(feature = "serde", serde(serialize_with = "crate::kms::ser_name"))]
    pub name: [u8; 32],
    /// Pixel clock in kHz.
    pub clock: u32,
    /// Horizontal display, sync start, sync end, total, skew.
    pub h: [u16; 5],
    /// Vertical display, sync start, sync end, total, scan.
    pub v: [u16; 5],
    /// Refresh rate in Hz as the kernel rounded it.
    pub vrefresh: u32,
    /// `DRM_MODE_FLAG_*` (sync polarity, interlace, ...).
    pub flags: u32,
    /// `DRM_MODE_TYPE_*` (`PREFERRED` = 8, `DRIVER` = 64, ...).
    pub kind: u32,
}

/// `DRM_MODE_TYPE_PREFERRED`.
const TYPE_PREFERRED: u32 = 1 << 3;

impl Mode {
    /// The mode's name as text.
    pub fn name(&self) -> String {
        crate::kms::c_name(&self.name)
    }

    /// Width and height in pixels.
    pub fn size(&self) -> (u16, u16) {
        (self.h[0], self.v[0])
    }

    /// Whether the sink marks this mode preferred.
    pub fn is_preferred(&self) -> bool {
        self.kind & TYPE_PREFERRED != 0
    }

    /// The exact refresh rate in mHz computed from the timings (0 for bogus totals).
    pub fn refresh_mhz(&self) -> u64 {
        let total = u64::from(self.h[3]) * u64::from(self.v[3]);
        (u64::from(self.clock) * 1_000_000)
            .checked_div(total)
            .unwrap_or(0)
    }

    /// The bytes of a `MODE_ID` property blob: `struct drm_mode_modeinfo` in the kernel's
    /// layout (68 bytes, little-endian, no padding).
    pub fn to_blob_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(68);
        b.extend_from_slice(&self.clock.to_le_bytes());
        for v in self.h.iter().chain(&self.v) {
            b.extend_from_slice(&v.to_le_bytes());
        }
        for v in [self.vrefresh, self.flags, self.kind] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&self.name);
        b
    }

    /// The kernel's struct, for SETCRTC or a MODE_ID blob.
    pub fn to_raw(&self) -> sys::drm_mode_modeinfo {
        let mut name = [0 as core::ffi::c_char; 32];
        for (d, s) in name.iter_mut().zip(self.name) {
            *d = s as core::ffi::c_char;
        }
        sys::drm_mode_modeinfo {
            clock: self.clock,
            hdisplay: self.h[0],
            hsync_start: self.h[1],
            hsync_end: self.h[2],
            htotal: self.h[3],
            hskew: self.h[4],
            vdisplay: self.v[0],
            vsync_start: self.v[1],
            vsync_end: self.v[2],
            vtotal: self.v[3],
            vscan: self.v[4],
            vrefresh: self.vrefresh,
            flags: self.flags,
            type_: self.kind,
            name,
        }
    }
}

impl From<&sys::drm_mode_modeinfo> for Mode {
    fn from(m: &sys::drm_mode_modeinfo) -> Self {
        let mut name = [0u8; 32];
        for (d, s) in name.iter_mut().zip(m.name) {
            *d = s as u8;
        }
        Self {
            name,
            clock: m.clock,
            h: [m.hdisplay, m.hsync_start, m.hsync_end, m.htotal, m.hskew],
            v: [m.vdisplay, m.vsync_start, m.vsync_end, m.vtotal, m.vscan],
            vrefresh: m.vrefresh,
            flags: m.flags,
            kind: m.type_,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refresh() {
        let mut raw = sys::drm_mode_modeinfo {
            clock: 65000,
            hdisplay: 1024,
            hsync_start: 1048,
            hsync_end: 1184,
            htotal: 1344,
            vdisplay: 768,
            vsync_start: 771,
            vsync_end: 777,
            vtotal: 806,
            vrefresh: 60,
            type_: 8 | 64,
            ..Default::default()
        };
        for (d, s) in raw.name.iter_mut().zip(b"1024x768") {
            *d = *s as core::ffi::c_char;
        }
        let m = Mode::from(&raw);
        assert_eq!(m.name(), "1024x768");
        assert_eq!(m.size(), (1024, 768));
        assert!(m.is_preferred());
        assert_eq!(m.refresh_mhz(), 60003);
        let back = m.to_raw();
        assert_eq!((back.clock, back.htotal, back.vtotal), (65000, 1344, 806));
        assert_eq!(Mode::from(&back), m);
        let bytes = m.to_blob_bytes();
        assert_eq!(bytes.len(), core::mem::size_of::<sys::drm_mode_modeinfo>());
        assert_eq!(&bytes[..4], &65000u32.to_le_bytes());
        assert_eq!(&bytes[4..6], &1024u16.to_le_bytes());
        assert_eq!(&bytes[24..28], &60u32.to_le_bytes());
        assert_eq!(&bytes[36..44], b"1024x768");
        let zero = Mode::from(&sys::drm_mode_modeinfo::default());
        assert_eq!(zero.refresh_mhz(), 0);
    }
}
