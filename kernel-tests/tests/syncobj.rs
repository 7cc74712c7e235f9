//! DRM sync objects in real guests: support on every driver (and the kernel's answer where
//! there is none), binary and timeline objects, waits, transfer, fd and sync_file interop
//! (with vgem as the fence source), eventfd, and IGT-style bad input with exact errnos.
//!
//! In the matrix only virtio-gpu on Linux 6.12 has sync objects; on older kernels the
//! positive tests assert that the probe says Unsupported, then skip loudly.

#[macro_use]
mod fence_common;

use drm_gem::driver::vgem::{Vgem, VgemFence, VgemFenceAccess};
use drm_gem::{
    Caps, Device, DmaBufSync, DumbBuffer, DumbSpec, Errno, Error, FenceStatus, NodeKind,
    PrimeFlags, SyncFile, Syncobj, SyncobjHandle, SyncobjTimeout, SyncobjWaitFlags, Syncobjs, raw,
};
use fence_common::{
    closed_fd, expect_errno, expect_errno_quiet, expect_unsupported, fd_count, kernel,
    kernel_at_least,
};
use kernel_tests::{open_driver, require_driver, unchanged};
use rustix::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const POLL: SyncobjTimeout = SyncobjTimeout::POLL;
const NONE: SyncobjWaitFlags = SyncobjWaitFlags::empty();
const SUBMIT: SyncobjWaitFlags = SyncobjWaitFlags::WAIT_FOR_SUBMIT;
/// A handle no test creates (handles are allocated from 1 upwards).
const UNKNOWN: u32 = 0x7fff_fff0;
/// `DRM_SYNCOBJ_HANDLE_TO_FD_FLAGS_EXPORT_SYNC_FILE` (drm.h).
const EXPORT_SYNC_FILE: u32 = 1;
/// `DRM_SYNCOBJ_FD_TO_HANDLE_FLAGS_IMPORT_SYNC_FILE` (drm.h).
const IMPORT_SYNC_FILE: u32 = 1;

/// What the probe must say for virtio-gpu on this kernel: sync objects from Linux 6.4
/// ("drm/virtio: Support sync objects"); timelines (DRIVER_SYNCOBJ_TIMELINE) are asserted
/// on 6.12, which has them, and taken as the probe says in 6.4-6.11.
fn virtio_support(dev: &Device) -> Option<Syncobjs<&Device>> {
    let (major, minor) = kernel();
    match dev.syncobjs() {
        Ok(s) => {
            assert!(
                kernel_at_least(6, 4),
                "virtio-gpu on Linux {major}.{minor} must not claim sync objects"
            );
            if kernel_at_least(6, 12) {
                assert!(s.timeline(), "virtio-gpu on 6.12 has timeline sync objects");
            }
            Some(s)
        }
        Err(e @ Error::Unsupported { .. }) => {
            assert!(
                !kernel_at_least(6, 4),
                "virtio-gpu on Linux {major}.{minor} must have sync objects: {e}"
            );
            expect_unsupported(
                "Syncobj::create",
                unchanged(dev, "Syncobj::create", || Syncobj::create(dev, false)),
            );
            None
        }
        Err(e) => panic!("probing sync objects on virtio-gpu: {e}"),
    }
}

/// The virtio-gpu device's sync objects, or a loud (non-failing) skip on kernels where the
/// driver has none, after asserting that the probe says so.
macro_rules! virtio_syncobjs {
    ($dev:expr) => {
        match virtio_support(&$dev) {
            Some(s) => s,
            None => skip_on_this_kernel!(
                "virtio-gpu has no sync objects on Linux {:?} (asserted: Unsupported)",
                kernel()
            ),
        }
    };
}

macro_rules! timeline_syncobjs {
    ($dev:expr) => {{
        let s = virtio_syncobjs!($dev);
        if !s.timeline() {
            skip_on_this_kernel!("virtio-gpu has no timeline sync objects on {:?}", kernel());
        }
        s
    }};
}

fn handle(raw: u32) -> SyncobjHandle {
    SyncobjHandle::new(raw).unwrap()
}

fn spec() -> DumbSpec {
    DumbSpec {
        width: 16,
        height: 16,
        bpp: 32,
    }
}

/// A vgem dumb buffer with an unsignalled write fence, and the sync_file a reader of its
/// dma-buf must wait for (`DMA_BUF_IOCTL_EXPORT_SYNC_FILE`, Linux 6.0+).
fn vgem_fenced<'d>(
    vgem: &Vgem<&'d Device>,
) -> (DumbBuffer<&'d Device>, VgemFence<&'d Device>, SyncFile) {
    let dev: &'d Device = vgem.device_ref();
    let buf = DumbBuffer::create(dev, spec()).expect("vgem CREATE_DUMB");
    let dmabuf = dev.export(buf.gem(), PrimeFlags::default()).unwrap();
    let fence = vgem
        .attach_fence(buf.handle(), VgemFenceAccess::Write)
        .expect("VGEM_FENCE_ATTACH");
    let sf = dmabuf
        .export_sync_file(DmaBufSync::READ)
        .expect("DMA_BUF_IOCTL_EXPORT_SYNC_FILE");
    assert_eq!(sf.info().unwrap().status, FenceStatus::Active);
    (buf, fence, sf)
}

macro_rules! vgem {
    ($dev:expr) => {
        Vgem::new(&$dev).expect("the vgem node is vgem")
    };
}

#[test]
fn support_follows_the_caps_and_the_kernel_answers_eopnotsupp_without_it() {
    kernel_tests::fds_shared();
    let drivers: [(&str, &[&str]); 5] = [
        ("vkms", &["vkms"]),
        ("vgem", &["vgem"]),
        ("virtio_gpu", &["virtio_gpu"]),
        ("bochs", &["bochs-drm", "bochs"]),
        ("qxl", &["qxl"]),
    ];
    if drm_gem::enumerate().is_err() {
        kernel_tests::skip!("no DRM nodes");
    }
    let before = fd_count();
    let mut unsupported_seen = 0;
    for (feature, names) in drivers {
        if !kernel_tests::expected(feature) {
            eprintln!("(this kernel is built without {feature})");
            continue;
        }
        let Some(dev) = open_driver(names, NodeKind::Primary).unwrap() else {
            kernel_tests::skip!("no DRM node of {names:?}");
        };
        let caps = Caps::probe(&dev).unwrap();
        let probe = dev.syncobjs();
        assert_eq!(
            probe.is_ok(),
            caps.syncobj,
            "{feature}: {probe:?} vs {caps:?}"
        );
        if feature == "virtio_gpu" {
            if virtio_support(&dev).is_some() {
                continue;
            }
        } else {
            assert!(!caps.syncobj, "{feature} has no sync objects");
        }
        unsupported_seen += 1;
        expect_unsupported(feature, probe);
        expect_unsupported(
            feature,
            unchanged(&dev, feature, || Syncobj::create(&dev, true)),
        );
        // Called anyway, every syncobj ioctl answers EOPNOTSUPP.
        let objs = Syncobjs::without_probe(&dev);
        let h = [handle(1)];
        let null = std::fs::File::open("/dev/null").unwrap();
        let e = Errno::OPNOTSUPP;
        let case = |what: &str| format!("{feature}: {what}");
        expect_errno_quiet(
            &dev,
            &case("create"),
            || objs.create(false),
            "DRM_IOCTL_SYNCOBJ_CREATE",
            e,
        );
        expect_errno_quiet(
            &dev,
            &case("destroy"),
            || raw::syncobj_destroy(&dev, 1, 0),
            "DRM_IOCTL_SYNCOBJ_DESTROY",
            e,
        );
        expect_errno_quiet(
            &dev,
            &case("handle to fd"),
            || raw::syncobj_handle_to_fd(&dev, 1, 0, 0),
            "DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD",
            e,
        );
        expect_errno_quiet(
            &dev,
            &case("fd to handle"),
            || objs.import(null.as_fd()),
            "DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE",
            e,
        );
        expect_errno_quiet(
            &dev,
            &case("wait"),
            || objs.wait(&h, NONE, POLL),
            "DRM_IOCTL_SYNCOBJ_WAIT",
            e,
        );
        expect_errno_quiet(
            &dev,
            &case("reset"),
            || objs.reset(&h),
            "DRM_IOCTL_SYNCOBJ_RESET",
            e,
        );
        expect_errno_quiet(
            &dev,
            &case("signal"),
            || objs.signal(&h),
            "DRM_IOCTL_SYNCOBJ_SIGNAL",
            e,
        );
        expect_errno_quiet(
            &dev,
            &case("timeline wait"),
            || objs.timeline_wait(&h, &[1], NONE, POLL),
            "DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT",
            e,
        );
        expect_errno_quiet(
            &dev,
            &case("timeline signal"),
            || objs.timeline_signal(&h, &[1]),
            "DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL",
            e,
        );
        expect_errno_quiet(
            &dev,
            &case("query"),
            || objs.query(&h, &mut [0], false),
            "DRM_IOCTL_SYNCOBJ_QUERY",
            e,
        );
        expect_errno_quiet(
            &dev,
            &case("transfer"),
            || objs.transfer(h[0], 0, h[0], 1, NONE),
            "DRM_IOCTL_SYNCOBJ_TRANSFER",
            e,
        );
        // EVENTFD: Linux 6.6+ ("drm/syncobj: add IOCTL to register an eventfd"); before,
        // DRM answers EINVAL for the unknown request.
        let eventfd_errno = if kernel_at_least(6, 6) {
            Errno::OPNOTSUPP
        } else {
            Errno::INVAL
        };
        expect_errno_quiet(
            &dev,
            &case("eventfd"),
            || raw::syncobj_eventfd(&dev, 1, 0, null.as_raw_fd(), 0, 0),
            "DRM_IOCTL_SYNCOBJ_EVENTFD",
            eventfd_errno,
        );
    }
    assert!(
        unsupported_seen >= 4,
        "vkms, vgem, bochs and qxl lack syncobj"
    );
    assert_eq!(fd_count(), before, "fds leaked");
}

#[test]
fn binary_create_signal_wait_reset() {
    let dev = require_driver!("virtio_gpu", &["virtio_gpu"]);
    let objs = virtio_syncobjs!(dev);
    let before = fd_count();
    let a = objs.create(false).expect("SYNCOBJ_CREATE");
    // No fence yet: a plain wait is EINVAL, a WAIT_FOR_SUBMIT one times out.
    expect_errno_quiet(
        &dev,
        "wait on an empty object",
        || a.wait(NONE, POLL),
        "DRM_IOCTL_SYNCOBJ_WAIT",
        Errno::INVAL,
    );
    assert!(!a.wait(SUBMIT, POLL).unwrap());
    assert!(
        !a.wait(SUBMIT, SyncobjTimeout::after(Duration::from_millis(20)))
            .unwrap()
    );
    a.signal().expect("SYNCOBJ_SIGNAL");
    assert!(a.wait(NONE, POLL).unwrap());
    a.reset().expect("SYNCOBJ_RESET");
    assert!(!a.wait(SUBMIT, POLL).unwrap());
    let s = objs.create(true).expect("create signalled");
    assert!(s.wait(NONE, POLL).unwrap());
    assert!(s.wait(NONE, SyncobjTimeout::FOREVER).unwrap());
    assert_ne!(a.handle(), s.handle());
    // The kernel's own answer on timeout is ETIME; the typed API turns it into false.
    expect_errno_quiet(
        &dev,
        "raw wait timing out",
        || raw::syncobj_wait(&dev, &[a.handle().get()], 0, SUBMIT.bits()),
        "DRM_IOCTL_SYNCOBJ_WAIT",
        Errno::TIME,
    );
    // into_raw gives up ownership: the handle then lives until destroyed by hand.
    let h = objs.create(false).unwrap().into_raw();
    raw::syncobj_destroy(&dev, h.get(), 0).expect("destroy of an into_raw handle");
    assert_eq!(fd_count(), before);
}

#[test]
fn waits_block_until_another_thread_signals() {
    let dev = require_driver!("virtio_gpu", &["virtio_gpu"]);
    let objs = virtio_syncobjs!(dev);
    let a = objs.create(false).unwrap();
    let signalled = AtomicBool::new(false);
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let r = a.wait(SUBMIT, SyncobjTimeout::FOREVER);
            (r, signalled.load(Ordering::SeqCst))
        });
        std::thread::sleep(Duration::from_millis(100));
        signalled.store(true, Ordering::SeqCst);
        a.signal().unwrap();
        let (r, seen) = waiter.join().unwrap();
        assert!(r.unwrap(), "the wait is satisfied");
        assert!(seen, "the wait returned before the object was signalled");
    });
}

#[test]
fn wait_any_and_wait_all() {
    let dev = require_driver!("virtio_gpu", &["virtio_gpu"]);
    let objs = virtio_syncobjs!(dev);
    let a = objs.create(false).unwrap();
    let b = objs.create(true).unwrap();
    let c = objs.create(false).unwrap();
    let hs = [a.handle(), b.handle(), c.handle()];
    let all = SUBMIT | SyncobjWaitFlags::WAIT_ALL;
    assert_eq!(
        objs.wait(&hs, SUBMIT, POLL).unwrap(),
        Some(1),
        "b signalled"
    );
    assert_eq!(objs.wait(&hs, all, POLL).unwrap(), None);
    objs.signal(&[a.handle(), c.handle()]).unwrap();
    assert!(objs.wait(&hs, all, POLL).unwrap().is_some());
    objs.reset(&hs).unwrap();
    assert_eq!(objs.wait(&hs, SUBMIT, POLL).unwrap(), None);
    c.signal().unwrap();
    assert_eq!(objs.wait(&hs, SUBMIT, POLL).unwrap(), Some(2));
}

#[test]
fn export_and_import_share_one_object() {
    let dev = require_driver!("virtio_gpu", &["virtio_gpu"]);
    let objs = virtio_syncobjs!(dev);
    let other = open_driver(&["virtio_gpu"], NodeKind::Primary)
        .unwrap()
        .unwrap();
    let other_objs = other.syncobjs().unwrap();
    let before = fd_count();
    let a = objs.create(false).unwrap();
    let fd = a.export().expect("SYNCOBJ_HANDLE_TO_FD");
    let mine = objs.import(fd.as_fd()).expect("import on the same file");
    assert_ne!(mine.handle(), a.handle(), "each import makes a new handle");
    let theirs = other_objs
        .import(fd.as_fd())
        .expect("import on another file");
    theirs.signal().unwrap();
    assert!(
        a.wait(NONE, POLL).unwrap(),
        "signalled through the other file"
    );
    assert!(mine.wait(NONE, POLL).unwrap());
    drop(a);
    // The object lives on while other handles refer to it.
    mine.reset().unwrap();
    assert!(!theirs.wait(SUBMIT, POLL).unwrap());
    drop((fd, mine, theirs));
    assert_eq!(fd_count(), before, "fds leaked");
}

#[test]
fn sync_file_export_and_import_into_an_existing_handle() {
    let dev = require_driver!("virtio_gpu", &["virtio_gpu"]);
    let objs = virtio_syncobjs!(dev);
    let vdev = require_driver!("vgem", &["vgem"]);
    let vgem = vgem!(vdev);
    let before = fd_count();

    // A signalled object exports a signalled sync_file; an empty one has nothing to export.
    let s = objs.create(true).unwrap();
    let sf = s.export_sync_file().expect("EXPORT_SYNC_FILE");
    assert_eq!(sf.info().unwrap().status, FenceStatus::Signaled);
    let a = objs.create(false).unwrap();
    expect_errno_quiet(
        &dev,
        "export of an empty object",
        || a.export_sync_file(),
        "DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD",
        Errno::INVAL,
    );

    // A real, unsignalled fence from vgem, imported into the existing handle `a`.
    let (_buf, fence, vsf) = vgem_fenced(&vgem);
    a.import_sync_file(vsf.as_fd())
        .expect("FD_TO_HANDLE(IMPORT_SYNC_FILE) into an existing handle");
    assert!(
        !a.wait(NONE, POLL).unwrap(),
        "the vgem fence is unsignalled"
    );
    let back = a.export_sync_file().unwrap();
    let info = back.info().unwrap();
    assert_eq!(info.status, FenceStatus::Active);
    assert_eq!(info.fences.len(), 1, "{info:?}");
    assert_eq!(info.fences[0].driver_name, "vgem");
    fence.signal().expect("VGEM_FENCE_SIGNAL");
    assert!(a.wait(NONE, POLL).unwrap(), "signalled by vgem");
    assert_eq!(back.info().unwrap().status, FenceStatus::Signaled);

    // Importing a signalled sync_file replaces an unsignalled fence.
    let (_buf2, fence2, vsf2) = vgem_fenced(&vgem);
    a.import_sync_file(vsf2.as_fd()).unwrap();
    assert!(!a.wait(NONE, POLL).unwrap());
    a.import_sync_file(sf.as_fd()).unwrap();
    assert!(a.wait(NONE, POLL).unwrap());
    fence2.signal().unwrap();
    drop((sf, back, vsf, vsf2));
    assert_eq!(fd_count(), before, "fds leaked");
}

#[test]
fn timeline_signal_wait_query_and_transfer() {
    let dev = require_driver!("virtio_gpu", &["virtio_gpu"]);
    let objs = timeline_syncobjs!(dev);
    let vdev = require_driver!("vgem", &["vgem"]);
    let vgem = vgem!(vdev);
    let t = objs.create(false).unwrap();
    assert_eq!(t.query().unwrap(), 0);
    assert_eq!(t.last_submitted().unwrap(), 0);
    t.timeline_signal(3).expect("TIMELINE_SIGNAL");
    assert_eq!(t.query().unwrap(), 3);
    assert_eq!(t.last_submitted().unwrap(), 3);
    assert!(t.timeline_wait(2, NONE, POLL).unwrap(), "earlier points");
    assert!(t.timeline_wait(3, NONE, POLL).unwrap());
    expect_errno_quiet(
        &dev,
        "unsubmitted point without WAIT_FOR_SUBMIT",
        || t.timeline_wait(5, NONE, POLL),
        "DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT",
        Errno::INVAL,
    );
    assert!(!t.timeline_wait(5, SUBMIT, POLL).unwrap());
    assert!(
        !t.timeline_wait(5, SyncobjWaitFlags::WAIT_AVAILABLE, POLL)
            .unwrap()
    );

    // Binary -> timeline: an unsignalled vgem fence becomes point 7.
    let (_buf, fence, vsf) = vgem_fenced(&vgem);
    let b = objs.create(false).unwrap();
    b.import_sync_file(vsf.as_fd()).unwrap();
    objs.transfer(b.handle(), 0, t.handle(), 7, NONE)
        .expect("SYNCOBJ_TRANSFER binary -> timeline");
    assert_eq!(t.last_submitted().unwrap(), 7, "point 7 is submitted");
    assert_eq!(t.query().unwrap(), 3, "but not signalled");
    assert!(
        t.timeline_wait(7, SyncobjWaitFlags::WAIT_AVAILABLE, POLL)
            .unwrap()
    );
    assert!(!t.timeline_wait(7, NONE, POLL).unwrap());
    // Timeline -> binary: point 7's fence into a fresh binary object.
    let c = objs.create(false).unwrap();
    objs.transfer(t.handle(), 7, c.handle(), 0, NONE)
        .expect("SYNCOBJ_TRANSFER timeline -> binary");
    assert!(!c.wait(NONE, POLL).unwrap());
    // Several points at once, any and all.
    let u = objs.create(false).unwrap();
    objs.timeline_signal(&[u.handle()], &[1]).unwrap();
    let hs = [t.handle(), u.handle()];
    let all = SyncobjWaitFlags::WAIT_ALL;
    assert_eq!(
        objs.timeline_wait(&hs, &[7, 1], NONE, POLL).unwrap(),
        Some(1)
    );
    assert_eq!(objs.timeline_wait(&hs, &[7, 1], all, POLL).unwrap(), None);
    let mut points = [0u64; 2];
    objs.query(&hs, &mut points, false).unwrap();
    assert_eq!(points, [3, 1]);
    objs.query(&hs, &mut points, true).unwrap();
    assert_eq!(points, [7, 1]);

    fence.signal().unwrap();
    assert_eq!(t.query().unwrap(), 7);
    assert!(t.timeline_wait(7, NONE, POLL).unwrap());
    assert!(c.wait(NONE, POLL).unwrap());
    assert!(
        objs.timeline_wait(&hs, &[7, 1], all, POLL)
            .unwrap()
            .is_some()
    );
    // A signalled binary object becomes a signalled timeline point.
    let s = objs.create(true).unwrap();
    objs.transfer(s.handle(), 0, t.handle(), 9, NONE).unwrap();
    assert_eq!(t.query().unwrap(), 9);
}

#[test]
fn eventfd_fires_when_the_point_signals_or_becomes_available() {
    kernel_tests::fds_shared();
    use rustix::event::{EventfdFlags, eventfd};
    let dev = require_driver!("virtio_gpu", &["virtio_gpu"]);
    let objs = timeline_syncobjs!(dev);
    let vdev = require_driver!("vgem", &["vgem"]);
    let vgem = vgem!(vdev);
    let new_eventfd = || eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK).unwrap();
    let count = |fd: &rustix::fd::OwnedFd| -> Option<u64> {
        let mut b = [0u8; 8];
        match rustix::io::read(fd, &mut b) {
            Ok(8) => Some(u64::from_ne_bytes(b)),
            Err(Errno::AGAIN) => None,
            other => panic!("eventfd read: {other:?}"),
        }
    };
    let t = objs.create(false).unwrap();
    if !kernel_at_least(6, 6) {
        let efd = new_eventfd();
        expect_unsupported(
            "eventfd before 6.6",
            unchanged(&dev, "eventfd before 6.6", || {
                t.eventfd(1, efd.as_fd(), NONE)
            }),
        );
        skip_on_this_kernel!("DRM_IOCTL_SYNCOBJ_EVENTFD arrived in Linux 6.6");
    }
    let on_signal = new_eventfd();
    t.eventfd(1, on_signal.as_fd(), NONE)
        .expect("SYNCOBJ_EVENTFD");
    assert_eq!(count(&on_signal), None, "nothing signalled yet");
    t.timeline_signal(1).unwrap();
    assert_eq!(count(&on_signal), Some(1));

    // A point whose fence is submitted but unsignalled: WAIT_AVAILABLE fires at once.
    let (_buf, fence, vsf) = vgem_fenced(&vgem);
    let on_available = new_eventfd();
    let on_signal = new_eventfd();
    t.eventfd(2, on_available.as_fd(), SyncobjWaitFlags::WAIT_AVAILABLE)
        .unwrap();
    t.eventfd(2, on_signal.as_fd(), NONE).unwrap();
    let b = objs.create(false).unwrap();
    b.import_sync_file(vsf.as_fd()).unwrap();
    objs.transfer(b.handle(), 0, t.handle(), 2, NONE).unwrap();
    assert_eq!(count(&on_available), Some(1));
    assert_eq!(count(&on_signal), None);
    fence.signal().unwrap();
    assert_eq!(count(&on_signal), Some(1));

    // A binary object: point 0.
    let a = objs.create(false).unwrap();
    let efd = new_eventfd();
    a.eventfd(0, efd.as_fd(), NONE).unwrap();
    assert_eq!(count(&efd), None);
    a.signal().unwrap();
    assert_eq!(count(&efd), Some(1));
}

#[test]
fn bad_input_is_rejected_with_exact_errnos() {
    let dev = require_driver!("virtio_gpu", &["virtio_gpu"]);
    let objs = virtio_syncobjs!(dev);
    let null = std::fs::File::open("/dev/null").unwrap();
    let before = fd_count();
    let inval = Errno::INVAL;
    let noent = Errno::NOENT;
    let a = objs.create(false).unwrap();
    let s = objs.create(true).unwrap();
    let (ah, sh, uh) = (a.handle(), s.handle(), handle(UNKNOWN));
    let sfd = s.export().unwrap();
    let ssf = s.export_sync_file().unwrap();

    const CREATE: &str = "DRM_IOCTL_SYNCOBJ_CREATE";
    expect_errno_quiet(
        &dev,
        "create: unknown flag",
        || raw::syncobj_create(&dev, 2),
        CREATE,
        inval,
    );
    expect_errno_quiet(
        &dev,
        "create: every flag",
        || raw::syncobj_create(&dev, u32::MAX),
        CREATE,
        inval,
    );

    const DESTROY: &str = "DRM_IOCTL_SYNCOBJ_DESTROY";
    expect_errno_quiet(
        &dev,
        "destroy: unknown",
        || raw::syncobj_destroy(&dev, UNKNOWN, 0),
        DESTROY,
        inval,
    );
    expect_errno_quiet(
        &dev,
        "destroy: handle 0",
        || raw::syncobj_destroy(&dev, 0, 0),
        DESTROY,
        inval,
    );
    expect_errno_quiet(
        &dev,
        "destroy: pad",
        || raw::syncobj_destroy(&dev, ah.get(), 1),
        DESTROY,
        inval,
    );
    assert!(
        !a.wait(SUBMIT, POLL).unwrap(),
        "a survives the rejected destroy"
    );

    const TO_FD: &str = "DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD";
    expect_errno_quiet(
        &dev,
        "handle-to-fd: unknown handle",
        || raw::syncobj_handle_to_fd(&dev, UNKNOWN, 0, 0),
        TO_FD,
        inval,
    );
    expect_errno_quiet(
        &dev,
        // Bit 1 is TIMELINE where the uapi has `DRM_SYNCOBJ_HANDLE_TO_FD_FLAGS_TIMELINE` (7.3 does): the
        // top bit is unknown to every kernel.
        "handle-to-fd: unknown flag",
        || raw::syncobj_handle_to_fd(&dev, sh.get(), 1 << 31, 0),
        TO_FD,
        inval,
    );
    expect_errno_quiet(
        &dev,
        "handle-to-fd: pad",
        || raw::syncobj_handle_to_fd(&dev, sh.get(), 0, 1),
        TO_FD,
        inval,
    );
    expect_errno_quiet(
        &dev,
        "export sync_file: unknown handle",
        || raw::syncobj_handle_to_fd(&dev, UNKNOWN, EXPORT_SYNC_FILE, 0),
        TO_FD,
        noent,
    );
    expect_errno_quiet(
        &dev,
        "export sync_file: no fence",
        || a.export_sync_file(),
        TO_FD,
        inval,
    );

    const TO_HANDLE: &str = "DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE";
    let raw_import = |fd: i32, handle: u32, flags: u32, pad: u32| {
        raw::syncobj_fd_to_handle(&dev, fd, handle, flags, pad)
    };
    expect_errno_quiet(
        &dev,
        "fd-to-handle: fd -1",
        || raw_import(-1, 0, 0, 0),
        TO_HANDLE,
        inval,
    );
    expect_errno_quiet(
        &dev,
        "fd-to-handle: closed fd",
        || raw_import(closed_fd(), 0, 0, 0),
        TO_HANDLE,
        inval,
    );
    expect_errno_quiet(
        &dev,
        "fd-to-handle: /dev/null",
        || objs.import(null.as_fd()),
        TO_HANDLE,
        inval,
    );
    expect_errno_quiet(
        &dev,
        "fd-to-handle: a sync_file",
        || objs.import(ssf.as_fd()),
        TO_HANDLE,
        inval,
    );
    expect_errno_quiet(
        &dev,
        "fd-to-handle: unknown flag",
        || raw_import(sfd.as_raw_fd(), 0, 1 << 31, 0),
        TO_HANDLE,
        inval,
    );
    expect_errno_quiet(
        &dev,
        "fd-to-handle: pad",
        || raw_import(sfd.as_raw_fd(), 0, 0, 1),
        TO_HANDLE,
        inval,
    );
    expect_errno_quiet(
        &dev,
        "import sync_file: /dev/null",
        || a.import_sync_file(null.as_fd()),
        TO_HANDLE,
        inval,
    );
    expect_errno_quiet(
        &dev,
        "import sync_file: a syncobj fd",
        || a.import_sync_file(sfd.as_fd()),
        TO_HANDLE,
        inval,
    );
    expect_errno_quiet(
        &dev,
        "import sync_file: fd -1",
        || raw_import(-1, ah.get(), IMPORT_SYNC_FILE, 0),
        TO_HANDLE,
        inval,
    );
    expect_errno_quiet(
        &dev,
        "import sync_file: unknown target handle",
        || raw_import(ssf.as_fd().as_raw_fd(), UNKNOWN, IMPORT_SYNC_FILE, 0),
        TO_HANDLE,
        noent,
    );

    const WAIT: &str = "DRM_IOCTL_SYNCOBJ_WAIT";
    let bad = SyncobjWaitFlags::from_bits_retain(0x80);
    expect_errno_quiet(
        &dev,
        "wait: unknown flag",
        || objs.wait(&[sh], bad, POLL),
        WAIT,
        inval,
    );
    expect_errno_quiet(
        &dev,
        "wait: WAIT_AVAILABLE is for timelines",
        || objs.wait(&[sh], SyncobjWaitFlags::WAIT_AVAILABLE, POLL),
        WAIT,
        inval,
    );
    expect_errno_quiet(
        &dev,
        "wait: unknown handle",
        || objs.wait(&[sh, uh], NONE, POLL),
        WAIT,
        noent,
    );
    expect_errno_quiet(
        &dev,
        "wait: no fence",
        || objs.wait(&[ah], NONE, POLL),
        WAIT,
        inval,
    );
    let zero = unchanged(&dev, "wait: zero handles", || objs.wait(&[], NONE, POLL));
    if kernel_at_least(6, 12) {
        assert!(
            zero.is_ok(),
            "wait on zero handles succeeds on 6.12: {zero:?}"
        );
    } else {
        expect_errno("wait: zero handles", zero, WAIT, inval);
    }

    const RESET: &str = "DRM_IOCTL_SYNCOBJ_RESET";
    const SIGNAL: &str = "DRM_IOCTL_SYNCOBJ_SIGNAL";
    expect_errno_quiet(
        &dev,
        "reset: pad",
        || raw::syncobj_reset(&dev, &[sh.get()], 1),
        RESET,
        inval,
    );
    expect_errno_quiet(
        &dev,
        "reset: zero handles",
        || objs.reset(&[]),
        RESET,
        inval,
    );
    expect_errno_quiet(
        &dev,
        "reset: unknown handle",
        || objs.reset(&[sh, uh]),
        RESET,
        noent,
    );
    expect_errno_quiet(
        &dev,
        "signal: pad",
        || raw::syncobj_signal(&dev, &[ah.get()], 1),
        SIGNAL,
        inval,
    );
    expect_errno_quiet(
        &dev,
        "signal: zero handles",
        || objs.signal(&[]),
        SIGNAL,
        inval,
    );
    expect_errno_quiet(
        &dev,
        "signal: unknown handle",
        || objs.signal(&[ah, uh]),
        SIGNAL,
        noent,
    );
    assert!(
        s.wait(NONE, POLL).unwrap(),
        "the rejected reset left s alone"
    );
    assert!(
        !a.wait(SUBMIT, POLL).unwrap(),
        "the rejected signals left a alone"
    );

    if objs.timeline() {
        const TWAIT: &str = "DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT";
        const TSIGNAL: &str = "DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL";
        const QUERY: &str = "DRM_IOCTL_SYNCOBJ_QUERY";
        const TRANSFER: &str = "DRM_IOCTL_SYNCOBJ_TRANSFER";
        expect_errno_quiet(
            &dev,
            "timeline wait: unknown flag",
            || objs.timeline_wait(&[sh], &[0], bad, POLL),
            TWAIT,
            inval,
        );
        expect_errno_quiet(
            &dev,
            "timeline wait: unknown handle",
            || objs.timeline_wait(&[sh, uh], &[0, 0], NONE, POLL),
            TWAIT,
            noent,
        );
        expect_errno_quiet(
            &dev,
            "timeline wait: point 5 of a binary object",
            || objs.timeline_wait(&[sh], &[5], NONE, POLL),
            TWAIT,
            inval,
        );
        let zero = unchanged(&dev, "timeline wait: zero handles", || {
            objs.timeline_wait(&[], &[], NONE, POLL)
        });
        if kernel_at_least(6, 12) {
            assert!(zero.is_ok(), "timeline wait on zero handles: {zero:?}");
        } else {
            expect_errno("timeline wait: zero handles", zero, TWAIT, inval);
        }
        expect_errno_quiet(
            &dev,
            "timeline signal: flags",
            || raw::syncobj_timeline_signal(&dev, &[ah.get()], &[1], 1),
            TSIGNAL,
            inval,
        );
        expect_errno_quiet(
            &dev,
            "timeline signal: zero handles",
            || objs.timeline_signal(&[], &[]),
            TSIGNAL,
            inval,
        );
        expect_errno_quiet(
            &dev,
            "timeline signal: unknown handle",
            || objs.timeline_signal(&[uh], &[1]),
            TSIGNAL,
            noent,
        );
        expect_errno_quiet(
            &dev,
            "query: unknown flag",
            || raw::syncobj_query(&dev, &[sh.get()], &mut [0], 2),
            QUERY,
            inval,
        );
        expect_errno_quiet(
            &dev,
            "query: zero handles",
            || objs.query(&[], &mut [], false),
            QUERY,
            inval,
        );
        expect_errno_quiet(
            &dev,
            "query: unknown handle",
            || objs.query(&[sh, uh], &mut [0, 0], false),
            QUERY,
            noent,
        );
        expect_errno_quiet(
            &dev,
            "transfer: unknown destination",
            || objs.transfer(sh, 0, uh, 1, NONE),
            TRANSFER,
            noent,
        );
        expect_errno_quiet(
            &dev,
            "transfer: unknown source",
            || objs.transfer(uh, 0, ah, 0, NONE),
            TRANSFER,
            noent,
        );
        expect_errno_quiet(
            &dev,
            "transfer: source without a fence",
            || objs.transfer(ah, 0, sh, 0, NONE),
            TRANSFER,
            inval,
        );
    }

    if objs.timeline() && kernel_at_least(6, 6) {
        const EVENTFD: &str = "DRM_IOCTL_SYNCOBJ_EVENTFD";
        let efd = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC).unwrap();
        let e = efd.as_raw_fd();
        expect_errno_quiet(
            &dev,
            "eventfd: WAIT_ALL",
            || s.eventfd(0, efd.as_fd(), SyncobjWaitFlags::WAIT_ALL),
            EVENTFD,
            inval,
        );
        expect_errno_quiet(
            &dev,
            "eventfd: pad",
            || raw::syncobj_eventfd(&dev, sh.get(), 0, e, 0, 1),
            EVENTFD,
            inval,
        );
        expect_errno_quiet(
            &dev,
            "eventfd: unknown handle",
            || raw::syncobj_eventfd(&dev, UNKNOWN, 0, e, 0, 0),
            EVENTFD,
            noent,
        );
        expect_errno_quiet(
            &dev,
            "eventfd: not an eventfd",
            || s.eventfd(0, null.as_fd(), NONE),
            EVENTFD,
            inval,
        );
        expect_errno_quiet(
            &dev,
            "eventfd: fd -1",
            || raw::syncobj_eventfd(&dev, sh.get(), 0, -1, 0, 0),
            EVENTFD,
            Errno::BADF,
        );
    }

    drop((sfd, ssf, a, s));
    assert_eq!(fd_count(), before, "fds leaked");
}
