#!/usr/bin/env bash
# Build the canon-hermes wheel (pyproject.toml: maturin's `bin` bindings) into target/wheels/.
# maturin and uv come from PyPI into .cache/wheel-tools (a venv of their own) the first time.
# The wheel carries the release binary and its alias; it is tagged for this machine's platform
# (a manylinux tag when the binary's glibc symbols allow one). Prints the wheel's path last.
# Usage: scripts/build-wheel.sh [extra maturin build flags]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="$root/.cache/wheel-tools"
if [[ ! -x "$tools/bin/maturin" || ! -x "$tools/bin/uv" ]]; then
  echo "build-wheel: installing maturin and uv into $tools" >&2
  python3 -m venv "$tools"
  "$tools/bin/python" -m pip install --quiet --disable-pip-version-check "maturin>=1.9,<2" uv
fi
out="${CARGO_TARGET_DIR:-$root/target}/wheels"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)"
rm -f "$out"/canon_hermes-"$version"-*.whl
echo "build-wheel: maturin build --release (a release build of canon-hermes)" >&2
"$tools/bin/maturin" build --quiet --release --manifest-path "$root/crates/cli/Cargo.toml" \
  --out "$out" "$@" >&2
wheel="$(ls "$out"/canon_hermes-"$version"-*.whl)"
echo "build-wheel: $(du -k "$wheel" | cut -f1) KiB" >&2
echo "$wheel"
