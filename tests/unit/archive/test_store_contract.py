"""The store contract (tests/support/store_contract.py) held by the local directory: any
objects round-trip, a name is written once (the same bytes again are no error, other bytes
are refused and the first stay), listings are complete and sorted. The same clauses run
against S3 on a real server in tests/broker/archive/test_s3_store.py."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.store_contract import CONTRACT, OBJECTS, Clause
from turnaudit.archive.store import ArchiveConflict, LocalArchive


@pytest.mark.parametrize(("clause", "check"), CONTRACT, ids=[name for name, _ in CONTRACT])
@settings(max_examples=60)
@given(objects=OBJECTS, other=st.binary(max_size=64))
def test_the_local_directory_keeps_the_store_contract(
    clause: str, check: Clause, objects: dict[str, bytes], other: bytes
) -> None:
    with tempfile.TemporaryDirectory() as root:
        check(LocalArchive(Path(root), durable=False), objects, other)


@settings(max_examples=20)
@given(first=st.binary(max_size=2000), second=st.binary(max_size=2000))
def test_two_writers_racing_for_a_name_leave_one_writers_bytes(first: bytes, second: bytes) -> None:
    """Threads write the same name at once: one wins, the other is told (False for the
    same bytes, ArchiveConflict for others), and the name holds the winner's bytes whole."""
    with tempfile.TemporaryDirectory() as root:
        archive = LocalArchive(Path(root), durable=False)
        outcomes: dict[bytes, object] = {}
        start = threading.Barrier(2)

        def write(data: bytes) -> None:
            start.wait()
            try:
                outcomes[data] = archive.write_once("t/0/segments/a.avro", data)
            except ArchiveConflict as exc:
                outcomes[data] = exc

        distinct = (b"A" + first, b"B" + second)
        threads = [threading.Thread(target=write, args=(d,)) for d in distinct]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        winners = [data for data, outcome in outcomes.items() if outcome is True]
        assert len(winners) == 1
        assert archive.read("t/0/segments/a.avro") == winners[0]
        loser = next(o for d, o in outcomes.items() if d != winners[0])
        assert isinstance(loser, ArchiveConflict)
