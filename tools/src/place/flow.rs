//! Minimum-cost assignment of single-GPU jobs to GPUs with capacities, as a minimum-cost
//! flow solved by successive shortest paths (Dijkstra over reduced costs).
//!
//! The network: a source, one node per job (capacity 1 from the source), one per GPU (an
//! arc from each job that may use it, at the job's cost there; capacity `slots` to the
//! sink), and a wait node (an arc from every job at `wait_cost`, unbounded to the sink):
//! every job is placed or waits, and the flow of least total cost is the assignment of
//! least total cost. Exact, for jobs of one GPU each: a job that needs several GPUs at once
//! is not one unit of flow (that is set packing) and is placed by [`super`]'s search.
//!
//! Ties: the same input gives the same output (Dijkstra settles nodes in (distance, node
//! index) order and keeps the first of two equal paths).
//!
//! ```
//! use drmtool::place::flow::{assign, Placement};
//! // Two jobs, two GPUs of one slot each: job 0 is cheap anywhere, job 1 only on GPU 0.
//! let costs = vec![vec![Some(1), Some(1)], vec![Some(1), None]];
//! let a = assign(&costs, &[1, 1], 100);
//! assert_eq!(a.placements, vec![Placement::Gpu(1), Placement::Gpu(0)]);
//! assert_eq!(a.cost, 2);
//! ```

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Where a job went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Placement {
    /// On this GPU (an index into the GPUs).
    Gpu(usize),
    /// Nowhere now: it waits.
    Wait,
}

/// The least-cost assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// Per job, in the input's order.
    pub placements: Vec<Placement>,
    /// The total: each placed job's cost, plus `wait_cost` for each waiting one.
    pub cost: u64,
}

/// One arc of the residual network.
#[derive(Debug, Clone)]
struct Arc {
    to: usize,
    cap: u64,
    cost: i64,
}

/// The network: arcs in pairs (an arc and its reverse at `i ^ 1`).
#[derive(Debug, Default)]
struct Net {
    arcs: Vec<Arc>,
    out: Vec<Vec<usize>>,
}

impl Net {
    fn with_nodes(n: usize) -> Net {
        Net {
            arcs: Vec::new(),
            out: vec![Vec::new(); n],
        }
    }

    fn add(&mut self, from: usize, to: usize, cap: u64, cost: i64) -> usize {
        let i = self.arcs.len();
        self.arcs.push(Arc { to, cap, cost });
        self.out[from].push(i);
        self.arcs.push(Arc {
            to: from,
            cap: 0,
            cost: -cost,
        });
        self.out[to].push(i + 1);
        i
    }

    /// One shortest augmenting path from `s` to `t` over reduced costs (`pot` updated);
    /// `None` when `t` is unreachable. Returns the arcs of the path, `t` first.
    fn shortest_path(&self, s: usize, t: usize, pot: &mut [i64]) -> Option<Vec<usize>> {
        let n = self.out.len();
        let mut dist = vec![i64::MAX; n];
        let mut via: Vec<Option<usize>> = vec![None; n];
        let mut heap = BinaryHeap::new();
        dist[s] = 0;
        heap.push(Reverse((0i64, s)));
        while let Some(Reverse((d, u))) = heap.pop() {
            if d > dist[u] {
                continue;
            }
            for &a in &self.out[u] {
                let arc = &self.arcs[a];
                if arc.cap == 0 {
                    continue;
                }
                // Reduced costs are non-negative along residual arcs (Johnson).
                let nd = d + arc.cost + pot[u] - pot[arc.to];
                if nd < dist[arc.to] {
                    dist[arc.to] = nd;
                    via[arc.to] = Some(a);
                    heap.push(Reverse((nd, arc.to)));
                }
            }
        }
        if dist[t] == i64::MAX {
            return None;
        }
        for v in 0..n {
            if dist[v] != i64::MAX {
                pot[v] += dist[v];
            }
        }
        let mut path = Vec::new();
        let mut v = t;
        while v != s {
            let a = via[v]?;
            path.push(a);
            v = self.arcs[a ^ 1].to;
        }
        Some(path)
    }
}

/// The least-cost placement of `costs.len()` single-GPU jobs: `costs[j][g]` is job `j`'s
/// cost on GPU `g` (`None`: it may not go there), `slots[g]` how many jobs GPU `g` takes
/// (1 for exclusive use), `wait_cost` what a job that waits costs. Costs above 2^40 are
/// taken as 2^40.
///
/// A job with a row shorter than `slots` may not use the GPUs past its row's end.
pub fn assign(costs: &[Vec<Option<u64>>], slots: &[u32], wait_cost: u64) -> Assignment {
    const CAP: u64 = 1 << 40;
    let jobs = costs.len();
    let gpus = slots.len();
    let (s, wait, t) = (0, 1 + jobs + gpus, 2 + jobs + gpus);
    let mut net = Net::with_nodes(t + 1);
    let clamp = |c: u64| i64::try_from(c.min(CAP)).unwrap_or(i64::MAX);
    // Per job: the arcs to GPUs (with the GPU) and to the wait node.
    let mut job_arcs: Vec<Vec<(usize, Placement)>> = Vec::with_capacity(jobs);
    for (j, row) in costs.iter().enumerate() {
        net.add(s, 1 + j, 1, 0);
        let mut mine = Vec::new();
        for (g, c) in row.iter().enumerate().take(gpus) {
            if let Some(c) = c {
                mine.push((
                    net.add(1 + j, 1 + jobs + g, 1, clamp(*c)),
                    Placement::Gpu(g),
                ));
            }
        }
        mine.push((net.add(1 + j, wait, 1, clamp(wait_cost)), Placement::Wait));
        job_arcs.push(mine);
    }
    for (g, &n) in slots.iter().enumerate() {
        net.add(1 + jobs + g, t, u64::from(n), 0);
    }
    net.add(wait, t, jobs as u64, 0);
    let mut pot = vec![0i64; t + 1];
    for _ in 0..jobs {
        let Some(path) = net.shortest_path(s, t, &mut pot) else {
            break;
        };
        for a in path {
            net.arcs[a].cap -= 1;
            net.arcs[a ^ 1].cap += 1;
        }
    }
    let mut placements = Vec::with_capacity(jobs);
    let mut cost = 0u64;
    for (j, mine) in job_arcs.iter().enumerate() {
        // The arc the job's unit of flow took (a used arc has no capacity left).
        let p = mine
            .iter()
            .find(|(a, _)| net.arcs[*a].cap == 0)
            .map_or(Placement::Wait, |&(_, p)| p);
        cost = cost.saturating_add(match p {
            Placement::Gpu(g) => costs[j][g].unwrap_or(0).min(CAP),
            Placement::Wait => wait_cost.min(CAP),
        });
        placements.push(p);
    }
    Assignment { placements, cost }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The least total cost by trying every placement (what the solver must equal).
    fn brute(costs: &[Vec<Option<u64>>], slots: &[u32], wait_cost: u64) -> u64 {
        fn go(
            j: usize,
            costs: &[Vec<Option<u64>>],
            left: &mut [u32],
            wait_cost: u64,
            acc: u64,
            best: &mut u64,
        ) {
            if j == costs.len() {
                *best = (*best).min(acc);
                return;
            }
            go(j + 1, costs, left, wait_cost, acc + wait_cost, best);
            for g in 0..left.len() {
                if let Some(Some(c)) = costs[j].get(g)
                    && left[g] > 0
                {
                    left[g] -= 1;
                    go(j + 1, costs, left, wait_cost, acc + c, best);
                    left[g] += 1;
                }
            }
        }
        let mut best = u64::MAX;
        go(0, costs, &mut slots.to_vec(), wait_cost, 0, &mut best);
        best
    }

    /// The assignment keeps every GPU within its slots and adds up to its cost.
    fn check(costs: &[Vec<Option<u64>>], slots: &[u32], wait_cost: u64, a: &Assignment) {
        let mut used = vec![0u32; slots.len()];
        let mut total = 0;
        for (j, p) in a.placements.iter().enumerate() {
            match *p {
                Placement::Gpu(g) => {
                    used[g] += 1;
                    total += costs[j][g].expect("placed only where allowed");
                }
                Placement::Wait => total += wait_cost,
            }
        }
        for (g, &u) in used.iter().enumerate() {
            assert!(u <= slots[g], "GPU {g}: {u} jobs in {} slots", slots[g]);
        }
        assert_eq!(total, a.cost);
    }

    /// A small linear congruential generator (deterministic instances).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 33) % n
        }

        /// A `jobs` x `gpus` cost matrix: one cell in `none_in` forbidden, the others
        /// below `below`.
        fn costs(
            &mut self,
            jobs: usize,
            gpus: usize,
            none_in: u64,
            below: u64,
        ) -> Vec<Vec<Option<u64>>> {
            (0..jobs)
                .map(|_| {
                    (0..gpus)
                        .map(|_| (self.next(none_in) != 0).then(|| self.next(below)))
                        .collect()
                })
                .collect()
        }
    }

    #[test]
    fn equals_brute_force_on_every_instance_of_three_jobs_and_two_gpus() {
        let choices = [None, Some(0), Some(1), Some(3)];
        let mut n = 0;
        for code in 0..4usize.pow(6) {
            let costs: Vec<Vec<Option<u64>>> = (0..3)
                .map(|j| {
                    (0..2)
                        .map(|g| choices[(code / 4usize.pow((j * 2 + g) as u32)) % 4])
                        .collect()
                })
                .collect();
            for slots in [[1, 1], [1, 2], [2, 1], [0, 1], [2, 2]] {
                for wait in [2, 10] {
                    let a = assign(&costs, &slots, wait);
                    check(&costs, &slots, wait, &a);
                    assert_eq!(
                        a.cost,
                        brute(&costs, &slots, wait),
                        "{costs:?} {slots:?} {wait}"
                    );
                    n += 1;
                }
            }
        }
        assert_eq!(n, 4096 * 10);
    }

    #[test]
    fn equals_brute_force_on_random_instances_up_to_five_jobs_and_four_gpus() {
        let mut r = Lcg(29);
        for _ in 0..3000 {
            let jobs = 1 + r.next(5) as usize;
            let gpus = 1 + r.next(4) as usize;
            let costs = r.costs(jobs, gpus, 4, 50);
            let slots: Vec<u32> = (0..gpus).map(|_| r.next(3) as u32).collect();
            let wait = 1 + r.next(120);
            let a = assign(&costs, &slots, wait);
            check(&costs, &slots, wait, &a);
            assert_eq!(
                a.cost,
                brute(&costs, &slots, wait),
                "{costs:?} {slots:?} {wait}"
            );
        }
    }

    #[test]
    fn a_feasible_placement_is_never_reported_as_waiting() {
        // Whenever every job can be placed at once, a wait cost above any placement's
        // total (each cost is below 20) places them all.
        let mut r = Lcg(7);
        let mut full = 0;
        for _ in 0..2000 {
            let jobs = 1 + r.next(5) as usize;
            let gpus = 1 + r.next(4) as usize;
            let costs = r.costs(jobs, gpus, 3, 20);
            let slots: Vec<u32> = (0..gpus).map(|_| 1 + r.next(2) as u32).collect();
            let never = u64::from(u32::MAX);
            if brute(&costs, &slots, never) >= never {
                continue;
            }
            full += 1;
            let a = assign(&costs, &slots, 20 * jobs as u64 + 1);
            assert!(
                a.placements.iter().all(|p| *p != Placement::Wait),
                "{costs:?} {slots:?}: {a:?}"
            );
        }
        assert!(full > 500, "the instances exercise it ({full})");
    }

    #[test]
    fn exclusive_gpus_never_take_two_jobs_and_the_rest_wait() {
        let costs = vec![vec![Some(0)]; 3];
        let a = assign(&costs, &[1], 5);
        assert_eq!(
            a.placements,
            vec![Placement::Gpu(0), Placement::Wait, Placement::Wait]
        );
        assert_eq!(a.cost, 10);
        // The same input, the same answer.
        assert_eq!(assign(&costs, &[1], 5), a);
    }

    #[test]
    fn no_gpus_and_no_jobs() {
        assert_eq!(
            assign(&[], &[1, 1], 3),
            Assignment {
                placements: vec![],
                cost: 0
            }
        );
        let a = assign(&[vec![]], &[], 3);
        assert_eq!((a.placements, a.cost), (vec![Placement::Wait], 3));
    }

    #[test]
    fn more_jobs_than_slots_fill_every_slot() {
        let mut r = Lcg(64);
        let costs: Vec<Vec<Option<u64>>> = (0..200)
            .map(|_| (0..32).map(|_| Some(r.next(100))).collect())
            .collect();
        let slots = vec![4u32; 32];
        let a = assign(&costs, &slots, 1000);
        check(&costs, &slots, 1000, &a);
        let placed = a
            .placements
            .iter()
            .filter(|p| **p != Placement::Wait)
            .count();
        assert_eq!(placed, 128, "every slot is used");
    }
}
