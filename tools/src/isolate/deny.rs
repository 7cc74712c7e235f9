//! "No GPU outside a job": `drmtool cgroup deny-gpus CGROUP` attaches a device program
//! (named `drmtool_deny`) that denies every node of the GPU majors ([`machine_majors`]:
//! DRM 226, accel 261, NVIDIA's 195, every `/proc/devices` major named `nvidia*` and the
//! major of every vendor node found, such as kfd's; whole majors, so that a GPU added
//! later is covered) to a cgroup such as `user.slice`; `allow-gpus` detaches the programs so named. The program is attached
//! with `BPF_F_ALLOW_MULTI`, so it adds to what the cgroup's other programs deny, and the
//! cgroup's descendants (login sessions, user services) cannot lift it.

use super::devprog::Policy;
use super::inspect::{self, InspectError};
use super::run::{GPU_MAJORS, RunError, load};
use rustix::fd::AsFd;
use serde::Serialize;
use std::path::PathBuf;

/// The name deny-gpus gives its program (15 bytes at most: the kernel's limit).
pub const PROG_NAME: &str = "drmtool_deny";

/// What deny-gpus or allow-gpus did (`tools/schema/cgroup-deny.schema.json`).
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// As every drmtool JSON document.
    pub schema_version: u32,
    /// The cgroup.
    pub cgroup: String,
    /// Program ids attached now (deny-gpus: the new one, or the one already there).
    pub attached: Vec<u32>,
    /// Program ids detached (allow-gpus).
    pub detached: Vec<u32>,
    /// deny-gpus found one already attached and attached nothing.
    pub already: bool,
    /// The majors denied.
    pub majors: Vec<u32>,
}

/// Why deny-gpus or allow-gpus failed.
#[derive(Debug, thiserror::Error)]
pub enum DenyError {
    /// The cgroup or a program could not be read.
    #[error("{0}")]
    Inspect(InspectError),
    /// Loading the program failed.
    #[error(transparent)]
    Load(#[from] RunError),
    /// A bpf(2) or open call failed.
    #[error("{what} {path}: {errno}")]
    Sys {
        /// The call.
        what: &'static str,
        /// The cgroup.
        path: String,
        /// The error.
        errno: rustix::io::Errno,
    },
}

fn open(dir: &std::path::Path) -> Result<rustix::fd::OwnedFd, DenyError> {
    rustix::fs::open(
        dir,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|errno| DenyError::Sys {
        what: "open",
        path: dir.display().to_string(),
        errno,
    })
}

/// The majors a program's rules (read back from the kernel) deny, when they are exactly a
/// deny policy's ([`policy_for`]) and cover at least [`GPU_MAJORS`]: a deny-gpus program
/// attached before a vendor module loaded (fewer majors) is still one.
pub fn denied_majors(rules: &[String]) -> Option<Vec<u32>> {
    let majors: Vec<u32> = rules
        .iter()
        .filter_map(|l| l.strip_prefix("deny c ")?.split_once(":*")?.0.parse().ok())
        .collect();
    let canonical = inspect::rule_lines(&policy_for(&majors));
    (canonical == rules && GPU_MAJORS.iter().all(|m| majors.contains(m))).then_some(majors)
}

/// Whether `p` is a deny-gpus program: its name and, read back from the kernel, a deny
/// policy's rules ([`denied_majors`]).
fn is_deny(p: &inspect::Program) -> bool {
    p.name == PROG_NAME && p.kind == "drmtool" && denied_majors(&p.rules).is_some()
}

/// The deny-gpus programs attached to the cgroup itself: ids and the majors each denies.
fn ours(dir: &std::path::Path) -> Result<Vec<(u32, Vec<u32>)>, DenyError> {
    let r = inspect::inspect(dir).map_err(DenyError::Inspect)?;
    Ok(r.attached
        .iter()
        .filter(|p| p.name == PROG_NAME && p.kind == "drmtool")
        .filter_map(|p| Some((p.id, denied_majors(&p.rules)?)))
        .collect())
}

/// Whether GPU nodes are denied in a cgroup, and by which deny-gpus programs
/// (`tools/schema/cgroup-show-gpus.schema.json`).
#[derive(Debug, Clone, Serialize)]
pub struct Shown {
    /// As every drmtool JSON document.
    pub schema_version: u32,
    /// The cgroup.
    pub cgroup: String,
    /// A deny-gpus program applies (attached here or to an ancestor).
    pub denied: bool,
    /// Ids of deny-gpus programs attached to the cgroup itself.
    pub attached: Vec<u32>,
    /// Ids of deny-gpus programs that apply through an ancestor.
    pub inherited: Vec<u32>,
}

/// `drmtool cgroup show-gpus CGROUP`: whether deny-gpus applies there.
///
/// # Errors
/// As [`deny_gpus`].
pub fn show(cgroup: &str) -> Result<Shown, DenyError> {
    let dir = inspect::resolve(Some(cgroup)).map_err(DenyError::Inspect)?;
    let r = inspect::inspect(&dir).map_err(DenyError::Inspect)?;
    let attached: Vec<u32> = r
        .attached
        .iter()
        .filter(|p| is_deny(p))
        .map(|p| p.id)
        .collect();
    let inherited: Vec<u32> = r
        .effective
        .iter()
        .filter(|p| is_deny(p) && !attached.contains(&p.id))
        .map(|p| p.id)
        .collect();
    Ok(Shown {
        schema_version: crate::scan::SCHEMA_VERSION,
        cgroup: dir.display().to_string(),
        denied: !attached.is_empty() || !inherited.is_empty(),
        attached,
        inherited,
    })
}

/// One line for [`show`]'s answer.
pub fn render_shown(s: &Shown) -> String {
    let ids = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
    match (s.attached.is_empty(), s.inherited.is_empty()) {
        (true, true) => format!(
            "{}: GPU nodes not denied by drmtool (see drmtool cgroup devices)\n",
            s.cgroup
        ),
        (false, _) => format!(
            "{}: GPU nodes denied (deny-gpus program {} attached here)\n",
            s.cgroup,
            ids(&s.attached)
        ),
        (true, false) => format!(
            "{}: GPU nodes denied (deny-gpus program {} of an ancestor)\n",
            s.cgroup,
            ids(&s.inherited)
        ),
    }
}

/// The majors deny-gpus denies on this machine: [`GPU_MAJORS`], NVIDIA's 195, every
/// `/proc/devices` major named `nvidia*` and every vendor node's
/// ([`vendor_access`](super::vendor_access::vendor_access) of no GPU).
pub fn machine_majors() -> Vec<u32> {
    machine_majors_in(&crate::vendor::VendorRoots::default())
}

/// [`machine_majors`] of the machine whose `/proc`, `/sys` and `/dev` are at `roots` (a
/// synthetic tree in tests).
pub fn machine_majors_in(roots: &crate::vendor::VendorRoots) -> Vec<u32> {
    super::vendor_access::vendor_access(
        &[],
        &crate::vendor::discover(roots),
        &super::vendor_access::read_proc_devices_in(&roots.proc_root),
    )
    .majors
}

/// The deny policy of `majors`: every node of them denied, everything else left to the
/// cgroup's other programs.
pub fn policy_for(majors: &[u32]) -> Policy {
    Policy::only_nodes(&[], majors)
}

/// The deny policy of this machine ([`machine_majors`]).
pub fn policy() -> Policy {
    policy_for(&machine_majors())
}

/// Attaches the deny program to `cgroup` (a path under /sys/fs/cgroup or absolute) unless
/// one is there.
///
/// # Errors
/// [`DenyError`]: no such cgroup, no right to load or attach (root), a kernel without
/// cgroup device programs.
pub fn deny_gpus(cgroup: &str) -> Result<Outcome, DenyError> {
    let dir: PathBuf = inspect::resolve(Some(cgroup)).map_err(DenyError::Inspect)?;
    let fd = open(&dir)?;
    let majors = machine_majors();
    // One already there that denies every major of this machine now: nothing to add (one
    // from before a vendor module loaded stays, and a fuller one joins it).
    let covering: Vec<u32> = ours(&dir)?
        .into_iter()
        .filter(|(_, m)| majors.iter().all(|x| m.contains(x)))
        .map(|(id, _)| id)
        .collect();
    let mut o = Outcome {
        schema_version: crate::scan::SCHEMA_VERSION,
        cgroup: dir.display().to_string(),
        attached: covering.clone(),
        detached: Vec::new(),
        already: !covering.is_empty(),
        majors: majors.clone(),
    };
    if o.already {
        return Ok(o);
    }
    let prog = load(&policy_for(&majors), PROG_NAME)?;
    crate::sys_call::bpf_attach_cgroup_device(
        fd.as_fd(),
        prog.as_fd(),
        ioctl_sys::bpf::BPF_F_ALLOW_MULTI,
    )
    .map_err(|errno| DenyError::Sys {
        what: "BPF_PROG_ATTACH to",
        path: o.cgroup.clone(),
        errno,
    })?;
    o.attached =
        vec![
            crate::sys_call::bpf_prog_id(prog.as_fd()).map_err(|errno| DenyError::Sys {
                what: "BPF_OBJ_GET_INFO_BY_FD for",
                path: o.cgroup.clone(),
                errno,
            })?,
        ];
    Ok(o)
}

/// Detaches every [`PROG_NAME`] program from `cgroup`.
///
/// # Errors
/// As [`deny_gpus`].
pub fn allow_gpus(cgroup: &str) -> Result<Outcome, DenyError> {
    let dir = inspect::resolve(Some(cgroup)).map_err(DenyError::Inspect)?;
    let fd = open(&dir)?;
    let mut o = Outcome {
        schema_version: crate::scan::SCHEMA_VERSION,
        cgroup: dir.display().to_string(),
        attached: Vec::new(),
        detached: Vec::new(),
        already: false,
        majors: Vec::new(),
    };
    for (id, majors) in ours(&dir)? {
        for m in majors {
            if !o.majors.contains(&m) {
                o.majors.push(m);
            }
        }
        let sys = |what: &'static str| {
            let path = o.cgroup.clone();
            move |errno| DenyError::Sys { what, path, errno }
        };
        let prog =
            crate::sys_call::bpf_prog_fd_by_id(id).map_err(sys("BPF_PROG_GET_FD_BY_ID for"))?;
        crate::sys_call::bpf_detach_cgroup_device(fd.as_fd(), prog.as_fd())
            .map_err(sys("BPF_PROG_DETACH from"))?;
        o.detached.push(id);
    }
    Ok(o)
}

/// One or two lines saying what was done.
pub fn render(o: &Outcome) -> String {
    let majors: Vec<String> = o.majors.iter().map(|m| format!("{m}:*")).collect();
    if !o.detached.is_empty() {
        let ids: Vec<String> = o.detached.iter().map(u32::to_string).collect();
        return format!(
            "{}: GPU nodes allowed again (detached program {})\n",
            o.cgroup,
            ids.join(", ")
        );
    }
    if o.attached.is_empty() {
        return format!(
            "{}: no deny-gpus program was attached; nothing to do\n",
            o.cgroup
        );
    }
    let ids: Vec<String> = o.attached.iter().map(u32::to_string).collect();
    format!(
        "{}: GPU nodes denied ({}) by program {}{}\n",
        o.cgroup,
        majors.join(", "),
        ids.join(", "),
        if o.already { " (already attached)" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isolate::devprog::{Access, DevType, Request};

    /// A program is ours whatever majors it denies beyond GPU_MAJORS (one attached before
    /// nvidia-uvm loaded is still found and detached), never one with fewer or any other
    /// rule.
    #[test]
    fn deny_programs_are_told_by_their_shape() {
        let rules = |m: &[u32]| inspect::rule_lines(&policy_for(m));
        assert_eq!(
            denied_majors(&rules(&[195, 226, 261, 509])),
            Some(vec![195, 226, 261, 509])
        );
        assert_eq!(denied_majors(&rules(&[226, 261])), Some(vec![226, 261]));
        assert_eq!(
            denied_majors(&rules(&[226])),
            None,
            "GPU_MAJORS not covered"
        );
        let mut extra = rules(&[226, 261]);
        extra.insert(0, "allow c 226:0 rwm".into());
        assert_eq!(denied_majors(&extra), None);
        let mut default_deny = rules(&[226, 261]);
        *default_deny.last_mut().unwrap() = "default deny".into();
        assert_eq!(denied_majors(&default_deny), None);
    }

    #[test]
    fn deny_covers_whole_majors_and_nothing_else() {
        let p = policy_for(&[195, 226, 261]);
        let req = |major, minor| Request {
            dev_type: DevType::Char,
            major,
            minor,
            access: Access::READ | Access::WRITE,
        };
        for (ma, mi) in [
            (226, 0),
            (226, 128),
            (226, 255),
            (261, 0),
            (261, 7),
            (195, 0),
            (195, 255),
        ] {
            assert!(!p.allows(req(ma, mi)), "{ma}:{mi}");
        }
        for (ma, mi) in [(1, 3), (5, 0), (136, 1), (10, 229)] {
            assert!(p.allows(req(ma, mi)), "{ma}:{mi}");
        }
        assert!(PROG_NAME.len() <= 15);
    }
}
