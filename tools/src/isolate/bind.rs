//! `drmtool run --bind`: the job's CPUs and memory nodes pinned to its GPUs' (what Slurm's
//! `--gres-flags=enforce-binding` and Kubernetes' single-numa-node policy give), by the
//! cgroup v2 cpuset controller.
//!
//! The job cgroup's `cpuset.cpus` is the union of the chosen GPUs' local CPUs (the kernel's
//! `local_cpulist` of each PCI function) and its `cpuset.mems` their NUMA nodes; where no
//! chosen GPU has a node (a machine without NUMA), `cpuset.mems` is left as the parent's.
//! Both are written once the job's init is in its cgroup and before it goes on ([`apply`]
//! says why), and read back; the effective CPUs must be non-empty and within the binding:
//! a binding that does not take runs nothing, as a memory limit that does not take. A GPU that is not on PCI (vgem, vkms) has no local
//! CPUs: `--bind` with it is refused, never guessed.
//!
//! ```
//! use drmtool::isolate::bind::Binding;
//! let b = Binding::of(&[("g0", Some("0-3"), Some(0)), ("g1", Some("2-5"), Some(0))]).unwrap();
//! assert_eq!((b.cpus.as_str(), b.mems.as_deref()), ("0-5", Some("0")));
//! assert!(Binding::of(&[("vgem", None, None)]).is_err());
//! ```

use crate::topo::near::parse_cpus;
use rustix::fd::BorrowedFd;
use std::path::Path;

/// The controller.
pub const CONTROLLER: &str = "cpuset";

/// Why a job cannot be bound.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    /// A chosen GPU with no local CPU list (not on PCI, or the kernel gives none).
    #[error("GPU {0}: no local CPUs (not on PCI): --bind cannot pin a job to it")]
    NoLocalCpus(String),
    /// The kernel has no cpuset controller for job cgroups.
    #[error("the cpuset cgroup controller is not available ({0}): --bind cannot be enforced")]
    NoController(String),
    /// A cgroup file could not be opened, read or written.
    #[error("{0}")]
    Io(String),
    /// The file does not read back what was written, or the effective CPUs are outside
    /// the binding or empty.
    #[error(
        "{file} of the job's cgroup reads {got:?} after {want:?} was written: the binding did not take, the job does not run"
    )]
    ReadBack {
        /// The file.
        file: String,
        /// What was written.
        want: String,
        /// What it reads.
        got: String,
    },
}

/// The CPUs and nodes a job is pinned to, as the kernel lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// `cpuset.cpus` (`0-3,8`).
    pub cpus: String,
    /// `cpuset.mems`, `None` where no chosen GPU has a NUMA node.
    pub mems: Option<String>,
}

impl Binding {
    /// The binding of GPUs given as `(name, local CPU list, NUMA node)`.
    ///
    /// # Errors
    /// [`BindError::NoLocalCpus`] for a GPU without a local CPU list (or one that does not
    /// read as a CPU list).
    pub fn of(gpus: &[(&str, Option<&str>, Option<u32>)]) -> Result<Binding, BindError> {
        let mut cpus = Vec::new();
        let mut mems = Vec::new();
        for (name, list, node) in gpus {
            let l = list
                .and_then(parse_cpus)
                .filter(|l| !l.is_empty())
                .ok_or_else(|| BindError::NoLocalCpus(name.to_string()))?;
            cpus.extend(l);
            mems.extend(*node);
        }
        cpus.sort_unstable();
        cpus.dedup();
        mems.sort_unstable();
        mems.dedup();
        Ok(Binding {
            cpus: crate::sysfs::cpu_ranges(&cpus),
            mems: (!mems.is_empty()).then(|| crate::sysfs::cpu_ranges(&mems)),
        })
    }

    /// The binding of the chosen GPUs.
    ///
    /// # Errors
    /// As [`Binding::of`].
    pub fn of_gpus(chosen: &[&crate::gpu::Gpu]) -> Result<Binding, BindError> {
        let g: Vec<(&str, Option<&str>, Option<u32>)> = chosen
            .iter()
            .map(|g| {
                let name = g.bus_id.as_deref().unwrap_or(&g.name);
                (name, g.local_cpulist.as_deref(), g.numa_node)
            })
            .collect();
        Binding::of(&g)
    }
}

fn io(e: crate::dmem::DmemError) -> BindError {
    BindError::Io(e.to_string())
}

/// Turns cpuset on for the children of the cgroup directory `dir` (at `path`).
///
/// # Errors
/// [`BindError::NoController`] where `dir` does not have it, [`BindError::Io`].
pub fn enable_for_children(dir: BorrowedFd<'_>, path: &Path) -> Result<(), BindError> {
    if crate::dmem::enable_controller(dir, path, CONTROLLER).map_err(io)? {
        Ok(())
    } else {
        Err(BindError::NoController(format!(
            "{} does not list it",
            path.join("cgroup.controllers").display()
        )))
    }
}

/// Turns cpuset on along the job cgroups' parent `rel` (the cgroup root and each directory
/// of `rel`).
///
/// # Errors
/// As [`enable_for_children`], or the parent's path that does not open.
pub fn enable_along(rel: &Path) -> Result<(), super::run::RunError> {
    super::anchor::walk_down(rel, |fd, path, _| -> Result<(), super::run::RunError> {
        Ok(enable_for_children(fd, path)?)
    })
}

/// Writes `b` into the job cgroup `job` (at `path`) and reads it back (see the
/// [module](self) docs). `run` writes it once the job's init is in the cgroup and before
/// the init goes on: a task that `clone3` put into the cgroup (`CLONE_INTO_CGROUP`) keeps
/// its parent's CPUs and nodes on kernels before 6.3 ("cgroup/cpuset: Make cpuset_fork()
/// handle CLONE_INTO_CGROUP properly", v6.3), and only a change of the cgroup's
/// `cpuset.cpus`/`cpuset.mems` moves the tasks already in it (seen on src-5.15: the job
/// ran on every CPU with the binding written before the clone).
///
/// # Errors
/// [`BindError::ReadBack`] for a binding that did not take, [`BindError::Io`].
pub fn apply(job: BorrowedFd<'_>, path: &Path, b: &Binding) -> Result<(), BindError> {
    let mut files = vec![("cpuset.cpus", b.cpus.as_str())];
    if let Some(m) = &b.mems {
        files.push(("cpuset.mems", m.as_str()));
    }
    for (file, want) in &files {
        crate::dmem::cgroup_write(job, path, file, want).map_err(io)?;
    }
    for (file, want) in &files {
        let got = crate::dmem::cgroup_read(job, path, file).map_err(io)?;
        if parse_cpus(got.trim()) != parse_cpus(want) {
            return Err(BindError::ReadBack {
                file: path.join(file).display().to_string(),
                want: want.to_string(),
                got: got.trim().to_string(),
            });
        }
    }
    let eff = crate::dmem::cgroup_read(job, path, "cpuset.cpus.effective").map_err(io)?;
    let within = parse_cpus(eff.trim())
        .zip(parse_cpus(&b.cpus))
        .is_some_and(|(e, w)| !e.is_empty() && e.iter().all(|c| w.binary_search(c).is_ok()));
    if !within {
        return Err(BindError::ReadBack {
            file: path.join("cpuset.cpus.effective").display().to_string(),
            want: b.cpus.clone(),
            got: eff.trim().to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_union_of_the_gpus_cpus_and_their_nodes() {
        let b = Binding::of(&[
            ("a", Some("0-3,8"), Some(1)),
            ("b", Some("16-19"), Some(0)),
            ("c", Some("2"), None),
        ])
        .unwrap();
        assert_eq!(b.cpus, "0-3,8,16-19");
        assert_eq!(b.mems.as_deref(), Some("0-1"));
        let b = Binding::of(&[("a", Some("0-1"), None)]).unwrap();
        assert_eq!(b.mems, None, "no node: the parent's");
        assert_eq!(
            Binding::of(&[("a", Some("0-1"), None), ("b", Some("x"), None)]),
            Err(BindError::NoLocalCpus("b".into()))
        );
        assert_eq!(
            Binding::of(&[("a", Some(""), None)]),
            Err(BindError::NoLocalCpus("a".into()))
        );
    }
}
