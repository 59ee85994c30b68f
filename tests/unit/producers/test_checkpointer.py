"""The publisher's checkpointer, without a broker: a checkpoint after the count of turns
or the interval, only of the streams advanced, chained and signed; the final one on
close; a checkpoint the producer refused or failed to deliver is sent again, and the
chain on the topic stays whole; the heads thread wakes at the count."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.checkpoints import RecordingProducer
from turnaudit.checkpoint_chain import judge_chain
from turnaudit.checkpoints import (
    Checkpoint,
    SigningKey,
    decode_checkpoint,
    keyring_entry_toml,
    parse_keyring,
)
from turnaudit.identity import GENESIS_HASH, LEGACY_PRODUCER
from turnaudit.producers.checkpointer import Checkpointer
from turnaudit.producers.heads import HeadsFile
from turnaudit.signing_keys import CheckpointSettings
from turnaudit.stream_heads import StreamHead

KEY = SigningKey(Ed25519PrivateKey.from_private_bytes(bytes(range(32))), "k1")
RING = parse_keyring(keyring_entry_toml("k1", KEY.public_pem(), datetime(2020, 1, 1, tzinfo=UTC)))


def writer(
    sink: RecordingProducer, *, interval_s: float = 3600, max_turns: int = 10
) -> Checkpointer:
    return Checkpointer(
        CheckpointSettings(KEY, interval_s=interval_s, max_turns=max_turns),
        producer_id="p",
        producer=sink,
        prefix="t.",
    )


def stored(sink: RecordingProducer) -> list[Checkpoint]:
    out = [decode_checkpoint(value) for topic, value, _ in sink.stored if topic == "t.checkpoints"]
    return [c for c in out if c is not None]


def head(session: str, sequence: int) -> StreamHead:
    return StreamHead(session, "p", sequence, f"{sequence:064x}")


class TestCadence:
    @settings(max_examples=30, deadline=None)
    @given(st.integers(1, 20), st.lists(st.integers(1, 7), min_size=1, max_size=40))
    def test_a_checkpoint_once_the_count_is_reached(
        self, max_turns: int, batches: list[int]
    ) -> None:
        sink = RecordingProducer()
        w = writer(sink, max_turns=max_turns)
        since = 0
        for i, turns in enumerate(batches):
            w.advance([head(f"s{i % 3}", i)], turns)
            since += turns
            before = len(stored(sink))
            w.tick()
            assert len(stored(sink)) == before + (since >= max_turns)
            if since >= max_turns:
                since = 0
        assert w.close(1.0)
        chain = stored(sink)
        assert chain[-1].final
        report = judge_chain([(c, None) for c in chain], RING)
        assert report.invalid() == []
        assert report.closed == {"p"}
        assert [c.index for c in chain] == list(range(len(chain)))
        assert chain[0].prev == GENESIS_HASH

    def test_a_checkpoint_once_the_interval_passed_and_only_of_streams_advanced(self) -> None:
        sink = RecordingProducer()
        w = writer(sink, interval_s=0.05, max_turns=10**6)
        w.tick()
        assert stored(sink) == []  # nothing advanced: nothing to sign
        w.advance([head("a", 0), head("b", 0), StreamHead("c", LEGACY_PRODUCER, 0, "")], 2)
        assert not w.due()
        time.sleep(0.06)
        w.tick()
        w.advance([head("a", 1)], 1)
        time.sleep(0.06)
        w.tick()
        first, second = stored(sink)
        assert [h.session_id for h in first.heads] == ["a", "b"]  # never the v1/v2 stream
        assert [(h.session_id, h.sequence) for h in second.heads] == [("a", 1)]
        assert second.prev == first.digest()

    def test_the_final_checkpoint_is_written_even_with_nothing_new(self) -> None:
        sink = RecordingProducer()
        w = writer(sink)
        assert w.close(1.0)
        (final,) = stored(sink)
        assert final.final
        assert final.heads == ()


class TestFaults:
    @settings(max_examples=30, deadline=None)
    @given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)), min_size=1, max_size=12))
    def test_refused_or_failed_checkpoints_are_sent_again_the_chain_stays_whole(
        self, faults: list[tuple[int, int]]
    ) -> None:
        sink = RecordingProducer()
        w = writer(sink, max_turns=1)
        for i, (full, fail) in enumerate(faults):
            sink.full_next, sink.fail_next = full, fail
            w.advance([head(f"s{i}", i)], 1)
            w.tick()
        sink.full_next = sink.fail_next = 0
        assert w.close(1.0)
        chain = stored(sink)
        assert sorted({c.index for c in chain}) == list(range(len(faults) + 1))
        report = judge_chain([(c, None) for c in chain], RING)
        assert report.invalid() == []
        assert report.closed == {"p"}
        assert (w.failures > 0) == any(full or fail for full, fail in faults)

    def test_close_gives_up_in_time_and_says_so(self) -> None:
        sink = RecordingProducer()
        w = writer(sink)
        sink.full_next = 10**9  # the queue never takes it
        started = time.monotonic()
        assert not w.close(0.3)
        assert time.monotonic() - started < 2.0


class TestHeadsThread:
    def test_the_count_wakes_the_heads_thread_long_before_its_interval(
        self, tmp_path: Path
    ) -> None:
        sink = RecordingProducer()
        lock = threading.Lock()
        w = writer(sink, max_turns=5)
        heads = HeadsFile(
            tmp_path,
            producer_id="p",
            interval_s=30.0,
            lock=lock,
            announcer=None,
            prefix="t.",
            checkpointer=w,
        )
        try:
            for sequence in range(5):  # what publish() does, under its lock
                with lock:
                    heads.dirty[("s", "p")] = (sequence, f"{sequence:064x}", "", "")
                    heads.turns += 1
                    if heads.turns == heads.wake_at:
                        heads.wake.set()
            deadline = time.monotonic() + 5.0
            while not stored(sink) and time.monotonic() < deadline:
                time.sleep(0.01)
            (checkpoint,) = stored(sink)
            assert [(h.session_id, h.sequence) for h in checkpoint.heads] == [("s", 4)]
        finally:
            heads.close(timeout=1.0)
        assert stored(sink)[-1].final
