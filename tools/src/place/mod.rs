//! Placing GPU jobs where they cost least (issue 30): one cost model ([`cost`]), the set
//! search for a multi-GPU job ([`group`]), the exact assignment of single-GPU jobs
//! ([`flow`], a minimum-cost flow with a wait arc), and where the machine's GPUs sit against
//! what a job wants near ([`Locality`]).

pub mod batch;
pub mod cost;
pub mod flow;
pub mod group;
pub mod requests;

use crate::gpu::Gpu;
use crate::topo::Class;
use crate::topo::near::{Near, NearError, Target};
use crate::topo::report::{GpuPlace, pair_class, path_text, places_at};
use std::path::Path;

/// Where the machine's GPUs sit (in the ordering) and, for a `--near` spec, where it points.
#[derive(Debug, Clone)]
pub struct Locality {
    /// Each GPU's place, by index in the ordering.
    pub places: Vec<GpuPlace>,
    /// The spec and where it resolved (`None`: no `--near`).
    pub near: Option<(Near, Target)>,
}

/// Where a `--near` spec resolved, as `pick --json` and `place` report it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NearReport {
    /// The spec as given (`path:/data/set`).
    pub spec: String,
    /// The PCIe path it resolved to (`pci0000:00/0000:00:01.0/0000:03:00.0`; `None`: a
    /// NUMA node alone).
    pub pci_path: Option<String>,
    /// Its NUMA node (`None` where the kernel reports none).
    pub numa_node: Option<u32>,
}

impl NearReport {
    /// The report of `near`, resolved to `t`.
    pub fn of(near: &Near, t: &Target) -> NearReport {
        NearReport {
            spec: near.to_string(),
            pci_path: t.pci_path.as_ref().map(path_text),
            numa_node: t.numa_node,
        }
    }
}

impl Locality {
    /// No places and no `--near`: what ranking without `--near` needs (every class
    /// `None`), without reading sysfs.
    pub fn none() -> Locality {
        Locality {
            places: Vec::new(),
            near: None,
        }
    }

    /// The places of `all` (the ordering) and `near` resolved, with sysfs at `sys_root`.
    ///
    /// # Errors
    /// [`NearError`]: the spec does not resolve (see [`Near::resolve`]).
    pub fn read_at(
        all: &[Gpu],
        near: Option<&Near>,
        sys_root: &Path,
    ) -> Result<Locality, NearError> {
        let near = match near {
            Some(n) => Some((n.clone(), n.resolve(all, sys_root)?)),
            None => None,
        };
        Ok(Locality {
            places: places_at(all, sys_root),
            near,
        })
    }

    /// [`Locality::read_at`] on this machine's `/sys`.
    ///
    /// # Errors
    /// As [`Locality::read_at`].
    pub fn read(all: &[Gpu], near: Option<&Near>) -> Result<Locality, NearError> {
        Locality::read_at(all, near, Path::new("/sys"))
    }

    /// GPU `i`'s class to the `--near` place (`None`: no `--near`, a GPU not on PCI, or no
    /// node to compare).
    pub fn class_to_near(&self, i: usize) -> Option<Class> {
        let (_, t) = self.near.as_ref()?;
        self.class_to(t, i)
    }

    /// GPU `i`'s class to the place `t` (`None`: not on PCI, or no node to compare).
    pub fn class_to(&self, t: &Target, i: usize) -> Option<Class> {
        let p = self.places.get(i)?;
        t.class_from(p.pci_path.as_ref(), p.numa_node)
    }

    /// The class between GPUs `a` and `b` (`None`: one is not on PCI).
    pub fn pair(&self, a: usize, b: usize) -> Option<Class> {
        pair_class(self.places.get(a)?, self.places.get(b)?)
    }

    /// The `--near` spec and where it resolved, for reports.
    pub fn near_report(&self) -> Option<NearReport> {
        let (n, t) = self.near.as_ref()?;
        Some(NearReport::of(n, t))
    }
}
