//! `drmtool kms modeset` and `kms screenshot` in real guests, on vkms, virtio-gpu and
//! bochs: a mode set that restores what was there, and a screenshot whose pixels equal a
//! pattern this test commits itself, by GETFB2 and through vkms's writeback connector.

use drm_gem::kms::{AtomicFlags, AtomicRequest, ConnectorStatus, FbSpec, Snapshot};
use drm_gem::{ClientCap, Device, DumbBuffer, DumbSpec};
use drmtool::cli::run_captured as run;
use kernel_tests::skip;
use serde_json::Value;
use std::process::ExitCode;

mod drmtool_cli_common;
use drmtool_cli_common::*;

/// The first non-writeback connector of a device, with its CRTC index.
fn connector(dev: &Device) -> (String, usize) {
    let snap = Snapshot::take(dev).unwrap();
    let c = snap
        .connectors
        .iter()
        .find(|c| c.connector.kind != 18)
        .expect("a connector");
    let probed = dev.probe_connector(c.connector.id).unwrap();
    assert_ne!(probed.status, ConnectorStatus::Disconnected);
    let mask = probed
        .encoders
        .iter()
        .filter_map(|&e| dev.encoder(e).ok())
        .fold(0, |m, e| m | e.possible_crtcs);
    (
        c.connector.name(),
        (0..32).find(|i| mask & (1 << i) != 0).unwrap(),
    )
}

/// Opens `n` as an atomic client (seeing writeback connectors when `writeback`), becomes
/// master and switches every CRTC off; returns the device with the first connector's name
/// and the index of a CRTC it can drive (see [`connector`]).
fn all_off_as_master(n: &drm_gem::NodeInfo, writeback: bool) -> (Device, String, usize) {
    let dev = Device::open(&n.path).unwrap();
    dev.set_client_cap(ClientCap::UniversalPlanes, 1).unwrap();
    dev.set_client_cap(ClientCap::Atomic, 1).unwrap();
    if writeback {
        dev.set_client_cap(ClientCap::WritebackConnectors, 1)
            .unwrap();
    }
    dev.set_master().unwrap();
    kernel_tests::kms_all_off(&dev).unwrap();
    let (name, idx) = connector(&dev);
    (dev, name, idx)
}

#[test]
fn modeset_shows_and_restores() {
    let Some(nodes) = nodes() else {
        skip!("no DRM nodes (not a guest)")
    };
    for n in nodes
        .iter()
        .filter(|n| KMS_DRIVERS.contains(&n.driver.as_deref().unwrap()))
    {
        let p = n.path.display().to_string();
        // This fd stays open (without master) so that drmtool's close is not the device's
        // last close, after which fbdev emulation re-lights its console (virtio-gpu on 5.10).
        let (dev, name, idx) = all_off_as_master(n, false);
        dev.drop_master().unwrap();
        let fds = kernel_tests::open_fds();
        let (code, out) = run(&[
            "kms",
            "modeset",
            &name,
            "--device",
            &p,
            "--seconds",
            "0",
            "--json",
        ]);
        assert_eq!(code, ExitCode::SUCCESS, "{p}: {out}");
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["connector"], name.as_str());
        assert_eq!(v["path"], "atomic");
        assert_eq!(kernel_tests::open_fds(), fds, "no fd leaked");
        // Everything was off before, so everything is off again.
        let snap = Snapshot::take(&dev).unwrap();
        assert!(
            snap.crtcs[idx].crtc.mode.is_none(),
            "{p}: CRTC left on: {:?}",
            snap.crtcs[idx].crtc
        );
        let (code, _) = run(&[
            "kms",
            "modeset",
            "No-Such-1",
            "--device",
            &p,
            "--seconds",
            "0",
        ]);
        assert_eq!(code, ExitCode::from(3));
        let (code, _) = run(&[
            "kms",
            "modeset",
            &name,
            "99999x1",
            "--device",
            &p,
            "--seconds",
            "0",
        ]);
        assert_eq!(code, ExitCode::from(3));
    }
}

/// This test's own pattern: distinct in every channel so that a swapped channel or a
/// shifted row shows.
fn pixel(x: u32, y: u32) -> [u8; 3] {
    [
        (x % 251) as u8,
        (y % 241) as u8,
        ((x / 3 + y * 7) % 256) as u8,
    ]
}

#[test]
fn screenshot_equals_the_committed_pattern() {
    let Some(nodes) = nodes() else {
        skip!("no DRM nodes (not a guest)")
    };
    for n in nodes
        .iter()
        .filter(|n| KMS_DRIVERS.contains(&n.driver.as_deref().unwrap()))
    {
        let d = n.driver.as_deref().unwrap();
        // Writeback on the lit vkms CRTC: beside the virtual connector where the kernel
        // takes the clone, else swapped in for it for a frame; everything is put back.
        let methods: &[&str] = if d == "vkms" {
            &["getfb", "auto", "writeback"]
        } else {
            &["getfb", "auto"]
        };
        for method in methods {
            shoot(n, method, false);
        }
        // Writeback where there is none: a clear failure.
        if d != "vkms" {
            let (code, _) = run(&[
                "kms",
                "screenshot",
                "1",
                "-o",
                "/tmp/x.png",
                "--device",
                &n.path.display().to_string(),
                "--method",
                "writeback",
            ]);
            assert_ne!(code, ExitCode::SUCCESS);
        }
    }
}

/// What writeback sees and GETFB2 cannot: vkms's cursor plane over the primary one. The
/// writeback PNG shows the cursor's square over the pattern, the GETFB2 PNG the pattern
/// alone.
#[test]
fn writeback_captures_the_cursor_getfb_does_not() {
    let Some(n) = vkms_primary() else {
        skip!("no DRM nodes (not a guest)")
    };
    let n = &n;
    shoot(n, "writeback", true);
    shoot(n, "getfb", true);
}

/// A CRTC that is off shows nothing: writeback (and every method) fails with exit status 1
/// and a hint, and leaks nothing.
#[test]
fn screenshot_of_a_crtc_that_is_off_fails() {
    let Some(n) = vkms_primary() else {
        skip!("no DRM nodes (not a guest)")
    };
    let n = &n;
    let p = n.path.display().to_string();
    let (dev, _, idx) = all_off_as_master(n, false);
    let id = Snapshot::take(&dev).unwrap().crtcs[idx]
        .crtc
        .id
        .get()
        .to_string();
    dev.drop_master().unwrap();
    let fds = kernel_tests::open_fds();
    let fbs = framebuffers(n);
    for method in ["writeback", "getfb", "auto"] {
        let (code, out) = run(&[
            "kms",
            "screenshot",
            &id,
            "-o",
            "/tmp/off.png",
            "--device",
            &p,
            "--method",
            method,
        ]);
        assert_eq!(code, ExitCode::FAILURE, "{method}: {out}");
        assert!(out.is_empty(), "{method}: {out}");
        assert!(!std::path::Path::new("/tmp/off.png").exists());
    }
    // The message (stderr in the CLI) says why and what to do.
    let other = Device::open(&n.path).unwrap();
    let err = drmtool::kms::screenshot(&other, &id, drmtool::kms::Method::Writeback).unwrap_err();
    drop(other);
    assert!(matches!(err, drmtool::kms::KmsError::Cannot(_)), "{err}");
    let err = err.to_string();
    assert!(
        err.contains("is off") && err.contains("hint: `drmtool kms modeset"),
        "{err}"
    );
    assert_eq!(kernel_tests::open_fds(), fds, "no fd leaked");
    assert_eq!(framebuffers(n), fbs, "no framebuffer left behind");
}

/// The ids of every framebuffer of the device (debugfs `framebuffer`: all of them, not
/// only this process's), waiting up to 5 s for `want` when given: a writeback job drops
/// its framebuffer from a kernel work item after the fence signals.
fn framebuffers_settled(n: &drm_gem::NodeInfo, want: Option<&[u32]>) -> Vec<u32> {
    let path = format!("/sys/kernel/debug/dri/{}/framebuffer", n.dev.1);
    let read = || -> Vec<u32> {
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut ids: Vec<u32> = text
            .lines()
            .filter_map(|l| l.strip_prefix("framebuffer["))
            .filter_map(|l| l.split(']').next()?.parse().ok())
            .collect();
        ids.sort_unstable();
        ids
    };
    let mut got = read();
    if let Some(want) = want {
        for _ in 0..250 {
            if got == want {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
            got = read();
        }
    }
    got
}

fn framebuffers(n: &drm_gem::NodeInfo) -> Vec<u32> {
    framebuffers_settled(n, None)
}

/// The cursor square: x, y, side, RGB (opaque ARGB8888, so the blend is exact).
const CURSOR: (u32, u32, u32, u32) = (100, 50, 64, 0x0012_3456);

/// Whether the core lets vkms's writeback connector drive `crtc` beside the output that
/// lights it (a clone), asked with a `TEST_ONLY` commit of `fb` as the capture buffer: the
/// same question drmtool asks before it falls back to the swap. EINVAL is the refusal;
/// any other answer fails the test.
///
/// The refusal is `drm_atomic_check_valid_clones` (41b4b11da0215, "drm: Add valid clones
/// check", mainline 6.14, backported to stable 5.10.y, 5.15.y, 6.1.y and 6.12.y: the
/// matrix's 5.10.262, 6.1.192 and 6.12.117 have it, 5.15.0 does not): vkms's encoders
/// each list only themselves in `possible_clones`. A vkms that marks its output encoder
/// cloneable with the writeback one passes again, which is why this is probed.
fn writeback_clone_passes(
    dev: &Device,
    snap: &Snapshot,
    crtc: drm_gem::kms::CrtcId,
    fb: &drm_gem::kms::Framebuffer<&Device>,
) -> bool {
    let wb = snap
        .connectors
        .iter()
        .find(|c| c.connector.kind == 18)
        .expect("vkms has a writeback connector");
    let mut req = AtomicRequest::new();
    req.set(wb.connector.id, wb.property_id("CRTC_ID").unwrap(), crtc)
        .set(
            wb.connector.id,
            wb.property_id("WRITEBACK_FB_ID").unwrap(),
            fb.id(),
        );
    match dev.atomic_commit(&req, AtomicFlags::ALLOW_MODESET | AtomicFlags::TEST_ONLY, 0) {
        Ok(_) => true,
        Err(e) if e.errno() == Some(rustix::io::Errno::INVAL) => false,
        Err(e) => panic!("TEST_ONLY writeback clone: {e:?}"),
    }
}

/// Lights the first connector's CRTC with this test's pattern on the primary plane (and,
/// with `cursor`, the cursor plane's square over it), captures it with `drmtool kms
/// screenshot --method METHOD` and compares every pixel: GETFB2 must show the primary
/// plane alone, writeback everything the CRTC composes. Writeback must put the routing
/// back exactly as it was and leave nothing behind.
fn shoot(n: &drm_gem::NodeInfo, method: &str, cursor: bool) {
    let p = n.path.display().to_string();
    let vkms = n.driver.as_deref() == Some("vkms");
    let (dev, _, idx) = all_off_as_master(n, vkms);
    let snap = Snapshot::take(&dev).unwrap();
    let conn = snap
        .connectors
        .iter()
        .find(|c| c.connector.kind != 18)
        .unwrap();
    let probed = dev.probe_connector(conn.connector.id).unwrap();
    let mode = *probed
        .modes
        .iter()
        .find(|m| m.is_preferred())
        .unwrap_or(&probed.modes[0]);
    let (w, h) = (u32::from(mode.size().0), u32::from(mode.size().1));
    let mut buf = DumbBuffer::create(
        &dev,
        DumbSpec {
            width: w,
            height: h,
            bpp: 32,
        },
    )
    .unwrap();
    let pitch = buf.pitch() as usize;
    let mut px = vec![0u8; pitch * h as usize];
    for y in 0..h {
        for x in 0..w {
            let [r, g, b] = pixel(x, y);
            let v = u32::from(r) << 16 | u32::from(g) << 8 | u32::from(b);
            px[y as usize * pitch + x as usize * 4..][..4].copy_from_slice(&v.to_le_bytes());
        }
    }
    let fb = dev
        .add_framebuffer(&FbSpec::single(
            w,
            h,
            drm_gem::DrmFourcc::Xrgb8888,
            buf.handle(),
            buf.pitch(),
        ))
        .unwrap();
    let crtc = &snap.crtcs[idx];
    let plane = snap
        .planes
        .iter()
        .find(|p| {
            p.kind == Some(drm_gem::kms::PlaneType::Primary)
                && p.plane.possible_crtcs & (1 << idx) != 0
        })
        .unwrap();
    let blob = dev.create_blob(&mode.to_blob_bytes()).unwrap();
    let mut req = AtomicRequest::new();
    req.set(crtc.crtc.id, crtc.property_id("ACTIVE").unwrap(), 1)
        .set(
            crtc.crtc.id,
            crtc.property_id("MODE_ID").unwrap(),
            blob.id(),
        )
        .set(
            conn.connector.id,
            conn.property_id("CRTC_ID").unwrap(),
            crtc.crtc.id,
        );
    let place = |req: &mut AtomicRequest<'_>,
                 pl: &drm_gem::kms::PlaneState,
                 fb: u32,
                 (x, y, pw, ph): (u32, u32, u32, u32)| {
        let pp = |name| pl.property_id(name).unwrap();
        let id = pl.plane.id;
        req.set(id, pp("FB_ID"), u64::from(fb))
            .set(id, pp("CRTC_ID"), crtc.crtc.id)
            .set(id, pp("SRC_X"), 0)
            .set(id, pp("SRC_Y"), 0)
            .set(id, pp("SRC_W"), u64::from(pw) << 16)
            .set(id, pp("SRC_H"), u64::from(ph) << 16)
            .set(id, pp("CRTC_X"), u64::from(x))
            .set(id, pp("CRTC_Y"), u64::from(y))
            .set(id, pp("CRTC_W"), u64::from(pw))
            .set(id, pp("CRTC_H"), u64::from(ph));
    };
    place(&mut req, plane, fb.id().get(), (0, 0, w, h));
    // The cursor: an opaque square on vkms's cursor plane, kept until the end.
    let mut keep = None;
    if cursor {
        let cp = snap
            .planes
            .iter()
            .find(|p| {
                p.kind == Some(drm_gem::kms::PlaneType::Cursor)
                    && p.plane.possible_crtcs & (1 << idx) != 0
            })
            .expect("vkms has a cursor plane on every kernel of the matrix");
        let (x, y, side, rgb) = CURSOR;
        let mut cbuf = DumbBuffer::create(
            &dev,
            DumbSpec {
                width: side,
                height: side,
                bpp: 32,
            },
        )
        .unwrap();
        let argb = (0xff00_0000u32 | rgb).to_le_bytes();
        let fill: Vec<u8> = (0..cbuf.size() / 4).flat_map(|_| argb).collect();
        cbuf.map().unwrap().write_at(0, &fill).unwrap();
        let cfb = dev
            .add_framebuffer(&FbSpec::single(
                side,
                side,
                drm_gem::DrmFourcc::Argb8888,
                cbuf.handle(),
                cbuf.pitch(),
            ))
            .unwrap();
        place(&mut req, cp, cfb.id().get(), (x, y, side, side));
        keep = Some((cfb, cbuf));
    }
    dev.atomic_commit(&req, AtomicFlags::ALLOW_MODESET, 0)
        .unwrap();
    // The pattern goes in once the buffer is scanned out: bochs (VRAM helpers) moves it to
    // VRAM when the commit pins it, and on the Debian-config kernels what was written
    // before the move reads back as zeros afterwards.
    buf.map().unwrap().write_at(0, &px).unwrap();
    // Probed: whether this kernel lets the writeback connector join the lit CRTC beside its
    // output (a clone); drmtool must take exactly that path (auto and writeback alike).
    let clones = vkms && writeback_clone_passes(&dev, &snap, crtc.crtc.id, &fb);
    if vkms {
        eprintln!("{p}: the writeback clone passes TEST_ONLY: {clones}");
    }
    // drmtool becomes master itself for writeback; GETFB2 needs only root.
    dev.drop_master().unwrap();
    let fds = kernel_tests::open_fds();
    let fbs = if vkms { framebuffers(n) } else { Vec::new() };
    let out = format!("/tmp/drmtool-shot-{}-{method}.png", n.dev.1);
    let id = crtc.crtc.id.get().to_string();
    let shot = [
        "kms",
        "screenshot",
        &id,
        "-o",
        &out,
        "--device",
        &p,
        "--method",
        method,
    ];
    let v = run_json(
        &[&shot[..], &["--json"]].concat(),
        "kms-screenshot.schema.json",
    );
    // auto takes writeback only where it disturbs nothing (the clone), else GETFB2.
    let want = match method {
        "auto" if clones => "writeback",
        "auto" => "getfb",
        m => m,
    };
    assert_eq!(v["method"], want, "{p} (clone passes: {clones})");
    if want == "writeback" {
        // Clone exactly where the probe's TEST_ONLY clone passed, else the swap.
        let way = if clones { "clone" } else { "swap" };
        assert_eq!(v["writeback"], way, "{p}: {v}");
        assert_eq!(
            framebuffers_settled(n, Some(&fbs)),
            fbs,
            "{p} {method}: framebuffers left behind"
        );
        // The text says plainly which outputs went dark for a frame (a second capture);
        // after a clone none did, and it says nothing of the kind.
        let (code, text) = run(&shot);
        assert_eq!(code, ExitCode::SUCCESS, "{p}: {text}");
        let name = conn.connector.name();
        let detached = format!("{name} detached from CRTC {id} for one frame");
        if clones {
            assert!(
                text.contains(", writeback, clone)") && !text.contains("detached"),
                "{p}: {text}"
            );
        } else {
            assert!(
                text.contains(", writeback, swap);") && text.contains(&detached),
                "{p}: {text}"
            );
        }
    } else {
        assert!(v.get("writeback").is_none(), "{p}: {v}");
    }
    let img = {
        let f = std::fs::File::open(&out).unwrap();
        let mut reader = png::Decoder::new(std::io::BufReader::new(f))
            .read_info()
            .unwrap();
        let mut img = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut img).unwrap();
        assert_eq!((info.width, info.height), (w, h), "{p} {method}");
        assert_eq!(info.color_type, png::ColorType::Rgb);
        img
    };
    // Writeback shows every plane; GETFB2 the primary plane only.
    let sees_cursor = cursor && want == "writeback";
    let (cx, cy, side, rgb) = CURSOR;
    let expect = |x: u32, y: u32| -> [u8; 3] {
        if sees_cursor && (cx..cx + side).contains(&x) && (cy..cy + side).contains(&y) {
            [(rgb >> 16) as u8, (rgb >> 8) as u8, rgb as u8]
        } else {
            pixel(x, y)
        }
    };
    let mut bad = 0;
    let mut first = None;
    for y in 0..h {
        for x in 0..w {
            let i = (y * w + x) as usize * 3;
            if img[i..i + 3] != expect(x, y) {
                bad += 1;
                first.get_or_insert((x, y, img[i..i + 3].to_vec(), expect(x, y)));
            }
        }
    }
    assert_eq!(
        bad, 0,
        "{p} {method} cursor {cursor}: {bad} pixels differ, first {first:?}"
    );
    assert_eq!(
        kernel_tests::open_fds(),
        fds,
        "{p} {method}: fds leaked: {:?}",
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .collect::<Vec<_>>()
    );
    if vkms {
        // The capture's framebuffer is gone once the writeback job is cleaned up; nothing
        // else was added.
        assert_eq!(
            framebuffers_settled(n, Some(&fbs)),
            fbs,
            "{p} {method}: framebuffers left behind"
        );
        // The routing is back exactly: the connector on the CRTC, the same mode, the same
        // framebuffer on the primary plane, the writeback connector detached.
        let after = Snapshot::take(&dev).unwrap();
        let c = &after.crtcs[idx];
        assert_eq!(c.property("ACTIVE").expect("ACTIVE").raw, 1, "{p} {method}");
        let mode_blob =
            drm_gem::kms::BlobId::new(c.property("MODE_ID").expect("MODE_ID").raw as u32)
                .expect("the CRTC has a mode");
        assert_eq!(
            dev.blob(mode_blob).unwrap(),
            mode.to_blob_bytes(),
            "{p} {method}: the mode changed"
        );
        for k in &after.connectors {
            let on = k.property("CRTC_ID").expect("CRTC_ID").raw;
            if k.connector.id == conn.connector.id {
                assert_eq!(on, u64::from(crtc.crtc.id.get()), "{p}: connector not back");
            } else if k.connector.kind == 18 {
                assert_eq!(on, 0, "{p}: writeback connector left attached");
            }
        }
        assert!(
            after.connectors.iter().any(|k| k.connector.kind == 18),
            "{p}: the writeback connector is listed"
        );
        let pl = after
            .planes
            .iter()
            .find(|q| q.plane.id == plane.plane.id)
            .unwrap();
        assert_eq!(
            pl.property("FB_ID").expect("FB_ID").raw,
            u64::from(fb.id().get()),
            "{p} {method}: the primary plane's framebuffer changed"
        );
        assert_eq!(
            pl.property("CRTC_ID").expect("CRTC_ID").raw,
            u64::from(crtc.crtc.id.get())
        );
        if let Some((cfb, _)) = &keep {
            let cp = after
                .planes
                .iter()
                .find(|q| q.kind == Some(drm_gem::kms::PlaneType::Cursor))
                .unwrap();
            assert_eq!(
                cp.property("FB_ID").expect("FB_ID").raw,
                u64::from(cfb.id().get())
            );
        }
    }
    dev.set_master().unwrap();
    kernel_tests::kms_all_off(&dev).unwrap();
    drop(keep);
    let _ = std::fs::remove_file(&out);
}
