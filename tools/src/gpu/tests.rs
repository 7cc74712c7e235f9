//! Unit tests of the ordering and GPU specs (`gpu.rs`).

use super::*;

fn gpu(bus: Option<&str>, name: &str, driver: &str, minor: u32) -> Gpu {
    Gpu {
        index: 99,
        bus_id: bus.map(str::to_string),
        name: name.into(),
        driver: Some(driver.into()),
        pci_id: None,
        nodes: vec![
            Node {
                path: format!("/dev/dri/renderD{}", 128 + minor).into(),
                kind: NodeKind::Render,
                dev: (226, 128 + minor),
                by_path: bus.map(|b| format!("pci-{b}-render")),
            },
            Node {
                path: format!("/dev/dri/card{minor}").into(),
                kind: NodeKind::Primary,
                dev: (226, minor),
                by_path: bus.map(|b| format!("pci-{b}-card")),
            },
        ],
        vendor_nodes: Vec::new(),
        numa_node: None,
        local_cpulist: None,
    }
}

#[test]
fn pci_first_by_bus_id_then_platform_by_name() {
    let g = order(vec![
        gpu(None, "vkms", "vkms", 0),
        gpu(Some("0000:00:05.0"), "virtio3", "virtio_gpu", 1),
        gpu(None, "vgem", "vgem", 2),
        gpu(Some("0000:00:02.0"), "0000:00:02.0", "bochs-drm", 3),
    ]);
    let names: Vec<(usize, &str)> = g.iter().map(|g| (g.index, g.name.as_str())).collect();
    assert_eq!(
        names,
        [
            (0, "0000:00:02.0"),
            (1, "virtio3"),
            (2, "vgem"),
            (3, "vkms")
        ]
    );
    assert_eq!(g[0].nodes[0].kind, NodeKind::Primary, "the card node first");
}

#[test]
fn specs() {
    let p = |s: &str| s.parse::<GpuSpec>();
    assert_eq!(p("1"), Ok(GpuSpec::Index(1)));
    assert_eq!(p("00:04.0"), Ok(GpuSpec::BusId("0000:00:04.0".into())));
    assert_eq!(p("0000:00:04.0"), Ok(GpuSpec::BusId("0000:00:04.0".into())));
    assert_eq!(
        p("/dev/dri/card1"),
        Ok(GpuSpec::Node("/dev/dri/card1".into()))
    );
    assert_eq!(p("card1"), Ok(GpuSpec::Node("/dev/dri/card1".into())));
    assert_eq!(
        p("renderD129"),
        Ok(GpuSpec::Node("/dev/dri/renderD129".into()))
    );
    assert_eq!(p("226:129"), Ok(GpuSpec::Dev(226, 129)));
    assert_eq!(
        p("pci-0000:00:04.0-render"),
        Ok(GpuSpec::ByPath("pci-0000:00:04.0-render".into()))
    );
    assert_eq!(p("vgem"), Ok(GpuSpec::Driver("vgem".into())));
    assert_eq!(p("cardx"), Ok(GpuSpec::Driver("cardx".into())));
    // A GPU's vendor node, by path, short name or device number.
    assert_eq!(p("nvidia0"), Ok(GpuSpec::Node("/dev/nvidia0".into())));
    assert_eq!(p("/dev/nvidia0"), Ok(GpuSpec::Node("/dev/nvidia0".into())));
    assert_eq!(p("accel0"), Ok(GpuSpec::Node("/dev/accel/accel0".into())));
    assert_eq!(p("195:0"), Ok(GpuSpec::Dev(195, 0)));
    assert_eq!(p("nvidia"), Ok(GpuSpec::Driver("nvidia".into())));
    assert_eq!(p("nvidiactl"), Ok(GpuSpec::Driver("nvidiactl".into())));
    assert_eq!(p(""), Err(SpecError::Empty));
    assert_eq!(p("a b"), Err(SpecError::Unknown("a b".into())));
    assert_eq!(
        p("99999999999999999999999"),
        Err(SpecError::OutOfRange("99999999999999999999999".into()))
    );
    assert_eq!(
        p("226:99999999999"),
        Err(SpecError::OutOfRange("226:99999999999".into()))
    );
    assert_eq!(p(":1"), Err(SpecError::Unknown(":1".into())));
    // What is printed reads back as the same spec.
    for s in [
        "1",
        "0000:00:04.0",
        "/dev/dri/card1",
        "226:1",
        "pci-0000:00:04.0-card",
        "vgem",
        "/dev/nvidia0",
        "/dev/accel/accel0",
    ] {
        assert_eq!(p(&p(s).unwrap().to_string()), p(s), "{s}");
    }
}

#[test]
fn drivers_are_named_with_dashes_or_underscores_and_without_drm() {
    assert!(driver_matches("virtio_gpu", "virtio-gpu"));
    assert!(driver_matches("virtio_gpu", "virtio_gpu"));
    assert!(driver_matches("bochs-drm", "bochs"));
    assert!(driver_matches("bochs-drm", "bochs-drm"));
    assert!(!driver_matches("bochs-drm", "boch"));
    assert!(!driver_matches("vkms", "vgem"));
}

#[test]
fn selection() {
    let g = order(vec![
        gpu(None, "vkms", "vkms", 0),
        gpu(Some("0000:00:05.0"), "virtio3", "virtio_gpu", 1),
    ]);
    let pick = |s: &str| {
        select(&[s.parse().unwrap()], &g).map(|v| v.iter().map(|g| g.index).collect::<Vec<_>>())
    };
    assert_eq!(pick("1"), Ok(vec![1]));
    assert_eq!(pick("vkms"), Ok(vec![1]));
    assert_eq!(pick("virtio-gpu"), Ok(vec![0]));
    assert_eq!(pick("00:05.0"), Ok(vec![0]));
    assert_eq!(pick("pci-0000:00:05.0-card"), Ok(vec![0]));
    assert_eq!(pick("/dev/dri/renderD128"), Ok(vec![1]));
    assert_eq!(pick("renderD128"), Ok(vec![1]));
    assert_eq!(pick("226:1"), Ok(vec![0]));
    let e = pick("7").unwrap_err();
    assert_eq!(
        e.to_string(),
        "no GPU matches 7; the GPUs here: 0 0000:00:05.0 virtio_gpu, 1 vkms vkms (hint: \
         `drmtool devices` lists them)"
    );
    // Each GPU once, in spec order.
    let both = select(
        &[
            "1".parse().unwrap(),
            "0".parse().unwrap(),
            "vkms".parse().unwrap(),
        ],
        &g,
    )
    .unwrap();
    assert_eq!(both.iter().map(|g| g.index).collect::<Vec<_>>(), [1, 0]);
    // Node commands: the named node, else each GPU's card node.
    let nodes = |s: Option<&str>| {
        let spec = s.map(|s| s.parse::<GpuSpec>().unwrap());
        nodes_of(spec.as_ref(), &g).map(|v| {
            v.iter()
                .map(|n| n.path.display().to_string())
                .collect::<Vec<_>>()
        })
    };
    assert_eq!(
        nodes(None),
        Ok(vec!["/dev/dri/card1".into(), "/dev/dri/card0".into()])
    );
    assert_eq!(nodes(Some("0")), Ok(vec!["/dev/dri/card1".into()]));
    assert_eq!(
        nodes(Some("226:129")),
        Ok(vec!["/dev/dri/renderD129".into()])
    );
    assert_eq!(
        nodes(Some("pci-0000:00:05.0-render")),
        Ok(vec!["/dev/dri/renderD129".into()])
    );
    assert!(matches!(
        nodes(Some("226:7")),
        Err(SelectError::NoMatch { .. })
    ));
}
