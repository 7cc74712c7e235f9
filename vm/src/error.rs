//! The harness's error type: one line saying what failed, and the command that fixes it.

/// A harness error: one line saying what failed, and the command that fixes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmError {
    /// What failed.
    pub what: String,
    /// The command (or action) that fixes it, when there is one.
    pub fix: Option<String>,
}

impl VmError {
    /// An error without a fix.
    pub fn new(what: impl Into<String>) -> Self {
        Self {
            what: what.into(),
            fix: None,
        }
    }

    /// An error with the command that fixes it.
    pub fn with_fix(what: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            what: what.into(),
            fix: Some(fix.into()),
        }
    }
}

impl std::fmt::Display for VmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.fix {
            Some(fix) => write!(f, "{}; fix: {fix}", self.what),
            None => f.write_str(&self.what),
        }
    }
}

impl std::error::Error for VmError {}

/// `Result` with [`VmError`].
pub type Result<T> = std::result::Result<T, VmError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_say_what_and_how_to_fix() {
        let e = VmError::with_fix("qemu-system-x86_64 not found", "scripts/setup");
        assert_eq!(
            e.to_string(),
            "qemu-system-x86_64 not found; fix: scripts/setup"
        );
        assert_eq!(VmError::new("x").to_string(), "x");
    }
}
