"""Attack classes against ``verify --keyring``, without a broker: a signed, cleanly closed
run of v3 and v5 turns, attacked by a writer without a signing key, and judged as verify
judges it. Each class is drawn at random: any turn re-framed under any writer schema (a
crafted one published on the schemas topic, or another shipped one); any prefix or suffix
of the partition deleted (retention tells apart only what its time explains); any v1..v5
turn written into a signed session; any field of any checkpoint corrupted beside the real
one. None passes: the report is not ok, and honest streams stay ``signed``."""

from __future__ import annotations

import dataclasses
import json
import time
from datetime import UTC, datetime
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.identity_streams import Stamped
from tests.unit.verify.test_trust import RANGE, RING, checkpoints_of, judge, status
from turnaudit.checkpoints import Checkpoint, UnsignedAllowance
from turnaudit.identity import TurnStamper, stream_of
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.serialization.framing import single_object_header
from turnaudit.serialization.schemas import schema_from_json, shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer, TurnEventDeserializer
from turnaudit.stream_heads import StreamHead
from turnaudit.verify.report import VerifyReport
from turnaudit.verify.trust import Removal
from turnaudit.verify.verifier import Verifier

CATALOG = shipped_catalog()
SLOW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _signed_run() -> tuple[list[Stamped], list[Checkpoint]]:
    """One publisher writing v3 and v5 turns, and the checkpoints it signs (naming both)."""
    stamper = TurnStamper()
    sim = TurnRuntimeSimulator(5, schema_versions=(3, 5), concurrent_sessions=4)
    out = []
    for event in sim.events(36):
        stamper.stamp(event)
        value = SingleObjectSerializer(CATALOG.version(event["verdicts"]["schema_version"]))(event)
        stamper.commit(event, value)
        out.append(Stamped(event["session_id"].encode(), value, dict(event)))
    fps = (CATALOG.version(3).fingerprint, CATALOG.version(5).fingerprint)
    return out, checkpoints_of(out, max_turns=7, schemas=fps)


EVENTS, WRITTEN = _signed_run()
STREAMS = {stream_of(s.event) for s in EVENTS}


def crafted(version: int, how: str) -> str:
    """A writer schema with the layout of ``version`` and another meaning (or name)."""
    raw = json.loads(CATALOG.version(version).schema_json)
    if how == "rename":
        raw["name"] = "TurnEventX"
    else:  # the path's symbols swapped: MAIN reads as STUB
        for f in raw["fields"]:
            if f["name"] == "path":
                f["type"]["symbols"] = list(reversed(f["type"]["symbols"]))
    return json.dumps(raw)


def test_an_honest_run_of_v3_and_v5_is_signed() -> None:
    report = judge(EVENTS, WRITTEN)
    assert set(status(report).values()) == {"signed"}
    assert report.findings() == []


@SLOW
@given(
    st.integers(0, len(EVENTS) - 1),
    st.sampled_from([3, 4, 5]),
    st.sampled_from(["rename", "swap", "shipped"]),
)
def test_any_turn_reframed_under_any_writer_schema_is_caught(
    index: int, version: int, how: str
) -> None:
    original = EVENTS[index]
    written = original.event["verdicts"]["schema_version"]
    if how == "shipped":
        fp, resolver = CATALOG.version(version).fingerprint, None
    else:
        text = crafted(written, how)
        fp = schema_from_json(text, name="turn_event", version=-1).fingerprint

        def resolver(asked: bytes, text: str = text, fp: bytes = fp) -> str | None:
            return text if asked == fp else None

    if fp == CATALOG.version(written).fingerprint:
        return  # the turn's own schema: no re-framing
    reframed = single_object_header(fp) + original.value[10:]
    decode = TurnEventDeserializer(CATALOG, resolver=resolver)
    events = [*EVENTS[:index], dataclasses.replace(original, value=reframed), *EVENTS[index + 1 :]]
    verifiers: list[Verifier] = []
    report = judge(events, WRITTEN, decode=decode, verifiers=verifiers)
    whole = VerifyReport(RANGE, verifiers[0], trust=report)
    assert not whole.ok
    # Re-framed under a schema that does not resolve (another layout, another record
    # name) it does not decode (the verifier's own finding); otherwise it is forged.
    target = stream_of(original.event)
    if not verifiers[0].undecodable:
        assert status(report)[target] == "forged"
        assert "writer schema" in " ".join(f.detail for f in report.findings())


@SLOW
@given(st.integers(1, len(EVENTS)), st.booleans())
def test_any_prefix_deleted_is_found_unless_retention_explains_it(
    cut: int, retention_explains: bool
) -> None:
    now = int(time.time() * 1000)
    # Checkpoints just signed; retention.ms a week, or a millisecond (everything expired).
    removal = Removal(now, 1 if retention_explains else 7 * 86_400_000, moved=True, whole=True)
    report = judge(EVENTS, WRITTEN, removal=removal, log_start=cut)
    lost = {s for s, v in status(report).items() if v in ("truncated", "missing")}
    if retention_explains:
        assert not lost
        assert report.findings() == []
    else:
        # Every stream with a signed position before the cut is accounted for.
        cut_streams = {stream_of(s.event) for s in EVENTS[:cut]}
        assert lost == cut_streams
        assert {f.kind for f in report.findings()} <= {"truncated", "missing"}


@SLOW
@given(st.integers(0, len(EVENTS) - 1))
def test_any_suffix_deleted_is_truncated_or_missing(keep: int) -> None:
    report = judge(EVENTS[:keep], WRITTEN)
    gone = {stream_of(s.event) for s in EVENTS[keep:]}
    assert {s for s, v in status(report).items() if v != "signed"} == gone
    assert {f.kind for f in report.findings()} <= {"truncated", "missing"}
    assert len(report.findings()) == len(gone)


@SLOW
@given(
    st.sampled_from(sorted(STREAMS)),
    st.sampled_from([1, 2, 3, 4, 5]),
    st.sampled_from(["own producer", "new producer"]),
    st.integers(0, 12),
)
def test_any_v1_to_v5_turn_written_into_a_signed_session_fails_verify(
    stream: tuple[str, str], version: int, whose: str, position: int
) -> None:
    (event,) = TurnRuntimeSimulator(position, schema_versions=(version,)).events(1)
    event = dict(event, session_id=stream[0])
    stamper = TurnStamper(producer_id=stream[1] if whose == "own producer" else None)
    stamper.stamp(event)  # type: ignore[arg-type]  # a simulator event as the publisher stamps it
    value = SingleObjectSerializer(CATALOG.version(version))(event)
    injected = Stamped(stream[0].encode(), value, event)
    verifiers: list[Verifier] = []
    report = judge([*EVENTS, injected], WRITTEN, verifiers=verifiers)
    assert not VerifyReport(RANGE, verifiers[0], trust=report).ok
    if version <= 2:  # no chain: forged in a signed session, whoever wrote it
        assert status(report)[stream_of(event)] == "forged"
    elif whose == "new producer":  # a failover is legitimate: unsigned, and a finding
        assert status(report)[stream_of(event)] == "unsigned"
        assert [f.kind for f in report.findings()] == ["unsigned"]
    else:  # its own stream: a reused position, a broken chain or a forged stream
        assert verifiers[0].findings or status(report)[stream] == "forged"


FIELDS = ["producer_id", "index", "prev", "at_ms", "final", "interval_ms", "max_turns"]


def _corrupt(c: Checkpoint, name: str, data: st.DataObject) -> Checkpoint:
    if name == "heads":
        heads = [*c.heads, StreamHead("s-x", c.producer_id, 3, "ab" * 32)]
        return dataclasses.replace(c, heads=tuple(sorted(heads, key=lambda h: h.stream)))
    if name == "schemas":
        return dataclasses.replace(c, schemas=tuple(sorted({*c.schemas, "00" * 8})))
    if name == "key_id":
        return dataclasses.replace(c, key_id="stolen")
    value: Any = getattr(c, name)
    other: Any = (
        (not value)
        if isinstance(value, bool)
        else value + data.draw(st.integers(1, 9))
        if isinstance(value, int)
        else value + "x"
    )
    return dataclasses.replace(c, **{name: other})


@SLOW
@given(
    st.integers(0, len(WRITTEN) - 1),
    st.sampled_from([*FIELDS, "heads", "schemas", "key_id"]),
    st.data(),
)
def test_any_checkpoint_field_corrupted_by_a_keyless_writer_is_a_finding_of_its_own(
    index: int, name: str, data: st.DataObject
) -> None:
    corrupted = _corrupt(WRITTEN[index], name, data)
    report = judge(EVENTS, [*WRITTEN, corrupted])
    assert set(status(report).values()) == {"signed"}  # the honest streams stay signed
    assert [f.kind for f in report.findings()] == ["invalid_checkpoint"]


def test_unsigned_streams_fail_closed_unless_the_keyring_allows_them() -> None:
    outsider = [Stamped(s.key, s.value, s.event) for s in EVENTS]  # no checkpoint at all
    assert {f.kind for f in judge(outsider, []).findings()} == {"unsigned"}
    pid = EVENTS[0].event["producer_id"]
    by_producer = dataclasses.replace(RING, allow_unsigned=(UnsignedAllowance(pid),))
    assert judge(outsider, [], by_producer).findings() == []
    # Stored times are 1 s after the epoch (the helper's): an allowance ending before
    # them does not cover them, one after does.
    early = UnsignedAllowance(until=datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC))
    late = UnsignedAllowance(until=datetime(1970, 1, 1, 0, 1, tzinfo=UTC))
    assert judge(outsider, [], dataclasses.replace(RING, allow_unsigned=(early,))).findings()
    allowed = judge(outsider, [], dataclasses.replace(RING, allow_unsigned=(late,)))
    assert allowed.findings() == []
    assert allowed.as_json()["allow_unsigned"] == [late.describe()]
