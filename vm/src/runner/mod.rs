//! The in-guest test runner (`vm guest-tests`): runs every test of the given libtest
//! binaries one by one, and external suites (the kernel's selftests, libdrm's test programs),
//! and writes one result line per test to `$VM_RESULTS_FILE` for the init to forward.
//!
//! The parts: [`libtest`] runs Rust test binaries unit by unit (listing, outcomes from
//! libtest's output and panic messages, the DRM node watch), [`external`] runs the
//! kernel's selftests (TAP) and libdrm's programs, and [`capture`] runs one program with a
//! time limit and a bounded capture of its output for both. This module holds what they
//! share: the result [`Sink`] and the unit ids.

pub mod capture;
pub mod external;
pub mod libtest;

pub use capture::{Captured, kernel_stacks, run_captured, run_limited};
pub use external::{
    KNOWN_FAILURES, KSELFTEST_UNIT, TapLine, parse_tap, run_kselftest, run_libdrm, with_thp_madvise,
};
pub use libtest::{
    GUEST_SUITE, NodeSet, NodeWatch, TestBinary, lost_nodes, node_set, outcome_of, parse_list,
    run_binaries, suite_name,
};

use crate::stream::{Outcome, Record};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// Where results go: straight to the result port when the init hands one over
/// (`$VM_RESULTS_PORT`, each record framed and written as it is made, so a kernel crash
/// loses none of the results before it), else one payload per line to `$VM_RESULTS_FILE`
/// for the init to forward when the payload exits.
pub struct Sink {
    file: Option<std::fs::File>,
    /// The result port, and the file where the number of records written to it is kept
    /// (`$VM_RESULTS_SENT`: the init adds it to its own count for the `end` record).
    port: Option<(std::fs::File, PathBuf)>,
    sent: u64,
    /// Counts per outcome: pass, fail, skip.
    pub counts: [usize; 3],
    /// Failures listed in [`KNOWN_FAILURES`] (also counted in `counts[1]`).
    pub known: usize,
    /// Units ([`Sink::start`]) an earlier boot of this kernel ran already, as
    /// `suite::name`: the runner leaves them out.
    pub done: std::collections::HashSet<String>,
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sink")
            .field("counts", &self.counts)
            .field("sent", &self.sent)
            .finish()
    }
}

/// The id of a unit the runner starts: `suite::name`.
pub fn unit_id(suite: &str, name: &str) -> String {
    format!("{suite}::{name}")
}

impl Sink {
    /// Opens `$VM_RESULTS_PORT` (with `$VM_RESULTS_SENT`), else `$VM_RESULTS_FILE`, else
    /// discards results, printing them only.
    pub fn from_env() -> Self {
        let port = std::env::var_os("VM_RESULTS_PORT").and_then(|p| {
            let sent = PathBuf::from(std::env::var_os("VM_RESULTS_SENT")?);
            let f = std::fs::OpenOptions::new().write(true).open(p).ok()?;
            std::fs::write(&sent, "0").ok()?;
            Some((f, sent))
        });
        let file = if port.is_some() {
            None
        } else {
            std::env::var_os("VM_RESULTS_FILE").and_then(|p| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .ok()
            })
        };
        Self {
            file,
            port,
            sent: 0,
            counts: [0; 3],
            known: 0,
            done: Default::default(),
        }
    }

    fn emit(&mut self, r: &Record) {
        let payload = r.to_payload();
        if let Some((f, sent)) = &mut self.port {
            if f.write_all(crate::stream::encode(&payload).as_bytes())
                .is_ok()
            {
                self.sent += 1;
                let _ = std::fs::write(sent, self.sent.to_string());
            }
        } else if let Some(f) = &mut self.file {
            let _ = writeln!(f, "{payload}");
        }
    }

    /// Whether an earlier boot ran this unit already ([`Sink::done`]).
    pub fn is_done(&self, suite: &str, name: &str) -> bool {
        self.done.contains(&unit_id(suite, name))
    }

    /// Announces the unit about to run (a `start` record), so a kernel crash during it is
    /// attributed to it.
    pub fn start(&mut self, suite: &str, name: &str) {
        self.emit(&Record::Start {
            suite: suite.to_string(),
            name: name.to_string(),
        });
    }

    /// Records one result and echoes a line to stdout.
    pub fn record(&mut self, suite: &str, name: &str, outcome: Outcome, d: Duration, reason: &str) {
        let r = Record::Test {
            suite: suite.to_string(),
            name: name.to_string(),
            outcome,
            duration_ms: d.as_millis() as u64,
            reason: reason.to_string(),
        };
        if outcome == Outcome::Fail && reason.starts_with("known:") {
            self.known += 1;
        }
        self.counts[match outcome {
            Outcome::Pass => 0,
            Outcome::Fail => 1,
            Outcome::Skip => 2,
        }] += 1;
        println!(
            "{:<4} {suite}::{name} ({} ms){}",
            outcome.as_str().to_uppercase(),
            d.as_millis(),
            if reason.is_empty() {
                String::new()
            } else {
                format!(": {reason}")
            }
        );
        self.emit(&r);
    }

    /// Records a note line.
    pub fn note(&mut self, text: &str) {
        println!("note: {text}");
        self.emit(&Record::Note(text.to_string()));
    }
}
