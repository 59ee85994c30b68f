"""Signed checkpoints on the real broker: an honest signed run verifies clean (every
stream ``signed``); a stream forged under a new producer id, a stream rewritten with its
chain recomputed, a checkpoint with a bad signature, a revoked key and a truncated stream
are each found by ``verify --keyring``, the stream named, exit 1 — while the hash chain
alone (verify without a keyring) calls the forged and rewritten logs clean."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from tests.support import PROJECT_ROOT
from tests.support.verify_helpers import (
    DECODE,
    Stored,
    copy_to,
    fresh_prefix,
    fresh_topics,
    stored_range,
)
from turnaudit.checkpoints import (
    Checkpoint,
    SigningKey,
    decode_checkpoint,
    keyring_entry_toml,
)
from turnaudit.cli import main
from turnaudit.identity import GENESIS_HASH, TurnStamper, chain_hash, stream_of
from turnaudit.kafka.offsets import RangeSpec, resolve_range
from turnaudit.kafka.reading import read_range
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer
from turnaudit.settings import KafkaSettings
from turnaudit.signing_keys import CheckpointSettings, generate_keys, load_signing_key
from turnaudit.stream_heads import StreamHead

pytestmark = pytest.mark.broker

ENCODE_V4 = SingleObjectSerializer(shipped_catalog().version(4))
LONG_AGO = datetime(2020, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, repr=False)
class SignedRun:
    settings: KafkaSettings
    keyring: Path  # the key, valid since LONG_AGO
    revoked_keyring: Path  # the same key, revoked before the run
    messages: list[Stored]
    checkpoints: list[bytes]  # the checkpoint records' values, as stored
    producer_id: str

    def __repr__(self) -> str:  # hypothesis prints it with a failing example
        return f"SignedRun({self.settings.topics.prefix}, {len(self.messages)} turns)"


def publish_signed(
    settings: KafkaSettings, spool: Path, key_dir: Path, *, seed: int, events: int = 300
) -> SignedRun:
    made = generate_keys(key_dir, "runtime-1")
    key = load_signing_key(made.private_path, "runtime-1")
    publisher = TurnEventPublisher(
        settings,
        spool_dir=spool,
        checkpoints=CheckpointSettings(key, interval_s=0.05, max_turns=40),
    )
    sim = TurnRuntimeSimulator(seed, schema_versions=(4,), concurrent_sessions=12)
    for event in sim.events(events):
        publisher.publish(event)
    assert publisher.close().ok
    assert publisher.checkpointer is not None
    assert publisher.checkpointer.written >= 2
    keyring = key_dir / "keyring.toml"
    keyring.write_text(keyring_entry_toml("runtime-1", key.public_pem(), LONG_AGO))
    revoked = key_dir / "revoked.toml"
    revoked.write_text(
        keyring_entry_toml("runtime-1", key.public_pem(), LONG_AGO)
        + "revoked_at = 2021-01-01T00:00:00Z\n"
    )
    return SignedRun(
        settings,
        keyring,
        revoked,
        stored_range(settings),
        checkpoint_values(settings),
        publisher.producer_id,
    )


def checkpoint_values(settings: KafkaSettings) -> list[bytes]:
    topic = settings.topics.checkpoints
    found = resolve_range(settings, topic, RangeSpec())
    return [m.value() or b"" for m in read_range(settings, topic, found.start, found.end)]


def copy_checkpoints(settings: KafkaSettings, values: list[bytes]) -> None:
    producer = Producer(settings.client_config())
    for value in values:
        checkpoint = decode_checkpoint(value)
        key = checkpoint.key() if checkpoint is not None else uuid.uuid4().bytes
        producer.produce(settings.topics.checkpoints, value, key)
    assert producer.flush(30) == 0


@pytest.fixture(scope="module")
def run(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> SignedRun:
    return publish_signed(
        fresh_topics(kafka_bootstrap),
        tmp_path_factory.mktemp("spool"),
        tmp_path_factory.mktemp("keys"),
        seed=23,
    )


@pytest.fixture
def cli_env() -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in ("KAFKA_BOOTSTRAP_SERVERS", "TURNAUDIT_TOPIC_PREFIX")}
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def verify(
    settings: KafkaSettings, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, dict[str, Any]]:
    os.environ["KAFKA_BOOTSTRAP_SERVERS"] = settings.bootstrap_servers or ""
    os.environ["TURNAUDIT_TOPIC_PREFIX"] = settings.topics.prefix
    capsys.readouterr()
    code = main(["verify", "--json", *args])
    return code, json.loads(capsys.readouterr().out)


def statuses(report: dict[str, Any]) -> dict[tuple[str, str], str]:
    return {(s["session_id"], s["producer_id"]): s["status"] for s in report["trust"]["streams"]}


def named(report: dict[str, Any], kind: str) -> set[tuple[str, str]]:
    return {(f["session_id"], f["producer_id"]) for f in report["unexplained"] if f["kind"] == kind}


def streams_of(messages: list[Stored]) -> dict[tuple[str, str], list[int]]:
    out: dict[tuple[str, str], list[int]] = {}
    for i, m in enumerate(messages):
        out.setdefault(stream_of(DECODE(m.value).event), []).append(i)
    return out


# -- the honest run -----------------------------------------------------------------------


def test_an_honest_signed_run_verifies_clean_every_stream_signed(
    run: SignedRun, capsys: pytest.CaptureFixture[str], cli_env: None
) -> None:
    code, report = verify(run.settings, capsys, "--keyring", str(run.keyring), "--require-signed")
    assert report["unexplained"] == []
    assert code == 0
    trust = report["trust"]
    assert trust["checkpoints"]["invalid"] == 0
    assert trust["checkpoints"]["closed_producers"] == 1
    assert set(statuses(report).values()) == {"signed"}
    assert set(statuses(report)) == set(streams_of(run.messages))


# -- a stream forged under a new producer id ----------------------------------------------


def test_a_stream_forged_under_a_new_producer_id_is_found(
    run: SignedRun, capsys: pytest.CaptureFixture[str], cli_env: None
) -> None:
    target = fresh_prefix(run.settings)
    copy_to(target, run.messages)
    copy_checkpoints(target, run.checkpoints)
    # An outside writer: valid-looking v4 turns, a fresh producer id, a correct chain.
    stamper = TurnStamper()
    forged = []
    sim = TurnRuntimeSimulator(99, schema_versions=(4,), concurrent_sessions=1)
    for event in sim.events(6):
        stamper.stamp(event)
        value = ENCODE_V4(event)
        stamper.commit(event, value)
        forged.append(Stored(0, 0, event["session_id"].encode(), value, 0))
    producer = Producer(target.client_config())
    for m in forged:
        producer.produce(target.topics.turn_events, m.value, m.key)
    assert producer.flush(30) == 0
    stream = stream_of(DECODE(forged[0].value).event)
    assert stream[1] == stamper.producer_id

    # The chain alone: clean.
    code, report = verify(target, capsys)
    assert (code, report["unexplained"]) == (0, [])
    # A keyring that does not require signatures: the stream is unsigned, and verify fails
    # closed (a finding, exit 1) unless the keyring allows that producer to be unsigned.
    code, report = verify(target, capsys, "--keyring", str(run.keyring))
    assert statuses(report)[stream] == "unsigned"
    assert code == 1
    assert named(report, "unsigned") == {stream}
    allowing = run.keyring.parent / "allowing.toml"
    allowing.write_text(
        run.keyring.read_text()
        + f'\n[[allow_unsigned]]\nproducer_id = "{stream[1]}"\nreason = "migration"\n'
    )
    code, report = verify(target, capsys, "--keyring", str(allowing))
    assert statuses(report)[stream] == "unsigned"
    assert (code, report["unexplained"]) == (0, [])
    # Signatures required: forged, named, exit 1; the honest streams stay signed.
    code, report = verify(target, capsys, "--keyring", str(run.keyring), "--require-signed")
    assert code == 1
    assert named(report, "forged") == {stream}
    assert {s for s, status in statuses(report).items() if status != "signed"} == {stream}


# -- a stream rewritten with its chain recomputed -----------------------------------------


def rewrite(messages: list[Stored], indexes: list[int], chosen: set[int]) -> list[Stored]:
    """The stream at ``indexes`` with the turns at ``chosen`` (positions in it) edited and
    every later prev_hash recomputed: a chain that holds."""
    out = list(messages)
    prev = None
    for position, i in enumerate(indexes):
        event = dict(DECODE(out[i].value).event)
        if prev is None and position not in chosen:
            continue
        if position in chosen:
            event["turn"] = event["turn"] + 1000
        if prev is not None:
            event["prev_hash"] = prev
        value = ENCODE_V4(event)
        prev = chain_hash(value)
        out[i] = replace(out[i], value=value)
    return out


@pytest.fixture(scope="module")
def longest(run: SignedRun) -> tuple[tuple[str, str], list[int]]:
    return max(streams_of(run.messages).items(), key=lambda kv: len(kv[1]))


@settings(
    max_examples=5,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_a_rewritten_stream_with_a_recomputed_chain_is_found(
    run: SignedRun,
    longest: tuple[tuple[str, str], list[int]],
    capsys: pytest.CaptureFixture[str],
    cli_env: None,
    data: st.DataObject,
) -> None:
    stream, indexes = longest
    chosen = data.draw(st.sets(st.integers(0, len(indexes) - 1), min_size=1, max_size=4))
    target = fresh_prefix(run.settings)
    copy_to(target, rewrite(run.messages, indexes, chosen))
    copy_checkpoints(target, run.checkpoints)
    code, report = verify(target, capsys)
    assert (code, report["unexplained"]) == (0, [])  # the chain alone is fooled
    code, report = verify(target, capsys, "--keyring", str(run.keyring))
    assert code == 1
    assert named(report, "forged") == {stream}
    assert "rewritten" in next(f["detail"] for f in report["unexplained"])


# -- a checkpoint with a bad signature; a revoked key; a truncated stream -----------------


def test_a_checkpoint_with_a_bad_signature_is_a_finding_and_forges_no_honest_stream(
    run: SignedRun, capsys: pytest.CaptureFixture[str], cli_env: None
) -> None:
    target = fresh_prefix(run.settings)
    copy_to(target, run.messages)
    # A writer of the cluster adds a checkpoint claiming another head for one stream,
    # under the real key id, with the signature of the one it copies.
    honest = [c for c in map(decode_checkpoint, run.checkpoints) if c is not None]
    victim = next(c for c in honest if c.heads)
    head = victim.heads[0]
    tampered = replace(
        victim,
        heads=(
            StreamHead(head.session_id, head.producer_id, head.sequence, "f" * 64),
            *victim.heads[1:],
        ),
    )
    copy_checkpoints(target, [*run.checkpoints, tampered.encode()])
    code, report = verify(target, capsys, "--keyring", str(run.keyring))
    assert code == 1
    invalid = report["trust"]["invalid_checkpoints"]
    assert [(c["index"], c["problem"]) for c in invalid] == [(victim.index, "bad_signature")]
    # The attack is the finding; the honest streams the copy names stay signed.
    assert named(report, "forged") == set()
    assert {(f["kind"]) for f in report["unexplained"]} == {"invalid_checkpoint"}
    assert all(statuses(report)[h.stream] == "signed" for h in victim.heads)


def test_checkpoints_signed_by_a_revoked_key_leave_every_stream_unproved(
    run: SignedRun, capsys: pytest.CaptureFixture[str], cli_env: None
) -> None:
    """Every checkpoint invalid (a finding each): no stream is signed, every one is a
    finding (unsigned, failing closed), forged once signatures are required."""
    code, report = verify(run.settings, capsys, "--keyring", str(run.revoked_keyring))
    assert code == 1
    problems = {c["problem"] for c in report["trust"]["invalid_checkpoints"]}
    assert problems == {"key_not_valid"}
    assert named(report, "unsigned") == set(streams_of(run.messages))
    code, report = verify(
        run.settings, capsys, "--keyring", str(run.revoked_keyring), "--require-signed"
    )
    assert named(report, "forged") == set(streams_of(run.messages))


def test_a_stream_cut_before_its_signed_head_is_truncated(
    run: SignedRun,
    longest: tuple[tuple[str, str], list[int]],
    capsys: pytest.CaptureFixture[str],
    cli_env: None,
) -> None:
    stream, indexes = longest
    target = fresh_prefix(run.settings)
    dropped = set(indexes[-2:])  # its last two turns: no gap, the chain holds
    copy_to(target, [m for i, m in enumerate(run.messages) if i not in dropped])
    copy_checkpoints(target, run.checkpoints)
    code, report = verify(target, capsys)
    assert report["unexplained"] == []
    assert code == 0
    code, report = verify(target, capsys, "--keyring", str(run.keyring))
    assert code == 1
    assert named(report, "truncated") == {stream}
    assert statuses(report)[stream] == "truncated"


def test_a_removed_checkpoint_breaks_the_chain(
    run: SignedRun, capsys: pytest.CaptureFixture[str], cli_env: None
) -> None:
    target = fresh_prefix(run.settings)
    copy_to(target, run.messages)
    honest = [c for c in map(decode_checkpoint, run.checkpoints) if c is not None]
    assert len({c.index for c in honest}) >= 3
    # Every copy of checkpoint 1 goes (a retried produce may have stored one twice).
    gone = next(c for c in honest if c.index == 1).digest()
    copy_checkpoints(
        target, [v for v, c in zip(run.checkpoints, honest, strict=True) if c.digest() != gone]
    )
    code, report = verify(target, capsys, "--keyring", str(run.keyring))
    assert code == 1, (
        sorted((c.index, c.final, len(c.heads)) for c in honest),
        {k: v for k, v in report["trust"].items() if k != "streams"},
    )
    problems = [(c["index"], c["problem"]) for c in report["trust"]["invalid_checkpoints"]]
    assert problems == [(2, "chain_break")]
    # The break is a finding of its own, also when checkpoint 2 names no stream (a final
    # one written when nothing had advanced since checkpoint 1); it changes no stream's
    # status: the honest streams it names are judged by the valid checkpoints alone.
    assert [
        f["checkpoint"] for f in report["unexplained"] if f["kind"] == "invalid_checkpoint"
    ] == [2]
    assert named(report, "forged") == set()


def test_without_a_keyring_the_report_has_no_trust_section(
    run: SignedRun, capsys: pytest.CaptureFixture[str], cli_env: None
) -> None:
    code, report = verify(run.settings, capsys)
    assert code == 0
    assert "trust" not in report
    stored = [decode_checkpoint(v) for v in run.checkpoints]
    assert all(isinstance(c, Checkpoint) for c in stored)
    first = stored[0]
    assert first is not None
    assert first.prev == GENESIS_HASH
    assert first.index == 0
    last = stored[-1]
    assert last is not None
    assert last.final


# -- publish() never waits on signing -------------------------------------------------------


class SlowKey(SigningKey):
    """A key whose every signature takes half a second (a slow HSM, a starved thread)."""

    __slots__ = ()

    def sign(self, message: bytes) -> bytes:
        time.sleep(0.5)
        return super().sign(message)


def test_publish_never_waits_on_signing(kafka_bootstrap: str, tmp_path: Path) -> None:
    settings_ = fresh_topics(kafka_bootstrap)
    key = SlowKey(Ed25519PrivateKey.generate(), "slow")
    registry = CollectorRegistry()
    publisher = TurnEventPublisher(
        settings_,
        spool_dir=tmp_path / "spool",
        registry=registry,
        checkpoints=CheckpointSettings(key, interval_s=0.01, max_turns=20),
    )
    sim = TurnRuntimeSimulator(5, schema_versions=(4,), concurrent_sessions=8)
    events = list(sim.events(400))
    started = time.monotonic()
    for event in events:
        publisher.publish(event)
    elapsed = time.monotonic() - started
    # On the turn's path, 20 checkpoints' signatures alone would take 10 s.
    assert elapsed < 3.0
    assert publisher.close(timeout=30).ok
    assert publisher.checkpointer is not None
    assert publisher.checkpointer.written >= 2
    stored = [decode_checkpoint(v) for v in checkpoint_values(settings_)]
    # On the publisher's /metrics: every checkpoint acknowledged, none waiting.
    assert (
        registry.get_sample_value("turnaudit_publisher_checkpoints_written_total")
        == len(stored)
        == publisher.checkpointer.written
    )
    assert registry.get_sample_value("turnaudit_publisher_checkpoints_unsent") == 0
    assert stored[-1] is not None
    assert stored[-1].final


# -- a crashed signed publisher -------------------------------------------------------------


def test_a_crashed_publishers_unsigned_tail_is_counted_and_fails_closed(
    kafka_bootstrap: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    cli_env: None,
) -> None:
    target = fresh_topics(kafka_bootstrap)
    made = generate_keys(tmp_path / "keys", "crash-1")
    keyring = tmp_path / "keyring.toml"
    keyring.write_text(
        keyring_entry_toml(
            "crash-1", load_signing_key(made.private_path, "crash-1").public_pem(), LONG_AGO
        )
    )
    env = {
        **os.environ,
        "TURNAUDIT_SIGNING_KEY_FILE": str(made.private_path),
        "TURNAUDIT_SIGNING_KEY_ID": "crash-1",
        "TURNAUDIT_CHECKPOINT_INTERVAL_S": "3600",
        "TURNAUDIT_CHECKPOINT_MAX_TURNS": "30",
    }
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.crash_part",
            target.bootstrap_servers or "",
            target.topics.prefix,
            str(tmp_path / "spool"),
            "31",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=PROJECT_ROOT,
        env=env,
    )
    assert child.stdin is not None
    assert child.stdout is not None
    try:
        # 60 turns: two checkpoints by the count; then 10 more, delivered, never signed.
        for line in ("publish 60 wait\n", "publish 10 wait\n"):
            child.stdin.write(line)
            child.stdin.flush()
            words = child.stdout.readline().split()
        assert words[1] == words[3] == "70"  # published and delivered
    finally:
        child.kill()  # no close: no final checkpoint
        child.wait()
    code, report = verify(target, capsys, "--keyring", str(keyring))
    streams = report["trust"]["streams"]
    # Streams begun after the last checkpoint are unsigned: findings (fail closed); an
    # unsigned tail of a signed stream is counted, not a finding (no signature required).
    unsigned = {(s["session_id"], s["producer_id"]) for s in streams if s["status"] == "unsigned"}
    assert named(report, "unsigned") == unsigned
    assert {f["kind"] for f in report["unexplained"]} <= {"unsigned"}
    assert code == (1 if unsigned else 0)
    # Positions after the last checkpoint: counted per stream (a stream begun after it is
    # unsigned: its producer signs, it closed no chain); at least the last 10 turns, at most
    # those plus one count of turns.
    tail = sum(s["unsigned_tail"] for s in streams)
    assert 10 <= tail < 10 + 30
    assert sum(s["last_seen"] + 1 for s in streams) == 70
    assert {s["status"] for s in streams} <= {"signed", "unsigned"}
    assert all("its producer signs" in s["detail"] for s in streams if s["status"] == "unsigned")
    assert report["trust"]["checkpoints"]["closed_producers"] == 0
    code, report = verify(target, capsys, "--keyring", str(keyring), "--require-signed")
    assert code == 1
    assert named(report, "forged") == {
        (s["session_id"], s["producer_id"]) for s in streams if s["unsigned_tail"]
    }


# -- any deletion of any part of any partition -----------------------------------------------


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_any_deletion_from_any_partition_leaves_no_signed_stream_short_and_signed(
    run: SignedRun,
    capsys: pytest.CaptureFixture[str],
    cli_env: None,
    data: st.DataObject,
) -> None:
    """A copy of the signed run, then a deletion as an admin or a re-publisher makes it:
    ``delete_records`` of any partition to any offset (its start gone; the topic keeps
    30 days, so retention explains none of it), or the partition re-published without its
    tail from any offset. Every stream that lost a position a valid checkpoint signed is
    not ``signed`` and verify exits 1; every stream that lost nothing stays ``signed``."""
    partitions = sorted({m.partition for m in run.messages})
    partition = data.draw(st.sampled_from(partitions), label="partition")
    mine = [i for i, m in enumerate(run.messages) if m.partition == partition]
    cut = data.draw(st.integers(1, len(mine)), label="cut")
    how = data.draw(st.sampled_from(["delete_records", "tail_dropped"]), label="how")
    target = fresh_prefix(run.settings)
    if how == "delete_records":
        gone = set(mine[:cut])
        copy_to(target, run.messages)
        admin = AdminClient(target.client_config())
        where = TopicPartition(target.topics.turn_events, partition, cut)
        for future in admin.delete_records([where]).values():
            future.result(10)
    else:
        gone = set(mine[len(mine) - cut :])
        copy_to(target, [m for i, m in enumerate(run.messages) if i not in gone])
    copy_checkpoints(target, run.checkpoints)
    code, report = verify(target, capsys, "--keyring", str(run.keyring))
    found = statuses(report)
    lost = {stream_of(DECODE(run.messages[i].value).event) for i in gone}
    assert lost, "the drawn deletion removed at least one turn"
    assert code == 1
    for stream in streams_of(run.messages):
        if stream in lost:
            assert found.get(stream) != "signed", (stream, found.get(stream))
        else:
            assert found.get(stream) == "signed", (stream, found.get(stream))
