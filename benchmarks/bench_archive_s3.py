"""The archiver into S3 against the archiver into a directory, and the bare consume loop.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_archive_s3.py --events 20000 --rounds 5

The same N turns (simulated, schema v5, 3 partitions) read by each row in a fresh group, the
rows alternated every round: the raw consume loop (bench_archive.py's), the archiver service
(codec deflate) into a local directory (segments fsynced and linked), and into
``s3://bucket/prefix`` on S3Proxy 3.0.0 on loopback (tests/support/s3_server.py: its
filesystem-nio2 backend in a temporary folder; every segment and digest a conditional put
with its Content-MD5). Printed: events/s and the ratio to the raw loop within each round,
median (min-max).

Uses KAFKA_BOOTSTRAP_SERVERS, or starts the project's local broker; S3Proxy's jars come
from ``make s3proxy``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _broker import benchmark_cluster
from bench_archive import _spread, archiver, publish, raw_loop
from bench_publish import quiet_logs

from tests.support.s3_server import s3proxy
from turnaudit.kafka.offsets import end_offsets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    quiet_logs()
    with (
        tempfile.TemporaryDirectory(prefix="turnaudit-bench-archive-s3-") as work,
        s3proxy(Path(work) / "s3proxy") as server,
        benchmark_cluster(partitions=3) as (settings, _),
    ):
        os.environ.update(server.env())  # the archiver's S3 settings and credentials
        bucket = server.new_bucket()
        publish(settings, args.events, Path(work) / "spool")
        end = end_offsets(settings, settings.topics.turn_events)
        total = sum(end.values())
        rows: dict[str, list[float]] = {"raw consume": [], "directory": [], "S3": []}
        ratios: dict[str, list[float]] = {"directory": [], "S3": []}
        for n in range(args.rounds):
            raw, _ = raw_loop(settings, total)
            rows["raw consume"].append(raw)
            for store in ("directory", "S3") if n % 2 == 0 else ("S3", "directory"):
                where = f"s3://{bucket}/round-{n}" if store == "S3" else f"{work}/archive-{n}"
                rate = archiver(settings, end, "deflate", where)
                rows[store].append(rate)
                ratios[store].append(rate / raw)
        print(f"{total:,} turns, {args.rounds} rounds; median (min-max)")
        print("| row | events/s | / raw consume |")
        print("| --- | --- | --- |")
        for row, values in rows.items():
            ratio = ratios.get(row)
            shown = "1" if ratio is None else _spread(ratio, "{:.2f}x")
            print(f"| {row} | {_spread(values, '{:,.0f}')} | {shown} |")


if __name__ == "__main__":
    main()
