"""The health of a service run as worker processes, from the states the workers write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from turnaudit.consumers.runtime.health import WORKER_STATE_SUFFIX, WorkersHealth

NOW = 1_000_000.0


def write_state(
    folder: Path,
    index: int,
    pid: int,
    *,
    partitions: list[int],
    reasons: list[str] | None = None,
    live: bool = True,
    age: float = 0.5,
) -> None:
    reasons = reasons or []
    state: dict[str, Any] = {
        "index": index,
        "pid": pid,
        "written_at": NOW - age,
        "live": live,
        "ready": live and not reasons,
        "running": True,
        "readiness": {
            "status": "ok" if not reasons else "not_ready",
            "reasons": reasons,
            "assigned_partitions": partitions,
        },
    }
    (folder / f"worker-{index}{WORKER_STATE_SUFFIX}").write_text(json.dumps(state))


def workers_health(folder: Path, pids: dict[int, int | None]) -> WorkersHealth:
    health = WorkersHealth(
        {"service": "verdict-metrics"}, folder, pids=lambda: pids, clock=lambda: NOW
    )
    health.running = True
    return health


def test_ready_when_every_worker_is_with_the_union_of_their_partitions(tmp_path: Path) -> None:
    write_state(tmp_path, 0, 100, partitions=[0, 1, 2])
    write_state(tmp_path, 1, 101, partitions=[3, 4, 5])
    verdict = workers_health(tmp_path, {0: 100, 1: 101}).readiness()
    assert verdict.ok
    assert verdict.body["assigned_partitions"] == [0, 1, 2, 3, 4, 5]
    assert [w["pid"] for w in verdict.body["worker_states"]] == [100, 101]


def test_an_idle_worker_does_not_make_the_service_unready(tmp_path: Path) -> None:
    write_state(tmp_path, 0, 100, partitions=[0, 1, 2])
    write_state(tmp_path, 1, 101, partitions=[], reasons=["no partition assigned for 40 s"])
    assert workers_health(tmp_path, {0: 100, 1: 101}).readiness().ok


def test_no_partition_anywhere_is_not_ready(tmp_path: Path) -> None:
    write_state(tmp_path, 0, 100, partitions=[], reasons=["no partition assigned for 40 s"])
    verdict = workers_health(tmp_path, {0: 100}).readiness()
    assert not verdict.ok
    assert verdict.body["reasons"] == ["worker 0: no partition assigned for 40 s"]


def test_a_dead_worker_is_not_ready_but_live_and_a_hung_one_is_not_live(tmp_path: Path) -> None:
    write_state(tmp_path, 0, 100, partitions=[0, 1, 2])
    write_state(tmp_path, 1, 101, partitions=[3, 4, 5])  # left by the process that died
    health = workers_health(tmp_path, {0: 100, 1: None})
    health.worker_exited(1, "killed by SIGKILL")
    assert health.liveness().ok
    readiness = health.readiness()
    assert not readiness.ok
    assert readiness.body["reasons"] == ["worker 1: down (killed by SIGKILL), restarting"]
    assert readiness.body["assigned_partitions"] == [0, 1, 2]  # not the dead one's
    write_state(tmp_path, 1, 102, partitions=[3, 4, 5], age=45)
    hung = workers_health(tmp_path, {0: 100, 1: 102}).liveness()
    assert not hung.ok
    assert hung.body["reasons"] == ["worker 1 (pid 102): no state for 45 s"]


def test_a_broker_problem_of_any_worker_is_not_ready(tmp_path: Path) -> None:
    write_state(tmp_path, 0, 100, partitions=[0, 1, 2])
    write_state(
        tmp_path,
        1,
        101,
        partitions=[3, 4, 5],
        reasons=["broker unreachable for 12 s: all brokers down"],
    )
    verdict = workers_health(tmp_path, {0: 100, 1: 101}).readiness()
    assert not verdict.ok
    assert verdict.body["status"] == "not_ready"


def test_stopping_is_not_ready(tmp_path: Path) -> None:
    write_state(tmp_path, 0, 100, partitions=[0])
    health = workers_health(tmp_path, {0: 100})
    health.stopping = True
    assert health.readiness().body["reasons"] == ["stopping"]
