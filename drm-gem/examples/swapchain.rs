//! A compositor-style owner: one struct holds an `Arc<Device>` together with a swapchain of
//! dumb buffers and their framebuffers (no borrow of the device), lights vkms with the first
//! buffer and flips through the others, waiting for each flip event. Where there is no vkms
//! it says so and succeeds.
//!
//! Inside a guest: `vm run -- target/debug/examples/swapchain`.

use drm_gem::kms::{AtomicFlags, AtomicRequest, Event, FbSpec, Framebuffer, Output, Snapshot};
use drm_gem::{ClientCap, Device, DrmFourcc, DumbBuffer, DumbSpec, NodeKind};
use std::sync::Arc;
use std::time::Duration;

/// One buffer of the chain and the framebuffer over it.
type Slot = (DumbBuffer<Arc<Device>>, Framebuffer<Arc<Device>>);

/// A device, the output it drives, and the buffers it flips between.
struct Swapchain {
    dev: Arc<Device>,
    snap: Snapshot,
    out: Output,
    buffers: Vec<Slot>,
    front: usize,
}

impl Swapchain {
    /// `n` buffers of the output's size, buffer `i` filled with grey level `i * 40`.
    fn new(dev: Arc<Device>, n: u8) -> Result<Option<Self>, Box<dyn std::error::Error>> {
        let snap = Snapshot::take(&dev)?;
        let Some(out) = snap.first_output(&dev)? else {
            return Ok(None);
        };
        let (w, h) = out.size();
        let mut buffers = Vec::new();
        for i in 0..n {
            let mut buf = DumbBuffer::create(Arc::clone(&dev), DumbSpec::new(w, h, 32))?;
            let fill = vec![i * 40; usize::try_from(buf.size())?];
            buf.map()?.write_at(0, &fill)?;
            let fb = Framebuffer::add(
                Arc::clone(&dev),
                &FbSpec::for_dumb(&buf, DrmFourcc::Xrgb8888),
            )?;
            buffers.push((buf, fb));
        }
        Ok(Some(Self {
            dev,
            snap,
            out,
            buffers,
            front: 0,
        }))
    }

    /// Lights the output with buffer 0 and waits for the flip.
    fn light(&mut self) -> Result<(), Box<dyn std::error::Error>> {
        let mode = self.dev.create_blob(&self.out.mode.to_blob_bytes())?;
        let mut req = AtomicRequest::new();
        self.snap
            .light(&mut req, &self.out, mode.id(), self.buffers[0].1.id())?;
        self.commit(&req, AtomicFlags::ALLOW_MODESET)
    }

    /// Shows the next buffer (a page flip: only the plane's `FB_ID` changes).
    fn flip(&mut self) -> Result<(), Box<dyn std::error::Error>> {
        self.front = (self.front + 1) % self.buffers.len();
        let plane = self.snap.plane_state(self.out.plane).ok_or("plane gone")?;
        let mut req = AtomicRequest::new();
        req.set(
            self.out.plane,
            plane.property_id("FB_ID")?,
            self.buffers[self.front].1.id(),
        );
        self.commit(&req, AtomicFlags::NONBLOCK)
    }

    fn commit(
        &self,
        req: &AtomicRequest<'_>,
        flags: AtomicFlags,
    ) -> Result<(), Box<dyn std::error::Error>> {
        let tag = 100 + self.front as u64;
        self.dev
            .atomic_commit(req, flags | AtomicFlags::PAGE_FLIP_EVENT, tag)?;
        match self.dev.read_events(Some(Duration::from_secs(5)))?.first() {
            Some(Event::FlipComplete(e)) if e.user_data == tag => Ok(()),
            other => Err(format!("no flip event for buffer {}: {other:?}", self.front).into()),
        }
    }
}

/// Builds a three-buffer swapchain on vkms and flips through it twice.
pub(crate) fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Ok(dev) = Device::open_driver("vkms", Some(NodeKind::Primary)) else {
        println!("no vkms node here: no swapchain");
        return Ok(());
    };
    dev.set_client_cap(ClientCap::Atomic, 1)?;
    dev.set_master()?;
    let Some(mut chain) = Swapchain::new(Arc::new(dev), 3)? else {
        println!("no connected output");
        return Ok(());
    };
    chain.light()?;
    for _ in 0..6 {
        chain.flip()?;
    }
    println!(
        "flipped 6 times through {} buffers; the device is shared by {} owners",
        chain.buffers.len(),
        Arc::strong_count(&chain.dev)
    );
    Ok(())
}
