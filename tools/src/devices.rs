//! `drmtool devices`: every GPU in the one ordering ([`crate::gpu`]) with its nodes: each
//! DRM node with its GPU's index, bus id and NUMA node, its driver and sysfs identity; a GPU
//! without a DRM node (NVIDIA without nvidia-drm, an accelerator) by its vendor node; then
//! every vendor node, per GPU and shared.

use serde::Serialize;

/// One node.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceRow {
    /// The GPU's position in the one ordering (`drmtool run --gpu INDEX`).
    pub index: usize,
    /// PCI bus id of the GPU (its transport's for virtio-gpu).
    pub bus_id: Option<String>,
    /// The `/dev/dri/by-path` name of this node.
    pub by_path: Option<String>,
    /// NUMA node of the PCI function.
    pub numa_node: Option<u32>,
    /// CPUs local to it.
    pub local_cpulist: Option<String>,
    /// The node (`/dev/dri/card0`).
    pub path: String,
    /// `primary` or `render`.
    pub kind: &'static str,
    /// `major:minor`.
    pub dev: String,
    /// The DRM driver.
    pub driver: Option<String>,
    /// The driver bound to the parent device in sysfs.
    pub parent_driver: Option<String>,
    /// `DRM_IOCTL_VERSION`'s major.minor.patch (from a render node).
    pub driver_version: Option<String>,
    /// The bus (`pci`, `platform`, `virtio`).
    pub bus: Option<String>,
    /// PCI `vendor:device`.
    pub pci_id: Option<String>,
    /// The node's sysfs directory.
    pub sysfs: String,
    /// Why the version could not be read.
    pub error: Option<String>,
}

/// One vendor node ([`crate::vendor`]): NVIDIA, KFD, accel.
#[derive(Debug, Clone, Serialize)]
pub struct VendorRow {
    /// The index of the GPU it belongs to, when that GPU is in the ordering.
    pub index: Option<usize>,
    /// The device it belongs to (PCI bus id); `None`: shared by every GPU of its vendor.
    pub owner: Option<String>,
    /// The node (`/dev/nvidia0`).
    pub path: String,
    /// What it is (`nvidia-gpu`, `nvidia-ctl`, `kfd`, `accel`, ...).
    pub kind: crate::vendor::VendorNodeKind,
    /// `major:minor`, from the kernel's text (for IMEX channels, the file in `/dev`,
    /// checked against the kernel's major).
    pub dev: String,
    /// Whether the file is in /dev now.
    pub present: bool,
    /// Where the node was found: `kernel` (its text, whether or not `/dev` has the file)
    /// or `dev` (IMEX channels, which the kernel lists nowhere).
    pub dev_from: crate::vendor::DevSource,
}

/// One GPU of the ordering and the paths of its nodes.
#[derive(Debug, Clone, Serialize)]
pub struct GpuRow {
    /// Its position in the one ordering.
    pub index: usize,
    /// PCI bus id (its transport's for virtio-gpu); `None` for a platform device.
    pub bus_id: Option<String>,
    /// The sysfs device's name (its bus id for a GPU without a DRM node).
    pub name: String,
    /// The DRM driver, or for a GPU without a DRM node the driver bound to its device.
    pub driver: Option<String>,
    /// PCI `vendor:device`.
    pub pci_id: Option<String>,
    /// NUMA node of the PCI function.
    pub numa_node: Option<u32>,
    /// CPUs local to it.
    pub local_cpulist: Option<String>,
    /// Its DRM nodes, card first; empty for a GPU that has none.
    pub drm_nodes: Vec<String>,
    /// Its own vendor nodes (`/dev/nvidia0`, its MIG capability nodes, `/dev/accel/accel0`).
    pub vendor_nodes: Vec<String>,
}

/// The rows of `gpus` (paths escaped).
pub fn gpu_rows(gpus: &[crate::gpu::Gpu]) -> Vec<GpuRow> {
    let text = |p: &std::path::Path| crate::Untrusted::from(&*p.to_string_lossy()).to_string();
    gpus.iter()
        .map(|g| GpuRow {
            index: g.index,
            bus_id: g.bus_id.clone(),
            name: text(std::path::Path::new(&g.name)),
            driver: g.driver.clone(),
            pci_id: g.pci_id.map(|(v, d)| format!("{v:04x}:{d:04x}")),
            numa_node: g.numa_node,
            local_cpulist: g.local_cpulist.clone(),
            drm_nodes: g.nodes.iter().map(|n| text(&n.path)).collect(),
            vendor_nodes: g.vendor_nodes.iter().map(|n| text(&n.path)).collect(),
        })
        .collect()
}

/// A vendor node the discovery could not identify, and why.
#[derive(Debug, Clone, Serialize)]
pub struct UnidentifiedRow {
    /// What it would have been.
    pub kind: crate::vendor::VendorNodeKind,
    /// The file whose text or name was refused (escaped).
    pub source: String,
    /// The device it belongs to, where known.
    pub owner: Option<String>,
    /// Why (escaped).
    pub reason: String,
}

/// `drmtool devices --json` (`tools/schema/devices.schema.json`).
#[derive(Debug, Clone, Serialize)]
pub struct DevicesReport {
    /// [`crate::SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Every GPU in the ordering, with the paths of its DRM and vendor nodes (a GPU without
    /// a DRM node is here and in `vendor_nodes`, not in `devices`).
    pub gpus: Vec<GpuRow>,
    /// Every DRM node, in the ordering: GPUs by bus id then name, each card before its
    /// render node.
    pub devices: Vec<DeviceRow>,
    /// The vendor nodes (NVIDIA, KFD, accel) of this machine, per GPU then shared.
    pub vendor_nodes: Vec<VendorRow>,
    /// Vendor nodes that could not be identified (`run` refuses their GPUs).
    pub unidentified: Vec<UnidentifiedRow>,
    /// Why the list is empty, when it is ([`crate::gpu::no_devices_message`]).
    pub reason: Option<String>,
}

/// The vendor rows of `report`, each with the index of its GPU in `gpus`.
pub fn vendor_rows(
    report: &crate::vendor::VendorReport,
    gpus: &[crate::gpu::Gpu],
) -> (Vec<VendorRow>, Vec<UnidentifiedRow>) {
    let index = |owner: &Option<String>| {
        owner.as_deref().and_then(|o| {
            gpus.iter()
                .find(|g| g.bus_id.as_deref() == Some(o) || g.name == o)
                .map(|g| g.index)
        })
    };
    let text = |s: &str| crate::Untrusted::from(s).to_string();
    let nodes = report
        .nodes
        .iter()
        .map(|n| VendorRow {
            index: index(&n.owner),
            owner: n.owner.clone(),
            path: text(&n.path.to_string_lossy()),
            kind: n.kind,
            dev: format!("{}:{}", n.dev.0, n.dev.1),
            present: n.present,
            dev_from: n.dev_source(),
        })
        .collect();
    let unidentified = report
        .unidentified
        .iter()
        .map(|u| UnidentifiedRow {
            kind: u.kind,
            source: text(&u.source.to_string_lossy()),
            owner: u.owner.as_deref().map(text),
            reason: text(&u.reason.to_string()),
        })
        .collect();
    (nodes, unidentified)
}

/// Every GPU and node of this machine, in the ordering.
pub fn list() -> DevicesReport {
    let m = crate::gpu::Machine::read();
    let infos = m.drm.as_deref().unwrap_or_default();
    let mut devices = Vec::new();
    for g in &m.gpus {
        for n in &g.nodes {
            if let Some(info) = infos.iter().find(|i| i.path == n.path) {
                devices.push(row(info.clone(), g, n.by_path.clone()));
            }
        }
    }
    let reason = match (&m.drm, m.gpus.is_empty()) {
        (Err(e), true) => Some(crate::gpu::no_devices_message(e).to_string()),
        _ => None,
    };
    let (vendor_nodes, unidentified) = vendor_rows(&m.vendor, &m.gpus);
    DevicesReport {
        schema_version: crate::SCHEMA_VERSION,
        gpus: gpu_rows(&m.gpus),
        devices,
        vendor_nodes,
        unidentified,
        reason,
    }
}

/// The table `drmtool devices` prints.
pub fn render(r: &DevicesReport) -> String {
    let opt = |o: &Option<String>| o.clone().unwrap_or_else(|| "-".into());
    let mut rows: Vec<Vec<String>> = vec![
        [
            "GPU", "BUS ID", "NODE", "KIND", "DEV", "DRIVER", "VERSION", "BUS", "BOUND TO", "PCI",
            "NUMA", "SYSFS",
        ]
        .map(String::from)
        .to_vec(),
    ];
    let drm_row = |r: &DeviceRow| {
        vec![
            r.index.to_string(),
            opt(&r.bus_id),
            r.path.clone(),
            r.kind.into(),
            r.dev.clone(),
            opt(&r.driver),
            r.error
                .clone()
                .map(|e| format!("error: {e}"))
                .unwrap_or_else(|| opt(&r.driver_version)),
            opt(&r.bus),
            opt(&r.parent_driver),
            opt(&r.pci_id),
            r.numa_node.map_or("-".into(), |n| n.to_string()),
            r.sysfs.clone(),
        ]
    };
    // A report without GPU rows (none read) lists its DRM nodes as they are.
    if r.gpus.is_empty() {
        rows.extend(r.devices.iter().map(drm_row));
    }
    for g in &r.gpus {
        let drm: Vec<&DeviceRow> = r.devices.iter().filter(|d| d.index == g.index).collect();
        if drm.is_empty() {
            rows.extend(vendor_only_rows(r, g));
        }
        rows.extend(drm.into_iter().map(drm_row));
    }
    let mut out: String = crate::render::align(&rows)
        .into_iter()
        .map(|l| l + "\n")
        .collect();
    out.push_str(&render_vendor(r));
    out
}

/// The rows of a GPU without a DRM node in the nodes' table: its own GPU node
/// (`/dev/nvidiaN`, `/dev/accel/accelN`; its MIG capability nodes are in the vendor table),
/// the driver bound to its device, no DRM version (it has no DRM node to ask).
fn vendor_only_rows(r: &DevicesReport, g: &GpuRow) -> Vec<Vec<String>> {
    use crate::vendor::VendorNodeKind as K;
    let opt = |o: &Option<String>| o.clone().unwrap_or_else(|| "-".into());
    r.vendor_nodes
        .iter()
        .filter(|v| v.index == Some(g.index) && matches!(v.kind, K::NvidiaGpu | K::Accel))
        .map(|v| {
            vec![
                g.index.to_string(),
                opt(&g.bus_id),
                v.path.clone(),
                kind_name(v.kind),
                v.dev.clone(),
                opt(&g.driver),
                "-".into(),
                if g.bus_id.is_some() { "pci" } else { "-" }.into(),
                opt(&g.driver),
                opt(&g.pci_id),
                g.numa_node.map_or("-".into(), |n| n.to_string()),
                g.bus_id
                    .as_ref()
                    .map_or("-".into(), |b| format!("/sys/bus/pci/devices/{b}")),
            ]
        })
        .collect()
}

/// A vendor node kind as JSON names it (`nvidia-gpu`).
fn kind_name(k: crate::vendor::VendorNodeKind) -> String {
    serde_json::to_value(k)
        .ok()
        .and_then(|k| k.as_str().map(String::from))
        .unwrap_or_default()
}

/// The vendor nodes' table and the unidentified ones, after the DRM nodes (nothing when
/// there are none).
fn render_vendor(r: &DevicesReport) -> String {
    let mut out = String::new();
    if !r.vendor_nodes.is_empty() {
        let mut rows: Vec<Vec<String>> = vec![
            ["GPU", "NODE", "KIND", "DEV", "BELONGS TO", "IN /dev"]
                .map(String::from)
                .to_vec(),
        ];
        rows.extend(r.vendor_nodes.iter().map(|v| {
            vec![
                v.index.map_or("-".into(), |i| i.to_string()),
                v.path.clone(),
                kind_name(v.kind),
                v.dev.clone(),
                v.owner.clone().unwrap_or_else(|| "shared".into()),
                if v.present { "yes" } else { "no" }.into(),
            ]
        }));
        out.push('\n');
        for l in crate::render::align(&rows) {
            out.push_str(&l);
            out.push('\n');
        }
    }
    for u in &r.unidentified {
        out.push_str(&format!(
            "unidentified: {} ({}): {}; `drmtool run` refuses its GPU\n",
            u.source,
            u.owner.as_deref().unwrap_or("no device"),
            u.reason
        ));
    }
    out
}

/// A row of `devices`. The driver version is read from a render node (`DRM_IOCTL_VERSION`),
/// the GPU's render node standing in for its primary: a primary node is never opened here
/// (its first opener is DRM master while it holds the file, and another program's
/// SET_MASTER at that moment would fail), so a GPU without a render node (vkms, bochs, qxl)
/// shows no version; `drmtool info PATH` opens the node itself.
fn row(n: drm_gem::NodeInfo, g: &crate::gpu::Gpu, by_path: Option<String>) -> DeviceRow {
    let render = match n.kind {
        drm_gem::NodeKind::Render => Some(n.path.clone()),
        drm_gem::NodeKind::Primary => g.render().map(|m| m.path.clone()),
    };
    let (version, error) = match render.map(|p| drm_gem::Device::open(&p).and_then(|d| d.driver()))
    {
        Some(Ok(v)) => (
            Some(format!("{}.{}.{}", v.version.0, v.version.1, v.version.2)),
            None,
        ),
        Some(Err(e)) => (None, Some(e.to_string())),
        None => (None, None),
    };
    DeviceRow {
        index: g.index,
        bus_id: g.bus_id.clone(),
        by_path,
        numa_node: g.numa_node,
        local_cpulist: g.local_cpulist.clone(),
        path: n.path.display().to_string(),
        kind: n.kind.as_str(),
        dev: format!("{}:{}", n.dev.0, n.dev.1),
        driver: n.driver,
        parent_driver: n.parent_driver,
        driver_version: version,
        bus: n.bus,
        pci_id: n.pci_id.map(|(v, d)| format!("{v:04x}:{d:04x}")),
        sysfs: n.sysfs.display().to_string(),
        error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vendor::VendorNodeKind;

    /// The vendor table follows the DRM one; an unidentified node says `run` refuses its
    /// GPU; hostile text arrives escaped (the rows hold what `vendor_rows` escaped).
    #[test]
    fn vendor_nodes_are_listed_after_the_drm_nodes() {
        let r = DevicesReport {
            schema_version: 1,
            gpus: Vec::new(),
            devices: Vec::new(),
            vendor_nodes: vec![
                VendorRow {
                    index: Some(2),
                    owner: Some("0000:3b:00.0".into()),
                    path: "/dev/nvidia0".into(),
                    kind: VendorNodeKind::NvidiaGpu,
                    dev: "195:0".into(),
                    present: true,
                    dev_from: crate::vendor::DevSource::Kernel,
                },
                VendorRow {
                    index: None,
                    owner: None,
                    path: "/dev/nvidia-uvm".into(),
                    kind: VendorNodeKind::NvidiaUvm,
                    dev: "509:0".into(),
                    present: false,
                    dev_from: crate::vendor::DevSource::Kernel,
                },
            ],
            unidentified: vec![UnidentifiedRow {
                kind: VendorNodeKind::NvidiaGpu,
                source: "/proc/driver/nvidia/gpus/0000:5e:00.0/information".into(),
                owner: Some("0000:5e:00.0".into()),
                reason: "no \"Device Minor\" line".into(),
            }],
            reason: None,
        };
        let text = render(&r);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[2].split_whitespace().collect::<Vec<_>>()[..3],
            ["GPU", "NODE", "KIND"]
        );
        assert_eq!(
            lines[3].split_whitespace().collect::<Vec<_>>(),
            [
                "2",
                "/dev/nvidia0",
                "nvidia-gpu",
                "195:0",
                "0000:3b:00.0",
                "yes"
            ]
        );
        assert_eq!(
            lines[4].split_whitespace().collect::<Vec<_>>(),
            [
                "-",
                "/dev/nvidia-uvm",
                "nvidia-uvm",
                "509:0",
                "shared",
                "no"
            ]
        );
        assert!(lines[5].starts_with("unidentified: /proc/driver/nvidia/gpus/0000:5e:00.0"));
        assert!(
            lines[5].ends_with("`drmtool run` refuses its GPU"),
            "{}",
            lines[5]
        );
        let hostile = crate::vendor::VendorReport {
            nodes: Vec::new(),
            unidentified: vec![crate::vendor::Unidentified {
                kind: VendorNodeKind::NvidiaGpu,
                source: std::path::PathBuf::from("/proc/driver/nvidia/gpus/\u{1b}[2Jx"),
                owner: None,
                reason: crate::vendor::Reason::NoFile,
            }],
        };
        let (_, u) = vendor_rows(&hostile, &[]);
        assert!(!u[0].source.contains('\u{1b}'), "{:?}", u[0].source);
    }

    /// A GPU without a DRM node is a row of the nodes' table, in its place, by its NVIDIA
    /// node: its bound driver, no DRM version, its PCI function.
    #[test]
    fn a_gpu_without_a_drm_node_is_a_row_by_its_vendor_node() {
        let gpu = |index: usize, bus: &str, driver: &str, drm: &[&str], vendor: &[&str]| GpuRow {
            index,
            bus_id: Some(bus.into()),
            name: bus.into(),
            driver: Some(driver.into()),
            pci_id: Some("10de:20b2".into()),
            numa_node: Some(1),
            local_cpulist: None,
            drm_nodes: drm.iter().map(|s| s.to_string()).collect(),
            vendor_nodes: vendor.iter().map(|s| s.to_string()).collect(),
        };
        let drm_row = DeviceRow {
            index: 1,
            bus_id: Some("0000:c2:00.0".into()),
            by_path: None,
            numa_node: None,
            local_cpulist: None,
            path: "/dev/dri/card0".into(),
            kind: "primary",
            dev: "226:0".into(),
            driver: Some("ast".into()),
            parent_driver: Some("ast".into()),
            driver_version: None,
            bus: Some("pci".into()),
            pci_id: Some("1a03:2000".into()),
            sysfs: "/sys/devices/pci0000:c0/0000:c2:00.0/drm/card0".into(),
            error: None,
        };
        let r = DevicesReport {
            schema_version: 1,
            gpus: vec![
                gpu(0, "0000:5e:00.0", "nvidia", &[], &["/dev/nvidia1"]),
                gpu(1, "0000:c2:00.0", "ast", &["/dev/dri/card0"], &[]),
            ],
            devices: vec![drm_row],
            vendor_nodes: vec![VendorRow {
                index: Some(0),
                owner: Some("0000:5e:00.0".into()),
                path: "/dev/nvidia1".into(),
                kind: VendorNodeKind::NvidiaGpu,
                dev: "195:1".into(),
                present: true,
                dev_from: crate::vendor::DevSource::Kernel,
            }],
            unidentified: Vec::new(),
            reason: None,
        };
        let text = render(&r);
        let words = |l: &str| l.split_whitespace().map(String::from).collect::<Vec<_>>();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            words(lines[1]),
            [
                "0",
                "0000:5e:00.0",
                "/dev/nvidia1",
                "nvidia-gpu",
                "195:1",
                "nvidia",
                "-",
                "pci",
                "nvidia",
                "10de:20b2",
                "1",
                "/sys/bus/pci/devices/0000:5e:00.0"
            ]
        );
        assert_eq!(
            words(lines[2])[..3],
            ["1", "0000:c2:00.0", "/dev/dri/card0"]
        );
    }
}
