//! The generator: loads `fixtures/rich-cards/registry.json` once, renders every artifact in
//! memory (the registry's, and the packaged environments of `environments.rs`), then writes them
//! (write mode) or compares them with the committed files (check mode). Rendering is
//! byte-deterministic: no timestamps, LF only, stable ordering, and the registry's SHA-256 in
//! every header of a registry artifact whose format allows one.

mod environments;
mod fixtures;
mod skill;
mod vocab;

use std::{
    fs,
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::Context;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The registry, relative to the workspace root.
pub(crate) const REGISTRY_PATH: &str = "fixtures/rich-cards/registry.json";

/// Whether the generator writes its outputs or only compares them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Mode {
    Write,
    Check,
}

/// The parsed registry plus its hash, shared by every generator.
pub(crate) struct Registry {
    pub(crate) root: Value,
    pub(crate) sha256: String,
}

impl Registry {
    pub(crate) fn load(project_root: &Path) -> anyhow::Result<Registry> {
        let path = project_root.join(REGISTRY_PATH);
        let bytes = fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let root: Value = serde_json::from_slice(&bytes)
            .with_context(|| format!("parsing {}", path.display()))?;
        let sha256 = hex(&Sha256::digest(&bytes));
        Ok(Registry { root, sha256 })
    }

    /// The value at a `/`-separated JSON pointer, or an error naming the pointer.
    pub(crate) fn at(&self, pointer: &str) -> anyhow::Result<&Value> {
        self.root
            .pointer(pointer)
            .with_context(|| format!("registry has no {pointer}"))
    }

    pub(crate) fn str_at(&self, pointer: &str) -> anyhow::Result<&str> {
        self.at(pointer)?
            .as_str()
            .with_context(|| format!("registry {pointer} is not a string"))
    }

    pub(crate) fn u64_at(&self, pointer: &str) -> anyhow::Result<u64> {
        self.at(pointer)?
            .as_u64()
            .with_context(|| format!("registry {pointer} is not a non-negative integer"))
    }

    pub(crate) fn str_list_at(&self, pointer: &str) -> anyhow::Result<Vec<String>> {
        let list = self
            .at(pointer)?
            .as_array()
            .with_context(|| format!("registry {pointer} is not an array"))?;
        list.iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .with_context(|| format!("registry {pointer} holds a non-string"))
            })
            .collect()
    }

    pub(crate) fn object_at(
        &self,
        pointer: &str,
    ) -> anyhow::Result<&serde_json::Map<String, Value>> {
        self.at(pointer)?
            .as_object()
            .with_context(|| format!("registry {pointer} is not an object"))
    }

    /// A runtime limit by its registry name (`limits.runtime.<name>`).
    pub(crate) fn limit(&self, name: &str) -> anyhow::Result<u64> {
        self.u64_at(&format!("/limits/runtime/{name}"))
    }
}

/// One generated file: where it goes and its full text.
pub(crate) struct Artifact {
    pub(crate) path: PathBuf,
    pub(crate) text: String,
}

pub(crate) fn run(project_root: &Path, mode: Mode) -> anyhow::Result<()> {
    let registry = Registry::load(project_root)?;
    let mut artifacts = vec![vocab::generate(&registry)?];
    let skill = skill::generate(project_root, &registry)?;
    let fixture_set = fixtures::generate(&registry, &skill.examples)?;
    artifacts.push(skill.artifact);
    artifacts.push(fixture_set);
    artifacts.push(environments::generate()?);

    let mut stale = Vec::new();
    for artifact in &artifacts {
        let path = project_root.join(&artifact.path);
        let current = fs::read(&path).ok();
        if current.as_deref() == Some(artifact.text.as_bytes()) {
            continue;
        }
        match mode {
            Mode::Write => {
                if let Some(parent) = path.parent() {
                    fs::create_dir_all(parent)
                        .with_context(|| format!("creating {}", parent.display()))?;
                }
                fs::write(&path, &artifact.text)
                    .with_context(|| format!("writing {}", path.display()))?;
                eprintln!("updated {}", artifact.path.display());
            }
            Mode::Check => stale.push(artifact.path.display().to_string()),
        }
    }
    if !stale.is_empty() {
        anyhow::bail!(
            "generated files are stale: {}; run `cargo xtask codegen` and commit the result",
            stale.join(", ")
        );
    }
    Ok(())
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// Formats Rust source with the toolchain's rustfmt so the committed file is byte-stable under
/// `cargo fmt --check`.
pub(crate) fn rustfmt(source: &str) -> anyhow::Result<String> {
    let mut child = Command::new("rustfmt")
        .args(["--edition", "2021", "--emit", "stdout", "--quiet"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running rustfmt (install it with `rustup component add rustfmt`)")?;
    child
        .stdin
        .take()
        .context("rustfmt stdin")?
        .write_all(source.as_bytes())
        .context("feeding rustfmt")?;
    let output = child.wait_with_output().context("waiting for rustfmt")?;
    if !output.status.success() {
        anyhow::bail!(
            "rustfmt rejected the generated code: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    String::from_utf8(output.stdout).context("rustfmt printed non-UTF-8")
}

/// camelCase or kebab-case to SCREAMING_SNAKE_CASE.
pub(crate) fn screaming_snake(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c == '-' || c == '.' {
            out.push('_');
        } else if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c);
        } else {
            out.push(c.to_ascii_uppercase());
        }
    }
    out
}

/// camelCase to snake_case.
pub(crate) fn snake(name: &str) -> String {
    screaming_snake(name).to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stale generated files fail `cargo test --workspace`, not only `cargo xtask codegen --check`.
    #[test]
    fn generated_files_are_fresh() {
        let root = crate::project_root();
        if let Err(error) = run(&root, Mode::Check) {
            panic!("{error:#}");
        }
    }

    #[test]
    fn case_conversions() {
        assert_eq!(screaming_snake("lineItemColumns"), "LINE_ITEM_COLUMNS");
        assert_eq!(snake("searchSelectChoices"), "search_select_choices");
        assert_eq!(screaming_snake("card"), "CARD");
    }
}
