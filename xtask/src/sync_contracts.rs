//! `cargo xtask sync-contracts`: fetches `@canonmsg/backend-contracts@8.6.1` with `npm pack`
//! into the ignored cache `.cache/contracts/backend-contracts-8.6.1/` (the package states no
//! license, so it is never committed). canon-sim's contract-conformance tests read
//! `canon-verb-wire.schema.json` and `canon-verbs.schema.json` from there, and xtask's own test of
//! the packaged environments reads `environment.js`.
//!
//! The tarball's SHA-256 is pinned, so a changed package fails loudly instead of silently
//! moving the contract under the tests. A cache that already holds the pinned version is left
//! alone (no network).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};
use sha2::{Digest, Sha256};

/// The npm package spec.
const PACKAGE: &str = "@canonmsg/backend-contracts@8.6.1";
/// The tarball `npm pack` writes.
const TARBALL: &str = "canonmsg-backend-contracts-8.6.1.tgz";
/// SHA-256 of the published 8.6.1 tarball.
const TARBALL_SHA256: &str = "fc5f12b60044e3949e11fa27bc864b568c093ff392fd7ae2117405792cdf5cd8";
/// Files the tests need, relative to the unpacked `package/`.
const REQUIRED: [&str; 4] = [
    "package.json",
    "dist/canon-verb-wire.schema.json",
    "dist/canon-verbs.schema.json",
    "dist/environment.js",
];

/// Where the package is unpacked (`<dir>/package/...`).
pub(crate) fn cache_dir(root: &Path) -> PathBuf {
    root.join(".cache/contracts/backend-contracts-8.6.1")
}

fn is_complete(dir: &Path) -> bool {
    let package = dir.join("package");
    REQUIRED.iter().all(|f| package.join(f).is_file())
        && std::fs::read_to_string(package.join("package.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .is_some_and(|v| v["version"] == "8.6.1" && v["name"] == "@canonmsg/backend-contracts")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Runs the sync.
pub(crate) fn run(root: &Path) -> anyhow::Result<()> {
    let target = cache_dir(root);
    if is_complete(&target) {
        println!("contracts: {PACKAGE} already in {}", target.display());
        return Ok(());
    }
    let parent = target
        .parent()
        .context("cache dir has a parent")?
        .to_path_buf();
    let staging = parent.join(format!("staging-{}", std::process::id()));
    if staging.exists() {
        std::fs::remove_dir_all(&staging)
            .with_context(|| format!("removing {}", staging.display()))?;
    }
    std::fs::create_dir_all(&staging).with_context(|| format!("creating {}", staging.display()))?;
    let result = fetch_into(&staging).and_then(|()| {
        if target.exists() {
            std::fs::remove_dir_all(&target)
                .with_context(|| format!("removing {}", target.display()))?;
        }
        std::fs::rename(&staging, &target)
            .with_context(|| format!("moving {} to {}", staging.display(), target.display()))
    });
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    result?;
    println!("contracts: {PACKAGE} unpacked into {}", target.display());
    Ok(())
}

fn fetch_into(staging: &Path) -> anyhow::Result<()> {
    let status = Command::new("npm")
        .args(["pack", PACKAGE, "--silent", "--pack-destination"])
        .arg(staging)
        .current_dir(staging)
        .status()
        .context("running `npm pack` (is npm installed?)")?;
    if !status.success() {
        bail!("`npm pack {PACKAGE}` failed with {status}");
    }
    let tarball = staging.join(TARBALL);
    let bytes =
        std::fs::read(&tarball).with_context(|| format!("reading {}", tarball.display()))?;
    let digest = hex(&Sha256::digest(&bytes));
    if digest != TARBALL_SHA256 {
        bail!("{TARBALL} has SHA-256 {digest}, expected {TARBALL_SHA256}");
    }
    let status = Command::new("tar")
        .arg("-xzf")
        .arg(&tarball)
        .arg("-C")
        .arg(staging)
        .status()
        .context("running tar")?;
    if !status.success() {
        bail!("unpacking {TARBALL} failed with {status}");
    }
    std::fs::remove_file(&tarball).with_context(|| format!("removing {}", tarball.display()))?;
    if !is_complete(staging) {
        bail!("{TARBALL} does not contain the expected schema files");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_directory_is_not_a_complete_cache() {
        let dir = std::env::temp_dir().join(format!("xtask-contracts-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("package/dist")).unwrap();
        assert!(!is_complete(&dir));
        std::fs::write(
            dir.join("package/package.json"),
            r#"{"name":"@canonmsg/backend-contracts","version":"8.6.0"}"#,
        )
        .unwrap();
        for f in &REQUIRED[1..] {
            std::fs::write(dir.join("package").join(f), "{}").unwrap();
        }
        assert!(!is_complete(&dir), "wrong version");
        std::fs::write(
            dir.join("package/package.json"),
            r#"{"name":"@canonmsg/backend-contracts","version":"8.6.1"}"#,
        )
        .unwrap();
        assert!(is_complete(&dir));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
