"""The copy-forward walk over a large backlog is bounded per run: it looks at no more entries
than its budget, lets the event loop run between ledgers, and the next run goes on where it
stopped (then starts over at the first ledger)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from broker.delayed.relocate import Walk, relocate_held
from storage.positions import Position

LEDGERS = 10
ENTRIES = 100


class _Cursor:
    mark_delete_position = Position(-1, -1)

    def is_deleted(self, pos: Position) -> bool:
        return False


def _ledger() -> Any:
    """Sealed ledgers of pending delayed entries only, then the current (open) one."""
    infos = [SimpleNamespace(ledger_id=i, entries=ENTRIES, sealed=True, size_bytes=ENTRIES * 10,
                             created_ms=0) for i in range(LEDGERS)]
    infos.append(SimpleNamespace(ledger_id=LEDGERS, entries=0, sealed=False, size_bytes=0,
                                 created_ms=0))
    return SimpleNamespace(trim_blockers={}, closed=False, ledgers=infos,
                           relocated=SimpleNamespace(is_relocated=lambda lid: False))


def _run(walk: Walk | None, pending: Any) -> tuple[list[int], int]:
    """One walk: (ledgers looked at, in order; loop turns another task made meanwhile)."""
    looked: list[int] = []

    def record(pos: Position) -> bool:
        if not looked or looked[-1] != pos.ledger_id:
            looked.append(pos.ledger_id)
        return bool(pending(pos))

    async def main() -> int:
        turns = 0

        async def ticker() -> None:
            nonlocal turns
            while True:
                turns += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        before = turns
        # every ledger is dense (all of it pending): looked at, passed over, nothing copied
        assert await relocate_held(_ledger(), [(_Cursor(), record)], walk=walk) == []
        task.cancel()
        return turns - before

    return looked, asyncio.run(main())


def test_each_run_looks_at_its_budget_and_the_next_goes_on() -> None:
    walk = Walk(max_entries=2 * ENTRIES + ENTRIES // 2)
    runs = [_run(walk, lambda pos: True) for _ in range(6)]
    assert [looked for looked, _ in runs] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [0, 1]]
    # the loop ran between the two ledgers of each run
    assert all(turns >= 1 for _, turns in runs)


def test_without_a_walk_one_run_looks_at_every_ledger() -> None:
    looked, _ = _run(None, lambda pos: True)
    assert looked == list(range(LEDGERS))


def test_a_ledger_held_by_something_else_sends_the_next_run_to_the_first() -> None:
    walk = Walk(max_entries=2 * ENTRIES)
    assert _run(walk, lambda pos: True)[0] == [0, 1]
    assert walk.resume_after == 1
    # an entry of ledger 2 is held by something else than a pending delayed message: the
    # walk stops there, and the next run starts over
    looked, _ = _run(walk, lambda pos: pos != Position(2, 7))
    assert looked == [2]
    assert walk.resume_after is None
    assert _run(walk, lambda pos: True)[0] == [0, 1]
