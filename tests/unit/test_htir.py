"""HTIR trace assembly: order, indices, closing, redeliveries, Avro and manifest shapes."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from turnaudit.evaluation import review_pack
from turnaudit.evaluation.auditors import RuleBasedAuditor
from turnaudit.evaluation.files import load_labels
from turnaudit.htir import HtirTrace, TraceAssembler, TraceClose, turn_steps
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.serialization.compatibility import check_full_transitive
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer, TurnEventDeserializer


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def simulated(n: int = 3000, seed: int = 3) -> tuple[TurnRuntimeSimulator, list[dict[str, Any]]]:
    sim = TurnRuntimeSimulator(seed)
    events = []
    for i, event in enumerate(sim.events(n)):
        event["event_id"], event["sequence"] = f"e{i}", i
        events.append(event)
    return sim, events


def assemble(events: list[dict[str, Any]]) -> tuple[list[HtirTrace], TraceAssembler]:
    assembler = TraceAssembler(idle_timeout=60)
    closed = []
    for offset, event in enumerate(events):
        trace = assembler.add(event, topic="t", partition=0, offset=offset)
        if trace is not None:
            closed.append(trace)
    return closed, assembler


def test_tool_steps_come_before_their_turn() -> None:
    _, events = simulated()
    event = next(e for e in events if e["task"] and len(e["tool_steps"]) == 2)
    steps = turn_steps(event)
    assert [s["kind"] for s in steps] == ["tool", "tool", "turn"]
    assert steps[-1]["refusal_emitted"] is event["verdicts"]["refusal_emitted"]
    assert all(s["event_id"] == event["event_id"] for s in steps)
    assert "name" not in steps[-1]  # fields of the other kind are left out


def test_traces_close_on_end_of_task_with_sequential_indices() -> None:
    sim, events = simulated()
    closed, assembler = assemble(events)
    assert closed
    truth = {t.task_id: t for t in sim.truth.tasks}
    for trace in closed:
        assert trace.closed_by is TraceClose.END_OF_TASK
        assert [s["index"] for s in trace.steps] == list(range(len(trace.steps)))
        turns = [s for s in trace.steps if s["kind"] == "turn"]
        assert [s["task_step"] for s in turns] == list(range(truth[trace.task_id].steps))
    assert len(closed) + assembler.open_traces == len(sim.truth.tasks)


def test_idle_traces_close_after_the_timeout() -> None:
    _, events = simulated(400)
    clock = FakeClock()
    assembler = TraceAssembler(idle_timeout=30, clock=clock)
    for offset, event in enumerate(events):
        if event["task"] and not event["task"]["end_of_task"]:
            assembler.add(event, topic="t", partition=0, offset=offset)
    still_open = assembler.open_traces
    assert still_open > 0
    clock.now = 29
    assert assembler.expire() == []
    clock.now = 31
    expired = assembler.expire()
    assert len(expired) == still_open
    assert {t.closed_by for t in expired} == {TraceClose.IDLE_TIMEOUT}


def test_a_redelivered_turn_is_not_a_second_step() -> None:
    _, events = simulated()
    first_task = next(e["task"]["task_id"] for e in events if e["task"] and e["task"]["step"] == 0)
    task_events = [e for e in events if e["task"] and e["task"]["task_id"] == first_task]
    assembler = TraceAssembler(idle_timeout=60)
    closed = None
    for offset, event in enumerate(task_events):
        closed = assembler.add(event, topic="t", partition=0, offset=offset)
        if offset == 1:  # an at-least-once redelivery of the first turn
            assembler.add(task_events[0], topic="t", partition=0, offset=0)
    assert closed is not None
    assert closed.closed_by is TraceClose.END_OF_TASK
    turns = [s for s in closed.steps if s["kind"] == "turn"]
    assert [s["event_id"] for s in turns] == [e["event_id"] for e in task_events]


def test_avro_round_trip_through_the_shipped_htir_schema() -> None:
    _, events = simulated()
    closed, _ = assemble(events)
    catalog = shipped_catalog("htir_trace")
    serialize, decode = SingleObjectSerializer(catalog.latest), TurnEventDeserializer(catalog)
    for trace in closed[:20]:
        back = HtirTrace.from_avro(decode(serialize(trace.to_avro())).event)
        assert back.steps == trace.steps
        assert back.task_id == trace.task_id
        assert back.closed_by == trace.closed_by
        assert back.source == trace.source


def test_manifest_lines_round_trip_through_review_pack_export_and_finalize(tmp_path: Path) -> None:
    _, events = simulated()
    closed, _ = assemble(events)
    by_family: dict[str, list[HtirTrace]] = {}
    for trace in closed:
        by_family.setdefault(trace.task_family, []).append(trace)
    sources = []
    for family, traces in by_family.items():
        path = tmp_path / f"{family}.jsonl"
        path.write_text("".join(json.dumps(t.manifest_line()) + "\n" for t in traces))
        sources.append((family, path))
    pack_path = tmp_path / "pack.json"
    review_pack.export(sources, pack_path)
    pack = json.loads(pack_path.read_text())
    assert len(pack["cases"]) == len(closed)
    assert {c["review"]["status"] for c in pack["cases"]} == {"pending"}
    for case in pack["cases"]:
        case["review"]["status"] = "included"
        case["oracle_source"] = "test-reviewer@1"
    pack_path.write_text(json.dumps(pack))
    labels = review_pack.finalize(pack_path, tmp_path / "labels.json")
    assert len(labels.cases) == len(closed)
    loaded = load_labels(tmp_path / "labels.json")
    assert loaded.cases[0].trace.steps == tuple(by_family[loaded.cases[0].task_family][0].steps)


def test_the_rule_auditor_against_the_simulated_ground_truth() -> None:
    sim, events = simulated(6000, seed=5)
    closed, _ = assemble(events)
    truth = {t.task_id: t for t in sim.truth.tasks}
    auditor = RuleBasedAuditor()
    seen_modes: set[str | None] = set()
    for trace in closed:
        label = truth[trace.task_id]
        verdicts = [auditor.assess(trace.steps[: k + 1]) for k in range(len(trace.steps))]
        first = next((k for k, v in enumerate(verdicts) if v == "alarm"), None)
        seen_modes.add(label.failure_mode)
        if label.oracle_alarm_turn is None:
            # Healthy runs alarm only when one tool failed twice (transient errors).
            failures = Counter(
                s["name"] for s in trace.steps if s["kind"] == "tool" and not s["ok"]
            )
            assert (first is not None) == any(n >= 2 for n in failures.values()), trace.task_id
            continue
        oracle = trace.turn_index(label.oracle_alarm_turn)
        if oracle is None:
            continue  # the trace ended before the scripted failure
        if label.failure_mode == "silent":
            # Nothing scripted shows it; only the symptoms a failed run may show
            # from then on (a refusal, a void action) can raise an alarm.
            assert first is None or first >= oracle, trace.task_id
        else:
            assert first is not None, (trace.task_id, label.failure_mode)
            assert first <= oracle, (trace.task_id, label.failure_mode)
    assert {"silent", "action_void", "identity_collapse", "refusal", "tool_failures"} <= seen_modes


def test_a_task_first_seen_after_its_first_turn_is_not_assembled() -> None:
    _, events = simulated()
    first_task = next(e["task"]["task_id"] for e in events if e["task"] and e["task"]["step"] == 0)
    task_events = [e for e in events if e["task"] and e["task"]["task_id"] == first_task]
    assembler = TraceAssembler(idle_timeout=60)
    for offset, event in enumerate(task_events[1:]):  # its step 0 was consumed before
        assert assembler.add(event, topic="t", partition=0, offset=offset) is None
    assert assembler.open_traces == 0
    assert assembler.partial_turns_skipped == len(task_events) - 1


def test_every_shipped_htir_trace_version_reads_every_other() -> None:
    pairs = {(r.writer, r.reader) for r in check_full_transitive(shipped_catalog("htir_trace"), 60)}
    versions = [s.version for s in shipped_catalog("htir_trace").versions]
    assert pairs == {(w, r) for w in versions for r in versions}
    assert max(versions) >= 2


def test_a_trace_keeps_the_offsets_of_its_turns_through_avro_and_merges_ranges() -> None:
    _, events = simulated()
    closed, _ = assemble(events)
    catalog = shipped_catalog("htir_trace")
    serialize, decode = SingleObjectSerializer(catalog.latest), TurnEventDeserializer(catalog)
    for trace in closed[:20]:
        turns = [s for s in trace.steps if s["kind"] == "turn"]
        assert trace.turn_offsets == [(0, o) for o in trace.offsets]
        assert len(trace.turn_offsets) == len(turns)
        back = HtirTrace.from_avro(decode(serialize(trace.to_avro())).event)
        assert back.turn_offsets == trace.turn_offsets
        assert back.stream_ranges() == trace.stream_ranges()
        (partition,) = trace.stream_ranges()["partitions"]
        covered = [o for a, b in partition["offset_ranges"] for o in range(a, b + 1)]
        assert covered == sorted(trace.offsets)
        # Ranges are maximal: two ranges never touch.
        ranges = partition["offset_ranges"]
        assert all(later[0] > earlier[1] + 1 for earlier, later in itertools.pairwise(ranges))


def test_a_v1_record_still_reads_with_first_and_last_offsets_only() -> None:
    _, events = simulated()
    closed, _ = assemble(events)
    catalog = shipped_catalog("htir_trace")
    v1 = SingleObjectSerializer(catalog.version(1))
    back = HtirTrace.from_avro(TurnEventDeserializer(catalog)(v1(closed[0].to_avro())).event)
    assert back.turn_offsets == []
    assert back.steps == closed[0].steps
    assert back.stream_ranges()["exact"] is False


def test_a_trace_missing_a_middle_turn_says_so_and_is_not_renumbered_silently() -> None:
    _, events = simulated()
    closed, _ = assemble(events)
    whole = next(t for t in closed if len([s for s in t.steps if s["kind"] == "turn"]) >= 4)
    task_events = [e for e in events if e["task"] and e["task"]["task_id"] == whole.task_id]
    assembler = TraceAssembler(idle_timeout=60)
    gapped = None
    for offset, event in enumerate(task_events):
        if event["task"]["step"] == 2:
            continue  # this turn never reached the stream
        gapped = assembler.add(event, topic="t", partition=0, offset=offset) or gapped
    assert gapped is not None
    assert whole.gap is None
    assert whole.missing_task_steps == []
    assert gapped.missing_task_steps == [2]
    assert gapped.gap is not None
    assert "[2]" in gapped.gap
    assert gapped.to_avro()["missing_task_steps"] == [2]
    assert [s["index"] for s in gapped.steps] == list(range(len(gapped.steps)))


@settings(max_examples=40, deadline=None)
@given(
    cut=st.integers(min_value=0, max_value=600),
    revoked=st.sets(st.integers(min_value=0, max_value=2)),
    seed=st.integers(min_value=0, max_value=50),
)
def test_forgetting_partitions_drops_their_open_traces_and_nothing_else(
    cut: int, revoked: set[int], seed: int
) -> None:
    """What a feeder that lost ``revoked`` keeps is what it would have built had it
    read only the other partitions all along."""
    _, events = simulated(600, seed)

    def partition(event: dict[str, Any]) -> int:
        return sum(event["session_id"].encode()) % 3  # a session's turns share a partition

    kept_only = TraceAssembler(idle_timeout=60)
    assembler = TraceAssembler(idle_timeout=60)
    closed: list[HtirTrace] = []
    closed_kept_only: list[HtirTrace] = []
    task_partition: dict[str, int] = {}  # where each task's turns are read
    for offset, event in enumerate(events[:cut]):
        where = {"topic": "t", "partition": partition(event), "offset": offset}
        if event["task"] is not None:
            task_partition[event["task"]["task_id"]] = partition(event)
        if (trace := assembler.add(event, **where)) is not None:
            closed.append(trace)
        if where["partition"] not in revoked and (trace := kept_only.add(event, **where)):
            closed_kept_only.append(trace)
    open_before = {tid: task_partition[tid] for tid in assembler.open_task_ids()}
    dropped = assembler.forget_partitions(revoked)
    assert sorted(dropped) == sorted(tid for tid, p in open_before.items() if p in revoked)
    assert all(not assembler.is_open(tid) for tid in dropped)
    for offset, event in enumerate(events[cut:], start=cut):
        if partition(event) in revoked:
            continue  # another member's now
        where = {"topic": "t", "partition": partition(event), "offset": offset}
        if (trace := assembler.add(event, **where)) is not None:
            closed.append(trace)
        if (trace := kept_only.add(event, **where)) is not None:
            closed_kept_only.append(trace)
    kept_closed = [t for t in closed if t.partition not in revoked]
    assert [(t.task_id, t.steps) for t in kept_closed] == [
        (t.task_id, t.steps) for t in closed_kept_only
    ]
    left = {t.task_id: t.steps for t in assembler.close_all()}
    assert left == {t.task_id: t.steps for t in kept_only.close_all()}
