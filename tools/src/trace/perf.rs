//! perf's ring buffer: one tracepoint recorder per CPU (`perf_event_open(PERF_TYPE_TRACEPOINT,
//! pid -1, cpu N)`, every event of a CPU redirected into that CPU's first ring with
//! `PERF_EVENT_IOC_SET_OUTPUT`), and the parser of the records the kernel writes there.
//!
//! The ring is a [`drm_gem::Mmap`] of the first event's fd (`1 + 2^n` pages, read-write: the
//! kernel then never overwrites what was not consumed, and counts what it had to drop in
//! `PERF_RECORD_LOST`). Its control page's `data_head` is read, then the bytes up to it,
//! then `data_tail` is written back: with fences between, as perf(1) does, and with
//! drm-gem's volatile copies, so nothing here needs unsafe code. The records are parsed
//! from a private copy as untrusted bytes (every size checked).

use super::TraceError;
use super::format::EventFormat;
use crate::sys_call;
use drm_gem::{Mmap, MmapOptions, Prot, Sharing};
use ioctl_sys::perf_event as pe;
use rustix::io::Errno;
use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{Ordering, fence};
use std::time::Duration;

/// What each sample carries: pid/tid, time, cpu and the raw tracepoint record.
pub const SAMPLE_TYPE: u64 =
    (pe::PERF_SAMPLE_TID | pe::PERF_SAMPLE_TIME | pe::PERF_SAMPLE_CPU | pe::PERF_SAMPLE_RAW) as u64;

/// One tracepoint hit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// The process (tgid) that was running.
    pub pid: u32,
    /// Its thread.
    pub tid: u32,
    /// `CLOCK_MONOTONIC` nanoseconds.
    pub time: u64,
    /// The CPU.
    pub cpu: u32,
    /// The tracepoint record (`common_type` first).
    pub raw: Vec<u8>,
}

/// One ring-buffer record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// `PERF_RECORD_SAMPLE`.
    Sample(Sample),
    /// `PERF_RECORD_LOST` or `PERF_RECORD_LOST_SAMPLES`: this many samples were dropped.
    Lost(u64),
    /// Another record type, skipped.
    Other(u32),
}

/// Why the bytes of a ring could not all be parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Corrupt {
    /// Offset of the record that did not fit.
    pub at: usize,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Parses a sample's body (after the 8-byte header) laid out as [`SAMPLE_TYPE`] asks.
fn sample(body: &[u8]) -> Option<Sample> {
    let pid = u32_at(body, 0)?;
    let tid = u32_at(body, 4)?;
    let time = u64_at(body, 8)?;
    let cpu = u32_at(body, 16)?;
    let size = u32_at(body, 24)? as usize;
    let raw = body.get(28..28usize.checked_add(size)?)?.to_vec();
    Some(Sample {
        pid,
        tid,
        time,
        cpu,
        raw,
    })
}

/// Parses consecutive records from `buf` (the bytes between a ring's tail and head, in
/// order), appending them to `out`.
///
/// # Errors
/// [`Corrupt`] at the first record whose size is under 8 bytes, runs past `buf`, or whose
/// sample body does not fit its size; the records before it are in `out`.
pub fn parse(buf: &[u8], out: &mut Vec<Record>) -> Result<(), Corrupt> {
    let mut at = 0;
    while at < buf.len() {
        let corrupt = Corrupt { at };
        let ty = u32_at(buf, at).ok_or(corrupt)?;
        let size = usize::from(u16_at(buf, at + 6).ok_or(corrupt)?);
        if size < 8 || at + size > buf.len() {
            return Err(corrupt);
        }
        let body = &buf[at + 8..at + size];
        out.push(match ty {
            pe::PERF_RECORD_SAMPLE => Record::Sample(sample(body).ok_or(corrupt)?),
            // { u64 id; u64 lost; }
            pe::PERF_RECORD_LOST => Record::Lost(u64_at(body, 8).ok_or(corrupt)?),
            // { u64 lost; }
            pe::PERF_RECORD_LOST_SAMPLES => Record::Lost(u64_at(body, 0).ok_or(corrupt)?),
            other => Record::Other(other),
        });
        at += size;
    }
    Ok(())
}

/// The `perf_event_attr` of one tracepoint, sampled at every hit, `CLOCK_MONOTONIC`
/// timestamps (the clock of vblank timestamps and of `drmtool`'s own), created disabled.
pub fn tracepoint_attr(id: u32, wakeup_bytes: u32) -> pe::perf_event_attr {
    let mut a = pe::perf_event_attr {
        type_: pe::PERF_TYPE_TRACEPOINT,
        size: core::mem::size_of::<pe::perf_event_attr>() as u32,
        config: u64::from(id),
        sample_type: SAMPLE_TYPE,
        clockid: libc::CLOCK_MONOTONIC,
        ..Default::default()
    };
    a.__bindgen_anon_1.sample_period = 1;
    a.__bindgen_anon_2.wakeup_watermark = wakeup_bytes;
    a.set_disabled(1);
    a.set_watermark(1);
    a.set_use_clockid(1);
    a
}

/// One CPU's ring: the mapping of its first event's fd.
#[derive(Debug)]
pub struct Ring {
    map: Mmap,
    page: usize,
    data_size: usize,
}

const HEAD: usize = core::mem::offset_of!(pe::perf_event_mmap_page, data_head);
const TAIL: usize = core::mem::offset_of!(pe::perf_event_mmap_page, data_tail);

impl Ring {
    /// Maps `1 + data_pages` pages of `fd` (`data_pages` a power of two).
    ///
    /// # Errors
    /// drm-gem's mmap error (`EPERM` past `perf_event_mlock_kb` for a user without
    /// CAP_IPC_LOCK, `EINVAL` for a size that is not a power of two).
    pub fn new(fd: &OwnedFd, data_pages: usize) -> drm_gem::Result<Self> {
        let page = rustix::param::page_size();
        let len = page * (1 + data_pages);
        let map = Mmap::map(
            fd.as_fd(),
            0,
            len,
            Prot::READ | Prot::WRITE,
            Sharing::Shared,
            MmapOptions::empty(),
        )?;
        Ok(Self {
            map,
            page,
            data_size: page * data_pages,
        })
    }

    fn word(&self, at: usize) -> u64 {
        let mut b = [0u8; 8];
        // In range: the control page is the first page of the mapping.
        let _ = self.map.read_at(at, &mut b);
        u64::from_ne_bytes(b)
    }

    /// Appends the bytes the kernel has written since the last call to `out` (in order,
    /// unwrapped), and hands their space back to the kernel. Returns how many.
    pub fn drain(&mut self, out: &mut Vec<u8>) -> usize {
        let head = self.word(HEAD);
        // The data bytes are read after data_head (the kernel's smp_wmb pairs with this).
        fence(Ordering::Acquire);
        let tail = self.word(TAIL);
        let n = head.wrapping_sub(tail);
        let size = self.data_size as u64;
        if n == 0 || n > size {
            // n > size: a control page no kernel wrote; drop it all (counted by the caller
            // as a corrupt ring).
            if n > size {
                self.set_tail(head);
            }
            return 0;
        }
        let n = n as usize;
        let start = (tail % size) as usize;
        let first = n.min(self.data_size - start);
        let at = out.len();
        out.resize(at + n, 0);
        let _ = self
            .map
            .read_at(self.page + start, &mut out[at..at + first]);
        if first < n {
            let _ = self.map.read_at(self.page, &mut out[at + first..at + n]);
        }
        // Every read of the data is done before the kernel may reuse it.
        fence(Ordering::SeqCst);
        self.set_tail(head);
        n
    }

    fn set_tail(&mut self, v: u64) {
        let _ = self.map.write_at(TAIL, &v.to_ne_bytes());
    }
}

/// Opens tracepoint `id` on `cpu` for every process (`pid -1`), close-on-exec.
///
/// # Errors
/// perf_event_open's errno: `EACCES`/`EPERM` without CAP_PERFMON (or CAP_SYS_ADMIN) when
/// `perf_event_paranoid` > -1, `ENOENT`/`EINVAL` for an id this kernel does not have,
/// `ENODEV` for an offline CPU, `EMFILE` out of fds.
pub fn open_tracepoint(id: u32, cpu: u32, wakeup_bytes: u32) -> Result<OwnedFd, Errno> {
    let attr = tracepoint_attr(id, wakeup_bytes);
    sys_call::perf_event_open(&attr, -1, cpu, pe::PERF_FLAG_FD_CLOEXEC)
}

/// The perf side of a recording: every event fd and one ring per CPU.
pub struct Session {
    /// Event fds whose output goes to another fd's ring, with their tracepoint ids.
    fds: Vec<(OwnedFd, u32)>,
    /// Each CPU's first event fd, its ring, its tracepoint id.
    rings: Vec<(OwnedFd, Ring, u32)>,
    /// Tracepoints whose kernel filter this kernel refused (the recording filters them).
    refused: std::collections::BTreeSet<String>,
    /// The CPU of each ring.
    cpus: Vec<u32>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("rings", &self.rings.len())
            .field("fds", &self.fds.len())
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Opens every tracepoint of `formats` on every CPU of `cpus`, a ring of `pages` per CPU.
    ///
    /// # Errors
    /// [`TraceError`] when perf refuses a tracepoint, an ioctl or a ring.
    pub fn open(
        formats: &BTreeMap<u32, EventFormat>,
        cpus: &[u32],
        pages: usize,
    ) -> Result<Self, TraceError> {
        let page = rustix::param::page_size();
        let wakeup = u32::try_from(page * pages / 4).unwrap_or(u32::MAX);
        let mut s = Session {
            fds: Vec::new(),
            rings: Vec::new(),
            refused: std::collections::BTreeSet::new(),
            cpus: cpus.to_vec(),
        };
        for &cpu in cpus {
            let mut leader: Option<usize> = None;
            for (&id, f) in formats {
                let fd = open_tracepoint(id, cpu, wakeup).map_err(|e| TraceError::Open {
                    event: format!("{}:{}", f.system, f.name),
                    cpu,
                    errno: e,
                })?;
                if let Some(filter) = super::alloc::filter_of(f)
                    && sys_call::perf_set_filter(fd.as_fd(), filter).is_err()
                {
                    s.refused.insert(format!("{}:{}", f.system, f.name));
                }
                match leader {
                    None => {
                        let ring = Ring::new(&fd, pages).map_err(|e| TraceError::Ring {
                            cpu,
                            error: e.to_string(),
                        })?;
                        leader = Some(s.rings.len());
                        s.rings.push((fd, ring, id));
                    }
                    Some(l) => {
                        let target = s.rings[l].0.as_fd();
                        sys_call::perf_ioctl(
                            fd.as_fd(),
                            pe::PERF_EVENT_IOC_SET_OUTPUT,
                            target_raw(target),
                        )
                        .map_err(|e| TraceError::Ioctl {
                            ioctl: "PERF_EVENT_IOC_SET_OUTPUT",
                            errno: e,
                        })?;
                        s.fds.push((fd, id));
                    }
                }
            }
        }
        Ok(s)
    }

    fn all(&self) -> impl Iterator<Item = (&OwnedFd, u32)> {
        self.rings
            .iter()
            .map(|(f, _, id)| (f, *id))
            .chain(self.fds.iter().map(|(f, id)| (f, *id)))
    }

    /// How often each tracepoint fired while enabled, from the events' own counters (a
    /// sampling event still counts every hit): the truth the kept samples are checked
    /// against, since a ring that stays full to the end never gets the `PERF_RECORD_LOST`
    /// of its last drops. A counter that cannot be read is left out.
    pub fn fired(&self) -> BTreeMap<u32, u64> {
        let mut m = BTreeMap::new();
        for (fd, id) in self.all() {
            let mut b = [0u8; 8];
            let mut r = rustix::io::read(fd, &mut b);
            for _ in 0..1000 {
                if r != Err(Errno::INTR) {
                    break;
                }
                r = rustix::io::read(fd, &mut b);
            }
            if r == Ok(8) {
                *m.entry(id).or_default() += u64::from_ne_bytes(b);
            }
        }
        m
    }

    /// Enables or disables every event.
    ///
    /// # Errors
    /// [`TraceError::Ioctl`] when the kernel refuses.
    pub fn set(&self, on: bool) -> Result<(), TraceError> {
        let (req, name) = if on {
            (pe::PERF_EVENT_IOC_ENABLE, "PERF_EVENT_IOC_ENABLE")
        } else {
            (pe::PERF_EVENT_IOC_DISABLE, "PERF_EVENT_IOC_DISABLE")
        };
        for (fd, _) in self.all() {
            sys_call::perf_ioctl(fd.as_fd(), req, 0).map_err(|e| TraceError::Ioctl {
                ioctl: name,
                errno: e,
            })?;
        }
        Ok(())
    }

    /// Moves what every ring holds to the spill, a chunk per CPU.
    pub fn drain(&mut self, buf: &mut Vec<u8>, spill: &super::stream::Spill) {
        for (i, (_, ring, _)) in self.rings.iter_mut().enumerate() {
            buf.clear();
            ring.drain(buf);
            if !buf.is_empty() {
                spill.perf(self.cpus.get(i).copied().unwrap_or(0), buf);
            }
        }
    }

    /// Tracepoints whose kernel filter this kernel refused.
    pub fn refused(&self) -> Vec<String> {
        self.refused.iter().cloned().collect()
    }

    /// Waits until a ring passes its watermark or `timeout` passes.
    pub fn wait(&self, timeout: Duration) {
        use rustix::event::{PollFd, PollFlags, poll};
        let mut fds: Vec<PollFd<'_>> = self
            .rings
            .iter()
            .map(|(f, _, _)| PollFd::new(f, PollFlags::IN))
            .collect();
        let ts = rustix::time::Timespec {
            tv_sec: timeout.as_secs() as i64,
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        // EINTR: the caller's loop goes round again against its own deadline.
        let _ = poll(&mut fds, Some(&ts));
    }
}

fn target_raw(fd: std::os::fd::BorrowedFd<'_>) -> libc::c_ulong {
    use std::os::fd::AsRawFd;
    fd.as_raw_fd() as libc::c_ulong
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(ty: u32, size: u16) -> Vec<u8> {
        let mut h = ty.to_ne_bytes().to_vec();
        h.extend_from_slice(&0u16.to_ne_bytes());
        h.extend_from_slice(&size.to_ne_bytes());
        h
    }

    fn sample_record(pid: u32, time: u64, raw: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&pid.to_ne_bytes());
        body.extend_from_slice(&(pid + 1).to_ne_bytes());
        body.extend_from_slice(&time.to_ne_bytes());
        body.extend_from_slice(&1u32.to_ne_bytes());
        body.extend_from_slice(&0u32.to_ne_bytes());
        body.extend_from_slice(&(raw.len() as u32).to_ne_bytes());
        body.extend_from_slice(raw);
        while (body.len() + 8) % 8 != 0 {
            body.push(0);
        }
        let mut r = header(pe::PERF_RECORD_SAMPLE, (body.len() + 8) as u16);
        r.extend_from_slice(&body);
        r
    }

    #[test]
    fn parses_samples_lost_and_other_records() {
        let mut buf = sample_record(10, 1000, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        let mut lost = header(pe::PERF_RECORD_LOST, 24);
        lost.extend_from_slice(&7u64.to_ne_bytes());
        lost.extend_from_slice(&42u64.to_ne_bytes());
        buf.extend_from_slice(&lost);
        let mut other = header(3, 16);
        other.extend_from_slice(&[0; 8]);
        buf.extend_from_slice(&other);
        let mut out = Vec::new();
        parse(&buf, &mut out).unwrap();
        assert_eq!(out.len(), 3);
        let Record::Sample(s) = &out[0] else {
            panic!("{out:?}")
        };
        assert_eq!((s.pid, s.tid, s.time, s.cpu), (10, 11, 1000, 1));
        assert_eq!(s.raw, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        assert_eq!(out[1], Record::Lost(42));
        assert_eq!(out[2], Record::Other(3));
    }

    #[test]
    fn corrupt_records_stop_the_parse_where_they_start() {
        let good = sample_record(1, 5, &[0; 4]);
        let mut out = Vec::new();
        // A size under the header's.
        let mut buf = good.clone();
        buf.extend_from_slice(&header(9, 4));
        assert_eq!(parse(&buf, &mut out), Err(Corrupt { at: good.len() }));
        assert_eq!(out.len(), 1);
        // A size past the end.
        out.clear();
        let mut buf = header(9, 64);
        buf.extend_from_slice(&[0; 8]);
        assert_eq!(parse(&buf, &mut out), Err(Corrupt { at: 0 }));
        // A raw size past the record.
        out.clear();
        let mut bad = sample_record(1, 5, &[0; 4]);
        bad[8 + 24..8 + 28].copy_from_slice(&1000u32.to_ne_bytes());
        assert_eq!(parse(&bad, &mut out), Err(Corrupt { at: 0 }));
        // A truncated header.
        assert_eq!(parse(&[9, 0, 0], &mut out), Err(Corrupt { at: 0 }));
    }

    #[test]
    fn the_attr_asks_for_what_the_parser_reads() {
        let a = tracepoint_attr(552, 4096);
        assert_eq!((a.type_, a.config, a.sample_type), (2, 552, SAMPLE_TYPE));
        assert_eq!((a.disabled(), a.use_clockid(), a.watermark()), (1, 1, 1));
        assert_eq!(a.clockid, libc::CLOCK_MONOTONIC);
        assert_eq!(a.size as usize, core::mem::size_of::<pe::perf_event_attr>());
    }
}
