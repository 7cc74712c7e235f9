//! Who a process works for, read from its cgroup v2 path (the `0::` line of
//! `/proc/<pid>/cgroup`): the systemd unit, a container (docker, containerd/CRI-O under
//! Kubernetes, podman), the Kubernetes pod UID and the Slurm job and step, for "who uses GPU
//! memory" per job rather than per pid.
//!
//! The path is hostile text (a user with a delegated cgroup names its directories): only
//! components of the exact shapes the runtimes make are taken (64 hex digits for a container
//! id, a 36-character UUID for a pod, decimal job ids), everything else is left unknown.

use serde::Serialize;

/// A container and the runtime whose cgroup naming says so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Container {
    /// `docker`, `containerd`, `crio` or `podman`.
    pub runtime: &'static str,
    /// The 64-hex-digit container id.
    pub id: String,
}

/// A Slurm job step (`job_<id>/step_<step>` of slurmstepd's cgroups).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlurmJob {
    /// The job id.
    pub job: u64,
    /// The step (`0`, `batch`, `extern`, `interactive`), if the path names one.
    pub step: Option<String>,
}

/// What a cgroup path says about its processes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Attribution {
    /// The innermost systemd unit (`nginx.service`, `session-3.scope`).
    pub unit: Option<String>,
    /// The container.
    pub container: Option<Container>,
    /// The Kubernetes pod UID (dashes restored where systemd's driver turned them into `_`).
    pub pod_uid: Option<String>,
    /// The Slurm job.
    pub slurm: Option<SlurmJob>,
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn is_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// A container id in one path component: `docker-<id>.scope`, `cri-containerd-<id>.scope`,
/// `crio-<id>.scope`, `libpod-<id>.scope` (systemd driver) or a bare `<id>` (cgroupfs
/// driver, whose runtime the parent components tell).
fn container_in(c: &str, parents: &[&str]) -> Option<Container> {
    for (prefix, runtime) in [
        ("docker-", "docker"),
        ("cri-containerd-", "containerd"),
        ("crio-", "crio"),
        ("libpod-", "podman"),
    ] {
        if let Some(id) = c
            .strip_prefix(prefix)
            .map(|r| r.strip_suffix(".scope").unwrap_or(r))
            && is_hex64(id)
        {
            return Some(Container {
                runtime,
                id: id.to_string(),
            });
        }
    }
    if is_hex64(c) {
        let runtime = if parents.contains(&"docker") {
            "docker"
        } else if parents.iter().any(|p| p.starts_with("kubepods")) {
            "containerd"
        } else {
            return None;
        };
        return Some(Container {
            runtime,
            id: c.to_string(),
        });
    }
    None
}

/// The pod UID in one component: `pod<uid>` (cgroupfs) or
/// `kubepods-<qos>-pod<uid with _>.slice` (systemd).
fn pod_in(c: &str) -> Option<String> {
    let rest = c.strip_suffix(".slice").unwrap_or(c);
    let at = rest.rfind("pod")?;
    let uid = rest[at + 3..].replace('_', "-");
    is_uuid(&uid).then_some(uid)
}

/// Reads a cgroup v2 path (`/system.slice/docker-<id>.scope`).
pub fn from_cgroup_path(path: &str) -> Attribution {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let mut a = Attribution::default();
    for (i, c) in parts.iter().enumerate() {
        let parents = &parts[..i];
        // `.slice` is a grouping, not the unit that runs the process.
        if [".service", ".scope", ".socket", ".mount"]
            .iter()
            .any(|s| c.ends_with(s))
            && c.bytes().all(|b| b.is_ascii_graphic())
        {
            a.unit = Some((*c).to_string());
        }
        if let Some(ct) = container_in(c, parents) {
            a.container = Some(ct);
        }
        if c.contains("pod")
            && let Some(uid) = pod_in(c)
        {
            a.pod_uid = Some(uid);
        }
        if let Some(job) = c.strip_prefix("job_").and_then(|j| j.parse::<u64>().ok()) {
            let step = parts
                .get(i + 1)
                .and_then(|s| s.strip_prefix("step_"))
                .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric()))
                .map(str::to_string);
            a.slurm = Some(SlurmJob { job, step });
        }
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f4e9b0c1d2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4";

    #[test]
    fn systemd_units_and_sessions() {
        let a = from_cgroup_path("/system.slice/nginx.service");
        assert_eq!(a.unit.as_deref(), Some("nginx.service"));
        assert_eq!(a.container, None);
        let a = from_cgroup_path("/user.slice/user-1000.slice/session-3.scope");
        assert_eq!(a.unit.as_deref(), Some("session-3.scope"));
        assert_eq!(from_cgroup_path("/"), Attribution::default());
    }

    #[test]
    fn containers_of_each_runtime_and_driver() {
        let a = from_cgroup_path(&format!("/system.slice/docker-{ID}.scope"));
        assert_eq!(
            a.container,
            Some(Container {
                runtime: "docker",
                id: ID.into()
            })
        );
        assert_eq!(
            from_cgroup_path(&format!("/docker/{ID}")).container,
            Some(Container {
                runtime: "docker",
                id: ID.into()
            })
        );
        let k8s = format!(
            "/kubepods.slice/kubepods-burstable.slice/\
             kubepods-burstable-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/cri-containerd-{ID}.scope"
        );
        let a = from_cgroup_path(&k8s);
        assert_eq!(
            a.pod_uid.as_deref(),
            Some("1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901")
        );
        assert_eq!(
            a.container,
            Some(Container {
                runtime: "containerd",
                id: ID.into()
            })
        );
        let a = from_cgroup_path(&format!(
            "/kubepods/besteffort/pod1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901/{ID}"
        ));
        assert_eq!(
            a.pod_uid.as_deref(),
            Some("1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901")
        );
        assert_eq!(a.container.map(|c| c.runtime), Some("containerd"));
        let a = from_cgroup_path(&format!("/machine.slice/libpod-{ID}.scope/container"));
        assert_eq!(a.container.map(|c| c.runtime), Some("podman"));
        assert_eq!(
            from_cgroup_path(&format!("/crio-{ID}.scope"))
                .container
                .map(|c| c.runtime),
            Some("crio")
        );
    }

    #[test]
    fn slurm_jobs_and_steps() {
        let a = from_cgroup_path("/system.slice/slurmstepd.scope/job_4242/step_0/user/task_1");
        assert_eq!(
            a.slurm,
            Some(SlurmJob {
                job: 4242,
                step: Some("0".into())
            })
        );
        let a = from_cgroup_path("/system.slice/slurmstepd.scope/job_7/step_batch");
        assert_eq!(
            a.slurm,
            Some(SlurmJob {
                job: 7,
                step: Some("batch".into())
            })
        );
        assert_eq!(
            from_cgroup_path("/slurm/uid_1000/job_9").slurm,
            Some(SlurmJob { job: 9, step: None })
        );
    }

    #[test]
    fn hostile_names_are_not_taken() {
        // A delegated user names its own directories: nothing of the wrong shape counts.
        let a =
            from_cgroup_path("/user.slice/docker-notahexid.scope/job_x/pod123/\u{1b}[31m.service");
        assert_eq!(a.container, None);
        assert_eq!(a.slurm, None);
        assert_eq!(a.pod_uid, None);
        // The innermost unit-shaped name without control bytes: the escape one is skipped.
        assert_eq!(a.unit.as_deref(), Some("docker-notahexid.scope"));
        assert_eq!(
            from_cgroup_path(&format!("/{ID}")).container,
            None,
            "a bare id needs its runtime's parent"
        );
        assert_eq!(
            from_cgroup_path("/job_1/step_a;b").slurm,
            Some(SlurmJob { job: 1, step: None })
        );
    }
}
