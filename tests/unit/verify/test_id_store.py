"""Verify in bounded memory: a Verifier that keeps 3 event ids (and 1 or 2 streams) in
memory and spills the rest to disk writes exactly the report of one that keeps them all,
over chained and legacy streams with every kind of fault; the spill is removed at the
end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from tests.support.faulty_ranges import Item, Message, chained, faulty_ranges, legacy, stored
from tests.unit.verify import scenario
from turnaudit.errors import ConfigurationError
from turnaudit.serialization.native import BloomFilter
from turnaudit.verify.files import reconcile_log
from turnaudit.verify.id_store import FILTER_BITS, FILTER_BITS_PER_ID, IdMemory, SpilledIds
from turnaudit.verify.report import RangeJson, VerifyReport
from turnaudit.verify.verifier import Anchors, Verifier

RANGE: RangeJson = {
    "topic": "t",
    "description": "d",
    "partitions": {},
    "from": None,
    "to": None,
    "from_log_start": True,
}
UNBOUNDED = IdMemory(event_ids=1 << 62)
TINY = IdMemory(event_ids=3, spill_batch=2)  # spills from the 4th id, to disk from the 5th
# Streams spilled too: every stream but the last seen one (written at once), or but the
# last two (the first evicted waits in the pending batch, the second writes both).
TINY_STREAMS = (
    IdMemory(event_ids=3, spill_batch=2, streams=1),
    IdMemory(event_ids=3, spill_batch=2, streams=2),
)


def verified(messages: list[Message], memory: IdMemory, anchors: Anchors) -> Verifier:
    verifier = Verifier(
        scenario.DECODE, log_start_offsets={0: 0, 1: 0}, anchors=anchors, memory=memory
    )
    for n, m in enumerate(messages):
        verifier.feed(m.partition, m.offset, m.key, m.value, 1_790_000_000_000 + n)
    return verifier


def report(verifier: Verifier, log: Path, memory: IdMemory = UNBOUNDED) -> dict[str, Any]:
    made = VerifyReport(RANGE, verifier)
    made.log = reconcile_log(log, verifier.event_ids, memory)
    document: dict[str, Any] = dict(made.as_json())
    document["human"] = made.human()
    document["turn_ids"] = sorted(verifier.event_ids)
    return document


def log_file(path: Path, verifier: Verifier, stride: int) -> Path:
    """Every ``stride``-th turn of the range logged (the first twice), and another id."""
    ids = sorted(verifier.event_ids)[::stride]
    lines = [*ids, *ids[:1], "not-in-the-range"]
    path.write_text("".join(f'{{"event": "turn", "event_id": "{i}"}}\n' for i in lines))
    return path


class TestSpilledVerifierIsExact:
    @settings(max_examples=200, deadline=None)
    @given(items=faulty_ranges(), stride=st.integers(1, 3), anchored=st.booleans())
    def test_three_ids_in_memory_give_the_unbounded_report(
        self,
        tmp_path_factory: pytest.TempPathFactory,
        items: list[Item],
        stride: int,
        anchored: bool,
    ) -> None:
        self.check_bounded_against_unbounded(tmp_path_factory, items, stride, anchored, TINY)

    @settings(max_examples=300, deadline=None)
    @given(
        items=faulty_ranges(),
        stride=st.integers(1, 3),
        anchored=st.booleans(),
        memory=st.sampled_from(TINY_STREAMS),
    )
    def test_one_or_two_streams_in_memory_give_the_unbounded_report(
        self,
        tmp_path_factory: pytest.TempPathFactory,
        items: list[Item],
        stride: int,
        anchored: bool,
        memory: IdMemory,
    ) -> None:
        """Streams pushed out of memory and brought back, with their gaps, claims and
        heads, over every fault: the same report, heads, counts and lost positions."""
        tiny = self.check_bounded_against_unbounded(
            tmp_path_factory, items, stride, anchored, memory
        )
        assert tiny.tracker.streams_in_memory() <= memory.streams

    @staticmethod
    def check_bounded_against_unbounded(
        tmp_path_factory: pytest.TempPathFactory,
        items: list[Item],
        stride: int,
        anchored: bool,
        memory: IdMemory,
    ) -> Verifier:
        messages = stored(items)
        clean = stored([i for i in items if i.again is None])
        anchors: Anchors = {}
        if anchored:
            with verified(clean, UNBOUNDED, {}) as first:
                anchors = {
                    (h["session_id"], h["producer_id"]): (h["position"], h["hash"])
                    for h in first.heads()
                }
        tmp = tmp_path_factory.mktemp("log")
        with (
            verified(messages, UNBOUNDED, anchors) as exact,
            verified(messages, memory, anchors) as tiny,
        ):
            log = log_file(tmp / "turns.jsonl", exact, stride)
            expected = report(exact, log)
            note(
                f"{len(messages)} messages, {exact.counts.turns} turns; "
                f"{sorted(expected['unexplained_by_kind'])}"
            )
            assert report(tiny, log, memory) == expected  # the logged ids spilled too
            assert tiny.heads() == exact.heads()
            assert tiny.tracker.heads() == exact.tracker.heads()
            assert tiny.tracker.last_positions() == exact.tracker.last_positions()
            assert tiny.tracker.missing() == exact.tracker.missing()
            assert tiny.tracker.untracked_missing() == exact.tracker.untracked_missing()
            assert tiny.tracker.currently_missing == exact.tracker.currently_missing
            assert len(tiny.tracker) == len(exact.tracker)
            for stream in exact.tracker.last_positions():
                assert tiny.tracker.head(*stream) == exact.tracker.head(*stream)
            assert exact.spill_file is None
            if memory == TINY:
                # Past memory and the pending batch, the ids were on disk, looked up there.
                assert (tiny.spill_file is not None) == (tiny.tracker.new_turns > 4)
        return tiny

    def test_an_id_reused_at_a_fresh_position_long_after_is_content_changed(self) -> None:
        events = list(chained(12, 1, 1, 1))
        reused = {**events[0], "sequence": 40}
        messages = stored(
            [Item(i, e["session_id"].encode(), e) for i, e in enumerate([*events, reused])]
        )
        with verified(messages, TINY, {}) as tiny:
            assert tiny.spill_file is not None
            assert [f.kind for f in tiny.findings] == ["content_changed"]
            assert tiny.counts.turns == 12
            assert tiny.lost() == []  # not placed: no gap opened before position 40

    def test_a_legacy_redelivery_and_duplicate_beyond_memory_are_not_new_turns(self) -> None:
        events = legacy(1, 10)
        items = [Item(i, e["session_id"].encode(), e) for i, e in enumerate(events)]
        items += [Item(20, items[0].key, events[0], again=0), Item(21, items[1].key, events[1])]
        with verified(stored(items), TINY, {}) as tiny:
            assert tiny.counts.turns == 10
            assert tiny.redeliveries == 1
            assert len(tiny.duplicates) == 1
            assert tiny.findings == []


class TestSpillFile:
    def test_the_spill_file_is_removed_at_the_end(self, tmp_path: Path) -> None:
        messages = stored(
            [Item(i, e["session_id"].encode(), e) for i, e in enumerate(chained(20, 2, 1, 2))]
        )
        memory = IdMemory(event_ids=3, spill_dir=tmp_path, spill_batch=2)
        with verified(messages, memory, {}) as verifier:
            spill = verifier.spill_file
            assert spill is not None
            assert spill.is_dir()
            assert any(spill.iterdir())  # the run files
            assert spill.parent == tmp_path
            assert len(verifier.event_ids) == 20
        assert not spill.exists()
        assert list(tmp_path.iterdir()) == []
        with pytest.raises(ValueError, match="removed"):
            "event-0-0" in verifier.event_ids  # noqa: B015 -- the lookup is what raises

    def test_the_spill_file_is_removed_when_verify_fails(self, tmp_path: Path) -> None:
        memory = IdMemory(event_ids=1, spill_dir=tmp_path, spill_batch=1)
        spills: list[Path | None] = []

        def fail_midway() -> None:
            with Verifier(scenario.DECODE, memory=memory) as verifier:
                for m in stored(
                    [
                        Item(i, e["session_id"].encode(), e)
                        for i, e in enumerate(chained(5, 3, 1, 1))
                    ]
                ):
                    verifier.feed(m.partition, m.offset, m.key, m.value)
                spills.append(verifier.spill_file)
                assert list(tmp_path.iterdir()) != []
                raise RuntimeError("broker gone")

        with pytest.raises(RuntimeError, match="broker gone"):
            fail_midway()
        assert spills[0] is not None
        assert not spills[0].exists()
        assert list(tmp_path.iterdir()) == []

    def test_a_range_within_memory_writes_no_file(self, tmp_path: Path) -> None:
        messages = stored(
            [Item(i, e["session_id"].encode(), e) for i, e in enumerate(chained(10, 2, 1, 2))]
        )
        with verified(messages, IdMemory(event_ids=10, spill_dir=tmp_path), {}) as verifier:
            assert verifier.spill_file is None
        assert list(tmp_path.iterdir()) == []

    def test_logged_ids_beyond_memory_are_counted_in_a_file_removed_after(
        self,
        tmp_path: Path,
    ) -> None:
        turns = {f"t-{n:02}" for n in range(30)}
        logged = [f"t-{n:02}" for n in range(0, 30, 2)] * 2 + ["other-1", "other-2"]
        log = tmp_path / "turns.jsonl"
        log.write_text("".join(f'{{"event": "turn", "event_id": "{i}"}}\n' for i in logged))
        spills = tmp_path / "spills"
        spills.mkdir()
        found = reconcile_log(log, turns, IdMemory(event_ids=2, spill_dir=spills, spill_batch=3))
        assert (found.lines, found.distinct, found.repeated_lines) == (32, 17, 15)
        assert found.not_logged_count == 15
        assert found.not_logged == [f"t-{n:02}" for n in range(1, 30, 2)][: len(found.not_logged)]
        assert found.outside_range == 2
        assert list(spills.iterdir()) == []

    def test_spilled_ids_are_recalled_from_the_batch_and_the_file(self) -> None:
        spilled = SpilledIds(batch=3)
        for n in range(7):
            spilled.keep(f"id-{n}", (f"{n:016x}", n % 2, n))
        assert spilled.path is not None  # two batches written, one id pending
        assert [spilled.recall(f"id-{n}") for n in (0, 6)] == [
            ("0" * 16, 0, 0),
            ("0" * 15 + "6", 0, 6),
        ]
        assert spilled.recall("id-7") is None
        assert sorted(spilled) == sorted(f"id-{n}" for n in range(7))
        assert len(spilled) == 7
        spilled.close()
        spilled.close()  # idempotent

    @pytest.mark.parametrize(("ids", "batch"), [(0, 1), (5, 0), (-1, 10)])
    def test_a_bound_below_one_is_a_configuration_error(self, ids: int, batch: int) -> None:
        with pytest.raises(ConfigurationError, match="1 or more"):
            IdMemory(event_ids=ids, spill_batch=batch)


@settings(max_examples=60, deadline=None)
@given(
    st.sets(st.text(max_size=40), max_size=300),
    st.lists(st.text(max_size=40), max_size=300),
    st.sampled_from([64, 128, 1024, 1 << 16]),
    st.booleans(),
)
def test_the_spill_filter_never_says_never_for_an_id_it_was_given(
    added: set[str], others: list[str], bits: int, batched: bool
) -> None:
    """No false negative, however small (and crowded) the filter, added one by one or in
    a batch: a spilled id is always looked up. A string never added is answered "never"
    or "maybe", both safe."""
    spill_filter = BloomFilter(bits)
    if batched:
        spill_filter.add_many(added)
    for text in added if not batched else ():
        spill_filter.add(text)
    assert all(spill_filter.might_hold(text) for text in added)
    if bits >= 1 << 16 and len(added) <= 300:
        # Sparse enough that strings never added are mostly answered "never".
        absent = [t for t in others if t not in added]
        assert sum(spill_filter.might_hold(t) for t in absent) <= max(3, len(absent) // 10)


def test_a_spilled_store_answers_recall_exactly_through_its_filter(tmp_path: Path) -> None:
    store = SpilledIds(tmp_path, batch=4)
    kept = {f"id-{i}": (f"{i:016x}", 0, i) for i in range(40)}
    for event_id, seen in kept.items():
        store.keep(event_id, seen)
    store.flush()
    try:
        for event_id, seen in kept.items():
            assert store.recall(event_id) == seen
        assert all(store.recall(f"never-{i}") is None for i in range(1000))
    finally:
        store.close()


@pytest.mark.parametrize("bits", [0, 7, 8, 12, 32, 100, 1000])
def test_a_spill_filter_below_64_bits_or_not_a_power_of_two_is_refused(bits: int) -> None:
    with pytest.raises(ValueError, match="power of two"):
        BloomFilter(bits)


@given(st.integers(-10, 1 << 40))
def test_the_spilled_ids_filter_is_a_power_of_two_with_room_for_the_range(
    expected: int,
) -> None:
    """Any range: blocks of a power of two, never below the fixed filter, 10 bits an id
    at least (and under twice that past the fixed size)."""
    bits = IdMemory(expected_ids=expected).filter_bits
    assert bits & (bits - 1) == 0
    assert bits >= FILTER_BITS
    assert bits >= FILTER_BITS_PER_ID * expected
    assert bits == FILTER_BITS or bits < 2 * FILTER_BITS_PER_ID * expected
