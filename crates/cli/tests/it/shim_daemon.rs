//! The installed shim's adapter and daemon supervisor in the venv's Python, with the real
//! `canon-hermes serve --stdio` child against canon-sim, driven through Hermes' own code where
//! Hermes is the one that acts (hermes-host.md §8.4, §19.10): faults that only show with the
//! shim and Hermes together.
//!
//! | scenario | spec |
//! |---|---|
//! | a turn-less send whose every attempt failed ambiguously is stored once: Hermes' `_send_with_retry` does not send it again | hermes-host.md §8.4 |
//! | a turn-less send cut off by a daemon crash is resent to the respawned daemon and stored once | hermes-host.md §19.10, turns.md §4.6 |
//! | a response racing the cancel of its request's future does not kill the reader thread | hermes-host.md §19.4 |
//! | a failed background respawn is tried again on the backoff schedule, and counts toward the crash loop | hermes-host.md §19.10 |
//! | the daemon runs in a process group of its own, so the terminal's Ctrl-C reaches only the gateway; a daemon that exits while the gateway stops is not respawned | hermes-host.md §19.3, §19.10 |
//! | an inbound message offered while the gateway stops is refused as retryable, never handed to Hermes, and the restarted gateway gets it from the daemon's durable inbox | hermes-host.md §19.6 |
//! | the daemon's DEBUG lines, when its `RUST_LOG` asks for them, reach Hermes' logs (at INFO) | hermes-host.md §19.3 |
//! | a message handed over during Hermes' startup restore waits in the runner's queue: a gateway stopped before the restore ran it gets it again after its restart | hermes-host.md §9.5, §19.6 |
//! | only a send that stored a message of its own marks the turn's durable send for a resync; a plain answer send staged into the final does not | hermes-host.md §19.10 |
//! | a daemon that stops reading its stdin never blocks a post: frames that do not find the pipe empty wait for the writer thread, and all of them arrive once it reads again | hermes-host.md §19.9 |
//! | what the shim remembers of inbound messages to drop a repeat holds no event text, and still answers a repeat of a queued message as queued | hermes-host.md §19.6 |
//! | gateway calls waiting for a slow respawn and resync leave the loop's default executor free, and all get their answer once it is done | hermes-host.md §19.10 |
//! | a `turn.closed` arriving while a resync rebuilds the turn bookkeeping waits for it, then applies whole | hermes-host.md §19.10 |

use std::os::unix::process::CommandExt as _;
use std::process::Command;

use canon_sim::{SimHandle, DEFAULT_AGENT, DEFAULT_CONVERSATION};
use serde_json::Value;

use super::gateway_support::{hermes_python, install_shim, shim_prelude};
use super::shim_support::sim;

/// Python run after the shim is loaded as `shim`: the adapter class, `SIM` (the simulator's
/// control API: `SIM("faults", rule)` posts, `SIM("state")` gets), `CHAT` and `stored(text)`,
/// the number of the agent's stored messages in `CHAT` whose text is `text`.
const PRELUDE: &str = r#"
import asyncio, json, os, signal, sys, time, urllib.request
import concurrent.futures as cf
from gateway.platform_registry import platform_registry, PlatformEntry
platform_registry.register(PlatformEntry(name='canon', label='Canon', adapter_factory=None,
                                         check_fn=lambda: True))
from gateway.config import PlatformConfig
from shim import _daemon
from shim._daemon import SUPERVISOR, DaemonError
cls = shim._make_adapter_class()
CHAT, AGENT = os.environ['TEST_CHAT'], os.environ['TEST_AGENT']

def SIM(path, body=None, method=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(os.environ['TEST_SIM'] + '/__sim/' + path, data=data,
                                 method=method or ('GET' if body is None else 'POST'),
                                 headers={'content-type': 'application/json'})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read() or b'{}')

def stored(text):
    return sum(1 for m in SIM('state')['messages'] if m.get('conversationId') == CHAT
               and m.get('message', {}).get('senderId') == AGENT
               and m.get('message', {}).get('text') == text)

def fault(path, action, **matcher):
    SIM('faults', {'matcher': dict({'method': 'POST', 'path': path}, **matcher), 'action': action})

async def connected():
    a = cls(PlatformConfig(enabled=True))
    assert await a.connect(), a.fatal_error_message
    return a

async def listening():
    # `connect` returns once Canon answered; the event stream opens right after. A fresh
    # agent's first stream starts at "now", so a test posts only once it is open.
    deadline = time.monotonic() + 60
    while SIM('state')['openStreams'] == 0:
        assert time.monotonic() < deadline, 'the event stream never opened'
        await asyncio.sleep(0.05)

async def restarted(a, handed, count):
    """Stops adapter `a` and starts a new one as a restarted gateway would (a new process: the
    shim's memory of inbound messages is gone), appending `['restarted', text]` to `handed` for
    each message its daemon hands over, until `handed` holds `count` entries."""
    from shim import _adapter
    await a.disconnect()
    _adapter.INBOUND_SEEN.clear()
    b = cls(PlatformConfig(enabled=True))
    async def take(event):
        handed.append(['restarted', event.text])
    b.handle_message = take
    assert await b.connect(), b.fatal_error_message
    deadline = time.monotonic() + 20
    while len(handed) < count and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await b.disconnect()
"#;

/// Runs `code` in the venv's Python with the shim installed (as `canon-hermes install` does) in
/// a scratch profile and the daemon configured for `sim`; returns stdout, asserting success.
async fn shim_python(sim: &SimHandle, code: &str) -> String {
    let (base, stream, key) = (sim.base_url(), sim.stream_url(), sim.api_key());
    let code = code.to_owned();
    tokio::task::spawn_blocking(move || {
        let home = tempfile::tempdir().expect("scratch dir");
        let installed = home.path().join("installed");
        let hermes_home = home.path().join("hermes");
        for dir in [&installed, &hermes_home] {
            std::fs::create_dir_all(dir).expect("a profile home");
        }
        install_shim(&installed);
        let prelude = shim_prelude(&installed.join("plugins/canon-hermes"));
        // A process group of its own, so a test may signal its group without reaching cargo.
        let out = Command::new(hermes_python())
            .process_group(0)
            .args(["-c", &format!("{prelude}{PRELUDE}{code}")])
            .env("HERMES_HOME", &hermes_home)
            .env("HOME", home.path())
            .env("CANON_HOME", home.path().join("canon"))
            .env("CANON_API_KEY", key)
            .env("CANON_BASE_URL", &base)
            .env("CANON_STREAM_URL", stream)
            .env("CANON_AGENTS_FILE", home.path().join("no-agents.json"))
            .env("TEST_SIM", &base)
            .env("TEST_CHAT", DEFAULT_CONVERSATION)
            .env("TEST_AGENT", DEFAULT_AGENT)
            .env("RUST_LOG", "warn")
            .env_remove("CANON_ENVIRONMENT_ID")
            .env_remove("CANON_AGENT")
            .env_remove("CANON_AGENTS_JSON_BOOTSTRAP")
            .env_remove("CANON_HOME_CHANNEL")
            .output()
            .expect("the venv python runs");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "python failed:\n{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    })
    .await
    .expect("the python run")
}

/// The JSON objects `print(json.dumps(…))` wrote, one a line.
fn reports(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")))
        .collect()
}

/// hermes-host.md §8.4. Outside any turn every `adapter.send` is a new standalone id group, so
/// a retry by Hermes is a second copy. Each durable attempt of the send here fails ambiguously
/// after Canon stored it (a 502, or the connection dropped after the write), and the daemon
/// replays it under the same ids within the call; the reply must then say `timed out`, not
/// retryable, so that Hermes' real `_send_with_retry` neither retries nor sends a plain-text
/// fallback. Canon stores exactly one copy, and the journal shows the three attempts of one id
/// and nothing more.
#[tokio::test(flavor = "multi_thread")]
async fn an_ambiguous_turnless_send_is_stored_once_whatever_hermes_retries() {
    let sim = sim().await;
    let code = r#"
async def main():
    a = await connected()
    for name, action in (('502', {'type': 'process_then_status', 'status': 502}),
                         ('drop', {'type': 'process_then_drop'})):
        text = 'Nightly report (%s): all is well.' % name
        SIM('faults', None, 'DELETE')
        fault('/agent/verbs/send_to', action, times=3)
        r = await a._send_with_retry(CHAT, text)
        sends = [e for e in SIM('journal?path=/agent/verbs/send_to')['entries']
                 if e['body']['body']['value'].get('text') == text]
        keys = sorted({e['body']['envelope']['idempotencyKey'] for e in sends})
        print(json.dumps({'case': name, 'success': r.success, 'error': r.error,
                          'retryable': r.retryable, 'stored': stored(text),
                          'attempts': len(sends), 'ids': len(keys)}))
    await a.disconnect()
asyncio.run(main())
"#;
    let out = shim_python(&sim, code).await;
    let unconfirmed = "Canon send timed out unconfirmed; it may have been delivered, so it is not \
                       retried";
    for (report, case) in reports(&out).iter().zip(["502", "drop"]) {
        assert_eq!(
            report,
            &serde_json::json!({"case": case, "success": false, "error": unconfirmed,
                                "retryable": false, "stored": 1, "attempts": 3, "ids": 1}),
            "{out}"
        );
    }
    assert_eq!(reports(&out).len(), 2, "{out}");
}

/// hermes-host.md §19.10. The daemon dies (SIGKILL) while Canon holds the answer to a
/// turn-less send it already stored; the shim sends the same `adapter.send` once more to the
/// respawned daemon, with the same `send_key`, so the standalone ids are the same and Canon
/// answers the replay with the stored message: one copy, reported delivered.
#[tokio::test(flavor = "multi_thread")]
async fn a_turnless_send_resent_after_a_daemon_crash_is_stored_once() {
    let sim = sim().await;
    let code = r#"
async def main():
    a = await connected()
    text = 'Cron says: the backup finished.'
    fault('/agent/verbs/send_to', {'type': 'delay_after', 'ms': 30000}, times=1)
    first = SUPERVISOR.peek()
    send = asyncio.ensure_future(a.send(CHAT, text))
    await asyncio.to_thread(SIM, 'wait_for', {'timeoutMs': 10000, 'message': {
        'conversationId': CHAT, 'senderId': AGENT, 'textContains': text}})
    os.kill(first.proc.pid, signal.SIGKILL)
    r = await send
    again = SUPERVISOR.peek()
    print(json.dumps({'success': r.success, 'error': r.error, 'stored': stored(text),
                      'respawned': again is not None and again is not first,
                      'same_id': r.message_id == [m['message']['id'] for m in SIM('state')['messages']
                                                 if m['message'].get('text') == text][0]}))
    await a.disconnect()
asyncio.run(main())
"#;
    let out = shim_python(&sim, code).await;
    assert_eq!(
        reports(&out),
        [
            serde_json::json!({"success": true, "error": null, "stored": 1, "respawned": true,
                            "same_id": true})
        ],
        "{out}"
    );
}

/// hermes-host.md §19.4. When `acall` times out, the gateway loop cancels the request's
/// future, and that cancel can land just before the reader thread sets the response on it.
/// `Racing` is a future whose cancel lands exactly there. The reader must live on (the next
/// request is answered), and at EOF a racing future must not keep the others from failing at
/// once with `daemon_exited`.
#[tokio::test(flavor = "multi_thread")]
async fn a_response_racing_a_cancel_keeps_the_reader_alive() {
    let sim = sim().await;
    let code = r#"
class Racing(cf.Future):
    """Cancelled by the gateway loop right before the reader thread settles it."""
    def set_result(self, result):
        self.cancel()
        super().set_result(result)
    def set_exception(self, exc):
        self.cancel()
        super().set_exception(exc)

def racing_request(d, kind, body):
    real, cf.Future = cf.Future, Racing
    try:
        return d.request(kind, body)
    finally:
        cf.Future = real

PROBE = {'config': None, 'verify': False}
def answered(d):
    try:
        return 'answered %s' % d.call('probe', PROBE, 5).get('configured')
    except DaemonError as exc:
        return exc.code

exits = []
d = _daemon.Daemon(on_exit=exits.append)
raced = racing_request(d, 'probe', PROBE)
cf.wait([raced], 5)
print(json.dumps({'raced': raced.cancelled(), 'next': answered(d)}))
# EOF with a racing request and a plain one pending: the plain one fails at once.
os.kill(d.proc.pid, signal.SIGSTOP)
raced, plain = racing_request(d, 'probe', PROBE), d.request('probe', PROBE)
os.kill(d.proc.pid, signal.SIGKILL)
try:
    plain.result(5)
    outcome = 'answered'
except DaemonError as exc:
    outcome = exc.code
except cf.TimeoutError:
    outcome = 'still waiting'
print(json.dumps({'raced': raced.cancelled(), 'plain': outcome, 'exits': len(exits),
                  'after': answered(d)}))
"#;
    let out = shim_python(&sim, code).await;
    assert_eq!(
        reports(&out),
        [
            serde_json::json!({"raced": true, "next": "answered True"}),
            serde_json::json!({"raced": true, "plain": "daemon_exited", "exits": 1,
                                "after": "daemon_exited"}),
        ],
        "{out}"
    );
}

/// hermes-host.md §19.10. The daemon dies while Canon is unreachable (`GET /agents/me` fails),
/// so the background respawn's resync fails. With no daemon there is no Canon stream and no
/// inbound message to trigger a spawn, so the shim itself must try again on its backoff
/// schedule: once Canon is back, a respawned daemon holds the stream again. And while Canon
/// stays down, the failed respawns count toward the crash loop, which Hermes is told about as a
/// retryable fatal.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_respawn_is_retried_and_counts_toward_the_crash_loop() {
    let sim = sim().await;
    let code = r#"
import logging
failures = []
class Failures(logging.Handler):
    def emit(self, record):
        if 'respawn failed' in record.getMessage():
            failures.append(record.getMessage())
logging.getLogger('canon_hermes').addHandler(Failures())

async def until(condition, seconds):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return condition()

async def main():
    a = await connected()
    me = {'type': 'status', 'status': 500}
    # Canon is down when the daemon dies: the first respawn's resync fails.
    SIM('faults', {'matcher': {'method': 'GET', 'path': '/agents/me'}, 'action': me})
    first = SUPERVISOR.peek()
    os.kill(first.proc.pid, signal.SIGKILL)
    failed = await until(lambda: bool(failures), 20)
    SIM('faults', None, 'DELETE')  # Canon is back
    back = await until(lambda: SUPERVISOR.peek() not in (None, first), 20)
    print(json.dumps({'failed_first': failed, 'respawned': back, 'fatal': a.fatal_error_code}))
    # Canon down for good: every respawn fails, and five exits or failed respawns within the
    # window make the crash loop.
    SIM('faults', {'matcher': {'method': 'GET', 'path': '/agents/me'}, 'action': me})
    os.kill(SUPERVISOR.peek().proc.pid, signal.SIGKILL)
    await until(lambda: a.fatal_error_code is not None, 40)
    print(json.dumps({'fatal': a.fatal_error_code, 'retryable': a.fatal_error_retryable,
                      'halted': SUPERVISOR.halted, 'child': SUPERVISOR.peek() is not None}))
asyncio.run(main())
"#;
    let out = shim_python(&sim, code).await;
    assert_eq!(
        reports(&out),
        [
            serde_json::json!({"failed_first": true, "respawned": true, "fatal": null}),
            serde_json::json!({"fatal": "daemon_crash_loop", "retryable": true, "halted": true,
                                "child": false}),
        ],
        "{out}"
    );
}

/// hermes-host.md §19.3 and §19.10. The shim starts the daemon in a session and process group
/// of its own, so a SIGINT to the gateway's process group (Ctrl-C in its terminal) reaches the
/// gateway alone, which then closes the daemon in order. And once the gateway has begun to stop
/// (its runner is `_draining`), a daemon that exits (systemd signals the whole control group)
/// is not respawned, neither in the background nor for a send.
#[tokio::test(flavor = "multi_thread")]
async fn the_daemon_has_its_own_process_group_and_is_not_respawned_while_the_gateway_stops() {
    let sim = sim().await;
    let code = r#"
import logging
stopping = []
class Stopping(logging.Handler):
    def emit(self, record):
        if 'while the gateway stops' in record.getMessage():
            stopping.append(record.getMessage())
logging.getLogger('canon_hermes').addHandler(Stopping())
logging.getLogger('canon_hermes').setLevel(logging.INFO)

async def main():
    a = await connected()
    first = SUPERVISOR.peek()
    own = os.getpgid(first.proc.pid) != os.getpgid(0)
    signal.signal(signal.SIGINT, lambda *_: None)  # this process's own Ctrl-C is a no-op
    os.killpg(os.getpgid(0), signal.SIGINT)
    try:
        alive = 'answered %s' % first.call('probe', {'config': None, 'verify': False}, 5).get('configured')
    except DaemonError as exc:
        alive = exc.code
    print(json.dumps({'own_group': own, 'after_ctrl_c': alive}))
    # The gateway begins to stop, then systemd's SIGTERM reaches the daemon too.
    a._runner = type('Runner', (), {'_draining': True})()
    os.kill(first.proc.pid, signal.SIGTERM)
    first.proc.wait(10)
    r = await a.send(CHAT, 'a notice during the stop')
    deadline = time.monotonic() + 10
    while not stopping and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    print(json.dumps({'exit': first.proc.returncode, 'noted': bool(stopping), 'send': r.error,
                      'respawned': SUPERVISOR.child is not first or SUPERVISOR.respawning,
                      'crashes': len(SUPERVISOR.crashes)}))
asyncio.run(main())
"#;
    let out = shim_python(&sim, code).await;
    assert_eq!(
        reports(&out),
        [
            serde_json::json!({"own_group": true, "after_ctrl_c": "answered True"}),
            serde_json::json!({"exit": 0, "noted": true,
                                "send": "canon-hermes daemon exited while the gateway stops",
                                "respawned": false, "crashes": 0}),
        ],
        "{out}"
    );
}

/// hermes-host.md §19.6 (`inbound.message` while the gateway stops). A stopping Hermes runner
/// answers a busy session "shutting down" and drops the message, and drops its queues at exit,
/// so a message handed over then would never be answered. The shim refuses it as retryable
/// instead: Hermes never sees it, the daemon leaves its stream frame unsettled, and after the
/// gateway's restart the next daemon's durable inbox hands it over, once.
#[tokio::test(flavor = "multi_thread")]
async fn a_message_offered_while_the_gateway_stops_waits_for_the_restarted_gateway() {
    let sim = sim().await;
    let code = r#"
import logging
waits = []
class Waits(logging.Handler):
    def emit(self, record):
        if 'waits for the gateway' in record.getMessage():
            waits.append(record.getMessage())
logging.getLogger('canon_hermes').addHandler(Waits())
logging.getLogger('canon_hermes').setLevel(logging.INFO)
TEXT = 'sent while the gateway stops'

async def until(check, what):
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, 'no ' + what
        await asyncio.sleep(0.05)

async def main():
    handed = []
    def recorder(name):
        async def handle(event):
            handed.append([name, event.text])
        return handle
    a = await connected()
    a.handle_message = recorder('stopping')
    a._runner = type('Runner', (), {'_draining': True})()
    await listening()
    SIM('messages', {'conversationId': CHAT, 'text': TEXT})
    await until(lambda: waits or handed, 'offer while stopping')
    await a.disconnect()
    b = cls(PlatformConfig(enabled=True))
    b.handle_message = recorder('restarted')
    assert await b.connect(), b.fatal_error_message
    await until(lambda: any(name == 'restarted' for name, _ in handed) or not waits,
                'hand-over after the restart')
    await b.disconnect()
    print(json.dumps({'handed': handed, 'refused': len(waits) >= 1}))
asyncio.run(main())
"#;
    let out = shim_python(&sim, code).await;
    assert_eq!(
        reports(&out),
        [
            serde_json::json!({"handed": [["restarted", "sent while the gateway stops"]],
                            "refused": true})
        ],
        "{out}"
    );
}

/// hermes-host.md §9.5 and §19.6. While a restarted Hermes resumes its interrupted
/// sessions, its runner puts every inbound message in a startup-restore queue, from a task of
/// its own that runs after `handle_message` returned, and a stop drops that queue. The shim so
/// answers such a hand-over `queued`: the daemon keeps its stream frame unsettled until the
/// message's turn starts. Here the runner is a stand-in with Hermes' two restore attributes
/// (the window is too short to hit on purpose in a real gateway); the gateway stops before
/// the restore ends, and after the restart the next daemon hands the message over again.
#[tokio::test(flavor = "multi_thread")]
async fn a_message_handed_over_during_the_startup_restore_survives_a_stop_before_it_ran() {
    let sim = sim().await;
    let code = r#"
TEXT = 'sent during the startup restore'

async def until(check):
    deadline = time.monotonic() + 20
    while not check() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)

async def main():
    handed = []
    loop = asyncio.get_running_loop()
    runner = type('Runner', (), {})()
    runner._startup_restore_in_progress, runner._startup_restore_queue = True, []
    a = await connected()
    a._runner = runner
    async def restoring(event):
        handed.append(['restoring', event.text])
        loop.call_soon(runner._startup_restore_queue.append, event)  # the runner's own task
    a.handle_message = restoring
    await listening()
    SIM('messages', {'conversationId': CHAT, 'text': TEXT})
    await until(lambda: handed)
    await asyncio.sleep(0)  # the runner's task has queued the event
    depth = a._depth(a._key(runner._startup_restore_queue[0].source))
    # The gateway stops (its restore queue dies with it) and starts again.
    await restarted(a, handed, 2)
    print(json.dumps({'handed': handed, 'depth': depth}))
asyncio.run(main())
"#;
    let out = shim_python(&sim, code).await;
    assert_eq!(
        reports(&out),
        [
            serde_json::json!({"handed": [["restoring", "sent during the startup restore"],
                                       ["restarted", "sent during the startup restore"]],
                            "depth": 1})
        ],
        "{out}"
    );
}

/// Found by the fault harness (its seed 11). A message Hermes queued behind a running turn, and
/// started only once the gateway had begun its stop, never runs: the stopping runner refuses
/// new work, or the stop cancels the cycle at once. The shim tells the daemon so (`turn.start`
/// with `draining`), and the daemon leaves the message's stream frame unsettled, so after the
/// restart the next daemon hands it over again. Before, that start recorded the message as
/// handled and the restarted gateway never saw it.
#[tokio::test(flavor = "multi_thread")]
async fn a_queued_message_started_while_the_gateway_stops_is_handed_over_after_the_restart() {
    let sim = sim().await;
    let code = r#"
TEXT = 'queued behind the running turn'

async def until(check):
    deadline = time.monotonic() + 20
    while not check() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)

async def main():
    handed = []
    runner = type('Runner', (), {})()
    runner._draining = False
    a = await connected()
    a._runner = runner
    async def queue_it(event):  # a turn runs: Hermes parks the message in the head slot
        handed.append(['queued', event.text])
        a._pending_messages[a._key(event.source)] = event
    a.handle_message = queue_it
    await listening()
    SIM('messages', {'conversationId': CHAT, 'text': TEXT})
    from shim import _adapter
    # Remembered right before the shim answers `queued`, with no await in between: the answer
    # is written ahead of the `turn.start` below.
    await until(lambda: _adapter.INBOUND_SEEN)
    event = a._pending_messages.popitem()[1]
    runner._draining = True  # the gateway's stop begins; then Hermes starts the message's cycle
    await a.on_processing_start(event)
    from gateway.platforms.base import ProcessingOutcome
    await a.on_processing_complete(event, ProcessingOutcome.CANCELLED)
    await restarted(a, handed, 2)
    print(json.dumps({'handed': handed}))
asyncio.run(main())
"#;
    let out = shim_python(&sim, code).await;
    assert_eq!(
        reports(&out),
        [
            serde_json::json!({"handed": [["queued", "queued behind the running turn"],
                                     ["restarted", "queued behind the running turn"]]})
        ],
        "{out}"
    );
}

/// Found by the fault harness. The gateway's stop can begin while the shim hands a message to
/// Hermes (the shim's media cache yields to the loop first): the stopping runner answers a busy
/// session's message "not accepting another turn" and drops it, and a free session's cycle
/// answers "not accepting new work" instead of running it. Either way Hermes never runs the
/// message, so the shim refuses the hand-over (retryable) and the restarted gateway gets it.
/// Before, the hand-over was answered as accepted, and the message was recorded handled.
#[tokio::test(flavor = "multi_thread")]
async fn a_message_handed_over_as_the_stop_begins_is_handed_over_after_the_restart() {
    let sim = sim().await;
    let code = r#"
TEXT = 'arrives as the gateway stops'

async def until(check):
    deadline = time.monotonic() + 20
    while not check() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)

async def main():
    handed = []
    runner = type('Runner', (), {})()
    runner._draining = False
    a = await connected()
    a._runner = runner
    async def stop_begins(event):  # the stop begins; the busy runner drops the message
        handed.append(['dropped', event.text])
        runner._draining = True
    a.handle_message = stop_begins
    await listening()
    SIM('messages', {'conversationId': CHAT, 'text': TEXT})
    await until(lambda: handed)
    from shim import _adapter
    remembered = len(_adapter.INBOUND_SEEN)
    await restarted(a, handed, 2)
    print(json.dumps({'handed': handed, 'remembered': remembered}))
asyncio.run(main())
"#;
    let out = shim_python(&sim, code).await;
    assert_eq!(
        reports(&out),
        [
            serde_json::json!({"handed": [["dropped", "arrives as the gateway stops"],
                                       ["restarted", "arrives as the gateway stops"]],
                            "remembered": 0})
        ],
        "{out}"
    );
}

/// A free session's message runs in a processing cycle Hermes spawns and starts a moment
/// later; a stop that begins in between answers it "not accepting new work" instead of running
/// it. The shim answers such a hand-over as queued, so the message settles only when its turn
/// starts; its cycle's start while the gateway stops leaves it unsettled, and the restarted
/// gateway gets it. A cycle that starts before the stop settles it once (the third message).
#[tokio::test(flavor = "multi_thread")]
async fn a_free_sessions_message_whose_cycle_starts_after_the_stop_is_handed_over_again() {
    let sim = sim().await;
    let code = r#"
async def until(check):
    deadline = time.monotonic() + 20
    while not check() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)

async def main():
    handed, cycles = [], []
    runner = type('Runner', (), {})()
    runner._draining = False
    a = await connected()
    a._runner = runner
    async def spawn_cycle(event):  # Hermes marks the session busy and spawns its cycle
        handed.append(['first', event.text])
        key = a._key(event.source)
        cycle = asyncio.get_running_loop().create_future()
        a._session_tasks[key] = cycle
        cycles.append((event, key, cycle))
    a.handle_message = spawn_cycle
    await listening()
    from gateway.platforms.base import ProcessingOutcome
    from shim import _adapter
    SIM('messages', {'conversationId': CHAT, 'text': 'runs before the stop'})
    await until(lambda: len(cycles) == 1 and _adapter.INBOUND_SEEN)
    event, key, cycle = cycles[0]
    await a.on_processing_start(event)  # the cycle starts: the message is Hermes' now
    await a.send(CHAT, 'the answer', reply_to=event.message_id)
    await a.on_processing_complete(event, ProcessingOutcome.SUCCESS)
    cycle.set_result(None)
    SIM('messages', {'conversationId': CHAT, 'text': 'its cycle starts after the stop'})
    await until(lambda: len(cycles) == 2 and len(_adapter.INBOUND_SEEN) == 2)
    event, key, cycle = cycles[1]
    runner._draining = True  # the stop begins before the spawned cycle starts
    await a.on_processing_start(event)
    await a.on_processing_complete(event, ProcessingOutcome.CANCELLED)
    cycle.set_result(None)
    # The stream replays in order: a wrong second hand-over of the first message comes first.
    await restarted(a, handed, 3)
    print(json.dumps({'handed': handed}))
asyncio.run(main())
"#;
    let out = shim_python(&sim, code).await;
    assert_eq!(
        reports(&out),
        [
            serde_json::json!({"handed": [["first", "runs before the stop"],
                                       ["first", "its cycle starts after the stop"],
                                       ["restarted", "its cycle starts after the stop"]]})
        ],
        "{out}"
    );
}

/// A stopping runner answers a message it will not run with "⏳ Gateway is shutting down and
/// is not accepting new work right now." as the cycle's answer. The shim marks that send
/// `stop_notice` (only while the gateway stops, and only that text; or behind the "♻️ Recovered
/// reply" marker of the restarted gateway's redelivery of it), so the daemon does not post it,
/// and the restarted gateway answers the message.
#[tokio::test(flavor = "multi_thread")]
async fn a_stopping_runners_refusal_is_sent_as_a_stop_notice() {
    let sim = sim().await;
    let code = r#"
async def main():
    runner = type('Runner', (), {})()
    runner._draining = False
    runner._status_action_gerund = lambda: 'shutting down'
    a = await connected()
    a._runner = runner
    sent = []
    async def forward(kind, body):
        sent.append([body['content'], body.get('stop_notice', False)])
        return None
    a._forward = forward
    refusal = '⏳ Gateway is shutting down and is not accepting new work right now.'
    await a.send(CHAT, refusal)
    runner._draining = True
    await a.send(CHAT, refusal)
    await a.send(CHAT, 'An answer that mentions not accepting new work.')
    runner._draining = False  # the restarted gateway redelivers from its delivery ledger
    from gateway.delivery_ledger import RECOVERED_MARKER
    await a.send(CHAT, RECOVERED_MARKER + refusal)
    await a.send(CHAT, RECOVERED_MARKER + 'The answer.')
    await a.disconnect()
    print(json.dumps({'sent': sent}))
asyncio.run(main())
"#;
    let out = shim_python(&sim, code).await;
    let refusal = "⏳ Gateway is shutting down and is not accepting new work right now.";
    const RECOVERED: &str = "♻️ Recovered reply — the gateway restarted during delivery, so this \
                             may be a duplicate:\n\n";
    assert_eq!(
        reports(&out),
        [
            serde_json::json!({"sent": [[refusal, false], [refusal, true],
                                     ["An answer that mentions not accepting new work.", false],
                                     [format!("{RECOVERED}{refusal}"), true],
                                     [format!("{RECOVERED}The answer."), false]]})
        ],
        "{out}"
    );
}

/// hermes-host.md §19.3. The daemon's `RUST_LOG` decides what it writes to stderr; the shim
/// forwards every line to `canon_hermes.daemon`. A DEBUG line forwarded at DEBUG would be dropped
/// by Hermes' INFO loggers, so asking the daemon for debug output showed nothing; it is logged at
/// INFO, with its own level still at the head of the line.
#[tokio::test(flavor = "multi_thread")]
async fn the_daemons_debug_lines_reach_hermes_logs_when_asked_for() {
    let sim = sim().await;
    let code = r#"
import logging
records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append((record.levelname, record.getMessage()))
logging.getLogger('canon_hermes.daemon').addHandler(Keep())
logging.getLogger('canon_hermes.daemon').setLevel(logging.INFO)
os.environ['RUST_LOG'] = 'info,canon_host=debug'

async def main():
    a = await connected()
    await a.disconnect()
    debug = [m for level, m in records if m.startswith('DEBUG canon_host')]
    print(json.dumps({'debug_lines': bool(debug),
                      'at_info': all(level == 'INFO' for level, m in records
                                     if m.startswith('DEBUG'))}))
asyncio.run(main())
"#;
    let out = shim_python(&sim, code).await;
    assert_eq!(
        reports(&out),
        [serde_json::json!({"debug_lines": true, "at_info": true})],
        "{out}"
    );
}

/// Found by the fault harness. The shim tells a respawned daemon whether a turn made a durable
/// send of its own (`durable_sent` in the resync), because such a send took one of the turn's
/// message ids. Hermes' plain send of an answer inside a turn is staged into the turn's final
/// (the daemon's answer is a marker or names the turn), so it took none; counting it let a
/// daemon killed after the final was stored move the replayed final to the next id when Canon
/// refused it (409) and store the answer twice. A media send does take an id, and still counts.
#[tokio::test(flavor = "multi_thread")]
async fn only_a_send_that_stored_a_message_of_its_own_counts_as_the_turns_durable_send() {
    let sim = sim().await;
    let code = r#"
import base64, tempfile
async def until(check):
    deadline = time.monotonic() + 20
    while not check() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)

async def main():
    got = []
    a = await connected()
    async def take(event):
        got.append(event)
    a.handle_message = take
    await listening()
    SIM('messages', {'conversationId': CHAT, 'text': 'tell me, and show me'})
    await until(lambda: got)
    ev = got[0]
    await a.on_processing_start(ev)
    key = a._key(ev.source)
    # Hermes runs the turn's sends inside its session context.
    from gateway.session_context import set_session_vars
    set_session_vars(platform='canon', chat_id=CHAT, session_key=key)
    meta = {'reply_to_message_id': ev.message_id, 'notify': True}
    plain = await a.send(CHAT, 'The answer, sent whole.', reply_to=ev.message_id, metadata=meta)
    after_plain = bool(a._open[key].get('durable_sent'))
    kept = 'first' in (a._answers.get(key) or {})  # the send was seen as the turn's
    png = os.path.join(tempfile.mkdtemp(), 'dot.png')
    with open(png, 'wb') as f:
        f.write(base64.b64decode(
            'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAghqMVwAAAABJRU5ErkJggg=='))
    media = await a.send_image_file(CHAT, png, caption='A dot', reply_to=ev.message_id)
    after_media = bool(a._open[key].get('durable_sent'))
    await a.disconnect()
    print(json.dumps({'plain_ok': plain.success, 'kept': kept, 'after_plain': after_plain,
                      'media_ok': media.success, 'after_media': after_media}))
asyncio.run(main())
"#;
    let out = shim_python(&sim, code).await;
    assert_eq!(
        reports(&out),
        [
            serde_json::json!({"plain_ok": true, "kept": true, "after_plain": false,
                            "media_ok": true, "after_media": true})
        ],
        "{out}"
    );
}

/// hermes-host.md §19.9. A Linux pipe holds 16 pages, and a frame that
/// does not fit in the last page's free space takes a page of its own: sixteen 3,000-byte
/// frames fill the daemon's 64 KiB stdin with 48,000 bytes unread. A caller that wrote a frame
/// itself because the unread bytes left room then blocked for as long as the daemon did not
/// read, on the gateway loop or the reader thread. Here the daemon is stopped (SIGSTOP) right
/// after its hello; every one of 20 such posts must return within 1 s, and once the daemon runs
/// again every request is answered.
#[tokio::test(flavor = "multi_thread")]
async fn a_daemon_that_stops_reading_its_stdin_never_blocks_a_post() {
    let sim = sim().await;
    let code = r#"
import threading
d = _daemon.Daemon()
PROBE = {'config': None, 'verify': False, 'pad': 'x' * 2920}
size = len(_daemon.encode(_daemon.request_frame('probe', 's:10', PROBE)))
os.kill(d.proc.pid, signal.SIGSTOP)  # the daemon stops reading its stdin
starts, took, futs = [], [], []
def post_all():
    for _ in range(20):
        starts.append(time.monotonic())
        futs.append(d.request('probe', PROBE))
        took.append(time.monotonic() - starts[-1])
poster = threading.Thread(target=post_all, daemon=True)
poster.start()
# Each post gets 1 s: one that takes longer is stuck on the full pipe.
while len(took) < 20 and not (len(starts) > len(took) and time.monotonic() - starts[-1] > 1):
    time.sleep(0.01)
print(json.dumps({'frame_of_3000_bytes': 2900 <= size <= 3100, 'posted': len(took),
                  'each_within_1s': max(took) < 1}))
os.kill(d.proc.pid, signal.SIGCONT)
poster.join(30)
done, _ = cf.wait(futs, 30)
results = sorted({'answered %s' % f.result().get('configured') if f.exception() is None
                  else f.exception().code for f in done})
print(json.dumps({'answered': len(done), 'of': len(futs), 'results': results}))
d.close()
"#;
    let out = shim_python(&sim, code).await;
    assert_eq!(
        reports(&out),
        [
            serde_json::json!({"frame_of_3000_bytes": true, "posted": 20, "each_within_1s": true}),
            serde_json::json!({"answered": 20, "of": 20, "results": ["answered True"]}),
        ],
        "{out}"
    );
}

/// hermes-host.md §19.6. To drop a message a respawned daemon hands
/// over again, the shim remembers the last 4,096 inbound messages. It kept each whole
/// MessageEvent (text, raw frame, media paths), bounded by count and not by size: with 4 MiB
/// frames, gigabytes in the gateway. It keeps only the session key and the message's reference
/// now, and a repeat is still answered `queued` (with the new daemon's reference on the waiting
/// event) while the message waits in Hermes' queue, and accepted, without a second hand-over,
/// once it left it.
#[tokio::test(flavor = "multi_thread")]
async fn remembered_inbound_messages_keep_no_event_text() {
    let sim = sim().await;
    let code = r#"
from shim import _adapter
from gateway.platforms.base import MessageEvent

async def until(check):
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, 'not all messages were handed over'
        await asyncio.sleep(0.05)

async def main():
    got = []
    a = await connected()
    async def take(event):
        got.append(event)
    a.handle_message = take
    await listening()
    for i in range(8):
        SIM('messages', {'conversationId': CHAT, 'text': 'message %d: %s' % (i, 'x' * 4000)})
    await until(lambda: len(got) == 8 and len(_adapter.INBOUND_SEEN) == 8)
    kept = list(_adapter.INBOUND_SEEN.values())
    print(json.dumps({'remembered': len(kept),
                      'events_kept': any(isinstance(v, MessageEvent) for v in kept),
                      'text_kept': any('x' * 100 in repr(v) for v in kept)}))
    ev = got[0]
    key, again = a._key(ev.source), {'message_id': ev.message_id}
    a._pending_messages[key] = ev  # Hermes parks it in the session's head slot
    first = await a._handle('inbound.message', {'event': again, 'event_ref': 'respawned-1'})
    second = await a._handle('inbound.message', {'event': again, 'event_ref': 'respawned-2'})
    ref = ev._canon_ref
    del a._pending_messages[key]  # its turn started
    third = await a._handle('inbound.message', {'event': again, 'event_ref': 'respawned-3'})
    queued = {'accepted': True, 'queued': True, 'session_key': key}
    print(json.dumps({'queued': first == queued and second == queued, 'ref': ref,
                      'after': third, 'handed': len(got)}))
    await a.disconnect()
asyncio.run(main())
"#;
    let out = shim_python(&sim, code).await;
    assert_eq!(
        reports(&out),
        [
            serde_json::json!({"remembered": 8, "events_kept": false, "text_kept": false}),
            serde_json::json!({"queued": true, "ref": "respawned-2",
                                "after": {"accepted": true}, "handed": 8}),
        ],
        "{out}"
    );
}

/// hermes-host.md §19.10. A respawn holds the supervisor through the
/// new daemon's hello, connect and resync; Canon answers that connect 5 s late here. Every
/// gateway call meanwhile waited for the supervisor on a thread of the loop's default executor
/// (min(32, cpus + 4) threads), so 40 of them starved anything else Hermes runs there until the
/// resync was done. The executor must run a no-op within 1 s while the calls wait, and every
/// call is answered by the respawned daemon.
#[tokio::test(flavor = "multi_thread")]
async fn calls_waiting_for_a_slow_resync_leave_the_default_executor_free() {
    let sim = sim().await;
    let code = r#"
async def until(check):
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, 'the daemon never went down'
        await asyncio.sleep(0.05)

async def main():
    a = await connected()
    loop = asyncio.get_running_loop()
    first = SUPERVISOR.peek()
    os.kill(first.proc.pid, signal.SIGKILL)
    await until(lambda: SUPERVISOR.peek() is None)
    fault('/agents/me', {'type': 'delay_before', 'ms': 5000}, method='GET', times=1)
    started = time.monotonic()
    probe = {'config': None, 'verify': False}
    calls = [asyncio.ensure_future(_daemon.call('probe', probe)) for _ in range(40)]
    await asyncio.sleep(0)  # each call has asked the supervisor for the daemon
    t0 = time.monotonic()
    await asyncio.wait_for(loop.run_in_executor(None, time.monotonic), 60)
    free = time.monotonic() - t0
    results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 60)
    print(json.dumps({
        'executor_free_within_1s': free < 1, 'resync_slow': time.monotonic() - started > 4,
        'respawned': SUPERVISOR.peek() not in (None, first),
        'results': sorted({'answered %s' % r.get('configured') if isinstance(r, dict)
                           else getattr(r, 'code', repr(r)) for r in results})}))
    await a.disconnect()
asyncio.run(main())
"#;
    let out = shim_python(&sim, code).await;
    assert_eq!(
        reports(&out),
        [
            serde_json::json!({"executor_free_within_1s": true, "resync_slow": true,
                                "respawned": true, "results": ["answered True"]})
        ],
        "{out}"
    );
}

/// hermes-host.md §19.10. A respawn's resync rebuilds the turn bookkeeping (open turns, kept
/// answers, dequeue chains, delivered turns) on the respawn thread while the new child's
/// `turn.closed` changes the same structures on the event loop: each holds the bookkeeping's
/// lock, so a `turn.closed` arriving mid-resync waits for it and then applies whole.
#[tokio::test(flavor = "multi_thread")]
async fn a_turn_closed_during_a_resync_waits_for_the_resyncs_bookkeeping() {
    let sim = sim().await;
    let code = r#"
import threading

async def main():
    a = cls(PlatformConfig(enabled=True))
    a._before['k'] = [({'turn_id': 't1'}, {}, ('step',), False)]
    done = threading.Event()
    def closed():
        a._turn_closed('k', 't1')
        done.set()
    with a._turns_lock:  # as the resync holds it while it rebuilds the bookkeeping
        worker = threading.Thread(target=closed)
        worker.start()
        applied_meanwhile = done.wait(0.3)
        chain_meanwhile = [t[0]['turn_id'] for t in a._before.get('k', [])]
    worker.join(10)
    print(json.dumps({'applied_meanwhile': applied_meanwhile, 'chain_meanwhile': chain_meanwhile,
                      'chain_after': 'k' in a._before,
                      'delivered': [t['turn_id'] for t in a._delivered.get('k', [])]}))
asyncio.run(main())
"#;
    let out = shim_python(&sim, code).await;
    assert_eq!(
        reports(&out),
        [
            serde_json::json!({"applied_meanwhile": false, "chain_meanwhile": ["t1"],
                            "chain_after": false, "delivered": ["t1"]})
        ],
        "{out}"
    );
}
