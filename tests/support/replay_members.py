"""Replay group members as real processes (``turnaudit replay --group``), run together."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.support import PROJECT_ROOT


def run_replay_members(
    args: Sequence[str], outs: Sequence[Path], env: Mapping[str, str], timeout: float = 120
) -> None:
    """One ``turnaudit replay`` process per output file (``args`` then ``--into
    jsonl:<out>``), all at once; fails unless every one exits 0."""
    members = [
        subprocess.Popen(
            [sys.executable, "-m", "turnaudit.cli", "replay", *args, "--into", f"jsonl:{out}"],
            env=dict(env),
            cwd=PROJECT_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for out in outs
    ]
    try:
        results = [member.communicate(timeout=timeout) for member in members]
    finally:
        for member in members:
            if member.poll() is None:
                member.kill()  # a member that did not stop fails the test, not the session
    assert [m.returncode for m in members] == [0] * len(members), [
        err[-2000:] for _, err in results
    ]
