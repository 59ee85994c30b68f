"""The one list of services (``ServiceName`` with its ports) is what compose runs, what
Prometheus scrapes and what ``TurnAuditServiceDown`` watches: deploy/prometheus/generate.py
writes the last two, and any drift fails here."""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path
from types import ModuleType

import yaml

from tests.support import PROJECT_ROOT
from turnaudit.consumers.settings import DEFAULT_HTTP_PORTS, ServiceName

PROMETHEUS = PROJECT_ROOT / "deploy/prometheus"
COMPOSE = yaml.safe_load((PROJECT_ROOT / "docker-compose.yml").read_text())


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("prometheus_generate", PROMETHEUS / "generate.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_checked_in_files_are_what_the_generator_writes() -> None:
    drift = generator().differences()
    assert not drift, "run `.venv/bin/python deploy/prometheus/generate.py`:\n" + "\n".join(drift)


def test_check_fails_on_a_hand_edit_and_writing_repairs_it(tmp_path: Path) -> None:
    out = tmp_path / "prometheus"
    shutil.copytree(PROMETHEUS, out)
    gen = generator()
    assert gen.main(["--check", "--out", str(out)]) == 0
    rules = out / "rules/services.yml"
    rules.write_text(rules.read_text().replace("|verify-follow", ""))
    assert gen.main(["--check", "--out", str(out)]) == 1
    assert gen.main(["--out", str(out)]) == 0
    assert gen.main(["--check", "--out", str(out)]) == 0


def test_compose_runs_every_service_of_the_list_on_its_port() -> None:
    for service in ServiceName:
        defined = COMPOSE["services"][service.value]
        port = defined["environment"].get("TURNAUDIT_HTTP_PORT", str(DEFAULT_HTTP_PORTS[service]))
        assert port == str(DEFAULT_HTTP_PORTS[service]), service


def test_prometheus_scrapes_and_the_down_alert_watches_exactly_the_list() -> None:
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    rules = yaml.safe_load((PROMETHEUS / "rules/services.yml").read_text())
    (down,) = [
        r for g in rules["groups"] for r in g["rules"] if r["alert"] == "TurnAuditServiceDown"
    ]
    match = re.fullmatch(r'up\{job=~"([^"]+)"\} == 0', down["expr"])
    assert match is not None, down["expr"]
    assert set(match.group(1).split("|")) == {s.value for s in ServiceName}
    for service in ServiceName:
        job = jobs[service.value]
        port = DEFAULT_HTTP_PORTS[service]
        if COMPOSE["services"][service.value].get("profiles"):
            assert job["dns_sd_configs"] == [{"names": [service.value], "type": "A", "port": port}]
        else:
            assert job["static_configs"] == [{"targets": [f"{service.value}:{port}"]}]
    # No rule file but the generated one names the alert (one owner).
    for path in (PROMETHEUS / "rules").glob("*.yml"):
        if path.name != "services.yml":
            assert "TurnAuditServiceDown" not in path.read_text(), path
