//! `drmtool topo`'s report on a synthetic sysfs: a PCIe switch holding two GPUs and an
//! NVMe disk, a root-complex GPU without a PCIe link, a second NUMA node's host bridge
//! with a GPU and a NIC, a platform GPU (vgem), virtual class devices; the JSON checked
//! against `tools/schema/topo.schema.json`.

use drmtool::gpu::Gpu;
use drmtool::topo::Class::{self, *};
use drmtool::topo::report::{DeviceKind, read_report_at, render};
use serde_json::Value;

mod vendor_tree;
use vendor_tree::Tree;

const SW: &str = "pci0000:00/0000:00:01.0/0000:01:00.0";

/// A PCI function at `sys/devices/<path>` linked from `sys/bus/pci/devices`.
fn function(t: &Tree, path: &str, numa: &str) {
    let bus = path.rsplit('/').next().unwrap();
    t.write(
        &format!("sys/devices/{path}/numa_node"),
        format!("{numa}\n"),
    );
    t.link(
        &t.0.join(format!("sys/devices/{path}"))
            .display()
            .to_string(),
        &format!("sys/bus/pci/devices/{bus}"),
    );
}

/// A class device `class/<class>/<name>` linked to `sys/devices/<path>`.
fn class_device(t: &Tree, class: &str, name: &str, path: &str) {
    t.dir(&format!("sys/devices/{path}"));
    t.link(
        &t.0.join(format!("sys/devices/{path}"))
            .display()
            .to_string(),
        &format!("sys/class/{class}/{name}"),
    );
}

fn gpu(index: usize, name: &str, driver: &str, bus: Option<&str>, numa: Option<u32>) -> Gpu {
    Gpu {
        index,
        bus_id: bus.map(String::from),
        name: name.into(),
        driver: Some(driver.into()),
        pci_id: None,
        nodes: Vec::new(),
        vendor_nodes: Vec::new(),
        numa_node: numa,
        local_cpulist: numa.map(|n| {
            if n == 0 {
                "0-7".into()
            } else {
                "8-15\n;".into()
            }
        }),
    }
}

fn machine() -> (Tree, Vec<Gpu>) {
    let t = Tree::new("topo");
    let a = format!("{SW}/0000:02:01.0/0000:03:00.0");
    let b = format!("{SW}/0000:02:02.0/0000:04:00.0");
    let nvme = format!("{SW}/0000:02:03.0/0000:05:00.0");
    for f in [&a, &b, &nvme] {
        function(&t, f, "0");
    }
    for (f, v) in [
        ("current_link_speed", "8.0 GT/s PCIe"),
        ("current_link_width", "8"),
        ("max_link_speed", "16.0 GT/s PCIe"),
        ("max_link_width", "16"),
    ] {
        t.write(&format!("sys/devices/{a}/{f}"), format!("{v}\n"));
    }
    function(&t, "pci0000:00/0000:00:02.0", "0");
    t.write(
        "sys/devices/pci0000:00/0000:00:02.0/current_link_speed",
        "Unknown\n",
    );
    t.write(
        "sys/devices/pci0000:00/0000:00:02.0/current_link_width",
        "0\n",
    );
    function(&t, "pci0000:80/0000:80:01.0/0000:81:00.0", "1");
    function(&t, "pci0000:80/0000:80:02.0", "1");
    class_device(
        &t,
        "block",
        "nvme0n1",
        &format!("{nvme}/nvme/nvme0/nvme0n1"),
    );
    class_device(
        &t,
        "block",
        "nvme0n1p1",
        &format!("{nvme}/nvme/nvme0/nvme0n1/nvme0n1p1"),
    );
    t.write(
        &format!("sys/devices/{nvme}/nvme/nvme0/nvme0n1/nvme0n1p1/partition"),
        "1\n",
    );
    class_device(&t, "block", "loop0", "virtual/block/loop0");
    class_device(
        &t,
        "net",
        "eth\x1b[31m0",
        "pci0000:80/0000:80:02.0/virtio1/net/eth0",
    );
    class_device(&t, "net", "lo", "virtual/net/lo");
    t.write("sys/devices/system/node/node0/distance", "10 21\n");
    t.write("sys/devices/system/node/node1/distance", "21 10\n");
    let gpus = vec![
        gpu(
            0,
            "0000:00:02.0",
            "bochs-drm",
            Some("0000:00:02.0"),
            Some(0),
        ),
        gpu(1, "0000:03:00.0", "amdgpu", Some("0000:03:00.0"), Some(0)),
        gpu(2, "0000:04:00.0", "amdgpu", Some("0000:04:00.0"), Some(0)),
        gpu(3, "0000:81:00.0", "xe", Some("0000:81:00.0"), Some(1)),
        gpu(4, "vgem", "vgem", None, None),
    ];
    (t, gpus)
}

#[test]
fn classes_links_nearby_devices_and_numa_from_a_synthetic_sysfs() {
    let (t, gpus) = machine();
    let r = read_report_at(&gpus, &t.0.join("sys"));
    let want: [[Option<Class>; 5]; 5] = [
        [Some(Same), Some(Phb), Some(Phb), Some(Sys), None],
        [Some(Phb), Some(Same), Some(Pix), Some(Sys), None],
        [Some(Phb), Some(Pix), Some(Same), Some(Sys), None],
        [Some(Sys), Some(Sys), Some(Sys), Some(Same), None],
        [None, None, None, None, Some(Same)],
    ];
    assert_eq!(r.matrix, want.map(Vec::from).to_vec());
    let g1 = &r.gpus[1];
    let path = g1.pci_path.as_ref().unwrap();
    assert_eq!(path.host_bridge, "pci0000:00");
    assert_eq!(
        path.bridges,
        ["0000:00:01.0", "0000:01:00.0", "0000:02:01.0"]
    );
    let link = g1.link.as_ref().unwrap();
    assert_eq!(
        (
            link.current_speed.as_deref(),
            link.current_width,
            link.max_width
        ),
        (Some("8.0 GT/s PCIe"), Some(8), Some(16))
    );
    // "Unknown" and width 0 (no link): none; a platform device: no path, no DRA root.
    assert_eq!(r.gpus[0].link, None);
    assert_eq!(r.gpus[4].pci_path, None);
    assert_eq!(r.gpus[4].dra.pcie_root, None);
    assert_eq!(r.gpus[3].dra.pcie_root.as_deref(), Some("pci0000:80"));
    // A CPU list that is not one reads as unknown.
    assert_eq!(r.gpus[1].local_cpus.as_deref(), Some("0-7"));
    assert_eq!(r.gpus[3].local_cpus, None);
    // The disk (not its partition) under the switch: PIX to both GPUs on it; the NIC on
    // node 1: SYS to node 0's GPUs, PHB to the GPU on its host bridge; lo and loop0 counted.
    let near: Vec<(DeviceKind, String, Vec<Option<Class>>)> = r
        .devices
        .iter()
        .map(|d| (d.kind, d.name.escaped(), d.classes.clone()))
        .collect();
    assert_eq!(
        near,
        [
            (
                DeviceKind::Net,
                "eth\\x1b[31m0".to_string(),
                vec![Some(Sys), Some(Sys), Some(Sys), Some(Phb), None]
            ),
            (
                DeviceKind::Block,
                "nvme0n1".to_string(),
                vec![Some(Phb), Some(Pix), Some(Pix), Some(Sys), None]
            ),
        ]
    );
    assert_eq!(r.devices[1].bus_id, "0000:05:00.0");
    assert_eq!(r.off_pci, 2);
    assert!(!r.truncated);
    let numa = r.numa.as_ref().unwrap();
    assert_eq!(numa[1].distances, [21, 10]);
    let text = render(&r);
    assert!(!text.contains('\x1b'), "{text}");
    for want in [
        "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:03:00.0",
        "8.0 GT/s PCIe x8 (max 16.0 GT/s PCIe x16)",
        "none (a platform device: not on PCI)",
        "PIX   through at most one PCIe switch",
        "(2 class device(s) not on PCI left out)",
        "NUMA distances:",
    ] {
        assert!(text.contains(want), "{want:?} in:\n{text}");
    }
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["gpus"][1]["dra"]["pciBusID"], "0000:03:00.0");
    assert_eq!(v["gpus"][1]["dra"]["pcieRoot"], "pci0000:00");
    assert_eq!(v["gpus"][1]["dra"]["numaNode"], 0);
    assert_eq!(v["matrix"][1][2], "PIX");
    validate(&v);
}

#[test]
fn a_machine_without_numa_or_class_devices() {
    let t = Tree::new("topo-bare");
    function(&t, "pci0000:00/0000:00:02.0", "-1");
    let gpus = vec![gpu(
        0,
        "0000:00:02.0",
        "bochs-drm",
        Some("0000:00:02.0"),
        None,
    )];
    let r = read_report_at(&gpus, &t.0.join("sys"));
    assert_eq!(r.numa, None);
    assert!(r.devices.is_empty());
    assert_eq!(r.matrix, vec![vec![Some(Same)]]);
    assert!(render(&r).contains("NUMA: no node table"));
    validate(&serde_json::to_value(&r).unwrap());
    // A broken table (rows of unequal length) is no table.
    t.write("sys/devices/system/node/node0/distance", "10 21\n");
    let r = read_report_at(&gpus, &t.0.join("sys"));
    assert_eq!(r.numa, None);
}

fn validate(v: &Value) {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/schema/topo.schema.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator.iter_errors(v).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:?}\n{v:#}");
}

#[test]
fn near_specs_parse_and_refuse() {
    use drmtool::topo::near::{Near, parse_cpus};
    assert_eq!("numa:1".parse::<Near>().unwrap(), Near::Numa(1));
    assert_eq!(
        "cpus:3,0-1,1".parse::<Near>().unwrap(),
        Near::Cpus(vec![0, 1, 3])
    );
    assert_eq!(
        "net:eno1".parse::<Near>().unwrap(),
        Near::Net("eno1".into())
    );
    assert_eq!(
        "path:/data/x".parse::<Near>().unwrap(),
        Near::Path("/data/x".into())
    );
    assert!(matches!("gpu:0".parse::<Near>().unwrap(), Near::Gpu(_)));
    for bad in [
        "numa",
        "numa:",
        "numa:-1",
        "cpus:3-1",
        "cpus:a",
        "net:eth\x1b0",
        "net:../x",
        "net:averyveryverylongname",
        "rack:1",
        "gpu:",
    ] {
        assert!(bad.parse::<Near>().is_err(), "{bad:?}");
    }
    assert_eq!(
        parse_cpus("0-65535").map(|v| v.len()),
        Some(65_536),
        "the bound"
    );
    assert_eq!(parse_cpus("0-65536"), None, "past the bound");
}

#[test]
fn near_specs_resolve_on_a_synthetic_sysfs() {
    use drmtool::topo::near::{Near, NearError};
    let (t, gpus) = machine();
    let sys = t.0.join("sys");
    t.write("sys/devices/system/node/node0/cpulist", "0-7\n");
    t.write("sys/devices/system/node/node1/cpulist", "8-15\n");
    class_device(
        &t,
        "net",
        "eno1",
        "pci0000:80/0000:80:02.0/virtio2/net/eno1",
    );
    let near = |s: &str| s.parse::<Near>().unwrap().resolve(&gpus, &sys);
    let classes = |s: &str| -> Vec<Option<Class>> {
        let target = near(s).unwrap();
        let r = read_report_at(&gpus, &sys);
        r.gpus
            .iter()
            .map(|g| target.class_from(g.pci_path.as_ref(), g.numa_node))
            .collect()
    };
    assert_eq!(
        classes("numa:1"),
        [Some(Sys), Some(Sys), Some(Sys), Some(Node), None]
    );
    assert_eq!(classes("cpus:8-9"), classes("numa:1"));
    assert!(matches!(near("cpus:7-8"), Err(NearError::CpusSpan(_))));
    assert!(matches!(near("numa:5"), Err(NearError::NoNode(5))));
    assert_eq!(
        classes("gpu:1"),
        [Some(Phb), Some(Same), Some(Pix), Some(Sys), None]
    );
    assert!(matches!(near("gpu:vgem"), Err(NearError::NotOnPci { .. })));
    assert!(matches!(
        near("gpu:nosuchdriver"),
        Err(NearError::Gpu { .. })
    ));
    assert_eq!(
        classes("net:eno1"),
        [Some(Sys), Some(Sys), Some(Sys), Some(Phb), None]
    );
    assert!(matches!(near("net:lo"), Err(NearError::NotOnPci { .. })));
    assert!(matches!(near("net:eth9"), Err(NearError::NotOnPci { .. })));
    // A file whose file system's device number sysfs maps to the NVMe disk's partition
    // under the switch: PIX to the two GPUs on it.
    let file = t.0.join("data");
    std::fs::write(&file, "x").unwrap();
    let st = rustix::fs::stat(&file).unwrap();
    let dev = format!(
        "{}:{}",
        rustix::fs::major(st.st_dev),
        rustix::fs::minor(st.st_dev)
    );
    let spec = format!("path:{}", file.display());
    assert!(
        matches!(near(&spec), Err(NearError::NotOnPci { .. })),
        "no /sys/dev/block entry yet"
    );
    t.link(
        &t.0.join(format!(
            "sys/devices/{SW}/0000:02:03.0/0000:05:00.0/nvme/nvme0/nvme0n1/nvme0n1p1"
        ))
        .display()
        .to_string(),
        &format!("sys/dev/block/{dev}"),
    );
    assert_eq!(
        classes(&spec),
        [Some(Phb), Some(Pix), Some(Pix), Some(Sys), None]
    );
}
