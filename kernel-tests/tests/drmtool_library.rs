//! The crate example `tools/examples/library.rs` (drmtool linked as a library, no argv),
//! run in a guest: its GPUs, the buffers report, a pick and lease, and an isolated job that
//! sees only the GPU it was given.

use kernel_tests::skip;

#[allow(dead_code)]
#[path = "../../tools/examples/library.rs"]
mod example;

#[test]
fn the_crate_example_picks_leases_and_runs_a_job_on_vgem() {
    if !kernel_tests::in_guest() {
        skip!("not in a vm guest: no DRM devices or cgroup v2 to isolate with here");
    }
    kernel_tests::fds_shared();
    let listing = format!("/tmp/drmtool-library-{}", std::process::id());
    let job = format!("ls /dev/dri > {listing}");
    let mut out = Vec::new();
    let status = example::tour("vgem", &["sh", "-c", &job], &mut out)
        .unwrap_or_else(|e| panic!("{e}\n{}", String::from_utf8_lossy(&out)));
    let text = String::from_utf8(out).unwrap();
    assert_eq!(status, 0, "{text}");
    let gpus = drmtool::gpu::gpus().unwrap();
    let vgem = gpus
        .iter()
        .find(|g| g.driver.as_deref() == Some("vgem"))
        .expect("the guest has vgem");
    assert!(
        text.contains(&format!("GPU {} vgem (vgem): ", vgem.index)),
        "{text}"
    );
    assert!(
        text.contains(&format!("leased GPU {} (", vgem.index)),
        "{text}"
    );
    // The job saw vgem's nodes and no other GPU's.
    let mut want: Vec<String> = vgem
        .nodes
        .iter()
        .map(|n| n.path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    want.sort();
    let ls = std::fs::read_to_string(&listing).expect("the job wrote its listing");
    let _ = std::fs::remove_file(&listing);
    let mut seen: Vec<&str> = ls.split_whitespace().filter(|n| *n != "by-path").collect();
    seen.sort();
    assert_eq!(seen, want, "{text}");
    assert!(text.contains("the job exited 0"), "{text}");
    // A spec that names nothing is the typed error, not a panic.
    let e = example::tour("226:250", &["true"], &mut std::io::sink()).unwrap_err();
    assert!(
        e.downcast_ref::<drmtool::gpu::SelectError>()
            .is_some_and(|s| matches!(s, drmtool::gpu::SelectError::NoMatch { .. })),
        "{e}"
    );
}
