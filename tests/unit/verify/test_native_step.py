"""Verify's native step against the Python it stands in for.

* ``ContractCheck`` says "no breach" exactly when ``check_event`` returns no breach and
  raises nothing: over decoded turns of every version and kind, mutated at random
  (fields set to any of a pool of values, or removed).
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
from turnaudit.contracts import check_event
from turnaudit.producers.adapter import TurnContext
from turnaudit.records import StoredRecord
from turnaudit.verdicts import ActionAssessment, RiskTier, SafetyVerdict, Verdict
from turnaudit.verify.native_step import contract_check
from turnaudit.verify.report import RangeJson, VerifyReport
from turnaudit.verify.verifier import Verifier

CHECK = contract_check()
RANGE: RangeJson = {"topic": "t", "description": "d", "partitions": {}, "from": None,
                    "to": None, "from_log_start": True}


def decoded(event: dict[str, Any]) -> dict[str, Any]:
    return scenario.DECODE(encode(event)).event


def base_events() -> list[dict[str, Any]]:
    out = [decoded(turn("s", 0, version=v)) for v in (1, 2, 3)]
    out.append(decoded(turn("s", 1, refusal_emitted=True, surface="[refusal] no",
                            surface_before_hedge="[refusal] no")))
    for tier, verdict in ((RiskTier.LOW, Verdict.SEAL), (RiskTier.HIGH, Verdict.HOLD),
                          (RiskTier.CRITICAL, Verdict.VOID), (RiskTier.MEDIUM, Verdict.VOID)):
        action = ActionAssessment.from_critic("deploy", verdict, tier, tier is RiskTier.HIGH)
        out.append(decoded(turn("s", 2, version=3, action=action)))
    for action in (ActionAssessment.injection_detected_for("x"),
                   ActionAssessment.critic_unavailable_for("y")):
        out.append(decoded(turn("s", 3, version=3, action=action)))
    stub = builder(3).stub_turn(TurnContext("s", "medical", "triage", 0), input_tokens=["x"],
                                versor_condition=1.0, safety_verdict=SafetyVerdict(True),
                                ethics_verdict=None)
    assert stub is not None
    stub.update(event_id="stub-0", sequence=0)
    out.append(decoded(stub))
    out += [decoded(e) for e in breaking_events().values()]
    # The simulator's turns: every kind it makes, stubs and actions included.
    out += [scenario.DECODE(s.value).event
            for s in scenario.stamped_events(60, seed=11, producers=1, sessions=3)]
    return out


BASES = base_events()
POOL: list[object] = [
    True, False, None, 0, 1, 2, 3, 0.0, -0.0, math.nan, 0.5, "", "x", "STUB", "MAIN",
    "[unknown-domain]", "RED", "CRITICAL", "LOW", "VOID", "HOLD", "SEAL", "DOMAIN_SEAL",
    "DOMAIN_HOLD", "DOMAIN_VOID", [], ["x"], {}, {"score": 0.5, "threshold": 0.5},
    {"passed": True, "violated_boundary_ids": []},
]
PLACES = {
    "event": ["verdicts", "path", "action_assessment", "identity_score", "safety_verdict",
              "ethics_verdict", "cycle_cost_total", "vault_hits", "flagged", "input_tokens",
              "walk_surface", "articulation_surface", "surface"],
    "verdicts": ["refusal_emitted", "hedge_injected", "identity_score", "safety_verdict",
                 "ethics_verdict", "schema_version"],
    "action_assessment": ["risk_tier", "action_risk_verdict", "human_decision_required",
                          "execution_verdict", "output_policy", "injection_detected",
                          "critic_available"],
}


@st.composite
def mutated_events(draw: st.DrawFn) -> dict[str, Any]:
    event = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(0, 4))):
        where = draw(st.sampled_from(sorted(PLACES)))
        name = draw(st.sampled_from(PLACES[where]))
        target = event if where == "event" else event.get(where)
        if not isinstance(target, dict):
            continue
        choice = draw(st.integers(0, len(POOL) + 1))
        if choice == len(POOL):
            target.pop(name, None)
        elif choice == len(POOL) + 1:  # the other side's value: equal verdicts stay equal
            other = event["verdicts"] if where == "event" else event
            if isinstance(other, dict) and name in other:
                target[name] = copy.deepcopy(other[name])
        else:
            target[name] = copy.deepcopy(POOL[choice])
    return event


def python_says_kept(event: dict[str, Any]) -> bool:
    try:
        return not check_event(event)
    except Exception:  # any error: not "kept" (the native check must not say so either)
        return False


def native_says_kept(event: dict[str, Any]) -> bool:
    try:
        return not CHECK(event)
    except Exception:
        return False


@given(mutated_events())
@settings(max_examples=5000, deadline=None)
def test_the_native_contract_check_agrees_with_check_event(event: dict[str, Any]) -> None:
    assert native_says_kept(event) == python_says_kept(event)


def test_every_base_event_is_judged_as_check_event_judges_it() -> None:
    kept = [python_says_kept(e) for e in BASES]
    # Both kinds are in the pool.
    assert kept.count(True) >= 5
    assert kept.count(False) >= 4
    assert [native_says_kept(e) for e in BASES] == kept


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
        renumbered = Fed(m.partition, offsets[m.partition], m.key, m.value, m.stream,
                         m.position, m.event_id)
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
    records = [StoredRecord("t", m.partition, m.offset, m.key, m.value or None,
                            timestamp_ms=1_790_000_000_000 + n) for n, m in enumerate(messages)]
    bounds = sorted({0, len(records), *(c % (len(records) + 1) for c in cuts)})
    for low, high in itertools.pairwise(bounds):
        verifier.feed_batch(records[low:high])
    return verifier


@given(mixed_ranges(), st.lists(st.integers(0, 200), max_size=6))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_batches_conclude_what_feeding_one_at_a_time_does(
    ranged: tuple[list[Fed], dict[int, int]], cuts: list[int],
) -> None:
    messages, log_start = ranged
    with one_at_a_time(messages, log_start) as reference, \
            in_batches(messages, log_start, cuts) as native:
        assert native.counts.tally == reference.counts.tally
        assert native.messages == reference.messages
        assert VerifyReport(RANGE, native).as_json() == VerifyReport(RANGE, reference).as_json()


def test_a_clean_range_is_verified_without_python_but_for_each_partitions_first_message(
) -> None:
    events = scenario.stamped_events(200, seed=9, producers=2, sessions=6)
    records = [StoredRecord("t", n % 2, n // 2, e.key, e.value, timestamp_ms=n + 1)
               for n, e in enumerate(events)]
    verifier = Verifier(scenario.DECODE, log_start_offsets={0: 0, 1: 0})
    fed: list[int] = []
    concluded: list[int] = []
    feed, conclude = verifier.feed, verifier.conclude
    verifier.feed = lambda *a, **k: (fed.append(1), feed(*a, **k))[1]  # type: ignore[method-assign]
    verifier.conclude = lambda *a, **k: (concluded.append(1), conclude(*a, **k))[1]  # type: ignore[method-assign]
    with verifier:
        verifier.feed_batch(records)
        # Each partition's first message is fed (and concluded) in Python; no other is.
        assert (len(fed), len(concluded)) == (2, 2)
        assert verifier.counts.turns == 200 == verifier.messages
        assert (verifier.first_timestamp, verifier.last_timestamp) == (1, 200)
        assert VerifyReport(RANGE, verifier).ok
