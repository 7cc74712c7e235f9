//! `drmtool info`: the driver, node identity, every `DRM_CAP_*`, the client caps the
//! kernel accepts, and the whole KMS state of each device.

use crate::errno::error_class;
use drm_gem::kms::{
    ConnectorStatus, Snapshot, connector_kind_name, encoder_kind_name, format_name, modifier_name,
};
use drm_gem::{ClientCap, Device, DriverCap, NodeInfo};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;

/// The JSON schema version of `drmtool info --json` and `drmtool kms list --json`.
pub const INFO_SCHEMA_VERSION: u32 = 1;

/// Every client cap, in `DRM_CLIENT_CAP_*` order (the order they are set in: writeback
/// needs atomic first).
pub const CLIENT_CAPS: [ClientCap; 6] = [
    ClientCap::Stereo3d,
    ClientCap::UniversalPlanes,
    ClientCap::Atomic,
    ClientCap::AspectRatio,
    ClientCap::WritebackConnectors,
    ClientCap::CursorPlaneHotspot,
];

/// The driver, from `DRM_IOCTL_VERSION`.
#[derive(Debug, Clone, Serialize)]
pub struct DriverOut {
    /// `vkms`, `virtio_gpu`, ...
    pub name: String,
    /// major, minor, patchlevel.
    pub version: [i32; 3],
    /// The driver date (often `0` or empty).
    pub date: String,
    /// Description.
    pub desc: String,
}

/// Where the node sits (from sysfs).
#[derive(Debug, Clone, Serialize)]
pub struct NodeOut {
    /// `primary` or `render`.
    pub kind: &'static str,
    /// `major:minor`.
    pub dev: String,
    /// Bus of the parent device.
    pub bus: Option<String>,
    /// `vvvv:dddd` for PCI parents.
    pub pci_id: Option<String>,
    /// Driver bound to the parent device.
    pub parent_driver: Option<String>,
    /// sysfs directory.
    pub sysfs: String,
}

/// One device.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceInfo {
    /// The node.
    pub path: String,
    /// sysfs identity.
    pub node: NodeOut,
    /// The driver, unless `DRM_IOCTL_VERSION` failed.
    pub driver: Option<DriverOut>,
    /// `DRM_CAP_*` name -> value; null where the kernel does not know the cap (EINVAL) or
    /// the driver does not implement it (EOPNOTSUPP).
    pub caps: BTreeMap<String, Option<u64>>,
    /// `DRM_CLIENT_CAP_*` name -> whether `SET_CLIENT_CAP` accepted value 1 (set in
    /// order on one throwaway open file).
    pub client_caps: BTreeMap<String, bool>,
    /// The KMS state, where the device has KMS.
    pub kms: Option<Snapshot>,
    /// Why there is no KMS state (`EOPNOTSUPP`: a driver without KMS, such as vgem).
    pub kms_error: Option<String>,
    /// Why the node could not be read at all.
    pub error: Option<String>,
    /// Whether the connectors were probed before the KMS state was read (not in the JSON:
    /// it says how fresh the text's connector modes are).
    #[serde(skip)]
    pub probed: bool,
}

/// `drmtool info --json`.
#[derive(Debug, Clone, Serialize)]
pub struct InfoReport {
    /// [`INFO_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// One entry per node.
    pub devices: Vec<DeviceInfo>,
}

/// Reads everything about `n`. With `probe`, connectors are probed first (as master), so
/// that their status and modes are fresh; without, they are what the last probe left.
pub fn device_info(n: &NodeInfo, probe: bool) -> DeviceInfo {
    let mut out = DeviceInfo {
        path: n.path.display().to_string(),
        node: NodeOut {
            kind: n.kind.as_str(),
            dev: format!("{}:{}", n.dev.0, n.dev.1),
            bus: n.bus.clone(),
            pci_id: n.pci_id.map(|(v, d)| format!("{v:04x}:{d:04x}")),
            parent_driver: n.parent_driver.clone(),
            sysfs: n.sysfs.display().to_string(),
        },
        driver: None,
        caps: BTreeMap::new(),
        client_caps: BTreeMap::new(),
        kms: None,
        kms_error: None,
        error: None,
        probed: probe,
    };
    let dev = match Device::open(&n.path) {
        Ok(d) => d,
        Err(e) => {
            out.error = Some(e.to_string());
            return out;
        }
    };
    match dev.driver() {
        Ok(v) => {
            out.driver = Some(DriverOut {
                name: v.name,
                version: [v.version.0, v.version.1, v.version.2],
                date: v.date,
                desc: v.desc,
            });
        }
        Err(e) => out.error = Some(e.to_string()),
    }
    for c in DriverCap::ALL {
        let v = dev.driver_cap(c).unwrap_or(None);
        out.caps.insert(c.name().to_string(), v);
    }
    if let Ok(scratch) = Device::open(&n.path) {
        for c in CLIENT_CAPS {
            out.client_caps
                .insert(c.name().to_string(), scratch.set_client_cap(c, 1).is_ok());
        }
    }
    if probe && let Ok(res) = dev.resources() {
        for c in res.connectors {
            let _ = dev.probe_connector(c);
        }
    }
    match Snapshot::take(&dev) {
        Ok(s) => out.kms = Some(s),
        Err(e) => out.kms_error = Some(format!("{e} [{}]", error_class(&e))),
    }
    out
}

/// The human view of `info`.
pub fn render(d: &DeviceInfo) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{}", d.path);
    if let Some(v) = &d.driver {
        let _ = writeln!(
            s,
            "  driver: {} {}.{}.{} ({}) date {:?}",
            v.name, v.version[0], v.version[1], v.version[2], v.desc, v.date
        );
    }
    let n = &d.node;
    let _ = writeln!(
        s,
        "  node: {} {} bus {} pci {} bound to {} sysfs {}",
        n.kind,
        n.dev,
        n.bus.as_deref().unwrap_or("-"),
        n.pci_id.as_deref().unwrap_or("-"),
        n.parent_driver.as_deref().unwrap_or("-"),
        n.sysfs
    );
    if let Some(e) = &d.error {
        let _ = writeln!(s, "  error: {e}");
    }
    let _ = writeln!(s, "  caps:");
    for (k, v) in &d.caps {
        let v = v.map_or("unsupported".to_string(), |v| v.to_string());
        let _ = writeln!(s, "    {:<32} {v}", k.trim_start_matches("DRM_CAP_"));
    }
    let _ = writeln!(s, "  client caps:");
    for (k, v) in &d.client_caps {
        let _ = writeln!(
            s,
            "    {:<32} {}",
            k.trim_start_matches("DRM_CLIENT_CAP_"),
            if *v { "accepted" } else { "refused" }
        );
    }
    match (&d.kms, &d.kms_error) {
        (Some(k), _) => s.push_str(&render_kms(k, "  ", d.probed)),
        (None, Some(e)) => {
            let _ = writeln!(s, "  kms: none ({e})");
        }
        _ => {}
    }
    s
}

fn prop_lines(s: &mut String, ind: &str, props: &[drm_gem::kms::ObjectProperty]) {
    for p in props {
        let v = serde_json::to_string(&p.value).unwrap_or_default();
        let _ = writeln!(
            s,
            "{ind}{} = {v}{}{}",
            p.property.name,
            if p.property.immutable {
                " (immutable)"
            } else {
                ""
            },
            if p.property.atomic { " (atomic)" } else { "" },
        );
    }
}

/// The modetest-style listing of a snapshot, each line indented by `ind`.
///
/// Connectors that list no modes without a probe (vkms on a fresh boot: "unknown, 0
/// modes") get a line saying that a probe (`--probe`) finds them.
pub fn render_kms(k: &Snapshot, ind: &str, probed: bool) -> String {
    let mut s = String::new();
    let r = &k.resources;
    let _ = writeln!(
        s,
        "{ind}kms: fb size {}x{} .. {}x{}; client caps set: {}",
        r.min_size.0,
        r.min_size.1,
        r.max_size.0,
        r.max_size.1,
        k.client_caps.join(", ")
    );
    connectors(&mut s, k, ind, probed);
    let _ = writeln!(s, "{ind}Encoders:");
    for e in &k.encoders {
        let _ = writeln!(
            s,
            "{ind}  {} {} crtc {} possible crtcs {:#x} clones {:#x}",
            e.id.get(),
            encoder_kind_name(e.kind),
            e.crtc.map_or("-".into(), |c| c.get().to_string()),
            e.possible_crtcs,
            e.possible_clones
        );
    }
    let _ = writeln!(s, "{ind}CRTCs:");
    for c in &k.crtcs {
        let cc = &c.crtc;
        let _ = writeln!(
            s,
            "{ind}  {} fb {} at {},{} gamma {} mode {}",
            cc.id.get(),
            cc.framebuffer.map_or("-".into(), |f| f.get().to_string()),
            cc.position.0,
            cc.position.1,
            cc.gamma_size,
            cc.mode.as_ref().map_or("-".into(), |m| {
                format!("{} {}x{}", m.name(), m.size().0, m.size().1)
            })
        );
        prop_lines(&mut s, &format!("{ind}    "), &c.properties);
    }
    let _ = writeln!(s, "{ind}Planes:");
    for p in &k.planes {
        let pp = &p.plane;
        let _ = writeln!(
            s,
            "{ind}  {} {} crtc {} fb {} possible crtcs {:#x}",
            pp.id.get(),
            p.kind.map_or("?", |k| k.name()),
            pp.crtc.map_or("-".into(), |c| c.get().to_string()),
            pp.framebuffer.map_or("-".into(), |f| f.get().to_string()),
            pp.possible_crtcs
        );
        let f: Vec<String> = pp.formats.iter().map(|&f| format_name(f)).collect();
        let _ = writeln!(s, "{ind}    formats: {}", f.join(" "));
        if let Some(inf) = &p.in_formats {
            let _ = writeln!(s, "{ind}    IN_FORMATS:");
            for fm in inf {
                let m: Vec<String> = fm.modifiers.iter().map(|&m| modifier_name(m)).collect();
                let _ = writeln!(s, "{ind}      {}: {}", format_name(fm.format), m.join(", "));
            }
        }
        prop_lines(&mut s, &format!("{ind}    "), &p.properties);
    }
    let _ = writeln!(s, "{ind}Framebuffers:");
    for f in &k.framebuffers {
        let _ = writeln!(
            s,
            "{ind}  {} {}x{} {} modifier {} pitches {:?}",
            f.id.get(),
            f.size.0,
            f.size.1,
            format_name(f.format),
            f.modifier.map_or("-".into(), modifier_name),
            f.pitches
        );
    }
    s
}

/// The connectors' lines of [`render_kms`]: each with its modes, EDID and properties.
fn connectors(s: &mut String, k: &Snapshot, ind: &str, probed: bool) {
    let _ = writeln!(s, "{ind}Connectors:");
    for c in &k.connectors {
        let cc = &c.connector;
        let _ = writeln!(
            s,
            "{ind}  {} {} ({}) {} {}x{} mm, encoder {}, {} modes",
            cc.id.get(),
            cc.name(),
            connector_kind_name(cc.kind),
            match cc.status {
                ConnectorStatus::Connected => "connected",
                ConnectorStatus::Disconnected => "disconnected",
                ConnectorStatus::Unknown => "unknown",
            },
            cc.size_mm.0,
            cc.size_mm.1,
            cc.encoder.map_or("-".into(), |e| e.get().to_string()),
            cc.modes.len()
        );
        if cc.modes.is_empty() && cc.status != ConnectorStatus::Disconnected && !probed {
            let _ = writeln!(
                s,
                "{ind}    no modes until the connector is probed (hint: add --probe; needs DRM \
                 master)"
            );
        }
        for m in &cc.modes {
            let _ = writeln!(
                s,
                "{ind}    mode {} {}x{} {} kHz {:.2} Hz{}",
                m.name(),
                m.size().0,
                m.size().1,
                m.clock,
                m.refresh_mhz() as f64 / 1000.0,
                if m.is_preferred() { " preferred" } else { "" }
            );
        }
        if let Some(e) = &c.edid {
            let _ = writeln!(
                s,
                "{ind}    EDID {}.{} {} product {:#06x} {} ({}x{} cm, year {}){}",
                e.version.0,
                e.version.1,
                e.manufacturer,
                e.product,
                e.name.as_deref().unwrap_or("-"),
                e.size_cm.0,
                e.size_cm.1,
                e.year,
                if e.checksum_ok { "" } else { " BAD CHECKSUM" }
            );
        }
        prop_lines(s, &format!("{ind}    "), &c.properties);
    }
}
