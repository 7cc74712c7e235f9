//! The shared-server story of issue 26, as root over the guest's GPUs with drmtool's real
//! command line: `cgroup deny-gpus` on a user.slice, users alice and bob (made in the guest,
//! with Debian's sudo and the sudoers line tools/README.md documents) who open no GPU in
//! their sessions, `sudo drmtool run --pick 1` jobs that run as them with one GPU each, a
//! third that finds none (exit 5), `leases` naming both users.

#[macro_use]
mod isolation_common;
use isolation_common::*;

mod schema_common;
use drmtool::isolate::lease;
use kernel_tests::{skip, which};
use schema_common::validate;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Users alice and bob (group gpu) in the guest: passwd, group and shadow copies bound over
/// the read-only host's, and a sudoers drop-in with the line tools/README.md documents,
/// naming drmtool-guest. Done once per boot.
fn shared_server_users() -> Result<(), String> {
    let done = Path::new("/run/drmtool-test-users");
    if done.exists() {
        return Ok(());
    }
    let stage = Path::new("/run/drmtool-test-etc");
    std::fs::create_dir_all(stage.join("sudoers.d")).map_err(|e| e.to_string())?;
    let add = |file: &str, lines: &str| -> Result<(), String> {
        let mut text = std::fs::read_to_string(format!("/etc/{file}")).unwrap_or_default();
        text.push_str(lines);
        let p = stage.join(file);
        std::fs::write(&p, text).map_err(|e| format!("{file}: {e}"))?;
        use std::os::unix::fs::PermissionsExt;
        let mode = if file == "shadow" { 0o640 } else { 0o644 };
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))
            .map_err(|e| e.to_string())?;
        rustix::mount::mount_bind(&p, Path::new("/etc").join(file))
            .map_err(|e| format!("bind {file}: {e}"))
    };
    add(
        "passwd",
        "alice:x:2001:2001:alice:/tmp:/bin/sh\nbob:x:2002:2002:bob:/tmp:/bin/sh\n",
    )?;
    add(
        "group",
        "alice:x:2001:\nbob:x:2002:\ngpu:x:2000:alice,bob\n",
    )?;
    add(
        "shadow",
        "alice:*:19000:0:99999:7:::\nbob:*:19000:0:99999:7:::\n",
    )?;
    let rule = stage.join("sudoers.d/drmtool");
    // The sudoers line tools/README.md gives, for this binary.
    std::fs::write(
        &rule,
        format!(
            "%gpu ALL=(root) NOPASSWD: {} run *\n",
            runnable_copy(Path::new(DRMTOOL)).display()
        ),
    )
    .map_err(|e| e.to_string())?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&rule, std::fs::Permissions::from_mode(0o440))
        .map_err(|e| e.to_string())?;
    rustix::mount::mount_bind(stage.join("sudoers.d"), "/etc/sudoers.d")
        .map_err(|e| format!("bind sudoers.d: {e}"))?;
    std::fs::write(done, "").map_err(|e| e.to_string())
}

/// A shell command as `user` in the cgroup `cg` (moved there first, as a login session is),
/// with the user's groups.
fn session(cg: &Path, user: &str, script: &str) -> Command {
    let mut c = Command::new("sh");
    c.args([
        "-c",
        &format!(
            "echo $$ > {}/cgroup.procs && exec setpriv --reuid={user} --regid={user} --init-groups \
             --inh-caps=-all env -i PATH=/usr/bin:/bin HOME=/tmp USER={user} sh -c \"$0\"",
            cg.display()
        ),
        script,
    ])
    .env_remove("KERNEL_TESTS_SIGNAL_STORM")
    .stdin(Stdio::null());
    c
}

/// The shared server, end to end: see the module docs.
#[test]
fn a_shared_server_gives_gpus_only_through_jobs() {
    let gpus = guest_gpus!();
    let Some(_sudo) = which("sudo") else {
        skip!("no sudo on the host root (scripts/setup installs it)");
    };
    shared_server_users().unwrap();
    assert_eq!(runnable_copy(Path::new(DRMTOOL)), Path::new(SUDO_DRMTOOL));
    let (vkms, vgem) = (gpu_of(&gpus, "vkms"), gpu_of(&gpus, "vgem"));
    // Nodes every user may open, as udev's uaccess/0666 render nodes on a real server: the
    // device program alone stands between a session and a GPU.
    use std::os::unix::fs::PermissionsExt;
    let nodes: Vec<PathBuf> = gpus
        .iter()
        .flat_map(|g| g.nodes.iter().map(|n| n.path.clone()))
        .collect();
    let modes: Vec<u32> = nodes
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().permissions().mode())
        .collect();
    for p in &nodes {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o666)).unwrap();
    }
    let slice = Path::new("/sys/fs/cgroup/user.slice");
    let _ = std::fs::create_dir(slice);
    let (code, out, err) = run_out(&mut drmtool(&["cgroup", "deny-gpus", "user.slice"]));
    assert_eq!(code, 0, "{out}{err}");
    let (code, text, _) = run_out(&mut drmtool(&["cgroup", "devices", "user.slice"]));
    assert_eq!(code, 0);
    assert!(
        text.contains("deny c 226:* rwm") && text.contains("deny c 261:* rwm"),
        "{text}"
    );
    let dir = scratch("story");
    let result = std::panic::catch_unwind(|| {
        // In their sessions, alice and bob open no GPU node.
        let list: Vec<String> = nodes.iter().map(|p| p.display().to_string()).collect();
        let probe = format!(
            "for n in {}; do if (exec 3<>$n) 2>/dev/null; then echo \"$n opened\"; fi; done; echo done",
            list.join(" ")
        );
        for u in ["alice", "bob"] {
            let o = session(slice, u, &probe).output().unwrap();
            let s = String::from_utf8_lossy(&o.stdout);
            assert_eq!(s.trim(), "done", "{u} opened a GPU outside a job: {s}");
        }
        // Each starts a job through sudo: it runs as them, with one GPU, opened.
        let job = |u: &str| {
            format!(
                "id -u > {d}/{u}.uid; ls /dev/dri > {d}/{u}.dri; for n in /dev/dri/card* /dev/dri/renderD*; do \
                 [ -e $n ] || continue; if (exec 3<>$n) 2>/dev/null; then echo $n >> {d}/{u}.opened; fi; done; \
                 trap 'echo term > {d}/{u}.term; exit 0' TERM; touch {d}/{u}.ready; while :; do sleep 0.05; done",
                d = dir.display()
            )
        };
        let start = |u: &str| {
            let file = dir.join(format!("{u}.sh"));
            std::fs::write(&file, job(u)).unwrap();
            let script = format!(
                "exec sudo -n {SUDO_DRMTOOL} run --pick 1 --gpu vkms,vgem -- sh {}",
                file.display()
            );
            session(slice, u, &script)
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let mut alice = start("alice");
        assert!(
            until(60, || dir.join("alice.ready").exists()),
            "alice's job never started: {:?}",
            {
                let _ = alice.kill();
                alice
                    .wait_with_output()
                    .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
            }
        );
        let mut bob = start("bob");
        assert!(
            until(60, || dir.join("bob.ready").exists()),
            "bob's job never started"
        );
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
        assert_eq!(read("alice.uid").trim(), "2001");
        assert_eq!(read("bob.uid").trim(), "2002");
        let (a_dri, b_dri) = (read("alice.dri"), read("bob.dri"));
        assert!(!read("alice.opened").is_empty() && !read("bob.opened").is_empty());
        let count = |s: &str| s.lines().filter(|l| l.starts_with("card")).count();
        assert_eq!(
            (count(&a_dri), count(&b_dri)),
            (1, 1),
            "one GPU each: {a_dri} / {b_dri}"
        );
        assert_ne!(a_dri, b_dri, "two GPUs");
        // A third job finds none: exit 5.
        let o = session(
            slice,
            "alice",
            &format!("exec sudo -n {SUDO_DRMTOOL} run --pick 1 --gpu vkms,vgem -- true"),
        )
        .output()
        .unwrap();
        assert_eq!(
            o.status.code(),
            Some(5),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        // Through sudo, --user and --as-root are refused.
        let o = session(
            slice,
            "alice",
            &format!("exec sudo -n {SUDO_DRMTOOL} run --as-root --gpu vgem -- true"),
        )
        .output()
        .unwrap();
        assert_eq!(
            o.status.code(),
            Some(2),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(String::from_utf8_lossy(&o.stderr).contains("--user and --as-root are refused"));
        // leases: both users.
        let (_, out, _) = run_out(&mut drmtool(&["leases", "--json"]));
        let v: Value = serde_json::from_str(&out).unwrap();
        let holders: Vec<(String, i64)> = v["leases"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["device"] == lease::key(vkms) || l["device"] == lease::key(vgem))
            .map(|l| {
                (
                    l["user"].as_str().unwrap_or("-").to_string(),
                    l["pid"].as_i64().unwrap(),
                )
            })
            .collect();
        let mut users: Vec<&str> = holders.iter().map(|(u, _)| u.as_str()).collect();
        users.sort();
        assert_eq!(users, ["alice", "bob"], "{v}");
        let pid_of = |u: &str| holders.iter().find(|(x, _)| x == u).unwrap().1;
        // SIGTERM to alice's supervisor reaches her job; SIGKILL to bob's ends his.
        signal(pid_of("alice"), rustix::process::Signal::TERM);
        let st = alice.wait().unwrap();
        assert!(
            dir.join("alice.term").exists(),
            "SIGTERM did not reach alice's job"
        );
        assert_eq!(st.code(), Some(0));
        signal(pid_of("bob"), rustix::process::Signal::KILL);
        let _ = bob.wait();
        assert!(
            until(30, || {
                let (_, out, _) = run_out(&mut drmtool(&["leases", "--json"]));
                !out.contains("\"bob\"")
            }),
            "bob's lease stayed"
        );
        assert!(!dir.join("bob.term").exists(), "SIGKILL gives no chance");
    });
    let (code, out, err) = run_out(&mut drmtool(&[
        "cgroup",
        "allow-gpus",
        "user.slice",
        "--json",
    ]));
    let _ = std::fs::remove_dir(slice.join("session-1.scope"));
    let (_, shown, _) = run_out(&mut drmtool(&[
        "cgroup",
        "show-gpus",
        "user.slice",
        "--json",
    ]));
    for (p, m) in nodes.iter().zip(modes) {
        let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
    }
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    assert_eq!(code, 0, "{err}");
    let undone: Value = serde_json::from_str(&out).unwrap();
    validate(
        &undone,
        "cgroup-deny.schema.json",
        "cgroup allow-gpus --json",
    );
    assert_eq!(
        undone["detached"].as_array().map(Vec::len),
        Some(1),
        "{undone}"
    );
    let shown: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown["denied"], false, "{shown}");
}
