//! Slurm end to end with Debian's real daemons in the guest: munged, slurmctld and slurmd
//! (Slurm 22.05) as a single-node cluster, cgroup/v2 with `IgnoreSystemd=yes` and
//! `ConstrainDevices=yes`, and the gres.conf that `drmtool slurm gres-conf` prints. For
//! every GPU of the guest an `srun --gres=gpu:<type>:1` job must open that GPU's node and
//! get EPERM on every other GPU's node (the ones gres.conf names; Slurm's device program
//! leaves other devices alone), with `SLURM_STEP_GPUS` naming the GPU's index in drmtool's
//! ordering; `drmtool buffers` must attribute a job's buffers to its job and step.
//!
//! The daemons' state, sockets and logs live under a fresh directory in the guest's tmpfs
//! (the host root they run from is read-only); `SLURM_CONF` points every Slurm program at
//! the configuration written there. The job's command is this test binary again
//! (`probe_entry`, `sample_client_entry`).

use drmtool::gpu;
use kernel_tests::{in_guest, skip, which};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod slurm_common;

const PROBE_ENV: &str = "DRMTOOL_SLURM_PROBE_OUT";

/// The sample client a job runs (see `kernel_tests::sample`).
#[test]
fn sample_client_entry() {
    kernel_tests::sample::entry();
}

/// The job's command when [`PROBE_ENV`] is set: opens every node under /dev/dri (read and
/// write) and writes `{"opens": {path: "ok" | the error}, "env": {...}, "cgroup": ...}`.
#[test]
fn probe_entry() {
    let Some(out) = std::env::var_os(PROBE_ENV) else {
        return;
    };
    let mut opens = serde_json::Map::new();
    for e in std::fs::read_dir("/dev/dri").expect("/dev/dri").flatten() {
        let p = e.path();
        if !e.file_type().is_ok_and(|t| !t.is_dir()) {
            continue;
        }
        let r = std::fs::OpenOptions::new().read(true).write(true).open(&p);
        opens.insert(
            p.display().to_string(),
            Value::from(r.err().map_or("ok".into(), |e| format!("{e:?}"))),
        );
    }
    let env: serde_json::Map<String, Value> = std::env::vars()
        .filter(|(k, _)| {
            k.starts_with("SLURM_JOB_")
                || k.starts_with("SLURM_STEP_")
                || k == "CUDA_VISIBLE_DEVICES"
        })
        .map(|(k, v)| (k, Value::from(v)))
        .collect();
    let v = serde_json::json!({
        "opens": opens,
        "env": env,
        "cgroup": std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default(),
    });
    std::fs::write(out, v.to_string()).expect("write the probe's report");
    std::process::exit(0);
}

/// A single-node cluster: munged, slurmctld and slurmd, stopped on drop.
struct Cluster {
    dir: PathBuf,
    conf: PathBuf,
    /// The pid files of the daemons, in start order.
    pids: Vec<PathBuf>,
}

/// The error text of a command that failed, with the daemons' logs.
fn failed(dir: &Path, what: &str, out: &std::process::Output) -> String {
    let logs: String = ["slurmctld.log", "slurmd.log", "munged.log"]
        .iter()
        .map(|l| {
            let t = std::fs::read_to_string(dir.join(l)).unwrap_or_default();
            let tail: Vec<&str> = t.lines().rev().take(15).collect();
            format!(
                "--- {l} (last lines)\n{}\n",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )
        })
        .collect();
    format!(
        "{what}: {}\nstdout: {}\nstderr: {}\n{logs}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

impl Cluster {
    /// Writes the configuration for `gpus` (gres.conf from `drmtool slurm gres-conf`) and
    /// starts the daemons; waits until the node is idle.
    fn start(gres_conf: &str, gpus: &[gpu::Gpu]) -> Self {
        let dir = PathBuf::from(format!("/tmp/drmtool-slurm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("state")).unwrap();
        std::fs::create_dir_all(dir.join("spool")).unwrap();
        // munged wants its socket's directory searchable by all, its key private.
        let munge = dir.join("munge");
        std::fs::create_dir_all(&munge).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&munge, std::fs::Permissions::from_mode(0o711)).unwrap();
        let key: Vec<u8> = (0..1024u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 ^ std::process::id() as u8)
            .collect();
        let key_path = munge.join("munge.key");
        std::fs::write(&key_path, key).unwrap();
        std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o400)).unwrap();
        let sock = munge.join("munge.sock");
        // The guest's hostname is "(none)", which no resolver knows and Slurm cannot
        // parse: the node is `localhost` (slurmd -N), which every /etc/hosts has.
        let host = "localhost";
        slurm_common::ipv4_configured();
        // Slurm numbers a node's GRES of one type in gres.conf's order; the node declares
        // each type's count.
        let mut types: Vec<(String, usize)> = Vec::new();
        for g in gpus {
            let t = g.driver.clone().expect("every guest GPU has a driver");
            match types.iter_mut().find(|(n, _)| *n == t) {
                Some((_, c)) => *c += 1,
                None => types.push((t, 1)),
            }
        }
        let gres = types
            .iter()
            .map(|(t, c)| format!("gpu:{t}:{c}"))
            .collect::<Vec<_>>()
            .join(",");
        let d = dir.display();
        let conf = dir.join("slurm.conf");
        std::fs::write(
            &conf,
            format!(
                "ClusterName=drmtest\n\
                 SlurmctldHost={host}(127.0.0.1)\n\
                 SlurmUser=root\nSlurmdUser=root\n\
                 AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket={sock}\n\
                 StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\n\
                 SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd.pid\n\
                 SlurmctldLogFile={d}/slurmctld.log\nSlurmdLogFile={d}/slurmd.log\n\
                 SlurmctldPort=6817\nSlurmdPort=6818\n\
                 ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup\n\
                 JobAcctGatherType=jobacct_gather/none\n\
                 GresTypes=gpu\nSchedulerType=sched/builtin\n\
                 SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n\
                 ReturnToService=2\nMpiDefault=none\nJobCompType=jobcomp/none\n\
                 AccountingStorageType=accounting_storage/none\n\
                 NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} Gres={gres} State=UNKNOWN\n\
                 PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP\n",
                sock = sock.display(),
                cpus = std::thread::available_parallelism().map_or(1, |n| n.get()),
            ),
        )
        .unwrap();
        std::fs::write(
            dir.join("cgroup.conf"),
            "CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes\nConstrainDevices=yes\n\
             ConstrainCores=no\nConstrainRAMSpace=no\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("gres.conf"),
            format!("AutoDetect=off\n{gres_conf}"),
        )
        .unwrap();
        let mut c = Cluster {
            conf,
            pids: Vec::new(),
            dir,
        };
        let munged = c.run(
            "munged",
            &[
                &format!("--key-file={}", key_path.display()),
                &format!("--socket={}", sock.display()),
                &format!("--pid-file={}/munged.pid", c.dir.display()),
                &format!("--log-file={}/munged.log", c.dir.display()),
                &format!("--seed-file={}/munged.seed", c.dir.display()),
            ],
        );
        c.pids.push(c.dir.join("munged.pid"));
        assert!(
            munged.status.success(),
            "{}",
            failed(&c.dir, "munged", &munged)
        );
        let ctld = c.run("slurmctld", &["-i"]);
        c.pids.push(c.dir.join("slurmctld.pid"));
        assert!(
            ctld.status.success(),
            "{}",
            failed(&c.dir, "slurmctld", &ctld)
        );
        // slurmd makes <node>_slurmstepd.scope under system.slice, which it does not create
        // when systemd is ignored.
        std::fs::create_dir_all("/sys/fs/cgroup/system.slice")
            .expect("/sys/fs/cgroup/system.slice");
        let slurmd = c.run("slurmd", &["-N", host]);
        c.pids.push(c.dir.join("slurmd.pid"));
        assert!(
            slurmd.status.success(),
            "{}",
            failed(&c.dir, "slurmd", &slurmd)
        );
        // The node registers; under TCG that takes seconds.
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let out = c.run("sinfo", &["-h", "-N", "-o", "%T"]);
            let state = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if state == "idle" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the node did not become idle in 120 s (last state {state:?}): {}",
                failed(&c.dir, "sinfo", &out)
            );
            std::thread::sleep(Duration::from_millis(500));
        }
        c
    }

    /// `prog args` with this cluster's configuration, waited for.
    fn run(&self, prog: &str, args: &[&str]) -> std::process::Output {
        self.cmd(prog)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{prog}: {e}"))
    }

    /// `prog` with this cluster's configuration and without the signal storm (it belongs
    /// to the test process, not to the daemons or the jobs).
    fn cmd(&self, prog: &str) -> Command {
        let mut c = Command::new(which(prog).unwrap_or_else(|| prog.into()));
        c.env("SLURM_CONF", &self.conf)
            .env_remove("KERNEL_TESTS_SIGNAL_STORM");
        c
    }

    /// One `srun --gres=<gres>` job running the probe (`probe_entry`); its report, written
    /// to `<name>.json` in the cluster's directory.
    fn probe(&self, gres: &str, name: &str) -> Value {
        let out = PathBuf::from(format!("{}/{name}.json", self.dir.display()));
        let o = self
            .cmd("srun")
            .args([&format!("--gres={gres}"), "-n1", "--time=5"])
            .args(job_argv("probe_entry"))
            .env(PROBE_ENV, &out)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", failed(&self.dir, "srun", &o));
        serde_json::from_str(
            &std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{}: {e}", out.display())),
        )
        .unwrap()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for p in self.pids.iter().rev() {
            let pid = std::fs::read_to_string(p)
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok())
                .and_then(rustix::process::Pid::from_raw);
            let Some(pid) = pid else { continue };
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            let t = Instant::now();
            while rustix::process::test_kill_process(pid).is_ok()
                && t.elapsed() < Duration::from_secs(10)
            {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
}

/// The program of a job: this binary's test `entry`.
fn job_argv(entry: &str) -> Vec<String> {
    vec![
        std::env::current_exe().unwrap().display().to_string(),
        entry.into(),
        "--exact".into(),
        "--nocapture".into(),
        "-q".into(),
        "--test-threads=1".into(),
    ]
}

macro_rules! slurm_guest {
    () => {{
        if !in_guest() {
            skip!("not in a vm guest: no DRM devices or cgroup v2 here");
        }
        for p in ["munged", "slurmctld", "slurmd", "srun", "sinfo"] {
            if which(p).is_none() {
                skip!("{p} is not installed (scripts/setup installs slurmctld, slurmd, slurm-client and munge)");
            }
        }
        gpu::gpus().expect("the guest has DRM devices")
    }};
}

/// The probe report `v` of a job given the GPUs at `mine` (places in gres.conf, whose
/// `File=` nodes are `files`): it opened those and got EPERM on every other.
#[track_caller]
fn assert_opens_only(v: &Value, files: &[String], mine: &[usize], job: &str) {
    for (j, f) in files.iter().enumerate() {
        let got = &v["opens"][f.as_str()];
        if mine.contains(&j) {
            assert_eq!(got, "ok", "{job} (GPUs {mine:?}): {f}: {v}");
        } else {
            assert_eq!(
                got, "Os { code: 1, kind: PermissionDenied, message: \"Operation not permitted\" }",
                "{job} (GPUs {mine:?}): {f} is another GPU's: {v}"
            );
        }
    }
}

/// Every GPU, one job each: the job opens its GPU's gres.conf node and gets EPERM on every
/// other GPU's; Slurm names the GPU's index to the job. Then a job holding a dumb buffer is
/// attributed to its job and step by `drmtool buffers`.
#[test]
fn srun_jobs_open_only_their_gpus_and_buffers_names_the_job() {
    let gpus = slurm_guest!();
    let (code, gres_conf) = drmtool::cli::run_captured(&["slurm", "gres-conf"]);
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{gres_conf}");
    // What gres.conf gives each GPU: its File= node.
    let files: Vec<String> = gres_conf
        .lines()
        .filter(|l| l.starts_with("Name=gpu"))
        .map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("File="))
                .expect("File=")
                .to_string()
        })
        .collect();
    assert_eq!(files.len(), gpus.len(), "{gres_conf}");
    assert!(gpus.len() >= 2, "{}", gpu::summary(&gpus));
    let cluster = Cluster::start(&gres_conf, &gpus);
    let mut job_ids = Vec::new();
    for (i, g) in gpus.iter().enumerate() {
        let ty = g.driver.clone().unwrap();
        // One job per GPU type, asking for every GPU of the type (two virtio-gpus, one of
        // each other driver); one of two equal GPUs is the next check.
        let same: Vec<usize> = gpus
            .iter()
            .enumerate()
            .filter(|(_, h)| h.driver.as_deref() == Some(ty.as_str()))
            .map(|(j, _)| j)
            .collect();
        if same.first() != Some(&i) {
            continue;
        }
        let v = cluster.probe(&format!("gpu:{ty}:{}", same.len()), &format!("probe-{i}"));
        assert_opens_only(&v, &files, &same, &format!("job for {ty}"));
        // The indices Slurm gives the step are the GPUs' places in gres.conf: drmtool's
        // ordering.
        let want: Vec<String> = same.iter().map(usize::to_string).collect();
        assert_eq!(v["env"]["SLURM_STEP_GPUS"], want.join(","), "{v}");
        assert!(
            v["cgroup"].as_str().unwrap().contains("/job_"),
            "the job runs in Slurm's job cgroup: {v}"
        );
        job_ids.push(v["env"]["SLURM_JOB_ID"].as_str().unwrap().to_string());
    }
    assert!(job_ids.len() >= 2, "jobs {job_ids:?}");
    // One of the two virtio-gpus: the job opens the one Slurm gave it (SLURM_STEP_GPUS, a
    // place in gres.conf) and gets EPERM on the other, as on every other GPU.
    let twins: Vec<usize> = gpus
        .iter()
        .enumerate()
        .filter(|(_, g)| g.driver.as_deref() == Some("virtio_gpu"))
        .map(|(j, _)| j)
        .collect();
    assert!(
        twins.len() >= 2,
        "the guest has two virtio-gpus: {}",
        gpu::summary(&gpus)
    );
    let v = cluster.probe("gpu:virtio_gpu:1", "probe-one-of-two");
    let given: usize = v["env"]["SLURM_STEP_GPUS"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("one GPU index in SLURM_STEP_GPUS: {v}"));
    assert!(
        twins.contains(&given),
        "a virtio-gpu ({twins:?}), got {given}: {v}"
    );
    assert_opens_only(&v, &files, &[given], "one of two virtio-gpus");
    eprintln!(
        "gpu:virtio_gpu:1 gave GPU {given} of {twins:?}: {}",
        files[given]
    );
    // A job that holds a buffer: a sample client on vgem, run by srun, ready line through
    // srun's output; it exits when srun's stdin (forwarded to the task) closes.
    let mut client = cluster
        .cmd("srun")
        .args(["--gres=gpu:vgem:1", "-n1", "--time=5"])
        .args(job_argv("sample_client_entry"))
        .env(
            kernel_tests::sample::ARGS_ENV,
            "--device\x1fvgem\x1f--dumb\x1f64x64",
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(client.stdout.take().unwrap()));
    let ready: drmtool::sample::Ready = loop {
        match lines.next() {
            Some(Ok(l)) if l.starts_with('{') => break serde_json::from_str(&l).unwrap(),
            Some(Ok(_)) => continue,
            _ => {
                let _ = client.kill();
                let o = client.wait_with_output().unwrap();
                panic!("{}", failed(&cluster.dir, "srun sample client", &o));
            }
        }
    };
    let (code, json) = drmtool::cli::run_captured(&["buffers", "--json"]);
    assert_eq!(code, std::process::ExitCode::SUCCESS);
    let (_, by_job) = drmtool::cli::run_captured(&["buffers", "--by", "job"]);
    drop(client.stdin.take());
    let st = client.wait().unwrap();
    let b: Value = serde_json::from_str(&json).unwrap();
    let p = b["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == ready.pid)
        .unwrap_or_else(|| panic!("no process {} in {b}", ready.pid));
    let job = &p["attribution"]["slurm"];
    assert!(job["job"].as_u64().is_some_and(|j| j > 0), "{p}");
    assert_eq!(job["step"], "0", "{p}");
    assert!(
        by_job.contains(&format!("{}", job["job"])),
        "buffers --by job names job {}:\n{by_job}",
        job["job"]
    );
    assert!(st.success(), "the sample client job: {st}");
}
