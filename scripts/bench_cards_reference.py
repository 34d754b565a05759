"""Time the reference card validator on the canon-cards bench corpus and compare.

Run by scripts/bench-cards-reference.sh inside a venv holding canon-hermes-plugin 0.14.1.
The corpus is the JSON-lines file written by `cargo run -p canon-cards --example card_corpus`
(one `{"card": ..., "expected": ...}` per line). Every card is parsed once up front; a pass
calls `canon_hermes_plugin.cards.validate_card` once on every parsed card, in file order,
with the garbage collector off during the pass (as timeit does). The figure kept is the best
of N passes.

The `server_all` and `server_large` subsets meet the cards as a server does: each card's text
is parsed with json.loads and validated at once, and only the validate_card call is timed
(perf_counter_ns around each card), exactly as the Rust bench times its own server pass.

With --ours, the `card_corpus/<subset>:` lines the Rust bench printed are read and both
figures are shown side by side with their ratio (best pass against best pass).

It also checks that the reference returns exactly the verdict canon-cards recorded for every
card: the corpus avoids the inputs where the two are known to differ (cards.md section 15),
so any difference is a bug and the script fails.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import re
import statistics
import sys
import time
from importlib import metadata

from canon_hermes_plugin.cards import validate_card

LARGE_BYTES = 5_000
OURS_LINE = re.compile(
    r"^card_corpus/(?P<subset>\w+): (?P<cards>\d+) cards, (?P<bytes>\d+) bytes per pass: "
    r"median (?P<median>[\d.]+) ms .*; best (?P<best>[\d.]+) ms"
)


def size_of(card) -> int:
    return len(json.dumps(card, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def one_pass(cards) -> int:
    ok = 0
    for card in cards:
        if validate_card(card)["ok"]:
            ok += 1
    return ok


def measure(cards, repeat: int) -> tuple[float, float]:
    one_pass(cards)  # warm-up: imports, caches, the regex cache
    times = []
    for _ in range(repeat):
        gc.disable()
        try:
            start = time.perf_counter()
            one_pass(cards)
            times.append(time.perf_counter() - start)
        finally:
            gc.enable()
    return min(times), statistics.median(times)


def one_server_pass(texts) -> float:
    """Parses and validates every text; returns the seconds spent in validate_card only."""
    spent = 0
    clock = time.perf_counter_ns
    for text in texts:
        card = json.loads(text)
        start = clock()
        validate_card(card)
        spent += clock() - start
    return spent / 1e9


def measure_server(texts, repeat: int) -> tuple[float, float]:
    one_server_pass(texts)  # warm-up, as in measure()
    times = []
    for _ in range(repeat):
        gc.disable()
        try:
            times.append(one_server_pass(texts))
        finally:
            gc.enable()
    return min(times), statistics.median(times)


def read_ours(path: str) -> dict[str, dict[str, float]]:
    ours = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = OURS_LINE.match(line.strip())
            if m:
                ours[m["subset"]] = {
                    "cards": int(m["cards"]),
                    "bytes": int(m["bytes"]),
                    "best": float(m["best"]) / 1e3,
                    "median": float(m["median"]) / 1e3,
                }
    return ours


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", required=True, help="JSON lines from the card_corpus example")
    parser.add_argument("--ours", help="output of `cargo bench -p canon-cards --bench card_corpus`")
    parser.add_argument("--repeat", type=int, default=7, help="timed passes per subset (best is kept)")
    args = parser.parse_args()

    cards, expected = [], []
    with open(args.corpus, encoding="utf-8") as f:
        for line in f:
            entry = json.loads(line)
            cards.append(entry["card"])
            expected.append(entry["expected"])
    sizes = [size_of(c) for c in cards]

    mismatches = [i for i, (c, e) in enumerate(zip(cards, expected)) if validate_card(c) != e]
    for i in mismatches[:5]:
        print(f"card {i}: cards.py {validate_card(cards[i])} but canon-cards {expected[i]}", file=sys.stderr)
    invalid = sum(1 for e in expected if not e["ok"])
    ordered = sorted(sizes)
    print(
        f"corpus: {len(cards)} cards, {sum(sizes) / 1e6:.2f} MB, {invalid} invalid "
        f"({100 * invalid / len(cards):.1f}%), size median {ordered[len(ordered) // 2]} B, "
        f"max {ordered[-1]} B"
    )
    print(f"verdicts: {len(cards) - len(mismatches)} of {len(cards)} identical to canon-cards'")

    texts = [json.dumps(c, separators=(",", ":"), ensure_ascii=False) for c in cards]
    large_bytes = sum(s for s in sizes if s >= LARGE_BYTES)
    subsets = {
        "all": (cards, sum(sizes), measure),
        "large": ([c for c, s in zip(cards, sizes) if s >= LARGE_BYTES], large_bytes, measure),
        "server_all": (texts, sum(sizes), measure_server),
        "server_large": (
            [t for t, s in zip(texts, sizes) if s >= LARGE_BYTES],
            large_bytes,
            measure_server,
        ),
    }
    ours = read_ours(args.ours) if args.ours else {}
    reference = f"cards.py {metadata.version('canon-hermes-plugin')} (CPython {platform.python_version()})"
    print(f"reference: {reference}, best of {args.repeat} passes")
    header = f"{'subset':<13}{'cards':>7}{'MB':>8}  {'canon-cards':>28}  {'cards.py':>26}  {'ratio':>6}"
    print(header)
    for name, (subset, nbytes, measure_subset) in subsets.items():
        best, median = measure_subset(subset, args.repeat)
        ref = f"{len(subset) / best:>9,.0f} cards/s {nbytes / 1e6 / best:>6.1f} MB/s"
        mine = ours.get(name)
        if mine is None:
            print(f"{name:<13}{len(subset):>7}{nbytes / 1e6:>8.2f}  {'(not measured)':>28}  {ref:>26}")
            continue
        if (mine["cards"], mine["bytes"]) != (len(subset), nbytes):
            print(f"{name}: the Rust bench measured {mine['cards']} cards / {mine['bytes']} bytes, "
                  f"this corpus has {len(subset)} / {nbytes}: not the same corpus", file=sys.stderr)
            return 1
        rust = f"{len(subset) / mine['best']:>10,.0f} cards/s {nbytes / 1e6 / mine['best']:>7.1f} MB/s"
        print(
            f"{name:<13}{len(subset):>7}{nbytes / 1e6:>8.2f}  {rust:>28}  {ref:>26}  "
            f"{best / mine['best']:>5.1f}x"
        )
        print(
            f"{'':<28}(median pass: canon-cards {mine['median'] * 1e3:.2f} ms, "
            f"cards.py {median * 1e3:.1f} ms, ratio {median / mine['median']:.1f}x)"
        )
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
