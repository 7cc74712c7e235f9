//! What Slurm's daemons need of a guest (`mod slurm_common;`), and a single-node cluster
//! of Debian's real daemons: munged, slurmctld and slurmd (Slurm 22.05), cgroup/v2 with
//! `IgnoreSystemd=yes` and `ConstrainDevices=yes`. The daemons' state, sockets and logs
//! live under a fresh directory in the guest's tmpfs (the host root they run from is
//! read-only); `SLURM_CONF` points every Slurm program at the configuration written there.
// Each test target that includes this module uses part of it.
#![allow(dead_code)]

use drmtool::gpu;
use kernel_tests::which;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// In a guest with Slurm's daemons (else a loud skip): the guest's GPUs.
#[allow(unused_macros)]
macro_rules! slurm_guest {
    () => {{
        if !kernel_tests::in_guest() {
            kernel_tests::skip!("not in a vm guest: no DRM devices or cgroup v2 here");
        }
        for p in ["munged", "slurmctld", "slurmd", "srun", "sinfo"] {
            if kernel_tests::which(p).is_none() {
                kernel_tests::skip!("{p} is not installed (scripts/setup installs slurmctld, slurmd, slurm-client and munge)");
            }
        }
        drmtool::gpu::gpus().expect("the guest has DRM devices")
    }};
}

/// Configuration beyond the GPUs: more GRES types, the node's other GRES, more
/// slurm.conf lines.
#[derive(Debug, Default)]
pub struct Extra<'a> {
    /// Appended to `GresTypes=gpu` (`",gpumem"`).
    pub gres_types: &'a str,
    /// Appended to the node's `Gres=` (`",gpumem:67108864"`).
    pub node_gres: &'a str,
    /// Lines appended to slurm.conf, each ending in a newline.
    pub conf: &'a str,
}

/// Where a cluster's nodes are and which one this is.
#[derive(Debug, Clone)]
pub struct Layout<'a> {
    /// Each node's Slurm name and address, the controller's first.
    pub nodes: &'a [(&'a str, &'a str)],
    /// This machine's place in `nodes`.
    pub me: usize,
    /// The cluster's directory (the same path on every node, so that every node's
    /// slurm.conf is the same text).
    pub dir: PathBuf,
    /// The munge key's seed (the same on every node: one key for the cluster).
    pub key_seed: u32,
}

impl Layout<'static> {
    /// One node: `localhost` (the guest's hostname is "(none)", which no resolver knows
    /// and Slurm cannot parse; `slurmd -N localhost`, which every /etc/hosts has).
    pub fn single() -> Self {
        Layout {
            nodes: &[("localhost", "127.0.0.1")],
            me: 0,
            dir: Cluster::dir(),
            key_seed: std::process::id(),
        }
    }
}

/// A documentation address (TEST-NET-1) put on `lo`.
pub const ADDRCONFIG_ADDR: &str = "192.0.2.1";

/// Slurm resolves even "127.0.0.1" with AI_ADDRCONFIG, which answers nothing while the
/// machine's only IPv4 address is 127.0.0.1 (the guest has no network): a documentation
/// address on `lo` makes IPv4 configured. Idempotent.
pub fn ipv4_configured() {
    let shown = Command::new("ip")
        .args(["-4", "addr", "show", "dev", "lo"])
        .output()
        .expect("ip");
    if String::from_utf8_lossy(&shown.stdout).contains(ADDRCONFIG_ADDR) {
        return;
    }
    let o = Command::new("ip")
        .args(["addr", "add", &format!("{ADDRCONFIG_ADDR}/32"), "dev", "lo"])
        .output()
        .expect("ip addr add");
    assert!(
        o.status.success(),
        "ip addr add: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A single-node cluster: munged, slurmctld and slurmd, stopped on drop.
pub struct Cluster {
    /// Its directory (state, sockets, logs, configuration).
    pub dir: PathBuf,
    /// Its slurm.conf.
    pub conf: PathBuf,
    /// The pid files of the daemons, in start order.
    pids: Vec<PathBuf>,
}

/// The error text of a command that failed, with the daemons' logs.
pub fn failed(dir: &Path, what: &str, out: &std::process::Output) -> String {
    let logs: String = ["slurmctld.log", "slurmd.log", "munged.log"]
        .iter()
        .map(|l| {
            let t = std::fs::read_to_string(dir.join(l)).unwrap_or_default();
            let tail: Vec<&str> = t.lines().rev().take(15).collect();
            format!(
                "--- {l} (last lines)\n{}\n",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )
        })
        .collect();
    format!(
        "{what}: {}\nstdout: {}\nstderr: {}\n{logs}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

impl Cluster {
    /// The cluster's directory (made afresh by [`Cluster::start`]).
    pub fn dir() -> PathBuf {
        PathBuf::from(format!("/tmp/drmtool-slurm-{}", std::process::id()))
    }

    /// Writes the configuration for `gpus` (gres.conf from `drmtool slurm gres-conf`) and
    /// starts the daemons; waits until the node is idle.
    pub fn start(gres_conf: &str, gpus: &[gpu::Gpu]) -> Self {
        Self::start_with(gres_conf, gpus, &Extra::default())
    }

    /// [`Cluster::start`] with `extra` configuration.
    pub fn start_with(gres_conf: &str, gpus: &[gpu::Gpu], extra: &Extra<'_>) -> Self {
        Self::start_on(gres_conf, gpus, extra, &Layout::single())
    }

    /// This machine's part of a cluster laid out as `layout`: munged and slurmd, and
    /// slurmctld on the first node, which then waits until every node is idle. Every node
    /// declares the GPU types and counts of this machine's `gpus` (the nodes are alike).
    pub fn start_on(
        gres_conf: &str,
        gpus: &[gpu::Gpu],
        extra: &Extra<'_>,
        layout: &Layout<'_>,
    ) -> Self {
        let dir = layout.dir.clone();
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("state")).unwrap();
        std::fs::create_dir_all(dir.join("spool")).unwrap();
        // munged wants its socket's directory searchable by all, its key private.
        let munge = dir.join("munge");
        std::fs::create_dir_all(&munge).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&munge, std::fs::Permissions::from_mode(0o711)).unwrap();
        let key: Vec<u8> = (0..1024u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 ^ layout.key_seed as u8)
            .collect();
        let key_path = munge.join("munge.key");
        std::fs::write(&key_path, key).unwrap();
        std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o400)).unwrap();
        let sock = munge.join("munge.sock");
        let (host, _) = layout.nodes[layout.me];
        let (ctld, ctld_addr) = layout.nodes[0];
        let controller = layout.me == 0;
        ipv4_configured();
        // Slurm numbers a node's GRES of one type in gres.conf's order; the node declares
        // each type's count.
        let mut types: Vec<(String, usize)> = Vec::new();
        for g in gpus {
            let t = g.driver.clone().expect("every guest GPU has a driver");
            match types.iter_mut().find(|(n, _)| *n == t) {
                Some((_, c)) => *c += 1,
                None => types.push((t, 1)),
            }
        }
        let mut gres = types
            .iter()
            .map(|(t, c)| format!("gpu:{t}:{c}"))
            .collect::<Vec<_>>()
            .join(",");
        gres.push_str(extra.node_gres);
        let d = dir.display();
        let conf = dir.join("slurm.conf");
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let node_lines: String = layout
            .nodes
            .iter()
            .map(|(name, addr)| {
                format!("NodeName={name} NodeAddr={addr} CPUs={cpus} Gres={gres} State=UNKNOWN\n")
            })
            .collect();
        let names: Vec<&str> = layout.nodes.iter().map(|(n, _)| *n).collect();
        std::fs::write(
            &conf,
            format!(
                "ClusterName=drmtest\n\
                 SlurmctldHost={ctld}({ctld_addr})\n\
                 SlurmUser=root\nSlurmdUser=root\n\
                 AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket={sock}\n\
                 StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\n\
                 SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd.pid\n\
                 SlurmctldLogFile={d}/slurmctld.log\nSlurmdLogFile={d}/slurmd.log\n\
                 SlurmctldPort=6817\nSlurmdPort=6818\n\
                 ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup\n\
                 JobAcctGatherType=jobacct_gather/none\n\
                 GresTypes=gpu{gres_types}\nSchedulerType=sched/builtin\n\
                 SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n\
                 ReturnToService=2\nMpiDefault=none\nJobCompType=jobcomp/none\n\
                 AccountingStorageType=accounting_storage/none\n\
                 {node_lines}\
                 PartitionName=debug Nodes={names} Default=YES MaxTime=INFINITE State=UP\n\
                 {conf}",
                gres_types = extra.gres_types,
                conf = extra.conf,
                sock = sock.display(),
                names = names.join(","),
            ),
        )
        .unwrap();
        std::fs::write(
            dir.join("cgroup.conf"),
            "CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes\nConstrainDevices=yes\n\
             ConstrainCores=no\nConstrainRAMSpace=no\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("gres.conf"),
            format!("AutoDetect=off\n{gres_conf}"),
        )
        .unwrap();
        let mut c = Cluster {
            conf,
            pids: Vec::new(),
            dir,
        };
        let munged = c.run(
            "munged",
            &[
                &format!("--key-file={}", key_path.display()),
                &format!("--socket={}", sock.display()),
                &format!("--pid-file={}/munged.pid", c.dir.display()),
                &format!("--log-file={}/munged.log", c.dir.display()),
                &format!("--seed-file={}/munged.seed", c.dir.display()),
            ],
        );
        c.pids.push(c.dir.join("munged.pid"));
        assert!(
            munged.status.success(),
            "{}",
            failed(&c.dir, "munged", &munged)
        );
        if controller {
            let ctld = c.run("slurmctld", &["-i"]);
            c.pids.push(c.dir.join("slurmctld.pid"));
            assert!(
                ctld.status.success(),
                "{}",
                failed(&c.dir, "slurmctld", &ctld)
            );
        }
        // slurmd makes <node>_slurmstepd.scope under system.slice, which it does not create
        // when systemd is ignored.
        std::fs::create_dir_all("/sys/fs/cgroup/system.slice")
            .expect("/sys/fs/cgroup/system.slice");
        let slurmd = c.run("slurmd", &["-N", host]);
        c.pids.push(c.dir.join("slurmd.pid"));
        assert!(
            slurmd.status.success(),
            "{}",
            failed(&c.dir, "slurmd", &slurmd)
        );
        if controller {
            c.wait_idle(layout.nodes.len());
        }
        c
    }

    /// Waits until `sinfo` shows `nodes` nodes, all idle: they registered (under TCG that
    /// takes seconds; a second guest may still be booting: 300 s).
    fn wait_idle(&self, nodes: usize) {
        let secs = if nodes == 1 { 120 } else { 300 };
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let out = self.run("sinfo", &["-h", "-N", "-o", "%N %T"]);
            let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
            let states: Vec<&str> = text.lines().filter_map(|l| l.split(' ').nth(1)).collect();
            if states.len() == nodes && states.iter().all(|s| *s == "idle") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the nodes did not become idle in {secs} s (last {text:?}): {}",
                failed(&self.dir, "sinfo", &out)
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// `prog args` with this cluster's configuration, waited for.
    pub fn run(&self, prog: &str, args: &[&str]) -> std::process::Output {
        self.cmd(prog)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{prog}: {e}"))
    }

    /// `prog` with this cluster's configuration and without the signal storm (it belongs
    /// to the test process, not to the daemons or the jobs).
    pub fn cmd(&self, prog: &str) -> Command {
        let mut c = Command::new(which(prog).unwrap_or_else(|| prog.into()));
        c.env("SLURM_CONF", &self.conf)
            .env_remove("KERNEL_TESTS_SIGNAL_STORM");
        c
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for p in self.pids.iter().rev() {
            let pid = std::fs::read_to_string(p)
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok())
                .and_then(rustix::process::Pid::from_raw);
            let Some(pid) = pid else { continue };
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            let t = Instant::now();
            while rustix::process::test_kill_process(pid).is_ok()
                && t.elapsed() < Duration::from_secs(10)
            {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
}

/// The program of a job: this binary's test `entry`.
pub fn job_argv(entry: &str) -> Vec<String> {
    vec![
        std::env::current_exe().unwrap().display().to_string(),
        entry.into(),
        "--exact".into(),
        "--nocapture".into(),
        "-q".into(),
        "--test-threads=1".into(),
    ]
}
