"""A managed ledger's size is a kept total, equal to a walk over its ledgers after every change."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from storage_testlib import open_store

from storage.ledger import ManagedLedger
from storage.ledger_list import LedgerList
from storage.ledger_state import LedgerState
from storage.segment_file import SegmentFile

TOPIC = "persistent://public/default/sized"


def _walked(ml: ManagedLedger) -> int:
    """The size as a walk over every ledger (and the relocated copies) finds it."""
    return sum(info.size_bytes for info in ml.ledgers) + ml.relocated.size_bytes


def _state(tmp_path: Path, ledger_id: int, size: int) -> LedgerState:
    led = LedgerState(SegmentFile(ledger_id, tmp_path / f"{ledger_id}.seg", 0), sealed=True)
    led.size_bytes = size
    return led


def test_ledger_list_total_follows_adds_sets_and_removes(tmp_path: Path) -> None:
    ledgers = LedgerList()
    a, b = _state(tmp_path, 1, 10), _state(tmp_path, 2, 5)
    ledgers.add(a)
    ledgers.add(b)
    assert ledgers.total_size_bytes() == 15
    b.size_bytes += 7
    a.size_bytes = 0
    assert ledgers.total_size_bytes() == 12
    removed = ledgers.remove(2)
    assert removed is b and ledgers.total_size_bytes() == 0
    removed.size_bytes = 100   # a ledger out of the list no longer counts
    assert ledgers.total_size_bytes() == 0
    again = _state(tmp_path, 1, 3)   # the same id listed again replaces the old state
    ledgers.add(again)
    a.size_bytes = 50
    assert ledgers.total_size_bytes() == 3 and ledgers.ids == [1]
    with pytest.raises(ValueError, match="already in a ledger list"):
        LedgerList().add(again)


async def test_size_equals_a_walk_after_appends_rollovers_trims_and_a_restart(
        tmp_path: Path) -> None:
    store = await open_store(tmp_path, max_entries_per_ledger=4)
    ml = await store.open_ledger(TOPIC)
    cursor = await ml.open_cursor("s", initial_position="earliest")
    assert ml.total_size_bytes == _walked(ml) == 0
    positions = await asyncio.gather(*(ml.append(b"x" * (i + 1)) for i in range(10)))
    assert ml.total_size_bytes == _walked(ml) == sum(range(1, 11))
    positions += [await ml.append(b"y" * 100)]   # one more, alone in its batch
    assert ml.total_size_bytes == _walked(ml) == sum(range(1, 11)) + 100
    cursor.mark_delete(positions[5])   # into the second ledger: the first can go
    assert await ml.trim() == [positions[0].ledger_id]
    assert ml.total_size_bytes == _walked(ml) == sum(range(5, 11)) + 100
    cursor.mark_delete(positions[-1])
    await ml.trim()
    assert ml.total_size_bytes == _walked(ml) == 100 + 9 + 10   # the last ledger stays
    kept = ml.total_size_bytes
    await store.close()

    store = await open_store(tmp_path, max_entries_per_ledger=4)   # recovery reads the sizes back
    ml = await store.open_ledger(TOPIC)
    assert ml.total_size_bytes == _walked(ml) == kept
    await ml.append(b"z" * 7)
    assert ml.total_size_bytes == _walked(ml) == kept + 7
    await store.delete_ledger(TOPIC)
    ml = await store.open_ledger(TOPIC)
    assert ml.total_size_bytes == _walked(ml) == 0
    await store.close()
