//! `drmtool export` as packaging/systemd/drmtool-export.service runs it, in the guest:
//!
//! - started the way the unit says, read from the unit file itself: its `User=` (made in
//!   the guest, as its sysusers file says), its capabilities as the only ones in the
//!   ambient, inheritable and bounding sets (util-linux setpriv), `NoNewPrivileges=`,
//!   `ReadOnlyPaths=` (a private read-only bind of /proc), the devices closed to it (the
//!   nodes back to 0600 once the holders have opened theirs: `DevicePolicy=closed`), and
//!   its `ExecStart=` flags (the binary is drmtool-guest, the web config file a copy of
//!   the shipped one); beside it the same binary as root;
//! - GPU memory held by root and by a second user (vgem and vkms buffers, mapped, dma-bufs
//!   exported and mapped, a forked child sharing an open file, which kcmp must tell), a
//!   dma-buf no process holds (exported, its fd closed), a GPU lease, and on the kernels
//!   with qxl's dmem region a job under a GPU memory limit;
//! - Debian's Prometheus scraping both: every sample of every series of the unit's
//!   exporter equals the root one's (the exporter's own timings and counts of scans
//!   aside), and the figures are what the holders hold;
//! - every metric name the rules (packaging/prometheus) and the dashboard
//!   (packaging/grafana) read is in that scrape (memory and engine series on the lanes
//!   whose vkms prints them, dmem series where qxl registers a region);
//! - refused with one capability too many, and what is missing named when started with
//!   less (the empirical table of tools/src/export/privilege.rs, held here).

use drm_gem::{DumbBuffer, DumbSpec, NodeKind, PrimeFlags};
use drmtool::sample::Ready;
use kernel_tests::{expected, in_guest, skip};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

mod export_common;
use export_common::*;

#[path = "../../tools/tests/support/promql.rs"]
mod promql;

const UNIT: &str = include_str!("../../packaging/systemd/drmtool-export.service");
const SYSUSERS: &str = include_str!("../../packaging/systemd/drmtool-export.sysusers.conf");
const WEB_CONFIG: &str = include_str!("../../packaging/systemd/web-config.yml");
const RULES: &str = include_str!("../../packaging/prometheus/drmtool-rules.yml");
const DASHBOARD: &str = include_str!("../../packaging/grafana/drmtool.json");
const DRMTOOL: &str = env!("CARGO_BIN_EXE_drmtool-guest");
const QXL_ALLOC: &str = env!("CARGO_BIN_EXE_qxl-alloc");

/// The unit user's uid in the guest (systemd-sysusers picks one on a real host).
const UNIT_UID: u32 = 2100;
/// The second user holding GPU memory.
const OTHER_UID: u32 = 2201;

/// The exporter's own figures that depend on when each scrape came, not on what it saw.
const TIMING: [&str; 3] = [
    "drmtool_export_scan_duration_seconds",
    "drmtool_export_scans_total",
    "drmtool_export_cached_answers_total",
];

/// The sample client's entry point (kernel_tests::sample); run plainly it does nothing.
#[test]
fn sample_client_entry() {
    kernel_tests::sample::entry();
}

/// What the unit file says of how the exporter runs.
#[derive(Debug)]
struct Unit {
    user: String,
    /// `ExecStart=`, split at spaces (the unit quotes nothing).
    exec: Vec<String>,
    /// The capabilities, as setpriv names them (`sys_ptrace`).
    caps: Vec<String>,
    no_new_privs: bool,
    read_only: Vec<String>,
}

impl Unit {
    fn parse(text: &str) -> Unit {
        let values = |key: &str| -> Vec<String> {
            text.lines()
                .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
                .map(|v| v.trim().to_string())
                .collect()
        };
        let one = |key: &str| {
            let v = values(key);
            assert_eq!(v.len(), 1, "one {key}= in the unit: {v:?}");
            v[0].clone()
        };
        let exec: Vec<String> = one("ExecStart")
            .split_whitespace()
            .map(str::to_string)
            .collect();
        assert!(exec.iter().all(|a| !a.contains(['"', '\''])), "{exec:?}");
        let ambient = one("AmbientCapabilities");
        assert_eq!(
            ambient,
            one("CapabilityBoundingSet"),
            "the bounding set is the ambient set: nothing else to raise"
        );
        let caps = ambient
            .split_whitespace()
            .map(|c| c.strip_prefix("CAP_").expect("CAP_ name").to_lowercase())
            .collect();
        let user = one("User");
        assert_eq!(one("Group"), user);
        Unit {
            user,
            exec,
            caps,
            no_new_privs: one("NoNewPrivileges") == "yes",
            read_only: values("ReadOnlyPaths")
                .iter()
                .flat_map(|v| v.split_whitespace().map(str::to_string))
                .collect(),
        }
    }

    /// The command that starts `argv` (drmtool's arguments) as the unit would, with
    /// `extra` capabilities on top of the unit's; `ReadOnlyPaths=` too when `read_only`
    /// (in a mount namespace of its own: see [`Mounts`]).
    fn command(&self, exe: &Path, argv: &[String], extra: &[&str], mounts: Mounts) -> Command {
        let caps: Vec<String> = self
            .caps
            .iter()
            .map(String::as_str)
            .chain(extra.iter().copied())
            .map(|c| format!("+{c}"))
            .collect();
        let set = std::iter::once("-all".to_string())
            .chain(caps)
            .collect::<Vec<_>>()
            .join(",");
        let mut binds = String::new();
        let ro: &[String] = match mounts {
            Mounts::ReadOnlyPaths => &self.read_only,
            Mounts::Shared => &[],
        };
        for p in ro {
            binds.push_str(&format!(
                "mount --bind {p} {p} && mount -o remount,bind,ro {p} && "
            ));
        }
        let nnp = if self.no_new_privs {
            "--no-new-privs"
        } else {
            ""
        };
        let script = format!(
            "{binds}exec setpriv --reuid={u} --regid={u} --init-groups --inh-caps={set} \
             --ambient-caps={set} --bounding-set={set} {nnp} env -i PATH=/usr/bin:/bin \"$@\"",
            u = self.user
        );
        let mut c = match mounts {
            Mounts::ReadOnlyPaths => {
                let mut c = Command::new("unshare");
                c.args(["--mount", "--propagation", "private", "--"]);
                c
            }
            Mounts::Shared => Command::new("env"),
        };
        c.args(["sh", "-c", &script, "sh"])
            .arg(exe)
            .args(argv)
            .stdin(Stdio::null());
        c
    }

    /// `ExecStart=`'s arguments, the web config file being `web`.
    fn args(&self, web: &Path) -> Vec<String> {
        let mut a: Vec<String> = self.exec[1..].to_vec();
        let at = a
            .iter()
            .position(|x| x == "--web.config.file")
            .expect("the unit passes --web.config.file");
        a[at + 1] = web.display().to_string();
        a
    }
}

/// Whether the exporter gets the unit's `ReadOnlyPaths=` (a mount namespace of its own
/// with those paths bound read-only) or shares the test's mounts. In the guest the
/// payload runs chrooted at the host root's mount point, so from any other mount namespace
/// the kernel prints another process's mapped `/dev/dri/card0` as `/host/dev/dri/card0`
/// (d_path from the namespace's root), which the scan does not take for a DRM node; on a
/// host the unit's namespace is a copy of the root's and the path reads `/dev/dri/card0`.
/// So the scrape compared with root's shares the mounts; the capability checks
/// (`--textfile`, no mapping asked about) take the read-only /proc.
#[derive(Debug, Clone, Copy)]
enum Mounts {
    ReadOnlyPaths,
    Shared,
}

/// The unit's user and group in the guest's /etc (copies bound over the read-only host's),
/// with the name the sysusers file gives it. Once per boot.
fn unit_user(unit: &Unit) {
    let sysusers_name = SYSUSERS
        .lines()
        .find_map(|l| l.strip_prefix("u ")?.split_whitespace().next())
        .expect("a u line");
    assert_eq!(
        sysusers_name, unit.user,
        "the unit's User= is the sysusers file's"
    );
    let done = Path::new("/run/drmtool-test-priv-user");
    if done.exists() {
        return;
    }
    let stage = Path::new("/run/drmtool-test-priv-etc");
    std::fs::create_dir_all(stage).unwrap();
    let u = &unit.user;
    for (file, line) in [
        (
            "passwd",
            format!("{u}:x:{UNIT_UID}:{UNIT_UID}:drmtool export:/:/usr/sbin/nologin\n"),
        ),
        ("group", format!("{u}:x:{UNIT_UID}:\n")),
    ] {
        let mut text = std::fs::read_to_string(format!("/etc/{file}")).unwrap_or_default();
        text.push_str(&line);
        let p = stage.join(file);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        rustix::mount::mount_bind(&p, Path::new("/etc").join(file))
            .unwrap_or_else(|e| panic!("bind {file}: {e}"));
    }
    std::fs::write(done, "").unwrap();
}

/// A directory every user may read, with copies of drmtool-guest and of this test binary
/// (the checkout may sit where other users cannot reach) and the shipped web config.
/// Not std::fs::copy: under the signal storm its copy_file_range path hands EINTR back.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let d = PathBuf::from(format!("/tmp/drmtool-priv-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let copy = |from: &Path, name: &str, mode| {
            let to = d.join(name);
            std::fs::write(&to, std::fs::read(from).unwrap()).unwrap();
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        copy(Path::new(DRMTOOL), "drmtool", 0o755);
        copy(&std::env::current_exe().unwrap(), "tests", 0o755);
        std::fs::write(d.join("web-config.yml"), WEB_CONFIG).unwrap();
        std::fs::set_permissions(
            d.join("web-config.yml"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        Scratch(d)
    }

    fn drmtool(&self) -> PathBuf {
        self.0.join("drmtool")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A sample client of this binary (its copy in `dir`) run as `uid` through setpriv, with
/// no capability; holds until dropped.
struct Held {
    child: Child,
    _out: BufReader<ChildStdout>,
    ready: Ready,
}

impl Held {
    fn spawn(dir: &Scratch, uid: u32, args: &[&str]) -> Held {
        let mut child = Command::new("setpriv")
            .args([
                format!("--reuid={uid}"),
                format!("--regid={uid}"),
                "--clear-groups".into(),
                "--inh-caps=-all".into(),
            ])
            .arg(dir.0.join("tests"))
            .args([
                "sample_client_entry",
                "--exact",
                "--nocapture",
                "--test-threads=1",
                "-q",
            ])
            .env(kernel_tests::sample::ARGS_ENV, args.join("\x1f"))
            .env_remove("KERNEL_TESTS_SIGNAL_STORM")
            .current_dir(&dir.0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("setpriv");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        let ready = loop {
            line.clear();
            match out.read_line(&mut line) {
                Ok(n) if n > 0 && line.starts_with('{') => {
                    break serde_json::from_str::<Ready>(&line).unwrap();
                }
                Ok(n) if n > 0 => continue,
                _ => panic!("the client of uid {uid} {args:?} ended: {:?}", child.wait()),
            }
        };
        Held {
            child,
            _out: out,
            ready,
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// The DRM nodes opened to every user while the holders open theirs, back to their modes
/// on drop (before the exporters start: the unit's DevicePolicy=closed opens it none).
struct OpenNodes(Vec<(PathBuf, u32)>);

impl OpenNodes {
    fn new() -> OpenNodes {
        let mut v = Vec::new();
        for e in std::fs::read_dir("/dev/dri").unwrap().flatten() {
            let p = e.path();
            let Ok(m) = std::fs::metadata(&p) else {
                continue;
            };
            if !m.is_dir() {
                v.push((p.clone(), m.permissions().mode() & 0o7777));
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
            }
        }
        OpenNodes(v)
    }
}

impl Drop for OpenNodes {
    fn drop(&mut self) {
        for (p, mode) in &self.0 {
            let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(*mode));
        }
    }
}

/// A child process killed and reaped on drop; its stderr kept in a file.
struct Running {
    child: Child,
    log: PathBuf,
}

impl Running {
    fn start(mut c: Command, log: PathBuf) -> Running {
        let f = std::fs::File::create(&log).unwrap();
        let child = c.stdout(Stdio::null()).stderr(f).spawn().expect("spawn");
        Running { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `drmtool run` job that holds what it was given until its stdin closes.
struct Job(Child);

impl Job {
    fn start(args: &[&str], until: &str) -> Job {
        let mut child = Command::new(DRMTOOL)
            .args(["run", "--as-root"])
            .args(args)
            .env_remove("KERNEL_TESTS_SIGNAL_STORM")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let lines = match kernel_tests::lines_through(out, until) {
            Ok(l) => l,
            Err(l) => panic!(
                "drmtool run {args:?} ended early ({:?}): {l:?}",
                child.wait()
            ),
        };
        eprintln!("drmtool run {args:?}: {lines:?}");
        Job(child)
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.wait();
    }
}

/// A series: its name and labels (without job and instance, sorted).
type Key = (String, Vec<(String, String)>);

/// Every series of Prometheus job `job` named `drm_*` or `drmtool_export_*`, but the
/// exporter's timings ([`TIMING`]), with its value.
fn series_of(prom: &Prometheus, job: &str) -> BTreeMap<Key, f64> {
    let q = format!("{{job=\"{job}\",__name__=~\"drm_.*|drmtool_export_.*\"}}");
    let Some((200, body)) = get(prom.addr, &format!("/api/v1/query?query={}", encode(&q))) else {
        return BTreeMap::new();
    };
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let mut out = BTreeMap::new();
    for r in v["data"]["result"].as_array().into_iter().flatten() {
        let m = r["metric"].as_object().unwrap();
        let name = m["__name__"].as_str().unwrap().to_string();
        if TIMING.contains(&name.as_str()) {
            continue;
        }
        let mut labels: Vec<(String, String)> = m
            .iter()
            .filter(|(k, _)| !["__name__", "job", "instance"].contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect();
        labels.sort();
        let val: f64 = r["value"][1].as_str().unwrap().parse().unwrap();
        out.insert((name, labels), val);
    }
    out
}

/// The value of the one series named `name` that has every `want` label.
fn value(s: &BTreeMap<Key, f64>, name: &str, want: &[(&str, &str)]) -> Option<f64> {
    let mut hits = s.iter().filter(|((n, labels), _)| {
        n == name
            && want
                .iter()
                .all(|(k, v)| labels.iter().any(|(l, x)| l == k && x == v))
    });
    let first = hits.next().map(|(_, v)| *v);
    assert!(hits.next().is_none(), "several {name} series with {want:?}");
    first
}

fn page_round(n: u64) -> u64 {
    n.div_ceil(4096) * 4096
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port()
}

/// See the module docs: the unit's exporter against root's, through Prometheus, and the
/// rules' and dashboard's names in its scrape.
#[test]
fn the_units_exporter_serves_what_roots_serves() {
    if !in_guest() {
        skip!("not in a vm guest: no DRM devices, users or capabilities to drop here");
    }
    if !Path::new(PROMETHEUS).exists() {
        skip!("{PROMETHEUS} is not installed (scripts/setup installs Debian's prometheus)");
    }
    let unit = Unit::parse(UNIT);
    unit_user(&unit);
    let dir = Scratch::new("scrape");
    let gpus = drmtool::gpu::gpus().expect("the guest has DRM devices");
    let name_of = |driver: &str| {
        gpus.iter()
            .find(|g| g.driver.as_deref() == Some(driver))
            .map(|g| g.bus_id.clone().unwrap_or_else(|| g.name.clone()))
            .unwrap_or_else(|| panic!("no {driver} in {}", drmtool::gpu::summary(&gpus)))
    };
    let vgem = name_of("vgem");

    // The holders: root (vgem exported and mapped, vkms mapped) and the second user (a
    // vgem buffer exported and mapped, held by a forked child too; a second vgem file).
    let (groot, guser) = (
        Cgroup::new("drmtool-priv-root"),
        Cgroup::new("drmtool-priv-user"),
    );
    let nodes = OpenNodes::new();
    let r1 = spawn(&[
        "--device",
        "vgem",
        "--dumb",
        "64x64",
        "--map",
        "--export",
        "--map-dmabuf",
    ]);
    let r2 = spawn(&["--device", "vkms", "--dumb", "16x16", "--map"]);
    let u1 = Held::spawn(
        &dir,
        OTHER_UID,
        &[
            "--device",
            "vgem",
            "--dumb",
            "32x32",
            "--map",
            "--export",
            "--map-dmabuf",
            "--fork",
        ],
    );
    let u2 = Held::spawn(
        &dir,
        OTHER_UID,
        &["--device", "vgem", "--dumb", "16x16", "--map"],
    );
    drop(nodes);
    for p in [r1.pid(), r2.pid()] {
        groot.add(p);
    }
    let (child, _) = u1.ready.fork_child.expect("--fork reports its child");
    for p in [u1.ready.pid, child, u2.ready.pid] {
        guser.add(p);
    }
    // A dma-buf no process holds: exported by this process, its fd closed (the GEM
    // object's file keeps it).
    let dev = kernel_tests::open_driver(&["vgem"], NodeKind::Primary)
        .unwrap()
        .expect("vgem's card node");
    let orphan = DumbBuffer::create(&dev, DumbSpec::new(64, 32, 32)).unwrap();
    drop(dev.export(orphan.gem(), PrimeFlags::default()).unwrap());
    // A lease (a job on vgem), and where qxl registers a dmem region, a job held to 8 MiB.
    let lease = Job::start(
        &["--gpu", "vgem", "--", "sh", "-c", "echo held; read x"],
        "held",
    );
    let dmem_job = expected("qxl_dmem").then(|| {
        Job::start(
            &[
                "--gpu",
                &name_of("qxl"),
                "--mem-max",
                "8M",
                "--",
                QXL_ALLOC,
                "1",
                "1048576",
            ],
            "held ",
        )
    });

    // The exporters: the unit's, and root's on a port of its own.
    let web = dir.0.join("web-config.yml");
    let unit_args = unit.args(&web);
    let listen = unit_args[unit_args.iter().position(|a| a == "--listen").unwrap() + 1].clone();
    let unit_x = Running::start(
        unit.command(&dir.drmtool(), &unit_args, &[], Mounts::Shared),
        dir.0.join("unit.log"),
    );
    let root_listen = format!("127.0.0.1:{}", free_port());
    let mut root_cmd = Command::new(dir.drmtool());
    root_cmd
        .args(["export", "--listen", &root_listen, "--web.config.file"])
        .arg(&web)
        .env_remove("KERNEL_TESTS_SIGNAL_STORM")
        .stdin(Stdio::null());
    let root_x = Running::start(root_cmd, dir.0.join("root.log"));
    let prom = Prometheus::start_with(&format!(
        "  - job_name: root\n    static_configs:\n      - targets: ['{root_listen}']\n\
         \x20 - job_name: unit\n    static_configs:\n      - targets: ['{listen}']\n"
    ));

    let user_cg = guser.path();
    let want_mapped =
        (page_round(u1.ready.buffers[0].size) + page_round(u2.ready.buffers[0].size)) as f64;
    let t0 = Instant::now();
    let (mut root, mut mine) = (BTreeMap::new(), BTreeMap::new());
    let settled = |r: &BTreeMap<Key, f64>, m: &BTreeMap<Key, f64>| {
        r == m
            && value(r, "drm_clients", &[("cgroup", &user_cg), ("device", &vgem)]) == Some(2.0)
            && value(r, "drm_mapped_bytes", &[("cgroup", &user_cg)]) == Some(want_mapped)
            && value(r, "drm_dmabuf_unattributed_bytes", &[("exporter", "drm")])
                == Some(orphan.size() as f64)
            && value(
                r,
                "drm_lease_holders",
                &[("device", &vgem), ("mode", "exclusive")],
            ) == Some(1.0)
            && value(r, "drmtool_export_processes_unreadable", &[]) == Some(0.0)
    };
    while t0.elapsed() < Duration::from_secs(90) {
        root = series_of(&prom, "root");
        mine = series_of(&prom, "unit");
        if settled(&root, &mine) {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let diff: Vec<String> = root
        .keys()
        .chain(mine.keys())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .filter(|k| root.get(*k) != mine.get(*k))
        .map(|k| format!("{k:?}: root {:?}, unit {:?}", root.get(k), mine.get(k)))
        .collect();
    assert!(
        settled(&root, &mine),
        "after {:?}: differences {diff:#?}\nroot's series: {root:#?}\nunit exporter's log: {}\n\
         bufinfo: {}",
        t0.elapsed(),
        unit_x.log(),
        std::fs::read_to_string("/sys/kernel/debug/dma_buf/bufinfo").unwrap_or_default()
    );
    eprintln!(
        "ok: {} series equal after {:?}, e.g. {user_cg}: 2 vgem clients, {want_mapped} bytes mapped",
        root.len(),
        t0.elapsed()
    );
    for c in ["CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH"] {
        assert_eq!(
            value(
                &mine,
                "drmtool_export_capability_missing",
                &[("capability", c)]
            ),
            Some(0.0)
        );
    }
    let log = unit_x.log();
    assert!(
        log.contains(&format!("serving http://{listen}/metrics")),
        "{log}"
    );
    assert!(!log.contains("warning"), "{log}");

    // The rules' and the dashboard's names, in the unit exporter's own scrape.
    let (code, text) = get(listen.parse().unwrap(), "/metrics").expect("a scrape");
    assert_eq!(code, 200);
    let served: BTreeSet<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    let dashboard: serde_json::Value = serde_json::from_str(DASHBOARD).unwrap();
    let (names, undefined) = promql::served_names(RULES, &dashboard);
    assert!(undefined.is_empty(), "{undefined:?}");
    let mut missing = Vec::new();
    for n in &names {
        // Families whose source this kernel may lack: fdinfo memory and engine keys (the
        // patched vkms of stock-6.12-fdinfo prints them; 6.12's vgem and vkms do not),
        // dmem regions (qxl's, patched in on debian-7.3).
        let needs = if n.starts_with("drm_memory_") || n.starts_with("drm_engine_") {
            Some("vkms_fdinfo")
        } else if n.starts_with("drm_dmem_") {
            Some("qxl_dmem")
        } else {
            None
        };
        match (served.contains(n.as_str()), needs) {
            (true, _) => {}
            (false, Some(f)) if !expected(f) => {
                eprintln!("note: {n} not served: this kernel is not built with {f}");
            }
            (false, _) => missing.push(n.clone()),
        }
    }
    assert!(
        missing.is_empty(),
        "read by the rules or the dashboard, not in a real scrape: {missing:?}\n{text}"
    );
    eprintln!(
        "ok: the {} names of the rules and the dashboard",
        names.len()
    );
    drop((
        prom, root_x, unit_x, lease, dmem_job, orphan, u1, u2, r1, r2,
    ));
}

/// `export --textfile` once as the unit's user with `caps` (setpriv names) instead of the
/// unit's; its exit status, stderr and output.
fn textfile_as(
    unit: &Unit,
    dir: &Scratch,
    caps: Option<&[&str]>,
    extra: &[&str],
    flags: &[&str],
) -> (i32, String, Option<String>) {
    let out = dir
        .0
        .join(format!("out-{}.prom", extra.join("-") + &flags.join("")));
    let _ = std::fs::remove_file(&out);
    let mut argv: Vec<String> = vec!["export".into(), "--textfile".into()];
    argv.push(out.display().to_string());
    argv.extend(["--count".into(), "1".into()]);
    argv.extend(flags.iter().map(|f| f.to_string()));
    let changed;
    let u = match caps {
        Some(c) => {
            changed = Unit {
                caps: c.iter().map(|s| s.to_string()).collect(),
                exec: unit.exec.clone(),
                user: unit.user.clone(),
                no_new_privs: unit.no_new_privs,
                read_only: unit.read_only.clone(),
            };
            &changed
        }
        None => unit,
    };
    let o = u
        .command(&dir.drmtool(), &argv, extra, Mounts::ReadOnlyPaths)
        .current_dir(&dir.0)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        std::fs::read_to_string(&out).ok(),
    )
}

/// One capability too many is refused (and allowed with the flag); too few is named, and
/// the figures of another user's process are then missing, with the gauge that says so.
#[test]
fn the_unit_refuses_more_and_names_what_is_less() {
    if !in_guest() {
        skip!("not in a vm guest: no users or capabilities to drop here");
    }
    let unit = Unit::parse(UNIT);
    unit_user(&unit);
    let dir = Scratch::new("caps");
    let cg = Cgroup::new("drmtool-priv-caps");
    let nodes = OpenNodes::new();
    let u = Held::spawn(
        &dir,
        OTHER_UID,
        &["--device", "vgem", "--dumb", "32x32", "--map"],
    );
    drop(nodes);
    cg.add(u.ready.pid);
    let want = format!("cgroup=\"{}\"", cg.path());
    let sees_user = |t: &str| {
        t.lines()
            .any(|l| l.starts_with("drm_clients{") && l.contains(&want))
    };

    // As the unit says: no warning, the user's client seen.
    let (code, err, out) = textfile_as(&unit, &dir, None, &[], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("warning"), "{err}");
    let out = out.expect("written");
    assert!(sees_user(&out), "{out}");

    // One more capability: refused (exit 2), the capability named, nothing written.
    let (code, err, out) = textfile_as(&unit, &dir, None, &["sys_admin"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("CAP_SYS_ADMIN") && err.contains("--allow-extra-capabilities"),
        "{err}"
    );
    assert!(out.is_none());
    eprintln!("refused: {err}");
    let (code, err, out) = textfile_as(
        &unit,
        &dir,
        None,
        &["sys_admin"],
        &["--allow-extra-capabilities"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("going on: --allow-extra-capabilities"),
        "{err}"
    );
    assert!(out.is_some());

    // Uid 0 kept as the real and saved uid (only the effective one changed): refused.
    let o = Command::new("setpriv")
        .arg(format!("--euid={UNIT_UID}"))
        .arg(dir.drmtool())
        .args(["export", "--textfile"])
        .arg(dir.0.join("euid.prom"))
        .args(["--count", "1"])
        .current_dir(&dir.0)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("uid 0 is still its real uid"), "{err}");

    // Fewer: each missing capability named, and the gauge says it. With
    // CAP_DAC_READ_SEARCH alone the fds are listed but no link resolves: the scan counts
    // no process unreadable and finds no holder, so only the gauge tells.
    for (caps, missing) in [
        (&[][..], &["CAP_DAC_READ_SEARCH", "CAP_SYS_PTRACE"][..]),
        (&["sys_ptrace"][..], &["CAP_DAC_READ_SEARCH"][..]),
        (&["dac_read_search"][..], &["CAP_SYS_PTRACE"][..]),
    ] {
        let (code, err, out) = textfile_as(&unit, &dir, Some(caps), &[], &[]);
        assert_eq!(code, 0, "{caps:?}: {err}");
        let out = out.expect("written");
        for m in missing {
            assert!(
                err.contains(&format!("warning: without {m}")),
                "{caps:?}: {err}"
            );
            assert!(
                out.contains(&format!(
                    "drmtool_export_capability_missing{{capability=\"{m}\"}} 1"
                )),
                "{caps:?}: {out}"
            );
        }
        assert!(
            !sees_user(&out),
            "{caps:?} saw the other user's client: {out}"
        );
        let unreadable = out
            .lines()
            .find_map(|l| l.strip_prefix("drmtool_export_processes_unreadable "))
            .and_then(|v| v.parse::<u64>().ok());
        eprintln!("{caps:?}: missing {missing:?}, processes unreadable {unreadable:?}");
        if caps == ["dac_read_search"] {
            assert_eq!(unreadable, Some(0), "{out}");
        } else {
            assert!(unreadable.is_some_and(|n| n > 0), "{out}");
        }
    }
    drop(u);
}
