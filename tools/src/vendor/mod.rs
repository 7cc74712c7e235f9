//! The device nodes of GPUs and accelerators that are not DRM nodes: NVIDIA's
//! (`/dev/nvidiaN`, `nvidiactl`, `nvidia-modeset`, `nvidia-uvm`, `nvidia-uvm-tools`, the MIG
//! capability nodes `/dev/nvidia-caps/nvidia-capN`, the IMEX channels
//! `/dev/nvidia-caps-imex-channels/channelN`), AMD's `/dev/kfd`, and compute accelerators
//! (`/dev/accel/accelN`), each with the GPU it belongs to or marked shared.
//!
//! Issue 28. The ordering ([`crate::gpu`]) takes a GPU's own nodes from here (a device
//! with an identified `/dev/nvidiaN` or `/dev/accel/accelN` and no DRM node is a GPU too);
//! `run`, `devices`, `cgroup deny-gpus` and `slurm gres-conf` use them.
//!
//! Membership comes from the kernel's view, never from what `/dev` holds (a node may not be
//! created yet: `nvidia-modprobe` makes `/dev/nvidia-uvm` on first use), except for the
//! IMEX channels, which the kernel lists nowhere ([`DevSource`]):
//!
//! | node | device number | belongs to |
//! |---|---|---|
//! | `/dev/nvidiaN` | 195:N, N the "Device Minor:" of `/proc/driver/nvidia/gpus/<bus id>/information` | that bus id |
//! | `/dev/nvidiactl`, `/dev/nvidia-modeset` | 195:255, 195:254 (while `/proc/driver/nvidia` and `/sys/module/nvidia_modeset` exist) | shared |
//! | `/dev/nvidia-uvm`, `/dev/nvidia-uvm-tools` | `nvidia-uvm`'s major in `/proc/devices`, minors 0 and 1 | shared |
//! | `/dev/nvidia-caps/nvidia-capM` | `nvidia-caps`'s major in `/proc/devices`, M the "DeviceFileMinor:" of a file under `/proc/driver/nvidia/capabilities/` | the GPU with NVIDIA minor N for files under `gpuN/`, else shared |
//! | `/dev/nvidia-caps-imex-channels/channelN` | `nvidia-caps-imex-channels`'s major in `/proc/devices`, N from the node's name; listed only where that node is in `/dev` as a character device of exactly that number | shared (no GPU: a channel grants cross-node memory import, handed to jobs by the admin) |
//! | `/dev/kfd` | `/sys/class/kfd/kfd/dev` | shared (ROCm reaches each GPU through its DRM render node) |
//! | `/dev/accel/accelN` | `/sys/class/accel/accelN/dev` | the PCI function above its `device` link |
//!
//! Nothing is guessed: a GPU, capability or accelerator whose kernel text is unreadable,
//! malformed or inconsistent (two GPUs with one minor, a capability of an unknown GPU) is
//! reported in [`VendorReport::unidentified`] with a typed [`Reason`], and gets no node (an
//! IMEX channel node with an odd name, or not a character device of the kernel's major and
//! its name's minor, too). Every read is bounded ([`MAX_TEXT`] bytes a file, [`MAX_ENTRIES`] entries a directory,
//! the capability tree [`MAX_DEPTH`] deep); a missing file means "not present".
//!
//! ```
//! use drmtool::vendor::{VendorRoots, discover};
//! let root = std::env::temp_dir().join(format!("drmtool-vendor-doc-{}", std::process::id()));
//! let gpu = root.join("proc/driver/nvidia/gpus/0000:3b:00.0");
//! std::fs::create_dir_all(&gpu)?;
//! std::fs::write(gpu.join("information"), "Model: NVIDIA L4\nDevice Minor: 0\n")?;
//! let roots = VendorRoots {
//!     proc_root: root.join("proc"),
//!     sys_root: root.join("sys"),
//!     dev_root: root.join("dev"),
//! };
//! let report = discover(&roots);
//! let gpu0 = &report.nodes[0];
//! assert_eq!((gpu0.dev, gpu0.owner.as_deref()), ((195, 0), Some("0000:3b:00.0")));
//! assert!(report.nodes[1].kind.is_shared()); // nvidiactl
//! std::fs::remove_dir_all(&root)?;
//! # Ok::<(), std::io::Error>(())
//! ```

mod nvidia;
mod parse;
mod sysfs;

pub use nvidia::IMEX_CHANNELS;
pub use parse::{
    CapFile, MAX_MAJOR, MAX_MINOR, MAX_MODE, MAX_NVIDIA_GPU_MINOR, MajorError, NvidiaInformation,
    ProcDevices, ValueError, parse_cap_file, parse_dev, parse_nvidia_information,
    parse_proc_devices,
};

use crate::untrusted::Untrusted;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// At most this many bytes are read of any one file.
pub const MAX_TEXT: usize = 64 * 1024;
/// At most this many entries are read of a directory (of the whole capability tree).
pub const MAX_ENTRIES: usize = 4096;
/// The capability tree is read this many levels deep at most (`gpu0/mig/gi1/ci0/access`
/// is 5).
pub const MAX_DEPTH: usize = 8;

/// Where discovery reads the kernel's view and looks for the nodes (the real ones by
/// default; a synthetic tree in tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VendorRoots {
    /// The proc filesystem (`/proc`).
    pub proc_root: PathBuf,
    /// sysfs (`/sys`).
    pub sys_root: PathBuf,
    /// Where the device nodes are (`/dev`).
    pub dev_root: PathBuf,
}

impl Default for VendorRoots {
    fn default() -> Self {
        Self {
            proc_root: "/proc".into(),
            sys_root: "/sys".into(),
            dev_root: "/dev".into(),
        }
    }
}

/// What a vendor node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum VendorNodeKind {
    /// `/dev/nvidiaN`: one NVIDIA GPU.
    NvidiaGpu,
    /// `/dev/nvidiactl` (195:255): the NVIDIA control node every client opens.
    NvidiaCtl,
    /// `/dev/nvidia-modeset` (195:254).
    NvidiaModeset,
    /// `/dev/nvidia-uvm`: unified memory.
    NvidiaUvm,
    /// `/dev/nvidia-uvm-tools`: unified memory tools (profilers).
    NvidiaUvmTools,
    /// `/dev/nvidia-caps/nvidia-capN`: a capability (MIG config and monitor, a GPU or
    /// compute instance's access).
    NvidiaCap,
    /// `/dev/nvidia-caps-imex-channels/channelN`: an IMEX channel (cross-node memory
    /// import, NVLink multi-node systems), which the admin or scheduler hands to a job.
    /// Belongs to no GPU; listed from `/dev` ([`DevSource::Dev`]).
    NvidiaImexChannel,
    /// `/dev/kfd`: AMD's compute interface (ROCm).
    Kfd,
    /// `/dev/accel/accelN`: a compute accelerator of the kernel's accel subsystem.
    Accel,
}

impl VendorNodeKind {
    /// Whether nodes of this kind serve every GPU rather than one. [`NvidiaCap`] nodes
    /// are not: a capability under `gpuN/` belongs to that GPU, and a node's
    /// [`VendorNode::owner`] says which (none for `mig/config` and `mig/monitor`).
    ///
    /// [`NvidiaCap`]: VendorNodeKind::NvidiaCap
    pub fn is_shared(self) -> bool {
        matches!(
            self,
            Self::NvidiaCtl
                | Self::NvidiaModeset
                | Self::NvidiaUvm
                | Self::NvidiaUvmTools
                | Self::NvidiaImexChannel
                | Self::Kfd
        )
    }

    /// Where the nodes of this kind, and their device numbers, are found: the kernel's
    /// text for every kind but [`NvidiaImexChannel`](VendorNodeKind::NvidiaImexChannel),
    /// whose channels the kernel lists nowhere (only their major).
    pub fn dev_source(self) -> DevSource {
        match self {
            Self::NvidiaImexChannel => DevSource::Dev,
            _ => DevSource::Kernel,
        }
    }
}

/// Where a vendor node was found ([`VendorNodeKind::dev_source`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DevSource {
    /// The kernel's text (`/proc`, sysfs): the node is listed whether or not `/dev` has
    /// it, with the number the kernel gives.
    Kernel,
    /// `/dev`: the node is listed because a character device of the kernel's major (from
    /// `/proc/devices`) is there under the expected name, with its number checked.
    Dev,
}

/// One node and what it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VendorNode {
    /// The node under [`VendorRoots::dev_root`] (`/dev/nvidia0`).
    pub path: PathBuf,
    /// What it is.
    pub kind: VendorNodeKind,
    /// Char-device major:minor, from the kernel's view (never from the file in `/dev`).
    pub dev: (u32, u32),
    /// The device it belongs to: the PCI bus id (`0000:3b:00.0`), or for an accelerator
    /// not on PCI its sysfs device name; `None` for a node every device shares.
    pub owner: Option<String>,
    /// The permission bits the driver asks for (capability nodes' "DeviceFileMode:").
    pub mode: Option<u32>,
    /// Whether a file is at [`path`](Self::path) now (its device number is not checked);
    /// it does not decide whether the node is listed.
    pub present: bool,
}

impl VendorNode {
    /// Whether it serves every device rather than one: it has no [`owner`](Self::owner)
    /// (the shared kinds, [`VendorNodeKind::is_shared`], and the capabilities not under a
    /// `gpuN/` directory).
    pub fn is_shared(&self) -> bool {
        self.owner.is_none()
    }

    /// Where it was found: the kernel's text, or `/dev` (IMEX channels).
    pub fn dev_source(&self) -> DevSource {
        self.kind.dev_source()
    }
}

/// Something that looks like a vendor node but could not be identified, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unidentified {
    /// What it would have been.
    pub kind: VendorNodeKind,
    /// The file or directory whose text or name was refused.
    pub source: PathBuf,
    /// The device it belongs to, where that much is known.
    pub owner: Option<String>,
    /// Why.
    pub reason: Reason,
}

/// Why something was not identified.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Reason {
    /// A file the kernel should have written is not there.
    #[error("the file is missing")]
    NoFile,
    /// The file could not be read (the system's message).
    #[error("could not be read: {error}")]
    Unreadable {
        /// The error, as the system words it.
        error: String,
    },
    /// The file is longer than any the kernel writes.
    #[error("longer than {max} bytes")]
    TooLong {
        /// The limit ([`MAX_TEXT`]).
        max: usize,
    },
    /// A value was refused.
    #[error("{0}")]
    Malformed(ValueError),
    /// The major its driver registered in `/proc/devices` is not known.
    #[error("{0}")]
    NoMajor(MajorError),
    /// A directory entry's name is not of the form expected there.
    #[error("unexpected name {0:?}")]
    UnexpectedName(Untrusted),
    /// The entry is neither a regular file nor a directory.
    #[error("neither a file nor a directory")]
    NotAFile,
    /// Several GPUs (or capabilities) claim this minor: none of them gets it.
    #[error("minor {minor} is claimed more than once")]
    MinorClash {
        /// The minor.
        minor: u32,
    },
    /// A capability of NVIDIA GPU minor `minor`, which no identified GPU has.
    #[error("no identified NVIDIA GPU has minor {minor}")]
    UnknownGpu {
        /// The minor in the path (`gpuN`).
        minor: u32,
    },
    /// An accelerator without a `device` link.
    #[error("no device link")]
    NoDevice,
    /// A node in `/dev` that should be a character device is something else.
    #[error("not a character device")]
    NotACharDevice,
    /// A node in `/dev` whose device number is not the one its name and the kernel's
    /// major give.
    #[error("is {}:{}, expected {}:{}", found.0, found.1, expected.0, expected.1)]
    DevMismatch {
        /// major:minor from the kernel's major and the node's name.
        expected: (u32, u32),
        /// major:minor of the file.
        found: (u32, u32),
    },
    /// A directory (or the capability tree) holds more than [`MAX_ENTRIES`] entries, or is
    /// deeper than [`MAX_DEPTH`]: the rest was not read.
    #[error("more entries than {MAX_ENTRIES} or deeper than {MAX_DEPTH}: the rest was not read")]
    WalkLimit,
}

/// What [`discover`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VendorReport {
    /// The nodes: those of devices in PCI bus id order (then by name), each device's by
    /// kind and number, then the shared ones.
    pub nodes: Vec<VendorNode>,
    /// What could not be identified, by source path.
    pub unidentified: Vec<Unidentified>,
}

impl VendorReport {
    fn node(&mut self, roots: &VendorRoots, rel: &str, kind: VendorNodeKind, dev: (u32, u32)) {
        self.node_of(roots, rel, kind, dev, None, None);
    }

    fn node_of(
        &mut self,
        roots: &VendorRoots,
        rel: &str,
        kind: VendorNodeKind,
        dev: (u32, u32),
        owner: Option<String>,
        mode: Option<u32>,
    ) {
        let path = roots.dev_root.join(rel);
        let present = std::fs::symlink_metadata(&path).is_ok();
        self.nodes.push(VendorNode {
            path,
            kind,
            dev,
            owner,
            mode,
            present,
        });
    }

    fn refuse(&mut self, kind: VendorNodeKind, source: &Path, owner: Option<&str>, reason: Reason) {
        self.unidentified.push(Unidentified {
            kind,
            source: source.to_path_buf(),
            owner: owner.map(str::to_string),
            reason,
        });
    }
}

/// Finds the vendor nodes the kernel knows of under `roots` (see the
/// [module documentation](self)). Never fails: what is absent is not listed, what cannot
/// be identified is in [`VendorReport::unidentified`].
pub fn discover(roots: &VendorRoots) -> VendorReport {
    let mut out = VendorReport::default();
    // Unreadable, it leaves the dynamic majors unknown (reported where one is needed);
    // missing, no driver has one.
    let devices = read_text(&roots.proc_root.join("devices"))
        .map(|t| t.map(|t| parse_proc_devices(&t)).unwrap_or_default());
    nvidia::discover(roots, &devices, &mut out);
    sysfs::kfd(roots, &mut out);
    sysfs::accel(roots, &mut out);
    out.nodes.sort_by(|a, b| {
        (a.owner.is_none(), &a.owner, a.kind, a.dev, &a.path).cmp(&(
            b.owner.is_none(),
            &b.owner,
            b.kind,
            b.dev,
            &b.path,
        ))
    });
    out.unidentified
        .sort_by(|a, b| (&a.source, a.kind).cmp(&(&b.source, b.kind)));
    out
}

/// The text of `path`, at most [`MAX_TEXT`] bytes (invalid UTF-8 replaced); `None` when
/// there is no such file.
fn read_text(path: &Path) -> Result<Option<String>, Reason> {
    match crate::sysfs::read_bounded_bytes(path, MAX_TEXT + 1) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Reason::Unreadable {
            error: e.to_string(),
        }),
        Ok(b) if b.len() > MAX_TEXT => Err(Reason::TooLong { max: MAX_TEXT }),
        Ok(b) => Ok(Some(String::from_utf8_lossy(&b).into_owned())),
    }
}

/// [`read_text`] of a file that must be there.
fn read_required(path: &Path) -> Result<String, Reason> {
    read_text(path)?.ok_or(Reason::NoFile)
}

/// The entries of `dir`, sorted by name, with their types (links not followed); `None`
/// when there is no such directory.
fn list_dir(dir: &Path, limit: usize) -> Result<Option<Vec<Entry>>, Reason> {
    let rd = match std::fs::read_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Reason::Unreadable {
                error: e.to_string(),
            });
        }
        Ok(rd) => rd,
    };
    let mut v = Vec::new();
    for e in rd {
        let e = e.map_err(|e| Reason::Unreadable {
            error: e.to_string(),
        })?;
        if v.len() == limit {
            return Err(Reason::WalkLimit);
        }
        let ty = e.file_type().ok();
        v.push(Entry {
            name: e.file_name(),
            is_dir: ty.is_some_and(|t| t.is_dir()),
            is_file: ty.is_some_and(|t| t.is_file()),
        });
    }
    v.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Some(v))
}

/// One directory entry.
struct Entry {
    name: std::ffi::OsString,
    is_dir: bool,
    is_file: bool,
}

impl Entry {
    /// The name, where it is printable ASCII; else the reason to refuse it.
    fn plain_name(&self) -> Result<&str, Reason> {
        self.name
            .to_str()
            .filter(|s| !s.is_empty() && s.bytes().all(|b| (0x21..0x7f).contains(&b)))
            .ok_or_else(|| {
                use std::os::unix::ffi::OsStrExt;
                Reason::UnexpectedName(Untrusted::new(self.name.as_bytes()))
            })
    }
}

/// `name` less `prefix`, where the rest is a plain decimal number no larger than `max`.
fn numbered(name: &str, prefix: &str, max: u32) -> Option<u32> {
    let n = name.strip_prefix(prefix)?;
    (!n.is_empty() && n.len() <= 7 && n.bytes().all(|b| b.is_ascii_digit()))
        .then(|| n.parse().ok())
        .flatten()
        .filter(|n| *n <= max)
}
