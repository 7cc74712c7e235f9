//! `drmtool place`: a batch of job requests placed at once on the machine's GPUs, each job
//! where it costs least ([`super::cost`]) given all the others, or waiting.
//!
//! A request asks for `count` GPUs, `exclusive` (the GPU alone: no other job of the batch
//! and no lease holder on it) or shared (one of up to `slots` jobs per GPU, lease holders
//! counted among them), optionally `near` a place. The batch is solved in three steps:
//!
//! 1. Multi-GPU requests, most GPUs first (ties in input order): each takes the best set
//!    ([`super::group::best`]) of the GPUs it may still use, or waits when there are too
//!    few. (A job on several GPUs at once is set packing, not a flow.)
//! 2. Exclusive single-GPU requests: one minimum-cost flow ([`super::flow::assign`]) over
//!    the GPUs nothing holds yet, one job each.
//! 3. Shared single-GPU requests: one flow over the GPUs no exclusive job holds, each taking
//!    what is left of its slots.
//!
//! The plan is exact (the least total cost there is) when only one step has requests and
//! that step is exact: a flow, or one multi-GPU request whose sets were all tried. Any
//! other batch is placed by these steps in turn, a stated heuristic, and says so
//! ([`Plan::exact`]).
//!
//! ```
//! use drmtool::place::batch::{GpuUse, Request, solve};
//! let gpus = vec![GpuUse { leases: 0, clients: Some(0), memory: Some(0) }; 2];
//! let reqs = vec![Request { name: "a".into(), count: 1, exclusive: true, near: false }; 3];
//! let plan = solve(&reqs, &gpus, 4, &|_, _| None, &|_, _| None);
//! assert_eq!(plan.jobs.iter().filter(|j| j.gpus.is_empty()).count(), 1, "one waits");
//! assert!(plan.exact);
//! ```

use super::cost::{self, Terms, WAIT_COST};
use super::flow::{self, Placement};
use super::group;
use crate::topo::Class;
use serde::Serialize;

/// One job request, as [`solve`] takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Its name, for the report.
    pub name: String,
    /// How many GPUs (at least 1).
    pub count: usize,
    /// Each GPU alone (`false`: shared, one of `slots`).
    pub exclusive: bool,
    /// Whether it named a place (`--near`; its classes come from the caller).
    pub near: bool,
}

/// What [`solve`] knows of a GPU's use now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuUse {
    /// Lease holders on it now.
    pub leases: usize,
    /// Open DRM files on it (`None`: unknown).
    pub clients: Option<usize>,
    /// Bytes its clients hold (`None`: unknown).
    pub memory: Option<u64>,
}

/// One GPU of a job's placement, with the terms of its cost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Seat {
    /// The GPU (an index into the GPUs given).
    pub gpu: usize,
    /// The cost's terms.
    pub terms: Terms,
    /// The cost.
    pub cost: u64,
}

/// Where one request went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobPlan {
    /// The request's name.
    pub name: String,
    /// Its GPUs, with their costs (empty: it waits).
    pub gpus: Vec<Seat>,
    /// Its cost: its GPUs' costs summed, or [`WAIT_COST`] for a waiting job.
    pub cost: u64,
    /// For a multi-GPU job placed: the worst class between two of its GPUs (`None` where
    /// a pair has none, and for one GPU).
    pub worst: Option<Class>,
    /// The step that placed it: `group` (with `exact`/`greedy`), `exclusive` or `shared`.
    pub step: String,
}

/// The batch's placement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// Per request, in the input's order.
    pub jobs: Vec<JobPlan>,
    /// Every job's cost summed.
    pub total_cost: u64,
    /// How many wait.
    pub waiting: usize,
    /// Whether the plan is the least-cost one there is (see the [module](self) docs).
    pub exact: bool,
}

/// What a GPU holds as the steps go on.
#[derive(Debug, Clone, Copy, Default)]
struct Held {
    exclusive: bool,
    shared: u32,
}

/// The batch as the steps go on.
struct Solver<'a> {
    reqs: &'a [Request],
    gpus: &'a [GpuUse],
    slots: u32,
    class: &'a dyn Fn(usize, usize) -> Option<Class>,
    pair: &'a dyn Fn(usize, usize) -> Option<Class>,
    held: Vec<Held>,
    jobs: Vec<Option<JobPlan>>,
    /// Per step that had requests: whether it was exact.
    exact_steps: Vec<bool>,
}

impl Solver<'_> {
    /// Request `r` on GPU `g`: the terms and cost.
    fn seat(&self, r: usize, g: usize) -> Seat {
        let u = self.gpus[g];
        let near = self.reqs[r].near;
        let terms = Terms {
            class: if near { (self.class)(r, g) } else { None },
            near,
            leases: u.leases,
            clients: u.clients,
            memory: u.memory,
        };
        Seat {
            gpu: g,
            cost: cost::cost(&terms),
            terms,
        }
    }

    /// How many more jobs of this mode GPU `g` takes now.
    fn room(&self, g: usize, exclusive: bool) -> u32 {
        let h = self.held[g];
        let taken = u32::try_from(self.gpus[g].leases).unwrap_or(u32::MAX);
        if h.exclusive {
            0
        } else if exclusive {
            u32::from(h.shared == 0 && taken == 0)
        } else {
            self.slots.saturating_sub(taken).saturating_sub(h.shared)
        }
    }

    /// Records a job of this mode on GPU `g`.
    fn take(&mut self, g: usize, exclusive: bool) {
        let h = &mut self.held[g];
        if exclusive {
            h.exclusive = true;
        } else {
            h.shared += 1;
        }
    }

    fn waiting(&self, r: usize, step: &str) -> JobPlan {
        JobPlan {
            name: self.reqs[r].name.clone(),
            gpus: Vec::new(),
            cost: WAIT_COST,
            worst: None,
            step: step.to_string(),
        }
    }

    /// Step 1: the multi-GPU requests, most GPUs first.
    fn groups(&mut self) {
        let mut multi: Vec<usize> = (0..self.reqs.len())
            .filter(|&r| self.reqs[r].count >= 2)
            .collect();
        multi.sort_by_key(|&r| std::cmp::Reverse(self.reqs[r].count));
        for r in multi {
            let q = &self.reqs[r];
            let usable: Vec<usize> = (0..self.gpus.len())
                .filter(|&g| self.room(g, q.exclusive) > 0)
                .collect();
            let seats: Vec<Seat> = usable.iter().map(|&g| self.seat(r, g)).collect();
            let costs: Vec<u64> = seats.iter().map(|s| s.cost).collect();
            let pair = self.pair;
            let Some(found) = group::best(&costs, q.count, &|a, b| pair(usable[a], usable[b]))
            else {
                self.jobs[r] = Some(self.waiting(r, "group"));
                self.exact_steps.push(true);
                continue;
            };
            let exact = found.search == group::Search::Exact;
            self.exact_steps.push(exact);
            for &m in &found.members {
                self.take(usable[m], q.exclusive);
            }
            self.jobs[r] = Some(JobPlan {
                name: q.name.clone(),
                cost: found.cost,
                worst: found.worst,
                step: format!("group ({})", if exact { "exact" } else { "greedy" }),
                gpus: found.members.iter().map(|&m| seats[m].clone()).collect(),
            });
        }
    }

    /// Steps 2 and 3: the single-GPU requests of one mode, by one flow.
    fn singles(&mut self, exclusive: bool) {
        let rs: Vec<usize> = (0..self.reqs.len())
            .filter(|&r| self.reqs[r].count <= 1 && self.reqs[r].exclusive == exclusive)
            .collect();
        if rs.is_empty() {
            return;
        }
        self.exact_steps.push(true);
        let caps: Vec<u32> = (0..self.gpus.len())
            .map(|g| self.room(g, exclusive))
            .collect();
        let costs: Vec<Vec<Option<u64>>> = rs
            .iter()
            .map(|&r| {
                (0..self.gpus.len())
                    .map(|g| (caps[g] > 0).then(|| self.seat(r, g).cost))
                    .collect()
            })
            .collect();
        let a = flow::assign(&costs, &caps, WAIT_COST);
        let step = if exclusive { "exclusive" } else { "shared" };
        for (k, &r) in rs.iter().enumerate() {
            let job = match a.placements[k] {
                Placement::Gpu(g) => {
                    self.take(g, exclusive);
                    let s = self.seat(r, g);
                    JobPlan {
                        name: self.reqs[r].name.clone(),
                        cost: s.cost,
                        gpus: vec![s],
                        worst: None,
                        step: step.to_string(),
                    }
                }
                Placement::Wait => self.waiting(r, step),
            };
            self.jobs[r] = Some(job);
        }
    }
}

/// Places `reqs` on `gpus` (see the [module](self) docs): `slots` shared jobs per GPU at
/// most, `class(r, g)` request `r`'s class to GPU `g` (unused for a request without
/// `near`), `pair(a, b)` the class between two GPUs.
pub fn solve(
    reqs: &[Request],
    gpus: &[GpuUse],
    slots: u32,
    class: &dyn Fn(usize, usize) -> Option<Class>,
    pair: &dyn Fn(usize, usize) -> Option<Class>,
) -> Plan {
    let mut s = Solver {
        reqs,
        gpus,
        slots,
        class,
        pair,
        held: vec![Held::default(); gpus.len()],
        jobs: vec![None; reqs.len()],
        exact_steps: Vec::new(),
    };
    s.groups();
    s.singles(true);
    s.singles(false);
    let jobs: Vec<JobPlan> = (0..reqs.len())
        .map(|r| s.jobs[r].take().unwrap_or_else(|| s.waiting(r, "none")))
        .collect();
    Plan {
        total_cost: jobs.iter().fold(0u64, |a, j| a.saturating_add(j.cost)),
        waiting: jobs.iter().filter(|j| j.gpus.is_empty()).count(),
        exact: s.exact_steps.len() <= 1 && s.exact_steps.iter().all(|&e| e),
        jobs,
    }
}

#[cfg(test)]
mod tests;
