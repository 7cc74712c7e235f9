//! `drmtool hmm probe`: the test_hmm mirror devices with the request numbering their kernel
//! uses and which requests it answers, udmabuf with its limits, and which
//! [`hmm::HostRegistration`] backends work here.
//!
//! Every request is probed on one page of fresh private anonymous memory that this process
//! owns, so nothing else is touched: the device reads it, writes it (then the page is read
//! back to check), snapshots it, migrates it to device memory and back, takes exclusive
//! access to it and checks that, and finally `HMM_DMIRROR_RELEASE` hands back whatever
//! device memory the mirror holds (contents unchanged; on a mirror other processes use at
//! the same time, their pages move back to system memory too, as when they exit).
//! Requests the detected numbering does not have are not sent (`unsupported`).

use crate::errno::error_class;
use crate::probe::Probe;
use drm_gem::{Mmap, MmapOptions, Prot, Sharing};
use hmm::{Backend, Dmirror, HmmLayout, HostRegistration, PageRange, SealedMemfd, Udmabuf};
use rustix::fd::AsFd;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// The JSON schema version of `drmtool hmm probe --json`.
pub const HMM_SCHEMA_VERSION: u32 = 1;

/// How [`HmmLayout::detect`] decides, in words (the report's `layout.method`).
pub const LAYOUT_METHOD: &str = "request 6 (CHECK_EXCLUSIVE in the 6.0 numbering) on one page \
     at address 0, which only reads the mirror's own page table: 0 or EPERM means the 6.0 \
     numbering; on EINVAL request 5 (CHECK_EXCLUSIVE in the 5.14 numbering): 0 or EPERM means \
     5.14, EINVAL means 5.10; the answer must agree with the kernel version (uname), else \
     the device is refused rather than guessed";

/// Where udmabuf's module parameters live.
pub const UDMABUF_PARAMETERS: &str = "/sys/module/udmabuf/parameters";

/// `drmtool hmm probe --json`.
#[derive(Debug, Clone, Serialize)]
pub struct HmmReport {
    /// [`HMM_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// `uname -r`.
    pub kernel: String,
    /// The test_hmm mirror devices.
    pub test_hmm: TestHmm,
    /// The udmabuf device.
    pub udmabuf: UdmabufReport,
    /// Backend name (`pinned`, `udmabuf`, `dmirror`, `cuda`) -> whether
    /// [`HostRegistration`] works with it here, probed on one page.
    pub host_registration: BTreeMap<String, Probe>,
}

/// test_hmm: whether it is loaded and what each mirror node answers.
#[derive(Debug, Clone, Serialize)]
pub struct TestHmm {
    /// test_hmm's character major (`HMM_DMIRROR` in `/proc/devices`); null when the module
    /// is not loaded.
    pub major: Option<u32>,
    /// Why there is no device to probe, when there is none.
    pub reason: Option<String>,
    /// Each `/dev/hmm_dmirror*` node, by unit.
    pub devices: Vec<MirrorDevice>,
}

/// One mirror node.
#[derive(Debug, Clone, Serialize)]
pub struct MirrorDevice {
    /// The node (`/dev/hmm_dmirror0`).
    pub path: String,
    /// Its unit number.
    pub unit: u32,
    /// `device-private` (units 0 and 1) or `device-coherent` (2 and 3, since Linux 6.0).
    pub memory: &'static str,
    /// The request numbering and how it was decided.
    pub layout: LayoutReport,
    /// Request (`read`, `write`, `migrate_to_device`, `migrate_to_system`, `snapshot`,
    /// `exclusive`, `check_exclusive`, `release`) -> the probe's outcome.
    pub requests: BTreeMap<String, Probe>,
}

/// The request numbering of a mirror device.
#[derive(Debug, Clone, Serialize)]
pub struct LayoutReport {
    /// `5.10`, `5.14` or `6.0` (the first kernel of that numbering); null when it could
    /// not be told for sure or the node did not open.
    pub layout: Option<&'static str>,
    /// The numbering the running kernel's version implies (the probe's cross-check).
    pub kernel_expects: &'static str,
    /// `ok`, or the errno class of what failed (`EACCES` on open, `unsupported` when the
    /// probe's answer and the kernel version disagree, ...).
    pub class: String,
    /// How the numbering is decided ([`LAYOUT_METHOD`]).
    pub method: &'static str,
    /// The error, when there is one.
    pub detail: Option<String>,
}

/// udmabuf: the node, the two create requests and the limits.
#[derive(Debug, Clone, Serialize)]
pub struct UdmabufReport {
    /// `open(/dev/udmabuf)`.
    pub node: Probe,
    /// `UDMABUF_CREATE` of one page of a sealed memfd.
    pub create: Probe,
    /// `UDMABUF_CREATE_LIST` of two one-page items.
    pub create_list: Probe,
    /// The module parameters as the kernel shows them (null: not shown, where udmabuf has
    /// fixed limits and no parameters, as on 5.10.262; from Linux 5.14 (5.15, 6.1, 6.12
    /// here) it shows `list_limit` and `size_limit_mb`). Read from sysfs, never inferred
    /// from a version.
    pub parameters: UdmabufParameters,
    /// The limits in force ([`Udmabuf::limits`]: the parameters, else the fixed defaults);
    /// null when the node did not open.
    pub limits: Option<Limits>,
}

/// `/sys/module/udmabuf/parameters/*`.
#[derive(Debug, Clone, Serialize)]
pub struct UdmabufParameters {
    /// The directory, when it exists.
    pub path: Option<String>,
    /// `size_limit_mb`: the largest buffer in MiB.
    pub size_limit_mb: Option<u64>,
    /// `list_limit`: the most items in one `UDMABUF_CREATE_LIST`.
    pub list_limit: Option<u64>,
}

/// [`hmm::UdmabufLimits`], serialisable.
#[derive(Debug, Clone, Serialize)]
pub struct Limits {
    /// Most items in one list.
    pub list_limit: u32,
    /// Largest buffer in bytes.
    pub size_limit_bytes: u64,
}

fn layout_name(l: HmmLayout) -> &'static str {
    match l {
        HmmLayout::V5_10 => "5.10",
        HmmLayout::V5_14 => "5.14",
        HmmLayout::V6_0 => "6.0",
    }
}

/// `uname -r` and its major.minor.
fn kernel() -> (String, (u32, u32)) {
    let rel = rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned();
    let mut it = rel
        .split(|c: char| !c.is_ascii_digit())
        .map(|s| s.parse().unwrap_or(0));
    let major = it.next().unwrap_or(0);
    let minor = it.next().unwrap_or(0);
    (rel, (major, minor))
}

/// test_hmm's character major from `/proc/devices`.
pub fn dmirror_major() -> Option<u32> {
    let text = std::fs::read_to_string("/proc/devices").ok()?;
    text.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        let major = it.next()?.parse().ok()?;
        (it.next()? == "HMM_DMIRROR").then_some(major)
    })
}

/// The `/dev/hmm_dmirrorN` nodes, by unit.
pub fn mirror_nodes() -> Vec<(u32, std::path::PathBuf)> {
    let mut v: Vec<(u32, std::path::PathBuf)> = std::fs::read_dir("/dev")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let unit = name.strip_prefix("hmm_dmirror")?.parse().ok()?;
            Some((unit, e.path()))
        })
        .collect();
    v.sort();
    v
}

/// Runs every probe.
pub fn probe() -> HmmReport {
    let (kernel, version) = kernel();
    HmmReport {
        schema_version: HMM_SCHEMA_VERSION,
        kernel,
        test_hmm: test_hmm(version),
        udmabuf: udmabuf(),
        host_registration: host_registration(),
    }
}

fn test_hmm(version: (u32, u32)) -> TestHmm {
    let major = dmirror_major();
    let nodes = mirror_nodes();
    let reason = match (major, nodes.is_empty()) {
        (None, true) => Some(
            "test_hmm is not loaded: no HMM_DMIRROR in /proc/devices and no /dev/hmm_dmirror* \
             (it needs CONFIG_TEST_HMM; try `modprobe test_hmm`)"
                .to_string(),
        ),
        (Some(m), true) => Some(format!(
            "test_hmm is loaded (major {m}) but /dev has no hmm_dmirror node (kernels before \
             5.16 make none: mknod /dev/hmm_dmirror0 c {m} 0)"
        )),
        _ => None,
    };
    let expects = layout_name(HmmLayout::for_kernel_version(version.0, version.1));
    let devices = nodes
        .into_iter()
        .map(|(unit, path)| mirror_device(unit, &path, expects))
        .collect();
    TestHmm {
        major,
        reason,
        devices,
    }
}

const REQUESTS: [&str; 8] = [
    "read",
    "write",
    "snapshot",
    "migrate_to_device",
    "migrate_to_system",
    "exclusive",
    "check_exclusive",
    "release",
];

fn request_macro(req: &str, layout: Option<HmmLayout>) -> &'static str {
    match req {
        "read" => "HMM_DMIRROR_READ",
        "write" => "HMM_DMIRROR_WRITE",
        "snapshot" => "HMM_DMIRROR_SNAPSHOT",
        "migrate_to_device" if layout == Some(HmmLayout::V6_0) => "HMM_DMIRROR_MIGRATE_TO_DEV",
        "migrate_to_device" => "HMM_DMIRROR_MIGRATE",
        "migrate_to_system" => "HMM_DMIRROR_MIGRATE_TO_SYS",
        "exclusive" => "HMM_DMIRROR_EXCLUSIVE",
        "check_exclusive" => "HMM_DMIRROR_CHECK_EXCLUSIVE",
        _ => "HMM_DMIRROR_RELEASE",
    }
}

fn mirror_device(unit: u32, path: &Path, expects: &'static str) -> MirrorDevice {
    let memory = if unit < 2 {
        "device-private"
    } else {
        "device-coherent"
    };
    let mut dev = MirrorDevice {
        path: path.display().to_string(),
        unit,
        memory,
        layout: LayoutReport {
            layout: None,
            kernel_expects: expects,
            class: "ok".into(),
            method: LAYOUT_METHOD,
            detail: None,
        },
        requests: BTreeMap::new(),
    };
    match Dmirror::open_path(path) {
        Ok(d) => {
            dev.layout.layout = Some(layout_name(d.layout()));
            dev.requests = probe_requests(&d);
        }
        Err(e) => {
            dev.layout.class = error_class(&e);
            dev.layout.detail = Some(e.to_string());
            for r in REQUESTS {
                dev.requests.insert(
                    r.into(),
                    Probe::skipped(
                        request_macro(r, None),
                        "the device did not open with a known numbering",
                    ),
                );
            }
        }
    }
    dev
}

/// Probe outcome of a mirror request, with the kernel's counters.
fn mirror_probe(call: &str, r: &drm_gem::Result<hmm::MirrorReport>) -> Probe {
    let mut p = Probe::of(call, r, |m| {
        Some(format!("cpages {}, faults {}", m.cpages, m.faults))
    });
    if p.class == "EBUSY" {
        p.detail = Some(format!(
            "the kernel knows the request but could not complete it on the page: {}",
            p.detail.unwrap_or_default()
        ));
    }
    p
}

/// A snapshot state in words: `system page, read+write`.
fn state_text(s: hmm::PageState) -> String {
    match s {
        hmm::PageState::Error => "error (nothing mapped, or no access)".into(),
        hmm::PageState::None => "none (not populated, or not accessible to the device)".into(),
        hmm::PageState::Mapped { kind, prot } => {
            let p: Vec<String> = prot
                .iter_names()
                .map(|(n, _)| n.to_ascii_lowercase())
                .collect();
            format!("mapped, {kind:?}, {}", p.join("+"))
        }
    }
}

fn mismatch(call: &str, what: &str) -> Probe {
    Probe {
        supported: false,
        class: "error".into(),
        probe: call.into(),
        detail: Some(what.into()),
    }
}

fn probe_requests(d: &Dmirror) -> BTreeMap<String, Probe> {
    let layout = Some(d.layout());
    let call = |r: &str| request_macro(r, layout);
    let mut m = BTreeMap::new();
    let page = hmm::dmirror::page_size();
    let mut map = Mmap::anonymous(page, Prot::READ | Prot::WRITE);
    let map = match map.as_mut().map(|m| m.as_mut_slice()) {
        Ok(Some(mem)) => mem,
        other => {
            let why = match other {
                Err(e) => format!("mmap of one anonymous page failed: {}", errno_text(e)),
                Ok(_) => "the anonymous page cannot be borrowed as a slice".to_string(),
            };
            for r in REQUESTS {
                m.insert(r.to_string(), Probe::skipped(call(r), &why));
            }
            return m;
        }
    };
    let pattern: Vec<u8> = (0..page).map(|i| (i % 251) as u8).collect();
    let inverse: Vec<u8> = pattern.iter().map(|b| !b).collect();
    map.copy_from_slice(&pattern);
    let range = match PageRange::of(map) {
        Ok(r) => r,
        Err(e) => {
            for r in REQUESTS {
                m.insert(
                    r.to_string(),
                    Probe::skipped(call(r), &format!("no page range: {e}")),
                );
            }
            return m;
        }
    };
    let mut out = vec![0u8; page];

    let r = d.read(range, &mut out);
    let p = match &r {
        Ok(_) if out != pattern => mismatch(
            call("read"),
            "the device read other bytes than the page holds",
        ),
        _ => mirror_probe(call("read"), &r),
    };
    m.insert("read".into(), p);

    let r = d.write_into(map, &inverse);
    let p = match &r {
        Ok(_) if *map != *inverse.as_slice() => mismatch(
            call("write"),
            "the page does not hold what the device wrote",
        ),
        _ => mirror_probe(call("write"), &r),
    };
    m.insert("write".into(), p);
    let now = if r.is_ok() { &inverse } else { &pattern };

    let s = d.snapshot(range);
    m.insert(
        "snapshot".into(),
        Probe::of(call("snapshot"), &s, |s| {
            s.first().map(|st| format!("the page: {}", state_text(*st)))
        }),
    );

    out.fill(0);
    let r = d.migrate_to_device(range, &mut out);
    let p = match &r {
        Ok(_) if &out != now => mismatch(
            call("migrate_to_device"),
            "the device's copy differs from the page",
        ),
        _ => mirror_probe(call("migrate_to_device"), &r),
    };
    m.insert("migrate_to_device".into(), p);
    m.insert(
        "migrate_to_system".into(),
        mirror_probe(call("migrate_to_system"), &d.migrate_to_system(range)),
    );
    // A CPU read faults the page back from wherever it is now; its bytes must not change.
    if *map != *now.as_slice() {
        m.insert(
            "migrate_to_device".into(),
            mismatch(
                call("migrate_to_device"),
                "the page reads back differently after the migration",
            ),
        );
    }

    out.fill(0);
    let r = d.make_exclusive(range, &mut out);
    m.insert("exclusive".into(), mirror_probe(call("exclusive"), &r));
    let c = d.check_exclusive(range);
    m.insert(
        "check_exclusive".into(),
        Probe::of(call("check_exclusive"), &c, |held| {
            Some(format!("the device holds exclusive access: {held}"))
        }),
    );
    // Touching the page from the CPU ends the device's exclusive access.
    std::hint::black_box(map.first().copied());
    m.insert(
        "release".into(),
        Probe::of(call("release"), &d.release(), |()| None),
    );
    m
}

fn udmabuf_open_hint(p: &mut Probe) {
    if p.class == "ENOENT" {
        p.detail = Some(if Path::new("/sys/module/udmabuf").exists() {
            "udmabuf is loaded but /dev/udmabuf is missing".into()
        } else {
            "no /dev/udmabuf: udmabuf is not loaded or not built (CONFIG_UDMABUF; try \
             `modprobe udmabuf`)"
                .into()
        });
    }
}

fn udmabuf() -> UdmabufReport {
    let param = |name: &str| -> Option<u64> {
        std::fs::read_to_string(Path::new(UDMABUF_PARAMETERS).join(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let parameters = UdmabufParameters {
        path: Path::new(UDMABUF_PARAMETERS)
            .is_dir()
            .then(|| UDMABUF_PARAMETERS.to_string()),
        size_limit_mb: param("size_limit_mb"),
        list_limit: param("list_limit"),
    };
    let u = Udmabuf::open();
    let mut node = Probe::of("open(/dev/udmabuf)", &u, |_| None);
    udmabuf_open_hint(&mut node);
    let u = match u {
        Ok(u) => u,
        Err(_) => {
            let why = "no /dev/udmabuf to ask";
            return UdmabufReport {
                node,
                create: Probe::skipped("UDMABUF_CREATE", why),
                create_list: Probe::skipped("UDMABUF_CREATE_LIST", why),
                parameters,
                limits: None,
            };
        }
    };
    let l = u.limits();
    let page = hmm::dmirror::page_size() as u64;
    let (create, create_list) = match SealedMemfd::new("drmtool-probe", 2 * page) {
        Ok(mfd) => {
            let one = u.create(&mfd, 0, page);
            let list = u.create_list(&[
                hmm::UdmabufRange {
                    memfd: &mfd,
                    offset: 0,
                    size: page,
                },
                hmm::UdmabufRange {
                    memfd: &mfd,
                    offset: page,
                    size: page,
                },
            ]);
            (
                Probe::of("UDMABUF_CREATE", &one, |_| {
                    Some("a dma-buf over one page of a sealed memfd".into())
                }),
                Probe::of("UDMABUF_CREATE_LIST", &list, |_| {
                    Some("a dma-buf over two one-page items".into())
                }),
            )
        }
        Err(e) => {
            let why = format!("no sealed memfd to offer: {e}");
            (
                Probe::skipped("UDMABUF_CREATE", &why),
                Probe::skipped("UDMABUF_CREATE_LIST", &why),
            )
        }
    };
    UdmabufReport {
        node,
        create,
        create_list,
        parameters,
        limits: Some(Limits {
            list_limit: l.list_limit,
            size_limit_bytes: l.size_limit,
        }),
    }
}

fn registration(call: &str, r: &drm_gem::Result<HostRegistration<'_>>) -> Probe {
    Probe::of(call, r, |reg| {
        Some(
            match (reg.dma_buf(), reg.mirror_report(), reg.page_frames()) {
                (Some(_), _, _) => "one page registered as a udmabuf dma-buf".into(),
                (_, Some(m), _) => format!(
                    "one page registered; the mirror device read {} page(s), {} fault round(s)",
                    m.cpages, m.faults
                ),
                (_, _, Some(f)) => format!(
                    "one page registered; page frames visible ({} listed)",
                    f.len()
                ),
                _ => "one page registered; page frames hidden (needs CAP_SYS_ADMIN)".into(),
            },
        )
    })
}

fn host_registration() -> BTreeMap<String, Probe> {
    let mut m = BTreeMap::new();
    let page = hmm::dmirror::page_size();
    let anon = |call: &str, b: Backend| -> Probe {
        let mut map = Mmap::anonymous(page, Prot::READ | Prot::WRITE);
        match map.as_mut().map(|m| m.as_mut_slice()) {
            Ok(Some(mem)) => {
                mem.fill(1);
                registration(call, &HostRegistration::new(mem, b))
            }
            Ok(None) => Probe::skipped(call, "the anonymous page cannot be borrowed as a slice"),
            Err(e) => Probe::skipped(
                call,
                &format!("mmap of one anonymous page failed: {}", errno_text(e)),
            ),
        }
    };
    m.insert(
        "pinned".into(),
        anon(
            "HostRegistration::new(Backend::Pinned) on an anonymous page",
            Backend::Pinned,
        ),
    );
    m.insert(
        "dmirror".into(),
        anon(
            "HostRegistration::new(Backend::Dmirror) on an anonymous page",
            Backend::Dmirror,
        ),
    );
    const UCALL: &str = "HostRegistration::new(Backend::Udmabuf) on a memfd page";
    let u = match SealedMemfd::new("drmtool-probe", page as u64) {
        Ok(mfd) => match Mmap::map(
            mfd.as_fd(),
            0,
            page,
            Prot::READ | Prot::WRITE,
            Sharing::Shared,
            MmapOptions::empty(),
        ) {
            Ok(mut map) => match map.write_at(0, &vec![1; page]) {
                Ok(()) => registration(UCALL, &crate::sys_call::register_udmabuf(&mut map)),
                Err(_) => Probe::skipped(UCALL, "the memfd mapping is shorter than a page"),
            },
            Err(e) => Probe::skipped(
                UCALL,
                &format!("mmap of the memfd failed: {}", errno_text(&e)),
            ),
        },
        Err(e) => Probe::skipped(UCALL, &format!("no memfd: {e}")),
    };
    m.insert("udmabuf".into(), u);
    m.insert(
        "cuda".into(),
        Probe {
            supported: false,
            class: "unsupported".into(),
            probe: "HostRegistration::new(Backend::Cuda)".into(),
            detail: Some(
                "drmtool is built without the hmm crate's `cuda` feature (it would load \
                 libcuda.so.1 at run time)"
                    .into(),
            ),
        },
    );
    m
}

/// The caps rows: the layout of the first mirror node (`test_hmm_layout`).
pub fn caps_layout() -> Probe {
    const CALL: &str = "HmmLayout::detect";
    let nodes = mirror_nodes();
    let Some((_, path)) = nodes.first() else {
        return Probe {
            supported: false,
            class: "ENOENT".into(),
            probe: CALL.into(),
            detail: Some(test_hmm(kernel().1).reason.unwrap_or_default()),
        };
    };
    match Dmirror::open_path(path) {
        Ok(d) => Probe::ok(
            CALL,
            Some(format!(
                "{}: the {} numbering, by the probe, confirmed by the kernel version",
                path.display(),
                layout_name(d.layout())
            )),
        ),
        Err(e) => Probe::failed(CALL, &e),
    }
}

/// The caps rows for udmabuf: `open(/dev/udmabuf)` and `UDMABUF_CREATE`.
pub fn caps_udmabuf() -> (Probe, Probe) {
    let r = udmabuf();
    let mut node = r.node;
    if node.supported {
        node.detail = r.limits.map(|l| {
            format!(
                "limits: list_limit {}, size_limit {} MiB ({})",
                l.list_limit,
                l.size_limit_bytes >> 20,
                if r.parameters.path.is_some() {
                    "module parameters"
                } else {
                    "fixed defaults: no module parameters"
                }
            )
        });
    }
    (node, r.create)
}

fn cell(p: &Probe) -> String {
    if p.supported {
        "yes".into()
    } else {
        format!("no ({})", p.class)
    }
}

fn row(s: &mut String, indent: &str, name: &str, p: &Probe) {
    use std::fmt::Write;
    let _ = writeln!(
        s,
        "{indent}{name:<18} {:<18} {}",
        cell(p),
        p.detail.as_deref().unwrap_or("")
    );
}

/// The human view.
pub fn render(r: &HmmReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "kernel {}", r.kernel);
    let t = &r.test_hmm;
    match t.major {
        Some(m) => {
            let _ = writeln!(s, "test_hmm: loaded (major {m})");
        }
        None => {
            let _ = writeln!(s, "test_hmm: not loaded");
        }
    }
    if let Some(why) = &t.reason {
        let _ = writeln!(s, "  {why}");
    }
    for d in &t.devices {
        let l = &d.layout;
        let _ = match l.layout {
            Some(name) => writeln!(
                s,
                "  {} ({}): request numbering {name} (probed; Linux {} expects {})",
                d.path,
                d.memory,
                r.kernel.split('-').next().unwrap_or(&r.kernel),
                l.kernel_expects
            ),
            None => writeln!(
                s,
                "  {} ({}): cannot tell the request numbering: no ({}) {}",
                d.path,
                d.memory,
                l.class,
                l.detail.as_deref().unwrap_or("")
            ),
        };
        for name in REQUESTS {
            if let Some(p) = d.requests.get(name) {
                row(&mut s, "    ", name, p);
            }
        }
    }
    let _ = writeln!(s, "udmabuf:");
    let u = &r.udmabuf;
    row(&mut s, "  ", "node", &u.node);
    row(&mut s, "  ", "create", &u.create);
    row(&mut s, "  ", "create_list", &u.create_list);
    let opt = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    let _ = writeln!(
        s,
        "  parameters         {}",
        match &u.parameters.path {
            Some(p) => format!(
                "size_limit_mb {}, list_limit {} ({p})",
                opt(u.parameters.size_limit_mb),
                opt(u.parameters.list_limit)
            ),
            None => format!("none ({UDMABUF_PARAMETERS} does not exist)"),
        }
    );
    if let Some(l) = &u.limits {
        let _ = writeln!(
            s,
            "  limits             list_limit {}, size_limit {} MiB",
            l.list_limit,
            l.size_limit_bytes >> 20
        );
    }
    let _ = writeln!(s, "host registration backends:");
    for (k, p) in &r.host_registration {
        row(&mut s, "  ", k, p);
    }
    s
}

/// An `mmap` failure as the probe reports it: the errno's name where there is one.
fn errno_text(e: &drm_gem::Error) -> String {
    match e.errno() {
        Some(errno) => crate::errno::errno_name(errno),
        None => e.to_string(),
    }
}
