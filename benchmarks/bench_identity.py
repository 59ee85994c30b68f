"""What turn identity costs: publish(), a service's per-event loop, and verify's throughput.

    .venv/bin/python benchmarks/bench_identity.py [--events 50000] [--rounds 3]

1. ``publish()`` (identity stamping, chain hash, encode, produce) against the
   baseline any producer pays (fastavro encode of the same v3 records with the
   single-object header + ``produce`` + ``poll(0)``), alternating rounds in
   this run (goal <= 1.15x). Also the stamper alone per event.
2. A service's per-event loop with and without the identity work (stream
   tracker: chain hash, dedupe, gaps, chain check; key check): the runtime with
   a sink that keeps nothing, and the verdict metrics service, each in a fresh
   group over the same messages, alternating. Also ``StreamTracker.observe``
   alone per event.
3. ``turnaudit verify`` over the whole range against a bare loop reading and
   decoding the same range the same way (goal >= 0.8x).

min / median / max over the rounds are printed; ratios use the medians.
"""

from __future__ import annotations

import argparse
import copy
import io
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import fastavro
from confluent_kafka import Producer
from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _broker import benchmark_cluster
from bench_consumers import NoSink, service_rate, service_settings

from turnaudit.consumers.log_sink import service_logging
from turnaudit.consumers.metrics import verdict_metrics_service
from turnaudit.consumers.runtime import ConsumerService
from turnaudit.consumers.runtime.settings import ServiceName
from turnaudit.identity import StreamTracker, TrackResult, TurnOutcome, TurnStamper
from turnaudit.kafka.offsets import RangeSpec, end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.kafka.topics import ensure_topics
from turnaudit.producers.producer_config import GUARANTEES, PRODUCER_DEFAULTS
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer, TurnEventDeserializer
from turnaudit.settings import KafkaSettings
from turnaudit.topic_names import TopicNames
from turnaudit.verify.run import run_verify

V3 = shipped_catalog().version(3)


def records(n: int) -> list[dict[str, Any]]:
    out = []
    for i, event in enumerate(
        TurnRuntimeSimulator(1, schema_versions=(3,), concurrent_sessions=200).events(n)
    ):
        event.update(event_id=f"{i:032x}", sequence=i, producer_id="p" * 36, prev_hash="0" * 64)
        out.append(event)
    return out


def spread(values: list[float], unit: float, label: str) -> str:
    median = statistics.median(values)
    return (
        f"{label}: min {min(values) * unit:,.2f}  median {median * unit:,.2f}"
        f"  max {max(values) * unit:,.2f}"
    )


# -- 1. publish() ----------------------------------------------------------------------
def baseline_round(settings: KafkaSettings, batch: list[dict[str, Any]]) -> float:
    header, parsed = b"\xc3\x01" + V3.fingerprint, V3.parsed
    producer = Producer(settings.client_config(**{**PRODUCER_DEFAULTS, **GUARANTEES}))
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
    assert publisher.close(timeout=60).ok
    return elapsed / len(batch)


def stamper_round(batch: list[dict[str, Any]]) -> float:
    """Stamping and chaining alone (encode excluded: the baseline pays it too)."""
    encode = SingleObjectSerializer(V3)
    values = [encode(r) for r in batch]
    stamper = TurnStamper()
    started = time.perf_counter()
    for record, value in zip(batch, values, strict=True):
        stamper.stamp(record)
        stamper.commit(record, value)
    return (time.perf_counter() - started) / len(batch)


def bench_publish(
    settings: KafkaSettings, source: list[dict[str, Any]], rounds: int, tmp: Path
) -> None:
    baseline_round(settings, copy.deepcopy(source[:2000]))
    publish_round(settings, copy.deepcopy(source[:2000]), tmp / "warm")
    base, ours, stamp = [], [], []
    for r in range(rounds):
        # Rotated order: the machine's noise falls on both sides.
        if r % 2 == 0:
            base.append(baseline_round(settings, copy.deepcopy(source)))
            ours.append(publish_round(settings, copy.deepcopy(source), tmp / f"p{r}"))
        else:
            ours.append(publish_round(settings, copy.deepcopy(source), tmp / f"p{r}"))
            base.append(baseline_round(settings, copy.deepcopy(source)))
        stamp.append(stamper_round(copy.deepcopy(source)))
    b, p = statistics.median(base), statistics.median(ours)
    print(f"\n1. publish(): {len(source)} v3 records per round, {rounds} rounds (us/event)")
    print("  " + spread(base, 1e6, "baseline encode+produce+poll(0)"))
    print("  " + spread(ours, 1e6, "TurnEventPublisher.publish()   "))
    print("  " + spread(stamp, 1e6, "TurnStamper stamp+commit alone "))
    print(f"  ratio publish/baseline (medians): {p / b:.3f}x   (goal <= 1.15x)")


# -- 2. a service's per-event loop ------------------------------------------------------
class NoIdentity:
    """The stream tracker's place in the runtime, doing nothing: the loop without identity."""

    currently_missing = 0
    _result = TrackResult(TurnOutcome.NEW, ("", ""), 0)

    def observe(
        self,
        event: Mapping[str, Any],
        value: bytes,
        *,
        partition: int | None = None,
        offset: int | None = None,
    ) -> TrackResult:
        return self._result

    def forget_partitions(self, partitions: set[int]) -> None:
        pass


def service(settings: KafkaSettings, kind: str, identity: bool) -> ConsumerService:
    if kind == "metrics":
        svc: ConsumerService = verdict_metrics_service(
            service_settings(settings, ServiceName.VERDICT_METRICS),
            registry=CollectorRegistry(),
            serve_http=False,
        )
    else:
        svc = ConsumerService(
            service_settings(settings, ServiceName.LOG_SINK),
            NoSink(),
            registry=CollectorRegistry(),
            serve_http=False,
        )
    if not identity:
        svc._sequences = NoIdentity()  # type: ignore[assignment]  # identity checks off: a stand-in
    return svc


def tracker_round(values: list[bytes]) -> float:
    decode = TurnEventDeserializer(shipped_catalog())
    events = [decode(v).event for v in values]
    tracker = StreamTracker()
    started = time.perf_counter()
    for offset, (event, value) in enumerate(zip(events, values, strict=True)):
        tracker.observe(event, value, partition=0, offset=offset)
    return (time.perf_counter() - started) / len(values)


def bench_services(settings: KafkaSettings, rounds: int) -> None:
    end = end_offsets(settings, settings.topics.turn_events)
    total = sum(end.values())
    values = [
        m.value() or b"" for m in read_range(settings, settings.topics.turn_events, None, end)
    ]
    print(f"\n2. a service's per-event loop: {total} messages, {rounds} rounds (events/s)")
    for kind in ("runtime, no sink", "metrics"):
        with_id, without = [], []
        for r in range(rounds):
            with service_logging("WARNING"):
                order = [True, False] if r % 2 == 0 else [False, True]
                for identity in order:
                    rate = service_rate(service(settings, kind, identity), end)
                    (with_id if identity else without).append(rate)
        print("  " + spread(without, 1, f"{kind:<17} without identity"))
        print("  " + spread(with_id, 1, f"{kind:<17} with identity   "))
        w, wo = statistics.median(with_id), statistics.median(without)
        print(
            f"  {kind}: ratio with/without {w / wo:.3f}x; "
            f"identity costs {(1 / w - 1 / wo) * 1e6:.2f} us/event"
        )
    alone = [tracker_round(values) for _ in range(rounds)]
    print("  " + spread(alone, 1e6, "StreamTracker.observe alone (us/event)"))


# -- 3. verify ----------------------------------------------------------------------------
def bare_range_loop(settings: KafkaSettings) -> float:
    topic = settings.topics.turn_events
    decode = TurnEventDeserializer(shipped_catalog())
    end = end_offsets(settings, topic)
    started = time.perf_counter()
    n = 0
    for msg in read_range(settings, topic, None, end):
        decode(msg.value())
        n += 1
    return n / (time.perf_counter() - started)


def verify_rate(settings: KafkaSettings) -> float:
    decode = TurnEventDeserializer(shipped_catalog())
    started = time.perf_counter()
    report = run_verify(settings, decode, RangeSpec())
    elapsed = time.perf_counter() - started
    assert report.ok, report.human()
    return report.verifier.messages / elapsed


def bench_verify(settings: KafkaSettings, rounds: int) -> None:
    bare, ours = [], []
    for r in range(rounds):
        if r % 2 == 0:
            bare.append(bare_range_loop(settings))
            ours.append(verify_rate(settings))
        else:
            ours.append(verify_rate(settings))
            bare.append(bare_range_loop(settings))
    b, v = statistics.median(bare), statistics.median(ours)
    print(f"\n3. verify over the whole range, {rounds} rounds (events/s)")
    print("  " + spread(bare, 1, "bare read_range + decode"))
    print("  " + spread(ours, 1, "turnaudit verify        "))
    print(f"  ratio verify/bare (medians): {v / b:.3f}x   (goal >= 0.8x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    source = records(args.events)
    with tempfile.TemporaryDirectory() as tmp, benchmark_cluster(partitions=3) as (settings, _):
        bench_publish(settings, source, args.rounds, Path(tmp))
        # The publish rounds left baseline records (no chain) on the topic: measure the
        # services and verify on a topic of publisher-written turns only.
        clean = replace(settings, topics=TopicNames(settings.topics.prefix + "clean."))
        ensure_topics(clean)
        publish_round(clean, copy.deepcopy(source), Path(tmp) / "clean")
        bench_services(clean, args.rounds)
        bench_verify(clean, args.rounds)


if __name__ == "__main__":
    main()
