"""``auditor_observation`` v2: the deciding tier and the pinned tiers, FULL_TRANSITIVE with v1."""

from __future__ import annotations

from turnaudit.evaluation.auditors import RuleBasedAuditor
from turnaudit.evaluation.files import Observation, observation_from_record
from turnaudit.serialization.compatibility import check_full_transitive
from turnaudit.serialization.schemas import shipped_catalog
from turnaudit.serialization.wire import SingleObjectSerializer, TurnEventDeserializer

CATALOG = shipped_catalog("auditor_observation")


def test_every_version_reads_every_others_data() -> None:
    pairs = {(r.writer, r.reader) for r in check_full_transitive(CATALOG, 80)}
    versions = [v.version for v in CATALOG.versions]
    assert max(versions) >= 2
    assert pairs == {(w, r) for w in versions for r in versions}


def _record(observations: list[Observation]) -> dict[str, object]:
    return {
        "task_id": "t-1",
        "task_family": "code-fix",
        "auditor_id": RuleBasedAuditor().identity.to_json(),
        "first_alarm_step": None,
        "observations": [o.to_json() for o in observations],
        "source": {
            "topic": "t",
            "partition": 0,
            "first_offset": 0,
            "last_offset": 1,
            "first_sequence": 0,
            "last_sequence": 1,
            "runtime_name": "r",
            "runtime_version": "1",
            "event_ids": ["a", "b"],
        },
    }


def test_tier_and_identity_round_trip_and_v1_records_read_without_a_tier() -> None:
    observations = [Observation(0, "ok", 1.5, "rules"), Observation(1, "alarm", 9.0, "model")]
    read = TurnEventDeserializer(CATALOG)
    latest = read(SingleObjectSerializer(CATALOG.latest)(_record(observations))).event
    assert [observation_from_record(o) for o in latest["observations"]] == observations
    assert latest["auditor_id"] == RuleBasedAuditor().identity.to_json()
    v1 = next(v for v in CATALOG.versions if v.version == 1)
    old = read(SingleObjectSerializer(v1)(_record(observations))).event
    assert [observation_from_record(o).tier for o in old["observations"]] == [None, None]
    assert old["auditor_id"].get("tiers", []) == []
