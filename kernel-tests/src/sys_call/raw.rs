//! Raw ioctls for negative tests: the kernel's own answer to input that `drm-gem`'s safe API
//! refuses before the kernel is asked, or cannot express at all (a stale handle, a closed fd
//! number). Part of the crate's `sys_call` module, its only unsafe code.
//!
//! # Safety
//! Each request number comes from `ioctl_sys` and is paired with its own argument struct
//! (checked by `ioctl-sys/tests/opcodes.rs`); none of these structs carries a user pointer,
//! so any field values are harmless to the caller's memory. The exceptions are the test_hmm
//! command (its `ptr` field, always a buffer owned by [`dmirror_cmd`], and the memory a
//! WRITE stores into, which must lie in a [`Region`](crate::mem::Region) borrowed mutably) and udmabuf's list,
//! built here from a slice.

use ioctl_sys::drm as sys;
use rustix::fd::BorrowedFd;
use rustix::io::Errno;
use rustix::ioctl::{Opcode, Updater, ioctl};

macro_rules! raw_ioctl {
    ($(#[$m:meta])* $cname:ident => $fname:ident($ty:ty)) => {
        $(#[$m])*
        #[doc = concat!("`", stringify!($cname), "` with exactly the given argument; the errno on failure.")]
        pub fn $fname(fd: BorrowedFd<'_>, mut arg: $ty) -> Result<$ty, Errno> {
            // SAFETY: `$cname` takes exactly one `$ty` (checked by ioctl-sys's opcode
            // tests); `$ty` holds no pointers and `arg` lives for the whole call.
            unsafe { ioctl(fd, Updater::<{ sys::$cname as Opcode }, $ty>::new(&mut arg)) }?;
            Ok(arg)
        }
    };
}

raw_ioctl!(DRM_IOCTL_MODE_CREATE_DUMB => create_dumb(sys::drm_mode_create_dumb));
raw_ioctl!(DRM_IOCTL_MODE_MAP_DUMB => map_dumb(sys::drm_mode_map_dumb));
raw_ioctl!(DRM_IOCTL_MODE_DESTROY_DUMB => destroy_dumb(sys::drm_mode_destroy_dumb));
raw_ioctl!(DRM_IOCTL_GEM_CLOSE => gem_close(sys::drm_gem_close));
raw_ioctl!(DRM_IOCTL_GEM_FLINK => gem_flink(sys::drm_gem_flink));
raw_ioctl!(DRM_IOCTL_GEM_OPEN => gem_open(sys::drm_gem_open));
raw_ioctl!(DRM_IOCTL_PRIME_HANDLE_TO_FD => prime_handle_to_fd(sys::drm_prime_handle));
raw_ioctl!(DRM_IOCTL_PRIME_FD_TO_HANDLE => prime_fd_to_handle(sys::drm_prime_handle));
raw_ioctl!(DRM_IOCTL_MODE_ADDFB2 => addfb2(sys::drm_mode_fb_cmd2));
raw_ioctl!(DRM_IOCTL_MODE_GETFB2 => getfb2(sys::drm_mode_fb_cmd2));
raw_ioctl!(DRM_IOCTL_MODE_RMFB => rmfb_raw(u32));
raw_ioctl!(DRM_IOCTL_MODE_DESTROYPROPBLOB => destroypropblob(sys::drm_mode_destroy_blob));

/// `DRM_IOCTL_MODE_RMFB` of `id` (for framebuffers made by [`addfb2`]).
pub fn rmfb(fd: BorrowedFd<'_>, id: &mut u32) -> Result<(), Errno> {
    rmfb_raw(fd, *id).map(|_| ())
}

/// A number that is not an open fd of this process right now (the lowest free number after
/// the current ones, just closed).
pub fn closed_fd_number() -> i32 {
    use rustix::fd::AsRawFd;
    let fd = rustix::fs::open(
        "/dev/null",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .expect("open /dev/null");
    let n = fd.as_raw_fd();
    drop(fd);
    n
}

/// A test_hmm request by number: `_IOWR('H', nr, struct hmm_dmirror_cmd)`, whatever the
/// running kernel's numbering means by it.
pub const fn dmirror_request(nr: u8) -> u32 {
    // READ is number 0 in every layout; the number is the low byte.
    ioctl_sys::test_hmm::v6_0::HMM_DMIRROR_READ | nr as u32
}

/// An ioctl with its number chosen at run time over one `T`, returning the raw result.
struct Dynamic<T> {
    opcode: u32,
    arg: *mut T,
}

// SAFETY: `as_ptr` returns the argument pointer the constructing function vouches for; the
// output is the ioctl's raw return value.
unsafe impl<T> rustix::ioctl::Ioctl for Dynamic<T> {
    type Output = rustix::ioctl::IoctlOutput;
    const IS_MUTATING: bool = true;
    fn opcode(&self) -> Opcode {
        self.opcode as Opcode
    }
    fn as_ptr(&mut self) -> *mut core::ffi::c_void {
        self.arg.cast()
    }
    unsafe fn output_from_ptr(
        out: rustix::ioctl::IoctlOutput,
        _: *mut core::ffi::c_void,
    ) -> rustix::io::Result<rustix::ioctl::IoctlOutput> {
        Ok(out)
    }
}

/// The test_hmm request `request` (by number, see [`dmirror_request`]) on `d` over
/// `npages` pages at `addr`, which need not be valid; the errno on failure.
///
/// The command's `ptr` is a zeroed buffer of `npages` pages owned by this call (null when
/// that is more than 64 pages: the kernel then fails its copy with EFAULT), so whatever
/// the kernel copies out (READ, SNAPSHOT, MIGRATE) lands there and a WRITE reads zeros from
/// it. The only request of any known numbering that stores into the memory at `addr` is
/// WRITE (number 1 in every numbering): for it the range must lie inside `memory`, which is
/// borrowed mutably (no reference into it is alive) and tracks its pages itself (panics
/// otherwise). Other requests move pages (migrations, exclusive access) without changing
/// what they hold.
pub fn dmirror_cmd(
    d: &hmm::Dmirror,
    request: u32,
    addr: u64,
    npages: u64,
    memory: &mut crate::sys_call::mem::Region,
) -> Result<(), Errno> {
    const WRITE_NR: u32 = 1;
    let page = crate::sys_call::mem::page() as u64;
    if request & 0xff == WRITE_NR {
        let len = npages.checked_mul(page);
        assert!(
            len.is_some_and(|len| memory.covers(addr, len)),
            "a raw WRITE must stay inside the Region it is given"
        );
    }
    let mut bounce = match npages.checked_mul(page) {
        Some(len) if npages <= 64 => vec![0u8; len as usize],
        _ => Vec::new(),
    };
    let mut cmd = ioctl_sys::test_hmm::hmm_dmirror_cmd {
        addr,
        ptr: if bounce.is_empty() {
            0
        } else {
            bounce.as_mut_ptr() as u64
        },
        npages,
        ..Default::default()
    };
    let req = Dynamic {
        opcode: request,
        arg: core::ptr::from_mut(&mut cmd),
    };
    let fd = rustix::fd::AsFd::as_fd(d);
    // SAFETY: `fd` is a test_hmm file (a `Dmirror`) and `request` an `_IOWR` over one
    // hmm_dmirror_cmd (`cmd`, alive for the call). The kernel writes through `ptr` at most
    // `npages` pages (READ, MIGRATE) or `npages` bytes (SNAPSHOT): `bounce` has `npages`
    // pages, or `ptr` is null. It stores into the memory at `addr` only for WRITE, whose
    // range was checked above to lie in `memory`, exclusively borrowed, so no Rust reference
    // to it is alive. Nothing else of this process is written.
    let r = unsafe { ioctl(fd, req) }.map(|_| ());
    drop(bounce);
    r
}

fn own(raw: rustix::ioctl::IoctlOutput) -> rustix::fd::OwnedFd {
    use rustix::fd::FromRawFd;
    assert!(raw >= 0);
    // SAFETY: udmabuf's requests return a new fd as the result; nothing else owns it.
    unsafe { rustix::fd::OwnedFd::from_raw_fd(raw) }
}

/// `mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, offset)` as the kernel answers
/// it, unmapped again at once: the errno of a mapping the safe API refuses to ask for.
pub fn mmap_shared(fd: BorrowedFd<'_>, offset: u64, len: usize) -> Result<(), Errno> {
    use rustix::mm::{MapFlags, ProtFlags};
    // SAFETY: a new mapping chosen by the kernel (no MAP_FIXED) cannot overlap memory this
    // process uses; it is unmapped before anything can reference it.
    let p = unsafe {
        rustix::mm::mmap(
            core::ptr::null_mut(),
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED,
            fd,
            offset,
        )
    }?;
    // SAFETY: exactly the mapping created above, never shared.
    unsafe { rustix::mm::munmap(p, len) }
}

/// `UDMABUF_CREATE` with exactly `arg`: the new dma-buf, or the errno.
pub fn udmabuf_create(
    fd: BorrowedFd<'_>,
    mut arg: ioctl_sys::udmabuf::udmabuf_create,
) -> Result<rustix::fd::OwnedFd, Errno> {
    let req = Dynamic {
        opcode: ioctl_sys::udmabuf::UDMABUF_CREATE,
        arg: core::ptr::from_mut(&mut arg),
    };
    // SAFETY: UDMABUF_CREATE reads one plain-data udmabuf_create (no pointers), which
    // `arg` is for the whole call.
    unsafe { ioctl(fd, req) }.map(own)
}

/// `UDMABUF_CREATE_LIST` with the header `flags`, `count` (which may differ from the number
/// of `items`, which must then be at least `count`) and `items`.
pub fn udmabuf_create_list(
    fd: BorrowedFd<'_>,
    flags: u32,
    count: u32,
    items: &[ioctl_sys::udmabuf::udmabuf_create_item],
) -> Result<rustix::fd::OwnedFd, Errno> {
    assert!(count as usize <= items.len() || items.is_empty() && count == 0);
    let mut words = vec![0u64; 1 + 3 * items.len()];
    words[0] = u64::from(flags) | (u64::from(count) << 32);
    for (i, it) in items.iter().enumerate() {
        words[1 + 3 * i] = u64::from(it.memfd);
        words[2 + 3 * i] = it.offset;
        words[3 + 3 * i] = it.size;
    }
    let req = Dynamic {
        opcode: ioctl_sys::udmabuf::UDMABUF_CREATE_LIST,
        arg: words.as_mut_ptr(),
    };
    // SAFETY: the kernel reads the 8-byte header and then `count` 24-byte items, all inside
    // `words` (count <= items, asserted), which lives for the whole call; no pointers.
    unsafe { ioctl(fd, req) }.map(own)
}

/// Installs `handler` for SIGALRM without `SA_RESTART`, so that a blocking call the signal
/// interrupts fails with EINTR instead of being restarted by the kernel (the point of a
/// signal storm).
pub fn sigalrm_handler_without_restart(handler: extern "C" fn(libc::c_int)) -> Result<(), Errno> {
    // SAFETY: sigaction is plain data; zeroed is a valid value (empty mask, no flags).
    let mut sa: libc::sigaction = unsafe { core::mem::zeroed() };
    sa.sa_sigaction = handler as usize;
    sa.sa_flags = 0;
    // SAFETY: `sa.sa_mask` is a valid sigset_t owned by this frame.
    unsafe { libc::sigemptyset(&mut sa.sa_mask) };
    // SAFETY: `sa` is a fully initialised sigaction whose handler is an `extern "C"` fn
    // taking the signal number (no SA_SIGINFO), and the old action is not asked for.
    let r = unsafe { libc::sigaction(libc::SIGALRM, &sa, core::ptr::null_mut()) };
    if r == 0 {
        Ok(())
    } else {
        Err(Errno::from_raw_os_error(errno()))
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EINVAL)
}

/// Blocks SIGALRM in the calling thread only (`pthread_sigmask`).
pub fn block_sigalrm_in_this_thread() {
    // SAFETY: `set` is a valid sigset_t owned by this frame; sigemptyset initialises it.
    let mut set: libc::sigset_t = unsafe { core::mem::zeroed() };
    // SAFETY: as above; `set` is initialised before pthread_sigmask reads it, and the old
    // mask is not asked for.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGALRM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, core::ptr::null_mut());
    }
}

/// `tgkill(getpid(), tid, SIGALRM)`: SIGALRM to one thread of this process (ESRCH once it
/// has exited; the thread group id keeps a reused tid of another process out of reach).
pub fn sigalrm_to_thread(tid: i32) -> Result<(), Errno> {
    let pid = rustix::process::getpid().as_raw_nonzero().get();
    // SAFETY: tgkill takes three integers and touches no memory of ours.
    let r = unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, libc::SIGALRM) };
    if r == 0 {
        Ok(())
    } else {
        Err(Errno::from_raw_os_error(errno()))
    }
}

/// Runs `f` when the process exits normally (`atexit`).
pub fn at_exit(f: extern "C" fn()) {
    // SAFETY: `f` is an `extern "C" fn()` with static lifetime, as atexit requires.
    unsafe { libc::atexit(f) };
}

/// Runs [`crate::storm::from_env`] in every process that links this crate (every kernel
/// test binary), before `main`: the storm covers each test from its first instruction.
// SAFETY: an `.init_array` entry is called once by the dynamic loader with (argc, argv,
// envp), which an `extern "C" fn()` may ignore on x86-64 and aarch64; `from_env` only reads
// the environment and, when asked, installs a handler and starts a thread.
#[used]
#[unsafe(link_section = ".init_array")]
static STORM_FROM_ENV: extern "C" fn() = crate::storm::from_env;

/// The calling thread's id (`gettid`).
pub fn gettid() -> i32 {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}
