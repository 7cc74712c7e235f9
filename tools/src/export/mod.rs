//! `drmtool export`: the buffers model as Prometheus metrics, for any DRM driver.
//!
//! Every scrape scans `/proc` afresh ([`Exporter::scrape`]), so a process that exited leaves
//! no stale series; scrapes that come faster than [`Config::min_interval`] get the cached
//! result. Series are built on a fresh [`prometheus_client`] registry per scan and encoded
//! in OpenMetrics or the Prometheus text format 0.0.4 ([`Format`], chosen from the request's
//! `Accept` header as Prometheus negotiates, [`negotiate`]).
//!
//! What is exported, per device and per group (`--per device|cgroup|client`):
//!
//! | metric | type | from |
//! |---|---|---|
//! | `drm_device_info` | gauge (1) | the device: driver, GPU index, nodes, sysfs path |
//! | `drm_clients` | gauge | distinct open DRM files (one per `drm-client-id` / kcmp) |
//! | `drm_memory_bytes` | gauge | fdinfo `drm-{total,shared,resident,purgeable,active}-<region>` |
//! | `drm_mapped_bytes` | gauge | DRM buffers mapped, `/proc/<pid>/maps` |
//! | `drm_dmabuf_bytes` | gauge | dma-bufs held, `exclusive` or `shared` with another group |
//! | `drm_dmabuf_distinct_bytes` | gauge | every dma-buf once, whoever holds it |
//! | `drm_engine_busy_seconds_total` | counter | fdinfo `drm-engine-<e>` |
//! | `drm_engine_capacity` | gauge | fdinfo `drm-engine-capacity-<e>` |
//! | `drm_engine_cycles_total` | counter | fdinfo `drm-cycles-<e>` |
//! | `drm_engine_total_cycles_total` | counter | fdinfo `drm-total-cycles-<e>` |
//! | `drm_engine_max_frequency_hertz` | gauge | fdinfo `drm-maxfreq-<e>` |
//! | `drm_dmem_capacity_bytes` | gauge | the dmem cgroup controller: a region's size (`dmem.capacity`) |
//! | `drm_dmem_current_bytes` | gauge | a cgroup's charge on a region (`dmem.current`) |
//! | `drm_dmem_max_bytes` | gauge | a cgroup's limit on a region (`dmem.max`) |
//! | `drm_dmabuf_unattributed_bytes` | gauge | dma-bufs of debugfs `dma_buf/bufinfo` no process holds ([`bufinfo`]) |
//! | `drm_lease_holders` | gauge | processes holding a lease on a GPU (`/proc/locks`) |
//! | `drmtool_export_capability_missing` | gauge | a capability the scan needs that the exporter lacks ([`privilege`]) |
//! | `drmtool_export_*` | | the exporter: scan duration, scans, errors, cached answers |
//!
//! A figure no source knows has no series at all (never a zero that means unknown); every
//! memory series carries the `source` it came from. Counters summed over a group never go
//! backwards: what a client that exited had counted stays in its group's counter while the
//! group has live clients ([`Counters`]), and each series is clamped to its last value.

mod admission;
pub mod bufinfo;
mod http;
mod model;
pub mod privilege;
mod server;
mod sources;
pub mod webconfig;

pub use admission::{Admit, Lobby, Promoted, Room, Slots};
pub use http::{
    ACCEPT_BATCH, Access, EVICT_AFTER, HEADER_TIMEOUT, LOBBY_MAX, LastServed, MAX_CONNECTIONS,
    MAX_REQUEST, SILENT_GRACE, Served, WRITE_TIMEOUT, serve_conn, serve_conn_flagged, serve_one,
    serve_one_with,
};
pub use model::{Counters, Group, Per, build};
pub use server::{serve, serve_with};

use crate::gpu::Gpu;
use crate::scan::{self, Options};
use prometheus_client::registry::Registry;
use std::time::{Duration, Instant};

/// An exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 text (`application/openmetrics-text`).
    OpenMetrics,
    /// The Prometheus text format 0.0.4 (`text/plain`).
    Text,
}

impl Format {
    /// The `Content-Type` of a response in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Text => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        }
    }
}

/// The format for an `Accept` header, as Prometheus's own client libraries choose: the
/// acceptable type with the highest `q` (OpenMetrics on a tie, as Prometheus lists it
/// first); text when the header is absent, names neither type, or names only `*/*`.
pub fn negotiate(accept: Option<&str>) -> Format {
    let Some(accept) = accept else {
        return Format::Text;
    };
    let (mut om, mut text) = (None::<f64>, None::<f64>);
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let mime = parts.next().unwrap_or_default().to_ascii_lowercase();
        let mut q = 1.0;
        for p in parts {
            if let Some(v) = p.strip_prefix("q=").or_else(|| p.strip_prefix("Q=")) {
                q = v.trim().parse::<f64>().unwrap_or(0.0);
            }
        }
        // q=0 (and NaN, and a q that does not parse) is "not acceptable".
        if q.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
            continue;
        }
        let slot = match mime.as_str() {
            "application/openmetrics-text" => &mut om,
            "text/plain" => &mut text,
            _ => continue,
        };
        *slot = Some(slot.map_or(q, |old| old.max(q)));
    }
    match (om, text) {
        (Some(o), Some(t)) if o >= t => Format::OpenMetrics,
        (Some(_), None) => Format::OpenMetrics,
        _ => Format::Text,
    }
}

/// Encodes a registry in `format`.
pub fn encode(registry: &Registry, format: Format) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail; an encoder error would be a bug in a metric name.
    let _ = match format {
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, registry),
        Format::Text => prometheus_client::encoding::prometheus_text::encode(&mut out, registry),
    };
    out
}

/// How the exporter scans and groups.
#[derive(Debug, Clone)]
pub struct Config {
    /// The scan's sources.
    pub scan: Options,
    /// What one series stands for.
    pub per: Per,
    /// With [`Per::Client`]: also `comm` and `client_name` labels (text other users choose,
    /// escaped; off by default).
    pub client_names: bool,
    /// Scrapes closer together than this get the last result.
    pub min_interval: Duration,
}

/// The two encodings of one scan.
#[derive(Debug, Clone)]
struct Cached {
    at: Instant,
    open_metrics: String,
    text: String,
}

/// The exporter's own figures.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SelfStats {
    /// Scans run.
    pub scans: u64,
    /// Scans that could not run (`/proc` unreadable).
    pub scan_errors: u64,
    /// Answers served from the cache (inside `min_interval`).
    pub cached: u64,
    /// Seconds the last scan took.
    pub last_scan_seconds: f64,
}

/// The exporter: configuration, counter state across scans, the cache.
#[derive(Debug)]
pub struct Exporter {
    cfg: Config,
    counters: Counters,
    cache: Option<Cached>,
    stats: SelfStats,
}

impl Exporter {
    /// An exporter with no scan yet.
    pub fn new(cfg: Config) -> Self {
        Exporter {
            cfg,
            counters: Counters::default(),
            cache: None,
            stats: SelfStats::default(),
        }
    }

    /// The exposition for one scrape at `now`: a fresh scan, or the cached one when the last
    /// scan is younger than [`Config::min_interval`].
    pub fn scrape(&mut self, format: Format, now: Instant) -> String {
        let fresh = self
            .cache
            .as_ref()
            .is_some_and(|c| now.saturating_duration_since(c.at) < self.cfg.min_interval);
        if fresh {
            self.stats.cached += 1;
        } else {
            self.refresh(now);
        }
        let c = self.cache.as_ref().expect("refresh fills the cache");
        match format {
            Format::OpenMetrics => c.open_metrics.clone(),
            Format::Text => c.text.clone(),
        }
    }

    /// Scans now and rebuilds both encodings.
    fn refresh(&mut self, now: Instant) {
        let t0 = Instant::now();
        // Before the scan: a dma-buf the table lists and the scan then finds held is
        // attributed; one made after the table was read is not in it (so never counted
        // unattributed by a race; one released meanwhile is, until the next scrape).
        let buffers = (!self.cfg.scan.skip.debugfs)
            .then(|| bufinfo::read(&self.cfg.scan.debugfs_root))
            .flatten();
        let result = scan::scan(&self.cfg.scan);
        let took = t0.elapsed().as_secs_f64();
        self.stats.scans += 1;
        self.stats.last_scan_seconds = took;
        // The GPU ordering (the index `drmtool devices` and `run --gpu` use) of the
        // machine's own nodes; a machine without /dev/dri has none.
        let gpus: Vec<Gpu> = crate::gpu::gpus().unwrap_or_default();
        let mut reg = Registry::default();
        match &result {
            Ok(report) => {
                build(
                    &mut reg,
                    report,
                    &gpus,
                    self.cfg.per,
                    self.cfg.client_names,
                    &mut self.counters,
                );
                let all = self.cfg.scan.pids.is_empty();
                sources::unattributed(&mut reg, buffers.as_ref(), report, all);
            }
            Err(_) => self.stats.scan_errors += 1,
        }
        sources::leases(&mut reg, &gpus);
        model::self_metrics(&mut reg, &self.stats, result.as_ref().ok());
        sources::capabilities(&mut reg, privilege::Privileges::current().ok().as_ref());
        self.cache = Some(Cached {
            at: now,
            open_metrics: encode(&reg, Format::OpenMetrics),
            text: encode(&reg, Format::Text),
        });
    }

    /// The exporter's own figures so far.
    pub fn stats(&self) -> SelfStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_follows_q_values_like_prometheus() {
        // What Prometheus 2.42 sends.
        let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                    version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(negotiate(Some(prom)), Format::OpenMetrics);
        assert_eq!(negotiate(None), Format::Text);
        assert_eq!(negotiate(Some("*/*")), Format::Text, "curl");
        assert_eq!(negotiate(Some("text/plain")), Format::Text);
        assert_eq!(
            negotiate(Some("text/plain;q=0.9, application/openmetrics-text;q=0.5")),
            Format::Text
        );
        assert_eq!(
            negotiate(Some("application/openmetrics-text; version=1.0.0")),
            Format::OpenMetrics
        );
        assert_eq!(
            negotiate(Some("application/openmetrics-text;q=0, text/plain;q=0.1")),
            Format::Text,
            "q=0 is not acceptable"
        );
        assert_eq!(
            negotiate(Some("application/openmetrics-text;q=nonsense")),
            Format::Text
        );
        assert_eq!(
            negotiate(Some("APPLICATION/OpenMetrics-Text")),
            Format::OpenMetrics
        );
    }
}
