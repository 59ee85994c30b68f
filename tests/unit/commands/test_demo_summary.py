"""The demo's summary folds rows without hiding a mismatch, and names the auditor's tiers."""

from __future__ import annotations

import copy
from typing import cast

from hypothesis import given
from hypothesis import strategies as st

from turnaudit.commands.demo_summary import (
    MAX_FAILED_SHOWN,
    ReconciliationRow,
    Section,
    auditor_lines,
    gate_lines,
    mismatches,
    section_lines,
)
from turnaudit.evaluation.gate import GateReport

GROUPS = ("", "", "none", "per pack", "paths")
LABELS = st.text(alphabet="abcdefgh ", min_size=1, max_size=12).map(str.strip).filter(bool)


@st.composite
def sections(draw: st.DrawFn) -> Section:
    rows = []
    for i, (group, value, expected) in enumerate(
        draw(
            st.lists(
                st.tuples(
                    st.sampled_from(GROUPS),
                    st.integers(0, 5000),
                    st.one_of(st.just(0), st.integers(0, 5000)),
                ),
                max_size=30,
            )
        )
    ):
        observed = expected if draw(st.booleans()) else value
        label = f"row{i} {draw(LABELS)}"
        rows.append(ReconciliationRow(label, observed, expected, group, f"part{i}"))
    return Section("title", rows)


@given(sections())
def test_every_row_is_on_one_line_of_its_own_or_of_its_group(section: Section) -> None:
    lines = section_lines(section)
    assert lines[0] == "title"
    # In order: a row of no group on a line of its own, a group at its first row.
    order: list[ReconciliationRow | list[ReconciliationRow]] = []
    for row in section.rows:
        if not row.group:
            order.append(row)
        elif not any(isinstance(o, list) and o[0].group == row.group for o in order):
            order.append([r for r in section.rows if r.group == row.group])
    assert len(lines) == 1 + len(order)
    for line, item in zip(lines[1:], order, strict=True):
        if isinstance(item, ReconciliationRow):
            assert line.startswith(f"  {item.label[:20]}")
            assert line.split()[-3:] == [
                str(item.observed),
                str(item.expected),
                "ok" if item.ok else "MISMATCH",
            ]
            continue
        assert line.startswith(f"  {item[0].group}: ")
        assert line.endswith("  ok" if all(r.ok for r in item) else "  MISMATCH")
        for r in item:
            assert r.part in line
            if not r.ok:
                assert f"{r.part} {r.observed} (expected {r.expected})" in line
            elif not all(m.expected == 0 for m in item):
                assert f"{r.part} {r.observed}" in line


@given(st.lists(sections(), max_size=4))
def test_mismatches_name_every_row_that_does_not_match_and_no_other(
    drawn: list[Section],
) -> None:
    wrong = mismatches(drawn)
    assert wrong == [r.label for s in drawn for r in s.rows if r.observed != r.expected]
    printed = [line for s in drawn for line in section_lines(s)]
    assert any(line.endswith("MISMATCH") for line in printed) == bool(wrong)


def test_a_long_label_is_cut_so_the_columns_stay_in_place() -> None:
    short, long = (
        section_lines(Section("t", [ReconciliationRow(label, 3, 3)]))[1]
        for label in ("short", "x" * 90)
    )
    assert len(short) == len(long)
    assert long.endswith("3         3  ok")


RULES_TIER = {
    "tier": "rules",
    "name": "turnaudit-rule-auditor",
    "version": "2",
    "digest": "sha256:" + "ab" * 32,
}
MODEL_TIER = {
    "tier": "model",
    "name": "ollama/llama3.2:1b",
    "version": None,
    "digest": "sha256:" + "cd" * 32,
}


def report(tiers: list[dict[str, object]], digest: str, failed: int = 1) -> GateReport:
    tally = {
        "traces": 10,
        "alarm_positive": 4,
        "healthy": 6,
        "precision": 1.0,
        "early_alarm_recall": 0.75,
        "false_alarm_rate": 0.0,
        "late_alarms": 1,
    }
    return cast(
        GateReport,
        {
            "decision": "hold",
            "auditor_id": {"name": "the-auditor", "digest": digest, "tiers": tiers},
            "tiers": {
                "pinned": [t["tier"] for t in tiers],
                "escalations": 3 if len(tiers) > 1 else 0,
                "decided_by": [
                    {"tier": t["tier"], "decided": 7, "p95_latency_ms": 0.1} for t in tiers
                ],
            },
            "overall": tally,
            "families": {f"family-{i}": copy.deepcopy(tally) for i in range(5)},
            "failed_requirements": [
                {"requirement": "early_alarm_recall", "scope": f"family family-{i}", "detail": "x"}
                for i in range(failed)
            ],
        },
    )


def test_a_rules_only_auditor_is_said_to_run_the_rules_tier_with_name_version_and_digest() -> None:
    lines = auditor_lines(report([RULES_TIER], str(RULES_TIER["digest"])))
    assert lines[0] == f"  auditor pinned: the-auditor {RULES_TIER['digest']}"
    assert lines[1].startswith("    tier rules: turnaudit-rule-auditor version 2, sha256:abab")
    assert lines[1].endswith("(the whole auditor)")
    assert "the demo runs the rules tier only" in lines[2]
    assert "7 by rules, 0 escalated" in lines[2]


def test_a_two_tier_auditor_names_both_tiers_in_order() -> None:
    lines = auditor_lines(report([RULES_TIER, MODEL_TIER], "sha256:" + "ef" * 32))
    assert lines[1].startswith("    tier rules: turnaudit-rule-auditor version 2")
    assert lines[2].startswith("    tier model: ollama/llama3.2:1b, sha256:cdcd")
    assert "whole auditor" not in lines[1] + lines[2]
    assert "tiers rules then model" in lines[3]
    assert "rules tier only" not in lines[3]


@given(st.integers(0, 40), st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(1, 9)))
def test_the_gate_takes_a_bounded_number_of_lines(failed: int, left_out: dict[str, int]) -> None:
    lines = gate_lines(report([RULES_TIER], str(RULES_TIER["digest"]), failed), left_out)
    fixed = 1 + 3 + 1 + 3  # heading, auditor and tier lines, overall, five families in threes
    shown = min(failed, MAX_FAILED_SHOWN) + (failed > MAX_FAILED_SHOWN)
    assert len(lines) == fixed + shown + len(left_out)
    if failed > MAX_FAILED_SHOWN:
        assert lines[fixed + MAX_FAILED_SHOWN].startswith(
            f"  … and {failed - MAX_FAILED_SHOWN} more failed"
        )
