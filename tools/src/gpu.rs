//! The one way to name a GPU, and the one stable ordering of GPUs that every command uses.
//!
//! A GPU is a device (a PCI function, or a platform device) that has a DRM node (card or
//! render) or a per-device vendor node that [`crate::vendor::discover`] identified: an
//! NVIDIA `/dev/nvidiaN` (an NVIDIA GPU without nvidia-drm has no DRM node), an
//! accelerator's `/dev/accel/accelN`. Shared nodes (`nvidiactl`, `nvidia-uvm`, `kfd`)
//! never make a GPU. A device with both kinds of node is one GPU ([`merge`]).
//!
//! The ordering: GPUs sorted by PCI bus id, then the devices that are not on PCI (vkms,
//! vgem: platform devices) by name. An index in this list is what `drmtool run --gpu 1` and
//! `drmtool info 1` mean; every command prints the bus id beside it. A machine where every
//! GPU has a DRM node numbers them as it always did; where some have none, those take
//! their place by bus id (they were not listed before).
//!
//! A device's bus id is the PCI function its sysfs device sits under: its own for a PCI
//! GPU, the transport's for virtio-gpu (`.../0000:00:04.0/virtio2`).
//!
//! A [`GpuSpec`] is what every command takes where it names a GPU or a node:
//!
//! | spec | names |
//! |---|---|
//! | `1` | GPU index 1 in the ordering |
//! | `0000:00:04.0`, `00:04.0` | the GPU at that PCI bus id |
//! | `vgem`, `virtio-gpu`, `bochs`, `nvidia` | every GPU of that driver (`-`/`_` alike, `-drm` optional) |
//! | `/dev/dri/renderD129`, `card1` | that DRM node (a path or a `/dev/dri` name) |
//! | `/dev/nvidia0`, `nvidia0`, `/dev/accel/accel0`, `accel0` | the GPU whose vendor node that is |
//! | `pci-0000:00:04.0-render` | the node with that `/dev/dri/by-path` name |
//! | `226:1`, `195:0` | the node with that device number (DRM or a GPU's vendor node) |
//!
//! Commands that work on GPUs (`run`, `pick`) take the GPUs a spec names; commands that
//! work on a DRM node (`info`, `caps`, `kms`) take the named node, or each named GPU's card
//! node (its render node where it has none), and refuse a GPU without a DRM node by name
//! ([`SelectError::NotDrm`]); `buffers --device` keeps the named GPUs.
//!
//! ```no_run
//! use drmtool::gpu::{self, GpuSpec};
//! let spec: GpuSpec = "vgem".parse()?;
//! let gpus = gpu::gpus()?;
//! for g in gpu::select(&[spec], &gpus)? {
//!     println!("{} {}", g.index, g.driver.as_deref().unwrap_or("?"));
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::vendor::{VendorNode, VendorNodeKind, VendorReport};
use drm_gem::{NodeInfo, NodeKind};
use serde::Serialize;
use std::path::{Path, PathBuf};

pub use crate::sysfs::{bus_id_of, is_bus_id};

/// One DRM node of a [`Gpu`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Node {
    /// `/dev/dri/card0`, `/dev/dri/renderD128`.
    pub path: PathBuf,
    /// Primary or render.
    #[serde(serialize_with = "ser_kind")]
    pub kind: NodeKind,
    /// Char-device major:minor.
    pub dev: (u32, u32),
    /// The `/dev/dri/by-path/` name that points at it (`pci-0000:00:04.0-render`), if any.
    pub by_path: Option<String>,
}

fn ser_kind<S: serde::Serializer>(k: &NodeKind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(match k {
        NodeKind::Primary => "primary",
        NodeKind::Render => "render",
    })
}

/// One GPU: its nodes and where it sits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Gpu {
    /// Position in the ordering (0-based).
    pub index: usize,
    /// PCI bus id (`0000:00:04.0`) of the device or of the PCI function it sits under.
    pub bus_id: Option<String>,
    /// The sysfs device's name (`0000:00:02.0`, `virtio2`, `vkms`, `vgem`); the bus id for a
    /// GPU without a DRM node.
    pub name: String,
    /// The DRM driver's name; for a GPU without a DRM node, the driver bound to its device
    /// in sysfs (`nvidia`, `habanalabs`, `intel_vpu`).
    pub driver: Option<String>,
    /// PCI vendor and device id of the PCI function (`bus_id`'s).
    pub pci_id: Option<(u16, u16)>,
    /// Its DRM nodes, the card node first; empty for a GPU that has only vendor nodes.
    pub nodes: Vec<Node>,
    /// Its own vendor nodes ([`crate::vendor`]): `/dev/nvidiaN` and its MIG capability
    /// nodes, `/dev/accel/accelN`. Shared nodes (`nvidiactl`, `kfd`) are no GPU's.
    pub vendor_nodes: Vec<VendorNode>,
    /// NUMA node of the PCI function (`numa_node`; `None` where the kernel says -1 or has
    /// no such file).
    pub numa_node: Option<u32>,
    /// CPUs local to it (`local_cpulist`, as the kernel prints it).
    pub local_cpulist: Option<String>,
}

#[cfg(test)]
impl Gpu {
    /// A GPU with a name and a driver and nothing else (unit tests).
    pub(crate) fn bare(index: usize, name: &str, driver: &str) -> Gpu {
        Gpu {
            index,
            bus_id: None,
            name: name.into(),
            driver: Some(driver.into()),
            pci_id: None,
            nodes: Vec::new(),
            vendor_nodes: Vec::new(),
            numa_node: None,
            local_cpulist: None,
        }
    }
}

impl Gpu {
    /// Its render node, if it has one.
    pub fn render(&self) -> Option<&Node> {
        self.nodes.iter().find(|n| n.kind == NodeKind::Render)
    }

    /// Its card (primary) node, if it has one.
    pub fn card(&self) -> Option<&Node> {
        self.nodes.iter().find(|n| n.kind == NodeKind::Primary)
    }

    /// Its NVIDIA GPU node (`/dev/nvidiaN`), if it is an NVIDIA GPU the discovery
    /// identified.
    pub fn nvidia(&self) -> Option<&VendorNode> {
        self.vendor_nodes
            .iter()
            .find(|n| n.kind == VendorNodeKind::NvidiaGpu)
    }

    /// Its accelerator node (`/dev/accel/accelN`), if it has one.
    pub fn accel(&self) -> Option<&VendorNode> {
        self.vendor_nodes
            .iter()
            .find(|n| n.kind == VendorNodeKind::Accel)
    }

    /// `0000:3b:00.0`, else its name (a platform device): how messages name it.
    pub fn label(&self) -> &str {
        self.bus_id.as_deref().unwrap_or(&self.name)
    }
}

/// Sorts GPUs into the ordering and numbers them: PCI bus id first, then by name.
pub fn order(mut gpus: Vec<Gpu>) -> Vec<Gpu> {
    gpus.sort_by(|a, b| {
        (a.bus_id.is_none(), &a.bus_id, &a.name).cmp(&(b.bus_id.is_none(), &b.bus_id, &b.name))
    });
    for (i, g) in gpus.iter_mut().enumerate() {
        g.index = i;
        g.nodes
            .sort_by_key(|n| (n.kind != NodeKind::Primary, n.dev));
    }
    gpus
}

/// The `/dev/dri/by-path` names, by the node file name they point at (`card0`).
fn by_path_names(dri: &Path) -> Vec<(String, String)> {
    let Ok(rd) = std::fs::read_dir(dri.join("by-path")) else {
        return Vec::new();
    };
    let mut v: Vec<(String, String)> = rd
        .flatten()
        .filter_map(|e| {
            let target = std::fs::read_link(e.path()).ok()?;
            let node = target.file_name()?.to_str()?.to_string();
            Some((node, e.file_name().to_str()?.to_string()))
        })
        .collect();
    v.sort();
    v
}

/// What this machine has: its DRM nodes, its vendor nodes, and the GPUs they make.
#[derive(Debug, Clone)]
pub struct Machine {
    /// The DRM nodes [`drm_gem::enumerate`] found, or why there are none.
    pub drm: Result<Vec<NodeInfo>, drm_gem::NoNodes>,
    /// The vendor nodes ([`crate::vendor::discover`]).
    pub vendor: VendorReport,
    /// The GPUs in the ordering ([`merge`]).
    pub gpus: Vec<Gpu>,
}

impl Machine {
    /// Reads this machine: `/dev/dri`, then `/proc` and `/sys` for the vendor nodes.
    pub fn read() -> Machine {
        let drm = drm_gem::enumerate();
        let vendor = crate::vendor::discover(&crate::vendor::VendorRoots::default());
        let gpus = merge(
            drm.clone().unwrap_or_default(),
            Path::new("/dev/dri"),
            &vendor,
            Path::new("/sys"),
        );
        Machine { drm, vendor, gpus }
    }

    /// Why the machine has no GPU at all: no DRM node and no GPU of a vendor node.
    pub fn no_devices(&self) -> Option<SelectError> {
        match &self.drm {
            Err(e) if self.gpus.is_empty() => Some(SelectError::NoDevices(e.clone())),
            _ => None,
        }
    }

    /// Its GPUs in the ordering.
    ///
    /// # Errors
    /// [`SelectError::NoDevices`] ([`Machine::no_devices`]).
    pub fn into_gpus(self) -> Result<Vec<Gpu>, SelectError> {
        match self.no_devices() {
            Some(e) => Err(e),
            None => Ok(self.gpus),
        }
    }
}

/// The machine's GPUs in the ordering ([`Machine::read`]).
///
/// # Errors
/// [`SelectError::NoDevices`] when there is no DRM node (no `/dev/dri`, or it holds no
/// node) and no GPU with a vendor node either.
pub fn gpus() -> Result<Vec<Gpu>, SelectError> {
    Machine::read().into_gpus()
}

/// Groups DRM nodes by their sysfs device (canonical `<node>/device`) and orders them, with
/// the PCI functions read under `/sys` (DRM nodes only: [`merge`] adds the vendor nodes).
pub fn group(nodes: Vec<NodeInfo>, dri: &Path) -> Vec<Gpu> {
    merge(nodes, dri, &VendorReport::default(), Path::new("/sys"))
}

/// The GPUs that DRM nodes (`drm`, as [`drm_gem::enumerate`] found them, their by-path
/// links under `dri`) and vendor nodes (`vendor`, [`crate::vendor::discover`]'s report) make,
/// in the ordering, the PCI functions read under `sys_root`:
///
/// - DRM nodes are grouped by their sysfs device (canonical `<node>/device`);
/// - each vendor node with an owner joins the GPU of that bus id (or, off PCI, of that
///   device name);
/// - an identified `/dev/nvidiaN` or `/dev/accel/accelN` whose owner has no DRM node makes a
///   GPU of its own: no DRM nodes, `name` its bus id, `driver` the one bound to the PCI
///   function (an accelerator off PCI: to its class device's `device`), ids, NUMA node and
///   local CPUs from the PCI function;
/// - shared vendor nodes belong to no GPU.
pub fn merge(drm: Vec<NodeInfo>, dri: &Path, vendor: &VendorReport, sys_root: &Path) -> Vec<Gpu> {
    let mut gpus = drm_gpus(drm, dri, sys_root);
    let owns = |g: &Gpu, o: &str| g.bus_id.as_deref() == Some(o) || g.name == o;
    let makes_gpu =
        |n: &VendorNode| matches!(n.kind, VendorNodeKind::NvidiaGpu | VendorNodeKind::Accel);
    for n in vendor.nodes.iter().filter(|n| makes_gpu(n)) {
        let Some(o) = n.owner.as_deref() else {
            continue;
        };
        if !gpus.iter().any(|g| owns(g, o)) {
            gpus.push(vendor_gpu(o, n, sys_root));
        }
    }
    for n in &vendor.nodes {
        let Some(o) = n.owner.as_deref() else {
            continue;
        };
        if let Some(g) = gpus.iter_mut().find(|g| owns(g, o)) {
            g.vendor_nodes.push(n.clone());
        }
    }
    order(gpus)
}

/// A GPU that has only vendor nodes, `n` being its `/dev/nvidiaN` or `/dev/accel/accelN`.
fn vendor_gpu(owner: &str, n: &VendorNode, sys_root: &Path) -> Gpu {
    let (bus_id, f) = if is_bus_id(owner) {
        (
            Some(owner.to_string()),
            crate::sysfs::PciFunction::read(sys_root, owner),
        )
    } else {
        // An accelerator off PCI: the driver of the device its class device leads to.
        let driver = n
            .path
            .file_name()
            .filter(|_| n.kind == VendorNodeKind::Accel)
            .and_then(|f| {
                crate::sysfs::driver_of(&sys_root.join("class/accel").join(f).join("device"))
            });
        let f = crate::sysfs::PciFunction {
            driver,
            ..Default::default()
        };
        (None, f)
    };
    Gpu {
        index: 0,
        bus_id,
        name: owner.to_string(),
        driver: f.driver,
        pci_id: f.pci_id,
        nodes: Vec::new(),
        vendor_nodes: Vec::new(),
        numa_node: f.numa_node,
        local_cpulist: f.local_cpulist,
    }
}

/// The GPUs of DRM nodes: grouped by their sysfs device, in no particular order.
fn drm_gpus(nodes: Vec<NodeInfo>, dri: &Path, sys_root: &Path) -> Vec<Gpu> {
    let by_path = by_path_names(dri);
    let mut gpus: Vec<(PathBuf, Gpu)> = Vec::new();
    for n in nodes {
        let device =
            std::fs::canonicalize(n.sysfs.join("device")).unwrap_or_else(|_| n.sysfs.clone());
        let file = n
            .path
            .file_name()
            .and_then(|f| f.to_str())
            .unwrap_or_default()
            .to_string();
        let node = Node {
            by_path: by_path
                .iter()
                .find(|(t, _)| *t == file)
                .map(|(_, l)| l.clone()),
            path: n.path.clone(),
            kind: n.kind,
            dev: n.dev,
        };
        if let Some((_, g)) = gpus.iter_mut().find(|(d, _)| *d == device) {
            g.nodes.push(node);
            g.driver = g.driver.take().or(n.driver);
            continue;
        }
        let bus_id = bus_id_of(&device);
        let f = bus_id
            .as_deref()
            .map(|b| crate::sysfs::PciFunction::read(sys_root, b))
            .unwrap_or_default();
        let name = device
            .file_name()
            .and_then(|f| f.to_str())
            .unwrap_or(&file)
            .to_string();
        gpus.push((
            device,
            Gpu {
                index: 0,
                bus_id,
                name,
                driver: n.driver,
                // The PCI function's ids (virtio-gpu's transport: 1af4:1050) where the
                // node's parent is not the PCI device itself.
                pci_id: n.pci_id.or(f.pci_id),
                nodes: vec![node],
                vendor_nodes: Vec::new(),
                numa_node: f.numa_node,
                local_cpulist: f.local_cpulist,
            },
        ));
    }
    gpus.into_iter().map(|(_, g)| g).collect()
}

/// One way to name a GPU or one of its nodes: the grammar every command takes (see the
/// table in the [module documentation](self)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuSpec {
    /// An index in the ordering (`1`).
    Index(usize),
    /// A PCI bus id with its domain (`0000:00:04.0`; read from `00:04.0` too).
    BusId(String),
    /// A node: a path (`/dev/dri/renderD129`, a `by-path` link, a GPU's vendor node
    /// `/dev/nvidia0`), or a node's short name (`card1` read as `/dev/dri/card1`, `nvidia0`
    /// as `/dev/nvidia0`, `accel0` as `/dev/accel/accel0`).
    Node(PathBuf),
    /// The node with this `/dev/dri/by-path` name (`pci-0000:00:04.0-render`).
    ByPath(String),
    /// Every GPU of this driver (`vgem`; `virtio-gpu` and `bochs` name `virtio_gpu` and
    /// `bochs-drm`; `nvidia` names `nvidia-drm` and the GPUs without a DRM node bound to
    /// `nvidia`).
    Driver(String),
    /// The node with this device number: a DRM node (`226:1`) or a GPU's vendor node
    /// (`195:0`).
    Dev(u32, u32),
}

/// Why a text is no [`GpuSpec`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// Nothing (or only white space) was given.
    #[error("an empty GPU spec (hint: {SPEC_HINT})")]
    Empty,
    /// A number too large to be an index or a device number.
    #[error("GPU spec {0:?}: the number is out of range (hint: `drmtool devices` lists the GPUs)")]
    OutOfRange(String),
    /// None of the forms.
    #[error("GPU spec {0:?} is none of the forms (hint: {SPEC_HINT})")]
    Unknown(String),
}

/// The forms of a [`GpuSpec`], for hints.
pub const SPEC_HINT: &str = "an index from `drmtool devices`, a PCI bus id (00:04.0), a driver \
                             (vgem), a node (/dev/dri/card1, card1, 226:1, /dev/nvidia0, \
                             nvidia0, accel0) or a by-path name";

impl std::str::FromStr for GpuSpec {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<GpuSpec, SpecError> {
        let s = s.trim();
        if s.is_empty() {
            return Err(SpecError::Empty);
        }
        let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        if digits(s) {
            return s
                .parse()
                .map(GpuSpec::Index)
                .map_err(|_| SpecError::OutOfRange(s.into()));
        }
        if let Some((maj, min)) = s.split_once(':')
            && digits(maj)
            && digits(min)
        {
            return match (maj.parse(), min.parse()) {
                (Ok(a), Ok(b)) => Ok(GpuSpec::Dev(a, b)),
                _ => Err(SpecError::OutOfRange(s.into())),
            };
        }
        let full = if s.len() == 7 {
            format!("0000:{s}")
        } else {
            s.to_string()
        };
        if is_bus_id(&full) {
            return Ok(GpuSpec::BusId(full.to_ascii_lowercase()));
        }
        if s.starts_with('/') {
            return Ok(GpuSpec::Node(PathBuf::from(s)));
        }
        if s.starts_with("pci-") || s.starts_with("platform-") {
            return Ok(GpuSpec::ByPath(s.to_string()));
        }
        let node_name = |prefix: &str| s.strip_prefix(prefix).is_some_and(digits);
        if node_name("card") || node_name("renderD") {
            return Ok(GpuSpec::Node(Path::new("/dev/dri").join(s)));
        }
        if node_name("nvidia") {
            return Ok(GpuSpec::Node(Path::new("/dev").join(s)));
        }
        if node_name("accel") {
            return Ok(GpuSpec::Node(Path::new("/dev/accel").join(s)));
        }
        if s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Ok(GpuSpec::Driver(s.to_string()));
        }
        Err(SpecError::Unknown(s.into()))
    }
}

impl std::fmt::Display for GpuSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GpuSpec::Index(i) => write!(f, "{i}"),
            GpuSpec::BusId(b) | GpuSpec::ByPath(b) | GpuSpec::Driver(b) => f.write_str(b),
            GpuSpec::Node(p) => write!(f, "{}", p.display()),
            GpuSpec::Dev(a, b) => write!(f, "{a}:{b}"),
        }
    }
}

/// Why no GPU or node could be chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SelectError {
    /// This machine has no DRM devices at all.
    #[error("{}", no_devices_message(.0))]
    NoDevices(drm_gem::NoNodes),
    /// The spec names none of the machine's GPUs.
    #[error("no GPU matches {spec}; the GPUs here: {have} (hint: `drmtool devices` lists them)")]
    NoMatch {
        /// The spec as given.
        spec: GpuSpec,
        /// The machine's GPUs ([`summary`]).
        have: String,
    },
    /// The spec names a GPU (or a vendor node of one) but none of its DRM nodes, which the
    /// command works on (`info`, `caps`, `kms`, `buffers --device`).
    #[error(
        "{spec} names GPU {index} ({gpu}) but no DRM node: it has {has}; `info`, `caps`, \
         `kms` and `buffers` work on DRM nodes (hint: `drmtool devices` lists each GPU's nodes)"
    )]
    NotDrm {
        /// The spec as given.
        spec: GpuSpec,
        /// The GPU's index.
        index: usize,
        /// Its bus id (or name) and driver.
        gpu: String,
        /// What nodes it has.
        has: String,
    },
}

impl SelectError {
    /// [`SelectError::NotDrm`] for `spec` naming `g`.
    fn not_drm(spec: &GpuSpec, g: &Gpu) -> SelectError {
        let list = |v: Vec<String>| v.join(", ");
        let has = if g.nodes.is_empty() {
            format!(
                "no DRM node, only {}",
                list(
                    g.vendor_nodes
                        .iter()
                        .map(|n| n.path.display().to_string())
                        .collect()
                )
            )
        } else {
            format!(
                "the DRM nodes {}",
                list(
                    g.nodes
                        .iter()
                        .map(|n| n.path.display().to_string())
                        .collect()
                )
            )
        };
        SelectError::NotDrm {
            spec: spec.clone(),
            index: g.index,
            gpu: format!("{} {}", g.label(), g.driver.as_deref().unwrap_or("?")),
            has,
        }
    }
}

/// The one message for a machine without DRM devices, with its hint.
pub fn no_devices_message(e: &drm_gem::NoNodes) -> &'static str {
    match e {
        drm_gem::NoNodes::NoDevDri => {
            "no DRM devices: this machine has no /dev/dri (no DRM driver is loaded here); to \
             try drmtool in a guest with real drivers, from this project's checkout: \
             scripts/drmtool devices"
        }
        drm_gem::NoNodes::Empty => {
            "no DRM devices: /dev/dri exists but holds no card or render nodes"
        }
    }
}

/// Whether driver name `driver` is what `spec` names: equal with `-` and `_` alike, and
/// the `-drm` suffix optional (`virtio-gpu` for `virtio_gpu`, `bochs` for `bochs-drm`).
pub fn driver_matches(driver: &str, spec: &str) -> bool {
    let norm = |s: &str| s.replace('-', "_");
    let d = norm(driver);
    let w = norm(spec);
    d == w || d.strip_suffix("_drm") == Some(w.as_str())
}

impl GpuSpec {
    /// Whether it names one node rather than GPUs.
    pub fn is_node(&self) -> bool {
        matches!(
            self,
            GpuSpec::Node(_) | GpuSpec::ByPath(_) | GpuSpec::Dev(..)
        )
    }

    /// Whether it names node `n`: by path (or what the path points at), by-path name or
    /// device number. Never true for a spec that names GPUs.
    pub fn names_node(&self, n: &Node) -> bool {
        self.node_matcher()(n.path.as_path(), n.dev, n.by_path.as_deref())
    }

    /// Whether it names vendor node `n` (`/dev/nvidia0`, `195:0`): by path (or what the
    /// path points at) or device number.
    pub fn names_vendor_node(&self, n: &VendorNode) -> bool {
        self.node_matcher()(n.path.as_path(), n.dev, None)
    }

    /// Whether it names a node with this path, device number and by-path name, with a node
    /// path resolved once (`canonicalize` and `stat`), for testing many nodes.
    fn node_matcher(&self) -> impl Fn(&Path, (u32, u32), Option<&str>) -> bool + '_ {
        // A by-path link or another name of the node: compare what it points at.
        let resolved = match self {
            GpuSpec::Node(p) => {
                let target = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
                let rdev = rustix::fs::stat(&target)
                    .ok()
                    .filter(|st| st.st_mode & 0o170000 == 0o020000)
                    .map(|st| (rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev)));
                Some((target, rdev))
            }
            _ => None,
        };
        move |path: &Path, dev: (u32, u32), by_path: Option<&str>| match (self, &resolved) {
            (GpuSpec::Dev(a, b), _) => dev == (*a, *b),
            (GpuSpec::ByPath(name), _) => by_path == Some(name.as_str()),
            (GpuSpec::Node(p), Some((target, rdev))) => {
                path == p || path == target || Some(dev) == *rdev
            }
            _ => false,
        }
    }

    /// The GPUs it names (in the ordering): the GPU of a named node (DRM or its own vendor
    /// node), or the GPUs named.
    pub fn pick<'g>(&self, gpus: &'g [Gpu]) -> Vec<&'g Gpu> {
        let names = self.node_matcher();
        gpus.iter()
            .filter(|g| match self {
                GpuSpec::Index(i) => g.index == *i,
                GpuSpec::BusId(b) => g.bus_id.as_ref() == Some(b),
                GpuSpec::Driver(d) => g.driver.as_deref().is_some_and(|x| driver_matches(x, d)),
                _ => {
                    g.nodes
                        .iter()
                        .any(|n| names(&n.path, n.dev, n.by_path.as_deref()))
                        || g.vendor_nodes.iter().any(|n| names(&n.path, n.dev, None))
                }
            })
            .collect()
    }
}

/// The GPUs the specs name, in spec order, each once.
///
/// # Errors
/// [`SelectError::NoMatch`] (listing the machine's GPUs) for the first spec that names none.
pub fn select<'g>(specs: &[GpuSpec], gpus: &'g [Gpu]) -> Result<Vec<&'g Gpu>, SelectError> {
    let mut out: Vec<&Gpu> = Vec::new();
    for s in specs {
        let found = s.pick(gpus);
        if found.is_empty() {
            return Err(SelectError::NoMatch {
                spec: s.clone(),
                have: summary(gpus),
            });
        }
        for g in found {
            if !out.iter().any(|o| o.index == g.index) {
                out.push(g);
            }
        }
    }
    Ok(out)
}

/// The GPUs `spec` names that have DRM nodes, for a command that works on DRM nodes
/// (`buffers --device`): those of [`select`] with a DRM node.
///
/// # Errors
/// As [`select`]; [`SelectError::NotDrm`] naming the first GPU when none has a DRM node.
pub fn select_drm<'g>(spec: &GpuSpec, gpus: &'g [Gpu]) -> Result<Vec<&'g Gpu>, SelectError> {
    let chosen = select(std::slice::from_ref(spec), gpus)?;
    let drm: Vec<&Gpu> = chosen
        .iter()
        .copied()
        .filter(|g| !g.nodes.is_empty())
        .collect();
    match chosen.first() {
        Some(g) if drm.is_empty() => Err(SelectError::not_drm(spec, g)),
        _ => Ok(drm),
    }
}

/// The nodes a command that works on one DRM node at a time takes for `spec`, in the
/// ordering: the node a node spec names; each named GPU's card node (its render node where
/// it has none; nothing for a GPU without DRM nodes); without a spec, every card node.
///
/// # Errors
/// As [`select`]; [`SelectError::NotDrm`] when the GPUs `spec` names have no such node (a
/// GPU with only vendor nodes, or a spec naming a vendor node).
pub fn nodes_of<'g>(spec: Option<&GpuSpec>, gpus: &'g [Gpu]) -> Result<Vec<&'g Node>, SelectError> {
    let Some(spec) = spec else {
        return Ok(gpus.iter().filter_map(Gpu::card).collect());
    };
    let chosen = select(std::slice::from_ref(spec), gpus)?;
    let names = spec.node_matcher();
    let out: Vec<&Node> = chosen
        .iter()
        .filter_map(|g| {
            if spec.is_node() {
                g.nodes
                    .iter()
                    .find(|n| names(&n.path, n.dev, n.by_path.as_deref()))
            } else {
                g.card().or_else(|| g.render())
            }
        })
        .collect();
    match chosen.first() {
        Some(g) if out.is_empty() => Err(SelectError::not_drm(spec, g)),
        _ => Ok(out),
    }
}

/// The machine's DRM nodes ([`drm_gem::enumerate`]'s view) that `spec` selects, as
/// [`nodes_of`] chooses them.
///
/// # Errors
/// [`SelectError`]: no DRM devices (without a spec, or with neither a DRM node nor a
/// GPU of a vendor node), nothing matches, or what matches has no DRM node.
pub fn nodes(spec: Option<&GpuSpec>) -> Result<Vec<NodeInfo>, SelectError> {
    let m = Machine::read();
    let infos = match (&m.drm, spec) {
        (Ok(v), _) => v.clone(),
        (Err(e), None) => return Err(SelectError::NoDevices(e.clone())),
        (Err(_), Some(_)) => match m.no_devices() {
            Some(e) => return Err(e),
            None => Vec::new(),
        },
    };
    Ok(nodes_of(spec, &m.gpus)?
        .into_iter()
        .filter_map(|n| infos.iter().find(|i| i.path == n.path).cloned())
        .collect())
}

/// `0 0000:00:02.0 bochs-drm, 1 vkms vkms` for error messages.
pub fn summary(gpus: &[Gpu]) -> String {
    if gpus.is_empty() {
        return "none".into();
    }
    gpus.iter()
        .map(|g| {
            format!(
                "{} {} {}",
                g.index,
                g.label(),
                g.driver.as_deref().unwrap_or("?")
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests;
