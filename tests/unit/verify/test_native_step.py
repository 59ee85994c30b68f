"""Verify's native step against the Python it stands in for.

* Contracts 1-4 are one rule (``CONTRACT_RULE``) read from two sources: a turn it
  passes on its scanned record is one ``check_event`` (the same rule over the decoded
  event) passes, and the tally counts it as the Python path does: over the simulator's
  turns, contract-breaking ones, and v3/v4 turns whose verdict fields take every value
  their schema allows.
* ``Verifier.feed_batch`` (ordinary messages native, the rest in Python) concludes what
  feeding the same messages one at a time through ``Verifier.feed`` does, the whole
  report compared, over tampered streams with undecodable, mis-keyed, breaching, legacy
  and retention-cut messages mixed in, cut into batches anywhere.
"""

from __future__ import annotations

import copy
import itertools
import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.events import breaking_events, builder, encode, turn
from tests.unit.verify import scenario
from tests.unit.verify.test_verifier import Fed, tampered_streams
from turnaudit.producers.adapter import TurnContext
from turnaudit.records import StoredRecord
from turnaudit.verdicts import ActionAssessment, RiskTier, SafetyVerdict, Verdict
from turnaudit.verify.report import RangeJson, VerifyReport
from turnaudit.verify.verifier import Verifier

RANGE: RangeJson = {
    "topic": "t",
    "description": "d",
    "partitions": {},
    "from": None,
    "to": None,
    "from_log_start": True,
}


def decoded(event: dict[str, Any]) -> dict[str, Any]:
    return scenario.DECODE(encode(event)).event


def base_events() -> list[dict[str, Any]]:
    out = [decoded(turn("s", 0, version=v)) for v in (1, 2, 3)]
    out.append(
        decoded(
            turn(
                "s",
                1,
                refusal_emitted=True,
                surface="[refusal] no",
                surface_before_hedge="[refusal] no",
            )
        )
    )
    for tier, verdict in (
        (RiskTier.LOW, Verdict.SEAL),
        (RiskTier.HIGH, Verdict.HOLD),
        (RiskTier.CRITICAL, Verdict.VOID),
        (RiskTier.MEDIUM, Verdict.VOID),
    ):
        action = ActionAssessment.from_critic("deploy", verdict, tier, tier is RiskTier.HIGH)
        out.append(decoded(turn("s", 2, version=3, action=action)))
    for action in (
        ActionAssessment.injection_detected_for("x"),
        ActionAssessment.critic_unavailable_for("y"),
    ):
        out.append(decoded(turn("s", 3, version=3, action=action)))
    stub = builder(3).stub_turn(
        TurnContext("s", "medical", "triage", 0),
        input_tokens=["x"],
        versor_condition=1.0,
        safety_verdict=SafetyVerdict(True),
        ethics_verdict=None,
    )
    assert stub is not None
    stub.update(event_id="stub-0", sequence=0)
    out.append(decoded(stub))
    out += [decoded(e) for e in breaking_events().values()]
    # The simulator's turns: every kind it makes, stubs and actions included.
    out += [
        scenario.DECODE(s.value).event
        for s in scenario.stamped_events(60, seed=11, producers=1, sessions=3)
    ]
    return out


BASES = base_events()


def test_every_base_turn_is_judged_as_the_python_path_judges_it() -> None:
    """The simulator's turns of every kind, the contract-breaking ones, actions on each
    path of the verdict split, a stub: each after a clean first message, in one range."""
    first = scenario.stamped_events(1, seed=1, producers=1, sessions=1)[0]
    messages = [Fed(0, 0, first.key, first.value, ("", ""), 0, "")]
    for n, event in enumerate(BASES, 1):
        version = event["verdicts"]["schema_version"]
        again = {**event, "session_id": f"base-{n}", "event_id": f"base-{n}", "sequence": 0}
        again["verdicts"] = {**event["verdicts"], "schema_version": max(version, 3)}
        messages.append(Fed(0, n, f"base-{n}".encode(), encode(again), ("", ""), 0, ""))
    with one_at_a_time(messages, {0: 0}) as reference, in_batches(messages, {0: 0}, []) as native:
        assert reference.breaching  # breaching turns are among them
        assert native.counts.tally == reference.counts.tally
        assert VerifyReport(RANGE, native).as_json() == VerifyReport(RANGE, reference).as_json()


def extra_messages(kind: str, n: int) -> list[tuple[bytes | None, bytes | None]]:
    """Messages feed must handle outside the ordinary case."""
    if kind == "garbage":
        return [(b"x", b"not avro at all")]
    if kind == "empty":
        return [(b"x", None)]
    if kind == "breach":
        event = list(breaking_events().values())[n % 4]
        return [(event["session_id"].encode(), encode(event))]
    if kind == "legacy":
        return [(b"legacy", encode(turn("legacy", i, version=2))) for i in range(n % 3 + 1)]
    event = turn("mis-keyed", 0, version=2)
    return [(b"not-the-session", encode(event))]


@st.composite
def mixed_ranges(draw: st.DrawFn) -> tuple[list[Fed], dict[int, int]]:
    tampered, _ = draw(tampered_streams())
    messages = list(tampered.messages)
    for n in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["garbage", "empty", "breach", "legacy", "mis-keyed"]))
        at = draw(st.integers(0, len(messages)))
        partition = draw(st.integers(0, 1))
        for key, value in extra_messages(kind, n):
            messages.insert(at, Fed(partition, -1, key or b"", value or b"", ("", ""), 0, ""))
            at += 1
    # Offsets renumbered per partition in feed order; a redelivery keeps its first place.
    offsets = {0: 0, 1: 0}
    cut = draw(st.integers(0, 3))  # retention: partition 0 read from a moved log start
    offsets[0] = cut
    placed: dict[int, Fed] = {}
    out = []
    for m in messages:
        again = placed.get(id(m))
        if again is not None:
            out.append(again)
            continue
        renumbered = Fed(
            m.partition, offsets[m.partition], m.key, m.value, m.stream, m.position, m.event_id
        )
        offsets[m.partition] += 1
        placed[id(m)] = renumbered
        out.append(renumbered)
    return out, {0: cut, 1: 0}


def one_at_a_time(messages: list[Fed], log_start: dict[int, int]) -> Verifier:
    verifier = Verifier(scenario.DECODE, log_start_offsets=log_start)
    for n, m in enumerate(messages):
        verifier.feed(m.partition, m.offset, m.key, m.value or None, 1_790_000_000_000 + n)
    return verifier


def in_batches(messages: list[Fed], log_start: dict[int, int], cuts: list[int]) -> Verifier:
    verifier = Verifier(scenario.DECODE, log_start_offsets=log_start)
    records = [
        StoredRecord(
            "t", m.partition, m.offset, m.key, m.value or None, timestamp_ms=1_790_000_000_000 + n
        )
        for n, m in enumerate(messages)
    ]
    bounds = sorted({0, len(records), *(c % (len(records) + 1) for c in cuts)})
    for low, high in itertools.pairwise(bounds):
        verifier.feed_batch(records[low:high])
    return verifier


@given(mixed_ranges(), st.lists(st.integers(0, 200), max_size=6))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_batches_conclude_what_feeding_one_at_a_time_does(
    ranged: tuple[list[Fed], dict[int, int]],
    cuts: list[int],
) -> None:
    messages, log_start = ranged
    with (
        one_at_a_time(messages, log_start) as reference,
        in_batches(messages, log_start, cuts) as native,
    ):
        assert native.counts.tally == reference.counts.tally
        assert native.messages == reference.messages
        assert VerifyReport(RANGE, native).as_json() == VerifyReport(RANGE, reference).as_json()


def test_a_clean_range_is_verified_without_python_but_for_each_partitions_first_message() -> None:
    events = scenario.stamped_events(200, seed=9, producers=2, sessions=6)
    records = [
        StoredRecord("t", n % 2, n // 2, e.key, e.value, timestamp_ms=n + 1)
        for n, e in enumerate(events)
    ]
    verifier = Verifier(scenario.DECODE, log_start_offsets={0: 0, 1: 0})
    fed: list[int] = []
    concluded: list[int] = []
    feed, conclude = verifier.feed, verifier.conclude
    verifier.feed = lambda *a, **k: (fed.append(1), feed(*a, **k))[1]  # type: ignore[method-assign]  # a counting spy
    verifier.conclude = lambda *a, **k: (concluded.append(1), conclude(*a, **k))[1]  # type: ignore[method-assign]  # a counting spy
    with verifier:
        verifier.feed_batch(tuple(records))  # any sequence (replay hands its own)
        # Each partition's first message is fed (and concluded) in Python; no other is.
        assert (len(fed), len(concluded)) == (2, 2)
        assert verifier.counts.turns == 200 == verifier.messages
        assert (verifier.first_timestamp, verifier.last_timestamp) == (1, 200)
        assert VerifyReport(RANGE, verifier).ok


IDENTITIES: list[object] = [
    None,
    {"score": 0.8, "threshold": 0.5},
    {"score": math.nan, "threshold": 0.5},
    {"score": -0.0, "threshold": 0.5},
    {"score": 0.0, "threshold": 0.5},
]
SAFETY = [
    {"passed": True, "violated_boundary_ids": []},
    {"passed": False, "violated_boundary_ids": ["weapons"]},
]
ETHICS: list[object] = [
    None,
    {"passed": True, "violated_predicate_ids": [], "hedge_recommended": False},
    {"passed": False, "violated_predicate_ids": ["p"], "hedge_recommended": True},
]
TEXTS = ["[unknown-domain]", "walk:triage", "[refusal] no", "", "Take 200mg."]
ACTION_VALUES = {
    "risk_tier": [t.value for t in RiskTier],
    "execution_verdict": [v.value for v in Verdict],
    "action_risk_verdict": [v.value for v in Verdict],
    "output_policy": ["DOMAIN_SEAL", "DOMAIN_HOLD", "DOMAIN_VOID"],
    "human_decision_required": [True, False],
    "injection_detected": [True, False],
    "critic_available": [True, False],
}


@st.composite
def typed_turns(draw: st.DrawFn) -> tuple[bytes, dict[str, Any]]:
    """A v3, v4 or v5 turn whose fields take any value their schema allows (breaching
    or not), and its key (the session id, mostly)."""
    version = draw(st.sampled_from([3, 4, 5]))
    action = ActionAssessment.from_critic("deploy", Verdict.SEAL, RiskTier.LOW, False)
    event = turn("typed", 0, version=version, action=action if draw(st.booleans()) else None)
    bundle = event["verdicts"]
    pick = draw
    for name in ("refusal_emitted", "hedge_injected"):
        bundle[name] = pick(st.booleans())
    event["path"] = pick(st.sampled_from(["MAIN", "STUB"]))
    event["identity_score"] = copy.deepcopy(pick(st.sampled_from(IDENTITIES)))
    bundle["identity_score"] = (
        copy.deepcopy(event["identity_score"])
        if pick(st.booleans())
        else copy.deepcopy(pick(st.sampled_from(IDENTITIES)))
    )
    for name, pool in (("safety_verdict", SAFETY), ("ethics_verdict", ETHICS)):
        event[name] = copy.deepcopy(pick(st.sampled_from(pool)))
        bundle[name] = (
            copy.deepcopy(event[name])
            if pick(st.booleans())
            else copy.deepcopy(pick(st.sampled_from(pool)))
        )
    if bundle["safety_verdict"] is None:
        bundle["safety_verdict"] = copy.deepcopy(SAFETY[0])
    event["cycle_cost_total"] = pick(st.sampled_from([0.0, -0.0, 12.5]))
    event["vault_hits"] = pick(st.sampled_from([0, 3]))
    event["flagged"] = pick(st.booleans())
    event["input_tokens"] = pick(st.sampled_from([[], ["x"]]))
    for name in ("walk_surface", "articulation_surface", "surface"):
        event[name] = pick(st.sampled_from(TEXTS))
    if event["action_assessment"] is not None:
        for name, values in ACTION_VALUES.items():
            if pick(st.booleans()):
                event["action_assessment"][name] = pick(st.sampled_from(values))
    if version >= 4:
        event["breaches"] = pick(st.sampled_from([[], ["refusal_hedge_exclusive"]]))
    key = b"typed" if pick(st.integers(0, 9)) else b"other"
    return key, event


@given(st.lists(typed_turns(), min_size=1, max_size=6))
@settings(max_examples=1500, deadline=None)
def test_scanned_turns_are_judged_and_counted_as_decoded_ones(
    turns: list[tuple[bytes, dict[str, Any]]],
) -> None:
    # A clean first message per partition (the Verifier's own), then the typed turns: one
    # legacy stream (no producer id), in order, so the contracts alone set them apart.
    first = scenario.stamped_events(1, seed=1, producers=1, sessions=1)[0]
    messages = [Fed(0, 0, first.key, first.value, ("", ""), 0, "")]
    for n, (key, event) in enumerate(turns):
        event.update(sequence=n, event_id=f"typed-{n}")
        messages.append(Fed(0, n + 1, key, encode(event), ("", ""), 0, ""))
    with one_at_a_time(messages, {0: 0}) as reference, in_batches(messages, {0: 0}, []) as native:
        assert native.counts.tally == reference.counts.tally
        assert VerifyReport(RANGE, native).as_json() == VerifyReport(RANGE, reference).as_json()


def test_v3_to_v5_are_scanned_without_building_records() -> None:
    with Verifier(scenario.DECODE, log_start_offsets={0: 0}) as verifier:
        assert verifier._step is not None
        assert verifier._step.scanned_versions() == [3, 4, 5]


VALID_WIRE = [encode(turn("wire", n, version=v)) for v in (3, 4, 5) for n in range(2)]


@st.composite
def damaged_messages(draw: st.DrawFn) -> bytes:
    """A v3, v4 or v5 message with its body damaged: bytes changed, cut, added."""
    data = bytearray(draw(st.sampled_from(VALID_WIRE)))
    for _ in range(draw(st.integers(1, 3))):
        how = draw(st.sampled_from(["change", "cut", "add", "insert"]))
        at = draw(st.integers(10, len(data)))  # after the header: the schema stays known
        if how == "change" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif how == "cut":
            del data[at:]
        elif how == "add":
            data += bytes(draw(st.binary(min_size=1, max_size=4)))
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=4))
    return bytes(data)


@given(st.lists(damaged_messages(), min_size=1, max_size=5))
@settings(max_examples=1500, deadline=None)
def test_a_damaged_body_is_refused_by_the_scan_exactly_when_decoding_refuses_it(
    damaged: list[bytes],
) -> None:
    first = scenario.stamped_events(1, seed=1, producers=1, sessions=1)[0]
    messages = [Fed(0, 0, first.key, first.value, ("", ""), 0, "")]
    messages += [Fed(0, n, b"wire", value, ("", ""), 0, "") for n, value in enumerate(damaged, 1)]
    with one_at_a_time(messages, {0: 0}) as reference, in_batches(messages, {0: 0}, []) as native:
        assert native.counts.tally == reference.counts.tally
        assert VerifyReport(RANGE, native).as_json() == VerifyReport(RANGE, reference).as_json()
