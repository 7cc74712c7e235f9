//! `drmtool run` against the job itself and against other users (issue 26), as root over the
//! guest's GPUs, with drmtool's real command line (`drmtool-guest`, this package's binary)
//! where a test binary will not do.
//!
//! - The escape suite: a hostile job, run as user nobody and again `--as-root`, tries every
//!   route out of its GPUs and reports each errno (`hostile_entry`); each must fail as the
//!   threat model in tools/README.md says.
//! - Inherited GPU fds (0-2, `--keep-fd`), the old `DRMTOOL_RUN_CHILD` trigger, a job
//!   cgroup parent a user can write, lease files against user nobody, signals (SIGTERM and
//!   SIGINT reach the job; SIGKILL of the supervisor ends the job and frees its lease).
//! - The shared-server story (users alice and bob, sudo, `cgroup deny-gpus`):
//!   `drmtool_shared_server.rs`.

use drmtool::isolate::lease;

#[macro_use]
mod isolation_common;
use isolation_common::*;

use serde_json::Value;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const HOSTILE_ENV: &str = "DRMTOOL_HOSTILE_OUT";

/// `EPERM`, `ENOENT`, ... for an errno number.
fn name(n: i32) -> String {
    drm_gem::errno_name(rustix::io::Errno::from_raw_os_error(n))
        .map_or_else(|| format!("errno {n}"), str::to_string)
}

fn errno_of(r: std::io::Result<()>) -> String {
    match r {
        Ok(()) => "ok".into(),
        Err(e) => e.raw_os_error().map_or_else(|| e.to_string(), name),
    }
}

fn rx<T>(r: rustix::io::Result<T>) -> std::io::Result<()> {
    r.map(drop).map_err(std::io::Error::from)
}

/// The hostile job: tries each route and writes `{route: errno or "ok"}` as JSON to the
/// file in [`HOSTILE_ENV`]. The routes' targets come in variables the test sets.
#[test]
fn hostile_entry() {
    let Some(out) = std::env::var_os(HOSTILE_ENV) else {
        return;
    };
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let mut r = serde_json::Map::new();
    let mut put = |k: &str, v: String| {
        r.insert(k.into(), Value::from(v));
    };
    // cgroupfs: the job's own namespace root is all it sees; writing itself there moves
    // nothing, and the parent is no cgroup directory at all.
    put(
        "cgroup_root_write",
        errno_of(std::fs::write("/sys/fs/cgroup/cgroup.procs", "0")),
    );
    put(
        "cgroup_after",
        std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default(),
    );
    put(
        "cgroup_parent_write",
        errno_of(std::fs::write("/sys/fs/cgroup/../cgroup.procs", "0")),
    );
    let scratch = PathBuf::from(format!("/tmp/hostile-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&scratch);
    let m = |fs: &str| {
        errno_of(rx(rustix::mount::mount(
            fs,
            &scratch,
            fs,
            rustix::mount::MountFlags::empty(),
            None,
        )))
    };
    put("mount_cgroup2", m("cgroup2"));
    put("mount_devtmpfs", m("devtmpfs"));
    let other: Vec<u32> = var("HOSTILE_OTHER_DEV")
        .split(':')
        .filter_map(|s| s.parse().ok())
        .collect();
    put(
        "mknod_other_gpu",
        errno_of(rx(rustix::fs::mknodat(
            rustix::fs::CWD,
            scratch.join("gpu"),
            rustix::fs::FileType::CharacterDevice,
            rustix::fs::Mode::from_raw_mode(0o666),
            rustix::fs::makedev(other[0], other[1]),
        ))),
    );
    let _ = std::fs::remove_file(scratch.join("gpu"));
    let _ = std::fs::remove_dir(&scratch);
    // BPF: reading the programs (the first step of any detach) is refused.
    put(
        "bpf_query",
        match drmtool::isolate::inspect::inspect(Path::new("/sys/fs/cgroup")) {
            Ok(_) => "ok".into(),
            Err(drmtool::isolate::inspect::InspectError::Bpf { errno, .. }) => {
                name(errno.raw_os_error())
            }
            Err(e) => e.to_string(),
        },
    );
    put(
        "other_gpu_open",
        errno_of(std::fs::File::open(var("HOSTILE_OTHER_NODE")).map(drop)),
    );
    // The fd opened before run (no close-on-exec) is gone.
    put(
        "inherited_fd",
        errno_of(
            std::fs::metadata(format!("/proc/self/fd/{}", var("HOSTILE_INHERITED_FD"))).map(drop),
        ),
    );
    // A process of the same user outside the job: not in this pid namespace.
    let pid: i32 = var("HOSTILE_OUTSIDE_PID").parse().unwrap_or(0);
    put(
        "pidfd_open_outside",
        errno_of(rx(rustix::process::pidfd_open(
            rustix::process::Pid::from_raw(pid).expect("a pid"),
            rustix::process::PidfdFlags::empty(),
        ))),
    );
    put(
        "kill_outside",
        errno_of(rx(rustix::process::test_kill_process(
            rustix::process::Pid::from_raw(pid).expect("a pid"),
        ))),
    );
    // Another GPU's PCI BAR: the file is /dev/null here.
    put(
        "resource_file",
        match rustix::fs::stat(var("HOSTILE_RESOURCE")) {
            Ok(st) => format!(
                "{}:{}",
                rustix::fs::major(st.st_rdev),
                rustix::fs::minor(st.st_rdev)
            ),
            Err(e) => name(e.raw_os_error()),
        },
    );
    let wr = |p: &str| errno_of(std::fs::OpenOptions::new().write(true).open(p).map(drop));
    put("sysfs_write", wr("/sys/bus/pci/rescan"));
    put("proc_sys_write", wr("/proc/sys/kernel/core_pattern"));
    // The lease files: out of sight.
    put(
        "lease_unlink",
        errno_of(std::fs::remove_file(var("HOSTILE_LEASE"))),
    );
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    for key in ["NoNewPrivs", "CapEff", "CapBnd", "CapAmb", "Uid"] {
        let v = status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}:")))
            .unwrap_or("")
            .trim();
        put(key, v.to_string());
    }
    put("pid", std::process::id().to_string());
    std::fs::write(out, Value::Object(r).to_string()).unwrap();
    std::process::exit(0);
}

/// This test binary as a job's command, without the signal storm (a pending SIGALRM would
/// outlive the exec of the job's command).
fn entry(test: &str, env: &[(&str, String)]) -> Vec<std::ffi::OsString> {
    let mut v: Vec<std::ffi::OsString> = vec![
        "env".into(),
        "-u".into(),
        "KERNEL_TESTS_SIGNAL_STORM".into(),
    ];
    v.extend(env.iter().map(|(k, x)| format!("{k}={x}").into()));
    v.push(runnable_copy(&std::env::current_exe().unwrap()).into());
    v.extend(
        [test, "--exact", "--nocapture", "-q", "--test-threads=1"]
            .iter()
            .map(Into::into),
    );
    v
}

/// Every route a hostile job tries, as user nobody and `--as-root`, and the errno each
/// must end in: cgroupfs (its namespace root only; the parent is no cgroup), mounts
/// (EPERM), mknod of another GPU (EPERM), BPF (EPERM), another GPU's node (not in its
/// /dev: ENOENT), an fd opened before run (closed), a process of the same user outside
/// (not in its pid namespace: ESRCH), another GPU's PCI resource file (/dev/null here),
/// sysfs and /proc/sys writes (EACCES as a user, EROFS as root), the lease files (out of
/// sight: ENOENT), no_new_privs and the capability sets.
#[test]
fn a_hostile_job_escapes_by_no_route() {
    let gpus = guest_gpus!();
    let vgem = gpu_of(&gpus, "vgem");
    // The other GPU: a PCI one (it has resource files), whose render node the job must not
    // reach.
    let other = gpu_of(&gpus, "virtio_gpu");
    let other_node = other.render().expect("virtio-gpu has a render node");
    let bus = other.bus_id.clone().expect("virtio-gpu sits on PCI");
    // One of its BARs (virtio-pci's are not always resource0).
    let pci = Path::new("/sys/bus/pci/devices").join(&bus);
    let mut bars: Vec<PathBuf> = std::fs::read_dir(&pci)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix("resource"))
                .is_some_and(|d| d.len() == 1 && d.chars().all(|c| c.is_ascii_digit()))
        })
        .collect();
    bars.sort();
    let bar = bars.first().expect("a PCI GPU has a BAR").clone();
    let dir = scratch("hostile");
    // An fd of the other GPU opened before run, without close-on-exec.
    let inherited = rustix::fs::open(
        &other_node.path,
        rustix::fs::OFlags::RDWR,
        rustix::fs::Mode::empty(),
    )
    .unwrap();
    use rustix::fd::AsRawFd;
    for (who, uid) in [("nobody", 65534u32), ("as-root", 0)] {
        // A process of the job's user outside the job.
        let mut outside = Command::new("sleep");
        outside.arg("60");
        if uid != 0 {
            outside.uid(uid).gid(uid);
        }
        let mut outside = outside.spawn().unwrap();
        let out = dir.join(format!("{who}.json"));
        let env = [
            (HOSTILE_ENV, out.display().to_string()),
            (
                "HOSTILE_OTHER_DEV",
                format!("{}:{}", other_node.dev.0, other_node.dev.1),
            ),
            ("HOSTILE_OTHER_NODE", other_node.path.display().to_string()),
            ("HOSTILE_INHERITED_FD", inherited.as_raw_fd().to_string()),
            ("HOSTILE_OUTSIDE_PID", outside.id().to_string()),
            ("HOSTILE_RESOURCE", bar.display().to_string()),
            (
                "HOSTILE_LEASE",
                lease::dir()
                    .join(format!("{}.lock", lease::key(vgem)))
                    .display()
                    .to_string(),
            ),
        ];
        let argv = entry("hostile_entry", &env);
        let mut args: Vec<String> = vec!["run".into(), "--gpu".into(), "vgem".into()];
        if uid == 0 {
            args.push("--as-root".into());
        } else {
            args.extend(["--user".into(), "nobody".into()]);
        }
        args.push("--".into());
        args.extend(argv.iter().map(|a| a.to_string_lossy().into_owned()));
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, _, err) = run_out(&mut drmtool(&a));
        let _ = outside.kill();
        let _ = outside.wait();
        assert_eq!(code, 0, "{who}: {err}");
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        eprintln!("{who}: {v}");
        let want = |k: &str, e: &str| assert_eq!(v[k], e, "{who}: {k}: {v}");
        // Writing itself into its own (namespace root) cgroup moves nothing.
        want("cgroup_after", "0::/\n");
        // The parent of the namespace's cgroupfs is the read-only sysfs: no cgroup there.
        want("cgroup_parent_write", "EROFS");
        want("mount_cgroup2", "EPERM");
        want("mount_devtmpfs", "EPERM");
        want("mknod_other_gpu", "EPERM");
        want("bpf_query", "EPERM");
        want("other_gpu_open", "ENOENT");
        want("inherited_fd", "ENOENT");
        want("pidfd_open_outside", "ESRCH");
        want("kill_outside", "ESRCH");
        want("resource_file", "1:3");
        // The lease directory is an empty read-only tmpfs in the job.
        want("lease_unlink", "EROFS");
        want("NoNewPrivs", "1");
        want("CapAmb", "0000000000000000");
        if uid == 0 {
            want("sysfs_write", "EROFS");
            want("proc_sys_write", "EROFS");
            let keep = drmtool::isolate::job::root_keep_mask();
            want("CapEff", &format!("{keep:016x}"));
            want("CapBnd", &format!("{keep:016x}"));
            assert!(v["Uid"].as_str().unwrap().starts_with("0\t"), "{v}");
        } else {
            want("sysfs_write", "EACCES");
            want("proc_sys_write", "EACCES");
            want("CapEff", "0000000000000000");
            assert!(
                v["Uid"]
                    .as_str()
                    .unwrap()
                    .starts_with("65534\t65534\t65534\t65534"),
                "{v}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// fds the job would inherit that are GPU nodes outside it are refused before anything is
/// set up: stdin (`run ... < /dev/dri/renderD129`) and `--keep-fd`, exit 2. A kept fd of
/// the job's own GPU is allowed.
#[test]
fn inherited_gpu_fds_outside_the_job_are_refused() {
    let gpus = guest_gpus!();
    let vgem = gpu_of(&gpus, "vgem");
    let other = gpu_of(&gpus, "virtio_gpu").render().unwrap().path.clone();
    let mine = vgem.render().unwrap().path.clone();
    let stdin = std::fs::File::options()
        .read(true)
        .write(true)
        .open(&other)
        .unwrap();
    let o = drmtool(&["run", "--as-root", "--gpu", "vgem", "--", "true"])
        .stdin(stdin)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("fd 0 is a GPU node outside the job"), "{err}");
    // --keep-fd: a node of another GPU is refused, one of the job's own is kept.
    for (node, ok) in [(&other, false), (&mine, true)] {
        let f =
            rustix::fs::open(node, rustix::fs::OFlags::RDWR, rustix::fs::Mode::empty()).unwrap();
        use rustix::fd::AsRawFd;
        let n = f.as_raw_fd().to_string();
        let script = format!("test -e /proc/self/fd/{n}");
        let (code, _, err) = run_out(&mut drmtool(&[
            "run",
            "--as-root",
            "--gpu",
            "vgem",
            "--keep-fd",
            &n,
            "--",
            "sh",
            "-c",
            &script,
        ]));
        if ok {
            assert_eq!(code, 0, "{err}");
        } else {
            assert_eq!(code, 2, "{err}");
            assert!(
                err.contains(&format!("fd {n} is a GPU node outside the job")),
                "{err}"
            );
        }
    }
}

/// `DRMTOOL_RUN_CHILD` (which made any drmtool invocation run a job description as root)
/// is nobody's trigger now: with a description in it, `drmtool devices` lists the devices
/// and the description's command never runs.
#[test]
fn drmtool_run_child_in_the_environment_runs_nothing() {
    let _gpus = guest_gpus!();
    let dir = scratch("runchild");
    let marker = dir.join("ran");
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let job = format!(
        "v1;{};;{},{}",
        hex(b"/sys/fs/cgroup"),
        hex(b"touch"),
        hex(marker.to_str().unwrap().as_bytes())
    );
    let (code, out, err) = run_out(drmtool(&["devices"]).env("DRMTOOL_RUN_CHILD", &job));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("vgem"), "{out}");
    assert!(!marker.exists(), "the description ran");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A job cgroup parent that a non-root user can write (a cgroup delegated to nobody, as
/// systemd's Delegate= leaves it) is refused with the reason, exit 125, and nothing runs.
#[test]
fn a_parent_a_user_can_write_is_refused() {
    let _gpus = guest_gpus!();
    let name = format!("drmtool-test-deleg-{}", std::process::id());
    let d = Path::new("/sys/fs/cgroup").join(&name);
    kernel_tests::delegated_cgroup(&d, 65534);
    let dir = scratch("deleg");
    let marker = dir.join("ran");
    let (code, _, err) = run_out(&mut drmtool(&[
        "run",
        "--as-root",
        "--gpu",
        "vgem",
        "--cgroup-parent",
        &name,
        "--",
        "touch",
        marker.to_str().unwrap(),
    ]));
    let made: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .collect();
    let _ = std::fs::remove_dir(&d);
    assert_eq!(code, 125, "{err}");
    assert!(
        err.contains("not owned by root") && err.contains("only root can write"),
        "{err}"
    );
    assert!(!marker.exists());
    assert!(made.is_empty(), "{made:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `cmd` as nobody (setpriv, no capabilities).
fn as_nobody(script: &str) -> (i32, String) {
    let o = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "sh",
            "-c",
            script,
        ])
        .env_remove("KERNEL_TESTS_SIGNAL_STORM")
        .output()
        .expect("setpriv (util-linux)");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
    )
}

/// A started supervisor, killed (SIGKILL: its whole job goes with it) and reaped on drop.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `drmtool run --user nobody --gpu vgem -- sh -c SCRIPT`, started (the supervisor).
fn nobody_job(script: &str) -> std::process::Child {
    drmtool(&[
        "run", "--user", "nobody", "--gpu", "vgem", "--", "sh", "-c", script,
    ])
    .stdin(Stdio::null())
    .spawn()
    .expect("drmtool-guest")
}

/// The lease JSON of `key` from `drmtool leases --json` run as `nobody` or root.
fn lease_of(key: &str, unprivileged: bool) -> Option<Value> {
    let text = if unprivileged {
        let bin = runnable_copy(Path::new(DRMTOOL));
        let (code, out) = as_nobody(&format!("{} leases --json", bin.display()));
        assert_eq!(code, 0, "{out}");
        out
    } else {
        run_out(&mut drmtool(&["leases", "--json"])).1
    };
    let v: Value = serde_json::from_str(&text).ok()?;
    v["leases"]
        .as_array()?
        .iter()
        .find(|l| l["device"] == key)
        .cloned()
}

/// Lease files against user nobody: the directory is root's and 0755, the files 0600, so
/// nobody cannot create, lock (flock needs an open fd) or delete one, and `run --pick` is
/// not blocked by anything nobody does; nobody still reads who holds what (from
/// /proc/locks and the job's 0644 record): the holder's pid, user and command. While a
/// job holds vgem, `run --gpu vgem` (which takes the same lease) exits 5.
#[test]
fn leases_cannot_be_forged_or_removed_by_another_user() {
    let gpus = guest_gpus!();
    let vgem = gpu_of(&gpus, "vgem");
    let key = lease::key(vgem);
    let d = lease::dir();
    let lock = d.join(format!("{key}.lock"));
    // A job takes (and so makes) the lease, then holds it until it is killed below (or,
    // should an assertion fail first, when the guard drops): a job that ended by itself
    // part-way (CI, 2026-12-06: `sleep 30` over a 39 s test beside other guests) would
    // free the lease under the checks that need it held.
    let holder = KillOnDrop(
        drmtool(&["run", "--as-root", "--gpu", "vgem", "--", "sleep", "900"])
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert!(
        until(30, || lease_of(&key, false).is_some()),
        "no lease listed"
    );
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(&lock).unwrap();
    assert_eq!((m.uid(), m.mode() & 0o7777), (0, 0o600));
    let dm = std::fs::metadata(&d).unwrap();
    assert_eq!((dm.uid(), dm.mode() & 0o7777), (0, 0o755));
    let l = lease_of(&key, true).expect("nobody sees the lease");
    assert_eq!(l["pid"], i64::from(holder.0.id()), "{l}");
    assert_eq!(l["user"], "root", "{l}");
    assert_eq!(l["command"], "sleep 900", "{l}");
    assert!(
        l["cgroup"]
            .as_str()
            .unwrap()
            .contains("/drmtool.slice/run-"),
        "{l}"
    );
    // Another run of the same GPU: exit 5, naming the lease.
    let (code, _, err) = run_out(&mut drmtool(&[
        "run",
        "--as-root",
        "--gpu",
        "vgem",
        "--",
        "true",
    ]));
    assert_eq!(code, 5, "{err}");
    assert!(err.contains("is leased by another job"), "{err}");
    drop(holder);
    assert!(
        until(30, || lease_of(&key, false).is_none()),
        "the lease stayed"
    );
    // nobody: no lock, no new file, no delete.
    let l = lock.display();
    let (code, out) = as_nobody(&format!("flock -n {l} true"));
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("Permission denied"), "{out}");
    let (code, out) = as_nobody(&format!(
        "touch {}/{key}.slot0 {}/x.lock",
        d.display(),
        d.display()
    ));
    assert_ne!(code, 0, "{out}");
    let (code, out) = as_nobody(&format!("rm -f {l}"));
    assert_ne!(code, 0, "{out}");
    assert!(lock.exists());
    let (code, _, err) = run_out(&mut drmtool(&[
        "run",
        "--as-root",
        "--pick",
        "1",
        "--gpu",
        "vgem",
        "--",
        "true",
    ]));
    assert_eq!(code, 0, "{err}");
}

/// SIGTERM and SIGINT sent to the supervisor reach the job (which traps them and exits 0,
/// the supervisor with it); SIGKILL of the supervisor ends the whole job (its pid
/// namespace) and frees the lease.
#[test]
fn signals_reach_the_job_and_the_job_dies_with_its_supervisor() {
    let gpus = guest_gpus!();
    let key = lease::key(gpu_of(&gpus, "vgem"));
    let dir = scratch("signals");
    for sig in [rustix::process::Signal::TERM, rustix::process::Signal::INT] {
        let got = dir.join(format!("got-{}", sig.as_raw()));
        let ready = dir.join(format!("ready-{}", sig.as_raw()));
        let script = format!(
            "trap 'echo got > {}; exit 0' TERM INT; touch {}; while :; do sleep 0.05; done",
            got.display(),
            ready.display()
        );
        let mut sup = nobody_job(&script);
        assert!(until(30, || ready.exists()), "the job never started");
        signal(i64::from(sup.id()), sig);
        let st = sup.wait().unwrap();
        assert!(got.exists(), "{sig:?} did not reach the job");
        assert_eq!(st.code(), Some(0), "{sig:?}: the job's status comes back");
    }
    let pidfile = dir.join("jobpid");
    let script = format!("sleep 300 & echo $! > {}; wait", pidfile.display());
    let mut sup = nobody_job(&script);
    assert!(until(30, || lease_of(&key, false).is_some() && pidfile.exists()));
    // The job's processes as the guest sees them: nobody's sleep 300.
    let sleepers = || -> Vec<String> {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| {
                std::fs::read_to_string(e.path().join("cmdline"))
                    .is_ok_and(|c| c == "sleep\x00300\x00")
            })
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    };
    // The pid file is written when sh has forked, which may be before the child has
    // exec'd sleep (stock-6.1 under load once read sh's cmdline there): wait for the exec.
    assert!(
        until(30, || sleepers().len() == 1),
        "no one sleep 300: {:?}",
        sleepers()
    );
    signal(i64::from(sup.id()), rustix::process::Signal::KILL);
    sup.wait().unwrap();
    assert!(
        until(30, || sleepers().is_empty()),
        "the job outlived its supervisor: {:?}",
        sleepers()
    );
    assert!(
        until(30, || lease_of(&key, false).is_none()),
        "the lease stayed"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
