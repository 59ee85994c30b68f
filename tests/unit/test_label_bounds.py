"""Bounded label sets: packs named by default, the number of series bounded."""

from __future__ import annotations

import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from tests.support.events import encode, turn
from tests.support.sinks import deliver
from turnaudit.consumers.metrics import VerdictMetricsSink
from turnaudit.consumers.runtime import ConsumedTurn
from turnaudit.consumers.runtime.settings import MetricsSettings, ServiceName, ServiceSettings
from turnaudit.contracts import SequenceCheck, SequenceOutcome
from turnaudit.errors import ConfigurationError
from turnaudit.label_bounds import DEFAULT_LABEL_LIMIT, OTHER, BoundedLabelSet, LabelBoundMetrics
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer

DECODE = TurnEventDeserializer(shipped_catalog())


def consumed(event: dict[str, object]) -> ConsumedTurn:
    return ConsumedTurn(DECODE(encode(event)), SequenceCheck(SequenceOutcome.IN_ORDER), "t", 0, 0)


def values(registry: CollectorRegistry, sample: str, label: str) -> set[str]:
    return {
        s.labels[label]
        for family in registry.collect()
        for s in family.samples
        if s.name == sample and label in s.labels
    }


def gauge(registry: CollectorRegistry, sample: str, label: str) -> float | None:
    return registry.get_sample_value(sample, {"label": label})


def pack_stream(packs: int) -> list[ConsumedTurn]:
    # Twice round the packs: the second pass finds every id already decided.
    return [consumed(turn(f"s-{n}", 0, pack=f"pack-{n % packs:05d}")) for n in range(2 * packs)]


def test_twelve_packs_with_default_settings_are_twelve_named_series() -> None:
    registry = CollectorRegistry()
    sink = VerdictMetricsSink(MetricsSettings(), registry)
    deliver(sink, pack_stream(12))
    named = values(registry, "turnaudit_turns_total", "pack")
    assert named == {f"pack-{n:05d}" for n in range(12)}
    assert OTHER not in named
    assert gauge(registry, "turnaudit_metrics_label_bound_reached", "pack") == 0
    assert gauge(registry, "turnaudit_metrics_label_values", "pack") == 12
    assert gauge(registry, "turnaudit_metrics_label_limit", "pack") == DEFAULT_LABEL_LIMIT
    for n in range(12):
        assert (
            registry.get_sample_value(
                "turnaudit_turns_total",
                {
                    "pack": f"pack-{n:05d}",
                    "domain": "triage",
                    "path": "MAIN",
                    "schema_version": "2",
                },
            )
            == 2
        )


def test_ten_thousand_packs_are_the_limit_plus_other_and_the_bound_is_reported() -> None:
    registry = CollectorRegistry()
    sink = VerdictMetricsSink(MetricsSettings(), registry)
    stream = pack_stream(10_000)
    with structlog.testing.capture_logs() as logs:
        for start in range(0, len(stream), 500):
            deliver(sink, stream[start : start + 500])
    named = values(registry, "turnaudit_turns_total", "pack")
    assert named == {f"pack-{n:05d}" for n in range(DEFAULT_LABEL_LIMIT)} | {OTHER}
    assert gauge(registry, "turnaudit_metrics_label_bound_reached", "pack") == 1
    assert gauge(registry, "turnaudit_metrics_label_values", "pack") == DEFAULT_LABEL_LIMIT
    # Nothing is lost: the named packs and "other" add up to every turn.
    total = sum(
        s.value
        for family in registry.collect()
        for s in family.samples
        if s.name == "turnaudit_turns_total"
    )
    assert total == len(stream)
    warnings = [e for e in logs if e["event"] == "metrics_label_bound_reached"]
    assert len(warnings) == 1  # said once, not once per turn
    assert warnings[0]["label"] == "pack"
    assert warnings[0]["limit"] == DEFAULT_LABEL_LIMIT
    assert "TURNAUDIT_METRICS_LABEL_LIMIT" in warnings[0]["hint"]


def test_an_allow_list_still_wins_over_the_default_naming() -> None:
    registry = CollectorRegistry()
    sink = VerdictMetricsSink(MetricsSettings(packs=frozenset({"pack-00003"})), registry)
    deliver(sink, pack_stream(12))
    assert values(registry, "turnaudit_turns_total", "pack") == {"pack-00003", OTHER}
    assert gauge(registry, "turnaudit_metrics_label_limit", "pack") == 0
    assert gauge(registry, "turnaudit_metrics_label_bound_reached", "pack") == 0
    # Domains have no list here: they are named by default.
    assert values(registry, "turnaudit_turns_total", "domain") == {"triage"}


def test_the_limit_is_a_setting_with_a_one_line_error() -> None:
    env = {"TURNAUDIT_METRICS_LABEL_LIMIT": "7"}
    assert ServiceSettings.from_env(ServiceName.VERDICT_METRICS, env).metrics.label_limit == 7
    default = ServiceSettings.from_env(ServiceName.VERDICT_METRICS, {})
    assert default.metrics.label_limit == DEFAULT_LABEL_LIMIT
    for wrong in ("0", "-3", "many"):
        with pytest.raises(ConfigurationError, match="TURNAUDIT_METRICS_LABEL_LIMIT") as raised:
            ServiceSettings.from_env(
                ServiceName.VERDICT_METRICS, {"TURNAUDIT_METRICS_LABEL_LIMIT": wrong}
            )
        assert "\n" not in str(raised.value)


@settings(max_examples=200, deadline=None)
@given(
    stream=st.lists(st.text(min_size=1, max_size=6), max_size=300),
    limit=st.integers(min_value=1, max_value=20),
    allowed=st.frozensets(st.text(min_size=1, max_size=6), max_size=5),
)
def test_any_stream_names_first_seen_values_within_the_bound(
    stream: list[str], limit: int, allowed: frozenset[str]
) -> None:
    registry = CollectorRegistry()
    labels = BoundedLabelSet(
        "pack", allowed=allowed, limit=limit, metrics=LabelBoundMetrics(registry)
    )
    out = [labels(v) for v in stream]
    if allowed:
        assert out == [v if v in allowed else OTHER for v in stream]
    else:
        first_seen = list(dict.fromkeys(stream))
        kept = set(first_seen[:limit])
        assert out == [v if v in kept else OTHER for v in stream]
        assert labels.reached == (len(first_seen) > limit)
        assert gauge(registry, "turnaudit_metrics_label_bound_reached", "pack") == float(
            labels.reached
        )
    assert len(set(out) - {OTHER}) <= max(limit, len(allowed))
    # Deterministic: the same value always gets the same label.
    assert [labels(v) for v in stream] == out
