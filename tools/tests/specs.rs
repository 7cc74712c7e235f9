//! One GPU grammar in every command: each command's GPU argument, found in the clap tree,
//! gets the same table of specs, and each answers the same way (on the host, where no DRM
//! device exists: a malformed spec is a usage error, exit 2, with the grammar's message; a
//! well-formed one finds no devices, exit 4, with the one message). The guest side
//! (`kernel-tests/tests/drmtool_cli.rs`) runs the table against real devices.

use std::process::Command;

#[path = "common/gpu_commands.rs"]
mod gpu_commands;
use gpu_commands::{GPU_COMMANDS as COMMANDS, with_spec};

/// Specs of every form, all well formed.
const GOOD: &[&str] = &[
    "0",
    "00:04.0",
    "0000:00:04.0",
    "vgem",
    "virtio-gpu",
    "card0",
    "renderD128",
    "/dev/dri/card0",
    "226:0",
    "pci-0000:00:04.0-card",
    // A GPU by its vendor node or its bound driver (issue 28).
    "nvidia",
    "nvidia0",
    "/dev/nvidia0",
    "195:0",
    "accel0",
    "/dev/accel/accel0",
];

/// Malformed specs, with the part of the message that says why.
const BAD: &[(&str, &str)] = &[
    ("a b", "is none of the forms"),
    ("", "an empty GPU spec"),
    ("99999999999999999999999", "out of range"),
    ("226:99999999999", "out of range"),
    ("x;y", "is none of the forms"),
];

/// Whether this host has GPUs drmtool lists: DRM nodes, NVIDIA GPUs or accelerators.
fn has_gpus() -> bool {
    ["/dev/dri", "/proc/driver/nvidia/gpus", "/sys/class/accel"]
        .iter()
        .any(|p| std::path::Path::new(p).exists())
}

fn drmtool(argv: &[&str], spec: &str) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_drmtool"))
        .args(with_spec(argv, spec))
        .output()
        .expect("run drmtool");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every argument in the clap tree that names a GPU (by its id or value name), as
/// `command path: argument id`.
fn gpu_arguments(cmd: &clap::Command, path: &str, found: &mut Vec<String>) {
    for a in cmd.get_arguments() {
        let id = a.get_id().as_str();
        let names_gpu = matches!(id, "device" | "gpus" | "gpu")
            || a.get_value_names().is_some_and(|v| {
                v.iter()
                    .any(|n| n.as_str() == "GPU" || n.as_str() == "DEVICE")
            });
        if names_gpu {
            found.push(format!("{path}: {id}"));
        }
    }
    for sub in cmd.get_subcommands() {
        let p = if path.is_empty() {
            sub.get_name().to_string()
        } else {
            format!("{path} {}", sub.get_name())
        };
        gpu_arguments(sub, &p, found);
    }
}

#[test]
fn every_gpu_argument_is_in_the_table() {
    let mut found = Vec::new();
    gpu_arguments(&drmtool::cli::command(), "", &mut found);
    found.sort();
    let mut listed: Vec<String> = COMMANDS
        .iter()
        .map(|(name, argv)| {
            let flag = argv
                .iter()
                .position(|a| *a == "{}")
                .and_then(|i| i.checked_sub(1))
                .map(|i| argv[i]);
            let id = match flag {
                Some("--gpu") => "gpus",
                _ => "device",
            };
            format!("{name}: {id}")
        })
        .collect();
    listed.sort();
    assert_eq!(
        found, listed,
        "a command takes a GPU argument this test does not run the table through"
    );
}

#[test]
fn malformed_specs_are_usage_errors_in_every_command() {
    for (name, argv) in COMMANDS {
        for (spec, why) in BAD {
            let (code, out, err) = drmtool(argv, spec);
            assert_eq!(code, Some(2), "{name} {spec:?}: {err}");
            assert!(out.is_empty(), "{name} {spec:?} printed: {out}");
            assert!(err.contains(why), "{name} {spec:?}: {err}");
            assert!(
                !err.contains("Index(") && !err.contains("Driver("),
                "Debug text: {err}"
            );
        }
    }
}

#[test]
fn well_formed_specs_find_no_devices_here_in_every_command() {
    if has_gpus() {
        eprintln!(
            "SKIP: this host has GPUs (/dev/dri, NVIDIA or accel); the guest runs the table \
             against devices"
        );
        return;
    }
    for (name, argv) in COMMANDS {
        for spec in GOOD {
            let (code, out, err) = drmtool(argv, spec);
            assert_eq!(code, Some(4), "{name} {spec:?}: {err}");
            assert!(out.is_empty(), "{name} {spec:?} printed: {out}");
            assert!(
                err.contains("no DRM devices: this machine has no /dev/dri"),
                "{name} {spec:?}: {err}"
            );
        }
    }
}
