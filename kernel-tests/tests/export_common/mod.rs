//! What the `drmtool_export*.rs` targets share (`mod export_common;`): sample clients, test
//! cgroups, Debian's Prometheus run in the guest, an HTTP GET, the exporter served on the
//! loopback interface, and the samples of an exposition.
#![allow(dead_code)]

use drmtool::export::{Config, Exporter, Per};
use kernel_tests::sample::Client;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const HELPER: &str = "sample_client_entry";

pub const PROMETHEUS: &str = "/usr/bin/prometheus";

pub fn spawn(args: &[&str]) -> Client {
    Client::spawn(HELPER, args)
}

/// A cgroup made for the test, removed (after its processes exit) on drop.
pub struct Cgroup(pub PathBuf);

impl Cgroup {
    pub fn new(name: &str) -> Self {
        let p = Path::new("/sys/fs/cgroup").join(name);
        let _ = std::fs::remove_dir(&p);
        std::fs::create_dir(&p).unwrap_or_else(|e| panic!("mkdir {}: {e}", p.display()));
        Cgroup(p)
    }

    pub fn path(&self) -> String {
        format!(
            "/{}",
            self.0.file_name().unwrap().to_string_lossy().into_owned()
        )
    }

    pub fn add(&self, pid: u32) {
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
pub struct Prometheus {
    child: Child,
    /// Its HTTP API.
    pub addr: SocketAddr,
    dir: PathBuf,
}

impl Prometheus {
    pub fn start(target: SocketAddr) -> Prometheus {
        Prometheus::start_with(&format!(
            "  - job_name: drmtool\n    static_configs:\n      - targets: ['{target}']\n"
        ))
    }

    /// Prometheus scraping every second with `jobs` (the items of `scrape_configs`).
    pub fn start_with(jobs: &str) -> Prometheus {
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

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    /// An instant query: each result's labels (those named in `by`, joined by `,`) to its
    /// value.
    pub fn query(&self, promql: &str, by: &[&str]) -> Option<BTreeMap<String, f64>> {
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
    pub fn expect(&self, promql: &str, by: &[&str], want: &[(&str, f64)]) {
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
pub fn encode(s: &str) -> String {
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
pub fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
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
pub fn serve_per_cgroup() -> (SocketAddr, Arc<Mutex<Exporter>>) {
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

/// One sample of a text-format exposition: the metric name, its labels, the value.
pub fn samples(text: &str) -> Vec<(String, BTreeMap<String, String>, f64)> {
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
