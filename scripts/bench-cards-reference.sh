#!/usr/bin/env bash
# Measure canon-cards against the reference validator, cards.py from canon-hermes-plugin 0.14.1,
# on the same generated corpus of 5,000 cards, and print both throughputs and their ratio.
#
# 1. Installs canon-hermes-plugin==0.14.1 (without its dependencies: cards.py is stdlib-only)
#    into its own venv under .cache/cards-reference/ (once; reused afterwards).
# 2. Writes the corpus as JSON lines with the card_corpus example.
# 3. Runs the card_corpus criterion bench, which prints canon-cards' own pass figures.
# 4. Times the reference on the same cards (scripts/bench_cards_reference.py), both over cards
#    parsed up front and server-style (each card validated right after it is parsed, only the
#    validation timed), and prints the comparison; it fails if any verdict differs from
#    canon-cards'.
#
# Environment:
#   CARDS_REF_DIR      working directory (default .cache/cards-reference)
#   CANON_BASE_PYTHON  Python (3.11-3.13) the venv is created from (default python3.11, else python3)
#   REPEAT             timed reference passes per subset, best kept (default 7)
#   CARGO_TARGET_DIR   honoured by cargo as usual
set -euo pipefail

VERSION="0.14.1"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${CARDS_REF_DIR:-$root/.cache/cards-reference}"
venv="$dir/venv"
python="${CANON_BASE_PYTHON:-}"
if [[ -z "$python" ]]; then
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then
      python="$candidate"
      break
    fi
  done
fi
if [[ -z "$python" ]]; then
  echo "bench-cards-reference: no python3.11 or python3 on PATH (set CANON_BASE_PYTHON)" >&2
  exit 1
fi

installed_version() {
  "$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("canon-hermes-plugin"))' 2>/dev/null || true
}

mkdir -p "$dir"
if [[ ! -x "$venv/bin/python" || "$(installed_version)" != "$VERSION" ]]; then
  echo "bench-cards-reference: installing canon-hermes-plugin==$VERSION into $venv" >&2
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
    -d "$dir/wheels" "canon-hermes-plugin==$VERSION"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --no-index \
    "$dir/wheels/canon_hermes_plugin-$VERSION-py3-none-any.whl"
fi

cd "$root"
cargo run --release --quiet -p canon-cards --example card_corpus -- "$dir/corpus.jsonl"
cargo bench -p canon-cards --bench card_corpus 2>&1 | tee "$dir/canon-cards.txt"
"$venv/bin/python" "$root/scripts/bench_cards_reference.py" \
  --corpus "$dir/corpus.jsonl" --ours "$dir/canon-cards.txt" --repeat "${REPEAT:-7}"
