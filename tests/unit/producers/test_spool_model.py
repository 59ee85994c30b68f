"""The spool against a model (a list), under random operations: appends (some
over the bound), partial and whole drains, reopening (a restarted publisher),
hand-backs in front. Counts, order and bytes on disk always agree with the model."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from turnaudit.errors import SpoolFullError
from turnaudit.producers import spool as spool_module
from turnaudit.producers.spool import DiskSpool, SpooledMessage

MAX_BYTES = 4096


class SpoolModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="spool-model-"))
        self.spool = DiskSpool(self.directory, max_bytes=MAX_BYTES)
        self.model: list[bytes] = []
        self.counter = 0

    def teardown(self) -> None:
        self.spool.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def _value(self, size: int) -> bytes:
        self.counter += 1
        return f"{self.counter:06d}".encode() + b"x" * size

    @rule(size=st.integers(min_value=0, max_value=600), topic=st.sampled_from(["events", "dlq"]))
    def append(self, size: int, topic: str) -> None:
        value = self._value(size)
        before = self.spool.size_bytes
        try:
            self.spool.append(topic, b"k", value)
        except SpoolFullError:
            assert before + size > MAX_BYTES - 64  # only refused near the bound
            assert self.spool.size_bytes == before
            return
        self.model.append(value)

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def drain_some(self, data: st.DataObject) -> None:
        n = data.draw(st.integers(min_value=1, max_value=len(self.model)))
        records = self.spool.read(limit=n)
        assert [r.message.value for r in records] == self.model[:n]
        self.spool.commit(records[-1].end, len(records))
        del self.model[:n]

    @rule()
    def reopen(self) -> None:
        self.spool.close()
        self.spool = DiskSpool(self.directory, max_bytes=MAX_BYTES)

    @rule(n=st.integers(min_value=1, max_value=3))
    def hand_back(self, n: int) -> None:
        older = [SpooledMessage("events", b"k", self._value(10)) for _ in range(n)]
        self.spool.requeue_front(older)
        self.model[:0] = [m.value for m in older]

    @rule(segment_bytes=st.sampled_from([256, 1024, 16 * 1024 * 1024]))
    def segment_size(self, segment_bytes: int) -> None:
        spool_module._SEGMENT_BYTES = segment_bytes  # small segments: many files

    @invariant()
    def agrees_with_the_model(self) -> None:
        assert len(self.spool) == len(self.model) >= 0
        assert self.spool.size_bytes >= 0
        assert [r.message.value for r in self.spool.read(limit=1 << 20)] == self.model
        if not self.model:
            assert self.spool.size_bytes == 0
            assert self.spool.oldest_appended_at is None
            assert list(self.directory.glob("segment-*.spool")) == []  # drained files go
        else:
            assert self.spool.oldest_appended_at is not None


SpoolModel.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestSpoolModel = SpoolModel.TestCase


def teardown_module() -> None:
    spool_module._SEGMENT_BYTES = 16 * 1024 * 1024
