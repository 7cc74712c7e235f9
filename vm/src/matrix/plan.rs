//! What every kernel of a `vm test` run shares, and a lane's narrowed share.

use super::TestOptions;
use crate::accel::AccelChoice;
use crate::catalog;
use crate::error::{Result, VmError};
use crate::guest;
use crate::runner;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What every kernel of a `vm test` run shares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestPlan {
    /// The guest's busybox.
    pub busybox: PathBuf,
    /// `vm guest-tests --strict --bin ...` (absolute paths).
    pub argv: Vec<String>,
    /// The libtest units of the test binaries, as `suite::name` (listed on the host), for
    /// the not-run list of a lane that gives up.
    pub units: Vec<String>,
    /// `--env` pairs.
    pub env: Vec<(String, String)>,
    /// The accelerator asked for (decided per kernel).
    pub choice: AccelChoice,
    /// Wall-clock limit per kernel (all its boots).
    pub timeout: Duration,
    /// Kernel crashes after which a lane gives up.
    pub max_oopses: usize,
    /// No kernel selftests, no libdrm programs.
    pub kernel_tests_only: bool,
    /// The NUMA topology profile added to the devices (`VM_TOPOLOGY=numa` in the guest).
    pub topology: Option<crate::guest::DeviceKind>,
    /// A second guest (node 2) beside every boot of a lane, linked to it by a network of
    /// their own (`VM_CLUSTER_NODE=1` and `2` in them).
    pub cluster: bool,
    /// The tests run on a writable root (`VM_WRITABLE_ROOT=1` in the guest).
    pub writable_root: bool,
}

impl TestPlan {
    /// Checks busybox and QEMU, builds the kernel-tests binaries (`o.tests`, or all) and
    /// lists their units, for a run whose `--accel` and `--env` were checked already.
    pub fn build(o: &TestOptions, choice: AccelChoice, env: Vec<(String, String)>) -> Result<Self> {
        let busybox = guest::busybox_binary()?;
        guest::qemu_binary()?;
        let bins = build_test_binaries(&o.tests)?;
        let me = std::env::current_exe()
            .map_err(|e| VmError::new(format!("cannot find the vm executable: {e}")))?;
        let argv = guest_tests_argv(&me, &bins);
        let units = bins.iter().flat_map(|b| list_units(b)).collect();
        Ok(TestPlan {
            busybox,
            argv,
            units,
            env,
            choice,
            timeout: o.timeout,
            max_oopses: o.max_oopses,
            kernel_tests_only: o.kernel_tests_only,
            topology: o.topology,
            cluster: o.cluster,
            writable_root: o.writable_root,
        })
    }
}

/// The kernels of a `vm test` run: `custom` for a source tree, the default matrix for
/// `all`, else the one named.
pub fn kernel_names(kernel: &str, kernel_source: bool) -> Vec<String> {
    if kernel_source {
        vec!["custom".to_string()]
    } else if kernel == "all" {
        catalog::default_matrix()
            .into_iter()
            .map(String::from)
            .collect()
    } else {
        vec![kernel.to_string()]
    }
}

/// The guest's command: `<vm> guest-tests --strict --bin <b>...`.
pub fn guest_tests_argv(me: &Path, bins: &[PathBuf]) -> Vec<String> {
    let mut argv = vec![
        me.to_string_lossy().into_owned(),
        "guest-tests".into(),
        "--strict".into(),
    ];
    for b in bins {
        argv.push("--bin".into());
        argv.push(b.to_string_lossy().into_owned());
    }
    argv
}

/// The libtest units of a test binary (`--list`, run on the host), as `suite::name`.
fn list_units(b: &Path) -> Vec<String> {
    let suite = runner::suite_name(b);
    let (_, list, _) = runner::run_limited(
        std::process::Command::new(b).args(["--list", "--format", "terse"]),
        Duration::from_secs(30),
    );
    runner::parse_list(&list)
        .iter()
        .map(|n| runner::unit_id(&suite, n))
        .collect()
}

/// Builds the kernel-tests test binaries and returns their paths: every one, or only
/// `targets` (test target names; `kernel_tests`, the suite name of the library's own unit
/// tests, is the library's test binary).
pub fn build_test_binaries(targets: &[String]) -> Result<Vec<PathBuf>> {
    let out = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "test",
            "-p",
            "kernel-tests",
            "--no-run",
            "--message-format=json-render-diagnostics",
        ])
        .args(targets.iter().flat_map(|t| match t.as_str() {
            "kernel_tests" => vec!["--lib"],
            t => vec!["--test", t],
        }))
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| {
            VmError::with_fix(format!("cannot run cargo: {e}"), "install Rust (rustup)")
        })?;
    if !out.status.success() {
        return Err(VmError::new(
            "building the kernel-tests binaries failed (see above)",
        ));
    }
    let bins = test_executables(&String::from_utf8_lossy(&out.stdout));
    if bins.is_empty() {
        return Err(VmError::new("cargo built no kernel-tests test binaries"));
    }
    Ok(bins)
}

/// The test executables among cargo's JSON messages, sorted.
fn test_executables(messages: &str) -> Vec<PathBuf> {
    let mut bins = Vec::new();
    for line in messages.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["reason"] == "compiler-artifact"
            && v["profile"]["test"] == true
            && let Some(exe) = v["executable"].as_str()
        {
            bins.push(PathBuf::from(exe));
        }
    }
    bins.sort();
    bins
}

/// The suites a lane of kernel `n` runs alone, where its catalog entry narrows it
/// (`CatalogKernel::matrix_suites`) and the run is of the whole matrix (`--kernel all`,
/// no `--test`).
pub fn narrowing(n: &str, whole_matrix: bool) -> Option<&'static [&'static str]> {
    catalog::find(n)
        .and_then(|k| k.matrix_suites)
        .filter(|_| whole_matrix)
}

/// `plan` with only the test binaries of `suites` (and their units), and no kernel
/// selftests or libdrm programs.
pub fn only_suites(plan: &TestPlan, suites: &[&str]) -> TestPlan {
    let mut argv = Vec::new();
    let mut args = plan.argv.iter();
    while let Some(arg) = args.next() {
        if arg == "--bin" {
            let Some(bin) = args.next() else { break };
            if suites.contains(&runner::suite_name(Path::new(bin)).as_str()) {
                argv.extend([arg.clone(), bin.clone()]);
            }
        } else {
            argv.push(arg.clone());
        }
    }
    TestPlan {
        argv,
        units: plan
            .units
            .iter()
            .filter(|u| suites.iter().any(|s| u.starts_with(&format!("{s}::"))))
            .cloned()
            .collect(),
        kernel_tests_only: true,
        ..plan.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> TestPlan {
        TestPlan {
            busybox: "/bb".into(),
            argv: [
                "/vm",
                "guest-tests",
                "--strict",
                "--bin",
                "/t/smoke-0123456789abcdef",
            ]
            .into_iter()
            .chain([
                "--bin",
                "/t/atomic-0123456789abcdef",
                "--bin",
                "/t/dmabuf-0123456789abcdef",
            ])
            .map(String::from)
            .collect(),
            units: ["smoke::a", "atomic::b", "dmabuf::c", "smokey::d"]
                .map(String::from)
                .to_vec(),
            env: Vec::new(),
            topology: None,
            cluster: false,
            writable_root: false,
            choice: AccelChoice::Auto,
            timeout: Duration::from_secs(1),
            max_oopses: 3,
            kernel_tests_only: false,
        }
    }

    #[test]
    fn a_narrowed_lane_keeps_only_its_binaries_and_units() {
        let plan = plan();
        let n = only_suites(&plan, &["smoke", "dmabuf"]);
        assert_eq!(
            n.argv.join(" "),
            "/vm guest-tests --strict --bin /t/smoke-0123456789abcdef --bin /t/dmabuf-0123456789abcdef"
        );
        assert_eq!(n.units, ["smoke::a", "dmabuf::c"]);
        assert!(n.kernel_tests_only);
        assert_eq!(
            (n.busybox, n.choice, n.max_oopses),
            (plan.busybox, plan.choice, plan.max_oopses)
        );
    }

    #[test]
    fn a_dangling_bin_flag_ends_the_narrowed_argv() {
        let mut plan = plan();
        plan.argv.push("--bin".into());
        let n = only_suites(&plan, &["atomic"]);
        assert_eq!(
            n.argv.join(" "),
            "/vm guest-tests --strict --bin /t/atomic-0123456789abcdef"
        );
        assert_eq!(n.units, ["atomic::b"]);
    }

    #[test]
    fn only_the_whole_matrix_is_narrowed_by_the_catalog() {
        let narrowed = catalog::CATALOG
            .iter()
            .find(|k| k.matrix_suites.is_some())
            .expect("a catalog kernel with matrix_suites");
        assert_eq!(narrowing(narrowed.name, true), narrowed.matrix_suites);
        assert_eq!(narrowing(narrowed.name, false), None);
        let plain = catalog::CATALOG
            .iter()
            .find(|k| k.matrix_suites.is_none())
            .expect("a catalog kernel without matrix_suites");
        assert_eq!(narrowing(plain.name, true), None);
        assert_eq!(narrowing("/boot/vmlinuz", true), None);
    }

    #[test]
    fn the_kernels_of_a_run() {
        let all: Vec<String> = catalog::default_matrix()
            .into_iter()
            .map(String::from)
            .collect();
        assert_eq!(kernel_names("all", false), all);
        assert_eq!(kernel_names("debian-6.1", false), ["debian-6.1"]);
        assert_eq!(kernel_names("all", true), ["custom"]);
        assert_eq!(kernel_names("debian-6.1", true), ["custom"]);
    }

    #[test]
    fn the_guest_command_names_every_binary() {
        let argv = guest_tests_argv(
            Path::new("/x/vm"),
            &[PathBuf::from("/t/a-1"), PathBuf::from("/t/b-2")],
        );
        assert_eq!(
            argv.join(" "),
            "/x/vm guest-tests --strict --bin /t/a-1 --bin /t/b-2"
        );
    }

    #[test]
    fn cargo_messages_give_the_test_executables_sorted() {
        let messages = [
            r#"{"reason":"compiler-artifact","profile":{"test":true},"executable":"/t/z-1"}"#,
            r#"{"reason":"compiler-artifact","profile":{"test":false},"executable":"/t/lib"}"#,
            r#"{"reason":"compiler-artifact","profile":{"test":true},"executable":null}"#,
            r#"{"reason":"build-finished","success":true}"#,
            "not json",
            r#"{"reason":"compiler-artifact","profile":{"test":true},"executable":"/t/a-2"}"#,
        ]
        .join("\n");
        assert_eq!(
            test_executables(&messages),
            [PathBuf::from("/t/a-2"), PathBuf::from("/t/z-1")]
        );
    }
}
