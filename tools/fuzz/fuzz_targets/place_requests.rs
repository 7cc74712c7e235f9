//! `drmtool place`'s requests file and the batch solver: never panic; a parsed file's
//! requests have unique names of the allowed bytes and counts of 1-64; the plan of a parsed
//! batch on a synthetic machine (the input's last bytes choose its GPUs' use and classes)
//! keeps every promise: no exclusive job shares a GPU or takes a held one, no GPU takes more
//! than its slots, a job's GPUs are distinct and as many as it asked, a waiting job costs the
//! wait.
#![no_main]
use drmtool::place::batch::{GpuUse, Request, solve};
use drmtool::place::cost::WAIT_COST;
use drmtool::place::requests::parse;
use drmtool::topo::Class;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(reqs) = parse(&text) else {
        return;
    };
    let mut names: Vec<&str> = reqs.iter().map(|r| r.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), reqs.len(), "unique names");
    assert!(reqs.iter().all(|r| (1..=64).contains(&r.count)));
    if reqs.len() > 64 {
        return;
    }
    let byte = |i: usize| data.get(data.len().saturating_sub(1 + i)).copied().unwrap_or(0);
    let ngpus = 1 + usize::from(byte(0) % 8);
    let slots = 1 + u32::from(byte(1) % 3);
    let gpus: Vec<GpuUse> = (0..ngpus)
        .map(|g| GpuUse {
            leases: usize::from(byte(2 + g) % 3 == 0),
            clients: Some(usize::from(byte(2 + g) % 5)),
            memory: Some(u64::from(byte(2 + g)) << 24),
        })
        .collect();
    let breqs: Vec<Request> = reqs
        .iter()
        .map(|r| Request {
            name: r.name.clone(),
            count: r.count,
            exclusive: r.exclusive,
            near: r.near.is_some(),
        })
        .collect();
    let class = |r: usize, g: usize| Class::ALL.get(usize::from(byte(r + g) % 7)).copied();
    let pair = |a: usize, b: usize| Class::ALL.get(usize::from(byte(a * 8 + b) % 7)).copied();
    let plan = solve(&breqs, &gpus, slots, &class, &pair);
    assert_eq!(plan.jobs.len(), breqs.len());
    for g in 0..ngpus {
        let on: Vec<usize> = (0..breqs.len())
            .filter(|&r| plan.jobs[r].gpus.iter().any(|s| s.gpu == g))
            .collect();
        let excl = on.iter().filter(|&&r| breqs[r].exclusive).count();
        if excl > 0 {
            assert_eq!((excl, on.len(), gpus[g].leases), (1, 1, 0), "GPU {g}");
        } else {
            assert!(on.len() + gpus[g].leases <= slots as usize, "GPU {g} over its slots");
        }
    }
    for (j, r) in plan.jobs.iter().zip(&breqs) {
        if j.gpus.is_empty() {
            assert_eq!(j.cost, WAIT_COST);
        } else {
            let mut g: Vec<usize> = j.gpus.iter().map(|s| s.gpu).collect();
            g.sort_unstable();
            g.dedup();
            assert_eq!(g.len(), r.count);
        }
    }
});
