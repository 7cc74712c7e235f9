//! The lane scheduler of `vm test --jobs`.

use crate::error::{Result, VmError};
use crate::guest::Stream;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Runs `lane` for every name, at most `jobs` at a time (`jobs` is taken between 1 and the
/// number of names), and returns the results in the order of `names`.
///
/// One at a time, the lanes run in order on this thread, each streaming its output as it
/// comes ([`Stream::Plain`]). Side by side, each runs on a thread that takes the next name
/// when its lane ends, its output lines prefixed with `[name] `; a lane that ended without
/// a report (its thread died) is an error in its place.
pub fn run_lanes<T, F>(names: &[String], jobs: usize, lane: F) -> Vec<Result<T>>
where
    T: Send,
    F: Fn(&str, Stream) -> Result<T> + Sync,
{
    let jobs = jobs.clamp(1, names.len().max(1));
    if jobs == 1 {
        return names.iter().map(|n| lane(n, Stream::Plain)).collect();
    }
    eprintln!("vm: {} lanes, {jobs} at a time (--jobs)", names.len());
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<Result<T>>>> = names.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(n) = names.get(i) else { break };
                    let r = lane(n, Stream::Prefixed(format!("[{n}] ")));
                    *slots[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
                }
            });
        }
    });
    collect_slots(slots)
}

/// The results of the slots, in order; an empty slot is the error of a lane that ended
/// without a report.
fn collect_slots<T>(slots: Vec<Mutex<Option<Result<T>>>>) -> Vec<Result<T>> {
    slots
        .into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .unwrap_or_else(|| Err(VmError::new("a lane ended without a report")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("k{i}")).collect()
    }

    #[test]
    fn one_at_a_time_the_lanes_run_in_order_and_stream_plainly() {
        let order = Mutex::new(Vec::new());
        let r = run_lanes(&names(3), 1, |n, stream| {
            assert_eq!(stream, Stream::Plain);
            order.lock().unwrap().push(n.to_string());
            Ok(n.len())
        });
        assert_eq!(order.into_inner().unwrap(), names(3));
        assert_eq!(r, [Ok(2), Ok(2), Ok(2)]);
        // --jobs 0 is one at a time too.
        let r = run_lanes(&names(2), 0, |_, stream| Ok(stream));
        assert_eq!(r, [Ok(Stream::Plain), Ok(Stream::Plain)]);
        // A single lane streams plainly whatever --jobs says.
        let r = run_lanes(&names(1), 8, |_, stream| Ok(stream));
        assert_eq!(r, [Ok(Stream::Plain)]);
        assert!(run_lanes(&[], 4, |_, _| Ok(())).is_empty());
    }

    #[test]
    fn side_by_side_results_keep_the_order_of_the_names() {
        let names = names(6);
        // The first lanes take longest, so they end last.
        let r = run_lanes(&names, 3, |n, stream| {
            let i: u64 = n[1..].parse().unwrap();
            std::thread::sleep(Duration::from_millis(60 - 10 * i));
            assert_eq!(stream, Stream::Prefixed(format!("[{n}] ")));
            Ok(n.to_string())
        });
        let want: Vec<Result<String>> = names.iter().cloned().map(Ok).collect();
        assert_eq!(r, want);
    }

    #[test]
    fn at_most_jobs_lanes_run_at_once() {
        let (running, most, started) = (
            AtomicUsize::new(0),
            AtomicUsize::new(0),
            AtomicUsize::new(0),
        );
        let r = run_lanes(&names(8), 3, |_, _| {
            started.fetch_add(1, Ordering::SeqCst);
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            // Each lane waits for company (a fourth would show), but not forever.
            let t0 = std::time::Instant::now();
            while running.load(Ordering::SeqCst) < 3
                && started.load(Ordering::SeqCst) < 8
                && t0.elapsed() < Duration::from_secs(5)
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(5));
            running.fetch_sub(1, Ordering::SeqCst);
            Ok(())
        });
        assert_eq!(r.len(), 8);
        assert!(r.iter().all(Result::is_ok));
        assert_eq!(most.into_inner(), 3);
    }

    #[test]
    fn a_failed_lane_is_an_error_in_its_place_and_the_others_still_run() {
        let ran = AtomicUsize::new(0);
        let r = run_lanes(&names(4), 2, |n, _| {
            ran.fetch_add(1, Ordering::SeqCst);
            if n == "k1" {
                Err(VmError::new("k1 broke"))
            } else {
                Ok(n.to_string())
            }
        });
        assert_eq!(ran.into_inner(), 4);
        assert_eq!(
            r,
            [
                Ok("k0".to_string()),
                Err(VmError::new("k1 broke")),
                Ok("k2".to_string()),
                Ok("k3".to_string())
            ]
        );
        let first: Result<Vec<String>> = r.into_iter().collect();
        assert_eq!(first, Err(VmError::new("k1 broke")));
    }

    #[test]
    fn a_lane_that_left_no_report_is_an_error() {
        let slots = vec![
            Mutex::new(Some(Ok(1))),
            Mutex::new(None),
            Mutex::new(Some(Err(VmError::new("x")))),
        ];
        assert_eq!(
            collect_slots(slots),
            [
                Ok(1),
                Err(VmError::new("a lane ended without a report")),
                Err(VmError::new("x"))
            ]
        );
        // A slot whose lock a dying thread poisoned still gives what it holds.
        let poisoned = Mutex::new(Some(Ok(7)));
        let _ = std::thread::scope(|s| {
            s.spawn(|| {
                let _g = poisoned.lock().unwrap();
                panic!("poison");
            })
            .join()
        });
        assert!(poisoned.is_poisoned());
        assert_eq!(collect_slots(vec![poisoned]), [Ok(7)]);
    }
}
