//! Validation of drmtool's JSON against its schemas in tools/schema, for the guest tests
//! that run drmtool (`mod schema_common;`).

use serde_json::Value;

/// Asserts that `v` (the output of `what`) validates against `tools/schema/<schema>`.
pub fn validate(v: &Value, schema: &str, what: &str) {
    let p = format!("{}/../tools/schema/{schema}", env!("CARGO_MANIFEST_DIR"));
    let s: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    let val = jsonschema::validator_for(&s).expect("valid schema");
    let errors: Vec<String> = val
        .iter_errors(v)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{what} vs {schema}: {errors:#?}\n{v:#}");
}
