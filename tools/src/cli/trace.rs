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
        serde_json::to_writer(&mut w, &doc)?;
        w.flush()
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
