"""Verify's per-message cost in process, no broker: the same stored messages fed to a
``Verifier`` one at a time through its Python path (``feed``) and in batches through the
native step (``feed_batch``, as ``verify`` reads), and decoded only (the decoder every
reader uses, for scale), in the same run.

``--events`` simulated v3 turns (4 partitions, ``--sessions`` concurrent sessions, one
producer) are encoded and stamped once; each round verifies them with each loop,
rotating which goes first, and checks that every verifier found the range clean and
counted every turn. A fourth loop is the native step with ``--memory-streams`` streams
and ``--memory-ids`` event ids in memory (the others spilled to disk, read back when
their session goes on). Printed: CPU µs per message (the process's CPU time, which a
shared machine disturbs less than the wall clock, printed beside it), min/median/max
over the rounds, and per round the ratios of the loops' CPU times. A fifth loop is
the follower's (``follow_batch`` per batch with the same bounds, its checkpoint every
``--checkpoint-every`` messages).

Beyond 2,000 sessions the simulator's turns are dealt round-robin to ``--sessions``
sessions (turn n to session n mod sessions) before they are stamped: each session's
next turn comes ``--sessions`` turns later, as in a follower behind a million
conversations. ``--session-turns K`` ends each session after K turns, its next turns a
new session's (a topic of many short sessions: 10 million turns, about a million
sessions at K=10). ``--skip-python`` leaves the Python path out (minutes at scale).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_verify_step.py [--events 200000] [--rounds 5]
    PYTHONPATH=. .venv/bin/python benchmarks/bench_verify_step.py --sessions 1000000 \
        --events 3000000 --memory-streams 100000 --memory-ids 500000 --skip-python --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from tests.unit.verify import scenario
from turnaudit.identity import TurnStamper
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.records import StoredRecord
from turnaudit.verify.follow import FollowState
from turnaudit.verify.follow_batch import follow_batch
from turnaudit.verify.follow_records import FollowMemory
from turnaudit.verify.id_store import IdMemory
from turnaudit.verify.verifier import Verifier

BATCH = 10_000  # what the range reader hands over at a time
SIMULATED_SESSIONS = 2_000  # the simulator's own concurrency (each session an object)


def stored(
    events: int, sessions: int = SIMULATED_SESSIONS, session_turns: int = 0
) -> list[StoredRecord]:
    sim = TurnRuntimeSimulator(
        3,
        schema_versions=(3,),
        concurrent_sessions=min(sessions, SIMULATED_SESSIONS),
        start=scenario.GOLDEN_START,
    )
    stamper = TurnStamper(producer_id="bench")
    turns_of: dict[str, int] = {}
    out = []
    for n, event in enumerate(sim.events(events)):
        if sessions > SIMULATED_SESSIONS:
            event["session_id"] = f"bench-session-{n % sessions:07d}"
        if session_turns:
            session = event["session_id"]
            turn = turns_of.get(session, 0)
            turns_of[session] = turn + 1
            event["session_id"] = f"{session}~{turn // session_turns}"
        stamper.stamp(event)
        value = scenario.ENCODE_V3(event)
        stamper.commit(event, value)
        out.append(
            StoredRecord(
                "t", n % 4, n // 4, event["session_id"].encode(), value, timestamp_ms=n + 1
            )
        )
    return out


def one_at_a_time(records: list[StoredRecord]) -> Verifier:
    verifier = Verifier(scenario.DECODE, log_start_offsets=dict.fromkeys(range(4), 0))
    for m in records:
        verifier.feed(m.partition() or 0, m.offset() or 0, m.key(), m.value(), m.timestamp()[1])
    return verifier


def batched(records: list[StoredRecord], memory: IdMemory | None = None) -> Verifier:
    verifier = Verifier(
        scenario.DECODE, log_start_offsets=dict.fromkeys(range(4), 0), memory=memory
    )
    for start in range(0, len(records), BATCH):
        verifier.feed_batch(records[start : start + BATCH])
    return verifier


def following(
    records: list[StoredRecord], memory: FollowMemory, checkpoint_every: int
) -> FollowState:
    """As ``verify --follow`` proves a backlog: ``follow_batch`` per batch, its timed
    checkpoint every ``checkpoint_every`` messages (and at the end)."""
    state = FollowState(memory=memory, decode=scenario.DECODE)
    for partition in range(4):
        state.load_partition(partition, first_offset=0, log_start=0)
    since = 0
    for start in range(0, len(records), BATCH):
        batch = records[start : start + BATCH]
        follow_batch(state, batch, now=0.0)
        since += len(batch)
        if since >= checkpoint_every:
            state.checkpoint()
            since = 0
    state.checkpoint()
    return state


def decode_only(records: list[StoredRecord]) -> None:
    for m in records:
        scenario.DECODE(m.value())


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--memory-streams",
        type=int,
        default=5_000,
        help="streams in memory for the loop whose others spill to disk",
    )
    parser.add_argument("--sessions", type=int, default=SIMULATED_SESSIONS)
    parser.add_argument(
        "--memory-ids",
        type=int,
        default=IdMemory.event_ids,
        help="event ids in memory for the loop whose streams spill",
    )
    parser.add_argument(
        "--session-turns",
        type=int,
        default=0,
        help="a session ends after this many turns, a new one goes on (0: never)",
    )
    parser.add_argument("--skip-python", action="store_true", help="no Python path loop")
    parser.add_argument(
        "--checkpoint-every",
        type=int,
        default=500_000,
        help="messages between the follower loop's checkpoints (5 s at 100,000 a second)",
    )
    args = parser.parse_args()
    if (
        min(
            args.events,
            args.rounds,
            args.sessions,
            args.memory_streams,
            args.memory_ids,
            args.checkpoint_every,
        )
        < 1
    ):
        parser.error(
            "--events, --rounds, --sessions, the memory bounds and --checkpoint-every are 1 or more"
        )
    if args.session_turns < 0:
        parser.error("--session-turns is 0 (sessions never end) or more")
    return args


def main() -> None:
    args = arguments()
    records = stored(args.events, args.sessions, args.session_turns)
    spilling = IdMemory(streams=args.memory_streams, event_ids=args.memory_ids)
    spilled_name = f"feed_batch, {args.memory_streams:,} streams, {args.memory_ids:,} ids in memory"
    loops: dict[str, Callable[[list[StoredRecord]], Verifier | None]] = {
        "feed (Python path)": one_at_a_time,
        "feed_batch (native step)": batched,
        "decode only": decode_only,
        spilled_name: lambda r: batched(r, spilling),
    }
    follower = FollowMemory(streams=args.memory_streams, event_ids=args.memory_ids)
    follower_name = f"follower (follow_batch, a checkpoint per {args.checkpoint_every:,})"
    followed: dict[str, Callable[[list[StoredRecord]], FollowState]] = {
        follower_name: lambda r: following(r, follower, args.checkpoint_every)
    }
    if args.skip_python:
        del loops["feed (Python path)"]
    names = [*loops, *followed]
    took: dict[str, list[float]] = {name: [] for name in names}
    wall: dict[str, list[float]] = {name: [] for name in names}
    for round_no in range(args.rounds):
        for name in names[round_no % len(names) :] + names[: round_no % len(names)]:
            began, began_cpu = time.perf_counter(), time.process_time()
            if name in followed:
                state = followed[name](records)
                took[name].append((time.process_time() - began_cpu) / args.events * 1e6)
                wall[name].append((time.perf_counter() - began) / args.events * 1e6)
                try:
                    assert state.totals().proved == args.events, name
                finally:
                    state.close()
                continue
            verifier = loops[name](records)
            took[name].append((time.process_time() - began_cpu) / args.events * 1e6)
            wall[name].append((time.perf_counter() - began) / args.events * 1e6)
            if verifier is not None:
                with verifier:
                    assert verifier.counts.turns == args.events, name
                    assert not verifier.findings, name
                    assert not verifier.lost(), name
    print(
        f"{args.events} v3 turns, {args.sessions:,} concurrent sessions"
        f" (each {args.session_turns or 'unbounded'} turns), {args.rounds} rounds (rotated), "
        "µs per message: CPU (wall)"
    )
    for name, us in took.items():
        print(
            f"{name:56} median {statistics.median(us):5.2f} (min {min(us):.2f}, max {max(us):.2f})"
            f"  (wall median {statistics.median(wall[name]):5.2f})"
        )
    print("ratios of CPU time:")
    pairs = [
        ("decode only / native step", "decode only", "feed_batch (native step)"),
        ("decode only / spilling native step", "decode only", spilled_name),
        ("streams spilled / all in memory", spilled_name, "feed_batch (native step)"),
        ("decode only / follower", "decode only", follower_name),
    ]
    if not args.skip_python:
        pairs.insert(0, ("Python path / native step", names[0], "feed_batch (native step)"))
    for label, a, b in pairs:
        ratios = [x / y for x, y in zip(took[a], took[b], strict=True)]
        print(
            f"{label} per round: median {statistics.median(ratios):.2f} "
            f"(min {min(ratios):.2f}, max {max(ratios):.2f})"
        )


if __name__ == "__main__":
    main()
