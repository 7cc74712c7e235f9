//! Legacy KMS and leases in real guests: SETCRTC + PAGE_FLIP with its event on vkms,
//! virtio-gpu, bochs and qxl; SETPLANE, the cursor, gamma and DIRTYFB on vkms; a lease
//! whose lessee drives its objects and sees nothing else.

use drm_gem::kms::{Event, FbSpec, PlaneRect, Snapshot};
use drm_gem::{ClientCap, Device, DumbBuffer, DumbSpec, Errno, Error, NodeKind};
use ioctl_sys::drm as sys;
use kernel_tests::{open_fds, plane_of_kind, require_feature, skip};
use std::time::Duration;

fn open(drivers: &[&str]) -> Option<Device> {
    let dev = drivers
        .iter()
        .find_map(|d| Device::open_driver(d, Some(NodeKind::Primary)).ok())?;
    dev.set_client_cap(ClientCap::UniversalPlanes, 1).ok()?;
    dev.set_master().ok();
    Some(dev)
}

/// SETCRTC with the first connector's preferred mode, then a flip with an event.
fn modeset_and_flip(dev: &Device) {
    let fds = open_fds();
    let res = dev.resources().unwrap();
    let crtc = res.crtcs[0];
    let conn = res
        .connectors
        .iter()
        .map(|&c| dev.probe_connector(c).unwrap())
        .find(|c| !c.modes.is_empty())
        .expect("a connector with modes");
    let mode = *conn
        .modes
        .iter()
        .find(|m| m.is_preferred())
        .unwrap_or(&conn.modes[0]);
    let (w, h) = (u32::from(mode.size().0), u32::from(mode.size().1));
    let spec = DumbSpec {
        width: w,
        height: h,
        bpp: 32,
    };
    {
        let a = DumbBuffer::create(dev, spec).unwrap();
        let b = DumbBuffer::create(dev, spec).unwrap();
        let fa = dev
            .add_framebuffer(&FbSpec::single(
                w,
                h,
                drm_gem::DrmFourcc::Xrgb8888,
                a.handle(),
                a.pitch(),
            ))
            .unwrap();
        let fb = dev
            .add_framebuffer(&FbSpec::single(
                w,
                h,
                drm_gem::DrmFourcc::Xrgb8888,
                b.handle(),
                b.pitch(),
            ))
            .unwrap();
        dev.set_crtc(crtc, fa.id(), (0, 0), &[conn.id], &mode)
            .expect("SETCRTC");
        let now = dev.crtc(crtc).unwrap();
        assert_eq!(now.framebuffer, Some(fa.id()));
        assert_eq!(now.mode.map(|m| m.size()), Some(mode.size()));
        dev.page_flip(crtc, fb.id(), Some(0xf1f1))
            .expect("PAGE_FLIP");
        let ev = dev.read_events(Some(Duration::from_secs(10))).unwrap();
        assert!(
            matches!(ev.first(), Some(Event::FlipComplete(v)) if v.user_data == 0xf1f1),
            "{ev:?}"
        );
        assert_eq!(dev.crtc(crtc).unwrap().framebuffer, Some(fb.id()));
        dev.disable_crtc(crtc).expect("SETCRTC off");
    }
    assert_eq!((open_fds(), dev.live_handles()), (fds, 0));
}

#[test]
fn vkms_modeset_and_flip() {
    require_feature!("vkms");
    let Some(dev) = open(&["vkms"]) else {
        skip!("no vkms")
    };
    modeset_and_flip(&dev);
}

#[test]
fn virtio_gpu_modeset_and_flip() {
    require_feature!("virtio_gpu");
    let Some(dev) = open(&["virtio_gpu"]) else {
        skip!("no virtio_gpu")
    };
    modeset_and_flip(&dev);
}

#[test]
fn bochs_modeset_and_flip() {
    require_feature!("bochs");
    let Some(dev) = open(&["bochs", "bochs-drm"]) else {
        skip!("no bochs")
    };
    modeset_and_flip(&dev);
}

#[test]
fn qxl_modeset_and_flip() {
    require_feature!("qxl");
    let Some(dev) = open(&["qxl"]) else {
        skip!("no qxl")
    };
    modeset_and_flip(&dev);
}

#[test]
fn vkms_plane_cursor_gamma_dirty() {
    require_feature!("vkms");
    let Some(dev) = open(&["vkms"]) else {
        skip!("no vkms")
    };
    kernel_tests::kms_all_off(&dev).ok();
    let snap = Snapshot::take(&dev).unwrap();
    let crtc = snap.resources.crtcs[0];
    let (conn, mode) = kernel_tests::vkms_output(&dev, &snap);
    let spec = |w, h| DumbSpec {
        width: w,
        height: h,
        bpp: 32,
    };
    let a = DumbBuffer::create(&dev, spec(1024, 768)).unwrap();
    let fa = dev
        .add_framebuffer(&FbSpec::single(
            1024,
            768,
            drm_gem::DrmFourcc::Xrgb8888,
            a.handle(),
            a.pitch(),
        ))
        .unwrap();
    dev.set_crtc(crtc, fa.id(), (0, 0), &[conn], &mode).unwrap();
    // SETPLANE on the primary plane, showing the same framebuffer.
    let primary = plane_of_kind(&snap, drm_gem::kms::PlaneType::Primary).expect("a primary plane");
    dev.set_plane(primary, crtc, Some(fa.id()), PlaneRect::full(1024, 768))
        .expect("SETPLANE");
    // The cursor: a 64x64 ARGB8888 buffer, shown, moved, hidden.
    let mut cur = DumbBuffer::create(&dev, spec(64, 64)).unwrap();
    cur.map()
        .unwrap()
        .write_at(0, &[0xff; 64 * 64 * 4])
        .unwrap();
    dev.set_cursor(crtc, Some(cur.handle()), (64, 64), (0, 0))
        .expect("CURSOR2 set");
    dev.move_cursor(crtc, (100, 50)).expect("CURSOR2 move");
    dev.set_cursor(crtc, None, (0, 0), (0, 0))
        .expect("CURSOR2 hide");
    // Gamma: a round trip where the CRTC has it; none on vkms before 6.12.
    let size = dev.crtc(crtc).unwrap().gamma_size as usize;
    let ramps = dev.gamma(crtc, size).unwrap();
    assert_eq!(ramps[0].len(), size);
    if size > 0 {
        let mut mine = ramps.clone();
        mine[0][size - 1] = 0x1234;
        dev.set_gamma(crtc, &mine).expect("SETGAMMA");
        assert_eq!(dev.gamma(crtc, size).unwrap()[0][size - 1], 0x1234);
        dev.set_gamma(crtc, &ramps).unwrap();
    }
    // DIRTYFB: vkms composes every frame from memory and has no dirty hook.
    match dev.dirty_framebuffer(fa.id(), &[(0, 0, 16, 16)]) {
        Ok(flushed) => assert!(
            !flushed,
            "vkms has no dirty hook: ENOSYS, reported as false"
        ),
        Err(e) => panic!("DIRTYFB: {e}"),
    }
    dev.disable_crtc(crtc).unwrap();
}

#[test]
fn lease_lessee_drives_its_objects_and_sees_nothing_else() {
    require_feature!("vkms");
    let Some(dev) = open(&["vkms"]) else {
        skip!("no vkms")
    };
    dev.set_client_cap(ClientCap::Atomic, 1).unwrap();
    dev.set_client_cap(ClientCap::WritebackConnectors, 1)
        .unwrap();
    kernel_tests::kms_all_off(&dev).ok();
    let snap = Snapshot::take(&dev).unwrap();
    let crtc = snap.resources.crtcs[0];
    let conn = snap
        .connectors
        .iter()
        .find(|c| c.connector.kind == sys::DRM_MODE_CONNECTOR_VIRTUAL)
        .unwrap()
        .connector
        .id;
    let writeback = snap
        .connectors
        .iter()
        .find(|c| c.connector.kind == sys::DRM_MODE_CONNECTOR_WRITEBACK)
        .map(|c| c.connector.id);
    let primary = plane_of_kind(&snap, drm_gem::kms::PlaneType::Primary).expect("a primary plane");
    let fds = open_fds();
    {
        let objs = [crtc.get(), conn.get(), primary.get()];
        let lease = dev.create_lease(&objs).expect("CREATE_LEASE");
        assert!(dev.lessees().unwrap().contains(&lease.lessee_id));
        let l = &lease.lessee;
        let mut got = l.leased_objects().unwrap();
        got.sort_unstable();
        let mut want = objs.to_vec();
        want.sort_unstable();
        assert_eq!(got, want);
        l.set_client_cap(ClientCap::UniversalPlanes, 1).unwrap();
        let res = l.resources().unwrap();
        assert_eq!(res.crtcs, vec![crtc]);
        assert_eq!(res.connectors, vec![conn]);
        assert_eq!(l.plane_ids().unwrap(), vec![primary]);
        // Objects outside the lease do not exist for the lessee.
        if let Some(wb) = writeback {
            match l.connector(wb) {
                Err(Error::Ioctl { errno, .. }) => assert_eq!(errno, Errno::NOENT),
                other => panic!("lessee read a connector outside its lease: {other:?}"),
            }
        }
        // The lessee drives its objects: a modeset through SETCRTC.
        let mode = *l
            .probe_connector(conn)
            .unwrap()
            .modes
            .iter()
            .find(|m| m.size() == (1024, 768))
            .unwrap();
        let buf = DumbBuffer::create(
            l,
            DumbSpec {
                width: 1024,
                height: 768,
                bpp: 32,
            },
        )
        .unwrap();
        let fb = l
            .add_framebuffer(&FbSpec::single(
                1024,
                768,
                drm_gem::DrmFourcc::Xrgb8888,
                buf.handle(),
                buf.pitch(),
            ))
            .unwrap();
        l.set_crtc(crtc, fb.id(), (0, 0), &[conn], &mode)
            .expect("lessee SETCRTC");
        l.disable_crtc(crtc).unwrap();
        drop(fb);
        drop(buf);
        // Revoked: the lessee's file stays open but can no longer touch the objects.
        dev.revoke_lease(lease.lessee_id).expect("REVOKE_LEASE");
        assert!(!dev.lessees().unwrap().contains(&lease.lessee_id));
        match l.set_crtc(
            crtc,
            drm_gem::kms::FramebufferId::new(1).unwrap(),
            (0, 0),
            &[conn],
            &mode,
        ) {
            Err(Error::Ioctl { errno, .. }) => {
                assert!(matches!(errno, Errno::ACCESS | Errno::NOENT), "{errno:?}")
            }
            other => panic!("revoked lessee still drives the CRTC: {other:?}"),
        }
    }
    assert_eq!(open_fds(), fds);
}
