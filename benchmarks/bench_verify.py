"""One-shot ``verify`` over a topic: throughput against a bare consume + decode loop over
the same topic in the same run, and each one's peak resident memory.

Each loop runs in a child process of its own (``--child``), so its RSS peak
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``) is its own; the timing starts after
the imports. Rounds rotate which loop goes first. ``verify`` is ``run_verify`` on the
whole retained stream (the range's dead letters read too), as ``turnaudit verify`` does.

    .venv/bin/python benchmarks/bench_verify.py [--events 100000] [--rounds 3]
        [--partitions 4]
    # a large topic once, then measured as often as needed:
    .venv/bin/python benchmarks/bench_verify.py --events 10000000 --publish-only
    .venv/bin/python benchmarks/bench_verify.py --prefix bench-xxxxxxxx. --rounds 1
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

from _broker import PROJECT_DIR, benchmark_cluster
from prometheus_client import CollectorRegistry

from turnaudit.events import OutgoingTurnEvent
from turnaudit.kafka.consumer import BEGINNING, KafkaConsumer
from turnaudit.kafka.decoders import decoder_for
from turnaudit.kafka.offsets import RangeSpec, end_offsets
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.replay import READER_CONFIG
from turnaudit.settings import BOOTSTRAP_ENV, KafkaSettings
from turnaudit.topic_names import TopicNames
from turnaudit.verify.run import run_verify

# verify as the CLI runs it (partitions read in parallel, one job per core at most), and
# in one process.
LOOPS = ("bare consume+decode", "verify", "verify --jobs 1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--child", choices=LOOPS)
    parser.add_argument("--bootstrap")
    parser.add_argument("--prefix", help="measure an existing topic (with KAFKA_BOOTSTRAP_SERVERS)")
    parser.add_argument(
        "--publish-only",
        action="store_true",
        help="publish and keep the topic (its prefix is printed) for --prefix",
    )
    args = parser.parse_args()
    if args.child:
        settings = KafkaSettings(bootstrap_servers=args.bootstrap, topics=TopicNames(args.prefix))
        print(json.dumps(child(settings, args.child)))
        return
    if args.prefix:  # a topic published by an earlier run (--publish-only): measured again
        bootstrap = os.environ.get(BOOTSTRAP_ENV)
        if not bootstrap:
            parser.error(f"--prefix reads an existing topic: set {BOOTSTRAP_ENV}")
        settings = KafkaSettings(bootstrap_servers=bootstrap, topics=TopicNames(args.prefix))
        ends = end_offsets(settings, settings.topics.turn_events)
        rounds(settings, sum(ends.values()), args.rounds, len(ends))
        return
    with (
        benchmark_cluster(partitions=args.partitions) as (settings, _),
        tempfile.TemporaryDirectory(prefix="turnaudit-bench-verify-") as work,
    ):
        began = time.perf_counter()
        publisher = TurnEventPublisher(
            settings, spool_dir=Path(work) / "spool", registry=CollectorRegistry()
        )
        publish_paced(publisher, TurnRuntimeSimulator(3, schema_versions=(3,)).events(args.events))
        assert publisher.close().ok
        print(
            f"published {args.events} turns in {time.perf_counter() - began:.0f} s "
            f"under prefix {settings.topics.prefix!r}",
            flush=True,
        )
        if not args.publish_only:
            rounds(settings, args.events, args.rounds, args.partitions)


def publish_paced(publisher: TurnEventPublisher, events: Iterable[OutgoingTurnEvent]) -> None:
    """Publish at the broker's pace: a loop at full speed outruns a loaded broker, whose
    late acknowledgements send turns to the spool (and a full spool refuses turns, leaving
    gaps); every 10,000 turns it waits while librdkafka holds more than 100,000."""
    for n, event in enumerate(events):
        publisher.publish(event)
        if n % 10_000 == 0:
            while publisher.stats().in_flight > 100_000:
                time.sleep(0.05)


def rounds(settings: KafkaSettings, events: int, rounds: int, partitions: int) -> None:
    found: dict[str, list[dict[str, float]]] = {name: [] for name in LOOPS}
    for round_no in range(rounds):
        for name in LOOPS[round_no % 2 :] + LOOPS[: round_no % 2]:
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    name,
                    "--bootstrap",
                    settings.bootstrap_servers or "",
                    "--prefix",
                    settings.topics.prefix,
                ],
                check=True,
                capture_output=True,
                text=True,
                cwd=PROJECT_DIR,
            )
            result = json.loads(out.stdout.splitlines()[-1])
            assert result["count"] == events, result
            found[name].append(result)
    print(
        f"{events} turns, {partitions} partitions, {rounds} rounds (rotated), one process per loop"
    )
    bare = found[LOOPS[0]]
    for name in LOOPS:
        rates = [r["count"] / r["seconds"] for r in found[name]]
        ratios = [
            r["count"] / r["seconds"] / (b["count"] / b["seconds"])
            for r, b in zip(found[name], bare, strict=True)
        ]
        cpu = [1e6 * r["cpu"] / r["count"] for r in found[name]]
        rss = [r["maxrss_kb"] / 1024 for r in found[name]]
        jobs_rss = [r["child_maxrss_kb"] / 1024 for r in found[name]]
        print(
            f"{name:20} turns/s median {statistics.median(rates):8.0f} "
            f"(min {min(rates):.0f}, max {max(rates):.0f}) | x bare per round median "
            f"{statistics.median(ratios):.2f} (min {min(ratios):.2f}, max {max(ratios):.2f})"
            f" | CPU us/turn median {statistics.median(cpu):.1f} | RSS peak MiB median "
            f"{statistics.median(rss):.0f} (max {max(rss):.0f}); largest job process "
            f"{max(jobs_rss):.0f}"
        )
    extra = statistics.median(r["maxrss_kb"] for r in found["verify --jobs 1"]) - statistics.median(
        r["maxrss_kb"] for r in bare
    )
    print(
        f"verify --jobs 1's RSS peak above the bare loop's: {extra / 1024:.0f} MiB, "
        f"{extra * 1024 / events:.0f} bytes per turn"
    )


def child(settings: KafkaSettings, name: str) -> dict[str, float]:
    began, began_cpu = time.perf_counter(), time.process_time()
    if name.startswith("verify"):
        report = run_verify(
            settings,
            decoder_for(settings),
            RangeSpec(),
            jobs=1 if name.endswith("--jobs 1") else None,
        )
        assert report.ok, "verify found something on a clean topic"
        count = report.verifier.messages
    else:
        count = bare(settings)
    # verify's jobs are child processes: their CPU counts, and the largest one's RSS.
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "count": count,
        "seconds": time.perf_counter() - began,
        "cpu": time.process_time() - began_cpu + children.ru_utime + children.ru_stime,
        "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "child_maxrss_kb": children.ru_maxrss,
    }


def bare(settings: KafkaSettings) -> int:
    """The fastest plain loop: one consumer assigned every partition with the replay's
    fetch settings, consume in large batches, decode each message, nothing else."""
    decode = decoder_for(settings)
    topic = settings.topics.turn_events
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


if __name__ == "__main__":
    main()
