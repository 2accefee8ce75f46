"""Awaiting work handed to a thread to its end, even when the awaiting task is cancelled.

A write or a delete handed to a storage thread goes on regardless of a cancel of the task
awaiting it (the store's close cancels its background flush; a connection's request tasks are
cancelled when it goes). Whatever the awaiting code holds for the work (a lock, a "one at a
time" rule, a path the next attempt reuses, the state it records once the work is over) must
be held until the thread is done: otherwise the next save writes the same temporary file
beside it, or an open reads a directory a delete is moving away. :func:`to_the_end` awaits
the work to its end and says whether the caller was cancelled meanwhile; the caller raises
``CancelledError`` once it has recorded what the work did. :func:`finish` is the usual case:
nothing to record, the cancel raised as soon as the work is over.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["finish", "to_the_end"]

T = TypeVar("T")


async def to_the_end(work: Awaitable[T]) -> tuple[T, bool]:
    """Await *work* to its end even when the caller is cancelled meanwhile; returns its result
    and whether the caller was cancelled. The work's own error is raised."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait((task,))
        except asyncio.CancelledError:
            cancelled = True
    return task.result(), cancelled


async def finish(work: Awaitable[T]) -> T:
    """Await *work* to its end; a cancel of the caller meanwhile is raised once it is over."""
    result, cancelled = await to_the_end(work)
    if cancelled:
        raise asyncio.CancelledError
    return result
