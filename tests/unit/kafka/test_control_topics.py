"""The control topics' lifecycle as configured: ``checkpoints`` and ``stream-heads`` are
compacted and deleted after the turn topic's retention plus the margin (for ever when
turns are kept for ever), for every setting; an existing topic made compacted only is
named with the command that changes it, one that deletes only is refused."""

from __future__ import annotations

import re
from concurrent.futures import Future
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from turnaudit.errors import BrokerError, ConfigurationError
from turnaudit.kafka import topics
from turnaudit.kafka.topics import TopicSpec, control_retention_ms, topic_specs
from turnaudit.settings import HOUR_MS, KafkaSettings
from turnaudit.topic_names import TopicNames

NAMES = TopicNames("t.")


def specs_by_name(settings: KafkaSettings) -> dict[str, TopicSpec]:
    return {s.name: s for s in topic_specs(settings)}


class TestConfigured:
    @given(st.integers(1, 24 * 3650), st.integers(1, 24 * 365))
    def test_control_topics_outlive_the_turns_by_the_margin(
        self, turn_h: int, margin_h: int
    ) -> None:
        settings = KafkaSettings(
            topics=NAMES,
            turn_events_retention_ms=turn_h * HOUR_MS,
            control_retention_margin_ms=margin_h * HOUR_MS,
        )
        specs = specs_by_name(settings)
        turns = int(specs[NAMES.turn_events].config["retention.ms"])
        for name in (NAMES.checkpoints, NAMES.stream_heads):
            config = specs[name].config
            assert config["cleanup.policy"] == "compact,delete"
            assert int(config["retention.ms"]) == turns + margin_h * HOUR_MS
        assert specs[NAMES.checkpoints].config["message.timestamp.type"] == "LogAppendTime"

    @given(st.integers(1, 24 * 365))
    def test_turns_kept_for_ever_keep_the_control_topics_for_ever(self, margin_h: int) -> None:
        settings = KafkaSettings(
            topics=NAMES,
            turn_events_retention_ms=-1,
            control_retention_margin_ms=margin_h * HOUR_MS,
        )
        assert control_retention_ms(settings) == -1
        specs = specs_by_name(settings)
        for name in (NAMES.checkpoints, NAMES.stream_heads):
            assert specs[name].config["retention.ms"] == "-1"

    @pytest.mark.parametrize(
        ("raw", "margin_ms"),
        [(None, 8 * 24 * HOUR_MS), ("1", HOUR_MS), ("48", 48 * HOUR_MS)],
    )
    def test_the_margin_is_read_from_the_environment(self, raw: str | None, margin_ms: int) -> None:
        env = {} if raw is None else {"TURNAUDIT_CONTROL_RETENTION_MARGIN_HOURS": raw}
        assert KafkaSettings.from_env(env).control_retention_margin_ms == margin_ms

    @pytest.mark.parametrize(("raw", "says"), [("0", "below 1"), ("a day", "not a whole number")])
    def test_a_bad_margin_is_one_line(self, raw: str, says: str) -> None:
        with pytest.raises(ConfigurationError, match=says) as caught:
            KafkaSettings.from_env({"TURNAUDIT_CONTROL_RETENTION_MARGIN_HOURS": raw})
        assert "\n" not in str(caught.value)
        assert "TURNAUDIT_CONTROL_RETENTION_MARGIN_HOURS" in str(caught.value)


@dataclass(frozen=True)
class Entry:
    value: str


class DescribingAdmin:
    """Answers ``describe_configs`` with the configs given, as the broker would."""

    def __init__(self, configs: dict[str, dict[str, str]]) -> None:
        self.configs = configs

    def describe_configs(self, resources: list[object]) -> dict[object, Future[object]]:
        out: dict[object, Future[object]] = {}
        for resource in resources:
            future: Future[object] = Future()
            name = resource.name  # type: ignore[attr-defined]  # a ConfigResource
            future.set_result({k: Entry(v) for k, v in self.configs[name].items()})
            out[resource] = future
        return out


class TestExisting:
    SETTINGS = KafkaSettings(topics=NAMES)

    def check(self, name: str, config: dict[str, str]) -> list[dict[str, object]]:
        spec = specs_by_name(self.SETTINGS)[name]
        with capture_logs() as logs:
            topics._check_existing(DescribingAdmin({name: config}), [spec], 1.0)  # type: ignore[arg-type]  # a stand-in admin
        return [e for e in logs if e["event"] == "topic_config_differs"]

    @pytest.mark.parametrize("name", [NAMES.checkpoints, NAMES.stream_heads])
    def test_a_control_topic_made_compacted_only_is_named_with_the_fix(self, name: str) -> None:
        old = {"cleanup.policy": "compact", "retention.ms": "604800000"}
        old |= {"min.compaction.lag.ms": "0", "message.timestamp.type": "LogAppendTime"}
        found = self.check(name, old)
        assert len(found) == 1
        fix = str(found[0]["fix"])
        assert f"--entity-name {name}" in fix
        assert "cleanup.policy=[compact,delete]" in fix
        assert f"retention.ms={control_retention_ms(self.SETTINGS)}" in fix

    @pytest.mark.parametrize("name", [NAMES.checkpoints, NAMES.stream_heads])
    def test_a_control_topic_as_configured_says_nothing(self, name: str) -> None:
        spec = specs_by_name(self.SETTINGS)[name]
        assert self.check(name, dict(spec.config)) == []

    @pytest.mark.parametrize("name", [NAMES.checkpoints, NAMES.stream_heads])
    def test_a_control_topic_that_only_deletes_is_refused(self, name: str) -> None:
        spec = specs_by_name(self.SETTINGS)[name]
        with pytest.raises(
            BrokerError, match=re.escape(f"topic {name} exists with cleanup.policy=delete")
        ):
            self.check(name, {**spec.config, "cleanup.policy": "delete"})

    def test_the_schemas_topic_tolerates_no_other_policy(self) -> None:
        spec = specs_by_name(self.SETTINGS)[NAMES.schemas]
        with pytest.raises(BrokerError, match=re.escape("cleanup.policy=compact,delete")):
            self.check(NAMES.schemas, {**spec.config, "cleanup.policy": "compact,delete"})
