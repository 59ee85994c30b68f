"""docker-compose.yml runs for real under podman-compose (with deploy/compose/local.yml standing
in for the upstream images): the stack comes up, the simulator publishes a known number of
signed turns, every service counts each of them (the continuous verifier proves them and finds
every stream signed), Prometheus scrapes every service of the one list, and ``down -v`` leaves
nothing behind."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support import PROJECT_ROOT
from tests.support.containers import podman, podman_env
from tests.support.make_targets import make
from tests.support.streams import scrape, total
from turnaudit.consumers.runtime.settings import DEFAULT_HTTP_PORTS, ServiceName

pytestmark = pytest.mark.broker

TURNS = 600
COMPOSE = yaml.safe_load((PROJECT_ROOT / "docker-compose.yml").read_text())
# Services of the default profile (the OTel sink is an optional profile's).
SERVICES = [s for s in ServiceName if s is not ServiceName.OTEL_SINK]
PROMETHEUS = 9090


def published_ports() -> list[int]:
    return sorted(
        int(mapping.split(":")[0])
        for service in COMPOSE["services"].values()
        if "grafana" not in service.get("profiles", []) and not service.get("profiles")
        for mapping in service.get("ports", [])
    )


def port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))  # noqa: S104 - what compose publishes on
        except OSError:
            return False
    return True


def compose(project: str, override: Path, *args: str, timeout: float = 600) -> str:
    tool = PROJECT_ROOT / ".venv/bin/podman-compose"
    ran = subprocess.run(
        [
            str(tool),
            "--in-pod",
            "false",
            "-p",
            project,
            "-f",
            str(PROJECT_ROOT / "docker-compose.yml"),
            "-f",
            str(PROJECT_ROOT / "deploy/compose/local.yml"),
            "-f",
            str(override),
            *args,
        ],
        cwd=PROJECT_ROOT,
        env=podman_env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
    assert ran.returncode == 0, f"podman-compose {' '.join(args)}:\n{ran.stderr[-4000:]}"
    return ran.stdout


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    taken = [p for p in published_ports() if not port_is_free(p)]
    assert not taken, f"compose publishes ports already taken on this host: {taken}"
    make("image")
    make("jars")
    simulator = list(COMPOSE["services"]["simulator"]["command"])
    simulator[simulator.index("--events") + 1] = str(TURNS)
    simulator[simulator.index("--rate") + 1] = "200"
    override = tmp_path_factory.mktemp("compose") / "finite-simulator.yml"
    override.write_text(
        yaml.safe_dump({"services": {"simulator": {"restart": "no", "command": simulator}}})
    )
    project = f"turnaudit-test-{uuid.uuid4().hex[:8]}"
    try:
        compose(project, override, "up", "-d")
        yield project
    finally:
        with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
            compose(project, override, "down", "-v", "-t", "5", timeout=300)


def prometheus(query: str) -> list[tuple[dict[str, str], str]]:
    """An instant query to the stack's Prometheus: (labels, value) per series."""
    url = f"http://127.0.0.1:{PROMETHEUS}/api/v1/query?query={urllib.parse.quote(query)}"
    with urllib.request.urlopen(url, timeout=5) as reply:
        result = json.loads(reply.read())["data"]["result"]
    return [(dict(r["metric"]), str(r["value"][1])) for r in result]


def counts() -> dict[str, int]:
    """What each service counted so far (-1 where it does not answer yet)."""
    got: dict[str, int] = {}
    for name, port, metric in [
        (
            "verdict-metrics",
            DEFAULT_HTTP_PORTS[ServiceName.VERDICT_METRICS],
            "turnaudit_turns_total",
        ),
        ("log-sink", DEFAULT_HTTP_PORTS[ServiceName.LOG_SINK], "turnaudit_log_lines_total"),
        (
            "verify-follow",
            DEFAULT_HTTP_PORTS[ServiceName.VERIFY_FOLLOW],
            "turnaudit_verify_turns_proved_total",
        ),
    ]:
        try:
            got[name] = total(scrape(port), metric)
        except OSError:
            got[name] = -1
    return got


def why_not_signed(
    stack: str, verify: dict[tuple[str, tuple[tuple[str, str], ...]], float], streams: float
) -> str:
    """What a failed trust wait shows: the gauges, the checkpoints the follower read, and
    the follower's and the simulator's own lines (the per-stream findings left out)."""
    trust = {dict(k[1])["trust"]: v for k, v in verify.items() if k[0].endswith("_trust")}
    read = {
        dict(k[1]).get("result", k[0]): v for k, v in verify.items() if "signed_checkpoints" in k[0]
    }
    follower = [
        line
        for line in podman("logs", f"{stack}_verify-follow_1", check=False).stderr.splitlines()
        if "verify_forgery" not in line
    ]
    simulator = podman("logs", f"{stack}_simulator_1", check=False)
    return "\n".join(
        [
            f"trust {trust} of {streams} open streams; checkpoints read {read}",
            "follower:",
            *follower[-40:],
            "simulator:",
            *(simulator.stdout + simulator.stderr).splitlines()[-40:],
            podman("ps", "-a").stdout,
        ]
    )


def test_every_service_counts_every_turn_and_prometheus_scrapes_them_all(stack: str) -> None:
    deadline = time.monotonic() + 240
    seen: dict[str, int] = {}
    while time.monotonic() < deadline:
        seen = counts()
        if all(n == TURNS for n in seen.values()):
            break
        time.sleep(2)
    assert seen == dict.fromkeys(seen, TURNS), (seen, podman("ps", "-a").stdout)
    # The follower judged every stream against the simulator's signed checkpoints.
    verify = scrape(DEFAULT_HTTP_PORTS[ServiceName.VERIFY_FOLLOW])
    streams = total(verify, "turnaudit_verify_streams", state="open")
    assert streams > 0
    deadline = time.monotonic() + 60
    while total(verify, "turnaudit_verify_stream_trust", trust="signed") != streams:
        assert time.monotonic() < deadline, why_not_signed(stack, verify, streams)
        time.sleep(2)
        verify = scrape(DEFAULT_HTTP_PORTS[ServiceName.VERIFY_FOLLOW])
    for trust in ("forged", "unsigned", "truncated"):
        assert total(verify, "turnaudit_verify_stream_trust", trust=trust) == 0
    # Prometheus, in the stack, scrapes every service of the one list and sums the turns.
    deadline, up = time.monotonic() + 120, {}
    wanted = {s.value for s in SERVICES}
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, KeyError):
            up = {labels["job"]: value for labels, value in prometheus("up")}
            summed = prometheus('sum(turnaudit_turns_total{job="verdict-metrics"})')
            if all(up.get(job) == "1" for job in wanted) and summed:
                assert summed[0][1] == str(TURNS)
                break
        time.sleep(3)
    assert all(up.get(job) == "1" for job in wanted), up


def test_down_leaves_no_container_volume_or_network(stack: str, tmp_path: Path) -> None:
    # Runs after the counting test (file order): the fixture's own down is a second, harmless one.
    override = tmp_path / "empty.yml"
    override.write_text("services: {}\n")
    compose(stack, override, "down", "-v", "-t", "5", timeout=300)
    for kind in ("ps", "volume", "network"):
        listed = podman(kind, "ls", "-a" if kind == "ps" else "-q", check=False)
        assert stack not in listed.stdout, (kind, listed.stdout)
