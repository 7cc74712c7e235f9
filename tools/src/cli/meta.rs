//! `drmtool completions SHELL` and `drmtool man`, generated from the clap tree.

use super::*;

/// The completion script for `shell`.
pub(super) fn completions(shell: clap_complete::Shell, out: &mut dyn Write) -> ExitCode {
    // clap_complete panics when its writer fails: generate into memory first.
    let mut cmd = command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "drmtool", &mut script);
    match out.write_all(&script) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("drmtool: cannot write the output: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The man page (roff).
pub(super) fn man(out: &mut dyn Write) -> ExitCode {
    match clap_mangen::Man::new(command()).render(out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("drmtool: cannot write the man page: {e}");
            ExitCode::FAILURE
        }
    }
}
