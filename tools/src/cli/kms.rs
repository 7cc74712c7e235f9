//! `drmtool kms list`, `kms modeset`, `kms screenshot`.

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

fn kms_modeset(
    connector: &str,
    mode: Option<&str>,
    device: Option<&GpuSpec>,
    seconds: Option<f64>,
    json: bool,
    out: &mut dyn Write,
) -> ExitCode {
    let hold_for = match seconds.map(self::seconds) {
        None => None,
        Some(Some(d)) => Some(d),
        Some(None) => {
            eprintln!("drmtool: --seconds needs a number of seconds >= 0 (hint: --seconds 5)");
            return ExitCode::from(2);
        }
    };
    let (dev, path) = match open_kms(device) {
        Ok(d) => d,
        Err(c) => return c,
    };
    let mut write_error = None;
    let mut hold = |lit: &crate::kms::Lit| {
        let msg = format!(
            "{path}: {} shows the test pattern in {} on CRTC {} ({})",
            lit.connector, lit.mode, lit.crtc, lit.path
        );
        let line = if json {
            serde_json::json!({
                "schema_version": 1, "device": path, "connector": lit.connector,
                "crtc": lit.crtc, "mode": lit.mode, "path": lit.path,
            })
            .to_string()
        } else {
            msg
        };
        if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush()) {
            // Still held and restored: the pattern was shown, only the line is lost.
            write_error = Some(e);
        }
        match hold_for {
            Some(d) => std::thread::sleep(d),
            None => {
                eprintln!("drmtool: press Enter to restore");
                let mut line = String::new();
                let _ = std::io::stdin().read_line(&mut line);
            }
        }
    };
    let r = crate::kms::modeset(&dev, connector, mode, &mut hold);
    match (r, write_error) {
        (Err(e), _) => kms_error(&e),
        (Ok(_), Some(e)) => {
            eprintln!("drmtool: cannot write the output: {e}");
            ExitCode::FAILURE
        }
        (Ok(_), None) => ExitCode::SUCCESS,
    }
}

fn kms_screenshot(
    crtc: &str,
    output: &std::path::Path,
    device: Option<&GpuSpec>,
    method: crate::kms::Method,
    json: bool,
    out: &mut dyn Write,
) -> ExitCode {
    let (dev, path) = match open_kms(device) {
        Ok(d) => d,
        Err(c) => return c,
    };
    let img = match crate::kms::screenshot(&dev, crtc, method) {
        Ok(i) => i,
        Err(e) => return kms_error(&e),
    };
    if let Err(e) = crate::kms::write_png(&img, output) {
        eprintln!("drmtool: {e}");
        return ExitCode::FAILURE;
    }
    let swapped = (img.writeback == Some(crate::kms::WritebackWay::Swap)).then(|| {
        format!(
            "{} detached from CRTC {crtc} for one frame while the writeback connector \
             captured it, then put back",
            img.detached.join(", ")
        )
    });
    if json {
        if let Some(s) = &swapped {
            eprintln!("drmtool: note: {s}");
        }
        let mut v = serde_json::json!({
            "schema_version": 1, "device": path, "crtc": crtc,
            "file": output.display().to_string(), "width": img.width,
            "height": img.height, "method": img.method,
        });
        if let Some(way) = img.writeback {
            v["writeback"] = way.name().into();
        }
        emit_json(&v, out)
    } else {
        let how = match img.writeback {
            Some(way) => format!("{}, {}", img.method, way.name()),
            None => img.method.to_string(),
        };
        emit_text(
            &format!(
                "{path}: CRTC {crtc} -> {} ({}x{}, {how}){}\n",
                output.display(),
                img.width,
                img.height,
                swapped.map(|s| format!("; {s}")).unwrap_or_default()
            ),
            out,
        )
    }
}

pub(super) fn open_kms(spec: Option<&GpuSpec>) -> Result<(drm_gem::Device, String), ExitCode> {
    crate::kms::open_kms(spec).map_err(|e| kms_error(&e))
}

/// One line, and the exit status [`Exit::of_kms`] gives.
pub(super) fn kms_error(e: &crate::kms::KmsError) -> ExitCode {
    eprintln!("drmtool: {e}");
    Exit::of_kms(e).into()
}
