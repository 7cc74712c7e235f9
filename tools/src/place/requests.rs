//! The requests file of `drmtool place` (`tools/schema/place-requests.schema.json`):
//!
//! ```json
//! {"requests": [
//!   {"name": "train-a", "count": 2, "near": "path:/data/a"},
//!   {"name": "notebook", "exclusive": false}
//! ]}
//! ```
//!
//! `name` is required (1-64 bytes of letters, digits and `._-:@+`); `count` defaults to 1
//! (1 to [`COUNT_MAX`]); `exclusive` to `true`; `near` is a `--near` spec
//! ([`crate::topo::near::Near`]). Unknown fields, a duplicate name and more than
//! [`REQUESTS_MAX`] requests are refused, each error naming the request.
//!
//! ```
//! use drmtool::place::requests::parse;
//! let r = parse(r#"{"requests": [{"name": "a", "near": "numa:0"}]}"#).unwrap();
//! assert_eq!((r[0].count, r[0].exclusive), (1, true));
//! assert!(parse(r#"{"requests": [{"name": "a", "cont": 2}]}"#).is_err());
//! ```

use crate::topo::near::{Near, NearError};
use serde::Deserialize;

/// The most bytes of a requests file read.
pub const FILE_MAX: u64 = 4 << 20;

/// The most requests in one file.
pub const REQUESTS_MAX: usize = 10_000;

/// The most GPUs one request may ask for.
pub const COUNT_MAX: usize = 64;

/// One job request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRequest {
    /// Its name, unique in the file.
    pub name: String,
    /// How many GPUs.
    pub count: usize,
    /// Each GPU alone (`false`: shared with up to `--slots` jobs).
    pub exclusive: bool,
    /// Where it wants its GPUs.
    pub near: Option<Near>,
}

/// Why a requests file is refused.
#[derive(Debug, thiserror::Error)]
pub enum RequestsError {
    /// Not JSON of the file's form.
    #[error("not a requests file: {0}")]
    Json(#[from] serde_json::Error),
    /// Larger than [`FILE_MAX`] bytes.
    #[error("the file is larger than {FILE_MAX} bytes")]
    TooLarge,
    /// More than [`REQUESTS_MAX`] requests, or none.
    #[error("{0} requests: between 1 and {REQUESTS_MAX} are placed at once")]
    Count(usize),
    /// One request is wrong.
    #[error("request {index} ({name:?}): {why}")]
    Invalid {
        /// Its position in the file, from 0.
        index: usize,
        /// Its name as given (escaped when shown).
        name: String,
        /// What is wrong.
        why: String,
    },
    /// A request's `near` does not parse.
    #[error("request {index}: {source}")]
    Near {
        /// Its position in the file, from 0.
        index: usize,
        /// The spec's error.
        source: NearError,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    requests: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    #[serde(default = "one")]
    count: usize,
    #[serde(default = "yes")]
    exclusive: bool,
    near: Option<String>,
}

fn one() -> usize {
    1
}

fn yes() -> bool {
    true
}

/// Whether `s` is a request name: 1-64 bytes of ASCII letters, digits and `._-:@+`.
fn is_name(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-:@+".contains(&b))
}

/// The requests of a file's text.
///
/// # Errors
/// [`RequestsError`], naming the request at fault.
pub fn parse(text: &str) -> Result<Vec<JobRequest>, RequestsError> {
    if text.len() as u64 > FILE_MAX {
        return Err(RequestsError::TooLarge);
    }
    let f: File = serde_json::from_str(text)?;
    if f.requests.is_empty() || f.requests.len() > REQUESTS_MAX {
        return Err(RequestsError::Count(f.requests.len()));
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::with_capacity(f.requests.len());
    for (index, e) in f.requests.into_iter().enumerate() {
        let bad = |why: String| RequestsError::Invalid {
            index,
            name: e.name.clone(),
            why,
        };
        if !is_name(&e.name) {
            return Err(bad("a name is 1-64 letters, digits and ._-:@+".to_string()));
        }
        if !(1..=COUNT_MAX).contains(&e.count) {
            return Err(bad(format!("count {} is not 1 to {COUNT_MAX}", e.count)));
        }
        if !seen.insert(e.name.clone()) {
            return Err(bad("a second request of this name".to_string()));
        }
        let near = match &e.near {
            Some(s) => Some(
                s.parse::<Near>()
                    .map_err(|source| RequestsError::Near { index, source })?,
            ),
            None => None,
        };
        out.push(JobRequest {
            name: e.name,
            count: e.count,
            exclusive: e.exclusive,
            near,
        });
    }
    Ok(out)
}

/// Reads and parses the requests file at `path` (at most [`FILE_MAX`] bytes).
///
/// # Errors
/// `Ok(Err(..))`: the file was read and is refused; `Err(..)`: it could not be read.
pub fn read(path: &std::path::Path) -> std::io::Result<Result<Vec<JobRequest>, RequestsError>> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(FILE_MAX + 1)
        .read_to_string(&mut text)?;
    Ok(parse(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bad_request_is_named() {
        let err = |t: &str| parse(t).unwrap_err().to_string();
        assert!(err(r#"{"requests": []}"#).contains("0 requests"));
        assert!(err(r#"{"requests": [{"name": "a b"}]}"#).contains("request 0 (\"a b\")"));
        assert!(err(r#"{"requests": [{"name": "a"}, {"name": "a"}]}"#).contains("request 1"));
        assert!(err(r#"{"requests": [{"name": "a", "count": 0}]}"#).contains("count 0"));
        assert!(err(r#"{"requests": [{"name": "a", "count": 65}]}"#).contains("count 65"));
        assert!(err(r#"{"requests": [{"name": "a", "near": "rack:1"}]}"#).contains("unknown KIND"));
        assert!(err(r#"{"requests": [{"name": "a"}], "x": 1}"#).contains("unknown field"));
        assert!(
            err(r#"{"requests": [{"name": "a", "count": -1}]}"#).contains("not a requests file")
        );
        let big = format!(
            r#"{{"requests": [{{"name": "{}"}}]}}"#,
            "a".repeat(FILE_MAX as usize)
        );
        assert!(matches!(parse(&big), Err(RequestsError::TooLarge)));
    }

    #[test]
    fn defaults_and_every_field() {
        let r = parse(
            r#"{"requests": [{"name": "x@1", "count": 2, "exclusive": false, "near": "cpus:0-3"}]}"#,
        )
        .unwrap();
        assert_eq!(
            r,
            [JobRequest {
                name: "x@1".into(),
                count: 2,
                exclusive: false,
                near: Some(Near::Cpus(vec![0, 1, 2, 3])),
            }]
        );
    }
}
