"""End to end with real parts: a refusal spike in one pack reaches a person, naming that pack.

Debian's Prometheus and Alertmanager run on loopback ports with the shipped
configuration (prometheus.yml, the rules, alertmanager.yml's routing) tuned
the documented way for a test: 1-second scrape and evaluation intervals, the
alert windows shortened from 5 minutes to 30 seconds and ``for`` from 5
minutes to 10 seconds, the page route's group_wait to 1 second, and the
webhook URLs pointed at the example receiver (deploy/alertmanager/
webhook_receiver.py) on a free port. Prometheus scrapes the real services
(``turnaudit sink metrics``, ``sink logs``, ``htir feed``, default label
settings) on the session's broker, fed by the simulator through the real
publisher. After a baseline, one pack's turns become refusals: the page
arrives for that pack and no other. Then every dashboard query is evaluated
against this Prometheus.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import PROJECT_ROOT
from tests.support.jsonl import complete_json_lines
from tests.support.realparts import (
    TURNAUDIT,
    Prometheus,
    binary,
    free_port,
    process,
    service_env,
    wait_until_answering,
)
from turnaudit.contracts import Breach
from turnaudit.producers.adapter import TurnAuditEmitter
from turnaudit.producers.publisher import TurnEventPublisher
from turnaudit.producers.simulator import PACKS, TurnRuntimeSimulator
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker

SPIKE_PACK = "legal"
WINDOW, HOLD = "30s", "10s"
RATE = 150  # simulated turns per second


def tuned_rules(text: str) -> str:
    """The shipped rules with the documented tuning: shorter windows and `for`."""
    tuned = text.replace("[5m]", f"[{WINDOW}]").replace("for: 5m", f"for: {HOLD}")
    assert tuned != text
    return tuned


def prometheus_config(rules: Path, targets: dict[str, int], alertmanager: int) -> dict[str, Any]:
    shipped = PROJECT_ROOT / "deploy/prometheus/prometheus.yml"
    config: dict[str, Any] = yaml.safe_load(shipped.read_text())
    config["global"].update(scrape_interval="1s", evaluation_interval="1s")
    config["rule_files"] = [str(rules)]
    config["alerting"]["alertmanagers"][0]["static_configs"] = [
        {"targets": [f"127.0.0.1:{alertmanager}"]}
    ]
    shipped_jobs = {job["job_name"] for job in config["scrape_configs"]}
    assert set(targets) <= shipped_jobs
    config["scrape_configs"] = [
        {"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
        for job, port in targets.items()
    ]
    return config


def alertmanager_config(webhook: int) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(
        (PROJECT_ROOT / "deploy/alertmanager/alertmanager.yml").read_text()
    )
    for receiver in config["receivers"]:
        for hook in receiver["webhook_configs"]:
            hook["url"] = re.sub(r"^http://[^/]+", f"http://127.0.0.1:{webhook}", hook["url"])
    for route in [config["route"], *config["route"]["routes"]]:
        route.update(group_wait="1s", group_interval="2s")
    return config


class SimulatedFeed:
    """Publishes simulated turns at RATE; after ``spike()`` one pack's turns are only refusals.

    Turns are held back before they reach the publisher, which numbers each
    session's turns: the stream stays gap-free, only the pack's mix changes.
    """

    def __init__(self, kafka: KafkaSettings, spool: Path) -> None:
        self.publisher = TurnEventPublisher(kafka, spool_dir=spool)

        def to_dead_letters(event: dict[str, Any], breaches: list[Breach]) -> None:
            self.publisher.dead_letter(
                event, f"contract:{breaches[0].contract.value}", str(breaches[0])
            )

        self.emitter = TurnAuditEmitter(self.publisher, to_dead_letters)
        self.spiking = threading.Event()
        self.stopping = threading.Event()
        self.published: dict[str, int] = {}
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        sim = TurnRuntimeSimulator(11, schema_versions=(1, 2), concurrent_sessions=60)
        started = time.monotonic()
        for i, event in enumerate(sim.events(10**9)):
            if self.stopping.is_set():
                return
            delay = started + i / RATE - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            if (
                self.spiking.is_set()
                and event["pack_id"] == SPIKE_PACK
                and not event["verdicts"]["refusal_emitted"]
            ):
                continue
            self.emitter.emit(event)
            self.published[event["pack_id"]] = self.published.get(event["pack_id"], 0) + 1

    def __enter__(self) -> SimulatedFeed:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopping.set()
        self.thread.join(30)
        self.publisher.close()


def refusal_alerts(lines: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (line["receiver"], alert)
        for line in lines
        for alert in line["notification"]["alerts"]
        if alert["labels"]["alertname"] == "TurnAuditRefusalRateHigh"
    ]


def wait(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.5)
    return condition()


def test_a_refusal_spike_in_one_pack_pages_for_that_pack_only(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    prometheus_bin = binary("prometheus", "promtool")
    alertmanager_bin = binary("alertmanager", "alertmanager")
    ports = {name: free_port() for name in ("metrics", "logs", "feeder", "prom", "am", "hook")}
    received = tmp_path / "notifications.jsonl"
    rules = tmp_path / "turnaudit.yml"
    shipped_rules = PROJECT_ROOT / "deploy/prometheus/rules/turnaudit.yml"
    rules.write_text(tuned_rules(shipped_rules.read_text()))
    prom_yml, am_yml = tmp_path / "prometheus.yml", tmp_path / "alertmanager.yml"
    targets = {
        "verdict-metrics": ports["metrics"],
        "log-sink": ports["logs"],
        "htir-feeder": ports["feeder"],
    }
    prom_yml.write_text(yaml.safe_dump(prometheus_config(rules, targets, ports["am"])))
    am_yml.write_text(yaml.safe_dump(alertmanager_config(ports["hook"])))
    kafka = kafka_settings

    with (
        process(
            [
                sys.executable,
                str(PROJECT_ROOT / "deploy/alertmanager/webhook_receiver.py"),
                "--port",
                str(ports["hook"]),
                "--output",
                str(received),
            ],
            tmp_path / "webhook.log",
        ),
        process(
            [
                alertmanager_bin,
                f"--config.file={am_yml}",
                f"--storage.path={tmp_path / 'am'}",
                f"--web.listen-address=127.0.0.1:{ports['am']}",
                "--cluster.listen-address=",
            ],
            tmp_path / "alertmanager.log",
        ) as alertmanager,
        process(
            [
                prometheus_bin,
                f"--config.file={prom_yml}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{ports['prom']}",
            ],
            tmp_path / "prometheus.log",
        ) as prometheus_proc,
        process(
            [str(TURNAUDIT), "sink", "metrics"],
            tmp_path / "metrics.log",
            service_env(kafka, ports["metrics"], "e2e-metrics"),
        ) as metrics,
        process(
            [str(TURNAUDIT), "sink", "logs"],
            tmp_path / "logs.log",
            service_env(
                kafka, ports["logs"], "e2e-logs", TURNAUDIT_LOG_FILE=str(tmp_path / "turns.jsonl")
            ),
        ) as logs,
        process(
            [str(TURNAUDIT), "htir", "feed", "--idle-timeout", "5"],
            tmp_path / "feeder.log",
            service_env(kafka, ports["feeder"], "e2e-feeder"),
        ) as feeder,
    ):
        wait_until_answering(
            f"http://127.0.0.1:{ports['am']}/-/ready", alertmanager, tmp_path / "alertmanager.log"
        )
        wait_until_answering(
            f"http://127.0.0.1:{ports['prom']}/-/ready",
            prometheus_proc,
            tmp_path / "prometheus.log",
        )
        for name, proc in (("metrics", metrics), ("logs", logs), ("feeder", feeder)):
            wait_until_answering(
                f"http://127.0.0.1:{ports[name]}/metrics", proc, tmp_path / f"{name}.log"
            )
        prom = Prometheus(ports["prom"])

        with SimulatedFeed(kafka, tmp_path / "spool") as feed:
            # Baseline: every pack at its usual rate, each with its own series, nothing paging.
            assert wait(
                lambda: len(prom.query("pack:turnaudit_refusal_ratio:rate5m")) == len(PACKS), 60
            ), prom.query("count by (pack) (turnaudit_turns_total)")
            time.sleep(15)
            assert refusal_alerts(complete_json_lines(received)) == []
            assert prom.query('ALERTS{alertname="TurnAuditRefusalRateHigh"}') == []
            named = {
                s["metric"]["pack"] for s in prom.query("count by (pack) (turnaudit_turns_total)")
            }
            assert named == set(PACKS)  # default settings: every pack by name, no "other"

            feed.spiking.set()
            spike_started = time.monotonic()
            assert wait(lambda: bool(refusal_alerts(complete_json_lines(received))), 150), (
                prom.query("pack:turnaudit_refusal_ratio:rate5m"),
                (tmp_path / "alertmanager.log").read_text()[-2000:],
            )
            detected_after = time.monotonic() - spike_started
            # Dashboard queries while the stream and the alert are live.
            evaluate_dashboard(prom)

        delivered = refusal_alerts(complete_json_lines(received))
        print(
            f"refusal spike in {SPIKE_PACK!r} delivered {detected_after:.1f}s after it started "
            f"(window {WINDOW}, for {HOLD}); published per pack: {feed.published}"
        )
        receiver, alert = delivered[0]
        assert receiver == "page"
        assert alert["status"] == "firing"
        labels, annotations = alert["labels"], alert["annotations"]
        assert labels["pack"] == SPIKE_PACK
        assert labels["severity"] == "page"
        assert labels["service"] == "turnaudit"
        assert {pack for _, a in delivered for pack in [a["labels"]["pack"]]} == {SPIKE_PACK}
        external = yaml.safe_load((PROJECT_ROOT / "deploy/prometheus/prometheus.yml").read_text())[
            "global"
        ]["external_labels"]
        assert (
            annotations["runbook_url"] == f"{external['runbook_base']}/TurnAuditRefusalRateHigh.md"
        )
        assert (PROJECT_ROOT / "docs/runbooks/TurnAuditRefusalRateHigh.md").is_file()
        assert annotations["dashboard"].startswith(
            external["grafana_url"] + "/d/turnaudit-verdicts/"
        )
        assert annotations["dashboard"].endswith(f"var-pack={SPIKE_PACK}")
        assert f"pack {SPIKE_PACK}" in annotations["description"]
        assert annotations["summary"].startswith(f"Pack {SPIKE_PACK}: ")
        # Prometheus agrees: the refusal alert fires for that pack and no other.
        firing = prom.query('ALERTS{alertname="TurnAuditRefusalRateHigh"}')
        assert {s["metric"]["pack"] for s in firing} == {SPIKE_PACK}


def dashboard_queries(values: dict[str, str]) -> list[tuple[str, str]]:
    dashboard = json.loads((PROJECT_ROOT / "deploy/grafana/dashboards/turnaudit.json").read_text())
    out = []
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for name, value in values.items():
                expr = expr.replace(f"${name}", value)
            out.append((panel["title"], expr))
    return out


def evaluate_dashboard(prom: Prometheus) -> None:
    """Every panel query runs; each returns data unless nothing it reads has any series yet."""
    metric_name = re.compile(r"\b(turnaudit_[a-z_]+|process_[a-z_]+|ALERTS|pack:[a-z_:0-9]+)\b")
    empty_allowed: list[str] = []
    for variables in ({"pack": ".*", "job": ".*"}, {"pack": SPIKE_PACK, "job": "verdict-metrics"}):
        for title, expr in dashboard_queries(variables):
            result = prom.query(expr)
            if result:
                continue
            reads = set(metric_name.findall(expr))
            with_data = {m for m in reads if prom.has_series(m)}
            if variables["job"] != ".*" and ("htir" in expr or "log_lines" in expr):
                continue  # a service-specific panel with another service selected
            if expr.endswith("== 0"):
                continue  # a filter that is empty while all is well (targets down)
            if " and on " in expr and with_data != reads:
                continue  # a join: empty while one side has no series (a service not run here)
            assert not with_data, (title, expr, with_data)
            empty_allowed.append(title)
    # The panels on-call opens first have data.
    for title, expr in dashboard_queries({"pack": ".*", "job": ".*"}):
        if title in {
            "Refusal rate by pack",
            "Turns per second by path",
            "Firing alerts",
            "Delay from turn to counted (p50, p99)",
            "Log lines written per second",
            "HTIR open traces",
            "Pack and domain labels named",
            "Consumer lag by partition",
            "Sink and dead-letter failures",
        }:
            assert prom.query(expr), (title, expr)
    # The variables' own queries list what they should.
    packs = prom.query("count by (pack) (turnaudit_turns_total)")
    assert SPIKE_PACK in {s["metric"]["pack"] for s in packs}
    jobs = {
        s["metric"]["job"]
        for s in prom.query('up{job=~"verdict-metrics|log-sink|htir-feeder"} == 1')
    }
    assert jobs == {"verdict-metrics", "log-sink", "htir-feeder"}
    print(f"dashboard queries without data: {sorted(set(empty_allowed))}")
    # Every Grafana-managed rule's query runs against the same Prometheus, which loads the
    # recording rules; the Grafana queries do not need them.
    grafana_rules = yaml.safe_load(
        (PROJECT_ROOT / "deploy/grafana/provisioning/alerting/turnaudit.yml").read_text()
    )
    for group in grafana_rules["groups"]:
        for rule in group["rules"]:
            # Asserts Prometheus answers. (Their windows are the shipped 5 minutes, not this
            # test's 30 s: whether they fire is tested in tests/unit/deploy.)
            prom.query(rule["data"][0]["model"]["expr"])
