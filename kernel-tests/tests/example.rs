//! Runs drm-gem's crate-level example (`drm-gem/examples/share.rs`, the same file the crate
//! docs show) in the guest, where it must find a pair of devices and share real bytes.

#[path = "../../drm-gem/examples/share.rs"]
mod share;

#[test]
fn crate_example_shares_a_buffer_between_two_devices() {
    if drm_gem::enumerate().is_err() {
        kernel_tests::skip!("no DRM nodes");
    }
    share::main().expect("the crate example fails");
}
