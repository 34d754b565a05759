"""Canon platform for Hermes Agent: a thin forwarder to `canon-hermes serve --stdio`.

Every gateway call becomes one JSON-lines frame to the Rust daemon (hermes-host.md §19); the
daemon's requests become Hermes calls. All Canon logic lives in the daemon; this module only
holds what needs Hermes objects: the adapter, the busy seam (§12.3) and the child supervisor
(§19.10). Standard library only.
"""

import asyncio
import concurrent.futures
import contextlib
import hashlib
import importlib.metadata
import itertools
import json
import logging
import mimetypes
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

PROTOCOL = 1
AUDITED_HERMES = "0.19.0"
AUDITED_PYTHON = "3.11"
PLATFORM = "canon"
MULTIPLEX_MESSAGE = (
    "Canon cannot start while Hermes gateway.multiplex_profiles is enabled. The Canon adapter "
    "still uses process-global profile, credential, and hook state, so multiplexing could cross "
    "profile boundaries. Set gateway.multiplex_profiles: false and run one Hermes gateway "
    "process per Canon profile."
)
MULTIPLEX_UNKNOWN = (
    "Canon could not verify whether the Hermes gateway is multiplexing profiles, "
    "so startup was refused."
)
CRASH_LOOP = "canon-hermes daemon keeps exiting; see gateway.log"
BACKOFF = (0.5, 1, 2, 4, 8, 16, 30)  # seconds before the n-th background respawn (§19.10)
CRASH_LIMIT, CRASH_WINDOW = 5, 300  # that many exits within that many seconds = crash loop
INTENTS = ("queue", "interrupt", "interleave", "stop")
OGG = {"audio/ogg": ".ogg", "audio/opus": ".ogg"}  # Hermes' transcription refuses .oga and .opus
APPROVAL_WORDS = frozenset((  # [parity] plain-text approval answers that bypass routing (§12.3)
    "approve", "yes", "ok", "okay", "confirm", "y", "\U0001f44d", "deny", "no", "reject", "cancel",
    "n", "\U0001f44e", "always", "approve always", "always approve", "session", "approve session",
    "session approve"))
RUNNER_ATTRS = ("_queue_or_replace_pending_event", "_running_agents", "_is_user_authorized",
                "_agent_has_active_subagents", "_session_has_compression_in_flight", "_draining",
                "_queued_events", "_promote_queued_event", "_queue_depth")
CTX_VARS = ("platform", "chat_id", "chat_name", "thread_id", "user_id", "user_name",
            "session_key", "session_id", "message_id", "profile")

log = logging.getLogger("canon_hermes")
daemon_log = logging.getLogger("canon_hermes.daemon")
HERE = Path(__file__).resolve().parent


def _manifest():
    path = HERE / "manifest.json"
    raw = path.read_bytes() if path.exists() else b"{}"
    return json.loads(raw or b"{}"), hashlib.sha256(raw).hexdigest()


MANIFEST, MANIFEST_SHA256 = _manifest()


def hermes_version():
    try:
        return importlib.metadata.version("hermes-agent")
    except importlib.metadata.PackageNotFoundError:
        return "none"


def host_refusal():
    """The refusal text when this host is outside the audited pair, else None."""
    py = "%d.%d.%d" % sys.version_info[:3]
    hermes = hermes_version()
    if hermes != AUDITED_HERMES or not py.startswith(AUDITED_PYTHON + "."):
        return "Canon requires hermes-agent %s on Python %s; found %s on %s" % (
            AUDITED_HERMES, AUDITED_PYTHON, hermes, py)
    return None


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
    """The task-local turn context, read in the calling thread/task (§19.6)."""
    from gateway.session_context import get_session_env
    return {name: get_session_env("HERMES_SESSION_" + name.upper(), "") or None for name in CTX_VARS}


def binary():
    found = os.environ.get("CANON_HERMES_BIN") or MANIFEST.get("binary") or shutil.which("canon-hermes")
    if not found:
        raise RuntimeError("canon-hermes binary not found (set CANON_HERMES_BIN or put it on PATH)")
    return found


class DaemonError(Exception):
    def __init__(self, code, message, retryable=False):
        super().__init__(message)
        self.code, self.retryable = code, retryable

    @classmethod
    def of(cls, err, default="internal"):
        return cls(err.get("code", default), err.get("message", ""), bool(err.get("retryable")))


EXITED = {"code": "daemon_exited", "message": "canon-hermes daemon exited"}
RESENDABLE = ("adapter.send", "adapter.edit")  # idempotent after a respawn (see `_forward`)


class Daemon:
    """One `canon-hermes serve --stdio` child: writer, reader and stderr threads (§19.3, §19.4)."""

    def __init__(self, on_exit=None):
        home = os.environ.get("HERMES_HOME") or str(Path.home() / ".hermes")
        env = dict(os.environ, HERMES_HOME=home, CANON_HERMES_SHIM_PROTOCOL=str(PROTOCOL),
                   CANON_HERMES_PARENT_PID=str(os.getpid()))
        self.proc = subprocess.Popen([binary(), "serve", "--stdio"], cwd=home, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.ids, self.pending, self.lock = itertools.count(1), {}, threading.Lock()
        self.out = queue.Queue(maxsize=1024)
        self.handler = None  # callable(frame) for daemon-originated frames
        self.dead = self.closing = False
        self.on_exit = on_exit  # called on an unexpected exit
        for target in (self._write_loop, self._read_loop, self._stderr_loop):
            threading.Thread(target=target, daemon=True, name="canon-hermes-" + target.__name__).start()
        try:
            self.hello = self.call("hello", {
                "protocols": [PROTOCOL], "manifest_sha256": MANIFEST_SHA256,
                "shim_version": MANIFEST.get("binary_version", ""),
                "binary_version": MANIFEST.get("binary_version", ""),
                "hermes_version": hermes_version(), "python_version": "%d.%d.%d" % sys.version_info[:3],
                "pid": os.getpid(), "hermes_home": home, "profile_name": None,
                "multiplex_active": _multiplex_flag(), "seams": {"busy_handler": False, "dequeue_ack": False},
            }, 10)
        except Exception:
            self.close()
            raise

    def alive(self):
        return not self.dead and self.proc.poll() is None

    def post(self, frame):
        try:
            self.out.put_nowait(frame)
            return True
        except queue.Full:
            return False

    def request(self, kind, body):
        fut, rid = concurrent.futures.Future(), "s:%d" % next(self.ids)
        with self.lock:
            if not self.dead:
                self.pending[rid] = fut
        if self.dead:
            fut.set_exception(DaemonError.of(EXITED))
        elif not self.post({"v": PROTOCOL, "type": kind, "id": rid, "body": body}):
            with self.lock:
                self.pending.pop(rid, None)
            fut.set_exception(DaemonError("backpressure", "canon-hermes daemon busy", True))
        return fut

    def call(self, kind, body, timeout):
        try:
            return self.request(kind, body).result(timeout)
        except concurrent.futures.TimeoutError:
            raise DaemonError("timeout", "canon-hermes daemon timed out") from None

    async def acall(self, kind, body, timeout):
        try:
            return await asyncio.wait_for(asyncio.wrap_future(self.request(kind, body)), timeout)
        except asyncio.TimeoutError:
            raise DaemonError("timeout", "canon-hermes daemon timed out") from None

    def notify(self, kind, body):
        self.post({"v": PROTOCOL, "type": kind, "body": body})

    def respond(self, rid, kind, body=None, error=None):
        tail = {"body": body or {}} if error is None else {"error": error}
        self.post(dict({"v": PROTOCOL, "id": rid, "re": kind, "ok": error is None}, **tail))

    def close(self):
        """stdin EOF, then SIGTERM, then SIGKILL of this child only (§19.11)."""
        self.closing = True
        self.post(None)
        for wait, escalate in ((5, self.proc.terminate), (2, self.proc.kill)):
            try:
                self.proc.wait(wait)
                return
            except subprocess.TimeoutExpired:
                escalate()

    def _write_loop(self):
        while True:
            frame = self.out.get()
            try:
                if frame is None:
                    self.proc.stdin.close()
                    return
                self.proc.stdin.write(json.dumps(frame, separators=(",", ":")).encode() + b"\n")
                self.proc.stdin.flush()
            except (OSError, ValueError):
                return

    def _read_loop(self):
        for line in self.proc.stdout:
            try:
                frame = json.loads(line)
            except ValueError:
                daemon_log.warning("non-JSON line on daemon stdout")
                continue
            if "ok" in frame and "id" in frame:
                with self.lock:
                    fut = self.pending.pop(frame["id"], None)
                if fut is not None and not fut.done() and frame["ok"]:
                    fut.set_result(frame.get("body") or {})
                elif fut is not None and not fut.done():
                    fut.set_exception(DaemonError.of(frame.get("error") or {}))
            elif self.handler is not None:
                self.handler(frame)
            elif "id" in frame:
                self.respond(frame["id"], frame.get("type"), error={
                    "code": "not_connected", "message": "no adapter", "retryable": True})
        with self.lock:  # EOF: the child is gone (§19.10)
            self.dead, pending, self.pending = True, self.pending, {}
        self.post(None)
        if self.on_exit is not None and not self.closing:  # before a waiting hello can close()
            self.on_exit(self)
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(DaemonError.of(EXITED))

    def _stderr_loop(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip()
            level = logging.getLevelName((line.split() or [""])[0].upper())  # `LEVEL target: message`
            daemon_log.log(level if isinstance(level, int) else logging.INFO, "%s", line)


class Supervisor:
    """The one child of this process: lazy spawn, respawn with backoff, resync (§19.3, §19.10)."""

    def __init__(self):
        self.child = None  # published only once hello (and, with an adapter, the resync) succeeded
        self.lock = threading.RLock()
        self.adapter = None  # the connected adapter, if any
        self.crashes, self.halted, self.crash_lock = [], False, threading.Lock()

    def peek(self):
        d = self.child
        return d if d is not None and d.alive() else None

    def get(self):
        """The live child, spawned (and the connected adapter resynced) when needed. Blocking."""
        with self.lock:
            if self.peek() is not None:
                return self.child
            if self.halted:
                raise DaemonError("daemon_crash_loop", CRASH_LOOP, True)
            respawn, adapter = self.child is not None, self.adapter
            d = Daemon(self._crashed)
            if respawn and adapter is not None:
                try:
                    adapter._resync(d)
                except Exception:
                    d.close()
                    raise
            self.child = d
            return d

    async def aget(self):
        return self.peek() or await asyncio.to_thread(self.get)

    def _crashed(self, _daemon):
        """Counts an unexpected exit (reader thread; never takes `lock`, which a spawn waiting
        for its hello may hold); schedules a background respawn, or declares a crash loop."""
        now = time.monotonic()
        with self.crash_lock:
            self.crashes = [t for t in self.crashes if now - t < CRASH_WINDOW] + [now]
            adapter, n = self.adapter, len(self.crashes)
            self.halted = n >= CRASH_LIMIT
        log.warning("canon-hermes daemon exited (%d exit(s) in %ds)", n, CRASH_WINDOW)
        if adapter is not None and self.halted:
            adapter._crash_loop()
        elif adapter is not None:
            threading.Thread(target=self._respawn_later, args=(BACKOFF[min(n, len(BACKOFF)) - 1],),
                             daemon=True).start()

    def _respawn_later(self, delay):
        time.sleep(delay)
        if self.adapter is not None and not self.halted:
            try:
                self.get()
            except Exception as exc:
                log.warning("canon-hermes daemon respawn failed: %s", exc)

    def stop(self):
        with self.lock:
            d, self.child, self.adapter = self.child, None, None
        return d


SUPERVISOR = Supervisor()  # survives re-registration (§2.5): one child per process


async def _call(kind, body, timeout):
    return await (await SUPERVISOR.aget()).acall(kind, body, timeout)


def _send_result(body):
    from gateway.platforms.base import SendResult
    return SendResult(success=bool(body.get("success")), message_id=body.get("message_id"),
                      error=body.get("error"), retryable=bool(body.get("retryable")),
                      raw_response=body.get("raw_response"))


def _hitl_settings():
    """Hermes' approval mode and timeouts for `adapter.connect.host` (§19.6, Q10)."""
    out = {}
    try:
        from tools import approval
        out["approvals_mode"] = approval._get_approval_mode()
        out["approvals_timeout_s"] = float(approval._get_approval_timeout())
    except Exception as exc:
        log.debug("canon-hermes: approval settings unavailable: %s", exc)
    try:
        from tools.clarify_gateway import get_clarify_timeout
        out["clarify_timeout_s"] = float(get_clarify_timeout())
    except Exception as exc:
        log.debug("canon-hermes: clarify timeout unavailable: %s", exc)
    return out


def _intent(event):
    value = getattr(event, "delivery_intent", None) or (event.metadata or {}).get("deliveryIntent")
    value = str(value or "").strip().lower()
    return value if value in INTENTS else None


def _summary(event):
    """EventSummary (§19.6)."""
    source, mtype = event.source, event.message_type
    return {"chat_id": source.chat_id, "chat_type": source.chat_type, "user_id": source.user_id,
            "user_name": source.user_name, "message_id": event.message_id,
            "message_type": getattr(mtype, "value", mtype), "internal": bool(event.internal),
            "text_len": len(event.text or ""), "delivery_intent": _intent(event)}


def _queued_disposition(event):
    raw = event.raw_message if isinstance(event.raw_message, dict) else {}
    metas = (event.metadata, raw.get("metadata"), (raw.get("message") or {}).get("metadata"))
    return any(isinstance(m, dict) and m.get("inboundDisposition") == "queued" for m in metas)


def _cache_media(media):
    """Moves the daemon's hand-off files (0600, under <CANON_HOME>/tmp) into Hermes' cache with the
    helper for their kind (§19.7, Q8): returns (paths, MIME types) without the items Hermes
    refuses; every temp file is deleted either way."""
    from gateway.platforms import base
    paths, types = [], []
    for item in media:
        path, kind, name, mime = (item.get(k) or "" for k in ("path", "kind", "file_name", "mime_type"))
        try:
            data = Path(path).read_bytes()
            if kind == "document":
                paths.append(base.cache_document_from_bytes(data, name or "document"))
            else:  # cache_image_from_bytes, cache_audio_from_bytes, cache_video_from_bytes
                helper = getattr(base, "cache_%s_from_bytes" % kind)
                ext = Path(name).suffix.lower() or OGG.get(mime) or mimetypes.guess_extension(mime)
                paths.append(helper(data, ext) if ext else helper(data))
            types.append(mime)
        except Exception as exc:  # its message may quote the bytes: log the type only
            log.warning("canon-hermes: inbound %s attachment dropped (%s)", kind, type(exc).__name__)
        with contextlib.suppress(OSError):
            os.unlink(path)
    return paths, types


def _done(kind, then):
    """A done-callback (reader thread): logs a failed `kind`, else hands its result to `then`."""
    def callback(fut):
        if fut.exception():
            log.warning("canon-hermes: %s failed: %s", kind, fut.exception())
        else:
            then(fut.result())
    return callback


def _make_adapter_class():
    from gateway.config import Platform
    from gateway.platforms.base import BasePlatformAdapter, MessageEvent, MessageType
    from gateway.session import build_session_key

    limits = MANIFEST.get("adapter", {})
    instances = itertools.count(1)

    class CanonAdapter(BasePlatformAdapter):
        MAX_MESSAGE_LENGTH = limits.get("max_message_length", 3900)
        REQUIRES_EDIT_FINALIZE = True
        splits_long_messages = True
        name = "Canon"
        authorization_is_upstream = True
        message_len_fn = staticmethod(lambda text: len(text.encode("utf-8")))

        def __init__(self, config):
            if multiplex_active():
                raise RuntimeError(MULTIPLEX_MESSAGE)
            super().__init__(config, Platform(PLATFORM))
            self._instance, self._loop = next(instances), None
            self._runner = self._delegate = None
            self._routing = False  # every runner attribute of §12.3 verified
            self._open = {}  # session_key → open turn, resent by `resync` (§19.10)
            self._runs = {}  # session_key → event_ref of the Canon turn Hermes is running
            self._cut = set()  # sessions whose running agent this adapter interrupted

        def streaming_overflow_limit(self):
            return limits.get("streaming_overflow_limit", 60800)

        # ----- connection -----

        def _connect_body(self, is_reconnect):
            return {"is_reconnect": is_reconnect, "adapter_instance": self._instance,
                    "config": {"extra": dict(getattr(self.config, "extra", None) or {}),
                               "typing_indicator": getattr(self.config, "typing_indicator", True)},
                    "host": dict(_hitl_settings(), streaming_enabled=True,
                                 busy_input_mode=getattr(self._runner, "_busy_input_mode", None)),
                    "seams": {"busy_handler": self._routing, "dequeue_ack": self._wrapper_owned()}}

        async def connect(self, *, is_reconnect=False):
            self._loop = asyncio.get_running_loop()
            sup = SUPERVISOR
            with sup.crash_lock:  # a fresh adapter starts a fresh crash-loop count
                sup.halted, sup.crashes, sup.adapter = False, [], None
            try:
                body = await asyncio.to_thread(self._attach, await sup.aget(), is_reconnect)
            except DaemonError as exc:
                self._set_fatal_error(exc.code, str(exc), retryable=exc.retryable)
                return False
            except Exception as exc:
                self._set_fatal_error("connect_failed", str(exc), retryable=False)
                return False
            if body.get("agent_name"):
                os.environ["HERMES_CANON_AGENT_NAME"] = body["agent_name"]
            sup.adapter = self
            self._mark_connected()
            return True

        def _attach(self, d, is_reconnect):
            """Routes the child's frames here and sends `adapter.connect` (blocking)."""
            d.handler = lambda frame: self._on_frame(d, frame)
            body = d.call("adapter.connect", self._connect_body(is_reconnect), 28)
            if not body.get("connected"):
                raise DaemonError.of(body.get("fatal") or {}, "connect_failed")
            return body

        def _resync(self, d):
            """After a respawn (worker thread): reconnect, then hand the open turns over."""
            self._attach(d, True)
            turns = list(self._open.values())
            depths = {t["session_key"]: self._depth(t["session_key"]) for t in turns}
            d.call("resync", {"adapter_connected": True, "open_turns": turns, "queue_depths": depths}, 30)
            log.info("canon-hermes daemon respawned; resynced %d open turn(s)", len(turns))

        def _crash_loop(self):
            def fatal():
                self._set_fatal_error("daemon_crash_loop", CRASH_LOOP, retryable=True)
                asyncio.ensure_future(self._notify_fatal_error())
            if self._loop is not None:
                self._loop.call_soon_threadsafe(fatal)

        async def disconnect(self):
            d = SUPERVISOR.stop() if SUPERVISOR.adapter in (self, None) else None
            if d is not None and d.alive():
                for kind, body, timeout in (("adapter.disconnect", {"adapter_instance": self._instance}, 10),
                                            ("shutdown", {"reason": "disconnect"}, 5)):
                    try:
                        await d.acall(kind, body, timeout)
                    except DaemonError:
                        pass
                await asyncio.to_thread(d.close)
            self._mark_disconnected()

        # ----- gateway → daemon -----

        async def _forward(self, kind, body, timeout):
            # A send or edit cut off by a daemon crash is sent once more to the respawned,
            # resynced child: an edit carries the whole text, and a final lands on the same
            # operation-bound id. Failing it instead would flip Hermes' stream consumer into
            # tail-only fallback for the rest of the answer (hermes-host.md §10).
            for attempt in (1, 2):
                try:
                    return _send_result(await _call(kind, body, timeout))
                except DaemonError as exc:
                    if attempt == 1 and exc.code == "daemon_exited" and kind in RESENDABLE:
                        continue
                    return _send_result({"error": str(exc), "retryable": exc.retryable})

        async def send(self, chat_id, content, reply_to=None, metadata=None):
            return await self._forward("adapter.send", {
                "chat_id": chat_id, "content": content, "reply_to": reply_to,
                "metadata": metadata, "ctx": turn_ctx()}, 120)

        async def _media(self, op, chat_id, caption, reply_to, metadata, kwargs, **fields):
            # hermes-host.md §19.6: the daemon reads the file (same user) and uploads it.
            body = {"op": op, "chat_id": chat_id, "caption": caption, "reply_to": reply_to,
                    "metadata": metadata, "ctx": turn_ctx()}
            body.update({k: v for k, v in fields.items() if v is not None})
            if isinstance(kwargs.get("mime_type"), str):
                body["mime_type"] = kwargs["mime_type"]
            duration = kwargs.get("duration")
            if isinstance(duration, (int, float)) and not isinstance(duration, bool) and duration >= 0:
                body["duration_ms"] = int(duration * 1000)
            return await self._forward("adapter.send_media", body, 300)

        async def send_image(self, chat_id, image_url, caption=None, reply_to=None, metadata=None):
            return await self._media("image_url", chat_id, caption, reply_to, metadata, {}, url=image_url)

        async def send_image_file(self, chat_id, image_path, caption=None, reply_to=None, metadata=None, **kwargs):
            return await self._media("image_file", chat_id, caption, reply_to, metadata, kwargs,
                                     path=str(image_path))

        async def send_voice(self, chat_id, audio_path, caption=None, reply_to=None, metadata=None, **kwargs):
            return await self._media("voice", chat_id, caption, reply_to, metadata, kwargs, path=str(audio_path))

        async def send_video(self, chat_id, video_path, caption=None, reply_to=None, metadata=None, **kwargs):
            return await self._media("video", chat_id, caption, reply_to, metadata, kwargs, path=str(video_path))

        async def send_document(self, chat_id, file_path, caption=None, file_name=None, reply_to=None,
                                metadata=None, **kwargs):
            return await self._media("document", chat_id, caption, reply_to, metadata, kwargs,
                                     path=str(file_path), file_name=file_name)

        async def edit_message(self, chat_id, message_id, content, *, finalize=False, metadata=None):
            return await self._forward("adapter.edit", {
                "chat_id": chat_id, "message_id": message_id, "content": content,
                "finalize": finalize, "metadata": metadata, "ctx": turn_ctx()}, 120)

        async def send_clarify(self, chat_id, question, choices, clarify_id, session_key, metadata=None):
            return await self._forward("adapter.send_clarify", {
                "chat_id": chat_id, "question": question, "choices": list(choices or []),
                "clarify_id": clarify_id, "session_key": session_key, "metadata": metadata,
                "ctx": turn_ctx()}, 14)

        async def send_exec_approval(self, chat_id, command, session_key, description="dangerous command",
                                     metadata=None, allow_permanent=True, smart_denied=False, **kwargs):
            body = {"chat_id": chat_id, "command": command, "session_key": session_key,
                    "description": description, "metadata": metadata, "allow_permanent": bool(allow_permanent),
                    "smart_denied": bool(smart_denied), "ctx": turn_ctx()}
            if kwargs.get("allow_session") is not None:  # hermes-host.md Q2 (newer hosts)
                body["allow_session"] = bool(kwargs["allow_session"])
            return await self._forward("adapter.send_exec_approval", body, 14)

        def _note(self, kind, body):
            d = SUPERVISOR.peek()
            if d is not None:
                d.notify(kind, body)

        async def send_typing(self, chat_id, metadata=None):
            self._note("typing", {"chat_id": chat_id, "on": True, "metadata": metadata})

        async def stop_typing(self, chat_id, metadata=None):
            self._note("typing", {"chat_id": chat_id, "on": False, "metadata": metadata})

        async def get_chat_info(self, chat_id):
            try:
                return await _call("adapter.chat_info", {"chat_id": chat_id}, 10)
            except DaemonError:
                return {"name": chat_id, "type": "dm", "id": chat_id}

        def _key(self, source):
            extra = getattr(self.config, "extra", None) or {}
            return build_session_key(source, extra.get("group_sessions_per_user", True),
                                     extra.get("thread_sessions_per_user", False))

        @staticmethod
        def _ref(event):
            return getattr(event, "_canon_ref", None) or "shim:%x" % id(event)

        def _track(self, key, ref, summary, started, body):
            """Keeps the turn Canon opened for `ref` for `resync` (§19.10) while it still runs."""
            if body.get("turn_id") and self._runs.get(key) == ref:
                self._open[key] = {"event_ref": ref, "session_key": key, "turn_id": body["turn_id"],
                                   "event": summary, "started_at_ms": started}

        def _restore_noop(self, event):
            """Hermes' no-op pass for a message that arrived during its startup restore (§9.5): the
            runner queues the event and replays the same object later, marked as a replay."""
            runner = getattr(self, "gateway_runner", None) or self._runner
            return bool(getattr(runner, "_startup_restore_in_progress", False)) and not event.internal \
                and not getattr(event, "_hermes_startup_restore_replay", False)

        async def on_processing_start(self, event):
            if self._restore_noop(event):  # no Canon turn; the replay opens the real one
                event._canon_restore_noop = True
                return
            key, ref, summary = self._key(event.source), self._ref(event), _summary(event)
            started = int(time.time() * 1000)
            self._runs[key] = ref
            self._cut.discard(key)
            body = await _call("turn.start", {"event_ref": ref, "session_key": key, "event": summary,
                                              "queue_depth": self._depth(key)}, 30)
            self._track(key, ref, summary, started, body)

        async def on_processing_complete(self, event, outcome):
            if vars(event).pop("_canon_restore_noop", False):  # the no-op pass's end
                return
            key = self._key(event.source)
            self._open.pop(key, None)
            self._runs.pop(key, None)
            await _call("turn.complete", {"event_ref": self._ref(event), "session_key": key,
                                          "outcome": getattr(outcome, "value", str(outcome)),
                                          "queue_depth": self._depth(key)}, 600)

        # ----- busy seam (§12.3) -----

        def _depth(self, key):
            """Head slot + the runner's FIFO overflow."""
            queued = getattr(self._runner, "_queued_events", None) or {}
            return (1 if key in self._pending_messages else 0) + len(queued.get(key) or ())

        def _drop_queue(self, key):
            self._pending_messages.pop(key, None)
            (getattr(self._runner, "_queued_events", None) or {}).pop(key, None)

        def _wrapper_owned(self):
            current = getattr(self._runner, "_promote_queued_event", None)
            return getattr(current, "_canon_owner", None) is self

        def set_busy_session_handler(self, handler):
            old = self._runner
            if old is not None and self._wrapper_owned():  # restore only our own wrapper
                old._promote_queued_event = old._promote_queued_event._canon_original
            runner = getattr(handler, "__self__", None)
            self._delegate, self._runner = handler, runner
            missing = [a for a in RUNNER_ATTRS if not hasattr(runner, a)] if runner is not None else ["runner"]
            try:
                import gateway.run as run
                from tools.approval import has_blocking_approval
                self._sentinel, self._blocking = run._AGENT_PENDING_SENTINEL, has_blocking_approval
            except Exception as exc:
                missing.append(str(exc))
            self._routing = handler is not None and not missing
            if handler is not None and missing:
                log.warning("Canon delivery-intent routing disabled: missing %s", ", ".join(missing))
            if self._routing:
                self._install_dequeue_ack(runner)
            super().set_busy_session_handler(self._busy if handler is not None else None)

        def _install_dequeue_ack(self, runner):
            current = runner._promote_queued_event
            original = getattr(current, "_canon_original", current)  # a newer adapter replaces, never stacks

            def promote(*args, **kwargs):
                result = original(*args, **kwargs)
                target = kwargs.get("adapter", args[1] if len(args) > 1 else None)
                if result is not None and target is self and not runner._draining:
                    self._dequeued(kwargs.get("session_key", args[0] if args else None), result)
                return result
            promote._canon_original, promote._canon_owner = original, self
            runner._promote_queued_event = promote

        def _dequeued(self, key, event):
            """The runner dequeued `event` to run next inside the same run (§12.2): a new Canon
            turn (turns.md §10.3, OQ-18); the daemon places the boundary. Never blocks.
            `interrupted`: this adapter interrupted the running agent, whose turn is cancelled."""
            interrupted, ref, summary = key in self._cut, self._ref(event), _summary(event)
            self._cut.discard(key)
            self._open.pop(key, None)  # until the daemon answers the follow-up's turn id
            self._runs[key], started = ref, int(time.time() * 1000)
            d = SUPERVISOR.peek()
            if d is None:
                log.warning("canon-hermes: daemon down; turn boundary for %s lost", key)
                return
            body = {"event_ref": ref, "session_key": key, "event": summary, "phase": "queue_dequeue",
                    "queue_depth": self._depth(key), "interrupted": interrupted,
                    "absorbed_refs": list(getattr(event, "_canon_absorbed_queued_ids", ()))}
            d.request("turn.accepted", body).add_done_callback(_done(
                "turn.accepted", lambda result: self._track(key, ref, summary, started, result)))

        def _delegate_for(self, event, key):
            """The §12.3 step-1 conditions under which the runner's own handler decides."""
            if not self._routing or event.internal or event.message_type == MessageType.COMMAND:
                return True
            try:
                if self._runner._draining or not self._runner._is_user_authorized(event.source):
                    return True
                return (event.text or "").strip().lower() in APPROVAL_WORDS and self._blocking(key)
            except Exception:
                return True

        async def _busy(self, event, key):
            if self._delegate_for(event, key):
                return bool(await self._delegate(event, key)) if self._delegate else False
            runner, intent = self._runner, _intent(event) or "queue"
            agent = runner._running_agents.get(key)
            live = agent is not None and agent is not self._sentinel
            if intent == "interrupt":
                try:
                    if runner._agent_has_active_subagents(agent) or \
                            await runner._session_has_compression_in_flight(key):
                        intent = "queue"
                except Exception:
                    intent = "queue"
            if intent in ("stop", "interrupt"):
                if intent == "stop":
                    self._drop_queue(key)
                runner._queue_or_replace_pending_event(key, event)
                if live:
                    self._cut.add(key)
                    agent.interrupt(event.text)
                return self._queue_changed(key, event)
            if intent == "interleave":
                try:
                    text = (event.text or "").strip()
                    if text and live and hasattr(agent, "steer") and agent.steer(text):
                        self._note("turn.steered", {"session_key": key, "chat_id": event.source.chat_id})
                        return True
                except Exception as exc:
                    log.warning("canon-hermes: steer failed: %s", exc)
            runner._queue_or_replace_pending_event(key, event)
            head = self._pending_messages.get(key)
            overflow = (runner._queued_events or {}).get(key) or ()
            merged = head is not None and head is not event and all(e is not event for e in overflow)
            if merged and _queued_disposition(event):
                head._canon_absorbed_queued_ids = getattr(head, "_canon_absorbed_queued_ids", []) + [self._ref(event)]
            return self._queue_changed(key, event)

        def _queue_changed(self, key, event):
            self._note("queue.depth", {"session_key": key, "chat_id": event.source.chat_id,
                                       "depth": self._depth(key)})
            return True

        # ----- daemon → gateway (frames arrive on the reader thread) -----

        def _on_frame(self, d, frame):
            kind, rid, body = frame.get("type"), frame.get("id"), frame.get("body") or {}
            if self._loop is not None:
                asyncio.run_coroutine_threadsafe(self._dispatch(d, kind, rid, body), self._loop)
            elif rid:
                d.respond(rid, kind, error={"code": "not_connected", "message": "no loop", "retryable": True})

        async def _dispatch(self, d, kind, rid, body):
            try:
                result = await self._handle(kind, body)
            except Exception as exc:
                log.exception("canon-hermes: %s failed", kind)
                if rid:
                    d.respond(rid, kind, error={"code": "internal", "message": str(exc), "retryable": False})
                return
            if rid and result is None:
                d.respond(rid, kind, error={"code": "unknown_type", "message": kind, "retryable": False})
            elif rid:
                d.respond(rid, kind, result)

        async def _handle(self, kind, body):
            if kind == "inbound.message":
                media = await asyncio.to_thread(_cache_media, body["event"].get("media") or [])
                await self.handle_message(self._event(body["event"], body["event_ref"], *media))
                return {"accepted": True}
            if kind == "control.signal":
                await self._control(body)
                return {}
            if kind == "host.queue_depth":
                return {"depth": self._depth(body["session_key"])}
            if kind == "approval.resolve":
                from tools.approval import resolve_gateway_approval
                count = resolve_gateway_approval(body["session_key"], body["choice"], resolve_all=False)
                return {"resolved": int(count or 0)}
            if kind == "clarify.resolve":
                from tools.clarify_gateway import resolve_gateway_clarify
                return {"resolved": bool(resolve_gateway_clarify(body["clarify_id"], body["response"]))}
            if kind == "typing.pause":
                self.pause_typing_for_chat(body["chat_id"])
            elif kind == "typing.resume":
                self.resume_typing_for_chat(body["chat_id"])
            elif kind == "adapter.fatal":
                self._set_fatal_error(body.get("code"), body.get("message"), retryable=bool(body.get("retryable")))
                await self._notify_fatal_error()
            elif kind == "adapter.status":
                (self._mark_connected if body.get("connected") else self._mark_disconnected)()
            return None

        async def _control(self, body):
            """A Canon runtime signal as a synthetic `/stop` or `/new` (§12.3, §19.7)."""
            signal = body.get("signal")
            event = self._event({
                "text": "/new" if signal == "new_session" else "/stop", "raw": {"canonSignal": signal},
                "message_id": "canon-control:%s:%s" % (signal, time.time()),
                "source": {"chat_id": body["chat_id"], "chat_name": body.get("chat_name"),
                           "chat_type": body.get("chat_type"), "user_name": "Canon",
                           "user_id": body.get("updated_by") or "canon-runtime-control"}}, None)
            key = self._key(event.source)
            if signal == "stop_and_drop":
                self._drop_queue(key)
            await self.handle_message(event)
            if signal == "stop_and_drop":
                self._drop_queue(key)

        def _event(self, ev, ref, media_urls=(), media_types=()):
            src = ev.get("source") or {}
            source = self.build_source(chat_id=src.get("chat_id"), chat_name=src.get("chat_name"),
                                       chat_type=src.get("chat_type") or "dm", user_id=src.get("user_id"),
                                       user_name=src.get("user_name"), thread_id=src.get("thread_id"))
            try:
                mtype = MessageType(ev.get("message_type") or "text")
            except ValueError:
                mtype = MessageType.TEXT
            meta = dict(ev.get("metadata") or {})
            event = MessageEvent(text=ev.get("text") or "", message_type=mtype, source=source,
                                 raw_message=ev.get("raw"), message_id=ev.get("message_id"),
                                 reply_to_message_id=ev.get("reply_to_message_id"),
                                 media_urls=list(media_urls), media_types=list(media_types),
                                 channel_prompt=ev.get("channel_prompt"), channel_context=ev.get("channel_context"),
                                 internal=bool(ev.get("internal")), metadata=meta)
            event._canon_ref, event.delivery_intent = ref, meta.get("deliveryIntent")
            return event

    return CanonAdapter


def _hook(kind):
    def forward(**kwargs):
        ctx, d = turn_ctx(), SUPERVISOR.peek()
        if ctx.get("platform") != PLATFORM or d is None:
            return None
        body = {k: v for k, v in kwargs.items() if isinstance(v, (str, int, float, bool, dict, list, type(None)))}
        for big in ("args", "result"):
            if isinstance(body.get(big), str):
                body[big] = body[big][:16384]
        d.notify("hook." + kind, dict(body, ctx=ctx))
        return None
    return forward


def check_requirements():
    """Cheap: credentials in the environment, else the daemon's offline `probe` (§19.6)."""
    if os.environ.get("CANON_API_KEY"):
        return True
    try:
        return bool(SUPERVISOR.get().call("probe", {"config": None, "verify": False}, 5).get("configured"))
    except Exception:
        return False


async def standalone_send(pconfig, chat_id, message, *, thread_id=None, media_files=None, force_document=False):
    """Out-of-process delivery (§15): the daemon's `standalone.send`."""
    home = getattr(pconfig, "home_channel", None)
    if home is not None and not isinstance(home, dict):
        home = home.to_dict() if hasattr(home, "to_dict") else {"chat_id": getattr(home, "chat_id", None)}
    try:
        body = await _call("standalone.send", {
            "pconfig": {"extra": dict(getattr(pconfig, "extra", None) or {}), "home_channel": home},
            "chat_id": chat_id, "message": message, "thread_id": thread_id,
            "media_files": list(media_files or []), "force_document": bool(force_document)}, 120)
    except Exception as exc:
        return {"error": "Canon standalone send failed: %s" % exc}
    if body.get("success"):
        return {"success": True, "message_id": body.get("message_id")}
    return {"error": body.get("error") or "Canon standalone send failed"}


PLATFORM_DEFAULTS = {"allowed_users_env": "CANON_ALLOWED_USERS", "allow_all_env": "CANON_ALLOW_ALL_USERS",
                     "max_message_length": 3900, "cron_deliver_env_var": "CANON_HOME_CHANNEL",
                     "install_hint": "Run canon-hermes install", "platform_hint": "", "emoji": "C"}


def register(ctx):
    refusal = host_refusal()
    if refusal:
        log.error("canon-hermes: %s", refusal)
        raise RuntimeError(refusal)
    adapter_class = _make_adapter_class()
    platform = MANIFEST.get("platform", {})
    for kind in ("pre_tool_call", "post_tool_call", "subagent_stop"):
        ctx.register_hook(kind, _hook(kind))
    ctx.register_platform(
        name=PLATFORM, label=platform.get("label", "Canon"), adapter_factory=lambda cfg: adapter_class(cfg),
        check_fn=check_requirements, standalone_sender_fn=standalone_send,
        **{k: platform.get(k, v) for k, v in PLATFORM_DEFAULTS.items()})
