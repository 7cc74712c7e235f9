//! NVIDIA's nodes, from `/proc/driver/nvidia` and `/proc/devices` (and, for the IMEX
//! channels, which the kernel lists nowhere, from `/dev`).

use super::{
    Entry, MAX_DEPTH, MAX_ENTRIES, MAX_MINOR, MAX_NVIDIA_GPU_MINOR, MajorError, ProcDevices,
    Reason, VendorNodeKind as Kind, VendorReport, VendorRoots, list_dir, numbered, parse_cap_file,
    parse_nvidia_information, read_required,
};
use crate::sysfs::is_bus_id;
use std::path::{Path, PathBuf};

/// The NVIDIA character major of `/dev/nvidiaN`, `nvidiactl` and `nvidia-modeset`.
const MAJOR: u32 = 195;
/// `/dev/nvidiactl`'s minor.
const CTL_MINOR: u32 = 255;
/// `/dev/nvidia-modeset`'s minor.
const MODESET_MINOR: u32 = 254;
/// The `/proc/devices` name of NVIDIA's IMEX channels' major, and their directory under
/// `/dev`.
pub const IMEX_CHANNELS: &str = "nvidia-caps-imex-channels";

/// One identified GPU: its bus id and NVIDIA minor.
#[derive(Clone)]
struct Gpu {
    bus_id: String,
    minor: u32,
}

/// Adds NVIDIA's nodes (and what could not be identified) to `out`; nothing without
/// `/proc/driver/nvidia` (the driver is not loaded). `devices` is `/proc/devices` as read
/// (empty when it is missing).
pub(super) fn discover(
    roots: &VendorRoots,
    devices: &Result<ProcDevices, Reason>,
    out: &mut VendorReport,
) {
    let nv = roots.proc_root.join("driver/nvidia");
    if !nv.is_dir() {
        return;
    }
    let gpus = gpus(roots, &nv.join("gpus"), out);
    out.node(roots, "nvidiactl", Kind::NvidiaCtl, (MAJOR, CTL_MINOR));
    if roots.sys_root.join("module/nvidia_modeset").is_dir() {
        out.node(
            roots,
            "nvidia-modeset",
            Kind::NvidiaModeset,
            (MAJOR, MODESET_MINOR),
        );
    }
    match major(devices, "nvidia-uvm") {
        Ok(m) => {
            out.node(roots, "nvidia-uvm", Kind::NvidiaUvm, (m, 0));
            out.node(roots, "nvidia-uvm-tools", Kind::NvidiaUvmTools, (m, 1));
        }
        Err(Reason::NoMajor(MajorError::NotListed(_))) => {}
        Err(r) => {
            let source = roots.proc_root.join("devices");
            out.refuse(Kind::NvidiaUvm, &source, None, r.clone());
            out.refuse(Kind::NvidiaUvmTools, &source, None, r);
        }
    }
    let caps_major = major(devices, "nvidia-caps");
    caps(roots, caps_major, &nv.join("capabilities"), &gpus, out);
    imex_channels(roots, devices, out);
}

/// The IMEX channels: `/dev/nvidia-caps-imex-channels/channelN` where it is a character
/// device of the `nvidia-caps-imex-channels` major and minor N. The kernel lists which
/// channels exist nowhere (the driver makes channel 0 at load with
/// `NVreg_CreateImexChannel0=1`, `nvidia-modprobe -i N` makes others), so they come from
/// `/dev`, each checked against the kernel's major; nothing without that major.
fn imex_channels(
    roots: &VendorRoots,
    devices: &Result<ProcDevices, Reason>,
    out: &mut VendorReport,
) {
    let dir = roots.dev_root.join(IMEX_CHANNELS);
    // No directory, or no major (the driver has no channels): nothing to list or refuse.
    // A major that is unknown otherwise is refused only where there are channels.
    if !dir.is_dir() {
        return;
    }
    let major = match major(devices, IMEX_CHANNELS) {
        Ok(m) => m,
        Err(Reason::NoMajor(MajorError::NotListed(_))) => return,
        Err(r) => {
            let source = roots.proc_root.join("devices");
            return out.refuse(Kind::NvidiaImexChannel, &source, None, r);
        }
    };
    let entries = match list_dir(&dir, MAX_ENTRIES) {
        Ok(Some(v)) => v,
        Ok(None) => return,
        Err(r) => return out.refuse(Kind::NvidiaImexChannel, &dir, None, r),
    };
    for e in entries {
        let name = match e.plain_name() {
            Ok(n) => n,
            Err(r) => {
                out.refuse(Kind::NvidiaImexChannel, &dir, None, r);
                continue;
            }
        };
        // The driver's names only: `channel` and the minor in plain decimal, no zero
        // padding (`channel01` would be another name for channel 1).
        let minor = numbered(name, "channel", MAX_MINOR).filter(|m| name == format!("channel{m}"));
        let Some(minor) = minor else {
            out.refuse(
                Kind::NvidiaImexChannel,
                &dir,
                None,
                Reason::UnexpectedName(name.into()),
            );
            continue;
        };
        let path = dir.join(name);
        let expected = (major, minor);
        match char_dev(&path) {
            Ok(found) if found == expected => {
                let rel = format!("{IMEX_CHANNELS}/{name}");
                out.node_of(roots, &rel, Kind::NvidiaImexChannel, expected, None, None);
            }
            Ok(found) => {
                let r = Reason::DevMismatch { expected, found };
                out.refuse(Kind::NvidiaImexChannel, &path, None, r);
            }
            Err(r) => out.refuse(Kind::NvidiaImexChannel, &path, None, r),
        }
    }
}

/// The device number of the character device at `path` (a link is not followed).
fn char_dev(path: &Path) -> Result<(u32, u32), Reason> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let md = std::fs::symlink_metadata(path).map_err(|e| Reason::Unreadable {
        error: e.to_string(),
    })?;
    if !md.file_type().is_char_device() {
        return Err(Reason::NotACharDevice);
    }
    Ok((rustix::fs::major(md.rdev()), rustix::fs::minor(md.rdev())))
}

/// The character major of `name`: why not, when `/proc/devices` could not be read or does
/// not give exactly one.
fn major(devices: &Result<ProcDevices, Reason>, name: &'static str) -> Result<u32, Reason> {
    match devices {
        Ok(d) => d.char_major(name).map_err(Reason::NoMajor),
        Err(r) => Err(r.clone()),
    }
}

/// The GPUs of `/proc/driver/nvidia/gpus/<bus id>/information`, with their nodes added.
fn gpus(roots: &VendorRoots, dir: &Path, out: &mut VendorReport) -> Vec<Gpu> {
    let entries = match list_dir(dir, MAX_ENTRIES) {
        Ok(Some(v)) => v,
        Ok(None) => return Vec::new(),
        Err(r) => {
            out.refuse(Kind::NvidiaGpu, dir, None, r);
            return Vec::new();
        }
    };
    let mut found: Vec<(Gpu, PathBuf)> = Vec::new();
    for e in &entries {
        let name = match e.plain_name() {
            Ok(n) if is_bus_id(n) => n.to_ascii_lowercase(),
            Ok(n) => {
                out.refuse(Kind::NvidiaGpu, dir, None, Reason::UnexpectedName(n.into()));
                continue;
            }
            Err(r) => {
                out.refuse(Kind::NvidiaGpu, dir, None, r);
                continue;
            }
        };
        let source = dir.join(e.name.as_os_str()).join("information");
        let info = read_required(&source)
            .and_then(|t| parse_nvidia_information(&t).map_err(Reason::Malformed));
        match info {
            Ok(i) => found.push((
                Gpu {
                    bus_id: name,
                    minor: i.device_minor,
                },
                source,
            )),
            Err(r) => out.refuse(Kind::NvidiaGpu, &source, Some(&name), r),
        }
    }
    let mut gpus = Vec::new();
    for (g, source) in unique_minors(found, |(g, _)| g.minor) {
        match g {
            Ok((g, _)) => {
                let rel = format!("nvidia{}", g.minor);
                let owner = Some(g.bus_id.clone());
                out.node_of(roots, &rel, Kind::NvidiaGpu, (MAJOR, g.minor), owner, None);
                gpus.push(g);
            }
            Err(minor) => out.refuse(
                Kind::NvidiaGpu,
                &source.1,
                Some(&source.0.bus_id),
                Reason::MinorClash { minor },
            ),
        }
    }
    gpus
}

/// Each item, `Ok` when no other item has its minor, else `Err(minor)`; with the item.
fn unique_minors<T: Clone>(items: Vec<T>, minor: impl Fn(&T) -> u32) -> Vec<(Result<T, u32>, T)> {
    let count = |m: u32| items.iter().filter(|i| minor(i) == m).count();
    items
        .iter()
        .map(|i| {
            let m = minor(i);
            let r = if count(m) == 1 { Ok(i.clone()) } else { Err(m) };
            (r, i.clone())
        })
        .collect()
}

/// One capability file read: where, whose, and what it says.
#[derive(Clone)]
struct Cap {
    source: PathBuf,
    owner: Option<String>,
    minor: u32,
    mode: u32,
}

/// The capability nodes of the files under `/proc/driver/nvidia/capabilities/`.
fn caps(
    roots: &VendorRoots,
    major: Result<u32, Reason>,
    dir: &Path,
    gpus: &[Gpu],
    out: &mut VendorReport,
) {
    let mut files = Vec::new();
    let mut budget = MAX_ENTRIES;
    walk(dir, &mut Vec::new(), &mut budget, &mut files, out);
    let mut found = Vec::new();
    for (rel, source) in files {
        let owner = match cap_owner(&rel, gpus) {
            Ok(o) => o,
            Err(r) => {
                out.refuse(Kind::NvidiaCap, &source, None, r);
                continue;
            }
        };
        let cap =
            read_required(&source).and_then(|t| parse_cap_file(&t).map_err(Reason::Malformed));
        match (cap, &major) {
            (Err(r), _) => out.refuse(Kind::NvidiaCap, &source, owner.as_deref(), r),
            (Ok(_), Err(r)) => out.refuse(Kind::NvidiaCap, &source, owner.as_deref(), r.clone()),
            (Ok(c), Ok(_)) => found.push(Cap {
                source,
                owner,
                minor: c.minor,
                mode: c.mode,
            }),
        }
    }
    let Ok(major) = major else { return };
    for (c, cap) in unique_minors(found, |c| c.minor) {
        match c {
            Ok(c) => {
                let rel = format!("nvidia-caps/nvidia-cap{}", c.minor);
                let dev = (major, c.minor);
                out.node_of(roots, &rel, Kind::NvidiaCap, dev, c.owner, Some(c.mode));
            }
            Err(minor) => {
                let r = Reason::MinorClash { minor };
                out.refuse(Kind::NvidiaCap, &cap.source, cap.owner.as_deref(), r);
            }
        }
    }
}

/// The GPU a capability file belongs to: the one with NVIDIA minor N for `gpuN/...`, none
/// (shared) for the others (`mig/config`, `mig/monitor`).
fn cap_owner(rel: &[String], gpus: &[Gpu]) -> Result<Option<String>, Reason> {
    let Some(first) = rel.first().filter(|f| f.starts_with("gpu")) else {
        return Ok(None);
    };
    let Some(minor) = numbered(first, "gpu", MAX_NVIDIA_GPU_MINOR) else {
        return Err(Reason::UnexpectedName(first.as_str().into()));
    };
    gpus.iter()
        .find(|g| g.minor == minor)
        .map(|g| Some(g.bus_id.clone()))
        .ok_or(Reason::UnknownGpu { minor })
}

/// Collects the regular files under `dir` (their path components below the capability
/// root, and their path), at most [`MAX_DEPTH`] deep and [`MAX_ENTRIES`] entries in all;
/// links and other entries, and names that are not printable ASCII, are refused.
fn walk(
    dir: &Path,
    rel: &mut Vec<String>,
    budget: &mut usize,
    files: &mut Vec<(Vec<String>, PathBuf)>,
    out: &mut VendorReport,
) {
    let entries = match list_dir(dir, *budget) {
        Ok(Some(v)) => v,
        Ok(None) => return,
        Err(r) => {
            *budget = 0;
            out.refuse(Kind::NvidiaCap, dir, None, r);
            return;
        }
    };
    *budget -= entries.len();
    for e in entries {
        walk_entry(dir, &e, rel, budget, files, out);
    }
}

fn walk_entry(
    dir: &Path,
    e: &Entry,
    rel: &mut Vec<String>,
    budget: &mut usize,
    files: &mut Vec<(Vec<String>, PathBuf)>,
    out: &mut VendorReport,
) {
    let path = dir.join(&e.name);
    let name = match e.plain_name() {
        Ok(n) => n.to_string(),
        Err(r) => return out.refuse(Kind::NvidiaCap, dir, None, r),
    };
    rel.push(name);
    if e.is_file {
        files.push((rel.clone(), path));
    } else if !e.is_dir {
        out.refuse(Kind::NvidiaCap, &path, None, Reason::NotAFile);
    } else if rel.len() >= MAX_DEPTH {
        out.refuse(Kind::NvidiaCap, &path, None, Reason::WalkLimit);
    } else {
        walk(&path, rel, budget, files, out);
    }
    rel.pop();
}
