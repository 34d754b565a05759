#!/usr/bin/env bash
# Create (or reuse) the Python venv holding the real Hermes gateway used by the
# end-to-end tests: .cache/hermes-venv with hermes-agent==0.19.0 on Python 3.11.
# Idempotent: does nothing when the pinned version is already installed.
#
# Environment:
#   HERMES_VENV        where the venv goes (default .cache/hermes-venv)
#   CANON_BASE_PYTHON  the Python 3.11 the venv is created from (default python3.11, else python3)
# HERMES_PYTHON is not read: for canon-hermes it names the Hermes venv's own interpreter
# (cli.md §8.3), not the base interpreter a new venv is made from.
set -euo pipefail

HERMES_VERSION="0.19.0"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${HERMES_VENV:-$root/.cache/hermes-venv}"
python="${CANON_BASE_PYTHON:-}"
if [[ -z "$python" && -n "${HERMES_PYTHON:-}" ]]; then
  echo "hermes-venv: ignoring HERMES_PYTHON (canon-hermes reads it as the Hermes venv's interpreter); set CANON_BASE_PYTHON to choose the base interpreter" >&2
fi

if [[ -z "$python" ]]; then
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then
      python="$candidate"
      break
    fi
  done
fi
if [[ -z "$python" ]]; then
  echo "hermes-venv: no python3.11 or python3 on PATH (set CANON_BASE_PYTHON)" >&2
  exit 1
fi

pyver="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
if [[ "$pyver" != "3.11" ]]; then
  echo "hermes-venv: $python is Python $pyver; hermes-agent==$HERMES_VERSION needs Python 3.11 (set CANON_BASE_PYTHON)" >&2
  exit 1
fi

installed_version() {
  "$venv/bin/python" - <<'PY' 2>/dev/null || true
import importlib.metadata as m
try:
    print(m.version("hermes-agent"))
except m.PackageNotFoundError:
    pass
PY
}

if [[ -x "$venv/bin/python" && "$(installed_version)" == "$HERMES_VERSION" ]]; then
  echo "hermes-venv: hermes-agent==$HERMES_VERSION already in $venv"
  exit 0
fi

echo "hermes-venv: creating $venv with $python" >&2
mkdir -p "$(dirname "$venv")"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "hermes-agent==$HERMES_VERSION"

got="$(installed_version)"
if [[ "$got" != "$HERMES_VERSION" ]]; then
  echo "hermes-venv: expected hermes-agent==$HERMES_VERSION in $venv, found '${got:-none}'" >&2
  exit 1
fi
echo "hermes-venv: hermes-agent==$HERMES_VERSION ready in $venv"
