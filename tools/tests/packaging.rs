//! The Prometheus rules and the Grafana dashboard of packaging/ on the host: the metric
//! names every expression reads (tools/tests/support/promql.rs) are metrics `drmtool
//! export` documents (tools/src/export/mod.rs's table), every recording rule read is
//! defined, and every dashboard expression is PromQL that Prometheus's own parser takes
//! (`promtool check rules` over a file made of them). `promtool test rules` of the rules
//! is scripts/test's step prometheus-rules; the names against a real scrape are the guest
//! test kernel-tests/tests/drmtool_export_privilege.rs.

#[path = "support/promql.rs"]
mod promql;

use std::collections::BTreeSet;
use std::process::Command;

const RULES: &str = include_str!("../../packaging/prometheus/drmtool-rules.yml");
const DASHBOARD: &str = include_str!("../../packaging/grafana/drmtool.json");
const EXPORT_DOCS: &str = include_str!("../src/export/mod.rs");

fn dashboard() -> serde_json::Value {
    serde_json::from_str(DASHBOARD).expect("drmtool.json is JSON")
}

#[test]
fn the_tokenizer_finds_metrics_and_nothing_else() {
    let n = |e: &str| -> Vec<String> { promql::metric_names(e).into_iter().collect() };
    assert_eq!(
        n(
            r#"sum by (device, region) (drm_dmem_current_bytes{cgroup=~"/[^/]+", x="a,b}"})
             / on (instance, device) group_left () sum without (source) (drm_dmem_capacity_bytes > 0)"#
        ),
        ["drm_dmem_capacity_bytes", "drm_dmem_current_bytes"]
    );
    assert_eq!(
        n(
            "topk(10, sum by (cgroup) (rate(drm_engine_busy_seconds_total{instance=~\"$instance\"}[$__rate_interval]))) > bool 1e9"
        ),
        ["drm_engine_busy_seconds_total"]
    );
    assert_eq!(
        n(
            "drm:dmabuf_unattributed_bytes:sum offset 1h > 1073741824 or drmtool_export_scan_ok == 0 unless ${x}"
        ),
        [
            "drm:dmabuf_unattributed_bytes:sum",
            "drmtool_export_scan_ok"
        ]
    );
    assert_eq!(
        n("label_values(drm_device_info, instance)"),
        ["drm_device_info"]
    );
    // The rules file's layout: 11 rules, 7 recorded.
    let (exprs, records) = promql::rules(RULES);
    assert_eq!((exprs.len(), records.len()), (11, 7), "{exprs:#?}");
    assert!(exprs.iter().all(|e| !e.is_empty() && !e.starts_with('>')));
}

#[test]
fn every_name_read_is_a_documented_metric_and_every_record_is_defined() {
    let (names, undefined) = promql::served_names(RULES, &dashboard());
    assert!(
        undefined.is_empty(),
        "recording rules read, not defined: {undefined:?}"
    );
    // The table of the export module's docs: `| `drm_x` | type | from |`, and the
    // self-metrics' line (`drmtool_export_*`) standing for drmtool_export_ names.
    let documented: BTreeSet<&str> = EXPORT_DOCS
        .lines()
        .filter_map(|l| l.strip_prefix("//! | `")?.split('`').next())
        .collect();
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| !documented.contains(n.as_str()) && !n.starts_with("drmtool_export_"))
        .collect();
    assert!(missing.is_empty(), "not in export's table: {missing:?}");
    // The exporter's own metrics named must be ones self_metrics and sources register.
    for n in names.iter().filter(|n| n.starts_with("drmtool_export_")) {
        let family = n.trim_end_matches("_total").trim_end_matches("_seconds");
        let sources = [
            include_str!("../src/export/model.rs"),
            include_str!("../src/export/sources.rs"),
        ];
        assert!(
            sources.iter().any(|s| s.contains(&format!("\"{family}\""))),
            "{n} is registered nowhere"
        );
    }
    // The dashboard covers memory, engines, jobs and leases.
    for want in [
        "drm_memory_bytes",
        "drm_engine_busy_seconds_total",
        "drm_dmem_max_bytes",
        "drm_lease_holders",
    ] {
        assert!(names.contains(want), "{want} in no expression");
    }
}

#[test]
fn every_dashboard_expression_parses_as_promql() {
    let d = dashboard();
    let exprs = promql::dashboard_exprs(&d);
    assert!(exprs.len() >= 15, "{exprs:?}");
    // Unique panel ids, and every panel on the datasource variable.
    let mut ids = BTreeSet::new();
    let panels = d["panels"].as_array().unwrap();
    for p in panels {
        assert!(ids.insert(p["id"].as_u64().unwrap()), "panel id twice: {p}");
        if p["type"] != "row" {
            assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
        }
    }
    // Grafana's variables as Prometheus would see them after substitution; the
    // label_values() of a variable query is Grafana's, not PromQL: its metric selector.
    let rules: String = exprs
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let e = e
                .replace("$__rate_interval", "5m")
                .replace("$instance", ".*")
                .replace("$kind", "total");
            let e = match e.strip_prefix("label_values(") {
                Some(rest) => rest.split(',').next().unwrap().to_string(),
                None => e,
            };
            format!(
                "      - record: dashboard:expr{i}\n        expr: '{}'\n",
                e.replace('\'', "''")
            )
        })
        .collect();
    let dir = std::env::temp_dir().join(format!("drmtool-dashboard-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("dashboard-rules.yml");
    std::fs::write(
        &file,
        format!("groups:\n  - name: dashboard\n    rules:\n{rules}"),
    )
    .unwrap();
    let out = Command::new("promtool")
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .expect("promtool is not installed (scripts/setup installs Debian's prometheus)");
    std::fs::remove_dir_all(&dir).unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
}
