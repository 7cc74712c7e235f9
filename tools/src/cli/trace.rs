//! `drmtool trace record` and `trace summary`.

use super::*;

/// `drmtool trace ...`.
#[derive(Subcommand, Debug)]
pub(super) enum TraceCmd {
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
pub(super) struct TraceRecordArgs {
    /// Tracepoint groups (default: every group this kernel has; a group named here that
    /// the kernel lacks is an error).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "GROUP,...")]
    events: Vec<crate::trace::Category>,
    /// Seconds to record (with a command: it is killed when they run out).
    #[arg(long, value_name = "SECS")]
    duration: Option<f64>,
    /// Where to write the trace: `.json` (Chrome JSON, which `trace summary` reads) or
    /// `.pftrace` (Perfetto's protobuf, for traces too big for JSON).
    #[arg(
        short = 'o',
        long,
        default_value = "drmtool-trace.json",
        value_name = "FILE"
    )]
    output: std::path::PathBuf,
    /// Ring buffer per CPU, KiB; a bigger one loses fewer events in bursts. Lost events are
    /// counted and reported.
    #[arg(long, default_value_t = crate::trace::record::DEFAULT_BUFFER_KIB, value_name = "KIB")]
    buffer_kib: usize,
    /// Seconds between samples of per-process GPU memory (0: none).
    #[arg(long, default_value_t = 0.1, value_name = "SECS")]
    memory_interval: f64,
    /// How to read the tracepoints: ftrace's rings through a tracefs instance of drmtool's
    /// own (as trace-cmd), perf_event_open, or ftrace where the kernel allows it (auto).
    #[arg(long, value_enum, default_value = "auto")]
    backend: crate::trace::record::Backend,
    /// The command to trace.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<std::ffi::OsString>,
}

/// `drmtool trace record`.
pub(super) fn trace_record(a: &TraceRecordArgs) -> ExitCode {
    use crate::trace::{Category, chrome, record};
    let usage = |m: &str| {
        eprintln!("drmtool: trace record: {m}");
        ExitCode::from(Exit::Usage)
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
    let proto = match a.output.extension().and_then(|e| e.to_str()) {
        Some("json") => false,
        Some("pftrace" | "perfetto-trace") => true,
        _ => return usage("the output must end in .json or .pftrace"),
    };
    if a.buffer_kib == 0 || a.buffer_kib > 1 << 20 {
        return usage("--buffer-kib needs 1 to 1048576");
    }
    let explicit = !a.events.is_empty();
    let mut categories = if explicit {
        a.events.clone()
    } else {
        Category::ALL.to_vec()
    };
    categories.sort();
    categories.dedup();
    let mut opts = record::Options::new(categories);
    opts.explicit = explicit;
    opts.duration = duration;
    opts.command = a.command.clone();
    opts.buffer_kib = a.buffer_kib;
    opts.memory_interval = (!memory_every.is_zero()).then_some(memory_every);
    opts.backend = a.backend;
    opts.spill_dir = Some(match a.output.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    });
    // Without a command, ^C, kill and a closed terminal end the recording as the duration
    // would: the trace is still written and drmtool's tracefs instance removed.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    if a.command.is_empty() {
        for sig in [
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGHUP,
        ] {
            let _ = signal_hook::flag::register(sig, std::sync::Arc::clone(&stop));
        }
        opts.stop = Some(stop);
    }
    let kernel = rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned();
    let argv: Vec<String> = a
        .command
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    let mut failed = None;
    let mut done = None;
    let written = crate::outfile::replace(&a.output, |f| {
        let w = std::io::BufWriter::with_capacity(256 << 10, f);
        let r = if proto {
            stream_to(chrome::ProtoStream::new(w)?, &opts, &kernel, &argv)
        } else {
            stream_to(chrome::JsonStream::new(w)?, &opts, &kernel, &argv)
        };
        match r {
            Ok(Ok(rec)) => {
                done = Some(rec);
                Ok(())
            }
            Ok(Err(e)) => {
                failed = Some(e);
                Err(std::io::Error::other("no recording"))
            }
            Err(e) => Err(e),
        }
    });
    if let Some(e) = failed {
        eprintln!("drmtool: trace record: {e}");
        return ExitCode::FAILURE;
    }
    if let Err(e) = written {
        eprintln!("drmtool: trace record: {e}");
        return ExitCode::FAILURE;
    }
    let Some((rec, kept)) = done else {
        return ExitCode::FAILURE;
    };
    report(&rec, kept, &a.output);
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

/// Records into `out`, then closes the trace; the recording (an error of its own) inside
/// the output's I/O result.
fn stream_to<O: crate::trace::chrome::Out + Send>(
    out: O,
    opts: &crate::trace::record::Options,
    kernel: &str,
    argv: &[String],
) -> std::io::Result<Result<(crate::trace::record::Recording, u64), crate::trace::TraceError>> {
    let mut b = crate::trace::chrome::TraceBuilder::new(out, &Default::default());
    let rec = match crate::trace::record::record_into(opts, &mut b) {
        Ok(r) => r,
        Err(e) => return Ok(Err(e)),
    };
    let kept: u64 = b.counts().values().sum();
    b.finish(&rec, kernel, argv)?;
    Ok(Ok((rec, kept)))
}

/// The lines `trace record` prints on stderr after a recording.
fn report(rec: &crate::trace::record::Recording, kept: u64, output: &std::path::Path) {
    let secs = rec.end.saturating_sub(rec.start) as f64 / 1e9;
    eprintln!(
        "drmtool: trace: {kept} events on {} CPUs in {secs:.2} s ({}, {} KiB per CPU), {} memory \
         samples -> {}",
        rec.cpus,
        rec.backend.name(),
        rec.buffer_kib,
        rec.memory_samples,
        output.display()
    );
    if !rec.backend_note.is_empty() {
        eprintln!("drmtool: trace: perf used: {}", rec.backend_note);
    }
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
}

/// `drmtool trace summary FILE`.
pub(super) fn trace_summary(file: &std::path::Path, json: bool, out: &mut dyn Write) -> ExitCode {
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
