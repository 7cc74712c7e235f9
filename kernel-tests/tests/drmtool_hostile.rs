//! `drmtool buffers` against hostile processes in real guests: a dma-buf whose name
//! injects a `size:` line and a process name with terminal escapes must not change a figure
//! nor reach the terminal raw; a file held open on a FUSE mount that never answers must not
//! stop the scan.
//!
//! The FUSE server is this test's own (no libfuse): it opens `/dev/fuse`, mounts it, answers
//! `FUSE_INIT` and the few requests a child needs to open one file, then answers nothing.

use drm_gem::{Device, DumbBuffer, DumbSpec, PrimeFlags};
use drmtool::cli::run_captured;
use kernel_tests::skip;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Sets this process's name (`/proc/self/comm` is the thread group leader's).
fn set_comm(name: &[u8]) {
    std::fs::write("/proc/self/comm", name).expect("write /proc/self/comm");
}

#[test]
fn injected_dmabuf_name_and_escaped_comm_change_nothing() {
    // vgem exports on every kernel; vkms answers ENOSYS to a PRIME export on 5.10.
    let Some(node) = kernel_tests::node_of_driver(&["vgem"]) else {
        skip!("no vgem node");
    };
    let dev = Device::open(&node.path).expect("open");
    let buf = DumbBuffer::create(
        &dev,
        DumbSpec {
            width: 64,
            height: 32,
            bpp: 32,
        },
    )
    .expect("dumb buffer");
    let dmabuf = dev
        .export(buf.gem(), PrimeFlags::default())
        .expect("PRIME export");
    let injected = "x\nsize:\t1099511627776";
    dmabuf.set_name(injected).expect("DMA_BUF_SET_NAME");
    let info = dmabuf.info().expect("own fdinfo");
    assert_eq!(info.size, 8192);
    let old_comm = std::fs::read("/proc/self/comm").expect("comm");
    let comm = b"\x1b]0;pwn\x07\x1b[2J";
    set_comm(comm);
    let pid = std::process::id().to_string();
    let json = run_captured(&["buffers", "--json", "--pid", &pid]);
    let human = run_captured(&["buffers", "--by", "buffer", "--pid", &pid]);
    let by_process = run_captured(&["buffers", "--pid", &pid]);
    set_comm(old_comm.strip_suffix(b"\n").unwrap_or(&old_comm));
    for (code, out) in [&json, &human, &by_process] {
        assert_eq!(*code, ExitCode::SUCCESS, "{out}");
    }
    let v: serde_json::Value = serde_json::from_str(&json.1).expect("JSON");
    let ino = std::fs::metadata(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&dmabuf.as_fd())
    ))
    .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
    .expect("stat own dma-buf");
    let b = v["dmabufs"]
        .as_array()
        .expect("dmabufs")
        .iter()
        .find(|b| b["inode"] == ino)
        .unwrap_or_else(|| panic!("dma-buf {ino} missing: {}", json.1));
    assert_eq!(b["size"]["value"], 8192, "the name must not set the size");
    assert_eq!(b["name"], injected, "JSON keeps the exact name");
    let p = &v["processes"][0];
    assert_eq!(
        p["comm"].as_str().map(str::as_bytes),
        Some(&comm[..]),
        "JSON keeps the exact comm"
    );
    for (what, out) in [("--by buffer", &human.1), ("--by process", &by_process.1)] {
        assert!(
            !out.contains('\x1b'),
            "{what}: an ESC byte reached the output:\n{out:?}"
        );
        assert!(
            !out.contains('\x07'),
            "{what}: a BEL byte reached the output"
        );
        // The name's digits show (escaped), never as a size.
        assert!(!out.contains("TiB"), "{what}: {out}");
    }
    let row = human
        .1
        .lines()
        .find(|l| l.contains(r#""x\x0asize:\x091099511627776""#))
        .unwrap_or_else(|| panic!("no row with the escaped name:\n{}", human.1));
    assert!(row.contains("8.0 KiB [dmabuf]"), "{row}");
    assert!(
        by_process.1.contains("\\x1b]0;pwn\\x07"),
        "{}",
        by_process.1
    );
}

// ---- FUSE ----------------------------------------------------------------------------

const FUSE_LOOKUP: u32 = 1;
const FUSE_FORGET: u32 = 2;
const FUSE_GETATTR: u32 = 3;
const FUSE_OPEN: u32 = 14;
const FUSE_RELEASE: u32 = 18;
const FUSE_FLUSH: u32 = 25;
const FUSE_INIT: u32 = 26;
const FUSE_INTERRUPT: u32 = 36;
const FUSE_BATCH_FORGET: u32 = 42;
const ROOT: u64 = 1;
const FILE: u64 = 2;

/// `struct fuse_attr` (88 bytes) of inode `ino`.
fn attr(ino: u64) -> Vec<u8> {
    let mode: u32 = if ino == ROOT { 0o040755 } else { 0o100644 };
    let mut a = Vec::with_capacity(88);
    a.extend(ino.to_ne_bytes()); // ino
    a.extend(0u64.to_ne_bytes()); // size
    a.extend(0u64.to_ne_bytes()); // blocks
    a.extend([0u8; 24]); // atime, mtime, ctime
    a.extend([0u8; 12]); // their nsec
    a.extend(mode.to_ne_bytes());
    a.extend(1u32.to_ne_bytes()); // nlink
    a.extend([0u8; 8]); // uid, gid
    a.extend(0u32.to_ne_bytes()); // rdev
    a.extend(4096u32.to_ne_bytes()); // blksize
    a.extend(0u32.to_ne_bytes()); // flags / padding
    assert_eq!(a.len(), 88);
    a
}

/// One request: opcode, unique, nodeid, the argument bytes.
struct Request {
    opcode: u32,
    unique: u64,
    nodeid: u64,
    arg: Vec<u8>,
}

fn parse_request(b: &[u8]) -> Request {
    let u32_at = |o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_ne_bytes(b[o..o + 8].try_into().unwrap());
    let len = (u32_at(0) as usize).min(b.len());
    Request {
        opcode: u32_at(4),
        unique: u64_at(8),
        nodeid: u64_at(16),
        arg: b[40..len].to_vec(),
    }
}

/// Writes a reply (`struct fuse_out_header` and `body`); `error` is a negative errno.
fn reply(dev: &mut std::fs::File, unique: u64, error: i32, body: &[u8]) {
    let mut m = Vec::with_capacity(16 + body.len());
    m.extend(((16 + body.len()) as u32).to_ne_bytes());
    m.extend(error.to_ne_bytes());
    m.extend(unique.to_ne_bytes());
    m.extend(body);
    // A request interrupted meanwhile answers ENOENT: not an error of the test.
    let _ = dev.write(&m);
}

/// Answers one request the way a file system with one empty file `f` would.
fn answer(dev: &mut std::fs::File, r: &Request) {
    const ENOENT: i32 = -2;
    const ENOSYS: i32 = -38;
    match r.opcode {
        FUSE_INIT => {
            let mut out = Vec::with_capacity(64);
            out.extend(7u32.to_ne_bytes()); // major
            out.extend(26u32.to_ne_bytes()); // minor: no newer features asked for
            out.extend(0u32.to_ne_bytes()); // max_readahead
            out.extend(0u32.to_ne_bytes()); // flags
            out.extend(1u16.to_ne_bytes()); // max_background
            out.extend(1u16.to_ne_bytes()); // congestion_threshold
            out.extend(4096u32.to_ne_bytes()); // max_write
            out.extend(1u32.to_ne_bytes()); // time_gran
            out.resize(64, 0);
            reply(dev, r.unique, 0, &out);
        }
        FUSE_LOOKUP => {
            let name = r.arg.split(|&b| b == 0).next().unwrap_or_default();
            if r.nodeid == ROOT && name == b"f" {
                let mut out = Vec::new();
                out.extend(FILE.to_ne_bytes()); // nodeid
                out.extend(1u64.to_ne_bytes()); // generation
                out.extend([0u8; 24]); // entry_valid, attr_valid, their nsec: 0, never cached
                out.extend(attr(FILE));
                reply(dev, r.unique, 0, &out);
            } else {
                reply(dev, r.unique, ENOENT, &[]);
            }
        }
        FUSE_GETATTR => {
            let mut out = vec![0u8; 16]; // attr_valid 0: every stat asks again
            out.extend(attr(r.nodeid));
            reply(dev, r.unique, 0, &out);
        }
        FUSE_OPEN => reply(dev, r.unique, 0, &[0u8; 16]),
        FUSE_FLUSH | FUSE_RELEASE => reply(dev, r.unique, 0, &[]),
        FUSE_FORGET | FUSE_BATCH_FORGET | FUSE_INTERRUPT => {}
        _ => reply(dev, r.unique, ENOSYS, &[]),
    }
}

/// Serves `dev` until `done` says so (polled between requests), or panics after `limit`.
fn serve_until(dev: &mut std::fs::File, limit: Duration, mut done: impl FnMut() -> bool) {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let start = Instant::now();
    let mut buf = vec![0u8; 1 << 17];
    while !done() {
        assert!(
            start.elapsed() < limit,
            "the FUSE setup took over {limit:?}"
        );
        let mut fds = [PollFd::new(&*dev, PollFlags::IN)];
        let t = Timespec {
            tv_sec: 0,
            tv_nsec: 50_000_000,
        };
        if poll(&mut fds, Some(&t)).unwrap_or(0) == 0 {
            continue;
        }
        match dev.read(&mut buf) {
            Ok(n) if n >= 40 => answer(dev, &parse_request(&buf[..n])),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.raw_os_error() == Some(2) => {} // ENOENT: an interrupted request
            Err(e) => panic!("read /dev/fuse: {e}"),
        }
    }
}

/// `/dev/fuse`, loading the module on a kernel that has fuse as one.
fn open_fuse() -> Option<std::fs::File> {
    if !std::path::Path::new("/dev/fuse").exists()
        && let Ok(root) = std::env::var("VM_MODULES_ROOT")
    {
        let _ = Command::new("modprobe")
            .arg("-d")
            .arg(root)
            .arg("fuse")
            .status();
    }
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .ok()
}

fn mounted(mnt: &str) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(mnt))
}

#[test]
fn a_fuse_file_that_never_answers_does_not_stop_the_scan() {
    let Some(node) = kernel_tests::node_of_driver(&["vgem", "vkms"]) else {
        skip!("no vgem or vkms node");
    };
    let Some(mut fuse) = open_fuse() else {
        skip!("no /dev/fuse (CONFIG_FUSE_FS)");
    };
    let mnt = format!("/tmp/drmtool-fuse-{}", std::process::id());
    std::fs::create_dir_all(&mnt).expect("mount point");
    let opts = std::ffi::CString::new(format!(
        "fd={},rootmode=40000,user_id=0,group_id=0",
        std::os::fd::AsRawFd::as_raw_fd(&fuse.as_fd())
    ))
    .expect("no NUL");
    rustix::mount::mount(
        "drmtool-test",
        mnt.as_str(),
        "fuse",
        rustix::mount::MountFlags::NOSUID | rustix::mount::MountFlags::NODEV,
        Some(opts.as_c_str()),
    )
    .expect("mount fuse");
    // A child holds the FUSE file (fd 3) and the DRM node (fd 4).
    let file = format!("{mnt}/f");
    let node_path = node.path.display().to_string();
    let mut child = Command::new("/bin/sh")
        .args([
            "-c",
            "exec 3<\"$1\" 4<\"$2\"; echo ready; exec sleep 600",
            "sh",
            &file,
            &node_path,
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the holder");
    let out = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(out).read_line(&mut line);
        let _ = tx.send(line);
    });
    let mut ready = None;
    serve_until(&mut fuse, Duration::from_secs(60), || {
        if ready.is_none() {
            ready = rx.try_recv().ok();
        }
        ready.is_some()
    });
    assert_eq!(
        ready.as_deref(),
        Some("ready\n"),
        "the holder could not open {file}"
    );
    let link = std::fs::read_link(format!("/proc/{}/fd/3", child.id())).expect("holder's fd 3");
    assert_eq!(link.display().to_string(), file);
    // From now on the file system answers nothing.
    let pid = child.id().to_string();
    let (tx, rx) = mpsc::channel();
    let scan_pid = pid.clone();
    std::thread::spawn(move || {
        let _ = tx.send(run_captured(&["buffers", "--json", "--pid", &scan_pid]));
    });
    let bound = Duration::from_secs(30);
    let result = rx.recv_timeout(bound);
    // Clean up before judging: closing /dev/fuse aborts the connection (a stuck stat then
    // fails with ENOTCONN), the holder goes, the mount is detached.
    drop(fuse);
    let _ = child.kill();
    let _ = child.wait();
    let _ = rustix::mount::unmount(mnt.as_str(), rustix::mount::UnmountFlags::DETACH);
    let _ = std::fs::remove_dir(&mnt);
    assert!(!mounted(&mnt), "{mnt} is still mounted");
    let (code, out) = result.unwrap_or_else(|_| {
        panic!("drmtool buffers did not finish within {bound:?}: the scan waits on the FUSE file")
    });
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let p = v["processes"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["pid"].as_u64() == pid.parse().ok()))
        .unwrap_or_else(|| panic!("the holder is not in the report: {out}"));
    let fds: Vec<u64> = p["drm_fds"]
        .as_array()
        .expect("drm_fds")
        .iter()
        .filter_map(|f| f["fd"].as_u64())
        .collect();
    assert_eq!(fds, vec![4], "the holder's DRM fd: {out}");
    assert_eq!(p["drm_fds"][0]["node"], node_path.as_str());
}

#[test]
fn a_panic_while_the_pattern_shows_still_restores_the_crtc() {
    use drm_gem::ClientCap;
    use drm_gem::kms::Snapshot;
    let Some(node) = kernel_tests::node_of_driver(&["vkms"]) else {
        skip!("no vkms node");
    };
    // This fd turns everything off, then stays open without master (see drmtool_cli).
    let watch = Device::open(&node.path).expect("open");
    watch.set_client_cap(ClientCap::UniversalPlanes, 1).unwrap();
    watch.set_client_cap(ClientCap::Atomic, 1).unwrap();
    watch.set_master().expect("master");
    kernel_tests::kms_all_off(&watch).expect("all off");
    let snap = Snapshot::take(&watch).unwrap();
    let (conn, _) = kernel_tests::vkms_output(&watch, &snap);
    watch.drop_master().unwrap();
    let name = snap
        .connectors
        .iter()
        .find(|c| c.connector.id == conn)
        .unwrap()
        .connector
        .name();
    let dev = Device::open(&node.path).expect("open");
    let mut lit_crtc = None;
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = drmtool::kms::modeset(&dev, &name, None, &mut |lit| {
            lit_crtc = Some(lit.crtc);
            panic!("a panic while the pattern shows");
        });
    }));
    assert!(r.is_err(), "the hold callback panicked");
    let crtc = lit_crtc.expect("the pattern was shown");
    let after = Snapshot::take(&watch).unwrap();
    let c = after
        .crtcs
        .iter()
        .find(|c| c.crtc.id.get() == crtc)
        .expect("the CRTC");
    assert!(
        c.crtc.mode.is_none() && c.crtc.framebuffer.is_none(),
        "the CRTC still shows the pattern after the panic: {:?}",
        c.crtc
    );
}

/// A writer that fails like `/dev/full`.
struct Full;

impl Write for Full {
    fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
        Err(std::io::Error::from_raw_os_error(28)) // ENOSPC
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn devices_to_a_full_output_exits_1() {
    if drm_gem::enumerate().is_err() {
        skip!("no DRM devices");
    }
    for args in [
        &["drmtool", "devices"][..],
        &["drmtool", "devices", "--json"],
    ] {
        let code = drmtool::cli::main_with(args.iter().map(Into::into), &mut Full);
        assert_eq!(code, ExitCode::FAILURE, "{args:?}");
    }
}

/// A scan never opens a primary node. The first opener of a primary node is DRM master while
/// it holds the file, so a root scan (`drmtool buffers`, every `export` scrape, `trace
/// record`'s memory samples, `pick`) that opened one would make another program's
/// SET_MASTER at that moment fail with EBUSY (seen: the trace test's vkms workload on
/// stock-6.1 met the recorder's memory sample). inotify on every node counts the opens while
/// `drm_gem::enumerate`, `drmtool devices`, `drmtool buffers --json` and one `export
/// --textfile` scrape run: no primary node is opened; the render nodes are (the control:
/// the watch sees opens); every primary node still has its driver's name.
#[test]
fn scans_never_open_a_primary_node() {
    use drm_gem::NodeKind;
    use rustix::fs::inotify;
    if !kernel_tests::in_guest() {
        skip!("not in a vm guest: no DRM devices here");
    }
    let nodes = drm_gem::enumerate().expect("the guest's DRM nodes");
    assert!(
        nodes.iter().any(|n| n.kind == NodeKind::Primary),
        "no primary node: {nodes:?}"
    );
    let ino = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)
        .expect("inotify_init1");
    let mut watched = std::collections::BTreeMap::new();
    for n in &nodes {
        let wd = inotify::add_watch(&ino, &n.path, inotify::WatchFlags::OPEN)
            .unwrap_or_else(|e| panic!("inotify_add_watch({}): {e}", n.path.display()));
        watched.insert(wd, n.clone());
    }

    let again = drm_gem::enumerate().expect("enumerate");
    let (code, text) = run_captured(&["devices"]);
    assert_eq!(code, ExitCode::SUCCESS, "{text}");
    let (code, text) = run_captured(&["buffers", "--json"]);
    assert_eq!(code, ExitCode::SUCCESS, "{text}");
    let prom = std::env::temp_dir().join(format!("scan-opens-{}.prom", std::process::id()));
    let (code, text) = run_captured(&[
        "export",
        "--textfile",
        prom.to_str().unwrap(),
        "--count",
        "1",
    ]);
    assert_eq!(code, ExitCode::SUCCESS, "{text}");
    let _ = std::fs::remove_file(&prom);

    let mut opened: Vec<(NodeKind, String)> = Vec::new();
    let mut buf = [std::mem::MaybeUninit::uninit(); 4096];
    let mut events = inotify::Reader::new(&ino, &mut buf);
    loop {
        match events.next() {
            Ok(e) => {
                let n = &watched[&e.wd()];
                opened.push((n.kind, n.path.display().to_string()));
            }
            Err(rustix::io::Errno::AGAIN) => break,
            Err(e) => panic!("reading inotify events: {e}"),
        }
    }
    let primary: Vec<_> = opened
        .iter()
        .filter(|(k, _)| *k == NodeKind::Primary)
        .collect();
    assert!(primary.is_empty(), "primary nodes opened: {primary:?}");
    if nodes.iter().any(|n| n.kind == NodeKind::Render) {
        assert!(
            opened.iter().any(|(k, _)| *k == NodeKind::Render),
            "the watch saw no open at all, not even of a render node: {opened:?}"
        );
    }
    for n in again.iter().filter(|n| n.kind == NodeKind::Primary) {
        assert!(
            n.driver.is_some(),
            "{} has no driver name without being opened",
            n.path.display()
        );
    }
}

/// The pids the kernel keeps for boot (`RESERVED_PIDS`): a wrapped allocation starts above.
const RESERVED_PIDS: u32 = 300;

/// The calling thread's id: a pid number the kernel allocated.
fn tid() -> u32 {
    u32::try_from(kernel_tests::raw::gettid()).expect("a positive thread id")
}

/// A new thread's id (the thread has exited when this returns: its id is free again, and
/// the kernel's next allocation starts after it).
fn next_tid() -> u32 {
    std::thread::spawn(tid).join().expect("thread")
}

/// `/proc/sys/kernel/pid_max` while it lives, set back on drop.
struct PidMax(String);
impl PidMax {
    fn lower_to(max: u32) -> PidMax {
        let path = "/proc/sys/kernel/pid_max";
        let old = std::fs::read_to_string(path).expect("read pid_max");
        std::fs::write(path, max.to_string()).expect("write pid_max (root in the guest)");
        PidMax(old)
    }
}
impl Drop for PidMax {
    fn drop(&mut self) {
        let _ = std::fs::write("/proc/sys/kernel/pid_max", self.0.trim());
    }
}

/// Spawns `cat` (holding its stdin) as pid `want` (above [`RESERVED_PIDS`]). With
/// `ns_last_pid` (CONFIG_CHECKPOINT_RESTORE): set to the pid before, then a spawn. Without
/// (the project's own kernels): `pid_max` lowered to `want + 1`, so that allocations wrap
/// below `want`, and short-lived threads walk the allocator up to it; `cat` is spawned when
/// every number between the last thread's and `want` is taken. Each way retried while
/// something else took the pid first; None if it never came.
fn spawn_as_pid(want: u32) -> Option<std::process::Child> {
    let spawn = || {
        let mut c = Command::new("cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn cat");
        if c.id() == want {
            return Some(c);
        }
        let _ = c.kill();
        let _ = c.wait();
        None
    };
    let last = std::path::Path::new("/proc/sys/kernel/ns_last_pid");
    if last.exists() {
        return (0..100).find_map(|_| {
            std::fs::write(last, (want - 1).to_string()).expect("write ns_last_pid");
            spawn()
        });
    }
    let _max = PidMax::lower_to(want + 1);
    let taken = |id: u32| std::path::Path::new(&format!("/proc/{id}")).exists();
    for _ in 0..4 * want {
        let t = next_tid();
        if t < want
            && want - t <= 64
            && (t + 1..want).all(taken)
            && let Some(c) = spawn()
        {
            return Some(c);
        }
    }
    None
}

/// `/proc/<pid>/comm` once it reads `want`, polling for up to 5 s; else the last read.
///
/// A spawn returns when the child's exec has let go of the parent's memory (the vfork
/// release in `exec_mmap`), which is before the kernel names the new program
/// (`__set_task_comm` in `setup_new_exec`): read at once, the comm can still be the
/// spawning thread's (stock-6.1, in a full lane: `a_reused_pid_is`).
fn comm_becomes(pid: u32, want: &str) -> Option<String> {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let got = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok();
        if got.as_deref() == Some(want) || std::time::Instant::now() > end {
            return got;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// What the scan relies on against pid reuse (the host test
/// `a_pid_reused_mid_read_lends_nothing_of_the_newcomer` checks the scan's side on a
/// synthetic tree): a process's `/proc/<pid>/fd` directory, opened while it ran, reaches
/// only that process through `..`. Here it exits, another process is made to take its pid
/// ([`spawn_as_pid`]), and then `/proc/<pid>/comm` by name is the newcomer's (what a read by
/// path would have taken) while `../comm` and `../fd` through the old directory fail (ESRCH
/// or ENOENT): the scan counts the process as vanished.
#[test]
fn a_reused_pid_is_not_reached_through_the_fd_directory() {
    use rustix::fs::{AtFlags, Mode, OFlags};
    if !kernel_tests::in_guest() {
        skip!("not in a vm guest: taking a given pid needs root over the pid namespace");
    }
    // A pid the allocator can come back to once it wraps.
    for _ in 0..=RESERVED_PIDS {
        if next_tid() > RESERVED_PIDS {
            break;
        }
    }
    let mut first = Command::new("sleep")
        .arg("1000")
        .spawn()
        .expect("spawn sleep");
    let pid = first.id();
    assert_eq!(comm_becomes(pid, "sleep\n").as_deref(), Some("sleep\n"));
    let fd_dir = rustix::fs::open(
        format!("/proc/{pid}/fd"),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .expect("open /proc/<pid>/fd");
    let comm_at = |dir: &std::os::fd::OwnedFd| -> rustix::io::Result<String> {
        let fd = rustix::fs::openat(
            dir,
            "../comm",
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let mut s = String::new();
        std::fs::File::from(fd)
            .read_to_string(&mut s)
            .expect("read ../comm");
        Ok(s)
    };
    assert_eq!(comm_at(&fd_dir).as_deref(), Ok("sleep\n"));
    first.kill().expect("kill sleep");
    first.wait().expect("reap sleep");
    let Some(mut newcomer) = spawn_as_pid(pid) else {
        panic!("pid {pid} was not taken again (spawn_as_pid: ns_last_pid or pid_max)");
    };
    let by_name = comm_becomes(pid, "cat\n");
    let through_old = comm_at(&fd_dir);
    let old_fd_entry = rustix::fs::statat(&fd_dir, "../fd", AtFlags::empty()).map(|_| ());
    let _ = newcomer.kill();
    let _ = newcomer.wait();
    assert_eq!(by_name.as_deref(), Some("cat\n"), "pid {pid} was reused");
    // ENOENT (the lookup finds no task) or ESRCH (seen on 6.1 and 6.12), never the
    // newcomer's.
    let gone = [rustix::io::Errno::NOENT, rustix::io::Errno::SRCH];
    assert!(
        through_old.as_ref().is_err_and(|e| gone.contains(e)),
        "../comm of the exited process: {through_old:?}"
    );
    assert!(
        old_fd_entry.is_err_and(|e| gone.contains(&e)),
        "../fd of the exited process: {old_fd_entry:?}"
    );
}
