"""The spill's sorted runs (``SpilledIds`` over the native ``SortedRunStore``) against a
plain dict: any ids, kept one by one or in batches of any size (so runs are written
and merged at every level), repeated or not, answer ``recall``, ``len`` and iteration
exactly as the first copy kept says; ``export`` then ``absorb`` find exactly the ids
two stores share and keep the copy read first."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.smallfs import fill_disk, small_filesystem
from turnaudit.identity import Seen
from turnaudit.verify.id_store import SpilledIds

ids = st.text(min_size=0, max_size=12)
seens = st.tuples(
    st.text(alphabet="0123456789abcdef?", max_size=64),
    st.none() | st.integers(-(2**63), 2**63 - 1),
    st.none() | st.integers(-(2**63), 2**63 - 1),
)
kept_lists = st.lists(st.tuples(ids, seens), max_size=300)


def model(kept: list[tuple[str, Seen]]) -> dict[str, Seen]:
    first: dict[str, Seen] = {}
    for event_id, seen in kept:
        first.setdefault(event_id, seen)
    return first


@settings(max_examples=80, deadline=None)
@given(
    kept=kept_lists,
    batch=st.integers(1, 40),
    chunk=st.integers(1, 50),
    probes=st.lists(ids, max_size=50),
)
def test_the_runs_answer_as_the_first_copy_kept(
    tmp_path_factory: pytest.TempPathFactory,
    kept: list[tuple[str, Seen]],
    batch: int,
    chunk: int,
    probes: list[str],
) -> None:
    spill_dir = tmp_path_factory.mktemp("spill")
    store = SpilledIds(spill_dir, batch=batch)
    try:
        for start in range(0, len(kept), chunk):
            part = kept[start : start + chunk]
            if chunk % 2:
                store.keep_many(part)
            else:
                for event_id, seen in part:
                    store.keep(event_id, seen)
        expected = model(kept)
        for event_id in [*expected, *probes]:
            assert store.recall(event_id) == expected.get(event_id), event_id
        assert len(store) == len(expected)
        assert list(store) == sorted(expected, key=lambda i: i.encode())
        # Listing merged the runs into one: the answers stay the same.
        for event_id in [*expected, *probes]:
            assert store.recall(event_id) == expected.get(event_id), event_id
    finally:
        store.close()
    assert list(spill_dir.iterdir()) == []


def place(seen: Seen) -> tuple[int, int]:
    return (seen[1] or 0, seen[2] or 0)


@settings(max_examples=60, deadline=None)
@given(
    mine=kept_lists,
    theirs=kept_lists,
    batch=st.integers(1, 30),
    remembered=st.dictionaries(ids, seens, max_size=40),
)
def test_export_then_absorb_finds_every_shared_id_once(
    tmp_path_factory: pytest.TempPathFactory,
    mine: list[tuple[str, Seen]],
    theirs: list[tuple[str, Seen]],
    batch: int,
    remembered: dict[str, Seen],
) -> None:
    spill_dir = tmp_path_factory.mktemp("absorb")
    other = SpilledIds(spill_dir, batch=batch)
    other.keep_many(theirs)
    handed = spill_dir / "handed.ids"
    other.export(remembered, handed)  # the ids still in a tracker's memory go too
    theirs_all = model([*theirs, *((k, v) for k, v in remembered.items())])
    store = SpilledIds(spill_dir, batch=batch)
    try:
        store.keep_many(mine)
        mine_all = model(mine)
        repeats = store.absorb(handed)
        shared = set(mine_all) & set(theirs_all)
        assert sorted(r.event_id for r in repeats) == sorted(shared)
        for repeat in repeats:
            pair = sorted((mine_all[repeat.event_id], theirs_all[repeat.event_id]), key=place)
            assert place(repeat.first) == place(pair[0])
            assert {repeat.first, repeat.repeat} == set(pair)
        merged = {**theirs_all, **mine_all}
        for event_id in shared:
            merged[event_id] = min((mine_all[event_id], theirs_all[event_id]), key=place)
        assert len(store) == len(merged)
        for event_id, seen in merged.items():
            got = store.recall(event_id)
            assert got is not None
            assert place(got) == place(seen)
    finally:
        store.close()


def test_a_store_closed_refuses_every_use(tmp_path: Path) -> None:
    store = SpilledIds(tmp_path, batch=2)
    store.keep_many([("a", ("0" * 16, 0, 1)), ("b", ("1" * 16, 0, 2))])
    store.close()
    store.close()  # idempotent
    for use in (
        lambda: store.recall("a"),
        lambda: len(store),
        lambda: list(store),
        lambda: store.keep("c", ("2" * 16, 0, 3)),
    ):
        with pytest.raises(ValueError, match="removed"):
            use()
    assert list(tmp_path.iterdir()) == []


def test_a_really_full_disk_is_an_os_error_and_what_was_written_stays(tmp_path: Path) -> None:
    """A run that cannot be written raises ENOSPC (verify fails, saying why); the runs
    written before answer as before, and with room again the same ids go on."""
    with small_filesystem(tmp_path / "small", 1024) as mount_point:
        store = SpilledIds(mount_point, batch=100)
        try:
            first = [(f"id-{n:05}", (f"{n:016x}", 0, n)) for n in range(300)]
            store.keep_many(first)
            filler = fill_disk(mount_point)
            rest = [(f"more-{n:05}-{'x' * 200}", (f"{n:016x}", 1, n)) for n in range(600)]
            refused: OSError | None = None
            for start in range(0, len(rest), 100):
                try:
                    store.keep_many(rest[start : start + 100])
                except OSError as exc:
                    refused = exc
                    break
            assert refused is not None
            assert refused.errno == errno.ENOSPC
            assert all(store.recall(i) == seen for i, seen in first)
            filler.unlink()
            store.keep_many(rest)
            assert all(store.recall(i) == seen for i, seen in [*first, *rest])
            assert len(store) == len(first) + len(rest)
        finally:
            store.close()


@settings(max_examples=60, deadline=None)
@given(
    parts=st.lists(kept_lists, min_size=1, max_size=4),
    batch=st.integers(1, 30),
    disjoint=st.booleans(),
    probes=st.lists(ids, max_size=30),
    filled=st.booleans(),
)
def test_absorbing_files_together_answers_as_absorbing_them_one_by_one(
    tmp_path_factory: pytest.TempPathFactory,
    *,
    parts: list[list[tuple[str, Seen]]],
    batch: int,
    disjoint: bool,
    probes: list[str],
    filled: bool,
) -> None:
    if disjoint:  # as verify's jobs hand them over: no id in two files (taken over)
        parts = [
            [(f"{n}:{event_id}", seen) for event_id, seen in part] for n, part in enumerate(parts)
        ]
    spill_dir = tmp_path_factory.mktemp("absorb-all")

    def handed(tag: str) -> list[Path]:
        files = []
        for n, part in enumerate(parts):
            other = SpilledIds(spill_dir, batch=batch)
            other.keep_many(part)
            files.append(spill_dir / f"{tag}-{n}.ids")
            other.export({}, files[-1])
        return files

    one_by_one, together = SpilledIds(spill_dir, batch=batch), SpilledIds(spill_dir, batch=batch)
    try:
        if filled:  # a store holding ids already merges, whatever the files hold
            for store in (one_by_one, together):
                store.keep_many([("held", ("ab", 9, 9))])
        expected = [r for path in handed("a") for r in one_by_one.absorb(path)]
        got = together.absorb_all(handed("b"))
        assert got == expected
        assert len(together) == len(one_by_one)
        for event_id in [*(i for part in parts for i, _ in part), *probes]:
            assert together.recall(event_id) == one_by_one.recall(event_id), event_id
        assert list(together) == list(one_by_one)
    finally:
        one_by_one.close()
        together.close()
