//! drm-gem and the `drm` crate (drm-rs 0.14) on one open file, both ways, through `AsFd`:
//! a drm-gem `Device` driven through `drm::control::Device`, and a card opened the drm-rs
//! way adopted by drm-gem. Both sides must see the same objects and the same GEM handle
//! namespace (they are one open file), and nothing may leak.

use drm::Device as _;
use drm::control::Device as _;
use drm_gem::{Device, DmaBuf, DumbBuffer, DumbSpec, GemHandle, NodeKind, PrimeFlags};
use kernel_tests::{open_fds, require_feature, skip, xrgb_fb};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// A drm-gem device seen by the drm crate: its traits need only `AsFd`.
struct Via<'a>(&'a Device);

impl AsFd for Via<'_> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}
impl drm::Device for Via<'_> {}
impl drm::control::Device for Via<'_> {}

/// A card opened the way drm-rs's examples open one.
struct Card(std::fs::File);

impl AsFd for Card {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}
impl drm::Device for Card {}
impl drm::control::Device for Card {}

fn vkms_path() -> Option<std::path::PathBuf> {
    kernel_tests::node_of_driver(&["vkms"])
        .filter(|n| n.kind == NodeKind::Primary)
        .map(|n| n.path)
}

fn ids<H: Into<u32> + Copy>(hs: &[H]) -> Vec<u32> {
    hs.iter().map(|&h| h.into()).collect()
}

/// The drm-gem view of the mode objects, as raw ids.
fn gem_view(dev: &Device) -> [Vec<u32>; 3] {
    let r = dev.resources().expect("GETRESOURCES through drm-gem");
    [
        r.crtcs.iter().map(|c| c.get()).collect(),
        r.connectors.iter().map(|c| c.get()).collect(),
        r.encoders.iter().map(|e| e.get()).collect(),
    ]
}

#[test]
fn drm_gem_device_through_drm_control() {
    require_feature!("vkms");
    let Some(path) = vkms_path() else {
        skip!("no vkms primary node");
    };
    let fds = open_fds();
    let dev = Device::open(&path).expect("open vkms");
    let via = Via(&dev);

    // The same open file answers both libraries alike.
    let driver = via.get_driver().expect("drm: VERSION");
    assert_eq!(
        driver.name().to_string_lossy(),
        dev.driver().expect("drm-gem: VERSION").name
    );
    let res = via.resource_handles().expect("drm: GETRESOURCES");
    assert_eq!(
        [ids(res.crtcs()), ids(res.connectors()), ids(res.encoders())],
        gem_view(&dev)
    );

    // A framebuffer made by drm-gem, read back by drm.
    let buf = DumbBuffer::create(
        &dev,
        DumbSpec {
            width: 64,
            height: 48,
            bpp: 32,
        },
    )
    .expect("dumb buffer");
    let fb = xrgb_fb(&dev, &buf).expect("ADDFB2");
    let handle: drm::control::framebuffer::Handle =
        drm::control::from_u32(fb.id().get()).expect("nonzero id");
    let info = via.get_framebuffer(handle).expect("drm: GETFB");
    assert_eq!(info.size(), (64, 48));
    assert_eq!(info.pitch(), buf.pitch());

    drop((fb, buf));
    assert_eq!(dev.live_handles(), 0, "drm-gem still owns handles");
    drop(dev);
    assert_eq!(open_fds(), fds, "fds leaked");
}

/// One GEM namespace: drm's PRIME import of drm-gem's export answers with drm-gem's own
/// handle (vgem: PRIME on every kernel; vkms before 6.x has no PRIME export, ENOSYS).
#[test]
fn drm_prime_import_finds_the_drm_gem_handle() {
    let fds = open_fds();
    let dev = kernel_tests::require_driver!("vgem", &["vgem"]);
    let via = Via(&dev);
    let buf = DumbBuffer::create(
        &dev,
        DumbSpec {
            width: 32,
            height: 32,
            bpp: 32,
        },
    )
    .expect("dumb buffer");
    let exported: DmaBuf = dev
        .export(buf.gem(), PrimeFlags::default())
        .expect("PRIME export");
    let imported = via
        .prime_fd_to_buffer(exported.as_fd())
        .expect("drm: PRIME_FD_TO_HANDLE");
    assert_eq!(u32::from(imported), buf.handle().get());
    // drm-gem's import of the same dma-buf is a second owner of that handle, not a new one.
    let again = dev.import(exported.as_fd()).expect("drm-gem import");
    assert_eq!(again.handle(), buf.handle());
    assert_eq!(again.owners(), 2);
    drop((again, exported, buf));
    assert_eq!(dev.live_handles(), 0, "drm-gem still owns handles");
    drop(dev);
    assert_eq!(open_fds(), fds, "fds leaked");
}

#[test]
fn drm_opened_card_adopted_by_drm_gem() {
    require_feature!("vkms");
    let Some(path) = vkms_path() else {
        skip!("no vkms primary node");
    };
    let fds = open_fds();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .expect("open vkms as drm-rs does");
    let card = Card(file);
    let res = card.resource_handles().expect("drm: GETRESOURCES");
    let seen = [ids(res.crtcs()), ids(res.connectors()), ids(res.encoders())];
    let dumb = card
        .create_dumb_buffer((32, 32), drm::buffer::DrmFourcc::Xrgb8888, 32)
        .expect("drm: CREATE_DUMB");
    let raw = u32::from(drm::buffer::Buffer::handle(&dumb));

    // Adoption keeps the open file: the same objects, the same handles.
    let dev = Device::from_fd(OwnedFd::from(card.0)).expect("drm-gem adopts the card");
    assert_eq!(dev.kind(), NodeKind::Primary);
    assert_eq!(gem_view(&dev), seen);
    let handle = GemHandle::new(raw).expect("nonzero handle");
    dev.close_handle(handle)
        .expect("the handle drm made is valid on the adopted device");
    let again = dev.close_handle(handle).expect_err("closed twice");
    assert_eq!(again.errno(), Some(drm_gem::Errno::INVAL), "{again}");

    drop(dev);
    assert_eq!(open_fds(), fds, "fds leaked");
}
