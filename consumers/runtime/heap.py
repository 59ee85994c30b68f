"""glibc's heap told to keep a sink's large buffers for the next flush (``keep_large_buffers``).

glibc serves an allocation over its mmap threshold (128 KiB at first, raised as such
blocks are freed) with pages mapped for it alone and unmapped when it is freed, and gives
the top of its heap back once more than the trim threshold is free there. A sink that
builds megabytes of output per flush and lets them go (the OTel sink: about 2 KB of OTLP
records a turn, then the requests made of them) so has every page of them mapped, zeroed
by the kernel and faulted in again at each flush: about one page fault a turn, measured
as most of what that sink spends over the log sink. With the thresholds raised, the
freed buffers stay in the heap and the next flush reuses them. The cost: up to
``trim_threshold`` bytes of freed heap kept by the process.
"""

from __future__ import annotations

import ctypes

# mallopt's parameters (<malloc.h>).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# glibc's largest mmap threshold on 64-bit systems (DEFAULT_MMAP_THRESHOLD_MAX).
MMAP_THRESHOLD_MAX = 32 << 20
TRIM_THRESHOLD = 64 << 20


def keep_large_buffers(
    mmap_threshold: int = MMAP_THRESHOLD_MAX, trim_threshold: int = TRIM_THRESHOLD
) -> bool:
    """Raise this process's thresholds; True where glibc took both, False where the C
    library is another (nothing changed there)."""
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "gnu_get_libc_version"):  # musl and others: no such tunables
        return False
    mallopt = libc.mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, mmap_threshold)) and bool(
        mallopt(M_TRIM_THRESHOLD, trim_threshold)
    )
