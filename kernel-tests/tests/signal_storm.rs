//! Timed waits under a signal storm (SIGALRM every 100 us to every thread, handled without
//! SA_RESTART; `kernel_tests::storm`): each must still give up when its timeout has passed.
//! A wait that restarts its whole relative timeout after every EINTR never returns here.
//!
//! The bound is the timeout plus [`SLACK`]: a "did it return at all" check under TCG, not a
//! measure of speed. Each test starts the storm itself, so it runs in every guest lane.

#[macro_use]
mod fence_common;

use drm_gem::driver::vgem::{Vgem, VgemFenceAccess};
use drm_gem::{Device, DmaBuf, DmaBufSync, DumbBuffer, DumbSpec, NodeKind, PrimeFlags};
use drm_gem::{SwSyncTimeline, SyncFile};
use kernel_tests::{require_feature, skip, storm};
use std::time::{Duration, Instant};

/// What every wait here asks for.
const TIMEOUT: Duration = Duration::from_millis(50);
/// How much later than [`TIMEOUT`] a wait may come back (TCG, a loaded host).
const SLACK: Duration = Duration::from_secs(2);

/// Runs `wait` (a timed wait that must time out) on its own thread under the storm and
/// checks that it came back with `false` (timed out) within `TIMEOUT + SLACK`, having been
/// hit by signals while it waited. A wait that never returns fails the test (its thread is
/// left behind; the process ends with the test).
fn times_out_under_storm(
    what: &str,
    wait: impl FnOnce() -> drm_gem::Result<bool> + Send + 'static,
) {
    storm::start();
    let before = storm::delivered();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // The storm must be hitting this very thread before the wait starts.
        if !storm::wait_until_hit(SLACK) {
            return;
        }
        let (here, t0) = (storm::delivered_here(), Instant::now());
        let r = wait();
        let _ = tx.send((r, t0.elapsed(), storm::delivered_here() - here));
    });
    match rx.recv_timeout(TIMEOUT + SLACK + SLACK) {
        Ok((Ok(false), took, hits)) => {
            eprintln!("{what}: timed out after {took:?}, interrupted by {hits} signals");
            assert!(took >= TIMEOUT, "{what} came back early: {took:?}");
            assert!(took <= TIMEOUT + SLACK, "{what} took {took:?}");
            assert!(hits > 0, "the storm did not hit the thread during {what}");
        }
        Ok((other, took, _)) => panic!("{what}: expected a timeout, got {other:?} after {took:?}"),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            panic!("the storm did not reach the waiting thread within {SLACK:?}")
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!(
            "{what} did not return within {:?} (timeout {TIMEOUT:?}) under the signal storm \
             ({} signals so far)",
            TIMEOUT + SLACK,
            storm::delivered() - before
        ),
    }
}

fn vgem() -> Option<Device> {
    kernel_tests::open_driver(&["vgem"], NodeKind::Primary).expect("open vgem")
}

fn spec() -> DumbSpec {
    DumbSpec {
        width: 16,
        height: 16,
        bpp: 32,
    }
}

/// A vgem dumb buffer exported as a dma-buf with an unsignalled write fence on it. The
/// fence is given up raw (the kernel signals it after 10 s, or when the device closes), so
/// that the Device can move to the waiting thread with the buffer. Only for waits on a
/// sync_file exported from it (see the dma-buf test for why the dma-buf itself must not
/// close while a timed-out poll on it waits for the fence).
fn fenced_dmabuf(dev: &Device) -> DmaBuf {
    let vgem = Vgem::new(dev).expect("vgem");
    let buf = DumbBuffer::create(dev, spec()).expect("vgem CREATE_DUMB");
    let d = dev.export(buf.gem(), PrimeFlags::default()).unwrap();
    let _ = vgem
        .attach_fence(buf.handle(), VgemFenceAccess::Write)
        .expect("VGEM_FENCE_ATTACH")
        .into_raw();
    d
}

#[test]
fn sync_file_wait_times_out_under_the_storm() {
    // sw_sync where the kernel has it (debugfs); otherwise a vgem write fence exported as
    // a sync_file (stock kernels have no sw_sync; the export ioctl is 6.0+).
    let fence: SyncFile = match SwSyncTimeline::open() {
        Ok(tl) => {
            let f = tl
                .create_fence(1, "storm")
                .expect("SW_SYNC_IOC_CREATE_FENCE");
            // The timeline must outlive the wait (closing it signals the fence).
            std::mem::forget(tl);
            f
        }
        Err(e) => {
            if kernel_tests::expected("sw_sync") && kernel_tests::strict() {
                panic!("sw_sync expected on this kernel: {e}");
            }
            require_feature!("vgem");
            let Some(dev) = vgem() else {
                skip!("no sw_sync ({e}) and no vgem")
            };
            let d = fenced_dmabuf(&dev);
            // Probed, not keyed on a version: DMA_BUF_IOCTL_EXPORT_SYNC_FILE came in Linux 6.0
            // (ENOTTY before), and without it nothing here makes a sync_file.
            let f = match d.export_sync_file(DmaBufSync::READ) {
                Ok(f) => f,
                Err(x) if x.is_not_supported() => {
                    skip!("no sw_sync ({e}) and no DMA_BUF_IOCTL_EXPORT_SYNC_FILE ({x})")
                }
                Err(x) => panic!("EXPORT_SYNC_FILE: {x}"),
            };
            // The device must stay open (closing it signals the fence).
            std::mem::forget(dev);
            f
        }
    };
    assert!(
        !fence.wait(Some(Duration::ZERO)).unwrap(),
        "the fence is unsignalled"
    );
    times_out_under_storm("SyncFile::wait(50 ms)", move || fence.wait(Some(TIMEOUT)));
}

#[test]
fn dmabuf_wait_fences_times_out_under_the_storm() {
    require_feature!("vgem");
    let Some(dev) = vgem() else { skip!("no vgem") };
    let dev: &'static Device = Box::leak(Box::new(dev));
    let vgem = Vgem::new(dev).expect("vgem");
    let buf = DumbBuffer::create(dev, spec()).expect("vgem CREATE_DUMB");
    let d = dev.export(buf.gem(), PrimeFlags::default()).unwrap();
    let fence = vgem
        .attach_fence(buf.handle(), VgemFenceAccess::Write)
        .expect("VGEM_FENCE_ATTACH");
    std::mem::forget(buf);
    assert!(
        !d.wait_fences(DmaBufSync::READ, Some(Duration::ZERO))
            .unwrap()
    );
    times_out_under_storm("DmaBuf::wait_fences(READ, 50 ms)", move || {
        let r = d.wait_fences(DmaBufSync::READ, Some(TIMEOUT));
        // Signal before the dma-buf closes: Linux 5.10 hits a BUG_ON in dma_buf_release
        // when a dma-buf is released while a timed-out poll's fence callback is still
        // armed (fixed in 5.14, where poll holds a file reference).
        fence.signal().expect("VGEM_FENCE_SIGNAL");
        drop(d);
        r
    });
}

#[test]
fn kms_event_wait_times_out_under_the_storm() {
    require_feature!("vkms");
    let Ok(dev) = Device::open_driver("vkms", Some(NodeKind::Primary)) else {
        skip!("no vkms")
    };
    // Nothing was asked for, so no event comes: the wait must end at its timeout.
    times_out_under_storm("Device::read_events(50 ms)", move || {
        dev.read_events(Some(TIMEOUT)).map(|e| !e.is_empty())
    });
}

#[test]
fn waits_on_an_fd_that_never_becomes_ready_time_out_under_the_storm() {
    // The same poll paths on the read end of a pipe nobody writes: no device needed, so
    // this runs on the host too.
    let (r, w) = std::io::pipe().expect("pipe");
    let r = rustix::fd::OwnedFd::from(r);
    let r2 = r.try_clone().expect("dup");
    let f = SyncFile::from_fd(r);
    times_out_under_storm("SyncFile::wait(50 ms) on a pipe", move || {
        f.wait(Some(TIMEOUT))
    });
    let d = DmaBuf::from_fd(r2);
    times_out_under_storm("DmaBuf::wait_fences(READ, 50 ms) on a pipe", move || {
        d.wait_fences(DmaBufSync::READ, Some(TIMEOUT))
    });
    drop(w);
}

#[test]
fn open_of_a_fifo_returns_at_once() {
    let path = std::env::temp_dir().join(format!("storm-fifo-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("mkfifo");
    let p = path.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(Device::open(&p).map(|_| ()));
    });
    let r = rx.recv_timeout(SLACK);
    let _ = std::fs::remove_file(&path);
    match r {
        Ok(Err(drm_gem::Error::NotDrm { .. })) => {}
        Ok(other) => panic!("open of a FIFO: expected NotDrm, got {other:?}"),
        Err(_) => panic!("open of a FIFO did not return within {SLACK:?}"),
    }
}
