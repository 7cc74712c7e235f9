//! `drmtool buffers` against the floor, in a guest: N DRM fds held by P processes, then
//! the time of one scan (`drmtool::scan::scan`, the code behind `drmtool buffers`), of the
//! whole `drmtool buffers --json` (scan and JSON, written to a sink) and of the floor: a
//! minimal loop that lists `/proc/*/fd` and reads every fd's fdinfo once, parsing nothing.
//! See `tools/BENCHMARKS.md` for the method and the figures.
//!
//! The holders are this binary run again with `BUFBENCH_HOLD` set: each opens its share of
//! the fds (every one its own open file, alternating between the vkms and vgem primary
//! nodes), every fourth also creates a vgem dumb buffer, maps it, exports it as a dma-buf
//! and maps that (so the maps and dma-buf fallbacks run), writes one line and waits for its
//! stdin to close. All holders share one stdin pipe and one stdout pipe, so the bench
//! itself holds two fds however many holders run; dropping the rig closes the pipe and
//! reaps every holder.
//!
//! Per size (fds, processes): `100/20`, `1000/200`, `5000/1000` (five DRM fds each;
//! `BUFBENCH_SIZES=100,1000` picks sizes), a criterion group `buffers/<fds>` (`floor`,
//! `scan`, `scan_json`, `pick`: all of `drmtool pick -n 1 --format json`, `topo`: all of
//! `drmtool topo --json`, `pick_near`: `pick` with `--near numa:0`, `top`: one refresh of
//! `drmtool top`, `scrape`), then
//! an interleaved paired pass (the ratio scan/floor per round; `BUFBENCH_PAIRED_SECS`,
//! default 10) and the peak memory of a process that runs one scan
//! (`VmHWM` of this binary re-run with `BUFBENCH_SCAN_ONCE`, before and after the scan).
//! The table comes last.
//!
//! Before timing, the scan must find exactly what the holders hold (their DRM fds as
//! distinct clients, their dma-buf fds, their mappings): that, a holder that fails, or a
//! missing device in a guest fails the bench. Timings never decide the exit status.
//! Without `--bench` (a plain `cargo test --benches`) it runs the checks at the first size
//! only. Without vkms and vgem it prints SKIP and exits 0; inside a `vm` guest (or with
//! `KERNEL_TESTS_STRICT=1`) that is a failure.
#![deny(unsafe_code)]

#[allow(dead_code)]
#[path = "../../drm-gem/benches/support/paired.rs"]
mod paired;

use criterion::{Criterion, SamplingMode};
use drm_gem::{Device, DumbBuffer, DumbSpec, NodeKind, PrimeFlags};
use drmtool::export::{Config, Exporter, Format, Per};
use drmtool::scan::{self, Options, ProcessReport, Report};
use paired::{Op, Paired};
use rustix::fs::{Dir, Mode, OFlags};
use std::collections::BTreeSet;
use std::hint::black_box;
use std::io::{BufRead, BufReader, PipeWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

const HOLD_ENV: &str = "BUFBENCH_HOLD";
const SCAN_ONCE_ENV: &str = "BUFBENCH_SCAN_ONCE";
/// DRM fds per holder process.
const FDS_PER_PROCESS: usize = 5;
/// Every this-many-th holder also holds a dumb buffer, its mapping, a dma-buf and its mapping.
const DMABUF_EVERY: usize = 4;
/// The dumb buffer of such a holder: 64x64 at 32 bpp, 16 KiB.
const DUMB: DumbSpec = DumbSpec {
    width: 64,
    height: 64,
    bpp: 32,
};

/// Whether missing devices are a failure: inside a `vm` guest, or under strict mode.
fn strict() -> bool {
    std::env::var_os("VM_GUEST").is_some()
        || std::env::var_os("KERNEL_TESTS_STRICT").is_some_and(|v| v != "0")
}

// ---- the holder ------------------------------------------------------------------------

/// `BUFBENCH_HOLD=<fds>:<dmabuf 0|1>:<node>,<node>...`: opens `fds` files alternating over
/// the nodes, optionally the dumb buffer and dma-buf (on the first file of the last node),
/// writes `<pid>\n` and holds everything until stdin reaches end of file.
fn hold(spec: &str) -> Result<(), String> {
    let mut it = spec.splitn(3, ':');
    let (Some(n), Some(db), Some(nodes)) = (it.next(), it.next(), it.next()) else {
        return Err(format!("bad {HOLD_ENV} {spec:?}"));
    };
    let n: usize = n.parse().map_err(|_| format!("bad fd count in {spec:?}"))?;
    let nodes: Vec<&str> = nodes.split(',').collect();
    let devs = (0..n)
        .map(|i| {
            let p = nodes[i % nodes.len()];
            Device::open(p).map_err(|e| format!("open {p}: {e}"))
        })
        .collect::<Result<Vec<Device>, String>>()?;
    // The dumb buffer, its mapping, the dma-buf and its mapping, on the last node's file.
    let dev = &devs[(nodes.len() - 1).min(n - 1)];
    let mut buf = if db == "1" {
        Some(DumbBuffer::create(dev, DUMB).map_err(|e| format!("dumb buffer: {e}"))?)
    } else {
        None
    };
    let dmabuf = match &buf {
        Some(b) => Some(
            dev.export(b.gem(), PrimeFlags::default())
                .map_err(|e| format!("PRIME export: {e}"))?,
        ),
        None => None,
    };
    let _dmabuf_map = match &dmabuf {
        Some(d) => Some(d.map().map_err(|e| format!("dma-buf mmap: {e}"))?),
        None => None,
    };
    let _dumb_map = match &mut buf {
        Some(b) => Some(b.map().map_err(|e| format!("dumb mmap: {e}"))?),
        None => None,
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", std::process::id())
        .and_then(|()| out.flush())
        .map_err(|e| format!("ready line: {e}"))?;
    let mut sink = [0u8; 64];
    while matches!(std::io::stdin().read(&mut sink), Ok(n) if n > 0) {}
    // Everything drops here, mappings before their buffers, files last.
    Ok(())
}

/// What the holders of one size hold, for the check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Expect {
    processes: usize,
    drm_fds: usize,
    dmabufs: usize,
}

/// The holders of one size; dropping it closes their stdin and reaps them.
struct Rig {
    children: Vec<Child>,
    stdin: Option<PipeWriter>,
    pids: BTreeSet<u32>,
    expect: Expect,
}

impl Rig {
    fn spawn(nodes: &[PathBuf], fds: usize) -> Result<Self, String> {
        let procs = fds.div_ceil(FDS_PER_PROCESS);
        let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
        let (stdin_r, stdin_w) = std::io::pipe().map_err(|e| format!("pipe: {e}"))?;
        let (ready_r, ready_w) = std::io::pipe().map_err(|e| format!("pipe: {e}"))?;
        let list = nodes
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(",");
        let mut rig = Rig {
            children: Vec::with_capacity(procs),
            stdin: Some(stdin_w),
            pids: BTreeSet::new(),
            expect: Expect {
                processes: procs,
                drm_fds: fds,
                dmabufs: 0,
            },
        };
        let mut left = fds;
        for i in 0..procs {
            let n = left.min(FDS_PER_PROCESS);
            left -= n;
            let db = i % DMABUF_EVERY == 0;
            rig.expect.dmabufs += usize::from(db);
            let e = |e: std::io::Error| format!("pipe clone: {e}");
            let child = Command::new(&exe)
                .env(HOLD_ENV, format!("{n}:{}:{list}", u8::from(db)))
                .stdin(Stdio::from(stdin_r.try_clone().map_err(e)?))
                .stdout(Stdio::from(ready_w.try_clone().map_err(e)?))
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|e| format!("spawn holder {i}: {e}"))?;
            rig.children.push(child);
        }
        // Only the holders keep these ends: EOF on `ready_r` means every holder is gone.
        drop((stdin_r, ready_w));
        let mut lines = BufReader::new(ready_r).lines();
        while rig.pids.len() < procs {
            match lines.next() {
                Some(Ok(l)) => {
                    let pid = l.trim().parse().map_err(|_| format!("holder line {l:?}"))?;
                    rig.pids.insert(pid);
                }
                _ => {
                    return Err(format!(
                        "{} of {procs} holders got ready; the others exited (their \
                         stderr says why)",
                        rig.pids.len()
                    ));
                }
            }
        }
        let spawned: BTreeSet<u32> = rig.children.iter().map(Child::id).collect();
        if spawned != rig.pids {
            return Err("the holders' ready lines do not match their pids".into());
        }
        Ok(rig)
    }

    /// The holders' processes in `r`, which must be all of them with exactly their DRM
    /// and dma-buf fds (what even the fdinfo-only scan, which skips mappings and
    /// de-duplication, must find).
    fn check_fds<'r>(&self, r: &'r Report) -> Result<Vec<&'r ProcessReport>, String> {
        let mine: Vec<_> = r
            .processes
            .iter()
            .filter(|p| self.pids.contains(&p.pid))
            .collect();
        let seen = Expect {
            processes: mine.len(),
            drm_fds: mine.iter().map(|p| p.drm_fds.len()).sum(),
            dmabufs: mine.iter().map(|p| p.dmabuf_fds.len()).sum(),
        };
        if seen != self.expect {
            return Err(format!(
                "the scan saw {seen:?} of the holders, they hold {:?}",
                self.expect
            ));
        }
        Ok(mine)
    }

    /// Checks that `r` reports exactly what the holders hold.
    fn check(&self, r: &Report) -> Result<(), String> {
        let mine = self.check_fds(r)?;
        // Every fd is its own open file: as many distinct clients as fds.
        let clients: BTreeSet<usize> = mine
            .iter()
            .flat_map(|p| p.drm_fds.iter().map(|f| f.client))
            .collect();
        if clients.len() != self.expect.drm_fds {
            return Err(format!(
                "{} distinct clients for {} separately opened fds",
                clients.len(),
                self.expect.drm_fds
            ));
        }
        for p in mine.iter().filter(|p| !p.dmabuf_fds.is_empty()) {
            let ino = p.dmabuf_fds[0].inode;
            let mapped = p.mapped_drm.value.unwrap_or(0);
            if !p.dmabuf_mappings.contains(&ino) && p.mapped_gem_shmem.value.unwrap_or(0) == 0 {
                return Err(format!("pid {}: its dma-buf mapping was not found", p.pid));
            }
            if mapped == 0 && p.mapped_gem_shmem.value.unwrap_or(0) == 0 {
                return Err(format!(
                    "pid {}: its dumb-buffer mapping was not found",
                    p.pid
                ));
            }
            let size = r
                .dmabufs
                .iter()
                .find(|b| b.inode == ino)
                .and_then(|b| b.size.value);
            if size != Some(DUMB.width as u64 * DUMB.height as u64 * 4) {
                return Err(format!("pid {}: dma-buf size {size:?}", p.pid));
            }
        }
        Ok(())
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        drop(self.stdin.take());
        for c in &mut self.children {
            let _ = c.wait();
        }
    }
}

// ---- what is timed ---------------------------------------------------------------------

/// The floor: every `/proc/<pid>/fd` listed, every fd's fdinfo read once, nothing parsed:
/// per process two directory opens (`<pid>/fd`, `<pid>/fdinfo`, relative to `/proc`) and
/// the listing, per fd `openat` + one `read` + `close` (an fdinfo is one seq-file record,
/// returned whole by one read into a larger buffer). Returns the number of fdinfo files
/// read.
fn floor(buf: &mut [u8]) -> usize {
    const DIR: OFlags = OFlags::RDONLY
        .union(OFlags::DIRECTORY)
        .union(OFlags::CLOEXEC);
    let mut n = 0;
    let Ok(proc_fd) = rustix::fs::open("/proc", DIR, Mode::empty()) else {
        return 0;
    };
    let Ok(mut procs) = Dir::read_from(&proc_fd) else {
        return 0;
    };
    let mut path = Vec::with_capacity(32);
    while let Some(Ok(p)) = procs.read() {
        let pid = p.file_name().to_bytes();
        if pid.is_empty() || !pid.iter().all(u8::is_ascii_digit) {
            continue;
        }
        let at = |path: &mut Vec<u8>, sub: &[u8]| {
            path.clear();
            path.extend_from_slice(pid);
            path.extend_from_slice(sub);
            rustix::fs::openat(&proc_fd, &path[..], DIR, Mode::empty())
        };
        let Ok(mut fds) = at(&mut path, b"/fd").and_then(Dir::new) else {
            continue;
        };
        let Ok(info) = at(&mut path, b"/fdinfo") else {
            continue;
        };
        while let Some(Ok(fd)) = fds.read() {
            if fd.file_name().to_bytes().starts_with(b".") {
                continue;
            }
            let flags = OFlags::RDONLY | OFlags::CLOEXEC;
            if let Ok(f) = rustix::fs::openat(&info, fd.file_name(), flags, Mode::empty())
                && rustix::io::read(&f, &mut *buf).is_ok()
            {
                n += 1;
            }
        }
    }
    n
}

fn scan_once() -> Report {
    scan_skipping(scan::Skip::default())
}

/// The scan with some sources left out (`drmtool buffers --skip`).
fn scan_skipping(skip: scan::Skip) -> Report {
    match scan::scan(&Options {
        skip,
        ..Default::default()
    }) {
        Ok(r) => r,
        Err(e) => panic!("scan: {e}"),
    }
}

/// Every source the floor does not read skipped: `maps`, debugfs and kcmp.
const FDINFO_ONLY: scan::Skip = scan::Skip {
    maps: true,
    debugfs: true,
    kcmp: true,
};

/// The paired pass's scans without one source each (`BUFBENCH_ABLATION=1`), and with all
/// three left out (always).
fn skip_variants() -> Vec<(&'static str, scan::Skip)> {
    let none = scan::Skip::default();
    let mut v = Vec::new();
    if std::env::var_os("BUFBENCH_ABLATION").is_some_and(|a| a == "1") {
        v.push(("skip_kcmp", scan::Skip { kcmp: true, ..none }));
        v.push(("skip_maps", scan::Skip { maps: true, ..none }));
        v.push((
            "skip_debugfs",
            scan::Skip {
                debugfs: true,
                ..none
            },
        ));
    }
    v.push(("fdinfo_only", FDINFO_ONLY));
    v
}

/// `drmtool pick -n 1 --format json` as a job's launcher runs it (the GPU ordering, a scan,
/// the ranking, the lease files), its output to a sink.
fn pick_once() {
    let argv = ["drmtool", "pick", "-n", "1", "--format", "json"].map(std::ffi::OsString::from);
    black_box(drmtool::cli::main_with(argv, &mut std::io::sink()));
}

/// `drmtool topo --json` (issue 30's cost against one scan): the ordering, every GPU's
/// place, the NICs and disks, the NUMA table.
fn topo_once() {
    let argv = ["drmtool", "topo", "--json"].map(std::ffi::OsString::from);
    black_box(drmtool::cli::main_with(argv, &mut std::io::sink()));
}

/// `drmtool pick -n 1 --near numa:0 --format json`: a pick with the place resolved and
/// every GPU classed to it.
fn pick_near_once() {
    let argv = [
        "drmtool", "pick", "-n", "1", "--near", "numa:0", "--format", "json",
    ]
    .map(std::ffi::OsString::from);
    black_box(drmtool::cli::main_with(argv, &mut std::io::sink()));
}

/// One refresh of `drmtool top` as its loop runs it (issue 31: a refresh costs one scan):
/// a sample (the scan, the leases, each process's command line and user) turned into a
/// frame against the previous one.
fn top_refresher() -> impl FnMut() {
    let gpus = drmtool::gpu::gpus().unwrap_or_default();
    let mut sampler = drmtool::top::Sampler::new(Options::default(), gpus, None);
    let mut model = drmtool::top::Model::new();
    move || {
        let s = sampler.sample().expect("a top sample");
        black_box(model.update(s));
    }
}

/// `drmtool export`'s collector as a scrape every 15 s would run it (min interval 0, so
/// every call scans), per cgroup; its counter state persists across calls.
fn exporter() -> Exporter {
    Exporter::new(Config {
        scan: Options::default(),
        per: Per::Cgroup,
        client_names: false,
        min_interval: Duration::ZERO,
    })
}

/// `drmtool buffers --json`, output to a sink.
fn scan_json() {
    let args = ["drmtool", "buffers", "--json"].map(std::ffi::OsString::from);
    let code = drmtool::cli::main_with(args, &mut std::io::sink());
    assert_eq!(code, ExitCode::SUCCESS, "drmtool buffers --json failed");
}

/// `VmHWM` of this process, KiB.
fn vm_hwm() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// In the re-run for memory: `VmHWM` before and after `BUFBENCH_SCAN_ONCE` scans (one
/// when it is not a number), as `<before> <after> <clients>`.
fn scan_once_child(times: &str) -> Result<(), String> {
    let before = vm_hwm().ok_or("no VmHWM")?;
    let mut clients = 0;
    // `BUFBENCH_SCAN_ONCE_SKIP=1`: the fdinfo-only scan (for a profile of it).
    let skip = if std::env::var_os("BUFBENCH_SCAN_ONCE_SKIP").is_some_and(|v| v == "1") {
        FDINFO_ONLY
    } else {
        scan::Skip::default()
    };
    let n = times.parse::<u32>().unwrap_or(1).max(1);
    if std::env::var_os(SCRAPE_ENV).is_some_and(|v| v == "1") {
        // An exporter's steady state: its counter state and two cached encodings.
        let mut exp = exporter();
        for _ in 0..n {
            clients = black_box(exp.scrape(Format::OpenMetrics, Instant::now())).len();
        }
    } else {
        for _ in 0..n {
            clients = black_box(scan_skipping(skip)).clients.len();
        }
    }
    let after = vm_hwm().ok_or("no VmHWM")?;
    println!("{before} {after} {clients}");
    Ok(())
}

/// `BUFBENCH_SCAN_ONCE_EXPORT=1`: the re-run scrapes with an exporter instead of scanning.
const SCRAPE_ENV: &str = "BUFBENCH_SCAN_ONCE_EXPORT";

/// Runs one scan in a fresh process of this binary; `(VmHWM before, after)` in KiB.
fn peak_memory() -> Result<(u64, u64), String> {
    peak_memory_of(false)
}

/// [`peak_memory`], or with `export` an exporter's four scrapes.
fn peak_memory_of(export: bool) -> Result<(u64, u64), String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    // `BUFBENCH_WRAP` (a shell prefix such as `strace -c -o /dev/stderr`) runs the scan
    // under a tool; `BUFBENCH_SCAN_ONCE_TIMES` repeats it there (for a profiler).
    let mut cmd = match std::env::var("BUFBENCH_WRAP") {
        Ok(w) if !w.is_empty() => {
            let mut c = Command::new("/bin/sh");
            c.arg("-c").arg(format!("{w} \"$0\"")).arg(&exe);
            c
        }
        _ => Command::new(&exe),
    };
    let times = if export {
        "4".into()
    } else {
        std::env::var("BUFBENCH_SCAN_ONCE_TIMES").unwrap_or_else(|_| "1".into())
    };
    let out = cmd
        .env(SCAN_ONCE_ENV, times)
        .env(SCRAPE_ENV, if export { "1" } else { "0" })
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("scan-once run: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Vec<u64> = text
        .split_whitespace()
        .filter_map(|t| t.parse().ok())
        .collect();
    match (out.status.success(), v.as_slice()) {
        (true, [b, a, _]) => Ok((*b, *a)),
        _ => Err(format!("scan-once run: {} {text:?}", out.status)),
    }
}

// ---- the run ---------------------------------------------------------------------------

/// The sizes in fds.
fn sizes() -> Result<Vec<usize>, String> {
    match std::env::var("BUFBENCH_SIZES") {
        Ok(s) => s
            .split(',')
            .map(|t| {
                t.trim()
                    .parse()
                    .map_err(|_| format!("BUFBENCH_SIZES: {t:?}"))
            })
            .collect(),
        Err(_) => Ok(vec![100, 1000, 5000]),
    }
}

fn paired_secs() -> f64 {
    std::env::var("BUFBENCH_PAIRED_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10.0)
}

/// The primary nodes of the drivers the holders open: `BUFBENCH_DRIVERS` (comma
/// separated), by default vkms and vgem. The last one must make dumb buffers and export them.
fn nodes() -> Result<Vec<PathBuf>, String> {
    let all = drm_gem::enumerate().map_err(|e| format!("no DRM nodes: {e:?}"))?;
    let drivers = std::env::var("BUFBENCH_DRIVERS").unwrap_or_else(|_| "vkms,vgem".into());
    drivers
        .split(',')
        .map(|d| {
            all.iter()
                .find(|n| n.kind == NodeKind::Primary && n.driver.as_deref() == Some(d.trim()))
                .map(|n| n.path.clone())
                .ok_or_else(|| format!("no {d} primary node"))
        })
        .collect()
}

/// One size's figures.
struct Row {
    fds: usize,
    procs: usize,
    paired: Option<Paired>,
    hwm: (u64, u64),
}

fn median(p: &Paired, f: &str) -> Option<f64> {
    let mut t = p.times.iter().find(|(n, _)| *n == f)?.1.clone();
    t.sort_by(f64::total_cmp);
    paired::quantile(&t, 0.5)
}

/// `median [q1, q3]` of the per-round ratios of `a` to the floor, or `-` when not run.
fn ratio_cell(r: &Row, a: &str) -> String {
    ratio_to(r, a, "floor")
}

/// `median [q1, q3]` of the per-round ratios of `a` to `b`, or `-` when not run.
fn ratio_to(r: &Row, a: &str, b: &str) -> String {
    r.paired
        .as_ref()
        .and_then(|p| p.ratios(a, b))
        .map_or("-".into(), |q| {
            let g = |x| paired::quantile(&q, x).map_or("-".into(), |v| format!("{v:.2}"));
            format!("{} [{}, {}]", g(0.5), g(0.25), g(0.75))
        })
}

fn print_table(rows: &[Row]) {
    println!(
        "\nbuffers: paired pass, medians of per-round times (ms); ratio = median of per-round ratios [q1, q3]"
    );
    println!(
        "| fds | processes | floor ms | scan ms | scan --json ms | export scrape ms | pick ms | topo ms | pick --near ms | top refresh ms | scan/floor | json/floor | scrape/json | pick/json | topo/json | pick --near/json | top/scan | floor us/fd | scan us/fd | scan peak KiB (VmHWM after; before) |"
    );
    println!(
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|---|---|---|---:|---:|---|"
    );
    for r in rows {
        let ms = |f: &str| {
            r.paired
                .as_ref()
                .and_then(|p| median(p, f))
                .map_or("-".into(), |v| format!("{:.1}", v / 1e6))
        };
        let per_fd = |f: &str| {
            r.paired
                .as_ref()
                .and_then(|p| median(p, f))
                .map_or("-".into(), |v| format!("{:.1}", v / 1e3 / r.fds as f64))
        };
        let ratio = |a: &str| ratio_cell(r, a);
        let scrape_json = ratio_to(r, "scrape", "scan_json");
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}; {} |",
            r.fds,
            r.procs,
            ms("floor"),
            ms("scan"),
            ms("scan_json"),
            ms("scrape"),
            ms("pick"),
            ms("topo"),
            ms("pick_near"),
            ms("top"),
            ratio("scan"),
            ratio("scan_json"),
            scrape_json,
            ratio_to(r, "pick", "scan_json"),
            ratio_to(r, "topo", "scan_json"),
            ratio_to(r, "pick_near", "scan_json"),
            ratio_to(r, "top", "scan"),
            per_fd("floor"),
            per_fd("scan"),
            r.hwm.1,
            r.hwm.0
        );
    }
    println!(
        "\nbuffers: what each source costs (paired pass; ratio to the floor, median [q1, q3]; `-` = not run, BUFBENCH_ABLATION=1 runs the single skips)"
    );
    println!(
        "| fds | scan/floor | --skip kcmp | --skip maps | --skip debugfs | fdinfo only (all three skipped) | fdinfo only ms |"
    );
    println!("|---:|---|---|---|---|---|---:|");
    for r in rows {
        let ratio = |a: &str| ratio_cell(r, a);
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.fds,
            ratio("scan"),
            ratio("skip_kcmp"),
            ratio("skip_maps"),
            ratio("skip_debugfs"),
            ratio("fdinfo_only"),
            r.paired
                .as_ref()
                .and_then(|p| median(p, "fdinfo_only"))
                .map_or("-".into(), |v| format!("{:.1}", v / 1e6)),
        );
    }
    if let Some(p) = rows.iter().find_map(|r| r.paired.as_ref()) {
        println!(
            "(rounds x calls of the last size: {} x {})",
            p.rounds, p.calls
        );
    }
}

fn one_size(c: &mut Criterion, nodes: &[PathBuf], fds: usize, bench: bool) -> Result<Row, String> {
    let t0 = Instant::now();
    let rig = Rig::spawn(nodes, fds)?;
    println!(
        "buffers: {} holders with {fds} DRM fds and {} dma-bufs ready in {:.1} s",
        rig.expect.processes,
        rig.expect.dmabufs,
        t0.elapsed().as_secs_f64()
    );
    let mut buf = vec![0u8; 8192];
    for _ in 0..2 {
        rig.check(&scan_once())?;
        rig.check_fds(&scan_skipping(FDINFO_ONLY))?;
        let n = floor(&mut buf);
        if n < fds {
            return Err(format!("the floor read {n} fdinfo files, fewer than {fds}"));
        }
    }
    scan_json();
    let hwm = peak_memory()?;
    println!(
        "buffers: the scan found all {fds} fds; peak memory of one scan {} KiB (VmHWM; {} before it)",
        hwm.1, hwm.0
    );
    let ehwm = peak_memory_of(true)?;
    println!(
        "buffers: peak memory of an exporter after four scrapes {} KiB (VmHWM; {} before them)",
        ehwm.1, ehwm.0
    );
    let mut row = Row {
        fds,
        procs: rig.expect.processes,
        paired: None,
        hwm,
    };
    if !bench {
        return Ok(row);
    }
    {
        let mut g = c.benchmark_group(format!("buffers/{fds}"));
        g.sampling_mode(SamplingMode::Flat).sample_size(10);
        g.bench_function("floor", |b| b.iter(|| black_box(floor(&mut buf))));
        g.bench_function("scan", |b| b.iter(|| black_box(scan_once())));
        g.bench_function("scan_json", |b| b.iter(scan_json));
        g.bench_function("pick", |b| b.iter(pick_once));
        g.bench_function("topo", |b| b.iter(topo_once));
        g.bench_function("pick_near", |b| b.iter(pick_near_once));
        let mut top = top_refresher();
        g.bench_function("top", |b| b.iter(&mut top));
        let mut exp = exporter();
        g.bench_function("scrape", |b| {
            b.iter(|| black_box(exp.scrape(Format::OpenMetrics, Instant::now())))
        });
        g.finish();
    }
    let mut exp = exporter();
    let budget = Duration::from_secs_f64(paired_secs());
    let mut ops: Vec<Op<'_>> = vec![
        (
            "floor",
            Box::new(|| {
                black_box(floor(&mut buf));
            }),
        ),
        ("scan", Box::new(|| drop(black_box(scan_once())))),
        ("scan_json", Box::new(scan_json)),
        ("pick", Box::new(pick_once)),
        ("topo", Box::new(topo_once)),
        ("pick_near", Box::new(pick_near_once)),
        ("top", Box::new(top_refresher())),
        (
            "scrape",
            Box::new(move || drop(black_box(exp.scrape(Format::OpenMetrics, Instant::now())))),
        ),
    ];
    for (name, skip) in skip_variants() {
        ops.push((name, Box::new(move || drop(black_box(scan_skipping(skip))))));
    }
    row.paired = Some(paired::run(&format!("buffers/{fds}"), &mut ops, budget));
    drop(ops);
    // Still all there after the timing.
    rig.check(&scan_once())?;
    Ok(row)
}

fn run(args: &[String]) -> Result<(), String> {
    let nodes = match nodes() {
        Ok(n) => n,
        Err(e) if strict() => {
            return Err(format!(
                "{e} (a vm guest or KERNEL_TESTS_STRICT=1 must have vkms and vgem)"
            ));
        }
        Err(e) => {
            println!("SKIP: the buffers benchmark needs vkms and vgem ({e})");
            return Ok(());
        }
    };
    let bench = args.iter().any(|a| a == "--bench");
    let mut sizes = sizes()?;
    if !bench {
        sizes.truncate(1);
    }
    let mut c = Criterion::default()
        .output_directory(Path::new(
            &std::env::var("CRITERION_HOME").unwrap_or_else(|_| "/tmp/criterion".into()),
        ))
        .configure_from_args();
    let mut rows = Vec::new();
    for fds in sizes {
        rows.push(one_size(&mut c, &nodes, fds, bench)?);
    }
    if bench {
        c.final_summary();
    }
    print_table(&rows);
    Ok(())
}

fn main() -> ExitCode {
    let r = if let Ok(spec) = std::env::var(HOLD_ENV) {
        hold(&spec)
    } else if let Ok(times) = std::env::var(SCAN_ONCE_ENV) {
        scan_once_child(&times)
    } else {
        let args: Vec<String> = std::env::args().collect();
        run(&args)
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("buffers bench: FAIL: {e}");
            ExitCode::FAILURE
        }
    }
}
