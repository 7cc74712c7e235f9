//! `drmtool export --web.config.file`: TLS and HTTP basic auth, configured with the web
//! configuration file of the Prometheus exporters (exporter-toolkit's `web-config.yml`), so
//! one file and one set of bcrypt hashes serve node_exporter and drmtool alike.
//!
//! The subset read:
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt          # PEM chain, leaf first
//!   key_file: server.key           # PEM private key (PKCS#8, PKCS#1 or SEC1)
//!   client_auth_type: RequireAndVerifyClientCert   # optional
//!   client_ca_file: clients.pem    # optional; required by a verifying client_auth_type
//!   min_version: TLS12             # optional: TLS12 (default) or TLS13
//! basic_auth_users:
//!   prometheus: $2y$10$...         # bcrypt hashes (htpasswd -nbB, or any bcrypt tool)
//! ```
//!
//! Relative paths are relative to the configuration file's directory, as exporter-toolkit
//! reads them. Anything else is refused with the key it names ([`WebConfigError`]): a key
//! this subset does not read (exporter-toolkit's `cipher_suites`, `http_server_config`, a
//! typo), a value it cannot honour (`min_version: TLS10`, a `client_auth_type` that asks
//! for client certificates without verifying them), a hash that is not bcrypt. A security
//! setting is never dropped in silence.
//!
//! Passwords are checked with `bcrypt::verify` (the hash compared in constant time); a
//! user that is not configured is checked against a configured hash all the same, so the
//! answer's timing does not tell which user names exist.

use base64::Engine as _;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_norway::Value;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why a web configuration was refused.
#[derive(Debug)]
pub enum WebConfigError {
    /// The file could not be read.
    Read {
        /// The file.
        path: PathBuf,
        /// What reading it said.
        source: std::io::Error,
    },
    /// The text is not YAML.
    Syntax(String),
    /// A key this subset does not read (unknown, or one of exporter-toolkit's that drmtool
    /// does not implement); the dotted path of the key.
    UnknownKey(String),
    /// A key whose value has the wrong YAML type.
    WrongType {
        /// The dotted key.
        key: String,
        /// What it must be.
        expected: &'static str,
    },
    /// A required key is absent (or empty).
    Missing(String),
    /// A value this subset cannot honour.
    Unsupported {
        /// The dotted key.
        key: String,
        /// The value given.
        value: String,
        /// What is accepted.
        supported: &'static str,
    },
    /// A `basic_auth_users` entry whose value is not a bcrypt hash.
    BadHash {
        /// The user.
        user: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A certificate, key or CA file that cannot be used.
    Pem {
        /// The key that named the file.
        key: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// rustls refused the certificate, key or client CAs together.
    Tls(String),
}

impl fmt::Display for WebConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WebConfigError::Read { path, source } => {
                write!(f, "cannot read {}: {source}", path.display())
            }
            WebConfigError::Syntax(m) => write!(f, "not a YAML web configuration: {m}"),
            WebConfigError::UnknownKey(k) => write!(
                f,
                "{k}: not a key drmtool reads (supported: tls_server_config.{{cert_file, \
                 key_file, client_auth_type, client_ca_file, min_version}}, basic_auth_users)"
            ),
            WebConfigError::WrongType { key, expected } => write!(f, "{key}: must be {expected}"),
            WebConfigError::Missing(k) => write!(f, "{k}: required"),
            WebConfigError::Unsupported {
                key,
                value,
                supported,
            } => write!(
                f,
                "{key}: {value:?} is not supported (supported: {supported})"
            ),
            WebConfigError::BadHash { user, reason } => {
                write!(f, "basic_auth_users.{user}: not a bcrypt hash: {reason}")
            }
            WebConfigError::Pem { key, path, reason } => {
                write!(f, "{key}: {}: {reason}", path.display())
            }
            WebConfigError::Tls(m) => write!(f, "tls_server_config: {m}"),
        }
    }
}

impl WebConfigError {
    /// The dotted configuration key the error is about, where it is about one.
    pub fn key(&self) -> Option<String> {
        match self {
            WebConfigError::Read { .. } | WebConfigError::Syntax(_) | WebConfigError::Tls(_) => {
                None
            }
            WebConfigError::UnknownKey(k) | WebConfigError::Missing(k) => Some(k.clone()),
            WebConfigError::WrongType { key, .. } | WebConfigError::Unsupported { key, .. } => {
                Some(key.clone())
            }
            WebConfigError::BadHash { user, .. } => Some(format!("basic_auth_users.{user}")),
            WebConfigError::Pem { key, .. } => Some((*key).to_string()),
        }
    }
}

impl std::error::Error for WebConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WebConfigError::Read { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Whether (and how) clients must show a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// `NoClientCert` (the default without `client_ca_file`).
    None,
    /// `VerifyClientCertIfGiven`: a certificate is optional, but one given must verify.
    VerifyIfGiven,
    /// `RequireAndVerifyClientCert` (the default with `client_ca_file`).
    RequireAndVerify,
}

/// The lowest TLS version accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MinVersion {
    /// TLS 1.2 (the default).
    Tls12,
    /// TLS 1.3.
    Tls13,
}

/// `tls_server_config`, paths resolved against the configuration file's directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// The certificate chain (PEM, leaf first).
    pub cert_file: PathBuf,
    /// The private key (PEM).
    pub key_file: PathBuf,
    /// Client certificates.
    pub client_auth: ClientAuth,
    /// The CAs client certificates must chain to.
    pub client_ca_file: Option<PathBuf>,
    /// The lowest version offered.
    pub min_version: MinVersion,
}

/// Why a request's credentials were refused (each answered 401 alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthError {
    /// No `Authorization` header.
    Missing,
    /// Not `Basic <base64 of user:password>`.
    Malformed,
    /// The user name is not UTF-8.
    NotUtf8,
    /// Unknown user or wrong password (not told apart).
    Denied,
}

impl fmt::Display for AuthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AuthError::Missing => "no credentials",
            AuthError::Malformed => "malformed Authorization header",
            AuthError::NotUtf8 => "user name not UTF-8",
            AuthError::Denied => "wrong user or password",
        })
    }
}

impl std::error::Error for AuthError {}

/// `basic_auth_users`: user name to bcrypt hash. Empty: no authentication.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BasicAuth {
    users: BTreeMap<String, String>,
}

/// Passwords longer than this are refused, as Go's bcrypt (and so exporter-toolkit) does:
/// bcrypt reads only the first 72 bytes.
const MAX_PASSWORD: usize = 72;

impl BasicAuth {
    /// Users with their bcrypt hashes, each checked to be one.
    pub fn new(users: BTreeMap<String, String>) -> Result<Self, WebConfigError> {
        for (user, hash) in &users {
            check_hash(user, hash)?;
        }
        Ok(BasicAuth { users })
    }

    /// Whether requests must carry credentials.
    pub fn is_enabled(&self) -> bool {
        !self.users.is_empty()
    }

    /// The configured user names.
    pub fn users(&self) -> impl Iterator<Item = &str> {
        self.users.keys().map(String::as_str)
    }

    /// Checks a request's `Authorization` header value. Always `Ok` when no users are
    /// configured.
    pub fn authorize(&self, header: Option<&[u8]>) -> Result<(), AuthError> {
        let Some(decoy) = self.users.values().next() else {
            return Ok(());
        };
        let (user, password) = parse_basic(header.ok_or(AuthError::Missing)?)?;
        let user = std::str::from_utf8(&user).map_err(|_| AuthError::NotUtf8)?;
        let (hash, known) = match self.users.get(user) {
            Some(h) => (h, true),
            None => (decoy, false),
        };
        // The hash is computed for unknown users too (against a configured hash), so the
        // time taken does not tell which names exist.
        let ok = password.len() <= MAX_PASSWORD && bcrypt::verify(&password, hash).unwrap_or(false);
        if ok && known {
            Ok(())
        } else {
            Err(AuthError::Denied)
        }
    }
}

/// `Basic <base64>` (the scheme case-insensitive, as RFC 7617 and Go read it) into the user
/// and password bytes (split at the first `:`).
fn parse_basic(value: &[u8]) -> Result<(Vec<u8>, Vec<u8>), AuthError> {
    let value = value.trim_ascii();
    let (scheme, rest) = value.split_at_checked(6).ok_or(AuthError::Malformed)?;
    if !scheme.eq_ignore_ascii_case(b"basic ") {
        return Err(AuthError::Malformed);
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(rest.trim_ascii())
        .map_err(|_| AuthError::Malformed)?;
    let colon = raw
        .iter()
        .position(|&b| b == b':')
        .ok_or(AuthError::Malformed)?;
    Ok((raw[..colon].to_vec(), raw[colon + 1..].to_vec()))
}

fn check_hash(user: &str, hash: &str) -> Result<(), WebConfigError> {
    let bad = |reason: String| WebConfigError::BadHash {
        user: user.to_string(),
        reason,
    };
    let parts: bcrypt::HashParts = hash.parse().map_err(|e| bad(format!("{e}")))?;
    if !(4..=31).contains(&parts.get_cost()) {
        return Err(bad(format!("cost {} outside 4..=31", parts.get_cost())));
    }
    Ok(())
}

/// A parsed web configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WebConfig {
    /// `tls_server_config`; `None`: plain HTTP.
    pub tls: Option<TlsSettings>,
    /// `basic_auth_users`.
    pub auth: BasicAuth,
}

const TOP_KEYS: &[&str] = &["tls_server_config", "basic_auth_users"];
const TLS_KEYS: &[&str] = &[
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "min_version",
];

/// The entries of a mapping, keys as strings, each checked against `allowed`.
fn entries<'v>(
    v: &'v Value,
    at: &str,
    allowed: Option<&[&str]>,
) -> Result<Vec<(String, &'v Value)>, WebConfigError> {
    let map = match v {
        Value::Mapping(m) => m,
        Value::Null => return Ok(Vec::new()),
        _ => {
            return Err(WebConfigError::WrongType {
                key: at.to_string(),
                expected: "a mapping",
            });
        }
    };
    let mut out = Vec::with_capacity(map.len());
    for (k, val) in map {
        let dotted = |k: &str| {
            if at.is_empty() {
                k.to_string()
            } else {
                format!("{at}.{k}")
            }
        };
        let Value::String(k) = k else {
            return Err(WebConfigError::WrongType {
                key: dotted(&format!("{k:?}")),
                expected: "a string key",
            });
        };
        if allowed.is_some_and(|a| !a.contains(&k.as_str())) {
            return Err(WebConfigError::UnknownKey(dotted(k)));
        }
        out.push((k.clone(), val));
    }
    Ok(out)
}

fn string(v: &Value, key: &str) -> Result<Option<String>, WebConfigError> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) if s.is_empty() => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        _ => Err(WebConfigError::WrongType {
            key: key.to_string(),
            expected: "a string",
        }),
    }
}

impl WebConfig {
    /// Reads and parses the file at `path` (relative paths in it are taken from its
    /// directory). Certificates and keys are not read here: [`TlsSettings::server_config`].
    pub fn load(path: &Path) -> Result<Self, WebConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| WebConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, dir)
    }

    /// Parses a configuration's text; relative paths are joined to `dir`.
    pub fn parse(text: &str, dir: &Path) -> Result<Self, WebConfigError> {
        let doc: Value =
            serde_norway::from_str(text).map_err(|e| WebConfigError::Syntax(e.to_string()))?;
        let mut cfg = WebConfig::default();
        for (key, v) in entries(&doc, "", Some(TOP_KEYS))? {
            match key.as_str() {
                "tls_server_config" => cfg.tls = parse_tls(v, dir)?,
                _ => {
                    let mut users = BTreeMap::new();
                    for (user, hash) in entries(v, "basic_auth_users", None)? {
                        let key = format!("basic_auth_users.{user}");
                        let hash = string(hash, &key)?.ok_or(WebConfigError::Missing(key))?;
                        users.insert(user, hash);
                    }
                    cfg.auth = BasicAuth::new(users)?;
                }
            }
        }
        Ok(cfg)
    }
}

fn parse_tls(v: &Value, dir: &Path) -> Result<Option<TlsSettings>, WebConfigError> {
    if v.is_null() {
        return Ok(None);
    }
    let mut fields: BTreeMap<String, String> = BTreeMap::new();
    for (k, val) in entries(v, "tls_server_config", Some(TLS_KEYS))? {
        let key = format!("tls_server_config.{k}");
        if let Some(s) = string(val, &key)? {
            fields.insert(k, s);
        }
    }
    let path = |k: &str| fields.get(k).map(|p| dir.join(p));
    let need =
        |k: &str| path(k).ok_or_else(|| WebConfigError::Missing(format!("tls_server_config.{k}")));
    let client_ca_file = path("client_ca_file");
    let client_auth = match fields.get("client_auth_type").map(String::as_str) {
        None if client_ca_file.is_some() => ClientAuth::RequireAndVerify,
        None | Some("NoClientCert") => ClientAuth::None,
        Some("VerifyClientCertIfGiven") => ClientAuth::VerifyIfGiven,
        Some("RequireAndVerifyClientCert") => ClientAuth::RequireAndVerify,
        Some(other) => {
            return Err(WebConfigError::Unsupported {
                key: "tls_server_config.client_auth_type".into(),
                value: other.into(),
                supported: "NoClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert \
                            (certificates that are asked for are verified)",
            });
        }
    };
    if client_auth != ClientAuth::None && client_ca_file.is_none() {
        return Err(WebConfigError::Missing(
            "tls_server_config.client_ca_file".into(),
        ));
    }
    let min_version = match fields.get("min_version").map(String::as_str) {
        None | Some("TLS12") => MinVersion::Tls12,
        Some("TLS13") => MinVersion::Tls13,
        Some(other) => {
            return Err(WebConfigError::Unsupported {
                key: "tls_server_config.min_version".into(),
                value: other.into(),
                supported: "TLS12, TLS13",
            });
        }
    };
    Ok(Some(TlsSettings {
        cert_file: need("cert_file")?,
        key_file: need("key_file")?,
        client_auth,
        client_ca_file,
        min_version,
    }))
}

impl TlsSettings {
    /// Reads the certificate, key and client CAs and builds the rustls server
    /// configuration (ring's provider; ALPN `http/1.1`).
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, WebConfigError> {
        let pem = |key: &'static str, path: &Path, reason: String| WebConfigError::Pem {
            key,
            path: path.to_path_buf(),
            reason,
        };
        let certs = |key: &'static str, path: &Path| {
            let list: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .and_then(|it| it.collect::<Result<_, _>>())
                .map_err(|e| pem(key, path, e.to_string()))?;
            if list.is_empty() {
                return Err(pem(key, path, "no CERTIFICATE in it".into()));
            }
            Ok(list)
        };
        let chain = certs("tls_server_config.cert_file", &self.cert_file)?;
        let key = PrivateKeyDer::from_pem_file(&self.key_file)
            .map_err(|e| pem("tls_server_config.key_file", &self.key_file, e.to_string()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let versions: &[&'static rustls::SupportedProtocolVersion] = match self.min_version {
            MinVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
            MinVersion::Tls13 => &[&rustls::version::TLS13],
        };
        let tls = |e: rustls::Error| WebConfigError::Tls(e.to_string());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(versions)
            .map_err(tls)?;
        let builder = match (self.client_auth, &self.client_ca_file) {
            (ClientAuth::None, _) | (_, None) => builder.with_no_client_auth(),
            (mode, Some(ca)) => {
                let mut roots = rustls::RootCertStore::empty();
                for c in certs("tls_server_config.client_ca_file", ca)? {
                    roots
                        .add(c)
                        .map_err(|e| pem("tls_server_config.client_ca_file", ca, e.to_string()))?;
                }
                let v = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                );
                let v = if mode == ClientAuth::VerifyIfGiven {
                    v.allow_unauthenticated()
                } else {
                    v
                };
                let v = v.build().map_err(|e| WebConfigError::Tls(e.to_string()))?;
                builder.with_client_cert_verifier(v)
            }
        };
        let mut cfg = builder.with_single_cert(chain, key).map_err(tls)?;
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(cfg))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // bcrypt("secret", cost 4), made with the bcrypt crate.
    fn hash(pw: &str) -> String {
        bcrypt::hash(pw, 4).unwrap()
    }

    fn basic(user: &[u8], pw: &[u8]) -> Vec<u8> {
        let mut raw = user.to_vec();
        raw.push(b':');
        raw.extend_from_slice(pw);
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(raw)
        )
        .into_bytes()
    }

    #[test]
    fn a_full_config_parses_with_paths_from_the_files_directory() {
        let h = hash("secret");
        let text = format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: /etc/k/server.key\n  \
             client_ca_file: ca.pem\n  client_auth_type: VerifyClientCertIfGiven\n  \
             min_version: TLS13\nbasic_auth_users:\n  prometheus: '{h}'\n  alice: \"{h}\"\n"
        );
        let c = WebConfig::parse(&text, Path::new("/etc/drmtool")).unwrap();
        let t = c.tls.unwrap();
        assert_eq!(t.cert_file, Path::new("/etc/drmtool/server.crt"));
        assert_eq!(t.key_file, Path::new("/etc/k/server.key"));
        assert_eq!(
            t.client_ca_file.as_deref(),
            Some(Path::new("/etc/drmtool/ca.pem"))
        );
        assert_eq!(t.client_auth, ClientAuth::VerifyIfGiven);
        assert_eq!(t.min_version, MinVersion::Tls13);
        assert_eq!(c.auth.users().collect::<Vec<_>>(), ["alice", "prometheus"]);
    }

    #[test]
    fn defaults_and_empty_files() {
        assert_eq!(
            WebConfig::parse("", Path::new(".")).unwrap(),
            WebConfig::default()
        );
        assert_eq!(
            WebConfig::parse("tls_server_config:\nbasic_auth_users:\n", Path::new(".")).unwrap(),
            WebConfig::default()
        );
        let c = WebConfig::parse(
            "tls_server_config: {cert_file: a, key_file: b}",
            Path::new("d"),
        )
        .unwrap();
        let t = c.tls.unwrap();
        assert_eq!(t.client_auth, ClientAuth::None);
        assert_eq!(t.min_version, MinVersion::Tls12);
        assert!(!c.auth.is_enabled());
        // A CA without a type: the CA is required, as exporter-toolkit does.
        let t = tls_of(
            "tls_server_config: {cert_file: a, key_file: b, client_ca_file: c}",
            ".",
        );
        assert_eq!(t.client_auth, ClientAuth::RequireAndVerify);
    }

    /// The `tls_server_config` of a configuration that must parse and have one.
    fn tls_of(text: &str, dir: &str) -> TlsSettings {
        WebConfig::parse(text, Path::new(dir)).unwrap().tls.unwrap()
    }

    fn err(text: &str) -> WebConfigError {
        WebConfig::parse(text, Path::new(".")).unwrap_err()
    }

    #[test]
    fn every_bad_input_is_refused_with_its_key() {
        use WebConfigError as E;
        let tls = "tls_server_config: {cert_file: c, key_file: k, ";
        type Kind = fn(&E) -> bool;
        let cases: Vec<(String, &str, Kind)> = vec![
            (
                "tls_server_config: {key_file: k}".into(),
                "tls_server_config.cert_file",
                |e| matches!(e, E::Missing(_)),
            ),
            (
                "tls_server_config: {cert_file: c, key_file: ''}".into(),
                "tls_server_config.key_file",
                |e| matches!(e, E::Missing(_)),
            ),
            (
                format!("{tls}cipher_suites: [x]}}"),
                "tls_server_config.cipher_suites",
                |e| matches!(e, E::UnknownKey(_)),
            ),
            (
                format!("{tls}max_version: TLS13}}"),
                "tls_server_config.max_version",
                |e| matches!(e, E::UnknownKey(_)),
            ),
            (
                "http_server_config: {http2: false}".into(),
                "http_server_config",
                |e| matches!(e, E::UnknownKey(_)),
            ),
            ("basic_auth_user: {a: b}".into(), "basic_auth_user", |e| {
                matches!(e, E::UnknownKey(_))
            }),
            (
                format!("{tls}min_version: TLS10}}"),
                "tls_server_config.min_version",
                |e| matches!(e, E::Unsupported { .. }),
            ),
            (
                format!("{tls}client_auth_type: RequireAnyClientCert, client_ca_file: x}}"),
                "tls_server_config.client_auth_type",
                |e| matches!(e, E::Unsupported { .. }),
            ),
            (
                format!("{tls}client_auth_type: RequireAndVerifyClientCert}}"),
                "tls_server_config.client_ca_file",
                |e| matches!(e, E::Missing(_)),
            ),
            (
                "tls_server_config: {cert_file: [a], key_file: k}".into(),
                "tls_server_config.cert_file",
                |e| matches!(e, E::WrongType { .. }),
            ),
            ("basic_auth_users: [a, b]".into(), "basic_auth_users", |e| {
                matches!(e, E::WrongType { .. })
            }),
            (
                "basic_auth_users: {alice: }".into(),
                "basic_auth_users.alice",
                |e| matches!(e, E::Missing(_)),
            ),
        ];
        for (text, key, kind) in cases {
            let e = err(&text);
            assert!(kind(&e), "{text}: {e:?}");
            assert_eq!(e.key().as_deref(), Some(key), "{text}");
            // Messages start with the key.
            assert!(e.to_string().starts_with(&format!("{key}: ")), "{e}");
        }
        assert!(matches!(err("tls_server_config: {"), E::Syntax(_)));
        assert!(matches!(err("- a\n- b"), E::WrongType { .. }));
        for bad in [
            "plaintext",
            "$2y$10$short",
            "$1$abcdefgh$0123456789abcdefghijkl",
            "$2y$99$abcdefghijklmnopqrstuuMNOPQRSTUVWXYZabcdefghijklmnopq",
        ] {
            let e = err(&format!("basic_auth_users: {{alice: '{bad}'}}"));
            assert!(matches!(&e, E::BadHash { .. }), "{bad}: {e}");
            assert_eq!(e.key().as_deref(), Some("basic_auth_users.alice"));
        }
    }

    #[test]
    fn authorization_headers() {
        let auth = BasicAuth::new(BTreeMap::from([
            ("prometheus".to_string(), hash("secret")),
            ("bob".to_string(), hash("pa:ss")),
        ]))
        .unwrap();
        assert!(auth.is_enabled());
        assert_eq!(
            auth.authorize(Some(&basic(b"prometheus", b"secret"))),
            Ok(())
        );
        assert_eq!(
            auth.authorize(Some(&basic(b"bob", b"pa:ss"))),
            Ok(()),
            "split at the first colon"
        );
        let mut scheme_lower = b"basic ".to_vec();
        scheme_lower.extend_from_slice(&basic(b"prometheus", b"secret")[6..]);
        assert_eq!(auth.authorize(Some(&scheme_lower)), Ok(()));
        assert_eq!(
            auth.authorize(Some(&basic(b"prometheus", b"wrong"))),
            Err(AuthError::Denied)
        );
        assert_eq!(
            auth.authorize(Some(&basic(b"mallory", b"secret"))),
            Err(AuthError::Denied)
        );
        assert_eq!(auth.authorize(None), Err(AuthError::Missing));
        for bad in [
            &b"Bearer abc"[..],
            b"Basic",
            b"Basic !!!notbase64",
            b"Basic cHJvbWV0aGV1cw==", // "prometheus", no colon
            b"",
        ] {
            assert_eq!(
                auth.authorize(Some(bad)),
                Err(AuthError::Malformed),
                "{bad:?}"
            );
        }
        assert_eq!(
            auth.authorize(Some(&basic(b"prom\xffetheus", b"secret"))),
            Err(AuthError::NotUtf8)
        );
        // Past 72 bytes bcrypt would read only a prefix: refused, as Go refuses it.
        let long = format!("secret{}", "x".repeat(80));
        let auth_long =
            BasicAuth::new(BTreeMap::from([("u".to_string(), hash(&long[..72]))])).unwrap();
        assert_eq!(
            auth_long.authorize(Some(&basic(b"u", &long.as_bytes()[..72]))),
            Ok(())
        );
        assert_eq!(
            auth_long.authorize(Some(&basic(b"u", long.as_bytes()))),
            Err(AuthError::Denied)
        );
        // No users: nothing is asked.
        assert_eq!(BasicAuth::default().authorize(None), Ok(()));
    }

    #[test]
    fn missing_certificate_files_are_refused_by_key() {
        let t = tls_of(
            "tls_server_config: {cert_file: nope.crt, key_file: nope.key}",
            "/nonexistent-drmtool-test",
        );
        let e = t.server_config().unwrap_err();
        assert!(
            matches!(&e, WebConfigError::Pem { key, .. } if *key == "tls_server_config.cert_file"),
            "{e}"
        );
    }
}
