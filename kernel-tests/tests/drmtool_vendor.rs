//! Issue 28 in the guest: `drmtool run --gpu` gives a job the NVIDIA node of its GPU and
//! the shared control node, and denies every other NVIDIA node, on synthetic NVIDIA
//! nodes (no NVIDIA GPU or driver here). Two of the guest's PCI GPUs are made "NVIDIA"
//! by a `/proc/driver/nvidia/gpus/<bus id>/information` tree (a tmpfs over /proc/driver)
//! giving them the device minors 0 and 1, and by the nodes `/dev/nvidia0`,
//! `/dev/nvidia1` (195:0, 195:1) and `/dev/nvidiactl` (195:255). With no driver bound to
//! major 195, an open the device program allows fails with ENXIO and one it denies with
//! EPERM, which tells the verdicts apart; the test process itself (no program) gets ENXIO
//! for every node, which shows the EPERM is the job's program's.

use drmtool::gpu;
use drmtool::isolate::run::{self, RunRequest};
use drmtool::isolate::who::Caller;
use kernel_tests::{in_guest, skip};
use serde_json::Value;

mod nvidia_common;
mod schema_common;
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
