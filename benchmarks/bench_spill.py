"""Verify's spill of event ids beyond memory: the sorted runs (``SpilledIds`` over the
native ``SortedRunStore``) against the design they replaced, one SQLite B-tree keyed by
the id (``WITHOUT ROWID``, batches of 10,000 inserted in key order in one transaction,
a 16 MiB page cache), in the same run.

Each round keeps ``--ids`` random 32-hex-digit ids (as the stream tracker hands them:
10,000 at a time) and then recalls 20,000 of them and 20,000 never kept; rounds rotate
which store goes first. Printed: µs per id kept and per recall, min/median/max over
the rounds, and the ratio SQLite / runs per round.

    .venv/bin/python benchmarks/bench_spill.py [--ids 2000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from turnaudit.identity import Seen
from turnaudit.verify.id_store import SPILL_BATCH, SpilledIds

Batch = list[tuple[str, Seen]]


class SqliteSpill:
    """The earlier spill: one table keyed by the event id."""

    def __init__(self, directory: Path) -> None:
        self.db = sqlite3.connect(str(directory / "ids.sqlite3"))
        for pragma in ("journal_mode = OFF", "synchronous = OFF", "cache_size = -16384"):
            self.db.execute(f"PRAGMA {pragma}")
        self.db.execute(
            "CREATE TABLE seen (event_id TEXT PRIMARY KEY, hash TEXT NOT NULL, "
            "partition INTEGER, offset INTEGER) WITHOUT ROWID"
        )
        self.lookup = self.db.cursor()

    def keep_many(self, batch: Batch) -> None:
        with self.db:
            self.db.executemany(
                "INSERT OR IGNORE INTO seen VALUES (?, ?, ?, ?)",
                [(i, *seen) for i, seen in sorted(batch)],
            )

    def recall(self, event_id: str) -> Seen | None:
        row = self.lookup.execute(
            "SELECT hash, partition, offset FROM seen WHERE event_id = ?", (event_id,)
        ).fetchone()
        return None if row is None else (str(row[0]), row[1], row[2])

    def close(self) -> None:
        self.db.close()


class RunSpill:
    def __init__(self, directory: Path) -> None:
        self.store = SpilledIds(directory)

    def keep_many(self, batch: Batch) -> None:
        self.store.keep_many(batch)

    def recall(self, event_id: str) -> Seen | None:
        return self.store.recall(event_id)

    def close(self) -> None:
        self.store.close()


STORES: dict[str, Callable[[Path], SqliteSpill | RunSpill]] = {
    "sqlite b-tree": SqliteSpill,
    "sorted runs": RunSpill,
}


def one_round(name: str, batches: list[Batch], probes: list[str]) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="bench-spill-") as directory:
        store = STORES[name](Path(directory))
        began = time.perf_counter()
        for batch in batches:
            store.keep_many(batch)
        kept = time.perf_counter() - began
        began = time.perf_counter()
        found = sum(store.recall(i) is not None for i in probes)
        recalled = time.perf_counter() - began
        store.close()
    assert found == len(probes) // 2, (name, found)
    ids = sum(len(b) for b in batches)
    return kept / ids * 1e6, recalled / len(probes) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ids", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rng = random.Random(7)
    ids = [uuid.UUID(int=rng.getrandbits(128)).hex for _ in range(args.ids)]
    seen = [(f"{rng.getrandbits(64):016x}", n % 4, n) for n in range(args.ids)]
    pairs = list(zip(ids, seen, strict=True))
    batches = [pairs[i : i + SPILL_BATCH] for i in range(0, len(pairs), SPILL_BATCH)]
    probes = rng.sample(ids, 20_000) + [uuid.uuid4().hex for _ in range(20_000)]
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in STORES}
    names = list(STORES)
    for r in range(args.rounds):
        for name in names[r % 2 :] + names[: r % 2]:
            results[name].append(one_round(name, batches, probes))
    print(f"{args.ids:,} ids kept in batches of {SPILL_BATCH:,}, {args.rounds} rounds (rotated)")
    for name, rows in results.items():
        keep = [k for k, _ in rows]
        recall = [r for _, r in rows]
        print(
            f"{name:14} keep µs/id median {statistics.median(keep):.2f} (min {min(keep):.2f}, "
            f"max {max(keep):.2f}) | recall µs median {statistics.median(recall):.2f} "
            f"(min {min(recall):.2f}, max {max(recall):.2f})"
        )
    ratios = [
        s[0] / n[0] for s, n in zip(results["sqlite b-tree"], results["sorted runs"], strict=True)
    ]
    print(
        f"keep: sqlite / runs per round median {statistics.median(ratios):.1f}x "
        f"(min {min(ratios):.1f}, max {max(ratios):.1f})"
    )


if __name__ == "__main__":
    main()
