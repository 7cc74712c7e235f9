//! What `trace record` needs of its privileges, checked before it starts ([`check`]), so
//! that a refusal names exactly what is missing instead of an errno from the middle of a
//! recording.
//!
//! Two ways to read the tracepoints ([`Backend`]):
//!
//! - a tracefs instance of drmtool's own (ftrace's ring buffers): `mkdir` under
//!   `<tracefs>/instances` and writes to the instance's `enable`, `buffer_size_kb` and
//!   `tracing_on` files. tracefs checks file permissions, not capabilities, and its files
//!   are root's (directories 0750, files 0640 at most, whatever `gid=` it is mounted
//!   with): so root, or `CAP_DAC_OVERRIDE`. `CAP_PERFMON` does not help here.
//! - `perf_event_open` per tracepoint per CPU (the fallback): system-wide events need
//!   `CAP_PERFMON` (or `CAP_SYS_ADMIN`) unless `kernel.perf_event_paranoid` is -1, and the
//!   ids and field offsets come from tracefs's `events/*/format` files (root's, 0440):
//!   root, `CAP_DAC_READ_SEARCH`, or a tracefs mounted with a `gid=` the user is in. Rings
//!   beyond `kernel.perf_event_mlock_kb` per user also need `CAP_IPC_LOCK` (not checked
//!   here: the kernel's refusal names the ring size). `CAP_BPF` is never needed: drmtool
//!   loads no BPF program to trace.

use crate::export::privilege::{Capability, Privileges, StatusError};
use rustix::fs::{Access, AtFlags, CWD};
use std::path::{Path, PathBuf};

/// How the recording reads the tracepoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A tracefs instance (ftrace's ring buffers).
    Instance,
    /// `perf_event_open`, system-wide.
    Perf,
}

/// What is missing for a recording, each with what would give it.
#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    /// The process's own privileges could not be read.
    #[error("cannot check its own privileges: {0}")]
    Status(#[from] StatusError),
    /// A tracefs instance cannot be made or driven: `path` (the `instances` directory, or
    /// the `events/enable` file standing for every file the instance must write) is not
    /// writable.
    #[error(
        "{path} is not writable by uid {uid}: a tracefs instance needs root (or \
         CAP_DAC_OVERRIDE: tracefs checks file permissions, and CAP_PERFMON does not pass \
         them); run it with sudo"
    )]
    TracefsNotWritable {
        /// The directory or file checked.
        path: PathBuf,
        /// The effective uid.
        uid: u32,
    },
    /// The events' format files (ids and field offsets) cannot be read.
    #[error(
        "{path} is not readable by uid {uid}: the tracepoints' format files are root's \
         (tracefs is root-only by default); run it as root, give it CAP_DAC_READ_SEARCH, or \
         mount tracefs with gid=<a group of this user>"
    )]
    FormatsNotReadable {
        /// The directory or file checked.
        path: PathBuf,
        /// The effective uid.
        uid: u32,
    },
    /// System-wide `perf_event_open` is refused.
    #[error(
        "system-wide perf events need CAP_PERFMON (or CAP_SYS_ADMIN), which uid {uid} does \
         not have in its effective set, while kernel.perf_event_paranoid is {paranoid} \
         (above -1); grant CAP_PERFMON (setpriv --inh-caps=+perfmon \
         --ambient-caps=+perfmon, systemd AmbientCapabilities=CAP_PERFMON) or run as root"
    )]
    PerfmonMissing {
        /// The effective uid.
        uid: u32,
        /// `kernel.perf_event_paranoid` (2 when it cannot be read, the kernel's default).
        paranoid: i32,
    },
}

/// What [`check`] found of the machine and the process, for [`decide`].
#[derive(Debug, Clone)]
pub struct Situation {
    /// The process's uids and capabilities.
    pub privileges: Privileges,
    /// The tracefs mount.
    pub tracefs: PathBuf,
    /// Whether `instances` can be written and searched (`faccessat(W_OK|X_OK,
    /// AT_EACCESS)`: the effective ids and capabilities).
    pub instances_writable: bool,
    /// Whether `events/enable` can be written.
    pub enable_writable: bool,
    /// Whether `events` can be searched and `events/header_page` read (every format file
    /// has the same owner and mode).
    pub formats_readable: bool,
    /// `kernel.perf_event_paranoid`, when it could be read.
    pub paranoid: Option<i32>,
}

fn can(path: &Path, how: Access) -> bool {
    rustix::fs::accessat(CWD, path, how, AtFlags::EACCESS).is_ok()
}

impl Situation {
    /// This process's, with tracefs at `tracefs`.
    ///
    /// # Errors
    /// [`PrivilegeError::Status`] when `/proc/self/status` cannot be read.
    pub fn current(tracefs: &Path) -> Result<Situation, PrivilegeError> {
        let events = tracefs.join("events");
        let paranoid = crate::sysfs::attr(Path::new("/proc/sys/kernel/perf_event_paranoid"))
            .and_then(|v| v.parse().ok());
        Ok(Situation {
            privileges: Privileges::current()?,
            tracefs: tracefs.to_path_buf(),
            instances_writable: can(
                &tracefs.join("instances"),
                Access::WRITE_OK | Access::EXEC_OK,
            ),
            enable_writable: can(&events.join("enable"), Access::WRITE_OK),
            formats_readable: can(&events, Access::EXEC_OK)
                && can(&events.join("header_page"), Access::READ_OK),
            paranoid,
        })
    }
}

/// Whether a recording through `backend` can run in `s`; the first thing missing otherwise.
///
/// # Errors
/// The [`PrivilegeError`] naming what is missing.
pub fn decide(s: &Situation, backend: Backend) -> Result<(), PrivilegeError> {
    let uid = s.privileges.uids[1];
    let events = s.tracefs.join("events");
    match backend {
        Backend::Instance => {
            if !s.instances_writable {
                return Err(PrivilegeError::TracefsNotWritable {
                    path: s.tracefs.join("instances"),
                    uid,
                });
            }
            if !s.enable_writable {
                return Err(PrivilegeError::TracefsNotWritable {
                    path: events.join("enable"),
                    uid,
                });
            }
            Ok(())
        }
        Backend::Perf => {
            if !s.formats_readable {
                return Err(PrivilegeError::FormatsNotReadable { path: events, uid });
            }
            let paranoid = s.paranoid.unwrap_or(2);
            let eff = s.privileges.effective;
            let perfmon = eff.contains(Capability::PERFMON) || eff.contains(Capability::SYS_ADMIN);
            if paranoid > -1 && !perfmon {
                return Err(PrivilegeError::PerfmonMissing { uid, paranoid });
            }
            Ok(())
        }
    }
}

/// Checks that this process can record through `backend` with tracefs at `tracefs`.
///
/// # Errors
/// The [`PrivilegeError`] naming what is missing.
pub fn check(tracefs: &Path, backend: Backend) -> Result<(), PrivilegeError> {
    decide(&Situation::current(tracefs)?, backend)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::privilege::CapSet;

    fn situation(uid: u32, caps: &[Capability], files: (bool, bool, bool)) -> Situation {
        let c = CapSet::of(caps);
        Situation {
            privileges: Privileges {
                uids: [uid; 4],
                inheritable: c,
                permitted: c,
                effective: c,
                bounding: c,
                ambient: c,
            },
            tracefs: "/sys/kernel/tracing".into(),
            instances_writable: files.0,
            enable_writable: files.1,
            formats_readable: files.2,
            paranoid: Some(2),
        }
    }

    #[test]
    fn each_refusal_names_what_is_missing() {
        let all: Vec<Capability> = (0..41).map(Capability).collect();
        // Root: both ways.
        let root = situation(0, &all, (true, true, true));
        assert!(decide(&root, Backend::Instance).is_ok());
        assert!(decide(&root, Backend::Perf).is_ok());
        // A user with CAP_PERFMON and CAP_BPF, tracefs root-only: no instance, and the
        // message says why CAP_PERFMON is not enough.
        let perfmon = [Capability::PERFMON, Capability::BPF];
        let user = situation(1000, &perfmon, (false, false, false));
        let e = decide(&user, Backend::Instance).unwrap_err();
        assert!(
            matches!(&e, PrivilegeError::TracefsNotWritable { path, uid: 1000 }
                if path.ends_with("instances")),
            "{e}"
        );
        assert!(e.to_string().contains("CAP_PERFMON does not pass"), "{e}");
        // Perf: the formats first (CAP_DAC_READ_SEARCH or a tracefs gid).
        let e = decide(&user, Backend::Perf).unwrap_err();
        assert!(
            matches!(e, PrivilegeError::FormatsNotReadable { .. }),
            "{e}"
        );
        assert!(e.to_string().contains("CAP_DAC_READ_SEARCH"), "{e}");
        // With the formats readable: CAP_PERFMON is enough for perf.
        let reader = situation(1000, &perfmon, (false, false, true));
        assert!(decide(&reader, Backend::Perf).is_ok());
        // Without CAP_PERFMON: named, with the sysctl's value.
        let plain = situation(1000, &[Capability::DAC_READ_SEARCH], (false, false, true));
        let e = decide(&plain, Backend::Perf).unwrap_err();
        assert!(
            matches!(
                e,
                PrivilegeError::PerfmonMissing {
                    uid: 1000,
                    paranoid: 2
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("CAP_PERFMON"), "{e}");
        // ... unless perf_event_paranoid is -1.
        let mut open = plain.clone();
        open.paranoid = Some(-1);
        assert!(decide(&open, Backend::Perf).is_ok());
        // An instances directory a group may write, but root's 0640 enable files: named.
        let group = situation(1000, &[], (true, false, true));
        let e = decide(&group, Backend::Instance).unwrap_err();
        assert!(
            matches!(&e, PrivilegeError::TracefsNotWritable { path, .. }
                if path.ends_with("events/enable")),
            "{e}"
        );
    }

    /// On this machine, as it runs: whatever the answer, a refusal names a path or a
    /// capability (root on a host with tracefs mounted passes).
    #[test]
    fn the_current_process_gets_an_answer() {
        let s = Situation::current(Path::new("/sys/kernel/tracing")).unwrap();
        for b in [Backend::Instance, Backend::Perf] {
            if let Err(e) = decide(&s, b) {
                let t = e.to_string();
                assert!(
                    t.contains("/sys/kernel/tracing") || t.contains("CAP_"),
                    "{t}"
                );
            }
        }
    }
}
