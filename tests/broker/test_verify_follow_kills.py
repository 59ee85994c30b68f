"""``verify --follow`` SIGKILLed at random moments while turns arrive, checkpointing
every 0.2, 1 or 4 s (a kill under each, in a random order): at each kill its committed
offsets are at or below its durable checkpoint (the checkpoint hold), and after the last
restart the checkpointed counts equal a one-shot ``verify`` of the same range, so no kill
moment lost a turn or judged one twice; and while streams that ended whole retire, no kill
moment makes one count lost or cut."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.broker.test_verify_follow import (
    answering,
    caught_up,
    checkpoint,
    checkpoint_totals,
    committed_offsets,
    follower,
    one_shot_verify,
    proved_turns,
    scrape,
    tampered_streams,
)
from tests.support.streams import wait_for
from tests.support.verify_helpers import fresh_topics, publish
from turnaudit.consumers.runtime.settings import ServiceName, default_group_id
from turnaudit.kafka.offsets import watermarks
from turnaudit.kafka.state_topic import read_state
from turnaudit.local_broker import free_port
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker

KILLS = 3
CHECKPOINT_INTERVALS = (0.2, 1.0, 4.0)
LOST = "turnaudit_verify_lost_turns_total"
GRACE = ("--grace", "600")  # a gap loss would be another cause than the one measured
CHUNK_EVENTS = 150


def publish_until(
    settings: KafkaSettings, spool: Path, stop: threading.Event, failures: list[BaseException]
) -> None:
    """Chunks of honest turns until ``stop`` (two at least), and the four tampered
    sessions after the second chunk."""
    try:
        n = 0
        while n < 2 or not stop.is_set():
            publish(settings, spool / str(n), seed=70 + n, events=CHUNK_EVENTS)
            if n == 1:
                tampered_streams(settings)
            n += 1
            time.sleep(0.5)
    except BaseException as exc:  # surfaced by the test, not lost in the thread
        failures.append(exc)


def settled(settings: KafkaSettings, port: int) -> bool:
    """This run proves every partition to the turn topic's end and holds no missing
    position within the grace (each found again or declared lost, and checkpointed)."""
    try:
        page = scrape(port)
    except OSError:  # not listening yet
        return False
    high = watermarks(settings, settings.topics.turn_events).high
    proved = "turnaudit_verify_proved_offset{partition=%d}"
    return page.get("turnaudit_verify_missing_turns{state=within_grace}") == 0 and all(
        page.get(proved % p, -1) >= h for p, h in high.items() if h
    )


def settled_later(settings: KafkaSettings, port: int) -> bool:
    time.sleep(0.5)
    return settled(settings, port)


def live_streams(settings: KafkaSettings) -> list[bytes]:
    """The streams whose latest state record is not a tombstone."""
    latest = dict(read_state(settings))
    return [k for k, v in latest.items() if k.startswith(b"stream:") and v is not None]


def test_sigkills_at_random_moments_hold_offsets_at_the_checkpoint_and_match_one_shot_verify(
    kafka_bootstrap: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = fresh_topics(kafka_bootstrap)
    port = free_port()
    group = default_group_id(settings.topics.prefix, ServiceName.VERIFY_FOLLOW)
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    print(f"\nkill moments seed {seed}")
    failures: list[BaseException] = []
    stop = threading.Event()
    publisher = threading.Thread(
        target=publish_until, args=(settings, tmp_path / "spool", stop, failures)
    )
    publisher.start()
    log = tmp_path / "follow.log"
    proved_by_run: list[float] = []
    # Short intervals put kills inside checkpoints; long ones leave the proof ahead of its
    # checkpoint by seconds, past librdkafka's one-second offset commits.
    intervals = rng.sample(CHECKPOINT_INTERVALS, len(CHECKPOINT_INTERVALS))
    for every in intervals:
        with follower(settings, port, log, checkpoint_s=every) as proc:
            assert wait_for(lambda: answering(port), timeout=90)
            time.sleep(rng.uniform(0.0, 3.0))  # any moment: mid-batch, mid-checkpoint, idle
            proved_by_run.append(proved_turns(port))
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
        durable = {p: proof["offset"] for p, proof in checkpoint(settings).items()}
        for p, offset in committed_offsets(settings, group).items():
            assert offset <= durable.get(p, 0), (seed, p, offset, durable)
    stop.set()
    publisher.join(300)
    assert not failures, failures
    with follower(settings, port, log, checkpoint_s=0.2):
        assert wait_for(lambda: caught_up(settings), timeout=120)
        # A gap this run opened itself is declared lost only past the grace.
        # (Read twice: the gauges are set apart, the missing ones at the loop's tick.)
        assert wait_for(lambda: settled(settings, port) and settled_later(settings, port), 60), seed
    print(f"turns proved by each killed run: {proved_by_run}")

    totals = checkpoint_totals(settings)
    report = one_shot_verify(settings, monkeypatch, capsys, exit_code=1)  # the tampered sessions
    kinds = report["unexplained_by_kind"]
    assert report["counts"]["turns"] >= 2 * CHUNK_EVENTS
    assert totals["proved"] == report["counts"]["turns"], seed
    assert totals["lost"] == report["lost"] == 1, (seed, totals["lost"], report["lost"])
    assert totals["late"] == kinds["late_arrival"] == 1, seed
    assert totals["chain"] == kinds["chain_break"] == 1, seed
    assert totals["position_reused"] == kinds["position_reused"] == 1, seed
    assert totals["duplicates"] == report["duplicates"]["count"], seed


def publish_ending_runs(
    settings: KafkaSettings,
    spool: Path,
    stop: threading.Event,
    sessions: list[int],
    failures: list[BaseException],
) -> None:
    """Runtimes that close cleanly (their streams announced ended whole) until ``stop``."""
    try:
        n = 0
        while n < 2 or not stop.is_set():
            truth = publish(settings, spool / str(n), seed=90 + n, events=100, sessions=6)
            sessions.append(len(truth.chained_sessions))
            n += 1
            time.sleep(0.5)
    except BaseException as exc:  # surfaced by the test, not lost in the thread
        failures.append(exc)


def test_sigkills_at_random_moments_while_streams_retire_count_none_lost_and_retire_each(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Streams that ended whole are retired only after a judged-to mark covering their
    announcement is durable: a SIGKILL at any moment (between the mark and the tombstones
    too) leaves no run counting a stream lost or cut, and in the end every stream has left
    the follower and its state topic."""
    settings = fresh_topics(kafka_bootstrap)
    port = free_port()
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    print(f"\nkill moments seed {seed}")
    failures: list[BaseException] = []
    sessions: list[int] = []
    stop = threading.Event()
    publisher = threading.Thread(
        target=publish_ending_runs, args=(settings, tmp_path / "spool", stop, sessions, failures)
    )
    publisher.start()
    log = tmp_path / "follow.log"
    pages: list[dict[str, float]] = []
    for _ in range(KILLS):
        every = rng.choice(CHECKPOINT_INTERVALS[:2])  # marks and tombstones written often
        with follower(settings, port, log, *GRACE, checkpoint_s=every) as proc:
            assert wait_for(lambda: answering(port), timeout=90)
            time.sleep(rng.uniform(0.0, 3.0))
            pages.append(scrape(port))
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
    stop.set()
    publisher.join(300)
    assert not failures, failures
    open_streams = "turnaudit_verify_streams{state=open}"
    with follower(settings, port, log, *GRACE, checkpoint_s=0.2):
        # The killed runs' commits may say caught up before this one serves its page.
        assert wait_for(lambda: answering(port), timeout=90)
        assert wait_for(lambda: caught_up(settings), timeout=120)
        # Every stream retired, whatever the killed runs left: the open-streams gauge reads
        # 0 before this run has taken a partition over, so the state topic says when.
        assert wait_for(lambda: live_streams(settings) == [], timeout=90), seed
        pages.append(scrape(port))
    assert pages[-1].get(open_streams) == 0, seed
    for page in pages:
        assert sum(v for k, v in page.items() if k.startswith(LOST)) == 0, (seed, page)
        assert page["turnaudit_verify_cut_streams_total{}"] == 0, seed
    records = {k: v for k, v in read_state(settings) if k.startswith(b"stream:")}
    assert len(records) == sum(sessions), seed  # each stream had a record, now a tombstone
