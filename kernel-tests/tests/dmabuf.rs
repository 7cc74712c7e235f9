//! dma-buf in real guests: names and fdinfo, sync_file export and import (Linux 6.0+;
//! Unsupported on 5.10), implicit fences from vgem seen through poll and sync_files, and
//! bad flags and fds with exact errnos.

#[macro_use]
mod fence_common;

use drm_gem::driver::vgem::{Vgem, VgemFenceAccess};
use drm_gem::{
    Device, DmaBuf, DmaBufSync, DumbBuffer, DumbSpec, Errno, Error, FenceStatus, PrimeFlags, raw,
};
use fence_common::{
    closed_fd, expect_errno, expect_errno_quiet, expect_unsupported, fd_count, kernel_at_least,
};
use kernel_tests::{require_driver, unchanged};
use rustix::fd::{AsFd, AsRawFd};
use std::time::Duration;

const ZERO: Option<Duration> = Some(Duration::ZERO);

fn spec() -> DumbSpec {
    DumbSpec {
        width: 32,
        height: 16,
        bpp: 32,
    }
}

/// A vgem dumb buffer and its dma-buf.
fn vgem_dmabuf(dev: &Device) -> (DumbBuffer<&Device>, DmaBuf) {
    let buf = DumbBuffer::create(dev, spec()).expect("vgem CREATE_DUMB");
    let d = dev
        .export(buf.gem(), PrimeFlags::default())
        .expect("PRIME_HANDLE_TO_FD");
    (buf, d)
}

/// The sync_file ioctls: Linux 6.0+ (20e10881a043, "dma-buf: Add an API for exporting
/// sync files (v14)", and its import twin).
fn has_sync_file_ioctls() -> bool {
    kernel_at_least(6, 0)
}

#[test]
fn set_name_shows_in_fdinfo() {
    let dev = require_driver!("vgem", &["vgem"]);
    let before = fd_count();
    let (buf, d) = vgem_dmabuf(&dev);
    let info = d.info().expect("fdinfo");
    assert_eq!(info.size, buf.size());
    assert_eq!(info.size, d.size().unwrap());
    // The count includes the exporter's own references (GEM object, PRIME table), so only
    // its change is fixed: one more open file, one more count.
    let count = info.count.expect("count: line");
    let dup = rustix::io::dup(d.as_fd()).unwrap();
    assert_eq!(d.info().unwrap().count, Some(count + 1));
    drop(dup);
    assert_eq!(d.info().unwrap().count, Some(count));
    assert_eq!(info.exp_name.as_deref(), Some("drm"), "{info:?}");
    assert_eq!(info.name, None, "no name until one is set");

    d.set_name("scanout-0").expect("DMA_BUF_SET_NAME_B");
    assert_eq!(d.info().unwrap().name.as_deref(), Some("scanout-0"));
    d.set_name("second").unwrap();
    assert_eq!(d.info().unwrap().name.as_deref(), Some("second"));
    let longest = "n".repeat(31);
    d.set_name(&longest)
        .expect("31 bytes + NUL fit DMA_BUF_NAME_LEN");
    assert_eq!(d.info().unwrap().name.as_deref(), Some(longest.as_str()));

    for len in [32, 33, 200] {
        expect_errno_quiet(
            &dev,
            &format!("name of {len} bytes"),
            || d.set_name(&"x".repeat(len)),
            "DMA_BUF_SET_NAME_B",
            Errno::INVAL,
        );
    }
    assert_eq!(
        d.info().unwrap().name.as_deref(),
        Some(longest.as_str()),
        "a rejected name leaves the old one"
    );
    assert!(matches!(
        unchanged(&dev, "a name with a NUL", || d.set_name("a\0b")),
        Err(Error::InvalidArgument { .. })
    ));
    drop((d, buf));
    assert_eq!(fd_count(), before, "fds leaked");
}

#[test]
fn set_name_on_an_attached_buffer_is_ebusy_on_5_10() {
    let dev = require_driver!("vgem", &["vgem"]);
    let vkms = require_driver!("vkms", &["vkms"]);
    let (_buf, d) = vgem_dmabuf(&dev);
    let imported = vkms
        .import(d.as_fd())
        .expect("vkms imports the vgem dma-buf");
    let r = unchanged(&dev, "rename while attached", || {
        d.set_name("while-attached")
    });
    // Linux 5.17+ (e73c317efbf9, "dma-buf: remove restriction of IOCTL:DMA_BUF_SET_NAME")
    // renames a buffer with attachments; before, EBUSY (5.10 and 5.15 here).
    if kernel_at_least(5, 17) {
        r.expect("renaming an attached dma-buf");
        assert_eq!(d.info().unwrap().name.as_deref(), Some("while-attached"));
    } else {
        expect_errno(
            "rename while attached",
            r,
            "DMA_BUF_SET_NAME_B",
            Errno::BUSY,
        );
    }
    drop(imported);
    if kernel_at_least(5, 11) {
        d.set_name("detached")
            .expect("rename after the importer let go");
        assert_eq!(d.info().unwrap().name.as_deref(), Some("detached"));
    }
    // On 5.10 the buffer stays attached after vkms closes its handle: that kernel's
    // vkms_gem_free_object never calls drm_prime_gem_destroy, so the attachment leaks
    // (observed: EBUSY again), and a rename is not a fair test there.
}

#[test]
fn sync_file_of_an_unfenced_buffer_is_signalled() {
    let dev = require_driver!("vgem", &["vgem"]);
    let (_buf, d) = vgem_dmabuf(&dev);
    if !has_sync_file_ioctls() {
        expect_unsupported(
            "export before 6.0",
            unchanged(&dev, "export before 6.0", || {
                d.export_sync_file(DmaBufSync::READ)
            }),
        );
        let null = std::fs::File::open("/dev/null").unwrap();
        expect_unsupported(
            "import before 6.0",
            unchanged(&dev, "import before 6.0", || {
                d.import_sync_file(null.as_fd(), DmaBufSync::WRITE)
            }),
        );
        expect_errno_quiet(
            &dev,
            "raw import before 6.0",
            || raw::dma_buf_import_sync_file(d.as_fd(), null.as_raw_fd(), 1),
            "DMA_BUF_IOCTL_IMPORT_SYNC_FILE",
            Errno::NOTTY,
        );
        skip_on_this_kernel!("the dma-buf sync_file ioctls arrived in Linux 6.0");
    }
    let before = fd_count();
    for access in [DmaBufSync::READ, DmaBufSync::WRITE, DmaBufSync::all()] {
        let sf = d
            .export_sync_file(access)
            .expect("DMA_BUF_IOCTL_EXPORT_SYNC_FILE");
        assert_eq!(
            sf.info().unwrap().status,
            FenceStatus::Signaled,
            "{access:?}"
        );
        assert!(sf.wait(ZERO).unwrap());
    }
    assert!(d.wait_fences(DmaBufSync::READ, ZERO).unwrap());
    assert!(d.wait_fences(DmaBufSync::WRITE, ZERO).unwrap());
    // Importing a signalled fence changes nothing for waiters.
    let sf = d.export_sync_file(DmaBufSync::READ).unwrap();
    d.import_sync_file(sf.as_fd(), DmaBufSync::WRITE)
        .expect("DMA_BUF_IOCTL_IMPORT_SYNC_FILE");
    assert!(d.wait_fences(DmaBufSync::WRITE, ZERO).unwrap());
    drop(sf);
    assert_eq!(fd_count(), before, "fds leaked");
}

#[test]
fn imported_sync_file_holds_up_implicit_sync() {
    let dev = require_driver!("vgem", &["vgem"]);
    if !has_sync_file_ioctls() {
        skip_on_this_kernel!("the dma-buf sync_file ioctls arrived in Linux 6.0");
    }
    let vgem = Vgem::new(&dev).unwrap();
    let (a, da) = vgem_dmabuf(&dev);
    let (_b, db) = vgem_dmabuf(&dev);
    let (_c, dc) = vgem_dmabuf(&dev);
    let fence = vgem
        .attach_fence(a.handle(), VgemFenceAccess::Write)
        .unwrap();
    let sf = da.export_sync_file(DmaBufSync::READ).unwrap();
    // B gets A's fence as a writer: readers and writers of B wait.
    db.import_sync_file(sf.as_fd(), DmaBufSync::WRITE).unwrap();
    assert!(!db.wait_fences(DmaBufSync::READ, ZERO).unwrap());
    assert!(!db.wait_fences(DmaBufSync::WRITE, ZERO).unwrap());
    let info = db
        .export_sync_file(DmaBufSync::READ)
        .unwrap()
        .info()
        .unwrap();
    assert_eq!(info.status, FenceStatus::Active);
    assert!(
        info.fences.iter().any(|f| f.driver_name == "vgem"),
        "{info:?}"
    );
    // C gets it as a reader: only writers of C wait.
    dc.import_sync_file(sf.as_fd(), DmaBufSync::READ).unwrap();
    assert!(dc.wait_fences(DmaBufSync::READ, ZERO).unwrap());
    assert!(!dc.wait_fences(DmaBufSync::WRITE, ZERO).unwrap());
    assert_eq!(
        dc.export_sync_file(DmaBufSync::READ)
            .unwrap()
            .info()
            .unwrap()
            .status,
        FenceStatus::Signaled
    );
    fence.signal().unwrap();
    for d in [&db, &dc] {
        assert!(d.wait_fences(DmaBufSync::READ, ZERO).unwrap());
        assert!(d.wait_fences(DmaBufSync::WRITE, ZERO).unwrap());
    }
}

#[test]
fn bad_flags_and_fds_are_rejected() {
    let dev = require_driver!("vgem", &["vgem"]);
    let (_buf, d) = vgem_dmabuf(&dev);
    let null = std::fs::File::open("/dev/null").unwrap();
    let before = fd_count();
    const SYNC: &str = "DMA_BUF_IOCTL_SYNC";
    let fd = d.as_fd();
    // DMA_BUF_SYNC_START is 0, so flags 0 is a start with neither READ nor WRITE.
    expect_errno_quiet(
        &dev,
        "sync: no direction",
        || raw::dma_buf_sync(fd, 0),
        SYNC,
        Errno::INVAL,
    );
    expect_errno_quiet(
        &dev,
        "sync: END alone",
        || raw::dma_buf_sync(fd, 4),
        SYNC,
        Errno::INVAL,
    );
    expect_errno_quiet(
        &dev,
        "sync: unknown bit",
        || raw::dma_buf_sync(fd, 1 | 8),
        SYNC,
        Errno::INVAL,
    );
    expect_errno_quiet(
        &dev,
        "sync: all bits",
        || raw::dma_buf_sync(fd, u64::MAX),
        SYNC,
        Errno::INVAL,
    );
    assert!(matches!(
        unchanged(&dev, "cpu access without a direction", || d
            .begin_cpu_access(false, false)),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        unchanged(&dev, "wait for no fences", || d
            .wait_fences(DmaBufSync::empty(), ZERO)),
        Err(Error::InvalidArgument { .. })
    ));
    if has_sync_file_ioctls() {
        const EXPORT: &str = "DMA_BUF_IOCTL_EXPORT_SYNC_FILE";
        const IMPORT: &str = "DMA_BUF_IOCTL_IMPORT_SYNC_FILE";
        let inval = Errno::INVAL;
        let bits = DmaBufSync::from_bits_retain;
        expect_errno_quiet(
            &dev,
            "export: no flags",
            || d.export_sync_file(bits(0)),
            EXPORT,
            inval,
        );
        expect_errno_quiet(
            &dev,
            "export: unknown bit",
            || d.export_sync_file(bits(4)),
            EXPORT,
            inval,
        );
        expect_errno_quiet(
            &dev,
            "export: READ + unknown",
            || d.export_sync_file(bits(5)),
            EXPORT,
            inval,
        );
        let sf = d.export_sync_file(DmaBufSync::READ).unwrap();
        let sfd = sf.as_fd();
        expect_errno_quiet(
            &dev,
            "import: no flags",
            || d.import_sync_file(sfd, bits(0)),
            IMPORT,
            inval,
        );
        expect_errno_quiet(
            &dev,
            "import: unknown bit",
            || d.import_sync_file(sfd, bits(8)),
            IMPORT,
            inval,
        );
        expect_errno_quiet(
            &dev,
            "import: /dev/null",
            || d.import_sync_file(null.as_fd(), DmaBufSync::WRITE),
            IMPORT,
            inval,
        );
        expect_errno_quiet(
            &dev,
            "import: a dma-buf",
            || d.import_sync_file(d.as_fd(), DmaBufSync::WRITE),
            IMPORT,
            inval,
        );
        expect_errno_quiet(
            &dev,
            "import: fd -1",
            || raw::dma_buf_import_sync_file(fd, -1, 2),
            IMPORT,
            inval,
        );
        expect_errno_quiet(
            &dev,
            "import: closed fd",
            || raw::dma_buf_import_sync_file(fd, closed_fd(), 2),
            IMPORT,
            inval,
        );
        drop(sf);
    } else {
        expect_unsupported(
            "export on 5.10",
            unchanged(&dev, "export on 5.10", || {
                d.export_sync_file(DmaBufSync::READ)
            }),
        );
        expect_errno_quiet(
            &dev,
            "raw import on 5.10",
            || raw::dma_buf_import_sync_file(fd, -1, 2),
            "DMA_BUF_IOCTL_IMPORT_SYNC_FILE",
            Errno::NOTTY,
        );
    }
    assert_eq!(fd_count(), before, "fds leaked");
}
