//! The process's own privileges (uids and the five capability sets of
//! `/proc/self/status`), and what `drmtool export` needs of them.
//!
//! Measured in a debian-6.12 guest (tools/README.md, "Running the exporter unprivileged"),
//! as a user that is not the holders' and not root:
//!
//! | capabilities | what the scan gets of other users' processes |
//! |---|---|
//! | none | nothing: `/proc/<pid>/fd` cannot be listed (counted as unreadable) |
//! | `CAP_SYS_PTRACE` | nothing: fdinfo and maps open, but the `fd` listing still fails |
//! | `CAP_DAC_READ_SEARCH` | the fds listed, but no fd link resolves: no holder at all, and nothing says so; debugfs reads |
//! | both | everything root sees |
//!
//! So the exporter needs both ([`SCAN_NEEDS`]); `CAP_NET_BIND_SERVICE` only to listen on
//! a port below 1024. `trace record`'s check ([`crate::trace::privilege`]) reads the same
//! sets.

use std::fmt;
use std::path::Path;

/// One Linux capability, by number (`CAP_*` of `linux/capability.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Capability(pub u8);

/// The names of capabilities 0 to 40 (`CAP_CHECKPOINT_RESTORE`, Linux 5.9), by number.
const NAMES: [&str; 41] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
];

impl Capability {
    /// Bypasses every file permission check.
    pub const DAC_OVERRIDE: Capability = Capability(1);
    /// Bypasses read permission on files and search permission on directories.
    pub const DAC_READ_SEARCH: Capability = Capability(2);
    /// Binds ports below 1024.
    pub const NET_BIND_SERVICE: Capability = Capability(10);
    /// Locks memory beyond `RLIMIT_MEMLOCK` (perf's ring buffers beyond
    /// `perf_event_mlock_kb`).
    pub const IPC_LOCK: Capability = Capability(14);
    /// Reads (and, with `ptrace(2)`, controls) any process: its fd links, fdinfo, maps,
    /// memory; `kcmp`.
    pub const SYS_PTRACE: Capability = Capability(19);
    /// The catch-all administration capability.
    pub const SYS_ADMIN: Capability = Capability(21);
    /// System-wide performance monitoring (`perf_event_open` on every CPU), Linux 5.8.
    pub const PERFMON: Capability = Capability(38);
    /// `bpf(2)` without `CAP_SYS_ADMIN`, Linux 5.8.
    pub const BPF: Capability = Capability(39);

    /// Its `CAP_*` name (`CAP_<n>` for a number this table does not know).
    pub fn name(self) -> String {
        NAMES
            .get(usize::from(self.0))
            .map_or_else(|| format!("CAP_{}", self.0), |n| (*n).to_string())
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// A set of capabilities, as the kernel's 64-bit masks hold them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CapSet(pub u64);

impl CapSet {
    /// No capability.
    pub const EMPTY: CapSet = CapSet(0);

    /// The set of `caps`.
    pub fn of(caps: &[Capability]) -> CapSet {
        CapSet(
            caps.iter()
                .filter(|c| c.0 < 64)
                .fold(0, |m, c| m | 1 << c.0),
        )
    }

    /// Whether `c` is in the set.
    pub fn contains(self, c: Capability) -> bool {
        c.0 < 64 && self.0 & (1 << c.0) != 0
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The capabilities in both.
    pub fn union(self, o: CapSet) -> CapSet {
        CapSet(self.0 | o.0)
    }

    /// The capabilities of `self` that are not in `o`.
    pub fn minus(self, o: CapSet) -> CapSet {
        CapSet(self.0 & !o.0)
    }

    /// The capabilities, lowest number first.
    pub fn iter(self) -> impl Iterator<Item = Capability> {
        (0u8..64)
            .filter(move |b| self.0 & (1 << b) != 0)
            .map(Capability)
    }
}

impl fmt::Display for CapSet {
    /// `CAP_A, CAP_B`, or `none`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        let names: Vec<String> = self.iter().map(Capability::name).collect();
        f.write_str(&names.join(", "))
    }
}

/// Why the process's own privileges could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// `/proc/self/status` could not be read.
    #[error("cannot read /proc/self/status: {0}")]
    Read(#[from] std::io::Error),
    /// A line it must have is absent or does not parse.
    #[error("/proc/self/status has no readable {0} line")]
    Field(&'static str),
}

/// The process's uids and capability sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Privileges {
    /// Real, effective, saved and file-system uid (`Uid:`).
    pub uids: [u32; 4],
    /// `CapInh`.
    pub inheritable: CapSet,
    /// `CapPrm`.
    pub permitted: CapSet,
    /// `CapEff`.
    pub effective: CapSet,
    /// `CapBnd`.
    pub bounding: CapSet,
    /// `CapAmb` (Linux 4.3; empty where the line is absent).
    pub ambient: CapSet,
}

/// The most of `/proc/self/status` read (the kernel's is about 1.5 KiB).
pub const STATUS_MAX: usize = 64 * 1024;

impl Privileges {
    /// This process's, from `/proc/self/status`.
    ///
    /// # Errors
    /// [`StatusError`] when the file cannot be read or lacks a line.
    pub fn current() -> Result<Privileges, StatusError> {
        Self::read(Path::new("/proc/self/status"))
    }

    /// Those a `status` file at `path` gives (read at most [`STATUS_MAX`] bytes).
    ///
    /// # Errors
    /// [`StatusError`] when the file cannot be read or lacks a line.
    pub fn read(path: &Path) -> Result<Privileges, StatusError> {
        let bytes = crate::sysfs::read_bounded_bytes(path, STATUS_MAX)?;
        Self::parse(&bytes)
    }

    /// Parses a `/proc/<pid>/status` text.
    ///
    /// # Errors
    /// [`StatusError::Field`] naming the first line absent or malformed.
    pub fn parse(text: &[u8]) -> Result<Privileges, StatusError> {
        let text = String::from_utf8_lossy(text);
        let field = |key: &'static str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
                .map(str::trim)
        };
        let mask = |key: &'static str| {
            field(key)
                .and_then(|v| u64::from_str_radix(v, 16).ok())
                .map(CapSet)
                .ok_or(StatusError::Field(key))
        };
        let ids: Vec<u32> = field("Uid")
            .map(|v| {
                v.split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        let uids: [u32; 4] = ids.try_into().map_err(|_| StatusError::Field("Uid"))?;
        Ok(Privileges {
            uids,
            inheritable: mask("CapInh")?,
            permitted: mask("CapPrm")?,
            effective: mask("CapEff")?,
            bounding: mask("CapBnd")?,
            ambient: match field("CapAmb") {
                None => CapSet::EMPTY,
                Some(_) => mask("CapAmb")?,
            },
        })
    }

    /// Whether the effective uid is 0.
    pub fn is_root(&self) -> bool {
        self.uids[1] == 0
    }

    /// Every capability the process holds or can raise: permitted, effective and ambient.
    pub fn held(&self) -> CapSet {
        self.permitted.union(self.effective).union(self.ambient)
    }
}

/// The capabilities the scan needs to see other users' processes, and what each gives.
pub const SCAN_NEEDS: [(Capability, &str); 2] = [
    (
        Capability::DAC_READ_SEARCH,
        "list other users' /proc/<pid>/fd and read debugfs (framebuffers, flink names, \
         unattributed dma-bufs)",
    ),
    (
        Capability::SYS_PTRACE,
        "read other users' fd links, fdinfo and maps, and compare their files with kcmp",
    ),
];

/// What `export` may hold when not root: [`SCAN_NEEDS`], and `CAP_NET_BIND_SERVICE` when
/// it listens on a port below 1024 (`port`: the listen port; `None` for `--textfile`).
pub fn export_allowed(port: Option<u16>) -> CapSet {
    let mut caps: Vec<Capability> = SCAN_NEEDS.iter().map(|(c, _)| *c).collect();
    if port.is_some_and(|p| p < 1024) {
        caps.push(Capability::NET_BIND_SERVICE);
    }
    CapSet::of(&caps)
}

/// The capabilities of [`SCAN_NEEDS`] the process's effective set lacks, each with what it
/// would give (`CAP_DAC_OVERRIDE` stands for `CAP_DAC_READ_SEARCH`).
pub fn scan_missing(p: &Privileges) -> Vec<(Capability, &'static str)> {
    SCAN_NEEDS
        .iter()
        .filter(|(c, _)| {
            let eff = p.effective;
            let covered =
                *c == Capability::DAC_READ_SEARCH && eff.contains(Capability::DAC_OVERRIDE);
            !eff.contains(*c) && !covered
        })
        .copied()
        .collect()
}

/// Why `export` refuses to start with the privileges it has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExportPrivilegeError {
    /// A process that is not root holds capabilities beyond what the scan needs.
    #[error(
        "running as uid {uid} with capabilities it does not need: {extra} (it needs only \
         {allowed}); drop them (systemd: CapabilityBoundingSet=, setpriv --bounding-set) or \
         pass --allow-extra-capabilities"
    )]
    Extra {
        /// The effective uid.
        uid: u32,
        /// What it holds beyond `allowed`.
        extra: CapSet,
        /// What it may hold.
        allowed: CapSet,
    },
    /// A process that is not root keeps uid 0 as its real, saved or file-system uid, and
    /// could become root again.
    #[error(
        "running as uid {euid} but uid 0 is still its {which} uid: it could become root \
         again (start it with every uid set, as setpriv --reuid or systemd User= do) or \
         pass --allow-extra-capabilities"
    )]
    RootUid {
        /// The effective uid.
        euid: u32,
        /// `real`, `saved` or `file-system`.
        which: &'static str,
    },
}

/// Whether `export` may run with `p`: root (effective uid 0) may, as it always could; a
/// process that is not root may hold [`export_allowed`] and nothing more, and no uid 0.
///
/// # Errors
/// [`ExportPrivilegeError`] saying what is too much.
pub fn check_export(p: &Privileges, port: Option<u16>) -> Result<(), ExportPrivilegeError> {
    if p.is_root() {
        return Ok(());
    }
    let names = ["real", "effective", "saved", "file-system"];
    if let Some(i) = p.uids.iter().position(|u| *u == 0) {
        return Err(ExportPrivilegeError::RootUid {
            euid: p.uids[1],
            which: names[i],
        });
    }
    let allowed = export_allowed(port);
    let extra = p.held().minus(allowed);
    if extra.is_empty() {
        Ok(())
    } else {
        Err(ExportPrivilegeError::Extra {
            uid: p.uids[1],
            extra,
            allowed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(uid: &str, prm: &str, eff: &str, amb: Option<&str>) -> String {
        let mut s = format!(
            "Name:\tdrmtool\nUid:\t{uid}\nGid:\t0\t0\t0\t0\nCapInh:\t0000000000000000\n\
             CapPrm:\t{prm}\nCapEff:\t{eff}\nCapBnd:\t000001ffffffffff\n"
        );
        if let Some(a) = amb {
            s.push_str(&format!("CapAmb:\t{a}\nNoNewPrivs:\t1\n"));
        }
        s
    }

    #[test]
    fn status_lines_parse_and_names_are_the_kernels() {
        // What the guest's setpriv run showed for +sys_ptrace,+dac_read_search.
        let p = Privileges::parse(
            status(
                "2100\t2100\t2100\t2100",
                "0000000000080004",
                "0000000000080004",
                Some("0000000000080004"),
            )
            .as_bytes(),
        )
        .unwrap();
        assert_eq!(p.uids, [2100; 4]);
        assert_eq!(p.held().to_string(), "CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE");
        assert_eq!(p.bounding.iter().count(), 41);
        assert_eq!(Capability(40).name(), "CAP_CHECKPOINT_RESTORE");
        assert_eq!(Capability(45).name(), "CAP_45");
        assert_eq!(CapSet::EMPTY.to_string(), "none");
        // No CapAmb (before 4.3): empty; a missing CapEff or a bad Uid line: an error.
        let old = Privileges::parse(status("0\t0\t0\t0", "1ff", "1ff", None).as_bytes()).unwrap();
        assert!(old.ambient.is_empty());
        assert!(matches!(
            Privileges::parse(b"Uid:\t1\t1\t1\t1\nCapPrm:\t0\n"),
            Err(StatusError::Field("CapInh"))
        ));
        assert!(matches!(
            Privileges::parse(status("1 2 3", "0", "0", None).as_bytes()),
            Err(StatusError::Field("Uid"))
        ));
        assert!(matches!(
            Privileges::parse(status("1 1 1 1", "zz", "0", None).as_bytes()),
            Err(StatusError::Field("CapPrm"))
        ));
    }

    fn privs(uids: [u32; 4], caps: &[Capability]) -> Privileges {
        let s = CapSet::of(caps);
        Privileges {
            uids,
            inheritable: s,
            permitted: s,
            effective: s,
            bounding: s,
            ambient: s,
        }
    }

    #[test]
    fn export_takes_root_or_exactly_what_the_scan_needs() {
        let needs = [Capability::SYS_PTRACE, Capability::DAC_READ_SEARCH];
        // Root with every capability: as before.
        let all: Vec<Capability> = (0..41).map(Capability).collect();
        assert_eq!(check_export(&privs([0; 4], &all), Some(9717)), Ok(()));
        // The unit's user: both, nothing else.
        let unit = privs([999; 4], &needs);
        assert_eq!(check_export(&unit, Some(9717)), Ok(()));
        assert!(scan_missing(&unit).is_empty());
        // One more (CAP_SYS_ADMIN): refused, naming it and what is allowed.
        let mut more = needs.to_vec();
        more.push(Capability::SYS_ADMIN);
        let e = check_export(&privs([999; 4], &more), Some(9717)).unwrap_err();
        assert_eq!(
            e,
            ExportPrivilegeError::Extra {
                uid: 999,
                extra: CapSet::of(&[Capability::SYS_ADMIN]),
                allowed: CapSet::of(&needs),
            }
        );
        let text = e.to_string();
        assert!(text.contains("CAP_SYS_ADMIN"), "{text}");
        assert!(text.contains("--allow-extra-capabilities"), "{text}");
        // Held only in the permitted set (it could raise it): refused too.
        let mut p = unit;
        p.permitted = p.permitted.union(CapSet::of(&[Capability::DAC_OVERRIDE]));
        assert!(check_export(&p, Some(9717)).is_err());
        // CAP_NET_BIND_SERVICE: only for a port below 1024.
        more.pop();
        more.push(Capability::NET_BIND_SERVICE);
        assert_eq!(check_export(&privs([999; 4], &more), Some(443)), Ok(()));
        assert!(check_export(&privs([999; 4], &more), Some(9717)).is_err());
        assert!(check_export(&privs([999; 4], &more), None).is_err());
        // A saved uid 0: it could become root again.
        assert_eq!(
            check_export(&privs([999, 999, 0, 999], &needs), Some(9717)),
            Err(ExportPrivilegeError::RootUid {
                euid: 999,
                which: "saved"
            })
        );
    }

    #[test]
    fn what_is_missing_is_named() {
        let none = privs([999; 4], &[]);
        let missing: Vec<Capability> = scan_missing(&none).iter().map(|(c, _)| *c).collect();
        assert_eq!(
            missing,
            [Capability::DAC_READ_SEARCH, Capability::SYS_PTRACE]
        );
        let ptrace_only = privs([999; 4], &[Capability::SYS_PTRACE]);
        assert_eq!(scan_missing(&ptrace_only)[0].0, Capability::DAC_READ_SEARCH);
        // Root in a container without CAP_SYS_PTRACE: missing; CAP_DAC_OVERRIDE covers
        // CAP_DAC_READ_SEARCH.
        let boxed = privs([0; 4], &[Capability::DAC_OVERRIDE]);
        let missing: Vec<Capability> = scan_missing(&boxed).iter().map(|(c, _)| *c).collect();
        assert_eq!(missing, [Capability::SYS_PTRACE]);
    }
}
