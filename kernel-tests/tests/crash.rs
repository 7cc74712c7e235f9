//! Deliberate kernel crashes, for `vm test`'s oops recovery (scripts/guest-oops): each test
//! crashes the guest kernel (`c` to /proc/sysrq-trigger: a panic, with `oops=panic` the
//! same end as a driver's oops) when `KERNEL_TESTS_CRASH_AT` names it (a comma-separated
//! list of test names), hangs the guest when `KERNEL_TESTS_HANG_AT` names it (a
//! `SCHED_FIFO` busy loop on every CPU with RT throttling off: no ordinary task runs again,
//! the heartbeat of the guest's init included, as in a kernel deadlock), and passes
//! otherwise.
//!
//! Not part of the suite: the target is `test = false` in Cargo.toml, so `cargo test` and a
//! plain `vm test` never build it; `vm test --test crash` does. It refuses to crash
//! anything but a `vm` guest (VM_GUEST=1 and the harness's kernel command line), so the
//! variable set on a host fails the test instead of crashing the host.

use std::time::Duration;

/// Whether the comma-separated list in `var` names `test`.
fn asked(var: &str, test: &str) -> bool {
    std::env::var(var).is_ok_and(|at| at.split(',').any(|t| t.trim() == test))
}

/// Hangs the guest if `KERNEL_TESTS_HANG_AT` names `test`: one `SCHED_FIFO` 99 busy loop
/// pinned to each online CPU (chrt and taskset of util-linux), with RT throttling and the
/// fair server off, so no `SCHED_OTHER` task is scheduled again. The harness must notice the silent heartbeat,
/// inject its NMI and report the hang.
fn hang_if_asked(test: &str) {
    if !asked("KERNEL_TESTS_HANG_AT", test) {
        return;
    }
    refuse_outside_a_guest("KERNEL_TESTS_HANG_AT");
    std::fs::write("/proc/sys/kernel/sched_rt_runtime_us", b"-1")
        .expect("write -1 to /proc/sys/kernel/sched_rt_runtime_us");
    // 6.12 and later also run ordinary tasks from a deadline server (the fair server,
    // 50 ms a second per CPU) whatever the RT settings: its runtime goes to 0 too.
    if let Ok(cpus) = std::fs::read_dir("/sys/kernel/debug/sched/fair_server") {
        for c in cpus.flatten() {
            let f = c.path().join("runtime");
            std::fs::write(&f, b"0").unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        }
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    eprintln!("crash: {test}: a SCHED_FIFO busy loop on each of {cpus} CPU(s)");
    for cpu in 0..cpus {
        // Never waited for: the loops are the hang, and the guest is cut off under them.
        #[allow(clippy::zombie_processes)]
        std::process::Command::new("chrt")
            .args(["-f", "99", "taskset", "-c", &cpu.to_string()])
            .args(["sh", "-c", "while :; do :; done"])
            .spawn()
            .expect("start chrt -f 99 taskset ... sh");
    }
    std::thread::sleep(Duration::from_secs(600));
    panic!("the guest ran on for 600 s with every CPU taken by a SCHED_FIFO loop");
}

/// Crashes the guest kernel if `KERNEL_TESTS_CRASH_AT` names `test`.
fn crash_if_asked(test: &str) {
    if !asked("KERNEL_TESTS_CRASH_AT", test) {
        return;
    }
    refuse_outside_a_guest("KERNEL_TESTS_CRASH_AT");
    eprintln!("crash: {test}: writing c to /proc/sysrq-trigger");
    std::fs::write("/proc/sysrq-trigger", b"c").expect("write c to /proc/sysrq-trigger");
    // sysrq c does not return; a kernel that goes on has no crash trigger.
    std::thread::sleep(Duration::from_secs(30));
    panic!("the kernel survived sysrq c");
}

/// Fails the test unless this is a `vm` guest (so the variable set on a host fails instead
/// of crashing or hanging the host).
fn refuse_outside_a_guest(var: &str) {
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    let harness = cmdline.split_whitespace().any(|w| w == "rdinit=/init")
        && cmdline.split_whitespace().any(|w| w == "oops=panic");
    assert!(
        kernel_tests::in_guest() && harness,
        "{var}: refusing to crash or hang a kernel that is not a vm guest \
         (VM_GUEST unset or /proc/cmdline {cmdline:?})"
    );
}

#[test]
fn point_a() {
    crash_if_asked("point_a");
    hang_if_asked("point_a");
}

#[test]
fn point_b() {
    crash_if_asked("point_b");
    hang_if_asked("point_b");
}

#[test]
fn point_c() {
    crash_if_asked("point_c");
    hang_if_asked("point_c");
}

#[test]
fn point_d() {
    crash_if_asked("point_d");
    hang_if_asked("point_d");
}
