"""Service settings from TURNAUDIT_* variables."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from turnaudit.consumers.runtime.settings import ServiceName, ServiceSettings, SurfaceRedaction
from turnaudit.errors import ConfigurationError


def test_defaults_are_safe_surfaces_dropped_group_per_service() -> None:
    logs = ServiceSettings.from_env(ServiceName.LOG_SINK, {})
    metrics = ServiceSettings.from_env(ServiceName.VERDICT_METRICS, {})
    assert logs.log.redaction is SurfaceRedaction.DROP
    assert logs.log.file is None
    # Group ids carry the topic prefix: two deployments on one cluster never share a group.
    assert logs.group_id == "turn-audit.log-sink"
    assert metrics.group_id == "turn-audit.verdict-metrics"
    other = ServiceSettings.from_env(ServiceName.LOG_SINK, {"TURNAUDIT_TOPIC_PREFIX": "staging."})
    assert other.group_id == "staging.log-sink"
    assert logs.http_port != metrics.http_port
    assert metrics.metrics.packs == frozenset()


@pytest.mark.parametrize("service", list(ServiceName))
def test_static_membership_by_default_named_by_host_and_port(service: ServiceName) -> None:
    settings = ServiceSettings.from_env(service, {})
    host = socket.gethostname()
    assert settings.group_instance_id == f"{service.value}-{host}-{settings.http_port}"
    # Stable: the same instance restarted gets the same id.
    assert ServiceSettings.from_env(service, {}).group_instance_id == settings.group_instance_id
    # Two instances on one host differ by port.
    second = ServiceSettings.from_env(service, {"TURNAUDIT_HTTP_PORT": "19999"})
    assert second.group_instance_id != settings.group_instance_id


@pytest.mark.parametrize(
    ("env", "instance"),
    [
        ({"TURNAUDIT_GROUP_INSTANCE_ID": "logs-a"}, "logs-a"),
        ({"TURNAUDIT_GROUP_INSTANCE_ID": "none"}, None),
        ({"TURNAUDIT_HTTP_PORT": "0"}, None),  # no stable name: dynamic membership
    ],
)
def test_instance_id_explicit_off_or_unnameable(env: dict[str, str], instance: str | None) -> None:
    assert ServiceSettings.from_env(ServiceName.LOG_SINK, env).group_instance_id == instance


def test_every_setting_is_read_with_the_prefix() -> None:
    settings = ServiceSettings.from_env(
        ServiceName.LOG_SINK,
        {
            "KAFKA_BOOTSTRAP_SERVERS": "k:9092",
            "TURNAUDIT_TOPIC_PREFIX": "p.",
            "TURNAUDIT_GROUP_ID": "g",
            "TURNAUDIT_GROUP_INSTANCE_ID": "i-1",
            "TURNAUDIT_HTTP_PORT": "0",
            "TURNAUDIT_BATCH_SIZE": "7",
            "TURNAUDIT_BATCH_TIMEOUT_MS": "20",
            "TURNAUDIT_AUTO_OFFSET_RESET": "latest",
            "TURNAUDIT_LOG_SURFACES": "hash",
            "TURNAUDIT_LOG_HASH_KEY": "k",
            "TURNAUDIT_LOG_FILE": "/var/log/t.jsonl",
            "TURNAUDIT_METRICS_PACKS": "medical, finance,",
            "TURNAUDIT_MAX_SESSIONS": "3000",
            "TURNAUDIT_MAX_EVENT_IDS": "40000",
        },
    )
    assert settings.kafka.bootstrap_servers == "k:9092"
    assert settings.kafka.topics.turn_events == "p.turn-events"
    assert (settings.group_id, settings.group_instance_id, settings.http_port) == ("g", "i-1", 0)
    assert (settings.batch_size, settings.batch_timeout_s) == (7, 0.02)
    assert settings.auto_offset_reset == "latest"
    assert settings.log.redaction is SurfaceRedaction.HASH
    assert settings.log.hash_key == b"k"
    assert settings.log.file == Path("/var/log/t.jsonl")
    assert settings.metrics.packs == {"medical", "finance"}
    assert (settings.max_sessions, settings.max_event_ids) == (3000, 40_000)


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"TURNAUDIT_LOG_SURFACES": "hash"}, "LOG_HASH_KEY"),
        ({"TURNAUDIT_LOG_SURFACES": "some"}, "drop|hash|keep"),
        ({"TURNAUDIT_BATCH_SIZE": "0"}, "BATCH_SIZE"),
        ({"TURNAUDIT_AUTO_OFFSET_RESET": "middle"}, "AUTO_OFFSET_RESET"),
        ({"TURNAUDIT_READY_UNASSIGNED_S": "0"}, "READY_UNASSIGNED_S"),
        ({"TURNAUDIT_CLIENT_ERROR_REPORT_S": "x"}, "CLIENT_ERROR_REPORT_S"),
        ({"TURNAUDIT_MAX_EVENT_IDS": "0"}, "MAX_EVENT_IDS"),
        ({"TURNAUDIT_MAX_SESSIONS": "many"}, "MAX_SESSIONS"),
        ({"TURNAUDIT_WORKERS": "0"}, "WORKERS=0 is below 1"),
        ({"TURNAUDIT_WORKERS": "65"}, "WORKERS=65 is above 64"),
    ],
)
def test_a_wrong_setting_says_which(env: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigurationError, match=says):
        ServiceSettings.from_env(ServiceName.LOG_SINK, env)
