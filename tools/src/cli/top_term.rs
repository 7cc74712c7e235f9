//! `drmtool top`'s terminal: raw mode, the alternate screen and the mouse, given back on
//! every way out (a normal quit, an error, a panic, SIGTERM, SIGHUP, SIGINT), and the loop
//! of frames, keys, clicks and resizes.

use super::top::{NextFrame, TopFailure, record_frame, signal_news};
use super::top_ui::{self, Action, ViewState};
use ratatui::crossterm::event::{
    self, DisableMouseCapture, EnableMouseCapture, Event, KeyEventKind, MouseEventKind,
};
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Gives the terminal back: the main screen, cooked mode, no mouse reports, the cursor.
/// Errors are ignored (nothing more can be done about them on the way out).
fn restore() {
    let _ = disable_raw_mode();
    let _ = execute!(
        std::io::stdout(),
        DisableMouseCapture,
        LeaveAlternateScreen,
        ratatui::crossterm::cursor::Show
    );
}

/// The terminal in the view's modes while it lives; restored on drop.
struct Guard;

impl Guard {
    fn enter() -> std::io::Result<Guard> {
        enable_raw_mode()?;
        let g = Guard;
        execute!(std::io::stdout(), EnterAlternateScreen, EnableMouseCapture)?;
        // A panic restores the terminal before its message is printed.
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            prev(info);
        }));
        Ok(g)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        restore();
    }
}

/// The interactive view: a frame every interval (or a replay's, one per interval while it
/// plays), drawn as the state lists it; keys and clicks change the state. Ends on `q`,
/// after `count` frames, or on SIGTERM, SIGHUP or SIGINT.
pub(super) fn interactive(
    mut next: NextFrame,
    state: &mut ViewState,
    count: Option<u64>,
    record: &mut Option<std::fs::File>,
) -> Result<(), TopFailure> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGINT,
    ] {
        signal_hook::flag::register(sig, stop.clone()).map_err(TopFailure::Signals)?;
    }
    let _guard = Guard::enter().map_err(TopFailure::Terminal)?;
    let backend = ratatui::backend::CrosstermBackend::new(std::io::stdout());
    let mut term = ratatui::Terminal::new(backend).map_err(TopFailure::Terminal)?;
    let Some((mut frame, pos)) = next(0)? else {
        return Ok(());
    };
    state.replay = pos;
    record_frame(record, &frame)?;
    let mut shown = 1u64;
    let mut due = Instant::now() + state.interval;
    let mut followed = None;
    while !stop.load(Ordering::Relaxed) {
        // A pid's tree is read again when it is chosen and at each refresh.
        if state.tree != followed {
            followed = state.tree;
            state.filter.pids = state.tree.map(crate::top::descendants);
        }
        term.draw(|screen| top_ui::draw(screen, &frame, state))
            .map_err(TopFailure::Terminal)?;
        let wait = due
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(200));
        if event::poll(wait).map_err(TopFailure::Terminal)? {
            let listed = state.rows(&frame);
            let action = match event::read().map_err(TopFailure::Terminal)? {
                Event::Key(k) if k.kind == KeyEventKind::Press => {
                    top_ui::key(state, k.code, &listed, frame.gpus.len())
                }
                Event::Mouse(m) => {
                    match m.kind {
                        MouseEventKind::ScrollDown => state.selected += 1,
                        MouseEventKind::ScrollUp => {
                            state.selected = state.selected.saturating_sub(1)
                        }
                        MouseEventKind::Down(_) if m.row >= state.rows_at.0 => {
                            state.selected = state.rows_at.1 + usize::from(m.row - state.rows_at.0);
                        }
                        _ => {}
                    }
                    Action::None
                }
                // A resize redraws at the next turn (ratatui draws only what changed).
                _ => Action::None,
            };
            match action {
                Action::Quit => break,
                Action::Signal(sig, pids) => state.message = Some(signal_news(sig, &pids)),
                Action::Step(n) => {
                    if let Some((f, pos)) = next(n)? {
                        frame = f;
                        state.replay = pos;
                    }
                }
                Action::None => {}
            }
            continue;
        }
        if Instant::now() < due {
            continue;
        }
        due = Instant::now() + state.interval;
        if count.is_some_and(|c| shown >= c) {
            break;
        }
        if state.paused {
            continue;
        }
        if let Some((f, pos)) = next(1)? {
            frame = f;
            state.replay = pos;
            record_frame(record, &frame)?;
            shown += 1;
        }
        followed = None;
    }
    Ok(())
}
