//! Placement on the NUMA topology profile (issue 30; `vm test --topology numa --test
//! drmtool_topology`, scripts/guest-topology): two NUMA nodes (vCPU 0 on node 0, vCPU 1
//! on node 1, distance 21), a PCI expander bridge per node with a virtio-gpu behind it
//! (GPU A at 0000:21:00.0 on node 0, GPU B at 0000:41:00.0 on node 1), and a virtio-blk
//! disk (`/dev/vda`, 0000:41:01.0) behind node 1's bridge beside GPU B: "the data", and a
//! virtio-net NIC (0000:21:01.0) beside GPU A. The
//! root bus's virtio-gpus are left out of this lane, so A and B are its only virtio_gpu
//! GPUs (bochs, qxl, vgem and vkms stay).
//!
//! Each test checks drmtool against the profile's definition (vm/src/guest/qemu.rs), not
//! against drmtool's own reading of it. Outside that guest every test fails: the binary is
//! built only for the profile's lane, which has the machine.

use serde_json::Value;

mod isolation_common;
use isolation_common::{drmtool, run_out};

mod schema_common;
use schema_common::validate;

#[macro_use]
mod slurm_common;
use slurm_common::{Cluster, failed};

/// GPU A (node 0) and GPU B (node 1) of the profile.
const A: &str = "0000:21:00.0";
const B: &str = "0000:41:00.0";
/// The disk beside B.
const DISK_FN: &str = "0000:41:01.0";
/// The NIC beside A.
const NIC_FN: &str = "0000:21:01.0";

/// The profile's machine, checked: the guest says it has it (`VM_TOPOLOGY=numa`) and both
/// nodes and GPUs are there. Returns A's and B's indices in the ordering.
fn profile() -> (usize, usize) {
    assert_eq!(
        std::env::var("VM_TOPOLOGY").as_deref(),
        Ok("numa"),
        "run in the NUMA topology profile (vm test --topology numa)"
    );
    assert!(std::path::Path::new("/sys/devices/system/node/node1").is_dir());
    let gpus = drmtool::gpu::gpus().expect("GPUs");
    let at = |bus: &str| {
        gpus.iter()
            .position(|g| g.bus_id.as_deref() == Some(bus))
            .unwrap_or_else(|| panic!("no GPU at {bus}: {gpus:?}"))
    };
    (at(A), at(B))
}

fn json(args: &[&str], schema: &str) -> Value {
    let (code, out, err) = run_out(&mut drmtool(args));
    assert_eq!(code, 0, "drmtool {args:?}: {err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    validate(&v, schema, &format!("drmtool {args:?}"));
    v
}

/// `topo`: each GPU's node, local CPUs and host bridge; SYS between A and B (two nodes,
/// two host bridges); the distance table as the profile sets it; the disk PIX to B (one
/// bridge: the expander's) and SYS to A.
#[test]
fn topo_matches_the_profile() {
    let (a, b) = profile();
    let v = json(&["topo", "--json"], "topo.schema.json");
    let g = &v["gpus"];
    assert_eq!(
        (g[a]["numa_node"].as_u64(), g[a]["local_cpus"].as_str()),
        (Some(0), Some("0")),
        "{v}"
    );
    assert_eq!(
        (g[b]["numa_node"].as_u64(), g[b]["local_cpus"].as_str()),
        (Some(1), Some("1")),
        "{v}"
    );
    assert_eq!(g[a]["dra"]["pcieRoot"], "pci0000:20", "{v}");
    assert_eq!(g[b]["dra"]["pcieRoot"], "pci0000:40", "{v}");
    assert_eq!(v["matrix"][a][b], "SYS", "{v}");
    assert_eq!(v["matrix"][b][a], "SYS", "{v}");
    assert_eq!(
        v["numa"],
        serde_json::json!([{"node": 0, "distances": [10, 21]}, {"node": 1, "distances": [21, 10]}]),
        "{v}"
    );
    // The NIC or disk on the PCI function `bus`.
    let device = |bus: &str| {
        v["devices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["bus_id"] == bus)
            .unwrap_or_else(|| panic!("no device at {bus}: {v}"))
    };
    let disk = device(DISK_FN);
    assert_eq!(
        (disk["kind"].as_str(), disk["name"].as_str()),
        (Some("block"), Some("vda"))
    );
    assert_eq!(disk["classes"][b], "PIX", "{disk}");
    assert_eq!(disk["classes"][a], "SYS", "{disk}");
    let nic = device(NIC_FN);
    assert_eq!(nic["kind"], "net", "{nic}");
    assert_eq!(
        (nic["classes"][a].as_str(), nic["classes"][b].as_str()),
        (Some("PIX"), Some("SYS")),
        "{nic}"
    );
    let (code, table, err) = run_out(&mut drmtool(&["topo"]));
    assert_eq!(code, 0, "{err}");
    assert!(table.contains("SYS") && table.contains("PIX"), "{table}");
}

/// `pick --near`: near the data (`/dev/vda`), the GPU beside it (PIX); near node 0 or CPU
/// 0, GPU A (NODE); near CPU 1, GPU B; two near A among A and B: the set is SYS apart,
/// every set tried.
#[test]
fn pick_near_the_data_takes_the_gpu_beside_it() {
    let (a, b) = profile();
    let pick = |near: &str| -> (String, String) {
        let (code, out, err) = run_out(&mut drmtool(&["pick", "--near", near]));
        assert_eq!(code, 0, "--near {near}: {err}");
        (out.trim().to_string(), err)
    };
    let (got, why) = pick("path:/dev/vda");
    assert_eq!(got, B, "{why}");
    assert!(
        why.contains(&format!("chose {B}: PIX to path:/dev/vda (pci0000:40/")),
        "{why}"
    );
    assert!(why.contains("NUMA node 1)"), "{why}");
    // Near the NIC (found by its PCI function: the kernel names it), A beside it.
    let nic = std::fs::read_dir("/sys/class/net")
        .unwrap()
        .flatten()
        .find(|e| {
            std::fs::canonicalize(e.path())
                .is_ok_and(|p| p.to_string_lossy().contains(&format!("/{NIC_FN}/")))
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .expect("the profile's NIC");
    let (got, why) = pick(&format!("net:{nic}"));
    assert_eq!(got, A, "{why}");
    assert!(
        why.contains(&format!("chose {A}: PIX to net:{nic} (pci0000:20/")),
        "{why}"
    );
    assert_eq!(pick("numa:0").0, A);
    assert_eq!(pick("cpus:0").0, A);
    assert_eq!(pick("cpus:1").0, B);
    assert_eq!(pick(&format!("gpu:{B}")).0, B);
    let sel = format!("{A},{B}");
    let v = json(
        &[
            "pick",
            "-n",
            "2",
            "--near",
            &format!("gpu:{A}"),
            "--gpu",
            &sel,
            "--format",
            "json",
        ],
        "pick.schema.json",
    );
    assert_eq!(v["chosen"], serde_json::json!([a, b]), "{v}");
    assert_eq!(
        (v["group"]["worst"].as_str(), v["group"]["search"].as_str()),
        (Some("SYS"), Some("exact"))
    );
    // CPUs on two nodes name no one node.
    let (code, _, err) = run_out(&mut drmtool(&["pick", "--near", "cpus:0-1"]));
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("not all on one NUMA node"), "{err}");
}

/// `place`: a job near the data and a job near CPU 0, placed at once (one exact flow): the
/// first on B (PIX), the second on A (NODE), though each GPU is as idle as the other.
#[test]
fn place_puts_each_job_near_its_data() {
    let (_, _) = profile();
    let dir = std::env::temp_dir().join(format!("topology-place-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let reqs = serde_json::json!({"requests": [
        {"name": "compute", "near": "cpus:0"},
        {"name": "data", "near": "path:/dev/vda"}
    ]});
    validate(&reqs, "place-requests.schema.json", "requests");
    let file = dir.join("reqs.json");
    std::fs::write(&file, reqs.to_string()).unwrap();
    let sel = format!("{A},{B}");
    let v = json(
        &["place", "--json", "--gpu", &sel, &file.to_string_lossy()],
        "place.schema.json",
    );
    assert_eq!(v["exact"], true, "{v}");
    let seat = |j: usize| {
        (
            v["jobs"][j]["gpus"][0]["name"].clone(),
            v["jobs"][j]["gpus"][0]["class"].clone(),
        )
    };
    assert_eq!(seat(0), (A.into(), "NODE".into()), "{v}");
    assert_eq!(seat(1), (B.into(), "PIX".into()), "{v}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// What `/proc/self/status` of a `run --bind` job says of its CPUs and memory nodes.
fn bound(gpus: &str, bind: bool) -> (i32, String, String, String) {
    let mut args = vec!["run", "--as-root", "--gpu", gpus];
    if bind {
        args.push("--bind");
    }
    args.extend([
        "--",
        "/bin/sh",
        "-c",
        "grep -E '^(Cpus|Mems)_allowed_list' /proc/self/status",
    ]);
    let (code, out, err) = run_out(&mut drmtool(&args));
    let field = |k: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(k))
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    assert!(
        code != 0 || !field("Cpus_allowed_list:").is_empty(),
        "{out}{err}"
    );
    (
        code,
        field("Cpus_allowed_list:"),
        field("Mems_allowed_list:"),
        err,
    )
}

/// `run --bind`: a job on B runs on CPU 1 with memory from node 1, one on A on CPU 0 and
/// node 0, one on both on both; without `--bind` a job may run anywhere; a GPU not on PCI
/// cannot be bound (exit 125, nothing runs).
#[test]
fn run_bind_pins_the_job_to_its_gpus_node() {
    let (_, _) = profile();
    let pinned = |gpus: &str, bind: bool| {
        let (code, cpus, mems, err) = bound(gpus, bind);
        assert_eq!(code, 0, "--gpu {gpus}: {err}");
        (cpus, mems)
    };
    assert_eq!(pinned(B, true), ("1".into(), "1".into()));
    assert_eq!(pinned(A, true), ("0".into(), "0".into()));
    assert_eq!(
        pinned(&format!("{A},{B}"), true),
        ("0-1".into(), "0-1".into())
    );
    assert_eq!(pinned(B, false), ("0-1".into(), "0-1".into()));
    let (code, _, _, err) = bound("vgem", true);
    assert_eq!(code, 125, "{err}");
    assert!(err.contains("no local CPUs (not on PCI)"), "{err}");
}

/// `slurm gres-conf`: A's line has `Cores=0`, B's `Cores=1` (Slurm's core indices of
/// their local CPUs), and `Links=` gives 0 (SYS) between them and -1 for each itself.
#[test]
fn gres_conf_gives_each_gpu_its_cores_and_links() {
    let (a, b) = profile();
    let (code, out, err) = run_out(&mut drmtool(&["slurm", "gres-conf"]));
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("Name=gpu")).collect();
    let line = |bus: &str| {
        *lines
            .iter()
            .find(|l| l.ends_with(&format!("{bus} virtio_gpu")))
            .unwrap_or_else(|| panic!("{out}"))
    };
    let field = |l: &str, k: &str| {
        l.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .map(str::to_string)
    };
    assert_eq!(field(line(A), "Cores="), Some("0".into()), "{out}");
    assert_eq!(field(line(B), "Cores="), Some("1".into()), "{out}");
    let links = |l: &str| -> Vec<i32> {
        field(l, "Links=")
            .unwrap_or_else(|| panic!("{out}"))
            .split(',')
            .map(|x| x.parse().unwrap())
            .collect()
    };
    // The lines are the GPUs in the ordering (every GPU of this guest has a node).
    assert_eq!(lines.len(), drmtool::gpu::gpus().unwrap().len(), "{out}");
    let (la, lb) = (links(line(A)), links(line(B)));
    assert_eq!((la[a], la[b], lb[a], lb[b]), (-1, 0, 0, -1), "{out}");
}

/// Real Slurm (22.05) on the gres.conf `slurm gres-conf` prints (A `Cores=0`, B
/// `Cores=1`, every other GPU all cores; A and B are the lane's only virtio-gpus): with
/// one CPU held by a job without GPUs, a one-core job asking for one virtio-gpu with
/// `--gres-flags=enforce-binding` is given the GPU whose core is the free one, on that
/// core (slurmctld's `CPU_IDs`); both at once on one core with enforce-binding are refused
/// (their cores differ and one is taken), and without it the same request runs.
#[test]
fn slurm_enforce_binding_puts_the_job_on_its_gpus_cores() {
    let (a, b) = profile();
    let gpus = slurm_guest!();
    let (code, gres_conf, err) = run_out(&mut drmtool(&["slurm", "gres-conf"]));
    assert_eq!(code, 0, "{err}");
    let cluster = Cluster::start(&gres_conf, &gpus);
    let run = |args: &[&str]| {
        cluster
            .cmd(args[0])
            .args(&args[1..])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    // The job's CPU_IDs as slurmctld allocated them.
    let cpu_ids = |text: &str| -> Option<String> {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix("CPU_IDs="))
            .map(str::to_string)
    };
    // A one-CPU job without GPUs holds a CPU (killed at the end).
    let mut holder = cluster
        .cmd("srun")
        .args(["-n1", "-c1", "/bin/sleep", "600"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let held = loop {
        let o = run(&["scontrol", "show", "job", "-d"]);
        let t = String::from_utf8_lossy(&o.stdout).to_string();
        if t.contains("JobState=RUNNING")
            && let Some(c) = cpu_ids(&t)
        {
            break c;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the holder never ran: {t}"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    let (free, want) = match held.as_str() {
        "0" => ("1", b),
        "1" => ("0", a),
        h => panic!("the one-CPU holder got CPUs {h}"),
    };
    let show = "echo \"gpus=$SLURM_STEP_GPUS\"; scontrol show job -d $SLURM_JOB_ID | grep CPU_IDs";
    // A one-core step asking for `n` virtio-gpus, with enforce-binding or not.
    let srun = |n: usize, bind: bool| {
        let gres = format!("--gres=gpu:virtio_gpu:{n}");
        let mut args = vec!["srun", "--immediate=30", "-n1", "-c1", gres.as_str()];
        if bind {
            args.push("--gres-flags=enforce-binding");
        }
        args.extend(["/bin/sh", "-c", show]);
        run(&args)
    };
    let o = srun(1, true);
    assert!(
        o.status.success(),
        "{}",
        failed(&cluster.dir, "srun (bound)", &o)
    );
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let got = out
        .lines()
        .find_map(|l| l.strip_prefix("gpus="))
        .unwrap_or_default();
    let cpus = cpu_ids(&out).unwrap_or_default();
    let cpus = cpus.as_str();
    assert_eq!(
        (got, cpus),
        (want.to_string().as_str(), free),
        "CPU {held} held: the bound job needs the GPU of CPU {free} (A {a}, B {b}): {}",
        failed(&cluster.dir, "srun (bound)", &o)
    );
    let o = srun(2, true);
    assert!(
        !o.status.success(),
        "both GPUs on one core: {}",
        failed(&cluster.dir, "srun", &o)
    );
    // Without enforce-binding the same request runs: the refusal was the binding's.
    let o = srun(2, false);
    assert!(
        o.status.success(),
        "{}",
        failed(&cluster.dir, "srun (unbound)", &o)
    );
    let _ = holder.kill();
    let _ = holder.wait();
}
