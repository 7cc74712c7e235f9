//! `vm run`: one host program in one guest, with the devices asked for; its exit status is
//! the command's.

use crate::error::Result;
use crate::guest::{self, BootResult, Ending, GuestSpec, Payload, RunFiles, Stream};
use crate::prepare::{self, KernelSelection, Prepared};
use crate::stream::Record;
use std::path::PathBuf;
use std::time::Duration;

/// What `vm run` runs, beyond the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRequest {
    /// `--device` (names, `all`, `none`).
    pub devices: Vec<String>,
    /// Wall-clock limit for the whole boot.
    pub timeout: Duration,
    /// `--env KEY=VALUE` for the program.
    pub env: Vec<String>,
    /// An NVDIMM backing file to use and keep.
    pub nvdimm_file: Option<PathBuf>,
    /// Run the program on a writable root (a union over the host root, its changes in a
    /// tmpfs of the guest: [`Payload::writable_root`]).
    pub writable_root: bool,
    /// The program and its arguments.
    pub argv: Vec<String>,
}

/// How `vm run` ended, once the guest booted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOutcome {
    /// The program ran and exited with this status (its files were removed).
    Exited(i32),
    /// The guest failed (said on stderr, with its console's tail; its files were kept).
    GuestFailed,
}

impl RunOutcome {
    /// The exit status of `vm run`: the program's (1 where it does not fit a byte), or
    /// 125 when the guest failed.
    pub fn exit_status(self) -> u8 {
        match self {
            RunOutcome::Exited(code) => u8::try_from(code).unwrap_or(1),
            RunOutcome::GuestFailed => 125,
        }
    }
}

/// Runs `vm run`: checks the devices, prepares the kernel ([`prepare::prepare`]), boots
/// the guest with the program (its output streamed as it comes), and says on stderr which
/// modules failed to load, where the boot time went and, for a failed guest, how it ended.
pub fn run(k: &KernelSelection, req: RunRequest) -> Result<RunOutcome> {
    let devices = prepare::parse_devices(&req.devices)?;
    let mut argv = req.argv;
    let Prepared {
        envs,
        kernel,
        busybox,
        decision,
    } = prepare::prepare(k, &req.env, &mut argv)?;
    eprintln!(
        "vm: {} | kernel {} ({}){}",
        decision.note,
        kernel.name,
        kernel.release,
        decision.detail_text()
    );
    let spec = GuestSpec {
        kernel,
        devices,
        payload: Payload {
            argv,
            cwd: std::env::current_dir().unwrap_or_else(|_| "/".into()),
            env: envs,
            host_root: true,
            writable_root: req.writable_root,
        },
        accel: decision.accel,
        timeout: req.timeout,
        memory_mib: 1024,
        probe_only: false,
        stream_output: Stream::Plain,
        cluster: None,
    };
    let mut files = RunFiles::new(&std::env::temp_dir(), "vm-run")?;
    let opts = guest::BootOptions {
        keep_nvdimm: req.nvdimm_file.is_some(),
        power_cut: None,
    };
    if let Some(p) = req.nvdimm_file {
        files.nvdimm = p;
    }
    let r = guest::boot_with(&spec, files, &busybox, &opts)?;
    Ok(conclude(&r))
}

/// Says what went wrong with the boot `r` and how it ended; removes its files when the
/// program ran.
fn conclude(r: &BootResult) -> RunOutcome {
    for line in module_failures(r) {
        eprintln!("{line}");
    }
    eprintln!("vm: {}", boot_breakdown(r));
    match &r.ending {
        Ending::Exited(code) => {
            let _ = std::fs::remove_dir_all(&r.files.dir);
            RunOutcome::Exited(*code)
        }
        other => {
            eprintln!("vm: guest failed: {}", other);
            for l in &r.console_tail {
                eprintln!("    | {l}");
            }
            eprintln!("vm: files kept in {}", r.files.dir.display());
            RunOutcome::GuestFailed
        }
    }
}

/// One line for each module the guest failed to load.
pub fn module_failures(r: &BootResult) -> Vec<String> {
    let mut out = Vec::new();
    for rec in &r.parsed.records {
        if let Record::Module {
            name,
            ok: false,
            detail,
        } = rec
        {
            out.push(format!("vm: module {name} failed to load: {detail}"));
        }
    }
    out
}

/// One line: where the guest's boot time went (guest uptime at each phase) and the host's
/// wall time to init and to the payload.
pub fn boot_breakdown(r: &BootResult) -> String {
    let mut parts = Vec::new();
    for rec in &r.parsed.records {
        match rec {
            Record::Boot { uptime_s, .. } => parts.push(format!("init {uptime_s:.2}")),
            Record::Note(n) => {
                let w: Vec<&str> = n.split_whitespace().collect();
                match w.as_slice() {
                    ["phase", name, t] => parts.push(format!("{name} {t}")),
                    ["payload", "start", t] => parts.push(format!("payload {t}")),
                    _ => {}
                }
            }
            _ => {}
        }
    }
    let host =
        |d: Option<Duration>| d.map_or("-".to_string(), |d| format!("{:.2}", d.as_secs_f64()));
    format!(
        "guest uptime at: {} s; host wall to init {} s, to payload {} s",
        parts.join(", "),
        host(r.boot_time),
        host(r.payload_time)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_status_is_the_programs_or_125() {
        assert_eq!(RunOutcome::Exited(0).exit_status(), 0);
        assert_eq!(RunOutcome::Exited(42).exit_status(), 42);
        assert_eq!(RunOutcome::Exited(255).exit_status(), 255);
        assert_eq!(RunOutcome::Exited(256).exit_status(), 1);
        assert_eq!(RunOutcome::Exited(-1).exit_status(), 1);
        assert_eq!(RunOutcome::GuestFailed.exit_status(), 125);
    }

    fn boot_result(records: Vec<Record>, ending: Ending) -> BootResult {
        let dir = PathBuf::from("/nonexistent/vm-program-test");
        BootResult {
            ending,
            parsed: crate::stream::Parsed {
                records,
                ..Default::default()
            },
            boot_time: Some(Duration::from_millis(1250)),
            payload_time: None,
            run_time: Duration::ZERO,
            console_tail: vec!["last console line".into()],
            hang: None,
            files: RunFiles {
                initrd: dir.join("initrd"),
                console: dir.join("console"),
                results: dir.join("results"),
                output: dir.join("output"),
                nvdimm: dir.join("nvdimm"),
                alive: dir.join("alive"),
                monitor: dir.join("monitor"),
                hang: dir.join("hang"),
                disk: dir.join("disk"),
                dir,
            },
        }
    }

    #[test]
    fn the_boot_is_broken_down_by_phase_and_failed_modules_are_named() {
        let r = boot_result(
            vec![
                Record::Boot {
                    uptime_s: 0.5,
                    release: "6.12".into(),
                },
                Record::Module {
                    name: "vkms".into(),
                    ok: true,
                    detail: String::new(),
                },
                Record::Module {
                    name: "qxl".into(),
                    ok: false,
                    detail: "No such device".into(),
                },
                Record::Note("phase modules 1.75".into()),
                Record::Note("payload start 2.00".into()),
                Record::Note("something else".into()),
            ],
            Ending::Exited(7),
        );
        assert_eq!(
            module_failures(&r),
            ["vm: module qxl failed to load: No such device"]
        );
        assert_eq!(
            boot_breakdown(&r),
            "guest uptime at: init 0.50, modules 1.75, payload 2.00 s; \
             host wall to init 1.25 s, to payload - s"
        );
        assert_eq!(conclude(&r), RunOutcome::Exited(7));
        let failed = boot_result(Vec::new(), Ending::Panic("oops".into()));
        assert_eq!(conclude(&failed), RunOutcome::GuestFailed);
        assert!(module_failures(&failed).is_empty());
    }
}
