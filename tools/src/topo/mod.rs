//! Where a device sits on the PCIe tree, and the class of the path between two devices;
//! `drmtool topo`'s report of the machine ([`report`]).
//!
//! A PCI device's canonical sysfs path (`/sys/bus/pci/devices/<bdf>` resolved) is its way
//! down from the host bridge: `/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/
//! 0000:02:01.0/0000:03:00.0` is host bridge `pci0000:00`, root port `0000:00:01.0`, a
//! switch's upstream port `0000:01:00.0` and downstream port `0000:02:01.0`, and the
//! device `0000:03:00.0` ([`PciPath`]). Two devices' path is classed as `nvidia-smi topo
//! -m` classes it, for any vendor ([`Class`]), from the bridges they share:
//!
//! | class | the path between the two |
//! |---|---|
//! | `X` | one device |
//! | `PIX` | through one switch: their deepest common bridge is at most one bridge above each |
//! | `PXB` | through several bridges below one root port, never the host bridge |
//! | `PHB` | through the host bridge: different root ports of one host bridge |
//! | `NODE` | between host bridges of one NUMA node (or a machine without NUMA) |
//! | `SYS` | between NUMA nodes |
//!
//! A platform device (vkms, vgem: no PCI path) has no class with anything: it is shown as
//! such, never guessed.
//!
//! ```
//! use drmtool::topo::{class, Class, PciPath};
//! let a = PciPath::parse("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:03:00.0").unwrap();
//! let b = PciPath::parse("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:02.0/0000:04:00.0").unwrap();
//! assert_eq!(class(&a, None, &b, None), Class::Pix);
//! assert_eq!(Class::Pix.to_string(), "PIX");
//! ```

pub mod near;
pub mod report;

pub use report::{Report, read_report};

use crate::sysfs::is_bus_id;

/// The class of the path between two devices (see the [module](self) docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum Class {
    /// The same device.
    #[serde(rename = "X")]
    Same,
    /// Through at most one switch.
    #[serde(rename = "PIX")]
    Pix,
    /// Through several bridges, below one root port.
    #[serde(rename = "PXB")]
    Pxb,
    /// Through the host bridge.
    #[serde(rename = "PHB")]
    Phb,
    /// Between host bridges of one NUMA node.
    #[serde(rename = "NODE")]
    Node,
    /// Between NUMA nodes.
    #[serde(rename = "SYS")]
    Sys,
}

impl Class {
    /// Every class, nearest first.
    pub const ALL: [Class; 6] = [
        Class::Same,
        Class::Pix,
        Class::Pxb,
        Class::Phb,
        Class::Node,
        Class::Sys,
    ];

    /// Its label (`PIX`).
    pub fn label(self) -> &'static str {
        match self {
            Class::Same => "X",
            Class::Pix => "PIX",
            Class::Pxb => "PXB",
            Class::Phb => "PHB",
            Class::Node => "NODE",
            Class::Sys => "SYS",
        }
    }

    /// Its line of the legend.
    pub fn legend(self) -> &'static str {
        match self {
            Class::Same => "the same device",
            Class::Pix => "through at most one PCIe switch",
            Class::Pxb => "through several PCIe bridges, not the host bridge",
            Class::Phb => "through the PCIe host bridge (different root ports)",
            Class::Node => "between host bridges of one NUMA node",
            Class::Sys => "between NUMA nodes (the SMP interconnect)",
        }
    }
}

impl std::fmt::Display for Class {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// A PCI device's way down from its host bridge.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PciPath {
    /// The host bridge (`pci0000:00`).
    pub host_bridge: String,
    /// The bridges from the root port down, bus ids (`0000:00:01.0`, ...).
    pub bridges: Vec<String>,
    /// The device's bus id.
    pub device: String,
}

impl PciPath {
    /// From a canonical sysfs device path; `None` for a path that is not a PCI device's
    /// under a host bridge (a platform or virtual device).
    pub fn parse(path: impl AsRef<std::path::Path>) -> Option<PciPath> {
        let text = path.as_ref().to_str()?;
        let rest = text.strip_prefix("/sys/devices/")?;
        let mut parts = rest.split('/').filter(|p| !p.is_empty());
        let host = parts.next()?;
        let hb = host.strip_prefix("pci")?;
        if hb.len() != 7 || hb.as_bytes()[4] != b':' {
            return None;
        }
        let chain: Vec<&str> = parts.collect();
        // Past the device's own directory a path may go on into its children (drm/card0):
        // the chain ends at the last bus id.
        let last = chain.iter().rposition(|p| is_bus_id(p))?;
        if !chain[..=last].iter().all(|p| is_bus_id(p)) {
            return None;
        }
        Some(PciPath {
            host_bridge: host.to_string(),
            bridges: chain[..last].iter().map(|s| s.to_string()).collect(),
            device: chain[last].to_string(),
        })
    }
}

/// The class of the path between `a` and `b` (on NUMA nodes `a_numa`, `b_numa`: `None`
/// where the kernel reports none, as on a machine without NUMA).
pub fn class(a: &PciPath, a_numa: Option<u32>, b: &PciPath, b_numa: Option<u32>) -> Class {
    if a == b {
        return Class::Same;
    }
    if a.host_bridge != b.host_bridge {
        return match (a_numa, b_numa) {
            (Some(x), Some(y)) if x != y => Class::Sys,
            _ => Class::Node,
        };
    }
    // The chains with the device itself last: one may lie on the other's way.
    let ca: Vec<&str> = a
        .bridges
        .iter()
        .map(String::as_str)
        .chain([a.device.as_str()])
        .collect();
    let cb: Vec<&str> = b
        .bridges
        .iter()
        .map(String::as_str)
        .chain([b.device.as_str()])
        .collect();
    let common = ca.iter().zip(&cb).take_while(|(x, y)| x == y).count();
    if common == 0 {
        return Class::Phb;
    }
    // Bridges strictly between the deepest common one and each device.
    let below = |c: &[&str]| c.len().saturating_sub(common + 1);
    if below(&ca) <= 1 && below(&cb) <= 1 {
        Class::Pix
    } else {
        Class::Pxb
    }
}

/// A class as a count for Slurm's gres.conf `Links=` (which prefers GPUs with more links
/// between them): `-1` for the GPU itself, then 4 (PIX), 3 (PXB), 2 (PHB), 1 (NODE) and 0
/// (SYS). Not physical links (PCIe has none to count): a nearness Slurm can rank by.
pub fn slurm_links(c: Class) -> i32 {
    match c {
        Class::Same => -1,
        Class::Pix => 4,
        Class::Pxb => 3,
        Class::Phb => 2,
        Class::Node => 1,
        Class::Sys => 0,
    }
}

/// The kernel's NUMA distance table (`/sys/devices/system/node/node<N>/distance`, one
/// row per node, in node order): `(node, row)` pairs, rows checked to be square. `None`
/// for text that is not numbers or rows of unequal length.
pub fn numa_distances(rows: &[(u32, &str)]) -> Option<Vec<(u32, Vec<u32>)>> {
    let mut out = Vec::with_capacity(rows.len());
    for &(node, text) in rows {
        let row: Vec<u32> = text
            .split_ascii_whitespace()
            .map(|d| d.parse().ok())
            .collect::<Option<_>>()?;
        if row.len() != rows.len() {
            return None;
        }
        out.push((node, row));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PciPath {
        PciPath::parse(s).unwrap_or_else(|| panic!("{s}"))
    }

    const HB: &str = "/sys/devices/pci0000:00";

    #[test]
    fn paths_parse_down_to_the_device() {
        let a = p(&format!("{HB}/0000:00:01.0/0000:01:00.0/drm/card0"));
        assert_eq!(a.host_bridge, "pci0000:00");
        assert_eq!(a.bridges, ["0000:00:01.0"]);
        assert_eq!(a.device, "0000:01:00.0");
        let root = p(&format!("{HB}/0000:00:02.0"));
        assert!(root.bridges.is_empty());
        for bad in [
            "/sys/devices/platform/vkms",
            "/sys/devices/virtual/drm/card1",
            "/sys/devices/pci0000:00",
            "/sys/devices/pci0000:00/not-a-bdf/0000:01:00.0",
            "/sys/devices/pcifoo/0000:00:01.0",
            "relative/pci0000:00/0000:00:01.0",
        ] {
            assert_eq!(PciPath::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn classes_of_a_switch_a_deeper_tree_root_ports_and_nodes() {
        // Root port 01.0 -> switch (up 01:00.0; down 02:01.0, 02:02.0, 02:03.0); behind
        // 02:03.0 a second switch (up 05:00.0, down 06:01.0).
        let sw = format!("{HB}/0000:00:01.0/0000:01:00.0");
        let g0 = p(&format!("{sw}/0000:02:01.0/0000:03:00.0"));
        let g1 = p(&format!("{sw}/0000:02:02.0/0000:04:00.0"));
        let g2 = p(&format!(
            "{sw}/0000:02:03.0/0000:05:00.0/0000:06:01.0/0000:07:00.0"
        ));
        let g3 = p(&format!("{HB}/0000:00:02.0/0000:08:00.0"));
        let g4 = p("/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0");
        assert_eq!(class(&g0, Some(0), &g0, Some(0)), Class::Same);
        assert_eq!(class(&g0, Some(0), &g1, Some(0)), Class::Pix);
        assert_eq!(class(&g0, Some(0), &g2, Some(0)), Class::Pxb);
        assert_eq!(class(&g0, Some(0), &g3, Some(0)), Class::Phb);
        assert_eq!(class(&g0, Some(0), &g4, Some(0)), Class::Node);
        assert_eq!(class(&g0, Some(0), &g4, Some(1)), Class::Sys);
        assert_eq!(
            class(&g0, None, &g4, None),
            Class::Node,
            "no NUMA: one node"
        );
        assert_eq!(class(&g0, Some(0), &g4, None), Class::Node);
        // Symmetric.
        for (x, y) in [(&g0, &g2), (&g1, &g3), (&g2, &g4)] {
            assert_eq!(class(x, Some(0), y, Some(1)), class(y, Some(1), x, Some(0)));
        }
    }

    #[test]
    fn a_device_on_the_others_way_and_a_bare_root_port() {
        // A device directly below a root port, and one on a function of the port's bus.
        let a = p(&format!("{HB}/0000:00:01.0/0000:01:00.0"));
        let b = p(&format!("{HB}/0000:00:01.0/0000:01:00.1"));
        assert_eq!(class(&a, None, &b, None), Class::Pix);
        // Two root-complex integrated devices: different "root ports" of the host bridge.
        let c = p(&format!("{HB}/0000:00:02.0"));
        let d = p(&format!("{HB}/0000:00:03.0"));
        assert_eq!(class(&c, None, &d, None), Class::Phb);
    }

    #[test]
    fn slurm_links_rank_nearer_higher() {
        let links: Vec<i32> = Class::ALL.iter().map(|&c| slurm_links(c)).collect();
        assert_eq!(links, [-1, 4, 3, 2, 1, 0]);
    }

    #[test]
    fn numa_distance_tables() {
        let t = numa_distances(&[(0, "10 21\n"), (1, "21 10\n")]).unwrap();
        assert_eq!(t, vec![(0, vec![10, 21]), (1, vec![21, 10])]);
        assert_eq!(numa_distances(&[(0, "10 21"), (1, "21")]), None);
        assert_eq!(numa_distances(&[(0, "10 x")]), None);
        assert_eq!(numa_distances(&[(0, "10")]), Some(vec![(0, vec![10])]));
    }

    #[test]
    fn labels_and_legend() {
        let labels: Vec<&str> = Class::ALL.iter().map(|c| c.label()).collect();
        assert_eq!(labels, ["X", "PIX", "PXB", "PHB", "NODE", "SYS"]);
        assert!(Class::ALL.iter().all(|c| !c.legend().is_empty()));
        assert_eq!(serde_json::to_value(Class::Node).unwrap(), "NODE");
        assert!(Class::Pix < Class::Sys, "nearer classes order first");
    }
}
