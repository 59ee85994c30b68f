"""``turnaudit archive export``: every archived record of the turn topic becomes one line,
partitions ascending, each by offset, with the archive alone; a decodable record's line
holds its event as written (every shipped version), an undecodable one's says why; a
location that is no directory is one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.archive import archive_records, signing_key
from tests.support.events import encode, turn
from turnaudit.archive.segments import ArchivedRecord
from turnaudit.archive.store import LocalArchive
from turnaudit.archive.writer import ArchivePolicy
from turnaudit.cli import main
from turnaudit.settings import KafkaSettings

# A record: its version (None: bytes no decoder reads) and offset step.
Drawn = tuple[int | None, int]


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.large_base_example],
)
@given(
    st.dictionaries(
        st.integers(0, 4),
        st.lists(
            st.tuples(st.sampled_from((1, 2, 3, 4, None)), st.integers(1, 3)),
            min_size=1,
            max_size=12,
        ),
        min_size=1,
        max_size=3,
    )
)
def test_every_archived_record_is_one_line_in_partition_and_offset_order(
    tmp_path_factory: pytest.TempPathFactory, drawn: dict[int, list[Drawn]]
) -> None:
    tmp = tmp_path_factory.mktemp("export")
    topic = KafkaSettings.from_env().topics.turn_events
    archive = LocalArchive(tmp / "archive", durable=False)
    wanted: list[tuple[int, int, str | None, int | None]] = []
    for p, picks in drawn.items():
        records, offset = [], 0
        for n, (version, step) in enumerate(picks):
            offset += step
            event = turn(f"s{p}", n, version=version or 2)
            value = encode(event) if version else b"\x00not an event"
            records.append(ArchivedRecord(topic, p, offset, 1_700_000_000_000 + n, 1, None, value))
            wanted.append((p, offset, event["event_id"] if version else None, version))
        archive_records(archive, records, signing_key(), ArchivePolicy(window_ms=3))
    out = tmp / "turns.jsonl"
    assert main(["archive", "export", str(tmp / "archive"), "--jsonl", str(out)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    got = [
        (
            line["partition"],
            line["offset"],
            line["event"]["event_id"] if "event" in line else None,
            line.get("writer_version"),
        )
        for line in lines
    ]
    assert got == sorted(wanted)
    assert all(("error" in line) == ("event" not in line) for line in lines)


def test_an_export_of_a_location_that_is_no_directory_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["archive", "export", str(tmp_path / "none"), "--jsonl", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert (code, len(err)) == (2, 1)
    assert "not a directory" in err[0]
    assert not (tmp_path / "o").exists()
