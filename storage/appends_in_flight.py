"""Appends the group-commit writer holds: handed over by the loop, not yet handed back.

Theory of operation
-------------------
The writer (storage/writer.py) counts a batch in when the loop opens it (``new_batch``) and
out when its outcome comes back to the loop (sync_stage's hand-back), so ``batches`` is the
number of batches whose appends still wait for the write and sync threads. Both ends run on
the loop: a plain integer, no lock.

Who reads it: a busy dispatcher (broker/subscriptions/dispatchers/base.py), at the end of a
dispatch slice. While a publish waits for its write and fdatasync, the storage threads need the
interpreter at each step (taking the batch, after ``writev``, after ``fdatasync``); a loop
running slice after slice keeps it, and each step then waits up to the interpreter's switch
interval (5 ms). :meth:`AppendsInFlight.let_through` releases it for a moment
(``time.sleep(0)``: the kernel's timer slack, ~0.05-0.1 ms), which hands it to a thread
waiting for it: the dispatcher calls it at a slice's end while a batch is in flight, instead
of waiting for the batch to come back (up to 1 ms of an idle loop per slice, which slowed a
herd by a tenth to a half on an idle machine).
"""

from __future__ import annotations

import time

__all__ = ["AppendsInFlight"]


class AppendsInFlight:
    """The writer's batches not yet handed back (loop only; module docstring)."""

    __slots__ = ("batches",)

    def __init__(self) -> None:
        self.batches = 0

    def opened(self) -> None:
        """A batch was opened: its appends are on their way to the writer."""
        self.batches += 1

    def returned(self, count: int) -> None:
        """*count* batches came back to the loop (durable or failed)."""
        self.batches = max(0, self.batches - count)

    def let_through(self) -> bool:
        """While a batch is in flight, release the interpreter for a moment so a storage
        thread waiting for it takes it now; returns whether it did (module docstring)."""
        if not self.batches:
            return False
        time.sleep(0)
        return True
