"""Resident memory of the stream tracker's tables: bytes per ordered stream and per
event id in memory, the native ``StreamTracker`` against ``ReferenceStreamTracker`` (the
same rules in Python), each row in a process of its own.

    .venv/bin/python benchmarks/bench_tracker_memory.py [--count 500000]

Streams: ``count`` sessions of one turn each (a new stream per message, one event id
kept). Ids: one stream of ``count`` turns, every id kept. The messages are built before
the baseline is read and stay alive while it is read again, so a row is what the
tracker holds beyond the messages. The native tracker copies what it keeps; the
reference shares the messages' strings, so its row leaves out their cost (in a real
run, where the messages go, it keeps those strings alive: its row is a lower bound).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import uuid
from pathlib import Path

from turnaudit.chain import GENESIS_HASH, chain_hash
from turnaudit.identity import StreamTracker

# The reference tracker is a test oracle (tests/support), not part of the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.reference_tracker import ReferenceStreamTracker

TRACKERS = {"native": StreamTracker, "reference": ReferenceStreamTracker}


def rss_bytes() -> int:
    for line in Path(f"/proc/{os.getpid()}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc")


def measure(tracker_name: str, table: str, count: int) -> float:
    kind = TRACKERS[tracker_name]
    if table == "streams":
        events = [
            {
                "session_id": str(uuid.uuid4()),
                "producer_id": str(uuid.uuid4()),
                "sequence": 0,
                "prev_hash": GENESIS_HASH,
                "event_id": str(uuid.uuid4()),
            }
            for _ in range(count)
        ]
        values = [str(e["event_id"]).encode() for e in events]
    else:
        events, values, prev = [], [], GENESIS_HASH
        for position in range(count):
            event_id = str(uuid.uuid4())
            events.append(
                {
                    "session_id": "s",
                    "producer_id": "p",
                    "sequence": position,
                    "prev_hash": prev,
                    "event_id": event_id,
                }
            )
            values.append(event_id.encode())
            prev = chain_hash(values[-1])
    keep_ids = 1 if table == "streams" else count + 1
    base = rss_bytes()
    tracker = kind(max_event_ids=keep_ids, max_streams=1 << 62, max_missing=1 << 62)
    for offset, (event, value) in enumerate(zip(events, values, strict=True)):
        tracker.observe(event, value, partition=0, offset=offset)
    held = (rss_bytes() - base) / count
    assert len(events) == count  # alive until here
    return held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=500_000)
    parser.add_argument("--child", nargs=2, metavar=("TRACKER", "TABLE"))
    args = parser.parse_args()
    if args.child:
        print(f"{measure(args.child[0], args.child[1], args.count):.0f}")
        return
    print(f"{args.count:,} of each; bytes of resident memory each (one process per row)")
    for table in ("streams", "ids"):
        for name in TRACKERS:
            out = subprocess.run(
                [sys.executable, __file__, "--count", str(args.count), "--child", name, table],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
            print(f"  {table:<8} {name:<10} {out:>6} B")


if __name__ == "__main__":
    main()
