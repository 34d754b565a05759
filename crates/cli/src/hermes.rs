//! Locating Hermes (cli.md §2): the profile home the `hermes` CLI itself would use (cli.md §2.1,
//! hermes-agent 0.19.0 `hermes_cli/main.py`), the Hermes Python (cli.md §2.2), and the one-shot
//! helpers of cli.md §2.3 run in that Python (`helper.py`, embedded), and what the `hermes`
//! launcher on `PATH` runs (doctor's line 6, cli.md §9). The CLI never parses or
//! writes Hermes' `config.yaml` or `.env` itself: the helpers call Hermes' own functions.
//!
//! [`locate_profile`] and [`locate_python`] read nothing but the [`HostEnv`] they are given and
//! the file system, so the rules are tested without touching the process environment.

use std::ffi::OsString;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{anyhow, Context as _};
use serde_json::{json, Value};

pub(crate) mod config_edit;

/// The helper program (cli.md §2.3), run as `<python> -I -c <program>`.
const HELPER_PROGRAM: &str = include_str!("hermes/helper.py");

/// cli.md §2.2, when no interpreter is found.
pub(crate) const NO_PYTHON: &str = "Could not locate the Hermes Python environment; pass --python <path to the Hermes venv python>";

/// Profile names Hermes refuses (`hermes_cli/profiles.py` `_RESERVED_NAMES`, hermes-agent 0.19.0).
const RESERVED_PROFILES: [&str; 5] = ["hermes", "test", "tmp", "root", "sudo"];

/// What the location rules read from the process environment.
#[derive(Debug, Clone, Default)]
pub(crate) struct HostEnv {
    /// `HERMES_HOME`, trimmed; `None` when unset or blank.
    pub(crate) hermes_home: Option<PathBuf>,
    /// `HOME`: `~` in `~/.hermes`.
    pub(crate) home: Option<PathBuf>,
    /// Whether `HERMES_S6_SUPERVISED_CHILD` is set (non-empty): `active_profile` is ignored.
    pub(crate) s6_child: bool,
    /// `HERMES_PYTHON`; `None` when unset or blank.
    pub(crate) hermes_python: Option<PathBuf>,
    /// `PATH`, searched for the `hermes` launcher.
    pub(crate) path: Option<OsString>,
    /// The directory of this binary: a venv's `bin/` when it was installed into one.
    pub(crate) exe_dir: Option<PathBuf>,
}

impl HostEnv {
    /// The current process's environment.
    pub(crate) fn from_process() -> HostEnv {
        let var = |name: &str| {
            std::env::var_os(name).filter(|value| !value.to_string_lossy().trim().is_empty())
        };
        let trimmed = |value: OsString| match value.to_str() {
            Some(text) => PathBuf::from(text.trim()),
            None => PathBuf::from(value),
        };
        HostEnv {
            hermes_home: var("HERMES_HOME").map(trimmed),
            home: var("HOME").map(PathBuf::from),
            s6_child: var("HERMES_S6_SUPERVISED_CHILD").is_some(),
            hermes_python: var("HERMES_PYTHON").map(trimmed),
            path: std::env::var_os("PATH"),
            exe_dir: std::env::current_exe()
                .ok()
                .and_then(|exe| exe.parent().map(Path::to_path_buf)),
        }
    }

    /// `~/.hermes`, the platform default home (`hermes_constants.py`).
    fn native_home(&self) -> anyhow::Result<PathBuf> {
        self.home
            .as_ref()
            .map(|home| home.join(".hermes"))
            .ok_or_else(|| {
                anyhow!("HOME is not set, so ~/.hermes cannot be found; set HERMES_HOME or HOME")
            })
    }

    /// `<root>` of cli.md §2.1 for a given `HERMES_HOME` (`get_default_hermes_root`).
    fn root_for(&self, hermes_home: Option<&Path>) -> anyhow::Result<PathBuf> {
        let native = self.native_home()?;
        let Some(env_home) = hermes_home else {
            return Ok(native);
        };
        if resolve(env_home).starts_with(resolve(&native)) {
            return Ok(native);
        }
        if parent_is_profiles(env_home) {
            if let Some(root) = env_home.parent().and_then(Path::parent) {
                return Ok(root.to_path_buf());
            }
        }
        Ok(env_home.to_path_buf())
    }
}

/// The Hermes profile a command works on: its name and its home directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Profile {
    /// `default`, the profile id, or `custom` (`get_active_profile_name`).
    pub(crate) name: String,
    /// The profile home, exported as `HERMES_HOME` to every helper.
    pub(crate) home: PathBuf,
}

impl Profile {
    /// The line every command prints first (cli.md §2.1).
    pub(crate) fn line(&self) -> String {
        format!("Hermes profile: {} ({})", self.name, self.home.display())
    }
}

/// Resolves the active profile home as the `hermes` CLI does (cli.md §2.1): `--profile`, else a
/// `HERMES_HOME` that is a `profiles/<name>` directory, else `<root>/active_profile`, else
/// `HERMES_HOME`, else `~/.hermes`.
pub(crate) fn locate_profile(flag: Option<&str>, env: &HostEnv) -> anyhow::Result<Profile> {
    let root = env.root_for(env.hermes_home.as_deref())?;
    let home = if let Some(name) = flag {
        named_profile(name, &root)?
    } else if let Some(home) = env.hermes_home.as_ref().filter(|h| parent_is_profiles(h)) {
        if !home.is_dir() {
            let name = home
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
            return Err(missing_profile(&name));
        }
        home.clone()
    } else if let Some(name) = sticky_profile(&root, env) {
        named_profile(&name, &root)?
    } else {
        match &env.hermes_home {
            Some(home) => home.clone(),
            None => env.native_home()?,
        }
    };
    let name = profile_name(&home, env)?;
    Ok(Profile { name, home })
}

/// `<root>/<profiles>/<name>` (or `<root>` for `default`), which must exist.
fn named_profile(raw: &str, root: &Path) -> anyhow::Result<PathBuf> {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Err(anyhow!("profile name cannot be empty"));
    }
    let name = if trimmed.eq_ignore_ascii_case("default") {
        "default".to_owned()
    } else {
        trimmed.to_lowercase()
    };
    if name == "default" {
        return Ok(root.to_path_buf());
    }
    if !is_profile_id(&name) {
        return Err(anyhow!(
            "Invalid profile name '{name}'. Must match [a-z0-9][a-z0-9_-]{{0,63}}"
        ));
    }
    if RESERVED_PROFILES.contains(&name.as_str()) {
        return Err(anyhow!(
            "Profile name '{name}' is reserved — it collides with either the Hermes installation itself or a common system binary.  Pick a different name."
        ));
    }
    let home = root.join("profiles").join(&name);
    if !home.is_dir() {
        return Err(missing_profile(&name));
    }
    Ok(home)
}

/// [parity] cli.md §2.1.
fn missing_profile(name: &str) -> anyhow::Error {
    anyhow!("Profile '{name}' does not exist. Create it with: hermes profile create {name}")
}

/// The first line of `<root>/active_profile` when it names a profile other than `default`.
fn sticky_profile(root: &Path, env: &HostEnv) -> Option<String> {
    if env.s6_child {
        return None;
    }
    let text = std::fs::read_to_string(root.join("active_profile")).ok()?;
    let name = text.lines().next()?.trim();
    (!name.is_empty() && name != "default").then(|| name.to_owned())
}

/// `default`, the profile id or `custom` for `home` (`get_active_profile_name`, evaluated with
/// `HERMES_HOME=<home>`).
fn profile_name(home: &Path, env: &HostEnv) -> anyhow::Result<String> {
    let root = env.root_for(Some(home))?;
    let resolved = resolve(home);
    if resolved == resolve(&root) {
        return Ok("default".to_owned());
    }
    if let Ok(rest) = resolved.strip_prefix(resolve(&root.join("profiles"))) {
        let parts: Vec<_> = rest.components().collect();
        if let [only] = parts.as_slice() {
            let id = only.as_os_str().to_string_lossy();
            if is_profile_id(&id) {
                return Ok(id.into_owned());
            }
        }
    }
    Ok("custom".to_owned())
}

/// `^[a-z0-9][a-z0-9_-]{0,63}$` (`hermes_cli/profiles.py` `_PROFILE_ID_RE`).
fn is_profile_id(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name.len() <= 64
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

fn parent_is_profiles(path: &Path) -> bool {
    path.parent()
        .and_then(Path::file_name)
        .is_some_and(|name| name == "profiles")
}

/// Python's non-strict `Path.resolve()`: absolute, with the symlinks of the longest existing
/// prefix resolved.
fn resolve(path: &Path) -> PathBuf {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().map_or_else(|_| path.to_path_buf(), |cwd| cwd.join(path))
    };
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            return rest.iter().rev().fold(real, |out, part| out.join(part));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => return absolute,
        }
    }
}

/// The Hermes Python (cli.md §2.2): `--python`, `HERMES_PYTHON`, the `python` beside this binary
/// when it sits in a venv's `bin/` (the directory above holds `pyvenv.cfg`: the binary was
/// installed into the Hermes venv), the interpreter of the `hermes` launcher on `PATH`,
/// `~/.hermes/hermes-agent/venv/bin/python`. An interpreter named explicitly (flag or variable)
/// must be executable; the discovered ones are skipped when they are not.
pub(crate) fn locate_python(flag: Option<&Path>, env: &HostEnv) -> anyhow::Result<PathBuf> {
    if let Some(explicit) = flag.or(env.hermes_python.as_deref()) {
        return if is_executable(explicit) {
            Ok(explicit.to_path_buf())
        } else {
            Err(anyhow!(
                "{NO_PYTHON} ({} is not an executable file)",
                explicit.display()
            ))
        };
    }
    let venv = env
        .exe_dir
        .as_ref()
        .filter(|dir| {
            dir.parent()
                .is_some_and(|venv| venv.join("pyvenv.cfg").is_file())
        })
        .map(|dir| dir.join("python"));
    let launcher = env
        .path
        .as_ref()
        .and_then(|path| find_on_path("hermes", path))
        .and_then(|hermes| launcher_interpreter(&hermes, env));
    let installer = env
        .home
        .as_ref()
        .map(|home| home.join(".hermes/hermes-agent/venv/bin/python"));
    venv.into_iter()
        .chain(launcher)
        .chain(installer)
        .find(|candidate| is_executable(candidate))
        .ok_or_else(|| anyhow!(NO_PYTHON))
}

/// The interpreter of a `#!` launcher: the first word after `#!`, or for `#!/usr/bin/env NAME`
/// the `NAME` found on `PATH`.
fn launcher_interpreter(launcher: &Path, env: &HostEnv) -> Option<PathBuf> {
    let bytes = std::fs::read(launcher).ok()?;
    let first = bytes.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(first).ok()?.strip_prefix("#!")?;
    let mut words = line.split_whitespace();
    let interpreter = PathBuf::from(words.next()?);
    if interpreter.file_name().is_some_and(|name| name == "env") {
        let name = words.find(|word| !word.starts_with('-'))?;
        return find_on_path(name, env.path.as_ref()?);
    }
    Some(interpreter)
}

/// What the `hermes` launcher on `PATH` runs (cli.md §9 line 6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Launcher {
    /// A `#!` script whose interpreter is a Python (for `#!/usr/bin/env NAME`, `NAME` found on
    /// `PATH`, or `NAME` itself when it is not there), or pip's `/bin/sh` trampoline for a
    /// shebang too long for the kernel (a second line `'''exec' "<python>" "$0" "$@"`).
    Python(PathBuf),
    /// A `#!` script run by something that is not a Python.
    NonPython,
    /// No `#!` line (a compiled program, or text that is no script).
    Unknown,
    /// The file could not be read.
    Unreadable,
}

/// The `hermes` launcher on `PATH` and what it runs; `None` when there is none.
pub(crate) fn hermes_launcher(env: &HostEnv) -> Option<(PathBuf, Launcher)> {
    let launcher = find_on_path("hermes", env.path.as_ref()?)?;
    let kind = inspect_launcher(&launcher, env);
    Some((launcher, kind))
}

/// Reads the first bytes of `launcher` (at most 4 KiB) and classifies them.
fn inspect_launcher(launcher: &Path, env: &HostEnv) -> Launcher {
    use std::io::Read as _;
    let mut head = Vec::new();
    let read =
        std::fs::File::open(launcher).and_then(|file| file.take(4096).read_to_end(&mut head));
    match read {
        Ok(_) => classify_launcher(&head, env),
        Err(_) => Launcher::Unreadable,
    }
}

/// [`Launcher`] from the first bytes of a launcher.
fn classify_launcher(head: &[u8], env: &HostEnv) -> Launcher {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.lines();
    let Some(shebang) = lines.next().and_then(|line| line.strip_prefix("#!")) else {
        return Launcher::Unknown;
    };
    let mut words = shebang.split_whitespace();
    let Some(first) = words.next() else {
        return Launcher::Unknown;
    };
    let mut interpreter = PathBuf::from(first);
    if interpreter.file_name().is_some_and(|name| name == "env") {
        let Some(name) = words.find(|word| !word.starts_with('-')) else {
            return Launcher::NonPython;
        };
        interpreter = env
            .path
            .as_ref()
            .and_then(|path| find_on_path(name, path))
            .unwrap_or_else(|| PathBuf::from(name));
    }
    let is_python = |path: &Path| {
        path.file_name()
            .is_some_and(|name| name.to_string_lossy().starts_with("python"))
    };
    if is_python(&interpreter) {
        return Launcher::Python(interpreter);
    }
    if interpreter.file_name().is_some_and(|name| name == "sh") {
        let trampoline = lines
            .next()
            .and_then(|line| line.strip_prefix("'''exec' \""))
            .and_then(|rest| rest.split('"').next())
            .map(PathBuf::from);
        if let Some(python) = trampoline.filter(|p| is_python(p)) {
            return Launcher::Python(python);
        }
    }
    Launcher::NonPython
}

/// Whether two interpreters are the same Python environment: the same `bin` directory, and the
/// same file name there or two names of one file (a venv's `python` and `python3`). The
/// interpreter's own symbolic link is not followed out of its directory: every venv's `python`
/// links to the base interpreter it was made from.
pub(crate) fn same_environment(a: &Path, b: &Path) -> bool {
    let dir = |path: &Path| path.parent().map(resolve);
    if dir(a).is_none() || dir(a) != dir(b) {
        return false;
    }
    a.file_name() == b.file_name()
        || matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}

fn find_on_path(name: &str, path: &OsString) -> Option<PathBuf> {
    std::env::split_paths(path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// The helpers of cli.md §2.3 in one Hermes Python, for one profile home.
#[derive(Debug, Clone)]
pub(crate) struct Helpers {
    python: PathBuf,
    home: PathBuf,
}

impl Helpers {
    pub(crate) fn new(python: PathBuf, home: PathBuf) -> Helpers {
        Helpers { python, home }
    }

    /// Runs `helper` with `body` on stdin; its answer body, or its refusal as the error. What the
    /// Hermes code prints itself (on stderr) is passed on to ours.
    pub(crate) fn call(&self, helper: &str, body: Value) -> anyhow::Result<Value> {
        let mut child = Command::new(&self.python)
            .args(["-I", "-c", HELPER_PROGRAM])
            .env("HERMES_HOME", &self.home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("running the Hermes Python {}", self.python.display()))?;
        let request = json!({"helper": helper, "body": body}).to_string();
        if let Some(mut stdin) = child.stdin.take() {
            // A helper that exits early closes the pipe; its output says why.
            let _ = stdin.write_all(request.as_bytes());
        }
        let output = child
            .wait_with_output()
            .with_context(|| format!("waiting for the Hermes Python {}", self.python.display()))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let answer = stdout
            .lines()
            .rev()
            .find(|line| !line.trim().is_empty())
            .and_then(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|_| output.status.success());
        let Some(answer) = answer else {
            let last = stderr
                .lines()
                .rev()
                .find(|line| !line.trim().is_empty())
                .unwrap_or("no output");
            return Err(anyhow!(
                "the Hermes Python {} failed in {helper} ({}): {last}",
                self.python.display(),
                output.status
            ));
        };
        if !stderr.trim().is_empty() {
            let _ = std::io::stderr().lock().write_all(stderr.as_bytes());
        }
        if answer["ok"] == true {
            Ok(answer["body"].clone())
        } else {
            Err(anyhow!(
                "{}",
                answer["error"]
                    .as_str()
                    .unwrap_or("the Hermes helper refused")
            ))
        }
    }
}

#[cfg(test)]
mod tests;
