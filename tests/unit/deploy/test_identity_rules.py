"""The identity alerts: each tested firing and quiet, fully annotated, with its runbook."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.support import PROJECT_ROOT

PROJECT = PROJECT_ROOT
DEPLOY = PROJECT / "deploy" / "prometheus"
RULE_TESTS = sorted((DEPLOY / "tests").glob("*.yml"))
IDENTITY_RULES = DEPLOY / "rules" / "identity.yml"
ALERTS = [
    rule
    for group in yaml.safe_load(IDENTITY_RULES.read_text())["groups"]
    for rule in group["rules"]
    if "alert" in rule
]


def test_the_identity_rules_and_their_tests_are_picked_up() -> None:
    assert DEPLOY / "tests" / "identity_test.yml" in RULE_TESTS
    assert {a["alert"] for a in ALERTS} == {"TurnAuditChainBreak", "TurnAuditTurnsStillMissing"}


def test_every_identity_alert_is_annotated_and_has_its_runbook() -> None:
    for alert in ALERTS:
        annotations = alert["annotations"]
        assert {"summary", "description", "runbook_url"} <= set(annotations)
        base = "{{ $externalLabels.runbook_base }}"
        assert annotations["runbook_url"] == f"{base}/{alert['alert']}.md"
        runbook = PROJECT / "docs" / "runbooks" / f"{alert['alert']}.md"
        assert runbook.is_file()
        assert runbook.read_text().startswith(f"# {alert['alert']}")
        assert "service" in alert["labels"]


def test_every_identity_alert_is_tested_firing_and_quiet() -> None:
    cases = [
        case
        for group in yaml.safe_load(Path(DEPLOY / "tests" / "identity_test.yml").read_text())[
            "tests"
        ]
        for case in group["alert_rule_test"]
    ]
    for alert in ALERTS:
        mine = [c for c in cases if c["alertname"] == alert["alert"]]
        assert any(c["exp_alerts"] for c in mine)
        assert any(not c["exp_alerts"] for c in mine)
