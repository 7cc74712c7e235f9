//! Fixtures for tests that run inside QEMU guests against real kernels and drivers.
//!
//! On a host without the device a test prints a loud `SKIP` line and returns; under
//! `KERNEL_TESTS_STRICT=1` (set by `vm` inside the guest, where the device must exist) the
//! same skip is a failure, so a broken guest cannot pass silently.
//!
//! ```
//! fn needs_a_node() {
//!     if drm_gem::enumerate().is_err() {
//!         kernel_tests::skip!("no DRM nodes on this machine");
//!     }
//! }
//! # if std::env::var_os("KERNEL_TESTS_STRICT").is_none() { needs_a_node(); }
//! ```

#![deny(unsafe_code)]

pub mod census;
pub mod fixtures;
pub mod kernel_release;
pub mod leaks;
pub mod mem;
pub mod pmem;
pub mod prime;
pub mod sample;
mod sys_call;
pub mod udmabuf_limit;

pub use sys_call::raw;

pub use census::Census;
pub use fixtures::{
    fds_exclusive, fds_shared, no_leak, open_driver, open_fds, plane_of_kind, vkms,
};
pub use leaks::{Delta, changes, changes_process, unchanged, unchanged_process};

/// Whether this run is strict (inside a guest built to have every device).
pub fn strict() -> bool {
    std::env::var_os("KERNEL_TESTS_STRICT").is_some_and(|v| v != "0")
}

/// Prints why a test did not run and returns from it; panics instead in strict mode.
#[macro_export]
macro_rules! skip {
    ($($why:tt)+) => {{
        let why = format!($($why)+);
        if $crate::strict() {
            panic!("required in strict mode: {why}");
        }
        // libtest names each test's thread after the test.
        let thread = std::thread::current();
        let test = thread.name().unwrap_or(module_path!());
        eprintln!("SKIP {test}: {why}");
        $crate::log_skip(test, &why);
        return;
    }};
}

/// Appends a skip to `$KERNEL_TESTS_SKIP_LOG` when set, so a runner whose test harness hides
/// passing tests' output (cargo test on the host) can still count and list every skip.
pub fn log_skip(test: &str, why: &str) {
    use std::io::Write;
    fds_shared();
    if let Some(p) = std::env::var_os("KERNEL_TESTS_SKIP_LOG")
        && let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
    {
        let _ = writeln!(f, "SKIP {test}: {why}");
    }
}

/// Whether the guest was built to have `feature` (`vkms`, `vgem`, `virtio_gpu`, `bochs`,
/// `qxl`, `udmabuf`, `test_hmm`, `pmem`, `dma_heap`, `sw_sync`, `tracing`, `dmem` (the dmem cgroup
/// controller), `qxl_dmem` (the test-only qxl patch of debian-7.3), `vkms_fdinfo`: the
/// test-only vkms patch of stock-6.12-fdinfo). The harness lists what a
/// kernel lacks by construction (a stock Debian kernel has no test_hmm, for example) in
/// `VM_MISSING_FEATURES`; everything else is expected.
pub fn expected(feature: &str) -> bool {
    std::env::var("VM_MISSING_FEATURES")
        .map(|v| !v.split(',').any(|f| f.trim() == feature))
        .unwrap_or(true)
}

/// Skips (loudly, even in strict mode) when the guest's kernel was not built to have
/// `feature`: that is a fact about the kernel, not a broken guest. A test that asks for a
/// feature is taken to open fds: it holds the fd lock shared ([`fds_shared`]) from here on.
#[macro_export]
macro_rules! require_feature {
    ($feature:expr) => {
        $crate::fds_shared();
        if !$crate::expected($feature) {
            let thread = std::thread::current();
            let test = thread.name().unwrap_or(module_path!());
            let why = format!(
                "this kernel is not built with {} (VM_MISSING_FEATURES)",
                $feature
            );
            eprintln!("SKIP {test}: {why}");
            $crate::log_skip(test, &why);
            return;
        }
    };
}

/// Whether this process runs inside a `vm` guest.
pub fn in_guest() -> bool {
    std::env::var_os("VM_GUEST").is_some()
}

/// The first DRM node whose bound driver (sysfs) is one of `drivers`.
pub fn node_of_driver(drivers: &[&str]) -> Option<drm_gem::NodeInfo> {
    fds_shared();
    drm_gem::enumerate()
        .ok()?
        .into_iter()
        .find(|n| n.driver.as_deref().is_some_and(|d| drivers.contains(&d)))
}

/// The running kernel's `major.minor`, for per-kernel expectations in tests (never for
/// feature decisions in the libraries, which probe).
pub fn kernel_version() -> (u32, u32) {
    let r = rustix::system::uname();
    let rel = r.release().to_string_lossy();
    let mut it = rel
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse().ok());
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

/// Turns every CRTC, connector and plane of `dev` off with one atomic commit (the caller
/// must be master with the ATOMIC client cap), so that a test starts from a known state
/// even on kernels whose fbdev emulation lit a CRTC at boot.
pub fn kms_all_off(dev: &drm_gem::Device) -> drm_gem::Result<()> {
    use drm_gem::kms::{AtomicFlags, AtomicRequest, Snapshot};
    let snap = Snapshot::take(dev)?;
    let mut req = AtomicRequest::new();
    for c in &snap.crtcs {
        for name in ["ACTIVE", "MODE_ID"] {
            if let Some(p) = c.property(name).map(|p| p.property.id) {
                req.set(c.crtc.id, p, 0);
            }
        }
    }
    for c in &snap.connectors {
        if let Some(p) = c.property("CRTC_ID").map(|p| p.property.id) {
            req.set(c.connector.id, p, 0);
        }
    }
    for p in &snap.planes {
        for name in ["FB_ID", "CRTC_ID"] {
            if let Some(id) = p.property(name).map(|p| p.property.id) {
                req.set(p.plane.id, id, 0);
            }
        }
    }
    dev.atomic_commit(&req, AtomicFlags::ALLOW_MODESET, 0)
        .map(|_| ())
}

/// A single-plane XRGB8888 framebuffer over all of `buf` (its spec's size, the kernel's
/// pitch).
pub fn xrgb_fb<'d>(
    dev: &'d drm_gem::Device,
    buf: &drm_gem::DumbBuffer<&drm_gem::Device>,
) -> drm_gem::Result<drm_gem::kms::Framebuffer<&'d drm_gem::Device>> {
    dev.add_framebuffer(&drm_gem::kms::FbSpec::for_dumb(
        buf,
        drm_gem::DrmFourcc::Xrgb8888,
    ))
}

/// vkms's virtual connector and its 1024x768 mode, probed (the caller must be master for
/// the kernel to probe).
pub fn vkms_output(
    dev: &drm_gem::Device,
    snap: &drm_gem::kms::Snapshot,
) -> (drm_gem::kms::ConnectorId, drm_gem::kms::Mode) {
    let conn = snap
        .connectors
        .iter()
        .find(|c| c.connector.kind == ioctl_sys::drm::DRM_MODE_CONNECTOR_VIRTUAL)
        .expect("vkms has a virtual connector")
        .connector
        .id;
    let mode = *dev
        .probe_connector(conn)
        .expect("probe the virtual connector")
        .modes
        .iter()
        .find(|m| m.size() == (1024, 768))
        .expect("vkms offers 1024x768");
    (conn, mode)
}

/// A signal storm like IGT's `sig_ioctl`: SIGALRM every 100 us, handled without
/// `SA_RESTART`, sent to every thread of the process, so that every blocking syscall of a
/// test keeps being interrupted (EINTR) and every retry loop and timed wait is exercised.
///
/// `KERNEL_TESTS_SIGNAL_STORM=1` starts it in every kernel test process before `main` (see
/// `raw`); a test can also [`storm::start`] it itself. The count of delivered signals is
/// printed at exit as `signal-storm: N signals ...` (and appended to
/// `$KERNEL_TESTS_STORM_LOG` when set).
///
/// A process-directed timer (`setitimer(ITIMER_REAL)`) is not enough: the kernel delivers
/// it to the main thread whenever that thread can take it, and libtest's main thread only
/// waits for the test thread, which would never see EINTR. So a storm thread paces itself
/// with a 100 us sleep and `tgkill`s each thread (the list re-read from `/proc/self/task`
/// every 20 rounds, about 2 ms).
pub mod storm {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    /// The interval between two rounds of signals.
    pub const INTERVAL: Duration = Duration::from_micros(100);
    /// Rounds between two readings of the thread list (a new thread joins the storm within
    /// this many rounds).
    const REFRESH: u64 = 20;

    static DELIVERED: AtomicU64 = AtomicU64::new(0);
    static SENT: AtomicU64 = AtomicU64::new(0);
    static STARTED: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

    std::thread_local! {
        static HERE: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
    }

    extern "C" fn on_alarm(_: core::ffi::c_int) {
        // Async-signal-safe: an atomic add, and a const-initialised thread-local without a
        // destructor (a plain TLS access, no allocation).
        DELIVERED.fetch_add(1, Ordering::Relaxed);
        HERE.with(|n| n.set(n.get() + 1));
    }

    /// Signals delivered to the calling thread so far.
    pub fn delivered_here() -> u64 {
        HERE.with(|n| n.get())
    }

    /// Waits (sleeping) until the storm has reached the calling thread, which a new thread
    /// joins within a few list refreshes; false if it has not after `limit`.
    pub fn wait_until_hit(limit: Duration) -> bool {
        let t0 = Instant::now();
        while delivered_here() == 0 {
            if t0.elapsed() > limit {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    extern "C" fn report() {
        use std::io::Write;
        if let Some(t0) = STARTED.get() {
            let line = format!(
                "signal-storm: {} signals delivered ({} sent) in {:.1} s by {}",
                delivered(),
                SENT.load(Ordering::Relaxed),
                t0.elapsed().as_secs_f64(),
                suite()
            );
            eprintln!("{line}");
            // One line per test process, for a runner that hides passing tests' output.
            if let Some(p) = std::env::var_os("KERNEL_TESTS_STORM_LOG")
                && let Ok(mut f) = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
            {
                let _ = writeln!(f, "{line}");
            }
        }
    }

    /// The test binary's suite name: cargo's `<suite>-<hash>` file name without the hash
    /// (`negative` for `target/release/deps/negative-0123abcd`), `?` when unknown. One word,
    /// the storm log's last field, by which `scripts/guest-storm` sums signals per binary.
    fn suite() -> String {
        let exe = std::env::args_os().next().unwrap_or_default();
        let name = std::path::Path::new(&exe)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        suite_of(&name)
    }

    /// [`suite`] of an executable's file name.
    fn suite_of(name: &str) -> String {
        let suite = match name.rsplit_once('-') {
            Some((s, hash)) if !s.is_empty() && hash.bytes().all(|b| b.is_ascii_hexdigit()) => s,
            _ => name,
        };
        let word: String = suite
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
            .collect();
        if word.is_empty() { "?".into() } else { word }
    }

    /// Whether `KERNEL_TESTS_SIGNAL_STORM` asks for the storm (set and not `0`).
    pub fn requested() -> bool {
        std::env::var_os("KERNEL_TESTS_SIGNAL_STORM").is_some_and(|v| !v.is_empty() && v != "0")
    }

    /// Starts the storm when [`requested`] (called before `main` in every test process).
    pub extern "C" fn from_env() {
        if requested() {
            start();
        }
    }

    /// Signals delivered to this process's handler so far.
    pub fn delivered() -> u64 {
        DELIVERED.load(Ordering::Relaxed)
    }

    /// Whether the storm runs in this process.
    pub fn active() -> bool {
        STARTED.get().is_some()
    }

    /// Starts the storm (once per process; later calls do nothing): installs the handler,
    /// starts the storm thread and registers the exit report.
    pub fn start() {
        STARTED.get_or_init(|| {
            crate::raw::sigalrm_handler_without_restart(on_alarm)
                .expect("sigaction(SIGALRM) for the signal storm");
            crate::raw::at_exit(report);
            // Opened here, before any test counts its fds, and kept for the process's life.
            let dir = rustix::fs::open(
                "/proc/self/task",
                rustix::fs::OFlags::RDONLY
                    | rustix::fs::OFlags::DIRECTORY
                    | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .and_then(rustix::fs::Dir::new)
            .ok();
            std::thread::Builder::new()
                .name("signal-storm".into())
                .spawn(move || storm_thread(dir))
                .expect("start the signal-storm thread");
            Instant::now()
        });
    }

    /// The thread ids of this process but the caller, from `dir` (`/proc/self/task`, kept
    /// open so that the storm never adds an fd for a leak check to see; parsed as hostile
    /// text: anything but a positive number is skipped).
    fn other_threads(dir: &mut Option<rustix::fs::Dir>, me: i32) -> Vec<i32> {
        let Some(d) = dir else {
            return Vec::new();
        };
        d.rewind();
        let mut out = Vec::new();
        while let Some(Ok(e)) = d.read() {
            if let Some(t) = e
                .file_name()
                .to_str()
                .ok()
                .and_then(|n| n.parse::<i32>().ok())
                && t > 0
                && t != me
            {
                out.push(t);
            }
        }
        out
    }

    fn storm_thread(mut dir: Option<rustix::fs::Dir>) {
        crate::raw::block_sigalrm_in_this_thread();
        let me = crate::raw::gettid();
        let mut tids = Vec::new();
        for round in 0u64.. {
            if round % REFRESH == 0 {
                tids = other_threads(&mut dir, me);
            }
            for &t in &tids {
                if crate::raw::sigalrm_to_thread(t).is_ok() {
                    SENT.fetch_add(1, Ordering::Relaxed);
                }
            }
            std::thread::sleep(INTERVAL);
        }
    }

    #[cfg(test)]
    mod tests {
        use super::suite_of;

        #[test]
        fn suite_names_drop_cargos_hash_and_anything_but_a_word() {
            assert_eq!(suite_of("negative-0123abcdef456789"), "negative");
            assert_eq!(suite_of("drmtool_run-9f8e"), "drmtool_run");
            assert_eq!(suite_of("random_ops"), "random_ops");
            assert_eq!(suite_of("a-b-notahash"), "a-b-notahash");
            assert_eq!(suite_of("x y\n-00"), "xy");
            assert_eq!(suite_of(""), "?");
            assert_eq!(suite_of("-00"), "-00");
        }
    }
}

/// A job's output read line by line (trimmed) through the first line that starts with
/// `last` (`qxl-alloc`'s `held N`): `Ok` with every line read, or `Err` with those read
/// before the output ended without it.
pub fn lines_through(out: impl std::io::BufRead, last: &str) -> Result<Vec<String>, Vec<String>> {
    let mut lines = Vec::new();
    for l in out.lines() {
        let Ok(l) = l else { break };
        let l = l.trim().to_string();
        let done = l.starts_with(last);
        lines.push(l);
        if done {
            return Ok(lines);
        }
    }
    Err(lines)
}

/// Where a program is: the first `PATH` directory holding it, else `/usr/sbin` or `/sbin`
/// (daemons such as slurmd and munged live there, off a plain user's PATH).
pub fn which(prog: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
}

/// Makes the cgroup directory `dir` and hands it to `uid` as systemd's `Delegate=` does (the
/// directory and its `cgroup.procs` chowned): a cgroup that user may write.
pub fn delegated_cgroup(dir: &std::path::Path, uid: u32) {
    std::fs::create_dir(dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
    for f in [dir.to_path_buf(), dir.join("cgroup.procs")] {
        rustix::fs::chown(
            &f,
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(uid)),
        )
        .unwrap_or_else(|e| panic!("chown {}: {e}", f.display()));
    }
}
