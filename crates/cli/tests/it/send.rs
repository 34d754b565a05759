//! `canon-hermes send` (hermes-host.md §15, turns.md §4.6, canon-wire.md §8.8), the real binary
//! against canon-sim: credentials resolved as `serve` resolves them (the simulator's
//! `--print-env` lines: an environment id, so the health check runs), one standalone id group
//! through `send_to`, the byte split of a long message, stdin, `--file`, `--to home` from a profile's
//! `.env`, an ambiguous failure retried inside the run and one finished by `--replay`, each
//! without a duplicate, and the refusals. No output of any run contains the API key.

use std::process::{Output, Stdio};

use canon_sim::faults::{FaultAction, FaultMatcher, FaultRule};
use canon_sim::{SimHandle, DEFAULT_AGENT, DEFAULT_CONVERSATION};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt as _;
use tokio::process::Command;

use super::serve_support::assert_one_group;
use super::shim_support::sim;

/// A 20 KB report: 400 lines, 20,800 bytes without the last line break, six parts.
fn report_text() -> String {
    let lines: Vec<String> = (0..400)
        .map(|i| format!("Report line {i:03}: the nightly job says all is well."))
        .collect();
    lines.join("\n")
}

/// The simulator's `--print-env` lines as (name, value).
fn sim_env(sim: &SimHandle) -> Vec<(String, String)> {
    sim.env_lines()
        .iter()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Every variable the resolver or `send` reads, removed so each test says what it sets.
const HERMETIC: [&str; 16] = [
    "CANON_API_KEY",
    "CANON_AGENT",
    "CANON_AGENTS_JSON_BOOTSTRAP",
    "CANON_AGENTS_PATH",
    "CANON_ENVIRONMENT_ID",
    "CANON_BASE_URL",
    "CANON_STREAM_URL",
    "CANON_RTDB_URL",
    "CANON_FIREBASE_API_KEY",
    "CANON_HOME",
    "CANON_HOME_CHANNEL",
    "HERMES_ALLOW_PRIVATE_URLS",
    "HERMES_S6_SUPERVISED_CHILD",
    "CANON_SIM_CONTROL_URL",
    "RUST_LOG",
    "CANON_TURN_VERBOSITY",
];

/// One finished run: its exit code and what it printed.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn output(&self) -> String {
        format!("stdout:\n{}stderr:\n{}", self.stdout, self.stderr)
    }
}

/// Runs `canon-hermes send ARGS` with `env` (after the hermetic reset: no developer's
/// `~/.hermes/.env` or `agents.json` can configure it) and `stdin`, and checks that nothing it
/// printed holds `secret`.
async fn run_send(args: &[&str], env: &[(String, String)], stdin: &str, secret: &str) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_canon-hermes"));
    command.arg("send").args(args);
    for name in HERMETIC {
        command.env_remove(name);
    }
    command
        .env("HERMES_HOME", "/nonexistent/canon-hermes-tests/hermes")
        .env(
            "CANON_AGENTS_FILE",
            "/nonexistent/canon-hermes-tests/agents.json",
        );
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the binary starts");
    let mut input = child.stdin.take().expect("piped stdin");
    input
        .write_all(stdin.as_bytes())
        .await
        .expect("stdin written");
    drop(input);
    let Output {
        status,
        stdout,
        stderr,
    } = child.wait_with_output().await.expect("the binary ends");
    let run = Run {
        code: status.code(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    };
    assert!(!secret.is_empty());
    assert!(
        !run.stdout.contains(secret) && !run.stderr.contains(secret),
        "the API key was printed: {}",
        run.output()
    );
    run
}

/// The agent's stored messages in the direct conversation: (client id, message).
fn stored_parts(sim: &SimHandle) -> Vec<(Option<String>, Value)> {
    sim.read_state(|s| {
        s.messages
            .iter()
            .filter(|m| m.conversation_id == DEFAULT_CONVERSATION)
            .filter(|m| m.message["senderId"] == DEFAULT_AGENT)
            .map(|m| (m.client_id.clone(), m.message.clone()))
            .collect()
    })
}

/// The simulator's requests to exactly `path`.
fn requests(sim: &SimHandle, path: &str) -> usize {
    sim.journal(0, Some(path))
        .iter()
        .filter(|e| e.path == path)
        .count()
}

/// The one-line summary of a run that sent `parts` parts whose last is `last`.
fn summary(parts: usize, last: &Value) -> String {
    let last = last.as_str().expect("a message id");
    format!("Sent {parts} part(s) to {DEFAULT_CONVERSATION}; last message {last}\n")
}

/// A fault on the `nth` `send_to` calls of the default agent.
fn send_to_fault(sim: &SimHandle, nth: Vec<u64>, action: FaultAction) {
    sim.add_fault(FaultRule {
        id: String::new(),
        matcher: FaultMatcher {
            method: Some("POST".to_owned()),
            path: Some("/agent/verbs/send_to".to_owned()),
            agent: Some(DEFAULT_AGENT.to_owned()),
            nth: Some(nth),
            ..FaultMatcher::default()
        },
        action,
        seen: 0,
        fired: 0,
    })
    .expect("fault installed");
}

/// hermes-host.md §15, canon-wire.md §8.8: the health check of the configured environment
/// (both services), then one `send_to` whose `idempotencyKey` is the group's base id; exit 0
/// with the summary naming Canon's message id.
#[tokio::test(flavor = "multi_thread")]
async fn a_short_message_is_one_send_to_after_the_health_check() {
    let sim = sim().await;
    let key = sim.api_key();
    let run = run_send(
        &["--to", DEFAULT_CONVERSATION, "Backup finished"],
        &sim_env(&sim),
        "",
        &key,
    )
    .await;
    assert_eq!(run.code, Some(0), "{}", run.output());
    let parts = stored_parts(&sim);
    assert_eq!(parts.len(), 1, "{}", run.output());
    let (client_id, message) = &parts[0];
    assert_eq!(message["text"], "Backup finished");
    let client_id = client_id.as_deref().expect("a client id");
    assert!(
        client_id.len() == 45 && client_id.starts_with("hermes-final-"),
        "{client_id}"
    );
    let metadata = &message["metadata"];
    assert_eq!(metadata["turnSemantics"], "turn_complete", "{metadata}");
    assert_eq!(metadata["turnComplete"], true);
    assert!(metadata.get("messageChunk").is_none(), "{metadata}");
    assert!(metadata.get("turnId").is_none(), "{metadata}");
    assert_eq!(run.stdout, summary(1, &message["id"]));
    assert_eq!(run.stderr, "");

    let sends = sim.journal(0, Some("/agent/verbs/send_to"));
    assert_eq!(sends.len(), 1);
    assert_eq!(
        sends[0].body["envelope"],
        json!({"conversationId": DEFAULT_CONVERSATION, "idempotencyKey": client_id})
    );
    assert_eq!(requests(&sim, "/healthz/"), 1, "the API's health check");
    assert_eq!(requests(&sim, "/health"), 1, "the stream's health check");
    assert_eq!(requests(&sim, "/messages/send"), 0);
}

/// turns.md §3, §4.6: 20 KB arrive as ordered parts of one id group, one `send_to` per part.
#[tokio::test(flavor = "multi_thread")]
async fn a_20_kb_message_arrives_as_ordered_parts_of_one_group() {
    let sim = sim().await;
    let text = report_text();
    assert!(text.len() > 20_000);
    let run = run_send(
        &["--to", DEFAULT_CONVERSATION, &text],
        &sim_env(&sim),
        "",
        &sim.api_key(),
    )
    .await;
    assert_eq!(run.code, Some(0), "{}", run.output());
    let parts = stored_parts(&sim);
    assert_eq!(parts.len(), 6, "20,800 bytes in 3,800-byte parts");
    let base = assert_one_group(&parts, &text);
    assert_eq!(run.stdout, summary(6, &parts[5].1["id"]));
    let keys: Vec<Value> = sim
        .journal(0, Some("/agent/verbs/send_to"))
        .iter()
        .map(|e| e.body["envelope"]["idempotencyKey"].clone())
        .collect();
    let expected: Vec<Value> = (1..=6).map(|i| json!(format!("{base}-part-{i}"))).collect();
    assert_eq!(keys, expected, "one request per part, in order, no retries");
}

/// `-` and no TEXT read stdin; its trailing line break is dropped. Each run is a new
/// invocation with its own id group (turns.md §4.6), so the same text twice is two messages.
#[tokio::test(flavor = "multi_thread")]
async fn stdin_is_the_message_for_dash_and_for_no_text() {
    let sim = sim().await;
    let env = sim_env(&sim);
    let key = sim.api_key();
    let input = "disk /srv: 91% used\ndisk /var: 40% used\n";
    for args in [
        &["--to", DEFAULT_CONVERSATION, "-"][..],
        &["--to", DEFAULT_CONVERSATION],
    ] {
        let run = run_send(args, &env, input, &key).await;
        assert_eq!(run.code, Some(0), "{args:?}: {}", run.output());
    }
    let parts = stored_parts(&sim);
    assert_eq!(parts.len(), 2);
    for (_, message) in &parts {
        assert_eq!(message["text"], "disk /srv: 91% used\ndisk /var: 40% used");
    }
    assert_ne!(parts[0].0, parts[1].0, "two invocations, two id groups");
}

/// `--file PATH` reads the message from a UTF-8 file (its trailing line breaks dropped, as for
/// stdin). A file that cannot be read or is not UTF-8, and TEXT beside `--file`, are refused
/// before anything reaches Canon, with exit 2 like every other message that cannot be read.
#[tokio::test(flavor = "multi_thread")]
async fn file_is_the_message_and_an_unreadable_one_is_refused() {
    let sim = sim().await;
    let env = sim_env(&sim);
    let key = sim.api_key();
    let dir = tempfile::tempdir().expect("temp dir");
    let path = |name: &str| dir.path().join(name).to_str().expect("UTF-8").to_owned();
    std::fs::write(path("latin1.txt"), b"caf\xe9 ol\xe9\n").expect("write");
    let refusals = [
        (
            vec!["--file".to_owned(), path("missing.txt")],
            format!(
                "canon-hermes: could not read the message from {}: No such file or directory \
                 (os error 2)\n",
                path("missing.txt")
            ),
        ),
        (
            vec!["--file".to_owned(), path("latin1.txt")],
            format!(
                "canon-hermes: the message in {} is not UTF-8 text\n",
                path("latin1.txt")
            ),
        ),
    ];
    for (args, stderr) in refusals {
        let mut all = vec!["--to", DEFAULT_CONVERSATION];
        all.extend(args.iter().map(String::as_str));
        let run = run_send(&all, &env, "", &key).await;
        assert_eq!(run.code, Some(2), "{args:?}: {}", run.output());
        assert_eq!(run.stderr, stderr);
        assert_eq!(run.stdout, "");
    }
    let run = run_send(
        &[
            "--to",
            DEFAULT_CONVERSATION,
            "--file",
            &path("latin1.txt"),
            "hi",
        ],
        &env,
        "",
        &key,
    )
    .await;
    assert_eq!(run.code, Some(2), "{}", run.output());
    assert!(
        run.stderr.contains("cannot be used with"),
        "{}",
        run.output()
    );
    assert!(sim.journal(0, None).is_empty(), "nothing reached Canon");

    let text = "Nightly backup: 3 files, 12 MB\nÉtat : terminé ✓";
    std::fs::write(path("summary.txt"), format!("{text}\n\n")).expect("write");
    let run = run_send(
        &["--to", DEFAULT_CONVERSATION, "--file", &path("summary.txt")],
        &env,
        "stdin is not read",
        &key,
    )
    .await;
    assert_eq!(run.code, Some(0), "{}", run.output());
    let parts = stored_parts(&sim);
    assert_eq!(parts.len(), 1, "{}", run.output());
    assert_eq!(parts[0].1["text"], text);
    assert_eq!(run.stdout, summary(1, &parts[0].1["id"]));
}

/// cli.md §8.1: `--to home` is `CANON_HOME_CHANNEL`, read like the credentials from the
/// process environment, then the `.env` of the profile `--profile` names (cli.md §2.1).
#[tokio::test(flavor = "multi_thread")]
async fn to_home_sends_to_the_home_channel_of_the_profile() {
    let sim = sim().await;
    let key = sim.api_key();
    let root = tempfile::tempdir().expect("temp dir");
    let profile = root.path().join("profiles").join("cron");
    std::fs::create_dir_all(&profile).expect("profile dir");
    let dotenv: String = sim
        .env_lines()
        .iter()
        .map(|line| format!("{line}\n"))
        .collect();
    std::fs::write(profile.join(".env"), &dotenv).expect("write .env");
    let env = vec![(
        "HERMES_HOME".to_owned(),
        root.path().to_str().expect("UTF-8").to_owned(),
    )];

    let run = run_send(&["--profile", "cron", "--to", "home", "hi"], &env, "", &key).await;
    assert_eq!(run.code, Some(1), "{}", run.output());
    assert_eq!(
        run.stderr,
        format!(
            "canon-hermes: --to home: CANON_HOME_CHANNEL is not set\nSet CANON_HOME_CHANNEL to \
             a conversation id in the environment or in {}, or pass --to <conversation-id>.\n",
            profile.join(".env").display()
        )
    );
    assert_eq!(run.stdout, "");
    assert!(
        sim.journal(0, None).is_empty(),
        "nothing sent, not even a health check"
    );

    std::fs::write(
        profile.join(".env"),
        format!("{dotenv}CANON_HOME_CHANNEL={DEFAULT_CONVERSATION}\n"),
    )
    .expect("write .env");
    let run = run_send(
        &["--profile", "cron", "--to", "home", "to the home channel"],
        &env,
        "",
        &key,
    )
    .await;
    assert_eq!(run.code, Some(0), "{}", run.output());
    let parts = stored_parts(&sim);
    assert_eq!(parts.len(), 1);
    assert_eq!(parts[0].1["text"], "to the home channel");
    assert_eq!(run.stdout, summary(1, &parts[0].1["id"]));
}

/// turns.md §4.5, §4.7: a part processed and then answered with a 502 is retried inside the
/// run with identical bytes under the same `idempotencyKey`; Canon stores each part once.
#[tokio::test(flavor = "multi_thread")]
async fn an_ambiguous_failure_is_retried_inside_the_run_without_duplicates() {
    let sim = sim().await;
    send_to_fault(
        &sim,
        vec![2],
        FaultAction::ProcessThenStatus { status: 502 },
    );
    let text = report_text();
    let run = run_send(
        &["--to", DEFAULT_CONVERSATION, &text],
        &sim_env(&sim),
        "",
        &sim.api_key(),
    )
    .await;
    assert_eq!(run.code, Some(0), "{}", run.output());
    let parts = stored_parts(&sim);
    assert_eq!(parts.len(), 6, "one stored copy of each part");
    assert_one_group(&parts, &text);
    let entries = sim.journal(0, Some("/agent/verbs/send_to"));
    let statuses: Vec<u16> = entries.iter().map(|e| e.status).collect();
    assert_eq!(statuses, [200, 502, 200, 200, 200, 200, 200]);
    assert!(
        entries[1].body == entries[2].body,
        "the retry sends identical bytes"
    );
    assert_eq!(
        entries[2].response["result"]["value"]["messageId"], parts[1].1["id"],
        "the retry was answered with the part the failed attempt stored"
    );
}

/// The brief's replay: a part whose every attempt is processed and then loses its response
/// fails the run (exit 1) with the id group token; the same command again with `--replay`
/// sends byte-identical parts under the same ids, and Canon ends with exactly one copy of each.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_fails_ambiguously_is_finished_by_replay_without_duplicates() {
    let sim = sim().await;
    send_to_fault(&sim, vec![2, 3, 4], FaultAction::ProcessThenDrop);
    let env = sim_env(&sim);
    let key = sim.api_key();
    let text = report_text();
    let run = run_send(&["--to", DEFAULT_CONVERSATION, &text], &env, "", &key).await;
    assert_eq!(run.code, Some(1), "{}", run.output());
    assert_eq!(run.stdout, "");
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{}", run.output());
    assert!(
        lines[0].starts_with("canon-hermes: Canon standalone send failed: "),
        "{}",
        lines[0]
    );
    let token = lines[1]
        .split_whitespace()
        .find(|word| word.starts_with("standalone:"))
        .expect("the replay token");
    assert_eq!(token.len(), "standalone:".len() + 32, "{token}");
    assert!(
        lines[1].contains(&format!("--replay {token}")),
        "{}",
        lines[1]
    );
    assert_eq!(
        stored_parts(&sim).len(),
        2,
        "part 1, and part 2 processed once"
    );
    let first_run = sim.journal(0, Some("/agent/verbs/send_to"));
    assert_eq!(first_run.len(), 4, "part 1, then three attempts of part 2");

    let replay = run_send(
        &["--to", DEFAULT_CONVERSATION, "--replay", token, &text],
        &env,
        "",
        &key,
    )
    .await;
    assert_eq!(replay.code, Some(0), "{}", replay.output());
    let parts = stored_parts(&sim);
    assert_eq!(parts.len(), 6, "nothing duplicated, nothing lost");
    assert_one_group(&parts, &text);
    assert_eq!(replay.stdout, summary(6, &parts[5].1["id"]));
    let entries = sim.journal(0, Some("/agent/verbs/send_to"));
    assert_eq!(entries.len(), 4 + 6);
    assert!(
        entries[4].body == first_run[0].body && entries[5].body == first_run[1].body,
        "the replay sends the first run's bytes"
    );
    for (replayed, stored) in entries[4..6].iter().zip(&parts) {
        assert_eq!(
            replayed.response["result"]["value"]["messageId"], stored.1["id"],
            "answered with the part already stored"
        );
    }

    // The token names the ids, not the text: replaying it with an edited text of as many parts
    // is refused by Canon (the ids already name other parts) and stores nothing.
    let edited = text.replacen("Report line 000", "Edited line 000", 1);
    let other = run_send(
        &["--to", DEFAULT_CONVERSATION, "--replay", token, &edited],
        &env,
        "",
        &key,
    )
    .await;
    assert_eq!(other.code, Some(1), "{}", other.output());
    assert!(other.stderr.contains("409"), "{}", other.output());
    assert_eq!(stored_parts(&sim).len(), 6);
}

/// cli.md §5.1: no credentials is exit 1 with the parity message and what to set where; a key
/// without an environment id is refused with the resolver's message. Nothing reaches Canon.
#[tokio::test(flavor = "multi_thread")]
async fn missing_credentials_fail_with_the_message_and_the_remedy() {
    let sim = sim().await;
    let key = sim.api_key();
    let run = run_send(&["--to", DEFAULT_CONVERSATION, "hi"], &[], "", &key).await;
    assert_eq!(run.code, Some(1), "{}", run.output());
    assert_eq!(run.stdout, "");
    assert_eq!(
        run.stderr,
        "canon-hermes: CANON_API_KEY, config.api_key, or CANON_AGENT profile is required for \
         the Canon platform\nSet CANON_AGENT (a profile of agents.json), or CANON_API_KEY with \
         CANON_ENVIRONMENT_ID, in the environment or in \
         /nonexistent/canon-hermes-tests/hermes/.env.\n"
    );

    let bare_key = vec![("CANON_API_KEY".to_owned(), key.clone())];
    let run = run_send(&["--to", DEFAULT_CONVERSATION, "hi"], &bare_key, "", &key).await;
    assert_eq!(run.code, Some(1), "{}", run.output());
    assert!(
        run.stderr.starts_with(
            "canon-hermes: CANON_ENVIRONMENT_ID is required when CANON_API_KEY is used directly\n"
        ),
        "{}",
        run.output()
    );
    assert_eq!(run.stderr.lines().count(), 2, "{}", run.output());
    assert!(sim.journal(0, None).is_empty());
}

/// An empty message is refused before anything else (exit 2), whether TEXT is empty or stdin
/// holds nothing but line breaks and blanks; a missing `--to` is a usage error too.
#[tokio::test(flavor = "multi_thread")]
async fn empty_text_is_refused() {
    let sim = sim().await;
    let env = sim_env(&sim);
    let key = sim.api_key();
    for (args, stdin) in [
        (&["--to", DEFAULT_CONVERSATION, ""][..], ""),
        (&["--to", DEFAULT_CONVERSATION, "-"][..], ""),
        (&["--to", DEFAULT_CONVERSATION][..], " \n\t\n"),
    ] {
        let run = run_send(args, &env, stdin, &key).await;
        assert_eq!(run.code, Some(2), "{args:?}: {}", run.output());
        assert_eq!(
            run.stderr,
            "canon-hermes: nothing to send: the message is empty; pass TEXT or pipe the \
             message on stdin\n"
        );
        assert_eq!(run.stdout, "");
    }
    let run = run_send(&["hi"], &env, "", &key).await;
    assert_eq!(run.code, Some(2), "{}", run.output());
    assert!(
        run.stderr.contains("--to <CONVERSATION-ID|home>"),
        "{}",
        run.output()
    );
    let run = run_send(&["--to", "c", "--replay", "x", "hi"], &env, "", &key).await;
    assert_eq!(run.code, Some(2), "{}", run.output());
    assert!(sim.journal(0, None).is_empty());
}

/// cli.md §5.4: the key never reaches the output, on failures that carry Canon's answer (a
/// refused key, a conversation Canon does not know, an environment that does not match) and
/// with every log line on (`RUST_LOG=trace`); `--help` says what the command does.
#[tokio::test(flavor = "multi_thread")]
async fn the_api_key_is_never_printed() {
    let sim = sim().await;
    let key = sim.api_key();
    let env = sim_env(&sim);
    let with = |name: &str, value: &str| {
        let mut env = env.clone();
        env.retain(|(k, _)| k != name);
        env.push((name.to_owned(), value.to_owned()));
        env
    };

    let wrong = "canon_sim_0123456789abcdef0123456789abcdef";
    let run = run_send(
        &["--to", DEFAULT_CONVERSATION, "hi"],
        &with("CANON_API_KEY", wrong),
        "",
        wrong,
    )
    .await;
    assert_eq!(run.code, Some(1), "{}", run.output());
    assert!(run.stderr.contains("401"), "{}", run.output());
    assert!(
        run.stderr.contains("Nothing was stored"),
        "{}",
        run.output()
    );

    let run = run_send(&["--to", "c-unknown", "hi"], &env, "", &key).await;
    assert_eq!(run.code, Some(1), "{}", run.output());
    assert!(run.stderr.contains("404"), "{}", run.output());

    let run = run_send(
        &["--to", DEFAULT_CONVERSATION, "hi"],
        &with("CANON_ENVIRONMENT_ID", "canon-prod-v1"),
        "",
        &key,
    )
    .await;
    assert_eq!(run.code, Some(1), "{}", run.output());
    assert!(
        run.stderr
            .contains("does not match environment canon-prod-v1")
            && run.stderr.contains("Nothing was sent"),
        "{}",
        run.output()
    );

    let run = run_send(
        &["--to", DEFAULT_CONVERSATION, "logged"],
        &with("RUST_LOG", "trace"),
        "",
        &key,
    )
    .await;
    assert_eq!(run.code, Some(0), "{}", run.output());
    assert!(!run.stderr.is_empty(), "trace logging is on");
    assert_eq!(stored_parts(&sim).len(), 1, "only the logged run landed");

    let run = run_send(&["--help"], &[], "", &key).await;
    assert_eq!(run.code, Some(0), "{}", run.output());
    for needle in [
        "--to <CONVERSATION-ID|home>",
        "[TEXT|-]",
        "--replay <TOKEN>",
        "--profile <NAME>",
        "CANON_HOME_CHANNEL",
        "Exit status",
    ] {
        assert!(run.stdout.contains(needle), "{needle}: {}", run.output());
    }
}
