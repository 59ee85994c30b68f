"""The identity tables at their bounds: per-event cost when full against when empty.

    .venv/bin/python benchmarks/bench_tracker_bounds.py [--rounds 3] [--events 100000]

A service's stream tracker remembers up to ``max_event_ids`` event ids (default
500,000) and ``max_streams`` streams (100,000), the publisher's stamper up to
``max_sessions`` sessions; once full, each new entry evicts the oldest. This
measures, in process and without a broker, the CPU µs per event of

* ``StreamTracker.observe`` on an empty tracker and on one filled to both
  bounds (new streams of 5 turns each, chained, as short sessions make them);
* ``TurnStamper.commit`` with an empty table and with ``max_sessions`` sessions;
* the eviction itself, as a reference: the first key of a plain dict deleted
  after each insert (what the tables did before) against an OrderedDict's
  ``popitem(last=False)``, at 500,000 entries.

Rounds in rotated order; min/median/max per row and the ratio full/empty of
each round (goal: about 1, the bound costs nothing per event).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

from turnaudit.identity import GENESIS_HASH, StreamTracker, TurnStamper, chain_hash

TURNS_PER_STREAM = 5


def chained_events(start: int, count: int) -> Iterator[tuple[dict[str, Any], bytes]]:
    """``count`` events of fresh streams, numbered from stream ``start``."""
    prev = GENESIS_HASH
    for n in range(start * TURNS_PER_STREAM, start * TURNS_PER_STREAM + count):
        stream, sequence = divmod(n, TURNS_PER_STREAM)
        if sequence == 0:
            prev = GENESIS_HASH
        value = b"\xc3\x01" + b"\x00" * 8 + f"turn {n}".encode() * 20
        event = {
            "event_id": f"e-{n}",
            "session_id": f"s-{stream}",
            "producer_id": "p-bench",
            "sequence": sequence,
            "prev_hash": prev,
        }
        prev = chain_hash(value)
        yield event, value


def tracker_cost(full: bool, events: int, max_ids: int, max_streams: int) -> float:
    tracker = StreamTracker(max_event_ids=max_ids, max_streams=max_streams)
    filled = 0
    if full:  # until both tables are at their bounds (outside the clock)
        filled = max(max_ids, max_streams * TURNS_PER_STREAM)
        for offset, (event, value) in enumerate(chained_events(0, filled)):
            tracker.observe(event, value, partition=0, offset=offset)
    batch = list(chained_events(filled // TURNS_PER_STREAM + 1, events))
    observe = tracker.observe
    started = time.thread_time()
    for offset, (event, value) in enumerate(batch, start=filled):
        observe(event, value, partition=0, offset=offset)
    return 1e6 * (time.thread_time() - started) / events


def stamper_cost(full: bool, events: int, max_sessions: int) -> float:
    stamper = TurnStamper(producer_id="p-bench", max_sessions=max_sessions)
    value = b"\xc3\x01" + b"\x00" * 200
    if full:
        for n in range(max_sessions):
            stamper.commit({"session_id": f"f-{n}", "producer_id": "p", "sequence": 0}, value)
    batch = [{"session_id": f"s-{n}", "producer_id": "p", "sequence": 0} for n in range(events)]
    commit = stamper.commit
    started = time.thread_time()
    for event in batch:
        commit(event, value)
    return 1e6 * (time.thread_time() - started) / events


def eviction_cost(ordered: bool, events: int, size: int) -> float:
    table: dict[str, int] = OrderedDict() if ordered else {}
    for n in range(size):
        table[f"k-{n}"] = n
    started = time.thread_time()
    for n in range(events):
        table[f"n-{n}"] = n
        if isinstance(table, OrderedDict):
            table.popitem(last=False)
        else:
            del table[next(iter(table))]
    return 1e6 * (time.thread_time() - started) / events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--events", type=int, default=100_000, help="events timed per row")
    parser.add_argument("--max-event-ids", type=int, default=500_000)
    parser.add_argument("--max-streams", type=int, default=100_000)
    parser.add_argument(
        "--max-sessions",
        type=int,
        default=1_000_000,
        help="the stamper's bound (TurnStamper's default)",
    )
    args = parser.parse_args()
    rows: dict[str, Callable[[], float]] = {
        "tracker, empty": lambda: tracker_cost(
            False, args.events, args.max_event_ids, args.max_streams
        ),
        "tracker, at its bounds": lambda: tracker_cost(
            True, args.events, args.max_event_ids, args.max_streams
        ),
        "stamper, empty": lambda: stamper_cost(False, args.events, args.max_sessions),
        "stamper, at its bound": lambda: stamper_cost(True, args.events, args.max_sessions),
        "evict: dict, first key deleted": lambda: eviction_cost(
            False, args.events, args.max_event_ids
        ),
        "evict: OrderedDict.popitem": lambda: eviction_cost(True, args.events, args.max_event_ids),
    }
    names = list(rows)
    costs: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            costs[name].append(rows[name]())
    print(
        f"{args.events:,} events timed per row, {args.rounds} rounds in rotated order; "
        f"bounds: {args.max_event_ids:,} ids, {args.max_streams:,} streams, "
        f"{args.max_sessions:,} stamper sessions"
    )
    print(f"  {'row':<34} µs/event median (min-max)")
    for name in names:
        c = costs[name]
        print(f"  {name:<34} {statistics.median(c):8.2f} ({min(c):.2f}-{max(c):.2f})")
    for full, empty in (
        ("tracker, at its bounds", "tracker, empty"),
        ("stamper, at its bound", "stamper, empty"),
        ("evict: dict, first key deleted", "evict: OrderedDict.popitem"),
    ):
        ratios = [f / e for f, e in zip(costs[full], costs[empty], strict=True)]
        print(
            f"  {full} / {empty}: {statistics.median(ratios):.2f}x "
            f"({min(ratios):.2f}-{max(ratios):.2f})"
        )


if __name__ == "__main__":
    main()
