"""``verify --follow`` as a group of worker processes (as on three machines): three
processes in one consumer group share six partitions; one is SIGKILLed while turns arrive
and restarted. The proof they checkpoint together equals a one-shot ``verify`` of the same
range (each turn proved once: nothing judged twice, nothing missed), with a keyring and
without; with one, the streams' trust summed over the workers equals one-shot verify's.

The turns and the checkpoints are a signed run copied in three parts, each part's
checkpoints after its turns (as the publisher writes them), the kill during the second."""

from __future__ import annotations

import json
import os
import signal
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.broker.test_signed_checkpoints import SignedRun, copy_checkpoints, publish_signed
from tests.broker.test_verify_follow import (
    caught_up,
    checkpoint,
    checkpoint_totals,
    follower,
    scrape,
    tampered_streams,
)
from tests.support.services import assigned
from tests.support.streams import wait_for
from tests.support.verify_helpers import DECODE, Stored, copy_to
from turnaudit.checkpoints import decode_checkpoint
from turnaudit.cli import main
from turnaudit.identity import StreamId, stream_of
from turnaudit.kafka.partitioning import session_partition
from turnaudit.kafka.topics import ensure_topics
from turnaudit.local_broker import free_port
from turnaudit.settings import KafkaSettings
from turnaudit.topic_names import TopicNames

pytestmark = pytest.mark.broker

PARTITIONS = 6
WORKERS = 3
TRUST = "turnaudit_verify_stream_trust{trust=%s}"


def six_partitions(bootstrap: str) -> KafkaSettings:
    settings = KafkaSettings(
        bootstrap_servers=bootstrap,
        topics=TopicNames(f"t-{uuid.uuid4().hex[:10]}."),
        partitions=PARTITIONS,
    )
    ensure_topics(settings)
    return settings


@pytest.fixture(scope="module")
def signed(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> SignedRun:
    return publish_signed(
        six_partitions(kafka_bootstrap),
        tmp_path_factory.mktemp("spool"),
        tmp_path_factory.mktemp("keys"),
        seed=61,
        events=900,
    )


def parts(run: SignedRun, n: int) -> Iterator[tuple[list[Stored], list[bytes]]]:
    """The run in ``n`` parts: each part's turns, then the checkpoints that sign only
    turns copied so far (in their order)."""
    position: dict[int, tuple[StreamId, int]] = {}
    for i, m in enumerate(run.messages):
        event = DECODE(m.value).event
        position[i] = (stream_of(event), int(event["sequence"]))
    copied: dict[StreamId, int] = {}
    pending = list(run.checkpoints)
    size = -(-len(run.messages) // n)
    for start in range(0, len(run.messages), size):
        chunk = run.messages[start : start + size]
        for i in range(start, start + len(chunk)):
            stream, sequence = position[i]
            copied[stream] = max(copied.get(stream, -1), sequence)
        ready: list[bytes] = []
        while pending:
            cp = decode_checkpoint(pending[0])
            if cp is not None and any(copied.get(h.stream, -1) < h.sequence for h in cp.heads):
                break
            ready.append(pending.pop(0))
        yield chunk, ready
    assert not pending


@pytest.mark.parametrize("with_keyring", [False, True], ids=["proof", "proof_and_trust"])
def test_three_workers_one_sigkilled_and_restarted_prove_each_turn_once_as_one_shot_verify(
    signed: SignedRun,
    with_keyring: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Every turn is where the follower's judges expect its stream: the partitioner's
    # CRC-32 of the session key, as librdkafka places it.
    for m in signed.messages:
        session = str(DECODE(m.value).event["session_id"])
        assert session_partition(session, PARTITIONS) == m.partition

    target = six_partitions(signed.settings.bootstrap_servers or "")
    copy = iter(parts(signed, 3))
    args = ["--keyring", str(signed.keyring), "--trust-grace", "5"] if with_keyring else []
    ports = [free_port() for _ in range(WORKERS)]
    log = tmp_path / "follow.log"

    def turns_and_checkpoints() -> int:
        turns, checkpoints = next(copy)
        copy_to(target, turns)
        copy_checkpoints(target, checkpoints)
        return len(turns)

    def split() -> bool:
        held = [assigned({"TURNAUDIT_HTTP_PORT": str(port)}) for port in ports]
        together = sorted(p for ps in held for p in ps)
        return all(held) and together == list(range(PARTITIONS))

    with ExitStack() as stack:
        procs = [stack.enter_context(follower(target, port, log, *args)) for port in ports]
        assert wait_for(split, timeout=120)  # the group has settled: two partitions each
        first = turns_and_checkpoints()
        assert wait_for(lambda: caught_up(target), timeout=120)
        # Each process proved its partitions' turns; together, each turn once.
        proved = [scrape(port)["turnaudit_verify_turns_proved_total{}"] for port in ports]
        print(f"\nfirst part: {first} turns, proved by the three workers {proved}")
        assert sum(proved) == first

        turns_and_checkpoints()  # the second part arrives; one worker dies on it
        os.kill(procs[1].pid, signal.SIGKILL)
        procs[1].wait(30)
        with follower(target, ports[1], log, *args):  # the same member, restarted
            assert wait_for(split, timeout=120)
            assert wait_for(lambda: caught_up(target), timeout=120)
            again = scrape(ports[1])
            print(
                f"restarted worker: {again['turnaudit_verify_turns_proved_total{}']:.0f} turns "
                f"proved, {again['turnaudit_verify_reread_messages_total{}']:.0f} read again "
                "below its partitions' checkpoints"
            )
            turns_and_checkpoints()
            tampered_streams(target)
            assert wait_for(lambda: caught_up(target), timeout=120)
            # The removed turn is lost once the grace has run out on its gap.
            assert wait_for(lambda: checkpoint_totals(target).get("lost") == 1, timeout=60)
            if with_keyring:  # past the trust grace, every stream judged
                streams = len({stream_of(DECODE(m.value).event) for m in signed.messages}) + 4

                def judged() -> dict[str, float]:
                    found = [scrape(p) for p in ports]
                    return {
                        s: sum(f.get(TRUST % s, 0) for f in found)
                        for s in ("signed", "unsigned", "forged", "truncated", "pending")
                    }

                assert wait_for(
                    lambda: judged()["pending"] == 0 and sum(judged().values()) == streams,
                    timeout=60,
                )
                trust = judged()

    totals = checkpoint_totals(target)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", target.bootstrap_servers or "")
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", target.topics.prefix)
    capsys.readouterr()
    one_shot = ["verify", "--json", *(["--keyring", str(signed.keyring)] if with_keyring else [])]
    assert main(one_shot) == 1
    report = json.loads(capsys.readouterr().out)
    kinds = report["unexplained_by_kind"]
    print(
        f"\n{WORKERS} workers, one SIGKILLed and restarted: {totals['proved']} turns proved "
        f"(one-shot: {report['counts']['turns']}), duplicates {totals['duplicates']}, "
        f"lost {totals['lost']}"
    )
    assert totals["proved"] == report["counts"]["turns"] >= len(signed.messages)
    assert totals["duplicates"] == report["duplicates"]["count"]
    assert totals["lost"] == report["lost"] == 1
    assert totals["late"] == kinds["late_arrival"] == 1
    assert totals["chain"] == kinds["chain_break"] == 1
    assert totals["position_reused"] == kinds["position_reused"] == 1
    assert set(checkpoint(target)) == set(range(PARTITIONS))
    if with_keyring:
        by_status = report["trust"]["by_status"]
        print(f"trust over the workers: {trust}; one-shot: {by_status}")
        for status in ("signed", "unsigned", "forged", "truncated"):
            assert trust[status] == by_status.get(status, 0), status
        assert trust["signed"] > 0
        assert trust["unsigned"] + trust["forged"] == 4  # the outside producer's streams
