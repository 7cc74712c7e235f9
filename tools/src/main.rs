//! `drmtool`: inspect DRM devices, capabilities, KMS state and GPU memory holders.

fn main() -> std::process::ExitCode {
    // The second half of `drmtool run` (see drmtool::isolate::run): only ever set by the
    // first half, for its own child.
    if let Some(code) = drmtool::isolate::run::child_main() {
        return code;
    }
    drmtool::cli::main_with(std::env::args_os(), &mut std::io::stdout())
}
