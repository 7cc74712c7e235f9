//! `drmtool trace`: GPU fence, vblank and scheduler timelines and GPU memory over time, for
//! any DRM driver, recorded from the kernel's tracepoints and written as they come as a
//! Chrome/Perfetto JSON trace or a Perfetto protobuf trace; and the latency summary of a
//! JSON trace.
//!
//! The tracepoints are read the way trace-cmd reads them, from ftrace's per-CPU ring
//! buffers in a tracefs instance of drmtool's own ([`ftrace`], [`ring`]), or through
//! perf_event_open where the kernel cannot give an instance ([`perf`]); the raw pages go
//! through a spill file to a decoder thread that writes the trace out ([`stream`]), so
//! memory stays flat however long the recording.
//!
//! ```no_run
//! use drmtool::trace::{self, Category};
//! let mut opts = trace::record::Options::new(vec![Category::Fence, Category::Vblank]);
//! opts.duration = Some(std::time::Duration::from_secs(1));
//! let out = std::io::BufWriter::new(std::fs::File::create("t.json").expect("a file"));
//! let mut trace = trace::chrome::TraceBuilder::new(
//!     trace::chrome::JsonStream::new(out).expect("written"),
//!     &Default::default(),
//! );
//! let rec = trace::record::record_into(&opts, &mut trace)?;
//! trace.finish(&rec, "6.12", &[]).expect("written");
//! # Ok::<(), trace::TraceError>(())
//! ```

pub mod alloc;
pub mod chrome;
pub mod format;
pub mod ftrace;
pub mod perf;
pub mod perfetto;
pub mod privilege;
pub mod record;
pub mod ring;
pub mod stream;
pub mod summary;

use rustix::io::Errno;

/// A group of tracepoints (`--events`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum Category {
    /// `dma_fence:*` (init, emit, signaled, enable_signal, wait_start, wait_end, destroy).
    Fence,
    /// `gpu_scheduler:*`, where a driver with the DRM scheduler is loaded (the names changed
    /// across kernels: every event of the system is taken).
    Sched,
    /// `drm:drm_vblank_event`, `_queued`, `_delivered`.
    Vblank,
    /// `gpu_mem:gpu_mem_total`, where the kernel has it.
    Gpumem,
    /// Every `drm:*` event.
    Drm,
    /// GPU memory allocation failures: DRM ioctls that return ENOMEM or ENOSPC
    /// (`syscalls:sys_enter_ioctl` and `sys_exit_ioctl`, where the kernel has syscall
    /// tracepoints; see [`alloc`]).
    Alloc,
    /// Drivers' buffer eviction and move tracepoints, where loaded: `amdgpu:amdgpu_bo_move`,
    /// `xe:xe_bo_move`, `i915:i915_gem_evict*` (decoded by their own format files).
    Evict,
}

impl Category {
    /// Every category, the default of `--events`.
    pub const ALL: [Category; 7] = [
        Category::Fence,
        Category::Sched,
        Category::Vblank,
        Category::Gpumem,
        Category::Drm,
        Category::Alloc,
        Category::Evict,
    ];

    /// Its `--events` name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Fence => "fence",
            Self::Sched => "sched",
            Self::Vblank => "vblank",
            Self::Gpumem => "gpumem",
            Self::Drm => "drm",
            Self::Alloc => "alloc",
            Self::Evict => "evict",
        }
    }
}

/// Why a recording could not be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceError {
    /// No tracefs with `events/` under any of [`record::TRACEFS`].
    NoTracefs,
    /// A tracefs file could not be read for lack of privilege.
    Permission {
        /// The file.
        what: String,
        /// The errno.
        errno: i32,
    },
    /// None of the categories has a tracepoint on this kernel.
    NoTracepoints {
        /// What was asked.
        asked: Vec<Category>,
        /// The GPU-related event systems this kernel has.
        present: Vec<String>,
    },
    /// Categories asked for by name that this kernel lacks.
    Absent {
        /// The missing ones.
        missing: Vec<Category>,
        /// The GPU-related event systems this kernel has.
        present: Vec<String>,
    },
    /// `/sys/devices/system/cpu/online` named no CPU.
    NoCpus,
    /// The GPU-memory sampling thread could not be started.
    Sampler {
        /// Why (the OS's words).
        error: String,
    },
    /// `perf_event_open` refused a tracepoint.
    Open {
        /// `system:event`.
        event: String,
        /// The CPU.
        cpu: u32,
        /// The errno.
        errno: Errno,
    },
    /// A perf ioctl failed.
    Ioctl {
        /// The C macro name.
        ioctl: &'static str,
        /// The errno.
        errno: Errno,
    },
    /// A CPU's ring could not be mapped.
    Ring {
        /// The CPU.
        cpu: u32,
        /// drm-gem's error.
        error: String,
    },
    /// A tracefs file of drmtool's instance refused a read or write.
    Tracefs {
        /// The file, under the tracefs mount.
        what: String,
        /// The errno.
        errno: Errno,
    },
    /// `--backend ftrace` was asked for, and this kernel cannot give drmtool an instance.
    NoInstance {
        /// Why.
        why: String,
    },
    /// This process lacks what recording needs ([`privilege`]): what each way lacks.
    Privilege {
        /// Why a tracefs instance cannot be used (`None`: not tried).
        ftrace: Option<String>,
        /// Why perf cannot be used (`None`: not tried).
        perf: Option<String>,
    },
    /// The spill file (see [`stream`]) could not be made or written.
    Spill {
        /// Its directory.
        dir: String,
        /// Why (the OS's words).
        error: String,
    },
    /// The command could not be started.
    Command {
        /// argv\[0\].
        program: String,
        /// Why.
        error: String,
    },
}

fn names(c: &[Category]) -> String {
    c.iter().map(|c| c.name()).collect::<Vec<_>>().join(",")
}

impl std::fmt::Display for TraceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoTracefs => write!(
                f,
                "no tracefs at {} (hint: mount -t tracefs nodev /sys/kernel/tracing; a kernel \
                 without CONFIG_EVENT_TRACING has none)",
                record::TRACEFS.join(" or ")
            ),
            Self::Permission { what, errno } => write!(
                f,
                "{what}: {} (hint: run as root; tracefs is root-only)",
                Errno::from_raw_os_error(*errno)
            ),
            Self::NoTracepoints { asked, present } => write!(
                f,
                "this kernel has no tracepoint of {} (GPU event systems here: {})",
                names(asked),
                if present.is_empty() {
                    "none".into()
                } else {
                    present.join(", ")
                }
            ),
            Self::Absent { missing, present } => write!(
                f,
                "this kernel has no {} tracepoints (GPU event systems here: {}; hint: leave \
                 --events out to take what there is)",
                names(missing),
                if present.is_empty() {
                    "none".into()
                } else {
                    present.join(", ")
                }
            ),
            Self::NoCpus => f.write_str("no online CPU in /sys/devices/system/cpu/online"),
            Self::Sampler { error } => {
                write!(f, "cannot start the GPU-memory sampling thread: {error}")
            }
            Self::Open { event, cpu, errno } => {
                write!(f, "perf_event_open({event}, cpu {cpu}): {errno}")?;
                if matches!(*errno, Errno::ACCESS | Errno::PERM) {
                    f.write_str(
                        " (hint: run as root, or give CAP_PERFMON, or lower \
                         /proc/sys/kernel/perf_event_paranoid to -1)",
                    )?;
                }
                Ok(())
            }
            Self::Ioctl { ioctl, errno } => write!(f, "{ioctl}: {errno}"),
            Self::Ring { cpu, error } => write!(
                f,
                "mapping the perf ring of cpu {cpu}: {error} (hint: a smaller --buffer-kib, or \
                 raise /proc/sys/kernel/perf_event_mlock_kb)"
            ),
            Self::Tracefs { what, errno } => write!(f, "tracefs: {what}: {errno}"),
            Self::Privilege { ftrace, perf } => {
                f.write_str("cannot record")?;
                if let Some(w) = ftrace {
                    write!(f, " through ftrace: {w}")?;
                }
                if let Some(w) = perf {
                    let sep = if ftrace.is_some() { "; nor" } else { "" };
                    write!(f, "{sep} through perf: {w}")?;
                }
                Ok(())
            }
            Self::NoInstance { why } => write!(
                f,
                "this kernel cannot give drmtool a tracefs instance of its own: {why} \
                 (hint: --backend perf)"
            ),
            Self::Spill { dir, error } => write!(
                f,
                "cannot keep the raw recording in {dir}: {error} (hint: write the trace where \
                 there is room; the raw rings go beside it until they are decoded)"
            ),
            Self::Command { program, error } => write!(f, "cannot run {program}: {error}"),
        }
    }
}

impl std::error::Error for TraceError {}
