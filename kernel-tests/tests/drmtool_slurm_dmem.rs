//! A Slurm job's GPU memory budget (`--gres=gpu:1,gpumem:8M`) as the kernel's dmem limit,
//! with Debian's real daemons (Slurm 22.05, `slurm_common`'s single-node cluster) and
//! `drmtool slurm prolog`/`epilog` as the root Prolog and Epilog:
//! - on debian-7.3 (dmem, and qxl's VRAM a region through the test-only
//!   `vm/config/qxl-dmem.patch`): `slurm gres-conf --gpumem` counts the node's regions; a
//!   job with `gpumem:8M` on the qxl GPU that allocates 24 MiB of VRAM finds `dmem.max`
//!   8 MiB in its job cgroup and its `dmem.peak` (counted from the cgroup's creation, so
//!   from the job's first process) never past it; so does one whose name and comment
//!   carry a forged 64 MiB GRES line; a job on the same GPU without a budget is not held;
//! - everywhere: a budget that cannot be enforced (no dmem controller, or a GPU whose
//!   driver registers no region: vgem) fails the Prolog with the line that says which;
//!   Slurm drains the node and the job does not run.

use drmtool::dmem::{self, Capacity, Value};
use drmtool::isolate::slurm_mem;
use kernel_tests::{require_feature, which};
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

#[macro_use]
mod slurm_common;
use slurm_common::{Cluster, Extra, failed};

const MIB: u64 = 1 << 20;

/// The cgroup root.
const ROOT: &str = "/sys/fs/cgroup";

/// The Prolog's and Epilog's scripts (as an admin writes them: slurmd runs a program
/// without arguments or search path) in a directory of their own, logging to
/// `hooks.out` there; the slurm.conf lines that name them.
fn hooks() -> (PathBuf, String) {
    let dir = PathBuf::from(format!("/tmp/drmtool-slurm-hooks-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let conf = Cluster::dir().join("slurm.conf");
    let drmtool = env!("CARGO_BIN_EXE_drmtool-guest");
    let squeue = which("squeue").expect("squeue");
    let mut lines = String::new();
    for (hook, args) in [
        ("prolog", format!("--squeue {}", squeue.display())),
        ("epilog", String::new()),
    ] {
        let script = dir.join(hook);
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\nexec >>{out} 2>&1\necho \"{hook} job $SLURM_JOB_ID\"\n\
                 SLURM_CONF={conf} exec {drmtool} slurm {hook} {args}\n",
                out = dir.join("hooks.out").display(),
                conf = conf.display(),
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let key = if hook == "prolog" { "Prolog" } else { "Epilog" };
        lines.push_str(&format!("{key}={}\n", script.display()));
    }
    (dir, lines)
}

/// The cluster with the `gpumem` GRES (`count` bytes on the node) and the hooks; the
/// hooks' directory.
fn gpumem_cluster(gres_conf: &str, gpus: &[drmtool::gpu::Gpu], count: u64) -> (Cluster, PathBuf) {
    let (hooks_dir, conf) = hooks();
    let node_gres = format!(",gpumem:{count}");
    let cluster = Cluster::start_with(
        gres_conf,
        gpus,
        &Extra {
            gres_types: ",gpumem",
            node_gres: &node_gres,
            conf: &conf,
        },
    );
    (cluster, hooks_dir)
}

/// The Prolog's and Epilog's output so far.
fn hooks_out(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("hooks.out")).unwrap_or_default()
}

/// slurmd's step scope, where job cgroups are made.
fn scope() -> PathBuf {
    slurm_mem::scope_candidates(Some("localhost"))
        .into_iter()
        .map(|c| Path::new(ROOT).join(c))
        .find(|p| p.is_dir())
        .expect("slurmd made its step scope")
}

/// The `job_*` cgroups under the scope.
fn job_cgroups() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(scope())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("job_"))
        })
        .collect();
    v.sort();
    v
}

/// `file`'s value for `region` in `cgroup`.
fn read(cgroup: &Path, file: &str, region: &str) -> Value {
    dmem::read_file(cgroup, file)
        .unwrap()
        .unwrap_or_else(|| panic!("no {file} in {}", cgroup.display()))
        .into_iter()
        .find(|(r, _)| r == region)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("{} has no line for {region}", cgroup.display()))
}

/// A job of `qxl-alloc 24 1MiB` under srun with `gres`, held until `finish`: its lines and
/// its job cgroup.
struct AllocJob {
    child: std::process::Child,
    lines: Vec<String>,
    cgroup: PathBuf,
}

impl AllocJob {
    fn start(cluster: &Cluster, gres: &str) -> AllocJob {
        Self::start_with(cluster, gres, &[])
    }

    /// [`AllocJob::start`] with more srun options.
    fn start_with(cluster: &Cluster, gres: &str, extra: &[&str]) -> AllocJob {
        let mut child = cluster
            .cmd("srun")
            .args([&format!("--gres={gres}"), "-n1", "--time=5"])
            .args(extra)
            .arg(env!("CARGO_BIN_EXE_qxl-alloc"))
            .args(["24", &MIB.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let lines = match kernel_tests::lines_through(out, "held ") {
            Ok(l) => l,
            Err(lines) => {
                let _ = child.kill();
                let o = child.wait_with_output().unwrap();
                panic!(
                    "the job ended before it held its buffers: {lines:?}\n{}",
                    failed(&cluster.dir, "srun qxl-alloc", &o)
                );
            }
        };
        let jobs = job_cgroups();
        assert_eq!(jobs.len(), 1, "one job cgroup: {jobs:?}");
        AllocJob {
            child,
            lines,
            cgroup: jobs[0].clone(),
        }
    }

    /// How many allocations succeeded, and each failure's errno.
    fn outcome(&self) -> (usize, Vec<String>) {
        let ok = self.lines.iter().filter(|l| l.ends_with(" ok")).count();
        let failed = self
            .lines
            .iter()
            .filter_map(|l| l.split_once(" errno ").map(|(_, e)| e.to_string()))
            .collect();
        (ok, failed)
    }

    fn finish(mut self) -> std::process::ExitStatus {
        drop(self.child.stdin.take());
        self.child.wait().unwrap()
    }
}

/// Waits (up to 120 s under TCG) for the cgroups of ended jobs to be gone.
fn wait_no_job_cgroups() {
    let t = Instant::now();
    while !job_cgroups().is_empty() && t.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(
        job_cgroups(),
        Vec::<PathBuf>::new(),
        "ended jobs' cgroups remain"
    );
}

#[test]
fn a_jobs_gpumem_is_its_dmem_max_from_its_first_process() {
    let gpus = slurm_guest!();
    require_feature!("qxl_dmem");
    let cap = Capacity::read(Path::new(ROOT))
        .unwrap()
        .expect("a kernel built with qxl's dmem region has the dmem controller");
    let qxl = gpus
        .iter()
        .find(|g| g.driver.as_deref() == Some("qxl"))
        .expect("the guest has a qxl GPU");
    let region = cap.regions_of(&qxl.name)[0].to_string();
    let total: u64 = cap.regions.iter().map(|(_, s)| s).sum();
    let (code, gres_conf) = drmtool::cli::run_captured(&["slurm", "gres-conf", "--gpumem"]);
    assert_eq!(code, ExitCode::SUCCESS, "{gres_conf}");
    assert!(
        gres_conf.contains(&format!("\nName=gpumem Count={total}\n")),
        "{gres_conf}"
    );
    assert!(
        gres_conf.contains("(vgem): no dmem region"),
        "a GPU without a region is named: {gres_conf}"
    );
    let (cluster, hooks_dir) = gpumem_cluster(&gres_conf, &gpus, total);
    // With a budget: held to it from its first allocation on.
    let job = AllocJob::start(&cluster, "gpu:qxl:1,gpumem:8M");
    let max = read(&job.cgroup, dmem::Knob::Max.file(), &region);
    let current = read(&job.cgroup, dmem::CURRENT_FILE, &region);
    let peak = read(&job.cgroup, dmem::PEAK_FILE, &region);
    let (ok, errs) = job.outcome();
    eprintln!(
        "gpumem:8M job ({}): {ok} of 24 allocations of 1 MiB succeeded, failed with {errs:?}; \
         dmem.max {max}, dmem.current {current}, dmem.peak {peak}",
        job.cgroup.display()
    );
    assert_eq!(max, Value::Bytes(8 * MIB), "{}", hooks_out(&hooks_dir));
    assert!(
        peak <= Value::Bytes(8 * MIB),
        "the job's charge reached {peak} past its budget"
    );
    assert!(current > Value::Bytes(0), "the job's VRAM is charged to it");
    assert!(errs.iter().all(|e| e == "ENOMEM"), "{errs:?}");
    assert_eq!(ok + errs.len(), 24);
    assert!(job.finish().success());
    wait_no_job_cgroups();
    // The job's user writes a bigger budget where a parser of `scontrol show job` would
    // find one (the job's name and comment, printed beside its GRES lines): the budget is
    // still the 8 MiB it asked through --gres, the one figure a user cannot forge.
    let forged = "GRES=gpu:qxl:1,gpumem(CNT:67108864) TRES=gres/gpumem=67108864";
    let job = AllocJob::start_with(
        &cluster,
        "gpu:qxl:1,gpumem:8M",
        &[
            &format!("--job-name=x JOB_{forged}"),
            &format!("--comment={forged}"),
        ],
    );
    let max = read(&job.cgroup, dmem::Knob::Max.file(), &region);
    let peak = read(&job.cgroup, dmem::PEAK_FILE, &region);
    eprintln!("job named and commented {forged:?}: dmem.max {max}, peak {peak}");
    assert_eq!(max, Value::Bytes(8 * MIB), "{}", hooks_out(&hooks_dir));
    assert!(peak <= Value::Bytes(8 * MIB), "{peak}");
    assert!(job.finish().success());
    wait_no_job_cgroups();
    // Without one, on the same GPU: not held.
    let job = AllocJob::start(&cluster, "gpu:qxl:1");
    let max = read(&job.cgroup, dmem::Knob::Max.file(), &region);
    let peak = read(&job.cgroup, dmem::PEAK_FILE, &region);
    let (ok, errs) = job.outcome();
    eprintln!("job without gpumem: {ok} of 24 succeeded ({errs:?}); dmem.max {max}, peak {peak}");
    assert_eq!(max, Value::Max);
    assert_eq!(ok, 24, "{errs:?}");
    assert!(peak >= Value::Bytes(24 * MIB), "{peak}");
    assert!(job.finish().success());
    wait_no_job_cgroups();
    let out = hooks_out(&hooks_dir);
    eprintln!("hooks:\n{out}");
    assert!(
        out.contains(&format!("gpumem {} bytes", 8 * MIB))
            && out.contains(&format!("dmem.max: {region} {}", 8 * MIB)),
        "{out}"
    );
    assert!(out.contains("no gpumem asked, no limit"), "{out}");
}

#[test]
fn a_gpumem_budget_that_cannot_be_enforced_drains_the_node_and_runs_nothing() {
    let gpus = slurm_guest!();
    let cap = Capacity::read(Path::new(ROOT)).unwrap();
    let (code, mut gres_conf) = drmtool::cli::run_captured(&["slurm", "gres-conf", "--gpumem"]);
    let want = match &cap {
        // No controller: gres-conf says so (exit 125) and the admin's own count stands.
        None => {
            assert_eq!(code, ExitCode::from(125), "{gres_conf}");
            let (code, plain) = drmtool::cli::run_captured(&["slurm", "gres-conf"]);
            assert_eq!(code, ExitCode::SUCCESS, "{plain}");
            gres_conf = format!("{plain}Name=gpumem Count={}\n", 64 * MIB);
            "this kernel has no dmem cgroup controller".to_string()
        }
        Some(_) => {
            assert_eq!(code, ExitCode::SUCCESS, "{gres_conf}");
            let vgem = gpus
                .iter()
                .find(|g| g.driver.as_deref() == Some("vgem"))
                .expect("the guest has vgem");
            format!(
                "GPU {} (vgem): its driver registers no dmem region",
                vgem.name
            )
        }
    };
    let count: u64 = gres_conf
        .lines()
        .find_map(|l| l.strip_prefix("Name=gpumem Count="))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("a gpumem count: {gres_conf}"));
    let (cluster, hooks_dir) = gpumem_cluster(&gres_conf, &gpus, count);
    // The job would leave `ran` behind; its output goes to the cluster's directory (the
    // working directory, under the host's read-only root, would fail its start anyway).
    let ran = cluster.dir.join("ran");
    let job_out = format!("--output={}", cluster.dir.join("job.out").display());
    let o = cluster.run(
        "sbatch",
        &[
            "--gres=gpu:vgem:1,gpumem:1M",
            "--time=5",
            &job_out,
            "--wrap",
            &format!("touch {}", ran.display()),
        ],
    );
    assert!(o.status.success(), "{}", failed(&cluster.dir, "sbatch", &o));
    // The Prolog fails; slurmd reports it and slurmctld drains the node.
    let t = Instant::now();
    let state = loop {
        let o = cluster.run("sinfo", &["-h", "-N", "-o", "%T %E"]);
        let s = String::from_utf8_lossy(&o.stdout).trim().to_string();
        if s.starts_with("drain") {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "the node is not drained after 120 s ({s:?}); hooks:\n{}\n{}",
            hooks_out(&hooks_dir),
            failed(&cluster.dir, "sinfo", &o)
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let out = hooks_out(&hooks_dir);
    eprintln!("node: {state}\nhooks:\n{out}");
    assert!(out.contains(&want), "the Prolog says why ({want:?}): {out}");
    assert!(!ran.exists(), "the job ran without its budget");
    // Nothing was left behind for the job that never ran.
    assert_eq!(job_cgroups(), Vec::<PathBuf>::new());
}
