"""Copy-forward of pending delayed entries: ledgers held only by them are trimmed, nothing lost.

A topic of 4 sealed ledgers (10 entries each) plus the current one; every 5th entry is a
delayed message due months ahead (pending in the subscription's tracker, here a set), every
other entry acknowledged. The crash states are taken by copying the store's directory while
it is open (what a kill -9 leaves: fsync is off, the page cache holds every write) at each cut
point: after the copy (no index), after the index (ledger not yet deleted), after the delete.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pyroaring import BitMap

from broker.delayed.relocate import DelayedRelocator, release_acknowledged, relocate_held
from protocol import pulsar_pb as pb
from protocol.metadata import encode_entry, peek_dispatch
from storage import SegmentStore
from storage.config import StorageConfig
from storage.ledger import ManagedLedger
from storage.positions import Position
from storage.relocation import DIRECTORY, write_copy, write_index

NAME = "persistent://public/default/relocated"
DUE = 1_900_000_000_000  # months ahead


def entry(i: int, delayed: bool) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=1_700_000_000_000)
    if delayed:
        md.deliver_at_time = DUE + (i % 3) * 7_200_000  # three due-time windows
    return encode_entry(md, b"payload-%05d" % i + b"." * 200)


async def open_store(root: Path) -> SegmentStore:
    return await SegmentStore.open(root, StorageConfig(fsync=False, max_entries_per_ledger=10))


class Topic:
    """A store, its ledger and subscription, the pending set (the tracker) and the bytes."""

    def __init__(self, store: SegmentStore, ledger: ManagedLedger) -> None:
        self.store = store
        self.ledger = ledger
        self.pending: set[Position] = set()
        self.data: dict[Position, bytes] = {}

    @property
    def cursor(self):  # type: ignore[no-untyped-def]
        return self.ledger.cursors["sub"]

    def holders(self):  # type: ignore[no-untyped-def]
        return [(self.cursor, lambda pos: pos in self.pending)]


@pytest.fixture
async def topic(tmp_path: Path) -> AsyncIterator[Topic]:
    store = await open_store(tmp_path / "live")
    ledger = await store.open_ledger(NAME)
    cursor = await ledger.open_cursor("sub", initial_position="earliest")
    t = Topic(store, ledger)
    for i in range(40):
        data = entry(i, i % 5 == 0)
        pos = await ledger.append(data)
        t.data[pos] = data
        if i % 5 == 0:
            t.pending.add(pos)
        else:
            cursor.delete([pos])
    await ledger.append(entry(99, False))  # rolls: the 4th ledger is sealed
    assert len(ledger.ledgers) == 5
    try:
        yield t
    finally:
        if not ledger.closed:
            await t.store.close()


async def read_all(ledger: ManagedLedger) -> dict[Position, bytes]:
    first = ledger.first_position
    assert first is not None
    got = await ledger.read_entries(first, 1000)
    return {e.position: e.data for e in got}


def _copy_if_present(src: str, dst: str) -> None:
    """A file renamed or deleted between the listing and its copy (a sealed segment's index
    written in the background: ``.idx.tmp`` then ``.idx``) is left out, as a kill -9 at that
    instant could leave it."""
    with contextlib.suppress(FileNotFoundError):
        shutil.copy2(src, dst)


async def kill_and_reopen(t: Topic, tmp_path: Path, label: str) -> Topic:
    """A copy of the store's directory as a kill -9 would leave it, opened by a new store."""
    root = tmp_path / label
    shutil.copytree(t.store.root, root, copy_function=_copy_if_present)
    store = await open_store(root)
    ledger = await store.open_ledger(NAME)
    t2 = Topic(store, ledger)
    t2.pending, t2.data = set(t.pending), dict(t.data)
    return t2


def pending_of(t: Topic, got: dict[Position, bytes]) -> dict[Position, bytes]:
    return {p: d for p, d in got.items() if p in t.pending}


async def test_held_ledgers_are_trimmed_and_pending_entries_read_by_original_id(
        topic: Topic) -> None:
    t = topic
    ledger = t.ledger
    await t.cursor.flush()
    before = ledger.total_size_bytes
    done = await relocate_held(ledger, t.holders())
    assert done == [info.ledger_id for info in ledger.ledgers[:4]]
    assert await ledger.trim() == done
    # The ghosts stay listed with their entry counts; only the copies' bytes are kept.
    assert [i.size_bytes for i in ledger.ledgers[:4]] == [0, 0, 0, 0]
    pending_bytes = sum(len(t.data[p]) for p in t.pending)
    assert ledger.relocated.size_bytes <= 1.2 * pending_bytes
    assert ledger.total_size_bytes < before / 3
    got = await read_all(ledger)
    assert pending_of(t, got) == {p: t.data[p] for p in t.pending}
    assert all(p in t.pending for p in got if p.ledger_id in done)
    for p in t.pending:
        e = await ledger.read_entry(p)
        assert e is not None and e.position == p and e.data == t.data[p]
        assert peek_dispatch(e.data)[1] == peek_dispatch(t.data[p])[1]
    # Not pending, not copied: never answered with another message's bytes.
    acked = next(p for p in t.data if p not in t.pending and p.ledger_id in done)
    assert await ledger.read_entry(acked) is None
    # A second trim does nothing more; the mark-delete did not move.
    assert await ledger.trim() == []
    assert t.cursor.mark_delete_position < min(t.pending)


async def test_cut_after_copy_before_index(topic: Topic, tmp_path: Path) -> None:
    t = topic
    await t.cursor.flush()
    lid = t.ledger.ledgers[0].ledger_id
    records = [(p.entry_id, peek_dispatch(t.data[p])[1] or 0, t.data[p])
               for p in sorted(t.pending) if p.ledger_id == lid]
    write_copy(t.ledger.directory / DIRECTORY, lid, records, 3_600_000, False)
    t2 = await kill_and_reopen(t, tmp_path, "cut1")
    try:
        assert not t2.ledger.relocated.ledgers and t2.ledger.relocated.size_bytes == 0
        assert not [p for p in (t2.ledger.directory / DIRECTORY).iterdir()]  # orphans gone
        got = await read_all(t2.ledger)
        assert pending_of(t2, got) == {p: t.data[p] for p in t.pending}
        assert await t2.ledger.trim() == []  # nothing may go: the copy was never indexed
        # The run starts again from scratch and completes.
        assert len(await relocate_held(t2.ledger, t2.holders())) == 4
    finally:
        await t2.store.close()


async def test_cut_after_index_before_ledger_delete(topic: Topic, tmp_path: Path) -> None:
    t = topic
    await t.cursor.flush()
    done = await relocate_held(t.ledger, t.holders())
    t2 = await kill_and_reopen(t, tmp_path, "cut2")
    try:
        ledger = t2.ledger
        assert sorted(ledger.relocated.ledgers) == done
        assert not ledger.relocated.ghosts  # both exist: reads use the ledgers
        got = await read_all(ledger)
        assert {p: got.get(p) for p in t.data} == t.data  # every entry, from the ledgers
        assert await ledger.trim() == done
        got = await read_all(ledger)
        assert pending_of(t2, got) == {p: t.data[p] for p in t.pending}
    finally:
        await t2.store.close()


async def test_cut_after_ledger_delete_then_cancel_and_drain(topic: Topic,
                                                             tmp_path: Path) -> None:
    t = topic
    await t.cursor.flush()
    done = await relocate_held(t.ledger, t.holders())
    await t.ledger.trim()
    t2 = await kill_and_reopen(t, tmp_path, "cut3")
    try:
        ledger, cursor = t2.ledger, t2.cursor
        assert ledger.relocated.ghosts == set(done)
        assert [i.ledger_id for i in ledger.ledgers[:4]] == done
        got = await read_all(ledger)
        assert pending_of(t2, got) == {p: t.data[p] for p in t.pending}
        assert cursor.mark_delete_position < min(t.pending)
        # A cancel (ack) of a relocated message: released, never read again by position
        # order, the others still there.
        cancelled = sorted(t.pending)[1]
        cursor.delete([cancelled])
        t2.pending.discard(cancelled)
        size = ledger.relocated.size_bytes
        assert await release_acknowledged(ledger, [cursor]) == 1
        assert ledger.relocated.size_bytes <= size
        assert cancelled not in ledger.relocated
        got = await read_all(ledger)
        assert set(pending_of(t2, got)) == t2.pending
        # A later subscription at earliest sees only what is still pending in the ghosts.
        late = await ledger.open_cursor("late", initial_position="earliest")
        first = ledger.first_position
        assert first is not None
        seen = [e.position for e in await ledger.read_entries(first, 1000)]
        assert [p for p in seen if p.ledger_id in done] == sorted(
            p for p in t2.pending if p.ledger_id in done)
        await ledger.delete_cursor(late.name)
        # Every pending message delivered and acknowledged: the ghosts and copies go.
        cursor.delete(sorted(t2.pending))
        await release_acknowledged(ledger, [cursor])
        assert ledger.relocated.size_bytes == 0
        await cursor.flush()
        assert set(done) <= set(await ledger.trim() or [])
        assert all(i.ledger_id not in done for i in ledger.ledgers)
        assert not list((ledger.directory / DIRECTORY).glob("*.idx"))
    finally:
        await t2.store.close()


async def test_ledger_with_an_unacknowledged_ordinary_entry_is_not_copied(
        topic: Topic) -> None:
    t = topic
    await t.cursor.flush()
    lid = t.ledger.ledgers[1].ledger_id
    # An ordinary entry of the second ledger left unacknowledged (a slow consumer).
    slow = Position(lid, 3)
    assert slow not in t.pending
    t2_pending = t.pending
    holders = [(_Unacked(t.cursor, slow), lambda pos: pos in t2_pending)]
    done = await relocate_held(t.ledger, holders)  # type: ignore[arg-type]
    assert done == [t.ledger.ledgers[0].ledger_id]
    await t.ledger.trim()
    assert t.ledger.relocated.ghosts == set(done)
    assert t.ledger.ledgers[1].size_bytes > 0


async def test_copy_write_then_index_is_atomic_per_ledger(tmp_path: Path) -> None:
    directory = tmp_path / DIRECTORY
    placed, sizes = write_copy(directory, 7, [(0, DUE, b"a"), (3, DUE + 10_000_000, b"bc")],
                               3_600_000, False)
    assert set(placed) == {0, 3} and len(sizes) == 2
    write_index(directory, 7, 5, 123, placed, False)
    assert sorted(p.name for p in directory.iterdir() if p.suffix == ".idx") == ["7.idx"]


class _Unacked:
    """A cursor view with one more entry unacknowledged (a slow consumer's)."""

    def __init__(self, cursor, slow: Position) -> None:  # type: ignore[no-untyped-def]
        self._cursor = cursor
        self._slow = slow

    @property
    def mark_delete_position(self) -> Position:
        return self._cursor.mark_delete_position  # type: ignore[no-any-return]

    def is_deleted(self, pos: Position) -> bool:
        return pos != self._slow and self._cursor.is_deleted(pos)  # type: ignore[no-any-return]


async def test_dense_ledger_is_passed_over_and_later_ones_copied(topic: Topic) -> None:
    t = topic
    first = t.ledger.ledgers[0].ledger_id
    # A second subscription holds every entry of the first ledger as pending (dense).
    other = await t.ledger.open_cursor("other", initial_position="earliest")
    later = [p for p in t.data if p.ledger_id != first]
    other.delete([p for p in later if p not in t.pending])
    dense = {p for p in t.data if p.ledger_id == first}
    await t.cursor.flush()
    await other.flush()
    holders = [(t.cursor, lambda pos: pos in t.pending),
               (other, lambda pos: pos in t.pending or pos in dense)]
    done = await relocate_held(t.ledger, holders)  # type: ignore[arg-type]
    assert first not in done and len(done) == 3
    assert await t.ledger.trim() == done
    assert t.ledger.ledgers[0].size_bytes > 0
    got = await read_all(t.ledger)
    assert {p: got[p] for p in dense} == {p: t.data[p] for p in dense}
    assert pending_of(t, got) == {p: t.data[p] for p in t.pending}


async def test_acks_that_let_entries_go_are_durable_before_the_copy(topic: Topic,
                                                                     tmp_path: Path) -> None:
    t = topic
    # The acks are not flushed by anyone but the copy-forward itself.
    done = await relocate_held(t.ledger, t.holders())
    assert await t.ledger.trim() == done
    t2 = await kill_and_reopen(t, tmp_path, "unflushed")
    try:
        cursor = t2.cursor
        gone = [p for p in t.data if p.ledger_id in done and p not in t.pending]
        assert gone and all(cursor.is_deleted(p) for p in gone)
        assert not any(cursor.is_deleted(p) for p in t.pending)
    finally:
        await t2.store.close()


async def test_a_damaged_copy_is_never_served(topic: Topic) -> None:
    t = topic
    await t.cursor.flush()
    done = await relocate_held(t.ledger, t.holders())
    await t.ledger.trim()
    victim = sorted(p for p in t.pending if p.ledger_id == done[0])[0]
    copy = t.ledger.relocated._entries[victim.ledger_id][victim.entry_id]
    path = t.ledger.relocated.directory / copy.segment
    raw = bytearray(path.read_bytes())
    raw[copy.offset] ^= 0xFF
    path.write_bytes(bytes(raw))
    assert await t.ledger.read_entry(victim) is None
    got = await read_all(t.ledger)
    assert victim not in got
    assert pending_of(t, got) == {p: t.data[p] for p in t.pending if p != victim}


async def test_ledger_whose_pending_entries_fall_due_soon_is_passed_over(topic: Topic) -> None:
    t = topic
    ids = [info.ledger_id for info in t.ledger.ledgers[:4]]
    # Latest due per ledger: DUE + 4 h, DUE + 2 h, DUE + 4 h, DUE + 4 h (entry(i)).
    assert not await relocate_held(t.ledger, t.holders(), now_ms=DUE,
                                   min_delay_ms=5 * 3_600_000)
    assert len(t.ledger.relocated) == 0
    near_due: set[int] = set()
    done = await relocate_held(t.ledger, t.holders(), now_ms=DUE, min_delay_ms=3 * 3_600_000,
                               near_due=near_due)
    assert done == [ids[0], ids[2], ids[3]] and near_due == {ids[1]}
    # Remembered: passed over later without a look, whatever the threshold.
    assert not await relocate_held(t.ledger, t.holders(), near_due=near_due)
    stats = t.store.stats()
    assert (stats.relocated_entries, stats.relocated_ledgers) == (6, 0)
    assert await t.ledger.trim() == done
    assert t.ledger.ledgers[1].size_bytes > 0  # the near-due ledger keeps its segment
    stats = t.store.stats()
    assert (stats.relocated_entries, stats.relocated_ledgers) == (6, 3)
    assert stats.relocated_bytes == t.ledger.relocated.size_bytes > 6 * 200
    got = await read_all(t.ledger)
    assert pending_of(t, got) == {p: t.data[p] for p in t.pending}


class _Tracker:
    def __init__(self, pending: set[Position]) -> None:
        self.pending = pending

    def contains(self, pos: Position) -> bool:
        return pos in self.pending

    def pending_entry_ids(self, ledger_id: int, entries: int) -> BitMap:
        return BitMap(p.entry_id for p in self.pending
                      if p.ledger_id == ledger_id and p.entry_id < entries)


class _Sub:
    durable = True

    def __init__(self, t: Topic) -> None:
        self.cursor = t.cursor
        self.delayed_tracker = _Tracker(t.pending)


class _Host:
    serving = True
    full = NAME

    def __init__(self, t: Topic) -> None:
        self.ledger = t.ledger
        self.loop = asyncio.get_running_loop()


@pytest.mark.parametrize("enabled", [False, True])
async def test_relocator_switched_off_copies_nothing(topic: Topic, enabled: bool) -> None:
    t = topic
    trims: list[int] = []

    async def trim_now() -> None:
        trims.append(len(await t.ledger.trim()))

    relocator = DelayedRelocator(_Host(t), lambda: [_Sub(t)], lambda: None,  # type: ignore[arg-type]
                                 trim_now, enabled=enabled, min_delay_ms=0)
    await relocator.run()
    if enabled:
        assert relocator.ledgers_relocated == 4 and trims == [4]
    else:
        assert relocator.ledgers_relocated == 0 and not trims
        assert len(t.ledger.relocated) == 0 and not list(t.ledger.relocated.directory.glob("*"))
        assert all(info.size_bytes > 0 for info in t.ledger.ledgers[:4])


async def test_release_matches_every_cursors_acks_by_bitmaps(topic: Topic) -> None:
    t = topic
    other = await t.ledger.open_cursor("other", initial_position="earliest")
    other.delete([p for p in t.data if p not in t.pending])
    await t.cursor.flush()
    await other.flush()
    holders = [(t.cursor, lambda pos: pos in t.pending), (other, lambda pos: pos in t.pending)]
    assert len(await relocate_held(t.ledger, holders)) == 4  # type: ignore[arg-type]
    await t.ledger.trim()
    relocated = t.ledger.relocated
    pending = sorted(t.pending)
    cursors = [t.cursor, other]

    async def release_and_check() -> int:
        before = set(relocated.live_positions())
        acked = {p for p in before if all(c.is_deleted(p) for c in cursors)}
        dropped = await release_acknowledged(t.ledger, cursors)
        assert set(relocated.live_positions()) == before - acked
        assert dropped == len(acked)
        return dropped

    t.cursor.delete(pending[:3] + pending[5:7])
    other.delete([pending[1], pending[6]])
    assert await release_and_check() == 2  # acked by one subscription only: kept
    other.mark_delete(pending[2])  # cumulative ack in a ghost ledger
    assert await release_and_check() == 2
    t.cursor.mark_delete(pending[4])
    assert await release_and_check() == 0  # the other subscription still holds pending[3:6]
    other.mark_delete(pending[-1])
    assert await release_and_check() == 3  # pending[7]: not acknowledged by the first one
    t.cursor.delete([pending[7]])
    assert await release_and_check() == 1
    assert len(relocated) == 0 and not list(relocated.directory.glob("*.seg"))


async def test_a_scattered_read_racing_the_trim_of_a_held_ledger_reads_the_copies(
        topic: Topic, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pending entries read while the trim deletes their ledger's segment (a ghost now, its
    pending entries copied forward first): served from the copies, never reported missing
    (a due message reported missing would be dropped by its dispatcher)."""
    import threading

    from storage import reads

    t = topic
    ledger = t.ledger
    await t.cursor.flush()
    done = await relocate_held(ledger, t.holders())
    assert done
    entered, go = threading.Event(), threading.Event()
    real = reads._read_scattered

    def held(*args: object) -> object:
        entered.set()
        assert go.wait(30)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(reads, "_read_scattered", held)
    for ledger_id in done:                # read from disk, not from the entry cache
        t.store.cache.drop_ledger(ledger_id)
    wanted = sorted(p for p in t.pending if p.ledger_id in done)
    reading = asyncio.ensure_future(ledger.read_positions(wanted))
    loop = asyncio.get_running_loop()
    assert await loop.run_in_executor(None, entered.wait, 30)   # planned from the segments
    assert await ledger.trim() == done                          # then their segments go
    go.set()
    entries, missing = await reading
    assert missing == []
    assert [e.position for e in entries] == wanted
    assert [e.data for e in entries] == [t.data[p] for p in wanted]
