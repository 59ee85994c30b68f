"""Verdict metrics: counters equal the simulator's truth; labels from closed sets only."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram

from tests.support.events import encode, turn
from tests.support.sinks import deliver
from tests.support.streams import (
    Samples,
    counter_samples,
)
from turnaudit.commands.demo_consumers import sample_total
from turnaudit.consumers.metrics import (
    DELAY_BUCKETS,
    OTHER,
    VerdictMetricsSink,
    delay_s,
    observe_delays,
    observe_many,
)
from turnaudit.consumers.runtime import ConsumedTurn
from turnaudit.consumers.runtime.settings import MetricsSettings
from turnaudit.contracts import SequenceCheck, SequenceOutcome
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.verdicts import TurnPath

DECODE = TurnEventDeserializer(shipped_catalog())


def consumed(
    event: dict[str, object],
    outcome: SequenceOutcome = SequenceOutcome.IN_ORDER,
) -> ConsumedTurn:
    return ConsumedTurn(DECODE(encode(event)), SequenceCheck(outcome), "t", 0, 0)


def histogram_buckets(registry: CollectorRegistry) -> dict[str, float]:
    return {
        s.labels["le"]: s.value
        for family in registry.collect()
        for s in family.samples
        if s.name == "turnaudit_turn_count_delay_seconds_bucket"
    }


def series(registry: CollectorRegistry) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    return {
        (s.name, tuple(sorted(s.labels.items())))
        for family in registry.collect()
        for s in family.samples
    }


def test_a_flood_of_new_pack_and_domain_ids_adds_no_series() -> None:
    registry = CollectorRegistry()
    settings = MetricsSettings(packs=frozenset({"medical"}), domains=frozenset({"howto"}))
    sink = VerdictMetricsSink(settings, registry)
    deliver(sink, [consumed(turn("s-a", 0, pack="medical"))])
    deliver(sink, [consumed(turn(f"s-{n}", 0, pack=f"pack-{n}")) for n in range(100)])
    after_100 = series(registry)
    deliver(sink, [consumed(turn(f"s-{n}", 0, pack=f"pack-{n}")) for n in range(100, 300)])
    assert series(registry) == after_100
    packs = {dict(labels).get("pack") for _, labels in after_100} - {None}
    assert packs == {"medical", OTHER}
    assert sample_total(registry, "turnaudit_turns_total", pack=OTHER) == 300
    assert sample_total(registry, "turnaudit_turns_total", domain=OTHER) == 301


def test_a_recognised_redelivery_is_not_counted_twice() -> None:
    registry = CollectorRegistry()
    sink = VerdictMetricsSink(MetricsSettings(), registry)
    event = turn(
        "s-dup",
        0,
        refusal_emitted=True,
        surface="[refusal] no",
        surface_before_hedge="[refusal] no",
    )
    deliver(sink, [consumed(event), consumed(event, SequenceOutcome.DUPLICATE)])
    assert sample_total(registry, "turnaudit_turns_total") == 1
    assert sample_total(registry, "turnaudit_refused_turns_total") == 1


def test_delay_from_the_turns_time_to_counted_is_observed() -> None:
    registry = CollectorRegistry()
    occurred = datetime(2026, 11, 1, tzinfo=UTC)
    sink = VerdictMetricsSink(
        MetricsSettings(), registry, clock=lambda: occurred.timestamp() + 0.04
    )
    deliver(
        sink,
        [
            consumed(
                turn(
                    "s-delay",
                    0,
                )
                | {"occurred_at": int(occurred.timestamp() * 1000)}
            )
        ],
    )
    assert (
        registry.get_sample_value("turnaudit_turn_count_delay_seconds_bucket", {"le": "0.03"}) == 0
    )
    assert (
        registry.get_sample_value("turnaudit_turn_count_delay_seconds_bucket", {"le": "0.05"}) == 1
    )


def test_a_batch_counts_exactly_what_its_turns_say_per_label_set() -> None:
    """Counted a batch at a time: each series equals a per-turn tally of the same turns."""
    sim = TurnRuntimeSimulator(21, schema_versions=(1, 2), concurrent_sessions=40)
    turns = [
        consumed(
            event,
            SequenceOutcome.DUPLICATE if n % 13 == 0 else SequenceOutcome.IN_ORDER,
        )
        for n, event in enumerate(sim.events(1500))
    ]
    # Some packs and domains outside the allow-lists: they are counted as "other".
    settings = MetricsSettings(
        packs=frozenset({"medical", "finance"}), domains=frozenset({"triage", "tax", "ci"})
    )
    batched, one_by_one = CollectorRegistry(), CollectorRegistry()
    sink = VerdictMetricsSink(settings, batched, clock=lambda: 4e9)
    for start in range(0, len(turns), 500):
        deliver(sink, turns[start : start + 500])
    single = VerdictMetricsSink(settings, one_by_one, clock=lambda: 4e9)
    for t in turns:
        deliver(single, [t])

    # The expected series, tallied turn by turn from the events themselves.
    expected: Samples = {}

    def add(name: str, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())))
        expected[key] = expected.get(key, 0) + 1

    counted = [t for t in turns if t.sequence.outcome is not SequenceOutcome.DUPLICATE]
    for t in counted:
        event, bundle = t.event, t.event["verdicts"]
        pack = event["pack_id"] if event["pack_id"] in settings.packs else OTHER
        domain = event["domain"] if event["domain"] in settings.domains else OTHER
        add(
            "turnaudit_turns_total",
            pack=pack,
            domain=domain,
            path=event["path"],
            schema_version=str(t.decoded.writer_version),
        )
        if bundle["refusal_emitted"]:
            add("turnaudit_refused_turns_total", pack=pack, domain=domain)
        if bundle["hedge_injected"]:
            add("turnaudit_hedged_turns_total", pack=pack, domain=domain)
        if event["path"] == TurnPath.STUB.value:
            add("turnaudit_stub_turns_total", pack=pack, domain=domain)
        action = event["action_assessment"]
        if action is not None:
            add(
                "turnaudit_action_risk_total",
                output_policy=action["output_policy"],
                risk_tier=action["risk_tier"],
                action_risk_verdict=action["action_risk_verdict"],
            )
    # Every kind of series is exercised, and the redeliveries were left out.
    assert {name for name, _ in expected} == {
        "turnaudit_turns_total",
        "turnaudit_refused_turns_total",
        "turnaudit_hedged_turns_total",
        "turnaudit_stub_turns_total",
        "turnaudit_action_risk_total",
    }
    assert len(counted) < len(turns)
    # Series pre-created at 0 only where the sink makes them so (none of these).
    assert {k: v for k, v in counter_samples(batched).items() if v} == expected
    assert counter_samples(batched) == expected
    assert counter_samples(one_by_one) == expected
    assert OTHER in {dict(labels)["pack"] for name, labels in expected if "pack" in dict(labels)}
    assert sink.counted == single.counted == len(counted)
    assert batched.get_sample_value("turnaudit_turn_count_delay_seconds_count") == len(counted)
    # A batch's delays are summed before they are added: equal up to float association.
    assert batched.get_sample_value("turnaudit_turn_count_delay_seconds_sum") == pytest.approx(
        one_by_one.get_sample_value("turnaudit_turn_count_delay_seconds_sum"), rel=1e-12
    )
    assert histogram_buckets(batched) == histogram_buckets(one_by_one)


def test_a_batch_of_redeliveries_only_counts_nothing() -> None:
    registry = CollectorRegistry()
    sink = VerdictMetricsSink(MetricsSettings(), registry)
    deliver(sink, [consumed(turn("s-r", n), SequenceOutcome.DUPLICATE) for n in range(3)])
    assert sink.counted == 0
    assert sample_total(registry, "turnaudit_turns_total") == 0
    assert registry.get_sample_value("turnaudit_turn_count_delay_seconds_count") == 0


@given(
    st.lists(
        st.one_of(
            st.floats(min_value=-10.0, max_value=1e6, allow_nan=False),
            st.sampled_from([b for b in DELAY_BUCKETS if b != float("inf")]),
        ),
        max_size=200,
    )
)
def test_observing_a_batch_at_once_gives_the_samples_observe_gives(amounts: list[float]) -> None:
    one_by_one, batched = CollectorRegistry(), CollectorRegistry()
    single = Histogram("h", "h", buckets=DELAY_BUCKETS, registry=one_by_one)
    for amount in amounts:
        single.observe(amount)
    observe_many(Histogram("h", "h", buckets=DELAY_BUCKETS, registry=batched), amounts)
    got = {(s.name, tuple(s.labels.items())): s.value for f in batched.collect() for s in f.samples}
    want = {
        (s.name, tuple(s.labels.items())): s.value for f in one_by_one.collect() for s in f.samples
    }
    assert got.keys() == want.keys()
    for name, value in want.items():
        if name[0] == "h_created":
            continue
        assert got[name] == pytest.approx(value, rel=1e-12, abs=1e-9), name


def _histogram_samples(registry: CollectorRegistry) -> dict[tuple[object, ...], float]:
    return {
        (s.name, tuple(s.labels.items())): s.value
        for f in registry.collect()
        for s in f.samples
        if s.name != "h_created"
    }


# Occurred-at values around "now": on every bucket's edge (and a millisecond either
# side), far behind, and ahead of the clock (a negative delay, counted as none).
_NOW_MS = st.integers(min_value=1_600_000_000_000, max_value=1_900_000_000_000)


@given(
    now_ms=_NOW_MS,
    fraction=st.sampled_from([0.0, 0.25, 0.5, 0.999]),
    offsets=st.lists(
        st.one_of(
            st.integers(min_value=-5_000, max_value=400_000),
            st.builds(
                lambda b, d: round(b * 1000) + d,
                st.sampled_from([b for b in DELAY_BUCKETS if b != float("inf")]),
                st.sampled_from([-1, 0, 1]),
            ),
        ),
        max_size=300,
    ),
)
def test_a_batch_of_delays_lands_in_the_buckets_observe_puts_each_in(
    now_ms: int, fraction: float, offsets: list[int]
) -> None:
    now = now_ms + fraction
    occurred = [now_ms - offset for offset in offsets]
    one_by_one, batched = CollectorRegistry(), CollectorRegistry()
    single = Histogram("h", "h", buckets=DELAY_BUCKETS, registry=one_by_one)
    for ms in occurred:
        single.observe(delay_s(now, ms))
    observe_delays(Histogram("h", "h", buckets=DELAY_BUCKETS, registry=batched), occurred, now)
    got, want = _histogram_samples(batched), _histogram_samples(one_by_one)
    assert got.keys() == want.keys()
    for name, value in want.items():
        if name[0] == "h_sum":  # summed exactly, then rounded once
            assert got[name] == pytest.approx(value, rel=1e-12, abs=1e-9)
        else:
            assert got[name] == value, name


def test_a_labelled_histogram_refuses_a_batch_as_it_refuses_observe() -> None:
    labelled = Histogram("h", "h", ["kind"], registry=CollectorRegistry())
    with pytest.raises(ValueError, match="missing label values") as by_observe:
        labelled.observe(1.0)
    with pytest.raises(ValueError, match="missing label values") as by_batch:
        observe_many(labelled, [1.0])
    assert str(by_batch.value) == str(by_observe.value)


def test_turns_taken_one_by_one_are_counted_only_when_the_batch_is_flushed() -> None:
    registry = CollectorRegistry()
    sink = VerdictMetricsSink(MetricsSettings(), registry)
    turns = [consumed(turn(f"s-take-{n}", 0)) for n in range(5)]
    for t in turns:
        sink.take(t)
    assert sample_total(registry, "turnaudit_turns_total") == 0
    assert registry.get_sample_value("turnaudit_turn_count_delay_seconds_count") == 0
    sink.flush()
    assert sample_total(registry, "turnaudit_turns_total") == 5
    assert registry.get_sample_value("turnaudit_turn_count_delay_seconds_count") == 5
    sink.flush()  # nothing taken since: nothing added
    assert sample_total(registry, "turnaudit_turns_total") == 5
    assert sink.counted == 5
