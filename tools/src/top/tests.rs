//! The model's rates, history and missing sources on synthetic scans, and the view's
//! groups, filters and sorts.

use super::view::{Column, Filter, GroupBy, Sort, rows};
use super::*;
use crate::fdinfo;
use crate::scan::{DmaBufFd, FdRef, ProcessReport, Sharing, Source, client_report};
use crate::untrusted::Untrusted;

/// A client of device 0 on `/dev/dri/card0` held by `pid` (fd 3), from fdinfo `text`.
fn client(pid: u32, text: &str) -> ClientReport {
    let info = fdinfo::parse_drm(&format!("drm-driver:\tx\n{text}"));
    client_report(
        0,
        0,
        "/dev/dri/card0",
        FdRef { pid, fd: 3 },
        Some(info),
        "t",
    )
}

fn process(pid: u32, comm: &[u8], cgroup: &str) -> ProcessReport {
    ProcessReport {
        pid,
        ns_pids: Some(vec![pid, pid + 1000]),
        comm: Some(Untrusted::new(comm)),
        uid: Some(1000),
        cgroup: Some(Untrusted::new(cgroup.as_bytes())),
        attribution: Some(crate::scan::attribution::from_cgroup_path(cgroup)),
        drm_fds: Vec::new(),
        dmabuf_fds: Vec::new(),
        drm_mappings: Vec::new(),
        dmabuf_mappings: Vec::new(),
        mapped_gem_shmem: Figure::unknown("t"),
        mapped_drm: Figure::unknown("t"),
        dmabuf_bytes: Figure::unknown("t"),
        memory_total: Figure::unknown("t"),
        malformed_maps: Vec::new(),
    }
}

fn report(clients: Vec<ClientReport>, procs: Vec<ProcessReport>) -> Report {
    let mut r = Report::empty();
    r.devices.push(crate::scan::DeviceReport {
        index: 0,
        sysfs: "/sys/devices/platform/vkms".into(),
        driver: Some("vkms".into()),
        nodes: Vec::new(),
        clients: clients.len(),
        debugfs_clients: Figure::unknown("t"),
        memory_total: Figure::known(8192, Source::Fdinfo),
        memory_shared: Figure::unknown("t"),
        mapped: Figure::unknown("t"),
        framebuffer_bytes: Figure::unknown("t"),
        named_bytes: Figure::unknown("t"),
        framebuffers: Vec::new(),
        debugfs_client_rows: Vec::new(),
        debugfs: crate::scan::Access {
            readable: false,
            why: None,
        },
    });
    r.clients = clients;
    r.processes = procs;
    r
}

fn at(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

#[test]
fn busy_is_a_rate_over_capacity_or_cycles_and_needs_two_scans() {
    let mut m = Model::new();
    let first = m.update(Sample::of(
        report(
            vec![client(
                7,
                "drm-client-id:\t5\ndrm-engine-gfx:\t1000000000 ns\ndrm-engine-capacity-gfx:\t2\n\
                 drm-cycles-comp:\t100\ndrm-total-cycles-comp:\t1000\n",
            )],
            vec![process(7, b"app", "/user.slice")],
        ),
        at(0),
        0,
    ));
    assert!(first.clients[0].engines.is_empty());
    assert!(
        first.missing.iter().any(|m| m.contains("second scan")),
        "{:?}",
        first.missing
    );
    let second = m.update(Sample::of(
        report(
            vec![client(
                7,
                "drm-client-id:\t5\ndrm-engine-gfx:\t1500000000 ns\ndrm-engine-capacity-gfx:\t2\n\
                 drm-cycles-comp:\t400\ndrm-total-cycles-comp:\t2000\n",
            )],
            vec![process(7, b"app", "/user.slice")],
        ),
        at(1000),
        1000,
    ));
    let e = &second.clients[0].engines;
    // 0.5 s busy over 1 s on 2 engines; 300 of 1000 cycles.
    assert_eq!((e["gfx"], e["comp"]), (25.0, 30.0));
    assert_eq!(second.gpus[0].engines["comp"], 30.0);
    assert_eq!(second.gpus[0].busy_history, [None, Some(30.0)]);
    assert_eq!(second.interval_ms, Some(1000));
    assert!(
        second.missing.iter().all(|m| !m.contains("engine busy")),
        "{:?}",
        second.missing
    );
}

#[test]
fn a_counter_that_went_back_a_new_client_and_a_reused_pid_get_no_rate() {
    let mut m = Model::new();
    let c = |pid, comm: &[u8], id: Option<u64>, ns: u64| {
        let id = id.map_or(String::new(), |i| format!("drm-client-id:\t{i}\n"));
        report(
            vec![client(pid, &format!("{id}drm-engine-gfx:\t{ns} ns\n"))],
            vec![process(pid, comm, "/")],
        )
    };
    m.update(Sample::of(c(7, b"app", Some(5), 5_000_000), at(0), 0));
    // The counter went back: another client; no rate, not 0 and not negative.
    let f = m.update(Sample::of(c(7, b"app", Some(5), 10), at(1000), 0));
    assert!(
        f.clients[0].engines.is_empty(),
        "{:?}",
        f.clients[0].engines
    );
    // A client the previous scan did not have: no rate.
    let f = m.update(Sample::of(c(7, b"app", Some(6), 20), at(2000), 0));
    assert!(f.clients[0].engines.is_empty());
    // Without ids: the same holder and command is the same client...
    m.update(Sample::of(c(8, b"old", None, 0), at(3000), 0));
    let f = m.update(Sample::of(c(8, b"old", None, 100_000_000), at(4000), 0));
    assert_eq!(f.clients[0].engines["gfx"], 10.0);
    // ...and a reused pid with another command is not.
    let f = m.update(Sample::of(c(8, b"new", None, 900_000_000), at(5000), 0));
    assert!(f.clients[0].engines.is_empty());
}

#[test]
fn clients_come_and_go_and_history_is_bounded() {
    let mut m = Model::new();
    for i in 0..(HISTORY as u64 + 5) {
        let clients = if i % 2 == 0 {
            vec![client(7, "drm-client-id:\t1\ndrm-total-system:\t4096\n")]
        } else {
            Vec::new()
        };
        let f = m.update(Sample::of(
            report(clients, vec![process(7, b"a", "/")]),
            at(i * 1000),
            0,
        ));
        assert_eq!(f.clients.len(), usize::from(i % 2 == 0));
        assert!(f.gpus[0].memory_history.len() <= HISTORY);
    }
}

#[test]
fn hostile_names_reach_no_terminal_and_unknown_is_not_zero() {
    let mut m = Model::new();
    let mut p = process(7, b"\x1b[2Jevil\x07", "/evil\x1b]0;x\x07");
    p.dmabuf_fds = vec![
        DmaBufFd { fd: 4, inode: 99 },
        DmaBufFd { fd: 5, inode: 100 },
    ];
    let mut s = Sample::of(
        report(vec![client(7, "drm-client-id:\t1\n")], vec![p]),
        at(0),
        0,
    );
    s.cmdlines
        .insert(7, b"/bin/app\0--title\0\x1b[31mred\0".to_vec());
    s.report.sharing.push(Sharing {
        inode: 99,
        size: Some(4096),
        processes: vec![7, 8],
    });
    let f = m.update(s);
    let c = &f.clients[0];
    for text in [&c.comm, &c.cmdline, c.cgroup.as_ref().unwrap()] {
        assert!(!text.bytes().any(|b| b < 0x20 || b == 0x7f), "{text:?}");
    }
    assert!(c.cmdline.starts_with("/bin/app --title "), "{}", c.cmdline);
    assert_eq!((c.dmabufs, c.dmabufs_shared), (2, 1));
    assert_eq!(c.memory.value, None, "unknown, not zero");
    assert_eq!(c.memory.source, "");
    assert_eq!(c.ns_pids, [7, 1007]);
    assert!(
        f.missing.iter().any(|m| m.starts_with("client memory")),
        "{:?}",
        f.missing
    );
    assert_eq!(cmdline(&[b'x'; 2 * CMDLINE_MAX]).len(), CMDLINE_MAX);
}

#[test]
fn a_frame_survives_json_so_a_replay_shows_the_same() {
    let mut m = Model::new();
    let f = m.update(Sample::of(
        report(
            vec![client(
                7,
                "drm-client-id:\t1\ndrm-total-vram:\t8192\ndrm-resident-vram:\t4096\n",
            )],
            vec![process(
                7,
                b"a",
                "/system.slice/slurmstepd.scope/job_42/step_0",
            )],
        ),
        at(0),
        5,
    ));
    assert_eq!(f.clients[0].slurm_job.as_deref(), Some("42.0"));
    assert_eq!(f.clients[0].regions["vram"].resident, Some(4096));
    assert_eq!(f.gpus[0].regions["vram"].total, Some(8192));
    let text = serde_json::to_string(&f).unwrap();
    let back: Frame = serde_json::from_str(&text).unwrap();
    assert_eq!(back, f);
}

/// Three clients: two of one process in one cgroup, one of another user's.
fn three() -> Frame {
    let mut p9 = process(9, b"viewer", "/b");
    p9.uid = Some(0);
    let mut s = Sample::of(
        report(
            vec![
                client(7, "drm-client-id:\t1\ndrm-total-system:\t100\n"),
                client(7, "drm-client-id:\t2\ndrm-total-system:\t50\n"),
                client(9, "drm-client-id:\t3\n"),
            ],
            vec![process(7, b"render", "/a"), p9],
        ),
        at(0),
        0,
    );
    s.users.insert(1000, "alice".into());
    s.users.insert(0, "root".into());
    Model::new().update(s)
}

#[test]
fn groups_filters_and_sorts() {
    let f = three();
    let by_proc = rows(&f, GroupBy::Process, &Filter::default(), Sort::default());
    let got: Vec<(&str, Option<u64>, usize)> = by_proc
        .iter()
        .map(|r| (r.label.as_str(), r.memory, r.clients))
        .collect();
    assert_eq!(got, [("7", Some(150), 2), ("9", None, 1)]);
    assert_eq!(by_proc[0].own_pids, [1007]);
    let by_client = rows(&f, GroupBy::Client, &Filter::default(), Sort::default());
    assert_eq!(by_client.len(), 3);
    let by_user = rows(&f, GroupBy::User, &Filter::default(), Sort::default());
    assert_eq!(
        by_user.iter().map(|r| r.label.as_str()).collect::<Vec<_>>(),
        ["alice", "root"]
    );
    let only = |filter: Filter| rows(&f, GroupBy::Process, &filter, Sort::default()).len();
    assert_eq!(
        only(Filter {
            user: Some("root".into()),
            ..Filter::default()
        }),
        1
    );
    assert_eq!(
        only(Filter {
            user: Some("1000".into()),
            ..Filter::default()
        }),
        1
    );
    assert_eq!(
        only(Filter {
            text: Some("rend".into()),
            ..Filter::default()
        }),
        1
    );
    assert_eq!(
        only(Filter {
            hide_idle: true,
            ..Filter::default()
        }),
        1
    );
    assert_eq!(
        only(Filter {
            pids: Some(vec![9]),
            ..Filter::default()
        }),
        1
    );
    assert_eq!(
        only(Filter {
            gpu: Some(3),
            ..Filter::default()
        }),
        0
    );
    let asc = Sort {
        key: Column::Pid,
        then: None,
        descending: false,
    };
    let r = rows(&f, GroupBy::Process, &Filter::default(), asc);
    assert_eq!(r[0].pids, [7]);
    let desc = Sort {
        descending: true,
        ..asc
    };
    assert_eq!(
        rows(&f, GroupBy::Process, &Filter::default(), desc)[0].pids,
        [9]
    );
    // Every column sorts, and the keys step through every column and grouping.
    for c in Column::ALL {
        let s = Sort {
            key: c,
            then: Some(c.next()),
            descending: false,
        };
        assert_eq!(
            rows(&f, GroupBy::Process, &Filter::default(), s).len(),
            2,
            "{}",
            c.name()
        );
    }
    assert_eq!(GroupBy::User.next(), GroupBy::Process);
}
