//! What a job wants its GPUs near (`--near SPEC`, issue 30: the spec and where it points;
//! `pick --near` and `place` are not wired to it yet), and each GPU's [`Class`] to it.
//!
//! | spec | the place it names |
//! |---|---|
//! | `numa:N` | NUMA node N |
//! | `cpus:LIST` | the NUMA node holding every CPU of LIST (`0-3,8`); refused when they span nodes |
//! | `gpu:SEL` | a GPU (any GPU spec: index, bus id, driver, node) |
//! | `net:IFACE` | a network interface's PCI function |
//! | `path:FILE` | the disk under FILE's file system (or the disk FILE is, for a block device node): its device number, `/sys/dev/block`, its PCI function ("put me near my data") |
//!
//! A place on PCI is classed against each GPU's PCIe path as [`class`] does; a NUMA node
//! alone (`numa:`, `cpus:`) is `NODE` from a GPU on it and `SYS` from one on another.
//! What does not resolve is an error that names it, never a guess.
//!
//! ```
//! use drmtool::topo::near::Near;
//! assert_eq!("numa:1".parse::<Near>().unwrap(), Near::Numa(1));
//! assert!("rack:7".parse::<Near>().is_err());
//! ```

use super::{Class, PciPath, class};
use crate::gpu::{Gpu, GpuSpec};
use std::path::{Path, PathBuf};

/// The most CPUs a `cpus:` list may name.
pub const CPUS_MAX: u32 = 65_536;

/// A `--near` spec (see the [module](self) docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Near {
    /// `numa:N`.
    Numa(u32),
    /// `cpus:LIST`, the CPUs sorted.
    Cpus(Vec<u32>),
    /// `gpu:SEL`.
    Gpu(GpuSpec),
    /// `net:IFACE`.
    Net(String),
    /// `path:FILE`.
    Path(PathBuf),
}

/// Why a `--near` spec is refused or does not resolve.
#[derive(Debug, thiserror::Error)]
pub enum NearError {
    /// Not a spec of the table.
    #[error("--near {spec:?}: {why} (forms: numa:N, cpus:LIST, gpu:SEL, net:IFACE, path:FILE)")]
    Spec {
        /// The spec as given.
        spec: String,
        /// What is wrong.
        why: String,
    },
    /// The machine has no such NUMA node.
    #[error("--near: NUMA node {0} does not exist here (/sys/devices/system/node)")]
    NoNode(u32),
    /// The CPUs of a `cpus:` list are not all on one node (or on none the kernel lists).
    #[error("--near cpus:{0}: the CPUs are not all on one NUMA node")]
    CpusSpan(String),
    /// The GPU spec names no GPU, or several.
    #[error("--near gpu:{spec}: {why}")]
    Gpu {
        /// The spec.
        spec: GpuSpec,
        /// What it matched.
        why: String,
    },
    /// The interface or file's disk is not a device on PCI.
    #[error("--near {what}: not on PCI ({why})")]
    NotOnPci {
        /// The spec.
        what: String,
        /// What was found instead.
        why: String,
    },
}

impl std::str::FromStr for Near {
    type Err = NearError;

    fn from_str(s: &str) -> Result<Near, NearError> {
        let bad = |why: &str| NearError::Spec {
            spec: s.to_string(),
            why: why.to_string(),
        };
        let (kind, arg) = s.split_once(':').ok_or_else(|| bad("no KIND: prefix"))?;
        if arg.is_empty() {
            return Err(bad("nothing after the colon"));
        }
        match kind {
            "numa" => arg
                .parse()
                .map(Near::Numa)
                .map_err(|_| bad("not a node number")),
            "cpus" => parse_cpus(arg)
                .map(Near::Cpus)
                .ok_or_else(|| bad("not a CPU list")),
            "gpu" => arg
                .parse()
                .map(Near::Gpu)
                .map_err(|e: crate::gpu::SpecError| bad(&e.to_string())),
            "net" if is_iface(arg) => Ok(Near::Net(arg.to_string())),
            "net" => Err(bad("not an interface name")),
            "path" => Ok(Near::Path(PathBuf::from(arg))),
            _ => Err(bad("unknown KIND")),
        }
    }
}

impl std::fmt::Display for Near {
    /// The spec as it parses back (`cpus:` lists written as ranges).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Near::Numa(n) => write!(f, "numa:{n}"),
            Near::Cpus(c) => write!(f, "cpus:{}", crate::sysfs::cpu_ranges(c)),
            Near::Gpu(g) => write!(f, "gpu:{g}"),
            Near::Net(i) => write!(f, "net:{i}"),
            Near::Path(p) => write!(f, "path:{}", p.display()),
        }
    }
}

/// A kernel interface name: 1-15 bytes, no `/`, `:` or white space, not `.` or `..`.
fn is_iface(s: &str) -> bool {
    (1..=15).contains(&s.len())
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_graphic() && b != b'/' && b != b':')
}

/// A CPU list (`0-3,8`) as sorted CPUs; `None` for text that is not one, a range that
/// runs backwards, or more than [`CPUS_MAX`] CPUs.
pub fn parse_cpus(s: &str) -> Option<Vec<u32>> {
    if !super::report::is_cpu_list(s) {
        return None;
    }
    let mut v = Vec::new();
    for r in s.split(',') {
        let (a, b) = r.split_once('-').unwrap_or((r, r));
        let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
        if a > b || b >= CPUS_MAX || v.len() + (b - a) as usize >= CPUS_MAX as usize {
            return None;
        }
        v.extend(a..=b);
    }
    v.sort_unstable();
    v.dedup();
    Some(v)
}

/// Where a spec points: a PCIe path (a device on PCI), a NUMA node, or both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The device's path (`None`: a NUMA node alone).
    pub pci_path: Option<PciPath>,
    /// Its NUMA node (`None` where the kernel reports none).
    pub numa_node: Option<u32>,
}

impl Target {
    /// The class from a GPU at `path` on node `numa` to here (`None`: a GPU not on PCI,
    /// or no node to compare).
    pub fn class_from(&self, path: Option<&PciPath>, numa: Option<u32>) -> Option<Class> {
        match &self.pci_path {
            Some(t) => Some(class(path?, numa, t, self.numa_node)),
            None => {
                let (g, t) = (numa?, self.numa_node?);
                Some(if g == t { Class::Node } else { Class::Sys })
            }
        }
    }
}

/// The PCI device (path and node) a canonical sysfs path `p` under `sys_root` lies on.
fn on_pci(p: &Path, sys_root: &Path, what: &str) -> Result<Target, NearError> {
    let not = |why: String| NearError::NotOnPci {
        what: what.to_string(),
        why,
    };
    let canon = std::fs::canonicalize(sys_root)
        .ok()
        .and_then(|root| super::report::canonical_sys(p, &root))
        .ok_or_else(|| not(format!("{} does not resolve", p.display())))?;
    let path = PciPath::parse(&canon).ok_or_else(|| not(canon.display().to_string()))?;
    let numa_node = crate::sysfs::numa_node_of(&crate::sysfs::function_dir(sys_root, &path.device));
    Ok(Target {
        pci_path: Some(path),
        numa_node,
    })
}

impl Near {
    /// Where it points on this machine (`gpus`: the ordering; sysfs at `sys_root`).
    ///
    /// # Errors
    /// [`NearError`]: a node, interface, GPU or disk that is not there or not on PCI.
    pub fn resolve(&self, gpus: &[Gpu], sys_root: &Path) -> Result<Target, NearError> {
        let nodes = sys_root.join("devices/system/node");
        let node = |n: u32| Target {
            pci_path: None,
            numa_node: Some(n),
        };
        match self {
            Near::Numa(n) if nodes.join(format!("node{n}")).is_dir() => Ok(node(*n)),
            Near::Numa(n) => Err(NearError::NoNode(*n)),
            Near::Cpus(cpus) => {
                let text = crate::sysfs::cpu_ranges(cpus);
                let (names, _) = super::report::class_entries(&nodes);
                names
                    .iter()
                    .filter_map(|n| n.to_str()?.strip_prefix("node")?.parse::<u32>().ok())
                    .find(|n| {
                        crate::sysfs::attr(&nodes.join(format!("node{n}/cpulist")))
                            .and_then(|l| parse_cpus(&l))
                            .is_some_and(|on| cpus.iter().all(|c| on.binary_search(c).is_ok()))
                    })
                    .map(node)
                    .ok_or(NearError::CpusSpan(text))
            }
            Near::Gpu(spec) => match crate::gpu::select(std::slice::from_ref(spec), gpus) {
                Ok(v) if v.len() == 1 => {
                    let g = v[0];
                    let Some(bus) = g.bus_id.as_deref() else {
                        return Err(NearError::NotOnPci {
                            what: format!("gpu:{spec}"),
                            why: format!("{} is a platform device", g.name),
                        });
                    };
                    on_pci(
                        &crate::sysfs::function_dir(sys_root, bus),
                        sys_root,
                        &format!("gpu:{spec}"),
                    )
                }
                Ok(v) => Err(NearError::Gpu {
                    spec: spec.clone(),
                    why: format!("{} GPUs match; name one", v.len()),
                }),
                Err(e) => Err(NearError::Gpu {
                    spec: spec.clone(),
                    why: e.to_string(),
                }),
            },
            Near::Net(i) => on_pci(
                &sys_root.join("class/net").join(i),
                sys_root,
                &format!("net:{i}"),
            ),
            Near::Path(f) => {
                let what = format!("path:{}", f.display());
                let st = rustix::fs::stat(f).map_err(|e| NearError::NotOnPci {
                    what: what.clone(),
                    why: format!("stat: {e}"),
                })?;
                // A block device node names its disk itself; any other file, the disk of
                // the file system it is on.
                let is_block = rustix::fs::FileType::from_raw_mode(st.st_mode)
                    == rustix::fs::FileType::BlockDevice;
                let dev = if is_block { st.st_rdev } else { st.st_dev };
                let (maj, min) = (rustix::fs::major(dev), rustix::fs::minor(dev));
                on_pci(
                    &sys_root.join(format!("dev/block/{maj}:{min}")),
                    sys_root,
                    &what,
                )
            }
        }
    }
}
