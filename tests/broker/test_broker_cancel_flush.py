"""The cursor writes of concurrent cancels on one subscription are shared (a group commit):
each cancel returns once a write that started after its acknowledgement is durable."""

from __future__ import annotations

import asyncio

import pytest

from broker.subscriptions.cancel import _flush_together


class GatedCursor:
    """A cursor whose writes wait for the test: what each write covered is recorded."""

    def __init__(self) -> None:
        self.acked = 0                 # acknowledgements made so far
        self.writes: list[int] = []    # acknowledgements each finished write covered
        self.gate = asyncio.Event()
        self.started = asyncio.Event()
        self.fail = False

    async def flush(self) -> None:
        covered = self.acked
        self.started.set()
        await self.gate.wait()
        self.gate.clear()
        if self.fail:
            raise OSError("injected write failure")
        self.writes.append(covered)


async def test_cancels_arriving_during_a_write_share_the_next_one() -> None:
    cursor = GatedCursor()
    cursor.acked = 1
    first = asyncio.ensure_future(_flush_together(cursor))     # type: ignore[arg-type]
    await cursor.started.wait()
    cursor.started.clear()
    later = []
    for _ in range(5):                 # acknowledged while the first write is in flight
        cursor.acked += 1
        later.append(asyncio.ensure_future(_flush_together(cursor)))  # type: ignore[arg-type]
    await asyncio.sleep(0)
    cursor.gate.set()
    await first
    assert not any(t.done() for t in later)       # their acks came after that write started
    await cursor.started.wait()
    cursor.gate.set()
    await asyncio.gather(*later)
    assert cursor.writes == [1, 6]                # two writes for six cancels


async def test_a_failed_write_fails_the_cancels_it_covered_only() -> None:
    cursor = GatedCursor()
    cursor.fail = True
    task = asyncio.ensure_future(_flush_together(cursor))      # type: ignore[arg-type]
    await cursor.started.wait()
    cursor.started.clear()
    cursor.gate.set()
    with pytest.raises(OSError):
        await task
    cursor.fail = False
    task = asyncio.ensure_future(_flush_together(cursor))      # type: ignore[arg-type]
    await cursor.started.wait()
    cursor.gate.set()
    await task
    assert cursor.writes == [0]
