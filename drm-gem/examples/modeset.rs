//! Light a display the atomic way: pick a connected connector and its preferred mode, draw
//! a gradient into a dumb buffer, commit it atomically with a flip event, and wait for the
//! event.
//!
//! Run it on a primary node you may become master of (inside a guest:
//! `vm run -- target/debug/examples/modeset`); where there is none it says so and exits
//! successfully.

use drm_gem::kms::{AtomicFlags, AtomicRequest, Event, FbSpec, Snapshot};
use drm_gem::{ClientCap, Device, DrmFourcc, DumbBuffer, DumbSpec, NodeKind};
use std::time::Duration;

/// Lights the first connected connector of the first device that does atomic KMS.
pub(crate) fn main() -> Result<(), Box<dyn std::error::Error>> {
    let nodes = drm_gem::enumerate().unwrap_or_default();
    let dev = nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Primary)
        .find_map(|n| {
            let d = Device::open(&n.path).ok()?;
            d.set_client_cap(ClientCap::Atomic, 1).ok()?;
            Some(d)
        });
    let Some(dev) = dev else {
        println!("no primary DRM node with atomic KMS here: nothing to light");
        return Ok(());
    };
    dev.set_master()?;
    let snap = Snapshot::take(&dev)?;

    // 1. A connected connector, its preferred mode, a CRTC and its primary plane.
    let Some(out) = snap.first_output(&dev)? else {
        println!("no connected connector with a usable CRTC");
        return Ok(());
    };

    // 2. Draw a gradient.
    let (w, h) = out.size();
    let mut buf = DumbBuffer::create(
        &dev,
        DumbSpec {
            width: w,
            height: h,
            bpp: 32,
        },
    )?;
    let pitch = buf.pitch() as usize;
    let mut pixels = vec![0u8; pitch * h as usize];
    for y in 0..h as usize {
        for x in 0..w as usize {
            let px =
                ((x * 255 / w as usize) as u32) << 16 | ((y * 255 / h as usize) as u32) << 8 | 0x40;
            pixels[y * pitch + x * 4..][..4].copy_from_slice(&px.to_le_bytes());
        }
    }
    buf.map()?.write_at(0, &pixels)?;
    let fb = dev.add_framebuffer(&FbSpec::for_dumb(&buf, DrmFourcc::Xrgb8888))?;

    // 3. One atomic commit: mode, connector, plane; ask for the flip event.
    let blob = dev.create_blob(&out.mode.to_blob_bytes())?;
    let mut req = AtomicRequest::new();
    snap.light(&mut req, &out, blob.id(), fb.id())?;
    let flags = AtomicFlags::ALLOW_MODESET | AtomicFlags::PAGE_FLIP_EVENT | AtomicFlags::NONBLOCK;
    if let Err(e) = dev.atomic_commit(&req, flags, 42) {
        // Say which property the kernel objects to.
        let why = dev.explain_atomic(&req, AtomicFlags::ALLOW_MODESET)?;
        return Err(format!("commit failed: {e}; {why:?}").into());
    }

    // 4. Wait for the flip.
    let events = dev.read_events(Some(Duration::from_secs(10)))?;
    let name = snap.connector_state(out.connector).map(|c| c.name());
    match events.first() {
        Some(Event::FlipComplete(v)) if v.user_data == 42 => println!(
            "{} shows {}x{}@{} on CRTC {} (flip at sequence {})",
            name.unwrap_or_default(),
            w,
            h,
            out.mode.vrefresh,
            out.crtc,
            v.sequence
        ),
        other => return Err(format!("no flip event: {other:?}").into()),
    }
    Ok(())
}
