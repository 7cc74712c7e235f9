//! One guest boot: the initramfs (busybox, our init, modules, the payload), the QEMU command
//! line for the device set, and the run loop that streams output, enforces the timeout and
//! classifies how the boot ended.

use crate::cache::BuiltKernel;
use crate::cpio::CpioWriter;
use crate::error::{Result, VmError};
use crate::stream::{self, Parsed, Record};
use crate::util::which;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The guest init script, embedded.
pub const INIT: &str = include_str!("../guest/init.sh");

/// A guest device the harness can attach or load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeviceKind {
    /// vkms (module): virtual KMS with writeback and CRC.
    Vkms,
    /// vgem (module): render-only GEM with fences.
    Vgem,
    /// `-device virtio-gpu-pci` (virtio_gpu module).
    VirtioGpu,
    /// A second `-device virtio-gpu-pci` (always without virgl): two render nodes of one
    /// driver with distinct PCI bus ids, for the ordering and isolation tests.
    VirtioGpu2,
    /// `-vga std` (bochs / bochs-drm module, TTM VRAM helper).
    Bochs,
    /// `-device qxl` (qxl module, TTM).
    Qxl,
    /// test_hmm (module): `/dev/hmm_dmirror0`, `1`.
    TestHmm,
    /// An emulated NVDIMM backed by a host file: `/dev/pmem0`.
    Nvdimm,
    /// A virtio-pmem device backed by a host file (`/dev/pmem0`, flushed by an fsync of
    /// that file). Not in [`DeviceKind::ALL`]: `vm powercut --cache volatile` attaches it.
    VirtioPmem,
}

impl DeviceKind {
    /// Every device, in the order `--device` lists them.
    pub const ALL: [DeviceKind; 8] = [
        Self::Vkms,
        Self::Vgem,
        Self::VirtioGpu,
        Self::VirtioGpu2,
        Self::Bochs,
        Self::Qxl,
        Self::TestHmm,
        Self::Nvdimm,
    ];

    /// The `--device` name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Vkms => "vkms",
            Self::Vgem => "vgem",
            Self::VirtioGpu => "virtio-gpu",
            Self::VirtioGpu2 => "virtio-gpu-2",
            Self::Bochs => "bochs",
            Self::Qxl => "qxl",
            Self::TestHmm => "test_hmm",
            Self::Nvdimm => "nvdimm",
            Self::VirtioPmem => "virtio-pmem",
        }
    }

    /// Parses a `--device` name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .chain([Self::VirtioPmem])
            .find(|d| d.name() == s)
    }

    /// Modules the init loads explicitly (devices without a bus to trigger them).
    fn module(self) -> Option<&'static str> {
        match self {
            Self::Vkms => Some("vkms"),
            Self::Vgem => Some("vgem"),
            Self::TestHmm => Some("test_hmm"),
            _ => None,
        }
    }
}

/// How QEMU executes the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    /// Hardware virtualisation through /dev/kvm.
    Kvm,
    /// QEMU's software emulator.
    Tcg,
}

impl Accel {
    /// `kvm` or `tcg`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Kvm => "kvm",
            Self::Tcg => "tcg",
        }
    }
}

/// What to run in the guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payload {
    /// Program and arguments; empty boots, reports and powers off.
    pub argv: Vec<String>,
    /// Working directory inside the guest (the host path, since the host root is shared).
    pub cwd: PathBuf,
    /// Extra environment for the payload.
    pub env: Vec<(String, String)>,
    /// Share the host root read-only over 9p and chroot into it.
    pub host_root: bool,
}

/// Everything one boot needs.
#[derive(Debug, Clone)]
pub struct GuestSpec {
    /// The kernel to boot.
    pub kernel: BuiltKernel,
    /// Devices to attach or load.
    pub devices: Vec<DeviceKind>,
    /// What to run.
    pub payload: Payload,
    /// Accelerator.
    pub accel: Accel,
    /// Wall-clock limit for the whole boot.
    pub timeout: Duration,
    /// Guest memory in MiB.
    pub memory_mib: u32,
    /// Only boot and report (the accelerator probe).
    pub probe_only: bool,
    /// Print the payload's output while it runs.
    pub stream_output: Stream,
}

/// Whether and how a boot prints its payload's output while it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stream {
    /// Not at all (the output is still kept in the run's files).
    Off,
    /// As it comes.
    Plain,
    /// Whole lines, each after this prefix (lanes that run side by side: `[debian-6.12] `).
    Prefixed(String),
}

/// Quotes a string for a POSIX shell.
pub fn sh_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The payload script the init runs in the chroot.
pub fn payload_script(p: &Payload) -> String {
    let mut s = String::from("#!/bin/sh\n");
    for (k, v) in &p.env {
        s.push_str(&format!("export {}={}\n", k, sh_quote(v)));
    }
    s.push_str(&format!(
        "cd {} || exit 126\n",
        sh_quote(&p.cwd.to_string_lossy())
    ));
    let argv: Vec<String> = p.argv.iter().map(|a| sh_quote(a)).collect();
    s.push_str(&format!("exec {}\n", argv.join(" ")));
    s
}

/// `/etc/vm.env` for the init.
pub fn init_env(spec: &GuestSpec) -> String {
    // The kernel's own explicit modules (9p, NVDIMM on a stock kernel) come first.
    let mods: Vec<&str> = spec
        .kernel
        .extra_modules
        .iter()
        .map(String::as_str)
        .chain(
            spec.devices
                .iter()
                .filter_map(|d| d.module())
                .filter(|m| !spec.kernel.missing_features.iter().any(|f| f == m)),
        )
        .collect();
    let mut s = String::new();
    s.push_str(&format!(
        "VM_MODE={}\n",
        if spec.probe_only { "probe" } else { "run" }
    ));
    if !spec.kernel.early_modules.is_empty() {
        s.push_str(&format!(
            "VM_EARLY_MODULES={}\n",
            sh_quote(&spec.kernel.early_modules.join(" "))
        ));
    }
    s.push_str(&format!("VM_MODULES={}\n", sh_quote(&mods.join(" "))));
    let pci = spec.devices.iter().any(|d| {
        matches!(
            d,
            DeviceKind::VirtioGpu
                | DeviceKind::Bochs
                | DeviceKind::Qxl
                | DeviceKind::Nvdimm
                | DeviceKind::VirtioPmem
        )
    });
    s.push_str(&format!("VM_MODALIAS={}\n", u8::from(pci)));
    if spec
        .devices
        .iter()
        .any(|d| matches!(d, DeviceKind::Nvdimm | DeviceKind::VirtioPmem))
    {
        s.push_str("VM_WAIT_PMEM=1\n");
    }
    s.push_str(&format!(
        "VM_CMD={}\n",
        u8::from(!spec.payload.argv.is_empty())
    ));
    s.push_str(&format!(
        "VM_HOSTROOT={}\n",
        u8::from(spec.payload.host_root)
    ));
    s.push_str(&format!(
        "VM_TMP_KEEP={}\n",
        sh_quote(&tmp_keep(&spec.payload).join(" "))
    ));
    s
}

/// The top-level directories under `/tmp` that the payload refers to (its working directory
/// and any absolute path among its arguments). The guest mounts a tmpfs over `/tmp` and
/// binds these back from the host so a checkout under `/tmp` still works.
pub fn tmp_keep(p: &Payload) -> Vec<String> {
    let mut keep: Vec<String> = std::iter::once(p.cwd.to_string_lossy().into_owned())
        .chain(p.argv.iter().cloned())
        .filter_map(|a| {
            let rest = a.strip_prefix("/tmp/")?;
            let first = rest.split('/').next()?;
            (!first.is_empty() && first != "." && first != "..").then(|| first.to_string())
        })
        .collect();
    keep.sort();
    keep.dedup();
    keep
}

/// Builds the initramfs: busybox, the init, the kernel's modules, the payload.
pub fn initramfs(spec: &GuestSpec, busybox: &Path) -> Result<Vec<u8>> {
    let mut w = CpioWriter::new();
    for d in [
        "bin", "sbin", "etc", "proc", "sys", "dev", "tmp", "run", "host", "lib", "usr",
    ] {
        w.dir(d, 0o755);
    }
    w.char_dev("dev/console", 0o600, 5, 1);
    let bb = fs::read(busybox).map_err(|e| {
        VmError::with_fix(
            format!("cannot read {}: {e}", busybox.display()),
            "scripts/setup (installs busybox-static)",
        )
    })?;
    w.file("bin/busybox", 0o755, &bb);
    w.file("init", 0o755, INIT.as_bytes());
    w.file("etc/vm.env", 0o644, init_env(spec).as_bytes());
    w.file(
        "etc/vm-payload.sh",
        0o755,
        payload_script(&spec.payload).as_bytes(),
    );
    // A probe boot needs no modules, unless the result ports themselves are modules.
    if let Some(mods) = &spec.kernel.modules
        && (!spec.probe_only || !spec.kernel.early_modules.is_empty())
    {
        let dest = format!("lib/modules/{}", spec.kernel.release);
        w.dir_all(&dest);
        add_tree(&mut w, mods, &dest)?;
    }
    Ok(w.finish())
}

fn add_tree(w: &mut CpioWriter, src: &Path, dest: &str) -> Result<()> {
    let mut entries: Vec<_> = fs::read_dir(src)
        .map_err(|e| VmError::new(format!("{}: {e}", src.display())))?
        .flatten()
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let path = e.path();
        let to = format!("{dest}/{name}");
        let ft = e.file_type().map_err(|e| VmError::new(e.to_string()))?;
        if ft.is_dir() {
            w.dir(&to, 0o755);
            add_tree(w, &path, &to)?;
        } else if ft.is_file() {
            let data =
                fs::read(&path).map_err(|e| VmError::new(format!("{}: {e}", path.display())))?;
            w.file(&to, 0o644, &data);
        }
    }
    Ok(())
}

/// Host files of one boot.
#[derive(Debug, Clone)]
pub struct RunFiles {
    /// Directory holding everything below.
    pub dir: PathBuf,
    /// The initramfs.
    pub initrd: PathBuf,
    /// Serial console log (kernel messages).
    pub console: PathBuf,
    /// Framed result records.
    pub results: PathBuf,
    /// The payload's stdout and stderr.
    pub output: PathBuf,
    /// NVDIMM (or virtio-pmem) backing file.
    pub nvdimm: PathBuf,
    /// The guest's heartbeat (the `vm.alive` port: a byte every 5 s).
    pub alive: PathBuf,
    /// QEMU's human monitor (a Unix socket): registers and the NMI of a hung guest.
    pub monitor: PathBuf,
    /// What the monitor showed of a hung guest (`info registers -a`, before the NMI).
    pub hang: PathBuf,
}

impl RunFiles {
    /// Fresh files under a new directory in `base`.
    pub fn new(base: &Path, tag: &str) -> Result<Self> {
        let dir = base.join(format!(
            "{tag}-{}-{}",
            std::process::id(),
            Instant::now().elapsed().as_nanos() ^ u128::from(rand_u32())
        ));
        fs::create_dir_all(&dir).map_err(|e| VmError::new(format!("{}: {e}", dir.display())))?;
        Ok(Self {
            initrd: dir.join("initramfs.cpio"),
            console: dir.join("console.log"),
            results: dir.join("results.bin"),
            output: dir.join("output.log"),
            nvdimm: dir.join("nvdimm.img"),
            alive: dir.join("alive.log"),
            monitor: dir.join("monitor.sock"),
            hang: dir.join("hang.txt"),
            dir,
        })
    }
}

fn rand_u32() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    t ^ std::process::id().rotate_left(16)
}

/// The guest kernel's command line. `unknown_nmi_panic`: the NMI the host injects into a
/// guest whose heartbeat stopped ([`HANG_AFTER`]) panics the kernel, which prints the stack
/// the interrupted CPU was stuck in (no other NMI source exists under TCG: no PMU, no NMI
/// watchdog). `no_timer_check`: under TCG on a loaded host the IO-APIC timer check can miss
/// its ticks and panic the boot ("IO-APIC + timer doesn't work!", seen on 5.10).
pub const KERNEL_CMDLINE: &str = "console=ttyS0 panic=-1 oops=panic loglevel=4 rdinit=/init \
     tsc=reliable no_timer_check unknown_nmi_panic";

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

/// NVDIMM size: enough for a namespace with fsdax metadata and a small ext4.
pub const NVDIMM_MIB: u32 = 256;

/// The QEMU command line for a boot.
pub fn qemu_args(spec: &GuestSpec, files: &RunFiles) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    let mut push = |s: &[&str]| a.extend(s.iter().map(|x| x.to_string()));
    let nvdimm = spec.devices.contains(&DeviceKind::Nvdimm);
    push(&["-machine", if nvdimm { "pc,nvdimm=on" } else { "pc" }]);
    // Multi-threaded TCG races with the kernel's live text patching (text_poke_bp's int3):
    // a Debian 6.12 guest died with "Oops: int3" in sched_clock_cpu at boot. One TCG thread
    // runs the two vCPUs round-robin and cannot race.
    push(&[
        "-accel",
        match spec.accel {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg,thread=single",
        },
    ]);
    push(&[
        "-cpu",
        if spec.accel == Accel::Kvm {
            "host"
        } else {
            "max,la57=off"
        },
    ]);
    push(&["-smp", "2"]);
    let pmem = nvdimm || spec.devices.contains(&DeviceKind::VirtioPmem);
    let mem = if pmem {
        format!(
            "{}M,slots=2,maxmem={}M",
            spec.memory_mib,
            spec.memory_mib + 2048
        )
    } else {
        format!("{}M", spec.memory_mib)
    };
    push(&["-m", &mem]);
    push(&["-nodefaults", "-no-user-config", "-display"]);
    // virgl needs a GL context on the host: an SDL window on the Xvfb that `boot` starts.
    push(&[if virgl() { "sdl,gl=on" } else { "none" }]);
    push(&["-no-reboot"]);
    push(&["-kernel", &spec.kernel.image.to_string_lossy()]);
    push(&["-initrd", &files.initrd.to_string_lossy()]);
    push(&["-append", KERNEL_CMDLINE]);
    push(&[
        "-chardev",
        &format!("file,id=con,path={}", files.console.display()),
    ]);
    push(&["-serial", "chardev:con"]);
    push(&["-device", "virtio-serial-pci,id=vser"]);
    push(&[
        "-chardev",
        &format!("file,id=res,path={}", files.results.display()),
    ]);
    push(&[
        "-device",
        "virtserialport,bus=vser.0,chardev=res,name=vm.results",
    ]);
    push(&[
        "-chardev",
        &format!("file,id=out,path={}", files.output.display()),
    ]);
    push(&[
        "-device",
        "virtserialport,bus=vser.0,chardev=out,name=vm.output",
    ]);
    push(&[
        "-chardev",
        &format!("file,id=alive,path={}", files.alive.display()),
    ]);
    push(&[
        "-device",
        "virtserialport,bus=vser.0,chardev=alive,name=vm.alive",
    ]);
    push(&[
        "-monitor",
        &format!("unix:{},server=on,wait=off", files.monitor.display()),
    ]);
    if spec.payload.host_root && !spec.probe_only {
        // multidevs=remap: the host root spans several filesystems whose inode numbers
        // collide (the root directories of /proc and /sys are both inode 1); without it the
        // guest's 9p client merges such directories and /proc in the chroot shows sysfs.
        push(&[
            "-fsdev",
            "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap",
        ]);
        push(&["-device", "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot"]);
    }
    for d in &spec.devices {
        match d {
            DeviceKind::VirtioGpu => push(&[
                "-device",
                if virgl() {
                    "virtio-gpu-gl-pci"
                } else {
                    "virtio-gpu-pci"
                },
            ]),
            DeviceKind::VirtioGpu2 => push(&["-device", "virtio-gpu-pci"]),
            DeviceKind::Bochs => push(&["-vga", "std"]),
            DeviceKind::Qxl => push(&["-device", "qxl"]),
            DeviceKind::Nvdimm => {
                push(&[
                    "-object",
                    &format!(
                        "memory-backend-file,id=nvmem0,share=on,mem-path={},size={}M",
                        files.nvdimm.display(),
                        NVDIMM_MIB
                    ),
                ]);
                push(&["-device", "nvdimm,id=nvdimm0,memdev=nvmem0"]);
            }
            DeviceKind::VirtioPmem => {
                push(&[
                    "-object",
                    &format!(
                        "memory-backend-file,id=vpmem0,share=on,mem-path={},size={}M",
                        files.nvdimm.display(),
                        NVDIMM_MIB
                    ),
                ]);
                push(&["-device", "virtio-pmem-pci,id=virtio-pmem0,memdev=vpmem0"]);
            }
            _ => {}
        }
    }
    a
}

/// A power cut: QEMU is killed (SIGKILL, no shutdown of any kind) at a random moment after
/// the payload has printed `after_acks` lines starting with `ACK ` on its output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PowerCut {
    /// Acknowledgements to wait for before the cut may happen.
    pub after_acks: u64,
    /// The cut comes a uniformly random time in `0..max_delay` after that.
    pub max_delay: Duration,
    /// Seed of the random delay (printed by callers, so a run can be repeated).
    pub seed: u64,
}

/// Options of [`boot_with`] beyond the [`GuestSpec`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BootOptions {
    /// Keep the NVDIMM backing file (`RunFiles::nvdimm`) as it is when it exists, instead
    /// of starting from a zeroed one: what one boot wrote, the next one reads.
    pub keep_nvdimm: bool,
    /// Cut the power as described.
    pub power_cut: Option<PowerCut>,
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

/// How a boot ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// The harness cut the power as asked ([`BootOptions::power_cut`]), after this many
    /// acknowledgements had been printed.
    PowerCut {
        /// `ACK ` lines seen when QEMU was killed.
        acks: u64,
    },
    /// The payload ran and exited with this status.
    Exited(i32),
    /// The guest never reported that it reached the payload.
    NeverBooted,
    /// The kernel panicked (the panic line).
    Panic(String),
    /// The wall-clock limit passed; QEMU was killed.
    Timeout,
    /// The guest's heartbeat stopped and the injected NMI brought no panic either; QEMU was
    /// killed (what the monitor showed is in [`RunFiles::hang`]).
    Hang(String),
    /// The result stream was incomplete or corrupt.
    BrokenStream(String),
    /// QEMU itself failed (its stderr).
    QemuFailed(String),
}

/// One sentence saying how the boot ended; for [`Ending::QemuFailed`] the sentence holds
/// QEMU's first line of stderr and its other lines follow, each indented by four spaces.
impl std::fmt::Display for Ending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ending::Exited(c) => write!(f, "exited {c}"),
            Ending::PowerCut { acks } => write!(f, "power cut after {acks} acknowledgements"),
            Ending::NeverBooted => f.write_str("never reached the payload"),
            Ending::Panic(p) => write!(f, "kernel panic: {p}"),
            Ending::Timeout => f.write_str("timeout"),
            Ending::Hang(h) => write!(f, "guest hung: {h}"),
            Ending::BrokenStream(s) => write!(f, "broken result stream: {s}"),
            Ending::QemuFailed(s) => {
                let mut lines = s.lines().map(str::trim).filter(|l| !l.is_empty());
                write!(f, "qemu failed: {}", lines.next().unwrap_or("(no message)"))?;
                lines.try_for_each(|l| write!(f, "\n    {l}"))
            }
        }
    }
}

/// The outcome of a boot.
#[derive(Debug, Clone)]
pub struct BootResult {
    /// How it ended.
    pub ending: Ending,
    /// Records received.
    pub parsed: Parsed,
    /// Host wall time from QEMU start to the `boot` record.
    pub boot_time: Option<Duration>,
    /// Host wall time from QEMU start to the payload's start (modules loaded, host root
    /// mounted).
    pub payload_time: Option<Duration>,
    /// Host wall time from the `boot` record to the end.
    pub run_time: Duration,
    /// The last console lines (for failures).
    pub console_tail: Vec<String>,
    /// Set when the guest's heartbeat stopped: how long it had been silent, and what the
    /// harness did (the NMI). The boot then ended in a panic ([`Ending::Panic`], with the
    /// stuck stack on the console) or, if even the NMI changed nothing, [`Ending::Hang`].
    pub hang: Option<String>,
    /// The run's files (kept for inspection).
    pub files: RunFiles,
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

/// Boots one guest and waits for it.
pub fn boot(spec: &GuestSpec, files: RunFiles, busybox: &Path) -> Result<BootResult> {
    boot_with(spec, files, busybox, &BootOptions::default())
}

/// [`boot`] with options: a kept NVDIMM file, a power cut.
pub fn boot_with(
    spec: &GuestSpec,
    files: RunFiles,
    busybox: &Path,
    opts: &BootOptions,
) -> Result<BootResult> {
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
    let qemu = qemu_binary()?;
    let args = qemu_args(spec, &files);
    fs::write(
        files.dir.join("qemu.cmdline"),
        format!(
            "{} {}\n",
            qemu.display(),
            args.iter()
                .map(|a| sh_quote(a))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    )
    .ok();
    if virgl()
        && spec
            .devices
            .iter()
            .any(|d| matches!(d, DeviceKind::Bochs | DeviceKind::Qxl))
    {
        // With another display device first, SDL's GL context is not the one virgl gets
        // (QEMU aborts: "Couldn't find current GLX or EGL context").
        return Err(VmError::with_fix(
            "VM_VIRGL=1 works only without the bochs and qxl devices",
            "pass --device virtio-gpu (and vkms, vgem, ... as needed)",
        ));
    }
    // Kept alive until QEMU has exited, then stopped.
    let xvfb = if virgl() { Some(Xvfb::start()?) } else { None };
    let start = Instant::now();
    let mut cmd = Command::new(&qemu);
    if let Some(x) = &xvfb {
        cmd.env("DISPLAY", &x.display);
    }
    let mut child = cmd
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            VmError::with_fix(
                format!("cannot start {}: {e}", qemu.display()),
                "scripts/setup",
            )
        })?;
    let mut out_pos = 0u64;
    let mut boot_at = None;
    let mut payload_at = None;
    let mut timed_out = false;
    let mut cut_at: Option<Instant> = None;
    let mut cut_acks = None;
    let mut seed = opts.power_cut.map_or(0, |c| c.seed);
    let hang_limit = hang_after();
    // The heartbeat's size and when it last grew; armed once the first byte came.
    let mut beat = (0u64, Instant::now());
    let mut hang: Option<String> = None;
    let mut nmi_at: Option<Instant> = None;
    let mut hung_for_good = None;
    loop {
        let exited = child.try_wait().ok().flatten().is_some();
        if let (Some(cut), false) = (opts.power_cut, exited) {
            let acks = count_acks(&fs::read(&files.output).unwrap_or_default());
            if cut_at.is_none() && acks >= cut.after_acks {
                let max = cut.max_delay.as_micros().max(1) as u64;
                cut_at = Some(Instant::now() + Duration::from_micros(xorshift(&mut seed) % max));
            }
            if cut_at.is_some_and(|t| Instant::now() >= t) {
                // The power cut: SIGKILL, so QEMU writes nothing more anywhere. Stores
                // the guest made to the NVDIMM are already in the shared backing file.
                kill(&mut child);
                cut_acks = Some(count_acks(&fs::read(&files.output).unwrap_or_default()));
                break;
            }
        }
        if spec.stream_output != Stream::Off {
            out_pos = copy_new(&files.output, out_pos, &spec.stream_output, false);
        }
        if boot_at.is_none() || payload_at.is_none() {
            let bytes = fs::read(&files.results).unwrap_or_default();
            let recs = stream::parse(&bytes).records;
            if boot_at.is_none() && recs.iter().any(|r| matches!(r, Record::Boot { .. })) {
                boot_at = Some(start.elapsed());
            }
            if recs
                .iter()
                .any(|r| matches!(r, Record::Note(n) if n.starts_with("payload start")))
            {
                payload_at = Some(start.elapsed());
            }
        }
        if exited {
            break;
        }
        let beats = fs::metadata(&files.alive).map_or(0, |m| m.len());
        if beats != beat.0 {
            beat = (beats, Instant::now());
        }
        if beat.0 > 0 && nmi_at.is_none() && beat.1.elapsed() > hang_limit {
            let silent = beat.1.elapsed().as_secs();
            let shown = hang_report(&files.monitor);
            let _ = fs::write(&files.hang, &shown.text);
            hang = Some(format!(
                "no heartbeat for {silent} s; {}",
                if shown.nmi {
                    "NMI injected"
                } else {
                    "the monitor did not take the NMI"
                }
            ));
            nmi_at = Some(Instant::now());
        }
        if nmi_at.is_some_and(|t| t.elapsed() > NMI_GRACE) {
            hung_for_good = hang.clone();
            kill(&mut child);
            break;
        }
        if start.elapsed() > spec.timeout {
            timed_out = true;
            kill(&mut child);
            break;
        }
        // A panic with panic=-1 reboots and -no-reboot ends QEMU; keep polling until then.
        std::thread::sleep(Duration::from_millis(if cut_at.is_some() { 1 } else { 25 }));
    }
    let end = start.elapsed();
    if spec.stream_output != Stream::Off {
        copy_new(&files.output, out_pos, &spec.stream_output, true);
    }
    let mut qemu_err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut qemu_err);
    }
    let _ = child.wait();
    let console =
        String::from_utf8_lossy(&fs::read(&files.console).unwrap_or_default()).into_owned();
    let parsed = stream::parse(&fs::read(&files.results).unwrap_or_default());
    let ending = match (cut_acks, hung_for_good) {
        (Some(acks), _) => Ending::PowerCut { acks },
        (None, Some(h)) if find_panic(&console).is_none() => Ending::Hang(format!(
            "{h}, and no panic came within {} s",
            NMI_GRACE.as_secs()
        )),
        _ => classify(&parsed, &console, timed_out, Some(&qemu_err)),
    };
    Ok(BootResult {
        ending,
        parsed,
        boot_time: boot_at,
        payload_time: payload_at,
        run_time: end - boot_at.unwrap_or_default(),
        console_tail: tail_lines(&console, 30),
        hang,
        files,
    })
}

/// What the monitor of a hung guest showed, and whether it took the NMI.
struct HangReport {
    text: String,
    nmi: bool,
}

/// Asks QEMU's monitor for every vCPU's registers (where each one is stuck), then injects
/// an NMI (the guest kernel, booted with `unknown_nmi_panic`, panics and prints its stack).
/// Each exchange has a 10 s limit; a monitor that does not answer is reported, not waited
/// for.
fn hang_report(socket: &Path) -> HangReport {
    use std::os::unix::net::UnixStream;
    let mut text = String::new();
    let mut nmi = false;
    let mut talk = || -> std::io::Result<()> {
        let mut s = UnixStream::connect(socket)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        s.set_write_timeout(Some(Duration::from_secs(10)))?;
        read_prompt(&mut s)?;
        for cmd in ["info registers -a", "nmi"] {
            s.write_all(format!("{cmd}\n").as_bytes())?;
            let answer = read_prompt(&mut s)?;
            // Its first line is the monitor's echo of the command, redrawn as typed.
            let answer = answer.split_once('\n').map_or("", |(_, rest)| rest);
            text.push_str(&format!("(qemu) {cmd}\n{answer}\n"));
            nmi |= cmd == "nmi";
        }
        Ok(())
    };
    if let Err(e) = talk() {
        text.push_str(&format!("monitor {}: {e}\n", socket.display()));
    }
    HangReport { text, nmi }
}

/// Reads the monitor's output up to its next `(qemu) ` prompt (at most 1 MiB).
fn read_prompt(s: &mut impl Read) -> std::io::Result<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(b"(qemu) ") {
        let n = s.read(&mut buf)?;
        if n == 0 || got.len() > 1 << 20 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    Ok(monitor_text(&String::from_utf8_lossy(&got))
        .trim_end_matches("(qemu) ")
        .to_string())
}

/// The monitor's output as plain text: its line editing writes escape sequences (`ESC [ K`),
/// which are dropped with every other control character but the newline.
fn monitor_text(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // CSI: ESC [ parameters, then one final byte in @..~.
            if chars.clone().next() == Some('[') {
                chars.next();
                for f in chars.by_ref() {
                    if ('@'..='~').contains(&f) {
                        break;
                    }
                }
            }
        } else if !c.is_control() || c == '\n' {
            out.push(c);
        }
    }
    out
}

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

/// Whether guests get a virgl-capable virtio-gpu (`VM_VIRGL=1`): `virtio-gpu-gl-pci` with
/// an SDL GL display on a private Xvfb, rendering with Mesa's software GL (llvmpipe). Needs
/// Debian's `qemu-system-gui`, `xvfb` and `libgl1-mesa-dri` (scripts/setup installs them).
pub fn virgl() -> bool {
    std::env::var_os("VM_VIRGL").is_some_and(|v| v == "1")
}

/// A private X server for QEMU's GL display; stopped on drop.
#[derive(Debug)]
struct Xvfb {
    child: std::process::Child,
    display: String,
}

impl Xvfb {
    fn start() -> Result<Self> {
        // A display number of our own: 100 + pid modulo 400, skipping ones in use.
        let base = 100 + std::process::id() % 400;
        for n in base..base + 50 {
            if Path::new(&format!("/tmp/.X11-unix/X{n}")).exists()
                || Path::new(&format!("/tmp/.X{n}-lock")).exists()
            {
                continue;
            }
            let display = format!(":{n}");
            let child = Command::new("Xvfb")
                .args([
                    display.as_str(),
                    "-screen",
                    "0",
                    "1280x1024x24",
                    "-nolisten",
                    "tcp",
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| {
                    VmError::with_fix(format!("VM_VIRGL=1 needs Xvfb: {e}"), "scripts/setup")
                })?;
            let mut x = Self { child, display };
            let socket = format!("/tmp/.X11-unix/X{n}");
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(10) {
                if Path::new(&socket).exists() {
                    return Ok(x);
                }
                if x.child.try_wait().ok().flatten().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = x.child.kill();
        }
        Err(VmError::new(
            "VM_VIRGL=1: Xvfb did not start on any display",
        ))
    }
}

impl Drop for Xvfb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Finds `qemu-system-x86_64` (`$VM_QEMU` overrides).
pub fn qemu_binary() -> Result<PathBuf> {
    if let Some(q) = std::env::var_os("VM_QEMU") {
        return Ok(PathBuf::from(q));
    }
    which("qemu-system-x86_64").ok_or_else(|| {
        VmError::with_fix(
            "qemu-system-x86_64 not found",
            "scripts/setup (or apt-get install qemu-system-x86)",
        )
    })
}

/// Finds a static busybox for the initramfs (`$VM_BUSYBOX` overrides).
pub fn busybox_binary() -> Result<PathBuf> {
    if let Some(b) = std::env::var_os("VM_BUSYBOX") {
        return Ok(PathBuf::from(b));
    }
    for p in ["/bin/busybox", "/usr/bin/busybox"] {
        let p = Path::new(p);
        if p.exists() {
            return Ok(p.to_path_buf());
        }
    }
    Err(VmError::with_fix(
        "busybox not found (the guest init needs a static busybox)",
        "scripts/setup (or apt-get install busybox-static)",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    use crate::stream::encode;

    fn spec(devices: Vec<DeviceKind>) -> GuestSpec {
        GuestSpec {
            kernel: BuiltKernel {
                name: "debian-6.12".into(),
                image: "/k/vmlinux".into(),
                modules: None,
                release: "6.12.117".into(),
                built_from: None,
                cache_dir: None,
                missing_features: Vec::new(),
                extra_modules: Vec::new(),
                early_modules: Vec::new(),
            },
            devices,
            payload: Payload {
                argv: vec!["drmtool".into(), "devices".into()],
                cwd: "/work/main".into(),
                env: vec![("KERNEL_TESTS_STRICT".into(), "1".into())],
                host_root: true,
            },
            accel: Accel::Tcg,
            timeout: Duration::from_secs(60),
            memory_mib: 1024,
            probe_only: false,
            stream_output: Stream::Off,
        }
    }

    fn files() -> RunFiles {
        RunFiles {
            dir: "/r".into(),
            initrd: "/r/initramfs.cpio".into(),
            console: "/r/console.log".into(),
            results: "/r/results.bin".into(),
            output: "/r/output.log".into(),
            nvdimm: "/r/nvdimm.img".into(),
            alive: "/r/alive.log".into(),
            monitor: "/r/monitor.sock".into(),
            hang: "/r/hang.txt".into(),
        }
    }

    #[test]
    fn qemu_command_for_the_full_device_set() {
        let a = qemu_args(&spec(DeviceKind::ALL.to_vec()), &files()).join(" ");
        for want in [
            "-machine pc,nvdimm=on",
            "-accel tcg,thread=single",
            "-cpu max,la57=off",
            "-m 1024M,slots=2,maxmem=3072M",
            "-kernel /k/vmlinux",
            "-initrd /r/initramfs.cpio",
            "-no-reboot",
            "panic=-1",
            "-serial chardev:con",
            "name=vm.results",
            "name=vm.output",
            "name=vm.alive",
            "-monitor unix:/r/monitor.sock,server=on,wait=off",
            "unknown_nmi_panic",
            "-fsdev local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap",
            "-device virtio-gpu-pci",
            "-vga std",
            "-device qxl",
            "memory-backend-file,id=nvmem0,share=on,mem-path=/r/nvdimm.img,size=256M",
            "-device nvdimm,id=nvdimm0,memdev=nvmem0",
        ] {
            assert!(a.contains(want), "missing {want:?} in {a}");
        }
        // The full set has two virtio-gpus: two render nodes of one driver.
        assert_eq!(a.matches("-device virtio-gpu-pci").count(), 2, "{a}");
    }

    /// The whole QEMU command line, argument by argument, for two option sets that between
    /// them take every branch of [`qemu_args`] (virgl off).
    #[test]
    fn qemu_command_is_pinned() {
        let full = qemu_args(&spec(DeviceKind::ALL.to_vec()), &files());
        let want: Vec<&str> = vec![
            "-machine",
            "pc,nvdimm=on",
            "-accel",
            "tcg,thread=single",
            "-cpu",
            "max,la57=off",
            "-smp",
            "2",
            "-m",
            "1024M,slots=2,maxmem=3072M",
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-no-reboot",
            "-kernel",
            "/k/vmlinux",
            "-initrd",
            "/r/initramfs.cpio",
            "-append",
            "console=ttyS0 panic=-1 oops=panic loglevel=4 rdinit=/init tsc=reliable \
             no_timer_check unknown_nmi_panic",
            "-chardev",
            "file,id=con,path=/r/console.log",
            "-serial",
            "chardev:con",
            "-device",
            "virtio-serial-pci,id=vser",
            "-chardev",
            "file,id=res,path=/r/results.bin",
            "-device",
            "virtserialport,bus=vser.0,chardev=res,name=vm.results",
            "-chardev",
            "file,id=out,path=/r/output.log",
            "-device",
            "virtserialport,bus=vser.0,chardev=out,name=vm.output",
            "-chardev",
            "file,id=alive,path=/r/alive.log",
            "-device",
            "virtserialport,bus=vser.0,chardev=alive,name=vm.alive",
            "-monitor",
            "unix:/r/monitor.sock,server=on,wait=off",
            "-fsdev",
            "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap",
            "-device",
            "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot",
            "-device",
            "virtio-gpu-pci",
            "-device",
            "virtio-gpu-pci",
            "-vga",
            "std",
            "-device",
            "qxl",
            "-object",
            "memory-backend-file,id=nvmem0,share=on,mem-path=/r/nvdimm.img,size=256M",
            "-device",
            "nvdimm,id=nvdimm0,memdev=nvmem0",
        ];
        assert_eq!(full, want);

        // KVM, a virtio-pmem, and a probe boot (which shares no host root).
        let mut s = spec(vec![DeviceKind::VirtioPmem, DeviceKind::Vkms]);
        s.accel = Accel::Kvm;
        s.probe_only = true;
        s.memory_mib = 512;
        let probe = qemu_args(&s, &files());
        let mut want: Vec<&str> = vec![
            "-machine",
            "pc",
            "-accel",
            "kvm",
            "-cpu",
            "host",
            "-smp",
            "2",
            "-m",
            "512M,slots=2,maxmem=2560M",
        ];
        // From -nodefaults to -monitor the two are the same.
        let shared = full.iter().position(|a| a == "-nodefaults").unwrap();
        let after = full.iter().position(|a| a == "-fsdev").unwrap();
        want.extend(full[shared..after].iter().map(String::as_str));
        want.extend([
            "-object",
            "memory-backend-file,id=vpmem0,share=on,mem-path=/r/nvdimm.img,size=256M",
            "-device",
            "virtio-pmem-pci,id=virtio-pmem0,memdev=vpmem0",
        ]);
        assert_eq!(probe, want);
    }

    #[test]
    fn qemu_command_minimal_and_kvm() {
        let mut s = spec(vec![]);
        s.accel = Accel::Kvm;
        s.payload.host_root = false;
        let a = qemu_args(&s, &files()).join(" ");
        assert!(a.contains("-machine pc -accel kvm "), "{a}");
        assert!(a.contains("-cpu host"));
        assert!(a.contains("-m 1024M "));
        for absent in ["nvdimm", "virtio-9p", "-vga", "qxl", "virtio-gpu"] {
            assert!(!a.contains(absent), "{absent} in {a}");
        }
    }

    #[test]
    fn qemu_command_for_virtio_pmem() {
        let s = spec(vec![DeviceKind::VirtioPmem]);
        let a = qemu_args(&s, &files()).join(" ");
        for want in [
            "-machine pc ",
            "-m 1024M,slots=2,maxmem=3072M",
            "memory-backend-file,id=vpmem0,share=on,mem-path=/r/nvdimm.img,size=256M",
            "-device virtio-pmem-pci,id=virtio-pmem0,memdev=vpmem0",
        ] {
            assert!(a.contains(want), "missing {want:?} in {a}");
        }
        assert!(!a.contains("nvdimm=on"), "{a}");
        assert!(init_env(&s).contains("VM_WAIT_PMEM=1\n"));
        assert_eq!(
            DeviceKind::parse("virtio-pmem"),
            Some(DeviceKind::VirtioPmem)
        );
        assert!(!DeviceKind::ALL.contains(&DeviceKind::VirtioPmem));
    }

    #[test]
    fn payload_script_quotes_everything() {
        let mut p = spec(vec![]).payload;
        p.argv = vec![
            "/bin/echo".into(),
            "it's".into(),
            "a b".into(),
            "$HOME".into(),
        ];
        p.env = vec![("X".into(), "1 2".into())];
        let s = payload_script(&p);
        assert!(s.contains("export X='1 2'\n"), "{s}");
        assert!(s.contains("cd /work/main || exit 126\n"), "{s}");
        assert!(
            s.contains("exec /bin/echo 'it'\\''s' 'a b' '$HOME'\n"),
            "{s}"
        );
    }

    #[test]
    fn init_env_lists_modules_and_modes() {
        let e = init_env(&spec(DeviceKind::ALL.to_vec()));
        assert!(e.contains("VM_MODULES='vkms vgem test_hmm'\n"), "{e}");
        assert!(e.contains("VM_MODALIAS=1\n"));
        assert!(e.contains("VM_WAIT_PMEM=1\n"));
        assert!(e.contains("VM_CMD=1\n"));
        assert!(e.contains("VM_HOSTROOT=1\n"));
        assert!(!e.contains("VM_EARLY_MODULES"), "{e}");
        let mut s = spec(vec![]);
        s.probe_only = true;
        assert!(init_env(&s).contains("VM_MODE=probe\n"));
    }

    #[test]
    fn init_env_for_a_stock_kernel() {
        let mut s = spec(DeviceKind::ALL.to_vec());
        s.kernel.extra_modules = vec!["virtio_pci".into(), "9pnet_virtio".into(), "9p".into()];
        s.kernel.early_modules = vec!["virtio_pci".into()];
        s.kernel.missing_features = vec!["test_hmm".into(), "sw_sync".into()];
        let e = init_env(&s);
        assert!(
            e.contains("VM_MODULES='virtio_pci 9pnet_virtio 9p vkms vgem'\n"),
            "{e}"
        );
        assert!(e.contains("VM_EARLY_MODULES=virtio_pci\n"), "{e}");
    }

    fn stream_of(records: &[&str]) -> Parsed {
        let mut s = String::new();
        for r in records {
            s.push_str(&encode(r));
        }
        stream::parse(s.as_bytes())
    }

    #[test]
    fn monitor_text_drops_escapes_and_controls() {
        assert_eq!(
            monitor_text("QEMU 7.2 monitor\r\n(qemu) nmi\x1b[K\x1b[D\r\n\x07RIP=ffff\n"),
            "QEMU 7.2 monitor\n(qemu) nmi\nRIP=ffff\n"
        );
        assert_eq!(monitor_text("a\x1b"), "a");
        assert_eq!(monitor_text("a\x1b[12"), "a");
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

    #[test]
    fn tmp_paths_are_kept() {
        let mut p = spec(vec![]).payload;
        p.cwd = "/tmp/ci-clone".into();
        p.argv = vec![
            "/tmp/ci-clone/target/release/vm".into(),
            "--bin".into(),
            "/tmp/other/x".into(),
            "/tmpfoo/y".into(),
            "/tmp/../etc".into(),
        ];
        assert_eq!(tmp_keep(&p), ["ci-clone", "other"]);
        assert!(init_env(&spec(vec![])).contains("VM_TMP_KEEP=''\n"));
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

    #[test]
    fn tail_and_quote() {
        assert_eq!(tail_lines("a\n\nb\nc\n", 2), ["b", "c"]);
        assert_eq!(sh_quote("plain-arg_1.2"), "plain-arg_1.2");
        assert_eq!(sh_quote(""), "''");
        assert_eq!(DeviceKind::parse("virtio-gpu"), Some(DeviceKind::VirtioGpu));
        assert_eq!(DeviceKind::parse("gpu"), None);
    }
}
