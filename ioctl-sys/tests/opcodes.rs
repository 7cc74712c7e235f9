//! Every ioctl request number in the crate, computed in Rust from `size_of` the generated
//! struct, must equal the number a C compiler computed from the same headers
//! (`tests/c_numbers/mod.rs`, written by `ioctl-sys/gen`). Because `_IOR`/`_IOW`/`_IOWR`
//! embed `sizeof(arg)`, this also proves each argument struct has the C size.

mod c_numbers;

use c_numbers::C_NUMBERS;
use ioctl_sys::{dma_buf, drm, ioc, sync_file, test_hmm, udmabuf, vgem, virtgpu};

#[test]
fn every_rust_request_number_equals_the_c_one() {
    let mismatches: Vec<String> = C_NUMBERS
        .iter()
        .filter(|(_, c, rust)| c != rust)
        .map(|(name, c, rust)| {
            let (cd, ct, cn, cs) = ioc::decode(*c);
            let (rd, rt, rn, rs) = ioc::decode(*rust);
            format!(
                "{name}: C {c:#010x} (dir {cd}, type {ct:#x}, nr {cn:#x}, size {cs}) != \
                 Rust {rust:#010x} (dir {rd}, type {rt:#x}, nr {rn:#x}, size {rs})"
            )
        })
        .collect();
    assert!(
        mismatches.is_empty(),
        "{} of {} request numbers differ:\n{}",
        mismatches.len(),
        C_NUMBERS.len(),
        mismatches.join("\n")
    );
}

#[test]
fn the_table_covers_every_module() {
    // A generator that silently found no ioctls would make the test above vacuous.
    for prefix in [
        "drm::DRM_IOCTL_",
        "virtgpu::DRM_IOCTL_VIRTGPU_",
        "qxl::DRM_IOCTL_QXL_",
        "vgem::DRM_IOCTL_VGEM_",
        "dma_buf::DMA_BUF_",
        "sync_file::SYNC_IOC_",
        "sync_file::SW_SYNC_",
        "udmabuf::UDMABUF_",
        "test_hmm::v6_0::HMM_DMIRROR_",
        "test_hmm::v5_14::HMM_DMIRROR_",
        "test_hmm::v5_10::HMM_DMIRROR_",
    ] {
        assert!(
            C_NUMBERS.iter().any(|(n, _, _)| n.starts_with(prefix)),
            "no ioctl numbers for {prefix}*"
        );
    }
    assert!(
        C_NUMBERS.len() > 150,
        "only {} ioctls found",
        C_NUMBERS.len()
    );
}

#[test]
fn well_known_numbers() {
    // Values as printed by C programs and listed in libdrm/kernel docs, spelled out so a
    // regenerated table cannot drift together with the Rust side unnoticed.
    assert_eq!(drm::DRM_IOCTL_GET_CAP, 0xc010_640c);
    assert_eq!(drm::DRM_IOCTL_GEM_CLOSE, 0x4008_6409);
    assert_eq!(drm::DRM_IOCTL_MODE_CREATE_DUMB, 0xc020_64b2);
    assert_eq!(drm::DRM_IOCTL_SET_MASTER, 0x641e);
    assert_eq!(dma_buf::DMA_BUF_IOCTL_SYNC, 0x4008_6200);
    assert_eq!(sync_file::SYNC_IOC_MERGE, 0xc030_3e03);
    assert_eq!(udmabuf::UDMABUF_CREATE, 0x4018_7542);
    assert_eq!(vgem::DRM_IOCTL_VGEM_FENCE_ATTACH, 0xc010_6441);
    assert_eq!(virtgpu::DRM_IOCTL_VIRTGPU_GETPARAM, 0xc010_6443);
}

#[test]
fn test_hmm_layouts_differ_where_the_kernel_renumbered() {
    use test_hmm::{v5_10, v5_14, v6_0};
    assert_eq!(v5_10::HMM_DMIRROR_READ, v6_0::HMM_DMIRROR_READ);
    assert_eq!(v5_14::HMM_DMIRROR_MIGRATE, v6_0::HMM_DMIRROR_MIGRATE_TO_DEV);
    // 6.0 inserted MIGRATE_TO_SYS at 3: SNAPSHOT moved from 3 to 4.
    assert_eq!(ioc::decode(v5_14::HMM_DMIRROR_SNAPSHOT).2, 3);
    assert_eq!(ioc::decode(v6_0::HMM_DMIRROR_SNAPSHOT).2, 4);
    assert_eq!(
        v5_14::HMM_DMIRROR_SNAPSHOT,
        v6_0::HMM_DMIRROR_MIGRATE_TO_SYS
    );
    assert_eq!(ioc::decode(v6_0::HMM_DMIRROR_RELEASE).2, 7);
}

#[test]
fn rustix_encodes_the_same() {
    use rustix::ioctl::opcode;
    assert_eq!(
        drm::DRM_IOCTL_MODE_CREATE_DUMB,
        opcode::read_write::<drm::drm_mode_create_dumb>(b'd', 0xB2)
    );
    assert_eq!(
        drm::DRM_IOCTL_GEM_CLOSE,
        opcode::write::<drm::drm_gem_close>(b'd', 0x09)
    );
    assert_eq!(
        drm::DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT,
        opcode::read_write::<drm::drm_syncobj_timeline_wait>(b'd', 0xCA)
    );
}

#[test]
fn fourcc_and_modifier_values() {
    assert_eq!(drm::DRM_FORMAT_XRGB8888, u32::from_le_bytes(*b"XR24"));
    assert_eq!(drm::DRM_FORMAT_NV12, u32::from_le_bytes(*b"NV12"));
    assert_eq!(drm::DRM_FORMAT_MOD_LINEAR, 0);
    assert_eq!(drm::DRM_FORMAT_MOD_INVALID, 0x00ff_ffff_ffff_ffff);
    assert_eq!(drm::DRM_RDWR, 0o2);
    assert_eq!(drm::DRM_CLOEXEC, 0o2_000_000);
}

#[test]
fn every_argument_struct_has_the_c_size_and_field_offsets() {
    // Catches what the size alone cannot: a removed or reordered field hidden by padding.
    let bad: Vec<String> = c_numbers::C_LAYOUTS
        .iter()
        .filter(|(_, c, rust)| c != rust)
        .map(|(what, c, rust)| format!("{what}: C {c} != Rust {rust}"))
        .collect();
    assert!(bad.is_empty(), "layout differs from C:\n{}", bad.join("\n"));
    assert!(
        c_numbers::C_LAYOUTS.len() > 300,
        "only {} rows",
        c_numbers::C_LAYOUTS.len()
    );
}
