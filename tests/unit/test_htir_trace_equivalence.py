"""The HTIR steps and Avro records are the same as the straightforward
construction's, over simulated events of every schema version and every
surface policy: same step dicts (key order too, which the manifest writes),
same Avro record, same encoded bytes, same manifest line."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

import fastavro
from hypothesis import given, settings
from hypothesis import strategies as st

from turnaudit.events import occurred_millis
from turnaudit.htir import HtirStep, HtirTrace, TraceAssembler, TraceClose, turn_steps
from turnaudit.htir_steps import STEP_FIELDS, SURFACE_LIMIT
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.redaction import Redaction, SurfacePolicy
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer, TurnEventDeserializer


def reference_turn_steps(
    event: Mapping[str, Any], contract_breaches: Sequence[str], redaction: Redaction
) -> list[dict[str, object]]:
    """The steps as first written: every field, then the ``None`` ones left out."""
    task = event["task"]
    millis = occurred_millis(event["occurred_at"])
    common = {"event_id": event["event_id"], "task_step": task["step"], "occurred_at": millis}
    steps: list[dict[str, object]] = [
        {
            "kind": "tool",
            **common,
            "name": t["name"],
            "arguments": redaction.text(t["arguments"]),
            "result": redaction.text(t["result"]),
            "ok": t["ok"],
        }
        for t in event.get("tool_steps", ())
    ]
    bundle = event["verdicts"]
    identity = bundle["identity_score"]
    safety, ethics = bundle["safety_verdict"], bundle["ethics_verdict"]
    action = event["action_assessment"]
    if redaction.policy is SurfacePolicy.KEEP:
        surface: str | None = event["surface"][:SURFACE_LIMIT]
    else:
        surface = redaction.text(event["surface"])
    steps.append(
        {
            "kind": "turn",
            **common,
            "sequence": event["sequence"],
            "turn": event["turn"],
            "path": event["path"],
            "refusal_emitted": bundle["refusal_emitted"],
            "hedge_injected": bundle["hedge_injected"],
            "identity_score": None if identity is None else identity["score"],
            "identity_threshold": None if identity is None else identity["threshold"],
            "safety_passed": None if safety is None else safety["passed"],
            "ethics_passed": None if ethics is None else ethics["passed"],
            "violated_boundary_ids": []
            if safety is None
            else list(safety["violated_boundary_ids"]),
            "violated_predicate_ids": []
            if ethics is None
            else list(ethics["violated_predicate_ids"]),
            "action": None
            if action is None
            else {
                k: action[k]
                for k in (
                    "execution_verdict",
                    "action_risk_verdict",
                    "risk_tier",
                    "human_decision_required",
                    "output_policy",
                )
            },
            "contract_breaches": list(contract_breaches),
            "surface": surface,
        }
    )
    return [{k: v for k, v in s.items() if v is not None} for s in steps]


def reference_avro(trace: HtirTrace) -> dict[str, object]:
    """The Avro record as first written: each step's fields looked up one by one."""
    steps = [
        {name: s.get(name) for name in STEP_FIELDS}
        | {
            "index": s["index"],
            "kind": s["kind"],
            "event_id": s["event_id"],
            "task_step": s["task_step"],
            "occurred_at": s["occurred_at"],
            "violated_boundary_ids": s.get("violated_boundary_ids", []),
            "violated_predicate_ids": s.get("violated_predicate_ids", []),
            "contract_breaches": s.get("contract_breaches", []),
        }
        for s in trace.steps
    ]
    return {
        "format_version": 2,
        "task_id": trace.task_id,
        "task_family": trace.task_family,
        "session_id": trace.session_id,
        "closed_by": (trace.closed_by or TraceClose.SHUTDOWN).value,
        "source": {k: v for k, v in trace.source.items() if k != "turn_offsets"},
        "steps": steps,
        "turn_offsets": [{"partition": p, "offset": o} for p, o in trace.turn_offsets],
        "missing_task_steps": trace.missing_task_steps,
    }


POLICIES = st.sampled_from(
    [Redaction(), Redaction.keep(), Redaction(SurfacePolicy.HASH, b"equivalence key")]
)
BREACHES = st.lists(st.sampled_from(["contract-2: late", "contract-3: gap", "x"]), max_size=2)


def fastavro_bytes(serialize: SingleObjectSerializer, record: dict[str, object]) -> bytes:
    """``record`` as fastavro writes it behind the serializer's header."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, serialize.schema.parsed, record)
    return serialize(record)[:10] + out.getvalue()


def decoded_events(seed: int, versions: tuple[int, ...], count: int) -> list[dict[str, Any]]:
    """Simulated events as a consumer has them: encoded, then decoded."""
    catalog = shipped_catalog()
    encode = {s.version: SingleObjectSerializer(s) for s in catalog.versions}
    decode = TurnEventDeserializer(catalog)
    sim = TurnRuntimeSimulator(seed, schema_versions=versions, concurrent_sessions=20)
    out = []
    for i, event in enumerate(sim.events(count)):
        event["event_id"], event["sequence"] = f"e{seed}-{i}", i
        out.append(dict(decode(encode[event["verdicts"]["schema_version"]](event)).event))
    return out


VERSIONS = st.sampled_from([(1,), (2,), (3,), (4,), (1, 2, 3, 4)])


class TestStepsAndRecordsMatchTheReference:
    @settings(max_examples=25, deadline=None)
    @given(st.integers(0, 10_000), VERSIONS, POLICIES, BREACHES)
    def test_turn_steps_equal_the_reference_in_content_and_key_order(
        self, seed: int, versions: tuple[int, ...], redaction: Redaction, breaches: list[str]
    ) -> None:
        for event in decoded_events(seed, versions, 150):
            if event.get("task") is None:
                continue
            got = cast(list[dict[str, object]], turn_steps(event, breaches, redaction))
            want = reference_turn_steps(event, breaches, redaction)
            assert got == want
            assert [list(s) for s in got] == [list(s) for s in want]
            assert json.dumps(got) == json.dumps(want)

    @settings(max_examples=20, deadline=None)
    @given(st.integers(0, 10_000), VERSIONS, POLICIES)
    def test_avro_records_bytes_and_manifest_lines_equal_the_reference(
        self, seed: int, versions: tuple[int, ...], redaction: Redaction
    ) -> None:
        serialize = SingleObjectSerializer(shipped_catalog("htir_trace").latest)
        assembler = TraceAssembler(300.0, clock=lambda: 0.0, redaction=redaction)
        traces: list[HtirTrace] = []
        events = decoded_events(seed, versions, 400)
        by_id = {event["event_id"]: event for event in events}
        for offset, event in enumerate(events):
            closed = assembler.add(event, topic="t", partition=offset % 3, offset=offset)
            if closed is not None:
                traces.append(closed)
        traces.extend(assembler.close_all())
        assert traces
        for trace in traces:
            got, want = trace.to_avro(), reference_avro(trace)
            assert got == want
            assert serialize(got) == serialize(want)
            # The record with the flat steps as they are (missing fields written as their
            # defaults) is written natively, byte for byte as fastavro writes the whole one.
            assert serialize(trace.avro_record()) == fastavro_bytes(serialize, want)
            # The manifest line, byte for byte, as from the reference's steps.
            reference_steps = [
                step
                for event_id in trace.event_ids
                for step in reference_turn_steps(by_id[event_id], (), redaction)
            ]
            for index, step in enumerate(reference_steps):
                step["index"] = index
            reference = replace(trace, steps=cast(list[HtirStep], reference_steps))
            assert json.dumps(trace.manifest_line()) == json.dumps(reference.manifest_line())
            rebuilt = HtirTrace.from_avro(want)
            assert rebuilt.to_avro() == reference_avro(rebuilt)
        assert serialize.stats().fastavro_records == 0  # every record written natively


class Text(str):
    """A ``str`` subclass: what a caller's event may hold in place of a decoded text."""


class Fields(dict[str, object]):
    """A ``dict`` subclass."""


class Items(list[object]):
    """A ``list`` subclass."""


def subclassed(value: object) -> object:
    """``value`` with every text, dict and list made of a subclass (the rest as it is)."""
    if isinstance(value, dict):
        return Fields({k: subclassed(v) for k, v in value.items()})
    if isinstance(value, list):
        return Items([subclassed(v) for v in value])
    return Text(value) if isinstance(value, str) else value


def exact_kinds(value: object) -> bool:
    """Only the builtin kinds themselves, all the way down."""
    if isinstance(value, dict):
        return type(value) is dict and all(
            type(k) is str and exact_kinds(v) for k, v in value.items()
        )
    if isinstance(value, list):
        return type(value) is list and all(exact_kinds(v) for v in value)
    return value is None or type(value) in (str, int, float, bool)


class TestStepsReadTheEventInPlace:
    @settings(max_examples=15, deadline=None)
    @given(st.integers(0, 10_000), VERSIONS, POLICIES)
    def test_steps_are_fresh_values_of_exact_kinds_whatever_kinds_the_event_holds(
        self, seed: int, versions: tuple[int, ...], redaction: Redaction
    ) -> None:
        for event in decoded_events(seed, versions, 100):
            if event.get("task") is None:
                continue
            want = reference_turn_steps(event, (), redaction)
            mixed = cast(dict[str, Any], subclassed(event))
            before = json.dumps(mixed, default=repr)
            got = turn_steps(mixed, (), redaction)
            assert got == want
            assert exact_kinds(got)
            # No step shares a container with the event: emptying them leaves it whole.
            for step in cast(list[dict[str, object]], got):
                for value in step.values():
                    if isinstance(value, (list, dict)):
                        value.clear()
            assert json.dumps(mixed, default=repr) == before
