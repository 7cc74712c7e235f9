//! `drmtool trace record`'s overhead beside trace-cmd's, in a guest whose kernel has event
//! tracing: a workload of vgem fences (attach + signal, `TRACEBENCH_FENCES` each round,
//! default 2,000), one of vkms page flips with events (`TRACEBENCH_FLIPS`, default 20) and,
//! where the kernel has sw_sync, one sw_sync timeline of `TRACEBENCH_SWSYNC` fences (default
//! 500: each is a sync_file fd, held until the end, under the fd limit) advanced one step at a
//! time with no sleep. Each is timed without a recording, while
//! `drmtool::trace::record` records its tracepoints (fence; fence and vblank for the flips)
//! in another thread, and while Debian's `trace-cmd record` records the same tracepoint
//! systems (`-e dma_fence`, plus `-e drm` for the flips) where it is installed, interleaved
//! for `TRACEBENCH_ROUNDS` rounds (default 5). Printed: the medians, the ratios to the plain
//! run (per-round ratios' median and range), the events drmtool recorded per second of
//! workload and the events it lost, and the peak RSS of a `drmtool trace record` process
//! (this binary run as drmtool) over the fence workload.
//!
//! Without tracefs, vgem or vkms it prints SKIP and exits 0; in a `vm` guest (or with
//! `KERNEL_TESTS_STRICT=1`) that is a failure. Timings never decide the exit status.
#![deny(unsafe_code)]

use drmtool::trace::Category;
use drmtool::trace::record::{self, Options};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn env_or(k: &str, d: u64) -> u64 {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

fn fences(n: u64) {
    drmtool::sample::workload::vgem_fences(n).expect("vgem fences");
}

fn flips(n: u64) {
    drmtool::sample::workload::vkms_flips(n).expect("vkms flips");
}

fn sw_sync(n: u64) {
    let n = u32::try_from(n).expect("TRACEBENCH_SWSYNC fits a u32");
    drmtool::sample::workload::sw_sync_timeline(n, Duration::ZERO).expect("sw_sync timeline");
}

const TRACE_CMD: &str = "/usr/bin/trace-cmd";

/// Whether every event of tracefs system `system` is enabled (what `trace-cmd record -e
/// SYSTEM` turns on before it records).
fn system_enabled(system: &str) -> bool {
    let Some(root) = record::tracefs() else {
        return false;
    };
    std::fs::read_to_string(root.join("events").join(system).join("enable"))
        .is_ok_and(|v| v.trim() == "1")
}

/// Runs `work` while `trace-cmd record -e SYSTEM...` records into a scratch file; returns the
/// workload's time. trace-cmd is stopped with SIGINT, as a person stops it.
fn trace_cmd_traced(systems: &[&str], work: &dyn Fn()) -> Duration {
    let dat = format!("/tmp/tracebench-{}.dat", std::process::id());
    let mut cmd = std::process::Command::new(TRACE_CMD);
    cmd.args(["record", "-q", "-o", &dat]);
    for s in systems {
        cmd.args(["-e", s]);
    }
    let mut child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("trace-cmd record");
    let t_start = Instant::now();
    while !systems.iter().all(|s| system_enabled(s)) {
        assert!(
            t_start.elapsed() < Duration::from_secs(60),
            "trace-cmd record did not enable {systems:?} within 60 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Its recorders start after the events are enabled; give them the same head start as
    // drmtool's recorder gets.
    std::thread::sleep(Duration::from_millis(300));
    let dt = timed(work);
    let pid = rustix::process::Pid::from_child(&child);
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::INT);
    let st = child.wait().expect("trace-cmd record's exit");
    let _ = std::fs::remove_file(&dat);
    assert!(st.success(), "trace-cmd record: {st}");
    dt
}

fn ratio_cell(v: &mut [f64]) -> String {
    if v.is_empty() {
        return "-".into();
    }
    let (lo, hi) = (
        v.iter().copied().fold(f64::INFINITY, f64::min),
        v.iter().copied().fold(0.0, f64::max),
    );
    format!("{:.2} [{lo:.2}, {hi:.2}]", median(v))
}

fn ms_cell(v: &mut [f64]) -> String {
    if v.is_empty() {
        "-".into()
    } else {
        format!("{:.2}", median(v))
    }
}

/// Runs `work` while a recording of `cats` runs in another thread; returns the workload's
/// time, the events recorded and the events lost.
fn traced(cats: &[Category], work: &dyn Fn()) -> (Duration, usize, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let opts = Options {
        categories: cats.to_vec(),
        explicit: true,
        duration: None,
        command: Vec::new(),
        ring_pages: 128,
        memory_interval: None,
        stop: Some(stop.clone()),
    };
    let h = std::thread::spawn(move || record::record(&opts));
    // The recorder's rings are open and enabled well within this.
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    work();
    let dt = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    let rec = h.join().unwrap().unwrap();
    (dt, rec.events.len(), rec.lost)
}

fn timed(work: &dyn Fn()) -> Duration {
    let t0 = Instant::now();
    work();
    t0.elapsed()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> ExitCode {
    // This binary as drmtool (for the RSS figure): `TRACEBENCH_CLI=1 <bench> trace ...`.
    if std::env::var_os("TRACEBENCH_CLI").is_some() {
        let args = std::env::args_os().skip(1);
        let argv = std::iter::once("drmtool".into()).chain(args);
        let code = drmtool::cli::main_with(argv, &mut std::io::stdout());
        // This process's peak RSS, for the parent to print.
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        if let Some(l) = status.lines().find(|l| l.starts_with("VmHWM:")) {
            eprintln!("tracebench-rss: {}", l.trim_start_matches("VmHWM:").trim());
        }
        return code;
    }
    if std::env::var_os("TRACEBENCH_FENCES_ONLY").is_some() {
        fences(env_or("TRACEBENCH_FENCES", 2000));
        return ExitCode::SUCCESS;
    }
    let strict =
        std::env::var_os("VM_GUEST").is_some() || std::env::var_os("KERNEL_TESTS_STRICT").is_some();
    let have = |d: &str| {
        drm_gem::enumerate()
            .map(|n| n.iter().any(|n| n.driver.as_deref() == Some(d)))
            .unwrap_or(false)
    };
    if record::tracefs().is_none() || !have("vgem") || !have("vkms") {
        let missing_by_construction = std::env::var("VM_MISSING_FEATURES")
            .is_ok_and(|v| v.split(',').any(|f| f == "tracing"));
        eprintln!("SKIP trace bench: needs tracefs, vgem and vkms");
        return if strict && !missing_by_construction {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        };
    }
    let n_fences = env_or("TRACEBENCH_FENCES", 2000);
    let n_flips = env_or("TRACEBENCH_FLIPS", 20);
    let n_sw = env_or("TRACEBENCH_SWSYNC", 500);
    let rounds = env_or("TRACEBENCH_ROUNDS", 5).max(1);
    let has_sw_sync = drm_gem::SwSyncTimeline::open().is_ok();
    let has_trace_cmd = std::path::Path::new(TRACE_CMD).exists();
    if !has_sw_sync {
        println!("(no sw_sync on this kernel: the sw_sync row is left out)");
    }
    if !has_trace_cmd {
        println!("({TRACE_CMD} is not installed: its columns are '-')");
    }
    println!(
        "\n| workload | plain ms | drmtool ms | drmtool/plain | trace-cmd ms | trace-cmd/plain | events/s | lost |\n|---|---:|---:|---|---:|---|---:|---:|"
    );
    type Work = (String, Vec<Category>, Vec<&'static str>, Box<dyn Fn()>);
    let mut works: Vec<Work> = vec![
        (
            format!("{n_fences} vgem fences"),
            vec![Category::Fence],
            vec!["dma_fence"],
            Box::new(move || fences(n_fences)),
        ),
        (
            format!("{n_flips} vkms flips"),
            vec![Category::Fence, Category::Vblank],
            vec!["dma_fence", "drm"],
            Box::new(move || flips(n_flips)),
        ),
    ];
    if has_sw_sync {
        works.push((
            format!("{n_sw} sw_sync fences"),
            vec![Category::Fence],
            vec!["dma_fence"],
            Box::new(move || sw_sync(n_sw)),
        ));
    }
    for (name, cats, systems, work) in &works {
        let (mut plain, mut ours, mut ours_ratio, mut rate) = (vec![], vec![], vec![], vec![]);
        let (mut tc, mut tc_ratio) = (vec![], vec![]);
        let mut lost = 0;
        for _ in 0..rounds {
            let p = timed(work.as_ref()).as_secs_f64() * 1e3;
            let (t, ev, l) = traced(cats, work.as_ref());
            let t = t.as_secs_f64() * 1e3;
            plain.push(p);
            ours.push(t);
            ours_ratio.push(t / p);
            rate.push(ev as f64 / (t / 1e3));
            lost += l;
            if has_trace_cmd {
                let c = trace_cmd_traced(systems, work.as_ref()).as_secs_f64() * 1e3;
                tc.push(c);
                tc_ratio.push(c / p);
            }
        }
        println!(
            "| {name} | {} | {} | {} | {} | {} | {:.0} | {lost} |",
            ms_cell(&mut plain),
            ms_cell(&mut ours),
            ratio_cell(&mut ours_ratio),
            ms_cell(&mut tc),
            ratio_cell(&mut tc_ratio),
            median(&mut rate)
        );
    }
    // Peak RSS of a whole `drmtool trace record -- <fence workload>` process.
    let me = std::env::current_exe().unwrap();
    let out = format!("/tmp/tracebench-{}.json", std::process::id());
    let child = std::process::Command::new(&me)
        .env("TRACEBENCH_CLI", "1")
        .args(["trace", "record", "--events", "fence", "-o", &out, "--"])
        .args(["env", "-u", "TRACEBENCH_CLI"])
        .arg(&me)
        .env("TRACEBENCH_FENCES_ONLY", "1")
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&out);
    let err = String::from_utf8_lossy(&child.stderr);
    let rss = err
        .lines()
        .find_map(|l| l.strip_prefix("tracebench-rss: "))
        .unwrap_or("?");
    println!(
        "\ndrmtool trace record -- <{n_fences} vgem fences>: exit {}, peak RSS (VmHWM) {rss}",
        child.status
    );
    let st = child.status;
    if st.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
