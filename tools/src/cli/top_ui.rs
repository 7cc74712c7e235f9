//! `drmtool top`'s drawing and keys: a frame ([`crate::top::Frame`]) and the view's state
//! drawn with ratatui; the state changed by keys. No I/O here but the drawing itself, so
//! the test backend draws exactly what a terminal shows.

use crate::render::human;
use crate::top::Frame;
use crate::top::view::{Column, Filter, GroupBy, Row, Sort, rows};
use ratatui::Frame as Screen;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style, Stylize};
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Block, Borders, Cell, Clear, Paragraph, Row as TRow, Sparkline, Table, Wrap,
};

/// What the viewer chose: grouping, order, filter, selection, and what is open.
#[derive(Debug, Clone)]
pub(super) struct ViewState {
    pub(super) group: GroupBy,
    pub(super) sort: Sort,
    pub(super) filter: Filter,
    /// The selected row (an index into the listed rows).
    pub(super) selected: usize,
    pub(super) paused: bool,
    pub(super) interval: std::time::Duration,
    pub(super) help: bool,
    /// Text being typed into the filter (`/`), shown until Enter or Esc.
    pub(super) typing: Option<String>,
    /// A signal waiting for `y`, and the pids.
    pub(super) confirm: Option<(crate::top::Signal, Vec<u32>)>,
    /// The pid whose tree is followed (`t`).
    pub(super) tree: Option<u32>,
    /// One line of news (what a signal did).
    pub(super) message: Option<String>,
    /// Colours (off with NO_COLOR or --color never: bold and reverse only).
    pub(super) color: bool,
    /// A replay: its position and length.
    pub(super) replay: Option<(usize, usize)>,
    /// Where the last drawing put the first listed row on the screen, and which row that
    /// was (for a click).
    pub(super) rows_at: (u16, usize),
}

impl ViewState {
    pub(super) fn new(
        group: GroupBy,
        sort: Column,
        interval: std::time::Duration,
        color: bool,
    ) -> Self {
        ViewState {
            group,
            sort: Sort {
                key: sort,
                then: Some(if sort == Column::Busy {
                    Column::Memory
                } else {
                    Column::Busy
                }),
                descending: true,
            },
            filter: Filter::default(),
            selected: 0,
            paused: false,
            interval,
            help: false,
            typing: None,
            confirm: None,
            tree: None,
            message: None,
            color,
            replay: None,
            rows_at: (u16::MAX, 0),
        }
    }

    /// The rows of `f` as this state lists them.
    pub(super) fn rows(&self, f: &Frame) -> Vec<Row> {
        rows(f, self.group, &self.filter, self.sort)
    }
}

/// What a key asks of the loop beyond the state it changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Action {
    None,
    Quit,
    /// Send this signal to these pids (confirmed).
    Signal(crate::top::Signal, Vec<u32>),
    /// Step a replay by this many frames.
    Step(isize),
}

/// The help text (`?`).
pub(super) const HELP: &[(&str, &str)] = &[
    ("q Esc", "quit (Esc closes a dialog first)"),
    ("arrows Pg", "select a row (Home, End; or click it)"),
    ("s S r", "sort: next column, next second column, reverse"),
    (
        "g",
        "group: process, client, cgroup, unit, container, pod, job, user",
    ),
    (
        "/",
        "filter by text (command, cgroup, group); Enter applies",
    ),
    (
        "u f t",
        "only: the row's user, the next GPU, the row's process tree",
    ),
    ("i", "hide idle clients (no memory, not busy)"),
    ("space p", "pause, resume (a replay: stop, play)"),
    (
        "+ -",
        "refresh less, more often (a replay: a frame on, back)",
    ),
    (
        "k K",
        "SIGTERM, SIGKILL to the row's processes (asks first)",
    ),
    ("?", "this help; any key closes it"),
];

/// Applies a key (crossterm's code and whether Shift was held is in the char) to the
/// state; `rows` is how many rows are listed now, `gpus` how many GPUs the frame has.
pub(super) fn key(
    s: &mut ViewState,
    code: ratatui::crossterm::event::KeyCode,
    listed: &[Row],
    gpus: usize,
) -> Action {
    use ratatui::crossterm::event::KeyCode as K;
    s.message = None;
    if let Some(t) = &mut s.typing {
        match code {
            K::Enter => {
                let t = std::mem::take(t);
                s.filter.text = (!t.is_empty()).then_some(t);
                s.typing = None;
            }
            K::Esc => s.typing = None,
            K::Backspace => {
                t.pop();
            }
            K::Char(c) if !c.is_control() && t.len() < 64 => t.push(c),
            _ => {}
        }
        return Action::None;
    }
    if let Some((sig, pids)) = &s.confirm {
        let a = match code {
            K::Char('y') | K::Char('Y') => Action::Signal(*sig, pids.clone()),
            _ => Action::None,
        };
        s.confirm = None;
        return a;
    }
    if s.help {
        s.help = false;
        return if matches!(code, K::Char('q')) {
            Action::Quit
        } else {
            Action::None
        };
    }
    let sel = listed.get(s.selected);
    match code {
        K::Char('q') | K::Esc => return Action::Quit,
        K::Char('?') => s.help = true,
        K::Up => s.selected = s.selected.saturating_sub(1),
        K::Down => s.selected += 1,
        K::PageUp => s.selected = s.selected.saturating_sub(10),
        K::PageDown => s.selected += 10,
        K::Home => s.selected = 0,
        K::End => s.selected = listed.len().saturating_sub(1),
        K::Char('s') => s.sort.key = s.sort.key.next(),
        K::Char('S') => s.sort.then = Some(s.sort.then.unwrap_or(s.sort.key).next()),
        K::Char('r') => s.sort.descending = !s.sort.descending,
        K::Char('g') => s.group = s.group.next(),
        K::Char('/') => s.typing = Some(s.filter.text.clone().unwrap_or_default()),
        K::Char('i') => s.filter.hide_idle = !s.filter.hide_idle,
        K::Char('u') => {
            s.filter.user = match (&s.filter.user, sel) {
                (None, Some(r)) => r.users.first().cloned(),
                _ => None,
            }
        }
        K::Char('f') => {
            s.filter.gpu = match s.filter.gpu {
                None if gpus > 0 => Some(0),
                Some(g) if g + 1 < gpus => Some(g + 1),
                _ => None,
            }
        }
        K::Char('t') => {
            s.tree = match (s.tree, sel) {
                (None, Some(r)) => r.pids.first().copied(),
                _ => None,
            }
        }
        K::Char(' ') | K::Char('p') => s.paused = !s.paused,
        K::Char('+') if s.replay.is_some() => return Action::Step(1),
        K::Char('-') if s.replay.is_some() => return Action::Step(-1),
        K::Char('+') => s.interval = (s.interval * 2).min(std::time::Duration::from_secs(60)),
        K::Char('-') => {
            s.interval = (s.interval / 2).max(std::time::Duration::from_millis(250));
        }
        K::Char('k') | K::Char('K') => {
            if let Some(r) = sel {
                let sig = if code == K::Char('k') {
                    crate::top::Signal::Term
                } else {
                    crate::top::Signal::Kill
                };
                s.confirm = Some((sig, r.pids.clone()));
            }
        }
        _ => {}
    }
    Action::None
}

/// Draws `f` as `s` lists it.
pub(super) fn draw(screen: &mut Screen, f: &Frame, s: &mut ViewState) {
    let listed = s.rows(f);
    if !listed.is_empty() {
        s.selected = s.selected.min(listed.len() - 1);
    } else {
        s.selected = 0;
    }
    let area = screen.area();
    // Room for the GPUs, and on a tall screen for both history graphs.
    let floor = if area.height >= 40 { 8 } else { 3 };
    let gpu_h = (f.gpus.len() as u16 + 2)
        .max(floor)
        .min(area.height / 3)
        .max(3);
    let [head, gpus, clients, foot] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Length(gpu_h),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(area);
    screen.render_widget(header(f, s), head);
    draw_gpus(screen, f, s, gpus);
    draw_clients(screen, &listed, s, clients);
    screen.render_widget(footer(s), foot);
    if s.help {
        draw_help(screen, area);
    }
    if let Some((sig, pids)) = &s.confirm {
        let text = format!(
            "Send {} to {}? y: send, any other key: cancel",
            sig.name(),
            pids.iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
        popup(screen, area, "confirm", vec![Line::from(text)]);
    }
}

fn header<'a>(f: &'a Frame, s: &ViewState) -> Paragraph<'a> {
    let secs = f.unix_ms / 1000;
    let clock = format!(
        "{:02}:{:02}:{:02} UTC",
        (secs / 3600) % 24,
        (secs / 60) % 60,
        secs % 60
    );
    let mut top = vec![
        Span::from("drmtool top ").bold(),
        Span::from(clock),
        Span::from(match s.replay {
            Some((i, n)) => format!("  replay {}/{n}", i + 1),
            None => format!("  every {:.2} s", s.interval.as_secs_f64()),
        }),
    ];
    if s.paused {
        top.push(Span::from("  PAUSED").add_modifier(Modifier::REVERSED));
    }
    top.push(Span::from(format!(
        "  {} GPUs, {} clients, {} procs{}",
        f.gpus.len(),
        f.clients.len(),
        f.scan.processes,
        if f.scan.unreadable > 0 {
            format!(" ({} unreadable)", f.scan.unreadable)
        } else {
            String::new()
        }
    )));
    let second = if let Some(m) = &s.message {
        Line::from(m.clone())
    } else if f.missing.is_empty() {
        Line::from("every source answered")
    } else {
        Line::from(format!("no source: {}", f.missing.join("; ")))
    };
    Paragraph::new(vec![Line::from(top), second])
}

fn busy_text(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |b| format!("{b:.0}%"))
}

fn mem_text(v: Option<u64>, source: &str) -> String {
    match v {
        Some(b) if source.is_empty() => human(b),
        Some(b) => format!("{} [{source}]", human(b)),
        None => "unknown".into(),
    }
}

fn draw_gpus(screen: &mut Screen, f: &Frame, s: &ViewState, area: Rect) {
    // The history graph where the screen is wide enough to keep the table whole.
    let graph_w = if area.width >= 120 {
        (area.width - 80).min(60)
    } else {
        0
    };
    let [table, graph] =
        Layout::horizontal([Constraint::Min(60), Constraint::Length(graph_w)]).areas(area);
    let rows: Vec<TRow> = f
        .gpus
        .iter()
        .map(|g| {
            let busy = g.engines.values().copied().reduce(f64::max);
            let engines: Vec<String> = g
                .engines
                .iter()
                .map(|(e, v)| format!("{e} {v:.0}%"))
                .collect();
            let dmem: Vec<String> = g
                .dmem
                .iter()
                .map(|d| format!("{}/{}", human(d.current), human(d.capacity)))
                .collect();
            let mut mem = mem_text(g.memory.value, &g.memory.source);
            if !dmem.is_empty() {
                mem.push_str(&format!(" dmem {}", dmem.join(",")));
            }
            let style = if s.filter.gpu == Some(g.index) {
                Style::default().add_modifier(Modifier::BOLD)
            } else {
                Style::default()
            };
            TRow::new(vec![
                Cell::from(g.index.to_string()),
                Cell::from(g.name.clone()),
                Cell::from(g.driver.clone().unwrap_or_else(|| "-".into())),
                Cell::from(g.clients.to_string()),
                Cell::from(g.leases.to_string()),
                Cell::from(mem),
                Cell::from(if engines.is_empty() {
                    busy_text(busy)
                } else {
                    engines.join(" ")
                }),
            ])
            .style(style)
        })
        .collect();
    let t = Table::new(
        rows,
        [
            Constraint::Length(2),
            Constraint::Length(12),
            Constraint::Length(10),
            Constraint::Length(3),
            Constraint::Length(3),
            Constraint::Length(17),
            Constraint::Min(8),
        ],
    )
    .header(TRow::new(["#", "GPU", "DRIVER", "CLI", "LSE", "MEMORY", "BUSY"]).bold())
    .block(Block::default().borders(Borders::TOP).title(" GPUs "));
    screen.render_widget(t, table);
    if graph.width >= 10 {
        // The selected GPU's (or the first's) busiest engine over the last refreshes.
        let g = s
            .filter
            .gpu
            .and_then(|i| f.gpus.iter().find(|g| g.index == i))
            .or(f.gpus.first());
        if let Some(g) = g {
            draw_history(screen, g, graph);
        }
    }
}

/// A GPU's busiest engine (percent) and memory over the last refreshes, as two sparklines
/// (one where the area is too low for two).
fn draw_history(screen: &mut Screen, g: &crate::top::GpuRow, area: Rect) {
    let w = area.width as usize;
    let tail = |v: Vec<u64>| v[v.len().saturating_sub(w)..].to_vec();
    let busy = tail(
        g.busy_history
            .iter()
            .map(|b| b.map_or(0, |v| v.round() as u64))
            .collect(),
    );
    let memory = tail(g.memory_history.iter().map(|m| m.unwrap_or(0)).collect());
    let [top, bottom] = if area.height >= 6 {
        Layout::vertical([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(area)
    } else {
        [area, Rect::default()]
    };
    let spark = |title: String, data: &[u64], max: Option<u64>| {
        let s = Sparkline::default()
            .block(Block::default().borders(Borders::TOP).title(title))
            .data(data);
        match max {
            Some(m) => s.max(m),
            None => s,
        }
    };
    screen.render_widget(spark(format!(" busy {} ", g.name), &busy, Some(100)), top);
    if bottom.height > 0 {
        let peak = memory.iter().copied().max().unwrap_or(0);
        let title = format!(" memory {} (peak {}) ", g.name, human(peak));
        screen.render_widget(spark(title, &memory, None), bottom);
    }
}

fn draw_clients(screen: &mut Screen, listed: &[Row], s: &mut ViewState, area: Rect) {
    let group = s.group;
    let rows: Vec<TRow> = listed
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let pid = match (r.pids.first(), r.own_pids.first()) {
                (Some(p), Some(o)) if p != o => format!("{p}({o})"),
                (Some(p), _) => p.to_string(),
                _ => "-".into(),
            };
            let mut cells = vec![
                Cell::from(pid),
                Cell::from(r.users.join(",")),
                Cell::from(r.gpus.join(",")),
                Cell::from(r.clients.to_string()),
                Cell::from(mem_text(r.memory, &r.sources.join(","))),
                Cell::from(busy_text(r.busy)),
                Cell::from(format!("{}/{}", r.dmabufs, r.dmabufs_shared)),
            ];
            if !matches!(group, GroupBy::Process | GroupBy::Client) {
                cells.push(Cell::from(r.label.clone()));
            }
            cells.push(Cell::from(r.command.clone()));
            let mut row = TRow::new(cells);
            if i == s.selected {
                row = row.style(Style::default().add_modifier(Modifier::REVERSED));
            }
            row
        })
        .collect();
    let mut head = vec!["PID", "USER", "GPU", "CLI", "MEMORY", "BUSY", "DMABUF"];
    let mut widths = vec![
        Constraint::Length(9),
        Constraint::Length(8),
        Constraint::Length(12),
        Constraint::Length(3),
        Constraint::Length(17),
        Constraint::Length(4),
        Constraint::Length(6),
    ];
    if !matches!(group, GroupBy::Process | GroupBy::Client) {
        head.push(group_header(group));
        widths.push(Constraint::Length(24));
    }
    head.push("COMMAND");
    widths.push(Constraint::Min(10));
    let arrow = if s.sort.descending { " desc" } else { "" };
    let title = format!(
        " clients by {}: {} row(s), sort {}{arrow}{}{} ",
        group.name(),
        listed.len(),
        s.sort.key.name(),
        s.sort
            .then
            .map_or(String::new(), |t| format!(", {}", t.name())),
        filter_text(s),
    );
    // Scroll so the selected row stays in view.
    let visible = area.height.saturating_sub(2) as usize;
    let skip = s.selected.saturating_sub(visible.saturating_sub(1));
    // The block's top line and the header line come first.
    s.rows_at = (area.y + 2, skip);
    let t = Table::new(rows.into_iter().skip(skip), widths)
        .header(TRow::new(head).bold())
        .block(Block::default().borders(Borders::TOP).title(title));
    screen.render_widget(t, area);
}

fn group_header(g: GroupBy) -> &'static str {
    match g {
        GroupBy::Cgroup => "CGROUP",
        GroupBy::Unit => "UNIT",
        GroupBy::Container => "CONTAINER",
        GroupBy::Pod => "POD",
        GroupBy::Job => "JOB",
        GroupBy::User => "USER",
        GroupBy::Process | GroupBy::Client => "",
    }
}

fn filter_text(s: &ViewState) -> String {
    let mut parts = Vec::new();
    if let Some(u) = &s.filter.user {
        parts.push(format!("user {u}"));
    }
    if let Some(g) = s.filter.gpu {
        parts.push(format!("GPU {g}"));
    }
    if let Some(t) = &s.filter.text {
        parts.push(format!("\"{t}\""));
    }
    if s.filter.hide_idle {
        parts.push("busy only".into());
    }
    if let Some(p) = s.tree {
        parts.push(format!("tree of {p}"));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(", only {}", parts.join(", "))
    }
}

fn footer(s: &ViewState) -> Paragraph<'static> {
    let text = match &s.typing {
        Some(t) => format!("filter: {t}_  (Enter: apply, Esc: cancel)"),
        None => {
            "q quit  ? help  s sort  g group  / filter  i idle  space pause  +/- interval  k kill"
                .into()
        }
    };
    let style = if s.color {
        Style::default().fg(ratatui::style::Color::Cyan)
    } else {
        Style::default()
    };
    Paragraph::new(Line::from(text).style(style))
}

fn draw_help(screen: &mut Screen, area: Rect) {
    let lines: Vec<Line> = HELP
        .iter()
        .map(|(k, what)| {
            Line::from(vec![
                Span::from(format!("{k:<12}")).bold(),
                Span::from(*what),
            ])
        })
        .collect();
    popup(screen, area, "keys", lines);
}

fn popup(screen: &mut Screen, area: Rect, title: &str, lines: Vec<Line>) {
    let w = area.width.saturating_sub(4).min(100);
    let h = (lines.len() as u16 + 2).min(area.height.saturating_sub(2));
    let r = Rect {
        x: area.x + (area.width.saturating_sub(w)) / 2,
        y: area.y + (area.height.saturating_sub(h)) / 2,
        width: w,
        height: h,
    };
    screen.render_widget(Clear, r);
    screen.render_widget(
        Paragraph::new(lines).wrap(Wrap { trim: true }).block(
            Block::default()
                .borders(Borders::ALL)
                .title(format!(" {title} ")),
        ),
        r,
    );
}

/// The screen of `f` as `s` lists it, drawn at `width` x `height` on the test backend, as
/// lines of text (trailing spaces cut): what `--print` writes and the snapshots hold.
pub(super) fn text(f: &Frame, s: &mut ViewState, width: u16, height: u16) -> String {
    let backend = ratatui::backend::TestBackend::new(width, height);
    let mut term = ratatui::Terminal::new(backend).expect("the test backend");
    term.draw(|screen| draw(screen, f, s))
        .expect("the test backend draws");
    let buf = term.backend().buffer();
    let mut out = String::new();
    for y in 0..height {
        let mut line = String::new();
        for x in 0..width {
            line.push_str(buf[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::top::{Bytes, ClientRow, GpuRow, Region, ScanRow};
    use ratatui::crossterm::event::KeyCode as K;
    use std::collections::BTreeMap;

    /// Two GPUs, three clients of two users (one in a Slurm job, one with a hostile name
    /// already escaped by the model), one GPU without an engine counter.
    fn frame() -> Frame {
        let client = |pid: u32, gpu: usize, mem: Option<u64>, busy: Option<f64>| ClientRow {
            gpu: Some(gpu),
            gpu_name: ["0000:00:02.0", "vkms"][gpu].into(),
            client_id: Some(u64::from(pid)),
            pid,
            ns_pids: vec![pid],
            holders: vec![pid],
            comm: format!("app{pid}"),
            cmdline: format!("/usr/bin/app{pid} --scene big"),
            uid: Some(1000 + pid % 2),
            user: Some(["alice", "bob"][(pid % 2) as usize].into()),
            cgroup: Some(format!("/user.slice/user-{}.slice", 1000 + pid % 2)),
            unit: None,
            container: None,
            pod: None,
            slurm_job: (pid == 12).then(|| "42.0".into()),
            memory: Bytes {
                value: mem,
                source: if mem.is_some() {
                    "fdinfo".into()
                } else {
                    String::new()
                },
            },
            regions: BTreeMap::from([(
                "vram".into(),
                Region {
                    total: mem,
                    resident: mem,
                },
            )]),
            engines: busy
                .map(|b| BTreeMap::from([("gfx".into(), b)]))
                .unwrap_or_default(),
            dmabufs: usize::from(pid == 11),
            dmabufs_shared: usize::from(pid == 11),
            dmabuf_bytes: None,
        };
        Frame {
            schema_version: crate::top::SCHEMA_VERSION,
            seq: 7,
            unix_ms: 1_765_000_000_000,
            interval_ms: Some(1000),
            gpus: vec![
                GpuRow {
                    index: 0,
                    name: "0000:00:02.0".into(),
                    driver: Some("virtio_gpu".into()),
                    clients: 2,
                    leases: 1,
                    memory: Bytes {
                        value: Some(3 << 20),
                        source: "fdinfo".into(),
                    },
                    regions: BTreeMap::new(),
                    dmem: Vec::new(),
                    engines: BTreeMap::from([("gfx".into(), 60.0)]),
                    memory_history: vec![Some(1 << 20), Some(3 << 20)],
                    busy_history: vec![Some(10.0), Some(60.0)],
                },
                GpuRow {
                    index: 1,
                    name: "vkms".into(),
                    driver: Some("vkms".into()),
                    clients: 1,
                    leases: 0,
                    memory: Bytes::default(),
                    regions: BTreeMap::new(),
                    dmem: Vec::new(),
                    engines: BTreeMap::new(),
                    memory_history: vec![None, None],
                    busy_history: vec![None, None],
                },
            ],
            clients: vec![
                client(11, 0, Some(1 << 20), Some(10.0)),
                client(12, 0, Some(2 << 20), Some(50.0)),
                client(13, 1, None, None),
            ],
            missing: vec!["engine busy: vkms prints no drm-engine-* keys".into()],
            scan: ScanRow {
                processes: 40,
                unreadable: 0,
            },
        }
    }

    fn state() -> ViewState {
        ViewState::new(
            GroupBy::Process,
            Column::Memory,
            std::time::Duration::from_secs(1),
            false,
        )
    }

    /// The screen at 80x24 and 200x60 against the committed snapshots
    /// (`tools/src/cli/snapshots/`; `UPDATE_SNAPSHOTS=1` writes them, to be reviewed).
    #[test]
    fn snapshots() {
        let f = frame();
        let mut cases = vec![
            ("top-80x24", text(&f, &mut state(), 80, 24)),
            ("top-200x60", text(&f, &mut state(), 200, 60)),
        ];
        let mut s = state();
        s.group = GroupBy::Job;
        s.help = true;
        cases.push(("top-80x24-job-help", text(&f, &mut s, 80, 24)));
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cli/snapshots");
        for (name, got) in cases {
            let path = dir.join(format!("{name}.txt"));
            if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(&path, &got).unwrap();
            }
            let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
                panic!("{}: {e} (UPDATE_SNAPSHOTS=1 writes it)", path.display())
            });
            assert_eq!(
                got, want,
                "{name}: the screen changed; review and UPDATE_SNAPSHOTS=1"
            );
            assert_eq!(
                got.lines().count(),
                name.split('x')
                    .nth(1)
                    .and_then(|h| h.split('-').next())
                    .and_then(|h| h.parse().ok())
                    .unwrap_or(0)
            );
        }
    }

    #[test]
    fn the_screen_says_what_it_shows() {
        let f = frame();
        let t = text(&f, &mut state(), 80, 24);
        // Sorted by memory, largest first: pid 12 above 11; vkms' client unknown, not 0.
        let at = |needle: &str| {
            t.find(needle)
                .unwrap_or_else(|| panic!("{needle:?} in\n{t}"))
        };
        assert!(at("12 ") < at("11 "));
        assert!(t.contains("unknown"), "{t}");
        assert!(t.contains("no source: engine busy"), "{t}");
        assert!(t.contains("2.0 MiB [fdinfo]"), "{t}");
        // No escape byte in any cell.
        assert!(!t.bytes().any(|b| b == 0x1b));
    }

    #[test]
    fn keys_change_the_view_and_a_signal_needs_a_yes() {
        let f = frame();
        let mut s = state();
        let listed = s.rows(&f);
        assert_eq!(key(&mut s, K::Char('g'), &listed, 2), Action::None);
        assert_eq!(s.group, GroupBy::Client);
        key(&mut s, K::Char('s'), &listed, 2);
        assert_eq!(s.sort.key, Column::Busy);
        key(&mut s, K::Char('r'), &listed, 2);
        assert!(!s.sort.descending);
        key(&mut s, K::Char('/'), &listed, 2);
        for c in "app13".chars() {
            key(&mut s, K::Char(c), &listed, 2);
        }
        key(&mut s, K::Enter, &listed, 2);
        assert_eq!(s.filter.text.as_deref(), Some("app13"));
        assert_eq!(s.rows(&f).len(), 1);
        key(&mut s, K::Char('f'), &listed, 2);
        assert_eq!(s.filter.gpu, Some(0));
        key(&mut s, K::Char('f'), &listed, 2);
        key(&mut s, K::Char('f'), &listed, 2);
        assert_eq!(s.filter.gpu, None);
        key(&mut s, K::Char(' '), &listed, 2);
        assert!(s.paused);
        key(&mut s, K::Char('+'), &listed, 2);
        assert_eq!(s.interval, std::time::Duration::from_secs(2));
        let mut s = state();
        let listed = s.rows(&f);
        key(&mut s, K::Char('k'), &listed, 2);
        assert!(s.confirm.is_some());
        assert_eq!(
            key(&mut s, K::Char('n'), &listed, 2),
            Action::None,
            "anything but y cancels"
        );
        key(&mut s, K::Char('K'), &listed, 2);
        assert_eq!(
            key(&mut s, K::Char('y'), &listed, 2),
            Action::Signal(crate::top::Signal::Kill, vec![12])
        );
        key(&mut s, K::Char('?'), &listed, 2);
        assert!(s.help);
        assert_eq!(key(&mut s, K::Char('x'), &listed, 2), Action::None);
        assert!(!s.help);
        assert_eq!(key(&mut s, K::Char('q'), &listed, 2), Action::Quit);
    }

    #[test]
    fn a_replayed_frame_draws_as_the_live_one() {
        let f = frame();
        let back: Frame = serde_json::from_str(&serde_json::to_string(&f).unwrap()).unwrap();
        assert_eq!(
            text(&f, &mut state(), 100, 30),
            text(&back, &mut state(), 100, 30)
        );
    }
}
