//! DRM sync objects in real guests, the timeline side: signalling, querying and waiting on
//! timeline points (WAIT_FOR_SUBMIT, WAIT_AVAILABLE, any and all), transfers between binary
//! objects and timeline points (with an unsignalled vgem fence as point 7), and eventfd
//! notification when a point signals or becomes available. Binary objects, fd and
//! sync_file interop, and bad input with exact errnos (the timeline ioctls' included):
//! `syncobj`.
//!
//! In the matrix only virtio-gpu on Linux 6.12 has timeline sync objects; on older kernels
//! the tests assert what the probe says, then skip loudly.

#[macro_use]
mod fence_common;
#[macro_use]
mod syncobj_common;

use drm_gem::{Errno, SyncobjWaitFlags};
use fence_common::{expect_errno_quiet, expect_unsupported, kernel, kernel_at_least};
use kernel_tests::{require_driver, unchanged};
use rustix::fd::AsFd;
use syncobj_common::{NONE, POLL, SUBMIT, vgem_fenced};

/// The virtio-gpu device's timeline sync objects, or a loud (non-failing) skip on kernels
/// where the driver has none (or only binary ones), after asserting what the probe says.
macro_rules! timeline_syncobjs {
    ($dev:expr) => {{
        let s = virtio_syncobjs!($dev);
        if !s.timeline() {
            skip_on_this_kernel!("virtio-gpu has no timeline sync objects on {:?}", kernel());
        }
        s
    }};
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
