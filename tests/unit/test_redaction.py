"""The surface policy: every writer x every policy, the rule auditor on redacted traces,
the policy's settings. No Kafka: the writers' own functions, fed simulated turns with
planted texts (each carrying a test card number)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.events import encode
from turnaudit.consumers.log_sink import surface_redactor, turn_lines
from turnaudit.consumers.replay.htir import trace_line
from turnaudit.consumers.runtime import ConsumedTurn
from turnaudit.consumers.runtime.settings import LogSinkSettings, ServiceName, ServiceSettings
from turnaudit.consumers.tail import format_turn
from turnaudit.contracts import SequenceCheck, SequenceOutcome
from turnaudit.errors import ConfigurationError
from turnaudit.evaluation import review_pack
from turnaudit.evaluation.auditors import RuleBasedAuditor
from turnaudit.evaluation.files import Case, LabelPack, Trace, write_json
from turnaudit.evaluation.gate import evaluate
from turnaudit.evaluation.labels import labels_from_ground_truth, load_task_labels
from turnaudit.evaluation.trace_evidence import TraceEvidence
from turnaudit.htir import HtirTrace, TraceAssembler
from turnaudit.kafka.acls import Role, plan_acls, writers_of
from turnaudit.producers.simulator import GroundTruth, TurnRuntimeSimulator
from turnaudit.records import StoredRecord
from turnaudit.redaction import (
    HASH_PREFIX,
    Redaction,
    SurfacePolicy,
    surface_redaction,
)
from turnaudit.replay.jsonl import jsonl_line
from turnaudit.replay.request import ReplayRequest, ReplayTarget
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer, TurnEventDeserializer
from turnaudit.topic_names import TopicNames

KEY = b"redaction-test-key"
CARD = "4111-1111-1111-1111"  # a test card number, as a tool call might carry one
POLICIES = {
    "drop": Redaction(SurfacePolicy.DROP),
    "hash": Redaction(SurfacePolicy.HASH, KEY),
    "keep": Redaction.keep(),
}
DECODE_TURNS = TurnEventDeserializer(shipped_catalog())
TRACES = shipped_catalog("htir_trace")


def simulated_task(seed: int = 5) -> list[dict[str, Any]]:
    """The turns of one whole simulated task with tool calls, at the newest schema."""
    newest = shipped_catalog().latest.version
    sim = TurnRuntimeSimulator(seed, schema_versions=(newest,))
    by_task: dict[str, list[dict[str, Any]]] = {}
    for i, event in enumerate(sim.events(3000)):
        event["event_id"], event["sequence"] = f"e{i}", i
        if event["task"] is not None:
            by_task.setdefault(event["task"]["task_id"], []).append(dict(event))
    for events in by_task.values():
        if (
            events[0]["task"]["step"] == 0
            and events[-1]["task"]["end_of_task"]
            and sum(len(e["tool_steps"]) for e in events) >= 2
        ):
            return events
    raise AssertionError("no whole task with tool calls in the simulated run")


TASK = simulated_task()

# Text around the planted marker: anything but lone surrogates (not encodable).
noise = st.text(st.characters(blacklist_categories=("Cs",)), max_size=24)


@dataclass(frozen=True)
class Planted:
    events: list[dict[str, Any]]
    texts: list[str]  # every surface, token and tool argument/result planted


def plant(draw: Callable[[st.SearchStrategy[str]], str]) -> Planted:
    """The task's turns with every surface, token and tool I/O replaced by a text of its
    own that carries the card number and where it was planted."""
    events, texts = copy.deepcopy(TASK), []

    def text(where: str) -> str:
        planted = f"{draw(noise)}[{CARD} {where}]{draw(noise)}"
        texts.append(planted)
        return planted

    for i, event in enumerate(events):
        for name in ("surface", "walk_surface", "articulation_surface"):
            event[name] = text(f"{name}-{i}")
        event["input_tokens"] = [text(f"token-{i}")]
        event["tool_steps"] = [
            {**call, "arguments": text(f"args-{i}-{j}"), "result": text(f"result-{i}-{j}")}
            for j, call in enumerate(event["tool_steps"])
        ]
    return Planted(events, texts)


def consumed(event: dict[str, Any], offset: int) -> ConsumedTurn:
    decoded = DECODE_TURNS(encode(dict(event)))
    return ConsumedTurn(
        decoded, SequenceCheck(SequenceOutcome.IN_ORDER), "t.turn-events", 0, offset
    )


def traces(events: Sequence[dict[str, Any]], redaction: Redaction) -> list[HtirTrace]:
    assembler = TraceAssembler(idle_timeout=60, redaction=redaction)
    closed = [
        assembler.add(e, topic="t.turn-events", partition=0, offset=i) for i, e in enumerate(events)
    ]
    return [t for t in closed if t is not None] + assembler.close_all()


# --- the writers: each returns the bytes it wrote ------------------------------------------


def log_lines(events: list[dict[str, Any]], redaction: Redaction, _: Path) -> bytes:
    settings = LogSinkSettings(redaction.policy, redaction.key)
    turns = [consumed(e, i) for i, e in enumerate(events)]
    return b"".join(turn_lines(turns, surface_redactor(settings)))


def traces_topic(events: list[dict[str, Any]], redaction: Redaction, _: Path) -> bytes:
    serialize = SingleObjectSerializer(TRACES.latest)
    return b"".join(serialize(t.to_avro()) for t in traces(events, redaction))


def feeder_manifest(events: list[dict[str, Any]], redaction: Redaction, _: Path) -> bytes:
    # The feeder's manifest line, as it writes it.
    return b"".join(
        json.dumps(t.manifest_line()).encode() + b"\n" for t in traces(events, redaction)
    )


def review_pack_file(events: list[dict[str, Any]], redaction: Redaction, folder: Path) -> bytes:
    manifest = folder / "manifest.jsonl"
    manifest.write_bytes(feeder_manifest(events, redaction, folder))
    review_pack.export([(None, manifest)], folder / "pack.json", redaction=redaction)
    return (folder / "pack.json").read_bytes()


def replay_jsonl(events: list[dict[str, Any]], redaction: Redaction, _: Path) -> bytes:
    records = [
        StoredRecord("t.turn-events", 0, i, b"k", encode(dict(e))) for i, e in enumerate(events)
    ]
    return b"".join(jsonl_line(DECODE_TURNS, r, redaction)[0] for r in records)


def replay_htir(events: list[dict[str, Any]], redaction: Redaction, _: Path) -> bytes:
    return b"".join(trace_line(t) for t in traces(events, redaction))


def evidence_file(events: list[dict[str, Any]], redaction: Redaction, folder: Path) -> bytes:
    built = traces(events, redaction)
    pack = LabelPack(
        tuple(
            Case(
                t.task_id,
                t.task_family,
                "reviewer/1",
                None,
                Trace(tuple(t.steps), {"run": t.task_id}),
            )
            for t in built
        )
    )
    write_json(folder / "labels.json", pack.to_json())
    builder = TraceEvidence(RuleBasedAuditor(), load_task_labels(folder / "labels.json"))
    builder.begin()
    for trace in built:
        admission = builder.admit(trace)
        builder.add_case(trace, admission, builder.observe(trace))
    write_json(folder / "evidence.json", builder.finish().to_json())
    return (folder / "evidence.json").read_bytes()


def tail_lines(events: list[dict[str, Any]], redaction: Redaction, _: Path) -> bytes:
    # tail shows a turn's surface and input tokens (JSON strings), as the policy writes them.
    return "".join(
        format_turn(DECODE_TURNS(encode(dict(e))), 0, i, show_verdicts=True, surfaces=redaction)
        + "\n"
        for i, e in enumerate(events)
    ).encode()


WRITERS: dict[str, Callable[[list[dict[str, Any]], Redaction, Path], bytes]] = {
    "log lines": log_lines,
    "traces topic": traces_topic,
    "feeder manifest": feeder_manifest,
    "review pack": review_pack_file,
    "replay jsonl": replay_jsonl,
    "replay htir": replay_htir,
    "evidence": evidence_file,
    "tail": tail_lines,
}
# Where the writer puts out each kind of planted text when the policy keeps it.
WRITES_TOOL_IO = {
    "traces topic",
    "feeder manifest",
    "review pack",
    "replay jsonl",
    "replay htir",
    "evidence",
}
WRITES_ALL_SURFACES = {"log lines", "replay jsonl"}  # walk, articulation and tokens too
WRITES_TOKENS = WRITES_ALL_SURFACES | {"tail"}  # tail: the surface and the input tokens
WRITES_SURFACE = WRITES_TOKENS | WRITES_TOOL_IO


def strings_in(data: bytes, writer: str) -> Iterator[str]:
    """Every string the output holds, decoded as its reader decodes it."""
    if writer == "tail":  # each line's JSON strings after said= and answer=
        for line in data.decode().split("\n"):
            yield line
            for name in (" said=", " answer="):
                if name in line:
                    at = line.index(name) + len(name)
                    yield json.JSONDecoder().raw_decode(line, at)[0]
        return
    text = data.decode()
    # Lines end in "\n" only: str.splitlines() would also cut at U+0085 and U+2028 in a text.
    for line in text.split("\n") if writer not in ("review pack", "evidence") else [text]:
        if line.strip():
            yield from _strings(json.loads(line))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def expected(writer: str, where: str) -> bool:
    """Whether ``writer`` writes the text planted at ``where`` when it is kept."""
    kind = where.split("-", maxsplit=1)[0]
    if kind in ("args", "result"):
        return writer in WRITES_TOOL_IO
    if kind == "surface":
        return writer in WRITES_SURFACE
    if kind == "token":
        return writer in WRITES_TOKENS
    return writer in WRITES_ALL_SURFACES  # walk_surface, articulation_surface


class TestEveryWriterUnderEveryPolicy:
    @pytest.mark.parametrize("writer", list(WRITERS))
    @pytest.mark.parametrize("policy", list(POLICIES))
    @settings(
        max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(data=st.data())
    def test_planted_texts_are_written_only_when_kept(
        self,
        tmp_path_factory: pytest.TempPathFactory,
        writer: str,
        policy: str,
        data: st.DataObject,
    ) -> None:
        planted = plant(data.draw)
        redaction = POLICIES[policy]
        written = WRITERS[writer](planted.events, redaction, tmp_path_factory.mktemp(writer))
        if redaction.policy is not SurfacePolicy.KEEP:
            assert CARD.encode() not in written
            assert not any(CARD in s for s in _decoded(written, writer))
            if redaction.policy is SurfacePolicy.HASH:
                assert HASH_PREFIX.encode() in written
            return
        strings = list(_decoded(written, writer))
        for text in planted.texts:
            where = text.split(f"[{CARD} ")[1].split("]")[0]
            found = any(text in s for s in strings)
            assert found is expected(writer, where), (writer, where)


def _decoded(written: bytes, writer: str) -> Iterator[str]:
    if writer != "traces topic":
        yield from strings_in(written, writer)
        return
    # Avro single-object records, one after the other: read them back one by one.
    read = TurnEventDeserializer(TRACES)
    serialize = SingleObjectSerializer(TRACES.latest)
    rest = written
    while rest:
        record = read(rest).event
        size = len(serialize(record))
        yield from _strings(record)
        rest = rest[size:]


class TestHashing:
    @given(text=st.text())
    def test_hash_is_keyed_deterministic_and_idempotent(self, text: str) -> None:
        hashed = POLICIES["hash"].text(text)
        assert hashed is not None
        assert hashed.startswith(HASH_PREFIX)
        assert hashed == POLICIES["hash"].text(text)
        assert POLICIES["hash"].text(hashed) == hashed  # a second writer leaves it
        other = Redaction(SurfacePolicy.HASH, b"another key").text(text)
        assert other != hashed
        assert POLICIES["drop"].text(text) is None
        assert POLICIES["keep"].text(text) == text

    def test_the_key_stays_out_of_the_repr(self) -> None:
        assert "redaction-test-key" not in repr(POLICIES["hash"])
        assert "redaction-test-key" not in repr(LogSinkSettings(SurfacePolicy.HASH, KEY))


class TestTheSetting:
    @pytest.mark.parametrize(
        ("env", "policy"),
        [
            ({}, SurfacePolicy.DROP),
            ({"TURNAUDIT_LOG_SURFACES": "keep"}, SurfacePolicy.KEEP),
            ({"TURNAUDIT_LOG_SURFACES": "full"}, SurfacePolicy.KEEP),  # the older name
            ({"TURNAUDIT_SURFACES": "keep"}, SurfacePolicy.KEEP),
            ({"TURNAUDIT_SURFACES": "drop", "TURNAUDIT_LOG_SURFACES": "drop"}, SurfacePolicy.DROP),
            ({"TURNAUDIT_SURFACES": "hash", "TURNAUDIT_LOG_HASH_KEY": "k"}, SurfacePolicy.HASH),
        ],
    )
    def test_one_policy_from_either_name(self, env: dict[str, str], policy: SurfacePolicy) -> None:
        assert surface_redaction(env).policy is policy
        service = ServiceSettings.from_env(ServiceName.HTIR_FEEDER, env)
        assert service.surfaces.policy is policy

    @pytest.mark.parametrize(
        ("env", "message"),
        [
            (
                {"TURNAUDIT_LOG_SURFACES": "some"},
                "TURNAUDIT_LOG_SURFACES='some': choose drop|hash|keep",
            ),
            ({"TURNAUDIT_SURFACES": "hash"}, "needs a key in TURNAUDIT_LOG_HASH_KEY"),
            ({"TURNAUDIT_SURFACES": "keep", "TURNAUDIT_LOG_SURFACES": "drop"}, "disagree"),
        ],
    )
    def test_a_bad_setting_is_one_line(self, env: dict[str, str], message: str) -> None:
        with pytest.raises(ConfigurationError) as refused:
            surface_redaction(env)
        assert message in str(refused.value)
        assert "\n" not in str(refused.value)


def simulated_run(seed: int) -> tuple[list[dict[str, Any]], GroundTruth]:
    sim = TurnRuntimeSimulator(seed)
    events = []
    for i, event in enumerate(sim.events(2500)):
        event["event_id"], event["sequence"] = f"e{i}", i
        events.append(dict(event))
    return events, sim.truth


def without_latencies(value: Any) -> Any:
    """A report less its latencies: measured afresh on every run, not derived."""
    if isinstance(value, dict):
        return {k: without_latencies(v) for k, v in value.items() if "latency" not in k}
    if isinstance(value, list):
        return [without_latencies(v) for v in value]
    return value


class TestTheRuleAuditorOnRedactedTraces:
    """The rule auditor reads no surface and no tool argument or result: its verdict on
    every prefix, the evidence's observations and the gate's decision are the same under
    every policy (latencies apart: measured). What differs is the traces' content
    digests (a label reviewed on a trace of one policy is bound to that trace)."""

    @settings(max_examples=4, deadline=None)
    @given(seed=st.integers(0, 10_000))
    def test_every_prefix_gets_the_same_verdict(self, seed: int) -> None:
        events, _ = simulated_run(seed)
        auditor = RuleBasedAuditor()
        kept = traces(events, Redaction.keep())
        for policy in ("drop", "hash"):
            redacted = traces(events, POLICIES[policy])
            assert [t.task_id for t in redacted] == [t.task_id for t in kept]
            for before, after in zip(kept, redacted, strict=True):
                for end in range(1, len(before.steps) + 1):
                    assert auditor.decide(before.steps[:end]) == auditor.decide(after.steps[:end])
                    assert auditor.triage(before.steps[:end]) == auditor.triage(after.steps[:end])

    @pytest.mark.parametrize("seed", [7, 8])
    def test_the_gate_report_is_the_same(self, seed: int) -> None:
        events, truth = simulated_run(seed)
        labels = labels_from_ground_truth(truth.as_json())
        reports, cases = {}, {}
        for name, redaction in POLICIES.items():
            builder = TraceEvidence(RuleBasedAuditor(), labels)
            builder.begin()
            for trace in traces(events, redaction):
                admission = builder.admit(trace)
                if admission.is_case:
                    builder.add_case(trace, admission, builder.observe(trace))
            evidence = builder.finish()
            reports[name] = without_latencies(evaluate(evidence))
            cases[name] = [
                (
                    c.task_id,
                    c.oracle_alarm_step,
                    [(o.prefix_end, o.verdict, o.tier) for o in c.observations or ()],
                )
                for c in evidence.cases
            ]
        assert cases["drop"]
        assert cases["drop"] == cases["hash"] == cases["keep"]
        assert reports["drop"] == reports["hash"] == reports["keep"]


class TestWhoReadsTheTraces:
    """A model auditor needs ``keep`` on the traces topic: then the auditor must be that
    topic's only reader, whatever subscribers a deployment adds."""

    @given(
        teams=st.lists(
            st.from_regex(r"[a-z][a-z0-9-]{0,11}", fullmatch=True), max_size=4, unique=True
        )
    )
    def test_the_auditor_is_the_only_reader_of_the_traces_topic(self, teams: list[str]) -> None:
        prefix = "p."
        rules = plan_acls(prefix, subscribers=teams)
        traces = TopicNames(prefix).htir_traces
        readers = {
            r.principal
            for r in rules
            if r.resource == "topic"
            and r.operation == "read"
            and (r.name == traces or (r.prefixed and traces.startswith(r.name)))
        }
        assert readers == {Role.AUDITOR.value}
        assert writers_of(rules, traces) == {Role.HTIR_FEEDER.value}

    def test_a_label_reviewed_under_one_policy_does_not_apply_under_another(
        self, tmp_path: Path
    ) -> None:
        # What the policy changes for the auditor: the traces' content digests.
        events, _ = simulated_run(9)
        kept = traces(events, Redaction.keep())[:5]
        pack = LabelPack(
            tuple(
                Case(
                    t.task_id,
                    t.task_family,
                    "reviewer/1",
                    None,
                    Trace(tuple(t.steps), {"run": t.task_id}),
                )
                for t in kept
            )
        )
        write_json(tmp_path / "labels.json", pack.to_json())
        labels = load_task_labels(tmp_path / "labels.json")
        for name, redaction in POLICIES.items():
            builder = TraceEvidence(RuleBasedAuditor(), labels)
            builder.begin()
            admitted = [builder.admit(t).is_case for t in traces(events, redaction)[:5]]
            assert admitted == [name == "keep"] * 5, name
            if name != "keep":
                assert builder.tally.excluded == {"label_trace_changed": 5}


class TestHashesCompareAcrossWriters:
    @settings(max_examples=10, deadline=None)
    @given(data=st.data())
    def test_a_traces_surface_hash_is_the_log_lines_hash(self, data: st.DataObject) -> None:
        # Under hash a trace step and the log line of the same turn can be matched.
        planted = plant(data.draw)
        hashed = POLICIES["hash"]
        (trace,) = traces(planted.events, hashed)
        lines = [
            json.loads(line)
            for line in log_lines(planted.events, hashed, Path()).decode().split("\n")
            if line
        ]
        by_event = {line["event_id"]: line["surface_hmac"] for line in lines}
        turns = [s for s in trace.steps if s["kind"] == "turn"]
        assert turns
        for step in turns:
            assert step["surface"] == by_event[step["event_id"]]


class TestAReplayResumesOnlyUnderItsPolicy:
    def test_the_policy_is_part_of_the_replay_fingerprint(self, tmp_path: Path) -> None:
        target = ReplayTarget.file("jsonl", tmp_path / "out.jsonl")
        prints = {
            name: ReplayRequest(surfaces=r).fingerprint("t", target) for name, r in POLICIES.items()
        }
        assert len(set(prints.values())) == 3  # a checkpoint of one never resumes another
        # The default's fingerprint is the one replays had before the policy: they resume.
        assert prints["drop"] == ReplayRequest().fingerprint("t", target)
        rekeyed = Redaction(SurfacePolicy.HASH, b"other key")  # other hashes: no resume either
        assert ReplayRequest(surfaces=rekeyed).fingerprint("t", target) != prints["hash"]
        assert "redaction-test-key" not in POLICIES["hash"].label
