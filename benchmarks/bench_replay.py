"""Replay throughput: into the JSONL file and into the metrics sink, against a bare
consume + decode loop over the same range, measured in the same run.

Rounds rotate the order of the three loops; each prints min/median/max events/s
and its median ratio to the bare loop. One process; the broker shares the cores.

    .venv/bin/python benchmarks/bench_replay.py [--events 20000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _broker import benchmark_cluster

from turnaudit.consumers.replay import MetricsReplayOutput
from turnaudit.kafka.reading import end_offsets, read_range
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.replay import ReplayRequest, ReplayTarget, replay
from turnaudit.serialization.decoders import decoder_for
from turnaudit.settings import KafkaSettings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with benchmark_cluster(partitions=3) as (settings, _), \
            tempfile.TemporaryDirectory(prefix="turnaudit-bench-replay-") as work:
        folder = Path(work)
        publisher = TurnEventPublisher(settings, spool_dir=folder / "spool")
        for event in TurnRuntimeSimulator(3, schema_versions=(1, 2, 3)).events(args.events):
            publisher.publish(event)
        assert publisher.close().ok
        loops = {"bare consume+decode": bare(settings), "replay jsonl": into(settings, "jsonl",
                 folder), "replay metrics": into(settings, "metrics", folder)}
        names = list(loops)
        rates: dict[str, list[float]] = {name: [] for name in names}
        for round_no in range(args.rounds):
            for name in names[round_no % len(names):] + names[:round_no % len(names)]:
                began = time.perf_counter()
                events = loops[name]()
                rates[name].append(events / (time.perf_counter() - began))
        base = statistics.median(rates[names[0]])
        print(f"{args.events} events, 3 partitions, {args.rounds} rounds (rotated)")
        for name in names:
            low, mid, high = min(rates[name]), statistics.median(rates[name]), max(rates[name])
            print(f"{name:22} events/s min {low:9.0f}  median {mid:9.0f}  max {high:9.0f}"
                  f"  x{mid / base:.2f} of bare")


def bare(settings: KafkaSettings) -> Callable[[], int]:
    decode = decoder_for(settings)
    topic = settings.topics.turn_events

    def loop() -> int:
        count = 0
        for msg in read_range(settings, topic, None, end_offsets(settings, topic)):
            decode(msg.value())
            count += 1
        return count
    return loop


def into(settings: KafkaSettings, kind: str, folder: Path) -> Callable[[], int]:
    decode = decoder_for(settings)
    runs = iter(range(1_000_000))

    def loop() -> int:
        target = ReplayTarget(kind, folder / f"{kind}-{next(runs)}.out")
        return replay(settings, decode, ReplayRequest(), target,
                      outputs={"metrics": lambda: MetricsReplayOutput(decode, "bench")}).events
    return loop


if __name__ == "__main__":
    main()
