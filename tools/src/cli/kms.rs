//! `drmtool kms`: its subcommands, `kms list`, and what `kms modeset` and `kms screenshot`
//! (in `kms_set.rs`) share.

use super::kms_set::{kms_modeset, kms_screenshot};
use super::*;

/// `drmtool kms ...`.
#[derive(Subcommand, Debug)]
pub(super) enum KmsCmd {
    /// Connectors with modes and EDID, encoders, CRTCs, planes with formats, every property.
    ///
    /// Connectors are not probed unless --probe is given: status and modes are those of the
    /// last probe (a connector never probed since boot lists none, and says so).
    #[command(
        after_help = "Examples:\n  drmtool kms list\n  drmtool kms list virtio-gpu --json\n  \
                      drmtool kms list vkms --probe"
    )]
    List {
        /// A GPU spec (an index, PCI bus id, driver, node path or name, `226:N` or by-path
        /// name; `drmtool devices` lists them). Default: every card node with KMS.
        device: Option<GpuSpec>,
        /// Probe connectors first (needs DRM master; slow on real hardware).
        #[arg(long)]
        probe: bool,
    },
    /// Show a test pattern on CONNECTOR (atomic where available, else legacy), hold it
    /// until Enter (or stdin closes) or --seconds pass, then restore what was shown.
    #[command(after_help = "Examples:\n  drmtool kms modeset Virtual-1\n  \
                            drmtool kms modeset Virtual-1 1024x768 --seconds 5 --device vkms")]
    Modeset {
        /// Connector name (Virtual-1, HDMI-A-2) or id.
        connector: String,
        /// Mode name or WxH (default: the preferred mode).
        mode: Option<String>,
        /// The device, a GPU spec as for `info` (default: the first card node with KMS).
        #[arg(long, value_name = "GPU")]
        device: Option<GpuSpec>,
        /// Hold the pattern for N seconds instead of waiting for Enter.
        #[arg(long, value_name = "N")]
        seconds: Option<f64>,
    },
    /// Save what CRTC (its id) shows as a PNG: GETFB2 of its primary plane and a map of
    /// the framebuffer (needs root or DRM master); `--method writeback` captures through a
    /// writeback connector instead, every plane included (vkms; needs DRM master), detaching
    /// the CRTC's outputs for one frame where the driver cannot clone (vkms cannot).
    #[command(after_help = "Examples:\n  drmtool kms screenshot 38 -o out.png\n  \
                            drmtool kms screenshot 36 -o out.png --device bochs --method getfb")]
    Screenshot {
        /// CRTC id (`drmtool kms list` shows them).
        crtc: String,
        /// The PNG file to write.
        #[arg(short, long, value_name = "FILE.png")]
        output: std::path::PathBuf,
        /// The device, a GPU spec as for `info` (default: the first card node with KMS).
        #[arg(long, value_name = "GPU")]
        device: Option<GpuSpec>,
        /// How to capture.
        #[arg(long, value_enum, default_value = "auto")]
        method: crate::kms::Method,
    },
}

/// `drmtool kms list --json`.
#[derive(Serialize)]
pub(super) struct KmsListOut {
    schema_version: u32,
    devices: Vec<KmsListDevice>,
}

#[derive(Serialize)]
pub(super) struct KmsListDevice {
    path: String,
    driver: Option<String>,
    kms: drm_gem::kms::Snapshot,
}

pub(super) fn kms(k: KmsCmd, json: bool, out: &mut dyn Write) -> ExitCode {
    match k {
        KmsCmd::List { device, probe } => kms_list(device.as_ref(), probe, json, out),
        KmsCmd::Modeset {
            connector,
            mode,
            device,
            seconds,
        } => kms_modeset(
            &connector,
            mode.as_deref(),
            device.as_ref(),
            seconds,
            json,
            out,
        ),
        KmsCmd::Screenshot {
            crtc,
            output,
            device,
            method,
        } => kms_screenshot(&crtc, &output, device.as_ref(), method, json, out),
    }
}

fn kms_list(device: Option<&GpuSpec>, probe: bool, json: bool, out: &mut dyn Write) -> ExitCode {
    let nodes = match nodes_for(device) {
        Ok(n) => n,
        Err(c) => return c,
    };
    let mut devices = Vec::new();
    for n in nodes
        .iter()
        .filter(|n| n.kind == drm_gem::NodeKind::Primary)
    {
        let snap = drm_gem::Device::open(&n.path).and_then(|d| {
            if probe {
                for c in d.resources()?.connectors {
                    let _ = d.probe_connector(c);
                }
            }
            drm_gem::kms::Snapshot::take(&d)
        });
        match snap {
            Ok(s) => devices.push(KmsListDevice {
                path: n.path.display().to_string(),
                driver: n.driver.clone(),
                kms: s,
            }),
            // A named device without KMS is an error; in the full list it is left out.
            Err(e) if device.is_some() => {
                eprintln!(
                    "drmtool: {} has no KMS state: {e} (hint: vgem has no KMS; `drmtool devices` lists the others)",
                    n.path.display()
                );
                return ExitCode::FAILURE;
            }
            Err(_) => {}
        }
    }
    if json {
        return emit_json(
            &KmsListOut {
                schema_version: crate::info::INFO_SCHEMA_VERSION,
                devices,
            },
            out,
        );
    }
    let text: Vec<String> = devices
        .iter()
        .map(|d| {
            format!(
                "{} ({})\n{}",
                d.path,
                d.driver.as_deref().unwrap_or("?"),
                crate::info::render_kms(&d.kms, "  ", probe)
            )
        })
        .collect();
    emit_text(&text.join("\n"), out)
}

pub(super) fn open_kms(spec: Option<&GpuSpec>) -> Result<(drm_gem::Device, String), ExitCode> {
    crate::kms::open_kms(spec).map_err(|e| kms_error(&e))
}

/// One line, and the exit status [`Exit::of_kms`] gives.
pub(super) fn kms_error(e: &crate::kms::KmsError) -> ExitCode {
    eprintln!("drmtool: {e}");
    Exit::of_kms(e).into()
}
