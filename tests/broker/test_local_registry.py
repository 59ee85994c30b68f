"""``turnaudit registry start|status|stop`` with the real server (``make registry``): it serves
the Confluent-compatible API on loopback, a second start finds it running, its folder is its
owner's alone, a stop ends it by its recorded pid, and what it held survives a restart."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.support.cli import run_turnaudit
from tests.support.registry import ccompat
from turnaudit.local_broker import free_ports
from turnaudit.local_broker.nodes import alive
from turnaudit.serialization.schemas import shipped_catalog

pytestmark = pytest.mark.broker

RUNNING = re.compile(
    r"^registry: running \(pid (\d+)\), serving (http://127\.0\.0\.1:\d+/apis/ccompat/v7) "
    r"\(Apicurio Registry 3\.3\.3, \d+ MB resident\)"
)


def test_start_status_stop_and_restart_keep_what_it_holds(tmp_path: Path) -> None:
    port, management = free_ports(2)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNAUDIT_")} | {
        "TURNAUDIT_REGISTRY_HOME": str(tmp_path / "registry"),
        "TURNAUDIT_REGISTRY_PORT": str(port),
        "TURNAUDIT_REGISTRY_MANAGEMENT_PORT": str(management),
        "TURNAUDIT_PROJECT_DIR": str(Path(__file__).resolve().parents[2]),
    }
    started = run_turnaudit("registry", "start", env=env, timeout=180)
    try:
        assert started.returncode == 0, started.stderr
        first, second = started.stdout.splitlines()
        running = RUNNING.match(first)
        assert running is not None, first
        pid, url = int(running.group(1)), running.group(2)
        assert re.search(r" in \d+\.\d+s$", first)
        assert second == f"registry mode: TURNAUDIT_SCHEMA_REGISTRY_URL={url}"
        assert url == f"http://127.0.0.1:{port}/apis/ccompat/v7"
        home = tmp_path / "registry"
        assert (home.stat().st_mode & 0o777) == 0o700
        assert (home / "registry.pid").read_text() == str(pid)
        assert list((home / "data").glob("registry*.db"))

        status = run_turnaudit("registry", "status", env=env)
        assert status.returncode == 0
        assert RUNNING.match(status.stdout) is not None
        again = run_turnaudit("registry", "start", env=env, timeout=60)
        assert again.returncode == 0
        assert f"(pid {pid})" in again.stdout  # found running: not a second server

        schema = shipped_catalog().version(5).schema_json
        registered, answer = ccompat(url, "/subjects/kept-value/versions", {"schema": schema})
        assert registered == 200, answer

        stopped = run_turnaudit("registry", "stop", env=env, timeout=60)
        assert stopped.returncode == 0
        assert stopped.stdout.strip() == "registry: stopped"
        assert not alive(pid)
        assert not (home / "registry.pid").exists()
        down = run_turnaudit("registry", "status", env=env)
        assert (down.returncode, down.stdout.strip()) == (1, "registry: stopped")

        restarted = run_turnaudit("registry", "start", env=env, timeout=180)
        assert restarted.returncode == 0, restarted.stderr
        status_code, found = ccompat(url, "/subjects/kept-value/versions/1")
        assert status_code == 200
        assert found["id"] == answer["id"]
        assert json.loads(found["schema"]) == json.loads(schema)
    finally:
        run_turnaudit("registry", "stop", env=env, timeout=60)
