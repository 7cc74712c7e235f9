//! Vendor node discovery (issue 28, phase 1) over synthetic /proc, /sys and /dev trees: a
//! two-GPU NVIDIA machine with MIG on one GPU, kfd and an accelerator, checked node by
//! node; hostile trees (clashing minors, capabilities of unknown GPUs, oversized and deep
//! trees, odd names) reported as unidentified, never guessed.

use drmtool::vendor::{
    MajorError, Reason, ValueError, VendorNodeKind as K, VendorReport, discover,
};
use std::path::{Path, PathBuf};

mod vendor_tree;
use vendor_tree::Tree;

const PROC_DEVICES: &str = "Character devices:\n  1 mem\n  4 tty\n 10 misc\n195 nvidia-frontend\n\
                            226 drm\n236 nvidia-caps\n261 accel\n509 nvidia-uvm\n510 kfd\n\n\
                            Block devices:\n  8 sd\n259 blkext\n";

fn information(model: &str, bus: &str, minor: &str) -> String {
    format!(
        "Model: \t\t NVIDIA {model}\nIRQ: \t\t 146\nGPU UUID: \t GPU-8d3f1c2a-5b6e-7f80-91a2-b3c4d5e6f708\n\
         Video BIOS: \t 92.00.45.00.06\nBus Type: \t PCIe\nDMA Size: \t 47 bits\n\
         DMA Mask: \t 0x7fffffffffff\nBus Location: \t {bus}\nDevice Minor: \t {minor}\n\
         GPU Excluded: \t No\n"
    )
}

fn cap(minor: u32, mode: u32) -> String {
    format!("DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: 1\n")
}

/// The machine of the issue: NVIDIA GPUs at 3b (minor 0) and 5e (minor 1, MIG with two GPU
/// instances of one compute instance each), one at 86 whose information file is broken,
/// nvidia-uvm and nvidia-caps loaded, nvidia-modeset loaded, kfd, one accelerator behind a
/// PCI bridge.
fn machine() -> Tree {
    let t = Tree::new("vendor-machine");
    t.write("proc/devices", PROC_DEVICES);
    let gpus = "proc/driver/nvidia/gpus";
    t.write(
        &format!("{gpus}/0000:3b:00.0/information"),
        information("A100-SXM4-80GB", "0000:3b:00.0", "0"),
    );
    t.write(
        &format!("{gpus}/0000:5e:00.0/information"),
        information("A100-SXM4-80GB", "0000:5e:00.0", "1"),
    );
    t.write(
        &format!("{gpus}/0000:86:00.0/information"),
        information("A100-SXM4-80GB", "0000:86:00.0", "-1"),
    );
    let caps = "proc/driver/nvidia/capabilities";
    t.write(&format!("{caps}/mig/config"), cap(1, 256));
    t.write(&format!("{caps}/mig/monitor"), cap(2, 292));
    t.write(&format!("{caps}/gpu1/mig/gi1/access"), cap(147, 292));
    t.write(&format!("{caps}/gpu1/mig/gi1/ci0/access"), cap(148, 292));
    t.write(&format!("{caps}/gpu1/mig/gi2/access"), cap(156, 292));
    t.write(&format!("{caps}/gpu1/mig/gi2/ci0/access"), cap(157, 292));
    t.dir("sys/module/nvidia_modeset");
    t.write("sys/class/kfd/kfd/dev", "510:0\n");
    let accel = "sys/devices/pci0000:d7/0000:d7:00.0/0000:d8:00.0/accel/accel0";
    t.write(&format!("{accel}/dev"), "261:0\n");
    t.link("../../../0000:d8:00.0", &format!("{accel}/device"));
    t.link(
        "../../devices/pci0000:d7/0000:d7:00.0/0000:d8:00.0/accel/accel0",
        "sys/class/accel/accel0",
    );
    // Nodes that exist; nvidia-uvm has not been created yet.
    for n in [
        "nvidia0",
        "nvidia1",
        "nvidiactl",
        "kfd",
        "nvidia-caps/nvidia-cap1",
    ] {
        t.write(&format!("dev/{n}"), "");
    }
    t
}

type Row = (String, K, (u32, u32), Option<String>, Option<u32>, bool);

fn rows(t: &Tree, r: &VendorReport) -> Vec<Row> {
    r.nodes
        .iter()
        .map(|n| {
            (
                t.rel(&n.path),
                n.kind,
                n.dev,
                n.owner.clone(),
                n.mode,
                n.present,
            )
        })
        .collect()
}

fn row(
    path: &str,
    kind: K,
    dev: (u32, u32),
    owner: Option<&str>,
    mode: Option<u32>,
    present: bool,
) -> Row {
    (
        path.into(),
        kind,
        dev,
        owner.map(str::to_string),
        mode,
        present,
    )
}

#[test]
fn nvidia_mig_kfd_and_accel_nodes_with_their_owners() {
    let t = machine();
    let r = discover(&t.roots());
    let (a, b, d8) = (
        Some("0000:3b:00.0"),
        Some("0000:5e:00.0"),
        Some("0000:d8:00.0"),
    );
    let ro = Some(0o444);
    assert_eq!(
        rows(&t, &r),
        [
            row("dev/nvidia0", K::NvidiaGpu, (195, 0), a, None, true),
            row("dev/nvidia1", K::NvidiaGpu, (195, 1), b, None, true),
            row(
                "dev/nvidia-caps/nvidia-cap147",
                K::NvidiaCap,
                (236, 147),
                b,
                ro,
                false
            ),
            row(
                "dev/nvidia-caps/nvidia-cap148",
                K::NvidiaCap,
                (236, 148),
                b,
                ro,
                false
            ),
            row(
                "dev/nvidia-caps/nvidia-cap156",
                K::NvidiaCap,
                (236, 156),
                b,
                ro,
                false
            ),
            row(
                "dev/nvidia-caps/nvidia-cap157",
                K::NvidiaCap,
                (236, 157),
                b,
                ro,
                false
            ),
            row("dev/accel/accel0", K::Accel, (261, 0), d8, None, false),
            row("dev/nvidiactl", K::NvidiaCtl, (195, 255), None, None, true),
            row(
                "dev/nvidia-modeset",
                K::NvidiaModeset,
                (195, 254),
                None,
                None,
                false
            ),
            row("dev/nvidia-uvm", K::NvidiaUvm, (509, 0), None, None, false),
            row(
                "dev/nvidia-uvm-tools",
                K::NvidiaUvmTools,
                (509, 1),
                None,
                None,
                false
            ),
            row(
                "dev/nvidia-caps/nvidia-cap1",
                K::NvidiaCap,
                (236, 1),
                None,
                Some(0o400),
                true
            ),
            row(
                "dev/nvidia-caps/nvidia-cap2",
                K::NvidiaCap,
                (236, 2),
                None,
                ro,
                false
            ),
            row("dev/kfd", K::Kfd, (510, 0), None, None, true),
        ]
    );
    // Shared by kind, except capabilities: those under gpuN/ belong to that GPU.
    for n in &r.nodes {
        let shared = n.kind.is_shared() || (n.kind == K::NvidiaCap && n.owner.is_none());
        assert_eq!(n.is_shared(), shared, "{n:?}");
    }
    let shared: Vec<K> = r
        .nodes
        .iter()
        .filter(|n| n.is_shared())
        .map(|n| n.kind)
        .collect();
    use K::*;
    assert_eq!(
        shared,
        [
            NvidiaCtl,
            NvidiaModeset,
            NvidiaUvm,
            NvidiaUvmTools,
            NvidiaCap,
            NvidiaCap,
            Kfd
        ]
    );
    assert!(!NvidiaGpu.is_shared() && !Accel.is_shared() && !NvidiaCap.is_shared());
    // The GPU whose information file is broken: reported, not skipped, not guessed.
    assert_eq!(r.unidentified.len(), 1, "{:#?}", r.unidentified);
    let u = &r.unidentified[0];
    assert_eq!(u.kind, K::NvidiaGpu);
    assert_eq!(
        t.rel(&u.source),
        "proc/driver/nvidia/gpus/0000:86:00.0/information"
    );
    assert_eq!(u.owner.as_deref(), Some("0000:86:00.0"));
    assert_eq!(
        u.reason,
        Reason::Malformed(ValueError::NotDecimal {
            key: "Device Minor",
            value: "-1".into()
        })
    );
    assert!(
        !r.nodes
            .iter()
            .any(|n| n.owner.as_deref() == Some("0000:86:00.0"))
    );
}

#[test]
fn the_report_serializes_with_kebab_case_names() {
    let t = machine();
    let v = serde_json::to_value(discover(&t.roots())).unwrap();
    assert_eq!(v["nodes"][2]["kind"], "nvidia-cap");
    assert_eq!(v["nodes"][2]["owner"], "0000:5e:00.0");
    assert_eq!(v["nodes"][2]["mode"], 0o444);
    assert_eq!(v["nodes"][2]["dev"], serde_json::json!([236, 147]));
    assert_eq!(v["nodes"][10]["kind"], "nvidia-uvm-tools");
    assert_eq!(v["unidentified"][0]["kind"], "nvidia-gpu");
    assert_eq!(
        v["unidentified"][0]["reason"],
        serde_json::json!({"malformed": {"not-decimal": {"key": "Device Minor", "value": "-1"}}})
    );
}

#[test]
fn nothing_present_is_an_empty_report() {
    let t = Tree::new("vendor-empty");
    assert_eq!(discover(&t.roots()), VendorReport::default());
    // A driver directory without GPUs: only the control node.
    t.dir("proc/driver/nvidia/gpus");
    let r = discover(&t.roots());
    assert_eq!(
        rows(&t, &r),
        [row(
            "dev/nvidiactl",
            K::NvidiaCtl,
            (195, 255),
            None,
            None,
            false
        )]
    );
    assert!(r.unidentified.is_empty());
}

fn reasons(t: &Tree, r: &VendorReport) -> Vec<(String, K, Reason)> {
    r.unidentified
        .iter()
        .map(|u| (t.rel(&u.source), u.kind, u.reason.clone()))
        .collect()
}

#[test]
fn clashing_minors_and_capabilities_of_unknown_gpus_are_not_guessed() {
    let t = Tree::new("vendor-clash");
    // No nvidia-caps in /proc/devices; nvidia-uvm twice with different majors.
    t.write(
        "proc/devices",
        "Character devices:\n195 nvidia-frontend\n500 nvidia-uvm\n501 nvidia-uvm\n",
    );
    let gpus = "proc/driver/nvidia/gpus";
    t.write(
        &format!("{gpus}/0000:3b:00.0/information"),
        "Device Minor: 0\n",
    );
    t.write(
        &format!("{gpus}/0000:5e:00.0/information"),
        "Device Minor: 0\n",
    );
    t.write(
        &format!("{gpus}/0000:af:00.0/information"),
        "Device Minor: 2\n",
    );
    t.dir(&format!("{gpus}/0000:b0:00.0"));
    t.dir(&format!("{gpus}/not-a-bus"));
    let caps = "proc/driver/nvidia/capabilities";
    t.write(&format!("{caps}/gpu0/mig/gi1/access"), cap(12, 292));
    t.write(&format!("{caps}/gpu2/mig/gi1/access"), cap(21, 292));
    t.write(&format!("{caps}/gpux/mig/gi1/access"), cap(30, 292));
    let r = discover(&t.roots());
    assert_eq!(
        rows(&t, &r),
        [
            row(
                "dev/nvidia2",
                K::NvidiaGpu,
                (195, 2),
                Some("0000:af:00.0"),
                None,
                false
            ),
            row("dev/nvidiactl", K::NvidiaCtl, (195, 255), None, None, false),
        ]
    );
    let caps_major = || Reason::NoMajor(MajorError::NotListed("nvidia-caps"));
    let uvm = || {
        Reason::NoMajor(MajorError::Ambiguous {
            name: "nvidia-uvm",
            majors: vec![500, 501],
        })
    };
    assert_eq!(
        reasons(&t, &r),
        [
            ("proc/devices".into(), K::NvidiaUvm, uvm()),
            ("proc/devices".into(), K::NvidiaUvmTools, uvm()),
            (
                format!("{caps}/gpu0/mig/gi1/access"),
                K::NvidiaCap,
                Reason::UnknownGpu { minor: 0 }
            ),
            (
                format!("{caps}/gpu2/mig/gi1/access"),
                K::NvidiaCap,
                caps_major()
            ),
            (
                format!("{caps}/gpux/mig/gi1/access"),
                K::NvidiaCap,
                Reason::UnexpectedName("gpux".into())
            ),
            (
                gpus.into(),
                K::NvidiaGpu,
                Reason::UnexpectedName("not-a-bus".into())
            ),
            (
                format!("{gpus}/0000:3b:00.0/information"),
                K::NvidiaGpu,
                Reason::MinorClash { minor: 0 }
            ),
            (
                format!("{gpus}/0000:5e:00.0/information"),
                K::NvidiaGpu,
                Reason::MinorClash { minor: 0 }
            ),
            (
                format!("{gpus}/0000:b0:00.0/information"),
                K::NvidiaGpu,
                Reason::NoFile
            ),
        ]
    );
}

#[test]
fn hostile_trees_are_bounded_and_refused() {
    let t = Tree::new("vendor-hostile");
    t.write("proc/devices", PROC_DEVICES);
    let gpus = "proc/driver/nvidia/gpus";
    // Longer than any information file: refused, not read to the end.
    let mut huge = information("x", "0000:3b:00.0", "0").into_bytes();
    huge.extend(std::iter::repeat_n(b'A', drmtool::vendor::MAX_TEXT));
    t.write(&format!("{gpus}/0000:3b:00.0/information"), huge);
    let caps = "proc/driver/nvidia/capabilities";
    // Two capability files with one minor; a name with an escape byte; a symlink; a tree
    // deeper than the bound.
    t.write(&format!("{caps}/mig/config"), cap(1, 256));
    t.write(&format!("{caps}/mig/monitor"), cap(1, 292));
    t.write(&format!("{caps}/mig/\x1b[2J"), cap(3, 292));
    t.link("/etc/passwd", &format!("{caps}/mig/link"));
    let deep = format!("{caps}/a/b/c/d/e/f/g/h/i");
    t.write(&format!("{deep}/access"), cap(4, 292));
    t.write(
        &format!("{caps}/bad"),
        "DeviceFileMinor: 5\nDeviceFileMode: 0x1ff\n",
    );
    // Accelerators: no device link, a name that is no accelN, a broken dev file.
    t.dir("sys/class/accel/accel0");
    t.write("sys/class/accel/accel0/dev", "261:0\n");
    t.dir("sys/class/accel/accelX");
    t.dir("sys/devices/platform/npu/accel/accel1");
    t.write("sys/devices/platform/npu/accel/accel1/dev", "261:1:1\n");
    t.link(
        "../../../npu",
        "sys/devices/platform/npu/accel/accel1/device",
    );
    t.link(
        "../../devices/platform/npu/accel/accel1",
        "sys/class/accel/accel1",
    );
    t.dir("sys/class/kfd/kfd");
    let r = discover(&t.roots());
    assert_eq!(
        rows(&t, &r),
        [
            row("dev/nvidiactl", K::NvidiaCtl, (195, 255), None, None, false),
            row("dev/nvidia-uvm", K::NvidiaUvm, (509, 0), None, None, false),
            row(
                "dev/nvidia-uvm-tools",
                K::NvidiaUvmTools,
                (509, 1),
                None,
                None,
                false
            ),
        ],
        "{:#?}",
        r.unidentified
    );
    let got = reasons(&t, &r);
    let has = |src: &str, reason: Reason| {
        assert!(
            got.iter().any(|(s, _, r)| *s == src && *r == reason),
            "{src} {reason:?} not in {got:#?}"
        );
    };
    has(
        &format!("{gpus}/0000:3b:00.0/information"),
        Reason::TooLong {
            max: drmtool::vendor::MAX_TEXT,
        },
    );
    has(
        &format!("{caps}/mig/config"),
        Reason::MinorClash { minor: 1 },
    );
    has(
        &format!("{caps}/mig/monitor"),
        Reason::MinorClash { minor: 1 },
    );
    has(
        &format!("{caps}/mig"),
        Reason::UnexpectedName("\x1b[2J".into()),
    );
    has(&format!("{caps}/mig/link"), Reason::NotAFile);
    has(&format!("{caps}/a/b/c/d/e/f/g/h"), Reason::WalkLimit);
    has("sys/class/accel/accel0", Reason::NoDevice);
    has("sys/class/accel", Reason::UnexpectedName("accelX".into()));
    has("sys/class/kfd/kfd/dev", Reason::NoFile);
    assert!(got.iter().any(|(s, _, r)| s == &format!("{caps}/bad")
        && matches!(r, Reason::Malformed(ValueError::NotDecimal { .. }))));
    let npu = r
        .unidentified
        .iter()
        .find(|u| t.rel(&u.source) == "sys/class/accel/accel1/dev")
        .expect("accel1");
    assert_eq!(
        npu.owner.as_deref(),
        Some("npu"),
        "off PCI: the device's name"
    );
    assert_eq!(got.len(), 11, "{got:#?}");
    // What is shown of the escape byte is escaped.
    let shown: Vec<String> = r
        .unidentified
        .iter()
        .map(|u| u.reason.to_string())
        .collect();
    assert!(shown.iter().all(|s| !s.contains('\x1b')), "{shown:?}");
}

#[test]
fn a_capability_tree_with_too_many_entries_stops_at_the_bound() {
    let t = Tree::new("vendor-wide");
    t.write("proc/devices", PROC_DEVICES);
    let caps = t.0.join("proc/driver/nvidia/capabilities/mig");
    std::fs::create_dir_all(&caps).unwrap();
    for i in 0..=drmtool::vendor::MAX_ENTRIES {
        std::fs::write(caps.join(format!("c{i}")), "").unwrap();
    }
    let r = discover(&t.roots());
    assert!(
        r.unidentified.iter().any(
            |u| u.reason == Reason::WalkLimit && t.rel(&u.source).ends_with("capabilities/mig")
        ),
        "{:?}",
        r.unidentified.iter().map(|u| &u.reason).collect::<Vec<_>>()
    );
    assert!(
        r.unidentified.len() <= 2,
        "the walk stopped: {}",
        r.unidentified.len()
    );
}

#[test]
fn an_unreadable_proc_devices_leaves_the_dynamic_majors_unknown() {
    let t = Tree::new("vendor-devices");
    let mut text = String::from("Character devices:\n509 nvidia-uvm\n236 nvidia-caps\n");
    text.push_str(&"1 mem\n".repeat(drmtool::vendor::MAX_TEXT / 6 + 1));
    t.write("proc/devices", text);
    t.write(
        "proc/driver/nvidia/gpus/0000:3b:00.0/information",
        "Device Minor: 0\n",
    );
    t.write(
        "proc/driver/nvidia/capabilities/gpu0/mig/gi1/access",
        cap(12, 292),
    );
    let r = discover(&t.roots());
    assert_eq!(
        rows(&t, &r),
        [
            row(
                "dev/nvidia0",
                K::NvidiaGpu,
                (195, 0),
                Some("0000:3b:00.0"),
                None,
                false
            ),
            row("dev/nvidiactl", K::NvidiaCtl, (195, 255), None, None, false),
        ]
    );
    let long = Reason::TooLong {
        max: drmtool::vendor::MAX_TEXT,
    };
    assert_eq!(
        reasons(&t, &r),
        [
            ("proc/devices".into(), K::NvidiaUvm, long.clone()),
            ("proc/devices".into(), K::NvidiaUvmTools, long.clone()),
            (
                "proc/driver/nvidia/capabilities/gpu0/mig/gi1/access".into(),
                K::NvidiaCap,
                long
            ),
        ]
    );
    assert_eq!(r.unidentified[2].owner.as_deref(), Some("0000:3b:00.0"));
}

// The ordering with vendor GPUs (issue 28): `drmtool::gpu::merge` over the same machine,
// with DRM nodes added.

/// A PCI function under `sys/devices/<path>` (its last component the bus id), linked from
/// `sys/bus/pci/devices`, with its ids, NUMA node, local CPUs and bound driver.
fn pci_function(t: &Tree, path: &str, ids: (&str, &str), numa: &str, driver: &str) {
    let bus = path.rsplit('/').next().unwrap();
    let dir = format!("sys/devices/{path}");
    t.write(&format!("{dir}/vendor"), format!("{}\n", ids.0));
    t.write(&format!("{dir}/device"), format!("{}\n", ids.1));
    t.write(&format!("{dir}/numa_node"), format!("{numa}\n"));
    t.write(&format!("{dir}/local_cpulist"), "0-15\n");
    t.dir(&format!("sys/bus/pci/drivers/{driver}"));
    t.link(
        &t.0.join(format!("sys/bus/pci/drivers/{driver}"))
            .display()
            .to_string(),
        &format!("{dir}/driver"),
    );
    t.link(
        &t.0.join(&dir).display().to_string(),
        &format!("sys/bus/pci/devices/{bus}"),
    );
}

/// A DRM node `name` of the device at `sys/devices/<device>`, as `drm_gem::enumerate`
/// reports it (its sysfs directory's `device` link leads to the device).
fn drm_node(t: &Tree, device: &str, name: &str, driver: &str) -> drm_gem::NodeInfo {
    let sysfs = t.0.join(format!("sys/devices/{device}/drm/{name}"));
    std::fs::create_dir_all(&sysfs).unwrap();
    std::os::unix::fs::symlink(
        t.0.join(format!("sys/devices/{device}")),
        sysfs.join("device"),
    )
    .unwrap();
    let render = name.starts_with("renderD");
    let minor: u32 = name
        .trim_start_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .unwrap();
    drm_gem::NodeInfo {
        path: PathBuf::from(format!("/dev/dri/{name}")),
        kind: if render {
            drm_gem::NodeKind::Render
        } else {
            drm_gem::NodeKind::Primary
        },
        dev: (226, minor),
        driver: Some(driver.into()),
        parent_driver: None,
        bus: None,
        pci_id: None,
        sysfs,
    }
}

/// [`machine`] with DRM devices: bochs at 00:02.0, the NVIDIA GPU at 3b with nvidia-drm
/// (card1, renderD128), vgem (a platform device); the NVIDIA GPU at 5e has no DRM node
/// (no nvidia-drm for it), nor has the accelerator at d8.
fn machine_with_drm() -> (Tree, Vec<drm_gem::NodeInfo>) {
    let t = machine();
    let bochs = "pci0000:00/0000:00:02.0";
    let nv0 = "pci0000:3a/0000:3a:00.0/0000:3b:00.0";
    pci_function(&t, bochs, ("0x1234", "0x1111"), "-1", "bochs-drm");
    pci_function(&t, nv0, ("0x10de", "0x20b0"), "0", "nvidia");
    pci_function(
        &t,
        "pci0000:5d/0000:5d:00.0/0000:5e:00.0",
        ("0x10de", "0x20b2"),
        "1",
        "nvidia",
    );
    pci_function(
        &t,
        "pci0000:d7/0000:d7:00.0/0000:d8:00.0",
        ("0x8086", "0x643e"),
        "1",
        "intel_vpu",
    );
    let drm = vec![
        drm_node(&t, "platform/vgem", "card2", "vgem"),
        drm_node(&t, "platform/vgem", "renderD129", "vgem"),
        drm_node(&t, nv0, "renderD128", "nvidia-drm"),
        drm_node(&t, nv0, "card1", "nvidia-drm"),
        drm_node(&t, bochs, "card0", "bochs-drm"),
    ];
    (t, drm)
}

fn merged(t: &Tree, drm: &[drm_gem::NodeInfo], r: &VendorReport) -> Vec<drmtool::gpu::Gpu> {
    drmtool::gpu::merge(drm.to_vec(), &t.0.join("dev/dri"), r, &t.0.join("sys"))
}

/// The GPU without a DRM node and the accelerator take their places by bus id; the NVIDIA
/// GPU with nvidia-drm is one GPU with both kinds of node; shared nodes are no GPU's; the
/// GPU whose information file is broken (86) has no node and is no GPU. vgem, index 2 when
/// only DRM nodes counted, is index 4.
#[test]
fn gpus_without_a_drm_node_take_their_place_in_the_ordering() {
    let (t, drm) = machine_with_drm();
    let r = discover(&t.roots());
    let gpus = merged(&t, &drm, &r);
    let summary: Vec<String> = gpus
        .iter()
        .map(|g| {
            format!(
                "{} {} {} {} drm {} vendor {}",
                g.index,
                g.bus_id.as_deref().unwrap_or("-"),
                g.name,
                g.driver.as_deref().unwrap_or("-"),
                g.nodes.len(),
                g.vendor_nodes.len(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            "0 0000:00:02.0 0000:00:02.0 bochs-drm drm 1 vendor 0",
            "1 0000:3b:00.0 0000:3b:00.0 nvidia-drm drm 2 vendor 1",
            "2 0000:5e:00.0 0000:5e:00.0 nvidia drm 0 vendor 5",
            "3 0000:d8:00.0 0000:d8:00.0 intel_vpu drm 0 vendor 1",
            "4 - vgem vgem drm 2 vendor 0",
        ]
    );
    let nv1 = &gpus[2];
    assert_eq!(nv1.pci_id, Some((0x10de, 0x20b2)));
    assert_eq!(nv1.numa_node, Some(1));
    assert_eq!(nv1.local_cpulist.as_deref(), Some("0-15"));
    assert_eq!(t.rel(&nv1.nvidia().unwrap().path), "dev/nvidia1");
    assert!(nv1.render().is_none() && nv1.card().is_none());
    assert_eq!(t.rel(&gpus[1].nvidia().unwrap().path), "dev/nvidia0");
    assert_eq!(gpus[1].card().unwrap().path, Path::new("/dev/dri/card1"));
    assert_eq!(t.rel(&gpus[3].accel().unwrap().path), "dev/accel/accel0");
    assert_eq!(gpus[0].numa_node, None, "numa_node -1");
    // Shared nodes belong to none.
    assert!(
        gpus.iter()
            .flat_map(|g| &g.vendor_nodes)
            .all(|n| !n.is_shared())
    );
    // Only DRM nodes, as before: vgem was 2.
    let drm_only = merged(&t, &drm, &VendorReport::default());
    let names: Vec<&str> = drm_only.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, ["0000:00:02.0", "0000:3b:00.0", "vgem"]);
}

/// A machine whose every NVIDIA GPU has DRM nodes keeps its indices: its vendor nodes join
/// the GPUs it already had.
#[test]
fn gpus_that_all_have_drm_nodes_keep_their_indices() {
    let (t, drm) = machine_with_drm();
    let mut r = discover(&t.roots());
    r.nodes
        .retain(|n| n.owner.is_none() || n.owner.as_deref() == Some("0000:3b:00.0"));
    let with = merged(&t, &drm, &r);
    let without = merged(&t, &drm, &VendorReport::default());
    let key = |v: &[drmtool::gpu::Gpu]| -> Vec<(usize, String)> {
        v.iter().map(|g| (g.index, g.name.clone())).collect()
    };
    assert_eq!(key(&with), key(&without));
    assert_eq!(with[1].vendor_nodes.len(), 1);
}

/// Neither DRM nodes nor vendor GPUs: no GPU (`gpus()` says NoDevices as before); vendor
/// GPUs alone (no /dev/dri) are the whole ordering.
#[test]
fn without_dev_dri_the_vendor_gpus_are_the_ordering() {
    let (t, _) = machine_with_drm();
    let r = discover(&t.roots());
    let gpus = merged(&t, &[], &r);
    let names: Vec<&str> = gpus.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, ["0000:3b:00.0", "0000:5e:00.0", "0000:d8:00.0"]);
    assert_eq!(
        gpus[0].driver.as_deref(),
        Some("nvidia"),
        "the bound driver"
    );
    assert!(merged(&t, &[], &VendorReport::default()).is_empty());
}

/// The grammar names a GPU by its vendor node (path, device number), by bus id and by its
/// bound driver; commands on DRM nodes refuse a GPU without one by name.
#[test]
fn vendor_nodes_and_drivers_name_their_gpus() {
    use drmtool::gpu::{GpuSpec, SelectError, nodes_of, select, select_drm};
    let (t, drm) = machine_with_drm();
    let gpus = merged(&t, &drm, &discover(&t.roots()));
    let pick = |s: &str| -> Vec<usize> {
        select(&[s.parse::<GpuSpec>().unwrap()], &gpus)
            .unwrap()
            .iter()
            .map(|g| g.index)
            .collect()
    };
    let nvidia1 = t.0.join("dev/nvidia1").display().to_string();
    assert_eq!(pick(&nvidia1), [2]);
    assert_eq!(pick("195:1"), [2]);
    assert_eq!(pick("195:0"), [1]);
    assert_eq!(pick("236:157"), [2], "a MIG capability of GPU 2");
    assert_eq!(pick("261:0"), [3]);
    assert_eq!(pick("0000:5e:00.0"), [2]);
    assert_eq!(pick("5e:00.0"), [2]);
    assert_eq!(pick("2"), [2]);
    assert_eq!(pick("nvidia"), [1, 2], "nvidia-drm and nvidia");
    assert_eq!(pick("intel-vpu"), [3]);
    // Shared nodes name no GPU.
    assert!(select(&["195:255".parse().unwrap()], &gpus).is_err());
    // info/caps/kms: a GPU without a DRM node, or a vendor node, is refused by name.
    let spec: GpuSpec = "2".parse().unwrap();
    let e = nodes_of(Some(&spec), &gpus).unwrap_err();
    assert!(matches!(e, SelectError::NotDrm { index: 2, .. }), "{e:?}");
    let text = e.to_string();
    assert!(
        text.starts_with(
            "2 names GPU 2 (0000:5e:00.0 nvidia) but no DRM node: it has no DRM node, only "
        ),
        "{text}"
    );
    assert!(text.contains("dev/nvidia1"), "{text}");
    let by_vendor: GpuSpec = "195:0".parse().unwrap();
    let e = nodes_of(Some(&by_vendor), &gpus).unwrap_err().to_string();
    assert!(
        e.contains("it has the DRM nodes /dev/dri/card1, /dev/dri/renderD128"),
        "{e}"
    );
    // A driver spec takes the GPUs with DRM nodes; buffers --device likewise.
    let nv: GpuSpec = "nvidia".parse().unwrap();
    let n = nodes_of(Some(&nv), &gpus).unwrap();
    assert_eq!(n.len(), 1);
    assert_eq!(n[0].path, Path::new("/dev/dri/card1"));
    assert_eq!(select_drm(&nv, &gpus).unwrap().len(), 1);
    assert!(matches!(
        select_drm(&"3".parse().unwrap(), &gpus),
        Err(SelectError::NotDrm { index: 3, .. })
    ));
}

/// `run --gpu` on a GPU without a DRM node: its vendor nodes and the NVIDIA control nodes,
/// nothing of another GPU; an accelerator gets only its own node.
#[test]
fn a_job_on_a_gpu_without_a_drm_node_gets_its_vendor_nodes() {
    use drmtool::isolate::vendor_access::vendor_access;
    let (t, drm) = machine_with_drm();
    let r = discover(&t.roots());
    let gpus = merged(&t, &drm, &r);
    let paths = |g: &drmtool::gpu::Gpu| -> Vec<String> {
        vendor_access(&[g], &r, PROC_DEVICES)
            .nodes
            .iter()
            .map(|n| t.rel(&n.path))
            .collect()
    };
    assert_eq!(
        paths(&gpus[2]),
        [
            "dev/nvidia1",
            "dev/nvidia-caps/nvidia-cap147",
            "dev/nvidia-caps/nvidia-cap148",
            "dev/nvidia-caps/nvidia-cap156",
            "dev/nvidia-caps/nvidia-cap157",
            "dev/nvidiactl",
            "dev/nvidia-modeset",
            "dev/nvidia-uvm",
            "dev/nvidia-uvm-tools",
        ]
    );
    assert_eq!(paths(&gpus[3]), ["dev/accel/accel0"]);
    let a = vendor_access(&[&gpus[2]], &r, PROC_DEVICES);
    assert!(a.majors.contains(&195) && a.majors.contains(&226) && a.majors.contains(&261));
}

/// gres.conf over the merged machine: the NVIDIA GPUs by `/dev/nvidiaN` (with or without
/// nvidia-drm), the accelerator by its accel node, the others by render node, else card.
#[test]
fn gres_conf_names_each_gpu_by_the_node_slurm_constrains() {
    let (t, drm) = machine_with_drm();
    let gpus = merged(&t, &drm, &discover(&t.roots()));
    let text = drmtool::isolate::slurm::gres_conf(&gpus, &[]);
    let root = format!("{}/", t.0.display());
    let lines: Vec<String> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.replace(&root, "/"))
        .collect();
    assert_eq!(
        lines,
        [
            "Name=gpu Type=bochs-drm File=/dev/dri/card0  # GPU 0: 0000:00:02.0 bochs-drm",
            "Name=gpu Type=nvidia-drm File=/dev/nvidia0  # GPU 1: 0000:3b:00.0 nvidia-drm",
            "Name=gpu Type=nvidia File=/dev/nvidia1  # GPU 2: 0000:5e:00.0 nvidia",
            "Name=gpu Type=intel_vpu File=/dev/accel/accel0  # GPU 3: 0000:d8:00.0 intel_vpu",
            "Name=gpu Type=vgem File=/dev/dri/renderD129  # GPU 4: vgem vgem",
        ]
    );
}

/// `/proc/devices` of a driver with IMEX channels (major 237), and the driver directory.
fn imex_machine(name: &str, devices: &str) -> Tree {
    let t = Tree::new(name);
    t.write("proc/devices", devices);
    t.dir("proc/driver/nvidia/gpus");
    t
}

const IMEX_DEVICES: &str =
    "Character devices:\n195 nvidia-frontend\n237 nvidia-caps-imex-channels\n509 nvidia-uvm\n";

/// Makes a character device `major:minor` at `rel`; `false` where this process may not
/// (mknod needs CAP_MKNOD: not root).
fn char_node(t: &Tree, rel: &str, dev: (u32, u32)) -> bool {
    use rustix::fs::{CWD, FileType, Mode, makedev, mknodat};
    let p = t.0.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    match mknodat(
        CWD,
        &p,
        FileType::CharacterDevice,
        Mode::from_raw_mode(0o600),
        makedev(dev.0, dev.1),
    ) {
        Ok(()) => true,
        Err(rustix::io::Errno::PERM | rustix::io::Errno::ACCESS) => false,
        Err(e) => panic!("mknod {}: {e}", p.display()),
    }
}

/// IMEX channels come from /dev: the character devices of the kernel's
/// `nvidia-caps-imex-channels` major and their name's minor, shared (no GPU), marked as
/// found in /dev; a node of another number is refused, never listed.
#[test]
fn imex_channels_are_listed_from_dev_and_checked_against_the_major() {
    let t = imex_machine("imex", IMEX_DEVICES);
    let dir = "dev/nvidia-caps-imex-channels";
    let made = [
        char_node(&t, &format!("{dir}/channel0"), (237, 0)),
        char_node(&t, &format!("{dir}/channel2047"), (237, 2047)),
        char_node(&t, &format!("{dir}/channel3"), (237, 4)),
        char_node(&t, &format!("{dir}/channel5"), (195, 5)),
    ];
    if made.contains(&false) {
        eprintln!("SKIP: mknod is not permitted here (not root); the other IMEX tests run");
        return;
    }
    let r = discover(&t.roots());
    let imex: Vec<Row> = rows(&t, &r)
        .into_iter()
        .filter(|n| n.1 == K::NvidiaImexChannel)
        .collect();
    assert_eq!(
        imex,
        [
            row(
                &format!("{dir}/channel0"),
                K::NvidiaImexChannel,
                (237, 0),
                None,
                None,
                true
            ),
            row(
                &format!("{dir}/channel2047"),
                K::NvidiaImexChannel,
                (237, 2047),
                None,
                None,
                true
            ),
        ]
    );
    for n in r.nodes.iter().filter(|n| n.kind == K::NvidiaImexChannel) {
        assert!(n.is_shared() && n.kind.is_shared());
        assert_eq!(n.dev_source(), drmtool::vendor::DevSource::Dev);
    }
    assert_eq!(
        reasons(&t, &r),
        [
            (
                format!("{dir}/channel3"),
                K::NvidiaImexChannel,
                Reason::DevMismatch {
                    expected: (237, 3),
                    found: (237, 4)
                }
            ),
            (
                format!("{dir}/channel5"),
                K::NvidiaImexChannel,
                Reason::DevMismatch {
                    expected: (237, 5),
                    found: (195, 5)
                }
            ),
        ]
    );
    // The devices document carries the new kind and where it was found, and validates.
    let (rows_, unidentified) = drmtool::devices::vendor_rows(&r, &[]);
    let doc = drmtool::devices::DevicesReport {
        schema_version: 1,
        gpus: Vec::new(),
        devices: Vec::new(),
        vendor_nodes: rows_,
        unidentified,
        reason: None,
    };
    let v = serde_json::to_value(&doc).unwrap();
    let channel = v["vendor_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["kind"] == "nvidia-imex-channel")
        .expect("a channel row");
    assert_eq!(channel["dev_from"], "dev");
    assert_eq!(channel["owner"], serde_json::Value::Null);
    assert_eq!(v["vendor_nodes"][0]["dev_from"], "kernel", "nvidiactl");
    let p = format!("{}/schema/devices.schema.json", env!("CARGO_MANIFEST_DIR"));
    let s: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    let s = jsonschema::validator_for(&s).unwrap();
    let errors: Vec<String> = s.iter_errors(&v).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:?}");
}

/// What needs no device node: names that are not the driver's, files that are not
/// character devices, no major (nothing listed, nothing refused), a major listed twice.
#[test]
fn imex_channels_with_odd_names_files_or_no_major_are_never_guessed() {
    let t = imex_machine("imex-odd", IMEX_DEVICES);
    let dir = "dev/nvidia-caps-imex-channels";
    for name in [
        "channel01",
        "channel",
        "chan1",
        "channel-1",
        "channel1048576",
    ] {
        t.write(&format!("{dir}/{name}"), "");
    }
    t.write(&format!("{dir}/channel7"), "not a node");
    t.dir(&format!("{dir}/channel8"));
    t.link("/dev/null", &format!("{dir}/channel9"));
    let r = discover(&t.roots());
    assert!(
        !r.nodes.iter().any(|n| n.kind == K::NvidiaImexChannel),
        "{r:?}"
    );
    let got = reasons(&t, &r);
    let odd = |n: &str| {
        (
            dir.to_string(),
            K::NvidiaImexChannel,
            Reason::UnexpectedName(n.into()),
        )
    };
    let not_char = |n: &str| {
        (
            format!("{dir}/{n}"),
            K::NvidiaImexChannel,
            Reason::NotACharDevice,
        )
    };
    let mut want = vec![
        odd("chan1"),
        odd("channel"),
        odd("channel-1"),
        odd("channel01"),
        odd("channel1048576"),
        not_char("channel7"),
        not_char("channel8"),
        not_char("channel9"),
    ];
    want.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    assert_eq!(got, want);
    // Without the major the driver has no channels: /dev is not read, nothing refused.
    let t = imex_machine("imex-none", PROC_DEVICES);
    t.write(&format!("{dir}/channel0"), "");
    let r = discover(&t.roots());
    assert!(
        !r.nodes.iter().any(|n| n.kind == K::NvidiaImexChannel) && r.unidentified.is_empty(),
        "{r:?}"
    );
    // The major twice: which is meant is not guessed.
    let twice =
        "Character devices:\n237 nvidia-caps-imex-channels\n238 nvidia-caps-imex-channels\n";
    let t = imex_machine("imex-twice", twice);
    assert_eq!(
        discover(&t.roots()).unidentified,
        [],
        "no channels in /dev: nothing to refuse"
    );
    t.write(&format!("{dir}/channel0"), "");
    let r = discover(&t.roots());
    assert_eq!(
        reasons(&t, &r),
        [(
            "proc/devices".to_string(),
            K::NvidiaImexChannel,
            Reason::NoMajor(MajorError::Ambiguous {
                name: "nvidia-caps-imex-channels",
                majors: vec![237, 238]
            })
        )]
    );
}

/// `cgroup deny-gpus` denies the IMEX channels' major: `machine_majors` takes every
/// `/proc/devices` major named `nvidia*`, with no channel node in /dev and even without
/// the driver's /proc directory.
#[test]
fn deny_gpus_covers_the_imex_channels_major() {
    let t = Tree::new("vendor-imex-deny");
    t.write("proc/devices", IMEX_DEVICES);
    let majors = drmtool::isolate::deny::machine_majors_in(&t.roots());
    for m in [195, 226, 237, 261, 509] {
        assert!(majors.contains(&m), "{m} in {majors:?}");
    }
    let t = Tree::new("vendor-imex-deny-none");
    t.write("proc/devices", "Character devices:\n  1 mem\n");
    assert_eq!(
        drmtool::isolate::deny::machine_majors_in(&t.roots()),
        [195, 226, 261]
    );
}
