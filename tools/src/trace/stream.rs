//! The way from the kernel's rings to the output, with memory that does not grow with the
//! recording's length.
//!
//! The recording thread only moves bytes: each page read from a CPU's ring (ftrace) or
//! each chunk of perf records goes, as it is, to a spill file (unlinked, in the output's
//! directory, like trace-cmd's per-CPU files), followed at every round of reads by a mark
//! with the time the round began. A decoder thread follows the file: it decodes the pages
//! into events, orders them across CPUs and hands them to a [`Sink`] that writes the
//! trace out as they come. A busy decoder only falls behind (the file holds what it has not
//! read yet, and the part it has read is given back to the file system): the rings are
//! drained at the pace of the kernel, never at the pace of the decoding, so nothing is lost
//! to a slow output. While the recording runs, the decoder lets up to [`HOLD`] bytes gather
//! before it decodes them (see there): the output follows in steps of that size, and all of
//! it once the recording ends.
//!
//! Order: events of one CPU come in time order, events of different CPUs do not. An event
//! read in round k was written before round k's reads ended, so once the mark of round k+1
//! is read, every event stamped before round k began (the mark before) has been read, from
//! every CPU: those are sorted and handed on, the rest wait for the next mark. The decoder
//! holds at most two rounds of events.

use super::alloc;
use super::format::EventFormat;
use super::ftrace::Tgids;
use super::perf::{self, Record};
use super::record::{Event, MemorySample, decode_raw};
use super::ring::{self, PageLayout};
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::{Condvar, Mutex, PoisonError};

/// Where the decoded recording goes, event by event.
pub trait Sink {
    /// One event, in time order.
    fn event(&mut self, e: &Event);
    /// One sample of a process's GPU memory (in the sampler's order).
    fn memory(&mut self, m: &MemorySample);
}

/// Collects everything (tests, and callers that want the events in memory).
#[derive(Debug, Default)]
pub struct Collect {
    /// The events, in time order.
    pub events: Vec<Event>,
    /// The memory samples.
    pub memory: Vec<MemorySample>,
}

impl Sink for Collect {
    fn event(&mut self, e: &Event) {
        self.events.push(e.clone());
    }
    fn memory(&mut self, m: &MemorySample) {
        self.memory.push(m.clone());
    }
}

/// A spill record's kind.
const PAGE: u32 = 1;
/// See [`PAGE`].
const PERF: u32 = 2;
/// See [`PAGE`].
const MARK: u32 = 3;
/// Bytes of a record's header: kind, CPU, length (or a mark's time).
const HEADER: usize = 16;
/// The decoder gives back the file's space it has read, this much at a time.
const PUNCH: u64 = 8 << 20;

/// The spill file and what the recording thread has written to it.
#[derive(Debug)]
pub struct Spill {
    file: File,
    state: Mutex<SpillState>,
    more: Condvar,
}

#[derive(Debug, Default)]
struct SpillState {
    written: u64,
    done: bool,
    /// A write failed (the file system is full): the recording stops writing.
    failed: Option<std::io::ErrorKind>,
}

impl Spill {
    /// An unlinked file in `dir` (`O_TMPFILE`, else a file made and unlinked at once).
    ///
    /// # Errors
    /// The I/O error of the file system.
    pub fn new(dir: &std::path::Path) -> std::io::Result<Spill> {
        use rustix::fs::{Mode, OFlags};
        let file = match rustix::fs::open(
            dir,
            OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        ) {
            Ok(fd) => File::from(fd),
            Err(_) => {
                let path = dir.join(format!(
                    ".drmtool-trace-spill.{}.{}",
                    std::process::id(),
                    super::record::monotonic_ns()
                ));
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(&path)?;
                std::fs::remove_file(&path)?;
                f
            }
        };
        Ok(Spill {
            file,
            state: Mutex::new(SpillState::default()),
            more: Condvar::new(),
        })
    }

    fn append(&self, kind: u32, cpu: u32, word: u64, body: &[u8]) {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if st.failed.is_some() {
            return;
        }
        let mut h = [0u8; HEADER];
        h[0..4].copy_from_slice(&kind.to_ne_bytes());
        h[4..8].copy_from_slice(&cpu.to_ne_bytes());
        h[8..16].copy_from_slice(&word.to_ne_bytes());
        let at = st.written;
        let r = self
            .file
            .write_all_at(&h, at)
            .and_then(|()| self.file.write_all_at(body, at + HEADER as u64));
        match r {
            Ok(()) => st.written = at + (HEADER + body.len()) as u64,
            Err(e) => st.failed = Some(e.kind()),
        }
        drop(st);
        self.more.notify_one();
    }

    /// Appends a page of CPU `cpu`'s ftrace ring.
    pub fn page(&self, cpu: u32, page: &[u8]) {
        self.append(PAGE, cpu, page.len() as u64, page);
    }

    /// Appends a chunk of perf records of CPU `cpu`.
    pub fn perf(&self, cpu: u32, records: &[u8]) {
        self.append(PERF, cpu, records.len() as u64, records);
    }

    /// Appends a round mark: a round of reads began at `time` (`CLOCK_MONOTONIC` ns).
    pub fn mark(&self, time: u64) {
        self.append(MARK, 0, time, &[]);
    }

    /// Nothing more will be written.
    pub fn finish(&self) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .done = true;
        self.more.notify_all();
    }

    /// A write that failed, if one did.
    pub fn failed(&self) -> Option<std::io::ErrorKind> {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .failed
    }

    /// Waits (200 ms at most) unless more than `hold` bytes past `read` are written or
    /// the writing is done; returns what is written and whether it is done.
    fn wait_more(&self, read: u64, hold: u64) -> (u64, bool) {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if st.written.saturating_sub(read) <= hold && !st.done && st.failed.is_none() {
            st = self
                .more
                .wait_timeout(st, std::time::Duration::from_millis(200))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        (st.written, st.done || st.failed.is_some())
    }
}

/// How the records in the spill are to be read.
#[derive(Debug)]
pub struct Decoding<'a> {
    /// The tracepoints opened, by id.
    pub formats: &'a BTreeMap<u32, EventFormat>,
    /// The ftrace page layout (ftrace path).
    pub layout: PageLayout,
    /// Resolves threads to processes (ftrace path).
    pub tgids: Option<Tgids>,
    /// Undecoded bytes the decoder lets gather while the recording runs before it decodes
    /// ([`HOLD`] for a recording; 0 decodes at once).
    pub hold: u64,
}

/// How much raw recording the decoder lets gather before it decodes, while the recording
/// runs: decoding is CPU work, and on a machine whose CPUs the traced work needs (a guest
/// whose vCPUs share one host thread, as under QEMU's TCG) it would slow that work; held
/// back, a short recording is decoded after its workload, as trace-cmd's is at report time,
/// and a long one in steps of this size, so neither memory nor the spill grows past it. A
/// recording of allocation failures decodes at once instead: each failure's process (comm,
/// cgroup) is read from /proc when it is decoded, while it may still run.
pub const HOLD: u64 = 8 << 20;

/// What the decoding counted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    /// Events handed to the sink.
    pub events: u64,
    /// Records whose `common_type` named no opened tracepoint.
    pub undecoded: u64,
    /// Records dropped by the recording's own filter ([`alloc::keep`]).
    pub filtered: u64,
    /// Bytes that did not decode.
    pub corrupt_bytes: u64,
    /// ftrace pages flagged as having lost events before them.
    pub missed_pages: u64,
    /// Events lost as the pages or perf's `PERF_RECORD_LOST` records say.
    pub lost: u64,
    /// Bytes of the spill file at the end (the raw recording).
    pub spill_bytes: u64,
}

/// Orders events across CPUs (see the module doc).
#[derive(Debug, Default)]
struct Merger {
    pending: Vec<Event>,
    before: u64,
}

impl Merger {
    fn mark(&mut self, time: u64, sink: &mut dyn Sink) {
        let cut = self.before;
        self.pending.sort_by_key(|e| e.time);
        let n = self.pending.partition_point(|e| e.time < cut);
        for e in self.pending.drain(..n) {
            sink.event(&e);
        }
        self.before = time;
    }

    fn flush(&mut self, sink: &mut dyn Sink) {
        self.pending.sort_by_key(|e| e.time);
        for e in self.pending.drain(..) {
            sink.event(&e);
        }
    }
}

/// Follows `spill` until its writer finishes, decoding into `sink`; memory samples that
/// arrive on `memory` are handed on as they come.
pub fn decode(
    spill: &Spill,
    d: &mut Decoding<'_>,
    memory: &std::sync::mpsc::Receiver<MemorySample>,
    sink: &mut dyn Sink,
) -> Decoded {
    let mut out = Decoded::default();
    let mut merger = Merger::default();
    let mut pos = 0u64;
    let mut punched = 0u64;
    let mut body = Vec::new();
    let mut records = Vec::new();
    loop {
        while let Ok(m) = memory.try_recv() {
            sink.memory(&m);
        }
        let (written, done) = spill.wait_more(pos, d.hold);
        if !done && written.saturating_sub(pos) <= d.hold {
            continue;
        }
        while pos + HEADER as u64 <= written {
            let mut h = [0u8; HEADER];
            if spill.file.read_exact_at(&mut h, pos).is_err() {
                break;
            }
            let kind = u32::from_ne_bytes(h[0..4].try_into().unwrap_or_default());
            let cpu = u32::from_ne_bytes(h[4..8].try_into().unwrap_or_default());
            let word = u64::from_ne_bytes(h[8..16].try_into().unwrap_or_default());
            if kind == MARK {
                merger.mark(word, sink);
                if let Some(t) = d.tgids.as_mut() {
                    t.refresh();
                }
                pos += HEADER as u64;
                continue;
            }
            let len = usize::try_from(word).unwrap_or(usize::MAX).min(64 << 20);
            body.resize(len, 0);
            if spill
                .file
                .read_exact_at(&mut body, pos + HEADER as u64)
                .is_err()
            {
                break;
            }
            pos += (HEADER + len) as u64;
            match kind {
                PAGE => page(&body, cpu, d, &mut merger, &mut out),
                PERF => perf_chunk(&body, d, &mut records, &mut merger, &mut out),
                _ => out.corrupt_bytes += len as u64,
            }
        }
        if pos >= punched + PUNCH {
            give_back(&spill.file, pos);
            punched = pos;
        }
        if done && pos + HEADER as u64 > written {
            out.spill_bytes = written;
            break;
        }
    }
    while let Ok(m) = memory.try_recv() {
        sink.memory(&m);
    }
    merger.flush(sink);
    out
}

/// Frees the file's blocks before `upto` (already decoded); a file system that cannot is
/// left as it is.
fn give_back(file: &File, upto: u64) {
    use rustix::fs::FallocateFlags;
    let _ = rustix::fs::fallocate(
        file,
        FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
        0,
        upto,
    );
}

fn keep(e: Event, merger: &mut Merger, out: &mut Decoded) {
    if alloc::keep(&e) {
        out.events += 1;
        merger.pending.push(e);
    } else {
        out.filtered += 1;
    }
}

fn page(body: &[u8], cpu: u32, d: &mut Decoding<'_>, merger: &mut Merger, out: &mut Decoded) {
    let formats = d.formats;
    let mut undecoded = 0;
    let tgids = &mut d.tgids;
    let mut got = Vec::new();
    let info = ring::decode_page(body, &d.layout, |time, rec| {
        let ty = rec
            .get(0..2)
            .map(|b| u32::from(u16::from_ne_bytes([b[0], b[1]])));
        let Some(f) = ty.and_then(|t| formats.get(&t)) else {
            undecoded += 1;
            return;
        };
        let tid = ring::common_pid(f, rec).unwrap_or(0);
        let pid = tgids.as_mut().map_or(tid, |t| t.of(tid));
        if let Some(e) = decode_raw(formats, rec, time, pid, tid, cpu) {
            got.push(e);
        }
    });
    for e in got {
        keep(e, merger, out);
    }
    out.undecoded += undecoded;
    out.corrupt_bytes += info.corrupt_bytes;
    if info.missed {
        out.missed_pages += 1;
        out.lost = out.lost.saturating_add(info.missed_count.unwrap_or(0));
    }
}

fn perf_chunk(
    body: &[u8],
    d: &Decoding<'_>,
    records: &mut Vec<Record>,
    merger: &mut Merger,
    out: &mut Decoded,
) {
    records.clear();
    if let Err(c) = perf::parse(body, records) {
        out.corrupt_bytes += (body.len() - c.at) as u64;
    }
    for r in records.drain(..) {
        match r {
            Record::Sample(s) => match decode_raw(d.formats, &s.raw, s.time, s.pid, s.tid, s.cpu) {
                Some(e) => keep(e, merger, out),
                None => out.undecoded += 1,
            },
            Record::Lost(n) => out.lost = out.lost.saturating_add(n),
            Record::Other(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(time: u64, cpu: u32) -> Event {
        let mut e = Event::for_test("dma_fence", "dma_fence_init", time, 1, &[]);
        e.cpu = cpu;
        e
    }

    /// Events of two CPUs that arrive out of order come out in time order, and only once
    /// the mark after the round that could still hold earlier ones was read.
    #[test]
    fn the_merger_orders_across_cpus_by_marks() {
        let mut m = Merger::default();
        let mut c = Collect::default();
        m.mark(100, &mut c);
        m.pending.extend([ev(150, 1), ev(120, 0), ev(210, 0)]);
        m.mark(200, &mut c);
        assert!(c.events.is_empty(), "nothing before 100 yet");
        m.pending.extend([ev(190, 1), ev(260, 1)]);
        m.mark(300, &mut c);
        let times: Vec<u64> = c.events.iter().map(|e| e.time).collect();
        assert_eq!(times, [120, 150, 190]);
        m.flush(&mut c);
        let times: Vec<u64> = c.events.iter().map(|e| e.time).collect();
        assert_eq!(times, [120, 150, 190, 210, 260]);
    }

    /// The spill carries pages and marks in order to a decoder on another thread, and a
    /// page that is garbage is counted, not trusted.
    #[test]
    fn the_spill_feeds_the_decoder() {
        let spill = Spill::new(&std::env::temp_dir()).unwrap();
        let formats = BTreeMap::new();
        let (_tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            let (spill_at, formats_at) = (&spill, &formats);
            let h = s.spawn(move || {
                let mut d = Decoding {
                    formats: formats_at,
                    layout: PageLayout::NATIVE_64,
                    tgids: None,
                    hold: 0,
                };
                let mut c = Collect::default();
                let r = decode(spill_at, &mut d, &rx, &mut c);
                (r, c.events.len())
            });
            spill.mark(1);
            // A page with one event of an unknown type, then one with a commit past the end.
            let mut p = vec![0u8; 4096];
            p[8..16].copy_from_slice(&8u64.to_ne_bytes());
            let w: u32 = if cfg!(target_endian = "little") {
                1
            } else {
                1 << 27
            };
            p[16..20].copy_from_slice(&w.to_ne_bytes());
            spill.page(0, &p);
            p[8..16].copy_from_slice(&5000u64.to_ne_bytes());
            spill.page(1, &p);
            spill.mark(2);
            spill.finish();
            let (r, n) = h.join().unwrap();
            assert_eq!(n, 0);
            assert_eq!(r.undecoded, 1);
            assert_eq!(r.corrupt_bytes, 4096);
            assert_eq!(r.spill_bytes, 2 * 16 + 2 * (16 + 4096));
        });
    }
}
