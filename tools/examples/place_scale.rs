//! How `drmtool place`'s solver grows: synthetic batches of requests over synthetic GPUs,
//! each solved once, its time and the process's peak memory (tools/BENCHMARKS.md, issue 30).
//!
//! ```text
//! cargo run --release -p drmtool --example place_scale            # the curve
//! cargo run --release -p drmtool --example place_scale -- 1000 64 # one point
//! ```
//!
//! The machine: GPUs in switches of 8 (PIX within), two switches to a host bridge (PHB),
//! host bridges split over two NUMA nodes (NODE within a node, SYS across). The requests
//! (a fixed xorshift sequence, so every run is the same): 80% single-GPU exclusive, 10%
//! single-GPU shared, 10% two to four GPUs; two in three name a place near one switch (the
//! class to each GPU follows from the switch). Use: a quarter of the GPUs hold a lease and
//! clients with memory.

use drmtool::place::batch::{GpuUse, Request, solve};
use drmtool::topo::Class;
use std::time::Instant;

struct Rng(u64);

impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The class between GPUs (or a place at a GPU's switch) `a` and `b` of `gpus` GPUs.
fn class(a: usize, b: usize, gpus: usize) -> Class {
    let (sw, hb) = (|g: usize| g / 8, |g: usize| g / 16);
    let node = |g: usize| usize::from(g >= gpus / 2);
    if a == b {
        Class::Same
    } else if sw(a) == sw(b) {
        Class::Pix
    } else if hb(a) == hb(b) {
        Class::Phb
    } else if node(a) == node(b) {
        Class::Node
    } else {
        Class::Sys
    }
}

/// The peak resident memory of this process so far (VmHWM), in KiB.
fn peak_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// One batch solved: (milliseconds, waiting, exact).
fn point(jobs: usize, gpus: usize) -> (f64, usize, bool) {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ (jobs as u64) << 16 ^ gpus as u64);
    let mut near_gpu = Vec::with_capacity(jobs);
    let reqs: Vec<Request> = (0..jobs)
        .map(|j| {
            let kind = rng.next(10);
            let near = (rng.next(3) > 0).then(|| rng.next(gpus as u64) as usize);
            near_gpu.push(near);
            Request {
                name: format!("job{j}"),
                count: if kind == 9 {
                    2 + rng.next(3) as usize
                } else {
                    1
                },
                exclusive: kind != 8,
                near: near.is_some(),
            }
        })
        .collect();
    let uses: Vec<GpuUse> = (0..gpus)
        .map(|_| {
            let busy = rng.next(4) == 0;
            GpuUse {
                leases: usize::from(busy),
                clients: Some(if busy { 1 + rng.next(4) as usize } else { 0 }),
                memory: Some(if busy { rng.next(16) << 30 } else { 0 }),
            }
        })
        .collect();
    let t = Instant::now();
    let plan = solve(
        &reqs,
        &uses,
        4,
        &|r, g| near_gpu[r].map(|n| class(n, g, gpus)),
        &|a, b| Some(class(a, b, gpus)),
    );
    let ms = t.elapsed().as_secs_f64() * 1e3;
    (ms, plan.waiting, plan.exact)
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    if let [j, g] = args.as_slice() {
        let (ms, waiting, exact) = point(*j, *g);
        println!(
            "| {j} | {g} | {ms:.1} | {waiting} | {exact} | {} |",
            peak_kib()
        );
        return;
    }
    println!("| requests | GPUs | solve ms | waiting | exact | peak RSS KiB |");
    println!("|---:|---:|---:|---:|---|---:|");
    // Each point in a process of its own, so that its peak memory is its own.
    let me = std::env::current_exe().expect("this program's path");
    for j in [125, 250, 500, 1000, 2000, 4000] {
        for g in [16, 64, 256] {
            let out = std::process::Command::new(&me)
                .args([j.to_string(), g.to_string()])
                .output()
                .expect("run one point");
            print!("{}", String::from_utf8_lossy(&out.stdout));
        }
    }
}
