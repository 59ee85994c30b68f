"""The simulator's ground truth file (``turnaudit simulate --truth``): its JSON shape,
read back by the evaluation (``turnaudit.evaluation.labels``) and the demo."""

from __future__ import annotations

from typing import TypedDict


class TaskTruthJson(TypedDict):
    """One task of the ground truth file (``turnaudit simulate --truth``)."""

    task_id: str
    task_family: str
    session_id: str
    steps: int
    oracle_alarm_turn: int | None
    failure_mode: str | None
    oracle_source: str


class GroundTruthJson(TypedDict):
    """The ground truth file: what the simulator built, counted as the consumers count."""

    seed: int
    events: int
    sessions: int
    by_path: dict[str, int]
    by_schema_version: dict[str, int]
    by_pack: dict[str, int]
    refused_by_pack: dict[str, int]
    hedged_by_pack: dict[str, int]
    by_output_policy: dict[str, int]
    by_risk_tier: dict[str, int]
    tasks: list[TaskTruthJson]
