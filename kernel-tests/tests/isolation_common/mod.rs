//! What `drmtool_isolation.rs` and `drmtool_shared_server.rs` share (`#[macro_use] mod
//! isolation_common;`): drmtool's real command line as a child process, copies every user
//! can run, scratch directories, the guest's GPUs.
#![allow(dead_code, unused_macros)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// drmtool's command line (this package's `drmtool-guest` binary).
pub const DRMTOOL: &str = env!("CARGO_BIN_EXE_drmtool-guest");

/// Where the sudoers rule and the users' sudo calls find it: [`runnable_copy`]'s copy
/// (every user can reach it, wherever the checkout is).
pub const SUDO_DRMTOOL: &str = "/tmp/drmtool-iso-bin/drmtool-guest";

macro_rules! guest_gpus {
    () => {{
        if !kernel_tests::in_guest() {
            kernel_tests::skip!(
                "not in a vm guest: no DRM devices or cgroup v2 to isolate with here"
            );
        }
        drmtool::gpu::gpus().expect("the guest has DRM devices")
    }};
}

pub fn gpu_of<'g>(gpus: &'g [drmtool::gpu::Gpu], driver: &str) -> &'g drmtool::gpu::Gpu {
    gpus.iter()
        .find(|g| g.driver.as_deref() == Some(driver))
        .unwrap_or_else(|| panic!("no {driver} in {}", drmtool::gpu::summary(gpus)))
}

/// A copy of `exe` that every user may run, in the guest's /tmp: the checkout may sit
/// where other users cannot reach (a 0700 home), and the jobs of user nobody run it. Not
/// std::fs::copy: under the signal storm its copy_file_range path hands EINTR back;
/// fs::read and fs::write resume.
pub fn runnable_copy(exe: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = PathBuf::from("/tmp/drmtool-iso-bin");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let to = dir.join(exe.file_name().unwrap());
    if !to.exists() {
        let tmp = dir.join(format!(".partial-{}", std::process::id()));
        std::fs::write(&tmp, std::fs::read(exe).unwrap()).unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&tmp, &to).unwrap();
    }
    to
}

/// A directory every user may write, for job reports.
pub fn scratch(tag: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let d = PathBuf::from(format!("/tmp/drmtool-iso-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
    d
}

/// drmtool's command line as a child process.
pub fn drmtool(args: &[&str]) -> Command {
    let mut c = Command::new(DRMTOOL);
    c.args(args).env_remove("KERNEL_TESTS_SIGNAL_STORM");
    c
}

/// The exit status of a finished command, with its stderr for messages.
pub fn run_out(c: &mut Command) -> (i32, String, String) {
    let o = c.stdin(Stdio::null()).output().expect("drmtool-guest");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Sends `sig` to the process `pid` (a supervisor).
pub fn signal(pid: i64, sig: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(i32::try_from(pid).expect("a pid")).expect("a pid");
    rustix::process::kill_process(pid, sig).expect("kill");
}

/// Waits until `f` is true (up to `secs`).
pub fn until(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}
