//! `vm test`: the kernel matrix. Every kernel's lane boots it with the full device set
//! and runs the kernel-tests binaries (plus the kernel's selftests and libdrm's programs)
//! strictly, booting again after a kernel crash for what had not run; lanes run `--jobs`
//! at a time and report in the order of the kernels.
//!
//! - [`TestPlan`]: what every lane shares (built once: the test binaries and their units),
//!   narrowed for a catalog kernel that runs only some suites ([`only_suites`]).
//! - [`run_lanes`]: the scheduler.
//! - [`test_kernel`]: one kernel's lane.
//! - [`guest_tests`]: the guest's half (`vm guest-tests`, run inside each boot).

mod in_guest;
mod kernel;
mod lanes;
mod plan;

pub use in_guest::{GuestTests, guest_tests, summary_line};
pub use kernel::test_kernel;
pub use lanes::run_lanes;
pub use plan::{
    TestPlan, build_test_binaries, guest_tests_argv, kernel_names, narrowing, only_suites,
};

use crate::error::{Result, VmError};
use crate::guest::Stream;
use crate::prepare::{parse_accel, parse_env, resolve_kernel};
use crate::report::{self, KernelReport};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `vm test` settings (its flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestOptions {
    /// A catalog name, `all` (the default matrix) or a kernel path.
    pub kernel: String,
    /// Modules for a kernel path.
    pub modules: Option<PathBuf>,
    /// A kernel source tree to build with the project's config and test.
    pub kernel_source: Option<PathBuf>,
    /// Only these kernel-tests test targets (`cargo test --test NAME`).
    pub tests: Vec<String>,
    /// `--env KEY=VALUE` for the tests in the guest.
    pub env: Vec<String>,
    /// Kernel crashes per kernel after which no new boot is tried.
    pub max_oopses: usize,
    /// Only the kernel-tests binaries: no kernel selftests, no libdrm programs.
    pub kernel_tests_only: bool,
    /// `auto`, `kvm` or `tcg`.
    pub accel: String,
    /// Where to write the results as JSON.
    pub json: Option<PathBuf>,
    /// Where to write the results as JUnit XML.
    pub junit: Option<PathBuf>,
    /// Wall-clock limit per kernel (all its boots).
    pub timeout: Duration,
    /// How many kernels' lanes run at once.
    pub jobs: usize,
    /// The NUMA topology profile ([`crate::guest::DeviceKind::NumaPxb`]) added.
    pub topology: Option<crate::guest::DeviceKind>,
    /// A second guest (node 2) beside every boot, linked to it ([`crate::guest::ClusterLink`]).
    pub cluster: bool,
    /// The tests run on a writable root ([`crate::guest::Payload::writable_root`]).
    pub writable_root: bool,
}

/// Runs `vm test`: checks the flags, builds the plan, runs every kernel's lane (`jobs` at
/// a time), prints the summary and writes the JSON and JUnit reports. Returns whether
/// every kernel passed; an error is the first lane's (in the order of the kernels) that
/// could not report, or the first report that could not be written.
pub fn test(o: &TestOptions) -> Result<bool> {
    let choice = parse_accel(&o.accel)?;
    let env = parse_env(&o.env)?;
    let names = kernel_names(&o.kernel, o.kernel_source.is_some());
    let plan = TestPlan::build(o, choice, env)?;
    let whole_matrix = o.kernel == "all" && o.tests.is_empty();
    let lane = |n: &str, stream: Stream| run_lane(o, &plan, whole_matrix, n, stream);
    let reports = run_lanes(&names, o.jobs, lane)
        .into_iter()
        .collect::<Result<Vec<KernelReport>>>()?;
    print!("{}", report::summary(&reports));
    write_reports(&reports, o.json.as_deref(), o.junit.as_deref())?;
    Ok(reports.iter().all(|r| r.passed))
}

/// One lane of `vm test`: narrows the plan where the kernel's catalog entry says so (on a
/// run of the whole matrix), resolves the kernel (one that cannot be resolved is reported
/// as not built) and runs [`test_kernel`].
fn run_lane(
    o: &TestOptions,
    plan: &TestPlan,
    whole_matrix: bool,
    n: &str,
    stream: Stream,
) -> Result<KernelReport> {
    eprintln!("\n=== {n} ===");
    // A matrix lane that runs only some targets (CatalogKernel::matrix_suites).
    let narrowed = narrowing(n, whole_matrix).map(|suites| {
        eprintln!(
            "vm: {n}: the matrix runs only {} here (its catalog entry)",
            suites.join(", ")
        );
        only_suites(plan, suites)
    });
    match resolve_kernel(n, o.modules.as_deref(), o.kernel_source.as_deref()) {
        Ok(kernel) => test_kernel(n, kernel, narrowed.as_ref().unwrap_or(plan), stream),
        Err(e) => {
            eprintln!("vm: {e}");
            Ok(KernelReport::not_built(n, &e.to_string()))
        }
    }
}

/// Writes the reports as JSON to `json` and as JUnit XML to `junit`, where given.
pub fn write_reports(
    reports: &[KernelReport],
    json: Option<&Path>,
    junit: Option<&Path>,
) -> Result<()> {
    if let Some(p) = json
        && let Err(e) = std::fs::write(p, report::json(reports))
    {
        return Err(VmError::new(format!("{}: {e}", p.display())));
    }
    if let Some(p) = junit
        && let Err(e) = std::fs::write(p, report::junit(reports))
    {
        return Err(VmError::new(format!("{}: {e}", p.display())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_are_written_where_asked_and_a_bad_path_is_the_error() {
        let dir = std::env::temp_dir().join(format!("vm-matrix-reports-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let reports = [KernelReport::not_built("debian-6.12", "no source")];
        let (json, junit) = (dir.join("r.json"), dir.join("r.xml"));
        write_reports(&reports, Some(&json), Some(&junit)).unwrap();
        assert_eq!(
            std::fs::read_to_string(&json).unwrap(),
            report::json(&reports)
        );
        assert_eq!(
            std::fs::read_to_string(&junit).unwrap(),
            report::junit(&reports)
        );
        write_reports(&reports, None, None).unwrap();
        let bad = dir.join("missing/r.json");
        let e = write_reports(&reports, Some(&bad), Some(&junit)).unwrap_err();
        assert!(e.what.starts_with(&format!("{}: ", bad.display())), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
