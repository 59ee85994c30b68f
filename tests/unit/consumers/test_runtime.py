"""The shared consumer runtime on the real broker: dead letters, contracts, delivery, HTTP."""

from __future__ import annotations

import gc

from turnaudit.consumers.runtime.gc_sizing import GC_OBJECTS_PER_MESSAGE as _GC_OBJECTS_PER_MESSAGE
from turnaudit.consumers.runtime.gc_sizing import BatchSizedGC as _BatchSizedGC


def test_the_collector_sizing_holds_while_any_service_runs_and_is_undone_after() -> None:
    saved = gc.get_threshold()
    sizing = _BatchSizedGC()
    try:
        gc.set_threshold(700, 10, 10)
        sizing.enter(500)
        assert gc.get_threshold() == (500 * _GC_OBJECTS_PER_MESSAGE, 10, 10)
        sizing.enter(100)  # a second service in the process never shrinks it
        assert gc.get_threshold() == (500 * _GC_OBJECTS_PER_MESSAGE, 10, 10)
        sizing.exit()
        assert gc.get_threshold() == (500 * _GC_OBJECTS_PER_MESSAGE, 10, 10)
        sizing.exit()
        assert gc.get_threshold() == (700, 10, 10)
        gc.set_threshold(50_000, 5, 5)  # a process that chose a larger one keeps it
        sizing.enter(500)
        assert gc.get_threshold() == (50_000, 5, 5)
        sizing.exit()
        assert gc.get_threshold() == (50_000, 5, 5)
    finally:
        gc.set_threshold(*saved)
