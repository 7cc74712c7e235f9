//! Issue 28 in the guest: `drmtool cdi generate` read by a real container runtime. Debian
//! 12's podman 4.3 (CDI library of the 0.5 era) runs a busybox rootfs with one GPU given
//! as a CDI device (`--device drmtool.dev/gpu=<bus id>`), rootful, as a guest without
//! systemd needs it: `--cgroup-manager cgroupfs`, `--events-backend file`, `--log-driver
//! k8s-file`, vfs storage on a tmpfs (the guest kernels have no overlayfs), runc, no
//! network, no image pull. `--cap-add MKNOD`: podman's default capabilities lack it, and
//! without it the mknod check below would prove nothing.
//!
//! Inside, a busybox shell script reports, for every node of the spec:
//! - the container's own GPU's nodes: present and opening (DRM nodes open; a synthetic
//!   NVIDIA node, no driver behind it, gets ENXIO: allowed by the device program);
//! - every other GPU's nodes: absent, and EPERM when made with mknod (the runtime's device
//!   program, built from the spec, denies them).
//!
//! Then `drmtool cgroup devices` on the container's cgroup decodes the program runc
//! attached: it allows each of the device's nodes `rw` and none of the others.
//!
//! Synthetic NVIDIA GPUs (`nvidia_common`) make two of the guest's PCI GPUs "NVIDIA", so
//! the spec carries `/dev/nvidiaN` and `nvidiactl` too.

use drmtool::isolate::{devprog, inspect};
use kernel_tests::{in_guest, skip, which};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod nvidia_common;
use nvidia_common::SyntheticNvidia;

/// The CDI kind `drmtool cdi generate` writes by default.
const KIND: &str = "drmtool.dev/gpu";

/// A node of the spec: path and device number.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct SpecNode {
    path: String,
    major: u32,
    minor: u32,
}

/// The nodes of the spec's device `name`.
fn nodes_of(spec: &Value, name: &str) -> BTreeSet<SpecNode> {
    let dev = spec["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .find(|d| d["name"] == name)
        .unwrap_or_else(|| panic!("no device {name:?} in the spec: {spec:#}"));
    dev["containerEdits"]["deviceNodes"]
        .as_array()
        .expect("deviceNodes")
        .iter()
        .map(|n| {
            assert_eq!(n["type"], "c", "{n}");
            SpecNode {
                path: n["path"].as_str().unwrap().to_string(),
                major: n["major"].as_u64().unwrap() as u32,
                minor: n["minor"].as_u64().unwrap() as u32,
            }
        })
        .collect()
}

/// Podman with its state on tmpfs, removed on drop.
struct Podman {
    dir: PathBuf,
    run_dir: PathBuf,
    spec: PathBuf,
}

impl Podman {
    fn new(spec: &Value) -> Podman {
        let dir = PathBuf::from(format!("/tmp/drmtool-podman-{}", std::process::id()));
        let run_dir = PathBuf::from(format!("/run/drmtool-podman-{}", std::process::id()));
        let rootfs = dir.join("rootfs");
        for d in ["bin", "tmp", "dev", "proc", "sys", "etc"] {
            std::fs::create_dir_all(rootfs.join(d)).unwrap();
        }
        // The signal storm (SIGALRM without SA_RESTART) can cut the copy's read, write or
        // copy_file_range with EINTR; a copy from the start again is whole.
        let copied = loop {
            match std::fs::copy("/bin/busybox", rootfs.join("bin/busybox")) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                r => break r,
            }
        };
        copied.expect("busybox-static");
        std::os::unix::fs::symlink("busybox", rootfs.join("bin/sh")).unwrap();
        // /var/run/cdi is where podman 4.3 reads generated specs (/etc/cdi is the other);
        // the guest's /run is a tmpfs.
        std::fs::create_dir_all("/run/cdi").unwrap();
        let spec_path = PathBuf::from(format!("/run/cdi/drmtool-test-{}.json", std::process::id()));
        std::fs::write(&spec_path, spec.to_string()).unwrap();
        Podman {
            dir,
            run_dir,
            spec: spec_path,
        }
    }

    /// `podman` with the guest's global options.
    fn cmd(&self) -> Command {
        let mut c = Command::new("podman");
        c.arg("--root")
            .arg(self.dir.join("storage"))
            .arg("--runroot")
            .arg(&self.run_dir)
            .arg("--tmpdir")
            .arg(self.dir.join("libpod"))
            .args([
                "--storage-driver",
                "vfs",
                "--cgroup-manager",
                "cgroupfs",
                "--events-backend",
                "file",
                "--runtime",
                "runc",
            ])
            .stdin(std::process::Stdio::null());
        c
    }

    /// `podman run` of the busybox rootfs with `device`, `extra` run options and `argv`.
    fn run(&self, device: &str, extra: &[&str], argv: &[&str]) -> Output {
        self.cmd()
            .args(["run", "--network", "none", "--log-driver", "k8s-file"])
            .args(["--cap-add", "MKNOD", "--device", device])
            .args(extra)
            .arg("--rootfs")
            .arg(self.dir.join("rootfs"))
            .args(argv)
            .output()
            .expect("podman")
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let _ = self.cmd().args(["rm", "-a", "-f"]).output();
        let _ = std::fs::remove_file(&self.spec);
        let _ = std::fs::remove_dir_all(&self.run_dir);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The probe inside: `own PATH` and `other PATH MAJOR MINOR` arguments; a line each,
/// `own|other PATH present|absent VERDICT`, the verdict of an open for read and write
/// (for `other`, of a node made with mknod), as the errno's name or `ok`.
const PROBE: &str = r#"
v() {
  if r=$( (exec 3<>"$1") 2>&1 ); then echo ok; return; fi
  case "$r" in
    *"not permitted"*) echo EPERM;;
    *"No such device or address"*) echo ENXIO;;
    *"No such device"*) echo ENODEV;;
    *"No such file"*) echo ENOENT;;
    *) echo "other:$r" | tr ' ' _;;
  esac
}
i=0
while [ $# -gt 0 ]; do
  if [ -e "$2" ]; then p=present; else p=absent; fi
  if [ "$1" = own ]; then
    echo "own $2 $p $(v "$2")"; shift 2
  else
    i=$((i+1))
    # The rootfs is shared by the containers one after another: a fresh name each time.
    busybox rm -f /tmp/m$i
    if m=$(busybox mknod /tmp/m$i c "$3" "$4" 2>&1); then
      echo "other $2 $p $(v /tmp/m$i)"
    else
      echo "other $2 $p mknod:$m" | tr ' ' _
    fi
    shift 4
  fi
done
env | grep '^DRMTOOL_GPU_' | sed 's/^/env /'
"#;

/// The probe's arguments for a container given `own`, every other node being `others`.
fn probe_args(own: &BTreeSet<SpecNode>, others: &BTreeSet<SpecNode>) -> Vec<String> {
    let mut a = vec![
        "/bin/sh".to_string(),
        "-c".into(),
        PROBE.into(),
        "probe".into(),
    ];
    for n in own {
        a.extend(["own".into(), n.path.clone()]);
    }
    for n in others {
        a.extend([
            "other".into(),
            n.path.clone(),
            n.major.to_string(),
            n.minor.to_string(),
        ]);
    }
    a
}

/// The GPUs a container is started for: the first of each kind the spec tells apart (a
/// synthetic NVIDIA GPU, another PCI GPU, a GPU without a bus id, named by index). A
/// `podman run` takes 20-30 s under TCG, so one per kind rather than one per GPU; every
/// GPU's spec entry is checked without podman.
fn one_of_each_kind(gpus: &[drmtool::gpu::Gpu], nv_bus: &[String]) -> BTreeSet<usize> {
    let kind = |g: &drmtool::gpu::Gpu| match &g.bus_id {
        Some(b) if nv_bus.contains(b) => 0,
        Some(_) => 1,
        None => 2,
    };
    let mut seen = BTreeSet::new();
    gpus.iter()
        .filter(|g| seen.insert(kind(g)))
        .map(|g| g.index)
        .collect()
}

/// Every GPU's spec entry holds its nodes and nothing of another GPU; one container per
/// kind of GPU: only its nodes exist and open, every other is absent and EPERM after
/// mknod; the device program runc attached, decoded, agrees.
#[test]
fn podman_gives_a_container_only_its_cdi_gpu() {
    if !in_guest() {
        skip!("not in a vm guest: no DRM devices to give a container here");
    }
    for p in ["podman", "runc", "conmon"] {
        if which(p).is_none() && !Path::new("/usr/libexec/podman/conmon").exists() {
            skip!("{p} is not installed (scripts/setup installs podman and runc)");
        }
    }
    let gpus = drmtool::gpu::gpus().expect("the guest has DRM devices");
    let pci: Vec<&drmtool::gpu::Gpu> = gpus.iter().filter(|g| g.bus_id.is_some()).collect();
    assert!(pci.len() >= 2, "two PCI GPUs to make NVIDIA: {gpus:#?}");
    let nv_bus: Vec<String> = pci[..2].iter().map(|g| g.bus_id.clone().unwrap()).collect();
    let _nvidia = SyntheticNvidia::new(&[(nv_bus[0].as_str(), 0), (nv_bus[1].as_str(), 1)]);

    let out = format!("/tmp/drmtool-cdi-{}.json", std::process::id());
    let (code, text) = drmtool::cli::run_captured(&["cdi", "generate", "-o", &out]);
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{text}");
    let spec: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let _ = std::fs::remove_file(&out);
    assert_eq!(spec["cdiVersion"], "0.5.0", "{spec:#}");
    assert_eq!(spec["kind"], KIND, "{spec:#}");
    let podman = Podman::new(&spec);
    let containers = one_of_each_kind(&gpus, &nv_bus);
    assert_eq!(containers.len(), 3, "three kinds of GPU: {gpus:#?}");

    let mut verdicts = Vec::new();
    for g in &gpus {
        let name = g.bus_id.clone().unwrap_or_else(|| g.index.to_string());
        let own = nodes_of(&spec, &name);
        assert_eq!(
            own,
            nodes_of(&spec, &g.index.to_string()),
            "{name}: by index"
        );
        assert!(!own.is_empty(), "{name}: no nodes");
        // The spec is the ordering's: the GPU's DRM nodes, and for a synthetic NVIDIA GPU
        // its /dev/nvidiaN and nvidiactl; nothing of another GPU.
        let paths = |major: u32| -> BTreeSet<String> {
            own.iter()
                .filter(|n| n.major == major)
                .map(|n| n.path.clone())
                .collect()
        };
        let drm: BTreeSet<String> = g
            .nodes
            .iter()
            .map(|n| n.path.display().to_string())
            .collect();
        assert_eq!(paths(226), drm, "{name}: DRM nodes");
        let nvidia: BTreeSet<String> =
            match nv_bus.iter().position(|b| Some(b) == g.bus_id.as_ref()) {
                Some(i) => [format!("/dev/nvidia{i}"), "/dev/nvidiactl".into()].into(),
                None => BTreeSet::new(),
            };
        assert_eq!(paths(195), nvidia, "{name}: NVIDIA nodes");
        assert_eq!(own.len(), drm.len() + nvidia.len(), "{name}: {own:?}");
        if !containers.contains(&g.index) {
            continue;
        }
        let others: BTreeSet<SpecNode> = gpus
            .iter()
            .filter(|o| o.index != g.index)
            .flat_map(|o| nodes_of(&spec, &o.index.to_string()))
            .filter(|n| !own.iter().any(|m| (m.major, m.minor) == (n.major, n.minor)))
            .collect();
        let args = probe_args(&own, &others);
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = podman.run(&format!("{KIND}={name}"), &["--rm"], &argv);
        let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(
            o.status.success(),
            "{name}: podman run: {}\n{stdout}\n{}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
        check_probe(g, &own, &others, &stdout);
        verdicts.push(format!("{name}:\n{stdout}"));
    }
    eprintln!("verdicts:\n{}", verdicts.join("\n"));
    check_device_program(&podman, &spec, &gpus);
}

/// The probe's lines for `g` as the spec says: own nodes present and allowed (DRM: open;
/// NVIDIA: ENXIO), every other absent and EPERM after mknod, the place variable set.
fn check_probe(
    g: &drmtool::gpu::Gpu,
    own: &BTreeSet<SpecNode>,
    others: &BTreeSet<SpecNode>,
    stdout: &str,
) {
    let lines: Vec<Vec<&str>> = stdout.lines().map(|l| l.split(' ').collect()).collect();
    for n in own {
        let want_open = if n.major == 195 { "ENXIO" } else { "ok" };
        assert!(
            lines
                .iter()
                .any(|l| l[..] == ["own", &n.path, "present", want_open]),
            "GPU {}: own {} should be present and {want_open}:\n{stdout}",
            g.index,
            n.path
        );
    }
    for n in others {
        assert!(
            lines
                .iter()
                .any(|l| l[..] == ["other", &n.path, "absent", "EPERM"]),
            "GPU {}: other {} should be absent and EPERM after mknod:\n{stdout}",
            g.index,
            n.path
        );
    }
    let var = format!("DRMTOOL_GPU_{}", g.index);
    assert!(
        lines
            .iter()
            .any(|l| l.len() == 2 && l[0] == "env" && l[1].starts_with(&format!("{var}="))),
        "GPU {}: {var} not set:\n{stdout}",
        g.index
    );
}

/// A detached container of the first GPU: `cgroup devices` on its cgroup decodes runc's
/// program; it allows each of the GPU's nodes for read and write and no other GPU node.
/// (Podman 4.3 grants the CDI nodes `rwm` whatever the spec's `permissions`, and runc's
/// defaults allow mknod of any node, `c *:* m`: the open is what is denied.)
fn check_device_program(podman: &Podman, spec: &Value, gpus: &[drmtool::gpu::Gpu]) {
    use devprog::{Access, DevType, Request};
    let g = &gpus[0];
    let own = nodes_of(spec, &g.index.to_string());
    let name = format!("drmtool-cdi-{}", std::process::id());
    let o = podman.run(
        &format!("{KIND}={}", g.index),
        &["-d", "--name", &name],
        &["/bin/busybox", "sleep", "120"],
    );
    assert!(
        o.status.success(),
        "podman run -d: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let pid = podman
        .cmd()
        .args(["inspect", "--format", "{{.State.Pid}}", &name])
        .output()
        .expect("podman inspect");
    let pid = String::from_utf8_lossy(&pid.stdout).trim().to_string();
    let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("its cgroup");
    let rel = cg.trim().strip_prefix("0::").expect("a cgroup v2 line");
    let dir = Path::new("/sys/fs/cgroup").join(rel.trim_start_matches('/'));
    let (code, text) =
        drmtool::cli::run_captured(&["cgroup", "devices", dir.to_str().unwrap(), "--json"]);
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{text}");
    let r = inspect::inspect(&dir).expect("cgroup devices");
    let p = r
        .effective
        .iter()
        .find(|p| p.kind == "device-list")
        .unwrap_or_else(|| panic!("no decoded program on {}: {text}", dir.display()));
    let list: Vec<devprog::Entry> = p.list.iter().map(|l| l.parse().unwrap()).collect();
    let ask = |n: &SpecNode, access| {
        devprog::list_allows(
            &list,
            Request {
                dev_type: DevType::Char,
                major: n.major,
                minor: n.minor,
                access,
            },
        )
    };
    for n in &own {
        assert!(
            ask(n, Access::READ | Access::WRITE),
            "{} in {:?}",
            n.path,
            p.list
        );
    }
    for o in gpus.iter().filter(|o| o.index != g.index) {
        for n in nodes_of(spec, &o.index.to_string()) {
            if own.iter().any(|m| (m.major, m.minor) == (n.major, n.minor)) {
                continue;
            }
            assert!(
                !ask(&n, Access::READ),
                "{} of GPU {} in {:?}",
                n.path,
                o.index,
                p.list
            );
        }
    }
    eprintln!("{text}");
    let _ = podman.cmd().args(["rm", "-f", &name]).output();
}
