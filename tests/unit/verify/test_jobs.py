"""``verify --jobs``: verifiers that each read some partitions, sent back as a job sends
them (pickled, their ids in a file) and merged, conclude what one verifier reading every
partition does; an event id stored in two partitions is still found."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.events import encode
from tests.unit.verify import scenario
from tests.unit.verify.test_id_store import (
    RANGE,
    TINY,
    TINY_STREAMS,
    Item,
    Message,
    chained,
    faulty_ranges,
    log_file,
    stored,
)
from turnaudit.verify.files import reconcile_log
from turnaudit.verify.id_store import IdMemory
from turnaudit.verify.jobs import partition_sets
from turnaudit.verify.report import VerifyReport
from turnaudit.verify.verifier import Verifier

LOW = {0: 0, 1: 0}


def one(messages: list[Message], memory: IdMemory) -> Verifier:
    verifier = Verifier(scenario.DECODE, log_start_offsets=LOW, memory=memory)
    for n, m in enumerate(messages):
        verifier.feed(m.partition, m.offset, m.key, m.value, 1_790_000_000_000 + n)
    return verifier


def merged(messages: list[Message], memory: IdMemory, tmp: Path) -> Verifier:
    """Each partition's messages verified alone, handed over as a job does, merged."""
    out = Verifier(scenario.DECODE, log_start_offsets=LOW, memory=memory)
    files = []
    for partition in (1, 0):
        with Verifier(scenario.DECODE, log_start_offsets=LOW, memory=memory) as job:
            for n, m in enumerate(messages):
                if m.partition == partition:
                    job.feed(m.partition, m.offset, m.key, m.value, 1_790_000_000_000 + n)
            files += job.export_for_merge(tmp / f"job-{partition}")
            sent = pickle.loads(pickle.dumps(job))  # noqa: S301 -- our own bytes, as a job sends
        out.absorb(sent)
    out.absorb_exported(files)
    return out


def canonical(verifier: Verifier, log: Path) -> dict[str, Any]:
    """The report with its lists in one order (partitions are read interleaved)."""
    made = VerifyReport(RANGE, verifier)
    made.log = reconcile_log(log, verifier.event_ids)
    document = json.loads(json.dumps(made.as_json()))

    def ordered(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: ordered(v) for k, v in value.items()}
        if isinstance(value, list):
            return sorted((ordered(v) for v in value), key=json.dumps)
        return value

    result: dict[str, Any] = ordered(document)
    result["turn_ids"] = sorted(verifier.event_ids)
    return result


class TestMergedJobs:
    @settings(max_examples=120, deadline=None)
    @given(
        items=faulty_ranges(),
        memory=st.sampled_from([TINY, *TINY_STREAMS, IdMemory(event_ids=1 << 62)]),
    )
    def test_merged_jobs_conclude_what_one_verifier_does(
        self,
        tmp_path_factory: pytest.TempPathFactory,
        items: list[Item],
        memory: IdMemory,
    ) -> None:
        messages = stored(items)
        tmp = tmp_path_factory.mktemp("jobs")
        with one(messages, memory) as single, merged(messages, memory, tmp) as joined:
            log = log_file(tmp / "turns.jsonl", single, 2)
            assert canonical(joined, log) == canonical(single, log)

    @pytest.mark.parametrize("same_content", [True, False])
    def test_an_event_id_in_two_partitions_is_found_at_its_later_place(
        self,
        tmp_path: Path,
        same_content: bool,
    ) -> None:
        events = list(chained(8, 1, 1, 2))
        copy = events[3] if same_content else {**events[3], "surface": "other"}
        messages = stored([Item(i, e["session_id"].encode(), e) for i, e in enumerate(events)])
        other = 1 - next(m.partition for m in messages if m.key == events[3]["session_id"].encode())
        messages.append(Message(other, 100, b"another-key", encode(copy)))
        with merged(messages, TINY, tmp_path) as joined:
            kinds = sorted(f.kind for f in joined.findings)
            assert "key_mismatch" in kinds
            found = (
                joined.duplicates
                if same_content
                else [f for f in joined.findings if f.kind == "content_changed"]
            )
            assert [
                (f.where.get("partition"), f.where.get("offset"), f.where.get("event_id"))
                for f in found
            ] == [(other, 100, events[3]["event_id"])]
            assert len(joined.event_ids) == 8


class TestPartitionSets:
    def test_partitions_with_messages_are_dealt_round_robin(self) -> None:
        start = {0: 0, 1: 5, 2: 0, 3: 0, 4: 0}
        end = {0: 10, 1: 5, 2: 3, 3: 1, 4: 9}  # partition 1 holds nothing of the range
        assert partition_sets(start, end, 2) == [[0, 3], [2, 4]]
        assert partition_sets(start, end, 9) == [[0], [2], [3], [4]]
        assert partition_sets(start, {}, 2) == []
