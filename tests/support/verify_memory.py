"""What verify holds per stream, per missing position and per event id in memory, and
per spilled event id on disk: resident memory over synthetic ranges, no broker.

    .venv/bin/python -m tests.support.verify_memory [--events 200000]

Each figure is the difference of two runs that differ in one thing only (docs/verify.md).
Each run is a process of its own, and what it holds is its resident memory after the
range less before it (the messages built before): the stream tracker's tables are
native, which tracemalloc does not see.
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import os
import time
from dataclasses import dataclass
from pathlib import Path

from tests.unit.verify import scenario
from turnaudit.verify.id_store import FILTER_BITS, IdMemory
from turnaudit.verify.verifier import Verifier


@dataclass(frozen=True)
class Run:
    streams: int
    missing: int
    ids_in_memory: int
    spilled: int
    held_bytes: int  # traced memory the Verifier holds after the range
    spill_bytes: int  # the spill's run files, their sizes added up
    seconds: float


def rss_bytes() -> int:
    for line in Path(f"/proc/{os.getpid()}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc")


@dataclass(frozen=True)
class Plan:
    events: int
    producers: int
    sessions: int
    memory_ids: int
    drop_every: int = 0


def run_plan(plan: Plan) -> Run:
    """One run, in the calling (child) process."""
    stamped = scenario.stamped_events(
        plan.events, seed=1, producers=plan.producers, sessions=plan.sessions
    )
    return measure(stamped, memory_ids=plan.memory_ids, drop_every=plan.drop_every)


def measure_apart(plan: Plan) -> Run:
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(run_plan, (plan,))


def measure(stamped: list[scenario.Stamped], *, memory_ids: int, drop_every: int = 0) -> Run:
    messages = [s for i, s in enumerate(stamped) if not drop_every or i % drop_every]
    gc.collect()
    before = rss_bytes()
    started = time.perf_counter()
    with Verifier(scenario.DECODE, memory=IdMemory(event_ids=memory_ids)) as verifier:
        for offset, s in enumerate(messages):
            verifier.feed(0, offset, s.key, s.value)
        seconds = time.perf_counter() - started
        # The pending batch (at most IdMemory.spill_batch ids) written: memory holds
        # exactly ``memory_ids`` ids, the file every other one.
        verifier._spilled.flush()
        gc.collect()
        held = rss_bytes() - before
        spill = verifier.spill_file
        return Run(
            len(verifier.tracker),
            verifier.lost_positions(),
            len(verifier.tracker.remembered()),
            len(verifier.event_ids) - len(verifier.tracker.remembered()),
            held,
            0 if spill is None else sum(f.stat().st_size for f in spill.iterdir()),
            seconds,
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=200_000)
    events = parser.parse_args().events
    base = measure_apart(Plan(events, 1, 200, 1_000))
    runs = {
        "base": base,
        "streams": measure_apart(Plan(events, 4, 4000, 1_000)),
        "gaps": measure_apart(Plan(events, 1, 200, 1_000, drop_every=10)),
        "ids": measure_apart(Plan(events, 1, 200, events)),
    }
    for name, run in runs.items():
        print(f"{name:8} {run}")
    streams, gaps, ids = runs["streams"], runs["gaps"], runs["ids"]
    per_stream = (streams.held_bytes - base.held_bytes) / (streams.streams - base.streams)
    per_missing = (gaps.held_bytes - base.held_bytes) / gaps.missing
    # The base run spilled, so it holds the spill's filter (a fixed size) the ids run
    # has not.
    base_ids = base.held_bytes - (FILTER_BITS // 8 if base.spilled else 0)
    per_id = (ids.held_bytes - base_ids) / (ids.ids_in_memory - base.ids_in_memory)
    print(f"per stream:           {per_stream:.0f} B")
    print(f"per missing position: {per_missing:.0f} B")
    print(f"per id in memory:     {per_id:.0f} B")
    print(
        f"per spilled id:       {base.spill_bytes / base.spilled:.0f} B on disk "
        f"(and a filter of {FILTER_BITS // 8 // 2**20} MiB in memory, whatever their number)"
    )
    # Time: every id in memory, against 1,000 (a lookup on disk for each message whose
    # id the filters cannot rule out).
    few = scenario.stamped_events(events, seed=1, producers=1, sessions=200)
    for memory_ids in (events, 1_000):
        run = measure(few, memory_ids=memory_ids)
        print(f"{memory_ids:>9,} ids in memory: {run.seconds / events * 1e6:.1f} µs/message")


if __name__ == "__main__":
    main()
