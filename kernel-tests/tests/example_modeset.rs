//! Runs drm-gem's KMS example (`drm-gem/examples/modeset.rs`) in the guest, where it must
//! light a display and see the flip event.

#[path = "../../drm-gem/examples/modeset.rs"]
mod modeset;

#[test]
fn kms_example_lights_a_display() {
    if drm_gem::enumerate().is_err() {
        kernel_tests::skip!("no DRM nodes");
    }
    modeset::main().expect("the KMS example fails");
}
