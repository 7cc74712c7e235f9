//! `drmtool export`: the Prometheus exporter and its textfile mode.

use super::*;

/// `drmtool export` arguments.
#[derive(clap::Args, Debug)]
pub(super) struct ExportArgs {
    /// Address and port to serve /metrics on.
    #[arg(long, default_value = "127.0.0.1:9717", value_name = "ADDR:PORT")]
    listen: String,
    /// TLS and basic auth, in the web configuration file format of the Prometheus
    /// exporters (exporter-toolkit): tls_server_config (cert_file, key_file,
    /// client_auth_type, client_ca_file, min_version) and basic_auth_users (bcrypt
    /// hashes). Any other key is refused.
    #[arg(
        long = "web.config.file",
        value_name = "FILE",
        conflicts_with = "textfile"
    )]
    web_config_file: Option<std::path::PathBuf>,
    /// What one series stands for: device totals, cgroups (with unit, container, pod and
    /// Slurm job labels) or single open files (with pid; many series).
    #[arg(long, value_enum, default_value = "cgroup")]
    per: crate::export::Per,
    /// With --per client: also the comm and drm-client-name labels (text any user
    /// chooses; escaped).
    #[arg(long)]
    client_names: bool,
    /// Scrapes closer together than SECS get the last scan's result.
    #[arg(long, default_value_t = 1.0, value_name = "SECS")]
    min_interval: f64,
    /// Write the metrics (text format 0.0.4) to PATH, replaced whole each time, every
    /// --interval seconds, instead of serving them.
    #[arg(long, value_name = "PATH", conflicts_with = "listen")]
    textfile: Option<std::path::PathBuf>,
    /// With --textfile: seconds between writes.
    #[arg(
        long,
        default_value_t = 15.0,
        value_name = "SECS",
        requires = "textfile"
    )]
    interval: f64,
    /// With --textfile: stop after N writes, N >= 1 (default: until interrupted).
    #[arg(long, value_name = "N", requires = "textfile")]
    count: Option<u64>,
    /// Leave out a source (as `drmtool buffers --skip`): maps, debugfs, kcmp.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "SOURCE")]
    skip: Vec<SkipSource>,
    /// Start even when not root and holding capabilities beyond what the scan needs
    /// (CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH; CAP_NET_BIND_SERVICE for a port below 1024),
    /// or with uid 0 left as the real or saved uid. Refused without it.
    #[arg(long)]
    allow_extra_capabilities: bool,
}

/// The privilege check at start: `Err` (printed) when `export` must not run as it is;
/// warnings for what the scan will not see.
fn check_privileges(a: &ExportArgs) -> Result<(), ExitCode> {
    use crate::export::privilege::{self, Privileges};
    let p = match Privileges::current() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("drmtool: export: cannot check its own privileges: {e}");
            return Err(ExitCode::FAILURE);
        }
    };
    // The listen port (none for --textfile).
    let port = a
        .textfile
        .is_none()
        .then(|| a.listen.rsplit_once(':')?.1.parse::<u16>().ok())
        .flatten();
    match privilege::check_export(&p, port) {
        Ok(()) => {}
        Err(e) if a.allow_extra_capabilities => {
            eprintln!("drmtool: export: warning: {e} (going on: --allow-extra-capabilities)");
        }
        Err(e) => {
            eprintln!("drmtool: export: {e}");
            return Err(ExitCode::from(Exit::Usage));
        }
    }
    for (cap, gives) in privilege::scan_missing(&p) {
        eprintln!(
            "drmtool: export: warning: without {cap} it cannot {gives}: the GPU memory of \
             other users' processes is not counted (drmtool_export_capability_missing is 1; \
             hint: run it as drmtool-export.service does, with CAP_SYS_PTRACE and \
             CAP_DAC_READ_SEARCH)"
        );
    }
    Ok(())
}

pub(super) fn export_cmd(a: &ExportArgs) -> ExitCode {
    use crate::export::{Config, Exporter, Format};
    let usage = |m: &str| {
        eprintln!("drmtool: export: {m}");
        ExitCode::from(Exit::Usage)
    };
    let Some(min_interval) = seconds(a.min_interval) else {
        return usage("--min-interval needs a number of seconds >= 0 (hint: --min-interval 1)");
    };
    if a.count == Some(0) {
        return usage("--count needs a number of writes >= 1 (hint: --count 1)");
    }
    if a.client_names && a.per != crate::export::Per::Client {
        return usage("--client-names needs --per client");
    }
    if let Err(code) = check_privileges(a) {
        return code;
    }
    let cfg = Config {
        scan: Options {
            skip: skip_of(&a.skip),
            ..Default::default()
        },
        per: a.per,
        client_names: a.client_names,
        min_interval,
    };
    let mut exporter = Exporter::new(cfg);
    if let Some(path) = &a.textfile {
        let pause = match seconds(a.interval) {
            Some(d) if !d.is_zero() => d,
            _ => {
                return usage(
                    "--interval needs a positive number of seconds (hint: --interval 15)",
                );
            }
        };
        let mut n = 0u64;
        loop {
            let body = exporter.scrape(Format::Text, Instant::now());
            if let Err(e) = crate::outfile::replace(path, |mut f| {
                f.write_all(body.as_bytes()).and_then(|()| f.sync_all())
            }) {
                eprintln!("drmtool: export: {e}");
                return ExitCode::FAILURE;
            }
            n += 1;
            if a.count.is_some_and(|c| n >= c) {
                return ExitCode::SUCCESS;
            }
            std::thread::sleep(pause);
        }
    }
    let mut access = crate::export::Access::default();
    if let Some(path) = &a.web_config_file {
        let loaded = crate::export::webconfig::WebConfig::load(path).and_then(|w| {
            let tls = w.tls.as_ref().map(|t| t.server_config()).transpose()?;
            Ok(crate::export::Access { tls, auth: w.auth })
        });
        match loaded {
            Ok(acc) => access = acc,
            Err(e) => {
                eprintln!("drmtool: export: --web.config.file {}: {e}", path.display());
                return ExitCode::from(Exit::Usage);
            }
        }
    }
    let listener = match std::net::TcpListener::bind(&a.listen) {
        Ok(l) => l,
        Err(e) => {
            eprintln!(
                "drmtool: export: cannot listen on {}: {e} (hint: --listen 127.0.0.1:9717)",
                a.listen
            );
            return ExitCode::FAILURE;
        }
    };
    let shown = listener
        .local_addr()
        .map_or_else(|_| a.listen.clone(), |l| l.to_string());
    let loopback = listener.local_addr().is_ok_and(|l| l.ip().is_loopback());
    if !loopback && !access.auth.is_enabled() {
        eprintln!(
            "drmtool: export: warning: {shown} is reachable from other hosts and asks no \
             password (hint: --web.config.file with basic_auth_users and tls_server_config)"
        );
    } else if access.auth.is_enabled() && access.tls.is_none() {
        eprintln!(
            "drmtool: export: warning: basic auth without tls_server_config: passwords \
             cross the network in clear text"
        );
    }
    let scheme = if access.tls.is_some() {
        "https"
    } else {
        "http"
    };
    eprintln!("drmtool: export: serving {scheme}://{shown}/metrics");
    let e = crate::export::serve_with(
        listener,
        std::sync::Arc::new(std::sync::Mutex::new(exporter)),
        std::sync::Arc::new(access),
    );
    eprintln!("drmtool: export: {e}");
    ExitCode::FAILURE
}
