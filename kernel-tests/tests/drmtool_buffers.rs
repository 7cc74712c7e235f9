//! `drmtool buffers` in real guests: sample clients with known buffers (sizes, a dma-buf
//! shared between two processes, one open file held by two processes, an exited process,
//! a process the scan may not read), and the tool must report exactly those, with every
//! figure from the source the kernel offers, and JSON that validates against the schema.
//!
//! The clients are this test binary run again with `DRMTOOL_SAMPLE_ARGS` set: the test
//! `sample_client_holds_what_it_reports` then becomes `drm-sample-client` (the same
//! library code as `tools/src/bin/drm-sample-client.rs`), because `cargo test` builds no
//! binaries of other packages.

use drm_gem::DumbSpec;
use drmtool::sample::{Args, Ready};
use drmtool::scan::{Report, Source};
use drmtool::{Options, scan};
use kernel_tests::sample::Client;
use kernel_tests::skip;
use std::collections::BTreeSet;
use std::process::ExitCode;

const HELPER: &str = "sample_client_holds_what_it_reports";
const PAGE: u64 = 4096;

/// A sample client run on this binary's helper test.
fn spawn(args: &[&str]) -> Client {
    Client::spawn(HELPER, args)
}

fn page_round(n: u64) -> u64 {
    n.div_ceil(PAGE) * PAGE
}

fn require_nodes() -> bool {
    kernel_tests::node_of_driver(&["vgem"]).is_some()
        && kernel_tests::node_of_driver(&["vkms"]).is_some()
}

fn schema_errors(v: &serde_json::Value) -> Vec<String> {
    let p = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tools/schema/buffers.schema.json"
    );
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{p}: {e}"));
    let s: serde_json::Value = serde_json::from_str(&text).expect("schema JSON");
    let val = jsonschema::validator_for(&s).expect("valid JSON Schema");
    val.iter_errors(v)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect()
}

fn cli(args: &[String]) -> (ExitCode, String) {
    let mut out = Vec::new();
    let argv = std::iter::once("drmtool".to_string())
        .chain(args.iter().cloned())
        .map(std::ffi::OsString::from);
    let code = drmtool::cli::main_with(argv, &mut out);
    (code, String::from_utf8(out).expect("utf-8"))
}

/// C: one mapped 16x16 vkms buffer and a dup of its fd; D: holds C's open file too (passed
/// over a socket) and opens one of its own.
fn vkms_shared_file() -> (Client, Client) {
    let c = spawn(&["--device", "vkms", "--dumb", "16x16", "--map", "--dup"]);
    let d = spawn(&[
        "--device",
        "vkms",
        "--share-drm",
        &format!("{}:{}", c.pid(), c.ready.drm_fd),
    ]);
    (c, d)
}

/// `drmtool buffers --json <extra> --pid P...`: it must succeed with JSON that validates
/// against the schema. Returns the document and the arguments used.
fn buffers_json(extra: &[&str], pids: &[u32]) -> (serde_json::Value, Vec<String>) {
    let mut args: Vec<String> = vec!["buffers".into(), "--json".into()];
    args.extend(extra.iter().map(|a| a.to_string()));
    for p in pids {
        args.extend(["--pid".to_string(), p.to_string()]);
    }
    let (code, out) = cli(&args);
    assert_eq!(code, ExitCode::SUCCESS, "{args:?}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let errors = schema_errors(&v);
    assert!(errors.is_empty(), "schema violations: {errors:#?}");
    (v, args)
}

/// The test that doubles as the sample client's entry point (see the module docs). Run
/// plainly, it checks that the client holds what its ready line says.
#[test]
fn sample_client_holds_what_it_reports() {
    kernel_tests::sample::entry();
    kernel_tests::fds_shared();
    if kernel_tests::node_of_driver(&["vgem"]).is_none() {
        skip!("no vgem node");
    }
    let args = Args {
        device: "vgem".into(),
        dumb: vec![DumbSpec {
            width: 64,
            height: 64,
            bpp: 32,
        }],
        map: true,
        export: true,
        ..Default::default()
    };
    let mut out = Vec::new();
    let code = drmtool::sample::run(&args, &mut out, &mut &b""[..]);
    assert_eq!(code, ExitCode::SUCCESS);
    let r: Ready = serde_json::from_slice(&out).expect("one JSON line");
    assert_eq!(r.pid, std::process::id());
    assert_eq!(r.buffers.len(), 1);
    assert_eq!(r.buffers[0].size, 64 * 64 * 4);
    assert!(r.buffers[0].mapped && r.buffers[0].offset != 0);
    assert_eq!(r.dmabuf_size, Some(64 * 64 * 4));
    assert!(r.dmabuf_inode.is_some());
}

#[test]
fn buffers_reports_exactly_what_the_clients_hold() {
    if !require_nodes() {
        skip!("needs vgem and vkms nodes");
    }
    // A: two mapped vgem buffers, the first flinked and exported as a dma-buf it maps.
    let a = spawn(&[
        "--device",
        "vgem",
        "--dumb",
        "64x64",
        "--dumb",
        "32x32",
        "--map",
        "--export",
        "--map-dmabuf",
        "--flink",
    ]);
    let a_dmabuf = a.ready.dmabuf_fd.expect("A exported");
    // B: takes A's dma-buf, imports it into its own vgem file and maps it.
    let b = spawn(&[
        "--device",
        "vgem",
        "--import",
        &format!("{}:{a_dmabuf}", a.pid()),
        "--map-dmabuf",
    ]);
    // C: one mapped vkms buffer and a dup of its fd; D: holds C's open file too.
    let (c, d) = vkms_shared_file();
    // E: held buffers, then exited before the scan.
    let e = spawn(&["--device", "vgem", "--dumb", "128x128", "--map"]);
    let e_pid = e.pid();
    e.exit();

    let pids = vec![a.pid(), b.pid(), c.pid(), d.pid(), e_pid];
    let fds_before = kernel_tests::open_fds();
    let r = scan(&Options {
        pids: pids.clone(),
        ..Default::default()
    })
    .expect("scan");
    assert_eq!(kernel_tests::open_fds(), fds_before, "the scan leaks no fd");

    // Processes: exactly A-D; E is gone and nothing of it is reported.
    assert_eq!(r.scan.processes, 4, "{:?}", r.scan);
    assert_eq!(
        (r.scan.read, r.scan.unreadable),
        (4, 0),
        "{:?}",
        r.unreadable
    );
    let got: BTreeSet<u32> = r.processes.iter().map(|p| p.pid).collect();
    let want: BTreeSet<u32> = pids[..4].iter().copied().collect();
    assert_eq!(got, want);
    let proc_of = |pid: u32| r.processes.iter().find(|p| p.pid == pid).unwrap();

    let vgem = r
        .devices
        .iter()
        .find(|d| d.driver.as_deref() == Some("vgem"))
        .expect("vgem device");
    let vkms = r
        .devices
        .iter()
        .find(|d| d.driver.as_deref() == Some("vkms"))
        .expect("vkms device");

    // A's fds and mappings.
    let pa = proc_of(a.pid());
    assert_eq!(pa.drm_fds.len(), 1);
    assert_eq!(pa.drm_fds[0].fd, a.ready.drm_fd);
    assert_eq!(pa.drm_fds[0].node, a.ready.node);
    assert_eq!(pa.dmabuf_fds.len(), 1);
    assert_eq!(pa.dmabuf_fds[0].fd, a_dmabuf);
    assert_eq!(Some(pa.dmabuf_fds[0].inode), a.ready.dmabuf_inode);
    let a_mapped: u64 = a.ready.buffers.iter().map(|b| page_round(b.size)).sum();
    assert_eq!(a_mapped, 16384 + 4096);
    assert_eq!(pa.drm_mappings.len(), 1);
    assert_eq!(pa.drm_mappings[0].device, vgem.index);
    assert_eq!(pa.drm_mappings[0].buffers, 2);
    assert_eq!(pa.mapped_drm.value, Some(a_mapped));
    assert_eq!(pa.mapped_drm.source, Source::Maps);
    assert_eq!(pa.dmabuf_bytes.value, Some(16384));
    assert_eq!(pa.dmabuf_bytes.source, Source::DmabufFdinfo);

    // B: one vgem fd, A's dma-buf, no DRM mapping.
    let pb = proc_of(b.pid());
    assert_eq!(pb.drm_fds.len(), 1);
    assert_eq!(pb.dmabuf_fds.len(), 1);
    assert_eq!(Some(pb.dmabuf_fds[0].inode), a.ready.dmabuf_inode);
    assert_eq!(pb.mapped_drm.value, Some(0));
    // A dma-buf mmap shows as `/dmabuf:` on newer kernels; on 5.10 the mapping's file is
    // the GEM object's shmem file (`/drm mm object`). Either way it is accounted for.
    for p in [pa, pb] {
        let inode = a.ready.dmabuf_inode.unwrap();
        assert!(
            p.dmabuf_mappings == [inode] || p.mapped_gem_shmem.value == Some(16384),
            "pid {}: the dma-buf mapping is missing: {:?} / {:?}",
            p.pid,
            p.dmabuf_mappings,
            p.mapped_gem_shmem
        );
    }

    // The dma-buf and the sharing graph.
    assert_eq!(r.dmabufs.len(), 1, "{:?}", r.dmabufs);
    let db = &r.dmabufs[0];
    assert_eq!(Some(db.inode), a.ready.dmabuf_inode);
    assert_eq!(db.size.value, Some(16384));
    assert_eq!(db.size.source, Source::DmabufFdinfo);
    assert_eq!(db.exp_name.as_deref(), Some("drm"));
    let holders: BTreeSet<(u32, u32)> = db.holders.iter().map(|h| (h.pid, h.fd)).collect();
    let want_holders: BTreeSet<(u32, u32)> =
        [(a.pid(), a_dmabuf), (b.pid(), b.ready.dmabuf_fd.unwrap())].into();
    assert_eq!(holders, want_holders);
    let mut ab = vec![a.pid(), b.pid()];
    ab.sort_unstable();
    assert_eq!(db.processes, ab);
    assert_eq!(r.sharing.len(), 1);
    assert_eq!(r.sharing[0].processes, ab);
    assert_eq!(r.sharing[0].size, Some(16384));

    // Clients: A's and B's vgem files; on vkms C's file (held by C twice and by D) and the
    // file D opened itself.
    assert_eq!(r.clients.len(), 4, "{:#?}", r.clients);
    let holders_of = |cl: &drmtool::scan::ClientReport| -> BTreeSet<(u32, u32)> {
        cl.holders.iter().map(|h| (h.pid, h.fd)).collect()
    };
    let mut shared_file: BTreeSet<(u32, u32)> = [(c.pid(), c.ready.drm_fd)].into();
    shared_file.extend(c.ready.extra_drm_fds.iter().map(|f| (c.pid(), *f)));
    shared_file.extend(d.ready.extra_drm_fds.iter().map(|f| (d.pid(), *f)));
    assert_eq!(shared_file.len(), 3);
    let mut vkms_files: Vec<BTreeSet<(u32, u32)>> = r
        .clients
        .iter()
        .filter(|cl| cl.device == vkms.index)
        .map(holders_of)
        .collect();
    vkms_files.sort();
    let mut want = vec![shared_file.clone(), [(d.pid(), d.ready.drm_fd)].into()];
    want.sort();
    assert_eq!(
        vkms_files, want,
        "one open file held by three fds is one client"
    );
    let mut vgem_files: Vec<BTreeSet<(u32, u32)>> = r
        .clients
        .iter()
        .filter(|cl| cl.device == vgem.index)
        .map(holders_of)
        .collect();
    vgem_files.sort();
    let mut want: Vec<BTreeSet<(u32, u32)>> = vec![
        [(a.pid(), a.ready.drm_fd)].into(),
        [(b.pid(), b.ready.drm_fd)].into(),
    ];
    want.sort();
    assert_eq!(vgem_files, want);
    assert_eq!(vgem.clients, 2);
    assert_eq!(vkms.clients, 2);
    let vc = r
        .clients
        .iter()
        .find(|cl| holders_of(cl) == shared_file)
        .unwrap();
    assert_eq!(proc_of(d.pid()).drm_fds.len(), 2);
    assert!(r.scan.kcmp.readable, "kcmp: {:?}", r.scan.kcmp);

    // Mapped bytes per device, by distinct buffer.
    assert_eq!(vgem.mapped.value, Some(a_mapped));
    let c_mapped = page_round(c.ready.buffers[0].size);
    assert_eq!(vkms.mapped.value, Some(c_mapped));

    // debugfs (readable as root): the kernel's own client list and flink names.
    assert!(vgem.debugfs.readable, "{:?}", vgem.debugfs);
    let rows = |dev: &drmtool::scan::DeviceReport| -> BTreeSet<u32> {
        dev.debugfs_client_rows
            .iter()
            .filter_map(|c| c.process)
            .collect()
    };
    assert_eq!(
        rows(vgem),
        [a.pid(), b.pid()].into(),
        "E exited: its file is gone"
    );
    assert_eq!(rows(vkms), [c.pid(), d.pid()].into());
    assert_eq!(vgem.named_bytes.value, Some(16384));
    assert_eq!(vgem.named_bytes.source, Source::DebugfsGemNames);

    // Memory from fdinfo: where the driver prints drm-* keys (vkms on stock-6.12-fdinfo)
    // the figure comes from there; elsewhere it is unknown, never guessed.
    let fdinfo_keys = vc.client_id.is_some();
    if std::env::var_os("DRMTOOL_TEST_REQUIRE_FDINFO").is_some() {
        assert!(fdinfo_keys, "this kernel's vkms must print drm-* keys");
    }
    if fdinfo_keys {
        assert_eq!(vc.dedupe, "drm-client-id");
        assert_eq!(vc.driver.as_deref(), Some("vkms"));
        assert_eq!(vc.memory_total.value, Some(c_mapped));
        assert_eq!(vc.memory_total.source, Source::Fdinfo);
    } else {
        assert_eq!(vc.dedupe, "kcmp");
        assert_eq!(vc.memory_total.value, None);
        assert_eq!(vc.memory_total.source, Source::Unknown);
        assert!(vc.regions.is_empty());
    }
    for cl in r.clients.iter().filter(|c| c.device == vgem.index) {
        assert_eq!(
            cl.memory_total.source,
            Source::Unknown,
            "vgem prints no drm-* keys"
        );
        assert!(cl.malformed.is_empty(), "{:?}", cl.malformed);
    }

    // The same scan through the command line: JSON that validates, the same facts.
    let (v, args) = buffers_json(&[], &pids);
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["sharing"][0]["processes"], serde_json::json!(ab));
    assert_eq!(v["processes"].as_array().unwrap().len(), 4);

    let mut table_args = args.clone();
    table_args.retain(|a| a != "--json");
    table_args.extend(["--color".into(), "never".into()]);
    let (code, table) = cli(&table_args);
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(table.contains("SHARED DMA-BUFS"), "{table}");
    assert!(
        table.contains(&format!("ino {} [16.0 KiB]", db.inode)),
        "{table}"
    );
    drop((a, b, c, d));
}

#[test]
fn a_process_it_may_not_read_is_counted_with_the_reason() {
    if kernel_tests::node_of_driver(&["vgem"]).is_none() {
        skip!("no vgem node");
    }
    let a = spawn(&["--device", "vgem", "--dumb", "64x64", "--map"]);
    let a_pid = a.pid();
    let me = std::process::id();
    let fds_before = kernel_tests::open_fds();
    // Credentials are per thread in the kernel: this thread becomes nobody, the rest of
    // the test process stays root.
    let (r, table): (Report, String) = std::thread::spawn(move || {
        let nobody = 65534;
        rustix::thread::set_thread_res_gid(
            rustix::process::Gid::from_raw(nobody),
            rustix::process::Gid::from_raw(nobody),
            rustix::process::Gid::from_raw(nobody),
        )
        .expect("setresgid");
        rustix::thread::set_thread_res_uid(
            rustix::process::Uid::from_raw(nobody),
            rustix::process::Uid::from_raw(nobody),
            rustix::process::Uid::from_raw(nobody),
        )
        .expect("setresuid");
        let r = scan(&Options {
            pids: vec![a_pid, me],
            ..Default::default()
        })
        .expect("scan");
        let (code, table) = cli(&[
            "buffers".into(),
            "--pid".into(),
            a_pid.to_string(),
            "--color".into(),
            "never".into(),
        ]);
        assert_eq!(code, ExitCode::SUCCESS, "an unreadable process is no error");
        (r, table)
    })
    .join()
    .expect("scan thread");
    assert_eq!(kernel_tests::open_fds(), fds_before, "the scan leaks no fd");

    assert_eq!(r.scan.processes, 2);
    assert_eq!(r.scan.read, 1, "its own process stays readable");
    assert_eq!(r.scan.unreadable, 1);
    assert_eq!(r.unreadable.len(), 1);
    let u = &r.unreadable[0];
    assert_eq!(u.pid, a_pid);
    assert_eq!(u.errno, "EACCES");
    assert_eq!(u.reason, "permission denied (EACCES)");
    assert_eq!(u.path, format!("/proc/{a_pid}/fd"));
    assert!(u.comm.is_some(), "comm is world-readable");
    assert!(r.processes.iter().all(|p| p.pid != a_pid));
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("1 process(es) could not be read")),
        "{:?}",
        r.warnings
    );
    assert!(
        table.contains(&format!("unreadable: pid {a_pid} "))
            && table.contains("permission denied (EACCES)"),
        "{table}"
    );
    assert!(table.contains("1 unreadable"), "{table}");
    a.exit();
}

#[test]
fn fdinfo_figures_or_unknown_end_to_end() {
    if kernel_tests::node_of_driver(&["vkms"]).is_none() {
        skip!("no vkms node");
    }
    let c = spawn(&[
        "--device", "vkms", "--dumb", "64x64", "--dumb", "100x10", "--dumb", "8x8x8",
    ]);
    let total: u64 = c.ready.buffers.iter().map(|b| page_round(b.size)).sum();
    let r = scan(&Options {
        pids: vec![c.pid()],
        ..Default::default()
    })
    .expect("scan");
    assert_eq!(r.clients.len(), 1);
    let cl = &r.clients[0];
    let p = &r.processes[0];
    let dev = &r.devices[cl.device];
    if std::env::var_os("DRMTOOL_TEST_REQUIRE_FDINFO").is_some() {
        assert!(
            cl.client_id.is_some(),
            "this kernel's vkms must print drm-* keys"
        );
    }
    if cl.client_id.is_some() {
        // drm_show_memory_stats: every object with a handle in this file, page-sized.
        assert_eq!(cl.driver.as_deref(), Some("vkms"));
        assert_eq!(cl.memory_total.value, Some(total));
        assert_eq!(cl.memory_total.source, Source::Fdinfo);
        assert_eq!(cl.regions["memory"].total, Some(total));
        assert_eq!(cl.regions["memory"].shared, Some(0));
        assert_eq!(cl.memory_shared.value, Some(0));
        assert_eq!(p.memory_total.value, Some(total));
        assert_eq!(dev.memory_total.value, Some(total));
        assert!(
            cl.unknown_keys.is_empty() && cl.malformed.is_empty(),
            "{cl:?}"
        );
    } else {
        assert_eq!(cl.memory_total.value, None);
        assert_eq!(cl.memory_total.source, Source::Unknown);
        assert_eq!(
            cl.memory_total.note.as_deref(),
            Some("the driver prints no drm-* memory keys in fdinfo")
        );
        assert_eq!(dev.memory_total.value, None);
        assert_eq!(p.memory_total.value, None);
    }
    // Nothing is mapped, so the maps source says 0, not a guess from the buffers.
    assert_eq!(p.mapped_drm.value, Some(0));
    c.exit();
}

/// `--skip maps,debugfs,kcmp`: the same processes and fds, and every figure of a skipped
/// source unknown with "skipped" as the reason (never zero); without kcmp, an open file held
/// by three fds counts as three clients unless the driver prints drm-client-id.
#[test]
fn skipped_sources_are_unknown_not_zero() {
    if !require_nodes() {
        skip!("needs vgem and vkms nodes");
    }
    let (c, d) = vkms_shared_file();
    let pids = vec![c.pid(), d.pid()];
    let full = scan(&Options {
        pids: pids.clone(),
        ..Default::default()
    })
    .expect("scan");
    let fds_before = kernel_tests::open_fds();
    let r = scan(&Options {
        pids: pids.clone(),
        skip: drmtool::scan::Skip {
            maps: true,
            debugfs: true,
            kcmp: true,
        },
        ..Default::default()
    })
    .expect("scan");
    assert_eq!(kernel_tests::open_fds(), fds_before, "the scan leaks no fd");
    // The same processes and fds.
    let fds = |r: &Report| -> BTreeSet<(u32, u32)> {
        r.processes
            .iter()
            .flat_map(|p| p.drm_fds.iter().map(move |f| (p.pid, f.fd)))
            .collect()
    };
    assert_eq!(fds(&r), fds(&full));
    assert_eq!(fds(&r).len(), 4, "C's fd and its dup, D's two");
    let vkms = r
        .devices
        .iter()
        .find(|d| d.driver.as_deref() == Some("vkms"))
        .expect("vkms device");
    // maps: unknown, while the full scan saw C's mapping.
    let pc = r.processes.iter().find(|p| p.pid == c.pid()).unwrap();
    let full_pc = full.processes.iter().find(|p| p.pid == c.pid()).unwrap();
    assert_eq!(
        full_pc.mapped_drm.value,
        Some(page_round(c.ready.buffers[0].size))
    );
    for f in [&pc.mapped_drm, &pc.mapped_gem_shmem, &vkms.mapped] {
        assert_eq!(f.value, None, "{f:?}");
        assert_eq!(f.source, Source::Unknown);
        assert!(f.note.as_deref().unwrap_or("").contains("skipped"), "{f:?}");
    }
    assert!(pc.drm_mappings.is_empty());
    // debugfs: not read, and says so.
    assert!(!vkms.debugfs.readable);
    assert!(
        vkms.debugfs
            .why
            .as_deref()
            .unwrap_or("")
            .contains("skipped"),
        "{:?}",
        vkms.debugfs
    );
    assert_eq!(vkms.debugfs_clients.value, None);
    assert_eq!(vkms.framebuffer_bytes.value, None);
    assert!(vkms.debugfs_client_rows.is_empty());
    // kcmp: skipped; without drm-client-id every fd is its own client.
    assert!(!r.scan.kcmp.readable);
    let ids = r.clients.iter().any(|cl| cl.client_id.is_some());
    let want = if ids { 2 } else { 4 };
    assert_eq!(r.clients.len(), want, "{:#?}", r.clients);
    assert_eq!(
        full.clients.len(),
        2,
        "the full scan merges the shared file"
    );
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("--skip maps,debugfs,kcmp")),
        "{:?}",
        r.warnings
    );
    // The CLI: the flag parses, the JSON validates, an unknown source is bad usage.
    buffers_json(&["--skip", "maps,debugfs", "--skip", "kcmp"], &pids);
    let (code, _) = cli(&["buffers".into(), "--skip".into(), "everything".into()]);
    assert_eq!(code, ExitCode::from(2));
    drop(d);
    c.exit();
}

/// A client in a pid namespace of its own (`unshare --pid --fork`: it is pid 1 there) is
/// listed under its pid in the viewer's namespace, with `ns_pids` ending in the pid it
/// sees for itself (`/proc/<pid>/status`'s NSpid), in JSON and in the table (`812 (1)`);
/// a client in the viewer's namespace has one entry.
#[test]
fn a_client_in_another_pid_namespace_shows_both_pids() {
    if !kernel_tests::in_guest() {
        skip!("not in a vm guest: unshare --pid needs root and a DRM device here");
    }
    if kernel_tests::node_of_driver(&["vgem"]).is_none() {
        skip!("no vgem node");
    }
    use std::io::BufRead;
    let mut child = std::process::Command::new("unshare")
        .args(["--pid", "--fork"])
        .arg(std::env::current_exe().unwrap())
        .args([HELPER, "--exact", "--nocapture", "--test-threads=1", "-q"])
        .env(
            kernel_tests::sample::ARGS_ENV,
            "--device\x1fvgem\x1f--dumb\x1f32x32",
        )
        .env_remove("KERNEL_TESTS_SIGNAL_STORM")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("unshare");
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let ready: Ready = loop {
        match lines.next() {
            Some(Ok(l)) if l.starts_with('{') => break serde_json::from_str(&l).unwrap(),
            Some(Ok(_)) => continue,
            other => panic!("the client in a new pid namespace never got ready: {other:?}"),
        }
    };
    assert_eq!(ready.pid, 1, "the client is pid 1 of its namespace");
    let plain = spawn(&["--device", "vgem", "--dumb", "16x16"]);
    let (v, _) = buffers_json(&[], &[]);
    let (_, table) = cli(&["buffers".into()]);
    drop(child.stdin.take());
    let st = child.wait().unwrap();
    let procs = v["processes"].as_array().unwrap();
    // Ours: the one vgem holder whose own pid is 1 (unshare itself holds nothing).
    let ns: Vec<&serde_json::Value> = procs
        .iter()
        .filter(|p| {
            p["ns_pids"]
                .as_array()
                .is_some_and(|n| n.len() == 2 && n[1] == 1)
        })
        .collect();
    assert_eq!(
        ns.len(),
        1,
        "one process in a pid namespace below ours: {v}"
    );
    let outer = ns[0]["pid"].as_u64().unwrap();
    assert_eq!(ns[0]["ns_pids"][0], outer, "{}", ns[0]);
    assert_ne!(outer, 1);
    assert!(
        table
            .lines()
            .any(|l| l.trim_start().starts_with(&format!("{outer} (1) "))),
        "the table shows both pids:\n{table}"
    );
    let mine = procs
        .iter()
        .find(|p| p["pid"] == plain.pid())
        .unwrap_or_else(|| panic!("no process {}: {v}", plain.pid()));
    assert_eq!(mine["ns_pids"], serde_json::json!([plain.pid()]), "{mine}");
    plain.exit();
    assert!(st.success(), "the namespaced client: {st}");
}
