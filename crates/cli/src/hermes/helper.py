"""The one-shot helpers canon-hermes runs in the Hermes Python (cli.md §2.3).

Run as `<hermes python> -I -c <this program>` with HERMES_HOME set to the resolved profile home.
stdin holds one JSON request `{"helper": <name>, "body": {...}}`; stdout gets exactly one JSON
line, `{"ok": true, "body": {...}}` or `{"ok": false, "error": <message>}`. Anything Hermes prints
itself goes to stderr. Secrets travel on stdin, never in argv.

Helpers: `host.probe` (read-only facts about the host and the profile, read with Hermes' own
functions where it has them; it imports Hermes lazily so that it also answers on a Python without
Hermes, and it writes nothing; `install`, `uninstall` and `doctor` use it), `config.write` (the
config.yaml changes of install and uninstall, cli.md §3.2), `env.access` (the first-setup access
rule of cli.md §3.2), `env.get` (`setup` calls it first to prove Hermes' config helpers import)
and `env.set` (the `.env` changes of `setup`, cli.md §4.3 step 11, §4.4 step 4, §4.5 step 4,
and of `uninstall --purge-credentials`).

config.yaml keeps what the operator wrote (cli.md §3.2): `config.write` receives the text
canon-hermes' own editor made (crates/cli/src/hermes/config_edit.rs), parses the old and the new
text with the loader Hermes itself uses, and writes the new text only when it holds exactly the
intended change (`apply_install` / `apply_uninstall`) and nothing else. When the editor refused
the file, or its text fails that check, a round-trip edit with ruamel.yaml gets the same check;
when that is unavailable or fails too, Hermes' own `save_config` writes the change (comments are
lost then, and the answer says so). Before the first change to an existing config.yaml or .env,
its bytes are kept once beside it as `<name>.before-canon-hermes` (mode 0600, never overwritten).
`.env` is changed only through Hermes' `save_env_value` / `remove_env_value`.
"""

import copy
import io
import json
import os
import stat
import sys
import tempfile
from pathlib import Path

CONFIG_IMPORT_ERROR = "Could not import Hermes config helpers: %s"
PLUGIN_DIR = "canon-hermes"
# The suffix of the one copy of config.yaml and .env kept before canon-hermes first changes them.
BACKUP_SUFFIX = ".before-canon-hermes"
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


def yaml_load(text):
    """`text` parsed by the loader Hermes reads config.yaml with (utils.fast_safe_load)."""
    try:
        from utils import fast_safe_load as load
    except Exception:
        from yaml import safe_load as load
    return load(text)


def same(a, b):
    """Whether two parsed YAML values are equal, types included (`1`, `1.0` and `true` differ;
    NaN equals NaN); mapping order does not count."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    return type(a) is type(b) and a == b


def apply_install(cfg, plugin_key, platform_key):
    """cli.md §3.2 on a parsed config, in place: `plugins.enabled` holds plugin_key (appended when
    missing; a `plugins` or `enabled` that is no mapping or list is replaced), and
    `platforms.<platform_key>.enabled` is True. Returns (plugin changed, platform changed).
    crates/cli/src/hermes/config_edit.rs makes the same change on the text."""
    if not isinstance(cfg.get("plugins"), dict):
        cfg["plugins"] = {}
    if not isinstance(cfg["plugins"].get("enabled"), list):
        cfg["plugins"]["enabled"] = []
    enabled = cfg["plugins"]["enabled"]
    plugin_now = plugin_key not in enabled
    if plugin_now:
        enabled.append(plugin_key)
    if not isinstance(cfg.get("platforms"), dict):
        cfg["platforms"] = {}
    if not isinstance(cfg["platforms"].get(platform_key), dict):
        cfg["platforms"][platform_key] = {}
    platform = cfg["platforms"][platform_key]
    platform_now = platform.get("enabled") is not True
    if platform_now:
        platform["enabled"] = True
    return plugin_now, platform_now


def apply_uninstall(cfg, plugin_key, platform_key):
    """cli.md §3.5 on a parsed config, in place: plugin_key leaves `plugins.enabled` (an emptied
    `enabled` goes, and an emptied `plugins`); `platforms.<platform_key>` holding only `enabled`
    goes (and an emptied `platforms`), one holding other keys gets `enabled: False`. Returns
    (plugin changed, platform changed)."""
    plugin_now = platform_now = False
    plugins = cfg.get("plugins")
    enabled = plugins.get("enabled") if isinstance(plugins, dict) else None
    if isinstance(enabled, list) and plugin_key in enabled:
        plugin_now = True
        for i in reversed(range(len(enabled))):
            if enabled[i] == plugin_key:
                del enabled[i]
        if not enabled:
            del plugins["enabled"]
            if not plugins:
                del cfg["plugins"]
    platforms = cfg.get("platforms")
    platform = platforms.get(platform_key) if isinstance(platforms, dict) else None
    if isinstance(platform, dict) and platform:
        if set(platform) == {"enabled"}:
            platform_now = True
            del platforms[platform_key]
            if not platforms:
                del cfg["platforms"]
        elif platform.get("enabled") is not False:
            platform_now = True
            platform["enabled"] = False
    return plugin_now, platform_now


CHANGES = {"install": apply_install, "uninstall": apply_uninstall}


def fsync_dir(directory):
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path, data):
    """`data` replaces the file at `path` (through a symbolic link, onto its target, as Hermes'
    atomic_replace does): temp file in the same directory, fsync, rename, fsync the directory;
    the file keeps its mode (and, for root, its owner)."""
    real = os.path.realpath(path) if os.path.islink(path) else str(path)
    directory = os.path.dirname(real) or "."
    try:
        old = os.stat(real)
    except FileNotFoundError:
        old = None
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".%s." % os.path.basename(real), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if old is not None:
                os.fchmod(f.fileno(), stat.S_IMODE(old.st_mode))
                if os.geteuid() == 0:
                    try:
                        os.fchown(f.fileno(), old.st_uid, old.st_gid)
                    except OSError:
                        pass
            os.fsync(f.fileno())
        os.replace(tmp, real)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(directory)


def backup_once(path, data):
    """Keeps `data` (the bytes of `path` before canon-hermes first changes it) as
    `<path>.before-canon-hermes`, mode 0600, unless that file exists: it is written once and
    never replaced. Returns (backup path, whether it was written now)."""
    path = Path(path)
    backup = path.with_name(path.name + BACKUP_SUFFIX)
    if os.path.lexists(backup):
        return str(backup), False
    fd, tmp = tempfile.mkstemp(dir=str(path.parent), prefix=".%s." % backup.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), 0o600)
            os.fsync(f.fileno())
        try:
            os.link(tmp, backup)  # fails when the backup exists: it is never overwritten
        except FileExistsError:
            return str(backup), False
        except OSError:  # a file system without hard links: create it exclusively instead
            try:
                out = os.open(backup, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                return str(backup), False
            with os.fdopen(out, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    fsync_dir(str(path.parent))
    return str(backup), True


def as_mapping(data, path):
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise HelperError("%s does not hold a YAML mapping" % path)
    return data


def ruamel_edit(text, change, plugin_key, platform_key):
    """The change made by a ruamel.yaml round trip (comments kept; Hermes' own
    utils.atomic_roundtrip_yaml_update edits single keys the same way, with indentation 2, 4, 2,
    tried first here), in the indentation of those tried that leaves the fewest lines changed;
    None when ruamel.yaml is unavailable or fails."""
    try:
        from ruamel.yaml import YAML
        from ruamel.yaml.comments import CommentedMap
    except Exception:
        return None
    import difflib
    best = None
    for mapping, sequence, offset in ((2, 4, 2), (2, 2, 0), (4, 6, 2), (4, 4, 0), (4, 4, 2)):
        try:
            yaml = YAML()
            yaml.preserve_quotes = True
            yaml.allow_unicode = True
            yaml.width = 4096
            yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
            yaml.explicit_start = text.lstrip().startswith("---")
            data = yaml.load(text)
            if data is None:
                data = CommentedMap()
            if not isinstance(data, dict):
                return None
            CHANGES[change](data, plugin_key, platform_key)
            out = io.StringIO()
            yaml.dump(data, out)
            candidate = out.getvalue()
        except Exception:
            continue
        old, new = text.splitlines(), candidate.splitlines()
        matched = sum(b.size for b in difflib.SequenceMatcher(None, old, new, autojunk=False).get_matching_blocks())
        changed = len(old) + len(new) - 2 * matched
        if best is None or changed < best[0]:
            best = (changed, candidate)
    return best[1] if best else None


def config_write(body):
    """cli.md §3.2: the change `body.change` ("install" or "uninstall") of `plugins.enabled` and
    `platforms.<platform_key>`, written the first of these ways whose result parses to exactly
    the old config with the change applied: `new_text` (canon-hermes' editor, given unless it
    refused the file; `old_text` is what it read, and the file must still hold it), a ruamel.yaml
    round trip, Hermes' save_config. The old bytes are kept once before the first write. A config
    that does not exist yet is created by save_config (install) or left alone (uninstall)."""
    change, plugin_key, platform_key = body["change"], body["plugin_key"], body["platform_key"]
    apply = CHANGES[change]
    config = hermes_config()
    path = Path(config.get_config_path())
    answer = {"plugin_changed": False, "platform_changed": False, "saved": False, "method": None,
              "backup": None, "backup_created": False}
    if not path.exists():
        if change != "install":
            return answer
        cfg = config.load_config()
        plugin_now, platform_now = apply(cfg, plugin_key, platform_key)
        if config.is_managed():
            raise HelperError(config.format_managed_message("save configuration"))
        config.save_config(cfg)
        answer.update(plugin_changed=plugin_now, platform_changed=platform_now, saved=True,
                      method="save_config")
        return answer
    current = path.read_bytes()
    old_text = body.get("old_text")
    if old_text is not None and current != old_text.encode("utf-8"):
        raise HelperError("%s changed while canon-hermes was editing it; run the command again" % path)
    try:
        old = as_mapping(yaml_load(current), path)
    except HelperError:
        raise
    except Exception as exc:
        raise HelperError("%s cannot be read: %s" % (path, " ".join(str(exc).split()))) from None
    want = copy.deepcopy(old)
    plugin_now, platform_now = apply(want, plugin_key, platform_key)
    answer.update(plugin_changed=plugin_now, platform_changed=platform_now)
    if not (plugin_now or platform_now):
        return answer
    if config.is_managed():
        raise HelperError(config.format_managed_message("save configuration"))

    def verified(candidate):
        try:
            return same(as_mapping(yaml_load(candidate), path), want)
        except Exception:
            return False

    try:
        text = current.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    candidates = [("text", lambda: body.get("new_text")),
                  ("ruamel", lambda: text and ruamel_edit(text, change, plugin_key, platform_key))]
    for method, make in candidates:
        candidate = make()
        if candidate is not None and verified(candidate):
            answer["backup"], answer["backup_created"] = backup_once(path, current)
            if path.read_bytes() != current:
                raise HelperError("%s changed while canon-hermes was editing it; run the command again" % path)
            write_atomic(path, candidate.encode("utf-8"))
            answer.update(saved=True, method=method)
            return answer
    answer["backup"], answer["backup_created"] = backup_once(path, current)
    cfg = config.load_config()
    apply(cfg, plugin_key, platform_key)
    config.save_config(cfg)
    answer.update(saved=True, method="save_config")
    return answer


def env_defines(path, key):
    """Whether the .env at `path` has a `KEY=` or `export KEY=` line (Hermes' own matching)."""
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as f:
            lines = f.readlines()
    except OSError:
        return False
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("export "):
            stripped = stripped[7:].lstrip()
        if stripped.startswith(key + "="):
            return True
    return False


def backup_env(config, changing):
    """Keeps the profile's .env once before its first change (`changing` says a change will be
    made); returns (backup path or None, whether it was written now)."""
    path = Path(config.get_env_path())
    if not changing or not path.is_file():
        return None, False
    return backup_once(path, path.read_bytes())


def env_access(_body):
    """cli.md §3.2 access rule: with neither CANON_ALLOWED_USERS nor CANON_ALLOW_ALL_USERS set
    (process environment, then .env), CANON_ALLOW_ALL_USERS=true goes into .env."""
    config = hermes_config()
    answer = {"access": "already_configured", "access_error": None, "backup": None,
              "backup_created": False}
    allowed = (config.get_env_value("CANON_ALLOWED_USERS") or "").strip()
    allow_all = (config.get_env_value("CANON_ALLOW_ALL_USERS") or "").strip()
    if not allowed and not allow_all:
        refusal = env_refusal(config, "CANON_ALLOW_ALL_USERS")
        if refusal:
            answer.update(access="refused", access_error=refusal)
        else:
            answer["backup"], answer["backup_created"] = backup_env(config, True)
            config.save_env_value("CANON_ALLOW_ALL_USERS", "true")
            answer["access"] = "set_allow_all"
    return answer


def env_get(body):
    config = hermes_config()
    return {"values": {key: config.get_env_value(key) for key in body.get("keys", [])}}


def env_set(body):
    """cli.md §2.3: `set` through save_env_value, then `remove` through remove_env_value (a key
    that is not there is left alone). Every key is checked first, so a refusal changes nothing.
    An existing .env is kept once before its first change. Answers the keys removed."""
    config = hermes_config()
    checks = [(key, "set") for key in body.get("set", {})]
    checks += [(key, "remove") for key in body.get("remove", [])]
    for key, action in checks:
        refusal = env_refusal(config, key, action)
        if refusal:
            raise HelperError(refusal)
    env_path = config.get_env_path()
    present = [key for key in body.get("remove", []) if env_defines(env_path, key)]
    backup, created = backup_env(config, bool(body.get("set")) or bool(present))
    for key, value in body.get("set", {}).items():
        config.save_env_value(key, value)
    removed = [key for key in body.get("remove", []) if config.remove_env_value(key)]
    return {"ok": True, "removed": removed, "backup": backup, "backup_created": created}


HELPERS = {"host.probe": host_probe, "config.write": config_write, "env.access": env_access,
           "env.get": env_get, "env.set": env_set}


def main():
    request = json.loads(sys.stdin.read() or "{}")
    out, sys.stdout = sys.stdout, sys.stderr  # stdout carries our one line only
    try:
        answer = {"ok": True, "body": HELPERS[request["helper"]](request.get("body") or {})}
    except HelperError as exc:
        answer = {"ok": False, "error": str(exc)}
    out.write(json.dumps(answer) + "\n")
    out.flush()


if __name__ == "__main__":  # `python -c` runs it; a test may import its functions instead
    main()
