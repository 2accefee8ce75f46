"""Telling an append batch's waiters: durable positions, or the error that failed them.

Theory of operation
-------------------
A group commit hands each managed ledger its :class:`~storage.segment_file.AppendBatch` es in
append order (storage/writer.py -> ``ManagedLedger.complete_appends``, on the loop). A batch's
``completions`` are, in entry order, either an ``append()`` future (one entry) or a
:class:`~storage.segment_file.RunCompletion` (``count`` consecutive entries of one
``append_run()``, reported to its :class:`~storage.segment_file.DurableSink` at once).
:func:`resolve_batch` walks them with the batch's first entry id and resolves each with its
position(s); :func:`fail_batch` fails each with a fresh error (a shared exception would pile
up tracebacks). A future its caller cancelled is skipped. Pure functions of the batch, called
by the ledger only; this module owns no state.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from storage.errors import LedgerFencedError, StorageError
from storage.positions import Position
from storage.segment_file import AppendBatch, RunCompletion

__all__ = ["fail_batch", "fenced_error", "resolve_batch"]


def resolve_batch(batch: AppendBatch, ledger_id: int) -> None:
    """Every completion of *batch* learns its position(s) in *ledger_id*, in order."""
    entry_id = batch.first_entry_id
    for done in batch.completions:
        if type(done) is RunCompletion:
            done.sink.entries_durable(ledger_id, entry_id, done.count)
            entry_id += done.count
            continue
        try:  # noqa: SIM105 (contextlib.suppress costs a context manager per entry)
            done.set_result(Position(ledger_id, entry_id))  # type: ignore[union-attr]
        except asyncio.InvalidStateError:  # cancelled by its caller
            pass
        entry_id += 1


def fail_batch(batch: AppendBatch, make_error: Callable[[], StorageError]) -> None:
    """Fail every completion of *batch* (futures not already done, and run sinks), in order,
    each with a fresh error from *make_error*."""
    for done in batch.completions:
        if type(done) is RunCompletion:
            done.sink.entries_failed(done.count, make_error())
        elif not done.done():  # type: ignore[union-attr]
            done.set_exception(make_error())  # type: ignore[union-attr]


def fenced_error(error: BaseException) -> StorageError:
    """The error of an append failed by the write failure *error* (which fenced the ledger)."""
    failure = LedgerFencedError(str(error))
    failure.__cause__ = error.__cause__ or error
    return failure
