"""Canon platform for Hermes Agent: a thin forwarder to `canon-hermes serve --stdio`.

Every gateway call becomes one JSON-lines frame to the Rust daemon (hermes-host.md §19); the
daemon's `inbound.message` requests become Hermes `MessageEvent`s. All Canon logic lives in
the daemon; this module only holds what needs Hermes objects. Standard library only.
"""

import asyncio
import concurrent.futures
import hashlib
import importlib.metadata
import itertools
import json
import logging
import os
import queue
import shutil
import subprocess
import sys
import threading
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
    out = {}
    for name in CTX_VARS:
        value = get_session_env("HERMES_SESSION_" + name.upper(), "")
        out[name] = value or None
    return out


def binary():
    found = os.environ.get("CANON_HERMES_BIN") or MANIFEST.get("binary") or shutil.which("canon-hermes")
    if not found:
        raise RuntimeError("canon-hermes binary not found (set CANON_HERMES_BIN or put it on PATH)")
    return found


class DaemonError(Exception):
    def __init__(self, code, message, retryable=False):
        super().__init__(message)
        self.code, self.retryable = code, retryable


class Daemon:
    """One `canon-hermes serve --stdio` child: writer, reader and stderr threads."""

    def __init__(self):
        home = os.environ.get("HERMES_HOME") or str(Path.home() / ".hermes")
        env = dict(os.environ, HERMES_HOME=home, CANON_HERMES_SHIM_PROTOCOL=str(PROTOCOL),
                   CANON_HERMES_PARENT_PID=str(os.getpid()))
        self.proc = subprocess.Popen([binary(), "serve", "--stdio"], cwd=home, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.ids = itertools.count(1)
        self.pending = {}
        self.lock = threading.Lock()
        self.out = queue.Queue(maxsize=1024)
        self.handler = None  # callable(frame) for daemon-originated frames
        for target in (self._write_loop, self._read_loop, self._stderr_loop):
            threading.Thread(target=target, daemon=True, name="canon-hermes-" + target.__name__).start()
        try:
            self.hello = self._hello(home)
        except Exception:
            self.close()
            raise

    def _hello(self, home):
        return self.call("hello", {
            "protocols": [PROTOCOL], "manifest_sha256": MANIFEST_SHA256,
            "shim_version": MANIFEST.get("binary_version", ""),
            "binary_version": MANIFEST.get("binary_version", ""),
            "hermes_version": hermes_version(), "python_version": "%d.%d.%d" % sys.version_info[:3],
            "pid": os.getpid(), "hermes_home": home, "profile_name": None,
            "multiplex_active": _multiplex_flag(), "seams": {"busy_handler": False, "dequeue_ack": False},
        }, 10)

    def alive(self):
        return self.proc.poll() is None

    def post(self, frame):
        try:
            self.out.put_nowait(frame)
            return True
        except queue.Full:
            return False

    def request(self, kind, body):
        fut = concurrent.futures.Future()
        rid = "s:%d" % next(self.ids)
        with self.lock:
            self.pending[rid] = fut
        if not self.post({"v": PROTOCOL, "type": kind, "id": rid, "body": body}):
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
        frame = {"v": PROTOCOL, "id": rid, "re": kind, "ok": error is None}
        if error is None:
            frame["body"] = body or {}
        else:
            frame["error"] = error
        self.post(frame)

    def close(self):
        self.post(None)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                self.proc.wait(2)
            except subprocess.TimeoutExpired:
                self.proc.kill()

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
                if fut is None or fut.done():
                    continue
                if frame["ok"]:
                    fut.set_result(frame.get("body") or {})
                else:
                    err = frame.get("error") or {}
                    fut.set_exception(DaemonError(err.get("code", "internal"), err.get("message", ""),
                                                  bool(err.get("retryable"))))
            elif self.handler is not None:
                self.handler(frame)
            elif "id" in frame:
                self.respond(frame["id"], frame.get("type"), error={
                    "code": "not_connected", "message": "no adapter", "retryable": True})
        with self.lock:
            pending, self.pending = self.pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(DaemonError("daemon_exited", "canon-hermes daemon exited"))

    def _stderr_loop(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip()
            level = getattr(logging, line.split(" ", 1)[0].upper(), logging.INFO) if line else logging.INFO
            daemon_log.log(level if isinstance(level, int) else logging.INFO, "%s", line)


_DAEMON = None  # survives re-registration (§2.5): one child per process
_DAEMON_LOCK = threading.Lock()


def daemon():
    global _DAEMON
    with _DAEMON_LOCK:
        if _DAEMON is None or not _DAEMON.alive():
            _DAEMON = Daemon()
        return _DAEMON


def _send_result(body):
    from gateway.platforms.base import SendResult
    return SendResult(success=bool(body.get("success")), message_id=body.get("message_id"),
                      error=body.get("error"), retryable=bool(body.get("retryable")))


def _failed(exc):
    from gateway.platforms.base import SendResult
    return SendResult(success=False, error=str(exc), retryable=getattr(exc, "retryable", False))


def _summary(event, source=None):
    source = source or event.source
    mtype = getattr(event, "message_type", None)
    return {"chat_id": source.chat_id, "chat_type": source.chat_type, "user_id": source.user_id,
            "user_name": source.user_name, "message_id": event.message_id,
            "message_type": getattr(mtype, "value", mtype), "internal": bool(event.internal),
            "delivery_intent": getattr(event, "delivery_intent", None)}


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

        def __init__(self, config):
            if multiplex_active():
                raise RuntimeError(MULTIPLEX_MESSAGE)
            super().__init__(config, Platform(PLATFORM))
            self._instance = next(instances)
            self._loop = None
            self._refs = {}

        @property
        def name(self):
            return "Canon"

        @property
        def authorization_is_upstream(self):
            return True

        @property
        def message_len_fn(self):
            return lambda text: len(text.encode("utf-8"))

        def streaming_overflow_limit(self):
            return limits.get("streaming_overflow_limit", 60800)

        async def connect(self, *, is_reconnect=False):
            self._loop = asyncio.get_running_loop()
            try:
                d = await asyncio.to_thread(daemon)
                d.handler = self._on_frame
                extra = dict(getattr(self.config, "extra", None) or {})
                body = await d.acall("adapter.connect", {
                    "is_reconnect": is_reconnect, "adapter_instance": self._instance,
                    "config": {"extra": extra, "typing_indicator": getattr(self.config, "typing_indicator", True)},
                    "host": {"streaming_enabled": True},
                    "seams": {"busy_handler": False, "dequeue_ack": False}}, 28)
            except DaemonError as exc:
                self._set_fatal_error(exc.code, str(exc), retryable=exc.retryable)
                return False
            except Exception as exc:
                self._set_fatal_error("connect_failed", str(exc), retryable=False)
                return False
            if not body.get("connected"):
                fatal = body.get("fatal") or {}
                self._set_fatal_error(fatal.get("code", "connect_failed"), fatal.get("message", ""),
                                      retryable=bool(fatal.get("retryable")))
                return False
            if body.get("agent_name"):
                os.environ["HERMES_CANON_AGENT_NAME"] = body["agent_name"]
            self._mark_connected()
            return True

        async def disconnect(self):
            global _DAEMON
            d = _DAEMON
            if d is not None and d.alive():
                for kind, body in (("adapter.disconnect", {"adapter_instance": self._instance}),
                                   ("shutdown", {"reason": "disconnect"})):
                    try:
                        await d.acall(kind, body, 10 if kind != "shutdown" else 5)
                    except DaemonError:
                        pass
                await asyncio.to_thread(d.close)
                _DAEMON = None
            self._mark_disconnected()

        async def _forward(self, kind, body, timeout):
            try:
                return _send_result(await daemon().acall(kind, body, timeout))
            except DaemonError as exc:
                return _failed(exc)

        async def send(self, chat_id, content, reply_to=None, metadata=None):
            return await self._forward("adapter.send", {
                "chat_id": chat_id, "content": content, "reply_to": reply_to,
                "metadata": metadata, "ctx": turn_ctx()}, 120)

        async def edit_message(self, chat_id, message_id, content, *, finalize=False, metadata=None):
            return await self._forward("adapter.edit", {
                "chat_id": chat_id, "message_id": message_id, "content": content,
                "finalize": finalize, "metadata": metadata, "ctx": turn_ctx()}, 120)

        async def send_typing(self, chat_id, metadata=None):
            daemon().notify("typing", {"chat_id": chat_id, "on": True, "metadata": metadata})

        async def stop_typing(self, chat_id, metadata=None):
            daemon().notify("typing", {"chat_id": chat_id, "on": False, "metadata": metadata})

        async def get_chat_info(self, chat_id):
            try:
                return await daemon().acall("adapter.chat_info", {"chat_id": chat_id}, 10)
            except DaemonError:
                return {"name": chat_id, "type": "dm", "id": chat_id}

        def _turn_keys(self, event):
            extra = getattr(self.config, "extra", None) or {}
            key = build_session_key(event.source, extra.get("group_sessions_per_user", True),
                                    extra.get("thread_sessions_per_user", False))
            ref = getattr(event, "_canon_ref", None) or "shim:%x" % id(event)
            return key, ref

        async def on_processing_start(self, event):
            key, ref = self._turn_keys(event)
            await daemon().acall("turn.start", {"event_ref": ref, "session_key": key,
                                                "event": _summary(event), "queue_depth": 0}, 30)

        async def on_processing_complete(self, event, outcome):
            key, ref = self._turn_keys(event)
            await daemon().acall("turn.complete", {
                "event_ref": ref, "session_key": key,
                "outcome": getattr(outcome, "value", str(outcome)), "queue_depth": 0}, 600)

        # Daemon → shim (called on the reader thread).
        def _on_frame(self, frame):
            kind, rid, body = frame.get("type"), frame.get("id"), frame.get("body") or {}
            loop = self._loop
            if loop is None:
                if rid:
                    daemon().respond(rid, kind, error={"code": "not_connected", "message": "no loop",
                                                      "retryable": True})
                return
            asyncio.run_coroutine_threadsafe(self._dispatch(kind, rid, body), loop)

        async def _dispatch(self, kind, rid, body):
            d = daemon()
            try:
                result = await self._handle(kind, body)
            except Exception as exc:
                log.exception("canon-hermes: %s failed", kind)
                if rid:
                    d.respond(rid, kind, error={"code": "internal", "message": str(exc), "retryable": False})
                return
            if rid:
                if result is None:
                    d.respond(rid, kind, error={"code": "unknown_type", "message": kind, "retryable": False})
                else:
                    d.respond(rid, kind, result)

        async def _handle(self, kind, body):
            if kind == "inbound.message":
                await self.handle_message(self._event(body["event"], body["event_ref"]))
                return {"accepted": True}
            if kind == "control.signal":
                signal = body.get("signal")
                text = "/new" if signal == "new_session" else "/stop"
                event = self._event({"text": text, "internal": True, "raw": {"canonSignal": signal},
                                     "source": {"chat_id": body["chat_id"], "chat_name": body.get("chat_name"),
                                                "chat_type": body.get("chat_type"), "user_name": "Canon",
                                                "user_id": body.get("updated_by") or "canon-runtime-control"}},
                                    None)
                await self.handle_message(event)
                return {}
            if kind == "approval.resolve":
                from tools.approval import resolve_gateway_approval
                return {"resolved": resolve_gateway_approval(body["session_key"], body["choice"])}
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

        def _event(self, ev, ref):
            src = ev.get("source") or {}
            chat_type = src.get("chat_type") or "dm"
            source = self.build_source(chat_id=src.get("chat_id"), chat_name=src.get("chat_name"),
                                       chat_type=chat_type, user_id=src.get("user_id"),
                                       user_name=src.get("user_name"), thread_id=src.get("thread_id"))
            try:
                mtype = MessageType(ev.get("message_type") or "text")
            except ValueError:
                mtype = MessageType.TEXT
            meta = dict(ev.get("metadata") or {})
            media = ev.get("media") or []
            event = MessageEvent(text=ev.get("text") or "", message_type=mtype, source=source,
                                 raw_message=ev.get("raw"), message_id=ev.get("message_id"),
                                 reply_to_message_id=ev.get("reply_to_message_id"),
                                 media_urls=[m["path"] for m in media],
                                 media_types=[m.get("mime_type") or "" for m in media],
                                 channel_prompt=ev.get("channel_prompt"),
                                 channel_context=ev.get("channel_context"),
                                 internal=bool(ev.get("internal")), metadata=meta)
            event._canon_ref = ref
            event.delivery_intent = meta.get("deliveryIntent")
            return event

    return CanonAdapter


def _hook(kind):
    def forward(**kwargs):
        ctx = turn_ctx()
        if ctx.get("platform") != PLATFORM or _DAEMON is None:
            return None
        body = {k: v for k, v in kwargs.items() if isinstance(v, (str, int, float, bool, dict, list, type(None)))}
        for big in ("args", "result"):
            if isinstance(body.get(big), str):
                body[big] = body[big][:16384]
        body["ctx"] = ctx
        _DAEMON.notify("hook." + kind, body)
        return None
    return forward


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
        name=PLATFORM, label=platform.get("label", "Canon"),
        adapter_factory=lambda cfg: adapter_class(cfg),
        check_fn=lambda: True,
        allowed_users_env=platform.get("allowed_users_env", "CANON_ALLOWED_USERS"),
        allow_all_env=platform.get("allow_all_env", "CANON_ALLOW_ALL_USERS"),
        max_message_length=platform.get("max_message_length", 3900),
        cron_deliver_env_var=platform.get("cron_deliver_env_var", "CANON_HOME_CHANNEL"),
        install_hint=platform.get("install_hint", "Run canon-hermes install"),
        platform_hint=platform.get("platform_hint", ""),
        emoji=platform.get("emoji", "C"),
    )
