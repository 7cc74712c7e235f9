//! Choosing a display path (connector, mode, CRTC, primary plane) and the atomic properties
//! that light it.

use super::{
    AtomicRequest, BlobId, ConnectorId, ConnectorState, ConnectorStatus, CrtcId, CrtcState,
    FramebufferId, Mode, PlaneId, PlaneState, PlaneType, Snapshot,
};
use crate::device::Device;
use crate::error::{Error, Result};

/// A display path to light: a connected connector, one of its modes, a CRTC one of its
/// encoders can drive, and a primary plane that CRTC can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Output {
    /// The connector.
    pub connector: ConnectorId,
    /// The mode to show (the sink's preferred one from [`Snapshot::first_output`]).
    pub mode: Mode,
    /// The CRTC.
    pub crtc: CrtcId,
    /// The primary plane on that CRTC.
    pub plane: PlaneId,
}

impl Output {
    /// The mode's size in pixels, as framebuffer dimensions.
    pub fn size(&self) -> (u32, u32) {
        let (w, h) = self.mode.size();
        (u32::from(w), u32::from(h))
    }
}

impl Snapshot {
    /// The state of connector `id`.
    pub fn connector_state(&self, id: ConnectorId) -> Option<&ConnectorState> {
        self.connectors.iter().find(|c| c.id == id)
    }

    /// The state of CRTC `id`.
    pub fn crtc_state(&self, id: CrtcId) -> Option<&CrtcState> {
        self.crtcs.iter().find(|c| c.id == id)
    }

    /// The state of plane `id`.
    pub fn plane_state(&self, id: PlaneId) -> Option<&PlaneState> {
        self.planes.iter().find(|p| p.id == id)
    }

    /// The first plane of type `kind` that CRTC `crtc` can use.
    pub fn plane_for(&self, crtc: CrtcId, kind: PlaneType) -> Option<&PlaneState> {
        let index = self.resources.crtcs.iter().position(|&c| c == crtc)?;
        self.planes
            .iter()
            .find(|p| p.kind == Some(kind) && p.possible_crtcs & (1 << index) != 0)
    }

    /// The output for `connector` showing `mode`: the first CRTC one of the connector's
    /// encoders can drive that has a primary plane. `None` when there is none.
    pub fn output_for(
        &self,
        dev: &Device,
        connector: ConnectorId,
        mode: Mode,
    ) -> Result<Option<Output>> {
        let Some(c) = self.connector_state(connector) else {
            return Ok(None);
        };
        let mut mask = 0u32;
        for &e in &c.encoders {
            mask |= dev.encoder(e)?.possible_crtcs;
        }
        for (i, &crtc) in self.resources.crtcs.iter().enumerate().take(32) {
            if mask & (1 << i) == 0 {
                continue;
            }
            if let Some(p) = self.plane_for(crtc, PlaneType::Primary) {
                return Ok(Some(Output {
                    connector,
                    mode,
                    crtc,
                    plane: p.id,
                }));
            }
        }
        Ok(None)
    }

    /// The first connector (in the kernel's order) that is connected and has a mode, with
    /// its preferred mode (else its first) and a CRTC and primary plane for it. Connectors
    /// are probed (`GETCONNECTOR`; the kernel probes for a master). `None` when no
    /// connector qualifies.
    pub fn first_output(&self, dev: &Device) -> Result<Option<Output>> {
        for c in &self.connectors {
            let probed = dev.probe_connector(c.id)?;
            if probed.status != ConnectorStatus::Connected {
                continue;
            }
            let preferred = probed.modes.iter().find(|m| m.is_preferred());
            let Some(&mode) = preferred.or(probed.modes.first()) else {
                continue;
            };
            if let Some(out) = self.output_for(dev, c.id, mode)? {
                return Ok(Some(out));
            }
        }
        Ok(None)
    }

    /// Adds to `req` what shows all of `fb` (`size` pixels) on `plane` of `crtc` at
    /// `(x, y)`, unscaled: `FB_ID`, `CRTC_ID`, `SRC_*` (16.16 fixed point) and `CRTC_*`.
    ///
    /// # Errors
    /// [`Error::NotFound`] when the plane is not in the snapshot or lacks a property.
    pub fn set_plane(
        &self,
        req: &mut AtomicRequest<'_>,
        plane: PlaneId,
        crtc: CrtcId,
        fb: FramebufferId,
        size: (u32, u32),
        at: (i32, i32),
    ) -> Result<()> {
        let p = self.plane_state(plane).ok_or_else(|| Error::NotFound {
            what: format!("plane {plane} in the snapshot"),
        })?;
        let (w, h) = size;
        let id = |name| p.property_id(name);
        req.set(plane, id("FB_ID")?, fb)
            .set(plane, id("CRTC_ID")?, crtc)
            .set(plane, id("SRC_X")?, 0u32)
            .set(plane, id("SRC_Y")?, 0u32)
            .set(plane, id("SRC_W")?, u64::from(w) << 16)
            .set(plane, id("SRC_H")?, u64::from(h) << 16)
            .set(plane, id("CRTC_X")?, at.0)
            .set(plane, id("CRTC_Y")?, at.1)
            .set(plane, id("CRTC_W")?, w)
            .set(plane, id("CRTC_H")?, h);
        Ok(())
    }

    /// Adds to `req` everything that lights `out` with `fb` (the mode's size) in the mode
    /// blob `mode` (made with [`Device::create_blob`] from [`Mode::to_blob_bytes`]): the
    /// CRTC's `ACTIVE` and `MODE_ID`, the connector's `CRTC_ID`, and the primary plane
    /// ([`Snapshot::set_plane`]). Commit with `AtomicFlags::ALLOW_MODESET`.
    ///
    /// # Errors
    /// [`Error::NotFound`] when an object is not in the snapshot or lacks a property.
    pub fn light(
        &self,
        req: &mut AtomicRequest<'_>,
        out: &Output,
        mode: BlobId,
        fb: FramebufferId,
    ) -> Result<()> {
        let missing = |what: String| Error::NotFound { what };
        let crtc = self
            .crtc_state(out.crtc)
            .ok_or_else(|| missing(format!("CRTC {} in the snapshot", out.crtc)))?;
        let conn = self
            .connector_state(out.connector)
            .ok_or_else(|| missing(format!("connector {} in the snapshot", out.connector)))?;
        req.set(out.crtc, crtc.property_id("ACTIVE")?, true)
            .set(out.crtc, crtc.property_id("MODE_ID")?, mode)
            .set(out.connector, conn.property_id("CRTC_ID")?, out.crtc);
        self.set_plane(req, out.plane, out.crtc, fb, out.size(), (0, 0))
    }
}
