//! `hmm::HostRegistration` with the `Udmabuf` and `Dmirror` backends in real guests: a
//! dma-buf over the memfd pages a shared mapping holds (found through `/proc/self/maps`,
//! the memfd given or opened through `/proc/self/map_files`), coherent both ways with the
//! range; the mirror device faulting a range in, reading and writing it while registered;
//! and the refusals, each with its exact error and no fd leaked.
//!
//! Kernels without udmabuf (stock-6.1) or test_hmm (the stock kernels) must answer
//! `Error::Unsupported` before the tests that need the device skip (`VM_MISSING_FEATURES`).

use drm_gem::{DmaBuf, Errno, Error};
use hmm::{Backend, HostRegistration, SealedMemfd};
use kernel_tests::mem::{Access, Region, dma_buf_bytes, page, tagged_memfd};
use kernel_tests::{expected, open_fds, skip, unchanged_process};
use rustix::fd::AsFd;
use rustix::fs::{MemfdFlags, SealFlags};

/// Pages of the test memfd.
const NPAGES: usize = 16;

/// Checks what a kernel lacking `feature` must answer to `r`, then returns from the test
/// with a loud skip; a kernel that has it goes on with the registration (or skips loudly,
/// failing in strict mode, when the device is missing anyway).
macro_rules! registered {
    ($feature:expr, $r:expr) => {{
        kernel_tests::fds_shared();
        let r = $r;
        if !expected($feature) {
            assert!(
                matches!(&r, Err(Error::Unsupported { .. })),
                "{} is missing here: expected Unsupported, got {r:?}",
                $feature
            );
            kernel_tests::require_feature!($feature);
        }
        match r {
            Ok(reg) => reg,
            Err(e @ Error::Unsupported { .. }) => skip!("{}: {e}", $feature),
            // Outside a guest: no privilege for /proc/self/map_files, say.
            Err(e) if !kernel_tests::in_guest() => skip!("{}: {e}", $feature),
            Err(e) => panic!("registration failed: {e}"),
        }
    }};
}

/// A sealed memfd of `NPAGES` pages, page `i` filled with byte `tag + i`.
fn memfd(tag: u8) -> SealedMemfd {
    tagged_memfd("register", NPAGES, tag)
}

fn write_dma_buf(buf: &DmaBuf, offset: usize, data: &[u8]) {
    let mut map = buf.map().expect("mmap of the dma-buf");
    let _cpu = buf
        .begin_cpu_access(false, true)
        .expect("DMA_BUF_IOCTL_SYNC");
    map.write_at(offset, data).unwrap();
}

fn assert_invalid<T: std::fmt::Debug>(r: drm_gem::Result<T>, needle: &str) {
    match r {
        Err(Error::InvalidArgument { what }) => {
            assert!(what.contains(needle), "expected {needle:?} in: {what}")
        }
        other => panic!("expected InvalidArgument({needle:?}), got {other:?}"),
    }
}

#[test]
fn udmabuf_registration_of_a_memfd_mapping_is_coherent_both_ways() {
    kernel_tests::fds_shared();
    let m = memfd(10);
    let mut region = Region::file(m.as_fd(), NPAGES, true, Access::ReadWrite);
    let before = open_fds();
    {
        // Pages 4..12 of the mapping, which are pages 4..12 of the file.
        let slice = &mut region.as_mut_slice()[4 * page()..12 * page()];
        let addr = slice.as_ptr() as usize;
        let reg = registered!("udmabuf", HostRegistration::memfd(slice, &m));
        assert_eq!(reg.backend(), Backend::Udmabuf);
        assert_eq!((reg.addr(), reg.len()), (addr, 8 * page()));
        assert!(reg.page_frames().is_none() && reg.mirror().is_none());
        let buf = reg.dma_buf().expect("a Udmabuf registration has a dma-buf");
        assert_eq!(buf.size().unwrap(), 8 * page() as u64);
        assert_eq!(buf.info().unwrap().exp_name.as_deref(), Some("udmabuf"));
        assert!(
            rustix::io::fcntl_getfd(buf)
                .unwrap()
                .contains(rustix::io::FdFlags::CLOEXEC)
        );
        let v = dma_buf_bytes(buf);
        for i in 0..8 {
            let want = 10 + 4 + i as u8;
            assert!(
                v[i * page()..(i + 1) * page()].iter().all(|&b| b == want),
                "dma-buf page {i} is not file page {}",
                i + 4
            );
        }
        // The device's view written: pages 1 and 7 of the dma-buf.
        write_dma_buf(buf, page(), &vec![0xa1; page()]);
        write_dma_buf(buf, 7 * page(), &vec![0xa7; page()]);
        // While registered, a write through the memfd shows in the dma-buf.
        m.write_at(6 * page() as u64, &vec![0x66; page()]).unwrap();
        let v = dma_buf_bytes(buf);
        assert!(v[2 * page()..3 * page()].iter().all(|&b| b == 0x66));
    }
    assert_eq!(open_fds(), before, "the registration's dma-buf fd leaked");
    // After the registration: the range (and the file) hold what went through the dma-buf.
    let cpu = region.copy(0, NPAGES);
    for (i, want) in [
        (5, 0xa1u8),
        (11, 0xa7),
        (6, 0x66),
        (4, 14),
        (12, 22),
        (3, 13),
    ] {
        assert!(
            cpu[i * page()..(i + 1) * page()].iter().all(|&b| b == want),
            "page {i} of the mapping: want {want:#x}, got {:#x}",
            cpu[i * page()]
        );
    }
    let mut back = vec![0u8; page()];
    m.read_at(11 * page() as u64, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 0xa7));
}

#[test]
fn udmabuf_registration_finds_the_memfd_through_map_files() {
    kernel_tests::fds_shared();
    let m = memfd(40);
    let mut region = Region::file(m.as_fd(), NPAGES, true, Access::ReadWrite);
    // The memfd itself is closed: the mapping is all that is left of it.
    drop(m);
    let before = open_fds();
    {
        let slice = &mut region.as_mut_slice()[2 * page()..];
        let reg = registered!("udmabuf", HostRegistration::new(slice, Backend::Udmabuf));
        assert_eq!(reg.len(), (NPAGES - 2) * page());
        let buf = reg.dma_buf().unwrap();
        let v = dma_buf_bytes(buf);
        assert!(
            v[..page()].iter().all(|&b| b == 42),
            "first page is file page 2"
        );
        write_dma_buf(buf, 0, &vec![0x5a; page()]);
    }
    assert_eq!(open_fds(), before, "the map_files fd or the dma-buf leaked");
    assert!(region.copy(2, 1).iter().all(|&b| b == 0x5a));
    assert!(region.copy(3, 1).iter().all(|&b| b == 43));
}

#[test]
fn udmabuf_registration_refuses_what_is_no_shared_memfd_mapping() {
    let before = open_fds();
    // Anonymous memory.
    let mut anon = Region::anon(4);
    assert_invalid(
        unchanged_process("backed by anonymous memory", || {
            HostRegistration::new(anon.as_mut_slice(), Backend::Udmabuf)
        }),
        "backed by anonymous memory",
    );
    // A file that is not a memfd (tmpfs: shmem pages, but no memfd).
    let path = format!("/tmp/host-register-{}", std::process::id());
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    file.set_len(4 * page() as u64).unwrap();
    let mut plain = Region::file(file.as_fd(), 4, true, Access::ReadWrite);
    assert_invalid(
        unchanged_process(&format!("backed by {path}"), || {
            HostRegistration::new(plain.as_mut_slice(), Backend::Udmabuf)
        }),
        &format!("backed by {path}"),
    );
    drop(plain);
    drop(file);
    std::fs::remove_file(&path).unwrap();
    // A private (copy-on-write) mapping of a memfd.
    let m = memfd(0);
    let mut private = Region::file(m.as_fd(), NPAGES, false, Access::ReadWrite);
    assert_invalid(
        unchanged_process("private (copy-on-write) mapping", || {
            HostRegistration::memfd(private.as_mut_slice(), &m)
        }),
        "private (copy-on-write) mapping",
    );
    // Not whole pages, and not the memfd given.
    let mut shared = Region::file(m.as_fd(), NPAGES, true, Access::ReadWrite);
    assert_invalid(
        unchanged_process("whole pages", || {
            HostRegistration::memfd(&mut shared.as_mut_slice()[100..100 + page()], &m)
        }),
        "whole pages",
    );
    assert_invalid(
        unchanged_process("whole pages", || {
            HostRegistration::memfd(&mut shared.as_mut_slice()[..page() + 1], &m)
        }),
        "whole pages",
    );
    let other = memfd(1);
    assert_invalid(
        unchanged_process("not the memfd given", || {
            HostRegistration::memfd(shared.as_mut_slice(), &other)
        }),
        "not the memfd given",
    );
    assert_invalid(
        unchanged_process("cannot register 0 bytes", || {
            HostRegistration::memfd(&mut [], &m)
        }),
        "cannot register 0 bytes",
    );
    drop((shared, private, other, m));
    assert_eq!(open_fds(), before, "a refusal leaked an fd");
}

#[test]
fn udmabuf_registration_checks_the_seals_and_the_size_limit() {
    let before = open_fds();
    // A memfd without F_SEAL_SHRINK, found through map_files.
    let raw = rustix::fs::memfd_create("unsealed", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
        .unwrap();
    rustix::fs::ftruncate(&raw, 4 * page() as u64).unwrap();
    let mut r = Region::file(raw.as_fd(), 4, true, Access::ReadWrite);
    assert_invalid(
        unchanged_process("lacks F_SEAL_SHRINK", || {
            HostRegistration::new(r.as_mut_slice(), Backend::Udmabuf)
        }),
        "lacks F_SEAL_SHRINK",
    );
    // F_SEAL_FUTURE_WRITE can be added while a writable mapping exists (F_SEAL_WRITE
    // cannot: EBUSY); udmabuf would refuse the file, and so does the check before it.
    assert_eq!(
        rustix::fs::fcntl_add_seals(&raw, SealFlags::WRITE),
        Err(Errno::BUSY)
    );
    rustix::fs::fcntl_add_seals(&raw, SealFlags::SHRINK | SealFlags::FUTURE_WRITE).unwrap();
    assert_invalid(
        unchanged_process("F_SEAL_FUTURE_WRITE", || {
            HostRegistration::new(r.as_mut_slice(), Backend::Udmabuf)
        }),
        "F_SEAL_FUTURE_WRITE",
    );
    drop((r, raw));
    assert_eq!(open_fds(), before, "a refusal leaked an fd");
    // One page over the driver's size limit (the pages are never touched), pinned at
    // 64 MiB where the kernel's default is out of reach (7.3: INT_MAX MiB).
    let _pinned = kernel_tests::udmabuf_limit::PinnedLimit::set(64);
    let limit = 64usize << 20;
    let big = SealedMemfd::new("big", (limit + page()) as u64).unwrap();
    let mut whole = Region::file(big.as_fd(), limit / page() + 1, true, Access::ReadWrite);
    let r = unchanged_process("over the driver's size limit", || {
        HostRegistration::memfd(whole.as_mut_slice(), &big)
    });
    let r = match r {
        Err(Error::Unsupported { .. }) if !expected("udmabuf") => return,
        Err(e @ Error::Unsupported { .. }) => skip!("udmabuf: {e}"),
        r => r,
    };
    assert_invalid(r, "over the driver's size limit");
    drop((whole, big));
    assert_eq!(open_fds(), before, "a refusal leaked an fd");
}

/// The word pattern of the mirror tests.
fn pattern(i: usize) -> u32 {
    (i as u32).wrapping_mul(2_654_435_761)
}

#[test]
fn dmirror_registration_faults_the_range_in_and_the_device_writes_it() {
    kernel_tests::fds_shared();
    let n = 64;
    let mut region = Region::anon(n);
    region.fill(0, n, pattern);
    let before = open_fds();
    {
        let mut reg = registered!(
            "test_hmm",
            HostRegistration::new(region.as_mut_slice(), Backend::Dmirror)
        );
        assert_eq!(reg.backend(), Backend::Dmirror);
        assert!(reg.dma_buf().is_none());
        let first = reg.mirror_report().unwrap();
        assert_eq!(first.cpages, n as u64);
        assert_eq!(
            first.faults, 1,
            "one round of device faults for a fresh range"
        );
        // Reading again copies the range; freeing the registering read's bounce buffer
        // (an munmap) may have invalidated the device's entries (it does on every kernel
        // here), so this read may fault once. Then the device's page table holds the
        // range, and the next read faults nothing.
        let mut out = vec![0u8; n * page()];
        let again = reg.device_read(&mut out).expect("HMM_DMIRROR_READ");
        assert_eq!(again.cpages, n as u64);
        assert!(again.faults <= 1, "{again:?}");
        let third = reg.device_read(&mut out).expect("HMM_DMIRROR_READ");
        assert_eq!((third.cpages, third.faults), (n as u64, 0));
        let words: Vec<u32> = out
            .chunks_exact(4)
            .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert!(words.iter().enumerate().all(|(i, &w)| w == pattern(i)));
        // The device writes the range: the inverse pattern.
        let data: Vec<u8> = (0..n * page() / 4)
            .flat_map(|i| (!pattern(i)).to_ne_bytes())
            .collect();
        let w = reg.device_write(&data).expect("HMM_DMIRROR_WRITE");
        assert_eq!(w.cpages, n as u64);
        // Wrong buffer lengths are refused before the kernel is asked.
        assert_invalid(
            unchanged_process("bytes for a range of", || {
                reg.device_read(&mut out[..page()])
            }),
            "bytes for a range of",
        );
        assert_invalid(
            unchanged_process("bytes for a range of", || reg.device_write(&data[..page()])),
            "bytes for a range of",
        );
    }
    assert_eq!(open_fds(), before, "the mirror file was not closed on drop");
    assert_eq!(region.first_mismatch(0, n, |i| !pattern(i)), None);
}

#[test]
fn dmirror_registration_refusals() {
    let before = open_fds();
    // Not whole pages (checked before the device is opened, on every kernel).
    let mut anon = Region::anon(4);
    assert_invalid(
        unchanged_process("not aligned to the page size", || {
            HostRegistration::new(&mut anon.as_mut_slice()[8..8 + page()], Backend::Dmirror)
        }),
        "not aligned to the page size",
    );
    assert_invalid(
        unchanged_process("not a whole number of pages", || {
            HostRegistration::new(&mut anon.as_mut_slice()[..page() + 8], Backend::Dmirror)
        }),
        "not a whole number of pages",
    );
    assert_invalid(
        unchanged_process("cannot register 0 bytes", || {
            HostRegistration::new(&mut [], Backend::Dmirror)
        }),
        "cannot register 0 bytes",
    );
    assert_eq!(open_fds(), before, "a refusal leaked an fd");
    // device_read and device_write belong to Dmirror registrations.
    let mut pinned = Region::anon(2);
    let r = HostRegistration::new(pinned.as_mut_slice(), Backend::Pinned);
    let mut reg = match r {
        Ok(reg) => reg,
        Err(e) => skip!("mlock of two pages: {e}"),
    };
    let mut out = vec![0u8; 2 * page()];
    assert_invalid(
        unchanged_process("needs a Dmirror registration", || reg.device_read(&mut out)),
        "needs a Dmirror registration",
    );
    assert_invalid(
        unchanged_process("needs a Dmirror registration", || reg.device_write(&out)),
        "needs a Dmirror registration",
    );
    drop(reg);
    // Where test_hmm is missing the registration says so.
    let r = HostRegistration::new(anon.as_mut_slice(), Backend::Dmirror);
    if expected("test_hmm") && kernel_tests::in_guest() {
        assert_eq!(r.unwrap().mirror_report().unwrap().cpages, 4);
    } else if !expected("test_hmm") {
        match r {
            Err(Error::Unsupported { reason, .. }) => {
                assert!(reason.contains("/dev/hmm_dmirror0"), "{reason}")
            }
            other => panic!("expected Unsupported without test_hmm, got {other:?}"),
        }
    }
    assert_eq!(open_fds(), before, "a registration leaked an fd");
}
