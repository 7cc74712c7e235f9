//! The kernel census (`kernel_tests::census`) in real guests: N new dumb buffers, mappings,
//! dma-bufs, imports, sync objects, framebuffers and property blobs are +N in the census,
//! and dropping them brings it back to the start; gaps in the handle space do not hide the
//! handles above them; files that cannot probe say `None`.

use drm_gem::kms::FbSpec;
use drm_gem::{Caps, Device, DumbBuffer, DumbSpec, NodeKind, PrimeFlags};
use kernel_tests::census::{Census, Counted};
use kernel_tests::{open_driver, require_driver, require_feature, skip, vkms};
use rustix::fd::AsFd;

const N: usize = 5;

fn spec() -> DumbSpec {
    DumbSpec {
        width: 64,
        height: 32,
        bpp: 32,
    }
}

fn plus(c: &Census, what: Counted, n: usize) -> Census {
    let mut c = c.clone();
    let add = |v: &mut usize| *v += n;
    match what {
        Counted::Fds => add(&mut c.fds),
        Counted::Maps => add(&mut c.maps),
        Counted::GemHandles => c.gem_handles.as_mut().map(add).unwrap_or(()),
        Counted::Syncobjs => c.syncobjs.as_mut().map(add).unwrap_or(()),
        Counted::Framebuffers => c.framebuffers.as_mut().map(add).unwrap_or(()),
        Counted::Blobs => c.blobs.as_mut().map(add).unwrap_or(()),
    }
    c
}

#[track_caller]
fn expect(want: &Census, dev: &Device, what: &str) {
    let got = Census::take(dev);
    assert!(
        *want == got,
        "{what}: census differs from the expected one: {}",
        want.diff(&got)
    );
}

/// Dumb buffers, their mappings, dma-bufs and a self-import, each +N, then back.
fn gem_counts(dev: &Device) {
    let start = Census::take(dev);
    assert!(
        start.gem_handles.is_some(),
        "a primary node probes its handles"
    );
    let mut bufs: Vec<_> = (0..N)
        .map(|_| DumbBuffer::create(dev, spec()).expect("CREATE_DUMB"))
        .collect();
    let with_bufs = plus(&start, Counted::GemHandles, N);
    expect(&with_bufs, dev, "N dumb buffers");
    {
        let maps: Vec<_> = bufs.iter_mut().map(|b| b.map().expect("map")).collect();
        expect(&plus(&with_bufs, Counted::Maps, N), dev, "N mappings");
        drop(maps);
    }
    expect(&with_bufs, dev, "mappings dropped");
    if !Caps::probe(dev).expect("caps").prime_export {
        // vkms on 5.10 (DRM_CAP_PRIME says so; PRIME_HANDLE_TO_FD answers ENOSYS).
        eprintln!("NOTE: no PRIME export here; dma-buf counts not checked on this device");
        drop(bufs);
        expect(&start, dev, "everything dropped");
        return;
    }
    let bufs_fds: Vec<_> = bufs
        .iter()
        .map(|b| dev.export(b.gem(), PrimeFlags::default()).expect("export"))
        .collect();
    let with_fds = plus(&with_bufs, Counted::Fds, N);
    expect(&with_fds, dev, "N dma-bufs");
    // A self-import answers the exporter's handle: no new handle.
    let again: Vec<_> = bufs_fds
        .iter()
        .map(|f| dev.import(f.as_fd()).expect("self-import"))
        .collect();
    expect(&with_fds, dev, "N self-imports");
    {
        let maps: Vec<_> = bufs_fds
            .iter()
            .map(|f| f.map().expect("map dma-buf"))
            .collect();
        expect(
            &plus(&with_fds, Counted::Maps, N),
            dev,
            "N dma-buf mappings",
        );
        drop(maps);
    }
    drop(again);
    drop(bufs);
    expect(
        &plus(&start, Counted::Fds, N),
        dev,
        "buffers dropped, dma-bufs kept",
    );
    drop(bufs_fds);
    expect(&start, dev, "everything dropped");
}

/// Handles 1..=10 with 2..=9 closed: the census probes past the gap.
fn gaps(dev: &Device) {
    let start = Census::take(dev);
    let mut bufs: Vec<_> = (0..10)
        .map(|_| Some(DumbBuffer::create(dev, spec()).expect("CREATE_DUMB")))
        .collect();
    let top = bufs
        .iter()
        .map(|b| b.as_ref().map_or(0, |b| b.handle().get()))
        .max()
        .unwrap();
    for b in bufs.iter_mut() {
        if b.as_ref().is_some_and(|b| b.handle().get() != top) {
            *b = None;
        }
    }
    expect(
        &plus(&start, Counted::GemHandles, 1),
        dev,
        "one handle above a gap",
    );
    drop(bufs);
    expect(&start, dev, "gap test dropped");
}

#[test]
fn census_counts_gem_on_vkms() {
    let dev = require_driver!("vkms", &["vkms"]);
    gem_counts(&dev);
    gaps(&dev);
}

#[test]
fn census_counts_gem_on_vgem() {
    let dev = require_driver!("vgem", &["vgem"], NodeKind::Primary);
    gem_counts(&dev);
    gaps(&dev);
    let c = Census::take(&dev);
    assert_eq!(
        (c.framebuffers, c.blobs),
        (None, None),
        "vgem has no KMS: {c:?}"
    );
}

#[test]
fn census_counts_gem_on_virtio_gpu() {
    let dev = require_driver!("virtio_gpu", &["virtio_gpu"]);
    gem_counts(&dev);
    gaps(&dev);
}

#[test]
fn census_of_a_render_node_has_no_gem_or_kms_counts() {
    let dev = require_driver!("vgem", &["vgem"], NodeKind::Render);
    let c = Census::take(&dev);
    assert_eq!(
        c.gem_handles, None,
        "MAP_DUMB is refused on render nodes: {c:?}"
    );
    assert_eq!((c.framebuffers, c.blobs), (None, None), "{c:?}");
}

/// An import from another device is a new handle there.
#[test]
fn census_counts_a_cross_device_import() {
    let vgem = require_driver!("vgem", &["vgem"], NodeKind::Primary);
    let vkms = require_driver!("vkms", &["vkms"]);
    let (a, b) = (Census::take(&vgem), Census::take(&vkms));
    let buf = DumbBuffer::create(&vgem, spec()).unwrap();
    let fd = vgem.export(buf.gem(), PrimeFlags::default()).unwrap();
    let obj = vkms
        .import(fd.as_fd())
        .expect("vkms imports a vgem dma-buf");
    expect(
        &plus(&plus(&a, Counted::GemHandles, 1), Counted::Fds, 1),
        &vgem,
        "exporter",
    );
    expect(
        &plus(&plus(&b, Counted::GemHandles, 1), Counted::Fds, 1),
        &vkms,
        "importer",
    );
    drop((obj, fd, buf));
    expect(&a, &vgem, "exporter after");
    expect(&b, &vkms, "importer after");
}

#[test]
fn census_counts_framebuffers_and_blobs_on_vkms() {
    let dev = vkms!();
    let start = Census::take(&dev);
    assert!(
        start.framebuffers.is_some() && start.blobs.is_some(),
        "{start:?}"
    );
    let bufs: Vec<_> = (0..N)
        .map(|_| DumbBuffer::create(&dev, spec()).unwrap())
        .collect();
    let fbs: Vec<_> = bufs
        .iter()
        .map(|b| {
            dev.add_framebuffer(&FbSpec::single(
                64,
                32,
                ioctl_sys::drm::DRM_FORMAT_XRGB8888,
                b.handle(),
                b.pitch(),
            ))
            .expect("ADDFB2")
        })
        .collect();
    let with_fbs = plus(
        &plus(&start, Counted::GemHandles, N),
        Counted::Framebuffers,
        N,
    );
    expect(&with_fbs, &dev, "N framebuffers");
    let blobs: Vec<_> = (0..N)
        .map(|i| dev.create_blob(&[i as u8; 16]).expect("CREATEPROPBLOB"))
        .collect();
    expect(&plus(&with_fbs, Counted::Blobs, N), &dev, "N blobs");
    drop(blobs);
    expect(&with_fbs, &dev, "blobs dropped");
    drop(fbs);
    drop(bufs);
    expect(&start, &dev, "framebuffers dropped");
}

#[test]
fn census_counts_syncobjs() {
    require_feature!("virtio_gpu");
    let Some(dev) = open_driver(&["virtio_gpu"], NodeKind::Primary).unwrap() else {
        skip!("no virtio-gpu node");
    };
    let start = Census::take(&dev);
    let Ok(objs) = dev.syncobjs() else {
        assert_eq!(
            start.syncobjs, None,
            "no DRIVER_SYNCOBJ: the census cannot count"
        );
        // vgem and vkms have no sync objects either; the census says so.
        let vgem = require_driver!("vgem", &["vgem"]);
        assert_eq!(Census::take(&vgem).syncobjs, None);
        eprintln!("NOTE: virtio-gpu has no sync objects on this kernel; the census says None");
        return;
    };
    assert!(start.syncobjs.is_some(), "{start:?}");
    let made: Vec<_> = (0..N)
        .map(|i| objs.create(i % 2 == 0).expect("SYNCOBJ_CREATE"))
        .collect();
    expect(&plus(&start, Counted::Syncobjs, N), &dev, "N syncobjs");
    let fd = made[1].export_sync_file();
    let want = plus(&start, Counted::Syncobjs, N);
    // An unsignalled syncobj without a fence exports nothing; whatever it answered,
    // a sync_file fd is one more fd.
    expect(
        &if fd.is_ok() {
            plus(&want, Counted::Fds, 1)
        } else {
            want
        },
        &dev,
        "export",
    );
    drop(fd);
    drop(made);
    expect(&start, &dev, "syncobjs dropped");
}

/// What drm-gem's own table cannot see: a handle given up with `into_raw` is still the
/// file's, and the census (asking the kernel) counts it until it is closed.
#[test]
fn census_sees_a_handle_the_library_gave_up() {
    let dev = require_driver!("vgem", &["vgem"]);
    let start = Census::take(&dev);
    let (lib, raw) = (
        dev.live_handles(),
        DumbBuffer::create(&dev, spec()).unwrap().into_raw(),
    );
    assert_eq!(
        dev.live_handles(),
        lib,
        "drm-gem's table no longer counts it"
    );
    expect(&plus(&start, Counted::GemHandles, 1), &dev, "a raw handle");
    let d = start.diff(&Census::take(&dev));
    assert_eq!(
        d.to_string(),
        format!(
            "gem_handles {0} -> {1} (+1)",
            start.gem_handles.unwrap(),
            start.gem_handles.unwrap() + 1
        )
    );
    dev.close_handle(raw).expect("GEM_CLOSE");
    expect(&start, &dev, "closed");
}
