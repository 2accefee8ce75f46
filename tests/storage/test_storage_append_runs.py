"""ManagedLedger.append_run: a run of entries with one completion (the publish hot path)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from storage_testlib import open_store

from storage import Position
from storage.errors import LedgerClosedError

TOPIC = "persistent://public/default/runs"


class RecordingSink:
    """A DurableSink that records its reports and sets an event once *expected* arrived."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.durable: list[tuple[int, int, int]] = []
        self.failed: list[tuple[int, BaseException]] = []
        self.settled = asyncio.Event()

    def _count(self) -> int:
        return sum(c for _, _, c in self.durable) + sum(c for c, _ in self.failed)

    def entries_durable(self, ledger_id: int, first_entry_id: int, count: int) -> None:
        self.durable.append((ledger_id, first_entry_id, count))
        if self._count() >= self.expected:
            self.settled.set()

    def entries_failed(self, count: int, error: BaseException) -> None:
        self.failed.append((count, error))
        if self._count() >= self.expected:
            self.settled.set()


async def test_run_is_reported_once_durable_in_order_with_futures_around_it(
        tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    ml = await store.open_ledger(TOPIC)
    seen: list[Position] = []
    ml.add_listener(seen.append)
    before = ml.append(b"before")
    sink = RecordingSink(3)
    ml.append_run([b"r0", b"r1", b"r2"], sink)
    after = ml.append(b"after")
    assert sink.durable == []  # nothing reported before the group commit is durable
    await asyncio.wait_for(sink.settled.wait(), 10)
    first = await before
    assert sink.durable == [(first.ledger_id, 1, 3)]
    assert await after == Position(first.ledger_id, 4)
    assert ml.last_confirmed == Position(first.ledger_id, 4)
    got = await ml.read_entries(first, 10)
    assert [e.data for e in got] == [b"before", b"r0", b"r1", b"r2", b"after"]
    await store.close()


async def test_run_split_by_rollover_is_reported_per_ledger(tmp_path: Path) -> None:
    store = await open_store(tmp_path, max_entries_per_ledger=4)
    ml = await store.open_ledger(TOPIC)
    sink = RecordingSink(10)
    ml.append_run([b"e%d" % i for i in range(10)], sink)
    await asyncio.wait_for(sink.settled.wait(), 10)
    assert [(e, c) for _, e, c in sink.durable] == [(0, 4), (0, 4), (0, 2)]
    ledger_ids = [lid for lid, _, _ in sink.durable]
    assert ledger_ids == sorted(set(ledger_ids))
    assert [i.entries for i in ml.ledgers] == [4, 4, 2]
    await store.close()


async def test_run_on_a_closed_ledger_fails_on_a_later_callback(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    ml = await store.open_ledger(TOPIC)
    await ml.close()
    sink = RecordingSink(2)
    ml.append_run([b"a", b"b"], sink)
    assert sink.failed == []  # never reported from inside the caller
    await asyncio.wait_for(sink.settled.wait(), 10)
    assert [count for count, _ in sink.failed] == [2]
    assert isinstance(sink.failed[0][1], LedgerClosedError)
    await store.close()


async def test_close_waits_for_runs_in_flight(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    ml = await store.open_ledger(TOPIC)
    sink = RecordingSink(2)
    ml.append_run([b"a", b"b"], sink)
    await ml.close()
    assert sink.settled.is_set() and sink.failed == []
    assert sum(c for _, _, c in sink.durable) == 2
    await store.close()



async def _single_and_run_layouts(root: Path, limits: dict[str, int], runs: list[list[bytes]],
                                  rng: random.Random) -> tuple[list[tuple[int, int]],
                                                               list[tuple[int, int]]]:
    """The ledgers (entries, bytes) the entries of *runs* make appended one by one, and
    appended as those runs; the runs' entries are read back in order."""
    datas = [data for run in runs for data in run]
    single = await open_store(root / "single", **limits)
    ml = await single.open_ledger(TOPIC)
    for data in datas:
        last = ml.append(data)
        await asyncio.sleep(0)
    await last
    expected = [(i.entries, i.size_bytes) for i in ml.ledgers]
    await single.close()

    grouped = await open_store(root / "runs", **limits)
    ml = await grouped.open_ledger(TOPIC)
    sink = RecordingSink(len(datas))
    for run in runs:
        ml.append_run(run, sink)
        if rng.random() < 0.5:  # some runs share a loop iteration (one batch), some not
            await asyncio.sleep(0)
    await asyncio.wait_for(sink.settled.wait(), 10)
    assert sink.failed == []
    got = [e.data for info in ml.ledgers
           for e in await ml.read_entries(Position(info.ledger_id, 0), info.entries)]
    assert got == datas
    layout = [(i.entries, i.size_bytes) for i in ml.ledgers]
    await grouped.close()
    return expected, layout


async def test_runs_roll_over_exactly_where_single_appends_do(tmp_path: Path) -> None:
    """A run that fits in the current ledger whole is queued at once; the ledgers (entries and
    bytes each) must come out as entry-by-entry appends make them: runs whose last entry
    starts just below, at or just above a limit by bytes or entries, then random runs."""
    rng = random.Random(7)
    five = b"x" * 5
    cases: list[tuple[dict[str, int], list[list[bytes]]]] = [
        ({"max_size_per_ledger_bytes": 10}, [[five, five, five]]),  # 3rd starts at 10: rolls
        ({"max_size_per_ledger_bytes": 10}, [[five, b"x" * 4, five]]),  # starts at 9: fits
        ({"max_size_per_ledger_bytes": 10}, [[five], [five, five]]),
        ({"max_size_per_ledger_bytes": 10}, [[b"x" * 30], [five]]),  # one entry over the limit
        ({"max_entries_per_ledger": 3}, [[five] * 3, [five]]),
        ({"max_entries_per_ledger": 3}, [[five] * 4]),
        ({"max_entries_per_ledger": 3}, [[five] * 2, [five] * 2]),
    ]
    for case in range(24):
        limits = ({"max_entries_per_ledger": rng.randint(3, 9)} if case % 2 == 0
                  else {"max_size_per_ledger_bytes": rng.randint(20, 120)})
        sizes = [rng.randint(1, 30 if case % 3 else 6) for _ in range(rng.randint(20, 60))]
        datas = [bytes([i % 251]) * size for i, size in enumerate(sizes)]
        runs: list[list[bytes]] = []
        at = 0
        while at < len(datas):
            take = rng.randint(1, 12)
            runs.append(datas[at:at + take])
            at += take
        cases.append((limits, runs))
    for n, (limits, runs) in enumerate(cases):
        expected, layout = await _single_and_run_layouts(tmp_path / str(n), limits, runs, rng)
        assert layout == expected, (n, limits, [[len(d) for d in run] for run in runs])
    pinned, _ = await _single_and_run_layouts(tmp_path / "pinned", *cases[0], rng)
    assert pinned == [(2, 10), (1, 5)]  # the reference itself rolls where the rule says
