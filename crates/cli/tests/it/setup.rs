//! `canon-hermes setup` (cli.md §4) and `install --setup` (cli.md §3.1 step 6): the real binary
//! against an in-process canon-sim over real sockets, in a scratch `HOME` with its own
//! `HERMES_HOME` and `CANON_HOME`, the `.env` changes made by Hermes' own functions in the real
//! hermes-agent 0.19.0 venv. Answers are scripted on stdin (no terminal: the prompts print and
//! nothing is echoed, as with Python's `input()`), or given as flags. The transcripts are
//! compared whole, byte for byte; the approval wait polls every 20 ms, and every count comes from
//! the simulator's state or journal, never from a sleep.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::time::Duration;

use canon_sim::config::SimConfig;
use canon_sim::{Sim, SimHandle};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::{Child, Command};

use super::gateway_support::hermes_python;

/// Upper bound for anything a test waits on.
const WAIT: Duration = Duration::from_secs(60);

/// The packaged endpoints of cli.md §5.2 the prompts offer.
const DEV_RTDB: &str = "https://canonmail-dev-default-rtdb.europe-west1.firebasedatabase.app";
const DEV_FIREBASE: &str = "AIzaSyA9i7PpZ-93CWmojEn5Ez9t8tboc5-1ELc";
const PROD_RTDB: &str = "https://canonmail-prod-default-rtdb.europe-west1.firebasedatabase.app";
const PROD_FIREBASE: &str = "AIzaSyDnX6AERXfdtZxf7qM9JjyMmYxF_ovPL78";

/// Variables of the test process that would change what setup reads.
const CLEARED: [&str; 21] = [
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
    "CANON_ALLOWED_USERS",
    "CANON_ALLOW_ALL_USERS",
    "HERMES_PYTHON",
    "HERMES_NONINTERACTIVE",
    "HERMES_MANAGED",
    "HERMES_MANAGED_DIR",
    "NO_COLOR",
    "GATEWAY_MULTIPLEX_PROFILES",
    "HERMES_S6_SUPERVISED_CHILD",
    "CANON_HERMES_BIN",
    "SETUP_TEST_KEY",
];

/// The `.env` keys a registration removes (cli.md §4.3 step 11).
const DIRECT_KEY_VARS: [&str; 6] = [
    "CANON_API_KEY",
    "CANON_ENVIRONMENT_ID",
    "CANON_BASE_URL",
    "CANON_STREAM_URL",
    "CANON_RTDB_URL",
    "CANON_FIREBASE_API_KEY",
];

/// The menu of cli.md §4.1 step 3, up to its prompt.
const MENU: &str = "  How would you like to configure Canon?
  ● Register/reconnect a Hermes agent with Canon (recommended)
  ○ Use an existing Canon profile from ~/.canon/agents.json
  ○ Paste an existing Canon API key (advanced/headless)
    Enter for default (1)  Ctrl+C to exit
  Select [1-3] (1): ";

/// The register prompts of cli.md §4.3 step 1 with their defaults, for the display name Hermes
/// suggests.
const REGISTER_PROMPTS: &str = "
  Agent display name [Hermes]:   Agent description [Hermes gateway agent]:   Canon owner phone \
number (E.164, exact number from the Canon app):   Local Canon profile name [hermes]: ";

/// A scratch `HOME` with an empty profile home `hermes/`; `canon/` is `CANON_HOME` and does not
/// exist until setup writes into it.
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
        Scratch {
            dir,
            hermes_home,
            canon_home,
        }
    }

    /// `canon-hermes <args…>` in this scratch, with the venv's Python for `setup`, a 20 ms poll
    /// interval, and `env` on top of a cleared environment.
    fn command(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_canon-hermes"));
        command.args(args);
        if args.first() == Some(&"setup") {
            command
                .arg("--python")
                .arg(hermes_python())
                .args(["--poll-interval-ms", "20"]);
        }
        self.prepare(&mut command, env);
        Command::from(command)
    }

    /// This scratch's directory and environment (`env` on top of a cleared one), piped stdio.
    fn prepare(&self, command: &mut std::process::Command, env: &[(&str, &str)]) {
        command
            .current_dir(self.dir.path())
            .env("HOME", self.dir.path())
            .env("HERMES_HOME", &self.hermes_home)
            .env("CANON_HOME", &self.canon_home);
        for name in CLEARED {
            command.env_remove(name);
        }
        command
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
    }

    /// Starts `setup <args…>` with `input` on stdin, then closes stdin.
    async fn start(&self, args: &[&str], env: &[(&str, &str)], input: &str) -> Child {
        let mut all = vec!["setup"];
        all.extend_from_slice(args);
        spawn_with_input(self.command(&all, env), input).await
    }

    /// Runs `setup <args…>` to the end.
    async fn setup(&self, args: &[&str], env: &[(&str, &str)], input: &str) -> Output {
        finish(self.start(args, env, input).await).await
    }

    fn env_path(&self) -> PathBuf {
        self.hermes_home.join(".env")
    }

    fn write_env(&self, text: &str) {
        fs::write(self.env_path(), text).expect(".env");
    }

    /// `.env` as Hermes' reader would see it: key → value, in file order.
    fn env_vars(&self) -> BTreeMap<String, String> {
        let text = fs::read_to_string(self.env_path()).unwrap_or_default();
        text.lines()
            .filter_map(|line| line.split_once('='))
            .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
            .collect()
    }

    fn agents_path(&self) -> PathBuf {
        self.canon_home.join("agents.json")
    }

    fn save_agents(&self, agents: &Value) {
        fs::create_dir_all(&self.canon_home).expect("the Canon home");
        fs::write(self.agents_path(), agents.to_string()).expect("agents.json");
    }

    fn agents(&self) -> Value {
        read_json(&self.agents_path())
    }

    fn pending(&self) -> Value {
        read_json(&self.canon_home.join("pending-registrations.json"))
    }

    /// The first lines every run prints (cli.md §2.1, §4.1 step 1).
    fn opening(&self) -> String {
        format!(
            "Hermes profile: default ({})

  --- Canon Setup ---

    Canon can use an existing agent profile or register a new Hermes agent.
    Registration sends an approval request to the Canon owner app.
",
            self.hermes_home.display()
        )
    }
}

fn read_json(path: &std::path::Path) -> Value {
    let text = fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{} cannot be read: {e}", path.display()));
    serde_json::from_str(&text).expect("JSON")
}

fn mode(path: &std::path::Path) -> u32 {
    fs::metadata(path).expect("metadata").permissions().mode() & 0o777
}

async fn spawn_with_input(mut command: Command, input: &str) -> Child {
    let mut child = command
        .kill_on_drop(true)
        .spawn()
        .expect("canon-hermes starts");
    let mut stdin = child.stdin.take().expect("piped stdin");
    stdin.write_all(input.as_bytes()).await.expect("stdin");
    drop(stdin);
    child
}

async fn finish(child: Child) -> Output {
    tokio::time::timeout(WAIT, child.wait_with_output())
        .await
        .expect("setup finished in time")
        .expect("setup ran")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The exit code, with the output when it is not `code`.
#[track_caller]
fn assert_exit(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        stdout(out),
        stderr(out)
    );
}

/// Neither stream shows any of `secrets`.
#[track_caller]
fn assert_hidden(out: &Output, secrets: &[&str]) {
    for secret in secrets {
        for text in [stdout(out), stderr(out)] {
            assert!(!text.contains(secret), "{secret} was printed: {text}");
        }
    }
}

/// A simulator impersonating `environment` with `project`.
async fn sim_in(environment: &str, project: &str) -> SimHandle {
    let mut config = SimConfig::for_tests();
    config.environment.environment_id = environment.to_owned();
    config.environment.project_id = project.to_owned();
    Sim::start(config).await.expect("the simulator starts")
}

/// The default simulator (`canon-dev-v1`, `canonmail-dev`).
async fn dev_sim() -> SimHandle {
    sim_in("canon-dev-v1", "canonmail-dev").await
}

/// The connection prompts of cli.md §4.2 as they print for a `canon-dev-v1` whose API and stream
/// URLs come from `.env` (so they are the defaults).
fn dev_connection_prompts(sim: &SimHandle) -> String {
    let url = sim.base_url();
    format!(
        "  Canon environment ID [canon-dev-v1]:   Canon API base URL [{url}]:   Canon stream URL \
         [{url}]:   Canon Realtime Database URL [{DEV_RTDB}]:   Canon Firebase web API key \
         [{DEV_FIREBASE}]: "
    )
}

/// The `.env` that points the prompts at `sim` as `canon-dev-v1`.
fn dev_env_file(sim: &SimHandle) -> String {
    let url = sim.base_url();
    format!("CANON_ENVIRONMENT_ID=canon-dev-v1\nCANON_BASE_URL={url}\nCANON_STREAM_URL={url}\n")
}

/// Waits until the simulator holds `count` registrations, the last polled at least `polls`
/// times, while `child` runs (its output is shown when it ends first); the request id.
async fn registration_polled(
    sim: &SimHandle,
    child: &mut Child,
    count: usize,
    polls: u32,
) -> String {
    let polled = sim.wait_for("a polled registration", WAIT, |s| {
        s.registrations.len() == count && s.registrations.last().is_some_and(|r| r.polls >= polls)
    });
    tokio::select! {
        waited = polled => waited.expect("the registration is polled"),
        status = child.wait() => {
            let mut text = String::new();
            if let Some(out) = child.stdout.as_mut() {
                let _ = out.read_to_string(&mut text).await;
            }
            if let Some(err) = child.stderr.as_mut() {
                let _ = err.read_to_string(&mut text).await;
            }
            panic!("setup ended before the registration was polled ({status:?}):\n{text}");
        }
    }
    sim.read_state(|s| s.registrations[count - 1].request_id.clone())
}

/// The registration the simulator holds at `index`: its body, polls and ack.
fn registration(sim: &SimHandle, index: usize) -> (Value, u32, bool) {
    sim.read_state(|s| {
        let r = &s.registrations[index];
        (r.body.clone(), r.polls, r.acked)
    })
}

/// How many requests the journal holds for `method path`.
fn requests(sim: &SimHandle, method: &str, path: &str) -> usize {
    sim.journal(0, None)
        .iter()
        .filter(|e| e.method == method && e.path == path)
        .count()
}

/// No request to the simulator carried an `authorization` header.
#[track_caller]
fn assert_no_authorization(sim: &SimHandle) {
    for entry in sim.journal(0, None) {
        assert!(
            entry
                .headers
                .iter()
                .all(|(name, _)| name != "authorization"),
            "{} {} carried a key",
            entry.method,
            entry.path
        );
    }
}

/// The `agents.json` profile a registration saves (cli.md §6.1), with `registeredAt` checked
/// for its format and then replaced by `<time>`.
fn saved_profile(s: &Scratch, name: &str) -> Value {
    let mut entry = s.agents()[name].clone();
    let at = entry["registeredAt"]
        .as_str()
        .expect("registeredAt")
        .to_owned();
    let shape: String = at
        .chars()
        .map(|c| if c.is_ascii_digit() { '0' } else { c })
        .collect();
    assert_eq!(shape, "0000-00-00T00:00:00Z", "{at}");
    entry["registeredAt"] = json!("<time>");
    entry
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approved_registration_saves_the_profile_binds_the_env_and_acks() {
    let sim = dev_sim().await;
    let s = Scratch::new();
    s.write_env(&dev_env_file(&sim));
    let mut child = s
        .start(&[], &[], "1\nOps Bot\n\n+15550100\n\n\n\n\n\n\n")
        .await;
    let request_id = registration_polled(&sim, &mut child, 1, 2).await;
    let agent = sim.approve_registration(&request_id).expect("approved");
    let out = finish(child).await;
    assert_exit(&out, 0);

    let (body, polls, acked) = registration(&sim, 0);
    let dots = ".".repeat(usize::try_from(polls).expect("small") - 1);
    let expected = format!(
        "{}{MENU}
  Agent display name [Hermes]:   Agent description [Hermes gateway agent]:   Canon owner phone \
number (E.164, exact number from the Canon app):   Local Canon profile name [ops-bot]: {}✓   \
Registration submitted (request ID: {request_id}).
    Approve the request in the Canon app. Waiting up to 5 minutes...
{dots}
✓   Canon agent 'Ops Bot' saved as profile 'ops-bot'.
    Hermes will use CANON_AGENT for the Canon platform.
",
        s.opening(),
        dev_connection_prompts(&sim)
    );
    assert_eq!(stdout(&out), expected);
    assert_eq!(stderr(&out), "");

    // The registration as sent (canon-wire.md §1.4): no requestedAgentId without one to ask for.
    let local = body["localRegistrationId"]
        .as_str()
        .expect("an id")
        .to_owned();
    let hex = local.strip_prefix("hermes-").expect("hermes- prefix");
    assert!(
        hex.len() == 32
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "{local}"
    );
    assert_eq!(
        body,
        json!({
            "name": "Ops Bot",
            "description": "Hermes gateway agent",
            "ownerPhone": "+15550100",
            "developerInfo": "Hermes gateway platform adapter",
            "clientType": "hermes",
            "localRegistrationId": local,
        })
    );
    assert!(acked, "the key delivery is acknowledged");

    // agents.json: exactly the keys of cli.md §6.1, private, in a private CANON_HOME.
    let key = sim.key_of(&agent).expect("the issued key");
    assert_eq!(
        saved_profile(&s, "ops-bot"),
        json!({
            "apiKey": key,
            "agentId": agent,
            "agentName": "Ops Bot",
            "registeredAt": "<time>",
            "clientType": "hermes",
            "environmentId": "canon-dev-v1",
            "baseUrl": sim.base_url(),
            "streamUrl": sim.stream_url(),
            "rtdbUrl": DEV_RTDB,
            "firebaseApiKey": DEV_FIREBASE,
        })
    );
    assert_eq!(s.agents().as_object().expect("an object").len(), 1);
    assert_eq!(mode(&s.agents_path()), 0o600);
    assert_eq!(mode(&s.canon_home), 0o700);

    // .env: CANON_AGENT, and the direct-key settings gone (they were the prompts' defaults).
    let env = s.env_vars();
    assert_eq!(env.get("CANON_AGENT").map(String::as_str), Some("ops-bot"));
    for name in DIRECT_KEY_VARS {
        assert!(!env.contains_key(name), "{name} left in .env: {env:?}");
    }
    assert_eq!(s.pending(), json!({}), "the pending entry is deleted");

    // One registration; the health check came first; no key was ever sent.
    assert_eq!(requests(&sim, "POST", "/agents/register"), 1);
    let paths: Vec<String> = sim
        .journal(0, None)
        .iter()
        .map(|e| e.path.clone())
        .collect();
    assert_eq!(paths[..3], ["/healthz/", "/health", "/agents/register"]);
    assert_eq!(
        requests(&sim, "POST", &format!("/agents/status/{request_id}/ack")),
        1
    );
    assert_no_authorization(&sim);
    let token = sim.read_state(|st| st.registrations[0].poll_token.clone());
    assert_hidden(&out, &[&key, &token]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rejected_registration_deletes_the_pending_entry_and_fails() {
    let sim = dev_sim().await;
    let s = Scratch::new();
    s.write_env(&dev_env_file(&sim));
    let mut child = s.start(&[], &[], "\n\n\n+15550100\n\n\n\n\n\n\n").await;
    let request_id = registration_polled(&sim, &mut child, 1, 1).await;
    assert!(sim.reject_registration(&request_id));
    let out = finish(child).await;
    assert_exit(&out, 1);
    let (_, polls, acked) = registration(&sim, 0);
    let dots = ".".repeat(usize::try_from(polls).expect("small") - 1);
    assert!(
        stdout(&out).ends_with(&format!(
            "    Approve the request in the Canon app. Waiting up to 5 minutes...\n{dots}\n⚠   \
             Canon registration was rejected.\n"
        )),
        "{}",
        stdout(&out)
    );
    assert!(!acked);
    assert_eq!(s.pending(), json!({}));
    assert!(!s.agents_path().exists(), "no profile is saved");
    assert_eq!(s.env_vars(), {
        let mut env = BTreeMap::new();
        env.insert("CANON_ENVIRONMENT_ID".to_owned(), "canon-dev-v1".to_owned());
        env.insert("CANON_BASE_URL".to_owned(), sim.base_url());
        env.insert("CANON_STREAM_URL".to_owned(), sim.base_url());
        env
    });
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timed_out_registration_keeps_the_pending_entry_for_the_next_run() {
    let sim = dev_sim().await;
    let s = Scratch::new();
    s.write_env(&dev_env_file(&sim));
    let out = s
        .setup(
            &["--approval-timeout-secs", "1"],
            &[],
            "\n\n\n+15550100\n\n\n\n\n\n\n",
        )
        .await;
    assert_exit(&out, 1);
    let (body, polls, _) = registration(&sim, 0);
    assert!(polls >= 1);
    let dots = ".".repeat(usize::try_from(polls).expect("small"));
    assert!(
        stdout(&out).ends_with(&format!(
            "Waiting up to 5 minutes...\n{dots}\n⚠   Canon registration timed out. Run setup \
             again to retry.\n"
        )),
        "one dot per pending poll ({polls}): {}",
        stdout(&out)
    );
    let request_id = sim.read_state(|st| st.registrations[0].request_id.clone());
    let token = sim.read_state(|st| st.registrations[0].poll_token.clone());
    let mut entry = s.pending()["hermes"].clone();
    let submitted = entry["submittedAt"]
        .as_str()
        .expect("submittedAt")
        .to_owned();
    assert_eq!(submitted.len(), "2026-01-01T00:00:00Z".len(), "{submitted}");
    entry["submittedAt"] = json!("<time>");
    assert_eq!(
        entry,
        json!({
            "localRegistrationId": body["localRegistrationId"],
            "requestId": request_id,
            "pollToken": token,
            "environmentId": "canon-dev-v1",
            "baseUrl": sim.base_url(),
            "streamUrl": sim.stream_url(),
            "rtdbUrl": DEV_RTDB,
            "firebaseApiKey": DEV_FIREBASE,
            "submittedAt": "<time>",
        })
    );
    assert_eq!(
        mode(&s.canon_home.join("pending-registrations.json")),
        0o600
    );
    assert_hidden(&out, &[&token]);
}

/// Sends SIGINT to `child` (a real signal, as Ctrl-C sends one).
fn interrupt(child: &Child) {
    let pid = child.id().expect("running").to_string();
    let sent = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill runs");
    assert!(sent.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_while_waiting_keeps_the_request_and_the_next_run_resumes_it() {
    let sim = dev_sim().await;
    let s = Scratch::new();
    s.write_env(&dev_env_file(&sim));
    let answers = "\n\n\n+15550100\n\n\n\n\n\n\n";
    let mut child = s.start(&[], &[], answers).await;
    let request_id = registration_polled(&sim, &mut child, 1, 1).await;
    interrupt(&child);
    let out = finish(child).await;
    assert_exit(&out, 130);
    let text = stdout(&out);
    let (head, dots) = text
        .strip_suffix("\nCanon setup cancelled.\n")
        .and_then(|rest| rest.split_once("Waiting up to 5 minutes...\n"))
        .unwrap_or_else(|| panic!("a cancelled wait: {text}"));
    assert!(dots.bytes().all(|b| b == b'.'), "{dots:?}");
    assert!(head.contains(&format!(
        "✓   Registration submitted (request ID: {request_id})."
    )));
    assert_eq!(s.pending()["hermes"]["requestId"], request_id.as_str());
    let (_, polls_before, _) = registration(&sim, 0);

    // The next run reconnects to the same request instead of submitting a new one.
    let mut child = s.start(&[], &[], answers).await;
    registration_polled(&sim, &mut child, 1, polls_before + 1).await;
    sim.approve_registration(&request_id).expect("approved");
    let out = finish(child).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(
        text.contains(&format!(
            "{}    Reconnecting to pending registration (request ID: {request_id}).\n    Approve \
             the request in the Canon app. Waiting up to 5 minutes...\n",
            dev_connection_prompts(&sim)
        )),
        "{text}"
    );
    assert!(!text.contains("Registration submitted"), "{text}");
    assert!(
        text.ends_with(
            "✓   Canon agent 'Hermes' saved as profile 'hermes'.\n    Hermes will use CANON_AGENT \
             for the Canon platform.\n"
        ),
        "{text}"
    );
    assert_eq!(sim.read_state(|st| st.registrations.len()), 1);
    assert_eq!(requests(&sim, "POST", "/agents/register"), 1);
    assert_eq!(s.pending(), json!({}));
    assert_eq!(s.agents()["hermes"]["clientType"], "hermes");
}

/// Reads `child`'s stdout until it ends with `marker`; what was read.
async fn read_until(child: &mut Child, marker: &str) -> String {
    let stdout = child.stdout.as_mut().expect("piped stdout");
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(WAIT, async {
        while !String::from_utf8_lossy(&seen).ends_with(marker) {
            let n = stdout.read(&mut buf).await.expect("stdout");
            assert!(
                n > 0,
                "stdout closed before {marker:?}: {}",
                String::from_utf8_lossy(&seen)
            );
            seen.extend_from_slice(&buf[..n]);
        }
    })
    .await
    .expect("the prompt appears");
    String::from_utf8_lossy(&seen).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_or_end_of_input_at_a_prompt_cancels_with_130() {
    // SIGINT while the menu waits for its answer (stdin stays open).
    let s = Scratch::new();
    let mut child = s
        .command(&["setup"], &[])
        .kill_on_drop(true)
        .spawn()
        .expect("starts");
    let seen = read_until(&mut child, "  Select [1-3] (1): ").await;
    assert_eq!(seen, format!("{}{MENU}", s.opening()));
    interrupt(&child);
    let out = finish(child).await;
    assert_exit(&out, 130);
    assert_eq!(stdout(&out), "\nCanon setup cancelled.\n");

    // End of input at a text prompt.
    let out = s.setup(&[], &[], "1\n").await;
    assert_exit(&out, 130);
    assert_eq!(
        stdout(&out),
        format!(
            "{}{MENU}\n  Agent display name [Hermes]: \nCanon setup cancelled.\n",
            s.opening()
        )
    );
    assert!(!s.canon_home.exists(), "nothing was written");
    assert!(!s.env_path().exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn on_a_terminal_the_wait_is_one_live_line_with_its_elapsed_time() {
    let sim = dev_sim().await;
    let s = Scratch::new();
    let url = sim.base_url();
    // util-linux `script` runs setup on a pseudo-terminal and copies what it draws.
    let setup = format!(
        "{bin} setup --python {python} --poll-interval-ms 20 --register --name Tty --description \
         x --owner-phone +15550100 --local-profile tty --environment-id canon-dev-v1 --base-url \
         {url} --stream-url {url} --rtdb-url '' --firebase-api-key ''",
        bin = env!("CARGO_BIN_EXE_canon-hermes"),
        python = hermes_python().display(),
    );
    let mut script = std::process::Command::new("script");
    script.args(["-qfec", &setup, "/dev/null"]);
    s.prepare(&mut script, &[("TERM", "xterm")]);
    // Stdin stays open (a closed one would end the terminal session at once).
    let mut child = Command::from(script)
        .kill_on_drop(true)
        .spawn()
        .expect("script runs");
    let request_id = registration_polled(&sim, &mut child, 1, 3).await;
    sim.approve_registration(&request_id).expect("approved");
    let out = finish(child).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(
        text.contains("Waiting for approval in the Canon app… 0:0")
            && text.contains(" elapsed (up to 5:00)"),
        "{text}"
    );
    assert!(!text.contains("\n.."), "no dots on a terminal: {text}");
    // Coloured as Hermes colours its messages on a terminal.
    assert!(
        text.contains("\x1b[32m✓   Canon agent 'Tty' saved as profile 'tty'.\x1b[0m"),
        "{text}"
    );
    assert_eq!(s.agents()["tty"]["clientType"], "hermes");
}

/// A legacy `agents.json` profile: an identity without its environment binding.
fn legacy_profile(agent_id: &str) -> Value {
    json!({"apiKey": "sk-legacy-secret", "agentId": agent_id})
}

#[tokio::test(flavor = "multi_thread")]
async fn reconnecting_asks_for_the_saved_agent_id_or_the_transferred_one() {
    let sim = dev_sim().await;
    let s = Scratch::new();
    s.save_agents(&json!({"ops": legacy_profile("a-old")}));
    let url = sim.base_url();
    let flags = [
        "--register",
        "--name",
        "Ops",
        "--description",
        "",
        "--owner-phone",
        "+15550100",
        "--local-profile",
        "ops",
        "--environment-id",
        "canon-dev-v1",
        "--base-url",
        &url,
        "--stream-url",
        &url,
        "--rtdb-url",
        DEV_RTDB,
        "--firebase-api-key",
        DEV_FIREBASE,
    ];
    // Every answer is a flag: nothing is asked and stdin is never read.
    let mut child = s.start(&flags, &[], "").await;
    let request_id = registration_polled(&sim, &mut child, 1, 1).await;
    let agent = sim.approve_registration(&request_id).expect("approved");
    let out = finish(child).await;
    assert_exit(&out, 0);
    let (body, polls, _) = registration(&sim, 0);
    assert_eq!(body["requestedAgentId"], "a-old");
    assert_eq!(
        body["description"], "Hermes gateway agent",
        "an empty flag is the default"
    );
    assert_eq!(agent, "a-old", "the same identity");
    let dots = ".".repeat(usize::try_from(polls).expect("small") - 1);
    assert_eq!(
        stdout(&out),
        format!(
            "{}\n✓   Registration submitted (request ID: {request_id}).\n    Approve the request \
             in the Canon app. Waiting up to 5 minutes...\n{dots}\n✓   Canon agent 'Ops' saved \
             as profile 'ops'.\n    Hermes will use CANON_AGENT for the Canon platform.\n",
            s.opening()
        )
    );
    let saved = saved_profile(&s, "ops");
    assert_eq!(saved["agentId"], "a-old");
    assert_eq!(
        saved["apiKey"],
        sim.key_of("a-old").expect("a key").as_str()
    );
    assert_eq!(
        saved.as_object().expect("object").len(),
        10,
        "the legacy entry is replaced whole"
    );
    assert_hidden(&out, &["sk-legacy-secret"]);

    // A transferred identity: --agent-id wins over the saved one. Canon is configured now
    // (CANON_AGENT=ops), so --reconfigure answers that question too.
    let mut moved: Vec<&str> = flags.to_vec();
    moved.extend(["--agent-id", " a-moved ", "--reconfigure"]);
    let mut child = s.start(&moved, &[], "").await;
    let request_id = registration_polled(&sim, &mut child, 2, 1).await;
    sim.approve_registration(&request_id).expect("approved");
    let out = finish(child).await;
    assert_exit(&out, 0);
    assert!(stdout(&out).starts_with(&format!(
        "{}\n✓ Canon is already configured with profile 'ops'.\n\n✓   Registration submitted",
        s.opening()
    )));
    assert_eq!(registration(&sim, 1).0["requestedAgentId"], "a-moved");
    assert_eq!(s.agents()["ops"]["agentId"], "a-moved");
}

/// A usable Hermes profile of `agents.json` bound to `sim`.
fn usable_profile(sim: &SimHandle, name: &str) -> Value {
    let mut agents = sim.agents_json(name);
    agents[name]["environmentId"] = json!("canon-dev-v1");
    agents[name]["rtdbUrl"] = json!(DEV_RTDB);
    agents[name].clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_existing_profile_is_bound_and_the_raw_key_removed() {
    let sim = dev_sim().await;
    let s = Scratch::new();
    s.save_agents(&json!({
        "ops": usable_profile(&sim, "ops"),
        "other-runtime": {"clientType": "openclaw", "apiKey": "sk-other"},
    }));
    s.write_env("CANON_ALLOW_ALL_USERS=true\nCANON_API_KEY=sk-old-secret\n");
    let out = s.setup(&[], &[], "y\n2\n\n").await;
    assert_exit(&out, 0);
    assert_eq!(
        stdout(&out),
        format!(
            "{}\n✓ Canon is already configured.\n  Reconfigure Canon? [y/N]: {MENU}  Canon profile \
             [ops]: ✓   Canon profile 'ops' saved.\n",
            s.opening()
        )
    );
    let env = s.env_vars();
    assert_eq!(env.get("CANON_AGENT").map(String::as_str), Some("ops"));
    assert!(!env.contains_key("CANON_API_KEY"), "{env:?}");
    assert_eq!(
        env.get("CANON_ALLOW_ALL_USERS").map(String::as_str),
        Some("true")
    );
    assert_hidden(&out, &["sk-old-secret", &sim.api_key(), "sk-other"]);
    assert!(
        sim.journal(0, None).is_empty(),
        "no network check (as 0.14.1)"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_existing_profile_that_is_unknown_unusable_or_missing_fails_with_its_line() {
    let sim = dev_sim().await;
    let s = Scratch::new();
    s.save_agents(&json!({
        "ops": usable_profile(&sim, "ops"),
        "legacy": legacy_profile("a-legacy"),
        "other-runtime": {"clientType": "openclaw", "apiKey": "sk-other"},
    }));
    let agents = s.agents_path().display().to_string();
    let before = fs::read(s.agents_path()).expect("agents.json");

    // Two Hermes candidates and no CANON_AGENT: not configured, the first is the default.
    let out = s.setup(&[], &[], "2\nnope\n").await;
    assert_exit(&out, 1);
    assert_eq!(
        stdout(&out),
        format!(
            "{}{MENU}  Canon profile [legacy]: ✗   Profile 'nope' was not found in {agents}.\n",
            s.opening()
        )
    );

    let out = s.setup(&["--existing", "legacy"], &[], "").await;
    assert_exit(&out, 1);
    assert_eq!(
        stdout(&out),
        format!(
            "{}✗   Profile 'legacy' is not usable: Canon profile \"legacy\" is missing identity or \
             environment binding: agentName, registeredAt, environmentId, baseUrl, streamUrl, \
             rtdbUrl, firebaseApiKey\n",
            s.opening()
        )
    );

    let out = s.setup(&["--existing", "other-runtime"], &[], "").await;
    assert_exit(&out, 1);
    assert!(stdout(&out).ends_with(
        "✗   Profile 'other-runtime' is not usable: Canon profile \"other-runtime\" is not \
         registered for Hermes\n"
    ));
    assert_hidden(&out, &["sk-legacy-secret", "sk-other"]);
    assert_eq!(fs::read(s.agents_path()).expect("agents.json"), before);
    assert!(!s.env_path().exists(), ".env is untouched");

    // No agents.json at all.
    let s = Scratch::new();
    let out = s.setup(&[], &[], "2\n\n").await;
    assert_exit(&out, 1);
    assert_eq!(
        stdout(&out),
        format!(
            "{}{MENU}⚠   No Hermes-compatible profiles found in ~/.canon/agents.json.\n  Canon \
             profile: ⚠   Skipped - Canon needs a profile name.\n",
            s.opening()
        )
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_the_administrator_pins_is_refused_by_hermes_and_nothing_changes() {
    let sim = dev_sim().await;
    let s = Scratch::new();
    s.save_agents(&json!({"ops": usable_profile(&sim, "ops")}));
    let managed = s.dir.path().join("managed");
    fs::create_dir_all(&managed).expect("managed dir");
    fs::write(managed.join(".env"), "CANON_API_KEY=sk-managed-secret\n").expect("managed .env");
    let managed_dir = managed.display().to_string();
    let out = s
        .setup(
            &["--existing", "ops", "--reconfigure"],
            &[("HERMES_MANAGED_DIR", &managed_dir)],
            "",
        )
        .await;
    assert_exit(&out, 1);
    assert!(
        stdout(&out).ends_with(&format!(
            "✗   Could not update {}: Cannot remove CANON_API_KEY: it is managed by your \
             administrator ({managed_dir}/.env) and cannot be changed.\n",
            s.env_path().display()
        )),
        "{}",
        stdout(&out)
    );
    assert!(
        !s.env_path().exists(),
        "Hermes refused before writing anything"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_raw_key_without_an_environment_id_takes_the_default_environment() {
    let sim = sim_in("canon-prod-v1", "canonmail-prod").await;
    let s = Scratch::new();
    s.write_env("CANON_AGENT=gone\n");
    let url = sim.base_url();
    let input = format!("y\n3\nsk-raw-secret\n\n{url}\n{url}\n\n\n");
    let out = s.setup(&[], &[], &input).await;
    assert_exit(&out, 0);
    assert_eq!(
        stdout(&out),
        format!(
            "{}\n✓ Canon is already configured with profile 'gone'.\n  Reconfigure Canon? [y/N]: \
             {MENU}\n    Use this only for headless deployments that cannot use a saved \
             profile.\n  Canon API key:   Canon environment ID [canon-prod-v1]:   Canon API base \
             URL [https://api.canonmail.com]:   Canon stream URL \
             [https://stream.canonmail.com]:   Canon Realtime Database URL [{PROD_RTDB}]:   \
             Canon Firebase web API key [{PROD_FIREBASE}]: ✓   Canon API key saved.\n",
            s.opening()
        )
    );
    // The full snapshot, defaults included; CANON_AGENT removed.
    let expected: BTreeMap<String, String> = [
        ("CANON_API_KEY", "sk-raw-secret"),
        ("CANON_ENVIRONMENT_ID", "canon-prod-v1"),
        ("CANON_BASE_URL", url.as_str()),
        ("CANON_STREAM_URL", url.as_str()),
        ("CANON_RTDB_URL", PROD_RTDB),
        ("CANON_FIREBASE_API_KEY", PROD_FIREBASE),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(s.env_vars(), expected);
    assert_hidden(&out, &["sk-raw-secret"]);
    let paths: Vec<String> = sim
        .journal(0, None)
        .iter()
        .map(|e| e.path.clone())
        .collect();
    assert_eq!(paths, ["/healthz/", "/health"]);
    assert_no_authorization(&sim);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_raw_key_from_the_environment_with_an_environment_id_runs_unattended() {
    let sim = dev_sim().await;
    let s = Scratch::new();
    let url = sim.base_url();
    let args = [
        "--api-key-env",
        "--environment-id",
        "canon-dev-v1",
        "--base-url",
        &url,
        "--stream-url",
        &url,
        "--rtdb-url",
        "",
        "--firebase-api-key",
        "",
    ];
    // CANON_API_KEY in the process environment is the answer, not "already configured".
    let out = s
        .setup(&args, &[("CANON_API_KEY", "sk-env-secret")], "")
        .await;
    assert_exit(&out, 0);
    assert_eq!(
        stdout(&out),
        format!(
            "{}\n    Use this only for headless deployments that cannot use a saved profile.\n✓   \
             Canon API key saved.\n",
            s.opening()
        )
    );
    let env = s.env_vars();
    assert_eq!(env["CANON_API_KEY"], "sk-env-secret");
    assert_eq!(env["CANON_ENVIRONMENT_ID"], "canon-dev-v1");
    assert_eq!(
        env["CANON_RTDB_URL"], DEV_RTDB,
        "a blank answer is the default"
    );
    assert_eq!(env["CANON_FIREBASE_API_KEY"], DEV_FIREBASE);
    assert_eq!(
        mode(&s.env_path()),
        0o600,
        "a new .env is private (Hermes' rule)"
    );
    assert_hidden(&out, &["sk-env-secret"]);

    // Another variable, and one that is empty.
    let s = Scratch::new();
    let mut named = args.to_vec();
    named[0] = "--api-key-env=SETUP_TEST_KEY";
    let out = s
        .setup(&named, &[("SETUP_TEST_KEY", "sk-named-secret")], "")
        .await;
    assert_exit(&out, 0);
    assert_eq!(s.env_vars()["CANON_API_KEY"], "sk-named-secret");
    let s = Scratch::new();
    let out = s.setup(&args, &[], "").await;
    assert_exit(&out, 1);
    assert!(stdout(&out)
        .ends_with("profile.\n⚠   Skipped - Canon needs CANON_API_KEY or CANON_AGENT.\n"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_custom_environment_needs_all_four_endpoints_and_takes_its_project_from_health() {
    let sim = sim_in("acme-staging", "acme-proj").await;
    let s = Scratch::new();
    let url = sim.base_url();
    let rtdb = "https://acme-proj-default-rtdb.firebaseio.com";
    let input =
        format!("1\nAcme\n\n+15550100\n\nacme-staging\n{url}\n{url}\n{rtdb}\nacme-web-key\n");
    let mut child = s.start(&[], &[], &input).await;
    let request_id = registration_polled(&sim, &mut child, 1, 1).await;
    sim.approve_registration(&request_id).expect("approved");
    let out = finish(child).await;
    assert_exit(&out, 0);
    // Nothing is prefilled for an environment without packaged endpoints.
    assert!(
        stdout(&out).contains(
            "Local Canon profile name [acme]:   Canon environment ID [canon-prod-v1]:   Canon API \
             base URL:   Canon stream URL:   Canon Realtime Database URL:   Canon Firebase web API \
             key: ✓   Registration submitted"
        ),
        "{}",
        stdout(&out)
    );
    let saved = saved_profile(&s, "acme");
    assert_eq!(
        [
            &saved["environmentId"],
            &saved["baseUrl"],
            &saved["streamUrl"],
            &saved["rtdbUrl"],
            &saved["firebaseApiKey"],
        ],
        [
            &json!("acme-staging"),
            &json!(url),
            &json!(url),
            &json!(rtdb),
            &json!("acme-web-key"),
        ]
    );
    assert!(
        saved.get("projectId").is_none(),
        "the project is not stored"
    );

    // The failures, each before anything is written: a missing endpoint, an RTDB host of
    // another project, a stream service of another project.
    let verification = |detail: &str| {
        format!("Canon Firebase web API key: ✗   Canon environment verification failed: {detail}\n")
    };
    for (rtdb, detail) in [
        (
            "",
            "Missing Canon runtime endpoint: acme-staging.rtdbUrl".to_owned(),
        ),
        (
            "https://other-proj-default-rtdb.firebaseio.com",
            "Canon RTDB endpoint for acme-staging must belong to project acme-proj".to_owned(),
        ),
    ] {
        let s = Scratch::new();
        let input = format!("3\nsk-acme\nacme-staging\n{url}\n{url}\n{rtdb}\nacme-web-key\n");
        let out = s.setup(&[], &[], &input).await;
        assert_exit(&out, 1);
        assert!(
            stdout(&out).ends_with(&verification(&detail)),
            "{}",
            stdout(&out)
        );
        assert!(!s.env_path().exists());
    }
    sim.set_switches(|sw| sw.stream_health_project_id = Some("elsewhere".into()));
    let s = Scratch::new();
    let input = format!(
        "3\nsk-acme\nacme-staging\n{url}\n{url}\nhttps://acme-proj-default-rtdb.firebaseio.com\nk\n"
    );
    let out = s.setup(&[], &[], &input).await;
    assert_exit(&out, 1);
    assert!(
        stdout(&out).ends_with(&verification(&format!(
            "Canon runtime endpoint {url}/health does not match environment acme-staging"
        ))),
        "{}",
        stdout(&out)
    );
    assert_hidden(&out, &["sk-acme"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_health_mismatch_fails_verification_before_anything_is_written() {
    for (environment, project) in [
        ("canon-other-v1", "canonmail-dev"),
        ("canon-dev-v1", "elsewhere"),
    ] {
        let sim = sim_in(environment, project).await;
        let s = Scratch::new();
        s.write_env(&dev_env_file(&sim));
        let out = s
            .setup(&["--register"], &[], "\n\n+15550100\n\n\n\n\n\n\n")
            .await;
        assert_exit(&out, 1);
        assert_eq!(
            stdout(&out),
            format!(
                "{}{REGISTER_PROMPTS}{}✗   Canon environment verification failed: Canon runtime \
                 endpoint {}/healthz/ does not match environment canon-dev-v1\n",
                s.opening(),
                dev_connection_prompts(&sim),
                sim.base_url()
            )
        );
        assert_eq!(requests(&sim, "POST", "/agents/register"), 0);
        assert!(!s.canon_home.exists(), "no pending registration");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn already_configured_and_declined_exits_0_and_changes_nothing() {
    let sim = dev_sim().await;
    let s = Scratch::new();
    s.write_env("CANON_AGENT=ops\n");
    let out = s.setup(&[], &[], "").await;
    assert_exit(&out, 0);
    // End of input at a yes/no prompt is its default (no), after a newline.
    assert_eq!(
        stdout(&out),
        format!(
            "{}\n✓ Canon is already configured with profile 'ops'.\n  Reconfigure Canon? [y/N]: \n",
            s.opening()
        )
    );
    let out = s.setup(&[], &[], "maybe\nN\n").await;
    assert_exit(&out, 0);
    assert!(stdout(&out).ends_with(
        "  Reconfigure Canon? [y/N]: ✗ Please enter 'y' or 'n'\n  Reconfigure Canon? [y/N]: "
    ));
    assert_eq!(
        fs::read_to_string(s.env_path()).expect(".env"),
        "CANON_AGENT=ops\n"
    );
    assert!(!s.canon_home.exists());

    // One usable profile resolves on its own: configured without CANON_AGENT.
    let s = Scratch::new();
    s.save_agents(&json!({"ops": usable_profile(&sim, "ops")}));
    let out = s.setup(&[], &[], "\n").await;
    assert_exit(&out, 0);
    assert!(
        stdout(&out).ends_with("\n✓ Canon is already configured.\n  Reconfigure Canon? [y/N]: ")
    );
    assert_hidden(&out, &[&sim.api_key()]);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_menu_asks_again_after_a_bad_answer() {
    let s = Scratch::new();
    let out = s.setup(&[], &[], "x\n5\n 2 \n\n").await;
    assert_exit(&out, 1);
    assert_eq!(
        stdout(&out),
        format!(
            "{}{MENU}✗ Please enter a number\n  Select [1-3] (1): ✗ Please enter a number between \
             1 and 3\n  Select [1-3] (1): ⚠   No Hermes-compatible profiles found in \
             ~/.canon/agents.json.\n  Canon profile: ⚠   Skipped - Canon needs a profile name.\n",
            s.opening()
        )
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn install_with_setup_continues_into_setup_in_the_same_profile() {
    let sim = dev_sim().await;
    let s = Scratch::new();
    let python = hermes_python();
    let url = sim.base_url();
    let input = format!("1\n\n\n+15550100\n\ncanon-dev-v1\n{url}\n{url}\n\n\n");
    let command = s.command(
        &[
            "install",
            "--setup",
            "--python",
            python.to_str().expect("utf-8"),
        ],
        &[],
    );
    let child = spawn_with_input(command, &input).await;
    // Approved as soon as it is submitted: install --setup polls at the spec's 3 s.
    sim.wait_for("a registration", WAIT, |st| !st.registrations.is_empty())
        .await
        .expect("submitted");
    let request_id = sim.read_state(|st| st.registrations[0].request_id.clone());
    let agent = sim.approve_registration(&request_id).expect("approved");
    let out = finish(child).await;
    assert_exit(&out, 0);
    let (_, polls, _) = registration(&sim, 0);
    let dots = ".".repeat(usize::try_from(polls).expect("small") - 1);
    let plugin_dir = s.hermes_home.join("plugins/canon-hermes");
    let expected = format!(
        "Hermes profile: default ({home})
Installed Canon shim: {plugin} (canon-hermes {version})
Enabled Hermes plugin: canon-hermes
Enabled Hermes platform: canon
Set CANON_ALLOW_ALL_USERS=true for Canon-managed first setup.
Restart the Hermes gateway to load the Canon plugin: hermes gateway restart

  --- Canon Setup ---

    Canon can use an existing agent profile or register a new Hermes agent.
    Registration sends an approval request to the Canon owner app.
{MENU}{REGISTER_PROMPTS}  Canon environment ID [canon-prod-v1]:   Canon API base URL \
[https://dev.api.canonmail.com]:   Canon stream URL [https://dev.stream.canonmail.com]:   Canon \
Realtime Database URL [{DEV_RTDB}]:   Canon Firebase web API key [{DEV_FIREBASE}]: ✓   \
Registration submitted (request ID: {request_id}).
    Approve the request in the Canon app. Waiting up to 5 minutes...
{dots}
✓   Canon agent 'Hermes' saved as profile 'hermes'.
    Hermes will use CANON_AGENT for the Canon platform.
",
        home = s.hermes_home.display(),
        plugin = plugin_dir.display(),
        version = env!("CARGO_PKG_VERSION"),
    );
    assert_eq!(stdout(&out), expected);
    assert!(plugin_dir.join("manifest.json").is_file());
    assert_eq!(
        fs::read_to_string(s.env_path()).expect(".env"),
        "CANON_ALLOW_ALL_USERS=true\nCANON_AGENT=hermes\n"
    );
    assert_eq!(s.agents()["hermes"]["agentId"], agent.as_str());
    assert_eq!(s.agents()["hermes"]["rtdbUrl"], DEV_RTDB);

    // A failed setup is install's exit code too.
    let s = Scratch::new();
    let command = s.command(
        &[
            "install",
            "--setup",
            "--python",
            python.to_str().expect("utf-8"),
        ],
        &[],
    );
    let out = finish(spawn_with_input(command, "1\n\n\n\n").await).await;
    assert_exit(&out, 1);
    assert!(stdout(&out)
        .ends_with("⚠   Skipped - Canon registration needs the owner's phone number.\n"));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_command_line_surface() {
    let s = Scratch::new();
    let run = |args: &[&str]| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_canon-hermes"));
        command
            .args(args)
            .env("HOME", s.dir.path())
            .stdin(Stdio::null())
            .output()
            .expect("runs")
    };
    let help = stdout(&run(&["--help"]));
    assert!(
        help.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")
                == "setup Register or reconnect a Canon agent profile"),
        "{help}"
    );
    let out = run(&["setup", "--help"]);
    assert_exit(&out, 0);
    let help = stdout(&out);
    assert!(
        help.contains("--agent-id <ID>")
            && help.contains("Reconnect this exact transferred Canon agent identity"),
        "{help}"
    );
    for flag in [
        "--register",
        "--existing <PROFILE>",
        "--api-key-env [<VAR>]",
        "--owner-phone <PHONE>",
        "--reconfigure",
    ] {
        assert!(help.contains(flag), "{flag}: {help}");
    }
    assert!(!help.contains("--poll-interval-ms"), "hidden: {help}");
    for usage in [
        &["setup", "--name", "x"][..],
        &["setup", "--register", "--existing", "ops"],
        &["setup", "--existing", "ops", "--agent-id", "a"],
        &["setup", "--environment-id", "canon-dev-v1"],
        &["setup", "--existing", "ops", "--base-url", "https://x"],
        &["setup", "--api-key", "sk"],
    ] {
        assert_eq!(run(usage).status.code(), Some(2), "{usage:?}");
    }
}
