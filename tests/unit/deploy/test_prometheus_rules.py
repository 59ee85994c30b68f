"""The alert rules: promtool checks them and runs their unit tests (refusal alert fires/quiet)."""

from __future__ import annotations

import shutil
import subprocess

import yaml

from tests.support import PROJECT_ROOT
from tests.support.exported import exported_sample_names, metric_names

DEPLOY = PROJECT_ROOT / "deploy" / "prometheus"
RULES = sorted((DEPLOY / "rules").glob("*.yml"))
RULE_TESTS = sorted((DEPLOY / "tests").glob("*.yml"))


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    assert tool is not None, "promtool not found: run `make promtool` (Debian package prometheus)"
    return subprocess.run([tool, *args], capture_output=True, text=True, check=False)


def test_promtool_checks_the_rules_and_the_config() -> None:
    assert RULES
    rules = promtool("check", "rules", *map(str, RULES))
    assert rules.returncode == 0, rules.stdout + rules.stderr
    config = promtool("check", "config", str(DEPLOY / "prometheus.yml"))
    assert config.returncode == 0, config.stdout + config.stderr


def test_promtool_rule_unit_tests_pass() -> None:
    assert RULE_TESTS
    result = promtool("test", "rules", *map(str, RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    tested = {
        case["alertname"]
        for f in RULE_TESTS
        for group in yaml.safe_load(f.read_text())["tests"]
        for case in group.get("alert_rule_test", [])
    }
    assert "TurnAuditRefusalRateHigh" in tested


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
