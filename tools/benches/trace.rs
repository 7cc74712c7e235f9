//! `drmtool trace record`'s overhead, in a guest whose kernel has event tracing (the stock
//! lanes): a workload of vgem fences (attach + signal, `TRACEBENCH_FENCES` each round,
//! default 2,000) and one of vkms page flips with events (`TRACEBENCH_FLIPS`, default 20),
//! timed without a recording and while `drmtool::trace::record` records their tracepoints
//! (fence; vblank) in another thread, interleaved for `TRACEBENCH_ROUNDS` rounds (default
//! 5). Printed: the medians, the ratio traced/plain per workload (per-round ratios' median
//! and range), the events recorded per second of workload and the events lost, and the
//! peak RSS of a `drmtool trace record` process (this binary run as drmtool) over the
//! fence workload.
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
    let rounds = env_or("TRACEBENCH_ROUNDS", 5).max(1);
    println!(
        "\n| workload | plain ms | traced ms | traced/plain | events/s | lost |\n|---|---:|---:|---|---:|---:|"
    );
    type Work = (&'static str, Vec<Category>, Box<dyn Fn()>);
    let works: [Work; 2] = [
        (
            "vgem fences",
            vec![Category::Fence],
            Box::new(move || fences(n_fences)),
        ),
        (
            "vkms flips",
            vec![Category::Fence, Category::Vblank],
            Box::new(move || flips(n_flips)),
        ),
    ];
    for (name, cats, work) in &works {
        let (mut plain, mut trace, mut ratio, mut rate) = (vec![], vec![], vec![], vec![]);
        let mut lost = 0;
        for _ in 0..rounds {
            let p = timed(work.as_ref()).as_secs_f64() * 1e3;
            let (t, ev, l) = traced(cats, work.as_ref());
            let t = t.as_secs_f64() * 1e3;
            plain.push(p);
            trace.push(t);
            ratio.push(t / p);
            rate.push(ev as f64 / (t / 1e3));
            lost += l;
        }
        let (lo, hi) = (
            ratio.iter().copied().fold(f64::INFINITY, f64::min),
            ratio.iter().copied().fold(0.0, f64::max),
        );
        println!(
            "| {name} | {:.2} | {:.2} | {:.2} [{lo:.2}, {hi:.2}] | {:.0} | {lost} |",
            median(&mut plain),
            median(&mut trace),
            median(&mut ratio),
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
