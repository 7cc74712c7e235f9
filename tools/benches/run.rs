//! `drmtool run --gpu vgem -- true` against a plain exec of `true`, in a guest: the
//! start-up cost of the isolation (a cgroup made and removed, the device program loaded
//! and attached, drmtool started again for the job's side, a mount namespace with a tmpfs
//! /dev/dri and its nodes, then the exec), as a criterion group `run` (`exec`, `run`) and an
//! interleaved paired pass (`RUNBENCH_PAIRED_SECS`, default 10) whose per-round ratio
//! run/exec and absolute medians are printed as a table (tools/BENCHMARKS.md).
//!
//! The job's side is this binary run again: `main` hands over to
//! `drmtool::isolate::run::child_main` when drmtool's job variable is set, as the drmtool
//! binary does. Without vgem it prints SKIP and exits 0; inside a `vm` guest (or with
//! `KERNEL_TESTS_STRICT=1`) that is a failure. Timings never decide the exit status; a
//! command that does not exit 0 fails the bench.
#![deny(unsafe_code)]

#[allow(dead_code)]
#[path = "../../drm-gem/benches/support/paired.rs"]
mod paired;

use criterion::Criterion;
use drmtool::gpu::GpuSpec;
use drmtool::isolate::run::{self, RunRequest};
use std::process::ExitCode;
use std::time::Duration;

fn exec_true() -> Result<(), String> {
    let st = std::process::Command::new("true")
        .status()
        .map_err(|e| e.to_string())?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("true: {st}"))
    }
}

fn run_true(req: &RunRequest) -> Result<(), String> {
    match run::run(req, &mut std::io::sink()) {
        Ok(0) => Ok(()),
        Ok(c) => Err(format!("drmtool run exited {c}")),
        Err(e) => Err(e.to_string()),
    }
}

fn main() -> ExitCode {
    let strict =
        std::env::var_os("VM_GUEST").is_some() || std::env::var_os("KERNEL_TESTS_STRICT").is_some();
    let has_vgem = drm_gem::enumerate()
        .map(|n| n.iter().any(|n| n.driver.as_deref() == Some("vgem")))
        .unwrap_or(false);
    if !has_vgem {
        eprintln!("SKIP run bench: no vgem node");
        return if strict {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        };
    }
    // A root job (--as-root): the whole start-up path, namespaces, clone3 into the cgroup,
    // capability drop, lease, without a user lookup.
    let req = RunRequest {
        gpus: vec![GpuSpec::Driver("vgem".into())],
        argv: vec!["true".into()],
        as_root: true,
        caller: Some(drmtool::isolate::who::Caller { uid: 0, sudo: None }),
        ..Default::default()
    };
    // The check before any timing: both succeed.
    if let Err(e) = exec_true().and_then(|()| run_true(&req)) {
        eprintln!("run bench: {e}");
        return ExitCode::FAILURE;
    }
    if !std::env::args().any(|a| a == "--bench") {
        println!("run bench: checks passed (no --bench: no timing)");
        return ExitCode::SUCCESS;
    }
    let mut c = Criterion::default().configure_from_args();
    let mut g = c.benchmark_group("run");
    g.bench_function("exec", |b| b.iter(|| exec_true().unwrap()));
    g.bench_function("run", |b| b.iter(|| run_true(&req).unwrap()));
    g.finish();
    let secs = std::env::var("RUNBENCH_PAIRED_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10.0);
    let mut ops = vec![
        paired::op("exec", exec_true),
        paired::op("run", || run_true(&req)),
    ];
    let p = paired::run("run", &mut ops, Duration::from_secs_f64(secs));
    let med = |f: &str| {
        let mut t = p
            .times
            .iter()
            .find(|(n, _)| *n == f)
            .map(|(_, t)| t.clone())
            .unwrap_or_default();
        t.sort_by(f64::total_cmp);
        paired::quantile(&t, 0.5).map_or("-".into(), |v| format!("{:.2}", v / 1e6))
    };
    let ratio = p.ratios("run", "exec").map_or("-".into(), |q| {
        let g = |x| paired::quantile(&q, x).map_or("-".into(), |v| format!("{v:.2}"));
        format!("{} [{}, {}]", g(0.5), g(0.25), g(0.75))
    });
    println!(
        "\nrun: paired pass ({} rounds, {} calls per round); medians of per-round times",
        p.rounds, p.calls
    );
    println!("| exec ms | run ms | run/exec |");
    println!("|---:|---:|---|");
    println!("| {} | {} | {} |", med("exec"), med("run"), ratio);
    ExitCode::SUCCESS
}
