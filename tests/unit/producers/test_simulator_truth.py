"""The simulator's ground truth counts the v4 joins (trace context, model) and the chained
streams exactly as a reader of the events it built would."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from turnaudit.producers.adapter import SHIPPED_SCHEMA_VERSIONS
from turnaudit.producers.simulator import TurnRuntimeSimulator


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    versions=st.lists(st.sampled_from(SHIPPED_SCHEMA_VERSIONS), min_size=1, max_size=6),
    events=st.integers(1, 400),
)
def test_the_truth_counts_trace_ids_models_and_chained_streams_as_the_events_show(
    seed: int, versions: list[int], events: int
) -> None:
    sim = TurnRuntimeSimulator(seed, schema_versions=versions, concurrent_sessions=8)
    built = list(sim.events(events))
    truth = sim.truth
    assert truth.traced == sum(e.get("trace_context") is not None for e in built)
    assert truth.with_model == sum(e.get("model") is not None for e in built)
    assert truth.chained_sessions == {
        e["session_id"] for e in built if e["verdicts"]["schema_version"] >= 3
    }
    v4 = [e for e in built if e["verdicts"]["schema_version"] >= 4]
    # Every v4/v5 turn carries its span; every such main turn names its model, no stub does.
    assert truth.traced == len(v4)
    assert truth.with_model == sum(e["path"] == "MAIN" for e in v4)
