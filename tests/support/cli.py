"""Running ``turnaudit`` as a real process, as a user does."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import PROJECT_ROOT
from tests.support.forked_cli import forked_turnaudit
from turnaudit.local_broker import free_port, free_ports

CONNECT_TIMEOUT_S = 2
BOUND_S = 25.0  # no case may take longer (the slowest waits CONNECT_TIMEOUT_S or --wait)
LOCAL_PORT = free_port()


def run_turnaudit(
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnaudit.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        check=False,
        timeout=timeout,
    )


def broker_ports() -> dict[str, str]:
    """Free ports for a local broker the test starts through the CLI."""
    port, controller = free_ports(2)
    return {"TURNAUDIT_BROKER_PORT": str(port), "TURNAUDIT_BROKER_CONTROLLER_PORT": str(controller)}


@dataclass(frozen=True)
class Case:
    """One row of the CLI error table: a command, its environment, what it must say."""

    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    exit_code: int = 2
    says: str = ""


@dataclass(frozen=True)
class Outcome:
    returncode: int
    stderr: str
    elapsed: float
    tmp: str


def run_case(case: Case, tmp: Path) -> Outcome:
    """The case as a real process in ``tmp`` (``{tmp}`` in its words is replaced), forked
    from a process that imported the CLI already (tests/support/forked_cli.py)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("TURNAUDIT_") and k != "KAFKA_BOOTSTRAP_SERVERS"
    }
    env.update(
        {
            "TURNAUDIT_CONNECT_TIMEOUT_S": str(CONNECT_TIMEOUT_S),
            "TURNAUDIT_BROKER_HOME": str(tmp / "broker-home"),
            "TURNAUDIT_BROKER_PORT": str(LOCAL_PORT),
            "TURNAUDIT_BROKER_JARS": str(PROJECT_ROOT / "deploy/kafka/target/jars"),
        }
    )
    env.update({k: v.replace("{tmp}", str(tmp)) for k, v in case.env.items()})
    argv = [a.replace("{tmp}", str(tmp)) for a in case.argv]
    started = time.monotonic()
    result = forked_turnaudit(*argv, env=env, cwd=tmp, timeout=BOUND_S * 2)
    return Outcome(result.returncode, result.stderr, time.monotonic() - started, str(tmp))
