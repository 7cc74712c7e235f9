//! udmabuf through `hmm::Udmabuf` and `hmm::SealedMemfd`: dma-bufs over memfd pages,
//! coherent with writes through the memfd, importable by PRIME into vgem and virtio-gpu,
//! and the kernel's exact answers to bad input (per kernel where they differ).

use drm_gem::{Device, DmaBuf, Errno, Error, NodeKind, PrimeFlags};
use hmm::{SealedMemfd, Udmabuf, UdmabufRange};
use ioctl_sys::udmabuf as usys;
use kernel_tests::kernel_release::{has_fix, release};
use kernel_tests::mem::{dma_buf_bytes, page, tagged_memfd};
use kernel_tests::raw::{closed_fd_number, udmabuf_create, udmabuf_create_list};
use kernel_tests::{
    Delta, changes_process, kernel_version, open_fds, require_feature, skip, unchanged,
    unchanged_process,
};
use rustix::fd::{AsFd, AsRawFd, OwnedFd};
use rustix::fs::SealFlags;

macro_rules! udmabuf {
    () => {{
        require_feature!("udmabuf");
        kernel_tests::fds_shared();
        match Udmabuf::open() {
            Ok(u) => u,
            Err(e) => skip!("/dev/udmabuf: {e}"),
        }
    }};
}

/// A memfd of `npages` pages, page `i` filled with byte `tag + i`.
fn memfd(npages: usize, tag: u8) -> SealedMemfd {
    tagged_memfd("test", npages, tag)
}

fn page_bytes(v: &[u8], i: usize) -> &[u8] {
    &v[i * page()..(i + 1) * page()]
}

#[test]
fn sealed_memfd_carries_shrink_and_seal_never_write() {
    kernel_tests::fds_shared();
    let m = SealedMemfd::new("seals", 4 * page() as u64).unwrap();
    let seals = m.seals().unwrap();
    assert!(
        seals.contains(SealFlags::SHRINK | SealFlags::SEAL),
        "{seals:?}"
    );
    assert!(!seals.intersects(SealFlags::WRITE | SealFlags::FUTURE_WRITE));
    // F_SEAL_SEAL: nobody can add a write seal later.
    assert_eq!(
        unchanged_process("F_SEAL_WRITE after F_SEAL_SEAL", || {
            rustix::fs::fcntl_add_seals(&m, SealFlags::WRITE)
        }),
        Err(Errno::PERM)
    );
    assert_eq!(
        unchanged_process("shrink", || rustix::fs::ftruncate(&m, 0)),
        Err(Errno::PERM),
        "shrinking is sealed"
    );
    let flags = rustix::io::fcntl_getfd(&m).unwrap();
    assert!(flags.contains(rustix::io::FdFlags::CLOEXEC));
    // Adopting checks the seals.
    let plain = rustix::fs::memfd_create(
        "plain",
        rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
    )
    .unwrap();
    assert!(matches!(
        changes_process(
            "adopt an unsealed memfd",
            |_| Delta::fds(-1),
            || { SealedMemfd::from_fd(plain) }
        ),
        Err(Error::InvalidArgument { .. })
    ));
    let written = rustix::fs::memfd_create("w", rustix::fs::MemfdFlags::ALLOW_SEALING).unwrap();
    rustix::fs::fcntl_add_seals(&written, SealFlags::SHRINK | SealFlags::WRITE).unwrap();
    assert!(matches!(
        changes_process(
            "adopt a write-sealed memfd",
            |_| Delta::fds(-1),
            || { SealedMemfd::from_fd(written) }
        ),
        Err(Error::InvalidArgument { .. })
    ));
    let null: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
    assert_eq!(
        changes_process(
            "adopt /dev/null",
            |_| Delta::fds(-1),
            || { SealedMemfd::from_fd(null) }
        )
        .unwrap_err()
        .errno(),
        Some(Errno::INVAL)
    );
    let ok = rustix::fs::memfd_create("ok", rustix::fs::MemfdFlags::ALLOW_SEALING).unwrap();
    rustix::fs::fcntl_add_seals(&ok, SealFlags::SHRINK).unwrap();
    SealedMemfd::from_fd(ok).expect("a memfd with F_SEAL_SHRINK only");
}

#[test]
fn create_is_coherent_with_the_memfd() {
    let u = udmabuf!();
    let before = open_fds();
    let m = memfd(16, 1);
    let buf = u
        .create(&m, 4 * page() as u64, 8 * page() as u64)
        .expect("UDMABUF_CREATE");
    assert_eq!(buf.size().unwrap(), 8 * page() as u64);
    assert!(
        rustix::io::fcntl_getfd(&buf)
            .unwrap()
            .contains(rustix::io::FdFlags::CLOEXEC),
        "CLOEXEC"
    );
    assert_eq!(buf.info().unwrap().exp_name.as_deref(), Some("udmabuf"));
    let v = dma_buf_bytes(&buf);
    for i in 0..8 {
        assert!(
            page_bytes(&v, i).iter().all(|&b| b == 5 + i as u8),
            "page {i}"
        );
    }
    // memfd write -> dma-buf mapping.
    m.write_at(5 * page() as u64 + 10, b"through the memfd")
        .unwrap();
    let v = dma_buf_bytes(&buf);
    assert_eq!(&v[page() + 10..page() + 27], b"through the memfd");
    // dma-buf mapping -> memfd read.
    {
        let mut map = buf.map().unwrap();
        let _cpu = buf.begin_cpu_access(false, true).unwrap();
        map.write_at(7 * page() + 3, b"through the dma-buf")
            .unwrap();
    }
    let mut back = [0u8; 19];
    m.read_at(11 * page() as u64 + 3, &mut back).unwrap();
    assert_eq!(&back, b"through the dma-buf");
    drop((buf, m));
    assert_eq!(open_fds(), before, "fds leaked");
}

#[test]
fn create_list_concatenates_and_may_repeat_pages() {
    let u = udmabuf!();
    let a = memfd(4, 10);
    let b = memfd(2, 100);
    let p = page() as u64;
    let buf = u
        .create_list(&[
            UdmabufRange {
                memfd: &a,
                offset: p,
                size: 2 * p,
            },
            UdmabufRange {
                memfd: &b,
                offset: 0,
                size: 2 * p,
            },
            UdmabufRange {
                memfd: &a,
                offset: p,
                size: p,
            },
        ])
        .expect("UDMABUF_CREATE_LIST");
    assert_eq!(buf.size().unwrap(), 5 * p);
    let v = dma_buf_bytes(&buf);
    for (i, want) in [11u8, 12, 100, 101, 11].into_iter().enumerate() {
        assert!(page_bytes(&v, i).iter().all(|&x| x == want), "page {i}");
    }
    // Page 1 of `a` appears twice: one write shows in both places.
    a.write_at(p, b"twice").unwrap();
    let v = dma_buf_bytes(&buf);
    assert_eq!(&v[..5], b"twice");
    assert_eq!(&v[4 * page()..4 * page() + 5], b"twice");
}

/// Imports a udmabuf into `driver` by PRIME and checks it is that buffer: exporting the
/// imported object again gives back the same dma-buf (same inode), whose mapping shows
/// the memfd's bytes.
fn import_into(driver: &str) {
    let u = udmabuf!();
    let dev = match Device::open_driver(driver, Some(NodeKind::Render))
        .or_else(|_| Device::open_driver(driver, None))
    {
        Ok(d) => d,
        Err(e) => skip!("{driver}: {e}"),
    };
    let before = open_fds();
    let m = memfd(4, 42);
    let buf = u.create(&m, 0, 4 * page() as u64).unwrap();
    let obj = dev
        .import(buf.as_fd())
        .expect("PRIME_FD_TO_HANDLE of a udmabuf");
    let again = dev
        .export(&obj, PrimeFlags::default())
        .expect("PRIME_HANDLE_TO_FD of the imported object");
    let ino = |f: &DmaBuf| rustix::fs::fstat(f).unwrap().st_ino;
    assert_eq!(ino(&again), ino(&buf), "re-export gives back the udmabuf");
    let v = dma_buf_bytes(&again);
    assert!(page_bytes(&v, 3).iter().all(|&b| b == 45));
    drop((obj, again, buf, m));
    assert_eq!(open_fds(), before, "fds leaked");
}

#[test]
fn imports_into_vgem() {
    require_feature!("vgem");
    import_into("vgem");
}

/// virtio-gpu imports a foreign dma-buf only as a guest blob (ca77f27a2665, "drm/virtio:
/// Import prime buffers from other devices as guest blobs", Linux 6.14) on a device with
/// blob resources (probed: VIRTGPU_PARAM_RESOURCE_BLOB; QEMU's virtio-gpu-pci here has
/// none), where the full check runs. Everywhere else `drm_gem_prime_import` maps the
/// buffer for the DRM device and then ends in the driver's `gem_prime_import_sg_table`
/// stub, ENODEV (`drivers/gpu/drm/virtio/virtgpu_prime.c`). Where the DRM device is the
/// virtio device itself (probed: its sysfs `device` is `virtioN`, as on 5.10 and 5.15;
/// the PCI function on 6.1 and 6.12), which has no DMA mask, the mapping yields no
/// entries, and before Linux 5.15 (fffe3cc8c219, "dma-mapping: allow map_sg() ops to
/// return negative error codes") `dma_map_sgtable` turned that into EINVAL before the
/// stub was reached (5.10); from 5.15 it passes and the stub answers (5.15.0: ENODEV).
#[test]
fn imports_into_virtio_gpu() {
    require_feature!("virtio_gpu");
    let Some(node) = kernel_tests::node_of_driver(&["virtio_gpu"]) else {
        kernel_tests::skip!("no virtio_gpu node");
    };
    let gpu_dev = Device::open(&node.path).expect("open virtio_gpu");
    let blob = drm_gem::driver::virtio_gpu::VirtioGpu::new(&gpu_dev)
        .expect("virtio-gpu params")
        .params()
        .resource_blob
        == Some(true);
    drop(gpu_dev);
    if blob && kernel_version() >= (6, 14) {
        import_into("virtio_gpu");
        return;
    }
    let sysfs = format!("/sys/dev/char/{}:{}/device", node.dev.0, node.dev.1);
    let parent = std::fs::canonicalize(&sysfs).unwrap_or_else(|e| panic!("{sysfs}: {e}"));
    let on_virtio = parent
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("virtio"));
    let u = udmabuf!();
    let dev = match Device::open_driver("virtio_gpu", Some(NodeKind::Render)) {
        Ok(d) => d,
        Err(e) => skip!("virtio_gpu: {e}"),
    };
    let before = open_fds();
    let m = memfd(4, 42);
    let buf = u.create(&m, 0, 4 * page() as u64).unwrap();
    match unchanged(&dev, "PRIME import of a udmabuf", || {
        dev.import(buf.as_fd())
    }) {
        Err(Error::Ioctl {
            name: "DRM_IOCTL_PRIME_FD_TO_HANDLE",
            errno,
        }) => {
            let want = if on_virtio && kernel_version() < (5, 15) {
                Errno::INVAL
            } else {
                Errno::NODEV
            };
            assert_eq!(errno, want, "DRM device {parent:?}");
        }
        other => panic!("expected virtio-gpu to refuse the import on this kernel, got {other:?}"),
    }
    drop((buf, m));
    assert_eq!(open_fds(), before, "fds leaked");
}

#[test]
fn bad_input_is_refused_before_the_kernel() {
    let u = udmabuf!();
    let before = open_fds();
    let m = memfd(4, 0);
    let p = page() as u64;
    let invalid = |r: drm_gem::Result<DmaBuf>| matches!(r, Err(Error::InvalidArgument { .. }));
    assert!(
        invalid(unchanged_process("misaligned offset", || u.create(&m, 100, p))),
        "misaligned offset"
    );
    assert!(
        invalid(unchanged_process("misaligned size", || u.create(
            &m,
            0,
            p + 1
        ))),
        "misaligned size"
    );
    assert!(
        invalid(unchanged_process("empty", || u.create(&m, 0, 0))),
        "empty"
    );
    assert!(
        invalid(unchanged_process("past the end", || u.create(
            &m,
            2 * p,
            4 * p
        ))),
        "past the end"
    );
    assert!(
        invalid(unchanged_process("empty list", || u.create_list(&[]))),
        "empty list"
    );
    let limits = u.limits();
    assert!(
        limits.size_limit >= 64 << 20 && limits.list_limit >= 1,
        "{limits:?}"
    );
    let big = SealedMemfd::new("big", limits.size_limit + p).unwrap();
    assert!(
        invalid(unchanged_process("over the size limit", || u.create(
            &big,
            0,
            limits.size_limit + p
        ))),
        "over the size limit"
    );
    let many = vec![
        UdmabufRange {
            memfd: &m,
            offset: 0,
            size: p
        };
        limits.list_limit as usize + 1
    ];
    assert!(
        invalid(unchanged_process("over the list limit", || u.create_list(&many))),
        "over the list limit"
    );
    drop((m, big));
    assert_eq!(open_fds(), before, "fds leaked");
}

fn item(fd: i32, offset: u64, size: u64) -> usys::udmabuf_create_item {
    usys::udmabuf_create_item {
        memfd: fd as u32,
        __pad: 0,
        offset,
        size,
    }
}

/// The kernel's own answers (raw requests, bypassing the checks above).
#[test]
fn bad_input_gets_the_kernels_errno() {
    let u = udmabuf!();
    // "over the 64 MiB limit" below: pinned where the kernel's default is other (7.3).
    let _pinned = kernel_tests::udmabuf_limit::PinnedLimit::set(64);
    let fd = u.as_fd();
    let before = open_fds();
    let p = page() as u64;
    let m = memfd(4, 0);
    let mfd = m.as_fd().as_raw_fd();
    let one = |memfd: i32, offset: u64, size: u64| usys::udmabuf_create {
        memfd: memfd as u32,
        flags: usys::UDMABUF_FLAGS_CLOEXEC,
        offset,
        size,
    };
    let null = std::fs::File::open("/dev/null").unwrap();
    use std::os::unix::fs::OpenOptionsExt;
    let tmpfs_file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(rustix::fs::OFlags::TMPFILE.bits() as i32)
        .open("/tmp")
        .expect("O_TMPFILE in /tmp");
    tmpfs_file.set_len(4 * p).unwrap();
    let sealable = |seals: SealFlags| {
        let f = rustix::fs::memfd_create("s", rustix::fs::MemfdFlags::ALLOW_SEALING).unwrap();
        rustix::fs::ftruncate(&f, 4 * p).unwrap();
        rustix::fs::fcntl_add_seals(&f, seals).unwrap();
        f
    };
    let unsealed = sealable(SealFlags::empty());
    let write_sealed = sealable(SealFlags::SHRINK | SealFlags::WRITE);
    let future_sealed = sealable(SealFlags::SHRINK | SealFlags::FUTURE_WRITE);
    let no_sealing = rustix::fs::memfd_create("n", rustix::fs::MemfdFlags::empty()).unwrap();
    rustix::fs::ftruncate(&no_sealing, 4 * p).unwrap();
    let big = SealedMemfd::new("big", (64 << 20) + p).unwrap();
    let cases: Vec<(&str, usys::udmabuf_create, Errno)> = vec![
        (
            "not shmem (/dev/null)",
            one(null.as_raw_fd(), 0, p),
            Errno::BADFD,
        ),
        ("closed fd", one(closed_fd_number(), 0, p), Errno::BADFD),
        (
            "tmpfs file, not a memfd",
            one(tmpfs_file.as_raw_fd(), 0, p),
            Errno::INVAL,
        ),
        (
            "memfd without seals",
            one(unsealed.as_raw_fd(), 0, p),
            Errno::INVAL,
        ),
        (
            "memfd without sealing",
            one(no_sealing.as_raw_fd(), 0, p),
            Errno::INVAL,
        ),
        (
            "F_SEAL_WRITE",
            one(write_sealed.as_raw_fd(), 0, p),
            Errno::INVAL,
        ),
        ("misaligned offset", one(mfd, 100, p), Errno::INVAL),
        ("misaligned size", one(mfd, 0, p + 1), Errno::INVAL),
        ("past the end", one(mfd, 2 * p, 4 * p), Errno::INVAL),
        (
            "over the 64 MiB limit",
            one(big.as_fd().as_raw_fd(), 0, (64 << 20) + p),
            Errno::INVAL,
        ),
    ];
    let mut failures = Vec::new();
    for (what, arg, want) in cases {
        match unchanged_process(what, || udmabuf_create(fd, arg)) {
            Err(e) if e == want => {}
            other => failures.push(format!("{what}: expected {want:?}, got {other:?}")),
        }
    }
    let flags = usys::UDMABUF_FLAGS_CLOEXEC;
    let good = item(mfd, 0, p);
    let lists: Vec<(&str, u32, Vec<usys::udmabuf_create_item>, Errno)> = vec![
        ("over the list limit", 1025, vec![good; 1025], Errno::INVAL),
        (
            "one bad item among good",
            2,
            vec![good, item(mfd, 100, p)],
            Errno::INVAL,
        ),
        (
            "bad fd among good",
            2,
            vec![good, item(closed_fd_number(), 0, p)],
            Errno::BADFD,
        ),
    ];
    for (what, count, items, want) in lists {
        match unchanged_process(what, || udmabuf_create_list(fd, flags, count, &items)) {
            Err(e) if e == want => {}
            other => failures.push(format!("{what}: expected {want:?}, got {other:?}")),
        }
    }
    // Two fixes that reached the stable series, so the full release decides (uname):
    // - "udmabuf: add back sanity check" (05b252cccb2e, mainline 5.19; stable 5.4.202,
    //   5.10.127, 5.15.51, 5.18.8): a buffer of zero pages (zero size, empty list) is
    //   EINVAL; 5.15.0 creates it.
    // - "udmabuf: also check for F_SEAL_FUTURE_WRITE" (5f45b29398bb, mainline 6.13;
    //   stable 5.4.288, 5.10.232, 5.15.175, 6.1.122, 6.6.68, 6.12.7): a memfd sealed
    //   F_SEAL_FUTURE_WRITE is EINVAL like F_SEAL_WRITE; 5.15.0 takes it.
    let sanity = has_fix(
        (5, 19),
        &[(5, 4, 202), (5, 10, 127), (5, 15, 51), (5, 18, 8)],
    );
    let future_write = has_fix(
        (6, 13),
        &[
            (5, 4, 288),
            (5, 10, 232),
            (5, 15, 175),
            (6, 1, 122),
            (6, 6, 68),
            (6, 12, 7),
        ],
    );
    // Created, each is one more fd and one more dma-buf; refused, nothing.
    let counted = |what: &str, call: &dyn Fn() -> Result<OwnedFd, Errno>| {
        changes_process(
            what,
            |r| match r {
                Ok(_) => Delta::fds(1) + Delta::dma_bufs(1),
                Err(_) => Delta::NONE,
            },
            call,
        )
    };
    for (what, r, refused) in [
        (
            "zero size",
            counted("zero size", &|| udmabuf_create(fd, one(mfd, 0, 0))),
            sanity,
        ),
        (
            "empty list",
            counted("empty list", &|| udmabuf_create_list(fd, flags, 0, &[])),
            sanity,
        ),
        (
            "F_SEAL_FUTURE_WRITE",
            counted("F_SEAL_FUTURE_WRITE", &|| {
                udmabuf_create(fd, one(future_sealed.as_raw_fd(), 0, p))
            }),
            future_write,
        ),
    ] {
        match (r, refused) {
            (Err(Errno::INVAL), true) | (Ok(_), false) => {}
            (other, _) => failures.push(format!(
                "{what} on {:?}: expected {}, got {other:?}",
                release(),
                if refused { "EINVAL" } else { "a buffer" }
            )),
        }
    }
    // A zero-length item next to a good one: skipped (a page-by-page loop that runs zero
    // times) until Linux 6.11 ("udmabuf: pin the pages using memfd_pin_folios() API":
    // memfd_pin_folios refuses an empty range with EINVAL), refused from then on (6.12
    // here). The safe API refuses it everywhere.
    // Accepted, it is one more fd and one more dma-buf; refused, nothing.
    let zero_item = changes_process(
        "a zero-length item",
        |r| match r {
            Ok(_) => Delta::fds(1) + Delta::dma_bufs(1),
            Err(_) => Delta::NONE,
        },
        || udmabuf_create_list(fd, flags, 2, &[good, item(mfd, p, 0)]),
    );
    if kernel_version() < (6, 11) {
        let b = DmaBuf::from_fd(zero_item.expect("before 6.11 a zero-length item is skipped"));
        assert_eq!(b.size().unwrap(), p);
    } else {
        assert_eq!(
            zero_item.err(),
            Some(Errno::INVAL),
            "6.11+ refuses a zero-length item"
        );
    }
    assert!(failures.is_empty(), "{failures:#?}");
    drop((
        m,
        null,
        tmpfs_file,
        unsealed,
        write_sealed,
        future_sealed,
        no_sealing,
        big,
    ));
    assert_eq!(open_fds(), before, "fds leaked");
}
