//! The running kernel's full release and the fixes it must carry, for tests whose
//! expectation is a documented upstream change that also reached the stable series.

/// The running kernel's release (major, minor, patch): uname's, except where a
/// distribution keeps an ABI name there (Debian's stock "6.1.0-37-amd64") and names the
/// real release in `/proc/sys/kernel/version` ("... Debian 6.1.140-1 ...").
pub fn release() -> (u32, u32, u32) {
    let r = rustix::system::uname();
    let debian = std::fs::read_to_string("/proc/sys/kernel/version").ok();
    pick(&r.release().to_string_lossy(), debian.as_deref())
}

/// `release()` from the two texts (host-testable).
fn pick(uname: &str, version: Option<&str>) -> (u32, u32, u32) {
    fn parse(text: &str) -> (u32, u32, u32) {
        let mut it = text
            .split(|c: char| !c.is_ascii_digit())
            .map(|p| p.parse().unwrap_or(0));
        let mut next = || it.next().unwrap_or(0);
        (next(), next(), next())
    }
    let uname = parse(uname);
    let debian = version.and_then(|v| Some(parse(v.split_once(" Debian ")?.1)));
    match debian {
        Some(d) if (d.0, d.1) == (uname.0, uname.1) => d,
        _ => uname,
    }
}

/// Whether this kernel has a fix that landed in `mainline` and was backported to the
/// stable series listed (each with the first patch level that carries it).
pub fn has_fix(mainline: (u32, u32), stable: &[(u32, u32, u32)]) -> bool {
    fix_in(release(), mainline, stable)
}

fn fix_in(
    (major, minor, patch): (u32, u32, u32),
    mainline: (u32, u32),
    stable: &[(u32, u32, u32)],
) -> bool {
    (major, minor) >= mainline
        || stable
            .iter()
            .any(|&(a, b, c)| (a, b) == (major, minor) && patch >= c)
}

/// Whether this kernel is in a series the fix's list names (or at or after its mainline
/// release): there, [`has_fix`] is a fact; elsewhere the fix may or may not have been
/// backported (a vendor kernel, a stable series whose backport is not listed).
pub fn fix_known(mainline: (u32, u32), stable: &[(u32, u32, u32)]) -> bool {
    let (major, minor, _) = release();
    (major, minor) >= mainline || stable.iter().any(|&(a, b, _)| (a, b) == (major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debian_names_the_real_release() {
        let v = "#1 SMP PREEMPT_DYNAMIC Debian 6.1.140-1 (2025-05-22)";
        assert_eq!(pick("6.1.0-37-amd64", Some(v)), (6, 1, 140));
        assert_eq!(pick("5.15.0", None), (5, 15, 0));
        // A Debian version line of another series does not override uname.
        assert_eq!(pick("6.12.9", Some("#1 Debian 6.1.140-1")), (6, 12, 9));
    }

    #[test]
    fn stable_backports_count() {
        let list = [(5, 15, 68)];
        assert!(fix_in((6, 0, 0), (6, 0), &list));
        assert!(fix_in((5, 15, 68), (6, 0), &list));
        assert!(!fix_in((5, 15, 67), (6, 0), &list));
        assert!(!fix_in((5, 10, 300), (6, 0), &list));
    }
}
