//! `drmtool place REQUESTS.json` on this machine: the GPUs' use now (one scan, the leases
//! held, as `pick` ranks them), each request's `near` resolved, and the batch solved by
//! [`crate::place::batch::solve`]. Leases nothing: it says where jobs would go.
//!
//! The report (`tools/schema/place.schema.json`) gives every job's GPUs with the terms of
//! their cost (class, leases, clients, memory), the step that placed it, and whether the
//! plan is exact.

use super::choose;
use super::pick::{self, Want};
use super::run::RunError;
use crate::gpu::{Gpu, GpuSpec};
use crate::place::batch::{self, GpuUse, Request};
use crate::place::requests::JobRequest;
use crate::place::{Locality, NearReport, cost};
use crate::topo::Class;
use crate::topo::near::{Near, Target};
use serde::Serialize;

/// The version of `drmtool place --json`.
pub const PLACE_SCHEMA_VERSION: u32 = 1;

/// One GPU of a job's placement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlacedGpu {
    /// Its index in the ordering.
    pub index: usize,
    /// Its bus id, else its name.
    pub name: String,
    /// Its class to the job's `near` place (`None`: no `near`, or no class).
    pub class: Option<Class>,
    /// Lease holders on it now.
    pub leases: usize,
    /// Open DRM files on it (`None`: unknown).
    pub clients: Option<usize>,
    /// Bytes its clients hold (`None`: unknown).
    pub memory: Option<u64>,
    /// The job's cost there.
    pub cost: u64,
}

/// Where one request went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlacedJob {
    /// The request's name.
    pub name: String,
    /// GPUs asked for.
    pub count: usize,
    /// Whether it wants each GPU alone.
    pub exclusive: bool,
    /// Its `near` and where it resolved.
    pub near: Option<NearReport>,
    /// Its GPUs (empty: it waits).
    pub gpus: Vec<PlacedGpu>,
    /// Its cost ([`cost::WAIT_COST`] when it waits).
    pub cost: u64,
    /// For several GPUs: the worst class between two of them.
    pub worst: Option<Class>,
    /// The step that placed it (`group (exact)`, `group (greedy)`, `exclusive`, `shared`).
    pub step: String,
}

/// `drmtool place --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlaceReport {
    /// [`PLACE_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Whether the plan is the least-cost one there is ([`crate::place::batch`]).
    pub exact: bool,
    /// Shared jobs per GPU at most.
    pub slots: u32,
    /// Every job's cost summed.
    pub total_cost: u64,
    /// What a waiting job costs.
    pub wait_cost: u64,
    /// How many wait.
    pub waiting: usize,
    /// Per request, in the file's order.
    pub jobs: Vec<PlacedJob>,
}

/// The machine's GPUs and the candidates `gpus` selects (every GPU when empty), as `pick`
/// resolves them: what [`place`] takes.
///
/// # Errors
/// [`RunError`]: no GPUs, a selector that names none.
pub fn candidates(gpus: &[GpuSpec]) -> Result<(Vec<Gpu>, Vec<usize>), RunError> {
    choose::candidates(gpus)
}

/// Places `reqs` on the candidates `cand` (indices into `all`, the ordering: see
/// [`candidates`]), `slots` shared jobs per GPU at most.
///
/// # Errors
/// [`RunError`]: more than [`cost::GPUS_MAX`] GPUs, a `near` that does not resolve (naming
/// the request), `slots` of 0.
pub fn place(
    reqs: &[JobRequest],
    all: &[Gpu],
    cand: Vec<usize>,
    slots: u32,
) -> Result<PlaceReport, RunError> {
    if slots == 0 {
        return Err(RunError::Usage("--slots needs at least 1".into()));
    }
    if cand.len() > cost::GPUS_MAX {
        return Err(RunError::Usage(format!(
            "{} GPUs: place takes at most {}",
            cand.len(),
            cost::GPUS_MAX
        )));
    }
    let loc = Locality::read(all, None)?;
    let report = crate::scan::scan(&crate::scan::Options::default()).ok();
    let ranked = choose::rank_now(
        all,
        &cand,
        report.as_ref(),
        &Want::default(),
        &super::lease::dir(),
        &loc,
    );
    // The GPUs in the ordering's order, with their use.
    let mut cand = cand;
    cand.sort_unstable();
    let uses: Vec<&pick::Candidate> = cand
        .iter()
        .filter_map(|&i| ranked.iter().find(|c| c.index == i))
        .collect();
    // Each distinct near spec resolved once.
    let mut targets = std::collections::BTreeMap::new();
    for q in reqs {
        if let Some(n) = &q.near
            && let std::collections::btree_map::Entry::Vacant(e) = targets.entry(n.to_string())
        {
            let t = n
                .resolve(all, std::path::Path::new("/sys"))
                .map_err(|source| RunError::NearOf {
                    request: q.name.clone(),
                    source,
                })?;
            e.insert((t, n.clone()));
        }
    }
    Ok(solve_on(reqs, all, &uses, &loc, &targets, slots))
}

type Targets = std::collections::BTreeMap<String, (Target, Near)>;

/// The batch solved on the ranked GPUs `uses`, the report built.
fn solve_on(
    reqs: &[JobRequest],
    all: &[Gpu],
    uses: &[&pick::Candidate],
    loc: &Locality,
    targets: &Targets,
    slots: u32,
) -> PlaceReport {
    let gpu_use: Vec<GpuUse> = uses
        .iter()
        .map(|c| GpuUse {
            leases: c.leases,
            clients: c.clients,
            memory: c.memory.value,
        })
        .collect();
    // Each request's resolved place, looked up once (the solver asks per request and GPU).
    let target: Vec<Option<&(Target, Near)>> = reqs
        .iter()
        .map(|q| q.near.as_ref().and_then(|n| targets.get(&n.to_string())))
        .collect();
    let breqs: Vec<Request> = reqs
        .iter()
        .map(|q| Request {
            name: q.name.clone(),
            count: q.count,
            exclusive: q.exclusive,
            near: q.near.is_some(),
        })
        .collect();
    let class = |r: usize, g: usize| target[r].and_then(|(t, _)| loc.class_to(t, uses[g].index));
    let pair = |a: usize, b: usize| loc.pair(uses[a].index, uses[b].index);
    let plan = batch::solve(&breqs, &gpu_use, slots, &class, &pair);
    let jobs = plan
        .jobs
        .iter()
        .enumerate()
        .map(|(r, j)| PlacedJob {
            name: j.name.clone(),
            count: reqs[r].count,
            exclusive: reqs[r].exclusive,
            near: target[r].map(|(t, n)| NearReport::of(n, t)),
            gpus: j
                .gpus
                .iter()
                .map(|s| {
                    let c = uses[s.gpu];
                    PlacedGpu {
                        index: c.index,
                        name: all[c.index]
                            .bus_id
                            .clone()
                            .unwrap_or_else(|| all[c.index].name.clone()),
                        class: s.terms.class,
                        leases: s.terms.leases,
                        clients: s.terms.clients,
                        memory: s.terms.memory,
                        cost: s.cost,
                    }
                })
                .collect(),
            cost: j.cost,
            worst: j.worst,
            step: j.step.clone(),
        })
        .collect();
    PlaceReport {
        schema_version: PLACE_SCHEMA_VERSION,
        exact: plan.exact,
        slots,
        total_cost: plan.total_cost,
        wait_cost: cost::WAIT_COST,
        waiting: plan.waiting,
        jobs,
    }
}

/// The report as a table: a line per job and GPU, with the cost's terms, then the totals.
pub fn render(r: &PlaceReport) -> String {
    use std::fmt::Write;
    let mut s = String::from(
        "JOB                GPU            CLASS  LEASES  CLIENTS  MEMORY(B)       COST  STEP\n",
    );
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    for j in &r.jobs {
        if j.gpus.is_empty() {
            let _ = writeln!(
                s,
                "{:<18} {:<14} {:>5}  {:>6}  {:>7}  {:>9}  {:>9}  waits",
                j.name, "-", "-", "-", "-", "-", "-"
            );
            continue;
        }
        for g in &j.gpus {
            let _ = writeln!(
                s,
                "{:<18} {:<14} {:>5}  {:>6}  {:>7}  {:>9}  {:>9}  {}",
                j.name,
                g.name,
                opt(g.class.map(|c| c.to_string())),
                g.leases,
                opt(g.clients.map(|c| c.to_string())),
                opt(g.memory.map(|m| m.to_string())),
                g.cost,
                j.step
            );
        }
    }
    let _ = writeln!(
        s,
        "{} job(s), {} waiting; total cost {}; {}",
        r.jobs.len(),
        r.waiting,
        r.total_cost,
        if r.exact {
            "exact: the least total cost there is"
        } else {
            "placed step by step (multi-GPU sets, then exclusive, then shared): not proven least"
        }
    );
    s
}
