//! The CDI spec as serde types, named after the spec's fields, and writing it as JSON or
//! YAML (atomically, mode 0644).

use super::CdiError;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The lowest `cdiVersion` with everything drmtool writes: device names that start with a
/// digit (`0`, `0000:3b:00.0`) came with 0.5.0 (0.3.0 was the first release, 0.4.0 added
/// a mount's `type`, 0.5.0 also a device node's `hostPath`). The 0.5-era loaders (Debian
/// 12's podman 4.3) refuse any later version and any field they do not know, so nothing
/// newer is written (no `annotations`: 0.6.0).
pub const CDI_VERSION: &str = "0.5.0";

/// A CDI spec: the devices of one kind and what a container that gets one needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CdiSpec {
    /// [`CDI_VERSION`].
    pub cdi_version: String,
    /// `VENDOR/CLASS` ([`super::CdiKind`]).
    pub kind: String,
    /// The devices, each GPU's under each of its names, then `all`.
    pub devices: Vec<CdiDevice>,
    /// Edits for every container that gets any device of the spec (none written).
    #[serde(default, skip_serializing_if = "ContainerEdits::is_empty")]
    pub container_edits: ContainerEdits,
}

/// One device of a spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CdiDevice {
    /// Its name (`0`, `0000:3b:00.0`, `all`), unique in the spec.
    pub name: String,
    /// What a container that gets it needs.
    pub container_edits: ContainerEdits,
}

/// What a runtime adds to a container: variables and device nodes (the spec's hooks and
/// mounts are not used).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContainerEdits {
    /// `KEY=VALUE` entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// The device nodes, sorted by path.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_nodes: Vec<DeviceNode>,
}

impl ContainerEdits {
    /// Whether it edits nothing.
    pub fn is_empty(&self) -> bool {
        self.env.is_empty() && self.device_nodes.is_empty()
    }
}

/// A device node the runtime creates in the container and allows in its device rules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceNode {
    /// The node's path in the container (the same as on the host).
    pub path: String,
    /// `c`: a character device.
    #[serde(rename = "type")]
    pub node_type: String,
    /// Major, from the kernel's view (never from the file in `/dev`).
    pub major: u32,
    /// Minor, likewise.
    pub minor: u32,
    /// The host node's permission bits, where a node with that number is in `/dev`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_mode: Option<u32>,
    /// The device rule's access: `rw` (never `m`: no mknod in the container).
    pub permissions: String,
}

/// How a spec is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CdiFormat {
    /// Pretty JSON.
    Json,
    /// YAML.
    Yaml,
}

impl CdiFormat {
    /// The format a file name asks for: YAML for `.yaml` and `.yml`, else JSON.
    pub fn for_path(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml") => {
                Self::Yaml
            }
            _ => Self::Json,
        }
    }
}

/// `spec` as text in `format`, ending in a newline.
///
/// # Errors
/// [`CdiError::Json`] or [`CdiError::Yaml`] when the serializer fails.
pub fn render(spec: &CdiSpec, format: CdiFormat) -> Result<String, CdiError> {
    match format {
        CdiFormat::Json => serde_json::to_string_pretty(spec)
            .map(|s| s + "\n")
            .map_err(CdiError::Json),
        CdiFormat::Yaml => serde_norway::to_string(spec).map_err(CdiError::Yaml),
    }
}

/// Writes `spec` to `path` in `format`: a fresh file, mode 0644, synced, then renamed over
/// `path` ([`crate::outfile::replace`]: a symlink at `path` is refused, a reader never sees
/// part of it).
///
/// # Errors
/// [`CdiError::Json`]/[`CdiError::Yaml`], or [`CdiError::Write`] naming what failed.
pub fn write_file(path: &Path, spec: &CdiSpec, format: CdiFormat) -> Result<(), CdiError> {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    let text = render(spec, format)?;
    crate::outfile::replace(path, |mut f| {
        f.set_permissions(std::fs::Permissions::from_mode(0o644))?;
        f.write_all(text.as_bytes())?;
        f.sync_all()
    })?;
    Ok(())
}
