//! Vendor node discovery (issue 28, phase 1) over synthetic /proc, /sys and /dev trees: a
//! two-GPU NVIDIA machine with MIG on one GPU, kfd and an accelerator, checked node by
//! node; hostile trees (clashing minors, capabilities of unknown GPUs, oversized and deep
//! trees, odd names) reported as unidentified, never guessed.

use drmtool::vendor::{
    MajorError, Reason, ValueError, VendorNodeKind as K, VendorReport, VendorRoots, discover,
};
use std::path::{Path, PathBuf};

/// A synthetic tree under the temp dir, removed when dropped (as tests/synthetic's
/// `TreeDir`).
struct Tree(PathBuf);

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Tree {
    /// A tree unique to this call (tests run in parallel, two of them on `machine()`).
    fn new(name: &str) -> Tree {
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let root =
            std::env::temp_dir().join(format!("drmtool-vendor-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        Tree(root)
    }

    fn write(&self, rel: &str, text: impl AsRef<[u8]>) {
        let p = self.0.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn dir(&self, rel: &str) {
        std::fs::create_dir_all(self.0.join(rel)).unwrap();
    }

    fn link(&self, target: &str, rel: &str) {
        let p = self.0.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, p).unwrap();
    }

    fn roots(&self) -> VendorRoots {
        VendorRoots {
            proc_root: self.0.join("proc"),
            sys_root: self.0.join("sys"),
            dev_root: self.0.join("dev"),
        }
    }

    fn rel(&self, p: &Path) -> String {
        p.strip_prefix(&self.0).unwrap().display().to_string()
    }
}

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
    let t = Tree::new("machine");
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
    let t = Tree::new("empty");
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
    let t = Tree::new("clash");
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
    let t = Tree::new("hostile");
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
    let t = Tree::new("wide");
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
    let t = Tree::new("devices");
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
