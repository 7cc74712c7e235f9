//! Discovery of persistent-memory regions and namespaces from sysfs (`/sys/bus/nd`).
//!
//! libnvdimm shows each region (`regionN`) with its namespaces (`namespaceN.M`). A
//! namespace's `mode` file says how it is used; a namespace in fsdax or devdax mode is
//! claimed by a holder device (`pfnN.M` or `daxN.M`), which owns the usable size (less the
//! page-map reserve) and the alignment. The block device (`/dev/pmemN`) hangs off the
//! namespace or its pfn holder; the devdax character device (`/dev/daxN.M`) appears on the
//! dax bus, its parent being the holder.
//!
//! | sysfs `mode` | [`NamespaceMode`] | device |
//! |---|---|---|
//! | `raw` | `Raw` | `/dev/pmemN` (DAX-capable, no `struct page`) |
//! | `memory` | `Fsdax` | `/dev/pmemN`, mount with `-o dax` |
//! | `dax` | `Devdax` | `/dev/daxN.M` |
//! | `safe` | `Sector` | `/dev/pmemNs` (BTT, no DAX) |
//!
//! Changing a mode is an administrative act (`ndctl create-namespace -f -e namespaceN.M -m
//! fsdax|devdax`); this module only reads.

use drm_gem::{Error, Result};
use std::path::{Path, PathBuf};

/// How a namespace is used (sysfs `mode`, ndctl's names in parentheses).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NamespaceMode {
    /// `raw`: the whole namespace as a block device, no page map.
    Raw,
    /// `memory` (fsdax): a block device with a page map, for DAX filesystems.
    Fsdax,
    /// `dax` (devdax): a character device mapped whole, at the namespace's alignment.
    Devdax,
    /// `safe` (sector): a BTT block device with atomic sectors; no DAX.
    Sector,
    /// Anything else the kernel reports.
    Other(String),
}

impl NamespaceMode {
    fn parse(s: &str) -> Self {
        match s {
            "raw" => Self::Raw,
            "memory" | "fsdax" => Self::Fsdax,
            "dax" | "devdax" => Self::Devdax,
            "safe" | "sector" => Self::Sector,
            other => Self::Other(other.to_string()),
        }
    }

    /// ndctl's name for the mode (`raw`, `fsdax`, `devdax`, `sector`).
    pub fn ndctl_name(&self) -> &str {
        match self {
            Self::Raw => "raw",
            Self::Fsdax => "fsdax",
            Self::Devdax => "devdax",
            Self::Sector => "sector",
            Self::Other(s) => s,
        }
    }
}

/// One namespace of a region.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Namespace {
    /// sysfs name, e.g. `namespace0.0`.
    pub name: String,
    /// How it is used.
    pub mode: NamespaceMode,
    /// Usable bytes: the holder's size in fsdax/devdax mode (less the page-map reserve),
    /// else the namespace's own size.
    pub size: u64,
    /// The namespace's raw size.
    pub raw_size: u64,
    /// Mapping alignment in bytes (the holder's `align`; devdax mappings must be aligned
    /// to it), where the kernel reports one.
    pub align: Option<u64>,
    /// The holder device (`pfn0.0`, `dax0.0`), if claimed.
    pub holder: Option<String>,
    /// `/dev/pmemN` (raw, fsdax) or `/dev/pmemNs` (sector).
    pub block_device: Option<PathBuf>,
    /// `/dev/daxN.M` (devdax).
    pub dax_device: Option<PathBuf>,
}

/// One persistent-memory region with its namespaces.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PmemRegion {
    /// sysfs name, e.g. `region0`.
    pub name: String,
    /// Bytes.
    pub size: u64,
    /// The region's allocation alignment, where reported.
    pub align: Option<u64>,
    /// `persistence_domain` (`cpu_cache`, `memory_controller`, or empty when the platform
    /// does not say, as under QEMU).
    pub persistence_domain: Option<String>,
    /// Its namespaces, by name. Seed namespaces of size 0 (placeholders the kernel keeps
    /// for creating new ones) are left out.
    pub namespaces: Vec<Namespace>,
}

impl PmemRegion {
    /// Every pmem region of this machine (empty when there is no libnvdimm bus).
    pub fn discover() -> Result<Vec<PmemRegion>> {
        Self::discover_in(Path::new("/sys"))
    }

    /// As [`discover`](Self::discover), reading a sysfs tree mounted at `sys` (tests use a
    /// copy).
    pub fn discover_in(sys: &Path) -> Result<Vec<PmemRegion>> {
        let nd = sys.join("bus/nd/devices");
        let Ok(rd) = std::fs::read_dir(&nd) else {
            return Ok(Vec::new());
        };
        let mut names: Vec<String> = rd
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let dax_devices = dax_devices(sys);
        let mut out = Vec::new();
        for r in names.iter().filter(|n| n.starts_with("region")) {
            let dir = nd.join(r);
            // Only pmem regions (devtype nd_pmem); block-window regions have no DAX.
            if read(&dir, "devtype").as_deref() != Some("nd_pmem") {
                continue;
            }
            let size = read_u64(&dir, "size").ok_or_else(|| Error::NotFound {
                what: format!("{}: no readable size", dir.display()),
            })?;
            let prefix = format!("namespace{}.", r.trim_start_matches("region"));
            let mut namespaces = Vec::new();
            for n in names.iter().filter(|n| n.starts_with(&prefix)) {
                if let Some(ns) = namespace(&nd, n, &dax_devices) {
                    namespaces.push(ns);
                }
            }
            out.push(PmemRegion {
                name: r.clone(),
                size,
                align: read_u64(&dir, "align"),
                persistence_domain: read(&dir, "persistence_domain"),
                namespaces,
            });
        }
        Ok(out)
    }
}

/// Trimmed contents of `dir/file`, if readable.
fn read(dir: &Path, file: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(file))
        .ok()
        .map(|s| s.trim().to_string())
}

/// A sysfs number, decimal or `0x` hex.
fn read_u64(dir: &Path, file: &str) -> Option<u64> {
    parse_u64(&read(dir, file)?)
}

fn parse_u64(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// The block device under `dir/block/`, if any.
fn block_device(dir: &Path) -> Option<PathBuf> {
    let rd = std::fs::read_dir(dir.join("block")).ok()?;
    rd.flatten()
        .map(|e| PathBuf::from("/dev").join(e.file_name()))
        .next()
}

/// Devdax character devices: (holder name, device name, align).
fn dax_devices(sys: &Path) -> Vec<(String, String, Option<u64>)> {
    let Ok(rd) = std::fs::read_dir(sys.join("bus/dax/devices")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(real) = std::fs::canonicalize(e.path()) else {
            continue;
        };
        let parent = real
            .parent()
            .and_then(Path::file_name)
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        out.push((parent, name, read_u64(&real, "align")));
    }
    out.sort();
    out
}

fn namespace(nd: &Path, name: &str, dax: &[(String, String, Option<u64>)]) -> Option<Namespace> {
    let dir = nd.join(name);
    let raw_size = read_u64(&dir, "size").unwrap_or(0);
    if raw_size == 0 {
        return None;
    }
    let mode = NamespaceMode::parse(&read(&dir, "mode").unwrap_or_default());
    let holder = read(&dir, "holder").filter(|h| !h.is_empty());
    let hdir = holder.as_ref().map(|h| nd.join(h));
    let size = hdir
        .as_deref()
        .and_then(|h| read_u64(h, "size"))
        .unwrap_or(raw_size);
    let devdax = holder
        .as_ref()
        .and_then(|h| dax.iter().find(|(parent, _, _)| parent == h));
    let align = devdax
        .and_then(|(_, _, a)| *a)
        .or_else(|| hdir.as_deref().and_then(|h| read_u64(h, "align")));
    let block = hdir
        .as_deref()
        .and_then(block_device)
        .or_else(|| block_device(&dir));
    Some(Namespace {
        name: name.to_string(),
        mode,
        size,
        raw_size,
        align,
        holder,
        block_device: block,
        dax_device: devdax.map(|(_, d, _)| PathBuf::from("/dev").join(d)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(p: &Path, s: &str) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, s).unwrap();
    }

    /// A sysfs tree as a 6.12 guest shows it with one fsdax namespace and a region of
    /// 256 MiB (values copied from a real guest).
    fn fake_sysfs(root: &Path, mode: &str) {
        let bus = root.join("devices/ndbus0/region0");
        let nd = root.join("bus/nd/devices");
        std::fs::create_dir_all(&nd).unwrap();
        write(&bus.join("devtype"), "nd_pmem\n");
        write(&bus.join("size"), "268435456\n");
        write(&bus.join("align"), "0x1000000\n");
        write(&bus.join("persistence_domain"), "\n");
        let ns = bus.join("namespace0.0");
        write(&ns.join("size"), "268435456\n");
        write(&ns.join("devtype"), "nd_namespace_io\n");
        let seed = bus.join("namespace0.1");
        write(&seed.join("size"), "0\n");
        let pfn = bus.join("pfn0.0");
        let dax = bus.join("dax0.0");
        match mode {
            "memory" => {
                write(&ns.join("mode"), "memory\n");
                write(&ns.join("holder"), "pfn0.0\n");
                write(&pfn.join("size"), "262144000\n");
                write(&pfn.join("align"), "2097152\n");
                std::fs::create_dir_all(pfn.join("block/pmem0")).unwrap();
            }
            "dax" => {
                write(&ns.join("mode"), "dax\n");
                write(&ns.join("holder"), "dax0.0\n");
                write(&dax.join("size"), "262144000\n");
                write(&dax.join("align"), "2097152\n");
                write(&dax.join("dax0.0/align"), "2097152\n");
                let db = root.join("bus/dax/devices");
                std::fs::create_dir_all(&db).unwrap();
                std::os::unix::fs::symlink(dax.join("dax0.0"), db.join("dax0.0")).unwrap();
            }
            _ => {
                write(&ns.join("mode"), "raw\n");
                write(&ns.join("holder"), "\n");
                std::fs::create_dir_all(ns.join("block/pmem0")).unwrap();
            }
        }
        for d in [
            "region0",
            "namespace0.0",
            "namespace0.1",
            "pfn0.0",
            "dax0.0",
        ] {
            let target = if d == "region0" {
                bus.clone()
            } else {
                bus.join(d)
            };
            std::fs::create_dir_all(&target).unwrap();
            std::os::unix::fs::symlink(&target, nd.join(d)).unwrap();
        }
    }

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("hmm-pmem-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn fsdax_namespace_from_sysfs() {
        let root = scratch("fsdax");
        fake_sysfs(&root, "memory");
        let r = PmemRegion::discover_in(&root).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].name, "region0");
        assert_eq!(r[0].size, 256 << 20);
        assert_eq!(r[0].align, Some(16 << 20));
        assert_eq!(r[0].persistence_domain.as_deref(), Some(""));
        assert_eq!(r[0].namespaces.len(), 1, "the size-0 seed is left out");
        let ns = &r[0].namespaces[0];
        assert_eq!(ns.mode, NamespaceMode::Fsdax);
        assert_eq!(ns.mode.ndctl_name(), "fsdax");
        assert_eq!((ns.size, ns.raw_size), (262_144_000, 268_435_456));
        assert_eq!(ns.align, Some(2 << 20));
        assert_eq!(ns.holder.as_deref(), Some("pfn0.0"));
        assert_eq!(ns.block_device.as_deref(), Some(Path::new("/dev/pmem0")));
        assert_eq!(ns.dax_device, None);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn devdax_and_raw_namespaces_from_sysfs() {
        let root = scratch("devdax");
        fake_sysfs(&root, "dax");
        let ns = &PmemRegion::discover_in(&root).unwrap()[0].namespaces[0];
        assert_eq!(ns.mode, NamespaceMode::Devdax);
        assert_eq!(ns.dax_device.as_deref(), Some(Path::new("/dev/dax0.0")));
        assert_eq!(ns.align, Some(2 << 20));
        assert_eq!(ns.block_device, None);
        std::fs::remove_dir_all(&root).unwrap();

        let root = scratch("raw");
        fake_sysfs(&root, "raw");
        let ns = &PmemRegion::discover_in(&root).unwrap()[0].namespaces[0];
        assert_eq!(ns.mode, NamespaceMode::Raw);
        assert_eq!(ns.size, 256 << 20);
        assert_eq!(ns.align, None);
        assert_eq!(ns.holder, None);
        assert_eq!(ns.block_device.as_deref(), Some(Path::new("/dev/pmem0")));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn no_bus_is_no_regions() {
        assert!(
            PmemRegion::discover_in(Path::new("/nonexistent"))
                .unwrap()
                .is_empty()
        );
        assert_eq!(parse_u64("0x10"), Some(16));
        assert_eq!(parse_u64("x"), None);
    }
}
