//! `drmtool run --gpu vgem -- true` against a plain exec of `true`, in a guest: the
//! start-up cost of the isolation (a lease, a cgroup made and removed, the device program
//! loaded and attached, `clone3` of the job's init into the cgroup with new pid and mount
//! namespaces, the private /dev with its nodes, the capability drop, then the exec), as a
//! criterion group `run` (`exec`, `run`) and an interleaved paired pass
//! (`RUNBENCH_PAIRED_SECS`, default 10) whose per-round ratio run/exec and absolute medians
//! are printed as a table (tools/BENCHMARKS.md).
//!
//! The paired pass also interleaves `run-timed`, the same run with its start-up marks on
//! (`drmtool::isolate::run::run_timed`): the median of each phase over those runs, its share
//! of the median total, and run-timed/run (what the marks cost) follow the first table.
//! Then the whole command line, when cargo built the drmtool binary beside the bench: a
//! paired pass of `/bin/true`, `drmtool --version` (drmtool's own start and exit),
//! `drmtool run --as-root --gpu vgem -- /bin/true` and `drmtool run --user nobody --gpu
//! vgem -- /bin/true`, each a process started and waited for (`RUNBENCH_CLI_SECS`, default
//! twice the paired pass's: a round is four processes).
//!
//! Without vgem it prints SKIP and exits 0; inside a `vm` guest (or with
//! `KERNEL_TESTS_STRICT=1`) that is a failure. Timings never decide the exit status; a
//! command that does not exit 0, or a timed run without every mark, fails the bench.
#![deny(unsafe_code)]

#[allow(dead_code)]
#[path = "../../drm-gem/benches/support/paired.rs"]
mod paired;

use criterion::Criterion;
use drmtool::gpu::GpuSpec;
use drmtool::isolate::run::{self, Mark, RunRequest, StartTimes};
use std::cell::RefCell;
use std::process::{Command, ExitCode};
use std::time::Duration;

fn status_ok(cmd: &mut Command) -> Result<(), String> {
    let st = cmd.status().map_err(|e| e.to_string())?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?}: {st}"))
    }
}

fn exec_true() -> Result<(), String> {
    status_ok(&mut Command::new("true"))
}

fn run_true(req: &RunRequest, times: &mut StartTimes) -> Result<(), String> {
    match run::run_timed(req, &mut std::io::sink(), &mut |_| {}, times) {
        Ok(0) => Ok(()),
        Ok(c) => Err(format!("drmtool run exited {c}")),
        Err(e) => Err(e.to_string()),
    }
}

/// A timed run that reached every mark (the check before any timing: the job's side
/// reports through the error pipe).
fn check_marks(req: &RunRequest) -> Result<(), String> {
    let mut t = StartTimes::on();
    run_true(req, &mut t)?;
    let missing: Vec<Mark> = Mark::ALL
        .into_iter()
        .filter(|&m| t.at(m).is_none())
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("a timed run did not record {missing:?}"))
    }
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    paired::quantile(&v, 0.5)
}

fn ms(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{:.2}", v / 1e6))
}

/// `median [q1, q3]` of the sorted per-round ratios.
fn ratio_text(q: Option<Vec<f64>>) -> String {
    q.map_or("-".into(), |q| {
        let g = |x| paired::quantile(&q, x).map_or("-".into(), |v| format!("{v:.2}"));
        format!("{} [{}, {}]", g(0.5), g(0.25), g(0.75))
    })
}

fn med_of(p: &paired::Paired, f: &str) -> Option<f64> {
    median(
        p.times
            .iter()
            .find(|(n, _)| *n == f)
            .map(|(_, t)| t.clone())
            .unwrap_or_default(),
    )
}

/// The groups of the breakdown: the phases (by their end mark) each sums.
const GROUPS: [(&str, &[Mark]); 6] = [
    ("resolve + lease + plan", &[Mark::Leased, Mark::Planned]),
    (
        "cgroup (made, removed)",
        &[Mark::CgroupMade, Mark::CgroupRemoved],
    ),
    (
        "program load + attach + check",
        &[Mark::ProgramLoaded, Mark::Attached],
    ),
    (
        "namespaces (clone3 .. private /dev, command forked)",
        &[
            Mark::InitStarted,
            Mark::Go,
            Mark::Namespaces,
            Mark::Mounts,
            Mark::CommandStarted,
        ],
    ),
    (
        "capability drop (fds, caps, no_new_privs)",
        &[Mark::FdsClosed, Mark::Identity, Mark::ExecCalled],
    ),
    ("exec (kernel)", &[Mark::Execd]),
];

/// The breakdown table of the timed runs: each phase's median, its share of the median
/// total, then the groups.
fn print_breakdown(runs: &[StartTimes]) {
    let total = median(
        runs.iter()
            .filter_map(|t| t.total_ns().map(|n| n as f64))
            .collect(),
    );
    let share = |v: Option<f64>| match (v, total) {
        (Some(v), Some(t)) if t > 0.0 => format!("{:.1} %", 100.0 * v / t),
        _ => "-".into(),
    };
    let of = |marks: &[Mark]| {
        median(
            runs.iter()
                .map(|t| {
                    t.phases()
                        .iter()
                        .filter(|p| marks.contains(&p.to))
                        .map(|p| p.ns as f64)
                        .sum()
                })
                .collect(),
        )
    };
    println!(
        "\nrun: start-up breakdown ({} timed runs; median per phase, share of the median total)",
        runs.len()
    );
    println!("| phase (ends at) | ms | share |");
    println!("|---|---:|---:|");
    for m in Mark::ALL.into_iter().skip(1) {
        let v = of(&[m]);
        println!("| {} | {} | {} |", m.phase(), ms(v), share(v));
    }
    println!("| total | {} | 100 % |", ms(total));
    println!("\n| group | ms | share |");
    println!("|---|---:|---:|");
    for (name, marks) in GROUPS {
        let v = of(marks);
        println!("| {name} | {} | {} |", ms(v), share(v));
    }
}

/// The whole command line against `/bin/true`, each a process started and waited for.
fn cli_pass(drmtool: &str, secs: f64) -> Result<(), String> {
    let cmd = |user: &[&str]| {
        let mut c = Command::new(drmtool);
        c.arg("run")
            .args(user)
            .args(["--gpu", "vgem", "--", "/bin/true"]);
        c
    };
    let mut root = cmd(&["--as-root"]);
    let mut nobody = cmd(&["--user", "nobody"]);
    let mut plain = Command::new("/bin/true");
    // The floor of any command line: drmtool started, its arguments parsed, nothing run.
    let mut version = Command::new(drmtool);
    version.arg("--version").stdout(std::process::Stdio::null());
    status_ok(&mut root).and_then(|()| status_ok(&mut nobody))?;
    let mut ops = vec![
        paired::op("/bin/true", || status_ok(&mut plain)),
        paired::op("drmtool --version", || status_ok(&mut version)),
        paired::op("run --as-root", || status_ok(&mut root)),
        paired::op("run --user nobody", || status_ok(&mut nobody)),
    ];
    let p = paired::run("cli", &mut ops, Duration::from_secs_f64(secs));
    println!(
        "\nrun: the whole command line ({drmtool}), paired pass ({} rounds, {} calls per round)",
        p.rounds, p.calls
    );
    println!("| | median ms | / /bin/true (median [q1, q3] of per-round ratios) |");
    println!("|---|---:|---|");
    for f in [
        "/bin/true",
        "drmtool --version",
        "run --as-root",
        "run --user nobody",
    ] {
        println!(
            "| `{f}` | {} | {} |",
            ms(med_of(&p, f)),
            ratio_text(p.ratios(f, "/bin/true"))
        );
    }
    Ok(())
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
    // The check before any timing: both succeed, and a timed run records every mark.
    let untimed = || run_true(&req, &mut StartTimes::off());
    if let Err(e) = exec_true()
        .and_then(|()| untimed())
        .and_then(|()| check_marks(&req))
    {
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
    g.bench_function("run", |b| b.iter(|| untimed().unwrap()));
    g.finish();
    let secs = std::env::var("RUNBENCH_PAIRED_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10.0);
    let timed: RefCell<Vec<StartTimes>> = RefCell::new(Vec::new());
    let mut ops = vec![
        paired::op("exec", exec_true),
        paired::op("run", untimed),
        paired::op("run-timed", || {
            let mut t = StartTimes::on();
            run_true(&req, &mut t).map(|()| timed.borrow_mut().push(t))
        }),
    ];
    let p = paired::run("run", &mut ops, Duration::from_secs_f64(secs));
    drop(ops);
    println!(
        "\nrun: paired pass ({} rounds, {} calls per round); medians of per-round times",
        p.rounds, p.calls
    );
    println!("| exec ms | run ms | run/exec | run-timed ms | run-timed/run |");
    println!("|---:|---:|---|---:|---|");
    println!(
        "| {} | {} | {} | {} | {} |",
        ms(med_of(&p, "exec")),
        ms(med_of(&p, "run")),
        ratio_text(p.ratios("run", "exec")),
        ms(med_of(&p, "run-timed")),
        ratio_text(p.ratios("run-timed", "run")),
    );
    print_breakdown(&timed.borrow());
    let cli_secs = std::env::var("RUNBENCH_CLI_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0 * secs);
    match option_env!("CARGO_BIN_EXE_drmtool") {
        Some(d) if std::path::Path::new(d).is_file() => {
            if let Err(e) = cli_pass(d, cli_secs) {
                eprintln!("run bench: the command line: {e}");
                return ExitCode::FAILURE;
            }
        }
        _ => println!("\nrun: no drmtool binary beside the bench: the command line not timed"),
    }
    ExitCode::SUCCESS
}
