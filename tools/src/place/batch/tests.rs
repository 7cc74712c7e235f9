//! [`super::solve`] against brute force where it claims exactness, and its promises on
//! random batches where it does not.

use super::*;

/// A small xorshift, for reproducible instances.
struct Rng(u64);

impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Classes by position: GPUs 0-1 on one switch, 2-3 on another of the same node, 4+ on the
/// other node; a request's class to a GPU from a table.
fn pair(a: usize, b: usize) -> Option<Class> {
    let sw = |g: usize| (g / 2).min(2);
    Some(if a == b {
        Class::Same
    } else if sw(a) == sw(b) {
        Class::Pix
    } else if sw(a) < 2 && sw(b) < 2 {
        Class::Node
    } else {
        Class::Sys
    })
}

struct Instance {
    reqs: Vec<Request>,
    gpus: Vec<GpuUse>,
    slots: u32,
    classes: Vec<Vec<Option<Class>>>,
}

fn instance(rng: &mut Rng, jobs: usize, ngpus: usize, multi: bool, mixed: bool) -> Instance {
    let all_exclusive = rng.next(2) == 0;
    let reqs: Vec<Request> = (0..jobs)
        .map(|j| Request {
            name: format!("j{j}"),
            count: if multi { 1 + rng.next(3) as usize } else { 1 },
            exclusive: if mixed {
                rng.next(2) == 0
            } else {
                all_exclusive
            },
            near: rng.next(3) > 0,
        })
        .collect();
    let gpus = (0..ngpus)
        .map(|_| GpuUse {
            leases: if rng.next(4) == 0 { 1 } else { 0 },
            clients: (rng.next(5) > 0).then(|| rng.next(3) as usize),
            memory: Some(rng.next(4) << 26),
        })
        .collect();
    let classes = (0..jobs)
        .map(|_| {
            (0..ngpus)
                .map(|_| match rng.next(7) {
                    6 => None,
                    k => Some(Class::ALL[k as usize]),
                })
                .collect()
        })
        .collect();
    Instance {
        reqs,
        gpus,
        slots: 1 + rng.next(3) as u32,
        classes,
    }
}

fn solve_it(i: &Instance) -> Plan {
    solve(&i.reqs, &i.gpus, i.slots, &|r, g| i.classes[r][g], &pair)
}

/// Room for a job of this mode on GPU `g` after `plan` (the promises' arithmetic, written
/// apart from the solver's).
fn room_after(i: &Instance, plan: &Plan, g: usize, exclusive: bool) -> bool {
    let on: Vec<usize> = (0..i.reqs.len())
        .filter(|&r| plan.jobs[r].gpus.iter().any(|s| s.gpu == g))
        .collect();
    let excl = on.iter().any(|&r| i.reqs[r].exclusive);
    let shared = on.len() - usize::from(excl);
    let leases = i.gpus[g].leases;
    if excl {
        false
    } else if exclusive {
        shared == 0 && leases == 0
    } else {
        shared + leases < i.slots as usize
    }
}

/// The promises every plan keeps, exact or not.
fn check_promises(i: &Instance, plan: &Plan) {
    assert_eq!(plan.jobs.len(), i.reqs.len());
    for g in 0..i.gpus.len() {
        let on: Vec<usize> = (0..i.reqs.len())
            .filter(|&r| plan.jobs[r].gpus.iter().any(|s| s.gpu == g))
            .collect();
        let excl = on.iter().filter(|&&r| i.reqs[r].exclusive).count();
        assert!(excl <= 1, "two exclusive jobs on GPU {g}");
        if excl == 1 {
            assert_eq!(on.len(), 1, "an exclusive job shares GPU {g}");
            assert_eq!(i.gpus[g].leases, 0, "an exclusive job on a held GPU {g}");
        } else {
            assert!(
                on.len() + i.gpus[g].leases <= i.slots as usize,
                "GPU {g} over its slots"
            );
        }
    }
    for (r, j) in plan.jobs.iter().enumerate() {
        let q = &i.reqs[r];
        if j.gpus.is_empty() {
            let rooms = (0..i.gpus.len())
                .filter(|&g| room_after(i, plan, g, q.exclusive))
                .count();
            assert!(
                rooms < q.count,
                "job {r} waits with {rooms} GPUs free for it"
            );
            assert_eq!(j.cost, WAIT_COST);
        } else {
            assert_eq!(j.gpus.len(), q.count.max(1));
            let mut g: Vec<usize> = j.gpus.iter().map(|s| s.gpu).collect();
            g.dedup();
            assert_eq!(g.len(), j.gpus.len(), "a GPU twice in one job");
        }
    }
    let sum = plan.jobs.iter().fold(0u64, |s, j| s + j.cost);
    assert_eq!(plan.total_cost, sum);
}

/// The least total cost of single-GPU requests by trying every placement (each job on
/// each GPU or waiting) within the capacities.
fn brute(i: &Instance) -> u64 {
    fn go(i: &Instance, r: usize, on: &mut Vec<(usize, bool)>, best: &mut u64, acc: u64) {
        if acc >= *best {
            return;
        }
        if r == i.reqs.len() {
            *best = acc;
            return;
        }
        let q = &i.reqs[r];
        go(i, r + 1, on, best, acc + WAIT_COST);
        for g in 0..i.gpus.len() {
            let here: Vec<bool> = on
                .iter()
                .filter(|(x, _)| *x == g)
                .map(|(_, e)| *e)
                .collect();
            let leases = i.gpus[g].leases;
            let fits = if q.exclusive {
                here.is_empty() && leases == 0
            } else {
                !here.contains(&true) && here.len() + leases < i.slots as usize
            };
            if !fits {
                continue;
            }
            let u = i.gpus[g];
            let c = cost::cost(&Terms {
                class: if q.near { i.classes[r][g] } else { None },
                near: q.near,
                leases: u.leases,
                clients: u.clients,
                memory: u.memory,
            });
            on.push((g, q.exclusive));
            go(i, r + 1, on, best, acc + c);
            on.pop();
        }
    }
    let mut best = u64::MAX;
    go(i, 0, &mut Vec::new(), &mut best, 0);
    best
}

#[test]
fn single_gpu_batches_of_one_mode_equal_brute_force() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for _ in 0..400 {
        let (jobs, gpus) = (1 + rng.next(5) as usize, 1 + rng.next(4) as usize);
        let i = instance(&mut rng, jobs, gpus, false, false);
        let plan = solve_it(&i);
        assert!(plan.exact, "one mode, one flow: exact");
        check_promises(&i, &plan);
        assert_eq!(plan.total_cost, brute(&i), "{:?}", i.reqs);
    }
}

#[test]
fn mixed_and_multi_gpu_batches_keep_every_promise_and_say_they_are_not_exact() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..400 {
        let (jobs, gpus) = (1 + rng.next(8) as usize, 1 + rng.next(8) as usize);
        let i = instance(&mut rng, jobs, gpus, true, true);
        let plan = solve_it(&i);
        check_promises(&i, &plan);
        let modes = i.reqs.iter().any(|q| q.exclusive) && i.reqs.iter().any(|q| !q.exclusive);
        let multi = i.reqs.iter().filter(|q| q.count >= 2).count();
        if multi > 1 || (multi == 1 && (i.reqs.len() > 1)) || (multi == 0 && modes) {
            assert!(
                !plan.exact,
                "a heuristic plan claims exactness: {:?}",
                i.reqs
            );
        }
    }
}

#[test]
fn a_multi_gpu_job_takes_one_switch_and_a_single_job_goes_near_its_data() {
    let gpus = vec![
        GpuUse {
            leases: 0,
            clients: Some(0),
            memory: Some(0),
        };
        6
    ];
    let reqs = vec![
        Request {
            name: "pair".into(),
            count: 2,
            exclusive: true,
            near: false,
        },
        Request {
            name: "near-4".into(),
            count: 1,
            exclusive: true,
            near: true,
        },
    ];
    // The single job's data sits under GPU 4's switch.
    let class = |_: usize, g: usize| Some(if g >= 4 { Class::Pix } else { Class::Sys });
    let plan = solve(&reqs, &gpus, 1, &class, &pair);
    let on = |j: usize| plan.jobs[j].gpus.iter().map(|s| s.gpu).collect::<Vec<_>>();
    assert_eq!(on(0), vec![0, 1], "one switch");
    assert_eq!(plan.jobs[0].worst, Some(Class::Pix));
    assert_eq!(on(1), vec![4]);
    assert_eq!(plan.jobs[1].gpus[0].terms.class, Some(Class::Pix));
    assert!(!plan.exact, "two steps");
    assert_eq!(plan.waiting, 0);
}

#[test]
fn held_gpus_take_no_exclusive_job_and_count_against_shared_slots() {
    let gpus = vec![GpuUse {
        leases: 1,
        clients: Some(1),
        memory: Some(0),
    }];
    let one = |exclusive| Request {
        name: "j".into(),
        count: 1,
        exclusive,
        near: false,
    };
    let plan = solve(&[one(true)], &gpus, 2, &|_, _| None, &|_, _| None);
    assert_eq!(plan.waiting, 1);
    let plan = solve(
        &[one(false), one(false)],
        &gpus,
        2,
        &|_, _| None,
        &|_, _| None,
    );
    assert_eq!(plan.waiting, 1, "one slot of two is the holder's");
    let plan = solve(&[], &gpus, 2, &|_, _| None, &|_, _| None);
    assert_eq!((plan.jobs.len(), plan.total_cost, plan.exact), (0, 0, true));
}
