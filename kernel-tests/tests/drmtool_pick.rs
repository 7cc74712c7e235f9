//! `drmtool pick`, `run --pick` and `leases` in real guests: concurrent `run --pick` jobs
//! never hold a GPU past its sharing limit, a killed holder frees its lease, and `pick`
//! prefers idle GPUs and names what it excludes (split from `drmtool_run.rs`, which keeps
//! what a job may open).

use drmtool::gpu;
use drmtool::isolate::lease;
use drmtool::isolate::run::{self, RunRequest};
use serde_json::Value;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

#[macro_use]
mod isolation_common;
use isolation_common::gpu_of;

mod schema_common;
use schema_common::validate;

/// Root calling drmtool's library itself (no sudo).
const ROOT: drmtool::isolate::who::Caller = drmtool::isolate::who::Caller { uid: 0, sudo: None };

fn me() -> OsString {
    std::env::current_exe().unwrap().into_os_string()
}

const PICK_ENV: &str = "DRMTOOL_PICK_RUN";

/// `drmtool run --as-root --pick N [--shared K] --wait SECS --gpu SELS -- CMD...` in its own
/// process: [`PICK_ENV`] carries N, K
/// (0: exclusive), SECS, the selectors and the command, `\x1f`-separated.
#[test]
fn pick_run_entry() {
    let Ok(a) = std::env::var(PICK_ENV) else {
        return;
    };
    let f: Vec<&str> = a.split('\x1f').collect();
    let (n, k, wait, sels) = (f[0], f[1], f[2], f[3]);
    let req = RunRequest {
        gpus: sels
            .split(',')
            .map(|s| s.parse::<gpu::GpuSpec>().unwrap())
            .collect(),
        argv: f[4..].iter().map(OsString::from).collect(),
        as_root: true,
        caller: Some(ROOT),
        pick: Some(run::PickRequest {
            n: n.parse().unwrap(),
            sharing: match k.parse::<u32>().unwrap() {
                0 => lease::Sharing::Exclusive,
                k => lease::Sharing::Shared(k),
            },
            wait: std::time::Duration::from_secs_f64(wait.parse().unwrap()),
            want: Default::default(),
        }),
        ..Default::default()
    };
    let code = match run::run(&req, &mut std::io::stdout()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("drmtool: run: {e}");
            drmtool::cli::Exit::of_run(&e) as u8
        }
    };
    std::process::exit(i32::from(code));
}

/// A `pick_run_entry` process.
fn pick_run(n: u32, shared: u32, wait: f64, sels: &str, cmd: &[&str]) -> std::process::Command {
    let mut args = vec![
        n.to_string(),
        shared.to_string(),
        wait.to_string(),
        sels.to_string(),
    ];
    args.extend(cmd.iter().map(|s| s.to_string()));
    let mut c = std::process::Command::new("env");
    c.args(["-u", "KERNEL_TESTS_SIGNAL_STORM"])
        .arg(me())
        .args([
            "pick_run_entry",
            "--exact",
            "--nocapture",
            "-q",
            "--test-threads=1",
        ])
        .env(PICK_ENV, args.join("\x1f"));
    c
}

/// Each job's lease and the guest's uptime when it started and ended, from the files the
/// jobs wrote.
fn job_intervals(dir: &Path) -> Vec<(String, f64, f64)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let t = std::fs::read_to_string(e.path()).unwrap();
        let w: Vec<&str> = t.split_whitespace().collect();
        assert_eq!(w.len(), 3, "{}: {t:?}", e.path().display());
        // `KEY` or `KEY/SLOT`: the device is the key.
        let dev = w[0].split('/').next().unwrap().to_string();
        out.push((dev, w[1].parse().unwrap(), w[2].parse().unwrap()));
    }
    out
}

/// The most jobs that held one device at the same moment, per device.
fn max_overlap(jobs: &[(String, f64, f64)]) -> std::collections::BTreeMap<String, usize> {
    let mut m = std::collections::BTreeMap::new();
    for (dev, s, _) in jobs {
        // At each start, the jobs of the device running then (intervals are [start, end)).
        let n = jobs
            .iter()
            .filter(|(d, s2, e2)| d == dev && s2 <= s && s < e2)
            .count();
        let e = m.entry(dev.clone()).or_insert(0);
        *e = (*e).max(n);
    }
    m
}

/// 20 jobs started at once, each `run --pick 1` over three GPUs (vkms, vgem, virtio-gpu),
/// each holding its GPU 0.3 s: exclusive leases never overlap on a device; then 10 with
/// `--shared 2`: at most two jobs hold one device at a time. Every job waits its turn
/// (`--wait 120`) and succeeds.
#[test]
fn twenty_concurrent_picks_never_share_a_gpu() {
    let gpus = guest_gpus!();
    // Three GPUs: vkms, vgem and the first virtio-gpu (by bus id: the driver name would
    // take both of the guest's two).
    let sels = format!(
        "vkms,vgem,{}",
        gpu_of(&gpus, "virtio_gpu")
            .bus_id
            .clone()
            .expect("virtio-gpu sits on PCI")
    );
    // Exclusive (no --shared): the 20 jobs; `--shared 1` (one holder of the shared
    // kind, what the issue names) and `--shared 2`: ten more each (each job costs about a
    // second of a TCG guest's CPU).
    for (shared, jobs) in [(0u32, 20usize), (1, 10), (2, 10)] {
        let dir = PathBuf::from(format!(
            "/tmp/drmtool-picks-{}-{shared}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let script = format!(
            "s=$(cut -d' ' -f1 /proc/uptime); sleep 0.3; e=$(cut -d' ' -f1 /proc/uptime); \
             echo \"${{{}}} $s $e\" > {}/$(cat /proc/sys/kernel/random/uuid)",
            run::LEASES_ENV,
            dir.display()
        );
        let t0 = std::time::Instant::now();
        let children: Vec<std::process::Child> = (0..jobs)
            .map(|_| {
                pick_run(1, shared, 600.0, &sels, &["/bin/sh", "-c", &script])
                    .spawn()
                    .unwrap()
            })
            .collect();
        for mut j in children {
            let st = j.wait().unwrap();
            assert!(st.success(), "a job failed: {st}");
        }
        let took = t0.elapsed();
        let iv = job_intervals(&dir);
        assert_eq!(iv.len(), jobs, "every job ran its command");
        let over = max_overlap(&iv);
        eprintln!(
            "--shared {shared}: {jobs} jobs in {took:?}; most holders at once per device: {over:?}"
        );
        let limit = if shared == 0 { 1 } else { shared as usize };
        assert!(over.values().all(|&n| n <= limit), "{over:?}: {iv:?}");
        assert_eq!(
            over.len(),
            3,
            "the jobs spread over the three GPUs: {over:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A holder is listed by `drmtool leases` (pid, cgroup, mode); while it holds the only
/// candidate, another `--pick` with no wait fails with exit 5 and says so; killed (the
/// whole job, SIGKILL), it frees the lease without any cleanup of its own, and its
/// leftover cgroup is swept by the next run.
#[test]
fn a_killed_holder_frees_its_lease() {
    let gpus = guest_gpus!();
    use std::os::unix::process::CommandExt;
    let mut holder = pick_run(1, 0, 0.0, "vgem", &["sleep", "300"]);
    holder.process_group(0);
    let mut holder = holder.spawn().unwrap();
    let hp = holder.id();
    let key = drmtool::isolate::lease::key(gpu_of(&gpus, "vgem"));
    let mut listed = None;
    for _ in 0..200 {
        let (code, out) = drmtool::cli::run_captured(&["leases", "--json"]);
        assert_eq!(code, std::process::ExitCode::SUCCESS);
        let v: Value = serde_json::from_str(&out).unwrap();
        validate(&v, "leases.schema.json", "leases --json");
        if let Some(l) = v["leases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["device"] == key.as_str())
        {
            listed = Some(l.clone());
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let l = listed.unwrap_or_else(|| panic!("no lease of {key} listed"));
    eprintln!("held: {l}");
    assert_eq!(l["pid"], i64::from(hp), "{l}");
    assert_eq!(l["mode"], "exclusive");
    assert!(l["cgroup"].is_string() && l["since"].is_u64(), "{l}");
    let out = pick_run(1, 0, 0.0, "vgem", &["true"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(i32::from(drmtool::cli::Exit::NoGpu as u8)),
        "{err}"
    );
    assert!(err.contains("leased by others"), "{err}");
    // SIGKILL to the whole job: drmtool's parent half and the command.
    rustix::process::kill_process_group(
        rustix::process::Pid::from_raw(hp as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    holder.wait().unwrap();
    let left = || -> Vec<PathBuf> {
        std::fs::read_dir("/sys/fs/cgroup/drmtool.slice")
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("run-{hp}-"))
            })
            .map(|e| e.path())
            .collect()
    };
    assert_eq!(
        left().len(),
        1,
        "the killed run's cgroup stays until the next run"
    );
    let st = pick_run(1, 0, 10.0, "vgem", &["true"]).status().unwrap();
    assert!(st.success(), "the lease came free: {st}");
    assert!(left().is_empty(), "{:?} was not swept", left());
}

/// `pick` ranks by clients: a GPU a sample client holds open comes after idle ones;
/// `--max-clients 0` excludes it by name; `--min-free` excludes every GPU whose free
/// memory no source gives (exit 5); JSON validates.
#[test]
fn pick_prefers_idle_gpus_and_names_what_it_excludes() {
    let gpus = guest_gpus!();
    let busy = kernel_tests::sample::Client::spawn(
        "sample_client_entry",
        &["--device", "vgem", "--dumb", "64x64", "--map"],
    );
    let (code, out) = drmtool::cli::run_captured(&[
        "pick",
        "-n",
        "3",
        "--gpu",
        "vgem,vkms,virtio_gpu",
        "--format",
        "json",
    ]);
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    validate(&v, "pick.schema.json", "pick --format json");
    let order: Vec<&str> = v["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["driver"].as_str().unwrap())
        .collect();
    assert_eq!(order.last(), Some(&"vgem"), "the GPU in use last: {v}");
    let vg = v["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["driver"] == "vgem")
        .unwrap();
    assert!(vg["clients"].as_u64().unwrap() >= 1, "{vg}");
    assert_eq!(vg["memory"]["source"], "maps", "{vg}");
    assert!(vg["memory"]["value"].as_u64().unwrap() >= 16384, "{vg}");
    let (code, out) = drmtool::cli::run_captured(&["pick", "--gpu", "vgem", "--max-clients", "0"]);
    assert_eq!(
        code,
        std::process::ExitCode::from(drmtool::cli::Exit::NoGpu as u8),
        "{out}"
    );
    let (code, out) =
        drmtool::cli::run_captured(&["pick", "-n", "2", "--gpu", "vgem,vkms,virtio_gpu"]);
    assert_eq!(code, std::process::ExitCode::SUCCESS);
    let names: Vec<&str> = out.lines().collect();
    assert_eq!(names.len(), 2);
    let vgem = gpu_of(&gpus, "vgem");
    let vgem_name = vgem.bus_id.as_deref().unwrap_or(&vgem.name);
    assert!(!names.contains(&vgem_name), "{out}");
    // Free memory is unknown on every GPU (exit 5), except where the kernel's dmem
    // controller has a region of it (qxl on debian-7.3): that one is picked.
    let cap = drmtool::dmem::Capacity::read(Path::new("/sys/fs/cgroup")).unwrap();
    let with_region: Vec<String> = gpus
        .iter()
        .filter(|g| {
            cap.as_ref()
                .is_some_and(|c| !c.regions_of(&g.name).is_empty())
        })
        .map(|g| g.bus_id.clone().unwrap_or_else(|| g.name.clone()))
        .collect();
    let (code, out) = drmtool::cli::run_captured(&["pick", "--min-free", "1"]);
    if with_region.is_empty() {
        assert_eq!(
            code,
            std::process::ExitCode::from(drmtool::cli::Exit::NoGpu as u8)
        );
    } else {
        assert_eq!(code, std::process::ExitCode::SUCCESS, "{out}");
        assert!(
            with_region.contains(&out.trim().to_string()),
            "{out}: {with_region:?}"
        );
    }
    drop(busy);
}

/// `pick --near`: near a GPU on PCI, that GPU itself (class X) comes first, every other
/// GPU on PCI of this `-machine pc` guest is PHB to it (one host bridge, no switch), and a
/// platform device (vgem, vkms) has no class and ranks after them; each choice is
/// explained on stderr; `-n 2` searches the set (every set tried) and its worst class is
/// PHB; `run --pick 1 --near` leases the same GPU. Specs that do not resolve fail with the
/// place named: a NUMA node that is not there and the file system of `/` (initramfs: no
/// disk) exit 3, a spec of no known form exits 2.
#[test]
fn pick_near_ranks_by_class_and_explains_each_choice() {
    use isolation_common::{drmtool, run_out};
    let gpus = guest_gpus!();
    let on_pci: Vec<&gpu::Gpu> = gpus.iter().filter(|g| g.bus_id.is_some()).collect();
    assert!(on_pci.len() >= 2, "the guest has GPUs on PCI: {gpus:?}");
    let target = on_pci[1].bus_id.clone().unwrap();
    let near = format!("gpu:{target}");
    let (code, out, err) = run_out(&mut drmtool(&["pick", "--near", &near, "--format", "json"]));
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    validate(&v, "pick.schema.json", "pick --near --format json");
    assert_eq!(v["near"]["spec"], near.as_str(), "{v}");
    assert!(
        v["near"]["pci_path"].as_str().unwrap().ends_with(&target),
        "{v}"
    );
    let cands = v["candidates"].as_array().unwrap();
    assert_eq!(
        cands[0]["name"],
        target.as_str(),
        "the GPU itself first: {v}"
    );
    assert_eq!(cands[0]["class"], "X", "{v}");
    for c in cands {
        let name = c["name"].as_str().unwrap();
        let pci = on_pci.iter().any(|g| g.bus_id.as_deref() == Some(name));
        match (pci, name == target) {
            (true, true) => {}
            (true, false) => assert_eq!(c["class"], "PHB", "{c}"),
            (false, _) => assert!(c["class"].is_null(), "a platform device: {c}"),
        }
    }
    // Every GPU without a class ranks after every GPU with one.
    let first_null = cands.iter().position(|c| c["class"].is_null());
    if let Some(p) = first_null {
        assert!(cands[p..].iter().all(|c| c["class"].is_null()), "{v}");
    }
    // Plain output: the bus id on stdout, the reason on stderr.
    let (code, out, err) = run_out(&mut drmtool(&["pick", "--near", &near]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), target);
    assert!(
        err.contains(&format!("chose {target}: X to {near} (")) && err.contains("lease holder(s)"),
        "{err}"
    );
    // Two: the target and one more on the same host bridge, every set tried.
    let (code, out, err) = run_out(&mut drmtool(&[
        "pick", "-n", "2", "--near", &near, "--format", "json",
    ]));
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    validate(&v, "pick.schema.json", "pick -n 2 --near --format json");
    assert_eq!(v["group"]["search"], "exact", "{v}");
    assert_eq!(v["group"]["worst"], "PHB", "{v}");
    let t_index = gpus
        .iter()
        .position(|g| g.bus_id.as_deref() == Some(&target))
        .unwrap();
    assert_eq!(v["chosen"][0], t_index, "{v}");
    let (code, _, err) = run_out(&mut drmtool(&["pick", "-n", "2", "--near", &near]));
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("the set of 2: worst class between two of them PHB"),
        "{err}"
    );
    // run --pick --near leases the GPU pick chose, and the job sees it.
    let (code, out, err) = run_out(&mut drmtool(&[
        "run",
        "--as-root",
        "--pick",
        "1",
        "--near",
        &near,
        "--",
        "/bin/sh",
        "-c",
        "echo $DRMTOOL_LEASES",
    ]));
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        out.trim(),
        target,
        "DRMTOOL_LEASES names the GPU's lease: {err}"
    );
    // What does not resolve.
    let (code, _, err) = run_out(&mut drmtool(&["pick", "--near", "numa:99"]));
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("NUMA node 99 does not exist"), "{err}");
    let (code, _, err) = run_out(&mut drmtool(&["pick", "--near", "path:/"]));
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("path:/: not on PCI"), "{err}");
    let (code, _, err) = run_out(&mut drmtool(&["pick", "--near", "rack:7"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unknown KIND"), "{err}");
}

/// `drmtool place`: two exclusive jobs near one GPU on PCI get it and the other GPU on PCI
/// (PHB), never the platform device (no class), by one exact flow; a two-GPU job in the
/// same batch takes both first (the set step), the two single jobs wait and the plan says
/// it is not exact; a bad request exits 2 naming it, a `near` that does not resolve exits
/// 3 naming the request. The files validate against place-requests.schema.json and the
/// output against place.schema.json.
#[test]
fn place_puts_a_batch_where_it_costs_least() {
    use isolation_common::{drmtool, run_out};
    let gpus = guest_gpus!();
    let on_pci: Vec<&gpu::Gpu> = gpus.iter().filter(|g| g.bus_id.is_some()).collect();
    assert!(on_pci.len() >= 2, "{gpus:?}");
    let (t, u) = (
        on_pci[0].bus_id.clone().unwrap(),
        on_pci[1].bus_id.clone().unwrap(),
    );
    let sel = format!("{t},{u},vgem");
    let dir = std::env::temp_dir().join(format!("drmtool-place-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = |name: &str, v: Value| {
        validate(&v, "place-requests.schema.json", name);
        let p = dir.join(name);
        std::fs::write(&p, v.to_string()).unwrap();
        p.to_string_lossy().into_owned()
    };
    let near = format!("gpu:{t}");
    let two = file(
        "two.json",
        serde_json::json!({"requests": [{"name": "a", "near": near}, {"name": "b", "near": near}]}),
    );
    let (code, out, err) = run_out(&mut drmtool(&["place", "--json", "--gpu", &sel, &two]));
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    validate(&v, "place.schema.json", "place --json");
    assert_eq!(
        (v["exact"].as_bool(), v["waiting"].as_u64()),
        (Some(true), Some(0)),
        "{v}"
    );
    let mut got: Vec<(String, String)> = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["gpus"][0]["name"].as_str().unwrap().to_string(),
                j["gpus"][0]["class"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    got.sort();
    let mut want = vec![(t.clone(), "X".to_string()), (u.clone(), "PHB".to_string())];
    want.sort();
    assert_eq!(got, want, "{v}");
    // A two-GPU job first: it takes both GPUs on PCI, the others wait.
    let three = file(
        "three.json",
        serde_json::json!({"requests": [{"name": "a", "near": near}, {"name": "b"},
                                        {"name": "pair", "count": 2}]}),
    );
    let sel2 = format!("{t},{u}");
    let (code, out, err) = run_out(&mut drmtool(&["place", "--json", "--gpu", &sel2, &three]));
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    validate(&v, "place.schema.json", "place --json (three)");
    assert_eq!(
        (v["exact"].as_bool(), v["waiting"].as_u64()),
        (Some(false), Some(2)),
        "{v}"
    );
    assert_eq!(v["jobs"][2]["gpus"].as_array().unwrap().len(), 2, "{v}");
    assert_eq!(v["jobs"][2]["worst"], "PHB", "{v}");
    let (code, table, err) = run_out(&mut drmtool(&["place", "--gpu", &sel2, &three]));
    assert_eq!(code, 0, "{err}");
    assert!(
        table.contains("waits") && table.contains("not proven least"),
        "{table}"
    );
    // What is refused.
    let bad = file(
        "bad.json",
        serde_json::json!({"requests": [{"name": "x"}, {"name": "x"}]}),
    );
    let (code, _, err) = run_out(&mut drmtool(&["place", &bad]));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("request 1 (\"x\"): a second request of this name"),
        "{err}"
    );
    let far = file(
        "far.json",
        serde_json::json!({"requests": [{"name": "far", "near": "numa:99"}]}),
    );
    let (code, _, err) = run_out(&mut drmtool(&["place", &far]));
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("request far: --near: NUMA node 99 does not exist"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The sample client's entry point (kernel_tests::sample); run plainly it does nothing.
#[test]
fn sample_client_entry() {
    kernel_tests::sample::entry();
}
