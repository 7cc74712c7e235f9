//! Issue 28 in the guest: `drmtool run --gpu` gives a job the NVIDIA node of its GPU and
//! the shared control node, and denies every other NVIDIA node, on synthetic NVIDIA
//! nodes (no NVIDIA GPU or driver here). Two of the guest's PCI GPUs are made "NVIDIA"
//! by a `/proc/driver/nvidia/gpus/<bus id>/information` tree (a tmpfs over /proc/driver)
//! giving them the device minors 0 and 1, and by the nodes `/dev/nvidia0`,
//! `/dev/nvidia1` (195:0, 195:1) and `/dev/nvidiactl` (195:255). With no driver bound to
//! major 195, an open the device program allows fails with ENXIO and one it denies with
//! EPERM, which tells the verdicts apart; the test process itself (no program) gets ENXIO
//! for every node, which shows the EPERM is the job's program's.
//!
//! Also: a PCI function of the guest that is no GPU made an NVIDIA GPU without a DRM node
//! (it takes its place in the ordering and runs isolated), and `slurm gres-conf` naming
//! the synthetic GPUs by `/dev/nvidiaN`, parsed by Debian's slurmd (`slurmd -G`).

use drmtool::gpu;
use drmtool::isolate::run::{self, RunRequest};
use drmtool::isolate::who::Caller;
use kernel_tests::{in_guest, skip};
use serde_json::Value;

mod nvidia_common;
mod schema_common;
mod slurm_common;
use nvidia_common::SyntheticNvidia;
use schema_common::validate;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

const PROBE_ENV: &str = "DRMTOOL_VENDOR_PROBE_OUT";
const DIRFD_ENV: &str = "DRMTOOL_VENDOR_PROBE_DIRFD";
const NODES: [&str; 3] = ["nvidia0", "nvidia1", "nvidiactl"];

/// How an open of `/dev/name`, or of `name` in the directory `dir` (a path), for read and
/// write ends: `ok` or the errno's name.
fn verdict(dir: Option<&str>, name: &str) -> String {
    let path = format!("{}/{name}", dir.unwrap_or("/dev"));
    let flags = rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC;
    match rustix::fs::open(path.as_str(), flags, rustix::fs::Mode::empty()) {
        Ok(_) => "ok".into(),
        Err(rustix::io::Errno::NXIO) => "ENXIO".into(),
        Err(rustix::io::Errno::PERM) => "EPERM".into(),
        Err(rustix::io::Errno::NOENT) => "ENOENT".into(),
        Err(e) => format!("{e:?}"),
    }
}

/// What the job sees: each synthetic node in its own /dev, then in the guest's /dev
/// through the kept directory fd (`/proc/self/fd/N`), and its CUDA variable.
fn probe(out: &Path) {
    let fd: i32 = std::env::var(DIRFD_ENV).unwrap().parse().unwrap();
    let host = format!("/proc/self/fd/{fd}");
    let mut own = serde_json::Map::new();
    let mut through_host = serde_json::Map::new();
    for n in NODES {
        own.insert(n.into(), verdict(None, n).into());
        through_host.insert(n.into(), verdict(Some(&host), n).into());
    }
    let v = serde_json::json!({
        "own_dev": own,
        "host_dev": through_host,
        "cuda": std::env::var("CUDA_VISIBLE_DEVICES").ok(),
    });
    std::fs::write(out, v.to_string()).unwrap();
}

/// The test that doubles as the job's command.
#[test]
fn probe_entry() {
    if let Some(out) = std::env::var_os(PROBE_ENV) {
        probe(Path::new(&out));
        std::process::exit(0);
    }
}

fn entry_argv(out: &Path, dirfd: i32) -> Vec<OsString> {
    vec![
        "env".into(),
        "-u".into(),
        "KERNEL_TESTS_SIGNAL_STORM".into(),
        format!("{PROBE_ENV}={}", out.display()).into(),
        format!("{DIRFD_ENV}={dirfd}").into(),
        std::env::current_exe().unwrap().into_os_string(),
        "probe_entry".into(),
        "--exact".into(),
        "--nocapture".into(),
        "-q".into(),
        "--test-threads=1".into(),
    ]
}

/// The probe under `drmtool run --as-root --gpu spec`, with the guest's /dev kept.
fn probe_under(spec: &str) -> Value {
    use rustix::fd::AsRawFd;
    let out = PathBuf::from(format!("/tmp/drmtool-vendor-{}.json", std::process::id()));
    let _ = std::fs::remove_file(&out);
    let dev = rustix::fs::open(
        "/dev",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
        rustix::fs::Mode::empty(),
    )
    .expect("/dev");
    let req = RunRequest {
        gpus: vec![spec.parse::<gpu::GpuSpec>().unwrap()],
        argv: entry_argv(&out, dev.as_raw_fd()),
        as_root: true,
        keep_fds: vec![dev.as_raw_fd()],
        caller: Some(Caller { uid: 0, sudo: None }),
        ..Default::default()
    };
    let code = run::run(&req, &mut std::io::sink()).unwrap_or_else(|e| panic!("run {spec}: {e}"));
    let text = std::fs::read_to_string(&out)
        .unwrap_or_else(|e| panic!("the probe wrote no report ({e}); exit {code}"));
    let _ = std::fs::remove_file(&out);
    assert_eq!(code, 0, "{text}");
    serde_json::from_str(&text).unwrap()
}

/// A job on synthetic NVIDIA GPU 0 opens its `/dev/nvidia0` and `nvidiactl` (ENXIO: past
/// the program, no driver) and is denied `/dev/nvidia1` (EPERM), which is not in its /dev
/// either; a job on a GPU that is not NVIDIA is denied every NVIDIA node. The verdict
/// table is printed for the note.
#[test]
fn run_gives_a_job_only_its_nvidia_nodes() {
    if !in_guest() {
        skip!("not in a vm guest: no cgroup v2 and GPUs to isolate with here");
    }
    let gpus = gpu::gpus().expect("the guest has DRM devices");
    let pci: Vec<&gpu::Gpu> = gpus.iter().filter(|g| g.bus_id.is_some()).collect();
    assert!(pci.len() >= 3, "the guest has three PCI GPUs: {gpus:?}");
    let bus = |g: &gpu::Gpu| g.bus_id.clone().unwrap();
    let (nv0, nv1, other) = (bus(pci[0]), bus(pci[1]), bus(pci[2]));
    let _synthetic = SyntheticNvidia::new(&[(nv0.as_str(), 0), (nv1.as_str(), 1)]);
    // Without a device program every node gets as far as the missing driver.
    for n in NODES {
        assert_eq!(verdict(None, n), "ENXIO", "/dev/{n} from the test itself");
    }
    let r = drmtool::vendor::discover(&drmtool::vendor::VendorRoots::default());
    assert!(r.unidentified.is_empty(), "{r:?}");
    // `devices` lists them with their GPUs' indices.
    let (code, out) = drmtool::cli::run_captured(&["devices", "--json"]);
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    validate(&v, "devices.schema.json", "devices --json");
    let listed: Vec<(String, Value, String)> = v["vendor_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["path"].as_str().unwrap().to_string(),
                n["index"].clone(),
                n["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            (
                "/dev/nvidia0".into(),
                Value::from(pci[0].index),
                "nvidia-gpu".into()
            ),
            (
                "/dev/nvidia1".into(),
                Value::from(pci[1].index),
                "nvidia-gpu".into()
            ),
            ("/dev/nvidiactl".into(), Value::Null, "nvidia-ctl".into()),
        ],
        "{out}"
    );
    let on0 = probe_under(&nv0);
    let on1 = probe_under(&nv1);
    let elsewhere = probe_under(&other);
    eprintln!("verdicts (own /dev | the guest's /dev):");
    for (what, v) in [("GPU 0", &on0), ("GPU 1", &on1), ("not NVIDIA", &elsewhere)] {
        eprintln!("  job on {what}: {} | {}", v["own_dev"], v["host_dev"]);
    }
    let table = |v: &Value, k: &str| -> Vec<String> {
        NODES
            .iter()
            .map(|n| v[k][*n].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        table(&on0, "own_dev"),
        ["ENXIO", "ENOENT", "ENXIO"],
        "{on0}"
    );
    assert_eq!(
        table(&on0, "host_dev"),
        ["ENXIO", "EPERM", "ENXIO"],
        "{on0}"
    );
    assert_eq!(
        table(&on1, "own_dev"),
        ["ENOENT", "ENXIO", "ENXIO"],
        "{on1}"
    );
    assert_eq!(
        table(&on1, "host_dev"),
        ["EPERM", "ENXIO", "ENXIO"],
        "{on1}"
    );
    assert_eq!(
        table(&elsewhere, "own_dev"),
        ["ENOENT", "ENOENT", "ENOENT"],
        "{elsewhere}"
    );
    assert_eq!(
        table(&elsewhere, "host_dev"),
        ["EPERM", "EPERM", "EPERM"],
        "{elsewhere}"
    );
    // A GPU whose NVIDIA information names no valid minor is refused, never guessed.
    let d = PathBuf::from(format!("/proc/driver/nvidia/gpus/{other}"));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("information"), "Model: x\nDevice Minor: \t banana\n").unwrap();
    let req = RunRequest {
        gpus: vec![other.parse::<gpu::GpuSpec>().unwrap()],
        argv: vec!["true".into()],
        as_root: true,
        caller: Some(Caller { uid: 0, sudo: None }),
        ..Default::default()
    };
    match run::run(&req, &mut std::io::sink()) {
        Err(e @ run::RunError::Unidentified { .. }) => {
            assert_eq!(drmtool::cli::Exit::of_run(&e) as u8, 125);
            eprintln!("refused: {e}");
        }
        other => panic!("a GPU with an unidentified NVIDIA node ran a job: {other:?}"),
    }
}

/// What `sh` says when it opens `/dev/nvidia0` for read and write from inside `cg`.
fn open_in(cg: &Path) -> String {
    let o = std::process::Command::new("sh")
        .args([
            "-c",
            &format!(
                "echo $$ > {}/cgroup.procs && exec 3<>/dev/nvidia0 && echo opened",
                cg.display()
            ),
        ])
        .env_remove("KERNEL_TESTS_SIGNAL_STORM")
        .output()
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `cgroup deny-gpus` denies the NVIDIA majors too (EPERM where the node otherwise gets as
/// far as the missing driver, ENXIO), and `allow-gpus` lifts it.
#[test]
fn deny_gpus_denies_nvidia_nodes_too() {
    if !in_guest() {
        skip!("not in a vm guest: no cgroup v2 here");
    }
    let gpus = gpu::gpus().expect("the guest has DRM devices");
    let bus = gpus
        .iter()
        .find_map(|g| g.bus_id.clone())
        .expect("a PCI GPU");
    let _synthetic = SyntheticNvidia::new(&[(bus.as_str(), 0)]);
    let cg = PathBuf::from(format!(
        "/sys/fs/cgroup/drmtool-vendor-{}",
        std::process::id()
    ));
    std::fs::create_dir(&cg).unwrap();
    let before = open_in(&cg);
    let denied = drmtool::isolate::deny::deny_gpus(cg.to_str().unwrap()).unwrap();
    let during = open_in(&cg);
    let (code, rules) = drmtool::cli::run_captured(&["cgroup", "devices", cg.to_str().unwrap()]);
    let allowed = drmtool::isolate::deny::allow_gpus(cg.to_str().unwrap()).unwrap();
    let after = open_in(&cg);
    let _ = std::fs::remove_dir(&cg);
    eprintln!("before: {before}during: {during}after: {after}");
    assert!(before.contains("No such device or address"), "{before}");
    assert!(denied.majors.contains(&195), "{denied:?}");
    assert!(during.contains("Operation not permitted"), "{during}");
    assert_eq!(code, std::process::ExitCode::SUCCESS);
    assert!(rules.contains("deny c 195:* rwm"), "{rules}");
    assert_eq!(allowed.detached.len(), 1, "{allowed:?}");
    assert!(after.contains("No such device or address"), "{after}");
}

/// The first PCI function of the guest that is not a display controller (class `0x03....`),
/// not a bridge (`0x06....`) and not under a DRM GPU's bus id: a device to call an NVIDIA
/// GPU without a DRM node. Any non-display function where the guest has no other.
fn not_a_gpu(drm_bus_ids: &[String]) -> Option<String> {
    let mut devices: Vec<(String, String)> = std::fs::read_dir("/sys/bus/pci/devices")
        .ok()?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let class = std::fs::read_to_string(e.path().join("class")).ok()?;
            Some((name, class.trim().to_string()))
        })
        .filter(|(name, class)| {
            gpu::is_bus_id(name) && !class.starts_with("0x03") && !drm_bus_ids.contains(name)
        })
        .collect();
    devices.sort();
    devices
        .iter()
        .find(|(_, class)| !class.starts_with("0x06"))
        .or_else(|| devices.first())
        .map(|(name, _)| name.clone())
}

/// An NVIDIA GPU without a DRM node (no nvidia-drm), synthetic: a PCI function of the guest
/// that is no GPU, given minor 1 by `/proc/driver/nvidia/gpus/<its bus id>/information`
/// (GPU 0's minor goes to a DRM GPU). It is a GPU of the ordering, at its bus id's place:
/// `devices --json` lists it with no DRM node and `/dev/nvidia1`, every GPU after it moves
/// up one (printed for the note); `run --gpu <its bus id>` opens its `/dev/nvidia1` and
/// `nvidiactl` (ENXIO: past the device program, no driver) and is denied `/dev/nvidia0`
/// (EPERM), which is not in its /dev either (ENOENT).
#[test]
fn an_nvidia_gpu_without_a_drm_node_is_in_the_ordering_and_isolated() {
    if !in_guest() {
        skip!("not in a vm guest: no cgroup v2 and GPUs to isolate with here");
    }
    let before = gpu::gpus().expect("the guest has DRM devices");
    let drm_bus: Vec<String> = before.iter().filter_map(|g| g.bus_id.clone()).collect();
    let with_drm = drm_bus.first().expect("a PCI GPU").clone();
    let bare = not_a_gpu(&drm_bus).expect("the guest has a PCI function that is no GPU");
    let _synthetic = SyntheticNvidia::new(&[(with_drm.as_str(), 0), (bare.as_str(), 1)]);
    let after = gpu::gpus().expect("the guest's GPUs");
    assert_eq!(after.len(), before.len() + 1, "{after:#?}");
    let g = after
        .iter()
        .find(|g| g.bus_id.as_deref() == Some(bare.as_str()))
        .unwrap_or_else(|| panic!("{bare} is no GPU: {after:#?}"));
    assert!(g.nodes.is_empty(), "{g:?}");
    assert_eq!(
        g.nvidia().map(|n| n.path.clone()),
        Some(PathBuf::from("/dev/nvidia1"))
    );
    let place = after
        .iter()
        .filter(|x| x.bus_id.as_ref().is_some_and(|b| *b < bare))
        .count();
    assert_eq!(g.index, place, "its place by bus id");
    // The index changes a user sees: each GPU after it, one up.
    for b in &before {
        let a = after
            .iter()
            .find(|a| a.name == b.name && a.bus_id == b.bus_id)
            .unwrap();
        let moved = b.bus_id.as_ref().is_none_or(|id| *id > bare);
        assert_eq!(a.index, b.index + usize::from(moved), "{}", b.name);
        eprintln!("GPU {} {} -> {}", b.label(), b.index, a.index);
    }
    eprintln!("GPU {bare} (no DRM node, /dev/nvidia1): new at {}", g.index);
    // devices --json: every GPU in bus-id order, this one with no DRM node.
    let (code, out) = drmtool::cli::run_captured(&["devices", "--json"]);
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    validate(&v, "devices.schema.json", "devices --json");
    let rows = v["gpus"].as_array().unwrap();
    let order: Vec<(u64, Option<String>)> = rows
        .iter()
        .map(|r| {
            (
                r["index"].as_u64().unwrap(),
                r["bus_id"].as_str().map(String::from),
            )
        })
        .collect();
    let want: Vec<(u64, Option<String>)> = after
        .iter()
        .map(|g| (g.index as u64, g.bus_id.clone()))
        .collect();
    assert_eq!(order, want, "{out}");
    let pci: Vec<&String> = want.iter().filter_map(|(_, b)| b.as_ref()).collect();
    let mut sorted = pci.clone();
    sorted.sort();
    assert_eq!(pci, sorted, "bus-id order");
    let row = &rows[g.index];
    assert_eq!(row["bus_id"], Value::from(bare.as_str()), "{row}");
    assert_eq!(row["drm_nodes"], serde_json::json!([]), "{row}");
    assert_eq!(
        row["vendor_nodes"],
        serde_json::json!(["/dev/nvidia1"]),
        "{row}"
    );
    assert!(
        !v["devices"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["index"].as_u64() == Some(g.index as u64)),
        "no DRM node row for it: {out}"
    );
    // The table shows it by its NVIDIA node.
    let (code, table) = drmtool::cli::run_captured(&["devices"]);
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{table}");
    assert!(
        table.lines().any(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.len() > 3 && w[0] == g.index.to_string() && w[2] == "/dev/nvidia1"
        }),
        "{table}"
    );
    // A job on it: its NVIDIA node and the control node, not GPU 0's.
    let on = probe_under(&bare);
    eprintln!(
        "verdicts on the GPU without a DRM node (own /dev | the guest's /dev): {} | {}",
        on["own_dev"], on["host_dev"]
    );
    let table = |k: &str| -> Vec<String> {
        NODES
            .iter()
            .map(|n| on[k][*n].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(table("own_dev"), ["ENOENT", "ENXIO", "ENXIO"], "{on}");
    assert_eq!(table("host_dev"), ["EPERM", "ENXIO", "ENXIO"], "{on}");
    // info/caps/kms name it and refuse it: it has no DRM node.
    let (code, _) = drmtool::cli::run_captured(&["info", &bare]);
    assert_eq!(code, std::process::ExitCode::from(3));
}

/// `slurm gres-conf` with synthetic NVIDIA GPUs 0 and 1 names them by `/dev/nvidia0` and
/// `/dev/nvidia1` (the other GPUs by render node, else card node), one line per GPU in the
/// ordering; Debian's slurmd 22.05 parses it (`slurmd -G`: the GRES configuration of this
/// node, merged from slurm.conf and gres.conf) and names each `/dev/nvidiaN` with index N
/// (slurmd's `Index=` is the number its file name ends in).
#[test]
fn gres_conf_names_nvidia_nodes_and_slurmd_parses_it() {
    if !in_guest() {
        skip!("not in a vm guest: no DRM devices here");
    }
    let Some(slurmd) = kernel_tests::which("slurmd") else {
        skip!("slurmd is not installed (scripts/setup installs slurmd)");
    };
    let gpus = gpu::gpus().expect("the guest has DRM devices");
    let pci: Vec<&gpu::Gpu> = gpus.iter().filter(|g| g.bus_id.is_some()).collect();
    assert!(pci.len() >= 2, "the guest has two PCI GPUs: {gpus:?}");
    let (nv0, nv1) = (
        pci[0].bus_id.clone().unwrap(),
        pci[1].bus_id.clone().unwrap(),
    );
    let _synthetic = SyntheticNvidia::new(&[(nv0.as_str(), 0), (nv1.as_str(), 1)]);
    let (code, text) = drmtool::cli::run_captured(&["slurm", "gres-conf"]);
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{text}");
    eprintln!("{text}");
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(lines.len(), gpus.len(), "one line per GPU: {text}");
    let mut types: Vec<(String, usize)> = Vec::new();
    for (g, l) in gpus.iter().zip(&lines) {
        let file = match g.bus_id.as_deref() {
            Some(b) if b == nv0 => PathBuf::from("/dev/nvidia0"),
            Some(b) if b == nv1 => PathBuf::from("/dev/nvidia1"),
            _ => g.render().or_else(|| g.card()).unwrap().path.clone(),
        };
        let ty = g.driver.clone().expect("every guest GPU has a driver");
        assert!(
            l.starts_with(&format!("Name=gpu Type={ty} File={}", file.display())),
            "GPU {}: {l}",
            g.index
        );
        match types.iter_mut().find(|(t, _)| *t == ty) {
            Some((_, c)) => *c += 1,
            None => types.push((ty, 1)),
        }
    }
    // slurmd -G on a minimal configuration with these lines.
    slurm_common::ipv4_configured();
    let dir = PathBuf::from(format!("/tmp/drmtool-gres-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // slurmd wants its spool directory (its socket's) to exist, even for -G.
    for sub in ["spool", "state"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    let d = dir.display();
    let gres: Vec<String> = types.iter().map(|(t, c)| format!("gpu:{t}:{c}")).collect();
    let conf = dir.join("slurm.conf");
    std::fs::write(
        &conf,
        format!(
            "ClusterName=drmtest\nSlurmctldHost=localhost(127.0.0.1)\n\
             SlurmUser=root\nSlurmdUser=root\n\
             StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\n\
             SlurmdPidFile={d}/slurmd.pid\nSlurmdLogFile={d}/slurmd.log\n\
             GresTypes=gpu\nSelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n\
             ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
             NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} Gres={gres} State=UNKNOWN\n\
             PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP\n",
            cpus = std::thread::available_parallelism().map_or(1, |n| n.get()),
            gres = gres.join(","),
        ),
    )
    .unwrap();
    std::fs::write(dir.join("gres.conf"), format!("AutoDetect=off\n{text}")).unwrap();
    // slurmd initialises its cgroup plugin even for -G: cgroup v2 without systemd (no dbus
    // in the guest), under a system.slice it does not create itself (as drmtool_slurm's
    // cluster has it; run alone, this test must not depend on that one).
    std::fs::write(
        dir.join("cgroup.conf"),
        "CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes\nConstrainDevices=no\n",
    )
    .unwrap();
    std::fs::create_dir_all("/sys/fs/cgroup/system.slice").expect("/sys/fs/cgroup/system.slice");
    let o = std::process::Command::new(slurmd)
        .args(["-N", "localhost", "-f"])
        .arg(&conf)
        .arg("-G")
        .env("SLURM_CONF", &conf)
        .env_remove("KERNEL_TESTS_SIGNAL_STORM")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("slurmd -G");
    let said = format!(
        "{}{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
        std::fs::read_to_string(dir.join("slurmd.log")).unwrap_or_default()
    );
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("slurmd -G:\n{said}");
    assert!(o.status.success(), "slurmd -G: {}\n{said}", o.status);
    let gres_lines: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("Gres Name=gpu"))
        .collect();
    assert_eq!(gres_lines.len(), gpus.len(), "{said}");
    for (minor, bus) in [(0, &nv0), (1, &nv1)] {
        let ty = gpus
            .iter()
            .find(|g| g.bus_id.as_ref() == Some(bus))
            .and_then(|g| g.driver.clone())
            .unwrap();
        let file = format!("File=/dev/nvidia{minor}");
        let line = gres_lines
            .iter()
            .find(|l| l.split_whitespace().any(|w| w == file))
            .unwrap_or_else(|| panic!("slurmd names no {file}: {said}"));
        assert!(
            line.split_whitespace()
                .any(|w| w == format!("Index={minor}")),
            "{line}"
        );
        assert!(
            line.split_whitespace().any(|w| w == format!("Type={ty}")),
            "{line}"
        );
    }
}

/// A job on an NVIDIA GPU while `nvidia-uvm` is not loaded: `run` (root) tries
/// `/sbin/modprobe nvidia-uvm` before the job, and when that fails (no such module in the
/// guest) still runs the job, without `/dev/nvidia-uvm`, and warns once, naming
/// modprobe's result: the very result of the same command run here by hand. A job on a
/// GPU that is not NVIDIA tries nothing and warns of nothing.
///
/// /proc/devices cannot be faked by the tmpfs over /proc/driver, and only a driver
/// registers a major there: CUSE would (its server's `DEVNAME=` names the region), but the
/// matrix kernels have no CONFIG_CUSE, so the loaded case ("the job's /dev gets
/// nvidia-uvm at the listed major") is covered on the host (`isolate::uvm`,
/// `vendor_access`) and by scripts/device-check on a real GPU.
#[test]
fn run_tries_to_load_nvidia_uvm_and_runs_the_job_without_it() {
    use drmtool::isolate::uvm::{self, UvmError};
    use drmtool::vendor::{MajorError, parse_proc_devices};
    if !in_guest() {
        skip!("not in a vm guest: no cgroup v2 and GPUs to isolate with here");
    }
    let uvm_listed = || {
        let text = std::fs::read_to_string("/proc/devices").unwrap();
        parse_proc_devices(&text).char_major("nvidia-uvm")
    };
    assert_eq!(
        uvm_listed(),
        Err(MajorError::NotListed("nvidia-uvm")),
        "the guest has no nvidia-uvm"
    );
    let gpus = gpu::gpus().expect("the guest has DRM devices");
    let pci: Vec<&gpu::Gpu> = gpus.iter().filter(|g| g.bus_id.is_some()).collect();
    assert!(pci.len() >= 2, "the guest has two PCI GPUs: {gpus:?}");
    let (nv0, other) = (
        pci[0].bus_id.clone().unwrap(),
        pci[1].bus_id.clone().unwrap(),
    );
    let _synthetic = SyntheticNvidia::new(&[(nv0.as_str(), 0)]);
    // What modprobe says here, the same command run by hand.
    let by_hand = uvm::run_command(&uvm::modprobe_command())
        .expect_err("the guest kernel has no nvidia-uvm module");
    eprintln!("by hand: {by_hand}");
    if Path::new(uvm::MODPROBE).exists() {
        match &by_hand {
            UvmError::Failed { code, stderr, .. } => {
                assert_eq!(*code, 1, "{by_hand}");
                assert!(stderr.to_string_lossy().contains("modprobe"), "{by_hand}");
            }
            other => panic!("modprobe ran, and did not fail as kmod does: {other:?}"),
        }
    } else {
        assert!(
            matches!(by_hand, UvmError::NotStarted { .. }),
            "{by_hand:?}"
        );
    }
    // The job: its own GPU's node and nvidiactl, no nvidia-uvm (nothing is guessed).
    let check = "test -c /dev/nvidia0 && test -c /dev/nvidiactl && test ! -e /dev/nvidia-uvm \
                 && test ! -e /dev/nvidia-uvm-tools";
    let req = |bus: &str, script: &str| RunRequest {
        gpus: vec![bus.parse::<gpu::GpuSpec>().unwrap()],
        argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
        as_root: true,
        caller: Some(Caller { uid: 0, sudo: None }),
        ..Default::default()
    };
    let mut warnings = Vec::new();
    let code = run::run_with(&req(&nv0, check), &mut std::io::sink(), &mut |w| {
        warnings.push(w.clone())
    })
    .unwrap_or_else(|e| panic!("run {nv0}: {e}"));
    assert_eq!(
        code, 0,
        "the job on the NVIDIA GPU ran, with its nodes and no nvidia-uvm"
    );
    assert_eq!(warnings, [run::RunWarning::UvmNotLoaded(by_hand.clone())]);
    assert_eq!(uvm_listed(), Err(MajorError::NotListed("nvidia-uvm")));
    // Not NVIDIA: no attempt, no warning.
    let mut warnings = Vec::new();
    let none = "test ! -e /dev/nvidia0 && test ! -e /dev/nvidiactl && test ! -e /dev/nvidia-uvm";
    let code = run::run_with(&req(&other, none), &mut std::io::sink(), &mut |w| {
        warnings.push(w.clone())
    })
    .unwrap_or_else(|e| panic!("run {other}: {e}"));
    assert_eq!(code, 0);
    assert_eq!(warnings, []);
    // The command line prints it as one warning line, and exits with the job's status.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_drmtool-guest"))
        .args([
            "run",
            "--as-root",
            "--gpu",
            &nv0,
            "--",
            "/bin/sh",
            "-c",
            check,
        ])
        .env_remove("KERNEL_TESTS_SIGNAL_STORM")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    eprintln!("drmtool run: {stderr}");
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines,
        [format!(
            "drmtool: run: warning: {}",
            run::RunWarning::UvmNotLoaded(by_hand)
        )],
        "{stderr}"
    );
    assert!(lines[0].contains("(/sbin/modprobe nvidia-uvm "), "{stderr}");
}
