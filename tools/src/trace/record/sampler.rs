//! GPU memory sampled beside a recording, on a thread of its own.

use super::MemorySample;
use crate::trace::TraceError;
use std::time::{Duration, Instant};

/// Samples the buffers model: one entry per process holding GPU memory.
fn sample_memory(out: &std::sync::mpsc::Sender<MemorySample>) -> u64 {
    let Ok(r) = crate::scan::scan(&crate::scan::Options::default()) else {
        return 0;
    };
    let time = super::monotonic_ns();
    let mut n = 0;
    for p in &r.processes {
        let sent = out.send(MemorySample {
            time,
            pid: p.pid,
            comm: p.comm.as_ref().map(|c| c.escaped()).unwrap_or_default(),
            fdinfo: p.memory_total.value,
            maps: p.mapped_drm.value,
        });
        n += u64::from(sent.is_ok());
    }
    n
}

/// Samples GPU memory every `every` on a thread of its own, so that a slow scan (a busy
/// machine, thousands of fds) never delays the ring drains: the schedule is absolute (a scan
/// that overruns its slot starts the next at once, never a burst of catch-ups), and stopping
/// wakes the thread at once. The samples go to the decoder as they are taken. Dropping it
/// stops and joins the thread too, so no error path leaves a sampler running.
pub(super) struct MemorySampler {
    stop: std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl MemorySampler {
    pub(super) fn start(
        every: Duration,
        out: std::sync::mpsc::Sender<MemorySample>,
    ) -> Result<Self, TraceError> {
        use std::sync::{Arc, Condvar, Mutex, PoisonError};
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("trace-memory".into())
            .spawn(move || {
                let mut taken = 0;
                let mut next = Some(Instant::now());
                let (lock, cv) = &*flag;
                loop {
                    taken += sample_memory(&out);
                    next = next.and_then(|at| next_slot(at, every, Instant::now()));
                    let mut stopped = lock.lock().unwrap_or_else(PoisonError::into_inner);
                    loop {
                        if *stopped {
                            return taken;
                        }
                        stopped = match next {
                            // Beyond the clock's range: no further sample, only the stop.
                            None => cv.wait(stopped).unwrap_or_else(PoisonError::into_inner),
                            Some(at) => {
                                let now = Instant::now();
                                if now >= at {
                                    break;
                                }
                                cv.wait_timeout(stopped, at - now)
                                    .unwrap_or_else(PoisonError::into_inner)
                                    .0
                            }
                        };
                    }
                }
            })
            .map_err(|e| TraceError::Sampler {
                error: e.to_string(),
            })?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }

    fn signal_stop(&self) {
        let (lock, cv) = &*self.stop;
        *lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = true;
        cv.notify_all();
    }

    /// Stops the thread and returns how many samples it sent (0 if it panicked).
    pub(super) fn finish(mut self) -> u64 {
        self.signal_stop();
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

/// The slot after `prev`, `every` later but never before `now` (a scan that overran its slot
/// starts the next at once, never a burst of catch-ups); `None` past the clock's range (an
/// interval of centuries asked for), where `Instant + Duration` would panic.
fn next_slot(prev: Instant, every: Duration, now: Instant) -> Option<Instant> {
    prev.checked_add(every).map(|t| t.max(now))
}

impl Drop for MemorySampler {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.signal_stop();
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The next sampling slot: `every` after the last, never in the past, and none past the
    /// clock's range (where `Instant + Duration` panics: `--memory-interval 1e19`).
    #[test]
    fn sampling_slots_never_overflow_the_clock() {
        let t = Instant::now();
        let s = Duration::from_secs(1);
        assert_eq!(next_slot(t, s, t), Some(t + s));
        assert_eq!(
            next_slot(t, s, t + 5 * s),
            Some(t + 5 * s),
            "an overrun slot starts now"
        );
        assert_eq!(next_slot(t, Duration::MAX, t), None);
        assert_eq!(next_slot(t, Duration::from_secs_f64(1e19), t), None);
    }

    /// Stopping wakes the sampler out of its wait: with an hour between samples, `finish`
    /// and a drop both return (the channel only guards the test against a hang; no time
    /// is asserted).
    #[test]
    fn the_memory_sampler_stops_when_told() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (mtx, _mrx) = std::sync::mpsc::channel();
            let s = MemorySampler::start(Duration::from_secs(3600), mtx.clone()).unwrap();
            let samples = s.finish();
            drop(MemorySampler::start(Duration::from_secs(3600), mtx).unwrap());
            tx.send(samples).unwrap();
        });
        rx.recv_timeout(Duration::from_secs(60))
            .expect("the sampler thread did not stop");
    }
}
