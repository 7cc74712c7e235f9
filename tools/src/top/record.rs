//! A recorded `drmtool top` session: one [`Frame`] per line as JSON (`--record FILE`), read
//! back for `--replay FILE`.

use super::{Frame, SCHEMA_VERSION};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The most bytes of one recorded line read back.
pub const LINE_MAX: usize = 64 << 20;

/// Why a recording could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A line longer than [`LINE_MAX`].
    #[error("{}: line {line}: longer than 64 MiB", path.display())]
    LineTooLong {
        /// The file.
        path: PathBuf,
        /// Its number, from 1.
        line: usize,
    },
    /// A line that is not a frame.
    #[error("{}: line {line}: not a top frame: {why}", path.display())]
    NotAFrame {
        /// The file.
        path: PathBuf,
        /// Its number, from 1.
        line: usize,
        /// What the JSON reader said.
        why: String,
    },
    /// A frame with a control character in a text (a frame `drmtool top` wrote has every
    /// text from other processes escaped; one with raw control bytes was not written by it,
    /// and would drive the terminal that shows it).
    #[error("{}: line {line}: a control character in a text (not a frame drmtool top wrote)", path.display())]
    ControlCharacter {
        /// The file.
        path: PathBuf,
        /// Its number, from 1.
        line: usize,
    },
    /// A frame of another schema version.
    #[error("{}: line {line}: schema_version {found} (this drmtool reads {SCHEMA_VERSION})", path.display())]
    Version {
        /// The file.
        path: PathBuf,
        /// Its number, from 1.
        line: usize,
        /// The version it has.
        found: u32,
    },
    /// No frame at all.
    #[error("{}: no frames", path.display())]
    Empty {
        /// The file.
        path: PathBuf,
    },
}

/// Appends `f` to a recording as one line.
pub fn append(w: &mut impl Write, f: &Frame) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(f).map_err(std::io::Error::other)?;
    line.push(b'\n');
    w.write_all(&line)
}

/// Every frame of the recording at `path`, in order (blank lines skipped).
pub fn read(path: &Path) -> Result<Vec<Frame>, RecordingError> {
    let text = std::fs::read(path).map_err(|source| RecordingError::Read {
        path: path.into(),
        source,
    })?;
    let mut out = Vec::new();
    for (n, line) in text.split(|b| *b == b'\n').enumerate() {
        let line_no = n + 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if line.len() > LINE_MAX {
            return Err(RecordingError::LineTooLong {
                path: path.into(),
                line: line_no,
            });
        }
        let not_a_frame = |e: serde_json::Error| RecordingError::NotAFrame {
            path: path.into(),
            line: line_no,
            why: e.to_string(),
        };
        let v: serde_json::Value = serde_json::from_slice(line).map_err(not_a_frame)?;
        if has_control(&v) {
            return Err(RecordingError::ControlCharacter {
                path: path.into(),
                line: line_no,
            });
        }
        let f: Frame = serde_json::from_value(v).map_err(not_a_frame)?;
        if f.schema_version != SCHEMA_VERSION {
            return Err(RecordingError::Version {
                path: path.into(),
                line: line_no,
                found: f.schema_version,
            });
        }
        out.push(f);
    }
    if out.is_empty() {
        return Err(RecordingError::Empty { path: path.into() });
    }
    Ok(out)
}

/// Whether any string of `v` (keys included) has a control character (C0, DEL or C1).
fn has_control(v: &serde_json::Value) -> bool {
    use serde_json::Value as V;
    let bad = |s: &str| s.chars().any(char::is_control);
    match v {
        V::String(s) => bad(s),
        V::Array(a) => a.iter().any(has_control),
        V::Object(o) => o.iter().any(|(k, x)| bad(k) || has_control(x)),
        _ => false,
    }
}
