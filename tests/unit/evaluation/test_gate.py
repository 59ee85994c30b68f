"""The pre-registered EVR-6 gate, at every threshold edge; figures computed by hand."""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from turnaudit.evaluation.errors import EvidenceFormatError
from turnaudit.evaluation.files import parse_evidence
from turnaudit.evaluation.gate import evaluate, p95_nearest_rank

from .builders import FAMILIES, battery, case, evidence, family_cases, find_case


def gate(cases: list[dict[str, Any]], **identity: str) -> dict[str, Any]:
    return evaluate(parse_evidence(evidence(cases, **identity)))


def failures(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(f["requirement"], f["scope"]): f for f in report["failed_requirements"]}


def healthy_heavy_battery(false_alarm_families: tuple[str, ...]) -> list[dict[str, Any]]:
    """8 positives, all early; a, b, c hold 20 healthy each, so one false alarm there is 1/20.

    One false alarm in each of ``false_alarm_families``: TP = 8, FP = len(...).
    """
    a, b, c, d = FAMILIES
    cases = [
        *family_cases(a, positives=2, healthy=20),
        *family_cases(b, positives=2, healthy=20),
        *family_cases(c, positives=2, healthy=20),
        *family_cases(d, positives=2, healthy=2),
    ]
    for family in false_alarm_families:
        find_case(cases, f"{family}-ok-0")["observations"][4]["verdict"] = "alarm"
    return cases


def test_perfect_battery_passes_with_every_figure() -> None:
    report = gate(battery())

    assert report["decision"] == "pass"
    assert report["failed_requirements"] == []
    overall = report["overall"]
    assert (overall["traces"], overall["alarm_positive"], overall["healthy"]) == (24, 12, 12)
    assert (overall["precision"], overall["early_alarm_recall"], overall["false_alarm_rate"]) == (
        1.0,
        1.0,
        0.0,
    )
    assert overall["observations"] == 24 * 5
    assert overall["p95_latency_ms"] == 10.0
    assert sorted(report["families"]) == sorted(FAMILIES)
    assert report["families"]["code-fix"]["traces"] == 6
    json.dumps(report)  # the report must be JSON as it stands


def test_precision_exactly_080_passes() -> None:
    report = gate(healthy_heavy_battery(("code-fix", "code-gen")))

    # TP 8, FP 2: 8/10 = 0.80; a false-alarm rate of exactly 1/20 in two families passes too.
    assert report["overall"]["true_positives"] == 8
    assert report["overall"]["false_alarms"] == 2
    assert report["overall"]["precision"] == 0.8
    assert report["families"]["code-fix"]["false_alarm_rate"] == 0.05
    assert report["decision"] == "pass", report["failed_requirements"]


def test_precision_just_below_080_holds_and_says_by_how_much() -> None:
    report = gate(healthy_heavy_battery(("code-fix", "code-gen", "data-query")))

    # TP 8, FP 3: 8/11, the nearest precision below 0.80 with 8 positives.
    assert report["decision"] == "hold"
    assert list(failures(report)) == [("precision", "overall")]
    failure = failures(report)["precision", "overall"]
    assert failure["actual"] == pytest.approx(8 / 11)
    assert failure["threshold"] == 0.8
    assert failure["comparison"] == ">="
    assert failure["missed_by"] == pytest.approx(float(Fraction(4, 5) - Fraction(8, 11)))


def test_late_alarm_is_a_false_negative_not_a_false_positive() -> None:
    cases = battery()
    late = find_case(cases, "code-fix-pos-0")
    for obs in late["observations"]:
        obs["verdict"] = "alarm" if obs["prefix_end"] >= 3 else "ok"  # oracle step is 2

    report = gate(cases)

    family = report["families"]["code-fix"]
    assert family["late_alarms"] == 1
    assert family["late_task_ids"] == ["code-fix-pos-0"]
    assert (family["true_positives"], family["false_negatives"]) == (2, 1)
    assert report["overall"]["precision"] == 1.0  # 11 TP, 0 FP: the late alarm is no FP
    assert report["overall"]["early_alarm_recall"] == pytest.approx(11 / 12)
    traces = {t["task_id"]: t for t in report["traces"]}
    assert traces["code-fix-pos-0"]["outcome"] == "late"
    assert traces["code-fix-pos-0"]["first_alarm_step"] == 3
    assert report["decision"] == "hold"
    assert list(failures(report)) == [("early_alarm_recall", "family code-fix")]
    assert failures(report)["early_alarm_recall", "family code-fix"]["missed_by"] == (
        pytest.approx(float(Fraction(4, 5) - Fraction(2, 3)))
    )


def test_alarm_at_the_oracle_step_is_early_and_recall_of_exactly_080_passes() -> None:
    cases = battery(positives=5)
    # One late alarm among code-fix's 5 positives: recall 4/5 = 0.80 exactly.
    find_case(cases, "code-fix-pos-4")["observations"][2]["verdict"] = "ok"

    report = gate(cases)

    assert report["families"]["code-fix"]["early_alarm_recall"] == 0.8
    assert report["families"]["code-fix"]["late_alarms"] == 1
    assert report["decision"] == "pass", report["failed_requirements"]


def test_no_alarm_on_a_positive_trace_is_missed() -> None:
    cases = battery()
    for obs in find_case(cases, "code-gen-pos-1")["observations"]:
        obs["verdict"] = "ok"

    report = gate(cases)

    assert report["families"]["code-gen"]["missed_alarms"] == 1
    assert ("early_alarm_recall", "family code-gen") in failures(report)


def test_false_alarm_in_one_family_holds_even_when_overall_rate_is_fine() -> None:
    a, b, c, d = FAMILIES
    cases = [
        *family_cases(a, positives=3, healthy=20),
        *family_cases(b, positives=3, healthy=3),
        *family_cases(c, positives=3, healthy=3),
        *family_cases(d, positives=3, healthy=3),
    ]
    find_case(cases, f"{b}-ok-1")["observations"][0]["verdict"] = "alarm"

    report = gate(cases)

    # Overall: 1 of 29 healthy (0.034 <= 0.05) and precision 12/13; family b: 1 of 3.
    assert report["overall"]["false_alarm_rate"] == pytest.approx(1 / 29)
    assert report["decision"] == "hold"
    assert list(failures(report)) == [("false_alarm_rate", f"family {b}")]
    failure = failures(report)["false_alarm_rate", f"family {b}"]
    assert failure["actual"] == pytest.approx(1 / 3)
    assert failure["comparison"] == "<="
    assert failure["missed_by"] == pytest.approx(1 / 3 - 1 / 20)


def test_family_missing_a_polarity_holds() -> None:
    a, b, c, d = FAMILIES
    cases = [
        *family_cases(a, positives=3, healthy=3),
        *family_cases(b, positives=3, healthy=3),
        *family_cases(c, positives=3, healthy=3),
        *family_cases(d, positives=6, healthy=0),
    ]

    report = gate(cases)

    assert report["decision"] == "hold"
    failed = failures(report)
    assert failed["family_healthy", f"family {d}"]["actual"] == 0
    assert failed["family_healthy", f"family {d}"]["missed_by"] == 1
    assert failed["false_alarm_rate", f"family {d}"]["actual"] is None  # 0 healthy: undefined


def test_fewer_than_four_families_holds() -> None:
    report = gate(battery(families=FAMILIES[:3], positives=4, healthy=4))

    assert report["overall"]["traces"] == 24
    assert report["decision"] == "hold"
    assert list(failures(report)) == [("families", "overall")]
    assert failures(report)["families", "overall"]["actual"] == 3
    assert failures(report)["families", "overall"]["missed_by"] == 1


def test_fewer_than_24_traces_holds() -> None:
    report = gate(battery(positives=2, healthy=3))  # 4 x 5 = 20 traces, 8 positive, 12 healthy

    assert report["decision"] == "hold"
    assert list(failures(report)) == [("traces", "overall")]
    assert failures(report)["traces", "overall"]["actual"] == 20
    assert failures(report)["traces", "overall"]["missed_by"] == 4


def test_fewer_than_8_of_a_polarity_holds() -> None:
    report = gate(battery(positives=1, healthy=5))  # 4 positives, 20 healthy

    assert failures(report)["alarm_positive_traces", "overall"]["missed_by"] == 4
    assert report["decision"] == "hold"


def test_family_with_fewer_than_four_traces_holds() -> None:
    cases = [*battery(), *family_cases("tiny", positives=1, healthy=2)]

    report = gate(cases)

    assert failures(report)["family_traces", "family tiny"]["missed_by"] == 1
    assert report["decision"] == "hold"


def test_missing_prefix_observation_holds_for_integrity() -> None:
    cases = battery()
    del find_case(cases, "data-query-ok-2")["observations"][3]

    failure = failures(gate(cases))["integrity.prefix_coverage", "overall"]

    assert failure["cases"] == ["data-query-ok-2"]
    assert failure["actual"] == 1
    assert "no observation for prefix_end [3]" in failure["detail"]


def test_out_of_order_prefix_observations_hold_for_integrity() -> None:
    cases = battery()
    observations = find_case(cases, "code-gen-pos-0")["observations"]
    observations[1], observations[2] = observations[2], observations[1]

    report = gate(cases)

    failure = failures(report)["integrity.prefix_coverage", "overall"]
    assert report["decision"] == "hold"
    assert failure["cases"] == ["code-gen-pos-0"]
    assert "out of order" in failure["detail"]


def test_extra_observation_beyond_the_trace_holds() -> None:
    cases = battery()
    find_case(cases, "code-fix-ok-0")["observations"].append(
        {"prefix_end": 5, "verdict": "ok", "latency_ms": 1.0}
    )

    failure = failures(gate(cases))["integrity.prefix_coverage", "overall"]

    assert "beyond the trace" in failure["detail"]


def test_step_index_mismatch_holds_for_integrity() -> None:
    cases = battery()
    find_case(cases, "web-research-pos-1")["trace"]["steps"][1]["index"] = 7

    failure = failures(gate(cases))["integrity.step_indices", "overall"]

    assert failure["cases"] == ["web-research-pos-1"]
    assert "steps[1].index is 7, expected 1" in failure["detail"]


def test_duplicate_task_ids_hold_for_integrity() -> None:
    cases = battery()
    find_case(cases, "code-gen-ok-0")["task_id"] = "code-fix-ok-0"

    failure = failures(gate(cases))["integrity.unique_task_ids", "overall"]

    assert failure["cases"] == ["code-fix-ok-0"]
    assert "appears 2 times" in failure["detail"]


def test_oracle_step_outside_the_trace_holds_for_integrity() -> None:
    cases = battery()
    find_case(cases, "code-gen-pos-2")["oracle_alarm_step"] = 5  # steps are 0..4

    failure = failures(gate(cases))["integrity.labels", "overall"]

    assert failure["cases"] == ["code-gen-pos-2"]


@pytest.mark.parametrize(
    "digest",
    [
        "sha256:" + "ab" * 31,  # 62 hex digits
        "ab" * 32,  # no algorithm prefix
        "sha256:" + "AB" * 32,  # not the canonical lowercase form
        "sha256:" + "zz" * 32,  # not hex
        "md5:" + "ab" * 32,
    ],
)
def test_bad_auditor_digest_holds(digest: str) -> None:
    report = gate(battery(), digest=digest)

    assert report["decision"] == "hold"
    assert list(failures(report)) == [("integrity.pinned_identity", "overall")]
    assert "auditor_id.digest" in failures(report)["integrity.pinned_identity", "overall"]["cases"]


def test_empty_auditor_name_holds() -> None:
    report = gate(battery(), name="  ")

    assert failures(report)["integrity.pinned_identity", "overall"]["cases"] == ["auditor_id"]


def test_p95_is_nearest_rank() -> None:
    assert p95_nearest_rank([float(v) for v in range(1, 101)]) == 95.0
    assert p95_nearest_rank([float(v) for v in range(1, 21)]) == 19.0
    assert p95_nearest_rank([float(v) for v in range(1, 22)]) == 20.0  # ceil(19.95) = 20
    assert p95_nearest_rank([7.0]) == 7.0
    assert p95_nearest_rank([]) is None


def test_p95_latency_exactly_2000_passes_and_just_above_holds() -> None:
    at_limit = [
        case(
            c["task_id"],
            c["task_family"],
            alarm_step=c["oracle_alarm_step"],
            first_alarm=c["oracle_alarm_step"],
            latency_ms=2000.0,
        )
        for c in battery()
    ]
    assert gate(at_limit)["decision"] == "pass"

    above = [
        case(
            c["task_id"],
            c["task_family"],
            alarm_step=c["oracle_alarm_step"],
            first_alarm=c["oracle_alarm_step"],
            latency_ms=2000.001,
        )
        for c in battery()
    ]
    report = gate(above)

    assert report["decision"] == "hold"
    failure = failures(report)["p95_latency_ms", "overall"]
    assert failure["actual"] == 2000.001
    assert failure["missed_by"] == pytest.approx(0.001)


def test_p95_ignores_the_slowest_five_percent() -> None:
    def with_slow(count: int) -> list[dict[str, Any]]:
        cases = battery()  # 24 cases x 5 prefixes = 120 observations; rank ceil(114) = 114
        observations = [obs for c in cases for obs in c["observations"]]
        for obs in observations[:count]:
            obs["latency_ms"] = 30_000.0
        return cases

    assert gate(with_slow(6))["overall"]["p95_latency_ms"] == 10.0
    assert gate(with_slow(6))["decision"] == "pass"
    assert gate(with_slow(7))["overall"]["p95_latency_ms"] == 30_000.0
    assert ("p95_latency_ms", "overall") in failures(gate(with_slow(7)))


def test_report_names_every_failed_requirement_with_threshold_actual_and_gap() -> None:
    cases = battery(families=FAMILIES[:3], positives=2, healthy=2)  # 12 traces
    cases[0]["observations"][0]["latency_ms"] = 1.0

    report = gate(cases, digest="sha256:short")

    failed = failures(report)
    assert set(failed) == {
        ("integrity.pinned_identity", "overall"),
        ("traces", "overall"),
        ("alarm_positive_traces", "overall"),
        ("healthy_traces", "overall"),
        ("families", "overall"),
    }
    for failure in report["failed_requirements"]:
        assert set(failure) >= {
            "requirement",
            "scope",
            "comparison",
            "threshold",
            "actual",
            "missed_by",
            "detail",
        }
        assert failure["detail"]
    assert failed["traces", "overall"]["missed_by"] == 12
    assert failed["healthy_traces", "overall"]["threshold"] == 8


def test_evidence_without_auditor_id_holds_on_pinned_identities() -> None:
    raw = evidence(battery())
    del raw["auditor_id"]

    report = evaluate(parse_evidence(raw))

    assert report["decision"] == "hold"
    failure = failures(report)["integrity.pinned_identity", "overall"]
    assert failure["integrity_requirement"] == "pinned identities"
    assert "pinned identities" in failure["detail"]
    assert "missing" in failure["detail"]
    assert report["auditor_id"] is None


def test_evidence_with_an_unknown_verdict_is_refused() -> None:
    raw = evidence(battery())
    raw["cases"][0]["observations"][0]["verdict"] = "maybe"

    with pytest.raises(EvidenceFormatError, match="verdict"):
        parse_evidence(raw)


# --- command line ------------------------------------------------------------------------


def write(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_cli_gate_exits_0_on_pass_and_writes_the_report(
    eval_cli: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    evidence_file = write(tmp_path / "evidence.json", evidence(battery()))

    code = eval_cli(["eval", "gate", str(evidence_file), "--output", str(tmp_path / "r.json")])

    assert code == 0
    assert json.loads((tmp_path / "r.json").read_text())["decision"] == "pass"
    assert "EVR-6 gate: pass" in capsys.readouterr().out


def test_cli_gate_exits_1_on_hold(
    eval_cli: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    evidence_file = write(tmp_path / "evidence.json", evidence(battery(positives=2, healthy=3)))

    code = eval_cli(["eval", "gate", str(evidence_file), "--output", str(tmp_path / "r.json")])

    assert code == 1
    assert json.loads((tmp_path / "r.json").read_text())["decision"] == "hold"
    assert "traces [overall]: 20 vs >= 24 (missed by 4)" in capsys.readouterr().out


def test_cli_gate_holds_with_exit_1_on_evidence_without_a_digest(
    eval_cli: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = evidence(battery())
    del raw["auditor_id"]["digest"]
    evidence_file = write(tmp_path / "evidence.json", raw)

    code = eval_cli(["eval", "gate", str(evidence_file), "--output", str(tmp_path / "r.json")])

    assert code == 1
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["decision"] == "hold"
    assert [f["requirement"] for f in report["failed_requirements"]] == [
        "integrity.pinned_identity"
    ]
    out = capsys.readouterr().out
    assert "EVR-6 gate: hold" in out
    assert "pinned identities" in out


@pytest.mark.parametrize(
    "raw",
    [
        [1, 2],
        {"format": "turn-audit/evr6-labels", "format_version": 1, "cases": []},
        {
            "format": "turn-audit/evr6-evidence",
            "format_version": 1,
            "auditor_id": None,
            "cases": "none",
        },
    ],
)
def test_cli_gate_a_file_that_is_not_evidence_is_exit_2_without_report(
    eval_cli: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], raw: Any
) -> None:
    evidence_file = write(tmp_path / "evidence.json", raw)

    code = eval_cli(["eval", "gate", str(evidence_file), "--output", str(tmp_path / "r.json")])

    assert code == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert not (tmp_path / "r.json").exists()


def test_cli_gate_unreadable_evidence_is_one_line_exit_2(
    eval_cli: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = eval_cli(
        ["eval", "gate", str(tmp_path / "nope.json"), "--output", str(tmp_path / "r.json")]
    )

    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "cannot read" in err
    assert not (tmp_path / "r.json").exists()


def test_python_m_gate_form_shares_the_parser(tmp_path: Path) -> None:
    evidence_file = write(tmp_path / "evidence.json", evidence(battery()))
    command = [sys.executable, "-m", "turnaudit.evaluation.gate"]

    passed = subprocess.run(
        [*command, str(evidence_file), "--output", str(tmp_path / "r.json")],
        capture_output=True,
        text=True,
        check=False,
    )
    no_output = subprocess.run(
        [*command, str(evidence_file)], capture_output=True, text=True, check=False
    )

    assert passed.returncode == 0, passed.stderr
    assert json.loads((tmp_path / "r.json").read_text())["decision"] == "pass"
    assert no_output.returncode == 2
    assert no_output.stderr.count("\n") == 1
    assert "--output" in no_output.stderr
