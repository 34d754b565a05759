"""The public domain-plugin API (runtime-control.md §7), importable inside the gateway as
`canon_hermes_plugin`, the seed's module name, so a domain plugin written for the Python plugin
runs unchanged: `from canon_hermes_plugin import current_canon_inbound_media, CanonInboundMedia`.

`register()` puts a module of that name into `sys.modules` (`install_module`) holding the names of
`__all__`, unless a real package of that name is importable (`doctor` flags that collision). Every
function is bound to the current turn: it reads the trusted turn context in the calling task
(runtime-control.md §1; never arguments) and asks the daemon: `current_canon_turn`,
`current_canon_inbound_media`, the card helpers `request_card_for_current_human` and
`send_card_to_current_conversation`, `upload_media_for_current_conversation`, the detached-approval
helpers `request_detached_approval_for_current_human` and `check_detached_approval` (the daemon
keeps the durable registry), `current_canon_runtime_health`, and `validate_card` with `RUNTIME_CARD_LIMITS` (answered by the
daemon's validator and limits, so Python and Rust never disagree).
Standard library only; Hermes is read only through `turn_ctx`.
"""

import asyncio
import contextlib
import dataclasses
import importlib.util
import logging
import os
import sys
import tempfile
import types
from pathlib import Path
from typing import Optional

from ._constants import (NO_CANON_CONVERSATION, NO_MESSAGE_PROVENANCE, NO_TRUSTED_HUMAN, PLATFORM,
                         SESSION_CONTEXT_UNAVAILABLE, TIMEOUTS)
from ._daemon import MANIFEST, SUPERVISOR, DaemonError, turn_ctx

MODULE_NAME = "canon_hermes_plugin"
HANDOFF_PREFIX = "canon-inbound-"  # canon_host::media::DISK_NAME_PREFIX: the daemon's hand-off files
MEDIA_UNREADABLE = "Canon inbound media could not be read"

log = logging.getLogger("canon_hermes")

__all__ = ["CanonTurnContext", "CanonInboundMedia", "current_canon_turn", "current_canon_inbound_media",
           "request_card_for_current_human", "send_card_to_current_conversation",
           "upload_media_for_current_conversation", "request_detached_approval_for_current_human",
           "check_detached_approval", "current_canon_runtime_health", "validate_card",
           "RUNTIME_CARD_LIMITS"]

# The 15 limits of cards.md §10.1 in export order, as `install` wrote them from the validator's
# own table.
RUNTIME_CARD_LIMITS = dict(MANIFEST.get("card_limits") or {})
VALIDATE_TIMEOUT = 10  # seconds: the validator answers at once
UPLOAD_LIMIT = 10 * 1024 * 1024  # bytes (runtime-control.md §7.5)
# runtime-control.md §7.5, exact.
DATA_NOT_BYTES, DATA_EMPTY, UPLOAD_TOO_LARGE = ("data must be bytes", "data must not be empty",
                                                "Canon media upload limit is 10MB")
# approvals.md §11, exact: the daemon refuses a token of another conversation with this text,
# raised here as the PermissionError the Python plugin raises.
WRONG_CONVERSATION = "Detached approval belongs to a different Canon conversation"
APPROVAL_ID_REQUIRED = "approval_id is required"


@dataclasses.dataclass(frozen=True)
class CanonTurnContext:
    """The trusted turn a call runs in (runtime-control.md §7.1)."""
    conversation_id: str
    user_id: Optional[str] = None
    user_name: Optional[str] = None
    session_id: Optional[str] = None
    message_id: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class CanonInboundMedia:
    """One captured attachment of the turn's Canon message (runtime-control.md §7.1). The bytes
    have trusted Canon-message provenance; `mime_type` and `file_name` are the uploader's
    description, so validate the content before trusting its format."""
    message_id: str
    attachment_index: int
    mime_type: str
    file_name: str
    data: bytes = dataclasses.field(repr=False)

    @property
    def size_bytes(self):
        return len(self.data)


def _context():
    """The turn context of the calling task (hermes-host.md §17), or the exact error."""
    try:
        return turn_ctx()
    except Exception as exc:
        raise RuntimeError(SESSION_CONTEXT_UNAVAILABLE) from exc


def _value(ctx, name):
    value = ctx.get(name)
    return value.strip() or None if isinstance(value, str) else None


def _turn(ctx, require_human=False):
    """runtime-control.md §7.2 on a context already read."""
    conversation = _value(ctx, "chat_id")
    if (_value(ctx, "platform") or "").lower() != PLATFORM or not conversation:
        raise RuntimeError(NO_CANON_CONVERSATION)
    turn = CanonTurnContext(conversation, _value(ctx, "user_id"), _value(ctx, "user_name"),
                            _value(ctx, "session_id"), _value(ctx, "message_id"))
    if require_human and not turn.user_id:
        raise RuntimeError(NO_TRUSTED_HUMAN)
    return turn


def current_canon_turn(require_human=False):
    """The current trusted Canon turn (runtime-control.md §7.2). The backend stays authoritative
    on whether its user id is a reachable human responder."""
    return _turn(_context(), require_human)


def _read_handoff(item):
    """The bytes of one hand-off file, which is deleted either way."""
    path = Path(item.get("path") or "")
    if not path.is_absolute() or not path.name.startswith(HANDOFF_PREFIX):
        raise RuntimeError(MEDIA_UNREADABLE)
    try:
        data = path.read_bytes()
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
    if len(data) != item.get("size_bytes"):
        raise RuntimeError(MEDIA_UNREADABLE)
    return CanonInboundMedia(str(item.get("message_id") or ""), int(item.get("attachment_index") or 0),
                             str(item.get("mime_type") or ""), str(item.get("file_name") or ""), data)


def current_canon_inbound_media():
    """The attachments captured from the message that triggered the current turn
    (runtime-control.md §7.6), as a tuple of `CanonInboundMedia`: empty when it had none that
    arrived whole, or when the capture was evicted. Never a partial batch: the bytes come as
    the daemon's private hand-off files, read and deleted here, and if one cannot be read none
    is returned."""
    ctx = _context()
    turn = _turn(ctx)
    if not turn.message_id:
        raise RuntimeError(NO_MESSAGE_PROVENANCE)
    try:
        body = SUPERVISOR.get().call("api.inbound_media", {"ctx": ctx}, TIMEOUTS["api.inbound_media"])
    except DaemonError as exc:
        raise RuntimeError(str(exc) or MEDIA_UNREADABLE) from exc
    if body.get("error"):
        raise RuntimeError(body["error"])
    items = [i for i in body.get("media") or [] if isinstance(i, dict)]
    media = []
    try:
        for n, item in enumerate(items):
            media.append(_read_handoff(item))
    except Exception as exc:
        for rest in items[n + 1:]:
            with contextlib.suppress(OSError, TypeError):
                os.unlink(rest.get("path") or "")
        log.warning("canon-hermes: trusted inbound media dropped (%s)", type(exc).__name__)
        raise RuntimeError(MEDIA_UNREADABLE) from None
    return tuple(media)


def _api_body(method, args, ctx):
    return {"method": method, "args": args, "ctx": ctx}


def _api_value(body):
    if body.get("error"):
        raise RuntimeError(body["error"])
    return body.get("value")


async def _api_call(method, args):
    """`method` on the daemon with the calling task's turn context; its value, or its error raised."""
    ctx = _context()
    try:
        # The child comes from `aget`: while a respawn resyncs, the caller's loop keeps running.
        daemon = await SUPERVISOR.aget()
        body = await asyncio.wait_for(
            asyncio.wrap_future(daemon.request("api.call", _api_body(method, args, ctx))),
            TIMEOUTS["api.call"])
    except asyncio.TimeoutError:
        raise RuntimeError("canon-hermes daemon timed out") from None
    except DaemonError as exc:
        raise RuntimeError(str(exc)) from exc
    return _api_value(body)


def validate_card(card):
    """`{"ok": bool, "errors": [str, ...]}` for a canon.card.v1 card, from the same validator Canon's
    server rules are checked with (cards.md)."""
    try:
        body = SUPERVISOR.get().call("api.call", {"method": "validate_card", "args": {"card": card},
                                                  "ctx": {}}, VALIDATE_TIMEOUT)
    except DaemonError as exc:
        raise RuntimeError(str(exc)) from exc
    return _api_value(body)


async def request_card_for_current_human(card, *, timeout_seconds=300, native=None):
    """Shows an interactive card to the human who triggered this turn and waits for the answer
    (runtime-control.md §7.3): `submitted` (with `actionId`, `values`, `respondedBy`),
    `cancelled` or `timeout`. An answer from anyone else fails closed."""
    return await _api_call("request_card_for_current_human",
                           {"card": card, "timeout_seconds": timeout_seconds, "native": native})


async def send_card_to_current_conversation(card, *, native=None):
    """Shows an actionless card in this turn's conversation (runtime-control.md §7.4):
    `{"status": "displayed", "conversationId", "cardId", ..., "request"}`."""
    return await _api_call("send_card_to_current_conversation", {"card": card, "native": native})


async def upload_media_for_current_conversation(data, mime_type, *, file_name=None):
    """Uploads `data` into this turn's conversation (runtime-control.md §7.5) and returns Canon's
    answer, `{"attachment": {...}, "url": ...}`, for a card preview. The bytes go to the daemon as a
    private temporary file (0600), which is deleted whatever happens."""
    _turn(_context())
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ValueError(DATA_NOT_BYTES)
    data = bytes(data)
    if not data:
        raise ValueError(DATA_EMPTY)
    if len(data) > UPLOAD_LIMIT:
        raise ValueError(UPLOAD_TOO_LARGE)
    fd, path = tempfile.mkstemp(prefix="canon-upload-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        return await _api_call("upload_media_for_current_conversation",
                               {"path": path, "mime_type": mime_type if isinstance(mime_type, str) else "",
                                "file_name": file_name if isinstance(file_name, str) else None})
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def current_canon_runtime_health():
    """How the daemon sees this turn's conversation (durable-endpoint.md §11.1), read-only and
    granting nothing: `{"adapterCount", "transportConnected", "openTurnCount",
    "boundNativeTurnCount", "orphanedTurnCount", "activeTurnBound", "code"}`, `code` one of
    `CANON_OWNER_ABSENT`, `CANON_OWNER_DISCONNECTED`, `CANON_NATIVE_TURN_UNAVAILABLE` or None."""
    ctx = _context()
    _turn(ctx)
    try:
        body = SUPERVISOR.get().call("api.call", {"method": "current_canon_runtime_health", "args": {},
                                                  "ctx": ctx}, VALIDATE_TIMEOUT)
    except DaemonError as exc:
        raise RuntimeError(str(exc)) from exc
    return _api_value(body)


async def request_detached_approval_for_current_human(*, title=None, question=None, options=None,
                                                     context=None, timeout_seconds=None):
    """Asks the human who triggered this turn to allow or deny, durably (runtime-control.md §7.7,
    approvals.md §9), and returns at once: `{"status": "pending", "approvalId", "conversationId",
    "expiresAt", "responseUserId", "note"}`. The decision arrives later as a turn of its own, or
    through `check_detached_approval`. The default and longest wait is 72 hours."""
    _turn(_context(), require_human=True)
    return await _api_call("request_detached_approval_for_current_human",
                           {"title": title, "question": question, "options": options,
                            "context": context, "timeout_seconds": timeout_seconds})


async def check_detached_approval(approval_id):
    """The state of a detached approval of this conversation (approvals.md §11): `resolved` (with
    `decision` `allow` or `deny` and `respondedBy`), `pending`, `expired` or `unknown` — never a
    denial, re-ask if it still matters. An approval of another conversation raises
    PermissionError before Canon is asked."""
    approval_id = approval_id.strip() if isinstance(approval_id, str) else ""
    if not approval_id:
        raise ValueError(APPROVAL_ID_REQUIRED)
    _turn(_context())
    try:
        return await _api_call("check_detached_approval", {"approval_id": approval_id})
    except RuntimeError as exc:
        if str(exc) == WRONG_CONVERSATION:
            raise PermissionError(WRONG_CONVERSATION) from None
        raise


def install_module():
    """Makes the API importable as `canon_hermes_plugin` (runtime-control.md Q2): a fresh module of
    `__all__` in `sys.modules`, replacing only one this shim put there (re-registration). A real
    package of that name wins and is left alone. True when the module is ours."""
    current = sys.modules.get(MODULE_NAME)
    if current is not None and not getattr(current, "__canon_hermes_shim__", False):
        return False
    if current is None:
        try:
            real = importlib.util.find_spec(MODULE_NAME)
        except (ImportError, ValueError):
            real = None
        if real is not None:
            log.warning("canon-hermes: a %s package is installed; its API is used, not this shim's",
                        MODULE_NAME)
            return False
    module = types.ModuleType(MODULE_NAME, __doc__)
    module.__canon_hermes_shim__ = True
    module.__all__ = list(__all__)
    for name in __all__:
        setattr(module, name, globals()[name])
    sys.modules[MODULE_NAME] = module
    return True
