//! The test_hmm mirror device through `hmm::Dmirror`, re-creating in our own tests the
//! behaviours the kernel's hmm selftest checks: anonymous reads and writes with each
//! protection, children after fork, shared and file-backed mappings, huge pages, migration
//! to the device and back, teardown while mirrored, two devices, exclusive access, and the
//! kernel's exact answers to bad input (per kernel where they differ).

use drm_gem::{Errno, Error};
use hmm::{Dmirror, HmmLayout, MirrorProt, PageKind, PageRange, PageState};
use kernel_tests::mem::{Access, Region, in_child, page};
use kernel_tests::{
    Delta, changes_process, kernel_version, open_fds, require_feature, skip, unchanged_process,
};

/// Pages in the ordinary test buffer (the selftest uses 4 MiB; 1 MiB keeps TCG quick).
const NPAGES: usize = 256;

macro_rules! mirror {
    ($unit:expr) => {{
        require_feature!("test_hmm");
        kernel_tests::fds_shared();
        match Dmirror::open($unit) {
            Ok(d) => d,
            Err(e) => skip!("/dev/hmm_dmirror{}: {e}", $unit),
        }
    }};
}

fn pattern(i: usize) -> u32 {
    i as u32
}

fn negated(i: usize) -> u32 {
    (i as u32).wrapping_neg()
}

fn words(buf: &[u8], i: usize) -> u32 {
    u32::from_ne_bytes(buf[i * 4..i * 4 + 4].try_into().unwrap())
}

fn pattern_bytes(n_pages: usize, f: impl Fn(usize) -> u32) -> Vec<u8> {
    (0..n_pages * page() / 4)
        .flat_map(|i| f(i).to_ne_bytes())
        .collect()
}

fn errno_of<T: std::fmt::Debug>(r: drm_gem::Result<T>) -> Errno {
    match r {
        Err(Error::Ioctl { errno, .. }) => errno,
        other => panic!("expected an ioctl error, got {other:?}"),
    }
}

fn is_6x() -> bool {
    kernel_version().0 >= 6
}

fn mapped(kind: PageKind, prot: MirrorProt) -> PageState {
    PageState::Mapped { kind, prot }
}

#[test]
fn layout_is_detected_and_matches_the_kernel() {
    let d = mirror!(0);
    let (major, minor) = kernel_version();
    let want = match (major, minor) {
        (5, 10..=13) => HmmLayout::V5_10,
        (5, _) => HmmLayout::V5_14,
        _ => HmmLayout::V6_0,
    };
    assert_eq!(d.layout(), want, "Linux {major}.{minor}");
    // Detecting again on the same file agrees, and a file that is not a mirror device is
    // refused before any request is sent to it.
    assert_eq!(
        HmmLayout::detect(rustix::fd::AsFd::as_fd(&d)).unwrap(),
        want
    );
    let null = std::fs::File::open("/dev/null").unwrap();
    let before = open_fds();
    assert!(matches!(
        unchanged_process("detect on /dev/null", || HmmLayout::detect(
            rustix::fd::AsFd::as_fd(&null)
        )),
        Err(Error::InvalidArgument { .. })
    ));
    let dup = rustix::io::dup(&null).unwrap();
    // The refused fd is closed: one fd fewer, nothing else.
    assert!(matches!(
        changes_process(
            "adopt /dev/null",
            |_| Delta::fds(-1),
            || Dmirror::from_fd(dup)
        ),
        Err(Error::InvalidArgument { .. })
    ));
    assert_eq!(open_fds(), before, "a refused fd was leaked");
}

#[test]
fn anon_read_sees_memory_and_zero_pages() {
    let d = mirror!(0);
    let mut r = Region::anon(NPAGES);
    // Pages 0 and 1 stay zero: page 0 unpopulated, page 1 the shared zero page.
    r.fill(2, NPAGES - 2, pattern);
    r.protect(0, NPAGES, Access::Read);
    assert_eq!(r.u32_at(page() / 4), 0);
    let mut out = vec![0xaau8; r.len()];
    let rep = d.read(r.range(), &mut out).expect("HMM_DMIRROR_READ");
    assert_eq!(rep.cpages, NPAGES as u64);
    assert_eq!(rep.faults, 1);
    let per = page() / 4;
    for i in 0..NPAGES * per {
        let want = if i < 2 * per { 0 } else { pattern(i) };
        assert_eq!(words(&out, i), want, "word {i}");
    }
    // A second read finds every page in the device's page table: no fault.
    let rep = d.read(r.range(), &mut out).unwrap();
    assert_eq!((rep.cpages, rep.faults), (NPAGES as u64, 0));
}

#[test]
fn anon_read_of_prot_none_is_efault() {
    let d = mirror!(0);
    let mut r = Region::anon(NPAGES);
    r.fill(0, NPAGES, pattern);
    r.protect(0, NPAGES, Access::None);
    let mut out = pattern_bytes(NPAGES, negated);
    let res = unchanged_process("read of PROT_NONE", || d.read(r.range(), &mut out));
    assert_eq!(errno_of(res), Errno::FAULT);
    // Neither the memory nor the device's copy changed.
    r.protect(0, NPAGES, Access::Read);
    assert_eq!(r.first_mismatch(0, NPAGES, pattern), None);
    assert_eq!(out, pattern_bytes(NPAGES, negated));
}

#[test]
fn anon_write_is_seen_by_the_cpu() {
    let d = mirror!(0);
    let mut r = Region::anon(NPAGES);
    let data = pattern_bytes(NPAGES, pattern);
    let rep = d
        .write_into(r.as_mut_slice(), &data)
        .expect("HMM_DMIRROR_WRITE");
    assert_eq!((rep.cpages, rep.faults), (NPAGES as u64, 1));
    assert_eq!(r.first_mismatch(0, NPAGES, pattern), None);
}

#[test]
fn write_to_read_only_memory_is_eperm_until_made_writable() {
    let d = mirror!(0);
    let mut r = Region::anon_with(NPAGES, Access::Read);
    // Reading one page maps the zero page.
    let mut one = vec![0u8; page()];
    let rep = d.read(r.pages(0, 1), &mut one).unwrap();
    assert_eq!((rep.cpages, rep.faults), (1, 1));
    let data = pattern_bytes(NPAGES, pattern);
    let res = unchanged_process("write to read-only", || {
        r.device_write(&d, 0, NPAGES, &data)
    });
    assert_eq!(errno_of(res), Errno::PERM);
    assert_eq!(
        r.first_mismatch(0, NPAGES, |_| 0),
        None,
        "nothing was written"
    );
    r.protect(0, NPAGES, Access::ReadWrite);
    let rep = r.device_write(&d, 0, NPAGES, &data).unwrap();
    assert_eq!((rep.cpages, rep.faults), (NPAGES as u64, 1));
    assert_eq!(r.first_mismatch(0, NPAGES, pattern), None);
}

#[test]
fn child_after_fork_writes_its_own_copy_of_a_private_mapping() {
    let _ = mirror!(0);
    let r = Region::anon(NPAGES);
    r.fill(0, NPAGES, pattern);
    let status = in_child(|| {
        // The parent's mirror mirrors the parent: the child needs its own.
        let Ok(d) = Dmirror::open(0) else {
            return false;
        };
        let data = pattern_bytes(NPAGES, negated);
        let Ok(rep) = r.device_write(&d, 0, NPAGES, &data) else {
            return false;
        };
        rep.cpages == NPAGES as u64
            && rep.faults == 1
            && r.first_mismatch(0, NPAGES, negated).is_none()
    });
    assert_eq!(status, 0, "the child's device write failed");
    assert_eq!(
        r.first_mismatch(0, NPAGES, pattern),
        None,
        "copy-on-write: the parent's pages must not change"
    );
}

#[test]
fn child_after_fork_writes_through_a_shared_mapping() {
    let _ = mirror!(0);
    let r = Region::anon_shared(NPAGES);
    r.fill(0, NPAGES, pattern);
    let status = in_child(|| {
        let Ok(d) = Dmirror::open(0) else {
            return false;
        };
        let data = pattern_bytes(NPAGES, negated);
        r.device_write(&d, 0, NPAGES, &data)
            .is_ok_and(|rep| rep.cpages == NPAGES as u64)
    });
    assert_eq!(status, 0, "the child's device write failed");
    assert_eq!(
        r.first_mismatch(0, NPAGES, negated),
        None,
        "a shared mapping shows the child's device write"
    );
}

fn tmpfile(len: usize) -> std::fs::File {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc_o_tmpfile())
        .open("/tmp")
        .expect("O_TMPFILE in /tmp");
    f.set_len(len as u64).unwrap();
    f
}

fn libc_o_tmpfile() -> i32 {
    rustix::fs::OFlags::TMPFILE.bits() as i32
}

#[test]
fn file_backed_mappings_read_and_write() {
    kernel_tests::fds_shared();
    use std::os::unix::fs::FileExt;
    let d = mirror!(0);
    let f = tmpfile(NPAGES * page());
    f.write_all_at(&pattern_bytes(NPAGES, pattern), 0).unwrap();
    {
        let r = Region::file(rustix::fd::AsFd::as_fd(&f), NPAGES, true, Access::Read);
        let mut out = vec![0u8; r.len()];
        let rep = d.read(r.range(), &mut out).expect("read of a file mapping");
        assert_eq!((rep.cpages, rep.faults), (NPAGES as u64, 1));
        assert_eq!(out, pattern_bytes(NPAGES, pattern));
    }
    let mut r = Region::file(rustix::fd::AsFd::as_fd(&f), NPAGES, true, Access::ReadWrite);
    let rep = d
        .write_into(r.as_mut_slice(), &pattern_bytes(NPAGES, negated))
        .expect("write of a file mapping");
    assert_eq!(rep.cpages, NPAGES as u64);
    let mut back = vec![0u8; NPAGES * page()];
    f.read_exact_at(&mut back, 0).unwrap();
    assert_eq!(
        back,
        pattern_bytes(NPAGES, negated),
        "the file holds the device write"
    );
}

#[test]
fn transparent_huge_page_is_written_and_snapshotted_as_pmd() {
    let d = mirror!(0);
    const TWO_MEG: usize = 2 << 20;
    let mut r = Region::anon_aligned(TWO_MEG, true);
    let n = r.npages();
    let rep = d
        .write_into(r.as_mut_slice(), &pattern_bytes(n, pattern))
        .expect("write into a huge page");
    assert_eq!((rep.cpages, rep.faults), (n as u64, 1));
    assert_eq!(r.first_mismatch(0, n, pattern), None);
    let snap = d.snapshot(r.range()).unwrap();
    if snap[0] != mapped(PageKind::System, MirrorProt::WRITE | MirrorProt::PMD) {
        skip!(
            "no transparent huge page could be had (first page: {:?})",
            snap[0]
        );
    }
    assert!(snap.iter().all(|s| *s == snap[0]), "{snap:?}");
}

#[test]
fn hugetlbfs_page_is_written_and_snapshotted_as_one() {
    let d = mirror!(0);
    const TWO_MEG: usize = 2 << 20;
    let Some(mut r) = Region::hugetlb(TWO_MEG) else {
        skip!("no hugetlbfs page could be mapped (vm.nr_hugepages)");
    };
    let n = r.npages();
    let rep = d
        .write_into(r.as_mut_slice(), &pattern_bytes(n, pattern))
        .expect("write into a hugetlbfs page");
    assert_eq!((rep.cpages, rep.faults), (n as u64, 1));
    assert_eq!(r.first_mismatch(0, n, pattern), None);
    let snap = d.snapshot(r.range()).unwrap();
    assert!(
        snap.iter()
            .all(|s| *s == mapped(PageKind::System, MirrorProt::WRITE | MirrorProt::PMD)),
        "{:?}",
        &snap[..4]
    );
    r.protect(0, n, Access::Read);
    let snap = d.snapshot(r.range()).unwrap();
    assert!(
        snap.iter()
            .all(|s| *s == mapped(PageKind::System, MirrorProt::READ | MirrorProt::PMD)),
        "{:?}",
        &snap[..4]
    );
}

#[test]
fn migrate_to_device_and_fault_back() {
    let d = mirror!(0);
    let mut r = Region::anon(NPAGES);
    r.advise(false);
    r.fill(0, NPAGES, pattern);
    let mut out = vec![0u8; r.len()];
    let rep = d.migrate_to_device(r.range(), &mut out).expect("migrate");
    assert_eq!(rep.cpages, NPAGES as u64);
    assert_eq!(out, pattern_bytes(NPAGES, pattern));
    let snap = d.snapshot(r.range()).unwrap();
    let on_dev = mapped(PageKind::DevicePrivateLocal, MirrorProt::WRITE);
    assert!(snap.iter().all(|s| *s == on_dev), "{:?}", &snap[..2]);
    // The CPU faults the first half back; migrating again moves the mix.
    assert_eq!(r.first_mismatch(0, NPAGES / 2, pattern), None);
    let snap = d.snapshot(r.range()).unwrap();
    assert!(snap[..NPAGES / 2].iter().all(|s| *s != on_dev));
    assert!(snap[NPAGES / 2..].iter().all(|s| *s == on_dev));
    let rep = d.migrate_to_device(r.range(), &mut out).unwrap();
    assert_eq!(rep.cpages, NPAGES as u64);
    assert_eq!(out, pattern_bytes(NPAGES, pattern));
    assert_eq!(r.first_mismatch(0, NPAGES, pattern), None);
    r.protect(0, NPAGES, Access::ReadWrite);
}

#[test]
fn migrate_to_system_explicitly() {
    let d = mirror!(0);
    let r = Region::anon(NPAGES);
    r.advise(false);
    r.fill(0, NPAGES, pattern);
    let mut out = vec![0u8; r.len()];
    d.migrate_to_device(r.range(), &mut out).unwrap();
    let res = unchanged_process("MIGRATE_TO_SYS", || d.migrate_to_system(r.range()));
    match res {
        Ok(rep) => {
            assert!(is_6x(), "MIGRATE_TO_SYS worked on a 5.x kernel");
            assert_eq!(rep.cpages, NPAGES as u64);
            let snap = d.snapshot(r.range()).unwrap();
            assert!(
                snap.iter().all(|s| matches!(
                    s,
                    PageState::Mapped {
                        kind: PageKind::System,
                        ..
                    }
                )),
                "{:?}",
                &snap[..2]
            );
        }
        Err(Error::Unsupported { .. }) => assert!(!is_6x(), "6.x must have MIGRATE_TO_SYS"),
        Err(e) => panic!("{e}"),
    }
    assert_eq!(r.first_mismatch(0, NPAGES, pattern), None);
}

#[test]
fn migrate_many_pages_repeatedly() {
    let d = mirror!(0);
    // 16 MiB in one request, then 8 rounds over a smaller buffer.
    let big = 4096;
    let r = Region::anon(big);
    r.fill(0, big, pattern);
    let mut out = vec![0u8; r.len()];
    let rep = d.migrate_to_device(r.range(), &mut out).unwrap();
    assert_eq!(rep.cpages, big as u64);
    assert_eq!(r.first_mismatch(0, big, pattern), None);
    drop(r);
    for round in 0..8u32 {
        let r = Region::anon(NPAGES);
        r.fill(0, NPAGES, |i| pattern(i) ^ round);
        let mut out = vec![0u8; r.len()];
        let rep = d.migrate_to_device(r.range(), &mut out).unwrap();
        assert_eq!(rep.cpages, NPAGES as u64, "round {round}");
        assert_eq!(out, pattern_bytes(NPAGES, |i| pattern(i) ^ round));
        assert_eq!(r.first_mismatch(0, NPAGES, |i| pattern(i) ^ round), None);
    }
}

#[test]
fn shared_anonymous_memory_cannot_migrate() {
    let d = mirror!(0);
    let r = Region::anon_shared(NPAGES);
    let mut out = vec![0u8; r.len()];
    let res = unchanged_process("migrate of shared memory", || {
        d.migrate_to_device(r.range(), &mut out)
    });
    assert_eq!(errno_of(res), Errno::NOENT);
}

#[test]
fn snapshot_decodes_every_kind_of_page() {
    let d0 = mirror!(0);
    let d1 = mirror!(1);
    let mut r = Region::anon_with(7, Access::None);
    r.unmap_page(1);
    r.protect(2, 1, Access::Read);
    assert_eq!(r.u32_at(2 * page() / 4), 0); // zero page
    r.protect(3, 1, Access::ReadWrite);
    r.set_u32(3 * page() / 4, 3);
    r.protect(3, 1, Access::Read);
    r.protect(4, 3, Access::ReadWrite);
    r.set_u32(4 * page() / 4, 3);
    let mut one = vec![0u8; page()];
    assert_eq!(
        d0.migrate_to_device(r.pages(5, 1), &mut one)
            .unwrap()
            .cpages,
        1
    );
    assert_eq!(
        d1.migrate_to_device(r.pages(6, 1), &mut one)
            .unwrap()
            .cpages,
        1
    );
    let snap = d0.snapshot(r.range()).expect("SNAPSHOT");
    assert_eq!(
        snap,
        vec![
            PageState::Error,
            PageState::Error,
            mapped(PageKind::Zero, MirrorProt::READ),
            mapped(PageKind::System, MirrorProt::READ),
            mapped(PageKind::System, MirrorProt::WRITE),
            mapped(PageKind::DevicePrivateLocal, MirrorProt::WRITE),
            PageState::None,
        ]
    );
}

#[test]
fn another_devices_pages_are_enoent_and_still_readable() {
    let d0 = mirror!(0);
    let d1 = mirror!(1);
    let mut r = Region::anon(6);
    r.advise(false);
    r.fill(0, 6, pattern);
    r.protect(0, 6, Access::Read);
    let mut out = vec![0u8; r.len()];
    for d in [&d0, &d1] {
        let rep = d.read(r.range(), &mut out).unwrap();
        assert_eq!((rep.cpages, rep.faults), (6, 1));
        assert_eq!(out, pattern_bytes(6, pattern));
    }
    // Device 1 takes the pages; device 0 cannot migrate them.
    assert_eq!(d1.migrate_to_device(r.range(), &mut out).unwrap().cpages, 6);
    let mut one = vec![0u8; page()];
    let res = unchanged_process("migrate of another device's page", || {
        d0.migrate_to_device(r.pages(5, 1), &mut one)
    });
    assert_eq!(errno_of(res), Errno::NOENT);
    // Since 6.0 device 0 can still read them (the read faults them back to system memory
    // through device 1); 5.10 cannot fault another device's private pages for a device.
    let res = unchanged_process("read of another device's pages", || {
        d0.read(r.range(), &mut out)
    });
    if is_6x() {
        let rep = res.expect("6.x reads another device's pages");
        assert_eq!((rep.cpages, rep.faults), (6, 1));
        assert_eq!(out, pattern_bytes(6, pattern));
    } else {
        assert_eq!(errno_of(res), Errno::FAULT, "5.10");
    }
    // The CPU can always read them.
    assert_eq!(r.first_mismatch(0, 6, pattern), None);
}

#[test]
fn teardown_while_the_device_reads() {
    let d = mirror!(0);
    for round in 0..16u32 {
        let mut r = Region::anon(NPAGES);
        r.fill(0, NPAGES, |i| pattern(i) + round);
        let mut out = vec![0u8; r.len()];
        let res = r.unmap_pages_while(NPAGES / 2, NPAGES / 2, |r| d.read(r.range(), &mut out));
        match res {
            Ok(rep) => {
                assert_eq!((rep.cpages, rep.faults), (NPAGES as u64, 1));
                assert_eq!(out, pattern_bytes(NPAGES, |i| pattern(i) + round));
            }
            Err(e) => assert_eq!(e.errno(), Some(Errno::FAULT), "round {round}: {e}"),
        }
    }
}

#[test]
fn closing_the_device_returns_migrated_pages() {
    let d = mirror!(0);
    let r = Region::anon(NPAGES);
    r.advise(false);
    r.fill(0, NPAGES, pattern);
    let mut out = vec![0u8; r.len()];
    assert_eq!(
        d.migrate_to_device(r.range(), &mut out).unwrap().cpages,
        NPAGES as u64
    );
    let before = open_fds();
    drop(d);
    assert_eq!(open_fds() + 1, before);
    assert_eq!(r.first_mismatch(0, NPAGES, pattern), None);
}

#[test]
fn release_moves_device_pages_back() {
    let d = mirror!(0);
    let r = Region::anon(NPAGES);
    r.advise(false);
    r.fill(0, NPAGES, pattern);
    let mut out = vec![0u8; r.len()];
    d.migrate_to_device(r.range(), &mut out).unwrap();
    match unchanged_process("RELEASE", || d.release()) {
        Ok(()) => {
            assert!(is_6x(), "RELEASE worked on a 5.x kernel");
            let snap = d.snapshot(r.range()).unwrap();
            assert!(
                !snap.iter().any(|s| matches!(
                    s,
                    PageState::Mapped {
                        kind: PageKind::DevicePrivateLocal,
                        ..
                    }
                )),
                "{:?}",
                &snap[..2]
            );
        }
        Err(Error::Unsupported { .. }) => assert!(!is_6x(), "6.1+ must have RELEASE"),
        Err(e) => panic!("{e}"),
    }
    assert_eq!(r.first_mismatch(0, NPAGES, pattern), None);
}

/// Exclusive access needs 5.14; on these guests, 6.1 and 6.12.
macro_rules! needs_exclusive {
    ($d:expr) => {
        if $d.layout() == HmmLayout::V5_10 {
            let mut out = vec![0u8; page()];
            let r = Region::anon(1);
            assert!(matches!(
                unchanged_process("exclusive on 5.10", || $d
                    .make_exclusive(r.range(), &mut out)),
                Err(Error::Unsupported { .. })
            ));
            assert!(matches!(
                unchanged_process("check exclusive on 5.10", || $d.check_exclusive(r.range())),
                Err(Error::Unsupported { .. })
            ));
            return;
        }
    };
}

#[test]
fn exclusive_access_on_small_pages_until_the_cpu_touches_them() {
    let d = mirror!(0);
    needs_exclusive!(d);
    let r = Region::anon_aligned(NPAGES * page(), false);
    r.fill(0, NPAGES, pattern);
    let mut out = vec![0u8; r.len()];
    let rep = d
        .make_exclusive(r.range(), &mut out)
        .expect("HMM_DMIRROR_EXCLUSIVE");
    assert_eq!(rep.cpages, NPAGES as u64);
    assert_eq!(out, pattern_bytes(NPAGES, pattern));
    assert!(
        d.check_exclusive(r.range()).unwrap(),
        "the device holds the pages"
    );
    // The CPU takes them back by touching them.
    for i in 0..NPAGES * page() / 4 {
        assert_eq!(r.u32_at(i), pattern(i));
        r.set_u32(i, pattern(i) + 1);
    }
    assert_eq!(r.first_mismatch(0, NPAGES, |i| pattern(i) + 1), None);
    assert!(!d.check_exclusive(r.range()).unwrap(), "the CPU revoked it");
}

#[test]
fn exclusive_then_read_only_write_is_eperm() {
    let d = mirror!(0);
    needs_exclusive!(d);
    let mut r = Region::anon_aligned(NPAGES * page(), false);
    r.fill(0, NPAGES, pattern);
    let mut out = vec![0u8; r.len()];
    d.make_exclusive(r.range(), &mut out).unwrap();
    r.protect(0, NPAGES, Access::Read);
    let data = pattern_bytes(NPAGES, negated);
    let res = unchanged_process("write to read-only exclusive pages", || {
        r.device_write(&d, 0, NPAGES, &data)
    });
    assert_eq!(errno_of(res), Errno::PERM);
    assert_eq!(r.first_mismatch(0, NPAGES, pattern), None);
}

#[test]
fn exclusive_then_fork_copies_on_write_in_both() {
    let d = mirror!(0);
    needs_exclusive!(d);
    let r = Region::anon_aligned(NPAGES * page(), false);
    r.fill(0, NPAGES, pattern);
    let mut out = vec![0u8; r.len()];
    d.make_exclusive(r.range(), &mut out).unwrap();
    let bump = |r: &Region| {
        for i in 0..NPAGES * page() / 4 {
            if r.u32_at(i) != pattern(i) {
                return false;
            }
            r.set_u32(i, pattern(i) + 1);
        }
        r.first_mismatch(0, NPAGES, |i| pattern(i) + 1).is_none()
    };
    let status = in_child(|| bump(&r));
    assert!(bump(&r), "the parent's copy");
    assert_eq!(status, 0, "the child's copy");
}

/// What this guest does when the pages are one transparent huge page: the kernel refuses
/// to make a tail page of a large folio device-exclusive (`PageTail` in
/// `page_make_device_exclusive` since exclusive access arrived in Linux 5.14, b756a3b5e7ea
/// "mm: device exclusive memory access"; kept by 5.18's 0d2514859ced "mm/rmap: Convert
/// make_device_exclusive_range() to use folios"), so the request cannot make the whole
/// range exclusive and test_hmm answers EBUSY (5.15, 6.1 and 6.12 here). Linux 6.15's
/// rework ("mm/rmap: convert make_device_exclusive_range() to make_device_exclusive()",
/// David Hildenbrand) handles PTE-mapped THPs, and the request succeeds. This, not the
/// emulator, is why the kernel selftest's exclusive cases fail in these guests: their
/// 4 MiB buffers get transparent huge pages (THP is "always" in the guest kernels).
#[test]
fn exclusive_on_a_transparent_huge_page_is_ebusy() {
    let d = mirror!(0);
    needs_exclusive!(d);
    const TWO_MEG: usize = 2 << 20;
    let r = Region::anon_aligned(TWO_MEG, true);
    let n = r.npages();
    r.fill(0, n, pattern);
    let snap = d.snapshot(r.range()).unwrap();
    if snap[0] != mapped(PageKind::System, MirrorProt::WRITE | MirrorProt::PMD) {
        skip!(
            "no transparent huge page could be had (first page: {:?})",
            snap[0]
        );
    }
    let mut out = vec![0u8; r.len()];
    let (major, minor) = kernel_version();
    let res = unchanged_process("exclusive on a huge page", || {
        d.make_exclusive(r.range(), &mut out)
    });
    if (major, minor) < (6, 15) {
        assert_eq!(
            errno_of(res),
            Errno::BUSY,
            "Linux {major}.{minor} (5.14-6.14 refuse a large folio's tail pages)"
        );
    } else {
        res.unwrap_or_else(|e| panic!("Linux {major}.{minor}: {e} (6.15+ takes the THP)"));
    }
    assert_eq!(r.first_mismatch(0, n, pattern), None);
}

#[test]
fn bad_input_is_refused_before_the_kernel() {
    let d = mirror!(0);
    let p = page();
    assert!(matches!(
        unchanged_process("refused before the kernel", || PageRange::new(p + 8, 1)),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        unchanged_process("refused before the kernel", || PageRange::new(p, 0)),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        unchanged_process("refused before the kernel", || PageRange::new(
            usize::MAX & !(p - 1),
            2
        )),
        Err(Error::InvalidArgument { .. })
    ));
    let r = Region::anon(4);
    let mut short = vec![0u8; p];
    assert!(matches!(
        unchanged_process("refused before the kernel", || d
            .read(r.range(), &mut short)),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        unchanged_process("refused before the kernel", || d
            .migrate_to_device(r.range(), &mut short)),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        unchanged_process("refused before the kernel", || r
            .device_write(&d, 0, 4, &short)),
        Err(Error::InvalidArgument { .. })
    ));
    let mut unaligned = Region::anon(2);
    let s = &mut unaligned.as_mut_slice()[8..8 + p];
    assert!(matches!(
        unchanged_process("refused before the kernel", || d.write_into(s, &short)),
        Err(Error::InvalidArgument { .. })
    ));
}

/// The kernel's own answers (raw requests, by number, bypassing the checks above).
#[test]
fn bad_input_gets_the_kernels_errno() {
    kernel_tests::fds_shared();
    use kernel_tests::raw::{dmirror_cmd, dmirror_request};
    let d = mirror!(0);
    let p = page() as u64;
    let fds_before = open_fds();
    // Ten pages: 0 read-write, 1 PROT_NONE, 2 a hole, 3 read-only and populated, 4
    // read-only and never touched, 5..10 unmapped.
    let mut r = Region::anon(10);
    r.fill(0, 1, pattern);
    r.protect(1, 1, Access::None);
    r.unmap_page(2);
    r.fill(3, 1, pattern);
    r.protect(3, 2, Access::Read);
    r.unmap_pages(5, 5);
    let base = r.range().start() as u64;
    let cmd = |addr: u64, npages: u64| (addr, npages);
    // Numbers 0 (READ), 1 (WRITE) and 2 (MIGRATE, MIGRATE_TO_DEV) are the same in every
    // layout. The command's buffer is never reached except by the read-only writes (which
    // read it): each case fails before the copy.
    let (read, write, migrate) = (dmirror_request(0), dmirror_request(1), dmirror_request(2));
    let mut cases: Vec<(&str, u32, (u64, u64), Errno)> = vec![
        ("unaligned address", read, cmd(base + 8, 1), Errno::INVAL),
        ("zero pages", read, cmd(base, 0), Errno::INVAL),
        ("range wraps around", read, cmd(!(p - 1), 2), Errno::INVAL),
        (
            "read past the mapping",
            read,
            cmd(base + 3 * p, 5),
            Errno::FAULT,
        ),
        ("nothing mapped at all", read, cmd(0x1000, 1), Errno::FAULT),
        ("PROT_NONE read", read, cmd(base + p, 1), Errno::FAULT),
        // Device writes to read-only pages, populated or not. (Before the migrations
        // below: a failed migration still moves the pages before the bad one, and a device
        // write to a read-only page already in this device's memory is EFAULT, with a
        // kernel warning from test_hmm.)
        ("read-only write", write, cmd(base + 3 * p, 1), Errno::PERM),
        (
            "read-only write, unpopulated",
            write,
            cmd(base + 4 * p, 1),
            Errno::PERM,
        ),
        ("PROT_NONE migrate", migrate, cmd(base + p, 1), Errno::INVAL),
        ("migrate across a hole", migrate, cmd(base, 3), Errno::INVAL),
        (
            "migrate past the mapping",
            migrate,
            cmd(base + 3 * p, 5),
            Errno::INVAL,
        ),
        // A request number no test_hmm defines (7.3 has up to READ_UNLOCKED, 9).
        (
            "unknown request 0xff",
            dmirror_request(0xff),
            cmd(base, 1),
            Errno::INVAL,
        ),
    ];
    if d.layout() == HmmLayout::V5_10 {
        // Requests of a later layout on 5.10 (a wrong-layout request).
        cases.push((
            "6.x CHECK_EXCLUSIVE on 5.10",
            dmirror_request(6),
            cmd(base, 1),
            Errno::INVAL,
        ));
        cases.push((
            "6.1 RELEASE on 5.10",
            dmirror_request(7),
            cmd(base, 1),
            Errno::INVAL,
        ));
    }
    let mut failures = Vec::new();
    for (what, req, (addr, npages), want) in cases {
        // Safe: a raw WRITE must lie in `r` (borrowed mutably; checked, and it has no
        // reference alive), and the command's buffer belongs to the call.
        let got = unchanged_process(what, || dmirror_cmd(&d, req, addr, npages, &mut r));
        if got != Err(want) {
            failures.push(format!("{what}: expected {want:?}, got {got:?}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    // Another device's pages: ENOENT through the safe API.
    let d1 = mirror!(1);
    let r2 = Region::anon(1);
    r2.fill(0, 1, pattern);
    let mut one = vec![0u8; page()];
    d1.migrate_to_device(r2.range(), &mut one).unwrap();
    let res = unchanged_process("migrate of another device's page", || {
        d.migrate_to_device(r2.range(), &mut one)
    });
    assert_eq!(errno_of(res), Errno::NOENT);
    drop((r, r2, d1));
    assert_eq!(open_fds(), fds_before, "fds leaked");
}
