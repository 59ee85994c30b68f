"""Turns redriven from the dead-letter topic: marked by the hand-over, counted apart.

Any batch of live and redriven copies of turns, through the real validation
and the verdict metrics sink: every distinct turn is counted once, a live one
in ``turnaudit_turns_total`` (and the count delay), a redriven one in
``turnaudit_redriven_turns_total`` only; a second copy of a turn (redriven
again, or live after a redrive) adds nothing; the hand-over's ``redriven`` and
the messages' outcomes agree; verify's figures add both counters.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from tests.support.events import encode, turn
from turnaudit.consumers.metrics import VerdictMetricsSink
from turnaudit.consumers.runtime import TurnEventValidation
from turnaudit.consumers.runtime.consumer_metrics import ConsumerMetrics, MessageOutcome
from turnaudit.consumers.runtime.handover import hand_over
from turnaudit.consumers.runtime.settings import MetricsSettings
from turnaudit.dead_letters import REDRIVEN_FROM_HEADER, REDRIVEN_ORIGIN_HEADER, is_redriven
from turnaudit.records import StoredRecord
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.verify.reconciliation import metric_figures_by_pack

DECODE = TurnEventDeserializer(shipped_catalog())
REDRIVE_HEADERS = ((REDRIVEN_FROM_HEADER, b"dlq:0:7"), (REDRIVEN_ORIGIN_HEADER, b"t:0:3"))


def total(registry: CollectorRegistry, name: str) -> float:
    return sum(s.value for family in registry.collect() for s in family.samples if s.name == name)


# Each copy: (which turn of one session, redriven?, refused?)
copies = st.lists(st.tuples(st.integers(0, 9), st.booleans(), st.booleans()), max_size=40)


class TestRedrivenCounting:
    @settings(max_examples=60, deadline=None)
    @given(copies)
    def test_each_turn_counted_once_live_or_redriven(
        self, rows: list[tuple[int, bool, bool]]
    ) -> None:
        registry = CollectorRegistry()
        consumer = ConsumerMetrics(registry)
        sink = VerdictMetricsSink(MetricsSettings(), registry, clock=lambda: 4e9)
        validation = TurnEventValidation(DECODE, consumer, max_sessions=100)
        records = []
        refused_of: dict[int, bool] = {}
        for offset, (n, redriven, asked_refused) in enumerate(rows):
            # The same turn always has the same bytes: a copy is a redelivery.
            refused = refused_of.setdefault(n, asked_refused)
            event = turn("s-redrive", n) | (
                {
                    "verdicts": turn("s", 0)["verdicts"] | {"refusal_emitted": True},
                    "surface": "[refusal] no",
                    "surface_before_hedge": "[refusal] no",
                }
                if refused
                else {}
            )
            records.append(
                StoredRecord(
                    "t", 0, offset, b"s-redrive", encode(event), REDRIVE_HEADERS if redriven else ()
                )
            )
        batch = hand_over(records, validation.examine, sink.take, lambda r, j: None)
        sink.flush()

        first_copy: dict[int, bool] = {}
        for n, redriven, _ in rows:
            first_copy.setdefault(n, redriven)
        live = sum(1 for redriven in first_copy.values() if not redriven)
        again = len(first_copy) - live
        assert batch.handed == len(rows)
        assert batch.redriven == sum(1 for _, redriven, _ in rows if redriven)
        assert total(registry, "turnaudit_turns_total") == live
        assert total(registry, "turnaudit_redriven_turns_total") == again
        assert total(registry, "turnaudit_turn_count_delay_seconds_count") == live
        refused_live = sum(1 for n, r in first_copy.items() if refused_of[n] and not r)
        refused_again = sum(1 for n, r in first_copy.items() if refused_of[n] and r)
        assert total(registry, "turnaudit_refused_turns_total") == refused_live
        assert total(registry, "turnaudit_redriven_refused_turns_total") == refused_again
        # verify reconciles both counters as one figure.
        figures = metric_figures_by_pack(generate_latest(registry).decode())
        assert sum(f["turns"] for f in figures.values()) == len(first_copy)
        assert sum(f["refused"] for f in figures.values()) == refused_live + refused_again

    def test_the_outcome_label_is_a_closed_value_present_from_the_start(self) -> None:
        registry = CollectorRegistry()
        ConsumerMetrics(registry)
        outcomes = {
            s.labels["outcome"]
            for family in registry.collect()
            for s in family.samples
            if s.name == "turnaudit_consumer_messages_total"
        }
        assert outcomes == {o.value for o in MessageOutcome}
        assert MessageOutcome.REDRIVEN.value in outcomes


class TestRedrivenMark:
    @given(
        st.lists(st.tuples(st.text(max_size=30), st.none() | st.binary(max_size=10)), max_size=8)
    )
    def test_only_the_redrive_header_marks_a_record(
        self, pairs: list[tuple[str, bytes | None]]
    ) -> None:
        marked = any(name == REDRIVEN_FROM_HEADER for name, _ in pairs)
        assert is_redriven(pairs) is marked
        assert is_redriven(dict(pairs)) is marked
        assert is_redriven(None) is False
        assert is_redriven([*pairs, (REDRIVEN_FROM_HEADER, None)]) is True
