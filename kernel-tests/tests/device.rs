//! Devices in real guests: opening by driver name, DRM master and authentication, and
//! framebuffer readback (`GETFB2`) whose fresh GEM handles are owned, never leaked.

use drm_gem::kms::FbSpec;
use drm_gem::{Device, DumbBuffer, DumbSpec, Errno, Error, NodeKind};
use ioctl_sys::drm as sys;
use kernel_tests::{open_fds, raw, require_driver, skip};
use rustix::fd::AsFd;

#[test]
fn open_driver_finds_every_expected_driver() {
    kernel_tests::fds_shared();
    let wanted = [
        ("vkms", "vkms", NodeKind::Primary),
        ("vgem", "vgem", NodeKind::Render),
        ("virtio_gpu", "virtio_gpu", NodeKind::Primary),
        ("virtio_gpu", "virtio_gpu", NodeKind::Render),
        ("qxl", "qxl", NodeKind::Primary),
    ];
    for (feature, driver, kind) in wanted {
        if !kernel_tests::expected(feature) {
            continue;
        }
        let d = match Device::open_driver(driver, Some(kind)) {
            Ok(d) => d,
            Err(e) => skip!("{e}"),
        };
        assert_eq!(d.kind(), kind);
        assert_eq!(d.driver().unwrap().name, driver);
    }
    // bochs is `bochs-drm` on 5.10 and `bochs` later: one of the two must be there.
    if kernel_tests::expected("bochs") {
        let ok = ["bochs", "bochs-drm"]
            .iter()
            .any(|n| Device::open_driver(n, Some(NodeKind::Primary)).is_ok());
        if !ok {
            skip!("no bochs node");
        }
    }
}

#[test]
fn master_and_authentication() {
    let master = require_driver!("vkms", &["vkms"], NodeKind::Primary);
    let client = Device::open_driver("vkms", Some(NodeKind::Primary)).unwrap();
    // Root may always take master; the client's magic is authenticated by the master.
    master.set_master().expect("SET_MASTER");
    let magic = client.magic().expect("GET_MAGIC");
    assert_ne!(magic.0, 0);
    assert_eq!(
        client.magic().unwrap(),
        magic,
        "the magic is stable per file"
    );
    master.authenticate(magic).expect("AUTH_MAGIC");
    // A magic is spent once used: the master forgets it (EINVAL on every kernel here).
    let spent = kernel_tests::unchanged(&master, "AUTH_MAGIC of a spent magic", || {
        master.authenticate(magic)
    });
    match spent {
        Err(Error::Ioctl {
            name: "DRM_IOCTL_AUTH_MAGIC",
            errno,
        }) => assert_eq!(errno, Errno::INVAL),
        other => panic!("AUTH_MAGIC of a spent magic: {other:?}"),
    }
    master.drop_master().expect("DROP_MASTER");
    // Not master any more: authenticating is refused.
    let refused = kernel_tests::unchanged(&master, "AUTH_MAGIC without master", || {
        master.authenticate(magic)
    });
    match refused {
        Err(Error::Ioctl {
            name: "DRM_IOCTL_AUTH_MAGIC",
            errno,
        }) => assert_eq!(errno, Errno::ACCESS),
        other => panic!("AUTH_MAGIC without master: {other:?}"),
    }
}

#[test]
fn getfb2_handles_are_owned_and_closed() {
    let dev = require_driver!("vkms", &["vkms"], NodeKind::Primary);
    let (fds, handles) = (open_fds(), dev.live_handles());
    let fresh;
    {
        let mut buf = DumbBuffer::create(
            &dev,
            DumbSpec {
                width: 64,
                height: 32,
                bpp: 32,
            },
        )
        .unwrap();
        buf.map()
            .unwrap()
            .write_at(0, &[0x11, 0x22, 0x33, 0x44])
            .unwrap();
        let spec = FbSpec::single(
            64,
            32,
            drm_gem::DrmFourcc::Xrgb8888,
            buf.handle(),
            buf.pitch(),
        );
        let fb = dev.add_framebuffer(&spec).expect("ADDFB2");
        let info = dev.framebuffer_info(fb.id()).expect("GETFB2");
        assert_eq!(
            (info.width, info.height, info.format),
            (64, 32, sys::DRM_FORMAT_XRGB8888)
        );
        assert_eq!(info.planes.len(), 1);
        // Probed: a device that takes modifiers (DRM_CAP_ADDFB2_MODIFIERS) reports one
        // for every framebuffer (LINEAR for this implicit one); GETFB2 keys its
        // DRM_MODE_FB_MODIFIERS flag on the same mode_config flag as the cap. vkms has
        // it from Linux 5.18 ("drm: introduce fb_modifiers_not_supported flag in
        // mode_config"): 6.1 and 6.12 here, not 5.10 or 5.15.
        let want = (dev.raw_cap(sys::DRM_CAP_ADDFB2_MODIFIERS).unwrap_or(0) != 0).then_some(0);
        assert_eq!(info.modifier, want);
        let p = &info.planes[0];
        assert_eq!((p.pitch, p.offset), (buf.pitch(), 0));
        let obj = p.object.as_ref().expect("root gets handles");
        // The fresh handle maps like the buffer itself (what a screenshot reads).
        {
            let mut mine = dev
                .framebuffer_info(fb.id())
                .unwrap()
                .planes
                .remove(0)
                .object
                .unwrap();
            let mut px = [0u8; 4];
            mine.map(4096).unwrap().read_at(0, &mut px).unwrap();
            assert_eq!(px, [0x11, 0x22, 0x33, 0x44]);
        }
        fresh = obj.handle();
        assert_ne!(fresh, buf.handle(), "GETFB2 creates a new handle");
        assert_eq!(obj.owners(), 1);
        assert_eq!(dev.live_handles(), handles + 2);
        // The fresh handle names the same memory: export both and compare inodes.
        let a = dev.export(obj, Default::default());
        let b = dev.export(buf.gem(), Default::default());
        if let (Ok(a), Ok(b)) = (a, b) {
            let (sa, sb) = (
                rustix::fs::fstat(&a).unwrap(),
                rustix::fs::fstat(&b).unwrap(),
            );
            assert_eq!(sa.st_ino, sb.st_ino, "one dma-buf per object");
        }
        drop(info);
        assert_eq!(dev.live_handles(), handles + 1);
    }
    // The GETFB2 handle was closed by its owner: closing it again is refused by the kernel.
    let r = raw::gem_close(
        dev.as_fd(),
        sys::drm_gem_close {
            handle: fresh.get(),
            pad: 0,
        },
    );
    assert_eq!(r.expect_err("handle still open"), Errno::INVAL);
    assert_eq!((open_fds(), dev.live_handles()), (fds, handles));
}

#[test]
fn multi_planar_framebuffer_shares_one_owned_handle_in_getfb2() {
    let dev = require_driver!("vkms", &["vkms"], NodeKind::Primary);
    dev.set_client_cap(drm_gem::ClientCap::UniversalPlanes, 1)
        .unwrap();
    const NV12: u32 = drm_gem::DrmFourcc::Nv12 as u32;
    let offers_nv12 = dev
        .plane_ids()
        .unwrap()
        .into_iter()
        .any(|p| dev.plane(p).unwrap().formats.contains(&NV12));
    let handles = dev.live_handles();
    // One 8 bpp buffer holds both planes: Y (64x64) then interleaved CbCr (64x32).
    let buf = DumbBuffer::create(
        &dev,
        DumbSpec {
            width: 64,
            height: 96,
            bpp: 8,
        },
    )
    .unwrap();
    let pitch = buf.pitch();
    let spec = drm_gem::kms::FbSpec {
        width: 64,
        height: 64,
        format: drm_gem::DrmFourcc::Nv12,
        modifier: None,
        planes: vec![
            drm_gem::kms::FbPlane {
                handle: buf.handle(),
                pitch,
                offset: 0,
            },
            drm_gem::kms::FbPlane {
                handle: buf.handle(),
                pitch,
                offset: pitch * 64,
            },
        ],
    };
    match dev.add_framebuffer(&spec) {
        Ok(fb) => {
            let info = dev.framebuffer_info(fb.id()).unwrap();
            assert_eq!(info.format, NV12);
            assert_eq!(info.planes.len(), 2);
            assert_eq!(info.planes[1].offset, pitch * 64);
            let h0 = info.planes[0].object.as_ref().unwrap();
            let h1 = info.planes[1].object.as_ref().unwrap();
            // GETFB2 gives one fresh handle for both planes: two owners, one handle.
            assert_eq!(h0.handle(), h1.handle());
            assert_eq!(h0.owners(), 2);
            assert_eq!(dev.live_handles(), handles + 2, "the buffer's and GETFB2's");
        }
        Err(Error::Ioctl { errno, .. }) => {
            assert!(
                !offers_nv12,
                "a plane lists NV12 but ADDFB2 refused it: {errno:?}"
            );
            assert_eq!(errno, Errno::INVAL);
            eprintln!("no vkms plane takes NV12 on this kernel: ADDFB2 answers EINVAL");
        }
        Err(e) => panic!("{e}"),
    }
    drop(buf);
    assert_eq!(dev.live_handles(), handles);
}
