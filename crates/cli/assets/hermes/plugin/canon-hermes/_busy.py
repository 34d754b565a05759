"""The busy-input seam (hermes-host.md §12.3): what the adapter does with a message that arrives
while its session's agent is still running.

Hermes hands such a message to the adapter's busy-session handler. When the gateway runner has
every private attribute the seam drives (`RUNNER_ATTRS`), the `BusySeam` mixin routes the message
by its Canon delivery intent itself: `queue` (the runner's pending slot and its FIFO overflow),
`interrupt` (queue it and interrupt the running agent), `interleave` (the running agent's
`steer`, else the queue) and `stop` (drop the queue, then interrupt). It also wraps
`runner._promote_queued_event`, so the adapter hears when the runner dequeues a follow-up (the
dequeue ack), and `runner._run_agent`, to know how deep the runner's recursion over queued
follow-ups is.

Hermes runs queued follow-ups recursively inside the first message's run, at most
`_MAX_INTERRUPT_DEPTH` levels deep. At that depth it dequeues the next follow-up and only then
gives up recursing: it puts the event back with a single-slot write that overwrites the next
queued message (lost), re-sends the answer it already streamed anchored to the first message
(wrong reply target), and the dequeue ack has already told the daemon a follow-up turn started
that never runs (an empty turn). So at that depth the wrapper does not dequeue at all: the
follow-up stays at the head of the queue, no ack is sent, the run completes normally and
Hermes' own drain runs the follow-up as a fresh processing cycle (its own `turn.start`). Commands, internal events, unauthorized senders, a draining runner and plain-text
approval answers are left to the runner's own handler, as is everything when an attribute is
missing. Also here: the event summary the daemon is told about an event.

Hermes is imported only when a handler is installed, so this module loads without Hermes.
"""

import contextvars
import logging

INTENTS = ("queue", "interrupt", "interleave", "stop")
# Hermes' plain-text approval answers: while an approval blocks the session, its handler takes them.
APPROVAL_WORDS = frozenset((
    "approve", "yes", "ok", "okay", "confirm", "y", "\U0001f44d", "deny", "no", "reject", "cancel",
    "n", "\U0001f44e", "always", "approve always", "always approve", "session", "approve session",
    "session approve"))
RUNNER_ATTRS = ("_queue_or_replace_pending_event", "_running_agents", "_is_user_authorized",
                "_agent_has_active_subagents", "_session_has_compression_in_flight", "_draining",
                "_queued_events", "_promote_queued_event", "_queue_depth", "_run_agent",
                "_MAX_INTERRUPT_DEPTH")
# The runner's recursion depth over queued follow-ups in the current task (0 outside a run).
RUN_DEPTH = contextvars.ContextVar("canon_hermes_run_depth", default=0)

log = logging.getLogger("canon_hermes")


def delivery_intent(event):
    value = getattr(event, "delivery_intent", None) or (event.metadata or {}).get("deliveryIntent")
    value = str(value or "").strip().lower()
    return value if value in INTENTS else None


def event_summary(event):
    """The daemon's EventSummary of a Hermes event (hermes-host.md §19.6)."""
    source, mtype = event.source, event.message_type
    return {"chat_id": source.chat_id, "chat_type": source.chat_type, "user_id": source.user_id,
            "user_name": source.user_name, "message_id": event.message_id,
            "message_type": getattr(mtype, "value", mtype), "internal": bool(event.internal),
            "text_len": len(event.text or ""), "delivery_intent": delivery_intent(event)}


def absorbed_refs(event):
    """The references of the events merged into `event` (see `BusySeam._enqueue`)."""
    return list(getattr(event, "_canon_absorbed_refs", None) or ())


def _mergeable(head, event):
    """Whether Hermes merges `event` into the waiting `head` (a picture or a file on either)."""
    photo = getattr(getattr(event, "message_type", None), "value", None) == "photo" or \
        getattr(getattr(head, "message_type", None), "value", None) == "photo"
    return photo or bool(getattr(head, "media_urls", None)) or bool(getattr(event, "media_urls", None))


class BusySeam:
    """Mixin of the adapter, before `BasePlatformAdapter` (whose `_pending_messages` is the head
    slot and whose `set_busy_session_handler` it extends). The adapter provides `_note(kind,
    body)`, `_ref(event)`, `_key(source)` and `_dequeued(key, event)`, and calls `_init_busy()` in `__init__`."""

    def _init_busy(self):
        self._runner = self._delegate = None
        self._routing = False  # every attribute of RUNNER_ATTRS verified
        self._cut = set()  # sessions whose running agent this adapter interrupted
        self._sentinel = self._blocking = self._command = None  # Hermes' own, read with the handler

    def _depth(self, key):
        """Head slot + the runner's FIFO overflow + the session's messages in the runner's
        startup-restore queue (they run after the restore, like queued follow-ups)."""
        queued = getattr(self._runner, "_queued_events", None) or {}
        restoring = getattr(self._runner, "_startup_restore_queue", None) or ()
        waiting = sum(1 for e in restoring if getattr(e, "source", None) is not None
                      and self._key(e.source) == key)
        return (1 if key in self._pending_messages else 0) + len(queued.get(key) or ()) + waiting

    def _drop_queue(self, key):
        self._pending_messages.pop(key, None)
        (getattr(self._runner, "_queued_events", None) or {}).pop(key, None)

    def _wrapper_owned(self):
        current = getattr(self._runner, "_promote_queued_event", None)
        return getattr(current, "_canon_owner", None) is self

    def set_busy_session_handler(self, handler):
        old = self._runner
        if old is not None and self._wrapper_owned():  # restore only our own wrappers
            old._promote_queued_event = old._promote_queued_event._canon_original
            if getattr(old._run_agent, "_canon_owner", None) is self:
                old._run_agent = old._run_agent._canon_original
        runner = getattr(handler, "__self__", None)
        self._delegate, self._runner = handler, runner
        missing = [a for a in RUNNER_ATTRS if not hasattr(runner, a)] if runner is not None else ["runner"]
        try:
            import gateway.run as run
            from gateway.platforms.base import MessageType
            from tools.approval import has_blocking_approval
            self._sentinel, self._blocking = run._AGENT_PENDING_SENTINEL, has_blocking_approval
            self._command = MessageType.COMMAND
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
            key = kwargs.get("session_key", args[0] if args else None)
            target = kwargs.get("adapter", args[1] if len(args) > 1 else None)
            if target is self and RUN_DEPTH.get() >= runner._MAX_INTERRUPT_DEPTH:
                pending = kwargs.get("pending_event", args[2] if len(args) > 2 else None)
                return self._hold_at_depth_cap(key, pending)
            result = original(*args, **kwargs)
            if result is not None and target is self and not runner._draining:
                self._dequeued(key, result)
            return result
        promote._canon_original, promote._canon_owner = original, self
        runner._promote_queued_event = promote

        current_run = runner._run_agent
        original_run = getattr(current_run, "_canon_original", current_run)

        async def run_agent(*args, **kwargs):
            token = RUN_DEPTH.set(int(kwargs.get("_interrupt_depth") or 0))
            try:
                return await original_run(*args, **kwargs)
            finally:
                RUN_DEPTH.reset(token)
        run_agent._canon_original, run_agent._canon_owner = original_run, self
        runner._run_agent = run_agent

    def _hold_at_depth_cap(self, key, pending):
        """At the recursion cap: keep the next follow-up (the one the runner just took from the
        head slot, else the overflow's head) at the head of the queue, in order, and tell the
        runner there is nothing to run inside this run. Hermes' drain runs it next."""
        head = pending
        if head is None:
            overflow = (self._runner._queued_events or {}).get(key)
            if overflow:
                head = overflow.pop(0)
                if not overflow:
                    self._runner._queued_events.pop(key, None)
        if head is not None:
            self._pending_messages[key] = head
            log.info("canon-hermes: follow-up for %s left queued at the recursion cap", key)
        return None

    def _enqueue(self, key, event):
        """Queue a follow-up behind every earlier one: between Hermes' drain taking the head slot
        and the next promotion the slot is empty while older messages wait in the overflow, and
        the runner would put a newcomer in the slot, ahead of them.

        When a picture or file is involved, Hermes merges the newcomer into the waiting head
        event instead (album semantics); the merged event's reference is then kept on the head
        (`_canon_absorbed_refs`), so the daemon counts its message among those the head's turn
        answers. A follow-up Hermes neither queues nor merges (its queue is full) is logged."""
        queued = self._runner._queued_events or {}
        if key not in self._pending_messages and queued.get(key):
            queued[key].append(event)
            return
        head = self._pending_messages.get(key)
        self._runner._queue_or_replace_pending_event(key, event)
        overflow = (self._runner._queued_events or {}).get(key) or ()
        if self._pending_messages.get(key) is event or any(e is event for e in overflow):
            return
        if head is not None and self._pending_messages.get(key) is head and _mergeable(head, event):
            head._canon_absorbed_refs = absorbed_refs(head) + [self._ref(event)] + absorbed_refs(event)
        else:
            log.warning("canon-hermes: Hermes did not queue a follow-up for %s (queue full)", key)

    def _delegate_for(self, event, key):
        """Whether the runner's own handler decides (hermes-host.md §12.3 step 1)."""
        if not self._routing or event.internal or event.message_type == self._command:
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
        runner, intent = self._runner, delivery_intent(event) or "queue"
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
            self._enqueue(key, event)
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
        self._enqueue(key, event)
        return self._queue_changed(key, event)

    def _queue_changed(self, key, event):
        self._note("queue.depth", {"session_key": key, "chat_id": event.source.chat_id,
                                   "depth": self._depth(key)})
        return True
