//! `drmtool buffers`: one scan, or a frame every `--watch SECS`.

use super::*;

/// Options of `drmtool buffers`.
#[derive(clap::Args, Debug, Clone)]
pub(super) struct BuffersArgs {
    /// Only these processes (repeatable).
    #[arg(long = "pid")]
    pids: Vec<u32>,
    /// Only this GPU: a GPU spec as for `info` (index, bus id, driver, node, `226:N`).
    #[arg(long, value_name = "GPU")]
    device: Option<GpuSpec>,
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
pub(super) enum SkipSource {
    /// `/proc/<pid>/maps` of every process.
    Maps,
    /// The devices' debugfs files.
    Debugfs,
    /// kcmp(KCMP_FILE) de-duplication.
    Kcmp,
}

pub(super) fn skip_of(skip: &[SkipSource]) -> scan::Skip {
    scan::Skip {
        maps: skip.contains(&SkipSource::Maps),
        debugfs: skip.contains(&SkipSource::Debugfs),
        kcmp: skip.contains(&SkipSource::Kcmp),
    }
}

pub(super) fn one_scan(a: &BuffersArgs) -> Result<scan::Report, ExitCode> {
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
            "drmtool: no process {} (hint: `ls /proc` lists the running ones)",
            a.pids
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
        return Err(Exit::NoMatch.into());
    }
    if let Some(d) = &a.device {
        let kept = crate::gpu::gpus().and_then(|gpus| {
            let chosen = crate::gpu::select_drm(d, &gpus)?;
            if r.keep_gpus(&chosen) {
                Ok(())
            } else {
                Err(crate::gpu::SelectError::NoMatch {
                    spec: d.clone(),
                    have: crate::gpu::summary(&gpus),
                })
            }
        });
        if let Err(e) = kept {
            eprintln!("drmtool: {e}");
            return Err(Exit::of_select(&e).into());
        }
    }
    Ok(r)
}

pub(super) fn buffers(a: &BuffersArgs, json: bool, out: &mut dyn Write) -> ExitCode {
    let tty = std::io::stdout().is_terminal();
    let color = color_wanted(&a.color, tty);
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
            return ExitCode::from(Exit::Usage);
        }
    };
    if a.count == Some(0) {
        eprintln!("drmtool: --count needs a number of refreshes >= 1 (hint: --count 1)");
        return ExitCode::from(Exit::Usage);
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
