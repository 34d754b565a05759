//! `canon-hermes install` (cli.md §3) into scratch Hermes profiles with the real hermes-agent
//! 0.19.0 venv: the printed lines, the files and their modes, the binary's own copy (the plugin
//! runs it after the binary it was installed from is gone), idempotence byte for byte, a
//! hand-written config.yaml kept byte for byte but for the keys install names (and its
//! fallbacks), the `.env` rule, and each refusal with nothing changed. Hosts that are not the
//! audited one are small venvs made from the venv's Python: one without Hermes, and ones that
//! see the real Hermes through a `.pth` file with a fake distribution in front of it (another
//! hermes-agent version, or the 0.14.1 `canon-hermes-plugin` entry point).

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
pub(crate) struct Scratch {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) hermes_home: PathBuf,
}

impl Scratch {
    pub(crate) fn new() -> Scratch {
        let dir = tempfile::tempdir().expect("scratch dir");
        let hermes_home = dir.path().join("hermes");
        fs::create_dir_all(&hermes_home).expect("the profile home");
        Scratch { dir, hermes_home }
    }

    pub(crate) fn plugin_dir(&self) -> PathBuf {
        self.hermes_home.join("plugins/canon-hermes")
    }

    /// `canon-hermes <args>` with this profile as `HERMES_HOME`.
    pub(crate) fn run(&self, args: &[&str]) -> Output {
        self.run_bin(env!("CARGO_BIN_EXE_canon-hermes"), args, &[])
    }

    pub(crate) fn run_bin(&self, bin: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
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
    pub(crate) fn install(&self) -> Output {
        let python = hermes_python();
        self.run(&["install", "--python", python.to_str().expect("utf-8 path")])
    }

    fn install_with(&self, python: &Path) -> Output {
        self.run(&["install", "--python", python.to_str().expect("utf-8 path")])
    }

    pub(crate) fn config(&self) -> PathBuf {
        self.hermes_home.join("config.yaml")
    }

    /// Every file, directory and link under the scratch `HOME`: mode and content hash.
    pub(crate) fn snapshot(&self) -> BTreeMap<PathBuf, String> {
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

pub(crate) fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub(crate) fn lines(out: &Output) -> Vec<String> {
    stdout(out).lines().map(str::to_owned).collect()
}

/// The line install prints when the gateway must restart, for the default profile.
pub(crate) const RESTART: &str =
    "Restart the Hermes gateway to load the Canon plugin: hermes gateway restart";

pub(crate) fn profile_line(s: &Scratch) -> String {
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
        RESTART.into(),
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

pub(crate) fn assert_ok(out: &Output) {
    assert!(
        out.status.success(),
        "install failed ({}): {}{}",
        out.status,
        stdout(out),
        stderr(out)
    );
}

/// Python in the venv with `HERMES_HOME` set; returns stdout.
pub(crate) fn hermes_python_says(s: &Scratch, code: &str) -> String {
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
            "bin dir 755",
            "bin/canon-hermes file 755",
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
    // The binary's own copy, named relative to the plugin directory and listed with the files.
    assert_eq!(manifest["binary"], "bin/canon-hermes");
    assert!(same_bytes(
        &dir.join("bin/canon-hermes"),
        Path::new(env!("CARGO_BIN_EXE_canon-hermes"))
    ));
    assert_eq!(
        manifest["files"].as_array().and_then(|f| f.last()),
        Some(&Value::from("bin/canon-hermes"))
    );
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
    expected.insert(6, RESTART.into());
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

/// A config written by hand: comments, blank lines, four-space and odd indentation, flush
/// sequences, quoting, unrelated keys around the sections install edits, CRLF-free but with no
/// final line break.
const CAREFUL: &str = "\
# Hermes, by hand.

model:
    provider: custom      # local
    default: 'fake-model'

plugins:
    disabled:
    - old-tool
    # enabled comes next, one day

platforms:
    telegram:
       enabled: false   # odd indentation, kept
    # canon goes here

custom_list: [3, 1, 2]
zeta: \"last\"";

/// `text` with `inserted` put right after `after` (a whole line).
fn with_lines_after(text: &str, after: &str, inserted: &str) -> String {
    let at = text.find(after).expect("the anchor line") + after.len();
    format!("{}{inserted}{}", &text[..at], &text[at..])
}

#[test]
fn hand_written_config_keeps_every_byte_but_the_keys_install_names() {
    // Flow lists stay flow lists and get the plugin at their end; every other byte stays.
    let s = Scratch::new();
    fs::write(s.config(), HAND_WRITTEN).expect("config");
    assert_ok(&s.install());
    assert_eq!(
        fs::read_to_string(s.config()).expect("config"),
        HAND_WRITTEN.replace("[zzz-tool, aaa-tool]", "[zzz-tool, aaa-tool, canon-hermes]")
            + "platforms:\n  canon:\n    enabled: true\n"
    );

    // A config that already has both entries is not rewritten, and nothing is kept aside.
    let s = Scratch::new();
    let ready = format!("{HAND_WRITTEN}platforms:\n  canon:\n    enabled: true  # on\n")
        .replace("[zzz-tool, aaa-tool]", "[canon-hermes, zzz-tool]");
    fs::write(s.config(), &ready).expect("config");
    let out = s.install();
    assert_ok(&out);
    assert_eq!(lines(&out)[2..5], again_lines(&s)[2..5]);
    assert_eq!(fs::read_to_string(s.config()).expect("config"), ready);
    assert!(!s
        .hermes_home
        .join("config.yaml.before-canon-hermes")
        .exists());
}

#[test]
fn install_and_uninstall_change_only_their_keys_keep_one_backup_and_undo_each_other() {
    let s = Scratch::new();
    fs::write(s.config(), CAREFUL).expect("config");
    fs::set_permissions(s.config(), fs::Permissions::from_mode(0o640)).expect("chmod");
    let backup = s.hermes_home.join("config.yaml.before-canon-hermes");
    let out = s.install();
    assert_ok(&out);
    let mut expected = first_lines(&s);
    expected.insert(
        4,
        format!("Kept the original Hermes config as {}", backup.display()),
    );
    assert_eq!(lines(&out), expected);
    // The plugin joins `plugins` in the file's own indentation and sequence style, `canon` joins
    // `platforms` after its last key; nothing else moves.
    let installed = with_lines_after(
        &with_lines_after(
            CAREFUL,
            "    - old-tool\n",
            "    enabled:\n    - canon-hermes\n",
        ),
        "       enabled: false   # odd indentation, kept\n",
        "    canon:\n        enabled: true\n",
    );
    assert_eq!(fs::read_to_string(s.config()).expect("config"), installed);
    let mode = |path: &Path| fs::metadata(path).expect("mode").permissions().mode() & 0o777;
    assert_eq!(mode(&s.config()), 0o640, "config.yaml keeps its mode");
    assert_eq!(fs::read_to_string(&backup).expect("backup"), CAREFUL);
    assert_eq!(mode(&backup), 0o600);
    let kept: Vec<String> = fs::read_dir(&s.hermes_home)
        .expect("the profile")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.contains("canon-hermes") || name.ends_with(".tmp"))
        .collect();
    assert_eq!(
        kept,
        ["config.yaml.before-canon-hermes"],
        "one backup, no temp file"
    );
    // Hermes reads what the plugin needs.
    let said = hermes_python_says(
        &s,
        "from hermes_cli.config import load_config\n\
         c = load_config()\n\
         print(c['plugins']['enabled'], c['platforms']['canon']['enabled'], c['zeta'])\n",
    );
    assert_eq!(said.trim(), "['canon-hermes'] True last");

    // A second install changes nothing, byte for byte.
    let before = s.snapshot();
    let out = s.install();
    assert_ok(&out);
    assert_eq!(lines(&out), again_lines(&s));
    assert_eq!(s.snapshot(), before);

    // Uninstall gives the original bytes back; the backup is the first one, untouched.
    let out = s.run(&[
        "uninstall",
        "--python",
        hermes_python().to_str().expect("utf-8"),
    ]);
    assert_ok(&out);
    assert_eq!(fs::read_to_string(s.config()).expect("config"), CAREFUL);
    assert_eq!(fs::read_to_string(&backup).expect("backup"), CAREFUL);
    assert!(!s.plugin_dir().exists());
}

#[test]
fn a_config_the_editor_does_not_read_goes_through_ruamel_then_save_config() {
    // An anchor: canon-hermes' editor refuses it, the ruamel.yaml round trip keeps the comments.
    let s = Scratch::new();
    let anchored = "# tools\nbase: &base\n  x: 1\nplugins: &p\n  enabled: [a]  # mine\n";
    fs::write(s.config(), anchored).expect("config");
    let out = s.install();
    assert_ok(&out);
    let backup = s.hermes_home.join("config.yaml.before-canon-hermes");
    assert!(
        lines(&out).contains(&format!(
            "⚠ Hermes config edited with ruamel.yaml (canon-hermes does not edit an anchor on \
             line 4): comments kept, indentation may have changed; the original is {}",
            backup.display()
        )),
        "{}",
        stdout(&out)
    );
    // ruamel.yaml drops anchors nothing refers to; comments and values stay.
    let written = fs::read_to_string(s.config()).expect("config");
    assert!(written.starts_with("# tools\nbase:\n"), "{written}");
    assert!(written.contains("# mine"), "{written}");
    assert_eq!(fs::read_to_string(&backup).expect("backup"), anchored);
    let said = hermes_python_says(
        &s,
        "from hermes_cli.config import load_config\n\
         c = load_config()\n\
         print(c['plugins']['enabled'], c['platforms']['canon']['enabled'], c['base'])\n",
    );
    assert_eq!(said.trim(), "['a', 'canon-hermes'] True {'x': 1}");

    // Without ruamel.yaml: Hermes' save_config, after the backup, and the operator is told.
    let s = Scratch::new();
    fs::write(s.config(), anchored).expect("config");
    let no_ruamel = fake_venv(
        s.dir.path(),
        true,
        &[(
            "ruamel/__init__.py",
            "raise ImportError('hidden by the test')\n",
        )],
    );
    let out = s.install_with(&no_ruamel);
    assert_ok(&out);
    let backup = s.hermes_home.join("config.yaml.before-canon-hermes");
    assert!(
        lines(&out).contains(&format!(
            "⚠ Hermes config rewritten by Hermes' save_config (canon-hermes does not edit an \
             anchor on line 4): its comments and layout were not kept; the original is {}",
            backup.display()
        )),
        "{}",
        stdout(&out)
    );
    assert_eq!(fs::read_to_string(&backup).expect("backup"), anchored);
    assert!(!fs::read_to_string(s.config())
        .expect("config")
        .contains("# tools"));
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
    // The original is kept once, private: it holds secrets.
    let backup = s.hermes_home.join(".env.before-canon-hermes");
    assert_eq!(fs::read_to_string(&backup).expect("backup"), env);
    assert_eq!(
        fs::metadata(&backup).expect("backup").permissions().mode() & 0o777,
        0o600
    );

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
    expected.insert(
        4,
        format!(
            "Kept the original Hermes config as {}",
            s.hermes_home
                .join("config.yaml.before-canon-hermes")
                .display()
        ),
    );
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
    assert!(lines(&out).contains(
        &"Restart the Hermes gateway to load the Canon plugin: hermes -p work gateway restart"
            .to_owned()
    ));
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
    assert_eq!(stdout(&out), format!("canon-hermes-plugin {VERSION}\n"));
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
    assert_eq!(manifest["binary"], "bin/canon-hermes");
    assert!(
        same_bytes(&s.plugin_dir().join("bin/canon-hermes"), Path::new(alias)),
        "the copy is the binary that installed it"
    );
}

/// Whether two files hold the same bytes.
pub(crate) fn same_bytes(a: &Path, b: &Path) -> bool {
    fs::read(a).expect("a file") == fs::read(b).expect("a file")
}

/// What the installed shim would spawn (`_daemon.binary()`), without `CANON_HERMES_BIN`.
fn shim_binary(s: &Scratch) -> String {
    let code = format!(
        "{}print(shim._daemon.binary())\n",
        super::gateway_support::shim_prelude(&s.plugin_dir())
    );
    hermes_python_says(s, &code).trim().to_owned()
}

#[test]
fn the_plugin_runs_its_own_copy_once_the_installing_binary_is_gone() {
    let s = Scratch::new();
    let elsewhere = s.dir.path().join("build/canon-hermes");
    fs::create_dir_all(elsewhere.parent().expect("a parent")).expect("mkdir");
    fs::copy(env!("CARGO_BIN_EXE_canon-hermes"), &elsewhere).expect("a copy to install from");
    let python = hermes_python();
    let out = s.run_bin(
        elsewhere.to_str().expect("utf-8"),
        &["install", "--python", python.to_str().expect("utf-8")],
        &[],
    );
    assert_ok(&out);
    fs::remove_file(&elsewhere).expect("cargo clean, or a removed checkout");
    let binary = shim_binary(&s);
    assert_eq!(
        Path::new(&binary),
        s.plugin_dir()
            .join("bin/canon-hermes")
            .canonicalize()
            .expect("the copy")
    );
    let out = Command::new(&binary)
        .arg("--version")
        .output()
        .expect("the copy runs");
    assert_eq!(stdout(&out), format!("canon-hermes {VERSION}\n"));
    // An absolute path in an older manifest still works, and CANON_HERMES_BIN still wins.
    let path = s.plugin_dir().join("manifest.json");
    let mut manifest: Value =
        serde_json::from_slice(&fs::read(&path).expect("manifest")).expect("JSON");
    manifest["binary"] = Value::from("/opt/canon/bin/canon-hermes");
    fs::write(&path, manifest.to_string()).expect("manifest");
    assert_eq!(shim_binary(&s), "/opt/canon/bin/canon-hermes");
    let code = format!(
        "import os\nos.environ['CANON_HERMES_BIN'] = '/x/canon-hermes'\n{}print(shim._daemon.binary())\n",
        super::gateway_support::shim_prelude(&s.plugin_dir())
    );
    assert_eq!(hermes_python_says(&s, &code).trim(), "/x/canon-hermes");
}

#[test]
fn another_binary_replaces_the_copy_says_to_restart_and_leaves_a_running_copy_its_file() {
    let s = Scratch::new();
    assert_ok(&s.install());
    let copy = s.plugin_dir().join("bin/canon-hermes");
    // What a running daemon holds: the file as it was.
    let mut running = fs::File::open(&copy).expect("the copy");
    let inode = |path: &Path| {
        use std::os::unix::fs::MetadataExt as _;
        fs::metadata(path).expect("metadata").ino()
    };
    let before = inode(&copy);
    let python = hermes_python();
    let alias = env!("CARGO_BIN_EXE_canon-hermes-plugin");
    let out = s.run_bin(
        alias,
        &["install", "--python", python.to_str().expect("utf-8")],
        &[],
    );
    assert_ok(&out);
    let mut expected = again_lines(&s);
    expected[1] = format!(
        "Installed Canon shim: {} (canon-hermes {VERSION})",
        s.plugin_dir().display()
    );
    expected.insert(6, RESTART.into());
    assert_eq!(lines(&out), expected);
    assert!(same_bytes(&copy, Path::new(alias)));
    assert_ne!(inode(&copy), before, "a new file was renamed in");
    let mut held = Vec::new();
    std::io::Read::read_to_end(&mut running, &mut held).expect("read the old file");
    assert!(held == fs::read(env!("CARGO_BIN_EXE_canon-hermes")).expect("the binary"));
}

#[test]
fn install_from_a_venv_s_bin_takes_that_venv_s_python() {
    // As a wheel installs it: the binary beside the venv's python, no --python, no hermes on
    // PATH, no HERMES_PYTHON.
    let s = Scratch::new();
    let python = fake_venv(s.dir.path(), true, &[]);
    let binary = python.with_file_name("canon-hermes");
    fs::copy(env!("CARGO_BIN_EXE_canon-hermes"), &binary).expect("the binary in the venv");
    let out = s.run_bin(
        binary.to_str().expect("utf-8"),
        &["install"],
        &[("PATH", "/usr/bin:/bin")],
    );
    assert_ok(&out);
    assert_eq!(lines(&out), first_lines(&s));
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
