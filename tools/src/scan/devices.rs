//! The devices of a scan (one per parent of DRM nodes) and their totals, with what their
//! debugfs files (`clients`, `framebuffer`, `gem_names`) say.

use super::nodes::NodeId;
use super::nodes::Nodes;
use super::report::{add, maps_figure};
use super::{
    Access, ClientReport, DeviceReport, Figure, KernelClient, Node, Options, Source, describe,
};
use crate::debugfs;
use rustc_hash::FxHashMap as HashMap;
use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::path::Path;

/// The devices of the scan: one per parent, from the node table plus any node only seen in
/// an fd (one per minor).
pub(super) struct Layout {
    /// One node per minor, sorted by minor.
    pub(super) all_nodes: Vec<NodeId>,
    /// The devices' sysfs paths; a device's index is its place here.
    pub(super) parents: Vec<String>,
    device_by_minor: HashMap<u32, usize>,
    /// The device of each entry of `nodes.list`.
    pub(super) node_device: Vec<usize>,
}

impl Layout {
    pub(super) fn new(nodes: &Nodes) -> Self {
        let mut all_nodes: Vec<NodeId> = Vec::new();
        for n in &nodes.list {
            if !all_nodes.iter().any(|m| m.minor == n.minor) {
                all_nodes.push(n.clone());
            }
        }
        all_nodes.sort_by_key(|n| n.minor);
        let mut parents: Vec<String> = Vec::new();
        for n in &all_nodes {
            if !parents.contains(&n.parent) {
                parents.push(n.parent.clone());
            }
        }
        let mut device_by_minor: HashMap<u32, usize> = HashMap::default();
        for n in &all_nodes {
            let d = parents.iter().position(|p| p == &n.parent).unwrap_or(0);
            device_by_minor.entry(n.minor).or_insert(d);
        }
        let mut layout = Self {
            all_nodes,
            parents,
            device_by_minor,
            node_device: Vec::new(),
        };
        layout.node_device = nodes
            .list
            .iter()
            .map(|n| layout.device_of(n.minor))
            .collect();
        layout
    }

    /// The device of a minor.
    pub(super) fn device_of(&self, minor: u32) -> usize {
        self.device_by_minor.get(&minor).copied().unwrap_or(0)
    }
}

/// The devices with their totals and debugfs contents.
pub(super) fn device_reports(
    opts: &Options,
    layout: &Layout,
    clients: &[ClientReport],
    device_offsets: &[BTreeMap<u64, u64>],
) -> Vec<DeviceReport> {
    // Devices with totals.
    let mut devices = Vec::new();
    for (index, parent) in layout.parents.iter().enumerate() {
        let dnodes: Vec<&NodeId> = layout
            .all_nodes
            .iter()
            .filter(|n| &n.parent == parent)
            .collect();
        let driver = dnodes.iter().find_map(|n| n.driver.clone()).or_else(|| {
            clients
                .iter()
                .find(|c| c.device == index)
                .and_then(|c| c.driver.clone())
        });
        let dclients: Vec<&ClientReport> = clients.iter().filter(|c| c.device == index).collect();
        let mut total = None;
        let mut shared = None;
        for c in &dclients {
            total = add(total, c.memory_total.value);
            shared = add(shared, c.memory_shared.value);
        }
        let no_keys = || {
            if dclients.is_empty() {
                Figure::unknown("no client found")
            } else {
                Figure::unknown("the driver prints no drm-* memory keys in fdinfo")
            }
        };
        let DebugfsView {
            access,
            rows,
            fbs,
            named,
        } = debugfs_view(opts, &dnodes);
        let unreadable_debugfs = || {
            Figure::unknown(
                access
                    .why
                    .clone()
                    .unwrap_or_else(|| "debugfs not readable".into()),
            )
        };
        // Hostile sizes: every sum saturates.
        let mapped = device_offsets[index]
            .values()
            .fold(0u64, |a, &b| a.saturating_add(b));
        devices.push(DeviceReport {
            index,
            sysfs: parent.clone(),
            driver,
            nodes: dnodes
                .iter()
                .map(|n| Node {
                    path: n.path.clone(),
                    kind: n.kind.to_string(),
                    minor: n.minor,
                })
                .collect(),
            clients: dclients.len(),
            debugfs_clients: if access.readable {
                Figure::known(rows.len() as u64, Source::DebugfsClients)
            } else {
                unreadable_debugfs()
            },
            memory_total: total.map_or_else(no_keys, |v| Figure::known(v, Source::Fdinfo)),
            memory_shared: shared.map_or_else(no_keys, |v| Figure::known(v, Source::Fdinfo)),
            mapped: if opts.skip.maps {
                maps_figure(opts.skip, mapped)
            } else {
                Figure::known(mapped, Source::Maps)
                    .with_note("distinct buffers mapped by readable processes")
            },
            framebuffer_bytes: if access.readable {
                let b = fbs
                    .iter()
                    .flat_map(|f| f.objects.iter())
                    .filter_map(|o| o.size)
                    .fold(0u64, u64::saturating_add);
                Figure::known(b, Source::DebugfsFramebuffer)
            } else {
                unreadable_debugfs()
            },
            named_bytes: match &named {
                Some(n) => Figure::known(
                    n.iter().map(|g| g.size).fold(0u64, u64::saturating_add),
                    Source::DebugfsGemNames,
                )
                .with_note("flink-named objects only"),
                None => unreadable_debugfs(),
            },
            framebuffers: fbs,
            debugfs_client_rows: rows,
            debugfs: access,
        });
    }
    devices
}

/// What a device's debugfs says (root, debugfs mounted), read at its primary node's minor
/// (else its first node's).
struct DebugfsView {
    access: Access,
    /// `clients`, each with the process it names where that is found.
    rows: Vec<KernelClient>,
    fbs: Vec<debugfs::Framebuffer>,
    named: Option<Vec<debugfs::GemName>>,
}

fn debugfs_view(opts: &Options, dnodes: &[&NodeId]) -> DebugfsView {
    let primary = dnodes
        .iter()
        .find(|n| n.kind == "primary")
        .or(dnodes.first());
    let (access, c_text, fb_text, names_text) = match primary {
        Some(_) if opts.skip.debugfs => (
            Access {
                readable: false,
                why: Some("debugfs skipped (--skip debugfs)".into()),
            },
            None,
            None,
            None,
        ),
        Some(n) => read_debugfs(&opts.debugfs_root, n.minor),
        None => (Access::default(), None, None, None),
    };
    DebugfsView {
        access,
        rows: c_text
            .map(|t| debugfs::parse_clients(&t).clients)
            .unwrap_or_default()
            .into_iter()
            .map(|row| KernelClient {
                process: process_of(&opts.proc_root, &row),
                row,
            })
            .collect(),
        fbs: fb_text
            .map(|t| debugfs::parse_framebuffers(&t).framebuffers)
            .unwrap_or_default(),
        named: names_text.map(|t| debugfs::parse_gem_names(&t).names),
    }
}

fn process_of(proc_root: &Path, row: &debugfs::Client) -> Option<u32> {
    if row.id_column == "tgid" {
        return Some(row.id);
    }
    let status = std::fs::read_to_string(proc_root.join(row.id.to_string()).join("status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

fn read_debugfs(
    root: &Path,
    minor: u32,
) -> (Access, Option<String>, Option<String>, Option<String>) {
    let dir = root.join(minor.to_string());
    let read = |f: &str| std::fs::read_to_string(dir.join(f));
    match read("clients") {
        Ok(c) => (
            Access::default(),
            Some(c),
            read("framebuffer").ok(),
            read("gem_names").ok(),
        ),
        Err(e) => {
            let why = if e.kind() == ErrorKind::NotFound && !root.exists() {
                format!("{} does not exist (debugfs not mounted?)", root.display())
            } else {
                format!("{}: {}", dir.join("clients").display(), describe(&e).0)
            };
            (
                Access {
                    readable: false,
                    why: Some(why),
                },
                None,
                None,
                None,
            )
        }
    }
}
