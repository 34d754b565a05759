"""The golden stdio lines through the shim's own frame functions (run by shim_golden.rs).

Usage: python3 -B shim_golden.py <shim package dir> <fixtures/stdio dir>

`shim.jsonl` holds what the shim sends (requests, notifications) and the daemon's responses to
it; `daemon.jsonl` the daemon's requests and notifications and the shim's responses. Each line
the shim sends must be what its envelope builder and `encode` produce from the decoded frame,
byte for byte except that the shim escapes non-ASCII characters (both are valid JSON lines).
Each line the daemon sends must pass the shim's `decode`: a response settles a request's future
with its body or its error, a request or notification is a typed frame with an object body.
Prints one JSON object per line: file, line number, kind and what was checked.
"""

import concurrent.futures
import importlib.util
import json
import sys
from pathlib import Path

package, fixtures = Path(sys.argv[1]), Path(sys.argv[2])
spec = importlib.util.spec_from_file_location("shim", package / "__init__.py",
                                              submodule_search_locations=[str(package)])
shim = importlib.util.module_from_spec(spec)
sys.modules["shim"] = shim
spec.loader.exec_module(shim)
from shim import _daemon  # noqa: E402  (the package is loaded above)

SENDERS = {"shim.jsonl": {"request": "shim", "notification": "shim", "response": "daemon"},
           "daemon.jsonl": {"request": "daemon", "notification": "daemon", "response": "shim"}}


def ascii_escaped(line):
    """`line` with each non-ASCII character escaped as `json.dumps` escapes it."""
    return "".join(c if ord(c) < 128 else json.dumps(c)[1:-1] for c in line)


def kind_of(frame):
    if _daemon.is_response(frame):
        return "response"
    return "request" if "id" in frame else "notification"


def encoded(frame, kind):
    """The line the shim writes for this frame, rebuilt with its own envelope builders."""
    if kind == "request":
        rebuilt = _daemon.request_frame(frame["type"], frame["id"], frame["body"])
    elif kind == "notification":
        rebuilt = _daemon.notification_frame(frame["type"], frame["body"])
    elif frame["ok"]:
        rebuilt = _daemon.response_frame(frame["id"], frame["re"], frame["body"])
    else:
        rebuilt = _daemon.response_frame(frame["id"], frame["re"], error=frame["error"])
    return _daemon.encode(rebuilt)


def check_decoded(frame, kind, where):
    assert frame["v"] == _daemon.PROTOCOL, where
    if kind == "response":
        fut = concurrent.futures.Future()
        _daemon.settle(fut, frame)
        if frame["ok"]:
            assert fut.result(0) == frame["body"], where
        else:
            err = fut.exception(0)
            assert isinstance(err, _daemon.DaemonError), where
            assert {"code": err.code, "message": str(err), "retryable": err.retryable} == frame["error"], where
    else:
        assert isinstance(frame.get("type"), str) and isinstance(frame.get("body"), dict), where


for name, senders in SENDERS.items():
    for number, line in enumerate((fixtures / name).read_text("utf-8").splitlines(), 1):
        where = "%s:%d: %s" % (name, number, line)
        raw = line.encode("utf-8") + b"\n"  # as the reader thread gets it from the pipe
        frame = _daemon.decode(raw)
        kind = kind_of(frame)
        if senders[kind] == "shim":
            got = encoded(frame, kind)
            assert got == ascii_escaped(line).encode("ascii") + b"\n", "%s\n  shim writes %r" % (where, got)
            checked = "encoded"
        else:
            check_decoded(frame, kind, where)
            checked = "decoded"
        print(json.dumps({"file": name, "line": number, "kind": kind, "checked": checked}))
