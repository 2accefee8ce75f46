"""The coordinator alone, over an in-memory log: Pulsar's state machine and errors, timeouts,
and the replay of its log (a transaction caught between the phases is finished)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from broker.transactions.coordinator import TransactionCoordinator
from broker.transactions.ids import (
    InvalidTxnStatusError,
    TransactionCoordinatorNotFoundError,
    TransactionNotFoundError,
    TxnId,
    TxnStatus,
)
from protocol.errors import UnknownServerError
from storage.positions import Position


class MemoryLog:
    def __init__(self, records: list[dict[str, Any]] | None = None) -> None:
        self.records = list(records or [])
        self.records_appended = 0
        self.size_bytes = 0
        self.ledger_count = 1
        self.current_ledger_id = 0
        self.first_ledger_id: int | None = 0

    async def append(self, record: dict[str, Any]) -> Position:
        self.records.append(dict(record))
        self.records_appended += 1
        return Position(0, len(self.records) - 1)

    async def trim(self, keep_from_ledger_id: int | None) -> None:
        pass


class Participants:
    def __init__(self) -> None:
        self.ended: list[tuple[str, TxnId, bool]] = []
        self.gate: asyncio.Event | None = None

    async def end_on_partition(self, topic: str, txn: TxnId, commit: bool) -> None:
        if self.gate is not None:
            await self.gate.wait()
        self.ended.append((topic, txn, commit))

    async def end_on_subscription(self, topic: str, subscription: str, txn: TxnId,
                                  commit: bool) -> None:
        self.ended.append((f"{topic}/{subscription}", txn, commit))

    def partitions_holding(self, txn: TxnId) -> list[str]:
        return []

    def registered_topics(self) -> list[str]:
        return []


def _coordinator(log: MemoryLog | None = None) -> tuple[TransactionCoordinator, MemoryLog,
                                                        Participants]:
    log = log or MemoryLog()
    parts = Participants()
    tc = TransactionCoordinator(0, log, parts, asyncio.get_running_loop())  # type: ignore[arg-type]
    return tc, log, parts


async def test_commit_runs_both_phases_and_an_ended_transaction_is_not_found() -> None:
    tc, log, parts = _coordinator()
    txn = await tc.new_txn(60_000)
    assert txn == TxnId(0, 1)
    await tc.add_partitions(txn, ["t1", "t2", "t1"])
    await tc.add_subscriptions(txn, [("t1", "s")])
    await tc.end(txn, True)
    assert parts.ended == [("t1", txn, True), ("t2", txn, True), ("t1/s", txn, True)]
    statuses = [r["s"] for r in log.records if r["op"] == "status"]
    assert statuses == ["COMMITTING", "COMMITTED"]
    with pytest.raises(TransactionNotFoundError) as info:
        await tc.end(txn, False)
    assert "COMMITTED" in info.value.message
    with pytest.raises(TransactionNotFoundError):
        await tc.add_partitions(TxnId(0, 99), ["t"])
    with pytest.raises(TransactionCoordinatorNotFoundError):
        await tc.new_txn(1000, tc_id=4)
    await tc.close()


async def test_an_end_joins_the_running_one_and_the_other_action_is_refused() -> None:
    tc, _, parts = _coordinator()
    txn = await tc.new_txn(60_000)
    await tc.add_partitions(txn, ["t"])
    parts.gate = asyncio.Event()
    first = asyncio.create_task(tc.end(txn, True))
    await asyncio.sleep(0)
    assert tc.status(txn) is TxnStatus.COMMITTING
    with pytest.raises(InvalidTxnStatusError) as info:
        await tc.end(txn, False)
    assert "in COMMITTING status" in info.value.message
    with pytest.raises(InvalidTxnStatusError):
        await tc.add_partitions(txn, ["u"])
    second = asyncio.create_task(tc.end(txn, True))   # a retry joins the running end
    await asyncio.sleep(0)
    assert not second.done()
    parts.gate.set()
    await asyncio.gather(first, second)
    assert parts.ended == [("t", txn, True)]
    assert tc.status(txn) is TxnStatus.COMMITTED
    await tc.close()


async def test_an_open_transaction_is_aborted_when_its_timeout_passes() -> None:
    tc, _, parts = _coordinator()
    txn = await tc.new_txn(50)
    await tc.add_partitions(txn, ["t"])
    ended = asyncio.Event()
    original = parts.end_on_partition

    async def noting(topic: str, t: TxnId, commit: bool) -> None:
        await original(topic, t, commit)
        ended.set()

    parts.end_on_partition = noting  # type: ignore[method-assign]
    await asyncio.wait_for(ended.wait(), 5)
    await tc.settled()
    assert tc.status(txn) is TxnStatus.ABORTED and tc.timed_out_total == 1
    await tc.close()


async def test_replay_finishes_what_a_crash_caught_between_the_phases() -> None:
    records = [
        {"op": "new", "m": 0, "l": 1, "t": 3_600_000, "at": 1},
        {"op": "parts", "m": 0, "l": 1, "topics": ["t"]},
        {"op": "status", "m": 0, "l": 1, "s": "COMMITTING"},
        {"op": "new", "m": 0, "l": 2, "t": 3_600_000, "at": 1},
        {"op": "status", "m": 0, "l": 2, "s": "ABORTING"},
        {"op": "status", "m": 0, "l": 2, "s": "ABORTED", "at": 2},
        {"op": "checkpoint", "seq": 40, "topics": []},
    ]
    tc, _, parts = _coordinator(MemoryLog())
    tc.replay([(Position(0, i), r) for i, r in enumerate(records)])
    assert tc.status(TxnId(0, 1)) is TxnStatus.COMMITTING
    assert tc.status(TxnId(0, 2)) is TxnStatus.ABORTED
    tc.resume()
    await tc.settled()
    assert parts.ended == [("t", TxnId(0, 1), True)]
    assert tc.status(TxnId(0, 1)) is TxnStatus.COMMITTED
    assert await tc.new_txn(1000) == TxnId(0, 41)   # never a sequence handed out before
    await tc.close()


async def test_a_failed_second_phase_is_run_again(monkeypatch: pytest.MonkeyPatch) -> None:
    import broker.transactions.coordinator as coordinator_module

    monkeypatch.setattr(coordinator_module, "PHASE_TWO_RETRY_S", 0.01)
    tc, _, parts = _coordinator()
    txn = await tc.new_txn(60_000)
    await tc.add_partitions(txn, ["t"])
    original = parts.end_on_partition
    failures = [RuntimeError("ledger fenced")]
    done = asyncio.Event()

    async def flaky(topic: str, t: TxnId, commit: bool) -> None:
        if failures:
            raise failures.pop()
        await original(topic, t, commit)
        done.set()

    parts.end_on_partition = flaky  # type: ignore[method-assign]
    with pytest.raises(UnknownServerError) as info:
        await tc.end(txn, True)
    assert "COMMITTING" in info.value.message and "retried" in info.value.message
    assert tc.status(txn) is TxnStatus.COMMITTING     # decided: only phase two is left
    await asyncio.wait_for(done.wait(), 5)
    await tc.settled()
    assert tc.status(txn) is TxnStatus.COMMITTED
    await tc.close()


def _full(name: str) -> str:
    return name if "://" in name else f"persistent://public/default/{name}"


async def test_names_are_kept_as_given_and_the_end_reaches_the_full_ones() -> None:
    tc, log, parts = _coordinator()
    txn = await tc.new_txn(60_000)
    await tc.add_partitions(txn, ["my-topic-1", "persistent://public/default/t2"], _full)
    await tc.add_subscriptions(txn, [("my-topic-1", "my-sub")], _full)
    stats = tc.transaction(txn)
    assert stats is not None
    assert stats.partitions == ("my-topic-1", "persistent://public/default/t2")
    assert stats.partition_topics == ("persistent://public/default/my-topic-1",
                                      "persistent://public/default/t2")
    assert stats.subscriptions == (("my-topic-1", "my-sub"),)
    assert stats.subscription_topics == ("persistent://public/default/my-topic-1",)
    parts_record = next(r for r in log.records if r["op"] == "parts")
    assert parts_record["topics"] == list(stats.partition_topics)   # what a replay reaches
    assert parts_record["given"] == list(stats.partitions)
    # A replay of the new records shows the same names ...
    again, _, _ = _coordinator(MemoryLog())
    again.replay([(Position(0, i), r) for i, r in enumerate(log.records)])
    assert again.transaction(txn) == stats
    await tc.end(txn, True)
    assert parts.ended == [("persistent://public/default/my-topic-1", txn, True),
                           ("persistent://public/default/t2", txn, True),
                           ("persistent://public/default/my-topic-1/my-sub", txn, True)]
    await tc.close()
    await again.close()


async def test_records_written_before_names_were_kept_replay_with_the_full_names() -> None:
    full = "persistent://public/default/t"
    records = [{"op": "new", "m": 0, "l": 3, "t": 60_000, "at": 1},
               {"op": "parts", "m": 0, "l": 3, "topics": [full]},
               {"op": "subs", "m": 0, "l": 3, "subs": [[full, "s"]]},
               {"op": "status", "m": 0, "l": 3, "s": "COMMITTING"}]
    tc, _, parts = _coordinator()
    tc.replay([(Position(0, i), r) for i, r in enumerate(records)])
    stats = tc.transaction(TxnId(0, 3))
    assert stats is not None and stats.partitions == (full,) and stats.partition_topics == (full,)
    assert stats.subscriptions == ((full, "s"),) and stats.subscription_topics == (full,)
    tc.resume()
    await tc.settled()
    assert parts.ended == [(full, TxnId(0, 3), True), (f"{full}/s", TxnId(0, 3), True)]
    await tc.close()


async def test_one_topic_added_under_two_names_is_ended_once() -> None:
    tc, _, parts = _coordinator()
    txn = await tc.new_txn(60_000)
    await tc.add_partitions(txn, ["t", "persistent://public/default/t"], _full)
    await tc.add_subscriptions(txn, [("t", "s"), ("persistent://public/default/t", "s")], _full)
    stats = tc.transaction(txn)
    assert stats is not None and stats.partitions == ("t", "persistent://public/default/t")
    await tc.end(txn, False)
    assert parts.ended == [("persistent://public/default/t", txn, False),
                           ("persistent://public/default/t/s", txn, False)]
    await tc.close()


async def test_partitions_and_subscriptions_of_one_transaction_are_bounded() -> None:
    from broker.transactions.limits import TransactionLimits
    from protocol.errors import NotAllowedError
    log = MemoryLog()
    tc = TransactionCoordinator(0, log, Participants(), asyncio.get_running_loop(),  # type: ignore[arg-type]
                                TransactionLimits(max_participants=3))
    txn = await tc.new_txn(60_000)
    await tc.add_partitions(txn, ["a", "b"])
    await tc.add_partitions(txn, ["a", "b"])               # known ones add nothing
    with pytest.raises(NotAllowedError) as info:
        await tc.add_subscriptions(txn, [("a", "s"), ("b", "s")])
    assert "pass the 3 one transaction may have" in info.value.message
    await tc.add_subscriptions(txn, [("a", "s")])
    assert len([r for r in log.records if r["op"] in ("parts", "subs")]) == 2
    await tc.close()
