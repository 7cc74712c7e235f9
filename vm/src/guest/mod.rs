//! One guest boot: the initramfs (busybox, our init, modules, the payload), the QEMU command
//! line for the device set, and the run loop that streams output, enforces the timeout and
//! classifies how the boot ended.
//!
//! This module holds what describes a boot and what it ends with (the [`GuestSpec`], its
//! [`RunFiles`], [`BootOptions`], the [`Ending`] in a [`BootResult`]) and the entry points
//! [`boot`](fn@boot) and [`boot_with`]. The parts, each re-exported here: `initramfs` (the
//! guest's root: busybox, the init, its environment, the payload script, the modules),
//! `qemu` (the QEMU binary and its command line), `boot` (the phases of a boot: its files,
//! QEMU's start, the run loop, the result and its classification), `monitor` (QEMU's
//! monitor: what a hung guest shows, the NMI) and `xvfb` (virgl's private X server).

use crate::cache::BuiltKernel;
use crate::error::{Result, VmError};
use crate::stream::Parsed;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod boot;
mod initramfs;
mod monitor;
pub use monitor::quit as quit_qemu;
mod qemu;
mod xvfb;

pub use boot::{
    HANG_AFTER, NMI_GRACE, classify, count_acks, find_panic, hang_after, tail_lines, xorshift,
};
pub use initramfs::{INIT, busybox_binary, init_env, initramfs, payload_script, tmp_keep};
pub use qemu::{KERNEL_CMDLINE, qemu_args, qemu_binary};
use xvfb::Xvfb;
pub use xvfb::virgl;

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
    /// The NUMA topology profile: two NUMA nodes (one vCPU and half the memory each,
    /// distance 10 within a node and 21 between them); a PCI expander bridge (`pxb`, a
    /// host bridge of its own) on each node with a virtio-gpu behind it; and a virtio-blk
    /// disk (16 MiB of zeros) beside node 1's GPU, "the data", and a virtio-net NIC (on a
    /// hub port to nothing) beside node 0's. Not in
    /// [`DeviceKind::ALL`]: `vm test --topology numa` adds it to the full set.
    NumaPxb,
    /// The PCIe switch profile, on a q35 machine with the two NUMA nodes of
    /// [`DeviceKind::NumaPxb`]: a PCIe expander bridge (`pxb-pcie`, a host bridge of its
    /// own) on each node. Node 0's has two root ports: behind the first a switch (one
    /// upstream port, three downstream ports) holding GPUs A and B and an NVMe drive ("the
    /// data", backed by a sparse file of the boot: [`RunFiles::disk`]); behind the second
    /// GPU D. Node 1's has one root port with GPU C. Not in [`DeviceKind::ALL`]: `vm test
    /// --topology switch` adds it to the full set.
    PcieSwitch,
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
            Self::NumaPxb => "numa-pxb",
            Self::PcieSwitch => "pcie-switch",
        }
    }

    /// Parses a `--device` name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .chain([Self::VirtioPmem, Self::NumaPxb, Self::PcieSwitch])
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
    /// With `host_root`: chroot into a writable union over it instead (overlayfs where the
    /// kernel has it, else the host's fuse-overlayfs), its changes in a tmpfs that goes with
    /// the guest: `dpkg -i` as on a machine of one's own (`vm test --writable-root`).
    pub writable_root: bool,
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
    /// A NIC on a two-guest link ([`ClusterLink`]); `None` for a guest without a network.
    pub cluster: Option<ClusterLink>,
}

/// One guest's end of a two-guest network (`vm test --cluster`): a virtio-net NIC on
/// QEMU's `dgram` netdev, a UDP socket on the host's loopback whose datagrams go to the
/// other guest's socket. No other network: nothing outside the two guests is reachable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterLink {
    /// This guest's node number, 1 or 2 (its NIC's MAC ends in it: [`ClusterLink::mac`]).
    pub node: u8,
    /// The UDP port on 127.0.0.1 this guest's NIC sends from and receives on.
    pub local_port: u16,
    /// The other guest's port.
    pub remote_port: u16,
}

impl ClusterLink {
    /// The NIC's MAC address: QEMU's locally administered prefix, then `c1:00:0N`.
    pub fn mac(self) -> String {
        format!("52:54:00:c1:00:{:02x}", self.node)
    }
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
    /// The NVMe drive's backing file of the PCIe switch profile (sparse,
    /// [`SWITCH_DISK_MIB`]).
    pub disk: PathBuf,
}

/// The size of the PCIe switch profile's NVMe drive: room for a small ext4 file system.
pub const SWITCH_DISK_MIB: u64 = 64;

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
            disk: dir.join("disk.img"),
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

/// NVDIMM size: enough for a namespace with fsdax metadata and a small ext4.
pub const NVDIMM_MIB: u32 = 256;

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

/// Boots one guest and waits for it.
pub fn boot(spec: &GuestSpec, files: RunFiles, busybox: &Path) -> Result<BootResult> {
    boot_with(spec, files, busybox, &BootOptions::default())
}

/// [`boot`](fn@boot) with options: a kept NVDIMM file, a power cut.
pub fn boot_with(
    spec: &GuestSpec,
    files: RunFiles,
    busybox: &Path,
    opts: &BootOptions,
) -> Result<BootResult> {
    boot::write_files(spec, &files, busybox, opts)?;
    let qemu = qemu_binary()?;
    let args = qemu_args(spec, &files);
    qemu::write_cmdline(&files.dir, &qemu, &args);
    xvfb::refuse_other_displays(spec)?;
    // Kept alive until QEMU has exited, then stopped.
    let xvfb = if virgl() { Some(Xvfb::start()?) } else { None };
    let start = Instant::now();
    let mut child = boot::spawn(&qemu, &args, xvfb.as_ref())?;
    let seen = boot::watch(spec, &files, opts, &mut child, start);
    Ok(boot::finish(spec, files, child, start, seen))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spec for the tests of every part: `drmtool devices` on the host root under TCG.
    pub(super) fn spec(devices: Vec<DeviceKind>) -> GuestSpec {
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
                writable_root: false,
            },
            accel: Accel::Tcg,
            timeout: Duration::from_secs(60),
            memory_mib: 1024,
            probe_only: false,
            stream_output: Stream::Off,
            cluster: None,
        }
    }

    /// Run files under `/r`.
    pub(super) fn files() -> RunFiles {
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
            disk: "/r/disk.img".into(),
        }
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
