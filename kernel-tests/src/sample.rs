//! Sample clients (`drmtool::sample`, the library behind `drm-sample-client`) in processes
//! of their own, for the drmtool guest tests.
//!
//! `cargo test` builds no binaries of other packages, so a client is the calling test
//! binary run again with [`ARGS_ENV`] set, on one of its tests that calls [`entry`] first:
//! that test then becomes the client.

use drmtool::sample::Ready;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStdout, Command, ExitCode, Stdio};

/// The environment variable that carries the client's arguments (separated by `\x1f`).
pub const ARGS_ENV: &str = "DRMTOOL_SAMPLE_ARGS";

/// Where [`ARGS_ENV`] is set: runs the sample client with those arguments and exits the
/// process with its status. Call it first in the test a binary names as its helper.
pub fn entry() {
    if let Ok(a) = std::env::var(ARGS_ENV) {
        crate::fds_shared();
        let argv = std::iter::once("drm-sample-client".to_string())
            .chain(a.split('\x1f').map(str::to_string))
            .map(std::ffi::OsString::from);
        let code = drmtool::sample::main_with(argv);
        std::process::exit(if code == ExitCode::SUCCESS { 0 } else { 1 });
    }
}

/// Where the environment variable `var` is set: runs drmtool's command line with its
/// value as the arguments (`\x1f`-separated) in this process and exits with drmtool's
/// status. For a test a binary names as its drmtool entry (a test that must run drmtool as
/// a process of its own: under another program, in another namespace, as another user).
pub fn cli_entry(var: &str) {
    if let Ok(a) = std::env::var(var) {
        let argv = std::iter::once("drmtool".to_string())
            .chain(a.split('\x1f').map(str::to_string))
            .map(std::ffi::OsString::from);
        let code = drmtool::cli::main_with(argv, &mut std::io::stdout());
        // ExitCode has no accessor: the byte it was made from.
        let n = (0u8..=255)
            .find(|&c| ExitCode::from(c) == code)
            .map_or(255, i32::from);
        std::process::exit(n);
    }
}

/// A sample client in its own process; closes its stdin and reaps it on drop.
#[derive(Debug)]
pub struct Client {
    child: Child,
    out: BufReader<ChildStdout>,
    /// What the client said it holds.
    pub ready: Ready,
}

impl Client {
    /// Runs this test binary's test `helper` (which calls [`entry`]) as a client with
    /// `args`, and waits for its ready line.
    ///
    /// # Panics
    /// If it cannot be started or exits before it is ready.
    pub fn spawn(helper: &str, args: &[&str]) -> Self {
        let exe = std::env::current_exe().expect("current_exe");
        let mut child = Command::new(exe)
            .args([helper, "--exact", "--nocapture", "--test-threads=1", "-q"])
            .env(ARGS_ENV, args.join("\x1f"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the sample client");
        let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        let ready = loop {
            line.clear();
            match out.read_line(&mut line) {
                Ok(n) if n > 0 && line.starts_with('{') => {
                    break serde_json::from_str::<Ready>(&line)
                        .unwrap_or_else(|e| panic!("sample client line {line:?}: {e}"));
                }
                Ok(n) if n > 0 => continue,
                _ => {
                    let st = child.wait();
                    panic!("sample client {args:?} exited before it was ready: {st:?}");
                }
            }
        };
        assert_eq!(ready.pid, child.id(), "the client reports its own pid");
        Self { child, out, ready }
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.ready.pid
    }

    /// Lets the client exit and reaps it; it must exit cleanly.
    ///
    /// # Panics
    /// If it exits with a failure.
    pub fn exit(mut self) {
        drop(self.child.stdin.take());
        let mut rest = String::new();
        let _ = self.out.read_to_string(&mut rest);
        let st = self.child.wait().expect("wait");
        assert!(st.success(), "sample client failed: {st:?}\n{rest}");
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}
