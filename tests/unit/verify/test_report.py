"""The typed report writes what verify has always written: the JSON of a range with
every kind of finding, and its summary, byte for byte as before the package split."""

from __future__ import annotations

import io
import json
from pathlib import Path

from tests.support.events import encode, turn
from tests.unit.verify import scenario
from turnaudit.verify.files import reconcile_log
from turnaudit.verify.report import DeadLetters, RangeJson, VerifyReport
from turnaudit.verify.scrape import reconcile_metrics
from turnaudit.verify.verifier import Verifier

# The log file's path as the golden report names it.
GOLDEN_LOG = "/tmp/golden-turns.jsonl"


def golden_report(tmp_path: Path) -> VerifyReport:
    verifier = Verifier(
        scenario.DECODE, log_start_offsets={0: 0, 1: 0, 2: 0}, anchors=scenario.anchors()
    )
    scenario.feed_all(verifier.feed)
    undecodable = {f.place for f in verifier.undecodable}
    assert len(undecodable) == 1
    range_json: RangeJson = {
        "topic": "turns",
        "description": "the whole retained stream; offsets p0 [0, 23)",
        "partitions": {"0": [0, 23], "1": [0, 22], "2": [0, 22]},
        "from": None,
        "to": None,
        "from_log_start": True,
    }
    report = VerifyReport(
        range_json,
        verifier,
        DeadLetters(
            1,
            {"undecodable": 1},
            {"validation": 1},
            frozenset(p for p in undecodable if p is not None),
        ),
    )
    log = scenario.log_file(tmp_path / "turns.jsonl", sorted(verifier.event_ids))
    report.log = reconcile_log(log, verifier.event_ids)
    report.log.path = GOLDEN_LOG
    c = verifier.counts
    short = {pack: dict(f) for pack, f in c.by_pack().items()}
    short["devops"]["turns"] -= 2
    short["devops"]["hedged"] -= 1
    report.metrics = [
        reconcile_metrics("http://a/metrics", c, scenario.metrics_text(c.by_pack())),
        reconcile_metrics("http://b/metrics", c, scenario.metrics_text(short)),
    ]
    return report


def test_the_json_report_is_byte_for_byte_the_one_verify_wrote(tmp_path: Path) -> None:
    report = golden_report(tmp_path)
    assert scenario.dump(report.as_json()) == (scenario.GOLDEN / "report.json").read_text()


def test_the_streamed_json_is_the_json_report_byte_for_byte(tmp_path: Path) -> None:
    """``write_json`` (what ``verify --json`` prints) writes the heads one at a time; the
    text is the golden report's, and ``json.dump``'s of ``as_json()``, exactly."""
    report = golden_report(tmp_path)
    out = io.StringIO()
    report.write_json(out)
    assert out.getvalue() + "\n" == (scenario.GOLDEN / "report.json").read_text()
    assert out.getvalue() + "\n" == scenario.dump(report.as_json())
    assert json.loads(out.getvalue())["streams"]["heads"]  # the scenario has chained heads


def test_the_streamed_json_without_heads_is_the_json_report() -> None:
    verifier = Verifier(scenario.DECODE, log_start_offsets={0: 0})
    report = VerifyReport(
        {
            "topic": "turns",
            "description": "nothing",
            "partitions": {},
            "from": None,
            "to": None,
            "from_log_start": True,
        },
        verifier,
        DeadLetters(0, {}, {}, frozenset()),
    )
    out = io.StringIO()
    report.write_json(out)
    assert out.getvalue() + "\n" == scenario.dump(report.as_json())
    assert json.loads(out.getvalue())["streams"]["heads"] == []


def test_the_streamed_json_holds_event_text_that_looks_like_a_mark() -> None:
    """Packs and sessions are the events' own text: whatever they hold, the heads go
    where ``json.dump`` puts them."""
    verifier = Verifier(scenario.DECODE, log_start_offsets={0: 0})
    for n, text in enumerate(["\x00heads\x00", "\\u0000heads", '"heads": []']):
        event = turn(text, 0, pack=text)
        verifier.feed(0, n, text.encode(), encode(event))
    verifier.feed(
        0,
        3,
        scenario.stamped_events(1, seed=2, producers=1, sessions=1)[0].key,
        scenario.stamped_events(1, seed=2, producers=1, sessions=1)[0].value,
    )
    report = VerifyReport(
        {
            "topic": "turns",
            "description": "marks",
            "partitions": {"0": [0, 4]},
            "from": None,
            "to": None,
            "from_log_start": True,
        },
        verifier,
        DeadLetters(0, {}, {}, frozenset()),
    )
    out = io.StringIO()
    report.write_json(out)
    assert out.getvalue() + "\n" == scenario.dump(report.as_json())
    assert len(json.loads(out.getvalue())["streams"]["heads"]) == 1


def test_the_summary_is_line_for_line_the_one_verify_printed(tmp_path: Path) -> None:
    report = golden_report(tmp_path)
    assert report.human() + "\n" == (scenario.GOLDEN / "report.txt").read_text()


def test_every_kind_of_finding_is_in_the_golden_report() -> None:
    document = json.loads((scenario.GOLDEN / "report.json").read_text())
    assert set(document["unexplained_by_kind"]) == {
        "anchor_absent",
        "chain_break",
        "content_changed",
        "key_mismatch",
        "late_arrival",
        "lost",
        "not_logged",
        "position_reused",
        "rewritten",
        "truncated",
        "uncounted",
    }
    assert document["duplicates"]["count"] == 1
    assert document["redeliveries"] == 1
    assert document["undecodable"] == 1  # dead-lettered: explained
    # Breaching turns are counted as turns and listed, not unexplained.
    assert document["breaching_turns"]["by_contract"] == {
        "refusal_hedge_exclusive": 1,
        "stub_fields": 1,
    }
    assert [t["event_id"] for t in document["breaching_turns"]["turns"]] == [
        "breach-1-0",
        "breach-2-0",
    ]


def test_a_report_without_dead_letters_or_reconciliations_is_ok_when_nothing_is_wrong() -> None:
    verifier = Verifier(scenario.DECODE)
    for m in scenario.stamped_events(12, seed=9, producers=1, sessions=2):
        verifier.feed(0, verifier.messages, m.key, m.value)
    report = VerifyReport(
        {
            "topic": "t",
            "description": "d",
            "partitions": {},
            "from": None,
            "to": None,
            "from_log_start": True,
        },
        verifier,
    )
    document = report.as_json()
    assert report.ok
    assert document["verdict"] == "ok"
    assert document["dead_letters"] == {"count": 0, "by_reason": {}, "by_stage": {}}
    assert document["counts"]["turns"] == 12
    assert report.human().endswith("verify: every turn accounted for")
