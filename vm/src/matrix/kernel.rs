//! One kernel's lane of `vm test`: its boots, until the suite ran or the lane gives up
//! after kernel crashes.

use super::TestPlan;
use crate::accel::{self, Decision};
use crate::build;
use crate::cache::BuiltKernel;
use crate::catalog;
use crate::error::Result;
use crate::guest::{
    self, BootResult, ClusterLink, DeviceKind, Ending, GuestSpec, Payload, RunFiles, Stream,
};
use crate::lane::{Lane, Next};
use crate::prepare::missing_features;
use crate::report::KernelReport;
use crate::runner;
use crate::stream::Record;
use std::time::{Duration, Instant};

/// One kernel's lane: boots it with the full device set and runs the suite; after a boot
/// that a kernel crash ended, boots again for what had not run (at most
/// `plan.max_oopses` crashes). The files of a lane that passed are removed; those of one
/// that failed are kept (and named).
pub fn test_kernel(
    n: &str,
    kernel: BuiltKernel,
    plan: &TestPlan,
    stream: Stream,
) -> Result<KernelReport> {
    let t0 = Instant::now();
    let (argv, units) = lane_payload(n, &kernel, plan);
    let decision = accel::decide(plan.choice, &kernel, &plan.busybox);
    eprintln!(
        "vm: {} | kernel {n} ({}){}",
        decision.note,
        kernel.release,
        decision.detail_text()
    );
    let spec = lane_spec(n, kernel, plan, &decision, &argv, stream);
    let run = LaneRun {
        n,
        plan,
        argv,
        units,
        t0,
        peer_failures: Default::default(),
    };
    let mut lane = Lane::new(plan.max_oopses);
    let (boots, not_run) = run.boot_all(spec, &mut lane)?;
    let mut rep = finish_lane(n, &decision, &boots, &lane, not_run);
    // Node 2's own tests ran beside node 1's: its failure is the lane's.
    for p in run.peer_failures.take() {
        rep.passed = false;
        rep.notes.push(p);
    }
    Ok(rep)
}

/// The guest's command and the units it is to run: the plan's, plus the kernel's
/// selftests (where they can be built) and libdrm's programs, unless the plan is of the
/// kernel-tests binaries only.
fn lane_payload(n: &str, kernel: &BuiltKernel, plan: &TestPlan) -> (Vec<String>, Vec<String>) {
    let mut argv = plan.argv.clone();
    let mut units = plan.units.clone();
    if plan.cluster {
        // A cluster's test waits for the other guest (its boot, its daemons): 20 minutes.
        argv.extend(["--test-timeout".into(), "1200".into()]);
    } else if plan.writable_root {
        // Every file access of a writable root's test goes through FUSE and 9p: the
        // package test's dpkg, man and systemd-analyze took 173 s alone under TCG, more
        // beside the matrix's lanes. 15 minutes.
        argv.extend(["--test-timeout".into(), "900".into()]);
    }
    if plan.kernel_tests_only {
        eprintln!("vm: {n}: --kernel-tests-only: no kernel selftests, no libdrm programs");
    } else {
        match build::ensure_selftests(kernel) {
            Ok(dir) => {
                argv.push("--selftests".into());
                argv.push(dir.to_string_lossy().into_owned());
                units.extend(
                    build::SELFTESTS
                        .iter()
                        .map(|(suite, _)| runner::unit_id(suite, runner::KSELFTEST_UNIT)),
                );
            }
            Err(e) => eprintln!("vm: {n}: no kernel selftests: {e}"),
        }
        argv.push("--libdrm".into());
        units.push(runner::unit_id("libdrm", "*"));
    }
    (argv, units)
}

/// The guest of a lane: the full device set, 2 GiB, the plan's time limit, and the
/// strict environment ([`lane_env`]).
fn lane_spec(
    n: &str,
    kernel: BuiltKernel,
    plan: &TestPlan,
    decision: &Decision,
    argv: &[String],
    stream: Stream,
) -> GuestSpec {
    let missing = missing_features(&kernel);
    if !missing.is_empty() {
        eprintln!("vm: {n} is not built with: {missing} (those tests skip, loudly)");
    }
    GuestSpec {
        kernel,
        // The topology profile's virtio-gpus are the two behind its expander bridges (the
        // root bus's two are left out: one driver's GPUs are then exactly the profile's).
        devices: DeviceKind::ALL
            .into_iter()
            .filter(|d| {
                plan.topology.is_none()
                    || !matches!(d, DeviceKind::VirtioGpu | DeviceKind::VirtioGpu2)
            })
            .chain(plan.topology)
            .collect(),
        payload: Payload {
            argv: argv.to_vec(),
            cwd: std::env::current_dir().unwrap_or_else(|_| "/".into()),
            env: {
                let mut env = lane_env(n, &missing, decision.accel.name(), &plan.env);
                match plan.topology {
                    Some(DeviceKind::NumaPxb) => env.push(("VM_TOPOLOGY".into(), "numa".into())),
                    Some(DeviceKind::PcieSwitch) => {
                        env.push(("VM_TOPOLOGY".into(), "switch".into()));
                    }
                    _ => {}
                }
                if plan.cluster {
                    env.push((CLUSTER_NODE_ENV.into(), "1".into()));
                }
                if plan.writable_root {
                    env.push(("VM_WRITABLE_ROOT".into(), "1".into()));
                }
                env
            },
            host_root: true,
            writable_root: plan.writable_root,
        },
        accel: decision.accel,
        timeout: plan.timeout,
        // hmm selftests migrate hundreds of MiB; tmpfs and the page cache live here too.
        memory_mib: 2048,
        probe_only: false,
        stream_output: stream,
        cluster: None,
    }
}

/// The environment of a lane's tests: strict, the kernel's name, what it lacks and the
/// accelerator, then the `--env` pairs.
fn lane_env(
    n: &str,
    missing: &str,
    accel: &str,
    extra: &[(String, String)],
) -> Vec<(String, String)> {
    let mut env = vec![
        ("KERNEL_TESTS_STRICT".to_string(), "1".to_string()),
        ("VM_KERNEL".into(), n.to_string()),
        ("VM_MISSING_FEATURES".into(), missing.to_string()),
        ("VM_ACCEL".into(), accel.into()),
    ];
    env.extend(extra.iter().cloned());
    env
}

/// The guests' node number under `vm test --cluster` (1: the lane's guest, 2: its peer).
const CLUSTER_NODE_ENV: &str = "VM_CLUSTER_NODE";

/// How long node 2 has to finish by itself once node 1's boot has ended, before it is
/// told to quit.
const PEER_GRACE: Duration = Duration::from_secs(120);

/// Every boot of a lane, with the failed result the lane recorded for the unit its crash
/// interrupted.
type Boots = Vec<(BootResult, Option<Record>)>;

/// What the boots of one lane share.
struct LaneRun<'a> {
    /// The kernel's name.
    n: &'a str,
    plan: &'a TestPlan,
    /// The guest's command of the first boot.
    argv: Vec<String>,
    /// Every unit the lane is to run.
    units: Vec<String>,
    /// When the lane started (its time limit covers all its boots).
    t0: Instant,
    /// What went wrong with node 2 under `--cluster`, a line per boot where it did.
    peer_failures: std::cell::RefCell<Vec<String>>,
}

impl LaneRun<'_> {
    /// Boots until the lane is done or gives up; returns every boot, with the failed
    /// result the lane recorded for the unit its crash interrupted, and what never ran.
    fn boot_all(&self, mut spec: GuestSpec, lane: &mut Lane) -> Result<(Boots, Vec<String>)> {
        let tag = catalog::path_safe(self.n);
        let mut boots = Vec::new();
        let not_run = loop {
            let files = RunFiles::new(&std::env::temp_dir(), &format!("vm-test-{tag}"))?;
            let r = if self.plan.cluster {
                let (r, peer) = self.boot_pair(&spec, files)?;
                if let Some(p) = peer {
                    eprintln!("vm: {}: boot {}: {p}", self.n, lane.boots + 1);
                    self.peer_failures.borrow_mut().push(p);
                }
                r
            } else {
                guest::boot(&spec, files, &self.plan.busybox)?
            };
            let (next, failed) = self.take_boot(lane, &r);
            boots.push((r, failed));
            match next {
                Next::Done => break Vec::new(),
                Next::GiveUp => break self.give_up(lane),
                Next::Resume(done) => self.resume(&mut spec, lane, done),
            }
        };
        Ok((boots, not_run))
    }

    /// One boot of the lane's guest (node 1) with its peer (node 2) beside it, linked by
    /// two UDP ports on the host's loopback; node 2 gets [`PEER_GRACE`] after node 1's boot
    /// to end, then is told to quit. Returns node 1's boot, and what went wrong with node 2
    /// (`None` when its payload exited 0; its files are then removed, else kept).
    fn boot_pair(&self, spec: &GuestSpec, files: RunFiles) -> Result<(BootResult, Option<String>)> {
        let (p1, p2) = free_udp_ports()?;
        let mut one = spec.clone();
        one.cluster = Some(ClusterLink {
            node: 1,
            local_port: p1,
            remote_port: p2,
        });
        let mut two = spec.clone();
        two.cluster = Some(ClusterLink {
            node: 2,
            local_port: p2,
            remote_port: p1,
        });
        for (k, v) in &mut two.payload.env {
            if k == CLUSTER_NODE_ENV {
                *v = "2".into();
            }
        }
        two.stream_output = Stream::Prefixed(format!("[{} node 2] ", self.n));
        let files2 = RunFiles::new(
            &std::env::temp_dir(),
            &format!("vm-test-{}-node2", catalog::path_safe(self.n)),
        )?;
        let (dir2, monitor) = (files2.dir.clone(), files2.monitor.clone());
        let busybox = self.plan.busybox.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let peer = std::thread::spawn(move || {
            let _ = tx.send(guest::boot(&two, files2, &busybox));
        });
        let r = guest::boot(&one, files, &self.plan.busybox);
        let got = rx.recv_timeout(PEER_GRACE).or_else(|_| {
            eprintln!(
                "vm: {}: node 2 still runs {} s after node 1 ended: quitting it",
                self.n,
                PEER_GRACE.as_secs()
            );
            let _ = guest::quit_qemu(&monitor);
            rx.recv()
        });
        let _ = peer.join();
        let trouble = match got {
            Ok(Ok(b)) if b.ending == Ending::Exited(0) => {
                let _ = std::fs::remove_dir_all(&dir2);
                None
            }
            Ok(Ok(b)) => Some(format!(
                "node 2 {} (its files kept in {})",
                b.ending,
                dir2.display()
            )),
            Ok(Err(e)) => Some(format!("node 2 did not boot: {e}")),
            Err(_) => Some("node 2's boot thread ended without a result".into()),
        };
        Ok((r?, trouble))
    }

    /// Hands a finished boot to the lane and says how a hang or a crash ended it.
    fn take_boot(&self, lane: &mut Lane, r: &BootResult) -> (Next, Option<Record>) {
        let n = self.n;
        let console = String::from_utf8_lossy(&std::fs::read(&r.files.console).unwrap_or_default())
            .into_owned();
        let panicked = matches!(r.ending, Ending::Panic(_) | Ending::Hang(_));
        let (next, failed) =
            lane.after_boot(&r.parsed.records, panicked, r.hang.as_deref(), &console);
        if let Some(h) = &r.hang {
            eprintln!(
                "vm: {n}: boot {}: the guest hung: {h} (the monitor's registers: {})",
                lane.boots,
                r.files.hang.display()
            );
        }
        if let Some(c) = lane.crashes.last().filter(|_| panicked) {
            eprintln!(
                "vm: {n}: boot {}: {} (files kept in {})",
                lane.boots,
                c.verdict(),
                r.files.dir.display()
            );
            for l in &c.oops.excerpt {
                eprintln!("    ! {l}");
            }
        }
        (next, failed)
    }

    /// The units that never ran, said on stderr, when the lane gives up.
    fn give_up(&self, lane: &Lane) -> Vec<String> {
        let nr = lane.not_run(&self.units);
        eprintln!(
            "vm: {}: NOT RUN: {} unit(s) after {} kernel crash(es) ({})",
            self.n,
            nr.len(),
            lane.crashes.len(),
            lane.give_up_reason().unwrap_or_default()
        );
        nr
    }

    /// Sets up the next boot: the first boot's command without the units done, and what is
    /// left of the lane's time limit (at least 120 s).
    fn resume(&self, spec: &mut GuestSpec, lane: &Lane, done: Vec<String>) {
        eprintln!(
            "vm: {}: booting again (boot {}) for what had not run; {} unit(s) done",
            self.n,
            lane.boots + 1,
            done.len()
        );
        spec.payload.argv = resume_argv(&self.argv, done);
        // The kernel's time limit covers all its boots.
        spec.timeout = time_left(self.plan.timeout, self.t0.elapsed());
    }
}

/// The guest's command `argv` with a `--skip-unit` for every unit done.
fn resume_argv(argv: &[String], done: Vec<String>) -> Vec<String> {
    let mut out = argv.to_vec();
    for u in done {
        out.push("--skip-unit".into());
        out.push(u);
    }
    out
}

/// What is left of a lane's time limit after `elapsed`, at least 120 s.
fn time_left(limit: Duration, elapsed: Duration) -> Duration {
    limit.saturating_sub(elapsed).max(Duration::from_secs(120))
}

/// Two UDP ports on the host's loopback that were free a moment ago (bound, read, let go:
/// QEMU binds them next).
fn free_udp_ports() -> Result<(u16, u16)> {
    let err = |e: std::io::Error| {
        crate::error::VmError::new(format!("no free UDP port on 127.0.0.1: {e}"))
    };
    // Both held at once, so they differ.
    let a = std::net::UdpSocket::bind("127.0.0.1:0").map_err(err)?;
    let b = std::net::UdpSocket::bind("127.0.0.1:0").map_err(err)?;
    Ok((
        a.local_addr().map_err(err)?.port(),
        b.local_addr().map_err(err)?.port(),
    ))
}

/// The lane's report; removes the files of every boot if it passed, else names them.
fn finish_lane(
    n: &str,
    decision: &Decision,
    boots: &[(BootResult, Option<Record>)],
    lane: &Lane,
    not_run: Vec<String>,
) -> KernelReport {
    let rep = KernelReport::from_lane(n, decision.accel.name(), boots, lane, not_run);
    for (r, _) in boots {
        if rep.passed {
            let _ = std::fs::remove_dir_all(&r.files.dir);
        } else {
            eprintln!("vm: {n}: files kept in {}", r.files.dir.display());
        }
    }
    rep
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accel::AccelChoice;
    use std::path::PathBuf;

    fn plan(kernel_tests_only: bool) -> TestPlan {
        TestPlan {
            busybox: "/bb".into(),
            argv: ["/vm", "guest-tests", "--strict", "--bin", "/t/smoke-0"]
                .map(String::from)
                .to_vec(),
            units: vec!["smoke::a".into()],
            env: vec![("A".into(), "1".into())],
            topology: None,
            cluster: false,
            writable_root: false,
            choice: AccelChoice::Auto,
            timeout: Duration::from_secs(1500),
            max_oopses: 3,
            kernel_tests_only,
        }
    }

    fn kernel(cache_dir: Option<PathBuf>) -> BuiltKernel {
        BuiltKernel {
            name: "k".into(),
            image: "/k/bzImage".into(),
            modules: None,
            release: "6.12.0".into(),
            built_from: cache_dir.as_ref().map(|d| (d.join("src"), d.join("obj"))),
            cache_dir,
            missing_features: Vec::new(),
            extra_modules: Vec::new(),
            early_modules: Vec::new(),
        }
    }

    #[test]
    fn a_kernel_tests_only_lane_runs_the_plan_as_it_is() {
        let p = plan(true);
        assert_eq!(
            lane_payload("k", &kernel(None), &p),
            (p.argv.clone(), p.units.clone())
        );
    }

    /// A cluster's lane gives its tests 20 minutes each (they wait for the other guest),
    /// and its two guests two different ports.
    #[test]
    fn a_cluster_lane_waits_longer_on_two_ports() {
        let mut p = plan(true);
        p.cluster = true;
        let (argv, _) = lane_payload("k", &kernel(None), &p);
        assert_eq!(argv[argv.len() - 2..], ["--test-timeout", "1200"]);
        let (a, b) = free_udp_ports().unwrap();
        assert_ne!(a, b);
    }

    /// A writable root's lane gives its tests 15 minutes each, and its guest the union.
    #[test]
    fn a_writable_root_lane_waits_longer_on_a_writable_root() {
        let mut p = plan(true);
        p.writable_root = true;
        let (argv, _) = lane_payload("k", &kernel(None), &p);
        assert_eq!(argv[argv.len() - 2..], ["--test-timeout", "900"]);
        let d = Decision {
            accel: crate::guest::Accel::Tcg,
            note: String::new(),
            detail: Vec::new(),
        };
        let spec = lane_spec("k", kernel(None), &p, &d, &argv, Stream::Off);
        assert!(spec.payload.host_root && spec.payload.writable_root);
        assert!(
            spec.payload
                .env
                .contains(&("VM_WRITABLE_ROOT".into(), "1".into()))
        );
    }

    #[test]
    fn a_full_lane_adds_libdrm_and_the_selftests_where_there_are_some() {
        let p = plan(false);
        let (argv, units) = lane_payload("k", &kernel(None), &p);
        assert_eq!(argv[..p.argv.len()], p.argv[..]);
        assert_eq!(argv[p.argv.len()..], ["--libdrm"]);
        assert_eq!(units, ["smoke::a", "libdrm::*"]);

        let dir = std::env::temp_dir().join(format!("vm-matrix-lane-{}", std::process::id()));
        let built = dir.join(build::SELFTESTS_DIR);
        std::fs::create_dir_all(&built).unwrap();
        std::fs::write(built.join(".complete"), "").unwrap();
        let (argv, units) = lane_payload("k", &kernel(Some(dir.clone())), &p);
        assert_eq!(
            argv[p.argv.len()..],
            ["--selftests", built.to_str().unwrap(), "--libdrm"]
        );
        assert_eq!(units.len(), 1 + build::SELFTESTS.len() + 1);
        assert_eq!(
            units[1],
            runner::unit_id(build::SELFTESTS[0].0, runner::KSELFTEST_UNIT)
        );
        assert_eq!(units.last().unwrap(), "libdrm::*");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_lane_environment_is_strict_and_names_the_kernel() {
        let env = lane_env("debian-6.12", "virgl", "tcg", &[("X".into(), "y".into())]);
        let want = [
            ("KERNEL_TESTS_STRICT", "1"),
            ("VM_KERNEL", "debian-6.12"),
            ("VM_MISSING_FEATURES", "virgl"),
            ("VM_ACCEL", "tcg"),
            ("X", "y"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        assert_eq!(env, want);
    }

    #[test]
    fn a_resumed_boot_skips_what_ran_within_the_time_left() {
        let argv = ["/vm", "guest-tests"].map(String::from);
        assert_eq!(
            resume_argv(&argv, vec!["a::x".into(), "b::y".into()]).join(" "),
            "/vm guest-tests --skip-unit a::x --skip-unit b::y"
        );
        assert_eq!(resume_argv(&argv, Vec::new()), argv);
        let s = Duration::from_secs;
        assert_eq!(time_left(s(1500), s(600)), s(900));
        assert_eq!(time_left(s(1500), s(1450)), s(120));
        assert_eq!(time_left(s(1500), s(2000)), s(120));
    }
}
