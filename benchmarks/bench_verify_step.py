"""Verify's per-message cost in process, no broker: the same stored messages fed to a
``Verifier`` one at a time through its Python path (``feed``) and in batches through the
native step (``feed_batch``, as ``verify`` reads), and decoded only (the decoder every
reader uses, for scale), in the same run.

``--events`` simulated v3 turns (4 partitions, 2,000 concurrent sessions, one producer)
are encoded and stamped once; each round verifies them with each loop, rotating which
goes first, and checks that every verifier found the range clean and counted every
turn. A fourth loop is the native step with ``--memory-streams`` streams in memory (the
others spilled to disk, read back when their session goes on). Printed: µs per message,
min/median/max over the rounds, the ratio of the Python path to the native step per
round, and of the spilling native step to the one holding every stream.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_verify_step.py [--events 200000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from tests.unit.verify import scenario
from turnaudit.identity import TurnStamper
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.records import StoredRecord
from turnaudit.verify.id_store import IdMemory
from turnaudit.verify.verifier import Verifier

BATCH = 10_000  # what the range reader hands over at a time


def stored(events: int) -> list[StoredRecord]:
    sim = TurnRuntimeSimulator(
        3, schema_versions=(3,), concurrent_sessions=2000, start=scenario.GOLDEN_START
    )
    stamper = TurnStamper(producer_id="bench")
    out = []
    for n, event in enumerate(sim.events(events)):
        stamper.stamp(event)
        value = scenario.ENCODE_V3(event)
        stamper.commit(event, value)
        out.append(
            StoredRecord(
                "t", n % 4, n // 4, event["session_id"].encode(), value, timestamp_ms=n + 1
            )
        )
    return out


def one_at_a_time(records: list[StoredRecord]) -> Verifier:
    verifier = Verifier(scenario.DECODE, log_start_offsets=dict.fromkeys(range(4), 0))
    for m in records:
        verifier.feed(m.partition() or 0, m.offset() or 0, m.key(), m.value(), m.timestamp()[1])
    return verifier


def batched(records: list[StoredRecord], memory: IdMemory | None = None) -> Verifier:
    verifier = Verifier(
        scenario.DECODE, log_start_offsets=dict.fromkeys(range(4), 0), memory=memory
    )
    for start in range(0, len(records), BATCH):
        verifier.feed_batch(records[start : start + BATCH])
    return verifier


def decode_only(records: list[StoredRecord]) -> None:
    for m in records:
        scenario.DECODE(m.value())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--memory-streams",
        type=int,
        default=5_000,
        help="streams in memory for the loop whose others spill to disk",
    )
    args = parser.parse_args()
    records = stored(args.events)
    spilling = IdMemory(streams=args.memory_streams)
    loops: dict[str, Callable[[list[StoredRecord]], Verifier | None]] = {
        "feed (Python path)": one_at_a_time,
        "feed_batch (native step)": batched,
        "decode only": decode_only,
        f"feed_batch, {args.memory_streams:,} streams in memory": lambda r: batched(r, spilling),
    }
    took: dict[str, list[float]] = {name: [] for name in loops}
    names = list(loops)
    for round_no in range(args.rounds):
        for name in names[round_no % len(names) :] + names[: round_no % len(names)]:
            began = time.perf_counter()
            verifier = loops[name](records)
            took[name].append((time.perf_counter() - began) / args.events * 1e6)
            if verifier is not None:
                with verifier:
                    assert verifier.counts.turns == args.events, name
                    assert not verifier.findings, name
                    assert not verifier.lost(), name
    print(f"{args.events} v3 turns, {args.rounds} rounds (rotated), µs per message")
    for name, us in took.items():
        print(
            f"{name:40} median {statistics.median(us):5.2f} (min {min(us):.2f}, max {max(us):.2f})"
        )
    ratios = [a / b for a, b in zip(took[names[0]], took[names[1]], strict=True)]
    print(
        f"Python path / native step per round: median {statistics.median(ratios):.2f} "
        f"(min {min(ratios):.2f}, max {max(ratios):.2f})"
    )
    spilled = [a / b for a, b in zip(took[names[3]], took[names[1]], strict=True)]
    print(
        f"streams spilled / all in memory per round: median {statistics.median(spilled):.2f} "
        f"(min {min(spilled):.2f}, max {max(spilled):.2f})"
    )


if __name__ == "__main__":
    main()
