//! The phases of one boot: its host files, QEMU's start, the run loop (it streams the
//! payload's output, cuts the power, follows the heartbeat of a guest that may hang and
//! enforces the timeout), and the result with the classification of how the boot ended.

use super::monitor::hang_report;
use super::{
    BootOptions, BootResult, DeviceKind, Ending, GuestSpec, NVDIMM_MIB, PowerCut, RunFiles, Stream,
    Xvfb, initramfs,
};
use crate::error::{Result, VmError};
use crate::stream::{self, Parsed, Record};
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the guest's heartbeat may be silent before the guest counts as hung (the init
/// writes it every 5 s from a plain process; a loaded TCG guest delays it by seconds, not
/// minutes). `VM_HANG_AFTER` (seconds) overrides it, for the hang test of scripts/guest-oops.
pub const HANG_AFTER: Duration = Duration::from_secs(150);

/// How long a hung guest has, after the NMI, to panic and end before QEMU is killed.
pub const NMI_GRACE: Duration = Duration::from_secs(60);

/// [`HANG_AFTER`], or `VM_HANG_AFTER` seconds (at least 10).
pub fn hang_after() -> Duration {
    std::env::var("VM_HANG_AFTER")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(HANG_AFTER, |s| Duration::from_secs(s.max(10)))
}

/// A small xorshift generator for cut delays (no cryptographic use).
pub fn xorshift(state: &mut u64) -> u64 {
    let mut x = (*state).max(1);
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    x
}

/// Counts the lines of `text` that start with `ACK `.
pub fn count_acks(text: &[u8]) -> u64 {
    text.split(|&b| b == b'\n')
        .filter(|l| l.starts_with(b"ACK "))
        .count() as u64
}

/// Finds a kernel panic in console text.
pub fn find_panic(console: &str) -> Option<String> {
    console
        .lines()
        .find(|l| l.contains("Kernel panic - not syncing"))
        .map(|l| l.trim().to_string())
}

/// The last `n` non-empty lines of `text`.
pub fn tail_lines(text: &str, n: usize) -> Vec<String> {
    let v: Vec<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(String::from)
        .collect();
    v[v.len().saturating_sub(n)..].to_vec()
}

/// Classifies a finished boot from its records and console.
pub fn classify(parsed: &Parsed, console: &str, timed_out: bool, qemu_err: Option<&str>) -> Ending {
    let booted = parsed
        .records
        .iter()
        .any(|r| matches!(r, Record::Boot { .. }));
    if let Some(p) = find_panic(console) {
        return Ending::Panic(p);
    }
    if timed_out {
        return if booted {
            Ending::Timeout
        } else {
            Ending::NeverBooted
        };
    }
    if !booted {
        return match qemu_err {
            Some(e) if !e.trim().is_empty() => Ending::QemuFailed(e.trim().to_string()),
            _ => Ending::NeverBooted,
        };
    }
    if !parsed.corrupt.is_empty() {
        return Ending::BrokenStream(format!("{} corrupt record(s)", parsed.corrupt.len()));
    }
    if !parsed.complete() {
        return Ending::BrokenStream("no matching end record: results were lost".into());
    }
    match parsed.records.iter().rev().find_map(|r| match r {
        Record::Exit { code } => Some(*code),
        _ => None,
    }) {
        Some(code) => Ending::Exited(code),
        None => Ending::BrokenStream("no exit record".into()),
    }
}

/// Under this much free space where the results are written, a broken result stream is
/// said to be likely the full disk's doing (the host could not write what the guest sent).
const LOW_DISK: u64 = 1 << 30;

/// `ending`, and when it is a broken stream while the disk holding `dir` is nearly full, the
/// free space said with it: a full disk otherwise shows only as lost results.
fn with_disk_note(ending: Ending, dir: &Path) -> Ending {
    match ending {
        Ending::BrokenStream(why) => match crate::util::free_bytes(dir) {
            Some(free) if free < LOW_DISK => Ending::BrokenStream(disk_note(&why, dir, free)),
            _ => Ending::BrokenStream(why),
        },
        e => e,
    }
}

fn disk_note(why: &str, dir: &Path, free: u64) -> String {
    format!(
        "{why} (the disk holding {} has {:.0} MiB free: a full disk loses results)",
        dir.display(),
        crate::util::mib(free)
    )
}

/// Writes the host files a boot starts from: the initramfs, the empty logs and, for an
/// NVDIMM or a virtio-pmem, a zeroed backing file (unless [`BootOptions::keep_nvdimm`] keeps
/// the one there).
pub(super) fn write_files(
    spec: &GuestSpec,
    files: &RunFiles,
    busybox: &Path,
    opts: &BootOptions,
) -> Result<()> {
    let initrd = initramfs(spec, busybox)?;
    fs::write(&files.initrd, initrd)
        .map_err(|e| VmError::new(format!("{}: {e}", files.initrd.display())))?;
    for f in [&files.console, &files.results, &files.output, &files.alive] {
        fs::write(f, b"").map_err(|e| VmError::new(format!("{}: {e}", f.display())))?;
    }
    let pmem = spec
        .devices
        .iter()
        .any(|d| matches!(d, DeviceKind::Nvdimm | DeviceKind::VirtioPmem));
    if pmem && !(opts.keep_nvdimm && files.nvdimm.exists()) {
        let f = fs::File::create(&files.nvdimm)
            .map_err(|e| VmError::new(format!("{}: {e}", files.nvdimm.display())))?;
        f.set_len(u64::from(NVDIMM_MIB) << 20)
            .map_err(|e| VmError::new(format!("{}: {e}", files.nvdimm.display())))?;
    }
    if spec.devices.contains(&DeviceKind::PcieSwitch) {
        let f = fs::File::create(&files.disk).and_then(|f| f.set_len(super::SWITCH_DISK_MIB << 20));
        f.map_err(|e| VmError::new(format!("{}: {e}", files.disk.display())))?;
    }
    Ok(())
}

/// Starts QEMU with `args` (on the Xvfb's display when there is one), its stderr piped.
pub(super) fn spawn(qemu: &Path, args: &[String], xvfb: Option<&Xvfb>) -> Result<Child> {
    let mut cmd = Command::new(qemu);
    if let Some(x) = xvfb {
        cmd.env("DISPLAY", &x.display);
    }
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            VmError::with_fix(
                format!("cannot start {}: {e}", qemu.display()),
                "scripts/setup",
            )
        })
}

/// What the run loop saw of a boot, for [`finish`].
#[derive(Debug, Default)]
pub(super) struct Seen {
    /// How much of the output file has been streamed.
    out_pos: u64,
    /// Host wall time from QEMU start to the `boot` record.
    boot_at: Option<Duration>,
    /// Host wall time from QEMU start to the payload's start.
    payload_at: Option<Duration>,
    /// The wall-clock limit passed.
    timed_out: bool,
    /// The power was cut, after this many acknowledgements.
    cut_acks: Option<u64>,
    /// The heartbeat stopped: for how long, and what was done ([`BootResult::hang`]).
    hang: Option<String>,
    /// The hang, when even the NMI's grace passed.
    hung_for_good: Option<String>,
}

/// The run loop's state: what it saw, the power cut's clock and the heartbeat's.
#[derive(Debug)]
struct Watch {
    /// What the loop saw so far.
    seen: Seen,
    /// When the power cut comes (set once enough acknowledgements came).
    cut_at: Option<Instant>,
    /// The state of the cut delay's generator.
    seed: u64,
    /// How long the heartbeat may be silent ([`hang_after`]).
    hang_limit: Duration,
    /// The heartbeat's size and when it last grew; armed once the first byte came.
    beat: (u64, Instant),
    /// When the NMI was injected into the hung guest.
    nmi_at: Option<Instant>,
}

impl Watch {
    fn new(opts: &BootOptions) -> Self {
        Self {
            seen: Seen::default(),
            cut_at: None,
            seed: opts.power_cut.map_or(0, |c| c.seed),
            hang_limit: hang_after(),
            beat: (0u64, Instant::now()),
            nmi_at: None,
        }
    }

    /// Sets the time of the cut once `cut.after_acks` acknowledgements came, and cuts the
    /// power when it is due: true when QEMU was killed.
    fn power_cut(&mut self, cut: PowerCut, output: &Path, child: &mut Child) -> bool {
        let acks = count_acks(&fs::read(output).unwrap_or_default());
        if self.cut_at.is_none() && acks >= cut.after_acks {
            let max = cut.max_delay.as_micros().max(1) as u64;
            self.cut_at =
                Some(Instant::now() + Duration::from_micros(xorshift(&mut self.seed) % max));
        }
        if self.cut_at.is_some_and(|t| Instant::now() >= t) {
            // The power cut: SIGKILL, so QEMU writes nothing more anywhere. Stores
            // the guest made to the NVDIMM are already in the shared backing file.
            kill(child);
            self.seen.cut_acks = Some(count_acks(&fs::read(output).unwrap_or_default()));
            return true;
        }
        false
    }

    /// Notes when the `boot` record and the payload's start came (since `start`).
    fn note_records(&mut self, results: &Path, start: Instant) {
        let bytes = fs::read(results).unwrap_or_default();
        let recs = stream::parse(&bytes).records;
        if self.seen.boot_at.is_none() && recs.iter().any(|r| matches!(r, Record::Boot { .. })) {
            self.seen.boot_at = Some(start.elapsed());
        }
        if recs
            .iter()
            .any(|r| matches!(r, Record::Note(n) if n.starts_with("payload start")))
        {
            self.seen.payload_at = Some(start.elapsed());
        }
    }

    /// Follows the heartbeat; once it has been silent past the limit, saves what the monitor
    /// shows to [`RunFiles::hang`] and injects the NMI.
    fn heartbeat(&mut self, files: &RunFiles) {
        let beats = fs::metadata(&files.alive).map_or(0, |m| m.len());
        if beats != self.beat.0 {
            self.beat = (beats, Instant::now());
        }
        if self.beat.0 > 0 && self.nmi_at.is_none() && self.beat.1.elapsed() > self.hang_limit {
            let silent = self.beat.1.elapsed().as_secs();
            let shown = hang_report(&files.monitor);
            let _ = fs::write(&files.hang, &shown.text);
            self.seen.hang = Some(format!(
                "no heartbeat for {silent} s; {}",
                if shown.nmi {
                    "NMI injected"
                } else {
                    "the monitor did not take the NMI"
                }
            ));
            self.nmi_at = Some(Instant::now());
        }
    }
}

/// The run loop: polls QEMU (started at `start`) until it exits, or kills it when the power
/// cut is due, a hung guest's NMI grace has passed or the timeout has; meanwhile streams the
/// payload's output and notes when the guest booted and started the payload.
pub(super) fn watch(
    spec: &GuestSpec,
    files: &RunFiles,
    opts: &BootOptions,
    child: &mut Child,
    start: Instant,
) -> Seen {
    let mut w = Watch::new(opts);
    loop {
        let exited = child.try_wait().ok().flatten().is_some();
        if let (Some(cut), false) = (opts.power_cut, exited)
            && w.power_cut(cut, &files.output, child)
        {
            break;
        }
        if spec.stream_output != Stream::Off {
            w.seen.out_pos = copy_new(&files.output, w.seen.out_pos, &spec.stream_output, false);
        }
        if w.seen.boot_at.is_none() || w.seen.payload_at.is_none() {
            w.note_records(&files.results, start);
        }
        if exited {
            break;
        }
        w.heartbeat(files);
        if w.nmi_at.is_some_and(|t| t.elapsed() > NMI_GRACE) {
            w.seen.hung_for_good = w.seen.hang.clone();
            kill(child);
            break;
        }
        if start.elapsed() > spec.timeout {
            w.seen.timed_out = true;
            kill(child);
            break;
        }
        // A panic with panic=-1 reboots and -no-reboot ends QEMU; keep polling until then.
        let pause = if w.cut_at.is_some() { 1 } else { 25 };
        std::thread::sleep(Duration::from_millis(pause));
    }
    w.seen
}

/// After the run loop: the rest of the output, QEMU's stderr and exit, and the result.
pub(super) fn finish(
    spec: &GuestSpec,
    files: RunFiles,
    mut child: Child,
    start: Instant,
    seen: Seen,
) -> BootResult {
    let end = start.elapsed();
    if spec.stream_output != Stream::Off {
        copy_new(&files.output, seen.out_pos, &spec.stream_output, true);
    }
    let mut qemu_err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut qemu_err);
    }
    let _ = child.wait();
    let console =
        String::from_utf8_lossy(&fs::read(&files.console).unwrap_or_default()).into_owned();
    let parsed = stream::parse(&fs::read(&files.results).unwrap_or_default());
    let ending = match (seen.cut_acks, seen.hung_for_good) {
        (Some(acks), _) => Ending::PowerCut { acks },
        (None, Some(h)) if find_panic(&console).is_none() => Ending::Hang(format!(
            "{h}, and no panic came within {} s",
            NMI_GRACE.as_secs()
        )),
        _ => classify(&parsed, &console, seen.timed_out, Some(&qemu_err)),
    };
    let ending = with_disk_note(ending, files.results.parent().unwrap_or(Path::new("/")));
    BootResult {
        ending,
        parsed,
        boot_time: seen.boot_at,
        payload_time: seen.payload_at,
        run_time: end - seen.boot_at.unwrap_or_default(),
        console_tail: tail_lines(&console, 30),
        hang: seen.hang,
        files,
    }
}

/// Kills QEMU and reaps it.
fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Copies bytes appended to `path` since `pos` to stdout; returns the new position.
fn copy_new(path: &Path, pos: u64, how: &Stream, last: bool) -> u64 {
    let Ok(mut f) = fs::File::open(path) else {
        return pos;
    };
    if f.seek(SeekFrom::Start(pos)).is_err() {
        return pos;
    }
    let mut buf = Vec::new();
    let n = f.read_to_end(&mut buf).unwrap_or(0);
    let (out, used) = match how {
        Stream::Prefixed(prefix) => prefix_lines(&buf, prefix, last),
        _ => (buf, n),
    };
    if !out.is_empty() {
        let mut o = std::io::stdout().lock();
        let _ = o.write_all(&out);
        let _ = o.flush();
    }
    pos + used as u64
}

/// The whole lines of `buf`, each after `prefix` (and the unfinished last one too when
/// `last`), with how many bytes of `buf` they took.
fn prefix_lines(buf: &[u8], prefix: &str, last: bool) -> (Vec<u8>, usize) {
    let used = if last {
        buf.len()
    } else {
        buf.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1)
    };
    let mut out = Vec::with_capacity(used + used / 16);
    for line in buf[..used].split_inclusive(|&b| b == b'\n') {
        out.extend_from_slice(prefix.as_bytes());
        out.extend_from_slice(line);
        if !line.ends_with(b"\n") {
            out.push(b'\n');
        }
    }
    (out, used)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::encode;

    #[test]
    fn prefixed_lines_wait_for_their_newline() {
        let (out, used) = prefix_lines(b"PASS a\nPASS b\npart", "[k] ", false);
        assert_eq!(out, b"[k] PASS a\n[k] PASS b\n");
        assert_eq!(used, 14, "the unfinished line stays for the next read");
        let (out, used) = prefix_lines(b"part", "[k] ", false);
        assert!(out.is_empty());
        assert_eq!(used, 0);
        let (out, used) = prefix_lines(b"part", "[k] ", true);
        assert_eq!(out, b"[k] part\n");
        assert_eq!(used, 4);
    }

    fn stream_of(records: &[&str]) -> Parsed {
        let mut s = String::new();
        for r in records {
            s.push_str(&encode(r));
        }
        stream::parse(s.as_bytes())
    }

    #[test]
    fn classify_endings() {
        let ok = stream_of(&["boot 1.2 6.12.117", "exit 3", "end 2"]);
        assert_eq!(classify(&ok, "", false, None), Ending::Exited(3));
        let nothing = stream_of(&[]);
        assert_eq!(classify(&nothing, "", false, Some("")), Ending::NeverBooted);
        assert_eq!(
            classify(&nothing, "", false, Some("qemu: could not open kernel")),
            Ending::QemuFailed("qemu: could not open kernel".into())
        );
        assert_eq!(classify(&nothing, "", true, None), Ending::NeverBooted);
        let booted = stream_of(&["boot 1.2 6.12.117"]);
        assert_eq!(classify(&booted, "", true, None), Ending::Timeout);
        let console =
            "[    2.0] Kernel panic - not syncing: VFS: Unable to mount root fs\n[ 2.1] end";
        assert_eq!(
            classify(&booted, console, false, None),
            Ending::Panic(
                "[    2.0] Kernel panic - not syncing: VFS: Unable to mount root fs".into()
            )
        );
        // Lost records: end says 3 but only 2 came before it.
        let lost = stream_of(&["boot 1.2 x", "exit 0", "end 3"]);
        assert!(matches!(
            classify(&lost, "", false, None),
            Ending::BrokenStream(_)
        ));
        let no_exit = stream_of(&["boot 1.2 x", "end 1"]);
        assert!(matches!(
            classify(&no_exit, "", false, None),
            Ending::BrokenStream(_)
        ));
    }

    /// A broken stream says the free space only where the disk is nearly full.
    #[test]
    fn a_broken_stream_names_a_nearly_full_disk() {
        let dir = Path::new("/tmp/vm-test-x");
        assert_eq!(
            disk_note("no exit record", dir, 12 << 20),
            "no exit record (the disk holding /tmp/vm-test-x has 12 MiB free: a full disk loses results)"
        );
        // The real /tmp has far more than LOW_DISK free here: nothing is added.
        let e = with_disk_note(
            Ending::BrokenStream("no exit record".into()),
            Path::new("/"),
        );
        let plenty = crate::util::free_bytes(Path::new("/")).is_some_and(|f| f >= LOW_DISK);
        if plenty {
            assert_eq!(e, Ending::BrokenStream("no exit record".into()));
        }
        assert_eq!(with_disk_note(Ending::Exited(0), dir), Ending::Exited(0));
    }

    #[test]
    fn acks_and_random_delays() {
        assert_eq!(count_acks(b"READY\nACK 0\nACK 1\nxACK 2\nACK"), 2);
        let mut s = 7;
        let a = xorshift(&mut s);
        let b = xorshift(&mut s);
        assert_ne!(a, b);
        let mut z = 0;
        assert_ne!(xorshift(&mut z), 0, "a zero seed still moves");
    }
}
