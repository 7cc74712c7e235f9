use super::*;

/// The warning of a module that would not load is one line naming the command, its
/// status and what it printed (escaped).
#[test]
fn the_uvm_warning_is_one_line_naming_the_modprobe_result() {
    let w = RunWarning::UvmNotLoaded(super::super::uvm::UvmError::Failed {
        command: "/sbin/modprobe nvidia-uvm".into(),
        code: 1,
        stderr: "modprobe: FATAL: Module nvidia-uvm not found\n\x1b[2J".into(),
    });
    let text = w.to_string();
    assert!(!text.contains('\n') && !text.contains('\x1b'), "{text}");
    assert!(
        text.starts_with(
            "nvidia-uvm is not loaded (/sbin/modprobe nvidia-uvm exited with status 1: \
             modprobe: FATAL: Module nvidia-uvm not found"
        ),
        "{text}"
    );
}
use crate::gpu::{Node, order};

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
        vendor_nodes: Vec::new(),
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
}

#[test]
fn the_effective_list_must_keep_every_ancestor() {
    assert_eq!(effective_ok(&[3, 4], &[3, 4, 9], 9), Ok(()));
    assert_eq!(effective_ok(&[], &[9], 9), Ok(()));
    // An ALLOW_OVERRIDE ancestor (4) yielded to ours.
    let e = effective_ok(&[3, 4], &[3, 9], 9).unwrap_err();
    assert_eq!(e, EffectiveError::AncestorLost(vec![4]));
    assert!(e.to_string().contains("(id 4) stops applying"), "{e}");
    assert_eq!(
        effective_ok(&[3], &[3], 9),
        Err(EffectiveError::OursMissing(9)),
        "ours must apply"
    );
}

#[test]
fn nvidia_majors_come_from_proc_devices() {
    let text = "Character devices:\n  1 mem\n195 nvidia-frontend\n226 drm\n\
                236 nvidia-caps\n510 nvidia-uvm\n\nBlock devices:\n  8 sd\n\
                259 nvidia-fake-block\n";
    assert_eq!(nvidia_majors(text), [195, 236, 510]);
    assert_eq!(nvidia_majors(""), [195]);
}

#[test]
fn inherited_gpu_nodes_are_refused() {
    // fd 0 of a test is never a GPU node; a closed fd is refused.
    assert!(check_inherited(&[0], &[], &GPU_MAJORS).is_ok());
    assert!(check_inherited(&[999_999], &[], &GPU_MAJORS).is_err());
    let f = std::fs::File::open("/dev/null").unwrap();
    use std::os::fd::AsRawFd;
    assert!(
        check_inherited(&[f.as_raw_fd()], &[], &GPU_MAJORS).is_ok(),
        "1:3 is no GPU"
    );
}

#[test]
fn programs_are_found_as_execvp_would() {
    use std::ffi::OsStr;
    assert_eq!(
        find_program(OsStr::new("./x"), None),
        Some(PathBuf::from("./x"))
    );
    assert_eq!(
        find_program(OsStr::new("sh"), Some(OsStr::new("relative:/bin"))),
        Some(PathBuf::from("/bin/sh"))
    );
    assert_eq!(
        find_program(OsStr::new("no-such-program-here"), Some(OsStr::new("/bin"))),
        None
    );
}

#[test]
fn through_sudo_a_job_may_limit_itself_but_not_protect_its_memory() {
    use crate::dmem::{Knob, LimitRequest};
    for knob in [Knob::Low, Knob::Min] {
        let req = RunRequest {
            gpus: vec!["vkms".parse().unwrap()],
            argv: vec!["true".into()],
            mem: vec![LimitRequest::parse(knob, "1G").unwrap()],
            caller: Some(Caller {
                uid: 0,
                sudo: Some((1000, 1000)),
            }),
            ..Default::default()
        };
        let e = run(&req, &mut std::io::sink()).unwrap_err();
        assert!(
            matches!(&e, RunError::Usage(m) if m.starts_with(&format!("{} is for root callers", knob.flag()))),
            "{e}"
        );
    }
}

/// The error pipe carries the job's marks beside a failure: the reader hands on every mark
/// before the failure, in order, and stops at the failure; at EOF (the exec) it returns none.
#[test]
fn the_error_pipe_reads_marks_then_the_failure_or_eof() {
    use super::super::job::{mark, read_report, record};
    let (r, w) = rustix::pipe::pipe().unwrap();
    record(&w, mark::INIT, 0);
    record(&w, mark::GO, 0);
    record(&w, 3, libc::EACCES);
    record(&w, mark::MOUNTS, 0);
    let mut seen = Vec::new();
    let failed = read_report(&r, &mut |m, ns| seen.push((m, ns)));
    assert_eq!(failed, Some((3, rustix::io::Errno::ACCESS)));
    let marks: Vec<u32> = seen.iter().map(|s| s.0).collect();
    assert_eq!(marks, vec![mark::INIT, mark::GO]);
    assert!(seen[0].1 > 0 && seen[0].1 <= seen[1].1, "{seen:?}");

    let (r, w) = rustix::pipe::pipe().unwrap();
    record(&w, mark::EXEC, 0);
    drop(w);
    let mut times = StartTimes::on();
    let failed = read_report(&r, &mut |m, ns| {
        times.set(Mark::of_child(m).unwrap(), ns);
    });
    assert_eq!(failed, None);
    assert!(times.at(Mark::ExecCalled).is_some());
    assert_eq!(times.at(Mark::Go), None);
}
