//! Renders `crates/profiles/src/runtime-endpoint-defaults.json`, the packaged Canon environments
//! that canon-profiles embeds (cli.md §5.2), from [`ENVIRONMENTS`], the one checked-in source.
//!
//! Why a table here: the backend-contracts package (`dist/environment.js` of 8.6.1, fetched by
//! `cargo xtask sync-contracts`) names the environments with their project and region but holds
//! no endpoint (API, stream, RTDB URL, Firebase web key), so it cannot be the source. The table
//! copies the reference facts of the cli.md §5.2 table (canon-hermes-plugin 0.14.1's file); one
//! test checks it against that table, another its ids, projects and regions against the
//! contracts package.
//!
//! JSON has no comments, so the file carries no generated-by header; like the card parity
//! fixtures it is listed as generated in README.md and ARCHITECTURE.md, and
//! `cargo xtask codegen --check` (which `cargo test` runs) fails when it differs. The layout is
//! the committed one: keys sorted, two-space indent, a final line break.

use std::path::PathBuf;

use serde_json::{Map, Value};

use super::Artifact;

/// Where the file goes, relative to the workspace root.
pub(crate) const OUTPUT: &str = "crates/profiles/src/runtime-endpoint-defaults.json";

/// The environment setup offers first (cli.md §5.2 `defaultEnvironmentId`).
pub(crate) const DEFAULT_ENVIRONMENT_ID: &str = "canon-prod-v1";

/// One packaged environment, with the field names of the file.
pub(crate) struct PackagedEnvironment {
    pub(crate) id: &'static str,
    pub(crate) project_id: &'static str,
    pub(crate) region: &'static str,
    pub(crate) api_base_url: &'static str,
    pub(crate) stream_url: &'static str,
    pub(crate) rtdb_url: &'static str,
    pub(crate) firebase_web_api_key: &'static str,
}

/// The packaged environments (cli.md §5.2 table), in id order.
pub(crate) const ENVIRONMENTS: [PackagedEnvironment; 2] = [
    PackagedEnvironment {
        id: "canon-dev-v1",
        project_id: "canonmail-dev",
        region: "europe-west1",
        api_base_url: "https://dev.api.canonmail.com",
        stream_url: "https://dev.stream.canonmail.com",
        rtdb_url: "https://canonmail-dev-default-rtdb.europe-west1.firebasedatabase.app",
        firebase_web_api_key: "AIzaSyA9i7PpZ-93CWmojEn5Ez9t8tboc5-1ELc",
    },
    PackagedEnvironment {
        id: "canon-prod-v1",
        project_id: "canonmail-prod",
        region: "europe-west1",
        api_base_url: "https://api.canonmail.com",
        stream_url: "https://stream.canonmail.com",
        rtdb_url: "https://canonmail-prod-default-rtdb.europe-west1.firebasedatabase.app",
        firebase_web_api_key: "AIzaSyDnX6AERXfdtZxf7qM9JjyMmYxF_ovPL78",
    },
];

/// The file's text.
pub(crate) fn generate() -> anyhow::Result<Artifact> {
    let mut environments = Map::new();
    let mut ids: Vec<&PackagedEnvironment> = ENVIRONMENTS.iter().collect();
    ids.sort_by_key(|e| e.id);
    for environment in ids {
        // Inserted in key order: serde_json keeps insertion order (`preserve_order`).
        let fields = [
            ("apiBaseUrl", environment.api_base_url),
            ("firebaseWebApiKey", environment.firebase_web_api_key),
            ("projectId", environment.project_id),
            ("region", environment.region),
            ("rtdbUrl", environment.rtdb_url),
            ("streamUrl", environment.stream_url),
        ];
        let entry: Map<String, Value> = fields
            .into_iter()
            .map(|(key, value)| (key.to_owned(), Value::String(value.to_owned())))
            .collect();
        environments.insert(environment.id.to_owned(), Value::Object(entry));
    }
    if !environments.contains_key(DEFAULT_ENVIRONMENT_ID) {
        anyhow::bail!("the default environment {DEFAULT_ENVIRONMENT_ID} is not packaged");
    }
    let mut root = Map::new();
    root.insert(
        "defaultEnvironmentId".to_owned(),
        Value::String(DEFAULT_ENVIRONMENT_ID.to_owned()),
    );
    root.insert("environments".to_owned(), Value::Object(environments));
    let mut text = serde_json::to_string_pretty(&Value::Object(root))?;
    text.push('\n');
    Ok(Artifact {
        path: PathBuf::from(OUTPUT),
        text,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// The rows of the cli.md §5.2 table, cells without their backticks.
    fn spec_rows() -> Vec<Vec<String>> {
        let path = crate::project_root().join("docs/spec/cli.md");
        let text = std::fs::read_to_string(&path).expect("docs/spec/cli.md");
        let section = text
            .split("### 5.2 ")
            .nth(1)
            .and_then(|rest| rest.split("### 5.3 ").next())
            .expect("cli.md has §5.2 before §5.3");
        assert!(
            section.contains(&format!(
                "`defaultEnvironmentId` = `{DEFAULT_ENVIRONMENT_ID}`"
            )),
            "cli.md §5.2 names the default environment"
        );
        section
            .lines()
            .filter(|line| line.starts_with("| `"))
            .map(|line| {
                line.trim_matches('|')
                    .split('|')
                    .map(|cell| cell.trim().trim_matches('`').to_owned())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn the_table_is_the_cli_spec_table() {
        let ours: Vec<Vec<String>> = ENVIRONMENTS
            .iter()
            .map(|e| {
                [
                    e.id,
                    e.project_id,
                    e.region,
                    e.api_base_url,
                    e.stream_url,
                    e.rtdb_url,
                    e.firebase_web_api_key,
                ]
                .map(str::to_owned)
                .to_vec()
            })
            .collect();
        let mut spec = spec_rows();
        spec.sort();
        assert_eq!(ours, spec);
    }

    /// `CANON_ENVIRONMENT_CONTRACTS` of the contracts package's `dist/environment.js`: id →
    /// (projectId, region). The file is plain data in a fixed layout: `'<id>': Object.freeze({`
    /// lines, then `key: 'value',` lines.
    fn contract_environments() -> BTreeMap<String, (String, String)> {
        let path = crate::sync_contracts::cache_dir(&crate::project_root())
            .join("package/dist/environment.js");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|error| {
            panic!(
                "{}: {error}; run `cargo xtask sync-contracts` to fetch \
                 @canonmsg/backend-contracts@8.6.1 into .cache/contracts/",
                path.display()
            )
        });
        let block = text
            .split("CANON_ENVIRONMENT_CONTRACTS = Object.freeze({")
            .nth(1)
            .and_then(|rest| rest.split("\n});").next())
            .expect("environment.js defines CANON_ENVIRONMENT_CONTRACTS");
        let quoted = |s: &str| s.trim().trim_end_matches(',').trim_matches('\'').to_owned();
        let mut out = BTreeMap::new();
        let mut current: Option<(String, BTreeMap<String, String>)> = None;
        for line in block.lines().map(str::trim) {
            if let Some(id) = line.strip_suffix(": Object.freeze({") {
                current = Some((quoted(id), BTreeMap::new()));
            } else if line.starts_with("})") {
                if let Some((id, fields)) = current.take() {
                    let field = |k: &str| fields.get(k).cloned().unwrap_or_default();
                    out.insert(id, (field("projectId"), field("region")));
                }
            } else if let (Some((_, fields)), Some((key, value))) =
                (current.as_mut(), line.split_once(':'))
            {
                fields.insert(key.trim().to_owned(), quoted(value));
            }
        }
        out
    }

    #[test]
    fn the_table_agrees_with_the_contracts_package() {
        let ours: BTreeMap<String, (String, String)> = ENVIRONMENTS
            .iter()
            .map(|e| {
                (
                    e.id.to_owned(),
                    (e.project_id.to_owned(), e.region.to_owned()),
                )
            })
            .collect();
        assert_eq!(ours, contract_environments());
    }

    #[test]
    fn the_file_is_sorted_pretty_json_with_a_final_line_break() {
        let artifact = generate().expect("renders");
        let value: Value = serde_json::from_str(&artifact.text).expect("JSON");
        assert_eq!(value["defaultEnvironmentId"], DEFAULT_ENVIRONMENT_ID);
        assert_eq!(
            value["environments"]["canon-dev-v1"]["projectId"],
            "canonmail-dev"
        );
        assert!(artifact.text.ends_with("}\n"));
        assert!(artifact.text.starts_with("{\n  \"defaultEnvironmentId\""));
    }
}
