"""The alert rules, run by Debian's promtool (``make promtool``): it checks them and the
scrape configuration, and their unit tests pass (the refusal alert's among them)."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.support import PROJECT_ROOT
from tests.support.realparts import binary

pytestmark = pytest.mark.broker  # the integration tier: promtool, no broker

DEPLOY = PROJECT_ROOT / "deploy" / "prometheus"
RULES = sorted((DEPLOY / "rules").glob("*.yml"))
RULE_TESTS = sorted((DEPLOY / "tests").glob("*.yml"))


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary("promtool", "promtool"), *args], capture_output=True, text=True, check=False
    )


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
