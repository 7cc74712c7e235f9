//! GPU leases: `flock(2)` on a lock file per device under `/run/drmtool/leases`, so that jobs
//! started at the same moment never get the same GPU, and a holder that dies frees its
//! lease (the kernel drops a flock with the last fd of its open file).
//!
//! Per device (its key: the PCI bus id or the platform device's name):
//! - `<key>.lock`: an exclusive lease takes it `LOCK_EX`; a shared one `LOCK_SH`, so the
//!   two kinds exclude each other;
//! - `<key>.slot<i>`: a shared lease (`--shared K`) also takes one of slots `0..K` `LOCK_EX`,
//!   so at most K shared holders (that asked for the same K) hold the device.
//!
//! Every lock is non-blocking: a busy device is skipped for the next candidate, and a
//! caller that may wait retries until an absolute deadline. Who holds what is read from
//! `/proc/locks` (the kernel's table: the pid that took each lock), never from the files'
//! contents; `since` is the lock file's modification time, which the holder sets.

use crate::isolate::ordering::Gpu;
use rustix::fd::OwnedFd;
use rustix::fs::{FlockOperation, Mode, OFlags};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Where the lock files live unless `DRMTOOL_LEASE_DIR` names another directory.
pub const DEFAULT_DIR: &str = "/run/drmtool/leases";

/// The lease directory: `$DRMTOOL_LEASE_DIR`, else [`DEFAULT_DIR`].
pub fn dir() -> PathBuf {
    std::env::var_os("DRMTOOL_LEASE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DIR))
}

/// The lock-file key of a GPU: its PCI bus id, else its device name (a platform device),
/// with anything but `[A-Za-z0-9:._-]` as `_`.
pub fn key(g: &Gpu) -> String {
    g.bus_id
        .as_deref()
        .unwrap_or(&g.name)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, ':' | '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// How a lease shares its device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Sharing {
    /// The only holder.
    Exclusive,
    /// One of at most K holders.
    Shared(u32),
}

/// A lease held: the open lock files (their flocks go with the last fd).
#[derive(Debug)]
pub struct Lease {
    /// The GPU's index in the ordering.
    pub index: usize,
    /// Its key.
    pub key: String,
    /// The slot, for a shared lease.
    pub slot: Option<u32>,
    /// The lock file and, for a shared lease, the slot file.
    pub fds: Vec<OwnedFd>,
}

/// Why a lease was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseError {
    /// Another holder has it (or all K slots).
    Busy,
    /// The lock directory or file could not be made or opened (one line, with the path).
    Io(String),
}

fn open_lock(path: &Path) -> Result<OwnedFd, LeaseError> {
    // O_NOFOLLOW: a symlink planted in the directory is refused, not followed.
    rustix::fs::open(
        path,
        OFlags::RDWR | OFlags::CREATE | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::from_raw_mode(0o644),
    )
    .map_err(|e| LeaseError::Io(format!("cannot open {}: {e}", path.display())))
}

fn try_flock(fd: &OwnedFd, op: FlockOperation) -> Result<(), LeaseError> {
    loop {
        match rustix::fs::flock(fd, op) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::WOULDBLOCK) => return Err(LeaseError::Busy),
            Err(e) => return Err(LeaseError::Io(format!("flock: {e}"))),
        }
    }
}

/// Records the holder in the file it locked exclusively (its mtime is `since`).
fn stamp(fd: &OwnedFd) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let text = format!("{} {now}\n", std::process::id());
    let _ = rustix::fs::ftruncate(fd, 0);
    let _ = rustix::io::pwrite(fd, text.as_bytes(), 0);
}

/// Makes the lease directory (mode 0755) if it is not there.
///
/// # Errors
/// One line naming the directory and the errno (not root: `/run` is not writable).
pub fn ensure_dir(d: &Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(d)
        .map_err(|e| {
            format!(
                "cannot make the lease directory {}: {e} (hint: run as root, or set DRMTOOL_LEASE_DIR)",
                d.display()
            )
        })
}

/// Tries to lease `g` now (never blocks).
///
/// # Errors
/// [`LeaseError::Busy`] when it is held so that this lease cannot be had, else the I/O
/// failure.
pub fn try_lease(d: &Path, g: &Gpu, mode: Sharing) -> Result<Lease, LeaseError> {
    let k = key(g);
    let lock = open_lock(&d.join(format!("{k}.lock")))?;
    match mode {
        Sharing::Exclusive => {
            try_flock(&lock, FlockOperation::NonBlockingLockExclusive)?;
            stamp(&lock);
            Ok(Lease {
                index: g.index,
                key: k,
                slot: None,
                fds: vec![lock],
            })
        }
        Sharing::Shared(n) => {
            try_flock(&lock, FlockOperation::NonBlockingLockShared)?;
            for slot in 0..n.max(1) {
                let f = open_lock(&d.join(format!("{k}.slot{slot}")))?;
                match try_flock(&f, FlockOperation::NonBlockingLockExclusive) {
                    Ok(()) => {
                        stamp(&f);
                        return Ok(Lease {
                            index: g.index,
                            key: k,
                            slot: Some(slot),
                            fds: vec![lock, f],
                        });
                    }
                    Err(LeaseError::Busy) => continue,
                    Err(e) => return Err(e),
                }
            }
            Err(LeaseError::Busy)
        }
    }
}

/// One lock of `/proc/locks`: the holder's pid, whether it is exclusive (`WRITE`), and the
/// file (device major, minor, inode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcLock {
    /// The pid that took it (as the reader's pid namespace sees it; -1 outside).
    pub pid: i64,
    /// `WRITE` (exclusive) rather than `READ` (shared).
    pub exclusive: bool,
    /// The file's device, major.
    pub major: u32,
    /// The file's device, minor.
    pub minor: u32,
    /// The file's inode.
    pub inode: u64,
}

/// The `FLOCK` entries of `/proc/locks` text (`1: FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0
/// EOF`); blocked waiters (`->`), POSIX and OFD locks and lines that do not fit are left out.
pub fn parse_proc_locks(text: &str) -> Vec<ProcLock> {
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 6 || f.get(1) == Some(&"->") || f[1] != "FLOCK" {
            continue;
        }
        let exclusive = match f[3] {
            "WRITE" => true,
            "READ" => false,
            _ => continue,
        };
        let Ok(pid) = f[4].parse::<i64>() else {
            continue;
        };
        let mut dev = f[5].split(':');
        let (Some(ma), Some(mi), Some(ino), None) =
            (dev.next(), dev.next(), dev.next(), dev.next())
        else {
            continue;
        };
        let (Ok(major), Ok(minor), Ok(inode)) = (
            u32::from_str_radix(ma, 16),
            u32::from_str_radix(mi, 16),
            ino.parse::<u64>(),
        ) else {
            continue;
        };
        out.push(ProcLock {
            pid,
            exclusive,
            major,
            minor,
            inode,
        });
    }
    out
}

/// One holder of a lease, as `drmtool leases` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Holder {
    /// The device key (bus id or platform device name).
    pub device: String,
    /// `exclusive`, or `shared` with the slot.
    pub mode: &'static str,
    /// The slot of a shared lease.
    pub slot: Option<u32>,
    /// The pid that took the lock (from `/proc/locks`).
    pub pid: i64,
    /// Its cgroup v2 path, when readable (hostile text, escaped in tables).
    pub cgroup: Option<crate::Untrusted>,
    /// When the lease was taken (the lock file's mtime, seconds since the epoch).
    pub since: Option<u64>,
}

/// Fills each holder's cgroup (`/proc/<pid>/cgroup`; kept apart from [`holders`], whose
/// counts the retry loop of `run --pick` reads many times a second).
pub fn with_cgroups(mut hs: Vec<Holder>) -> Vec<Holder> {
    for h in &mut hs {
        h.cgroup = u32::try_from(h.pid).ok().and_then(|p| {
            let t = std::fs::read(format!("/proc/{p}/cgroup")).ok()?;
            crate::scan::cgroup_v2_path(&t).map(|c| crate::Untrusted::from(c.as_str()))
        });
    }
    hs
}

/// The holders of every lease in `d`, from `/proc/locks` (`locks` is its text), without
/// their cgroups ([`with_cgroups`]).
pub fn holders(d: &Path, locks: &str) -> Vec<Holder> {
    use std::os::unix::fs::MetadataExt;
    let table = parse_proc_locks(locks);
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(d) else {
        return out;
    };
    let mut files: Vec<(String, std::fs::Metadata)> = rd
        .flatten()
        .filter_map(|e| {
            let m = e.path().symlink_metadata().ok()?;
            m.is_file()
                .then(|| (e.file_name().to_string_lossy().into_owned(), m))
        })
        .collect();
    files.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, m) in &files {
        let (device, slot) = if let Some(k) = name.strip_suffix(".lock") {
            (k.to_string(), None)
        } else if let Some((k, s)) = name.rsplit_once(".slot")
            && let Ok(s) = s.parse::<u32>()
        {
            (k.to_string(), Some(s))
        } else {
            continue;
        };
        let (maj, min) = (rustix::fs::major(m.dev()), rustix::fs::minor(m.dev()));
        for l in table
            .iter()
            .filter(|l| l.inode == m.ino() && l.major == maj && l.minor == min)
        {
            // A shared holder shows on the lock file (READ) and on its slot (WRITE): list
            // it once, by its slot.
            let mode = match (slot, l.exclusive) {
                (None, true) => "exclusive",
                (Some(_), true) => "shared",
                _ => continue,
            };
            let since = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_secs());
            out.push(Holder {
                device: device.clone(),
                mode,
                slot,
                pid: l.pid,
                cgroup: None,
                since,
            });
        }
    }
    out
}

/// How many holders each device key has now (for ranking).
pub fn held_counts(hs: &[Holder]) -> std::collections::BTreeMap<String, usize> {
    let mut m = std::collections::BTreeMap::new();
    for h in hs {
        *m.entry(h.device.clone()).or_insert(0) += 1;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_locks_lines() {
        let t = "1: FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF\n\
                 1: -> FLOCK  ADVISORY  WRITE 99 00:1a:5678 0 EOF\n\
                 2: FLOCK  ADVISORY  READ 77 fd:01:42 0 EOF\n\
                 3: POSIX  ADVISORY  WRITE 5 00:1a:1 0 EOF\n\
                 4: OFDLCK ADVISORY  READ -1 00:05:9 0 EOF\n\
                 5: FLOCK  ADVISORY  WRITE x 00:1a:1 0 EOF\n\
                 6: FLOCK  ADVISORY  WRITE 5 00:1a 0 EOF\n\
                 garbage\n";
        assert_eq!(
            parse_proc_locks(t),
            [
                ProcLock {
                    pid: 1234,
                    exclusive: true,
                    major: 0,
                    minor: 0x1a,
                    inode: 5678
                },
                ProcLock {
                    pid: 77,
                    exclusive: false,
                    major: 0xfd,
                    minor: 1,
                    inode: 42
                },
            ]
        );
    }

    fn gpu(index: usize, name: &str) -> Gpu {
        Gpu {
            index,
            bus_id: None,
            name: name.into(),
            driver: None,
            pci_id: None,
            nodes: Vec::new(),
            numa_node: None,
            local_cpulist: None,
        }
    }

    #[test]
    fn leases_exclude_as_documented_and_die_with_their_fds() {
        let d = std::env::temp_dir().join(format!("drmtool-leases-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        ensure_dir(&d).unwrap();
        let (a, b) = (gpu(0, "0000:00:05.0"), gpu(1, "vk/ms"));
        assert_eq!(key(&b), "vk_ms");
        let x = try_lease(&d, &a, Sharing::Exclusive).unwrap();
        // flock is per open file: a second open in this process is another holder.
        assert_eq!(
            try_lease(&d, &a, Sharing::Exclusive).unwrap_err(),
            LeaseError::Busy
        );
        assert_eq!(
            try_lease(&d, &a, Sharing::Shared(4)).unwrap_err(),
            LeaseError::Busy
        );
        let s1 = try_lease(&d, &b, Sharing::Shared(2)).unwrap();
        let s2 = try_lease(&d, &b, Sharing::Shared(2)).unwrap();
        assert_eq!((s1.slot, s2.slot), (Some(0), Some(1)));
        assert_eq!(
            try_lease(&d, &b, Sharing::Shared(2)).unwrap_err(),
            LeaseError::Busy
        );
        assert_eq!(
            try_lease(&d, &b, Sharing::Exclusive).unwrap_err(),
            LeaseError::Busy
        );
        let locks = std::fs::read_to_string("/proc/locks").unwrap();
        let hs = holders(&d, &locks);
        let me = i64::from(std::process::id());
        let mut seen: Vec<(&str, &str, Option<u32>)> = hs
            .iter()
            .filter(|h| h.pid == me)
            .map(|h| (h.device.as_str(), h.mode, h.slot))
            .collect();
        seen.sort();
        assert_eq!(
            seen,
            [
                ("0000:00:05.0", "exclusive", None),
                ("vk_ms", "shared", Some(0)),
                ("vk_ms", "shared", Some(1))
            ],
            "{hs:?}"
        );
        // Dropping the fds releases the locks.
        drop((x, s1));
        let again = try_lease(&d, &a, Sharing::Exclusive).unwrap();
        let s3 = try_lease(&d, &b, Sharing::Shared(2)).unwrap();
        assert_eq!(s3.slot, Some(0));
        drop((again, s2, s3));
        // A symlink planted as a lock file is refused, not followed.
        let victim = d.join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, d.join("evil.lock")).unwrap();
        assert!(matches!(
            try_lease(&d, &gpu(2, "evil"), Sharing::Exclusive),
            Err(LeaseError::Io(_))
        ));
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
