"""The model-facing Canon tools: registered with Hermes from the manifest `install` wrote (the
daemon owns their names, schemas and descriptions), each call forwarded to the daemon as one
`tool.call` with the trusted turn context read here, in the tool worker thread where Hermes'
session context is visible (hermes-host.md §19.6). The result string is the daemon's, verbatim.

Each tool's `check_fn` is the one its manifest entry names: `credentials` (the daemon's probe)
or `communication`, which answers from the verdict the daemon last pushed in a `tool.availability`
notification (runtime-control.md §5.1: `canon_communicate` is offered only while connected with
an open or approval-required outbound policy). A changed verdict drops Hermes' cached checks and
tool lists, so the next agent Hermes builds sees it; the daemon refuses a call the policy no
longer allows in any case. Standard library only.
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


_PUSHED_CHECKS = {}  # tool name → its `communication` check; one object each (Hermes caches by it)


def _pushed_check(name):
    """The `communication` check of tool `name`: the live child's latest verdict; False without
    one."""
    if name not in _PUSHED_CHECKS:
        def check():
            d = SUPERVISOR.peek()
            return bool(d is not None and d.available.get(name))
        check.__qualname__ = "canon_hermes.%s_available" % name
        _PUSHED_CHECKS[name] = check
    return _PUSHED_CHECKS[name]


def _forget_checks():
    """Drops what Hermes cached from earlier checks: the verdicts (30 s, and a lost True served
    for 60 s more) and the tool lists built from them (kept until the registry changes)."""
    try:
        from tools.registry import invalidate_check_fn_cache
        invalidate_check_fn_cache()
    except Exception as exc:  # an older registry: its own expiry applies
        log.debug("canon-hermes: check cache not dropped: %s", exc)
    try:
        import model_tools
        model_tools._clear_tool_defs_cache()
    except Exception as exc:
        log.debug("canon-hermes: tool list cache not dropped: %s", exc)


def tool_availability(d, body):
    """`tool.availability {name, available}` from child `d` (reader thread): keeps the verdict
    on the child, and when it changed makes Hermes check again."""
    name = body.get("name")
    if not isinstance(name, str):
        return
    available = bool(body.get("available"))
    changed = d.available.get(name, False) != available
    d.available[name] = available
    if changed:
        log.info("canon-hermes: %s is now %s", name, "available" if available else "withheld")
        _forget_checks()


def register_tools(ctx, check_fn):
    """Registers every manifest tool (synchronous handlers: hermes-host.md §7 says async ones would
    run on a loop of their own anyway) with the check its manifest entry names (`check_fn`, the
    credentials probe, unless it says `communication`) and the toolset aliases."""
    if not hasattr(ctx, "register_tool"):
        return
    for tool in MANIFEST.get("tools", []):
        if not tool.get("name") or not isinstance(tool.get("schema"), dict):
            continue
        check = _pushed_check(tool["name"]) if tool.get("check") == "communication" else check_fn
        ctx.register_tool(name=tool["name"], toolset=tool.get("toolset", "canon"), schema=tool["schema"],
                          handler=_handler(tool), check_fn=check, description=tool.get("description", ""),
                          emoji=tool.get("emoji", ""))
    aliases = MANIFEST.get("toolset_aliases") or {}
    if aliases:
        try:
            from tools.registry import registry
            for alias, target in aliases.items():
                registry.register_toolset_alias(alias, target)
        except Exception as exc:  # an older registry without aliases: the toolset itself still works
            log.warning("canon-hermes: toolset aliases not registered: %s", exc)
