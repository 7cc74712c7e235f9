//! `drmtool cdi generate` and `pick --format cdi` on the host (issue 28): the spec of a
//! synthetic machine (two PCI GPUs, one of them NVIDIA with a MIG capability, plus a
//! platform GPU; an NVIDIA GPU without a DRM node and an accelerator that are not in the
//! ordering) checked device by device and node by node, validated against
//! tools/schema/cdi-spec.schema.json, written as YAML that reads back the same, the same
//! bytes every time, written atomically; names and kinds refused; usage exit codes. The
//! podman side is the lead's guest test.

use drm_gem::NodeKind;
use drmtool::cdi::{
    self, AliasError, CdiError, CdiFormat, CdiKind, CdiSpec, Generated, KindError, LeftOut,
};
use drmtool::gpu::{Gpu, Node};
use drmtool::vendor::{VendorReport, discover};
use serde_json::Value;
use std::path::Path;
use std::process::ExitCode;

mod vendor_tree;
use vendor_tree::Tree;

fn information(bus: &str, minor: &str) -> String {
    format!("Model: \t\t NVIDIA A100-SXM4-80GB\nBus Location: \t {bus}\nDevice Minor: \t {minor}\n")
}

/// The vendor side: NVIDIA 3b (minor 0, one MIG instance; `gpu3b_minor` lets a test break
/// it) and 5e (minor 1, no DRM node, so not in the ordering), nvidia-uvm and nvidia-caps
/// loaded, nvidia-modeset, the shared MIG rights, kfd, an accelerator at d8. `nvidia0`
/// exists in dev (mode 0640), the others do not.
fn vendor_tree(gpu3b_minor: &str) -> Tree {
    let t = Tree::new("cdi-machine");
    t.write(
        "proc/devices",
        "Character devices:\n195 nvidia-frontend\n226 drm\n236 nvidia-caps\n261 accel\n\
         509 nvidia-uvm\n510 kfd\n\nBlock devices:\n  8 sd\n",
    );
    let gpus = "proc/driver/nvidia/gpus";
    t.write(
        &format!("{gpus}/0000:3b:00.0/information"),
        information("0000:3b:00.0", gpu3b_minor),
    );
    t.write(
        &format!("{gpus}/0000:5e:00.0/information"),
        information("0000:5e:00.0", "1"),
    );
    let caps = "proc/driver/nvidia/capabilities";
    let cap = |m: u32| format!("DeviceFileMinor: {m}\nDeviceFileMode: 292\nDeviceFileModify: 1\n");
    t.write(&format!("{caps}/mig/config"), cap(1));
    t.write(&format!("{caps}/gpu0/mig/gi1/access"), cap(147));
    t.write(&format!("{caps}/gpu1/mig/gi2/access"), cap(156));
    std::fs::create_dir_all(t.0.join("sys/module/nvidia_modeset")).unwrap();
    t.write("sys/class/kfd/kfd/dev", "510:0\n");
    let accel = "sys/devices/pci0000:d7/0000:d7:00.0/0000:d8:00.0/accel/accel0";
    t.write(&format!("{accel}/dev"), "261:0\n");
    std::os::unix::fs::symlink("../../../0000:d8:00.0", t.0.join(format!("{accel}/device")))
        .unwrap();
    std::fs::create_dir_all(t.0.join("sys/class/accel")).unwrap();
    std::os::unix::fs::symlink(
        format!("../../{}", accel.trim_start_matches("sys/")),
        t.0.join("sys/class/accel/accel0"),
    )
    .unwrap();
    t.write("dev/nvidia0", "");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        t.0.join("dev/nvidia0"),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    t
}

fn node(path: &str, kind: NodeKind, minor: u32) -> Node {
    Node {
        path: path.into(),
        kind,
        dev: (226, minor),
        by_path: None,
    }
}

fn gpu(index: usize, bus: Option<&str>, name: &str, driver: &str, nodes: Vec<Node>) -> Gpu {
    Gpu {
        index,
        bus_id: bus.map(String::from),
        name: name.into(),
        driver: Some(driver.into()),
        pci_id: bus.map(|_| (0x10de, 0x20b2)),
        nodes,
        vendor_nodes: Vec::new(),
        numa_node: None,
        local_cpulist: None,
    }
}

/// The ordering: NVIDIA at 3b (with nvidia-drm), amdgpu at c1, vkms.
fn ordering() -> Vec<Gpu> {
    use NodeKind::{Primary, Render};
    vec![
        gpu(
            0,
            Some("0000:3b:00.0"),
            "0000:3b:00.0",
            "nvidia",
            vec![
                node("/dev/dri/card0", Primary, 0),
                node("/dev/dri/renderD128", Render, 128),
            ],
        ),
        gpu(
            1,
            Some("0000:c1:00.0"),
            "0000:c1:00.0",
            "amdgpu",
            vec![
                node("/dev/dri/card1", Primary, 1),
                node("/dev/dri/renderD129", Render, 129),
            ],
        ),
        gpu(
            2,
            None,
            "vkms",
            "vkms",
            vec![node("/dev/dri/card2", Primary, 2)],
        ),
    ]
}

/// The permission bits of a file in the synthetic tree (the real [`cdi::file_mode`] wants
/// a character device of that number, which a test cannot make).
fn mode_of(p: &Path, _dev: (u32, u32)) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(p).ok().map(|m| m.mode() & 0o777)
}

fn build(all: &[Gpu], report: &VendorReport, t: &Tree) -> Result<Generated, CdiError> {
    cdi::build(
        all,
        report,
        &CdiKind::default(),
        &t.roots().dev_root,
        &mode_of,
    )
}

fn device<'s>(spec: &'s CdiSpec, name: &str) -> &'s cdi::CdiDevice {
    spec.devices
        .iter()
        .find(|d| d.name == name)
        .unwrap_or_else(|| panic!("no device {name}"))
}

fn paths(spec: &CdiSpec, name: &str) -> Vec<String> {
    device(spec, name)
        .container_edits
        .device_nodes
        .iter()
        .map(|n| n.path.clone())
        .collect()
}

fn schema() -> jsonschema::Validator {
    let p = format!("{}/schema/cdi-spec.schema.json", env!("CARGO_MANIFEST_DIR"));
    let s: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    jsonschema::validator_for(&s).expect("the schema is a valid JSON Schema")
}

fn errors(v: &Value) -> Vec<String> {
    schema()
        .iter_errors(v)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect()
}

#[test]
fn each_gpu_gets_its_own_nodes_and_the_shared_ones_it_needs() {
    let t = vendor_tree("0");
    let report = discover(&t.roots());
    let g = build(&ordering(), &report, &t).unwrap();
    assert!(g.left_out.is_empty(), "{:?}", g.left_out);
    let s = &g.spec;
    assert_eq!(
        (s.cdi_version.as_str(), s.kind.as_str()),
        ("0.5.0", "drmtool.dev/gpu")
    );
    let names: Vec<&str> = s.devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(
        names,
        ["0", "0000:3b:00.0", "1", "0000:c1:00.0", "2", "vkms", "all"]
    );
    let nvidia = [
        "/dev/dri/card0",
        "/dev/dri/renderD128",
        "/dev/nvidia-caps/nvidia-cap147",
        "/dev/nvidia-modeset",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia0",
        "/dev/nvidiactl",
    ];
    assert_eq!(paths(s, "0"), nvidia);
    assert_eq!(
        device(s, "0"),
        &cdi::CdiDevice {
            name: "0".into(),
            ..device(s, "0000:3b:00.0").clone()
        }
    );
    // Never the other NVIDIA GPU's node or MIG instance, the shared MIG rights, the
    // accelerator of no GPU here.
    let amd = ["/dev/dri/card1", "/dev/dri/renderD129", "/dev/kfd"];
    assert_eq!(paths(s, "0000:c1:00.0"), amd);
    assert_eq!(paths(s, "vkms"), ["/dev/dri/card2"]);
    let mut every: Vec<&str> = nvidia.iter().chain(&amd).copied().collect();
    every.push("/dev/dri/card2");
    every.sort();
    assert_eq!(paths(s, "all"), every);
    // Numbers from the kernel's view, rw, fileMode only where the node exists.
    let n = &device(s, "0").container_edits.device_nodes;
    let find = |p: &str| n.iter().find(|x| x.path == p).unwrap();
    let uvm = find("/dev/nvidia-uvm");
    assert_eq!(
        (uvm.node_type.as_str(), uvm.major, uvm.minor),
        ("c", 509, 0)
    );
    assert_eq!(
        (find("/dev/nvidiactl").major, find("/dev/nvidiactl").minor),
        (195, 255)
    );
    assert_eq!(find("/dev/nvidia-caps/nvidia-cap147").major, 236);
    assert_eq!(find("/dev/dri/renderD128").minor, 128);
    assert!(n.iter().all(|x| x.permissions == "rw"));
    assert_eq!(find("/dev/nvidia0").file_mode, Some(0o640));
    assert_eq!(uvm.file_mode, None);
    // Per-GPU variables that no merge of two devices can lose; no vendor variable.
    assert_eq!(
        device(s, "0").container_edits.env,
        ["DRMTOOL_GPU_0=0000:3b:00.0"]
    );
    assert_eq!(
        device(s, "vkms").container_edits.env,
        ["DRMTOOL_GPU_2=vkms"]
    );
    assert_eq!(
        device(s, "all").container_edits.env,
        [
            "DRMTOOL_GPU_0=0000:3b:00.0",
            "DRMTOOL_GPU_1=0000:c1:00.0",
            "DRMTOOL_GPU_2=vkms"
        ]
    );
    assert!(s.container_edits.is_empty());
    // pick --format cdi's names: the bus id, off PCI the name.
    assert_eq!(
        cdi::qualified_names(&CdiKind::default(), &ordering(), &[2, 0]),
        ["drmtool.dev/gpu=vkms", "drmtool.dev/gpu=0000:3b:00.0"]
    );
}

#[test]
fn the_spec_validates_reads_back_and_is_the_same_every_time() {
    let t = vendor_tree("0");
    let report = discover(&t.roots());
    let spec = build(&ordering(), &report, &t).unwrap().spec;
    let json = cdi::render(&spec, CdiFormat::Json).unwrap();
    let v: Value = serde_json::from_str(&json).unwrap();
    let e = errors(&v);
    assert!(e.is_empty(), "{e:#?}\n{json}");
    assert!(!json.contains("annotations") && !json.contains("hostPath"));
    assert_eq!(
        v["devices"][0]["containerEdits"]["deviceNodes"][0]["type"],
        "c"
    );
    let yaml = cdi::render(&spec, CdiFormat::Yaml).unwrap();
    let back: CdiSpec = serde_norway::from_str(&yaml).unwrap();
    assert_eq!(back, spec, "{yaml}");
    // A YAML 1.1 reader must read the names as strings: indices are quoted.
    assert!(yaml.contains("name: '0'"), "{yaml}");
    let back_json: CdiSpec = serde_json::from_str(&json).unwrap();
    assert_eq!(back_json, spec);
    // Same input, same bytes (a second discovery included).
    let again = build(&ordering(), &discover(&t.roots()), &t).unwrap().spec;
    assert_eq!(cdi::render(&again, CdiFormat::Yaml).unwrap(), yaml);
    assert_eq!(cdi::render(&again, CdiFormat::Json).unwrap(), json);
}

#[test]
fn the_schema_refuses_what_a_0_5_loader_refuses() {
    let t = vendor_tree("0");
    let spec = build(&ordering(), &discover(&t.roots()), &t).unwrap().spec;
    let good = serde_json::to_value(&spec).unwrap();
    let mut bad = good.clone();
    bad["devices"][0]["annotations"] = serde_json::json!({"a": "b"});
    assert!(!errors(&bad).is_empty(), "a 0.6.0 field");
    let mut bad = good.clone();
    bad["cdiVersion"] = "0.6.0".into();
    assert!(!errors(&bad).is_empty());
    let mut bad = good.clone();
    bad["devices"][0]["name"] = "-0".into();
    assert!(!errors(&bad).is_empty());
    let mut bad = good.clone();
    bad["kind"] = "drmtool.dev".into();
    assert!(!errors(&bad).is_empty());
    let mut bad = good.clone();
    bad["devices"][0]["containerEdits"]["deviceNodes"][0]["permissions"] = "rwx".into();
    assert!(!errors(&bad).is_empty());
    let mut bad = good.clone();
    bad["devices"][0]["containerEdits"] = serde_json::json!({});
    assert!(!errors(&bad).is_empty(), "a device edits something");
    // The fields drmtool does not write are still described.
    let mut more = good;
    more["containerEdits"] = serde_json::json!({
        "mounts": [{"hostPath": "/a", "containerPath": "/b", "options": ["ro"], "type": "bind"}],
        "hooks": [{"hookName": "createContainer", "path": "/bin/true", "args": ["true"],
                   "env": ["A=1"], "timeout": 5}],
        "deviceNodes": [{"path": "/dev/x", "hostPath": "/dev/y", "type": "c", "major": 1,
                         "minor": 3, "fileMode": 438, "permissions": "rwm", "uid": 0, "gid": 0}]
    });
    let e = errors(&more);
    assert!(e.is_empty(), "{e:#?}");
}

#[test]
fn a_gpu_with_an_unidentified_node_is_left_out_and_said_so() {
    let t = vendor_tree("-1");
    let report = discover(&t.roots());
    let g = build(&ordering(), &report, &t).unwrap();
    let names: Vec<&str> = g.spec.devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(
        names,
        ["1", "0000:c1:00.0", "2", "vkms", "all"],
        "indices kept"
    );
    assert!(matches!(
        &g.left_out[..],
        [LeftOut::Unidentified { index: 0, gpu, .. }] if gpu == "0000:3b:00.0"
    ));
    let why = g.left_out[0].to_string();
    assert!(why.contains("GPU 0 (0000:3b:00.0) is left out"), "{why}");
    let all = paths(&g.spec, "all");
    assert!(!all.iter().any(|p| p.contains("nvidia")), "{all:?}");
    assert!(
        !device(&g.spec, "all")
            .container_edits
            .env
            .iter()
            .any(|e| e.starts_with("DRMTOOL_GPU_0="))
    );
    // Nothing left: no spec (a spec without devices is refused by the loaders).
    let only = &ordering()[..1];
    match build(only, &report, &t) {
        Err(CdiError::NoDevice(l)) => assert_eq!(l.len(), 1),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        build(&[], &report, &t),
        Err(CdiError::NoDevice(l)) if l.is_empty()
    ));
}

#[test]
fn platform_names_that_cannot_be_device_names_are_left_to_the_index() {
    let plat = |i: usize, name: &str| {
        gpu(
            i,
            None,
            name,
            "vgem",
            vec![node(
                &format!("/dev/dri/card{i}"),
                NodeKind::Primary,
                i as u32,
            )],
        )
    };
    let all = vec![
        plat(0, "all"),
        plat(1, "bad name"),
        plat(2, "yes"),
        plat(3, "1"),
        plat(4, "esc\u{1b}"),
        plat(5, "vgem"),
    ];
    let t = vendor_tree("0");
    let g = build(&all, &VendorReport::default(), &t).unwrap();
    let names: Vec<&str> = g.spec.devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["0", "1", "2", "3", "4", "5", "vgem", "all"]);
    let why: Vec<(usize, &AliasError)> = g
        .left_out
        .iter()
        .map(|l| match l {
            LeftOut::Alias { index, why, .. } => (*index, why),
            other => panic!("{other:?}"),
        })
        .collect();
    assert!(matches!(
        why[..],
        [
            (0, AliasError::Taken),
            (
                1,
                AliasError::Invalid(cdi::NameError::Char { found: ' ', .. })
            ),
            (2, AliasError::NotAString),
            (3, AliasError::Taken),
            (4, AliasError::Invalid(_)),
        ]
    ));
    let text = g.left_out[4].to_string();
    assert!(
        text.contains("esc\\x1b") && !text.contains('\u{1b}'),
        "{text}"
    );
    assert_eq!(
        device(&g.spec, "4").container_edits.env,
        ["DRMTOOL_GPU_4=esc\\x1b"]
    );
    assert_eq!(
        cdi::qualified_names(&"a.b/c".parse().unwrap(), &all, &[1, 5]),
        ["a.b/c=1", "a.b/c=vgem"]
    );
    let e = errors(&serde_json::to_value(&g.spec).unwrap());
    assert!(e.is_empty(), "{e:#?}");
}

#[test]
fn kinds_are_validated_with_a_typed_error() {
    assert_eq!(
        "example.com/gpu".parse::<CdiKind>().unwrap().to_string(),
        "example.com/gpu"
    );
    for bad in [
        "gpu",
        "a/b/c",
        "-a/gpu",
        "a/gpu.",
        "a b/gpu",
        "nvidia.com/gpu=0",
        "",
    ] {
        let e: KindError = bad.parse::<CdiKind>().unwrap_err();
        assert!(!e.to_string().is_empty(), "{bad}");
    }
    assert_eq!(cdi::check_device_name("0000:3b:00.0"), Ok(()));
    assert!(cdi::check_device_name("all!").is_err());
}

#[test]
fn the_file_is_written_whole_0644_and_never_through_a_symlink() {
    use std::os::unix::fs::PermissionsExt;
    let t = vendor_tree("0");
    let spec = build(&ordering(), &discover(&t.roots()), &t).unwrap().spec;
    let dir = t.0.join("etc-cdi");
    std::fs::create_dir_all(&dir).unwrap();
    let yaml = dir.join("drmtool.yaml");
    assert_eq!(CdiFormat::for_path(&yaml), CdiFormat::Yaml);
    assert_eq!(CdiFormat::for_path(Path::new("x.YML")), CdiFormat::Yaml);
    assert_eq!(CdiFormat::for_path(Path::new("x.json")), CdiFormat::Json);
    assert_eq!(CdiFormat::for_path(Path::new("x")), CdiFormat::Json);
    std::fs::write(&yaml, "old").unwrap();
    cdi::write_file(&yaml, &spec, CdiFormat::Yaml).unwrap();
    let back: CdiSpec = serde_norway::from_str(&std::fs::read_to_string(&yaml).unwrap()).unwrap();
    assert_eq!(back, spec);
    let mode = std::fs::metadata(&yaml).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o644);
    let victim = dir.join("victim");
    std::fs::write(&victim, "keep").unwrap();
    let link = dir.join("link.json");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let e = cdi::write_file(&link, &spec, CdiFormat::Json).unwrap_err();
    assert!(
        matches!(
            e,
            CdiError::Write(drmtool::outfile::OutfileError::Symlink(_))
        ),
        "{e}"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(
        left,
        ["drmtool.yaml", "link.json", "victim"],
        "no temporary left"
    );
}

fn has_dri() -> bool {
    Path::new("/dev/dri").exists()
}

#[test]
fn usage_errors_exit_2_and_no_devices_exit_4() {
    use drmtool::cli::run_captured as run;
    for args in [
        &["cdi", "generate", "--kind", "gpu"][..],
        &["cdi", "generate", "--kind", "a/b/c"],
        &["cdi", "generate", "--kind", "1a/gpu"],
        &["cdi", "generate", "--format", "toml"],
        &["cdi"],
        &["pick", "--format", "cdi", "--kind", "x"],
        &["pick", "--kind", "a.b/gpu"],
        &["pick", "--format", "bdf", "--kind", "a.b/gpu"],
    ] {
        assert_eq!(run(args).0, ExitCode::from(2), "{args:?}");
    }
    if has_dri() {
        eprintln!("SKIP: this host has /dev/dri; the guest tests cover cdi generate");
        return;
    }
    for args in [
        &["cdi", "generate"][..],
        &["cdi", "generate", "--format", "yaml"],
        &["cdi", "generate", "--kind", "example.com/gpu"],
        &["pick", "--format", "cdi"],
        &["pick", "-n", "2", "--format", "cdi", "--kind", "a.b/gpu"],
    ] {
        let (code, out) = run(args);
        assert_eq!(code, ExitCode::from(4), "{args:?}");
        assert!(out.is_empty(), "{args:?}: {out}");
    }
    // No file is made when there is nothing to write.
    let t = Tree::new("cdi-nodev");
    let f = t.0.join("drmtool.yaml");
    let (code, _) = run(&["cdi", "generate", "-o", f.to_str().unwrap()]);
    assert_eq!(code, ExitCode::from(4));
    assert!(!f.exists());
}

#[test]
fn the_help_names_the_examples_and_that_pick_leases_nothing() {
    let mut cmd = drmtool::cli::command();
    let pick = cmd
        .find_subcommand_mut("pick")
        .unwrap()
        .render_long_help()
        .to_string();
    assert!(
        pick.contains("leases nothing") && pick.contains("run --pick"),
        "{pick}"
    );
    assert!(pick.contains("--format cdi"), "{pick}");
    let generate = cmd
        .find_subcommand_mut("cdi")
        .unwrap()
        .find_subcommand_mut("generate")
        .unwrap()
        .render_long_help()
        .to_string();
    for want in [
        "drmtool cdi generate -o /etc/cdi/drmtool.yaml",
        "podman run --device drmtool.dev/gpu=0",
        "0.5.0",
    ] {
        assert!(generate.contains(want), "{want}\n{generate}");
    }
}
