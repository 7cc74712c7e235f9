//! drm-gem side by side with a raw rustix ioctl, the `drm` crate and libdrm: one criterion
//! group per operation, four functions each, same node, same open file, same process, one
//! run. After each group an interleaved paired pass times the same calls in alternation
//! (`support/paired.rs`), and at the end the tables of ratios are printed, criterion's medians
//! and the paired medians (see `drm-gem/BENCHMARKS.md` for how to read them).
//!
//! Run it in a guest with `scripts/bench` (it needs vkms and vgem). Without a DRM device it
//! prints a SKIP line and exits 0; inside a `vm` guest (or with `KERNEL_TESTS_STRICT=1`) a
//! missing device is a failure. Before timing anything it checks that the four
//! implementations agree and leak no fd, mapping or GEM handle; a disagreement fails the run.
//! Timings are never judged by the exit status.
#![deny(unsafe_code)]

mod support;

use criterion::{Criterion, SamplingMode, Throughput};
use drm::Device as _;
use drm::control::Device as _;
use drm_gem::{Device, DriverCap, DumbBuffer, DumbSpec, PrimeFlags};
use ioctl_sys::drm as sys;
use rustix::fd::{AsFd, AsRawFd, BorrowedFd};
use rustix::io::Errno;
use std::hint::black_box;
use std::io;
use std::process::ExitCode;
use std::time::Duration;
use support::count::{Counter, Groups};
use support::paired::{self, Op, Paired, op};
use support::report::{self, Estimates, FILL, OVERHEAD};
use support::sys_call as sc;
use support::{Card, Rig};

/// The capability every GET_CAP call asks for.
const CAP: u32 = sys::DRM_CAP_DUMB_BUFFER;
/// 64x64 XRGB8888: 16 KiB, for create + destroy.
const SMALL: DumbSpec = DumbSpec {
    width: 64,
    height: 64,
    bpp: 32,
};
/// 32x32 XRGB8888: one 4 KiB page, for create + map + write + unmap + destroy.
const PAGE: DumbSpec = DumbSpec {
    width: 32,
    height: 32,
    bpp: 32,
};
/// 2048x1024 XRGB8888: 8 MiB, for the fill throughput.
const BIG: DumbSpec = DumbSpec {
    width: 2048,
    height: 1024,
    bpp: 32,
};
const BIG_LEN: usize = 8 << 20;
/// PRIME export flags, the same for all four (drm-gem's default).
const PRIME: u32 = sys::DRM_CLOEXEC | sys::DRM_RDWR;

fn fourcc() -> drm::buffer::DrmFourcc {
    drm::buffer::DrmFourcc::Xrgb8888
}

// Every operation below is `#[inline(always)]`: the closure that criterion, the paired pass
// and the instruction counter call is then each implementation's own call sequence, not a
// wrapper that LLVM inlines for one implementation and calls for another.

// ---- GET_CAP ---------------------------------------------------------------------------

#[inline(always)]
fn cap_drm_gem(d: &Device) -> io::Result<u64> {
    Ok(d.driver_cap(DriverCap::DumbBuffer)?.unwrap_or(0))
}

#[inline(always)]
fn cap_raw(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut a = sys::drm_get_cap {
        capability: u64::from(CAP),
        value: 0,
    };
    sc::raw_get_cap(fd, &mut a)?;
    Ok(a.value)
}

/// drm-gem's retry (private there), replicated in its shape: the first call inline, the loop
/// (again on EINTR or EAGAIN) out of line after a failure.
#[inline(always)]
fn retry<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    match f() {
        Err(e) => retry_cold(e, f),
        ok => ok,
    }
}

/// [`retry`]'s loop after a failed first call.
#[cold]
#[inline(never)]
fn retry_cold<T>(first: io::Error, mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    let mut r = Err(first);
    loop {
        match r {
            Err(e) if matches!(Errno::from_io_error(&e), Some(Errno::INTR | Errno::AGAIN)) => {}
            other => return other,
        }
        r = f();
    }
}

/// The raw baseline inside the retry loop: the loop's own cost, against `cap_raw`.
#[inline(always)]
fn cap_raw_retry(fd: BorrowedFd<'_>) -> io::Result<u64> {
    retry(|| cap_raw(fd))
}

#[inline(always)]
fn cap_drm(c: Card<'_>) -> io::Result<u64> {
    c.get_driver_capability(drm::DriverCapability::DumbBuffer)
}

#[inline(always)]
fn cap_libdrm(fd: BorrowedFd<'_>) -> io::Result<u64> {
    sc::libdrm_get_cap(fd, CAP)
}

// ---- VERSION (each returns owned strings, as each API does; compared by driver name) ----

#[inline(always)]
fn version_drm_gem(d: &Device) -> io::Result<Vec<u8>> {
    let v = black_box(d.driver()?);
    Ok(v.name.into_bytes())
}

/// One ioctl into stack buffers sized like drm-gem's first guess, then owned strings: the
/// cheapest safe conversion (UTF-8 validation, then a copy; the lossy path only for invalid
/// text), no NUL search.
#[inline(always)]
fn version_raw(fd: BorrowedFd<'_>) -> io::Result<Vec<u8>> {
    let (mut n, mut da, mut de) = ([0u8; 64], [0u8; 32], [0u8; 256]);
    let v = sc::raw_version(fd, &mut n, &mut da, &mut de)?;
    let text = |b: &[u8], len: u64| {
        let b = &b[..usize::try_from(len).unwrap_or(usize::MAX).min(b.len())];
        std::str::from_utf8(b)
            .map_or_else(|_| String::from_utf8_lossy(b).into_owned(), str::to_owned)
    };
    let owned = black_box((
        text(&n, v.name_len),
        text(&da, v.date_len),
        text(&de, v.desc_len),
        (v.version_major, v.version_minor, v.version_patchlevel),
    ));
    Ok(owned.0.into_bytes())
}

#[inline(always)]
fn version_drm(c: Card<'_>) -> io::Result<Vec<u8>> {
    let v = black_box(c.get_driver()?);
    Ok(v.name().as_encoded_bytes().to_vec())
}

#[inline(always)]
fn version_libdrm(fd: BorrowedFd<'_>) -> io::Result<Vec<u8>> {
    let v = black_box(sc::libdrm_version(fd)?);
    Ok(v.name().to_vec())
}

// ---- dumb create + destroy (returns the pitch: the drm crate does not expose the size) --

#[inline(always)]
fn dumb_drm_gem(d: &Device, spec: DumbSpec) -> io::Result<u32> {
    let b = DumbBuffer::create(d, spec)?;
    Ok(b.pitch())
}

fn create_args(spec: DumbSpec) -> sys::drm_mode_create_dumb {
    sys::drm_mode_create_dumb {
        height: spec.height,
        width: spec.width,
        bpp: spec.bpp,
        ..Default::default()
    }
}

#[inline(always)]
fn dumb_raw(fd: BorrowedFd<'_>, spec: DumbSpec) -> io::Result<u32> {
    let mut a = create_args(spec);
    sc::raw_create_dumb(fd, &mut a)?;
    sc::raw_destroy_dumb(fd, &mut sys::drm_mode_destroy_dumb { handle: a.handle })?;
    Ok(a.pitch)
}

#[inline(always)]
fn dumb_drm(c: Card<'_>, spec: DumbSpec) -> io::Result<u32> {
    let b = c.create_dumb_buffer((spec.width, spec.height), fourcc(), spec.bpp)?;
    let pitch = drm::buffer::Buffer::pitch(&b);
    c.destroy_dumb_buffer(b)?;
    Ok(pitch)
}

#[inline(always)]
fn dumb_libdrm(fd: BorrowedFd<'_>, spec: DumbSpec) -> io::Result<u32> {
    let mut a = create_args(spec);
    sc::libdrm_create_dumb(fd, &mut a)?;
    sc::libdrm_destroy_dumb(fd, &mut sys::drm_mode_destroy_dumb { handle: a.handle })?;
    Ok(a.pitch)
}

// ---- create + map + write 4 KiB + unmap + destroy (`verify` reads the page back) --------

#[inline(always)]
fn map_drm_gem(d: &Device, data: &[u8], verify: bool) -> io::Result<bool> {
    let mut b = DumbBuffer::create(d, PAGE)?;
    let mut m = b.map()?;
    m.write_at(0, data)?;
    let mut ok = true;
    if verify {
        let mut back = vec![0u8; data.len()];
        m.read_at(0, &mut back)?;
        ok = back == data;
    }
    Ok(ok)
}

fn map_offset_raw(fd: BorrowedFd<'_>, handle: u32) -> io::Result<u64> {
    let mut a = sys::drm_mode_map_dumb {
        handle,
        ..Default::default()
    };
    sc::raw_map_dumb(fd, &mut a)?;
    Ok(a.offset)
}

#[inline(always)]
fn map_raw(fd: BorrowedFd<'_>, data: &[u8], verify: bool) -> io::Result<bool> {
    let mut a = create_args(PAGE);
    sc::raw_create_dumb(fd, &mut a)?;
    let offset = map_offset_raw(fd, a.handle)?;
    let mut ok = true;
    {
        let len = usize::try_from(a.size).map_err(io::Error::other)?;
        let mut m = sc::Map::shared(fd, offset, len)?;
        m.write(data);
        if verify {
            let mut back = vec![0u8; data.len()];
            m.read(&mut back);
            ok = back == data;
        }
    }
    sc::raw_destroy_dumb(fd, &mut sys::drm_mode_destroy_dumb { handle: a.handle })?;
    Ok(ok)
}

#[inline(always)]
fn map_drm(c: Card<'_>, data: &[u8], verify: bool) -> io::Result<bool> {
    let mut b = c.create_dumb_buffer((PAGE.width, PAGE.height), fourcc(), PAGE.bpp)?;
    let mut ok = true;
    {
        let mut m = c.map_dumb_buffer(&mut b)?;
        m[..data.len()].copy_from_slice(data);
        if verify {
            ok = m[..data.len()] == *data;
        }
    }
    c.destroy_dumb_buffer(b)?;
    Ok(ok)
}

#[inline(always)]
fn map_libdrm(fd: BorrowedFd<'_>, data: &[u8], verify: bool) -> io::Result<bool> {
    let mut a = create_args(PAGE);
    sc::libdrm_create_dumb(fd, &mut a)?;
    let mut mreq = sys::drm_mode_map_dumb {
        handle: a.handle,
        ..Default::default()
    };
    sc::libdrm_map_dumb(fd, &mut mreq)?;
    let mut ok = true;
    {
        let len = usize::try_from(a.size).map_err(io::Error::other)?;
        let mut m = sc::Map::shared_libc(fd, mreq.offset, len)?;
        m.write(data);
        if verify {
            let mut back = vec![0u8; data.len()];
            m.read(&mut back);
            ok = back == data;
        }
    }
    sc::libdrm_destroy_dumb(fd, &mut sys::drm_mode_destroy_dumb { handle: a.handle })?;
    Ok(ok)
}

// ---- PRIME export on one device, import on the other, close both (returns the handle) ---

#[inline(always)]
fn prime_drm_gem(exp: &Device, imp: &Device, src: &DumbBuffer<&Device>) -> io::Result<u32> {
    let buf = exp.export(src.gem(), PrimeFlags::default())?;
    let obj = imp.import(buf.as_fd())?;
    Ok(obj.handle().get())
}

#[inline(always)]
fn prime_raw(exp: BorrowedFd<'_>, imp: BorrowedFd<'_>, handle: u32) -> io::Result<u32> {
    let buf = sc::raw_prime_handle_to_fd(exp, handle, PRIME)?;
    let mut a = sys::drm_prime_handle {
        handle: 0,
        flags: 0,
        fd: buf.as_raw_fd(),
    };
    sc::raw_prime_fd_to_handle(imp, &mut a)?;
    sc::raw_gem_close(
        imp,
        &mut sys::drm_gem_close {
            handle: a.handle,
            pad: 0,
        },
    )?;
    Ok(a.handle)
}

#[inline(always)]
fn prime_drm(exp: Card<'_>, imp: Card<'_>, handle: drm::buffer::Handle) -> io::Result<u32> {
    let buf = exp.buffer_to_prime_fd(handle, PRIME)?;
    let h = imp.prime_fd_to_buffer(buf.as_fd())?;
    imp.close_buffer(h)?;
    Ok(u32::from(h))
}

#[inline(always)]
fn prime_libdrm(exp: BorrowedFd<'_>, imp: BorrowedFd<'_>, handle: u32) -> io::Result<u32> {
    let buf = sc::libdrm_prime_handle_to_fd(exp, handle, PRIME)?;
    let h = sc::libdrm_prime_fd_to_handle(imp, buf.as_fd())?;
    sc::libdrm_close_buffer_handle(imp, h)?;
    Ok(h)
}

// ---- the handle table's bookkeeping, replicated (drm-gem keeps it private) --------------

/// drm-gem's `HandleTable` on its dense path (owner counts in a vector indexed by handle,
/// handles below 16384, which is every handle here), behind the device's `Mutex`.
type Table = std::sync::Mutex<Vec<u32>>;

/// What `GemObject::adopt` does to the device's table: lock, count one owner in, unlock.
fn table_adopt(t: &Table, raw: u32) {
    let mut g = t.lock().unwrap_or_else(|p| p.into_inner());
    let i = raw as usize;
    if i >= g.len() {
        g.resize((i + 1).next_power_of_two().max(64), 0);
    }
    g[i] += 1;
}

/// What `GemObject`'s `Drop` does to it: lock, drop one owner, unlock; true when it was the
/// last (then the caller releases the handle).
fn table_release(t: &Table, raw: u32) -> bool {
    let mut g = t.lock().unwrap_or_else(|p| p.into_inner());
    match g.get_mut(raw as usize) {
        Some(n) if *n > 0 => {
            *n -= 1;
            *n == 0
        }
        _ => true,
    }
}

/// Both, back to back: the table's whole cost for one object, without a syscall between.
fn table_adopt_drop(t: &Table, raw: u32) -> bool {
    table_adopt(t, raw);
    table_release(t, raw)
}

/// `dumb_raw` plus the replica table bookkeeping where drm-gem does it (after create,
/// before destroy): what the table costs in place, between syscalls.
#[inline(always)]
fn dumb_raw_table(fd: BorrowedFd<'_>, spec: DumbSpec, t: &Table) -> io::Result<u32> {
    let mut a = create_args(spec);
    sc::raw_create_dumb(fd, &mut a)?;
    table_adopt(t, a.handle);
    if table_release(t, a.handle) {
        sc::raw_destroy_dumb(fd, &mut sys::drm_mode_destroy_dumb { handle: a.handle })?;
    }
    Ok(a.pitch)
}

/// `prime_raw` plus the replica table bookkeeping around the imported handle.
#[inline(always)]
fn prime_raw_table(
    exp: BorrowedFd<'_>,
    imp: BorrowedFd<'_>,
    handle: u32,
    t: &Table,
) -> io::Result<u32> {
    let buf = sc::raw_prime_handle_to_fd(exp, handle, PRIME)?;
    let mut a = sys::drm_prime_handle {
        handle: 0,
        flags: 0,
        fd: buf.as_raw_fd(),
    };
    sc::raw_prime_fd_to_handle(imp, &mut a)?;
    table_adopt(t, a.handle);
    if table_release(t, a.handle) {
        sc::raw_gem_close(
            imp,
            &mut sys::drm_gem_close {
                handle: a.handle,
                pad: 0,
            },
        )?;
    }
    Ok(a.handle)
}

// ---- the agreement and leak check ------------------------------------------------------

fn agree<T: PartialEq + std::fmt::Debug>(what: &str, got: [io::Result<T>; 4]) -> Result<T, String> {
    let mut vals = Vec::new();
    for (name, r) in report::PEERS.iter().zip(got) {
        vals.push(r.map_err(|e| format!("{what}: {name} failed: {e}"))?);
    }
    if vals.windows(2).any(|w| w[0] != w[1]) {
        return Err(format!("{what}: implementations disagree: {vals:?}"));
    }
    Ok(vals.swap_remove(0))
}

fn check(rig: &Rig) -> Result<(), String> {
    let d = &rig.dumb;
    let (fd, card) = (d.as_fd(), Card(d.as_fd()));
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    let (fds, maps) = (support::fd_count(), support::map_count());
    for _ in 0..3 {
        let cap = agree(
            "GET_CAP",
            [cap_drm_gem(d), cap_raw(fd), cap_drm(card), cap_libdrm(fd)],
        )?;
        if cap != 1 {
            return Err(format!(
                "DRM_CAP_DUMB_BUFFER is {cap} on {}",
                rig.dumb_driver
            ));
        }
        let name = agree(
            "VERSION",
            [
                version_drm_gem(d),
                version_raw(fd),
                version_drm(card),
                version_libdrm(fd),
            ],
        )?;
        if name != rig.dumb_driver.as_bytes() {
            return Err(format!("VERSION says {name:?}, sysfs {}", rig.dumb_driver));
        }
        agree(
            "dumb create+destroy",
            [
                dumb_drm_gem(d, SMALL),
                dumb_raw(fd, SMALL),
                dumb_drm(card, SMALL),
                dumb_libdrm(fd, SMALL),
            ],
        )?;
        let ok = agree(
            "dumb map+write",
            [
                map_drm_gem(d, &data, true),
                map_raw(fd, &data, true),
                map_drm(card, &data, true),
                map_libdrm(fd, &data, true),
            ],
        )?;
        if !ok {
            return Err("dumb map+write: the page read back differs".into());
        }
        if let Some((exp, imp)) = &rig.prime {
            let src = DumbBuffer::create(exp, PAGE).map_err(|e| format!("PRIME source: {e}"))?;
            let h = src.handle().get();
            let dh = drm::control::from_u32(h).ok_or("handle 0")?;
            let (e, i) = (exp.as_fd(), imp.as_fd());
            // Handles are per open file and the kernel may hand the same number out again
            // after a close, so only success and a non-zero handle are compared here.
            let got = [
                prime_drm_gem(exp, imp, &src),
                prime_raw(e, i, h),
                prime_drm(Card(e), Card(i), dh),
                prime_libdrm(e, i, h),
            ];
            for (name, r) in report::PEERS.iter().zip(got) {
                match r {
                    Ok(0) => return Err(format!("PRIME: {name} imported handle 0")),
                    Ok(_) => {}
                    Err(e) => return Err(format!("PRIME: {name} failed: {e}")),
                }
            }
        }
    }
    let (fds2, maps2) = (support::fd_count(), support::map_count());
    let mut devs = vec![d];
    if let Some((exp, imp)) = &rig.prime {
        devs.extend([exp, imp]);
    }
    if let Some(n) = devs.iter().map(|d| d.live_handles()).find(|&n| n != 0) {
        return Err(format!("leak: a Device still owns {n} GEM handle(s)"));
    }
    if (fds, maps) != (fds2, maps2) {
        return Err(format!(
            "leak: /proc/self/fd {fds} -> {fds2}, /proc/self/maps {maps} -> {maps2} lines"
        ));
    }
    eprintln!(
        "check: GET_CAP, VERSION, dumb create/destroy, map+write 4 KiB, PRIME ({}): all four agree, no fd, mapping or handle leaked",
        rig.prime_names
    );
    Ok(())
}

// ---- the benchmarks ----------------------------------------------------------------------

/// How each group is measured: criterion, then (if `paired` is non-zero and criterion ran the
/// group) the interleaved paired pass.
struct Runner<'c> {
    c: &'c mut Criterion,
    est: Estimates,
    paired_budget: Duration,
    paired: Vec<Paired>,
}

impl Groups for Runner<'_> {
    /// `bytes`: throughput per call; `flat`: flat sampling (slow calls); `pair`: also run
    /// the paired pass (the first op is the reference the others are divided into).
    fn group(
        &mut self,
        name: &str,
        bytes: Option<u64>,
        (flat, pair): (bool, bool),
        ops: &mut [Op<'_>],
    ) {
        let mut g = self.c.benchmark_group(name);
        if let Some(n) = bytes {
            g.throughput(Throughput::Bytes(n));
        }
        if flat {
            // One call is milliseconds under TCG: flat sampling keeps the run bounded.
            g.sampling_mode(SamplingMode::Flat);
        }
        for (f, op) in ops.iter_mut() {
            g.bench_function(*f, |b| b.iter(&mut *op));
        }
        g.finish();
        if pair && !self.paired_budget.is_zero() && self.est.median_ns(name, ops[0].0).is_some() {
            self.paired.push(paired::run(name, ops, self.paired_budget));
        }
    }
}

/// Boxes an infallible call for a group.
fn op_unit<'a>(name: &'static str, f: impl FnMut() + 'a) -> Op<'a> {
    (name, Box::new(f))
}

fn bench_ops(r: &mut dyn Groups, rig: &Rig) {
    let d = &rig.dumb;
    let table = Table::default();
    let (fd, card) = (d.as_fd(), Card(d.as_fd()));

    r.group(
        "get_cap",
        None,
        (false, true),
        &mut [
            op("drm_gem", || cap_drm_gem(black_box(d))),
            op("raw", || cap_raw(black_box(fd))),
            op("drm_crate", || cap_drm(black_box(card))),
            op("libdrm", || cap_libdrm(black_box(fd))),
            op("raw_retry", || cap_raw_retry(black_box(fd))),
        ],
    );
    r.group(
        "version",
        None,
        (false, true),
        &mut [
            op("drm_gem", || version_drm_gem(d)),
            op("raw", || version_raw(fd)),
            op("drm_crate", || version_drm(card)),
            op("libdrm", || version_libdrm(fd)),
        ],
    );
    r.group(
        "dumb_create_destroy",
        None,
        (false, true),
        &mut [
            op("drm_gem", || dumb_drm_gem(d, black_box(SMALL))),
            op("raw", || dumb_raw(fd, black_box(SMALL))),
            op("drm_crate", || dumb_drm(card, black_box(SMALL))),
            op("libdrm", || dumb_libdrm(fd, black_box(SMALL))),
            op("raw_table", || dumb_raw_table(fd, black_box(SMALL), &table)),
        ],
    );
    let data = vec![0x5au8; 4096];
    let v = black_box(false);
    r.group(
        "dumb_map_write_4k",
        Some(4096),
        (false, true),
        &mut [
            op("drm_gem", || map_drm_gem(d, &data, v)),
            op("raw", || map_raw(fd, &data, v)),
            op("drm_crate", || map_drm(card, &data, v)),
            op("libdrm", || map_libdrm(fd, &data, v)),
        ],
    );
    if let Some((exp, imp)) = &rig.prime {
        let src = DumbBuffer::create(exp, PAGE).expect("PRIME source buffer");
        let h = src.handle().get();
        let dh: drm::buffer::Handle = drm::control::from_u32(h).expect("non-zero handle");
        let (e, i) = (exp.as_fd(), imp.as_fd());
        r.group(
            "prime_roundtrip",
            None,
            (false, true),
            &mut [
                op("drm_gem", || prime_drm_gem(exp, imp, &src)),
                op("raw", || prime_raw(e, i, h)),
                op("drm_crate", || prime_drm(Card(e), Card(i), dh)),
                op("libdrm", || prime_libdrm(e, i, h)),
                op("raw_table", || prime_raw_table(e, i, h, &table)),
            ],
        );
    } else {
        eprintln!("SKIP prime_roundtrip: no PRIME exporter/importer pair on this machine");
    }
}

fn bench_fill(r: &mut dyn Groups, rig: &Rig) -> io::Result<()> {
    let d = &rig.dumb;
    let (fd, card) = (d.as_fd(), Card(d.as_fd()));
    // Every buffer is made, mapped and pre-faulted (one fill) before any timing starts, and
    // all stay mapped together so that the paired pass can alternate between them.
    let mut anon = sc::Map::anon(BIG_LEN)?;
    let mut gem_buf = DumbBuffer::create(d, BIG)?;
    let gem_map = std::cell::RefCell::new(gem_buf.map()?);
    let mut raw_args = create_args(BIG);
    sc::raw_create_dumb(fd, &mut raw_args)?;
    let raw_off = map_offset_raw(fd, raw_args.handle)?;
    let mut raw_map = sc::Map::shared(fd, raw_off, BIG_LEN)?;
    let mut drm_buf = card.create_dumb_buffer((BIG.width, BIG.height), fourcc(), BIG.bpp)?;
    let mut lib_args = create_args(BIG);
    sc::libdrm_create_dumb(fd, &mut lib_args)?;
    let mut lib_req = sys::drm_mode_map_dumb {
        handle: lib_args.handle,
        ..Default::default()
    };
    sc::libdrm_map_dumb(fd, &mut lib_req)?;
    let mut lib_map = sc::Map::shared_libc(fd, lib_req.offset, BIG_LEN)?;
    let src = vec![0xa5u8; BIG_LEN];
    {
        let mut drm_map = card.map_dumb_buffer(&mut drm_buf)?;
        anon.fill(1);
        sc::fill_gem_mapping(&mut gem_map.borrow_mut(), 1);
        raw_map.fill(1);
        drm_map.fill(1);
        lib_map.fill(1);
        let seed = std::cell::Cell::new(0u8);
        let next = || {
            seed.set(seed.get().wrapping_add(1));
            black_box(seed.get())
        };
        r.group(
            FILL,
            Some(BIG_LEN as u64),
            (true, true),
            &mut [
                op_unit("anon_memset", || anon.fill(next())),
                op_unit("drm_gem", || {
                    sc::fill_gem_mapping(&mut gem_map.borrow_mut(), next())
                }),
                op("drm_gem_write_at", || {
                    gem_map.borrow_mut().write_at(0, black_box(&src))
                }),
                op_unit("raw", || raw_map.fill(next())),
                op_unit("drm_crate", || drm_map.fill(next())),
                op_unit("libdrm", || lib_map.fill(next())),
            ],
        );
    }
    drop(gem_map);
    drop(gem_buf);
    drop(raw_map);
    sc::raw_destroy_dumb(
        fd,
        &mut sys::drm_mode_destroy_dumb {
            handle: raw_args.handle,
        },
    )?;
    card.destroy_dumb_buffer(drm_buf)?;
    drop(lib_map);
    sc::libdrm_destroy_dumb(
        fd,
        &mut sys::drm_mode_destroy_dumb {
            handle: lib_args.handle,
        },
    )?;
    Ok(())
}

fn bench_overhead(r: &mut dyn Groups) {
    let t = Table::default();
    let mut raw = 0u32;
    r.group(
        OVERHEAD,
        None,
        (false, false),
        &mut [
            op_unit("handle_table", || {
                raw = raw.wrapping_add(1) | 1;
                black_box(table_adopt_drop(black_box(&t), raw));
            }),
            op("dumb_spec_validate", || black_box(SMALL).validate()),
        ],
    );
}

/// `--instructions BASE [--calls N] [FILTER]`: the instruction counts instead of timing
/// (`support/count.rs`; `scripts/instructions` runs it under callgrind in a guest). Without
/// a DRM device (and not strict) only the groups that need none are counted.
fn count_main(args: &[String]) -> ExitCode {
    let mut base = None;
    let mut calls = 1001;
    let mut filter = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--instructions" => base = it.next(),
            "--calls" => match it.next().and_then(|n| n.parse().ok()) {
                Some(n) => calls = n,
                None => {
                    eprintln!("drm-gem instructions: --calls wants a number");
                    return ExitCode::FAILURE;
                }
            },
            "--bench" => {}
            f => filter = Some(f.to_string()),
        }
    }
    let Some(base) = base else {
        eprintln!("drm-gem instructions: --instructions wants the callgrind output file");
        return ExitCode::FAILURE;
    };
    let rig = match Rig::open() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("drm-gem instructions: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(rig) = &rig
        && let Err(e) = check(rig)
    {
        eprintln!("drm-gem instructions: check failed: {e}");
        return ExitCode::FAILURE;
    }
    let mut counter = Counter::new(std::path::Path::new(base), calls, filter);
    let head = match &rig {
        Some(rig) => {
            bench_ops(&mut counter, rig);
            if let Err(e) = bench_fill(&mut counter, rig) {
                eprintln!("drm-gem instructions: fill setup failed: {e}");
                return ExitCode::FAILURE;
            }
            format!(
                "kernel {} | dumb node {} | PRIME {}",
                rustix::system::uname().release().to_string_lossy(),
                rig.dumb_driver,
                rig.prime_names
            )
        }
        None => {
            eprintln!(
                "SKIP drm-gem instruction counts of the device groups: no DRM node with dumb buffers on this machine"
            );
            "no DRM device: the groups that need none only".into()
        }
    };
    bench_overhead(&mut counter);
    if let Some(e) = counter.failure() {
        eprintln!("drm-gem instructions: {e}");
        return ExitCode::FAILURE;
    }
    counter.print(&report::OPS, &report::PEERS, &head);
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--instructions") {
        return count_main(&args[1..]);
    }
    let home = support::criterion_home();
    let rig = match Rig::open() {
        Ok(Some(r)) => r,
        Ok(None) => {
            eprintln!("SKIP drm-gem benches: no DRM node with dumb buffers on this machine");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("drm-gem benches: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = check(&rig) {
        eprintln!("drm-gem benches: check failed: {e}");
        return ExitCode::FAILURE;
    }
    // Seconds of interleaved paired timing per group after criterion's own (0: none).
    let paired_secs = std::env::var("DRM_GEM_BENCH_PAIRED_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .unwrap_or(10.0);
    let since = std::time::SystemTime::now();
    // 100 000 bootstrap resamples per benchmark take seconds each under TCG; 20 000 give
    // the same medians. `--nresamples` on the command line still wins.
    let mut c = Criterion::default()
        .nresamples(20_000)
        .configure_from_args();
    let mut r = Runner {
        c: &mut c,
        est: Estimates::new(&home, since),
        paired_budget: Duration::from_secs_f64(paired_secs),
        paired: Vec::new(),
    };
    bench_ops(&mut r, &rig);
    if let Err(e) = bench_fill(&mut r, &rig) {
        eprintln!("drm-gem benches: fill setup failed: {e}");
        return ExitCode::FAILURE;
    }
    bench_overhead(&mut r);
    let Runner { est, paired, .. } = r;
    c.final_summary();
    report::print(&est, &paired, &rig.dumb_driver, &rig.prime_names);
    ExitCode::SUCCESS
}
