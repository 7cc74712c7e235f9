//! Container Device Interface specs for the machine's GPUs (issue 28): what container
//! runtimes (podman, containerd, CRI-O) and Kubernetes device plugins read to give a
//! container a GPU (`podman run --device drmtool.dev/gpu=0`).
//!
//! [`generate`] builds one spec for every GPU of the one ordering ([`crate::gpu::gpus`]):
//!
//! - Devices: each GPU under its index (`0`, `1`: its place in the ordering) and its PCI
//!   bus id (`0000:3b:00.0`, stable across reboots); a GPU off PCI under its index and its
//!   sysfs name (`vkms`) where that is a valid device name, no other device's name, and a
//!   string to a YAML 1.1 reader (else [`LeftOut::Alias`] says why not); and `all`.
//! - Each device's `deviceNodes` are exactly what `drmtool run --gpu` gives a job on that
//!   GPU ([`crate::isolate::vendor_access::vendor_access`]): its DRM card and render nodes,
//!   its `/dev/nvidiaN` and own MIG capability nodes, its accel nodes, and the shared
//!   control nodes a job on it needs (NVIDIA: `nvidiactl`, `nvidia-uvm`,
//!   `nvidia-uvm-tools`, `nvidia-modeset`; amdgpu: `/dev/kfd`). Each node has its
//!   `major`/`minor` from the kernel's view, `type` `c`, `permissions` `rw` (no mknod),
//!   and `fileMode` only where a node with that number is in `/dev` (its permission bits).
//! - A GPU with a vendor node drmtool could not identify is left out, as `run` refuses it
//!   ([`LeftOut::Unidentified`]); the other GPUs keep their indices.
//!
//! # Variables
//!
//! Each device sets `DRMTOOL_GPU_<index>=<bus id or name>`, and `all` sets them all. Not
//! `CUDA_VISIBLE_DEVICES`, `ROCR_VISIBLE_DEVICES` or `ZE_AFFINITY_MASK`: a runtime merges
//! the edits of every device a container gets, and for a variable the last device's value
//! wins, so a container given GPUs 0 and 1 would see one of them. Nor do they need to be
//! set: a container holds only its devices' nodes, so CUDA, ROCm and Level Zero find
//! exactly those and number them from 0. The `DRMTOOL_GPU_<index>` names differ per GPU,
//! so no merge loses one; they tell a job which GPUs of the machine it holds.
//!
//! # Not in the spec
//!
//! `/dev/dri/by-path` links: CDI 0.5 has no symlink edit, and drmtool writes no hook, so
//! they are left out (`/dev/dri/cardN` and `renderDN` keep their names). GPUs that are
//! not in the ordering (NVIDIA without nvidia-drm) are not in the spec either.
//!
//! ```no_run
//! use drmtool::cdi::{self, CdiFormat, CdiOptions};
//! let g = cdi::generate(&CdiOptions::default())?;
//! for why in &g.left_out {
//!     eprintln!("{why}");
//! }
//! cdi::write_file("/etc/cdi/drmtool.yaml".as_ref(), &g.spec, CdiFormat::Yaml)?;
//! # Ok::<(), drmtool::cdi::CdiError>(())
//! ```

mod names;
mod spec;

pub use names::{CdiKind, KindError, NameError, check_device_name, check_kind_part};
pub use spec::{
    CDI_VERSION, CdiDevice, CdiFormat, CdiSpec, ContainerEdits, DeviceNode, render, write_file,
};

use crate::gpu::{Gpu, SelectError};
use crate::isolate::vendor_access::{dev_relative, unidentified_of, vendor_access};
use crate::untrusted::Untrusted;
use crate::vendor::{Unidentified, VendorReport, VendorRoots};
use std::path::Path;

/// The name of the device that holds every GPU of the spec.
pub const ALL: &str = "all";

/// Why no spec was written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CdiError {
    /// No GPU here (or none could be listed).
    #[error(transparent)]
    Select(#[from] SelectError),
    /// Every GPU was left out: a spec needs at least one device.
    #[error("no GPU can be described: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    NoDevice(Vec<LeftOut>),
    /// The JSON serializer failed.
    #[error("cannot write the spec as JSON: {0}")]
    Json(serde_json::Error),
    /// The YAML serializer failed.
    #[error("cannot write the spec as YAML: {0}")]
    Yaml(serde_norway::Error),
    /// The file could not be written.
    #[error(transparent)]
    Write(#[from] crate::outfile::OutfileError),
}

/// Why a GPU, or one of its names, is not in the spec.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LeftOut {
    /// The GPU has a vendor node that could not be identified: it is left out, as `run`
    /// refuses it.
    #[error(
        "GPU {index} ({gpu}) is left out: its {:?} node is not identified ({}: {})",
        node.kind,
        node.source.display(),
        node.reason
    )]
    Unidentified {
        /// Its index in the ordering.
        index: usize,
        /// Its bus id or name (escaped).
        gpu: String,
        /// The vendor report's entry.
        node: Box<Unidentified>,
    },
    /// The GPU is in the spec under its index only: its name was refused.
    #[error("GPU {index} is named only by its index: its name \"{name}\" {why}")]
    Alias {
        /// Its index in the ordering.
        index: usize,
        /// The name (escaped).
        name: String,
        /// Why.
        why: AliasError,
    },
}

/// Why a GPU's sysfs name is not one of its device names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AliasError {
    /// It is not a valid device name.
    #[error("{0}")]
    Invalid(NameError),
    /// Another device (an index, a bus id, `all`, another GPU) has that name.
    #[error("is another device's name")]
    Taken,
    /// A YAML 1.1 reader would read it, unquoted, as a boolean, null or number.
    #[error("reads as a boolean, null or number in YAML 1.1")]
    NotAString,
}

/// What [`generate`] describes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CdiOptions {
    /// The spec's kind.
    pub kind: CdiKind,
    /// Where the vendor nodes are discovered ([`crate::vendor::discover`]).
    pub roots: VendorRoots,
}

/// `mode_of(path, (major, minor))`: the permission bits of the node at `path` when it is
/// that character device ([`file_mode`]).
pub type ModeOf = dyn Fn(&Path, (u32, u32)) -> Option<u32>;

/// A spec and what it leaves out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generated {
    /// The spec.
    pub spec: CdiSpec,
    /// The GPUs (and names) not in it, and why, by index.
    pub left_out: Vec<LeftOut>,
}

/// The spec for this machine's GPUs (see the [module documentation](self)).
///
/// # Errors
/// [`CdiError::Select`] without GPUs, [`CdiError::NoDevice`] when every GPU is left out.
pub fn generate(opts: &CdiOptions) -> Result<Generated, CdiError> {
    let all = crate::gpu::gpus()?;
    let report = crate::vendor::discover(&opts.roots);
    build(&all, &report, &opts.kind, &opts.roots.dev_root, &file_mode)
}

/// The spec for `all` (the GPUs in the ordering) with the vendor nodes of `report`, found
/// under `dev_root`; `mode_of(path, (major, minor))` is the permission bits of the node at
/// `path` when it is that device ([`file_mode`] on a real machine). Pure but for
/// `mode_of`.
///
/// # Errors
/// [`CdiError::NoDevice`] when every GPU is left out (or `all` is empty).
pub fn build(
    all: &[Gpu],
    report: &VendorReport,
    kind: &CdiKind,
    dev_root: &Path,
    mode_of: &ModeOf,
) -> Result<Generated, CdiError> {
    let (names, aliases) = device_names(all);
    let mut left_out = Vec::new();
    let mut included: Vec<(&Gpu, &Vec<String>)> = Vec::new();
    for (g, n) in all.iter().zip(&names) {
        match unidentified_of(&[g], report) {
            Some((_, u)) => left_out.push(LeftOut::Unidentified {
                index: g.index,
                gpu: label(g),
                node: Box::new(u.clone()),
            }),
            None => included.push((g, n)),
        }
    }
    left_out.extend(aliases.into_iter().filter(|a| match a {
        LeftOut::Alias { index, .. } => included.iter().any(|(g, _)| g.index == *index),
        LeftOut::Unidentified { .. } => true,
    }));
    left_out.sort_by_key(|l| match l {
        LeftOut::Unidentified { index, .. } | LeftOut::Alias { index, .. } => *index,
    });
    if included.is_empty() {
        return Err(CdiError::NoDevice(left_out));
    }
    let mut devices = Vec::new();
    for (g, n) in &included {
        let container_edits = edits(&[g], report, dev_root, mode_of);
        devices.extend(n.iter().map(|name| CdiDevice {
            name: name.clone(),
            container_edits: container_edits.clone(),
        }));
    }
    let every: Vec<&Gpu> = included.iter().map(|(g, _)| *g).collect();
    devices.push(CdiDevice {
        name: ALL.into(),
        container_edits: edits(&every, report, dev_root, mode_of),
    });
    let spec = CdiSpec {
        cdi_version: CDI_VERSION.into(),
        kind: kind.to_string(),
        devices,
        container_edits: ContainerEdits::default(),
    };
    Ok(Generated { spec, left_out })
}

/// The device names of each GPU of `all` (by position): its index, then its bus id, or off
/// PCI its sysfs name where that is usable; and the names refused, with why.
pub fn device_names(all: &[Gpu]) -> (Vec<Vec<String>>, Vec<LeftOut>) {
    let mut taken: std::collections::BTreeSet<String> = all
        .iter()
        .map(|g| g.index.to_string())
        .chain(all.iter().filter_map(|g| g.bus_id.clone()))
        .chain([ALL.to_string()])
        .collect();
    let mut refused = Vec::new();
    let names = all
        .iter()
        .map(|g| {
            let mut v = vec![g.index.to_string()];
            if let Some(b) = &g.bus_id {
                v.push(b.clone());
                return v;
            }
            let why = match check_device_name(&g.name) {
                Err(e) => Some(AliasError::Invalid(e)),
                Ok(()) if taken.contains(&g.name) => Some(AliasError::Taken),
                Ok(()) if !names::plain_in_yaml11(&g.name) => Some(AliasError::NotAString),
                Ok(()) => None,
            };
            match why {
                Some(why) => refused.push(LeftOut::Alias {
                    index: g.index,
                    name: Untrusted::from(g.name.as_str()).escaped(),
                    why,
                }),
                None => {
                    taken.insert(g.name.clone());
                    v.push(g.name.clone());
                }
            }
            v
        })
        .collect();
    (names, refused)
}

/// The fully qualified CDI names of the GPUs at `chosen` (positions in `all`, the
/// ordering), in that order: each by its bus id, or its name off PCI, where it has one
/// (stable across reboots), else its index: `drmtool.dev/gpu=0000:3b:00.0`.
pub fn qualified_names(kind: &CdiKind, all: &[Gpu], chosen: &[usize]) -> Vec<String> {
    let (names, _) = device_names(all);
    chosen
        .iter()
        .filter_map(|&i| names.get(i)?.last())
        .map(|n| kind.qualified(n))
        .collect()
}

/// A GPU's bus id, else its name (escaped).
fn label(g: &Gpu) -> String {
    g.bus_id
        .clone()
        .unwrap_or_else(|| Untrusted::from(g.name.as_str()).escaped())
}

/// The edits of a device holding `gpus`: their DRM nodes, the vendor nodes `run` gives a
/// job on them, and their `DRMTOOL_GPU_<index>` variables.
fn edits(
    gpus: &[&Gpu],
    report: &VendorReport,
    dev_root: &Path,
    mode_of: &ModeOf,
) -> ContainerEdits {
    let node = |path: String, host: &Path, dev: (u32, u32)| DeviceNode {
        path,
        node_type: "c".into(),
        major: dev.0,
        minor: dev.1,
        file_mode: mode_of(host, dev),
        permissions: "rw".into(),
    };
    let mut nodes: Vec<DeviceNode> = gpus
        .iter()
        .flat_map(|g| &g.nodes)
        .map(|n| node(n.path.to_string_lossy().into_owned(), &n.path, n.dev))
        .collect();
    for n in vendor_access(gpus, report, "").nodes {
        if let Some(rel) = dev_relative(&n, dev_root) {
            nodes.push(node(format!("/dev/{rel}"), &n.path, n.dev));
        }
    }
    nodes.sort_by(|a, b| a.path.cmp(&b.path));
    nodes.dedup_by(|a, b| a.path == b.path);
    ContainerEdits {
        env: gpus
            .iter()
            .map(|g| format!("DRMTOOL_GPU_{}={}", g.index, label(g)))
            .collect(),
        device_nodes: nodes,
    }
}

/// The permission bits of the node at `path`, where it is a character device numbered
/// `dev` (a link is not followed); else `None`.
pub fn file_mode(path: &Path, dev: (u32, u32)) -> Option<u32> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let m = std::fs::symlink_metadata(path).ok()?;
    let rdev = m.rdev();
    let same = (rustix::fs::major(rdev), rustix::fs::minor(rdev)) == dev;
    (m.file_type().is_char_device() && same).then_some(m.mode() & 0o777)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_mode_reads_a_char_device_of_that_number_only() {
        assert_eq!(file_mode(Path::new("/dev/null"), (1, 3)), Some(0o666));
        assert_eq!(file_mode(Path::new("/dev/null"), (1, 5)), None);
        assert_eq!(file_mode(Path::new("/dev/no-such-node"), (1, 3)), None);
        assert_eq!(file_mode(Path::new("/etc/hostname"), (0, 0)), None);
    }
}
