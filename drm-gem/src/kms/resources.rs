//! KMS objects: resources, connectors, encoders, CRTCs and planes.
//!
//! Every list query is count-then-fill with a sized first guess, so the common case is one
//! ioctl; it retries only when the kernel reports more entries than fitted, and never
//! trusts a count beyond the buffer it passed.

use super::ids::{ConnectorId, CrtcId, EncoderId, PlaneId, PropertyId, ids};
use super::{FramebufferId, Mode};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::sys_call;
use ioctl_sys::drm as sys;
use rustix::fd::AsFd;

/// How many times a list query is retried when the kernel's count keeps growing (hotplug
/// between calls) before giving up.
const RETRIES: usize = 8;

pub(crate) fn grew(what: &str) -> Error {
    Error::InvalidArgument {
        what: format!("{what}: the kernel's count kept changing over {RETRIES} tries"),
    }
}

/// The card's KMS resources (`DRM_IOCTL_MODE_GETRESOURCES`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Resources {
    /// Framebuffers (all of them, with CAP_SYS_ADMIN; otherwise this file's own).
    pub framebuffers: Vec<FramebufferId>,
    /// CRTCs, in index order (plane and encoder `possible_crtcs` masks index this list).
    pub crtcs: Vec<CrtcId>,
    /// Connectors (writeback ones only with the WRITEBACK_CONNECTORS client cap).
    pub connectors: Vec<ConnectorId>,
    /// Encoders.
    pub encoders: Vec<EncoderId>,
    /// Minimum framebuffer width and height.
    pub min_size: (u32, u32),
    /// Maximum framebuffer width and height.
    pub max_size: (u32, u32),
}

/// Connection state of a connector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum ConnectorStatus {
    /// A sink is attached.
    Connected,
    /// Nothing attached.
    Disconnected,
    /// The driver cannot tell.
    Unknown,
}

/// A connector (`DRM_IOCTL_MODE_GETCONNECTOR`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Connector {
    /// Its id.
    pub id: ConnectorId,
    /// `DRM_MODE_CONNECTOR_*`.
    pub kind: u32,
    /// Index among connectors of that kind (1-based): `Virtual-1`.
    pub kind_id: u32,
    /// Connection state.
    pub status: ConnectorStatus,
    /// Physical size in millimetres (0 when unknown).
    pub size_mm: (u32, u32),
    /// `DRM_MODE_SUBPIXEL_*`.
    pub subpixel: u32,
    /// Modes, as last probed (a query never forces a probe unless asked).
    pub modes: Vec<Mode>,
    /// Encoders it can use.
    pub encoders: Vec<EncoderId>,
    /// The encoder driving it now.
    pub encoder: Option<EncoderId>,
    /// Its properties with their current values.
    pub properties: Vec<(PropertyId, u64)>,
}

impl Connector {
    /// The kernel's name for it, as in sysfs and `drm_info`: `"Virtual-1"`, `"HDMI-A-2"`.
    pub fn name(&self) -> String {
        format!("{}-{}", connector_kind_name(self.kind), self.kind_id)
    }
}

/// The kernel's name for a `DRM_MODE_CONNECTOR_*` value.
pub fn connector_kind_name(kind: u32) -> &'static str {
    const NAMES: [&str; 21] = [
        "Unknown",
        "VGA",
        "DVI-I",
        "DVI-D",
        "DVI-A",
        "Composite",
        "SVIDEO",
        "LVDS",
        "Component",
        "DIN",
        "DP",
        "HDMI-A",
        "HDMI-B",
        "TV",
        "eDP",
        "Virtual",
        "DSI",
        "DPI",
        "Writeback",
        "SPI",
        "USB",
    ];
    NAMES.get(kind as usize).copied().unwrap_or("Unknown")
}

/// The kernel's name for a `DRM_MODE_ENCODER_*` value.
pub fn encoder_kind_name(kind: u32) -> &'static str {
    const NAMES: [&str; 9] = [
        "None", "DAC", "TMDS", "LVDS", "TV", "Virtual", "DSI", "DP MST", "DPI",
    ];
    NAMES.get(kind as usize).copied().unwrap_or("Unknown")
}

/// An encoder (`DRM_IOCTL_MODE_GETENCODER`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Encoder {
    /// Its id.
    pub id: EncoderId,
    /// `DRM_MODE_ENCODER_*`.
    pub kind: u32,
    /// The CRTC feeding it now.
    pub crtc: Option<CrtcId>,
    /// Bit i set: CRTC i of [`Resources::crtcs`] can feed it.
    pub possible_crtcs: u32,
    /// Encoders it can be cloned with (bitmask).
    pub possible_clones: u32,
}

/// A CRTC (`DRM_IOCTL_MODE_GETCRTC`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Crtc {
    /// Its id.
    pub id: CrtcId,
    /// The framebuffer its primary plane shows.
    pub framebuffer: Option<FramebufferId>,
    /// Scan-out position in the framebuffer.
    pub position: (u32, u32),
    /// Gamma table size (entries per channel; 0: none).
    pub gamma_size: u32,
    /// The mode, when one is set.
    pub mode: Option<Mode>,
}

/// A plane (`DRM_IOCTL_MODE_GETPLANE`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Plane {
    /// Its id.
    pub id: PlaneId,
    /// The CRTC it is on now.
    pub crtc: Option<CrtcId>,
    /// The framebuffer it shows now.
    pub framebuffer: Option<FramebufferId>,
    /// Bit i set: CRTC i of [`Resources::crtcs`] can use it.
    pub possible_crtcs: u32,
    /// Gamma table size (legacy; usually 0).
    pub gamma_size: u32,
    /// Pixel formats (DRM fourccs) it scans out.
    pub formats: Vec<u32>,
}

/// Runs a count-then-fill query: `fill(bufs)` offers each buffer's capacity to the kernel
/// and returns the kernel's totals, leaving in each buffer the entries that fitted (the
/// sys_call wrappers do that, or leave it empty). Buffers start with room for `guess`
/// entries (never zeroed: only allocated) and grow to the totals until everything fitted.
pub(crate) fn fill_lists<const N: usize, T>(
    what: &str,
    guess: [usize; N],
    mut fill: impl FnMut(&mut [Vec<T>; N]) -> Result<[usize; N]>,
) -> Result<[Vec<T>; N]> {
    let mut cap = guess;
    for _ in 0..RETRIES {
        let mut bufs: [Vec<T>; N] = core::array::from_fn(|i| Vec::with_capacity(cap[i]));
        let totals = fill(&mut bufs)?;
        if bufs.iter().zip(totals).all(|(b, t)| b.len() == t) {
            return Ok(bufs);
        }
        for (c, t) in cap.iter_mut().zip(totals) {
            *c = (*c).max(t);
        }
    }
    Err(grew(what))
}

impl Device {
    /// `DRM_IOCTL_MODE_GETRESOURCES`. EOPNOTSUPP on drivers without KMS (vgem) and on
    /// render nodes (EACCES there: KMS is primary-node only).
    pub fn resources(&self) -> Result<Resources> {
        let mut last = sys::drm_mode_card_res::default();
        let [fbs, crtcs, connectors, encoders] =
            fill_lists("DRM_IOCTL_MODE_GETRESOURCES", [16, 16, 16, 16], |b| {
                let [fb, cr, co, en] = b;
                last = sys_call::mode_getresources(self.as_fd(), fb, cr, co, en)?;
                Ok([
                    last.count_fbs as usize,
                    last.count_crtcs as usize,
                    last.count_connectors as usize,
                    last.count_encoders as usize,
                ])
            })?;
        Ok(Resources {
            framebuffers: ids(&fbs, FramebufferId::new),
            crtcs: ids(&crtcs, CrtcId::new),
            connectors: ids(&connectors, ConnectorId::new),
            encoders: ids(&encoders, EncoderId::new),
            min_size: (last.min_width, last.min_height),
            max_size: (last.max_width, last.max_height),
        })
    }

    /// `DRM_IOCTL_MODE_GETCONNECTOR` without a probe: the modes are those of the last
    /// probe (the kernel probes only when asked for zero modes, which this never does).
    pub fn connector(&self, id: ConnectorId) -> Result<Connector> {
        self.connector_inner(id, false)
    }

    /// `DRM_IOCTL_MODE_GETCONNECTOR` forcing a probe of the sink first (slow on real
    /// hardware: EDID reads, DDC; needs master, as the kernel probes only for the master).
    pub fn probe_connector(&self, id: ConnectorId) -> Result<Connector> {
        self.connector_inner(id, true)
    }

    fn connector_inner(&self, id: ConnectorId, probe: bool) -> Result<Connector> {
        if probe {
            // count_modes = 0 asks the kernel to probe; the answer is then read below.
            sys_call::mode_getconnector(
                self.as_fd(),
                id.get(),
                &mut Vec::new(),
                &mut Vec::new(),
                &mut Vec::new(),
                &mut Vec::new(),
            )?;
        }
        // The modes buffer always has room: none would make the kernel probe. The first
        // guesses are generous because they cost only an allocation (nothing is zeroed).
        let (mut ne, mut nm, mut np) = (8usize, 128usize, 64usize);
        let mut found = None;
        for _ in 0..RETRIES {
            let mut enc = Vec::with_capacity(ne);
            let mut modes = Vec::with_capacity(nm.max(1));
            let mut props = Vec::with_capacity(np);
            let mut values = Vec::with_capacity(np);
            let a = sys_call::mode_getconnector(
                self.as_fd(),
                id.get(),
                &mut enc,
                &mut modes,
                &mut props,
                &mut values,
            )?;
            let (te, tm, tp) = (
                a.count_encoders as usize,
                a.count_modes as usize,
                a.count_props as usize,
            );
            if enc.len() == te && modes.len() == tm && props.len() == tp && values.len() == tp {
                found = Some((a, enc, modes, props.into_iter().zip(values)));
                break;
            }
            (ne, nm, np) = (ne.max(te), nm.max(tm), np.max(tp));
        }
        let (last, encoders, modes_out, props_out) =
            found.ok_or_else(|| grew("DRM_IOCTL_MODE_GETCONNECTOR"))?;
        let status = match last.connection {
            1 => ConnectorStatus::Connected,
            2 => ConnectorStatus::Disconnected,
            _ => ConnectorStatus::Unknown,
        };
        Ok(Connector {
            id,
            kind: last.connector_type,
            kind_id: last.connector_type_id,
            status,
            size_mm: (last.mm_width, last.mm_height),
            subpixel: last.subpixel,
            modes: modes_out.iter().map(Mode::from).collect(),
            encoders: ids(&encoders, EncoderId::new),
            encoder: EncoderId::new(last.encoder_id),
            properties: props_out
                .filter_map(|(p, v)| PropertyId::new(p).map(|p| (p, v)))
                .collect(),
        })
    }

    /// `DRM_IOCTL_MODE_GETENCODER`.
    pub fn encoder(&self, id: EncoderId) -> Result<Encoder> {
        let mut a = sys::drm_mode_get_encoder {
            encoder_id: id.get(),
            ..Default::default()
        };
        sys_call::mode_getencoder(self.as_fd(), &mut a)?;
        Ok(Encoder {
            id,
            kind: a.encoder_type,
            crtc: CrtcId::new(a.crtc_id),
            possible_crtcs: a.possible_crtcs,
            possible_clones: a.possible_clones,
        })
    }

    /// `DRM_IOCTL_MODE_GETCRTC`.
    pub fn crtc(&self, id: CrtcId) -> Result<Crtc> {
        let a = sys_call::mode_getcrtc(self.as_fd(), id.get())?;
        Ok(Crtc {
            id,
            framebuffer: FramebufferId::new(a.fb_id),
            position: (a.x, a.y),
            gamma_size: a.gamma_size,
            mode: (a.mode_valid != 0).then(|| Mode::from(&a.mode)),
        })
    }

    /// `DRM_IOCTL_MODE_GETPLANERESOURCES`: plane ids (primary and cursor planes only after
    /// [`ClientCap::UniversalPlanes`](crate::ClientCap::UniversalPlanes) is set).
    pub fn plane_ids(&self) -> Result<Vec<PlaneId>> {
        let [raw] = fill_lists("DRM_IOCTL_MODE_GETPLANERESOURCES", [32], |[b]| {
            Ok([sys_call::mode_getplaneresources(self.as_fd(), b)? as usize])
        })?;
        Ok(ids(&raw, PlaneId::new))
    }

    /// `DRM_IOCTL_MODE_GETPLANE`, with its formats.
    pub fn plane(&self, id: PlaneId) -> Result<Plane> {
        let mut last = sys::drm_mode_get_plane::default();
        let [formats] = fill_lists("DRM_IOCTL_MODE_GETPLANE", [128], |[b]| {
            last = sys_call::mode_getplane(self.as_fd(), id.get(), b)?;
            Ok([last.count_format_types as usize])
        })?;
        Ok(Plane {
            id,
            crtc: CrtcId::new(last.crtc_id),
            framebuffer: FramebufferId::new(last.fb_id),
            possible_crtcs: last.possible_crtcs,
            gamma_size: last.gamma_size,
            formats,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(
            connector_kind_name(sys::DRM_MODE_CONNECTOR_VIRTUAL),
            "Virtual"
        );
        assert_eq!(connector_kind_name(sys::DRM_MODE_CONNECTOR_HDMIA), "HDMI-A");
        assert_eq!(
            connector_kind_name(sys::DRM_MODE_CONNECTOR_WRITEBACK),
            "Writeback"
        );
        assert_eq!(connector_kind_name(99), "Unknown");
        assert_eq!(encoder_kind_name(sys::DRM_MODE_ENCODER_VIRTUAL), "Virtual");
        assert_eq!(encoder_kind_name(99), "Unknown");
    }

    #[test]
    fn fill_lists_grows_to_the_totals_and_truncates() {
        let mut calls = 0;
        // A stand-in for the kernel: fills a buffer only when its total fits the capacity.
        let [a, b] = fill_lists::<2, u32>("t", [2, 8], |[x, y]| {
            calls += 1;
            if x.capacity() >= 5 {
                x.extend(0..5);
            }
            if y.capacity() >= 3 {
                y.extend([7; 3]);
            }
            Ok([5, 3])
        })
        .unwrap();
        assert_eq!(calls, 2, "one retry after the first answer did not fit");
        assert_eq!(a, vec![0, 1, 2, 3, 4]);
        assert_eq!(b, vec![7, 7, 7]);
        // A count that keeps growing gives up instead of looping for ever.
        let mut n = 0;
        let r = fill_lists::<1, u32>("grows", [1], |_| {
            n += 10;
            Ok([n])
        });
        assert!(r.is_err());
    }
}
