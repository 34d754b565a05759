//! `canon-hermes install` (cli.md §3): put the Canon shim into a Hermes profile and enable it.
//!
//! The steps of cli.md §3.1, in order: locate the profile and the Hermes Python and probe the
//! host (`hermes`); refuse a host outside the audited pair (cli.md §7.2) before writing anything;
//! check the shim directory (no symbolic links, no plugin of another name) and write the shim
//! package, `plugin.yaml`, the rich-cards skill and `manifest.json` (`shim`), each through a
//! temporary file and a rename, leaving files that are already right untouched and removing those
//! a previous manifest listed but this one does not; then the config.yaml changes and the access
//! rule of cli.md §3.2 through Hermes' own helpers; then the warnings of cli.md §3.1 step 8. A
//! second run changes nothing and says so with the "already" and "up to date" lines. With
//! `--setup` a successful install continues into `setup` (cli.md §3.1 step 6) in the profile it
//! installed into, with the same `--python`; the warnings are printed before setup starts.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Component, Path, PathBuf};

use anyhow::{anyhow, Context as _};
use serde_json::{json, Value};

use crate::exit;
use crate::hermes::{self, HostEnv};
use crate::setup::{self, SetupArgs};
use crate::shim;

/// Mode of the shim directory and of every directory under it (cli.md §3.3).
const DIR_MODE: u32 = 0o755;
/// Mode of every shim file (cli.md §3.3).
const FILE_MODE: u32 = 0o644;

/// `canon-hermes install` (cli.md §1).
#[derive(Debug, clap::Args)]
pub(crate) struct InstallArgs {
    /// Register or reconnect a Canon agent after enabling the plugin
    #[arg(long)]
    setup: bool,
    /// The Hermes profile to install into (default: the active profile, as `hermes` picks it)
    #[arg(long, value_name = "NAME")]
    profile: Option<String>,
    /// The Python of the Hermes environment (default: $HERMES_PYTHON, the `hermes` launcher's
    /// interpreter, ~/.hermes/hermes-agent/venv/bin/python)
    #[arg(long, value_name = "PATH")]
    python: Option<PathBuf>,
}

/// Runs `install`; returns the exit code (cli.md §1: 0 done, 1 refused or failed). With
/// `--setup`, a successful install goes on into `setup` in the same profile with the same
/// `--python`, and the exit code is setup's (cli.md §3.1 step 6).
pub(crate) fn install_command(args: &InstallArgs) -> u8 {
    let env = HostEnv::from_process();
    let installed = {
        let mut out = std::io::stdout().lock();
        let installed = install(args, &env, &mut out);
        let _ = out.flush();
        installed
    };
    // The lock is released: setup writes from more than one thread (its live approval line).
    match installed {
        Ok(Installed::Done) => exit::OK,
        Ok(Installed::ThenSetup(profile)) => {
            let setup = SetupArgs::interactive(args.profile.clone(), args.python.clone());
            setup::run_in_profile(&setup, &env, &profile)
        }
        Err(error) => {
            let _ = writeln!(std::io::stderr().lock(), "{error:#}");
            exit::REJECTED
        }
    }
}

/// A successful install, and whether `setup` follows.
#[derive(Debug)]
enum Installed {
    /// Done (`Next: canon-hermes setup` was printed).
    Done,
    /// `--setup`: continue into setup in this profile.
    ThenSetup(hermes::Profile),
}

/// Writes one line to the operator's output, ignoring a closed pipe.
fn say(out: &mut dyn std::io::Write, line: &str) {
    let _ = writeln!(out, "{line}");
}

fn install(
    args: &InstallArgs,
    env: &HostEnv,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<Installed> {
    let profile = hermes::locate_profile(args.profile.as_deref(), env)?;
    say(out, &profile.line());
    let python = hermes::locate_python(args.python.as_deref(), env)?;
    let helpers = hermes::Helpers::new(python, profile.home.clone());
    let probe = helpers.call("host.probe", json!({}))?;
    if let Some(refusal) = host_refusal(&probe) {
        return Err(anyhow!(refusal));
    }
    if let Some(error) = probe["config_error"].as_str() {
        return Err(anyhow!("{error}"));
    }

    let binary =
        std::env::current_exe().context("finding this binary's path for the shim's manifest")?;
    let plan = ShimPlan::new(&profile.home, &shim::manifest(&binary))?;
    let shim_changed = plan.apply()?;
    let dir = plan.dir.display();
    if shim_changed {
        say(
            out,
            &format!(
                "Installed Canon shim: {dir} (canon-hermes {})",
                shim::VERSION
            ),
        );
    } else {
        say(out, &format!("Canon shim up to date: {dir}"));
    }

    let config = helpers.call(
        "config.install",
        json!({"plugin_key": shim::PLUGIN_NAME, "platform_key": shim::PLATFORM_NAME}),
    )?;
    let plugin = shim::PLUGIN_NAME;
    let platform = shim::PLATFORM_NAME;
    say(
        out,
        &if config["plugin_enabled_now"] == true {
            format!("Enabled Hermes plugin: {plugin}")
        } else {
            format!("Hermes plugin already enabled: {plugin}")
        },
    );
    say(
        out,
        &if config["platform_enabled_now"] == true {
            format!("Enabled Hermes platform: {platform}")
        } else {
            format!("Hermes platform already enabled: {platform}")
        },
    );
    if config["saved"] != true {
        say(
            out,
            "Hermes config already contains Canon plugin/platform entries.",
        );
    }
    let access = config["access"].as_str().unwrap_or_default();
    match access {
        "set_allow_all" => say(
            out,
            "Set CANON_ALLOW_ALL_USERS=true for Canon-managed first setup.",
        ),
        "already_configured" => say(out, "Canon access env already configured."),
        _ => {}
    }
    if shim_changed || config["saved"] == true || access == "set_allow_all" {
        say(out, "Restart the Hermes gateway to load the Canon plugin.");
    }
    if access == "refused" {
        return Err(anyhow!(
            "{}",
            config["access_error"]
                .as_str()
                .unwrap_or("CANON_ALLOW_ALL_USERS cannot be set")
        ));
    }
    if !args.setup {
        say(out, "Next: canon-hermes setup");
    }
    // Before setup's questions rather than after them, where they would scroll away.
    for warning in warnings(&probe) {
        say(out, &warning);
    }
    Ok(if args.setup {
        Installed::ThenSetup(profile)
    } else {
        Installed::Done
    })
}

/// cli.md §3.1 step 2: the refusal of a host outside the audited pair (cli.md §7.2), else `None`.
pub(crate) fn host_refusal(probe: &Value) -> Option<String> {
    use canon_host::protocol::{AUDITED_HERMES, AUDITED_PYTHON};
    let hermes = probe["hermes_version"].as_str();
    let python = probe["python_version"].as_str().unwrap_or("unknown");
    let python_ok = python
        .strip_prefix(AUDITED_PYTHON)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'));
    if hermes == Some(AUDITED_HERMES) && python_ok {
        return None;
    }
    Some(format!(
        "Unsupported Hermes host: hermes-agent {} on Python {python}. canon-hermes {} supports exactly hermes-agent {AUDITED_HERMES} on Python {AUDITED_PYTHON}.",
        hermes.unwrap_or("not installed"),
        shim::VERSION
    ))
}

/// cli.md §3.1 step 8: what install saw but does not change.
pub(crate) fn warnings(probe: &Value) -> Vec<String> {
    let mut lines = Vec::new();
    if probe["multiplex_profiles"] == true {
        lines.push(
            "⚠ gateway.multiplex_profiles is enabled; Canon refuses to start until it is set to false"
                .to_owned(),
        );
    }
    if let Some(version) = probe["pip_entry_point_conflict"].as_str() {
        lines.push(format!(
            "⚠ canon-hermes-plugin {version} is installed in the Hermes environment and overrides this plugin; uninstall it (pip uninstall canon-hermes-plugin)"
        ));
    }
    lines
}

/// Everything the shim directory needs, checked before anything is written.
#[derive(Debug)]
struct ShimPlan {
    /// `<HERMES_HOME>/plugins/canon-hermes`.
    dir: PathBuf,
    /// Files to write, relative to `dir`, in order; `manifest.json` last.
    files: Vec<(String, Vec<u8>)>,
    /// Files a previous manifest listed that this install no longer writes.
    stale: Vec<PathBuf>,
}

impl ShimPlan {
    /// Checks the cli.md §3.3 refusals: a symbolic link anywhere below `<home>/plugins` on the
    /// way to a file install writes, or a `plugin.yaml` in the directory whose name is not
    /// `canon-hermes`.
    fn new(home: &Path, manifest: &str) -> anyhow::Result<ShimPlan> {
        let plugins = home.join("plugins");
        let dir = plugins.join(shim::PLUGIN_NAME);
        let mut files = shim::files();
        files.push(("manifest.json".to_owned(), manifest.as_bytes().to_vec()));
        for (name, _) in &files {
            let mut path = plugins.clone();
            for part in Path::new(shim::PLUGIN_NAME).join(name).components() {
                path.push(part);
                refuse_symlink(&path)?;
            }
        }
        match fs::symlink_metadata(&dir) {
            Ok(meta) if !meta.is_dir() => {
                return Err(anyhow!(
                    "Refusing to overwrite {}: not a directory",
                    dir.display()
                ))
            }
            Ok(_) => {
                let yaml = dir.join("plugin.yaml");
                if yaml.exists() {
                    let text = fs::read_to_string(&yaml)
                        .with_context(|| format!("reading {}", yaml.display()))?;
                    if plugin_name(&text).as_deref() != Some(shim::PLUGIN_NAME) {
                        return Err(anyhow!(
                            "Refusing to overwrite {}: not written by canon-hermes",
                            dir.display()
                        ));
                    }
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => {
                return Err(
                    anyhow::Error::new(error).context(format!("inspecting {}", dir.display()))
                )
            }
        }
        let written: Vec<&str> = files.iter().map(|(name, _)| name.as_str()).collect();
        let mut stale = Vec::new();
        for name in previous_files(&dir) {
            let Some(relative) = safe_relative(&name).filter(|_| !written.contains(&name.as_str()))
            else {
                continue;
            };
            // Removing through a linked directory would delete a file outside the shim.
            let mut path = dir.clone();
            let mut parts = relative.components().peekable();
            while let Some(part) = parts.next() {
                path.push(part);
                if parts.peek().is_some() {
                    refuse_symlink(&path)?;
                }
            }
            if fs::symlink_metadata(&path).is_ok_and(|meta| !meta.is_dir()) {
                stale.push(path);
            }
        }
        Ok(ShimPlan { dir, files, stale })
    }

    /// Writes what differs and removes what is stale; whether anything changed.
    fn apply(&self) -> anyhow::Result<bool> {
        let mut changed = false;
        let (manifest, rest) = self
            .files
            .split_last()
            .expect("the plan always holds the manifest");
        for (name, bytes) in rest {
            changed |= write_if_different(&self.dir.join(name), bytes)?;
        }
        for path in &self.stale {
            fs::remove_file(path).with_context(|| format!("removing {}", path.display()))?;
            changed = true;
            let mut parent = path.parent();
            while let Some(dir) = parent.filter(|d| *d != self.dir && d.starts_with(&self.dir)) {
                if fs::remove_dir(dir).is_err() {
                    break; // not empty
                }
                parent = dir.parent();
            }
        }
        changed |= write_if_different(&self.dir.join(&manifest.0), &manifest.1)?;
        Ok(changed)
    }
}

fn refuse_symlink(path: &Path) -> anyhow::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(anyhow!(
            "Refusing to write {}: it is a symbolic link",
            path.display()
        )),
        _ => Ok(()),
    }
}

/// The top-level `name:` of a `plugin.yaml`, unquoted.
fn plugin_name(yaml: &str) -> Option<String> {
    yaml.lines().find_map(|line| {
        let value = line.strip_prefix("name:")?;
        let value = value.split(" #").next().unwrap_or(value).trim();
        Some(value.trim_matches(|c| c == '"' || c == '\'').to_owned())
    })
}

/// The `files` a previous `manifest.json` in `dir` listed (none when absent or unreadable).
fn previous_files(dir: &Path) -> Vec<String> {
    let Ok(text) = fs::read_to_string(dir.join("manifest.json")) else {
        return Vec::new();
    };
    let Ok(manifest) = serde_json::from_str::<Value>(&text) else {
        return Vec::new();
    };
    manifest["files"]
        .as_array()
        .map(|files| {
            files
                .iter()
                .filter_map(|f| f.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// `name` as a path inside the plugin directory, or `None` when it could point elsewhere.
fn safe_relative(name: &str) -> Option<PathBuf> {
    let path = PathBuf::from(name);
    let normal = path.components().all(|c| matches!(c, Component::Normal(_)));
    (normal && path.components().next().is_some()).then_some(path)
}

/// Writes `bytes` to `path` (mode 0644) unless it already holds exactly them with that mode;
/// whether it wrote. Missing directories are created with mode 0755.
fn write_if_different(path: &Path, bytes: &[u8]) -> anyhow::Result<bool> {
    if let Ok(meta) = fs::symlink_metadata(path) {
        if meta.is_file()
            && meta.permissions().mode() & 0o7777 == FILE_MODE
            && fs::read(path).is_ok_and(|current| current == bytes)
        {
            return Ok(false);
        }
    }
    let dir = path.parent().expect("a shim file has a directory");
    create_dirs(dir)?;
    write_atomic(path, bytes).with_context(|| format!("writing {}", path.display()))?;
    Ok(true)
}

/// Creates `dir` and its missing parents with mode 0755.
fn create_dirs(dir: &Path) -> anyhow::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dirs(parent)?;
    }
    match fs::DirBuilder::new().mode(DIR_MODE).create(dir) {
        Ok(()) => fs::set_permissions(dir, fs::Permissions::from_mode(DIR_MODE))
            .with_context(|| format!("setting the mode of {}", dir.display())),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(error) => Err(anyhow::Error::new(error).context(format!("creating {}", dir.display()))),
    }
}

/// Temporary file in the same directory, fsync, mode 0644, rename over `path`, fsync the
/// directory; the temporary file is removed when any step fails.
fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let result = (|| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .open(&tmp)?;
        file.write_all(bytes)?;
        file.set_permissions(fs::Permissions::from_mode(FILE_MODE))?;
        file.sync_all()?;
        fs::rename(&tmp, path)?;
        fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_names_are_read_from_the_top_level() {
        assert_eq!(
            plugin_name("name: canon-hermes\n").as_deref(),
            Some("canon-hermes")
        );
        assert_eq!(
            plugin_name("# x\nname: \"other\"  # c\n").as_deref(),
            Some("other")
        );
        assert_eq!(plugin_name("label: x\n  name: nested\n"), None);
    }

    #[test]
    fn stale_names_must_stay_inside_the_directory() {
        assert_eq!(
            safe_relative("skills/old/SKILL.md"),
            Some(PathBuf::from("skills/old/SKILL.md"))
        );
        for bad in ["", "../x", "/etc/passwd", "a/../../b", "./a"] {
            assert_eq!(safe_relative(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_host_gate_takes_exactly_the_audited_pair() {
        let probe = |hermes: Option<&str>, python: &str| {
            host_refusal(&json!({"hermes_version": hermes, "python_version": python}))
        };
        assert_eq!(probe(Some("0.19.0"), "3.11.7"), None);
        assert_eq!(probe(Some("0.19.0"), "3.11"), None);
        assert_eq!(
            probe(None, "3.12.1").as_deref(),
            Some(
                format!(
                    "Unsupported Hermes host: hermes-agent not installed on Python 3.12.1. canon-hermes {} supports exactly hermes-agent 0.19.0 on Python 3.11.",
                    shim::VERSION
                )
                .as_str()
            )
        );
        assert!(probe(Some("0.19.1"), "3.11.7").is_some());
        assert!(probe(Some("0.19.0"), "3.110.1").is_some());
    }
}
