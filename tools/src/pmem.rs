//! `drmtool pmem list`: persistent-memory regions and namespaces (`/sys/bus/nd`, through
//! [`hmm::PmemRegion::discover`]), the `/dev/pmem*` and `/dev/dax*` nodes with size and
//! alignment, and the filesystems mounted from them with their DAX policy (from
//! `/proc/self/mountinfo`).

use hmm::PmemRegion;
use serde::Serialize;
use std::path::Path;

/// The JSON schema version of `drmtool pmem list --json`.
pub const PMEM_SCHEMA_VERSION: u32 = 1;

/// `drmtool pmem list --json`.
#[derive(Debug, Clone, Serialize)]
pub struct PmemReport {
    /// [`PMEM_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The pmem regions with their namespaces.
    pub regions: Vec<Region>,
    /// Every `/dev/pmem*` and `/dev/dax*` node.
    pub devices: Vec<PmemDevice>,
    /// Why both lists are empty, when they are; or why discovery failed.
    pub reason: Option<String>,
}

/// One region ([`hmm::PmemRegion`]).
#[derive(Debug, Clone, Serialize)]
pub struct Region {
    /// `region0`.
    pub name: String,
    /// Bytes.
    pub size: u64,
    /// Allocation alignment in bytes, where reported.
    pub align: Option<u64>,
    /// `persistence_domain` (`cpu_cache`, `memory_controller`); null where the platform
    /// does not say (QEMU).
    pub persistence_domain: Option<String>,
    /// Its namespaces (seed namespaces of size 0 left out).
    pub namespaces: Vec<NamespaceRow>,
}

/// One namespace ([`hmm::Namespace`]).
#[derive(Debug, Clone, Serialize)]
pub struct NamespaceRow {
    /// `namespace0.0`.
    pub name: String,
    /// ndctl's mode name: `raw`, `fsdax`, `devdax`, `sector`, or what the kernel says.
    pub mode: String,
    /// Usable bytes (less the page-map reserve in fsdax and devdax modes).
    pub size: u64,
    /// The namespace's raw size.
    pub raw_size: u64,
    /// Mapping alignment in bytes, where reported.
    pub align: Option<u64>,
    /// The holder (`pfn0.0`, `dax0.0`), if claimed.
    pub holder: Option<String>,
    /// `/dev/pmemN` (raw, fsdax) or `/dev/pmemNs` (sector).
    pub block_device: Option<String>,
    /// `/dev/daxN.M` (devdax).
    pub dax_device: Option<String>,
}

/// One `/dev/pmem*` or `/dev/dax*` node.
#[derive(Debug, Clone, Serialize)]
pub struct PmemDevice {
    /// The node.
    pub path: String,
    /// `block` (pmem) or `char` (devdax).
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// `major:minor`.
    pub dev: String,
    /// Bytes (sysfs `size`), where readable.
    pub size: Option<u64>,
    /// Mapping alignment: the devdax device's `align`, else its namespace's.
    pub align: Option<u64>,
    /// The namespace it belongs to, when discovery found it.
    pub namespace: Option<String>,
    /// That namespace's mode.
    pub mode: Option<String>,
    /// Filesystems mounted from it (block devices only).
    pub mounts: Vec<Mount>,
}

/// One line of `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mount {
    /// `major:minor` of the filesystem's device.
    #[serde(skip)]
    pub dev: String,
    /// Where it is mounted.
    pub mount_point: String,
    /// Filesystem type (`ext4`, `xfs`).
    pub fstype: String,
    /// The mount source (`/dev/pmem0`).
    pub source: String,
    /// The DAX policy the options show: `always` (`dax` or `dax=always`), `inode`,
    /// `never`; null when no dax option is shown (then only files flagged for DAX could
    /// use it, on filesystems whose default is `inode`).
    pub dax: Option<String>,
    /// Per-mount and superblock options, as shown.
    pub options: String,
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = b[i + 1..i + 4]
                .iter()
                .fold(0u32, |a, c| a * 8 + u32::from(c - b'0'));
            if let Ok(v) = u8::try_from(v) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The DAX policy in comma-separated option lists.
pub fn dax_policy(options: &[&str]) -> Option<String> {
    let mut found = None;
    for o in options.iter().flat_map(|o| o.split(',')) {
        match o {
            "dax" | "dax=always" => found = Some("always".to_string()),
            "dax=inode" => found = Some("inode".into()),
            "dax=never" => found = Some("never".into()),
            _ => {}
        }
    }
    found
}

/// Parses `/proc/<pid>/mountinfo`; lines it cannot read are left out.
///
/// Format (proc(5)): `ID PARENT MAJOR:MINOR ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE
/// SOURCE SUPER_OPTIONS`.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let f: Vec<&str> = left.split(' ').collect();
            let r: Vec<&str> = right.split(' ').collect();
            if f.len() < 6 || r.len() < 3 || !f[2].contains(':') {
                return None;
            }
            Some(Mount {
                dev: f[2].to_string(),
                mount_point: unescape(f[4]),
                fstype: r[0].to_string(),
                source: unescape(r[1]),
                dax: dax_policy(&[f[5], r[2]]),
                options: format!("{} {}", f[5], r[2]),
            })
        })
        .collect()
}

fn sysfs_u64(p: &Path) -> Option<u64> {
    let s = std::fs::read_to_string(p).ok()?;
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Lists what this machine has.
pub fn list() -> PmemReport {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    match PmemRegion::discover() {
        Ok(r) => build(&r, Path::new("/dev"), Path::new("/sys"), &mountinfo),
        Err(e) => {
            let mut rep = build(&[], Path::new("/dev"), Path::new("/sys"), &mountinfo);
            rep.reason = Some(format!("pmem discovery failed: {e}"));
            rep
        }
    }
}

/// Joins discovered regions, the nodes under `dev` (sizes from `sys`) and mounts.
pub fn build(regions: &[PmemRegion], dev: &Path, sys: &Path, mountinfo: &str) -> PmemReport {
    let p = |o: &Option<std::path::PathBuf>| o.as_ref().map(|p| p.display().to_string());
    let regions: Vec<Region> = regions
        .iter()
        .map(|r| Region {
            name: r.name.clone(),
            size: r.size,
            align: r.align,
            persistence_domain: r.persistence_domain.clone().filter(|s| !s.is_empty()),
            namespaces: r
                .namespaces
                .iter()
                .map(|n| NamespaceRow {
                    name: n.name.clone(),
                    mode: n.mode.ndctl_name().to_string(),
                    size: n.size,
                    raw_size: n.raw_size,
                    align: n.align,
                    holder: n.holder.clone(),
                    block_device: p(&n.block_device),
                    dax_device: p(&n.dax_device),
                })
                .collect(),
        })
        .collect();
    let mounts = parse_mountinfo(mountinfo);
    let mut names: Vec<String> = std::fs::read_dir(dev)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("pmem") || n.starts_with("dax"))
        .collect();
    names.sort();
    let mut devices = Vec::new();
    for name in names {
        let path = dev.join(&name);
        let Ok(st) = rustix::fs::stat(&path) else {
            continue;
        };
        let ft = rustix::fs::FileType::from_raw_mode(st.st_mode);
        let kind = match ft {
            rustix::fs::FileType::BlockDevice => "block",
            rustix::fs::FileType::CharacterDevice => "char",
            _ => continue,
        };
        let mm = format!(
            "{}:{}",
            rustix::fs::major(st.st_rdev),
            rustix::fs::minor(st.st_rdev)
        );
        let sysdir = sys.join("dev").join(kind).join(&mm);
        let size = if kind == "block" {
            sysfs_u64(&sysdir.join("size")).map(|s| s * 512)
        } else {
            sysfs_u64(&sysdir.join("size"))
        };
        let shown = Path::new("/dev").join(&name).display().to_string();
        let ns = regions.iter().flat_map(|r| &r.namespaces).find(|n| {
            n.block_device.as_deref() == Some(shown.as_str())
                || n.dax_device.as_deref() == Some(shown.as_str())
        });
        let align = if kind == "char" {
            sysfs_u64(&sysdir.join("align"))
        } else {
            None
        }
        .or_else(|| ns.and_then(|n| n.align));
        devices.push(PmemDevice {
            path: shown.clone(),
            kind,
            dev: mm.clone(),
            size,
            align,
            namespace: ns.map(|n| n.name.clone()),
            mode: ns.map(|n| n.mode.clone()),
            mounts: if kind == "block" {
                mounts
                    .iter()
                    .filter(|m| m.dev == mm || m.source == shown)
                    .cloned()
                    .collect()
            } else {
                Vec::new()
            },
        });
    }
    let reason = (regions.is_empty() && devices.is_empty()).then(|| {
        "no persistent memory: /sys/bus/nd shows no pmem region and /dev has no pmem or dax \
         node (hint: an NVDIMM needs libnvdimm and nd_pmem; in QEMU `-machine nvdimm=on \
         -device nvdimm`; the test guests have one: cargo run -p vm -- run -- drmtool pmem list)"
            .to_string()
    });
    PmemReport {
        schema_version: PMEM_SCHEMA_VERSION,
        regions,
        devices,
        reason,
    }
}

fn size(v: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (u, n) in UNITS {
        if v >= u && v.is_multiple_of(u) {
            return format!("{} {n}", v / u);
        }
    }
    format!("{v} B")
}

fn table(rows: &[Vec<String>], indent: &str, s: &mut String) {
    use std::fmt::Write;
    for line in crate::render::align(rows) {
        let _ = writeln!(s, "{indent}{line}");
    }
}

/// The human view.
pub fn render(r: &PmemReport) -> String {
    let mut s = String::new();
    let opt = |v: Option<u64>| v.map_or("-".to_string(), size);
    let ostr = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    for reg in &r.regions {
        table(
            &[
                vec![
                    "REGION".into(),
                    "SIZE".into(),
                    "ALIGN".into(),
                    "PERSISTENCE".into(),
                ],
                vec![
                    reg.name.clone(),
                    size(reg.size),
                    opt(reg.align),
                    ostr(&reg.persistence_domain),
                ],
            ],
            "",
            &mut s,
        );
        let mut rows = vec![
            [
                "NAMESPACE",
                "MODE",
                "SIZE",
                "RAW SIZE",
                "ALIGN",
                "HOLDER",
                "DEVICE",
            ]
            .map(String::from)
            .to_vec(),
        ];
        for n in &reg.namespaces {
            rows.push(vec![
                n.name.clone(),
                n.mode.clone(),
                size(n.size),
                size(n.raw_size),
                opt(n.align),
                ostr(&n.holder),
                ostr(&n.dax_device.clone().or_else(|| n.block_device.clone())),
            ]);
        }
        if reg.namespaces.is_empty() {
            s.push_str("  (no namespaces)\n");
        } else {
            table(&rows, "  ", &mut s);
        }
        s.push('\n');
    }
    if !r.devices.is_empty() {
        let mut rows = vec![
            [
                "DEVICE",
                "TYPE",
                "DEV",
                "SIZE",
                "ALIGN",
                "NAMESPACE",
                "MODE",
                "MOUNTED (DAX)",
            ]
            .map(String::from)
            .to_vec(),
        ];
        for d in &r.devices {
            let mounts: Vec<String> = d
                .mounts
                .iter()
                .map(|m| {
                    format!(
                        "{} {} (dax: {})",
                        m.mount_point,
                        m.fstype,
                        m.dax.as_deref().unwrap_or("not shown")
                    )
                })
                .collect();
            rows.push(vec![
                d.path.clone(),
                d.kind.into(),
                d.dev.clone(),
                opt(d.size),
                opt(d.align),
                ostr(&d.namespace),
                ostr(&d.mode),
                if mounts.is_empty() {
                    "-".into()
                } else {
                    mounts.join("; ")
                },
            ]);
        }
        table(&rows, "", &mut s);
    }
    s
}
