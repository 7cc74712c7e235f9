//! bochs (QEMU `-vga std`) in real guests: where dumb buffers live and what scan-out puts in
//! VRAM, read from the driver's debugfs `vram-mm` where it has the VRAM helper (5.10-6.12
//! and the stock kernels) and from VRAM itself (PCI BAR 0 through sysfs `resource0`) where
//! it has the GEM shmem helper instead (7.3).

use drm_gem::driver::bochs;
use drm_gem::{Device, DumbBuffer, DumbSpec, Error, NodeKind};
use kernel_tests::{kernel_version as kernel, open_fds, require_driver};

/// Where dumb buffers go. The VRAM helper creates buffer objects in system memory (5.10
/// asks for VRAM | SYSTEM, but TTM leaves a new object where it is compatible; 6.1+ asks for
/// SYSTEM) and moves one into VRAM when it is pinned for scan-out. So creating a buffer,
/// mapping it and writing to it leaves `vram-mm` exactly as it was on every matrix kernel,
/// while the buffer a CRTC scans out (fbcon's, on 5.10 and the stock kernels) is the one
/// used range: as many pages as that framebuffer's pitch x height (read back with GETFB2).
/// Where nothing is scanned out (the self-built 6.1 and 6.12 have no fbcon) VRAM is empty.
///
/// A bochs without the VRAM helper (7.3's: GEM shmem, no `vram-mm`; the driver copies
/// damaged rectangles into VRAM at offset 0) keeps dumb buffers in system memory: writing
/// one leaves VRAM (BAR 0, read through sysfs `resource0`) exactly as it was.
#[test]
fn bochs_vram_placement() {
    let dev = require_driver!("bochs", &bochs::DRIVER_NAMES, NodeKind::Primary);
    if let Err(e) = bochs::vram_mm(&dev) {
        eprintln!("no VRAM manager: {e}");
        assert_no_vram_manager(&e);
        let vram = BochsVram::map(&dev);
        let before = vram.words(1024);
        let mut b = DumbBuffer::create(&dev, DumbSpec::new(256, 256, 32)).expect("CREATE_DUMB");
        b.map().unwrap().write_at(0, &[0xa5; 4096]).unwrap();
        assert_eq!(vram.words(1024), before, "a dumb buffer is not in VRAM");
        return;
    }
    let read = || {
        let text = std::fs::read_to_string(bochs::vram_mm_path(&dev).unwrap()).unwrap();
        let mm = bochs::vram_mm(&dev).expect("vram-mm");
        assert_eq!(drm_gem::driver::bochs::VramMm::parse(&text).unwrap(), mm);
        eprintln!("vram-mm:\n{text}");
        mm
    };
    let before = read();
    assert_eq!(before.use_type, Some(true));
    assert_eq!(before.use_tt, Some(false));
    assert_eq!(Some(before.total_pages), before.size_pages);
    assert_eq!(
        before.total_bytes(),
        16 << 20,
        "QEMU -vga std has 16 MiB of VRAM"
    );
    // `usage:` (bytes): Linux 5.18+ ("drm/ttm: add common accounting to the resource mgr
    // v3"); 5.10 and 5.15 print none.
    let k = kernel();
    assert_eq!(before.usage_bytes.is_some(), k >= (5, 18), "{k:?}");
    if let Some(u) = before.usage_bytes {
        assert_eq!(u, before.used_bytes());
    }
    let spec = DumbSpec {
        width: 256,
        height: 256,
        bpp: 32,
    };
    let mut b = DumbBuffer::create(&dev, spec).expect("CREATE_DUMB");
    b.map().unwrap().write_at(0, &[1; 4096]).unwrap();
    let after = read();
    assert_eq!(
        after, before,
        "a new buffer waits in system memory until scan-out"
    );

    // What is in VRAM is what a CRTC scans out.
    let res = dev.resources().expect("GETRESOURCES");
    let mut scanned = Vec::new();
    for c in &res.crtcs {
        if let Some(fb) = dev.crtc(*c).expect("GETCRTC").framebuffer {
            let info = dev.framebuffer_info(fb).expect("GETFB2");
            let bytes = u64::from(info.planes[0].pitch) * u64::from(info.height);
            eprintln!(
                "CRTC {c:?} scans out {}x{} (pitch {}): {bytes} bytes",
                info.width, info.height, info.planes[0].pitch
            );
            scanned.push(bytes.div_ceil(4096));
        }
    }
    let used: Vec<u64> = before.used_ranges().map(|r| r.pages).collect();
    assert_eq!(used, scanned, "VRAM holds exactly the scanned-out buffers");
    drop(b);
    assert_eq!(read(), before, "destroying it leaves VRAM as it was");
}

fn prop<O: drm_gem::kms::ModeObject + core::fmt::Debug>(
    dev: &Device,
    obj: O,
    name: &str,
) -> drm_gem::kms::PropertyId {
    dev.find_property(obj, name)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .0
        .id
}

/// Scan-out is what puts a dumb buffer in VRAM. With the VRAM helper: after an atomic
/// modeset that shows our buffer, `vram-mm` has one more used range of exactly the
/// buffer's pages; after the pipe is off and the buffer destroyed, VRAM is back to where it
/// was. Without it (7.3's shmem bochs, probed by `vram-mm`'s absence): the modeset copies
/// the buffer to VRAM offset 0, and a later write reaches VRAM after DIRTYFB names it.
#[test]
fn bochs_scanout_puts_the_buffer_in_vram() {
    kernel_tests::fds_shared();
    use drm_gem::ClientCap;
    use drm_gem::kms::{AtomicFlags, AtomicRequest, FbSpec, Snapshot};
    let dev = require_driver!("bochs", &bochs::DRIVER_NAMES, NodeKind::Primary);
    dev.set_client_cap(ClientCap::UniversalPlanes, 1)
        .expect("UNIVERSAL_PLANES");
    dev.set_client_cap(ClientCap::Atomic, 1).expect("ATOMIC");
    dev.set_master().ok();
    let snap = Snapshot::take(&dev).expect("snapshot");
    let crtc = snap.resources.crtcs[0];
    let conn = snap.resources.connectors[0];
    let plane = snap
        .planes
        .iter()
        .find(|p| p.kind == Some(drm_gem::kms::PlaneType::Primary))
        .expect("a primary plane")
        .plane
        .id;
    let probed = dev.probe_connector(conn).expect("probe");
    let mode = *probed
        .modes
        .iter()
        .find(|m| m.size() == (640, 480))
        .or(probed.modes.first())
        .expect("a mode");
    let (w, h) = (u32::from(mode.size().0), u32::from(mode.size().1));
    let before = match bochs::vram_mm(&dev) {
        Ok(mm) => Some(mm),
        Err(e) => {
            eprintln!("no VRAM manager: {e}");
            assert_no_vram_manager(&e);
            None
        }
    };
    let fds = open_fds();
    {
        let spec = DumbSpec {
            width: w,
            height: h,
            bpp: 32,
        };
        let buf = DumbBuffer::create(&dev, spec).expect("CREATE_DUMB");
        let pages = buf.size().div_ceil(4096);
        let fb = dev
            .add_framebuffer(&FbSpec::single(
                w,
                h,
                drm_gem::DrmFourcc::Xrgb8888,
                buf.handle(),
                buf.pitch(),
            ))
            .expect("ADDFB2");
        if let Some(before) = &before {
            assert_eq!(
                &bochs::vram_mm(&dev).unwrap(),
                before,
                "not yet scanned out"
            );
        }
        let mut buf = buf;
        let row = (buf.pitch() / 4) as usize;
        let pattern = |k: u32| move |i: usize| (i as u32).wrapping_mul(2_654_435_761) ^ k;
        write_words(&mut buf, 2 * row, pattern(1));
        let blob = dev.create_blob(&mode.to_blob_bytes()).expect("mode blob");
        let mut req = AtomicRequest::new();
        req.set(crtc, prop(&dev, crtc, "ACTIVE"), 1)
            .set(crtc, prop(&dev, crtc, "MODE_ID"), blob.id())
            .set(conn, prop(&dev, conn, "CRTC_ID"), u64::from(crtc.get()))
            .set(plane, prop(&dev, plane, "FB_ID"), fb.id())
            .set(plane, prop(&dev, plane, "CRTC_ID"), u64::from(crtc.get()))
            .set(plane, prop(&dev, plane, "SRC_X"), 0)
            .set(plane, prop(&dev, plane, "SRC_Y"), 0)
            .set(plane, prop(&dev, plane, "SRC_W"), u64::from(w) << 16)
            .set(plane, prop(&dev, plane, "SRC_H"), u64::from(h) << 16)
            .set(plane, prop(&dev, plane, "CRTC_X"), 0)
            .set(plane, prop(&dev, plane, "CRTC_Y"), 0)
            .set(plane, prop(&dev, plane, "CRTC_W"), u64::from(w))
            .set(plane, prop(&dev, plane, "CRTC_H"), u64::from(h));
        dev.atomic_commit(&req, AtomicFlags::ALLOW_MODESET, 0)
            .expect("modeset showing the buffer");
        assert_eq!(
            dev.crtc(crtc).unwrap().framebuffer,
            Some(fb.id()),
            "the CRTC shows our framebuffer"
        );
        if let Some(before) = &before {
            pinned(&dev, before, pages);
        } else {
            let vram = BochsVram::map(&dev);
            let want: Vec<u32> = (0..2 * row).map(pattern(1)).collect();
            assert_eq!(
                vram.words(2 * row),
                want,
                "the modeset copied the buffer to VRAM"
            );
            write_words(&mut buf, 2 * row, pattern(2));
            assert_eq!(
                vram.words(2 * row),
                want,
                "a write alone stays in system memory"
            );
            assert!(dev.dirty_framebuffer(fb.id(), &[]).expect("DIRTYFB"));
            let want: Vec<u32> = (0..2 * row).map(pattern(2)).collect();
            assert_eq!(
                vram.words(2 * row),
                want,
                "DIRTYFB copied the write to VRAM"
            );
        }

        let mut off = AtomicRequest::new();
        off.set(crtc, prop(&dev, crtc, "ACTIVE"), 0)
            .set(crtc, prop(&dev, crtc, "MODE_ID"), 0)
            .set(conn, prop(&dev, conn, "CRTC_ID"), 0)
            .set(plane, prop(&dev, plane, "FB_ID"), 0)
            .set(plane, prop(&dev, plane, "CRTC_ID"), 0);
        dev.atomic_commit(&off, AtomicFlags::ALLOW_MODESET, 0)
            .expect("pipe off");
        drop((fb, blob, buf));
    }
    if let Some(before) = &before {
        let after = bochs::vram_mm(&dev).expect("vram-mm");
        assert_eq!(after.used_pages, before.used_pages, "{after:?}");
    }
    assert_eq!(open_fds(), fds, "fds leaked");
    assert_eq!(dev.live_handles(), 0, "handles leaked");
}

/// `vram-mm` while our buffer is scanned out: one more used range, of its pages.
fn pinned(dev: &Device, before: &bochs::VramMm, pages: u64) {
    let on = bochs::vram_mm(dev).expect("vram-mm");
    let text = std::fs::read_to_string(bochs::vram_mm_path(dev).unwrap()).unwrap();
    eprintln!("{pages} pages; vram-mm while scanned out:\n{text}");
    assert_eq!(on.used_pages, before.used_pages + pages, "{on:?}");
    let new: Vec<_> = on
        .used_ranges()
        .filter(|r| !before.used_ranges().any(|o| o == *r))
        .collect();
    assert_eq!(new.len(), 1, "one new VRAM allocation: {new:?}");
    assert_eq!(new[0].pages, pages);
    if let Some(u) = on.usage_bytes {
        assert_eq!(u, on.used_bytes());
    }
}

/// The probe said no `vram-mm`: that must be because the driver has no VRAM manager
/// (debugfs is mounted in the guest), never another failure.
fn assert_no_vram_manager(e: &Error) {
    assert!(
        matches!(e, Error::Unsupported { reason, .. } if reason.contains("no VRAM manager")),
        "{e}"
    );
}

/// A bochs device's VRAM as the CPU sees it: PCI BAR 0 through sysfs `resource0`, mapped
/// read-only (the first 64 KiB).
struct BochsVram(kernel_tests::mem::Region);

impl BochsVram {
    fn map(dev: &Device) -> BochsVram {
        use std::os::fd::AsFd;
        let st = rustix::fs::fstat(dev).expect("fstat");
        let (ma, mi) = (rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev));
        let path = format!("/sys/dev/char/{ma}:{mi}/device/resource0");
        let f = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let pages = (64 << 10) / kernel_tests::mem::page();
        BochsVram(kernel_tests::mem::Region::file(
            f.as_fd(),
            pages,
            true,
            kernel_tests::mem::Access::Read,
        ))
    }

    /// The first `n` 32-bit words.
    fn words(&self, n: usize) -> Vec<u32> {
        (0..n).map(|i| self.0.u32_at(i)).collect()
    }
}

/// Writes `f(i)` as the `i`-th 32-bit word of `buf`, for the first `n` words.
fn write_words(buf: &mut DumbBuffer<&Device>, n: usize, f: impl Fn(usize) -> u32) {
    let bytes: Vec<u8> = (0..n).flat_map(|i| f(i).to_le_bytes()).collect();
    buf.map().unwrap().write_at(0, &bytes).unwrap();
}
