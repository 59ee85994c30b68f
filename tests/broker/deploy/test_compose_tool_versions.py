"""docker-compose.yml runs the Prometheus and Alertmanager versions the suite checks the rules
and the routing with: Debian's promtool and amtool of ``make promtool alertmanager``."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from tests.support import PROJECT_ROOT
from tests.support.realparts import binary

pytestmark = pytest.mark.broker  # the integration tier: promtool and amtool, no broker

COMPOSE = yaml.safe_load((PROJECT_ROOT / "docker-compose.yml").read_text())


def tool_version(tool: str, setup: str) -> str:
    out = subprocess.run(
        [binary(tool, setup), "--version"], capture_output=True, text=True, check=True
    )
    match = re.search(r"version (\d+\.\d+\.\d+)", out.stdout + out.stderr)
    assert match, out
    return match.group(1)


def test_compose_runs_the_prometheus_the_suite_checks_the_rules_with() -> None:
    image = COMPOSE["services"]["prometheus"]["image"]
    assert image == f"prom/prometheus:v{tool_version('promtool', 'promtool')}"


def test_compose_runs_the_alertmanager_the_suite_checks_the_config_with() -> None:
    image = COMPOSE["services"]["alertmanager"]["image"]
    assert image == f"prom/alertmanager:v{tool_version('amtool', 'alertmanager')}"
