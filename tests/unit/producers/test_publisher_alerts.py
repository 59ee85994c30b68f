"""The publisher's alert rules: each one runbooked, labelled, and tested by promtool both
firing and quiet (tests/broker/deploy/test_prometheus_rules.py runs promtool over every file)."""

from __future__ import annotations

import re
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from tests.support import PROJECT_ROOT
from turnaudit.producers.metrics import BreachMetrics, PublisherMetrics

RULES = PROJECT_ROOT / "deploy/prometheus/rules/publisher.yml"
RULE_TESTS = PROJECT_ROOT / "deploy/prometheus/tests/publisher_test.yml"
ALERTS = {
    "TurnAuditPublisherSpooling",
    "TurnAuditPublisherRefusing",
    "TurnAuditPublisherDeadLettering",
    "TurnAuditRuntimeContractBreach",
    "TurnAuditRuntimeSilent",
    "TurnAuditStreamSilent",
}


def alert_rules() -> list[dict[str, Any]]:
    return [
        rule
        for group in yaml.safe_load(RULES.read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    ]


def test_every_alert_names_its_service_and_runbook() -> None:
    rules = alert_rules()
    assert {r["alert"] for r in rules} == ALERTS
    for rule in rules:
        assert rule["labels"]["service"] == "turn-runtime"
        assert rule["labels"]["severity"] in ("page", "warning")
        annotations = rule["annotations"]
        assert annotations["summary"]
        assert annotations["description"]
        base = "{{ $externalLabels.runbook_base }}"
        assert annotations["runbook_url"] == f"{base}/{rule['alert']}.md"
        assert annotations["dashboard"].startswith("{{ $externalLabels.grafana_url }}/d/")
        runbook = PROJECT_ROOT / "docs" / "runbooks" / f"{rule['alert']}.md"
        assert runbook.read_text().startswith(f"# {rule['alert']}\n")


def test_every_alert_is_tested_firing_and_quiet() -> None:
    cases = [
        case
        for group in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in group.get("alert_rule_test", [])
    ]
    for alert in ALERTS:
        mine = [c for c in cases if c["alertname"] == alert]
        assert any(c["exp_alerts"] for c in mine), alert
        assert any(not c["exp_alerts"] for c in mine), alert


def test_the_rules_read_only_metrics_the_publisher_exports() -> None:
    registry = CollectorRegistry()
    PublisherMetrics(registry)
    BreachMetrics(registry, max_packs=10)  # the emitter's, on the runtime's registry
    exported = {family.name for family in registry.collect()}
    used = {
        name
        for rule in alert_rules()
        for name in re.findall(r"turnaudit_publisher_[a-z_]+", rule["expr"])
    }
    assert used
    for name in used:
        assert name.removesuffix("_total") in exported, name
