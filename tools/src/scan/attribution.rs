//! Who a process works for, read from its cgroup v2 path (the `0::` line of
//! `/proc/<pid>/cgroup`): the systemd unit, a container (docker, containerd/CRI-O under
//! Kubernetes, podman), the Kubernetes pod UID and the Slurm job and step, for "who uses GPU
//! memory" per job rather than per pid.
//!
//! The path is hostile text (a user with a delegated cgroup names its directories), so two
//! rules hold. Only components of the exact shapes the runtimes make are taken (64 hex
//! digits for a container id, a 36-character UUID for a pod, decimal job ids). And a
//! runtime's label is given only where the component sits at its place under that
//! runtime's real parent, a cgroup only root (or the runtime) can create, counted from the
//! root of the hierarchy:
//!
//! | label | where (components from the root) | made by |
//! |---|---|---|
//! | Slurm job, step | `system.slice/slurmstepd.scope/job_<N>/step_<S>` (or `<node>_slurmstepd.scope`) | slurmd's cgroup/v2 plugin (22.05+; the node-named scope with `-N`/multiple slurmd) |
//! | Slurm job, step | `slurm/uid_<U>/job_<N>/step_<S>` (or `slurm_<node>/...`) | the cgroup/v1 plugin's layout |
//! | pod | `kubepods[.slice]/[<qos>/]pod<uid>` | kubelet (cgroupfs driver: `kubepods/burstable/pod<uid>`; systemd: `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice`; guaranteed pods without the QoS level) |
//! | container (`containerd`, `crio`, `docker`) | the component right under a pod: `cri-containerd-<id>.scope`, `crio-<id>[.scope]`, `docker-<id>.scope`, a bare `<id>` (containerd with cgroupfs) | the CRI runtime |
//! | container (`docker`) | `system.slice/docker-<id>.scope`, `docker/<id>` | dockerd (systemd, cgroupfs driver) |
//! | container (`podman`) | `machine.slice/libpod-<id>.scope`, `libpod_parent/libpod-<id>` | rootful podman (systemd, cgroupfs) |
//! | container (`podman`) | `user.slice/user-<U>.slice/user@<U>.service/user.slice/libpod-<id>.scope` | rootless podman: inside user U's own delegated tree, so U could forge it, and only there |
//!
//! A container's own sub-cgroups (`libpod-<id>.scope/container`, a systemd inside) are that
//! container's. Anything else (a user's `mkdir .../job_4242/step_0` in a delegated
//! session cgroup, a `docker-<id>.scope` under `user.slice`, a path seen from inside a
//! cgroup namespace) gets no runtime label; the `unit` is the innermost unit-shaped name
//! wherever it is.

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

/// A container id in one component named `<prefix><id><suffix>`, the suffix optional when
/// `suffix_optional`.
fn id_in(c: &str, prefix: &str, suffix: &str, suffix_optional: bool) -> Option<String> {
    let r = c.strip_prefix(prefix)?;
    let id = match r.strip_suffix(suffix) {
        Some(id) => id,
        None if suffix_optional => r,
        None => return None,
    };
    is_hex64(id).then(|| id.to_string())
}

fn container(runtime: &'static str, id: Option<String>) -> Option<Container> {
    id.map(|id| Container { runtime, id })
}

/// A container right under a Kubernetes pod's cgroup.
fn pod_container(c: &str) -> Option<Container> {
    container("containerd", id_in(c, "cri-containerd-", ".scope", false))
        .or_else(|| container("crio", id_in(c, "crio-", ".scope", true)))
        .or_else(|| container("docker", id_in(c, "docker-", ".scope", false)))
        // The cgroupfs driver names the container by its id alone (containerd).
        .or_else(|| container("containerd", is_hex64(c).then(|| c.to_string())))
}

/// A pod UID from `pod<uid>` (cgroupfs) or `kubepods[-<qos>]-pod<uid with _>.slice`
/// (systemd), `qos` being the QoS level the parent named (`None`: guaranteed).
fn pod_in(c: &str, systemd: bool, qos: Option<&str>) -> Option<String> {
    let uid = if systemd {
        let prefix = match qos {
            Some(q) => format!("kubepods-{q}-pod"),
            None => "kubepods-pod".to_string(),
        };
        c.strip_prefix(&prefix)?
            .strip_suffix(".slice")?
            .replace('_', "-")
    } else {
        c.strip_prefix("pod")?.to_string()
    };
    is_uuid(&uid).then_some(uid)
}

/// The QoS level a component names under `kubepods` (`burstable`, `besteffort`).
fn qos_in(c: &str, systemd: bool) -> Option<&str> {
    let q = if systemd {
        c.strip_prefix("kubepods-")?.strip_suffix(".slice")?
    } else {
        c
    };
    ["burstable", "besteffort"].into_iter().find(|k| *k == q)
}

/// The pod and its container, when `parts` is under kubelet's `kubepods`.
fn kubernetes(parts: &[&str]) -> (Option<String>, Option<Container>) {
    let systemd = match parts.first() {
        Some(&"kubepods") => false,
        Some(&"kubepods.slice") => true,
        _ => return (None, None),
    };
    // Guaranteed pods sit right under kubepods; the others under their QoS level.
    let (at, qos) = match parts.get(1).and_then(|c| qos_in(c, systemd)) {
        Some(q) => (2, Some(q)),
        None => (1, None),
    };
    let Some(uid) = parts.get(at).and_then(|c| pod_in(c, systemd, qos)) else {
        return (None, None);
    };
    (Some(uid), parts.get(at + 1).and_then(|c| pod_container(c)))
}

/// A container outside Kubernetes, at its runtime's place.
fn standalone_container(parts: &[&str]) -> Option<Container> {
    match parts {
        ["system.slice", c, ..] => container("docker", id_in(c, "docker-", ".scope", false)),
        ["docker", c, ..] => container("docker", is_hex64(c).then(|| c.to_string())),
        ["machine.slice", c, ..] => container("podman", id_in(c, "libpod-", ".scope", false)),
        ["libpod_parent", c, ..] => container("podman", id_in(c, "libpod-", "", false)),
        ["user.slice", user, manager, "user.slice", c, ..]
            if user
                .strip_prefix("user-")
                .and_then(|u| u.strip_suffix(".slice"))
                .is_some_and(|uid| {
                    !uid.is_empty()
                        && uid.bytes().all(|b| b.is_ascii_digit())
                        && *manager == format!("user@{uid}.service")
                }) =>
        {
            container("podman", id_in(c, "libpod-", ".scope", false))
        }
        _ => None,
    }
}

/// The Slurm job step, when `parts` is under slurmstepd's cgroup.
fn slurm(parts: &[&str]) -> Option<SlurmJob> {
    let rest = match parts {
        ["system.slice", scope, rest @ ..]
            if *scope == "slurmstepd.scope"
                || scope
                    .strip_suffix("_slurmstepd.scope")
                    .is_some_and(|node| !node.is_empty()) =>
        {
            rest
        }
        [root, uid, rest @ ..]
            if (*root == "slurm" || root.strip_prefix("slurm_").is_some_and(|n| !n.is_empty()))
                && uid
                    .strip_prefix("uid_")
                    .is_some_and(|u| u.parse::<u32>().is_ok()) =>
        {
            rest
        }
        _ => return None,
    };
    let job = rest.first()?.strip_prefix("job_")?.parse::<u64>().ok()?;
    let step = rest
        .get(1)
        .and_then(|s| s.strip_prefix("step_"))
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric()))
        .map(str::to_string);
    Some(SlurmJob { job, step })
}

/// Reads a cgroup v2 path (`/system.slice/docker-<id>.scope`).
pub fn from_cgroup_path(path: &str) -> Attribution {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    // `.slice` is a grouping, not the unit that runs the process.
    let unit = parts
        .iter()
        .rev()
        .find(|c| {
            [".service", ".scope", ".socket", ".mount"]
                .iter()
                .any(|s| c.ends_with(s))
                && c.bytes().all(|b| b.is_ascii_graphic())
        })
        .map(|c| (*c).to_string());
    let (pod_uid, in_pod) = kubernetes(&parts);
    Attribution {
        unit,
        container: in_pod.or_else(|| standalone_container(&parts)),
        pod_uid,
        slurm: slurm(&parts),
    }
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
        // (path, pod UID, runtime) for the other layouts.
        const POD: &str = "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901";
        for (path, pod, runtime) in [
            (
                format!(
                    "/kubepods.slice/kubepods-besteffort.slice/\
                     kubepods-besteffort-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/crio-{ID}.scope"
                ),
                Some(POD),
                "crio",
            ),
            // Guaranteed pods: no QoS level.
            (
                format!(
                    "/kubepods.slice/kubepods-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/\
                     cri-containerd-{ID}.scope"
                ),
                Some(POD),
                "containerd",
            ),
            (format!("/kubepods/pod{POD}/crio-{ID}"), Some(POD), "crio"),
            (format!("/libpod_parent/libpod-{ID}"), None, "podman"),
            // Rootless podman, in its user's manager.
            (
                format!(
                    "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope"
                ),
                None,
                "podman",
            ),
        ] {
            let a = from_cgroup_path(&path);
            assert_eq!(a.pod_uid.as_deref(), pod, "{path}");
            assert_eq!(a.container.map(|c| c.runtime), Some(runtime), "{path}");
        }
    }

    #[test]
    fn runtime_names_away_from_their_parents_get_no_label() {
        // A user's delegated tree (user@1000.service) can hold any name it likes.
        let user = "/user.slice/user-1000.slice/user@1000.service/app.slice";
        let none = |p: &str| {
            let a = from_cgroup_path(p);
            assert_eq!(
                (&a.container, &a.pod_uid, &a.slurm),
                (&None, &None, &None),
                "{p}"
            );
        };
        none(&format!("{user}/job_4242/step_0"));
        none(&format!("{user}/slurmstepd.scope/job_4242/step_0"));
        none(&format!(
            "{user}/system.slice/slurmstepd.scope/job_4242/step_0"
        ));
        none(&format!("{user}/slurm/uid_0/job_1"));
        none("/job_4242/step_0");
        none("/system.slice/job_4242/step_0");
        none("/system.slice/slurmstepd.scope/x/job_4242/step_0");
        none("/system.slice/evil_slurmstepd.scope.d/job_1");
        none("/slurm/job_9");
        none(&format!("{user}/docker-{ID}.scope"));
        none(&format!("{user}/docker/{ID}"));
        none(&format!("/user.slice/docker-{ID}.scope"));
        none(&format!(
            "{user}/kubepods/pod1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901/{ID}"
        ));
        none(&format!("/crio-{ID}.scope"));
        none(&format!("/system.slice/cri-containerd-{ID}.scope"));
        none(&format!("/machine.slice/x/libpod-{ID}.scope"));
        // Rootless podman's place belongs to the user whose manager it is.
        none(&format!(
            "/user.slice/user-1000.slice/user@1001.service/user.slice/libpod-{ID}.scope"
        ));
        // A pod whose QoS level does not match its name, a pod one level too deep.
        none(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-besteffort-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice",
        );
        none("/kubepods/burstable/x/pod1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901");
        // The unit is still named, wherever it is.
        assert_eq!(
            from_cgroup_path(&format!("{user}/job_4242/step_0/x.scope"))
                .unit
                .as_deref(),
            Some("x.scope")
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
        // slurmd -N (and multiple-slurmd builds) name the scope after the node.
        assert_eq!(
            from_cgroup_path("/system.slice/node1_slurmstepd.scope/job_5/step_extern").slurm,
            Some(SlurmJob {
                job: 5,
                step: Some("extern".into())
            })
        );
        // A job's own sub-cgroups named like another job do not relabel it.
        assert_eq!(
            from_cgroup_path("/system.slice/slurmstepd.scope/job_7/step_0/user/job_4242/step_1")
                .slurm,
            Some(SlurmJob {
                job: 7,
                step: Some("0".into())
            })
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
            from_cgroup_path("/system.slice/slurmstepd.scope/job_1/step_a;b").slurm,
            Some(SlurmJob { job: 1, step: None })
        );
    }
}
