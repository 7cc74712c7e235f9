//! The job's side of `drmtool run`: what runs between `clone3` and the command's `exec`.
//!
//! The supervisor ([`super::run`]) prepares a [`JobPlan`] (every path, node, id and the
//! exec image, allocated up front) and clones itself with `CLONE_INTO_CGROUP` (the job's
//! cgroup, by its directory fd) and new pid and mount namespaces. The clone is the job's
//! init (pid 1 of the namespace), which never execs:
//!
//! 1. `PR_SET_PDEATHSIG(SIGKILL)`, then waits for the supervisor's go byte (EOF: the
//!    supervisor died before the death signal was armed: exit);
//! 2. `unshare(CLONE_NEWCGROUP)` (rooted at the job's cgroup, which it is already in);
//! 3. the mount steps: `/` private, a read-only sysfs with the cgroup2 of its namespace,
//!    its own /proc, /proc/sys read-only, a private /dev (tmpfs) with only the chosen GPU
//!    nodes and the plain devices, other GPUs' PCI resource files hidden;
//! 4. forks the command's process, which closes every fd but 0-2 and `--keep-fd`, takes
//!    the job's user (`setgroups`, `setresgid`, `setresuid`) or, for `--as-root`, drops
//!    capabilities from every set, sets `PR_SET_NO_NEW_PRIVS`, resets signals and execs;
//! 5. forwards SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 (those a process sent,
//!    not the terminal's, which reach the command directly) to the command, reaps orphans,
//!    and when the command ends kills what is left of the namespace and exits with the
//!    command's status (128 + the signal when it was killed).
//!
//! A failing step writes its index and errno to the error pipe (close-on-exec, so EOF
//! there means the exec happened) and the process exits [`EXIT_SETUP`]; nothing here
//! allocates, prints or panics (a clone of a multi-threaded process). A timed run
//! ([`JobPlan::timed`]) also writes a [`mark`] record at each phase boundary, with its
//! `CLOCK_MONOTONIC` time.

use crate::sys_call::{self, ExecImage, SigSet};
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::Mode;
use rustix::mount::{MountFlags, MountPropagationFlags};
use std::ffi::CString;

/// Exit status when the isolation could not be set up (as `env`/`chroot` use 125).
pub const EXIT_SETUP: u8 = 125;

/// The signals the supervisor and the init forward to the command.
pub const FORWARDED: [i32; 6] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// Capabilities a `--as-root` job keeps (Docker's default set without MKNOD and NET_RAW):
/// CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, SETGID, SETUID, SETPCAP, NET_BIND_SERVICE,
/// SYS_CHROOT, AUDIT_WRITE, SETFCAP. Every other one (SYS_ADMIN, BPF, NET_ADMIN, MKNOD,
/// SYS_PTRACE, SYS_RAWIO, SYS_MODULE, DAC_READ_SEARCH, PERFMON, CHECKPOINT_RESTORE, ...)
/// leaves the bounding, permitted, effective, inheritable and ambient sets.
pub const ROOT_KEEPS: [u32; 12] = [0, 1, 3, 4, 5, 6, 7, 8, 10, 18, 29, 31];

/// The highest capability number tried when dropping (unknown ones answer EINVAL).
const LAST_CAP: u32 = 63;

/// One mount-namespace step of the init.
#[derive(Debug)]
pub enum Step {
    /// `mount(src, target, fstype, flags, data)`.
    Mount {
        /// Source (`tmpfs`, `proc`, ...).
        src: CString,
        /// Mount point.
        target: CString,
        /// File system type.
        fstype: CString,
        /// Flags.
        flags: MountFlags,
        /// Options.
        data: CString,
    },
    /// A bind mount of `src` on `target`, made read-only when `readonly`.
    Bind {
        /// What is bound.
        src: CString,
        /// Where.
        target: CString,
        /// Remount it read-only.
        readonly: bool,
        /// With the mounts under `src` (`MS_REC`).
        recursive: bool,
    },
    /// `mkdir(path, mode)` (then `chmod`, the umask aside).
    Mkdir {
        /// The directory.
        path: CString,
        /// Its mode.
        mode: u32,
    },
    /// A character device node, its mode and owner.
    Mknod {
        /// The node.
        path: CString,
        /// Major, minor.
        dev: (u32, u32),
        /// Permission bits.
        mode: u32,
        /// Owner and group.
        owner: (u32, u32),
    },
    /// A bind mount of the path [`JobPlan::held`]`[index]` (opened `O_PATH` by the init
    /// before any step, so that a directory the new /dev covers can still be bound).
    BindHeld {
        /// Index into the held paths.
        index: usize,
        /// Where.
        target: CString,
    },
    /// `umount2(target, MNT_DETACH)`: the mount and every mount under it leave this
    /// namespace.
    Detach {
        /// The mount point.
        target: CString,
    },
    /// `symlink(target, link)`.
    Symlink {
        /// What the link says.
        target: CString,
        /// The link.
        link: CString,
    },
}

impl Step {
    /// What the step does, for a failure message.
    pub fn describe(&self) -> String {
        let s = |c: &CString| c.to_string_lossy().into_owned();
        match self {
            Step::Mount { fstype, target, .. } => format!("mount {} on {}", s(fstype), s(target)),
            Step::Bind {
                src,
                target,
                readonly,
                ..
            } => format!(
                "bind {} on {}{}",
                s(src),
                s(target),
                if *readonly { " read-only" } else { "" }
            ),
            Step::Mkdir { path, .. } => format!("mkdir {}", s(path)),
            Step::Mknod { path, dev, .. } => format!("mknod {} ({}:{})", s(path), dev.0, dev.1),
            Step::Symlink { link, .. } => format!("symlink {}", s(link)),
            Step::Detach { target } => format!("umount {}", s(target)),
            Step::BindHeld { index, target } => format!("bind held path {index} on {}", s(target)),
        }
    }

    fn apply(&self, held: &[Option<OwnedFd>]) -> Result<(), rustix::io::Errno> {
        match self {
            Step::BindHeld { index, target } => {
                use rustix::fd::AsRawFd;
                let fd = held
                    .get(*index)
                    .and_then(Option::as_ref)
                    .ok_or(rustix::io::Errno::BADF)?;
                let mut buf = [0u8; 32];
                let path = fd_path(fd.as_raw_fd(), &mut buf);
                rustix::mount::mount_bind_recursive(path, target.as_c_str())
            }
            Step::Mount {
                src,
                target,
                fstype,
                flags,
                data,
            } => match rustix::mount::mount(
                src.as_c_str(),
                target.as_c_str(),
                fstype.as_c_str(),
                *flags,
                Some(data.as_c_str()),
            ) {
                // A kernel built without ptys or POSIX message queues: the job has none.
                Err(rustix::io::Errno::NODEV)
                    if fstype.as_c_str() == c"devpts" || fstype.as_c_str() == c"mqueue" =>
                {
                    Ok(())
                }
                r => r,
            },
            Step::Bind {
                src,
                target,
                readonly,
                recursive,
            } => {
                if *recursive {
                    rustix::mount::mount_bind_recursive(src.as_c_str(), target.as_c_str())?;
                } else {
                    rustix::mount::mount_bind(src.as_c_str(), target.as_c_str())?;
                }
                if *readonly {
                    rustix::mount::mount_remount(
                        target.as_c_str(),
                        MountFlags::BIND
                            | MountFlags::RDONLY
                            | MountFlags::NOSUID
                            | MountFlags::NODEV,
                        c"",
                    )?;
                }
                Ok(())
            }
            Step::Mkdir { path, mode } => {
                rustix::fs::mkdir(path.as_c_str(), Mode::from_raw_mode(*mode))?;
                rustix::fs::chmod(path.as_c_str(), Mode::from_raw_mode(*mode))
            }
            Step::Mknod {
                path,
                dev,
                mode,
                owner,
            } => {
                rustix::fs::mknodat(
                    rustix::fs::CWD,
                    path.as_c_str(),
                    rustix::fs::FileType::CharacterDevice,
                    Mode::from_raw_mode(*mode),
                    rustix::fs::makedev(dev.0, dev.1),
                )?;
                rustix::fs::chmod(path.as_c_str(), Mode::from_raw_mode(*mode))?;
                rustix::fs::chown(
                    path.as_c_str(),
                    Some(rustix::process::Uid::from_raw(owner.0)),
                    Some(rustix::process::Gid::from_raw(owner.1)),
                )
            }
            Step::Symlink { target, link } => {
                rustix::fs::symlink(target.as_c_str(), link.as_c_str())
            }
            Step::Detach { target } => {
                rustix::mount::unmount(target.as_c_str(), rustix::mount::UnmountFlags::DETACH)
            }
        }
    }
}

/// Who the command's process becomes.
#[derive(Debug, Clone)]
pub enum Identity {
    /// A user: groups, gid, uid (all three real, effective and saved).
    User {
        /// User id (not 0).
        uid: u32,
        /// Group id.
        gid: u32,
        /// Supplementary groups.
        groups: Vec<rustix::process::Gid>,
    },
    /// Root with [`ROOT_KEEPS`] only.
    Root,
}

/// `/proc/self/fd/<fd>` in `buf`, without allocating.
fn fd_path(fd: i32, buf: &mut [u8; 32]) -> &std::ffi::CStr {
    let prefix = b"/proc/self/fd/";
    buf[..prefix.len()].copy_from_slice(prefix);
    let mut digits = [0u8; 10];
    let mut n = fd.unsigned_abs();
    let mut k = 0;
    loop {
        digits[k] = b'0' + (n % 10) as u8;
        n /= 10;
        k += 1;
        if n == 0 || k == digits.len() {
            break;
        }
    }
    let mut at = prefix.len();
    for i in (0..k).rev() {
        buf[at] = digits[i];
        at += 1;
    }
    buf[at] = 0;
    std::ffi::CStr::from_bytes_with_nul(&buf[..=at]).unwrap_or(c"/")
}

/// Most paths [`JobPlan::held`] may name.
pub const MAX_HELD: usize = 4;

/// Everything the init and the command's process need, built before the clone.
#[derive(Debug)]
pub struct JobPlan {
    /// Host paths the init opens (`O_PATH`) before its first step, for
    /// [`Step::BindHeld`]; at most [`MAX_HELD`].
    pub held: Vec<CString>,
    /// The mount steps, in order.
    pub steps: Vec<Step>,
    /// The command's identity.
    pub identity: Identity,
    /// Fds the command keeps (0-2 and `--keep-fd`; ascending). The error pipe is added
    /// by [`init_main`] (it is close-on-exec).
    pub keep_fds: Vec<i32>,
    /// The command.
    pub exec: ExecImage,
    /// Write a [`mark`] record with the time at each phase boundary into the error pipe
    /// (`run`'s start-up breakdown); off, nothing more is written.
    pub timed: bool,
}

/// The phase marks of a timed job ([`JobPlan::timed`]) in the error pipe's records, beside
/// the step numbers of failures.
pub mod mark {
    /// The init's first instruction after `clone3`.
    pub const INIT: u32 = 1 << 21;
    /// The go byte read.
    pub const GO: u32 = INIT + 1;
    /// The cgroup namespace, private propagation, held paths open.
    pub const NAMESPACES: u32 = INIT + 2;
    /// Every mount step done.
    pub const MOUNTS: u32 = INIT + 3;
    /// The command's process's first instruction.
    pub const COMMAND: u32 = INIT + 4;
    /// Inherited fds closed.
    pub const FDS: u32 = INIT + 5;
    /// The job's user taken, or a root job's capabilities dropped.
    pub const IDENTITY: u32 = INIT + 6;
    /// Right before `execve`.
    pub const EXEC: u32 = INIT + 7;
}

/// Step numbers past the mount steps, in the error pipe's records.
pub mod phase {
    /// `PR_SET_PDEATHSIG`.
    pub const DEATH_SIGNAL: u32 = 1 << 20;
    /// `unshare(CLONE_NEWCGROUP)`.
    pub const CGROUP_NS: u32 = DEATH_SIGNAL + 1;
    /// Forking the command's process.
    pub const FORK: u32 = DEATH_SIGNAL + 2;
    /// Closing inherited fds.
    pub const CLOSE_FDS: u32 = DEATH_SIGNAL + 3;
    /// `setgroups`.
    pub const GROUPS: u32 = DEATH_SIGNAL + 4;
    /// `setresgid`.
    pub const GID: u32 = DEATH_SIGNAL + 5;
    /// `setresuid`.
    pub const UID: u32 = DEATH_SIGNAL + 6;
    /// Dropping capabilities.
    pub const CAPS: u32 = DEATH_SIGNAL + 7;
    /// `PR_SET_NO_NEW_PRIVS`.
    pub const NO_NEW_PRIVS: u32 = DEATH_SIGNAL + 8;
    /// `execve`.
    pub const EXEC: u32 = DEATH_SIGNAL + 9;
}

impl JobPlan {
    /// What step `n` of an error record was.
    pub fn describe(&self, n: u32) -> String {
        use phase::*;
        match n {
            DEATH_SIGNAL => "prctl(PR_SET_PDEATHSIG)".into(),
            CGROUP_NS => "unshare(CLONE_NEWCGROUP)".into(),
            FORK => "clone3 of the command's process".into(),
            CLOSE_FDS => "close_range of inherited fds".into(),
            GROUPS => "setgroups".into(),
            GID => "setresgid".into(),
            UID => "setresuid".into(),
            CAPS => "dropping capabilities".into(),
            NO_NEW_PRIVS => "prctl(PR_SET_NO_NEW_PRIVS)".into(),
            EXEC => "execve of the command".into(),
            n => self
                .steps
                .get(n as usize)
                .map_or_else(|| format!("step {n}"), Step::describe),
        }
    }
}

/// One record of the error pipe: step (or [`mark`]), errno (0 for a mark), then
/// `CLOCK_MONOTONIC` in nanoseconds; 16 bytes, written whole (under `PIPE_BUF`).
const RECORD: usize = 16;

/// Reads the error pipe to its end: hands each [`mark`] record (mark, nanoseconds) to
/// `on_mark` and returns the first failure (step, errno), or `None` at EOF (the command
/// was exec'd).
pub fn read_report(
    pipe: &OwnedFd,
    on_mark: &mut dyn FnMut(u32, u64),
) -> Option<(u32, rustix::io::Errno)> {
    loop {
        let mut b = [0u8; RECORD];
        let mut got = 0;
        while got < b.len() {
            match rustix::io::read(pipe, &mut b[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => break,
            }
        }
        if got < b.len() {
            return None;
        }
        let step = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
        let errno = i32::from_ne_bytes([b[4], b[5], b[6], b[7]]);
        let mut ns = [0u8; 8];
        ns.copy_from_slice(&b[8..]);
        let ns = u64::from_ne_bytes(ns);
        if errno == 0 {
            // A mark (a failure always carries its errno); one of another build is skipped.
            if (mark::INIT..=mark::EXEC).contains(&step) {
                on_mark(step, ns);
            }
            continue;
        }
        return Some((step, rustix::io::Errno::from_raw_os_error(errno)));
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds (the vDSO's: no allocation, no syscall where the
/// vDSO serves it).
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(t.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(t.tv_nsec).unwrap_or(0))
}

/// Writes one record (step or [`mark`], errno or 0) with the time now, whole.
pub(crate) fn record(err: &OwnedFd, step: u32, errno: i32) {
    let ns = monotonic_ns();
    let mut b = [0u8; RECORD];
    b[..4].copy_from_slice(&step.to_ne_bytes());
    b[4..8].copy_from_slice(&errno.to_ne_bytes());
    b[8..].copy_from_slice(&ns.to_ne_bytes());
    let _ = rustix::io::write(err, &b);
}

/// A [`mark`] record, when the plan is timed.
fn mark_now(plan: &JobPlan, err: &OwnedFd, m: u32) {
    if plan.timed {
        record(err, m, 0);
    }
}

fn fail(err: &OwnedFd, step: u32, e: rustix::io::Errno) -> ! {
    record(err, step, e.raw_os_error());
    sys_call::exit_now(i32::from(EXIT_SETUP))
}

/// The job's init (pid 1 of its namespace): see the module docs. `go` is the read end of
/// the supervisor's go pipe, `err` the write end of the error pipe. Never returns.
pub fn init_main(plan: &JobPlan, go: OwnedFd, err: OwnedFd) -> ! {
    mark_now(plan, &err, mark::INIT);
    if let Err(e) =
        rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
    {
        fail(&err, phase::DEATH_SIGNAL, e);
    }
    let mut b = [0u8; 1];
    loop {
        match rustix::io::read(&go, &mut b) {
            Ok(1) => break,
            Err(rustix::io::Errno::INTR) => {}
            // The supervisor died before the death signal was armed.
            _ => sys_call::exit_now(i32::from(EXIT_SETUP)),
        }
    }
    drop(go);
    mark_now(plan, &err, mark::GO);
    if let Err(e) = sys_call::unshare_cgroup_namespace() {
        fail(&err, phase::CGROUP_NS, e);
    }
    if let Err(e) = rustix::mount::mount_change(
        "/",
        MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
    ) {
        fail(&err, u32::MAX, e);
    }
    // Opened in the job's mount namespace (a copy of the host's): what the new /dev covers
    // can still be bound from these.
    let mut held: [Option<OwnedFd>; MAX_HELD] = [None, None, None, None];
    for (slot, p) in held.iter_mut().zip(&plan.held) {
        *slot = rustix::fs::open(
            p.as_c_str(),
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok();
    }
    mark_now(plan, &err, mark::NAMESPACES);
    for (i, s) in plan.steps.iter().enumerate() {
        if let Err(e) = s.apply(&held) {
            fail(&err, u32::try_from(i).unwrap_or(u32::MAX), e);
        }
    }
    mark_now(plan, &err, mark::MOUNTS);
    let cmd = match sys_call::clone_job(sys_call::CloneSpec::default()) {
        Ok(sys_call::Cloned::Child) => command_main(plan, &err),
        Ok(sys_call::Cloned::Parent(pid)) => pid,
        Err(e) => fail(&err, phase::FORK, e),
    };
    drop(err);
    reap(cmd.as_raw_nonzero().get())
}

/// The command's process, forked by the init: fds, identity, no_new_privs, exec.
fn command_main(plan: &JobPlan, err: &OwnedFd) -> ! {
    use rustix::fd::AsRawFd;
    mark_now(plan, err, mark::COMMAND);
    let errfd = err.as_fd().as_raw_fd();
    // The keep list with the error pipe, ascending, without allocating.
    let mut keep = [0i32; 68];
    let mut n = 0;
    for &k in plan.keep_fds.iter().chain(std::iter::once(&errfd)) {
        if n < keep.len() {
            keep[n] = k;
            n += 1;
        }
    }
    let keep = &mut keep[..n];
    keep.sort_unstable();
    if let Err(e) = sys_call::close_fds_except(keep) {
        fail(err, phase::CLOSE_FDS, e);
    }
    mark_now(plan, err, mark::FDS);
    match &plan.identity {
        Identity::User { uid, gid, groups } => {
            if let Err(e) = rustix::thread::set_thread_groups(groups) {
                fail(err, phase::GROUPS, e);
            }
            let g = rustix::process::Gid::from_raw(*gid);
            if let Err(e) = rustix::thread::set_thread_res_gid(g, g, g) {
                fail(err, phase::GID, e);
            }
            let u = rustix::process::Uid::from_raw(*uid);
            if let Err(e) = rustix::thread::set_thread_res_uid(u, u, u) {
                fail(err, phase::UID, e);
            }
        }
        Identity::Root => {
            if let Err(e) = drop_root_capabilities() {
                fail(err, phase::CAPS, e);
            }
        }
    }
    mark_now(plan, err, mark::IDENTITY);
    if let Err(e) = rustix::thread::set_no_new_privs(true) {
        fail(err, phase::NO_NEW_PRIVS, e);
    }
    sys_call::reset_signals_for_exec();
    mark_now(plan, err, mark::EXEC);
    let e = sys_call::exec(&plan.exec);
    fail(err, phase::EXEC, e)
}

/// The bit mask of [`ROOT_KEEPS`].
pub fn root_keep_mask() -> u64 {
    ROOT_KEEPS.iter().fold(0u64, |m, &c| m | (1u64 << c))
}

fn drop_root_capabilities() -> Result<(), rustix::io::Errno> {
    let keep = root_keep_mask();
    for cap in 0..=LAST_CAP {
        if keep & (1u64 << cap) != 0 {
            continue;
        }
        match sys_call::drop_bounding_capability(cap) {
            Ok(()) | Err(rustix::io::Errno::INVAL) => {}
            Err(e) => return Err(e),
        }
    }
    rustix::thread::clear_ambient_capability_set()?;
    let mut sets = rustix::thread::capabilities(None)?;
    let k = rustix::thread::CapabilitySet::from_bits_retain(keep);
    sets.effective &= k;
    sets.permitted &= k;
    sets.inheritable &= k;
    rustix::thread::set_capabilities(None, sets)
}

/// The init's loop: forwards signals to `cmd`, reaps, exits with `cmd`'s status.
fn reap(cmd: i32) -> ! {
    let mut set = [0i32; FORWARDED.len() + 1];
    set[..FORWARDED.len()].copy_from_slice(&FORWARDED);
    set[FORWARDED.len()] = libc::SIGCHLD;
    let set = SigSet::of(&set);
    let mut status: Option<i32> = None;
    loop {
        if let Some((sig, code)) =
            sys_call::wait_signal(&set, std::time::Duration::from_millis(500))
            && sig != libc::SIGCHLD
            && code != libc::SI_KERNEL
            && status.is_none()
        {
            let _ = sys_call::send_signal(cmd, sig);
        }
        loop {
            match rustix::process::waitpid(None, rustix::process::WaitOptions::NOHANG) {
                Ok(Some((pid, st))) => {
                    if pid.as_raw_nonzero().get() == cmd {
                        status = Some(match (st.exit_status(), st.terminating_signal()) {
                            (Some(c), _) => c & 0xff,
                            (None, Some(s)) => 128 + s,
                            _ => 1,
                        });
                        // The command is the job: what it left running goes with it.
                        let _ = sys_call::send_signal(-1, libc::SIGKILL);
                    }
                }
                Ok(None) => break,
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => {
                    // ECHILD: nothing left.
                    if let Some(s) = status {
                        sys_call::exit_now(s);
                    }
                    break;
                }
            }
        }
    }
}

/// The job's plain devices: name, major, minor, mode (what a container's /dev holds).
pub const PLAIN_DEVICES: [(&str, u32, u32, u32); 6] = [
    ("null", 1, 3, 0o666),
    ("zero", 1, 5, 0o666),
    ("full", 1, 7, 0o666),
    ("random", 1, 8, 0o666),
    ("urandom", 1, 9, 0o666),
    ("tty", 5, 0, 0o666),
];

/// `CString` of a path (paths with NUL bytes cannot exist, so `None` only for those).
pub fn cpath(p: impl AsRef<std::path::Path>) -> Option<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(p.as_ref().as_os_str().as_bytes()).ok()
}

/// Whether `path` exists (without following a final symlink).
fn exists(path: &str) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// One node the child puts into its `/dev/dri`: the name there, the device number and the
/// original's mode and owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacedNode {
    /// File name in the new `/dev/dri` (`card0`).
    pub name: String,
    /// Char-device major:minor.
    pub dev: (u32, u32),
    /// Permission bits of the original node.
    pub mode: u32,
    /// Owner and group of the original node.
    pub owner: (u32, u32),
    /// `by-path` link name to make for it, if the original had one.
    pub by_path: Option<String>,
}

/// The mount steps of a job: read-only sysfs with its cgroup2, its /proc with /proc/sys
/// read-only, a private /dev holding `gpu_nodes` (name relative to /dev/dri, device, mode,
/// owner), their `by-path` links, the plain devices, pts, shm, mqueue, fuse where the host
/// has it, the `held` host directories (index into [`JobPlan::held`], path: hugepages,
/// infiniband), then `hide` (sysfs files of other GPUs) covered by /dev/null.
pub fn mount_steps(
    gpu_nodes: &[PlacedNode],
    hide: &[std::path::PathBuf],
    held: &[(usize, &str)],
) -> Vec<Step> {
    let c = |s: &str| CString::new(s).unwrap_or_default();
    let mount =
        |src: &str, target: &str, fstype: &str, flags: MountFlags, data: &str| Step::Mount {
            src: c(src),
            target: c(target),
            fstype: c(fstype),
            flags,
            data: c(data),
        };
    let nsd = MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC;
    // The host's sysfs and what is mounted under it (debugfs, tracefs, configfs, its
    // cgroup2) leave; a sysfs of the same network namespace is one superblock, which
    // cannot be mounted again on itself (EBUSY).
    let mut v = vec![
        Step::Detach { target: c("/sys") },
        mount("sysfs", "/sys", "sysfs", nsd | MountFlags::RDONLY, ""),
        mount("cgroup2", "/sys/fs/cgroup", "cgroup2", nsd, ""),
        mount("proc", "/proc", "proc", nsd, ""),
        Step::Bind {
            src: c("/proc/sys"),
            target: c("/proc/sys"),
            readonly: true,
            recursive: false,
        },
        Step::Bind {
            src: c("/proc/sysrq-trigger"),
            target: c("/proc/sysrq-trigger"),
            readonly: true,
            recursive: false,
        },
        mount(
            "drmtool-run",
            "/dev",
            "tmpfs",
            MountFlags::NOSUID | MountFlags::NOEXEC,
            "mode=755,size=64k",
        ),
    ];
    for (name, ma, mi, mode) in PLAIN_DEVICES {
        v.push(Step::Mknod {
            path: c(&format!("/dev/{name}")),
            dev: (ma, mi),
            mode,
            owner: (0, 0),
        });
    }
    if exists("/dev/fuse") {
        v.push(Step::Mknod {
            path: c("/dev/fuse"),
            dev: (10, 229),
            mode: 0o666,
            owner: (0, 0),
        });
    }
    for (link, target) in [
        ("/dev/fd", "/proc/self/fd"),
        ("/dev/stdin", "/proc/self/fd/0"),
        ("/dev/stdout", "/proc/self/fd/1"),
        ("/dev/stderr", "/proc/self/fd/2"),
        ("/dev/ptmx", "pts/ptmx"),
    ] {
        v.push(Step::Symlink {
            target: c(target),
            link: c(link),
        });
    }
    for (dir, mode) in [
        ("/dev/pts", 0o755),
        ("/dev/shm", 0o1777),
        ("/dev/mqueue", 0o1777),
        ("/dev/dri", 0o755),
    ] {
        v.push(Step::Mkdir { path: c(dir), mode });
    }
    v.push(mount(
        "devpts",
        "/dev/pts",
        "devpts",
        MountFlags::NOSUID | MountFlags::NOEXEC,
        "newinstance,ptmxmode=0666,mode=0620,gid=5",
    ));
    v.push(mount(
        "shm",
        "/dev/shm",
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV,
        "mode=1777",
    ));
    v.push(mount("mqueue", "/dev/mqueue", "mqueue", nsd, ""));
    for &(index, dir) in held {
        v.push(Step::Mkdir {
            path: c(dir),
            mode: 0o755,
        });
        v.push(Step::BindHeld {
            index,
            target: c(dir),
        });
    }
    v.extend(dri_steps(gpu_nodes));
    for h in hide {
        if let Some(t) = cpath(h) {
            v.push(Step::Bind {
                src: c("/dev/null"),
                target: t,
                readonly: true,
                recursive: false,
            });
        }
    }
    v
}

/// The chosen GPU nodes in the private `/dev/dri`, and their `by-path` links.
fn dri_steps(gpu_nodes: &[PlacedNode]) -> Vec<Step> {
    let c = |s: &str| CString::new(s).unwrap_or_default();
    let mut v = Vec::new();
    let mut by_path = Vec::new();
    for n in gpu_nodes {
        v.push(Step::Mknod {
            path: c(&format!("/dev/dri/{}", n.name)),
            dev: n.dev,
            mode: n.mode,
            owner: n.owner,
        });
        if let Some(b) = &n.by_path {
            by_path.push((b.clone(), n.name.clone()));
        }
    }
    if !by_path.is_empty() {
        v.push(Step::Mkdir {
            path: c("/dev/dri/by-path"),
            mode: 0o755,
        });
        for (link, name) in by_path {
            v.push(Step::Symlink {
                target: c(&format!("../{name}")),
                link: c(&format!("/dev/dri/by-path/{link}")),
            });
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_keeps_docker_defaults_without_mknod_and_net_raw() {
        let m = root_keep_mask();
        // CAP_MKNOD 27, CAP_NET_RAW 13, CAP_SYS_ADMIN 21, CAP_BPF 39, CAP_NET_ADMIN 12,
        // CAP_SYS_PTRACE 19, CAP_SYS_RAWIO 17, CAP_SYS_MODULE 16, CAP_DAC_READ_SEARCH 2.
        for dropped in [27, 13, 21, 39, 12, 19, 17, 16, 2, 38, 40] {
            assert_eq!(m & (1 << dropped), 0, "cap {dropped}");
        }
        assert_eq!(m.count_ones(), 12);
    }

    #[test]
    fn private_dev_has_the_gpu_nodes_and_hides_the_rest() {
        let nodes = vec![super::PlacedNode {
            name: "renderD129".to_string(),
            dev: (226, 129),
            mode: 0o660,
            owner: (1000, 44),
            by_path: Some("pci-0000:00:02.0-render".to_string()),
        }];
        let steps = mount_steps(
            &nodes,
            &["/sys/bus/pci/devices/0000:00:03.0/resource0".into()],
            &[(0, "/dev/hugepages")],
        );
        let text: Vec<String> = steps.iter().map(Step::describe).collect();
        assert!(
            text.contains(&"mknod /dev/dri/renderD129 (226:129)".to_string()),
            "{text:?}"
        );
        assert!(text.contains(&"symlink /dev/dri/by-path/pci-0000:00:02.0-render".to_string()));
        assert!(text.contains(
            &"bind /dev/null on /sys/bus/pci/devices/0000:00:03.0/resource0 read-only".to_string()
        ));
        let dev = text
            .iter()
            .position(|t| t == "mount tmpfs on /dev")
            .unwrap();
        let null = text
            .iter()
            .position(|t| t == "mknod /dev/null (1:3)")
            .unwrap();
        let hide = text
            .iter()
            .position(|t| t.starts_with("bind /dev/null"))
            .unwrap();
        assert!(
            dev < null && null < hide,
            "the null node exists before it covers anything"
        );
        assert!(
            !text
                .iter()
                .any(|t| t.contains("226:") && !t.contains("226:129"))
        );
    }
}
