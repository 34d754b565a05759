//! `canon-hermes install` (cli.md §3): put the Canon shim into a Hermes profile and enable it.
//!
//! The steps of cli.md §3.1, in order: locate the profile and the Hermes Python and probe the
//! host (`hermes`); refuse a host outside the audited pair (cli.md §7.2) before writing anything;
//! check the shim directory (no symbolic links, no plugin of another name) and write the shim
//! package, `plugin.yaml`, the rich-cards skill, a copy of this binary (`bin/canon-hermes`, so
//! the plugin keeps working when the binary it was installed from is rebuilt or removed) and
//! `manifest.json` (`shim`), each through a temporary file and a rename, leaving files that are
//! already right untouched and removing those a previous manifest listed but this one does not;
//! then the config.yaml changes of cli.md §3.2, made by `hermes::config_edit` on the file's text
//! and checked and written by the `config.write` helper in the Hermes Python (comments and layout
//! kept, the original kept once beside it), and the access rule; then the warnings of cli.md §3.1
//! step 8. A second run changes nothing and says so with the "already" and "up to date" lines.
//! With `--setup` a successful install continues into `setup` (cli.md §3.1 step 6) in the
//! profile it installed into, with the same `--python`; the warnings are printed before setup
//! starts.
//!
//! `uninstall` shares the plugin directory's checks, the config path and the restart advice.

use std::fs;
use std::io::{Read as _, Seek as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Component, Path, PathBuf};

use anyhow::{anyhow, Context as _};
use serde_json::{json, Value};

use crate::exit;
use crate::hermes::{self, config_edit, HostEnv};
use crate::setup::{self, SetupArgs};
use crate::shim;

/// Mode of the shim directory and of every directory under it (cli.md §3.3).
const DIR_MODE: u32 = 0o755;
/// Mode of every shim file (cli.md §3.3).
const FILE_MODE: u32 = 0o644;
/// Mode of the binary's copy (cli.md §3.3).
const BINARY_MODE: u32 = 0o755;

/// Where install copies the running binary, relative to the plugin directory (cli.md §3.3). The
/// manifest records it in this form and the shim resolves it against its own directory.
pub(crate) const BINARY: &str = "bin/canon-hermes";

/// `canon-hermes install` (cli.md §1).
#[derive(Debug, clap::Args)]
pub(crate) struct InstallArgs {
    /// Register or reconnect a Canon agent after enabling the plugin
    #[arg(long)]
    setup: bool,
    /// The Hermes profile to install into (default: the active profile, as `hermes` picks it)
    #[arg(long, value_name = "NAME")]
    profile: Option<String>,
    /// The Python of the Hermes environment (default: $HERMES_PYTHON, the `python` beside this
    /// binary when it sits in a venv's bin/, the `hermes` launcher's interpreter,
    /// ~/.hermes/hermes-agent/venv/bin/python)
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

    let plan = ShimPlan::new(&profile.home, &manifest()?, running_binary())?;
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

    let config = edit_config(&helpers, &profile.home, Change::Install)?;
    let plugin = shim::PLUGIN_NAME;
    let platform = shim::PLATFORM_NAME;
    say(
        out,
        &if config.answer["plugin_changed"] == true {
            format!("Enabled Hermes plugin: {plugin}")
        } else {
            format!("Hermes plugin already enabled: {plugin}")
        },
    );
    say(
        out,
        &if config.answer["platform_changed"] == true {
            format!("Enabled Hermes platform: {platform}")
        } else {
            format!("Hermes platform already enabled: {platform}")
        },
    );
    if !config.saved() {
        say(
            out,
            "Hermes config already contains Canon plugin/platform entries.",
        );
    }
    for note in config.notes() {
        say(out, &note);
    }
    let env_answer = helpers.call("env.access", json!({}))?;
    let access = env_answer["access"].as_str().unwrap_or_default();
    match access {
        "set_allow_all" => say(
            out,
            "Set CANON_ALLOW_ALL_USERS=true for Canon-managed first setup.",
        ),
        "already_configured" => say(out, "Canon access env already configured."),
        _ => {}
    }
    if let Some(note) = env_backup_note(&env_answer) {
        say(out, &note);
    }
    if shim_changed || config.saved() || access == "set_allow_all" {
        say(
            out,
            &format!(
                "Restart the Hermes gateway to load the Canon plugin: {}",
                restart_command(&profile)
            ),
        );
    }
    if access == "refused" {
        return Err(anyhow!(
            "{}",
            env_answer["access_error"]
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

/// The config.yaml change of `install` or `uninstall` (cli.md §3.2, §3.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// Enable the plugin and the platform.
    Install,
    /// Disable them.
    Uninstall,
}

/// What the `config.write` helper did, and why canon-hermes' own editor did not do it when it
/// did not.
#[derive(Debug)]
pub(crate) struct ConfigWrite {
    /// The helper's answer (`plugin_changed`, `platform_changed`, `saved`, `method`, `backup`,
    /// `backup_created`).
    pub(crate) answer: Value,
    /// The editor's refusal (`config_edit::EditError`), when it refused the file.
    editor_error: Option<String>,
}

impl ConfigWrite {
    /// Whether config.yaml was written.
    pub(crate) fn saved(&self) -> bool {
        self.answer["saved"] == true
    }

    /// The lines that say where the original config is and when a fallback wrote the change.
    pub(crate) fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        let backup = self.answer["backup"].as_str();
        if let (true, Some(backup)) = (self.answer["backup_created"] == true, backup) {
            notes.push(format!("Kept the original Hermes config as {backup}"));
        }
        let why = match &self.editor_error {
            Some(error) => format!("canon-hermes does not edit {error}"),
            None => "canon-hermes' own edit did not check out".to_owned(),
        };
        let backup = backup.unwrap_or("not kept");
        match self.answer["method"].as_str() {
            Some("ruamel") => notes.push(format!(
                "⚠ Hermes config edited with ruamel.yaml ({why}): comments kept, indentation may \
                 have changed; the original is {backup}"
            )),
            Some("save_config") if self.answer["backup"].is_string() => notes.push(format!(
                "⚠ Hermes config rewritten by Hermes' save_config ({why}): its comments and \
                 layout were not kept; the original is {backup}"
            )),
            _ => {}
        }
        notes
    }
}

/// Edits `<home>/config.yaml` for `change`: canon-hermes' editor makes the new text from the
/// file's bytes, and the `config.write` helper checks it with Hermes' loader and writes it (or
/// its fallbacks, cli.md §3.2).
pub(crate) fn edit_config(
    helpers: &hermes::Helpers,
    home: &Path,
    change: Change,
) -> anyhow::Result<ConfigWrite> {
    let (plugin, platform) = (shim::PLUGIN_NAME, shim::PLATFORM_NAME);
    let path = home.join("config.yaml");
    let mut body = json!({
        "change": match change { Change::Install => "install", Change::Uninstall => "uninstall" },
        "plugin_key": plugin,
        "platform_key": platform,
        "old_text": null,
        "new_text": null,
    });
    let mut editor_error = None;
    match fs::read(&path) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => {
                let edit = match change {
                    Change::Install => config_edit::install(&text, plugin, platform),
                    Change::Uninstall => config_edit::uninstall(&text, plugin, platform),
                };
                match edit {
                    Ok(edit) => body["new_text"] = Value::from(edit.text),
                    Err(error) => editor_error = Some(error.to_string()),
                }
                body["old_text"] = Value::from(text);
            }
            Err(_) => editor_error = Some("text that is not UTF-8".to_owned()),
        },
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => {
            return Err(anyhow::Error::new(error).context(format!("reading {}", path.display())))
        }
    }
    let answer = helpers.call("config.write", body)?;
    Ok(ConfigWrite {
        answer,
        editor_error,
    })
}

/// The line saying where the original `.env` is, when the helper kept it just now.
pub(crate) fn env_backup_note(answer: &Value) -> Option<String> {
    let backup = answer["backup"].as_str()?;
    (answer["backup_created"] == true).then(|| format!("Kept the original .env as {backup}"))
}

/// The command that restarts the gateway of `profile` (`hermes -p NAME` is how Hermes 0.19
/// names a profile on its command line, `hermes_cli/main.py`; a custom home is named by
/// `HERMES_HOME`).
pub(crate) fn restart_command(profile: &hermes::Profile) -> String {
    match profile.name.as_str() {
        "default" => "hermes gateway restart".to_owned(),
        "custom" => format!(
            "HERMES_HOME={} hermes gateway restart",
            shell_word(&profile.home.to_string_lossy())
        ),
        name => format!("hermes -p {name} gateway restart"),
    }
}

/// `text` as one POSIX shell word.
fn shell_word(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:@%,=".contains(c));
    if plain {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// `manifest.json` (cli.md §3.3): the shim's, naming the binary's copy relative to the plugin
/// directory and listing it among the files this install writes.
fn manifest() -> anyhow::Result<String> {
    let mut value: Value = serde_json::from_str(&shim::manifest(Path::new(BINARY)))
        .context("reading back the generated manifest")?;
    value["files"]
        .as_array_mut()
        .context("the generated manifest lists its files")?
        .push(Value::from(BINARY));
    let mut text = serde_json::to_string_pretty(&value).context("writing the manifest")?;
    text.push('\n');
    Ok(text)
}

/// The file this process runs: `/proc/self/exe` (the very file it was started from, even after
/// its path was rebuilt or removed), else `current_exe()`.
pub(crate) fn running_binary() -> PathBuf {
    let proc = PathBuf::from("/proc/self/exe");
    if fs::File::open(&proc).is_ok() {
        return proc;
    }
    std::env::current_exe().unwrap_or(proc)
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
    /// The running binary, copied to [`BINARY`].
    binary: PathBuf,
    /// Files a previous manifest listed that this install no longer writes.
    stale: Vec<PathBuf>,
}

impl ShimPlan {
    /// Checks the cli.md §3.3 refusals: a symbolic link anywhere below `<home>/plugins` on the
    /// way to a file install writes, or a `plugin.yaml` in the directory whose name is not
    /// `canon-hermes`.
    fn new(home: &Path, manifest: &str, binary: PathBuf) -> anyhow::Result<ShimPlan> {
        let plugins = home.join("plugins");
        let dir = plugins.join(shim::PLUGIN_NAME);
        let mut files = shim::files();
        files.push(("manifest.json".to_owned(), manifest.as_bytes().to_vec()));
        let mut written: Vec<&str> = files.iter().map(|(name, _)| name.as_str()).collect();
        written.push(BINARY);
        for name in &written {
            let mut path = plugins.clone();
            for part in Path::new(shim::PLUGIN_NAME).join(name).components() {
                path.push(part);
                refuse_symlink(&path)?;
            }
        }
        check_plugin_dir(&dir, "overwrite")?;
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
        Ok(ShimPlan {
            dir,
            files,
            binary,
            stale,
        })
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
        changed |= copy_if_different(&self.binary, &self.dir.join(BINARY))?;
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

/// The cli.md §3.3 refusals for the plugin directory itself, which `uninstall` applies too
/// (`verb` says what would be done to it: `overwrite`, `remove`): not a symbolic link, a
/// directory when it exists, and no `plugin.yaml` of another plugin in it.
pub(crate) fn check_plugin_dir(dir: &Path, verb: &str) -> anyhow::Result<()> {
    if fs::symlink_metadata(dir).is_ok_and(|meta| meta.file_type().is_symlink()) {
        let action = if verb == "overwrite" { "write" } else { verb };
        return Err(anyhow!(
            "Refusing to {action} {}: it is a symbolic link",
            dir.display()
        ));
    }
    match fs::symlink_metadata(dir) {
        Ok(meta) if !meta.is_dir() => Err(anyhow!(
            "Refusing to {verb} {}: not a directory",
            dir.display()
        )),
        Ok(_) => {
            let yaml = dir.join("plugin.yaml");
            if yaml.exists() {
                let text = fs::read_to_string(&yaml)
                    .with_context(|| format!("reading {}", yaml.display()))?;
                if plugin_name(&text).as_deref() != Some(shim::PLUGIN_NAME) {
                    return Err(anyhow!(
                        "Refusing to {verb} {}: not written by canon-hermes",
                        dir.display()
                    ));
                }
            }
            Ok(())
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => {
            Err(anyhow::Error::new(error).context(format!("inspecting {}", dir.display())))
        }
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
    write_atomic(path, FILE_MODE, |file| file.write_all(bytes))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(true)
}

/// Copies the file `source` to `path` (mode 0755) unless `path` already holds the same bytes
/// with that mode (sizes compared first, then the bytes); whether it copied. The copy goes
/// through a temporary file and a rename, so a gateway still running the old copy keeps its file.
fn copy_if_different(source: &Path, path: &Path) -> anyhow::Result<bool> {
    let mut from = fs::File::open(source)
        .with_context(|| format!("opening this binary ({}) to copy it", source.display()))?;
    if let Ok(meta) = fs::symlink_metadata(path) {
        if meta.is_file() && meta.permissions().mode() & 0o7777 == BINARY_MODE {
            let mut current =
                fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
            if same_contents(&mut from, &mut current)
                .with_context(|| format!("comparing {} with this binary", path.display()))?
            {
                return Ok(false);
            }
            from.rewind().context("rewinding this binary")?;
        }
    }
    let dir = path.parent().expect("the binary's copy has a directory");
    create_dirs(dir)?;
    write_atomic(path, BINARY_MODE, |file| {
        std::io::copy(&mut from, file).map(|_| ())
    })
    .with_context(|| format!("copying this binary to {}", path.display()))?;
    Ok(true)
}

/// Whether two files hold the same bytes: their sizes first, then their contents, a MiB at a
/// time, stopping at the first difference.
pub(crate) fn same_contents(a: &mut fs::File, b: &mut fs::File) -> std::io::Result<bool> {
    if a.metadata()?.len() != b.metadata()?.len() {
        return Ok(false);
    }
    const CHUNK: usize = 1 << 20;
    let (mut left, mut right) = (vec![0u8; CHUNK], vec![0u8; CHUNK]);
    loop {
        let n = fill(a, &mut left)?;
        let m = fill(b, &mut right)?;
        if n != m || left[..n] != right[..m] {
            return Ok(false);
        }
        if n < CHUNK {
            return Ok(true);
        }
    }
}

/// Reads until `buf` is full or the file ends; how many bytes were read.
fn fill(file: &mut fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(filled)
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

/// Temporary file in the same directory filled by `fill`, mode `mode`, fsync, rename over
/// `path`, fsync the directory; the temporary file is removed when any step fails.
fn write_atomic(
    path: &Path,
    mode: u32,
    fill: impl FnOnce(&mut fs::File) -> std::io::Result<()>,
) -> std::io::Result<()> {
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
            .mode(mode)
            .open(&tmp)?;
        fill(&mut file)?;
        file.set_permissions(fs::Permissions::from_mode(mode))?;
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
    fn the_restart_command_names_the_profile_as_hermes_does() {
        let command = |name: &str, home: &str| {
            restart_command(&hermes::Profile {
                name: name.to_owned(),
                home: PathBuf::from(home),
            })
        };
        assert_eq!(
            command("default", "/home/u/.hermes"),
            "hermes gateway restart"
        );
        assert_eq!(
            command("work", "/home/u/.hermes/profiles/work"),
            "hermes -p work gateway restart"
        );
        assert_eq!(
            command("custom", "/srv/hermes home/it's"),
            "HERMES_HOME='/srv/hermes home/it'\\''s' hermes gateway restart"
        );
        assert_eq!(
            command("custom", "/srv/hermes"),
            "HERMES_HOME=/srv/hermes hermes gateway restart"
        );
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
