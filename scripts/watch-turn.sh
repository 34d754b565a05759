#!/usr/bin/env bash
# Watch one Canon turn answered by a real Hermes gateway, offline, on this machine.
#
# Starts canon-sim (a local Canon) and its scripted model server (the LLM), writes a scratch
# HERMES_HOME (hermes-host.md §20 recipe), installs the Canon shim into it with
# `canon-hermes install`, runs `hermes gateway run` from the venv of scripts/hermes-venv.sh,
# sends one human message into the simulator and prints what Canon sees: turn states, the live
# streamed text and the durable turn_complete. Binaries come from $CARGO_TARGET_DIR when set.
# Usage: scripts/watch-turn.sh ["your message"]     (KEEP=1 keeps the scratch directory)
# CANON_HERMES=<path> installs with that canon-hermes instead of building one (with no
# `--python` when it sits in the Hermes venv's bin/, as a wheel puts it), CANON_SIM=<path> runs
# that canon-sim, and REMOVE_AFTER_INSTALL=1 deletes CANON_HERMES (and its alias beside it) once
# the plugin is installed: the gateway must then run the plugin's own copy (scripts/check-wheel.sh).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
message="${1:-Hello Hermes, what can you do?}"
venv="${HERMES_VENV:-$root/.cache/hermes-venv}"

"$root/scripts/hermes-venv.sh" >&2
bin="${CARGO_TARGET_DIR:-$root/target}/release"
canon_hermes="${CANON_HERMES:-$bin/canon-hermes}"
canon_sim="${CANON_SIM:-$bin/canon-sim}"
if [[ -z "${CANON_HERMES:-}" || -z "${CANON_SIM:-}" ]]; then
  echo "== building canon-hermes and canon-sim (release)" >&2
  cargo build --quiet --release --manifest-path "$root/Cargo.toml" -p canon-hermes -p canon-sim
fi

work="$(mktemp -d)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [[ "${KEEP:-}" == 1 ]]; then echo "scratch kept in $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

# Waits until FILE has a line starting with KEY= and prints its value.
env_value() {
  local file="$1" key="$2"
  for _ in $(seq 1 100); do
    if grep -q "^$key=" "$file" 2>/dev/null; then
      grep "^$key=" "$file" | head -1 | cut -d= -f2-
      return 0
    fi
    sleep 0.1
  done
  echo "watch-turn: $key did not appear in $file" >&2
  return 1
}

cat >"$work/script.json" <<'JSON'
{"model": "fake-model", "rules": [
  {"match": {"titleRequest": true}, "reply": {"text": "Watching a Canon turn"}},
  {"match": {}, "reply": {"delayMs": 60, "text": "Hello from Hermes through Canon. This answer is streamed word by word by a scripted model, shown live in the conversation, and then stored once as the durable turn_complete message."}}
]}
JSON

echo "== starting canon-sim and the scripted model" >&2
"$canon_sim" serve --print-env >"$work/sim.env" 2>"$work/sim.log" &
pids+=($!)
"$canon_sim" model --script "$work/script.json" --print-env >"$work/model.env" 2>"$work/model.log" &
pids+=($!)
control="$(env_value "$work/sim.env" CANON_SIM_CONTROL_URL)"
model_url="$(env_value "$work/model.env" OPENAI_BASE_URL)"

home="$work/hermes"
mkdir -p "$home"
# The Hermes profile shared with the real-gateway tests (fixtures/hermes/README.md): the model
# URL filled in (escaped for sed), no extra platform lines, and Hermes' own default busy-input
# mode.
url_replacement="$(printf '%s' "$model_url" | sed 's/[&|\\]/\\&/g')"
sed -e "s|{{model_base_url}}|$url_replacement|" -e '/{{platform_lines}}/d' \
  -e '/{{busy_input_mode}}/d' "$root/fixtures/hermes/config.yaml.tmpl" >"$home/config.yaml"
# The shim, its manifest and the rich-cards skill, the way an operator installs them.
echo "== canon-hermes install (HERMES_HOME=$home)" >&2
python_args=(--python "$venv/bin/python")
if [[ "$(dirname "$canon_hermes")" -ef "$venv/bin" ]]; then
  python_args=() # the venv's own bin/: install finds its Python by itself
fi
HERMES_HOME="$home" HOME="$work" "$canon_hermes" install "${python_args[@]}" >&2
if [[ "${REMOVE_AFTER_INSTALL:-}" == 1 ]]; then
  echo "== removing $canon_hermes: the gateway runs the plugin's own copy" >&2
  rm -f "$canon_hermes" "$(dirname "$canon_hermes")/canon-hermes-plugin"
fi

echo "== starting the Hermes gateway (HERMES_HOME=$home)" >&2
(
  set -a
  # shellcheck disable=SC1091
  . "$work/sim.env"
  set +a
  export HERMES_HOME="$home" HOME="$work" HERMES_DISABLE_LAZY_INSTALLS=1
  exec "$venv/bin/hermes" gateway run -v >"$work/gateway.log" 2>&1
) &
pids+=($!)

ready=""
for _ in $(seq 1 300); do
  if python3 - "$home/gateway_state.json" <<'PY' 2>/dev/null; then ready=1; break; fi
import json, sys
s = json.load(open(sys.argv[1]))
sys.exit(0 if s.get("gateway_state") == "running"
         and s.get("platforms", {}).get("canon", {}).get("state") == "connected" else 1)
PY
  sleep 0.2
done
if [[ -z "$ready" ]]; then
  echo "watch-turn: the gateway did not connect to Canon; last log lines:" >&2
  tail -n 40 "$work/gateway.log" >&2
  exit 1
fi

echo "== human says: $message" >&2
python3 - "$control" "$message" <<'PY'
import json, sys, time, urllib.request

control, text = sys.argv[1], sys.argv[2]

def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(control + path, data=data, method=method,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read() or b"{}")

call("POST", "/messages", {"text": text})
seen_states, last_live, done = [], None, None
deadline = time.time() + 60
while time.time() < deadline:
    state = call("GET", "/state")
    for t in state.get("turnStates", []):
        s = (t.get("state") or {}).get("state")
        if s and (not seen_states or seen_states[-1] != s):
            seen_states.append(s)
            print("turn state:  %s" % s)
    for node in state.get("streaming", {}).values():
        live = node.get("text")
        if live and live != last_live:
            last_live = live
            print("live bubble: %s" % live)
    finals = [m["message"] for m in state.get("messages", [])
              if (m["message"].get("metadata") or {}).get("turnSemantics") == "turn_complete"]
    if finals and not done:
        done = time.time()
        print("turn_complete (durable, notifying): %s" % finals[-1].get("text"))
    # The closing state follows the final after a short handoff; show it, then stop.
    if done and (seen_states[-1:] == ["completed"] or time.time() - done > 5):
        sys.exit(0)
    time.sleep(0.05)
print("no turn_complete within 60 s", file=sys.stderr)
sys.exit(1)
PY
