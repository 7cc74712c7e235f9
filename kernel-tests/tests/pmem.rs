//! Persistent memory in real guests: region and namespace discovery, fsdax files mapped with
//! MAP_SYNC, devdax devices mapped at their alignment, persist, host registration, and bad
//! input (exact errno, no fd leaked).
//!
//! The guest's NVDIMM (`vm --device nvdimm`, a 256 MiB host file) starts as one raw
//! namespace. Each test puts the namespace into the mode it needs with the host's `ndctl`
//! (`create-namespace -f -e <ns> -m <mode>`), so tests do not depend on their order. fsdax
//! tests make an ext4 with 4 KiB blocks (DAX needs block size = page size) and mount it
//! `-o dax` on a tmpfs directory.

use drm_gem::{Errno, Error};
use hmm::{
    Backend, DaxKind, DaxMapping, DevDax, HostRegistration, NamespaceMode, PersistMethod,
    PmemRegion, is_not_dax,
};
use kernel_tests::pmem::{MNT, RestoreRaw, fsdax_mount, namespace_name, set_mode, sh};
use kernel_tests::{open_fds, require_feature, skip, unchanged_process};
use std::io::Write;
use std::os::fd::AsFd;
use std::path::Path;

const MIB: usize = 1 << 20;

/// The fixture's value and a guard that puts the namespace back into raw mode at the end
/// of the test; skips (loudly, failing in strict mode) when the fixture cannot be had.
macro_rules! setup {
    ($e:expr) => {{
        require_feature!("pmem");
        let restore = RestoreRaw;
        match $e {
            Ok(v) => (v, restore),
            Err(why) => skip!("{why}"),
        }
    }};
}

fn new_file(path: &Path, len: u64) -> std::fs::File {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .unwrap();
    f.set_len(len).unwrap();
    f
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A scratch path on tmpfs (`/dev/shm` on the host and in the guest).
fn shm(tag: &str) -> std::path::PathBuf {
    Path::new("/dev/shm").join(format!("pmem-{tag}-{}", std::process::id()))
}

fn syscall_errno<T: core::fmt::Debug>(r: drm_gem::Result<T>, name: &str) -> Errno {
    match r {
        Err(Error::Syscall { name: n, errno }) if n == name => errno,
        other => panic!("expected {name} to fail, got {other:?}"),
    }
}

fn assert_invalid<T: core::fmt::Debug>(r: drm_gem::Result<T>, needle: &str) {
    match r {
        Err(Error::InvalidArgument { what }) => assert!(what.contains(needle), "{what}"),
        other => panic!("expected InvalidArgument({needle}), got {other:?}"),
    }
}

/// The physical address range of a namespace (sysfs `resource` + size).
fn phys_range(ns: &hmm::Namespace) -> std::ops::Range<u64> {
    let r = std::fs::read_to_string(format!("/sys/bus/nd/devices/{}/resource", ns.name))
        .unwrap()
        .trim()
        .trim_start_matches("0x")
        .to_string();
    let start = u64::from_str_radix(&r, 16).unwrap();
    start..start + ns.raw_size
}

#[test]
fn discovery_follows_every_namespace_mode() {
    let (raw, _restore) = setup!(set_mode("raw"));
    let regions = PmemRegion::discover().unwrap();
    assert_eq!(regions.len(), 1, "{regions:?}");
    let r = &regions[0];
    assert_eq!(r.size, 256 << 20, "the harness attaches a 256 MiB NVDIMM");
    assert_eq!(r.namespaces.len(), 1, "{r:?}");
    assert_eq!(raw.mode, NamespaceMode::Raw);
    assert_eq!(raw.size, raw.raw_size);
    assert_eq!(raw.holder, None);
    assert_eq!(raw.block_device.as_deref(), Some(Path::new("/dev/pmem0")));

    let fsdax = set_mode("fsdax").unwrap();
    assert_eq!(fsdax.mode, NamespaceMode::Fsdax);
    assert!(
        fsdax.holder.as_deref().unwrap().starts_with("pfn"),
        "{fsdax:?}"
    );
    assert!(
        fsdax.size < fsdax.raw_size,
        "the page map is reserved: {fsdax:?}"
    );
    assert_eq!(fsdax.align, Some(2 << 20));
    assert_eq!(fsdax.block_device.as_deref(), Some(Path::new("/dev/pmem0")));
    assert_eq!(fsdax.dax_device, None);

    let devdax = set_mode("devdax").unwrap();
    assert_eq!(devdax.mode, NamespaceMode::Devdax);
    assert!(
        devdax.holder.as_deref().unwrap().starts_with("dax"),
        "{devdax:?}"
    );
    assert_eq!(devdax.block_device, None);
    let node = devdax.dax_device.clone().unwrap();
    let dev = DevDax::open(&node).unwrap();
    assert_eq!(Some(dev.align()), devdax.align);
    assert_eq!(dev.size(), devdax.size);
    assert_eq!(dev.path(), node);
}

#[test]
fn fsdax_file_with_map_sync_persists_and_reads_back() {
    let (dir, _restore) = setup!(fsdax_mount(true));
    let path = dir.join("data");
    let f = new_file(&path, 4 * MIB as u64);
    let mut m = DaxMapping::map_file(&f, 0, 4 * MIB).expect("MAP_SYNC on an fsdax file");
    assert_eq!(m.kind(), DaxKind::FsdaxSync);
    let data = pattern(3 * MIB + 100, 7);
    m.write_at(1000, &data).unwrap();
    let how = m.persist(1000, data.len()).unwrap();
    assert!(
        matches!(how, PersistMethod::CacheFlush(_)),
        "MAP_SYNC mappings persist by cache flush on x86-64: {how:?}"
    );
    let mut back = vec![0u8; data.len()];
    m.read_at(1000, &mut back).unwrap();
    assert_eq!(back, data);
    drop(m);
    // The file itself (read(2), not the mapping) holds the bytes.
    let on_disk = std::fs::read(&path).unwrap();
    assert_eq!(&on_disk[1000..1000 + data.len()], &data[..]);
    assert!(on_disk[..1000].iter().all(|&b| b == 0));

    // The same file mapped without MAP_SYNC persists with msync.
    let mut m = DaxMapping::map_file_without_sync(&f, 2 * MIB as u64, MIB).unwrap();
    assert_eq!(m.kind(), DaxKind::FileShared);
    m.write_at(5, b"plain").unwrap();
    assert_eq!(m.persist(5, 5).unwrap(), PersistMethod::Msync);
    assert_eq!(m.persist_all().unwrap(), PersistMethod::Msync);
    drop(m);
    assert_eq!(
        &std::fs::read(&path).unwrap()[2 * MIB + 5..2 * MIB + 10],
        b"plain"
    );
    drop(f);
    sh("umount", &[MNT]).unwrap();
}

#[test]
fn devdax_maps_at_its_alignment_and_persists() {
    let (ns, _restore) = setup!(set_mode("devdax"));
    let dev = DevDax::open(ns.dax_device.as_ref().unwrap()).unwrap();
    let align = usize::try_from(dev.align()).unwrap();
    let mut m = DaxMapping::map_devdax(&dev, dev.align(), 3 * align).unwrap();
    assert_eq!(m.kind(), DaxKind::Devdax);
    assert_eq!(m.addr() % align, 0, "the kernel aligns devdax mappings");
    let data = pattern(align + 4096, 3);
    m.write_at(align - 2048, &data).unwrap();
    assert!(matches!(
        m.persist(align - 2048, data.len()).unwrap(),
        PersistMethod::CacheFlush(_)
    ));
    drop(m);
    // A second mapping of the same device bytes sees them.
    let m = DaxMapping::map_devdax(&dev, 0, 4 * align).unwrap();
    let mut back = vec![0u8; data.len()];
    m.read_at(align + align - 2048, &mut back).unwrap();
    assert_eq!(back, data);
}

#[test]
fn pinned_registration_lists_the_frames_of_the_nvdimm() {
    let (ns, _restore) = setup!(set_mode("devdax"));
    let dev = DevDax::open(ns.dax_device.as_ref().unwrap()).unwrap();
    let align = usize::try_from(dev.align()).unwrap();
    let m = DaxMapping::map_devdax(&dev, 0, align).unwrap();
    m.check_longterm_pin().expect("devdax pages may be pinned");
    let reg = HostRegistration::dax(&m, Backend::Pinned).unwrap();
    assert_eq!(reg.len(), align);
    let frames = reg
        .page_frames()
        .expect("root in the guest reads PFNs from /proc/self/pagemap");
    assert_eq!(frames.len(), align / 4096);
    let phys = phys_range(&ns);
    for (i, pfn) in frames.iter().enumerate() {
        assert!(
            phys.contains(&(pfn * 4096)),
            "page {i}: pfn {pfn:#x} is outside the namespace {phys:x?}"
        );
    }
    // Consecutive device offsets are consecutive frames.
    assert!(frames.windows(2).all(|w| w[1] == w[0] + 1), "{frames:x?}");
    drop(reg);
    let fds = open_fds();
    other_backends_on_dax(&m, "/dev/dax");
    assert_eq!(open_fds(), fds, "fds leaked");

    // Ordinary memory: frames of RAM, not of the NVDIMM.
    let mut heap = vec![1u8; 8 * 4096];
    let reg = HostRegistration::new(&mut heap, Backend::Pinned).unwrap();
    let frames = reg.page_frames().unwrap().to_vec();
    assert!(frames.len() >= 8);
    assert!(frames.iter().all(|p| !phys.contains(&(p * 4096))));
}

#[test]
fn fsdax_pages_refuse_long_term_pins_with_a_reason() {
    let (dir, _restore) = setup!(fsdax_mount(true));
    let f = new_file(&dir.join("pin"), 2 * MIB as u64);
    let mut m = DaxMapping::map_file(&f, 0, 2 * MIB).unwrap();
    // Fill the file through the mapping first: mlock populates shared mappings with read
    // faults, and a read fault on a hole of a DAX file maps the (huge) zero page, not a
    // block of the NVDIMM.
    m.write_at(0, &pattern(2 * MIB, 1)).unwrap();
    match unchanged_process("long-term pin of fsdax pages", || m.check_longterm_pin()) {
        Err(Error::Unsupported { reason, .. }) => {
            assert!(
                reason.contains("FOLL_LONGTERM") && reason.contains("devdax"),
                "{reason}"
            )
        }
        other => panic!("fsdax pages cannot be long-term pinned: {other:?}"),
    }
    // mlock is no long-term pin: the Pinned backend works, and the frames are the NVDIMM's.
    let ns = namespace_name().unwrap();
    let ns = PmemRegion::discover().unwrap()[0]
        .namespaces
        .iter()
        .find(|n| n.name == ns)
        .unwrap()
        .clone();
    let reg = HostRegistration::dax(&m, Backend::Pinned).unwrap();
    let phys = phys_range(&ns);
    let frames = reg.page_frames().unwrap();
    assert!(
        frames.iter().all(|p| phys.contains(&(p * 4096))),
        "{frames:x?}"
    );
    drop(reg);
    let fds = open_fds();
    other_backends_on_dax(&m, "/tmp/pmem-fsdax/pin");
    assert_eq!(open_fds(), fds, "fds leaked");
    drop(m);
    drop(f);
    sh("umount", &[MNT]).unwrap();
}

/// Udmabuf refuses DAX memory (no memfd) naming what backs it; Dmirror reads it through
/// HMM where test_hmm is loaded, and is Unsupported where it is not.
fn other_backends_on_dax(m: &DaxMapping, backing: &str) {
    match unchanged_process("udmabuf of DAX memory", || {
        HostRegistration::dax(m, Backend::Udmabuf)
    }) {
        Err(Error::InvalidArgument { what }) => assert!(
            what.contains("memfd pages only") && what.contains(backing),
            "{what}"
        ),
        other => panic!("udmabuf cannot register DAX memory: {other:?}"),
    }
    let r = HostRegistration::dax(m, Backend::Dmirror);
    if !kernel_tests::expected("test_hmm") {
        assert!(matches!(r, Err(Error::Unsupported { .. })), "{r:?}");
        return;
    }
    // HMM mirrors DAX pages like any others (5.10, 6.1 and 6.12 alike): one round of
    // device faults for the whole mapping, and the device reads what the mapping holds.
    let mut reg = r.expect("dmirror registration of DAX memory");
    let rep = reg.mirror_report().unwrap();
    assert_eq!((rep.cpages, rep.faults), ((m.len() / 4096) as u64, 1));
    let mut seen = vec![0u8; m.len()];
    reg.device_read(&mut seen).unwrap();
    let mut cpu = vec![0u8; m.len()];
    m.read_at(0, &mut cpu).unwrap();
    assert!(seen == cpu, "the device reads other bytes than the CPU");
    match unchanged_process("device write through a shared borrow", || {
        reg.device_write(&cpu)
    }) {
        Err(Error::InvalidArgument { what }) => assert!(what.contains("shared borrow"), "{what}"),
        other => panic!("the mapping is borrowed shared, no device writes: {other:?}"),
    }
}

// ---- bad input ----

#[test]
fn map_sync_on_tmpfs_is_eopnotsupp() {
    kernel_tests::fds_shared();
    // Runs on the host too: tmpfs is never DAX.
    let path = shm("notdax");
    let f = new_file(&path, 64 * 1024);
    let fds = open_fds();
    let r = unchanged_process("MAP_SYNC on tmpfs", || {
        DaxMapping::map_file(&f, 0, 64 * 1024)
    });
    assert!(r.as_ref().is_err_and(is_not_dax), "{r:?}");
    assert!(r.as_ref().unwrap_err().is_not_supported());
    assert_eq!(
        syscall_errno(r, "mmap(MAP_SHARED_VALIDATE|MAP_SYNC)"),
        Errno::OPNOTSUPP
    );
    assert_eq!(open_fds(), fds, "fds leaked");
    // Without MAP_SYNC the same file maps, and persist falls back to msync.
    let mut m = DaxMapping::map_file_without_sync(&f, 0, 64 * 1024).unwrap();
    m.write_at(0, b"x").unwrap();
    assert_eq!(m.persist(0, 1).unwrap(), PersistMethod::Msync);
    drop(m);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn map_sync_on_ext4_without_dax_is_eopnotsupp() {
    let (dir, _restore) = setup!(fsdax_mount(false));
    let f = new_file(&dir.join("nodax"), 2 * MIB as u64);
    let fds = open_fds();
    let r = unchanged_process("MAP_SYNC on ext4 without DAX", || {
        DaxMapping::map_file(&f, 0, 2 * MIB)
    });
    // Every kernel of the matrix: ext4 refuses MAP_SYNC unless the inode is DAX.
    assert_eq!(
        syscall_errno(r, "mmap(MAP_SHARED_VALIDATE|MAP_SYNC)"),
        Errno::OPNOTSUPP
    );
    assert_eq!(open_fds(), fds, "fds leaked");
    drop(f);
    sh("umount", &[MNT]).unwrap();
}

#[test]
fn file_ranges_are_checked_before_the_kernel() {
    kernel_tests::fds_shared();
    let path = std::env::temp_dir().join(format!("pmem-range-{}", std::process::id()));
    let f = new_file(&path, 8192);
    let fds = open_fds();
    assert_invalid(
        unchanged_process("0 bytes", || DaxMapping::map_file(&f, 0, 0)),
        "0 bytes",
    );
    assert_invalid(
        unchanged_process("exceed", || DaxMapping::map_file(&f, 4096, 8192)),
        "exceed",
    );
    assert_invalid(
        unchanged_process("exceed", || DaxMapping::map_file(&f, u64::MAX, 1)),
        "exceed",
    );
    assert_invalid(
        unchanged_process("exceed", || DaxMapping::map_file_without_sync(&f, 0, 8193)),
        "exceed",
    );
    let mut m = DaxMapping::map_file_without_sync(&f, 0, 8192).unwrap();
    assert_invalid(
        unchanged_process("exceed", || m.write_at(8190, b"abc")),
        "exceed",
    );
    assert_invalid(
        unchanged_process("exceed", || m.read_at(usize::MAX, &mut [0])),
        "exceed",
    );
    assert_invalid(
        unchanged_process("exceed", || m.persist(8000, 500)),
        "exceed",
    );
    drop(m);
    assert_eq!(open_fds(), fds, "fds leaked");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn read_only_file_cannot_be_mapped_writable() {
    kernel_tests::fds_shared();
    let path = shm("ro");
    drop(new_file(&path, 4096));
    let f = std::fs::File::open(&path).unwrap();
    let fds = open_fds();
    // A shared writable mapping of a file opened read-only: EACCES. With MAP_SYNC on tmpfs,
    // whose file operations do not offer MAP_SYNC, do_mmap validates the flags first:
    // EOPNOTSUPP wins. (ext4 offers MAP_SYNC and refuses non-DAX inodes later, in its own
    // mmap, so there EACCES comes first.)
    assert_eq!(
        syscall_errno(
            unchanged_process("writable mapping of a read-only file", || {
                DaxMapping::map_file_without_sync(&f, 0, 4096)
            }),
            "mmap(MAP_SHARED)"
        ),
        Errno::ACCESS
    );
    assert_eq!(
        syscall_errno(
            unchanged_process("MAP_SYNC of a read-only file", || {
                DaxMapping::map_file(&f, 0, 4096)
            }),
            "mmap(MAP_SHARED_VALIDATE|MAP_SYNC)"
        ),
        Errno::OPNOTSUPP
    );
    assert_eq!(open_fds(), fds, "fds leaked");
    std::fs::remove_file(&path).unwrap();
}

/// Misaligned offsets and lengths are refused before the kernel is asked; the kernel's own
/// check (`check_vma`: the mapping's start and end must be aligned) answers EINVAL for a
/// misaligned length. It does not look at the offset: a misaligned offset with an aligned
/// length fails only when the address it picks is misaligned (on 6.1 it once was aligned,
/// and the mapping succeeded), so that case is not asked of the kernel.
#[test]
fn devdax_at_a_wrong_alignment_is_einval() {
    let (ns, _restore) = setup!(set_mode("devdax"));
    let dev = DevDax::open(ns.dax_device.as_ref().unwrap()).unwrap();
    let align = usize::try_from(dev.align()).unwrap();
    let fds = open_fds();
    for (offset, len) in [
        (4096u64, align),
        (0, 4096),
        (0, align + 4096),
        (align as u64 / 2, align),
    ] {
        match unchanged_process("misaligned devdax mapping", || {
            DaxMapping::map_devdax(&dev, offset, len)
        }) {
            Err(Error::InvalidArgument { what }) => {
                assert!(what.contains("alignment"), "{what}")
            }
            other => panic!("offset {offset:#x} len {len:#x}: {other:?}"),
        }
    }
    for len in [4096, align + 4096, align / 2] {
        assert_eq!(
            unchanged_process("the kernel's misaligned devdax mapping", || {
                kernel_tests::raw::mmap_shared(dev.as_fd(), 0, len)
            }),
            Err(Errno::INVAL),
            "the kernel's answer to len {len:#x}"
        );
    }
    assert_eq!(
        kernel_tests::raw::mmap_shared(dev.as_fd(), 0, align),
        Ok(())
    );
    assert_invalid(
        unchanged_process("0 bytes", || DaxMapping::map_devdax(&dev, 0, 0)),
        "0 bytes",
    );
    assert_invalid(
        unchanged_process("exceed", || DaxMapping::map_devdax(&dev, dev.size(), align)),
        "exceed",
    );
    assert_eq!(open_fds(), fds, "fds leaked");
}

#[test]
fn devdax_open_refuses_other_nodes() {
    let (ns, _restore) = setup!(set_mode("fsdax"));
    let fds = open_fds();
    let block = ns.block_device.unwrap();
    assert!(
        matches!(unchanged_process("devdax open of a block device", || DevDax::open(&block)), Err(Error::NotFound { ref what }) if what.contains("not a character device")),
        "{block:?}"
    );
    assert!(matches!(
        unchanged_process("devdax open of /dev/null", || DevDax::open("/dev/null")),
        Err(Error::NotFound { ref what }) if what.contains("not a devdax")
    ));
    match unchanged_process("devdax open of a missing node", || {
        DevDax::open("/dev/dax9.9")
    }) {
        Err(Error::Open { errno, .. }) => assert_eq!(errno, Errno::NOENT),
        other => panic!("{other:?}"),
    }
    assert_eq!(open_fds(), fds, "fds leaked");
}

#[test]
fn host_registration_backends_refuse_what_they_cannot_do() {
    kernel_tests::fds_shared();
    // Runs on the host too.
    let mut anon = vec![0u8; 4096];
    let fds = open_fds();
    match unchanged_process("udmabuf of heap memory", || {
        HostRegistration::new(&mut anon, Backend::Udmabuf)
    }) {
        Err(Error::InvalidArgument { what }) => assert!(what.contains("memfd"), "{what}"),
        other => panic!("udmabuf takes memfd pages only: {other:?}"),
    }
    assert!(matches!(
        unchanged_process("pin of 0 bytes", || HostRegistration::new(
            &mut [],
            Backend::Pinned
        )),
        Err(Error::InvalidArgument { .. })
    ));
    assert_eq!(open_fds(), fds, "fds leaked");
    let mut out = std::io::stderr();
    let _ = writeln!(
        out,
        "persist flush instruction on this CPU: {:?}",
        hmm::persist::flush_instruction()
    );
}
