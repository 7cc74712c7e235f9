//! The whole `/proc` scan over a synthetic tree: the input decodes into processes (`comm`,
//! `cmdline`, `status`, `fd/` links to char devices, dma-buf anon inodes, sockets and
//! files, `fdinfo/` with drm-* and dma-buf keys, `maps`), a sysfs that says which char
//! devices are DRM nodes and a DRM debugfs (`clients`, `framebuffer`, `gem_names`), written
//! under one directory on /dev/shm (reused by every run of the process), and a cgroup v2
//! root with the dmem controller's files (cgroups named by the input's bytes); then
//! `drmtool::scan` runs on it and its report and tables are checked:
//!
//! - the scan never panics and accounts for every process directory;
//! - every process, fd, dma-buf inode and sharing entry of the report is one of the tree's;
//! - every figure traces to the tree's text: a dma-buf size is a number of a holder's
//!   fdinfo, a client's memory is at most its holders' fdinfo numbers in GiB, a process's
//!   mapped bytes are at most its maps lines' lengths, totals add up;
//! - the JSON and the tables are bounded by the input;
//! - every dmem region's capacity and every cgroup's charge and limit is a number of its
//!   file, every charged cgroup one of the tree's;
//! - the tables carry no control byte but newlines.
//!
//! Char devices are the machine's harmless ones (`/dev/null`, `/dev/zero`...): a `statx`
//! through the link sees a real char device, and the synthetic sysfs (`Options::sys_root`)
//! says whether it is a DRM node. A dma-buf fd is a link to `anon_inode:dmabuf`, which the
//! scan resolves relative to `fd/`: there a hard link to one of a few pool files gives the
//! buffer its inode (shared between processes that link the same one). Pids are above the
//! kernel's limit (2^22), so `kcmp` never reaches a real process.
#![no_main]
use drmtool::render::{By, SortKey};
use libfuzzer_sys::fuzz_target;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Lines of real files, picked by the decoder (with a number of its own, or raw bytes).
const DRM_FIXTURES: &[&str] = &[
    include_str!("../../tests/fixtures/fdinfo-amdgpu-5.14-legacy.txt"),
    include_str!("../../tests/fixtures/fdinfo-full-usage-stats.txt"),
    include_str!("../../tests/fixtures/fdinfo-malformed.txt"),
    include_str!("../../tests/fixtures/fdinfo-plain-5.10.txt"),
    include_str!("../../tests/fixtures/fdinfo-plain-6.12.txt"),
    include_str!("../../tests/fixtures/fdinfo-vkms-patched-6.12.txt"),
];
const DMABUF_FIXTURES: &[&str] = &[
    include_str!("../../tests/fixtures/dmabuf-fdinfo-5.10.txt"),
    include_str!("../../tests/fixtures/dmabuf-fdinfo-6.12.txt"),
    include_str!("../../tests/fixtures/dmabuf-fdinfo-malformed.txt"),
    include_str!("../../tests/fixtures/dmabuf-fdinfo-named.txt"),
];
const MAPS_FIXTURES: &[&str] = &[
    include_str!("../../tests/fixtures/maps-6.12.txt"),
    include_str!("../../tests/fixtures/maps-malformed.txt"),
];
const CLIENTS_FIXTURES: &[&str] = &[
    include_str!("../../tests/fixtures/debugfs-clients-5.10.txt"),
    include_str!("../../tests/fixtures/debugfs-clients-6.12.txt"),
    include_str!("../../tests/fixtures/debugfs-clients-6.13-name.txt"),
    include_str!("../../tests/fixtures/debugfs-clients-malformed.txt"),
];
const FB_FIXTURES: &[&str] = &[
    include_str!("../../tests/fixtures/debugfs-framebuffer-5.10.txt"),
    include_str!("../../tests/fixtures/debugfs-framebuffer-malformed.txt"),
];
const NAMES_FIXTURES: &[&str] = &[
    include_str!("../../tests/fixtures/debugfs-gem_names.txt"),
    include_str!("../../tests/fixtures/debugfs-gem_names-malformed.txt"),
];

/// Char devices that may stand for DRM nodes (those this machine has).
const CHAR_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/hwrng",
];
/// Dma-buf pool files (their inodes are the buffers').
const POOL: usize = 4;
/// First pid: above PID_MAX_LIMIT (4194304), never a real process.
const PID_BASE: u32 = 5_000_000;

struct Fixed {
    base: PathBuf,
    /// `(path, major, minor)` of the usable char devices.
    devs: Vec<(&'static str, u32, u32)>,
    pool_inodes: Vec<u64>,
    lines: [Vec<&'static str>; 6],
}

fn fixed() -> &'static Fixed {
    static F: OnceLock<Fixed> = OnceLock::new();
    F.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        let parent = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        // libFuzzer exits without running destructors: the trees of exited fuzzers go here.
        for e in fs::read_dir(&parent).into_iter().flatten().flatten() {
            let name = e.file_name();
            let pid = name
                .to_str()
                .and_then(|n| n.strip_prefix("drmtool-fuzz-proc-tree-"));
            if pid.is_some_and(|p| !Path::new("/proc").join(p).exists()) {
                let _ = fs::remove_dir_all(e.path());
            }
        }
        let base = parent.join(format!("drmtool-fuzz-proc-tree-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        fs::create_dir_all(base.join("pool")).unwrap();
        let mut pool_inodes = Vec::new();
        for i in 0..POOL {
            let p = base.join("pool").join(i.to_string());
            fs::write(&p, b"").unwrap();
            pool_inodes.push(fs::metadata(&p).unwrap().ino());
        }
        let mut devs = Vec::new();
        for d in CHAR_DEVICES {
            let Ok(st) = fs::metadata(d) else { continue };
            if !st.file_type().is_char_device() {
                continue;
            }
            let r = st.rdev();
            let (ma, mi) = (
                ((r >> 8) & 0xfff | (r >> 32) & !0xfff) as u32,
                (r & 0xff | (r >> 12) & !0xff) as u32,
            );
            if !devs.iter().any(|&(_, a, b)| (a, b) == (ma, mi)) {
                devs.push((*d, ma, mi));
            }
        }
        assert!(!devs.is_empty(), "no char device to stand for a DRM node");
        let split = |f: &[&'static str]| -> Vec<&'static str> {
            f.iter().flat_map(|t| t.lines()).collect()
        };
        Fixed {
            base,
            devs,
            pool_inodes,
            lines: [
                split(DRM_FIXTURES),
                split(DMABUF_FIXTURES),
                split(MAPS_FIXTURES),
                split(CLIENTS_FIXTURES),
                split(FB_FIXTURES),
                split(NAMES_FIXTURES),
            ],
        }
    })
}

/// Reads the input front to back; past its end every byte is 0.
struct In<'a>(&'a [u8]);

impl<'a> In<'a> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn below(&mut self, n: usize) -> usize {
        self.u8() as usize % n.max(1)
    }
    fn bytes(&mut self, max: usize) -> &'a [u8] {
        let n = self.below(max + 1).min(self.0.len());
        let (b, rest) = self.0.split_at(n);
        self.0 = rest;
        b
    }
    fn number(&mut self) -> u64 {
        match self.u8() % 6 {
            0 => 0,
            1 => u64::from(self.u8()),
            2 => u64::from(self.u8()) << 12,
            3 => u64::from(u16::from_le_bytes([self.u8(), self.u8()])) << 10,
            4 => u64::MAX - u64::from(self.u8()),
            _ => {
                let mut b = [0u8; 8];
                b.iter_mut().for_each(|x| *x = self.u8());
                u64::from_le_bytes(b)
            }
        }
    }
}

/// Replaces the first run of digits of `line` with `n`.
fn with_number(line: &str, n: u64) -> String {
    match line.find(|c: char| c.is_ascii_digit()) {
        Some(s) => {
            let e = line[s..]
                .find(|c: char| !c.is_ascii_digit())
                .map_or(line.len(), |k| s + k);
            format!("{}{n}{}", &line[..s], &line[e..])
        }
        None => format!("{line}{n}"),
    }
}

/// A text of up to `max_lines` lines: fixture lines as they are or with a number of the
/// input, raw input bytes, or (`extra`) a line of the caller's.
fn text(
    inp: &mut In<'_>,
    lines: &[&str],
    max_lines: usize,
    extra: &mut dyn FnMut(&mut In<'_>) -> String,
) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..inp.below(max_lines + 1) {
        match inp.u8() % 8 {
            0..=2 => out.extend_from_slice(lines[inp.below(lines.len())].as_bytes()),
            3 | 4 => {
                let l = lines[inp.below(lines.len())];
                let n = inp.number();
                out.extend_from_slice(with_number(l, n).as_bytes());
            }
            5 => out.extend_from_slice(extra(inp).as_bytes()),
            _ => out.extend_from_slice(inp.bytes(48)),
        }
        if inp.u8() % 16 != 0 {
            out.push(b'\n');
        }
    }
    out
}

/// Every decimal number in `t` (lossy), as written.
fn numbers(t: &[u8], into: &mut Vec<u64>) {
    for w in t.split(|b| !b.is_ascii_digit()) {
        if let Some(n) = std::str::from_utf8(w).ok().and_then(|s| s.parse().ok()) {
            into.push(n);
        }
    }
}

#[derive(Default)]
struct Proc {
    drm_fds: BTreeSet<u32>,
    /// Those of them whose char device the sysfs calls a DRM node of a valid minor.
    drm_nodes: BTreeSet<u32>,
    /// Its fd directory was readable.
    read: bool,
    dmabuf: Option<u64>,
    /// Numbers of each fd's fdinfo.
    fdinfo_numbers: BTreeMap<u32, Vec<u64>>,
    /// Bytes of the GPU mappings of its maps (as the maps parser reads them).
    mapped: u128,
}

const DRM_KEYS: &[&str] = &[
    "drm-driver:\t",
    "drm-client-id:\t",
    "drm-client-name:\t",
    "drm-pdev:\t",
    "drm-total-vram:\t",
    "drm-shared-system:\t",
    "drm-resident-gtt:\t",
    "drm-purgeable-vram:\t",
    "drm-active-vram:\t",
    "drm-memory-vram:\t",
    "drm-engine-gfx:\t",
    "drm-engine-capacity-gfx:\t",
    "drm-cycles-gfx:\t",
    "drm-total-cycles-gfx:\t",
    "drm-maxfreq-gfx:\t",
    "ino:\t",
    "vram mem:\t",
];
const UNITS: &[&str] = &["", " KiB", " MiB", " GiB", " kB", " ns", " MHz", "%"];

fn drm_line(inp: &mut In<'_>) -> String {
    let k = DRM_KEYS[inp.below(DRM_KEYS.len())];
    let n = inp.number();
    let u = UNITS[inp.below(UNITS.len())];
    format!("{k}{n}{u}")
}

fn dmabuf_line(inp: &mut In<'_>) -> String {
    const K: &[&str] = &[
        "size:\t",
        "count:\t",
        "exp_name:\t",
        "name:\t",
        "ino:\t",
        "flags:\t",
    ];
    let k = K[inp.below(K.len())];
    if inp.u8() % 2 == 0 {
        format!("{k}{}", inp.number())
    } else {
        format!("{k}{}", String::from_utf8_lossy(inp.bytes(24)))
    }
}

fuzz_target!(|data: &[u8]| {
    let f = fixed();
    let mut inp = In(data);
    let root = f.base.join("t");
    let _ = fs::remove_dir_all(&root);
    let (proc_root, sys_root, debugfs_root) =
        (root.join("proc"), root.join("sys"), root.join("dri"));
    fs::create_dir_all(&proc_root).unwrap();
    fs::create_dir_all(sys_root.join("dev/char")).unwrap();
    fs::create_dir_all(sys_root.join("class/drm")).unwrap();
    fs::create_dir_all(sys_root.join("class/mem")).unwrap();

    let flags = inp.u8();
    // Which char devices are DRM nodes, of which parent; their debugfs files.
    let mut drm_minors = Vec::new();
    let mut debugfs_bytes = 0usize;
    for &(_, ma, mi) in &f.devs {
        let b = inp.u8();
        let dir = sys_root.join(format!("dev/char/{ma}:{mi}"));
        fs::create_dir_all(&dir).unwrap();
        let class = if b % 4 == 0 {
            "../../../class/mem"
        } else {
            "../../../class/drm"
        };
        symlink(class, dir.join("subsystem")).unwrap();
        if b % 4 != 0 {
            drm_minors.push(mi);
        }
        if b & 4 != 0 {
            let parent = sys_root.join(format!("devices/gpu{}", (b >> 3) % 3));
            fs::create_dir_all(&parent).unwrap();
            symlink(&parent, dir.join("device")).unwrap();
        }
        if b & 0x80 != 0 && !drm_minors.is_empty() {
            let d = debugfs_root.join(mi.to_string());
            fs::create_dir_all(&d).unwrap();
            for (i, name) in ["clients", "framebuffer", "gem_names"].iter().enumerate() {
                let t = text(&mut inp, &f.lines[3 + i], 12, &mut |i| {
                    format!("  x {} {} y y 0 0", PID_BASE + i.below(8) as u32, i.u8())
                });
                debugfs_bytes += t.len();
                fs::write(d.join(name), t).unwrap();
            }
        }
    }

    let nprocs = 1 + inp.below(6);
    let mut procs: BTreeMap<u32, Proc> = BTreeMap::new();
    let mut dirs = 0usize;
    let mut written = debugfs_bytes;
    for _ in 0..nprocs {
        let pid = PID_BASE + inp.below(8) as u32;
        let pdir = proc_root.join(pid.to_string());
        if pdir.exists() {
            continue;
        }
        dirs += 1;
        fs::create_dir_all(&pdir).unwrap();
        let shape = inp.u8();
        let comm = inp.bytes(20);
        fs::write(pdir.join("comm"), [comm, b"\n"].concat()).unwrap();
        fs::write(pdir.join("cmdline"), inp.bytes(32)).unwrap();
        let tgid = PID_BASE + inp.below(8) as u32;
        fs::write(
            pdir.join("status"),
            format!("Name:\tx\nTgid:\t{tgid}\nPid:\t{pid}\n"),
        )
        .unwrap();
        written += comm.len();
        let mut p = Proc::default();
        match shape % 8 {
            // Exited between the listing and the read.
            0 => {
                procs.insert(pid, p);
                continue;
            }
            // `fd` is not a directory: unreadable.
            1 => {
                fs::write(pdir.join("fd"), b"").unwrap();
                procs.insert(pid, p);
                continue;
            }
            _ => {}
        }
        let fd_dir = pdir.join("fd");
        let fdinfo_dir = pdir.join("fdinfo");
        fs::create_dir_all(&fd_dir).unwrap();
        if shape & 8 == 0 {
            fs::create_dir_all(&fdinfo_dir).unwrap();
        }
        p.read = true;
        let pool = inp.below(POOL);
        for _ in 0..inp.below(7) {
            let fd = u32::from(inp.u8() % 32);
            let link = fd_dir.join(fd.to_string());
            if fs::symlink_metadata(&link).is_ok() {
                continue;
            }
            let kind = inp.u8() % 8;
            let target: String = match kind {
                0..=2 => {
                    let (path, _, mi) = f.devs[inp.below(f.devs.len())];
                    let node = matches!(mi, 0..64 | 128..192);
                    if node && drm_minors.contains(&mi) {
                        p.drm_nodes.insert(fd);
                    }
                    path.to_string()
                }
                3 | 4 => {
                    let anon = fd_dir.join("anon_inode:dmabuf");
                    if fs::symlink_metadata(&anon).is_err() {
                        fs::hard_link(f.base.join("pool").join(pool.to_string()), &anon).unwrap();
                    }
                    p.dmabuf = Some(f.pool_inodes[pool]);
                    "anon_inode:dmabuf".into()
                }
                // A link's text holds any byte but NUL.
                5 => format!(
                    "/dmabuf:{}",
                    String::from_utf8_lossy(inp.bytes(8)).replace('\0', "_")
                ),
                6 => format!("socket:[{}]", inp.u8()),
                _ => "/dev/shm".into(),
            };
            symlink(&target, &link).unwrap();
            if kind <= 2 {
                p.drm_fds.insert(fd);
            }
            if inp.u8() % 8 != 0 {
                let t = if kind <= 2 {
                    text(&mut inp, &f.lines[0], 16, &mut drm_line)
                } else {
                    text(&mut inp, &f.lines[1], 8, &mut dmabuf_line)
                };
                let mut n = Vec::new();
                numbers(&t, &mut n);
                p.fdinfo_numbers.insert(fd, n);
                written += t.len();
                let _ = fs::write(fdinfo_dir.join(fd.to_string()), t);
            }
        }
        if shape & 16 == 0 {
            let pool_inodes = &f.pool_inodes;
            let t = text(&mut inp, &f.lines[2], 12, &mut |i| {
                const PATHS: &[&str] = &[
                    "/dev/dri/card0",
                    "/dev/dri/renderD128",
                    "/dmabuf:",
                    "/dmabuf:frame",
                    "/drm mm object (deleted)",
                    "anon_inode:dmabuf",
                ];
                let start = u64::from(i.u8()) << 16 | 0x7f00_0000_0000;
                let end = start + ((1 + u64::from(i.u8())) << 12);
                let ino = pool_inodes[i.below(POOL)];
                let path = PATHS[i.below(PATHS.len())];
                format!("{start:x}-{end:x} rw-s {:x} 00:0a {ino} {path}", i.number())
            });
            p.mapped = drmtool::maps::parse_bytes(&t)
                .gpu
                .iter()
                .map(|m| u128::from(m.len()))
                .sum();
            written += t.len();
            fs::write(pdir.join("maps"), t).unwrap();
        }
        procs.insert(pid, p);
    }
    if flags & 1 != 0 {
        fs::create_dir_all(proc_root.join("self")).unwrap();
    }
    let cgroup_root = root.join("cgroup");
    let cgroups = cgroup_tree(&mut inp, &cgroup_root);
    written += cgroups.written;

    let opts = drmtool::Options {
        proc_root,
        debugfs_root,
        sys_root,
        cgroup_root,
        pids: Vec::new(),
        skip: drmtool::scan::Skip {
            maps: flags & 2 != 0,
            debugfs: flags & 4 != 0,
            kcmp: flags & 8 != 0,
        },
    };
    let r = drmtool::scan(&opts).expect("the synthetic /proc is listable");
    check(&r, &procs, dirs, &f.pool_inodes);
    check_dmem(&r, &cgroups);

    let by = [By::Process, By::Client, By::Buffer][usize::from(flags >> 4) % 3];
    let sort = [SortKey::Size, SortKey::Pid, SortKey::Name][usize::from(flags >> 6) % 3];
    let table = drmtool::render::tables(&r, by, sort, false);
    let json = serde_json::to_string(&r).unwrap();
    let dmem_rows = r
        .dmem
        .as_ref()
        .map_or(0, |d| d.regions.len() + d.charges.len());
    let items = 1
        + r.processes.len()
        + r.clients.len()
        + r.dmabufs.len()
        + r.devices.len()
        + dmem_rows;
    let bound = 64 * 1024 + 32 * (written + data.len()) * items;
    assert!(
        table.len() <= bound,
        "tables: {} bytes for {} of input",
        table.len(),
        written
    );
    assert!(
        json.len() <= bound,
        "json: {} bytes for {} of input",
        json.len(),
        written
    );
    if let Some(c) = table.chars().find(|&c| c != '\n' && c.is_control()) {
        panic!(
            "control character {c:?} in the tables:\n{}",
            table.escape_debug()
        );
    }
});

fn check(r: &drmtool::Report, procs: &BTreeMap<u32, Proc>, dirs: usize, pool: &[u64]) {
    let s = &r.scan;
    assert_eq!(s.processes, dirs, "every pid directory is listed");
    assert_eq!(s.read + s.unreadable + s.vanished, s.processes, "{s:?}");
    assert_eq!(s.unreadable, r.unreadable.len());
    for u in &r.unreadable {
        assert!(procs.contains_key(&u.pid));
    }
    let gib = 1u128 << 30;
    let fdinfo_sum = |at: &drmtool::scan::FdRef| -> u128 {
        procs[&at.pid]
            .fdinfo_numbers
            .get(&at.fd)
            .map_or(0, |n| n.iter().map(|&v| u128::from(v)).sum())
    };
    for c in &r.clients {
        for h in &c.holders {
            assert!(
                procs[&h.pid].drm_fds.contains(&h.fd),
                "client holder {h:?} is no DRM fd"
            );
        }
        let most: u128 = c.holders.iter().map(fdinfo_sum).sum::<u128>() * gib;
        for fig in [&c.memory_total, &c.memory_shared] {
            if let Some(v) = fig.value {
                assert!(
                    u128::from(v) <= most,
                    "client {} memory {v} > its fdinfo's {most}",
                    c.index
                );
            }
        }
    }
    for d in &r.devices {
        let clients: u128 = r
            .clients
            .iter()
            .filter(|c| c.device == d.index)
            .filter_map(|c| c.memory_total.value)
            .map(u128::from)
            .sum();
        if let Some(v) = d.memory_total.value {
            assert!(
                u128::from(v) <= clients,
                "device {} total {v} > its clients' {clients}",
                d.index
            );
        }
    }
    for b in &r.dmabufs {
        assert!(
            pool.contains(&b.inode) || !b.mapped_by.is_empty(),
            "dma-buf {} from nowhere",
            b.inode
        );
        for h in &b.holders {
            assert_eq!(procs[&h.pid].dmabuf, Some(b.inode), "holder {h:?}");
        }
        if let Some(v) = b.size.value {
            let traced = b.holders.iter().any(|h| {
                procs[&h.pid]
                    .fdinfo_numbers
                    .get(&h.fd)
                    .is_some_and(|n| n.contains(&v))
            });
            assert!(
                traced,
                "dma-buf {} size {v} is in no holder's fdinfo",
                b.inode
            );
        }
    }
    for sh in &r.sharing {
        assert!(sh.processes.len() > 1);
        assert!(sh.processes.iter().all(|p| procs.contains_key(p)));
    }
    for (pid, tree) in procs {
        if tree.read && !tree.drm_nodes.is_empty() {
            let p = r
                .processes
                .iter()
                .find(|p| p.pid == *pid)
                .expect("a DRM holder is reported");
            let fds: BTreeSet<u32> = p.drm_fds.iter().map(|d| d.fd).collect();
            assert!(
                tree.drm_nodes.is_subset(&fds),
                "pid {pid}: DRM fds {:?}, reported {fds:?}",
                tree.drm_nodes
            );
        }
    }
    for p in &r.processes {
        let tree = procs.get(&p.pid).expect("a process of the tree");
        for d in &p.drm_fds {
            assert!(
                tree.drm_fds.contains(&d.fd),
                "pid {} fd {} is no DRM fd",
                p.pid,
                d.fd
            );
            assert!(d.client < r.clients.len());
        }
        for b in &p.dmabuf_fds {
            assert_eq!(tree.dmabuf, Some(b.inode));
        }
        let mapped = [&p.mapped_drm, &p.mapped_gem_shmem]
            .iter()
            .filter_map(|f| f.value)
            .map(u128::from)
            .sum::<u128>();
        assert!(
            mapped <= tree.mapped,
            "pid {} maps {mapped} > its lines' {}",
            p.pid,
            tree.mapped
        );
        if let Some(v) = p.dmabuf_bytes.value {
            let mut inodes: BTreeSet<u64> = p.dmabuf_fds.iter().map(|b| b.inode).collect();
            inodes.extend(p.dmabuf_mappings.iter().copied());
            let sum: u128 = inodes
                .iter()
                .filter_map(|i| r.dmabufs.iter().find(|b| b.inode == *i))
                .filter_map(|b| b.size.value)
                .map(u128::from)
                .sum();
            // The scan's sums saturate.
            assert_eq!(
                u128::from(v),
                sum.min(u128::from(u64::MAX)),
                "pid {} dma-buf bytes",
                p.pid
            );
        }
    }
}

/// Lines of dmem files as the kernel writes them (`dmem.capacity`, `.current`, `.max`).
const DMEM_LINES: &[&str] = &[
    "drm/0000:00:02.0/vram0 16777216",
    "drm/0000:00:05.0/vram0 0",
    "drm/0000:00:05.0/vram0 max",
    "ttm/system 1073741824",
];

fn dmem_line(inp: &mut In<'_>) -> String {
    let region = String::from_utf8_lossy(inp.bytes(24)).into_owned();
    if inp.u8() % 4 == 0 {
        format!("{region} max")
    } else {
        format!("{region} {}", inp.number())
    }
}

/// The synthetic cgroup v2 tree: what the scan may report of it.
#[derive(Default)]
struct Cgroups {
    /// `dmem.capacity` was written.
    capacity: bool,
    /// Numbers of `dmem.capacity`.
    capacity_numbers: Vec<u64>,
    /// Each cgroup (`/a/b`, as the scan names it): numbers of its `dmem.current` and
    /// `dmem.max`, and the lines of its `dmem.current`.
    groups: BTreeMap<String, (Vec<u64>, Vec<u64>, usize)>,
    written: usize,
}

/// Writes a cgroup root under `root` from the input: maybe a `dmem.capacity`, and up to 6
/// cgroups (names of the input's bytes, any byte but `/` and NUL; nested or not) with
/// `dmem.current` and `dmem.max`.
fn cgroup_tree(inp: &mut In<'_>, root: &Path) -> Cgroups {
    let mut c = Cgroups::default();
    fs::create_dir_all(root).unwrap();
    if inp.u8() % 2 == 0 {
        return c;
    }
    let t = text(inp, DMEM_LINES, 6, &mut dmem_line);
    numbers(&t, &mut c.capacity_numbers);
    c.written += t.len();
    c.capacity = true;
    fs::write(root.join("dmem.capacity"), t).unwrap();
    let mut made: Vec<String> = Vec::new();
    for _ in 0..inp.below(7) {
        let raw = String::from_utf8_lossy(inp.bytes(12)).replace(['/', '\0'], "_");
        if raw.is_empty() || raw == "." || raw == ".." {
            continue;
        }
        let rel = match inp.below(made.len() + 1) {
            0 => format!("/{raw}"),
            k => format!("{}/{raw}", made[k - 1]),
        };
        let dir = root.join(&rel[1..]);
        if dir.exists() {
            continue;
        }
        fs::create_dir_all(&dir).unwrap();
        let (mut cur, mut max) = (Vec::new(), Vec::new());
        let current = text(inp, DMEM_LINES, 4, &mut dmem_line);
        let lines = String::from_utf8_lossy(&current).lines().count();
        numbers(&current, &mut cur);
        c.written += current.len() + rel.len();
        fs::write(dir.join("dmem.current"), current).unwrap();
        if inp.u8() % 4 != 0 {
            let m = text(inp, DMEM_LINES, 4, &mut dmem_line);
            numbers(&m, &mut max);
            c.written += m.len();
            fs::write(dir.join("dmem.max"), m).unwrap();
        }
        c.groups.insert(rel.clone(), (cur, max, lines));
        made.push(rel);
    }
    c
}

/// Every dmem figure of the report is one of its file's numbers; every charged cgroup is
/// one of the tree's, with no more rows than its `dmem.current` has lines.
fn check_dmem(r: &drmtool::Report, c: &Cgroups) {
    let Some(d) = &r.dmem else {
        return;
    };
    assert!(c.capacity, "a dmem report without a dmem.capacity");
    for reg in &d.regions {
        assert!(
            reg.capacity == u64::MAX || c.capacity_numbers.contains(&reg.capacity),
            "capacity {} of {:?} is none of the file's",
            reg.capacity,
            reg.region
        );
        assert!(reg.region.bytes().all(|b| b.is_ascii_graphic()));
    }
    let mut rows: BTreeMap<&str, usize> = BTreeMap::new();
    for ch in &d.charges {
        let Some((cur, max, lines)) = c.groups.get(&ch.cgroup) else {
            panic!("charge of {:?}, no cgroup of the tree", ch.cgroup);
        };
        assert!(cur.contains(&ch.current), "{ch:?}: current is none of the file's");
        if let Some(m) = ch.max {
            assert!(max.contains(&m), "{ch:?}: max is none of the file's");
        }
        let n = rows.entry(ch.cgroup.as_str()).or_default();
        *n += 1;
        assert!(*n <= *lines, "{:?}: more rows than lines", ch.cgroup);
    }
}
