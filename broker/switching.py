"""The interpreter's thread switch interval in the ``horae serve`` process.

Theory of operation
-------------------
Under load the event-loop thread runs Python almost all the time; the storage threads (the
group-commit writer and its sync stage, the cursor savers) run Python only between their
system calls, and each time one of them returns from a ``writev`` or an ``fdatasync`` it must
take the interpreter lock back. CPython hands the lock over only after the holder has kept it
for the switch interval since the request (``sys.getswitchinterval()``, 5 ms by default). A
publish crosses several such hand-overs (its write, its fdatasync, the completion handed back
to the loop), so while the loop is busy -- a herd of due messages -- each publish waits up to
the interval at each of them for the interpreter, not for the disk.

:data:`SWITCH_INTERVAL_S` bounds each of those waits. The loop thread pays for a switch only
when another thread is actually waiting for the lock (a few microseconds each); with nothing
waiting the interval costs nothing. Set in the ``horae serve`` process only: the interval is
process-wide, and a broker embedded in another program leaves that program's alone.
"""

from __future__ import annotations

import sys

__all__ = ["SWITCH_INTERVAL_S", "apply_switch_interval"]

#: Longest a storage thread waits for the interpreter while the loop thread is busy (s).
SWITCH_INTERVAL_S = 0.0005


def apply_switch_interval(interval_s: float = SWITCH_INTERVAL_S) -> float:
    """Set the process's switch interval; returns the one it replaces."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(interval_s)
    return before
