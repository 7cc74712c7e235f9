//! User-space instructions per call, counted by valgrind's callgrind (`scripts/instructions`).
//!
//! Timing under TCG cannot resolve a few percent (see `drm-gem/BENCHMARKS.md`); instruction
//! counts do not move with the host's load. The same groups of operations the criterion
//! run times (`benches/peers.rs` hands them to a [`Groups`]) are handed to a [`Counter`]
//! instead, which, for each function, calls it a few times to warm it up, then runs it
//! `N1 = 1` and `N2` times inside [`callgrind_measured_loop`]. The binary runs under
//!
//! ```text
//! valgrind --tool=callgrind --callgrind-out-file=BASE \
//!     --zero-before='*::callgrind_measured_loop' --dump-after='*::callgrind_measured_loop' \
//!     peers --instructions BASE
//! ```
//!
//! so callgrind zeroes its counters when the loop is entered and writes a dump (`BASE.1`,
//! `BASE.2`, ... in call order) when it returns: each dump's `totals:` line is the
//! instructions of exactly that loop. `(I(N2) - I(N1)) / (N2 - N1)` cancels what a loop
//! costs once; the loop's own per-call cost (an empty function through the same wrapper,
//! `harness/empty`) is measured first and subtracted from every figure.

use super::paired::{Op, op};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Where the benchmark groups go: criterion and the paired pass (`peers.rs`'s `Runner`), or
/// the instruction counter.
pub(crate) trait Groups {
    /// One group: `bytes` of throughput per call, `flat`: each call is slow (milliseconds
    /// under TCG), `pair`: also run the paired pass. `ops[0]` is the group's reference.
    fn group(&mut self, name: &str, bytes: Option<u64>, mode: (bool, bool), ops: &mut [Op<'_>]);
}

/// The function callgrind's `--zero-before` and `--dump-after` name (matched as
/// `*::callgrind_measured_loop`; never inlined, so the symbol exists). valgrind 3.19 matched
/// nothing with a trailing `*` (`*callgrind_measured_loop*`), hence the leading one only.
#[inline(never)]
pub(crate) fn callgrind_measured_loop(op: &mut Op<'_>, n: u32) {
    for _ in 0..n {
        (op.1)();
    }
}

/// Calls of each function before the measured loops (lazy binding, first allocations).
const WARM_UP: u32 = 3;
/// The largest dump file read (a dump lists every function that ran in the loop).
const DUMP_MAX: u64 = 64 << 20;

/// One function's two loops.
#[derive(Debug)]
struct Row {
    group: String,
    function: &'static str,
    /// `(N, instructions of the loop of N calls)` for N1 and N2.
    loops: [(u32, u64); 2],
}

impl Row {
    /// Instructions per call, the loop's one-time costs cancelled.
    fn per_call(&self) -> f64 {
        let [(n1, i1), (n2, i2)] = self.loops;
        (i2 as f64 - i1 as f64) / f64::from(n2 - n1)
    }
}

/// Counts the instructions of each function of each group it is handed.
#[derive(Debug)]
pub(crate) struct Counter {
    base: PathBuf,
    dumps: u32,
    calls: u32,
    filter: Option<String>,
    rows: Vec<Row>,
    /// The first failure (a missing dump: not under callgrind); later groups are skipped.
    failed: Option<String>,
}

impl Counter {
    /// Dumps are read from `base.<k>`; `calls` is N2 (N1 is 1; flat groups use at most 3);
    /// `filter`, if any, is a substring of `group/function` (the harness row always runs).
    pub(crate) fn new(base: &Path, calls: u32, filter: Option<String>) -> Self {
        let mut c = Self {
            base: base.to_path_buf(),
            dumps: 0,
            calls: calls.max(2),
            filter: None,
            rows: Vec::new(),
            failed: None,
        };
        c.group(
            "harness",
            None,
            (false, false),
            &mut [op("empty", || Ok::<(), std::io::Error>(()))],
        );
        c.filter = filter;
        c
    }

    /// Runs `f` `n` times in the measured loop and returns the loop's instructions.
    fn measure(&mut self, f: &mut Op<'_>, n: u32) -> Result<u64, String> {
        callgrind_measured_loop(f, n);
        self.dumps += 1;
        let path = PathBuf::from(format!("{}.{}", self.base.display(), self.dumps));
        let text = read_bounded(&path).map_err(|e| {
            format!(
                "no callgrind dump {} ({e}): run this under valgrind --tool=callgrind with --callgrind-out-file={} --zero-before='*::callgrind_measured_loop' --dump-after='*::callgrind_measured_loop' (scripts/instructions)",
                path.display(),
                self.base.display()
            )
        })?;
        totals(&text).ok_or_else(|| format!("{}: no totals line", path.display()))
    }

    /// The first failure, if any.
    pub(crate) fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    fn per_call(&self, group: &str, function: &str) -> Option<f64> {
        let harness = self.rows.first().map_or(0.0, Row::per_call);
        self.rows
            .iter()
            .find(|r| r.group == group && r.function == function)
            .map(|r| r.per_call() - harness)
    }

    /// Prints the tables (markdown): the four peers per operation with the ratios, then
    /// every other function.
    pub(crate) fn print(&self, ops: &[&str], peers: &[&str; 4], head: &str) {
        let fmt = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
        let ratio = |a: Option<f64>, b: Option<f64>, ceiling: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => {
                let r = a / b;
                match ceiling {
                    Some(c) if r <= c => format!("{r:.3} ok"),
                    Some(_) => format!("{r:.3} OVER"),
                    None => format!("{r:.3}"),
                }
            }
            _ => "-".into(),
        };
        let [(n1, _), (n2, _)] = self.rows.first().map_or([(1, 0), (0, 0)], |r| r.loops);
        println!();
        println!("## User-space instructions per call (callgrind)");
        println!();
        println!("{head}");
        println!();
        println!(
            "Instructions (callgrind `Ir`) per call: (I(N2) - I(N1)) / (N2 - N1), N1 = {n1}, N2 = {n2} (3 for the fill), less the measuring loop's own {} per call (`harness/empty`). Targets: drm_gem/raw <= 1.05 for get_cap, version, dumb create+destroy and PRIME; drm_gem <= the drm crate and libdrm everywhere.",
            fmt(self.rows.first().map(Row::per_call))
        );
        println!();
        println!(
            "| operation | drm_gem | raw | drm crate | libdrm | drm_gem/raw | drm_gem/drm | drm_gem/libdrm |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|---:|");
        for g in ops {
            let v: Vec<Option<f64>> = peers.iter().map(|f| self.per_call(g, f)).collect();
            if v.iter().all(Option::is_none) {
                continue;
            }
            let raw_goal = (*g != "dumb_map_write_4k").then_some(1.05);
            println!(
                "| {g} | {} | {} | {} | {} | {} | {} | {} |",
                fmt(v[0]),
                fmt(v[1]),
                fmt(v[2]),
                fmt(v[3]),
                ratio(v[0], v[1], raw_goal),
                ratio(v[0], v[2], Some(1.0)),
                ratio(v[0], v[3], Some(1.0)),
            );
        }
        println!();
        println!("| other function | instructions per call | I(N1), I(N2) |");
        println!("|---|---:|---:|");
        for r in &self.rows[1.min(self.rows.len())..] {
            if ops.contains(&r.group.as_str()) && peers.contains(&r.function) {
                continue;
            }
            println!(
                "| {}/{} | {} | {}, {} |",
                r.group,
                r.function,
                fmt(self.per_call(&r.group, r.function)),
                r.loops[0].1,
                r.loops[1].1
            );
        }
        println!();
    }
}

impl Groups for Counter {
    fn group(&mut self, name: &str, _bytes: Option<u64>, mode: (bool, bool), ops: &mut [Op<'_>]) {
        // A flat group's call is milliseconds (8 MiB under valgrind): one warm-up, N2 = 3.
        let (warm, n2) = if mode.0 {
            (1, self.calls.min(3))
        } else {
            (WARM_UP, self.calls)
        };
        for f in ops.iter_mut() {
            let id = format!("{name}/{}", f.0);
            if self.failed.is_some() || self.filter.as_ref().is_some_and(|s| !id.contains(s)) {
                continue;
            }
            for _ in 0..warm {
                (f.1)();
            }
            let r = self
                .measure(f, 1)
                .and_then(|i1| Ok([(1, i1), (n2, self.measure(f, n2)?)]));
            match r {
                Ok(loops) => {
                    eprintln!(
                        "instructions: {id}: dumps {} and {}",
                        self.dumps - 1,
                        self.dumps
                    );
                    self.rows.push(Row {
                        group: name.to_string(),
                        function: f.0,
                        loops,
                    });
                }
                Err(e) => self.failed = Some(e),
            }
        }
    }
}

/// Reads at most [`DUMP_MAX`] bytes of `path`.
fn read_bounded(path: &Path) -> std::io::Result<String> {
    let mut s = String::new();
    std::fs::File::open(path)?
        .take(DUMP_MAX)
        .read_to_string(&mut s)?;
    Ok(s)
}

/// The first event count of a callgrind dump's `totals:` (or `summary:`) line.
fn totals(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| {
            l.strip_prefix("totals:")
                .or_else(|| l.strip_prefix("summary:"))
        })
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}
