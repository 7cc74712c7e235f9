//! Helpers every harness module uses: progress lines, running host commands with
//! one-line errors, file operations that fail as [`VmError`]s, and finding programs.

use crate::error::{Result, VmError};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Prints a progress line with the elapsed time.
pub fn progress(start: Instant, msg: &str) {
    eprintln!("[vm {:>5.1}s] {msg}", start.elapsed().as_secs_f64());
}

pub(crate) fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

pub(crate) fn free_bytes(dir: &Path) -> Option<u64> {
    let st = rustix::fs::statvfs(dir).ok()?;
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Refuses to start `what` (a kernel build, preparing a stock kernel) under `dir` when it has
/// less than `needed` bytes free: a full disk midway fails far from its cause.
pub(crate) fn require_free(dir: &Path, needed: u64, what: &str) -> crate::error::Result<()> {
    match free_bytes(dir) {
        Some(free) if free < needed => Err(crate::error::VmError::with_fix(
            format!(
                "disk full: {:.1} GiB free under {}, {what} needs {:.0} GiB",
                free as f64 / (1u64 << 30) as f64,
                dir.display(),
                needed as f64 / (1u64 << 30) as f64
            ),
            "free space there, or point VM_CACHE_DIR at a larger disk",
        )),
        _ => Ok(()),
    }
}

/// Runs a command with its output appended to `log` (one log per build attempt: see
/// [`crate::buildlog::fresh_log`]), printing elapsed time every 30 s; on failure shows the
/// log's error lines with some context ([`crate::buildlog::error_lines`]) and a fix that
/// fits them for kernel `version` and the host's gcc, and recognises a full disk.
pub(crate) fn run_logged(
    mut c: Command,
    log: &Path,
    phase: &str,
    start: Instant,
    version: &str,
) -> Result<()> {
    let file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| VmError::new(format!("{}: {e}", log.display())))?;
    let err = file.try_clone().map_err(|e| VmError::new(e.to_string()))?;
    c.stdout(Stdio::from(file)).stderr(Stdio::from(err));
    let mut child = c.spawn().map_err(|e| {
        VmError::with_fix(
            format!("cannot run make for {phase}: {e}"),
            "scripts/setup (installs make, gcc, flex, bison, bc, libelf-dev, libssl-dev)",
        )
    })?;
    let t0 = Instant::now();
    let mut last = 0;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) => {}
            Err(e) => return Err(VmError::new(format!("waiting for make ({phase}): {e}"))),
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        let secs = t0.elapsed().as_secs();
        if secs >= last + 30 {
            last = secs;
            progress(start, &format!("  {phase}: {secs} s"));
        }
    };
    if status.success() {
        return Ok(());
    }
    let bytes = fs::read(log).unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    let errors = crate::buildlog::error_lines(&text, 3, 3, 60);
    if errors.is_empty() {
        eprintln!("    (no error line in the log; its last lines:)");
        let tail: Vec<&str> = text.lines().rev().take(25).collect();
        for l in tail.into_iter().rev() {
            eprintln!("    | {l}");
        }
    } else {
        for l in &errors {
            eprintln!("    | {l}");
        }
    }
    if text.contains("No space left on device") {
        return Err(VmError::with_fix(
            format!(
                "kernel build ({phase}) failed: disk full (log: {})",
                log.display()
            ),
            "free space, or point VM_CACHE_DIR at a larger disk",
        ));
    }
    let gcc = run_capture(Command::new("cc").arg("-dumpversion"))
        .ok()
        .and_then(|v| crate::buildlog::gcc_major(&v));
    let fix = crate::buildlog::suggest_fix(&errors, version, gcc).unwrap_or_else(|| {
        "scripts/setup installs the build dependencies; then vm kernel build NAME --rebuild"
            .to_string()
    });
    Err(VmError::with_fix(
        format!(
            "kernel build failed in {phase} ({status}); log: {}",
            log.display()
        ),
        fix,
    ))
}

/// Runs a command; on failure, a one-line error with its last line of stderr.
pub(crate) fn run_checked(c: &mut Command, what: &str) -> Result<()> {
    let out = c
        .output()
        .map_err(|e| VmError::with_fix(format!("{what}: {e}"), "scripts/setup"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return Err(VmError::new(format!(
            "{what} failed ({}): {last}",
            out.status
        )));
    }
    Ok(())
}

/// Runs a command and returns its stdout, or a one-line error.
pub fn run_capture(c: &mut Command) -> std::result::Result<String, String> {
    let out = c.output().map_err(|e| format!("{c:?}: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "{:?} failed: {}",
            c.get_program(),
            err.lines().last().unwrap_or("")
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub(crate) fn mkdirs(p: &Path) -> Result<()> {
    fs::create_dir_all(p).map_err(|e| {
        VmError::with_fix(
            format!("cannot create {}: {e}", p.display()),
            "make the cache writable or set VM_CACHE_DIR",
        )
    })
}

pub(crate) fn write(p: &Path, data: &[u8]) -> Result<()> {
    fs::write(p, data).map_err(|e| VmError::new(format!("cannot write {}: {e}", p.display())))
}

pub(crate) fn read(p: &Path) -> Result<String> {
    fs::read_to_string(p).map_err(|e| VmError::new(format!("cannot read {}: {e}", p.display())))
}

pub(crate) fn copy(from: &Path, to: &Path) -> Result<()> {
    fs::copy(from, to)
        .map(|_| ())
        .map_err(|e| VmError::new(format!("copy {} -> {}: {e}", from.display(), to.display())))
}

/// Looks a program up on `PATH`.
pub fn which(prog: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(prog))
            .find(|p| p.is_file())
    })
}
