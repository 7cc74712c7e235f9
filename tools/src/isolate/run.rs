//! `drmtool run --gpu SEL[,SEL...] (--user U | --as-root) [--pick N] -- CMD ARGS...`: runs
//! a command that can open only its GPUs, enforced by the kernel, as its user, contained.
//!
//! The supervisor (this process, root) resolves the selectors in the ordering
//! ([`crate::gpu`]), decides who the job runs as ([`super::who`]), takes the GPUs'
//! leases ([`super::lease`]; exclusive unless shared), makes the job's cgroup under a
//! parent only root can write ([`super::anchor`]), attaches the device program (the chosen
//! nodes allowed, every other node of the GPU majors denied) and checks that every
//! ancestor's program still applies (`BPF_PROG_QUERY` with `BPF_F_QUERY_EFFECTIVE`), then
//! clones the job's init into that cgroup with new pid and mount namespaces
//! ([`super::job`]: no re-exec of drmtool, no environment variable, the plan is in the
//! clone's memory). It forwards SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to
//! the job, waits, removes the cgroup once empty, releases the leases and returns the
//! command's status (128 + the signal when it was killed). If the supervisor dies, the
//! init's death signal ends the whole job.

use super::anchor::{self, JobCgroup, Parent};
use super::devprog::{self, Policy};
use super::env::{vendor_env, vendor_env_in_job};
use super::job::{self, Identity, JobPlan};
use super::lease::{self, Lease, Sharing};
use super::pick::Want;
use super::vendor_access;
use super::who::{self, Caller, UserSpec};
use crate::gpu::{self, Gpu, GpuSpec};
use drm_gem::NodeKind;
use rustix::fd::{AsFd, OwnedFd};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub use super::job::EXIT_SETUP;
pub use times::{Mark, Phase, StartTimes};

mod supervise;
mod times;

/// What `drmtool run` was asked.
#[derive(Debug, Clone, Default)]
pub struct RunRequest {
    /// The selectors, in order.
    pub gpus: Vec<GpuSpec>,
    /// Present the chosen nodes as card0.., renderD128.. in selector order.
    pub renumber: bool,
    /// Print the variables only.
    pub env_only: bool,
    /// The command and its arguments.
    pub argv: Vec<OsString>,
    /// `--pick N`: choose N GPUs among the selectors' (all when none) and lease them.
    pub pick: Option<PickRequest>,
    /// `--user`: who the job runs as (root callers only).
    pub user: Option<UserSpec>,
    /// `--as-root`: a root job with a reduced capability set (root callers only).
    pub as_root: bool,
    /// `--keep-fd N`: fds besides 0-2 the command keeps.
    pub keep_fds: Vec<i32>,
    /// `--shared K` with `--gpu`: one of at most K holders of each GPU, instead of the
    /// only one.
    pub shared: Option<u32>,
    /// `--wait SECS` with `--gpu`: retry while a chosen GPU is leased by others.
    pub wait: std::time::Duration,
    /// `--cgroup-parent`: where the job cgroups go, relative to the cgroup root (default
    /// [`anchor::DEFAULT_PARENT`]).
    pub cgroup_parent: Option<PathBuf>,
    /// `--mem-max`, `--mem-low`, `--mem-min`: GPU memory limits of the job's cgroup
    /// ([`crate::dmem`]), set before it starts and read back.
    pub mem: Vec<crate::dmem::LimitRequest>,
    /// `--bind`: pin the job to its GPUs' local CPUs and NUMA nodes ([`super::bind`]).
    pub bind: bool,
    /// Who started this (default: this process, [`who::caller`]); tests set it.
    pub caller: Option<Caller>,
}

/// Why `run` did not run the command.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Bad selectors or arguments.
    #[error("{0}")]
    Usage(String),
    /// The job's identity was refused.
    #[error(transparent)]
    Who(#[from] who::WhoError),
    /// A `--gpu` spec that is none of the forms.
    #[error(transparent)]
    Spec(#[from] gpu::SpecError),
    /// No DRM devices here, or a spec names none of them.
    #[error(transparent)]
    Select(#[from] gpu::SelectError),
    /// The isolation could not be set up.
    #[error("{0}")]
    Setup(String),
    /// The job cgroup's parent was refused.
    #[error(transparent)]
    Anchor(#[from] anchor::AnchorError),
    /// Not enough eligible GPUs, or all of them leased by others until the deadline.
    #[error("{0}")]
    NoGpu(String),
    /// A `--near` spec that does not resolve here.
    #[error(transparent)]
    Near(#[from] crate::topo::near::NearError),
    /// `--bind` could not pin the job to its GPUs' CPUs and nodes.
    #[error(transparent)]
    Bind(#[from] super::bind::BindError),
    /// A `drmtool place` request's `near` that does not resolve here.
    #[error("request {request}: {source}")]
    NearOf {
        /// The request's name.
        request: String,
        /// Why.
        source: crate::topo::near::NearError,
    },
    /// A GPU memory limit that cannot be enforced or did not take (no dmem controller, a
    /// GPU whose driver registers no region, a value that does not read back).
    #[error(transparent)]
    Mem(#[from] crate::dmem::DmemError),
    /// A chosen GPU has a vendor node drmtool could not identify: a job on it is refused
    /// rather than given a guessed node (or none of the ones it needs).
    #[error(
        "GPU {gpu}: its {kind:?} node is not identified ({}: {}); refusing to run a job on it",
        node.source.display(),
        node.reason
    )]
    Unidentified {
        /// The GPU (bus id or name).
        gpu: String,
        /// What was not identified.
        kind: crate::vendor::VendorNodeKind,
        /// The report's entry.
        node: Box<crate::vendor::Unidentified>,
    },
}

/// Something `run` reports while it still runs the job ([`run_with`]); the CLI prints each
/// as one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RunWarning {
    /// The job gets an NVIDIA GPU, `nvidia-uvm` was not loaded and could not be
    /// ([`super::uvm`]): it runs without `/dev/nvidia-uvm` (no CUDA unified memory; CUDA
    /// itself may refuse to start).
    #[error(
        "nvidia-uvm is not loaded ({0}); the job runs without /dev/nvidia-uvm (CUDA may fail \
         to initialize: load nvidia-uvm at boot where CUDA jobs run)"
    )]
    UvmNotLoaded(super::uvm::UvmError),
}

/// The variable that tells the command which leases its job holds: `KEY` (exclusive) or
/// `KEY/SLOT` (shared) per GPU, comma-separated. The supervisor holds the lock files (and
/// the job's init a copy); the command gets no lock fd, so it cannot release or pass on
/// its lease.
pub const LEASES_ENV: &str = "DRMTOOL_LEASES";

/// `drmtool run --pick N [--shared K] [--wait SECS]`.
#[derive(Debug, Clone)]
pub struct PickRequest {
    /// How many GPUs.
    pub n: usize,
    /// Exclusive, or one of K holders.
    pub sharing: Sharing,
    /// How long to retry while the eligible GPUs are leased by others.
    pub wait: std::time::Duration,
    /// Exclusions (driver, clients, free memory).
    pub want: Want,
}

pub use super::job::PlacedNode;

/// The nodes of the chosen GPUs as the child places them: the real names, or with
/// `renumber` card0.. and renderD128.. in selector order (a GPU without a render node
/// leaves no gap). `by-path` links keep the original names (they name the bus position)
/// and point at the placed node.
pub fn placement(
    chosen: &[&Gpu],
    renumber: bool,
    stat: impl Fn(&Path) -> (u32, (u32, u32)),
) -> Vec<PlacedNode> {
    let (mut cards, mut renders) = (0u32, 0u32);
    let mut out = Vec::new();
    for g in chosen {
        for n in &g.nodes {
            let original = n
                .path
                .file_name()
                .and_then(|f| f.to_str())
                .unwrap_or_default()
                .to_string();
            let name = if renumber {
                match n.kind {
                    NodeKind::Primary => {
                        cards += 1;
                        format!("card{}", cards - 1)
                    }
                    NodeKind::Render => {
                        renders += 1;
                        format!("renderD{}", 127 + renders)
                    }
                }
            } else {
                original
            };
            let (mode, owner) = stat(&n.path);
            out.push(PlacedNode {
                name,
                dev: n.dev,
                mode,
                owner,
                by_path: n.by_path.clone(),
            });
        }
    }
    out
}

/// The permission bits and owner of a node; a node that vanished since the scan gets
/// 0660 root:root (the job's copy is then no more open than the usual default).
fn stat_node(p: &Path) -> (u32, (u32, u32)) {
    match rustix::fs::stat(p) {
        Ok(st) => (st.st_mode & 0o7777, (st.st_uid, st.st_gid)),
        Err(_) => (0o660, (0, 0)),
    }
}

pub use super::choose::{
    PickReport, all_gpus, candidates, choose, held_by_index, lease_chosen, pick_and_lease, resolve,
    why_lines,
};

/// The device majors a job is limited on: DRM (226), accel (261). Every node of these
/// majors not chosen is denied, whatever the cgroup's ancestors allow.
pub const GPU_MAJORS: [u32; 2] = [devprog::DRM_MAJOR, 261];

/// The character-device majors of NVIDIA's nodes: 195 (`/dev/nvidiaN`, `nvidiactl`) and
/// every `/proc/devices` entry named `nvidia*` (`nvidia-uvm`, `nvidia-caps`, ...; their
/// majors are dynamic). `devices` is the text of `/proc/devices`.
pub fn nvidia_majors(devices: &str) -> Vec<u32> {
    let mut v = vec![195];
    let mut chars = false;
    for l in devices.lines() {
        match l.trim() {
            "Character devices:" => chars = true,
            "Block devices:" => chars = false,
            t if chars => {
                if let Some((n, name)) = t.split_once(' ')
                    && name.trim().starts_with("nvidia")
                    && let Ok(n) = n.parse::<u32>()
                    && !v.contains(&n)
                {
                    v.push(n);
                }
            }
            _ => {}
        }
    }
    v
}

/// Refuses an fd the command would inherit (0-2, `--keep-fd`) that is a GPU device node
/// (a node of `majors`: DRM, accel, NVIDIA, KFD) outside `allowed` (major, minor), or is
/// not open.
pub fn check_inherited(
    fds: &[i32],
    allowed: &[(u32, u32)],
    majors: &[u32],
) -> Result<(), RunError> {
    for &fd in fds {
        let st = crate::sys_call::fstat_raw(fd)
            .map_err(|e| RunError::Usage(format!("--keep-fd {fd}: not an open fd here ({e})")))?;
        let Some(st) = st else { continue };
        let is_char = rustix::fs::FileType::from_raw_mode(st.st_mode)
            == rustix::fs::FileType::CharacterDevice;
        let (ma, mi) = (rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev));
        if is_char && majors.contains(&ma) && !allowed.contains(&(ma, mi)) {
            return Err(RunError::Usage(format!(
                "fd {fd} is a GPU node outside the job ({ma}:{mi}): a job gets only its GPUs, \
                 also through the fds it inherits"
            )));
        }
    }
    Ok(())
}

/// The command's path: `argv0` itself when it has a `/`, else the first executable match
/// in `path` (the job's PATH), as `execvp` would search.
pub fn find_program(argv0: &std::ffi::OsStr, path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    if argv0.as_bytes().contains(&b'/') {
        return Some(PathBuf::from(argv0));
    }
    let path = path.unwrap_or(std::ffi::OsStr::new("/usr/local/bin:/usr/bin:/bin"));
    std::env::split_paths(path)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(argv0))
        .find(|p| {
            rustix::fs::access(p, rustix::fs::Access::EXEC_OK).is_ok()
                && std::fs::metadata(p).is_ok_and(|m| m.is_file())
        })
}

static JOB_COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Runs the request: returns the command's exit status (or prints the variables). Its
/// warnings ([`RunWarning`]) are dropped: [`run_with`] receives them.
pub fn run(req: &RunRequest, out: &mut dyn std::io::Write) -> Result<u8, RunError> {
    run_with(req, out, &mut |_| {})
}

/// [`run`], handing each [`RunWarning`] to `warn` as it arises (before the job starts).
pub fn run_with(
    req: &RunRequest,
    out: &mut dyn std::io::Write,
    warn: &mut dyn FnMut(&RunWarning),
) -> Result<u8, RunError> {
    run_timed(req, out, warn, &mut StartTimes::off())
}

/// [`run_with`], recording the start-up's [`Mark`]s into `times` when it is on
/// ([`StartTimes::on`]): the supervisor's, the job's init's and command's (through the
/// error pipe), the exec and the reaping. Off, nothing more is read or written.
pub fn run_timed(
    req: &RunRequest,
    out: &mut dyn std::io::Write,
    warn: &mut dyn FnMut(&RunWarning),
    times: &mut StartTimes,
) -> Result<u8, RunError> {
    times.mark(Mark::Start);
    let caller = req.caller.clone().unwrap_or_else(who::caller);
    if req.env_only {
        return env_only(req, out);
    }
    let Some(argv0) = req.argv.first() else {
        return Err(RunError::Usage(
            "no command: drmtool run --gpu SEL -- CMD ARGS...".into(),
        ));
    };
    // Who, before anything is taken: a refusal costs nothing.
    let decision = who::decide(&caller, req.user.as_ref(), req.as_root)?;
    let through_sudo = caller.sudo.is_some_and(|(u, _)| u != 0);
    if through_sudo && req.cgroup_parent.is_some() {
        return Err(RunError::Usage(
            "--cgroup-parent is for root callers; through sudo jobs go under the default parent"
                .into(),
        ));
    }
    if through_sudo && let Some(r) = req.mem.iter().find(|r| r.knob != crate::dmem::Knob::Max) {
        return Err(RunError::Usage(format!(
            "{} is for root callers: protecting a job's GPU memory takes it from other jobs \
             (through sudo a job may limit itself with --mem-max)",
            r.knob.flag()
        )));
    }
    let user = match &decision {
        who::Decision::User(spec) => Some(who::resolve(spec)?),
        who::Decision::Root => None,
    };
    let keep = kept_fds(&req.keep_fds)?;
    let sharing = req.shared.map_or(Sharing::Exclusive, Sharing::Shared);
    if req.shared == Some(0) {
        return Err(RunError::Usage(
            "--shared needs a number of holders >= 1".into(),
        ));
    }
    let (all, leases) = match &req.pick {
        None => {
            let (all, idx) = resolve(&req.gpus)?;
            let l = lease_chosen(&all, &idx, sharing, req.wait)?;
            (all, l)
        }
        Some(p) => {
            let (all, cand) = candidates(&req.gpus)?;
            let l = pick_and_lease(&all, &cand, p)?;
            (all, l)
        }
    };
    times.mark(Mark::Leased);
    let idx: Vec<usize> = leases.iter().map(|l| l.index).collect();
    let chosen: Vec<&Gpu> = idx.iter().map(|&i| &all[i]).collect();
    let (mem, bind) = super::memlimit::limits_of(&req.mem, req.bind, &chosen)?;
    let vendor = vendor_of(&chosen, warn)?;
    let allowed: Vec<(u32, u32)> = chosen
        .iter()
        .flat_map(|g| g.nodes.iter().map(|n| n.dev))
        .chain(vendor.nodes.iter().map(|n| n.dev))
        .collect();
    check_inherited(&keep, &allowed, &vendor.majors)?;

    let env = job_env(&chosen, user.as_ref(), &leases);
    let program = find_program(
        argv0,
        env.get(std::ffi::OsStr::new("PATH")).map(|p| p.as_os_str()),
    )
    .ok_or_else(|| RunError::Usage(format!("{}: command not found", Path::new(argv0).display())))?;
    let env_list: Vec<OsString> = env
        .iter()
        .map(|(k, v)| {
            let mut e = k.clone();
            e.push("=");
            e.push(v);
            e
        })
        .collect();
    let exec = crate::sys_call::ExecImage::new(program.as_os_str(), &req.argv, &env_list)
        .map_err(|_| RunError::Usage("an argument or variable holds a NUL byte".into()))?;

    let (held, mut steps) = job_mounts(&chosen, &all, &idx, req.renumber, user.as_ref());
    steps.extend(vendor_access::dev_steps(
        &vendor.nodes,
        user.as_ref().map(|u| u.uid),
    ));
    let identity = match &user {
        Some(u) => Identity::User {
            uid: u.uid,
            gid: u.gid,
            groups: u
                .groups
                .iter()
                .map(|&g| rustix::process::Gid::from_raw(g))
                .collect(),
        },
        None => Identity::Root,
    };
    let plan = JobPlan {
        held,
        steps,
        identity,
        keep_fds: keep,
        exec,
        timed: times.is_on(),
    };

    let limits = JobLimits {
        allowed: &allowed,
        majors: &vendor.majors,
        mem: &mem,
        bind: bind.as_ref(),
    };
    times.mark(Mark::Planned);
    launch(req, &plan, &limits, user.as_ref(), leases, times)
}

/// What the job's cgroup is given before the job starts.
struct JobLimits<'a> {
    /// The device numbers the job may open.
    allowed: &'a [(u32, u32)],
    /// The GPU majors it is limited on.
    majors: &'a [u32],
    /// Its GPU memory limits ([`crate::dmem`]).
    mem: &'a [crate::dmem::Setting],
    /// Its CPUs and memory nodes (`--bind`).
    bind: Option<&'a super::bind::Binding>,
}

/// The vendor nodes of the chosen GPUs and the shared ones they need (NVIDIA, KFD,
/// accel), and every GPU major the job is limited on; for a job on an NVIDIA GPU,
/// `nvidia-uvm` loaded first where it is not ([`super::uvm`]; `warn` hears when it could
/// not be).
fn vendor_of(
    chosen: &[&Gpu],
    warn: &mut dyn FnMut(&RunWarning),
) -> Result<vendor_access::VendorAccess, RunError> {
    use crate::vendor::{VendorNodeKind, VendorRoots, discover, parse_proc_devices};
    let roots = VendorRoots::default();
    let mut loaded = false;
    loop {
        let report = discover(&roots);
        if let Some((g, u)) = vendor_access::unidentified_of(chosen, &report) {
            return Err(RunError::Unidentified {
                gpu: g.bus_id.clone().unwrap_or_else(|| g.name.clone()),
                kind: u.kind,
                node: Box::new(u.clone()),
            });
        }
        let devices = vendor_access::read_proc_devices_in(&roots.proc_root);
        let access = vendor_access::vendor_access(chosen, &report, &devices);
        let nvidia = access
            .nodes
            .iter()
            .any(|n| n.kind == VendorNodeKind::NvidiaGpu);
        let driver = roots.proc_root.join("driver/nvidia").is_dir();
        let need = super::uvm::need(nvidia, driver, &parse_proc_devices(&devices));
        if loaded || need != super::uvm::UvmNeed::Load {
            return Ok(access);
        }
        // Once: then the nodes and majors again, with nvidia-uvm's where it loaded.
        loaded = true;
        if let Err(e) = super::uvm::load(&super::uvm::modprobe_command(), &roots.proc_root) {
            warn(&RunWarning::UvmNotLoaded(e));
            return Ok(access);
        }
    }
}

/// Makes the job's cgroup under the parent (checked), attaches its device program, records
/// the job beside its leases, supervises it, and removes the cgroup; `leases` are held
/// until then.
fn launch(
    req: &RunRequest,
    plan: &JobPlan,
    limits: &JobLimits<'_>,
    user: Option<&who::JobUser>,
    leases: Vec<Lease>,
    times: &mut StartTimes,
) -> Result<u8, RunError> {
    // The cgroup, its program, the check that every ancestor's program still applies.
    super::cgroup::check_v2().map_err(|e| RunError::Setup(e.to_string()))?;
    let rel = req
        .cgroup_parent
        .clone()
        .unwrap_or_else(|| PathBuf::from(anchor::DEFAULT_PARENT));
    let parent = anchor::open_parent(&rel)?;
    if !limits.mem.is_empty() {
        super::memlimit::enable_along(&rel, limits.mem)?;
    }
    if limits.bind.is_some() {
        super::bind::enable_along(&rel)?;
    }
    anchor::sweep(&parent);
    let me = std::process::id();
    let start = anchor::start_ticks(me).unwrap_or(0);
    let n = JOB_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let cg = JobCgroup::create(&parent, &anchor::job_name(me, start, n))?;
    times.mark(Mark::CgroupMade);
    let policy = Policy::only_nodes(limits.allowed, limits.majors);
    attach_checked(&parent, &cg, &policy, times)?;
    times.mark(Mark::Attached);
    // Set and read back before the job exists: a limit that did not take runs nothing.
    crate::dmem::apply(cg.fd.as_fd(), &cg.path, limits.mem)?;
    let record = lease::JobRecord {
        pid: me,
        start_ticks: start,
        uid: user.map_or(0, |u| u.uid),
        user: user.map_or_else(|| "root".into(), |u| u.name.to_string_lossy().into_owned()),
        cgroup: cg.path.display().to_string(),
        command: req
            .argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        started: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    };
    let _record = lease::write_job_record(&lease::dir(), &record);
    times.mark(Mark::Limited);
    let status = supervise::supervise(plan, &cg, limits.bind, times);
    // The job's processes are gone once its init has been reaped (the kernel kills the
    // namespace with it); the cgroup may take a moment to say so.
    if let Err(e) = cg.remove(std::time::Duration::from_secs(5)) {
        // Its leases stay held (by this process) until here: nothing of the job can run
        // on a GPU someone else was given.
        drop(leases);
        return Err(RunError::Setup(format!(
            "the job's cgroup was not removed: {e}"
        )));
    }
    times.mark(Mark::CgroupRemoved);
    drop(leases);
    times.mark(Mark::Released);
    status
}

/// `run --env-only`: the vendor variables of the chosen GPUs as `KEY=VALUE` lines.
fn env_only(req: &RunRequest, out: &mut dyn std::io::Write) -> Result<u8, RunError> {
    let (all, idx) = resolve(&req.gpus)?;
    if !req.argv.is_empty() || req.pick.is_some() {
        return Err(RunError::Usage(
            "--env-only prints the variables; it takes no command and no --pick (hint: \
             drmtool pick --format env)"
                .into(),
        ));
    }
    let chosen: Vec<&Gpu> = idx.iter().map(|&i| &all[i]).collect();
    let mut text = String::new();
    for (k, v) in vendor_env(&chosen, &all) {
        text.push_str(&format!("{k}={v}\n"));
    }
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| RunError::Setup(format!("cannot write the output: {e}")))?;
    Ok(0)
}

/// The fds the command keeps: 0-2 and each `--keep-fd` (3..=65535), sorted, at most 64.
fn kept_fds(asked: &[i32]) -> Result<Vec<i32>, RunError> {
    let mut keep: Vec<i32> = vec![0, 1, 2];
    for &k in asked {
        if !(3..=65535).contains(&k) {
            return Err(RunError::Usage(format!(
                "--keep-fd {k}: give an fd of 3 or more"
            )));
        }
        keep.push(k);
    }
    keep.sort_unstable();
    keep.dedup();
    if keep.len() > 64 {
        return Err(RunError::Usage("at most 61 --keep-fd".into()));
    }
    Ok(keep)
}

/// The job's environment: this process's, the vendor variables, runuser's four for a
/// user's job, and [`LEASES_ENV`].
fn job_env(
    chosen: &[&Gpu],
    user: Option<&who::JobUser>,
    leases: &[Lease],
) -> BTreeMap<OsString, OsString> {
    let mut env: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
    for (k, v) in vendor_env_in_job(chosen) {
        env.insert(k.into(), v.into());
    }
    if let Some(u) = user {
        env.insert("HOME".into(), u.home.clone());
        env.insert("USER".into(), u.name.clone());
        env.insert("LOGNAME".into(), u.name.clone());
        env.insert("SHELL".into(), u.shell.clone());
    }
    let names: Vec<String> = leases
        .iter()
        .map(|l| match l.slot {
            Some(s) => format!("{}/{s}", l.key),
            None => l.key.clone(),
        })
        .collect();
    env.insert(LEASES_ENV.into(), names.join(",").into());
    env
}

/// The job's mount namespace: the host directories it keeps open for binding and the
/// steps its init takes (a private /dev with the chosen nodes, owned by the job's user so
/// that the job opens them whatever the host's node permissions; other GPUs' sysfs
/// resource files hidden; the lease directory out of sight).
fn job_mounts(
    chosen: &[&Gpu],
    all: &[Gpu],
    idx: &[usize],
    renumber: bool,
    user: Option<&who::JobUser>,
) -> (Vec<std::ffi::CString>, Vec<job::Step>) {
    let mut placed = placement(chosen, renumber, stat_node);
    if let Some(u) = user {
        for n in &mut placed {
            n.owner = (u.uid, n.owner.1);
            n.mode |= 0o600;
        }
    }
    let hide = hidden_sysfs_files(all, idx);
    // The host's hugepages and infiniband directories, bound into the private /dev where
    // present (MPI and NCCL use them).
    let mut held = Vec::new();
    let mut held_dirs = Vec::new();
    for d in ["/dev/hugepages", "/dev/infiniband"] {
        if Path::new(d).is_dir()
            && let Some(c) = job::cpath(d)
        {
            held_dirs.push((held.len(), d));
            held.push(c);
        }
    }
    let mut steps = job::mount_steps(&placed, &hide, &held_dirs);
    // The lease directory: out of the job's sight (a --as-root job keeps DAC_OVERRIDE and
    // could unlink a lock file, so that a second job takes the same GPU "exclusively").
    let lease_dir = lease::dir();
    if lease_dir.is_dir()
        && let Some(t) = job::cpath(&lease_dir)
    {
        steps.push(job::Step::Mount {
            src: c"drmtool-leases".into(),
            target: t,
            fstype: c"tmpfs".into(),
            flags: rustix::mount::MountFlags::RDONLY
                | rustix::mount::MountFlags::NOSUID
                | rustix::mount::MountFlags::NODEV
                | rustix::mount::MountFlags::NOEXEC,
            data: c"mode=755,size=4k".into(),
        });
    }
    (held, steps)
}

/// Loads `policy`, attaches it to the job cgroup, and checks that every program that
/// applied to the parent still applies to the job (an ancestor's `BPF_F_ALLOW_OVERRIDE`
/// program yields to a descendant's; a container's own allowlist must not stop applying
/// inside a nested run).
fn attach_checked(
    parent: &Parent,
    cg: &JobCgroup,
    policy: &Policy,
    times: &mut StartTimes,
) -> Result<(), RunError> {
    let before = crate::sys_call::bpf_query_cgroup_device(parent.fd.as_fd(), true)
        .map_err(|e| RunError::Setup(format!("BPF_PROG_QUERY of {}: {e}", parent.path.display())))?
        .1;
    let prog = load(policy, "drmtool_run")?;
    times.mark(Mark::ProgramLoaded);
    crate::sys_call::bpf_attach_cgroup_device(
        cg.fd.as_fd(),
        prog.as_fd(),
        ioctl_sys::bpf::BPF_F_ALLOW_MULTI,
    )
    .map_err(|e| RunError::Setup(format!("BPF_PROG_ATTACH to {}: {e}", cg.path.display())))?;
    let ours = crate::sys_call::bpf_prog_id(prog.as_fd())
        .map_err(|e| RunError::Setup(format!("BPF_OBJ_GET_INFO_BY_FD: {e}")))?;
    let after = crate::sys_call::bpf_query_cgroup_device(cg.fd.as_fd(), true)
        .map_err(|e| RunError::Setup(format!("BPF_PROG_QUERY of {}: {e}", cg.path.display())))?
        .1;
    effective_ok(&before, &after, ours).map_err(|e| RunError::Setup(e.to_string()))
}

/// The check `run` makes after attaching, on the program ids: `ours` and every id of `before`
/// (the parent's effective programs) must be in `after` (the job's).
pub fn effective_ok(before: &[u32], after: &[u32], ours: u32) -> Result<(), EffectiveError> {
    if !after.contains(&ours) {
        return Err(EffectiveError::OursMissing(ours));
    }
    let lost: Vec<u32> = before
        .iter()
        .copied()
        .filter(|id| !after.contains(id))
        .collect();
    if !lost.is_empty() {
        return Err(EffectiveError::AncestorLost(lost));
    }
    Ok(())
}

/// Why the effective program list after attaching is refused ([`effective_ok`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EffectiveError {
    /// The job's own program does not run for its cgroup.
    #[error("our device program (id {0}) is not effective on the job's cgroup")]
    OursMissing(u32),
    /// Programs that ran for the parent no longer run for the job.
    #[error(
        "an ancestor's device program (id {}) stops applying under the job's (attached with \
         BPF_F_ALLOW_OVERRIDE, it yields to a descendant's): the job would escape a rule of \
         its container or host, so it does not run",
        .0.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
    )]
    AncestorLost(Vec<u32>),
}

/// Loads the device program of `policy` and attaches it to the cgroup at `dir`
/// (`BPF_F_ALLOW_MULTI`: with the cgroup's other programs and its ancestors', all must
/// allow). `drmtool run` itself attaches by fd ([`run`]); this is for a cgroup by path.
pub fn attach(dir: &Path, policy: &Policy) -> Result<(), RunError> {
    attach_with(dir, policy, ioctl_sys::bpf::BPF_F_ALLOW_MULTI)
}

/// [`attach`] with other attach flags (`BPF_F_ALLOW_OVERRIDE`, as older container tools
/// attach; 0, the exclusive kind).
pub fn attach_with(dir: &Path, policy: &Policy, flags: u32) -> Result<(), RunError> {
    let prog = load(policy, "drmtool_run")?;
    let dirfd = rustix::fs::open(
        dir,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| RunError::Setup(format!("open {}: {e}", dir.display())))?;
    crate::sys_call::bpf_attach_cgroup_device(dirfd.as_fd(), prog.as_fd(), flags)
        .map_err(|e| RunError::Setup(format!("BPF_PROG_ATTACH to {}: {e}", dir.display())))
}

/// Loads the device program of `policy` (one line on failure, with the hint).
pub fn load(policy: &Policy, name: &str) -> Result<OwnedFd, RunError> {
    let prog = super::bpf::to_bytes(&devprog::build(policy));
    crate::sys_call::bpf_load_cgroup_device(&prog, name, 64 * 1024).map_err(|(e, log)| {
        let hint = match e {
            rustix::io::Errno::PERM => " (needs CAP_BPF/CAP_SYS_ADMIN: run as root)",
            rustix::io::Errno::INVAL => {
                " (a kernel without BPF_PROG_TYPE_CGROUP_DEVICE: CONFIG_CGROUP_BPF)"
            }
            rustix::io::Errno::NOSYS => " (a kernel without bpf(2): CONFIG_BPF_SYSCALL)",
            _ => "",
        };
        let log = log
            .lines()
            .last()
            .map(|l| format!("; verifier: {l}"))
            .unwrap_or_default();
        RunError::Setup(format!(
            "BPF_PROG_LOAD (cgroup device program): {e}{hint}{log}"
        ))
    })
}

/// The PCI `resource*` and `rom` files of every GPU not chosen (a root job could map
/// another GPU's BARs through them; the job sees /dev/null there).
fn hidden_sysfs_files(all: &[Gpu], chosen: &[usize]) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for (i, g) in all.iter().enumerate() {
        if chosen.contains(&i) {
            continue;
        }
        let Some(bus) = &g.bus_id else { continue };
        let dir = Path::new("/sys/bus/pci/devices").join(bus);
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = rd
            .flatten()
            .filter(|e| {
                let n = e.file_name();
                let n = n.to_string_lossy();
                n.starts_with("resource") || n == "rom"
            })
            .map(|e| e.path())
            .collect();
        files.sort();
        v.extend(files);
    }
    v
}

#[cfg(test)]
mod tests;
