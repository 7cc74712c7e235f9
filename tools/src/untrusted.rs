//! Text that other users control: process names (`comm`), dma-buf names, `drm-client-name`.
//!
//! Such text may hold newlines, terminal escape sequences and invalid UTF-8. An
//! [`Untrusted`] keeps the raw bytes (cut to [`Untrusted::MAX_LEN`] on read), is never parsed
//! for figures, and shows itself only through one escaping [`Display`](std::fmt::Display):
//! printable ASCII and valid non-control Unicode as they are; backslash as `\\`; every other
//! byte (C0 controls, DEL, the bytes of C1 controls and of invalid UTF-8) as `\xNN`. JSON
//! carries the exact text (invalid UTF-8, which JSON cannot carry, as U+FFFD).

use serde::{Serialize, Serializer};
use std::fmt;

/// Text read from another process or a file it controls; see the [module](self) docs.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Untrusted(Box<[u8]>);

impl Untrusted {
    /// The most bytes kept; longer text is cut (a dma-buf name is at most 32 bytes, a comm
    /// 16, a client name 64).
    pub const MAX_LEN: usize = 4096;

    /// Keeps the first [`Untrusted::MAX_LEN`] bytes of `bytes`.
    pub fn new(bytes: &[u8]) -> Self {
        Self(bytes[..bytes.len().min(Self::MAX_LEN)].into())
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The text, invalid UTF-8 replaced by U+FFFD (for JSON and comparisons, never for a
    /// terminal).
    pub fn to_string_lossy(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.0)
    }

    /// The escaped text, as [`Display`](std::fmt::Display) writes it.
    pub fn escaped(&self) -> String {
        self.to_string()
    }
}

impl From<&str> for Untrusted {
    fn from(s: &str) -> Self {
        Self::new(s.as_bytes())
    }
}

fn hex(f: &mut fmt::Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    bytes.iter().try_for_each(|b| write!(f, "\\x{b:02x}"))
}

impl fmt::Display for Untrusted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for chunk in self.0.utf8_chunks() {
            let valid = chunk.valid();
            let mut at = 0;
            for (i, c) in valid.char_indices() {
                let plain = c != '\\' && !c.is_control();
                if plain {
                    continue;
                }
                f.write_str(&valid[at..i])?;
                if c == '\\' {
                    f.write_str("\\\\")?;
                } else {
                    // C0, DEL and C1 controls: their UTF-8 bytes.
                    hex(f, &valid.as_bytes()[i..i + c.len_utf8()])?;
                }
                at = i + c.len_utf8();
            }
            f.write_str(&valid[at..])?;
            hex(f, chunk.invalid())?;
        }
        Ok(())
    }
}

impl fmt::Debug for Untrusted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Untrusted(\"{self}\")")
    }
}

impl Serialize for Untrusted {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string_lossy())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_controls_backslash_del_c1_and_invalid_utf8() {
        let u = Untrusted::new(b"a\x1b[31mred\n\\ \x7f \xc2\x9b \xff\xfe \xc3\xa9");
        let s = u.to_string();
        assert_eq!(
            s,
            "a\\x1b[31mred\\x0a\\\\ \\x7f \\xc2\\x9b \\xff\\xfe \u{e9}"
        );
        assert!(s.bytes().all(|b| (0x20..0x7f).contains(&b) || b >= 0x80));
        assert!(!s.contains('\x1b') && !s.contains('\n'));
    }

    #[test]
    fn json_is_exact_and_length_is_bounded() {
        let u = Untrusted::from("x\nsize:\t1\x1b]0;t\x07");
        assert_eq!(
            serde_json::to_value(&u).unwrap(),
            serde_json::Value::String("x\nsize:\t1\x1b]0;t\x07".into())
        );
        let long = vec![b'a'; Untrusted::MAX_LEN * 3];
        assert_eq!(Untrusted::new(&long).as_bytes().len(), Untrusted::MAX_LEN);
    }
}
