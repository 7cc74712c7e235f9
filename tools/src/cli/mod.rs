//! The command line: `devices`, `info`, `caps`, `buffers`, `kms`, `hmm`, `pmem`, `run`,
//! `cgroup devices`, `completions`, `man`.
//!
//! # Exit codes
//! - 0: success (also when some processes could not be read: they are listed).
//! - 1: the command could not do its job (`/proc` unreadable, an ioctl failed, the output
//!   could not be written).
//! - 2: bad usage (unknown option, bad value).
//! - 3: `--pid`, `DEVICE`/`--device`, a connector, mode or CRTC matched nothing.
//! - 4: this machine has no DRM devices at all (`devices`, `info`, `caps`, `kms`), or no
//!   persistent memory (`pmem list`); with `--json`, `devices` and `pmem list` print the
//!   document too, with its `reason`.
//!
//! `buffers --watch SECS --count N` refuses `--count 0` (exit 2) rather than print nothing:
//! a count of no frames is a mistake, not a request. Every write is checked, the final flush
//! included: output that could not be written (a full disk, `>/dev/full`) exits 1.
//!
//! `hmm probe` exits 0 whatever the kernel has: a missing test_hmm or udmabuf is a finding,
//! reported as `no` with the reason.

mod cgroup;
mod run;

use crate::render::{By, SortKey};
use crate::scan::{self, Options, SCHEMA_VERSION};
use clap::{Parser, Subcommand};
use serde::Serialize;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Exit status when `--pid` or `--device` matched nothing.
pub const EXIT_NO_MATCH: u8 = 3;
/// Exit status when the machine has no DRM devices at all (or, for `pmem list`, no
/// persistent memory).
pub const EXIT_NO_DEVICES: u8 = 4;
/// Exit status when `pick` or `run --pick` found too few eligible or unleased GPUs.
pub const EXIT_NO_GPU: u8 = 5;

#[derive(Parser, Debug)]
#[command(
    name = "drmtool",
    version,
    about = "Inspect DRM devices, capabilities, KMS state and who holds which GPU memory",
    after_help = "Examples:\n  drmtool devices\n  drmtool devices --json\n  \
                  drmtool info vkms\n  drmtool caps --json\n  \
                  drmtool buffers\n  drmtool buffers --by client --json\n  \
                  drmtool buffers --watch 1\n  drmtool buffers --skip maps,kcmp --watch 1\n  \
                  drmtool kms list card0\n  \
                  drmtool kms modeset Virtual-1 1024x768 --seconds 5\n  \
                  drmtool kms screenshot 38 -o crtc.png\n  \
                  drmtool hmm probe\n  drmtool pmem list --json\n  \
                  drmtool run --gpu 0 -- glxinfo -B\n  drmtool run --pick 1 --wait 60 -- ./job.sh\n  \
                  drmtool pick -n 2 --format env\n  drmtool leases\n  \
                  drmtool export --per cgroup\n  \
                  drmtool trace record --duration 5 -o gpu.json\n  \
                  drmtool completions bash > /etc/bash_completion.d/drmtool\n  \
                  drmtool man > drmtool.1\n\n\
                  Exit codes: 0 ok, 1 the command failed (an ioctl, /proc, the output), \
                  2 bad usage, 3 a device/pid/connector/mode/CRTC matched nothing, \
                  4 no DRM devices on this machine (pmem list: no persistent memory), \
                  5 too few free GPUs (pick, run --pick); run: the command's status \
                  (125: the isolation could not be set up).\n\n\
                  On a machine without /dev/dri, run it in a guest with real drivers:\n  \
                  scripts/drmtool devices"
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
        /// A node path (/dev/dri/card0), node name (card0), driver (vkms) or minor.
        device: Option<String>,
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
        /// A node path, node name, driver or minor (default: every primary node).
        device: Option<String>,
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
    /// Print the man page (roff) generated from this command line.
    #[command(after_help = "Example:\n  drmtool man > drmtool.1 && man ./drmtool.1")]
    Man,
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
    /// Prints the choice (bus ids or platform device names, the vendor variables, or the
    /// whole ranking as JSON). It leases nothing: `drmtool run --pick N` does. Exit 5 when
    /// fewer than N GPUs are eligible.
    #[command(
        after_help = "Examples:\n  drmtool pick\n  drmtool pick -n 2 --max-clients 0 --format env\n  \
                      drmtool pick --driver virtio_gpu --format json"
    )]
    Pick(PickArgs),
    /// Who holds which GPU lease (`drmtool run`): device, mode, pid, user, since, cgroup
    /// and command (holders from the kernel's /proc/locks; user, cgroup and command from
    /// the supervisor's root-owned record while it lives).
    #[command(after_help = "Examples:\n  drmtool leases\n  drmtool leases --json")]
    Leases,
    /// cgroup v2 device rules.
    #[command(subcommand)]
    Cgroup(cgroup::CgroupCmd),
    /// Slurm: gres.conf lines for the DRM GPUs, a TaskProlog's vendor variables.
    #[command(subcommand)]
    Slurm(SlurmCmd),
    /// GPU timelines: record fence, vblank and scheduler tracepoints (perf) and GPU memory
    /// as a Perfetto/Chrome JSON trace; summarise one.
    #[command(subcommand)]
    Trace(TraceCmd),
}

/// `drmtool trace ...`.
#[derive(Subcommand, Debug)]
enum TraceCmd {
    /// Record the tracepoints on every CPU for --duration seconds or while a command runs,
    /// with per-process GPU memory sampled from fdinfo and maps.
    ///
    /// Writes a JSON trace (ui.perfetto.dev and chrome://tracing load it): a track per
    /// fence timeline (unbound ones kept), wait slices on the waiting threads, vblanks per
    /// CRTC, scheduler events per ring, GPU memory counters, and every tracepoint hit as
    /// an instant with its fields. Needs root (tracefs, perf_event_open system-wide).
    /// Exit status: the command's when one ran, else 0; 1 when nothing could be recorded
    /// or written; 2 bad usage.
    #[command(
        after_help = "Examples:\n  drmtool trace record --duration 5 -o frame.json\n  \
                      drmtool trace record --events fence -o job.json -- ./job.sh\n  \
                      drmtool trace summary frame.json"
    )]
    Record(TraceRecordArgs),
    /// Latency figures of a trace: fence emit -> signal per timeline (p50/p99/max),
    /// vblank interval and jitter per CRTC, fence wait time per process.
    #[command(after_help = "Examples:\n  drmtool trace summary frame.json\n  \
                      drmtool trace summary --json frame.json")]
    Summary {
        /// The trace (JSON, as `trace record` writes it).
        file: std::path::PathBuf,
    },
}

/// `drmtool trace record` arguments.
#[derive(clap::Args, Debug)]
struct TraceRecordArgs {
    /// Tracepoint groups (default: every group this kernel has; a group named here that
    /// the kernel lacks is an error).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "GROUP,...")]
    events: Vec<crate::trace::Category>,
    /// Seconds to record (with a command: it is killed when they run out).
    #[arg(long, value_name = "SECS")]
    duration: Option<f64>,
    /// Where to write the trace (`.json`).
    #[arg(
        short = 'o',
        long,
        default_value = "drmtool-trace.json",
        value_name = "FILE"
    )]
    output: std::path::PathBuf,
    /// Ring buffer per CPU, KiB (rounded up to a power of two pages); a bigger one loses
    /// fewer events in bursts. Lost events are counted and reported.
    #[arg(long, default_value_t = 512, value_name = "KIB")]
    buffer_kib: usize,
    /// Seconds between samples of per-process GPU memory (0: none).
    #[arg(long, default_value_t = 0.1, value_name = "SECS")]
    memory_interval: f64,
    /// The command to trace.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<std::ffi::OsString>,
}

/// `drmtool slurm ...`.
#[derive(Subcommand, Debug)]
enum SlurmCmd {
    /// gres.conf lines, one per GPU in the ordering (the n-th is GPU index n): Name=gpu,
    /// Type=<driver>, File=<render node, else card node>, Cores=<local cores> where the GPU
    /// has NUMA affinity.
    #[command(after_help = "Examples:\n  drmtool slurm gres-conf >> /etc/slurm/gres.conf")]
    GresConf,
    /// For a TaskProlog: `export KEY=VALUE` lines of the vendor variables (and
    /// DRMTOOL_GPUS) for the GPUs Slurm gave the step (SLURM_STEP_GPUS, else
    /// SLURM_JOB_GPUS: indices in gres-conf order); nothing without them.
    #[command(after_help = "Examples:\n  TaskProlog=/usr/local/sbin/drm-task-env  \
                            (a script: exec drmtool slurm task-env)")]
    TaskEnv,
}

/// `drmtool pick` arguments.
#[derive(clap::Args, Debug)]
struct PickArgs {
    /// How many GPUs.
    #[arg(short = 'n', default_value_t = 1)]
    n: usize,
    /// Only GPUs with at least BYTES free (a GPU whose free memory no source gives is
    /// excluded, and said so).
    #[arg(long, value_name = "BYTES")]
    min_free: Option<u64>,
    /// Only GPUs with at most K clients (open DRM files).
    #[arg(long, value_name = "K")]
    max_clients: Option<usize>,
    /// Only GPUs of this driver.
    #[arg(long)]
    driver: Option<String>,
    /// Only among these GPUs (selectors as for run --gpu).
    #[arg(long = "gpu", value_delimiter = ',')]
    gpus: Vec<String>,
    /// bdf: one bus id (or platform device name) per line; env: the vendor variables;
    /// json: the ranking with every figure and its source.
    #[arg(long, default_value = "bdf", value_parser = ["bdf", "env", "json"])]
    format: String,
}

/// `drmtool export` arguments.
#[derive(clap::Args, Debug)]
struct ExportArgs {
    /// Address and port to serve /metrics on.
    #[arg(long, default_value = "127.0.0.1:9717", value_name = "ADDR:PORT")]
    listen: String,
    /// TLS and basic auth, in the web configuration file format of the Prometheus
    /// exporters (exporter-toolkit): tls_server_config (cert_file, key_file,
    /// client_auth_type, client_ca_file, min_version) and basic_auth_users (bcrypt
    /// hashes). Any other key is refused.
    #[arg(
        long = "web.config.file",
        value_name = "FILE",
        conflicts_with = "textfile"
    )]
    web_config_file: Option<std::path::PathBuf>,
    /// What one series stands for: device totals, cgroups (with unit, container, pod and
    /// Slurm job labels) or single open files (with pid; many series).
    #[arg(long, value_enum, default_value = "cgroup")]
    per: crate::export::Per,
    /// With --per client: also the comm and drm-client-name labels (text any user
    /// chooses; escaped).
    #[arg(long)]
    client_names: bool,
    /// Scrapes closer together than SECS get the last scan's result.
    #[arg(long, default_value_t = 1.0, value_name = "SECS")]
    min_interval: f64,
    /// Write the metrics (text format 0.0.4) to PATH, replaced whole each time, every
    /// --interval seconds, instead of serving them.
    #[arg(long, value_name = "PATH", conflicts_with = "listen")]
    textfile: Option<std::path::PathBuf>,
    /// With --textfile: seconds between writes.
    #[arg(
        long,
        default_value_t = 15.0,
        value_name = "SECS",
        requires = "textfile"
    )]
    interval: f64,
    /// With --textfile: stop after N writes, N >= 1 (default: until interrupted).
    #[arg(long, value_name = "N", requires = "textfile")]
    count: Option<u64>,
    /// Leave out a source (as `drmtool buffers --skip`): maps, debugfs, kcmp.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "SOURCE")]
    skip: Vec<SkipSource>,
}

/// `drmtool kms ...`.
#[derive(Subcommand, Debug)]
enum KmsCmd {
    /// Connectors with modes and EDID, encoders, CRTCs, planes with formats, every property.
    #[command(after_help = "Examples:\n  drmtool kms list\n  drmtool kms list virtio-gpu --json")]
    List {
        /// A node path, node name, driver or minor (default: every primary node with KMS).
        device: Option<String>,
    },
    /// Show a test pattern on CONNECTOR (atomic where available, else legacy), hold it
    /// until Enter (or stdin closes) or --seconds pass, then restore what was shown.
    #[command(after_help = "Examples:\n  drmtool kms modeset Virtual-1\n  \
                            drmtool kms modeset Virtual-1 1024x768 --seconds 5 --device vkms")]
    Modeset {
        /// Connector name (Virtual-1, HDMI-A-2) or id.
        connector: String,
        /// Mode name or WxH (default: the preferred mode).
        mode: Option<String>,
        /// The device (default: the first primary node with KMS).
        #[arg(long)]
        device: Option<String>,
        /// Hold the pattern for N seconds instead of waiting for Enter.
        #[arg(long, value_name = "N")]
        seconds: Option<f64>,
    },
    /// Save what CRTC (its id) shows as a PNG: GETFB2 of its primary plane and a map of
    /// the framebuffer (needs root or DRM master); `--method writeback` captures through a
    /// writeback connector instead, every plane included (vkms; needs DRM master), detaching
    /// the CRTC's outputs for one frame where the driver cannot clone (vkms cannot).
    #[command(after_help = "Examples:\n  drmtool kms screenshot 38 -o out.png\n  \
                            drmtool kms screenshot 36 -o out.png --device bochs --method getfb")]
    Screenshot {
        /// CRTC id (`drmtool kms list` shows them).
        crtc: String,
        /// The PNG file to write.
        #[arg(short, long, value_name = "FILE.png")]
        output: std::path::PathBuf,
        /// The device (default: the first primary node with KMS).
        #[arg(long)]
        device: Option<String>,
        /// How to capture.
        #[arg(long, value_enum, default_value = "auto")]
        method: crate::kms::Method,
    },
}

/// `drmtool hmm ...`.
#[derive(Subcommand, Debug)]
enum HmmCmd {
    /// Which test_hmm requests this kernel answers (probed harmlessly on one page of this
    /// process's own memory), the request numbering and how it was decided, udmabuf with its
    /// limits, and which host registration backends work. Each "no" has its errno class.
    ///
    /// The last probe, HMM_DMIRROR_RELEASE, moves every page the mirror device holds back
    /// to system memory (contents unchanged), also those of other processes using it.
    #[command(
        after_help = "Examples:\n  drmtool hmm probe\n  drmtool hmm probe --json\n\n\
                            Exit codes: 0 (also when test_hmm or udmabuf is missing: that is \
                            reported), 1 the output could not be written."
    )]
    Probe,
}

/// `drmtool pmem ...`.
#[derive(Subcommand, Debug)]
enum PmemCmd {
    /// Regions and namespaces (/sys/bus/nd) with mode, size and alignment, every /dev/pmem*
    /// and /dev/dax* node, and the filesystems mounted from them with their DAX policy
    /// (/proc/self/mountinfo).
    #[command(
        after_help = "Examples:\n  drmtool pmem list\n  drmtool pmem list --json\n\n\
                            Exit codes: 0, 4 no persistent memory on this machine (the JSON \
                            is printed anyway, with its reason), 1 the output could not be \
                            written."
    )]
    List,
}

/// Options of `drmtool buffers`.
#[derive(clap::Args, Debug, Clone)]
struct BuffersArgs {
    /// Only these processes (repeatable).
    #[arg(long = "pid")]
    pids: Vec<u32>,
    /// Only this device: a node path (/dev/dri/card0), a node name (card0), a driver
    /// name (vkms) or a minor number.
    #[arg(long)]
    device: Option<String>,
    /// Group the main table by process, client (open DRM file) or buffer.
    #[arg(long, value_enum, default_value = "process")]
    by: By,
    /// Sort the main table.
    #[arg(long, value_enum, default_value = "size")]
    sort: SortKey,
    /// Refresh every SECS seconds in place; engine busy % needs two samples.
    #[arg(long, value_name = "SECS")]
    watch: Option<f64>,
    /// With --watch: stop after N refreshes, N >= 1 (default: until interrupted).
    #[arg(long, value_name = "N", requires = "watch")]
    count: Option<u64>,
    /// Colour: auto (on a TTY without NO_COLOR), always, never.
    #[arg(long, default_value = "auto", value_parser = ["auto", "always", "never"])]
    color: String,
    /// Leave out a source to make the scan cheaper (repeatable or comma separated):
    /// `maps` (mapped bytes become unknown), `debugfs` (framebuffers, flink names and the
    /// kernel's client list), `kcmp` (fds of drivers without drm-client-id each count as a
    /// client of their own). Everything a skipped source gives is shown as unknown.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "SOURCE")]
    skip: Vec<SkipSource>,
}

/// A source `drmtool buffers --skip` may leave out.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum SkipSource {
    /// `/proc/<pid>/maps` of every process.
    Maps,
    /// The devices' debugfs files.
    Debugfs,
    /// kcmp(KCMP_FILE) de-duplication.
    Kcmp,
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
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let code = match cli.cmd {
        Cmd::Devices => devices(cli.json, out),
        Cmd::Buffers(a) => buffers(&a, cli.json, out),
        Cmd::Info { device, probe } => info(device.as_deref(), probe, cli.json, out),
        Cmd::Caps { device } => caps(device.as_deref(), cli.json, out),
        Cmd::Kms(k) => kms(k, cli.json, out),
        Cmd::Hmm(HmmCmd::Probe) => {
            let r = crate::hmm_probe::probe();
            if cli.json {
                emit_json(&r, out)
            } else {
                emit_text(&crate::hmm_probe::render(&r), out)
            }
        }
        Cmd::Pmem(PmemCmd::List) => pmem_list(cli.json, out),
        Cmd::Completions { shell } => {
            // clap_complete panics when its writer fails: generate into memory first.
            let mut cmd = command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd, "drmtool", &mut script);
            match out.write_all(&script) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("drmtool: cannot write the output: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::Run(a) => run::exec(a, out),
        Cmd::Export(a) => export_cmd(&a),
        Cmd::Pick(a) => pick_cmd(&a, cli.json, out),
        Cmd::Leases => leases_cmd(cli.json, out),
        Cmd::Slurm(c) => slurm_cmd(&c, out),
        Cmd::Trace(TraceCmd::Record(a)) => trace_record(&a),
        Cmd::Trace(TraceCmd::Summary { file }) => trace_summary(&file, cli.json, out),
        Cmd::Cgroup(c) => cgroup::exec(&c, cli.json, out),
        Cmd::Man => match clap_mangen::Man::new(command()).render(out) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("drmtool: cannot write the man page: {e}");
                ExitCode::FAILURE
            }
        },
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
/// `drmtool trace record`.
fn trace_record(a: &TraceRecordArgs) -> ExitCode {
    use crate::trace::{Category, chrome, record};
    let usage = |m: &str| {
        eprintln!("drmtool: trace record: {m}");
        ExitCode::from(2)
    };
    let duration = match a.duration.map(seconds) {
        None => None,
        Some(Some(d)) if !d.is_zero() => Some(d),
        Some(_) => {
            return usage("--duration needs a positive number of seconds (hint: --duration 5)");
        }
    };
    if duration.is_none() && a.command.is_empty() {
        return usage("give --duration SECS or a command after -- (hint: --duration 5)");
    }
    let Some(memory_every) = seconds(a.memory_interval) else {
        return usage(
            "--memory-interval needs a number of seconds >= 0 (hint: --memory-interval 0.1)",
        );
    };
    match a.output.extension().and_then(|e| e.to_str()) {
        Some("json") => {}
        Some("pftrace") => {
            return usage(
                "Perfetto's protobuf output is not built yet; write .json, which \
                 ui.perfetto.dev loads too",
            );
        }
        _ => return usage("the output must end in .json"),
    }
    if a.buffer_kib == 0 || a.buffer_kib > 1 << 20 {
        return usage("--buffer-kib needs 1 to 1048576");
    }
    let page = rustix::param::page_size();
    let ring_pages = (a.buffer_kib * 1024).div_ceil(page).next_power_of_two();
    let explicit = !a.events.is_empty();
    let mut categories = if explicit {
        a.events.clone()
    } else {
        Category::ALL.to_vec()
    };
    categories.sort();
    categories.dedup();
    let opts = record::Options {
        categories,
        explicit,
        duration,
        command: a.command.clone(),
        ring_pages,
        memory_interval: (!memory_every.is_zero()).then_some(memory_every),
        stop: None,
    };
    let rec = match record::record(&opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("drmtool: trace record: {e}");
            return ExitCode::FAILURE;
        }
    };
    let kernel = rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned();
    let argv: Vec<String> = a
        .command
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    let doc = chrome::to_json(&rec, &kernel, &argv);
    let written = crate::outfile::replace(&a.output, |f| {
        let mut w = std::io::BufWriter::new(f);
        serde_json::to_writer(&mut w, &doc).map_err(|e| e.to_string())?;
        w.flush().map_err(|e| e.to_string())
    });
    if let Err(e) = written {
        eprintln!("drmtool: trace record: {e}");
        return ExitCode::FAILURE;
    }
    let secs = rec.end.saturating_sub(rec.start) as f64 / 1e9;
    eprintln!(
        "drmtool: trace: {} events on {} CPUs in {secs:.2} s, {} memory samples -> {}",
        rec.events.len(),
        rec.cpus,
        rec.memory.len(),
        a.output.display()
    );
    if !rec.absent.is_empty() {
        let names: Vec<&str> = rec.absent.iter().map(|c| c.name()).collect();
        eprintln!(
            "drmtool: trace: no tracepoints on this kernel for: {}",
            names.join(", ")
        );
    }
    if rec.lost > 0 || rec.corrupt_bytes > 0 {
        eprintln!(
            "drmtool: trace: warning: {} events lost (ring full), {} ring bytes unreadable \
             (hint: a bigger --buffer-kib)",
            rec.lost, rec.corrupt_bytes
        );
    }
    match rec.exit {
        Some(st) => match st.code() {
            Some(c) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
            None => ExitCode::from(128u8.saturating_add(
                std::os::unix::process::ExitStatusExt::signal(&st).unwrap_or(0) as u8,
            )),
        },
        None => ExitCode::SUCCESS,
    }
}

/// `drmtool trace summary FILE`.
fn trace_summary(file: &std::path::Path, json: bool, out: &mut dyn Write) -> ExitCode {
    use crate::trace::summary;
    // A trace is data from anywhere: bounded (1 GiB) and parsed strictly.
    let text = match crate::trace::record::read_bounded_bytes(file, 1 << 30) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("drmtool: trace summary: {}: {e}", file.display());
            return ExitCode::FAILURE;
        }
    };
    let doc: serde_json::Value = match serde_json::from_slice(&text) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("drmtool: trace summary: {}: not JSON: {e}", file.display());
            return ExitCode::FAILURE;
        }
    };
    match summary::summarize(&doc) {
        Ok(s) if json => emit_json(&s, out),
        Ok(s) => emit_text(&summary::render(&s), out),
        Err(e) => {
            eprintln!("drmtool: trace summary: {}: {}", file.display(), e.0);
            ExitCode::FAILURE
        }
    }
}

fn seconds(s: f64) -> Option<Duration> {
    Duration::try_from_secs_f64(s).ok()
}

/// The clap definition (for completions, the man page and tests).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// Writes `doc` as pretty JSON; exit 1 when that fails.
fn emit_json<T: Serialize>(doc: &T, out: &mut dyn Write) -> ExitCode {
    match serde_json::to_string_pretty(doc)
        .map_err(std::io::Error::other)
        .and_then(|s| writeln!(out, "{s}"))
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("drmtool: cannot write the output: {e}");
            ExitCode::FAILURE
        }
    }
}

fn emit_text(s: &str, out: &mut dyn Write) -> ExitCode {
    match write!(out, "{s}") {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("drmtool: cannot write the output: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Nodes for `spec`, or the exit status after a one-line error.
fn nodes_for(spec: Option<&str>) -> Result<Vec<drm_gem::NodeInfo>, ExitCode> {
    crate::select::select(spec).map_err(|e| {
        eprintln!("drmtool: {e}");
        if drm_gem::enumerate().is_err() {
            ExitCode::from(EXIT_NO_DEVICES)
        } else {
            ExitCode::from(EXIT_NO_MATCH)
        }
    })
}

fn info(spec: Option<&str>, probe: bool, json: bool, out: &mut dyn Write) -> ExitCode {
    let nodes = match nodes_for(spec) {
        Ok(n) => n,
        Err(c) => return c,
    };
    let devices: Vec<_> = nodes
        .iter()
        .map(|n| crate::info::device_info(n, probe))
        .collect();
    if json {
        let doc = crate::info::InfoReport {
            schema_version: crate::info::INFO_SCHEMA_VERSION,
            devices,
        };
        return emit_json(&doc, out);
    }
    let text: Vec<String> = devices.iter().map(crate::info::render).collect();
    emit_text(&text.join("\n"), out)
}

fn caps(spec: Option<&str>, json: bool, out: &mut dyn Write) -> ExitCode {
    let nodes = match nodes_for(spec) {
        Ok(n) => n,
        Err(c) => return c,
    };
    let r = crate::caps::probe_all(&nodes);
    if json {
        emit_json(&r, out)
    } else {
        emit_text(&crate::caps::render(&r), out)
    }
}

fn pmem_list(json: bool, out: &mut dyn Write) -> ExitCode {
    let r = crate::pmem::list();
    let empty = r.regions.is_empty() && r.devices.is_empty();
    let code = if json {
        emit_json(&r, out)
    } else if empty {
        ExitCode::SUCCESS
    } else {
        emit_text(&crate::pmem::render(&r), out)
    };
    if code != ExitCode::SUCCESS {
        return code;
    }
    if let Some(why) = &r.reason {
        eprintln!("drmtool: {why}");
    }
    if empty {
        ExitCode::from(EXIT_NO_DEVICES)
    } else {
        code
    }
}

/// `drmtool kms list --json`.
#[derive(Serialize)]
struct KmsListOut {
    schema_version: u32,
    devices: Vec<KmsListDevice>,
}

#[derive(Serialize)]
struct KmsListDevice {
    path: String,
    driver: Option<String>,
    kms: drm_gem::kms::Snapshot,
}

fn kms(k: KmsCmd, json: bool, out: &mut dyn Write) -> ExitCode {
    match k {
        KmsCmd::List { device } => {
            let nodes = match nodes_for(device.as_deref()) {
                Ok(n) => n,
                Err(c) => return c,
            };
            let mut devices = Vec::new();
            for n in nodes
                .iter()
                .filter(|n| n.kind == drm_gem::NodeKind::Primary)
            {
                let snap =
                    drm_gem::Device::open(&n.path).and_then(|d| drm_gem::kms::Snapshot::take(&d));
                match snap {
                    Ok(s) => devices.push(KmsListDevice {
                        path: n.path.display().to_string(),
                        driver: n.driver.clone(),
                        kms: s,
                    }),
                    // A named device without KMS is an error; in the full list it is left out.
                    Err(e) if device.is_some() => {
                        eprintln!(
                            "drmtool: {} has no KMS state: {e} (hint: vgem has no KMS; `drmtool devices` lists the others)",
                            n.path.display()
                        );
                        return ExitCode::FAILURE;
                    }
                    Err(_) => {}
                }
            }
            if json {
                return emit_json(
                    &KmsListOut {
                        schema_version: crate::info::INFO_SCHEMA_VERSION,
                        devices,
                    },
                    out,
                );
            }
            let text: Vec<String> = devices
                .iter()
                .map(|d| {
                    format!(
                        "{} ({})\n{}",
                        d.path,
                        d.driver.as_deref().unwrap_or("?"),
                        crate::info::render_kms(&d.kms, "  ")
                    )
                })
                .collect();
            emit_text(&text.join("\n"), out)
        }
        KmsCmd::Modeset {
            connector,
            mode,
            device,
            seconds,
        } => {
            let hold_for = match seconds.map(self::seconds) {
                None => None,
                Some(Some(d)) => Some(d),
                Some(None) => {
                    eprintln!(
                        "drmtool: --seconds needs a number of seconds >= 0 (hint: --seconds 5)"
                    );
                    return ExitCode::from(2);
                }
            };
            let (dev, path) = match open_kms(device.as_deref()) {
                Ok(d) => d,
                Err(c) => return c,
            };
            let mut write_error = None;
            let mut hold = |lit: &crate::kms::Lit| {
                let msg = format!(
                    "{path}: {} shows the test pattern in {} on CRTC {} ({})",
                    lit.connector, lit.mode, lit.crtc, lit.path
                );
                let line = if json {
                    serde_json::json!({
                        "schema_version": 1, "device": path, "connector": lit.connector,
                        "crtc": lit.crtc, "mode": lit.mode, "path": lit.path,
                    })
                    .to_string()
                } else {
                    msg
                };
                if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush()) {
                    // Still held and restored: the pattern was shown, only the line is lost.
                    write_error = Some(e);
                }
                match hold_for {
                    Some(d) => std::thread::sleep(d),
                    None => {
                        eprintln!("drmtool: press Enter to restore");
                        let mut line = String::new();
                        let _ = std::io::stdin().read_line(&mut line);
                    }
                }
            };
            let r = crate::kms::modeset(&dev, &connector, mode.as_deref(), &mut hold);
            match (r, write_error) {
                (Err(e), _) => kms_error(&e),
                (Ok(_), Some(e)) => {
                    eprintln!("drmtool: cannot write the output: {e}");
                    ExitCode::FAILURE
                }
                (Ok(_), None) => ExitCode::SUCCESS,
            }
        }
        KmsCmd::Screenshot {
            crtc,
            output,
            device,
            method,
        } => {
            let (dev, path) = match open_kms(device.as_deref()) {
                Ok(d) => d,
                Err(c) => return c,
            };
            let img = match crate::kms::screenshot(&dev, &crtc, method) {
                Ok(i) => i,
                Err(e) => return kms_error(&e),
            };
            if let Err(e) = crate::kms::write_png(&img, &output) {
                eprintln!("drmtool: {e}");
                return ExitCode::FAILURE;
            }
            let swapped = (img.writeback == Some(crate::kms::WritebackWay::Swap)).then(|| {
                format!(
                    "{} detached from CRTC {crtc} for one frame while the writeback connector \
                     captured it, then put back",
                    img.detached.join(", ")
                )
            });
            if json {
                if let Some(s) = &swapped {
                    eprintln!("drmtool: note: {s}");
                }
                let mut v = serde_json::json!({
                    "schema_version": 1, "device": path, "crtc": crtc,
                    "file": output.display().to_string(), "width": img.width,
                    "height": img.height, "method": img.method,
                });
                if let Some(way) = img.writeback {
                    v["writeback"] = way.name().into();
                }
                emit_json(&v, out)
            } else {
                let how = match img.writeback {
                    Some(way) => format!("{}, {}", img.method, way.name()),
                    None => img.method.to_string(),
                };
                emit_text(
                    &format!(
                        "{path}: CRTC {crtc} -> {} ({}x{}, {how}){}\n",
                        output.display(),
                        img.width,
                        img.height,
                        swapped.map(|s| format!("; {s}")).unwrap_or_default()
                    ),
                    out,
                )
            }
        }
    }
}

fn open_kms(spec: Option<&str>) -> Result<(drm_gem::Device, String), ExitCode> {
    if let Err(e) = drm_gem::enumerate() {
        eprintln!("drmtool: {}", crate::select::no_nodes_reason(&e));
        return Err(ExitCode::from(EXIT_NO_DEVICES));
    }
    crate::kms::open_kms(spec).map_err(|e| {
        eprintln!("drmtool: {e}");
        ExitCode::from(EXIT_NO_MATCH)
    })
}

/// Errors that name something which does not exist exit 3; the rest 1.
fn kms_error(e: &str) -> ExitCode {
    eprintln!("drmtool: {e}");
    if e.starts_with("no connector") || e.starts_with("no mode") || e.starts_with("no CRTC ") {
        ExitCode::from(EXIT_NO_MATCH)
    } else {
        ExitCode::FAILURE
    }
}

/// Keeps only what concerns device `spec`; false when no device matches.
fn filter_device(r: &mut scan::Report, spec: &str) -> bool {
    let wanted: Vec<usize> = r
        .devices
        .iter()
        .filter(|d| {
            d.driver.as_deref() == Some(spec)
                || d.nodes.iter().any(|n| {
                    n.path == spec
                        || n.path.strip_prefix("/dev/dri/") == Some(spec)
                        || n.minor.to_string() == spec
                })
        })
        .map(|d| d.index)
        .collect();
    if wanted.is_empty() {
        return false;
    }
    r.devices.retain(|d| wanted.contains(&d.index));
    let keep: Vec<usize> = r
        .clients
        .iter()
        .filter(|c| wanted.contains(&c.device))
        .map(|c| c.index)
        .collect();
    r.clients.retain(|c| keep.contains(&c.index));
    for p in &mut r.processes {
        p.drm_fds.retain(|f| keep.contains(&f.client));
        p.drm_mappings.retain(|m| wanted.contains(&m.device));
    }
    r.processes
        .retain(|p| !p.drm_fds.is_empty() || !p.drm_mappings.is_empty());
    true
}

fn pick_cmd(a: &PickArgs, json: bool, out: &mut dyn Write) -> ExitCode {
    use crate::isolate::{lease, ordering::Selector, pick, run};
    let fail = |e: run::RunError| {
        eprintln!("drmtool: pick: {e}");
        ExitCode::from(self::run::exit_code(&e))
    };
    let sels: Result<Vec<Selector>, String> = a.gpus.iter().map(|g| Selector::parse(g)).collect();
    let sels = match sels {
        Ok(s) => s,
        Err(e) => return fail(run::RunError::Usage(e)),
    };
    let (all, cand) = match run::candidates(&sels) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    if a.n == 0 {
        return fail(run::RunError::Usage(
            "-n needs a number of GPUs >= 1".into(),
        ));
    }
    let report = scan::scan(&Options::default()).ok();
    let held = run::held_by_index(&all, &cand, &lease::dir());
    let gs: Vec<&crate::isolate::ordering::Gpu> = cand.iter().map(|&i| &all[i]).collect();
    let want = pick::Want {
        driver: a.driver.clone(),
        max_clients: a.max_clients,
        min_free: a.min_free,
    };
    let ranked = pick::rank(&gs, report.as_ref(), &held, &pick::sysfs_free, &want);
    let chosen: Vec<&pick::Candidate> = ranked
        .iter()
        .filter(|c| c.excluded.is_none())
        .take(a.n)
        .collect();
    if json || a.format == "json" {
        #[derive(Serialize)]
        struct Doc<'a> {
            schema_version: u32,
            chosen: Vec<usize>,
            candidates: &'a [pick::Candidate],
        }
        let code = emit_json(
            &Doc {
                schema_version: SCHEMA_VERSION,
                chosen: chosen.iter().map(|c| c.index).collect(),
                candidates: &ranked,
            },
            out,
        );
        if chosen.len() < a.n {
            return ExitCode::from(EXIT_NO_GPU);
        }
        return code;
    }
    for c in &ranked {
        if c.memory.value.is_none() {
            eprintln!(
                "drmtool: pick: {}: memory held unknown ({})",
                c.name, c.memory.source
            );
        }
        if let Some(e) = &c.excluded {
            eprintln!("drmtool: pick: {}: excluded: {e}", c.name);
        }
    }
    if chosen.len() < a.n {
        eprintln!(
            "drmtool: pick: -n {}: only {} eligible GPU(s) of {}",
            a.n,
            chosen.len(),
            ranked.len()
        );
        return ExitCode::from(EXIT_NO_GPU);
    }
    let text = if a.format == "env" {
        let gpus: Vec<&crate::isolate::ordering::Gpu> =
            chosen.iter().map(|c| &all[c.index]).collect();
        crate::isolate::env::vendor_env(&gpus, &all)
            .iter()
            .map(|(k, v)| format!("{k}={v}\n"))
            .collect::<String>()
    } else {
        chosen.iter().map(|c| format!("{}\n", c.name)).collect()
    };
    emit_text(&text, out)
}

fn slurm_cmd(c: &SlurmCmd, out: &mut dyn Write) -> ExitCode {
    use crate::isolate::{run, slurm};
    let all = match run::all_gpus() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("drmtool: slurm: {e}");
            return ExitCode::from(self::run::exit_code(&e));
        }
    };
    match c {
        SlurmCmd::GresConf => emit_text(&slurm::gres_conf(&all, &slurm::topology()), out),
        SlurmCmd::TaskEnv => {
            let step = std::env::var("SLURM_STEP_GPUS").ok();
            let job = std::env::var("SLURM_JOB_GPUS").ok();
            let idx = match slurm::job_gpus(step.as_deref(), job.as_deref(), all.len()) {
                Ok(i) => i,
                Err(e) => {
                    eprintln!("drmtool: slurm task-env: {e}");
                    return ExitCode::from(2);
                }
            };
            if idx.is_empty() {
                return ExitCode::SUCCESS;
            }
            let chosen: Vec<&crate::isolate::ordering::Gpu> =
                idx.iter().map(|&i| &all[i]).collect();
            let mut text = format!(
                "export DRMTOOL_GPUS={}\n",
                idx.iter()
                    .map(|i| i.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            );
            for (k, v) in crate::isolate::env::vendor_env(&chosen, &all) {
                text.push_str(&format!("export {k}={v}\n"));
            }
            emit_text(&text, out)
        }
    }
}

fn leases_cmd(json: bool, out: &mut dyn Write) -> ExitCode {
    use crate::isolate::lease;
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    let hs = lease::with_cgroups(&lease::dir(), lease::holders(&lease::dir(), &locks));
    if json {
        #[derive(Serialize)]
        struct Doc<'a> {
            schema_version: u32,
            directory: String,
            leases: &'a [lease::Holder],
        }
        return emit_json(
            &Doc {
                schema_version: SCHEMA_VERSION,
                directory: lease::dir().display().to_string(),
                leases: &hs,
            },
            out,
        );
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut t = format!(
        "{:<16} {:<10} {:>4} {:>8} {:<10} {:<24} {:<28} COMMAND\n",
        "DEVICE", "MODE", "SLOT", "PID", "USER", "SINCE", "CGROUP"
    );
    for h in &hs {
        t.push_str(&format!(
            "{:<16} {:<10} {:>4} {:>8} {:<10} {:<24} {:<28} {}\n",
            h.device,
            h.mode,
            h.slot.map_or("-".into(), |s| s.to_string()),
            h.pid,
            h.user
                .as_deref()
                .map_or("-".into(), |u| crate::Untrusted::from(u).escaped()),
            h.since.map_or("-".into(), |s| crate::render::since(s, now)),
            h.cgroup.as_ref().map_or("-".into(), |c| c.escaped()),
            h.command.as_ref().map_or("-".into(), |c| c.escaped()),
        ));
    }
    if hs.is_empty() {
        t.push_str(&format!("(no leases held in {})\n", lease::dir().display()));
    }
    emit_text(&t, out)
}

fn skip_of(skip: &[SkipSource]) -> scan::Skip {
    scan::Skip {
        maps: skip.contains(&SkipSource::Maps),
        debugfs: skip.contains(&SkipSource::Debugfs),
        kcmp: skip.contains(&SkipSource::Kcmp),
    }
}

fn export_cmd(a: &ExportArgs) -> ExitCode {
    use crate::export::{Config, Exporter, Format};
    let usage = |m: &str| {
        eprintln!("drmtool: export: {m}");
        ExitCode::from(2)
    };
    let Some(min_interval) = seconds(a.min_interval) else {
        return usage("--min-interval needs a number of seconds >= 0 (hint: --min-interval 1)");
    };
    if a.count == Some(0) {
        return usage("--count needs a number of writes >= 1 (hint: --count 1)");
    }
    if a.client_names && a.per != crate::export::Per::Client {
        return usage("--client-names needs --per client");
    }
    let cfg = Config {
        scan: Options {
            skip: skip_of(&a.skip),
            ..Default::default()
        },
        per: a.per,
        client_names: a.client_names,
        min_interval,
    };
    let mut exporter = Exporter::new(cfg);
    if let Some(path) = &a.textfile {
        let pause = match seconds(a.interval) {
            Some(d) if !d.is_zero() => d,
            _ => {
                return usage(
                    "--interval needs a positive number of seconds (hint: --interval 15)",
                );
            }
        };
        let mut n = 0u64;
        loop {
            let body = exporter.scrape(Format::Text, Instant::now());
            if let Err(e) = crate::outfile::replace(path, |mut f| {
                f.write_all(body.as_bytes())
                    .and_then(|()| f.sync_all())
                    .map_err(|e| e.to_string())
            }) {
                eprintln!("drmtool: export: {e}");
                return ExitCode::FAILURE;
            }
            n += 1;
            if a.count.is_some_and(|c| n >= c) {
                return ExitCode::SUCCESS;
            }
            std::thread::sleep(pause);
        }
    }
    let mut access = crate::export::Access::default();
    if let Some(path) = &a.web_config_file {
        let loaded = crate::export::webconfig::WebConfig::load(path).and_then(|w| {
            let tls = w.tls.as_ref().map(|t| t.server_config()).transpose()?;
            Ok(crate::export::Access { tls, auth: w.auth })
        });
        match loaded {
            Ok(acc) => access = acc,
            Err(e) => {
                eprintln!("drmtool: export: --web.config.file {}: {e}", path.display());
                return ExitCode::from(2);
            }
        }
    }
    let listener = match std::net::TcpListener::bind(&a.listen) {
        Ok(l) => l,
        Err(e) => {
            eprintln!(
                "drmtool: export: cannot listen on {}: {e} (hint: --listen 127.0.0.1:9717)",
                a.listen
            );
            return ExitCode::FAILURE;
        }
    };
    let shown = listener
        .local_addr()
        .map_or_else(|_| a.listen.clone(), |l| l.to_string());
    let loopback = listener.local_addr().is_ok_and(|l| l.ip().is_loopback());
    if !loopback && !access.auth.is_enabled() {
        eprintln!(
            "drmtool: export: warning: {shown} is reachable from other hosts and asks no \
             password (hint: --web.config.file with basic_auth_users and tls_server_config)"
        );
    } else if access.auth.is_enabled() && access.tls.is_none() {
        eprintln!(
            "drmtool: export: warning: basic auth without tls_server_config: passwords \
             cross the network in clear text"
        );
    }
    let scheme = if access.tls.is_some() {
        "https"
    } else {
        "http"
    };
    eprintln!("drmtool: export: serving {scheme}://{shown}/metrics");
    let e = crate::export::serve_with(
        listener,
        std::sync::Arc::new(std::sync::Mutex::new(exporter)),
        std::sync::Arc::new(access),
    );
    eprintln!("drmtool: export: {e}");
    ExitCode::FAILURE
}

fn one_scan(a: &BuffersArgs) -> Result<scan::Report, ExitCode> {
    let opts = Options {
        pids: a.pids.clone(),
        skip: skip_of(&a.skip),
        ..Default::default()
    };
    let mut r = match scan::scan(&opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("drmtool: {e}");
            return Err(ExitCode::FAILURE);
        }
    };
    if !a.pids.is_empty() && r.scan.processes == 0 {
        eprintln!(
            "drmtool: no process {:?} (hint: `ls /proc` lists the running ones)",
            a.pids
        );
        return Err(ExitCode::from(EXIT_NO_MATCH));
    }
    if let Some(d) = &a.device
        && !filter_device(&mut r, d)
    {
        eprintln!(
            "drmtool: no DRM device matches {d:?} (hint: `drmtool devices` lists nodes and drivers)"
        );
        return Err(ExitCode::from(EXIT_NO_MATCH));
    }
    Ok(r)
}

fn buffers(a: &BuffersArgs, json: bool, out: &mut dyn Write) -> ExitCode {
    let tty = std::io::stdout().is_terminal();
    let color = match a.color.as_str() {
        "always" => true,
        "never" => false,
        _ => tty && std::env::var_os("NO_COLOR").is_none(),
    };
    let emit = |r: &scan::Report, out: &mut dyn Write| -> std::io::Result<()> {
        if json {
            let s = serde_json::to_string_pretty(r).map_err(std::io::Error::other)?;
            writeln!(out, "{s}")
        } else {
            write!(out, "{}", crate::render::tables(r, a.by, a.sort, color))
        }
    };
    let Some(secs) = a.watch else {
        let r = match one_scan(a) {
            Ok(r) => r,
            Err(c) => return c,
        };
        return match emit(&r, out) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("drmtool: cannot write the output: {e}");
                ExitCode::FAILURE
            }
        };
    };
    let pause = match seconds(secs) {
        Some(d) if !d.is_zero() => d,
        _ => {
            eprintln!("drmtool: --watch needs a positive number of seconds (hint: --watch 1)");
            return ExitCode::from(2);
        }
    };
    if a.count == Some(0) {
        eprintln!("drmtool: --count needs a number of refreshes >= 1 (hint: --count 1)");
        return ExitCode::from(2);
    }
    let mut prev: Option<(scan::Report, Instant)> = None;
    let mut n = 0u64;
    loop {
        let t = Instant::now();
        let mut r = match one_scan(a) {
            Ok(r) => r,
            Err(c) => return c,
        };
        if let Some((p, pt)) = &prev {
            let ns = u64::try_from(t.duration_since(*pt).as_nanos()).unwrap_or(u64::MAX);
            scan::rates(p, &mut r, ns);
        }
        // Refresh in place on a terminal; separate frames elsewhere.
        let head = if tty && !json { "\x1b[H\x1b[2J" } else { "" };
        let ok = write!(out, "{head}")
            .and_then(|()| emit(&r, out))
            .and_then(|()| if tty || json { Ok(()) } else { writeln!(out) })
            .and_then(|()| out.flush());
        if let Err(e) = ok {
            eprintln!("drmtool: cannot write the output: {e}");
            return ExitCode::FAILURE;
        }
        n += 1;
        if a.count.is_some_and(|c| n >= c) {
            return ExitCode::SUCCESS;
        }
        prev = Some((r, t));
        std::thread::sleep(pause);
    }
}

#[derive(Serialize)]
struct DeviceRow {
    /// The GPU's position in the one ordering (`drmtool run --gpu INDEX`).
    index: usize,
    /// PCI bus id of the GPU (its transport's for virtio-gpu).
    bus_id: Option<String>,
    /// The `/dev/dri/by-path` name of this node.
    by_path: Option<String>,
    /// NUMA node of the PCI function.
    numa_node: Option<u32>,
    /// CPUs local to it.
    local_cpulist: Option<String>,
    path: String,
    kind: &'static str,
    dev: String,
    driver: Option<String>,
    parent_driver: Option<String>,
    driver_version: Option<String>,
    bus: Option<String>,
    pci_id: Option<String>,
    sysfs: String,
    error: Option<String>,
}

#[derive(Serialize)]
struct DevicesOut {
    schema_version: u32,
    devices: Vec<DeviceRow>,
    /// Why the list is empty, when it is.
    reason: Option<String>,
}

fn devices(json: bool, out: &mut dyn Write) -> ExitCode {
    let (rows, reason) = match drm_gem::enumerate() {
        Ok(nodes) => {
            // In the ordering: GPUs by bus id then name, each card before its render node.
            let gpus =
                crate::isolate::ordering::group(nodes.clone(), std::path::Path::new("/dev/dri"));
            let mut rows = Vec::new();
            for g in &gpus {
                for n in &g.nodes {
                    if let Some(info) = nodes.iter().find(|i| i.path == n.path) {
                        rows.push(row(info.clone(), g, n.by_path.clone()));
                    }
                }
            }
            (rows, None)
        }
        Err(drm_gem::NoNodes::NoDevDri) => (
            Vec::new(),
            Some(
                "no DRM devices: this host has no /dev/dri (no DRM driver is loaded here); \
                 run drmtool inside a guest with real drivers: scripts/drmtool devices"
                    .to_string(),
            ),
        ),
        Err(drm_gem::NoNodes::Empty) => (
            Vec::new(),
            Some("no DRM devices: /dev/dri exists but holds no card or render nodes".into()),
        ),
    };
    if json {
        let none = reason.is_some();
        let doc = DevicesOut {
            schema_version: SCHEMA_VERSION,
            devices: rows,
            reason,
        };
        let code = emit_json(&doc, out);
        if code != ExitCode::SUCCESS {
            return code;
        }
        return if none {
            ExitCode::from(EXIT_NO_DEVICES)
        } else {
            code
        };
    }
    if let Some(r) = reason {
        eprintln!("drmtool: {r}");
        return ExitCode::from(EXIT_NO_DEVICES);
    }
    let header: [&str; 12] = [
        "GPU", "BUS ID", "NODE", "KIND", "DEV", "DRIVER", "VERSION", "BUS", "BOUND TO", "PCI",
        "NUMA", "SYSFS",
    ];
    let table: Vec<[String; 12]> = rows
        .iter()
        .map(|r| {
            let opt = |o: &Option<String>| o.clone().unwrap_or_else(|| "-".into());
            [
                r.index.to_string(),
                opt(&r.bus_id),
                r.path.clone(),
                r.kind.into(),
                r.dev.clone(),
                opt(&r.driver),
                r.error
                    .clone()
                    .map(|e| format!("error: {e}"))
                    .unwrap_or_else(|| opt(&r.driver_version)),
                opt(&r.bus),
                opt(&r.parent_driver),
                opt(&r.pci_id),
                r.numa_node.map_or("-".into(), |n| n.to_string()),
                r.sysfs.clone(),
            ]
        })
        .collect();
    let mut width = header.map(str::len);
    for r in &table {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let mut text = String::new();
    let mut line = |cells: Vec<&str>| {
        let s: Vec<String> = cells
            .iter()
            .zip(width)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        text.push_str(s.join("  ").trim_end());
        text.push('\n');
    };
    line(header.to_vec());
    for r in &table {
        line(r.iter().map(String::as_str).collect());
    }
    emit_text(&text, out)
}

/// A row of `devices`. The driver version is read from a render node (`DRM_IOCTL_VERSION`),
/// the GPU's render node standing in for its primary: a primary node is never opened here
/// (its first opener is DRM master while it holds the file, and another program's
/// SET_MASTER at that moment would fail), so a GPU without a render node (vkms, bochs, qxl)
/// shows no version; `drmtool info PATH` opens the node itself.
fn row(
    n: drm_gem::NodeInfo,
    g: &crate::isolate::ordering::Gpu,
    by_path: Option<String>,
) -> DeviceRow {
    let render = match n.kind {
        drm_gem::NodeKind::Render => Some(n.path.clone()),
        drm_gem::NodeKind::Primary => g.render().map(|m| m.path.clone()),
    };
    let (version, error) = match render.map(|p| drm_gem::Device::open(&p).and_then(|d| d.driver()))
    {
        Some(Ok(v)) => (
            Some(format!("{}.{}.{}", v.version.0, v.version.1, v.version.2)),
            None,
        ),
        Some(Err(e)) => (None, Some(e.to_string())),
        None => (None, None),
    };
    DeviceRow {
        index: g.index,
        bus_id: g.bus_id.clone(),
        by_path,
        numa_node: g.numa_node,
        local_cpulist: g.local_cpulist.clone(),
        path: n.path.display().to_string(),
        kind: n.kind.as_str(),
        dev: format!("{}:{}", n.dev.0, n.dev.1),
        driver: n.driver,
        parent_driver: n.parent_driver,
        driver_version: version,
        bus: n.bus,
        pci_id: n.pci_id.map(|(v, d)| format!("{v:04x}:{d:04x}")),
        sysfs: n.sysfs.display().to_string(),
        error,
    }
}
