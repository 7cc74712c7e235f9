//! The shape of the code, checked on its text (issue 27): the top-level modules of tools/
//! and vm/ import each other in no cycle (`crate::` paths outside comments and test
//! modules), and no function of tools/src or vm/src outside tests is over 120 lines.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// A file's text before its first `#[cfg(test)]`, without comment lines.
fn code(p: &Path) -> String {
    let t = std::fs::read_to_string(p).unwrap();
    let t = t.split("#[cfg(test)]").next().unwrap_or_default();
    t.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Top-level module -> the top-level modules it names through `crate::`.
fn imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let top = |p: &Path| -> Option<String> {
        let rel = p.strip_prefix(src).ok()?;
        let first = rel.components().next()?.as_os_str().to_str()?;
        let name = first.trim_end_matches(".rs").to_string();
        (!matches!(name.as_str(), "lib" | "main" | "bin")).then_some(name)
    };
    let modules: BTreeSet<String> = files.iter().filter_map(|p| top(p)).collect();
    let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in &files {
        let Some(from) = top(p) else { continue };
        let text = code(p);
        for (i, _) in text.match_indices("crate::") {
            let to: String = text[i + 7..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if to != from && modules.contains(&to) {
                deps.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    deps
}

/// Some cycle of `deps`, as the modules on it.
fn a_cycle(deps: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn walk(
        m: &str,
        deps: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|x| x == m) {
            return Some(path[i..].to_vec());
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for n in deps.get(m).into_iter().flatten() {
            if let Some(c) = walk(n, deps, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    deps.keys()
        .find_map(|m| walk(m, deps, &mut Vec::new(), &mut done))
}

#[test]
fn modules_import_each_other_in_no_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for src in [root.join("src"), root.join("../vm/src")] {
        let deps = imports(&src);
        assert!(!deps.is_empty(), "no imports read in {}", src.display());
        assert_eq!(a_cycle(&deps), None, "{}", src.display());
    }
    // The check finds a cycle where there is one.
    let mut deps = BTreeMap::new();
    deps.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    deps.insert("b".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(a_cycle(&deps), Some(vec!["a".to_string(), "b".to_string()]));
}

#[test]
fn no_function_of_tools_or_vm_is_over_120_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    rust_files(&root.join("../vm/src"), &mut files);
    let mut long = Vec::new();
    for p in files {
        let text = std::fs::read_to_string(&p).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            if l.trim_start().starts_with("mod tests") {
                break;
            }
            let t = l.trim_start();
            let is_fn = ["fn ", "pub fn ", "pub(crate) fn ", "pub(super) fn "]
                .iter()
                .any(|k| t.starts_with(k))
                && !t.ends_with(';');
            if !is_fn {
                continue;
            }
            let indent = &l[..l.len() - t.len()];
            let close = format!("{indent}}}");
            if let Some(end) = lines[i + 1..].iter().position(|x| *x == close) {
                let n = end + 2;
                if n > 120 {
                    long.push(format!("{}:{} {n} lines", p.display(), i + 1));
                }
            }
        }
    }
    assert!(long.is_empty(), "functions over 120 lines: {long:#?}");
}
