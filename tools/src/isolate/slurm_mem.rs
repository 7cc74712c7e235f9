//! Slurm's `gpumem` count GRES as the job's GPU memory limit, enforced by the kernel's
//! dmem cgroup controller ([`crate::dmem`]).
//!
//! A job asks for a budget with `--gres=gpu:1,gpumem:4G` (`GresTypes=gpu,gpumem`, and the
//! node's `Gres=...,gpumem:<bytes>` with gres.conf's `Name=gpumem Count=<bytes>`, which
//! `drmtool slurm gres-conf --gpumem` prints). Slurm only counts it; the root Prolog
//! `drmtool slurm prolog` makes it the job's `dmem.max`:
//!
//! - **Timing** (measured with slurmd 22.05 on the debian-7.3 guest, with and without
//!   `PrologFlags=Contain`): the Prolog runs in slurmd's cgroup before any step of the job
//!   exists, so `job_<id>` is not there yet. Slurm's cgroup/v2 plugin makes
//!   `<scope>/job_<id>` with `mkdir` and takes one that exists, so the Prolog makes it
//!   first, with the limit already written: the job's first process starts under it. Slurm
//!   removes the directory when the job's last step ends; `drmtool slurm epilog` removes it
//!   where no step ever ran.
//! - **Controllers**: Slurm's plugin enables only the controllers it knows, so the Prolog
//!   writes `+dmem` into `cgroup.subtree_control` from the cgroup root down to the step
//!   scope (`system.slice/<node>_slurmstepd.scope` or `system.slice/slurmstepd.scope`,
//!   whichever slurmd made). A limit on `job_<id>` holds for all its steps: the kernel
//!   charges a cgroup without the controller to its nearest ancestor with it.
//! - **The budget** is per node (a count GRES): it is split evenly among the job's GPUs on
//!   the node (`SLURM_JOB_GPUS`), each GPU's share written for each of its regions, so the
//!   job's GPU memory on the node never passes what the scheduler counted.
//! - **Where it comes from**: `squeue --noheader --format=%b --jobs=<id>` (the job's
//!   TRES per node, a field the user cannot shape beyond a configured GRES name and a
//!   number); never the whole `scontrol show job` record, whose job name, comment and
//!   paths are the user's text and could forge a line.
//! - **Fails closed**: where the limit cannot be enforced (no dmem controller, a job GPU
//!   whose driver registers no region, no step scope, a value that does not read back) the
//!   Prolog exits non-zero, and Slurm drains the node and requeues the job: it never runs
//!   without the budget it asked for. A job given no GPU gets `0` on every region of the
//!   node (it asked for a budget and holds no GPU to spend it on).
//!
//! ```
//! use drmtool::isolate::slurm_mem::{gpumem_of_tres, share};
//! assert_eq!(gpumem_of_tres(7, "gres:gpu:qxl:1,gres:gpumem:16M").unwrap(), Some(16 << 20));
//! assert_eq!(gpumem_of_tres(7, "gres:gpu:1").unwrap(), None);
//! assert_eq!(share(16 << 20, 2), 8 << 20);
//! ```

use super::anchor::{self, AnchorError};
use super::run::RunError;
use super::slurm::JobGpusError;
use crate::dmem::{self, DmemError, Knob, Setting, Value};
use crate::gpu::Gpu;
use rustix::fd::AsFd;
use rustix::fs::Mode;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The GRES name of a job's GPU memory budget.
pub const GRES_NAME: &str = "gpumem";

/// Where a program's output is cut (a job's TRES line is short).
const MAX_OUTPUT: u64 = 64 * 1024;

/// Why the Prolog or Epilog could not do its work.
#[derive(Debug, thiserror::Error)]
pub enum GpumemError {
    /// A variable slurmd gives its Prolog and Epilog is missing or not a job id.
    #[error("{var} is {got}: run this as Slurm's Prolog/Epilog (slurmd sets it)")]
    NotInProlog {
        /// The variable.
        var: &'static str,
        /// What it holds (`unset`, or its text).
        got: String,
    },
    /// `SLURM_JOB_GPUS` names no GPU of this node.
    #[error(transparent)]
    JobGpus(#[from] JobGpusError),
    /// The program that reads the job's GRES could not run or failed.
    #[error("{program} for job {job}: {why}")]
    Query {
        /// The program.
        program: String,
        /// The job.
        job: u64,
        /// Its errno, exit status or error output.
        why: String,
    },
    /// The job's TRES per node is not the list Slurm prints.
    #[error("job {job}'s TRES per node {text:?}: {why}")]
    BadTres {
        /// The job.
        job: u64,
        /// The text (escaped by `{:?}`).
        text: String,
        /// What is wrong.
        why: &'static str,
    },
    /// slurmd's step scope is not under the cgroup root.
    #[error(
        "no Slurm step scope under {root} (tried {tried}): is slurmd running with \
         CgroupPlugin=cgroup/v2?"
    )]
    NoScope {
        /// The cgroup root.
        root: String,
        /// The paths tried.
        tried: String,
    },
    /// A directory on the way to the job's cgroup is not root's alone.
    #[error(transparent)]
    Anchor(#[from] AnchorError),
    /// The limit could not be set (no controller, no region, not read back, an errno).
    #[error("job {job}'s {GRES_NAME} budget ({budget} bytes on this node): {source}")]
    Dmem {
        /// The job.
        job: u64,
        /// Its budget on this node.
        budget: u64,
        /// Why.
        source: DmemError,
    },
    /// The GPUs could not be listed, or the controller turned on.
    #[error(transparent)]
    Run(#[from] RunError),
}

/// The budget in `tres`, a job's TRES per node as squeue's `%b` prints it
/// (`gres:gpu:qxl:1,gres:gpumem:16M`; also `gres/` for `gres:`): `None` when it asks
/// none. Counts take Slurm's suffixes K, M, G, T and P (powers of 1024).
///
/// # Errors
/// [`GpumemError::BadTres`] (naming `job`) for a malformed `gpumem` entry or two of them.
pub fn gpumem_of_tres(job: u64, tres: &str) -> Result<Option<u64>, GpumemError> {
    let bad = |why| GpumemError::BadTres {
        job,
        text: tres.to_string(),
        why,
    };
    let mut found = None;
    for item in tres.trim().split(',').filter(|i| !i.is_empty()) {
        let Some(rest) = item
            .strip_prefix("gres:")
            .or_else(|| item.strip_prefix("gres/"))
        else {
            continue;
        };
        let parts: Vec<&str> = rest.split(':').collect();
        if parts.first() != Some(&GRES_NAME) {
            continue;
        }
        // gpumem:COUNT, or gpumem:TYPE:COUNT; a bare gpumem is a count of 1.
        let count = match parts.len() {
            1 => 1,
            2 | 3 => slurm_count(parts[parts.len() - 1]).ok_or_else(|| bad("not a count"))?,
            _ => return Err(bad("too many fields")),
        };
        if found.replace(count).is_some() {
            return Err(bad("gpumem twice"));
        }
    }
    Ok(found)
}

/// A GRES count: digits with an optional K, M, G, T or P (powers of 1024).
fn slurm_count(s: &str) -> Option<u64> {
    let (digits, shift) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 10),
        b'M' | b'm' => (&s[..s.len() - 1], 20),
        b'G' | b'g' => (&s[..s.len() - 1], 30),
        b'T' | b't' => (&s[..s.len() - 1], 40),
        b'P' | b'p' => (&s[..s.len() - 1], 50),
        _ => (s, 0),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// Each GPU's share of a node's budget among `gpus` GPUs (rounded down; all of it for
/// one, none for no GPU).
pub fn share(budget: u64, gpus: usize) -> u64 {
    match u64::try_from(gpus) {
        Ok(0) | Err(_) => 0,
        Ok(n) => budget / n,
    }
}

/// The step scopes slurmd makes, relative to the cgroup root, in the order tried: the
/// one named after the node (a node that runs several slurmds), then the plain one.
pub fn scope_candidates(node: Option<&str>) -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(n) = node.filter(|n| !n.is_empty() && !n.contains('/') && !n.starts_with('.')) {
        v.push(PathBuf::from(format!("system.slice/{n}_slurmstepd.scope")));
    }
    v.push(PathBuf::from("system.slice/slurmstepd.scope"));
    v
}

/// What the Prolog is given: slurmd's variables, and the programs and paths it uses.
#[derive(Debug, Clone, Default)]
pub struct PrologInput {
    /// `SLURM_JOB_ID`.
    pub job_id: Option<String>,
    /// `SLURMD_NODENAME`.
    pub node: Option<String>,
    /// `SLURM_JOB_GPUS`.
    pub job_gpus: Option<String>,
    /// squeue's path (a Prolog has no search path).
    pub squeue: PathBuf,
    /// The step scope relative to the cgroup root, when not found by probe.
    pub scope: Option<PathBuf>,
}

/// What the Prolog did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrologOutcome {
    /// The job asks no `gpumem`: nothing was written.
    NotAsked {
        /// The job.
        job: u64,
    },
    /// The job's cgroup holds its limit, read back.
    Limited {
        /// The job.
        job: u64,
        /// Its budget on this node.
        budget: u64,
        /// The job's cgroup.
        cgroup: PathBuf,
        /// What was written there.
        settings: Vec<Setting>,
    },
}

/// The job id in `v` (`SLURM_JOB_ID`).
fn job_id(v: Option<&str>) -> Result<u64, GpumemError> {
    let got = v.map_or_else(|| "unset".to_string(), |s| format!("{s:?}"));
    v.and_then(|s| s.parse::<u64>().ok())
        .filter(|&j| j > 0)
        .ok_or(GpumemError::NotInProlog {
            var: "SLURM_JOB_ID",
            got,
        })
}

/// The job's TRES per node, from squeue.
fn query_tres(squeue: &Path, job: u64) -> Result<String, GpumemError> {
    let fail = |why: String| GpumemError::Query {
        program: squeue.display().to_string(),
        job,
        why,
    };
    let mut child = std::process::Command::new(squeue)
        .args(["--noheader", "--format=%b", &format!("--jobs={job}")])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| fail(e.to_string()))?;
    let mut out = Vec::new();
    if let Some(o) = child.stdout.take() {
        o.take(MAX_OUTPUT)
            .read_to_end(&mut out)
            .map_err(|e| fail(e.to_string()))?;
    }
    let mut err = Vec::new();
    if let Some(e) = child.stderr.take() {
        let _ = e.take(MAX_OUTPUT).read_to_end(&mut err);
    }
    let st = child.wait().map_err(|e| fail(e.to_string()))?;
    if !st.success() {
        let text = crate::untrusted::Untrusted::new(err.trim_ascii()).escaped();
        return Err(fail(format!("{st}: {text}")));
    }
    let text = String::from_utf8_lossy(&out).into_owned();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    match lines.as_slice() {
        [one] => Ok(one.trim().to_string()),
        _ => Err(fail(format!(
            "{} lines where one was expected",
            lines.len()
        ))),
    }
}

/// The step scope: `given`, else the first of [`scope_candidates`]; either way one that is
/// a directory already (a scope slurmd has not made is never made here: `--scope` with a
/// typo fails closed instead of growing a cgroup no job runs in).
fn find_scope(given: Option<&Path>, node: Option<&str>) -> Result<PathBuf, GpumemError> {
    let root = Path::new(super::cgroup::ROOT);
    let cands = match given {
        Some(g) => vec![g.to_path_buf()],
        None => scope_candidates(node),
    };
    cands
        .iter()
        .find(|c| std::fs::symlink_metadata(root.join(c)).is_ok_and(|m| m.file_type().is_dir()))
        .cloned()
        .ok_or_else(|| GpumemError::NoScope {
            root: root.display().to_string(),
            tried: cands
                .iter()
                .map(|c| c.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// The Prolog: the job's `gpumem` budget on this node written as `dmem.max` of
/// `<scope>/job_<id>` (made here when Slurm has not made it yet), on every region of the
/// job's GPUs (each GPU an even share), every value read back. Nothing is written for a
/// job that asks no budget.
///
/// # Errors
/// [`GpumemError`]: the caller exits non-zero, and Slurm drains the node and requeues the
/// job.
pub fn prolog(input: &PrologInput) -> Result<PrologOutcome, GpumemError> {
    let job = job_id(input.job_id.as_deref())?;
    let tres = query_tres(&input.squeue, job)?;
    let Some(budget) = gpumem_of_tres(job, &tres)? else {
        return Ok(PrologOutcome::NotAsked { job });
    };
    let all = super::choose::all_gpus()?;
    let idx = super::slurm::job_gpus(None, input.job_gpus.as_deref(), all.len())?;
    let chosen: Vec<&Gpu> = idx.iter().filter_map(|&i| all.get(i)).collect();
    let dmem_err = |source| GpumemError::Dmem {
        job,
        budget,
        source,
    };
    let cap = dmem::Capacity::read(&dmem::root()).map_err(dmem_err)?;
    let settings = if chosen.is_empty() {
        // No GPU to spend it on: nothing on any region.
        let Some(cap) = cap.as_ref() else {
            return Err(dmem_err(DmemError::NoController(format!(
                "no {} in the cgroup root",
                dmem::CAPACITY_FILE
            ))));
        };
        cap.regions
            .iter()
            .map(|(r, _)| Setting {
                knob: Knob::Max,
                region: r.clone(),
                value: Value::Bytes(0),
            })
            .collect()
    } else {
        let req = dmem::LimitRequest {
            knob: Knob::Max,
            region: None,
            value: Value::Bytes(share(budget, chosen.len())),
        };
        let refs: Vec<dmem::GpuRef<'_>> = chosen
            .iter()
            .map(|g| dmem::GpuRef {
                device: &g.name,
                driver: g.driver.as_deref().unwrap_or("no driver"),
            })
            .collect();
        dmem::plan(&[req], cap.as_ref(), &refs).map_err(dmem_err)?
    };
    let scope = find_scope(input.scope.as_deref(), input.node.as_deref())?;
    let parent = anchor::open_parent(&scope)?;
    super::memlimit::enable_along(&scope, &[])?;
    let name = format!("job_{job}");
    let path = parent.path.join(&name);
    match rustix::fs::mkdirat(&parent.fd, name.as_str(), Mode::from_raw_mode(0o755)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(errno) => {
            return Err(AnchorError::Io {
                what: format!("mkdir {}", path.display()),
                errno,
            }
            .into());
        }
    }
    let fd = anchor::open_checked(&parent.fd, &name, &path)?;
    dmem::apply(fd.as_fd(), &path, &settings).map_err(dmem_err)?;
    Ok(PrologOutcome::Limited {
        job,
        budget,
        cgroup: path,
        settings,
    })
}

/// What the Epilog did with the job's cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpilogOutcome {
    /// Slurm had removed it (or it never was).
    Gone,
    /// It was left (a job whose steps never ran) and is removed now.
    Removed,
    /// Processes remain in it; Slurm removes it when they end.
    Busy,
}

/// The Epilog: removes `<scope>/job_<id>` where the Prolog made it and no step of the job
/// ever ran (Slurm removes it otherwise).
///
/// # Errors
/// [`GpumemError::NotInProlog`], [`GpumemError::NoScope`], [`GpumemError::Anchor`].
pub fn epilog(input: &PrologInput) -> Result<EpilogOutcome, GpumemError> {
    let job = job_id(input.job_id.as_deref())?;
    let scope = match find_scope(input.scope.as_deref(), input.node.as_deref()) {
        Ok(s) => s,
        Err(GpumemError::NoScope { .. }) => return Ok(EpilogOutcome::Gone),
        Err(e) => return Err(e),
    };
    let parent = anchor::open_parent(&scope)?;
    let name = format!("job_{job}");
    match rustix::fs::unlinkat(&parent.fd, name.as_str(), rustix::fs::AtFlags::REMOVEDIR) {
        Ok(()) => Ok(EpilogOutcome::Removed),
        Err(rustix::io::Errno::NOENT) => Ok(EpilogOutcome::Gone),
        Err(rustix::io::Errno::BUSY | rustix::io::Errno::NOTEMPTY) => Ok(EpilogOutcome::Busy),
        Err(errno) => Err(AnchorError::Io {
            what: format!("rmdir {}", parent.path.join(&name).display()),
            errno,
        }
        .into()),
    }
}

/// The gres.conf line of a node's whole GPU memory, `Name=gpumem Count=<bytes>` (the sum
/// of the capacities of the GPUs' dmem regions), and a comment for each GPU whose driver
/// registers none (a job given it with a budget fails the Prolog). `None`: the kernel has
/// no dmem controller.
pub fn gres_conf_line(all: &[Gpu], cap: Option<&dmem::Capacity>) -> Option<String> {
    let cap = cap?;
    let mut total = 0u64;
    let mut out = String::new();
    for g in all {
        let regions = cap.regions_of(&g.name);
        if regions.is_empty() {
            out.push_str(&format!(
                "# GPU {} ({}): no dmem region; a job given it with a {GRES_NAME} budget \
                 fails the Prolog\n",
                g.index,
                g.driver.as_deref().unwrap_or("no driver")
            ));
        }
        for r in regions {
            total = total.saturating_add(cap.size_of(r).unwrap_or(0));
        }
    }
    out.push_str(&format!("Name={GRES_NAME} Count={total}\n"));
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tres_gives_the_budget_in_bytes() {
        assert_eq!(
            gpumem_of_tres(7, "gres:gpumem:16M").unwrap(),
            Some(16 << 20)
        );
        assert_eq!(
            gpumem_of_tres(7, "gres:gpu:qxl:1,gres:gpumem:4G").unwrap(),
            Some(4 << 30)
        );
        assert_eq!(gpumem_of_tres(7, "gres/gpumem:1024").unwrap(), Some(1024));
        assert_eq!(gpumem_of_tres(7, "gres:gpumem:big:2K").unwrap(), Some(2048));
        assert_eq!(gpumem_of_tres(7, "gres:gpumem").unwrap(), Some(1));
        assert_eq!(gpumem_of_tres(7, "gres:gpu:1").unwrap(), None);
        assert_eq!(gpumem_of_tres(7, "N/A").unwrap(), None);
        assert_eq!(gpumem_of_tres(7, "").unwrap(), None);
        // A GRES whose name starts like it is another one.
        assert_eq!(gpumem_of_tres(7, "gres:gpumemx:8M").unwrap(), None);
    }

    #[test]
    fn a_malformed_budget_is_refused() {
        for t in [
            "gres:gpumem:8X",
            "gres:gpumem:-1",
            "gres:gpumem:",
            "gres:gpumem:M",
            "gres:gpumem:a:b:8M",
            "gres:gpumem:8M,gres:gpumem:8M",
            "gres:gpumem:99999999999P",
        ] {
            assert!(
                matches!(gpumem_of_tres(7, t), Err(GpumemError::BadTres { .. })),
                "{t}"
            );
        }
    }

    #[test]
    fn the_budget_is_split_evenly() {
        assert_eq!(share(8 << 20, 1), 8 << 20);
        assert_eq!(share(9, 2), 4);
        assert_eq!(share(8 << 20, 0), 0);
    }

    #[test]
    fn a_given_scope_that_is_not_there_is_no_scope_never_made() {
        let given = Path::new("drmtool-no-such-step.scope");
        match find_scope(Some(given), Some("n1")) {
            Err(GpumemError::NoScope { tried, .. }) => {
                assert_eq!(tried, given.display().to_string())
            }
            other => panic!("{other:?}"),
        }
        assert!(!Path::new(super::super::cgroup::ROOT).join(given).exists());
    }

    #[test]
    fn scopes_are_tried_by_node_then_plain() {
        assert_eq!(
            scope_candidates(Some("n1")),
            vec![
                PathBuf::from("system.slice/n1_slurmstepd.scope"),
                PathBuf::from("system.slice/slurmstepd.scope")
            ]
        );
        // A node name that is not a plain name is not made into a path.
        for n in ["../x", "a/b", "", ".hidden"] {
            assert_eq!(
                scope_candidates(Some(n)),
                vec![PathBuf::from("system.slice/slurmstepd.scope")],
                "{n}"
            );
        }
    }

    #[test]
    fn the_job_id_must_be_a_number() {
        assert_eq!(job_id(Some("42")).unwrap(), 42);
        for v in [None, Some(""), Some("0"), Some("4x"), Some("-1")] {
            assert!(
                matches!(job_id(v), Err(GpumemError::NotInProlog { .. })),
                "{v:?}"
            );
        }
    }

    #[test]
    fn gres_conf_sums_the_regions_and_names_gpus_without() {
        let gpu = Gpu::bare;
        let cap = dmem::Capacity {
            regions: vec![
                ("drm/0000:00:07.0/vram0".into(), 64 << 20),
                ("drm/0000:00:08.0/vram0".into(), 32 << 20),
            ],
        };
        let all = [
            gpu(0, "0000:00:07.0", "qxl"),
            gpu(1, "vgem", "vgem"),
            gpu(2, "0000:00:08.0", "xe"),
        ];
        let text = gres_conf_line(&all, Some(&cap)).unwrap();
        assert_eq!(
            text,
            "# GPU 1 (vgem): no dmem region; a job given it with a gpumem budget fails the \
             Prolog\nName=gpumem Count=100663296\n"
        );
        assert_eq!(gres_conf_line(&all, None), None);
    }
}
