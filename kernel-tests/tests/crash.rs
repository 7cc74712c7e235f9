//! Deliberate kernel crashes, for `vm test`'s oops recovery (scripts/guest-oops): each test
//! crashes the guest kernel (`c` to /proc/sysrq-trigger: a panic, with `oops=panic` the
//! same end as a driver's oops) when `KERNEL_TESTS_CRASH_AT` names it (a comma-separated
//! list of test names), and passes otherwise.
//!
//! Not part of the suite: the target is `test = false` in Cargo.toml, so `cargo test` and a
//! plain `vm test` never build it; `vm test --test crash` does. It refuses to crash
//! anything but a `vm` guest (VM_GUEST=1 and the harness's kernel command line), so the
//! variable set on a host fails the test instead of crashing the host.

use std::time::Duration;

/// Crashes the guest kernel if `KERNEL_TESTS_CRASH_AT` names `test`.
fn crash_if_asked(test: &str) {
    let Ok(at) = std::env::var("KERNEL_TESTS_CRASH_AT") else {
        return;
    };
    if !at.split(',').any(|t| t.trim() == test) {
        return;
    }
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    let harness = cmdline.split_whitespace().any(|w| w == "rdinit=/init")
        && cmdline.split_whitespace().any(|w| w == "oops=panic");
    assert!(
        kernel_tests::in_guest() && harness,
        "KERNEL_TESTS_CRASH_AT={at}: refusing to crash a kernel that is not a vm guest \
         (VM_GUEST unset or /proc/cmdline {cmdline:?})"
    );
    eprintln!("crash: {test}: writing c to /proc/sysrq-trigger");
    std::fs::write("/proc/sysrq-trigger", b"c").expect("write c to /proc/sysrq-trigger");
    // sysrq c does not return; a kernel that goes on has no crash trigger.
    std::thread::sleep(Duration::from_secs(30));
    panic!("the kernel survived sysrq c");
}

#[test]
fn point_a() {
    crash_if_asked("point_a");
}

#[test]
fn point_b() {
    crash_if_asked("point_b");
}

#[test]
fn point_c() {
    crash_if_asked("point_c");
}

#[test]
fn point_d() {
    crash_if_asked("point_d");
}
