//! The parsers on fixtures written in the documented formats (drm-usage-stats.rst, proc(5),
//! drm_debugfs.c), including real samples from the guests, malformed lines, huge values,
//! unknown keys and truncated files.

use drmtool::{debugfs, fdinfo, maps};

fn fixture(name: &str) -> String {
    let p = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

#[test]
fn drm_fdinfo_without_usage_keys() {
    for f in ["fdinfo-plain-6.12.txt", "fdinfo-plain-5.10.txt"] {
        let d = fdinfo::parse_drm(&fixture(f));
        assert!(!d.has_usage_keys(), "{f}: {d:?}");
        assert_eq!(d.total_bytes(), None);
        assert_eq!(d.common.flags, Some(0o2100002));
        assert!(d.malformed.is_empty() && d.unknown.is_empty(), "{f}: {d:?}");
    }
    assert_eq!(
        fdinfo::parse_drm(&fixture("fdinfo-plain-6.12.txt"))
            .common
            .ino,
        Some(127)
    );
    assert_eq!(
        fdinfo::parse_drm(&fixture("fdinfo-plain-5.10.txt"))
            .common
            .ino,
        None
    );
}

#[test]
fn drm_fdinfo_patched_vkms() {
    let d = fdinfo::parse_drm(&fixture("fdinfo-vkms-patched-6.12.txt"));
    assert_eq!(d.driver.as_deref(), Some("vkms"));
    assert_eq!(d.client_id, Some(7));
    assert_eq!(d.regions["memory"].total, Some(4096));
    assert_eq!(d.regions["memory"].shared, Some(0));
    assert_eq!(d.regions["memory"].active, Some(0));
    assert_eq!(d.regions["memory"].resident, None);
    assert_eq!(d.total_bytes(), Some(4096));
    assert!(d.malformed.is_empty() && d.unknown.is_empty(), "{d:?}");
}

#[test]
fn drm_fdinfo_every_documented_key() {
    let d = fdinfo::parse_drm(&fixture("fdinfo-full-usage-stats.txt"));
    assert!(d.malformed.is_empty() && d.unknown.is_empty(), "{d:?}");
    assert_eq!(d.driver.as_deref(), Some("amdgpu"));
    assert_eq!(d.pdev.as_deref(), Some("0000:03:00.0"));
    assert_eq!(d.client_id, Some(42));
    assert_eq!(d.client_name, Some("compositor".into()));
    let gfx = &d.engines["gfx"];
    assert_eq!(gfx.busy_ns, Some(1_234_567_890));
    assert_eq!(gfx.capacity, Some(1));
    assert_eq!(gfx.cycles, Some(1000));
    assert_eq!(gfx.total_cycles, Some(4000));
    assert_eq!(gfx.maxfreq_hz, Some(2_100_000_000));
    assert_eq!(d.engines["compute"].capacity, Some(4));
    assert_eq!(d.engines["compute"].busy_ns, Some(500));
    let vram = &d.regions["vram"];
    assert_eq!(vram.total, Some(32 << 20));
    assert_eq!(vram.shared, Some(8 << 20));
    assert_eq!(vram.resident, Some(30 << 20));
    assert_eq!(vram.purgeable, Some(1 << 20));
    assert_eq!(vram.active, Some(2 << 20));
    assert_eq!(d.regions["system"].total, Some(12288));
    // drm-memory-<region> is the older name of resident.
    assert_eq!(d.regions["gtt"].memory, Some(3072));
    assert_eq!(d.total_bytes(), Some((32 << 20) + 12288 + 3072));
    assert_eq!(d.shared_bytes(), Some(8 << 20));
}

#[test]
fn drm_fdinfo_amdgpu_6_12_evicted_and_requested() {
    // The lines and their order as 6.12's amdgpu_show_fdinfo prints them (a space before
    // the tab of `drm-memory-gtt: ` included).
    let d = fdinfo::parse_drm(&fixture("fdinfo-amdgpu-6.12.txt"));
    assert!(d.malformed.is_empty() && d.unknown.is_empty(), "{d:?}");
    let vram = &d.regions["vram"];
    assert_eq!(vram.memory, Some(512 << 20));
    assert_eq!(vram.amd_evicted, Some(128 << 20));
    assert_eq!(vram.amd_requested, Some(640 << 20));
    let visible = &d.regions["visible-vram"];
    assert_eq!(visible.amd_memory, Some(256 << 20));
    assert_eq!(visible.amd_evicted, Some(0));
    assert_eq!(d.regions["gtt"].amd_requested, Some(2 << 20));
    assert_eq!(d.regions["gtt"].memory, Some(2 << 20));
    // visible-vram is part of vram: it adds nothing to the total.
    assert_eq!(d.total_bytes(), Some((512 << 20) + (2 << 20)));
    assert_eq!(d.amdgpu_legacy.as_ref().and_then(|l| l.pasid), Some(32772));
    // An amd- key of another shape is unknown, never a region.
    let d = fdinfo::parse_drm("amd-evicted-:\t1 KiB\namd-other-vram:\t1 KiB\n");
    assert!(d.regions.is_empty(), "{d:?}");
    assert_eq!(d.unknown.len(), 2);
}

#[test]
fn drm_fdinfo_amdgpu_before_5_19() {
    let d = fdinfo::parse_drm(&fixture("fdinfo-amdgpu-5.14-legacy.txt"));
    assert!(d.malformed.is_empty() && d.unknown.is_empty(), "{d:?}");
    assert!(d.has_usage_keys());
    assert_eq!(d.driver, None);
    let l = d.amdgpu_legacy.expect("legacy keys");
    assert_eq!(l.pdev.as_deref(), Some("0000:03:00.0"));
    assert_eq!(l.pasid, Some(32771));
    assert_eq!(l.vram, Some(1024 * 1024));
    assert_eq!(l.gtt, Some(2048 * 1024));
    assert_eq!(l.cpu, Some(0));
    assert_eq!(l.engines_percent["gfx0"], 12.5);
    assert_eq!(l.engines_percent["dma0"], 1.25);
    assert_eq!(l.engines_percent.len(), 5);
}

#[test]
fn drm_fdinfo_malformed_lines_are_kept_not_guessed() {
    let d = fdinfo::parse_drm(&fixture("fdinfo-malformed.txt"));
    let bad: Vec<usize> = d.malformed.iter().map(|m| m.line).collect();
    // no separator, empty driver, negative id, unknown unit, KiB overflow, u64 overflow,
    // engine without unit, empty engine name, bad frequency, empty key
    assert_eq!(
        bad,
        vec![2, 3, 4, 5, 6, 7, 8, 9, 10, 13],
        "{:#?}",
        d.malformed
    );
    assert!(
        d.malformed[4].why.contains("overflows"),
        "{:?}",
        d.malformed[4]
    );
    assert_eq!(d.driver, None);
    assert_eq!(d.client_id, None);
    assert_eq!(d.regions["gtt"].total, None);
    assert_eq!(d.regions["gtt"].resident, None);
    // The largest value that fits is kept exactly.
    assert_eq!(d.regions["gtt"].shared, Some(u64::MAX));
    assert_eq!(d.total_bytes(), None);
    assert_eq!(
        d.unknown,
        vec![
            ("drm-widget-count".to_string(), "3".to_string()),
            ("x-vendor-key".to_string(), "whatever".to_string())
        ]
    );
}

#[test]
fn drm_fdinfo_truncated_file() {
    let d = fdinfo::parse_drm(&fixture("fdinfo-truncated.txt"));
    assert_eq!(d.client_id, Some(9));
    assert_eq!(d.regions["memory"].total, Some(8192));
    assert_eq!(d.malformed.len(), 1, "{d:?}");
    assert_eq!(d.malformed[0].line, 8);
}

#[test]
fn dmabuf_fdinfo() {
    let a = fdinfo::parse_dmabuf(&fixture("dmabuf-fdinfo-6.12.txt"));
    assert_eq!(
        (
            a.size,
            a.count,
            a.exp_name.as_deref(),
            a.name.as_ref().map(drmtool::Untrusted::as_bytes),
            a.common.ino
        ),
        (Some(16384), Some(7), Some("drm"), None, Some(1))
    );
    let b = fdinfo::parse_dmabuf(&fixture("dmabuf-fdinfo-5.10.txt"));
    assert_eq!(
        (b.size, b.count, b.common.ino),
        (Some(16384), Some(5), None)
    );
    let c = fdinfo::parse_dmabuf(&fixture("dmabuf-fdinfo-named.txt"));
    assert_eq!(c.name, Some("frame 7".into()));
    assert_eq!(c.exp_name.as_deref(), Some("udmabuf"));
    for f in [&a, &b, &c] {
        assert!(f.malformed.is_empty() && f.unknown.is_empty(), "{f:?}");
    }
    let m = fdinfo::parse_dmabuf(&fixture("dmabuf-fdinfo-malformed.txt"));
    let lines: Vec<usize> = m.malformed.iter().map(|x| x.line).collect();
    assert_eq!(lines, vec![2, 6, 7], "{m:?}");
    assert_eq!(m.size, None, "a bad size must stay unknown");
    assert_eq!(m.unknown, vec![("something new".into(), "yes".into())]);
}

#[test]
fn maps_gpu_mappings() {
    let m = maps::parse(&fixture("maps-6.12.txt"));
    assert!(m.malformed.is_empty(), "{m:?}");
    assert_eq!(m.lines, 9);
    let kinds: Vec<(&maps::Target, u64, u64)> = m
        .gpu
        .iter()
        .map(|g| (&g.target, g.len(), g.inode))
        .collect();
    assert_eq!(kinds.len(), 6, "{kinds:?}");
    assert_eq!(
        kinds[0],
        (
            &maps::Target::DmaBuf {
                name: String::new()
            },
            0x4000,
            1
        )
    );
    assert_eq!(
        kinds[1],
        (
            &maps::Target::DmaBuf {
                name: "frame 7".into()
            },
            0x4000,
            7
        )
    );
    assert_eq!(m.gpu[2].offset, 0x1_0000_4000);
    assert_eq!(m.gpu[2].len(), 0x1000);
    assert_eq!(m.gpu[4].dev, (0, 6));
    assert_eq!(
        m.gpu[4].target,
        maps::Target::Drm {
            path: "/dev/dri/renderD128".into()
        },
        "a (deleted) suffix is not part of the path"
    );
    assert_eq!(m.gpu[4].len(), 0x40_0000);
    assert_eq!(
        m.gpu[5].target,
        maps::Target::DmaBuf {
            name: String::new()
        }
    );
}

#[test]
fn maps_malformed_and_truncated() {
    let m = maps::parse(&fixture("maps-malformed.txt"));
    let lines: Vec<usize> = m.malformed.iter().map(|x| x.line).collect();
    assert_eq!(lines, vec![2, 3, 4, 5, 6, 7, 8, 10], "{:#?}", m.malformed);
    assert_eq!(m.gpu.len(), 2);
    assert_eq!(
        m.gpu[1].target,
        maps::Target::Drm {
            path: "/dev/dri/card0".into()
        }
    );
}

#[test]
fn debugfs_clients_each_kernel() {
    let c = debugfs::parse_clients(&fixture("debugfs-clients-6.12.txt"));
    assert!(c.malformed.is_empty(), "{c:?}");
    assert_eq!(c.clients.len(), 2);
    assert_eq!(
        c.clients[1].command, "Xwayland main",
        "a command may contain spaces"
    );
    assert_eq!(
        (c.clients[1].id, c.clients[1].minor, c.clients[1].uid),
        (1234, 128, 1000)
    );
    assert_eq!(c.clients[1].id_column, "tgid");
    assert!(!c.clients[1].master && c.clients[1].authenticated);
    let c = debugfs::parse_clients(&fixture("debugfs-clients-5.10.txt"));
    assert!(c.malformed.is_empty(), "{c:?}");
    assert_eq!(
        c.clients.iter().map(|x| x.id).collect::<Vec<_>>(),
        vec![208, 215]
    );
    assert_eq!(
        c.clients[0].id_column, "pid",
        "5.10 prints the id of the thread that opened the file"
    );
    let c = debugfs::parse_clients(&fixture("debugfs-clients-6.13-name.txt"));
    assert!(c.malformed.is_empty(), "{c:?}");
    assert_eq!(c.clients[0].name.as_deref(), Some("<unset>"));
    assert_eq!(c.clients[1].name.as_deref(), Some("mpv-gl"));
    assert_eq!(c.clients[1].command, "mpv");
    // 7.3 adds the drm-client-id after the name.
    let c = debugfs::parse_clients(&fixture("debugfs-clients-7.3-id.txt"));
    assert!(c.malformed.is_empty(), "{c:?}");
    assert_eq!(c.clients[0].command, "Xwayland main");
    assert_eq!((c.clients[0].id, c.clients[0].client_id), (1234, Some(7)));
    assert_eq!(c.clients[1].name.as_deref(), Some("job-7"));
    assert_eq!((c.clients[1].id, c.clients[1].client_id), (240, Some(12)));
    assert!(c.clients[1].master);
    // A header with columns of no known shape after `magic` is refused whole, never read
    // with the columns misplaced.
    let c =
        debugfs::parse_clients("command tgid dev master a uid magic id name\n x 1 0 y y 0 0 1 n\n");
    assert!(c.clients.is_empty() && c.malformed.len() == 1, "{c:?}");
    let c = debugfs::parse_clients(&fixture("debugfs-clients-malformed.txt"));
    assert_eq!(
        c.malformed.iter().map(|m| m.line).collect::<Vec<_>>(),
        vec![2, 3, 4]
    );
    assert_eq!(c.clients.len(), 1);
    assert_eq!(c.clients[0].id, 6);
    assert!(debugfs::parse_clients("").clients.is_empty());
    assert_eq!(debugfs::parse_clients("garbage\n").malformed.len(), 1);
}

#[test]
fn debugfs_gem_names() {
    let g = debugfs::parse_gem_names(&fixture("debugfs-gem_names.txt"));
    assert!(g.malformed.is_empty());
    assert_eq!(g.names.iter().map(|n| n.size).sum::<u64>(), 16384 + 4194304);
    assert_eq!(g.names[1].handles, 2);
    let g = debugfs::parse_gem_names(&fixture("debugfs-gem_names-malformed.txt"));
    assert_eq!(
        g.malformed.iter().map(|m| m.line).collect::<Vec<_>>(),
        vec![2, 3, 4]
    );
    assert_eq!(g.names.len(), 1);
    assert_eq!(g.names[0].name, 4);
}

#[test]
fn debugfs_framebuffers() {
    let f = debugfs::parse_framebuffers(&fixture("debugfs-framebuffer-5.10.txt"));
    assert!(f.malformed.is_empty(), "{f:?}");
    assert_eq!(f.framebuffers.len(), 2);
    let a = &f.framebuffers[0];
    assert_eq!((a.id, a.width, a.height), (36, Some(1280), Some(800)));
    assert_eq!(a.allocated_by.as_deref(), Some("[fbcon]"));
    assert_eq!(a.format.as_deref(), Some("XR24 little-endian (0x34325258)"));
    assert_eq!(a.objects.len(), 1);
    assert_eq!(a.objects[0].size, Some(4_096_000));
    assert_eq!(a.objects[0].imported, Some(false));
    let b = &f.framebuffers[1];
    assert_eq!(b.allocated_by.as_deref(), Some("weston"));
    assert_eq!(b.objects.len(), 1, "obj[1]:(null) is no object");
    assert_eq!(b.objects[0].size, Some(8192));
    assert_eq!(b.objects[0].imported, Some(true));
    let m = debugfs::parse_framebuffers(&fixture("debugfs-framebuffer-malformed.txt"));
    assert_eq!(
        m.malformed.iter().map(|x| x.line).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 9],
        "{:#?}",
        m.malformed
    );
    assert_eq!(m.framebuffers.len(), 1);
    assert_eq!(m.framebuffers[0].objects[0].size, Some(4096));
}
