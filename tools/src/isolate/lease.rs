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

use crate::gpu::Gpu;
use rustix::fd::OwnedFd;
use rustix::fs::{FlockOperation, Mode, OFlags};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Where the lock files live unless `DRMTOOL_LEASE_DIR` names another directory.
pub const DEFAULT_DIR: &str = "/run/drmtool/leases";

/// The lease directory: `$DRMTOOL_LEASE_DIR`, else [`DEFAULT_DIR`]. Under sudo (`SUDO_UID`
/// set) the variable is ignored: a user must not move a job's leases to a directory no
/// other job looks at.
pub fn dir() -> PathBuf {
    std::env::var_os("DRMTOOL_LEASE_DIR")
        .filter(|_| std::env::var_os("SUDO_UID").is_none())
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
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    /// Another holder has it (or all K slots).
    #[error("leased by another holder")]
    Busy,
    /// The lock directory or file could not be made or opened (one line, with the path).
    #[error("{0}")]
    Io(String),
    /// The directory or a lock file is not root's alone (another user could forge or
    /// remove leases there).
    #[error(
        "{path} is not root's alone (owner uid {uid}, mode {mode:o}): lease files must be \
         root-owned and writable by no one else"
    )]
    NotRootOwned {
        /// The file.
        path: String,
        /// Its owner.
        uid: u32,
        /// Its permission bits.
        mode: u32,
    },
}

/// The lease directory, open and checked (root-owned, writable by root alone).
#[derive(Debug)]
pub struct LeaseDir {
    fd: OwnedFd,
    path: PathBuf,
}

impl LeaseDir {
    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn root_only(st: &rustix::fs::Stat, path: &Path) -> Result<(), LeaseError> {
    let mode = st.st_mode & 0o7777;
    if st.st_uid != 0 || mode & 0o022 != 0 {
        return Err(LeaseError::NotRootOwned {
            path: path.display().to_string(),
            uid: st.st_uid,
            mode,
        });
    }
    Ok(())
}

/// Makes the lease directory (0755, root's; searchable, so that `drmtool leases` and
/// `pick` can map `/proc/locks` inodes to devices without opening a lock file) if it is
/// not there, opens it and checks it (after opening: the fd's owner and mode).
///
/// # Errors
/// [`LeaseError::NotRootOwned`], or the errno naming the directory (not root: `/run` is
/// not writable).
pub fn open_dir(d: &Path) -> Result<LeaseDir, LeaseError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(d)
        .map_err(|e| {
            LeaseError::Io(format!(
                "cannot make the lease directory {}: {e} (hint: run as root)",
                d.display()
            ))
        })?;
    let fd = rustix::fs::open(
        d,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| LeaseError::Io(format!("cannot open {}: {e}", d.display())))?;
    let st = rustix::fs::fstat(&fd)
        .map_err(|e| LeaseError::Io(format!("fstat {}: {e}", d.display())))?;
    root_only(&st, d)?;
    Ok(LeaseDir {
        fd,
        path: d.to_path_buf(),
    })
}

/// Opens (making it 0600) the lock file `name` in `d` and checks the file opened: a regular
/// file owned by root, writable by no one else (an old 0644 one is made 0600).
fn open_lock(d: &LeaseDir, name: &str) -> Result<OwnedFd, LeaseError> {
    let path = d.path.join(name);
    // O_NOFOLLOW: a symlink planted in the directory is refused, not followed.
    let fd = rustix::fs::openat(
        &d.fd,
        name,
        OFlags::RDWR | OFlags::CREATE | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|e| LeaseError::Io(format!("cannot open {}: {e}", path.display())))?;
    let st = rustix::fs::fstat(&fd)
        .map_err(|e| LeaseError::Io(format!("fstat {}: {e}", path.display())))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(LeaseError::Io(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    if st.st_uid == 0 && st.st_mode & 0o7777 != 0o600 {
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o600))
            .map_err(|e| LeaseError::Io(format!("chmod {}: {e}", path.display())))?;
        return open_lock(d, name);
    }
    root_only(&st, &path)?;
    Ok(fd)
}

/// Locks `name` in `d` with `op`, and checks that the locked file is still the one the
/// name gives (if it was unlinked or replaced between the open and the lock, the lock is
/// on a file no one else will ever open: try again).
fn lock_file(d: &LeaseDir, name: &str, op: FlockOperation) -> Result<OwnedFd, LeaseError> {
    for _ in 0..16 {
        let fd = open_lock(d, name)?;
        try_flock(&fd, op)?;
        let held = rustix::fs::fstat(&fd).map_err(|e| LeaseError::Io(format!("fstat: {e}")))?;
        match rustix::fs::statat(&d.fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
            Ok(now) if now.st_ino == held.st_ino && now.st_dev == held.st_dev => return Ok(fd),
            _ => continue,
        }
    }
    Err(LeaseError::Io(format!(
        "{}: the lock file keeps being replaced",
        d.path.join(name).display()
    )))
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

/// Tries to lease `g` now (never blocks).
///
/// # Errors
/// [`LeaseError::Busy`] when it is held so that this lease cannot be had, else the I/O
/// failure.
pub fn try_lease(d: &LeaseDir, g: &Gpu, mode: Sharing) -> Result<Lease, LeaseError> {
    let k = key(g);
    match mode {
        Sharing::Exclusive => {
            let lock = lock_file(
                d,
                &format!("{k}.lock"),
                FlockOperation::NonBlockingLockExclusive,
            )?;
            stamp(&lock);
            Ok(Lease {
                index: g.index,
                key: k,
                slot: None,
                fds: vec![lock],
            })
        }
        Sharing::Shared(n) => {
            let lock = lock_file(
                d,
                &format!("{k}.lock"),
                FlockOperation::NonBlockingLockShared,
            )?;
            for slot in 0..n.max(1) {
                match lock_file(
                    d,
                    &format!("{k}.slot{slot}"),
                    FlockOperation::NonBlockingLockExclusive,
                ) {
                    Ok(f) => {
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

/// What `drmtool leases` shows of a job: written by its supervisor (root) as
/// `job-<pid>.json` in the lease directory, 0644, and believed only while that pid has
/// that start time (a record a dead supervisor left names nobody).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct JobRecord {
    /// The supervisor's pid (the lock holder in `/proc/locks`).
    pub pid: u32,
    /// Its start time in clock ticks since boot.
    pub start_ticks: u64,
    /// The job's uid.
    pub uid: u32,
    /// The job's user name.
    pub user: String,
    /// The job's cgroup.
    pub cgroup: String,
    /// The command and its arguments.
    pub command: Vec<String>,
    /// When it started, seconds since the epoch.
    pub started: u64,
}

/// A written [`JobRecord`]: removed when dropped.
#[derive(Debug)]
pub struct RecordFile(Option<PathBuf>);

impl Drop for RecordFile {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Writes `r` into the lease directory `d` (best effort: `leases` then shows less).
pub fn write_job_record(d: &Path, r: &JobRecord) -> RecordFile {
    let path = d.join(format!("job-{}.json", r.pid));
    let Ok(text) = serde_json::to_vec(r) else {
        return RecordFile(None);
    };
    let ok = rustix::fs::open(
        &path,
        OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .and_then(|fd| {
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o644))?;
        rustix::io::write(&fd, &text).map(drop)
    });
    RecordFile(ok.is_ok().then_some(path))
}

/// The record of the supervisor `pid` in `d`, if one is there, root-owned, and still
/// about the live process `pid` (same start time).
pub fn read_job_record(d: &Path, pid: u32) -> Option<JobRecord> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let path = d.join(format!("job-{pid}.json"));
    let f = std::fs::File::open(&path).ok()?;
    let m = f.metadata().ok()?;
    if m.uid() != 0 || m.mode() & 0o022 != 0 || !m.is_file() {
        return None;
    }
    let mut text = Vec::new();
    f.take(64 * 1024).read_to_end(&mut text).ok()?;
    let r: JobRecord = serde_json::from_slice(&text).ok()?;
    (r.pid == pid && super::anchor::start_ticks(pid) == Some(r.start_ticks)).then_some(r)
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

/// `drmtool leases --json` (`tools/schema/leases.schema.json`).
#[derive(Debug, Clone, Serialize)]
pub struct LeasesReport {
    /// [`crate::SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The lease directory read.
    pub directory: String,
    /// Who holds what, with cgroups ([`with_cgroups`]).
    pub leases: Vec<Holder>,
}

/// The holders of every lease in [`dir`], from it and `/proc/locks`.
pub fn report() -> LeasesReport {
    let d = dir();
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    LeasesReport {
        schema_version: crate::SCHEMA_VERSION,
        directory: d.display().to_string(),
        leases: with_cgroups(&d, holders(&d, &locks)),
    }
}

/// The table `drmtool leases` prints, SINCE relative to `now` (seconds since the epoch);
/// every text a user controls escaped.
pub fn render(r: &LeasesReport, now: u64) -> String {
    let mut rows: Vec<Vec<String>> = vec![
        [
            "DEVICE", "MODE", "SLOT", "PID", "USER", "SINCE", "CGROUP", "COMMAND",
        ]
        .map(String::from)
        .to_vec(),
    ];
    rows.extend(r.leases.iter().map(|h| {
        vec![
            h.device.clone(),
            h.mode.to_string(),
            h.slot.map_or("-".into(), |s| s.to_string()),
            h.pid.to_string(),
            h.user
                .as_deref()
                .map_or("-".into(), |u| crate::Untrusted::from(u).escaped()),
            h.since.map_or("-".into(), |s| crate::render::since(s, now)),
            h.cgroup.as_ref().map_or("-".into(), |c| c.escaped()),
            h.command.as_ref().map_or("-".into(), |c| c.escaped()),
        ]
    }));
    let mut t: String = crate::render::align(&rows)
        .into_iter()
        .map(|l| l + "\n")
        .collect();
    if r.leases.is_empty() {
        t.push_str(&format!("(no leases held in {})\n", r.directory));
    }
    t
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
    /// The job's user, from its supervisor's record.
    pub user: Option<String>,
    /// The job's command, from its supervisor's record (text any user chooses).
    pub command: Option<crate::Untrusted>,
}

/// Fills each holder's cgroup, user and command: from its supervisor's [`JobRecord`] in
/// `d` where there is a live one, else the cgroup of the holder pid (`/proc/<pid>/cgroup`;
/// kept apart from [`holders`], whose counts the retry loop of `run --pick` reads many
/// times a second).
pub fn with_cgroups(d: &Path, mut hs: Vec<Holder>) -> Vec<Holder> {
    for h in &mut hs {
        if let Some(r) = u32::try_from(h.pid)
            .ok()
            .and_then(|p| read_job_record(d, p))
        {
            h.cgroup = Some(crate::Untrusted::from(r.cgroup.as_str()));
            h.user = Some(r.user);
            h.command = Some(crate::Untrusted::from(r.command.join(" ").as_str()));
            continue;
        }
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
                user: None,
                command: None,
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
            vendor_nodes: Vec::new(),
            numa_node: None,
            local_cpulist: None,
        }
    }

    #[test]
    fn leases_exclude_as_documented_and_die_with_their_fds() {
        let d = std::env::temp_dir().join(format!("drmtool-leases-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let dir = open_dir(&d).unwrap();
        let (a, b) = (gpu(0, "0000:00:05.0"), gpu(1, "vk/ms"));
        assert_eq!(key(&b), "vk_ms");
        let x = try_lease(&dir, &a, Sharing::Exclusive).unwrap();
        // flock is per open file: a second open in this process is another holder.
        assert_eq!(
            try_lease(&dir, &a, Sharing::Exclusive).unwrap_err(),
            LeaseError::Busy
        );
        assert_eq!(
            try_lease(&dir, &a, Sharing::Shared(4)).unwrap_err(),
            LeaseError::Busy
        );
        let s1 = try_lease(&dir, &b, Sharing::Shared(2)).unwrap();
        let s2 = try_lease(&dir, &b, Sharing::Shared(2)).unwrap();
        assert_eq!((s1.slot, s2.slot), (Some(0), Some(1)));
        assert_eq!(
            try_lease(&dir, &b, Sharing::Shared(2)).unwrap_err(),
            LeaseError::Busy
        );
        assert_eq!(
            try_lease(&dir, &b, Sharing::Exclusive).unwrap_err(),
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
        let again = try_lease(&dir, &a, Sharing::Exclusive).unwrap();
        let s3 = try_lease(&dir, &b, Sharing::Shared(2)).unwrap();
        assert_eq!(s3.slot, Some(0));
        drop((again, s2, s3));
        // A symlink planted as a lock file is refused, not followed.
        let victim = d.join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, d.join("evil.lock")).unwrap();
        assert!(matches!(
            try_lease(&dir, &gpu(2, "evil"), Sharing::Exclusive),
            Err(LeaseError::Io(_))
        ));
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        // Lock files are made 0600, an old 0644 one is made 0600 when opened.
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&d.join("0000:00:05.0.lock")), 0o600);
        let old = d.join("old.lock");
        std::fs::write(&old, "").unwrap();
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o644)).unwrap();
        drop(try_lease(&dir, &gpu(3, "old"), Sharing::Exclusive).unwrap());
        assert_eq!(mode(&old), 0o600);
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A lease directory others may write (or not root's) is refused: a user could plant,
    /// lock or remove lease files there. Run as root (CI and the guests); as another user
    /// the directory is that user's and refused for that reason.
    #[test]
    fn a_directory_others_may_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let d = std::env::temp_dir().join(format!("drmtool-leases-open-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let e = open_dir(&d).unwrap_err();
        assert!(matches!(e, LeaseError::NotRootOwned { .. }), "{e}");
        assert!(
            e.to_string()
                .contains("root-owned and writable by no one else"),
            "{e}"
        );
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        let r = open_dir(&d);
        if rustix::process::getuid().is_root() {
            assert!(r.is_ok(), "{r:?}");
        } else {
            assert!(matches!(r, Err(LeaseError::NotRootOwned { .. })));
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
}
