"""``turnaudit replay``'s progress: a bar on a terminal, plain lines otherwise."""

from __future__ import annotations

import pytest

from turnaudit.commands.replay import Progress
from turnaudit.replay import ReplayCheckpoint


def state(read: int, events: int) -> ReplayCheckpoint:
    """Partitions 0 [0, 50) and 1 [10, 60): ``read`` messages read, partition 0 first."""
    first = min(read, 50)
    return ReplayCheckpoint(
        "f", "t", {0: 0, 1: 10}, {0: 50, 1: 60}, {0: first, 1: 10 + read - first}, 0, events, 0
    )


@pytest.mark.parametrize("terminal", [False, True])
def test_progress_reports_every_batch(terminal: bool, capsys: pytest.CaptureFixture[str]) -> None:
    progress = Progress(terminal=terminal)
    for read, events in ((30, 30), (70, 60), (100, 90)):
        progress(state(read, events))
    progress.close()
    err = capsys.readouterr().err
    if terminal:
        assert "100/100" in err
        assert "msg" in err
    else:
        assert err.splitlines() == [
            "replay: 30/100 messages read, 30 events written",
            "replay: 70/100 messages read, 60 events written",
            "replay: 100/100 messages read, 90 events written",
        ]
