//! `drmtool top` in a real terminal: tmux in the guest runs the real command beside sample
//! clients on the real drivers; `send-keys` sorts, filters, groups by cgroup and kills a
//! client; `capture-pane` must show the clients' pids and sizes, a dma-buf shared between
//! two processes on both of their rows, and (on the kernel whose vkms has the engine
//! counter) the lit vkms client's engine busy above 0. A recorded session replays as the
//! same screens; SIGTERM leaves the terminal as it was.

use kernel_tests::sample::Client;
use std::process::Command;
use std::time::{Duration, Instant};

mod isolation_common;
use isolation_common::DRMTOOL;

mod crc_common;
use crc_common::CrcCapture;

const HELPER: &str = "sample_client_entry";

#[test]
fn sample_client_entry() {
    kernel_tests::sample::entry();
}

/// In a guest with tmux (else a loud skip).
macro_rules! tmux_guest {
    () => {
        if !kernel_tests::in_guest() {
            kernel_tests::skip!("not in a vm guest: no DRM devices here");
        }
        if kernel_tests::which("tmux").is_none() {
            kernel_tests::skip!("tmux is not installed (scripts/setup installs it)");
        }
    };
}

/// A tmux server of the test's own (its socket name) with one session running `cmd` in
/// a `w`x`h` window; killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(name: &str, cmd: &str, w: u16, h: u16) -> Tmux {
        let t = Tmux {
            socket: format!("drmtool-top-{name}-{}", std::process::id()),
        };
        t.run(&[
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            &w.to_string(),
            "-y",
            &h.to_string(),
            cmd,
        ]);
        // The pane stays after the command ends, so its screen can still be read.
        t.run(&["set-option", "-t", "top", "remain-on-exit", "on"]);
        t
    }

    fn run(&self, args: &[&str]) -> String {
        let o = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .env("TERM", "xterm-256color")
            .env_remove("KERNEL_TESTS_SIGNAL_STORM")
            .output()
            .expect("tmux");
        assert!(
            o.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        for k in keys {
            self.run(&["send-keys", "-t", "top", k]);
            std::thread::sleep(Duration::from_millis(150));
        }
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "top"])
    }

    /// Waits (at most 60 s) until the screen satisfies `ok`; the last screen.
    #[track_caller]
    fn until(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let t0 = Instant::now();
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "the screen never showed {what}:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    fn display(&self, format: &str) -> String {
        self.run(&["display-message", "-p", "-t", "top", format])
            .trim()
            .to_string()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}

/// The screen's client row of `pid` (its PID column is the pid, or `pid(own)`).
fn row_of(screen: &str, pid: u32) -> Option<String> {
    screen
        .lines()
        .find(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|p| p == pid.to_string() || p.starts_with(&format!("{pid}(")))
        })
        .map(str::to_string)
}

#[test]
fn top_shows_sorts_filters_groups_and_kills_in_a_real_terminal() {
    tmux_guest!();
    // A maps a 256x256 dumb buffer of vgem and exports it; B imports that dma-buf: one
    // dma-buf held by two processes. C holds a vgem buffer too, to be killed.
    let a = Client::spawn(
        HELPER,
        &["--device", "vgem", "--dumb", "256x256", "--map", "--export"],
    );
    let fd = a.ready.dmabuf_fd.expect("A exported a dma-buf");
    let b = Client::spawn(
        HELPER,
        &["--device", "vgem", "--import", &format!("{}:{fd}", a.pid())],
    );
    let c = Client::spawn(HELPER, &["--device", "vgem", "--dumb", "64x64", "--map"]);
    let (pa, pb, pc) = (a.pid(), b.pid(), c.pid());
    let t = Tmux::start("live", &format!("{DRMTOOL} top -d 0.5"), 200, 50);
    let s = t.until("the three clients", |s| {
        [pa, pb, pc].iter().all(|p| row_of(s, *p).is_some())
    });
    eprintln!("{s}");
    let ra = row_of(&s, pa).unwrap();
    // 256x256 at 32 bpp, mapped: 256 KiB as maps counts it (vgem prints no memory keys).
    assert!(ra.contains("256.0 KiB"), "A's size: {ra}");
    assert!(row_of(&s, pc).unwrap().contains("16.0 KiB"), "{s}");
    // The shared dma-buf on both rows (held / held by another process too).
    assert!(ra.contains("1/1"), "A's dma-buf: {ra}");
    assert!(row_of(&s, pb).unwrap().contains("1/1"), "{s}");
    // Sorted by memory: A above C.
    assert!(
        s.find(&ra).unwrap() < s.find(&row_of(&s, pc).unwrap()).unwrap(),
        "{s}"
    );
    // Sort by the next column (busy), then filter to C by its pid, then group by cgroup.
    t.keys(&["s"]);
    t.until("the busy sort", |s| s.contains("sort busy"));
    t.keys(&["/"]);
    for ch in pc.to_string().chars() {
        t.keys(&[&ch.to_string()]);
    }
    t.keys(&["Enter"]);
    let s = t.until("only C", |s| {
        row_of(s, pc).is_some() && row_of(s, pa).is_none() && row_of(s, pb).is_none()
    });
    assert!(s.contains(&format!("only \"{pc}\"")), "{s}");
    t.keys(&["g", "g"]);
    let s = t.until("the cgroup grouping", |s| s.contains("clients by cgroup"));
    assert!(s.contains("CGROUP"), "{s}");
    // Back to processes; kill C (the only row): asked first, then sent.
    for _ in 0..6 {
        t.keys(&["g"]);
    }
    t.until("the process grouping", |s| s.contains("clients by process"));
    t.keys(&["k"]);
    t.until("the question", |s| s.contains("Send SIGTERM to"));
    t.keys(&["y"]);
    let s = t.until("C gone", |s| row_of(s, pc).is_none());
    assert!(s.contains(&format!("{pc}: sent")), "{s}");
    // C ended by the signal (a zombie until this test, its parent, reaps it).
    let t0 = Instant::now();
    let state = || {
        std::fs::read_to_string(format!("/proc/{pc}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(") ").map(|(_, r)| r.chars().next()))
            .flatten()
    };
    while !matches!(state(), None | Some('Z')) {
        assert!(t0.elapsed() < Duration::from_secs(10), "C is still running");
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(c);
    // SIGTERM to top: it ends and gives the terminal back (no alternate screen).
    assert_eq!(t.display("#{alternate_on}"), "1");
    let pid = t.display("#{pane_pid}");
    let k = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(k.success());
    let t0 = Instant::now();
    while t.display("#{pane_dead}") != "1" {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "top outlived SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        t.display("#{alternate_on}"),
        "0",
        "the terminal was given back"
    );
    drop((a, b));
}

/// On the kernel whose vkms has the engine counter: a client that lights vkms's output
/// shows engine busy above 0 while vkms composes its frames (a CRC capture on).
#[test]
fn a_lit_vkms_client_is_busy() {
    tmux_guest!();
    kernel_tests::require_feature!("vkms_fdinfo");
    let l = Client::spawn(HELPER, &["--device", "vkms", "--light"]);
    let crc = CrcCapture::start();
    let t = Tmux::start(
        "busy",
        &format!("{DRMTOOL} top -d 0.5 --sort busy"),
        200,
        50,
    );
    let s = t.until("L busy", |s| {
        row_of(s, l.pid()).is_some_and(|r| {
            r.split_whitespace()
                .filter_map(|w| w.strip_suffix('%'))
                .any(|p| p.parse::<f64>().is_ok_and(|v| v > 0.0))
        })
    });
    eprintln!("{s}");
    assert!(crc.stop() > 0, "vkms composed frames");
    drop(l);
}

/// A recorded session replays as the same screens, and `--once --json` is one document.
#[test]
fn a_recorded_session_replays_as_the_live_screens() {
    tmux_guest!();
    let a = Client::spawn(HELPER, &["--device", "vgem", "--dumb", "128x128", "--map"]);
    let dir = std::env::temp_dir().join(format!("top-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rec = dir.join("session.jsonl");
    let out = |args: &[&str]| -> String {
        let o = Command::new(DRMTOOL)
            .args(args)
            .env_remove("KERNEL_TESTS_SIGNAL_STORM")
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    };
    let r = rec.to_string_lossy();
    let live = out(&[
        "top", "--print", "--count", "3", "-d", "0.5", "--size", "120x30", "--record", &r,
    ]);
    assert!(row_of(&live, a.pid()).is_some(), "{live}");
    assert_eq!(std::fs::read_to_string(&rec).unwrap().lines().count(), 3);
    let replay = out(&["top", "--replay", &r, "--print", "--size", "120x30"]);
    // The same frames, drawn the same; only the header's mode differs (every 0.50 s, or
    // replay i/3).
    let strip = |t: &str| -> Vec<String> {
        t.lines()
            .map(
                |l| match l.find("  every ").or_else(|| l.find("  replay ")) {
                    Some(i) if l.starts_with("drmtool top") => {
                        let rest = &l[i + 2..];
                        let after = rest.find("  ").map_or("", |j| &rest[j..]);
                        format!("{}{after}", &l[..i])
                    }
                    _ => l.to_string(),
                },
            )
            .collect()
    };
    assert_eq!(strip(&live), strip(&replay));
    let doc: serde_json::Value = serde_json::from_str(&out(&["top", "--once", "--json"])).unwrap();
    assert_eq!(doc["schema_version"], 1);
    assert!(
        doc["interval_ms"].as_u64().is_some(),
        "--once has rates: {doc}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    drop(a);
}
