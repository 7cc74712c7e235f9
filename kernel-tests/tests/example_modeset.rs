//! Runs drm-gem's KMS examples (`drm-gem/examples/modeset.rs`, and `quickstart.rs`, the
//! crate-level doc example) in the guest, where each must light a display and see the flip
//! event.

#[path = "../../drm-gem/examples/modeset.rs"]
mod modeset;
#[path = "../../drm-gem/examples/quickstart.rs"]
mod quickstart;
#[path = "../../drm-gem/examples/swapchain.rs"]
mod swapchain;

#[test]
fn arc_swapchain_example_flips() {
    if drm_gem::Device::open_driver("vkms", Some(drm_gem::NodeKind::Primary)).is_err() {
        kernel_tests::skip!("no vkms node");
    }
    swapchain::main().expect("the Arc<Device> swapchain example fails");
}

#[test]
fn crate_doc_quickstart_lights_vkms() {
    if drm_gem::Device::open_driver("vkms", Some(drm_gem::NodeKind::Primary)).is_err() {
        kernel_tests::skip!("no vkms node");
    }
    quickstart::main().expect("the crate-level quickstart fails");
}

#[test]
fn kms_example_lights_a_display() {
    if drm_gem::enumerate().is_err() {
        kernel_tests::skip!("no DRM nodes");
    }
    modeset::main().expect("the KMS example fails");
}
