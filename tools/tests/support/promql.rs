//! The metric names in the PromQL of packaging/prometheus/drmtool-rules.yml and
//! packaging/grafana/drmtool.json, shared by the host test (tools/tests/packaging.rs) and
//! the guest test that checks them against a real scrape
//! (kernel-tests/tests/drmtool_export_privilege.rs, through `#[path]`).
//!
//! A small tokenizer, not a PromQL parser: it skips strings, label matchers (`{...}`),
//! ranges and subqueries (`[...]`), numbers and durations, Grafana variables (`$x`,
//! `${x}`), and the label lists after `by`, `without`, `on`, `ignoring`, `group_left` and
//! `group_right`; an identifier followed by `(` is a function or an aggregation; the
//! binary and modifier keywords (`and`, `or`, `unless`, `bool`, `offset`, ...) are not
//! names. What is left is a metric name: an exporter's (no `:`) or a recording rule's
//! (with `:`, the convention the rules file follows). Grafana's `label_values(m, l)`
//! names metric `m` only.
#![allow(dead_code)]

use std::collections::BTreeSet;

/// Keywords that are never metric names (the aggregations among them: `sum by (l) (x)`
/// puts its label list before its parenthesis).
const KEYWORDS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "atan2",
    "inf",
    "nan",
    "start",
    "end",
];

/// Keywords followed by a parenthesized list of label names.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

fn ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The index just past the bracket that closes the one at `i` (`open`/`close`), strings
/// inside skipped.
fn skip_group(s: &[char], mut i: usize, open: char, close: char) -> usize {
    let mut depth = 0;
    while i < s.len() {
        let c = s[i];
        if c == '"' || c == '\'' || c == '`' {
            i = skip_string(s, i);
            continue;
        }
        if c == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
            if depth == 0 {
                return i + 1;
            }
        }
        i += 1;
    }
    i
}

/// The index just past the string that starts at `i`.
fn skip_string(s: &[char], i: usize) -> usize {
    let q = s[i];
    let mut j = i + 1;
    while j < s.len() && s[j] != q {
        if s[j] == '\\' && q != '`' {
            j += 1;
        }
        j += 1;
    }
    j + 1
}

/// The metric names `expr` reads (see the module docs).
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let s: Vec<char> = expr.chars().collect();
    let mut out = BTreeSet::new();
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        match c {
            '"' | '\'' | '`' => i = skip_string(&s, i),
            '{' => i = skip_group(&s, i, '{', '}'),
            '[' => i = skip_group(&s, i, '[', ']'),
            '$' => {
                i += 1;
                if s.get(i) == Some(&'{') {
                    i = skip_group(&s, i, '{', '}');
                } else {
                    while i < s.len() && ident_char(s[i]) {
                        i += 1;
                    }
                }
            }
            c if c.is_ascii_digit() || c == '.' => {
                // A number (1e9, 0x1f, 0.9) or a duration (5m, 1h30m).
                while i < s.len() && (s[i].is_ascii_alphanumeric() || s[i] == '.') {
                    i += 1;
                }
            }
            c if ident_start(c) => {
                let start = i;
                while i < s.len() && ident_char(s[i]) {
                    i += 1;
                }
                let word: String = s[start..i].iter().collect();
                let mut j = i;
                while j < s.len() && s[j].is_whitespace() {
                    j += 1;
                }
                let call = s.get(j) == Some(&'(');
                if call && LABEL_LISTS.contains(&word.as_str()) {
                    i = skip_group(&s, j, '(', ')');
                } else if call && word == "label_values" {
                    let end = skip_group(&s, j, '(', ')');
                    let inner: String = s[j + 1..end.saturating_sub(1)].iter().collect();
                    let first = inner.split(',').next().unwrap_or("");
                    out.extend(metric_names(first));
                    i = end;
                } else if !call && !KEYWORDS.contains(&word.as_str()) {
                    out.insert(word);
                }
            }
            _ => i += 1,
        }
    }
    out
}

/// The `expr:` values of a rules file (a plain value, or a `>`/`|` block under it) and its
/// `record:` names, read line by line (the layout drmtool-rules.yml uses).
pub fn rules(text: &str) -> (Vec<String>, BTreeSet<String>) {
    let lines: Vec<&str> = text.lines().collect();
    let mut exprs = Vec::new();
    let mut records = BTreeSet::new();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut i = 0;
    while i < lines.len() {
        let t = lines[i].trim_start().trim_start_matches("- ");
        if let Some(r) = t.strip_prefix("record:") {
            records.insert(r.trim().to_string());
        }
        if let Some(v) = t.strip_prefix("expr:") {
            let v = v.trim();
            if v == ">" || v == "|" || v == ">-" || v == "|-" {
                let base = indent(lines[i]);
                let mut block = Vec::new();
                while i + 1 < lines.len()
                    && (lines[i + 1].trim().is_empty() || indent(lines[i + 1]) > base)
                {
                    i += 1;
                    block.push(lines[i].trim());
                }
                exprs.push(block.join(" "));
            } else {
                exprs.push(v.trim_matches('\'').to_string());
            }
        }
        i += 1;
    }
    (exprs, records)
}

/// Every PromQL text of a Grafana dashboard: the panels' (and rows' panels') targets'
/// `expr`, and the query variables' `query` (a string or `{query: ...}`).
pub fn dashboard_exprs(d: &serde_json::Value) -> Vec<String> {
    fn panels(v: &serde_json::Value, out: &mut Vec<String>) {
        for p in v.as_array().into_iter().flatten() {
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(e) = t["expr"].as_str() {
                    out.push(e.to_string());
                }
            }
            panels(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    panels(&d["panels"], &mut out);
    for v in d["templating"]["list"].as_array().into_iter().flatten() {
        if v["type"] != "query" {
            continue;
        }
        let q = &v["query"];
        if let Some(e) = q.as_str().or_else(|| q["query"].as_str()) {
            out.push(e.to_string());
        }
    }
    out
}

/// The exporter's metric names (no `:`) the rules file and the dashboard read, and the
/// recording rules they read that the rules file does not define.
pub fn served_names(
    rules_text: &str,
    dashboard: &serde_json::Value,
) -> (BTreeSet<String>, BTreeSet<String>) {
    let (exprs, records) = rules(rules_text);
    let mut names = BTreeSet::new();
    let mut undefined = BTreeSet::new();
    for e in exprs.iter().chain(&dashboard_exprs(dashboard)) {
        for n in metric_names(e) {
            if n.contains(':') {
                if !records.contains(&n) {
                    undefined.insert(n);
                }
            } else {
                names.insert(n);
            }
        }
    }
    (names, undefined)
}
