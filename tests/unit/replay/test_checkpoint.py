"""The checkpoint file: a round trip keeps every field; a torn, foreign or other-format
file is refused with one line, and so is a checkpoint written by other arguments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnaudit.errors import ConfigurationError
from turnaudit.replay.checkpoint import CHECKPOINT_FORMAT, ReplayCheckpoint
from turnaudit.replay.order import BLOCK_MESSAGES, ORDER
from turnaudit.replay.run import _recorded

offsets = st.integers(0, 2**40)
counts = st.integers(0, 10**9)


@st.composite
def checkpoints(draw: st.DrawFn) -> ReplayCheckpoint:
    ids = draw(st.lists(st.integers(0, 200), min_size=0, max_size=6, unique=True))
    start = {p: draw(offsets) for p in ids}
    end = {p: start[p] + draw(st.integers(0, 10**6)) for p in ids}
    nxt = {p: draw(st.integers(start[p], end[p])) for p in ids}
    window = draw(st.none() | st.tuples(offsets, offsets))
    return ReplayCheckpoint(
        fingerprint=draw(st.text("0123456789abcdef", min_size=64, max_size=64)),
        topic=draw(st.text(min_size=1, max_size=30)),
        start=start,
        end=end,
        next=nxt,
        output_bytes=draw(counts),
        events=draw(counts),
        undecodable=draw(counts),
        complete=draw(st.booleans()),
        cursor=draw(st.none() | st.sampled_from(ids)) if ids else None,
        taken=draw(st.integers(0, BLOCK_MESSAGES - 1)),
        window=window,
        outside_window=draw(counts),
    )


@settings(max_examples=100, deadline=None)
@given(checkpoints())
def test_a_saved_checkpoint_loads_as_it_was(state: ReplayCheckpoint) -> None:
    assert ReplayCheckpoint.from_json(json.loads(json.dumps(state.as_json()))) == state


def test_save_replaces_the_file_and_load_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl.replay-checkpoint.json"
    state = ReplayCheckpoint(
        "f" * 64,
        "t",
        {0: 0, 3: 5},
        {0: 10, 3: 9},
        {0: 4, 3: 5},
        120,
        4,
        1,
        cursor=0,
        taken=4,
        window=(1, 2),
        outside_window=3,
    )
    state.save(path)
    state.events = 9
    state.save(path)
    assert ReplayCheckpoint.load(path) == state
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary left behind
    written = json.loads(path.read_text("utf-8"))
    assert written["format"] == CHECKPOINT_FORMAT
    assert (written["order"], written["block"]) == (ORDER, BLOCK_MESSAGES)
    assert written["start"] == {"0": 0, "3": 5}  # partitions as JSON keys them


@settings(max_examples=100, deadline=None)
@given(state=checkpoints(), data=st.data())
def test_a_torn_checkpoint_is_refused(
    state: ReplayCheckpoint, data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
) -> None:
    text = json.dumps(state.as_json(), indent=2)
    cut = data.draw(st.integers(0, text.rindex("}") - 1))  # stopped before the last brace
    path = tmp_path_factory.mktemp("torn") / "c.json"
    path.write_text(text[:cut], encoding="utf-8")
    with pytest.raises(ConfigurationError, match="is not a replay checkpoint"):
        ReplayCheckpoint.load(path)


def _valid() -> dict[str, object]:
    state = ReplayCheckpoint("f" * 64, "t", {0: 0}, {0: 10}, {0: 4}, 1, 1, 0)
    return dict(state.as_json())


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[]",
        "null",
        '"a checkpoint"',
        '{"format": 1}',
        json.dumps({**_valid(), "format": CHECKPOINT_FORMAT + 1}),
        json.dumps({k: v for k, v in _valid().items() if k != "next"}),
        json.dumps({**_valid(), "start": {"zero": 0}}),
        json.dumps({**_valid(), "window_ms": [1]}),
        json.dumps({**_valid(), "taken": "many"}),
        json.dumps({**_valid(), "end": [10]}),
    ],
)
def test_a_file_that_is_not_a_checkpoint_is_refused(text: str, tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigurationError, match=r"is not a replay checkpoint.*remove it"):
        ReplayCheckpoint.load(path)


def test_a_missing_checkpoint_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="is not a replay checkpoint"):
        ReplayCheckpoint.load(tmp_path / "absent.json")


def test_a_checkpoint_of_other_arguments_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    ReplayCheckpoint("a" * 64, "t", {0: 0}, {0: 10}, {0: 4}, 1, 1, 0).save(path)
    assert _recorded(path, "a" * 64).next == {0: 4}
    with pytest.raises(ConfigurationError, match="belongs to a replay with other arguments"):
        _recorded(path, "b" * 64)


def test_progress_counts_the_broker_range() -> None:
    state = ReplayCheckpoint("f", "t", {0: 0, 1: 10}, {0: 50, 1: 60}, {0: 20}, 0, 0, 0)
    assert (state.total, state.read) == (100, 20)
