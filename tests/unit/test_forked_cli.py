"""A run forked from the CLI server (tests/support/forked_cli.py) is what a fresh
``python -m turnaudit.cli`` gives: the same exit code, stdout and stderr, with the run's own
environment and working folder, and a run past its timeout is stopped as subprocess stops it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import run_turnaudit
from tests.support.forked_cli import forked_turnaudit
from turnaudit.local_broker import free_port

NOWHERE = f"127.0.0.1:{free_port()}"

# (argv, environment added): every way a run ends: output and exit 0, an argparse error, a
# setting refused before the command runs and while it runs, a runtime failure (exit 1),
# a relative path read from the working folder.
RUNS = {
    "schemas list": (["schemas", "list"], {}),
    "argparse error": (["simulate", "--events", "many"], {}),
    "no command": ([], {}),
    "log level from the environment": (["tail"], {"TURNAUDIT_LOG_LEVEL": "bogus"}),
    "setting refused": (["simulate", "--events", "1"], {"TURNAUDIT_TOPIC_PARTITIONS": "zero"}),
    "cluster unreachable": (
        ["topics", "create"],
        {"KAFKA_BOOTSTRAP_SERVERS": NOWHERE, "TURNAUDIT_CONNECT_TIMEOUT_S": "1"},
    ),
    "relative path in the working folder": (
        ["replay", "--step", "60", "--into", "jsonl:out/x.jsonl"],
        {},
    ),
}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_forked_run_is_what_a_fresh_interpreter_gives(name: str, tmp_path: Path) -> None:
    argv, extra = RUNS[name]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TURNAUDIT_")},
        **extra,
    }
    fresh = run_turnaudit(*argv, env=env, cwd=tmp_path, timeout=60)
    forked = forked_turnaudit(*argv, env=env, cwd=tmp_path, timeout=60)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        fresh.returncode,
        fresh.stdout,
        fresh.stderr,
    )
    assert fresh.stdout or fresh.stderr  # each run says something to compare


def test_the_environment_and_folder_are_the_runs_own(tmp_path: Path) -> None:
    """Runs one after another with other settings and folders: each sees its own."""
    (tmp_path / "a").mkdir()
    bad = forked_turnaudit("tail", env={**os.environ, "TURNAUDIT_LOG_LEVEL": "bogus"})
    good = forked_turnaudit("schemas", "list", cwd=tmp_path / "a")
    assert bad.returncode == 2
    assert "TURNAUDIT_LOG_LEVEL='bogus'" in bad.stderr
    assert good.returncode == 0, good.stderr


def test_a_run_past_its_timeout_is_stopped_as_subprocess_stops_it() -> None:
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": NOWHERE, "TURNAUDIT_HTTP_PORT": "0"}
    with pytest.raises(subprocess.TimeoutExpired):
        forked_turnaudit("sink", "logs", env=env, timeout=1.5)  # a service waits for Kafka
    assert forked_turnaudit("schemas", "list").returncode == 0  # the server carries on
