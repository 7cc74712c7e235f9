//! Light a display the atomic way: pick a connected connector and its preferred mode, draw
//! a gradient into a dumb buffer, commit it atomically with a flip event, and wait for the
//! event.
//!
//! Run it on a primary node you may become master of (inside a guest:
//! `vm run -- target/debug/examples/modeset`); where there is none it says so and exits
//! successfully.

use drm_gem::kms::{AtomicFlags, AtomicRequest, ConnectorStatus, Event, FbSpec, Snapshot};
use drm_gem::{ClientCap, Device, DumbBuffer, DumbSpec, NodeKind};
use std::time::Duration;

/// Finds a property id of an object in a snapshot by name.
fn find(props: &[drm_gem::kms::ObjectProperty], name: &str) -> Option<drm_gem::kms::PropertyId> {
    props
        .iter()
        .find(|p| p.property.name == name)
        .map(|p| p.property.id)
}

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

    // 1. A connector with a sink, its preferred mode, and a CRTC its encoder can use.
    let mut chosen = None;
    for c in &snap.connectors {
        let probed = dev.probe_connector(c.connector.id)?;
        if probed.status != ConnectorStatus::Connected || probed.modes.is_empty() {
            continue;
        }
        let mode = *probed
            .modes
            .iter()
            .find(|m| m.is_preferred())
            .unwrap_or(&probed.modes[0]);
        let mask = probed
            .encoders
            .iter()
            .filter_map(|&e| dev.encoder(e).ok())
            .fold(0, |m, e| m | e.possible_crtcs);
        if let Some(i) = (0..snap.resources.crtcs.len()).find(|i| mask & (1 << i) != 0) {
            chosen = Some((c, mode, i));
            break;
        }
    }
    let Some((conn, mode, crtc_index)) = chosen else {
        println!("no connected connector with a usable CRTC");
        return Ok(());
    };
    let crtc = &snap.crtcs[crtc_index];
    let plane = snap
        .planes
        .iter()
        .find(|p| {
            p.kind.as_deref() == Some("Primary") && p.plane.possible_crtcs & (1 << crtc_index) != 0
        })
        .ok_or("no primary plane for that CRTC")?;

    // 2. Draw a gradient.
    let (w, h) = (u32::from(mode.size().0), u32::from(mode.size().1));
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
    let fb = dev.add_framebuffer(&FbSpec::single(
        w,
        h,
        ioctl_sys::drm::DRM_FORMAT_XRGB8888,
        buf.handle(),
        buf.pitch(),
    ))?;

    // 3. One atomic commit: mode, connector, plane; ask for the flip event.
    let blob = dev.create_blob(&mode.to_blob_bytes())?;
    let need =
        |p: Option<drm_gem::kms::PropertyId>, what: &str| p.ok_or(format!("no {what} property"));
    let mut req = AtomicRequest::new();
    req.set(
        crtc.crtc.id,
        need(find(&crtc.properties, "ACTIVE"), "ACTIVE")?,
        1,
    )
    .set(
        crtc.crtc.id,
        need(find(&crtc.properties, "MODE_ID"), "MODE_ID")?,
        u64::from(blob.id().get()),
    )
    .set(
        conn.connector.id,
        need(find(&conn.properties, "CRTC_ID"), "CRTC_ID")?,
        u64::from(crtc.crtc.id.get()),
    );
    let pp = |name: &str| need(find(&plane.properties, name), name);
    req.set(plane.plane.id, pp("FB_ID")?, u64::from(fb.id().get()))
        .set(
            plane.plane.id,
            pp("CRTC_ID")?,
            u64::from(crtc.crtc.id.get()),
        )
        .set(plane.plane.id, pp("SRC_X")?, 0)
        .set(plane.plane.id, pp("SRC_Y")?, 0)
        .set(plane.plane.id, pp("SRC_W")?, u64::from(w) << 16)
        .set(plane.plane.id, pp("SRC_H")?, u64::from(h) << 16)
        .set(plane.plane.id, pp("CRTC_X")?, 0)
        .set(plane.plane.id, pp("CRTC_Y")?, 0)
        .set(plane.plane.id, pp("CRTC_W")?, u64::from(w))
        .set(plane.plane.id, pp("CRTC_H")?, u64::from(h));
    let flags = AtomicFlags::ALLOW_MODESET | AtomicFlags::PAGE_FLIP_EVENT | AtomicFlags::NONBLOCK;
    if let Err(e) = dev.atomic_commit(&req, flags, 42) {
        // Say which property the kernel objects to.
        let why = dev.explain_atomic(&req, AtomicFlags::ALLOW_MODESET)?;
        return Err(format!("commit failed: {e}; {why:?}").into());
    }

    // 4. Wait for the flip.
    let events = dev.read_events(Some(Duration::from_secs(10)))?;
    match events.first() {
        Some(Event::FlipComplete(v)) if v.user_data == 42 => println!(
            "{} shows {}x{}@{} on CRTC {} (flip at sequence {})",
            conn.connector.name(),
            w,
            h,
            mode.vrefresh,
            crtc.crtc.id,
            v.sequence
        ),
        other => return Err(format!("no flip event: {other:?}").into()),
    }
    Ok(())
}
