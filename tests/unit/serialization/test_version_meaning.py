"""Every shipped reader reads every shipped writer's events with their meaning intact,
or with the documented loss (v2 does not write the top-level per-field verdicts)."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pytest

from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.serialization.compatibility import DOCUMENTED_LOSSES, check_full_transitive
from turnaudit.serialization.schemas import shipped_catalog

CATALOG = shipped_catalog()
VERSIONS = [s.version for s in CATALOG.versions]


def _fields(version: int) -> set[str]:
    return {f["name"] for f in json.loads(CATALOG.version(version).schema_json)["fields"]}


def _read(record: dict[str, Any], writer: int, reader: int) -> dict[str, Any]:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, CATALOG.version(writer).parsed, record)
    buf.seek(0)
    read: dict[str, Any] = fastavro.schemaless_reader(
        buf, CATALOG.version(writer).parsed, CATALOG.version(reader).parsed
    )
    return read


def test_v1_to_v5_are_shipped_and_full_transitive() -> None:
    assert VERSIONS == [1, 2, 3, 4, 5]
    pairs = {(r.writer, r.reader) for r in check_full_transitive(CATALOG, 100)}
    assert pairs == {(w, r) for w in VERSIONS for r in VERSIONS}


@pytest.mark.parametrize("writer", VERSIONS)
@pytest.mark.parametrize("reader", VERSIONS)
def test_a_reader_gets_the_verdicts_the_writer_meant(writer: int, reader: int) -> None:
    lost = DOCUMENTED_LOSSES.get((writer, reader), ())
    reader_fields = _fields(reader)
    sim = TurnRuntimeSimulator(writer * 10 + reader, schema_versions=(writer,))
    checked = 0
    for i, event in enumerate(sim.events(200)):
        event.update(event_id=f"e{i}", sequence=i, producer_id="p", prev_hash="0" * 64)
        read = _read(event, writer, reader)
        # The bundle: the same for every reader.
        for name in (
            "refusal_emitted",
            "hedge_injected",
            "safety_verdict",
            "ethics_verdict",
            "identity_score",
        ):
            assert read["verdicts"][name] == event["verdicts"][name]
        assert read["verdicts"]["schema_version"] == writer  # which writer: never guessed
        for name in ("safety_verdict", "ethics_verdict"):
            if name not in reader_fields:
                continue
            if name in lost:
                assert read[name] is None  # the documented loss, never a wrong verdict
            else:
                assert read[name] == event["verdicts"][name]
                checked += event["verdicts"][name] is not None
        if writer >= 3 and {"producer_id", "prev_hash"} <= reader_fields:
            assert (read["producer_id"], read["prev_hash"]) == ("p", "0" * 64)
        elif "producer_id" in reader_fields:
            # Older data has no stream identity: the legacy stream, no chain.
            assert (read["producer_id"], read["prev_hash"]) == ("", "")
    if "safety_verdict" in reader_fields and not lost:
        assert checked > 0


def test_the_documented_loss_is_only_v2_data_at_the_per_field_verdicts() -> None:
    assert set(DOCUMENTED_LOSSES) == {(2, 1), (2, 3), (2, 4), (2, 5)}
    assert {"safety_verdict", "ethics_verdict"} <= _fields(3) & _fields(4) & _fields(5)
    assert not {"safety_verdict", "ethics_verdict"} & _fields(2)
    assert "deprecated" in json.loads(CATALOG.version(3).schema_json)["doc"]
    assert "deprecated" in json.loads(CATALOG.version(4).schema_json)["doc"]
    assert "deprecated" in json.loads(CATALOG.version(5).schema_json)["doc"]


def test_v5_carries_sealed_surfaces_and_states_the_liveness_interval() -> None:
    v5 = {f["name"]: f for f in json.loads(CATALOG.version(5).schema_json)["fields"]}
    assert v5["liveness_interval_ms"]["type"] == ["null", "long"]
    assert v5["liveness_interval_ms"]["default"] is None
    sealed = v5["sealed"]
    assert sealed["default"] is None
    assert sealed["type"][0] == "null"
    assert "sealed surfaces" in sealed["doc"].lower()
    record = sealed["type"][1]
    # No wrapped data key in the turn: it is on <prefix>surface-keys, where erasure
    # can destroy it (docs/privacy.md).
    assert [(f["name"], f["type"]) for f in record["fields"]] == [
        ("data_key_id", "string"),
        ("nonce", "bytes"),
        ("ciphertext", "bytes"),
    ]
