//! sync_file and sw_sync timelines in real guests: status, info, merge, wait, bad input.

use drm_gem::{Errno, Error, FenceStatus, SwSyncTimeline};
use kernel_tests::{require_feature, skip, unchanged_process};
use rustix::fd::AsFd;
use std::time::Duration;

macro_rules! timeline {
    () => {{
        kernel_tests::fds_shared();
        match SwSyncTimeline::open() {
            Ok(t) => t,
            Err(e) => skip!("sw_sync: {e}"),
        }
    }};
}

#[test]
fn fence_signals_when_the_timeline_passes_it() {
    require_feature!("sw_sync");
    let tl = timeline!();
    let f = tl
        .create_fence(2, "at-two")
        .expect("SW_SYNC_IOC_CREATE_FENCE");
    let info = f.info().expect("SYNC_IOC_FILE_INFO");
    assert_eq!(info.status, FenceStatus::Active);
    assert_eq!(info.fences.len(), 1);
    assert_eq!(info.fences[0].driver_name, "sw_sync");
    assert_eq!(info.fences[0].timestamp_ns, 0);
    assert!(
        !f.wait(Some(Duration::from_millis(20))).unwrap(),
        "active fence must time out"
    );
    tl.inc(1).unwrap();
    assert_eq!(f.info().unwrap().status, FenceStatus::Active);
    tl.inc(1).unwrap();
    assert!(f.wait(Some(Duration::ZERO)).unwrap());
    let info = f.info().unwrap();
    assert_eq!(info.status, FenceStatus::Signaled);
    assert!(
        info.fences[0].timestamp_ns > 0,
        "a signalled fence has a timestamp"
    );
}

#[test]
fn merged_fence_waits_for_both() {
    require_feature!("sw_sync");
    // Fences of one timeline collapse into the later one when merged, so use two.
    let t1 = timeline!();
    let t2 = timeline!();
    let a = t1.create_fence(1, "a").unwrap();
    let b = t2.create_fence(3, "b").unwrap();
    let m = a.merge(b.as_fd(), "merged").expect("SYNC_IOC_MERGE");
    let info = m.info().unwrap();
    assert_eq!(info.name, "merged");
    assert_eq!(info.fences.len(), 2);
    t1.inc(1).unwrap();
    assert_eq!(a.info().unwrap().status, FenceStatus::Signaled);
    assert_eq!(m.info().unwrap().status, FenceStatus::Active);
    t2.inc(3).unwrap();
    assert!(m.wait(Some(Duration::from_secs(5))).unwrap());
    // Same timeline: the merge keeps only the later fence.
    let c = t1.create_fence(5, "c").unwrap();
    let d = t1.create_fence(7, "d").unwrap();
    assert_eq!(
        c.merge(d.as_fd(), "same")
            .unwrap()
            .info()
            .unwrap()
            .fences
            .len(),
        1
    );
}

#[test]
fn info_of_many_fences_takes_the_count_path() {
    require_feature!("sw_sync");
    // Six fences on six timelines: more than the sized guess of 4.
    let mut tls: Vec<SwSyncTimeline> = Vec::new();
    for _ in 0..6 {
        tls.push(timeline!());
    }
    let mut m = tls[0].create_fence(1, "f0").unwrap();
    for (i, t) in tls.iter().enumerate().skip(1) {
        let f = t.create_fence(1, &format!("f{i}")).unwrap();
        m = m.merge(f.as_fd(), "many").unwrap();
    }
    let info = m.info().unwrap();
    assert_eq!(info.fences.len(), 6, "{info:?}");
    assert!(info.fences.iter().all(|f| f.driver_name == "sw_sync"));
}

#[test]
fn bad_input_is_rejected() {
    require_feature!("sw_sync");
    let tl = timeline!();
    let f = tl.create_fence(1, "x").unwrap();
    let long = "n".repeat(40);
    assert!(matches!(
        unchanged_process("a 40-byte fence name", || tl.create_fence(1, &long)),
        Err(Error::InvalidArgument { .. })
    ));
    let null = std::fs::File::open("/dev/null").unwrap();
    match unchanged_process("merge with /dev/null", || f.merge(null.as_fd(), "bad")) {
        Err(Error::Ioctl {
            name: "SYNC_IOC_MERGE",
            errno,
        }) => assert_eq!(errno, Errno::NOENT),
        other => panic!("expected ENOENT merging with /dev/null, got {other:?}"),
    }
}
