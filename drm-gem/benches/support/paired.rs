//! Interleaved, paired timing: the ratio estimate that survives a noisy host.
//!
//! Criterion measures one function for seconds, then the next. When the host is shared (TCG
//! on a loaded machine) its load drifts between those windows, and the ratio of two medians
//! inherits the drift. Here the functions of a group take turns in short blocks (the
//! starting function rotates each round), and each round yields one ratio per pair of
//! functions; the median of those per-round ratios cancels drift slower than a round.

use std::time::{Duration, Instant};

/// One operation: its function name and the call to time.
pub(crate) type Op<'a> = (&'static str, Box<dyn FnMut() + 'a>);

/// Boxes a fallible call as an [`Op`]; a failure panics, which fails the run.
pub(crate) fn op<'a, T, E: std::fmt::Display>(
    name: &'static str,
    mut f: impl FnMut() -> Result<T, E> + 'a,
) -> Op<'a> {
    (
        name,
        Box::new(move || match f() {
            Ok(v) => {
                std::hint::black_box(v);
            }
            Err(e) => panic!("{name}: {e}"),
        }),
    )
}

/// Per-round times of every function of a group.
#[derive(Debug)]
pub(crate) struct Paired {
    /// The group.
    pub(crate) group: String,
    /// `(function, ns per call in each round)`, rounds aligned across functions.
    pub(crate) times: Vec<(&'static str, Vec<f64>)>,
    /// Rounds run.
    pub(crate) rounds: usize,
    /// Calls per function per round.
    pub(crate) calls: u32,
}

impl Paired {
    /// The sorted per-round ratios `t(a) / t(b)`, if both were measured.
    pub(crate) fn ratios(&self, a: &str, b: &str) -> Option<Vec<f64>> {
        let t = |f: &str| self.times.iter().find(|(n, _)| *n == f).map(|(_, t)| t);
        let (ta, tb) = (t(a)?, t(b)?);
        let mut r: Vec<f64> = ta.iter().zip(tb).map(|(x, y)| x / y).collect();
        r.sort_by(f64::total_cmp);
        Some(r)
    }
}

/// The `q` quantile (0..=1) of sorted values, by nearest rank.
pub(crate) fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted.get(i).copied()
}

fn per_call(op: &mut Op<'_>, n: u32) -> f64 {
    let t0 = Instant::now();
    for _ in 0..n {
        (op.1)();
    }
    t0.elapsed().as_nanos() as f64 / f64::from(n)
}

/// Runs `ops` in rotating order for about `budget` (at least 5 rounds). A block is about
/// 0.5 ms (at least one call): long enough to dwarf the clock reads, short enough that few
/// blocks are hit by a host preemption, whose rounds the median then discards.
pub(crate) fn run(group: &str, ops: &mut [Op<'_>], budget: Duration) -> Paired {
    let k = ops.len();
    // Calibrate on the slowest function: per function, the fastest of five short blocks
    // after one warm call (a preempted block must not shrink the block size for all).
    let slowest = ops
        .iter_mut()
        .map(|op| {
            per_call(op, 1);
            (0..5)
                .map(|_| per_call(op, 3))
                .fold(f64::INFINITY, f64::min)
        })
        .fold(1.0f64, f64::max);
    let n = (5e5 / slowest).clamp(1.0, 100_000.0) as u32;
    let mut per: Vec<Vec<f64>> = vec![Vec::new(); k];
    let start = Instant::now();
    let mut rounds = 0;
    while rounds < 5 || (start.elapsed() < budget && rounds < 100_000) {
        for j in 0..k {
            let i = (rounds + j) % k;
            per[i].push(per_call(&mut ops[i], n));
        }
        rounds += 1;
    }
    Paired {
        group: group.to_string(),
        times: ops.iter().map(|op| op.0).zip(per).collect(),
        rounds,
        calls: n,
    }
}
