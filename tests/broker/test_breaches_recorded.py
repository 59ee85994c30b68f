"""A breach is recorded, not removed: on the real broker, a runtime that hedges some of its
refusals publishes those turns with their breaches; consumers count them as the refusals
they are and as breaches; verify lists them; an outside producer's breaching turn is
flagged and counted by every consumer, never dead-lettered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from tests.support.events import encode, turn
from tests.support.streams import (
    consumed_everything,
    produce_raw,
    running,
    service_settings,
    wait_for,
)
from tests.support.turns import main_turn_kwargs
from turnaudit.consumers.log_sink import log_sink_service, service_logging
from turnaudit.consumers.metrics import verdict_metrics_service
from turnaudit.consumers.runtime.settings import LogSinkSettings, ServiceName
from turnaudit.kafka.offsets import RangeSpec, end_offsets
from turnaudit.kafka.reading import read_range
from turnaudit.producers.adapter import (
    RuntimeInfo,
    TurnAuditEmitter,
    TurnContext,
    TurnEventBuilder,
    inject_hedge,
)
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings
from turnaudit.verify.run import run_verify

pytestmark = pytest.mark.broker

DECODE = TurnEventDeserializer(shipped_catalog())
HEDGE = "I may be wrong, but"


def test_hedged_refusals_are_published_with_their_breaches_counted_and_listed(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    registry = CollectorRegistry()
    publisher = TurnEventPublisher(kafka_settings, spool_dir=tmp_path / "spool")
    emitter = TurnAuditEmitter(
        publisher,
        lambda e, b: pytest.fail("a v4 turn is never dead-lettered"),
        registry=registry,
    )
    builder = TurnEventBuilder(RuntimeInfo("rt", "1.0", "pod-1"))
    hedged_refusals = {3, 7, 11}
    for n in range(15):
        ctx = TurnContext(session_id="s-breach", pack_id="finance", domain="tax", turn=n)
        if n in hedged_refusals:  # the runtime bug: a refusal that also got a hedge
            kwargs = main_turn_kwargs(
                surface_before_hedge="[refusal] no.",
                surface=inject_hedge("[refusal] no.", HEDGE),
                refusal_emitted=True,
            )
        elif n % 5 == 0:  # an ordinary refusal
            kwargs = main_turn_kwargs(
                surface_before_hedge="[refusal] no.", surface="[refusal] no.", refusal_emitted=True
            )
        else:
            kwargs = main_turn_kwargs()
        emitter.emit(builder.main_turn(ctx, **kwargs))
    assert publisher.close().ok
    assert (emitter.emitted, emitter.breached, emitter.dead_lettered) == (15, 3, 0)
    assert (
        registry.get_sample_value(
            "turnaudit_publisher_breaches_total",
            {"pack": "finance", "contract": "refusal_hedge_exclusive"},
        )
        == 3
    )

    # An outside producer's hedged refusal: no breaches recorded, found by the consumers.
    outside = turn(
        "s-outside",
        0,
        refusal_emitted=True,
        surface=f"{HEDGE} [refusal] no.",
        surface_before_hedge="[refusal] no.",
    )
    produce_raw(kafka_settings, [(b"s-outside", encode(outside))])

    topic = kafka_settings.topics.turn_events
    end = end_offsets(kafka_settings, topic)
    events = [DECODE(m.value()).event for m in read_range(kafka_settings, topic, None, end)]
    assert len(events) == 16
    recorded = [e for e in events if e.get("breaches")]
    assert sorted(e["turn"] for e in recorded) == sorted(hedged_refusals)
    assert all(e["breaches"] == ["refusal_hedge_exclusive"] for e in recorded)

    log_file = tmp_path / "turns.jsonl"
    metrics = verdict_metrics_service(
        service_settings(kafka_settings, ServiceName.VERDICT_METRICS, "g-rec-m"),
        registry=CollectorRegistry(),
    )
    logs = log_sink_service(
        service_settings(
            kafka_settings, ServiceName.LOG_SINK, "g-rec-l", log=LogSinkSettings(file=log_file)
        ),
        registry=CollectorRegistry(),
    )
    with service_logging(), running(metrics), running(logs):
        assert wait_for(consumed_everything(metrics, end))
        assert wait_for(consumed_everything(logs, end))
    value = metrics._registry.get_sample_value
    # Every hedged refusal is a refusal of its pack: 3 hedged + 3 ordinary (0, 5, 10).
    assert value("turnaudit_refused_turns_total", {"pack": "finance", "domain": "tax"}) == 6
    assert value("turnaudit_hedged_turns_total", {"pack": "finance", "domain": "tax"}) == 3
    for service, _ in ((metrics, "metrics"), (logs, "logs")):
        get = service._registry.get_sample_value
        assert (
            get(
                "turnaudit_contract_breaches_total",
                {"pack": "finance", "contract": "refusal_hedge_exclusive"},
            )
            == 3
        )
        assert (
            get(
                "turnaudit_contract_breaches_total",
                {"pack": outside["pack_id"], "contract": "refusal_hedge_exclusive"},
            )
            == 1
        )
        assert (
            get("turnaudit_dead_letters_total", {"reason": "contract:refusal_hedge_exclusive"}) or 0
        ) == 0
    lines = [json.loads(line) for line in log_file.read_text().splitlines()]
    breaching = [ln for ln in lines if ln["breaches"]]
    assert len(lines) == 16
    assert sorted(ln["session_id"] for ln in breaching) == ["s-breach"] * 3 + ["s-outside"]
    assert sum(end_offsets(kafka_settings, kafka_settings.topics.dlq).values()) == 0

    report = run_verify(kafka_settings, DECODE, RangeSpec()).as_json()
    assert report["counts"]["turns"] == 16
    assert report["counts"]["refused"] == 7
    listed = report["breaching_turns"]
    assert listed["count"] == 4
    assert listed["by_contract"] == {"refusal_hedge_exclusive": 4}
    assert {t["event_id"] for t in listed["turns"]} == {e["event_id"] for e in [*recorded, outside]}
