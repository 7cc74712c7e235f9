//! `drmtool`: inspect DRM devices, capabilities, KMS state and GPU memory holders.

fn main() -> std::process::ExitCode {
    drmtool::cli::main_with(std::env::args_os(), &mut std::io::stdout())
}
