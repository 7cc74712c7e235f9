//! vgem fences in real guests: the way to get real, CPU-signalled fences on a dma-buf
//! without a GPU. Read and write fences as seen by poll, `DMA_BUF_IOCTL_SYNC` and sync_file
//! export (6.0+), RAII signalling, the kernel's 10 s auto-signal, and bad input.

#[macro_use]
mod fence_common;

use drm_gem::driver::vgem::{Vgem, VgemFenceAccess, VgemFenceId};
use drm_gem::{
    Device, DmaBuf, DmaBufSync, DumbBuffer, DumbSpec, Errno, FenceStatus, GemHandle, PrimeFlags,
    raw,
};
use fence_common::{expect_errno_quiet, expect_unsupported, fd_count, kernel_at_least};
use kernel_tests::{require_driver, unchanged};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const ZERO: Option<Duration> = Some(Duration::ZERO);
const READ: DmaBufSync = DmaBufSync::READ;
const WRITE: DmaBufSync = DmaBufSync::WRITE;
const ATTACH: &str = "DRM_IOCTL_VGEM_FENCE_ATTACH";
const SIGNAL: &str = "DRM_IOCTL_VGEM_FENCE_SIGNAL";

fn vgem_dmabuf(dev: &Device) -> (DumbBuffer<&Device>, DmaBuf) {
    let buf = DumbBuffer::create(
        dev,
        DumbSpec {
            width: 16,
            height: 16,
            bpp: 32,
        },
    )
    .expect("vgem CREATE_DUMB");
    let d = dev.export(buf.gem(), PrimeFlags::default()).unwrap();
    (buf, d)
}

/// Whether `DMA_BUF_IOCTL_EXPORT_SYNC_FILE` exists (Linux 6.0+: 20e10881a043, "dma-buf:
/// Add an API for exporting sync files (v14)").
fn sync_files() -> bool {
    kernel_at_least(6, 0)
}

/// The status of the fences a `side` of `d` waits for, where the kernel can export them.
fn status(d: &DmaBuf, side: DmaBufSync) -> Option<FenceStatus> {
    sync_files().then(|| d.export_sync_file(side).unwrap().info().unwrap().status)
}

#[test]
fn vgem_is_checked_by_driver_name() {
    let vgem_dev = require_driver!("vgem", &["vgem"]);
    let vkms = require_driver!("vkms", &["vkms"]);
    assert!(Vgem::new(&vgem_dev).is_ok());
    expect_unsupported(
        "Vgem::new on vkms",
        unchanged(&vkms, "Vgem::new on vkms", || Vgem::new(&vkms)),
    );
}

#[test]
fn write_fence_holds_readers_and_writers_until_signalled() {
    let dev = require_driver!("vgem", &["vgem"]);
    let vgem = Vgem::new(&dev).unwrap();
    let (buf, d) = vgem_dmabuf(&dev);
    let before = fd_count();
    assert!(d.wait_fences(READ, ZERO).unwrap());
    let fence = vgem
        .attach_fence(buf.handle(), VgemFenceAccess::Write)
        .expect("VGEM_FENCE_ATTACH");
    assert!(
        !d.wait_fences(READ, ZERO).unwrap(),
        "POLLIN waits for writers"
    );
    assert!(
        !d.wait_fences(WRITE, ZERO).unwrap(),
        "POLLOUT waits for all"
    );
    if sync_files() {
        let sf = d.export_sync_file(READ).unwrap();
        let info = sf.info().unwrap();
        assert_eq!(info.status, FenceStatus::Active);
        assert_eq!(info.fences.len(), 1, "{info:?}");
        assert_eq!(info.fences[0].driver_name, "vgem");
        assert!(!sf.wait(ZERO).unwrap());
        fence.signal().expect("VGEM_FENCE_SIGNAL");
        assert!(sf.wait(ZERO).unwrap());
        let info = sf.info().unwrap();
        assert_eq!(info.status, FenceStatus::Signaled);
        assert!(info.fences[0].timestamp_ns > 0);
    } else {
        expect_unsupported(
            "EXPORT_SYNC_FILE on 5.10",
            unchanged(&dev, "EXPORT_SYNC_FILE on 5.10", || {
                d.export_sync_file(READ)
            }),
        );
        fence.signal().expect("VGEM_FENCE_SIGNAL");
    }
    assert!(d.wait_fences(READ, ZERO).unwrap());
    assert!(d.wait_fences(WRITE, ZERO).unwrap());
    assert_eq!(fd_count(), before, "fds leaked");
}

#[test]
fn read_fences_hold_only_writers_and_conflict_with_a_write_fence() {
    let dev = require_driver!("vgem", &["vgem"]);
    let vgem = Vgem::new(&dev).unwrap();
    let (buf, d) = vgem_dmabuf(&dev);
    let r1 = vgem
        .attach_fence(buf.handle(), VgemFenceAccess::Read)
        .unwrap();
    assert!(
        d.wait_fences(READ, ZERO).unwrap(),
        "readers do not wait for readers"
    );
    assert!(!d.wait_fences(WRITE, ZERO).unwrap(), "writers do");
    assert_eq!(
        status(&d, READ),
        sync_files().then_some(FenceStatus::Signaled)
    );
    assert_eq!(
        status(&d, WRITE),
        sync_files().then_some(FenceStatus::Active)
    );
    let r2 = vgem
        .attach_fence(buf.handle(), VgemFenceAccess::Read)
        .expect("a second reader");
    assert_ne!(r1.id(), r2.id());
    expect_errno_quiet(
        &dev,
        "write fence over unsignalled readers",
        || vgem.attach_fence(buf.handle(), VgemFenceAccess::Write),
        ATTACH,
        Errno::BUSY,
    );
    r1.signal().unwrap();
    assert!(
        !d.wait_fences(WRITE, ZERO).unwrap(),
        "r2 still holds writers"
    );
    r2.signal().unwrap();
    assert!(d.wait_fences(WRITE, ZERO).unwrap());
    let w = vgem
        .attach_fence(buf.handle(), VgemFenceAccess::Write)
        .expect("write fence once the readers signalled");
    expect_errno_quiet(
        &dev,
        "read fence over an unsignalled writer",
        || vgem.attach_fence(buf.handle(), VgemFenceAccess::Read),
        ATTACH,
        Errno::BUSY,
    );
    drop(w);
    assert!(
        d.wait_fences(READ, ZERO).unwrap(),
        "dropping the fence signalled it"
    );
}

#[test]
fn cpu_access_sync_waits_for_the_write_fence() {
    let dev = require_driver!("vgem", &["vgem"]);
    let vgem = Vgem::new(&dev).unwrap();
    let (buf, d) = vgem_dmabuf(&dev);
    let fence = vgem
        .attach_fence(buf.handle(), VgemFenceAccess::Write)
        .unwrap();
    let sf = sync_files().then(|| d.export_sync_file(READ).unwrap());
    let signalled = AtomicBool::new(false);
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let access = d.begin_cpu_access(true, false);
            let seen = signalled.load(Ordering::SeqCst);
            let status = sf.as_ref().map(|f| f.info().unwrap().status);
            (access.map(drop), seen, status)
        });
        std::thread::sleep(Duration::from_millis(100));
        signalled.store(true, Ordering::SeqCst);
        fence.signal().unwrap();
        let (r, seen, status) = reader.join().unwrap();
        r.expect("DMA_BUF_IOCTL_SYNC start");
        assert!(
            seen,
            "DMA_BUF_IOCTL_SYNC returned before the fence was signalled"
        );
        if let Some(st) = status {
            assert_eq!(st, FenceStatus::Signaled);
        }
    });
}

#[test]
fn poll_waits_for_the_fence() {
    let dev = require_driver!("vgem", &["vgem"]);
    let vgem = Vgem::new(&dev).unwrap();
    let (buf, d) = vgem_dmabuf(&dev);
    let fence = vgem
        .attach_fence(buf.handle(), VgemFenceAccess::Read)
        .unwrap();
    let signalled = AtomicBool::new(false);
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let r = d.wait_fences(WRITE, None);
            (r, signalled.load(Ordering::SeqCst))
        });
        std::thread::sleep(Duration::from_millis(100));
        signalled.store(true, Ordering::SeqCst);
        fence.signal().unwrap();
        let (r, seen) = writer.join().unwrap();
        assert!(r.expect("poll"), "the wait was satisfied");
        assert!(seen, "poll returned before the read fence was signalled");
    });
}

#[test]
fn fence_given_up_is_signalled_by_id_and_only_once() {
    let dev = require_driver!("vgem", &["vgem"]);
    let vgem = Vgem::new(&dev).unwrap();
    let (buf, d) = vgem_dmabuf(&dev);
    let id = vgem
        .attach_fence(buf.handle(), VgemFenceAccess::Write)
        .unwrap()
        .into_raw();
    assert!(
        !d.wait_fences(READ, ZERO).unwrap(),
        "into_raw does not signal"
    );
    vgem.signal_fence(id).expect("signal by id");
    assert!(d.wait_fences(READ, ZERO).unwrap());
    expect_errno_quiet(
        &dev,
        "double signal",
        || vgem.signal_fence(id),
        SIGNAL,
        Errno::NOENT,
    );
}

#[test]
fn kernel_signals_a_forgotten_fence_after_its_timeout() {
    let dev = require_driver!("vgem", &["vgem"]);
    let vgem = Vgem::new(&dev).unwrap();
    let (buf, d) = vgem_dmabuf(&dev);
    let id = vgem
        .attach_fence(buf.handle(), VgemFenceAccess::Write)
        .unwrap()
        .into_raw();
    assert!(!d.wait_fences(READ, ZERO).unwrap());
    // Nobody signals it: the kernel's timer does (VGEM_FENCE_TIMEOUT, 10 s).
    assert!(d.wait_fences(READ, None).unwrap());
    expect_errno_quiet(
        &dev,
        "signal after the kernel's timeout",
        || vgem.signal_fence(id),
        SIGNAL,
        Errno::TIMEDOUT,
    );
    expect_errno_quiet(
        &dev,
        "signal again",
        || vgem.signal_fence(id),
        SIGNAL,
        Errno::NOENT,
    );
}

#[test]
fn bad_input_is_rejected_with_exact_errnos() {
    let dev = require_driver!("vgem", &["vgem"]);
    let vgem = Vgem::new(&dev).unwrap();
    let (buf, d) = vgem_dmabuf(&dev);
    let before = fd_count();
    let h = buf.handle().get();
    let (inval, noent) = (Errno::INVAL, Errno::NOENT);
    expect_errno_quiet(
        &dev,
        "attach: unknown flag",
        || raw::vgem_fence_attach(&vgem, h, 2, 0),
        ATTACH,
        inval,
    );
    expect_errno_quiet(
        &dev,
        "attach: every flag",
        || raw::vgem_fence_attach(&vgem, h, u32::MAX, 0),
        ATTACH,
        inval,
    );
    expect_errno_quiet(
        &dev,
        "attach: pad",
        || raw::vgem_fence_attach(&vgem, h, 0, 1),
        ATTACH,
        inval,
    );
    expect_errno_quiet(
        &dev,
        "attach: unknown handle",
        || vgem.attach_fence(GemHandle::new(0x7fff_fff0).unwrap(), VgemFenceAccess::Read),
        ATTACH,
        noent,
    );
    expect_errno_quiet(
        &dev,
        "attach: handle 0",
        || raw::vgem_fence_attach(&vgem, 0, 0, 0),
        ATTACH,
        noent,
    );
    assert!(
        d.wait_fences(WRITE, ZERO).unwrap(),
        "no fence was attached by the failures"
    );

    let unknown = VgemFenceId::new(0x7fff_fff0).unwrap();
    expect_errno_quiet(
        &dev,
        "signal: unknown id",
        || vgem.signal_fence(unknown),
        SIGNAL,
        noent,
    );
    expect_errno_quiet(
        &dev,
        "signal: id 0",
        || raw::vgem_fence_signal(&vgem, 0, 0),
        SIGNAL,
        noent,
    );
    let f = vgem
        .attach_fence(buf.handle(), VgemFenceAccess::Write)
        .unwrap();
    expect_errno_quiet(
        &dev,
        "signal: flags",
        || raw::vgem_fence_signal(&vgem, f.id().get(), 1),
        SIGNAL,
        inval,
    );
    assert!(
        !d.wait_fences(READ, ZERO).unwrap(),
        "the rejected signal did nothing"
    );
    let id = f.id();
    f.signal().unwrap();
    expect_errno_quiet(
        &dev,
        "signal: twice",
        || vgem.signal_fence(id),
        SIGNAL,
        noent,
    );
    // A raw attach returns an id nobody owns; signal it by hand.
    let raw_id = raw::vgem_fence_attach(&vgem, h, 1, 0).expect("raw write fence");
    raw::vgem_fence_signal(&vgem, raw_id, 0).expect("raw signal");
    assert!(d.wait_fences(WRITE, ZERO).unwrap());
    assert_eq!(fd_count(), before, "fds leaked");
}
