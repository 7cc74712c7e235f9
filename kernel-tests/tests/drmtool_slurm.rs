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
use serde_json::Value;
use std::path::PathBuf;
use std::process::Stdio;

#[macro_use]
mod slurm_common;
use slurm_common::{Cluster, failed, job_argv};

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

/// One `srun --gres=<gres>` job of `cluster` running the probe (`probe_entry`); its
/// report, written to `<name>.json` in the cluster's directory.
fn probe(cluster: &Cluster, gres: &str, name: &str) -> Value {
    let out = PathBuf::from(format!("{}/{name}.json", cluster.dir.display()));
    let o = cluster
        .cmd("srun")
        .args([&format!("--gres={gres}"), "-n1", "--time=5"])
        .args(job_argv("probe_entry"))
        .env(PROBE_ENV, &out)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", failed(&cluster.dir, "srun", &o));
    serde_json::from_str(
        &std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{}: {e}", out.display())),
    )
    .unwrap()
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
        let v = probe(
            &cluster,
            &format!("gpu:{ty}:{}", same.len()),
            &format!("probe-{i}"),
        );
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
    let v = probe(&cluster, "gpu:virtio_gpu:1", "probe-one-of-two");
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
