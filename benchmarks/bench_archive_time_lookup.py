"""The archive's time lookup (``turnaudit.archive.time_range.first_at_or_after``): segments
read and time per lookup in a local archive of N segments, against decoding every segment
(what a lookup without the binary search would cost at worst).

    .venv/bin/python benchmarks/bench_archive_time_lookup.py [--segments 100] [--records 2000]
        [--lookups 50]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from turnaudit.archive.segments import ArchivedRecord, SegmentName, decode_segment, encode_segment
from turnaudit.archive.store import LocalArchive
from turnaudit.archive.time_range import SegmentTimes, first_at_or_after

TOPIC = "t.turn-events"
START_MS = 1_700_000_000_000
STEP_MS = 100


def build(root: Path, segments: int, per: int) -> tuple[LocalArchive, list[SegmentName]]:
    archive = LocalArchive(root, durable=False)
    names = []
    for s in range(segments):
        first = s * per
        records = [
            ArchivedRecord(TOPIC, 0, o, START_MS + o * STEP_MS, 2, b"k", b"v" * 600)
            for o in range(first, first + per)
        ]
        name = SegmentName(TOPIC, 0, first, first + per - 1)
        archive.write_once(name.path(), encode_segment(records))
        names.append(name)
    return archive, names


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--segments", type=int, default=100)
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--lookups", type=int, default=50)
    args = parser.parse_args()
    total = args.segments * args.records
    with tempfile.TemporaryDirectory() as folder:
        archive, names = build(Path(folder), args.segments, args.records)
        size = sum(f.stat().st_size for f in Path(folder).rglob("*.avro"))
        reads, took = [], []
        for k in range(args.lookups):
            times = SegmentTimes(archive, names)
            moment = START_MS + (k * 7919 % total) * STEP_MS + STEP_MS // 2
            began = time.perf_counter()
            first_at_or_after(times, moment)
            took.append(time.perf_counter() - began)
            reads.append(times.reads)
        began = time.perf_counter()
        for name in names:
            for _ in decode_segment(archive.read(name.path()) or b""):
                pass
        whole = time.perf_counter() - began
    print(
        f"{args.segments} segments x {args.records} records ({size / 1e6:.1f} MB): per lookup "
        f"{max(reads)} segments read at most (mean {statistics.mean(reads):.1f}), "
        f"median {statistics.median(took) * 1000:.1f} ms; every segment decoded: "
        f"{whole * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main()
