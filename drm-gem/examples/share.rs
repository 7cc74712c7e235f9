//! Share a buffer between two DRM devices: create a dumb buffer on one, map and fill it,
//! export it as a dma-buf, import it on another device, and read the same bytes back
//! through the shared dma-buf (and, where the importer can export, check that its handle
//! names that same buffer).
//!
//! Run it where there are DRM nodes (inside a guest: `vm run -- target/debug/examples/share`);
//! on a machine without them it says so and exits successfully.

use drm_gem::{Caps, Device, DumbBuffer, DumbSpec, NodeKind, PrimeFlags};
use rustix::fd::{AsFd, BorrowedFd};

/// Shares one buffer between two devices (`pub(crate)` so that the guest test can call it).
pub(crate) fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Ok(nodes) = drm_gem::enumerate() else {
        println!("no DRM nodes on this machine: nothing to share");
        return Ok(());
    };
    // Open every primary node once, with its PRIME capabilities.
    let devices: Vec<(String, Device, Caps)> = nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Primary)
        .filter_map(|n| {
            let dev = Device::open(&n.path).ok()?;
            let caps = Caps::probe(&dev).ok()?;
            Some((n.driver.clone().unwrap_or_default(), dev, caps))
        })
        .collect();
    // An exporter that makes dumb buffers and an importer with another driver.
    let pair = devices.iter().find_map(|(name, dev, caps)| {
        if !caps.prime_export {
            return None;
        }
        let (other, odev, _) = devices
            .iter()
            .find(|(o, _, oc)| o != name && oc.prime_import)?;
        Some((name, dev, other, odev))
    });
    let Some((from, exporter, to, importer)) = pair else {
        println!("no pair of devices that can export and import: nothing to share");
        return Ok(());
    };

    // 1. Create and fill.
    let spec = DumbSpec {
        width: 256,
        height: 64,
        bpp: 32,
    };
    let mut buf = DumbBuffer::create(exporter, spec)?;
    let pattern: Vec<u8> = (0..buf.size()).map(|i| (i % 251) as u8).collect();
    buf.map()?.write_at(0, &pattern)?;

    // 2. Export as a dma-buf and import it on the other device.
    let dmabuf = exporter.export(buf.gem(), PrimeFlags::default())?;
    let imported = importer.import(dmabuf.as_fd())?;

    // 3. Read back through the dma-buf (the memory the importer's handle now names), and
    //    where the importer can export, check that its handle exports that same buffer.
    let mut back = vec![0u8; pattern.len()];
    {
        let _cpu = dmabuf.begin_cpu_access(true, false)?;
        dmabuf.map()?.read_at(0, &mut back)?;
    }
    assert_eq!(back, pattern, "the dma-buf holds other bytes");
    if let Ok(again) = importer.export(&imported, PrimeFlags::default()) {
        let inode = |fd: BorrowedFd<'_>| rustix::fs::fstat(fd).map(|st| st.st_ino);
        assert_eq!(
            inode(again.as_fd())?,
            inode(dmabuf.as_fd())?,
            "another buffer"
        );
    }
    println!(
        "shared {} bytes from {from} (handle {}) to {to} (handle {}): identical",
        pattern.len(),
        buf.handle().get(),
        imported.handle().get()
    );
    Ok(())
}
