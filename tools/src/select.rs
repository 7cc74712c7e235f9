//! Choosing DRM nodes from a `DEVICE` argument, and naming errnos for the reports.

use drm_gem::{NoNodes, NodeInfo, NodeKind};

/// Why no node could be chosen: a one-line message with the cause and a hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoMatch(pub String);

impl core::fmt::Display for NoMatch {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The message for a machine without DRM nodes.
pub fn no_nodes_reason(e: &NoNodes) -> String {
    match e {
        NoNodes::NoDevDri => "no DRM devices: this host has no /dev/dri (no DRM driver is loaded \
                              here); run drmtool inside a guest with real drivers: \
                              cargo run -p vm -- run --kernel debian-6.12 -- drmtool devices"
            .into(),
        NoNodes::Empty => {
            "no DRM devices: /dev/dri exists but holds no card or render nodes".into()
        }
    }
}

/// Whether `spec` names `n`: a node path (`/dev/dri/card0`), a node name (`card0`), a
/// driver name (`vkms`, also `virtio-gpu` for `virtio_gpu`, `bochs` for `bochs-drm`) or a
/// minor number.
pub fn matches(n: &NodeInfo, spec: &str) -> bool {
    let driver = n.driver.as_deref().unwrap_or("");
    let norm = |s: &str| s.replace('-', "_");
    n.path.as_os_str() == spec
        || n.path.file_name().is_some_and(|f| f == spec)
        || n.dev.1.to_string() == spec
        || driver == spec
        || norm(driver) == norm(spec)
        || driver.strip_suffix("-drm") == Some(spec)
}

/// The nodes `spec` selects, or without a spec every node of `kind` (primary nodes by
/// default: they carry KMS). A spec naming a driver picks its primary node, or its render
/// node where it has no primary one.
///
/// # Errors
/// [`NoMatch`] when there are no DRM nodes at all or nothing matches.
pub fn select(spec: Option<&str>) -> Result<Vec<NodeInfo>, NoMatch> {
    let nodes = drm_gem::enumerate().map_err(|e| NoMatch(no_nodes_reason(&e)))?;
    let Some(spec) = spec else {
        return Ok(nodes
            .into_iter()
            .filter(|n| n.kind == NodeKind::Primary)
            .collect());
    };
    let hits: Vec<NodeInfo> = nodes.iter().filter(|n| matches(n, spec)).cloned().collect();
    let by_path = hits
        .iter()
        .any(|n| n.path.as_os_str() == spec || n.path.file_name().is_some_and(|f| f == spec));
    let picked: Vec<NodeInfo> = if by_path || hits.len() <= 1 {
        hits
    } else {
        // A driver name: its primary node(s), else its render node(s).
        let prim: Vec<NodeInfo> = hits
            .iter()
            .filter(|n| n.kind == NodeKind::Primary)
            .cloned()
            .collect();
        if prim.is_empty() { hits } else { prim }
    };
    if picked.is_empty() {
        let have: Vec<String> = nodes
            .iter()
            .map(|n| {
                format!(
                    "{} ({})",
                    n.path.display(),
                    n.driver.as_deref().unwrap_or("?")
                )
            })
            .collect();
        return Err(NoMatch(format!(
            "no DRM device matches {spec:?}; there are: {} (hint: `drmtool devices` lists nodes \
             and drivers)",
            have.join(", ")
        )));
    }
    Ok(picked)
}

/// The C name of an errno (`ENOTTY`, from [`drm_gem::errno_name`]), or `E<number>` for a
/// number Linux does not define.
pub fn errno_name(e: drm_gem::Errno) -> String {
    drm_gem::errno_name(e).map_or_else(|| format!("E{}", e.raw_os_error()), str::to_string)
}

/// The errno class of a failure: the errno's name (for [`drm_gem::Error::Unsupported`],
/// the errno of the probe that decided it), `unsupported` for an `Unsupported` decided
/// without a failing call, else `error`.
pub fn error_class(e: &drm_gem::Error) -> String {
    match (e.errno(), e) {
        (Some(n), _) => errno_name(n),
        (None, drm_gem::Error::Unsupported { .. }) => "unsupported".into(),
        (None, _) => "error".into(),
    }
}
