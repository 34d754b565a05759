"""The one-shot helpers canon-hermes runs in the Hermes Python (cli.md §2.3).

Run as `<hermes python> -I -c <this program>` with HERMES_HOME set to the resolved profile home.
stdin holds one JSON request `{"helper": <name>, "body": {...}}`; stdout gets exactly one JSON
line, `{"ok": true, "body": {...}}` or `{"ok": false, "error": <message>}`. Anything Hermes prints
itself goes to stderr. Config and .env are read and written only through Hermes' own
`hermes_cli.config` functions, so YAML formatting, default stripping, file modes, managed-scope
guards and .env quoting are Hermes'. Secrets travel on stdin, never in argv.

Helpers: `host.probe` (read-only facts about the host and the profile, read with Hermes' own
functions where it has them; it imports Hermes lazily so that it also answers on a Python without
Hermes, and it writes nothing; `install` and `doctor` use it), `config.install`
(the config.yaml changes and the access rule of cli.md §3.2), `env.get` (`setup` calls it first
to prove Hermes' config helpers import) and `env.set` (the `.env` changes of `setup`:
cli.md §4.3 step 11, §4.4 step 4, §4.5 step 4).
"""

import copy
import json
import os
import sys

CONFIG_IMPORT_ERROR = "Could not import Hermes config helpers: %s"
PLUGIN_DIR = "canon-hermes"
# The GATEWAY_MULTIPLEX_PROFILES tokens Hermes recognises (gateway/config.py, hermes-agent 0.19.0).
TRUTHY, FALSY = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


class HelperError(Exception):
    """A refusal with a message for the operator."""


def hermes_config():
    try:
        from hermes_cli import config
    except Exception as exc:
        raise HelperError(CONFIG_IMPORT_ERROR % exc) from None
    return config


def merged(defaults, raw):
    """`raw` over a copy of `defaults`, mappings merged key by key (as Hermes loads config)."""
    out = copy.deepcopy(defaults)
    for key, value in raw.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def bool_token(value):
    """Hermes' reading of a bool-ish setting: True, False, or None when it is neither."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        token = value.strip().lower()
        return True if token in TRUTHY else False if token in FALSY else None
    return None if value is None else bool(value)


def section(config, key):
    value = config.get(key)
    return value if isinstance(value, dict) else {}


def entry_point_conflict():
    """The version of an installed distribution exposing the `canon-hermes` Hermes plugin entry
    point, which would replace the shim (hermes-host.md §2.1), else None."""
    import importlib.metadata as metadata
    try:
        points = metadata.entry_points(group="hermes_agent.plugins")
    except Exception:
        return None
    for point in points:
        if point.name == PLUGIN_DIR:
            dist = getattr(point, "dist", None)
            return getattr(dist, "version", None) or "unknown"
    return None


def shim_state(home):
    directory = os.path.join(home, "plugins", PLUGIN_DIR)
    manifest = None
    try:
        with open(os.path.join(directory, "manifest.json"), encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        pass
    return {"present": os.path.isdir(directory), "manifest": manifest}


def unreadable_config(path):
    """Why an existing config.yaml cannot be used, else None. Hermes would load defaults in its
    place (and a save would replace the user's file), so install refuses it instead."""
    if not path.exists():
        return None
    try:
        from utils import fast_safe_load as load
    except Exception:
        from yaml import safe_load as load
    try:
        with open(path, encoding="utf-8") as f:
            data = load(f)
    except Exception as exc:
        return "%s cannot be read: %s" % (path, " ".join(str(exc).split()))
    if data is not None and not isinstance(data, dict):
        return "%s does not hold a YAML mapping" % path
    return None


def importable(name):
    """Whether module `name` can be found (a source checkout has no distribution metadata)."""
    import importlib.util
    try:
        return importlib.util.find_spec(name) is not None
    except Exception:
        return False


def approvals_mode(effective):
    """`approvals.mode` as Hermes reads it: 'manual', 'smart' or 'off'. A copy of
    tools/approval.py `_normalize_approval_mode` (hermes-agent 0.19.0): importing that module
    creates the profile's directory skeleton, and the probe writes nothing. YAML's bare `off`
    arrives as False; an unknown or blank value means manual."""
    mode = section(effective, "approvals").get("mode", "manual")
    if isinstance(mode, bool):
        return "manual" if mode else "off"
    if isinstance(mode, str):
        token = mode.strip().lower()
        return token if token in ("manual", "smart", "off") else "manual"
    return "manual"


def streaming_enabled(raw):
    """Whether the gateway streams: the raw `streaming` section (else `gateway.streaming`) as
    gateway/config.py `load_gateway_config` picks it, read by its `StreamingConfig.from_dict`
    (the `mode` alias, bool-ish strings). Defaults are not merged in: a merged default
    `enabled: False` would hide the `mode` alias."""
    chosen = raw.get("streaming")
    if not isinstance(chosen, dict):
        chosen = section(raw, "gateway").get("streaming")
    chosen = chosen if isinstance(chosen, dict) else {}
    try:
        from gateway.config import StreamingConfig
    except Exception:
        return bool_token(chosen.get("enabled")) is True
    return bool(StreamingConfig.from_dict(chosen).enabled)


def host_probe(_body):
    import importlib.metadata as metadata
    try:
        hermes_version = metadata.version("hermes-agent")
    except metadata.PackageNotFoundError:
        hermes_version = None
    home = os.environ.get("HERMES_HOME", "")
    facts = {
        "hermes_version": hermes_version, "hermes_importable": importable("hermes_cli"),
        "python_version": "%d.%d.%d" % sys.version_info[:3],
        "python_executable": sys.executable, "hermes_home": home, "profile_name": None,
        "plugins_enabled": None, "plugins_disabled": [], "canon_platform_enabled": None,
        "multiplex_profiles": False, "approvals_mode": None, "streaming_enabled": None,
        "valid_hooks": [], "pip_entry_point_conflict": entry_point_conflict(),
        "shim": shim_state(home), "config_error": None,
    }
    # A host fact, not a config one: known even when config.yaml cannot be read.
    try:
        from hermes_cli.plugins import VALID_HOOKS
        facts["valid_hooks"] = sorted(VALID_HOOKS)
    except Exception:
        pass
    try:
        config = hermes_config()
    except HelperError as exc:
        facts["config_error"] = str(exc)
        return facts
    broken = unreadable_config(config.get_config_path())
    if broken:
        facts["config_error"] = broken
        return facts
    # read_raw_config() creates nothing, unlike load_config() (which makes the profile's
    # directory skeleton), so a refused install leaves the profile as it was.
    raw = config.read_raw_config()
    effective = merged(config.DEFAULT_CONFIG, raw)
    plugins, gateway = section(effective, "plugins"), section(effective, "gateway")
    enabled, disabled = plugins.get("enabled"), plugins.get("disabled")
    facts["plugins_enabled"] = enabled if isinstance(enabled, list) else None
    facts["plugins_disabled"] = disabled if isinstance(disabled, list) else []
    facts["canon_platform_enabled"] = section(section(effective, "platforms"), "canon").get("enabled")
    # GATEWAY_MULTIPLEX_PROFILES, else top-level multiplex_profiles, else gateway.multiplex_profiles.
    multiplex = bool_token(os.environ.get("GATEWAY_MULTIPLEX_PROFILES"))
    if multiplex is None:
        value = effective.get("multiplex_profiles")
        multiplex = bool_token(value if value is not None else gateway.get("multiplex_profiles"))
    facts["multiplex_profiles"] = bool(multiplex)
    facts["approvals_mode"] = approvals_mode(effective)
    facts["streaming_enabled"] = streaming_enabled(raw)
    try:
        from hermes_cli.profiles import get_active_profile_name
        facts["profile_name"] = get_active_profile_name()
    except Exception:
        pass
    return facts


def env_refusal(config, key, action="set"):
    """Hermes' refusal to `action` ("set" or "remove") `key` in .env (managed install or managed
    scope), in the words of save_env_value / remove_env_value, else None."""
    if config.is_managed():
        return config.format_managed_message("%s %s" % (action, key))
    from hermes_cli import managed_scope
    if managed_scope.is_env_managed(key):
        managed_dir = managed_scope.get_managed_dir()
        src = os.path.join(str(managed_dir), ".env") if managed_dir else "the managed scope"
        return "Cannot %s %s: it is managed by your administrator (%s) and cannot be changed." % (
            action, key, src)
    return None


def config_install(body):
    """cli.md §3.2: `plugins.enabled` ∋ plugin_key (sorted), `platforms.<platform_key>.enabled` is
    True, saved only when something changed; then the first-setup access rule."""
    plugin_key, platform_key = body["plugin_key"], body["platform_key"]
    config = hermes_config()
    cfg = config.load_config()
    if not isinstance(cfg.get("plugins"), dict):
        cfg["plugins"] = {}
    if not isinstance(cfg["plugins"].get("enabled"), list):
        cfg["plugins"]["enabled"] = []
    enabled = cfg["plugins"]["enabled"]
    plugin_now = plugin_key not in enabled
    if plugin_now:
        enabled.append(plugin_key)
        enabled.sort(key=str)
    if not isinstance(cfg.get("platforms"), dict):
        cfg["platforms"] = {}
    if not isinstance(cfg["platforms"].get(platform_key), dict):
        cfg["platforms"][platform_key] = {}
    platform = cfg["platforms"][platform_key]
    platform_now = platform.get("enabled") is not True
    if platform_now:
        platform["enabled"] = True
    saved = plugin_now or platform_now
    if saved:
        if config.is_managed():
            raise HelperError(config.format_managed_message("save configuration"))
        config.save_config(cfg)
    answer = {"plugin_enabled_now": plugin_now, "platform_enabled_now": platform_now,
              "saved": saved, "access": "already_configured", "access_error": None}
    allowed = (config.get_env_value("CANON_ALLOWED_USERS") or "").strip()
    allow_all = (config.get_env_value("CANON_ALLOW_ALL_USERS") or "").strip()
    if not allowed and not allow_all:
        refusal = env_refusal(config, "CANON_ALLOW_ALL_USERS")
        if refusal:
            answer.update(access="refused", access_error=refusal)
        else:
            config.save_env_value("CANON_ALLOW_ALL_USERS", "true")
            answer["access"] = "set_allow_all"
    return answer


def env_get(body):
    config = hermes_config()
    return {"values": {key: config.get_env_value(key) for key in body.get("keys", [])}}


def env_set(body):
    """cli.md §2.3: `set` through save_env_value, then `remove` through remove_env_value (a key
    that is not there is left alone). Every key is checked first, so a refusal changes nothing."""
    config = hermes_config()
    checks = [(key, "set") for key in body.get("set", {})]
    checks += [(key, "remove") for key in body.get("remove", [])]
    for key, action in checks:
        refusal = env_refusal(config, key, action)
        if refusal:
            raise HelperError(refusal)
    for key, value in body.get("set", {}).items():
        config.save_env_value(key, value)
    for key in body.get("remove", []):
        config.remove_env_value(key)
    return {"ok": True}


HELPERS = {"host.probe": host_probe, "config.install": config_install, "env.get": env_get, "env.set": env_set}


def main():
    request = json.loads(sys.stdin.read() or "{}")
    out, sys.stdout = sys.stdout, sys.stderr  # stdout carries our one line only
    try:
        answer = {"ok": True, "body": HELPERS[request["helper"]](request.get("body") or {})}
    except HelperError as exc:
        answer = {"ok": False, "error": str(exc)}
    out.write(json.dumps(answer) + "\n")
    out.flush()


main()
