//! Who a `drmtool run` job runs as.
//!
//! The rules (the threat model in tools/README.md):
//! - `run` needs root: it attaches a device program and makes namespaces. A user starts it
//!   through `sudo` (the sudoers line in tools/README.md).
//! - Started through sudo by a user (the parent process is sudo and `SUDO_UID` is not 0),
//!   the job runs as that user (`SUDO_UID`, `SUDO_GID`, the user's groups), and `--user`
//!   and `--as-root` are refused: the sudo rule grants GPUs, never another identity.
//! - Otherwise (root, or `SUDO_UID` that no sudo parent vouches for, such as a `sudo -i`
//!   shell's) the caller says who: `--user NAME|UID[:GID]`, or `--as-root` for a root job
//!   (scoped to its GPUs, with a reduced capability set, but not contained). A job never
//!   runs as root by accident.

use std::ffi::{CString, OsString};

/// `--user NAME|UID[:GID]` as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserSpec {
    /// A login name or a numeric uid.
    pub user: UserRef,
    /// The primary group instead of the user's own.
    pub gid: Option<u32>,
}

/// A user by name or number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserRef {
    /// A login name.
    Name(String),
    /// A numeric uid.
    Uid(u32),
}

impl UserSpec {
    /// Parses `NAME`, `UID`, `NAME:GID` or `UID:GID`.
    ///
    /// # Errors
    /// [`WhoError::BadUser`] for an empty part, a non-numeric GID, or a name with
    /// characters a login name never has.
    pub fn parse(s: &str) -> Result<UserSpec, WhoError> {
        let bad = || WhoError::BadUser(s.to_string());
        let (u, g) = match s.split_once(':') {
            Some((u, g)) => (u, Some(g.parse::<u32>().map_err(|_| bad())?)),
            None => (s, None),
        };
        if u.is_empty() {
            return Err(bad());
        }
        let user = match u.parse::<u32>() {
            Ok(uid) => UserRef::Uid(uid),
            Err(_) => {
                let ok = u
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '$'))
                    && !u.starts_with('-');
                if !ok {
                    return Err(bad());
                }
                UserRef::Name(u.to_string())
            }
        };
        Ok(UserSpec { user, gid: g })
    }
}

/// What the process that started `drmtool run` is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The real uid of this process.
    pub uid: u32,
    /// `SUDO_UID`/`SUDO_GID`, only when the parent process is sudo (else `None`).
    pub sudo: Option<(u32, u32)>,
}

/// Who the job runs as, before the user database is asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// A user (by `--user`, or the sudo caller's uid and gid).
    User(UserSpec),
    /// Root, with the reduced capability set of `--as-root`.
    Root,
}

/// Why the job's identity was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WhoError {
    /// Not root: `run` cannot isolate anything.
    #[error(
        "drmtool run needs root (a device program and namespaces): start it through sudo \
         (tools/README.md gives the sudoers line)"
    )]
    NotRoot,
    /// Through sudo, `--user` or `--as-root` was given.
    #[error(
        "started through sudo by uid {uid}, the job runs as that user: --user and --as-root \
         are refused"
    )]
    SudoFixed {
        /// The sudo caller.
        uid: u32,
    },
    /// Root gave neither `--user` nor `--as-root`.
    #[error(
        "say who the job runs as: --user NAME|UID[:GID], or --as-root for a root job (scoped \
         to its GPUs, not contained)"
    )]
    Unsaid,
    /// Both were given.
    #[error("--user and --as-root exclude each other")]
    Both,
    /// `--user root` / uid 0.
    #[error("--user names root: use --as-root for a root job")]
    UserIsRoot,
    /// A malformed `--user`.
    #[error("--user {0:?} is not NAME, UID, NAME:GID or UID:GID")]
    BadUser(String),
    /// No such user in the passwd database.
    #[error("no user {0:?} in the passwd database")]
    NoSuchUser(String),
    /// The passwd or group lookup failed.
    #[error("looking up user {user:?}: {errno}")]
    Lookup {
        /// The user asked for.
        user: String,
        /// The error.
        errno: rustix::io::Errno,
    },
}

/// Decides who the job runs as (pure; [`resolve`] asks the user database).
///
/// # Errors
/// See [`WhoError`].
pub fn decide(c: &Caller, user: Option<&UserSpec>, as_root: bool) -> Result<Decision, WhoError> {
    if c.uid != 0 {
        return Err(WhoError::NotRoot);
    }
    if let Some((uid, gid)) = c.sudo
        && uid != 0
    {
        if user.is_some() || as_root {
            return Err(WhoError::SudoFixed { uid });
        }
        return Ok(Decision::User(UserSpec {
            user: UserRef::Uid(uid),
            gid: Some(gid),
        }));
    }
    match (user, as_root) {
        (Some(_), true) => Err(WhoError::Both),
        (None, false) => Err(WhoError::Unsaid),
        (None, true) => Ok(Decision::Root),
        (Some(u), false) => {
            if u.user == UserRef::Uid(0) || u.user == UserRef::Name("root".into()) {
                return Err(WhoError::UserIsRoot);
            }
            Ok(Decision::User(u.clone()))
        }
    }
}

/// A job's user, resolved: ids, supplementary groups and the variables `runuser` sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobUser {
    /// User id (never 0).
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Supplementary groups (`initgroups(3)`: every group of the user, `gid` included).
    pub groups: Vec<u32>,
    /// Login name (`USER`, `LOGNAME`), the uid in decimal when the database has none.
    pub name: OsString,
    /// `HOME` (`/` when unknown).
    pub home: OsString,
    /// `SHELL` (`/bin/sh` when unknown).
    pub shell: OsString,
}

/// Resolves a [`Decision::User`] through the passwd and group databases (NSS).
///
/// # Errors
/// [`WhoError::NoSuchUser`] for an unknown name (an unknown uid runs with no
/// supplementary groups, as `setpriv` does), [`WhoError::UserIsRoot`] when a name
/// resolves to uid 0, [`WhoError::Lookup`] when the database fails.
pub fn resolve(spec: &UserSpec) -> Result<JobUser, WhoError> {
    let label = match &spec.user {
        UserRef::Name(n) => n.clone(),
        UserRef::Uid(u) => u.to_string(),
    };
    let lookup_err = |errno| WhoError::Lookup {
        user: label.clone(),
        errno,
    };
    let pw = match &spec.user {
        UserRef::Name(n) => {
            let c = CString::new(n.as_str()).map_err(|_| WhoError::BadUser(n.clone()))?;
            Some(
                crate::sys_call::passwd_lookup(Some(&c), 0)
                    .map_err(lookup_err)?
                    .ok_or_else(|| WhoError::NoSuchUser(n.clone()))?,
            )
        }
        UserRef::Uid(u) => crate::sys_call::passwd_lookup(None, *u).map_err(lookup_err)?,
    };
    let (uid, name, home, shell, own_gid) = match (&spec.user, pw) {
        (_, Some(p)) => (p.uid, p.name, p.home, p.shell, Some(p.gid)),
        (UserRef::Uid(u), None) => (
            *u,
            OsString::from(u.to_string()),
            "/".into(),
            "/bin/sh".into(),
            None,
        ),
        (UserRef::Name(n), None) => return Err(WhoError::NoSuchUser(n.clone())),
    };
    if uid == 0 {
        return Err(WhoError::UserIsRoot);
    }
    let gid = spec.gid.or(own_gid).unwrap_or(uid);
    let groups = match own_gid {
        Some(_) => {
            use std::os::unix::ffi::OsStrExt;
            let c = CString::new(name.as_bytes()).map_err(|_| WhoError::BadUser(label.clone()))?;
            let mut g = crate::sys_call::group_list(&c, gid).map_err(lookup_err)?;
            g.sort_unstable();
            g.dedup();
            g
        }
        None => vec![gid],
    };
    Ok(JobUser {
        uid,
        gid,
        groups,
        name,
        home,
        shell,
    })
}

/// Whether `exe` (the target of `/proc/<ppid>/exe`) is sudo: Debian's `/usr/bin/sudo` or a
/// local build's `/usr/local/bin/sudo`.
pub fn is_sudo_exe(exe: &std::path::Path) -> bool {
    matches!(
        exe.to_str(),
        Some("/usr/bin/sudo" | "/usr/local/bin/sudo" | "/bin/sudo")
    )
}

/// This process as a [`Caller`]: its real uid, and `SUDO_UID`/`SUDO_GID` only when the
/// parent process is a root-owned, set-uid sudo binary (a `sudo -i` shell's children and a
/// variable set by hand do not count).
pub fn caller() -> Caller {
    let uid = rustix::process::getuid().as_raw();
    let sudo = (|| {
        let num = |k: &str| std::env::var(k).ok()?.parse::<u32>().ok();
        let (u, g) = (num("SUDO_UID")?, num("SUDO_GID")?);
        let ppid = rustix::process::getppid()?.as_raw_nonzero().get();
        let exe = std::fs::read_link(format!("/proc/{ppid}/exe")).ok()?;
        let st = rustix::fs::stat(&exe).ok()?;
        let setuid_root = st.st_uid == 0 && st.st_mode & 0o4000 != 0;
        (is_sudo_exe(&exe) && setuid_root).then_some((u, g))
    })();
    Caller { uid, sudo }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(s: &str) -> UserSpec {
        UserSpec::parse(s).unwrap()
    }

    #[test]
    fn user_specs() {
        assert_eq!(spec("alice").user, UserRef::Name("alice".into()));
        assert_eq!(
            spec("1000:100"),
            UserSpec {
                user: UserRef::Uid(1000),
                gid: Some(100)
            }
        );
        assert_eq!(spec("bob:27").gid, Some(27));
        for bad in ["", ":1", "a:", "a:b", "-rf", "a b", "a/b", "x\u{1b}[31m"] {
            assert!(UserSpec::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn who_a_job_runs_as() {
        let root = Caller { uid: 0, sudo: None };
        let via_sudo = Caller {
            uid: 0,
            sudo: Some((1000, 1000)),
        };
        let sudo_by_root = Caller {
            uid: 0,
            sudo: Some((0, 0)),
        };
        let user = Caller {
            uid: 1000,
            sudo: None,
        };
        let alice = spec("alice");
        assert_eq!(decide(&user, None, false), Err(WhoError::NotRoot));
        assert_eq!(decide(&user, Some(&alice), false), Err(WhoError::NotRoot));
        assert_eq!(
            decide(&root, None, false),
            Err(WhoError::Unsaid),
            "never root by accident"
        );
        assert_eq!(decide(&root, None, true), Ok(Decision::Root));
        assert_eq!(
            decide(&root, Some(&alice), false),
            Ok(Decision::User(alice.clone()))
        );
        assert_eq!(decide(&root, Some(&alice), true), Err(WhoError::Both));
        assert_eq!(
            decide(&root, Some(&spec("root")), false),
            Err(WhoError::UserIsRoot)
        );
        assert_eq!(
            decide(&root, Some(&spec("0")), false),
            Err(WhoError::UserIsRoot)
        );
        assert_eq!(
            decide(&via_sudo, None, false),
            Ok(Decision::User(UserSpec {
                user: UserRef::Uid(1000),
                gid: Some(1000)
            }))
        );
        assert_eq!(
            decide(&via_sudo, None, true),
            Err(WhoError::SudoFixed { uid: 1000 })
        );
        assert_eq!(
            decide(&via_sudo, Some(&alice), false),
            Err(WhoError::SudoFixed { uid: 1000 })
        );
        // sudo run by root is root: it says who, as root does.
        assert_eq!(decide(&sudo_by_root, None, false), Err(WhoError::Unsaid));
        assert_eq!(decide(&sudo_by_root, None, true), Ok(Decision::Root));
    }

    #[test]
    fn only_sudo_is_sudo() {
        assert!(is_sudo_exe(std::path::Path::new("/usr/bin/sudo")));
        assert!(!is_sudo_exe(std::path::Path::new("/bin/bash")));
        assert!(!is_sudo_exe(std::path::Path::new("/tmp/sudo")));
        assert!(!is_sudo_exe(std::path::Path::new(
            "/usr/bin/sudo (deleted)"
        )));
    }
}
