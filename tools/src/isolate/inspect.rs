//! `drmtool cgroup devices [CGROUP]`: what a cgroup v2 may open, decoded from its device
//! programs. cgroup v2 has no `devices.list`; the kernel keeps BPF programs
//! (`BPF_PROG_QUERY` lists their ids, `BPF_OBJ_GET_INFO_BY_FD` gives their instructions
//! as the verifier left them), and each is read back here: this drmtool's own programs
//! exactly ([`devprog::ours`]), any other device-list program (runc, crun, youki,
//! systemd) by [`devprog::decode`], and anything else is reported as opaque, with why.

use super::bpf;
use super::cgroup::{self, CgroupError};
use super::devprog;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// One attached program, read back.
#[derive(Debug, Clone, Serialize)]
pub struct Program {
    /// Kernel program id.
    pub id: u32,
    /// The name its loader gave it (`drmtool_run`, `sd_devices`, ...; user-controlled
    /// text, printed escaped).
    pub name: String,
    /// Instructions.
    pub insns: usize,
    /// `drmtool` (one of ours, rules exact), `device-list` (decoded) or `opaque`.
    pub kind: &'static str,
    /// Ours: the first-match rules (`allow c 226:128 rwm`, `default allow`).
    pub rules: Vec<String>,
    /// The decoded list (`c 226:* -`, most specific entry wins), when it decodes.
    pub list: Vec<String>,
    /// Why it is opaque.
    pub opaque: Option<String>,
}

/// The report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// As every drmtool JSON document.
    pub schema_version: u32,
    /// The cgroup directory.
    pub cgroup: PathBuf,
    /// `BPF_F_ALLOW_MULTI` / `BPF_F_ALLOW_OVERRIDE` / none, of the cgroup's own programs.
    pub attach_flags: String,
    /// Programs attached to this cgroup itself.
    pub attached: Vec<Program>,
    /// Every program that runs for it (its ancestors' included), in the kernel's order;
    /// a device access is allowed only if all allow it.
    pub effective: Vec<Program>,
}

/// Why the report could not be made.
#[derive(Debug)]
pub enum InspectError {
    /// cgroup v2 is missing, or the path is not a cgroup.
    Cgroup(CgroupError),
    /// A bpf(2) command failed.
    Bpf {
        /// The command.
        what: &'static str,
        /// The errno.
        errno: rustix::io::Errno,
    },
}

impl std::fmt::Display for InspectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InspectError::Cgroup(e) => write!(f, "{e}"),
            InspectError::Bpf { what, errno } => {
                let hint = match *errno {
                    rustix::io::Errno::PERM | rustix::io::Errno::ACCESS => {
                        " (reading BPF programs needs CAP_SYS_ADMIN: run as root)"
                    }
                    _ => "",
                };
                write!(f, "{what}: {errno}{hint}")
            }
        }
    }
}

/// `cgroup` as given: absolute, or relative to `/sys/fs/cgroup`; `None`: this process's.
pub fn resolve(cgroup: Option<&str>) -> Result<PathBuf, InspectError> {
    cgroup::check_v2().map_err(InspectError::Cgroup)?;
    match cgroup {
        None => cgroup::own().map_err(InspectError::Cgroup),
        Some(c) if c.starts_with(cgroup::ROOT) => Ok(PathBuf::from(c)),
        Some(c) => Ok(Path::new(cgroup::ROOT).join(c.trim_start_matches('/'))),
    }
}

/// A policy of ours as `cgroup devices` prints it: `allow c 226:128 rwm` ... `default allow`.
pub fn rule_lines(policy: &devprog::Policy) -> Vec<String> {
    let n = |v: Option<u32>| v.map_or("*".to_string(), |v| v.to_string());
    policy
        .rules
        .iter()
        .map(|r| {
            format!(
                "{} {} {}:{} {}",
                if r.allow { "allow" } else { "deny" },
                r.dev_type.map_or('a', |t| t.letter()),
                n(r.major),
                n(r.minor),
                r.access.letters()
            )
        })
        .chain([format!(
            "default {}",
            if policy.default_allow {
                "allow"
            } else {
                "deny"
            }
        )])
        .collect()
}

/// Reads one program back.
pub fn program(id: u32) -> Result<Program, InspectError> {
    let info = crate::sys_call::bpf_prog_info_by_id(id).map_err(|errno| InspectError::Bpf {
        what: "BPF_OBJ_GET_INFO_BY_FD",
        errno,
    })?;
    let mut p = Program {
        id: info.id,
        name: crate::Untrusted::new(info.name.as_bytes()).escaped(),
        insns: info.xlated.len() / 8,
        kind: "opaque",
        rules: Vec::new(),
        list: Vec::new(),
        opaque: None,
    };
    if info.prog_type != ioctl_sys::bpf::BPF_PROG_TYPE_CGROUP_DEVICE {
        p.opaque = Some(format!(
            "program type {} is not BPF_PROG_TYPE_CGROUP_DEVICE",
            info.prog_type
        ));
        return Ok(p);
    }
    let Some(insns) = bpf::from_bytes(&info.xlated).filter(|i| !i.is_empty()) else {
        p.opaque =
            Some("the kernel gave no instructions (kernel.kptr_restrict, or not root)".into());
        return Ok(p);
    };
    if let Some(policy) = devprog::ours(&insns) {
        p.kind = "drmtool";
        p.rules = rule_lines(&policy);
    }
    match devprog::decode(&insns) {
        Ok(list) => {
            if p.kind == "opaque" {
                p.kind = "device-list";
            }
            p.list = list.iter().map(|e| e.to_string()).collect();
        }
        Err(why) => {
            if p.kind == "opaque" {
                p.opaque = Some(why.to_string());
            }
        }
    }
    Ok(p)
}

/// The report for the cgroup directory `dir`.
pub fn inspect(dir: &Path) -> Result<Report, InspectError> {
    let fd = rustix::fs::open(
        dir,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|errno| {
        InspectError::Cgroup(CgroupError::Io {
            what: format!("open {}", dir.display()),
            errno,
        })
    })?;
    use rustix::fd::AsFd;
    let query = |effective| {
        crate::sys_call::bpf_query_cgroup_device(fd.as_fd(), effective).map_err(|errno| {
            InspectError::Bpf {
                what: "BPF_PROG_QUERY",
                errno,
            }
        })
    };
    let (flags, own) = query(false)?;
    let (_, eff) = query(true)?;
    let read = |ids: &[u32]| {
        ids.iter()
            .map(|&id| program(id))
            .collect::<Result<Vec<_>, _>>()
    };
    Ok(Report {
        schema_version: crate::SCHEMA_VERSION,
        cgroup: dir.to_path_buf(),
        attach_flags: match flags {
            0 => "none".into(),
            f if f & ioctl_sys::bpf::BPF_F_ALLOW_MULTI != 0 => "BPF_F_ALLOW_MULTI".into(),
            f if f & ioctl_sys::bpf::BPF_F_ALLOW_OVERRIDE != 0 => "BPF_F_ALLOW_OVERRIDE".into(),
            f => format!("{f:#x}"),
        },
        attached: read(&own)?,
        effective: read(&eff)?,
    })
}

/// The report as text.
pub fn render(r: &Report) -> String {
    let mut s = format!(
        "cgroup {} (attach flags: {})\n",
        r.cgroup.display(),
        r.attach_flags
    );
    if r.effective.is_empty() {
        s.push_str("no device programs: every device may be opened (as far as cgroups go)\n");
    }
    for (title, list) in [
        ("attached here", &r.attached),
        ("effective (all must allow)", &r.effective),
    ] {
        s.push_str(&format!("{title}: {} program(s)\n", list.len()));
        for p in list {
            s.push_str(&format!(
                "  id {} {:?} {} insns: {}\n",
                p.id, p.name, p.insns, p.kind
            ));
            for l in &p.rules {
                s.push_str(&format!("    rule {l}\n"));
            }
            for l in &p.list {
                s.push_str(&format!("    {l}\n"));
            }
            if let Some(o) = &p.opaque {
                s.push_str(&format!("    opaque program: {o}\n"));
            }
        }
    }
    s
}
