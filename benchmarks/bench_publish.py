"""publish() on the caller's thread: its cost against a baseline measured in the
same run, and its tail latency while the broker is down and while the disk is full.

1. Throughput. Baseline: what any producer of these records must do anyway:
   fastavro encode (single-object header included) + ``Producer.produce`` +
   ``poll(0)``, with the same producer settings. Measured:
   ``TurnEventPublisher.publish`` of the same records, with its metrics on (a
   ``CollectorRegistry`` given; it also assigns event id and sequence number,
   and routes to the spool when needed). A second baseline encodes with the
   project's serializer (the native encoder, fastavro's bytes) instead:
   publish()'s own work beyond the same encode. Several rounds; the order of
   the three rotates every round; per-event cost min/median/max and the ratios.
2. Broker down: the broker is stopped, the publisher has noticed, and every
   ``publish()`` appends to the on-disk spool: per-call latency p50/p99/p99.9/max
   for each round, then min/median/max of the p99.9 over rounds.
   The copied batch is frozen out of the garbage collector while timed (a full
   collection of the benchmark's own million objects is not publish()'s cost).
3. Disk full: as 2, with the spool on a tmpfs that is really full (root only;
   said so and skipped otherwise): every ``publish()`` is refused
   (``EventRefusedError``, counted and logged).
4. Journal mode: ``publish()`` p50/p99 in the default mode and with the journal
   (each turn fsynced before it is produced), rounds rotated.

    .venv/bin/python benchmarks/bench_publish.py [--events 20000] [--rounds 5]
        [--journal-events 2000] [--only throughput|journal]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import io
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro
import structlog
from confluent_kafka import Producer
from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _broker import benchmark_cluster

from turnaudit.errors import EventRefusedError
from turnaudit.producers.producer_config import GUARANTEES, PRODUCER_DEFAULTS
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer
from turnaudit.settings import KafkaSettings


def records(n: int) -> list[dict[str, Any]]:
    out = []
    # The latest version, as a new runtime writes it: both loops encode with its schema,
    # and publish() stamps and chains every turn (v1/v2 streams are not chained).
    latest = shipped_catalog().latest.version
    for i, event in enumerate(TurnRuntimeSimulator(1, schema_versions=(latest,)).events(n)):
        event["event_id"], event["sequence"] = f"{i:032x}", i
        out.append(event)
    return out


def baseline_round(
    settings: KafkaSettings, batch: list[dict[str, Any]], *, native: bool = False
) -> float:
    """Encode + produce + poll(0): with plain fastavro (the baseline of the goal), or
    ``native``: with the project's serializer (the native encoder), so what publish()
    adds beyond the same encode shows too."""
    schema = shipped_catalog().latest
    header, parsed = b"\xc3\x01" + schema.fingerprint, schema.parsed
    serializer = SingleObjectSerializer(schema)
    config = {k: v for k, v in GUARANTEES.items() if k != "delivery.report.only.error"}
    producer = Producer(settings.client_config(PRODUCER_DEFAULTS, **config))
    topic = settings.topics.turn_events
    started = time.perf_counter()
    for record in batch:
        if native:
            value = serializer(record)
        else:
            buf = io.BytesIO()
            buf.write(header)
            fastavro.schemaless_writer(buf, parsed, record)
            value = buf.getvalue()
        producer.produce(topic, value, record["session_id"].encode())
        producer.poll(0)
    elapsed = time.perf_counter() - started
    assert producer.flush(60) == 0
    return elapsed / len(batch)


def publish_round(
    settings: KafkaSettings, batch: list[dict[str, Any]], spool: Path, journal: bool = False
) -> float:
    publisher = TurnEventPublisher(
        settings, spool_dir=spool, registry=CollectorRegistry(), journal=journal
    )
    started = time.perf_counter()
    for record in batch:
        publisher.publish(record)
    elapsed = time.perf_counter() - started
    report = publisher.close(timeout=60)
    assert report.ok, report
    return elapsed / len(batch)


def timed_encodes(batch: list[dict[str, Any]]) -> list[float]:
    """The control: the encode step alone, per call, timed the same way on the
    same machine at the same moment (its tail is the machine's noise floor)."""
    encode = SingleObjectSerializer(shipped_catalog().latest)
    gc.collect()
    gc.freeze()
    timings = []
    try:
        for record in batch:
            started = time.perf_counter()
            encode(record)
            timings.append(time.perf_counter() - started)
    finally:
        gc.unfreeze()
    timings.sort()
    return timings


def timed_publishes(publisher: TurnEventPublisher, batch: list[dict[str, Any]]) -> list[float]:
    # The benchmark's own heap (the copied batch: about a million objects) is
    # frozen out of the garbage collector, so a full collection of it does not
    # land inside one publish() call; the publisher's own garbage still counts.
    gc.collect()
    gc.freeze()
    timings = []
    try:
        for record in batch:
            started = time.perf_counter()
            with contextlib.suppress(EventRefusedError):
                publisher.publish(record)
            timings.append(time.perf_counter() - started)
    finally:
        gc.unfreeze()
    timings.sort()
    return timings


def pct(timings: list[float], q: float) -> float:
    return timings[min(len(timings) - 1, int(q * len(timings)))] * 1e3


def spread(values: list[float], unit: str, scale: float = 1.0) -> str:
    return (
        f"min {min(values) * scale:.3f}  median {statistics.median(values) * scale:.3f}  "
        f"max {max(values) * scale:.3f} {unit}"
    )


@contextlib.contextmanager
def full_tmpfs(directory: Path, size_kb: int = 512) -> Iterator[Path | None]:
    """A tmpfs filled to the last byte (None when mounting is not allowed here)."""
    mount, umount = shutil.which("mount"), shutil.which("umount")
    directory.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or mount is None or umount is None:
        yield None
        return
    subprocess.run(
        [mount, "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(directory)], check=True
    )
    try:
        yield directory
    finally:
        subprocess.run([umount, "-l", str(directory)], check=True)


def fill(directory: Path) -> None:
    with open(directory / "filler", "wb", buffering=0) as fh, contextlib.suppress(OSError):
        while True:
            fh.write(b"\0" * 4096)


def wait_for(condition: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)


def throughput(
    settings: KafkaSettings, source: list[dict[str, Any]], rounds: int, tmp: Path
) -> None:
    base: list[float] = []
    native: list[float] = []
    ours: list[float] = []
    baseline_round(settings, copy.deepcopy(source[:2000]))  # warm-up of each
    baseline_round(settings, copy.deepcopy(source[:2000]), native=True)
    publish_round(settings, copy.deepcopy(source[:2000]), tmp / "warm")
    for r in range(rounds):
        runs = [
            lambda: base.append(baseline_round(settings, copy.deepcopy(source))),
            lambda: native.append(baseline_round(settings, copy.deepcopy(source), native=True)),
            lambda r=r: ours.append(publish_round(settings, copy.deepcopy(source), tmp / f"s{r}")),
        ]
        for run in runs[r % 3 :] + runs[: r % 3]:  # rotated order
            run()
    ratios = [p / b for p, b in zip(ours, base, strict=True)]
    to_native = [p / b for p, b in zip(ours, native, strict=True)]
    print(f"throughput: {len(source)} records per round, {rounds} rounds, order rotated, per event")
    print(f"  baseline encode+produce+poll(0):      {spread(base, 'us', 1e6)}")
    print(f"  native encode+produce+poll(0):        {spread(native, 'us', 1e6)}")
    print(f"  publish(), metrics on:                {spread(ours, 'us', 1e6)}")
    print(
        f"  ratio of medians publish/baseline:    "
        f"{statistics.median(ours) / statistics.median(base):.3f}x   (goal <= 1.15x)"
    )
    print(f"  per-round ratio:                      {spread(ratios, 'x')}")
    print(
        f"  per-round publish/native encode+produce (identity, chain, heads, hand-over "
        f"on the same encoder): {spread(to_native, 'x')}"
    )


def journal_cost(
    settings: KafkaSettings, source: list[dict[str, Any]], rounds: int, tmp: Path
) -> None:
    """publish() per-call p50/p99 in the default mode and in journal mode (each turn
    fsynced before it is produced), one caller thread, rounds rotated; medians of
    the rounds' percentiles."""
    rows: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for r in range(rounds):
        for journal in (False, True) if r % 2 == 0 else (True, False):
            publisher = TurnEventPublisher(
                settings,
                spool_dir=tmp / f"j{r}{journal:d}",
                registry=CollectorRegistry(),
                journal=journal,
            )
            timings = timed_publishes(publisher, copy.deepcopy(source))
            assert publisher.close(timeout=60).ok
            rows[journal].append((pct(timings, 0.5), pct(timings, 0.99)))
    print(
        f"journal mode: {len(source)} publish() calls per round, {rounds} rounds, "
        "order rotated, one caller thread"
    )
    for journal, label in ((False, "default"), (True, "journal")):
        p50 = statistics.median(p for p, _ in rows[journal])
        p99 = statistics.median(p for _, p in rows[journal])
        print(f"  {label:8} p50 {p50:.3f} ms  p99 {p99:.3f} ms   (medians over rounds)")


def latency_rounds(
    title: str, publisher: TurnEventPublisher, batch: list[dict[str, Any]], rounds: int
) -> None:
    print(f"{title}: {rounds} rounds of {len(batch)} publish() calls")
    p999, control = [], []
    for r in range(rounds):
        timings = timed_publishes(publisher, copy.deepcopy(batch))
        encodes = timed_encodes(copy.deepcopy(batch))
        p999.append(pct(timings, 0.999))
        control.append(pct(encodes, 0.999))
        print(
            f"  round {r}: p50 {pct(timings, 0.5):.3f}  p99 {pct(timings, 0.99):.3f}  "
            f"p99.9 {pct(timings, 0.999):.3f}  max {timings[-1] * 1e3:.3f} ms"
            f"   (encode alone: p99.9 {control[-1]:.3f} ms)"
        )
    print(f"  p99.9 over rounds: {spread(p999, 'ms')}   (goal < 1 ms)")
    print(f"  control, encode alone p99.9: {spread(control, 'ms')}")
    stats = publisher.stats()
    print(
        f"  spooled {stats.spooled} events ({stats.spool_bytes / 1e6:.1f} MB), refused "
        f"{stats.refused}; stats balanced: {stats.balanced}"
    )


def quiet_logs() -> None:
    """The publisher's log lines (one per refused event) go where a runtime's
    would: rendered as JSON, written to a file (here /dev/null)."""
    sink = open(os.devnull, "w")  # noqa: SIM115 - open for the whole run
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(sink),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--down-events", type=int, default=20_000)
    parser.add_argument("--journal-events", type=int, default=2000)
    parser.add_argument(
        "--only",
        choices=("throughput", "journal"),
        help="run this part alone (on the cluster in KAFKA_BOOTSTRAP_SERVERS)",
    )
    args = parser.parse_args()
    quiet_logs()
    source = records(args.events)
    with tempfile.TemporaryDirectory() as tmp_name, benchmark_cluster() as (settings, broker):
        tmp = Path(tmp_name)
        if args.only != "journal":
            throughput(settings, source, args.rounds, tmp)
        if args.only != "throughput":
            journal_cost(settings, source[: args.journal_events], args.rounds, tmp)
        if args.only is not None:
            return
        if broker is None:
            print("broker-down figures need the local broker; KAFKA_BOOTSTRAP_SERVERS is set")
            return
        down_batch = (source * (1 + args.down_events // len(source)))[: args.down_events]
        publisher = TurnEventPublisher(
            settings, spool_dir=tmp / "down", probe_interval=0.5, registry=CollectorRegistry()
        )
        for record in copy.deepcopy(source[:500]):
            publisher.publish(record)
        broker.stop()
        wait_for(lambda: publisher._route.spooling)  # until the publisher noticed
        latency_rounds(
            "broker down, every event to the on-disk spool", publisher, down_batch, args.rounds
        )
        with full_tmpfs(tmp / "small") as small:
            if small is None:
                print("disk full: needs root to mount a small tmpfs; not measured")
            else:
                full = TurnEventPublisher(
                    settings,
                    spool_dir=small / "spool",
                    probe_interval=0.5,
                    registry=CollectorRegistry(),
                )
                wait_for(lambda: full._route.spooling)  # the broker is down: it spools
                fill(small)
                latency_rounds(
                    "disk full (broker down, spool on a full tmpfs), every event refused",
                    full,
                    down_batch,
                    args.rounds,
                )
                full.close(timeout=1)
        broker.start()
        report = publisher.close(timeout=300)
        print(f"broker back: {report.describe()}")


if __name__ == "__main__":
    main()
