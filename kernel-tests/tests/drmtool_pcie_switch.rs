//! Placement on the PCIe switch profile (issue 30; `vm test --topology switch --test
//! drmtool_pcie_switch`, scripts/guest-topology): a q35 machine with two NUMA nodes (vCPU
//! 0 on node 0, vCPU 1 on node 1, distance 21) and a PCIe expander bridge per node. Behind
//! node 0's first root port a PCIe switch (an upstream port and three downstream ports)
//! holds GPU A, GPU B and an NVMe drive, "the data"; behind node 0's second root port is
//! GPU D; behind node 1's root port GPU C. So A and B are PIX to each other and to the
//! drive, D is PHB to them (the same host bridge, another root port), C is SYS to all.
//! The root bus's virtio-gpus are left out of this lane, so A, B, C and D are its only
//! virtio_gpu GPUs.
//!
//! Each test checks drmtool against the profile's definition (vm/src/guest/qemu.rs,
//! `SWITCH_DEVICES`), not against drmtool's own reading of it. Outside that guest every
//! test fails: the binary is built only for the profile's lane, which has the machine.

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

mod isolation_common;
use isolation_common::{drmtool, run_out};

mod schema_common;
use schema_common::validate;

/// The profile's GPUs and drive by PCI function: the expanders' root buses are 32 (node 0)
/// and 64 (node 1); below them the firmware numbers the buses depth first.
const A: &str = "0000:23:00.0";
const B: &str = "0000:24:00.0";
const D: &str = "0000:26:00.0";
const C: &str = "0000:41:00.0";
const NVME_FN: &str = "0000:25:00.0";

/// The profile's machine, checked: the guest says it has it (`VM_TOPOLOGY=switch`) and
/// both nodes and every GPU are there. Returns A's, B's, C's and D's indices in the
/// ordering.
fn profile() -> [usize; 4] {
    assert_eq!(
        std::env::var("VM_TOPOLOGY").as_deref(),
        Ok("switch"),
        "run in the PCIe switch profile (vm test --topology switch)"
    );
    assert!(std::path::Path::new("/sys/devices/system/node/node1").is_dir());
    let gpus = drmtool::gpu::gpus().expect("GPUs");
    let at = |bus: &str| {
        gpus.iter()
            .position(|g| g.bus_id.as_deref() == Some(bus))
            .unwrap_or_else(|| panic!("no GPU at {bus}: {}", drmtool::gpu::summary(&gpus)))
    };
    [at(A), at(B), at(C), at(D)]
}

fn json(args: &[&str], schema: &str) -> Value {
    let (code, out, err) = run_out(&mut drmtool(args));
    assert_eq!(code, 0, "drmtool {args:?}: {err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    validate(&v, schema, &format!("drmtool {args:?}"));
    v
}

/// The NVMe drive's block device (`nvme0n1`), found by its controller's PCI function.
fn nvme_disk() -> String {
    std::fs::read_dir("/sys/class/block")
        .expect("/sys/class/block")
        .flatten()
        .find(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("nvme")
                && !name.contains('p')
                && std::fs::canonicalize(e.path())
                    .is_ok_and(|p| p.to_string_lossy().contains(&format!("/{NVME_FN}/")))
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .unwrap_or_else(|| panic!("no NVMe namespace under {NVME_FN}"))
}

/// A file on an ext4 file system on the NVMe drive (made and mounted by the first test of
/// the boot that asks; each test is a process of its own): "my data".
fn data_file() -> PathBuf {
    let mnt = PathBuf::from("/tmp/switch-data");
    let file = mnt.join("dataset.bin");
    if file.exists() {
        return file;
    }
    let dev = format!("/dev/{}", nvme_disk());
    let run = |prog: &str, args: &[&str]| {
        let o = Command::new(prog).args(args).output().expect(prog);
        assert!(
            o.status.success(),
            "{prog} {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    run("mkfs.ext4", &["-q", "-F", &dev]);
    std::fs::create_dir_all(&mnt).unwrap();
    run("mount", &["-t", "ext4", &dev, &mnt.to_string_lossy()]);
    std::fs::write(&file, vec![7u8; 1 << 20]).unwrap();
    file
}

/// `topo`: the classes of the switch, the host bridge and the other node; A's way down
/// (root port, the switch's upstream and downstream ports) and its PCIe link; the drive
/// PIX to A and B, PHB to D, SYS to C.
#[test]
fn topo_classes_follow_the_switch() {
    let [a, b, c, d] = profile();
    let v = json(&["topo", "--json"], "topo.schema.json");
    let m = &v["matrix"];
    for (x, y, want) in [
        (a, b, "PIX"),
        (a, d, "PHB"),
        (b, d, "PHB"),
        (a, c, "SYS"),
        (b, c, "SYS"),
        (d, c, "SYS"),
    ] {
        assert_eq!(m[x][y], want, "{x} to {y}: {v}");
        assert_eq!(m[y][x], want, "{y} to {x}: {v}");
    }
    let g = &v["gpus"];
    assert_eq!(g[a]["dra"]["pcieRoot"], "pci0000:20", "{v}");
    assert_eq!(g[c]["dra"]["pcieRoot"], "pci0000:40", "{v}");
    assert_eq!(g[a]["numa_node"], 0, "{v}");
    assert_eq!(g[c]["numa_node"], 1, "{v}");
    let bridges = g[a]["pci_path"]["bridges"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", g[a]));
    assert_eq!(
        bridges.len(),
        3,
        "root port, upstream, downstream: {}",
        g[a]
    );
    assert_eq!(
        g[b]["pci_path"]["bridges"].as_array().map(|x| &x[..2]),
        Some(&bridges[..2]),
        "one root port and upstream port: {v}"
    );
    assert!(
        g[a]["link"]["current_width"].as_u64().is_some(),
        "a PCIe link: {}",
        g[a]
    );
    let drive = v["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["bus_id"] == NVME_FN)
        .unwrap_or_else(|| panic!("no device at {NVME_FN}: {v}"));
    assert_eq!(drive["kind"], "block", "{drive}");
    for (gpu, want) in [(a, "PIX"), (b, "PIX"), (d, "PHB"), (c, "SYS")] {
        assert_eq!(drive["classes"][gpu], want, "GPU {gpu}: {drive}");
    }
}

/// `pick --near path:` a file on the NVMe: a GPU behind the same switch; two: A and B
/// (PIX apart); three: A, B and D (PHB), never C across the nodes.
#[test]
fn pick_near_a_file_on_the_nvme_takes_the_gpus_behind_its_switch() {
    let [a, b, _, d] = profile();
    let near = format!("path:{}", data_file().display());
    let (code, out, why) = run_out(&mut drmtool(&["pick", "--near", &near]));
    assert_eq!(code, 0, "{why}");
    assert!([A, B].contains(&out.trim()), "{out}: {why}");
    assert!(why.contains(&format!("PIX to {near}")), "{why}");
    let set = |n: &str| -> Value {
        let v = json(
            &["pick", "-n", n, "--near", &near, "--format", "json"],
            "pick.schema.json",
        );
        eprintln!("pick -n {n}: {v}");
        v
    };
    let two = set("2");
    assert_eq!(two["chosen"], serde_json::json!([a, b]), "{two}");
    assert_eq!(two["group"]["worst"], "PIX", "{two}");
    let three = set("3");
    assert_eq!(three["chosen"], serde_json::json!([a, b, d]), "{three}");
    assert_eq!(three["group"]["worst"], "PHB", "{three}");
}

/// `place`: four exclusive jobs near the data among the four GPUs: the switch's two first,
/// then D, and C last; a job near node 1 with them takes C, and the fourth data job waits.
#[test]
fn place_fills_the_switch_then_its_host_bridge_then_the_other_node() {
    profile();
    let near = format!("path:{}", data_file().display());
    let dir = std::env::temp_dir().join(format!("switch-place-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let place = |reqs: Value| -> Value {
        validate(&reqs, "place-requests.schema.json", "requests");
        let file = dir.join("reqs.json");
        std::fs::write(&file, reqs.to_string()).unwrap();
        let sel = format!("{A},{B},{C},{D}");
        json(
            &["place", "--json", "--gpu", &sel, &file.to_string_lossy()],
            "place.schema.json",
        )
    };
    let job =
        |name: &str, near: &str| serde_json::json!({"name": name, "near": near, "exclusive": true});
    let v = place(serde_json::json!({"requests": [
        job("d1", &near), job("d2", &near), job("d3", &near), job("d4", &near)
    ]}));
    eprintln!("{v}");
    let mut got: Vec<(String, String)> = (0..4)
        .map(|j| {
            let g = &v["jobs"][j]["gpus"][0];
            (
                g["class"].as_str().unwrap_or("").to_string(),
                g["name"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    got.sort();
    let want: Vec<(String, String)> = [("PHB", D), ("PIX", A), ("PIX", B), ("SYS", C)]
        .iter()
        .map(|(c, g)| (c.to_string(), g.to_string()))
        .collect();
    assert_eq!(got, want, "{v}");
    let v = place(serde_json::json!({"requests": [
        job("d1", &near), job("d2", &near), job("d3", &near), job("far", "numa:1"), job("d4", &near)
    ]}));
    assert_eq!(v["jobs"][3]["gpus"][0]["name"], C, "{v}");
    let waiting: Vec<&Value> = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["gpus"].as_array().is_some_and(|g| g.is_empty()))
        .collect();
    assert_eq!(waiting.len(), 1, "one data job waits: {v}");
    let _ = std::fs::remove_dir_all(&dir);
}
