//! `drmtool caps`: which uapi families the running kernel and each driver support, each
//! decided by a harmless probe (no modeset, nothing shown) whose errno is reported.

use crate::errno::errno_name;
use crate::probe::Probe;
use drm_gem::kms::FbSpec;
use drm_gem::{
    ClientCap, Device, DmaBufSync, DumbBuffer, DumbSpec, NodeInfo, PrimeFlags, Syncobjs,
};
use serde::Serialize;
use std::collections::BTreeMap;

/// The JSON schema version of `drmtool caps --json`.
pub const CAPS_SCHEMA_VERSION: u32 = 1;

/// The probes of one device, by family (sorted keys).
#[derive(Debug, Clone, Serialize)]
pub struct DeviceCaps {
    /// The node probed.
    pub path: String,
    /// Its driver.
    pub driver: Option<String>,
    /// Why the node could not be probed at all (open failed).
    pub error: Option<String>,
    /// Family name -> probe.
    pub probes: BTreeMap<String, Probe>,
}

/// `drmtool caps --json`.
#[derive(Debug, Clone, Serialize)]
pub struct CapsReport {
    /// [`CAPS_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// `uname -r`.
    pub kernel: String,
    /// Families that do not belong to one DRM device (sw_sync, udmabuf, udmabuf_create,
    /// dma_heap, test_hmm, test_hmm_layout).
    pub system: BTreeMap<String, Probe>,
    /// Per-device probes.
    pub devices: Vec<DeviceCaps>,
}

/// Probes every family on `nodes` and the system-wide ones.
pub fn probe_all(nodes: &[NodeInfo]) -> CapsReport {
    CapsReport {
        schema_version: CAPS_SCHEMA_VERSION,
        kernel: rustix::system::uname()
            .release()
            .to_string_lossy()
            .into_owned(),
        system: system_probes(),
        devices: nodes.iter().map(probe_device).collect(),
    }
}

fn system_probes() -> BTreeMap<String, Probe> {
    let mut m = BTreeMap::new();
    m.insert(
        "sw_sync".into(),
        Probe::of(
            "open(/sys/kernel/debug/sync/sw_sync)",
            &drm_gem::SwSyncTimeline::open(),
            |_| None,
        ),
    );
    let open = |p: &str| {
        rustix::fs::open(
            p,
            rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
    };
    let (udmabuf, udmabuf_create) = crate::hmm_probe::caps_udmabuf();
    m.insert("udmabuf".into(), udmabuf);
    m.insert("udmabuf_create".into(), udmabuf_create);
    m.insert(
        "dma_heap".into(),
        match std::fs::read_dir("/dev/dma_heap") {
            Ok(d) => {
                let mut heaps: Vec<String> = d
                    .filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect();
                heaps.sort();
                Probe {
                    supported: !heaps.is_empty(),
                    class: if heaps.is_empty() {
                        "ENOENT".into()
                    } else {
                        "ok".into()
                    },
                    probe: "readdir(/dev/dma_heap)".into(),
                    detail: Some(format!("heaps: [{}]", heaps.join(", "))),
                }
            }
            Err(e) => Probe {
                supported: false,
                class: e.raw_os_error().map_or("error".into(), |n| {
                    errno_name(drm_gem::Errno::from_raw_os_error(n))
                }),
                probe: "readdir(/dev/dma_heap)".into(),
                detail: None,
            },
        },
    );
    m.insert(
        "test_hmm".into(),
        match open("/dev/hmm_dmirror0") {
            Ok(_) => Probe::ok(
                "open(/dev/hmm_dmirror0)",
                Some("the node opens; `test_hmm_layout` has its request numbering".into()),
            ),
            Err(e) => Probe {
                supported: false,
                class: errno_name(e),
                probe: "open(/dev/hmm_dmirror0)".into(),
                detail: None,
            },
        },
    );
    m.insert("test_hmm_layout".into(), crate::hmm_probe::caps_layout());
    m
}

fn probe_device(n: &NodeInfo) -> DeviceCaps {
    let mut out = DeviceCaps {
        path: n.path.display().to_string(),
        driver: n.driver.clone(),
        error: None,
        probes: BTreeMap::new(),
    };
    let dev = match Device::open(&n.path) {
        Ok(d) => d,
        Err(e) => {
            out.error = Some(e.to_string());
            return out;
        }
    };
    let dumb = buffer_probes(&dev, &mut out.probes);
    syncobj_probes(&dev, &mut out.probes);
    kms_probes(&dev, &dumb, &mut out.probes);
    if n.driver.as_deref() == Some(drm_gem::driver::virtio_gpu::DRIVER_NAME) {
        virtio_gpu_params(&dev, &mut out.probes);
    }
    out
}

/// Buffers: dumb, PRIME, flink/open, dma-buf ioctls. Returns the dumb buffer (the KMS
/// probes put a framebuffer on it).
fn buffer_probes<'d>(
    dev: &'d Device,
    p: &mut BTreeMap<String, Probe>,
) -> drm_gem::Result<DumbBuffer<&'d Device>> {
    let mut put = |k: &str, v: Probe| {
        p.insert(k.to_string(), v);
    };
    // Buffers: dumb, PRIME, flink/open, dma-buf ioctls.
    let dumb = DumbBuffer::create(
        dev,
        DumbSpec {
            width: 64,
            height: 64,
            bpp: 32,
        },
    );
    put(
        "dumb",
        Probe::of("DRM_IOCTL_MODE_CREATE_DUMB", &dumb, |_| None),
    );
    match &dumb {
        Ok(b) => {
            put(
                "gem_flink",
                Probe::of("DRM_IOCTL_GEM_FLINK", &b.gem().flink(), |_| None),
            );
            match b.gem().flink() {
                Ok(name) => put(
                    "gem_open",
                    Probe::of("DRM_IOCTL_GEM_OPEN", &dev.open_name(name), |_| None),
                ),
                Err(_) => put(
                    "gem_open",
                    Probe::skipped("DRM_IOCTL_GEM_OPEN", "no flink name to open"),
                ),
            }
            let exported = dev.export(b.gem(), PrimeFlags::default());
            put(
                "prime_export",
                Probe::of("DRM_IOCTL_PRIME_HANDLE_TO_FD", &exported, |_| None),
            );
            match &exported {
                Ok(buf) => {
                    use rustix::fd::AsFd;
                    put(
                        "prime_import",
                        Probe::of(
                            "DRM_IOCTL_PRIME_FD_TO_HANDLE",
                            &dev.import(buf.as_fd()),
                            |_| None,
                        ),
                    );
                    let sf = buf.export_sync_file(DmaBufSync::READ);
                    put(
                        "dmabuf_export_sync_file",
                        Probe::of("DMA_BUF_IOCTL_EXPORT_SYNC_FILE", &sf, |_| None),
                    );
                    match &sf {
                        Ok(f) => put(
                            "dmabuf_import_sync_file",
                            Probe::of(
                                "DMA_BUF_IOCTL_IMPORT_SYNC_FILE",
                                &buf.import_sync_file(f.as_fd(), DmaBufSync::READ),
                                |_| None,
                            ),
                        ),
                        Err(_) => put(
                            "dmabuf_import_sync_file",
                            Probe::skipped(
                                "DMA_BUF_IOCTL_IMPORT_SYNC_FILE",
                                "no sync_file to import (export failed)",
                            ),
                        ),
                    }
                    put(
                        "dmabuf_set_name",
                        Probe::of("DMA_BUF_SET_NAME", &buf.set_name("drmtool-caps"), |_| None),
                    );
                }
                Err(_) => {
                    for (k, c) in [
                        ("prime_import", "DRM_IOCTL_PRIME_FD_TO_HANDLE"),
                        ("dmabuf_export_sync_file", "DMA_BUF_IOCTL_EXPORT_SYNC_FILE"),
                        ("dmabuf_import_sync_file", "DMA_BUF_IOCTL_IMPORT_SYNC_FILE"),
                        ("dmabuf_set_name", "DMA_BUF_SET_NAME"),
                    ] {
                        put(
                            k,
                            Probe::skipped(c, "no dma-buf to probe with (PRIME export failed)"),
                        );
                    }
                }
            }
        }
        Err(_) => {
            for (k, c) in [
                ("gem_flink", "DRM_IOCTL_GEM_FLINK"),
                ("gem_open", "DRM_IOCTL_GEM_OPEN"),
                ("prime_export", "DRM_IOCTL_PRIME_HANDLE_TO_FD"),
                ("prime_import", "DRM_IOCTL_PRIME_FD_TO_HANDLE"),
                ("dmabuf_export_sync_file", "DMA_BUF_IOCTL_EXPORT_SYNC_FILE"),
                ("dmabuf_import_sync_file", "DMA_BUF_IOCTL_IMPORT_SYNC_FILE"),
                ("dmabuf_set_name", "DMA_BUF_SET_NAME"),
            ] {
                put(
                    k,
                    Probe::skipped(c, "no GEM object to probe with (dumb create failed)"),
                );
            }
        }
    }
    dumb
}

/// Sync objects, asked without drm-gem's cap probe so the kernel's own errno shows.
fn syncobj_probes(dev: &Device, p: &mut BTreeMap<String, Probe>) {
    let mut put = |k: &str, v: Probe| {
        p.insert(k.to_string(), v);
    };
    // Sync objects, asked without drm-gem's cap probe so the kernel's own errno shows.
    let objs = Syncobjs::without_probe(dev);
    let so = objs.create(false);
    put(
        "syncobj",
        Probe::of("DRM_IOCTL_SYNCOBJ_CREATE", &so, |_| None),
    );
    match &so {
        Ok(s) => {
            put(
                "syncobj_timeline",
                Probe::of("DRM_IOCTL_SYNCOBJ_QUERY", &s.query(), |_| None),
            );
            let ev = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC);
            match ev {
                Ok(fd) => {
                    use rustix::fd::AsFd;
                    put(
                        "syncobj_eventfd",
                        Probe::of(
                            "DRM_IOCTL_SYNCOBJ_EVENTFD",
                            &s.eventfd(0, fd.as_fd(), drm_gem::SyncobjWaitFlags::empty()),
                            |_| None,
                        ),
                    );
                }
                Err(e) => put(
                    "syncobj_eventfd",
                    Probe::skipped(
                        "DRM_IOCTL_SYNCOBJ_EVENTFD",
                        &format!("eventfd(2) failed: {}", errno_name(e)),
                    ),
                ),
            }
        }
        Err(_) => {
            put(
                "syncobj_timeline",
                Probe::skipped("DRM_IOCTL_SYNCOBJ_QUERY", "no sync object (create failed)"),
            );
            put(
                "syncobj_eventfd",
                Probe::skipped(
                    "DRM_IOCTL_SYNCOBJ_EVENTFD",
                    "no sync object (create failed)",
                ),
            );
        }
    }
}

/// KMS, read-only: resources, client caps, leases, CLOSEFB on a framebuffer nobody shows
/// (on `dumb`), vblank counters.
fn kms_probes(
    dev: &Device,
    dumb: &drm_gem::Result<DumbBuffer<&Device>>,
    p: &mut BTreeMap<String, Probe>,
) {
    let mut put = |k: &str, v: Probe| {
        p.insert(k.to_string(), v);
    };
    // KMS, read-only: resources, client caps, leases, CLOSEFB on a framebuffer nobody shows,
    // vblank counters.
    let res = dev.resources();
    put(
        "kms_resources",
        Probe::of("DRM_IOCTL_MODE_GETRESOURCES", &res, |r| {
            Some(format!(
                "{} connectors, {} encoders, {} crtcs",
                r.connectors.len(),
                r.encoders.len(),
                r.crtcs.len()
            ))
        }),
    );
    let atomic = dev.set_client_cap(ClientCap::Atomic, 1);
    put(
        "atomic",
        Probe::of(
            "DRM_IOCTL_SET_CLIENT_CAP(DRM_CLIENT_CAP_ATOMIC)",
            &atomic,
            |_| None,
        ),
    );
    if atomic.is_ok() {
        let wb = dev.set_client_cap(ClientCap::WritebackConnectors, 1);
        let count = dev.resources().ok().map(|r| {
            r.connectors
                .iter()
                .filter_map(|&c| dev.connector(c).ok())
                .filter(|c| c.kind == ioctl_kind_writeback())
                .count()
        });
        let mut probe = Probe::of(
            "DRM_IOCTL_SET_CLIENT_CAP(DRM_CLIENT_CAP_WRITEBACK_CONNECTORS)",
            &wb,
            |_| count.map(|n| format!("{n} writeback connectors")),
        );
        if probe.supported && count == Some(0) {
            // The core accepts the cap; the driver has no writeback connector to offer.
            probe.supported = false;
            probe.class = "EOPNOTSUPP".into();
            probe.detail =
                Some("the cap is accepted but the driver has no writeback connector".into());
        }
        put("writeback", probe);
    } else {
        put(
            "writeback",
            Probe::skipped(
                "DRM_IOCTL_SET_CLIENT_CAP(DRM_CLIENT_CAP_WRITEBACK_CONNECTORS)",
                "needs atomic",
            ),
        );
    }
    put(
        "leases",
        Probe::of("DRM_IOCTL_MODE_LIST_LESSEES", &dev.lessees(), |l| {
            Some(format!("{} lessees", l.len()))
        }),
    );
    match (&res, dumb) {
        (Ok(_), Ok(b)) => {
            let fb = dev.add_framebuffer(&FbSpec::for_dumb(b, drm_gem::DrmFourcc::Xrgb8888));
            match fb {
                Ok(fb) => put(
                    "closefb",
                    Probe::of("DRM_IOCTL_MODE_CLOSEFB", &dev.close_framebuffer(fb), |_| {
                        None
                    }),
                ),
                Err(e) => put(
                    "closefb",
                    Probe::skipped(
                        "DRM_IOCTL_MODE_CLOSEFB",
                        &format!("no framebuffer to close: {e}"),
                    ),
                ),
            }
        }
        _ => put(
            "closefb",
            Probe::skipped("DRM_IOCTL_MODE_CLOSEFB", "needs KMS and a dumb buffer"),
        ),
    }
    vblank_probes(
        dev,
        res.as_ref().ok().and_then(|r| r.crtcs.first().copied()),
        p,
    );
}

/// The vblank counters of the first CRTC, if there is one.
fn vblank_probes(
    dev: &Device,
    first_crtc: Option<drm_gem::kms::CrtcId>,
    p: &mut BTreeMap<String, Probe>,
) {
    let mut put = |k: &str, v: Probe| {
        p.insert(k.to_string(), v);
    };
    match first_crtc {
        Some(crtc) => {
            put(
                "crtc_sequence",
                Probe::of(
                    "DRM_IOCTL_CRTC_GET_SEQUENCE",
                    &dev.crtc_sequence(crtc),
                    |s| Some(format!("CRTC {} active: {}", crtc.get(), s.active)),
                ),
            );
            put(
                "vblank",
                Probe::of(
                    "DRM_IOCTL_WAIT_VBLANK",
                    &dev.wait_vblank(0, 0, None),
                    |_| None,
                ),
            );
        }
        None => {
            put(
                "crtc_sequence",
                Probe::skipped("DRM_IOCTL_CRTC_GET_SEQUENCE", "no CRTC (no KMS)"),
            );
            put(
                "vblank",
                Probe::skipped("DRM_IOCTL_WAIT_VBLANK", "no CRTC (no KMS)"),
            );
        }
    }
}

/// Each `VIRTGPU_PARAM_*` as `virtio_gpu_param_<name>`: `ok` when the kernel answers
/// non-zero, `off` when it answers 0, `EINVAL` when it does not know the parameter.
fn virtio_gpu_params(dev: &Device, probes: &mut BTreeMap<String, Probe>) {
    use drm_gem::driver::virtio_gpu::{Param, VirtioGpu};
    const CALL: &str = "DRM_IOCTL_VIRTGPU_GETPARAM";
    let gpu = match VirtioGpu::new(dev) {
        Ok(g) => g,
        Err(e) => {
            probes.insert("virtio_gpu_params".into(), Probe::failed(CALL, &e));
            return;
        }
    };
    for p in Param::ALL {
        let name = match p {
            Param::ThreeDFeatures => "3d_features",
            Param::CapsetQueryFix => "capset_query_fix",
            Param::ResourceBlob => "resource_blob",
            Param::HostVisible => "host_visible",
            Param::CrossDevice => "cross_device",
            Param::ContextInit => "context_init",
            Param::SupportedCapsetIds => "supported_capset_ids",
            Param::ExplicitDebugName => "explicit_debug_name",
        };
        let probe = match gpu.param(p) {
            Ok(Some(v)) if v != 0 => Probe::ok(CALL, Some(format!("value {v:#x}"))),
            Ok(Some(_)) => Probe {
                supported: false,
                class: "off".into(),
                probe: CALL.into(),
                detail: Some("the kernel knows the parameter and answers 0".into()),
            },
            Ok(None) => Probe {
                supported: false,
                class: "EINVAL".into(),
                probe: CALL.into(),
                detail: Some("this kernel does not know the parameter".into()),
            },
            Err(e) => Probe::failed(CALL, &e),
        };
        probes.insert(format!("virtio_gpu_param_{name}"), probe);
    }
}

fn ioctl_kind_writeback() -> u32 {
    // DRM_MODE_CONNECTOR_WRITEBACK
    18
}

/// The human table: one row per family, one column per device.
pub fn render(r: &CapsReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "kernel {}", r.kernel);
    let cell = |p: &Probe| {
        if p.supported {
            "yes".to_string()
        } else {
            format!("no ({})", p.class)
        }
    };
    let mut fams: Vec<&String> = r.devices.iter().flat_map(|d| d.probes.keys()).collect();
    fams.sort();
    fams.dedup();
    let mut rows: Vec<Vec<String>> = vec![
        std::iter::once("FAMILY".to_string())
            .chain(r.devices.iter().map(|d| {
                format!(
                    "{} {}",
                    d.path.trim_start_matches("/dev/dri/"),
                    d.driver.as_deref().unwrap_or("?")
                )
            }))
            .collect(),
    ];
    for f in fams {
        rows.push(
            std::iter::once(f.clone())
                .chain(
                    r.devices
                        .iter()
                        .map(|d| d.probes.get(f).map_or("-".into(), cell)),
                )
                .collect(),
        );
    }
    for d in &r.devices {
        if let Some(e) = &d.error {
            let _ = writeln!(s, "{}: cannot open: {e}", d.path);
        }
    }
    for line in crate::render::align(&rows) {
        let _ = writeln!(s, "{line}");
    }
    let _ = writeln!(s, "\nsystem:");
    for (k, p) in &r.system {
        let _ = writeln!(
            s,
            "  {k:<15} {}{}",
            cell(p),
            p.detail
                .as_deref()
                .map(|d| format!("  {d}"))
                .unwrap_or_default()
        );
    }
    s
}
