//! A web configuration with TLS and a password for `drmtool export`'s tests, on the host
//! (tools/tests/export.rs) and in the guest (kernel-tests/tests/drmtool_export.rs): a
//! self-signed certificate for `localhost` and 127.0.0.1 made with openssl at test time,
//! and user `prometheus` with a bcrypt hash of cost 4 (bcrypt's least: each check is a
//! hash, and guests run under TCG).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The user the configuration names.
pub const USER: &str = "prometheus";

/// Writes `cert.pem`, `key.pem` (made by the `openssl` program given) and `web.yml`
/// (relative paths, as exporter-toolkit reads them) into `dir`, the password `password`:
/// the configuration's path; `Ok(None)` when `openssl` cannot be run.
pub fn web_config(openssl: &str, dir: &Path, password: &str) -> Result<Option<PathBuf>, String> {
    let out = Command::new(openssl)
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
        .args([
            "-keyout",
            "key.pem",
            "-out",
            "cert.pem",
            "-subj",
            "/CN=localhost",
        ])
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        // A leaf, not a CA: rustls's client refuses a CA certificate as the server's.
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .current_dir(dir)
        .output();
    match out {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            return Err(format!(
                "openssl req: {}",
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        Err(_) => return Ok(None),
    }
    let hash = bcrypt::hash(password, 4).map_err(|e| e.to_string())?;
    let web = dir.join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n\
             basic_auth_users:\n  {USER}: '{hash}'\n"
        ),
    )
    .map_err(|e| e.to_string())?;
    Ok(Some(web))
}
