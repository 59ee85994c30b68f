"""``keep_large_buffers``: a flush's megabytes, built a record at a time, cut into requests
and let go, are reused by the next flush instead of mapped, zeroed and faulted in again."""

from __future__ import annotations

import subprocess
import sys

# What the OTel sink does per flush, thirty times: about 4 MB of records grown 2 KB at a
# time, copied into 1 MB requests, then all of it freed. Prints the process's minor page
# faults over the flushes.
FLUSHES = """
import resource, sys
from turnaudit.consumers.runtime.heap import keep_large_buffers
if sys.argv[1] == "kept":
    assert keep_large_buffers()
chunk = b"x" * 2048
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(30):
    records = bytearray()
    for _ in range(2000):
        records += chunk
    requests = [bytes(records[i : i + (1 << 20)]) for i in range(0, len(records), 1 << 20)]
    records.clear()
    del requests
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def page_faults(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", FLUSHES, mode], capture_output=True, text=True, check=True
    )
    return int(done.stdout)


def test_kept_buffers_fault_in_a_tenth_of_the_pages_or_fewer() -> None:
    plain, kept = page_faults("plain"), page_faults("kept")
    assert plain > 30 * 1000  # every flush faults its megabytes in again (4 KiB pages)
    assert kept * 10 < plain, (kept, plain)
