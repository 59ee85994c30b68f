"""The alert rules and their promtool tests, read: the refusal alert is tested firing and quiet,
every rule reads exported metrics (promtool itself runs them in
tests/broker/deploy/test_prometheus_rules.py)."""

from __future__ import annotations

import yaml

from tests.support import PROJECT_ROOT
from tests.support.exported import exported_sample_names, metric_names

DEPLOY = PROJECT_ROOT / "deploy" / "prometheus"
RULES = sorted((DEPLOY / "rules").glob("*.yml"))
RULE_TESTS = sorted((DEPLOY / "tests").glob("*.yml"))


def test_the_refusal_alert_is_tested_both_firing_and_quiet() -> None:
    cases = [
        case
        for f in RULE_TESTS
        for group in yaml.safe_load(f.read_text())["tests"]
        for case in group.get("alert_rule_test", [])
        if case["alertname"] == "TurnAuditRefusalRateHigh"
    ]
    assert any(case["exp_alerts"] for case in cases)
    assert any(not case["exp_alerts"] for case in cases)


def test_every_rule_reads_metrics_the_services_export() -> None:
    exported = exported_sample_names() | {"up"}
    recorded: set[str] = set()
    for path in RULES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                assert metric_names(rule["expr"]) <= exported | recorded, rule
                if "record" in rule:
                    recorded.add(rule["record"])
