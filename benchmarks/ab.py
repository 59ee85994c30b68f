"""A/B: the same benchmark from two checkouts, rounds alternated, in one run.

    .venv/bin/python benchmarks/ab.py --a /tmp/before --a-python /tmp/before/.venv/bin/python \\
        --b . --b-python .venv/bin/python --rounds 3 -- bench_consumers.py --only throughput --quick

Each round runs A's ``benchmarks/<script>`` then B's (the order flips every
round), each one round of its own rows. Rows are read from the script's
summary table (consumer name, events/s, CPU µs per event, ratio to the bare
loop of the same round). Printed per row: A and B medians (min-max) of the
ratio to bare and of CPU µs per event, and B/A of the medians. The ratio to
the bare loop is the figure that survives a loaded machine: both sides of it
ran in the same round, on the same broker, under the same load.

``bench_publish.py`` prints no such table: its lines ``label:  min … median … max … us`` are
read instead, each row's figures being its median µs per event and that median over the
baseline's (encode + produce + ``poll(0)``) of the same round in place of the ratio to bare.

``--a-args`` / ``--b-args`` add arguments for one side only, for a flag only
one checkout's script knows (e.g. ``--b-args "--versions 1 2"`` to give B the
schema versions an older script publishes without a flag).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

ROW = re.compile(
    r"^\s{2}(?P<name>\S.*?)\s{2,}(?P<rate>[\d,]+)\s+\(.*?\)\s+(?P<cpu>[\d.]+)\s+"
    r"(?P<bare>[\d.]+)x"
)
# bench_publish.py: "  publish(), metrics on:   min 40.1  median 41.0  max 44.2 us"
SPREAD = re.compile(
    r"^\s{2}(?P<name>[^:]+):\s+min [\d.]+\s+median (?P<median>[\d.]+)\s+max [\d.]+ us$"
)


def run_once(
    tree: Path, python: str, script: list[str], extra: list[str], timeout: float
) -> dict[str, tuple[float, float]]:
    """Row -> (ratio to bare, CPU µs per event) of one round."""
    command = [python, str(tree / "benchmarks" / script[0]), *script[1:], *extra, "--rounds", "1"]
    try:
        out = subprocess.run(
            command,
            cwd=tree,
            capture_output=True,
            text=True,
            check=True,
            env=os.environ.copy(),
            timeout=timeout,
        ).stdout
    except subprocess.TimeoutExpired:
        # A benchmark loop that waits for messages which never come (deleted from
        # a shared broker, say) would otherwise hold the whole A/B run forever.
        raise SystemExit(f"{tree}: one round took over {timeout:g}s: stopped") from None
    rows = {}
    for line in out.splitlines():
        found = ROW.match(line)
        if found:
            rows[found["name"].strip()] = (float(found["bare"]), float(found["cpu"]))
    medians = {
        found["name"].strip(): float(found["median"])
        for found in map(SPREAD.match, out.splitlines())
        if found
    }
    baseline = next((m for name, m in medians.items() if name.startswith("baseline")), None)
    if not rows and baseline:
        rows = {name: (median / baseline, median) for name, median in medians.items()}
    if not rows:
        raise SystemExit(f"no summary rows in the output of {tree}:\n{out[-2000:]}")
    return rows


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", type=Path, required=True, help="checkout A (the baseline)")
    parser.add_argument("--a-python", required=True)
    parser.add_argument("--b", type=Path, required=True, help="checkout B")
    parser.add_argument("--b-python", required=True)
    parser.add_argument("--a-args", default="", help="arguments for A's script only")
    parser.add_argument("--b-args", default="", help="arguments for B's script only")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--timeout",
        type=float,
        default=900.0,
        help="seconds one side's round may take (default 900)",
    )
    parser.add_argument("script", nargs="+", help="the benchmark script and its arguments")
    args = parser.parse_args()
    sides = {
        "A": (args.a.resolve(), args.a_python, shlex.split(args.a_args)),
        "B": (args.b.resolve(), args.b_python, shlex.split(args.b_args)),
    }
    results: dict[str, dict[str, list[tuple[float, float]]]] = {"A": {}, "B": {}}
    for n in range(args.rounds):
        order = ("A", "B") if n % 2 == 0 else ("B", "A")
        for side in order:
            tree, python, extra = sides[side]
            for row, figures in run_once(tree, python, args.script, extra, args.timeout).items():
                results[side].setdefault(row, []).append(figures)
            print(f"round {n + 1}: {side} done", file=sys.stderr)
    print(
        f"{'row':32} {'A vs bare':>20} {'B vs bare':>20} {'B/A':>6}"
        f" {'A CPU us':>20} {'B CPU us':>20} {'B/A':>6}"
    )
    for row, a in results["A"].items():
        b = results["B"].get(row)
        if not b:
            continue
        a_bare, a_cpu = [x for x, _ in a], [y for _, y in a]
        b_bare, b_cpu = [x for x, _ in b], [y for _, y in b]
        print(
            f"{row:32} {spread(a_bare):>20} {spread(b_bare):>20} "
            f"{statistics.median(b_bare) / statistics.median(a_bare):6.2f} "
            f"{spread(a_cpu):>20} {spread(b_cpu):>20} "
            f"{statistics.median(b_cpu) / statistics.median(a_cpu):6.2f}"
        )


if __name__ == "__main__":
    main()
