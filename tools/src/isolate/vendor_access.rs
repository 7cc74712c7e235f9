//! The vendor nodes of a job (issue 28): besides its GPUs' DRM nodes, `drmtool run` gives a
//! job the NVIDIA, KFD and accel nodes that belong to its GPUs ([`crate::vendor`]) and the
//! shared control nodes a job on them needs, and denies every other node of those majors.
//!
//! - NVIDIA: the GPU's `/dev/nvidiaN` and its own MIG capability nodes; with any NVIDIA GPU
//!   chosen, the shared `nvidiactl`, `nvidia-uvm`, `nvidia-uvm-tools` and `nvidia-modeset`
//!   (what CUDA opens). The shared MIG capabilities (`mig/config`, `mig/monitor`) are
//!   administration rights and are never given.
//! - AMD: `/dev/kfd` when an amdgpu GPU is chosen. ROCm reaches each GPU through its render
//!   node, so kfd with only the chosen render nodes isolates AMD GPUs.
//! - Accelerators: the chosen devices' `/dev/accel/accelN`.
//! - Never by default: NVIDIA's IMEX channels (`/dev/nvidia-caps-imex-channels/channelN`),
//!   which grant cross-node memory import and are the admin's or scheduler's to hand out
//!   per channel (a later `run` flag naming the channels would give them).
//!
//! Denied: every other node of the DRM and accel majors, NVIDIA's 195 and every
//! `/proc/devices` major named `nvidia*`, and the major of every vendor node found.
//!
//! ```
//! use drmtool::isolate::vendor_access::vendor_access;
//! use drmtool::vendor::VendorReport;
//! let none = vendor_access(&[], &VendorReport::default(), "");
//! assert!(none.nodes.is_empty());
//! assert!(none.majors.contains(&195) && none.majors.contains(&226));
//! ```

use super::job::{Step, cpath};
use super::run::{GPU_MAJORS, nvidia_majors};
use crate::gpu::Gpu;
use crate::vendor::{Unidentified, VendorNode, VendorNodeKind, VendorReport};

/// What a job gets of the vendor nodes, and the majors it is limited on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VendorAccess {
    /// The vendor nodes the job may open (placed in its private `/dev`).
    pub nodes: Vec<VendorNode>,
    /// Every major whose nodes outside the allowed ones the job is denied.
    pub majors: Vec<u32>,
}

/// Whether `n` belongs to `g` (its PCI bus id, or its device name off PCI).
fn owned_by(n: &VendorNode, g: &Gpu) -> bool {
    n.owner
        .as_deref()
        .is_some_and(|o| g.bus_id.as_deref() == Some(o) || g.name == o)
}

/// The vendor nodes and majors of a job on `chosen`, from `report` (the machine's vendor
/// nodes) and `proc_devices` (the text of `/proc/devices`).
pub fn vendor_access(chosen: &[&Gpu], report: &VendorReport, proc_devices: &str) -> VendorAccess {
    let mut nodes: Vec<VendorNode> = report
        .nodes
        .iter()
        .filter(|n| chosen.iter().any(|g| owned_by(n, g)))
        .cloned()
        .collect();
    let nvidia = nodes.iter().any(|n| n.kind == VendorNodeKind::NvidiaGpu);
    let amd = chosen.iter().any(|g| g.driver.as_deref() == Some("amdgpu"));
    for n in report.nodes.iter().filter(|n| n.is_shared()) {
        let wanted = match n.kind {
            VendorNodeKind::NvidiaCtl
            | VendorNodeKind::NvidiaUvm
            | VendorNodeKind::NvidiaUvmTools
            | VendorNodeKind::NvidiaModeset => nvidia,
            VendorNodeKind::Kfd => amd,
            _ => false,
        };
        if wanted {
            nodes.push(n.clone());
        }
    }
    let mut majors: Vec<u32> = GPU_MAJORS.to_vec();
    majors.extend(nvidia_majors(proc_devices));
    majors.extend(report.nodes.iter().map(|n| n.dev.0));
    majors.sort_unstable();
    majors.dedup();
    VendorAccess { nodes, majors }
}

/// The first chosen GPU with a vendor node the discovery could not identify, and that
/// entry (a job on it is refused).
pub fn unidentified_of<'g, 'r>(
    chosen: &[&'g Gpu],
    report: &'r VendorReport,
) -> Option<(&'g Gpu, &'r Unidentified)> {
    chosen.iter().find_map(|g| {
        report
            .unidentified
            .iter()
            .find(|u| {
                u.owner
                    .as_deref()
                    .is_some_and(|o| g.bus_id.as_deref() == Some(o) || g.name == o)
            })
            .map(|u| (*g, u))
    })
}

/// The path of `n` under `/dev` (`nvidia0`, `nvidia-caps/nvidia-cap3`, `accel/accel0`), or
/// `None` when it is not under `dev_root` or leaves it.
pub fn dev_relative(n: &VendorNode, dev_root: &std::path::Path) -> Option<String> {
    let rel = n.path.strip_prefix(dev_root).ok()?;
    let ok = rel
        .components()
        .all(|c| matches!(c, std::path::Component::Normal(_)));
    let s = rel.to_str()?;
    (ok && !s.is_empty()).then(|| s.to_string())
}

/// The text of `/proc/devices` (at most 64 KiB; empty when unreadable).
pub fn read_proc_devices() -> String {
    read_proc_devices_in(std::path::Path::new("/proc"))
}

/// The text of `devices` under `proc_root` (at most 64 KiB; empty when unreadable).
pub fn read_proc_devices_in(proc_root: &std::path::Path) -> String {
    use std::io::Read;
    let mut text = String::new();
    let _ = std::fs::File::open(proc_root.join("devices"))
        .and_then(|f| f.take(64 * 1024).read_to_string(&mut text));
    text
}

/// The init's steps that put `nodes` into the job's private `/dev` at their paths under
/// `/dev` (parent directories made first, mode 0755): each with the host node's mode and
/// owner where it exists (else 0660 root:root, or the capability's mode), owned by `uid`
/// and readable and writable by it when the job runs as a user, as its DRM nodes are.
pub fn dev_steps(nodes: &[VendorNode], uid: Option<u32>) -> Vec<Step> {
    let root = std::path::Path::new("/dev");
    let mut dirs: Vec<String> = Vec::new();
    let mut v = Vec::new();
    for n in nodes {
        let Some(rel) = dev_relative(n, root) else {
            continue;
        };
        if let Some((dir, _)) = rel.rsplit_once('/')
            && !dirs.iter().any(|d| d == dir)
        {
            dirs.push(dir.to_string());
            if let Some(path) = cpath(format!("/dev/{dir}")) {
                v.push(Step::Mkdir { path, mode: 0o755 });
            }
        }
        let (mut mode, mut owner) = match rustix::fs::stat(&n.path) {
            Ok(st) => (st.st_mode & 0o7777, (st.st_uid, st.st_gid)),
            Err(_) => (n.mode.unwrap_or(0o660), (0, 0)),
        };
        if let Some(uid) = uid {
            owner.0 = uid;
            mode |= 0o600;
        }
        if let Some(path) = cpath(format!("/dev/{rel}")) {
            v.push(Step::Mknod {
                path,
                dev: n.dev,
                mode,
                owner,
            });
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn node(path: &str, kind: VendorNodeKind, dev: (u32, u32), owner: Option<&str>) -> VendorNode {
        VendorNode {
            path: PathBuf::from(path),
            kind,
            dev,
            owner: owner.map(String::from),
            mode: None,
            present: true,
        }
    }

    fn gpu(bus: &str, driver: &str) -> Gpu {
        Gpu {
            bus_id: Some(bus.into()),
            ..Gpu::bare(0, bus, driver)
        }
    }

    fn machine() -> VendorReport {
        use VendorNodeKind::*;
        VendorReport {
            nodes: vec![
                node("/dev/nvidia0", NvidiaGpu, (195, 0), Some("0000:3b:00.0")),
                node("/dev/nvidia1", NvidiaGpu, (195, 1), Some("0000:5e:00.0")),
                node(
                    "/dev/nvidia-caps/nvidia-cap21",
                    NvidiaCap,
                    (236, 21),
                    Some("0000:5e:00.0"),
                ),
                node("/dev/nvidia-caps/nvidia-cap1", NvidiaCap, (236, 1), None),
                node("/dev/nvidiactl", NvidiaCtl, (195, 255), None),
                node("/dev/nvidia-uvm", NvidiaUvm, (509, 0), None),
                node("/dev/nvidia-uvm-tools", NvidiaUvmTools, (509, 1), None),
                node("/dev/nvidia-modeset", NvidiaModeset, (195, 254), None),
                node("/dev/kfd", Kfd, (240, 0), None),
                node("/dev/accel/accel0", Accel, (261, 0), Some("0000:af:00.0")),
            ],
            unidentified: Vec::new(),
        }
    }

    fn paths(a: &VendorAccess) -> Vec<String> {
        a.nodes
            .iter()
            .map(|n| n.path.display().to_string())
            .collect()
    }

    /// An NVIDIA GPU gets its node, its own MIG capability and the shared control nodes;
    /// never the other GPU's node, the shared MIG rights or kfd.
    #[test]
    fn an_nvidia_job_gets_its_gpu_and_the_control_nodes() {
        let g = gpu("0000:5e:00.0", "nvidia");
        let a = vendor_access(&[&g], &machine(), "Character devices:\n509 nvidia-uvm\n");
        assert_eq!(
            paths(&a),
            [
                "/dev/nvidia1",
                "/dev/nvidia-caps/nvidia-cap21",
                "/dev/nvidiactl",
                "/dev/nvidia-uvm",
                "/dev/nvidia-uvm-tools",
                "/dev/nvidia-modeset"
            ]
        );
        assert_eq!(a.majors, [195, 226, 236, 240, 261, 509]);
    }

    /// A job on a GPU of another vendor gets no NVIDIA node at all, and kfd only with an
    /// amdgpu GPU.
    #[test]
    fn other_vendors_get_none_of_nvidias_nodes() {
        let virtio = gpu("0000:00:04.0", "virtio_gpu");
        assert!(vendor_access(&[&virtio], &machine(), "").nodes.is_empty());
        let amd = gpu("0000:c1:00.0", "amdgpu");
        assert_eq!(paths(&vendor_access(&[&amd], &machine(), "")), ["/dev/kfd"]);
        let npu = gpu("0000:af:00.0", "intel_vpu");
        assert_eq!(
            paths(&vendor_access(&[&npu], &machine(), "")),
            ["/dev/accel/accel0"]
        );
    }

    /// Capability nodes get their directory once; a job user owns every node.
    #[test]
    fn the_private_dev_gets_each_node_once_with_its_directory() {
        let g = gpu("0000:5e:00.0", "nvidia");
        let a = vendor_access(&[&g], &machine(), "");
        let steps = dev_steps(&a.nodes, Some(1000));
        let text: Vec<String> = steps
            .iter()
            .map(|s| match s {
                Step::Mkdir { path, mode } => format!("mkdir {} {mode:o}", path.to_string_lossy()),
                Step::Mknod {
                    path, dev, owner, ..
                } => format!(
                    "mknod {} {}:{} uid {}",
                    path.to_string_lossy(),
                    dev.0,
                    dev.1,
                    owner.0
                ),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(
            text,
            [
                "mknod /dev/nvidia1 195:1 uid 1000",
                "mkdir /dev/nvidia-caps 755",
                "mknod /dev/nvidia-caps/nvidia-cap21 236:21 uid 1000",
                "mknod /dev/nvidiactl 195:255 uid 1000",
                "mknod /dev/nvidia-uvm 509:0 uid 1000",
                "mknod /dev/nvidia-uvm-tools 509:1 uid 1000",
                "mknod /dev/nvidia-modeset 195:254 uid 1000",
            ]
        );
        for s in &steps {
            if let Step::Mknod { mode, .. } = s {
                assert_eq!(mode & 0o600, 0o600);
            }
        }
    }

    /// IMEX channels are never given by default, to any job, and their major is denied:
    /// from the channel nodes found and, with none in /dev, from `/proc/devices`'s name.
    #[test]
    fn imex_channels_are_never_given_and_their_major_is_denied() {
        let mut m = machine();
        m.nodes.push(node(
            "/dev/nvidia-caps-imex-channels/channel0",
            VendorNodeKind::NvidiaImexChannel,
            (237, 0),
            None,
        ));
        let nv = gpu("0000:5e:00.0", "nvidia");
        let a = vendor_access(&[&nv], &m, "");
        assert!(!paths(&a).iter().any(|p| p.contains("imex")), "{a:?}");
        assert!(a.majors.contains(&237), "{:?}", a.majors);
        let none = vendor_access(&[], &m, "");
        assert!(none.nodes.is_empty() && none.majors.contains(&237));
        let devices = "Character devices:\n195 nvidia-frontend\n237 nvidia-caps-imex-channels\n";
        let a = vendor_access(&[&nv], &machine(), devices);
        assert!(a.majors.contains(&237), "{:?}", a.majors);
        // The job's device program denies every channel, and still allows its GPU.
        use super::super::devprog::{Access, DevType, Policy, Request};
        let policy = Policy::only_nodes(
            &a.nodes.iter().map(|n| n.dev).collect::<Vec<_>>(),
            &a.majors,
        );
        let open = |major, minor| Request {
            dev_type: DevType::Char,
            major,
            minor,
            access: Access::READ | Access::WRITE,
        };
        for minor in [0, 1, 2047] {
            assert!(!policy.allows(open(237, minor)), "channel{minor}");
        }
        assert!(policy.allows(open(195, 1)));
    }

    /// A GPU with an unidentified node is named; others are not held up by it.
    #[test]
    fn a_gpu_with_an_unidentified_node_is_found() {
        let mut r = machine();
        r.unidentified.push(Unidentified {
            kind: VendorNodeKind::NvidiaGpu,
            source: PathBuf::from("/proc/driver/nvidia/gpus/0000:3b:00.0/information"),
            owner: Some("0000:3b:00.0".into()),
            reason: crate::vendor::Reason::NoFile,
        });
        let (bad, good) = (gpu("0000:3b:00.0", "nvidia"), gpu("0000:5e:00.0", "nvidia"));
        assert!(unidentified_of(&[&good], &r).is_none());
        let (g, u) = unidentified_of(&[&good, &bad], &r).unwrap();
        assert_eq!(g.bus_id.as_deref(), Some("0000:3b:00.0"));
        assert_eq!(u.reason, crate::vendor::Reason::NoFile);
    }

    #[test]
    fn nodes_are_placed_only_under_dev() {
        let root = std::path::Path::new("/dev");
        let n = |p: &str| node(p, VendorNodeKind::NvidiaCap, (236, 1), None);
        assert_eq!(
            dev_relative(&n("/dev/nvidia-caps/nvidia-cap1"), root).as_deref(),
            Some("nvidia-caps/nvidia-cap1")
        );
        assert_eq!(dev_relative(&n("/etc/passwd"), root), None);
        assert_eq!(dev_relative(&n("/dev/../etc/x"), root), None);
        assert_eq!(dev_relative(&n("/dev"), root), None);
    }
}
