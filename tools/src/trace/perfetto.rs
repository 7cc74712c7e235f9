//! The Chrome trace events of [`super::chrome`] as Perfetto's protobuf trace (`Trace`, a
//! stream of `TracePacket`s; `-o trace.pftrace`), which ui.perfetto.dev loads for traces too
//! big for JSON.
//!
//! [`PerfettoWriter`] is a translator: it takes the event objects one by one, in the order
//! they are made, and writes each packet as soon as it is made; what it keeps is small
//! per-track state (track uuids, async lanes, the open async ids) and at most one slice held
//! back for the flows that bind to it, so its memory does not grow with the number of
//! events.
//!
//! What maps to what:
//! - the start: a `ClockSnapshot` (`CLOCK_MONOTONIC` and `CLOCK_BOOTTIME` read together,
//!   primary trace clock `MONOTONIC`) in the first packet, which also clears the
//!   sequence's incremental state; every packet has the same
//!   `trusted_packet_sequence_id` and every event packet `timestamp_clock_id = MONOTONIC`
//!   (the JSON's `ts`, µs, back to ns);
//! - a `pid`: a process track (`TrackDescriptor` with a `ProcessDescriptor`), written when
//!   the pid is first seen and again with `process_name` when an `"M"` `process_name`
//!   comes; a `(pid, tid)`: a thread track (`ThreadDescriptor`) under it, likewise named by
//!   `"M"` `thread_name`;
//! - `"i"` (and `"I"`): a `TYPE_INSTANT` on the thread's track (`"s": "p"`: the process's,
//!   `"g"`: the global track); `"X"`: `TYPE_SLICE_BEGIN` at `ts` and `TYPE_SLICE_END` at
//!   `ts + dur` on the thread's track; `"B"`/`"E"` likewise; `cat` becomes the
//!   categories, `args` the debug annotations (int, uint, double, string, bool; nested
//!   objects and arrays flattened to `a.b` and `a[0]` names);
//! - `"b"`/`"e"` (async, matched by `id` within `(pid, name)`): a track per async `name`
//!   under the process's track, and under it lanes, child tracks named `name`,
//!   `name #2`, ...: a `"b"` takes the first lane with no slice open whose last slice
//!   ended at or before it, or a new lane, because a proto track is a strict stack and
//!   the fences of one timeline overlap (the name's track orders them by
//!   `sibling_order_rank`); a `"b"` never ended stays open (the UI draws it to the end of
//!   the trace);
//! - `"C"`: one counter track (`CounterDescriptor`) per `(pid, name, series)`, named
//!   `name series`, under the process's track, each sample a `TYPE_COUNTER` event
//!   (`counter_value` for integers, `double_counter_value` otherwise);
//! - `"s"`/`"f"`: a flow id (FNV-1a 64 of the string `id`) in `flow_ids` /
//!   `terminating_flow_ids` of the `"X"` slice just before it on the same thread at the
//!   same `ts` (how chrome.rs writes a job's "submit job" and "run job"), or else of an
//!   instant of its own there, so the UI draws the arrow from the queuing thread to the
//!   ring;
//! - [`PerfettoWriter::finish`]: the `otherData` object as the debug annotations of one
//!   instant "drmtool trace" on a track "drmtool".
//!
//! Anything else (another phase, a missing or ill-typed `pid`, `tid`, `ts`, `dur`, `name`
//! or `id`, an `"e"` with no open `"b"`, a counter series that is not a number) is counted
//! in [`PerfettoWriter::skipped`] and written as far as it can be, never a panic.

pub mod proto;

use prost::Message;
use proto::{
    AnnotationValue, BuiltinClock, ChildTracksOrdering, Clock, ClockSnapshot, CounterDescriptor,
    Data, DebugAnnotation, ProcessDescriptor, ThreadDescriptor, TracePacket, TrackDescriptor,
    TrackEvent, TrackEventType,
};
use serde_json::Value;
use std::collections::HashMap;
use std::io::{self, Write};

/// The `trusted_packet_sequence_id` of every packet: one writer, one sequence.
pub const SEQUENCE_ID: u32 = 1;

/// The key of `Trace.packet` (field 1, wire type 2: length-delimited).
const PACKET_KEY: u8 = (1 << 3) | 2;

/// How deep nested `args` are flattened; deeper values are written as JSON text.
const MAX_DEPTH: usize = 4;
/// At most this many debug annotations per event; past them, one more says
/// `args_left_out: true`.
const MAX_ANNOTATIONS: usize = 256;

/// One lane of an async name: a child track holding one slice at a time.
struct Lane {
    uuid: u64,
    open: bool,
    last_end: u64,
}

/// The tracks of one async `(pid, name)`: the name's track, its lanes, and which lane each
/// open `id` is on.
struct Group {
    uuid: u64,
    lanes: Vec<Lane>,
    open: HashMap<String, usize>,
}

/// An `"X"` slice held back until the next event, so that the flows chrome.rs writes right
/// after it bind to it.
struct Pending {
    begin: TrackEvent,
    track: u64,
    ts: u64,
    end: u64,
}

/// Writes Perfetto's protobuf `Trace` from Chrome trace event objects (see the module doc).
/// Each packet is one `write_all` on `W`: give it a buffered writer.
pub struct PerfettoWriter<W: Write> {
    out: W,
    buf: Vec<u8>,
    next_uuid: u64,
    processes: HashMap<i32, u64>,
    threads: HashMap<(i32, i32), u64>,
    groups: HashMap<i32, HashMap<String, Group>>,
    counters: HashMap<(i32, String, String), u64>,
    pending: Option<Pending>,
    skipped: u64,
    last_ts: u64,
}

impl<W: Write> std::fmt::Debug for PerfettoWriter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerfettoWriter")
            .field("tracks", &self.tracks())
            .field("open_slices", &self.open_slices())
            .field("skipped", &self.skipped)
            .finish_non_exhaustive()
    }
}

/// A packet of this writer's sequence; with a timestamp, in `CLOCK_MONOTONIC`.
fn packet(ts: Option<u64>, data: Data) -> TracePacket {
    TracePacket {
        timestamp: ts,
        timestamp_clock_id: ts.map(|_| BuiltinClock::Monotonic as u32),
        data: Some(data),
        trusted_packet_sequence_id: Some(SEQUENCE_ID),
        sequence_flags: None,
    }
}

/// A Chrome timestamp or duration (µs, f64 with ns precision) in ns.
fn ns(v: Option<&Value>) -> Option<u64> {
    let us = v?.as_f64()?;
    let ns = (us * 1000.0).round();
    // 2^63 ns: 292 years, past any uptime.
    (ns.is_finite() && (0.0..9.2e18).contains(&ns)).then_some(ns as u64)
}

/// A `pid` or `tid` as the descriptors' int32.
fn id32(v: Option<&Value>) -> Option<i32> {
    i32::try_from(v?.as_i64()?).ok()
}

fn str_of<'a>(ev: &'a Value, key: &str) -> Option<&'a str> {
    ev.get(key).and_then(Value::as_str)
}

/// An async or flow `id`: a string, or a number as its text.
/// An async event's pid, name, id and time, all of which it needs.
fn async_key(ev: &Value) -> Option<(i32, &str, String, u64)> {
    Some((
        id32(ev.get("pid"))?,
        str_of(ev, "name")?,
        id_of(ev)?,
        ns(ev.get("ts"))?,
    ))
}

fn id_of(ev: &Value) -> Option<String> {
    match ev.get("id")? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A flow's 64-bit id: FNV-1a 64 of its string id (stable across runs and builds); never 0.
pub fn flow_id(id: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h.max(1)
}

fn categories(ev: &Value) -> Vec<String> {
    str_of(ev, "cat")
        .map(|c| {
            c.split(',')
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// A JSON value as debug annotations named `key` (flattened, see the module doc).
fn flatten(out: &mut Vec<DebugAnnotation>, key: String, v: &Value, depth: usize) {
    if out.len() > MAX_ANNOTATIONS {
        return;
    }
    let value = match v {
        Value::Null => AnnotationValue::String("null".into()),
        Value::Bool(b) => AnnotationValue::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => AnnotationValue::Int(i),
            (None, Some(u)) => AnnotationValue::Uint(u),
            _ => AnnotationValue::Double(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => AnnotationValue::String(s.clone()),
        Value::Array(_) | Value::Object(_) if depth >= MAX_DEPTH => {
            AnnotationValue::String(v.to_string())
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                flatten(out, format!("{key}[{i}]"), x, depth + 1);
            }
            return;
        }
        Value::Object(m) => {
            for (k, x) in m {
                flatten(out, format!("{key}.{k}"), x, depth + 1);
            }
            return;
        }
    };
    out.push(DebugAnnotation {
        name: Some(key),
        value: Some(value),
    });
}

/// An event's `args` (or `otherData`) as debug annotations, one per scalar.
fn annotations(args: Option<&Value>) -> Vec<DebugAnnotation> {
    let mut out = Vec::new();
    match args {
        None => {}
        Some(Value::Object(m)) => {
            for (k, v) in m {
                flatten(&mut out, k.clone(), v, 1);
            }
        }
        Some(v) => flatten(&mut out, "args".into(), v, 1),
    }
    if out.len() > MAX_ANNOTATIONS {
        out.truncate(MAX_ANNOTATIONS);
        out.push(DebugAnnotation {
            name: Some("args_left_out".into()),
            value: Some(AnnotationValue::Bool(true)),
        });
    }
    out
}

impl<W: Write> PerfettoWriter<W> {
    /// A writer over `out`; writes the first packet at once.
    ///
    /// `monotonic_ns` and `boottime_ns`: CLOCK_MONOTONIC and CLOCK_BOOTTIME read together at
    /// the start (a ClockSnapshot packet).
    pub fn new(out: W, monotonic_ns: u64, boottime_ns: u64) -> io::Result<Self> {
        let mut w = Self {
            out,
            buf: Vec::with_capacity(256),
            next_uuid: 1,
            processes: HashMap::new(),
            threads: HashMap::new(),
            groups: HashMap::new(),
            counters: HashMap::new(),
            pending: None,
            skipped: 0,
            last_ts: monotonic_ns,
        };
        let clock = |id: BuiltinClock, ts: u64| Clock {
            clock_id: Some(id as u32),
            timestamp: Some(ts),
        };
        let mut first = packet(
            None,
            Data::ClockSnapshot(ClockSnapshot {
                clocks: vec![
                    clock(BuiltinClock::Monotonic, monotonic_ns),
                    clock(BuiltinClock::Boottime, boottime_ns),
                ],
                primary_trace_clock: Some(BuiltinClock::Monotonic as i32),
            }),
        );
        first.sequence_flags = Some(proto::SEQ_INCREMENTAL_STATE_CLEARED);
        w.write(&first)?;
        Ok(w)
    }

    /// One Chrome trace event object as chrome.rs makes it. Unknown/malformed shapes are
    /// counted (`skipped()`), never a panic.
    pub fn event(&mut self, ev: &serde_json::Value) -> io::Result<()> {
        let ph = str_of(ev, "ph").unwrap_or("");
        if let "s" | "f" = ph {
            return self.flow(ev, ph == "f");
        }
        self.flush_pending()?;
        let written = match ph {
            "M" => self.metadata(ev)?,
            "i" | "I" => self.instant(ev)?,
            "X" => self.complete(ev)?,
            "B" | "E" => self.duration(ev, ph == "B")?,
            "b" => self.async_begin(ev)?,
            "e" => self.async_end(ev)?,
            "C" => self.counter(ev)?,
            _ => false,
        };
        if !written {
            self.skipped += 1;
        }
        Ok(())
    }

    /// How many events were malformed or of a shape not translated.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// How many tracks have been described so far (processes, threads, async names and
    /// their lanes, counters): the writer's state, which grows with the tracks of the
    /// trace and not with its events.
    pub fn tracks(&self) -> usize {
        let groups: usize = self
            .groups
            .values()
            .flat_map(HashMap::values)
            .map(|g| 1 + g.lanes.len())
            .sum();
        self.processes.len() + self.threads.len() + groups + self.counters.len()
    }

    /// How many async slices are open (begun, not yet ended).
    pub fn open_slices(&self) -> usize {
        self.groups
            .values()
            .flat_map(HashMap::values)
            .map(|g| g.open.len())
            .sum()
    }

    /// Writes what closes the trace (the otherData object's fields as debug annotations of
    /// one instant "drmtool trace" on a track "drmtool", at `otherData.end_ns` or the last
    /// event's time), flushes, and returns the writer.
    pub fn finish(mut self, other_data: &serde_json::Value) -> io::Result<W> {
        self.flush_pending()?;
        let uuid = self.uuid();
        self.describe(TrackDescriptor {
            uuid: Some(uuid),
            name: Some("drmtool".into()),
            ..Default::default()
        })?;
        let ts = other_data
            .get("end_ns")
            .and_then(Value::as_u64)
            .unwrap_or(self.last_ts);
        self.write(&packet(
            Some(ts),
            Data::TrackEvent(TrackEvent {
                name: Some("drmtool trace".into()),
                r#type: Some(TrackEventType::Instant as i32),
                track_uuid: Some(uuid),
                debug_annotations: annotations(Some(other_data)),
                ..Default::default()
            }),
        ))?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn write(&mut self, p: &TracePacket) -> io::Result<()> {
        self.buf.clear();
        self.buf.push(PACKET_KEY);
        p.encode_length_delimited(&mut self.buf)
            .map_err(io::Error::other)?;
        self.out.write_all(&self.buf)
    }

    fn uuid(&mut self) -> u64 {
        let u = self.next_uuid;
        self.next_uuid += 1;
        u
    }

    fn describe(&mut self, d: TrackDescriptor) -> io::Result<()> {
        self.write(&packet(None, Data::TrackDescriptor(d)))
    }

    fn event_at(&mut self, ts: u64, e: TrackEvent) -> io::Result<()> {
        self.last_ts = self.last_ts.max(ts);
        self.write(&packet(Some(ts), Data::TrackEvent(e)))
    }

    /// The process's track; described when new, and again when `name` is given.
    fn process(&mut self, pid: i32, name: Option<&str>) -> io::Result<u64> {
        let known = self.processes.get(&pid).copied();
        if let (Some(u), None) = (known, name) {
            return Ok(u);
        }
        let uuid = known.unwrap_or_else(|| self.uuid());
        self.processes.insert(pid, uuid);
        self.describe(TrackDescriptor {
            uuid: Some(uuid),
            process: Some(ProcessDescriptor {
                pid: Some(pid),
                process_name: name.map(str::to_string),
            }),
            ..Default::default()
        })?;
        Ok(uuid)
    }

    /// The thread's track (under its process's); described when new, and again when `name`
    /// is given.
    fn thread(&mut self, pid: i32, tid: i32, name: Option<&str>) -> io::Result<u64> {
        let known = self.threads.get(&(pid, tid)).copied();
        if let (Some(u), None) = (known, name) {
            return Ok(u);
        }
        let parent = self.process(pid, None)?;
        let uuid = known.unwrap_or_else(|| self.uuid());
        self.threads.insert((pid, tid), uuid);
        self.describe(TrackDescriptor {
            uuid: Some(uuid),
            parent_uuid: Some(parent),
            thread: Some(ThreadDescriptor {
                pid: Some(pid),
                tid: Some(tid),
                thread_name: name.map(str::to_string),
            }),
            ..Default::default()
        })?;
        Ok(uuid)
    }

    /// The track of an event's `pid` and `tid`.
    fn thread_of(&mut self, ev: &Value) -> io::Result<Option<u64>> {
        match (id32(ev.get("pid")), id32(ev.get("tid"))) {
            (Some(p), Some(t)) => self.thread(p, t, None).map(Some),
            _ => Ok(None),
        }
    }

    fn flush_pending(&mut self) -> io::Result<()> {
        if let Some(p) = self.pending.take() {
            self.event_at(p.ts, p.begin)?;
            self.event_at(
                p.end,
                TrackEvent {
                    r#type: Some(TrackEventType::SliceEnd as i32),
                    track_uuid: Some(p.track),
                    ..Default::default()
                },
            )?;
        }
        Ok(())
    }

    /// `"M"`: process and thread names.
    fn metadata(&mut self, ev: &Value) -> io::Result<bool> {
        let name = ev.get("args").and_then(|a| str_of(a, "name"));
        let (Some(pid), Some(name)) = (id32(ev.get("pid")), name) else {
            return Ok(false);
        };
        match (str_of(ev, "name"), id32(ev.get("tid"))) {
            (Some("process_name"), _) => self.process(pid, Some(name)).map(|_| true),
            (Some("thread_name"), Some(tid)) => self.thread(pid, tid, Some(name)).map(|_| true),
            _ => Ok(false),
        }
    }

    /// `"i"`: an instant on the thread's, the process's or the global track.
    fn instant(&mut self, ev: &Value) -> io::Result<bool> {
        let (Some(ts), Some(name)) = (ns(ev.get("ts")), str_of(ev, "name")) else {
            return Ok(false);
        };
        let track = match str_of(ev, "s").unwrap_or("t") {
            "g" => None,
            "p" => match id32(ev.get("pid")) {
                Some(pid) => Some(self.process(pid, None)?),
                None => return Ok(false),
            },
            _ => match self.thread_of(ev)? {
                Some(t) => Some(t),
                None => return Ok(false),
            },
        };
        self.event_at(
            ts,
            TrackEvent {
                categories: categories(ev),
                name: Some(name.to_string()),
                r#type: Some(TrackEventType::Instant as i32),
                track_uuid: track,
                debug_annotations: annotations(ev.get("args")),
                ..Default::default()
            },
        )?;
        Ok(true)
    }

    /// `"X"`: a slice on the thread's track, held back until the next event (see
    /// [`Pending`]).
    fn complete(&mut self, ev: &Value) -> io::Result<bool> {
        let (Some(ts), Some(dur), Some(name)) =
            (ns(ev.get("ts")), ns(ev.get("dur")), str_of(ev, "name"))
        else {
            return Ok(false);
        };
        let Some(track) = self.thread_of(ev)? else {
            return Ok(false);
        };
        let begin = TrackEvent {
            categories: categories(ev),
            name: Some(name.to_string()),
            r#type: Some(TrackEventType::SliceBegin as i32),
            track_uuid: Some(track),
            debug_annotations: annotations(ev.get("args")),
            ..Default::default()
        };
        self.pending = Some(Pending {
            begin,
            track,
            ts,
            end: ts.saturating_add(dur),
        });
        Ok(true)
    }

    /// `"B"` / `"E"`: a slice's begin or end on the thread's track.
    fn duration(&mut self, ev: &Value, begin: bool) -> io::Result<bool> {
        let name = str_of(ev, "name");
        let (Some(ts), true) = (ns(ev.get("ts")), !begin || name.is_some()) else {
            return Ok(false);
        };
        let Some(track) = self.thread_of(ev)? else {
            return Ok(false);
        };
        let e = if begin {
            TrackEvent {
                categories: categories(ev),
                name: name.map(str::to_string),
                r#type: Some(TrackEventType::SliceBegin as i32),
                track_uuid: Some(track),
                debug_annotations: annotations(ev.get("args")),
                ..Default::default()
            }
        } else {
            TrackEvent {
                r#type: Some(TrackEventType::SliceEnd as i32),
                track_uuid: Some(track),
                ..Default::default()
            }
        };
        self.event_at(ts, e)?;
        Ok(true)
    }

    /// `"s"` / `"f"`: a flow step on the slice held back, or on an instant of its own.
    fn flow(&mut self, ev: &Value, terminating: bool) -> io::Result<()> {
        let (Some(ts), Some(id)) = (ns(ev.get("ts")), id_of(ev)) else {
            self.skipped += 1;
            return self.flush_pending();
        };
        let Some(track) = self.thread_of(ev)? else {
            self.skipped += 1;
            return self.flush_pending();
        };
        let flow = flow_id(&id);
        let mut e = match self.pending.take() {
            Some(mut p) if p.track == track && p.ts == ts => {
                add_flow(&mut p.begin, flow, terminating);
                self.pending = Some(p);
                return Ok(());
            }
            other => {
                self.pending = other;
                self.flush_pending()?;
                TrackEvent {
                    categories: categories(ev),
                    name: Some(str_of(ev, "name").unwrap_or("flow").to_string()),
                    r#type: Some(TrackEventType::Instant as i32),
                    track_uuid: Some(track),
                    ..Default::default()
                }
            }
        };
        add_flow(&mut e, flow, terminating);
        self.event_at(ts, e)
    }

    /// `"b"`: an async slice on the first free lane of its name.
    fn async_begin(&mut self, ev: &Value) -> io::Result<bool> {
        let Some((pid, name, id, ts)) = async_key(ev) else {
            return Ok(false);
        };
        let parent = self.process(pid, None)?;
        if !self.groups.get(&pid).is_some_and(|g| g.contains_key(name)) {
            let uuid = self.uuid();
            self.describe(TrackDescriptor {
                uuid: Some(uuid),
                parent_uuid: Some(parent),
                name: Some(name.to_string()),
                child_ordering: Some(ChildTracksOrdering::Explicit as i32),
                ..Default::default()
            })?;
            let g = Group {
                uuid,
                lanes: Vec::new(),
                open: HashMap::new(),
            };
            self.groups
                .entry(pid)
                .or_default()
                .insert(name.to_string(), g);
        }
        let free = {
            let g = &self.groups[&pid][name];
            if g.open.contains_key(&id) {
                return Ok(false);
            }
            g.lanes.iter().position(|l| !l.open && l.last_end <= ts)
        };
        let lane = match free {
            Some(l) => l,
            None => self.new_lane(pid, name)?,
        };
        let g = self.groups.get_mut(&pid).and_then(|g| g.get_mut(name));
        let Some(g) = g else { return Ok(false) };
        g.lanes[lane].open = true;
        g.open.insert(id, lane);
        let track = g.lanes[lane].uuid;
        self.event_at(
            ts,
            TrackEvent {
                categories: categories(ev),
                name: Some(name.to_string()),
                r#type: Some(TrackEventType::SliceBegin as i32),
                track_uuid: Some(track),
                debug_annotations: annotations(ev.get("args")),
                ..Default::default()
            },
        )?;
        Ok(true)
    }

    /// A new lane of the async `(pid, name)`, described; its index.
    fn new_lane(&mut self, pid: i32, name: &str) -> io::Result<usize> {
        let uuid = self.uuid();
        let Some(g) = self.groups.get_mut(&pid).and_then(|g| g.get_mut(name)) else {
            return Err(io::Error::other("async lane of an unknown track"));
        };
        let n = g.lanes.len();
        g.lanes.push(Lane {
            uuid,
            open: false,
            last_end: 0,
        });
        let parent = g.uuid;
        self.describe(TrackDescriptor {
            uuid: Some(uuid),
            parent_uuid: Some(parent),
            name: Some(lane_name(name, n)),
            sibling_order_rank: i32::try_from(n).ok(),
            ..Default::default()
        })?;
        Ok(n)
    }

    /// `"e"`: the end of the open async slice with its `id`.
    fn async_end(&mut self, ev: &Value) -> io::Result<bool> {
        let Some((pid, name, id, ts)) = async_key(ev) else {
            return Ok(false);
        };
        let Some(g) = self.groups.get_mut(&pid).and_then(|g| g.get_mut(name)) else {
            return Ok(false);
        };
        let Some(lane) = g.open.remove(&id) else {
            return Ok(false);
        };
        let l = &mut g.lanes[lane];
        l.open = false;
        l.last_end = l.last_end.max(ts);
        let track = l.uuid;
        self.event_at(
            ts,
            TrackEvent {
                r#type: Some(TrackEventType::SliceEnd as i32),
                track_uuid: Some(track),
                ..Default::default()
            },
        )?;
        Ok(true)
    }

    /// `"C"`: one sample per series, each on its counter track.
    fn counter(&mut self, ev: &Value) -> io::Result<bool> {
        let (Some(pid), Some(name), Some(ts), Some(Value::Object(series))) = (
            id32(ev.get("pid")),
            str_of(ev, "name"),
            ns(ev.get("ts")),
            ev.get("args"),
        ) else {
            return Ok(false);
        };
        let mut all = !series.is_empty();
        for (s, v) in series {
            let Some(n) = v.as_number() else {
                all = false;
                continue;
            };
            let track = self.counter_track(pid, name, s)?;
            let (int, double) = match n.as_i64() {
                Some(i) => (Some(i), None),
                None => (None, n.as_f64()),
            };
            self.event_at(
                ts,
                TrackEvent {
                    r#type: Some(TrackEventType::Counter as i32),
                    track_uuid: Some(track),
                    counter_value: int,
                    double_counter_value: double,
                    ..Default::default()
                },
            )?;
        }
        Ok(all)
    }

    fn counter_track(&mut self, pid: i32, name: &str, series: &str) -> io::Result<u64> {
        let key = (pid, name.to_string(), series.to_string());
        if let Some(&u) = self.counters.get(&key) {
            return Ok(u);
        }
        let parent = self.process(pid, None)?;
        let uuid = self.uuid();
        self.counters.insert(key, uuid);
        self.describe(TrackDescriptor {
            uuid: Some(uuid),
            parent_uuid: Some(parent),
            name: Some(format!("{name} {series}")),
            counter: Some(CounterDescriptor {}),
            ..Default::default()
        })?;
        Ok(uuid)
    }
}

/// The name of lane `n` (from 0) of an async name: `name`, `name #2`, ...
fn lane_name(name: &str, n: usize) -> String {
    if n == 0 {
        name.to_string()
    } else {
        format!("{name} #{}", n + 1)
    }
}

fn add_flow(e: &mut TrackEvent, flow: u64, terminating: bool) {
    if terminating {
        e.terminating_flow_ids.push(flow);
    } else {
        e.flow_ids.push(flow);
    }
}

#[cfg(test)]
mod tests;
