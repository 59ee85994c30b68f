"""Grafana as code: the turn-audit dashboard, its Grafana-managed alert rules and their
notification routing, generated from one definition with Grafana's foundation SDK.

    .venv/bin/python deploy/grafana/generate.py            # rewrite the files below
    .venv/bin/python deploy/grafana/generate.py --check    # exit 1 naming each file that differs
    .venv/bin/python deploy/grafana/generate.py --datasource-uid UID --out DIR
        # the alert rules for a Grafana whose Prometheus datasource has another uid

What it writes (under deploy/grafana/ unless --out):

* ``dashboards/turnaudit.json``: the dashboard. Every panel and variable reads the
  datasource ``${DS_PROMETHEUS}``: a datasource variable of that name when the file is
  provisioned (it picks the Grafana's Prometheus datasource, whatever its uid), and the
  ``__inputs`` entry Grafana's import asks for when the file is imported by hand. The
  service variable ``job`` lists the jobs that export turn-audit metrics, whatever the
  scrape configuration calls them.
* ``provisioning/alerting/turnaudit.yml``: one Grafana-managed rule per Prometheus alert of
  ``deploy/prometheus/rules/*.yml`` (same names, conditions, ``for``, labels, descriptions,
  runbooks), each query standing alone: the recording rules an alert reads are written
  into its query, so a Grafana in front of a Prometheus without this project's rules
  still evaluates it. Rules whose silence is the failure (``SILENCE_PAGES``) query a
  value that exists while all is well and page on no data.
* ``provisioning/alerting/notifications.yml``: the contact points and the notification
  policy (``severity=page`` to the page contact point within 10 s, the rest batched to
  tickets), the same routing as deploy/alertmanager/alertmanager.yml.

The Prometheus rule files are the one definition of every alert condition; this module
holds the dashboard's panels and, per alert, the panel it links to. The suite
(tests/unit/deploy/test_grafana_generated.py) regenerates and fails on any difference.
Needs only PyYAML and grafana-foundation-sdk (the project's ``dev`` extra), not turnaudit.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from grafana_foundation_sdk.builders import (
    alerting,
    bargauge,
    dashboard,
    prometheus,
    table,
    timeseries,
)
from grafana_foundation_sdk.builders import expr as sse
from grafana_foundation_sdk.builders.common import VizLegendOptions
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.alerting import RelativeTimeRange
from grafana_foundation_sdk.models.common import LegendDisplayMode, LegendPlacement
from grafana_foundation_sdk.models.dashboard import (
    DataSourceRef,
    DataTransformerConfig,
    GridPos,
    VariableOption,
    VariableRefresh,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent.parent
PROMETHEUS = PROJECT / "deploy" / "prometheus"

DASHBOARD_UID = "turnaudit-verdicts"
DASHBOARD_TITLE = "Turn audit: verdicts, integrity, consumers"
# The import input and the dashboard variable of the same name (see the module doc).
DS_INPUT = "DS_PROMETHEUS"
DS = DataSourceRef(type_val="prometheus", uid="${" + DS_INPUT + "}")
# The uid of deploy/grafana/provisioning/datasources/prometheus.yml: what the alert rules
# query (a Grafana-managed rule names a datasource uid; it cannot use a variable).
DEFAULT_DATASOURCE_UID = "turnaudit-prometheus"
GRAFANA_VERSION = "11.1.0"  # the image docker-compose.yml runs
FOLDER = "Turn audit"
RULE_INTERVAL = "1m"
# What every live query selects: a replay's series never reach a live panel or alert.
LIVE = 'job!="turnaudit-replay",replay=""'
WEBHOOK = "http://alert-webhook:9095"  # the example receiver of docker-compose.yml

OUTPUTS = {
    "dashboard": Path("dashboards/turnaudit.json"),
    "rules": Path("provisioning/alerting/turnaudit.yml"),
    "notifications": Path("provisioning/alerting/notifications.yml"),
}


# -- the dashboard -------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str = ""


@dataclass(frozen=True)
class PanelSpec:
    id: int
    title: str
    grid: tuple[int, int, int, int]  # x, y, w, h
    unit: str
    targets: Sequence[Target]
    description: str = ""
    kind: str = "timeseries"  # or "table" (instant, one row per series), "bargauge"


def _live(selector: str) -> str:
    """``{selector,LIVE}``: a panel's own matchers plus the live-only ones."""
    return "{" + (selector + "," if selector else "") + LIVE + "}"


J = _live('job=~"$job"')
P = _live('pack=~"$pack"')

PANELS: tuple[PanelSpec, ...] = (
    PanelSpec(
        15, "Firing alerts", (0, 0, 24, 8), "short",
        [Target('sum by (alertname, severity, pack, job, instance, contract, reason, kind) '
                '(ALERTS{alertstate="firing", alertname=~"TurnAudit.+"})', "{{alertname}}")],
        "Turn-audit alerts Prometheus has firing now, with the pack, service or runtime they "
        "name (routed by Alertmanager: severity=page pages, the rest are tickets).",
        kind="table",
    ),
    PanelSpec(
        1, "Refusal rate by pack", (0, 8, 12, 8), "percentunit",
        [Target(f"sum by (pack) (rate(turnaudit_refused_turns_total{P}[5m])) "
                f"/ sum by (pack) (rate(turnaudit_turns_total{P}[5m]))", "{{pack}}")],
        "Share of turns with refusal_emitted over 5 minutes (alert: TurnAuditRefusalRateHigh).",
    ),
    PanelSpec(
        2, "Hedge rate by pack", (12, 8, 12, 8), "percentunit",
        [Target(f"sum by (pack) (rate(turnaudit_hedged_turns_total{P}[5m])) "
                f"/ sum by (pack) (rate(turnaudit_turns_total{P}[5m]))", "{{pack}}")],
        "Share of turns with hedge_injected over 5 minutes (alert: TurnAuditHedgeRateHigh).",
    ),
    PanelSpec(
        3, "Refusal rate by domain", (0, 16, 12, 8), "percentunit",
        [Target(f"sum by (pack, domain) (rate(turnaudit_refused_turns_total{P}[5m])) "
                f"/ sum by (pack, domain) (rate(turnaudit_turns_total{P}[5m]))",
                "{{pack}}/{{domain}}")],
    ),
    PanelSpec(
        4, "Hedge rate by domain", (12, 16, 12, 8), "percentunit",
        [Target(f"sum by (pack, domain) (rate(turnaudit_hedged_turns_total{P}[5m])) "
                f"/ sum by (pack, domain) (rate(turnaudit_turns_total{P}[5m]))",
                "{{pack}}/{{domain}}")],
    ),
    PanelSpec(
        5, "Turns per second by path", (0, 24, 12, 8), "ops",
        [Target(f"sum by (path) (rate(turnaudit_turns_total{P}[5m]))", "{{path}}"),
         Target(f"sum(rate(turnaudit_stub_turns_total{P}[5m]))", "stub (all packs)")],
    ),
    PanelSpec(
        6, "Action risk by output policy", (12, 24, 12, 8), "ops",
        [Target(f"sum by (output_policy) (rate(turnaudit_action_risk_total{J}[5m]))",
                "{{output_policy}}")],
        "Read from action_risk_verdict, risk_tier and output_policy; never from "
        "execution_verdict.",
    ),
    PanelSpec(
        7, "Action risk by risk tier", (0, 32, 12, 8), "ops",
        [Target(f"sum by (risk_tier) (rate(turnaudit_action_risk_total{J}[5m]))",
                "{{risk_tier}}")],
    ),
    PanelSpec(
        8, "Contract breaches (last 1h)", (12, 32, 12, 8), "short",
        [Target(f"sum by (job, pack, contract) "
                f"(increase(turnaudit_contract_breaches_total{J}[1h]))",
                "{{job}} {{pack}} {{contract}}"),
         Target(f"sum by (pack, contract) (increase(turnaudit_publisher_breaches_total{J}[1h]))",
                "runtimes {{pack}} {{contract}}")],
        "Turns that broke a contract (docs/contracts.md), by service, pack and contract; they "
        "are counted as turns too (alerts: TurnAuditContractBreach, "
        "TurnAuditRuntimeContractBreach).",
        kind="bargauge",
    ),
    PanelSpec(
        9, "Sequence gaps and missing turns", (0, 40, 12, 8), "short",
        [Target(f"sum(increase(turnaudit_sequence_gaps_total{J}[5m]))", "gaps"),
         Target(f"sum(increase(turnaudit_sequence_missing_turns_total{J}[5m]))",
                "missing turns"),
         Target(f"sum(increase(turnaudit_redelivered_turns_total{J}[5m]))",
                "redelivered (explained)")],
        "Sessions whose sequence skipped numbers (alert: TurnAuditSequenceGaps).",
    ),
    PanelSpec(
        10, "Dead letters by reason", (12, 40, 12, 8), "short",
        [Target(f"sum by (job, reason) (increase(turnaudit_dead_letters_total{J}[5m]))",
                "{{job}} {{reason}}")],
        "Messages parked on the dead-letter topic (alert: TurnAuditDeadLettersGrowing).",
    ),
    PanelSpec(
        11, "Consumer lag by partition", (0, 48, 12, 8), "short",
        [Target(f"turnaudit_consumer_lag{J}", "{{job}} p{{partition}}")],
        "Messages each service is behind the end of its topic (alert: "
        "TurnAuditConsumerLagHigh).",
    ),
    PanelSpec(
        12, "Delay from turn to counted (p50, p99)", (12, 48, 12, 8), "s",
        [Target("histogram_quantile(0.5, sum by (le) "
                f"(rate(turnaudit_turn_count_delay_seconds_bucket{J}[5m])))", "p50"),
         Target("histogram_quantile(0.99, sum by (le) "
                f"(rate(turnaudit_turn_count_delay_seconds_bucket{J}[5m])))", "p99")],
    ),
    PanelSpec(
        13, "Log lines written per second", (0, 56, 12, 8), "ops",
        [Target(f"sum(rate(turnaudit_log_lines_total{J}[5m]))", "lines/s")],
    ),
    PanelSpec(
        14, "Service memory (resident)", (12, 56, 12, 8), "bytes",
        [Target('process_resident_memory_bytes{job=~"$job"}', "{{job}} {{instance}}"),
         Target('up{job=~"$job"} == 0', "DOWN {{job}} {{instance}}")],
        "Resident memory of each scraped service process; a DOWN line is a target "
        "Prometheus cannot scrape (alert: TurnAuditServiceDown).",
    ),
    PanelSpec(
        16, "Sink and dead-letter failures", (0, 64, 12, 8), "short",
        [Target(f"sum by (job) (increase(turnaudit_sink_failures_total{J}[5m]))",
                "sink failures {{job}}"),
         Target(f"sum by (job) (increase(turnaudit_dead_letter_failures_total{J}[5m]))",
                "dead-letter failures {{job}}")],
        "Batches a sink could not take (retried; alert TurnAuditSinkFailures) and dead "
        "letters the broker refused (alert TurnAuditDeadLetterFailures).",
    ),
    PanelSpec(
        17, "HTIR traces published", (12, 64, 12, 8), "short",
        [Target(f"sum by (closed_by) (rate(turnaudit_htir_traces_total{J}[5m]))",
                "{{closed_by}}")],
        "Traces the HTIR feeder published per second, by what closed them (end of task, "
        "idle timeout, shutdown).",
    ),
    PanelSpec(
        18, "HTIR open traces", (0, 72, 12, 8), "short",
        [Target(f"sum by (job) (turnaudit_htir_open_traces{J})", "open {{job}}"),
         Target(f"sum by (job) (turnaudit_htir_partial_turns_skipped{J})", "skipped {{job}}")],
        "Task runs the feeder is still assembling, and turns of already-published tasks it "
        "skipped.",
    ),
    PanelSpec(
        19, "Pack and domain labels named", (12, 72, 12, 8), "short",
        [Target(f"sum by (job, label) (turnaudit_metrics_label_values{J})", "{{label}} named"),
         Target(f"max by (job, label) (turnaudit_metrics_label_limit{J})", "{{label}} limit")],
        "Distinct pack and domain ids given their own series, against "
        "TURNAUDIT_METRICS_LABEL_LIMIT (alert TurnAuditMetricsLabelBoundReached).",
    ),
    PanelSpec(
        20, "Turn streams: new turns and redeliveries", (0, 80, 12, 8), "ops",
        [Target(f"sum by (job) (rate(turnaudit_new_turns_total{J}[5m]))", "{{job}} new"),
         Target(f"sum by (job) (rate(turnaudit_redelivered_turns_total{J}[5m]))",
                "{{job}} redelivered")],
        "Turns counted once by event id, and the same events read again (at-least-once "
        "redeliveries, not counted).",
    ),
    PanelSpec(
        21, "Turn streams: missing turns, chain breaks, key mismatches", (12, 80, 12, 8),
        "short",
        [Target(f"max by (job) (turnaudit_stream_missing_turns{J})", "{{job}} missing now"),
         Target(f"sum by (job, kind) (increase(turnaudit_chain_breaks_total{J}[1h]))",
                "{{job}} chain breaks ({{kind}}), 1h"),
         Target(f"sum by (job) (increase(turnaudit_key_mismatches_total{J}[1h]))",
                "{{job}} key mismatches, 1h")],
        "Positions still missing from ordered streams (alert TurnAuditTurnsStillMissing after "
        "15 minutes), hash-chain breaks (TurnAuditChainBreak) and messages whose key is not "
        "their session id.",
    ),
    PanelSpec(
        22, "Publisher: events/s by outcome", (0, 88, 12, 8), "ops",
        [Target(f"sum(rate(turnaudit_publisher_events_published_total{J}[5m]))", "published"),
         Target(f"sum(rate(turnaudit_publisher_events_delivered_total{J}[5m]))", "delivered"),
         Target(f"sum(rate(turnaudit_publisher_events_spooled_total{J}[5m]))", "spooled"),
         Target(f"sum by (reason) (rate(turnaudit_publisher_events_refused_total{J}[5m]))",
                "refused {{reason}}"),
         Target(f"sum(rate(turnaudit_publisher_events_failed_total{J}[5m]))", "failed"),
         Target(f"sum(rate(turnaudit_publisher_events_rejected_total{J}[5m]))",
                "rejected (DLQ)")],
        "What the runtimes' publishers did with turn events (alerts "
        "TurnAuditPublisherRefusing, TurnAuditPublisherDeadLettering, TurnAuditRuntimeSilent, "
        "TurnAuditStreamSilent).",
    ),
    PanelSpec(
        23, "Publisher spool: age of the oldest event", (12, 88, 12, 8), "s",
        [Target("max by (job, instance) "
                f"(turnaudit_publisher_spool_oldest_event_age_seconds{J})", "{{instance}}")],
        "How long the oldest spooled turn event has waited for the broker (alert "
        "TurnAuditPublisherSpooling at 10 minutes).",
    ),
    PanelSpec(
        24, "Publisher spool: events and bytes", (0, 96, 12, 8), "short",
        [Target(f"sum by (instance) (turnaudit_publisher_spool_events{J})",
                "{{instance}} events"),
         Target(f"sum by (instance) (turnaudit_publisher_spool_bytes{J})",
                "{{instance}} bytes")],
        "Turn events held on the runtimes' disks while the broker is away.",
    ),
    PanelSpec(
        25, "Publisher delivery latency p50 / p99", (12, 96, 12, 8), "s",
        [Target("histogram_quantile(0.5, sum by (le) "
                f"(rate(turnaudit_publisher_delivery_latency_seconds_bucket{J}[5m])))", "p50"),
         Target("histogram_quantile(0.99, sum by (le) "
                f"(rate(turnaudit_publisher_delivery_latency_seconds_bucket{J}[5m])))", "p99")],
        "From produce() to the broker's acknowledgement.",
    ),
)

# The job variable: every job that exports turn-audit metrics (services and runtimes),
# whatever the scrape configuration names them.
JOB_QUERY = 'label_values({__name__=~"turnaudit_.+",' + LIVE + "}, job)"
PACK_QUERY = "label_values(turnaudit_turns_total{" + LIVE + "}, pack)"


def _query(target: Target, ref: str, instant: bool) -> prometheus.Dataquery:
    query = prometheus.Dataquery().ref_id(ref).datasource(DS).expr(target.expr)
    if target.legend:
        query = query.legend_format(target.legend)
    if instant:
        query = query.instant().format(PromQueryFormat.TABLE)
    return query


def _panel(spec: PanelSpec) -> Any:
    x, y, w, h = spec.grid
    builder: Any
    if spec.kind == "table":
        builder = table.Panel().show_header(True).with_transformation(
            DataTransformerConfig(
                id_val="organize", options={"excludeByName": {"Time": True, "Value": True}}
            )
        )
    elif spec.kind == "bargauge":
        builder = bargauge.Panel()
    else:
        builder = timeseries.Panel().legend(
            VizLegendOptions()
            .display_mode(LegendDisplayMode.TABLE)
            .placement(LegendPlacement.RIGHT)
            .show_legend(True)
        )
    builder = (
        builder.id(spec.id).title(spec.title).datasource(DS).unit(spec.unit)
        .grid_pos(GridPos(h=h, w=w, x=x, y=y))
    )
    if spec.description:
        builder = builder.description(spec.description)
    for ref, target in zip("ABCDEFGH", spec.targets, strict=False):
        builder = builder.with_target(_query(target, ref, spec.kind == "table"))
    return builder


def _variable_all(name: str, label: str, query: str, all_value: str | None) -> Any:
    variable = (
        dashboard.QueryVariable(name).label(label).datasource(DS).query(query)
        .multi(True).include_all(True).refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .current(VariableOption(text="All", value="$__all", selected=True))
    )
    return variable.all_value(all_value) if all_value is not None else variable


def build_dashboard() -> dict[str, Any]:
    board = (
        dashboard.Dashboard(DASHBOARD_TITLE).uid(DASHBOARD_UID).tags(["turnaudit"])
        .timezone("utc").refresh("30s").time("now-1h", "now").readonly().version(3)
        .with_variable(
            dashboard.DatasourceVariable(DS_INPUT).label("Data source").type("prometheus")
        )
        # "All" services: the jobs the query found (not `.*`, which would take in every
        # job's process metrics); "All" packs: any pack.
        .with_variable(_variable_all("job", "Service", JOB_QUERY, None))
        .with_variable(_variable_all("pack", "Pack", PACK_QUERY, ".*"))
    )
    for spec in PANELS:
        board = board.with_panel(_panel(spec))
    built: dict[str, Any] = json.loads(JSONEncoder().encode(board.build()))
    built["templating"]["list"][0]["current"] = {}  # the Grafana's Prometheus datasource
    panel_types = sorted({p["type"] for p in built["panels"]})
    return {
        "__inputs": [
            {
                "name": DS_INPUT,
                "label": "Prometheus",
                "description": "The Prometheus that scrapes the turn-audit services and "
                "runtimes",
                "type": "datasource",
                "pluginId": "prometheus",
                "pluginName": "Prometheus",
            }
        ],
        "__requires": [
            {"type": "grafana", "id": "grafana", "name": "Grafana", "version": GRAFANA_VERSION},
            {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
            *[
                {"type": "panel", "id": kind, "name": kind, "version": ""}
                for kind in panel_types
            ],
        ],
        **built,
    }


# -- the alert rules -----------------------------------------------------------------------


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
    "TurnAuditPublisherRefusing": 22,
    "TurnAuditRuntimeSilent": 22,
    "TurnAuditStreamSilent": 22,
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
                            group["name"], rule["alert"], rule["expr"], rule.get("for", "0s"),
                            rule.get("labels", {}), rule.get("annotations", {}), path,
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
        text = re.sub(
            r"\{\{\s*\$value\s*\|\s*(\w+)\s*\}\}", r"{{ \1 $values.A.Value }}", text
        )
        text = re.sub(r"\{\{\s*\$value\s*\}\}", "{{ $values.A.Value }}", text)
        return re.sub(
            r"\{\{\s*\$externalLabels\.(\w+)\s*\}\}", lambda m: external[m.group(1)], text
        )

    out = {
        key: templated(value)
        for key, value in alert.annotations.items()
        if key != "dashboard"
    }
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
        .with_query(
            alerting.Query("B")
            .datasource_uid("__expr__")
            .model(_math("B", condition))
        )
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
            {"orgId": 1, "name": name, "folder": FOLDER, "interval": RULE_INTERVAL,
             "rules": rules}
            for name, rules in groups.items()
        ],
    }


# -- contact points and the notification policy ---------------------------------------------


def build_notifications() -> dict[str, Any]:
    def contact(name: str, path: str) -> dict[str, Any]:
        point = (
            alerting.ContactPoint().uid(name).name(name).type("webhook")
            .settings({"url": f"{WEBHOOK}/{path}", "httpMethod": "POST"})
            .disable_resolve_message(False)
        )
        built: dict[str, Any] = json.loads(JSONEncoder().encode(point.build()))
        return {
            "orgId": 1,
            "name": built.pop("name"),
            "receivers": [built],
        }

    policy = (
        alerting.NotificationPolicy()
        .receiver("turnaudit-ticket")
        .group_by(["grafana_folder", "alertname", "pack", "job"])
        .group_wait("30s").group_interval("5m").repeat_interval("12h")
        .routes([
            alerting.NotificationPolicy()
            .receiver("turnaudit-page")
            .object_matchers([["severity", "=", "page"]])
            .group_wait("10s").group_interval("1m").repeat_interval("1h")
        ])
    )
    return {
        "apiVersion": 1,
        "contactPoints": [contact("turnaudit-page", "page"), contact("turnaudit-ticket", "ticket")],
        "policies": [{"orgId": 1, **json.loads(JSONEncoder().encode(policy.build()))}],
    }


# -- files ---------------------------------------------------------------------------------

HEADERS = {
    "rules": (
        "# Generated by deploy/grafana/generate.py from deploy/prometheus/rules/*.yml: do not\n"
        "# edit; change the Prometheus rule (or the generator) and run it again.\n"
        "# Grafana-managed alert rules, one per Prometheus alert: query A stands alone (the\n"
        "# recording rules it reads are written in), B is the condition. Datasource: the\n"
        "# provisioned Prometheus (generate.py --datasource-uid UID for another). See\n"
        "# docs/alerting.md.\n"
    ),
    "notifications": (
        "# Generated by deploy/grafana/generate.py: do not edit. The contact points and the\n"
        "# notification policy of the Grafana-managed turn-audit rules: severity=page to\n"
        "# turnaudit-page, the rest batched to turnaudit-ticket (the routing of\n"
        "# deploy/alertmanager/alertmanager.yml). Both are webhooks on the example receiver\n"
        "# (compose service alert-webhook): point them at your paging and ticketing tools.\n"
        "# A provisioned policy replaces the organisation's whole policy tree.\n"
    ),
}


def render(datasource_uid: str = DEFAULT_DATASOURCE_UID) -> dict[str, str]:
    """Every output file's text, by output name."""

    def dump(data: Any) -> str:
        text: str = yaml.safe_dump(data, sort_keys=False, width=100, allow_unicode=True)
        return text

    return {
        "dashboard": json.dumps(build_dashboard(), indent=2, ensure_ascii=False) + "\n",
        "rules": HEADERS["rules"] + dump(build_rules(datasource_uid)),
        "notifications": HEADERS["notifications"] + dump(build_notifications()),
    }


def differences(out: Path = HERE, datasource_uid: str = DEFAULT_DATASOURCE_UID) -> Iterator[str]:
    for name, text in render(datasource_uid).items():
        path = out / OUTPUTS[name]
        current = path.read_text() if path.exists() else ""
        if current != text:
            diff = difflib.unified_diff(
                current.splitlines(), text.splitlines(), str(path), "generated", lineterm="", n=1
            )
            yield "\n".join(list(diff)[:40])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write (deploy/grafana)")
    parser.add_argument("--datasource-uid", default=DEFAULT_DATASOURCE_UID,
                        help="uid of the Prometheus datasource the alert rules query")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a file differs from what is generated")
    args = parser.parse_args(argv)
    if args.check:
        found = list(differences(args.out, args.datasource_uid))
        for diff in found:
            print(diff, file=sys.stderr)
        return 1 if found else 0
    for name, text in render(args.datasource_uid).items():
        path = args.out / OUTPUTS[name]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
