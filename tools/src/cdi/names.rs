//! The names of a CDI spec: its kind (`VENDOR/CLASS`) and its device names, checked by the
//! rules of the CDI specification (ASCII letters and digits, and a few separators).

use std::fmt;
use std::str::FromStr;

/// Why a vendor, class or device name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NameError {
    /// The name is empty.
    #[error("is empty")]
    Empty,
    /// The first character is not one a name may start with.
    #[error("starts with {found:?} (it must start with {expected})")]
    Start {
        /// The character.
        found: char,
        /// What is allowed there.
        expected: &'static str,
    },
    /// The last character is not a letter or digit.
    #[error("ends with {0:?} (it must end with a letter or digit)")]
    End(char),
    /// A character no name may hold.
    #[error("holds {found:?} (allowed: {allowed})")]
    Char {
        /// The character.
        found: char,
        /// What is allowed.
        allowed: &'static str,
    },
}

/// Checks `s` against one set of name rules.
fn check(
    s: &str,
    first: fn(char) -> bool,
    expected: &'static str,
    inner: fn(char) -> bool,
    allowed: &'static str,
) -> Result<(), NameError> {
    let Some(c) = s.chars().next() else {
        return Err(NameError::Empty);
    };
    if !first(c) {
        return Err(NameError::Start { found: c, expected });
    }
    if let Some(found) = s.chars().find(|&c| !inner(c)) {
        return Err(NameError::Char { found, allowed });
    }
    match s.chars().next_back() {
        Some(c) if !c.is_ascii_alphanumeric() => Err(NameError::End(c)),
        _ => Ok(()),
    }
}

/// Checks a vendor or class name: ASCII letters, digits, `_`, `-` and `.`, starting with a
/// letter and ending with a letter or digit.
pub fn check_kind_part(s: &str) -> Result<(), NameError> {
    check(
        s,
        |c| c.is_ascii_alphabetic(),
        "a letter",
        |c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'),
        "letters, digits, '_', '-', '.'",
    )
}

/// Checks a device name: ASCII letters, digits, `_`, `-`, `.` and `:`, starting and ending
/// with a letter or digit (a leading digit needs `cdiVersion` 0.5.0).
pub fn check_device_name(s: &str) -> Result<(), NameError> {
    check(
        s,
        |c| c.is_ascii_alphanumeric(),
        "a letter or digit",
        |c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'),
        "letters, digits, '_', '-', '.', ':'",
    )
}

/// Why a `--kind` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KindError {
    /// Not two names around one `/`.
    #[error("{0:?} is not VENDOR/CLASS (two names around one '/', e.g. drmtool.dev/gpu)")]
    Form(String),
    /// The vendor name was refused.
    #[error("the vendor {name:?} {why}")]
    Vendor {
        /// The vendor part.
        name: String,
        /// Why.
        why: NameError,
    },
    /// The class name was refused.
    #[error("the class {name:?} {why}")]
    Class {
        /// The class part.
        name: String,
        /// Why.
        why: NameError,
    },
}

/// A CDI kind, `VENDOR/CLASS` (default [`CdiKind::DEFAULT`]); both parts checked by
/// [`check_kind_part`].
///
/// ```
/// use drmtool::cdi::CdiKind;
/// let k: CdiKind = "example.com/npu".parse()?;
/// assert_eq!(k.qualified("0"), "example.com/npu=0");
/// assert!("example.com/".parse::<CdiKind>().is_err());
/// assert_eq!(CdiKind::default().to_string(), "drmtool.dev/gpu");
/// # Ok::<(), drmtool::cdi::KindError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CdiKind {
    vendor: String,
    class: String,
}

impl CdiKind {
    /// The kind drmtool writes unless told otherwise.
    pub const DEFAULT: &'static str = "drmtool.dev/gpu";

    /// The vendor part (`drmtool.dev`).
    pub fn vendor(&self) -> &str {
        &self.vendor
    }

    /// The class part (`gpu`).
    pub fn class(&self) -> &str {
        &self.class
    }

    /// The fully qualified name of `device` of this kind (`drmtool.dev/gpu=0`), as
    /// `podman run --device` takes it.
    pub fn qualified(&self, device: &str) -> String {
        format!("{self}={device}")
    }
}

impl Default for CdiKind {
    fn default() -> Self {
        Self {
            vendor: "drmtool.dev".into(),
            class: "gpu".into(),
        }
    }
}

impl fmt::Display for CdiKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.vendor, self.class)
    }
}

impl FromStr for CdiKind {
    type Err = KindError;

    fn from_str(s: &str) -> Result<Self, KindError> {
        let (vendor, class) = s
            .split_once('/')
            .filter(|(_, c)| !c.contains('/'))
            .ok_or_else(|| KindError::Form(s.into()))?;
        check_kind_part(vendor).map_err(|why| KindError::Vendor {
            name: vendor.into(),
            why,
        })?;
        check_kind_part(class).map_err(|why| KindError::Class {
            name: class.into(),
            why,
        })?;
        Ok(Self {
            vendor: vendor.into(),
            class: class.into(),
        })
    }
}

/// Whether a YAML 1.1 reader (the CDI loaders of Go's container runtimes) reads `s`,
/// written unquoted, as a string. serde_norway quotes what YAML 1.2 reads otherwise
/// (`0`, `true`), but writes YAML 1.1's other booleans (`yes`, `on`, `y`) and its
/// digit-led numbers (`0b1`) plain; such a name is not used.
pub(super) fn plain_in_yaml11(s: &str) -> bool {
    const WORDS: [&str; 11] = [
        "y", "yes", "n", "no", "true", "false", "on", "off", "null", "~", "",
    ];
    !s.starts_with(|c: char| c.is_ascii_digit()) && !WORDS.iter().any(|w| s.eq_ignore_ascii_case(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_names_follow_the_spec() {
        for ok in ["0", "12", "0000:3b:00.0", "vkms", "a", "a_b-c.d:e"] {
            assert_eq!(check_device_name(ok), Ok(()), "{ok}");
        }
        assert_eq!(check_device_name(""), Err(NameError::Empty));
        assert!(matches!(
            check_device_name("-a"),
            Err(NameError::Start { found: '-', .. })
        ));
        assert_eq!(check_device_name("a:"), Err(NameError::End(':')));
        assert!(matches!(
            check_device_name("a b"),
            Err(NameError::Char { found: ' ', .. })
        ));
        assert!(matches!(
            check_device_name("gpu\u{e9}1"),
            Err(NameError::Char {
                found: '\u{e9}',
                ..
            })
        ));
        assert!(matches!(
            check_device_name("a/b"),
            Err(NameError::Char { found: '/', .. })
        ));
    }

    #[test]
    fn kinds_are_checked_part_by_part() {
        let k: CdiKind = "vendor.example/gpu_2".parse().unwrap();
        assert_eq!((k.vendor(), k.class()), ("vendor.example", "gpu_2"));
        assert_eq!(k.qualified("all"), "vendor.example/gpu_2=all");
        for bad in ["gpu", "a/b/c", "/gpu", "a/"] {
            let e = bad.parse::<CdiKind>().unwrap_err();
            assert!(
                matches!(
                    e,
                    KindError::Form(_) | KindError::Vendor { .. } | KindError::Class { .. }
                ),
                "{bad}: {e}"
            );
        }
        assert!(matches!(
            "1vendor/gpu".parse::<CdiKind>(),
            Err(KindError::Vendor {
                why: NameError::Start { found: '1', .. },
                ..
            })
        ));
        assert!(matches!(
            "vendor/gpu:0".parse::<CdiKind>(),
            Err(KindError::Class {
                why: NameError::Char { found: ':', .. },
                ..
            })
        ));
        assert!(matches!(
            "vendor/gpu-".parse::<CdiKind>(),
            Err(KindError::Class {
                why: NameError::End('-'),
                ..
            })
        ));
        assert_eq!(
            CdiKind::DEFAULT.parse::<CdiKind>().unwrap(),
            CdiKind::default()
        );
    }

    #[test]
    fn yaml_11_scalars_that_are_not_strings_are_found() {
        for s in ["yes", "On", "N", "null", "0b1", "7up"] {
            assert!(!plain_in_yaml11(s), "{s}");
        }
        for s in ["vkms", "vgem", "yesno", "on1"] {
            assert!(plain_in_yaml11(s), "{s}");
        }
    }
}
