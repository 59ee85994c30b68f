"""Labels must not come from the auditor under test; oracle sources must be versioned."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnaudit.evaluation.auditors import RuleBasedAuditor, TwoTierAuditor
from turnaudit.evaluation.errors import (
    ContaminatedLabelPackError,
    DependentLabelsError,
    ReviewPackError,
    UnversionedOracleError,
)
from turnaudit.evaluation.evidence import produce_evidence
from turnaudit.evaluation.files import AuditorIdentity, oracle_source_problem
from turnaudit.evaluation.labels import TaskLabel
from turnaudit.evaluation.model_auditor import OllamaAuditor
from turnaudit.evaluation.review_pack import export, finalize
from turnaudit.evaluation.trace_evidence import TraceEvidence

from .builders import battery, label_pack, turn_step
from .ollama_standin import DIGEST, TAG, StandInOllama, serving

RULES = RuleBasedAuditor()

names = st.from_regex(r"[a-z][a-z0-9-]{2,12}", fullmatch=True)
versions = st.from_regex(r"[0-9][0-9.]{0,6}", fullmatch=True)
unversioned = st.one_of(
    names,  # no @VERSION at all
    st.builds(lambda n, v: f"{n} v{v}", names, versions),  # a version, not in the form
    st.builds(lambda n: f"{n}@", names),
    st.builds(lambda v: f"@{v}", versions),
    st.builds(lambda n, v: f"{n}@{v} (reviewed)", names, versions),
    st.just(""),
    st.just("   "),
)


@given(name=names, version=versions)
def test_name_at_version_is_a_versioned_oracle(name: str, version: str) -> None:
    assert oracle_source_problem(f"{name}@{version}") is None


@given(source=unversioned)
def test_anything_else_is_not(source: str) -> None:
    assert oracle_source_problem(source) is not None


def _labels(n_bad: int, bad: list[str]) -> dict[str, Any]:
    pack = label_pack(battery())
    for i, source in enumerate(bad[:n_bad]):
        pack["cases"][i * 2]["oracle_source"] = source
    return pack


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(bad=st.lists(unversioned, min_size=1, max_size=6))
def test_the_producer_refuses_unversioned_oracles_naming_each_case(
    tmp_path: Path, bad: list[str]
) -> None:
    pack = _labels(len(bad), bad)
    expected = sorted(pack["cases"][i * 2]["task_id"] for i in range(len(bad)))
    with pytest.raises(UnversionedOracleError) as refused:
        produce_evidence(
            pack,
            RuleBasedAuditor(),
            evidence_output=tmp_path / "e.json",
            report_output=tmp_path / "r.json",
        )
    assert refused.value.cases == expected
    assert all(task_id in str(refused.value) for task_id in expected[:10])
    assert not (tmp_path / "e.json").exists()


def _marker(identity: AuditorIdentity, which: str) -> str:
    rules, model = identity.tiers
    return {
        "rules name": rules.name,
        "model tag": model.name.removeprefix("ollama/"),
        "model name": model.name.upper(),
        "rules digest": rules.digest.removeprefix("sha256:"),
        "model short digest": model.digest.removeprefix("sha256:")[:12],
        "composed digest": identity.digest.removeprefix("sha256:"),
    }[which]


MARKERS = st.sampled_from(
    [
        "rules name",
        "model tag",
        "model name",
        "rules digest",
        "model short digest",
        "composed digest",
    ]
)


@pytest.fixture(scope="module")
def two_tier() -> Any:
    fake = StandInOllama()
    with serving(fake) as url:
        auditor = TwoTierAuditor(RuleBasedAuditor(), OllamaAuditor(url, TAG, DIGEST))
        auditor.begin_battery()
        yield auditor


def _produce(auditor: Any, pack: dict[str, Any], tmp_path: Path) -> None:
    produce_evidence(
        pack, auditor, evidence_output=tmp_path / "e.json", report_output=tmp_path / "r.json"
    )


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    which=st.lists(MARKERS, min_size=1, max_size=5),
    version=versions,
    positions=st.lists(st.integers(0, 23), min_size=1, max_size=5, unique=True),
)
def test_the_producer_refuses_labels_naming_the_auditor_under_test_by_either_tier(
    two_tier: TwoTierAuditor,
    tmp_path: Path,
    which: list[str],
    version: str,
    positions: list[int],
) -> None:
    pack = label_pack(battery())
    identity = two_tier.identity
    for position, marker in zip(positions, which * len(positions), strict=False):
        pack["cases"][position]["oracle_source"] = (
            f"{_marker(identity, marker)}@{version}"
            if "digest" not in marker
            else f"replayed@{_marker(identity, marker)}"
        )
    named = sorted(pack["cases"][p]["task_id"] for p in positions)
    with pytest.raises(DependentLabelsError) as refused:
        _produce(two_tier, pack, tmp_path)
    assert refused.value.cases == named
    assert "names the auditor under test" in str(refused.value)


CARRIERS = st.sampled_from(
    [
        ("trace.source", {"auditor": {"observations": [{"prefix_end": 0, "verdict": "ok"}]}}),
        ("trace.source", {"first_alarm_step": 2}),
        ("trace.source", {"auditor_verdicts": ["ok", "alarm"]}),
        ("trace.source", {"verdict": "alarm"}),
        ("step", {"auditor_verdict": "alarm"}),
        ("step digest", None),
    ]
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    carriers=st.lists(CARRIERS, min_size=1, max_size=4),
    positions=st.lists(st.integers(0, 23), min_size=1, max_size=4, unique=True),
)
def test_the_producer_refuses_labels_carrying_the_auditors_verdicts(
    two_tier: TwoTierAuditor,
    tmp_path: Path,
    carriers: list[tuple[str, Any]],
    positions: list[int],
) -> None:
    pack = label_pack(battery())
    for position, (where, extra) in zip(positions, carriers * len(positions), strict=False):
        case = pack["cases"][position]
        if where == "trace.source":
            case["trace"]["source"].update(copy.deepcopy(extra))
        elif where == "step":
            case["trace"]["steps"][1].update(extra)
        else:
            case["trace"]["source"]["audited_by"] = two_tier.identity.tiers[1].digest
    named = sorted(pack["cases"][p]["task_id"] for p in positions)
    with pytest.raises(DependentLabelsError) as refused:
        _produce(two_tier, pack, tmp_path)
    assert refused.value.cases == named


def test_independent_labels_pass_and_a_pack_with_observations_is_refused(
    two_tier: TwoTierAuditor, tmp_path: Path
) -> None:
    _produce(two_tier, label_pack(battery()), tmp_path)  # hand-review@v1: independent
    pack = label_pack(battery())
    pack["cases"][3]["observations"] = []
    with pytest.raises(ContaminatedLabelPackError, match=pack["cases"][3]["task_id"]):
        _produce(two_tier, pack, tmp_path)


def test_the_worker_refuses_labels_naming_the_rules(tmp_path: Path) -> None:
    labels = {
        "t-1": TaskLabel("code-fix", f"{RULES.NAME}@{RULES.RULESET_VERSION}"),
        "t-2": TaskLabel("code-fix", "panel@1"),
    }
    with pytest.raises(DependentLabelsError) as refused:
        TraceEvidence(RuleBasedAuditor(), labels).begin()
    assert refused.value.cases == ["t-1"]


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(bad=st.lists(unversioned, min_size=1, max_size=4))
def test_finalization_refuses_unversioned_oracles_naming_each_case(
    tmp_path: Path, bad: list[str]
) -> None:
    manifest = tmp_path / "runs.jsonl"
    runs = [
        {
            "task_id": f"run-{i}",
            "task_family": "code-fix",
            "trace": {"steps": [turn_step(0), turn_step(1)], "source": {"i": i}},
        }
        for i in range(6)
    ]
    manifest.write_text("".join(json.dumps(r) + "\n" for r in runs))
    pack_path = tmp_path / "pack.json"
    export([(None, manifest)], pack_path)
    pack = json.loads(pack_path.read_text())
    for i, case in enumerate(pack["cases"]):
        case["review"]["status"] = "included"
        case["oracle_source"] = bad[i] if i < len(bad) else "panel@2026-11"
    pack_path.write_text(json.dumps(pack))
    with pytest.raises(ReviewPackError, match="versioned oracle_source") as refused:
        finalize(pack_path, tmp_path / "labels.json")
    for i in range(len(bad)):
        assert f"'run-{i}'" in str(refused.value)
    assert "'run-5'" not in str(refused.value)
