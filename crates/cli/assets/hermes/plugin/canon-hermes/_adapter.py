"""The Canon platform adapter: the `BasePlatformAdapter` subclass Hermes drives.

`CanonAdapter` forwards each gateway call (connect, send, edit, media, clarify, exec approval,
typing, the processing hooks) to the daemon as one request or notification, and serves the
daemon's requests (inbound messages, runtime control signals, approval and clarify answers,
queue depth) and notifications on the gateway loop (hermes-host.md §19.6, §19.7). It keeps the
Canon turns Hermes is running, which it hands to a respawned daemon (the resync), and moves
inbound media into Hermes' cache. The busy-input seam is its `BusySeam` mixin (`_busy.py`).

This module imports Hermes when it loads: the package imports it only from
`_make_adapter_class()`, which `register()` calls inside Hermes.
"""

import asyncio
import collections
import contextlib
import itertools
import logging
import mimetypes
import os
import re
import secrets
import threading
import time
from pathlib import Path

from gateway.config import Platform
from gateway.platforms import base
from gateway.platforms.base import BasePlatformAdapter, MessageEvent, MessageType, SendResult
from gateway.session import build_session_key

from ._busy import BusySeam, absorbed_refs, event_summary
from ._constants import (CONTROL_ID_PREFIX, INTERNAL, MULTIPLEX_MESSAGE, NOT_CONNECTED, PLATFORM,
                         STREAMING_OVERFLOW_LIMIT, TIMEOUTS, UNKNOWN_TYPE, MAX_MESSAGE_LENGTH as MESSAGE_LIMIT)
from ._daemon import (CRASH_LOOP, MANIFEST, SUPERVISOR, DaemonError, call, call_resent, multiplex_active,
                      turn_ctx)
from ._tools import tool_availability

OGG = {"audio/ogg": ".ogg", "audio/opus": ".ogg"}  # Hermes' transcription refuses .oga and .opus
RESENDABLE = ("adapter.send", "adapter.edit")  # idempotent after a respawn (see `_forward`)
# `raw_response` markers of a send the daemon answered without storing a message of its own.
NOT_DURABLE = ("suppressedAuxiliary", "silenced", "duplicateFinal")
LIMITS = MANIFEST.get("adapter", {})
INSTANCES = itertools.count(1)  # `adapter_instance`: one number per adapter object

log = logging.getLogger("canon_hermes")


def _send_result(body):
    return SendResult(success=bool(body.get("success")), message_id=body.get("message_id"),
                      error=body.get("error"), retryable=bool(body.get("retryable")),
                      raw_response=body.get("raw_response"))


def _hitl_settings():
    """Hermes' approval mode and timeouts for `adapter.connect.host` (hermes-host.md §19.6, Q10)."""
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


def _cache_media(media):
    """Moves the daemon's hand-off files (0600, under <CANON_HOME>/tmp) into Hermes' cache with the
    helper for their kind (hermes-host.md §19.7, Q8): returns (paths, MIME types) without the
    items Hermes refuses; every temp file is deleted either way."""
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


# A message is handed over again when a daemon died between Hermes accepting it and recording
# that in its inbox (the successor replays what was not recorded), and a detached-approval wake
# when it died before finishing the wake's lease. Both keep their message id, so the repeat is
# dropped here, where it outlives the daemon, and Hermes runs one turn. An id is remembered only
# once handle_message returned, so a hand-over that failed can be tried again. The value is
# the session key and reference of the MessageEvent Hermes got, so a repeat of a message still
# waiting in Hermes' queue is answered as queued (its frame must stay unsettled: a gateway stop
# discards that queue). Never the event itself: with its text, raw frame and media paths, 4,096
# of them could hold gigabytes.
INBOUND_SEEN, INBOUND_SEEN_CAP = collections.OrderedDict(), 4096


def _repeated_inbound(event):
    """What was remembered of the message Hermes already got, or None."""
    message_id = (event or {}).get("message_id") or ""
    return INBOUND_SEEN.get(message_id) if message_id else None


def _remember_inbound(summary, seen):
    message_id = (summary or {}).get("message_id") or ""
    if message_id:
        INBOUND_SEEN[message_id] = seen
        while len(INBOUND_SEEN) > INBOUND_SEEN_CAP:
            INBOUND_SEEN.popitem(last=False)


# A stopping Hermes runner's refusal of a message it will not run (`GatewayRunner`, busy and
# free sessions), and the prefix its delivery ledger puts on a reply it redelivers after a
# restart (`gateway.delivery_ledger.RECOVERED_MARKER`).
STOP_REFUSAL = re.compile(
    r"⏳ Gateway is (?:shutting down|restarting) and is not accepting (?:new work|another turn) "
    r"right now\.")
RECOVERED_MARKER = "♻️ Recovered reply — the gateway restarted during delivery, so this may be a duplicate:"


class _GatewayStopping(Exception):
    """The gateway began its stop while an inbound message was handed to it."""


class CanonAdapter(BusySeam, BasePlatformAdapter):
    MAX_MESSAGE_LENGTH = LIMITS.get("max_message_length", MESSAGE_LIMIT)
    REQUIRES_EDIT_FINALIZE = True
    splits_long_messages = True
    name = "Canon"
    authorization_is_upstream = True
    message_len_fn = staticmethod(lambda text: len(text.encode("utf-8")))

    def __init__(self, config):
        if multiplex_active():
            raise RuntimeError(MULTIPLEX_MESSAGE)
        super().__init__(config, Platform(PLATFORM))
        self._instance, self._loop = next(INSTANCES), None
        self._init_busy()
        self._open = {}  # session_key → open turn, resent by `resync`
        self._answers = {}  # session_key → the run's kept answer (`_keep_answer`)
        self._deferred = []  # dequeue boundaries waiting for a respawned daemon
        # Held while a dequeue decides to defer its boundary and while a respawn publishes its
        # child: a boundary deferred after the resync took the list is still sent before it.
        self._defer_lock = threading.Lock()
        # session_key → [(running turn, its answer, dequeue step, closed), …], oldest first: each
        # turn a dequeue ended, kept until `turn.closed` says its final reached Canon for it and
        # for every turn before it. Back-to-back dequeues can end a second turn while the first
        # one's final is still on its way, and each turn's final travels on its own: the second
        # may reach Canon first (`closed`), and is still replayed so the first one's boundary
        # lands where it did.
        self._before = {}
        self._delivered = {}  # session_key → boundary-closed turns whose final Canon stored, this run
        self._runs = {}  # session_key → event_ref of the Canon turn Hermes is running
        # Held for every change to `_open`, `_answers`, `_before` and `_delivered`: a resync
        # changes them on the respawn thread while the new child's frames change them on the
        # loop and the reader thread. Only ever held for the change itself, never across a call
        # to the daemon, so the loop never waits on it for longer than that.
        self._turns_lock = threading.Lock()

    def streaming_overflow_limit(self):
        return LIMITS.get("streaming_overflow_limit", STREAMING_OVERFLOW_LIMIT)

    # ----- connection -----

    def _connect_body(self, is_reconnect):
        # `api_key` and `token` are credentials the daemon's resolver reads after CANON_API_KEY
        # (cli.md §5.1); a non-string value is no setting.
        secrets = {k: v for k in ("api_key", "token") if isinstance(v := getattr(self.config, k, None), str)}
        return {"is_reconnect": is_reconnect, "adapter_instance": self._instance,
                "config": dict(secrets, extra=dict(getattr(self.config, "extra", None) or {}),
                               typing_indicator=getattr(self.config, "typing_indicator", True)),
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
        body = d.call("adapter.connect", self._connect_body(is_reconnect), TIMEOUTS["adapter.connect"])
        if not body.get("connected"):
            raise DaemonError.of(body.get("fatal") or {}, "connect_failed")
        return body

    def _resync(self, d, publish=lambda: None):
        """After a respawn (worker thread): reconnect, hand the open turns over, then send each
        turn's kept answer again (`_keep_answer`), then the boundaries deferred meanwhile, and
        `publish` the child once none is left (under `_defer_lock`, so a dequeue either sees the
        child or defers to a list still drained here)."""
        self._attach(d, True)
        # A session whose follow-up was dequeued but whose running turn's final had not reached
        # Canon yet hands over that (oldest) running turn; each dequeue after it is sent again
        # after the answer of the turn it ended, so the respawned daemon sees the same sequence.
        with self._turns_lock:
            before = {key: list(chain) for key, chain in self._before.items() if chain}
            open_turns = {t["session_key"]: (t, self._answers.get(t["session_key"]))
                          for t in self._open.values()}
            for key, chain in before.items():
                running, answer, _step, _closed = chain[0]
                open_turns[key] = (running, answer)
            turns = [dict(t) for t, _ in open_turns.values()]
            delivered = [dict(t) for ts in self._delivered.values() for t in ts]
        depths = {t["session_key"]: self._depth(t["session_key"]) for t in turns}
        d.call("resync", {"adapter_connected": True, "open_turns": turns, "queue_depths": depths,
                          "delivered_turns": delivered}, TIMEOUTS["resync"])
        for _turn, answer in open_turns.values():
            answer = answer or {}
            first, last = answer.get("first"), answer.get("last")
            for step in [first] + ([last] if last is not first else []):
                if step:
                    d.call(step[0], step[1], TIMEOUTS[step[0]])
        # After each dequeue of a chain, the follow-up's answer so far (its first send replied
        # to its message) is sent again, so the respawned daemon closes the turn before it there
        # and gives the follow-up's text to the follow-up's turn. The follow-up of a chain's
        # last dequeue is the session's open turn; an answer it has not started is not sent.
        replay = []
        with self._turns_lock:
            for key, chain in before.items():
                latest = self._answers.get(key) or {}
                latest = latest if "after" not in latest and latest.get("first") else None
                for i, (_running, _answer, step, _closed) in enumerate(chain):
                    later = chain[i + 1] if i + 1 < len(chain) else None
                    follow_up = later[0] if later else self._open.get(key)
                    # The follow-up keeps the turn id the old daemon answered (Canon may show it).
                    answered = (follow_up or {}).get("turn_id")
                    if answered:
                        step = step[:4] + (dict(step[4], turn_id=answered),) + step[5:]
                    replay.append((step, later[1] if later else latest))
                self._open[key], self._answers[key] = chain[0][0], dict(chain[0][1] or {})
            self._before = {}
        with self._defer_lock:
            deferred, self._deferred = self._deferred, []
        # Then the boundaries of follow-ups dequeued while the daemon was down.
        for step, follow in replay + [(step, None) for step in deferred]:
            key, ref, summary, started, _body, authority, _message_id = step
            self._boundary(step, lambda b: self._track(
                key, ref, summary, started, d.call("turn.accepted", b, TIMEOUTS["turn.start"]),
                authority))
            follow = follow or {}
            first, last = follow.get("first"), follow.get("last")
            for kept in [first] + ([last] if last is not first else []):
                if kept:
                    self._keep_answer(kept[0], kept[1], d.call(kept[0], kept[1], TIMEOUTS[kept[0]]))
        # A dequeue while the calls above ran still found no child and deferred its boundary:
        # sent now, before the child is published (the follow-up's own sends wait for it).
        # Found by the fault harness: such a boundary waited for the next respawn, and the
        # follow-up's answer merged into the turn before it.
        while True:
            with self._defer_lock:
                late, self._deferred = self._deferred, []
                if not late:
                    publish()
                    break
            for step in late:
                key, ref, summary, started, _body, authority, _message_id = step
                self._boundary(step, lambda b: self._track(
                    key, ref, summary, started, d.call("turn.accepted", b, TIMEOUTS["turn.start"]),
                    authority))
        log.info("canon-hermes daemon respawned; resynced %d open turn(s)", len(turns))

    def _gateway_stopping(self):
        """Whether Hermes' gateway runner has begun its stop (`_draining`, set first thing in
        `GatewayRunner.stop`): the supervisor then respawns no daemon (hermes-host.md §19.10)."""
        runner = getattr(self, "gateway_runner", None) or self._runner
        return getattr(runner, "_draining", False) is True

    def _crash_loop(self):
        def fatal():
            self._set_fatal_error("daemon_crash_loop", CRASH_LOOP, retryable=True)
            asyncio.ensure_future(self._notify_fatal_error())
        if self._loop is not None:
            self._loop.call_soon_threadsafe(fatal)

    async def disconnect(self):
        # `stop` waits for the supervisor's lock, which a respawn holds through its resync:
        # off the loop, so the gateway keeps running meanwhile.
        d = await asyncio.to_thread(SUPERVISOR.stop) if SUPERVISOR.adapter in (self, None) else None
        if d is not None and d.alive():
            for kind, body in (("adapter.disconnect", {"adapter_instance": self._instance}),
                               ("shutdown", {"reason": "disconnect"})):
                try:
                    await d.acall(kind, body, TIMEOUTS[kind])
                except DaemonError:
                    pass
            await asyncio.to_thread(d.close)
        self._mark_disconnected()

    # ----- gateway → daemon -----

    async def _forward(self, kind, body):
        # A send or edit cut off by a daemon crash is sent once more to the respawned,
        # resynced child: an edit carries the whole text, a final lands on the same
        # operation-bound id, and a send outside any turn carries the same `send_key`, from
        # which the daemon derives the same standalone ids. Failing it instead would flip
        # Hermes' stream consumer into tail-only fallback for the rest of the answer
        # (hermes-host.md §10).
        try:
            result = await (call_resent if kind in RESENDABLE else call)(kind, body)
        except DaemonError as exc:
            return _send_result({"error": str(exc), "retryable": exc.retryable})
        self._keep_answer(kind, body, result)
        return _send_result(result)

    def _keep_answer(self, kind, body, result):
        """Keeps what a respawned daemon needs to rebuild a session's answer, which died with the
        old one (its staging is in memory): the first send of the session's run (it carries the
        reply threading; Hermes may stream it before `on_processing_start` returned) and the
        latest send or edit (the whole text so far). `_resync` sends them again, unchanged, so
        a final the old daemon already stored is replayed onto its own id; without them a turn
        whose daemon was killed after the last edit would complete with nothing staged and its
        answer would never be stored."""
        key = (body.get("ctx") or {}).get("session_key")
        if not key or not result.get("success"):
            return
        with self._turns_lock:
            meta = body.get("metadata") or {}
            if kind == "adapter.send_media" or (kind == "adapter.send" and not meta.get("expect_edits")):
                # A durable send takes one of the turn's message ids: a respawned daemon must not
                # take a message already stored under the final's id for that final (`resync`).
                # A send the daemon staged into the turn's answer (its answer names the turn, as
                # a preview does) or suppressed (a marker in `raw_response`) took none; counting
                # it made a respawned daemon store a final a second time under the next id when
                # Canon refused the replay of the first for a metadata difference.
                raw = result.get("raw_response") or {}
                took_an_id = not any(raw.get(marker) for marker in NOT_DURABLE)
                for turn in (self._open.get(key), (self._before.get(key) or [(None,)])[-1][0]):
                    if turn is not None and took_an_id and result.get("message_id") != turn.get("turn_id"):
                        turn["durable_sent"] = True
            if kind not in RESENDABLE:
                return
            answer = self._answers.setdefault(key, {})
            if "after" in answer:
                # A dequeued follow-up's answer starts with a send replying to its message; until
                # then the sends and edits are the running turn's last ones (Hermes' stream
                # consumer finalizes that answer after the dequeue), kept with the running turn.
                if kind != "adapter.send" or answer["after"] not in (body.get("reply_to"),
                                                                      meta.get("reply_to_message_id")):
                    chain = self._before.get(key)
                    if chain:  # the newest turn a dequeue ended
                        running, kept, step, closed = chain[-1]
                        kept = dict(kept or {})
                        if kind == "adapter.send":
                            kept.setdefault("first", (kind, body))
                        kept["last"] = (kind, body)
                        chain[-1] = (running, kept, step, closed)
                    return
                # The daemon closes the running turn now, but its final may still be on its way
                # to Canon: the running turn stays in `_before` until `turn.closed` says it got
                # there (or the run completes), even when a later dequeue ends the next one.
                del answer["after"]
            if kind == "adapter.send":
                answer.setdefault("first", (kind, body))
            answer["last"] = (kind, body)

    async def send(self, chat_id, content, reply_to=None, metadata=None):
        # One key per call of Hermes', kept across the resend of `_forward` (hermes-host.md §19.6).
        body = {"chat_id": chat_id, "content": content, "reply_to": reply_to,
                "metadata": metadata, "ctx": turn_ctx(), "send_key": secrets.token_hex(16)}
        if self._stop_notice(content):
            body["stop_notice"] = True
        return await self._forward("adapter.send", body)

    def _stop_notice(self, content):
        """Whether `content` is a stopping runner's refusal of a message ("⏳ Gateway is shutting
        down and is not accepting new work right now."), sent while the gateway stops or
        redelivered by the restarted one from Hermes' delivery ledger (behind its "♻️ Recovered
        reply" marker): it answers nothing, and the message waits for the restarted gateway."""
        if not isinstance(content, str):
            return False
        text = content.strip()
        if text.startswith(RECOVERED_MARKER.strip()):
            return STOP_REFUSAL.fullmatch(text[len(RECOVERED_MARKER.strip()):].strip()) is not None
        return self._gateway_stopping() and STOP_REFUSAL.fullmatch(text) is not None

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
        return await self._forward("adapter.send_media", body)

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
            "finalize": finalize, "metadata": metadata, "ctx": turn_ctx()})

    async def send_clarify(self, chat_id, question, choices, clarify_id, session_key, metadata=None):
        return await self._forward("adapter.send_clarify", {
            "chat_id": chat_id, "question": question, "choices": list(choices or []),
            "clarify_id": clarify_id, "session_key": session_key, "metadata": metadata,
            "ctx": turn_ctx()})

    async def send_exec_approval(self, chat_id, command, session_key, description="dangerous command",
                                 metadata=None, allow_permanent=True, smart_denied=False, **kwargs):
        body = {"chat_id": chat_id, "command": command, "session_key": session_key,
                "description": description, "metadata": metadata, "allow_permanent": bool(allow_permanent),
                "smart_denied": bool(smart_denied), "ctx": turn_ctx()}
        if kwargs.get("allow_session") is not None:  # hermes-host.md Q2 (newer hosts)
            body["allow_session"] = bool(kwargs["allow_session"])
        return await self._forward("adapter.send_exec_approval", body)

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
            return await call("adapter.chat_info", {"chat_id": chat_id})
        except DaemonError:
            return {"name": chat_id, "type": "dm", "id": chat_id}

    def _key(self, source):
        extra = getattr(self.config, "extra", None) or {}
        return build_session_key(source, extra.get("group_sessions_per_user", True),
                                 extra.get("thread_sessions_per_user", False))

    @staticmethod
    def _ref(event):
        return getattr(event, "_canon_ref", None) or "shim:%x" % id(event)

    def _track(self, key, ref, summary, started, body, authority=None):
        """Keeps the turn Canon opened for `ref` for `resync` while it still runs."""
        if body.get("turn_id") and self._runs.get(key) == ref:
            turn = {"event_ref": ref, "session_key": key, "turn_id": body["turn_id"],
                    "event": summary, "started_at_ms": started}
            if authority:
                turn["reply_authority"] = authority
            with self._turns_lock:
                self._open[key] = turn

    def _restore_noop(self, event):
        """Hermes' no-op pass for a message that arrived during its startup restore
        (hermes-host.md §9.5): the runner queues the event and replays the same object later,
        marked as a replay."""
        runner = getattr(self, "gateway_runner", None) or self._runner
        return bool(getattr(runner, "_startup_restore_in_progress", False)) and not event.internal \
            and not getattr(event, "_hermes_startup_restore_replay", False)

    async def on_processing_start(self, event):
        if self._restore_noop(event):  # no Canon turn; the replay opens the real one
            event._canon_restore_noop = True
            return
        key, ref, summary = self._key(event.source), self._ref(event), event_summary(event)
        started = int(time.time() * 1000)
        self._runs[key] = ref
        self._cut.discard(key)
        body = {"event_ref": ref, "session_key": key, "event": summary, "queue_depth": self._depth(key)}
        # A stopping runner refuses the message ("not accepting new work") or its stop cancels
        # the cycle at once: Hermes never runs it, so the daemon keeps its frame unsettled
        # (replayed after the restart) and the cut-off turn before it open.
        if self._gateway_stopping():
            body["draining"] = True
        if absorbed_refs(event):
            body["absorbed_refs"] = absorbed_refs(event)
        authority = getattr(event, "_canon_authority", None)
        if authority:
            body["reply_authority"] = authority
        # A daemon that died during `turn.start` is respawned; the new one opens the turn (the
        # event's summary and reply authority travel in the body). Without sending it again
        # Hermes would run the turn with no Canon turn open, and its answer would reply to
        # nothing.
        answered = await call_resent("turn.start", body)
        self._track(key, ref, summary, started, answered, authority)

    def _waiting(self, key, ref):
        """The event of reference `ref` if it waits in the session's queue (the head slot, the
        overflow, or the runner's startup-restore queue), the waiting head if it was merged
        into it, else None."""
        head = self._pending_messages.get(key)
        overflow = (getattr(self._runner, "_queued_events", None) or {}).get(key) or ()
        # While a restarted gateway resumes its interrupted sessions, the runner holds every
        # inbound message in its own queue (`_startup_restore_queue`); a stop then drops it too.
        restoring = getattr(self._runner, "_startup_restore_queue", None) or ()
        for event in itertools.chain([head] if head is not None else [], overflow, restoring):
            if self._ref(event) == ref:
                return event
        return head if head is not None and ref in absorbed_refs(head) else None

    async def on_processing_complete(self, event, outcome):
        if vars(event).pop("_canon_restore_noop", False):  # the no-op pass's end
            return
        key = self._key(event.source)
        outcome = getattr(outcome, "value", str(outcome))
        if key in self._cut:  # this adapter interrupted the run and no follow-up took it over
            self._cut.discard(key)
            outcome = "cancelled"
        body = {"event_ref": self._ref(event), "session_key": key, "outcome": outcome,
                "queue_depth": self._depth(key), "draining": self._gateway_stopping()}
        # The turn stays open (and so in a `resync`) until its daemon answered: a daemon killed
        # during the final's delivery is respawned, gets the turn and its kept answer back, and
        # the completion is sent again, after every such exit; the final lands on the same
        # operation-bound id. A turn the shim does not hold has nothing to resync and is sent once.
        turn = self._open.get(key)
        try:
            await (call if turn is None else call_resent)("turn.complete", body)
        finally:
            self._runs.pop(key, None)
            with self._turns_lock:
                if self._open.get(key) is turn:
                    self._open.pop(key, None)
                self._answers.pop(key, None)
                self._before.pop(key, None)
                self._delivered.pop(key, None)

    def _dequeued(self, key, event):
        """The runner dequeued `event` to run next inside the same run (hermes-host.md §12.2): a
        new Canon turn (turns.md §10.3, OQ-18); the daemon places the boundary. Never blocks.
        `interrupted`: this adapter interrupted the running agent, whose turn is cancelled."""
        interrupted, ref, summary = key in self._cut, self._ref(event), event_summary(event)
        self._cut.discard(key)
        self._runs[key], started = ref, int(time.time() * 1000)
        body = {"event_ref": ref, "session_key": key, "event": summary, "phase": "queue_dequeue",
                "queue_depth": self._depth(key), "interrupted": interrupted,
                "absorbed_refs": absorbed_refs(event)}
        authority = getattr(event, "_canon_authority", None)
        if authority:
            body["reply_authority"] = authority
        step = (key, ref, summary, started, body, authority, event.message_id)
        with self._defer_lock:
            d = SUPERVISOR.peek()
            if d is None:
                # The daemon is being respawned: the running turn stays open (the resync hands
                # it over with its answer) and the boundary is sent right after (`_resync`).
                log.info("canon-hermes: daemon down; turn boundary for %s sent after the respawn", key)
                self._deferred.append(step)
                return
        self._boundary(step, lambda b: d.request("turn.accepted", b).add_done_callback(_done(
            "turn.accepted", lambda result: self._track(key, ref, summary, started, result, authority))))

    def _boundary(self, step, send):
        """A dequeue's turn boundary: the follow-up's answer starts, then `send(body)`. The
        daemon closes the running turn only at the follow-up's first send (Hermes still sends
        the running answer's last edits after the dequeue), so until then that turn, its kept
        answer and this step are what a respawned daemon must get back (`_resync`)."""
        key, _ref, _summary, _started, body, _authority, message_id = step
        with self._turns_lock:
            running = self._open.pop(key, None)  # until the daemon answers the follow-up's turn id
            if running is not None:
                self._before.setdefault(key, []).append((running, self._answers.get(key), step, False))
            self._answers[key] = {"after": message_id}  # the follow-up's answer starts
        send(body)

    # ----- daemon → gateway (frames arrive on the reader thread) -----

    def _on_frame(self, d, frame):
        kind, rid, body = frame.get("type"), frame.get("id"), frame.get("body") or {}
        if kind == "tool.availability" and not rid:  # needs no loop: kept on the child
            tool_availability(d, body)
            return
        if self._loop is not None:
            asyncio.run_coroutine_threadsafe(self._dispatch(d, kind, rid, body), self._loop)
        elif rid:
            d.respond(rid, kind, error={"code": NOT_CONNECTED, "message": "no loop", "retryable": True})

    async def _dispatch(self, d, kind, rid, body):
        if kind == "inbound.message" and rid and self._gateway_stopping():
            self._refuse_while_stopping(d, rid, kind)
            return
        try:
            result = await self._handle(kind, body)
        except _GatewayStopping:
            self._refuse_while_stopping(d, rid, kind)
            return
        except Exception as exc:
            log.exception("canon-hermes: %s failed", kind)
            if rid:
                d.respond(rid, kind, error={"code": INTERNAL, "message": str(exc), "retryable": False})
            return
        if rid and result is None:
            d.respond(rid, kind, error={"code": UNKNOWN_TYPE, "message": kind, "retryable": False})
        elif rid:
            d.respond(rid, kind, result)

    @staticmethod
    def _refuse_while_stopping(d, rid, kind):
        """A stopping runner answers a message "not accepting" and drops it (a busy session's at
        once, a free session's when its cycle reaches the runner), and drops its queues at exit:
        Hermes never runs it. Refused as retryable, its frame stays unsettled and the restarted
        gateway's stream replays it."""
        log.info("canon-hermes: an inbound message waits for the gateway's restart (it is stopping)")
        if rid:
            d.respond(rid, kind, error={"code": NOT_CONNECTED, "message": "the gateway is stopping",
                                        "retryable": True})

    async def _handle(self, kind, body):
        if kind == "inbound.message":
            seen = _repeated_inbound(body.get("event"))
            if seen is not None:
                key, ref = seen
                waiting = self._waiting(key, ref)
                if waiting is None:
                    return {"accepted": True}
                if self._ref(waiting) == ref:
                    # The respawned daemon's reference, so its turn start settles this frame.
                    waiting._canon_ref = body["event_ref"]
                    _remember_inbound(body.get("event"), (key, body["event_ref"]))
                return {"accepted": True, "queued": True, "session_key": key}
            media = await asyncio.to_thread(_cache_media, body["event"].get("media") or [])
            event = self._event(body["event"], body["event_ref"], *media)
            # Handed back in `turn.start`, `turn.accepted` and `resync` (hermes-host.md §19.6);
            # a secret: never logged.
            event._canon_authority = body.get("reply_authority")
            cycle_before = self._session_tasks.get(self._key(event.source))
            await self.handle_message(event)
            key = self._key(event.source)  # Hermes' topic hook may have rewritten the source
            waiting = self._waiting(key, self._ref(event)) is not None or self._restore_noop(event)
            if not waiting and self._gateway_stopping():
                # The stop began while the message was on its way in (the media cache and
                # Hermes' topic hook yield to the loop): the runner has dropped it or will.
                raise _GatewayStopping()
            _remember_inbound(body.get("event"), (key, self._ref(event)))
            # A message Hermes queued behind a running turn is not handled yet: a gateway stop
            # discards its queue, so the daemon keeps the frame unsettled (replayed after the
            # restart) until the message's turn starts. During the startup restore the runner
            # queues every message in a task of its own that has not run yet when
            # `handle_message` returns, so the restore itself says the message waits.
            if waiting:
                return {"accepted": True, "queued": True, "session_key": key}
            # A free session's message runs in a processing cycle Hermes just spawned and that
            # has not started yet; a stop before its start answers it "not accepting" instead
            # of running it. So it settles when its turn starts, like a queued one.
            cycle = self._session_tasks.get(key)
            if cycle is not None and cycle is not cycle_before and not cycle.done():
                return {"accepted": True, "queued": True, "session_key": key}
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
        elif kind == "turn.closed":  # a dequeue boundary's running turn reached Canon
            self._turn_closed(body.get("session_key"), body.get("turn_id"))
        return None

    def _turn_closed(self, key, turn_id):
        """The final of `turn_id`, a turn a dequeue ended in session `key`, reached Canon."""
        with self._turns_lock:
            chain = self._before.get(key) or []
            for i, (running, answer, step, _closed) in enumerate(chain):
                if running.get("turn_id") == turn_id:
                    chain[i] = (running, answer, step, True)
            # Each turn's final travels on its own, so a later turn's may get there first: only
            # the closed turns at the head of the chain leave it (a respawn replays the rest,
            # from the oldest turn still on its way).
            kept = self._delivered.setdefault(key, [])
            while chain and chain[0][3]:
                # Its closing state comes 750 ms later; a respawned daemon publishes it.
                kept.append(chain.pop(0)[0])
            del kept[:-16]  # a long run's older turns were published long ago
            if key in self._before and not chain:
                del self._before[key]

    async def _control(self, body):
        """A Canon runtime signal as a synthetic `/stop` or `/new` (hermes-host.md §12.3, §19.7);
        the daemon names the user (`updated_by`)."""
        signal = body.get("signal")
        event = self._event({
            "text": "/new" if signal == "new_session" else "/stop", "raw": {"canonSignal": signal},
            "message_id": CONTROL_ID_PREFIX + "%s:%s" % (signal, time.time()),
            "source": {"chat_id": body["chat_id"], "chat_name": body.get("chat_name"),
                       "chat_type": body.get("chat_type"), "user_name": "Canon",
                       "user_id": body.get("updated_by")}}, None)
        key = self._key(event.source)
        if signal == "stop_and_drop":
            self._drop_queue(key)
        await self.handle_message(event)
        if signal == "stop_and_drop":
            self._drop_queue(key)

    def _event(self, ev, ref, media_urls=(), media_types=()):
        src = ev.get("source") or {}
        # The source's message id becomes the turn's HERMES_SESSION_MESSAGE_ID (hermes-host.md §17),
        # the trusted message provenance of current_canon_inbound_media() (runtime-control.md §7.6).
        source = self.build_source(chat_id=src.get("chat_id"), chat_name=src.get("chat_name"),
                                   chat_type=src.get("chat_type") or "dm", user_id=src.get("user_id"),
                                   user_name=src.get("user_name"), thread_id=src.get("thread_id"),
                                   message_id=src.get("message_id"))
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
