"""Every alert reaches a person with what they need: routing, runbook, dashboard, description.

Holds every rules file under deploy/prometheus/rules/ (whoever adds one) to the
convention: labels severity and service; annotations summary, description,
runbook_url (ending in /<AlertName>.md, a file in docs/runbooks/ that says
what to check and what to do) and dashboard. amtool checks the routing in
tests/broker/deploy/test_alertmanager_routing.py.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from tests.support import PROJECT_ROOT

PROMETHEUS = PROJECT_ROOT / "deploy" / "prometheus"
ALERTMANAGER = PROJECT_ROOT / "deploy" / "alertmanager" / "alertmanager.yml"
RUNBOOKS = PROJECT_ROOT / "docs" / "runbooks"
SEVERITIES = {"page", "warning"}


def alerts() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted((PROMETHEUS / "rules").glob("*.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    found.append((path.name, rule))
    return found


def test_there_are_alerts_and_the_delivered_one_is_among_them() -> None:
    names = {rule["alert"] for _, rule in alerts()}
    assert "TurnAuditRefusalRateHigh" in names
    assert {"TurnAuditSinkFailures", "TurnAuditDeadLetterFailures"} <= names


@pytest.mark.parametrize(("file", "rule"), alerts(), ids=[rule["alert"] for _, rule in alerts()])
def test_every_alert_carries_what_on_call_needs(file: str, rule: dict[str, Any]) -> None:
    name = rule["alert"]
    labels, annotations = rule.get("labels", {}), rule.get("annotations", {})
    assert labels.get("severity") in SEVERITIES, (file, name)
    assert labels.get("service"), (file, name, "no service label")
    for key in ("summary", "description", "runbook_url", "dashboard"):
        assert str(annotations.get(key, "")).strip(), (file, name, f"no {key}")
    assert annotations["description"] != annotations["summary"], (file, name)
    assert annotations["runbook_url"].endswith(f"/{name}.md"), (file, name)
    assert "://" in annotations["dashboard"] or "$externalLabels" in annotations["dashboard"]


@pytest.mark.parametrize(("file", "rule"), alerts(), ids=[rule["alert"] for _, rule in alerts()])
def test_every_alert_has_a_runbook_that_says_what_to_check_and_do(
    file: str, rule: dict[str, Any]
) -> None:
    runbook = RUNBOOKS / f"{rule['alert']}.md"
    assert runbook.is_file(), (file, f"missing {runbook.relative_to(PROJECT_ROOT)}")
    text = runbook.read_text()
    assert text.startswith(f"# {rule['alert']}\n"), runbook
    headings = set(re.findall(r"^## (.+)$", text, re.MULTILINE))
    assert {"What to check", "What to do"} <= headings, runbook
    # Relative links between runbooks and docs point at files that exist.
    for target in re.findall(r"\]\(([^)#:]+\.md)\)", text):
        assert (runbook.parent / target).resolve().is_file(), (runbook, target)


def test_every_runbook_belongs_to_an_alert() -> None:
    names = {rule["alert"] for _, rule in alerts()}
    pages = {p.stem for p in RUNBOOKS.glob("*.md")} - {"README"}
    assert pages <= names, pages - names


def test_the_links_resolve_from_prometheus_external_labels() -> None:
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    external = config["global"]["external_labels"]
    used = {
        m
        for _, rule in alerts()
        for value in rule["annotations"].values()
        for m in re.findall(r"\$externalLabels\.(\w+)", str(value))
    }
    assert used <= set(external), used - set(external)
    assert external["runbook_base"].endswith("/docs/runbooks")


def test_prometheus_sends_alerts_to_the_compose_alertmanager() -> None:
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    targets = [
        t
        for am in config["alerting"]["alertmanagers"]
        for s in am["static_configs"]
        for t in s["targets"]
    ]
    compose = yaml.safe_load((PROJECT_ROOT / "docker-compose.yml").read_text())["services"]
    assert targets == ["alertmanager:9093"]
    assert "alertmanager" in compose
    assert "./deploy/alertmanager:/etc/alertmanager:ro" in compose["alertmanager"]["volumes"]


def test_every_alert_severity_routes_to_a_receiver() -> None:
    config = yaml.safe_load(ALERTMANAGER.read_text())
    receivers = {r["name"] for r in config["receivers"]}
    assert {"page", "ticket"} <= receivers
    for receiver in config["receivers"]:
        assert receiver["webhook_configs"], receiver["name"]
