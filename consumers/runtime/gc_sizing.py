"""The cyclic collector's first generation sized to hold a batch."""

from __future__ import annotations

import gc
import threading

# Container objects a consumed message keeps alive until its batch is done
# (decoded record, its nested dicts and lists, the turn, a sink's own per-turn
# objects), with room to spare.
GC_OBJECTS_PER_MESSAGE = 50


class BatchSizedGC:
    """A batch keeps its decoded records alive until the sink has them: with the
    default threshold (700 container objects) the collector runs a dozen
    times per batch, traversing and promoting records that reference counting
    frees a moment later, which costs several microseconds per message. Sized
    to a batch, it runs about once every few batches. The process's own
    threshold comes back when the last service in it stops.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._saved: tuple[int, int, int] = gc.get_threshold()

    def enter(self, batch_size: int) -> None:
        with self._lock:
            if self._users == 0:
                self._saved = gc.get_threshold()
            gen0, gen1, gen2 = gc.get_threshold()
            gc.set_threshold(max(gen0, batch_size * GC_OBJECTS_PER_MESSAGE), gen1, gen2)
            self._users += 1

    def exit(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0:
                gc.set_threshold(*self._saved)


batch_sized_gc = BatchSizedGC()
