//! The DRM nodes a scan knows: the machine's (from `/dev/dri` and sysfs) and any found only
//! through an fd's char device.

use rustc_hash::FxHashMap as HashMap;
use std::path::Path;

/// A DRM node known to the machine.
#[derive(Debug, Clone)]
pub(super) struct NodeId {
    pub(super) path: String,
    pub(super) kind: &'static str,
    pub(super) minor: u32,
    pub(super) driver: Option<String>,
    pub(super) parent: String,
}

/// The DRM nodes of the scan: the machine's (from `/dev/dri` and sysfs), then any found only
/// through an fd. Fds refer to them by index.
#[derive(Default)]
pub(super) struct Nodes {
    pub(super) list: Vec<NodeId>,
    /// `(major, minor)` of the machine's nodes to their index.
    pub(super) by_dev: HashMap<(u32, u32), usize>,
}

pub(super) fn node_table() -> Nodes {
    let mut t = Nodes::default();
    if let Ok(nodes) = drm_gem::enumerate() {
        for n in nodes {
            let parent = std::fs::canonicalize(n.sysfs.join("device"))
                .unwrap_or_else(|_| n.sysfs.clone())
                .display()
                .to_string();
            t.by_dev.insert(n.dev, t.list.len());
            t.list.push(NodeId {
                path: n.path.display().to_string(),
                kind: n.kind.as_str(),
                minor: n.dev.1,
                driver: n.driver,
                parent,
            });
        }
    }
    t
}

/// A char device not under /dev/dri (a container, a chroot): identify it through sysfs
/// (`sys_root`, normally `/sys`).
pub(super) fn node_from_sysfs(
    sys_root: &Path,
    major: u32,
    minor: u32,
    link: &str,
) -> Option<NodeId> {
    let sys = sys_root.join(format!("dev/char/{major}:{minor}"));
    let subsystem = std::fs::read_link(sys.join("subsystem")).ok()?;
    if subsystem.file_name()? != "drm" {
        return None;
    }
    let kind = drm_gem::NodeKind::from_minor(minor)?.as_str();
    let parent = std::fs::canonicalize(sys.join("device"))
        .unwrap_or(sys)
        .display()
        .to_string();
    Some(NodeId {
        path: link.to_string(),
        kind,
        minor,
        driver: None,
        parent,
    })
}
