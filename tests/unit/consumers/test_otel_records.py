"""A turn's verdicts as GenAI evaluation records, written natively (otlp.rs): over simulated
turns of every schema version and over mutated ones (malformed trace contexts, oversized
ids), and held to the SDK path (the rule as it was in Python, ``LoggerProvider``, the
official ``encode_logs``) request for request over random turns read record by record
(the decoded-event path; the scanned path: test_native_otlp.py)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ScopeLogs

from tests.support.otel_reference import comparable, sdk_request
from turnaudit._native import otlp_requests
from turnaudit.consumers.otel_records import (
    ACTION_RISK,
    ETHICS,
    EVALUATION_NAME,
    EVALUATION_NAMES,
    EVENT_ID,
    EVENT_NAME,
    EXPLANATION,
    HEDGE,
    MAX_EXPLANATION,
    MAX_IDS,
    MAX_TEXT,
    PACK,
    PRODUCER_ID,
    PROVIDER_NAME,
    REDELIVERED,
    REDRIVEN,
    REFUSAL,
    REQUEST_MODEL,
    RESPONSE_ID,
    SAFETY,
    SCORE_LABEL,
    SCORE_VALUE,
    SEQUENCE,
    SESSION_ID,
    encode_records,
)
from turnaudit.consumers.otel_sink import SCOPE, SERVICE_NAME
from turnaudit.consumers.runtime import ConsumedTurn
from turnaudit.identity import TrackResult, TurnOutcome
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer, TurnEventDeserializer

CATALOG = shipped_catalog()
DECODE = TurnEventDeserializer(CATALOG)
VERSIONS = tuple(s.version for s in CATALOG.versions)
# Enough for every record, bounded: the verdict's own three or four, its
# action attributes, the turn's and the model's.
MAX_ATTRIBUTES = 24


def simulated(seed: int, count: int, versions: tuple[int, ...] = VERSIONS) -> list[dict[str, Any]]:
    events = []
    for i, event in enumerate(TurnRuntimeSimulator(seed, schema_versions=versions).events(count)):
        stamped = dict(event)
        stamped.update(
            event_id=f"e-{seed}-{i}", sequence=i, producer_id=f"p-{seed}", prev_hash="0" * 64
        )
        events.append(stamped)
    return events


def consumed(
    event: dict[str, Any], outcome: TurnOutcome = TurnOutcome.NEW, *, redriven: bool = False
) -> ConsumedTurn:
    version = event["verdicts"]["schema_version"]
    decoded = DECODE(SingleObjectSerializer(CATALOG.version(version))(event))
    placement = TrackResult(outcome, ("p", "s"), event["sequence"])  # type: ignore[arg-type]  # a plain tuple as the stream id
    return ConsumedTurn(decoded, placement, "t.turn-events", 1, 42, redriven=redriven)


def expected_names(event: dict[str, Any]) -> set[str]:
    bundle = event["verdicts"]
    names = {REFUSAL, HEDGE}
    if bundle["safety_verdict"] is not None:
        names.add(SAFETY)
    if bundle["ethics_verdict"] is not None:
        names.add(ETHICS)
    if event.get("action_assessment") is not None:
        names.add(ACTION_RISK)
    return names


def surface_texts(event: dict[str, Any]) -> set[str]:
    texts = {event["surface"], event["walk_surface"], event["articulation_surface"]}
    texts.update(event["input_tokens"])
    for step in event.get("tool_steps") or ():
        texts.update(t for t in (step["arguments"], step["result"]) if t)
    return {t for t in texts if t}


class Record:
    """One native record, read back with the ``opentelemetry.proto`` classes."""

    def __init__(self, record: LogRecord) -> None:
        self.proto = record
        self.attributes: dict[str, Any] = {
            kv.key: getattr(kv.value, str(kv.value.WhichOneof("value"))) for kv in record.attributes
        }
        self.name = str(self.attributes[EVALUATION_NAME])
        self.timestamp_ns = record.time_unix_nano

    @property
    def parent(self) -> tuple[str, str, int] | None:
        """(trace id, span id) in hex and the flags, or None: no span."""
        if not self.proto.trace_id:
            assert not self.proto.span_id
            assert not self.proto.flags
            return None
        return self.proto.trace_id.hex(), self.proto.span_id.hex(), self.proto.flags


def evaluation_records(turn: ConsumedTurn) -> list[Record]:
    """The turn's native records (the record-by-record path), parsed."""
    out = bytearray()
    count = encode_records(turn, out, 7)
    records = ScopeLogs.FromString(bytes(out)).log_records
    assert len(records) == count
    for record in records:
        assert record.event_name == EVENT_NAME
        assert record.severity_text == "INFO"
        assert record.severity_number == 9  # INFO
        assert record.observed_time_unix_nano == 7
    return [Record(r) for r in records]


def check_bounded(record: Record) -> None:
    attributes = record.attributes
    assert len(attributes) <= MAX_ATTRIBUTES
    for key, value in attributes.items():
        assert type(value) in (str, bool, int, float), (key, value)
        if isinstance(value, str):
            assert len(value) <= (MAX_EXPLANATION if key == EXPLANATION else MAX_TEXT), key
    assert type(attributes[SCORE_VALUE]) is float
    assert 0.0 <= float(attributes[SCORE_VALUE]) <= 1.0
    assert attributes[EVALUATION_NAME] in EVALUATION_NAMES
    assert record.proto.body.string_value == f"{record.name}: {attributes[SCORE_LABEL]}"


class TestSimulatedTurns:
    @settings(max_examples=40, deadline=None)
    @given(
        seed=st.integers(0, 10_000),
        count=st.integers(1, 40),
        outcome=st.sampled_from(list(TurnOutcome)),
        redriven=st.booleans(),
    )
    def test_one_record_per_named_verdict_typed_bounded_and_parented(
        self, seed: int, count: int, outcome: TurnOutcome, redriven: bool
    ) -> None:
        for event in simulated(seed, count):
            turn = consumed(event, outcome, redriven=redriven)
            records = evaluation_records(turn)
            names = [r.name for r in records]
            assert len(names) == len(set(names))  # one each
            assert set(names) == expected_names(event)
            context = event.get("trace_context")
            for record in records:
                check_bounded(record)
                attributes = record.attributes
                assert attributes[PACK] == event["pack_id"]
                assert attributes[SESSION_ID] == event["session_id"]
                assert attributes[EVENT_ID] == event["event_id"]
                assert attributes[REDELIVERED] is turn.sequence.redelivered
                assert attributes[REDRIVEN] is redriven
                assert record.timestamp_ns == turn.event["occurred_at"] * 1_000_000
                # Verdicts only: no surface text, token or tool text in any value.
                assert not surface_texts(event) & {
                    v for v in attributes.values() if isinstance(v, str)
                }
                if event["verdicts"]["schema_version"] >= 3:
                    assert attributes[PRODUCER_ID] == event["producer_id"]
                    assert attributes[SEQUENCE] == event["sequence"]
                if context is None:
                    assert record.parent is None
                else:  # carried exactly, as the runtime wrote them
                    assert record.parent == (
                        context["trace_id"],
                        context["span_id"],
                        context["trace_flags"],
                    )
                model = event.get("model")
                if model is not None:
                    assert attributes[PROVIDER_NAME] == model["provider"]
                    assert attributes[REQUEST_MODEL] == model["request_model"]
                    assert attributes[RESPONSE_ID] == event["response_id"]
                else:
                    assert PROVIDER_NAME not in attributes
                    assert REQUEST_MODEL not in attributes

    @settings(max_examples=20, deadline=None)
    @given(seed=st.integers(0, 10_000))
    def test_v4_turns_of_the_simulator_carry_the_runtime_span_and_main_turns_a_model(
        self, seed: int
    ) -> None:
        events = simulated(seed, 30, (4,))
        for event in events:
            records = evaluation_records(consumed(event))
            assert all(r.parent is not None for r in records)
            if event["path"] == "MAIN":
                assert all(REQUEST_MODEL in r.attributes for r in records)

    @settings(max_examples=30, deadline=None)
    @given(seed=st.integers(0, 10_000))
    def test_scores_and_labels_say_what_the_verdicts_say(self, seed: int) -> None:
        for event in simulated(seed, 20):
            by_name = {r.name: r.attributes for r in evaluation_records(consumed(event))}
            bundle = event["verdicts"]
            refused = by_name[REFUSAL]
            assert refused[SCORE_VALUE] == float(bundle["refusal_emitted"])
            assert refused[SCORE_LABEL] == (
                "refused" if bundle["refusal_emitted"] else "not_refused"
            )
            assert by_name[HEDGE][SCORE_VALUE] == float(bundle["hedge_injected"])
            safety = bundle["safety_verdict"]
            if safety is not None:
                assert by_name[SAFETY][SCORE_LABEL] == ("pass" if safety["passed"] else "fail")
                if not safety["passed"] and safety["violated_boundary_ids"]:
                    explanation = str(by_name[SAFETY][EXPLANATION])
                    assert all(b in explanation for b in safety["violated_boundary_ids"])
            action = event.get("action_assessment")
            if action is not None:
                risk = by_name[ACTION_RISK]
                assert risk[SCORE_LABEL] == action["action_risk_verdict"].lower()
                assert (
                    risk[SCORE_VALUE]
                    == {"SEAL": 1.0, "HOLD": 0.5, "VOID": 0.0}[action["action_risk_verdict"]]
                )


class TestMutatedTurns:
    @settings(max_examples=60, deadline=None)
    @given(
        seed=st.integers(0, 1000),
        trace_id=st.text(max_size=40),
        span_id=st.text(max_size=20),
        flags=st.integers(0, 2**31 - 1),
    )
    def test_a_malformed_trace_context_gives_no_parent_a_good_one_its_ids(
        self, seed: int, trace_id: str, span_id: str, flags: int
    ) -> None:
        event = simulated(seed, 1, (4,))[0]
        event["trace_context"] = {"trace_id": trace_id, "span_id": span_id, "trace_flags": flags}
        records = evaluation_records(consumed(event))
        well_formed = (
            len(trace_id) == 32
            and len(span_id) == 16
            and set(trace_id + span_id) <= set("0123456789abcdef")
            and trace_id != "0" * 32
            and span_id != "0" * 16
        )
        for record in records:
            if well_formed:
                assert record.parent == (trace_id, span_id, flags & 0xFF)
            else:
                assert record.parent is None

    @settings(max_examples=30, deadline=None)
    @given(
        seed=st.integers(0, 1000),
        long_text=st.text(min_size=MAX_TEXT + 1, max_size=3000),
        many=st.lists(st.text(min_size=1, max_size=600), min_size=1, max_size=40),
    )
    def test_oversized_ids_and_long_id_lists_stay_bounded(
        self, seed: int, long_text: str, many: list[str]
    ) -> None:
        event = simulated(seed, 1, (4,))[0]
        event.update(
            pack_id=long_text,
            session_id=long_text,
            response_id=long_text,
            model={"provider": long_text, "request_model": long_text, "response_model": long_text},
        )
        bundle = event["verdicts"]
        bundle["safety_verdict"] = {"passed": False, "violated_boundary_ids": many}
        event["safety_verdict"] = bundle["safety_verdict"]
        records = evaluation_records(consumed(event))
        for record in records:
            check_bounded(record)
            assert record.attributes[PACK] == long_text[:MAX_TEXT]
        safety = next(r for r in records if r.name == SAFETY)
        assert safety.attributes[SCORE_LABEL] == "fail"
        assert str(safety.attributes[EXPLANATION]).startswith("violated boundaries: ")


HEX = "0123456789abcdef"
TEXTS = st.one_of(st.text(max_size=12), st.text(min_size=MAX_TEXT - 2, max_size=MAX_TEXT + 40))
ENUM = st.sampled_from


@st.composite
def trace_contexts(draw: st.DrawFn) -> dict[str, Any] | None:
    """Absent, well formed (as often as not), or malformed: a wrong length, upper case,
    all zero, any text; any flags."""

    def hex_id(digits: int, good: bool) -> str:
        if good:
            return draw(
                st.text(HEX, min_size=digits, max_size=digits).filter(lambda t: t.strip("0"))
            )
        return draw(
            st.one_of(
                st.just("0" * digits),
                st.text(HEX + "ABCDEFxyz", min_size=digits - 1, max_size=digits + 1),
                st.text(max_size=digits + 2),
            )
        )

    kind = draw(st.sampled_from(["absent", "good", "good", "bad trace", "bad span"]))
    if kind == "absent":
        return None
    return {
        "trace_id": hex_id(32, kind != "bad trace"),
        "span_id": hex_id(16, kind != "bad span"),
        "trace_flags": draw(st.one_of(st.integers(0, 255), st.integers(-(2**31), 2**31 - 1))),
    }


@st.composite
def verdict(draw: st.DrawFn, ids: str) -> dict[str, Any] | None:
    if draw(st.booleans()):
        return None
    many = st.lists(TEXTS, max_size=MAX_IDS + 4)
    return {"passed": draw(st.booleans()), ids: draw(many)}


def mutate(draw: st.DrawFn, event: dict[str, Any]) -> None:
    """Any verdicts, ids, texts, model and trace context on a simulated turn."""
    bundle = event["verdicts"]
    for name, ids in (
        ("safety_verdict", "violated_boundary_ids"),
        ("ethics_verdict", "violated_predicate_ids"),
    ):
        bundle[name] = draw(verdict(ids))
        if name in event:  # v1 and v3 also carry them at the top
            event[name] = bundle[name]
    bundle["refusal_emitted"], bundle["hedge_injected"] = draw(st.booleans()), draw(st.booleans())
    event.update(pack_id=draw(TEXTS), session_id=draw(TEXTS), domain=draw(TEXTS))
    event["producer_id"] = draw(st.one_of(st.just(""), TEXTS))
    if draw(st.booleans()):
        event["action_assessment"] = None
    elif event.get("action_assessment") is not None:
        event["action_assessment"].update(
            action_risk_verdict=draw(ENUM(["SEAL", "HOLD", "VOID"])),
            risk_tier=draw(ENUM(["UNKNOWN", "LOW", "MEDIUM", "HIGH", "RED", "CRITICAL"])),
            output_policy=draw(ENUM(["DOMAIN_SEAL", "DOMAIN_HOLD", "DOMAIN_VOID"])),
            human_decision_required=draw(st.booleans()),
        )
    event["trace_context"] = draw(trace_contexts())
    event["response_id"] = draw(st.one_of(st.none(), TEXTS))
    event["model"] = draw(
        st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {
                    "provider": TEXTS,
                    "request_model": TEXTS,
                    "response_model": st.one_of(st.none(), TEXTS),
                }
            ),
        )
    )


@st.composite
def mutated_turns(draw: st.DrawFn) -> ConsumedTurn:
    """A simulated turn of any version, mutated, placed new or redelivered, live or
    redriven."""
    version = draw(st.sampled_from(VERSIONS))
    event = simulated(draw(st.integers(0, 10_000)), 1, (version,))[0]
    mutate(draw, event)
    outcome = draw(st.sampled_from([TurnOutcome.NEW, TurnOutcome.REDELIVERY]))
    return consumed(event, outcome, redriven=draw(st.booleans()))


class TestTheSdkPath:
    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.data_too_large])
    @given(
        turns=st.lists(mutated_turns(), min_size=1, max_size=8),
        most=st.integers(1, 40),
        parts=st.integers(1, 6),
        resource=st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=8), max_size=2),
    )
    def test_the_native_requests_are_what_the_sdk_path_sends_for_the_same_turns(
        self, turns: list[ConsumedTurn], most: int, parts: int, resource: dict[str, str]
    ) -> None:
        buffer = bytearray()
        count = sum(encode_records(turn, buffer, 1) for turn in turns)
        attributes = [
            ("service.name", SERVICE_NAME),
            ("service.instance.id", "i"),
            *resource.items(),
        ]
        requests = otlp_requests(
            buffer, list(dict(attributes).items()), SCOPE, most, 1 << 20, parts
        )
        each = min(most, -(-count // parts))  # `parts` even requests, at most `most` each
        assert [n for _, n in requests] == [
            min(each, count - start) for start in range(0, count, each)
        ]  # split at record boundaries
        assert len(requests) <= parts or each == most
        expected = sdk_request(turns, resource)
        assert comparable([r for r, _ in requests]) == comparable([expected])

    def test_a_request_holds_whole_records_up_to_its_byte_bound(self) -> None:
        turns = [consumed(e) for e in simulated(2, 40)]
        buffer = bytearray()
        count = sum(encode_records(turn, buffer, 1) for turn in turns)
        requests = otlp_requests(buffer, [("service.name", SERVICE_NAME)], SCOPE, 512, 4000)
        assert len(requests) > 1
        assert sum(n for _, n in requests) == count
        for request, n in requests:
            assert len(request) < 4000 + 1000 or n == 1  # a record past the bound goes alone
        assert comparable([r for r, _ in requests]) == comparable(
            [otlp_requests(buffer, [("service.name", SERVICE_NAME)], SCOPE, 512, 1 << 30)[0][0]]
        )
