//! `canon-hermes uninstall` (cli.md §3.5) on scratch Hermes profiles with the real hermes-agent
//! 0.19.0 venv: after `install` it takes the plugin out of config.yaml and removes the shim
//! directory, a second run changes nothing, the refusals of `install` apply, the Canon
//! credentials stay unless `--purge-credentials` is confirmed (`--yes`, or `y` on a terminal),
//! and without a terminal or `--yes` nothing changes. The scratch profiles are `install.rs`'s.

use std::fs;
use std::io::{Read as _, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portable_pty::{native_pty_system, CommandBuilder, PtySize};
use serde_json::{json, Value};

use super::gateway_support::hermes_python;
use super::install::{assert_ok, hermes_python_says, lines, profile_line, stderr, stdout, Scratch};

/// The API key of the Canon profile setup would have saved; no output may contain it.
const SECRET: &str = "sk-uninstall-test-secret";

/// The line uninstall prints when the gateway must restart, for the default profile.
const RESTART: &str =
    "Restart the Hermes gateway to unload the Canon plugin: hermes gateway restart";

fn python() -> String {
    hermes_python().to_str().expect("utf-8").to_owned()
}

/// `canon-hermes uninstall --python <venv python> <args>`; never prints [`SECRET`].
fn uninstall(s: &Scratch, args: &[&str]) -> Output {
    let python = python();
    let mut all = vec!["uninstall", "--python", python.as_str()];
    all.extend(args);
    let out = s.run(&all);
    for text in [stdout(&out), stderr(&out)] {
        assert!(!text.contains(SECRET), "a secret was printed: {text}");
    }
    out
}

fn agents_path(s: &Scratch) -> PathBuf {
    s.dir.path().join(".canon/agents.json")
}

/// What `setup` leaves: `CANON_AGENT` and a key in `.env` beside the operator's own lines, and
/// the Canon profile in `~/.canon/agents.json` beside another runtime's.
fn with_credentials(s: &Scratch) -> String {
    let env = format!(
        "# mine\nOPENAI_API_KEY=sk-openai\nCANON_AGENT=hermes\nCANON_API_KEY={SECRET}\n\
         CANON_ALLOW_ALL_USERS=true\n"
    );
    fs::write(s.hermes_home.join(".env"), &env).expect(".env");
    fs::set_permissions(
        s.hermes_home.join(".env"),
        fs::Permissions::from_mode(0o600),
    )
    .expect("chmod");
    fs::create_dir_all(agents_path(s).parent().expect("a parent")).expect("~/.canon");
    fs::write(
        agents_path(s),
        json!({
            "hermes": {"apiKey": SECRET, "agentId": "a-1", "clientType": "hermes"},
            "coms": {"apiKey": "sk-coms", "clientType": "coms"},
        })
        .to_string(),
    )
    .expect("agents.json");
    env
}

fn agents(s: &Scratch) -> Value {
    serde_json::from_slice(&fs::read(agents_path(s)).expect("agents.json")).expect("JSON")
}

#[test]
fn uninstall_after_install_takes_the_plugin_out_and_a_second_run_changes_nothing() {
    let s = Scratch::new();
    assert_ok(&s.install());
    let out = uninstall(&s, &[]);
    assert_ok(&out);
    let backup = s.hermes_home.join("config.yaml.before-canon-hermes");
    assert_eq!(
        lines(&out),
        [
            profile_line(&s),
            "Disabled Hermes plugin: canon-hermes".into(),
            "Disabled Hermes platform: canon".into(),
            format!("Kept the original Hermes config as {}", backup.display()),
            format!("Removed Canon shim: {}", s.plugin_dir().display()),
            RESTART.into(),
        ]
    );
    assert!(!s.plugin_dir().exists());
    let said = hermes_python_says(
        &s,
        "from hermes_cli.config import read_raw_config\n\
         c = read_raw_config()\n\
         print(c.get('plugins'), c.get('platforms'))\n",
    );
    assert_eq!(said.trim(), "None None");
    // Hermes' own listing no longer knows the plugin.
    let listed = super::gateway_support::hermes_cli(&s.hermes_home, &["plugins", "list"]);
    assert!(!listed.contains("canon-hermes"), "{listed}");

    let before = s.snapshot();
    let out = uninstall(&s, &[]);
    assert_ok(&out);
    assert_eq!(
        lines(&out),
        [
            profile_line(&s),
            "Hermes plugin not enabled: canon-hermes".into(),
            "Hermes platform not enabled: canon".into(),
            format!("Canon shim not installed: {}", s.plugin_dir().display()),
        ]
    );
    assert_eq!(s.snapshot(), before);
}

#[test]
fn a_platform_with_other_settings_is_disabled_not_removed() {
    let s = Scratch::new();
    let config =
        "plugins:\n  enabled:\n    - other\n    - canon-hermes\nplatforms:\n  canon:\n    \
                  enabled: true\n    extra:\n      home_channel: c1  # mine\n";
    fs::write(s.config(), config).expect("config");
    assert_ok(&uninstall(&s, &[]));
    assert_eq!(
        fs::read_to_string(s.config()).expect("config"),
        config
            .replace("    - canon-hermes\n", "")
            .replace("enabled: true", "enabled: false")
    );
}

#[test]
fn credentials_stay_unless_the_purge_is_confirmed() {
    let s = Scratch::new();
    assert_ok(&s.install());
    let env = with_credentials(&s);
    let agents_before = agents(&s);

    // Kept by default, and said so.
    let out = uninstall(&s, &[]);
    assert_ok(&out);
    assert!(lines(&out).contains(&format!(
        "Kept Canon credentials (CANON_AGENT, CANON_API_KEY from {} and the Canon profile \
         'hermes' from {}); canon-hermes uninstall --purge-credentials removes them",
        s.hermes_home.join(".env").display(),
        agents_path(&s).display()
    )));
    assert_eq!(
        fs::read_to_string(s.hermes_home.join(".env")).expect(".env"),
        env
    );
    assert_eq!(agents(&s), agents_before);

    // No terminal and no --yes: refused, nothing changed.
    let s = Scratch::new();
    assert_ok(&s.install());
    with_credentials(&s);
    let before = s.snapshot();
    let out = uninstall(&s, &["--purge-credentials"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "Refusing to remove Canon credentials without a confirmation: run canon-hermes \
         uninstall --purge-credentials on a terminal, or add --yes\n"
    );
    assert_eq!(lines(&out), [profile_line(&s)]);
    assert_eq!(s.snapshot(), before);

    // --yes: the keys setup writes leave .env (its other lines stay, the original is kept once,
    // private), the profile leaves agents.json (other runtimes' stay).
    let out = uninstall(&s, &["--purge-credentials", "--yes"]);
    assert_ok(&out);
    let env_file = s.hermes_home.join(".env");
    let env_backup = s.hermes_home.join(".env.before-canon-hermes");
    let config_backup = s.hermes_home.join("config.yaml.before-canon-hermes");
    assert_eq!(
        lines(&out),
        [
            profile_line(&s),
            "Disabled Hermes plugin: canon-hermes".into(),
            "Disabled Hermes platform: canon".into(),
            format!(
                "Kept the original Hermes config as {}",
                config_backup.display()
            ),
            format!("Kept the original .env as {}", env_backup.display()),
            format!(
                "Removed Canon credentials from {}: CANON_AGENT, CANON_API_KEY",
                env_file.display()
            ),
            format!(
                "Removed Canon profile 'hermes' from {}",
                agents_path(&s).display()
            ),
            format!("Removed Canon shim: {}", s.plugin_dir().display()),
            RESTART.into(),
        ]
    );
    assert_eq!(
        fs::read_to_string(&env_file).expect(".env"),
        "# mine\nOPENAI_API_KEY=sk-openai\nCANON_ALLOW_ALL_USERS=true\n"
    );
    let backup = fs::read_to_string(&env_backup).expect("backup");
    assert!(backup.contains(SECRET));
    let mode = |path: &Path| fs::metadata(path).expect("mode").permissions().mode() & 0o777;
    assert_eq!(mode(&env_backup), 0o600);
    assert_eq!(mode(&env_file), 0o600);
    assert_eq!(
        agents(&s),
        json!({"coms": {"apiKey": "sk-coms", "clientType": "coms"}})
    );
    assert_eq!(mode(&agents_path(&s)), 0o600);
}

#[test]
fn the_refusals_of_install_apply() {
    let s = Scratch::new();
    fs::create_dir_all(s.plugin_dir()).expect("plugin dir");
    fs::write(
        s.plugin_dir().join("plugin.yaml"),
        "name: someone-else\nkind: platform\n",
    )
    .expect("yaml");
    fs::write(s.config(), "plugins:\n  enabled: [canon-hermes]\n").expect("config");
    let before = s.snapshot();
    let out = uninstall(&s, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        format!(
            "Refusing to remove {}: not written by canon-hermes\n",
            s.plugin_dir().display()
        )
    );
    assert_eq!(s.snapshot(), before, "a refused uninstall changes nothing");

    let s = Scratch::new();
    fs::create_dir_all(s.hermes_home.join("plugins")).expect("plugins");
    fs::create_dir_all(s.dir.path().join("shared")).expect("shared");
    fs::write(s.dir.path().join("shared/keep.txt"), "mine").expect("a file");
    std::os::unix::fs::symlink(s.dir.path().join("shared"), s.plugin_dir()).expect("symlink");
    let before = s.snapshot();
    let out = uninstall(&s, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        format!(
            "Refusing to remove {}: it is a symbolic link\n",
            s.plugin_dir().display()
        )
    );
    assert_eq!(s.snapshot(), before);
}

/// Runs `uninstall <args>` in a pseudo-terminal, answers the question with `reply`, and returns
/// the exit code and what the terminal showed.
fn on_a_terminal(s: &Scratch, args: &[&str], reply: &str) -> (u32, String) {
    let pair = native_pty_system()
        .openpty(PtySize {
            rows: 40,
            cols: 400,
            pixel_width: 0,
            pixel_height: 0,
        })
        .expect("a pseudo-terminal");
    let mut command = CommandBuilder::new(env!("CARGO_BIN_EXE_canon-hermes"));
    command.args(["uninstall", "--python", &python()]);
    command.args(args);
    command.cwd(s.dir.path());
    command.env("HOME", s.dir.path());
    command.env("HERMES_HOME", &s.hermes_home);
    for name in [
        "HERMES_PYTHON",
        "CANON_HOME",
        "CANON_HERMES_BIN",
        "CANON_AGENT",
    ] {
        command.env_remove(name);
    }
    let mut child = pair.slave.spawn_command(command).expect("uninstall starts");
    drop(pair.slave);
    let mut reader = pair.master.try_clone_reader().expect("pty reader");
    let mut writer = pair.master.take_writer().expect("pty writer");
    let screen = Arc::new(Mutex::new(String::new()));
    let sink = Arc::clone(&screen);
    std::thread::spawn(move || {
        let _master = pair.master;
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .expect("screen")
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    let shown = || screen.lock().expect("screen").clone();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !shown().contains("[y/N] ") {
        assert!(Instant::now() < deadline, "no question:\n{}", shown());
        std::thread::sleep(Duration::from_millis(50));
    }
    writer
        .write_all(format!("{reply}\r").as_bytes())
        .expect("typing");
    writer.flush().expect("typing");
    let code = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status.exit_code();
        }
        assert!(Instant::now() < deadline, "no exit:\n{}", shown());
        std::thread::sleep(Duration::from_millis(50));
    };
    // The reader thread has the rest once the terminal closes.
    let settled = Instant::now() + Duration::from_secs(5);
    while !shown().contains(RESTART) && !shown().contains("nothing was changed") {
        if Instant::now() > settled {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = shown();
    assert!(!text.contains(SECRET), "a secret was shown: {text}");
    (code, text)
}

#[test]
fn on_a_terminal_the_purge_is_asked_first() {
    let s = Scratch::new();
    assert_ok(&s.install());
    let env = with_credentials(&s);
    let question = format!(
        "Remove CANON_AGENT, CANON_API_KEY from {} and the Canon profile 'hermes' from {}? \
         [y/N] ",
        s.hermes_home.join(".env").display(),
        agents_path(&s).display()
    );

    // Anything but yes: nothing changes.
    let before = s.snapshot();
    let (code, shown) = on_a_terminal(&s, &["--purge-credentials"], "n");
    assert_eq!(code, 1, "{shown}");
    assert!(shown.contains(&question), "{shown}");
    assert!(
        shown.contains(
            "Uninstall cancelled; nothing was changed (run it without --purge-credentials to \
             keep the credentials)"
        ),
        "{shown}"
    );
    assert_eq!(s.snapshot(), before);

    let (code, shown) = on_a_terminal(&s, &["--purge-credentials"], "y");
    assert_eq!(code, 0, "{shown}");
    assert!(shown.contains(RESTART), "{shown}");
    assert_ne!(
        fs::read_to_string(s.hermes_home.join(".env")).expect(".env"),
        env
    );
    assert!(agents(&s).get("hermes").is_none());
    assert!(!s.plugin_dir().exists());
}
