"""The OTel sink with and without glibc keeping its flushes' buffers, in process, no broker.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_otel_heap.py --rounds 5

Each round runs, in a fresh process per mode and in rotated order, the OTel sink's whole
batch path (``profile_consumers``'s "otel sink" stage: the native consumer step's records,
requests made and dropped at each flush) over the same 20,000 v3 events, and the log
sink's for comparison: ``kept`` as the sink runs (``keep_large_buffers`` at its start),
``mapped`` with that call left out (glibc's own thresholds), ``log sink`` as it runs. Per
process: the stage's best of three passes in the thread's CPU µs per event (page faults
included: the kernel zeroes each page on the thread's time) and the minor page faults per
event over the three passes. Min / median / max over the rounds, and per round the mapped
to kept ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

MODES = ("kept", "mapped", "log sink")

ONE = """
import json, resource, sys, tempfile, time
sys.path[:0] = ["benchmarks", "."]
from profile_consumers import messages, stage
import turnaudit.consumers.otel_sink as otel_sink
from turnaudit.consumers.log_sink import service_logging
mode = sys.argv[1]
if mode == "mapped":
    otel_sink.keep_large_buffers = lambda: False
msgs = messages(20000, (3,))
row = "log sink" if mode == "log sink" else "otel sink"
best = float("inf")
with tempfile.TemporaryDirectory() as tmp, service_logging("WARNING"):
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(3):
        run = stage(row, msgs, tmp)
        started = time.thread_time()
        run()
        best = min(best, time.thread_time() - started)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
print(json.dumps({"us": 1e6 * best / len(msgs), "faults": faults / (3 * len(msgs))}))
"""


def measure(mode: str) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", ONE, mode], capture_output=True, text=True, check=True
    )
    result: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    seen: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    ratios = []
    for r in range(args.rounds):
        order = MODES[r % len(MODES) :] + MODES[: r % len(MODES)]
        this = {mode: measure(mode) for mode in order}
        for mode in MODES:
            seen[mode].append(this[mode])
        ratios.append(this["mapped"]["us"] / this["kept"]["us"])
    print(f"{args.rounds} rounds, rotated; 20,000 v3 events, best of three passes per process")
    print(f"  {'mode':<10} {'CPU µs/event median (min-max)':>30} {'page faults/event median':>26}")
    for mode in MODES:
        us = [m["us"] for m in seen[mode]]
        faults = [m["faults"] for m in seen[mode]]
        print(
            f"  {mode:<10} {statistics.median(us):>12.2f} ({min(us):.2f}-{max(us):.2f})"
            f" {statistics.median(faults):>26.3f}"
        )
    print(
        f"  mapped / kept: {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
    )


if __name__ == "__main__":
    main()
