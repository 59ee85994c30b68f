"""Consumer services against a bare loop, end-to-end delay, and memory under load.

    .venv/bin/python benchmarks/bench_consumers.py            # full: 10-minute memory run
    .venv/bin/python benchmarks/bench_consumers.py --quick    # ~2 minutes in all

1. Throughput: the same N messages read by a bare loop (consume + decode, no
   sink) and by each service, each in its own fresh group, measured in this
   run; printed as events/s, microseconds per event and as a ratio to the
   bare loop (goal >= 0.85x). The shared runtime with a sink that keeps
   nothing (contract and sequence checks, offsets) is measured too: no sink
   can do better than it.
2. Delay from ``publish()`` to counted by the metrics service at a steady
   rate (default 5,000 events/s, the publisher in its own process): p50, p99
   (goal p99 <= 100 ms). occurred_at is set at publish time (millisecond
   resolution, so delays read up to 1 ms long).
3. Resident memory of the two services as real processes under that load,
   sampled every 30 s (goal: flat).

Uses KAFKA_BOOTSTRAP_SERVERS, or starts the project's local broker in a
temporary folder.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer
from prometheus_client import CollectorRegistry

from turnaudit.commands.simulate import publish_simulation
from turnaudit.consumers.log_sink import LogSinkService, service_logging
from turnaudit.consumers.metrics import VerdictMetricsService, VerdictMetricsSink
from turnaudit.consumers.runtime import ConsumedTurn, ConsumerService, Sink
from turnaudit.consumers.settings import (
    LogSinkSettings,
    MetricsSettings,
    ServiceName,
    ServiceSettings,
)
from turnaudit.kafka.local_broker import LocalKafkaBroker, free_port, free_ports
from turnaudit.kafka.reading import end_offsets
from turnaudit.kafka.topics import ensure_topics
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings, LocalBrokerSettings, TopicNames

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
def bare_loop(settings: KafkaSettings, end: dict[int, int]) -> float:
    """Events/s of consume + decode alone, from assignment to the last message."""
    decode = TurnEventDeserializer(shipped_catalog())
    assigned_at: list[float] = []
    consumer = Consumer(
        settings.client_config(
            **{
                "group.id": f"bench-bare-{uuid.uuid4().hex}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 50,
                "log_level": 3,
            }
        )
    )
    consumer.subscribe(
        [settings.topics.turn_events], on_assign=lambda *_: assigned_at.append(time.perf_counter())
    )
    positions: dict[int, int] = {}
    total = sum(end.values())
    seen = 0
    while seen < total:
        for msg in consumer.consume(500, 0.05):
            if msg.error() is None:
                decode(msg.value())
                # The bookkeeping the runtime does too (next offset per partition).
                positions[msg.partition() or 0] = (msg.offset() or 0) + 1
                seen += 1
    elapsed = time.perf_counter() - assigned_at[0]
    consumer.close()
    return total / elapsed


class NoSink(Sink):
    """Takes every batch and keeps nothing: the runtime's own cost."""

    def write(self, turns: Sequence[ConsumedTurn]) -> None:
        pass

    def close(self) -> None:
        pass


def service_rate(service: ConsumerService, end: dict[int, int]) -> float:
    thread = threading.Thread(target=service.run)
    thread.start()
    service.assigned_once.wait()
    started = time.perf_counter()
    while not caught_up(service.positions, end):
        time.sleep(0.002)
    elapsed = time.perf_counter() - started
    service.stop()
    thread.join()
    return sum(end.values()) / elapsed


def service_settings(settings: KafkaSettings, service: ServiceName, **over: Any) -> ServiceSettings:
    return ServiceSettings(
        service=service,
        kafka=settings,
        group_id=f"bench-{service.value}-{uuid.uuid4().hex}",
        **over,
    )


def throughput(bootstrap: str, events: int, rounds: int, workdir: Path) -> None:
    settings = fresh_settings(bootstrap)
    args = argparse.Namespace(
        events=events,
        seed=1,
        schema_versions=(1, 2),
        sessions=200,
        rate=0,
        spool_dir=workdir / "spool-throughput",
    )
    publish_simulation(settings, args)
    end = end_offsets(settings, settings.topics.turn_events)
    print(f"\n1. throughput: {sum(end.values())} messages, {rounds} rounds, best of each")
    results: dict[str, list[float]] = {
        "bare loop (consume+decode)": [],
        "runtime, no sink": [],
        "log sink": [],
        "verdict metrics": [],
    }
    log_settings = LogSinkSettings(file=workdir / "throughput-turns.jsonl")
    for _ in range(rounds):
        results["bare loop (consume+decode)"].append(bare_loop(settings, end))
        with service_logging("WARNING"):
            runtime = ConsumerService(
                service_settings(settings, ServiceName.LOG_SINK),
                NoSink(),
                registry=CollectorRegistry(),
                serve_http=False,
            )
            results["runtime, no sink"].append(service_rate(runtime, end))
            logs = LogSinkService(
                service_settings(settings, ServiceName.LOG_SINK, log=log_settings),
                registry=CollectorRegistry(),
                serve_http=False,
            )
            results["log sink"].append(service_rate(logs, end))
            metrics = VerdictMetricsService(
                service_settings(settings, ServiceName.VERDICT_METRICS),
                registry=CollectorRegistry(),
                serve_http=False,
            )
            results["verdict metrics"].append(service_rate(metrics, end))
        (workdir / "throughput-turns.jsonl").unlink()
    bare = max(results["bare loop (consume+decode)"])
    for name, rates in results.items():
        best = max(rates)
        print(
            f"  {name:<28} {best:>9,.0f} events/s  {1e6 / best:>5.1f} us/event  "
            f"ratio {best / bare:.2f}x  (rounds: {', '.join(f'{r:,.0f}' for r in rates)})"
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
    """Records each turn's delay (ms) from occurred_at to counted."""

    delays_ms: list[float]

    def write(self, turns: Sequence[ConsumedTurn]) -> None:
        super().write(turns)
        now_ms = time.time() * 1000
        self.delays_ms.extend(now_ms - t.event["occurred_at"].timestamp() * 1000 for t in turns)


def latency(bootstrap: str, rate: int, seconds: float, workdir: Path) -> None:
    settings = fresh_settings(bootstrap)
    # The metrics service's runtime and sink, the sink also recording each delay.
    registry = CollectorRegistry()
    timed = TimedMetricsSink(MetricsSettings(), registry)
    timed.delays_ms = []
    service = ConsumerService(
        service_settings(settings, ServiceName.VERDICT_METRICS, auto_offset_reset="latest"),
        timed,
        registry=registry,
        serve_http=False,
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
    warm = int(rate * 2)  # the first 2 s include connection set-up
    delays = sorted(timed.delays_ms[warm:])
    q = statistics.quantiles(delays, n=100)
    print(
        f"\n2. delay publish() -> counted at {rate:,}/s for {seconds:.0f} s "
        f"({len(timed.delays_ms):,} events, first {warm:,} skipped):"
    )
    print(f"  p50 {q[49]:.1f} ms   p99 {q[98]:.1f} ms   max {delays[-1]:.1f} ms")


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
    parser.add_argument("--memory-minutes", type=float)
    parser.add_argument("--only", choices=("throughput", "latency", "memory"))
    args = parser.parse_args()
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
                throughput(bootstrap, events, args.rounds, workdir)
            if args.only in (None, "latency"):
                latency(bootstrap, args.rate, latency_seconds, workdir)
            if args.only in (None, "memory"):
                memory(bootstrap, args.rate, memory_minutes, workdir)
        finally:
            if broker is not None:
                broker.stop()


if __name__ == "__main__":
    main()
