"""Registry mode against single-object framing, with the real registry (Apicurio Registry,
``make registry``): what it costs ``publish()`` and a consumer, in one run.

1. The registry: time from launch to its Confluent-compatible API answering, and its
   resident memory (after start, and after the run), over ``--starts`` starts.
2. ``publish()``: the same batch of v5 turns published by a single-object publisher and by
   a registry-mode publisher (ids registered when it was built, so the turn's path never
   calls the registry), rounds rotated; µs per turn each, and registry / single-object
   within each round. Also the registry-mode publisher's construction (the registration of
   every version, once per process start).
3. A consumer: the verdict-metrics service (as the CLI builds it, fresh group each round)
   reads the single-object topic and the registry-framed topic, rounds rotated; events/s
   from its first assignment to the last message, CPU µs per event (the whole process:
   librdkafka's threads included), and the ratio within each round. And the decode
   alone (``decoder_for``'s deserializer over the stored values, ids resolved once).

    .venv/bin/python benchmarks/bench_registry.py [--events 20000] [--rounds 5] [--starts 3]

Uses KAFKA_BOOTSTRAP_SERVERS, or starts the project's local broker in a temporary folder;
always starts its own registry on free loopback ports.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _broker import PROJECT_DIR, benchmark_cluster

from turnaudit.consumers.log_sink import service_logging
from turnaudit.consumers.metrics import verdict_metrics_service
from turnaudit.consumers.runtime.settings import ServiceName, ServiceSettings
from turnaudit.kafka.decoders import decoder_for
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.kafka.topics import ensure_topics
from turnaudit.local_broker import free_ports
from turnaudit.local_registry import LocalRegistrySettings, LocalSchemaRegistry
from turnaudit.local_registry.server import resident_mb
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.settings import KafkaSettings
from turnaudit.topic_names import TopicNames

SINGLE, REGISTRY = "single-object", "registry (Confluent)"


def spread(values: Sequence[float], digits: int = 2) -> str:
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{mid:.{digits}f} ({low:.{digits}f}-{high:.{digits}f})"


def local_registry(home: Path) -> LocalSchemaRegistry:
    port, management = free_ports(2)
    target = PROJECT_DIR / "deploy/registry/target"
    return LocalSchemaRegistry(
        LocalRegistrySettings(
            home=home,
            server=target / "server",
            java_dir=target / "java",
            pom=PROJECT_DIR / "deploy/registry/pom.xml",
            port=port,
            management_port=management,
        )
    )


def registry_starts(workdir: Path, starts: int) -> LocalSchemaRegistry:
    """Start, measure and stop ``starts - 1`` times; the last start is left running."""
    took, rss = [], []
    registry = local_registry(workdir / "registry")
    for n in range(starts):
        status = registry.start()
        assert registry.started_in_s is not None
        took.append(registry.started_in_s)
        rss.append(status.rss_mb or 0.0)
        if n < starts - 1:
            registry.stop()
    print(f"registry start, launch to API answering: {spread(took, 1)} s over {starts} starts")
    print(f"registry resident memory after start: {spread(rss, 0)} MB")
    return registry


def batch(n: int) -> list[dict[str, Any]]:
    out = []
    for i, event in enumerate(TurnRuntimeSimulator(50, schema_versions=(5,)).events(n)):
        event["event_id"] = f"{i:032x}"
        out.append(event)
    return out


def fresh(settings: KafkaSettings, url: str | None) -> KafkaSettings:
    copy = dataclasses.replace(
        settings, topics=TopicNames(f"bench-{uuid.uuid4().hex[:8]}."), schema_registry_url=url
    )
    ensure_topics(copy)
    return copy


def publish_round(settings: KafkaSettings, events: list[dict[str, Any]], spool: Path) -> float:
    publisher = TurnEventPublisher(settings, spool_dir=spool, registry=CollectorRegistry())
    started = time.perf_counter()
    for event in events:
        publisher.publish(event)  # type: ignore[arg-type]  # the simulator's events
    elapsed = time.perf_counter() - started
    report = publisher.close(timeout=60)
    assert report.ok, report
    return 1e6 * elapsed / len(events)


def consume_round(settings: KafkaSettings) -> tuple[float, float]:
    """(events/s, CPU µs per event) of the verdict-metrics service over the whole topic."""
    end = end_offsets(settings, settings.topics.turn_events)
    service = verdict_metrics_service(
        ServiceSettings(
            service=ServiceName.VERDICT_METRICS,
            kafka=settings,
            group_id=f"bench-{uuid.uuid4().hex}",
        ),
        registry=CollectorRegistry(),
        serve_http=False,
    )
    thread = threading.Thread(target=service.run)
    thread.start()
    service.assigned_once.wait()
    started, cpu_at = time.perf_counter(), time.process_time()
    while not all(service.positions().get(p, 0) >= e for p, e in end.items() if e > 0):
        time.sleep(0.002)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_at
    service.stop()
    thread.join()
    total = sum(end.values())
    return total / elapsed, 1e6 * cpu / total


def decode_round(decode: Callable[[bytes], Any], values: list[bytes]) -> float:
    started = time.perf_counter()
    for value in values:
        decode(value)
    return 1e6 * (time.perf_counter() - started) / len(values)


def rotated(rounds: int) -> list[tuple[str, str]]:
    return [(SINGLE, REGISTRY) if n % 2 == 0 else (REGISTRY, SINGLE) for n in range(rounds)]


def report(title: str, unit: str, by_mode: dict[str, list[float]], ratios: list[float]) -> None:
    print(f"\n{title}")
    for mode, values in by_mode.items():
        print(f"  {mode:<22} {spread(values)} {unit}")
    print(f"  registry / single-object within each round: {spread(ratios, 3)}x")


def publishing(
    base: KafkaSettings, registry: LocalSchemaRegistry, workdir: Path, args: argparse.Namespace
) -> dict[str, KafkaSettings]:
    """Sections 2: construction and publish(); the topics of the last round, by mode."""
    events = batch(args.events)
    url = {SINGLE: None, REGISTRY: registry.url}
    built = []
    for n in range(3):
        started = time.perf_counter()
        TurnEventPublisher(fresh(base, registry.url), spool_dir=workdir / f"built-{n}").close()
        built.append(time.perf_counter() - started)
    print(
        "registry-mode publisher construction (every version registered under a new "
        f"subject): {spread([1e3 * b for b in built], 0)} ms"
    )
    publish_us: dict[str, list[float]] = {SINGLE: [], REGISTRY: []}
    ratios, last = [], {}
    for n, order in enumerate(rotated(args.rounds)):
        this = {}
        for mode in order:
            last[mode] = fresh(base, url[mode])
            this[mode] = publish_round(last[mode], events, workdir / f"spool-{n}-{mode[0]}")
            publish_us[mode].append(this[mode])
        ratios.append(this[REGISTRY] / this[SINGLE])
    report(f"publish() of {args.events} v5 turns", "µs/turn", publish_us, ratios)
    return last


def consuming(last: dict[str, KafkaSettings], rounds: int) -> None:
    """Section 3: the service over each topic, then the decode alone."""
    rate: dict[str, list[float]] = {SINGLE: [], REGISTRY: []}
    cpu: dict[str, list[float]] = {SINGLE: [], REGISTRY: []}
    rate_ratios, cpu_ratios = [], []
    for order in rotated(rounds):
        this_rate, this_cpu = {}, {}
        for mode in order:
            this_rate[mode], this_cpu[mode] = consume_round(last[mode])
            rate[mode].append(this_rate[mode])
            cpu[mode].append(this_cpu[mode])
        rate_ratios.append(this_rate[REGISTRY] / this_rate[SINGLE])
        cpu_ratios.append(this_cpu[REGISTRY] / this_cpu[SINGLE])
    report("verdict-metrics service, events/s", "events/s", rate, rate_ratios)
    report("verdict-metrics service, CPU per event", "µs/event", cpu, cpu_ratios)

    stored = {
        mode: [
            m.value()
            for m in read_range(
                settings,
                settings.topics.turn_events,
                None,
                end_offsets(settings, settings.topics.turn_events),
            )
        ]
        for mode, settings in last.items()
    }
    decoders = {mode: decoder_for(settings) for mode, settings in last.items()}
    for mode, values in stored.items():  # a warm-up pass: ids resolved, caches filled
        decode_round(decoders[mode], values)
    decode_us: dict[str, list[float]] = {SINGLE: [], REGISTRY: []}
    decode_ratios = []
    for order in rotated(rounds):
        this = {}
        for mode in order:
            this[mode] = decode_round(decoders[mode], stored[mode])
            decode_us[mode].append(this[mode])
        decode_ratios.append(this[REGISTRY] / this[SINGLE])
    report("decode alone (decoder_for)", "µs/message", decode_us, decode_ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--starts", type=int, default=3)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="turnaudit-bench-registry-") as tmp,
        service_logging("WARNING"),
        benchmark_cluster(partitions=6) as (base, _),
    ):
        workdir = Path(tmp)
        registry = registry_starts(workdir, args.starts)
        try:
            consuming(publishing(base, registry, workdir, args), args.rounds)
            pid = registry.pid()
            after = resident_mb(pid) if pid is not None else None
            print(f"\nregistry resident memory after the run: {after or 0:.0f} MB")
        finally:
            registry.stop()


if __name__ == "__main__":
    main()
