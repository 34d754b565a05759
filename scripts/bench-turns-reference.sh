#!/usr/bin/env bash
# Turn latency through a real Hermes gateway, canon-hermes beside the reference Python plugin
# (canon-hermes-plugin 0.14.1) and beside Hermes' own floor, per scenario (short, 20 KB, tool,
# quiet group, back-to-back, 100 KB), from one run on this machine. The table and what each
# column means: crates/cli/benches/turn_floor.rs.
#
# 1. Makes (or reuses) the Hermes venv of scripts/hermes-venv.sh (hermes-agent 0.19.0).
# 2. Installs canon-hermes-plugin==0.14.1 into its own venv under .cache/turns-reference/
#    (once; reused afterwards). That venv sees the Hermes venv's packages through a .pth file
#    placed behind its own, so both runtimes run the very same Hermes install; the plugin's
#    other dependency, httpx, is one of Hermes' own. Nothing of the plugin is vendored.
# 3. Runs the turn_floor bench, which measures canon-hermes, then the reference.
#
# Environment:
#   HERMES_VENV            the Hermes venv (default .cache/hermes-venv)
#   TURNS_REF_DIR          the reference's working directory (default .cache/turns-reference)
#   TURN_FLOOR_REPEAT      runs of each scenario per runtime; medians are printed (default 10)
#   TURN_FLOOR_SCENARIOS   only these scenarios, by token (FLOORSHORT,FLOORLONG,FLOORTOOL,
#                          FLOORGROUP,FLOORPAIR,FLOORBIG); default all
#   TURN_FLOOR_RAW         a file to append each run's figures and timeline to (JSON lines)
#   CARGO_TARGET_DIR       honoured by cargo as usual
set -euo pipefail

VERSION="0.14.1"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
hermes_venv="${HERMES_VENV:-$root/.cache/hermes-venv}"
dir="${TURNS_REF_DIR:-$root/.cache/turns-reference}"
venv="$dir/venv"

HERMES_VENV="$hermes_venv" "$root/scripts/hermes-venv.sh" >&2
hermes_site="$("$hermes_venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"

installed_version() {
  "$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("canon-hermes-plugin"))' 2>/dev/null || true
}

mkdir -p "$dir"
if [[ ! -x "$venv/bin/python" || "$(installed_version)" != "$VERSION" ]]; then
  echo "bench-turns-reference: installing canon-hermes-plugin==$VERSION into $venv" >&2
  rm -rf "$venv"
  # From the Hermes venv's interpreter: the same CPython 3.11 as the gateway it is compared with.
  "$hermes_venv/bin/python" -m venv "$venv"
  "$venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
    -d "$dir/wheels" "canon-hermes-plugin==$VERSION"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --no-index \
    "$dir/wheels/canon_hermes_plugin-$VERSION-py3-none-any.whl"
fi
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
# `zz-` sorts last: the venv's own distributions come before the Hermes venv's.
echo "$hermes_site" > "$site/zz-hermes-venv.pth"
"$venv/bin/python" -c 'import hermes_cli.main, canon_hermes_plugin' \
  || { echo "bench-turns-reference: the reference venv cannot import Hermes and the plugin" >&2; exit 1; }

cd "$root"
HERMES_VENV="$hermes_venv" TURN_FLOOR_REFERENCE_PYTHON="$venv/bin/python" \
  cargo bench -q -p canon-hermes --bench turn_floor
