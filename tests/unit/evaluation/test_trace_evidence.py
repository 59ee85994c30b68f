"""Which trace becomes an evidence case: labels bound to the reviewed trace, gaps kept out,
the end-of-battery identity check before any evidence. No Kafka needed."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnaudit.evaluation.auditors import RuleBasedAuditor, Step
from turnaudit.evaluation.errors import AuditorIdentityError
from turnaudit.evaluation.files import (
    AuditorIdentity,
    Case,
    LabelPack,
    Trace,
    Verdict,
    parse_evidence,
    trace_digest,
    write_json,
)
from turnaudit.evaluation.labels import TaskLabel, load_task_labels
from turnaudit.evaluation.trace_evidence import TraceEvidence
from turnaudit.htir import HtirTrace, TraceAssembler
from turnaudit.producers.simulator import TurnRuntimeSimulator


def simulated_traces(n: int = 2500, seed: int = 11) -> list[HtirTrace]:
    sim = TurnRuntimeSimulator(seed)
    assembler = TraceAssembler(idle_timeout=60)
    closed = []
    for offset, event in enumerate(sim.events(n)):
        event["event_id"], event["sequence"] = f"e{offset}", offset
        trace = assembler.add(event, topic="turns", partition=0, offset=offset)
        if trace is not None:
            closed.append(trace)
    return closed


def reviewed_labels(traces: Sequence[HtirTrace], tmp_path: Any) -> dict[str, TaskLabel]:
    """A finalized label pack reviewed on ``traces`` (all labelled healthy)."""
    pack = LabelPack(
        tuple(
            Case(
                t.task_id,
                t.task_family,
                "reviewer/1",
                None,
                Trace(tuple(copy.deepcopy(t.steps)), {"run": t.task_id}),
            )
            for t in traces
        )
    )
    path = tmp_path / "labels.json"
    write_json(path, pack.to_json())
    return load_task_labels(path)


class SwappedModel(RuleBasedAuditor):
    """A served model re-pointed during the battery: its identity differs at the end."""

    def end_battery(self) -> None:
        self._identity = AuditorIdentity(self.NAME, "sha256:" + "00" * 32)

    def assess(self, steps_prefix: Sequence[Step]) -> Verdict:
        return super().assess(steps_prefix)


def test_a_label_applies_only_to_the_trace_it_was_reviewed_on(tmp_path: Any) -> None:
    traces = simulated_traces()[:6]
    labels = reviewed_labels(traces, tmp_path)
    changed = copy.deepcopy(traces[0])
    changed.steps[-1]["surface"] = "a different answer"
    builder = TraceEvidence(RuleBasedAuditor(), labels)
    builder.begin()

    for trace in [changed, *traces[1:]]:
        admission = builder.admit(trace)
        if admission.is_case:
            builder.add_case(trace, admission, builder.observe(trace))
    evidence = builder.finish()

    assert [c.task_id for c in evidence.cases] == sorted(t.task_id for t in traces[1:])
    (refused,) = evidence.exclusions
    assert refused.task_id == traces[0].task_id
    assert refused.reason == "label_trace_changed"
    assert trace_digest(traces[0].steps) in refused.detail
    assert trace_digest(changed.steps) in refused.detail
    assert builder.tally.excluded == {"label_trace_changed": 1}
    # Every case records the exact stream position of its turns and its content digest.
    for case in evidence.cases:
        assert case.trace.source["content_digest"] == trace_digest(case.trace.steps)
        assert case.trace.source["stream"]["topic"] == "turns"
        assert case.trace.source["stream"]["exact"] is True


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_any_change_to_a_reviewed_trace_refuses_its_label(
    tmp_path: Any, data: st.DataObject
) -> None:
    (trace,) = simulated_traces(400, seed=3)[:1]
    labels = reviewed_labels([trace], tmp_path)
    changed = copy.deepcopy(trace)
    position = data.draw(st.integers(0, len(changed.steps) - 1))
    step = changed.steps[position]
    # Any content a step carries; the structural fields (kind, index, task step) are
    # typed by the Avro schema and checked by the gap rule.
    key = data.draw(st.sampled_from(sorted(set(step) - {"kind", "index", "task_step"})))
    new_value = data.draw(
        st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5)).filter(
            lambda v: v != step[key] or type(v) is not type(step[key])
        )
    )
    step[key] = new_value
    builder = TraceEvidence(RuleBasedAuditor(), labels)
    builder.begin()

    admission = builder.admit(changed)

    assert admission.exclusion is not None
    assert admission.exclusion.reason == "label_trace_changed"


def test_a_trace_missing_a_middle_turn_is_kept_out_with_its_reason(tmp_path: Any) -> None:
    traces = [t for t in simulated_traces() if len(t.event_ids) >= 4][:3]
    labels = reviewed_labels(traces, tmp_path)
    gapped = copy.deepcopy(traces[0])
    middle = [s for s in gapped.steps if s["kind"] == "turn"][1]["task_step"]
    gapped.steps = [s for s in gapped.steps if s["task_step"] != middle]
    for index, step in enumerate(gapped.steps):
        step["index"] = index
    builder = TraceEvidence(RuleBasedAuditor(), labels)
    builder.begin()

    admission = builder.admit(gapped)

    assert admission.exclusion is not None
    assert admission.exclusion.reason == "trace_missing_turns"
    assert f"[{middle}]" in admission.exclusion.detail
    assert builder.tally.gapped == 1
    assert builder.snapshot().exclusions == (admission.exclusion,)


def test_evidence_only_after_the_end_of_battery_check() -> None:
    traces = simulated_traces()[:4]
    labels = {t.task_id: TaskLabel(t.task_family, "truth/1") for t in traces}
    builder = TraceEvidence(SwappedModel(), labels)
    builder.begin()
    for trace in traces:
        admission = builder.admit(trace)
        builder.add_case(trace, admission, builder.observe(trace))

    with pytest.raises(AuditorIdentityError, match="no evidence written"):
        builder.finish()


def test_cases_and_exclusions_do_not_depend_on_arrival_order(tmp_path: Any) -> None:
    traces = simulated_traces()[:10]
    labels = reviewed_labels(traces, tmp_path)

    def build(order: list[HtirTrace]) -> dict[str, Any]:
        builder = TraceEvidence(RuleBasedAuditor(), labels, clock=lambda: 0.0)
        builder.begin()
        for trace in order:
            admission = builder.admit(trace)
            if admission.is_case:
                builder.add_case(trace, admission, builder.observe(trace))
        return builder.finish().to_json()

    forward, backward = build(traces), build(list(reversed(traces)))
    assert forward == backward
    assert parse_evidence(forward).to_json() == forward
