//! Every drmtool command that names a GPU, with `{}` where the GPU spec goes: the one table
//! the host (`tools/tests/specs.rs`) and the guest (`kernel-tests/tests/drmtool_cli.rs`)
//! run their specs through.

/// (name, argv with `{}` for the spec).
pub const GPU_COMMANDS: &[(&str, &[&str])] = &[
    ("info", &["info", "{}"]),
    ("caps", &["caps", "{}"]),
    ("kms list", &["kms", "list", "{}"]),
    (
        "kms modeset",
        &[
            "kms",
            "modeset",
            "Virtual-1",
            "--seconds",
            "0",
            "--device",
            "{}",
        ],
    ),
    (
        "kms screenshot",
        &[
            "kms",
            "screenshot",
            "1",
            "-o",
            "/nonexistent/x.png",
            "--device",
            "{}",
        ],
    ),
    ("buffers", &["buffers", "--device", "{}"]),
    ("run", &["run", "--env-only", "--gpu", "{}"]),
    ("pick", &["pick", "--gpu", "{}"]),
    ("top", &["top", "--once", "--gpu", "{}"]),
    // The GPUs are resolved before the requests file is read.
    (
        "place",
        &["place", "--gpu", "{}", "/nonexistent/requests.json"],
    ),
];

/// `argv` with the spec in place of `{}`.
pub fn with_spec<'a>(argv: &[&'a str], spec: &'a str) -> Vec<&'a str> {
    argv.iter()
        .map(|a| if *a == "{}" { spec } else { a })
        .collect()
}
