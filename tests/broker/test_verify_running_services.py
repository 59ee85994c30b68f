"""``verify`` against services that were running before the range: a verdict-metrics
service is reconciled by its counters' change over the range."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from tests.support.streams import (
    consumed_everything,
    http_get,
    running,
    service_settings,
    wait_for,
)
from tests.support.verify_helpers import DECODE, publish, stored_range
from turnaudit.cli import main
from turnaudit.consumers.metrics import verdict_metrics_service
from turnaudit.consumers.runtime.settings import ServiceName
from turnaudit.kafka.offsets import end_offsets
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker


def offsets(at: dict[int, int]) -> str:
    return ",".join(f"{p}:{o}" for p, o in sorted(at.items()))


def test_a_metrics_service_running_since_before_the_range_reconciles_by_its_counters_change(
    kafka_settings: KafkaSettings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = kafka_settings.topics.turn_events
    service = verdict_metrics_service(
        service_settings(kafka_settings, ServiceName.VERDICT_METRICS, "g-running"),
        registry=CollectorRegistry(),
    )
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_settings.bootstrap_servers or "")
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", kafka_settings.topics.prefix)
    with running(service):
        port = service.http_port
        assert port is not None
        url = f"http://127.0.0.1:{port}/metrics"
        publish(kafka_settings, tmp_path / "a", seed=5, events=60)  # before the range
        start = end_offsets(kafka_settings, topic)
        assert wait_for(consumed_everything(service, start))
        before = tmp_path / "before.om"
        before.write_text(http_get(port, "/metrics")[1])
        publish(kafka_settings, tmp_path / "b", seed=6, events=80)  # the range
        end = end_offsets(kafka_settings, topic)
        assert wait_for(consumed_everything(service, end))

        def verify(start_at: dict[int, int]) -> tuple[int, dict[str, object]]:
            capsys.readouterr()
            code = main(
                [
                    "verify",
                    "--json",
                    "--from-offsets",
                    offsets(start_at),
                    "--to-offsets",
                    offsets(end),
                    "--metrics-url",
                    url,
                    "--metrics-before",
                    str(before),
                    "--metrics-settle",
                    "1",
                ]
            )
            return code, json.loads(capsys.readouterr().out)

        code, report = verify(start)
        assert code == 0, report["unexplained"]
        assert report["counts"]["turns"] == 80  # type: ignore[index]  # JSON: a mapping here
        # One turn more in the range than the counters rose by (counted before it began).
        p = next(p for p, o in start.items() if o > 0)
        extra = next(
            m for m in stored_range(kafka_settings) if (m.partition, m.offset) == (p, start[p] - 1)
        )
        pack = DECODE(extra.value).event["pack_id"]
        code, report = verify({**start, p: start[p] - 1})
    assert code == 1
    uncounted = [
        f
        for f in report["unexplained"]  # type: ignore[attr-defined]  # JSON: a list here
        if f["kind"] == "uncounted"
    ]
    assert {(f["pack"], f["counter"]) for f in uncounted} >= {(pack, "turnaudit_turns_total")}
    assert all(f["pack"] == pack for f in uncounted)
