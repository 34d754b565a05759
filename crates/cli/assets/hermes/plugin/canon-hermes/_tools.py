"""The model-facing Canon tools: registered with Hermes from the manifest `install` wrote (the
daemon owns their names, schemas and descriptions), each call forwarded to the daemon as one
`tool.call` with the trusted turn context read here, in the tool worker thread where Hermes'
session context is visible (hermes-host.md §19.6). The result string is the daemon's, verbatim.
Standard library only.
"""

import json
import logging

from ._daemon import MANIFEST, SUPERVISOR, turn_ctx

log = logging.getLogger("canon_hermes")

# How long a call waits for the daemon when the manifest names no timeout, in seconds
# (hermes-host.md §19.6: 120 s for every tool but canon_runtime_control).
DEFAULT_TOOL_TIMEOUT = 120
HOOK_KEYS = ("task_id", "session_id", "user_task")


def _failure(message):
    return json.dumps({"error": message, "success": False}, ensure_ascii=False)


def _handler(tool):
    name = tool["name"]
    timeout = float(tool.get("timeout_s") or DEFAULT_TOOL_TIMEOUT)

    def handle(args, **kwargs):
        hook = {k: kwargs[k] for k in HOOK_KEYS if isinstance(kwargs.get(k), str)}
        body = {"name": name, "args": args if isinstance(args, dict) else {}, "ctx": turn_ctx(), "hook": hook}
        try:
            answer = SUPERVISOR.get().call("tool.call", body, timeout)
        except Exception as exc:  # the daemon is unreachable or timed out: the model is told
            log.warning("canon-hermes: %s failed: %s", name, exc)
            return _failure("Canon tool %s failed: %s" % (name, exc))
        result = answer.get("result") if isinstance(answer, dict) else None
        return result if isinstance(result, str) else _failure("Canon returned no result for %s" % name)
    return handle


def register_tools(ctx, check_fn):
    """Registers every manifest tool (synchronous handlers: hermes-host.md §7 says async ones would
    run on a loop of their own anyway) and the toolset aliases."""
    if not hasattr(ctx, "register_tool"):
        return
    for tool in MANIFEST.get("tools", []):
        if not tool.get("name") or not isinstance(tool.get("schema"), dict):
            continue
        ctx.register_tool(name=tool["name"], toolset=tool.get("toolset", "canon"), schema=tool["schema"],
                          handler=_handler(tool), check_fn=check_fn, description=tool.get("description", ""),
                          emoji=tool.get("emoji", ""))
    aliases = MANIFEST.get("toolset_aliases") or {}
    if aliases:
        try:
            from tools.registry import registry
            for alias, target in aliases.items():
                registry.register_toolset_alias(alias, target)
        except Exception as exc:  # an older registry without aliases: the toolset itself still works
            log.warning("canon-hermes: toolset aliases not registered: %s", exc)
