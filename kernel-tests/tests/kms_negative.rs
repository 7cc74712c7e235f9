//! Bad input to KMS, one test per case, each with the exact errno (per kernel where it
//! differs), and fds, GEM handles, framebuffers and blobs counted before and after.

use drm_gem::kms::{
    AtomicFlags, AtomicRequest, FbSpec, FramebufferId, ModeObject, PlaneRect, PropertyId, Snapshot,
};
use drm_gem::{ClientCap, Device, DumbBuffer, DumbSpec, Errno, Error, GemHandle, NodeKind};
use ioctl_sys::drm as sys;
use kernel_tests::{
    Delta, changes, kernel_version, no_leak, raw, require_feature, skip, unchanged, vkms,
};
use rustix::fd::AsFd;

/// Framebuffers and blobs this file can see, for leak checks.
fn kms_objects(dev: &Device) -> usize {
    dev.resources().map(|r| r.framebuffers.len()).unwrap_or(0)
}

/// The client caps every test here sets on vkms.
const CAPS: &[ClientCap] = &[ClientCap::UniversalPlanes, ClientCap::Atomic];

/// Runs `case`, checking that no fd, GEM handle ([`no_leak`]) or framebuffer leaked.
fn no_kms_leak(dev: &Device, what: &str, case: impl FnOnce(&Device)) {
    let fbs = kms_objects(dev);
    no_leak(dev, what, case);
    assert_eq!(kms_objects(dev), fbs, "{what}: framebuffers leaked");
}

fn errno<T: core::fmt::Debug>(r: drm_gem::Result<T>, name: &str) -> Errno {
    match r {
        Err(Error::Ioctl { name: n, errno }) if n == name => errno,
        other => panic!("expected {name} to fail, got {other:?}"),
    }
}

fn prop<O: ModeObject + core::fmt::Debug>(dev: &Device, obj: O, name: &str) -> PropertyId {
    dev.find_property(obj, name).unwrap().0.id
}

const W: u32 = 1024;

fn big(dev: &Device) -> DumbBuffer<&Device> {
    DumbBuffer::create(
        dev,
        DumbSpec {
            width: W,
            height: W,
            bpp: 32,
        },
    )
    .unwrap()
}

fn fb_raw(handle: u32, pitch: u32) -> sys::drm_mode_fb_cmd2 {
    let mut a = sys::drm_mode_fb_cmd2 {
        width: W,
        height: W,
        pixel_format: sys::DRM_FORMAT_XRGB8888,
        ..Default::default()
    };
    a.handles[0] = handle;
    a.pitches[0] = pitch;
    a
}

/// ADDFB2 of the 1024x1024 XRGB8888 buffer with `edit` applied; the kernel's errno.
fn addfb2(edit: impl FnOnce(&mut sys::drm_mode_fb_cmd2)) -> Option<Errno> {
    let dev = vkms(CAPS)?;
    let mut result = None;
    no_kms_leak(&dev, "addfb2", |dev| {
        let buf = big(dev);
        assert_eq!(buf.pitch(), 4 * W, "the kernel's pitch for 1024 x 32 bpp");
        let mut a = fb_raw(buf.handle().get(), buf.pitch());
        edit(&mut a);
        // An accepted request is one more framebuffer of this file; a refused one nothing.
        let r = changes(
            dev,
            "ADDFB2",
            |r| match r {
                Ok(_) => Delta::framebuffers(1),
                Err(_) => Delta::NONE,
            },
            || raw::addfb2(dev.as_fd(), a),
        );
        result = match r {
            Ok(made) => {
                // Accepted: remove it again so nothing leaks, and report no errno.
                raw::rmfb(dev.as_fd(), &mut { made.fb_id }).expect("RMFB");
                None
            }
            Err(e) => Some(e),
        };
    });
    result
}

/// Explicit LINEAR: fine where the device takes modifiers; EINVAL where it takes none
/// (5.10's vkms).
fn linear_modifier() -> Option<Errno> {
    let dev = vkms(CAPS)?;
    (dev.raw_cap(sys::DRM_CAP_ADDFB2_MODIFIERS).unwrap_or(0) == 0).then_some(Errno::INVAL)
}

/// A modifier no plane supports. Where the device takes no modifiers at all
/// (`DRM_CAP_ADDFB2_MODIFIERS` 0, probed: vkms before Linux 5.18's "drm: introduce
/// fb_modifiers_not_supported flag in mode_config" gave every plane LINEAR) the core
/// refuses the flag: EINVAL. Else the GEM framebuffer helper checks the modifier against
/// the planes from Linux 6.5 (c91acda3a380, "drm/gem: Check for valid formats"): EINVAL;
/// before it (6.1 here) any modifier gets through.
fn bad_modifier() -> Option<Errno> {
    let dev = vkms(CAPS)?;
    let no_modifiers = dev.raw_cap(sys::DRM_CAP_ADDFB2_MODIFIERS).unwrap_or(0) == 0;
    (no_modifiers || kernel_version() >= (6, 5)).then_some(Errno::INVAL)
}

macro_rules! addfb_case {
    ($name:ident, $want:expr, |$a:ident| $edit:block) => {
        #[test]
        fn $name() {
            require_feature!("vkms");
            if vkms(CAPS).is_none() {
                skip!("no vkms node");
            }
            let want: Option<Errno> = $want;
            match addfb2(|$a: &mut sys::drm_mode_fb_cmd2| {
                $edit;
            }) {
                r if r == want => {}
                r => panic!("ADDFB2 answered {r:?}, expected {want:?}"),
            }
        }
    };
}

// Unused plane fields are only checked for callers that pass DRM_MODE_FB_MODIFIERS: old
// userspace did not clear them, so without the flag the kernel ignores them.
addfb_case!(addfb2_pitch_4096_is_fine, None, |a| {
    a.pitches[0] = 4096;
});
addfb_case!(addfb2_pitch_0, Some(Errno::INVAL), |a| {
    a.pitches[0] = 0;
});
addfb_case!(addfb2_pitch_32, Some(Errno::INVAL), |a| {
    a.pitches[0] = 32;
});
addfb_case!(addfb2_pitch_63, Some(Errno::INVAL), |a| {
    a.pitches[0] = 63;
});
addfb_case!(addfb2_pitch_128, Some(Errno::INVAL), |a| {
    a.pitches[0] = 128;
});
addfb_case!(addfb2_pitch_256, Some(Errno::INVAL), |a| {
    a.pitches[0] = 256;
});
addfb_case!(addfb2_pitch_1024, Some(Errno::INVAL), |a| {
    a.pitches[0] = 1024;
});
addfb_case!(addfb2_pitch_999, Some(Errno::INVAL), |a| {
    a.pitches[0] = 999;
});
addfb_case!(addfb2_pitch_65536, Some(Errno::INVAL), |a| {
    a.pitches[0] = 65536;
});
addfb_case!(addfb2_too_wide, Some(Errno::INVAL), |a| {
    a.width = 0x10000;
});
addfb_case!(addfb2_too_high, Some(Errno::INVAL), |a| {
    a.height = 0x10000;
});
addfb_case!(addfb2_width_0, Some(Errno::INVAL), |a| {
    a.width = 0;
});
addfb_case!(addfb2_buffer_too_small, Some(Errno::INVAL), |a| {
    a.height = W + 1;
});
addfb_case!(addfb2_offset_past_the_buffer, Some(Errno::INVAL), |a| {
    a.offsets[0] = 4096;
});
addfb_case!(
    addfb2_unused_handle_set_without_modifiers_is_ignored,
    None,
    |a| {
        a.handles[1] = a.handles[0];
    }
);
addfb_case!(
    addfb2_unused_pitch_set_without_modifiers_is_ignored,
    None,
    |a| {
        a.pitches[1] = 4096;
    }
);
addfb_case!(
    addfb2_unused_offset_set_without_modifiers_is_ignored,
    None,
    |a| {
        a.offsets[1] = 4096;
    }
);
addfb_case!(addfb2_unused_handle_set, Some(Errno::INVAL), |a| {
    a.flags = sys::DRM_MODE_FB_MODIFIERS;
    a.handles[1] = a.handles[0];
});
addfb_case!(addfb2_unused_pitch_set, Some(Errno::INVAL), |a| {
    a.flags = sys::DRM_MODE_FB_MODIFIERS;
    a.pitches[1] = 4096;
});
addfb_case!(addfb2_unused_offset_set, Some(Errno::INVAL), |a| {
    a.flags = sys::DRM_MODE_FB_MODIFIERS;
    a.offsets[1] = 4096;
});
addfb_case!(addfb2_unused_modifier_set, Some(Errno::INVAL), |a| {
    a.flags = sys::DRM_MODE_FB_MODIFIERS;
    a.modifier[1] = 1;
});
addfb_case!(addfb2_linear_modifier, linear_modifier(), |a| {
    a.flags = sys::DRM_MODE_FB_MODIFIERS;
});
addfb_case!(addfb2_unknown_format, Some(Errno::INVAL), |a| {
    a.pixel_format = 0x2020_2020;
});
addfb_case!(addfb2_bad_modifier, bad_modifier(), |a| {
    a.flags = sys::DRM_MODE_FB_MODIFIERS;
    a.modifier[0] = 0x00ff_ffff_ffff_ffff;
});
addfb_case!(addfb2_unknown_flag, Some(Errno::INVAL), |a| {
    a.flags = 0x80;
});

#[test]
fn atomic_unknown_object() {
    let dev = vkms!(CAPS);
    no_kms_leak(&dev, "atomic_unknown_object", |dev| {
        let crtc = dev.resources().unwrap().crtcs[0];
        let active = prop(dev, crtc, "ACTIVE");
        let mut req = AtomicRequest::new();
        req.set(drm_gem::kms::CrtcId::new(0x7fff_fff0).unwrap(), active, 1);
        assert_eq!(
            errno(
                unchanged(dev, "DRM_IOCTL_MODE_ATOMIC", || dev.atomic_commit(
                    &req,
                    AtomicFlags::TEST_ONLY,
                    0
                )),
                "DRM_IOCTL_MODE_ATOMIC"
            ),
            Errno::NOENT
        );
    });
}

#[test]
fn atomic_unknown_property() {
    let dev = vkms!(CAPS);
    no_kms_leak(&dev, "atomic_unknown_property", |dev| {
        let crtc = dev.resources().unwrap().crtcs[0];
        let mut req = AtomicRequest::new();
        req.set(crtc, PropertyId::new(0x7fff_fff0).unwrap(), 1);
        // A property the kernel will not describe cannot be shown not to take a user
        // pointer, so drm-gem fails closed: the commit returns GETPROPERTY's ENOENT and the
        // kernel is never asked to commit it (pointer_props.rs has the full check).
        assert_eq!(
            errno(
                unchanged(dev, "DRM_IOCTL_MODE_GETPROPERTY", || dev.atomic_commit(
                    &req,
                    AtomicFlags::TEST_ONLY,
                    0
                )),
                "DRM_IOCTL_MODE_GETPROPERTY"
            ),
            Errno::NOENT
        );
    });
}

#[test]
fn atomic_property_not_on_that_object() {
    let dev = vkms!(CAPS);
    no_kms_leak(&dev, "atomic_property_not_on_that_object", |dev| {
        let crtc = dev.resources().unwrap().crtcs[0];
        let plane = dev.plane_ids().unwrap()[0];
        let mut req = AtomicRequest::new();
        req.set(crtc, prop(dev, plane, "FB_ID"), 0);
        assert_eq!(
            errno(
                unchanged(dev, "DRM_IOCTL_MODE_ATOMIC", || dev.atomic_commit(
                    &req,
                    AtomicFlags::TEST_ONLY,
                    0
                )),
                "DRM_IOCTL_MODE_ATOMIC"
            ),
            Errno::NOENT
        );
    });
}

#[test]
fn atomic_value_out_of_range() {
    let dev = vkms!(CAPS);
    no_kms_leak(&dev, "atomic_value_out_of_range", |dev| {
        let crtc = dev.resources().unwrap().crtcs[0];
        let (active, _) = dev.find_property(crtc, "ACTIVE").unwrap();
        assert!(active.check(2).is_err(), "the library refuses it first");
        let mut req = AtomicRequest::new();
        req.set(crtc, active.id, 2);
        assert_eq!(
            errno(
                unchanged(dev, "DRM_IOCTL_MODE_ATOMIC", || dev.atomic_commit(
                    &req,
                    AtomicFlags::TEST_ONLY | AtomicFlags::ALLOW_MODESET,
                    0
                )),
                "DRM_IOCTL_MODE_ATOMIC"
            ),
            Errno::INVAL
        );
    });
}

#[test]
fn atomic_unknown_blob() {
    let dev = vkms!(CAPS);
    no_kms_leak(&dev, "atomic_unknown_blob", |dev| {
        let crtc = dev.resources().unwrap().crtcs[0];
        let mut req = AtomicRequest::new();
        req.set(crtc, prop(dev, crtc, "MODE_ID"), 0x7fff_fff0);
        assert_eq!(
            errno(
                unchanged(dev, "DRM_IOCTL_MODE_ATOMIC", || dev.atomic_commit(
                    &req,
                    AtomicFlags::TEST_ONLY | AtomicFlags::ALLOW_MODESET,
                    0
                )),
                "DRM_IOCTL_MODE_ATOMIC"
            ),
            Errno::INVAL
        );
    });
}

#[test]
fn atomic_blob_of_the_wrong_size() {
    let dev = vkms!(CAPS);
    no_kms_leak(&dev, "atomic_blob_of_the_wrong_size", |dev| {
        let crtc = dev.resources().unwrap().crtcs[0];
        let blob = dev.create_blob(&[1, 2, 3]).unwrap();
        let mut req = AtomicRequest::new();
        req.set(crtc, prop(dev, crtc, "MODE_ID"), blob.id());
        assert_eq!(
            errno(
                unchanged(dev, "DRM_IOCTL_MODE_ATOMIC", || dev.atomic_commit(
                    &req,
                    AtomicFlags::TEST_ONLY | AtomicFlags::ALLOW_MODESET,
                    0
                )),
                "DRM_IOCTL_MODE_ATOMIC"
            ),
            Errno::INVAL
        );
    });
}

#[test]
fn atomic_conflicting_flags() {
    let dev = vkms!(CAPS);
    no_kms_leak(&dev, "atomic_conflicting_flags", |dev| {
        let req = AtomicRequest::new();
        // A test-only commit cannot send a flip event.
        assert_eq!(
            errno(
                unchanged(dev, "DRM_IOCTL_MODE_ATOMIC", || dev.atomic_commit(
                    &req,
                    AtomicFlags::TEST_ONLY | AtomicFlags::PAGE_FLIP_EVENT,
                    0
                )),
                "DRM_IOCTL_MODE_ATOMIC"
            ),
            Errno::INVAL
        );
    });
}

#[test]
fn atomic_unknown_flags() {
    let dev = vkms!(CAPS);
    no_kms_leak(&dev, "atomic_unknown_flags", |dev| {
        let req = AtomicRequest::new();
        assert_eq!(
            errno(
                unchanged(dev, "DRM_IOCTL_MODE_ATOMIC", || dev.atomic_commit(
                    &req,
                    AtomicFlags::from_bits_retain(0x8000),
                    0
                )),
                "DRM_IOCTL_MODE_ATOMIC"
            ),
            Errno::INVAL
        );
    });
}

#[test]
fn atomic_without_the_client_cap() {
    require_feature!("vkms");
    kernel_tests::fds_shared();
    let Ok(dev) = Device::open_driver("vkms", Some(NodeKind::Primary)) else {
        skip!("no vkms node");
    };
    let req = AtomicRequest::new();
    assert_eq!(
        errno(
            unchanged(&dev, "DRM_IOCTL_MODE_ATOMIC", || dev.atomic_commit(
                &req,
                AtomicFlags::TEST_ONLY,
                0
            )),
            "DRM_IOCTL_MODE_ATOMIC"
        ),
        Errno::INVAL
    );
}

#[test]
fn atomic_in_fence_that_is_not_a_fence() {
    let dev = vkms!(CAPS);
    no_kms_leak(&dev, "atomic_in_fence_that_is_not_a_fence", |dev| {
        let snap = Snapshot::take(dev).unwrap();
        let plane = snap.planes[0].plane.id;
        let null = std::fs::File::open("/dev/null").unwrap();
        let mut req = AtomicRequest::new();
        req.in_fence(plane, prop(dev, plane, "IN_FENCE_FD"), null.as_fd());
        assert_eq!(
            errno(
                unchanged(dev, "DRM_IOCTL_MODE_ATOMIC", || dev.atomic_commit(
                    &req,
                    AtomicFlags::TEST_ONLY,
                    0
                )),
                "DRM_IOCTL_MODE_ATOMIC"
            ),
            Errno::INVAL
        );
    });
}

#[test]
fn getpropblob_of_an_id_that_is_another_object() {
    let dev = vkms!(CAPS);
    no_kms_leak(&dev, "getpropblob_of_an_id_that_is_another_object", |dev| {
        // A CRTC's id asked for as a blob: ids are shared by every object type.
        let crtc = dev.resources().unwrap().crtcs[0];
        let e = errno(
            unchanged(dev, "DRM_IOCTL_MODE_GETPROPBLOB", || {
                dev.blob(drm_gem::kms::BlobId::new(crtc.get()).unwrap())
            }),
            "DRM_IOCTL_MODE_GETPROPBLOB",
        );
        assert_eq!(e, Errno::NOENT);
    });
}

#[test]
fn setcrtc_with_an_unknown_framebuffer() {
    let dev = vkms!(CAPS);
    no_kms_leak(&dev, "setcrtc_with_an_unknown_framebuffer", |dev| {
        let snap = Snapshot::take(dev).unwrap();
        let crtc = snap.resources.crtcs[0];
        let conn = snap.resources.connectors[0];
        let mode = drm_gem::kms::Mode::from(&sys::drm_mode_modeinfo::default());
        let e = errno(
            unchanged(dev, "DRM_IOCTL_MODE_SETCRTC", || {
                dev.set_crtc(
                    crtc,
                    FramebufferId::new(0x7fff_fff0).unwrap(),
                    (0, 0),
                    &[conn],
                    &mode,
                )
            }),
            "DRM_IOCTL_MODE_SETCRTC",
        );
        assert_eq!(e, Errno::NOENT);
    });
}

#[test]
fn setplane_of_an_unknown_plane() {
    let dev = vkms!(CAPS);
    no_kms_leak(&dev, "setplane_of_an_unknown_plane", |dev| {
        let crtc = dev.resources().unwrap().crtcs[0];
        let e = errno(
            unchanged(dev, "DRM_IOCTL_MODE_SETPLANE", || {
                dev.set_plane(
                    drm_gem::kms::PlaneId::new(0x7fff_fff0).unwrap(),
                    crtc,
                    None,
                    PlaneRect::full(64, 64),
                )
            }),
            "DRM_IOCTL_MODE_SETPLANE",
        );
        assert_eq!(e, Errno::NOENT);
    });
}

#[test]
fn cursor_on_an_unknown_crtc() {
    let dev = vkms!(CAPS);
    no_kms_leak(&dev, "cursor_on_an_unknown_crtc", |dev| {
        let e = errno(
            unchanged(dev, "DRM_IOCTL_MODE_CURSOR2", || {
                dev.move_cursor(drm_gem::kms::CrtcId::new(0x7fff_fff0).unwrap(), (1, 1))
            }),
            "DRM_IOCTL_MODE_CURSOR2",
        );
        assert_eq!(e, Errno::NOENT);
    });
}

#[test]
fn cursor_with_an_unknown_buffer() {
    let dev = vkms!(CAPS);
    no_kms_leak(&dev, "cursor_with_an_unknown_buffer", |dev| {
        let crtc = dev.resources().unwrap().crtcs[0];
        let e = errno(
            unchanged(dev, "DRM_IOCTL_MODE_CURSOR2", || {
                dev.set_cursor(crtc, GemHandle::new(0xdead), (64, 64), (0, 0))
            }),
            "DRM_IOCTL_MODE_CURSOR2",
        );
        // The CRTC is off: 5.10/6.1 answer EINVAL before looking the buffer up; 6.12
        // looks it up first.
        assert!(matches!(e, Errno::NOENT | Errno::INVAL), "{e:?}");
    });
}

#[test]
fn page_flip_on_an_off_crtc() {
    let dev = vkms!(CAPS);
    kernel_tests::kms_all_off(&dev).expect("all off");
    no_kms_leak(&dev, "page_flip_on_an_off_crtc", |dev| {
        let crtc = dev.resources().unwrap().crtcs[0];
        let buf = big(dev);
        let fb = dev
            .add_framebuffer(&FbSpec::single(
                W,
                W,
                drm_gem::DrmFourcc::Xrgb8888,
                buf.handle(),
                4 * W,
            ))
            .unwrap();
        // The legacy flip needs a framebuffer on the primary plane already.
        let e = errno(
            unchanged(dev, "DRM_IOCTL_MODE_PAGE_FLIP", || {
                dev.page_flip(crtc, fb.id(), Some(1))
            }),
            "DRM_IOCTL_MODE_PAGE_FLIP",
        );
        assert_eq!(e, Errno::BUSY);
    });
}

#[test]
fn page_flip_to_an_unknown_framebuffer() {
    let dev = vkms!(CAPS);
    kernel_tests::kms_all_off(&dev).expect("all off");
    no_kms_leak(&dev, "page_flip_to_an_unknown_framebuffer", |dev| {
        let snap = Snapshot::take(dev).unwrap();
        let crtc = snap.resources.crtcs[0];
        let (conn, mode) = kernel_tests::vkms_output(dev, &snap);
        let buf = big(dev);
        let fb = dev
            .add_framebuffer(&FbSpec::single(
                W,
                W,
                drm_gem::DrmFourcc::Xrgb8888,
                buf.handle(),
                4 * W,
            ))
            .unwrap();
        dev.set_crtc(crtc, fb.id(), (0, 0), &[conn], &mode)
            .expect("SETCRTC");
        let e = errno(
            unchanged(dev, "DRM_IOCTL_MODE_PAGE_FLIP", || {
                dev.page_flip(crtc, FramebufferId::new(0x7fff_fff0).unwrap(), None)
            }),
            "DRM_IOCTL_MODE_PAGE_FLIP",
        );
        assert_eq!(e, Errno::NOENT);
        dev.disable_crtc(crtc).expect("SETCRTC off");
    });
}

#[test]
fn sequence_of_an_off_crtc() {
    let dev = vkms!(CAPS);
    kernel_tests::kms_all_off(&dev).expect("all off");
    no_kms_leak(&dev, "sequence_of_an_off_crtc", |dev| {
        let crtc = dev.resources().unwrap().crtcs[0];
        let e = errno(
            unchanged(dev, "DRM_IOCTL_CRTC_QUEUE_SEQUENCE", || {
                dev.queue_sequence(crtc, 1, true, false, 0)
            }),
            "DRM_IOCTL_CRTC_QUEUE_SEQUENCE",
        );
        assert_eq!(e, Errno::INVAL);
    });
}

#[test]
fn wait_vblank_of_a_crtc_index_out_of_range() {
    let dev = vkms!(CAPS);
    no_kms_leak(&dev, "wait_vblank_of_a_crtc_index_out_of_range", |dev| {
        let e = errno(
            unchanged(dev, "DRM_IOCTL_WAIT_VBLANK", || dev.wait_vblank(7, 1, None)),
            "DRM_IOCTL_WAIT_VBLANK",
        );
        assert_eq!(e, Errno::INVAL);
    });
}

#[test]
fn set_gamma_of_the_wrong_size() {
    let dev = vkms!(CAPS);
    no_kms_leak(&dev, "set_gamma_of_the_wrong_size", |dev| {
        let crtc = dev.resources().unwrap().crtcs[0];
        let size = dev.crtc(crtc).unwrap().gamma_size as usize;
        let ramps = [
            vec![0u16; size + 1],
            vec![0u16; size + 1],
            vec![0u16; size + 1],
        ];
        let e = errno(
            unchanged(dev, "DRM_IOCTL_MODE_SETGAMMA", || {
                dev.set_gamma(crtc, &ramps)
            }),
            "DRM_IOCTL_MODE_SETGAMMA",
        );
        // A CRTC without gamma (size 0: vkms before 6.12) has no gamma_set hook: ENOSYS.
        let want = if size == 0 {
            Errno::NOSYS
        } else {
            Errno::INVAL
        };
        assert_eq!(e, want);
    });
}

/// The objects a lease of vkms's pipe needs: CRTC, connector, primary plane.
fn pipe_objects(dev: &Device) -> Vec<u32> {
    let snap = Snapshot::take(dev).unwrap();
    let primary = snap
        .planes
        .iter()
        .find(|p| p.kind == Some(drm_gem::kms::PlaneType::Primary))
        .unwrap();
    vec![
        snap.resources.crtcs[0].get(),
        snap.connectors[0].connector.id.get(),
        primary.plane.id.get(),
    ]
}

#[test]
fn lease_of_nothing() {
    let dev = vkms!(CAPS);
    no_kms_leak(&dev, "lease_of_nothing", |dev| {
        // A granted lease is one more fd (the lessee's file); a refused one is nothing.
        let r = changes(
            dev,
            "an empty lease",
            |r| match r {
                Ok(_) => Delta::fds(1),
                Err(_) => Delta::NONE,
            },
            || dev.create_lease(&[]),
        );
        // Linux 5.16+ (4bb2d367a5a2, "drm/lease: allow empty leases") grants it (a
        // lessee that sees no objects); before, EINVAL (5.10 and 5.15 here).
        if kernel_version() < (5, 16) {
            assert_eq!(errno(r, "DRM_IOCTL_MODE_CREATE_LEASE"), Errno::INVAL);
        } else {
            let lease = r.expect("an empty lease");
            assert!(lease.lessee.leased_objects().unwrap().is_empty());
        }
    });
}

#[test]
fn lease_with_duplicate_objects() {
    let dev = vkms!(CAPS);
    no_kms_leak(&dev, "lease_with_duplicate_objects", |dev| {
        let mut objs = pipe_objects(dev);
        objs.push(objs[0]);
        let e = errno(
            unchanged(dev, "DRM_IOCTL_MODE_CREATE_LEASE", || {
                dev.create_lease(&objs)
            }),
            "DRM_IOCTL_MODE_CREATE_LEASE",
        );
        // The second insert of one id into the lease's id table.
        assert_eq!(e, Errno::NOSPC);
    });
}

#[test]
fn lease_of_a_non_kms_object() {
    let dev = vkms!(CAPS);
    no_kms_leak(&dev, "lease_of_a_non_kms_object", |dev| {
        let mut objs = pipe_objects(dev);
        let blob = dev.create_blob(&[0; 8]).unwrap();
        objs.push(blob.id().get());
        let e = errno(
            unchanged(dev, "DRM_IOCTL_MODE_CREATE_LEASE", || {
                dev.create_lease(&objs)
            }),
            "DRM_IOCTL_MODE_CREATE_LEASE",
        );
        assert_eq!(e, Errno::INVAL);
    });
}

#[test]
fn lease_of_an_unknown_object() {
    let dev = vkms!(CAPS);
    no_kms_leak(&dev, "lease_of_an_unknown_object", |dev| {
        let e = errno(
            unchanged(dev, "DRM_IOCTL_MODE_CREATE_LEASE", || {
                dev.create_lease(&[0x7fff_fff0])
            }),
            "DRM_IOCTL_MODE_CREATE_LEASE",
        );
        assert_eq!(e, Errno::NOENT);
    });
}

#[test]
fn revoke_of_an_unknown_lessee() {
    let dev = vkms!(CAPS);
    no_kms_leak(&dev, "revoke_of_an_unknown_lessee", |dev| {
        let e = errno(
            unchanged(dev, "DRM_IOCTL_MODE_REVOKE_LEASE", || {
                dev.revoke_lease(0x7fff)
            }),
            "DRM_IOCTL_MODE_REVOKE_LEASE",
        );
        assert_eq!(e, Errno::NOENT);
    });
}

#[test]
fn close_framebuffer_where_the_kernel_lacks_it() {
    let dev = vkms!(CAPS);
    no_kms_leak(&dev, "close_framebuffer_where_the_kernel_lacks_it", |dev| {
        let buf = big(dev);
        let fb = dev
            .add_framebuffer(&FbSpec::single(
                W,
                W,
                drm_gem::DrmFourcc::Xrgb8888,
                buf.handle(),
                4 * W,
            ))
            .unwrap();
        // CLOSEFB, or RMFB where the kernel lacks it: the framebuffer is gone either way.
        // CLOSEFB is Linux 6.8+ (d208d875667e, "drm: introduce CLOSEFB IOCTL").
        let r = changes(
            dev,
            "CLOSEFB",
            |_| Delta::framebuffers(-1),
            || dev.close_framebuffer(fb),
        );
        if kernel_version() >= (6, 8) {
            r.expect("CLOSEFB since 6.8");
        } else {
            match r {
                Err(Error::Unsupported {
                    feature: "CLOSEFB", ..
                }) => {}
                other => panic!("CLOSEFB before 6.8: {other:?}"),
            }
        }
    });
}
