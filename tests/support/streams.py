"""Helpers for the consumer tests: publish a simulated run, run a service, scrape it."""

from __future__ import annotations

import argparse
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from tests.support.events import encode
from turnaudit.commands.simulate import publish_simulation
from turnaudit.consumers.htir_feeder import HtirFeederSink
from turnaudit.consumers.runtime import ConsumerService
from turnaudit.consumers.runtime.settings import ServiceName, ServiceSettings
from turnaudit.htir import HtirTrace
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.producers.simulator import GroundTruth
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings


def publish_simulated(
    settings: KafkaSettings, events: int, spool: Path, seed: int = 7, rate: int = 0
) -> GroundTruth:
    """``events`` simulated turns, as fast as they go or at ``rate`` per second."""
    every_version = tuple(s.version for s in shipped_catalog().versions)
    args = argparse.Namespace(
        events=events,
        seed=seed,
        schema_versions=every_version,
        sessions=60,
        rate=rate,
        spool_dir=spool,
        close_timeout=30.0,
    )
    sim, report, _, _ = publish_simulation(settings, args)
    assert report.ok, report
    return sim.truth


def produce_raw(settings: KafkaSettings, messages: list[tuple[bytes, bytes]]) -> None:
    """(key, value) pairs onto the turn-events topic, as they are."""
    producer = Producer(settings.client_config())
    for key, value in messages:
        producer.produce(settings.topics.turn_events, value, key)
    assert producer.flush(30) == 0


def service_settings(
    settings: KafkaSettings, service: ServiceName, group_id: str, **over: Any
) -> ServiceSettings:
    return ServiceSettings(
        service=service,
        kafka=settings,
        group_id=group_id,
        http_port=0,
        http_host="127.0.0.1",
        **over,
    )


@contextmanager
def running(service: ConsumerService) -> Iterator[ConsumerService]:
    thread = threading.Thread(target=service.run, daemon=True)
    thread.start()
    try:
        yield service
    finally:
        service.stop()
        thread.join(60)
        assert not thread.is_alive(), "the service did not stop"


def wait_for(condition: Callable[[], bool], timeout: float = 60.0) -> bool:
    """Poll until ``condition`` holds or time runs out; the caller asserts the state."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def consumed_everything(service: ConsumerService, end: dict[int, int]) -> Callable[[], bool]:
    return lambda: all(service.positions().get(p, 0) >= e for p, e in end.items() if e > 0)


def http_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Samples of a /metrics page: (name, sorted labels) -> value."""
    _, text = http_get(port, "/metrics")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def total(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> int:
    return int(
        sum(
            v
            for (n, ls), v in samples.items()
            if n == name and all((k, val) in ls for k, val in labels.items())
        )
    )


def published_traces(settings: KafkaSettings, topic: str | None = None) -> list[HtirTrace]:
    """The traces on ``topic`` (default: the HTIR traces topic), in offset order."""
    topic = topic or settings.topics.htir_traces
    decode = TurnEventDeserializer(shipped_catalog("htir_trace"))
    return [
        HtirTrace.from_avro(decode(msg.value()).event)
        for msg in read_range(settings, topic, None, end_offsets(settings, topic))
    ]


def task_steps_on_stream(settings: KafkaSettings) -> dict[str, list[int]]:
    """Per task id, the task steps of its turns on the turn-events topic."""
    topic = settings.topics.turn_events
    decode = TurnEventDeserializer(shipped_catalog())
    steps: dict[str, list[int]] = {}
    for msg in read_range(settings, topic, None, end_offsets(settings, topic)):
        task = decode(msg.value()).event["task"]
        if task is not None:
            steps.setdefault(task["task_id"], []).append(task["step"])
    return {task_id: sorted(s) for task_id, s in steps.items()}


def feeder(
    settings: KafkaSettings, group: str, manifest: Path | None = None, idle: float = 1.0
) -> tuple[ConsumerService, HtirFeederSink]:
    registry = CollectorRegistry()
    sink = HtirFeederSink(settings, registry=registry, idle_timeout=idle, manifest=manifest)
    service = ConsumerService(
        service_settings(settings, ServiceName.HTIR_FEEDER, group), sink, registry=registry
    )
    return service, sink


def one_trace(settings: KafkaSettings, events: list[dict[str, Any]], group: str) -> HtirTrace:
    """``events`` (one task) onto the turn topic, through a feeder: the one trace published."""
    produce_raw(settings, [(e["session_id"].encode(), encode(e)) for e in events])
    service, sink = feeder(settings, group)
    with running(service):
        assert wait_for(lambda: sink.published == 1, timeout=60)
    (trace,) = published_traces(settings)
    return trace


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def counter_samples(registry: CollectorRegistry) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in registry.collect()
        for s in family.samples
        if s.name.endswith("_total")
    }
