"""The provisioned Grafana dashboard: every panel query reads a metric the services export."""

from __future__ import annotations

import json

import yaml

from tests.support import PROJECT_ROOT
from tests.support.exported import exported_sample_names, metric_names

DEPLOY = PROJECT_ROOT / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "turnaudit.json"


def recording_rules() -> dict[str, str]:
    return {
        rule["record"]: rule["expr"]
        for path in (DEPLOY / "prometheus" / "rules").glob("*.yml")
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
        if "record" in rule
    }


def test_every_panel_query_names_an_exported_metric() -> None:
    exported = exported_sample_names()
    recorded = recording_rules()
    panels = json.loads(DASHBOARD.read_text())["panels"]
    assert panels
    for panel in panels:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = metric_names(target["expr"])
            assert names, target["expr"]
            for name in names:
                # A recording rule counts when what it reads is exported.
                reads = metric_names(recorded[name]) if name in recorded else {name}
                assert reads <= exported, (panel["title"], name)


def test_the_dashboard_covers_what_on_call_needs() -> None:
    read = {
        name
        for panel in json.loads(DASHBOARD.read_text())["panels"]
        for target in panel["targets"]
        for name in metric_names(target["expr"])
    }
    expanded = set(read)
    for name in read & set(recording_rules()):
        expanded |= metric_names(recording_rules()[name])
    for needed in (
        "turnaudit_refused_turns_total",
        "turnaudit_hedged_turns_total",
        "turnaudit_action_risk_total",
        "turnaudit_contract_breaches_total",
        "turnaudit_sequence_gaps_total",
        "turnaudit_dead_letters_total",
        "turnaudit_consumer_lag",
        "turnaudit_sink_failures_total",
        "turnaudit_dead_letter_failures_total",
        "turnaudit_htir_traces_total",
        "turnaudit_htir_open_traces",
        "turnaudit_metrics_label_values",
        "turnaudit_verify_turns_proved_total",
        "turnaudit_verify_lost_turns_total",
        "turnaudit_verify_lost_turns_by_pack_total",
        "turnaudit_verify_cut_streams_total",
        "turnaudit_verify_vanished_producers",
        "turnaudit_verify_streams_at_risk",
        "turnaudit_verify_missing_turns",
        "turnaudit_verify_stream_trust",
        "turnaudit_archive_last_digest_timestamp_seconds",
        "turnaudit_archive_undigested_segments",
        "turnaudit_archive_oldest_unarchived_timestamp_seconds",
        "turnaudit_archive_topic_retention_seconds",
        "ALERTS",
    ):
        assert needed in expanded


def test_pack_and_job_variables_select_every_panel() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert {"DS_PROMETHEUS", "pack", "job"} <= set(variables)
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert variables["DS_PROMETHEUS"]["query"] == "prometheus"
    assert "turnaudit_turns_total" in variables["pack"]["query"]
    # The services: every job exporting turn-audit metrics, whatever it is called.
    assert variables["job"]["query"].startswith('label_values({__name__=~"turnaudit_.+"')
    for name in ("pack", "job"):
        assert variables[name]["includeAll"]
        assert variables[name]["multi"]
    assert variables["pack"]["allValue"] == ".*"
    assert "allValue" not in variables["job"]  # All = the jobs found, not every job
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            if "ALERTS" in expr:
                continue
            # A panel over verdict counters follows the pack; one over services, the job.
            assert '"$pack"' in expr or '"$job"' in expr, (panel["title"], expr)


def test_a_panel_lists_the_firing_alerts() -> None:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    firing = [
        p for p in panels if any('ALERTS{alertstate="firing"' in t["expr"] for t in p["targets"])
    ]
    assert firing
    assert firing[0]["gridPos"]["y"] == 0
    assert 'alertname=~"TurnAudit.+"' in firing[0]["targets"][0]["expr"]


def test_panels_read_the_datasource_of_the_import_input() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["__inputs"][0]["name"] == "DS_PROMETHEUS"
    assert dashboard["__inputs"][0]["pluginId"] == "prometheus"
    for panel in dashboard["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
        assert all(t["datasource"] == panel["datasource"] for t in panel["targets"])


def test_the_dashboard_provider_points_where_compose_mounts_the_dashboards() -> None:
    provider = yaml.safe_load(
        (DEPLOY / "grafana/provisioning/dashboards/turnaudit.yml").read_text()
    )["providers"][0]
    compose = yaml.safe_load((DEPLOY.parent / "docker-compose.yml").read_text())
    mounts = compose["services"]["grafana"]["volumes"]
    assert f"./deploy/grafana/dashboards:{provider['options']['path']}:ro" in mounts
