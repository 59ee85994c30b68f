"""Liveness and readiness, told apart, and the Kafka client's errors reported
at a bounded rate.

* Live: the consume loop is turning (it polled within ``LOOP_STALL_S``).
* Ready: live, the broker reachable, and partitions held: a member that has
  not been assigned any yet (joining, or waiting out an old member's session)
  is not ready, nor is one that has held none for longer than the bound.
  Every "no" comes with its reasons.
* An unreachable broker is logged once when it goes away, then at most once
  per ``report_interval_s`` with the count of errors in between, and once
  when it is back.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypedDict

import structlog

from turnaudit.records import ClientError

log = structlog.get_logger("turnaudit.consumer")

LOOP_STALL_S = 30.0  # a loop silent for longer than this is stuck

# "No broker can be reached" (one connection failing is not that: with
# several brokers the others still serve, and a dropped connection is redone).


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    body: dict[str, object]  # the JSON a health endpoint answers


class ReadinessJson(TypedDict, total=False):
    """What a worker reports of its readiness (``Verdict.body`` as read back)."""

    status: str
    reasons: list[str]
    assigned_partitions: list[int]
    seconds_since_poll: float


class WorkerStateJson(TypedDict):
    """A worker's state file, written every second (``worker_process._StateReporter``)."""

    index: int
    pid: int
    written_at: float
    live: bool
    ready: bool
    running: bool
    readiness: ReadinessJson


# The service a health body names: service, group, instance, topic.
Identity = Mapping[str, str | None]


def is_denial(error: ClientError) -> bool:
    """An ACL refused the service's principal (group, topic, cluster or transactional id)."""
    return error.name.endswith("AUTHORIZATION_FAILED")


class ServiceHealth:
    def __init__(
        self,
        identity: Identity,
        *,
        unassigned_bound_s: float,
        report_interval_s: float,
        on_client_error: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._identity = identity
        self._unassigned_bound_s = unassigned_bound_s
        self._report_interval_s = report_interval_s
        self._on_client_error = on_client_error
        self._clock = clock
        self._lock = threading.Lock()
        self.running = False
        self.stopping = False
        self.last_loop = clock()
        self._assigned: set[int] = set()
        self._joined = False
        self._unassigned_since = clock()
        self._down_since: float | None = None
        self._last_error = ""
        self._suppressed = 0  # errors since the last line
        # The error limiter starts with the service: the connection errors that
        # come before librdkafka's "all brokers down" are counted into the
        # first periodic line, and the outage line comes first.
        self._last_report = clock()
        self._reported_once = True
        self._last_down_report: float | None = None
        self._announced_down = False  # an "unreachable" line went out for this outage
        self._denied: str | None = None  # the last authorization denial, until an assignment

    # -- what the runtime tells it -------------------------------------------------
    def assigned(self, partitions: set[int]) -> None:
        with self._lock:
            self._joined = True
            self._assigned |= partitions
            self._denied = None
        self.broker_reachable()

    def revoked(self, partitions: set[int]) -> None:
        with self._lock:
            self._assigned -= partitions
            if not self._assigned:
                self._unassigned_since = self._clock()

    def partitions(self) -> list[int]:
        with self._lock:
            return sorted(self._assigned)

    def client_error(self, error: ClientError) -> None:
        """librdkafka's error callback: while a broker is away, many times a second.

        An outage is said at once ("unreachable"), then errors at most once per
        ``report_interval_s`` (with their count since the last line); each of
        "unreachable" and the error line at most once per interval, and
        "reachable again" only after an "unreachable" line: a flapping broker
        makes at most three lines per interval.
        """
        if self._on_client_error is not None:
            self._on_client_error()
        now = self._clock()
        with self._lock:
            self._last_error = error.text
            if is_denial(error):
                self._denied = error.text
            went_down = error.brokers_down and self._down_since is None
            if went_down:
                self._down_since = now
            self._suppressed += 1
            if went_down and (
                self._last_down_report is None
                or now - self._last_down_report >= self._report_interval_s
            ):
                # The outage itself: said at once (at most once per interval).
                self._last_down_report, self._announced_down = now, True
                announce_down = True
            elif self._reported_once and now - self._last_report < self._report_interval_s:
                return
            else:
                announce_down = False
            count, self._suppressed = self._suppressed, 0
            self._last_report, self._reported_once = now, True
            down = self._down_since is not None
        if announce_down:
            log.error("kafka_broker_unreachable", error=error.text, code=error.name)
        else:
            log.warning(
                "kafka_client_errors",
                errors_since_last_report=count,
                last_error=error.text,
                code=error.name,
                broker_unreachable=down,
            )

    def broker_reachable(self) -> None:
        with self._lock:
            if self._down_since is None:
                return
            down_for = self._clock() - self._down_since
            announced = self._announced_down
            self._down_since, self._announced_down = None, False
        if announced:
            log.warning("kafka_broker_reachable", unreachable_for_s=round(down_for, 1))

    # -- what it tells the world -----------------------------------------------------
    def _liveness_reasons(self) -> tuple[list[str], float]:
        """Why the service is not live (none: it is), and the seconds since its last poll."""
        age = self._clock() - self.last_loop
        if not self.running:
            return ["the consume loop is not running"], age
        if age >= LOOP_STALL_S:
            return [f"the consume loop has not polled for {age:.0f} s"], age
        return [], age

    def liveness(self) -> Verdict:
        reasons, age = self._liveness_reasons()
        return Verdict(not reasons, self._body(reasons, age, "ok" if not reasons else "unhealthy"))

    def readiness(self) -> Verdict:
        unlive, _ = self._liveness_reasons()
        reasons = list(unlive)
        now = self._clock()
        with self._lock:
            if self.stopping:
                reasons.append("stopping")
            if self._down_since is not None:
                reasons.append(
                    f"broker unreachable for {now - self._down_since:.0f} s: {self._last_error}"
                )
            if self._denied is not None:
                reasons.append(f"authorization denied: {self._denied}")
            if not self._joined:
                reasons.append(
                    f"no partition assigned yet ({now - self._unassigned_since:.0f} s since start)"
                )
            elif not self._assigned and now - self._unassigned_since > self._unassigned_bound_s:
                reasons.append(f"no partition assigned for {now - self._unassigned_since:.0f} s")
        status = "ok" if not reasons else "unhealthy" if unlive else "not_ready"
        return Verdict(not reasons, self._body(reasons, now - self.last_loop, status))

    def _body(self, reasons: list[str], age: float, status: str) -> dict[str, object]:
        return {
            "status": status,
            "reasons": reasons,
            **self._identity,
            "assigned_partitions": self.partitions(),
            "seconds_since_poll": round(age, 3),
        }


class HealthSource(Protocol):
    """What the HTTP side asks: one service process, or the supervisor of several."""

    def liveness(self) -> Verdict: ...

    def readiness(self) -> Verdict: ...


WORKER_STATE_SUFFIX = ".state.json"
# A worker writes its state every second; one silent this long is hung.
WORKER_SILENT_S = LOOP_STALL_S


class WorkersHealth:
    """The health of a service run as N worker processes, from the states they write.

    * Live: the supervisor runs and no worker is hung (its loop stalled, or no
      state written for ``WORKER_SILENT_S``). A worker that died is not a
      liveness failure: the supervisor restarts it (and says so).
    * Ready: live, not stopping, every worker running and ready, the broker
      reachable from each. A worker whose only "no" is holding no partition
      (more workers than partitions, or a rebalance) does not make the service
      unready while another worker holds partitions.
    * ``assigned_partitions``: the union over the workers; ``worker_states``:
      each worker's pid, status, partitions and reasons.
    """

    def __init__(
        self,
        identity: Identity,
        state_dir: Path,
        *,
        pids: Callable[[], dict[int, int | None]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._identity = identity
        self._state_dir = state_dir
        self._pids = pids
        self._clock = clock
        self._exits: dict[int, str] = {}
        self.running = False
        self.stopping = False

    def worker_exited(self, index: int, how: str) -> None:
        self._exits[index] = how

    def _states(self, pids: dict[int, int | None]) -> dict[int, WorkerStateJson | None]:
        states: dict[int, WorkerStateJson | None] = {}
        for index in pids:
            state: WorkerStateJson | None
            try:
                state = json.loads(
                    (self._state_dir / f"worker-{index}{WORKER_STATE_SUFFIX}").read_text()
                )
            except (OSError, ValueError):
                state = None
            # A state left by an earlier process of this worker does not count.
            states[index] = state if state and state.get("pid") == pids.get(index) else None
        return states

    def liveness(self) -> Verdict:
        return self._verdict(readiness=False)

    def readiness(self) -> Verdict:
        return self._verdict(readiness=True)

    def _verdict(self, *, readiness: bool) -> Verdict:
        now = self._clock()
        reasons: list[str] = []
        hard: list[str] = []  # liveness reasons
        workers: list[dict[str, object]] = []
        pids = self._pids()
        assigned: set[int] = set()
        idle: list[str] = []
        if not self.running:
            hard.append("the workers are not running")
        for index, state in self._states(pids).items():
            pid = pids.get(index)
            if state is None:
                why = (
                    f"down ({self._exits[index]}), restarting"
                    if pid is None and index in self._exits
                    else "starting"
                )
                reasons.append(f"worker {index}: {why}")
                workers.append({"worker": index, "pid": pid, "status": why, "reasons": []})
                continue
            silent = now - float(state["written_at"])
            body = state["readiness"]
            mine = set(body.get("assigned_partitions", []))
            assigned |= mine
            own = [r for r in body.get("reasons", []) if r != "stopping"]
            if silent >= WORKER_SILENT_S:
                hard.append(f"worker {index} (pid {pid}): no state for {silent:.0f} s")
            elif not state["live"]:
                hard.extend(f"worker {index} (pid {pid}): {r}" for r in own)
            elif not state["ready"]:
                unassigned = [r for r in own if r.startswith("no partition")]
                if unassigned and len(unassigned) == len(own):
                    idle.extend(f"worker {index}: {r}" for r in own)
                else:
                    reasons.extend(f"worker {index}: {r}" for r in own)
            workers.append(
                {
                    "worker": index,
                    "pid": pid,
                    "status": body.get("status"),
                    "assigned_partitions": sorted(mine),
                    "reasons": own,
                }
            )
        if not assigned:
            reasons.extend(idle or ["no partition assigned to any worker"])
        if self.stopping:
            reasons.append("stopping")
        reasons = hard + reasons if readiness else hard
        status = "ok" if not reasons else "unhealthy" if hard else "not_ready"
        return Verdict(
            not reasons,
            {
                "status": status,
                "reasons": reasons,
                **self._identity,
                "assigned_partitions": sorted(assigned),
                "workers": len(workers),
                "worker_states": workers,
            },
        )
