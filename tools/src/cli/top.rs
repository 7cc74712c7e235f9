//! `drmtool top`: the live view of the GPUs and their clients ([`crate::top`] is the
//! model; [`super::top_ui`] draws it). Modes: the interactive view on a terminal; `--print`
//! (each refresh's screen as text); `--json` (each refresh's frame as one JSON line;
//! `--once`: one document); `--record FILE` beside any of them; `--replay FILE` instead of
//! the machine.

use super::top_ui::{self, ViewState};
use super::*;
use crate::top::view::{Column, GroupBy};
use crate::top::{Frame, Model, Sampler};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Options of `drmtool top`.
#[derive(clap::Args, Debug, Clone)]
pub(super) struct TopArgs {
    /// Only these GPUs (GPU specs as for run --gpu; comma separated or repeated).
    #[arg(long = "gpu", value_delimiter = ',')]
    gpus: Vec<GpuSpec>,
    /// Seconds between refreshes (at least 0.25).
    #[arg(long, short = 'd', default_value_t = 1.0, value_name = "SECS")]
    interval: f64,
    /// One frame and exit: two scans an interval apart (so that engine busy has a rate).
    /// With --json, one document (schema/top.schema.json); else the screen as text.
    #[arg(long)]
    once: bool,
    /// Each refresh's screen as text (the size of --size), not the interactive view; what
    /// a pipe or a file gets anyway.
    #[arg(long)]
    print: bool,
    /// Stop after N refreshes (N >= 1).
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    /// Append each refresh's frame to FILE as one JSON line (a session to attach to a
    /// report; `--replay FILE` shows it again).
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// Show the frames of a recorded session instead of the machine.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["record", "gpus", "once"])]
    replay: Option<PathBuf>,
    /// Group the clients by.
    #[arg(long, value_enum, default_value = "process")]
    group: GroupBy,
    /// Sort the clients by (largest first).
    #[arg(long, value_enum, default_value = "memory")]
    sort: Column,
    /// The screen size of --print and --once without --json: WIDTHxHEIGHT.
    #[arg(long, default_value = "120x40", value_parser = parse_size)]
    size: (u16, u16),
    /// Colour: auto (on a terminal without NO_COLOR), always, never.
    #[arg(long, default_value = "auto", value_parser = ["auto", "always", "never"])]
    color: String,
    /// Leave out a source to make each refresh cheaper (as for `buffers --skip`).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "SOURCE")]
    skip: Vec<SkipSource>,
}

/// A `--size` that is not WIDTHxHEIGHT from 40x10 to 1000x1000.
#[derive(Debug, thiserror::Error)]
#[error("{0:?}: WIDTHxHEIGHT from 40x10 to 1000x1000, as 80x24")]
pub(super) struct SizeError(String);

fn parse_size(s: &str) -> Result<(u16, u16), SizeError> {
    let bad = || SizeError(s.to_string());
    let (w, h) = s.split_once('x').ok_or_else(bad)?;
    let w: u16 = w.parse().map_err(|_| bad())?;
    let h: u16 = h.parse().map_err(|_| bad())?;
    if !(40..=1000).contains(&w) || !(10..=1000).contains(&h) {
        return Err(bad());
    }
    Ok((w, h))
}

/// Where frames come from.
enum Frames {
    Live { sampler: Box<Sampler>, model: Model },
    Replay { frames: Vec<Frame>, at: usize },
}

impl Frames {
    /// The next frame; `Ok(None)` at the end of a replay.
    fn next(&mut self) -> Result<Option<Frame>, TopFailure> {
        match self {
            Frames::Live { sampler, model } => Ok(Some(model.update(sampler.sample()?))),
            Frames::Replay { frames, at } => {
                let f = frames.get(*at).cloned();
                *at += 1;
                Ok(f)
            }
        }
    }
}

/// Why `drmtool top` stopped: each said as one sentence by [`top_cmd`].
#[derive(Debug, thiserror::Error)]
pub(super) enum TopFailure {
    /// A scan could not run.
    #[error("{0}")]
    Scan(#[from] crate::scan::ScanError),
    /// The recording to replay could not be read.
    #[error("{0}")]
    Replay(#[from] crate::top::record::RecordingError),
    /// The recording could not be written.
    #[error("cannot write the recording: {0}")]
    Record(std::io::Error),
    /// The output could not be written.
    #[error("cannot write the output: {0}")]
    Output(std::io::Error),
    /// The terminal could not be set up, read or drawn on.
    #[error("the terminal: {0}")]
    Terminal(std::io::Error),
    /// A signal to end the view could not be watched for.
    #[error("cannot watch for signals: {0}")]
    Signals(std::io::Error),
}

pub(super) fn top_cmd(a: &TopArgs, json: bool, out: &mut dyn Write) -> ExitCode {
    let Some(interval) = seconds(a.interval).filter(|d| *d >= Duration::from_millis(250)) else {
        eprintln!("drmtool: top: --interval needs at least 0.25 seconds (hint: -d 1)");
        return ExitCode::from(Exit::Usage);
    };
    if a.count == Some(0) {
        eprintln!("drmtool: top: --count needs a number of refreshes >= 1 (hint: --count 1)");
        return ExitCode::from(Exit::Usage);
    }
    let frames = match &a.replay {
        Some(p) => match crate::top::record::read(p) {
            Ok(frames) => Frames::Replay { frames, at: 0 },
            Err(e) => {
                eprintln!("drmtool: top: {e}");
                return ExitCode::FAILURE;
            }
        },
        None => {
            let (all, cand) = match crate::isolate::run::candidates(&a.gpus) {
                Ok(x) => x,
                Err(e) => {
                    eprintln!("drmtool: top: {e}");
                    return Exit::of_run(&e).into();
                }
            };
            let chosen = (!a.gpus.is_empty()).then_some(cand);
            let opts = Options {
                skip: skip_of(&a.skip),
                ..Default::default()
            };
            Frames::Live {
                sampler: Box::new(Sampler::new(opts, all, chosen)),
                model: Model::new(),
            }
        }
    };
    let tty = std::io::stdout().is_terminal();
    let color = color_wanted(&a.color, tty);
    let mut state = ViewState::new(a.group, a.sort, interval, color);
    let mut record = match &a.record {
        Some(p) => match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
        {
            Ok(f) => Some(f),
            Err(e) => {
                eprintln!("drmtool: top: cannot open {}: {e}", p.display());
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    let headless = a.once || a.print || json || !tty;
    let r = if headless {
        headless_loop(a, json, frames, &mut state, &mut record, out)
    } else {
        super::top_term::interactive(frames_fn(frames), &mut state, a.count, &mut record)
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("drmtool: top: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The frame source as the interactive loop calls it: the next frame, with a replay's
/// position and length.
pub(super) type NextFrame =
    Box<dyn FnMut(isize) -> Result<Option<(Frame, Option<(usize, usize)>)>, TopFailure>>;

fn frames_fn(mut frames: Frames) -> NextFrame {
    Box::new(move |step| match &mut frames {
        Frames::Replay { frames, at } => {
            // `at` is the next frame to show; `step` moves from the one shown.
            let shown = at.saturating_sub(1) as isize;
            let want = (shown + step).clamp(0, frames.len() as isize - 1) as usize;
            *at = want + 1;
            Ok(frames
                .get(want)
                .cloned()
                .map(|f| (f, Some((want, frames.len())))))
        }
        live => live.next().map(|f| f.map(|f| (f, None))),
    })
}

/// Appends `f` to the recording, if any.
pub(super) fn record_frame(rec: &mut Option<std::fs::File>, f: &Frame) -> Result<(), TopFailure> {
    match rec {
        Some(file) => crate::top::record::append(file, f).map_err(TopFailure::Record),
        None => Ok(()),
    }
}

fn headless_loop(
    a: &TopArgs,
    json: bool,
    mut frames: Frames,
    state: &mut ViewState,
    record: &mut Option<std::fs::File>,
    out: &mut dyn Write,
) -> Result<(), TopFailure> {
    let total = match &frames {
        Frames::Replay { frames, .. } => Some(frames.len()),
        Frames::Live { .. } => None,
    };
    let wanted = if a.once { Some(2) } else { a.count };
    let mut n = 0u64;
    let mut next_at = Instant::now();
    loop {
        if total.is_none() {
            std::thread::sleep(next_at.saturating_duration_since(Instant::now()));
            next_at = Instant::now() + state.interval;
        }
        let Some(f) = frames.next()? else { break };
        n += 1;
        state.replay = total.map(|t| (n as usize - 1, t));
        let last = wanted.is_some_and(|w| n >= w);
        record_frame(record, &f)?;
        // --once shows only the second frame (the first has no rates).
        if !a.once || last {
            let text = if json {
                let s = if a.once {
                    serde_json::to_string_pretty(&f)
                } else {
                    serde_json::to_string(&f)
                };
                s.map_err(|e| TopFailure::Output(std::io::Error::other(e)))? + "\n"
            } else {
                // Screens after the first are set off by a blank line.
                let sep = if n > 1 && !a.once { "\n" } else { "" };
                format!("{sep}{}", top_ui::text(&f, state, a.size.0, a.size.1))
            };
            out.write_all(text.as_bytes())
                .and_then(|()| out.flush())
                .map_err(TopFailure::Output)?;
        }
        if last {
            break;
        }
    }
    Ok(())
}

/// Sends a confirmed signal; one line of news for the header.
pub(super) fn signal_news(sig: crate::top::Signal, pids: &[u32]) -> String {
    let outcomes: Vec<String> = crate::top::send_signal(pids, sig)
        .into_iter()
        .map(|(p, r)| match r {
            Ok(()) => format!("{p}: sent"),
            Err(e) => format!("{p}: {}", crate::errno::errno_name(e)),
        })
        .collect();
    format!("{}: {}", sig.name(), outcomes.join(", "))
}
