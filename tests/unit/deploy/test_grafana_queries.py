"""The Grafana queries, read without a Prometheus: each rule's query stands alone (no
recording rule), the dashboard names no datasource uid and no job, and the promtool rule
tests the real-Prometheus check replays (tests/broker/deploy/test_grafana_prometheus.py)
cover every rules file."""

from __future__ import annotations

import json

import yaml

from tests.support import PROJECT_ROOT
from tests.support.grafana import datasource_refs, grafana_rules, prometheus_alerts
from tests.support.promdata import Case, rule_test_data

DASHBOARD_TEXT = (PROJECT_ROOT / "deploy/grafana/dashboards/turnaudit.json").read_text()


def test_every_prometheus_alert_is_a_grafana_rule_with_a_standalone_query() -> None:
    prom_rules, rules = prometheus_alerts(), grafana_rules()
    assert len(prom_rules) >= 16
    assert set(rules) == set(prom_rules)
    recorded = {
        rule["record"]
        for path in (PROJECT_ROOT / "deploy/prometheus/rules").glob("*.yml")
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
        if "record" in rule
    }
    assert recorded
    for name, rule in rules.items():
        expr = rule["data"][0]["model"]["expr"]
        assert not any(r in expr for r in recorded), (name, expr)


def test_the_dashboard_names_no_datasource_uid_and_no_job() -> None:
    board = json.loads(DASHBOARD_TEXT)
    uids = {ref["uid"] for _, ref in datasource_refs(board)}
    assert uids == {"${DS_PROMETHEUS}"}
    assert [i["name"] for i in board["__inputs"]] == ["DS_PROMETHEUS"]
    scrape = yaml.safe_load((PROJECT_ROOT / "deploy/prometheus/prometheus.yml").read_text())
    jobs = {job["job_name"] for job in scrape["scrape_configs"]}
    queries = [t["expr"] for p in board["panels"] for t in p["targets"]] + [
        v["query"] for v in board["templating"]["list"] if v["type"] == "query"
    ]
    for query in queries:
        assert not any(f'"{job}' in query or f"|{job}" in query for job in jobs), query


def test_cases_cover_every_rule_file() -> None:
    _, cases = rule_test_data()
    files = {case.file for case in cases}
    assert len(files) >= 3
    assert all(isinstance(case, Case) for case in cases)
