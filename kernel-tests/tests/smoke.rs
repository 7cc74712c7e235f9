//! Guest smoke test: every driver and node the guest was built to have is there.
//! On a host without them each test skips loudly; in the guest (strict) a miss fails.

use kernel_tests::{node_of_driver, require_feature, skip};
use std::path::Path;

/// Checks that a DRM node of one of the DRM drivers `names` exists, that DRM_IOCTL_VERSION
/// on it agrees, and, for PCI devices, that sysfs shows the parent bound to one of `bound`.
fn driver_bound(names: &[&str], bound: &[&str]) {
    let Some(node) = node_of_driver(names) else {
        let seen: Vec<String> = drm_gem::enumerate()
            .map(|v| {
                v.iter()
                    .map(|n| {
                        format!(
                            "{}={}",
                            n.path.display(),
                            n.driver.as_deref().unwrap_or("-")
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        skip!("no DRM node of driver {names:?} (nodes: {seen:?})");
    };
    let dev = drm_gem::Device::open(&node.path).unwrap_or_else(|e| {
        panic!(
            "{} is bound to {:?} but cannot be opened: {e}",
            node.path.display(),
            node.driver
        )
    });
    let v = dev
        .driver()
        .unwrap_or_else(|e| panic!("DRM_IOCTL_VERSION on {}: {e}", node.path.display()));
    assert!(
        names.contains(&v.name.as_str()),
        "{}: enumerate says {:?}, DRM_IOCTL_VERSION says {:?}",
        node.path.display(),
        node.driver,
        v.name
    );
    if !bound.is_empty() {
        assert!(
            node.parent_driver
                .as_deref()
                .is_some_and(|d| bound.contains(&d)),
            "{}: parent device bound to {:?}, want one of {bound:?}",
            node.path.display(),
            node.parent_driver
        );
    }
}

fn node_exists(path: &str, what: &str) {
    if !Path::new(path).exists() {
        skip!("{path} is missing ({what})");
    }
}

#[test]
fn vkms_is_bound() {
    require_feature!("vkms");
    driver_bound(&["vkms"], &[]);
}

#[test]
fn vgem_is_bound() {
    require_feature!("vgem");
    driver_bound(&["vgem"], &[]);
}

#[test]
fn virtio_gpu_is_bound() {
    require_feature!("virtio_gpu");
    driver_bound(&["virtio_gpu"], &["virtio-pci", "virtio_gpu"]);
}

#[test]
fn bochs_is_bound() {
    require_feature!("bochs");
    driver_bound(&["bochs-drm", "bochs"], &["bochs-drm", "bochs"]);
}

#[test]
fn qxl_is_bound() {
    require_feature!("qxl");
    driver_bound(&["qxl"], &["qxl"]);
}

#[test]
fn udmabuf_node_exists() {
    require_feature!("udmabuf");
    node_exists("/dev/udmabuf", "CONFIG_UDMABUF");
}

#[test]
fn hmm_dmirror_nodes_exist() {
    require_feature!("test_hmm");
    node_exists("/dev/hmm_dmirror0", "test_hmm module");
    node_exists("/dev/hmm_dmirror1", "test_hmm module");
}

#[test]
fn pmem_node_exists() {
    require_feature!("pmem");
    node_exists("/dev/pmem0", "emulated NVDIMM + ACPI NFIT + BLK_DEV_PMEM");
}

#[test]
fn system_dma_heap_exists() {
    require_feature!("dma_heap");
    node_exists("/dev/dma_heap/system", "CONFIG_DMABUF_HEAPS_SYSTEM");
}

#[test]
fn sw_sync_debugfs_exists() {
    require_feature!("sw_sync");
    node_exists("/sys/kernel/debug/sync/sw_sync", "CONFIG_SW_SYNC + debugfs");
}

/// On the `stock-6.12-fdinfo` guest (vkms with the harness's test-only fdinfo patch), an
/// open vkms fd must print the DRM usage-stats keys; elsewhere vkms prints none, so the test
/// does not apply.
#[test]
fn patched_vkms_prints_drm_fdinfo_keys() {
    use std::os::fd::{AsFd, AsRawFd};
    if !std::env::var("VM_KERNEL").is_ok_and(|k| k.ends_with("-fdinfo")) {
        eprintln!("not applicable: only the *-fdinfo guests patch vkms's fdinfo");
        return;
    }
    let Some(node) = node_of_driver(&["vkms"]) else {
        skip!("no vkms node");
    };
    let dev = drm_gem::Device::open(&node.path).expect("open vkms");
    let fd = dev.as_fd().as_raw_fd();
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).expect("fdinfo");
    for key in ["drm-driver:", "drm-client-id:", "drm-total-memory:"] {
        assert!(info.contains(key), "{key} missing from fdinfo:\n{info}");
    }
    assert!(
        info.contains("drm-driver:\tvkms") || info.contains("drm-driver: vkms"),
        "{info}"
    );
}
