//! The command line: one clap tree (this file) over one thin file per command
//! (`cli/<command>.rs`: its arguments and an `exec` that maps them to a library call and
//! renders the result). Every command that names a GPU takes a [`GpuSpec`].
//!
//! # Exit codes
//! The table is [`Exit`], with the mapping from the library's typed errors:
//! - 0: success (also when some processes could not be read: they are listed).
//! - 1: the command could not do its job (`/proc` unreadable, an ioctl failed, the output
//!   could not be written).
//! - 2: bad usage (unknown option, bad value, a malformed GPU spec).
//! - 3: a GPU spec, `--pid`, connector, mode or CRTC matched nothing.
//! - 4: this machine has no DRM devices at all (every command that names a GPU,
//!   `devices` and `cdi generate`), or no persistent memory (`pmem list`); with `--json`, `devices` and `pmem
//!   list` print the document too, with its `reason`.
//! - 5: `pick`/`run --pick` found too few eligible or free GPUs; 125: `run` could not set
//!   up the isolation.
//!
//! `buffers --watch SECS --count N` refuses `--count 0` (exit 2) rather than print nothing:
//! a count of no frames is a mistake, not a request. Every write is checked, the final flush
//! included: output that could not be written (a full disk, `>/dev/full`) exits 1.
//!
//! `hmm probe` exits 0 whatever the kernel has: a missing test_hmm or udmabuf is a finding,
//! reported as `no` with the reason.

mod buffers;
mod cdi;
mod cgroup;
mod devices;
mod emit;
pub mod exit;
mod export;
mod hmm;
mod info;
mod kms;
mod kms_set;
mod leases;
mod meta;
mod pick;
mod place;
mod pmem;
mod run;
mod slurm;
mod top;
mod top_term;
mod top_ui;
mod topo;
mod trace;

use self::emit::{emit_json, emit_text};
use self::{
    buffers::*, devices::*, export::*, hmm::*, info::*, kms::*, leases::*, pick::*, place::*,
    pmem::*, slurm::*, top::*, topo::*, trace::*,
};

use crate::gpu::GpuSpec;
pub use exit::Exit;

use crate::render::{By, SortKey};
use crate::scan::{self, Options};
use clap::{Parser, Subcommand};
use serde::Serialize;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(
    name = "drmtool",
    version,
    about = "Inspect DRM devices, capabilities, KMS state and who holds which GPU memory",
    after_help = meta::AFTER_HELP
)]
struct Cli {
    /// Print JSON (with a top-level schema_version) instead of a table.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// List every DRM node with its kind, driver, bus and PCI identity, in the one ordering
    /// every command uses (GPU index: PCI bus id, then platform devices by name).
    Devices,
    /// Which process holds which GPU memory: DRM clients, mapped buffers, dma-bufs.
    ///
    /// Figures come from fdinfo `drm-*` keys where the driver prints them, else from DRM
    /// and dma-buf mappings in /proc/<pid>/maps, dma-buf fdinfo and debugfs; each is
    /// labelled with its source, and what no source exposes is shown as unknown.
    Buffers(BuffersArgs),
    /// Driver, node identity, every DRM_CAP_*, accepted client caps and the whole KMS state.
    ///
    /// Without DEVICE: every primary node. Connectors are not probed unless --probe is
    /// given, so status and modes are those of the last probe, as drm_info shows them.
    #[command(
        after_help = "Examples:\n  drmtool info\n  drmtool info vkms --json\n  \
                            drmtool info /dev/dri/card0 --probe"
    )]
    Info {
        /// A GPU spec (an index, PCI bus id, driver, node path or name, `226:N` or by-path
        /// name; `drmtool devices` lists them). Default: every card node.
        device: Option<GpuSpec>,
        /// Probe connectors first (needs DRM master; slow on real hardware).
        #[arg(long)]
        probe: bool,
    },
    /// The uapi probe matrix: each ioctl family supported or not, with the errno class of
    /// the probe that decided it. Probes are harmless (no modeset, nothing shown).
    #[command(
        after_help = "Examples:\n  drmtool caps\n  drmtool caps vgem --json\n  \
                            diff <(ssh old drmtool caps --json) <(drmtool caps --json)"
    )]
    Caps {
        /// A GPU spec (an index, PCI bus id, driver, node path or name, `226:N` or by-path
        /// name; `drmtool devices` lists them). Default: every card node.
        device: Option<GpuSpec>,
    },
    /// Kernel modesetting: list, set a mode with a test pattern, screenshot a CRTC.
    #[command(subcommand)]
    Kms(KmsCmd),
    /// The test_hmm mirror devices, udmabuf and host registration backends.
    #[command(subcommand)]
    Hmm(HmmCmd),
    /// Persistent memory: regions, namespaces, /dev/pmem* and /dev/dax*, DAX mounts.
    #[command(subcommand)]
    Pmem(PmemCmd),
    /// Print a shell completion script for SHELL (bash, zsh, fish, elvish, powershell).
    #[command(after_help = "Example:\n  drmtool completions bash > /etc/bash_completion.d/drmtool")]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) generated from this command line; with --dir, write one
    /// page per command there instead (drmtool.1, drmtool-run.1, drmtool-trace-record.1, ...).
    #[command(
        after_help = "Examples:\n  drmtool man > drmtool.1 && man ./drmtool.1\n  \
                      drmtool man --dir /usr/local/share/man/man1"
    )]
    Man {
        /// Write drmtool.1 and one page per subcommand (drmtool-<command>[-<subcommand>].1)
        /// into DIR (made when missing), printing each path written.
        #[arg(long, value_name = "DIR")]
        dir: Option<std::path::PathBuf>,
    },
    /// Run a command that can open only the GPUs given, enforced by the kernel.
    ///
    /// The job runs as its user (through sudo: the calling user; as root: --user or
    /// --as-root), in its own cgroup v2 under a parent only root can write
    /// (/sys/fs/cgroup/drmtool.slice), whose device program allows the chosen card and
    /// render nodes and denies every other DRM and accel node, in its own pid, mount and
    /// cgroup namespaces with a private /dev holding only the chosen GPU nodes, with no
    /// inherited fd but 0-2 and --keep-fd, no_new_privs and no capability beyond its
    /// user's. The GPUs are leased for the job (exclusive unless --shared). SIGTERM, SIGINT,
    /// SIGHUP, SIGQUIT, SIGUSR1/2 reach the job; when drmtool dies, the job dies. Needs root:
    /// users start it through sudo (tools/README.md). Exit status: the command's; 2 bad
    /// usage, 4 no DRM devices, 5 the GPUs are leased by others, 125 the isolation could
    /// not be set up.
    #[command(
        after_help = "Examples:\n  sudo drmtool run --pick 1 -- ./train.sh\n  \
                      drmtool run --user alice --gpu 0 -- glxinfo -B\n  \
                      drmtool run --as-root --gpu 0000:03:00.0,vgem --renumber -- ./probe\n  \
                      drmtool run --gpu vkms --env-only"
    )]
    Run(run::RunArgs),
    /// Serve the buffers model as Prometheus metrics (GET /metrics), or write it for
    /// node_exporter's textfile collector.
    ///
    /// Each scrape scans /proc afresh (no stale series for exited processes); scrapes
    /// closer together than --min-interval get the last result. OpenMetrics or the text
    /// format 0.0.4, as the scraper's Accept header asks. Listens on 127.0.0.1 unless told
    /// otherwise; only /metrics is served. Metrics: tools/README.md.
    #[command(after_help = "Examples:\n  drmtool export\n  \
                      drmtool export --listen 0.0.0.0:9717 --web.config.file /etc/drmtool/web.yml\n  \
                      drmtool export --textfile /var/lib/node_exporter/textfile/drm.prom --count 1")]
    Export(ExportArgs),
    /// Choose the least used GPUs: fewest lease holders, then clients, then memory held
    /// (what the buffers model knows; unknown figures are said so and rank last).
    ///
    /// Prints the choice (bus ids or platform device names, the vendor variables, the CDI
    /// device names, or the whole ranking as JSON). It leases nothing, whatever the format
    /// (two jobs picking at once may get the same GPU): `drmtool run --pick N` leases.
    /// Exit 5 when fewer than N GPUs are eligible.
    #[command(
        after_help = "Examples:\n  drmtool pick\n  drmtool pick -n 2 --max-clients 0 --format env\n  \
                      drmtool pick --driver virtio_gpu --format json\n  \
                      podman run $(drmtool pick -n 2 --format cdi | sed 's/^/--device /') IMAGE CMD"
    )]
    Pick(PickArgs),
    /// Who holds which GPU lease (`drmtool run`): device, mode, pid, user, since, cgroup
    /// and command (holders from the kernel's /proc/locks; user, cgroup and command from
    /// the supervisor's root-owned record while it lives).
    #[command(after_help = "Examples:\n  drmtool leases\n  drmtool leases --json")]
    Leases,
    /// Where each GPU sits: NUMA node, local CPUs, PCIe path and link; the GPU-to-GPU
    /// matrix (X, PIX, PXB, PHB, NODE, SYS, as nvidia-smi topo -m classes them, for any
    /// vendor); the NICs and disks near each GPU; the NUMA distance table.
    #[command(after_help = "Examples:\n  drmtool topo\n  drmtool topo --json")]
    Topo,
    /// The live view of the GPUs and their clients, for any DRM driver: memory per region,
    /// engine busy, clients and leases per GPU with their history; clients grouped by
    /// process, cgroup, unit, container, pod, Slurm job or user. Keys: `?`.
    #[command(
        after_help = "Examples:\n  drmtool top\n  drmtool top --gpu 0 -d 2\n  \
                      drmtool top --once --json\n  drmtool top --record session.jsonl\n  \
                      drmtool top --replay session.jsonl"
    )]
    Top(TopArgs),
    /// Place a batch of job requests at once where each costs least: its class to what it
    /// wants near, then the GPUs' use (one minimum-cost flow for single-GPU jobs, a set
    /// search for multi-GPU ones, a wait for what cannot be placed now). Leases nothing.
    #[command(
        after_help = "Examples:\n  drmtool place jobs.json\n  drmtool place --slots 2 --json jobs.json\n\n\
                      jobs.json: {\"requests\": [{\"name\": \"train\", \"count\": 2, \"near\": \"path:/data\"}, \
                      {\"name\": \"nb\", \"exclusive\": false}]}"
    )]
    Place(PlaceArgs),
    /// cgroup v2 device rules.
    #[command(subcommand)]
    Cgroup(cgroup::CgroupCmd),
    /// Slurm: gres.conf lines for the DRM GPUs, a TaskProlog's vendor variables.
    #[command(subcommand)]
    Slurm(SlurmCmd),
    /// Container Device Interface: a spec of every GPU for podman, containerd, CRI-O and
    /// Kubernetes device plugins (`podman run --device drmtool.dev/gpu=0`).
    #[command(subcommand)]
    Cdi(cdi::CdiCmd),
    /// GPU timelines: record fence, vblank and scheduler tracepoints (perf) and GPU memory
    /// as a Perfetto/Chrome JSON trace; summarise one.
    #[command(subcommand)]
    Trace(TraceCmd),
}

/// Whether to colour the output for `--color CHOICE` (`always`, `never`, `auto`: on a
/// terminal without `NO_COLOR`).
fn color_wanted(choice: &str, tty: bool) -> bool {
    match choice {
        "always" => true,
        "never" => false,
        _ => tty && std::env::var_os("NO_COLOR").is_none(),
    }
}

/// Runs `drmtool ARGS...` in this process (`args` without the program name) and returns its
/// exit status and everything it wrote to stdout (stderr is not captured): for tests and
/// for programs that embed drmtool.
///
/// # Panics
/// If the output is not UTF-8 (drmtool writes only text).
pub fn run_captured(args: &[&str]) -> (ExitCode, String) {
    let mut out = Vec::new();
    let argv = std::iter::once("drmtool")
        .chain(args.iter().copied())
        .map(Into::into);
    let code = main_with(argv, &mut out);
    (code, String::from_utf8(out).expect("drmtool writes UTF-8"))
}

/// Runs drmtool with `args` (including the program name), writing to `out`; returns the
/// exit status. Errors go to stderr as one line with the cause and a hint.
pub fn main_with(
    args: impl IntoIterator<Item = std::ffi::OsString>,
    out: &mut dyn Write,
) -> ExitCode {
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(Exit::Usage)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let code = match cli.cmd {
        Cmd::Devices => devices(cli.json, out),
        Cmd::Buffers(a) => buffers(&a, cli.json, out),
        Cmd::Info { device, probe } => info(device.as_ref(), probe, cli.json, out),
        Cmd::Caps { device } => caps(device.as_ref(), cli.json, out),
        Cmd::Kms(k) => kms(k, cli.json, out),
        Cmd::Hmm(HmmCmd::Probe) => hmm_probe(cli.json, out),
        Cmd::Pmem(PmemCmd::List) => pmem_list(cli.json, out),
        Cmd::Completions { shell } => meta::completions(shell, out),
        Cmd::Run(a) => run::exec(a, out),
        Cmd::Export(a) => export_cmd(&a),
        Cmd::Pick(a) => pick_cmd(&a, cli.json, out),
        Cmd::Leases => leases_cmd(cli.json, out),
        Cmd::Topo => topo_cmd(cli.json, out),
        Cmd::Top(a) => top_cmd(&a, cli.json, out),
        Cmd::Place(a) => place_cmd(&a, cli.json, out),
        Cmd::Slurm(c) => slurm_cmd(&c, out),
        Cmd::Cdi(c) => cdi::exec(&c, cli.json, out),
        Cmd::Trace(TraceCmd::Record(a)) => trace_record(&a),
        Cmd::Trace(TraceCmd::Summary { file }) => trace_summary(&file, cli.json, out),
        Cmd::Cgroup(c) => cgroup::exec(&c, cli.json, out),
        Cmd::Man { dir } => meta::man(dir.as_deref(), out),
    };
    // What a buffered writer still holds must reach its file too.
    if let Err(e) = out.flush() {
        eprintln!("drmtool: cannot write the output: {e}");
        if code == ExitCode::SUCCESS {
            return ExitCode::FAILURE;
        }
    }
    code
}

/// The pause of `--watch SECS` or `--seconds N`: a finite number of seconds >= 0 that a
/// [`Duration`] can hold (1e300 cannot), else `None`.
fn seconds(s: f64) -> Option<Duration> {
    Duration::try_from_secs_f64(s).ok()
}

/// The clap definition (for completions, the man page and tests).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}
