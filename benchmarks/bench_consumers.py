"""Consumer services against a bare loop, end-to-end delay, and memory under load.

    .venv/bin/python benchmarks/bench_consumers.py            # full: 10-minute memory run
    .venv/bin/python benchmarks/bench_consumers.py --quick    # ~2 minutes in all

1. Throughput: the same N messages read by each row, each in its own spawned
   process and fresh group, rounds in rotated order: a raw consume (no decode,
   the I/O limit); the bare loop (consume + strip the single-object header +
   plain fastavro ``schemaless_reader`` by fingerprint, not the project's
   deserializer); the ceiling (consume + the project's deserializer alone,
   the native decoder: what no service can beat); a quixstreams
   ``Application`` peer doing the metrics job (turns/refused/hedged/stub per
   pack; ``pip install -e '.[bench]'``); the shared runtime with a sink that
   keeps nothing; the log sink, the verdict metrics service and the OTel sink
   as the CLI builds them (the OTel sink exporting over OTLP/gRPC, or
   ``--otel-protocol http``, to the project's collector, ``deploy/otelcol/``,
   started on free loopback ports for its row: ``make otelcol``; the bench
   fails if it cannot start it); and that collector alone taking the same
   turns' records, written beforehand, as the sink sends them (the most a sink
   that waits for the collector's answer can reach); and the sink dropping its
   requests (its own cost). Printed: events/s, CPU us per event,
   and every ratio to bare, to quixstreams, to the ceiling and to raw consume
   taken within one round, as median (min-max) over rounds. Events are schema
   v3 (``--versions`` for others).
2. Delay from ``publish()`` to counted by the metrics service at a steady
   rate (default 5,000 events/s, the publisher in its own process): p50, p99,
   p99.9, max (goal p99 <= 50 ms in each of 5 runs after a warm-up run).
   occurred_at is set at publish time (millisecond resolution, so delays read
   up to 1 ms long). Each run's batch timeline (``consumers/runtime/timeline.py``)
   goes to ``--timelines`` as JSON lines, and the batches holding the run's
   slowest 1 % of turns are explained from it: age on arrival, the loop away
   from polling, validation and flush, GC, and the thread not running.
3. Resident memory of the two services as real processes under that load,
   sampled every 30 s (goal: flat).

Uses KAFKA_BOOTSTRAP_SERVERS, or starts the project's local broker in a
temporary folder.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import multiprocessing
import os
import queue
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer
from fastavro import schemaless_reader
from prometheus_client import CollectorRegistry

from turnaudit._native import otlp_turn_records
from turnaudit.commands.simulate import publish_simulation
from turnaudit.consumers.htir_feeder import HtirFeederSink
from turnaudit.consumers.log_sink import log_sink_service, service_logging
from turnaudit.consumers.metrics import VerdictMetricsSink, verdict_metrics_service
from turnaudit.consumers.otel_sink import RECORDS_TOTAL, OtelSink
from turnaudit.consumers.runtime import ConsumedTurn, ConsumerService, Sink
from turnaudit.consumers.runtime.otel_settings import OtlpProtocol, OtlpSettings
from turnaudit.consumers.runtime.settings import (
    LogSinkSettings,
    MetricsSettings,
    ServiceName,
    ServiceSettings,
)
from turnaudit.consumers.runtime.timeline import BatchMark, BatchTimeline
from turnaudit.events import occurred_millis
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.topics import ensure_topics
from turnaudit.local_broker import LocalBrokerSettings, LocalKafkaBroker, free_port, free_ports
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings
from turnaudit.topic_names import TopicNames

PROJECT = Path(__file__).resolve().parent.parent
TURNAUDIT = str(Path(sys.executable).parent / "turnaudit")


def fresh_settings(bootstrap: str) -> KafkaSettings:
    settings = KafkaSettings(
        bootstrap_servers=bootstrap,
        topics=TopicNames(f"bench-{uuid.uuid4().hex[:8]}."),
        partitions=3,
    )
    ensure_topics(settings)
    time.sleep(1.0)  # leaders settle before offsets are asked for
    return settings


def caught_up(positions: Callable[[], dict[int, int]], end: dict[int, int]) -> bool:
    current = positions()
    return all(current.get(p, 0) >= e for p, e in end.items() if e > 0)


# -- 1. throughput ------------------------------------------------------------------
# Each row runs in its own spawned process with a fresh group, so imports, GC and
# CPU time are its own. Rate = messages / wall time from the first assignment to the
# last message (the quixstreams peer: from its first message, which favours it
# slightly); CPU = the child's user+system time over the same span (librdkafka's
# threads included), per event.
Measurement = tuple[float, float]  # (events/s, CPU microseconds per event)


def _cpu_seconds() -> float:
    # Process-wide CPU clock: every thread (librdkafka's included), fine resolution.
    return time.process_time()


def _bench_consumer(
    settings: KafkaSettings, role: str, assigned_at: list[tuple[float, float]]
) -> Consumer:
    consumer = Consumer(
        settings.client_config(
            **{
                "group.id": f"bench-{role}-{uuid.uuid4().hex}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 50,
                "log_level": 3,
            }
        )
    )

    def on_assign(*_: Any) -> None:
        assigned_at.append((time.perf_counter(), _cpu_seconds()))

    consumer.subscribe([settings.topics.turn_events], on_assign=on_assign)
    return consumer


def raw_loop(settings: KafkaSettings, end: dict[int, int]) -> Measurement:
    """Consume and touch each value, no decode: the I/O limit."""
    assigned_at: list[tuple[float, float]] = []
    consumer = _bench_consumer(settings, "raw", assigned_at)
    positions: dict[int, int] = {}
    total = sum(end.values())
    seen = 0
    size = 0
    while seen < total:
        for msg in consumer.consume(500, 0.05):
            if msg.error() is None:
                size += len(msg.value() or b"")
                positions[msg.partition() or 0] = (msg.offset() or 0) + 1
                seen += 1
    elapsed = time.perf_counter() - assigned_at[0][0]
    cpu = _cpu_seconds() - assigned_at[0][1]
    consumer.close()
    return total / elapsed, 1e6 * cpu / total


def plain_readers() -> dict[bytes, Any]:
    """Writer fingerprint -> fastavro parsed schema, straight from the shipped .avsc files."""
    return {s.fingerprint: s.parsed for s in shipped_catalog().versions}


def bare_loop(settings: KafkaSettings, end: dict[int, int]) -> Measurement:
    """Consume + strip the single-object header + plain fastavro ``schemaless_reader``.

    Deliberately not the project's deserializer: speeding that up must not speed up
    the baseline too.
    """
    readers = plain_readers()
    assigned_at: list[tuple[float, float]] = []
    consumer = _bench_consumer(settings, "bare", assigned_at)
    positions: dict[int, int] = {}
    total = sum(end.values())
    seen = 0
    while seen < total:
        for msg in consumer.consume(500, 0.05):
            if msg.error() is None:
                payload = msg.value() or b""
                schemaless_reader(io.BytesIO(payload[10:]), readers[payload[2:10]], None)
                # The bookkeeping the runtime does too (next offset per partition).
                positions[msg.partition() or 0] = (msg.offset() or 0) + 1
                seen += 1
    elapsed = time.perf_counter() - assigned_at[0][0]
    cpu = _cpu_seconds() - assigned_at[0][1]
    consumer.close()
    return total / elapsed, 1e6 * cpu / total


def ceiling_loop(settings: KafkaSettings, end: dict[int, int]) -> Measurement:
    """Consume + the project's deserializer (the native decoder) and nothing else.

    The same loop as the bare one with the services' decoder: the ceiling of
    every service, which must decode and then do its job.
    """
    decode = TurnEventDeserializer(shipped_catalog())
    assigned_at: list[tuple[float, float]] = []
    consumer = _bench_consumer(settings, "ceiling", assigned_at)
    positions: dict[int, int] = {}
    total = sum(end.values())
    seen = 0
    while seen < total:
        for msg in consumer.consume(500, 0.05):
            if msg.error() is None:
                decode(msg.value())
                positions[msg.partition() or 0] = (msg.offset() or 0) + 1
                seen += 1
    elapsed = time.perf_counter() - assigned_at[0][0]
    cpu = _cpu_seconds() - assigned_at[0][1]
    consumer.close()
    return total / elapsed, 1e6 * cpu / total


def quixstreams_peer(settings: KafkaSettings, end: dict[int, int]) -> Measurement:
    """quixstreams ``Application``, the same plain decode, counters per pack.

    The same job as the verdict-metrics service: turns, refused, hedged and stub turns
    counted per pack. quixstreams comes from the ``bench`` extra.
    """
    # Imported here: quixstreams comes from the `bench` extra; the other rows run without it.
    from quixstreams import Application  # noqa: PLC0415
    from quixstreams.models import Deserializer  # noqa: PLC0415

    readers = plain_readers()

    class SingleObjectAvro(Deserializer):
        def __call__(self, value: bytes, ctx: Any) -> Any:
            return schemaless_reader(io.BytesIO(value[10:]), readers[value[2:10]], None)

    total = sum(end.values())
    counts: dict[str, list[int]] = {}
    seen = [0]
    started: list[float] = []
    cpu_at: list[float] = []
    app = Application(
        broker_address=settings.bootstrap_servers,
        consumer_group=f"bench-quix-{uuid.uuid4().hex}",
        auto_offset_reset="earliest",
        loglevel="WARNING",
        on_consumer_error=None,
    )
    topic = app.topic(settings.topics.turn_events, value_deserializer=SingleObjectAvro())
    sdf = app.dataframe(topic)

    def count(event: dict[str, Any]) -> None:
        if not started:
            started.append(time.perf_counter())
            cpu_at.append(_cpu_seconds())
        row = counts.get(event["pack_id"])
        if row is None:
            row = counts[event["pack_id"]] = [0, 0, 0, 0]
        bundle = event["verdicts"]
        row[0] += 1
        row[1] += bundle["refusal_emitted"]
        row[2] += bundle["hedge_injected"]
        row[3] += event["path"] == "stub"
        seen[0] += 1
        if seen[0] >= total:
            app.stop()

    sdf.update(count)
    app.run()
    elapsed = time.perf_counter() - started[0]
    cpu = _cpu_seconds() - cpu_at[0]
    if sum(r[0] for r in counts.values()) != total:
        raise RuntimeError("quixstreams peer did not count every message")
    return total / elapsed, 1e6 * cpu / total


class NoSink(Sink):
    """Takes every turn and keeps nothing: the runtime's own cost."""

    def take(self, turn: ConsumedTurn) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def service_rate(
    service: ConsumerService, end: dict[int, int], *, handed: bool = False
) -> Measurement:
    """``handed``: done when the sink was handed every message (a sink that holds
    offsets back for what it still assembles stores them later)."""
    thread = threading.Thread(target=service.run)
    thread.start()
    service.assigned_once.wait()
    started = time.perf_counter()
    cpu_at = _cpu_seconds()
    positions = service.handed_positions if handed else service.positions
    while not caught_up(positions, end):
        time.sleep(0.002)
    elapsed = time.perf_counter() - started
    cpu = _cpu_seconds() - cpu_at
    service.stop()
    thread.join()
    total = sum(end.values())
    return total / elapsed, 1e6 * cpu / total


def service_settings(settings: KafkaSettings, service: ServiceName, **over: Any) -> ServiceSettings:
    return ServiceSettings(
        service=service,
        kafka=settings,
        group_id=f"bench-{service.value}-{uuid.uuid4().hex}",
        **over,
    )


ROWS = (
    "raw consume (no decode)",
    "bare loop (plain fastavro)",
    "quixstreams peer",
    "ceiling (native decode)",
    "runtime, no sink",
    "log sink",
    "verdict metrics",
    "htir feeder",
    "otel sink",
    "otel collector alone",
    "otel sink, requests dropped",
)
RAW, BARE, QUIX, CEILING = ROWS[0], ROWS[1], ROWS[2], ROWS[3]
OTELCOL = PROJECT / "deploy/otelcol/bin/otelcol-turnaudit"
OTELCOL_CONFIG = PROJECT / "deploy/otelcol/config.yaml"
# The OTel sink's protocol (``--otel-protocol``), passed to each row's process.
OTEL_PROTOCOL = "TURNAUDIT_BENCH_OTLP_PROTOCOL"


@contextlib.contextmanager
def running_collector(workdir: Path) -> Iterator[dict[OtlpProtocol, str]]:
    """The project's collector (its own config: OTLP in, every record to a file and a
    summary line) on two free loopback ports: its endpoints. Raises when it cannot start."""
    if not OTELCOL.exists():
        raise RuntimeError(f"{OTELCOL} not found: run `make otelcol` (needs the Go toolchain)")
    grpc_port, http_port = free_ports(2)
    name = f"otelcol-{uuid.uuid4().hex}"
    env = {
        "PATH": os.environ.get("PATH", ""),
        "OTELCOL_GRPC_ENDPOINT": f"127.0.0.1:{grpc_port}",
        "OTELCOL_HTTP_ENDPOINT": f"127.0.0.1:{http_port}",
        "OTELCOL_FILE": str(workdir / f"{name}.jsonl"),
    }
    with (workdir / f"{name}.log").open("wb") as log:
        proc = subprocess.Popen(
            [str(OTELCOL), "--config", str(OTELCOL_CONFIG)], env=env, stdout=log, stderr=log
        )
    try:
        deadline = time.monotonic() + 30
        while not all(_listening(port) for port in (grpc_port, http_port)):
            if proc.poll() is not None or time.monotonic() > deadline:
                text = (workdir / f"{name}.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the collector did not start:\n{text}")
            time.sleep(0.05)
        yield {
            OtlpProtocol.GRPC: f"http://127.0.0.1:{grpc_port}",
            OtlpProtocol.HTTP: f"http://127.0.0.1:{http_port}",
        }
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        for leftover in workdir.glob(f"{name}*"):
            leftover.unlink()


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.2)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def collector_alone(settings: KafkaSettings, end: dict[int, int], workdir: str) -> Measurement:
    """The collector's own time for the same turns' records: every message read, decoded
    and its records written beforehand (untimed), then sent as the OTel sink sends a
    batch's (500 turns a flush, 512 records a request, a few at once). Its events/s is
    what any sink that waits for the collector's answer can reach at most."""
    decode = TurnEventDeserializer(shipped_catalog())
    assigned_at: list[tuple[float, float]] = []
    consumer = _bench_consumer(settings, "collector", assigned_at)
    total = sum(end.values())
    flushes: list[bytearray] = []
    seen = 0
    while seen < total:
        for msg in consumer.consume(500, 0.05):
            if msg.error() is None:
                if seen % 500 == 0:
                    flushes.append(bytearray())
                decoded = decode(msg.value())
                event = decoded.event
                millis = occurred_millis(event["occurred_at"])
                version = decoded.writer_version
                otlp_turn_records(event, millis, version, False, False, 0, flushes[-1])
                seen += 1
    consumer.close()
    protocol = OtlpProtocol(os.environ.get(OTEL_PROTOCOL, OtlpProtocol.GRPC.value))
    with running_collector(Path(workdir)) as endpoints:
        otlp = OtlpSettings(protocol, endpoints[protocol])
        sink = OtelSink(otlp, CollectorRegistry())
        started, cpu_at = time.perf_counter(), _cpu_seconds()
        for records in flushes:
            sink._records[:] = records  # as if taken: the flush alone is timed
            sink.flush()
        elapsed, cpu = time.perf_counter() - started, _cpu_seconds() - cpu_at
        sink.close()
    return total / elapsed, 1e6 * cpu / total


class NoCollector:
    """An OTLP transport that drops every request: the sink's own cost."""

    def send(self, request: bytes) -> None:
        return

    def close(self) -> None:
        return


def otel_sink_rate(
    settings: KafkaSettings, end: dict[int, int], workdir: str, *, collector: bool = True
) -> Measurement:
    """The OTel sink service exporting to a collector of its own (or, ``collector``
    false, dropping its requests, no collector running beside it to share the cores);
    every record exported."""
    if not collector:
        return otel_sink_service_rate(settings, end, OtlpSettings(), NoCollector())
    protocol = OtlpProtocol(os.environ.get(OTEL_PROTOCOL, OtlpProtocol.GRPC.value))
    with running_collector(Path(workdir)) as endpoints:
        return otel_sink_service_rate(settings, end, OtlpSettings(protocol, endpoints[protocol]))


def otel_sink_service_rate(
    settings: KafkaSettings,
    end: dict[int, int],
    otlp: OtlpSettings,
    transport: NoCollector | None = None,
) -> Measurement:
    registry = CollectorRegistry()
    service = ConsumerService(
        service_settings(settings, ServiceName.OTEL_SINK, otlp=otlp),
        OtelSink(otlp, registry, transport=transport),
        registry=registry,
        serve_http=False,
    )
    result = service_rate(service, end)
    exported = registry.get_sample_value(RECORDS_TOTAL) or 0
    if exported < 2 * sum(end.values()):  # refusal and hedge at least, every turn
        raise RuntimeError(f"the OTel sink exported only {exported:.0f} records")
    return result


def measure_row(  # noqa: PLR0911 - one return per kind of row
    row: str, bootstrap: str, prefix: str, end: dict[int, int], workdir: str
) -> Measurement:
    """One row, in this (child) process."""
    settings = KafkaSettings(bootstrap_servers=bootstrap, topics=TopicNames(prefix), partitions=3)
    if row == ROWS[0]:
        return raw_loop(settings, end)
    if row == BARE:
        return bare_loop(settings, end)
    if row == QUIX:
        return quixstreams_peer(settings, end)
    if row == CEILING:
        return ceiling_loop(settings, end)
    if row == "otel sink":
        return otel_sink_rate(settings, end, workdir)
    if row == "otel collector alone":
        return collector_alone(settings, end, workdir)
    if row == "otel sink, requests dropped":
        return otel_sink_rate(settings, end, workdir, collector=False)
    with service_logging("WARNING"):
        if row == "runtime, no sink":
            service: ConsumerService = ConsumerService(
                service_settings(settings, ServiceName.LOG_SINK),
                NoSink(),
                registry=CollectorRegistry(),
                serve_http=False,
            )
        elif row == "log sink":
            log_file = Path(workdir) / f"throughput-{uuid.uuid4().hex}.jsonl"
            service = log_sink_service(
                service_settings(
                    settings, ServiceName.LOG_SINK, log=LogSinkSettings(file=log_file)
                ),
                registry=CollectorRegistry(),
                serve_http=False,
            )
        elif row == "htir feeder":
            # Its traces are produced to the traces topic (part of its work); a trace
            # still open at the end is not waited for (see service_rate's ``handed``).
            registry = CollectorRegistry()
            sink = HtirFeederSink(settings, registry=registry, idle_timeout=300.0)
            service = ConsumerService(
                service_settings(settings, ServiceName.HTIR_FEEDER),
                sink,
                registry=registry,
                serve_http=False,
            )
            return service_rate(service, end, handed=True)
        else:
            service = verdict_metrics_service(
                service_settings(settings, ServiceName.VERDICT_METRICS),
                registry=CollectorRegistry(),
                serve_http=False,
            )
        result = service_rate(service, end)
    for leftover in Path(workdir).glob("throughput-*.jsonl*"):
        leftover.unlink()
    return result


def _row_child(row: str, args: tuple[Any, ...], out: Any) -> None:
    out.put(measure_row(row, *args))


def in_child(row: str, *args: Any) -> Measurement:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    child = ctx.Process(target=_row_child, args=(row, args, out))
    child.start()
    while True:
        try:
            result: Measurement = out.get(timeout=1.0)
            break
        except queue.Empty:
            if not child.is_alive():
                raise RuntimeError(f"{row}: measuring process exited {child.exitcode}") from None
    child.join()
    return result


def spread(values: Sequence[float]) -> str:
    return f"{statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f})"


def throughput(
    bootstrap: str,
    events: int,
    rounds: int,
    workdir: Path,
    versions: tuple[int, ...],
    *,
    only: Sequence[str] | None = None,
) -> None:
    settings = fresh_settings(bootstrap)
    args = argparse.Namespace(
        events=events,
        seed=1,
        schema_versions=versions,
        sessions=200,
        rate=0,
        spool_dir=workdir / "spool-throughput",
        close_timeout=30.0,
    )
    publish_simulation(settings, args)
    end = end_offsets(settings, settings.topics.turn_events)
    total = sum(end.values())
    print(
        f"\n1. throughput: {total} messages (schema v{', v'.join(map(str, versions))}), "
        f"{rounds} rounds in rotated order, each row in its own process and fresh group"
    )
    try:
        import quixstreams  # noqa: F401, PLC0415 - only whether the bench extra is installed

        rows = ROWS
    except ImportError:
        print("  quixstreams is not installed (pip install -e '.[bench]'): its row is left out")
        rows = tuple(r for r in ROWS if r != QUIX)
    if only:
        rows = tuple(r for r in rows if r in only or r in (CEILING, BARE, RAW))
    rates: dict[str, list[float]] = {row: [] for row in ROWS}
    cpu: dict[str, list[float]] = {row: [] for row in ROWS}
    vs_bare: dict[str, list[float]] = {row: [] for row in ROWS}
    vs_quix: dict[str, list[float]] = {row: [] for row in ROWS}
    vs_ceiling: dict[str, list[float]] = {row: [] for row in ROWS}
    vs_raw: dict[str, list[float]] = {row: [] for row in ROWS}
    for r in range(rounds):
        order = rows[r % len(rows) :] + rows[: r % len(rows)]
        this_round: dict[str, float] = {}
        for row in order:
            rate, us = in_child(row, bootstrap, settings.topics.prefix, end, str(workdir))
            this_round[row] = rate
            rates[row].append(rate)
            cpu[row].append(us)
        # Ratios only between rows of the same round.
        for row in rows:
            vs_bare[row].append(this_round[row] / this_round[BARE])
            vs_quix[row].append(this_round[row] / this_round.get(QUIX, float("nan")))
            vs_ceiling[row].append(this_round[row] / this_round[CEILING])
            vs_raw[row].append(this_round[row] / this_round[RAW])
        print(f"  round {r + 1}: " + ", ".join(f"{row} {this_round[row]:,.0f}/s" for row in order))
    print(
        f"\n  {'consumer':<28} {'events/s (median, min-max)':>34}  {'CPU us/event':>12}  "
        f"{'vs bare: median (min-max)':>26}  {'vs quixstreams':>20}  {'vs ceiling':>20}  "
        f"{'vs raw consume':>20}"
    )
    for row in rows:
        med = statistics.median(rates[row])
        print(
            f"  {row:<28} {med:>12,.0f} ({min(rates[row]):>8,.0f}-{max(rates[row]):>8,.0f})  "
            f"{statistics.median(cpu[row]):>12.1f}  {spread(vs_bare[row]):>26}  "
            f"{spread(vs_quix[row]):>20}  {spread(vs_ceiling[row]):>20}  "
            f"{spread(vs_raw[row]):>20}"
        )


# -- 2. and 3. load at a steady rate ---------------------------------------------------
def publish_steadily(bootstrap: str, prefix: str, rate: int, seconds: float, spool: str) -> None:
    """Child process: publish at ``rate``/s with occurred_at = publish time."""
    settings = KafkaSettings(bootstrap_servers=bootstrap, topics=TopicNames(prefix), partitions=3)
    publisher = TurnEventPublisher(settings, spool_dir=Path(spool))
    sim = TurnRuntimeSimulator(3, schema_versions=(1, 2), concurrent_sessions=500)
    count = int(rate * seconds)
    started = time.monotonic()
    for i, event in enumerate(sim.events(count)):
        delay = started + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        event["occurred_at"] = int(time.time() * 1000)
        publisher.publish(event)
    publisher.close()


class TimedMetricsSink(VerdictMetricsSink):
    """Records each turn's delay (ms) from occurred_at to counted, and each flushed
    batch's worst (one per batch that handed turns, in order: the timeline's marks)."""

    delays_ms: list[float]
    taken_ms: list[int]
    worst_ms: list[float]

    def take(self, turn: ConsumedTurn) -> None:
        super().take(turn)
        self.taken_ms.append(turn.decoded.event["occurred_at"])

    def flush(self) -> None:
        super().flush()
        if not self.taken_ms:
            return
        now_ms = time.time() * 1000
        self.delays_ms.extend(now_ms - ms for ms in self.taken_ms)
        self.worst_ms.append(now_ms - min(self.taken_ms))
        self.taken_ms = []


P99_GOAL_MS = 50.0


@dataclass(frozen=True)
class DelayRun:
    p50: float
    p99: float
    p999: float
    worst: float
    count: int
    timeline: Path


def explain_slow_batches(
    marks: Sequence[BatchMark], worst_ms: Sequence[float], above: float
) -> None:
    """Where the time of the batches holding turns slower than ``above`` ms went: a
    turn's delay is its age when the poll returned (of which ``away``: the loop was busy
    and not polling) plus the service's validation and flush; with the collector's pauses."""
    if len(marks) != len(worst_ms):
        print(f"    (timeline of {len(marks)} batches, {len(worst_ms)} flushes: not joined)")
        return
    slow = [(m, w) for m, w in zip(marks, worst_ms, strict=True) if w > above]
    if not slow:
        return
    arrival = [max(0.0, m.oldest_age_ms - 1000 * m.away_s) for m, _ in slow]
    away = [1000 * m.away_s for m, _ in slow]
    own = [1000 * (m.examined_s + m.flushed_s) for m, _ in slow]
    gc_ms = [1000 * m.gc_s for m, _ in slow]
    # Wall time the thread did not work (away and in its phases): waiting for a CPU or the GIL.
    idle = [
        1000 * (m.away_s - m.away_cpu_s + m.examined_s + m.flushed_s + m.stored_s - m.work_cpu_s)
        for m, _ in slow
    ]
    print(
        f"    {len(slow)} of {len(marks)} batches hold turns over {above:.1f} ms; their "
        f"worst turn's delay, split (median / max ms): age on arrival not the loop's "
        f"{statistics.median(arrival):.1f} / {max(arrival):.1f}, loop away from polling "
        f"{statistics.median(away):.1f} / {max(away):.1f}, validation + flush "
        f"{statistics.median(own):.1f} / {max(own):.1f}; of the loop's part, GC "
        f"{statistics.median(gc_ms):.1f} / {max(gc_ms):.1f} and the thread not running "
        f"{statistics.median(idle):.1f} / {max(idle):.1f} "
        f"(preempted {sum(m.preempted for m, _ in slow)} times, "
        f"blocked {sum(m.blocked for m, _ in slow)} times)"
    )
    first = marks[0].polled_at
    for m, w in sorted(slow, key=lambda mw: -mw[1])[:3]:
        print(
            f"      at {m.polled_at - first:6.1f} s: {m.size} records, worst {w:.1f} ms, "
            f"oldest {m.oldest_age_ms:.1f} ms old on arrival, poll {1000 * m.poll_s:.1f} ms, "
            f"away {1000 * m.away_s:.1f} ms (CPU {1000 * m.away_cpu_s:.1f}), "
            f"validation {1000 * m.examined_s:.1f} ms, "
            f"flush {1000 * m.flushed_s:.1f} ms, store {1000 * m.stored_s:.1f} ms "
            f"(CPU {1000 * m.work_cpu_s:.1f} for the three), preempted {m.preempted}, "
            f"blocked {m.blocked}, "
            f"GC {1000 * m.gc_s:.1f} ms ({m.gc_runs} runs, oldest gen {m.gc_oldest_generation})"
        )


def latency(
    bootstrap: str, rate: int, seconds: float, workdir: Path, runs: int, *, timelines: Path
) -> None:
    """A warm-up run (a warm broker and page cache, not counted), then ``runs`` runs,
    each on a fresh topic and group; the goal is p99 <= P99_GOAL_MS in every run."""
    print(
        f"\n2. delay publish() -> counted by the metrics service at {rate:,}/s, "
        f"{seconds:.0f} s per run, one worker, a warm-up run then {runs} run(s):"
    )
    print(f"  (each run's batch timeline: {timelines}/)")
    met = 0
    stamp = time.strftime("%Y%m%dT%H%M%S")
    for run in range(runs + 1):
        label = "warm-up" if run == 0 else f"run {run}"
        out = timelines / f"{stamp}-{label.replace(' ', '-')}.jsonl"
        r = latency_run(bootstrap, rate, seconds, workdir / f"lat-{run}", out)
        print(
            f"  {label:8} p50 {r.p50:6.1f} ms   p99 {r.p99:6.1f} ms   p99.9 {r.p999:6.1f} ms   "
            f"max {r.worst:7.1f} ms   ({r.count:,} events, the first 2 s skipped)"
        )
        met += run > 0 and r.p99 <= P99_GOAL_MS
    print(f"  p99 <= {P99_GOAL_MS:.0f} ms in {met} of {runs} run(s)")


def latency_run(
    bootstrap: str, rate: int, seconds: float, workdir: Path, timeline_file: Path
) -> DelayRun:
    settings = fresh_settings(bootstrap)
    # The metrics service's runtime and sink, the sink also recording each delay.
    registry = CollectorRegistry()
    timed = TimedMetricsSink(MetricsSettings(), registry)
    timed.delays_ms = []
    timed.taken_ms = []
    timed.worst_ms = []
    timeline = BatchTimeline()
    service = ConsumerService(
        service_settings(settings, ServiceName.VERDICT_METRICS, auto_offset_reset="latest"),
        timed,
        registry=registry,
        serve_http=False,
        timeline=timeline,
    )
    thread = threading.Thread(target=service.run)
    thread.start()
    service.assigned_once.wait()
    child = multiprocessing.get_context("spawn").Process(
        target=publish_steadily,
        args=(bootstrap, settings.topics.prefix, rate, seconds, str(workdir / "spool-latency")),
    )
    child.start()
    child.join()
    end = end_offsets(settings, settings.topics.turn_events)
    while not caught_up(service.positions, end):
        time.sleep(0.05)
    service.stop()
    thread.join()
    timeline_file.parent.mkdir(parents=True, exist_ok=True)
    timeline.write(timeline_file)
    warm = int(rate * 2)  # the first 2 s include connection set-up
    delays = sorted(timed.delays_ms[warm:])
    q = statistics.quantiles(delays, n=1000)
    run = DelayRun(q[499], q[989], q[998], delays[-1], len(delays), timeline_file)
    # The batches of the first 2 s are left out as their turns are.
    skip = next(
        (i for i, m in enumerate(timeline.marks) if m.polled_at >= timeline.marks[0].polled_at + 2),
        0,
    )
    explain_slow_batches(timeline.marks[skip:], timed.worst_ms[skip:], run.p99)
    return run


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def memory(bootstrap: str, rate: int, minutes: float, workdir: Path) -> None:
    settings = fresh_settings(bootstrap)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "TURNAUDIT_TOPIC_PREFIX": settings.topics.prefix,
        "TURNAUDIT_HTTP_HOST": "127.0.0.1",
        "TURNAUDIT_LOG_FILE": str(workdir / "memory-turns.jsonl"),
        "TURNAUDIT_LOG_FILE_MAX_BYTES": str(50 * 1024 * 1024),
        "TURNAUDIT_LOG_FILE_BACKUPS": "2",
    }
    procs = {
        name: subprocess.Popen(
            [TURNAUDIT, "sink", name],
            env={**env, "TURNAUDIT_HTTP_PORT": str(free_port())},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name in ("logs", "metrics")
    }
    time.sleep(3)
    seconds = minutes * 60
    child = multiprocessing.get_context("spawn").Process(
        target=publish_steadily,
        args=(bootstrap, settings.topics.prefix, rate, seconds, str(workdir / "spool-memory")),
    )
    child.start()
    print(f"\n3. resident memory under {rate:,}/s for {minutes:g} min (MiB):")
    print(f"  {'t (s)':>6}  {'log sink':>9}  {'metrics':>9}")
    samples: dict[str, list[int]] = {name: [] for name in procs}
    started = time.monotonic()
    interval = 30.0 if minutes >= 2 else 10.0
    while child.is_alive():
        child.join(interval)
        for name, proc in procs.items():
            samples[name].append(rss_kib(proc.pid))
        print(
            f"  {time.monotonic() - started:>6.0f}  "
            + "  ".join(f"{samples[n][-1] / 1024:>9.1f}" for n in procs),
            flush=True,
        )
    for proc in procs.values():
        proc.terminate()
        proc.wait(60)
    for name, values in samples.items():
        # From the first minute on: start-up allocations are not growth.
        settled = values[min(len(values) - 1, int(60 / interval)) :]
        print(
            f"  {name}: {settled[0] / 1024:.1f} -> {settled[-1] / 1024:.1f} MiB after warm-up "
            f"(max {max(settled) / 1024:.1f})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small N, short runs (~2 minutes)")
    parser.add_argument("--events", type=int, help="messages for the throughput runs")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--latency-seconds", type=float)
    parser.add_argument(
        "--latency-runs",
        type=int,
        default=5,
        help="delay runs after a warm-up run (goal: p99 <= 50 ms in each)",
    )
    parser.add_argument(
        "--timelines",
        type=Path,
        default=PROJECT / "var" / "bench-timelines",
        help="where each delay run's batch timeline (JSON lines) is written",
    )
    parser.add_argument("--memory-minutes", type=float)
    parser.add_argument("--only", choices=("throughput", "latency", "memory"))
    parser.add_argument(
        "--otel-protocol",
        choices=[p.value for p in OtlpProtocol],
        default=OtlpProtocol.GRPC.value,
        help="the OTel sink row's OTLP protocol (default: grpc, the service's default)",
    )
    parser.add_argument(
        "--rows",
        nargs="+",
        choices=ROWS,
        help="only these throughput rows (the ceiling's always: the ratios are to it)",
    )
    parser.add_argument(
        "--versions",
        type=int,
        nargs="+",
        default=[3],
        help="schema versions of the throughput messages (default: v3)",
    )
    args = parser.parse_args()
    os.environ[OTEL_PROTOCOL] = args.otel_protocol  # the rows' processes inherit it
    events = args.events or (30_000 if args.quick else 100_000)
    latency_seconds = args.latency_seconds or (10.0 if args.quick else 30.0)
    memory_minutes = args.memory_minutes or (1.0 if args.quick else 10.0)
    # The services' own diagnostics as JSON on stderr, warnings only: stdout keeps the figures.
    with tempfile.TemporaryDirectory(prefix="bench-consumers-") as tmp, service_logging("WARNING"):
        workdir = Path(tmp)
        bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
        broker = None
        if not bootstrap:
            ports = free_ports(2)
            broker = LocalKafkaBroker(
                LocalBrokerSettings(
                    home=workdir / "kafka",
                    jars_dir=PROJECT / "deploy/kafka/target/jars",
                    pom=PROJECT / "deploy/kafka/pom.xml",
                    port=ports[0],
                    controller_port=ports[1],
                    heap="768m",
                )
            )
            bootstrap = broker.start().bootstrap_servers
        print(f"broker {bootstrap}; {os.cpu_count()} CPUs")
        try:
            if args.only in (None, "throughput"):
                versions = tuple(args.versions)
                throughput(bootstrap, events, args.rounds, workdir, versions, only=args.rows)
            if args.only in (None, "latency"):
                latency(
                    bootstrap,
                    args.rate,
                    latency_seconds,
                    workdir,
                    1 if args.quick else args.latency_runs,
                    timelines=args.timelines,
                )
            if args.only in (None, "memory"):
                memory(bootstrap, args.rate, memory_minutes, workdir)
        finally:
            if broker is not None:
                broker.stop()


if __name__ == "__main__":
    main()
