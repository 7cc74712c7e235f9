//! Container runtimes' own cgroup device programs in real guests: runc and crun (Debian's)
//! start a container on a minimal OCI bundle with a device allowlist, and `drmtool cgroup
//! devices` reads the program they attached back as rules (split from `drmtool_run.rs`,
//! which keeps drmtool's own jobs; CDI through podman is `drmtool_cdi.rs`).

use drmtool::isolate::{devprog, inspect};
use kernel_tests::{skip, which};
use std::path::{Path, PathBuf};

#[macro_use]
mod isolation_common;

/// A container runtime started on a minimal OCI bundle with a device allowlist (deny all,
/// then `c 226:128 rw`); its cgroup's device program is read back by `cgroup devices`.
struct Container {
    rt: &'static str,
    root: PathBuf,
    bundle: PathBuf,
    id: String,
    cgroup: PathBuf,
}

impl Container {
    fn start(rt: &'static str) -> Result<Container, String> {
        let tag = format!("drmtool-oci-{rt}-{}", std::process::id());
        let bundle = PathBuf::from(format!("/tmp/{tag}"));
        let rootfs = bundle.join("rootfs");
        for d in ["bin", "proc", "dev"] {
            std::fs::create_dir_all(rootfs.join(d)).unwrap();
        }
        // read + write (both retry EINTR), not fs::copy, whose copy_file_range a signal
        // storm interrupts.
        let bb = std::fs::read("/bin/busybox").map_err(|e| format!("busybox: {e}"))?;
        std::fs::write(rootfs.join("bin/busybox"), bb).map_err(|e| format!("busybox: {e}"))?;
        std::fs::set_permissions(
            rootfs.join("bin/busybox"),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .map_err(|e| format!("busybox: {e}"))?;
        let config = serde_json::json!({
            "ociVersion": "1.0.2",
            "process": {"terminal": false, "user": {"uid": 0, "gid": 0},
                        "args": ["/bin/busybox", "sleep", "120"], "env": ["PATH=/bin"], "cwd": "/"},
            "root": {"path": "rootfs", "readonly": true},
            "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
            "linux": {
                "cgroupsPath": format!("/{tag}"),
                "resources": {"devices": [
                    {"allow": false, "access": "rwm"},
                    {"allow": true, "type": "c", "major": 226, "minor": 128, "access": "rw"}
                ]},
                "namespaces": [{"type": "mount"}]
            }
        });
        std::fs::write(bundle.join("config.json"), config.to_string()).unwrap();
        let c = Container {
            rt,
            root: PathBuf::from(format!("/tmp/{tag}-state")),
            bundle,
            id: tag.clone(),
            cgroup: Path::new("/sys/fs/cgroup").join(&tag),
        };
        // The detached container inherits the runtime's stdio: a file, not a pipe that
        // would stay open as long as the container runs.
        let log = c.bundle.join("runtime.log");
        let f = std::fs::File::create(&log).unwrap();
        let st = std::process::Command::new(rt)
            .arg("--root")
            .arg(&c.root)
            .args(["run", "-d", "--bundle"])
            .arg(&c.bundle)
            .arg(&c.id)
            .stdin(std::process::Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .status()
            .map_err(|e| format!("{rt}: {e}"))?;
        if !st.success() {
            return Err(format!(
                "{rt} run: {st}: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            ));
        }
        Ok(c)
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let rt = |args: &[&str]| {
            let _ = std::process::Command::new(self.rt)
                .arg("--root")
                .arg(&self.root)
                .args(args)
                .arg(&self.id)
                .output();
        };
        rt(&["kill"]);
        std::thread::sleep(std::time::Duration::from_millis(300));
        rt(&["delete", "-f"]);
        let _ = std::fs::remove_dir_all(&self.bundle);
        let _ = std::fs::remove_dir_all(&self.root);
        let _ = std::fs::remove_dir(&self.cgroup);
    }
}

/// `cgroup devices` on the cgroups runc and crun make: their programs decode to device
/// lists that answer every rule of the bundle as the bundle says (the runtime's own
/// defaults, /dev/null and the like and `c *:* m`, on top).
#[test]
fn cgroup_devices_decodes_what_runc_and_crun_attach() {
    let _gpus = guest_gpus!();
    use devprog::{Access, DevType, Request};
    let mut checked = Vec::new();
    for rt in ["runc", "crun"] {
        if which(rt).is_none() {
            skip!("{rt} is not installed (scripts/setup installs it)");
        }
        // crun 1.8 writes /proc/self/setgroups, which exists only with CONFIG_USER_NS (the
        // stock kernels; vm/config/guest.config leaves user namespaces out).
        if rt == "crun" && !Path::new("/proc/self/setgroups").exists() {
            eprintln!(
                "NOTE crun not run: no /proc/self/setgroups (a kernel without CONFIG_USER_NS)"
            );
            continue;
        }
        let c = Container::start(rt).unwrap_or_else(|e| panic!("{e}"));
        let r = inspect::inspect(&c.cgroup).unwrap_or_else(|e| panic!("{rt}: {e}"));
        let p = r
            .attached
            .iter()
            .find(|p| p.kind == "device-list")
            .unwrap_or_else(|| panic!("{rt}: no decoded program: {r:?}"));
        eprintln!(
            "{rt}: program {} {:?}, {} insns: {:?}",
            p.id, p.name, p.insns, p.list
        );
        let list: Vec<devprog::Entry> = p
            .list
            .iter()
            .map(|l| l.parse().unwrap_or_else(|e| panic!("{rt}: {e}")))
            .collect();
        let ask = |major, minor, access| {
            devprog::list_allows(
                &list,
                Request {
                    dev_type: DevType::Char,
                    major,
                    minor,
                    access,
                },
            )
        };
        // The bundle's rules.
        assert!(
            ask(226, 128, Access::READ | Access::WRITE),
            "{rt}: {list:?}"
        );
        assert!(ask(226, 128, Access::READ), "{rt}: {list:?}");
        assert!(!ask(226, 0, Access::READ), "{rt}: {list:?}");
        assert!(!ask(226, 129, Access::WRITE), "{rt}: {list:?}");
        assert!(
            !devprog::list_allows(
                &list,
                Request {
                    dev_type: DevType::Block,
                    major: 8,
                    minor: 0,
                    access: Access::READ
                }
            ),
            "{rt}: {list:?}"
        );
        checked.push(rt);
    }
    assert!(checked.contains(&"runc"), "{checked:?}");
}
