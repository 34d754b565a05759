//! `canon-hermes dev` driven the way a person uses it: the real binary in a pseudo-terminal, a
//! real hermes-agent 0.19.0 gateway (the venv of `scripts/hermes-venv.sh`), keystrokes typed
//! into the terminal — a message, an approval answer, a card's action, Ctrl-C — and the screen
//! read back. The
//! counts come from the simulator's state that `dev --state-file` writes on exit, and "no
//! process left behind" is checked in `/proc`.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portable_pty::{native_pty_system, CommandBuilder, PtySize};
use serde_json::Value;

use super::gateway_support::hermes_python;

/// Long enough for a cold gateway start on a loaded two-core machine.
const WAIT: Duration = Duration::from_secs(120);

/// The terminal's output as text, without colour and cursor escape sequences.
fn strip_ansi(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                // Parameters and intermediates, then one final byte in @..~.
                for next in chars.by_ref() {
                    if ('@'..='~').contains(&next) {
                        break;
                    }
                }
            }
            continue;
        }
        if c != '\r' {
            out.push(c);
        }
    }
    out
}

/// A process running `dev` in a pseudo-terminal.
struct Terminal {
    screen: Arc<Mutex<String>>,
    writer: Box<dyn std::io::Write + Send>,
    child: Box<dyn portable_pty::Child + Send + Sync>,
}

impl Terminal {
    fn start(args: &[&str], envs: &[(&str, &str)], remove: &[&str]) -> Terminal {
        let pair = native_pty_system()
            .openpty(PtySize {
                rows: 60,
                cols: 220,
                pixel_width: 0,
                pixel_height: 0,
            })
            .expect("a pseudo-terminal");
        let mut command = CommandBuilder::new(env!("CARGO_BIN_EXE_canon-hermes"));
        command.args(args);
        for (k, v) in envs {
            command.env(k, v);
        }
        for k in remove {
            command.env_remove(k);
        }
        let child = pair.slave.spawn_command(command).expect("dev starts");
        drop(pair.slave);
        let mut reader = pair.master.try_clone_reader().expect("pty reader");
        let writer = pair.master.take_writer().expect("pty writer");
        let screen = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&screen);
        std::thread::spawn(move || {
            let _master = pair.master;
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                sink.lock().expect("screen").push_str(&text);
            }
        });
        Terminal {
            screen,
            writer,
            child,
        }
    }

    fn screen(&self) -> String {
        strip_ansi(&self.screen.lock().expect("screen"))
    }

    /// Waits until the screen satisfies `f`, failing with the screen after [`WAIT`].
    fn wait_for(&self, what: &str, f: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let screen = self.screen();
            if f(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "dev never showed {what}; the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn type_line(&mut self, line: &str) {
        self.writer
            .write_all(format!("{line}\r").as_bytes())
            .expect("typing");
        self.writer.flush().expect("typing");
    }

    fn ctrl_c(&mut self) {
        self.writer.write_all(&[0x03]).expect("Ctrl-C");
        self.writer.flush().expect("Ctrl-C");
    }

    /// Waits for the process to exit and returns its exit code.
    fn wait_exit(&mut self) -> u32 {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status.exit_code();
            }
            assert!(
                Instant::now() < deadline,
                "dev did not exit; the screen:\n{}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}

/// Live processes that belong to this `dev` run: the marker in their environment, or a
/// working directory inside the throwaway profile. Zombies (exited, not yet reaped) are not
/// running and do not count.
fn processes_of(mark: &str, scratch: Option<&Path>) -> Vec<(u32, String)> {
    let needle = format!("CANON_DEV_TEST_MARK={mark}");
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let dir = entry.path();
        let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
        if status
            .lines()
            .any(|l| l.starts_with("State:") && l.contains('Z'))
        {
            continue;
        }
        let environ = std::fs::read(dir.join("environ")).unwrap_or_default();
        let marked = environ
            .split(|b| *b == 0)
            .any(|var| var == needle.as_bytes());
        let inside = scratch.is_some_and(|s| {
            std::fs::read_link(dir.join("cwd")).is_ok_and(|cwd| cwd.starts_with(s))
        });
        if marked || inside {
            let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            found.push((pid, cmdline));
        }
    }
    found
}

/// The throwaway root `dev` printed (`throwaway Hermes profile <root>/hermes`).
fn scratch_root(screen: &str) -> PathBuf {
    let line = screen
        .lines()
        .find_map(|l| l.split("throwaway Hermes profile ").nth(1))
        .expect("dev names its throwaway profile");
    PathBuf::from(line.trim())
        .parent()
        .expect("the profile's parent")
        .to_path_buf()
}

fn is_turn_complete(message: &Value) -> bool {
    message.pointer("/message/metadata/turnSemantics") == Some(&Value::from("turn_complete"))
}

#[test]
fn dev_chats_in_a_terminal_answers_an_approval_and_a_card_and_leaves_nothing_on_ctrl_c() {
    let work = tempfile::tempdir().expect("work dir");
    let state_file = work.path().join("state.json");
    let mark = format!("dev-{}-{}", std::process::id(), work.path().display());
    let python = hermes_python();
    let mut term = Terminal::start(
        &[
            "dev",
            "--python",
            python.to_str().expect("utf-8 path"),
            "--state-file",
            state_file.to_str().expect("utf-8 path"),
        ],
        &[
            ("CANON_DEV_TEST_MARK", mark.as_str()),
            // A managed venv, were one needed, would go here and never into the real cache.
            ("XDG_CACHE_HOME", work.path().to_str().expect("utf-8 path")),
            ("TERM", "xterm-256color"),
        ],
        &[
            "OPENAI_BASE_URL",
            "OPENAI_MODEL",
            "HERMES_HOME",
            "CANON_AGENT",
        ],
    );

    // Everything starts, then the prompt.
    let screen = term.wait_for("the prompt after the gateway connected", |s| {
        s.contains("Canon connected") && s.contains("you › ")
    });
    for line in [
        "✓ Canon simulator at http://127.0.0.1:",
        "✓ scripted model at http://127.0.0.1:",
        "✓ Hermes: hermes-agent 0.19.0 on Python 3.11",
        "✓ canon-hermes install",
        "Installed Canon shim:",
    ] {
        assert!(screen.contains(line), "missing {line:?} in:\n{screen}");
    }
    let scratch = scratch_root(&screen);
    assert!(scratch.join("hermes/plugins/canon-hermes").is_dir());

    // One message: the answer streams in as the live bubble, then the final is marked.
    term.type_line("hello");
    let screen = term.wait_for("the first turn_complete", |s| {
        s.matches("✓ turn_complete").count() == 1
    });
    assert!(
        screen.contains("hermes › Hello from Hermes, answering through a local Canon."),
        "{screen}"
    );

    // The approval demo: the question is shown, `y` answers it, the command runs.
    term.type_line("delete the demo files");
    let screen = term.wait_for("the approval question", |s| s.contains("allow? [y/n] › "));
    assert!(screen.contains("⚠ Approval needed: Command"), "{screen}");
    assert!(
        screen.contains(&format!("rm -rf {}", scratch.join("demo-files").display())),
        "{screen}"
    );
    term.type_line("y");
    let screen = term.wait_for("the second turn_complete", |s| {
        s.matches("✓ turn_complete").count() == 2
    });
    assert!(screen.contains("→ allow"), "{screen}");
    assert!(screen.contains("⚙ terminal"), "{screen}");
    assert!(
        !scratch.join("demo-files").exists(),
        "the approved command ran"
    );

    // A card the agent asks about: drawn as text, its action chosen by number.
    term.type_line("choose an option");
    let screen = term.wait_for("the card's actions", |s| s.contains("action [1-2] › "));
    assert!(screen.contains("▣ Deploy release 1.2?"), "{screen}");
    assert!(screen.contains("[1] Ship it"), "{screen}");
    term.type_line("1");
    let screen = term.wait_for("the third turn_complete", |s| {
        s.matches("✓ turn_complete").count() == 3
    });
    assert!(screen.contains("→ ship"), "{screen}");

    // The gateway and its Canon daemon run now; Ctrl-C stops them and everything else.
    let running = processes_of(&mark, Some(&scratch));
    assert!(
        running.iter().any(|(_, c)| c.contains("gateway run")),
        "{running:#?}"
    );
    assert!(
        running.iter().any(|(_, c)| c.contains("serve --stdio")),
        "{running:#?}"
    );
    term.ctrl_c();
    let code = term.wait_exit();
    assert_eq!(code, 130, "{}", term.screen());
    assert!(
        term.screen()
            .contains("stopping the Hermes gateway and its Canon daemon"),
        "{}",
        term.screen()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = processes_of(&mark, Some(&scratch));
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "left behind: {left:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!scratch.exists(), "the throwaway profile is removed");

    // Canon saw exactly one final per message, and the approval answered by the owner.
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(&state_file).expect("state file"))
            .expect("state JSON");
    let finals: Vec<&Value> = state["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| is_turn_complete(m))
        .collect();
    assert_eq!(finals.len(), 3, "{finals:#?}");
    let approvals: Vec<&Value> = state["interactions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["kind"] == "approval")
        .collect();
    assert_eq!(approvals.len(), 1, "{approvals:#?}");
    assert_eq!(approvals[0]["answer"]["status"], "allow", "{approvals:#?}");
    let cards: Vec<&Value> = state["interactions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["kind"] == "card")
        .collect();
    assert_eq!(cards.len(), 1, "{cards:#?}");
    assert_eq!(cards[0]["answer"]["actionId"], "ship", "{cards:#?}");
}

#[test]
fn dev_help_says_what_it_does_and_refuses_a_real_model_without_a_name() {
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_canon-hermes"))
        .args(["dev", "--help"])
        .output()
        .expect("dev --help");
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    for flag in ["--python", "--model-url", "--model", "--script", "--keep"] {
        assert!(text.contains(flag), "{text}");
    }
    assert!(!text.contains("--state-file"), "hidden flag shown:\n{text}");

    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_canon-hermes"))
        .args(["dev", "--model-url", "http://127.0.0.1:9/v1"])
        .env_remove("OPENAI_MODEL")
        .output()
        .expect("dev");
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&refused.stderr)
            .contains("a real model at http://127.0.0.1:9/v1 needs a name: pass --model NAME or set OPENAI_MODEL"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

/// With no Hermes on `PATH` and none under `~/.hermes`, `dev` uses the managed environment in
/// the user's cache directory. The managed venv here is the test venv seen through symbolic
/// links plus the ready marker `dev` writes after a finished install, so the test needs no
/// download; creating one from PyPI is what `scripts/hermes-venv.sh` does the same way.
#[test]
fn dev_without_hermes_uses_the_managed_environment_in_the_cache() {
    let work = tempfile::tempdir().expect("work dir");
    let real = hermes_python()
        .parent()
        .and_then(Path::parent)
        .expect("the venv root")
        .to_path_buf();
    let managed = work
        .path()
        .join("cache/canon-hermes/hermes-agent-0.19.0-py3.11");
    std::fs::create_dir_all(&managed).expect("managed dir");
    for entry in std::fs::read_dir(&real).expect("venv entries").flatten() {
        std::os::unix::fs::symlink(entry.path(), managed.join(entry.file_name())).expect("symlink");
    }
    std::fs::write(managed.join(".canon-hermes-ready"), "hermes-agent 0.19.0\n").expect("marker");
    let home = work.path().join("home");
    std::fs::create_dir_all(&home).expect("home");
    // PATH without any directory that holds a `hermes` launcher.
    let path: Vec<PathBuf> = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .filter(|dir| !dir.join("hermes").exists())
        .collect();
    let path = std::env::join_paths(path).expect("PATH");

    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_canon-hermes"))
        .arg("dev")
        .env("HOME", &home)
        .env("XDG_CACHE_HOME", work.path().join("cache"))
        .env("PATH", &path)
        .env_remove("HERMES_PYTHON")
        .env_remove("OPENAI_BASE_URL")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("dev starts");
    // `/quit` waits in the pipe until the chat opens, which is after the gateway connected.
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"/quit\n")
        .expect("typing");
    let out = child.wait_with_output().expect("dev exits");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!(
            "✓ Hermes: the managed hermes-agent 0.19.0 environment {}",
            managed.display()
        )),
        "{stdout}"
    );
    assert!(stdout.contains("Canon connected"), "{stdout}");
    assert!(
        stdout.contains("stopping the Hermes gateway and its Canon daemon"),
        "{stdout}"
    );
}
