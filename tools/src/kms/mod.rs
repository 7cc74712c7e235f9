//! `drmtool kms`: a modetest-style listing, a mode set with a test pattern, and a PNG of
//! what a CRTC shows.

use drm_gem::DrmFourcc;
use drm_gem::kms::{
    AtomicFlags, AtomicRequest, ConnectorStatus, FbSpec, Mode, Output, PlaneType, Snapshot,
};
use drm_gem::{ClientCap, Device, DumbBuffer, DumbSpec};
use std::path::Path;
use std::time::Duration;

/// What `drmtool kms` returns.
pub type KmsResult<T> = Result<T, KmsError>;

/// Why a KMS command failed; each message is one line with the cause and a hint.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KmsError {
    /// No DRM devices, or the spec names none.
    #[error(transparent)]
    Select(#[from] crate::gpu::SelectError),
    /// None of the chosen nodes has KMS.
    #[error(
        "no KMS device{}: {why} (hint: pick one with --device, `drmtool devices` lists them;          vgem has no KMS)",
        spec.as_ref().map(|s| format!(" matches {s}")).unwrap_or_default()
    )]
    NoKmsDevice {
        /// The `--device` spec, if one was given.
        spec: Option<String>,
        /// What each node answered.
        why: String,
    },
    /// A connector, mode or CRTC the caller named is not there.
    #[error("no {what} {name:?}{place}; there are: {have} (hint: `drmtool kms list`)")]
    NotFound {
        /// `connector`, `mode` or `CRTC`.
        what: &'static str,
        /// The name or id given.
        name: String,
        /// Where it was looked for (` on that connector`), or nothing.
        place: &'static str,
        /// What is there.
        have: String,
    },
    /// A DRM call failed.
    #[error("{what}: {source}")]
    Drm {
        /// What was being done.
        what: String,
        /// The call's error.
        #[source]
        source: drm_gem::Error,
    },
    /// What was asked is well formed but this device, or its state, cannot do it (a
    /// disconnected connector, no CRTC for it, not DRM master, a CRTC that is off, a
    /// framebuffer format drmtool does not convert, a refused writeback).
    #[error("{0}")]
    Cannot(String),
}

/// A [`KmsError::Drm`] maker for `map_err`.
fn drm(what: impl Into<String>) -> impl FnOnce(drm_gem::Error) -> KmsError {
    let what = what.into();
    move |source| KmsError::Drm { what, source }
}

/// `DRM_MODE_CONNECTOR_WRITEBACK`.
const WRITEBACK: u32 = 18;

/// The colour of pixel (`x`, `y`) of the test pattern for a `w`x`h` mode, as XRGB8888:
/// eight vertical colour bars (white, yellow, cyan, green, magenta, red, blue, black) over
/// the top three quarters, a grey ramp below.
pub fn pattern_pixel(x: u32, y: u32, w: u32, h: u32) -> u32 {
    const BARS: [u32; 8] = [
        0xffffff, 0xffff00, 0x00ffff, 0x00ff00, 0xff00ff, 0xff0000, 0x0000ff, 0x000000,
    ];
    if y < h / 4 * 3 {
        BARS[(x as usize * 8 / w.max(1) as usize).min(7)]
    } else {
        let g = x * 255 / w.max(1);
        g << 16 | g << 8 | g
    }
}

/// Fills a dumb buffer with the test pattern.
fn paint(buf: &mut DumbBuffer<&Device>, w: u32, h: u32) -> drm_gem::Result<()> {
    let pitch = buf.pitch() as usize;
    let mut px = vec![0u8; pitch * h as usize];
    for y in 0..h {
        for x in 0..w {
            let at = y as usize * pitch + x as usize * 4;
            px[at..at + 4].copy_from_slice(&pattern_pixel(x, y, w, h).to_le_bytes());
        }
    }
    buf.map()?.write_at(0, &px)
}

/// Opens the KMS device `spec` selects (the first primary node with KMS without one).
///
/// # Errors
/// [`KmsError::Select`] without devices or a match, [`KmsError::NoKmsDevice`] when no
/// chosen node has KMS.
pub fn open_kms(spec: Option<&crate::gpu::GpuSpec>) -> KmsResult<(Device, String)> {
    let nodes = crate::gpu::nodes(spec)?;
    let mut why = Vec::new();
    for n in &nodes {
        if n.kind != drm_gem::NodeKind::Primary {
            continue;
        }
        match Device::open(&n.path) {
            Ok(d) => match d.resources() {
                Ok(_) => return Ok((d, n.path.display().to_string())),
                Err(e) => why.push(format!("{}: {e}", n.path.display())),
            },
            Err(e) => why.push(format!("{}: {e}", n.path.display())),
        }
    }
    Err(KmsError::NoKmsDevice {
        spec: spec.map(ToString::to_string),
        why: if why.is_empty() {
            "no primary node".into()
        } else {
            why.join("; ")
        },
    })
}

/// What `modeset` lit, for the caller to report.
#[derive(Debug, Clone)]
pub struct Lit {
    /// Connector name.
    pub connector: String,
    /// CRTC id.
    pub crtc: u32,
    /// Mode name and size.
    pub mode: String,
    /// `atomic` or `legacy`.
    pub path: &'static str,
}

fn pick_mode(modes: &[Mode], want: Option<&str>) -> KmsResult<Mode> {
    if let Some(w) = want {
        return modes
            .iter()
            .find(|m| m.name() == w || format!("{}x{}", m.size().0, m.size().1) == w)
            .copied()
            .ok_or_else(|| KmsError::NotFound {
                what: "mode",
                name: w.into(),
                place: " on that connector",
                have: modes.iter().map(Mode::name).collect::<Vec<_>>().join(", "),
            });
    }
    modes
        .iter()
        .find(|m| m.is_preferred())
        .or_else(|| modes.first())
        .copied()
        .ok_or_else(|| {
            KmsError::Cannot(
                "the connector has no modes (hint: is anything attached? `drmtool kms list`)"
                    .into(),
            )
        })
}

/// The index of the CRTC for `probed` (a connector): the one its encoder drives now, else
/// the first any of its encoders can drive.
fn crtc_for(dev: &Device, snap: &Snapshot, probed: &drm_gem::kms::Connector) -> KmsResult<usize> {
    let mask = probed
        .encoders
        .iter()
        .filter_map(|&id| dev.encoder(id).ok())
        .fold(0u32, |m, enc| m | enc.possible_crtcs);
    let current = probed
        .encoder
        .and_then(|id| dev.encoder(id).ok())
        .and_then(|enc| enc.crtc);
    current
        .and_then(|c| snap.resources.crtcs.iter().position(|&x| x == c))
        .or_else(|| (0..snap.resources.crtcs.len()).find(|i| mask & (1 << i) != 0))
        .ok_or_else(|| KmsError::Cannot("no CRTC can drive that connector".into()))
}

/// Sets `mode` (by name or `WxH`; the preferred one without) on `connector` (name such as
/// `Virtual-1`, or id) with the test pattern, calls `hold` while it shows, then restores
/// what the CRTC showed before (or turns it off). Atomic where the kernel accepts the
/// client cap, else legacy `SETCRTC`.
pub fn modeset(
    dev: &Device,
    connector: &str,
    mode: Option<&str>,
    hold: &mut dyn FnMut(&Lit),
) -> KmsResult<Lit> {
    let _ = dev.set_client_cap(ClientCap::UniversalPlanes, 1);
    let atomic = dev.set_client_cap(ClientCap::Atomic, 1).is_ok();
    let snap = Snapshot::take(dev).map_err(drm("reading the KMS state"))?;
    let conn = snap
        .connectors
        .iter()
        .find(|c| c.connector.name() == connector || c.id.get().to_string() == connector)
        .ok_or_else(|| KmsError::NotFound {
            what: "connector",
            name: connector.into(),
            place: "",
            have: snap
                .connectors
                .iter()
                .map(|c| c.connector.name())
                .collect::<Vec<_>>()
                .join(", "),
        })?;
    if let Err(err) = dev.set_master() {
        return Err(KmsError::Cannot(format!(
            "cannot become DRM master: {err} (hint: stop the compositor or run as root on a free VT)"
        )));
    }
    let probed = dev
        .probe_connector(conn.id)
        .map_err(drm("probing the connector"))?;
    if probed.status == ConnectorStatus::Disconnected {
        return Err(KmsError::Cannot(format!(
            "{connector} is disconnected (hint: pick a connected one from `drmtool kms list`)"
        )));
    }
    let m = pick_mode(&probed.modes, mode)?;
    let idx = crtc_for(dev, &snap, &probed)?;
    let crtc = &snap.crtcs[idx];
    // The connectors the CRTC drives now, for the restore.
    let before_conns: Vec<_> = snap
        .connectors
        .iter()
        .filter(|c| {
            c.connector
                .encoder
                .and_then(|id| dev.encoder(id).ok())
                .and_then(|enc| enc.crtc)
                == Some(crtc.id)
        })
        .map(|c| c.id)
        .collect();

    let (w, h) = (u32::from(m.size().0), u32::from(m.size().1));
    let mut buf = DumbBuffer::create(
        dev,
        DumbSpec {
            width: w,
            height: h,
            bpp: 32,
        },
    )
    .map_err(drm("creating the pattern buffer"))?;
    paint(&mut buf, w, h).map_err(drm("drawing the pattern"))?;
    let fb = dev
        .add_framebuffer(&FbSpec::for_dumb(&buf, DrmFourcc::Xrgb8888))
        .map_err(drm("adding the framebuffer"))?;
    let lit = Lit {
        connector: conn.connector.name(),
        crtc: crtc.id.get(),
        mode: if m.name() == format!("{w}x{h}") {
            m.name()
        } else {
            format!("{} ({w}x{h})", m.name())
        },
        path: if atomic { "atomic" } else { "legacy" },
    };
    if atomic {
        let plane = snap
            .plane_for(crtc.id, PlaneType::Primary)
            .ok_or_else(|| KmsError::Cannot("no primary plane for that CRTC".into()))?;
        let blob = dev
            .create_blob(&m.to_blob_bytes())
            .map_err(drm("creating the mode blob"))?;
        let out = Output {
            connector: conn.id,
            mode: m,
            crtc: crtc.id,
            plane: plane.id,
        };
        let mut req = AtomicRequest::new();
        snap.light(&mut req, &out, blob.id(), fb.id())
            .map_err(drm("building the atomic request"))?;
        dev.atomic_commit(&req, AtomicFlags::ALLOW_MODESET, 0)
            .map_err(drm("the atomic commit"))?;
    } else {
        dev.set_crtc(crtc.id, fb.id(), (0, 0), &[conn.id], &m)
            .map_err(drm("DRM_IOCTL_MODE_SETCRTC"))?;
    }
    // From here on the pattern shows; the guard (dropped before `fb`, declared after it)
    // puts back what was there however this function is left, a panic in `hold` included.
    let guard = Restore {
        dev,
        snap: &snap,
        idx,
        atomic,
        before_conns,
        armed: true,
    };
    hold(&lit);
    guard
        .finish()
        .map_err(drm("restoring the previous state"))?;
    drop(fb);
    Ok(lit)
}

/// Puts back what a CRTC showed before [`modeset`] (its framebuffer and mode, else off):
/// by [`Restore::finish`], which reports an error, or on drop (a panic, an early return),
/// which cannot.
struct Restore<'a> {
    dev: &'a Device,
    snap: &'a Snapshot,
    idx: usize,
    atomic: bool,
    before_conns: Vec<drm_gem::kms::ConnectorId>,
    armed: bool,
}

impl Restore<'_> {
    fn restore(&mut self) -> drm_gem::Result<()> {
        self.armed = false;
        let before = &self.snap.crtcs[self.idx].crtc;
        // Legacy SETCRTC works for both paths.
        match (before.framebuffer, before.mode) {
            (Some(f), Some(mode)) => {
                self.dev
                    .set_crtc(before.id, f, before.position, &self.before_conns, &mode)
            }
            _ => restore_off(self.dev, self.snap, self.idx, self.atomic),
        }
    }

    fn finish(mut self) -> drm_gem::Result<()> {
        self.restore()
    }
}

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        if self.armed {
            // Nothing to report to from a drop; the explicit path is `finish`.
            let _ = self.restore();
        }
    }
}

fn restore_off(dev: &Device, snap: &Snapshot, idx: usize, atomic: bool) -> drm_gem::Result<()> {
    let crtc = &snap.crtcs[idx];
    if !atomic {
        return dev.disable_crtc(crtc.id);
    }
    // Atomic: detach every plane and connector from the CRTC, then switch it off.
    let mut req = AtomicRequest::new();
    for c in &snap.connectors {
        if let Some(p) = c.property("CRTC_ID").map(|p| p.property.id) {
            let cur = c
                .properties
                .iter()
                .find(|x| x.property.id == p)
                .map_or(0, |x| x.raw);
            if cur == u64::from(crtc.id.get()) || c.kind != WRITEBACK {
                // Connectors not on another CRTC end up off; those were off before too.
                if cur == 0 || cur == u64::from(crtc.id.get()) {
                    req.set(c.id, p, 0);
                }
            }
        }
    }
    for p in &snap.planes {
        if p.possible_crtcs & (1 << idx) == 0 {
            continue;
        }
        let cur = p
            .property("CRTC_ID")
            .map(|p| p.property.id)
            .and_then(|id| p.properties.iter().find(|x| x.property.id == id))
            .map_or(0, |x| x.raw);
        if cur == 0 || cur == u64::from(crtc.id.get()) {
            if let Some(id) = p.property("FB_ID").map(|p| p.property.id) {
                req.set(p.id, id, 0);
            }
            if let Some(id) = p.property("CRTC_ID").map(|p| p.property.id) {
                req.set(p.id, id, 0);
            }
        }
    }
    if let Some(id) = crtc.property("ACTIVE").map(|p| p.property.id) {
        req.set(crtc.id, id, 0);
    }
    if let Some(id) = crtc.property("MODE_ID").map(|p| p.property.id) {
        req.set(crtc.id, id, 0);
    }
    dev.atomic_commit(&req, AtomicFlags::ALLOW_MODESET, 0)
        .map(|_| ())
}

mod capture;
pub use capture::{Image, Method, WritebackWay, screenshot, write_png};
