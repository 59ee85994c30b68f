"""A demo run's prefix, key and keyring; what of the previous run it removes, and that a
record not shaped like a run's removes nothing."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnaudit.commands import demo_run
from turnaudit.commands.demo_run import RUN_FILE, read_previous, run_prefix, start_run
from turnaudit.settings import KafkaSettings, TopicNames

BASE = "turn-audit."


def kafka(prefix: str = BASE) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers="127.0.0.1:1", topics=TopicNames(prefix))


class Deleted:
    """Stands in for the topic deletion (the unit tier has no broker); records the names."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def __call__(self, settings: KafkaSettings, names: list[str]) -> dict[str, str]:
        self.names += names
        return {}


@pytest.fixture
def deleted(monkeypatch: pytest.MonkeyPatch) -> Deleted:
    recorder = Deleted()
    monkeypatch.setattr(demo_run, "delete_topics", recorder)
    return recorder


def test_a_run_has_its_own_prefix_owner_only_key_and_a_keyring_that_requires_signatures(
    tmp_path: Path, deleted: Deleted
) -> None:
    run = start_run(kafka(), tmp_path / "demo", tmp_path / "spool", run_id="0123abcd")
    assert run.prefix == "turn-audit.demo-0123abcd."
    assert run.settings.topics.turn_events == "turn-audit.demo-0123abcd.turn-events"
    assert stat.S_IMODE(run.key_path.stat().st_mode) == 0o600
    assert run.key_path == tmp_path / "demo" / "keys" / "demo-0123abcd.key"
    assert run.keyring.require_signed
    assert set(run.keyring.keys) == {"demo-0123abcd"}
    assert run.checkpoints.key is not None
    assert run.checkpoints.key.key_id == "demo-0123abcd"
    assert run.checkpoints.max_turns == demo_run.CHECKPOINT_EVERY_TURNS
    assert run.spool_dir == tmp_path / "spool" / "0123abcd"
    assert run.spool_dir.is_dir()
    assert json.loads((tmp_path / "demo" / RUN_FILE).read_text()) == {
        "run_id": "0123abcd",
        "prefix": run.prefix,
    }
    assert deleted.names == []  # no previous run


def test_the_next_run_removes_the_previous_runs_topics_key_and_spool_only(
    tmp_path: Path, deleted: Deleted
) -> None:
    out, spool = tmp_path / "demo", tmp_path / "spool"
    first = start_run(kafka(), out, spool, run_id="0123abcd")
    (first.spool_dir / "heads.jsonl").write_text("{}\n")
    (spool / "someone-elses").mkdir()
    second = start_run(kafka(), out, spool, run_id="89abcdef")
    assert sorted(deleted.names) == sorted(demo_run.run_topics(first.settings))
    assert all(name.startswith("turn-audit.demo-0123abcd.") for name in deleted.names)
    assert "turn-audit.demo-0123abcd.verify-state" in deleted.names
    assert sorted(p.name for p in (out / "keys").iterdir()) == [
        "demo-89abcdef.key",
        "demo-89abcdef.pub",
    ]
    assert sorted(p.name for p in spool.iterdir()) == ["89abcdef", "someone-elses"]
    assert read_previous(out, BASE) == {"run_id": "89abcdef", "prefix": second.prefix}


RECORDS = st.fixed_dictionaries(
    {
        "run_id": st.one_of(
            st.text(max_size=12),
            st.from_regex(r"[0-9a-f]{8}", fullmatch=True),
            st.integers(),
            st.none(),
        ),
        "prefix": st.one_of(st.text(max_size=30), st.just(BASE), st.none()),
    }
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=60)
@given(record=RECORDS, shaped=st.booleans())
def test_a_record_is_followed_only_when_it_names_a_run_of_this_prefix(
    tmp_path: Path, record: dict[str, object], shaped: bool
) -> None:
    if shaped and isinstance(record["run_id"], str):
        record["prefix"] = run_prefix(BASE, record["run_id"])
    (tmp_path / RUN_FILE).write_text(json.dumps(record))
    found = read_previous(tmp_path, BASE)
    run_id = record["run_id"]
    is_run = (
        isinstance(run_id, str)
        and len(run_id) == 8
        and all(c in "0123456789abcdef" for c in run_id)
        and record["prefix"] == f"{BASE}demo-{run_id}."
    )
    assert found == (record if is_run else None)


@pytest.mark.parametrize("text", ["", "not json", "[1, 2]", '"a string"', "{}"])
def test_an_unreadable_record_is_no_previous_run(tmp_path: Path, text: str) -> None:
    (tmp_path / RUN_FILE).write_text(text)
    assert read_previous(tmp_path, BASE) is None


def test_a_record_naming_another_base_prefix_deletes_nothing(
    tmp_path: Path, deleted: Deleted
) -> None:
    out, spool = tmp_path / "demo", tmp_path / "spool"
    start_run(kafka("mine."), out, spool, run_id="0123abcd")
    start_run(kafka(BASE), out, spool, run_id="89abcdef")
    assert deleted.names == []
    assert (spool / "0123abcd").is_dir()
