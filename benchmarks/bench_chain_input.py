"""What binding the writer schema into the chain costs (TurnEvent v5: the chain hash over
``turnaudit.chain.v2``, the writer's fingerprint and the body; v4: over v1's tag and the
body), in process, no broker, v4 and v5 in the same run:

* **publish()'s own path** without the Kafka client: stamp a copy of the turn, encode it,
  and commit its chain hash (what ``TurnEventPublisher.publish`` does under its lock
  before handing the bytes to librdkafka);
* **verify's native step** (``Verifier.feed_batch``, as ``verify`` reads a range) over the
  same simulated turns stored as v4 and as v5.

Each round runs every loop, rotating which goes first; printed: µs per turn, min/median/max
over the rounds, and the v5/v4 ratio per round.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_chain_input.py [--events 100000] [--rounds 5]
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
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer
from turnaudit.verify.verifier import Verifier

BATCH = 10_000


def turns(version: int, events: int) -> list[dict[str, object]]:
    sim = TurnRuntimeSimulator(
        3, schema_versions=(version,), concurrent_sessions=2000, start=scenario.GOLDEN_START
    )
    return [dict(e) for e in sim.events(events)]


def publish_path(version: int, events: list[dict[str, object]]) -> list[StoredRecord]:
    """Stamp, encode and commit each turn as publish() does; the stored records."""
    encode = SingleObjectSerializer(shipped_catalog().version(version))
    stamper = TurnStamper(producer_id="bench")
    out = []
    for n, source in enumerate(events):
        event = source.copy()
        stamper.stamp(event)  # type: ignore[arg-type] - the simulator's events, as dicts
        value = encode(event)
        stamper.commit(event, value)  # type: ignore[arg-type] - as above
        out.append(
            StoredRecord("t", n % 4, n // 4, str(event["session_id"]).encode(), value, n + 1)
        )
    return out


def verify_step(records: list[StoredRecord]) -> Verifier:
    verifier = Verifier(scenario.DECODE, log_start_offsets=dict.fromkeys(range(4), 0))
    for start in range(0, len(records), BATCH):
        verifier.feed_batch(records[start : start + BATCH])
    return verifier


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sources = {v: turns(v, args.events) for v in (4, 5)}
    stored = {v: publish_path(v, sources[v]) for v in (4, 5)}
    loops: dict[str, Callable[[], object]] = {
        "publish path v4": lambda: publish_path(4, sources[4]),
        "publish path v5": lambda: publish_path(5, sources[5]),
        "verify step v4": lambda: verify_step(stored[4]),
        "verify step v5": lambda: verify_step(stored[5]),
    }
    took: dict[str, list[float]] = {name: [] for name in loops}
    names = list(loops)
    for round_no in range(args.rounds):
        for name in names[round_no % len(names) :] + names[: round_no % len(names)]:
            began = time.perf_counter()
            result = loops[name]()
            took[name].append((time.perf_counter() - began) / args.events * 1e6)
            if isinstance(result, Verifier):
                with result:
                    assert result.counts.turns == args.events, name
                    assert not result.findings, (name, result.findings[:3])
    print(f"{args.events} turns, {args.rounds} rounds (rotated), µs per turn")
    for name, us in took.items():
        print(
            f"{name:18} median {statistics.median(us):5.2f} (min {min(us):.2f}, max {max(us):.2f})"
        )
    for what in ("publish path", "verify step"):
        ratios = [a / b for a, b in zip(took[f"{what} v5"], took[f"{what} v4"], strict=True)]
        print(
            f"{what} v5/v4 per round: median {statistics.median(ratios):.3f} "
            f"(min {min(ratios):.3f}, max {max(ratios):.3f})"
        )


if __name__ == "__main__":
    main()
