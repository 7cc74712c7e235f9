//! KMS side by side on vkms: a full snapshot (`drm_gem::kms::Snapshot::take` vs libdrm's
//! `drmModeGet*` sequence vs the `drm` crate's), an atomic `TEST_ONLY` commit and a legacy
//! page-flip round trip (flip, then wait for the flip-complete event), drm-gem vs libdrm.
//! After each criterion group an interleaved paired pass (`support/paired.rs`) gives the
//! ratios that survive a noisy host; see `drm-gem/BENCHMARKS.md`, section KMS.
//!
//! `kms --count <drm_gem|libdrm|drm_crate|none>` opens vkms, takes exactly one snapshot with
//! that implementation and exits: `scripts/bench --kms` runs it under `strace` to count
//! ioctls (`none` is the baseline of opening the node, subtracted).
//!
//! Run it in a guest with `scripts/bench --kms`. Without vkms it prints SKIP and exits 0;
//! inside a `vm` guest (or with `KERNEL_TESTS_STRICT=1`) that is a failure. Before timing it
//! checks that the implementations agree and that nothing leaked; the pipe it lights for
//! the atomic and flip groups is turned off at the end. Timings never decide the exit status.
#![deny(unsafe_code)]

#[allow(dead_code)]
mod support;

use criterion::{Criterion, SamplingMode};
use drm::ClientCapability;
use drm::Device as _;
use drm::control::Device as _;
use drm::control::{ResourceHandle, property};
use drm_gem::kms::{
    AtomicFlags, AtomicRequest, ConnectorId, CrtcId, FbSpec, ModeObject, PlaneId, PropertyId,
    PropertyValue, Snapshot,
};
use drm_gem::{ClientCap, Device, DumbBuffer, DumbSpec, NodeKind};
use ioctl_sys::drm as sys;
use rustix::fd::AsFd;
use std::hint::black_box;
use std::io;
use std::process::ExitCode;
use std::time::Duration;
use support::paired::{self, Op, Paired};
use support::sys_call::kms::{self as sc, KmsSummary};
use support::{Card, fd_count, strict};

// ---- the snapshot ----------------------------------------------------------------------

/// What drm-gem's snapshot saw, in the common summary. The blob bytes are fetched here
/// (outside any timing): `Snapshot` keeps the decoded blobs, not their bytes.
fn summary_drm_gem(dev: &Device, s: &Snapshot) -> io::Result<KmsSummary> {
    let mut out = KmsSummary {
        connectors: s.connectors.len(),
        modes: s.connectors.iter().map(|c| c.connector.modes.len()).sum(),
        encoders: s.encoders.len(),
        crtcs: s.crtcs.len(),
        planes: s.planes.len(),
        formats: s.planes.iter().map(|p| p.plane.formats.len()).sum(),
        ..KmsSummary::default()
    };
    let all = s
        .connectors
        .iter()
        .flat_map(|c| &c.properties)
        .chain(s.crtcs.iter().flat_map(|c| &c.properties))
        .chain(s.planes.iter().flat_map(|p| &p.properties));
    for p in all {
        out.props += 1;
        if let PropertyValue::Blob(Some(id)) = p.value
            && matches!(p.property.name.as_str(), "EDID" | "IN_FORMATS")
        {
            out.blob_bytes += dev.blob(id)?.len();
        }
    }
    Ok(out)
}

fn snap_drm_gem(dev: &Device) -> io::Result<Snapshot> {
    Ok(Snapshot::take(dev)?)
}

/// The ioctls of `Snapshot::take` through drm-gem's per-call API, with the same property
/// cache and blob fetches, but no decoding of values, EDID or `IN_FORMATS` and no assembly:
/// where `Snapshot::take`'s time goes (the calls vs what it builds from them).
fn snap_drm_gem_calls(dev: &Device) -> io::Result<usize> {
    fn props<O: ModeObject>(
        dev: &Device,
        cache: &mut std::collections::HashMap<PropertyId, drm_gem::kms::Property>,
        last_len: &mut [usize; 2],
        o: O,
    ) -> io::Result<usize> {
        let mut n = 0;
        for (id, raw) in dev.object_properties(o)? {
            let p = match cache.get(&id) {
                Some(p) => p,
                None => cache.entry(id).or_insert(dev.property(id)?),
            };
            let which = match p.name.as_str() {
                "EDID" => Some(0),
                "IN_FORMATS" => Some(1),
                _ => None,
            };
            // The snapshot guesses each blob's length from the last one of that name.
            if let Some(w) = which
                && let Some(b) = u32::try_from(raw).ok().and_then(drm_gem::kms::BlobId::new)
            {
                let len = dev.blob_sized(b, last_len[w])?.len();
                last_len[w] = len;
                n += len;
            }
            n += 1;
        }
        Ok(n)
    }
    for cap in [
        ClientCap::UniversalPlanes,
        ClientCap::Atomic,
        ClientCap::WritebackConnectors,
    ] {
        let _ = dev.set_client_cap(cap, 1);
    }
    let mut cache = std::collections::HashMap::new();
    let mut last_len = [0usize; 2];
    let res = dev.resources()?;
    let mut n = 0;
    for &id in &res.connectors {
        n += dev.connector(id)?.modes.len();
        n += props(dev, &mut cache, &mut last_len, id)?;
    }
    for &id in &res.encoders {
        black_box(dev.encoder(id)?);
    }
    for &id in &res.crtcs {
        black_box(dev.crtc(id)?);
        n += props(dev, &mut cache, &mut last_len, id)?;
    }
    for id in dev.plane_ids()? {
        n += dev.plane(id)?.formats.len();
        n += props(dev, &mut cache, &mut last_len, id)?;
    }
    Ok(n)
}

/// Properties of one object through the `drm` crate, as `libdrm_object_props` does.
fn props_drm<T: ResourceHandle>(c: Card<'_>, h: T, s: &mut KmsSummary) -> io::Result<()> {
    let set = c.get_properties(h)?;
    let (ids, vals) = set.as_props_and_values();
    s.props += ids.len();
    for (&id, &val) in ids.iter().zip(vals) {
        let info = c.get_property(id)?;
        let name = info.name().to_bytes();
        if matches!(info.value_type(), property::ValueType::Blob)
            && val != 0
            && (name == b"EDID" || name == b"IN_FORMATS")
        {
            s.blob_bytes += c.get_property_blob(val)?.len();
        }
    }
    Ok(())
}

/// The `drm` crate's equivalent of the snapshot.
fn snap_drm(c: Card<'_>) -> io::Result<KmsSummary> {
    for cap in [
        ClientCapability::UniversalPlanes,
        ClientCapability::Atomic,
        ClientCapability::WritebackConnectors,
    ] {
        let _ = c.set_client_capability(cap, true);
    }
    let mut s = KmsSummary::default();
    let res = c.resource_handles()?;
    for &h in res.connectors() {
        s.modes += c.get_connector(h, false)?.modes().len();
        s.connectors += 1;
        props_drm(c, h, &mut s)?;
    }
    for &h in res.encoders() {
        black_box(c.get_encoder(h)?);
        s.encoders += 1;
    }
    for &h in res.crtcs() {
        black_box(c.get_crtc(h)?);
        s.crtcs += 1;
        props_drm(c, h, &mut s)?;
    }
    for h in c.plane_handles()? {
        s.formats += c.get_plane(h)?.formats().len();
        s.planes += 1;
        props_drm(c, h, &mut s)?;
    }
    Ok(s)
}

fn open_vkms() -> io::Result<Device> {
    Ok(Device::open_driver("vkms", Some(NodeKind::Primary))?)
}

/// One snapshot by one implementation, for the ioctl count under strace.
fn count_one(which: &str) -> Result<(), String> {
    let dev = open_vkms().map_err(|e| format!("open vkms: {e}"))?;
    let s = match which {
        "none" => None,
        "drm_gem" => Some(
            snap_drm_gem(&dev)
                .map(|s| s.planes.len())
                .map_err(|e| e.to_string())?,
        ),
        "libdrm" => Some(
            sc::libdrm_snapshot(dev.as_fd())
                .map(|s| s.planes)
                .map_err(|e| e.to_string())?,
        ),
        "drm_crate" => Some(
            snap_drm(Card(dev.as_fd()))
                .map(|s| s.planes)
                .map_err(|e| e.to_string())?,
        ),
        other => {
            return Err(format!(
                "--count {other}: want drm_gem, libdrm, drm_crate or none"
            ));
        }
    };
    eprintln!("kms --count {which}: one snapshot, {s:?} planes");
    Ok(())
}

// ---- the pipe --------------------------------------------------------------------------

/// vkms lit with a 1024x768 XRGB8888 framebuffer `a` on its primary plane; `b` is the flip
/// target. The request that lit it is kept for the `TEST_ONLY` group.
struct Pipe<'d> {
    dev: &'d Device,
    crtc: CrtcId,
    conn: ConnectorId,
    plane: PlaneId,
    fbs: [drm_gem::kms::Framebuffer<&'d Device>; 2],
    _bufs: [DumbBuffer<&'d Device>; 2],
    _mode: drm_gem::kms::PropertyBlob<&'d Device>,
    /// `(object, property, value)`, objects as raw ids (libdrm's view).
    entries: Vec<(u32, u32, u64)>,
}

fn find<O: ModeObject + std::fmt::Debug>(
    dev: &Device,
    o: O,
    name: &str,
) -> Result<PropertyId, String> {
    dev.find_property(o, name)
        .map(|p| p.0.id)
        .map_err(|e| format!("property {name} of {o:?}: {e}"))
}

fn light(dev: &Device) -> Result<Pipe<'_>, String> {
    let e = |what: &'static str| move |err: drm_gem::Error| format!("{what}: {err}");
    dev.set_master().map_err(e("SET_MASTER on vkms"))?;
    for cap in [ClientCap::UniversalPlanes, ClientCap::Atomic] {
        dev.set_client_cap(cap, 1).map_err(e("client cap"))?;
    }
    let snap = Snapshot::take(dev).map_err(e("snapshot"))?;
    let crtc = *snap.resources.crtcs.first().ok_or("vkms has no CRTC")?;
    let conn = snap
        .connectors
        .iter()
        .find(|c| c.connector.kind == sys::DRM_MODE_CONNECTOR_VIRTUAL)
        .ok_or("vkms has no virtual connector")?
        .connector
        .id;
    let plane = snap
        .planes
        .iter()
        .find(|p| p.kind == Some(drm_gem::kms::PlaneType::Primary))
        .ok_or("vkms has no primary plane")?
        .plane
        .id;
    // Every connector is probed once here, by the master, so every implementation reads
    // the same mode lists. Otherwise a reader's own probe changes what the next one sees:
    // the drm crate 0.14 asks again with room for 0 modes when a connector has none (the
    // writeback one), which is a probe request; 6.1 and 6.12 honour it only for the
    // master, 5.10 for any client (there the writeback connector then reports 34 modes).
    for c in &snap.connectors {
        dev.probe_connector(c.connector.id)
            .map_err(e("probe connector"))?;
    }
    let probed = dev.probe_connector(conn).map_err(e("probe connector"))?;
    let mode = *probed
        .modes
        .iter()
        .find(|m| m.size() == (1024, 768))
        .ok_or("no 1024x768 mode")?;
    let (w, h) = (1024u32, 768u32);
    let spec = DumbSpec {
        width: w,
        height: h,
        bpp: 32,
    };
    let bufs = [
        DumbBuffer::create(dev, spec).map_err(e("dumb"))?,
        DumbBuffer::create(dev, spec).map_err(e("dumb"))?,
    ];
    let fb = |b: &DumbBuffer<&Device>| FbSpec::for_dumb(b, drm_gem::DrmFourcc::Xrgb8888);
    let fbs = [
        dev.add_framebuffer(&fb(&bufs[0])).map_err(e("ADDFB2"))?,
        dev.add_framebuffer(&fb(&bufs[1])).map_err(e("ADDFB2"))?,
    ];
    let blob = dev
        .create_blob(&mode.to_blob_bytes())
        .map_err(e("mode blob"))?;
    let mut entries = vec![
        (crtc.raw(), find(dev, crtc, "ACTIVE")?.get(), 1),
        (
            crtc.raw(),
            find(dev, crtc, "MODE_ID")?.get(),
            u64::from(blob.id().get()),
        ),
        (
            conn.raw(),
            find(dev, conn, "CRTC_ID")?.get(),
            u64::from(crtc.get()),
        ),
    ];
    for (name, v) in [
        ("FB_ID", u64::from(fbs[0].id().get())),
        ("CRTC_ID", u64::from(crtc.get())),
        ("SRC_X", 0),
        ("SRC_Y", 0),
        ("SRC_W", u64::from(w) << 16),
        ("SRC_H", u64::from(h) << 16),
        ("CRTC_X", 0),
        ("CRTC_Y", 0),
        ("CRTC_W", u64::from(w)),
        ("CRTC_H", u64::from(h)),
    ] {
        entries.push((plane.raw(), find(dev, plane, name)?.get(), v));
    }
    let p = Pipe {
        dev,
        crtc,
        conn,
        plane,
        fbs,
        _bufs: bufs,
        _mode: blob,
        entries,
    };
    p.dev
        .atomic_commit(&p.request(), AtomicFlags::ALLOW_MODESET, 0)
        .map_err(e("modeset"))?;
    Ok(p)
}

impl Pipe<'_> {
    /// The lighting request as drm-gem builds it (typed ids).
    fn request(&self) -> AtomicRequest<'static> {
        let mut r = AtomicRequest::new();
        for &(o, p, v) in &self.entries {
            let Some(p) = PropertyId::new(p) else {
                continue;
            };
            if o == self.crtc.raw() {
                r.set(self.crtc, p, v);
            } else if o == self.conn.raw() {
                r.set(self.conn, p, v);
            } else {
                r.set(self.plane, p, v);
            }
        }
        r
    }

    fn test_drm_gem(&self) -> io::Result<()> {
        let flags = AtomicFlags::TEST_ONLY | AtomicFlags::ALLOW_MODESET;
        self.dev.atomic_commit(&self.request(), flags, 0)?;
        Ok(())
    }

    fn test_libdrm(&self) -> io::Result<()> {
        let flags = sys::DRM_MODE_ATOMIC_TEST_ONLY | sys::DRM_MODE_ATOMIC_ALLOW_MODESET;
        sc::libdrm_atomic(self.dev.as_fd(), &self.entries, flags)
    }

    /// Flips to framebuffer `i` and waits for its flip-complete event.
    fn flip_drm_gem(&self, i: usize) -> io::Result<()> {
        self.dev
            .page_flip(self.crtc, self.fbs[i].id(), Some(i as u64 + 1))?;
        loop {
            let ev = self.dev.read_events(Some(Duration::from_secs(10)))?;
            if ev.is_empty() {
                return Err(io::Error::other("no flip event in 10 s"));
            }
            if ev
                .iter()
                .any(|e| matches!(e, drm_gem::kms::Event::FlipComplete(_)))
            {
                return Ok(());
            }
        }
    }

    fn flip_libdrm(&self, i: usize) -> io::Result<()> {
        sc::libdrm_flip_and_wait(self.dev.as_fd(), self.crtc.get(), self.fbs[i].id().get())
    }

    /// Turns the pipe off (plane, connector, CRTC).
    fn off(&self) -> Result<(), String> {
        let mut r = AtomicRequest::new();
        let d = self.dev;
        r.set(self.crtc, find(d, self.crtc, "ACTIVE")?, 0)
            .set(self.crtc, find(d, self.crtc, "MODE_ID")?, 0)
            .set(self.conn, find(d, self.conn, "CRTC_ID")?, 0)
            .set(self.plane, find(d, self.plane, "FB_ID")?, 0)
            .set(self.plane, find(d, self.plane, "CRTC_ID")?, 0);
        self.dev
            .atomic_commit(&r, AtomicFlags::ALLOW_MODESET, 0)
            .map(|_| ())
            .map_err(|e| format!("pipe off: {e}"))
    }
}

impl Drop for Pipe<'_> {
    /// Turns the pipe off on every way out, a panic in a timed call included (`run` turns it
    /// off itself first, to report a failure; a second off is harmless).
    fn drop(&mut self) {
        let _ = self.off();
    }
}

// ---- checks ----------------------------------------------------------------------------

fn check_snapshots(dev: &Device) -> Result<KmsSummary, String> {
    let fds = fd_count();
    let mut first = None;
    for _ in 0..3 {
        let g = snap_drm_gem(dev).map_err(|e| format!("drm_gem snapshot: {e}"))?;
        let g = summary_drm_gem(dev, &g).map_err(|e| format!("drm_gem blobs: {e}"))?;
        let l = sc::libdrm_snapshot(dev.as_fd()).map_err(|e| format!("libdrm snapshot: {e}"))?;
        let d = snap_drm(Card(dev.as_fd())).map_err(|e| format!("drm crate snapshot: {e}"))?;
        if g != l || g != d {
            return Err(format!(
                "snapshots disagree:\n  drm_gem   {g:?}\n  libdrm    {l:?}\n  drm_crate {d:?}"
            ));
        }
        let n = snap_drm_gem_calls(dev).map_err(|e| format!("drm_gem_calls: {e}"))?;
        if n != g.modes + g.formats + g.props + g.blob_bytes {
            return Err(format!("drm_gem_calls saw {n}, the snapshot {g:?}"));
        }
        if first.is_some_and(|f| f != g) {
            return Err(format!(
                "snapshot changed between rounds: {first:?} -> {g:?}"
            ));
        }
        first = Some(g);
    }
    if fd_count() != fds {
        return Err(format!("snapshots leaked fds: {fds} -> {}", fd_count()));
    }
    let s = first.unwrap_or_default();
    if s.planes == 0 || s.crtcs == 0 || s.connectors == 0 || s.props == 0 {
        return Err(format!("snapshot saw too little of vkms: {s:?}"));
    }
    Ok(s)
}

fn check_pipe(p: &Pipe<'_>) -> Result<(), String> {
    let fds = fd_count();
    for _ in 0..3 {
        p.test_drm_gem()
            .map_err(|e| format!("drm_gem TEST_ONLY: {e}"))?;
        p.test_libdrm()
            .map_err(|e| format!("libdrm TEST_ONLY: {e}"))?;
        for i in [1, 0] {
            p.flip_drm_gem(i)
                .map_err(|e| format!("drm_gem flip: {e}"))?;
        }
        for i in [1, 0] {
            p.flip_libdrm(i).map_err(|e| format!("libdrm flip: {e}"))?;
        }
    }
    // A request the kernel must refuse, through both: proves TEST_ONLY is checked at all.
    let bad: Vec<_> = p
        .entries
        .iter()
        .map(|&(o, pr, v)| {
            if v == u64::from(p.fbs[0].id().get()) {
                (o, pr, 0xdead_beef)
            } else {
                (o, pr, v)
            }
        })
        .collect();
    let flags = sys::DRM_MODE_ATOMIC_TEST_ONLY | sys::DRM_MODE_ATOMIC_ALLOW_MODESET;
    if sc::libdrm_atomic(p.dev.as_fd(), &bad, flags).is_ok() {
        return Err("libdrm TEST_ONLY accepted an unknown FB_ID".into());
    }
    if fd_count() != fds {
        return Err(format!("atomic/flip leaked fds: {fds} -> {}", fd_count()));
    }
    Ok(())
}

// ---- timing ----------------------------------------------------------------------------

fn paired_secs() -> f64 {
    std::env::var("DRM_GEM_BENCH_PAIRED_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10.0)
}

fn must<T, E: std::fmt::Display>(what: &str, r: Result<T, E>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{what}: {e}"),
    }
}

fn print_paired(all: &[Paired]) {
    println!("\nKMS paired pass, per-function median of the per-round times");
    println!("| group | function | median us/call |");
    println!("|---|---|---:|");
    for p in all {
        for (f, t) in &p.times {
            let mut t = t.clone();
            t.sort_by(f64::total_cmp);
            let m = paired::quantile(&t, 0.5).unwrap_or(f64::NAN);
            println!("| {} | {f} | {:.2} |", p.group, m / 1e3);
        }
    }
    println!("\nKMS paired ratios (median [q1, q3] of per-round time ratios; < 1: drm_gem faster)");
    println!("| group | pair | rounds x calls | median | q1 | q3 | drm_gem ns/call (median) |");
    println!("|---|---|---|---|---|---|---|");
    for p in all {
        let mut own: Vec<f64> = p
            .times
            .iter()
            .find(|(n, _)| *n == "drm_gem")
            .map(|(_, t)| t.clone())
            .unwrap_or_default();
        own.sort_by(f64::total_cmp);
        for other in ["libdrm", "drm_crate", "drm_gem_calls"] {
            let Some(r) = p.ratios("drm_gem", other) else {
                continue;
            };
            let q = |x| paired::quantile(&r, x).map_or("-".into(), |v| format!("{v:.3}"));
            println!(
                "| {} | drm_gem/{other} | {} x {} | {} | {} | {} | {:.0} |",
                p.group,
                p.rounds,
                p.calls,
                q(0.5),
                q(0.25),
                q(0.75),
                paired::quantile(&own, 0.5).unwrap_or(f64::NAN)
            );
        }
    }
}

fn bench(c: &mut Criterion, snap_dev: &Device, pipe: &Pipe<'_>) -> Vec<Paired> {
    let budget = Duration::from_secs_f64(paired_secs());
    let mut out = Vec::new();
    let fd = snap_dev.as_fd();
    {
        let mut g = c.benchmark_group("kms_snapshot");
        g.sampling_mode(SamplingMode::Flat);
        g.bench_function("drm_gem", |b| {
            b.iter(|| must("drm_gem", snap_drm_gem(snap_dev)))
        });
        g.bench_function("libdrm", |b| {
            b.iter(|| must("libdrm", sc::libdrm_snapshot(fd)))
        });
        g.bench_function("drm_crate", |b| b.iter(|| must("drm", snap_drm(Card(fd)))));
        g.bench_function("drm_gem_calls", |b| {
            b.iter(|| must("drm_gem_calls", snap_drm_gem_calls(snap_dev)))
        });
        g.finish();
        if !budget.is_zero() {
            let mut ops: Vec<Op<'_>> = vec![
                (
                    "drm_gem",
                    Box::new(|| drop(black_box(must("drm_gem", snap_drm_gem(snap_dev))))),
                ),
                (
                    "libdrm",
                    Box::new(move || {
                        black_box(must("libdrm", sc::libdrm_snapshot(fd)));
                    }),
                ),
                (
                    "drm_crate",
                    Box::new(move || {
                        black_box(must("drm", snap_drm(Card(fd))));
                    }),
                ),
                (
                    "drm_gem_calls",
                    Box::new(|| {
                        black_box(must("drm_gem_calls", snap_drm_gem_calls(snap_dev)));
                    }),
                ),
            ];
            out.push(paired::run("kms_snapshot", &mut ops, budget));
        }
    }
    {
        let mut g = c.benchmark_group("atomic_test_only");
        g.bench_function("drm_gem", |b| {
            b.iter(|| must("drm_gem", pipe.test_drm_gem()))
        });
        g.bench_function("libdrm", |b| b.iter(|| must("libdrm", pipe.test_libdrm())));
        g.finish();
        if !budget.is_zero() {
            let mut ops: Vec<Op<'_>> = vec![
                ("drm_gem", Box::new(|| must("drm_gem", pipe.test_drm_gem()))),
                ("libdrm", Box::new(|| must("libdrm", pipe.test_libdrm()))),
            ];
            out.push(paired::run("atomic_test_only", &mut ops, budget));
        }
    }
    {
        // Each iteration flips to the other framebuffer and waits for the event: one vblank
        // period of vkms's 60 Hz timer per call, whatever the library.
        let mut g = c.benchmark_group("page_flip_roundtrip");
        g.sampling_mode(SamplingMode::Flat).sample_size(10);
        let mut k = 0usize;
        g.bench_function("drm_gem", |b| {
            b.iter(|| {
                k ^= 1;
                must("drm_gem", pipe.flip_drm_gem(k))
            })
        });
        g.bench_function("libdrm", |b| {
            b.iter(|| {
                k ^= 1;
                must("libdrm", pipe.flip_libdrm(k))
            })
        });
        g.finish();
        if !budget.is_zero() {
            let k = std::cell::Cell::new(k);
            let next = || {
                k.set(k.get() ^ 1);
                k.get()
            };
            let mut ops: Vec<Op<'_>> = vec![
                (
                    "drm_gem",
                    Box::new(|| must("drm_gem", pipe.flip_drm_gem(next()))),
                ),
                (
                    "libdrm",
                    Box::new(|| must("libdrm", pipe.flip_libdrm(next()))),
                ),
            ];
            out.push(paired::run("page_flip_roundtrip", &mut ops, budget));
        }
    }
    out
}

fn run(args: &[String]) -> Result<(), String> {
    if let Some(i) = args.iter().position(|a| a == "--count") {
        let which = args.get(i + 1).ok_or("--count needs an implementation")?;
        return count_one(which);
    }
    support::criterion_home();
    let pipe_dev = match open_vkms() {
        Ok(d) => d,
        Err(e) if strict() => return Err(format!("no vkms primary node in this guest: {e}")),
        Err(e) => {
            println!("SKIP: kms benchmarks need vkms ({e})");
            return Ok(());
        }
    };
    // A second open file for the snapshots: it owns no framebuffer, so `Snapshot::take` has
    // no GETFB2 to make there that the peers would not make either.
    let snap_dev = open_vkms().map_err(|e| format!("second vkms open: {e}"))?;
    let pipe = light(&pipe_dev)?;
    let result = (|| {
        let s = check_snapshots(&snap_dev)?;
        println!("kms: the three snapshots agree: {s:?}");
        check_pipe(&pipe)?;
        println!("kms: TEST_ONLY and flip round trips agree (drm_gem, libdrm)");
        if !args.iter().any(|a| a == "--bench") {
            return Ok(());
        }
        let mut c = Criterion::default().configure_from_args();
        let paired = bench(&mut c, &snap_dev, &pipe);
        c.final_summary();
        print_paired(&paired);
        Ok(())
    })();
    let off = pipe.off();
    result.and(off)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kms bench: FAIL: {e}");
            ExitCode::FAILURE
        }
    }
}
