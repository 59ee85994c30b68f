"""Grafana-managed alert rules: the conditions of the Prometheus rules, linked to the dashboard."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from tests.support import PROJECT_ROOT

DEPLOY = PROJECT_ROOT / "deploy"
GRAFANA_RULES = DEPLOY / "grafana" / "provisioning" / "alerting" / "turnaudit.yml"
PROMETHEUS_RULES = DEPLOY / "prometheus" / "rules" / "turnaudit.yml"
DASHBOARD = json.loads((DEPLOY / "grafana" / "dashboards" / "turnaudit.json").read_text())
DATASOURCES = yaml.safe_load(
    (DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text()
)["datasources"]
EXTERNAL = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())["global"][
    "external_labels"
]


def prometheus_alerts() -> dict[str, dict[str, Any]]:
    return {
        rule["alert"]: rule
        for group in yaml.safe_load(PROMETHEUS_RULES.read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }


def grafana_rules() -> dict[str, dict[str, Any]]:
    provisioned = yaml.safe_load(GRAFANA_RULES.read_text())
    assert provisioned["apiVersion"] == 1
    return {rule["title"]: rule for group in provisioned["groups"] for rule in group["rules"]}


def test_every_prometheus_alert_has_a_grafana_rule_and_no_other() -> None:
    assert set(grafana_rules()) == set(prometheus_alerts())


@pytest.mark.parametrize("name", sorted(prometheus_alerts()))
def test_the_grafana_rule_is_the_same_condition(name: str) -> None:
    prom, graf = prometheus_alerts()[name], grafana_rules()[name]
    queries = {d["refId"]: d for d in graf["data"]}
    query = queries["A"]
    assert query["datasourceUid"] in {d["uid"] for d in DATASOURCES}
    assert query["model"]["expr"].split() == prom["expr"].split()
    assert query["model"]["instant"] is True
    condition = queries[graf["condition"]]
    assert condition["datasourceUid"] == "__expr__"
    assert condition["model"] == {"refId": "B", "type": "math", "expression": "$A == $A"}
    assert graf["for"] == prom.get("for", "0s")
    assert graf["labels"] == prom["labels"]
    assert graf["noDataState"] == "OK"  # no series returned: the condition does not hold


@pytest.mark.parametrize("name", sorted(prometheus_alerts()))
def test_the_grafana_rule_says_the_same_and_links_runbook_and_panel(name: str) -> None:
    prom, graf = prometheus_alerts()[name], grafana_rules()[name]
    annotations = graf["annotations"]
    assert annotations["description"] == prom["annotations"]["description"]
    assert annotations["runbook_url"] == f"{EXTERNAL['runbook_base']}/{name}.md"
    assert annotations["__dashboardUid__"] == DASHBOARD["uid"]
    panel_ids = {str(p["id"]) for p in DASHBOARD["panels"]}
    assert annotations["__panelId__"] in panel_ids
    # The summary differs only in how the value is written ($value vs $values.A.Value).
    assert without_value(annotations["summary"]) == without_value(prom["annotations"]["summary"])


def without_value(text: str) -> str:
    return re.sub(r"\{\{[^}]*\$value[^}]*\}\}", "VALUE", text)


def test_compose_mounts_the_alerting_provisioning() -> None:
    compose = yaml.safe_load((DEPLOY.parent / "docker-compose.yml").read_text())
    assert (
        "./deploy/grafana/provisioning:/etc/grafana/provisioning:ro"
        in (compose["services"]["grafana"]["volumes"])
    )
