"""The daemon child: spawning `canon-hermes serve --stdio`, the JSON-lines frames over its stdin and
stdout, and its respawn after a crash (hermes-host.md §19.3, §19.4, §19.10, §19.11).

`Daemon` is one child process with three threads: a writer draining a bounded queue into its
stdin (a frame that finds the pipe empty is written by its caller at once instead, see
`Daemon._write_now`), a reader resolving the futures of the shim's requests from its stdout and handing the
daemon's own frames to a handler, and one forwarding its stderr log lines to the logger
`canon_hermes.daemon`. `Supervisor` owns the one child of this Python process (`SUPERVISOR`,
which survives re-registration): it spawns it lazily, respawns it in the background with backoff
while an adapter is connected (which then reconnects and resyncs its open turns), and gives up
after too many exits. The frame helpers (`encode`, `decode`, the envelope builders, `settle`) are
pure; crates/cli/tests/it/shim_golden.rs feeds them the golden lines of fixtures/stdio/.

Also here: the manifest `canon-hermes install` wrote, what the `hello` reports about this host
(the hash of the installed package's code, Hermes and Python versions, the multiplex flag) and
`turn_ctx`, the turn context attached to requests made inside a turn.
Standard library only; Hermes is imported inside the functions that read it, so this module
loads without Hermes.
"""

import asyncio
import collections
import concurrent.futures
import hashlib
import importlib.metadata
import itertools
import json
import logging
import os
import queue
import shutil
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

try:  # the pipe's capacity and fill level (Linux); elsewhere every frame goes through the writer
    import fcntl
    import termios
    _F_GETPIPE_SZ = fcntl.F_GETPIPE_SZ
except (ImportError, AttributeError):
    fcntl = termios = _F_GETPIPE_SZ = None

from ._constants import (BACKPRESSURE, CTX_ENV, CTX_VARS, DAEMON_EXITED, EXIT_WAIT, INTERNAL, NOT_CONNECTED,
                         PROTOCOL, TIMEOUT, TIMEOUTS)

MULTIPLEX_UNKNOWN = (
    "Canon could not verify whether the Hermes gateway is multiplexing profiles, "
    "so startup was refused."
)
CRASH_LOOP = "canon-hermes daemon keeps exiting; see gateway.log"
STOPPING = "canon-hermes daemon exited while the gateway stops"
BACKOFF = (0.5, 1, 2, 4, 8, 16, 30)  # seconds before the n-th background respawn
CRASH_LIMIT, CRASH_WINDOW = 5, 300  # that many exits within that many seconds = crash loop
KILL_WAIT = 2  # seconds from SIGTERM to SIGKILL
QUEUE_FRAMES = 1024  # frames waiting for the writer at most; beyond, requests fail `backpressure`
# Requests sent and not yet answered at most, until the daemon's hello names its own limit
# (`limits.max_inflight`); a request beyond it waits for a slot up to its caller's timeout and then
# fails `backpressure` without ever reaching the daemon (hermes-host.md §19.9).
MAX_INFLIGHT = 64
EXITED = {"code": DAEMON_EXITED, "message": "canon-hermes daemon exited"}

log = logging.getLogger("canon_hermes")
daemon_log = logging.getLogger("canon_hermes.daemon")
HERE = Path(__file__).resolve().parent


def _manifest():
    """manifest.json as `canon-hermes install` wrote it; {} when it is missing or unreadable (the
    daemon then refuses the hello as a stale shim)."""
    try:
        manifest = json.loads((HERE / "manifest.json").read_bytes() or b"{}")
    except (OSError, ValueError):
        return {}
    return manifest if isinstance(manifest, dict) else {}


def package_sha256(directory):
    """SHA-256 of the package's code as installed: its .py files in byte order of their names,
    each as `<name> LF <length> LF <bytes>` (the manifest's `shim_hash`). The hello sends it as
    `manifest_sha256`; the daemon compares it with the hash of the shim its binary installs."""
    digest = hashlib.sha256()
    for path in sorted(Path(directory).glob("*.py"), key=lambda p: p.name.encode()):
        data = path.read_bytes()
        digest.update(path.name.encode() + b"\n%d\n" % len(data) + data)
    return digest.hexdigest()


MANIFEST, SHIM_SHA256 = _manifest(), package_sha256(HERE)


# ----- host facts -----

def hermes_version():
    try:
        return importlib.metadata.version("hermes-agent")
    except importlib.metadata.PackageNotFoundError:
        return "none"


def python_version():
    return "%d.%d.%d" % sys.version_info[:3]


def multiplex_active():
    try:
        from agent.secret_scope import is_multiplex_active
    except Exception as exc:  # the probe itself is unavailable
        raise RuntimeError(MULTIPLEX_UNKNOWN) from exc
    return bool(is_multiplex_active())


def _multiplex_flag():
    try:
        return multiplex_active()
    except RuntimeError:
        return True  # unverifiable counts as multiplexing: the daemon refuses


def turn_ctx():
    """The task-local turn context, read in the calling thread or task (hermes-host.md §19.6)."""
    from gateway.session_context import get_session_env
    return {name: get_session_env(CTX_ENV.get(name, "HERMES_SESSION_" + name.upper()), "") or None
            for name in CTX_VARS}


def binary():
    """The daemon's program: CANON_HERMES_BIN, else the manifest's `binary` (install's copy,
    recorded relative to this directory; an absolute path is taken as it is), else
    `canon-hermes` on PATH."""
    found, recorded = os.environ.get("CANON_HERMES_BIN"), MANIFEST.get("binary")
    if not found and isinstance(recorded, str) and recorded:
        found = str(HERE / recorded)
    found = found or shutil.which("canon-hermes")
    if not found:
        raise RuntimeError("canon-hermes binary not found (set CANON_HERMES_BIN or put it on PATH)")
    return found


# ----- frames -----

class DaemonError(Exception):
    def __init__(self, code, message, retryable=False):
        super().__init__(message)
        self.code, self.retryable = code, retryable

    @classmethod
    def of(cls, err, default=INTERNAL):
        return cls(err.get("code", default), err.get("message", ""), bool(err.get("retryable")))


def _plain(value):
    """What JSON cannot hold, as text: a YAML date from config.yaml, a Path, a set, bytes, any
    object Hermes hands over. The daemon reads them as the strings they print as."""
    if isinstance(value, (set, frozenset)):
        return sorted(map(str, value))
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def encode(frame):
    """A frame as its line on the wire: compact JSON (non-ASCII escaped), then LF. Values JSON has
    no form for become text (`_plain`); NaN and infinities, which the daemon's JSON refuses, and
    circular values raise ValueError, which fails only that frame (`Daemon.post`). A lone UTF-16
    surrogate in a string (text cut mid-emoji, or decoded with surrogateescape) would be escaped
    as a `\\udXXX` the daemon's JSON refuses, dropping the whole frame there: it becomes U+FFFD."""
    text = json.dumps(frame, separators=(",", ":"), default=_plain, allow_nan=False)
    if "\\ud" in text:  # a surrogate escape, or a literal backslash-u-d (rare either way)
        text = json.dumps(frame, separators=(",", ":"), default=_plain, allow_nan=False,
                          ensure_ascii=False)
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text.encode() + b"\n"


def decode(line):
    """A line read from the daemon as its frame; ValueError when it is not JSON."""
    return json.loads(line)


def request_frame(kind, rid, body):
    return {"v": PROTOCOL, "type": kind, "id": rid, "body": body}


def notification_frame(kind, body):
    return {"v": PROTOCOL, "type": kind, "body": body}


def response_frame(rid, kind, body=None, error=None):
    tail = {"body": body or {}} if error is None else {"error": error}
    return dict({"v": PROTOCOL, "id": rid, "re": kind, "ok": error is None}, **tail)


def is_response(frame):
    """Whether a decoded frame answers one of the shim's requests (else the daemon sent it)."""
    return "ok" in frame and "id" in frame


def resolve(fut, result=None, error=None):
    """Settles `fut` with `result`, or with `error` when one is given, unless it is already done.
    Never raises: the gateway loop cancels a future whose `acall` timed out, and that cancel can
    land between any check here and the set, which then raises InvalidStateError; raised in the
    reader thread, it would end the thread and leave every later request unanswered."""
    try:
        if error is None:
            fut.set_result(result)
        else:
            fut.set_exception(error)
    except concurrent.futures.InvalidStateError:  # cancelled or settled meanwhile: nobody waits
        pass


def settle(fut, frame):
    """Resolves a request's future from its response: the body, or the error as DaemonError."""
    if frame["ok"]:
        resolve(fut, frame.get("body") or {})
    else:
        resolve(fut, error=DaemonError.of(frame.get("error") or {}))


# ----- the child -----

# What the daemon may see of the gateway's environment: its own settings (CANON_*, HERMES_*),
# logging, TLS roots, locale and the basics of a process. Everything else — the model providers'
# keys above all — stays with the gateway.
ENV_PREFIXES = ("CANON_", "HERMES_", "RUST_", "SSL_CERT_", "LC_", "XDG_")
ENV_NAMES = frozenset(("HOME", "PATH", "USER", "LOGNAME", "LANG", "TMPDIR", "TZ"))


def daemon_env(environ, **extra):
    """The environment of a daemon child: `environ` filtered to what the daemon reads, plus `extra`."""
    env = {k: v for k, v in environ.items() if k in ENV_NAMES or k.startswith(ENV_PREFIXES)}
    env.update(extra)
    return env


class Daemon:
    """One `canon-hermes serve --stdio` child: writer, reader and stderr threads."""

    def __init__(self, on_exit=None):
        home = os.environ.get("HERMES_HOME") or str(Path.home() / ".hermes")
        env = daemon_env(os.environ, HERMES_HOME=home, CANON_HERMES_SHIM_PROTOCOL=str(PROTOCOL),
                         CANON_HERMES_PARENT_PID=str(os.getpid()))
        # A session (and process group) of its own: the terminal's Ctrl-C goes to the gateway, which
        # then closes the daemon's stdin, instead of killing the daemon mid-write at the same time.
        self.proc = subprocess.Popen([binary(), "serve", "--stdio"], cwd=home, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        self._init_requests()
        self.pipe_size = self._pipe_size()
        self.handler = None  # callable(frame) for daemon-originated frames
        self.available = {}  # tool name → this child's latest `tool.availability` verdict
        self.dead = self.closing = False
        self.on_exit = on_exit  # called on an unexpected exit
        for target in (self._write_loop, self._read_loop, self._stderr_loop):
            threading.Thread(target=target, daemon=True, name="canon-hermes-" + target.__name__).start()
        try:
            hello = self.call("hello", {
                "protocols": [PROTOCOL], "manifest_sha256": SHIM_SHA256,
                "shim_version": MANIFEST.get("binary_version", ""),
                "binary_version": MANIFEST.get("binary_version", ""),
                "hermes_version": hermes_version(), "python_version": python_version(),
                "pid": os.getpid(), "hermes_home": home, "profile_name": None,
                "multiplex_active": _multiplex_flag(), "seams": {"busy_handler": False, "dequeue_ack": False},
            }, TIMEOUTS["hello"])
        except Exception:
            self.close()
            raise
        self.hello = hello
        limit = (hello.get("limits") or {}).get("max_inflight")
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            self.max_inflight = limit

    def _init_requests(self):
        """The request bookkeeping: futures by id, the writer's queue and the in-flight cap."""
        self.ids, self.pending, self.lock = itertools.count(1), {}, threading.Lock()
        self.out = queue.Queue(maxsize=QUEUE_FRAMES)
        # `queued` counts frames handed to the writer and not yet written (under `write_lock`,
        # which a direct write holds): a caller writes directly only when nothing is ahead.
        self.write_lock, self.queued = threading.Lock(), 0
        self.pipe_size = None  # until the child is spawned: every frame goes through the writer
        self.max_inflight, self.inflight = MAX_INFLIGHT, 0
        self.waiting = collections.OrderedDict()  # request id → encoded line, waiting for a slot

    def alive(self):
        return not self.dead and self.proc.poll() is None

    def post(self, frame):
        """Queues one frame for the writer, encoded here so that a frame that cannot be encoded
        fails alone, in its caller, and never stops the writer (which would leave Canon deaf
        while Hermes shows it connected). False when the queue is full; raises DaemonError for a
        frame that cannot be encoded."""
        if frame is not None and not isinstance(frame, bytes):
            frame = self._encoded(frame)
        with self.write_lock:
            if frame is not None and self.queued == 0 and self._write_now(frame):
                return True
            try:
                self.out.put_nowait(frame)
            except queue.Full:
                return False
            self.queued += 1
            return True

    def _pipe_size(self):
        """The capacity of the child's stdin pipe in bytes; None where it cannot be read."""
        if _F_GETPIPE_SZ is None:
            return None
        try:
            return fcntl.fcntl(self.proc.stdin.fileno(), _F_GETPIPE_SZ)
        except (OSError, ValueError):
            return None

    def _write_now(self, frame):
        """Writes `frame` from the calling thread (holding `write_lock`, nothing queued ahead)
        when the pipe is empty and the frame fits in it, so the write cannot block. This spares
        a request the hand-off to the writer thread: while Hermes' agent thread is busy in
        Python, every thread that must take the interpreter lock in turn waits up to its switch
        interval (5 ms), which a stream edit paid on each of its way out and back. False leaves
        the frame to the writer (the pipe not empty, its fill unreadable, or the pipe gone).

        Only an empty pipe is known to have room: Linux counts a pipe in page slots (16 of
        them in 64 KiB), and a write that does not fit in the last page's free space takes a
        new slot, so sixteen 3,000-byte frames fill the pipe with 48,000 bytes unread. A write
        that blocks here would block the gateway's event loop (the whole gateway freezes) or
        the reader thread (which then stops draining the daemon's stdout, and the daemon, its
        output full, stops reading its stdin: both processes wait for good)."""
        if self.pipe_size is None or len(frame) > self.pipe_size:
            return False
        try:
            fd = self.proc.stdin.fileno()
            if struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]:
                return False
            self.proc.stdin.write(frame)
            self.proc.stdin.flush()
            return True
        except (OSError, ValueError):  # the pipe is gone: the writer finds that out too
            return False

    @staticmethod
    def _encoded(frame):
        """`frame`'s line; DaemonError (logged) when it cannot be encoded."""
        try:
            return encode(frame)
        except (TypeError, ValueError, RecursionError) as exc:
            kind = frame.get("type") or frame.get("re") if isinstance(frame, dict) else None
            daemon_log.error("canon-hermes: a %s frame could not be encoded (%s); dropped it", kind,
                             type(exc).__name__)
            raise DaemonError(INTERNAL, "canon-hermes frame could not be encoded: %s" % exc) from None

    def request(self, kind, body):
        """Sends a request; its future. Beyond the in-flight cap the request waits (unsent) for a
        slot, which an answer to an earlier request frees."""
        fut, rid = concurrent.futures.Future(), "s:%d" % next(self.ids)
        fut.canon_request_id = rid
        try:
            line = self._encoded(request_frame(kind, rid, body))
        except DaemonError as exc:
            resolve(fut, error=exc)
            return fut
        with self.lock:
            dead = self.dead
            if not dead:
                self.pending[rid] = fut
                if self.inflight >= self.max_inflight:
                    self.waiting[rid] = line
                    return fut
                self.inflight += 1
        if dead:
            resolve(fut, error=DaemonError.of(EXITED))
            return fut
        if not self._send(rid, fut, line):
            self._release()
        return fut

    def _send(self, rid, fut, line):
        """Hands a request holding a slot to the writer. False when the writer's queue is full: the
        request then fails `backpressure`, and the caller frees the slot it held."""
        if self.post(line):
            return True
        with self.lock:
            self.pending.pop(rid, None)
        if fut is not None:
            resolve(fut, error=DaemonError(BACKPRESSURE, "canon-hermes daemon busy", True))
        return False

    def _release(self):
        """A request's slot is free (answered, or never written): the oldest waiting request takes
        it. A loop, not recursion: with the writer's queue full, every waiting one fails in turn."""
        while True:
            with self.lock:
                self.inflight = max(0, self.inflight - 1)
                if not self.waiting or self.dead:
                    return
                rid, line = self.waiting.popitem(last=False)
                fut = self.pending.get(rid)
                self.inflight += 1
            if self._send(rid, fut, line):
                return

    def _timed_out(self, fut):
        """The caller stopped waiting for `fut`: one still waiting for a slot is withdrawn unsent
        and fails `backpressure`; one the daemon has fails `timeout` (its late answer is dropped)."""
        rid = getattr(fut, "canon_request_id", None)
        with self.lock:
            unsent = self.waiting.pop(rid, None) is not None
            if unsent:
                self.pending.pop(rid, None)
        if unsent:
            return DaemonError(BACKPRESSURE, "canon-hermes daemon busy", True)
        return DaemonError(TIMEOUT, "canon-hermes daemon timed out")

    def answered(self, frame):
        """A response from the daemon: settles its request's future and frees its slot."""
        with self.lock:
            fut = self.pending.pop(frame["id"], None)
        if fut is not None:
            self._release()
            settle(fut, frame)

    def call(self, kind, body, timeout):
        fut = self.request(kind, body)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            raise self._timed_out(fut) from None

    async def acall(self, kind, body, timeout):
        fut = self.request(kind, body)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(fut), timeout)
        except asyncio.TimeoutError:
            raise self._timed_out(fut) from None

    def notify(self, kind, body):
        try:
            self.post(notification_frame(kind, body))
        except DaemonError:
            pass  # logged by post; a notification has nobody to tell

    def respond(self, rid, kind, body=None, error=None):
        try:
            self.post(response_frame(rid, kind, body, error))
        except DaemonError as exc:
            # The daemon still gets an answer, so its request does not wait out its timeout.
            self.post(response_frame(rid, kind, error={"code": INTERNAL, "message": str(exc)}))

    def close(self):
        """stdin EOF, then SIGTERM, then SIGKILL of this child only."""
        self.closing = True
        self.post(None)
        for wait, escalate in ((EXIT_WAIT, self.proc.terminate), (KILL_WAIT, self.proc.kill)):
            try:
                self.proc.wait(wait)
                return
            except subprocess.TimeoutExpired:
                escalate()
        self._reap()

    def _reap(self):
        """Waits for the exited (or killed) child, so no zombie is left."""
        try:
            self.proc.wait(KILL_WAIT)
        except (subprocess.TimeoutExpired, OSError):
            daemon_log.warning("canon-hermes daemon %s did not exit", self.proc.pid)

    def _write_loop(self):
        # Writes outside `write_lock` (a full pipe blocks here, never a caller): a direct write
        # waits until `queued` is back to 0, so it can never interleave with this one.
        while True:
            frame = self.out.get()
            try:
                if frame is None:
                    self.proc.stdin.close()
                    return  # `queued` stays above 0: nothing is written after the close
                self.proc.stdin.write(frame)
                self.proc.stdin.flush()
            except (OSError, ValueError):  # the pipe is gone (ValueError: written after close)
                return  # nor after the writer stopped
            with self.write_lock:
                self.queued -= 1

    def _read_loop(self):
        for line in self.proc.stdout:
            try:
                frame = decode(line)
            except ValueError:
                daemon_log.warning("non-JSON line on daemon stdout")
                continue
            if is_response(frame):
                self.answered(frame)
            elif self.handler is not None:
                self.handler(frame)
            elif "id" in frame:
                self.respond(frame["id"], frame.get("type"), error={
                    "code": NOT_CONNECTED, "message": "no adapter", "retryable": True})
        with self.lock:  # EOF: the child is gone
            self.dead, pending, self.pending = True, self.pending, {}
            self.waiting.clear()
        self.post(None)
        if self.on_exit is not None and not self.closing:  # before a waiting hello can close()
            self.on_exit(self)
        for fut in pending.values():
            resolve(fut, error=DaemonError.of(EXITED))
        if not self.closing:  # a crash: nobody else waits for this child
            self._reap()

    def _stderr_loop(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip()
            level = logging.getLevelName((line.split() or [""])[0].upper())  # `LEVEL target: message`
            # The daemon's own filter (`RUST_LOG`) already chose what it writes; a DEBUG or TRACE
            # line it wrote was asked for, and Hermes' loggers would drop it below INFO.
            level = max(level, logging.INFO) if isinstance(level, int) else logging.INFO
            daemon_log.log(level, "%s", line)


class Supervisor:
    """The one child of this process: lazy spawn, respawn with backoff, resync."""

    def __init__(self):
        self.child = None  # published only once hello (and, with an adapter, the resync) succeeded
        self.lock = threading.RLock()
        self.adapter = None  # the connected adapter, if any
        self.crashes, self.halted, self.crash_lock = [], False, threading.Lock()
        self.exits = 0  # every exit and failed respawn counted so far (never pruned)
        self.respawning = False  # a background respawn loop is running
        # The spawn that `aget` callers finding no live child all wait for, on a thread of its own.
        self.attempt, self.attempt_lock = None, threading.Lock()

    def peek(self):
        d = self.child
        return d if d is not None and d.alive() else None

    def get(self, new_attempt=False):
        """The live child, spawned (and the connected adapter resynced) when needed. Blocking.
        A crash loop refuses the spawn, except for a `new_attempt`: the readiness check before
        the gateway's reconnect builds a fresh adapter (hermes-host.md §19.10)."""
        with self.lock:
            if self.peek() is not None:
                return self.child
            if self.halted and not new_attempt:
                raise DaemonError("daemon_crash_loop", CRASH_LOOP, True)
            respawn, adapter = self.child is not None, self.adapter
            if respawn and self._gateway_stopping():
                raise DaemonError(DAEMON_EXITED, STOPPING)
            d = Daemon(self._crashed)
            if respawn and adapter is not None:
                try:
                    adapter._resync(d, publish=lambda: setattr(self, "child", d))
                except Exception:
                    d.close()
                    raise
            self.child = d
            return d

    async def aget(self):
        """`get` for an event loop. The callers that find no live child all await one attempt,
        run on a thread of its own. A spawn holds `lock` through hello, connect and the whole
        resync; parked on it in the loop's default executor, each caller would hold one of that
        executor's few threads (min(32, cpus + 4)) as long, and a slow resync would starve
        everything else Hermes runs there."""
        d = self.peek()
        if d is not None:
            return d
        with self.attempt_lock:
            attempt = self.attempt
            if attempt is None or attempt.done():
                attempt = self.attempt = concurrent.futures.Future()
                # Running, so a caller that stops waiting cannot cancel it for the others.
                attempt.set_running_or_notify_cancel()
                threading.Thread(target=self._attempt_get, args=(attempt,), daemon=True,
                                 name="canon-hermes-spawn").start()
        return await asyncio.wrap_future(attempt)

    def _attempt_get(self, attempt):
        try:
            resolve(attempt, self.get())
        except BaseException as exc:  # handed to every waiting caller
            resolve(attempt, error=exc)

    def _count_exit(self):
        """Counts one exit (or failed respawn) in the crash window; its number in the window."""
        now = time.monotonic()
        with self.crash_lock:
            self.crashes = [t for t in self.crashes if now - t < CRASH_WINDOW] + [now]
            self.exits += 1
            self.halted = len(self.crashes) >= CRASH_LIMIT
            return len(self.crashes)

    def _gateway_stopping(self):
        """Whether the connected adapter's gateway is stopping (hermes-host.md §19.10): a daemon
        that exits then (systemd signals the whole control group) is not respawned."""
        adapter = self.adapter
        return adapter is not None and bool(getattr(adapter, "_gateway_stopping", lambda: False)())

    def _crashed(self, _daemon):
        """Counts an unexpected exit (reader thread; never takes `lock`, which a spawn waiting
        for its hello may hold); starts the background respawn, or declares a crash loop. An exit
        while the gateway stops is neither counted nor respawned."""
        if self._gateway_stopping():
            log.info("canon-hermes daemon exited while the gateway stops; not respawned")
            return
        n = self._count_exit()
        log.warning("canon-hermes daemon exited (%d exit(s) in %ds)", n, CRASH_WINDOW)
        adapter = self.adapter
        if adapter is not None and self.halted:
            adapter._crash_loop()
        elif adapter is not None:
            with self.crash_lock:
                if self.respawning:  # the running loop takes this exit over
                    return
                self.respawning = True
            threading.Thread(target=self._respawn_loop, args=(n,), daemon=True).start()

    def _respawn_loop(self, n):
        """Respawns the child after the n-th exit's backoff, and again on the schedule after each
        failed attempt (Canon unreachable at the resync, a hello that timed out): no inbound
        message can come while no child runs, so nothing else would ever try again. A failed
        attempt counts toward the crash loop like an exit, unless the new child's own exit was
        counted already (hermes-host.md §19.10)."""
        try:
            while True:
                time.sleep(BACKOFF[min(n, len(BACKOFF)) - 1])
                if self.adapter is None or self.halted or self._gateway_stopping():
                    return
                exits = self.exits
                try:
                    self.get()
                except Exception as exc:
                    log.warning("canon-hermes daemon respawn failed: %s", exc)
                    n = self._count_exit() if self.exits == exits else len(self.crashes)
                else:
                    with self.crash_lock:
                        if self.exits == exits:  # up; an exit from now on starts a new loop
                            self.respawning = False
                            return
                    n = len(self.crashes)  # the new child exited already; its exit is ours
                adapter = self.adapter
                if adapter is not None and self.halted:
                    log.warning("canon-hermes daemon keeps exiting: %d exit(s) or failed respawn(s) in %ds",
                                n, CRASH_WINDOW)
                    adapter._crash_loop()
                    return
        finally:
            with self.crash_lock:
                self.respawning = False

    def stop(self):
        with self.lock:
            d, self.child, self.adapter = self.child, None, None
        return d


SUPERVISOR = Supervisor()  # survives re-registration (hermes-host.md §2.5): one child per process


async def call(kind, body):
    """`kind` on the live child (spawned when needed) from the gateway loop, with its timeout."""
    return await (await SUPERVISOR.aget()).acall(kind, body, TIMEOUTS[kind])


async def call_resent(kind, body):
    """`call`, sent again to the respawned child each time its daemon exits before answering, as
    long as the supervisor respawns: at most `CRASH_LIMIT` attempts (that many exits halt it as a
    crash loop, whose refusal is raised) and never while the gateway stops. For requests whose
    repeat is safe because the respawned daemon was resynced with what they need (an edit
    carries the whole text, a final lands on its operation-bound id, a turn's start and
    completion name their event). One resend was not enough: a daemon killed again while it
    delivered the resent final lost the answer and left the Canon turn open for good."""
    for attempt in range(1, CRASH_LIMIT + 1):
        try:
            return await call(kind, body)
        except DaemonError as exc:
            if exc.code != DAEMON_EXITED or attempt == CRASH_LIMIT or SUPERVISOR._gateway_stopping():
                raise
            log.info("canon-hermes: %s cut off by a daemon exit; sending it again (attempt %d)",
                     kind, attempt + 1)
