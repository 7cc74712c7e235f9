//! The whole modeset path: open vkms, make a dumb buffer and fill it, wrap it in a
//! framebuffer, light the first connected output with one atomic commit, and wait for the
//! flip event. Where there is no vkms it says so and succeeds.
//!
//! Inside a guest: `vm run -- target/debug/examples/quickstart`.

use drm_gem::kms::{AtomicFlags, AtomicRequest, Event, FbSpec, Snapshot};
use drm_gem::{ClientCap, Device, DrmFourcc, DumbBuffer, DumbSpec, NodeKind};
use std::time::Duration;

pub(crate) fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Ok(dev) = Device::open_driver("vkms", Some(NodeKind::Primary)) else {
        println!("no vkms node here: nothing to light");
        return Ok(());
    };
    dev.set_client_cap(ClientCap::Atomic, 1)?;
    dev.set_master()?;
    let snap = Snapshot::take(&dev)?;
    let out = snap.first_output(&dev)?.ok_or("no connected output")?;
    let (width, height) = out.size();
    let mut buf = DumbBuffer::create(&dev, DumbSpec::new(width, height, 32))?;
    let grey = vec![0x80; usize::try_from(buf.size())?];
    buf.map()?.write_at(0, &grey)?;
    let fb = dev.add_framebuffer(&FbSpec::for_dumb(&buf, DrmFourcc::Xrgb8888))?;
    let mode = dev.create_blob(&out.mode.to_blob_bytes())?;
    let mut req = AtomicRequest::new();
    snap.light(&mut req, &out, mode.id(), fb.id())?;
    let flags = AtomicFlags::ALLOW_MODESET | AtomicFlags::PAGE_FLIP_EVENT;
    dev.atomic_commit(&req, flags, 7)?;
    match dev.read_events(Some(Duration::from_secs(5)))?.first() {
        Some(Event::FlipComplete(e)) if e.user_data == 7 => println!("lit {width}x{height}"),
        other => return Err(format!("no flip event: {other:?}").into()),
    }
    Ok(())
}
