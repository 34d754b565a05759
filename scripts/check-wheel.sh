#!/usr/bin/env bash
# The operator's path through the wheel, end to end (README "Use it with your Hermes"):
# build the wheel, create a fresh venv with hermes-agent 0.19.0 (scripts/hermes-venv.sh),
# `uv pip install --python <venv python> <wheel>`, then `<venv>/bin/canon-hermes install` with no
# `--python` into a scratch profile, delete the wheel's binaries, and answer one Canon message
# through a real Hermes gateway from the installed plugin (scripts/watch-turn.sh against the
# local Canon simulator). Fails when any step does. CI runs it.
# Environment: CANON_SIM (default: target/debug/canon-sim, built if missing).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

wheel="$("$root/scripts/build-wheel.sh")"
echo "== wheel: $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)" >&2

venv="$work/hermes-venv"
HERMES_VENV="$venv" "$root/scripts/hermes-venv.sh" >&2
echo "== uv pip install --python $venv/bin/python $(basename "$wheel")" >&2
"$root/.cache/wheel-tools/bin/uv" pip install --quiet --python "$venv/bin/python" "$wheel"
test -x "$venv/bin/canon-hermes" && test -x "$venv/bin/canon-hermes-plugin"
"$venv/bin/canon-hermes" --version
"$venv/bin/canon-hermes-plugin" --version

sim="${CANON_SIM:-$target/debug/canon-sim}"
if [[ ! -x "$sim" ]]; then
  cargo build --quiet --manifest-path "$root/Cargo.toml" -p canon-sim
fi
HERMES_VENV="$venv" CANON_HERMES="$venv/bin/canon-hermes" CANON_SIM="$sim" REMOVE_AFTER_INSTALL=1 \
  "$root/scripts/watch-turn.sh" "Hello from the wheel check"
if [[ -e "$venv/bin/canon-hermes" ]]; then
  echo "check-wheel: $venv/bin/canon-hermes was not removed" >&2
  exit 1
fi
echo "== ok: the wheel's plugin answered through a real gateway without the wheel's binary" >&2
