"""publish() cost on the caller's thread, against a baseline measured in the same run.

Baseline: what any producer of these records must do anyway: fastavro encode
(single-object header included) + ``Producer.produce`` + ``poll(0)``, with the
same producer settings. Measured: ``TurnEventPublisher.publish`` of the same
records (it also assigns the event id and sequence number and routes to the
spool when needed). Rounds alternate between the two to share the machine's
noise; the medians are compared. Then the broker is stopped and publish() is
timed per call while every event goes to the on-disk spool.

    .venv/bin/python benchmarks/bench_publish.py [--events 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import copy
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import fastavro
from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _broker import benchmark_cluster

from turnaudit.producers.publisher import _DEFAULTS, _GUARANTEES, TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.settings import KafkaSettings


def records(n: int) -> list[dict[str, Any]]:
    out = []
    for i, event in enumerate(TurnRuntimeSimulator(1).events(n)):
        event["event_id"], event["sequence"] = f"{i:032x}", i
        out.append(event)
    return out


def baseline_round(settings: KafkaSettings, batch: list[dict[str, Any]]) -> float:
    schema = shipped_catalog().latest
    header, parsed = b"\xc3\x01" + schema.fingerprint, schema.parsed
    producer = Producer(settings.client_config(**{**_DEFAULTS, **_GUARANTEES}))
    topic = settings.topics.turn_events
    started = time.perf_counter()
    for record in batch:
        buf = io.BytesIO()
        buf.write(header)
        fastavro.schemaless_writer(buf, parsed, record)
        producer.produce(topic, buf.getvalue(), record["session_id"].encode())
        producer.poll(0)
    elapsed = time.perf_counter() - started
    assert producer.flush(60) == 0
    return elapsed / len(batch)


def publish_round(settings: KafkaSettings, batch: list[dict[str, Any]], spool: Path) -> float:
    publisher = TurnEventPublisher(settings, spool_dir=spool)
    started = time.perf_counter()
    for record in batch:
        publisher.publish(record)
    elapsed = time.perf_counter() - started
    report = publisher.close(timeout=60)
    assert report.ok, report
    return elapsed / len(batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--down-events", type=int, default=20_000)
    args = parser.parse_args()
    source = records(args.events)

    with tempfile.TemporaryDirectory() as tmp, benchmark_cluster() as (settings, broker):
        base, ours = [], []
        # One warm-up of each, then alternating measured rounds.
        baseline_round(settings, copy.deepcopy(source[:2000]))
        publish_round(settings, copy.deepcopy(source[:2000]), Path(tmp) / "warm")
        for r in range(args.rounds):
            base.append(baseline_round(settings, copy.deepcopy(source)))
            ours.append(publish_round(settings, copy.deepcopy(source), Path(tmp) / f"s{r}"))
        b, p = statistics.median(base), statistics.median(ours)
        print(f"records: {args.events} per round, {args.rounds} rounds, median per event")
        print(f"  baseline encode+produce+poll(0): {b * 1e6:8.2f} us/event")
        print(f"  TurnEventPublisher.publish():    {p * 1e6:8.2f} us/event")
        print(f"  ratio publish/baseline:          {p / b:8.3f}x   (goal <= 1.15x)")

        if broker is None:
            print("broker-down figures need the local broker; KAFKA_BOOTSTRAP_SERVERS is set")
            return
        publisher = TurnEventPublisher(settings, spool_dir=Path(tmp) / "down", probe_interval=0.5)
        for record in copy.deepcopy(source[:500]):
            publisher.publish(record)
        broker.stop()
        deadline = time.monotonic() + 30
        while not publisher._spooling and time.monotonic() < deadline:
            time.sleep(0.05)  # until the publisher has noticed the broker is gone
        timings = []
        for record in copy.deepcopy(
            (source * (1 + args.down_events // len(source)))[: args.down_events]
        ):
            started = time.perf_counter()
            publisher.publish(record)
            timings.append(time.perf_counter() - started)
        timings.sort()

        def pct(q: float) -> float:
            return timings[min(len(timings) - 1, int(q * len(timings)))] * 1e3

        spooled = publisher.stats().spooled
        print(f"broker down: {len(timings)} publish() calls, {spooled} events in the spool")
        print(
            f"  p50 {pct(0.5):.3f} ms   p99 {pct(0.99):.3f} ms   p99.9 {pct(0.999):.3f} ms   "
            f"max {timings[-1] * 1e3:.3f} ms   (goal p99.9 < 1 ms)"
        )
        broker.start()
        report = publisher.close(timeout=120)
        print(f"broker back: {report.delivered} delivered, {report.undelivered} left in the spool")


if __name__ == "__main__":
    main()
