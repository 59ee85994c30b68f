"""deploy/alertmanager/alertmanager.yml, run by Debian's amtool (``make alertmanager``): the
configuration checks, and the routing pages pages and tickets the rest."""

from __future__ import annotations

import subprocess

import pytest

from tests.support import PROJECT_ROOT
from tests.support.realparts import binary

pytestmark = pytest.mark.broker  # the integration tier: amtool, no broker

ALERTMANAGER = PROJECT_ROOT / "deploy" / "alertmanager" / "alertmanager.yml"


def amtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary("amtool", "alertmanager"), *args], capture_output=True, text=True, check=False
    )


def test_amtool_checks_the_alertmanager_config() -> None:
    result = amtool("check-config", str(ALERTMANAGER))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("labels", "receiver"),
    [
        ({"alertname": "TurnAuditRefusalRateHigh", "severity": "page", "pack": "legal"}, "page"),
        ({"alertname": "TurnAuditHedgeRateHigh", "severity": "warning", "pack": "legal"}, "ticket"),
        ({"alertname": "SomethingNew"}, "ticket"),
    ],
)
def test_routing_pages_pages_and_tickets_the_rest(labels: dict[str, str], receiver: str) -> None:
    result = amtool(
        "config",
        "routes",
        "test",
        f"--config.file={ALERTMANAGER}",
        *(f"{k}={v}" for k, v in labels.items()),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.split() == [receiver]
