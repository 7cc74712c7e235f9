//! drmtool's command line as a binary of this package, so that the guest tests can run the
//! real program where a test binary will not do: through sudo (which resets the
//! environment a test entry would read its arguments from) and with a hostile environment.
//! Exactly what the drmtool binary's `main` does.

fn main() -> std::process::ExitCode {
    drmtool::cli::main_with(std::env::args_os(), &mut std::io::stdout())
}
