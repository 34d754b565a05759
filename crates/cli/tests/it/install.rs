//! `canon-hermes install` (cli.md §3) into scratch Hermes profiles with the real hermes-agent
//! 0.19.0 venv: the printed lines, the files and their modes, idempotence byte for byte, what
//! Hermes' own `save_config` keeps of a hand-written config.yaml, the `.env` rule, and each
//! refusal with nothing changed. Hosts that are not the audited one are small venvs made from
//! the venv's Python: one without Hermes, and ones that see the real Hermes through a `.pth`
//! file with a fake distribution in front of it (another hermes-agent version, or the 0.14.1
//! `canon-hermes-plugin` entry point).

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use super::gateway_support::{fake_venv, hermes_cli, hermes_python, install_shim, shim_source};

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// A scratch `HOME` with an empty profile home `hermes/` in it.
struct Scratch {
    dir: tempfile::TempDir,
    hermes_home: PathBuf,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir().expect("scratch dir");
        let hermes_home = dir.path().join("hermes");
        fs::create_dir_all(&hermes_home).expect("the profile home");
        Scratch { dir, hermes_home }
    }

    fn plugin_dir(&self) -> PathBuf {
        self.hermes_home.join("plugins/canon-hermes")
    }

    /// `canon-hermes <args>` with this profile as `HERMES_HOME`.
    fn run(&self, args: &[&str]) -> Output {
        self.run_bin(env!("CARGO_BIN_EXE_canon-hermes"), args, &[])
    }

    fn run_bin(&self, bin: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
        Command::new(bin)
            .args(args)
            .current_dir(self.dir.path())
            .env("HOME", self.dir.path())
            .env("HERMES_HOME", &self.hermes_home)
            .env_remove("HERMES_PYTHON")
            .env_remove("CANON_ALLOWED_USERS")
            .env_remove("CANON_ALLOW_ALL_USERS")
            .env_remove("GATEWAY_MULTIPLEX_PROFILES")
            .env_remove("HERMES_S6_SUPERVISED_CHILD")
            .env_remove("CANON_HERMES_BIN")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .expect("canon-hermes runs")
    }

    /// `install --python <the venv's python>`.
    fn install(&self) -> Output {
        let python = hermes_python();
        self.run(&["install", "--python", python.to_str().expect("utf-8 path")])
    }

    fn install_with(&self, python: &Path) -> Output {
        self.run(&["install", "--python", python.to_str().expect("utf-8 path")])
    }

    /// Every file, directory and link under the scratch `HOME`: mode and content hash.
    fn snapshot(&self) -> BTreeMap<PathBuf, String> {
        let mut out = BTreeMap::new();
        walk(self.dir.path(), self.dir.path(), &mut out);
        out
    }
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
    for entry in fs::read_dir(dir).expect("a directory") {
        let path = entry.expect("an entry").path();
        let meta = fs::symlink_metadata(&path).expect("metadata");
        let mode = meta.permissions().mode() & 0o7777;
        let relative = path
            .strip_prefix(root)
            .expect("under the root")
            .to_path_buf();
        if meta.file_type().is_symlink() {
            out.insert(
                relative,
                format!("link -> {:?}", fs::read_link(&path).expect("a link")),
            );
        } else if meta.is_dir() {
            out.insert(relative, format!("dir {mode:o}"));
            walk(root, &path, out);
        } else {
            let digest = Sha256::digest(fs::read(&path).expect("a file"));
            out.insert(relative, format!("file {mode:o} {digest:x}"));
        }
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn lines(out: &Output) -> Vec<String> {
    stdout(out).lines().map(str::to_owned).collect()
}

fn profile_line(s: &Scratch) -> String {
    format!("Hermes profile: default ({})", s.hermes_home.display())
}

/// The lines of a first install into an empty profile.
fn first_lines(s: &Scratch) -> Vec<String> {
    vec![
        profile_line(s),
        format!(
            "Installed Canon shim: {} (canon-hermes {VERSION})",
            s.plugin_dir().display()
        ),
        "Enabled Hermes plugin: canon-hermes".into(),
        "Enabled Hermes platform: canon".into(),
        "Set CANON_ALLOW_ALL_USERS=true for Canon-managed first setup.".into(),
        "Restart the Hermes gateway to load the Canon plugin.".into(),
        "Next: canon-hermes setup".into(),
    ]
}

/// The lines of an install that finds everything in place.
fn again_lines(s: &Scratch) -> Vec<String> {
    vec![
        profile_line(s),
        format!("Canon shim up to date: {}", s.plugin_dir().display()),
        "Hermes plugin already enabled: canon-hermes".into(),
        "Hermes platform already enabled: canon".into(),
        "Hermes config already contains Canon plugin/platform entries.".into(),
        "Canon access env already configured.".into(),
        "Next: canon-hermes setup".into(),
    ]
}

fn assert_ok(out: &Output) {
    assert!(
        out.status.success(),
        "install failed ({}): {}{}",
        out.status,
        stdout(out),
        stderr(out)
    );
}

/// Python in the venv with `HERMES_HOME` set; returns stdout.
fn hermes_python_says(s: &Scratch, code: &str) -> String {
    let out = Command::new(hermes_python())
        .args(["-c", code])
        .env("HERMES_HOME", &s.hermes_home)
        .env("HOME", s.dir.path())
        .env_remove("CANON_ALLOW_ALL_USERS")
        .env_remove("CANON_ALLOWED_USERS")
        .output()
        .expect("the venv python runs");
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
}

/// Whether the installed shim's own hash of its files (what its `hello` sends) is the one its
/// manifest records, which is the hash of the package this binary installs.
fn installed_hash_matches(s: &Scratch) -> bool {
    let dir = s.plugin_dir();
    let code = format!(
        "{}import json\nprint(shim._daemon.SHIM_SHA256 == json.load(open({:?}))['shim_sha256'])\n",
        super::gateway_support::shim_prelude(&dir),
        dir.join("manifest.json")
    );
    match hermes_python_says(s, &code).trim() {
        "True" => true,
        "False" => false,
        other => panic!("{other}"),
    }
}

#[test]
fn first_install_writes_the_shim_and_enables_canon() {
    let s = Scratch::new();
    let out = s.install();
    assert_ok(&out);
    assert_eq!(lines(&out), first_lines(&s));

    // The package, generated plugin.yaml and manifest, and the skill; 0755 directories, 0644 files.
    let dir = s.plugin_dir();
    let mut names: Vec<String> = Vec::new();
    for (path, what) in s.snapshot() {
        if let Ok(rest) = s.dir.path().join(&path).strip_prefix(&dir) {
            if !rest.as_os_str().is_empty() {
                let kind: Vec<&str> = what.split_whitespace().take(2).collect();
                names.push(format!("{} {}", rest.display(), kind.join(" ")));
            }
        }
    }
    assert_eq!(
        names,
        [
            "__init__.py file 644",
            "_adapter.py file 644",
            "_api.py file 644",
            "_busy.py file 644",
            "_constants.py file 644",
            "_daemon.py file 644",
            "_tools.py file 644",
            "manifest.json file 644",
            "plugin.yaml file 644",
            "skills dir 755",
            "skills/rich-cards dir 755",
            "skills/rich-cards/SKILL.md file 644",
        ]
    );
    assert_eq!(
        fs::metadata(&dir).expect("dir").permissions().mode() & 0o777,
        0o755
    );
    for entry in fs::read_dir(shim_source()).expect("the source package") {
        let path = entry.expect("an entry").path();
        if path.extension().is_none_or(|e| e != "py") {
            continue;
        }
        let name = path.file_name().expect("a name");
        assert_eq!(
            fs::read(&path).expect("source"),
            fs::read(dir.join(name)).expect("installed")
        );
    }
    let skill = super::gateway_support::workspace_root()
        .join("crates/cli/assets/hermes/skills/rich-cards/SKILL.md");
    assert_eq!(
        fs::read(skill).expect("the generated skill"),
        fs::read(dir.join("skills/rich-cards/SKILL.md")).expect("installed skill")
    );

    let manifest: Value =
        serde_json::from_slice(&fs::read(dir.join("manifest.json")).expect("manifest"))
            .expect("JSON");
    assert_eq!(manifest["binary"], env!("CARGO_BIN_EXE_canon-hermes"));
    assert_eq!(manifest["binary_version"], VERSION);
    assert_eq!(
        manifest["audited_host"],
        serde_json::json!({"hermes_agent": "0.19.0", "python": "3.11"})
    );
    assert_eq!(manifest["platform"]["name"], "canon");
    assert_eq!(manifest["tools"][0]["name"], "canon_runtime_control");
    assert_eq!(manifest["tools"][0]["toolset"], "canon");
    assert_eq!(
        manifest["tools"][0]["schema"]["parameters"]["required"],
        serde_json::json!(["action"])
    );
    assert_eq!(manifest["tools"][1]["name"], "canon_communicate");
    assert_eq!(manifest["tools"][1]["check"], "communication");
    assert_eq!(
        manifest["tools"][1]["schema"]["parameters"]["oneOf"]
            .as_array()
            .map(Vec::len),
        Some(7)
    );
    assert_eq!(
        manifest["toolset_aliases"],
        serde_json::json!({"canon_runtime": "canon"})
    );

    // What Hermes reads back (cli.md §10 oracle), and what it makes of plugin.yaml; the shim's
    // own hash of its installed files is the manifest's.
    let said = hermes_python_says(
        &s,
        "import json, yaml\n\
         from hermes_cli.config import load_config, get_env_value\n\
         c = load_config()\n\
         print(json.dumps([c['plugins']['enabled'], c['platforms']['canon']['enabled'],\n\
                           get_env_value('CANON_ALLOW_ALL_USERS')]))\n\
         import os\n\
         d = os.path.join(os.environ['HERMES_HOME'], 'plugins', 'canon-hermes')\n\
         y = yaml.safe_load(open(os.path.join(d, 'plugin.yaml')))\n\
         print(y['name'], y['kind'], y['version'], y['provides_tools'], len(y['optional_env']))\n\
         print(json.dumps(y['optional_env'][11]))\n",
    );
    assert_eq!(
        said.lines().collect::<Vec<_>>(),
        [
            r#"[["canon-hermes"], true, "true"]"#,
            &format!(
                "canon-hermes platform {VERSION} ['canon_runtime_control', 'canon_communicate'] 15"
            ),
            r#"{"name": "CANON_ALLOW_ALL_USERS", "description": "Allow any Canon user to talk to Hermes", "prompt": "Allow all users? (true/false)", "password": false}"#,
        ]
    );
    assert!(installed_hash_matches(&s));
    let listed = hermes_cli(&s.hermes_home, &["plugins", "list"]);
    assert!(
        listed
            .lines()
            .any(|l| l.contains("canon-hermes") && l.contains("enabled") && l.contains(VERSION)),
        "{listed}"
    );
}

#[test]
fn second_install_changes_nothing_byte_for_byte() {
    let s = Scratch::new();
    assert_ok(&s.install());
    let before = s.snapshot();
    let out = s.install();
    assert_ok(&out);
    assert_eq!(lines(&out), again_lines(&s));
    assert_eq!(stderr(&out), "");
    let after = s.snapshot();
    assert!(before.contains_key(Path::new("hermes/config.yaml")));
    assert!(before.contains_key(Path::new("hermes/.env")));
    assert_eq!(before, after);
}

#[test]
fn a_changed_or_stale_shim_file_is_rewritten_or_removed() {
    let s = Scratch::new();
    assert_ok(&s.install());
    let dir = s.plugin_dir();
    // A hand edit: the shim's own hash of its files no longer matches the manifest's.
    fs::write(dir.join("_busy.py"), "# edited\n").expect("edit");
    assert!(!installed_hash_matches(&s));
    // A file an earlier install listed and this one does not write.
    let mut manifest: Value =
        serde_json::from_slice(&fs::read(dir.join("manifest.json")).expect("manifest"))
            .expect("JSON");
    manifest["files"].as_array_mut().expect("files").extend([
        Value::from("_old.py"),
        Value::from("skills/old/SKILL.md"),
        Value::from("../../x"),
    ]);
    fs::write(dir.join("manifest.json"), manifest.to_string()).expect("manifest");
    fs::write(dir.join("_old.py"), "").expect("old module");
    fs::create_dir_all(dir.join("skills/old")).expect("old skill dir");
    fs::write(dir.join("skills/old/SKILL.md"), "").expect("old skill");
    fs::write(s.dir.path().join("x"), "outside").expect("outside file");
    fs::write(dir.join("notes.txt"), "mine").expect("an unlisted file");

    let out = s.install();
    assert_ok(&out);
    let mut expected = again_lines(&s);
    expected[1] = format!(
        "Installed Canon shim: {} (canon-hermes {VERSION})",
        dir.display()
    );
    expected.insert(
        6,
        "Restart the Hermes gateway to load the Canon plugin.".into(),
    );
    assert_eq!(lines(&out), expected);
    assert_eq!(
        fs::read(dir.join("_busy.py")).expect("rewritten"),
        fs::read(shim_source().join("_busy.py")).expect("source")
    );
    assert!(!dir.join("_old.py").exists());
    assert!(
        !dir.join("skills/old").exists(),
        "the emptied directory goes too"
    );
    assert!(
        s.dir.path().join("x").exists(),
        "nothing outside the shim is removed"
    );
    assert_eq!(
        fs::read_to_string(dir.join("notes.txt")).expect("kept"),
        "mine"
    );
    assert!(installed_hash_matches(&s));
}

const HAND_WRITTEN: &str = "\
# My Hermes settings.
zeta_custom:
  keep: me   # a trailing comment
model:
  provider: custom
  default: fake-model
approvals:
  mode: smart   # the default, set on purpose
plugins:
  enabled: [zzz-tool, aaa-tool]
custom_list: [3, 1, 2]
";

#[test]
fn hand_written_config_keeps_what_hermes_save_config_keeps() {
    let s = Scratch::new();
    fs::write(s.hermes_home.join("config.yaml"), HAND_WRITTEN).expect("config");
    assert_ok(&s.install());
    let written = fs::read_to_string(s.hermes_home.join("config.yaml")).expect("config");
    // Hermes rewrites the whole file through PyYAML: the user's comments are gone (it appends its
    // own commented-out sections), flow lists become block lists, keys Hermes knows come first
    // in its own order with `_config_version` after them, and the user's other keys follow in
    // their order. Every value is kept, defaults set on purpose included; plugins.enabled is
    // sorted with canon-hermes in it.
    let yaml_part = written.split("\n# ── ").next().expect("the YAML part");
    assert_eq!(
        yaml_part,
        "model:\n  provider: custom\n  default: fake-model\napprovals:\n  mode: smart\n\
         _config_version: 33\nzeta_custom:\n  keep: me\nplugins:\n  enabled:\n    - aaa-tool\n\
         \x20   - canon-hermes\n    - zzz-tool\ncustom_list:\n  - 3\n  - 1\n  - 2\n\
         platforms:\n  canon:\n    enabled: true\n"
    );
    assert!(!written.contains("My Hermes settings"));
    assert!(!written.contains("a trailing comment"));

    // A config that already has both entries is not rewritten: comments and layout stay.
    let s = Scratch::new();
    let ready = format!("{HAND_WRITTEN}platforms:\n  canon:\n    enabled: true  # on\n")
        .replace("[zzz-tool, aaa-tool]", "[canon-hermes, zzz-tool]");
    fs::write(s.hermes_home.join("config.yaml"), &ready).expect("config");
    let out = s.install();
    assert_ok(&out);
    assert_eq!(lines(&out)[2..5], again_lines(&s)[2..5]);
    assert_eq!(
        fs::read_to_string(s.hermes_home.join("config.yaml")).expect("config"),
        ready
    );
}

#[test]
fn env_file_lines_are_kept_and_an_existing_access_rule_wins() {
    let s = Scratch::new();
    let env = "# secrets\nexport OPENAI_API_KEY=sk-x\nCANON_AGENT=\"my agent\"\n\nOTHER=1";
    fs::write(s.hermes_home.join(".env"), env).expect(".env");
    fs::set_permissions(
        s.hermes_home.join(".env"),
        fs::Permissions::from_mode(0o640),
    )
    .expect("chmod");
    assert_ok(&s.install());
    assert_eq!(
        fs::read_to_string(s.hermes_home.join(".env")).expect(".env"),
        format!("{env}\nCANON_ALLOW_ALL_USERS=true\n")
    );
    let mode = fs::metadata(s.hermes_home.join(".env"))
        .expect(".env")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o640, "an existing .env keeps its mode");

    for existing in [
        "CANON_ALLOWED_USERS=u1,u2\n",
        "CANON_ALLOW_ALL_USERS=false\n",
    ] {
        let s = Scratch::new();
        fs::write(s.hermes_home.join(".env"), existing).expect(".env");
        let out = s.install();
        assert_ok(&out);
        assert!(lines(&out).contains(&"Canon access env already configured.".to_owned()));
        assert_eq!(
            fs::read_to_string(s.hermes_home.join(".env")).expect(".env"),
            existing
        );
    }
    // The process environment counts too, and nothing is written then.
    let s = Scratch::new();
    let python = hermes_python();
    let out = s.run_bin(
        env!("CARGO_BIN_EXE_canon-hermes"),
        &["install", "--python", python.to_str().expect("utf-8")],
        &[("CANON_ALLOWED_USERS", " u9 ")],
    );
    assert_ok(&out);
    assert!(lines(&out).contains(&"Canon access env already configured.".to_owned()));
    assert!(!s.hermes_home.join(".env").exists());
}

fn assert_refused(s: &Scratch, out: &Output, message: &str, before: &BTreeMap<PathBuf, String>) {
    assert_eq!(out.status.code(), Some(1), "{}{}", stdout(out), stderr(out));
    assert_eq!(stderr(out), format!("{message}\n"));
    assert_eq!(&s.snapshot(), before, "a refused install changes nothing");
}

#[test]
fn unsupported_hosts_are_refused_before_anything_is_written() {
    let s = Scratch::new();
    fs::write(s.hermes_home.join("config.yaml"), HAND_WRITTEN).expect("config");
    let no_hermes = fake_venv(s.dir.path(), false, &[]);
    let before = s.snapshot();
    let out = s.install_with(&no_hermes);
    let python = hermes_python_says(&s, "import sys; print('%d.%d.%d' % sys.version_info[:3])");
    let python = python.trim();
    assert_refused(
        &s,
        &out,
        &format!(
            "Unsupported Hermes host: hermes-agent not installed on Python {python}. \
             canon-hermes {VERSION} supports exactly hermes-agent 0.19.0 on Python 3.11."
        ),
        &before,
    );
    assert_eq!(lines(&out), [profile_line(&s)]);

    let s = Scratch::new();
    let old = fake_venv(
        s.dir.path(),
        true,
        &[(
            "hermes_agent-0.18.2.dist-info/METADATA",
            "Metadata-Version: 2.1\nName: hermes-agent\nVersion: 0.18.2\n",
        )],
    );
    let before = s.snapshot();
    let out = s.install_with(&old);
    assert_refused(
        &s,
        &out,
        &format!(
            "Unsupported Hermes host: hermes-agent 0.18.2 on Python {python}. \
             canon-hermes {VERSION} supports exactly hermes-agent 0.19.0 on Python 3.11."
        ),
        &before,
    );
}

#[test]
fn a_shadowing_pip_plugin_and_multiplexing_are_warned_about() {
    let s = Scratch::new();
    fs::write(
        s.hermes_home.join("config.yaml"),
        "gateway:\n  multiplex_profiles: true\n",
    )
    .expect("config");
    let shadowed = fake_venv(
        s.dir.path(),
        true,
        &[
            (
                "canon_hermes_plugin-0.14.1.dist-info/METADATA",
                "Metadata-Version: 2.1\nName: canon-hermes-plugin\nVersion: 0.14.1\n",
            ),
            (
                "canon_hermes_plugin-0.14.1.dist-info/entry_points.txt",
                "[hermes_agent.plugins]\ncanon-hermes = canon_hermes_plugin\n",
            ),
        ],
    );
    let out = s.install_with(&shadowed);
    assert_ok(&out);
    let mut expected = first_lines(&s);
    expected.extend([
        "⚠ gateway.multiplex_profiles is enabled; Canon refuses to start until it is set to false"
            .to_owned(),
        "⚠ canon-hermes-plugin 0.14.1 is installed in the Hermes environment and overrides this \
         plugin; uninstall it (pip uninstall canon-hermes-plugin)"
            .to_owned(),
    ]);
    assert_eq!(lines(&out), expected);
    // install never changes the multiplex setting.
    let said = hermes_python_says(
        &s,
        "from hermes_cli.config import load_config\n\
         print(load_config()['gateway']['multiplex_profiles'])\n",
    );
    assert_eq!(said.trim(), "True");
}

#[test]
fn a_missing_profile_is_refused() {
    let s = Scratch::new();
    let before = s.snapshot();
    let out = s.run(&["install", "--profile", "nope"]);
    assert_refused(
        &s,
        &out,
        "Profile 'nope' does not exist. Create it with: hermes profile create nope",
        &before,
    );
    assert_eq!(stdout(&out), "");
    // HERMES_HOME naming a profile directory that does not exist.
    let gone = s.dir.path().join("root/profiles/gone");
    let out = s.run_bin(
        env!("CARGO_BIN_EXE_canon-hermes"),
        &["install"],
        &[("HERMES_HOME", gone.to_str().expect("utf-8"))],
    );
    assert_refused(
        &s,
        &out,
        "Profile 'gone' does not exist. Create it with: hermes profile create gone",
        &before,
    );
}

#[test]
fn a_named_profile_is_installed_into_its_own_home() {
    let s = Scratch::new();
    let work = s.hermes_home.join("profiles/work");
    fs::create_dir_all(&work).expect("profile");
    let python = hermes_python();
    let out = s.run(&[
        "install",
        "--profile",
        "work",
        "--python",
        python.to_str().expect("utf-8"),
    ]);
    assert_ok(&out);
    assert_eq!(
        lines(&out)[0],
        format!("Hermes profile: work ({})", work.display())
    );
    assert!(work.join("plugins/canon-hermes/manifest.json").is_file());
    assert!(!s.plugin_dir().exists(), "the root profile is untouched");
}

#[test]
fn a_foreign_plugin_or_a_link_in_the_shim_directory_is_refused() {
    let s = Scratch::new();
    fs::create_dir_all(s.plugin_dir()).expect("plugin dir");
    fs::write(
        s.plugin_dir().join("plugin.yaml"),
        "name: someone-else\nkind: platform\n",
    )
    .expect("yaml");
    let before = s.snapshot();
    let out = s.install();
    assert_refused(
        &s,
        &out,
        &format!(
            "Refusing to overwrite {}: not written by canon-hermes",
            s.plugin_dir().display()
        ),
        &before,
    );

    let s = Scratch::new();
    assert_ok(&s.install());
    let busy = s.plugin_dir().join("_busy.py");
    fs::remove_file(&busy).expect("remove");
    std::os::unix::fs::symlink(s.dir.path().join("elsewhere.py"), &busy).expect("symlink");
    let before = s.snapshot();
    let out = s.install();
    assert_refused(
        &s,
        &out,
        &format!(
            "Refusing to write {}: it is a symbolic link",
            busy.display()
        ),
        &before,
    );

    let s = Scratch::new();
    fs::create_dir_all(s.hermes_home.join("plugins")).expect("plugins");
    fs::create_dir_all(s.dir.path().join("shared")).expect("shared");
    std::os::unix::fs::symlink(s.dir.path().join("shared"), s.plugin_dir()).expect("symlink");
    let before = s.snapshot();
    let out = s.install();
    assert_refused(
        &s,
        &out,
        &format!(
            "Refusing to write {}: it is a symbolic link",
            s.plugin_dir().display()
        ),
        &before,
    );
}

#[test]
fn install_without_a_python_or_with_setup_changes_nothing() {
    let s = Scratch::new();
    let before = s.snapshot();
    let out = s.run(&["install", "--python", "/nonexistent/python"]);
    assert_refused(
        &s,
        &out,
        "Could not locate the Hermes Python environment; pass --python <path to the Hermes venv \
         python> (/nonexistent/python is not an executable file)",
        &before,
    );
    // No --python, no HERMES_PYTHON, no hermes on PATH, no ~/.hermes/hermes-agent venv.
    let out = s.run_bin(
        env!("CARGO_BIN_EXE_canon-hermes"),
        &["install"],
        &[("PATH", "/nonexistent")],
    );
    assert_refused(
        &s,
        &out,
        "Could not locate the Hermes Python environment; pass --python <path to the Hermes venv python>",
        &before,
    );
    // With --setup too: the install fails before anything, and setup never starts.
    let out = s.run(&["install", "--setup", "--python", "/nonexistent/python"]);
    assert_refused(
        &s,
        &out,
        "Could not locate the Hermes Python environment; pass --python <path to the Hermes venv \
         python> (/nonexistent/python is not an executable file)",
        &before,
    );
    assert!(!stdout(&out).contains("Canon Setup"), "{}", stdout(&out));
}

#[test]
fn an_unreadable_config_is_refused_not_replaced() {
    let s = Scratch::new();
    fs::write(s.hermes_home.join("config.yaml"), "plugins: [unclosed\n").expect("config");
    let before = s.snapshot();
    let out = s.install();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with(&format!(
            "{} cannot be read: ",
            s.hermes_home.join("config.yaml").display()
        )),
        "{}",
        stderr(&out)
    );
    assert_eq!(s.snapshot(), before);
}

#[test]
fn the_alias_binary_is_the_same_program() {
    let s = Scratch::new();
    let alias = env!("CARGO_BIN_EXE_canon-hermes-plugin");
    let out = s.run_bin(alias, &["--version"], &[]);
    assert_eq!(stdout(&out), format!("canon-hermes {VERSION}\n"));
    let out = s.run_bin(alias, &["install", "--help"], &[]);
    assert!(
        stdout(&out).contains("Usage: canon-hermes-plugin install [OPTIONS]"),
        "{}",
        stdout(&out)
    );
    let python = hermes_python();
    let out = s.run_bin(
        alias,
        &["install", "--python", python.to_str().expect("utf-8")],
        &[],
    );
    assert_ok(&out);
    assert_eq!(lines(&out), first_lines(&s));
    let manifest: Value =
        serde_json::from_slice(&fs::read(s.plugin_dir().join("manifest.json")).expect("manifest"))
            .expect("JSON");
    assert_eq!(
        manifest["binary"], alias,
        "the manifest names the binary that installed it"
    );
}

#[test]
fn the_command_line_surface() {
    let s = Scratch::new();
    let out = s.run(&["--version"]);
    assert_eq!(
        (out.status.code(), stdout(&out)),
        (Some(0), format!("canon-hermes {VERSION}\n"))
    );
    let out = s.run(&[]);
    assert_eq!(out.status.code(), Some(2), "a subcommand is required");
    let out = s.run(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = stdout(&out);
    // The column clap aligns the help to depends on the longest command name.
    assert!(
        help.lines().any(|l| {
            l.split_whitespace().collect::<Vec<_>>()
                == ["install", "Enable", "the", "Canon", "Hermes", "plugin"]
        }),
        "{help}"
    );
    assert!(!help.contains("serve"), "serve is hidden: {help}");
    let out = s.run(&["install", "--help"]);
    assert!(stdout(&out).contains(
        "--setup           Register or reconnect a Canon agent after enabling the plugin"
    ));
    for usage in [
        &["serve"][..],
        &["install", "--bogus"],
        &["card", "validate", "a", "b"],
    ] {
        assert_eq!(s.run(usage).status.code(), Some(2), "{usage:?}");
    }
}

#[test]
fn the_harness_installs_with_the_binary() {
    // The real-gateway tests install the shim with `canon-hermes install`, as an operator does.
    let s = Scratch::new();
    let said = install_shim(&s.hermes_home);
    assert!(said.starts_with(&profile_line(&s)), "{said}");
}
