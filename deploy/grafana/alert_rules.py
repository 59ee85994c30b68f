"""The Grafana-managed alert rules, one per Prometheus alert of deploy/prometheus/rules/*.yml:
the same names, conditions, ``for``, labels and descriptions, each query standing alone
(recording rules written in), rules whose silence is the failure paging on no data, and per
alert the dashboard panel its notification links to."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from grafana_foundation_sdk.builders import alerting, prometheus
from grafana_foundation_sdk.builders import expr as sse
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.alerting import RelativeTimeRange
from panel_spec import DASHBOARD_UID, LIVE

PROMETHEUS = Path(__file__).resolve().parent.parent / "prometheus"
# The uid of deploy/grafana/provisioning/datasources/prometheus.yml: what the alert rules
# query (a Grafana-managed rule names a datasource uid; it cannot use a variable).
DEFAULT_DATASOURCE_UID = "turnaudit-prometheus"
FOLDER = "Turn audit"
RULE_INTERVAL = "1m"


@dataclass(frozen=True)
class Silence:
    """A rule whose silence is the failure: query ``value`` returns a series while all is
    well; ``condition`` (a Grafana math expression on ``$A``) holds where the Prometheus
    alert's expression returns one; no data at all pages."""

    value: str
    condition: str


@dataclass(frozen=True)
class PrometheusAlert:
    group: str
    name: str
    expr: str
    hold: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    source: Path


@dataclass(frozen=True)
class GrafanaAlertSpec:
    alert: PrometheusAlert
    expr: str  # the Prometheus expression, recording rules written in
    panel: int
    silence: Silence | None = None
    extra: dict[str, str] = field(default_factory=dict)


# Per alert, the dashboard panel its notification links to; an alert not named here links
# to the firing-alerts panel (FIRING_PANEL).
FIRING_PANEL = 15
ALERT_PANELS: Mapping[str, int] = {
    "TurnAuditRefusalRateHigh": 1,
    "TurnAuditHedgeRateHigh": 2,
    "TurnAuditContractBreach": 8,
    "TurnAuditRuntimeContractBreach": 8,
    "TurnAuditPublisherDeadLettering": 22,
    "TurnAuditSequenceGaps": 9,
    "TurnAuditDeadLettersGrowing": 10,
    "TurnAuditDeadLetterFailures": 16,
    "TurnAuditSinkFailures": 16,
    "TurnAuditConsumerLagHigh": 11,
    "TurnAuditServiceDown": 14,
    "TurnAuditMetricsLabelBoundReached": 19,
    "TurnAuditChainBreak": 21,
    "TurnAuditTurnsStillMissing": 21,
    "TurnAuditPublisherSpooling": 23,
    "TurnAuditArchiveBehindRetention": 35,
    "TurnAuditArchiveDigestStale": 34,
    "TurnAuditPublisherRefusing": 22,
    "TurnAuditRuntimeSilent": 22,
    "TurnAuditStreamSilent": 22,
    "TurnAuditForgedStream": 26,
    "TurnAuditVerifyTurnsLost": 28,
    "TurnAuditVerifyTurnsLostInCrash": 28,
    "TurnAuditVerifyProducerVanished": 29,
}

_DELIVERED = "turnaudit_publisher_events_delivered_total{" + LIVE + "}"


def _service_down_silence(expr: str) -> Silence:
    selector = re.fullmatch(r"\s*(up\{[^}]*\})\s*==\s*0\s*", expr)
    if selector is None:
        raise SystemExit(f"TurnAuditServiceDown: expected `up{{...}} == 0`, found {expr!r}")
    # Every scraped service: 1 up, 0 down. No series at all: nothing is scraped.
    return Silence(selector.group(1), "$A < 1")


SILENCE_PAGES: Mapping[str, Any] = {
    "TurnAuditServiceDown": _service_down_silence,
    # 0 while turn events are delivered; the delivered count of the hour before while none
    # has been for 10 minutes; no data at all when no publisher is scraped: the stream and
    # every verdict alert are blind.
    "TurnAuditStreamSilent": lambda expr: Silence(
        f"({expr.strip()}) or (sum(increase({_DELIVERED}[10m])) * 0)", "$A > 0"
    ),
}


def prometheus_alerts(rules_dir: Path = PROMETHEUS / "rules") -> list[PrometheusAlert]:
    alerts = []
    for path in sorted(rules_dir.glob("*.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    alerts.append(
                        PrometheusAlert(
                            group["name"],
                            rule["alert"],
                            rule["expr"],
                            rule.get("for", "0s"),
                            rule.get("labels", {}),
                            rule.get("annotations", {}),
                            path,
                        )
                    )
    return alerts


def recording_rules(rules_dir: Path = PROMETHEUS / "rules") -> dict[str, str]:
    return {
        rule["record"]: rule["expr"]
        for path in sorted(rules_dir.glob("*.yml"))
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
        if "record" in rule
    }


def standalone(expr: str, recorded: Mapping[str, str]) -> str:
    """``expr`` with every recording rule it reads written in, parenthesised: a query any
    Prometheus answers, with or without this project's rules loaded."""
    out = " ".join(expr.split())
    for name, definition in recorded.items():
        pattern = re.compile(r"(?<![\w:])" + re.escape(name) + r"(?![\w:])(\{[^}]*\})?")

        def inline(match: re.Match[str], definition: str = definition, name: str = name) -> str:
            if match.group(1):
                raise SystemExit(f"recording rule {name} read with matchers: write it in by hand")
            return "(" + " ".join(definition.split()) + ")"

        out = pattern.sub(inline, out)
    return out


def external_labels() -> dict[str, str]:
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    labels: dict[str, str] = config["global"]["external_labels"]
    return labels


def grafana_annotations(alert: PrometheusAlert, panel: int) -> dict[str, str]:
    """Prometheus annotations in Grafana's terms: ``$value`` is ``$values.A.Value``, the
    external labels written out, the dashboard link Grafana's own (dashboard uid, panel)."""
    external = external_labels()

    def templated(text: str) -> str:
        text = re.sub(r"\{\{\s*\$value\s*\|\s*(\w+)\s*\}\}", r"{{ \1 $values.A.Value }}", text)
        text = re.sub(r"\{\{\s*\$value\s*\}\}", "{{ $values.A.Value }}", text)
        return re.sub(
            r"\{\{\s*\$externalLabels\.(\w+)\s*\}\}", lambda m: external[m.group(1)], text
        )

    out = {key: templated(value) for key, value in alert.annotations.items() if key != "dashboard"}
    out["__dashboardUid__"] = DASHBOARD_UID
    out["__panelId__"] = str(panel)
    return out


def grafana_specs() -> list[GrafanaAlertSpec]:
    recorded = recording_rules()
    specs = []
    for alert in prometheus_alerts():
        expr = standalone(alert.expr, recorded)
        silence = SILENCE_PAGES[alert.name](expr) if alert.name in SILENCE_PAGES else None
        panel = ALERT_PANELS.get(alert.name, FIRING_PANEL)
        specs.append(GrafanaAlertSpec(alert, expr, panel, silence))
    return specs


def rule_uid(name: str) -> str:
    """``TurnAuditRefusalRateHigh`` -> ``turn-audit-refusal-rate-high`` (at most 40 chars)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower()[:40]


def build_rule(spec: GrafanaAlertSpec, datasource_uid: str) -> dict[str, Any]:
    query = spec.silence.value if spec.silence else spec.expr
    condition = spec.silence.condition if spec.silence else "$A == $A"
    rule = (
        alerting.Rule(spec.alert.name)
        .uid(rule_uid(spec.alert.name))
        .condition("B")
        .with_query(
            alerting.Query("A")
            .datasource_uid(datasource_uid)
            .relative_time_range(RelativeTimeRange(from_val=600, to=0))
            .model(prometheus.Dataquery().ref_id("A").expr(query).instant())
        )
        .with_query(alerting.Query("B").datasource_uid("__expr__").model(_math("B", condition)))
        # No series: the condition does not hold, except where silence is the failure.
        .no_data_state("Alerting" if spec.silence else "OK")
        .exec_err_state("Error")
        .for_val(spec.alert.hold)
        .labels(dict(spec.alert.labels))
        .annotations(grafana_annotations(spec.alert, spec.panel))
    )
    built: dict[str, Any] = json.loads(JSONEncoder().encode(rule.build()))
    for key in ("folderUID", "ruleGroup", "orgID"):  # given by the group in the file
        built.pop(key, None)
    built["data"][1].pop("relativeTimeRange", None)
    return built


def _math(ref: str, expression: str) -> Any:
    return sse.TypeMath().ref_id(ref).expression(expression)


def build_rules(datasource_uid: str = DEFAULT_DATASOURCE_UID) -> dict[str, Any]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for spec in grafana_specs():
        groups.setdefault(spec.alert.group, []).append(build_rule(spec, datasource_uid))
    return {
        "apiVersion": 1,
        "groups": [
            {"orgId": 1, "name": name, "folder": FOLDER, "interval": RULE_INTERVAL, "rules": rules}
            for name, rules in groups.items()
        ],
    }
