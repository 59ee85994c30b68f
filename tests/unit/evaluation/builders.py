"""Programmatic EVR-6 fixtures: HTIR steps, cases, evidence files and label packs."""

from __future__ import annotations

from typing import Any

from turnaudit.evaluation.files import EVIDENCE_FORMAT, FORMAT_VERSION, LABELS_FORMAT

DIGEST = "sha256:" + "ab" * 32
FAMILIES = ("code-fix", "code-gen", "data-query", "web-research")


def turn_step(index: int, **overrides: Any) -> dict[str, Any]:
    """A healthy main-path HTIR turn step; keyword arguments replace fields."""
    step: dict[str, Any] = {
        "index": index,
        "kind": "turn",
        "event_id": f"ev-{index}",
        "sequence": index,
        "turn": index,
        "path": "MAIN",
        "refusal_emitted": False,
        "hedge_injected": False,
        "identity_score": 0.9,
        "identity_threshold": 0.5,
        "safety_passed": True,
        "ethics_passed": True,
        "violated_boundary_ids": [],
        "violated_predicate_ids": [],
        "action": None,
        "contract_breaches": [],
        "surface": f"turn {index}",
    }
    step.update(overrides)
    return step


def tool_step(index: int, name: str = "shell", ok: bool = True) -> dict[str, Any]:
    return {
        "index": index,
        "kind": "tool",
        "name": name,
        "arguments": {"cmd": "ls"},
        "result": "ok" if ok else "error: exit 1",
        "ok": ok,
    }


def healthy_steps(count: int) -> list[dict[str, Any]]:
    return [turn_step(i) for i in range(count)]


def case(
    task_id: str,
    family: str,
    *,
    alarm_step: int | None = None,
    first_alarm: int | None = None,
    n_steps: int = 5,
    latency_ms: float = 10.0,
    steps: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """An evidence case whose auditor alarms from ``first_alarm`` on (never if None)."""
    steps = steps if steps is not None else healthy_steps(n_steps)
    return {
        "task_id": task_id,
        "task_family": family,
        "oracle_source": "hand-review@v1",
        "oracle_alarm_step": alarm_step,
        "trace": {"steps": steps, "source": {"manifest": "runs.jsonl", "run": task_id}},
        "observations": [
            {
                "prefix_end": i,
                "verdict": "alarm" if first_alarm is not None and i >= first_alarm else "ok",
                "latency_ms": latency_ms,
            }
            for i in range(len(steps))
        ],
    }


def family_cases(
    family: str, *, positives: int, healthy: int, prefix: str = ""
) -> list[dict[str, Any]]:
    """Alarm-positive cases caught exactly at their oracle step, and clean healthy ones."""
    name = prefix or family
    return [
        case(f"{name}-pos-{i}", family, alarm_step=2, first_alarm=2) for i in range(positives)
    ] + [case(f"{name}-ok-{i}", family) for i in range(healthy)]


def battery(
    families: tuple[str, ...] = FAMILIES, positives: int = 3, healthy: int = 3
) -> list[dict[str, Any]]:
    """Default: 4 families x (3 + 3) = 24 cases, a perfect auditor -> the gate passes."""
    return [
        c for family in families for c in family_cases(family, positives=positives, healthy=healthy)
    ]


def evidence(
    cases: list[dict[str, Any]], *, name: str = "test-auditor", digest: str = DIGEST
) -> dict[str, Any]:
    return {
        "format": EVIDENCE_FORMAT,
        "format_version": FORMAT_VERSION,
        "auditor_id": {"name": name, "digest": digest},
        "cases": cases,
    }


def label_pack(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """The evidence schema minus auditor_id and every case's observations."""
    return {
        "format": LABELS_FORMAT,
        "format_version": FORMAT_VERSION,
        "cases": [{k: v for k, v in c.items() if k != "observations"} for c in cases],
    }


def find_case(cases: list[dict[str, Any]], task_id: str) -> dict[str, Any]:
    return next(c for c in cases if c["task_id"] == task_id)
