"""The control topics' lifecycle on the real broker: ``ensure_topics`` creates
``checkpoints`` and ``stream-heads`` compacted and deleted after the turn topic's
retention plus the margin; a year of hourly checkpoints (8,760, one per turn, published in
twelve months spread over the test's seconds) cut by that retention keeps a bounded part
of the topics, and over the retained range one-shot ``verify --keyring`` is exact (its
producer's chain begins at the first retained checkpoint, no chain break) and a fresh
``verify --follow --keyring`` finds no chain break either.

Retention is applied with ``delete_records`` at the offsets time retention reaches (every
record older than now - retention.ms): the broker's own pass runs once a minute, at a time
the test cannot choose. The figures (records and bytes kept against the year written)
are printed for the note."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import ConfigResource, ResourceType

from tests.broker.test_signed_checkpoints import LONG_AGO
from tests.broker.test_verify_follow import caught_up, follower, scrape
from tests.support.streams import wait_for
from tests.support.verify_helpers import DECODE, fresh_topics, stored_range
from turnaudit.checkpoints import keyring_entry_toml
from turnaudit.cli import main
from turnaudit.identity import stream_of
from turnaudit.kafka.admin import new_admin
from turnaudit.kafka.offsets import RangeSpec, delete_records_before, resolve_range, watermarks
from turnaudit.kafka.reading import read_range
from turnaudit.kafka.topics import control_retention_ms, ensure_topics
from turnaudit.local_broker import free_port
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.settings import KafkaSettings
from turnaudit.signing_keys import CheckpointSettings, generate_keys, load_signing_key
from turnaudit.topic_names import TopicNames

pytestmark = pytest.mark.broker

HOURS_A_YEAR = 8_760
MONTHS = 12
MONTH_S = 4.0  # a simulated month lasts at least this long: the year, 48 s or more
# The turn topic keeps about 4 months' worth, the control topics 0.75 month longer: long
# enough that the broker's own retention pass (once a minute) cannot empty the turn topic
# while the test reads it.
RETENTION_MS = 15_000
MARGIN_MS = 3_000
CHAIN_BREAKS = "turnaudit_verify_signed_checkpoints_total{result=invalid}"
VALID = "turnaudit_verify_signed_checkpoints_total{result=valid}"
TRUST = "turnaudit_verify_stream_trust{trust=%s}"


def topic_config(settings: KafkaSettings, topic: str) -> dict[str, str]:
    admin = new_admin(settings.client_config())
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(30)
    return {k: v.value for k, v in entries.items()}


def timestamps(settings: KafkaSettings, topic: str) -> dict[int, list[tuple[int, int, int]]]:
    """Per partition, (offset, timestamp, key + value bytes) of every record held."""
    found = resolve_range(settings, topic, RangeSpec())
    out: dict[int, list[tuple[int, int, int]]] = {p: [] for p in found.start}
    for m in read_range(settings, topic, found.start, found.end):
        size = len(m.key() or b"") + len(m.value() or b"")
        out[m.partition() or 0].append((m.offset() or 0, m.timestamp()[1], size))
    return out


def retain(settings: KafkaSettings, topic: str, retention_ms: int, now_ms: int) -> dict[int, int]:
    """Delete what time retention deletes at ``now_ms``: every record older than
    ``retention_ms`` (whole partitions' prefixes); the new log start per partition."""
    cut: dict[int, int] = {}
    for partition, rows in timestamps(settings, topic).items():
        old = [offset for offset, at, _ in rows if at <= now_ms - retention_ms]
        if old:
            cut[partition] = old[-1] + 1
    return delete_records_before(settings, topic, cut) if cut else {}


def held(settings: KafkaSettings, topic: str) -> tuple[int, int]:
    """Records and key + value bytes the topic holds."""
    rows = [r for part in timestamps(settings, topic).values() for r in part]
    return len(rows), sum(size for _, _, size in rows)


def judged_streams(found: dict[str, float]) -> float:
    return sum(found.get(TRUST % s, 0) for s in ("signed", "unsigned", "forged", "truncated"))


def publish_a_year(settings: KafkaSettings, spool: Path, key_dir: Path) -> tuple[Path, int]:
    """One publisher signing a checkpoint per turn it hands on (each an hour of the year,
    as its interval says), a month of them at a time; the keyring that verifies it and
    the checkpoints written."""
    made = generate_keys(key_dir, "runtime-1")
    key = load_signing_key(made.private_path, "runtime-1")
    publisher = TurnEventPublisher(
        settings, spool_dir=spool, checkpoints=CheckpointSettings(key, interval_s=3600, max_turns=1)
    )
    checkpointer = publisher.checkpointer
    assert checkpointer is not None
    sim = TurnRuntimeSimulator(59, schema_versions=(4,), concurrent_sessions=30)
    events = sim.events(10 * HOURS_A_YEAR)
    begun = time.monotonic()
    for month in range(MONTHS):
        time.sleep(max(0.0, begun + month * MONTH_S - time.monotonic()))
        while checkpointer.written + checkpointer.unsent() < (month + 1) * HOURS_A_YEAR // MONTHS:
            signed = checkpointer.written + checkpointer.unsent()
            publisher.publish(next(events))  # the heads thread wakes, and signs it
            # A wake-up that crosses the thread's own is taken at its next one: the next
            # turn's checkpoint then signs both.
            deadline = time.monotonic() + 0.05
            while checkpointer.written + checkpointer.unsent() <= signed:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.0002)
    assert publisher.close().ok
    keyring = key_dir / "keyring.toml"
    keyring.write_text(keyring_entry_toml("runtime-1", key.public_pem(), LONG_AGO))
    return keyring, checkpointer.written


def test_a_year_of_hourly_checkpoints_keeps_the_control_topics_bounded_and_verifies_exact(
    kafka_bootstrap: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    defaults = fresh_topics(kafka_bootstrap)
    for topic in (defaults.topics.checkpoints, defaults.topics.stream_heads):
        config = topic_config(defaults, topic)
        assert config["cleanup.policy"] == "compact,delete"
        assert int(config["retention.ms"]) == control_retention_ms(defaults)
        assert control_retention_ms(defaults) == (
            defaults.turn_events_retention_ms + defaults.control_retention_margin_ms
        )

    settings = KafkaSettings(
        bootstrap_servers=kafka_bootstrap,
        topics=TopicNames(f"t-{uuid.uuid4().hex[:10]}."),
        partitions=3,
        turn_events_retention_ms=RETENTION_MS,
        control_retention_margin_ms=MARGIN_MS,
    )
    ensure_topics(settings)
    assert topic_config(settings, settings.topics.checkpoints)["retention.ms"] == str(
        RETENTION_MS + MARGIN_MS
    )
    keyring, signed = publish_a_year(settings, tmp_path / "spool", tmp_path / "keys")
    t = settings.topics
    written = {topic: held(settings, topic) for topic in (t.checkpoints, t.stream_heads)}
    assert written[t.checkpoints][0] == signed >= HOURS_A_YEAR  # and the final one on close

    now_ms = int(time.time() * 1000)
    first_append = timestamps(settings, t.checkpoints)[0][0][1]
    kept_from = retain(settings, t.checkpoints, RETENTION_MS + MARGIN_MS, now_ms)
    retain(settings, t.stream_heads, RETENTION_MS + MARGIN_MS, now_ms)
    turn_start = retain(settings, t.turn_events, RETENTION_MS, now_ms)
    assert kept_from.get(0, 0) > 0  # retention removed the chain's beginning
    assert any(o > 0 for o in turn_start.values())
    kept = {topic: held(settings, topic) for topic in (t.checkpoints, t.stream_heads)}
    with capsys.disabled():  # the figure for the note
        for topic in (t.checkpoints, t.stream_heads):
            print(
                f"\n{topic}: {written[topic][0]} records / {written[topic][1]} bytes written, "
                f"{kept[topic][0]} / {kept[topic][1]} kept"
            )
    # Bounded: about what the last retention + margin of the year wrote (give or take a
    # month, the year is not written at an even rate), not the year.
    year_ms = now_ms - first_append
    span = (RETENTION_MS + MARGIN_MS) / year_ms
    assert kept[t.checkpoints][0] <= signed * span + HOURS_A_YEAR / MONTHS
    assert kept[t.checkpoints][0] < signed / 2

    with capsys.disabled():
        print(f"year: {year_ms / 1000:.0f} s, retention.ms {RETENTION_MS} + {MARGIN_MS}")
    retained_turns = stored_range(settings)
    streams = {stream_of(DECODE(m.value).event) for m in retained_turns}

    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", t.prefix)
    capsys.readouterr()
    code = main(["verify", "--json", "--keyring", str(keyring)])
    report = json.loads(capsys.readouterr().out)
    trust = report["trust"]
    assert code == 0, report["unexplained"]
    assert trust["checkpoints"]["invalid"] == 0, trust["invalid_checkpoints"]
    assert trust["checkpoints"]["started_after_retention"] == 1
    assert trust["checkpoints"]["valid"] == kept[t.checkpoints][0]
    assert {k for k, n in trust["by_status"].items() if n} == {"signed"}
    assert trust["by_status"]["signed"] == len(streams)

    port = free_port()
    with follower(settings, port, tmp_path / "follow.log", "--keyring", str(keyring)):
        assert wait_for(lambda: caught_up(settings), timeout=90)
        assert wait_for(lambda: scrape(port).get(VALID, 0) == kept[t.checkpoints][0], timeout=60)
        wait_for(lambda: judged_streams(scrape(port)) == len(streams), timeout=30)
        found = scrape(port)
    assert found.get(CHAIN_BREAKS, 0) == 0
    judged = {s: found.get(TRUST % s, 0) for s in ("signed", "unsigned", "forged", "truncated")}
    assert judged["unsigned"] == judged["forged"] == 0
    # Every retained stream judged. Some may be judged truncated here: the simulator's
    # event time runs ahead of the wall clock, so a signed position the turn reader has not
    # reached yet looks late; tests/unit/verify/test_chain_retention.py holds the
    # follower's truncation to retention exactly.
    assert judged["signed"] + judged["truncated"] == len(streams)
    # The broker's own retention pass did not overtake the test: what was judged is the
    # range cut above.
    low = watermarks(settings, t.turn_events).low
    assert all(low[p] == o for p, o in turn_start.items())
