"""The shared consumer runtime on the real broker: dead letters, contracts, delivery, HTTP."""

from __future__ import annotations

import gc
import json
import random
from collections.abc import Sequence
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from tests.support.events import breaking_events, encode, turn
from tests.support.streams import (
    consumed_everything,
    http_get,
    produce_raw,
    publish_simulated,
    running,
    scrape,
    service_settings,
    total,
    wait_for,
)
from turnaudit.consumers.metrics import verdict_metrics_service
from turnaudit.consumers.runtime import BatchingSink, ConsumedTurn, ConsumerService, Sink
from turnaudit.consumers.runtime.gc_sizing import GC_OBJECTS_PER_MESSAGE as _GC_OBJECTS_PER_MESSAGE
from turnaudit.consumers.runtime.settings import MetricsSettings, ServiceName
from turnaudit.dead_letters import DeadLetterReason, read_dead_letter_headers
from turnaudit.kafka.offsets import end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.producers.simulator import PACKS
from turnaudit.records import record_headers
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker


def poison_messages() -> dict[bytes, tuple[bytes, str]]:
    """key -> (value, the DLQ reason it must get)."""
    rng = random.Random(3)
    good = encode(turn("poison-ok", 0))
    poison = {
        b"random-bytes": (b"\xff" + rng.randbytes(200), DeadLetterReason.UNKNOWN_FRAMING.value),
        b"truncated": (good[: len(good) // 2], DeadLetterReason.UNDECODABLE.value),
        b"unknown-fingerprint": (
            b"\xc3\x01" + rng.randbytes(8) + good[10:],
            DeadLetterReason.UNKNOWN_SCHEMA.value,
        ),
    }
    return poison


def test_poison_messages_go_to_the_dlq_with_their_reason_and_the_service_keeps_consuming(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    poison = poison_messages()
    settings = service_settings(
        kafka_settings,
        ServiceName.VERDICT_METRICS,
        "g-poison",
        metrics=MetricsSettings(packs=frozenset(PACKS)),
    )
    service = verdict_metrics_service(settings, registry=CollectorRegistry())
    assert service.http_port is not None
    with running(service):
        produce_raw(kafka_settings, [(k, v) for k, (v, _) in poison.items()])
        # Turns an outside producer wrote in breach of a contract: flagged and counted.
        breaching = breaking_events()
        produce_raw(
            kafka_settings, [(e["session_id"].encode(), encode(e)) for e in breaching.values()]
        )
        truth = publish_simulated(kafka_settings, 2000, tmp_path / "spool")
        end = end_offsets(kafka_settings, kafka_settings.topics.turn_events)
        assert wait_for(consumed_everything(service, end))
        samples = scrape(service.http_port)
        health_code, health = http_get(service.http_port, "/healthz")

    # The good messages after the poison were all counted, per pack.
    assert total(samples, "turnaudit_turns_total") == truth.events + len(breaching)
    for pack, n in truth.by_pack.items():
        extra = sum(e["pack_id"] == pack for e in breaching.values())
        assert total(samples, "turnaudit_turns_total", pack=pack) == n + extra
    # Each poison message: in the DLQ once, original bytes and key, where it came from, why.
    dlq_end = end_offsets(kafka_settings, kafka_settings.topics.dlq)
    letters = list(read_range(kafka_settings, kafka_settings.topics.dlq, None, dlq_end))
    assert sorted(m.key() or b"" for m in letters) == sorted(poison)
    originals = {
        (m.partition(), m.offset()): m.value()
        for m in read_range(kafka_settings, kafka_settings.topics.turn_events, None, end)
    }
    for letter in letters:
        headers = read_dead_letter_headers(record_headers(letter))
        value, reason = poison[letter.key() or b""]
        assert letter.value() == value
        assert headers["reason"] == reason
        assert headers["topic"] == kafka_settings.topics.turn_events
        assert originals[(int(headers["partition"]), int(headers["offset"]))] == value
        assert headers["error"]
        assert headers["stage"] == "verdict-metrics/g-poison"
        assert total(samples, "turnaudit_dead_letters_total", reason=reason) == 1
    for contract in (
        "refusal_hedge_exclusive",
        "stub_fields",
        "output_policy_derived",
        "bundle_matches_fields",
    ):
        assert total(samples, "turnaudit_contract_breaches_total", contract=contract) == 1
    # The hedged refusal is a refusal of its pack, counted as one.
    both = breaching["contract:refusal_hedge_exclusive"]
    assert (
        total(
            samples,
            "turnaudit_contract_breaches_total",
            pack=both["pack_id"],
            contract="refusal_hedge_exclusive",
        )
        == 1
    )
    assert total(samples, "turnaudit_consumer_messages_total", outcome="dead_lettered") == len(
        poison
    )
    assert health_code == 200
    assert json.loads(health)["status"] == "ok"


def test_sequence_gaps_and_redeliveries_are_counted_not_dead_lettered(
    kafka_settings: KafkaSettings,
) -> None:
    # Sequences 0, 1, 3, 3: one gap of one turn, one redelivery. The redelivery is the
    # same event object, byte for byte: a second turn() call stamps its own occurred_at,
    # and a changed copy under the same id is a chain break, not a redelivery.
    events = [turn("s-gap", n) for n in (0, 1, 3)]
    events.append(events[-1])
    produce_raw(kafka_settings, [(b"s-gap", encode(e)) for e in events])
    service = verdict_metrics_service(
        service_settings(kafka_settings, ServiceName.VERDICT_METRICS, "g-gaps"),
        registry=CollectorRegistry(),
    )
    end = end_offsets(kafka_settings, kafka_settings.topics.turn_events)
    with running(service):
        assert wait_for(consumed_everything(service, end))
    registry_value = service._registry.get_sample_value
    assert registry_value("turnaudit_sequence_gaps_total") == 1
    assert registry_value("turnaudit_sequence_missing_turns_total") == 1
    assert registry_value("turnaudit_redelivered_turns_total") == 1
    breach = {"pack": events[0]["pack_id"], "contract": "sequence"}
    assert registry_value("turnaudit_contract_breaches_total", breach) == 1
    assert service.sink.counted == 3
    assert sum(end_offsets(kafka_settings, kafka_settings.topics.dlq).values()) == 0


class FlakySink(BatchingSink):
    """Fails its first ``failures`` batch writes, then records every event id it gets."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures
        self.ids: list[str] = []
        self.gc_gen0: set[int] = set()  # the collector's threshold while the service runs

    def write_batch(self, turns: Sequence[ConsumedTurn]) -> None:
        self.gc_gen0.add(gc.get_threshold()[0])
        if self.failures:
            self.failures -= 1
            raise OSError("disk full")
        self.ids += [t.event["event_id"] for t in turns]


class FlakyTakingSink(Sink):
    """Keeps each turn's id as it is taken; its failing flushes keep them pending."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.ids: list[str] = []
        self.gc_gen0: set[int] = set()
        self.pending: list[str] = []
        self.flushes = 0

    def take(self, turn: ConsumedTurn) -> None:
        self.pending.append(turn.event["event_id"])

    def flush(self) -> None:
        self.flushes += 1
        self.gc_gen0.add(gc.get_threshold()[0])
        if self.failures:
            self.failures -= 1
            raise OSError("disk full")  # the taken turns stay pending
        self.ids += self.pending
        self.pending = []


@pytest.mark.parametrize("sink_kind", [FlakySink, FlakyTakingSink])
def test_a_failing_sink_gets_the_same_batch_again_and_nothing_is_lost(
    kafka_settings: KafkaSettings, sink_kind: type[FlakySink | FlakyTakingSink]
) -> None:
    events = [turn(f"s-flaky-{n % 7}", n // 7) for n in range(300)]
    produce_raw(kafka_settings, [(e["session_id"].encode(), encode(e)) for e in events])
    sink = sink_kind(failures=2)
    registry = CollectorRegistry()
    settings = service_settings(kafka_settings, ServiceName.LOG_SINK, "g-flaky")
    service = ConsumerService(settings, sink, registry=registry, serve_http=False)
    end = end_offsets(kafka_settings, kafka_settings.topics.turn_events)
    threshold = gc.get_threshold()
    with running(service):
        assert wait_for(consumed_everything(service, end))
    # Every event exactly once: the failed writes' turns were not taken (or kept) twice.
    assert sorted(sink.ids) == sorted(e["event_id"] for e in events)
    if isinstance(sink, FlakyTakingSink):
        assert sink.pending == []
        assert sink.flushes >= 3  # the batch's flush, retried
    assert registry.get_sample_value("turnaudit_sink_failures_total") == 2
    # The collector was sized to a batch while the service ran, and is back after.
    assert sink.gc_gen0 == {max(threshold[0], settings.batch_size * _GC_OBJECTS_PER_MESSAGE)}
    assert gc.get_threshold() == threshold


class RevocationFailingSink(FlakySink):
    """Records what it gets; raises whenever partitions are taken from it."""

    def __init__(self) -> None:
        super().__init__(failures=0)
        self.revoked: list[set[int]] = []

    def partitions_revoked(self, partitions: set[int]) -> None:
        self.revoked.append(partitions)
        raise RuntimeError("state for the revoked partitions could not be dropped")


def test_a_sink_failing_on_revocation_is_counted_and_the_group_goes_on(
    kafka_settings: KafkaSettings,
) -> None:
    """A second member joins, so partitions are revoked from the first, whose sink
    raises there: the failure is counted and logged, both members keep reading,
    and every event reaches one of the two sinks."""
    events = [turn(f"s-revoke-{n % 9}", n // 9) for n in range(270)]
    produce_raw(kafka_settings, [(e["session_id"].encode(), encode(e)) for e in events[:135]])
    first_sink, first_registry = RevocationFailingSink(), CollectorRegistry()
    first = ConsumerService(
        service_settings(kafka_settings, ServiceName.LOG_SINK, "g-revoke"),
        first_sink,
        registry=first_registry,
        serve_http=False,
    )
    second_sink = FlakySink(failures=0)
    second = ConsumerService(
        service_settings(kafka_settings, ServiceName.LOG_SINK, "g-revoke"),
        second_sink,
        registry=CollectorRegistry(),
        serve_http=False,
    )
    with running(first):
        assert wait_for(lambda: len(first_sink.ids) == 135)
        with running(second):
            assert wait_for(lambda: bool(first_sink.revoked) and bool(second.health.partitions()))
            produce_raw(
                kafka_settings, [(e["session_id"].encode(), encode(e)) for e in events[135:]]
            )
            assert wait_for(
                lambda: (
                    set(first_sink.ids) | set(second_sink.ids) >= {e["event_id"] for e in events}
                )
            )
            assert first.health.partitions()  # the first member is still reading
    assert (first_registry.get_sample_value("turnaudit_sink_failures_total") or 0) >= 1


def test_metrics_and_healthz_over_http_and_lag_per_partition(kafka_settings: KafkaSettings) -> None:
    service = verdict_metrics_service(
        service_settings(kafka_settings, ServiceName.VERDICT_METRICS, "g-http"),
        registry=CollectorRegistry(),
    )
    port = service.http_port
    assert port is not None
    events = [turn(f"s-http-{n}", 0) for n in range(30)]
    produce_raw(kafka_settings, [(e["session_id"].encode(), encode(e)) for e in events])
    end = end_offsets(kafka_settings, kafka_settings.topics.turn_events)
    with running(service):
        assert wait_for(consumed_everything(service, end))

        # librdkafka reports lag with its statistics (every 2 s); once the
        # service has caught up, every partition's lag comes down to 0.
        def lag() -> dict[str, float]:
            return {
                dict(ls)["partition"]: v
                for (n, ls), v in scrape(port).items()
                if n == "turnaudit_consumer_lag"
            }

        assert wait_for(lambda: len(lag()) == 3 and set(lag().values()) == {0.0})
        lags = lag()
        code, body = http_get(port, "/healthz")
        missing, _ = http_get(port, "/nothing")
    assert sorted(lags) == ["0", "1", "2"]
    assert set(lags.values()) == {0.0}
    assert code == 200
    assert json.loads(body)["assigned_partitions"] == [0, 1, 2]
    assert missing == 404
    assert not service.health.liveness().ok  # stopped
    assert not service.health.readiness().ok
