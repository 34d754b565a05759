#!/usr/bin/env bash
# Prove that `cargo install canon-hermes` works from the packaged crates alone, offline.
#
# 1. `cargo package` every published crate of the workspace (all but xtask) into target/package/.
# 2. Build a directory registry: the packaged crates unpacked, plus every external dependency of
#    the lock file (`cargo vendor`), each with the `.cargo-checksum.json` a directory source needs.
# 3. With a fresh CARGO_HOME that replaces crates.io by that directory and forbids the network,
#    run `cargo install --locked canon-hermes` from outside the checkout, then run the installed
#    binaries: `--version` of both, `install` into a scratch Hermes profile, and one `dev` turn
#    (the embedded local Canon and scripted model through a real Hermes gateway).
#
# The last two need the Hermes venv of scripts/hermes-venv.sh (skipped with a note when it is
# missing). The install is a full release build from scratch: several minutes on two cores.
# Environment: CHECK_INSTALL_DIR keeps the work there (default: a temporary directory, removed
# at the end unless KEEP=1); ALLOW_DIRTY=1 packages uncommitted changes too.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="${CHECK_INSTALL_DIR:-$(mktemp -d)}"
mkdir -p "$work"
venv="${HERMES_VENV:-$root/.cache/hermes-venv}"
cleanup() {
  if [[ -z "${CHECK_INSTALL_DIR:-}" && "${KEEP:-}" != 1 ]]; then rm -rf "$work"; else echo "kept $work" >&2; fi
}
trap cleanup EXIT
say() { echo "== $*" >&2; }

cd "$root"
dirty=()
[[ "${ALLOW_DIRTY:-}" == 1 ]] && dirty=(--allow-dirty)
say "packaging the workspace's crates (all but xtask)"
cargo package --quiet --workspace --exclude xtask --no-verify "${dirty[@]}"

# The published crates and their versions, from cargo metadata.
mapfile -t crates < <(cargo metadata --format-version 1 --no-deps | python3 -c '
import json, sys
for p in json.load(sys.stdin)["packages"]:
    if p.get("publish") != []:
        print("%s-%s" % (p["name"], p["version"]))')

registry="$work/registry"
rm -rf "$registry"
say "vendoring the external dependencies into $registry"
cargo vendor --quiet --locked --versioned-dirs "$registry" >/dev/null
for crate in "${crates[@]}"; do
  file="${CARGO_TARGET_DIR:-$root/target}/package/$crate.crate"
  [[ -f "$file" ]] || { echo "check-cargo-install: $file is missing" >&2; exit 1; }
  tar -xzf "$file" -C "$registry"
  sum="$(sha256sum "$file" | cut -d' ' -f1)"
  printf '{"files":{},"package":"%s"}' "$sum" >"$registry/$crate/.cargo-checksum.json"
done
say "registry: ${#crates[@]} packaged crates + $(($(ls "$registry" | wc -l) - ${#crates[@]})) vendored"

home="$work/cargo-home"
mkdir -p "$home"
cat >"$home/config.toml" <<TOML
[source.crates-io]
replace-with = "packaged"

[source.packaged]
directory = "$registry"

[net]
offline = true
TOML

say "cargo install --locked canon-hermes (offline, from the packaged crates; a release build)"
started=$SECONDS
(
  cd "$work"
  CARGO_HOME="$home" CARGO_TARGET_DIR="$work/target" \
    cargo install --quiet --locked --root "$work/root" canon-hermes
)
say "installed in $((SECONDS - started)) s: $(ls "$work/root/bin" | tr '\n' ' ')"
bin="$work/root/bin"
"$bin/canon-hermes" --version
"$bin/canon-hermes-plugin" --version
ls -l "$bin/canon-hermes" | awk '{print "binary size: " $5 " bytes"}'

if [[ ! -x "$venv/bin/python" ]]; then
  echo "check-cargo-install: no Hermes venv at $venv (run scripts/hermes-venv.sh); install and dev not run" >&2
  exit 0
fi

say "canon-hermes install into a scratch profile"
scratch="$work/scratch"
rm -rf "$scratch"
mkdir -p "$scratch/hermes"
HOME="$scratch" HERMES_HOME="$scratch/hermes" "$bin/canon-hermes" install --python "$venv/bin/python"

say "canon-hermes dev: one turn through a real gateway"
fifo="$work/dev.in"
rm -f "$fifo"
mkfifo "$fifo"
log="$work/dev.out"
HOME="$scratch" XDG_CACHE_HOME="$scratch/cache" NO_COLOR=1 \
  "$bin/canon-hermes" dev --python "$venv/bin/python" <"$fifo" >"$log" 2>&1 &
dev=$!
exec 3>"$fifo"
wait_for() {
  local what="$1" pattern="$2"
  for _ in $(seq 1 1800); do
    grep -q -- "$pattern" "$log" 2>/dev/null && return 0
    kill -0 "$dev" 2>/dev/null || break
    sleep 0.1
  done
  echo "check-cargo-install: dev never showed $what; its output:" >&2
  cat "$log" >&2
  kill "$dev" 2>/dev/null || true
  exit 1
}
wait_for "a connected gateway" "Canon connected"
echo "Hello" >&3
wait_for "the answer" "hermes › Hello from Hermes"
echo "/quit" >&3
exec 3>&-
wait "$dev"
grep -- "hermes › Hello from Hermes" "$log"
say "ok: the packaged crates install offline and the installed binary runs install and dev"
