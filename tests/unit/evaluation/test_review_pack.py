"""Review pack: manifests -> pending cases -> reviewed -> label pack (no auditor involved)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnaudit.evaluation.errors import ContaminatedLabelPackError, ReviewPackError
from turnaudit.evaluation.evidence import produce_evidence
from turnaudit.evaluation.files import Verdict, load_labels
from turnaudit.evaluation.review_pack import CONTEXT_FIELD_LIMIT, export, finalize
from turnaudit.redaction import Redaction

from .builders import battery, evidence, healthy_steps, label_pack


def manifest_line(task_id: str, n_steps: int = 4, **extra: Any) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "trace": {"steps": healthy_steps(n_steps), "source": {"runtime": "victor 1.2", "run": 7}},
        "context": {
            "task": f"fix bug in {task_id}",
            "tools": [{"name": "shell", "arguments": {"cmd": "pytest"}, "result": "1 failed"}],
            "final_response": "done",
        },
        **extra,
    }


def write_manifest(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n", encoding="utf-8")
    return path


@pytest.fixture
def manifests(tmp_path: Path) -> list[tuple[str, Path]]:
    return [
        (
            "code-fix",
            write_manifest(
                tmp_path / "eval_manifest_FIX.jsonl",
                [manifest_line("fix-1"), manifest_line("fix-2")],
            ),
        ),
        (
            "code-gen",
            write_manifest(
                tmp_path / "eval_manifest_GEN.jsonl",
                [manifest_line("gen-1", task_family="code-gen")],
            ),
        ),
    ]


def review(pack_path: Path, decisions: dict[str, dict[str, Any]]) -> None:
    """Play the reviewer: set status and oracle fields per task id."""
    pack = json.loads(pack_path.read_text())
    for case in pack["cases"]:
        decision = decisions.get(case["task_id"], {})
        case["review"]["status"] = decision.get("status", case["review"]["status"])
        for key in ("oracle_source", "oracle_alarm_step"):
            if key in decision:
                case[key] = decision[key]
    pack_path.write_text(json.dumps(pack), encoding="utf-8")


INCLUDED_POSITIVE = {
    "status": "included",
    "oracle_source": "reviewer-ab@v1",
    "oracle_alarm_step": 2,
}
INCLUDED_HEALTHY = {
    "status": "included",
    "oracle_source": "reviewer-ab@v1",
    "oracle_alarm_step": None,
}


def test_export_starts_every_case_pending_with_family_from_source(
    manifests: list[tuple[str, Path]], tmp_path: Path
) -> None:
    pack = export(manifests, tmp_path / "pack.json", redaction=Redaction.keep())

    written = json.loads((tmp_path / "pack.json").read_text())
    assert written == pack
    assert [c["task_id"] for c in pack["cases"]] == ["fix-1", "fix-2", "gen-1"]
    assert [c["task_family"] for c in pack["cases"]] == ["code-fix", "code-fix", "code-gen"]
    for case in pack["cases"]:
        assert case["review"] == {"status": "pending"}
        assert case["oracle_source"] is None
        assert case["oracle_alarm_step"] is None
        assert case["context"]["tools"] == [
            {"name": "shell", "arguments": '{"cmd":"pytest"}', "result": "1 failed"}
        ]
    source = pack["cases"][1]["trace"]["source"]
    assert source["runtime"] == "victor 1.2"
    assert source["review_pack"] == {"manifest": str(manifests[0][1]), "line": 2}


def test_export_bounds_context_fields(tmp_path: Path) -> None:
    line = manifest_line("fix-1")
    line["context"]["task"] = "x" * 5000
    manifest = write_manifest(tmp_path / "m.jsonl", [line])

    pack = export([("code-fix", manifest)], tmp_path / "pack.json")

    task = pack["cases"][0]["context"]["task"]
    assert task.startswith("x" * CONTEXT_FIELD_LIMIT)
    assert task.endswith("…[truncated 3000 chars]")
    assert len(task) < CONTEXT_FIELD_LIMIT + 40


def test_export_refuses_a_family_that_contradicts_the_source(tmp_path: Path) -> None:
    manifest = write_manifest(tmp_path / "m.jsonl", [manifest_line("x", task_family="code-gen")])

    with pytest.raises(ReviewPackError, match=r"says family 'code-gen'.*given as 'code-fix'"):
        export([("code-fix", manifest)], tmp_path / "pack.json")


def test_export_refuses_one_task_id_under_two_families(tmp_path: Path) -> None:
    first = write_manifest(tmp_path / "a.jsonl", [manifest_line("same")])
    second = write_manifest(tmp_path / "b.jsonl", [manifest_line("same")])

    with pytest.raises(ReviewPackError, match=r"more than once.*different runs: 'same' at "):
        export([("code-fix", first), ("code-gen", second)], tmp_path / "pack.json")


def test_without_a_family_each_line_gives_its_own(tmp_path: Path) -> None:
    manifest = write_manifest(
        tmp_path / "feeder.jsonl",
        [manifest_line("a", task_family="code-fix"), manifest_line("b", task_family="code-gen")],
    )

    pack = export([(None, manifest)], tmp_path / "pack.json")

    assert [(c["task_id"], c["task_family"]) for c in pack["cases"]] == [
        ("a", "code-fix"),
        ("b", "code-gen"),
    ]


@pytest.mark.parametrize("recorded", [None, "", "  ", 7])
def test_without_a_family_a_line_recording_none_is_refused(
    tmp_path: Path, recorded: object
) -> None:
    extra = {} if recorded is None else {"task_family": recorded}
    manifest = write_manifest(tmp_path / "m.jsonl", [manifest_line("x", **extra)])

    with pytest.raises(ReviewPackError, match=r"m.jsonl:1: task 'x' records no task_family"):
        export([(None, manifest)], tmp_path / "pack.json")


runs = st.dictionaries(
    st.text("abcdefgh", min_size=1, max_size=4),
    st.tuples(st.sampled_from(["code-fix", "code-gen"]), st.integers(1, 6)),
    min_size=1,
    max_size=8,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(runs=runs, data=st.data())
def test_copies_of_a_run_across_manifests_are_one_case(
    tmp_path_factory: pytest.TempPathFactory, runs: dict[str, tuple[str, int]], data: st.DataObject
) -> None:
    # Each run written one to three times, into any of three manifests (feeder
    # workers), in any order: one case per task, the copy read first.
    folder = tmp_path_factory.mktemp("manifests")
    copies = [
        (task_id, data.draw(st.integers(0, 2)))
        for task_id in runs
        for _ in range(data.draw(st.integers(1, 3)))
    ]
    copies = data.draw(st.permutations(copies))
    lines: list[list[dict[str, Any]]] = [[], [], []]
    for task_id, worker in copies:
        family, steps = runs[task_id]
        lines[worker].append(manifest_line(task_id, steps, task_family=family))
    paths = [write_manifest(folder / f"w{i}.jsonl", lines[i]) for i in range(3)]

    pack = export([(None, path) for path in paths], folder / "pack.json")

    assert sorted(c["task_id"] for c in pack["cases"]) == sorted(runs)
    for case in pack["cases"]:
        family, steps = runs[case["task_id"]]
        assert case["task_family"] == family
        assert len(case["trace"]["steps"]) == steps
        where = case["trace"]["source"]["review_pack"]
        first = next(
            (i, n)
            for i, manifest in enumerate(lines)
            for n, line in enumerate(manifest, start=1)
            if line["task_id"] == case["task_id"]
        )
        assert (where["manifest"], where["line"]) == (str(paths[first[0]]), first[1])


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.integers(1, 6),
    change=st.sampled_from(["steps", "step verdict", "context", "source", "family"]),
)
def test_copies_of_a_task_that_differ_in_anything_are_refused_and_named(
    tmp_path_factory: pytest.TempPathFactory, steps: int, change: str
) -> None:
    folder = tmp_path_factory.mktemp("manifests")
    line = manifest_line("task-1", steps, task_family="code-fix")
    other = json.loads(json.dumps(line))
    if change == "steps":
        other["trace"]["steps"] = healthy_steps(steps + 1)
    elif change == "step verdict":
        other["trace"]["steps"][-1]["identity_score"] = 0.1
    elif change == "context":
        other["context"]["final_response"] = "not done"
    elif change == "source":
        other["trace"]["source"]["run"] = 8
    else:
        other["task_family"] = "code-gen"
    first = write_manifest(folder / "w0.jsonl", [manifest_line("ok", task_family="code-fix"), line])
    second = write_manifest(folder / "w1.jsonl", [other])

    with pytest.raises(ReviewPackError) as refused:
        export([(None, first), (None, second)], folder / "pack.json", redaction=Redaction.keep())

    assert f"'task-1' at {first}:2, {second}:1" in str(refused.value)
    assert "'ok'" not in str(refused.value)


def test_export_names_the_bad_manifest_line(tmp_path: Path) -> None:
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps(manifest_line("ok")) + "\n{not json\n", encoding="utf-8")

    with pytest.raises(ReviewPackError, match=r"m\.jsonl:2"):
        export([("code-fix", manifest)], tmp_path / "pack.json")


def test_finalize_refuses_pending_cases_and_names_them(
    manifests: list[tuple[str, Path]], tmp_path: Path
) -> None:
    pack_path = tmp_path / "pack.json"
    export(manifests, pack_path)
    review(pack_path, {"fix-1": INCLUDED_POSITIVE})

    with pytest.raises(ReviewPackError, match=r"2 case\(s\) still pending review: fix-2, gen-1"):
        finalize(pack_path, tmp_path / "labels.json")
    assert not (tmp_path / "labels.json").exists()


def test_finalize_allows_exclusions_and_strips_review_and_context(
    manifests: list[tuple[str, Path]], tmp_path: Path
) -> None:
    pack_path = tmp_path / "pack.json"
    export(manifests, pack_path)
    review(
        pack_path,
        {"fix-1": INCLUDED_POSITIVE, "fix-2": {"status": "excluded"}, "gen-1": INCLUDED_HEALTHY},
    )

    labels = finalize(pack_path, tmp_path / "labels.json")

    written = json.loads((tmp_path / "labels.json").read_text())
    assert written["format"] == "turn-audit/evr6-labels"
    assert "auditor_id" not in written
    assert [c["task_id"] for c in written["cases"]] == ["fix-1", "gen-1"]
    for case in written["cases"]:
        assert set(case) == {
            "task_id",
            "task_family",
            "oracle_source",
            "oracle_alarm_step",
            "trace",
        }
    assert [c.oracle_alarm_step for c in labels.cases] == [2, None]
    assert load_labels(tmp_path / "labels.json") == labels


@pytest.mark.parametrize("oracle_source", [None, "", "   "])
def test_finalize_refuses_included_case_without_oracle_source(
    manifests: list[tuple[str, Path]], tmp_path: Path, oracle_source: str | None
) -> None:
    pack_path = tmp_path / "pack.json"
    export(manifests, pack_path)
    review(
        pack_path,
        {
            "fix-1": {**INCLUDED_POSITIVE, "oracle_source": oracle_source},
            "fix-2": {"status": "excluded"},
            "gen-1": INCLUDED_HEALTHY,
        },
    )

    with pytest.raises(
        ReviewPackError, match=r"without a versioned oracle_source .*'fix-1' has no oracle_source"
    ):
        finalize(pack_path, tmp_path / "labels.json")


@pytest.mark.parametrize(
    ("step", "message"),
    [
        (4, "outside the trace's steps 0..3"),
        (-1, "outside the trace's steps 0..3"),
        (True, "must be an integer"),
        ("2", "must be an integer"),
    ],
)
def test_finalize_refuses_oracle_alarm_step_out_of_range(
    manifests: list[tuple[str, Path]], tmp_path: Path, step: object, message: str
) -> None:
    pack_path = tmp_path / "pack.json"
    export(manifests, pack_path)
    review(
        pack_path,
        {
            "fix-1": {**INCLUDED_POSITIVE, "oracle_alarm_step": step},
            "fix-2": {"status": "excluded"},
            "gen-1": INCLUDED_HEALTHY,
        },
    )

    with pytest.raises(ReviewPackError, match=message):
        finalize(pack_path, tmp_path / "labels.json")


def test_finalize_refuses_an_unknown_status(
    manifests: list[tuple[str, Path]], tmp_path: Path
) -> None:
    pack_path = tmp_path / "pack.json"
    export(manifests, pack_path)
    review(pack_path, {"fix-1": {"status": "maybe"}})

    with pytest.raises(ReviewPackError, match=r"fix-1 \('maybe'\)"):
        finalize(pack_path, tmp_path / "labels.json")


class CountingAuditor:
    """Records that it was asked; used to prove refused packs never reach the auditor."""

    def __init__(self) -> None:
        self.calls = 0

    @property
    def identity(self) -> Any:
        raise AssertionError("identity must not be read for a refused label pack")

    def begin_battery(self) -> None:
        self.calls += 1

    def assess(self, steps_prefix: Any) -> Verdict:
        self.calls += 1
        return "ok"

    def end_battery(self) -> None:
        self.calls += 1


@pytest.mark.parametrize("contamination", ["auditor_id", "observations"])
def test_evidence_production_refuses_labels_carrying_auditor_output(
    tmp_path: Path, contamination: str
) -> None:
    cases = battery()
    pack = label_pack(cases)
    if contamination == "auditor_id":
        pack["auditor_id"] = evidence(cases)["auditor_id"]
    else:
        pack["cases"][3]["observations"] = cases[3]["observations"]
    auditor = CountingAuditor()

    with pytest.raises(ContaminatedLabelPackError, match=contamination):
        produce_evidence(
            pack, auditor, evidence_output=tmp_path / "e.json", report_output=tmp_path / "r.json"
        )
    assert auditor.calls == 0
    assert not (tmp_path / "e.json").exists()


def test_labels_refuse_empty_observations_key_too(tmp_path: Path) -> None:
    pack = label_pack(battery())
    pack["cases"][0]["observations"] = []
    path = tmp_path / "labels.json"
    path.write_text(json.dumps(pack))

    with pytest.raises(ContaminatedLabelPackError, match="code-fix-pos-0"):
        load_labels(path)


# --- command line ------------------------------------------------------------------------


def test_cli_export_without_context_then_finalize(
    eval_cli: Any,
    manifests: list[tuple[str, Path]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pack_path = tmp_path / "pack.json"
    sources = [arg for family, path in manifests for arg in ("--source", f"{family}={path}")]

    assert (
        eval_cli(
            [
                "eval",
                "review-pack",
                "export",
                *sources,
                "--output",
                str(pack_path),
                "--without-context",
            ]
        )
        == 0
    )
    assert all("context" not in c for c in json.loads(pack_path.read_text())["cases"])
    assert (
        eval_cli(
            [
                "eval",
                "review-pack",
                "finalize",
                str(pack_path),
                "--output",
                str(tmp_path / "labels.json"),
            ]
        )
        == 2
    )
    assert "still pending review: fix-1, fix-2, gen-1" in capsys.readouterr().err

    review(
        pack_path,
        {"fix-1": INCLUDED_POSITIVE, "fix-2": INCLUDED_HEALTHY, "gen-1": {"status": "excluded"}},
    )
    assert (
        eval_cli(
            [
                "eval",
                "review-pack",
                "finalize",
                str(pack_path),
                "--output",
                str(tmp_path / "labels.json"),
            ]
        )
        == 0
    )
    assert "2 case(s) (1 alarm-positive, 1 healthy)" in capsys.readouterr().out


def test_cli_export_bad_source_is_a_one_line_error(
    eval_cli: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        eval_cli(
            [
                "eval",
                "review-pack",
                "export",
                "--source",
                "=m.jsonl",
                "--output",
                str(tmp_path / "pack.json"),
            ]
        )

    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "expected FAMILY=PATH or PATH" in err


def test_python_m_review_pack_export(manifests: list[tuple[str, Path]], tmp_path: Path) -> None:
    family, path = manifests[0]

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "turnaudit.evaluation.review_pack",
            "export",
            "--source",
            f"{family}={path}",
            "--output",
            str(tmp_path / "pack.json"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert len(json.loads((tmp_path / "pack.json").read_text())["cases"]) == 2
