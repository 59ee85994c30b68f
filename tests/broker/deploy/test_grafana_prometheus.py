"""Every Grafana rule query and every dashboard query, run against a real Prometheus
(``make promtool``; what needs no Prometheus is tests/unit/deploy/test_grafana_queries.py).

The Prometheus serves the promtool rule tests' series (tests/support/promdata.py) and a
steady state of every metric the services and publishers export, scraped under job names
that are not the compose ones. Two claims:

* Each Grafana-managed rule fires, at every moment the promtool tests evaluate its alert,
  for exactly the series the Prometheus alert's expression returns: its query alone (no
  recording rule is loaded in this Prometheus) and its condition, as Grafana evaluates it.
  Every alert of deploy/prometheus/rules/ has a Grafana rule and is seen both firing and
  quiet; a rule whose silence is the failure pages when its query has no data at all.
* The dashboard, copied unchanged into a clean provisioning folder whose Prometheus
  datasource has another uid (and is not the default datasource), resolves every panel and
  every variable to that datasource, both as Grafana's file provisioning does (the
  ``DS_PROMETHEUS`` datasource variable) and as its import does (``__inputs``); every panel
  query then runs, with the variables' values, against that datasource's Prometheus and
  returns data.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import PROJECT_ROOT
from tests.support.exported import exported_sample_names
from tests.support.grafana import alert_rules, datasource_refs, grafana_rules, prometheus_alerts
from tests.support.promdata import (
    BASE,
    GROUP_SPAN,
    Case,
    PrometheusAt,
    Samples,
    prometheus_over,
    rule_test_data,
)

GRAFANA = PROJECT_ROOT / "deploy/grafana"
DASHBOARD_TEXT = (GRAFANA / "dashboards/turnaudit.json").read_text()
PROM_RULES = prometheus_alerts()
GRAFANA_RULES = grafana_rules()
NO_DATA = (("__no_data__", "1"),)  # the one alert instance of a rule in its NoData state

pytestmark = pytest.mark.broker  # the integration tier: Debian's promtool and Prometheus

SAMPLES, CASES = rule_test_data()
STEADY = BASE + (len({(c.file, c.group) for c in CASES}) + 40) * GROUP_SPAN
STEADY_AT = STEADY + 30 * 60
SERVICE_JOB, RUNTIME_JOB = "audit-consumers-eu", "chat-runtime-eu"


def steady_state(samples: Samples) -> None:
    """Every exported metric, as a running system under other job names would export it."""
    labels = {
        "instance": "c-0",
        "pack": "general",
        "domain": "howto",
        "path": "MAIN",
        "output_policy": "DOMAIN_SEAL",
        "risk_tier": "LOW",
        "contract": "stub_fields",
        "reason": "undecodable",
        "partition": "0",
        "topic": "turn-audit.turn-events",
        "closed_by": "end_of_task",
        "label": "pack",
        "kind": "chain",
        "cause": "crash",  # verify --follow's lost turns, by cause
        "runtime": "chat-runtime",
        "state": "overdue",
    }
    minutes = range(41)
    for name in sorted(exported_sample_names() - {"up", "ALERTS"}):
        if name.endswith("_created"):
            continue
        job = RUNTIME_JOB if "publisher" in name else SERVICE_JOB
        counting = name.endswith(("_total", "_count", "_sum", "_bucket"))
        for le in ("0.5", "+Inf") if name.endswith("_bucket") else (None,):
            extra = {"le": le} if le else {}
            rate = 5.0 if le == "0.5" else 10.0
            samples.add(
                name,
                {**labels, "job": job, **extra},
                [(STEADY + 60 * m, rate * m if counting else 3.0) for m in minutes],
            )
    for job, instance, value in (
        (SERVICE_JOB, "c-0", 1.0),
        (SERVICE_JOB, "c-1", 0.0),
        (RUNTIME_JOB, "rt-0", 1.0),
        ("verdict-metrics", "verdict-metrics:9308", 1.0),
    ):
        samples.add(
            "up", {"job": job, "instance": instance}, [(STEADY + 60 * m, value) for m in minutes]
        )
    samples.add(
        "ALERTS",
        {
            "alertname": "TurnAuditRefusalRateHigh",
            "alertstate": "firing",
            "severity": "page",
            "service": "turnaudit",
            "pack": "general",
        },
        [(STEADY + 60 * m, 1.0) for m in minutes],
    )


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusAt]:
    steady_state(SAMPLES)
    with prometheus_over(SAMPLES, tmp_path_factory.mktemp("prometheus")) as server:
        yield server


# -- the Grafana rules ---------------------------------------------------------------------


def label_sets(result: list[dict[str, Any]]) -> set[tuple[tuple[str, str], ...]]:
    return {
        tuple(sorted((k, v) for k, v in s["metric"].items() if k != "__name__")) for s in result
    }


_MATH = re.compile(r"\$A\s*(==|!=|<=|>=|<|>)\s*(\$A|-?[\d.]+)")


def holds(condition: str, value: float) -> bool:
    """A Grafana math condition on one series of an instant query ($A OP $A | number)."""
    match = _MATH.fullmatch(condition.strip())
    assert match, f"the model knows `$A OP $A|number` only, not {condition!r}"
    op, right = match.groups()
    other = value if right == "$A" else float(right)
    if math.isnan(value) or math.isnan(other):
        return op == "!="
    return {
        "==": value == other,
        "!=": value != other,
        "<": value < other,
        ">": value > other,
        "<=": value <= other,
        ">=": value >= other,
    }[op]


def grafana_fires(prom: PrometheusAt, rule: Mapping[str, Any], at: float) -> set[Any]:
    """The alert instances a Grafana rule evaluation at ``at`` is Alerting (before ``for``)."""
    data = {d["refId"]: d for d in rule["data"]}
    query = data["A"]
    assert query["model"]["instant"] is True
    result = prom.query(query["model"]["expr"], at)
    condition = data[rule["condition"]]
    assert condition["datasourceUid"] == "__expr__"
    assert condition["model"]["type"] == "math"
    if not result:
        return {NO_DATA} if rule["noDataState"] == "Alerting" else set()
    return {
        labels
        for series, labels in zip(
            result, [next(iter(label_sets([s]))) for s in result], strict=True
        )
        if holds(condition["model"]["expression"], float(series["value"][1]))
    }


def test_grafana_rules_fire_where_the_prometheus_alerts_do(prom: PrometheusAt) -> None:
    seen: dict[str, set[str]] = {name: set() for name in PROM_RULES}
    # The promtool tests' moments, and every rule in the steady state of a running system.
    steady = [Case("steady state", -1, STEADY_AT, name, []) for name in sorted(PROM_RULES)]
    for case in [*CASES, *steady]:
        prom_rule, rule = PROM_RULES[case.alertname], GRAFANA_RULES[case.alertname]
        # This Prometheus evaluates no rule: the recording rules an alert reads are written
        # in (promtool's expectations below come from the real recording rules).
        expr = alert_rules().standalone(prom_rule["expr"], alert_rules().recording_rules())
        expected_by_prometheus = label_sets(prom.query(expr, case.at))
        fired = grafana_fires(prom, rule, case.at)
        where = (case.file, case.group, case.at - BASE, case.alertname)
        if fired == {NO_DATA}:
            # Nothing to evaluate at all: Prometheus has nothing either; Grafana pages.
            assert expected_by_prometheus == set(), where
            seen[case.alertname].add("no data")
            continue
        assert fired == expected_by_prometheus, (where, fired, expected_by_prometheus)
        seen[case.alertname].add("firing" if fired else "quiet")
        # What promtool expects (after `for`) is among what the expression returns.
        rule_labels = set(prom_rule.get("labels", {})) | {"alertname"}
        for alert in case.expected:
            wanted = {(k, v) for k, v in alert.items() if k not in rule_labels}
            assert any(wanted <= set(s) for s in fired), (where, alert, fired)
    missing = {name: kinds for name, kinds in seen.items() if not {"firing", "quiet"} <= kinds}
    assert not missing, f"alerts not seen both firing and quiet: {missing}"
    print(f"{len(CASES)} moments, {len(seen)} of {len(PROM_RULES)} alerts seen firing and quiet")


def test_silence_pages_where_it_is_the_failure(prom: PrometheusAt) -> None:
    nothing = BASE - GROUP_SPAN  # before any series
    paging = {name for name, rule in GRAFANA_RULES.items() if rule["noDataState"] == "Alerting"}
    assert paging == {"TurnAuditServiceDown", "TurnAuditStreamSilent"}
    for name, rule in GRAFANA_RULES.items():
        assert rule["execErrState"] == "Error"
        expected = {NO_DATA} if name in paging else set()
        assert grafana_fires(prom, rule, nothing) == expected, name
    # A running system under other job names: one service target down, traffic delivered.
    down = grafana_fires(prom, GRAFANA_RULES["TurnAuditServiceDown"], STEADY_AT)
    assert down == set()  # the shipped rule names the compose jobs: see docs/alerting.md
    assert grafana_fires(prom, GRAFANA_RULES["TurnAuditStreamSilent"], STEADY_AT) == set()


# -- the dashboard in another Grafana --------------------------------------------------------

OTHER_UID = "metrics-eu-7f3c"


def provisioning_folder(root: Path, prometheus_url: str) -> Path:
    """A clean provisioning folder: the dashboard file unchanged, a Prometheus with another
    uid, not the default datasource (a Loki is)."""
    (root / "datasources").mkdir(parents=True)
    (root / "datasources/datasources.yml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": 1,
                "datasources": [
                    {
                        "name": "Logs",
                        "uid": "logs",
                        "type": "loki",
                        "url": "http://loki:3100",
                        "isDefault": True,
                    },
                    {
                        "name": "Metrics EU",
                        "uid": OTHER_UID,
                        "type": "prometheus",
                        "url": prometheus_url,
                    },
                ],
            }
        )
    )
    (root / "dashboards").mkdir()
    shutil.copy(GRAFANA / "dashboards/turnaudit.json", root / "dashboards/turnaudit.json")
    (root / "dashboards/provider.yml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": 1,
                "providers": [
                    {"name": "t", "type": "file", "options": {"path": str(root / "dashboards")}}
                ],
            }
        )
    )
    return root


class GrafanaModel:
    """How Grafana resolves a dashboard's datasource references: by uid, or through a
    datasource variable (its current value when it names a datasource of the variable's
    type, else the default datasource of that type, else the first)."""

    def __init__(self, datasources: list[dict[str, Any]], board: dict[str, Any]) -> None:
        self.datasources = datasources
        self.variables = {v["name"]: v for v in board["templating"]["list"]}

    def resolve(self, ref: Mapping[str, str]) -> dict[str, Any]:
        uid = ref["uid"]
        variable = re.fullmatch(r"\$\{(\w+)\}|\$(\w+)", uid)
        if variable is None:
            found = [d for d in self.datasources if d["uid"] == uid]
            assert found, f"no datasource with uid {uid}"
            return found[0]
        name = variable.group(1) or variable.group(2)
        var = self.variables.get(name)
        assert var is not None, f"{uid}: no variable"
        assert var["type"] == "datasource", f"{uid}: not a datasource variable"
        typed = [d for d in self.datasources if d["type"] == var["query"]]
        assert typed, f"no {var['query']} datasource"
        current = (var.get("current") or {}).get("value")
        chosen = [d for d in typed if current in (d["uid"], d["name"])]
        chosen = chosen or [d for d in typed if d.get("isDefault")] or typed
        return chosen[0]


def imported(text: str, chosen_uid: str) -> dict[str, Any]:
    """Grafana's import: every ``${INPUT}`` of ``__inputs`` replaced by the chosen value."""
    board = json.loads(text)
    for entry in board["__inputs"]:
        assert entry["type"] == "datasource"
        assert entry["pluginId"] == "prometheus"
        text = text.replace("${" + entry["name"] + "}", chosen_uid)
    result: dict[str, Any] = json.loads(text)
    return result


def interpolate(expr: str, values: Mapping[str, str]) -> str:
    for name, value in values.items():
        expr = expr.replace("${" + name + "}", value).replace("$" + name, value)
    assert "$" not in expr.replace("$__", ""), expr
    return expr


def variable_values(prom: PrometheusAt, board: dict[str, Any]) -> dict[str, str]:
    """Each query variable at "All": its allValue, or its values as Grafana joins them."""
    values: dict[str, str] = {}
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", variable["query"])
        assert match, variable["query"]
        found = prom.label_values(match.group(2), match.group(1), STEADY, STEADY_AT)
        assert found, (variable["name"], variable["query"])
        values[variable["name"]] = variable.get("allValue") or (
            "(" + "|".join(re.sub(r"([\\^$.|?*+()\[\]{}])", r"\\\1", v) for v in found) + ")"
        )  # Grafana's escaping of regex characters in a multi-value
    return values


@pytest.mark.parametrize("how", ["provisioned", "imported"])
def test_the_dashboard_resolves_every_panel_with_another_datasource_uid(
    prom: PrometheusAt, tmp_path: Path, how: str
) -> None:
    folder = provisioning_folder(tmp_path / "provisioning", prom.url)
    datasources = yaml.safe_load((folder / "datasources/datasources.yml").read_text())[
        "datasources"
    ]
    text = (folder / "dashboards/turnaudit.json").read_text()
    assert text == DASHBOARD_TEXT
    board = json.loads(text) if how == "provisioned" else imported(text, OTHER_UID)
    grafana = GrafanaModel(datasources, board)
    for where, ref in datasource_refs(board):
        resolved = grafana.resolve(ref)
        assert resolved["uid"] == OTHER_UID, (where, ref, resolved)
    values = variable_values(prom, board)
    assert SERVICE_JOB in values["job"]
    assert RUNTIME_JOB in values["job"]
    answered = 0
    for panel in board["panels"]:
        url = grafana.resolve(panel["datasource"])["url"]
        assert url == prom.url
        for target in panel["targets"]:
            expr = interpolate(target["expr"], values)
            assert PrometheusAt(url).query(expr, STEADY_AT), (panel["title"], expr)
            answered += 1
    assert answered == sum(len(p["targets"]) for p in board["panels"])
    print(f"{how}: {len(board['panels'])} panels, {answered} queries answered via {OTHER_UID}")
