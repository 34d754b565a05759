//! `canon-hermes doctor` (cli.md §9) on scratch Hermes profiles with the real hermes-agent 0.19.0
//! venv. The ready profile is made as an operator makes it: a real `canon-hermes install`, a
//! Canon profile in a scratch `CANON_HOME/agents.json` named by `CANON_AGENT` in the profile's
//! `.env`, and the recommended settings (approvals manual, streaming on). Each other test breaks
//! exactly one thing and expects exactly the ready lines with that one line changed, plus the
//! hint it calls for. Other hosts are small venvs made from the venv's Python (as in
//! `install.rs`); `--online` runs against canon-sim's health endpoints.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use canon_sim::config::SimConfig;
use canon_sim::{Sim, SimHandle};
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};

use super::gateway_support::{fake_venv, hermes_bin, hermes_python, install_shim};

const VERSION: &str = env!("CARGO_PKG_VERSION");
const READY: &str = "Canon Hermes plugin looks ready.";
const NOT_READY: &str = "Canon Hermes plugin needs setup.";
/// The Canon profile of the ready scratch, and its API key (which no output may contain).
const PROFILE: &str = "canon-test";
const SECRET: &str = "sk-doctor-test-secret-key";
/// The no-platform trap (the plugin or the platform off, so the gateway starts without Canon,
/// which looks like a hang), called out after the table.
const NO_PLATFORM: &str = "⚠ Hermes would start with no Canon platform: run canon-hermes install";

/// The recommended settings, written after `install` has enabled the plugin and the platform
/// (install keeps them; this is the file it leaves, minus what Hermes adds).
const READY_CONFIG: &str = "\
approvals:
  mode: manual
streaming:
  enabled: true
plugins:
  enabled:
    - canon-hermes
platforms:
  canon:
    enabled: true
";

/// Variables of the test process that would change what doctor resolves.
const CLEARED: [&str; 14] = [
    "CANON_API_KEY",
    "CANON_AGENT",
    "CANON_AGENTS_JSON_BOOTSTRAP",
    "CANON_AGENTS_FILE",
    "CANON_AGENTS_PATH",
    "CANON_ENVIRONMENT_ID",
    "CANON_BASE_URL",
    "CANON_STREAM_URL",
    "CANON_RTDB_URL",
    "CANON_FIREBASE_API_KEY",
    "HERMES_PYTHON",
    "GATEWAY_MULTIPLEX_PROFILES",
    "HERMES_S6_SUPERVISED_CHILD",
    "CANON_HERMES_BIN",
];

/// A scratch `HOME` with a profile home `hermes/` and a Canon home `canon/` in it.
struct Scratch {
    dir: tempfile::TempDir,
    hermes_home: PathBuf,
    canon_home: PathBuf,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir().expect("scratch dir");
        let hermes_home = dir.path().join("hermes");
        let canon_home = dir.path().join("canon");
        fs::create_dir_all(&hermes_home).expect("the profile home");
        fs::create_dir_all(&canon_home).expect("the Canon home");
        Scratch {
            dir,
            hermes_home,
            canon_home,
        }
    }

    /// Installed with `canon-hermes install`, the recommended settings, and [`PROFILE`] as the
    /// profile's `CANON_AGENT` with an offline snapshot (nothing listens on port 9).
    fn ready() -> Scratch {
        let s = Scratch::new();
        install_shim(&s.hermes_home);
        s.write_config(READY_CONFIG);
        s.save_agents(json!({PROFILE: offline_profile()}));
        let env = s.hermes_home.join(".env");
        let mut text = fs::read_to_string(&env).expect("install wrote .env");
        text.push_str(&format!("CANON_AGENT={PROFILE}\n"));
        fs::write(env, text).expect(".env");
        s
    }

    fn plugin_dir(&self) -> PathBuf {
        self.hermes_home.join("plugins/canon-hermes")
    }

    fn write_config(&self, text: &str) {
        fs::write(self.hermes_home.join("config.yaml"), text).expect("config.yaml");
    }

    fn save_agents(&self, agents: Value) {
        fs::write(self.canon_home.join("agents.json"), agents.to_string()).expect("agents.json");
    }

    /// `canon-hermes doctor --python <venv python> <args>`.
    fn doctor(&self, args: &[&str]) -> Output {
        self.doctor_with(&hermes_python(), args, &[])
    }

    fn doctor_with(&self, python: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
        let path = format!(
            "{}:/usr/bin:/bin",
            hermes_bin().parent().expect("the venv's bin").display()
        );
        let mut command = Command::new(env!("CARGO_BIN_EXE_canon-hermes"));
        command
            .arg("doctor")
            .arg("--python")
            .arg(python)
            .args(args)
            .current_dir(self.dir.path())
            .env("HOME", self.dir.path())
            .env("HERMES_HOME", &self.hermes_home)
            .env("CANON_HOME", &self.canon_home)
            .env("PATH", path);
        for name in CLEARED {
            command.env_remove(name);
        }
        let out = command
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .expect("canon-hermes doctor runs");
        for stream in [&out.stdout, &out.stderr] {
            assert!(
                !String::from_utf8_lossy(stream).contains(SECRET),
                "a secret was printed: {}",
                String::from_utf8_lossy(stream)
            );
        }
        out
    }

    /// Every file and directory under the scratch `HOME`: mode and content hash.
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
        let relative = path.strip_prefix(root).expect("under root").to_path_buf();
        let mode = meta.permissions().mode() & 0o7777;
        if meta.is_dir() {
            out.insert(relative, format!("dir {mode:o}"));
            walk(root, &path, out);
        } else {
            let digest = Sha256::digest(fs::read(&path).unwrap_or_default());
            out.insert(relative, format!("file {mode:o} {digest:x}"));
        }
    }
}

/// A Hermes profile snapshot for the packaged `canon-dev-v1` on loopback URLs.
fn offline_profile() -> Value {
    json!({
        "apiKey": SECRET,
        "agentId": "a-doctor",
        "agentName": "Doctor",
        "registeredAt": "2026-01-01T00:00:00Z",
        "clientType": "hermes",
        "environmentId": "canon-dev-v1",
        "baseUrl": "http://127.0.0.1:9",
        "streamUrl": "http://127.0.0.1:9",
        "rtdbUrl": "http://127.0.0.1:9/rtdb",
        "firebaseApiKey": "test-firebase-key",
    })
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn lines(out: &Output) -> Vec<String> {
    stdout(out).lines().map(str::to_owned).collect()
}

fn python_version() -> String {
    let out = Command::new(hermes_python())
        .args(["-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"])
        .output()
        .expect("python runs");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// What doctor prints on [`Scratch::ready`] (with `credentials` as the credentials line).
fn ready_lines(s: &Scratch, credentials: &str) -> Vec<String> {
    vec![
        format!("Hermes profile: default ({})", s.hermes_home.display()),
        format!("Canon Hermes plugin package: {VERSION}"),
        "Hermes package: 0.19.0".into(),
        format!(
            "Hermes host: supported (hermes-agent 0.19.0, Python {})",
            python_version()
        ),
        format!(
            "Hermes entry point: yes ({}, shim {VERSION})",
            s.plugin_dir().display()
        ),
        format!(
            "Hermes command: {} (same Python environment)",
            hermes_bin().display()
        ),
        "Plugin enabled: yes".into(),
        "Canon platform enabled: yes".into(),
        "Multiplex profiles: off".into(),
        "Approvals mode: manual".into(),
        "Streaming: on".into(),
        format!("Canon credentials: {credentials}"),
        "Tool-call activity hooks: yes".into(),
        READY.into(),
    ]
}

/// The ready lines with the lines named in `changes` set to their new values, `hints` before
/// the last line, and the verdict `ready`.
fn expected(s: &Scratch, changes: &[(&str, &str)], hints: &[&str], ready: bool) -> Vec<String> {
    let mut lines = ready_lines(s, &format!("yes {PROFILE}"));
    for (name, value) in changes {
        let prefix = format!("{name}: ");
        let line = lines
            .iter_mut()
            .find(|line| line.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no line {name}"));
        *line = format!("{prefix}{value}");
    }
    let last = lines.len() - 1;
    lines[last] = if ready { READY } else { NOT_READY }.to_owned();
    for (i, hint) in hints.iter().enumerate() {
        lines.insert(last + i, (*hint).to_owned());
    }
    lines
}

fn assert_doctor(out: &Output, expected: &[String]) {
    let code = if expected.last().map(String::as_str) == Some(READY) {
        0
    } else {
        1
    };
    assert_eq!(
        lines(out),
        expected,
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(code));
}

/// The command line of a fake venv: the `hermes` on PATH is the real venv's.
fn other_launcher(python: &Path) -> String {
    format!(
        "{} (launcher: {}; current: {})",
        hermes_bin().display(),
        hermes_python().display(),
        python.display()
    )
}

#[test]
fn a_ready_profile_passes_every_check_and_doctor_changes_nothing() {
    let s = Scratch::ready();
    let before = s.snapshot();
    let out = s.doctor(&[]);
    assert_doctor(&out, &ready_lines(&s, &format!("yes {PROFILE}")));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    assert_eq!(s.snapshot(), before, "doctor writes nothing");
    // The alias binary is the same program.
    let alias = Command::new(env!("CARGO_BIN_EXE_canon-hermes-plugin"))
        .args(["doctor", "--help"])
        .output()
        .expect("runs");
    assert!(stdout(&alias).contains("Check Canon Hermes plugin setup"));
}

/// The daemon recorded gaps in the event stream (Canon's replay expired, so messages in the
/// window were never delivered): doctor reports them after the table, with the window and the
/// conversations of the last one, and a hint; readiness is unchanged. Records of two agents of
/// the Canon home are counted together, an unreadable one is skipped.
#[test]
fn recorded_stream_gaps_get_a_line_and_a_hint() {
    use canon_inbox::gaps::{file_name, GapRecord};
    let s = Scratch::ready();
    let gap = |gaps, to: &str| GapRecord {
        gaps,
        last: json!({"count": 1, "from": "2026-12-07T10:00:00.000Z", "to": to,
                     "conversationIds": ["c1", "c2"], "moreConversations": 0})
        .as_object()
        .cloned()
        .expect("an object"),
    };
    let write = |scope: &str, record: &GapRecord| {
        fs::write(s.canon_home.join(file_name(scope)), record.render()).expect("a record");
    };
    write("a", &gap(2, "2026-12-07T10:05:00.000Z"));
    write("b", &gap(1, "2026-12-07T09:00:00.000Z"));
    fs::write(s.canon_home.join(file_name("c")), "not a record").expect("junk");
    let out = s.doctor(&[]);
    let window = "between 2026-12-07T10:00:00.000Z and 2026-12-07T10:05:00.000Z";
    let mut want = ready_lines(&s, &format!("yes {PROFILE}"));
    let last = want.len() - 1;
    want.insert(
        last,
        format!("Missed Canon events: 3 times; last {window} in c1, c2"),
    );
    want.insert(
        last + 1,
        format!(
            "⚠ Canon's event replay expired 3 times: messages sent in those conversations \
             {window} may never have reached the agent (Canon does not send them again). Look \
             there for unanswered messages."
        ),
    );
    assert_doctor(&out, &want);
}

#[test]
fn a_fresh_profile_needs_install_and_credentials_and_is_left_as_it_was() {
    let s = Scratch::new();
    let before = s.snapshot();
    let out = s.doctor(&[]);
    let mut want = ready_lines(&s, "no (none)");
    want[4] = "Hermes entry point: no (shim not installed; run canon-hermes install)".into();
    want[6] = "Plugin enabled: no".into();
    want[7] = "Canon platform enabled: no".into();
    want[9] = "Approvals mode: smart (recommended: manual)".into();
    want[10] = "Streaming: off".into();
    want[13] = NO_PLATFORM.into();
    want.push(NOT_READY.into());
    assert_doctor(&out, &want);
    assert_eq!(s.snapshot(), before, "doctor writes nothing");
}

#[test]
fn missing_hermes_fails_the_package_host_config_and_hooks_lines() {
    let s = Scratch::ready();
    let python = fake_venv(s.dir.path(), false, &[]);
    let out = s.doctor_with(&python, &[], &[]);
    let mut want = expected(
        &s,
        &[
            ("Hermes package", "not installed"),
            (
                "Hermes host",
                &format!(
                    "unsupported (Unsupported Hermes host: hermes-agent not installed on Python {}. \
                     canon-hermes {VERSION} supports exactly hermes-agent 0.19.0 on Python 3.11.)",
                    python_version()
                ),
            ),
            ("Hermes command", &other_launcher(&python)),
            ("Tool-call activity hooks", "no"),
        ],
        &[],
        false,
    );
    // Lines 7–11 cannot be read without Hermes' config helpers.
    want.splice(
        6..11,
        ["Hermes config: unknown (Could not import Hermes config helpers: No module named 'hermes_cli')"
            .to_owned()],
    );
    assert_doctor(&out, &want);
}

#[test]
fn no_hermes_python_at_all_is_reported_not_fatal() {
    let s = Scratch::ready();
    let out = s.doctor_with(Path::new("/nonexistent/python"), &[], &[]);
    let missing = "Could not locate the Hermes Python environment; pass --python <path to the \
                   Hermes venv python> (/nonexistent/python is not an executable file)";
    let mut want = expected(
        &s,
        &[
            ("Hermes package", &format!("unknown ({missing})")),
            ("Hermes host", "unknown (no Hermes Python)"),
            (
                "Hermes command",
                &format!(
                    "{} (launcher: {}; current: unknown)",
                    hermes_bin().display(),
                    hermes_python().display()
                ),
            ),
            ("Tool-call activity hooks", "no"),
        ],
        &[],
        false,
    );
    want.splice(
        6..11,
        ["Hermes config: unknown (no Hermes Python)".to_owned()],
    );
    assert_doctor(&out, &want);
}

#[test]
fn an_unsupported_host_fails_only_the_host_line() {
    let s = Scratch::ready();
    let python = fake_venv(
        s.dir.path(),
        true,
        &[(
            "hermes_agent-0.18.2.dist-info/METADATA",
            "Metadata-Version: 2.1\nName: hermes-agent\nVersion: 0.18.2\n",
        )],
    );
    let out = s.doctor_with(&python, &[], &[]);
    let refusal = format!(
        "Unsupported Hermes host: hermes-agent 0.18.2 on Python {}. canon-hermes {VERSION} \
         supports exactly hermes-agent 0.19.0 on Python 3.11.",
        python_version()
    );
    assert_doctor(
        &out,
        &expected(
            &s,
            &[
                ("Hermes package", "0.18.2"),
                ("Hermes host", &format!("unsupported ({refusal})")),
                ("Hermes command", &other_launcher(&python)),
            ],
            &[],
            false,
        ),
    );
}

#[test]
fn a_source_checkout_is_named_and_refused_by_the_host_gate() {
    let s = Scratch::ready();
    // `hermes_cli` imports, but no hermes-agent distribution is installed.
    let python = fake_venv(s.dir.path(), false, &[("hermes_cli/__init__.py", "")]);
    let out = s.doctor_with(&python, &[], &[]);
    let text = lines(&out);
    assert_eq!(text[2], "Hermes package: source checkout");
    assert_eq!(
        text[3],
        format!(
            "Hermes host: unsupported (Unsupported Hermes host: hermes-agent source checkout on \
             Python {}. canon-hermes {VERSION} supports exactly hermes-agent 0.19.0 on Python \
             3.11.)",
            python_version()
        )
    );
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn no_shim_fails_only_the_entry_point_line() {
    let s = Scratch::ready();
    fs::remove_dir_all(s.plugin_dir()).expect("remove the shim");
    let out = s.doctor(&[]);
    assert_doctor(
        &out,
        &expected(
            &s,
            &[(
                "Hermes entry point",
                "no (shim not installed; run canon-hermes install)",
            )],
            &[],
            false,
        ),
    );
}

#[test]
fn a_stale_shim_fails_only_the_entry_point_line() {
    // A hand-edited module: the hash the shim would send is not this binary's.
    let s = Scratch::ready();
    fs::write(s.plugin_dir().join("_busy.py"), "# edited\n").expect("edit");
    let stale = format!(
        "no (shim files differ from the ones canon-hermes {VERSION} installs; run canon-hermes \
         install)"
    );
    assert_doctor(
        &s.doctor(&[]),
        &expected(&s, &[("Hermes entry point", &stale)], &[], false),
    );
    // An extra module is code the shim hashes too.
    let s = Scratch::ready();
    fs::write(s.plugin_dir().join("_extra.py"), "").expect("extra module");
    assert_doctor(
        &s.doctor(&[]),
        &expected(&s, &[("Hermes entry point", &stale)], &[], false),
    );

    // A shim another canon-hermes version installed.
    let s = Scratch::ready();
    let path = s.plugin_dir().join("manifest.json");
    let mut manifest: Value =
        serde_json::from_slice(&fs::read(&path).expect("manifest")).expect("JSON");
    manifest["binary_version"] = json!("0.0.9");
    fs::write(&path, manifest.to_string()).expect("manifest");
    assert_doctor(
        &s.doctor(&[]),
        &expected(
            &s,
            &[(
                "Hermes entry point",
                &format!(
                    "no (shim 0.0.9 does not match canon-hermes {VERSION}; run canon-hermes install)"
                ),
            )],
            &[],
            false,
        ),
    );

    // A manifest naming a binary that is gone.
    manifest["binary_version"] = json!(VERSION);
    manifest["binary"] = json!("/nonexistent/canon-hermes");
    fs::write(&path, manifest.to_string()).expect("manifest");
    assert_doctor(
        &s.doctor(&[]),
        &expected(
            &s,
            &[(
                "Hermes entry point",
                "no (shim binary /nonexistent/canon-hermes is not an executable file; run \
                 canon-hermes install)",
            )],
            &[],
            false,
        ),
    );
}

#[test]
fn another_installed_build_is_named_and_a_missing_copy_fails_the_entry_point_line() {
    // The plugin runs install's copy of the binary; doctor compares it with itself.
    let s = Scratch::ready();
    let copy = s.plugin_dir().join("bin/canon-hermes");
    fs::copy(env!("CARGO_BIN_EXE_canon-hermes-plugin"), &copy).expect("another build");
    assert_doctor(
        &s.doctor(&[]),
        &expected(
            &s,
            &[(
                "Hermes entry point",
                &format!(
                    "yes ({}, shim {VERSION}; installed binary {} differs from this canon-hermes \
                     {VERSION}; run canon-hermes install to upgrade)",
                    s.plugin_dir().display(),
                    copy.display()
                ),
            )],
            &[],
            true,
        ),
    );
    fs::remove_file(&copy).expect("remove the copy");
    assert_doctor(
        &s.doctor(&[]),
        &expected(
            &s,
            &[(
                "Hermes entry point",
                &format!(
                    "no (shim binary {} is not an executable file; run canon-hermes install)",
                    copy.display()
                ),
            )],
            &[],
            false,
        ),
    );
}

#[test]
fn a_shadowing_pip_plugin_fails_only_the_entry_point_line() {
    let s = Scratch::ready();
    let python = fake_venv(
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
    let out = s.doctor_with(&python, &[], &[]);
    assert_doctor(
        &out,
        &expected(
            &s,
            &[
                (
                    "Hermes entry point",
                    "no (canon-hermes-plugin 0.14.1 entry point overrides the shim)",
                ),
                ("Hermes command", &other_launcher(&python)),
            ],
            &["⚠ canon-hermes-plugin 0.14.1 is installed in the Hermes environment and overrides \
               this plugin; uninstall it (pip uninstall canon-hermes-plugin)"],
            false,
        ),
    );
}

#[test]
fn the_hermes_command_line_inspects_the_launcher_and_never_fails() {
    let s = Scratch::ready();
    let bin = s.dir.path().join("bin");
    fs::create_dir_all(&bin).expect("bin");
    let launcher = bin.join("hermes");
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let cases = [
        (
            "#!/bin/sh\nexec /opt/hermes \"$@\"\n",
            "non-Python launcher",
        ),
        ("\u{7f}ELF\u{2}\u{1}\u{1}", "unknown launcher"),
    ];
    for (text, kind) in cases {
        fs::write(&launcher, text).expect("launcher");
        fs::set_permissions(&launcher, fs::Permissions::from_mode(0o755)).expect("chmod");
        let out = s.doctor_with(&hermes_python(), &[], &[("PATH", &path)]);
        let value = format!("{} ({kind})", launcher.display());
        assert_doctor(
            &out,
            &expected(&s, &[("Hermes command", &value)], &[], true),
        );
    }
    // `hermes` runs another Python: informational, still ready.
    fs::write(&launcher, "#!/usr/bin/python3\n").expect("launcher");
    let out = s.doctor_with(&hermes_python(), &[], &[("PATH", &path)]);
    let value = format!(
        "{} (launcher: /usr/bin/python3; current: {})",
        launcher.display(),
        hermes_python().display()
    );
    assert_doctor(
        &out,
        &expected(&s, &[("Hermes command", &value)], &[], true),
    );
    // No `hermes` on PATH.
    let out = s.doctor_with(&hermes_python(), &[], &[("PATH", "/nonexistent")]);
    assert_doctor(
        &out,
        &expected(&s, &[("Hermes command", "not found on PATH")], &[], true),
    );
}

#[test]
fn plugin_not_enabled_fails_its_line_and_names_the_trap() {
    let s = Scratch::ready();
    s.write_config(&READY_CONFIG.replace("  enabled:\n    - canon-hermes\n", "  enabled: []\n"));
    assert_doctor(
        &s.doctor(&[]),
        &expected(&s, &[("Plugin enabled", "no")], &[NO_PLATFORM], false),
    );
    // Listed as disabled too: disabled wins, and install would not change it.
    let s = Scratch::ready();
    s.write_config(
        &READY_CONFIG.replace("plugins:\n", "plugins:\n  disabled:\n    - canon-hermes\n"),
    );
    assert_doctor(
        &s.doctor(&[]),
        &expected(
            &s,
            &[("Plugin enabled", "no")],
            &[
                "⚠ Hermes would start with no Canon platform: remove canon-hermes from \
               plugins.disabled (hermes plugins enable canon-hermes)",
            ],
            false,
        ),
    );
}

#[test]
fn platform_disabled_fails_its_line_and_names_the_trap() {
    for enabled in ["false", "\"true\""] {
        let s = Scratch::ready();
        s.write_config(&READY_CONFIG.replace(
            "canon:\n    enabled: true",
            &format!("canon:\n    enabled: {enabled}"),
        ));
        assert_doctor(
            &s.doctor(&[]),
            &expected(
                &s,
                &[("Canon platform enabled", "no")],
                &[NO_PLATFORM],
                false,
            ),
        );
    }
}

#[test]
fn multiplexing_fails_its_line() {
    let warning =
        "⚠ gateway.multiplex_profiles is enabled; Canon refuses to start until it is set to false";
    let s = Scratch::ready();
    s.write_config(&format!(
        "{READY_CONFIG}gateway:\n  multiplex_profiles: true\n"
    ));
    let want = expected(&s, &[("Multiplex profiles", "on")], &[warning], false);
    assert_doctor(&s.doctor(&[]), &want);
    // The environment variable Hermes reads first.
    let s = Scratch::ready();
    let out = s.doctor_with(
        &hermes_python(),
        &[],
        &[("GATEWAY_MULTIPLEX_PROFILES", "yes")],
    );
    assert_doctor(
        &out,
        &expected(&s, &[("Multiplex profiles", "on")], &[warning], false),
    );
}

#[test]
fn approvals_not_manual_is_a_warning_only() {
    for (mode, shown) in [("smart", "smart"), ("off", "off"), ("\"Smart \"", "smart")] {
        let s = Scratch::ready();
        s.write_config(&READY_CONFIG.replace("mode: manual", &format!("mode: {mode}")));
        let value = format!("{shown} (recommended: manual)");
        assert_doctor(
            &s.doctor(&[]),
            &expected(&s, &[("Approvals mode", &value)], &[], true),
        );
    }
}

#[test]
fn streaming_off_is_informational() {
    let s = Scratch::ready();
    s.write_config(&READY_CONFIG.replace("streaming:\n  enabled: true\n", ""));
    assert_doctor(
        &s.doctor(&[]),
        &expected(&s, &[("Streaming", "off")], &[], true),
    );
    // Hermes' own reading: the `mode` alias turns streaming on, `mode: off` off.
    let s = Scratch::ready();
    s.write_config(&READY_CONFIG.replace("enabled: true\nplugins", "mode: off\nplugins"));
    assert_doctor(
        &s.doctor(&[]),
        &expected(&s, &[("Streaming", "off")], &[], true),
    );
    s.write_config(&READY_CONFIG.replace("enabled: true\nplugins", "mode: auto\nplugins"));
    assert_doctor(&s.doctor(&[]), &expected(&s, &[], &[], true));
}

#[test]
fn no_credentials_fail_only_the_credentials_line() {
    let s = Scratch::ready();
    let env = s.hermes_home.join(".env");
    let text = fs::read_to_string(&env).expect(".env");
    fs::write(&env, text.replace(&format!("CANON_AGENT={PROFILE}\n"), "")).expect(".env");
    s.save_agents(json!({"coms": {"clientType": "coms", "apiKey": SECRET}}));
    assert_doctor(
        &s.doctor(&[]),
        &expected(&s, &[("Canon credentials", "no (none)")], &[], false),
    );
    // The one Hermes profile is used without a name, as the daemon does.
    s.save_agents(json!({"only": offline_profile()}));
    assert_doctor(
        &s.doctor(&[]),
        &expected(&s, &[("Canon credentials", "yes only")], &[], true),
    );
}

#[test]
fn bad_credentials_fail_with_the_resolver_s_exact_error() {
    let s = Scratch::ready();
    let mut unbound = offline_profile();
    let entry = unbound.as_object_mut().expect("object");
    entry.remove("registeredAt");
    entry.remove("rtdbUrl");
    s.save_agents(json!({PROFILE: unbound}));
    let missing = format!(
        "no (Canon profile \"{PROFILE}\" is missing identity or environment binding: \
         registeredAt, rtdbUrl)"
    );
    assert_doctor(
        &s.doctor(&[]),
        &expected(&s, &[("Canon credentials", &missing)], &[], false),
    );

    // A name that is not in agents.json (from the process environment, which wins over .env).
    let out = s.doctor_with(&hermes_python(), &[], &[("CANON_AGENT", "nope")]);
    let not_found = format!(
        "no (Canon profile \"nope\" not found in {}. Set CANON_AGENTS_JSON_BOOTSTRAP, set \
         CANON_API_KEY, or re-run registration.)",
        s.canon_home.join("agents.json").display()
    );
    assert_doctor(
        &out,
        &expected(&s, &[("Canon credentials", &not_found)], &[], false),
    );

    // A direct key needs its environment id; the daemon's test mode (key + URLs) is refused too.
    let out = s.doctor_with(
        &hermes_python(),
        &[],
        &[
            ("CANON_API_KEY", SECRET),
            ("CANON_BASE_URL", "http://127.0.0.1:9"),
            ("CANON_STREAM_URL", "http://127.0.0.1:9"),
        ],
    );
    assert_doctor(
        &out,
        &expected(
            &s,
            &[(
                "Canon credentials",
                "no (CANON_ENVIRONMENT_ID is required when CANON_API_KEY is used directly)",
            )],
            &[],
            false,
        ),
    );
    let out = s.doctor_with(
        &hermes_python(),
        &[],
        &[
            ("CANON_API_KEY", SECRET),
            ("CANON_ENVIRONMENT_ID", "canon-prod-v1"),
        ],
    );
    assert_doctor(
        &out,
        &expected(
            &s,
            &[("Canon credentials", "yes (api key override)")],
            &[],
            true,
        ),
    );
}

#[test]
fn missing_tool_call_hooks_fail_only_the_hooks_line() {
    // The real Hermes, with pre_tool_call and post_tool_call taken out of VALID_HOOKS at start
    // (a .pth import line runs after the .pth that makes Hermes importable).
    let s = Scratch::ready();
    let python = fake_venv(
        s.dir.path(),
        true,
        &[
            ("zzz-no-hooks.pth", "import zz_no_hooks\n"),
            (
                "zz_no_hooks.py",
                "import hermes_cli.plugins as p\n\
                 p.VALID_HOOKS = set(p.VALID_HOOKS) - {'pre_tool_call', 'post_tool_call'}\n",
            ),
        ],
    );
    let out = s.doctor_with(&python, &[], &[]);
    assert_doctor(
        &out,
        &expected(
            &s,
            &[
                ("Hermes command", &other_launcher(&python)),
                ("Tool-call activity hooks", "no"),
            ],
            &[],
            false,
        ),
    );
}

#[test]
fn an_unreadable_config_is_reported_for_lines_7_to_11() {
    let s = Scratch::ready();
    s.write_config("plugins: [unclosed\n");
    let before = s.snapshot();
    let out = s.doctor(&[]);
    let text = lines(&out);
    let prefix = format!(
        "Hermes config: unknown ({} cannot be read: ",
        s.hermes_home.join("config.yaml").display()
    );
    let mut want = expected(&s, &[], &[], false);
    want.splice(6..11, [text[6].clone()]);
    assert!(text[6].starts_with(&prefix), "{}", text[6]);
    assert_doctor(&out, &want);
    assert_eq!(s.snapshot(), before, "the broken file is left alone");
}

#[test]
fn a_missing_profile_is_an_error() {
    let s = Scratch::new();
    let out = s.doctor(&["--profile", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out), "");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "Profile 'nope' does not exist. Create it with: hermes profile create nope\n"
    );
}

#[test]
fn json_has_every_check_with_name_value_and_ok() {
    let s = Scratch::ready();
    let out = s.doctor(&["--json"]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 1, "one line: {text}");
    let value: Value = serde_json::from_str(&text).expect("one JSON object");
    let checks = value["checks"].as_array().expect("checks");
    let shown: Vec<String> = checks
        .iter()
        .map(|c| {
            format!(
                "{}: {}",
                c["name"].as_str().unwrap(),
                c["value"].as_str().unwrap()
            )
        })
        .collect();
    let mut want = ready_lines(&s, &format!("yes {PROFILE}"));
    want.pop();
    assert_eq!(shown, want, "the same checks as the lines, in order");
    assert!(checks
        .iter()
        .all(|c| c["ok"] == true && c.as_object().map(|o| o.len()) == Some(3)));
    assert_eq!(value["ready"], true);
    assert_eq!(value["hints"], json!([]));

    // A failing check is `ok: false`, its hint is listed, and the exit code is 1.
    s.write_config(
        &READY_CONFIG.replace("canon:\n    enabled: true", "canon:\n    enabled: false"),
    );
    let out = s.doctor(&["--json"]);
    assert_eq!(out.status.code(), Some(1));
    let value: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(value["ready"], false);
    assert_eq!(value["hints"], json!([NO_PLATFORM]));
    let failed: Vec<&Value> = value["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter(|c| c["ok"] == false)
        .collect();
    assert_eq!(
        failed,
        [&json!({"name": "Canon platform enabled", "value": "no", "ok": false})]
    );
}

/// A simulator impersonating `environment` with `project`.
async fn sim_in(environment: &str, project: &str) -> SimHandle {
    let mut config = SimConfig::for_tests();
    config.environment.environment_id = environment.to_owned();
    config.environment.project_id = project.to_owned();
    Sim::start(config).await.expect("the simulator starts")
}

/// [`Scratch::ready`] with the simulator's agent as [`PROFILE`], bound to `canon-dev-v1`
/// whatever environment the simulator claims to be.
fn ready_for(sim: &SimHandle) -> Scratch {
    let s = Scratch::ready();
    let mut agents = sim.agents_json(PROFILE);
    agents[PROFILE]["environmentId"] = json!("canon-dev-v1");
    s.save_agents(agents);
    s
}

async fn doctor_online(s: Scratch) -> (Scratch, Output) {
    tokio::task::spawn_blocking(move || {
        let out = s.doctor(&["--online"]);
        (s, out)
    })
    .await
    .expect("doctor ran")
}

#[tokio::test(flavor = "multi_thread")]
async fn online_verifies_the_environment_without_sending_the_key() {
    let sim = sim_in("canon-dev-v1", "canonmail-dev").await;
    let (s, out) = doctor_online(ready_for(&sim)).await;
    let mut want = expected(&s, &[], &[], true);
    want.insert(13, "Canon environment: verified (canon-dev-v1)".into());
    assert_doctor(&out, &want);
    let journal = sim.journal(0, None);
    let paths: Vec<&str> = journal.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["/healthz/", "/health"]);
    for entry in &journal {
        assert!(
            entry
                .headers
                .iter()
                .all(|(name, _)| name != "authorization"),
            "no key is sent: {:?}",
            entry.headers
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn online_refuses_an_endpoint_of_another_environment() {
    let sim = sim_in("canon-other-v1", "canonmail-dev").await;
    let (s, out) = doctor_online(ready_for(&sim)).await;
    let mut want = expected(&s, &[], &[], false);
    want.insert(
        13,
        format!(
            "Canon environment: error (Canon runtime endpoint {}/healthz/ does not match \
             environment canon-dev-v1)",
            sim.base_url()
        ),
    );
    assert_doctor(&out, &want);

    // The right environment but another project.
    let sim = sim_in("canon-dev-v1", "someone-else").await;
    let (s, out) = doctor_online(ready_for(&sim)).await;
    assert_eq!(
        lines(&out)[13],
        format!(
            "Canon environment: error (Canon runtime endpoint {}/healthz/ does not match \
             environment canon-dev-v1)",
            sim.base_url()
        )
    );
    assert_eq!(out.status.code(), Some(1));
    drop(s);

    // Nothing listening, and no credentials at all.
    let (s, out) = doctor_online(Scratch::ready()).await;
    let line = &lines(&out)[13];
    assert!(line.starts_with("Canon environment: error ("), "{line}");
    assert_eq!(out.status.code(), Some(1));
    s.save_agents(json!({}));
    let env = s.hermes_home.join(".env");
    fs::write(&env, "CANON_ALLOW_ALL_USERS=true\n").expect(".env");
    let (_s, out) = doctor_online(s).await;
    assert_eq!(
        lines(&out)[12..15],
        [
            "Tool-call activity hooks: yes".to_owned(),
            "Canon environment: error (no Canon credentials to check)".to_owned(),
            NOT_READY.to_owned(),
        ]
    );
}
