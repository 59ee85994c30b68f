"""The archiver against the bare consume loop, and the bytes a turn takes in the archive.

    .venv/bin/python benchmarks/bench_archive.py --events 20000 --rounds 5

The same N turns (simulated, schema v5, 3 partitions) read by each row in a fresh group,
the rows alternated every round: the raw consume loop (no decode: the I/O limit) and the
archiver service (the consumer runtime, ``ArchiveSink``: segments written, fsynced and
linked, digests signed) with each codec, from its first assignment until it stopped (the
last open segments and digests written). Printed: events/s and the ratio to the raw loop
within each round, median (min-max); then bytes per turn: the records' own bytes (key,
value, headers), the topic's log on the broker's disk, and the archive's segments.

Uses KAFKA_BOOTSTRAP_SERVERS (the log's size is then not measured), or starts the
project's local broker.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _broker import benchmark_cluster
from bench_publish import quiet_logs

from turnaudit.archive.settings import ArchiveSettings
from turnaudit.archive.writer import ArchivePolicy
from turnaudit.checkpoints import SigningKey
from turnaudit.consumers.archive import archive_service
from turnaudit.consumers.runtime.settings import ServiceName, ServiceSettings
from turnaudit.kafka.offsets import end_offsets
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.settings import KafkaSettings

KEY = SigningKey(Ed25519PrivateKey.generate(), "bench-archiver")


def publish(settings: KafkaSettings, events: int, spool: Path) -> None:
    publisher = TurnEventPublisher(settings, spool_dir=spool)
    sim = TurnRuntimeSimulator(7, schema_versions=(5,), concurrent_sessions=50)
    for event in sim.events(events):
        publisher.publish(event)
    if not publisher.close().ok:
        raise RuntimeError("publishing failed")


def raw_loop(settings: KafkaSettings, total: int) -> tuple[float, int]:
    """Events/s of a bare consume, and the records' own bytes (key, value, headers)."""
    consumer = Consumer(
        settings.client_config(
            **{
                "group.id": f"bench-raw-{uuid.uuid4().hex}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 50,
            }
        )
    )
    started: list[float] = []
    consumer.subscribe(
        [settings.topics.turn_events], on_assign=lambda *_: started.append(time.perf_counter())
    )
    seen = size = 0
    while seen < total:
        for msg in consumer.consume(500, 0.05):
            if msg.error() is None:
                headers = msg.headers() or []
                size += len(msg.value() or b"") + len(msg.key() or b"")
                size += sum(len(n) + len(v or b"") for n, v in headers)
                seen += 1
    elapsed = time.perf_counter() - started[0]
    consumer.close()
    return total / elapsed, size


def archiver(settings: KafkaSettings, end: dict[int, int], codec: str, root: Path | str) -> float:
    """Events/s of the archiver service (into a directory, or ``s3://…``: bench_archive_s3.py),
    from its first assignment until it stopped."""
    service = archive_service(
        ServiceSettings(
            service=ServiceName.ARCHIVE,
            kafka=settings,
            group_id=f"bench-archive-{uuid.uuid4().hex}",
            http_port=0,
        ),
        ArchiveSettings(str(root), KEY, ArchivePolicy(codec=codec)),
        registry=CollectorRegistry(),
        serve_http=False,
    )
    thread = threading.Thread(target=service.run)
    thread.start()
    service.assigned_once.wait()
    started = time.perf_counter()
    while any(service.handed_positions().get(p, 0) < e for p, e in end.items()):
        time.sleep(0.002)
    service.stop()
    thread.join()
    return sum(end.values()) / (time.perf_counter() - started)


def folder_bytes(folder: Path, name_prefix: str = "", suffix: str = "") -> int:
    """Bytes of the files under ``folder`` (in folders named ``name_prefix``…, named
    …``suffix``)."""
    total = 0
    for path, _, files in os.walk(folder):
        if name_prefix and not Path(path).name.startswith(name_prefix):
            continue
        total += sum((Path(path) / f).stat().st_size for f in files if f.endswith(suffix))
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    quiet_logs()
    with (
        benchmark_cluster(partitions=3) as (settings, broker),
        tempfile.TemporaryDirectory(prefix="turnaudit-bench-archive-") as work,
    ):
        publish(settings, args.events, Path(work) / "spool")
        end = end_offsets(settings, settings.topics.turn_events)
        total = sum(end.values())
        rows: dict[str, list[float]] = {
            "raw consume": [],
            "archive, deflate": [],
            "archive, null": [],
        }
        ratios: dict[str, list[float]] = {"archive, deflate": [], "archive, null": []}
        sizes: dict[str, int] = {}
        payload = 0
        for n in range(args.rounds):
            raw, payload = raw_loop(settings, total)
            rows["raw consume"].append(raw)
            for codec in ("deflate", "null") if n % 2 == 0 else ("null", "deflate"):
                root = Path(work) / f"archive-{codec}-{n}"
                rate = archiver(settings, end, codec, root)
                rows[f"archive, {codec}"].append(rate)
                ratios[f"archive, {codec}"].append(rate / raw)
                sizes[codec] = folder_bytes(root / settings.topics.turn_events)
        print(f"{total:,} turns, {args.rounds} rounds; median (min-max)")
        print("| row | events/s | / raw consume |")
        print("| --- | --- | --- |")
        for row, values in rows.items():
            ratio = ratios.get(row)
            shown = "1" if ratio is None else _spread(ratio, "{:.2f}x")
            print(f"| {row} | {_spread(values, '{:,.0f}')} | {shown} |")
        print("| bytes per turn | |")
        print("| --- | --- |")
        print(f"| the records' own (key, value, headers) | {payload / total:,.0f} |")
        if broker is not None:
            # The .log files only: the indexes are preallocated (10 MiB each) until rolled.
            log = folder_bytes(broker.settings.home, settings.topics.turn_events, ".log")
            print(f"| the topic's log segments on the broker's disk | {log / total:,.0f} |")
        for codec, size in sizes.items():
            print(f"| the archive (segments and digests), {codec} | {size / total:,.0f} |")


def _spread(values: list[float], form: str) -> str:
    return (
        f"{form.format(statistics.median(values))} "
        f"({form.format(min(values))}-{form.format(max(values))})"
    )


if __name__ == "__main__":
    main()
