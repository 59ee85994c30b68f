"""prometheus_client's multiprocess files, read while worker processes come and go.

A process that starts creates its metrics file and sizes it a moment later; read in
between, the file is empty and prometheus_client's reader raises (``struct.error``).
Such a file holds no sample yet, so readers here leave it out: the supervisor's
``/metrics`` and a worker looking up what the others delivered.
"""

from __future__ import annotations

import glob
import os
import struct
from collections.abc import Iterable

from prometheus_client.metrics_core import Metric
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.multiprocess import MultiProcessCollector


def readable_files(directory: str) -> list[str]:
    """The directory's metrics files that can be read now."""
    found = []
    for path in glob.glob(os.path.join(directory, "*.db")):
        try:
            MmapedDict.read_all_values_from_file(path)  # type: ignore[no-untyped-call]  # untyped lib
        except (OSError, ValueError, struct.error):
            continue  # being created (or removed) right now
        found.append(path)
    return found


def merged(directory: str) -> Iterable[Metric]:
    """Every worker's samples merged, as prometheus_client merges them."""
    families: Iterable[Metric] = MultiProcessCollector.merge(  # type: ignore[no-untyped-call]  # untyped lib
        readable_files(directory), accumulate=True
    )
    return families


class SettledMultiProcessCollector(MultiProcessCollector):
    """``MultiProcessCollector`` that reads past a file a starting process has not sized."""

    def collect(self) -> Iterable[Metric]:
        return merged(self._path)
