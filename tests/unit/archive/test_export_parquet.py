"""``turnaudit archive export --parquet``: any archived record sequence (every shipped
schema version, undecodable records, any surface policy) exports to one Parquet file whose
columns are the documented fixed schema and whose rows, read back with pyarrow, are the
decoded turns; docs/archive.md's columns table is that schema, and its DuckDB query runs
on an export and counts what the turns say."""

from __future__ import annotations

import re
import sys
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import PROJECT_ROOT
from tests.support.archive import archive_records, signing_key
from tests.support.events import encode
from turnaudit.archive.export_columns import EVENT_FIELDS, TURN_SCHEMA
from turnaudit.archive.segments import ArchivedRecord
from turnaudit.archive.store import LocalArchive
from turnaudit.archive.writer import ArchivePolicy
from turnaudit.cli import main
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.redaction import Redaction, SurfacePolicy
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import TurnEventDeserializer
from turnaudit.settings import KafkaSettings

DOC = PROJECT_ROOT / "docs" / "archive.md"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
HASH_KEY = "k" * 32
VERSIONS = tuple(s.version for s in shipped_catalog().versions)

# What a record is: a turn of a version, or bytes no decoder reads (mutated or foreign).
Drawn = tuple[int, int | None, int]  # (simulated turn's index, version or None, offset step)


def moment(ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=ms)


def simulated(seed: int, count: int, versions: tuple[int, ...]) -> list[dict[str, Any]]:
    """Turns of the simulator (tasks, tools, models, every verdict), stamped as a
    publisher would, so every version's writer takes them."""
    sim = TurnRuntimeSimulator(seed, schema_versions=versions, concurrent_sessions=4)
    turns = []
    for n, outgoing in enumerate(sim.events(count)):
        event = dict(outgoing)
        event.update(event_id=f"e-{seed}-{n}", producer_id="p-1", prev_hash="0" * 64)
        turns.append(event)
    return turns


def expected_row(
    record: ArchivedRecord, decode: TurnEventDeserializer, surfaces: Redaction
) -> dict[str, Any]:
    """The row a record must export to, as pyarrow reads it back: its place, and its
    decoded event (the policy applied) field by field, or why it is none."""
    row: dict[str, Any] = {
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": moment(record.timestamp),
        "error": None,
        "writer_version": None,
    }
    try:
        decoded = decode(record.value)
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"
        return row | dict.fromkeys(EVENT_FIELDS)
    event = surfaces.event(decoded.event)
    row["writer_version"] = decoded.writer_version
    for name in EVENT_FIELDS:
        row[name] = event.get(name)
    row["occurred_at"] = moment(event["occurred_at"])
    if isinstance(row["input_tokens"], str):  # hashed: one text of them all
        row["input_tokens"] = [row["input_tokens"]]
    return row


def with_surfaces(monkeypatch: pytest.MonkeyPatch, policy: SurfacePolicy) -> Redaction:
    monkeypatch.delenv("TURNAUDIT_LOG_SURFACES", raising=False)
    monkeypatch.setenv("TURNAUDIT_SURFACES", policy.value)
    monkeypatch.setenv("TURNAUDIT_LOG_HASH_KEY", HASH_KEY)
    return Redaction(policy, HASH_KEY.encode() if policy is SurfacePolicy.HASH else b"")


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.large_base_example],
)
@given(
    seed=st.integers(0, 2**16),
    policy=st.sampled_from(SurfacePolicy),
    drawn=st.dictionaries(
        st.integers(0, 3),
        st.lists(
            st.tuples(st.integers(0, 39), st.sampled_from((*VERSIONS, None)), st.integers(1, 3)),
            min_size=1,
            max_size=10,
        ),
        min_size=1,
        max_size=3,
    ),
    garbage=st.binary(max_size=40),
)
def test_any_archived_records_export_to_rows_equal_to_the_decoded_turns_in_the_fixed_columns(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    *,
    seed: int,
    policy: SurfacePolicy,
    drawn: dict[int, list[Drawn]],
    garbage: bytes,
) -> None:
    tmp = tmp_path_factory.mktemp("parquet")
    surfaces = with_surfaces(monkeypatch, policy)
    topic = KafkaSettings.from_env().topics.turn_events
    turns = simulated(seed, 40, VERSIONS)
    archive = LocalArchive(tmp / "archive", durable=False)
    every: list[ArchivedRecord] = []
    for p, picks in drawn.items():
        records, offset = [], 0
        for n, (index, version, step) in enumerate(picks):
            offset += step
            if version is None:  # not a turn: garbage, or a turn cut short
                value = garbage if n % 2 else encode(turns[index])[: len(garbage)]
            else:
                event = dict(turns[index], verdicts={**turns[index]["verdicts"]})
                event["verdicts"]["schema_version"] = version
                value = encode(event)
            records.append(ArchivedRecord(topic, p, offset, 1_700_000_000_000 + n, 1, None, value))
        archive_records(archive, records, signing_key(), ArchivePolicy(window_ms=3))
        every += records
    out = tmp / "turns.parquet"
    assert main(["archive", "export", str(tmp / "archive"), "--parquet", str(out)]) == 0
    table = pq.read_table(out)
    assert table.schema == TURN_SCHEMA  # every version, every policy: the same columns
    assert table.schema.metadata == TURN_SCHEMA.metadata
    decode = TurnEventDeserializer(shipped_catalog())
    want = [
        expected_row(r, decode, surfaces)
        for r in sorted(every, key=lambda r: (r.partition, r.offset))
    ]
    assert table.to_pylist() == want
    assert not [p for p in out.parent.iterdir() if p.name.endswith(".partial")]
    assert out.stat().st_mode & 0o077 == 0  # what turns said: the owner's only


def test_an_export_of_one_version_and_of_another_have_the_same_columns(
    tmp_path: Path,
) -> None:
    topic = KafkaSettings.from_env().topics.turn_events
    schemas = []
    for version in (VERSIONS[0], VERSIONS[-1]):
        turns = simulated(3, 5, (version,))
        records = [
            ArchivedRecord(topic, 0, n, 1_700_000_000_000, 1, None, encode(t))
            for n, t in enumerate(turns)
        ]
        root = tmp_path / f"v{version}"
        archive_records(LocalArchive(root, durable=False), records, signing_key(), ArchivePolicy())
        out = tmp_path / f"v{version}.parquet"
        assert main(["archive", "export", str(root), "--parquet", str(out)]) == 0
        schemas.append(pq.read_schema(out))
        assert pq.read_table(out).column("writer_version").to_pylist() == [version] * 5
    assert schemas[0] == schemas[1] == TURN_SCHEMA


def doc_columns() -> list[tuple[str, str, str]]:
    """The rows of docs/archive.md's columns table: (column, type, what)."""
    text = DOC.read_text()
    section = text.split("### Parquet columns", 1)[1].split("\n#", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            rows.append((cells[0].strip("`"), cells[1].strip("`"), cells[2]))
    return rows


def documented_type(kind: pa.DataType) -> str:
    """How the table writes a type: a struct as ``struct`` (its fields named beside), a
    list as ``list<its items' type>``."""
    if pa.types.is_struct(kind):
        return "struct"
    if pa.types.is_list(kind):
        return f"list<{documented_type(kind.value_type)}>"
    return str(kind)


def test_the_documented_columns_are_the_exported_schema_in_order_with_their_types() -> None:
    rows = doc_columns()
    assert [(name, kind) for name, kind, _ in rows] == [
        (f.name, documented_type(f.type)) for f in TURN_SCHEMA
    ]
    for (name, _, what), field in zip(rows, TURN_SCHEMA, strict=True):
        kind = field.type
        inner = kind.value_type if pa.types.is_list(kind) else kind
        if pa.types.is_struct(inner):
            named = set(re.findall(r"`(\w+)`", what))
            missing = {inner.field(i).name for i in range(inner.num_fields)} - named
            assert not missing, f"{name}: the table does not name {missing}"


def as_date(value: object) -> date:
    """DuckDB's week: a date, or a timestamp at its midnight."""
    assert isinstance(value, date)
    return value.date() if isinstance(value, datetime) else value


def documented_query() -> str:
    text = DOC.read_text()
    block = re.search(
        r"<!-- runs-in: tests/unit/archive/test_export_parquet.py::"
        r"test_the_documented_duckdb_query_counts_refusals_by_pack_and_week -->\n"
        r"```sql\n(?P<sql>.*?)```",
        text,
        re.DOTALL,
    )
    assert block is not None, "docs/archive.md: the DuckDB query's block"
    return block["sql"]


def test_the_documented_duckdb_query_counts_refusals_by_pack_and_week(tmp_path: Path) -> None:
    topic = KafkaSettings.from_env().topics.turn_events
    turns = simulated(11, 120, VERSIONS)
    # Spread over five weeks of event time (a Monday 00:00 UTC to come out on its own).
    start = datetime(2026, 3, 2, tzinfo=UTC)
    records = []
    for n, event in enumerate(turns):
        at = start + timedelta(hours=7 * n) - timedelta(milliseconds=1 if n == 24 else 0)
        event["occurred_at"] = int((at - EPOCH) / timedelta(milliseconds=1))
        records.append(
            ArchivedRecord(topic, n % 2, n // 2, 1_700_000_000_000, 1, None, encode(event))
        )
    records.append(ArchivedRecord(topic, 0, 60, 1_700_000_000_000, 1, None, b"\x00garbage"))
    root = tmp_path / "archive"
    for p in (0, 1):
        held = [r for r in records if r.partition == p]
        archive_records(LocalArchive(root, durable=False), held, signing_key(), ArchivePolicy())
    out = tmp_path / "turns.parquet"
    assert main(["archive", "export", str(root), "--parquet", str(out)]) == 0
    sql = documented_query().replace("'turns.parquet'", f"'{out}'")
    relation = duckdb.sql(sql)
    assert relation is not None  # a SELECT has rows to fetch
    got = relation.fetchall()

    refused: Counter[tuple[str, date]] = Counter()
    total: Counter[tuple[str, date]] = Counter()
    for event in turns:
        day = moment(event["occurred_at"]).date()
        week = (event["pack_id"], day - timedelta(days=day.weekday()))
        total[week] += 1
        refused[week] += event["verdicts"]["refusal_emitted"]
    want = [
        (pack, week, refused[(pack, week)], n, round(refused[(pack, week)] / n, 3))
        for (pack, week), n in sorted(total.items())
    ]
    assert [(pack, as_date(week), *rest) for pack, week, *rest in got] == want
    assert sum(refused.values()) > 0
    assert len({w for _, w in total}) == 5


def test_a_parquet_export_without_pyarrow_is_one_line_naming_the_extra_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "archive").mkdir()
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow: ImportError
    monkeypatch.delitem(sys.modules, "turnaudit.archive.export_parquet", raising=False)
    out = tmp_path / "turns.parquet"
    code = main(["archive", "export", str(tmp_path / "archive"), "--parquet", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert (code, len(err)) == (2, 1)
    assert "turnaudit[parquet]" in err[0]
    assert not out.exists()
