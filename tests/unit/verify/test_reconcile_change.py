"""Reconciling with running services: the verdict-metrics counters' change over the
range, per pack; the log sink's current file and its rotated copies."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.unit.verify import scenario
from turnaudit.consumers.log_sink import TurnLineWriter
from turnaudit.consumers.runtime.settings import LogSinkSettings
from turnaudit.telemetry import rotated_log_files
from turnaudit.verify.counts import TurnCounts
from turnaudit.verify.files import reconcile_log
from turnaudit.verify.reconciliation import counters_change, metric_figures_by_pack
from turnaudit.verify.scrape import reconcile_metrics
from turnaudit.verify.verifier import Verifier


def counted_range() -> TurnCounts:
    verifier = Verifier(scenario.DECODE)
    for m in scenario.stamped_events(40, seed=3, producers=2, sessions=5):
        verifier.feed(0, verifier.messages, m.key, m.value)
    return verifier.counts


def plus(a: dict[str, dict[str, int]], b: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    return {
        p: {
            k: a.get(p, {}).get(k, 0) + b.get(p, {}).get(k, 0)
            for k in ("turns", "refused", "hedged", "stub")
        }
        for p in set(a) | set(b)
    }


def test_the_counters_change_over_the_range_is_what_is_compared() -> None:
    counts = counted_range()
    earlier = {
        "general": {"turns": 500, "refused": 7, "hedged": 9, "stub": 4},
        "devops": {"turns": 11, "refused": 1, "hedged": 0, "stub": 0},
    }
    range_ = {p: dict(f) for p, f in counts.by_pack().items()}
    before = scenario.metrics_text(earlier)
    after = scenario.metrics_text(plus(earlier, range_))
    found = reconcile_metrics("u", counts, after, before=before)
    assert found.agrees
    assert found.baseline
    assert found.counted == counts.figures()
    # Without the page at the range's start the earlier turns count against it.
    assert not reconcile_metrics("u", counts, after).agrees


def test_one_turn_missing_from_a_pack_names_the_pack_and_the_counter() -> None:
    counts = counted_range()
    range_ = {p: dict(f) for p, f in counts.by_pack().items()}
    pack = sorted(range_)[0]
    range_[pack]["turns"] -= 1
    found = reconcile_metrics(
        "u", counts, scenario.metrics_text(range_), before=scenario.metrics_text({})
    )
    [gap] = found.disagreements()
    assert (gap.pack, gap.counter) == (pack, "turnaudit_turns_total")
    assert gap.stream - gap.counted == 1
    assert f"pack {pack}: turnaudit_turns_total" in gap.text()


def test_a_pack_counted_only_before_the_range_is_no_disagreement() -> None:
    before = metric_figures_by_pack(
        scenario.metrics_text({"old": {"turns": 3, "refused": 0, "hedged": 0, "stub": 0}})
    )
    assert counters_change(before, before) == {}


def test_the_end_scrape_is_retried_while_the_service_catches_up() -> None:
    counts = counted_range()
    range_ = {p: dict(f) for p, f in counts.by_pack().items()}
    pages = [scenario.metrics_text({}), scenario.metrics_text(range_)]
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    found = reconcile_metrics(
        "u",
        counts,
        before=scenario.metrics_text({}),
        settle_s=5,
        fetch=lambda _: pages.pop(0) if len(pages) > 1 else pages[0],
        clock=lambda: now[0],
        sleep=sleep,
    )
    assert found.agrees
    stuck = reconcile_metrics(
        "u",
        counts,
        before=scenario.metrics_text({}),
        settle_s=2,
        fetch=lambda _: scenario.metrics_text({}),
        clock=lambda: now[0],
        sleep=sleep,
    )
    assert not stuck.agrees


def test_the_log_sinks_rotated_files_are_read_with_the_current_one(tmp_path: Path) -> None:
    path = tmp_path / "turns.jsonl"
    writer = TurnLineWriter(LogSinkSettings(file=path, file_max_bytes=1024, file_backups=50))
    ids = [f"e-{n:03d}" for n in range(60)]
    writer.write_lines(
        [(json.dumps({"event": "turn", "event_id": e}) + "\n").encode() for e in ids]
    )
    writer.close()
    files = rotated_log_files(path, os.listdir(tmp_path))
    assert len(files) >= 3
    assert files[-1] == path
    assert files[0].name.endswith(f".{len(files) - 1}")
    in_order = [json.loads(line)["event_id"] for f in files for line in f.read_text().splitlines()]
    assert in_order == ids  # oldest first: the sink's naming
    found = reconcile_log(path, set(ids))
    assert found.agrees
    assert found.lines == 60
    files[1].unlink()  # a rotated copy lost
    assert not reconcile_log(path, set(ids)).agrees
