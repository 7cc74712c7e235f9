//! `drmtool devices`: every DRM node in the one ordering ([`crate::gpu`]), with its GPU's
//! index, bus id and NUMA node, its driver and sysfs identity.

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

/// `drmtool devices --json` (`tools/schema/devices.schema.json`).
#[derive(Debug, Clone, Serialize)]
pub struct DevicesReport {
    /// [`crate::SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Every node, in the ordering: GPUs by bus id then name, each card before its render
    /// node.
    pub devices: Vec<DeviceRow>,
    /// Why the list is empty, when it is ([`crate::gpu::no_devices_message`]).
    pub reason: Option<String>,
}

/// Every DRM node of this machine, in the ordering.
pub fn list() -> DevicesReport {
    let (devices, reason) = match drm_gem::enumerate() {
        Ok(nodes) => {
            let gpus = crate::gpu::group(nodes.clone(), std::path::Path::new("/dev/dri"));
            let mut rows = Vec::new();
            for g in &gpus {
                for n in &g.nodes {
                    if let Some(info) = nodes.iter().find(|i| i.path == n.path) {
                        rows.push(row(info.clone(), g, n.by_path.clone()));
                    }
                }
            }
            (rows, None)
        }
        Err(e) => (
            Vec::new(),
            Some(crate::gpu::no_devices_message(&e).to_string()),
        ),
    };
    DevicesReport {
        schema_version: crate::SCHEMA_VERSION,
        devices,
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
    rows.extend(r.devices.iter().map(|r| {
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
    }));
    crate::render::align(&rows)
        .into_iter()
        .map(|l| l + "\n")
        .collect()
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
