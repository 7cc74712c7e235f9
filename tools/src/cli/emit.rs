//! Writing a command's result: JSON or text, every write checked.

use serde::Serialize;
use std::io::Write;
use std::process::ExitCode;

/// Writes `doc` as pretty JSON; exit 1 when that fails.
pub(super) fn emit_json<T: Serialize>(doc: &T, out: &mut dyn Write) -> ExitCode {
    match serde_json::to_string_pretty(doc)
        .map_err(std::io::Error::other)
        .and_then(|s| writeln!(out, "{s}"))
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("drmtool: cannot write the output: {e}");
            ExitCode::FAILURE
        }
    }
}

pub(super) fn emit_text(s: &str, out: &mut dyn Write) -> ExitCode {
    match write!(out, "{s}") {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("drmtool: cannot write the output: {e}");
            ExitCode::FAILURE
        }
    }
}
