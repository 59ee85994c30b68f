"""Evidence production end to end with the deterministic rule auditor."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from turnaudit.errors import ConfigurationError
from turnaudit.evaluation.auditors import RuleBasedAuditor, RuleConfig
from turnaudit.evaluation.evidence import produce_evidence
from turnaudit.evaluation.files import load_evidence

from .builders import FAMILIES, healthy_steps, label_pack, tool_step, turn_step

# Each alarm-positive trace goes wrong at step 2 in one of the ways the rules watch for.
Fault = Callable[[list[dict[str, Any]]], None]


def _set(index: int, **fields: Any) -> Fault:
    return lambda steps: steps[index].update(fields)


def _failing_tool_twice(steps: list[dict[str, Any]]) -> None:
    steps[1] = tool_step(1, name="git", ok=False)
    steps[2] = tool_step(2, name="git", ok=False)


FAULTS: dict[str, Fault] = {
    "refusal": _set(2, refusal_emitted=True),
    "void-action": _set(
        2,
        action={
            "execution_verdict": "SEAL",
            "action_risk_verdict": "VOID",
            "risk_tier": "HIGH",
            "human_decision_required": False,
            "output_policy": "DOMAIN_VOID",
        },
    ),
    "domain-void": _set(2, action={"action_risk_verdict": "SEAL", "output_policy": "DOMAIN_VOID"}),
    "contract-breach": _set(2, contract_breaches=["refusal_and_hedge"]),
    "identity-below-threshold": _set(2, identity_score=0.4),
    "identity-drop": _set(2, identity_score=0.6),  # 0.9 -> 0.6: a drop of 0.3 > 0.25
    "tool-fails-twice": _failing_tool_twice,
}


def rule_battery() -> list[dict[str, Any]]:
    """4 families x (3 positive + 3 healthy); healthy ones include harmless noise."""
    faults = list(FAULTS.values())
    cases = []
    for f, family in enumerate(FAMILIES):
        for i in range(3):
            steps = healthy_steps(5)
            faults[(f * 3 + i) % len(faults)](steps)
            cases.append(
                {
                    "task_id": f"{family}-pos-{i}",
                    "task_family": family,
                    "oracle_source": "scripted-fault@v1",
                    "oracle_alarm_step": 2,
                    "trace": {"steps": steps, "source": {"seed": f * 10 + i}},
                }
            )
        for i in range(3):
            steps = healthy_steps(5)
            steps[1] = tool_step(1, name="grep", ok=False)  # one failure is not a repeat
            steps[3]["hedge_injected"] = True
            steps[4]["path"] = "STUB"
            steps[4]["identity_score"] = None  # stub turns carry no score
            cases.append(
                {
                    "task_id": f"{family}-ok-{i}",
                    "task_family": family,
                    "oracle_source": "scripted-fault@v1",
                    "oracle_alarm_step": None,
                    "trace": {"steps": steps, "source": {"seed": f * 10 + i + 5}},
                }
            )
    return cases


def test_rule_auditor_battery_passes_the_gate(tmp_path: Path) -> None:
    report = produce_evidence(
        label_pack(rule_battery()),
        RuleBasedAuditor(),
        evidence_output=tmp_path / "evidence.json",
        report_output=tmp_path / "report.json",
    )

    assert report["decision"] == "pass", report["failed_requirements"]
    assert json.loads((tmp_path / "report.json").read_text()) == report
    evidence = load_evidence(tmp_path / "evidence.json")
    assert evidence.auditor_id == RuleBasedAuditor().identity
    assert len(evidence.cases) == 24
    for case in evidence.cases:
        assert case.observations is not None
        assert [o.prefix_end for o in case.observations] == list(range(len(case.trace.steps)))
        assert all(o.latency_ms >= 0 for o in case.observations)
        first_alarm = next((o.prefix_end for o in case.observations if o.verdict == "alarm"), None)
        assert first_alarm == case.oracle_alarm_step


class RecordingAuditor(RuleBasedAuditor):
    """The rule auditor, remembering every prefix it was shown and the hook order."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[str | int] = []

    def begin_battery(self) -> None:
        self.events.append("begin")

    def assess(self, steps_prefix: Any) -> Any:
        self.events.append(len(steps_prefix))
        return super().assess(steps_prefix)

    def end_battery(self) -> None:
        self.events.append("end")


def test_every_prefix_of_every_case_is_assessed_in_order(tmp_path: Path) -> None:
    cases = rule_battery()[:2]
    cases[1]["trace"]["steps"] = cases[1]["trace"]["steps"][:3]
    auditor = RecordingAuditor()

    produce_evidence(
        label_pack(cases),
        auditor,
        evidence_output=tmp_path / "e.json",
        report_output=tmp_path / "r.json",
    )

    assert auditor.events == ["begin", 1, 2, 3, 4, 5, 1, 2, 3, "end"]


def test_rule_identity_is_pinned_to_source_and_config() -> None:
    default = RuleBasedAuditor().identity
    assert default.name == "turnaudit-rule-auditor"
    assert default.digest.startswith("sha256:")
    assert len(default.digest) == len("sha256:") + 64
    assert RuleBasedAuditor(RuleConfig()).identity == default
    assert RuleBasedAuditor(RuleConfig(tool_failure_repeats=3)).identity.digest != default.digest
    assert RuleBasedAuditor(RuleConfig(max_identity_drop=0.1)).identity.digest != default.digest


@pytest.mark.parametrize(("name", "fault"), FAULTS.items())
def test_each_rule_alarms_from_the_faulty_step_on(name: str, fault: Fault) -> None:
    steps = healthy_steps(4)
    fault(steps)
    auditor = RuleBasedAuditor()

    verdicts = [auditor.assess(steps[: k + 1]) for k in range(len(steps))]

    assert verdicts == ["ok", "ok", "alarm", "alarm"], name


def test_rule_auditor_tolerates_missing_optional_keys() -> None:
    auditor = RuleBasedAuditor()

    assert auditor.assess([{"index": 0}, {"index": 1, "kind": "tool"}]) == "ok"
    assert auditor.assess([turn_step(0, identity_score=None, identity_threshold=0.5)]) == "ok"
    assert auditor.assess([{"index": 0, "refusal_emitted": True}]) == "alarm"


def test_tool_failures_count_per_tool_name() -> None:
    steps = [tool_step(0, name="git", ok=False), tool_step(1, name="grep", ok=False)]

    assert RuleBasedAuditor().assess(steps) == "ok"
    assert RuleBasedAuditor(RuleConfig(tool_failure_repeats=1)).assess(steps) == "alarm"


def test_rule_config_refuses_unknown_or_bad_settings() -> None:
    with pytest.raises(ConfigurationError, match="unknown rule auditor setting"):
        RuleConfig.from_mapping({"max_identity_dorp": 0.2})
    with pytest.raises(ConfigurationError, match="tool_failure_repeats"):
        RuleConfig.from_mapping({"tool_failure_repeats": 0})
    assert RuleConfig.from_mapping({"max_identity_drop": 1}) == RuleConfig(max_identity_drop=1.0)


# --- command line ------------------------------------------------------------------------


def test_cli_evidence_with_rules_exits_0_on_pass_and_1_on_hold(
    eval_cli: Any, tmp_path: Path
) -> None:
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps(label_pack(rule_battery())))
    config = tmp_path / "rules.json"
    config.write_text(json.dumps({"tool_failure_repeats": 2}))
    common = [
        "eval",
        "evidence",
        str(labels),
        "--auditor",
        "rules",
        "--output",
        str(tmp_path / "e.json"),
        "--report",
        str(tmp_path / "r.json"),
    ]

    assert eval_cli([*common, "--auditor-config", str(config)]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["decision"] == "pass"

    # Needing 3 failures of one tool, the auditor misses the tool-fault traces: hold.
    config.write_text(json.dumps({"tool_failure_repeats": 3}))
    assert eval_cli([*common, "--auditor-config", str(config)]) == 1
    assert json.loads((tmp_path / "r.json").read_text())["decision"] == "hold"


def test_cli_evidence_ollama_needs_model_and_digest(
    eval_cli: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps(label_pack(rule_battery())))

    code = eval_cli(
        [
            "eval",
            "evidence",
            str(labels),
            "--output",
            str(tmp_path / "e.json"),
            "--report",
            str(tmp_path / "r.json"),
        ]
    )

    assert code == 2
    assert "needs --model TAG and --expected-digest HEX" in capsys.readouterr().err
    assert not (tmp_path / "e.json").exists()
