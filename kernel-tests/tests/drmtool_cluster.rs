//! Two Slurm nodes in two guests (issue 30; `vm test --cluster --test drmtool_cluster`,
//! scripts/guest-cluster): the harness boots the lane's guest (node 1) and a peer (node 2)
//! with the same kernel and devices, linked by a network of their own (a virtio-net NIC
//! each on QEMU's dgram netdev over the host's loopback; nothing else reachable).
//! `VM_CLUSTER_NODE` says which node a guest is. Each node puts its documentation address
//! (TEST-NET-2) on its NIC, writes its own gres.conf with `drmtool slurm gres-conf`, and
//! starts munged (one key for the cluster), slurmd and `drmtool export` on its address;
//! node 1 also runs slurmctld and Prometheus, scraping both exporters.
//!
//! Node 1 then checks, with Debian's real daemons:
//! - `srun -N2 --gres=gpu:vgem:1` runs a step on each node, and each step opens only the
//!   GPU Slurm gave it there (EPERM on every other GPU of that node's gres.conf);
//! - a job holding vgem on both nodes makes a third job that asks for vgem pend
//!   (`Resources`), and that job runs to completion once the first ends;
//! - one Prometheus query answers "which job holds how much GPU memory, cluster-wide":
//!   the first job's mapped buffers on both nodes, summed and by node.
//!
//! Node 2 serves until node 1 says it is done (or the harness quits it). Outside that pair
//! of guests every test fails: the binary is built only for the cluster's lane.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod isolation_common;
use isolation_common::DRMTOOL;

#[macro_use]
mod slurm_common;
use slurm_common::{Cluster, Extra, Layout, failed, job_argv};

mod export_common;
use export_common::Prometheus;

/// The nodes: Slurm name and address (TEST-NET-2, RFC 5737), the controller first.
const NODES: &[(&str, &str)] = &[("node1", "198.51.100.1"), ("node2", "198.51.100.2")];
/// Where each node's exporter listens, on its own address.
const EXPORT_PORT: u16 = 9717;
/// Where node 2 waits for node 1's "done".
const DONE_PORT: u16 = 7070;
/// The cluster's directory, the same path on both nodes.
const DIR: &str = "/tmp/drmtool-cluster";
/// Set for a step that runs [`probe_entry`].
const PROBE_ENV: &str = "DRMTOOL_CLUSTER_PROBE";
/// The dumb buffer the holding job maps on each node: 256x256 at 32 bpp.
const HELD: u64 = 256 * 256 * 4;

/// The sample client a job runs (see `kernel_tests::sample`).
#[test]
fn sample_client_entry() {
    kernel_tests::sample::entry();
}

/// A step's command when [`PROBE_ENV`] is set: opens every `File=` of this node's
/// gres.conf (read and write) and prints one JSON line: the node, the GPUs Slurm gave the
/// step, and for each gres.conf line its node and the outcome of the open.
#[test]
fn probe_entry() {
    if std::env::var_os(PROBE_ENV).is_none() {
        return;
    }
    let conf = std::fs::read_to_string(Path::new(DIR).join("gres.conf")).expect("gres.conf");
    let files: Vec<Value> = conf
        .lines()
        .filter(|l| l.starts_with("Name=gpu"))
        .map(|l| {
            let f = l
                .split_whitespace()
                .find_map(|w| w.strip_prefix("File="))
                .expect("File=");
            let r = std::fs::OpenOptions::new().read(true).write(true).open(f);
            serde_json::json!({
                "line": l,
                "open": r.err().map_or("ok".into(), |e| e.raw_os_error().map_or(e.to_string(), |n| format!("errno {n}"))),
            })
        })
        .collect();
    let v = serde_json::json!({
        "node": std::env::var("SLURMD_NODENAME").unwrap_or_default(),
        "step_gpus": std::env::var("SLURM_STEP_GPUS").unwrap_or_default(),
        "files": files,
    });
    println!("{v}");
    std::process::exit(0);
}

/// This guest's place in [`NODES`] (`VM_CLUSTER_NODE` 1 or 2).
fn me() -> usize {
    match std::env::var("VM_CLUSTER_NODE").as_deref() {
        Ok("1") => 0,
        Ok("2") => 1,
        other => {
            panic!("run in the two-guest cluster (vm test --cluster): VM_CLUSTER_NODE {other:?}")
        }
    }
}

/// `ip args`, which must succeed.
fn ip(args: &[&str]) {
    let o = Command::new("ip").args(args).output().expect("ip");
    assert!(
        o.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Puts node `me`'s address on its link's NIC (the one whose MAC the harness gave it:
/// `52:54:00:c1:00:0N`) and brings it up.
fn network_up(me: usize) {
    let mac = format!("52:54:00:c1:00:{:02x}", me + 1);
    let nic = std::fs::read_dir("/sys/class/net")
        .expect("/sys/class/net")
        .flatten()
        .find(|e| std::fs::read_to_string(e.path().join("address")).is_ok_and(|a| a.trim() == mac))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .unwrap_or_else(|| panic!("no NIC with the link's MAC {mac}"));
    // slurmctld runs only where the host name is SlurmctldHost's; the guest's is "(none)".
    let o = Command::new("hostname")
        .arg(NODES[me].0)
        .output()
        .expect("hostname");
    assert!(o.status.success(), "hostname: {o:?}");
    ip(&["addr", "add", &format!("{}/24", NODES[me].1), "dev", &nic]);
    ip(&["link", "set", &nic, "up"]);
    eprintln!("node {}: {nic} ({mac}) is {}", me + 1, NODES[me].1);
}

/// A child process killed and reaped on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `drmtool export` on node `me`'s address: the real command, as an admin runs it.
fn exporter(me: usize) -> Killed {
    let listen = format!("{}:{EXPORT_PORT}", NODES[me].1);
    let child = Command::new(DRMTOOL)
        .args(["export", "--listen", &listen])
        .env_remove("KERNEL_TESTS_SIGNAL_STORM")
        .stdin(Stdio::null())
        .spawn()
        .expect("drmtool export");
    // Up once it answers.
    let addr = listen.parse().unwrap();
    let t0 = Instant::now();
    while TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "drmtool export on {listen} does not answer"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    Killed(child)
}

/// Node 2's part after its daemons are up: waits (at most 19 minutes: the guest runner's
/// limit under `--cluster` is 20) for node 1's
/// "done" on [`DONE_PORT`].
fn serve_until_done() {
    let l = TcpListener::bind((NODES[1].1, DONE_PORT)).expect("bind the done port");
    l.set_nonblocking(true).unwrap();
    let t0 = Instant::now();
    loop {
        match l.accept() {
            Ok((mut s, from)) => {
                s.set_nonblocking(false).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut said = String::new();
                let _ = s.read_to_string(&mut said);
                if said.trim() == "done" {
                    eprintln!("node 2: node 1 ({from}) is done");
                    return;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(
                    t0.elapsed() < Duration::from_secs(1140),
                    "node 1 never said it was done"
                );
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
}

/// Tells node 2 that node 1 is done, on drop (so also when a check failed).
struct Done;

impl Drop for Done {
    fn drop(&mut self) {
        let addr = (NODES[1].1, DONE_PORT);
        for _ in 0..20 {
            if let Ok(mut s) = TcpStream::connect(addr) {
                let _ = s.write_all(b"done\n");
                return;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        eprintln!("node 1: could not tell node 2 it was done");
    }
}

#[test]
fn two_nodes_isolate_steps_queue_jobs_and_report_to_one_prometheus() {
    let gpus = slurm_guest!();
    let me = me();
    network_up(me);
    let (code, gres_conf) = drmtool::cli::run_captured(&["slurm", "gres-conf"]);
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{gres_conf}");
    let layout = Layout {
        nodes: NODES,
        me,
        dir: DIR.into(),
        key_seed: 0x5eed,
    };
    let cluster = Cluster::start_on(&gres_conf, &gpus, &Extra::default(), &layout);
    let _exporter = exporter(me);
    if me == 1 {
        serve_until_done();
        return;
    }
    let _done = Done;
    eprintln!("node 1: both nodes idle");
    steps_are_isolated_on_both_nodes(&cluster);
    let holder = Holder::start(&cluster);
    let waiting = a_job_waits_for_the_held_gpus(&cluster);
    let prom = Prometheus::start_with(&format!(
        "  - job_name: drmtool\n    static_configs:\n      - targets: ['{}:{EXPORT_PORT}', '{}:{EXPORT_PORT}']\n",
        NODES[0].1, NODES[1].1
    ));
    // Which job holds how much GPU memory, cluster-wide; and on which node.
    let job = holder.job.clone();
    let job = job.as_str();
    prom.expect(
        "sum by (slurm_job) (drm_mapped_bytes{slurm_job!=\"\"})",
        &["slurm_job"],
        &[(job, (2 * HELD) as f64)],
    );
    let (i1, i2) = (
        format!("{job},{}:{EXPORT_PORT}", NODES[0].1),
        format!("{job},{}:{EXPORT_PORT}", NODES[1].1),
    );
    prom.expect(
        "sum by (slurm_job, instance) (drm_mapped_bytes{slurm_job!=\"\"})",
        &["slurm_job", "instance"],
        &[(&i1, HELD as f64), (&i2, HELD as f64)],
    );
    // The holder ends: the waiting job gets a GPU and runs to completion.
    holder.end(&cluster);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let s = job_state(&cluster, &waiting);
        if s == "COMPLETED" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "job {waiting} did not complete after the GPUs were freed: {s}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!("node 1: job {waiting} ran once job {job} ended");
}

/// `srun -N2 --gres=gpu:vgem:1` of the probe: one step on each node, each opening only
/// its node's vgem among that node's gres.conf GPUs.
fn steps_are_isolated_on_both_nodes(cluster: &Cluster) {
    let o = cluster
        .cmd("srun")
        .args([
            "-N2",
            "--ntasks-per-node=1",
            "--gres=gpu:vgem:1",
            "--time=5",
        ])
        .args(job_argv("probe_entry"))
        .env(PROBE_ENV, "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}",
        failed(&cluster.dir, "srun -N2", &o)
    );
    let text = String::from_utf8_lossy(&o.stdout);
    let reports: Vec<Value> = text
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut nodes: Vec<&str> = reports
        .iter()
        .map(|r| r["node"].as_str().unwrap())
        .collect();
    nodes.sort_unstable();
    assert_eq!(nodes, ["node1", "node2"], "one step per node: {text}");
    for r in &reports {
        let files = r["files"].as_array().unwrap();
        assert!(files.len() >= 2, "{r}");
        for f in files {
            let line = f["line"].as_str().unwrap();
            let want = if line.contains("Type=vgem ") {
                "ok"
            } else {
                "errno 1"
            };
            assert_eq!(f["open"], want, "{}: {line}: {r}", r["node"]);
        }
        eprintln!(
            "{}: the step opened only vgem (GPUs {})",
            r["node"], r["step_gpus"]
        );
    }
}

/// A job holding vgem on both nodes: a sample client per node mapping a dumb buffer, until
/// srun's stdin (given to every task) closes.
struct Holder {
    child: Child,
    /// Its job id.
    job: String,
}

impl Holder {
    fn start(cluster: &Cluster) -> Holder {
        let mut child = cluster
            .cmd("srun")
            .args([
                "-N2",
                "--ntasks-per-node=1",
                "--gres=gpu:vgem:1",
                "--input=all",
                "--time=10",
            ])
            .args(job_argv("sample_client_entry"))
            .env(
                kernel_tests::sample::ARGS_ENV,
                "--device\x1fvgem\x1f--dumb\x1f256x256\x1f--map",
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut ready = 0;
        while ready < 2 {
            match lines.next() {
                Some(Ok(l)) if l.starts_with('{') => ready += 1,
                Some(Ok(_)) => {}
                _ => {
                    let _ = child.kill();
                    let o = child.wait_with_output().unwrap();
                    panic!("{}", failed(&cluster.dir, "srun -N2 sample clients", &o));
                }
            }
        }
        // Keep reading (and dropping) what the tasks print, so they never block on it.
        std::thread::spawn(move || lines.for_each(drop));
        let o = cluster.run("squeue", &["-h", "-t", "RUNNING", "-o", "%i"]);
        let job = String::from_utf8_lossy(&o.stdout).trim().to_string();
        assert!(
            !job.is_empty() && !job.contains('\n'),
            "one running job: {job:?}"
        );
        eprintln!("node 1: job {job} holds vgem on both nodes");
        Holder { child, job }
    }

    /// Closes the tasks' stdin: they let go and exit; the job ends.
    fn end(mut self, cluster: &Cluster) {
        drop(self.child.stdin.take());
        let st = self.child.wait().unwrap();
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        assert!(
            st.success(),
            "job {}: {st}: {err}\n{}",
            self.job,
            cluster.dir.display()
        );
    }
}

/// A batch job asking for vgem while every vgem is held: it pends for `Resources`.
/// Returns its id.
fn a_job_waits_for_the_held_gpus(cluster: &Cluster) -> String {
    let o = cluster.run(
        "sbatch",
        &[
            "--parsable",
            "-N1",
            "--gres=gpu:vgem:1",
            "--time=5",
            "-o",
            "/dev/null",
            "--wrap",
            "true",
        ],
    );
    assert!(o.status.success(), "{}", failed(&cluster.dir, "sbatch", &o));
    let id = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let o = cluster.run("squeue", &["-h", "-j", &id, "-o", "%T %r"]);
        let s = String::from_utf8_lossy(&o.stdout).trim().to_string();
        if s == "PENDING Resources" {
            eprintln!("node 1: job {id} waits: {s}");
            return id;
        }
        assert!(
            Instant::now() < deadline && (s.is_empty() || s.starts_with("PENDING")),
            "job {id} should wait for the held GPUs: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// A job's `JobState` as slurmctld keeps it.
fn job_state(cluster: &Cluster, id: &str) -> String {
    let o = cluster.run("scontrol", &["show", "job", id]);
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .find_map(|w| w.strip_prefix("JobState="))
        .unwrap_or("")
        .to_string()
}
