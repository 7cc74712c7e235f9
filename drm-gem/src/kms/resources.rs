//! KMS objects: resources, connectors, encoders, CRTCs and planes.
//!
//! Every list query is count-then-fill with a sized first guess, so the common case is one
//! ioctl; it retries only when the kernel reports more entries than fitted, and never
//! trusts a count beyond the buffer it passed.

use super::ids::{ConnectorId, CrtcId, EncoderId, PlaneId, PropertyId, ids};
use super::{FramebufferId, Mode};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::sys_call::{self, OutBuf, OutElem};
use ioctl_sys::drm as sys;
use rustix::fd::AsFd;
use std::mem::MaybeUninit;

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

/// Slots for one list of a count-then-fill query: `S` on the stack first (no allocation,
/// nothing zeroed), then the kernel's total on the heap when those were too few.
pub(crate) struct Slots<T, const S: usize> {
    stack: [MaybeUninit<T>; S],
    heap: Vec<T>,
    want: usize,
}

impl<T: OutElem, const S: usize> Slots<T, S> {
    /// `S` stack slots.
    pub(crate) fn new() -> Self {
        Self {
            stack: [const { MaybeUninit::uninit() }; S],
            heap: Vec::new(),
            want: S,
        }
    }

    /// The slots for the next try: the stack ones while they are enough, else as many as
    /// the kernel last reported, on the heap.
    pub(crate) fn buf(&mut self) -> OutBuf<'_, T> {
        if self.want <= S {
            OutBuf::new(&mut self.stack)
        } else {
            self.heap = Vec::with_capacity(self.want);
            OutBuf::new(self.heap.spare_capacity_mut())
        }
    }

    /// Makes room for `total` entries on the next try.
    pub(crate) fn grow(&mut self, total: usize) {
        self.want = self.want.max(total);
    }
}

/// Runs a count-then-fill query over `N` lists of `T`: `fill(bufs)` offers the slots to the
/// kernel and returns its totals and the rest of its answer (`A`); when every list fitted,
/// `done` turns what the kernel wrote into the result. The first try uses `S` stack slots per list, so the common case is one
/// ioctl and no temporary allocation; a list that did not fit gets its total on the heap.
pub(crate) fn fill_lists<const N: usize, const S: usize, T: OutElem, A, R>(
    what: &str,
    mut fill: impl FnMut(&mut [OutBuf<'_, T>; N]) -> Result<([usize; N], A)>,
    mut done: impl FnMut([&[T]; N], A) -> R,
) -> Result<R> {
    let mut slots: [Slots<T, S>; N] = core::array::from_fn(|_| Slots::new());
    for _ in 0..RETRIES {
        let mut bufs = slots.each_mut().map(Slots::buf);
        let (totals, answer) = fill(&mut bufs)?;
        if bufs.iter().zip(totals).all(|(b, t)| b.filled().len() == t) {
            return Ok(done(bufs.each_ref().map(OutBuf::filled), answer));
        }
        for (s, t) in slots.iter_mut().zip(totals) {
            s.grow(t);
        }
    }
    Err(grew(what))
}

impl Device {
    /// `DRM_IOCTL_MODE_GETRESOURCES`. EOPNOTSUPP on drivers without KMS (vgem) and on
    /// render nodes (EACCES there: KMS is primary-node only).
    pub fn resources(&self) -> Result<Resources> {
        fill_lists::<4, 32, u32, _, _>(
            "DRM_IOCTL_MODE_GETRESOURCES",
            |[fb, cr, co, en]| {
                let last = sys_call::mode_getresources(self.as_fd(), fb, cr, co, en)?;
                Ok((
                    [
                        last.count_fbs as usize,
                        last.count_crtcs as usize,
                        last.count_connectors as usize,
                        last.count_encoders as usize,
                    ],
                    last,
                ))
            },
            |[fbs, crtcs, connectors, encoders], last| Resources {
                framebuffers: ids(fbs, FramebufferId::new),
                crtcs: ids(crtcs, CrtcId::new),
                connectors: ids(connectors, ConnectorId::new),
                encoders: ids(encoders, EncoderId::new),
                min_size: (last.min_width, last.min_height),
                max_size: (last.max_width, last.max_height),
            },
        )
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
            // No mode slots (count_modes = 0) asks the kernel to probe; the answer is then
            // read below.
            sys_call::mode_getconnector(
                self.as_fd(),
                id.get(),
                &mut OutBuf::new(&mut []),
                &mut OutBuf::new(&mut []),
                &mut OutBuf::new(&mut []),
                &mut OutBuf::new(&mut []),
            )?;
        }
        // The mode slots are never empty: none would make the kernel probe. A first try on
        // the stack (128 modes: 8.5 KiB) fits what most connectors report.
        let mut enc = Slots::<u32, 8>::new();
        let mut modes = Slots::<sys::drm_mode_modeinfo, 128>::new();
        let mut props = Slots::<u32, 64>::new();
        let mut values = Slots::<u64, 64>::new();
        let mut found = None;
        for _ in 0..RETRIES {
            let (mut e, mut m, mut p, mut v) = (enc.buf(), modes.buf(), props.buf(), values.buf());
            let a = sys_call::mode_getconnector(
                self.as_fd(),
                id.get(),
                &mut e,
                &mut m,
                &mut p,
                &mut v,
            )?;
            let (te, tm, tp) = (
                a.count_encoders as usize,
                a.count_modes as usize,
                a.count_props as usize,
            );
            let (e, m, p, v) = (e.filled(), m.filled(), p.filled(), v.filled());
            if e.len() == te && m.len() == tm && p.len() == tp && v.len() == tp {
                found = Some((
                    a,
                    ids(e, EncoderId::new),
                    m.iter().map(Mode::from).collect::<Vec<_>>(),
                    p.iter()
                        .zip(v)
                        .filter_map(|(&p, &v)| PropertyId::new(p).map(|p| (p, v)))
                        .collect::<Vec<_>>(),
                ));
                break;
            }
            enc.grow(te);
            modes.grow(tm);
            props.grow(tp);
            values.grow(tp);
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
            modes: modes_out,
            encoders,
            encoder: EncoderId::new(last.encoder_id),
            properties: props_out,
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
        fill_lists::<1, 64, u32, _, _>(
            "DRM_IOCTL_MODE_GETPLANERESOURCES",
            |[b]| {
                Ok((
                    [sys_call::mode_getplaneresources(self.as_fd(), b)? as usize],
                    (),
                ))
            },
            |[raw], ()| ids(raw, PlaneId::new),
        )
    }

    /// `DRM_IOCTL_MODE_GETPLANE`, with its formats.
    pub fn plane(&self, id: PlaneId) -> Result<Plane> {
        fill_lists::<1, 128, u32, _, _>(
            "DRM_IOCTL_MODE_GETPLANE",
            |[b]| {
                let last = sys_call::mode_getplane(self.as_fd(), id.get(), b)?;
                Ok(([last.count_format_types as usize], last))
            },
            |[formats], last| Plane {
                id,
                crtc: CrtcId::new(last.crtc_id),
                framebuffer: FramebufferId::new(last.fb_id),
                possible_crtcs: last.possible_crtcs,
                gamma_size: last.gamma_size,
                formats: formats.to_vec(),
            },
        )
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
        // Without a kernel nothing is ever filled, so every try reports a miss: the query
        // must give up after RETRIES tries (growing to the totals) instead of looping.
        let mut calls = 0;
        let mut rooms = Vec::new();
        let r = fill_lists::<2, 4, u32, _, _>(
            "t",
            |[x, y]| {
                calls += 1;
                rooms.push((x.room(), y.room()));
                Ok(([5, 3], ()))
            },
            |_, ()| (),
        );
        assert!(r.is_err());
        assert_eq!(calls, RETRIES);
        assert_eq!(rooms[0], (4, 4), "the first try is on the stack");
        assert!(
            rooms[1].0 >= 5 && rooms[1].1 == 4,
            "then the total, on the heap: {rooms:?}"
        );
        // Totals of 0 fit any slots: one try.
        let mut n = 0;
        let got = fill_lists::<1, 4, u32, _, _>(
            "empty",
            |_| {
                n += 1;
                Ok(([0], ()))
            },
            |[a], ()| a.len(),
        )
        .unwrap();
        assert_eq!((n, got), (1, 0));
    }
}
