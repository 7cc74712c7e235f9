//! `Drop` never panics, and what its release calls could not do is counted on the device
//! (`Device::release_failures`): each object whose release ioctl fails adds one, with the
//! ioctl and errno. Two ways for a release to fail, each on a real kernel:
//!
//! - on vkms, objects released behind their owners' backs with raw ioctls (the kernel's
//!   documented answers to a release of something that is gone: `DESTROY_DUMB` of an
//!   unknown handle is EINVAL (`drm_gem_handle_delete`), `RMFB` of an unknown framebuffer
//!   ENOENT (`drm_mode_rmfb`), `DESTROYPROPBLOB` of an unknown blob ENOENT
//!   (`drm_mode_destroyblob_ioctl`), the same in 5.10 and 6.12);
//! - a driver unbound from its device while objects are alive (`drm_dev_unplug`: every
//!   ioctl on the open file then answers ENODEV), then bound again. vkms cannot be used
//!   for this: it has no driver to unbind (a bare platform device), and an open file pins
//!   its module, so it cannot be reloaded either. bochs (a PCI driver) can; it has no
//!   sync objects.
//!
//! Tests are debug builds, where the `debug_assert!` the Drops had before panicked.

use drm_gem::kms::FbSpec;
use drm_gem::{Device, DumbBuffer, DumbSpec, Errno, Error, NodeKind, ReleaseFailures};
use ioctl_sys::drm as sys;
use kernel_tests::{raw, require_feature, skip, xrgb_fb};
use rustix::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

const SPEC: DumbSpec = DumbSpec {
    width: 64,
    height: 64,
    bpp: 32,
};

#[track_caller]
fn assert_counted(dev: &Device, count: u64, call: &'static str, errno: Errno) {
    assert_eq!(
        dev.release_failures(),
        ReleaseFailures {
            count,
            last: Some((call, errno)),
        },
        "after the release of {call}"
    );
}

#[test]
fn releases_the_kernel_refuses_are_counted_on_vkms() {
    require_feature!("vkms");
    let Ok(dev) = Device::open_driver("vkms", Some(NodeKind::Primary)) else {
        skip!("no vkms node");
    };
    assert_eq!(dev.release_failures(), ReleaseFailures::default());
    // Every object first, so that no number freed below is handed out again meanwhile.
    let dumb = DumbBuffer::create(&dev, SPEC).unwrap();
    let shown = DumbBuffer::create(&dev, SPEC).unwrap();
    let fb = xrgb_fb(&dev, &shown).unwrap();
    let blob = dev.create_blob(&[1, 2, 3, 4]).unwrap();
    let fd = dev.as_fd();
    raw::destroy_dumb(
        fd,
        sys::drm_mode_destroy_dumb {
            handle: dumb.handle().get(),
        },
    )
    .expect("raw DESTROY_DUMB");
    raw::rmfb(fd, &mut fb.id().get()).expect("raw RMFB");
    raw::destroypropblob(
        fd,
        sys::drm_mode_destroy_blob {
            blob_id: blob.id().get(),
        },
    )
    .expect("raw DESTROYPROPBLOB");
    drop(dumb);
    assert_counted(&dev, 1, "DRM_IOCTL_MODE_DESTROY_DUMB", Errno::INVAL);
    drop(fb);
    assert_counted(&dev, 2, "DRM_IOCTL_MODE_RMFB", Errno::NOENT);
    drop(blob);
    assert_counted(&dev, 3, "DRM_IOCTL_MODE_DESTROYPROPBLOB", Errno::NOENT);
    // Releases that work are not counted; the device works on.
    drop(shown);
    let again = DumbBuffer::create(&dev, SPEC).unwrap();
    let fb = xrgb_fb(&dev, &again).unwrap();
    drop((fb, again));
    assert_counted(&dev, 3, "DRM_IOCTL_MODE_DESTROYPROPBLOB", Errno::NOENT);
}

/// The sysfs device behind a DRM node, its bound driver's directory and the device's name
/// there (what `unbind` and `bind` take).
fn bound_device(dev: &Device) -> Option<(PathBuf, String)> {
    let st = rustix::fs::fstat(dev).ok()?;
    let (maj, min) = (rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev));
    let devdir = std::fs::canonicalize(format!("/sys/dev/char/{maj}:{min}/device")).ok()?;
    let driver = std::fs::canonicalize(devdir.join("driver")).ok()?;
    let name = devdir.file_name()?.to_str()?.to_string();
    Some((driver, name))
}

fn write_sysfs(path: &Path, what: &str) {
    std::fs::write(path, what)
        .unwrap_or_else(|e| panic!("write {what} to {}: {e}", path.display()));
}

/// Binds the device again and waits for a primary node of `driver`.
fn rebind(driver_dir: &Path, name: &str, driver: &str) -> Device {
    write_sysfs(&driver_dir.join("bind"), name);
    for _ in 0..250 {
        if let Ok(d) = Device::open_driver(driver, Some(NodeKind::Primary)) {
            return d;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("no {driver} node came back after binding {name} again");
}

#[test]
fn unbinding_the_driver_counts_every_release_as_enodev() {
    const DRIVER: &str = "bochs-drm";
    require_feature!("bochs");
    let Ok(dev) = Device::open_driver(DRIVER, Some(NodeKind::Primary)) else {
        skip!("no {DRIVER} node");
    };
    let Some((driver_dir, name)) = bound_device(&dev) else {
        panic!("{DRIVER}'s node has no bound sysfs device");
    };
    eprintln!("{DRIVER}: device {name}, driver {}", driver_dir.display());
    let a = DumbBuffer::create(&dev, SPEC).unwrap();
    let b = DumbBuffer::create(&dev, SPEC).unwrap();
    let s = b.spec();
    let fb = dev
        .add_framebuffer(&FbSpec::single(
            s.width,
            s.height,
            drm_gem::DrmFourcc::Xrgb8888,
            b.handle(),
            b.pitch(),
        ))
        .unwrap();
    let blob = dev.create_blob(&[7; 16]).unwrap();
    // Sync objects where the driver has them (bochs has none; the probe says so).
    let syncobjs = dev.syncobjs().ok();
    let syncobj = syncobjs.as_ref().map(|s| s.create(false).unwrap());
    assert_eq!(dev.release_failures(), ReleaseFailures::default());

    write_sysfs(&driver_dir.join("unbind"), &name);
    // Every ioctl on the open file now answers ENODEV: probe with a harmless one.
    match dev.driver() {
        Err(Error::Ioctl {
            name: "DRM_IOCTL_VERSION",
            errno,
        }) => assert_eq!(errno, Errno::NODEV),
        other => panic!("VERSION after unbind: {other:?}"),
    }
    let mut n = 0;
    drop(fb);
    n += 1;
    assert_counted(&dev, n, "DRM_IOCTL_MODE_RMFB", Errno::NODEV);
    drop(blob);
    n += 1;
    assert_counted(&dev, n, "DRM_IOCTL_MODE_DESTROYPROPBLOB", Errno::NODEV);
    let had_syncobj = syncobj.is_some();
    drop(syncobj);
    if had_syncobj {
        n += 1;
        assert_counted(&dev, n, "DRM_IOCTL_SYNCOBJ_DESTROY", Errno::NODEV);
    }
    drop((a, b));
    n += 2;
    assert_counted(&dev, n, "DRM_IOCTL_MODE_DESTROY_DUMB", Errno::NODEV);
    eprintln!("{DRIVER} unbound: {:?}", dev.release_failures());
    drop(dev);

    // Bound again, the device works and its new file counts nothing.
    let dev = rebind(&driver_dir, &name, DRIVER);
    let d = DumbBuffer::create(&dev, SPEC).expect("a dumb buffer after binding again");
    let fb = xrgb_fb(&dev, &d).unwrap();
    drop((fb, d));
    assert_eq!(dev.release_failures(), ReleaseFailures::default());
}

/// A sync object destroyed behind its owner's back (`drm_gem::raw`, which bypasses
/// ownership): its drop's `SYNCOBJ_DESTROY` of a handle that is gone is EINVAL
/// (`drm_syncobj_destroy`, 5.10 and 6.12), counted on every node whose driver has sync
/// objects (virtio-gpu since 6.x; none of the guest's drivers on 5.10).
#[test]
fn a_sync_object_destroyed_behind_its_back_is_counted() {
    let nodes = drm_gem::enumerate().unwrap_or_default();
    let mut checked = Vec::new();
    for n in nodes.iter().filter(|n| n.kind == NodeKind::Primary) {
        let Ok(dev) = Device::open(&n.path) else {
            continue;
        };
        let Ok(objs) = dev.syncobjs() else {
            continue; // the driver has none (the probe says so)
        };
        let a = objs.create(false).unwrap();
        let b = objs.create(true).unwrap();
        drm_gem::raw::syncobj_destroy(&dev, a.handle().get(), 0).expect("raw SYNCOBJ_DESTROY");
        drop(b);
        assert_eq!(dev.release_failures(), ReleaseFailures::default());
        drop(a);
        assert_counted(&dev, 1, "DRM_IOCTL_SYNCOBJ_DESTROY", Errno::INVAL);
        checked.push(n.driver.clone().unwrap_or_default());
    }
    eprintln!("sync objects checked on: {checked:?}");
    let has_virtio_gpu = nodes
        .iter()
        .any(|n| n.kind == NodeKind::Primary && n.driver.as_deref() == Some("virtio_gpu"));
    // virtio-gpu has had sync objects since "drm/virtio: Support sync objects" (Linux 6.4):
    // on any such kernel with a virtio-gpu node, that driver must have been checked.
    if kernel_tests::kernel_version() >= (6, 4) && has_virtio_gpu {
        assert!(
            checked.iter().any(|d| d == "virtio_gpu"),
            "virtio-gpu on 6.4+ has sync objects: {checked:?}"
        );
    }
}
