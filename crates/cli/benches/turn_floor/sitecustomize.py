"""Turn-latency probe of the turn_floor bench (crates/cli/benches/turn_floor.rs).

The bench puts this directory first on PYTHONPATH of the Hermes gateway it measures, so Python
imports this file at startup as `sitecustomize`. It timestamps the calls Hermes makes into its
platform adapter, whichever adapter that is (canon-hermes' shim or the reference plugin):
`send` and `edit_message` (each stream preview and the final text) and the processing-start and
processing-complete hooks; and, in Hermes' stream consumer, the first text delta of each
segment (a new answer, or the text after a tool boundary), the moment the agent thread hands
text to the consumer, which sends it on its next poll of its queue (every 50 ms). One JSON line per call is appended to the file named by
TURN_FLOOR_PROBE: the wall-clock time the call was made (`t`, seconds since the Unix epoch),
the call, its chat id, and for sends and edits the length of their text, `finalize`, and how
long the adapter took to answer (`took`, seconds: Hermes' stream consumer waits for it; the
line is written when the call returns). Nothing else is read or
changed; without TURN_FLOOR_PROBE the probe does nothing.
"""

import importlib.abc
import importlib.util
import json
import os
import sys
import time

_PATH = os.environ.get("TURN_FLOOR_PROBE")


def _record(**fields):
    fields.setdefault("t", time.time())
    with open(_PATH, "a", encoding="utf-8") as out:
        out.write(json.dumps(fields) + "\n")


def _chat_of_event(args):
    event = args[0] if args else None
    source = getattr(event, "source", None)
    return getattr(source, "chat_id", None)


def _wrap_content_call(cls, name):
    """Wraps `send(chat_id, content, ...)` or `edit_message(chat_id, message_id, content, ...)`
    defined on `cls` itself (Hermes calls the adapter's own methods)."""
    original = cls.__dict__.get(name)
    if original is None or getattr(original, "_turn_floor", False):
        return
    content_index = 1 if name == "send" else 2

    async def probed(self, *args, **kwargs):
        chat = kwargs.get("chat_id", args[0] if args else None)
        content = kwargs.get("content", args[content_index] if len(args) > content_index else None)
        started = time.time()
        try:
            return await original(self, *args, **kwargs)
        finally:
            _record(
                t=started,
                took=time.time() - started,
                call=name,
                chat=chat,
                n=len(content) if isinstance(content, str) else None,
                finalize=bool(kwargs.get("finalize", False)),
            )

    probed._turn_floor = True
    setattr(cls, name, probed)


def _patch(module):
    base = module.BasePlatformAdapter
    run_hook = base._run_processing_hook

    async def probed_hook(self, hook_name, *args, **kwargs):
        _record(call=hook_name, chat=_chat_of_event(args))
        return await run_hook(self, hook_name, *args, **kwargs)

    base._run_processing_hook = probed_hook
    inherited = base.__dict__.get("__init_subclass__")

    def init_subclass(cls, **kwargs):
        if inherited is not None:
            inherited.__func__(cls, **kwargs)
        for name in ("send", "edit_message"):
            _wrap_content_call(cls, name)

    base.__init_subclass__ = classmethod(init_subclass)


def _patch_consumer(module):
    """Records the first delta of each segment: `on_delta(None)` is a tool boundary, after
    which the next text starts a new segment."""
    consumer = module.GatewayStreamConsumer
    on_delta = consumer.on_delta

    def probed_on_delta(self, text):
        if text is None:
            self._turn_floor_seen = False
        elif text and not getattr(self, "_turn_floor_seen", False):
            self._turn_floor_seen = True
            _record(call="first_delta", chat=getattr(self, "chat_id", None))
        return on_delta(self, text)

    consumer.on_delta = probed_on_delta


_PATCHES = {"gateway.platforms.base": _patch, "gateway.stream_consumer": _patch_consumer}


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches Hermes' adapter base module and its stream consumer right after each is first
    imported, before any adapter class or consumer exists."""

    def find_spec(self, name, path, target=None):
        patch = _PATCHES.get(name)
        if patch is None or getattr(self, "_busy", False):
            return None
        self._busy = True  # find_spec below asks every finder again, this one included
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._busy = False
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            patch(module)

        spec.loader.exec_module = exec_module
        return spec


if _PATH:
    sys.meta_path.insert(0, _PatchOnImport())
