//! Tidy checks that run under `cargo test`: the dependency direction of ARCHITECTURE.md (pure
//! crates never pull in an async runtime or an HTTP stack; workspace crates depend only on the
//! crates the table allows), no clock, randomness or I/O calls in the pure cores' sources, and a
//! `//!` doc at the top of every library module.

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;
    use std::process::Command;

    use serde_json::Value;

    /// Crates that must stay free of I/O runtimes, with their allowed workspace dependencies.
    const PURE: [(&str, &[&str]); 5] = [
        ("canon-wire", &[]),
        (
            "canon-host",
            &["canon-wire", "canon-chunking", "canon-dispatch"],
        ),
        ("canon-cards", &[]),
        ("canon-chunking", &[]),
        ("canon-dispatch", &["canon-chunking"]),
    ];

    /// Allowed workspace dependencies of the other crates (ARCHITECTURE.md).
    const OTHERS: [(&str, &[&str]); 6] = [
        ("canon-approvals", &[]),
        ("canon-transport", &["canon-wire"]),
        (
            "canon-adapter",
            &[
                "canon-cards",
                "canon-chunking",
                "canon-dispatch",
                "canon-approvals",
                "canon-wire",
                "canon-host",
                "canon-transport",
            ],
        ),
        ("canon-sim", &["canon-dispatch", "canon-cards"]),
        (
            "canon-hermes",
            &[
                "canon-cards",
                "canon-adapter",
                "canon-approvals",
                "canon-sim",
                "canon-wire",
                "canon-host",
            ],
        ),
        ("xtask", &[]),
    ];

    const FORBIDDEN_IN_PURE: [&str; 5] = ["tokio", "hyper", "hyper-util", "hyper-rustls", "rustls"];

    fn metadata() -> Value {
        let root = crate::project_root();
        let output = Command::new(env!("CARGO"))
            .args(["metadata", "--format-version", "1"])
            .current_dir(&root)
            .output()
            .expect("cargo metadata runs");
        assert!(
            output.status.success(),
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON")
    }

    #[test]
    fn dependency_direction_holds() {
        let meta = metadata();
        let packages = meta["packages"].as_array().expect("packages");
        let name_of: BTreeMap<&str, &str> = packages
            .iter()
            .filter_map(|p| Some((p["id"].as_str()?, p["name"].as_str()?)))
            .collect();
        let workspace: BTreeSet<&str> = meta["workspace_members"]
            .as_array()
            .expect("workspace_members")
            .iter()
            .filter_map(|id| name_of.get(id.as_str()?).copied())
            .collect();
        // Normal (non-dev, non-build) dependency edges from the resolve graph.
        let mut edges: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for node in meta["resolve"]["nodes"].as_array().expect("resolve nodes") {
            let Some(from) = node["id"].as_str().and_then(|id| name_of.get(id)) else {
                continue;
            };
            for dep in node["deps"].as_array().into_iter().flatten() {
                let normal = dep["dep_kinds"]
                    .as_array()
                    .is_some_and(|kinds| kinds.iter().any(|k| k["kind"].is_null()));
                if let (true, Some(to)) =
                    (normal, dep["pkg"].as_str().and_then(|id| name_of.get(id)))
                {
                    edges.entry(from).or_default().push(to);
                }
            }
        }
        let closure = |start: &str| -> BTreeSet<String> {
            let mut seen = BTreeSet::new();
            let mut stack = vec![start.to_owned()];
            while let Some(n) = stack.pop() {
                for next in edges.get(n.as_str()).into_iter().flatten() {
                    if seen.insert((*next).to_owned()) {
                        stack.push((*next).to_owned());
                    }
                }
            }
            seen
        };
        for (krate, allowed) in PURE.iter().chain(OTHERS.iter()) {
            if !workspace.contains(krate) {
                continue;
            }
            for dep in edges.get(krate).into_iter().flatten() {
                if workspace.contains(dep) {
                    assert!(
                        allowed.contains(dep),
                        "{krate} may not depend on {dep} (ARCHITECTURE.md)"
                    );
                }
            }
        }
        for (krate, _) in PURE {
            if !workspace.contains(krate) {
                continue;
            }
            let deps = closure(krate);
            for forbidden in FORBIDDEN_IN_PURE {
                assert!(
                    !deps.contains(forbidden),
                    "pure crate {krate} pulls in {forbidden}"
                );
            }
        }
    }

    /// The pure cores read no clock, draw no randomness and do no I/O of their own: time and
    /// random numbers are parameters (style.md §6.2). `cargo metadata` cannot see a call into
    /// std, so their sources are searched for the calls that would break that. Test modules in
    /// files of their own (`tests.rs`) may read fixtures and are skipped.
    #[test]
    fn pure_cores_read_no_clock_and_do_no_io() {
        const NEEDLES: [&str; 9] = [
            "tokio::",
            "Instant::now",
            "SystemTime::now",
            "RandomState",
            "std::fs",
            "std::net",
            "std::env::var",
            "std::process",
            "std::thread",
        ];
        let root = crate::project_root();
        let mut offenders = Vec::new();
        for dir in ["crates/wire/src", "crates/host/src"] {
            walk(&root.join(dir), &mut |path| {
                let is_test_file = path.file_name().is_some_and(|n| n == "tests.rs");
                if is_test_file || path.extension().is_none_or(|e| e != "rs") {
                    return;
                }
                let text = std::fs::read_to_string(path).unwrap_or_default();
                for needle in NEEDLES {
                    if text.contains(needle) {
                        let relative = path.strip_prefix(&root).unwrap_or(path);
                        offenders.push(format!("{}: {needle}", relative.display()));
                    }
                }
            });
        }
        assert!(
            offenders.is_empty(),
            "the pure cores must stay sans-I/O: {offenders:?}"
        );
    }

    #[test]
    fn every_library_module_opens_with_a_doc_comment() {
        let root = crate::project_root();
        let mut missing = Vec::new();
        for dir in ["crates", "xtask"] {
            walk(&root.join(dir), &mut |path| {
                let in_src = path.components().any(|c| c.as_os_str() == "src");
                if !in_src || path.extension().is_none_or(|e| e != "rs") {
                    return;
                }
                let text = std::fs::read_to_string(path).unwrap_or_default();
                let first_code = text
                    .lines()
                    .find(|l| !l.trim().is_empty() && !l.starts_with("// "));
                if !first_code.is_some_and(|l| l.starts_with("//!")) {
                    missing.push(
                        path.strip_prefix(&root)
                            .unwrap_or(path)
                            .display()
                            .to_string(),
                    );
                }
            });
        }
        assert!(
            missing.is_empty(),
            "modules without a leading //! doc: {missing:?}"
        );
    }

    fn walk(dir: &Path, visit: &mut dyn FnMut(&Path)) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n == "target") {
                    continue;
                }
                walk(&path, visit);
            } else {
                visit(&path);
            }
        }
    }
}
