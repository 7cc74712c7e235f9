//! `/dev/nvidia-uvm` before a job (issue 28). CUDA needs the `nvidia-uvm` module, which
//! the setuid `nvidia-modprobe` loads on first use; a job runs with `no_new_privs`, so it
//! cannot. When `drmtool run` gives a job an NVIDIA GPU and `nvidia-uvm` is not in
//! `/proc/devices`, the supervisor (root) loads it with `/sbin/modprobe nvidia-uvm`
//! ([`modprobe_command`]: that absolute path, an empty environment but `PATH`, stdin
//! `/dev/null`, a bounded wait), then reads `/proc/devices` again. The job's private
//! `/dev` gets `nvidia-uvm` and `nvidia-uvm-tools` from the kernel's view (the major
//! `/proc/devices` lists, minors 0 and 1: [`crate::vendor`]) whether or not the host's
//! `/dev` has them. A module that will not load does not stop the job (CUDA without
//! unified memory is the driver's business): [`load`] says why, as a [`UvmError`], and
//! `run` hands that to its caller as a warning.
//!
//! ```
//! use drmtool::isolate::uvm::{UvmNeed, modprobe_command, need};
//! let devices = drmtool::vendor::parse_proc_devices("Character devices:\n195 nvidia-frontend\n");
//! assert_eq!(need(true, true, &devices), UvmNeed::Load);
//! assert_eq!(need(false, true, &devices), UvmNeed::NoNvidiaGpu);
//! let cmd = modprobe_command();
//! assert_eq!((cmd.program.as_str(), cmd.args.as_slice()), ("/sbin/modprobe", &["nvidia-uvm".to_string()][..]));
//! ```

use crate::untrusted::Untrusted;
use crate::vendor::{MajorError, ProcDevices};
use std::path::Path;
use std::time::{Duration, Instant};

/// The module, as `/proc/devices` names its major and `modprobe` its name.
pub const MODULE: &str = "nvidia-uvm";
/// The program that loads it: an absolute path, never looked up in `PATH`.
pub const MODPROBE: &str = "/sbin/modprobe";
/// The one variable `modprobe` runs with (its install commands may run programs).
pub const MODPROBE_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";
/// How long `modprobe` may take before it is killed.
pub const MODPROBE_TIMEOUT: Duration = Duration::from_secs(30);
/// At most this much of `modprobe`'s standard error is kept (the rest is read and
/// dropped, so it never blocks on a full pipe).
pub const MAX_STDERR: usize = 4096;

/// Whether the supervisor must load `nvidia-uvm` before a job ([`need`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UvmNeed {
    /// The job gets no NVIDIA GPU.
    NoNvidiaGpu,
    /// `/proc/driver/nvidia` is absent: the NVIDIA driver is not loaded, and
    /// `nvidia-uvm` depends on it.
    NoDriver,
    /// `/proc/devices` lists `nvidia-uvm` already (once, or several times, which
    /// discovery reports).
    Registered,
    /// Load it.
    Load,
}

/// Whether to load `nvidia-uvm`: only for a job given an NVIDIA GPU (`nvidia_gpu`), with
/// the driver loaded (`driver`: `/proc/driver/nvidia` exists) and `nvidia-uvm` not in
/// `devices` (`/proc/devices`).
pub fn need(nvidia_gpu: bool, driver: bool, devices: &ProcDevices) -> UvmNeed {
    if !nvidia_gpu {
        UvmNeed::NoNvidiaGpu
    } else if !driver {
        UvmNeed::NoDriver
    } else if matches!(devices.char_major(MODULE), Err(MajorError::NotListed(_))) {
        UvmNeed::Load
    } else {
        UvmNeed::Registered
    }
}

/// A command the supervisor runs ([`modprobe_command`]; tests run others through
/// [`run_command`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModprobeCommand {
    /// The program, an absolute path (executed as it is, never searched for).
    pub program: String,
    /// Its arguments (without the program's name).
    pub args: Vec<String>,
    /// Its whole environment.
    pub env: Vec<(String, String)>,
    /// How long it may run.
    pub timeout: Duration,
}

impl std::fmt::Display for ModprobeCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.program)?;
        self.args.iter().try_for_each(|a| write!(f, " {a}"))
    }
}

/// `/sbin/modprobe nvidia-uvm` with only `PATH` set ([`MODPROBE_PATH`]), at most
/// [`MODPROBE_TIMEOUT`].
pub fn modprobe_command() -> ModprobeCommand {
    ModprobeCommand {
        program: MODPROBE.into(),
        args: vec![MODULE.into()],
        env: vec![("PATH".into(), MODPROBE_PATH.into())],
        timeout: MODPROBE_TIMEOUT,
    }
}

/// Why `nvidia-uvm` is not loaded after [`load`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UvmError {
    /// The program could not be started (`/sbin/modprobe` missing, not executable).
    #[error("{command} could not be started: {error}")]
    NotStarted {
        /// The command line.
        command: String,
        /// The system's message.
        error: String,
    },
    /// It exited with a status other than 0; the first line of what it printed on
    /// standard error, escaped.
    #[error("{command} exited with status {code}{}", detail(stderr))]
    Failed {
        /// The command line.
        command: String,
        /// Its exit status.
        code: i32,
        /// The first line of its standard error (at most [`MAX_STDERR`] bytes).
        stderr: Untrusted,
    },
    /// A signal ended it.
    #[error("{command} was killed by signal {signal}{}", detail(stderr))]
    Killed {
        /// The command line.
        command: String,
        /// The signal.
        signal: i32,
        /// The first line of its standard error.
        stderr: Untrusted,
    },
    /// It ran past its timeout and was killed.
    #[error("{command} did not finish within {} s and was killed", timeout.as_secs_f64())]
    TimedOut {
        /// The command line.
        command: String,
        /// The timeout.
        timeout: Duration,
    },
    /// It exited 0, yet `/proc/devices` still lists no `nvidia-uvm` (a blacklist, an
    /// `install` line that does nothing).
    #[error("{command} succeeded but {MODULE} is still not in /proc/devices")]
    NotRegistered {
        /// The command line.
        command: String,
    },
}

fn detail(stderr: &Untrusted) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!(": {stderr}")
    }
}

/// Runs `cmd` (stdin and stdout `/dev/null`, standard error kept up to [`MAX_STDERR`]
/// bytes, its first line reported); `Ok` when it exits 0.
///
/// # Errors
/// [`UvmError::NotStarted`], [`UvmError::Failed`], [`UvmError::Killed`],
/// [`UvmError::TimedOut`].
pub fn run_command(cmd: &ModprobeCommand) -> Result<(), UvmError> {
    use std::process::{Command, Stdio};
    let command = cmd.to_string();
    let mut child = Command::new(&cmd.program)
        .args(&cmd.args)
        .env_clear()
        .envs(cmd.env.iter().map(|(k, v)| (k, v)))
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| UvmError::NotStarted {
            command: command.clone(),
            error: e.to_string(),
        })?;
    let mut err = child.stderr.take();
    if let Some(e) = &err {
        // Read as it comes, never waited on: a child that fills the pipe is not stalled.
        let _ = rustix::io::ioctl_fionbio(e, true);
    }
    let mut kept = Vec::new();
    let deadline = Instant::now() + cmd.timeout;
    let status = loop {
        drain(err.as_mut(), &mut kept);
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(UvmError::TimedOut {
                    command,
                    timeout: cmd.timeout,
                });
            }
        }
    };
    drain(err.as_mut(), &mut kept);
    let line = kept.split(|b| *b == b'\n').next().unwrap_or_default();
    let stderr = Untrusted::new(line);
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(0), _) => Ok(()),
        (Some(code), _) => Err(UvmError::Failed {
            command,
            code,
            stderr,
        }),
        (None, signal) => Err(UvmError::Killed {
            command,
            signal: signal.unwrap_or(0),
            stderr,
        }),
    }
}

/// Reads what `pipe` holds now (non-blocking), keeping the first [`MAX_STDERR`] bytes.
fn drain(pipe: Option<&mut std::process::ChildStderr>, kept: &mut Vec<u8>) {
    use std::io::Read;
    let Some(pipe) = pipe else { return };
    let mut buf = [0u8; 4096];
    // Bounded: at most 1 MiB a call, the rest on the next.
    for _ in 0..256 {
        match pipe.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let room = MAX_STDERR.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

/// Loads `nvidia-uvm` with `cmd` ([`modprobe_command`]) and reads `proc_root/devices`
/// again: its major.
///
/// # Errors
/// [`UvmError`]: `cmd` failed ([`run_command`]), or succeeded and `nvidia-uvm` is still
/// not listed.
pub fn load(cmd: &ModprobeCommand, proc_root: &Path) -> Result<u32, UvmError> {
    run_command(cmd)?;
    let text = super::vendor_access::read_proc_devices_in(proc_root);
    crate::vendor::parse_proc_devices(&text)
        .char_major(MODULE)
        .map_err(|_| UvmError::NotRegistered {
            command: cmd.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vendor::parse_proc_devices;

    /// Loaded only for a job on an NVIDIA GPU, with the driver there, and nvidia-uvm not
    /// yet registered (a major listed twice is registered: discovery reports it).
    #[test]
    fn the_module_is_loaded_only_when_a_job_needs_it_and_it_is_missing() {
        let none = parse_proc_devices("Character devices:\n  1 mem\n195 nvidia-frontend\n");
        let loaded =
            parse_proc_devices("Character devices:\n195 nvidia-frontend\n509 nvidia-uvm\n");
        let twice = parse_proc_devices("Character devices:\n509 nvidia-uvm\n510 nvidia-uvm\n");
        let block_only =
            parse_proc_devices("Character devices:\n1 mem\nBlock devices:\n509 nvidia-uvm\n");
        assert_eq!(need(true, true, &none), UvmNeed::Load);
        assert_eq!(need(true, true, &block_only), UvmNeed::Load);
        assert_eq!(need(true, true, &loaded), UvmNeed::Registered);
        assert_eq!(need(true, true, &twice), UvmNeed::Registered);
        assert_eq!(need(true, false, &none), UvmNeed::NoDriver);
        assert_eq!(need(false, true, &none), UvmNeed::NoNvidiaGpu);
        assert_eq!(need(false, false, &loaded), UvmNeed::NoNvidiaGpu);
    }

    /// The command line: an absolute program, the module, PATH alone, a bound.
    #[test]
    fn modprobe_runs_by_absolute_path_with_only_path_set() {
        let c = modprobe_command();
        assert_eq!(c.program, "/sbin/modprobe");
        assert!(Path::new(&c.program).is_absolute());
        assert_eq!(c.args, ["nvidia-uvm"]);
        assert_eq!(
            c.env,
            [(
                "PATH".to_string(),
                "/usr/sbin:/usr/bin:/sbin:/bin".to_string()
            )]
        );
        assert!(c.timeout > Duration::ZERO && c.timeout <= Duration::from_secs(60));
        assert_eq!(c.to_string(), "/sbin/modprobe nvidia-uvm");
    }

    fn sh(script: &str, timeout: Duration) -> ModprobeCommand {
        ModprobeCommand {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into()],
            env: modprobe_command().env,
            timeout,
        }
    }

    /// What the runner reports: success, a status with the first stderr line (escaped,
    /// bounded), a signal, a timeout, a program that is not there; the environment is
    /// only PATH, stdin is empty.
    #[test]
    fn the_runner_reports_each_outcome_as_a_typed_value() {
        let t = Duration::from_secs(20);
        let env = "test \"$PATH\" = /usr/sbin:/usr/bin:/sbin:/bin && test -z \"$HOME$USER\" \
                   && test \"$(env | wc -l)\" -le 3 && test \"$(cat)\" = '' && test \"$PWD\" = /";
        assert_eq!(run_command(&sh(env, t)), Ok(()));
        let e = run_command(&sh(
            "echo 'modprobe: FATAL: Module nvidia-uvm not found\x1b[2J' >&2; echo more >&2; exit 1",
            t,
        ))
        .unwrap_err();
        let UvmError::Failed { code, stderr, .. } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(*code, 1);
        assert_eq!(
            stderr.to_string_lossy(),
            "modprobe: FATAL: Module nvidia-uvm not found\x1b[2J"
        );
        assert_eq!(
            e.to_string(),
            "/bin/sh -c echo 'modprobe: FATAL: Module nvidia-uvm not found\x1b[2J' >&2; echo \
             more >&2; exit 1 exited with status 1: modprobe: FATAL: Module nvidia-uvm not \
             found\\x1b[2J"
        );
        // A flood on stderr neither stalls it nor is kept whole.
        let flood = run_command(&sh("head -c 1000000 /dev/zero | tr '\\0' x >&2; exit 3", t));
        match flood {
            Err(UvmError::Failed {
                code: 3, stderr, ..
            }) => {
                assert_eq!(stderr.as_bytes().len(), MAX_STDERR)
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            run_command(&sh("kill -9 $$", t)),
            Err(UvmError::Killed { signal: 9, .. })
        ));
        let slow = Duration::from_millis(200);
        let started = Instant::now();
        assert!(matches!(
            run_command(&sh("sleep 30", slow)),
            Err(UvmError::TimedOut { .. })
        ));
        assert!(started.elapsed() < Duration::from_secs(10));
        let missing = ModprobeCommand {
            program: "/nonexistent/modprobe".into(),
            ..modprobe_command()
        };
        assert!(matches!(
            run_command(&missing),
            Err(UvmError::NotStarted { .. })
        ));
    }

    /// A command that succeeds without registering the module is reported as such.
    #[test]
    fn success_without_the_major_is_not_registered() {
        let dir = std::env::temp_dir().join(format!("drmtool-uvm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("devices"), "Character devices:\n  1 mem\n").unwrap();
        let ok = sh("exit 0", Duration::from_secs(20));
        assert!(matches!(
            load(&ok, &dir),
            Err(UvmError::NotRegistered { .. })
        ));
        std::fs::write(dir.join("devices"), "Character devices:\n507 nvidia-uvm\n").unwrap();
        assert_eq!(load(&ok, &dir), Ok(507));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
