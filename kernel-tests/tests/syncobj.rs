//! DRM sync objects in real guests, the binary side: support on every driver (and the
//! kernel's answer where there is none), binary objects' create/signal/wait/reset, waits
//! across threads and over several handles, export and import of the object's fd, sync_file
//! interop (with vgem as the fence source), and IGT-style bad input with exact errnos (the
//! timeline and eventfd ioctls' bad input included). Timeline points, their waits,
//! transfers, queries and eventfd: `syncobj_timeline`.
//!
//! In the matrix only virtio-gpu on Linux 6.12 has sync objects; on older kernels the
//! positive tests assert that the probe says Unsupported, then skip loudly.

#[macro_use]
mod fence_common;
#[macro_use]
mod syncobj_common;

use drm_gem::{
    Caps, Errno, FenceStatus, NodeKind, Syncobj, SyncobjHandle, SyncobjTimeout, SyncobjWaitFlags,
    Syncobjs, raw,
};
use fence_common::{
    closed_fd, expect_errno, expect_errno_quiet, expect_unsupported, fd_count, kernel_at_least,
};
use kernel_tests::{open_driver, require_driver, unchanged};
use rustix::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use syncobj_common::{NONE, POLL, SUBMIT, vgem_fenced, virtio_support};

/// A handle no test creates (handles are allocated from 1 upwards).
const UNKNOWN: u32 = 0x7fff_fff0;
/// `DRM_SYNCOBJ_HANDLE_TO_FD_FLAGS_EXPORT_SYNC_FILE` (drm.h).
const EXPORT_SYNC_FILE: u32 = 1;
/// `DRM_SYNCOBJ_FD_TO_HANDLE_FLAGS_IMPORT_SYNC_FILE` (drm.h).
const IMPORT_SYNC_FILE: u32 = 1;

fn handle(raw: u32) -> SyncobjHandle {
    SyncobjHandle::new(raw).unwrap()
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
