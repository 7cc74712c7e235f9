//! `drmtool run --gpu SEL[,SEL...] [--renumber] [--env-only] -- CMD ARGS...`: runs a
//! command that can open only its GPUs, enforced by the kernel.
//!
//! The parent resolves the selectors in the ordering ([`super::ordering`]), makes a cgroup v2
//! under its own (`drmtool-run-<pid>`) and attaches a device program to it
//! ([`Policy::only_drm_minors`]: the chosen nodes' 226:minor allowed, every other 226:*
//! denied, everything else left to the cgroup's ancestors), then starts itself again
//! with the job in [`CHILD_ENV`] (the child half, [`child_main`]), which joins that cgroup, makes a private mount
//! namespace whose `/dev/dri` is a tmpfs holding only the chosen nodes (renumbered from
//! card0/renderD128 in selector order with `--renumber`) and their `by-path` links, sets
//! the vendor variables and execs the command. The parent waits, removes the cgroup and
//! exits with the command's status (128 + the signal when it was killed).
//!
//! Exit codes of its own: 2 for bad usage or selectors (naming the GPUs there are), 4 when
//! the machine has no DRM devices, 125 when the isolation could not be set up (one line
//! saying what is missing: cgroup v2, root or delegation, the BPF device hook).

use super::cgroup::{self, Cgroup, CgroupError};
use super::devprog::{self, Policy};
use super::env::vendor_env;
use super::lease::{self, Lease, LeaseError, Sharing};
use super::ordering::{self, Gpu, Selector};
use super::pick::{self, Want};
use drm_gem::NodeKind;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Exit status when the isolation could not be set up (as `env`/`chroot` use 125).
pub const EXIT_SETUP: u8 = 125;

/// What `drmtool run` was asked.
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// The selectors, in order.
    pub gpus: Vec<Selector>,
    /// Present the chosen nodes as card0.., renderD128.. in selector order.
    pub renumber: bool,
    /// Print the variables only.
    pub env_only: bool,
    /// The command and its arguments.
    pub argv: Vec<OsString>,
    /// The program (and arguments) that runs the child half: empty for drmtool's own
    /// executable; a test binary names itself and the test that calls [`child_main`].
    pub helper: Vec<OsString>,
    /// `--pick N`: choose N GPUs among the selectors' (all when none) and lease them.
    pub pick: Option<PickRequest>,
}

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

/// The variable that tells the command which leases it holds: `KEY` (exclusive) or
/// `KEY/SLOT` (shared) per GPU, comma-separated; the lock fds are inherited with it, so
/// the leases last as long as the command (or anything it leaves running with them).
pub const LEASES_ENV: &str = "DRMTOOL_LEASES";

/// The variable that carries the job to the child half (hex-encoded cgroup path, nodes
/// and arguments); removed before the command runs.
pub const CHILD_ENV: &str = "DRMTOOL_RUN_CHILD";

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The job as the child half reads it: `v1;<cgroup>;<node>,<node>;<arg>,<arg>`, every
/// part hex so any byte of a path or argument survives.
pub fn encode_job(cgroup: &Path, nodes: &[PlacedNode], argv: &[OsString]) -> String {
    use std::os::unix::ffi::OsStrExt;
    let list = |v: Vec<String>| v.join(",");
    format!(
        "v1;{};{};{}",
        hex(cgroup.as_os_str().as_bytes()),
        list(nodes.iter().map(|n| hex(n.encode().as_bytes())).collect()),
        list(argv.iter().map(|a| hex(a.as_bytes())).collect()),
    )
}

/// Reads [`encode_job`]'s text back.
pub fn decode_job(s: &str) -> Option<(PathBuf, Vec<PlacedNode>, Vec<OsString>)> {
    use std::os::unix::ffi::OsStringExt;
    let mut it = s.split(';');
    if it.next()? != "v1" {
        return None;
    }
    let cgroup = PathBuf::from(OsString::from_vec(unhex(it.next()?)?));
    let parts = |p: &str| -> Option<Vec<Vec<u8>>> {
        if p.is_empty() {
            return Some(Vec::new());
        }
        p.split(',').map(unhex).collect()
    };
    let nodes = parts(it.next()?)?
        .into_iter()
        .map(|b| PlacedNode::decode(std::str::from_utf8(&b).ok()?))
        .collect::<Option<Vec<_>>>()?;
    let argv: Vec<OsString> = parts(it.next()?)?
        .into_iter()
        .map(OsString::from_vec)
        .collect();
    if it.next().is_some() || argv.is_empty() {
        return None;
    }
    Some((cgroup, nodes, argv))
}

/// The child half, when this process is one ([`CHILD_ENV`] set): joins the cgroup, builds
/// the private `/dev/dri`, execs the command. `None` when this is not a child half;
/// otherwise returns only on failure (exit [`EXIT_SETUP`], the reason on stderr).
pub fn child_main() -> Option<std::process::ExitCode> {
    let job = std::env::var(CHILD_ENV).ok()?;
    let why = match decode_job(&job) {
        Some((cgroup, nodes, argv)) => child(&cgroup, &nodes, &argv),
        None => format!("run: {CHILD_ENV} is not a job drmtool wrote"),
    };
    eprintln!("drmtool: {why}");
    Some(std::process::ExitCode::from(EXIT_SETUP))
}

/// Why `run` did not run the command.
#[derive(Debug)]
pub enum RunError {
    /// Bad selectors or arguments (exit 2).
    Usage(String),
    /// No DRM devices here (exit 4).
    NoDevices(String),
    /// The isolation could not be set up (exit 125).
    Setup(String),
    /// `--pick`: not enough eligible GPUs, or all of them leased by others until the
    /// deadline (exit 5).
    NoGpu(String),
}

impl RunError {
    /// The exit status it maps to.
    pub fn code(&self) -> u8 {
        match self {
            RunError::Usage(_) => 2,
            RunError::NoDevices(_) => crate::cli::EXIT_NO_DEVICES,
            RunError::Setup(_) => EXIT_SETUP,
            RunError::NoGpu(_) => crate::cli::EXIT_NO_GPU,
        }
    }
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Usage(s)
            | RunError::NoDevices(s)
            | RunError::Setup(s)
            | RunError::NoGpu(s) => f.write_str(s),
        }
    }
}

impl From<CgroupError> for RunError {
    fn from(e: CgroupError) -> Self {
        RunError::Setup(e.to_string())
    }
}

/// One node the child puts into its `/dev/dri`: the name there, the device number and the
/// original's mode and owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacedNode {
    /// File name in the new `/dev/dri` (`card0`).
    pub name: String,
    /// Char-device major:minor.
    pub dev: (u32, u32),
    /// Permission bits of the original node.
    pub mode: u32,
    /// Owner and group of the original node.
    pub owner: (u32, u32),
    /// `by-path` link name to make for it, if the original had one.
    pub by_path: Option<String>,
}

impl PlacedNode {
    /// `name:major:minor:mode:uid:gid[:by-path]`, how the child gets it on its command line.
    pub fn encode(&self) -> String {
        let mut s = format!(
            "{}:{}:{}:{:o}:{}:{}",
            self.name, self.dev.0, self.dev.1, self.mode, self.owner.0, self.owner.1
        );
        if let Some(b) = &self.by_path {
            s.push(':');
            s.push_str(b);
        }
        s
    }

    /// Reads [`encode`](Self::encode)'s text back.
    pub fn decode(s: &str) -> Option<PlacedNode> {
        let mut it = s.splitn(7, ':');
        let name = it.next()?.to_string();
        let major = it.next()?.parse().ok()?;
        let minor = it.next()?.parse().ok()?;
        let mode = u32::from_str_radix(it.next()?, 8).ok()?;
        let uid = it.next()?.parse().ok()?;
        let gid = it.next()?.parse().ok()?;
        let by_path = it.next().map(str::to_string);
        let plain = |n: &str| !n.is_empty() && !n.contains('/') && n != "." && n != "..";
        if !plain(&name) || by_path.as_deref().is_some_and(|b| !plain(b)) {
            return None;
        }
        Some(PlacedNode {
            name,
            dev: (major, minor),
            mode: mode & 0o7777,
            owner: (uid, gid),
            by_path,
        })
    }
}

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

/// The machine's GPUs in the ordering and the indices the selectors chose, in selector
/// order (each GPU once).
pub fn resolve(gpus: &[Selector]) -> Result<(Vec<Gpu>, Vec<usize>), RunError> {
    if gpus.is_empty() {
        return Err(RunError::Usage("--gpu needs at least one selector".into()));
    }
    let all = all_gpus()?;
    let chosen = ordering::select(gpus, &all).map_err(RunError::Usage)?;
    let idx = chosen.iter().map(|g| g.index).collect();
    Ok((all, idx))
}

/// The machine's GPUs in the ordering, or why there are none.
pub fn all_gpus() -> Result<Vec<Gpu>, RunError> {
    ordering::gpus().map_err(|e| {
        RunError::NoDevices(match e {
            drm_gem::NoNodes::NoDevDri => "no DRM devices: this machine has no /dev/dri".into(),
            drm_gem::NoNodes::Empty => {
                "no DRM devices: /dev/dri holds no card or render nodes".into()
            }
        })
    })
}

/// The GPUs `pick` and `run --pick` choose among: the selectors' (as [`resolve`]), or every
/// GPU when there are none.
pub fn candidates(gpus: &[Selector]) -> Result<(Vec<Gpu>, Vec<usize>), RunError> {
    if gpus.is_empty() {
        let all = all_gpus()?;
        let cand = (0..all.len()).collect();
        Ok((all, cand))
    } else {
        resolve(gpus)
    }
}

/// Holders per GPU index among `cand`, from the lease directory and `/proc/locks`.
pub fn held_by_index(all: &[Gpu], cand: &[usize], d: &Path) -> BTreeMap<usize, usize> {
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    let counts = lease::held_counts(&lease::holders(d, &locks));
    cand.iter()
        .map(|&i| (i, counts.get(&lease::key(&all[i])).copied().unwrap_or(0)))
        .collect()
}

/// Chooses `p.n` of the candidate GPUs (indices into `all`) in rank order and leases them,
/// retrying until `p.wait` has passed while others hold them.
pub fn pick_and_lease(
    all: &[Gpu],
    cand: &[usize],
    p: &PickRequest,
) -> Result<Vec<Lease>, RunError> {
    if p.n == 0 {
        return Err(RunError::Usage("--pick needs a number of GPUs >= 1".into()));
    }
    let d = lease::dir();
    lease::ensure_dir(&d).map_err(RunError::Setup)?;
    // One scan ranks the candidates; the leases are re-read on every try.
    let report = crate::scan::scan(&crate::scan::Options::default()).ok();
    let deadline = std::time::Instant::now() + p.wait;
    let gs: Vec<&Gpu> = cand.iter().map(|&i| &all[i]).collect();
    loop {
        let held = held_by_index(all, cand, &d);
        let ranked = pick::rank(&gs, report.as_ref(), &held, &pick::sysfs_free, &p.want);
        let eligible: Vec<&pick::Candidate> =
            ranked.iter().filter(|c| c.excluded.is_none()).collect();
        if eligible.len() < p.n {
            let why: Vec<String> = ranked
                .iter()
                .filter_map(|c| c.excluded.as_ref().map(|e| format!("{}: {e}", c.name)))
                .collect();
            return Err(RunError::NoGpu(format!(
                "--pick {}: only {} eligible GPU(s) ({})",
                p.n,
                eligible.len(),
                why.join("; ")
            )));
        }
        let mut got: Vec<Lease> = Vec::new();
        for c in &eligible {
            if got.len() == p.n {
                break;
            }
            match lease::try_lease(&d, &all[c.index], p.sharing) {
                Ok(l) => got.push(l),
                Err(LeaseError::Busy) => continue,
                Err(LeaseError::Io(e)) => return Err(RunError::Setup(e)),
            }
        }
        if got.len() == p.n {
            return Ok(got);
        }
        // Not enough: give back what was taken (so two jobs that want two each cannot
        // hold one apiece forever) and try again until the deadline.
        drop(got);
        let now = std::time::Instant::now();
        if now >= deadline {
            let busy: Vec<String> = eligible
                .iter()
                .map(|c| {
                    format!(
                        "{} ({} holder(s))",
                        c.name,
                        held.get(&c.index).unwrap_or(&0)
                    )
                })
                .collect();
            return Err(RunError::NoGpu(format!(
                "--pick {}: every eligible GPU is leased by others: {} (hint: --wait SECS, \
                 drmtool leases)",
                p.n,
                busy.join(", ")
            )));
        }
        // 50-150 ms, varied by pid so that waiters do not retry in lockstep.
        let pause = std::time::Duration::from_millis(50 + u64::from(std::process::id() % 100));
        std::thread::sleep(pause.min(deadline - now));
    }
}

/// Runs the request: returns the command's exit status (or prints the variables).
pub fn run(req: &RunRequest, out: &mut dyn std::io::Write) -> Result<u8, RunError> {
    let mut leases: Vec<Lease> = Vec::new();
    let (all, idx) = match &req.pick {
        None => resolve(&req.gpus)?,
        Some(p) => {
            if req.env_only {
                return Err(RunError::Usage(
                    "--pick leases GPUs for a command; for the variables alone use \
                     drmtool pick --format env"
                        .into(),
                ));
            }
            let (all, cand) = candidates(&req.gpus)?;
            leases = pick_and_lease(&all, &cand, p)?;
            (all, leases.iter().map(|l| l.index).collect())
        }
    };
    let chosen: Vec<&Gpu> = idx.iter().map(|&i| &all[i]).collect();
    let env = vendor_env(&chosen, &all);
    if req.env_only {
        if !req.argv.is_empty() {
            return Err(RunError::Usage(
                "--env-only prints the variables; it takes no command".into(),
            ));
        }
        let mut text = String::new();
        for (k, v) in &env {
            text.push_str(&format!("{k}={v}\n"));
        }
        out.write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .map_err(|e| RunError::Setup(format!("cannot write the output: {e}")))?;
        return Ok(0);
    }
    let Some(_program) = req.argv.first() else {
        return Err(RunError::Usage(
            "no command: drmtool run --gpu SEL -- CMD ARGS...".into(),
        ));
    };
    let placed = placement(&chosen, req.renumber, stat_node);
    let minors: Vec<u32> = chosen
        .iter()
        .flat_map(|g| g.nodes.iter().map(|n| n.dev.1))
        .collect();
    let parent = cgroup::own()?;
    sweep_dead(&parent);
    let cg = Cgroup::create(&parent, &format!("drmtool-run-{}", std::process::id()))?;
    attach(cg.path(), &Policy::only_drm_minors(&minors))?;
    let mut helper = req.helper.clone();
    if helper.is_empty() {
        let me = std::env::current_exe()
            .map_err(|e| RunError::Setup(format!("cannot find drmtool's own executable: {e}")))?;
        helper.push(me.into_os_string());
    }
    let mut child = std::process::Command::new(&helper[0]);
    child.args(&helper[1..]);
    if !leases.is_empty() {
        // The lock fds go to the command (no close-on-exec), so the leases last as long
        // as it does even if this process is killed.
        for l in &leases {
            for fd in &l.fds {
                rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty()).map_err(|e| {
                    RunError::Setup(format!("keeping the lease of {} open: {e}", l.key))
                })?;
            }
        }
        let names: Vec<String> = leases
            .iter()
            .map(|l| match l.slot {
                Some(s) => format!("{}/{s}", l.key),
                None => l.key.clone(),
            })
            .collect();
        child.env(LEASES_ENV, names.join(","));
    }
    child.env(CHILD_ENV, encode_job(cg.path(), &placed, &req.argv));
    child.envs(env.iter().map(|(k, v)| (k, v)));
    let mut job = child
        .spawn()
        .map_err(|e| RunError::Setup(format!("cannot start the command: {e}")))?;
    // Ctrl-C and friends go to the whole foreground group: the command decides what they
    // mean, and this process stays to remove the cgroup (set after the spawn, since an
    // ignored disposition would be inherited through exec).
    let restore = crate::sys_call::ignore_job_signals();
    let status = job.wait();
    crate::sys_call::restore_job_signals(restore);
    let status = status.map_err(|e| RunError::Setup(format!("waiting for the command: {e}")))?;
    // The cgroup is empty once the child has been reaped: remove it now, loudly.
    if let Err(e) = cg.remove() {
        eprintln!("drmtool: run: the job's cgroup was not removed: {e}");
    }
    use std::os::unix::process::ExitStatusExt;
    Ok(match (status.code(), status.signal()) {
        (Some(c), _) => u8::try_from(c).unwrap_or(1),
        (None, Some(s)) => u8::try_from(128 + s).unwrap_or(255),
        _ => 1,
    })
}

/// Removes the `drmtool-run-<pid>` cgroups under `parent` that a `run` killed before it
/// could remove its own left behind: only where process `<pid>` is gone, and only empty
/// ones (the kernel refuses to remove a cgroup that still has processes, such as a command
/// that outlived its killed `run`).
fn sweep_dead(parent: &Path) {
    let Ok(rd) = std::fs::read_dir(parent) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("drmtool-run-"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let _ = std::fs::remove_dir(e.path());
    }
}

/// Loads the device program of `policy` and attaches it to the cgroup at `dir`
/// (`BPF_F_ALLOW_MULTI`: with the cgroup's other programs and its ancestors', all must
/// allow).
pub fn attach(dir: &Path, policy: &Policy) -> Result<(), RunError> {
    let prog = super::bpf::to_bytes(&devprog::build(policy));
    let fd = crate::sys_call::bpf_load_cgroup_device(&prog, "drmtool_run", 64 * 1024).map_err(
        |(e, log)| {
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
        },
    )?;
    let dirfd = rustix::fs::open(
        dir,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| RunError::Setup(format!("open {}: {e}", dir.display())))?;
    use rustix::fd::AsFd;
    crate::sys_call::bpf_attach_cgroup_device(
        dirfd.as_fd(),
        fd.as_fd(),
        ioctl_sys::bpf::BPF_F_ALLOW_MULTI,
    )
    .map_err(|e| RunError::Setup(format!("BPF_PROG_ATTACH to {}: {e}", dir.display())))
    // The attachment holds the program; the fds go here.
}

/// The child half: joins the cgroup, builds the private `/dev/dri`, execs the command
/// (without [`CHILD_ENV`]). Returns only on failure, with the message.
pub fn child(cgroup_dir: &Path, nodes: &[PlacedNode], argv: &[OsString]) -> String {
    if let Err(e) = cgroup::join(cgroup_dir) {
        return format!("run: {e}");
    }
    if let Err(e) = private_dev_dri(Path::new("/dev/dri"), nodes) {
        return format!("run: {e}");
    }
    let Some((prog, args)) = argv.split_first() else {
        return "run: no command".into();
    };
    use std::os::unix::process::CommandExt;
    let e = std::process::Command::new(prog)
        .args(args)
        .env_remove(CHILD_ENV)
        .exec();
    format!("run: cannot run {}: {e}", PathBuf::from(prog).display())
}

/// A private mount namespace whose `dir` is a tmpfs with exactly `nodes` (and a `by-path`
/// directory of links to them).
fn private_dev_dri(dir: &Path, nodes: &[PlacedNode]) -> Result<(), String> {
    use rustix::mount::{MountFlags, MountPropagationFlags};
    crate::sys_call::unshare_mount_namespace()
        .map_err(|e| format!("unshare(CLONE_NEWNS): {e} (needs CAP_SYS_ADMIN: run as root)"))?;
    rustix::mount::mount_change(
        "/",
        MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
    )
    .map_err(|e| format!("making / private: {e}"))?;
    rustix::mount::mount(
        "drmtool-run",
        dir,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NOEXEC,
        c"mode=755",
    )
    .map_err(|e| format!("tmpfs on {}: {e}", dir.display()))?;
    let mut by_path = Vec::new();
    for n in nodes {
        let p = dir.join(&n.name);
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &p,
            rustix::fs::FileType::CharacterDevice,
            rustix::fs::Mode::from_raw_mode(n.mode),
            rustix::fs::makedev(n.dev.0, n.dev.1),
        )
        .map_err(|e| format!("mknod {}: {e}", p.display()))?;
        rustix::fs::chmod(&p, rustix::fs::Mode::from_raw_mode(n.mode))
            .map_err(|e| format!("chmod {}: {e}", p.display()))?;
        rustix::fs::chown(
            &p,
            Some(rustix::process::Uid::from_raw(n.owner.0)),
            Some(rustix::process::Gid::from_raw(n.owner.1)),
        )
        .map_err(|e| format!("chown {}: {e}", p.display()))?;
        if let Some(b) = &n.by_path {
            by_path.push((b.clone(), n.name.clone()));
        }
    }
    if !by_path.is_empty() {
        let bp = dir.join("by-path");
        std::fs::create_dir(&bp).map_err(|e| format!("mkdir {}: {e}", bp.display()))?;
        for (link, name) in by_path {
            std::os::unix::fs::symlink(format!("../{name}"), bp.join(&link))
                .map_err(|e| format!("symlink {link}: {e}"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isolate::ordering::{Node, order};

    fn gpu(name: &str, card: u32) -> Gpu {
        Gpu {
            index: 0,
            bus_id: None,
            name: name.into(),
            driver: Some(name.into()),
            pci_id: None,
            nodes: vec![
                Node {
                    path: format!("/dev/dri/card{card}").into(),
                    kind: NodeKind::Primary,
                    dev: (226, card),
                    by_path: Some(format!("platform-{name}-card")),
                },
                Node {
                    path: format!("/dev/dri/renderD{}", 128 + card).into(),
                    kind: NodeKind::Render,
                    dev: (226, 128 + card),
                    by_path: None,
                },
            ],
            numa_node: None,
            local_cpulist: None,
        }
    }

    #[test]
    fn renumbering_follows_selector_order() {
        let all = order(vec![gpu("a", 0), gpu("b", 3)]);
        let chosen = [&all[1], &all[0]];
        let stat = |_: &Path| (0o660, (0, 44));
        let p = placement(&chosen, true, stat);
        let names: Vec<(&str, (u32, u32))> = p.iter().map(|n| (n.name.as_str(), n.dev)).collect();
        assert_eq!(
            names,
            [
                ("card0", (226, 3)),
                ("renderD128", (226, 131)),
                ("card1", (226, 0)),
                ("renderD129", (226, 128))
            ]
        );
        let kept = placement(&chosen, false, stat);
        assert_eq!(kept[0].name, "card3");
        for n in p.iter().chain(&kept) {
            assert_eq!(PlacedNode::decode(&n.encode()).as_ref(), Some(n));
        }
        assert_eq!(
            PlacedNode::decode("../x:226:0:660:0:0"),
            None,
            "no path in a name"
        );
        assert_eq!(PlacedNode::decode("card0:226:0:660:0:0:a/b"), None);
        assert_eq!(PlacedNode::decode("card0:226:x:660:0:0"), None);
        let argv: Vec<OsString> = ["sh", "-c", "echo ;,\x1f"].map(OsString::from).into();
        let job = encode_job(Path::new("/sys/fs/cgroup/a;b"), &p, &argv);
        assert_eq!(
            decode_job(&job),
            Some((PathBuf::from("/sys/fs/cgroup/a;b"), p, argv))
        );
        assert_eq!(decode_job("v1;00;;"), None, "no command");
        assert_eq!(decode_job("v2;00;;6161"), None);
    }
}
