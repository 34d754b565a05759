//! The managed Hermes environment of `dev`: when no Hermes is found on this machine, `dev`
//! creates a venv holding exactly the audited host (hermes-agent `AUDITED_HERMES` on Python
//! `AUDITED_PYTHON`, cli.md §7.2) under the user's cache directory, once, and reuses it after.
//! A venv counts as ready only after the install finished and was checked, which a marker file
//! records; an interrupted install is removed and started again on the next run.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{anyhow, bail, Context as _};
use canon_host::protocol::{AUDITED_HERMES, AUDITED_PYTHON};

/// The file whose presence says the venv was installed and checked.
const READY_MARKER: &str = ".canon-hermes-ready";

/// Where the managed venv lives: `$XDG_CACHE_HOME/canon-hermes/…`, else `~/.cache/canon-hermes/…`.
pub(crate) fn managed_dir(xdg_cache: Option<&Path>, home: Option<&Path>) -> Option<PathBuf> {
    let cache = xdg_cache
        .filter(|p| p.is_absolute())
        .map(Path::to_path_buf)
        .or_else(|| home.map(|h| h.join(".cache")))?;
    Some(
        cache
            .join("canon-hermes")
            .join(format!("hermes-agent-{AUDITED_HERMES}-py{AUDITED_PYTHON}")),
    )
}

/// The venv's Python when the venv is ready.
pub(crate) fn ready_python(dir: &Path) -> Option<PathBuf> {
    let python = dir.join("bin/python");
    (dir.join(READY_MARKER).is_file() && python.is_file()).then_some(python)
}

/// The first Python `AUDITED_PYTHON` on `PATH`: `python<AUDITED_PYTHON>`, then `python3`.
fn base_python() -> anyhow::Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in [format!("python{AUDITED_PYTHON}"), "python3".to_owned()] {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(&name);
            if !candidate.is_file() {
                continue;
            }
            let version = Command::new(&candidate)
                .args(["-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
                .output();
            if let Ok(out) = version {
                if String::from_utf8_lossy(&out.stdout).trim() == AUDITED_PYTHON {
                    return Ok(candidate);
                }
            }
        }
    }
    bail!(
        "canon-hermes dev needs Python {AUDITED_PYTHON} to create a Hermes environment and found none on PATH; install python{AUDITED_PYTHON}, or pass --python <the Python of an existing hermes-agent {AUDITED_HERMES} venv>"
    )
}

/// Creates the managed venv in `dir` (or finishes an interrupted one), reporting each step
/// through `progress` and pip's output lines through `pip_line`, and returns its Python.
pub(crate) fn create(
    dir: &Path,
    progress: &mut dyn FnMut(&str),
    pip_line: &mut dyn FnMut(&str),
) -> anyhow::Result<PathBuf> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| {
            format!(
                "removing the unfinished Hermes environment {}",
                dir.display()
            )
        })?;
    }
    let base = base_python()?;
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    progress(&format!("creating a venv with {}", base.display()));
    let made = Command::new(&base)
        .args(["-m", "venv"])
        .arg(dir)
        .status()
        .with_context(|| format!("running {} -m venv", base.display()))?;
    if !made.success() {
        bail!(
            "{} -m venv {} failed ({made})",
            base.display(),
            dir.display()
        );
    }
    let python = dir.join("bin/python");
    progress(&format!(
        "installing hermes-agent=={AUDITED_HERMES} from PyPI (about a minute the first time)"
    ));
    let mut pip = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--progress-bar",
            "off",
            &format!("hermes-agent=={AUDITED_HERMES}"),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running pip")?;
    let stderr = pip.stderr.take().context("pip's stderr")?;
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            text.push_str(&line);
            text.push('\n');
        }
        text
    });
    if let Some(stdout) = pip.stdout.take() {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            pip_line(line.trim());
        }
    }
    let status = pip.wait().context("waiting for pip")?;
    let errors = errors.join().unwrap_or_default();
    if !status.success() {
        let tail: Vec<&str> = errors.lines().rev().take(8).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        bail!(
            "installing hermes-agent=={AUDITED_HERMES} into {} failed ({status}):\n{}",
            dir.display(),
            tail.join("\n")
        );
    }
    let version = Command::new(&python)
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('hermes-agent'))",
        ])
        .output()
        .context("checking the installed hermes-agent")?;
    let got = String::from_utf8_lossy(&version.stdout).trim().to_owned();
    if got != AUDITED_HERMES {
        return Err(anyhow!(
            "expected hermes-agent {AUDITED_HERMES} in {}, found '{got}'",
            dir.display()
        ));
    }
    std::fs::write(dir.join(READY_MARKER), format!("hermes-agent {got}\n"))
        .context("marking the Hermes environment ready")?;
    Ok(python)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_managed_venv_lives_in_the_user_cache() {
        let dir = managed_dir(Some(Path::new("/c")), Some(Path::new("/h"))).unwrap();
        assert_eq!(
            dir,
            Path::new("/c/canon-hermes")
                .join(format!("hermes-agent-{AUDITED_HERMES}-py{AUDITED_PYTHON}"))
        );
        // A relative XDG_CACHE_HOME is ignored, as the XDG base-directory rules say.
        let dir = managed_dir(Some(Path::new("rel")), Some(Path::new("/h"))).unwrap();
        assert!(
            dir.starts_with("/h/.cache/canon-hermes"),
            "{}",
            dir.display()
        );
        assert_eq!(managed_dir(None, None), None);
    }

    #[test]
    fn a_venv_without_the_marker_is_not_ready() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("bin")).unwrap();
        std::fs::write(dir.path().join("bin/python"), "").unwrap();
        assert_eq!(ready_python(dir.path()), None);
        std::fs::write(dir.path().join(READY_MARKER), "").unwrap();
        assert_eq!(
            ready_python(dir.path()),
            Some(dir.path().join("bin/python"))
        );
    }
}
