//! `drmtool run --gpu` and `drmtool cgroup devices` in real guests, as root over the
//! guest's DRM devices (vkms, vgem, virtio-gpu, bochs, qxl): the job sees only its nodes
//! in /dev/dri and can open only them, even through a devtmpfs it mounts itself or a node
//! it makes with mknod (EPERM from the cgroup's device program); `--renumber` presents
//! them as card0.., renderD128.. in selector order; the cgroup is gone afterwards; the
//! command's exit status comes back; bad selectors are exit 2; `cgroup devices` reads our
//! program back rule for rule.
//!
//! The job's command is this test binary run again: `probe_entry` reports what the job
//! sees and what opens, as JSON in a file. The probe jobs run `--as-root` (the widest job
//! there is: DAC_OVERRIDE, no MKNOD, no SYS_ADMIN) and get the guest's real /dev/dri as a
//! kept directory fd (`--keep-fd`), so that an open of every node of the machine reaches
//! the device program: the chosen ones open, every other is EPERM. The escape routes a
//! hostile job tries are in drmtool_isolation.rs.

use drmtool::gpu;
use drmtool::isolate::run::{self, RunRequest};
use drmtool::isolate::{devprog, inspect};
use kernel_tests::{in_guest, skip};
use serde_json::Value;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

mod schema_common;
use schema_common::validate;

const PROBE_ENV: &str = "DRMTOOL_RUN_PROBE_OUT";

/// A root caller that is not sudo.
const ROOT: drmtool::isolate::who::Caller = drmtool::isolate::who::Caller { uid: 0, sudo: None };

/// The variable that names the kept fd of the real /dev/dri in the probe's environment.
const DIRFD_ENV: &str = "DRMTOOL_RUN_PROBE_DIRFD";

/// The exit status drmtool's command line gives a run error.
fn code_of(e: &run::RunError) -> u8 {
    drmtool::cli::Exit::of_run(e) as u8
}

/// The real /dev/dri as a directory fd the job inherits (no close-on-exec).
fn dri_dirfd() -> rustix::fd::OwnedFd {
    rustix::fs::open(
        "/dev/dri",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
        rustix::fs::Mode::empty(),
    )
    .expect("/dev/dri")
}

/// What the job sees: its /dev/dri (names and device numbers), its cgroup, and for every
/// DRM node of the machine (through a devtmpfs it mounts itself, then through a node it
/// makes with mknod) whether it opens, as the errno name.
fn probe(out: &Path) {
    let mut dri = Vec::new();
    for e in std::fs::read_dir("/dev/dri").expect("/dev/dri").flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let rdev = rustix::fs::stat(e.path()).ok().map(|st| {
            format!(
                "{}:{}",
                rustix::fs::major(st.st_rdev),
                rustix::fs::minor(st.st_rdev)
            )
        });
        dri.push((name, rdev));
    }
    dri.sort();
    let by_path: Vec<String> = std::fs::read_dir("/dev/dri/by-path")
        .map(|rd| {
            rd.flatten()
                .map(|e| {
                    let l = std::fs::read_link(e.path()).unwrap_or_default();
                    format!("{} -> {}", e.file_name().to_string_lossy(), l.display())
                })
                .collect()
        })
        .unwrap_or_default();
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mnt = PathBuf::from(format!("/tmp/drmtool-run-probe-{}", std::process::id()));
    std::fs::create_dir_all(&mnt).unwrap();
    let mounted = rustix::mount::mount(
        "devtmpfs",
        &mnt,
        "devtmpfs",
        rustix::mount::MountFlags::empty(),
        None,
    );
    if mounted.is_ok() {
        let _ = rustix::mount::unmount(&mnt, rustix::mount::UnmountFlags::empty());
    }
    let mut opens = serde_json::Map::new();
    let mut mknods = serde_json::Map::new();
    let dirfd: Option<i32> = std::env::var(DIRFD_ENV).ok().and_then(|s| s.parse().ok());
    if let Some(fd) = dirfd {
        // The kept directory through its fd's link: each open resolves in the real /dev/dri.
        let dir = PathBuf::from(format!("/proc/self/fd/{fd}"));
        let names: Vec<String> = std::fs::read_dir(format!("/proc/self/fd/{fd}"))
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        for name in names {
            let Ok(st) = rustix::fs::lstat(dir.join(&name)) else {
                continue;
            };
            if rustix::fs::FileType::from_raw_mode(st.st_mode)
                != rustix::fs::FileType::CharacterDevice
            {
                continue;
            }
            let key = format!(
                "{}:{}",
                rustix::fs::major(st.st_rdev),
                rustix::fs::minor(st.st_rdev)
            );
            let r = rustix::fs::open(
                dir.join(&name),
                rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            );
            opens.insert(
                key.clone(),
                Value::from(r.err().map_or("ok".into(), |e| format!("{e:?}"))),
            );
            let node = mnt.join(format!("made-{}", key.replace(':', "-")));
            let m = rustix::fs::mknodat(
                rustix::fs::CWD,
                &node,
                rustix::fs::FileType::CharacterDevice,
                rustix::fs::Mode::from_raw_mode(0o600),
                st.st_rdev,
            );
            mknods.insert(
                key,
                Value::from(m.err().map_or("ok".into(), |e| format!("{e:?}"))),
            );
            let _ = std::fs::remove_file(&node);
        }
    }
    let _ = std::fs::remove_dir(&mnt);
    let v = serde_json::json!({
        "dri": dri.iter().map(|(n, d)| serde_json::json!({"name": n, "dev": d})).collect::<Vec<_>>(),
        "by_path": by_path,
        "cgroup": cgroup,
        "devtmpfs": mounted.err().map(|e| format!("{e:?}")),
        "opens": opens,
        "mknods": mknods,
        "env": std::env::vars().filter(|(k, _)| k.contains("VISIBLE") || k.starts_with("DRI_") || k.starts_with("MESA_") || k.starts_with("DRMTOOL_")).collect::<Vec<_>>(),
        "uid": rustix::process::getuid().as_raw(),
    });
    std::fs::write(out, v.to_string()).unwrap();
}

/// The test that doubles as the job's command (see the module docs).
#[test]
fn probe_entry() {
    if let Some(out) = std::env::var_os(PROBE_ENV) {
        probe(Path::new(&out));
        std::process::exit(0);
    }
}

fn me() -> OsString {
    std::env::current_exe().unwrap().into_os_string()
}

/// This binary as `test`'s process, without the signal storm: the storm (a thread that
/// keeps SIGALRM pending on the others) belongs to the process under test, the one calling
/// drmtool's library; in the helpers a pending SIGALRM would outlive their exec of the
/// job's command and kill it (exec resets the handler, not the pending signal), which the
/// drmtool binary, which has no storm, never sees.
fn entry(test: &str) -> Vec<OsString> {
    [
        "env".into(),
        "-u".into(),
        "KERNEL_TESTS_SIGNAL_STORM".into(),
        me(),
        test.into(),
        "--exact".into(),
        "--nocapture".into(),
        "-q".into(),
        "--test-threads=1".into(),
    ]
    .into()
}

/// Runs the probe under `drmtool run --gpu sels` and returns its report and the exit
/// status.
fn probe_under(sels: &[&str], renumber: bool) -> (u8, Value) {
    let out = PathBuf::from(format!(
        "/tmp/drmtool-run-{}-{}.json",
        std::process::id(),
        sels.join("_").replace('/', "_")
    ));
    let _ = std::fs::remove_file(&out);
    let dri = dri_dirfd();
    use rustix::fd::AsRawFd;
    let mut argv = entry("probe_entry");
    // After env's `-u NAME` (options first), before the program.
    argv.insert(3, format!("{PROBE_ENV}={}", out.display()).into());
    argv.insert(4, format!("{DIRFD_ENV}={}", dri.as_raw_fd()).into());
    let req = RunRequest {
        gpus: sels
            .iter()
            .map(|s| s.parse::<gpu::GpuSpec>().unwrap())
            .collect(),
        renumber,
        argv,
        as_root: true,
        keep_fds: vec![dri.as_raw_fd()],
        caller: Some(ROOT),
        ..Default::default()
    };
    let code = run::run(&req, &mut std::io::sink()).unwrap_or_else(|e| panic!("run {sels:?}: {e}"));
    let text = std::fs::read_to_string(&out)
        .unwrap_or_else(|e| panic!("the probe wrote no report ({e}); exit {code}"));
    let _ = std::fs::remove_file(&out);
    (code, serde_json::from_str(&text).unwrap())
}

macro_rules! guest_gpus {
    () => {{
        if !in_guest() {
            skip!("not in a vm guest: no DRM devices or cgroup v2 to isolate with here");
        }
        gpu::gpus().expect("the guest has DRM devices")
    }};
}

/// The `major:minor` of `name` in the probe report's /dev/dri listing.
fn dri_dev(v: &Value, name: &str) -> Option<String> {
    v["dri"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .map(|e| e["dev"].as_str().unwrap().to_string())
}

fn gpu_of<'g>(gpus: &'g [gpu::Gpu], driver: &str) -> &'g gpu::Gpu {
    gpus.iter()
        .find(|g| g.driver.as_deref() == Some(driver))
        .unwrap_or_else(|| panic!("no {driver} in {}", gpu::summary(gpus)))
}

const EPERM: &str = "Os { code: 1, kind: PermissionDenied, message: \"Operation not permitted\" }";

/// The probe report `v` of a job: each node of `all` in `mine` opened through the kept
/// real /dev/dri; every other is EPERM (the device program). No node can be made with
/// mknod, chosen or not (the job has no CAP_MKNOD).
#[track_caller]
fn assert_opens_only(v: &Value, all: &[String], mine: &[String]) {
    for d in all {
        let (open, made) = (&v["opens"][d], &v["mknods"][d]);
        if mine.contains(d) {
            assert_eq!(open, "ok", "{d} (chosen): {v}");
        } else {
            assert_eq!(open, EPERM, "{d} (not chosen): {v}");
        }
        assert_eq!(made, EPERM, "{d}: mknod: {v}");
    }
}

/// `major:minor` of a node, as the probe report keys them.
fn node_dev(n: &gpu::Node) -> String {
    format!("{}:{}", n.dev.0, n.dev.1)
}

fn devs(g: &gpu::Gpu) -> Vec<String> {
    g.nodes.iter().map(node_dev).collect()
}

#[test]
fn the_job_sees_and_opens_only_its_gpu() {
    let gpus = guest_gpus!();
    let vgem = gpu_of(&gpus, "vgem");
    let (code, v) = probe_under(&["vgem"], false);
    assert_eq!(code, 0, "{v}");
    // /dev/dri: exactly vgem's nodes, under their own names and numbers.
    let mut want: Vec<(String, String)> = vgem
        .nodes
        .iter()
        .map(|n| {
            (
                n.path.file_name().unwrap().to_string_lossy().into_owned(),
                format!("{}:{}", n.dev.0, n.dev.1),
            )
        })
        .collect();
    if vgem.nodes.iter().any(|n| n.by_path.is_some()) {
        want.push(("by-path".into(), String::new()));
    }
    want.sort();
    let got: Vec<(String, String)> = v["dri"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["dev"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let got_nodes: Vec<&(String, String)> = got.iter().filter(|(n, _)| n != "by-path").collect();
    let want_nodes: Vec<&(String, String)> = want.iter().filter(|(n, _)| n != "by-path").collect();
    assert_eq!(got_nodes, want_nodes, "{v}");
    // Its own cgroup namespace: the job's cgroup is its root.
    assert_eq!(v["cgroup"], "0::/\n", "{v}");
    assert_eq!(v["devtmpfs"], EPERM, "the job mounts no devtmpfs: {v}");
    assert_eq!(v["uid"], 0, "--as-root: {v}");
    // Every DRM node of the machine: vgem's open and can be made, every other is EPERM.
    let mine = devs(vgem);
    let all: Vec<String> = gpus.iter().flat_map(devs).collect();
    assert!(
        all.len() > mine.len(),
        "the guest has other GPUs: {}",
        gpu::summary(&gpus)
    );
    assert_opens_only(&v, &all, &mine);
    // The cgroup is gone.
    let mine = format!("run-{}-", std::process::id());
    let leftover: Vec<_> = std::fs::read_dir("/sys/fs/cgroup/drmtool.slice")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&mine))
        .map(|e| e.path())
        .collect();
    assert!(leftover.is_empty(), "cgroups left behind: {leftover:?}");
}

#[test]
fn renumber_presents_the_chosen_nodes_in_selector_order() {
    let gpus = guest_gpus!();
    let (vkms, vgem) = (gpu_of(&gpus, "vkms"), gpu_of(&gpus, "vgem"));
    let (code, v) = probe_under(&["vgem", "vkms"], true);
    assert_eq!(code, 0, "{v}");
    let dev_of = |name: &str| dri_dev(&v, name);
    let card = |g: &gpu::Gpu| g.card().map(|n| format!("226:{}", n.dev.1));
    let render = |g: &gpu::Gpu| g.render().map(|n| format!("226:{}", n.dev.1));
    assert_eq!(dev_of("card0"), card(vgem), "{v}");
    assert_eq!(dev_of("card1"), card(vkms), "{v}");
    // Render nodes in the same order, without a gap where a GPU has none (vkms).
    let renders: Vec<String> = [vgem, vkms].iter().filter_map(|g| render(g)).collect();
    for (i, r) in renders.iter().enumerate() {
        assert_eq!(
            dev_of(&format!("renderD{}", 128 + i)).as_ref(),
            Some(r),
            "{v}"
        );
    }
    assert_eq!(
        v["dri"].as_array().unwrap().len(),
        vgem.nodes.len() + vkms.nodes.len(),
        "{v}"
    );
}

/// Two GPUs of one driver (the guest's two virtio-gpus): a bus id gives a job one of them and
/// the other's nodes are EPERM, opened or made with mknod (the device program checks
/// major:minor, not the driver); the driver name gives both; `--renumber` with the two bus
/// ids reversed presents the second as card0/renderD128.
#[test]
fn one_of_two_gpus_of_a_driver_by_bus_id() {
    let gpus = guest_gpus!();
    let twins: Vec<&gpu::Gpu> = gpus
        .iter()
        .filter(|g| g.driver.as_deref() == Some("virtio_gpu"))
        .collect();
    if twins.len() < 2 {
        skip!(
            "one virtio-gpu here (the guest's device set has two): {}",
            gpu::summary(&gpus)
        );
    }
    let (a, b) = (twins[0], twins[1]);
    let (bus_a, bus_b) = (
        a.bus_id.clone().expect("virtio-gpu sits on PCI"),
        b.bus_id.clone().expect("virtio-gpu sits on PCI"),
    );
    assert!(bus_a < bus_b, "the ordering puts {bus_a} before {bus_b}");
    assert!(a.index < b.index);
    assert!(
        a.render().is_some() && b.render().is_some(),
        "two render nodes"
    );

    let (code, v) = probe_under(&[&bus_b], false);
    assert_eq!(code, 0, "{v}");
    let all: Vec<String> = gpus.iter().flat_map(devs).collect();
    assert_opens_only(&v, &all, &devs(b));
    assert_eq!(
        v["dri"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["name"] != "by-path")
            .count(),
        b.nodes.len(),
        "{v}"
    );

    // The driver name: both.
    let (code, v) = probe_under(&["virtio_gpu"], false);
    assert_eq!(code, 0, "{v}");
    for d in devs(a).into_iter().chain(devs(b)) {
        assert_eq!(v["opens"][&d], "ok", "{d}: {v}");
    }

    // Renumbered in selector order: b first.
    let (code, v) = probe_under(&[&bus_b, &bus_a], true);
    assert_eq!(code, 0, "{v}");
    let dev_of = |name: &str| dri_dev(&v, name);
    assert_eq!(dev_of("card0"), b.card().map(node_dev), "{v}");
    assert_eq!(dev_of("card1"), a.card().map(node_dev), "{v}");
    assert_eq!(dev_of("renderD128"), b.render().map(node_dev), "{v}");
    assert_eq!(dev_of("renderD129"), a.render().map(node_dev), "{v}");
}

#[test]
fn the_commands_exit_status_comes_back() {
    let _gpus = guest_gpus!();
    let req = |argv: &[&str]| RunRequest {
        gpus: vec!["vgem".parse::<gpu::GpuSpec>().unwrap()],
        argv: argv.iter().map(OsString::from).collect(),
        as_root: true,
        caller: Some(ROOT),
        ..Default::default()
    };
    let code =
        |argv: &[&str]| run::run(&req(argv), &mut std::io::sink()).unwrap_or_else(|e| code_of(&e));
    assert_eq!(code(&["sh", "-c", "exit 7"]), 7);
    assert_eq!(code(&["sh", "-c", "kill -9 $$"]), 137);
    assert_eq!(code(&["true"]), 0);
    // A command that does not exist: the exec's ENOENT comes back through the error
    // pipe, exit 125; one not on PATH is a usage error before anything is set up.
    let e = run::run(&req(&["/nonexistent/cmd"]), &mut std::io::sink()).unwrap_err();
    assert!(e.to_string().contains("execve of the command: "), "{e}");
    assert_eq!(code_of(&e), run::EXIT_SETUP);
    assert_eq!(code(&["no-such-command-here"]), 2);
}

#[test]
fn bad_specs_are_usage_errors_and_unmatched_ones_match_nothing() {
    let gpus = guest_gpus!();
    // A spec that names nothing here exits 3 as in every command; a malformed one 2.
    let run =
        |g: &str| drmtool::cli::run_captured(&["run", "--as-root", "--gpu", g, "--", "true"]).0;
    assert_eq!(run("99"), std::process::ExitCode::from(3));
    assert_eq!(run("nosuchdriver"), std::process::ExitCode::from(3));
    assert_eq!(run("a b"), std::process::ExitCode::from(2));
    // Who the job runs as is decided first: without it, a usage error whatever the GPU.
    let (c, _) = drmtool::cli::run_captured(&["run", "--gpu", "vgem", "--", "true"]);
    assert_eq!(c, std::process::ExitCode::from(2));
    let e = gpu::select(&["99".parse::<gpu::GpuSpec>().unwrap()], &gpus)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&gpu::summary(&gpus)),
        "the error lists the GPUs: {e}"
    );
    // --env-only: the variables of a virtio-gpu (a PCI function) and nothing run.
    let virtio = gpu_of(&gpus, "virtio_gpu");
    let bus = virtio.bus_id.clone().expect("virtio-gpu sits on PCI");
    let (c, out) = drmtool::cli::run_captured(&["run", "--gpu", &bus, "--env-only"]);
    assert_eq!(c, std::process::ExitCode::SUCCESS, "{out}");
    assert!(
        out.contains(&format!("DRI_PRIME=pci-{}\n", bus.replace([':', '.'], "_"))),
        "{out}"
    );
    assert!(out.contains("MESA_VK_DEVICE_SELECT=1af4:"), "{out}");
}

#[test]
fn cgroup_devices_reads_back_our_program() {
    let gpus = guest_gpus!();
    let vkms = gpu_of(&gpus, "vkms");
    let minors: Vec<u32> = vkms.nodes.iter().map(|n| n.dev.1).collect();
    let parent = drmtool::isolate::cgroup::own().unwrap();
    let cg = drmtool::isolate::cgroup::Cgroup::create(
        &parent,
        &format!("drmtool-test-{}", std::process::id()),
    )
    .unwrap();
    let policy = devprog::Policy::only_drm_minors(&minors);
    run::attach(cg.path(), &policy).unwrap();
    let r = inspect::inspect(cg.path()).unwrap();
    assert_eq!(r.attach_flags, "BPF_F_ALLOW_MULTI");
    assert_eq!(r.attached.len(), 1, "{r:?}");
    let p = &r.attached[0];
    assert_eq!(
        (p.kind, p.name.as_str()),
        ("drmtool", "drmtool_run"),
        "{p:?}"
    );
    let mut want: Vec<String> = minors
        .iter()
        .map(|m| format!("allow c 226:{m} rwm"))
        .collect();
    want.push("deny c 226:* rwm".into());
    want.push("default allow".into());
    assert_eq!(p.rules, want);
    for m in &minors {
        assert!(p.list.contains(&format!("c 226:{m} rwm")), "{p:?}");
    }
    assert!(p.list.contains(&"c 226:* -".to_string()), "{p:?}");
    assert!(r.effective.iter().any(|e| e.id == p.id), "{r:?}");
    // The JSON and the text of the command itself (the test's own cgroup has no program).
    let (c, text) = drmtool::cli::run_captured(&["cgroup", "devices", cg.path().to_str().unwrap()]);
    assert_eq!(c, std::process::ExitCode::SUCCESS, "{text}");
    assert!(text.contains("rule deny c 226:* rwm"), "{text}");
    let (c, text) = drmtool::cli::run_captured(&["cgroup", "devices"]);
    assert_eq!(c, std::process::ExitCode::SUCCESS, "{text}");
    let (c, json) =
        drmtool::cli::run_captured(&["cgroup", "devices", cg.path().to_str().unwrap(), "--json"]);
    assert_eq!(c, std::process::ExitCode::SUCCESS, "{json}");
    let v: Value = serde_json::from_str(&json).unwrap();
    validate(&v, "cgroup-devices.schema.json", "cgroup devices --json");
    assert_eq!(v["attached"][0]["kind"], "drmtool", "{v}");
    drop(cg);
    assert!(
        !parent
            .join(format!("drmtool-test-{}", std::process::id()))
            .exists()
    );
}

/// `drmtool devices` lists the nodes in the ordering, each with its GPU's index and bus id:
/// the PCI GPUs first by bus id (virtio-gpu under its transport's), then vkms and vgem by
/// name; the index is what `run --gpu` takes.
#[test]
fn devices_lists_the_one_ordering() {
    let gpus = guest_gpus!();
    let (c, out) = drmtool::cli::run_captured(&["devices", "--json"]);
    assert_eq!(c, std::process::ExitCode::SUCCESS, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    validate(&v, "devices.schema.json", "devices --json");
    let rows = v["devices"].as_array().unwrap();
    let mut last = (0u64, false);
    for r in rows {
        let index = r["index"].as_u64().unwrap();
        assert!(index >= last.0, "rows in the ordering: {out}");
        let g = &gpus[index as usize];
        assert!(
            g.nodes
                .iter()
                .any(|n| n.path.to_str() == r["path"].as_str()),
            "{r} belongs to GPU {index}: {}",
            gpu::summary(&gpus)
        );
        assert_eq!(r["bus_id"].as_str(), g.bus_id.as_deref(), "{r}");
        let platform = r["bus_id"].is_null();
        assert!(!last.1 || platform, "PCI GPUs before platform ones: {out}");
        last = (index, platform);
    }
    assert_eq!(
        rows.len(),
        gpus.iter().map(|g| g.nodes.len()).sum::<usize>()
    );
    let names: Vec<&str> = gpus
        .iter()
        .filter(|g| g.bus_id.is_none())
        .map(|g| g.name.as_str())
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "platform GPUs by name");
    assert!(
        gpu_of(&gpus, "virtio_gpu").bus_id.is_some(),
        "{}",
        gpu::summary(&gpus)
    );
    assert!(gpu_of(&gpus, "vkms").bus_id.is_none());
}

/// A root-owned cgroup under drmtool.slice with a device program of `policy` attached with
/// `flags` (what a container runtime leaves on a container's cgroup), removed on drop.
fn outer_cgroup(
    tag: &str,
    policy: &devprog::Policy,
    flags: u32,
) -> drmtool::isolate::cgroup::Cgroup {
    let parent = Path::new("/sys/fs/cgroup/drmtool.slice");
    std::fs::create_dir_all(parent).unwrap();
    let cg = drmtool::isolate::cgroup::Cgroup::create(
        parent,
        &format!("test-{tag}-{}", std::process::id()),
    )
    .unwrap();
    run::attach_with(cg.path(), policy, flags).unwrap();
    cg
}

/// A job under a container's cgroup (`--cgroup-parent`) whose program allows vkms and vgem:
/// its program and the container's must both allow, so the job (vkms chosen) opens vkms
/// only: its own program denies vgem, the container's denies the virtio-gpu. A job given the
/// virtio-gpu there cannot even have its node made (the container denies the mknod): exit
/// 125. Then the container's program attached with BPF_F_ALLOW_OVERRIDE (it would yield to
/// the job's): the run refuses, exit 125, and runs nothing.
#[test]
fn a_job_under_a_containers_program_gets_both() {
    let gpus = guest_gpus!();
    let (vkms, vgem) = (gpu_of(&gpus, "vkms"), gpu_of(&gpus, "vgem"));
    let virtio = gpu_of(&gpus, "virtio_gpu");
    let bus = virtio.bus_id.clone().expect("virtio-gpu sits on PCI");
    let outer_minors: Vec<u32> = vkms
        .nodes
        .iter()
        .chain(&vgem.nodes)
        .map(|n| n.dev.1)
        .collect();
    let policy = devprog::Policy::only_drm_minors(&outer_minors);
    let rel = |cg: &drmtool::isolate::cgroup::Cgroup| {
        cg.path()
            .strip_prefix("/sys/fs/cgroup")
            .unwrap()
            .to_path_buf()
    };
    let out = PathBuf::from(format!(
        "/tmp/drmtool-run-outer-{}.json",
        std::process::id()
    ));
    let dri = dri_dirfd();
    use rustix::fd::AsRawFd;
    let mut argv = entry("probe_entry");
    argv.insert(3, format!("{PROBE_ENV}={}", out.display()).into());
    argv.insert(4, format!("{DIRFD_ENV}={}", dri.as_raw_fd()).into());
    let req = |parent: PathBuf, sel: &str| RunRequest {
        gpus: vec![sel.parse::<gpu::GpuSpec>().unwrap()],
        argv: argv.clone(),
        as_root: true,
        keep_fds: vec![dri.as_raw_fd()],
        cgroup_parent: Some(parent),
        caller: Some(ROOT),
        ..Default::default()
    };
    let multi = outer_cgroup("multi", &policy, ioctl_sys::bpf::BPF_F_ALLOW_MULTI);
    let _ = std::fs::remove_file(&out);
    let code = run::run(&req(rel(&multi), "vkms"), &mut std::io::sink()).unwrap();
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(code, 0, "{v}");
    for d in devs(vkms) {
        assert_eq!(v["opens"][&d], "ok", "{d}: {v}");
    }
    for d in devs(vgem).into_iter().chain(devs(virtio)) {
        assert_eq!(v["opens"][&d], EPERM, "{d}: {v}");
    }
    let e = run::run(&req(rel(&multi), &bus), &mut std::io::sink()).unwrap_err();
    assert_eq!(code_of(&e), run::EXIT_SETUP, "{e}");
    assert!(e.to_string().contains("mknod /dev/dri/"), "{e}");
    drop(multi);
    let over = outer_cgroup("override", &policy, ioctl_sys::bpf::BPF_F_ALLOW_OVERRIDE);
    let _ = std::fs::remove_file(&out);
    let e = run::run(&req(rel(&over), "vkms"), &mut std::io::sink()).unwrap_err();
    assert_eq!(code_of(&e), run::EXIT_SETUP, "{e}");
    assert!(
        e.to_string().contains("stops applying under the job's"),
        "{e}"
    );
    assert!(!out.exists(), "the job ran");
    let left: Vec<_> = std::fs::read_dir(over.path())
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

const CLI_ENV: &str = "DRMTOOL_RUN_CLI_ARGS";

/// drmtool's command line in its own process (`drmtool ARGS`, the arguments in
/// [`CLI_ENV`], `\x1f`-separated), for the test that changes the process's mounts first.
#[test]
fn cli_entry() {
    kernel_tests::sample::cli_entry(CLI_ENV);
}

/// Without cgroup v2 (a tmpfs over /sys/fs/cgroup in a private mount namespace), `run`
/// refuses with exit 125 and says what is missing, and runs nothing.
#[test]
fn without_cgroup_v2_run_says_so() {
    let _gpus = guest_gpus!();
    let marker = PathBuf::from(format!("/tmp/drmtool-run-ran-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let me = me();
    let script = format!(
        "mount -t tmpfs none /sys/fs/cgroup && exec env -u KERNEL_TESTS_SIGNAL_STORM {CLI_ENV}=\"run\x1f--as-root\x1f--gpu\x1fvgem\x1f--\x1ftouch\x1f{}\" \"$0\" cli_entry --exact -q --nocapture",
        marker.display()
    );
    let out = std::process::Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .arg(&me)
        .output()
        .expect("unshare (util-linux)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(i32::from(run::EXIT_SETUP)), "{err}");
    assert!(err.contains("is not a cgroup v2 mount"), "{err}");
    assert!(!marker.exists(), "the command ran");
}

/// `slurm gres-conf` has one line per GPU in the ordering (the render node where there is
/// one, else the card node; the driver as Type), and `slurm task-env` turns the indices
/// Slurm hands a step (SLURM_STEP_GPUS, in that file's order) into the variables
/// `run --gpu <those> --env-only` prints, as TaskProlog `export` lines.
#[test]
fn slurm_gres_conf_and_task_env_follow_the_ordering() {
    let gpus = guest_gpus!();
    let (code, text) = drmtool::cli::run_captured(&["slurm", "gres-conf"]);
    assert_eq!(code, std::process::ExitCode::SUCCESS);
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(lines.len(), gpus.len(), "{text}");
    for (g, l) in gpus.iter().zip(&lines) {
        let node = g.render().or_else(|| g.card()).unwrap();
        assert!(
            l.starts_with(&format!(
                "Name=gpu Type={} File={}",
                g.driver.as_deref().unwrap(),
                node.path.display()
            )),
            "GPU {}: {l}",
            g.index
        );
    }
    let vg = gpu_of(&gpus, "virtio_gpu").index;
    let vk = gpu_of(&gpus, "vkms").index;
    let step = format!("{vg},{vk}");
    let task_env = |gpus: &str| {
        std::process::Command::new("env")
            .args(["-u", "KERNEL_TESTS_SIGNAL_STORM"])
            .env(CLI_ENV, "slurm\x1ftask-env")
            .env("SLURM_STEP_GPUS", gpus)
            .arg(me())
            .args(["cli_entry", "--exact", "-q", "--nocapture"])
            .output()
            .unwrap()
    };
    let out = task_env(&step);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = String::from_utf8_lossy(&out.stdout);
    let (code, want) = drmtool::cli::run_captured(&["run", "--gpu", &step, "--env-only"]);
    assert_eq!(code, std::process::ExitCode::SUCCESS);
    let mut expect = format!("export DRMTOOL_GPUS={step}\n");
    for l in want.lines() {
        expect.push_str(&format!("export {l}\n"));
    }
    assert!(got.contains(&expect), "task-env:\n{got}\nwant:\n{expect}");
    let bad = task_env("99");
    assert_eq!(
        bad.status.code(),
        Some(2),
        "an index Slurm cannot have given"
    );
}

/// `run` as an unprivileged user (nobody, through util-linux's setpriv) says what is
/// missing (root, through sudo) and runs nothing, exit 125, in its own cgroup and in a
/// cgroup delegated to it (the directory and its cgroup.procs chowned, as systemd's
/// Delegate= does): a delegated cgroup is no way around the rule.
#[test]
fn unprivileged_run_says_what_is_missing() {
    let gpus = guest_gpus!();
    // By index: nobody cannot open the nodes or read debugfs, so drivers without a sysfs
    // driver link are nameless to it (`3 vgem ?`).
    let vgem = gpu_of(&gpus, "vgem").index.to_string();
    let pid = std::process::id();
    let dir = PathBuf::from(format!("/tmp/drmtool-run-unpriv-{pid}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    // A copy nobody may run, wherever the checkout is.
    let exe = dir.join("drmtool_run");
    // Not std::fs::copy: it hands EINTR back (its copy_file_range/sendfile path does not
    // retry), which the signal-storm lane delivers every 100 us, and a copy started over
    // each time never ends. fs::read and fs::write (read_to_end, write_all) resume.
    std::fs::write(
        &exe,
        std::fs::read(std::env::current_exe().unwrap()).unwrap(),
    )
    .unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let marker = dir.join("ran");
    let delegated = PathBuf::from(format!("/sys/fs/cgroup/drmtool-test-delegated-{pid}"));
    let as_nobody = |cgroup: Option<&Path>| {
        let join = cgroup.map_or(String::new(), |c| {
            format!("echo $$ > {}/cgroup.procs && ", c.display())
        });
        let script = format!(
            "{join}exec setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all \
             env -u KERNEL_TESTS_SIGNAL_STORM {CLI_ENV}=\"run\x1f--gpu\x1f{vgem}\x1f--\x1ftouch\x1f{}\" \
             \"$0\" cli_entry --exact -q --nocapture",
            marker.display()
        );
        std::process::Command::new("sh")
            .args(["-c", &script])
            .arg(&exe)
            .current_dir(&dir)
            .output()
            .expect("sh")
    };
    let check = |out: std::process::Output| {
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(i32::from(run::EXIT_SETUP)), "{err}");
        assert!(
            err.contains("drmtool run needs root") && err.contains("through sudo"),
            "{err}"
        );
        assert!(!marker.exists(), "the command ran");
    };
    check(as_nobody(None));
    kernel_tests::delegated_cgroup(&delegated, 65534);
    let out = as_nobody(Some(&delegated));
    let leftover: Vec<_> = std::fs::read_dir(&delegated)
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    let _ = std::fs::remove_dir(&delegated);
    check(out);
    assert!(
        leftover.is_empty(),
        "cgroups made in the delegated one: {leftover:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
