//! Starting a real Hermes gateway (scenario in `hermes_support.rs`): the shim refuses an
//! unaudited host and a multiplexing gateway (hermes-host.md §16), and a message that arrives
//! during the startup restore is one Canon turn.
//!
//! | scenario | spec |
//! |---|---|
//! | message during the startup restore: one Canon turn for the no-op pass and the replay | hermes-host.md §9.5 |
//! | the key of config.yaml's `platforms.canon.api_key` connects the platform | cli.md §5.1 |
//! | the shim's readiness check is the daemon's resolver: a bare key fails it, with the reason logged | cli.md §5.1 |
//! | a frame the daemon's stdin pipe has room for is written by its caller at once, never ahead of a queued one | hermes-host.md §19.4 |

use std::process::Command;
use std::time::Duration;

use canon_sim::config::SimConfig;
use canon_sim::control::Injection;
use canon_sim::{Sim, DEFAULT_CONVERSATION};
use serde_json::json;

use super::gateway_support::{
    shim_prelude, shim_source, start_gateway, start_gateway_with, GatewayOptions, ANSWER, TURN,
};
use super::hermes_support::{is_turn_complete, model_server, state_sequence, Scenario};

/// hermes-host.md §9.5: a message that arrives while Hermes runs its startup restore gets a
/// no-op processing pass (the runner queues the event) and is replayed once the restore ends. The
/// shim opens no Canon turn for the no-op pass, so Canon sees exactly one turn either way. The
/// message is injected right after the gateway is ready, before it settled; the gateway log
/// tells whether it really fell into the window (it did in every local run).
#[tokio::test(flavor = "multi_thread")]
async fn real_gateway_message_during_startup_restore_is_one_turn() {
    let sim = Sim::start(SimConfig::for_tests())
        .await
        .expect("the simulator starts");
    let model = model_server(json!([{"match": {}, "reply": {"text": ANSWER}}])).await;
    let mut gateway = tokio::task::block_in_place(|| start_gateway(&sim, &model));
    // Ready, not settled: Hermes is still inside its startup restore.
    sim.wait_for("stream open", TURN, |s| !s.open_streams.is_empty())
        .await
        .expect("the daemon holds the stream");
    let inbound = sim
        .inject_message(&Injection {
            text: Some("hello during startup".into()),
            ..Injection::default()
        })
        .expect("inject");
    tokio::task::block_in_place(|| gateway.wait_settled());
    let inbound_id = inbound["id"].as_str().expect("an id").to_owned();
    let sc = Scenario {
        sim,
        model,
        gateway,
    };
    sc.wait_turn_closed(DEFAULT_CONVERSATION).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Whether the message fell into the window; the invariant holds either way.
    let queued = sc
        .gateway
        .output()
        .contains("Queued inbound message during gateway startup restore");

    let turns = sc.turn_history(DEFAULT_CONVERSATION);
    let ids: std::collections::BTreeSet<&str> =
        turns.iter().filter_map(|t| t["turnId"].as_str()).collect();
    assert_eq!(
        ids.len(),
        1,
        "one Canon turn (queued: {queued}): {turns:#?}"
    );
    assert_eq!(turns[0]["activeMessageIds"], json!([inbound_id]));
    assert_eq!(
        state_sequence(&turns).first().map(String::as_str),
        Some("thinking")
    );
    assert_eq!(
        state_sequence(&turns).last().map(String::as_str),
        Some("completed")
    );
    let messages = sc.agent_messages(DEFAULT_CONVERSATION);
    assert_eq!(messages.len(), 1, "{messages:#?}");
    assert!(is_turn_complete(&messages[0]), "{:#}", messages[0]);
    assert_eq!(messages[0]["text"], ANSWER);
    assert_eq!(messages[0]["replyTo"], inbound_id.as_str());
}

/// A value JSON has no form for in a frame the shim sends: YAML reads an unquoted date in
/// `platforms.canon.extra` as a `datetime.date`, which reaches the daemon in `adapter.connect`.
/// The frame is sent with the date as text, the platform connects and a turn is answered; before,
/// the shim's writer thread died on it and Canon went deaf for good.
#[tokio::test(flavor = "multi_thread")]
async fn real_gateway_survives_a_yaml_date_in_the_platform_extra() {
    let options = GatewayOptions {
        platform_lines: "    extra:\n      since: 2025-01-01\n".to_owned(),
        ..GatewayOptions::default()
    };
    let sc = Scenario::start(json!([{"match": {}, "reply": {"text": ANSWER}}]), options).await;
    sc.inject(Injection {
        text: Some("hello".into()),
        ..Injection::default()
    });
    sc.wait("the answer's turn_complete", |s| {
        s.messages
            .iter()
            .any(|m| m.conversation_id == DEFAULT_CONVERSATION && is_turn_complete(&m.message))
    })
    .await;
    let connects = sc.sim.journal(0, Some("/agents/me"));
    assert!(!connects.is_empty(), "{}", sc.gateway.log_tail());
}

/// The daemon's filtered environment, through a real gateway: the daemon Hermes' shim spawns
/// gets the Canon settings it reads and the basics, never the gateway's model-provider keys or
/// other secrets (read from the running daemon's `/proc/<pid>/environ`).
#[tokio::test(flavor = "multi_thread")]
async fn the_daemon_a_real_gateway_spawns_gets_none_of_the_gateways_other_secrets() {
    let options = GatewayOptions {
        env: vec![
            ("OPENAI_API_KEY".into(), "sk-provider-secret-1".into()),
            ("AWS_SECRET_ACCESS_KEY".into(), "aws-secret-2".into()),
            ("GITHUB_TOKEN".into(), "ghp-secret-3".into()),
        ],
        ..GatewayOptions::default()
    };
    let sc = Scenario::start(json!([{"match": {}, "reply": {"text": ANSWER}}]), options).await;
    let [pid] = sc.gateway.daemon_pids().try_into().expect("one daemon");
    let environ = std::fs::read(format!("/proc/{pid}/environ")).expect("the daemon's environment");
    let names: Vec<String> = environ
        .split(|b| *b == 0)
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let name = entry.split(|b| *b == b'=').next().unwrap_or_default();
            String::from_utf8_lossy(name).into_owned()
        })
        .collect();
    for wanted in [
        "CANON_API_KEY",
        "CANON_BASE_URL",
        "HERMES_HOME",
        "PATH",
        "HOME",
    ] {
        assert!(
            names.iter().any(|n| n == wanted),
            "{wanted} missing: {names:?}"
        );
    }
    for secret in ["OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN"] {
        assert!(
            !names.iter().any(|n| n == secret),
            "{secret} passed: {names:?}"
        );
    }
    let text = String::from_utf8_lossy(&environ);
    for value in ["sk-provider-secret-1", "aws-secret-2", "ghp-secret-3"] {
        assert!(
            !text.contains(value),
            "a secret's value passed under another name"
        );
    }
}

/// cli.md §5.1: in the gateway the platform config comes before the env defaults. The only
/// credentials in the environment are an `agents.json` profile whose key Canon does not know
/// (enough for the shim's readiness check, which has no config); config.yaml's
/// `platforms.canon` gives the real key as `api_key` and the environment and URLs as extras.
/// The shim hands them to the daemon with `adapter.connect`, which connects with them: with the
/// profile's key Canon would refuse the connect and the platform would never be connected.
#[tokio::test(flavor = "multi_thread")]
async fn real_gateway_connects_with_the_config_yaml_api_key() {
    let sim = Sim::start(SimConfig::for_tests())
        .await
        .expect("the simulator starts");
    let model = model_server(json!([{"match": {}, "reply": {"text": ANSWER}}])).await;
    let canon_home = tempfile::tempdir().expect("scratch dir");
    let mut agents = sim.agents_json("stale");
    agents["stale"]["apiKey"] = json!("sk-stale-unknown-to-canon");
    std::fs::write(canon_home.path().join("agents.json"), agents.to_string()).expect("write");
    let options = GatewayOptions {
        platform_lines: format!(
            "    api_key: {}\n    extra:\n      environment_id: canon-dev-v1\n      \
             base_url: {}\n      stream_url: {}\n",
            sim.api_key(),
            sim.base_url(),
            sim.stream_url()
        ),
        env: vec![
            ("CANON_API_KEY".into(), String::new()),
            ("CANON_BASE_URL".into(), String::new()),
            ("CANON_STREAM_URL".into(), String::new()),
            (
                "CANON_HOME".into(),
                canon_home.path().to_str().expect("UTF-8").to_owned(),
            ),
        ],
        ..GatewayOptions::default()
    };
    let gateway = tokio::task::block_in_place(|| start_gateway_with(&sim, &model, &options));
    let me = sim.journal(0, Some("/agents/me"));
    assert!(!me.is_empty(), "{}", gateway.log_tail());
    for entry in &me {
        let auth = entry
            .headers
            .iter()
            .find(|(name, _)| name == "authorization")
            .map(|(_, value)| value.as_str());
        assert_eq!(auth, Some("Bearer a-hermes"), "the config.yaml key");
    }
    assert_eq!(
        sim.journal(0, Some("/healthz/")).len(),
        me.len(),
        "each connect verified the environment first"
    );
    drop(gateway);
}

/// Runs `code` in the venv's Python with the shim package loaded as module `shim`; returns stdout.
fn run_shim_python(code: &str) -> String {
    let python = super::gateway_support::hermes_python();
    let home = tempfile::tempdir().expect("scratch dir");
    let prelude = shim_prelude(&shim_source());
    let out = Command::new(python)
        .args(["-c", &format!("{prelude}{code}")])
        .env("HERMES_HOME", home.path())
        .env("HOME", home.path())
        .output()
        .expect("the venv python runs");
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn shim_registers_a_failing_platform_on_an_unaudited_host() {
    // The installed shim (its manifest names the binary version), on a host it was not audited
    // for: the platform is registered with a check that fails and says why (cli.md §7.2), no
    // hook and no skill are registered, and nothing is raised into Hermes' plugin loader.
    let home = tempfile::tempdir().expect("scratch dir");
    let hermes_home = home.path().join("hermes");
    std::fs::create_dir_all(&hermes_home).expect("the profile home");
    super::gateway_support::install_shim(&hermes_home);
    let prelude = shim_prelude(&hermes_home.join("plugins/canon-hermes"));
    let code = "assert shim.host_refusal() is None, shim.host_refusal()\n\
         class Ctx:\n    calls = []\n\
         \x20   def register_hook(self, *a): self.calls.append('hook')\n\
         \x20   def register_skill(self, *a): self.calls.append('skill')\n\
         \x20   def register_platform(self, **kw): self.kw = kw\n\
         ok = Ctx()\nshim.register(ok)\nprint(sorted(set(ok.calls)))\n\
         shim.hermes_version = lambda: '0.18.2'\n\
         ctx = Ctx()\nctx.calls = []\nshim.register(ctx)\n\
         print(ctx.kw['name'], ctx.kw['check_fn'](), ctx.calls)\n\
         print(ctx.kw['install_hint'])\n\
         try:\n    ctx.kw['adapter_factory'](None)\nexcept RuntimeError as exc:\n    print(exc)\n\
         shim.hermes_version = lambda: 'none'\nprint(shim.host_refusal())\n";
    let out = Command::new(super::gateway_support::hermes_python())
        .args(["-c", &format!("{prelude}{code}")])
        .env("HERMES_HOME", &hermes_home)
        .env("HOME", home.path())
        .output()
        .expect("the venv python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    let python = lines[2]
        .strip_prefix("Unsupported Hermes host: hermes-agent 0.18.2 on Python ")
        .and_then(|rest| rest.split_once(". canon-hermes "))
        .map(|(python, _)| python)
        .unwrap_or_else(|| panic!("{stdout}"));
    let refusal = |hermes: &str| {
        format!(
            "Unsupported Hermes host: hermes-agent {hermes} on Python {python}. canon-hermes {} \
             supports exactly hermes-agent 0.19.0 on Python 3.11.",
            env!("CARGO_PKG_VERSION")
        )
    };
    assert!(python.starts_with("3.11."), "{stdout}");
    assert_eq!(
        lines,
        [
            "['hook', 'skill']".to_owned(),
            "canon False []".to_owned(),
            refusal("0.18.2"),
            refusal("0.18.2"),
            refusal("not installed"),
        ]
    );
}

/// The installed shim's `check_requirements()` (Hermes' `check_fn`) in the venv's Python with
/// `env`, the real daemon behind it: what it returned and what the `canon_hermes` loggers wrote.
fn readiness(env: &[(&str, &str)]) -> (String, String) {
    let home = tempfile::tempdir().expect("scratch dir");
    let hermes_home = home.path().join("hermes");
    std::fs::create_dir_all(&hermes_home).expect("the profile home");
    super::gateway_support::install_shim(&hermes_home);
    let prelude = shim_prelude(&hermes_home.join("plugins/canon-hermes"));
    let code = "import logging\n\
         logging.basicConfig(level=logging.INFO, format='%(name)s %(levelname)s %(message)s')\n\
         print(shim.check_requirements())\n";
    let mut command = Command::new(super::gateway_support::hermes_python());
    command
        .args(["-c", &format!("{prelude}{code}")])
        .env("HERMES_HOME", &hermes_home)
        .env("HOME", home.path())
        .env("CANON_HERMES_BIN", env!("CARGO_BIN_EXE_canon-hermes"))
        .env("CANON_AGENTS_FILE", home.path().join("no-agents.json"))
        .env("RUST_LOG", "info");
    for name in [
        "CANON_API_KEY",
        "CANON_ENVIRONMENT_ID",
        "CANON_BASE_URL",
        "CANON_STREAM_URL",
        "CANON_AGENT",
        "CANON_AGENTS_JSON_BOOTSTRAP",
    ] {
        command.env_remove(name);
    }
    command.envs(env.iter().copied());
    let out = command.output().expect("the venv python runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stdout}{stderr}");
    (stdout.trim().to_owned(), stderr)
}

/// cli.md §5.1: a bare `CANON_API_KEY` without `CANON_ENVIRONMENT_ID` does not resolve, so
/// Hermes' `check_fn` must fail (the gateway then logs `Platform 'Canon' requirements not met`
/// and never starts the platform) instead of passing on the variable alone and failing at
/// connect. The shim asks the daemon's probe, whose answer names the rule, and logs it; the key
/// is never logged. With the environment id the same key resolves (offline: the packaged URLs
/// are not contacted).
#[test]
fn shim_readiness_check_asks_the_daemons_resolver() {
    let key = "sk-bare-key-never-logged";
    let (ready, log) = readiness(&[("CANON_API_KEY", key)]);
    assert_eq!(ready, "False", "{log}");
    assert!(
        log.contains(
            "canon_hermes WARNING canon-hermes: Canon credentials do not resolve: \
             CANON_ENVIRONMENT_ID is required when CANON_API_KEY is used directly"
        ),
        "{log}"
    );
    assert!(!log.contains(key), "{log}");

    let (ready, log) = readiness(&[
        ("CANON_API_KEY", key),
        ("CANON_ENVIRONMENT_ID", "canon-prod-v1"),
    ]);
    assert_eq!(ready, "True", "{log}");
    assert!(!log.contains("do not resolve"), "{log}");
    assert!(!log.contains(key), "{log}");

    // Nothing configured at all: not ready, and nothing to explain.
    let (ready, log) = readiness(&[]);
    assert_eq!(ready, "False", "{log}");
    assert!(!log.contains("do not resolve"), "{log}");
}

#[test]
fn shim_refuses_a_multiplexing_gateway() {
    let out = run_shim_python(
        "import agent.secret_scope as scope\n\
         from gateway.config import PlatformConfig\n\
         cls = shim._make_adapter_class()\n\
         scope.is_multiplex_active = lambda: True\n\
         try:\n    cls(PlatformConfig(enabled=True))\n    print('constructed')\n\
         except RuntimeError as exc:\n    print(exc)\n",
    );
    assert_eq!(
        out.trim(),
        "Canon cannot start while Hermes gateway.multiplex_profiles is enabled. The Canon adapter \
         still uses process-global profile, credential, and hook state, so multiplexing could cross \
         profile boundaries. Set gateway.multiplex_profiles: false and run one Hermes gateway \
         process per Canon profile."
    );
}

#[test]
fn the_shim_hands_hermes_each_message_once_across_daemon_respawns() {
    // A daemon killed after Hermes accepted a message and before its inbox recorded that hands
    // the same message again (so does one killed before it finished a detached-approval wake's
    // lease, approvals.md §13 step 5; `serve_approvals.rs` drives that crash): the shim, which
    // outlives the daemon, drops the repeat by its message id (it keeps the session and the
    // reference of the event Hermes got, to answer a repeat still waiting in Hermes' queue as
    // queued). An id counts only once Hermes took it, so a hand-over that failed is tried again;
    // an event without an id always passes.
    let code = "from shim import _adapter as a\n\
         wake = {'message_id': 'canon-detached-approval:hermes-0123456789abcdef0123'}\n\
         other = {'message_id': 'm-1'}\n\
         ev_wake, ev_other = object(), object()\n\
         seen = [a._repeated_inbound(wake) is not None, a._repeated_inbound(other) is not None]\n\
         a._remember_inbound(wake, ev_wake); a._remember_inbound(other, ev_other); a._remember_inbound({}, object())\n\
         seen += [a._repeated_inbound(wake) is ev_wake, a._repeated_inbound(other) is ev_other,\n\
         \x20        a._repeated_inbound({'message_id': 'm-2'}) is not None,\n\
         \x20        a._repeated_inbound({}) is not None, a._repeated_inbound(None) is not None]\n\
         print(seen)\n";
    assert_eq!(
        run_shim_python(code).trim(),
        "[False, False, True, True, False, False, False]"
    );
}

/// The values JSON has no form for that a YAML date does not cover: NaN and a circular value fail
/// their own frame (the caller gets a `DaemonError`; the writer's queue never sees them, and the
/// next frame goes out), and a lone UTF-16 surrogate, which Python escapes as a `\udXXX` the
/// daemon's JSON refuses (dropping the whole frame there), is sent as U+FFFD. The line is read
/// here with serde_json, as the daemon reads it.
#[test]
fn a_frame_the_daemons_json_would_refuse_fails_alone_or_is_mended() {
    let code = "import queue, sys\n\
         from shim import _daemon as d\n\
         daemon = d.Daemon.__new__(d.Daemon); daemon._init_requests(); daemon.out = queue.Queue(8)\n\
         loop = []; loop.append(loop)\n\
         for bad in ({'type': 'x', 'v': float('nan')}, {'type': 'y', 'v': loop}):\n\
         \x20   try:\n\
         \x20       daemon.post(bad); print('posted')\n\
         \x20   except d.DaemonError as exc:\n\
         \x20       print('refused', exc.code)\n\
         print(daemon.post({'type': 'ok', 'text': 'cut \\ud83d mid-emoji', 'pair': '\\ud83d\\ude00',\n\
         \x20                  'slash': 'a\\\\ud800'}), daemon.out.qsize())\n\
         sys.stdout.write(daemon.out.get().decode())\n";
    let out = run_shim_python(code);
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("refused internal"), "{out}");
    assert_eq!(lines.next(), Some("refused internal"), "{out}");
    assert_eq!(lines.next(), Some("True 1"), "{out}");
    let frame: serde_json::Value =
        serde_json::from_str(lines.next().expect("the encoded line")).expect("serde_json reads it");
    assert_eq!(
        frame,
        serde_json::json!({"type": "ok", "text": "cut \u{fffd} mid-emoji", "pair": "\u{1f600}",
            "slash": "a\\ud800"})
    );
}

/// hermes-host.md §19.9: the shim keeps at most the daemon's `limits.max_inflight` requests
/// unanswered. One beyond waits unsent for a slot, which the next answer frees (in order); one
/// whose caller stops waiting first (sync or async) fails `backpressure`, retryable, and never
/// reaches the daemon.
#[test]
fn requests_beyond_the_in_flight_cap_wait_for_a_slot_and_give_up_unsent() {
    let code = "import asyncio, json\n\
         from shim import _daemon as d\n\
         daemon = d.Daemon.__new__(d.Daemon); daemon._init_requests(); daemon.dead = False\n\
         daemon.max_inflight = 3\n\
         futs = [daemon.request('x', {'n': n}) for n in range(5)]\n\
         print('written', daemon.out.qsize(), 'waiting', len(daemon.waiting))\n\
         try:\n\
         \x20   daemon.call('x', {'n': 'sync'}, 0.05)\n\
         except d.DaemonError as exc:\n\
         \x20   print('sync', exc.code, exc.retryable)\n\
         async def later():\n\
         \x20   try:\n\
         \x20       await daemon.acall('x', {'n': 'async'}, 0.05)\n\
         \x20   except d.DaemonError as exc:\n\
         \x20       print('async', exc.code, exc.retryable)\n\
         asyncio.run(later())\n\
         seen = []\n\
         while not daemon.out.empty():\n\
         \x20   frame = json.loads(daemon.out.get())\n\
         \x20   seen.append(frame['body']['n'])\n\
         \x20   daemon.answered({'id': frame['id'], 're': 'x', 'ok': True, 'body': {'n': frame['body']['n']}})\n\
         print('daemon saw', seen, 'results', [f.result()['n'] for f in futs], 'in flight', daemon.inflight)\n";
    assert_eq!(
        run_shim_python(code).trim(),
        "written 3 waiting 2\n\
         sync backpressure True\n\
         async backpressure True\n\
         daemon saw [0, 1, 2, 3, 4] results [0, 1, 2, 3, 4] in flight 0"
    );
}

/// With the writer's queue full, a freed slot's waiting requests each fail `backpressure` in turn
/// (a loop: 3,000 of them would overflow Python's recursion limit if each failure freed the next
/// slot by recursion), and the slot count returns to zero.
#[test]
fn a_full_writer_queue_fails_every_waiting_request_without_leaking_a_slot() {
    let code = "import json, queue\n\
         from shim import _daemon as d\n\
         daemon = d.Daemon.__new__(d.Daemon); daemon._init_requests(); daemon.dead = False\n\
         daemon.max_inflight = 1; daemon.out = queue.Queue(1)\n\
         futs = [daemon.request('x', {}) for _ in range(3000)]\n\
         first = json.loads(daemon.out.get()); daemon.out.put(b'filler')\n\
         daemon.answered({'id': first['id'], 're': 'x', 'ok': True, 'body': {}})\n\
         codes = {f.exception().code for f in futs[1:]}\n\
         print(futs[0].result(), codes, daemon.inflight, len(daemon.waiting))\n";
    assert_eq!(run_shim_python(code).trim(), "{} {'backpressure'} 0 0");
}

/// A frame posted while the child's stdin pipe is empty (so all its page slots are free) is
/// written by its caller at once, sparing the hand-off to the writer thread (each hand-off
/// waits for Python's interpreter lock while Hermes' agent thread is busy); any other goes to
/// the writer, and so does every frame behind it, so the order the daemon reads is the order
/// they were posted.
#[test]
fn a_frame_the_pipe_has_room_for_is_written_at_once_and_never_overtakes_a_queued_one() {
    let code = "import fcntl, struct, subprocess, termios\n\
         from shim import _daemon as d\n\
         daemon = d.Daemon.__new__(d.Daemon); daemon._init_requests()\n\
         daemon.proc = subprocess.Popen(['sleep', '30'], stdin=subprocess.PIPE)\n\
         daemon.pipe_size = daemon._pipe_size()\n\
         unread = lambda: struct.unpack('i', fcntl.ioctl(daemon.proc.stdin.fileno(), termios.FIONREAD, b'0000'))[0]\n\
         small = b'{\"type\":\"x\"}\\n'\n\
         print(daemon.post(small), daemon.out.qsize(), daemon.queued, unread() == len(small))\n\
         print(daemon.post(b'y' * daemon.pipe_size + b'\\n'), daemon.out.qsize(), daemon.queued)\n\
         print(daemon.post(small), daemon.out.qsize(), daemon.queued, unread() == len(small))\n\
         daemon.proc.kill(); daemon.proc.wait()\n";
    let out = run_shim_python(code);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["True 0 0 True", "True 1 1", "True 2 2 True"],
        "{out}"
    );
}

#[test]
fn the_daemon_gets_only_the_environment_it_reads() {
    // The model providers' keys and the rest of the gateway's environment stay with the gateway;
    // the daemon's own settings, the basics and the TLS roots pass.
    let code = "from shim import _daemon as d\n\
         env = d.daemon_env({'OPENAI_API_KEY': 'sk-x', 'ANTHROPIC_API_KEY': 'sk-y', 'AWS_SECRET': 'z',\n\
         \x20                   'CANON_API_KEY': 'k', 'HERMES_HOME': '/h', 'PATH': '/bin', 'HOME': '/root',\n\
         \x20                   'RUST_LOG': 'info', 'SSL_CERT_FILE': '/c', 'LANG': 'C'}, CANON_HERMES_PARENT_PID='1')\n\
         print(sorted(env))\n";
    assert_eq!(
        run_shim_python(code).trim(),
        "['CANON_API_KEY', 'CANON_HERMES_PARENT_PID', 'HERMES_HOME', 'HOME', 'LANG', 'PATH', 'RUST_LOG', 'SSL_CERT_FILE']"
    );
}

/// The answer lost in the completion call (found by the fault harness): the daemon is killed
/// when Hermes completes the turn, after the answer was streamed and before its final was
/// stored. The staged answer died with it; the shim keeps the turn open until its completion is
/// answered, hands it and its kept answer to the respawned daemon and completes it again, so
/// the message still gets exactly one `turn_complete`, replying to it.
#[tokio::test(flavor = "multi_thread")]
async fn a_daemon_killed_as_the_turn_completes_still_stores_its_final_once() {
    let canon_home = tempfile::tempdir().expect("scratch dir");
    let options = GatewayOptions {
        env: vec![
            (
                "CANON_HOME".to_owned(),
                canon_home.path().display().to_string(),
            ),
            (
                "CANON_HERMES_CRASH_POINT".to_owned(),
                "turn.complete".to_owned(),
            ),
        ],
        ..GatewayOptions::default()
    };
    let sc = Scenario::start(
        json!([{"match": {}, "reply": {"text": ANSWER, "delayMs": 60}}]),
        options,
    )
    .await;
    let inbound = sc.inject(Injection {
        text: Some("hello hermes".into()),
        ..Injection::default()
    });
    let inbound_id = inbound["id"].as_str().expect("an id").to_owned();
    sc.wait("a turn_complete", |s| {
        s.messages.iter().any(|m| {
            m.conversation_id == DEFAULT_CONVERSATION
                && m.message["metadata"]["turnSemantics"] == "turn_complete"
        })
    })
    .await;
    sc.wait_turn_closed(DEFAULT_CONVERSATION).await;
    assert!(
        canon_home.path().join(".crash-turn.complete").exists(),
        "the crash point fired\n{}",
        sc.gateway.log_tail()
    );
    // Let any duplicate arrive before counting.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let finals: Vec<_> = sc
        .agent_messages(DEFAULT_CONVERSATION)
        .into_iter()
        .filter(is_turn_complete)
        .collect();
    assert_eq!(finals.len(), 1, "{finals:#?}");
    assert_eq!(finals[0]["text"], ANSWER, "{:#}", finals[0]);
    assert_eq!(
        finals[0]["replyTo"],
        inbound_id.as_str(),
        "{:#}\n{}",
        finals[0],
        sc.gateway.log_tail()
    );
}
