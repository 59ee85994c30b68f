"""Line files a service appends to: a torn last line is cut, whole lines kept."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from turnaudit.consumers.runtime.line_files import cut_torn_tail


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(
        st.binary(min_size=1, max_size=300).map(lambda b: b.replace(b"\n", b" ")), max_size=30
    ),
    torn=st.binary(max_size=70_000).map(lambda b: b.replace(b"\n", b" ")),
)
def test_a_torn_tail_is_cut_back_to_the_last_whole_line(lines: list[bytes], torn: bytes) -> None:
    # Any whole lines, then any partial line a killed process left (the block
    # size of the backwards search included): only the whole lines remain.
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "turns.log"
        whole = b"".join(line + b"\n" for line in lines)
        path.write_bytes(whole + torn)
        cut_torn_tail(path)
        assert path.read_bytes() == whole
        cut_torn_tail(path)  # idempotent on a whole file
        assert path.read_bytes() == whole
