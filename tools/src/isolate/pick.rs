//! `drmtool pick`: ranks the GPUs by what the buffers model knows of their use and what the
//! leases say, and chooses the least used.
//!
//! Rank, best first: not excluded; with `--near`, the nearest class to that place
//! ([`crate::place::cost`], which ranks by the same figures); fewest lease holders; fewest
//! clients (open DRM files); least memory held (fdinfo `drm-total-*` summed over the
//! device's clients, else the bytes its buffers are mapped, else unknown: unknown ranks
//! after every known figure, never as zero); then the ordering's index. Excluded, with the reason: another driver than
//! `--driver`, more clients than `--max-clients`, free memory below `--min-free` or unknown
//! (generic DRM has no free-memory query; amdgpu's sysfs `mem_info_vram_{total,used}` is read
//! where present, else the dmem cgroup controller's region capacity minus the cgroups'
//! charges where the driver registers a region: [`free_of`]). A GPU without a DRM node (NVIDIA without nvidia-drm, an accelerator) has
//! no DRM client and no fdinfo: its clients and memory are unknown, and say why.

use crate::gpu::Gpu;
use crate::scan::Report;
use serde::Serialize;
use std::collections::BTreeMap;

/// What the caller wants.
#[derive(Debug, Clone, Default)]
pub struct Want {
    /// Only GPUs of this driver.
    pub driver: Option<String>,
    /// At most this many clients.
    pub max_clients: Option<usize>,
    /// At least this many free bytes (a GPU whose free memory is unknown is excluded).
    pub min_free: Option<u64>,
    /// Near this place (`--near`): the class to it ranks first
    /// ([`crate::place::cost`]), and a set of several GPUs is searched for nearness.
    pub near: Option<crate::topo::near::Near>,
}

/// A figure with where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Known {
    /// The value, `None` when no source has it.
    pub value: Option<u64>,
    /// `fdinfo`, `maps`, `sysfs-amdgpu`, or why it is unknown.
    pub source: String,
}

/// One GPU as ranked.
#[derive(Debug, Clone, Serialize)]
pub struct Candidate {
    /// Its index in the ordering.
    pub index: usize,
    /// PCI bus id, else the device's name (a platform device).
    pub name: String,
    /// Its driver.
    pub driver: Option<String>,
    /// Distinct open DRM files on it (`None` when unknown: the scan could not run, or the
    /// GPU has no DRM node).
    pub clients: Option<usize>,
    /// Memory its clients hold.
    pub memory: Known,
    /// Free memory.
    pub free: Known,
    /// Lease holders now.
    pub leases: usize,
    /// Why it cannot be chosen.
    pub excluded: Option<String>,
    /// Its class to the `--near` place (`None`: no `--near`, or no class: not on PCI).
    pub class: Option<crate::topo::Class>,
    /// Its cost ([`crate::place::cost`]): lower ranks first.
    pub cost: u64,
}

/// Why a GPU without a DRM node has no client or memory figure.
pub const NO_DRM_NODE: &str = "unknown: the GPU has no DRM node, so no DRM client or fdinfo \
                               shows its use (NVIDIA: nvidia-smi or another NVML tool)";

/// What the report says about one GPU: clients and memory held.
fn usage(g: &Gpu, r: Option<&Report>) -> (Option<usize>, Known) {
    let unknown = |why: &str| {
        (
            None,
            Known {
                value: None,
                source: why.into(),
            },
        )
    };
    if g.nodes.is_empty() {
        return unknown(NO_DRM_NODE);
    }
    let Some(r) = r else {
        return unknown("the scan could not run");
    };
    let devs: Vec<_> = r
        .devices
        .iter()
        .filter(|d| {
            d.nodes.iter().any(|n| {
                g.nodes
                    .iter()
                    .any(|m| m.path.as_os_str() == n.path.as_str())
            })
        })
        .collect();
    let clients = devs.iter().map(|d| d.clients).sum();
    let sum = |f: &dyn Fn(&crate::scan::DeviceReport) -> Option<u64>| -> Option<u64> {
        let v: Vec<u64> = devs.iter().filter_map(|d| f(d)).collect();
        (!v.is_empty()).then(|| v.iter().fold(0u64, |a, b| a.saturating_add(*b)))
    };
    let memory = if devs.is_empty() {
        // No client has it open: nothing is held (the scan saw every process it could).
        Known {
            value: Some(0),
            source: "no clients".into(),
        }
    } else if let Some(v) = sum(&|d| d.memory_total.value) {
        Known {
            value: Some(v),
            source: "fdinfo".into(),
        }
    } else if let Some(v) = sum(&|d| d.mapped.value) {
        Known {
            value: Some(v),
            source: "maps".into(),
        }
    } else {
        Known {
            value: None,
            source: "unknown: the driver prints no drm-total-* and no buffer is mapped".into(),
        }
    };
    (Some(clients), memory)
}

/// Ranks `gpus` (the candidates) for `want`; `held` is the number of lease holders per GPU
/// index, `free` each GPU's free memory, `class` each GPU's class to `want.near` (unused
/// without it).
pub fn rank(
    gpus: &[&Gpu],
    report: Option<&Report>,
    held: &BTreeMap<usize, usize>,
    free: &dyn Fn(&Gpu) -> Known,
    class: &dyn Fn(&Gpu) -> Option<crate::topo::Class>,
    want: &Want,
) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = gpus
        .iter()
        .map(|g| {
            let (clients, memory) = usage(g, report);
            let free = free(g);
            let excluded = if let Some(d) = &want.driver
                && !g
                    .driver
                    .as_deref()
                    .is_some_and(|x| crate::gpu::driver_matches(x, d))
            {
                Some(format!(
                    "driver {} is not {d}",
                    g.driver.as_deref().unwrap_or("unknown")
                ))
            } else if let Some(k) = want.max_clients
                && clients.is_none_or(|c| c > k)
            {
                Some(match clients {
                    Some(c) => format!("{c} clients > --max-clients {k}"),
                    None if g.nodes.is_empty() => {
                        "clients unknown (the GPU has no DRM node)".into()
                    }
                    None => "clients unknown (the scan could not run)".into(),
                })
            } else if let Some(m) = want.min_free {
                match free.value {
                    Some(f) if f >= m => None,
                    Some(f) => Some(format!("{f} bytes free < --min-free {m}")),
                    None => Some(format!("free memory unknown ({})", free.source)),
                }
            } else {
                None
            };
            let leases = held.get(&g.index).copied().unwrap_or(0);
            let near = want.near.is_some();
            let class = if near { class(g) } else { None };
            let cost = crate::place::cost::cost(&crate::place::cost::Terms {
                class,
                near,
                leases,
                clients,
                memory: memory.value,
            });
            Candidate {
                index: g.index,
                name: g.bus_id.clone().unwrap_or_else(|| g.name.clone()),
                driver: g.driver.clone(),
                clients,
                memory,
                free,
                leases,
                excluded,
                class,
                cost,
            }
        })
        .collect();
    out.sort_by_key(|c| {
        (
            c.excluded.is_some(),
            c.cost,
            c.leases,
            c.clients.unwrap_or(usize::MAX),
            c.memory.value.map_or((1, 0), |v| (0, v)),
            c.index,
        )
    });
    out
}

/// Free VRAM from amdgpu's sysfs (`<device>/mem_info_vram_total` minus `..._used`), the
/// one driver that publishes it; unknown elsewhere.
pub fn sysfs_free(g: &Gpu) -> Known {
    let dev = g.nodes.first().and_then(|n| n.path.file_name()).map(|f| {
        std::path::Path::new("/sys/class/drm")
            .join(f)
            .join("device")
    });
    let read = |name: &str| -> Option<u64> {
        let d = dev.as_ref()?;
        let t = std::fs::read_to_string(d.join(name)).ok()?;
        t.trim().parse().ok()
    };
    match (read("mem_info_vram_total"), read("mem_info_vram_used")) {
        (Some(t), Some(u)) => Known {
            value: Some(t.saturating_sub(u)),
            source: "sysfs-amdgpu".into(),
        },
        _ => Known {
            value: None,
            source: "no source: DRM has no free-memory query and the driver publishes none".into(),
        },
    }
}

/// Free memory as [`sysfs_free`] finds it (amdgpu), else from the dmem cgroup controller:
/// the capacity of the GPU's regions minus what the cgroups right below the root have
/// charged to them (their charges include their descendants'; allocations by processes in
/// the root cgroup itself are charged nowhere a file shows, so they are not subtracted),
/// else unknown.
pub fn free_of(g: &Gpu, dmem: Option<&crate::scan::DmemReport>) -> Known {
    let sysfs = sysfs_free(g);
    if sysfs.value.is_some() {
        return sysfs;
    }
    let Some(d) = dmem else { return sysfs };
    let regions: Vec<&crate::scan::DmemRegion> = d
        .regions
        .iter()
        .filter(|r| r.device.as_deref() == Some(g.name.as_str()))
        .collect();
    if regions.is_empty() {
        return sysfs;
    }
    let capacity: u64 = regions.iter().map(|r| r.capacity).sum();
    let charged: u64 = d
        .charges
        .iter()
        .filter(|c| c.cgroup.matches('/').count() == 1)
        .filter(|c| regions.iter().any(|r| r.region == c.region))
        .map(|c| c.current)
        .sum();
    Known {
        value: Some(capacity.saturating_sub(charged)),
        source: "dmem: region capacity minus the charges of the root's child cgroups".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_memory_from_dmem_is_capacity_minus_the_top_level_charges() {
        use crate::dmem::Charge;
        use crate::scan::{DmemRegion, DmemReport};
        let g = Gpu {
            index: 0,
            bus_id: Some("0000:00:05.0".into()),
            name: "0000:00:05.0".into(),
            driver: Some("qxl".into()),
            pci_id: None,
            nodes: Vec::new(),
            vendor_nodes: Vec::new(),
            numa_node: None,
            local_cpulist: None,
        };
        let charge = |cg: &str, cur| Charge {
            cgroup: cg.into(),
            region: "drm/0000:00:05.0/vram0".into(),
            current: cur,
            max: None,
        };
        let d = DmemReport {
            regions: vec![DmemRegion {
                region: "drm/0000:00:05.0/vram0".into(),
                device: Some("0000:00:05.0".into()),
                capacity: 64 << 20,
            }],
            charges: vec![
                charge("/drmtool.slice", 10 << 20),
                charge("/drmtool.slice/run-1-1-0", 10 << 20),
                charge("/user.slice", 6 << 20),
            ],
        };
        let f = free_of(&g, Some(&d));
        assert_eq!(f.value, Some(48 << 20), "{}", f.source);
        assert!(f.source.starts_with("dmem"));
        let other = Gpu {
            name: "vkms".into(),
            bus_id: None,
            ..g
        };
        assert_eq!(free_of(&other, Some(&d)).value, None);
        assert_eq!(free_of(&other, None).value, None);
    }

    fn gpu(index: usize, driver: &str) -> Gpu {
        Gpu {
            index,
            bus_id: None,
            name: format!("{driver}{index}"),
            driver: Some(driver.into()),
            pci_id: None,
            nodes: vec![crate::gpu::Node {
                path: format!("/dev/dri/card{index}").into(),
                kind: drm_gem::NodeKind::Primary,
                dev: (226, u32::try_from(index).unwrap()),
                by_path: None,
            }],
            vendor_nodes: Vec::new(),
            numa_node: None,
            local_cpulist: None,
        }
    }

    fn unknown(_: &Gpu) -> Known {
        Known {
            value: None,
            source: "no source".into(),
        }
    }

    fn no_class(_: &Gpu) -> Option<crate::topo::Class> {
        None
    }

    /// With `--near`, the class ranks before the leases; a GPU without a class (not on
    /// PCI) after every classed one; without `--near` the class counts nothing.
    #[test]
    fn near_ranks_the_class_first() {
        use crate::topo::Class;
        let gs = [gpu(0, "vgem"), gpu(1, "vgem"), gpu(2, "vgem")];
        let refs: Vec<&Gpu> = gs.iter().collect();
        let class = |g: &Gpu| match g.index {
            0 => None,
            1 => Some(Class::Sys),
            _ => Some(Class::Pix),
        };
        let held = BTreeMap::from([(2, 1)]);
        let want = Want {
            near: Some("numa:0".parse().unwrap()),
            ..Default::default()
        };
        let r = rank(&refs, None, &held, &unknown, &class, &want);
        let order: Vec<_> = r.iter().map(|c| (c.index, c.class)).collect();
        assert_eq!(
            order,
            [(2, Some(Class::Pix)), (1, Some(Class::Sys)), (0, None)]
        );
        let r = rank(&refs, None, &held, &unknown, &class, &Want::default());
        let order: Vec<_> = r.iter().map(|c| (c.index, c.class)).collect();
        assert_eq!(
            order,
            [(0, None), (1, None), (2, None)],
            "without --near: leases"
        );
    }

    #[test]
    fn leases_then_clients_then_index_and_exclusions_named() {
        let gs = [gpu(0, "vkms"), gpu(1, "vgem"), gpu(2, "vgem")];
        let refs: Vec<&Gpu> = gs.iter().collect();
        // Without a report, clients are unknown: only leases and the index decide.
        let held = BTreeMap::from([(0, 1)]);
        let r = rank(&refs, None, &held, &unknown, &no_class, &Want::default());
        let order: Vec<usize> = r.iter().map(|c| c.index).collect();
        assert_eq!(order, [1, 2, 0], "the leased GPU last");
        let idle = |want: Want| rank(&refs, None, &BTreeMap::new(), &unknown, &no_class, &want);
        let r = idle(Want {
            driver: Some("vgem".into()),
            ..Default::default()
        });
        assert_eq!(r.last().unwrap().index, 0);
        assert_eq!(
            r.last().unwrap().excluded.as_deref(),
            Some("driver vkms is not vgem")
        );
        let r = idle(Want {
            min_free: Some(1),
            ..Default::default()
        });
        assert!(
            r.iter()
                .all(|c| c.excluded.as_deref() == Some("free memory unknown (no source)"))
        );
        let r = idle(Want {
            max_clients: Some(3),
            ..Default::default()
        });
        assert!(
            r.iter().all(|c| c.excluded.is_some()),
            "clients unknown: excluded"
        );
    }

    /// A GPU without a DRM node (NVIDIA without nvidia-drm): clients and memory unknown,
    /// saying why, never zero; `--max-clients` excludes it with that reason.
    #[test]
    fn a_gpu_without_a_drm_node_has_unknown_use() {
        let mut nv = gpu(0, "nvidia");
        nv.nodes.clear();
        let (clients, memory) = usage(&nv, None);
        assert_eq!(clients, None);
        assert_eq!(memory.value, None);
        assert_eq!(memory.source, NO_DRM_NODE);
        let drm = gpu(1, "vgem");
        assert_eq!(usage(&drm, None).1.source, "the scan could not run");
        let r = rank(
            &[&nv],
            None,
            &BTreeMap::new(),
            &unknown,
            &no_class,
            &Want {
                max_clients: Some(4),
                ..Default::default()
            },
        );
        assert_eq!(
            r[0].excluded.as_deref(),
            Some("clients unknown (the GPU has no DRM node)")
        );
    }
}
