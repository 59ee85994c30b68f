"""``verify --follow``'s heads judge over a compacted ``stream-heads`` topic's worth of
announcements, in process: how fast the loop's side decodes and judges them (the cost of
a pass: the first at start, one per newly vanished producer or partition taken over), and
what it holds afterwards (``tracemalloc``: only the streams that lost turns stay).

Each round judges ``--streams`` ``ended`` announcements (one in ``--lossy`` short of its
head) against an engine that has proved every partition to the end; printed per round:
announcements/s, streams judged lossy, memory held after and at the peak.

    .venv/bin/python benchmarks/bench_heads_judge.py --streams 200000 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc

from turnaudit.identity import StreamId
from turnaudit.stream_heads import HeadAnnouncement, StreamHead, decode_announcement
from turnaudit.verify.heads_judge import EngineView, HeadsJudge

HEAD = 9
END = 10**9  # every partition proved to here


def announcements(streams: int, lossy: int) -> tuple[list[bytes], dict[StreamId, int]]:
    values, last = [], {}
    for n in range(streams):
        stream = (f"session-{n:09d}", "producer-1")
        last[stream] = HEAD if n % lossy else HEAD - 4
        head = StreamHead(stream[0], stream[1], HEAD, "ab" * 32)
        note = HeadAnnouncement(head, True, 200, stream[1], pack="general", runtime="chat")
        values.append(note.encode())
    return values, last


def one_round(
    values: list[bytes], last: dict[StreamId, int], traced: bool
) -> tuple[float, int, int, int]:
    view = EngineView(last.get, lambda _s: 0, lambda _p: END)
    judge = HeadsJudge(view, lambda _s, _n: 0)
    judge.start_pass([], 1)
    if traced:
        tracemalloc.start()
    began = time.perf_counter()
    for value in values:
        note = decode_announcement(value)
        assert note is not None
        judge.take(note, {0: END}, {0: 0})
    lossy = len(judge.judge())
    seconds = time.perf_counter() - began
    held = peak = 0
    if traced:
        held, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return len(values) / seconds, lossy, held, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=200_000)
    parser.add_argument("--lossy", type=int, default=100, help="one stream in N lost turns")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    values, last = announcements(args.streams, args.lossy)
    rates = []
    for n in range(args.rounds):
        rate, lossy, _, _ = one_round(values, last, traced=False)
        rates.append(rate)
        print(f"round {n + 1}: {rate:,.0f} announcements/s, {lossy} streams lost turns")
    _, lossy, held, peak = one_round(values, last, traced=True)
    print(
        f"median {statistics.median(rates):,.0f} announcements/s over {args.streams:,} streams; "
        f"held after: {held / 1e6:.2f} MB for {lossy} lossy streams (peak {peak / 1e6:.2f} MB)"
    )


if __name__ == "__main__":
    main()
