//! The only module of drmtool with unsafe code: `kcmp(2)`, `bpf(2)` and
//! `perf_event_open(2)` (with its integer ioctls), which rustix does not wrap, and the one
//! slice over a shared memfd mapping that `drmtool hmm probe` registers as a udmabuf.
//!
//! # Safety
//! `kcmp` takes two pids, a type and two integers and reads no user memory, so any argument
//! values are memory-safe; the kernel checks permissions (ptrace read access to both
//! processes) and answers EPERM/ESRCH/EBADF on bad input.
//!
//! `bpf(2)` takes a command and a pointer to a zeroed `union bpf_attr` of the size passed;
//! the kernel reads (and for queries writes) that many bytes, plus the user buffers whose
//! addresses and lengths the attr carries. Each wrapper below builds the attr from slices
//! and buffers it owns or borrows for the call's duration, with lengths taken from those
//! same slices, so the kernel never reads or writes outside them; fds it returns are
//! adopted as `OwnedFd` at once.
//!
//! `perf_event_open(2)` reads a `struct perf_event_attr` of the size its `size` field gives
//! (the wrapper passes a reference to a whole one, with its own size); the ioctls wrapped
//! here take integers, and `PERF_EVENT_IOC_SET_FILTER` a NUL-terminated string (`sys_call/perf.rs`).
//! The perf ring itself is a [`drm_gem::Mmap`], read and written only through its volatile
//! copies (tools/src/trace/perf.rs): no unsafe code of ours.
//!
//! The probe's mappings are [`drm_gem::Mmap`]s (drm-gem owns every `mmap` and `munmap`, and
//! their copies): private anonymous pages, borrowed as slices through `Mmap::as_mut_slice`,
//! and a memfd mapped `MAP_SHARED`, whose pages another mapping, a `write(2)`, another
//! process or (through a udmabuf made of them) a device may change at any time, so `Mmap`
//! hands out no slice of it. The one place that needs one (a udmabuf registration) is
//! [`register_udmabuf`] here, under its contract.
#![allow(unsafe_code)]

mod perf;

pub use perf::{perf_event_open, perf_ioctl, perf_set_filter};

use drm_gem::{Mmap, Sharing};
use rustix::io::Errno;
use std::cmp::Ordering;

/// `KCMP_FILE` from `<linux/kcmp.h>`.
const KCMP_FILE: libc::c_int = 0;

/// Whether fd `fd1` of process `pid1` and fd `fd2` of process `pid2` are the same open file
/// (`kcmp(pid1, pid2, KCMP_FILE, fd1, fd2) == 0`).
///
/// # Errors
/// The errno: `ENOSYS` when the kernel was built without `CONFIG_KCMP`, `EPERM` without
/// ptrace access to either process, `EBADF` when an fd is closed, `ESRCH` when a process
/// is gone.
pub fn same_file(pid1: u32, fd1: u32, pid2: u32, fd2: u32) -> Result<bool, Errno> {
    compare_files(pid1, fd1, pid2, fd2).map(|o| o == Ordering::Equal)
}

/// Registers the pages of `map` (a shared read-write mapping of a sealed memfd this process
/// made and keeps to itself) as a udmabuf, with `hmm::HostRegistration::new(..,
/// Backend::Udmabuf)`, which takes a slice: the registration borrows `map` for its whole
/// life.
///
/// # Errors
/// As `HostRegistration::new`; [`drm_gem::Error::InvalidArgument`] when `map` is not a
/// readable and writable shared mapping of a file.
pub fn register_udmabuf(map: &mut Mmap) -> drm_gem::Result<hmm::HostRegistration<'_>> {
    let rw = drm_gem::Prot::READ | drm_gem::Prot::WRITE;
    if map.sharing() != Sharing::Shared || map.is_anonymous() || map.prot() != rw {
        return Err(drm_gem::Error::InvalidArgument {
            what: "a udmabuf registers a shared read-write memfd mapping".into(),
        });
    }
    // SAFETY: the slice covers exactly the readable, writable range `map` owns (it stays
    // mapped while `map` lives), and lives no longer than
    // the `&mut` borrow of `map` (the registration's lifetime), during which no copy
    // through `map` can run. Its other aliases are the memfd itself (the caller's
    // `SealedMemfd`, which `drmtool hmm probe` neither writes nor hands to anyone) and the
    // udmabuf the registration makes, which the probe only inspects (it never maps,
    // writes or attaches it); so nothing writes these bytes while the slice lives, and
    // the registration itself only reads its address and length.
    let mem = unsafe { core::slice::from_raw_parts_mut(map.as_ptr(), map.len()) };
    hmm::HostRegistration::new(mem, hmm::Backend::Udmabuf)
}

/// The kernel's order of the open files behind fd `fd1` of `pid1` and fd `fd2` of `pid2`:
/// `kcmp(KCMP_FILE)` answers 0 (the same file), 1 (the first sorts before the second) or 2
/// (after), by the files' kernel addresses scrambled with a per-boot cookie. It is a total
/// order for the whole boot, so open files can be sorted and binary-searched by it.
///
/// # Errors
/// As [`same_file`]; `EINVAL` if the kernel answers 3 (unequal but unordered, which it
/// does not do for `KCMP_FILE`).
pub fn compare_files(pid1: u32, fd1: u32, pid2: u32, fd2: u32) -> Result<Ordering, Errno> {
    let (Ok(p1), Ok(p2)) = (libc::pid_t::try_from(pid1), libc::pid_t::try_from(pid2)) else {
        return Err(Errno::SRCH);
    };
    // SAFETY: kcmp's five arguments are plain integers; it reads and writes no user memory.
    let r = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            p1,
            p2,
            KCMP_FILE,
            libc::c_ulong::from(fd1),
            libc::c_ulong::from(fd2),
        )
    };
    match r {
        0 => Ok(Ordering::Equal),
        1 => Ok(Ordering::Less),
        2 => Ok(Ordering::Greater),
        3 => Err(Errno::INVAL),
        _ => Err(last_errno()),
    }
}

/// `bpf(cmd, attr, sizeof(attr))`.
///
/// # Safety
/// Every pointer in `attr` must be valid for the reads and writes `cmd` makes through it,
/// with the lengths `attr` gives, for the call's duration.
unsafe fn bpf(cmd: bpf_sys::bpf_cmd, attr: &mut bpf_sys::bpf_attr) -> Result<i64, Errno> {
    // EINTR: the command had no effect; again, a bounded number of times.
    retry_eintr(|| {
        // SAFETY: `attr` is a live, writable `union bpf_attr` of the size passed (the
        // kernel copies at most that many bytes each way); the caller vouches for its
        // pointers.
        unsafe {
            libc::syscall(
                libc::SYS_bpf,
                cmd as libc::c_long,
                &mut *attr as *mut bpf_sys::bpf_attr,
                core::mem::size_of::<bpf_sys::bpf_attr>() as libc::c_long,
            )
        }
    })
}

use ioctl_sys::bpf as bpf_sys;
use rustix::fd::{BorrowedFd, FromRawFd, OwnedFd};

fn adopt(fd: i64) -> Result<OwnedFd, Errno> {
    let raw = i32::try_from(fd).map_err(|_| Errno::BADF)?;
    // SAFETY: the kernel just returned `raw` as a new fd of this process that nothing else
    // owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// How long [`bpf_load_cgroup_device`] keeps retrying a load that a signal interrupted.
const LOAD_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// `BPF_PROG_LOAD` of a `BPF_PROG_TYPE_CGROUP_DEVICE` program (its 8-byte instructions,
/// concatenated); on a refusal the verifier's log (up to `log_cap` bytes) comes with the
/// errno.
///
/// The verifier gives up with EAGAIN when a signal is pending (and the call can end in
/// EINTR): like libbpf, the load is retried, here until an absolute deadline
/// ([`LOAD_DEADLINE`]) so that a signal storm cannot make it spin for ever. The first
/// attempts run without a log (faster, and what is retried); a refusal is repeated once
/// with the log to say why.
pub fn bpf_load_cgroup_device(
    insns: &[u8],
    name: &str,
    log_cap: usize,
) -> Result<OwnedFd, (Errno, String)> {
    if !insns.len().is_multiple_of(8) || insns.is_empty() {
        return Err((Errno::INVAL, "instructions come in 8-byte units".into()));
    }
    let cnt = u32::try_from(insns.len() / 8).map_err(|_| (Errno::TOOBIG, String::new()))?;
    let license = c"GPL";
    let mut pname = [0 as core::ffi::c_char; 16];
    for (d, s) in pname.iter_mut().zip(name.bytes().take(15)) {
        *d = s as core::ffi::c_char;
    }
    let load = |log: Option<&mut [u8]>| -> Result<i64, Errno> {
        let mut attr = bpf_sys::bpf_attr::default();
        // SAFETY: `attr` is all zero bytes (its Default), a valid value of every member;
        // the fields are set in place so that padding and the tail the kernel checks stay
        // zero (a struct value assigned whole could carry undefined padding).
        let l = unsafe { &mut attr.__bindgen_anon_3 };
        l.prog_type = bpf_sys::BPF_PROG_TYPE_CGROUP_DEVICE;
        l.insn_cnt = cnt;
        l.insns = insns.as_ptr() as u64;
        l.license = license.as_ptr() as u64;
        if let Some(log) = log {
            l.log_level = 1;
            l.log_size = log.len() as u32;
            l.log_buf = log.as_mut_ptr() as u64;
        }
        l.prog_name = pname;
        l.expected_attach_type = bpf_sys::BPF_CGROUP_DEVICE;
        // SAFETY: insns (cnt * 8 bytes), the license string and the log buffer (log_size
        // bytes, written by the verifier) are all alive for the call.
        unsafe { bpf(bpf_sys::BPF_PROG_LOAD, &mut attr) }
    };
    let deadline = std::time::Instant::now() + LOAD_DEADLINE;
    let interrupted = |e: Errno| matches!(e, Errno::AGAIN | Errno::INTR);
    let mut r = load(None);
    while r.as_ref().is_err_and(|&e| interrupted(e)) && std::time::Instant::now() < deadline {
        r = load(None);
    }
    match r {
        Ok(fd) => adopt(fd).map_err(|e| (e, String::new())),
        Err(e) if interrupted(e) => Err((e, "interrupted by signals until the deadline".into())),
        Err(e) => {
            // Once more with the log, for the reason (its own errno is the one reported).
            let mut log = vec![0u8; log_cap.clamp(128, 1 << 20)];
            let mut again = load(Some(&mut log));
            while again.as_ref().is_err_and(|&e| interrupted(e))
                && std::time::Instant::now() < deadline
            {
                again = load(Some(&mut log));
            }
            match again {
                Ok(fd) => adopt(fd).map_err(|e| (e, String::new())),
                Err(e2) => {
                    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                    let e = if interrupted(e2) { e } else { e2 };
                    Err((e, String::from_utf8_lossy(&log[..end]).into_owned()))
                }
            }
        }
    }
}

/// `BPF_PROG_ATTACH` of `prog` to the cgroup directory `cgroup` as its device program.
pub fn bpf_attach_cgroup_device(
    cgroup: BorrowedFd<'_>,
    prog: BorrowedFd<'_>,
    flags: u32,
) -> Result<(), Errno> {
    use rustix::fd::AsRawFd;
    let mut attr = bpf_sys::bpf_attr::default();
    // SAFETY: as in `bpf_load_cgroup_device`: a zeroed attr, fields set in place.
    let a = unsafe { &mut attr.__bindgen_anon_5 };
    a.__bindgen_anon_1.target_fd = cgroup.as_raw_fd() as u32;
    a.attach_bpf_fd = prog.as_raw_fd() as u32;
    a.attach_type = bpf_sys::BPF_CGROUP_DEVICE;
    a.attach_flags = flags;
    // SAFETY: the attr carries two fds and integers, no pointers.
    unsafe { bpf(bpf_sys::BPF_PROG_ATTACH, &mut attr) }.map(drop)
}

/// `BPF_PROG_QUERY` of the device programs of the cgroup directory `cgroup`: the
/// cgroup's attach flags and the program ids (`effective`: those that run for it, its
/// ancestors' included).
pub fn bpf_query_cgroup_device(
    cgroup: BorrowedFd<'_>,
    effective: bool,
) -> Result<(u32, Vec<u32>), Errno> {
    use rustix::fd::AsRawFd;
    let mut ids = vec![0u32; 64];
    loop {
        let mut attr = bpf_sys::bpf_attr::default();
        // SAFETY: as in `bpf_load_cgroup_device`: a zeroed attr, fields set in place.
        let q = unsafe { &mut attr.query };
        q.__bindgen_anon_1.target_fd = cgroup.as_raw_fd() as u32;
        q.attach_type = bpf_sys::BPF_CGROUP_DEVICE;
        q.query_flags = if effective {
            bpf_sys::BPF_F_QUERY_EFFECTIVE
        } else {
            0
        };
        q.prog_ids = ids.as_mut_ptr() as u64;
        q.__bindgen_anon_2.prog_cnt = ids.len() as u32;
        // SAFETY: prog_ids points at `ids`, prog_cnt of them, writable for the call.
        let r = unsafe { bpf(bpf_sys::BPF_PROG_QUERY, &mut attr) };
        // SAFETY: the query member is the one this call set and the kernel wrote; its
        // count union holds plain u32s either way.
        let (flags, cnt) = unsafe {
            (
                attr.query.attach_flags,
                attr.query.__bindgen_anon_2.prog_cnt,
            )
        };
        match r {
            Ok(_) => {
                ids.truncate((cnt as usize).min(ids.len()));
                return Ok((flags, ids));
            }
            // More programs than room: the kernel says how many.
            Err(Errno::NOSPC) if (cnt as usize) > ids.len() && ids.len() < 1 << 16 => {
                ids = vec![0u32; cnt as usize];
            }
            Err(e) => return Err(e),
        }
    }
}

/// A loaded program's identity and translated instructions (`BPF_OBJ_GET_INFO_BY_FD`).
#[derive(Debug, Clone)]
pub struct ProgInfo {
    /// Program id.
    pub id: u32,
    /// `BPF_PROG_TYPE_*`.
    pub prog_type: u32,
    /// Its name (up to 15 bytes, as the loader gave it).
    pub name: String,
    /// The instructions as the verifier left them (empty without the right to read them).
    pub xlated: Vec<u8>,
}

/// `BPF_PROG_GET_FD_BY_ID`, then `BPF_OBJ_GET_INFO_BY_FD` twice (lengths, then bytes).
pub fn bpf_prog_info_by_id(id: u32) -> Result<ProgInfo, Errno> {
    let mut attr = bpf_sys::bpf_attr::default();
    // A zeroed attr, the one field set in place (a write, which needs no unsafe).
    attr.__bindgen_anon_6.__bindgen_anon_1.prog_id = id;
    // SAFETY: the attr carries integers only.
    let fd = adopt(unsafe { bpf(bpf_sys::BPF_PROG_GET_FD_BY_ID, &mut attr) }?)?;
    let info_of = |info: &mut bpf_sys::bpf_prog_info| -> Result<(), Errno> {
        use rustix::fd::AsRawFd;
        let mut attr = bpf_sys::bpf_attr::default();
        // SAFETY: as in `bpf_load_cgroup_device`: a zeroed attr, fields set in place.
        let i = unsafe { &mut attr.info };
        i.bpf_fd = fd.as_raw_fd() as u32;
        i.info_len = core::mem::size_of::<bpf_sys::bpf_prog_info>() as u32;
        i.info = info as *mut bpf_sys::bpf_prog_info as u64;
        // SAFETY: `info` is a live bpf_prog_info of info_len bytes; its buffer pointers are
        // null or point at buffers of the lengths it gives (set by the caller below).
        unsafe { bpf(bpf_sys::BPF_OBJ_GET_INFO_BY_FD, &mut attr) }.map(drop)
    };
    // SAFETY: bpf_prog_info is integers and byte arrays, for which all-zero bytes (padding
    // included, which a derived Default would leave undefined) is a valid value.
    let zeroed = || unsafe { core::mem::zeroed::<bpf_sys::bpf_prog_info>() };
    let mut first = zeroed();
    info_of(&mut first)?;
    let mut xlated = vec![0u8; first.xlated_prog_len as usize];
    let mut second = zeroed();
    second.xlated_prog_len = xlated.len() as u32;
    second.xlated_prog_insns = if xlated.is_empty() {
        0
    } else {
        xlated.as_mut_ptr() as u64
    };
    info_of(&mut second)?;
    // The program cannot change, but keep within what was allocated regardless.
    xlated.truncate((second.xlated_prog_len as usize).min(xlated.len()));
    let end = second
        .name
        .iter()
        .position(|&c| c == 0)
        .unwrap_or(second.name.len());
    let name: Vec<u8> = second.name[..end].iter().map(|&c| c as u8).collect();
    Ok(ProgInfo {
        id: second.id,
        prog_type: second.type_,
        name: String::from_utf8_lossy(&name).into_owned(),
        xlated,
    })
}

/// The dispositions of SIGINT, SIGQUIT and SIGTERM before [`ignore_job_signals`].
#[derive(Debug, Clone, Copy)]
pub struct SavedSignals([libc::sighandler_t; 3]);

const JOB_SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGQUIT, libc::SIGTERM];

/// Ignores SIGINT, SIGQUIT and SIGTERM in this process (as `system(3)` does while its
/// command runs); [`restore_job_signals`] puts the previous dispositions back.
pub fn ignore_job_signals() -> SavedSignals {
    let mut saved = [libc::SIG_DFL; 3];
    for (s, sig) in saved.iter_mut().zip(JOB_SIGNALS) {
        // SAFETY: SIG_IGN installs no handler code, so nothing runs asynchronously; the
        // previous disposition is kept to be put back unchanged.
        *s = unsafe { libc::signal(sig, libc::SIG_IGN) };
    }
    SavedSignals(saved)
}

/// Puts back what [`ignore_job_signals`] replaced.
pub fn restore_job_signals(saved: SavedSignals) {
    for (s, sig) in saved.0.into_iter().zip(JOB_SIGNALS) {
        if s != libc::SIG_ERR {
            // SAFETY: `s` is a disposition `signal` returned for this very signal (SIG_DFL,
            // SIG_IGN or the handler that was installed), so reinstalling it is what the
            // process had before.
            unsafe { libc::signal(sig, s) };
        }
    }
}

fn last_errno() -> Errno {
    Errno::from_raw_os_error(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
}

/// Runs `call`, a raw system call that returns a negative value and sets errno when it
/// fails, again while it fails with EINTR, at most 1000 times: its result, or its errno
/// (EINTR after the last try).
fn retry_eintr<T: Copy + PartialOrd + Default>(mut call: impl FnMut() -> T) -> Result<T, Errno> {
    for _ in 0..1000 {
        let r = call();
        if r >= T::default() {
            return Ok(r);
        }
        match last_errno() {
            Errno::INTR => continue,
            e => return Err(e),
        }
    }
    Err(Errno::INTR)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fd::AsFd;

    #[test]
    fn shared_mapping_copies_in_and_out_within_bounds_only() {
        use drm_gem::{Error, MmapOptions, Prot};
        let fd = rustix::fs::memfd_create("drmtool-test", rustix::fs::MemfdFlags::CLOEXEC)
            .expect("memfd");
        rustix::fs::ftruncate(&fd, 8192).unwrap();
        let rw = Prot::READ | Prot::WRITE;
        let mut m = Mmap::map(
            fd.as_fd(),
            0,
            8192,
            rw,
            Sharing::Shared,
            MmapOptions::empty(),
        )
        .expect("mmap");
        m.write_at(4090, b"abcdef").unwrap();
        let mut b = [0u8; 6];
        m.read_at(4090, &mut b).unwrap();
        assert_eq!(&b, b"abcdef");
        // The file sees the write: the pages are shared.
        let mut f = [0u8; 6];
        rustix::io::pread(&fd, &mut f, 4090).unwrap();
        assert_eq!(&f, b"abcdef");
        assert!(matches!(
            m.write_at(8190, b"abcdef"),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            m.read_at(8190, &mut b),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(
            m.read_at(usize::MAX, &mut b).is_err(),
            "offset + len overflows"
        );
        assert!(m.read_at(8192, &mut []).is_ok());
        assert_eq!(m.len(), 8192);
        // No slice of shared memory, and no udmabuf registration of anonymous memory.
        assert!(m.as_slice().is_none());
        let mut anon = Mmap::anonymous(4096, rw).unwrap();
        assert!(matches!(
            register_udmabuf(&mut anon),
            Err(Error::InvalidArgument { .. })
        ));
    }
}

// ---------------------------------------------------------------------------------------
// `drmtool run`: the job's process tree (tools/src/isolate/job.rs). clone3, execve,
// close_range, the signal mask and waits, capability bounding, passwd lookups.
// ---------------------------------------------------------------------------------------

/// `CLONE_INTO_CGROUP` (Linux 5.7): the child starts in the cgroup of `clone_args.cgroup`.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// What [`clone_job`] returned in each process.
#[derive(Debug)]
pub enum Cloned {
    /// This is the new process.
    Child,
    /// This is the caller; the child's pid (in the caller's pid namespace).
    Parent(rustix::process::Pid),
}

/// Namespaces and placement of a [`clone_job`] child.
#[derive(Debug, Clone, Copy, Default)]
pub struct CloneSpec<'a> {
    /// New pid and mount namespaces (`CLONE_NEWPID | CLONE_NEWNS`).
    pub namespaces: bool,
    /// Start in this cgroup v2 directory (`CLONE_INTO_CGROUP`), never in the caller's.
    pub cgroup: Option<BorrowedFd<'a>>,
}

/// `clone3(2)` without `CLONE_VM`: a copy of this process (its calling thread only), like
/// `fork(2)` but with namespaces and `CLONE_INTO_CGROUP`; the child's exit signal is
/// SIGCHLD.
///
/// The child is a copy of one thread of a possibly multi-threaded process: until it execs or
/// exits it must not allocate, print or take any lock another thread may have held (a
/// deadlock, not memory unsafety: the address spaces are separate). `fork(2)`'s atfork
/// handlers do not run.
pub fn clone_job(spec: CloneSpec<'_>) -> Result<Cloned, Errno> {
    use rustix::fd::AsRawFd;
    let mut flags = 0u64;
    if spec.namespaces {
        flags |= (libc::CLONE_NEWPID | libc::CLONE_NEWNS) as u64;
    }
    let mut cgroup = 0u64;
    if let Some(fd) = spec.cgroup {
        flags |= CLONE_INTO_CGROUP;
        cgroup = fd.as_raw_fd() as u64;
    }
    let mut args = libc::clone_args {
        flags,
        pidfd: 0,
        child_tid: 0,
        parent_tid: 0,
        exit_signal: libc::SIGCHLD as u64,
        stack: 0,
        stack_size: 0,
        tls: 0,
        set_tid: 0,
        set_tid_size: 0,
        cgroup,
    };
    // SAFETY: clone3 reads `args` (size passed with it) and, without CLONE_VM, CLONE_SETTLS
    // or a stack, makes a copy of this address space in which the child returns 0 on the
    // same (copied) stack, exactly as fork(2) does; no pointer of ours is written.
    let r = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut libc::clone_args,
            core::mem::size_of::<libc::clone_args>(),
        )
    };
    match r {
        0 => Ok(Cloned::Child),
        p if p > 0 => {
            let pid = i32::try_from(p).map_err(|_| Errno::INVAL)?;
            rustix::process::Pid::from_raw(pid)
                .map(Cloned::Parent)
                .ok_or(Errno::INVAL)
        }
        _ => Err(last_errno()),
    }
}

/// A program, its arguments and environment as `execve(2)` takes them, built before a
/// [`clone_job`] so that the child only reads it.
#[derive(Debug)]
pub struct ExecImage {
    path: std::ffi::CString,
    // The strings the pointer arrays point into (heap buffers: stable when moved).
    _strings: Vec<std::ffi::CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
}

impl ExecImage {
    /// From the program's path, its argv (argv[0] included) and `KEY=VALUE` entries; an
    /// error if any holds a NUL byte.
    pub fn new(
        path: &std::ffi::OsStr,
        argv: &[std::ffi::OsString],
        env: &[std::ffi::OsString],
    ) -> Result<ExecImage, std::ffi::NulError> {
        use std::os::unix::ffi::OsStrExt;
        let c = |s: &std::ffi::OsStr| std::ffi::CString::new(s.as_bytes());
        let path = c(path)?;
        let mut strings = Vec::with_capacity(argv.len() + env.len());
        for a in argv.iter().chain(env) {
            strings.push(c(a)?);
        }
        let ptrs = |r: &[std::ffi::CString]| -> Vec<*const libc::c_char> {
            r.iter()
                .map(|s| s.as_ptr())
                .chain(std::iter::once(core::ptr::null()))
                .collect()
        };
        let argv_p = ptrs(&strings[..argv.len()]);
        let envp_p = ptrs(&strings[argv.len()..]);
        Ok(ExecImage {
            path,
            _strings: strings,
            argv: argv_p,
            envp: envp_p,
        })
    }
}

/// `execve(2)` of `image`; returns only on failure, with the errno. Allocates nothing.
pub fn exec(image: &ExecImage) -> Errno {
    // SAFETY: path, argv and envp are NUL-terminated strings and NULL-terminated pointer
    // arrays owned by `image`, alive for the call (ExecImage::new built them together).
    unsafe {
        libc::execve(
            image.path.as_ptr(),
            image.argv.as_ptr(),
            image.envp.as_ptr(),
        )
    };
    last_errno()
}

/// Closes every fd of this process but those in `keep` (ascending, no duplicates):
/// `close_range(2)` over the gaps. Allocates nothing.
pub fn close_fds_except(keep: &[i32]) -> Result<(), Errno> {
    let mut from: u32 = 0;
    let close = |lo: u32, hi: u32| -> Result<(), Errno> {
        if lo > hi {
            return Ok(());
        }
        // SAFETY: close_range takes integers; closing fds is what this process (the job's
        // child, about to exec) asks for, and no Rust owner in it is used afterwards.
        let r = unsafe { libc::syscall(libc::SYS_close_range, lo, hi, 0u32) };
        if r < 0 { Err(last_errno()) } else { Ok(()) }
    };
    for &k in keep {
        let Ok(k) = u32::try_from(k) else { continue };
        if k > from {
            close(from, k - 1)?;
        }
        from = k.saturating_add(1);
    }
    close(from, u32::MAX)
}

/// A signal set.
#[derive(Clone, Copy)]
pub struct SigSet(libc::sigset_t);

impl std::fmt::Debug for SigSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigSet")
    }
}

impl SigSet {
    /// The set of `sigs`.
    pub fn of(sigs: &[i32]) -> SigSet {
        // SAFETY: sigemptyset/sigaddset write into the local set they are given.
        unsafe {
            let mut s: libc::sigset_t = core::mem::zeroed();
            libc::sigemptyset(&mut s);
            for &g in sigs {
                libc::sigaddset(&mut s, g);
            }
            SigSet(s)
        }
    }
}

/// Blocks `set` in the calling thread; returns the mask it had.
pub fn block_signals(set: &SigSet) -> SigSet {
    // SAFETY: pthread_sigmask reads `set` and writes the old mask into a local.
    unsafe {
        let mut old: libc::sigset_t = core::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &set.0, &mut old);
        SigSet(old)
    }
}

/// Puts back a mask [`block_signals`] returned.
pub fn set_signal_mask(mask: &SigSet) {
    // SAFETY: as in `block_signals`.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &mask.0, core::ptr::null_mut()) };
}

/// Waits up to `timeout` for one of `set` (which the caller has blocked): its number and
/// `si_code`, or `None` on the timeout or an interruption. Allocates nothing.
pub fn wait_signal(set: &SigSet, timeout: std::time::Duration) -> Option<(i32, i32)> {
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: sigtimedwait reads the set and the timeout and writes the siginfo local.
    unsafe {
        let mut info: libc::siginfo_t = core::mem::zeroed();
        let r = libc::sigtimedwait(&set.0, &mut info, &ts);
        (r > 0).then_some((r, info.si_code))
    }
}

/// For a process about to exec: every signal unblocked and at its default disposition (an
/// ignored SIGPIPE, as Rust's runtime leaves it, would otherwise reach the command).
pub fn reset_signals_for_exec() {
    for sig in 1..libc::SIGRTMIN() {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: SIG_DFL installs no handler code.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
    // SAFETY: an empty set, read by pthread_sigmask.
    unsafe {
        let mut s: libc::sigset_t = core::mem::zeroed();
        libc::sigemptyset(&mut s);
        libc::pthread_sigmask(libc::SIG_SETMASK, &s, core::ptr::null_mut());
    }
}

/// `kill(2)`: `sig` to `pid` (-1: every process this one may signal, in its pid namespace).
pub fn send_signal(pid: i32, sig: i32) -> Result<(), Errno> {
    // SAFETY: integers only.
    if unsafe { libc::kill(pid, sig) } < 0 {
        Err(last_errno())
    } else {
        Ok(())
    }
}

/// `_exit(2)`: ends this process now, without running destructors or atexit handlers (what
/// the child of a [`clone_job`] does).
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit ends the process; nothing of this process runs afterwards.
    unsafe { libc::_exit(code) }
}

/// `prctl(PR_CAPBSET_DROP, cap)`: removes one capability from the bounding set (EINVAL for
/// a number this kernel does not know).
pub fn drop_bounding_capability(cap: u32) -> Result<(), Errno> {
    // SAFETY: integers only.
    let r = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0, 0, 0) };
    if r < 0 { Err(last_errno()) } else { Ok(()) }
}

/// A user as the passwd database (NSS: files, LDAP, sssd) knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passwd {
    /// Login name.
    pub name: std::ffi::OsString,
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Home directory.
    pub home: std::ffi::OsString,
    /// Login shell.
    pub shell: std::ffi::OsString,
}

/// `getpwnam_r(3)` (`by_name`) or `getpwuid_r(3)`: `Ok(None)` when there is no such user.
pub fn passwd_lookup(by_name: Option<&std::ffi::CStr>, uid: u32) -> Result<Option<Passwd>, Errno> {
    use std::os::unix::ffi::OsStrExt;
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: pw and result are locals the call fills; buf is writable for its length;
        // the strings pw points to live in buf, copied out below before buf is dropped.
        let (r, found, pw) = unsafe {
            let mut pw: libc::passwd = core::mem::zeroed();
            let mut result: *mut libc::passwd = core::ptr::null_mut();
            let r = match by_name {
                Some(n) => libc::getpwnam_r(
                    n.as_ptr(),
                    &mut pw,
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    &mut result,
                ),
                None => libc::getpwuid_r(
                    uid,
                    &mut pw,
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    &mut result,
                ),
            };
            (r, !result.is_null(), pw)
        };
        if r == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if r != 0 {
            return Err(Errno::from_raw_os_error(r));
        }
        if !found {
            return Ok(None);
        }
        let s = |p: *const libc::c_char| -> std::ffi::OsString {
            if p.is_null() {
                return std::ffi::OsString::new();
            }
            // SAFETY: a non-null field of a passwd entry getpw*_r filled: a NUL-terminated
            // string inside `buf`, which is alive here.
            std::ffi::OsStr::from_bytes(unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes())
                .to_os_string()
        };
        return Ok(Some(Passwd {
            name: s(pw.pw_name),
            uid: pw.pw_uid,
            gid: pw.pw_gid,
            home: s(pw.pw_dir),
            shell: s(pw.pw_shell),
        }));
    }
}

/// `getgrouplist(3)`: every group `user` is in, `gid` included (what `initgroups(3)` sets).
pub fn group_list(user: &std::ffi::CStr, gid: u32) -> Result<Vec<u32>, Errno> {
    let mut n: libc::c_int = 32;
    loop {
        let mut groups = vec![0 as libc::gid_t; usize::try_from(n).unwrap_or(32)];
        let mut count = n;
        // SAFETY: groups has room for `count` entries; the call writes at most that many and
        // sets count to the number it needs.
        let r = unsafe { libc::getgrouplist(user.as_ptr(), gid, groups.as_mut_ptr(), &mut count) };
        if r >= 0 {
            groups.truncate(usize::try_from(count).unwrap_or(0));
            return Ok(groups);
        }
        if count <= n || count > 65536 {
            return Err(Errno::TOOBIG);
        }
        n = count;
    }
}

/// The id of the loaded program `prog` (`BPF_OBJ_GET_INFO_BY_FD`).
pub fn bpf_prog_id(prog: BorrowedFd<'_>) -> Result<u32, Errno> {
    use rustix::fd::AsRawFd;
    // SAFETY: bpf_prog_info is integers and byte arrays, for which all-zero bytes is valid.
    let mut info = unsafe { core::mem::zeroed::<bpf_sys::bpf_prog_info>() };
    let mut attr = bpf_sys::bpf_attr::default();
    // SAFETY: as in `bpf_load_cgroup_device`: a zeroed attr, fields set in place.
    let i = unsafe { &mut attr.info };
    i.bpf_fd = prog.as_raw_fd() as u32;
    i.info_len = core::mem::size_of::<bpf_sys::bpf_prog_info>() as u32;
    i.info = &mut info as *mut bpf_sys::bpf_prog_info as u64;
    // SAFETY: `info` is a live, zeroed bpf_prog_info of info_len bytes with no buffer
    // pointers set, so the kernel writes only into it.
    unsafe { bpf(bpf_sys::BPF_OBJ_GET_INFO_BY_FD, &mut attr) }?;
    Ok(info.id)
}

/// `BPF_PROG_DETACH` of the device program `prog` from the cgroup directory `cgroup`.
pub fn bpf_detach_cgroup_device(cgroup: BorrowedFd<'_>, prog: BorrowedFd<'_>) -> Result<(), Errno> {
    use rustix::fd::AsRawFd;
    let mut attr = bpf_sys::bpf_attr::default();
    // SAFETY: as in `bpf_load_cgroup_device`: a zeroed attr, fields set in place.
    let a = unsafe { &mut attr.__bindgen_anon_5 };
    a.__bindgen_anon_1.target_fd = cgroup.as_raw_fd() as u32;
    a.attach_bpf_fd = prog.as_raw_fd() as u32;
    a.attach_type = bpf_sys::BPF_CGROUP_DEVICE;
    // SAFETY: the attr carries two fds and integers, no pointers.
    unsafe { bpf(bpf_sys::BPF_PROG_DETACH, &mut attr) }.map(drop)
}

/// `BPF_PROG_GET_FD_BY_ID`: an fd of the loaded program `id`.
pub fn bpf_prog_fd_by_id(id: u32) -> Result<OwnedFd, Errno> {
    let mut attr = bpf_sys::bpf_attr::default();
    attr.__bindgen_anon_6.__bindgen_anon_1.prog_id = id;
    // SAFETY: the attr carries integers only.
    adopt(unsafe { bpf(bpf_sys::BPF_PROG_GET_FD_BY_ID, &mut attr) }?)
}

/// `unshare(CLONE_NEWCGROUP)`: this process gets a cgroup namespace rooted at its cgroup.
pub fn unshare_cgroup_namespace() -> Result<(), Errno> {
    // SAFETY: only CLONE_NEWCGROUP: the file-descriptor table (rustix's reason for
    // `unsafe`, CLONE_FILES) is untouched.
    unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWCGROUP) }
}

/// `fstat(2)` of the fd number `fd` of this process, which may not be open: `Err(EBADF)`
/// then. Nothing is closed or owned.
pub fn fstat_raw(fd: i32) -> Result<Option<rustix::fs::Stat>, Errno> {
    if fd < 0 {
        return Err(Errno::BADF);
    }
    // SAFETY: the BorrowedFd lives only for this fstat call, and the kernel checks the
    // number (EBADF when it is not open); nothing is closed through it.
    let b = unsafe { BorrowedFd::borrow_raw(fd) };
    rustix::fs::fstat(b).map(Some)
}
