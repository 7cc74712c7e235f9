//! Naming errnos for the reports.

/// The C name of an errno (`ENOTTY`, from [`drm_gem::errno_name`]), or `E<number>` for a
/// number Linux does not define.
pub fn errno_name(e: drm_gem::Errno) -> String {
    drm_gem::errno_name(e).map_or_else(|| format!("E{}", e.raw_os_error()), str::to_string)
}

/// The errno class of a failure: the errno's name (for [`drm_gem::Error::Unsupported`],
/// the errno of the probe that decided it), `unsupported` for an `Unsupported` decided
/// without a failing call, else `error`.
pub fn error_class(e: &drm_gem::Error) -> String {
    match (e.errno(), e) {
        (Some(n), _) => errno_name(n),
        (None, drm_gem::Error::Unsupported { .. }) => "unsupported".into(),
        (None, _) => "error".into(),
    }
}
