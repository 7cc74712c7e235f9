//! Why a value read from kernel text (fdinfo, `/proc/<pid>/maps`, debugfs) was refused: one
//! typed error for every line parser, whose `Display` is the `why` of a
//! [`Malformed`](crate::fdinfo::Malformed) line in the JSON reports.
//!
//! ```
//! use drmtool::field::FieldError;
//! assert_eq!(drmtool::fdinfo::parse_size("3 KiB"), Ok(3072));
//! let e = drmtool::fdinfo::parse_size("12 parsecs").unwrap_err();
//! assert_eq!(e, FieldError::UnknownUnit("parsecs".into()));
//! assert_eq!(e.to_string(), "unknown unit \"parsecs\"");
//! ```

use std::num::ParseIntError;

/// Why one field of a kernel text line was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum FieldError {
    /// The value is empty.
    #[error("empty value")]
    Empty,
    /// A name that must not be empty is (`what`: "driver name", "engine or region name").
    #[error("empty {0}")]
    EmptyName(&'static str),
    /// Not a decimal unsigned integer.
    #[error("not an unsigned integer ({0})")]
    NotUnsigned(ParseIntError),
    /// Not an octal number (fdinfo `flags`).
    #[error("not octal ({0})")]
    NotOctal(ParseIntError),
    /// Not a decimal number (a percentage's figure).
    #[error("not a number: {0:?}")]
    NotANumber(String),
    /// A unit this parser does not know.
    #[error("unknown unit {0:?}")]
    UnknownUnit(String),
    /// A unit other than `ns` on an engine's busy time.
    #[error("unknown unit {0:?} (expected ns)")]
    NotNanoseconds(String),
    /// An engine's busy time without its `ns`.
    #[error("missing unit ns")]
    MissingNanoseconds,
    /// A percentage without its `%`.
    #[error("missing %")]
    MissingPercent,
    /// A percentage past any a kernel prints.
    #[error("percentage {0} out of range")]
    PercentOutOfRange(f64),
    /// The value does not have the expected shape (`0`: the shape, like `<n> ns`).
    #[error("expected `{0}`")]
    Shape(&'static str),
    /// Text after the value and its unit.
    #[error("trailing text {0:?}")]
    Trailing(String),
    /// The figure times its unit does not fit in 64 bits.
    #[error("{n} x {unit} overflows 64 bits")]
    Overflow {
        /// The figure.
        n: u64,
        /// Its unit's multiplier.
        unit: u64,
    },
    /// A field that is not a number of its kind (`what`: "inode", "minor", "tgid", ...).
    #[error("bad {what} {value:?}")]
    Bad {
        /// The field.
        what: &'static str,
        /// Its text.
        value: String,
    },
    /// A row with the wrong number of columns.
    #[error("expected {expected} columns, got {got}")]
    Columns {
        /// How many the format has (at least).
        expected: usize,
        /// How many the row has.
        got: usize,
    },
    /// A `y`/`n` column with something else.
    #[error("expected y or n, got {0:?}")]
    NotYesNo(String),
    /// A line that ends before its fields do.
    #[error("truncated line")]
    Truncated,
    /// A field without its separator (`what` without `sep`: "device without `:`").
    #[error("{what} without `{sep}`")]
    NoSeparator {
        /// The field.
        what: &'static str,
        /// The separator it must contain.
        sep: char,
    },
    /// An address range whose end is not after its start.
    #[error("empty or reversed range {0}")]
    EmptyRange(String),
    /// A permissions field that is not four characters.
    #[error("bad permissions {0:?}")]
    Permissions(String),
}

impl FieldError {
    /// [`FieldError::Bad`] of `what` with `value`'s text.
    pub(crate) fn bad(what: &'static str, value: &str) -> Self {
        Self::Bad {
            what,
            value: value.to_string(),
        }
    }
}
