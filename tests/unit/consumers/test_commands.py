"""The consumer-side commands: topics create, sink, tail."""

from __future__ import annotations

import pytest

from turnaudit.cli import build_parser


def test_sink_and_tail_commands_parse() -> None:
    parser = build_parser()
    assert parser.parse_args(["sink", "logs"]).service == "logs"
    assert parser.parse_args(["sink", "metrics"]).service == "metrics"
    args = parser.parse_args(
        [
            "tail",
            "--show-verdicts",
            "--from",
            "2026-11-01T12:00:00",
            "--pack",
            "medical",
            "--session",
            "s-1",
        ]
    )
    assert args.show_verdicts
    assert args.since.tzinfo is not None  # no zone given: UTC
    assert (args.pack, args.session) == ("medical", "s-1")


def test_tail_with_a_bad_time_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["tail", "--from", "yesterday"])
    assert exit_.value.code == 2
    assert "not an ISO 8601 time" in capsys.readouterr().err
