use super::*;

fn cap() -> Capacity {
    Capacity {
        regions: vec![
            ("drm/0000:00:05.0/vram0".into(), 64 << 20),
            ("drm/0000:00:05.0/stolen".into(), 8 << 20),
            ("drm/0000:00:07.0/vram0".into(), 16 << 20),
        ],
    }
}

const QXL: GpuRef<'static> = GpuRef {
    device: "0000:00:05.0",
    driver: "qxl",
};
const VKMS: GpuRef<'static> = GpuRef {
    device: "vkms",
    driver: "vkms",
};

#[test]
fn sizes_are_bytes_or_binary_multiples() {
    assert_eq!(parse_size("1048576").unwrap(), 1 << 20);
    assert_eq!(parse_size("8M").unwrap(), 8 << 20);
    assert_eq!(parse_size("8MiB").unwrap(), 8 << 20);
    assert_eq!(parse_size("4g").unwrap(), 4 << 30);
    assert_eq!(parse_size("512K").unwrap(), 512 << 10);
    assert_eq!(parse_size("2T").unwrap(), 2 << 40);
    for bad in [
        "",
        "M",
        "-1",
        "1.5G",
        "8X",
        "8 M",
        "99999999999999999999",
        "16777216T",
    ] {
        assert!(parse_size(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn files_parse_and_hostile_lines_are_refused() {
    let v = parse("drm/0000:03:00.0/vram0 1073741824\ndrm/0000:03:00.0/stolen max\n\n").unwrap();
    assert_eq!(
        v,
        [
            ("drm/0000:03:00.0/vram0".to_string(), Value::Bytes(1 << 30)),
            ("drm/0000:03:00.0/stolen".to_string(), Value::Max),
        ]
    );
    for bad in [
        "drm/a/b",
        "drm/a/b 1 2",
        "drm/a/b -1",
        "drm/a/b 1k",
        "drm/\u{1b}[2J/b 1",
        &format!("drm/{}/b 1", "x".repeat(300)),
    ] {
        assert!(
            matches!(parse(bad), Err(DmemError::BadLine { line: 1, .. })),
            "{bad:?}"
        );
    }
}

#[test]
fn regions_belong_to_their_device() {
    let c = cap();
    assert_eq!(
        c.regions_of("0000:00:05.0"),
        ["drm/0000:00:05.0/vram0", "drm/0000:00:05.0/stolen"]
    );
    assert!(c.regions_of("0000:00:05").is_empty());
    assert!(c.regions_of("vkms").is_empty());
    assert_eq!(region_device("drm/vkms/vram0"), Some("vkms"));
    assert_eq!(region_device("drm//vram0"), None);
    assert_eq!(region_device("gpu/x/y"), None);
    assert_eq!(c.size_of("drm/0000:00:07.0/vram0"), Some(16 << 20));
}

#[test]
fn a_plan_covers_every_region_of_the_jobs_gpus_or_the_one_named() {
    let c = cap();
    let all = LimitRequest::parse(Knob::Max, "8M").unwrap();
    let w = plan(std::slice::from_ref(&all), Some(&c), &[QXL]).unwrap();
    assert_eq!(w.len(), 2);
    assert!(
        w.iter()
            .all(|w| w.value == Value::Bytes(8 << 20) && w.knob == Knob::Max)
    );
    // A later request for one region wins over the all-regions one.
    let one = LimitRequest::parse(Knob::Max, "drm/0000:00:05.0/stolen=max").unwrap();
    let low = LimitRequest::parse(Knob::Low, "4M").unwrap();
    let w = plan(&[all.clone(), one, low], Some(&c), &[QXL]).unwrap();
    assert_eq!(
        w.iter()
            .map(|w| format!("{} {} {}", w.knob.file(), w.region, w.value))
            .collect::<Vec<_>>(),
        [
            "dmem.max drm/0000:00:05.0/vram0 8388608",
            "dmem.max drm/0000:00:05.0/stolen max",
            "dmem.low drm/0000:00:05.0/vram0 4194304",
            "dmem.low drm/0000:00:05.0/stolen 4194304",
        ]
    );
    assert!(plan(&[], None, &[VKMS]).unwrap().is_empty());
}

#[test]
fn a_plan_fails_closed() {
    let c = cap();
    let all = LimitRequest::parse(Knob::Max, "8M").unwrap();
    // No controller at all.
    let e = plan(std::slice::from_ref(&all), None, &[QXL]).unwrap_err();
    assert!(matches!(e, DmemError::NoController(_)), "{e}");
    assert!(e.to_string().contains("CONFIG_CGROUP_DMEM"), "{e}");
    // A GPU whose driver registers nothing, even beside one that does.
    let e = plan(&[all], Some(&c), &[QXL, VKMS]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "GPU vkms (vkms): its driver registers no dmem region, so --mem-max cannot be \
         enforced on it (regions here: drm/0000:00:05.0/vram0, drm/0000:00:05.0/stolen, \
         drm/0000:00:07.0/vram0)"
    );
    // Another GPU's region, and one that does not exist.
    for r in ["drm/0000:00:07.0/vram0=1M", "drm/0000:00:05.0/vram9=1M"] {
        let req = LimitRequest::parse(Knob::Min, r).unwrap();
        let e = plan(&[req], Some(&c), &[QXL]).unwrap_err();
        assert!(
            matches!(
                e,
                DmemError::NotTheJobs {
                    flag: "--mem-min",
                    ..
                }
            ),
            "{e}"
        );
    }
    let e = LimitRequest::parse(Knob::Low, "drm/x/y=lots").unwrap_err();
    assert_eq!(
        e.to_string(),
        "--mem-low: \"drm/x/y=lots\" is not a size (bytes, or a number with K, M, G or T: 8M, 4G)"
    );
}

#[test]
fn the_readback_must_show_every_value_written() {
    let w = vec![
        Setting {
            knob: Knob::Max,
            region: "drm/0000:00:05.0/vram0".into(),
            value: Value::Bytes(8 << 20),
        },
        Setting {
            knob: Knob::Low,
            region: "drm/0000:00:05.0/vram0".into(),
            value: Value::Max,
        },
    ];
    let ok = "drm/0000:00:05.0/vram0 8388608\ndrm/0000:00:07.0/vram0 max\n";
    check_readback(Knob::Max, &w, ok).unwrap();
    // The kernel kept another value, or has no line for the region.
    let e = check_readback(Knob::Max, &w, "drm/0000:00:05.0/vram0 max\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "dmem.max of the job's cgroup reads max for drm/0000:00:05.0/vram0 after 8388608 was \
         written: the limit did not take, the job does not run"
    );
    let e = check_readback(Knob::Low, &w, "drm/0000:00:07.0/vram0 max\n").unwrap_err();
    assert!(
        matches!(e, DmemError::NotApplied { ref got, .. } if got == "absent"),
        "{e}"
    );
}

#[test]
fn a_cgroup_row_per_region_with_a_charge_or_a_limit() {
    let cur = parse("drm/a/vram0 4096\ndrm/b/vram0 0\ndrm/c/vram0 0\n").unwrap();
    let max = parse("drm/a/vram0 max\ndrm/b/vram0 8388608\ndrm/c/vram0 max\n").unwrap();
    let rows = charge_rows("/drmtool.slice/run-1-2-0", &cur, &max);
    assert_eq!(
        rows,
        [
            Charge {
                cgroup: "/drmtool.slice/run-1-2-0".into(),
                region: "drm/a/vram0".into(),
                current: 4096,
                max: None,
            },
            Charge {
                cgroup: "/drmtool.slice/run-1-2-0".into(),
                region: "drm/b/vram0".into(),
                current: 0,
                max: Some(8 << 20),
            },
        ]
    );
}

#[test]
fn the_walk_reads_every_cgroup_below_the_root() {
    let root = std::env::temp_dir().join(format!("dmem-walk-{}", std::process::id()));
    let job = root.join("drmtool.slice/run-7");
    std::fs::create_dir_all(&job).unwrap();
    std::fs::write(root.join("dmem.capacity"), "drm/q/vram0 67108864\n").unwrap();
    std::fs::write(job.join("dmem.current"), "drm/q/vram0 8192\n").unwrap();
    std::fs::write(job.join("dmem.max"), "drm/q/vram0 16384\n").unwrap();
    // A parent without the controller's files, and a link that is not followed.
    std::os::unix::fs::symlink(&root, root.join("drmtool.slice/loop")).unwrap();
    let rows = charges(&root).unwrap();
    assert_eq!(
        rows,
        [Charge {
            cgroup: "/drmtool.slice/run-7".into(),
            region: "drm/q/vram0".into(),
            current: 8192,
            max: Some(16384),
        }]
    );
    assert_eq!(
        Capacity::read(&root).unwrap().unwrap().regions,
        [("drm/q/vram0".to_string(), 64 << 20)]
    );
    std::fs::remove_dir_all(&root).unwrap();
}
