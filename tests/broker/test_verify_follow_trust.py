"""``turnaudit verify --follow --keyring`` on the real broker: an honest signed run has
every stream signed and no forgery (and a SIGKILL + restart resumes the trust without
judging a checkpoint again); a stream forged under a new producer id is forged within
the trust grace when signatures are required; a rewritten turn at a signed position is
forged."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.broker.test_signed_checkpoints import (
    ENCODE_V4,
    SignedRun,
    copy_checkpoints,
    publish_signed,
    rewrite,
    streams_of,
)
from tests.broker.test_verify_follow import caught_up, follower, scrape
from tests.support.streams import wait_for
from tests.support.verify_helpers import DECODE, copy_to, fresh_prefix, fresh_topics
from turnaudit.checkpoints import decode_checkpoint
from turnaudit.identity import TurnStamper, stream_of
from turnaudit.kafka.state_topic import read_state
from turnaudit.local_broker import free_port
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.verify.follow_trust_state import trust_producer_key

pytestmark = pytest.mark.broker

GRACE = 3.0
TRUST = "turnaudit_verify_stream_trust{trust=%s}"
FORGERIES = "turnaudit_verify_forgeries_total{reason=%s}"
VALID = "turnaudit_verify_signed_checkpoints_total{result=valid}"


@pytest.fixture(scope="module")
def run(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> SignedRun:
    return publish_signed(
        fresh_topics(kafka_bootstrap),
        tmp_path_factory.mktemp("spool"),
        tmp_path_factory.mktemp("keys"),
        seed=41,
        events=240,
    )


def keyring_args(run: SignedRun, *more: str) -> tuple[str, ...]:
    return ("--keyring", str(run.keyring), "--trust-grace", str(GRACE), *more)


def forgeries(found: dict[str, float]) -> float:
    return sum(v for k, v in found.items() if k.startswith("turnaudit_verify_forgeries_total{"))


def settled(port: int, streams: int) -> bool:
    """Every stream judged (none pending within the grace)."""
    try:
        found = scrape(port)
    except OSError:  # the service is not serving /metrics yet
        return False
    judged = sum(found.get(TRUST % s, 0) for s in ("signed", "unsigned", "forged", "truncated"))
    return judged == streams and found.get(TRUST % "pending", 0) == 0


def test_an_honest_signed_run_is_signed_throughout_and_resumes_after_sigkill(
    run: SignedRun,
    tmp_path: Path,
) -> None:
    target = fresh_prefix(run.settings)
    copy_to(target, run.messages)
    copy_checkpoints(target, run.checkpoints)
    streams = len(streams_of(run.messages))
    port = free_port()
    args = keyring_args(run, "--require-signed")
    with follower(target, port, tmp_path / "follow.log", *args) as proc:
        assert wait_for(lambda: caught_up(target), timeout=90)
        assert wait_for(lambda: scrape(port).get(TRUST % "signed", 0) == streams, timeout=60)
        time.sleep(GRACE + 2)  # past the grace: nothing turns unsigned or forged
        first = scrape(port)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    assert first[TRUST % "signed"] == streams
    assert first[TRUST % "forged"] == first[TRUST % "unsigned"] == 0
    assert forgeries(first) == 0
    assert first[VALID] == len(run.checkpoints)
    # The trust state is durable: the last valid checkpoint of the producer, as each turn
    # partition's judge took it.
    state = dict(read_state(target))
    for p in range(target.partitions):
        assert trust_producer_key(p, run.producer_id) in state

    with follower(target, port, tmp_path / "follow.log", *args):
        assert wait_for(lambda: settled(port, streams), timeout=60)
        time.sleep(GRACE + 2)
        after = scrape(port)
    assert after[TRUST % "signed"] == streams
    assert forgeries(after) == 0
    assert after[VALID] == 0  # resumed past every checkpoint judged: none judged again


def test_a_stream_forged_under_a_new_producer_id_is_forged_within_the_grace(
    run: SignedRun,
    tmp_path: Path,
) -> None:
    target = fresh_prefix(run.settings)
    copy_to(target, run.messages)
    copy_checkpoints(target, run.checkpoints)
    streams = len(streams_of(run.messages))
    port = free_port()
    args = keyring_args(run, "--require-signed")
    with follower(target, port, tmp_path / "follow.log", *args) as proc:
        assert wait_for(lambda: caught_up(target), timeout=90)
        assert wait_for(lambda: settled(port, streams), timeout=60)
        assert forgeries(scrape(port)) == 0
        # An outside writer: valid-looking v4 turns, a fresh producer id, a correct chain.
        stamper = TurnStamper()
        producer = Producer(target.client_config())
        sim = TurnRuntimeSimulator(99, schema_versions=(4,), concurrent_sessions=1)
        for event in sim.events(6):
            stamper.stamp(event)
            value = ENCODE_V4(event)
            stamper.commit(event, value)
            producer.produce(target.topics.turn_events, value, event["session_id"].encode())
        assert producer.flush(30) == 0
        sent = time.monotonic()
        assert wait_for(
            lambda: scrape(port).get(FORGERIES % "uncovered", 0) == 1, timeout=GRACE + 30
        )
        took = time.monotonic() - sent
        found = scrape(port)
        assert wait_for(lambda: caught_up(target), timeout=30)
        time.sleep(2)  # the forgery's flush, then the batch's
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    print(
        f"\nforged stream under a new producer id: forged {took:.1f} s after it was "
        f"written (trust grace {GRACE:g} s)"
    )
    assert took >= GRACE - 0.5  # not before the grace: a checkpoint could still cover it
    assert took < GRACE + 5  # and soon after it: the reader's horizon moves every second
    assert found[TRUST % "forged"] == 1
    assert found[TRUST % "signed"] == streams
    assert forgeries(found) == 1
    # After a SIGKILL the stream is still forged, from the state, and not found again.
    with follower(target, port, tmp_path / "follow.log", *args):
        assert wait_for(lambda: settled(port, streams + 1), timeout=60)
        time.sleep(GRACE + 2)
        again = scrape(port)
    assert again[TRUST % "forged"] == 1
    assert again[TRUST % "signed"] == streams
    assert forgeries(again) == 0


def test_a_rewritten_turn_at_a_signed_position_is_forged(
    run: SignedRun,
    tmp_path: Path,
) -> None:
    by_stream = streams_of(run.messages)
    stream, indexes = max(by_stream.items(), key=lambda kv: len(kv[1]))
    signed = {
        h.sequence
        for c in map(decode_checkpoint, run.checkpoints)
        if c is not None
        for h in c.heads
        if h.stream == stream
    }
    position = min(signed)  # its own hash and every later one change: the chain holds
    target = fresh_prefix(run.settings)
    copy_to(target, rewrite(run.messages, indexes, {position}))
    copy_checkpoints(target, run.checkpoints)
    port = free_port()
    with follower(target, port, tmp_path / "follow.log", *keyring_args(run)):
        assert wait_for(lambda: caught_up(target), timeout=90)
        assert wait_for(lambda: scrape(port).get(FORGERIES % "rewritten", 0) == 1, timeout=30)
        assert wait_for(lambda: settled(port, len(by_stream)), timeout=30)
        found = scrape(port)
    assert found[TRUST % "forged"] == 1
    assert found[TRUST % "signed"] == len(by_stream) - 1
    assert forgeries(found) == 1
    assert stream_of(DECODE(run.messages[indexes[0]].value).event) == stream
