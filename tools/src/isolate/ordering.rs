//! The one stable ordering of GPUs that every command uses: DRM devices (a card node and
//! its render node, grouped by their sysfs device) sorted by PCI bus id, then the devices
//! that are not on PCI (vkms, vgem: platform devices) by name. An index in this list is
//! what `drmtool run --gpu 1` means; every command prints the bus id beside it.
//!
//! A device's bus id is the PCI function its sysfs device sits under: its own for a PCI
//! GPU, the transport's for virtio-gpu (`.../0000:00:04.0/virtio2`).

use drm_gem::{NodeInfo, NodeKind};
use serde::Serialize;
use std::path::{Path, PathBuf};

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

/// One DRM device: its nodes and where it sits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Gpu {
    /// Position in the ordering (0-based).
    pub index: usize,
    /// PCI bus id (`0000:00:04.0`) of the device or of the PCI function it sits under.
    pub bus_id: Option<String>,
    /// The sysfs device's name (`0000:00:02.0`, `virtio2`, `vkms`, `vgem`).
    pub name: String,
    /// DRM driver name.
    pub driver: Option<String>,
    /// PCI vendor and device id of the PCI function (`bus_id`'s).
    pub pci_id: Option<(u16, u16)>,
    /// Its nodes: the card node first.
    pub nodes: Vec<Node>,
    /// NUMA node of the PCI function (`numa_node`; `None` where the kernel says -1 or has
    /// no such file).
    pub numa_node: Option<u32>,
    /// CPUs local to it (`local_cpulist`, as the kernel prints it).
    pub local_cpulist: Option<String>,
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
}

/// Whether `s` is a PCI bus id with its domain (`0000:00:04.0`).
pub fn is_bus_id(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && (b'0'..=b'7').contains(&b[11])
        && b.iter()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10 | 11) || c.is_ascii_hexdigit())
}

/// The nearest PCI function above (or at) a canonical sysfs device path.
pub fn bus_id_of(device: &Path) -> Option<String> {
    device
        .components()
        .rev()
        .filter_map(|c| c.as_os_str().to_str())
        .find(|c| is_bus_id(c))
        .map(|c| c.to_ascii_lowercase())
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

/// At most this many bytes of a sysfs attribute.
const ATTR_MAX: u64 = 4096;

fn attr(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut s = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(ATTR_MAX)
        .read_to_string(&mut s)
        .ok()?;
    Some(s.trim().to_string())
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

/// The machine's GPUs in the ordering, from the nodes `drm_gem::enumerate` found and sysfs.
pub fn gpus() -> Result<Vec<Gpu>, drm_gem::NoNodes> {
    Ok(group(drm_gem::enumerate()?, Path::new("/dev/dri")))
}

/// Groups nodes by their sysfs device (canonical `<node>/device`) and orders them.
pub fn group(nodes: Vec<NodeInfo>, dri: &Path) -> Vec<Gpu> {
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
        let pci = bus_id
            .as_ref()
            .map(|b| PathBuf::from(format!("/sys/bus/pci/devices/{b}")));
        let numa_node = pci
            .as_ref()
            .and_then(|p| attr(&p.join("numa_node")))
            .and_then(|s| s.parse::<i64>().ok())
            .and_then(|v| u32::try_from(v).ok());
        let local_cpulist = pci.as_ref().and_then(|p| attr(&p.join("local_cpulist")));
        let hex = |f: &str| {
            pci.as_ref()
                .and_then(|p| attr(&p.join(f)))
                .and_then(|s| u16::from_str_radix(s.trim_start_matches("0x"), 16).ok())
        };
        // The PCI function's ids (virtio-gpu's transport: 1af4:1050) where the node's
        // parent is not the PCI device itself.
        let pci_id = n.pci_id.or_else(|| hex("vendor").zip(hex("device")));
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
                pci_id,
                nodes: vec![node],
                numa_node,
                local_cpulist,
            },
        ));
    }
    order(gpus.into_iter().map(|(_, g)| g).collect())
}

/// One `--gpu` selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// An index in the ordering.
    Index(usize),
    /// A PCI bus id (the domain may be left out: `00:04.0`).
    BusId(String),
    /// A node path (`/dev/dri/renderD129`, a `by-path` path).
    Path(PathBuf),
    /// A `/dev/dri/by-path` name (`pci-0000:00:04.0-render`).
    ByPath(String),
    /// Every device of this DRM driver (`vgem`).
    Driver(String),
}

impl Selector {
    /// Reads one selector.
    pub fn parse(s: &str) -> Result<Selector, String> {
        let s = s.trim();
        if s.is_empty() {
            return Err("an empty GPU selector".into());
        }
        if s.bytes().all(|b| b.is_ascii_digit()) {
            return s
                .parse()
                .map(Selector::Index)
                .map_err(|_| format!("GPU index {s} is out of range"));
        }
        let full = if s.len() == 7 {
            format!("0000:{s}")
        } else {
            s.to_string()
        };
        if is_bus_id(&full) {
            return Ok(Selector::BusId(full.to_ascii_lowercase()));
        }
        if s.starts_with('/') {
            return Ok(Selector::Path(PathBuf::from(s)));
        }
        if s.starts_with("pci-") || s.starts_with("platform-") {
            return Ok(Selector::ByPath(s.to_string()));
        }
        if s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Ok(Selector::Driver(s.to_string()));
        }
        Err(format!(
            "GPU selector {s:?}: use an index, a PCI bus id, a node path, a by-path name or a \
             driver name"
        ))
    }

    /// The GPUs it names (in the ordering).
    fn pick<'g>(&self, gpus: &'g [Gpu]) -> Vec<&'g Gpu> {
        match self {
            Selector::Index(i) => gpus.get(*i).into_iter().collect(),
            Selector::BusId(b) => gpus
                .iter()
                .filter(|g| g.bus_id.as_ref() == Some(b))
                .collect(),
            Selector::Driver(d) => gpus
                .iter()
                .filter(|g| g.driver.as_deref() == Some(d.as_str()))
                .collect(),
            Selector::ByPath(name) => gpus
                .iter()
                .filter(|g| {
                    g.nodes
                        .iter()
                        .any(|n| n.by_path.as_deref() == Some(name.as_str()))
                })
                .collect(),
            Selector::Path(p) => {
                // A by-path link or another name of the node: compare what it points at.
                let target = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
                let rdev = rustix::fs::stat(&target)
                    .ok()
                    .map(|st| (rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev)));
                gpus.iter()
                    .filter(|g| {
                        g.nodes
                            .iter()
                            .any(|n| n.path == target || Some(n.dev) == rdev)
                    })
                    .collect()
            }
        }
    }
}

/// The GPUs the selectors name, in selector order, each once; an error that lists the
/// machine's GPUs when one selector names none.
pub fn select<'g>(sels: &[Selector], gpus: &'g [Gpu]) -> Result<Vec<&'g Gpu>, String> {
    let mut out: Vec<&Gpu> = Vec::new();
    for s in sels {
        let found = s.pick(gpus);
        if found.is_empty() {
            return Err(format!(
                "no GPU matches {s:?}; the GPUs here: {}",
                summary(gpus)
            ));
        }
        for g in found {
            if !out.iter().any(|o| o.index == g.index) {
                out.push(g);
            }
        }
    }
    Ok(out)
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
                g.bus_id.as_deref().unwrap_or(&g.name),
                g.driver.as_deref().unwrap_or("?")
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(bus: Option<&str>, name: &str, driver: &str, minor: u32) -> Gpu {
        Gpu {
            index: 99,
            bus_id: bus.map(str::to_string),
            name: name.into(),
            driver: Some(driver.into()),
            pci_id: None,
            nodes: vec![
                Node {
                    path: format!("/dev/dri/renderD{}", 128 + minor).into(),
                    kind: NodeKind::Render,
                    dev: (226, 128 + minor),
                    by_path: bus.map(|b| format!("pci-{b}-render")),
                },
                Node {
                    path: format!("/dev/dri/card{minor}").into(),
                    kind: NodeKind::Primary,
                    dev: (226, minor),
                    by_path: bus.map(|b| format!("pci-{b}-card")),
                },
            ],
            numa_node: None,
            local_cpulist: None,
        }
    }

    #[test]
    fn pci_first_by_bus_id_then_platform_by_name() {
        let g = order(vec![
            gpu(None, "vkms", "vkms", 0),
            gpu(Some("0000:00:05.0"), "virtio3", "virtio_gpu", 1),
            gpu(None, "vgem", "vgem", 2),
            gpu(Some("0000:00:02.0"), "0000:00:02.0", "bochs-drm", 3),
        ]);
        let names: Vec<(usize, &str)> = g.iter().map(|g| (g.index, g.name.as_str())).collect();
        assert_eq!(
            names,
            [
                (0, "0000:00:02.0"),
                (1, "virtio3"),
                (2, "vgem"),
                (3, "vkms")
            ]
        );
        assert_eq!(g[0].nodes[0].kind, NodeKind::Primary, "the card node first");
    }

    #[test]
    fn bus_ids_are_found_above_the_device() {
        assert_eq!(
            bus_id_of(Path::new("/sys/devices/pci0000:00/0000:00:04.0/virtio2")).as_deref(),
            Some("0000:00:04.0")
        );
        assert_eq!(bus_id_of(Path::new("/sys/devices/platform/vkms")), None);
        assert!(is_bus_id("0000:03:00.1"));
        assert!(!is_bus_id("0000:03:00.8"));
        assert!(!is_bus_id("pci0000:00"));
    }

    #[test]
    fn selectors() {
        assert_eq!(Selector::parse("1"), Ok(Selector::Index(1)));
        assert_eq!(
            Selector::parse("00:04.0"),
            Ok(Selector::BusId("0000:00:04.0".into()))
        );
        assert_eq!(
            Selector::parse("0000:00:04.0"),
            Ok(Selector::BusId("0000:00:04.0".into()))
        );
        assert_eq!(
            Selector::parse("/dev/dri/card1"),
            Ok(Selector::Path("/dev/dri/card1".into()))
        );
        assert_eq!(
            Selector::parse("pci-0000:00:04.0-render"),
            Ok(Selector::ByPath("pci-0000:00:04.0-render".into()))
        );
        assert_eq!(Selector::parse("vgem"), Ok(Selector::Driver("vgem".into())));
        assert!(Selector::parse("").is_err());
        assert!(Selector::parse("a b").is_err());
        assert!(Selector::parse("99999999999999999999999").is_err());
        let g = order(vec![
            gpu(None, "vkms", "vkms", 0),
            gpu(Some("0000:00:05.0"), "virtio3", "virtio_gpu", 1),
        ]);
        let pick = |s: &str| {
            select(&[Selector::parse(s).unwrap()], &g)
                .map(|v| v.iter().map(|g| g.index).collect::<Vec<_>>())
        };
        assert_eq!(pick("1"), Ok(vec![1]));
        assert_eq!(pick("vkms"), Ok(vec![1]));
        assert_eq!(pick("00:05.0"), Ok(vec![0]));
        assert_eq!(pick("pci-0000:00:05.0-card"), Ok(vec![0]));
        assert_eq!(pick("/dev/dri/renderD128"), Ok(vec![1]));
        let e = pick("7").unwrap_err();
        assert!(e.contains("0 0000:00:05.0 virtio_gpu, 1 vkms vkms"), "{e}");
        // Each GPU once, in selector order.
        let both = select(
            &[
                Selector::parse("1").unwrap(),
                Selector::parse("0").unwrap(),
                Selector::parse("vkms").unwrap(),
            ],
            &g,
        )
        .unwrap();
        assert_eq!(both.iter().map(|g| g.index).collect::<Vec<_>>(), [1, 0]);
    }
}
