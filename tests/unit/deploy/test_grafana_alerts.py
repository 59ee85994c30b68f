"""Grafana-managed alert rules: the conditions of the Prometheus rules, linked to the dashboard,
routed by a provisioned contact point and notification policy."""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

import pytest
import yaml

from tests.support import PROJECT_ROOT
from tests.support.exported import exported_sample_names, metric_names

DEPLOY = PROJECT_ROOT / "deploy"
GRAFANA_RULES = DEPLOY / "grafana" / "provisioning" / "alerting" / "turnaudit.yml"
NOTIFICATIONS = DEPLOY / "grafana" / "provisioning" / "alerting" / "notifications.yml"
PROMETHEUS_RULES = sorted((DEPLOY / "prometheus" / "rules").glob("*.yml"))
DASHBOARD = json.loads((DEPLOY / "grafana" / "dashboards" / "turnaudit.json").read_text())
DATASOURCES = yaml.safe_load(
    (DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text()
)["datasources"]
EXTERNAL = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())["global"][
    "external_labels"
]
COMPOSE = yaml.safe_load((PROJECT_ROOT / "docker-compose.yml").read_text())
SILENCE_PAGES = {"TurnAuditServiceDown", "TurnAuditStreamSilent"}


# The rule files are parsed once for the module (the tests only read them): the Grafana
# file is long and every parametrized case reads it.
@cache
def prometheus_alerts() -> dict[str, dict[str, Any]]:
    return {
        rule["alert"]: rule
        for path in PROMETHEUS_RULES
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }


@cache
def grafana_rules() -> dict[str, dict[str, Any]]:
    provisioned = yaml.safe_load(GRAFANA_RULES.read_text())
    assert provisioned["apiVersion"] == 1
    return {rule["title"]: rule for group in provisioned["groups"] for rule in group["rules"]}


def test_every_prometheus_alert_has_a_grafana_rule_and_no_other() -> None:
    assert len(prometheus_alerts()) >= 16
    assert set(grafana_rules()) == set(prometheus_alerts())


@pytest.mark.parametrize("name", sorted(prometheus_alerts()))
def test_the_grafana_rule_holds_the_same_condition(name: str) -> None:
    prom, graf = prometheus_alerts()[name], grafana_rules()[name]
    queries = {d["refId"]: d for d in graf["data"]}
    query = queries["A"]
    assert query["datasourceUid"] in {d["uid"] for d in DATASOURCES}
    assert query["model"]["instant"] is True
    # It stands alone: only metrics the services and publishers export, no recording rule.
    assert metric_names(query["model"]["expr"]) <= exported_sample_names()
    condition = queries[graf["condition"]]
    assert condition["datasourceUid"] == "__expr__"
    assert condition["model"]["type"] == "math"
    if name in SILENCE_PAGES:
        assert graf["noDataState"] == "Alerting"  # no series at all: the silence is the fault
    else:
        assert condition["model"]["expression"] == "$A == $A"
        assert graf["noDataState"] == "OK"  # no series returned: the condition does not hold
    assert graf["for"] == prom.get("for", "0s")
    assert graf["labels"] == prom["labels"]


@pytest.mark.parametrize("name", sorted(prometheus_alerts()))
def test_the_grafana_rule_says_the_same_and_links_runbook_and_panel(name: str) -> None:
    prom, graf = prometheus_alerts()[name], grafana_rules()[name]
    annotations = graf["annotations"]
    assert without_value(annotations["description"]) == without_value(
        prom["annotations"]["description"]
    )
    assert annotations["runbook_url"] == f"{EXTERNAL['runbook_base']}/{name}.md"
    assert annotations["__dashboardUid__"] == DASHBOARD["uid"]
    panel_ids = {str(p["id"]) for p in DASHBOARD["panels"]}
    assert annotations["__panelId__"] in panel_ids
    # The summary differs only in how the value is written ($value vs $values.A.Value).
    assert without_value(annotations["summary"]) == without_value(prom["annotations"]["summary"])


def without_value(text: str) -> str:
    return re.sub(r"\{\{[^}]*\$value[^}]*\}\}", "VALUE", text)


def test_a_contact_point_and_a_policy_route_every_rule() -> None:
    provisioned = yaml.safe_load(NOTIFICATIONS.read_text())
    points = {p["name"]: p for p in provisioned["contactPoints"]}
    (policy,) = provisioned["policies"]
    assert policy["receiver"] in points
    (page,) = policy["routes"]
    assert page["object_matchers"] == [["severity", "=", "page"]]
    assert page["receiver"] in points
    assert page["group_wait"] == "10s"
    severities = {rule["labels"]["severity"] for rule in grafana_rules().values()}
    assert severities == {"page", "warning"}
    port = COMPOSE["services"]["alert-webhook"]["command"][-1]
    for name, point in points.items():
        (receiver,) = point["receivers"]
        assert receiver["type"] == "webhook"
        assert receiver["settings"]["url"].startswith(f"http://alert-webhook:{port}/"), name


def test_compose_mounts_the_alerting_provisioning() -> None:
    assert (
        "./deploy/grafana/provisioning:/etc/grafana/provisioning:ro"
        in (COMPOSE["services"]["grafana"]["volumes"])
    )
