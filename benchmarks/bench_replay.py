"""Replay throughput: into the JSONL file and into the metrics sink, against a bare consume +
decode loop over the same range, measured in the same run; then the same range shared by
2 replay processes against 1.

Rounds rotate the order of the loops; each prints min/median/max events/s and
the min/median/max of its per-round ratio to the bare loop of the same round,
and the CPU time per event (process time, librdkafka's threads included) with
its ratio to the bare loop's: on a machine shared with other work, the CPU
figure moves less than the wall-clock one.
The scale-out part times whole processes (``turnaudit replay --group G
--members N --into jsonl:…``, start to last exit, interpreter start included)
for N = 1 and N = 2, rounds alternated, and prints the ratio. The broker
shares the machine's cores with the replays.

    .venv/bin/python benchmarks/bench_replay.py [--events 20000] [--rounds 3]
        [--scale-rounds 3] [--partitions 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from _broker import PROJECT_DIR, benchmark_cluster

from turnaudit.commands.replay import OUTPUT_KINDS
from turnaudit.kafka.consumer import BEGINNING, KafkaConsumer
from turnaudit.kafka.decoders import decoder_for
from turnaudit.kafka.offsets import end_offsets
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.replay import READER_CONFIG, ReplayRequest, ReplayTarget, replay
from turnaudit.settings import KafkaSettings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scale-rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    with (
        benchmark_cluster(partitions=args.partitions) as (settings, _),
        tempfile.TemporaryDirectory(prefix="turnaudit-bench-replay-") as work,
    ):
        folder = Path(work)
        publisher = TurnEventPublisher(settings, spool_dir=folder / "spool")
        for event in TurnRuntimeSimulator(3, schema_versions=(1, 2, 3)).events(args.events):
            publisher.publish(event)
        assert publisher.close().ok
        single_process(settings, folder, args.events, args.rounds, args.partitions)
        if args.scale_rounds:
            scale_out(settings, folder, args.scale_rounds)


def single_process(
    settings: KafkaSettings, folder: Path, events: int, rounds: int, partitions: int
) -> None:
    loops = {
        "bare consume+decode": bare(settings),
        "replay jsonl": into(settings, "jsonl", folder),
        "replay metrics": into(settings, "metrics", folder),
    }
    names = list(loops)
    rates: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}  # CPU us per event
    for round_no in range(rounds):
        for name in names[round_no % len(names) :] + names[: round_no % len(names)]:
            began, began_cpu = time.perf_counter(), time.process_time()
            count = loops[name]()
            rates[name].append(count / (time.perf_counter() - began))
            cpu[name].append(1e6 * (time.process_time() - began_cpu) / count)
    print(f"{events} events, {partitions} partitions, {rounds} rounds (rotated), one process")
    for name in names:
        ratios = [r / b for r, b in zip(rates[name], rates[names[0]], strict=True)]
        cpu_ratios = [b / c for c, b in zip(cpu[name], cpu[names[0]], strict=True)]
        low, mid, high = min(rates[name]), statistics.median(rates[name]), max(rates[name])
        print(
            f"{name:22} events/s min {low:8.0f} median {mid:8.0f} max {high:8.0f}"
            f" | x bare per round min {min(ratios):.2f} median {statistics.median(ratios):.2f}"
            f" max {max(ratios):.2f} | CPU us/event median {statistics.median(cpu[name]):.1f},"
            f" x bare by CPU median {statistics.median(cpu_ratios):.2f}"
        )


def bare(settings: KafkaSettings) -> Callable[[], int]:
    """The fastest plain loop: one consumer assigned every partition with the replay's own
    fetch settings, consume in large batches, decode each message, nothing else."""
    decode = decoder_for(settings)
    topic = settings.topics.turn_events

    def loop() -> int:
        end = {p: o for p, o in end_offsets(settings, topic).items() if o > 0}
        consumer = KafkaConsumer(
            settings, topic, READER_CONFIG, group_id=f"bench-bare-{uuid.uuid4().hex}"
        )
        consumer.assign(dict.fromkeys(end, BEGINNING))
        count = 0
        try:
            while end:
                for msg in consumer.consume(10_000, 0.2):
                    decode(msg.value())
                    count += 1
                    p = msg.partition()
                    if p in end and (msg.offset() or 0) + 1 >= end[p]:
                        del end[p]
        finally:
            consumer.close()
        return count

    return loop


def into(settings: KafkaSettings, kind: str, folder: Path) -> Callable[[], int]:
    decode = decoder_for(settings)
    runs = iter(range(1_000_000))

    def loop() -> int:
        target = ReplayTarget.file(kind, folder / f"{kind}-{next(runs)}.out")
        return replay(
            settings, decode, ReplayRequest(), target, outputs=OUTPUT_KINDS, batch_size=2000
        ).events

    return loop


def scale_out(settings: KafkaSettings, folder: Path, rounds: int) -> None:
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers or "",
        "TURNAUDIT_TOPIC_PREFIX": settings.topics.prefix,
    }
    total = sum(end_offsets(settings, settings.topics.turn_events).values())
    seconds: dict[int, list[float]] = {1: [], 2: []}
    for round_no in range(rounds):
        for members in (1, 2) if round_no % 2 == 0 else (2, 1):
            group = f"bench-{uuid.uuid4().hex[:8]}"
            began = time.perf_counter()
            processes = [
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "turnaudit.cli",
                        "replay",
                        "--group",
                        group,
                        "--members",
                        str(members),
                        "--batch-size",
                        "2000",
                        "--into",
                        f"jsonl:{folder / f'{group}-{i}.jsonl'}",
                    ],
                    env=env,
                    cwd=PROJECT_DIR,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for i in range(members)
            ]
            for process in processes:
                _, err = process.communicate(timeout=900)
                assert process.returncode == 0, err
            seconds[members].append(time.perf_counter() - began)
            written = sum(len(p.read_bytes().splitlines()) for p in folder.glob(f"{group}-*.jsonl"))
            assert written == total, (written, total)
    print(
        f"scale-out: {total} events into jsonl, --group with 1 and 2 processes, {rounds} "
        f"rounds (alternated), whole processes timed"
    )
    for members, found in seconds.items():
        rates = [total / s for s in found]
        print(
            f"{members} process(es)           events/s min {min(rates):9.0f}  median "
            f"{statistics.median(rates):9.0f}  max {max(rates):9.0f}"
        )
    ratios = [one / two for one, two in zip(seconds[1], seconds[2], strict=True)]
    print(
        f"2 processes vs 1: x{statistics.median(ratios):.2f} median "
        f"(min {min(ratios):.2f}, max {max(ratios):.2f})"
    )


if __name__ == "__main__":
    main()
