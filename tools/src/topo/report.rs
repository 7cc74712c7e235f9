//! `drmtool topo`: where every GPU of the one ordering sits, read from sysfs.
//!
//! For each GPU: its NUMA node, local CPUs, PCIe path (host bridge, root port, switch
//! ports, the device) and link (current and maximum speed and width); the GPU-to-GPU
//! matrix of [`Class`]es; the NICs (`class/net`, `class/infiniband`) and disks
//! (`class/block`, whole disks) on PCI with their class to each GPU (where a job's data
//! comes from); the NUMA distance table. The attributes Kubernetes DRA names devices by
//! (`pciBusID`, `pcieRoot`, `numaNode`) ride along in JSON.
//!
//! Platform devices (vkms, vgem) and virtual class devices (`lo`, loop and RAM disks)
//! have no PCI path: a GPU without one is listed with none and no class to anything but
//! itself; such class devices are counted, not listed. Every read is bounded and every
//! text that is not what the kernel writes reads as unknown ([`crate::sysfs`]); class
//! device names (chosen by whoever made the device) are [`Untrusted`].
//!
//! ```
//! use drmtool::topo::report::read_report_at;
//! // A sysfs with nothing in it: no GPU, no device, no NUMA table.
//! let r = read_report_at(&[], std::path::Path::new("/nonexistent"));
//! assert!(r.gpus.is_empty() && r.devices.is_empty() && r.numa.is_none());
//! ```

use super::{Class, PciPath, class};
use crate::gpu::Gpu;
use crate::sysfs;
use crate::untrusted::Untrusted;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The `schema_version` of `drmtool topo --json` (`tools/schema/topo.schema.json`).
pub const TOPO_SCHEMA_VERSION: u32 = 1;

/// The most entries read from one sysfs class directory; past it the report says it was
/// cut ([`Report::truncated`]).
pub const CLASS_ENTRIES_MAX: usize = 4096;

/// The longest link speed text taken (`"32.0 GT/s PCIe"`; the kernel's are shorter).
const SPEED_MAX: usize = 32;

/// A PCIe link as the device's function reports it (`current_link_speed`, ...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Link {
    /// The negotiated speed (`"8.0 GT/s PCIe"`).
    pub current_speed: Option<String>,
    /// The negotiated width in lanes.
    pub current_width: Option<u32>,
    /// The most the device can do.
    pub max_speed: Option<String>,
    /// Its most lanes.
    pub max_width: Option<u32>,
}

/// The attributes Kubernetes Dynamic Resource Allocation names a PCI device by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Dra {
    /// The PCI bus id.
    #[serde(rename = "pciBusID")]
    pub pci_bus_id: Option<String>,
    /// The PCIe root complex (the host bridge, `pci0000:00`): DRA's `pcieRoot`.
    #[serde(rename = "pcieRoot")]
    pub pcie_root: Option<String>,
    /// The NUMA node.
    #[serde(rename = "numaNode")]
    pub numa_node: Option<u32>,
}

/// Where one GPU sits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuPlace {
    /// Its index in the one ordering.
    pub index: usize,
    /// Its name (`drmtool devices`).
    pub name: String,
    /// Its driver.
    pub driver: Option<String>,
    /// Its PCI bus id (`None`: a platform device).
    pub bus_id: Option<String>,
    /// Its NUMA node (`None` where the kernel reports none).
    pub numa_node: Option<u32>,
    /// The CPUs local to it, as the kernel lists them (`0-15,32-47`).
    pub local_cpus: Option<String>,
    /// Its way down from the host bridge (`None`: not on PCI).
    pub pci_path: Option<PciPath>,
    /// Its PCIe link (`None` where the function reports none, as on conventional PCI).
    pub link: Option<Link>,
    /// Its DRA attributes.
    pub dra: Dra,
}

/// What kind of class device a [`DataDevice`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// A network interface (`/sys/class/net`).
    Net,
    /// An RDMA device (`/sys/class/infiniband`).
    Infiniband,
    /// A whole disk (`/sys/class/block`, partitions left out).
    Block,
}

impl DeviceKind {
    /// Its name in the table and in JSON.
    pub fn label(self) -> &'static str {
        match self {
            DeviceKind::Net => "net",
            DeviceKind::Infiniband => "infiniband",
            DeviceKind::Block => "block",
        }
    }

    /// Its directory under the sysfs root.
    fn class_dir(self) -> &'static str {
        match self {
            DeviceKind::Net => "class/net",
            DeviceKind::Infiniband => "class/infiniband",
            DeviceKind::Block => "class/block",
        }
    }
}

/// A NIC or disk on PCI and its class to each GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DataDevice {
    /// What it is.
    pub kind: DeviceKind,
    /// Its class device name (`eth0`, `nvme0n1`): chosen by whoever made it.
    pub name: Untrusted,
    /// The PCI function it sits on.
    pub bus_id: String,
    /// That function's NUMA node.
    pub numa_node: Option<u32>,
    /// Its way down from the host bridge.
    pub pci_path: PciPath,
    /// Its class to each GPU, in the ordering (`None` for a GPU without a PCI path).
    pub classes: Vec<Option<Class>>,
}

/// One row of the NUMA distance table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NumaRow {
    /// The node.
    pub node: u32,
    /// Its distance to each node, in node order (10: itself).
    pub distances: Vec<u32>,
}

/// `drmtool topo`'s report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// [`TOPO_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Every GPU, in the ordering.
    pub gpus: Vec<GpuPlace>,
    /// The class between GPU `i` (row) and GPU `j` (column): `X` on the diagonal, `None`
    /// where either has no PCI path.
    pub matrix: Vec<Vec<Option<Class>>>,
    /// NICs and disks on PCI, by kind, then name.
    pub devices: Vec<DataDevice>,
    /// Class devices not on PCI, left out (`lo`, bridges, loop and RAM disks).
    pub off_pci: usize,
    /// Whether a class directory held more than [`CLASS_ENTRIES_MAX`] entries (the rest
    /// is not in the report).
    pub truncated: bool,
    /// The NUMA distance table (`None`: no node directory, or a table that does not read
    /// as one).
    pub numa: Option<Vec<NumaRow>>,
}

/// The report of `gpus` (the ordering) on this machine's `/sys`.
pub fn read_report(gpus: &[Gpu]) -> Report {
    read_report_at(gpus, Path::new("/sys"))
}

/// Where each of `gpus` sits (the report's `gpus`, without the rest), sysfs at `sys_root`.
pub fn places_at(gpus: &[Gpu], sys_root: &Path) -> Vec<GpuPlace> {
    // A root that does not resolve resolves nothing under it: no paths.
    let root = std::fs::canonicalize(sys_root).ok();
    gpus.iter()
        .map(|g| place_of(g, sys_root, root.as_deref()))
        .collect()
}

/// The report of `gpus` with sysfs at `sys_root` (tests pass a synthetic tree).
pub fn read_report_at(gpus: &[Gpu], sys_root: &Path) -> Report {
    // A root that does not resolve resolves nothing under it: no paths, no devices.
    let root = std::fs::canonicalize(sys_root).ok();
    let root = root.as_deref();
    let places: Vec<GpuPlace> = gpus.iter().map(|g| place_of(g, sys_root, root)).collect();
    let matrix = places
        .iter()
        .map(|a| places.iter().map(|b| pair_class(a, b)).collect())
        .collect();
    let mut devices = Vec::new();
    let mut off_pci = 0;
    let mut truncated = false;
    for kind in [DeviceKind::Net, DeviceKind::Infiniband, DeviceKind::Block] {
        let (names, cut) = class_entries(&sys_root.join(kind.class_dir()));
        truncated |= cut;
        for name in names.iter().filter(|n| !is_partition(kind, n, sys_root)) {
            match data_device(kind, name, sys_root, root, &places) {
                Some(d) => devices.push(d),
                None => off_pci += 1,
            }
        }
    }
    Report {
        schema_version: TOPO_SCHEMA_VERSION,
        gpus: places,
        matrix,
        devices,
        off_pci,
        truncated,
        numa: numa_table(sys_root),
    }
}

/// The class between two GPUs: `X` for one with itself (on PCI or not).
pub fn pair_class(a: &GpuPlace, b: &GpuPlace) -> Option<Class> {
    if a.index == b.index {
        return Some(Class::Same);
    }
    Some(class(
        a.pci_path.as_ref()?,
        a.numa_node,
        b.pci_path.as_ref()?,
        b.numa_node,
    ))
}

/// The canonical path of `p` as the kernel names it (`/sys/...`), for a `p` under the
/// sysfs root whose canonical path is `root` (canonicalized once by the caller); `None`
/// when it does not resolve or leaves the root.
pub(super) fn canonical_sys(p: &Path, root: &Path) -> Option<PathBuf> {
    let c = std::fs::canonicalize(p).ok()?;
    Some(Path::new("/sys").join(c.strip_prefix(root).ok()?))
}

fn place_of(g: &Gpu, sys_root: &Path, root: Option<&Path>) -> GpuPlace {
    let dir = g
        .bus_id
        .as_deref()
        .map(|b| sysfs::function_dir(sys_root, b));
    let pci_path = dir
        .as_deref()
        .zip(root)
        .and_then(|(d, root)| canonical_sys(d, root))
        .and_then(PciPath::parse);
    GpuPlace {
        index: g.index,
        name: g.name.clone(),
        driver: g.driver.clone(),
        bus_id: g.bus_id.clone(),
        numa_node: g.numa_node,
        local_cpus: g.local_cpulist.clone().filter(|l| is_cpu_list(l)),
        link: dir.as_deref().and_then(link_of),
        dra: Dra {
            pci_bus_id: g.bus_id.clone(),
            pcie_root: pci_path.as_ref().map(|p| p.host_bridge.clone()),
            numa_node: g.numa_node,
        },
        pci_path,
    }
}

/// Whether `s` reads as a kernel CPU list (`0-3,8,10-11`): digits, commas and hyphens.
pub fn is_cpu_list(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= sysfs::ATTR_MAX
        && s.split(',').all(|r| {
            let mut ends = r.splitn(2, '-');
            ends.all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
}

/// A link speed as the kernel prints it: short printable ASCII, not `Unknown`.
fn speed(dir: &Path, file: &str) -> Option<String> {
    sysfs::attr(&dir.join(file)).filter(|s| {
        !s.is_empty()
            && s.len() <= SPEED_MAX
            && !s.starts_with("Unknown")
            && s.bytes().all(|b| b.is_ascii_graphic() || b == b' ')
    })
}

/// A link width in lanes (0, which the kernel prints for no link, is none).
fn width(dir: &Path, file: &str) -> Option<u32> {
    sysfs::attr(&dir.join(file))?
        .parse()
        .ok()
        .filter(|&w| w > 0)
}

fn link_of(dir: &Path) -> Option<Link> {
    let l = Link {
        current_speed: speed(dir, "current_link_speed"),
        current_width: width(dir, "current_link_width"),
        max_speed: speed(dir, "max_link_speed"),
        max_width: width(dir, "max_link_width"),
    };
    let none = l.current_speed.is_none()
        && l.current_width.is_none()
        && l.max_speed.is_none()
        && l.max_width.is_none();
    (!none).then_some(l)
}

/// The entry names of a class directory, sorted, at most [`CLASS_ENTRIES_MAX`]; whether
/// it held more. A directory that is missing has none.
pub(super) fn class_entries(dir: &Path) -> (Vec<std::ffi::OsString>, bool) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return (Vec::new(), false);
    };
    let mut v = Vec::new();
    let mut cut = false;
    for e in rd.flatten() {
        if v.len() == CLASS_ENTRIES_MAX {
            cut = true;
            break;
        }
        v.push(e.file_name());
    }
    v.sort();
    (v, cut)
}

/// Whether a block class device is a partition (the disk it is on is listed instead).
fn is_partition(kind: DeviceKind, name: &std::ffi::OsStr, sys_root: &Path) -> bool {
    kind == DeviceKind::Block
        && sys_root
            .join(kind.class_dir())
            .join(name)
            .join("partition")
            .exists()
}

fn data_device(
    kind: DeviceKind,
    name: &std::ffi::OsStr,
    sys_root: &Path,
    root: Option<&Path>,
    gpus: &[GpuPlace],
) -> Option<DataDevice> {
    let entry = sys_root.join(kind.class_dir()).join(name);
    let pci_path = PciPath::parse(canonical_sys(&entry, root?)?)?;
    let numa_node = sysfs::numa_node_of(&sysfs::function_dir(sys_root, &pci_path.device));
    let classes = gpus
        .iter()
        .map(|g| {
            Some(class(
                g.pci_path.as_ref()?,
                g.numa_node,
                &pci_path,
                numa_node,
            ))
        })
        .collect();
    use std::os::unix::ffi::OsStrExt;
    Some(DataDevice {
        kind,
        name: Untrusted::new(name.as_bytes()),
        bus_id: pci_path.device.clone(),
        numa_node,
        pci_path,
        classes,
    })
}

/// The NUMA distance table from `devices/system/node/node<N>/distance`.
fn numa_table(sys_root: &Path) -> Option<Vec<NumaRow>> {
    let dir = sys_root.join("devices/system/node");
    let (names, _) = class_entries(&dir);
    let mut nodes: Vec<u32> = names
        .iter()
        .filter_map(|n| n.to_str()?.strip_prefix("node")?.parse().ok())
        .collect();
    nodes.sort_unstable();
    if nodes.is_empty() {
        return None;
    }
    let texts: Vec<(u32, String)> = nodes
        .iter()
        .map(|&n| {
            let t = sysfs::attr(&dir.join(format!("node{n}/distance")));
            t.map(|t| (n, t))
        })
        .collect::<Option<_>>()?;
    let rows: Vec<(u32, &str)> = texts.iter().map(|(n, t)| (*n, t.as_str())).collect();
    Some(
        super::numa_distances(&rows)?
            .into_iter()
            .map(|(node, distances)| NumaRow { node, distances })
            .collect(),
    )
}

/// A class cell: its label, `-` for none.
fn cell(c: Option<Class>) -> String {
    c.map_or_else(|| "-".to_string(), |c| c.label().to_string())
}

/// A PCI path as sysfs spells it: `pci0000:00/0000:00:01.0/0000:01:00.0`.
pub fn path_text(p: &PciPath) -> String {
    let mut s = p.host_bridge.clone();
    for b in p.bridges.iter().chain([&p.device]) {
        s.push('/');
        s.push_str(b);
    }
    s
}

fn link_text(l: &Link) -> String {
    let one = |s: &Option<String>, w: Option<u32>| match (s, w) {
        (Some(s), Some(w)) => format!("{s} x{w}"),
        (Some(s), None) => s.clone(),
        (None, Some(w)) => format!("x{w}"),
        (None, None) => "?".into(),
    };
    format!(
        "{} (max {})",
        one(&l.current_speed, l.current_width),
        one(&l.max_speed, l.max_width)
    )
}

/// The report as text: the GPUs, the matrix, the devices near them, the legend, the NUMA
/// table.
pub fn render(r: &Report) -> String {
    let opt = |o: Option<String>| o.unwrap_or_else(|| "-".into());
    let mut rows = vec![
        ["GPU", "NAME", "DRIVER", "NUMA", "CPUS", "LINK", "PCIe PATH"]
            .map(String::from)
            .to_vec(),
    ];
    for g in &r.gpus {
        rows.push(vec![
            g.index.to_string(),
            g.name.clone(),
            opt(g.driver.clone()),
            opt(g.numa_node.map(|n| n.to_string())),
            opt(g.local_cpus.clone()),
            opt(g.link.as_ref().map(link_text)),
            g.pci_path
                .as_ref()
                .map_or_else(|| "none (a platform device: not on PCI)".into(), path_text),
        ]);
    }
    let mut out = crate::render::align(&rows).join("\n");
    out.push_str("\n\n");
    let mut m = vec![
        std::iter::once(String::new())
            .chain(r.gpus.iter().map(|g| format!("GPU{}", g.index)))
            .collect::<Vec<_>>(),
    ];
    for (g, row) in r.gpus.iter().zip(&r.matrix) {
        m.push(
            std::iter::once(format!("GPU{}", g.index))
                .chain(row.iter().map(|&c| cell(c)))
                .collect(),
        );
    }
    out.push_str(&crate::render::align(&m).join("\n"));
    out.push('\n');
    if !r.devices.is_empty() {
        let mut d = vec![
            ["DEVICE", "KIND", "BUS ID", "NUMA"]
                .map(String::from)
                .into_iter()
                .chain(r.gpus.iter().map(|g| format!("GPU{}", g.index)))
                .collect::<Vec<_>>(),
        ];
        for dev in &r.devices {
            d.push(
                [
                    dev.name.escaped(),
                    dev.kind.label().into(),
                    dev.bus_id.clone(),
                    opt(dev.numa_node.map(|n| n.to_string())),
                ]
                .into_iter()
                .chain(dev.classes.iter().map(|&c| cell(c)))
                .collect(),
            );
        }
        out.push('\n');
        out.push_str(&crate::render::align(&d).join("\n"));
        out.push('\n');
    }
    out.push_str(&format!(
        "({} class device(s) not on PCI left out{})\n\nLegend:\n",
        r.off_pci,
        if r.truncated {
            "; a class directory was cut at its bound"
        } else {
            ""
        }
    ));
    for c in Class::ALL {
        out.push_str(&format!("  {:<4}  {}\n", c.label(), c.legend()));
    }
    out.push_str("  -     no class: a device not on PCI\n");
    out.push_str(&numa_text(r.numa.as_deref()));
    out
}

fn numa_text(numa: Option<&[NumaRow]>) -> String {
    let Some(rows) = numa else {
        return "\nNUMA: no node table (a kernel without NUMA)\n".into();
    };
    let mut t = vec![
        std::iter::once("NODE".to_string())
            .chain(rows.iter().map(|r| r.node.to_string()))
            .collect::<Vec<_>>(),
    ];
    for r in rows {
        t.push(
            std::iter::once(r.node.to_string())
                .chain(r.distances.iter().map(u32::to_string))
                .collect(),
        );
    }
    format!(
        "\nNUMA distances:\n{}\n",
        crate::render::align(&t).join("\n")
    )
}
