//! Which GPUs a `drmtool run` job gets: the machine's GPUs resolved from `--gpu` specs,
//! the candidates of `--pick`, their ranking now ([`choose`]), and the leases taken on the
//! chosen ones ([`pick_and_lease`], [`lease_chosen`]), waiting while others hold them.
//! Re-exported by [`super::run`], where `run` calls them.

use super::lease::{self, Lease, LeaseError, Sharing};
use super::pick::{self, Want};
use super::run::{PickRequest, RunError};
use crate::gpu::{self, Gpu, GpuSpec};
use crate::place::group::{self, Group};
use crate::place::{Locality, NearReport};
use std::collections::BTreeMap;
use std::path::Path;

/// The machine's GPUs in the ordering and the indices the selectors chose, in selector
/// order (each GPU once).
pub fn resolve(gpus: &[GpuSpec]) -> Result<(Vec<Gpu>, Vec<usize>), RunError> {
    if gpus.is_empty() {
        return Err(RunError::Usage("--gpu needs at least one selector".into()));
    }
    let all = all_gpus()?;
    let chosen = gpu::select(gpus, &all)?;
    let idx = chosen.iter().map(|g| g.index).collect();
    Ok((all, idx))
}

/// The machine's GPUs in the ordering, or why there are none.
pub fn all_gpus() -> Result<Vec<Gpu>, RunError> {
    Ok(gpu::gpus()?)
}

/// The GPUs `pick` and `run --pick` choose among: the selectors' (as [`resolve`]), or every
/// GPU when there are none.
pub fn candidates(gpus: &[GpuSpec]) -> Result<(Vec<Gpu>, Vec<usize>), RunError> {
    if gpus.is_empty() {
        let all = all_gpus()?;
        let cand = (0..all.len()).collect();
        Ok((all, cand))
    } else {
        resolve(gpus)
    }
}

/// The candidates (indices into `all`) ranked now: `report`'s figures, the leases held in
/// `d` at this moment.
pub(super) fn rank_now(
    all: &[Gpu],
    cand: &[usize],
    report: Option<&crate::scan::Report>,
    want: &Want,
    d: &Path,
    loc: &Locality,
) -> Vec<pick::Candidate> {
    let held = held_by_index(all, cand, d);
    let gs: Vec<&Gpu> = cand.iter().map(|&i| &all[i]).collect();
    let dmem = report.and_then(|r| r.dmem.as_ref());
    pick::rank(
        &gs,
        report,
        &held,
        &|g| pick::free_of(g, dmem),
        &|g| loc.class_to_near(g.index),
        want,
    )
}

/// Where the GPUs sit against `want.near`; without `--near` nothing is read (no class
/// counts in the ranking then).
fn locality(all: &[Gpu], want: &Want) -> Result<Locality, RunError> {
    Ok(match &want.near {
        Some(n) => Locality::read(all, Some(n))?,
        None => Locality::none(),
    })
}

/// The GPU indices of the eligible candidates of `ranked`, in the order to take `n` of
/// them: rank order, or, with `--near` and `n` >= 2, the nearest set first
/// ([`crate::place::group::best`] over the eligible ones, its members by rank), then the
/// rest by rank. The set, by GPU index, when one was searched.
fn take_order(
    ranked: &[pick::Candidate],
    n: usize,
    want: &Want,
    loc: &Locality,
) -> (Vec<usize>, Option<Group>) {
    let eligible: Vec<&pick::Candidate> = ranked.iter().filter(|c| c.excluded.is_none()).collect();
    let by_rank: Vec<usize> = eligible.iter().map(|c| c.index).collect();
    if want.near.is_none() || n < 2 {
        return (by_rank, None);
    }
    let costs: Vec<u64> = eligible.iter().map(|c| c.cost).collect();
    let Some(mut g) = group::best(&costs, n, &|a, b| {
        loc.pair(eligible[a].index, eligible[b].index)
    }) else {
        return (by_rank, None);
    };
    // Members are positions in rank order: ascending positions are the rank order.
    let first: Vec<usize> = g.members.iter().map(|&m| eligible[m].index).collect();
    let order = first
        .iter()
        .copied()
        .chain(by_rank.into_iter().filter(|i| !first.contains(i)))
        .collect();
    g.members = first;
    (order, Some(g))
}

/// `drmtool pick --json` (`tools/schema/pick.schema.json`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct PickReport {
    /// [`crate::SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The indices chosen, in rank order (fewer than asked when fewer are eligible).
    pub chosen: Vec<usize>,
    /// Every candidate in rank order, with its figures and why it is excluded.
    pub candidates: Vec<pick::Candidate>,
    /// Where `--near` pointed (`None`: no `--near`).
    pub near: Option<NearReport>,
    /// The set searched for `-n` 2+ with `--near` (its members by GPU index).
    pub group: Option<Group>,
}

/// What `drmtool pick -n N` chooses among `cand` (indices into `all`): one scan, the
/// leases held now, the first `n` eligible candidates in rank order (with `--near` and
/// `n` >= 2, the nearest set: [`crate::place::group::best`]). Leases nothing (`run --pick` does:
/// [`pick_and_lease`]).
///
/// # Errors
/// [`RunError::Near`]: the `--near` spec does not resolve.
pub fn choose(all: &[Gpu], cand: &[usize], want: &Want, n: usize) -> Result<PickReport, RunError> {
    let loc = locality(all, want)?;
    let report = crate::scan::scan(&crate::scan::Options::default()).ok();
    let candidates = rank_now(all, cand, report.as_ref(), want, &lease::dir(), &loc);
    let (order, group) = take_order(&candidates, n, want, &loc);
    Ok(PickReport {
        schema_version: crate::SCHEMA_VERSION,
        chosen: order.into_iter().take(n).collect(),
        candidates,
        near: loc.near_report(),
        group,
    })
}

/// Why each chosen GPU was chosen, one line each, best first: its class to the `--near`
/// place (and the place), its lease holders, clients and memory held with its source, and
/// for a set its worst class between members and how it was searched.
pub fn why_lines(r: &PickReport) -> Vec<String> {
    let mut out = Vec::new();
    let place = r.near.as_ref().map_or(String::new(), |n| {
        let at = match (&n.pci_path, n.numa_node) {
            (Some(p), Some(node)) => format!("{p}, NUMA node {node}"),
            (Some(p), None) => p.clone(),
            (None, Some(node)) => format!("NUMA node {node}"),
            (None, None) => "no place".into(),
        };
        format!(" to {} ({at})", n.spec)
    });
    for &i in &r.chosen {
        let Some(c) = r.candidates.iter().find(|c| c.index == i) else {
            continue;
        };
        let class = c
            .class
            .map_or("no class (not on PCI, or no node)".to_string(), |k| {
                k.to_string()
            });
        let clients = c.clients.map_or("unknown".to_string(), |n| n.to_string());
        let memory = c
            .memory
            .value
            .map_or("unknown".to_string(), |v| format!("{v} bytes"));
        out.push(format!(
            "chose {}: {class}{place}; {} lease holder(s), {clients} client(s), {memory} held ({}); cost {}",
            c.name, c.leases, c.memory.source, c.cost
        ));
    }
    if let Some(g) = &r.group {
        let worst = g
            .worst
            .map_or("no class (a GPU not on PCI)".to_string(), |k| k.to_string());
        let search = match g.search {
            group::Search::Exact => "every set tried",
            group::Search::Greedy => "greedy search: too many sets to try each",
        };
        out.push(format!(
            "the set of {}: worst class between two of them {worst}, costs summed {} ({search})",
            g.members.len(),
            g.cost
        ));
    }
    out
}

/// Holders per GPU index among `cand`, from the lease directory and `/proc/locks`.
pub fn held_by_index(all: &[Gpu], cand: &[usize], d: &Path) -> BTreeMap<usize, usize> {
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    let counts = lease::held_counts(&lease::holders(d, &locks));
    cand.iter()
        .map(|&i| (i, counts.get(&lease::key(&all[i])).copied().unwrap_or(0)))
        .collect()
}

/// Chooses `p.n` of the candidate GPUs (indices into `all`) in rank order and leases them,
/// retrying until `p.wait` has passed while others hold them.
pub fn pick_and_lease(
    all: &[Gpu],
    cand: &[usize],
    p: &PickRequest,
) -> Result<Vec<Lease>, RunError> {
    if p.n == 0 {
        return Err(RunError::Usage("--pick needs a number of GPUs >= 1".into()));
    }
    let d = lease::dir();
    let dir = lease::open_dir(&d).map_err(|e| RunError::Setup(e.to_string()))?;
    let loc = locality(all, &p.want)?;
    // One scan ranks the candidates; the leases are re-read on every try.
    let report = crate::scan::scan(&crate::scan::Options::default()).ok();
    // None: a wait longer than the clock can count (--wait 1e19) waits for ever.
    let deadline = std::time::Instant::now().checked_add(p.wait);
    let mut tries = 0;
    loop {
        let ranked = rank_now(all, cand, report.as_ref(), &p.want, &d, &loc);
        let (order, _) = take_order(&ranked, p.n, &p.want, &loc);
        let eligible: Vec<&pick::Candidate> = order
            .iter()
            .filter_map(|&i| ranked.iter().find(|c| c.index == i))
            .collect();
        if eligible.len() < p.n {
            let why: Vec<String> = ranked
                .iter()
                .filter_map(|c| c.excluded.as_ref().map(|e| format!("{}: {e}", c.name)))
                .collect();
            return Err(RunError::NoGpu(format!(
                "--pick {}: only {} eligible GPU(s) ({})",
                p.n,
                eligible.len(),
                why.join("; ")
            )));
        }
        let mut got: Vec<Lease> = Vec::new();
        for c in &eligible {
            if got.len() == p.n {
                break;
            }
            match lease::try_lease(&dir, &all[c.index], p.sharing) {
                Ok(l) => got.push(l),
                Err(LeaseError::Busy) => continue,
                Err(e) => return Err(RunError::Setup(e.to_string())),
            }
        }
        if got.len() == p.n {
            return Ok(got);
        }
        // Not enough: give back what was taken (so two jobs that want two each cannot
        // hold one apiece forever) and try again until the deadline.
        drop(got);
        if !wait_turn(deadline, &mut tries) {
            let busy: Vec<String> = eligible
                .iter()
                .map(|c| format!("{} ({} holder(s))", c.name, c.leases))
                .collect();
            return Err(RunError::NoGpu(format!(
                "--pick {}: every eligible GPU is leased by others: {} (hint: --wait SECS, \
                 drmtool leases)",
                p.n,
                busy.join(", ")
            )));
        }
    }
}

/// Between two tries at leases: `false` once `deadline` has passed (`None`: never), else a
/// pause and `true`. The pause doubles from 50 ms with each try, up to 1 s (`tries` counts
/// them), plus 0-99 ms varied by pid so that waiters do not retry in lockstep; never past
/// the deadline. Twenty waiters retrying every 100 ms kept a TCG guest's CPU busy enough to
/// starve the jobs they waited for (a `--pick` test took 234 s and ran out of its wait
/// under load); backed off, a waiter costs at most a try a second.
fn wait_turn(deadline: Option<std::time::Instant>, tries: &mut u32) -> bool {
    let now = std::time::Instant::now();
    if deadline.is_some_and(|d| now >= d) {
        return false;
    }
    let base = (50u64 << (*tries).min(5)).min(1000);
    *tries = tries.saturating_add(1);
    let pause = std::time::Duration::from_millis(base + u64::from(std::process::id() % 100));
    std::thread::sleep(deadline.map_or(pause, |d| pause.min(d - now)));
    true
}

/// Leases each of `idx` (a `run --gpu` job): exclusive, or one of K with `sharing`;
/// retries until `wait` has passed while others hold one.
pub fn lease_chosen(
    all: &[Gpu],
    idx: &[usize],
    sharing: Sharing,
    wait: std::time::Duration,
) -> Result<Vec<Lease>, RunError> {
    let d = lease::dir();
    let dir = lease::open_dir(&d).map_err(|e| RunError::Setup(e.to_string()))?;
    let deadline = std::time::Instant::now().checked_add(wait);
    let mut tries = 0;
    loop {
        let mut got = Vec::new();
        let mut busy = None;
        for &i in idx {
            match lease::try_lease(&dir, &all[i], sharing) {
                Ok(l) => got.push(l),
                Err(LeaseError::Busy) => {
                    busy = Some(i);
                    break;
                }
                Err(e) => return Err(RunError::Setup(e.to_string())),
            }
        }
        let Some(b) = busy else { return Ok(got) };
        drop(got);
        if !wait_turn(deadline, &mut tries) {
            return Err(RunError::NoGpu(format!(
                "{} is leased by another job (hint: drmtool leases; --wait SECS; --shared K \
                 when every holder agrees to share)",
                all[b].name
            )));
        }
    }
}
