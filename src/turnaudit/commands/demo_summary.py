"""The demo's summary: reconciliation rows (each figure against the simulator's ground
truth) folded into the lines a first-time reader needs, and the EVR-6 gate in words.

A row of a ``group`` is printed with the others of its group on one line (``label:
part value, part value``); a part that does not match is named on that line with what
was expected, so folding never hides a mismatch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from turnaudit.evaluation.gate import GateReport
from turnaudit.evaluation.trace_evidence import ExclusionReason

LABEL_WIDTH = 52
VALUE_WIDTH = 10
# Where a folded line's mark goes (a line longer than this puts it after two spaces).
MARK_COLUMN = 2 + LABEL_WIDTH + 2 * VALUE_WIDTH + 2
# The gate's failed requirements shown; the rest are counted (all are in gate-report.json).
MAX_FAILED_SHOWN = 2


@dataclass(frozen=True, slots=True)
class ReconciliationRow:
    """One figure a stage observed and what the simulator's ground truth expects.

    ``group``: rows of one group fold into one summary line, each named by its ``part``.
    """

    label: str
    observed: int
    expected: int
    group: str = ""
    part: str = ""

    @property
    def ok(self) -> bool:
        return self.observed == self.expected


@dataclass(frozen=True)
class Section:
    title: str
    rows: list[ReconciliationRow]


def header_line() -> str:
    return f"  {'':<{LABEL_WIDTH}}{'observed':>{VALUE_WIDTH}}{'expected':>{VALUE_WIDTH}}"


def section_lines(section: Section) -> list[str]:
    """The section's title, then one line per row or per group (at its first row)."""
    lines = [section.title]
    done: set[str] = set()
    for row in section.rows:
        if not row.group:
            lines.append(_row_line(row))
        elif row.group not in done:
            done.add(row.group)
            lines.append(_group_line(row.group, [r for r in section.rows if r.group == row.group]))
    return lines


def _mark(ok: bool) -> str:
    return "ok" if ok else "MISMATCH"


def _row_line(row: ReconciliationRow) -> str:
    label = row.label if len(row.label) <= LABEL_WIDTH else row.label[: LABEL_WIDTH - 1] + "…"
    return (
        f"  {label:<{LABEL_WIDTH}}{row.observed:>{VALUE_WIDTH}}{row.expected:>{VALUE_WIDTH}}"
        f"  {_mark(row.ok)}"
    )


def _group_line(group: str, rows: Sequence[ReconciliationRow]) -> str:
    """One line for the group: each part with its value, or, for a group of figures that
    must all be 0, the parts' names alone; a part that does not match says what was
    expected."""
    all_zero = all(r.expected == 0 for r in rows)

    def part(r: ReconciliationRow) -> str:
        name = r.part or r.label
        if r.ok:
            return name if all_zero else f"{name} {r.observed}"
        return f"{name} {r.observed} (expected {r.expected})"

    text = f"  {group}: {', '.join(map(part, rows))}"
    gap = " " * max(2, MARK_COLUMN - len(text))
    return f"{text}{gap}{_mark(all(r.ok for r in rows))}"


def mismatches(sections: Iterable[Section]) -> list[str]:
    return [row.label for section in sections for row in section.rows if not row.ok]


# Why the evaluation kept labelled traces out, in words ("N labelled trace(s) that …").
_LEFT_OUT: dict[str, str] = {
    ExclusionReason.LABEL_STEP_NOT_IN_TRACE: "ended before their labelled failure turn "
    "(not scorable)",
    ExclusionReason.LABEL_TRACE_CHANGED: "differ from the trace their label was reviewed on",
    ExclusionReason.TRACE_MISSING_TURNS: "miss a middle turn",
}


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def auditor_lines(report: GateReport) -> list[str]:
    """The auditor identity the gate pins: its name and digest, and each tier's."""
    auditor = report["auditor_id"]
    if auditor is None:
        return ["  auditor: none pinned (the evidence names no auditor)"]
    tiers = auditor["tiers"]
    names = [t["tier"] for t in tiers]
    decided = ", ".join(
        f"{d['decided']} by {d['tier']}" for d in report["tiers"]["decided_by"] if d["decided"]
    )
    lines = [f"  auditor pinned: {auditor['name']} {auditor['digest']}"]
    for tier in tiers:
        version = "" if tier["version"] is None else f" version {tier['version']}"
        lines.append(
            f"    tier {tier['tier']}: {tier['name']}{version}, {tier['digest'][:23]}…"
            + (" (the whole auditor)" if tier["digest"] == auditor["digest"] else "")
        )
    scope = (
        "the demo runs the rules tier only (no model tier)"
        if names == ["rules"]
        else f"tiers {' then '.join(names) or 'none recorded'}"
    )
    lines.append(
        f"    {scope}; observations decided: {decided or 'none'}, "
        f"{report['tiers']['escalations']} escalated"
    )
    return lines


def gate_lines(report: GateReport, left_out: dict[str, int]) -> list[str]:
    overall = report["overall"]
    decision = report["decision"].upper()
    lines = [
        f"EVR-6 gate: {decision} (labels: the simulator's scripted failure turns"
        + ("; a hold is a result, not a failure)" if report["decision"] != "pass" else ")"),
        *auditor_lines(report),
        f"  overall: {overall['traces']} traces ({overall['alarm_positive']}+/"
        f"{overall['healthy']}-): precision {_pct(overall['precision'])}, early-alarm "
        f"recall {_pct(overall['early_alarm_recall'])}, false-alarm rate "
        f"{_pct(overall['false_alarm_rate'])}, late {overall['late_alarms']}",
    ]
    families = [
        f"{name} {fam['traces']} ({fam['alarm_positive']}+/{fam['healthy']}-) "
        f"{_pct(fam['early_alarm_recall'])}/{_pct(fam['false_alarm_rate'])}"
        for name, fam in sorted(report["families"].items())
    ]
    for i in range(0, len(families), 2):
        lead = "  families (recall/false-alarm rate): " if i == 0 else "    "
        lines.append(lead + "; ".join(families[i : i + 2]))
    failed = report["failed_requirements"]
    lines += [
        f"  failed: {f['requirement']} [{f['scope']}] {f.get('detail', '')}"
        for f in failed[:MAX_FAILED_SHOWN]
    ]
    if len(failed) > MAX_FAILED_SHOWN:
        lines.append(f"  … and {len(failed) - MAX_FAILED_SHOWN} more failed (gate-report.json)")
    lines += [
        f"  left out: {count} labelled trace(s) that {_LEFT_OUT[reason]}"
        if reason in _LEFT_OUT
        else f"  left out: {count} labelled trace(s): {reason}"
        for reason, count in left_out.items()
    ]
    return lines
