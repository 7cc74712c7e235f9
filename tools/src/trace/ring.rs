//! ftrace's ring buffer pages, as `per_cpu/cpuN/trace_pipe_raw` hands them out: decoded
//! without trusting a byte.
//!
//! A page (a "sub-buffer") is a header and a run of events. The header's layout is read
//! from tracefs (`events/header_page`: `timestamp`, `commit` and `data`'s offsets and sizes),
//! never assumed. The `commit` word holds the bytes of event data in its low 27 bits and
//! two flags: bit 31, events were lost before this page; bit 30, their count is stored
//! right after the data.
//!
//! Each event starts with a 32-bit word, a 5-bit `type_len` and a 27-bit `time_delta`
//! (bitfield order follows the CPU's byte order: `type_len` is the low bits on a
//! little-endian machine) (`events/header_event` says so):
//! - 1 to 28: a data event of `type_len * 4` bytes after the word;
//! - 0: a data event whose length (plus 4) is in the next 32-bit word;
//! - 29: padding (a discarded event), its length in the next word; with a zero delta the
//!   rest of the page is empty;
//! - 30: a time extend: the next word, shifted left by 27, plus the delta, is added to the
//!   running time;
//! - 31: an absolute time stamp: the next word shifted left by 27, plus the delta; the top 5
//!   bits (not stored) are taken from the running time.
//!
//! A data event's time is the running time plus its delta; the running time starts at the
//! page's `timestamp`. Its bytes are the tracepoint record that `events/<sys>/<ev>/format`
//! describes, `common_type` first.

use super::format;

/// Bits of `time_delta`.
const TS_SHIFT: u32 = 27;
/// The event types that are not data.
const PADDING: u32 = 29;
/// See [`PADDING`].
const TIME_EXTEND: u32 = 30;
/// See [`PADDING`].
const TIME_STAMP: u32 = 31;
/// The data bytes of `commit`.
const COMMIT_MASK: u64 = (1 << 27) - 1;
/// `commit` flag: events were lost before this page.
const MISSED_EVENTS: u64 = 1 << 31;
/// `commit` flag: their count follows the data.
const MISSED_STORED: u64 = 1 << 30;
/// The time stamp bits an absolute stamp does not carry (5 top bits).
const TS_MSB: u64 = 0xf8 << 56;

/// Where a page's header fields lie (from `events/header_page`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageLayout {
    /// Offset of the u64 page time stamp.
    pub timestamp: usize,
    /// Offset of `commit`.
    pub commit: usize,
    /// Size of `commit` (4 or 8: a `local_t`).
    pub commit_size: usize,
    /// Offset of the first event.
    pub data: usize,
    /// Bytes of a whole page (header and data): what one read of `trace_pipe_raw` gives.
    pub page_size: usize,
}

impl PageLayout {
    /// The layout of a 64-bit kernel (what `header_page` says there).
    pub const NATIVE_64: PageLayout = PageLayout {
        timestamp: 0,
        commit: 8,
        commit_size: 8,
        data: 16,
        page_size: 4096,
    };

    /// Parses `events/header_page`; `None` when a needed field is missing or odd.
    pub fn parse(text: &str) -> Option<PageLayout> {
        // The file is written in the format files' field syntax: parse it as one.
        let f = format::parse("header_page", &format!("name: header_page\nID: 0\n{text}")).ok()?;
        let ts = f.field("timestamp")?;
        let commit = f.field("commit")?;
        let data = f.field("data")?;
        let page_size = data.offset.checked_add(data.size)?;
        (ts.size == 8 && matches!(commit.size, 4 | 8) && (64..=1 << 24).contains(&page_size))
            .then_some(PageLayout {
                timestamp: ts.offset,
                commit: commit.offset,
                commit_size: commit.size,
                data: data.offset,
                page_size,
            })
    }
}

/// What one page held besides its events.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PageInfo {
    /// Data events handed to the callback.
    pub events: u64,
    /// The kernel flagged events lost before this page.
    pub missed: bool,
    /// How many, when it stored the count.
    pub missed_count: Option<u64>,
    /// Bytes of the page that did not decode (an event running past the data, a length
    /// that makes no sense): the rest of the page is dropped and counted.
    pub corrupt_bytes: u64,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// `(type_len, time_delta)` of an event's first word.
fn split_header(word: u32) -> (u32, u64) {
    if cfg!(target_endian = "little") {
        (word & 0x1f, u64::from(word >> 5))
    } else {
        (word >> 27, u64::from(word & ((1 << 27) - 1)))
    }
}

/// Decodes one page: `each(time, record)` for every data event, in order.
pub fn decode_page(page: &[u8], l: &PageLayout, mut each: impl FnMut(u64, &[u8])) -> PageInfo {
    let mut info = PageInfo::default();
    let Some(mut time) = u64_at(page, l.timestamp) else {
        info.corrupt_bytes = page.len() as u64;
        return info;
    };
    let commit = match l.commit_size {
        8 => u64_at(page, l.commit),
        _ => u32_at(page, l.commit).map(u64::from),
    };
    let Some(commit) = commit else {
        info.corrupt_bytes = page.len() as u64;
        return info;
    };
    info.missed = commit & MISSED_EVENTS != 0;
    let size = (commit & COMMIT_MASK) as usize;
    let end = l.data.saturating_add(size);
    if end > page.len() {
        info.corrupt_bytes = page.len() as u64;
        return info;
    }
    if commit & MISSED_STORED != 0 {
        info.missed_count = match l.commit_size {
            8 => u64_at(page, end),
            _ => u32_at(page, end).map(u64::from),
        };
    }
    let mut pos = l.data;
    while pos < end {
        let Some(next) = event(page, pos, end, &mut time, &mut each, &mut info) else {
            info.corrupt_bytes += (end - pos) as u64;
            break;
        };
        if next <= pos {
            // A null padding: the rest of the page holds nothing.
            break;
        }
        pos = next;
    }
    info
}

/// Decodes the event at `pos`; returns where the next starts (`pos` itself at a null
/// padding), `None` when the event does not fit in the data.
fn event(
    page: &[u8],
    pos: usize,
    end: usize,
    time: &mut u64,
    each: &mut impl FnMut(u64, &[u8]),
    info: &mut PageInfo,
) -> Option<usize> {
    let (type_len, delta) = split_header(u32_at(page, pos).filter(|_| pos + 4 <= end)?);
    let body = pos + 4;
    let word = || {
        u32_at(page, body)
            .filter(|_| body + 4 <= end)
            .map(u64::from)
    };
    let (start, len) = match type_len {
        PADDING => {
            if delta == 0 {
                return Some(pos);
            }
            let len = usize::try_from(word()?).ok()?;
            let next = body.checked_add(len)?;
            return (next <= end).then_some(next);
        }
        TIME_EXTEND => {
            *time = time.wrapping_add((word()? << TS_SHIFT) + delta);
            return Some(body + 4);
        }
        TIME_STAMP => {
            let mut abs = (word()? << TS_SHIFT) + delta;
            if *time & TS_MSB != 0 {
                abs |= *time & TS_MSB;
                if abs < *time {
                    abs = abs.wrapping_add(1 << 59);
                }
            }
            *time = abs;
            return Some(body + 4);
        }
        0 => {
            let len = usize::try_from(word()?.checked_sub(4)?).ok()?;
            (body + 4, len.checked_add(3)? & !3)
        }
        n => (body, n as usize * 4),
    };
    let stop = start.checked_add(len)?;
    let record = page.get(start..stop).filter(|_| stop <= end)?;
    *time = time.wrapping_add(delta);
    info.events += 1;
    each(*time, record);
    Some(stop)
}

/// `common_pid` of a record (the thread that hit the tracepoint), by its format.
pub fn common_pid(f: &format::EventFormat, record: &[u8]) -> Option<u32> {
    f.int(record, "common_pid")
        .and_then(|p| u32::try_from(p).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER_PAGE: &str = "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n\
        \tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n\
        \tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n\
        \tfield: char data;\toffset:16;\tsize:4080;\tsigned:1;\n";

    fn word(type_len: u32, delta: u32) -> [u8; 4] {
        let w = if cfg!(target_endian = "little") {
            type_len | (delta << 5)
        } else {
            (type_len << 27) | delta
        };
        w.to_ne_bytes()
    }

    /// A page of `events` (already encoded) starting at `ts`, with `flags` on commit.
    fn page(ts: u64, events: &[u8], flags: u64) -> Vec<u8> {
        let mut p = vec![0u8; 4096];
        p[0..8].copy_from_slice(&ts.to_ne_bytes());
        p[8..16].copy_from_slice(&(events.len() as u64 | flags).to_ne_bytes());
        p[16..16 + events.len()].copy_from_slice(events);
        p
    }

    fn collect(p: &[u8]) -> (Vec<(u64, Vec<u8>)>, PageInfo) {
        let mut v = Vec::new();
        let i = decode_page(p, &PageLayout::NATIVE_64, |t, r| v.push((t, r.to_vec())));
        (v, i)
    }

    #[test]
    fn the_header_page_file_gives_the_layout() {
        assert_eq!(PageLayout::parse(HEADER_PAGE), Some(PageLayout::NATIVE_64));
        let small = HEADER_PAGE
            .replace(
                "local_t commit;\toffset:8;\tsize:8",
                "local_t commit;\toffset:8;\tsize:4",
            )
            .replace("offset:16;\tsize:4080", "offset:12;\tsize:4084");
        let l = PageLayout::parse(&small).unwrap();
        assert_eq!((l.commit_size, l.data, l.page_size), (4, 12, 4096));
        assert_eq!(PageLayout::parse("garbage"), None);
        assert_eq!(PageLayout::parse(&HEADER_PAGE.replace("commit", "x")), None);
    }

    /// Every event type: small and long data events, a time extend, an absolute stamp, a
    /// discarded event and the null padding that ends the page.
    #[test]
    fn every_event_type_decodes() {
        let mut e = Vec::new();
        e.extend(word(2, 5)); // 8 bytes at ts+5
        e.extend([1, 0, 0, 0, 2, 0, 0, 0]);
        e.extend(word(30, 3)); // time extend: + (1 << 27) + 3
        e.extend(1u32.to_ne_bytes());
        e.extend(word(0, 7)); // long event: length word = 4 + 12
        e.extend(16u32.to_ne_bytes());
        e.extend([9u8; 12]);
        e.extend(word(PADDING, 1)); // discarded: 8 bytes skipped, delta not counted
        e.extend(8u32.to_ne_bytes());
        e.extend([0xee; 4]);
        e.extend(word(31, 10)); // absolute: (2 << 27) + 10
        e.extend(2u32.to_ne_bytes());
        e.extend(word(1, 1));
        e.extend([7, 7, 7, 7]);
        e.extend(word(PADDING, 0)); // the rest is empty
        e.extend(word(1, 1));
        e.extend([6, 6, 6, 6]);
        let p = page(1000, &e, 0);
        let (v, i) = collect(&p);
        assert_eq!(i.events, 3, "{v:?}");
        assert_eq!(v[0], (1005, vec![1, 0, 0, 0, 2, 0, 0, 0]));
        assert_eq!(v[1], (1005 + 3 + (1 << 27) + 7, vec![9u8; 12]));
        assert_eq!(v[2], ((2 << 27) + 10 + 1, vec![7, 7, 7, 7]));
        assert_eq!((i.missed, i.corrupt_bytes), (false, 0));
    }

    #[test]
    fn lost_events_are_flagged_and_counted() {
        let mut e = Vec::new();
        e.extend(word(1, 0));
        e.extend([1, 2, 3, 4]);
        let mut p = page(5, &e, MISSED_EVENTS | MISSED_STORED);
        p[16 + e.len()..16 + e.len() + 8].copy_from_slice(&42u64.to_ne_bytes());
        let (v, i) = collect(&p);
        assert_eq!(v.len(), 1);
        assert!(i.missed);
        assert_eq!(i.missed_count, Some(42));
        let (_, i) = collect(&page(5, &e, MISSED_EVENTS));
        assert_eq!((i.missed, i.missed_count), (true, None));
    }

    /// Hostile pages: a commit beyond the page, an event longer than the data, a length word
    /// of 0 or 3 (underflow), a truncated header. Nothing panics; the rest is counted.
    #[test]
    fn broken_pages_are_counted_not_trusted() {
        let p = page(0, &[], 5000);
        assert_eq!(collect(&p).1.corrupt_bytes, 4096);
        let mut e = Vec::new();
        e.extend(word(28, 0)); // claims 112 bytes, 4 follow
        e.extend([0; 4]);
        let (v, i) = collect(&page(0, &e, 0));
        assert!(v.is_empty());
        assert_eq!(i.corrupt_bytes, 8);
        for bad in [0u32, 3, u32::MAX] {
            let mut e = Vec::new();
            e.extend(word(0, 0));
            e.extend(bad.to_ne_bytes());
            let (v, i) = collect(&page(0, &e, 0));
            assert!(v.is_empty());
            assert!(i.corrupt_bytes > 0, "length word {bad}");
        }
        assert_eq!(collect(&[0u8; 10]).1.corrupt_bytes, 10);
        let mut e = word(2, 0).to_vec();
        e.extend([0; 2]);
        assert!(collect(&page(0, &e, 0)).1.corrupt_bytes > 0);
    }

    /// Arbitrary bytes never panic and never yield a record outside the page.
    #[test]
    fn random_pages_never_panic() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..2000 {
            let mut p = vec![0u8; 256];
            for b in p.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            let c = (x % 260).to_ne_bytes();
            p[8..16].copy_from_slice(&c);
            decode_page(&p, &PageLayout::NATIVE_64, |_, r| assert!(r.len() <= 256));
        }
    }
}
