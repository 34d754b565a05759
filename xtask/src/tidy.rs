//! Tidy checks that run under `cargo test`: the dependency direction of ARCHITECTURE.md (pure
//! crates never pull in an async runtime or an HTTP stack; workspace crates depend only on the
//! crates the table allows), no clock, randomness or I/O calls in the pure cores' sources, a
//! `//!` doc at the top of every library module, and spec citations in comments that name their
//! file (`turns.md §7.4`, never a bare `§7.4` or `E12`; the specs are in `docs/spec/`).

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;
    use std::process::Command;

    use serde_json::Value;

    /// Crates that must stay free of I/O runtimes, with their allowed workspace dependencies.
    const PURE: [(&str, &[&str]); 6] = [
        ("canon-wire", &[]),
        (
            "canon-host",
            &[
                "canon-wire",
                "canon-chunking",
                "canon-dispatch",
                "canon-cards",
                "canon-inbox",
            ],
        ),
        ("canon-inbox", &[]),
        ("canon-cards", &[]),
        ("canon-chunking", &[]),
        ("canon-dispatch", &["canon-chunking"]),
    ];

    /// Allowed workspace dependencies of the other crates (ARCHITECTURE.md).
    const OTHERS: [(&str, &[&str]); 8] = [
        ("canon-approvals", &[]),
        // The coms Hermes bridge is its own product: it talks to no Canon crate.
        ("coms-hermes-bridge", &[]),
        ("canon-profiles", &["canon-wire"]),
        ("canon-transport", &["canon-wire"]),
        (
            "canon-adapter",
            &[
                "canon-cards",
                "canon-chunking",
                "canon-dispatch",
                "canon-approvals",
                "canon-inbox",
                "canon-wire",
                "canon-host",
                "canon-transport",
                "canon-profiles",
            ],
        ),
        ("canon-sim", &["canon-dispatch", "canon-cards"]),
        (
            "canon-hermes",
            &[
                "canon-cards",
                "canon-adapter",
                "canon-approvals",
                // `doctor` reads the stream-gap records whose format canon-inbox owns.
                "canon-inbox",
                "canon-sim",
                "canon-wire",
                "canon-host",
                "canon-profiles",
                "canon-transport",
            ],
        ),
        ("xtask", &[]),
    ];

    const FORBIDDEN_IN_PURE: [&str; 5] = ["tokio", "hyper", "hyper-util", "hyper-rustls", "rustls"];

    /// Crates with synchronous file I/O that must not pull in an async runtime or an HTTP stack
    /// either (ARCHITECTURE.md: the resolver leaves the HTTP calls to its callers).
    const SYNC_ONLY: [&str; 1] = ["canon-profiles"];

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
        for krate in PURE.iter().map(|(k, _)| *k).chain(SYNC_ONLY) {
            if !workspace.contains(krate) {
                continue;
            }
            let deps = closure(krate);
            for forbidden in FORBIDDEN_IN_PURE {
                assert!(
                    !deps.contains(forbidden),
                    "{krate} must stay free of async runtimes and HTTP stacks, but pulls in {forbidden}"
                );
            }
        }
    }

    /// The pure cores (canon-wire, canon-host, and the coms bridge's `core` module) read no
    /// clock, draw no randomness and do no I/O of their own: time and random numbers are
    /// parameters (style.md §6.2). `cargo metadata` cannot see a call into
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
        for dir in [
            "crates/wire/src",
            "crates/host/src",
            "crates/inbox/src",
            "crates/coms-bridge/src/core",
        ] {
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

    /// Files that may be cited although they are not markdown files of this repository.
    const CITABLE_OUTSIDE_THE_REPO: [&str; 1] = ["style.md"];

    /// Every section reference (turns.md §7.4) and every spec row label (turns.md §7.3 E12,
    /// canon-wire.md §3 T14, turns.md OQ-5, runtime-control.md Q8) in a comment or docstring
    /// names its spec file earlier on the same line, and every file a comment names exists: a
    /// maintainer with only this repository must be able to resolve each citation. Labels are
    /// only looked for in comment text, so a type parameter named like one or a string literal
    /// never matches.
    #[test]
    fn spec_citations_name_their_file() {
        let root = crate::project_root();
        let mut known: BTreeSet<String> = CITABLE_OUTSIDE_THE_REPO
            .iter()
            .map(|name| (*name).to_owned())
            .collect();
        walk(&root, &mut |path| {
            if path.extension().is_some_and(|e| e == "md") {
                if let Some(name) = path.file_name().and_then(|n| n.to_str()) {
                    known.insert(name.to_owned());
                }
            }
        });
        assert!(
            known.contains("turns.md"),
            "docs/spec/ must hold the design specifications"
        );
        let mut bare = Vec::new();
        let mut unknown = Vec::new();
        each_comment_line(&root, &mut |shown, line, quoted, comment| {
            let citation = citations(comment);
            let named_before = |at: &usize| citation.files.iter().any(|(f, _)| f < at);
            if !citation.cited.iter().all(named_before) {
                bare.push(format!("{shown}:{line}: {quoted}"));
            }
            for (_, file) in &citation.files {
                if !known.contains(file) {
                    unknown.push(format!("{shown}:{line}: {quoted} (no file {file})"));
                }
            }
        });
        let mut problems = Vec::new();
        if !bare.is_empty() {
            problems.push(format!(
                "{} comment lines cite a spec section or row label without naming the spec file \
                 before it on the same line. Name the file (docs/spec/<name>.md) before the \
                 citation: `§7.4` → `turns.md §7.4`, `(§2.5, §2.7)` → `(canon-wire.md §2.5, \
                 §2.7)`; say a row label in words with its citation: `E12` → `processing \
                 complete (turns.md §7.3 E12)`, `T14` → `POST /runtime-interaction/request \
                 (canon-wire.md §4.12)`, `Q8` → `runtime-control.md Q8` (each spec numbers its \
                 own open questions). When a wrapped comment puts the file at the end of one line \
                 and the section on the next, move the file down.\n{}",
                bare.len(),
                bare.join("\n")
            ));
        }
        if !unknown.is_empty() {
            problems.push(format!(
                "{} comment lines name a file that is neither a markdown file of this repository \
                 (docs/spec/*.md, ARCHITECTURE.md, README.md, …) nor one of \
                 {CITABLE_OUTSIDE_THE_REPO:?}; fix the name, or vendor the document into \
                 docs/spec/:\n{}",
                unknown.len(),
                unknown.join("\n")
            ));
        }
        assert!(problems.is_empty(), "{}", problems.join("\n\n"));
    }

    /// Calls `each` with every comment line of the Rust and Python sources under `crates/` and
    /// `xtask/`: the file's path from the root, the line number, the source line trimmed, and
    /// the line's comment text.
    fn each_comment_line(root: &Path, each: &mut dyn FnMut(&str, usize, &str, &str)) {
        for dir in ["crates", "xtask"] {
            walk(&root.join(dir), &mut |path| {
                let python = match path.extension().and_then(|e| e.to_str()) {
                    Some("rs") => false,
                    Some("py") => true,
                    _ => return,
                };
                let relative = path.strip_prefix(root).unwrap_or(path);
                let shown = relative.display().to_string().replace('\\', "/");
                let text = std::fs::read_to_string(path).unwrap_or_default();
                let source: Vec<&str> = text.lines().collect();
                for (line, comment) in comment_text(&text, python) {
                    let quoted = source.get(line - 1).map_or("", |l| l.trim());
                    each(&shown, line, quoted, &comment);
                }
            });
        }
    }

    /// Comments stand on their own for a maintainer with only this repository: they say the
    /// rule, or cite a document of the repository by file name, never a tracker's issue number
    /// or a review's finding id (neither travels with the code).
    #[test]
    fn comments_cite_no_issue_number_or_review_finding() {
        let root = crate::project_root();
        let mut found = Vec::new();
        each_comment_line(&root, &mut |shown, line, _, comment| {
            if cites_a_tracker(comment) {
                found.push(format!("{shown}:{line}: {}", comment.trim()));
            }
        });
        assert!(
            found.is_empty(),
            "{} comment lines cite an issue number or a review finding id; say the rule or the \
             behaviour instead (or cite a document of the repository by file name):\n{}",
            found.len(),
            found.join("\n")
        );
    }

    /// Whether comment text cites an issue by number (the word, then a number, with or without
    /// `#`) or a review finding by id (the word review, then H, M, L or N and a number).
    fn cites_a_tracker(comment: &str) -> bool {
        let lower = comment.to_lowercase();
        let after = |word: &str| -> Vec<String> {
            lower
                .match_indices(word)
                .map(|(at, _)| lower[at + word.len()..].trim_start_matches('#').to_owned())
                .collect()
        };
        let issue = after("issue ")
            .iter()
            .any(|rest| rest.starts_with(|c: char| c.is_ascii_digit()));
        let review = after("review ").iter().any(|rest| {
            let mut chars = rest.chars();
            matches!(chars.next(), Some('h' | 'm' | 'l' | 'n'))
                && chars.next().is_some_and(|c| c.is_ascii_digit())
        });
        issue || review
    }

    #[test]
    fn tracker_citations_are_recognised_in_comment_text() {
        for cited in [
            "see issue 16",
            "Issue #42 found it",
            "(reliability review M4)",
            "review L11: private",
        ] {
            assert!(cites_a_tracker(cited), "{cited}");
        }
        for clean in [
            "the issue is the lock",
            "review the cards",
            "turns.md §7.3 E12",
            "a review of H2 frames",
        ] {
            assert!(!cites_a_tracker(clean), "{clean}");
        }
    }

    #[test]
    fn citation_scanner_reads_comments_only() {
        let rust = "fn f<T1>(x: T1) -> &'static str { \"// §7.4 E12\" }\n\
                    let c = '\"'; // see §7.4 and E12\n\
                    /* turns.md §7.3 E1 */ let r = r#\"§1 T2\"#;\n\
                    /// `POST /typing` (canon-wire.md §4.5), not `Type7` or T7x, but OQ-3 and Q7b.\n";
        let comments = comment_text(rust, false);
        let lines: Vec<usize> = comments.iter().map(|(line, _)| *line).collect();
        assert_eq!(lines, [2, 3, 4]);
        let second = citations(&comments[0].1);
        assert_eq!(second.cited.len(), 2);
        assert!(second.files.is_empty());
        let third = citations(&comments[1].1);
        assert_eq!(third.cited.len(), 2);
        assert_eq!(third.files.len(), 1);
        let fourth = citations(&comments[2].1);
        assert_eq!(
            fourth.cited.len(),
            3,
            "§4.5, OQ-3 and Q7b; `Type7` and T7x are words"
        );
        assert_eq!(fourth.files[0].1, "canon-wire.md");

        let python = "x = '# §1'\n\
                      def f():\n    \"\"\"The seam (hermes-host.md §12.3):\n    E12 on its own.\"\"\"\n\
                      y = \"\"\"§2 is data, not a docstring\"\"\"  # Q8\n";
        let comments = comment_text(python, true);
        let lines: Vec<usize> = comments.iter().map(|(line, _)| *line).collect();
        assert_eq!(lines, [3, 4, 5]);
        assert!(!citations(&comments[0].1).files.is_empty());
        assert_eq!(citations(&comments[1].1).cited.len(), 1);
        assert_eq!(citations(&comments[2].1).cited.len(), 1);
    }

    /// What a comment line cites: the positions of its section signs and row labels, and the
    /// spec files it names (position, file name without directories).
    struct Citations {
        cited: Vec<usize>,
        files: Vec<(usize, String)>,
    }

    fn citations(comment: &str) -> Citations {
        let chars: Vec<char> = comment.chars().collect();
        let word = |i: usize| {
            chars
                .get(i)
                .is_some_and(|c| c.is_alphanumeric() || *c == '_')
        };
        let digits = |from: usize| {
            chars[from..]
                .iter()
                .take_while(|c| c.is_ascii_digit())
                .count()
        };
        let mut cited = Vec::new();
        let mut files = Vec::new();
        for i in 0..chars.len() {
            if chars[i] == '§' {
                cited.push(i);
                continue;
            }
            // `<name>.md` followed by a non-word character: walk back over the name.
            if chars[i] == '.'
                && chars.get(i + 1) == Some(&'m')
                && chars.get(i + 2) == Some(&'d')
                && !word(i + 3)
                && i > 0
                && word(i - 1)
            {
                let mut start = i;
                while start > 0 && (word(start - 1) || matches!(chars[start - 1], '-' | '.')) {
                    start -= 1;
                }
                files.push((start, chars[start..i + 3].iter().collect()));
                continue;
            }
            // Row labels, on word boundaries: `E`, `T` or `Q` and one or two digits (`Q` also with
            // a lowercase letter), or `OQ-` and digits.
            if i > 0 && word(i - 1) {
                continue;
            }
            let end = match chars[i] {
                'E' | 'T' => {
                    let n = digits(i + 1);
                    (1..=2).contains(&n).then_some(i + 1 + n)
                }
                'Q' => {
                    let n = digits(i + 1);
                    (1..=2).contains(&n).then(|| {
                        let after = i + 1 + n;
                        let letter = chars.get(after).is_some_and(char::is_ascii_lowercase);
                        if letter && !word(after + 1) {
                            after + 1
                        } else {
                            after
                        }
                    })
                }
                'O' if chars.get(i + 1) == Some(&'Q') && chars.get(i + 2) == Some(&'-') => {
                    let n = digits(i + 3);
                    (n > 0).then_some(i + 3 + n)
                }
                _ => None,
            };
            if end.is_some_and(|end| !word(end)) {
                cited.push(i);
            }
        }
        Citations { cited, files }
    }

    /// The comment text of `text`, per line number (1-based): everything after `//` or inside
    /// `/* */` for Rust, everything after `#` and inside docstrings (a triple-quoted string that
    /// opens a line) for Python. String and character literals are skipped.
    fn comment_text(text: &str, python: bool) -> Vec<(usize, String)> {
        let chars: Vec<char> = text.chars().collect();
        let mut out: BTreeMap<usize, String> = BTreeMap::new();
        let mut add = |line: usize, piece: &[char]| {
            let entry = out.entry(line).or_default();
            entry.push(' ');
            entry.extend(piece);
        };
        let ident = |i: usize| chars[i].is_alphanumeric() || chars[i] == '_';
        let (mut i, mut line) = (0, 1);
        // Skips a literal from `from` to its `close`, counting lines; returns the index after it.
        // `raw`: backslashes escape nothing; `single_line`: a newline ends the literal too.
        let skip = |from: usize, close: &[char], line: &mut usize, raw: bool, single_line: bool| {
            let mut j = from;
            while j < chars.len() && !chars[j..].starts_with(close) {
                if chars[j] == '\\' && !raw && j + 1 < chars.len() {
                    j += 1;
                }
                if chars[j] == '\n' {
                    if single_line {
                        return j;
                    }
                    *line += 1;
                }
                j += 1;
            }
            (j + close.len()).min(chars.len())
        };
        while i < chars.len() {
            let c = chars[i];
            let rest = &chars[i..];
            if c == '\n' {
                line += 1;
                i += 1;
            } else if (!python && rest.starts_with(&['/', '/'])) || (python && c == '#') {
                let end = rest
                    .iter()
                    .position(|&c| c == '\n')
                    .map_or(chars.len(), |n| i + n);
                add(line, &chars[i..end]);
                i = end;
            } else if !python && rest.starts_with(&['/', '*']) {
                let (mut depth, mut start) = (0, i);
                while i < chars.len() {
                    if chars[i..].starts_with(&['/', '*']) {
                        depth += 1;
                        i += 2;
                    } else if chars[i..].starts_with(&['*', '/']) {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        if chars[i] == '\n' {
                            add(line, &chars[start..i]);
                            line += 1;
                            start = i + 1;
                        }
                        i += 1;
                    }
                }
                add(line, &chars[start..i]);
            } else if python && (c == '"' || c == '\'') {
                let triple = rest.starts_with(&[c, c, c]);
                let line_start = chars[..i]
                    .iter()
                    .rposition(|&c| c == '\n')
                    .map_or(0, |n| n + 1);
                let before: String = chars[line_start..i].iter().collect();
                let prefix = before.trim_start().trim_start_matches(['r', 'R', 'u', 'U']);
                let close = [c; 3];
                if triple && prefix.is_empty() {
                    let open = line;
                    let end = skip(i + 3, &close, &mut line, false, false);
                    let body = &chars[i + 3..end.saturating_sub(3).max(i + 3)];
                    for (k, piece) in body.split(|&c| c == '\n').enumerate() {
                        add(open + k, piece);
                    }
                    i = end;
                } else if triple {
                    i = skip(i + 3, &close, &mut line, false, false);
                } else {
                    i = skip(i + 1, &close[..1], &mut line, false, true);
                }
            } else if !python && c == '"' {
                i = skip(i + 1, &['"'], &mut line, false, false);
            } else if !python
                && c == 'r'
                && (i == 0 || !ident(i - 1) || (chars[i - 1] == 'b' && (i < 2 || !ident(i - 2))))
                && rest[1..].iter().find(|&&c| c != '#') == Some(&'"')
            {
                let hashes = rest[1..].iter().take_while(|&&c| c == '#').count();
                let mut close = vec!['"'];
                close.extend(std::iter::repeat_n('#', hashes));
                i = skip(i + 2 + hashes, &close, &mut line, true, false);
            } else if !python && c == '\'' {
                // A character literal ('x', '\n', '\u{1F600}') or a lifetime ('a).
                if chars.get(i + 1) == Some(&'\\') {
                    i = skip(i + 3, &['\''], &mut line, false, true);
                } else if chars.get(i + 2) == Some(&'\'') {
                    i += 3;
                } else {
                    i += 1;
                }
            } else {
                i += 1;
            }
        }
        out.into_iter().collect()
    }

    fn walk(dir: &Path, visit: &mut dyn FnMut(&Path)) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                let name = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or_default();
                if name == "target" || name.starts_with('.') {
                    continue;
                }
                walk(&path, visit);
            } else {
                visit(&path);
            }
        }
    }
}
