"""The contract every archive store keeps (``turnaudit.archive.store.ArchiveStore``), as
clauses a test runs against a store: the local directory in the unit tier
(tests/unit/archive/test_store_contract.py), S3 against a real server in the broker tier
(tests/broker/archive/test_s3_store.py).

Each clause takes an empty store and a drawn set of objects (any names of one to four
``/``-separated parts, no name a folder of another, any bytes, empty included):

* round trip: each object written reads back byte for byte; a name never written reads
  as None;
* write once: a second put of a name with the same bytes is False (a restarted archiver),
  with other bytes ``ArchiveConflict`` naming it, and the first bytes stay;
* listing: ``files`` of the root and of every folder is exactly the names under it, sorted;
  ``folders`` of every folder its direct subfolders, sorted.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import strategies as st

from turnaudit.archive.store import ArchiveConflict, ArchiveStore

# Parts of a name: the characters segment and digest names and topic names use, and more.
PART = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=1, max_size=10).filter(
    lambda part: not part.startswith(".")  # no "." or "..", nor the local store's .partial
)
NAME = st.lists(PART, min_size=1, max_size=4).map("/".join)


def _no_name_is_a_folder(objects: dict[str, bytes]) -> bool:
    return not any(other.startswith(name + "/") for name in objects for other in objects)


OBJECTS = st.dictionaries(NAME, st.binary(max_size=3000), min_size=1, max_size=8).filter(
    _no_name_is_a_folder
)


def folders_of(names: list[str]) -> set[str]:
    """Every folder some name is under ('' the root)."""
    found = {""}
    for name in names:
        parts = name.split("/")
        found.update("/".join(parts[:i]) for i in range(1, len(parts)))
    return found


def write_all(store: ArchiveStore, objects: dict[str, bytes]) -> None:
    for name, data in objects.items():
        assert store.write_once(name, data) is True


def round_trip(store: ArchiveStore, objects: dict[str, bytes], other: bytes) -> None:
    write_all(store, objects)
    for name, data in objects.items():
        assert store.read(name) == data
    unknown = "never/written/" + max(objects)
    assert store.read(unknown) is None
    assert store.read(max(objects) + "-not") is None


def write_once(store: ArchiveStore, objects: dict[str, bytes], other: bytes) -> None:
    write_all(store, objects)
    for name, data in objects.items():
        assert store.write_once(name, data) is False
        changed = other if other != data else data + b"\x00"
        with pytest.raises(ArchiveConflict, match=name):
            store.write_once(name, changed)
        assert store.read(name) == data


def listing(store: ArchiveStore, objects: dict[str, bytes], other: bytes) -> None:
    write_all(store, objects)
    names = sorted(objects)
    assert store.files() == names
    for folder in folders_of(names):
        inside = folder + "/" if folder else ""
        assert store.files(folder) == [n for n in names if n.startswith(inside)]
        direct = {n[len(inside) :].split("/")[0] for n in names if n.startswith(inside)}
        subfolders = {d for d in direct if inside + d not in objects}
        assert store.folders(folder) == sorted(subfolders)
    assert store.files("never-written") == []
    assert store.folders("never-written") == []


Clause = Callable[[ArchiveStore, dict[str, bytes], bytes], None]
CONTRACT: list[tuple[str, Clause]] = [
    ("round trip", round_trip),
    ("write once", write_once),
    ("listing", listing),
]
