//! `vm`: builds the project's guest kernels, boots them in QEMU with real GPU drivers, and
//! runs programs and test suites inside.

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use vm::build;
use vm::cache;
use vm::catalog;
use vm::error::VmError;
use vm::matrix::{self, GuestTests, TestOptions};
use vm::powercut::{self, PowercutArgs};
use vm::prepare::{KernelSelection, unknown_kernel};
use vm::program::{self, RunRequest};

#[derive(Parser, Debug)]
#[command(
    name = "vm",
    version,
    about = "Boot real kernels with real GPU drivers in QEMU and run programs and tests inside",
    after_help = "Examples:\n  vm kernels\n  vm kernel build debian-6.12\n  \
                  vm run --kernel debian-6.12 -- drm_info\n  \
                  vm run --kernel debian-6.1 --device vkms --device vgem -- target/release/drmtool devices\n  \
                  vm run --kernel /boot/vmlinuz-5.15 --modules /lib/modules/5.15.0 -- uname -a\n  \
                  vm test --kernel all --json results.json --junit results.xml\n  \
                  vm matrix --format github"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args, Debug, Clone)]
struct KernelArgs {
    /// A catalog name (see `vm kernels`), or the path of a bzImage/vmlinux to boot as is.
    #[arg(long, default_value = "debian-6.12")]
    kernel: String,
    /// With a kernel path: its modules (`lib/modules/<release>`, or a directory holding it).
    #[arg(long)]
    modules: Option<PathBuf>,
    /// Build this kernel source tree with the project's config and boot it.
    #[arg(long, conflicts_with = "modules")]
    kernel_source: Option<PathBuf>,
    /// Accelerator: auto (probe KVM with a short boot, else TCG), kvm or tcg.
    #[arg(long, default_value = "auto", env = "VM_ACCEL")]
    accel: String,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// List the catalog kernels and whether each is built and cached.
    Kernels,
    /// Build (or rebuild) kernels.
    Kernel {
        #[command(subcommand)]
        cmd: KernelCmd,
    },
    /// Run a host program in a guest and exit with its status.
    Run {
        #[command(flatten)]
        k: KernelArgs,
        /// Devices to attach or load (repeatable): vkms, vgem, virtio-gpu, virtio-gpu-2 (a
        /// second virtio-gpu), bochs, qxl, test_hmm, nvdimm, or `all` (the default).
        #[arg(long = "device", default_value = "all")]
        devices: Vec<String>,
        /// Wall-clock limit for the whole boot, in seconds.
        #[arg(long, default_value_t = 300)]
        timeout: u64,
        /// Extra environment for the program (repeatable, KEY=VALUE).
        #[arg(long = "env")]
        env: Vec<String>,
        /// Back the NVDIMM with this file and keep it: created (zeroed) when missing, used
        /// as it is otherwise, so one boot reads what an earlier one wrote.
        #[arg(long)]
        nvdimm_file: Option<PathBuf>,
        /// Run the program on a writable root: a union over the read-only host root whose
        /// changes go to a tmpfs and are gone at power-off (`dpkg -i` as an admin would).
        #[arg(long)]
        writable_root: bool,
        /// The program and its arguments.
        #[arg(last = true, required = true)]
        argv: Vec<String>,
    },
    /// Boot each kernel with the full device set and run every kernel test, strictly.
    Test(TestArgs),
    /// Cut the guest's power again and again while a payload writes to the NVDIMM, and
    /// check after each reboot, on the same backing file, that nothing acknowledged was
    /// lost.
    ///
    /// Round r (0..=cuts) boots with POWERCUT_ROUND=r and POWERCUT_ACKED=<acknowledgements
    /// of round r-1>. The payload checks round r-1's records and prints one line `CHECK
    /// acked=<n> intact=<i> lost=<l>`, then writes new records, printing `ACK <seq>` once
    /// each is durable. After --min-acks acknowledgements and a random delay below
    /// --max-delay-ms QEMU is killed. The last boot (POWERCUT_LAST=1) only checks and exits
    /// 0. Exit status: 0 when nothing acknowledged was lost (or --allow-loss), 1 on a loss,
    /// 3 when the payload refused its mode on this device (a `REFUSED ...` line, e.g.
    /// MAP_SYNC on virtio-pmem), 125 when the harness or the payload broke the protocol.
    ///
    /// --cache direct (default): an emulated NVDIMM whose backing file is the memory
    /// itself, so under TCG every store is durable at once. --cache volatile: a virtio-pmem
    /// device whose backing file is served by a FUSE server with a volatile write cache:
    /// only what the guest flushed (virtio-pmem flush, QEMU's fsync) survives a cut.
    Powercut {
        #[command(flatten)]
        k: KernelArgs,
        /// Power cuts (boots: cuts + 1).
        #[arg(long, default_value_t = 20)]
        cuts: u32,
        /// Acknowledgements to wait for before each cut may come.
        #[arg(long, default_value_t = 20)]
        min_acks: u64,
        /// Upper bound of the random delay after --min-acks, in milliseconds.
        #[arg(long, default_value_t = 1500)]
        max_delay_ms: u64,
        /// Seed of the random delays (default: from the clock; printed).
        #[arg(long)]
        seed: Option<u64>,
        /// NVDIMM backing file to use and keep (default: a fresh one, removed at the end);
        /// with --cache volatile, the stable image behind the cache.
        #[arg(long)]
        nvdimm_file: Option<PathBuf>,
        /// What stands between the guest's persistent memory and the backing file: direct
        /// (an NVDIMM) or volatile (virtio-pmem on a write-back cache that only a flush
        /// empties, dropped at each cut).
        #[arg(long, default_value = "direct")]
        cache: String,
        /// Wall-clock limit per boot, in seconds.
        #[arg(long, default_value_t = 120)]
        timeout: u64,
        /// Report losses but exit 0 (for the runs that show the test can fail).
        #[arg(long)]
        allow_loss: bool,
        /// Extra environment for the payload (repeatable, KEY=VALUE).
        #[arg(long = "env")]
        env: Vec<String>,
        /// The payload and its arguments.
        #[arg(last = true, required = true)]
        argv: Vec<String>,
    },
    /// Print a CI matrix (one job per kernel) for an existing CI engine.
    Matrix {
        /// Output format.
        #[arg(long, default_value = "github")]
        format: String,
    },
    /// (Runs inside the guest.) Run test binaries one test at a time and record results.
    #[command(hide = true)]
    GuestTests {
        /// Test executables.
        #[arg(long = "bin")]
        bins: Vec<PathBuf>,
        /// Make skips fail (KERNEL_TESTS_STRICT=1).
        #[arg(long)]
        strict: bool,
        /// Per-test limit in seconds. drmtool_kms's screenshot test (every KMS driver, every
        /// method, PNGs compared pixel for pixel by a debug build under TCG) takes about 40 s
        /// on an idle host and 190-210 s while a kernel build shares the two cores.
        #[arg(long, default_value_t = 300)]
        test_timeout: u64,
        /// Directory of kernel selftest programs built for this kernel.
        #[arg(long)]
        selftests: Option<PathBuf>,
        /// Also run libdrm's test programs and drm_info.
        #[arg(long)]
        libdrm: bool,
        /// A unit an earlier boot ran already (`suite::name`, as its `start` record named
        /// it; repeatable): left out.
        #[arg(long = "skip-unit")]
        skip_units: Vec<String>,
    },
}

#[derive(Subcommand, Debug)]
enum KernelCmd {
    /// Build a catalog kernel (cached; a damaged cache entry is rebuilt).
    Build {
        /// Catalog names, or `all`.
        #[arg(required = true)]
        names: Vec<String>,
        /// Rebuild even if cached.
        #[arg(long)]
        rebuild: bool,
    },
}

fn fail(e: &VmError) -> ExitCode {
    eprintln!("vm: {e}");
    ExitCode::from(125)
}

/// The exit status of a command, or 125 for its error (said on stderr).
fn exit(r: Result<ExitCode, VmError>) -> ExitCode {
    r.unwrap_or_else(|e| fail(&e))
}

/// 0 for a command that passed, 1 for one that failed.
fn passed(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Kernels => kernels(),
        Cmd::Kernel {
            cmd: KernelCmd::Build { names, rebuild },
        } => kernel_build(&names, rebuild),
        Cmd::Run {
            k,
            devices,
            timeout,
            env,
            nvdimm_file,
            writable_root,
            argv,
        } => {
            let req = RunRequest {
                devices,
                timeout: Duration::from_secs(timeout),
                env,
                nvdimm_file,
                writable_root,
                argv,
            };
            exit(program::run(&k.selection(), req).map(|o| o.exit_status().into()))
        }
        Cmd::Test(a) => exit(matrix::test(&a.options()).map(passed)),
        Cmd::Powercut {
            k,
            cuts,
            min_acks,
            max_delay_ms,
            seed,
            nvdimm_file,
            cache,
            timeout,
            allow_loss,
            env,
            argv,
        } => {
            let a = PowercutArgs {
                cuts,
                min_acks,
                max_delay: Duration::from_millis(max_delay_ms),
                seed,
                nvdimm_file,
                cache,
                timeout: Duration::from_secs(timeout),
                allow_loss,
            };
            exit(powercut::powercut(&k.selection(), &a, &env, argv).map(|o| o.exit_status().into()))
        }
        Cmd::Matrix { format } => ci_matrix(&format),
        Cmd::GuestTests {
            bins,
            strict,
            test_timeout,
            selftests,
            libdrm,
            skip_units,
        } => {
            let g = GuestTests {
                bins,
                strict,
                test_timeout: Duration::from_secs(test_timeout),
                selftests,
                libdrm,
                skip_units,
            };
            passed(matrix::guest_tests(&g))
        }
    }
}

impl KernelArgs {
    fn selection(&self) -> KernelSelection {
        KernelSelection {
            kernel: self.kernel.clone(),
            modules: self.modules.clone(),
            kernel_source: self.kernel_source.clone(),
            accel: self.accel.clone(),
        }
    }
}

/// `vm kernel build`: builds (or finds cached) each kernel named, in order; stops at the
/// first that fails.
fn kernel_build(names: &[String], rebuild: bool) -> ExitCode {
    let names = expand(names);
    for n in names {
        let Some(k) = catalog::find(&n) else {
            return fail(&unknown_kernel(&n));
        };
        match build::ensure_catalog(k, rebuild) {
            Ok(b) => println!("{}: {} ({})", k.name, b.release, b.image.display()),
            Err(e) => return fail(&e),
        }
    }
    ExitCode::SUCCESS
}

fn expand(names: &[String]) -> Vec<String> {
    if names.iter().any(|n| n == "all") {
        catalog::default_matrix()
            .into_iter()
            .map(String::from)
            .collect()
    } else {
        names.to_vec()
    }
}

fn kernels() -> ExitCode {
    println!(
        "{:<18} {:<9} {:<26} {:<62} about",
        "name", "matrix", "cached", "verified on its lane"
    );
    for k in catalog::CATALOG {
        let stock = matches!(k.source, catalog::Source::DebianStock { .. });
        let state = if stock {
            match vm::stock::cache_state(k) {
                Ok((_, Ok(m))) => format!("yes ({})", m.release),
                Ok((v, Err(why))) => format!("no: {why} ({v})"),
                Err(e) => format!("no image: {}", e.what),
            }
        } else {
            match build::resolve(k) {
                Ok(r) => {
                    let key = catalog::cache_key(k.name, &r.version, &catalog::kernel_extra(k));
                    match cache::cached(&key).1 {
                        Ok(m) => format!("yes ({})", m.release),
                        Err(why) => format!("no: {why} ({})", r.version),
                    }
                }
                Err(e) => format!("no source: {}", e.what),
            }
        };
        println!(
            "{:<18} {:<9} {:<26} {:<62} {}",
            k.name,
            if k.default_matrix { "default" } else { "-" },
            state,
            catalog::verified(k),
            k.about
        );
    }
    println!("cache: {}", catalog::cache_root().display());
    println!("bring your own: {}", catalog::BRING_YOUR_OWN);
    ExitCode::SUCCESS
}

/// `vm test` settings.
#[derive(clap::Args, Debug)]
struct TestArgs {
    /// A catalog name, `all` (the default matrix) or a kernel path (a vmlinux/bzImage in
    /// a cache entry of `~/.cache/drm-toolkit/kernels` brings its modules and selftests).
    #[arg(long, default_value = "all")]
    kernel: String,
    /// Modules for a kernel path.
    #[arg(long)]
    modules: Option<PathBuf>,
    /// Build this kernel source tree with the project's config (cached) and test it,
    /// with its own selftests.
    #[arg(long, conflicts_with = "modules")]
    kernel_source: Option<PathBuf>,
    /// Only these kernel-tests test targets (repeatable, `cargo test --test NAME`; a
    /// target that is `test = false`, like `crash`, is built only when named here;
    /// `kernel_tests` is the library's own unit tests, `cargo test --lib`).
    #[arg(long = "test")]
    tests: Vec<String>,
    /// Extra environment for the tests in the guest (repeatable, KEY=VALUE).
    #[arg(long = "env")]
    env: Vec<String>,
    /// Different kernel crashes (oops, panic, hang: by function and module) per kernel
    /// after which no new boot is tried; what never ran is then reported as not run. A
    /// crash met before costs its test and a boot, and the lane goes on (at most 40
    /// crashes in all).
    #[arg(long, default_value_t = vm::lane::MAX_OOPSES)]
    max_oopses: usize,
    /// Run only the kernel-tests binaries: no kernel selftests, no libdrm programs (for
    /// short checks such as scripts/guest-oops).
    #[arg(long)]
    kernel_tests_only: bool,
    /// Accelerator: auto, kvm or tcg.
    #[arg(long, default_value = "auto", env = "VM_ACCEL")]
    accel: String,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the results as JUnit XML here.
    #[arg(long)]
    junit: Option<PathBuf>,
    /// Wall-clock limit per kernel, in seconds: room for a lane of about 600 s on a quiet
    /// host, 1465 s as measured beside another guest on 2026-12-05 (when CI's lanes were
    /// all cut at the old 1500 s), plus one test that hangs to its own limit (300 s, then
    /// its stacks are taken and it is failed) before the lane is cut.
    #[arg(long, default_value_t = 2400)]
    timeout: u64,
    /// How many kernels' lanes run at once (`--kernel all`; each guest has 2 vCPUs and
    /// 2 GiB). Their output lines carry the kernel's name; the report is in matrix order.
    #[arg(long, default_value_t = 2, env = "VM_JOBS")]
    jobs: usize,
    /// A topology profile added to the full device set: `numa` (two NUMA nodes, a PCI
    /// expander bridge per node with a virtio-gpu, a virtio-blk disk beside node 1's GPU;
    /// the root bus's two virtio-gpus left out; `VM_TOPOLOGY=numa` in the guest). For the
    /// tests built for it (`--test drmtool_topology`).
    /// `switch`: a q35 machine with the two NUMA nodes, a PCIe expander bridge per node, a
    /// PCIe switch with two GPUs and an NVMe drive, a GPU on a root port of its own beside
    /// it and one on node 1 (`VM_TOPOLOGY=switch`; `--test drmtool_pcie_switch`).
    #[arg(long, value_parser = ["numa", "switch"])]
    topology: Option<String>,
    /// Boots a second guest (node 2, the same kernel, devices and command) beside each of
    /// the lane's boots, both with a virtio-net NIC on one link of their own (QEMU's dgram
    /// netdev over the host's loopback; nothing else reachable), `VM_CLUSTER_NODE=1` or `2`
    /// in them. Node 2 is told to quit 120 s after node 1's boot ends; a node 2 that did
    /// not exit 0 fails the lane. For the tests built for it (`--test drmtool_cluster`).
    #[arg(long)]
    cluster: bool,
    /// Run the tests on a writable root: a union over the read-only host root (overlayfs
    /// where the kernel has it, else the host's fuse-overlayfs), its changes in a tmpfs of
    /// the guest, gone at power-off; `VM_WRITABLE_ROOT=1` in the guest. For the tests that
    /// install packages (`--test drmtool_package`).
    #[arg(long)]
    writable_root: bool,
}

impl TestArgs {
    fn options(&self) -> TestOptions {
        TestOptions {
            kernel: self.kernel.clone(),
            modules: self.modules.clone(),
            kernel_source: self.kernel_source.clone(),
            tests: self.tests.clone(),
            env: self.env.clone(),
            max_oopses: self.max_oopses,
            kernel_tests_only: self.kernel_tests_only,
            accel: self.accel.clone(),
            json: self.json.clone(),
            junit: self.junit.clone(),
            timeout: Duration::from_secs(self.timeout),
            jobs: self.jobs,
            topology: self.topology.as_deref().map(|t| match t {
                "switch" => vm::guest::DeviceKind::PcieSwitch,
                _ => vm::guest::DeviceKind::NumaPxb,
            }),
            cluster: self.cluster,
            writable_root: self.writable_root,
        }
    }
}

fn ci_matrix(format: &str) -> ExitCode {
    if format != "github" {
        return fail(&VmError::new(format!(
            "--format {format:?}: only github is supported"
        )));
    }
    let kernels: Vec<String> = catalog::default_matrix()
        .iter()
        .map(|k| format!("\"{k}\""))
        .collect();
    println!("{{\"kernel\": [{}]}}", kernels.join(", "));
    ExitCode::SUCCESS
}
