"""The replay's metric history is what Debian's promtool (``make promtool``) makes TSDB blocks
from: ``promtool tsdb create-blocks-from openmetrics`` takes it as written."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.realparts import binary
from tests.support.stepped_history import STEP_MS, replayed

pytestmark = pytest.mark.broker  # the integration tier: promtool, no broker


def test_the_text_is_what_promtool_makes_blocks_from(tmp_path: Path) -> None:
    text = replayed([(0, "medical", True), (3 * STEP_MS + 5, "legal", False)], tmp_path)
    made = subprocess.run(
        [
            binary("promtool", "promtool"),
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            str(tmp_path / "h.om"),
            str(tmp_path / "tsdb"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    assert any(p.is_dir() for p in (tmp_path / "tsdb").iterdir())
    assert text.endswith(b"# EOF\n")
