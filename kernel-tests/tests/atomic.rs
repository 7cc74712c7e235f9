//! Atomic modesetting on vkms, verified pixel for pixel: a known pattern committed on the
//! primary plane is captured through the writeback connector and compared byte for byte;
//! the CRC is stable across frames of the same content and changes with one pixel; flip
//! events, vblank sequences, `explain`, and the typed refusals (virtio-gpu without vblank,
//! or its vblank timer where it has one).

use drm_gem::kms::{
    AtomicFlags, AtomicRequest, ConnectorId, CrtcId, Event, FbSpec, FenceKind, Mode, PlaneId,
    PropertyId, Snapshot,
};
use drm_gem::{ClientCap, Device, DumbBuffer, DumbSpec, Error, NodeKind};
use ioctl_sys::drm as sys;
use kernel_tests::{open_fds, plane_of_kind, require_feature, skip, vkms, xrgb_fb};
use std::io::{BufRead, Write};
use std::time::Duration;

/// What a modeset on vkms needs.
struct Pipe {
    crtc: CrtcId,
    crtc_index: usize,
    conn: ConnectorId,
    writeback: ConnectorId,
    plane: PlaneId,
    cursor: Option<PlaneId>,
    mode: Mode,
}

fn prop<O: drm_gem::kms::ModeObject + core::fmt::Debug>(
    dev: &Device,
    obj: O,
    name: &str,
) -> PropertyId {
    dev.find_property(obj, name)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .0
        .id
}

/// The client caps every test here sets on vkms.
const ATOMIC: &[ClientCap] = &[
    ClientCap::UniversalPlanes,
    ClientCap::Atomic,
    ClientCap::WritebackConnectors,
];

fn pipe(dev: &Device) -> Pipe {
    let snap = Snapshot::take(dev).unwrap();
    let crtc = snap.resources.crtcs[0];
    let conn = snap
        .connectors
        .iter()
        .find(|c| c.connector.kind == sys::DRM_MODE_CONNECTOR_VIRTUAL)
        .unwrap();
    let writeback = snap
        .connectors
        .iter()
        .find(|c| c.connector.kind == sys::DRM_MODE_CONNECTOR_WRITEBACK)
        .expect("vkms writeback connector")
        .connector
        .id;
    let plane = plane_of_kind(&snap, drm_gem::kms::PlaneType::Primary).expect("a primary plane");
    let cursor = plane_of_kind(&snap, drm_gem::kms::PlaneType::Cursor);
    dev.set_master().ok();
    let probed = dev.probe_connector(conn.connector.id).unwrap();
    let mode = *probed
        .modes
        .iter()
        .find(|m| m.size() == (1024, 768))
        .expect("1024x768");
    Pipe {
        crtc,
        crtc_index: 0,
        conn: conn.connector.id,
        writeback,
        plane,
        cursor,
        mode,
    }
}

/// XRGB8888 pixel of the test pattern at (x, y).
fn px(x: u32, y: u32) -> u32 {
    (x.wrapping_mul(7) ^ y.wrapping_mul(13)) & 0xff | ((x & 0xff) << 8) | ((y & 0xff) << 16)
}

fn fill(buf: &mut DumbBuffer<&Device>, w: u32, h: u32) {
    let pitch = buf.pitch() as usize;
    let mut rows = vec![0u8; pitch * h as usize];
    for y in 0..h {
        for x in 0..w {
            let at = y as usize * pitch + x as usize * 4;
            rows[at..at + 4].copy_from_slice(&px(x, y).to_le_bytes());
        }
    }
    buf.map().unwrap().write_at(0, &rows).unwrap();
}

fn plane_props(dev: &Device, req: &mut AtomicRequest<'_>, p: &Pipe, fb: u32, w: u32, h: u32) {
    let pl = p.plane;
    req.set(pl, prop(dev, pl, "FB_ID"), u64::from(fb))
        .set(pl, prop(dev, pl, "CRTC_ID"), u64::from(p.crtc.get()))
        .set(pl, prop(dev, pl, "SRC_X"), 0)
        .set(pl, prop(dev, pl, "SRC_Y"), 0)
        .set(pl, prop(dev, pl, "SRC_W"), u64::from(w) << 16)
        .set(pl, prop(dev, pl, "SRC_H"), u64::from(h) << 16)
        .set(pl, prop(dev, pl, "CRTC_X"), 0)
        .set(pl, prop(dev, pl, "CRTC_Y"), 0)
        .set(pl, prop(dev, pl, "CRTC_W"), u64::from(w))
        .set(pl, prop(dev, pl, "CRTC_H"), u64::from(h));
}

fn spec(w: u32, h: u32) -> DumbSpec {
    DumbSpec {
        width: w,
        height: h,
        bpp: 32,
    }
}

#[test]
fn writeback_captures_exactly_what_was_committed() {
    let dev = vkms!(ATOMIC);
    let p = pipe(&dev);
    writeback_check(&dev, &p, &[]);
}

/// The same with vkms's cursor plane on top: an opaque 64x64 ARGB8888 square at (100, 50)
/// replaces exactly those pixels of the primary plane's pattern.
#[test]
fn writeback_captures_the_cursor_plane_too() {
    let dev = vkms!(ATOMIC);
    let p = pipe(&dev);
    let Some(cursor) = p.cursor else {
        skip!("this vkms offers no cursor plane")
    };
    writeback_check(&dev, &p, &[Square::new(cursor, CURSOR)]);
}

/// vkms reloaded with `enable_overlay=1` where it has that parameter (5.10's has none and
/// no overlay plane, which is asserted there): an opaque square on each overlay plane the
/// snapshot shows (up to two, overlapping) and the cursor over them. How many there are
/// is counted, not assumed: 5.15's vkms makes one, 6.1's and 6.12's make
/// `NUM_OVERLAY_PLANES` (8). vkms blends in plane order (primary, overlays in creation
/// order, cursor), so each pixel must come from the topmost square covering it, else from
/// the primary plane's pattern.
#[test]
fn writeback_captures_overlay_planes_in_order() {
    require_feature!("vkms");
    if !kernel_tests::in_guest() {
        skip!("reloading vkms with overlays is done only inside a guest");
    }
    let param = std::path::Path::new("/sys/module/vkms/parameters/enable_overlay");
    let Some(_reload) = VkmsReload::with_overlays(param.exists()) else {
        // The fact, asserted: no overlay parameter, no overlay plane.
        let dev = vkms!(ATOMIC);
        let s = Snapshot::take(&dev).unwrap();
        assert!(
            s.planes
                .iter()
                .all(|p| p.kind != Some(drm_gem::kms::PlaneType::Overlay)),
            "a vkms without enable_overlay shows an overlay plane"
        );
        return;
    };
    let dev = vkms!(ATOMIC);
    let p = pipe(&dev);
    let s = Snapshot::take(&dev).unwrap();
    let overlays: Vec<PlaneId> = s
        .planes
        .iter()
        .filter(|q| q.kind == Some(drm_gem::kms::PlaneType::Overlay))
        .map(|q| q.plane.id)
        .collect();
    assert!(
        !overlays.is_empty(),
        "vkms enable_overlay=1 offers no overlay plane"
    );
    eprintln!("vkms enable_overlay=1: {} overlay planes", overlays.len());
    let Some(cursor) = p.cursor else {
        panic!("vkms with overlays lost its cursor plane")
    };
    // Bottom to top; the overlays' planes are in id (creation) order.
    let mut squares: Vec<Square> = overlays
        .iter()
        .zip([(60, 30, 200, 0x00a0_1010), (180, 120, 150, 0x0010_a010)])
        .map(|(&plane, sq)| Square::new(plane, sq))
        .collect();
    squares.push(Square::new(cursor, (220, 150, 64, 0x0010_10a0)));
    writeback_check(&dev, &p, &squares);
}

/// vkms reloaded with overlay planes for one test, and back to the guest's default (none)
/// when dropped, also when the test fails.
struct VkmsReload;

impl VkmsReload {
    /// `None` when this vkms has no `enable_overlay` parameter (`available` false).
    fn with_overlays(available: bool) -> Option<Self> {
        if !available {
            return None;
        }
        vkms_load(true).unwrap_or_else(|e| panic!("reloading vkms with overlays: {e}"));
        Some(Self)
    }
}

impl Drop for VkmsReload {
    fn drop(&mut self) {
        // Never a panic here: during a failing test's unwinding it would abort the whole
        // binary. The tests after this one fail on a missing vkms, and this line says why.
        if let Err(e) = vkms_load(false) {
            eprintln!("restoring vkms (enable_overlay=0) failed: {e}");
        }
    }
}

/// `modprobe -r vkms` and `modprobe vkms enable_overlay=0|1` on the guest kernel's modules
/// (the harness exposes them under `$VM_MODULES_ROOT`); waits for its primary node.
fn vkms_load(overlay: bool) -> Result<(), String> {
    let root = std::env::var("VM_MODULES_ROOT")
        .map_err(|_| "VM_MODULES_ROOT is not set (the vm guest sets it)".to_string())?;
    let run = |args: &[&str]| {
        let out = std::process::Command::new("modprobe")
            .arg("-d")
            .arg(&root)
            .args(args)
            .output()
            .map_err(|e| format!("modprobe {args:?}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "modprobe {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    };
    run(&["-r", "vkms"])?;
    run(&[
        "vkms",
        if overlay {
            "enable_overlay=1"
        } else {
            "enable_overlay=0"
        },
    ])?;
    for _ in 0..100 {
        if Device::open_driver("vkms", Some(NodeKind::Primary)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err("vkms's primary node did not come back after modprobe".into())
}

/// Cursor position, size and colour: x, y, side, RGB.
const CURSOR: (u32, u32, u32, u32) = (100, 50, 64, 0x0012_3456);

/// An opaque square shown by a plane above the primary one: x, y, side, RGB.
struct Square {
    plane: PlaneId,
    x: u32,
    y: u32,
    side: u32,
    rgb: u32,
}

impl Square {
    fn new(plane: PlaneId, (x, y, side, rgb): (u32, u32, u32, u32)) -> Self {
        Self {
            plane,
            x,
            y,
            side,
            rgb,
        }
    }

    fn covers(&self, x: u32, y: u32) -> bool {
        (self.x..self.x + self.side).contains(&x) && (self.y..self.y + self.side).contains(&y)
    }
}

/// Lights the pipe with the pattern on the primary plane and `squares` (bottom to top) on
/// their planes, captures the frame through writeback and compares every pixel.
fn writeback_check(dev: &Device, p: &Pipe, squares: &[Square]) {
    let (w, h) = (u32::from(p.mode.size().0), u32::from(p.mode.size().1));
    let fds = open_fds();
    {
        let mut src = DumbBuffer::create(dev, spec(w, h)).unwrap();
        fill(&mut src, w, h);
        let fb = xrgb_fb(dev, &src).unwrap();
        let mut out = DumbBuffer::create(dev, spec(w, h)).unwrap();
        let junk = vec![0xa5; out.size() as usize];
        out.map().unwrap().write_at(0, &junk).unwrap();
        let out_fb = xrgb_fb(dev, &out).unwrap();
        let blob = dev.create_blob(&p.mode.to_blob_bytes()).unwrap();

        // The writeback connector drives the CRTC on its own: vkms cannot clone its encoder
        // with the virtual output's (with both set, `explain_atomic` names the virtual
        // connector's CRTC_ID), so the virtual connector is detached explicitly (kernels
        // with fbdev emulation have it attached already).
        let mut req = AtomicRequest::new();
        req.set(p.crtc, prop(dev, p.crtc, "ACTIVE"), 1)
            .set(p.crtc, prop(dev, p.crtc, "MODE_ID"), blob.id())
            .set(p.conn, prop(dev, p.conn, "CRTC_ID"), 0)
            .set(
                p.writeback,
                prop(dev, p.writeback, "CRTC_ID"),
                u64::from(p.crtc.get()),
            )
            .set(
                p.writeback,
                prop(dev, p.writeback, "WRITEBACK_FB_ID"),
                out_fb.id(),
            )
            .writeback_fence(
                p.writeback,
                prop(dev, p.writeback, "WRITEBACK_OUT_FENCE_PTR"),
            );
        plane_props(dev, &mut req, p, fb.id().get(), w, h);
        // Each square: an opaque ARGB8888 buffer of one colour (alpha 0xff, so blending is
        // exact), kept alive until the capture is read.
        let mut keep = Vec::new();
        for sq in squares {
            let mut buf = DumbBuffer::create(dev, spec(sq.side, sq.side)).unwrap();
            let argb = (0xff00_0000u32 | sq.rgb).to_le_bytes();
            let fill: Vec<u8> = (0..buf.size() / 4).flat_map(|_| argb).collect();
            buf.map().unwrap().write_at(0, &fill).unwrap();
            let sfb = dev
                .add_framebuffer(&FbSpec::single(
                    sq.side,
                    sq.side,
                    drm_gem::DrmFourcc::Argb8888,
                    buf.handle(),
                    buf.pitch(),
                ))
                .unwrap();
            let c = sq.plane;
            req.set(c, prop(dev, c, "FB_ID"), sfb.id())
                .set(c, prop(dev, c, "CRTC_ID"), u64::from(p.crtc.get()))
                .set(c, prop(dev, c, "SRC_X"), 0)
                .set(c, prop(dev, c, "SRC_Y"), 0)
                .set(c, prop(dev, c, "SRC_W"), u64::from(sq.side) << 16)
                .set(c, prop(dev, c, "SRC_H"), u64::from(sq.side) << 16)
                .set(c, prop(dev, c, "CRTC_X"), u64::from(sq.x))
                .set(c, prop(dev, c, "CRTC_Y"), u64::from(sq.y))
                .set(c, prop(dev, c, "CRTC_W"), u64::from(sq.side))
                .set(c, prop(dev, c, "CRTC_H"), u64::from(sq.side));
            keep.push((sfb, buf));
        }
        if let Err(e) =
            dev.atomic_commit(&req, AtomicFlags::ALLOW_MODESET | AtomicFlags::TEST_ONLY, 0)
        {
            let why = dev.explain_atomic(&req, AtomicFlags::ALLOW_MODESET);
            panic!(
                "TEST_ONLY: {e}; explain: {why:?} (connector {}, writeback {}, plane {}, crtc {})",
                p.conn, p.writeback, p.plane, p.crtc
            );
        }
        let done = dev
            .atomic_commit(&req, AtomicFlags::ALLOW_MODESET, 0)
            .expect("modeset with writeback");
        assert_eq!(done.fences.len(), 1);
        let (obj, kind, fence) = &done.fences[0];
        assert_eq!((*obj, *kind), (p.writeback.get(), FenceKind::Writeback));
        assert!(
            fence.wait(Some(Duration::from_secs(10))).expect("poll"),
            "writeback fence not signalled in 10 s"
        );

        // Byte for byte, ignoring the X byte of XRGB8888.
        let mut back = vec![0u8; out.size() as usize];
        out.map().unwrap().read_at(0, &mut back).unwrap();
        let pitch = out.pitch() as usize;
        let mut bad = 0;
        for y in 0..h {
            for x in 0..w {
                let at = y as usize * pitch + x as usize * 4;
                let got = u32::from_le_bytes(back[at..at + 4].try_into().unwrap()) & 0xff_ffff;
                let want = squares
                    .iter()
                    .rev()
                    .find(|s| s.covers(x, y))
                    .map_or(px(x, y) & 0xff_ffff, |s| s.rgb);
                if got != want {
                    bad += 1;
                    if bad < 5 {
                        eprintln!("({x},{y}): got {got:06x}, want {want:06x}");
                    }
                }
            }
        }
        assert_eq!(
            bad, 0,
            "{bad} pixels differ between the committed and the captured frame"
        );

        // Turn the pipe off again so later tests start from scratch.
        let mut off = AtomicRequest::new();
        off.set(p.crtc, prop(dev, p.crtc, "ACTIVE"), 0)
            .set(p.crtc, prop(dev, p.crtc, "MODE_ID"), 0)
            .set(p.writeback, prop(dev, p.writeback, "CRTC_ID"), 0)
            .set(p.plane, prop(dev, p.plane, "FB_ID"), 0)
            .set(p.plane, prop(dev, p.plane, "CRTC_ID"), 0);
        for sq in squares {
            off.set(sq.plane, prop(dev, sq.plane, "FB_ID"), 0).set(
                sq.plane,
                prop(dev, sq.plane, "CRTC_ID"),
                0,
            );
        }
        dev.atomic_commit(&off, AtomicFlags::ALLOW_MODESET, 0)
            .expect("off");
    }
    assert_eq!(open_fds(), fds, "fds leaked");
    assert_eq!(dev.live_handles(), 0, "handles leaked");
}

/// Turns the pipe on showing `fb`; returns the mode blob (to keep alive).
fn light<'d>(
    dev: &'d Device,
    p: &Pipe,
    fb: u32,
    w: u32,
    h: u32,
) -> drm_gem::kms::PropertyBlob<&'d Device> {
    let blob = dev.create_blob(&p.mode.to_blob_bytes()).unwrap();
    let mut req = AtomicRequest::new();
    req.set(p.crtc, prop(dev, p.crtc, "ACTIVE"), 1)
        .set(p.crtc, prop(dev, p.crtc, "MODE_ID"), blob.id())
        .set(
            p.conn,
            prop(dev, p.conn, "CRTC_ID"),
            u64::from(p.crtc.get()),
        );
    plane_props(dev, &mut req, p, fb, w, h);
    dev.atomic_commit(&req, AtomicFlags::ALLOW_MODESET, 0)
        .expect("modeset");
    blob
}

fn debugfs_crtc_dir(dev: &Device) -> Option<std::path::PathBuf> {
    let minor = drm_gem::enumerate()
        .ok()?
        .into_iter()
        .find(|n| n.driver.as_deref() == Some("vkms") && n.kind == NodeKind::Primary)?
        .dev
        .1;
    let _ = dev;
    let d = std::path::PathBuf::from(format!("/sys/kernel/debug/dri/{minor}/crtc-0"));
    d.exists().then_some(d)
}

#[test]
fn crc_is_stable_for_one_frame_and_changes_with_one_pixel() {
    let dev = vkms!(ATOMIC);
    let p = pipe(&dev);
    let (w, h) = (u32::from(p.mode.size().0), u32::from(p.mode.size().1));
    let mut src = DumbBuffer::create(&dev, spec(w, h)).unwrap();
    fill(&mut src, w, h);
    let fb = xrgb_fb(&dev, &src).unwrap();
    let _blob = light(&dev, &p, fb.id().get(), w, h);
    let Some(dir) = debugfs_crtc_dir(&dev) else {
        skip!("no debugfs crtc-0 for vkms");
    };
    std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("crc/control"))
        .and_then(|mut f| f.write_all(b"auto"))
        .expect("crc/control");
    let data = std::fs::File::open(dir.join("crc/data")).expect("crc/data");
    let mut reader = std::io::BufReader::new(data);
    // Each line is "0x<frame> 0x<crc>"; the kernel queues lines from the moment capture
    // starts, so a reader may be many frames behind: compare by frame number. A read
    // blocks until vkms composes a frame: wait at most 10 s for one, then fail (with the
    // CRTC's vblank count, to tell a stalled vblank from a stalled CRC worker).
    let crtc = p.crtc;
    let mut next = || -> (u64, String) {
        if reader.buffer().is_empty() {
            let mut fds = [rustix::event::PollFd::new(
                reader.get_ref(),
                rustix::event::PollFlags::IN,
            )];
            // EINTR (a signal storm) polls again with what is left of the 10 s.
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            let n = loop {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                let ts = rustix::event::Timespec {
                    tv_sec: left.as_secs() as i64,
                    tv_nsec: i64::from(left.subsec_nanos()),
                };
                match rustix::event::poll(&mut fds, Some(&ts)) {
                    Err(rustix::io::Errno::INTR) if !left.is_zero() => continue,
                    Err(rustix::io::Errno::INTR) => break 0,
                    r => break r.expect("poll crc/data"),
                }
            };
            assert!(
                n == 1,
                "no CRC line in 10 s (vblank sequence now {:?})",
                dev.crtc_sequence(crtc).map(|s| s.sequence)
            );
        }
        let mut l = String::new();
        reader.read_line(&mut l).expect("read CRC");
        assert!(!l.is_empty(), "crc/data ended");
        // Lines can carry a stray NUL from the kernel's formatting: trim it.
        let mut it = l.trim_matches('\0').split_whitespace();
        let frame = it
            .next()
            .and_then(|f| u64::from_str_radix(f.trim_start_matches("0x"), 16).ok())
            .unwrap_or_else(|| panic!("no frame number in CRC line {l:?}"));
        (frame, it.next().unwrap_or_default().to_string())
    };
    // Frames at or after `from`, skipping what was queued before.
    let mut crc_from = |from: u64| -> String {
        for _ in 0..2000 {
            let (frame, crc) = next();
            if frame >= from {
                return crc;
            }
        }
        panic!("no CRC for frame {from}");
    };
    // The same content gives the same CRC frame after frame.
    let now = dev.crtc_sequence(p.crtc).unwrap().sequence;
    let a = crc_from(now + 2);
    assert_eq!(
        crc_from(now + 3),
        a,
        "CRC changed without a change of content"
    );
    assert_eq!(crc_from(now + 5), a);
    // One pixel changes: frames composed after the change have another CRC.
    src.map()
        .unwrap()
        .write_at(4 * 517, &[0x12, 0x34, 0x56, 0x00])
        .unwrap();
    let after = dev.crtc_sequence(p.crtc).unwrap().sequence;
    let b = crc_from(after + 2);
    assert_ne!(b, a, "CRC did not change after one pixel changed");
    assert_eq!(
        crc_from(after + 3),
        b,
        "the new content's CRC is stable too"
    );
    drop(reader);
    let mut off = AtomicRequest::new();
    off.set(p.crtc, prop(&dev, p.crtc, "ACTIVE"), 0)
        .set(p.crtc, prop(&dev, p.crtc, "MODE_ID"), 0)
        .set(p.conn, prop(&dev, p.conn, "CRTC_ID"), 0)
        .set(p.plane, prop(&dev, p.plane, "FB_ID"), 0)
        .set(p.plane, prop(&dev, p.plane, "CRTC_ID"), 0);
    dev.atomic_commit(&off, AtomicFlags::ALLOW_MODESET, 0)
        .expect("off");
}

#[test]
fn flip_events_sequences_and_explain() {
    let dev = vkms!(ATOMIC);
    let p = pipe(&dev);
    let (w, h) = (u32::from(p.mode.size().0), u32::from(p.mode.size().1));
    let mut a = DumbBuffer::create(&dev, spec(w, h)).unwrap();
    fill(&mut a, w, h);
    let b = DumbBuffer::create(&dev, spec(w, h)).unwrap();
    let fa = xrgb_fb(&dev, &a).unwrap();
    let fb2 = xrgb_fb(&dev, &b).unwrap();
    let _blob = light(&dev, &p, fa.id().get(), w, h);

    // Atomic flip with an event carrying our user data.
    let mut flip = AtomicRequest::new();
    flip.set(
        p.plane,
        prop(&dev, p.plane, "FB_ID"),
        u64::from(fb2.id().get()),
    );
    dev.atomic_commit(
        &flip,
        AtomicFlags::NONBLOCK | AtomicFlags::PAGE_FLIP_EVENT,
        0xfeed,
    )
    .expect("atomic flip");
    let ev = dev.read_events(Some(Duration::from_secs(10))).unwrap();
    match ev.first() {
        Some(Event::FlipComplete(v)) => {
            assert_eq!(v.user_data, 0xfeed);
            assert_eq!(v.crtc_id, p.crtc.get());
        }
        other => panic!("expected a flip-complete event, got {other:?}"),
    }
    // Legacy page flip back, with an event.
    dev.page_flip(p.crtc, fa.id(), Some(7)).expect("PAGE_FLIP");
    let ev = dev.read_events(Some(Duration::from_secs(10))).unwrap();
    assert!(
        matches!(ev.first(), Some(Event::FlipComplete(v)) if v.user_data == 7),
        "{ev:?}"
    );

    // vblank counters move; a queued sequence event arrives.
    let s1 = dev.crtc_sequence(p.crtc).unwrap();
    assert!(s1.active);
    let target = dev.wait_vblank(p.crtc_index as u32, 2, None).unwrap();
    let s2 = dev.crtc_sequence(p.crtc).unwrap();
    assert!(
        s2.sequence >= s1.sequence + 2,
        "{s1:?} -> {s2:?} (target {target})"
    );
    let queued = dev.queue_sequence(p.crtc, 1, true, true, 99).unwrap();
    let ev = dev.read_events(Some(Duration::from_secs(10))).unwrap();
    assert!(
        // The event reports the vblank it was sent at: the target, or later when the
        // guest was too busy to send it on time.
        matches!(ev.first(), Some(Event::CrtcSequence { user_data: 99, sequence, .. }) if *sequence >= queued),
        "{ev:?} (queued for {queued})"
    );
    dev.wait_vblank(p.crtc_index as u32, 1, Some(5)).unwrap();
    let ev = dev.read_events(Some(Duration::from_secs(10))).unwrap();
    assert!(
        matches!(ev.first(), Some(Event::Vblank(v)) if v.user_data == 5),
        "{ev:?}"
    );

    // explain: one bad property among good ones is named.
    let mut bad = AtomicRequest::new();
    bad.set(
        p.plane,
        prop(&dev, p.plane, "SRC_W"),
        u64::from(w + 64) << 16,
    )
    .set(p.crtc, prop(&dev, p.crtc, "ACTIVE"), 1);
    let e = dev
        .atomic_commit(&bad, AtomicFlags::TEST_ONLY, 0)
        .unwrap_err();
    assert!(e.to_string().contains("DRM_IOCTL_MODE_ATOMIC"), "{e}");
    let why = dev
        .explain_atomic(&bad, AtomicFlags::empty())
        .unwrap()
        .expect("the request fails");
    assert_eq!(why.culprits.len(), 1, "{why:?}");
    assert_eq!(why.culprits[0].name.as_deref(), Some("SRC_W"));
    assert_eq!(why.culprits[0].object, p.plane.get());
    // A good request needs no explanation.
    assert!(
        dev.explain_atomic(&flip, AtomicFlags::empty())
            .unwrap()
            .is_none()
    );

    // A pointer property set by hand is refused before the kernel is asked.
    let mut sneaky = AtomicRequest::new();
    sneaky.set(p.crtc, prop(&dev, p.crtc, "OUT_FENCE_PTR"), 0x1000);
    match dev.atomic_commit(&sneaky, AtomicFlags::TEST_ONLY, 0) {
        Err(Error::InvalidArgument { what }) => assert!(what.contains("user pointer"), "{what}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Out fence of a real flip.
    let mut f = AtomicRequest::new();
    f.set(
        p.plane,
        prop(&dev, p.plane, "FB_ID"),
        u64::from(fb2.id().get()),
    )
    .out_fence(p.crtc, prop(&dev, p.crtc, "OUT_FENCE_PTR"));
    let done = dev.atomic_commit(&f, AtomicFlags::empty(), 0).unwrap();
    assert_eq!(done.fences.len(), 1);
    assert!(
        done.fences[0]
            .2
            .wait(Some(Duration::from_secs(10)))
            .unwrap()
    );

    let mut off = AtomicRequest::new();
    off.set(p.crtc, prop(&dev, p.crtc, "ACTIVE"), 0)
        .set(p.crtc, prop(&dev, p.crtc, "MODE_ID"), 0)
        .set(p.conn, prop(&dev, p.conn, "CRTC_ID"), 0)
        .set(p.plane, prop(&dev, p.plane, "FB_ID"), 0)
        .set(p.plane, prop(&dev, p.plane, "CRTC_ID"), 0);
    dev.atomic_commit(&off, AtomicFlags::ALLOW_MODESET, 0)
        .expect("off");
}

/// virtio-gpu's vblank, as the kernel answers: without vblank support (virtio-gpu before
/// the DRM vblank timer, `drm_vblank_helper`) GET_SEQUENCE is EOPNOTSUPP, typed as
/// Unsupported and named; with the timer (7.3's virtio-gpu) it is EINVAL while the CRTC is
/// off, and once a mode is set the counter runs: the sequence is active and advances past a
/// vblank wait. Which of the two the kernel is comes from its first answer; each is checked
/// whole, and any other answer fails.
#[test]
fn virtio_gpu_vblank_is_absent_or_a_running_timer() {
    require_feature!("virtio_gpu");
    kernel_tests::fds_shared();
    let Ok(dev) = Device::open_driver("virtio_gpu", Some(NodeKind::Primary)) else {
        skip!("no virtio_gpu node");
    };
    kernel_tests::kms_all_off(&dev).ok();
    let crtc = dev.resources().unwrap().crtcs[0];
    let r = kernel_tests::unchanged(&dev, "GET_SEQUENCE on virtio_gpu", || {
        dev.crtc_sequence(crtc)
    });
    match r {
        Err(Error::Unsupported {
            feature,
            reason,
            errno,
        }) => {
            assert_eq!(feature, "vblank");
            assert_eq!(errno, Some(drm_gem::Errno::OPNOTSUPP), "{reason}");
            assert!(reason.contains("DRM_IOCTL_CRTC_GET_SEQUENCE"), "{reason}");
            eprintln!("virtio_gpu: no vblank support (EOPNOTSUPP)");
        }
        Err(Error::Ioctl { name, errno }) => {
            assert_eq!(name, "DRM_IOCTL_CRTC_GET_SEQUENCE");
            assert_eq!(errno, drm_gem::Errno::INVAL, "EINVAL while the CRTC is off");
            vblank_timer_runs(&dev, crtc);
            eprintln!("virtio_gpu: vblank timer (EINVAL while off, counting while lit)");
        }
        other => panic!("expected Unsupported or EINVAL, got {other:?}"),
    }
}

/// Lights `crtc` of virtio-gpu with the first connector that has modes and checks that its
/// vblank counter runs; turns it off again.
fn vblank_timer_runs(dev: &Device, crtc: CrtcId) {
    dev.set_master()
        .expect("master of virtio_gpu's primary node");
    let snap = Snapshot::take(dev).unwrap();
    let (conn, mode) = snap
        .connectors
        .iter()
        .find_map(|c| {
            let m = *dev.probe_connector(c.connector.id).ok()?.modes.first()?;
            Some((c.connector.id, m))
        })
        .expect("a virtio_gpu connector with a mode");
    let (w, h) = (u32::from(mode.size().0), u32::from(mode.size().1));
    let buf = DumbBuffer::create(dev, spec(w, h)).unwrap();
    let fb = xrgb_fb(dev, &buf).unwrap();
    dev.set_crtc(crtc, fb.id(), (0, 0), &[conn], &mode)
        .expect("SETCRTC on virtio_gpu");
    let index = dev
        .resources()
        .unwrap()
        .crtcs
        .iter()
        .position(|&c| c == crtc)
        .unwrap() as u32;
    let s1 = dev.crtc_sequence(crtc).expect("GET_SEQUENCE of a lit CRTC");
    assert!(s1.active, "{s1:?}");
    dev.wait_vblank(index, 2, None).expect("WAIT_VBLANK");
    let s2 = dev.crtc_sequence(crtc).unwrap();
    assert!(s2.sequence >= s1.sequence + 2, "{s1:?} -> {s2:?}");
    assert!(s2.time_ns > s1.time_ns, "{s1:?} -> {s2:?}");
    dev.disable_crtc(crtc).expect("CRTC off");
}

/// An unsignalled fence and what signals it: a sw_sync timeline where debugfs has one (the
/// self-built kernels), else a vgem write fence exported from its dma-buf (6.0+).
enum Gate<'d> {
    SwSync(drm_gem::SwSyncTimeline),
    Vgem(drm_gem::driver::vgem::VgemFence<&'d Device>),
}

impl Gate<'_> {
    fn open(vgem: &Device) -> Option<(Gate<'_>, drm_gem::SyncFile, DumbBuffer<&Device>)> {
        let keep = DumbBuffer::create(vgem, spec(16, 16)).ok()?;
        if let Ok(t) = drm_gem::SwSyncTimeline::open() {
            let f = t.create_fence(1, "gate").ok()?;
            return Some((Gate::SwSync(t), f, keep));
        }
        let v = drm_gem::driver::vgem::Vgem::new(vgem).ok()?;
        let fence = v
            .attach_fence(keep.handle(), drm_gem::driver::vgem::VgemFenceAccess::Write)
            .ok()?;
        let buf = vgem.export(keep.gem(), Default::default()).ok()?;
        let f = buf.export_sync_file(drm_gem::DmaBufSync::READ).ok()?;
        Some((Gate::Vgem(fence), f, keep))
    }

    fn signal(self) {
        match self {
            Gate::SwSync(t) => t.inc(1).expect("sw_sync inc"),
            Gate::Vgem(f) => f.signal().expect("vgem signal"),
        }
    }
}

#[test]
fn in_fence_holds_the_flip_and_a_second_nonblocking_commit_is_busy() {
    let dev = vkms!(ATOMIC);
    require_feature!("vgem");
    let Ok(vgem) = Device::open_driver("vgem", Some(NodeKind::Primary)) else {
        skip!("no vgem node");
    };
    let p = pipe(&dev);
    let (w, h) = (u32::from(p.mode.size().0), u32::from(p.mode.size().1));
    let mut a = DumbBuffer::create(&dev, spec(w, h)).unwrap();
    fill(&mut a, w, h);
    let b = DumbBuffer::create(&dev, spec(w, h)).unwrap();
    let fa = xrgb_fb(&dev, &a).unwrap();
    let fb2 = xrgb_fb(&dev, &b).unwrap();
    let _blob = light(&dev, &p, fa.id().get(), w, h);
    let Some((gate, fence, _keep)) = Gate::open(&vgem) else {
        skip!("no fence source (neither sw_sync nor dma-buf EXPORT_SYNC_FILE)");
    };
    assert!(
        !fence.wait(Some(Duration::ZERO)).unwrap(),
        "the gate starts closed"
    );

    let mut flip = AtomicRequest::new();
    flip.set(
        p.plane,
        prop(&dev, p.plane, "FB_ID"),
        u64::from(fb2.id().get()),
    )
    .in_fence(
        p.plane,
        prop(&dev, p.plane, "IN_FENCE_FD"),
        rustix::fd::AsFd::as_fd(&fence),
    );
    dev.atomic_commit(
        &flip,
        AtomicFlags::NONBLOCK | AtomicFlags::PAGE_FLIP_EVENT,
        0xf00,
    )
    .expect("flip behind an in-fence");
    // Held: no event while the fence is unsignalled.
    let ev = dev.read_events(Some(Duration::from_millis(300))).unwrap();
    assert!(
        ev.is_empty(),
        "the flip went through an unsignalled fence: {ev:?}"
    );
    // A second non-blocking commit on the same CRTC while the first is pending: EBUSY.
    let mut again = AtomicRequest::new();
    again.set(p.plane, prop(&dev, p.plane, "FB_ID"), fa.id());
    let r = kernel_tests::unchanged(&dev, "NONBLOCK commit while one is pending", || {
        dev.atomic_commit(&again, AtomicFlags::NONBLOCK, 0)
    });
    match r {
        Err(Error::Ioctl {
            name: "DRM_IOCTL_MODE_ATOMIC",
            errno,
        }) => assert_eq!(errno, drm_gem::Errno::BUSY),
        other => panic!("NONBLOCK with a pending commit: {other:?}"),
    }
    // Open the gate: the flip completes.
    gate.signal();
    let ev = dev.read_events(Some(Duration::from_secs(10))).unwrap();
    assert!(
        matches!(ev.first(), Some(Event::FlipComplete(v)) if v.user_data == 0xf00),
        "{ev:?}"
    );
    assert_eq!(dev.crtc(p.crtc).unwrap().framebuffer, Some(fb2.id()));
    kernel_tests::kms_all_off(&dev).expect("off");
}
