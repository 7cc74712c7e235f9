//! Slurm: `gres.conf` lines for the GPUs, and a TaskProlog's environment.
//!
//! `drmtool slurm gres-conf` lists every GPU in the ordering (`drmtool devices`), one line
//! each, so that the n-th GPU line of the node's gres.conf is GPU index n: Slurm numbers a
//! node's `gpu` GRES in file order, and hands a job those numbers (`SLURM_JOB_GPUS`,
//! `SLURM_STEP_GPUS`), which `drmtool slurm task-env` turns back into the vendor variables.
//! `File=` is the node Slurm's `ConstrainDevices` then allows a job ([`gres_file`]): an
//! NVIDIA GPU's `/dev/nvidiaN` (what CUDA opens, and what Slurm's own NVIDIA support
//! names), else the render node (what compute opens: an amdgpu GPU's for ROCm, which reaches
//! each GPU through it), else an accelerator's `/dev/accel/accelN`, else the card node;
//! `Type=` the GPU's driver ([`crate::gpu::Gpu::driver`]); `Cores=` the GPU's local CPUs as
//! Slurm's abstract core indices, left out where every CPU is local (no NUMA affinity to
//! state).

use crate::gpu::Gpu;
use std::path::Path;

/// Parses a kernel CPU list (`0-3,8,10-11`, a trailing newline allowed; empty: no CPUs),
/// sorted: [`crate::topo::near::parse_cpus`], the one CPU-list parser.
pub fn parse_cpulist(s: &str) -> Option<Vec<u32>> {
    let s = s.trim();
    if s.is_empty() {
        return Some(Vec::new());
    }
    crate::topo::near::parse_cpus(s)
}

pub use crate::sysfs::cpu_ranges as ranges;

/// Slurm's abstract core index of each CPU: cores numbered 0.. in (package, core id)
/// order, as `(cpu, package, core_id)` triples give them.
pub fn core_indices(topology: &[(u32, u32, u32)]) -> std::collections::BTreeMap<u32, u32> {
    let mut cores: Vec<(u32, u32)> = topology.iter().map(|&(_, p, c)| (p, c)).collect();
    cores.sort_unstable();
    cores.dedup();
    topology
        .iter()
        .filter_map(|&(cpu, p, c)| {
            let idx = cores.binary_search(&(p, c)).ok()?;
            Some((cpu, u32::try_from(idx).ok()?))
        })
        .collect()
}

/// The machine's CPU topology from sysfs: `(cpu, physical_package_id, core_id)`.
pub fn topology() -> Vec<(u32, u32, u32)> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/sys/devices/system/cpu") else {
        return out;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(cpu) = name
            .to_str()
            .and_then(|n| n.strip_prefix("cpu"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let read = |f: &str| -> Option<u32> {
            std::fs::read_to_string(e.path().join("topology").join(f))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        if let (Some(p), Some(c)) = (read("physical_package_id"), read("core_id")) {
            out.push((cpu, p, c));
        }
    }
    out.sort_unstable();
    out
}

/// `Type=`: the driver name with anything but `[A-Za-z0-9_-]` as `_` (a GRES type is one
/// word), `unknown` without a driver.
fn gres_type(g: &Gpu) -> String {
    g.driver
        .as_deref()
        .unwrap_or("unknown")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The node gres.conf's `File=` names for `g`: its NVIDIA node (`/dev/nvidiaN`), else its
/// render node, else its accelerator node (`/dev/accel/accelN`), else its card node.
pub fn gres_file(g: &Gpu) -> Option<&Path> {
    g.nvidia()
        .map(|n| n.path.as_path())
        .or_else(|| g.render().map(|n| n.path.as_path()))
        .or_else(|| g.accel().map(|n| n.path.as_path()))
        .or_else(|| g.card().map(|n| n.path.as_path()))
}

/// gres.conf text for `gpus` (in the ordering, with their vendor nodes: [`crate::gpu::gpus`]),
/// `topology` being the machine's CPUs.
pub fn gres_conf(gpus: &[Gpu], topology: &[(u32, u32, u32)]) -> String {
    gres_conf_linked(gpus, topology, &|_, _| None)
}

/// [`gres_conf`] with `Links=` on every line, from `pair(a, b)`: the class between the GPUs
/// of ordering indices `a` and `b` ([`crate::topo::slurm_links`]: -1 the GPU itself, 4
/// PIX, 3 PXB, 2 PHB, 1 NODE, 0 SYS and no class), in the order of the file's GPU lines.
/// Left out where no two GPUs of the file have a class (nothing to rank by).
pub fn gres_conf_linked(
    gpus: &[Gpu],
    topology: &[(u32, u32, u32)],
    pair: &dyn Fn(usize, usize) -> Option<crate::topo::Class>,
) -> String {
    let listed: Vec<usize> = gpus
        .iter()
        .filter(|g| gres_file(g).is_some())
        .map(|g| g.index)
        .collect();
    let linked = listed
        .iter()
        .any(|&a| listed.iter().any(|&b| a != b && pair(a, b).is_some()));
    let links = |a: usize| -> String {
        let v: Vec<String> = listed
            .iter()
            .map(|&b| {
                let c = if a == b {
                    Some(crate::topo::Class::Same)
                } else {
                    pair(a, b)
                };
                c.map_or(0, crate::topo::slurm_links).to_string()
            })
            .collect();
        format!(" Links={}", v.join(","))
    };
    let cores = core_indices(topology);
    let all_cpus = topology.len();
    // Each GPU's core indices where its local CPUs are some, not all, of the machine's.
    let bound_of = |g: &Gpu| -> Option<Vec<u32>> {
        let cpus = g.local_cpulist.as_deref().and_then(parse_cpulist)?;
        if cpus.is_empty() || cpus.len() >= all_cpus {
            return None;
        }
        let mut idx: Vec<u32> = cpus.iter().filter_map(|c| cores.get(c).copied()).collect();
        idx.sort_unstable();
        idx.dedup();
        (!idx.is_empty()).then_some(idx)
    };
    // slurmctld wants Cores= on every record of a node once one has it ("gres/gpu: has CPUs
    // configured for only some of the records"): then the others get every core.
    let bound: Vec<Option<Vec<u32>>> = gpus.iter().map(bound_of).collect();
    let any_bound = gpus
        .iter()
        .zip(&bound)
        .any(|(g, b)| gres_file(g).is_some() && b.is_some());
    let every_core: Vec<u32> = {
        let mut v: Vec<u32> = cores.values().copied().collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let mut out = String::from(
        "# drmtool slurm gres-conf: one line per GPU, in drmtool's ordering (drmtool \
         devices):\n# the n-th line is GPU index n, as drmtool slurm task-env reads \
         SLURM_STEP_GPUS.\n",
    );
    for (g, bound) in gpus.iter().zip(bound) {
        let Some(file) = gres_file(g) else {
            out.push_str(&format!("# GPU {} ({}) has no node\n", g.index, g.name));
            continue;
        };
        let mut line = format!("Name=gpu Type={} File={}", gres_type(g), file.display());
        match bound {
            Some(idx) => line.push_str(&format!(" Cores={}", ranges(&idx))),
            None if any_bound && !every_core.is_empty() => {
                line.push_str(&format!(" Cores={}", ranges(&every_core)));
            }
            None => {}
        }
        if linked {
            line.push_str(&links(g.index));
        }
        line.push_str(&format!(
            "  # GPU {}: {}{}\n",
            g.index,
            g.bus_id.as_deref().unwrap_or(&g.name),
            g.driver
                .as_deref()
                .map(|d| format!(" {d}"))
                .unwrap_or_default()
        ));
        out.push_str(&line);
    }
    out
}

/// An entry of `SLURM_STEP_GPUS`/`SLURM_JOB_GPUS` that is not a GPU index of this node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("SLURM_STEP_GPUS/SLURM_JOB_GPUS {value:?}: {entry:?} is not a GPU index (0..{count})")]
pub struct JobGpusError {
    /// The variable's whole text.
    pub value: String,
    /// The entry that is not an index.
    pub entry: String,
    /// How many GPUs the node has (indices are `0..count`).
    pub count: usize,
}

/// The GPU indices a Slurm job step was given: `SLURM_STEP_GPUS`, else `SLURM_JOB_GPUS`
/// (comma-separated indices in gres.conf order); an error naming the variable's text when
/// an entry is not an index there.
pub fn job_gpus(
    step: Option<&str>,
    job: Option<&str>,
    count: usize,
) -> Result<Vec<usize>, JobGpusError> {
    let Some(v) = step.or(job) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for p in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match p.parse::<usize>() {
            Ok(i) if i < count => {
                if !out.contains(&i) {
                    out.push(i);
                }
            }
            _ => {
                return Err(JobGpusError {
                    value: v.to_string(),
                    entry: p.to_string(),
                    count,
                });
            }
        }
    }
    Ok(out)
}

/// The TaskProlog lines (`export KEY=VALUE`) for a step given GPUs `idx` (indices into
/// `all`, as [`job_gpus`] reads them): `DRMTOOL_GPUS` and the vendor variables. With
/// `constrained` (Slurm's `ConstrainDevices=yes`: the job opens only its GPUs, and CUDA,
/// ROCm and Level Zero number those from 0) the positions count among the step's GPUs, as
/// inside a `drmtool run` job ([`crate::isolate::env::vendor_env_in_job`]), which is also
/// what Slurm sets `CUDA_VISIBLE_DEVICES` to there; without it (a job that sees every GPU)
/// among all the machine's, as `run --env-only` prints them. Empty without GPUs.
pub fn task_env(idx: &[usize], all: &[Gpu], constrained: bool) -> String {
    let chosen: Vec<&Gpu> = idx.iter().filter_map(|&i| all.get(i)).collect();
    if chosen.is_empty() {
        return String::new();
    }
    let ids: Vec<String> = chosen.iter().map(|g| g.index.to_string()).collect();
    let mut text = format!("export DRMTOOL_GPUS={}\n", ids.join(","));
    let vars = if constrained {
        crate::isolate::env::vendor_env_in_job(&chosen)
    } else {
        crate::isolate::env::vendor_env(&chosen, all)
    };
    for (k, v) in vars {
        text.push_str(&format!("export {k}={v}\n"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::Node;
    use crate::vendor::{VendorNode, VendorNodeKind};
    use drm_gem::NodeKind;

    fn gpu(index: usize, driver: &str, nodes: &[(&str, NodeKind)], cpus: Option<&str>) -> Gpu {
        Gpu {
            index,
            bus_id: Some(format!("0000:00:0{index}.0")),
            name: format!("0000:00:0{index}.0"),
            driver: Some(driver.into()),
            pci_id: None,
            nodes: nodes
                .iter()
                .map(|(p, k)| Node {
                    path: p.into(),
                    kind: *k,
                    dev: (226, 0),
                    by_path: None,
                })
                .collect(),
            vendor_nodes: Vec::new(),
            numa_node: None,
            local_cpulist: cpus.map(str::to_string),
        }
    }

    #[test]
    fn cpulists_and_ranges() {
        assert_eq!(
            parse_cpulist("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpulist(""), Some(vec![]));
        assert_eq!(parse_cpulist("3-1"), None);
        assert_eq!(parse_cpulist("0-4294967295"), None, "bounded");
        assert_eq!(parse_cpulist("x"), None);
        assert_eq!(ranges(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(ranges(&[]), "");
    }

    #[test]
    fn gres_lines_follow_the_ordering_with_render_nodes_and_local_cores() {
        // Two sockets of two cores with two threads each: cpus 0-3 on socket 0, 4-7 on 1.
        let topo: Vec<(u32, u32, u32)> = (0..8).map(|c| (c, c / 4, (c % 4) / 2)).collect();
        let gs = [
            gpu(
                0,
                "virtio_gpu",
                &[
                    ("/dev/dri/card1", NodeKind::Primary),
                    ("/dev/dri/renderD128", NodeKind::Render),
                ],
                Some("4-7"),
            ),
            gpu(
                1,
                "vkms",
                &[("/dev/dri/card0", NodeKind::Primary)],
                Some("0-7"),
            ),
        ];
        let text = gres_conf(&gs, &topo);
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            lines,
            [
                "Name=gpu Type=virtio_gpu File=/dev/dri/renderD128 Cores=2-3  # GPU 0: 0000:00:00.0 virtio_gpu",
                // Every core: slurmctld wants Cores= on all of a node's records once one
                // has it.
                "Name=gpu Type=vkms File=/dev/dri/card0 Cores=0-3  # GPU 1: 0000:00:01.0 vkms",
            ]
        );
        assert!(
            !gres_conf(&gs[1..], &topo).contains("Cores="),
            "no GPU bound: no Cores= at all"
        );
    }

    #[test]
    fn links_follow_the_classes_in_file_order() {
        use crate::topo::Class;
        let gs = vec![
            gpu(
                0,
                "virtio_gpu",
                &[("/dev/dri/renderD128", NodeKind::Render)],
                None,
            ),
            gpu(
                1,
                "virtio_gpu",
                &[("/dev/dri/renderD129", NodeKind::Render)],
                None,
            ),
            gpu(
                2,
                "vgem",
                &[("/dev/dri/renderD130", NodeKind::Render)],
                None,
            ),
        ];
        let pair = |a: usize, b: usize| match (a.min(b), a.max(b)) {
            (0, 1) => Some(Class::Sys),
            _ => None,
        };
        let text = gres_conf_linked(&gs, &[], &pair);
        let links: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| {
                l.split(" Links=")
                    .nth(1)
                    .unwrap()
                    .split(' ')
                    .next()
                    .unwrap()
            })
            .collect();
        assert_eq!(links, ["-1,0,0", "0,-1,0", "0,0,-1"]);
        let pix = |a: usize, b: usize| (a.max(b) < 2).then_some(Class::Pix);
        let text = gres_conf_linked(&gs, &[], &pix);
        assert!(text.contains("renderD128 Links=-1,4,0  #"), "{text}");
        assert!(
            !gres_conf(&gs, &[]).contains("Links="),
            "no classes: no Links"
        );
    }

    #[test]
    fn job_gpus_from_slurm_variables() {
        assert_eq!(
            job_gpus(Some("1,0"), Some("2"), 3),
            Ok(vec![1, 0]),
            "the step's first"
        );
        assert_eq!(job_gpus(None, Some("2"), 3), Ok(vec![2]));
        assert_eq!(job_gpus(None, None, 3), Ok(vec![]));
        assert!(job_gpus(Some("3"), None, 3).is_err());
        assert!(job_gpus(Some("gpu:1"), None, 3).is_err());
    }

    fn vendor(path: &str, kind: VendorNodeKind, dev: (u32, u32), owner: &str) -> VendorNode {
        VendorNode {
            path: path.into(),
            kind,
            dev,
            owner: Some(owner.into()),
            mode: None,
            present: true,
        }
    }

    /// Per vendor: an NVIDIA GPU by `/dev/nvidiaN` whether or not nvidia-drm gives it DRM
    /// nodes; an amdgpu by its render node (not kfd, which is shared); an accel-only device
    /// by its accel node; a platform GPU by its render node, else its card node.
    #[test]
    fn gres_files_per_vendor() {
        use VendorNodeKind as K;
        let mut nv_drm = gpu(
            0,
            "nvidia-drm",
            &[
                ("/dev/dri/card1", NodeKind::Primary),
                ("/dev/dri/renderD128", NodeKind::Render),
            ],
            None,
        );
        nv_drm.vendor_nodes = vec![
            vendor("/dev/nvidia0", K::NvidiaGpu, (195, 0), "0000:00:00.0"),
            vendor(
                "/dev/nvidia-caps/nvidia-cap21",
                K::NvidiaCap,
                (236, 21),
                "0000:00:00.0",
            ),
        ];
        let mut nv = gpu(1, "nvidia", &[], None);
        nv.vendor_nodes = vec![vendor(
            "/dev/nvidia1",
            K::NvidiaGpu,
            (195, 1),
            "0000:00:01.0",
        )];
        let amd = gpu(
            2,
            "amdgpu",
            &[
                ("/dev/dri/card2", NodeKind::Primary),
                ("/dev/dri/renderD129", NodeKind::Render),
            ],
            None,
        );
        let mut npu = gpu(3, "intel_vpu", &[], None);
        npu.vendor_nodes = vec![vendor(
            "/dev/accel/accel0",
            K::Accel,
            (261, 0),
            "0000:00:03.0",
        )];
        let mut vkms = gpu(4, "vkms", &[("/dev/dri/card0", NodeKind::Primary)], None);
        (vkms.bus_id, vkms.name) = (None, "vkms".into());
        let mut vgem = gpu(
            5,
            "vgem",
            &[
                ("/dev/dri/card3", NodeKind::Primary),
                ("/dev/dri/renderD130", NodeKind::Render),
            ],
            None,
        );
        (vgem.bus_id, vgem.name) = (None, "vgem".into());
        let none = gpu(6, "x", &[], None);
        let gs = [nv_drm, nv, amd, npu, vkms, vgem, none];
        let files: Vec<Option<&Path>> = gs.iter().map(gres_file).collect();
        assert_eq!(
            files,
            [
                Some(Path::new("/dev/nvidia0")),
                Some(Path::new("/dev/nvidia1")),
                Some(Path::new("/dev/dri/renderD129")),
                Some(Path::new("/dev/accel/accel0")),
                Some(Path::new("/dev/dri/card0")),
                Some(Path::new("/dev/dri/renderD130")),
                None,
            ]
        );
        let text = gres_conf(&gs, &[]);
        let lines: Vec<&str> = text.lines().skip(2).collect();
        assert_eq!(
            lines,
            [
                "Name=gpu Type=nvidia-drm File=/dev/nvidia0  # GPU 0: 0000:00:00.0 nvidia-drm",
                "Name=gpu Type=nvidia File=/dev/nvidia1  # GPU 1: 0000:00:01.0 nvidia",
                "Name=gpu Type=amdgpu File=/dev/dri/renderD129  # GPU 2: 0000:00:02.0 amdgpu",
                "Name=gpu Type=intel_vpu File=/dev/accel/accel0  # GPU 3: 0000:00:03.0 intel_vpu",
                "Name=gpu Type=vkms File=/dev/dri/card0  # GPU 4: vkms vkms",
                "Name=gpu Type=vgem File=/dev/dri/renderD130  # GPU 5: vgem vgem",
                "# GPU 6 (0000:00:06.0) has no node",
            ]
        );
    }

    /// Under ConstrainDevices a step's CUDA_VISIBLE_DEVICES counts among its own GPUs
    /// (0..n-1, bus order); `--unconstrained` among all the machine's.
    #[test]
    fn task_env_counts_among_the_steps_gpus() {
        let nvidia = |index: usize| {
            let mut g = gpu(index, "nvidia", &[], None);
            g.pci_id = Some((0x10de, 0x2330));
            g
        };
        let all = [nvidia(0), nvidia(1), nvidia(2), nvidia(3)];
        let constrained = task_env(&[3, 1], &all, true);
        assert!(
            constrained.starts_with("export DRMTOOL_GPUS=3,1\n"),
            "{constrained}"
        );
        assert!(
            constrained.contains("export CUDA_VISIBLE_DEVICES=1,0\n"),
            "{constrained}"
        );
        assert!(constrained.contains("export CUDA_DEVICE_ORDER=PCI_BUS_ID\n"));
        let open = task_env(&[3, 1], &all, false);
        assert!(open.contains("export CUDA_VISIBLE_DEVICES=3,1\n"), "{open}");
        assert_eq!(task_env(&[], &all, true), "");
    }
}
