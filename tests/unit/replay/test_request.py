"""What to replay and where: ``--into KIND:WHERE``, ``--partitions``, the argument digest."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from turnaudit.errors import ConfigurationError
from turnaudit.kafka.offsets import RangeSpec
from turnaudit.replay.jsonl import JsonlOutput
from turnaudit.replay.outputs import OutputContext, OutputKinds, ReplayOutput
from turnaudit.replay.request import ReplayRequest, ReplayTarget, parse_partitions


def _jsonl(context: OutputContext) -> ReplayOutput:
    return JsonlOutput(context.target.path, context.decode)


@pytest.fixture
def kinds() -> OutputKinds:
    found = OutputKinds()
    found.add("jsonl", "lines", _jsonl)
    found.add("topic", "to a topic", _jsonl, writes_file=False)
    return found


def test_a_file_target_has_its_checkpoint_beside_it(kinds: OutputKinds) -> None:
    target = ReplayTarget.parse("jsonl:out/day.jsonl", kinds)
    assert (target.kind, target.where, target.path) == (
        "jsonl",
        "out/day.jsonl",
        Path("out/day.jsonl"),
    )
    assert target.checkpoint == Path("out/day.jsonl.replay-checkpoint.json")
    assert ReplayTarget.file("jsonl", Path("out/day.jsonl")) == target


def test_a_topic_target_has_its_checkpoint_in_the_working_folder(kinds: OutputKinds) -> None:
    target = ReplayTarget.parse("topic:turn-audit.replayed", kinds)
    assert target.where == "turn-audit.replayed"
    assert target.checkpoint == Path("topic-turn-audit.replayed.replay-checkpoint.json")


def test_a_checkpoint_given_is_kept_and_where_may_hold_colons(kinds: OutputKinds) -> None:
    target = ReplayTarget.parse("jsonl:c:/x.jsonl", kinds, Path("elsewhere.json"))
    assert (target.where, target.checkpoint) == ("c:/x.jsonl", Path("elsewhere.json"))


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("jsonl", "write KIND:WHERE"),
        ("jsonl:", "write KIND:WHERE"),
        (":out.jsonl", "unknown sink kind ''"),
        ("csv:out.csv", "unknown sink kind 'csv'; choose jsonl, topic"),
    ],
)
def test_a_target_that_does_not_parse_is_refused(kinds: OutputKinds, text: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match=says):
        ReplayTarget.parse(text, kinds)


def test_a_kind_is_registered_once_and_described(kinds: OutputKinds) -> None:
    with pytest.raises(ValueError, match="registered twice"):
        kinds.add("jsonl", "again", _jsonl)
    assert kinds.names() == ["jsonl", "topic"]
    assert kinds.describe() == "jsonl:PATH (lines); topic:TOPIC (to a topic)"


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("0", (0,)),
        ("2,0", (0, 2)),
        (" 2, 0,2,", (0, 2)),
    ],
)
def test_partitions_parse_sorted_and_once(text: str, found: tuple[int, ...]) -> None:
    assert parse_partitions(text) == found


@pytest.mark.parametrize("text", ["", ",", "a", "0,x", "-1", "1,-2"])
def test_partitions_that_do_not_parse_are_refused(text: str) -> None:
    with pytest.raises(ConfigurationError, match="--partitions"):
        parse_partitions(text)


def test_the_fingerprint_is_the_arguments() -> None:
    day = RangeSpec(datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 2, tzinfo=UTC))
    jsonl = ReplayTarget.file("jsonl", Path("a.jsonl"))
    request = ReplayRequest(day)
    fingerprint = request.fingerprint("t", jsonl)
    assert len(fingerprint) == 64
    # The same arguments, the same digest (whatever the output's path: it is not one).
    assert (
        ReplayRequest(day).fingerprint("t", ReplayTarget.file("jsonl", Path("b.jsonl")))
        == fingerprint
    )
    others = [
        request.fingerprint("u", jsonl),
        request.fingerprint("t", ReplayTarget.file("logs", Path("a.jsonl"))),
        ReplayRequest(day, partitions=(0,)).fingerprint("t", jsonl),
        ReplayRequest(day, event_time=True).fingerprint("t", jsonl),
        ReplayRequest(day, event_time=True, slack=timedelta(seconds=5)).fingerprint("t", jsonl),
        ReplayRequest(RangeSpec(day.since, None)).fingerprint("t", jsonl),
        ReplayRequest(RangeSpec(to_offsets={0: 5})).fingerprint("t", jsonl),
    ]
    assert len({fingerprint, *others}) == len(others) + 1
