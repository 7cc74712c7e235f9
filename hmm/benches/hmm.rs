//! hmm's costs against the plain CPU or filesystem operation that does the same work, in a
//! guest: criterion groups, then an interleaved paired pass per group
//! (`drm-gem/benches/support/paired.rs`, shared by path) and a table of ratios to the
//! baseline. See `hmm/BENCHMARKS.md`.
//!
//! | group | baseline | measured |
//! |---|---|---|
//! | `dmirror_64mib` | `memcpy`: copy 64 MiB between two buffers | `dmirror_read`: `Dmirror::read` of 64 MiB (into a buffer); `dmirror_write`: `Dmirror::write_into` of 64 MiB |
//! | `udmabuf_256mib` | `memfd_fallocate`: `memfd_create` + `fallocate` 256 MiB + close | `udmabuf_create`: `Udmabuf::create` over 256 MiB of a populated sealed memfd + close |
//! | `dax_4kib`, `dax_1mib` | `write_msync`: write into a plain `MAP_SHARED` mapping of a DAX file + `msync` | `write_persist`: write into a `MAP_SYNC` mapping of the same file + `DaxMapping::persist` (cache-line flush) |
//!
//! Run it with `scripts/bench --hmm` (debian-6.12: test_hmm, udmabuf and an NVDIMM mounted
//! as a DAX ext4 at `$HMM_BENCH_DAX_DIR`). A group whose device is missing prints `SKIP`;
//! inside a `vm` guest (or with `KERNEL_TESTS_STRICT=1`) that is a failure. Before timing,
//! each group checks that the operations do their work (the bytes arrive, the sizes match);
//! a failed check fails the run. No timing ever changes the exit status.
#![deny(unsafe_code)]

#[path = "../../drm-gem/benches/support/paired.rs"]
#[allow(dead_code)]
mod paired;

use criterion::{Criterion, SamplingMode, Throughput};
use hmm::{DaxMapping, Dmirror, PageRange, SealedMemfd, Udmabuf};
use paired::{Op, Paired, op, quantile};
use std::hint::black_box;
use std::process::ExitCode;
use std::time::Duration;

const MIB: usize = 1 << 20;
const MIRROR_LEN: usize = 64 * MIB;
const UDMABUF_LEN: usize = 256 * MIB;
const SIZE_LIMIT: &str = "/sys/module/udmabuf/parameters/size_limit_mb";

fn strict() -> bool {
    std::env::var_os("VM_GUEST").is_some()
        || std::env::var_os("KERNEL_TESTS_STRICT").is_some_and(|v| v != "0")
}

/// A missing device: a SKIP line, or an error in strict mode.
fn missing(group: &str, why: String) -> Result<(), String> {
    if strict() {
        Err(format!("{group}: {why}"))
    } else {
        eprintln!("SKIP {group}: {why}");
        Ok(())
    }
}

/// `len` bytes, page-aligned, inside an owned buffer (safe: an offset into a `Vec`).
struct Aligned {
    buf: Vec<u8>,
    off: usize,
    len: usize,
}

impl Aligned {
    fn new(len: usize, fill: u8) -> Self {
        let page = hmm::dmirror::page_size();
        let buf = vec![fill; len + page];
        let off = buf.as_ptr().align_offset(page);
        Self { buf, off, len }
    }
    fn get(&self) -> &[u8] {
        &self.buf[self.off..self.off + self.len]
    }
    fn get_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.off..self.off + self.len]
    }
}

/// Criterion, then the paired pass, per group.
struct Runner<'c> {
    c: &'c mut Criterion,
    budget: Duration,
    paired: Vec<(Paired, u64)>,
}

impl Runner<'_> {
    /// The first op is the baseline; `bytes` the work of one call.
    fn group(&mut self, name: &str, bytes: u64, ops: &mut [Op<'_>]) {
        let mut g = self.c.benchmark_group(name);
        g.throughput(Throughput::Bytes(bytes));
        g.sampling_mode(SamplingMode::Flat);
        g.sample_size(10);
        for (f, op) in ops.iter_mut() {
            g.bench_function(*f, |b| b.iter(&mut *op));
        }
        g.finish();
        if !self.budget.is_zero() {
            self.paired
                .push((paired::run(name, ops, self.budget), bytes));
        }
    }
}

// ---- dmirror ------------------------------------------------------------------------------

fn bench_dmirror(r: &mut Runner<'_>) -> Result<(), String> {
    let d = match Dmirror::open(0) {
        Ok(d) => d,
        Err(e) => return missing("dmirror_64mib", format!("/dev/hmm_dmirror0: {e}")),
    };
    let src: Vec<u8> = (0..MIRROR_LEN).map(|i| (i * 7 + 1) as u8).collect();
    let mut mem = Aligned::new(MIRROR_LEN, 0);
    let mut out = vec![0u8; MIRROR_LEN];
    let mut dst = vec![0u8; MIRROR_LEN];
    // The check: what the device writes is in memory, what it reads is what memory holds.
    let w = d
        .write_into(mem.get_mut(), &src)
        .map_err(|e| format!("dmirror write: {e}"))?;
    if mem.get() != src.as_slice() || w.cpages != (MIRROR_LEN / hmm::dmirror::page_size()) as u64 {
        return Err(format!(
            "dmirror write: memory differs from the data ({w:?})"
        ));
    }
    let range = PageRange::of(mem.get()).map_err(|e| e.to_string())?;
    d.read(range, &mut out)
        .map_err(|e| format!("dmirror read: {e}"))?;
    if out != src {
        return Err("dmirror read: the bytes read differ from memory".into());
    }
    let mem = std::cell::RefCell::new(mem);
    r.group(
        "dmirror_64mib",
        MIRROR_LEN as u64,
        &mut [
            op("memcpy", || {
                dst.copy_from_slice(black_box(&src));
                Ok::<_, String>(())
            }),
            op("dmirror_read", || d.read(range, &mut out)),
            op("dmirror_write", || {
                d.write_into(mem.borrow_mut().get_mut(), black_box(&src))
            }),
        ],
    );
    Ok(())
}

// ---- udmabuf ------------------------------------------------------------------------------

/// Raises udmabuf's `size_limit_mb` to 256 for the run, and puts it back on drop.
struct SizeLimit(Option<String>);

impl SizeLimit {
    fn raise() -> Self {
        let old = std::fs::read_to_string(SIZE_LIMIT).ok();
        match old
            .as_deref()
            .map(str::trim)
            .and_then(|s| s.parse::<usize>().ok())
        {
            Some(mb) if mb < UDMABUF_LEN / MIB => {
                if std::fs::write(SIZE_LIMIT, format!("{}\n", UDMABUF_LEN / MIB)).is_ok() {
                    return Self(old);
                }
                Self(None)
            }
            _ => Self(None),
        }
    }
}

impl Drop for SizeLimit {
    fn drop(&mut self) {
        if let Some(old) = &self.0 {
            let _ = std::fs::write(SIZE_LIMIT, old);
        }
    }
}

fn memfd_fallocate(len: u64) -> rustix::io::Result<()> {
    use rustix::fs::{FallocateFlags, MemfdFlags};
    let fd = rustix::fs::memfd_create(c"bench", MemfdFlags::CLOEXEC)?;
    rustix::fs::fallocate(&fd, FallocateFlags::empty(), 0, len)
}

fn bench_udmabuf(r: &mut Runner<'_>) -> Result<(), String> {
    let u = match Udmabuf::open() {
        Ok(u) => u,
        Err(e) => return missing("udmabuf_256mib", format!("/dev/udmabuf: {e}")),
    };
    let _limit = SizeLimit::raise();
    let limit = u.limits().size_limit as usize;
    // One buffer of 256 MiB where the limit allows, else as many as it takes.
    let chunk = UDMABUF_LEN.min(limit);
    let pieces = UDMABUF_LEN / chunk;
    eprintln!(
        "udmabuf: size limit {} MiB: {pieces} buffer(s) of {} MiB per iteration",
        limit / MIB,
        chunk / MIB
    );
    let memfd = SealedMemfd::new("bench", UDMABUF_LEN as u64).map_err(|e| e.to_string())?;
    rustix::fs::fallocate(
        &memfd,
        rustix::fs::FallocateFlags::empty(),
        0,
        UDMABUF_LEN as u64,
    )
    .map_err(|e| format!("fallocate: {e}"))?;
    let create = || -> drm_gem::Result<u64> {
        let mut total = 0;
        for i in 0..pieces {
            let b = u.create(&memfd, (i * chunk) as u64, chunk as u64)?;
            total += b.size()?;
        }
        Ok(total)
    };
    match create() {
        Ok(n) if n == UDMABUF_LEN as u64 => {}
        other => return Err(format!("udmabuf create: {other:?}")),
    }
    memfd_fallocate(UDMABUF_LEN as u64).map_err(|e| format!("memfd fallocate: {e}"))?;
    r.group(
        "udmabuf_256mib",
        UDMABUF_LEN as u64,
        &mut [
            op("memfd_fallocate", || memfd_fallocate(UDMABUF_LEN as u64)),
            op("udmabuf_create", create),
        ],
    );
    Ok(())
}

// ---- DAX persist --------------------------------------------------------------------------

fn bench_dax(r: &mut Runner<'_>) -> Result<(), String> {
    let Some(dir) = std::env::var_os("HMM_BENCH_DAX_DIR") else {
        return missing(
            "dax",
            "HMM_BENCH_DAX_DIR is not set (scripts/bench --hmm mounts a DAX ext4 there)".into(),
        );
    };
    let path = std::path::Path::new(&dir).join("bench");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let len = 2 * MIB;
    // Real blocks, not holes: a write fault into a hole would allocate inside the timing.
    std::io::Write::write_all(&mut &file, &vec![0u8; len]).map_err(|e| e.to_string())?;
    file.sync_all().map_err(|e| e.to_string())?;
    let sync = DaxMapping::map_file(&file, 0, len).map_err(|e| format!("MAP_SYNC: {e}"))?;
    let plain =
        DaxMapping::map_file_without_sync(&file, 0, len).map_err(|e| format!("MAP_SHARED: {e}"))?;
    let (sync, plain) = (
        std::cell::RefCell::new(sync),
        std::cell::RefCell::new(plain),
    );
    for (size, group) in [(4096, "dax_4kib"), (MIB, "dax_1mib")] {
        let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        // The check: each way's bytes land in the file, and each persists the way it says.
        let m1 = sync.borrow_mut().write_at(0, &data);
        let m1 = m1.and_then(|()| sync.borrow().persist(0, size));
        let m2 = plain.borrow_mut().write_at(size, &data);
        let m2 = m2.and_then(|()| plain.borrow().persist(size, size));
        eprintln!("{group}: MAP_SYNC persists by {m1:?}, plain MAP_SHARED by {m2:?}");
        if !matches!(m2, Ok(hmm::PersistMethod::Msync)) || m1.is_err() {
            return Err(format!("{group}: persist methods {m1:?} / {m2:?}"));
        }
        let mut back = vec![0u8; 2 * size];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut back, 0)
            .map_err(|e| e.to_string())?;
        if back[..size] != data[..] || back[size..] != data[..] {
            return Err(format!("{group}: the file does not hold what was written"));
        }
        r.group(
            group,
            size as u64,
            &mut [
                op("write_msync", || {
                    let mut p = plain.borrow_mut();
                    p.write_at(0, black_box(&data))?;
                    p.persist(0, size)
                }),
                op("write_persist", || {
                    let mut s = sync.borrow_mut();
                    s.write_at(0, black_box(&data))?;
                    s.persist(0, size)
                }),
            ],
        );
    }
    drop((sync, plain, file));
    let _ = std::fs::remove_file(&path);
    Ok(())
}

// ---- the table ----------------------------------------------------------------------------

fn print_table(paired: &[(Paired, u64)]) {
    println!();
    println!(
        "hmm benchmarks: paired medians (ratio to the group's first function; q1-q3 of the per-round ratios)"
    );
    println!();
    println!("| group | function | median per call | throughput | ratio to baseline | q1-q3 |");
    println!("|---|---|---|---|---|---|");
    for (p, bytes) in paired {
        let base = p.times[0].0;
        for (f, t) in &p.times {
            let mut sorted = t.clone();
            sorted.sort_by(f64::total_cmp);
            let med = quantile(&sorted, 0.5).unwrap_or(f64::NAN);
            let gib_s = *bytes as f64 / med; // bytes per ns = GB/s
            let (ratio, spread) = match p.ratios(f, base) {
                Some(r) if *f != base => (
                    format!("{:.2}", quantile(&r, 0.5).unwrap_or(f64::NAN)),
                    format!(
                        "{:.2}-{:.2}",
                        quantile(&r, 0.25).unwrap_or(f64::NAN),
                        quantile(&r, 0.75).unwrap_or(f64::NAN)
                    ),
                ),
                _ => ("1 (baseline)".into(), "-".into()),
            };
            println!(
                "| {} | {f} | {} | {:.2} GB/s | {ratio} | {spread} |",
                p.group,
                human(med),
                gib_s
            );
        }
    }
    println!();
    for (p, _) in paired {
        println!(
            "{}: {} rounds of {} call(s) each",
            p.group, p.rounds, p.calls
        );
    }
}

fn human(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.1} us", ns / 1e3)
    }
}

fn main() -> ExitCode {
    let secs = std::env::var("HMM_BENCH_PAIRED_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .unwrap_or(10.0);
    let mut c = Criterion::default()
        .nresamples(20_000)
        .configure_from_args();
    let mut r = Runner {
        c: &mut c,
        budget: Duration::from_secs_f64(secs),
        paired: Vec::new(),
    };
    let mut failed = false;
    for (name, f) in [
        (
            "dmirror",
            bench_dmirror as fn(&mut Runner<'_>) -> Result<(), String>,
        ),
        ("udmabuf", bench_udmabuf),
        ("dax", bench_dax),
    ] {
        if let Err(e) = f(&mut r) {
            eprintln!("hmm benches: {name}: {e}");
            failed = true;
        }
    }
    let paired = std::mem::take(&mut r.paired);
    c.final_summary();
    print_table(&paired);
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
