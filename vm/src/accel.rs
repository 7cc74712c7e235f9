//! Choosing the accelerator: KVM only if a short probe boot proves it works, else TCG.
//!
//! On some hosts `/dev/kvm` opens but guests hang or die with "KVM internal error ...
//! emulation failure" (nested virtualisation). Opening the device proves nothing, so the
//! harness boots the real kernel once with a probe-only init under KVM and a short timeout.
//! The verdict is cached for a day per (host kernel, QEMU version, guest kernel).

use crate::cache::BuiltKernel;
use crate::guest::{self, Accel, Ending, GuestSpec, Payload, RunFiles};
use std::path::Path;
use std::time::Duration;

/// What the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccelChoice {
    /// Probe KVM, fall back to TCG.
    Auto,
    /// Force one.
    Force(Accel),
}

impl AccelChoice {
    /// Parses `auto`, `kvm` or `tcg`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "auto" => Some(Self::Auto),
            "kvm" => Some(Self::Force(Accel::Kvm)),
            "tcg" => Some(Self::Force(Accel::Tcg)),
            _ => None,
        }
    }
}

/// The decision and the sentence that explains it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The accelerator to use.
    pub accel: Accel,
    /// Why, for the user: one line.
    pub note: String,
    /// What backs the note up (QEMU's other stderr lines after a failed probe), to print
    /// below it.
    pub detail: Vec<String>,
}

impl Decision {
    /// A decision that needs no detail.
    fn plain(accel: Accel, note: String) -> Self {
        Self {
            accel,
            note,
            detail: Vec::new(),
        }
    }

    /// [`Decision::detail`] as text to append to the line that prints the note: each line
    /// on its own, indented by four spaces (empty without detail).
    pub fn detail_text(&self) -> String {
        self.detail.iter().map(|l| format!("\n    {l}")).collect()
    }
}

/// Seconds a KVM probe boot may take before KVM is declared broken.
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// Decides the accelerator for `kernel`.
pub fn decide(choice: AccelChoice, kernel: &BuiltKernel, busybox: &Path) -> Decision {
    if let AccelChoice::Force(a) = choice {
        return Decision::plain(a, format!("accel {} (forced by --accel)", a.name()));
    }
    let kvm_ok = rustix::fs::open(
        "/dev/kvm",
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .is_ok();
    if !kvm_ok {
        return Decision::plain(
            Accel::Tcg,
            "accel tcg: /dev/kvm is absent or not usable".into(),
        );
    }
    let key = cache_key();
    let cache = crate::catalog::cache_root().join("accel-probe");
    let file = cache.join(&key);
    if let Ok(meta) = std::fs::metadata(&file)
        && meta
            .modified()
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age < Duration::from_secs(24 * 3600))
        && let Ok(text) = std::fs::read_to_string(&file)
    {
        let mut lines = text.lines();
        let line = lines.next().unwrap_or("").trim();
        let accel = if line.starts_with("kvm") {
            Accel::Kvm
        } else {
            Accel::Tcg
        };
        return Decision {
            accel,
            note: format!("accel {} (cached KVM probe: {line})", accel.name()),
            detail: lines.map(|l| l.trim().to_string()).collect(),
        };
    }
    let d = match probe(kernel, busybox) {
        Ok(secs) => Decision::plain(
            Accel::Kvm,
            format!("kvm: probe boot reached init in {secs:.1} s"),
        ),
        Err(why) => fallback(&why),
    };
    let _ = std::fs::create_dir_all(&cache);
    let _ = std::fs::write(&file, format!("{}{}\n", d.note, d.detail_text()));
    Decision {
        note: format!("accel {}", d.note),
        ..d
    }
}

/// The decision after a failed probe: TCG, the first line of `why` in the sentence, its
/// other lines as detail.
fn fallback(why: &str) -> Decision {
    let mut lines = why.lines().map(str::trim).filter(|l| !l.is_empty());
    let head = lines.next().unwrap_or("no reason given");
    Decision {
        accel: Accel::Tcg,
        note: format!(
            "tcg: /dev/kvm opens but a KVM probe boot failed ({head}); falling back to TCG"
        ),
        detail: lines.map(String::from).collect(),
    }
}

/// Why a probe boot that ended this way does not show that KVM works.
fn probe_failure(e: &Ending) -> String {
    match e {
        Ending::Timeout | Ending::NeverBooted => {
            format!("no init within {} s", PROBE_TIMEOUT.as_secs())
        }
        other => other.to_string(),
    }
}

/// KVM's brokenness is a property of the host, not of the guest kernel: one probe per host
/// kernel and QEMU binary.
fn cache_key() -> String {
    let host = rustix::system::uname();
    let qemu = guest::qemu_binary()
        .ok()
        .and_then(|q| std::fs::metadata(q).ok())
        .and_then(|m| m.modified().ok())
        .map(|t| format!("{t:?}"))
        .unwrap_or_default();
    crate::kconfig::fragment_hash(&[host.release().to_bytes(), qemu.as_bytes()])
}

/// Boots `kernel` under KVM with the probe-only init; Ok(seconds to init) if it worked.
pub fn probe(kernel: &BuiltKernel, busybox: &Path) -> Result<f64, String> {
    let spec = GuestSpec {
        kernel: kernel.clone(),
        devices: Vec::new(),
        payload: Payload {
            argv: Vec::new(),
            cwd: "/".into(),
            env: Vec::new(),
            host_root: false,
            writable_root: false,
        },
        accel: Accel::Kvm,
        timeout: PROBE_TIMEOUT,
        memory_mib: 256,
        probe_only: true,
        stream_output: crate::guest::Stream::Off,
        cluster: None,
    };
    let files = RunFiles::new(&std::env::temp_dir(), "vm-kvm-probe").map_err(|e| e.to_string())?;
    let dir = files.dir.clone();
    let r = guest::boot(&spec, files, busybox).map_err(|e| e.to_string());
    let _ = std::fs::remove_dir_all(&dir);
    let r = r?;
    match r.ending {
        Ending::Exited(0) => Ok(r.boot_time.unwrap_or_default().as_secs_f64()),
        other => Err(probe_failure(&other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_choices() {
        assert_eq!(AccelChoice::parse("auto"), Some(AccelChoice::Auto));
        assert_eq!(
            AccelChoice::parse("kvm"),
            Some(AccelChoice::Force(Accel::Kvm))
        );
        assert_eq!(
            AccelChoice::parse("tcg"),
            Some(AccelChoice::Force(Accel::Tcg))
        );
        assert_eq!(AccelChoice::parse("hvf"), None);
    }

    #[test]
    fn a_failed_probe_is_one_sentence_with_qemu_detail_below() {
        let e = Ending::QemuFailed(
            "qemu-system-x86_64: KVM internal error. Suberror: 1\nemulation failure\n".into(),
        );
        let d = fallback(&probe_failure(&e));
        assert_eq!(d.accel, Accel::Tcg);
        assert_eq!(
            d.note,
            "tcg: /dev/kvm opens but a KVM probe boot failed (qemu failed: \
             qemu-system-x86_64: KVM internal error. Suberror: 1); falling back to TCG"
        );
        assert_eq!(d.detail, ["emulation failure"]);
        assert_eq!(d.detail_text(), "\n    emulation failure");
        let t = fallback(&probe_failure(&Ending::Timeout));
        assert_eq!(
            (t.note.as_str(), t.detail.len()),
            (
                "tcg: /dev/kvm opens but a KVM probe boot failed (no init within 20 s); \
                 falling back to TCG",
                0
            )
        );
    }
}
