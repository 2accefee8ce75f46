"""The interpreter handed to a storage thread back from a write or an fdatasync.

Theory of operation
-------------------
The group commit's write and sync threads need the interpreter right after each of their
blocking calls: the sync thread's next step
after an fdatasync is to hand the group commit back to the loop. Under uvloop a busy event
loop lets go of the interpreter between any two callbacks and takes it straight back, and
CPython 3.11 lets a waiting thread force a switch only after a whole switch interval without
any release, so such a thread waits for as long as the loop stays busy (measured: the sync
thread waited for the interpreter 28% of its time at 50,000 keyed publishes a second, and the
broker's fdatasync figure, which includes that wait, halved once it was handed over).

:class:`storage.fileops.FileOps` makes its ``pwrite``, ``writev`` and ``fdatasync`` through
this module, which counts the calling thread from the system call's return until it holds
the interpreter again; the loop calls :func:`yield_to_waiting` before each socket read it is
handed (broker/net/connection.py): when a thread is counted the loop lets go of the
interpreter until none is, :data:`YIELD_MAX_US` at most. storage/_handoff.c has the details.

Without the optional C extension (no compiler at install time) these are ``os.pwrite``,
``os.writev`` and ``os.fdatasync``, and the loop never yields: what ran before.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Final

__all__ = ["AVAILABLE", "YIELD_MAX_US", "fdatasync", "pwrite", "stats", "waiting", "writev",
           "yield_to_waiting"]

#: The longest the loop lets go of the interpreter for the counted threads, in µs: a thread
#: scheduled on a busy machine must not stall the loop for long.
YIELD_MAX_US: Final = 200

fdatasync: Callable[[int], None]
pwrite: Callable[[int, bytes | memoryview, int], int]
writev: Callable[[int, Sequence[bytes | memoryview]], int]
waiting: Callable[[], int]
#: (waits, seconds waited, loop yields, seconds the loop yielded) since the start: each wait
#: from a system call's return to the interpreter held, each yield from letting go of the
#: interpreter to holding it again (/metrics: horae_storage_interpreter_*).
stats: Callable[[], tuple[int, float, int, float]]
yield_to_waiting: Callable[[int], bool]

try:
    import storage._handoff as _handoff
except ImportError:   # built without a C compiler
    AVAILABLE = False
    fdatasync = os.fdatasync
    pwrite = os.pwrite
    writev = os.writev

    def waiting() -> int:
        return 0

    def stats() -> tuple[int, float, int, float]:
        return (0, 0.0, 0, 0.0)

    def yield_to_waiting(max_us: int) -> bool:
        return False
else:
    AVAILABLE = True
    fdatasync = _handoff.fdatasync
    pwrite = _handoff.pwrite
    writev = _handoff.writev
    waiting = _handoff.waiting
    stats = _handoff.stats
    yield_to_waiting = _handoff.yield_to_waiting
