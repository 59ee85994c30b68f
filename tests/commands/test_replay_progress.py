"""``turnaudit replay``'s progress: a bar on a terminal, plain lines otherwise."""

from __future__ import annotations

import pytest

from turnaudit.commands.replay import Progress
from turnaudit.replay import ReplayCheckpoint


def state(events: int) -> ReplayCheckpoint:
    return ReplayCheckpoint("f", "t", {0: 0, 1: 10}, {0: 50, 1: 60}, {0: 0, 1: 10}, 0, events, 0)


@pytest.mark.parametrize("terminal", [False, True])
def test_progress_reports_every_batch(terminal: bool, capsys: pytest.CaptureFixture[str]) -> None:
    progress = Progress(terminal=terminal)
    for events in (30, 70, 100):
        progress(state(events))
    progress.close()
    err = capsys.readouterr().err
    if terminal:
        assert "100/100" in err
        assert "events" in err
    else:
        assert err.splitlines() == [
            "replay: 30/100 events", "replay: 70/100 events", "replay: 100/100 events",
        ]
