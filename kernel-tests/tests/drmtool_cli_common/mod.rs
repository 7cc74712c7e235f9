//! What `drmtool_cli.rs` and `drmtool_kms.rs` share (`mod drmtool_cli_common;`): the
//! drivers every guest has, drmtool's JSON checked against its schema, the nodes.
#![allow(dead_code)]

use drm_gem::NodeKind;
use drmtool::cli::run_captured as run;
use serde_json::Value;
use std::process::ExitCode;

/// The drivers every guest has, by `DRM_IOCTL_VERSION` name.
pub const DRIVERS: [&str; 4] = ["vkms", "vgem", "virtio_gpu", "bochs-drm"];
/// Those with KMS.
pub const KMS_DRIVERS: [&str; 3] = ["vkms", "virtio_gpu", "bochs-drm"];

/// `drmtool ARGS` (exit 0), its JSON validated against `tools/schema/<schema>`.
pub fn run_json(args: &[&str], schema: &str) -> Value {
    let (code, out) = run(args);
    assert_eq!(code, ExitCode::SUCCESS, "drmtool {args:?} failed:\n{out}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}\n{out}"));
    let p = format!("{}/../tools/schema/{schema}", env!("CARGO_MANIFEST_DIR"));
    let s: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    let val = jsonschema::validator_for(&s).expect("valid schema");
    let errors: Vec<String> = val
        .iter_errors(&v)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{args:?} vs {schema}: {errors:#?}");
    v
}

/// The primary node of each driver present; every one of them must be in a guest.
/// vkms's primary node (from [`nodes`]: a guest without it fails there).
pub fn vkms_primary() -> Option<drm_gem::NodeInfo> {
    nodes()?
        .into_iter()
        .find(|n| n.driver.as_deref() == Some("vkms"))
}

pub fn nodes() -> Option<Vec<drm_gem::NodeInfo>> {
    kernel_tests::fds_shared();
    let all = drm_gem::enumerate().ok()?;
    let mut out = Vec::new();
    for d in DRIVERS {
        match all
            .iter()
            .find(|n| n.kind == NodeKind::Primary && n.driver.as_deref() == Some(d))
        {
            Some(n) => out.push(n.clone()),
            None if kernel_tests::in_guest() => panic!("the guest has no {d} primary node"),
            None => return None,
        }
    }
    Some(out)
}
