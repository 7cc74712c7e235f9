//! `drmtool`: inspect DRM devices, capabilities, KMS state and GPU memory holders.

use clap::{Parser, Subcommand};
use serde::Serialize;
use std::process::ExitCode;

/// Version of the JSON output's shape; bumped on any breaking change.
const SCHEMA_VERSION: u32 = 1;

#[derive(Parser, Debug)]
#[command(
    name = "drmtool",
    version,
    about = "Inspect DRM devices, capabilities, KMS state and who holds which GPU memory",
    after_help = "Examples:\n  drmtool devices\n  drmtool devices --json\n\n\
                  On a machine without /dev/dri, run it in a guest with real drivers:\n  \
                  cargo run -p vm -- run --kernel debian-6.12 -- drmtool devices"
)]
struct Cli {
    /// Print JSON (with a top-level schema_version) instead of a table.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// List every DRM node with its kind, driver, bus and PCI identity.
    Devices,
}

#[derive(Serialize)]
struct DeviceRow {
    path: String,
    kind: &'static str,
    dev: String,
    driver: Option<String>,
    parent_driver: Option<String>,
    driver_version: Option<String>,
    bus: Option<String>,
    pci_id: Option<String>,
    sysfs: String,
    error: Option<String>,
}

#[derive(Serialize)]
struct DevicesOut {
    schema_version: u32,
    devices: Vec<DeviceRow>,
    /// Why the list is empty, when it is.
    reason: Option<String>,
}

fn devices(json: bool) -> ExitCode {
    let (rows, reason) = match drm_gem::enumerate() {
        Ok(nodes) => (nodes.into_iter().map(row).collect(), None),
        Err(drm_gem::NoNodes::NoDevDri) => (
            Vec::new(),
            Some(
                "no DRM devices: this host has no /dev/dri (no DRM driver is loaded here); \
                 run drmtool inside a guest with real drivers: \
                 cargo run -p vm -- run --kernel debian-6.12 -- drmtool devices"
                    .to_string(),
            ),
        ),
        Err(drm_gem::NoNodes::Empty) => (
            Vec::new(),
            Some("no DRM devices: /dev/dri exists but holds no card or render nodes".into()),
        ),
    };
    if json {
        let out = DevicesOut {
            schema_version: SCHEMA_VERSION,
            devices: rows,
            reason,
        };
        match serde_json::to_string_pretty(&out) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("drmtool: cannot encode JSON: {e}");
                return ExitCode::FAILURE;
            }
        }
        return ExitCode::SUCCESS;
    }
    if let Some(r) = reason {
        eprintln!("drmtool: {r}");
        return ExitCode::SUCCESS;
    }
    let header: [&str; 9] = [
        "NODE", "KIND", "DEV", "DRIVER", "VERSION", "BUS", "BOUND TO", "PCI", "SYSFS",
    ];
    let table: Vec<[String; 9]> = rows
        .iter()
        .map(|r| {
            let opt = |o: &Option<String>| o.clone().unwrap_or_else(|| "-".into());
            [
                r.path.clone(),
                r.kind.into(),
                r.dev.clone(),
                opt(&r.driver),
                r.error
                    .clone()
                    .map(|e| format!("error: {e}"))
                    .unwrap_or_else(|| opt(&r.driver_version)),
                opt(&r.bus),
                opt(&r.parent_driver),
                opt(&r.pci_id),
                r.sysfs.clone(),
            ]
        })
        .collect();
    let mut width = header.map(str::len);
    for r in &table {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: Vec<&str>| {
        let s: Vec<String> = cells
            .iter()
            .zip(width)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", s.join("  ").trim_end());
    };
    line(header.to_vec());
    for r in &table {
        line(r.iter().map(String::as_str).collect());
    }
    ExitCode::SUCCESS
}

fn row(n: drm_gem::NodeInfo) -> DeviceRow {
    let (version, error) = match drm_gem::Device::open(&n.path).and_then(|d| d.driver()) {
        Ok(v) => (
            Some(format!("{}.{}.{}", v.version.0, v.version.1, v.version.2)),
            None,
        ),
        Err(e) => (None, Some(e.to_string())),
    };
    DeviceRow {
        path: n.path.display().to_string(),
        kind: n.kind.as_str(),
        dev: format!("{}:{}", n.dev.0, n.dev.1),
        driver: n.driver,
        parent_driver: n.parent_driver,
        driver_version: version,
        bus: n.bus,
        pci_id: n.pci_id.map(|(v, d)| format!("{v:04x}:{d:04x}")),
        sysfs: n.sysfs.display().to_string(),
        error,
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Devices => devices(cli.json),
    }
}
