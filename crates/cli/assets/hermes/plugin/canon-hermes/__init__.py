"""Canon platform for Hermes Agent: a thin forwarder to `canon-hermes serve --stdio`.

Every gateway call becomes one JSON-lines frame to the Rust daemon (hermes-host.md §19); the
daemon's requests become Hermes calls. All Canon logic lives in the daemon; this package only holds
what needs Hermes objects or this process. This module is what Hermes imports: `register()` (the
host-version gate, the hooks, the skill, the platform entry), the tool hooks, the requirements
check and the home-channel seed (both the daemon's probe) and the out-of-process
`standalone_send`. The rest is in `_daemon.py` (the child process and its supervision),
`_adapter.py` (the adapter class, imported only inside Hermes), `_busy.py` (the busy-input seam),
`_tools.py` (the model-facing Canon tools), `_api.py` (the domain-plugin API, importable as
`canon_hermes_plugin`) and `_constants.py` (what the shim shares with the Rust side). Standard
library only.
"""

import logging

from ._constants import (AUDITED_HERMES, AUDITED_PYTHON, MAX_MESSAGE_LENGTH, PLATFORM, STANDALONE_ERROR_PREFIX,
                         STANDALONE_FAILED, TIMEOUTS)
from ._daemon import HERE, MANIFEST, SUPERVISOR, call, hermes_version, python_version, turn_ctx
from ._tools import register_tools

HOOK_TEXT_LIMIT = 16384  # code points of a hook's `args` or `result` string sent to the daemon
PLATFORM_DEFAULTS = {"allowed_users_env": "CANON_ALLOWED_USERS", "allow_all_env": "CANON_ALLOW_ALL_USERS",
                     "max_message_length": MAX_MESSAGE_LENGTH, "cron_deliver_env_var": "CANON_HOME_CHANNEL",
                     "install_hint": "Run canon-hermes install", "platform_hint": "", "emoji": "C"}

log = logging.getLogger("canon_hermes")


# The refusal of a host outside the audited pair, worded as `canon-hermes install` words it
# (cli.md §7.2): found Hermes, found Python, binary version, audited Hermes, audited Python.
UNSUPPORTED_HOST = ("Unsupported Hermes host: hermes-agent %s on Python %s. canon-hermes %s supports exactly "
                    "hermes-agent %s on Python %s.")


def host_refusal():
    """The refusal text when this host is outside the audited pair of the manifest (the shim's
    own constants when there is no manifest), else None."""
    audited = MANIFEST.get("audited_host") or {}
    want_hermes, want_python = audited.get("hermes_agent", AUDITED_HERMES), audited.get("python", AUDITED_PYTHON)
    py, hermes = python_version(), hermes_version()
    if hermes != want_hermes or not py.startswith(want_python + "."):
        found = "not installed" if hermes == "none" else hermes
        return UNSUPPORTED_HOST % (found, py, MANIFEST.get("binary_version", "unknown"), want_hermes, want_python)
    return None


def _make_adapter_class():
    """The adapter class; importing it imports Hermes, so only `register()` asks for it."""
    from ._adapter import CanonAdapter
    return CanonAdapter


def _hook(kind):
    def forward(**kwargs):
        ctx, d = turn_ctx(), SUPERVISOR.peek()
        if ctx.get("platform") != PLATFORM or d is None:
            return None
        body = {k: v for k, v in kwargs.items() if isinstance(v, (str, int, float, bool, dict, list, type(None)))}
        for big in ("args", "result"):
            if isinstance(body.get(big), str):
                body[big] = body[big][:HOOK_TEXT_LIMIT]
        d.notify("hook." + kind, dict(body, ctx=ctx))
        return None
    return forward


def _probe():
    """The daemon's offline `probe` without a config (hermes-host.md §19.6); {} when it fails. A
    crash loop of the previous adapter's child does not refuse it: the gateway checks readiness
    before each reconnect with a fresh adapter, whose connect starts a fresh count."""
    try:
        d = SUPERVISOR.get(new_attempt=True)
        return d.call("probe", {"config": None, "verify": False}, TIMEOUTS["probe"])
    except Exception as exc:
        log.warning("canon-hermes: readiness probe failed: %s", exc)
        return {}


def check_requirements():
    """The daemon's offline `probe` decides: its resolver (cli.md §5.1), not a look at one variable
    (a bare CANON_API_KEY without CANON_ENVIRONMENT_ID does not resolve). Cheap: the gateway needs
    the daemon anyway, and the probe makes no network call. Why it fails is logged."""
    probe = _probe()
    if not probe.get("configured") and probe.get("error"):
        log.warning("canon-hermes: Canon credentials do not resolve: %s", probe["error"])
    return bool(probe.get("configured"))


def env_enablement():
    """Hermes' `env_enablement_fn`: the probe's seed (the home channel from CANON_HOME_CHANNEL,
    labelled CANON_HOME_CHANNEL_NAME; hermes-host.md §7.3), or None."""
    seed = _probe().get("seed")
    return seed if isinstance(seed, dict) else None


async def standalone_send(pconfig, chat_id, message, *, thread_id=None, media_files=None, force_document=False):
    """Out-of-process delivery (hermes-host.md §15): the daemon's `standalone.send`."""
    home = getattr(pconfig, "home_channel", None)
    if home is not None and not isinstance(home, dict):
        home = home.to_dict() if hasattr(home, "to_dict") else {"chat_id": getattr(home, "chat_id", None)}
    try:
        body = await call("standalone.send", {
            "pconfig": {"extra": dict(getattr(pconfig, "extra", None) or {}), "home_channel": home},
            "chat_id": chat_id, "message": message, "thread_id": thread_id,
            "media_files": list(media_files or []), "force_document": bool(force_document)})
    except Exception as exc:
        return {"error": STANDALONE_ERROR_PREFIX + str(exc)}
    if body.get("success"):
        return {"success": True, "message_id": body.get("message_id")}
    return {"error": body.get("error") or STANDALONE_FAILED}


def _install_api():
    """The domain-plugin API as module `canon_hermes_plugin` (`_api.py`, runtime-control.md §7)."""
    from ._api import install_module
    install_module()


def _refused_factory(refusal):
    def factory(_cfg):
        raise RuntimeError(refusal)
    return factory


def _register_skills(ctx):
    """The manifest's skills (the generated rich-cards skill), as `canon-hermes:<name>`."""
    if not hasattr(ctx, "register_skill"):
        return
    for skill in MANIFEST.get("skills", []):
        path = HERE / skill.get("path", "")
        if skill.get("name") and path.is_file():
            ctx.register_skill(skill["name"], path, skill.get("description", ""))


def register(ctx):
    platform = MANIFEST.get("platform", {})
    entry = {k: platform.get(k, v) for k, v in PLATFORM_DEFAULTS.items()}
    refusal = host_refusal()
    if refusal:
        # cli.md §7.2: the platform stays listed with a failing check whose hint says why; the
        # gateway logs "Platform 'Canon' requirements not met (<refusal>)". No hooks, no adapter.
        log.error("canon-hermes: %s", refusal)
        ctx.register_platform(name=PLATFORM, label=platform.get("label", "Canon"),
                              adapter_factory=_refused_factory(refusal), check_fn=lambda: False,
                              **dict(entry, install_hint=refusal))
        return
    adapter_class = _make_adapter_class()
    _install_api()
    for kind in ("pre_tool_call", "post_tool_call", "subagent_stop"):
        ctx.register_hook(kind, _hook(kind))
    _register_skills(ctx)
    register_tools(ctx, check_requirements)
    ctx.register_platform(
        name=PLATFORM, label=platform.get("label", "Canon"), adapter_factory=lambda cfg: adapter_class(cfg),
        check_fn=check_requirements, env_enablement_fn=env_enablement, standalone_sender_fn=standalone_send,
        **entry)
