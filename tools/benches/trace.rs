//! `drmtool trace record`'s overhead beside trace-cmd's, in a guest whose kernel has event
//! tracing: a workload of vgem fences (attach + signal, `TRACEBENCH_FENCES` each round,
//! default 2,000), one of vkms page flips with events (`TRACEBENCH_FLIPS`, default 20) and,
//! where the kernel has sw_sync, one sw_sync timeline of `TRACEBENCH_SWSYNC` fences (default
//! 500: each is a sync_file fd, held until the end, under the fd limit) advanced one step at a
//! time with no sleep. Each is timed without a recording, while `drmtool::trace::record`
//! records its tracepoints (fence; fence and vblank for the flips) in another thread into a
//! JSON file as `trace record` writes it, once through ftrace (a tracefs instance, as
//! trace-cmd) and once through perf, and while Debian's `trace-cmd record` records the same
//! tracepoint systems (`-e dma_fence`, plus `-e drm` for the flips) where it is installed,
//! interleaved for `TRACEBENCH_ROUNDS` rounds (default 5). Printed: the medians, the ratios
//! to the plain run (per-round ratios' median and range), the events recorded per second of
//! workload and the events lost.
//!
//! Then the churn: `TRACEBENCH_CHURN` rounds (default 20,000) of (create a sw_sync fence,
//! signal it, close it), no sleep, under a whole `drmtool trace record --events fence`
//! process (this binary run as drmtool; ftrace and perf) and under `trace-cmd record -e
//! dma_fence`, each under GNU time: wall time, peak RSS, events kept and lost; and drmtool
//! again over 10x the rounds, to show the peak RSS does not grow with the recording.
//!
//! Without tracefs, vgem or vkms it prints SKIP and exits 0; in a `vm` guest (or with
//! `KERNEL_TESTS_STRICT=1`) that is a failure. Timings never decide the exit status.
#![deny(unsafe_code)]

use drmtool::trace::Category;
use drmtool::trace::record::{self, Backend, Options};
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

/// Runs `work` while a recording of `cats` through `backend` runs in another thread into a
/// JSON trace file; returns the workload's time, the events recorded and the events lost.
fn traced(backend: Backend, cats: &[Category], work: &dyn Fn()) -> (Duration, u64, u64) {
    use drmtool::trace::chrome::{JsonStream, TraceBuilder};
    let stop = Arc::new(AtomicBool::new(false));
    let mut opts = Options::new(cats.to_vec());
    opts.explicit = true;
    opts.memory_interval = None;
    opts.stop = Some(stop.clone());
    opts.backend = backend;
    let path = format!("/tmp/tracebench-{}.json", std::process::id());
    let h = std::thread::spawn(move || {
        let f = std::io::BufWriter::with_capacity(256 << 10, std::fs::File::create(&path).unwrap());
        let mut b = TraceBuilder::new(JsonStream::new(f).unwrap(), &Default::default());
        let rec = record::record_into(&opts, &mut b).expect("a recording");
        let kept: u64 = b.counts().values().sum();
        b.finish(&rec, "bench", &[]).expect("written");
        let _ = std::fs::remove_file(&path);
        (kept, rec.lost)
    });
    // The recorder's rings are open and enabled well within this.
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    work();
    let dt = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    let (kept, lost) = h.join().unwrap();
    (dt, kept, lost)
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
    if let Some(n) = std::env::var_os("TRACEBENCH_CHURN_ONLY") {
        let n = n.to_str().and_then(|n| n.parse().ok()).expect("a count");
        let t0 = Instant::now();
        drmtool::sample::workload::sw_sync_churn(n).expect("sw_sync churn");
        eprintln!("tracebench-work-ms {:.1}", t0.elapsed().as_secs_f64() * 1e3);
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
        "\n| workload | plain ms | drmtool ftrace ms | ftrace/plain | drmtool perf ms | perf/plain | trace-cmd ms | trace-cmd/plain | events/s (ftrace) | lost (ftrace, perf) |\n|---|---:|---:|---|---:|---|---:|---|---:|---:|"
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
        row(name, cats, systems, work.as_ref(), rounds, has_trace_cmd);
    }
    if has_sw_sync {
        churn(env_or("TRACEBENCH_CHURN", 20_000), has_trace_cmd)
    } else {
        ExitCode::SUCCESS
    }
}

/// One row of the table: `rounds` interleaved rounds of plain, ftrace, perf, trace-cmd.
fn row(
    name: &str,
    cats: &[Category],
    systems: &[&str],
    work: &dyn Fn(),
    rounds: u64,
    tc_too: bool,
) {
    let (mut plain, mut ft, mut ft_ratio, mut pf, mut pf_ratio) =
        (vec![], vec![], vec![], vec![], vec![]);
    let (mut tc, mut tc_ratio, mut rate) = (vec![], vec![], vec![]);
    let (mut lost_ft, mut lost_pf) = (0, 0);
    for _ in 0..rounds {
        let p = timed(work).as_secs_f64() * 1e3;
        plain.push(p);
        let (t, ev, l) = traced(Backend::Ftrace, cats, work);
        let t = t.as_secs_f64() * 1e3;
        ft.push(t);
        ft_ratio.push(t / p);
        rate.push(ev as f64 / (t / 1e3));
        lost_ft += l;
        let (t, _, l) = traced(Backend::Perf, cats, work);
        let t = t.as_secs_f64() * 1e3;
        pf.push(t);
        pf_ratio.push(t / p);
        lost_pf += l;
        if tc_too {
            let c = trace_cmd_traced(systems, work).as_secs_f64() * 1e3;
            tc.push(c);
            tc_ratio.push(c / p);
        }
    }
    println!(
        "| {name} | {} | {} | {} | {} | {} | {} | {} | {:.0} | {lost_ft}, {lost_pf} |",
        ms_cell(&mut plain),
        ms_cell(&mut ft),
        ratio_cell(&mut ft_ratio),
        ms_cell(&mut pf),
        ratio_cell(&mut pf_ratio),
        ms_cell(&mut tc),
        ratio_cell(&mut tc_ratio),
        median(&mut rate)
    );
}

/// The workload's own time, as it printed it (ms).
fn work_ms(err: &str) -> f64 {
    err.lines()
        .find_map(|l| l.strip_prefix("tracebench-work-ms "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(f64::NAN)
}

/// `otherData` of a streamed JSON trace, read from the file's end (the trace itself may be
/// larger than this guest's memory as a parsed value).
fn other_data(path: &str) -> serde_json::Value {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return serde_json::Value::Null;
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(256 << 10)));
    let mut tail = String::new();
    let _ = f.read_to_string(&mut tail);
    let key = "\"otherData\":";
    tail.rfind(key)
        .and_then(|at| {
            let rest = tail[at + key.len()..].trim_end();
            serde_json::from_str(rest.strip_suffix('}')?).ok()
        })
        .unwrap_or_default()
}

/// Runs `argv` under GNU time; returns (exit ok, wall s, peak RSS KiB, stderr).
fn under_time(argv: &[String], env: &[(&str, String)]) -> (bool, f64, u64, String) {
    let mut c = std::process::Command::new("/usr/bin/time");
    c.args(["-f", "tracebench-time %e %M"]).args(argv);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("/usr/bin/time");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let (wall, rss) = err
        .lines()
        .find_map(|l| l.strip_prefix("tracebench-time "))
        .and_then(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?.parse().ok()?, w.next()?.parse().ok()?))
        })
        .unwrap_or((0.0, 0));
    (out.status.success(), wall, rss, err)
}

/// The churn under whole recorder processes (see the module doc).
fn churn(n: u64, tc_too: bool) -> ExitCode {
    let me = std::env::current_exe().unwrap().display().to_string();
    let out = format!("/tmp/tracebench-churn-{}.json", std::process::id());
    let mut ok = true;
    println!(
        "\n| recorder | fences | workload ms | recorder wall s | peak RSS KiB | events kept | lost |\n|---|---:|---:|---:|---:|---:|---:|"
    );
    let (p_ok, p_wall, p_rss, p_err) = under_time(
        std::slice::from_ref(&me),
        &[("TRACEBENCH_CHURN_ONLY", n.to_string())],
    );
    ok &= p_ok;
    println!(
        "| none (plain) | {n} | {:.1} | {p_wall:.2} | {p_rss} | - | - |",
        work_ms(&p_err)
    );
    for (backend, rounds) in [("ftrace", n), ("perf", n), ("ftrace", 10 * n)] {
        let argv: Vec<String> = [
            me.as_str(),
            "trace",
            "record",
            "--events",
            "fence",
            "--memory-interval",
            "0",
            "--backend",
            backend,
            "-o",
            &out,
            "--",
            "env",
            "-u",
            "TRACEBENCH_CLI",
            &me,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let (r_ok, wall, rss, err) = under_time(
            &argv,
            &[
                ("TRACEBENCH_CLI", "1".into()),
                ("TRACEBENCH_CHURN_ONLY", rounds.to_string()),
            ],
        );
        ok &= r_ok;
        let od = other_data(&out);
        let kept: u64 = od["events"]
            .as_object()
            .map(|m| m.values().filter_map(|v| v.as_u64()).sum())
            .unwrap_or(0);
        let lost = od["lost"].as_u64().unwrap_or(u64::MAX);
        let _ = std::fs::remove_file(&out);
        println!(
            "| drmtool {backend} | {rounds} | {:.1} | {wall:.2} | {rss} | {kept} | {lost} |",
            work_ms(&err)
        );
    }
    if tc_too {
        let dat = format!("/tmp/tracebench-churn-{}.dat", std::process::id());
        let argv: Vec<String> = [TRACE_CMD, "record", "-e", "dma_fence", "-o", &dat, &me]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let (t_ok, wall, rss, err) = under_time(&argv, &[("TRACEBENCH_CHURN_ONLY", n.to_string())]);
        ok &= t_ok;
        // Its per-CPU summary: "overrun: N" and "dropped events: N" lines (0 when not printed).
        let lost: u64 = err
            .lines()
            .filter_map(|l| {
                let l = l.trim();
                l.strip_prefix("overrun:")
                    .or_else(|| l.strip_prefix("dropped events:"))
                    .and_then(|v| v.trim().parse::<u64>().ok())
            })
            .sum();
        let rep = std::process::Command::new(TRACE_CMD)
            .args(["report", "-i", &dat])
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .filter(|l| l.contains(" dma_fence_"))
                    .count()
            })
            .unwrap_or(0);
        let _ = std::fs::remove_file(&dat);
        println!(
            "| trace-cmd | {n} | {:.1} | {wall:.2} | {rss} | {rep} | {lost} |",
            work_ms(&err)
        );
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
