//! `drmtool devices`: every node in the one ordering.

use super::*;

#[derive(Serialize)]
pub(super) struct DeviceRow {
    /// The GPU's position in the one ordering (`drmtool run --gpu INDEX`).
    index: usize,
    /// PCI bus id of the GPU (its transport's for virtio-gpu).
    bus_id: Option<String>,
    /// The `/dev/dri/by-path` name of this node.
    by_path: Option<String>,
    /// NUMA node of the PCI function.
    numa_node: Option<u32>,
    /// CPUs local to it.
    local_cpulist: Option<String>,
    path: String,
    kind: &'static str,
    dev: String,
    driver: Option<String>,
    parent_driver: Option<String>,
    driver_version: Option<String>,
    bus: Option<String>,
    pci_id: Option<String>,
    sysfs: String,
    error: Option<String>,
}

#[derive(Serialize)]
pub(super) struct DevicesOut {
    schema_version: u32,
    devices: Vec<DeviceRow>,
    /// Why the list is empty, when it is.
    reason: Option<String>,
}

pub(super) fn devices(json: bool, out: &mut dyn Write) -> ExitCode {
    let (rows, reason) = match drm_gem::enumerate() {
        Ok(nodes) => {
            // In the ordering: GPUs by bus id then name, each card before its render node.
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
    if json {
        let none = reason.is_some();
        let doc = DevicesOut {
            schema_version: SCHEMA_VERSION,
            devices: rows,
            reason,
        };
        let code = emit_json(&doc, out);
        if code != ExitCode::SUCCESS {
            return code;
        }
        return if none { Exit::NoDevices.into() } else { code };
    }
    if let Some(r) = reason {
        eprintln!("drmtool: {r}");
        return Exit::NoDevices.into();
    }
    let header: [&str; 12] = [
        "GPU", "BUS ID", "NODE", "KIND", "DEV", "DRIVER", "VERSION", "BUS", "BOUND TO", "PCI",
        "NUMA", "SYSFS",
    ];
    let table: Vec<[String; 12]> = rows
        .iter()
        .map(|r| {
            let opt = |o: &Option<String>| o.clone().unwrap_or_else(|| "-".into());
            [
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
        })
        .collect();
    let mut width = header.map(str::len);
    for r in &table {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let mut text = String::new();
    let mut line = |cells: Vec<&str>| {
        let s: Vec<String> = cells
            .iter()
            .zip(width)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        text.push_str(s.join("  ").trim_end());
        text.push('\n');
    };
    line(header.to_vec());
    for r in &table {
        line(r.iter().map(String::as_str).collect());
    }
    emit_text(&text, out)
}

/// A row of `devices`. The driver version is read from a render node (`DRM_IOCTL_VERSION`),
/// the GPU's render node standing in for its primary: a primary node is never opened here
/// (its first opener is DRM master while it holds the file, and another program's
/// SET_MASTER at that moment would fail), so a GPU without a render node (vkms, bochs, qxl)
/// shows no version; `drmtool info PATH` opens the node itself.
pub(super) fn row(n: drm_gem::NodeInfo, g: &crate::gpu::Gpu, by_path: Option<String>) -> DeviceRow {
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
