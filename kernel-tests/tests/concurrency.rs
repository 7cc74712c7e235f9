//! Threads sharing one `Device` in real guests: imports and drops of one dma-buf racing
//! dumb-buffer creation and destruction (the GEM handle table against the kernel's), and
//! two threads draining DRM events from one fd.
//!
//! Iterations: `KERNEL_TESTS_CONCURRENCY_ITERS` per importer thread (default
//! [`ITERATIONS`]).

use drm_gem::kms::{Event, FbSpec, Snapshot};
use drm_gem::{ClientCap, Device, DumbBuffer, DumbSpec, NodeKind, PrimeFlags};
use ioctl_sys::drm as sys;
use kernel_tests::{open_fds, require_feature, skip};
use rustix::fd::AsFd;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Importer threads.
const IMPORTERS: usize = 8;
/// Threads creating and destroying dumb buffers meanwhile.
const CREATORS: usize = 2;
/// Imports (and drops) per importer thread unless the environment says otherwise.
const ITERATIONS: usize = 10_000;
/// How much later than its timeout a wait may come back (TCG).
const SLACK: Duration = Duration::from_secs(2);

fn iterations() -> usize {
    std::env::var("KERNEL_TESTS_CONCURRENCY_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(ITERATIONS)
}

fn spec(w: u32, h: u32) -> DumbSpec {
    DumbSpec {
        width: w,
        height: h,
        bpp: 32,
    }
}

/// The handles in `1..=max` that this open file has, as the kernel sees them: MAP_DUMB
/// answers ENOENT for a handle the file does not have.
fn kernel_handles(dev: &Device, max: u32) -> Vec<u32> {
    (1..=max)
        .filter(|&h| {
            kernel_tests::raw::map_dumb(
                dev.as_fd(),
                sys::drm_mode_map_dumb {
                    handle: h,
                    ..Default::default()
                },
            )
            .is_ok()
        })
        .collect()
}

/// Every failure seen by a worker thread, kept (the first few) for the report.
#[derive(Default)]
struct Failures {
    count: AtomicUsize,
    first: Mutex<Vec<String>>,
}

impl Failures {
    fn add(&self, what: String) {
        if self.count.fetch_add(1, Ordering::Relaxed) < 8 {
            self.first.lock().unwrap().push(what);
        }
    }
}

#[test]
fn imports_and_drops_of_one_dmabuf_race_dumb_creates_and_destroys() {
    require_feature!("vgem");
    let Ok(dev) = Device::open_driver("vgem", Some(NodeKind::Primary)) else {
        skip!("no vgem primary node")
    };
    let n = iterations();
    let fds0 = open_fds();
    let handles0 = kernel_handles(&dev, 64);
    const TAG: &[u8] = b"the shared buffer";
    let mut shared = DumbBuffer::create(&dev, spec(64, 64)).expect("CREATE_DUMB");
    let size = shared.size();
    shared.map().unwrap().write_at(0, TAG).unwrap();
    let d = dev
        .export(shared.gem(), PrimeFlags::default())
        .expect("export");
    // Without the creating handle, imports make one handle (the kernel's PRIME cache gives
    // every import the same number while one is open) that the last owner closes.
    drop(shared);
    let failures = Failures::default();
    let max_handle = AtomicU32::new(0);
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        let mut importers = Vec::new();
        for t in 0..IMPORTERS {
            let (dev, d, failures, max_handle) = (&dev, &d, &failures, &max_handle);
            importers.push(s.spawn(move || {
                for i in 0..n {
                    let mut o = match dev.import(d.as_fd()) {
                        Ok(o) => o,
                        Err(e) => {
                            failures.add(format!("importer {t}/{i}: import: {e}"));
                            continue;
                        }
                    };
                    let h = o.handle().get();
                    max_handle.fetch_max(h, Ordering::Relaxed);
                    if i % 16 == 0 {
                        // The handle must still name the shared buffer: its tag, its size.
                        let mut got = [0u8; TAG.len()];
                        match o.map(size as usize) {
                            Ok(m) => {
                                m.read_at(0, &mut got).unwrap();
                                if got != TAG {
                                    failures.add(format!(
                                        "importer {t}/{i}: handle {h} maps another buffer \
                                         ({:?})",
                                        String::from_utf8_lossy(&got)
                                    ));
                                }
                            }
                            Err(e) => failures.add(format!(
                                "importer {t}/{i}: handle {h} of a live import: {e}"
                            )),
                        }
                    } else if let Err(e) = kernel_tests::raw::map_dumb(
                        dev.as_fd(),
                        sys::drm_mode_map_dumb {
                            handle: h,
                            ..Default::default()
                        },
                    ) {
                        failures.add(format!(
                            "importer {t}/{i}: MAP_DUMB of live handle {h}: {e:?}"
                        ));
                    }
                    drop(o);
                }
            }));
        }
        for t in 0..CREATORS {
            let (dev, failures, max_handle, stop) = (&dev, &failures, &max_handle, &stop);
            s.spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let tag = format!("creator {t} buffer {i}");
                    let mut b = match DumbBuffer::create(dev, spec(32, 32)) {
                        Ok(b) => b,
                        Err(e) => {
                            failures.add(format!("creator {t}/{i}: create: {e}"));
                            continue;
                        }
                    };
                    let h = b.handle().get();
                    max_handle.fetch_max(h, Ordering::Relaxed);
                    let mut got = vec![0u8; tag.len()];
                    let r = b.map().and_then(|mut m| {
                        m.write_at(0, tag.as_bytes())?;
                        std::thread::yield_now();
                        m.read_at(0, &mut got)
                    });
                    match r {
                        Ok(()) if got == tag.as_bytes() => {}
                        Ok(()) => failures.add(format!(
                            "creator {t}/{i}: handle {h} maps another buffer ({:?})",
                            String::from_utf8_lossy(&got)
                        )),
                        Err(e) => failures.add(format!("creator {t}/{i}: handle {h}: {e}")),
                    }
                    // Its handle must still be there for the destroy: nobody closed it.
                    if b.map_offset().is_err() {
                        failures.add(format!("creator {t}/{i}: handle {h} closed under us"));
                        let _ = b.into_raw();
                    }
                    i += 1;
                }
            });
        }
        // The creators run until the importers are done.
        for i in importers {
            if i.join().is_err() {
                failures.add("an importer panicked".into());
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    let took = t0.elapsed();
    let count = failures.count.load(Ordering::Relaxed);
    assert_eq!(
        count,
        0,
        "{count} failures in {IMPORTERS} x {n} imports; first: {:#?}",
        failures.first.lock().unwrap()
    );
    drop(d);
    assert_eq!(dev.live_handles(), 0, "handle table not empty");
    let max = max_handle.load(Ordering::Relaxed) + 16;
    assert_eq!(
        kernel_handles(&dev, max),
        handles0,
        "the kernel still has handles of this file (probed 1..={max})"
    );
    assert_eq!(open_fds(), fds0, "fds leaked");
    eprintln!("{IMPORTERS} importers x {n} iterations, {CREATORS} creators: {took:?}");
}

/// Opens vkms's primary node (O_NONBLOCK kept when `nonblocking`: an adopted fd), becomes
/// master and lights its CRTC with a 1024x768 framebuffer, so that vblank events flow. The
/// device is leaked: reader threads that might never return borrow it.
fn lit_vkms(nonblocking: bool) -> Option<&'static Device> {
    let node = drm_gem::enumerate()
        .ok()?
        .into_iter()
        .find(|n| n.kind == NodeKind::Primary && n.driver.as_deref() == Some("vkms"))?;
    let dev = if nonblocking {
        use rustix::fs::{Mode, OFlags};
        let fd = rustix::fs::open(
            &node.path,
            OFlags::RDWR | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::empty(),
        )
        .ok()?;
        Device::from_fd(fd).ok()?
    } else {
        Device::open(&node.path).ok()?
    };
    let dev: &'static Device = Box::leak(Box::new(dev));
    dev.set_client_cap(ClientCap::UniversalPlanes, 1).ok()?;
    // Atomic, for kms_all_off (legacy SETCRTC still works with it).
    dev.set_client_cap(ClientCap::Atomic, 1).ok()?;
    dev.set_master().ok();
    kernel_tests::kms_all_off(dev).ok();
    let snap = Snapshot::take(dev).unwrap();
    let crtc = snap.resources.crtcs[0];
    let (conn, mode) = kernel_tests::vkms_output(dev, &snap);
    let buf: &'static DumbBuffer<&'static Device> =
        Box::leak(Box::new(DumbBuffer::create(dev, spec(1024, 768)).unwrap()));
    let fb = dev
        .add_framebuffer(&FbSpec::single(
            1024,
            768,
            drm_gem::DrmFourcc::Xrgb8888,
            buf.handle(),
            buf.pitch(),
        ))
        .unwrap();
    dev.set_crtc(crtc, fb.id(), (0, 0), &[conn], &mode)
        .expect("SETCRTC");
    std::mem::forget(fb);
    Some(dev)
}

/// Two threads read events from one fd while the main thread queues `EVENTS` vblank
/// events: every event is read exactly once, each `read_events(200 ms)` comes back within
/// its timeout (plus [`SLACK`]) even when the other thread took the events it woke for, and
/// an empty answer comes only from a timeout (no spinning: calls stay near the number of
/// timeouts that fit in the run plus the events).
fn two_readers_drain(nonblocking: bool) {
    const EVENTS: u64 = 60;
    const WAIT: Duration = Duration::from_millis(200);
    let Some(dev) = lit_vkms(nonblocking) else {
        skip!("no vkms primary node to light")
    };
    let got = std::sync::Arc::new(Mutex::new(Vec::new()));
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let t0 = Instant::now();
    for r in 0..2 {
        let (got, stop, tx) = (got.clone(), stop.clone(), tx.clone());
        std::thread::spawn(move || {
            let (mut calls, mut slow) = (0u64, Vec::new());
            loop {
                let t = Instant::now();
                let evs = dev.read_events(Some(WAIT));
                calls += 1;
                if t.elapsed() > WAIT + SLACK {
                    slow.push(t.elapsed());
                }
                match evs {
                    Ok(evs) if evs.is_empty() => {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                    }
                    Ok(evs) => {
                        for e in evs {
                            match e {
                                Event::Vblank(v) => got.lock().unwrap().push((r, v.user_data)),
                                other => panic!("reader {r}: unexpected event {other:?}"),
                            }
                        }
                    }
                    Err(e) => panic!("reader {r}: {e}"),
                }
            }
            let _ = tx.send((r, calls, slow));
        });
    }
    for i in 0..EVENTS {
        // At most 10 queued at a time (the file's event space is 4 KiB).
        while i - got.lock().unwrap().len() as u64 >= 10 {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "events stopped coming"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        dev.wait_vblank(0, 1 + (i % 3) as u32, Some(i))
            .expect("WAIT_VBLANK with an event");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while (got.lock().unwrap().len() as u64) < EVENTS && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    let mut total_calls = 0;
    for _ in 0..2 {
        match rx.recv_timeout(WAIT + SLACK + SLACK) {
            Ok((r, calls, slow)) => {
                assert!(slow.is_empty(), "reader {r}: read_events overran: {slow:?}");
                total_calls += calls;
            }
            Err(_) => panic!(
                "a reader did not come back from read_events({WAIT:?}) within {:?} \
                 (blocked in read, or spinning)",
                WAIT + SLACK + SLACK
            ),
        }
    }
    let took = t0.elapsed();
    let mut seen: Vec<u64> = got.lock().unwrap().iter().map(|&(_, u)| u).collect();
    let by_reader = got.lock().unwrap().iter().filter(|&&(r, _)| r == 0).count();
    seen.sort_unstable();
    assert_eq!(
        seen,
        (0..EVENTS).collect::<Vec<_>>(),
        "events lost or read twice"
    );
    // Each call ends with events or a timeout; wake-ups lost to the other reader go back
    // to waiting inside the call.
    let bound = 2 * (took.as_millis() as u64 / WAIT.as_millis() as u64 + 2) + EVENTS;
    assert!(
        total_calls <= bound,
        "{total_calls} read_events calls in {took:?}: spinning?"
    );
    // Leave the device as found for a later test in this process (the Device is leaked
    // for the readers): everything off, no master.
    kernel_tests::kms_all_off(dev).ok();
    dev.drop_master().ok();
    eprintln!(
        "{EVENTS} events, reader 0 got {by_reader}, {total_calls} calls in {took:?} \
         (nonblocking fd: {nonblocking})"
    );
}

#[test]
fn two_threads_drain_events_from_one_fd() {
    require_feature!("vkms");
    two_readers_drain(false);
}

#[test]
fn two_threads_drain_events_from_one_adopted_nonblocking_fd() {
    require_feature!("vkms");
    two_readers_drain(true);
}
