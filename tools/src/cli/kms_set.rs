//! `drmtool kms modeset` and `kms screenshot`: the commands that drive a display.

use super::*;

pub(super) fn kms_modeset(
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
            return ExitCode::from(Exit::Usage);
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

pub(super) fn kms_screenshot(
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
