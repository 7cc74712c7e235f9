//! `drmtool export` against the real Prometheus server (Debian's `prometheus`, run in the
//! guest): sample clients with known buffers in two cgroups, the exporter serving /metrics
//! on the loopback interface, Prometheus scraping it every second, and PromQL over its HTTP
//! API must give exactly the ground truth (clients per cgroup and device, mapped bytes, a
//! dma-buf shared between the cgroups counted once overall and visible as shared in both,
//! fdinfo memory where the driver prints it and no series where it does not), and again
//! after one client exits (its series disappear, the dma-buf becomes exclusive).
//!
//! Engine counters: on stock-6.12-fdinfo, whose test-only vkms patch prints
//! `drm-engine-composer` (the composer's time per open file), Prometheus's
//! `drm_engine_busy_seconds_total` and its `rate()` follow the kernel's counter exactly,
//! and a client's time stays in its cgroup's counter after it exits. The other counters
//! (`drm-cycles-*` and the rest) have no driver in the guests; tools/tests/export.rs covers
//! them on fixture trees.

use drmtool::export::{Config, Exporter, Per};
use drmtool::gpu;
use kernel_tests::sample::Client;
use kernel_tests::{in_guest, skip};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[path = "../../tools/tests/support/tls.rs"]
mod tls;

const HELPER: &str = "sample_client_entry";
const PROMETHEUS: &str = "/usr/bin/prometheus";

/// The sample client's entry point (kernel_tests::sample); run plainly it does nothing.
#[test]
fn sample_client_entry() {
    kernel_tests::sample::entry();
}

fn spawn(args: &[&str]) -> Client {
    Client::spawn(HELPER, args)
}

/// A cgroup made for the test, removed (after its processes exit) on drop.
struct Cgroup(PathBuf);

impl Cgroup {
    fn new(name: &str) -> Self {
        let p = Path::new("/sys/fs/cgroup").join(name);
        let _ = std::fs::remove_dir(&p);
        std::fs::create_dir(&p).unwrap_or_else(|e| panic!("mkdir {}: {e}", p.display()));
        Cgroup(p)
    }

    fn path(&self) -> String {
        format!(
            "/{}",
            self.0.file_name().unwrap().to_string_lossy().into_owned()
        )
    }

    fn add(&self, pid: u32) {
        std::fs::write(self.0.join("cgroup.procs"), pid.to_string())
            .unwrap_or_else(|e| panic!("move {pid} to {}: {e}", self.0.display()));
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The Prometheus server, killed on drop.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    dir: PathBuf,
}

impl Prometheus {
    fn start(target: SocketAddr) -> Prometheus {
        Prometheus::start_with(&format!(
            "  - job_name: drmtool\n    static_configs:\n      - targets: ['{target}']\n"
        ))
    }

    /// Prometheus scraping every second with `jobs` (the items of `scrape_configs`).
    fn start_with(jobs: &str) -> Prometheus {
        let dir = PathBuf::from(format!("/tmp/drmtool-export-prom-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        // A free port for the server's own listener.
        let addr = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap();
        let cfg = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n{jobs}"
        );
        std::fs::write(dir.join("prometheus.yml"), cfg).unwrap();
        let log = std::fs::File::create(dir.join("log")).unwrap();
        let child = Command::new(PROMETHEUS)
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        let p = Prometheus { child, addr, dir };
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(120) {
            if get(p.addr, "/-/ready").is_some_and(|(code, _)| code == 200) {
                eprintln!("prometheus ready after {:?}", t0.elapsed());
                return p;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        panic!("prometheus not ready after 120 s: {}", p.log());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    /// An instant query: each result's labels (those named in `by`, joined by `,`) to its
    /// value.
    fn query(&self, promql: &str, by: &[&str]) -> Option<BTreeMap<String, f64>> {
        let (code, body) = get(
            self.addr,
            &format!("/api/v1/query?query={}", encode(promql)),
        )?;
        if code != 200 {
            panic!("query {promql:?}: HTTP {code}: {body}");
        }
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        let mut out = BTreeMap::new();
        for r in v["data"]["result"].as_array()? {
            let key: Vec<&str> = by
                .iter()
                .map(|l| r["metric"][*l].as_str().unwrap_or(""))
                .collect();
            let val: f64 = r["value"][1].as_str()?.parse().ok()?;
            out.insert(key.join(","), val);
        }
        Some(out)
    }

    /// Polls `promql` until its result is `want` (a scrape a second; at most 60 s).
    #[track_caller]
    fn expect(&self, promql: &str, by: &[&str], want: &[(&str, f64)]) {
        let want: BTreeMap<String, f64> = want.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let t0 = Instant::now();
        let mut last = None;
        while t0.elapsed() < Duration::from_secs(60) {
            last = self.query(promql, by);
            if last.as_ref() == Some(&want) {
                eprintln!("ok {promql}: {want:?} ({:?})", t0.elapsed());
                return;
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        panic!(
            "{promql}: want {want:?}, Prometheus answers {last:?}\nlog: {}",
            self.log()
        );
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Percent-encodes a query parameter.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `GET path` over HTTP/1.0: the status and the body, `None` when nothing answers.
fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(20))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_string()))
}

/// The exporter in this process (`--per cgroup`, every scrape scans), serving on a free
/// loopback port: that address and the exporter.
fn serve_per_cgroup() -> (SocketAddr, Arc<Mutex<Exporter>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1 (is lo up?)");
    let target = listener.local_addr().unwrap();
    let exporter = Arc::new(Mutex::new(Exporter::new(Config {
        scan: drmtool::Options::default(),
        per: Per::Cgroup,
        client_names: false,
        min_interval: Duration::ZERO,
    })));
    let e = exporter.clone();
    std::thread::spawn(move || drmtool::export::serve(listener, e));
    (target, exporter)
}

fn page_round(n: u64) -> u64 {
    n.div_ceil(4096) * 4096
}

#[test]
fn prometheus_sees_exactly_what_the_cgroups_hold() {
    if !in_guest() {
        skip!("not in a vm guest: no DRM devices or cgroup v2 here");
    }
    if !Path::new(PROMETHEUS).exists() {
        skip!("{PROMETHEUS} is not installed (scripts/setup installs Debian's prometheus)");
    }
    let gpus = gpu::gpus().expect("the guest has DRM devices");
    let name_of = |driver: &str| {
        gpus.iter()
            .find(|g| g.driver.as_deref() == Some(driver))
            .map(|g| g.bus_id.clone().unwrap_or_else(|| g.name.clone()))
            .unwrap_or_else(|| panic!("no {driver} in {}", gpu::summary(&gpus)))
    };
    let (vgem, vkms) = (name_of("vgem"), name_of("vkms"));

    let (target, exporter) = serve_per_cgroup();

    let (ga, gb) = (
        Cgroup::new("drmtool-export-a"),
        Cgroup::new("drmtool-export-b"),
    );
    // A (cgroup a): a mapped vgem buffer, exported as a dma-buf it maps too.
    let a = spawn(&[
        "--device",
        "vgem",
        "--dumb",
        "64x64",
        "--map",
        "--export",
        "--map-dmabuf",
    ]);
    ga.add(a.pid());
    let shared = a.ready.dmabuf_size.expect("A exported a dma-buf");
    // B (cgroup b): its own mapped vgem buffer, and A's dma-buf imported.
    let b = spawn(&[
        "--device",
        "vgem",
        "--dumb",
        "32x32",
        "--map",
        "--import",
        &format!("{}:{}", a.pid(), a.ready.dmabuf_fd.unwrap()),
    ]);
    gb.add(b.pid());
    // C (cgroup b): a mapped vkms buffer; D (cgroup b) holds C's open file too (what a
    // fork does: counted once) and opens one of its own: two vkms clients.
    let c = spawn(&["--device", "vkms", "--dumb", "16x16", "--map"]);
    gb.add(c.pid());
    let d = spawn(&[
        "--device",
        "vkms",
        "--share-drm",
        &format!("{}:{}", c.pid(), c.ready.drm_fd),
    ]);
    gb.add(d.pid());
    let (pa, pb, pc) = (
        page_round(a.ready.buffers[0].size),
        page_round(b.ready.buffers[0].size),
        page_round(c.ready.buffers[0].size),
    );
    // Whether vkms prints the common memory keys (the patched vkms of stock-6.12-fdinfo):
    // the kernel's own fdinfo text decides what the exporter must show.
    let c_fdinfo = std::fs::read_to_string(format!("/proc/{}/fdinfo/{}", c.pid(), c.ready.drm_fd))
        .expect("C's fdinfo");
    let vkms_memory = c_fdinfo.contains("drm-total-memory:");
    eprintln!("vkms prints drm-total-memory: {vkms_memory}");

    let prom = Prometheus::start(target);
    let (ca, cb) = (ga.path(), gb.path());
    let ours = r#"cgroup=~"/drmtool-export-.*""#;
    let k = |g: &str, dev: &str| format!("{g},{dev}");
    prom.expect(
        &format!("sum by (cgroup, device) (drm_clients{{{ours}}})"),
        &["cgroup", "device"],
        &[
            (&k(&ca, &vgem), 1.0),
            (&k(&cb, &vgem), 1.0),
            (&k(&cb, &vkms), 2.0),
        ],
    );
    prom.expect(
        &format!("sum by (cgroup) (drm_mapped_bytes{{{ours}}})"),
        &["cgroup"],
        &[(&ca, pa as f64), (&cb, (pb + pc) as f64)],
    );
    prom.expect(
        &format!("sum by (cgroup, sharing) (drm_dmabuf_bytes{{{ours}}})"),
        &["cgroup", "sharing"],
        &[
            (&format!("{ca},shared"), shared as f64),
            (&format!("{cb},shared"), shared as f64),
        ],
    );
    prom.expect(
        "sum(drm_dmabuf_distinct_bytes)",
        &[],
        &[("", shared as f64)],
    );
    let memory_query =
        format!("sum by (cgroup, device, source) (drm_memory_bytes{{{ours}, kind=\"total\"}})");
    if vkms_memory {
        // C's file, held by C and D, counted once.
        prom.expect(
            &memory_query,
            &["cgroup", "device", "source"],
            &[(&format!("{cb},{vkms},fdinfo"), pc as f64)],
        );
    } else {
        prom.expect(&memory_query, &["cgroup", "device", "source"], &[]);
    }

    // B exits: its series disappear, and A's dma-buf is no longer shared.
    b.exit();
    prom.expect(
        &format!("sum by (cgroup, device) (drm_clients{{{ours}}})"),
        &["cgroup", "device"],
        &[(&k(&ca, &vgem), 1.0), (&k(&cb, &vkms), 2.0)],
    );
    prom.expect(
        &format!("sum by (cgroup, sharing) (drm_dmabuf_bytes{{{ours}}})"),
        &["cgroup", "sharing"],
        &[(&format!("{ca},exclusive"), shared as f64)],
    );
    prom.expect(
        &format!("sum by (cgroup) (drm_mapped_bytes{{{ours}}})"),
        &["cgroup"],
        &[(&ca, pa as f64), (&cb, pc as f64)],
    );
    // The exporter's own series: scans ran, none failed.
    prom.expect("drmtool_export_scan_errors_total", &[], &[("", 0.0)]);
    prom.expect("drmtool_export_scan_ok", &[], &[("", 1.0)]);
    let stats = exporter.lock().unwrap().stats();
    eprintln!("exporter: {stats:?}");
    assert!(stats.scans >= 2);
    drop((a, c, d));
}

/// One sample of a text-format exposition: the metric name, its labels, the value.
fn samples(text: &str) -> Vec<(String, BTreeMap<String, String>, f64)> {
    let mut out = Vec::new();
    for l in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, value) = l.rsplit_once(' ').expect("a sample line");
        let (name, labels) = match series.split_once('{') {
            Some((n, rest)) => (n, rest.strip_suffix('}').expect("closing brace")),
            None => (series, ""),
        };
        let mut map = BTreeMap::new();
        // Label values here are plain (paths, numbers, names without quotes or commas).
        for pair in labels.split("\",").filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once("=\"").expect("label=\"value\"");
            map.insert(k.to_string(), v.trim_end_matches('"').to_string());
        }
        out.push((name.to_string(), map, value.parse().expect("a number")));
    }
    out
}

/// `drm-client-id` of a process's fd, from the kernel's own fdinfo text (drivers print it
/// since "drm: Add fdinfo memory stats" / `drm_show_fdinfo`, 6.5; none before).
fn client_id(pid: u32, fd: u32) -> Option<String> {
    let t = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).expect("fdinfo");
    t.lines()
        .find_map(|l| l.strip_prefix("drm-client-id:"))
        .map(|v| v.trim().to_string())
}

/// The `client` label the exporter must give an open file: its `drm-client-id`, else
/// `<pid>/<fd>` of its first holder in pid order.
fn client_label(holders: &[(u32, u32)]) -> String {
    let (pid, fd) = *holders.iter().min().expect("a holder");
    client_id(pid, fd).unwrap_or_else(|| format!("{pid}/{fd}"))
}

/// `--per client` on the fdinfo path: per open file, `drm-total`, `drm-shared` and
/// `drm-active` as the kernel counts them (an exported buffer is shared; an import into
/// another file is in both totals), the file three processes hold (C, the child C forked,
/// and E, which took it with pidfd_getfd) counted once under the lowest pid, and no memory
/// series at all where the driver prints no such keys.
#[test]
fn per_client_series_follow_the_kernels_fdinfo() {
    if !in_guest() {
        skip!("not in a vm guest: no DRM devices here");
    }
    if kernel_tests::node_of_driver(&["vkms"]).is_none() {
        skip!("no vkms node");
    }
    // C: a vkms buffer, exported, and a forked child holding C's file; D: imports the
    // buffer into its own file; E: holds C's file too (taken with pidfd_getfd) and opens one
    // of its own.
    let c = spawn(&["--device", "vkms", "--dumb", "16x16", "--export", "--fork"]);
    let (child, child_fd) = c.ready.fork_child.expect("--fork reports its child");
    let d = spawn(&[
        "--device",
        "vkms",
        "--import",
        &format!("{}:{}", c.pid(), c.ready.dmabuf_fd.unwrap()),
    ]);
    let e = spawn(&[
        "--device",
        "vkms",
        "--share-drm",
        &format!("{}:{}", c.pid(), c.ready.drm_fd),
    ]);
    let size = page_round(c.ready.buffers[0].size);
    let c_file = [
        (c.pid(), c.ready.drm_fd),
        (child, child_fd),
        (e.pid(), e.ready.extra_drm_fds[0]),
    ];
    let (idc, idd, ide) = (
        client_label(&c_file),
        client_label(&[(d.pid(), d.ready.drm_fd)]),
        client_label(&[(e.pid(), e.ready.drm_fd)]),
    );
    if let Some(id) = client_id(c.pid(), c.ready.drm_fd) {
        assert_eq!(
            client_id(e.pid(), e.ready.extra_drm_fds[0]),
            Some(id.clone()),
            "E holds C's open file"
        );
        assert_eq!(
            client_id(child, child_fd),
            Some(id),
            "C's child holds C's open file"
        );
    }
    eprintln!("client labels: C's file {idc}, D {idd}, E {ide}");
    let fdinfo =
        std::fs::read_to_string(format!("/proc/{}/fdinfo/{}", c.pid(), c.ready.drm_fd)).unwrap();
    let prints_memory = fdinfo.contains("drm-total-memory:");
    eprintln!("vkms prints drm-total-memory: {prints_memory}");

    let mut x = Exporter::new(Config {
        scan: drmtool::Options {
            pids: vec![c.pid(), child, d.pid(), e.pid()],
            ..Default::default()
        },
        per: Per::Client,
        client_names: false,
        min_interval: Duration::ZERO,
    });
    let text = x.scrape(drmtool::export::Format::Text, Instant::now());
    let s = samples(&text);
    let find = |metric: &str, client: &str, kind: Option<&str>| -> Vec<(String, f64)> {
        s.iter()
            .filter(|(n, l, _)| {
                n == metric
                    && l.get("client").map(String::as_str) == Some(client)
                    && kind.is_none_or(|k| l.get("kind").map(String::as_str) == Some(k))
            })
            .map(|(_, l, v)| (l.get("pid").cloned().unwrap_or_default(), *v))
            .collect()
    };
    let low = c.pid().min(e.pid()).min(child).to_string();
    assert_eq!(
        find("drm_clients", &idc, None),
        [(low.clone(), 1.0)],
        "{text}"
    );
    assert_eq!(
        find("drm_clients", &idd, None),
        [(d.pid().to_string(), 1.0)],
        "{text}"
    );
    assert_eq!(
        find("drm_clients", &ide, None),
        [(e.pid().to_string(), 1.0)],
        "{text}"
    );
    if prints_memory {
        let mem = |id: &str, kind: &str| find("drm_memory_bytes", id, Some(kind));
        for (id, pid, total, shared) in [
            (&idc, &low, size, size),
            (&idd, &d.pid().to_string(), size, size),
            (&ide, &e.pid().to_string(), 0, 0),
        ] {
            assert_eq!(
                mem(id, "total"),
                [(pid.clone(), total as f64)],
                "{id}: {text}"
            );
            assert_eq!(
                mem(id, "shared"),
                [(pid.clone(), shared as f64)],
                "{id}: {text}"
            );
            assert_eq!(mem(id, "active"), [(pid.clone(), 0.0)], "{id}: {text}");
        }
        assert!(
            s.iter()
                .filter(|(n, _, _)| n == "drm_memory_bytes")
                .all(|(_, l, _)| l.get("source").map(String::as_str) == Some("fdinfo")),
            "{text}"
        );
    } else {
        assert!(
            !s.iter().any(|(n, _, _)| n == "drm_memory_bytes"),
            "memory series without a source:\n{text}"
        );
    }
    drop((c, d, e));
}

/// `drm-engine-composer` of `pid`'s fd `fd`, in ns (the test-only vkms patch's counter).
fn composer_ns(pid: u32, fd: u32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}"))
        .unwrap_or_else(|e| panic!("fdinfo of {pid}:{fd}: {e}"));
    text.lines()
        .find_map(|l| l.strip_prefix("drm-engine-composer:"))
        .and_then(|v| v.trim().strip_suffix(" ns"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no drm-engine-composer in {pid}:{fd}'s fdinfo:\n{text}"))
}

/// vkms's CRC capture on CRTC 0 while this lives: vkms composes every frame of what the
/// CRTC shows; a thread drains `crc/data` (the kernel's queue holds 128 entries) and counts
/// the entries. Dropping it closes `crc/data`, which turns the capture (and composing) off.
struct CrcCapture {
    stop: Arc<std::sync::atomic::AtomicBool>,
    /// CRC entries read so far.
    entries: Arc<std::sync::atomic::AtomicU64>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl CrcCapture {
    fn start() -> CrcCapture {
        use std::os::unix::fs::OpenOptionsExt;
        let minor = drm_gem::enumerate()
            .expect("enumerate")
            .into_iter()
            .find(|n| n.driver.as_deref() == Some("vkms") && n.kind == drm_gem::NodeKind::Primary)
            .expect("a vkms primary node")
            .dev
            .1;
        let dir = PathBuf::from(format!("/sys/kernel/debug/dri/{minor}/crtc-0/crc"));
        std::fs::write(dir.join("control"), "auto")
            .unwrap_or_else(|e| panic!("{}: {e}", dir.join("control").display()));
        let mut data = std::fs::OpenOptions::new()
            .read(true)
            // crc/data answers EAGAIN when empty instead of blocking.
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open(dir.join("data"))
            .unwrap_or_else(|e| panic!("{}: {e}", dir.join("data").display()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let entries = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let lines = entries.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                match data.read(&mut buf) {
                    Ok(n) => {
                        let n = buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
                        lines.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(20))
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => panic!("reading crc/data: {e}"),
                }
            }
        });
        CrcCapture {
            stop,
            entries,
            reader: Some(reader),
        }
    }

    /// CRC entries read so far.
    fn entries(&self) -> u64 {
        self.entries.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Stops the capture; returns the CRC entries read.
    fn stop(mut self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(r) = self.reader.take() {
            r.join().expect("crc reader");
        }
        self.entries()
    }
}

impl Drop for CrcCapture {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

/// The engine path end to end, with the kernel's own counter as the ground truth: vkms with
/// the test-only fdinfo patch (stock-6.12-fdinfo) charges the composer's time to the file
/// whose framebuffer it composes. In one cgroup: L lights vkms's output with its own
/// framebuffer, N is a second vkms client that composes nothing (its counter stays 0 and
/// keeps the cgroup's series alive). With CRC capture on, Prometheus's `rate()` of
/// `drm_engine_busy_seconds_total` turns positive; with it off, L's counter stops and the
/// series equals it exactly. L exits: its time stays in the cgroup's counter (the exporter
/// keeps what departed clients counted). M lights the output next: the series equals L's
/// final count plus M's. Everyone exits: the series disappears.
#[test]
fn prometheus_rates_the_kernels_engine_counter() {
    if !in_guest() {
        skip!("not in a vm guest: no DRM devices or cgroup v2 here");
    }
    kernel_tests::require_feature!("vkms_fdinfo");
    if !Path::new(PROMETHEUS).exists() {
        skip!("{PROMETHEUS} is not installed (scripts/setup installs Debian's prometheus)");
    }
    let (target, _exporter) = serve_per_cgroup();
    let g = Cgroup::new("drmtool-export-engine");
    let cg = g.path();
    // L first: the first opener of a primary node is its DRM master, which lighting needs.
    let l = spawn(&["--device", "vkms", "--light"]);
    g.add(l.pid());
    let n = spawn(&["--device", "vkms"]);
    g.add(n.pid());
    eprintln!("L lit {:?}", l.ready.lit);
    assert!(l.ready.lit.is_some(), "L reports what it lit");
    assert_eq!(
        composer_ns(l.pid(), l.ready.drm_fd),
        0,
        "composed before any CRC capture"
    );
    assert_eq!(composer_ns(n.pid(), n.ready.drm_fd), 0);

    let prom = Prometheus::start(target);
    let series = format!(r#"drm_engine_busy_seconds_total{{cgroup="{cg}", engine="composer"}}"#);
    let sum = format!("sum by (cgroup) ({series})");
    prom.expect(&sum, &["cgroup"], &[(&cg, 0.0)]);

    // Composes while the capture is on; Prometheus sees the counter move. The rate's
    // window is the one shown to be 0 before each phase, so a positive rate is this
    // phase's.
    let rate = format!("sum by (cgroup) (rate({series}[3s]))");
    let phase = |who: &Client, name: &str| -> u64 {
        assert_eq!(
            composer_ns(who.pid(), who.ready.drm_fd),
            0,
            "{name} composed before its CRC capture"
        );
        let crc = CrcCapture::start();
        let t0 = Instant::now();
        loop {
            let r = prom.query(&rate, &["cgroup"]).unwrap_or_default();
            if r.get(&cg).is_some_and(|&v| v > 0.0)
                && crc.entries() > 0
                && composer_ns(who.pid(), who.ready.drm_fd) > 0
            {
                eprintln!("{name}: rate {:?} after {:?}", r, t0.elapsed());
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(90),
                "{rate}: never above 0 while {name}'s framebuffer was composed: {r:?}\nlog: {}",
                prom.log()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
        let entries = crc.stop();
        // The capture is off: the counter stops, once the frame in flight (a composer work
        // queued before the stop) is done: it must hold still for a second within 10 s.
        let t0 = Instant::now();
        let mut frozen = composer_ns(who.pid(), who.ready.drm_fd);
        loop {
            std::thread::sleep(Duration::from_secs(1));
            let now = composer_ns(who.pid(), who.ready.drm_fd);
            if now == frozen {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "{name}'s counter still moves 10 s after the CRC capture stopped ({frozen} -> {now} ns)"
            );
            frozen = now;
        }
        eprintln!("{name}: {entries} CRC entries, drm-engine-composer {frozen} ns");
        assert!(
            entries > 0 && frozen > 0,
            "{name}: {entries} entries, {frozen} ns"
        );
        frozen
    };
    let l_ns = phase(&l, "L");
    assert_eq!(
        composer_ns(n.pid(), n.ready.drm_fd),
        0,
        "N composed nothing"
    );
    prom.expect(&sum, &["cgroup"], &[(&cg, l_ns as f64 / 1e9)]);
    // Stopped: the rate over a window after the stop falls to 0.
    prom.expect(&rate, &["cgroup"], &[(&cg, 0.0)]);

    // L exits: its time stays in the cgroup's counter while N keeps the series alive.
    // With L's file closed the device has no master; M's open makes it the master.
    l.exit();
    let m = spawn(&["--device", "vkms", "--light"]);
    g.add(m.pid());
    prom.expect(&sum, &["cgroup"], &[(&cg, l_ns as f64 / 1e9)]);
    let m_ns = phase(&m, "M");
    prom.expect(&sum, &["cgroup"], &[(&cg, (l_ns + m_ns) as f64 / 1e9)]);
    // The raw samples never went backwards.
    let (code, body) = get(
        prom.addr,
        &format!("/api/v1/query?query={}", encode(&format!("{series}[10m]"))),
    )
    .expect("range query");
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let values: Vec<f64> = v["data"]["result"][0]["values"]
        .as_array()
        .expect("a matrix result")
        .iter()
        .map(|p| p[1].as_str().unwrap().parse().unwrap())
        .collect();
    eprintln!("{} samples, last {:?}", values.len(), values.last());
    assert!(
        values.windows(2).all(|w| w[0] <= w[1]),
        "went backwards: {values:?}"
    );
    assert_eq!(values.last(), Some(&((l_ns + m_ns) as f64 / 1e9)));

    m.exit();
    n.exit();
    prom.expect(&sum, &["cgroup"], &[]);
    prom.expect("drmtool_export_scan_errors_total", &[], &[("", 0.0)]);
}

/// The exporter in this process under `access` (`--per device`), on a free loopback port.
fn serve_access(access: drmtool::export::Access) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1 (is lo up?)");
    let addr = listener.local_addr().unwrap();
    let exporter = Arc::new(Mutex::new(Exporter::new(Config {
        scan: drmtool::Options::default(),
        per: Per::Device,
        client_names: false,
        min_interval: Duration::from_millis(500),
    })));
    std::thread::spawn(move || drmtool::export::serve_with(listener, exporter, Arc::new(access)));
    addr
}

/// Hostile clients of one exporter, stopped (and joined) on drop.
struct Load {
    stop: Arc<std::sync::atomic::AtomicBool>,
    /// Connections the server ended (evicted, or dropped at the header deadline).
    ended: Arc<std::sync::atomic::AtomicUsize>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn new() -> Load {
        Load {
            stop: Arc::default(),
            ended: Arc::default(),
            threads: Vec::new(),
        }
    }

    /// A client that connects to `addr`, sends `request` a byte each `send_pace`, then
    /// reads what comes a byte each `read_pace`, and starts again when the server ends it.
    fn add(
        &mut self,
        addr: SocketAddr,
        request: &'static [u8],
        send_pace: Duration,
        read_pace: Duration,
    ) {
        let (stop, ended) = (self.stop.clone(), self.ended.clone());
        self.threads.push(std::thread::spawn(move || {
            use std::sync::atomic::Ordering::Relaxed;
            while !stop.load(Relaxed) {
                let Ok(mut s) = TcpStream::connect(addr) else {
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                };
                let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
                for b in request {
                    if stop.load(Relaxed) || s.write_all(&[*b]).is_err() {
                        break;
                    }
                    std::thread::sleep(send_pace);
                }
                let mut byte = [0u8; 1];
                while !stop.load(Relaxed) {
                    match s.read(&mut byte) {
                        Ok(0) => {
                            ended.fetch_add(1, Relaxed);
                            break;
                        }
                        Ok(_) => std::thread::sleep(read_pace),
                        Err(e)
                            if matches!(
                                e.kind(),
                                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                            ) => {}
                        Err(_) => {
                            ended.fetch_add(1, Relaxed);
                            break;
                        }
                    }
                }
            }
        }));
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Each active target's job and its last scrape error, from Prometheus's targets API.
fn target_errors(prom: &Prometheus) -> BTreeMap<String, String> {
    let Some((200, body)) = get(prom.addr, "/api/v1/targets") else {
        return BTreeMap::new();
    };
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    v["data"]["activeTargets"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            (
                t["labels"]["job"].as_str().unwrap_or("").to_string(),
                t["lastError"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// `--web.config.file` against a real Prometheus: TLS (a self-signed certificate made here
/// with openssl) and a bcrypt password. The scrape with the right password is `up`, the
/// wrong password gets 401, plain HTTP to the TLS port fails. Then 64 idle connections to
/// each exporter (opened again whenever the server drops them), a client that reads its
/// answer a byte every 300 ms and one that trickles its request do not stop a scrape:
/// `up` stays 1 over several scrapes of both. (The guest's answer fits the socket
/// buffers, so the slow reader holds no slot for long here; the write deadline is for
/// larger answers.)
#[test]
fn prometheus_scrapes_over_tls_with_a_password_through_idle_and_slow_clients() {
    if !in_guest() {
        skip!("not in a vm guest");
    }
    if !Path::new(PROMETHEUS).exists() {
        skip!("{PROMETHEUS} is not installed (scripts/setup installs Debian's prometheus)");
    }
    if !Path::new("/usr/bin/openssl").exists() {
        skip!("/usr/bin/openssl is not installed (Debian's openssl makes the test certificate)");
    }
    let dir = PathBuf::from(format!("/tmp/drmtool-export-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let web = tls::web_config("/usr/bin/openssl", &dir, "s3cret")
        .expect("the test's web config")
        .expect("openssl runs");
    let cfg = drmtool::export::webconfig::WebConfig::load(&web).expect("the web config");
    let tls = cfg
        .tls
        .as_ref()
        .unwrap()
        .server_config()
        .expect("certificate and key");
    let secure = serve_access(drmtool::export::Access {
        tls: Some(tls),
        auth: cfg.auth.clone(),
    });
    let plain = serve_access(drmtool::export::Access::default());

    // Plain HTTP to the TLS port: no HTTP answer at all, no metrics.
    let answer = get(secure, "/metrics");
    assert!(
        answer.is_none(),
        "plain HTTP to the TLS port answered: {answer:?}"
    );

    let ca = dir.join("cert.pem");
    let tls_job = |name: &str, password: &str, every: &str| {
        format!(
            "  - job_name: {name}\n    scheme: https\n    scrape_interval: {every}\n    \
             scrape_timeout: {every}\n    tls_config:\n      ca_file: {}\n      \
             server_name: localhost\n    basic_auth:\n      username: {}\n      \
             password: {password}\n    static_configs:\n      - targets: ['{secure}']\n",
            ca.display(),
            tls::USER
        )
    };
    let jobs = format!(
        "{}{}  - job_name: plain-to-tls\n    static_configs:\n      - targets: ['{secure}']\n\
         \x20 - job_name: load\n    scrape_interval: 4s\n    scrape_timeout: 4s\n    \
         static_configs:\n      - targets: ['{plain}']\n",
        tls_job("tls", "s3cret", "4s"),
        tls_job("wrong-password", "wrong", "1s"),
    );
    let prom = Prometheus::start_with(&jobs);
    prom.expect(
        "up",
        &["job"],
        &[
            ("load", 1.0),
            ("plain-to-tls", 0.0),
            ("tls", 1.0),
            ("wrong-password", 0.0),
        ],
    );
    let t0 = Instant::now();
    let errors = loop {
        let e = target_errors(&prom);
        if e.get("wrong-password").is_some_and(|m| !m.is_empty())
            || t0.elapsed() > Duration::from_secs(60)
        {
            break e;
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    eprintln!("scrape errors: {errors:?}");
    assert!(
        errors["wrong-password"].contains("401"),
        "the wrong password: {errors:?}"
    );
    assert_eq!(errors["tls"], "", "{errors:?}");
    assert_ne!(errors["plain-to-tls"], "", "{errors:?}");

    // The load: 64 idle connections to each exporter, a slow reader and a slow sender.
    let mut load = Load::new();
    for _ in 0..64 {
        load.add(secure, b"", Duration::ZERO, Duration::ZERO);
        load.add(plain, b"", Duration::ZERO, Duration::ZERO);
    }
    // A slow reader (its request at once, the answer a byte every 300 ms) and a slow
    // sender (a byte every 150 ms: past the header deadline).
    load.add(
        plain,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        Duration::ZERO,
        Duration::from_millis(300),
    );
    load.add(
        plain,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaa\r\n\r\n",
        Duration::from_millis(150),
        Duration::ZERO,
    );
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(25) {
        std::thread::sleep(Duration::from_millis(500));
    }
    let window = "[20s]";
    let min = prom
        .query(
            &format!("min_over_time(up{{job=~\"tls|load\"}}{window})"),
            &["job"],
        )
        .expect("a query answer");
    let count = prom
        .query(
            &format!("count_over_time(up{{job=~\"tls|load\"}}{window})"),
            &["job"],
        )
        .expect("a query answer");
    let ended = load.ended.load(std::sync::atomic::Ordering::Relaxed);
    drop(load);
    eprintln!(
        "under load: min(up) {min:?}, scrapes {count:?}, hostile connections ended by the server: {ended}"
    );
    assert_eq!(
        min,
        BTreeMap::from([("load".to_string(), 1.0), ("tls".to_string(), 1.0)]),
        "a scrape failed under load; scrapes {count:?}\nlog: {}",
        prom.log()
    );
    assert!(
        count.values().all(|n| *n >= 3.0) && count.len() == 2,
        "several scrapes in the window: {count:?}"
    );
    assert!(
        ended > 64,
        "the server gave way to new connections: {ended}"
    );
    drop(prom);
    let _ = std::fs::remove_dir_all(&dir);
}
