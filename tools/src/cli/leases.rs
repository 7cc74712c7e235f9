//! `drmtool leases`.

use super::*;

pub(super) fn leases_cmd(json: bool, out: &mut dyn Write) -> ExitCode {
    use crate::isolate::lease;
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    let hs = lease::with_cgroups(&lease::dir(), lease::holders(&lease::dir(), &locks));
    if json {
        #[derive(Serialize)]
        struct Doc<'a> {
            schema_version: u32,
            directory: String,
            leases: &'a [lease::Holder],
        }
        return emit_json(
            &Doc {
                schema_version: SCHEMA_VERSION,
                directory: lease::dir().display().to_string(),
                leases: &hs,
            },
            out,
        );
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut t = format!(
        "{:<16} {:<10} {:>4} {:>8} {:<10} {:<24} {:<28} COMMAND\n",
        "DEVICE", "MODE", "SLOT", "PID", "USER", "SINCE", "CGROUP"
    );
    for h in &hs {
        t.push_str(&format!(
            "{:<16} {:<10} {:>4} {:>8} {:<10} {:<24} {:<28} {}\n",
            h.device,
            h.mode,
            h.slot.map_or("-".into(), |s| s.to_string()),
            h.pid,
            h.user
                .as_deref()
                .map_or("-".into(), |u| crate::Untrusted::from(u).escaped()),
            h.since.map_or("-".into(), |s| crate::render::since(s, now)),
            h.cgroup.as_ref().map_or("-".into(), |c| c.escaped()),
            h.command.as_ref().map_or("-".into(), |c| c.escaped()),
        ));
    }
    if hs.is_empty() {
        t.push_str(&format!("(no leases held in {})\n", lease::dir().display()));
    }
    emit_text(&t, out)
}
