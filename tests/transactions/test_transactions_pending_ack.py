"""The pending-ack store alone: Pulsar's conflicts, what commit applies and what abort gives
back (a fake subscription records the cursor's and the dispatcher's calls)."""

from __future__ import annotations

import pytest

from broker.transactions.ids import TransactionConflictError, TxnId
from broker.transactions.pending_ack import PendingAckStore
from storage.positions import Position

A, B = TxnId(0, 1), TxnId(0, 2)


def P(entry: int) -> Position:
    return Position(7, entry)


class FakeLedger:
    def next_position(self, pos: Position) -> Position:
        return Position(pos.ledger_id, pos.entry_id + 1)


class FakeCursor:
    def __init__(self) -> None:
        self.mark_delete_position = Position(7, -1)
        self.read_position = Position(7, 1000)   # the dispatcher has read this far
        self.deleted: set[Position] = set()

    def is_deleted(self, pos: Position) -> bool:
        return pos <= self.mark_delete_position or pos in self.deleted

    def delete(self, positions: object) -> None:
        self.deleted.update(positions)  # type: ignore[arg-type]

    def mark_delete(self, pos: Position) -> None:
        self.mark_delete_position = pos


class FakeDispatcher:
    def __init__(self) -> None:
        self.owner: dict[Position, object] = {}
        self.acked: list[Position] = []
        self.replayed: list[Position] = []

    def on_acked(self, positions: list[Position]) -> None:
        self.acked += positions

    def add_replay(self, position: Position, sticky_hash: int | None = None) -> None:
        self.replayed.append(position)

    def schedule(self) -> None:
        pass


class FakeSub:
    def __init__(self) -> None:
        self.ledger = FakeLedger()
        self.cursor = FakeCursor()
        self.dispatcher = FakeDispatcher()
        self.batch_acks: dict[Position, int] = {}
        self.end_checks = 0

    def check_end_of_topic(self) -> None:
        self.end_checks += 1


def _store() -> tuple[PendingAckStore, FakeSub]:
    return PendingAckStore("persistent://public/default/t", "s"), FakeSub()


def test_individual_acks_conflict_across_transactions_not_within_one() -> None:
    store, sub = _store()
    store.check(A, [(P(1), None)], False, sub.cursor)
    store.add(A, [(P(1), None)], False, sub)
    store.check(A, [(P(1), None)], False, sub.cursor)    # the same transaction again: fine
    with pytest.raises(TransactionConflictError) as info:
        store.check(B, [(P(1), None)], False, sub.cursor)
    assert "pending ack status" in info.value.message
    sub.cursor.delete([P(2)])
    with pytest.raises(TransactionConflictError):
        store.check(B, [(P(2), None)], False, sub.cursor)  # already acknowledged


def test_cumulative_conflicts() -> None:
    store, sub = _store()
    store.add(A, [(P(5), None)], True, sub)
    with pytest.raises(TransactionConflictError):
        store.check(B, [(P(3), None)], False, sub.cursor)  # under A's cumulative ack
    with pytest.raises(TransactionConflictError):
        store.check(B, [(P(9), None)], True, sub.cursor)   # a second cumulative ack
    store.add(B, [(P(8), None)], False, sub)
    other, sub2 = _store()
    other.add(B, [(P(2), None)], False, sub2)
    with pytest.raises(TransactionConflictError):
        other.check(A, [(P(4), None)], True, sub2.cursor)   # over B's individual ack


def test_commit_applies_whole_entries_and_merges_batch_bits() -> None:
    store, sub = _store()
    store.add(A, [(P(1), None), (P(2), [0b110])], False, sub)
    assert store.holds(P(1)) and not store.holds(P(2))   # a part-acked batch stays deliverable
    assert sub.dispatcher.acked == [P(1)]                 # only the whole entry left its consumer
    store.add(A, [(P(2), [0b101])], False, sub)
    store.end(A, True, sub)
    assert sub.cursor.deleted == {P(1)}
    assert sub.batch_acks == {P(2): 0b100}               # index 2 is still unacknowledged
    assert not store.active and store.committed_txns == 1


def test_abort_gives_every_held_entry_back_also_after_a_restart() -> None:
    store, sub = _store()
    store.replay(A, [(P(1), None), (P(3), None)], False)  # logged before a restart
    assert store.holds(P(1)) and store.holds(P(3))
    store.end(A, False, sub)
    assert sorted(sub.dispatcher.replayed) == [P(1), P(3)]
    assert not sub.cursor.deleted and store.aborted_txns == 1


def test_abort_of_a_cumulative_ack_gives_back_everything_up_to_it() -> None:
    store, sub = _store()
    sub.cursor.mark_delete(P(1))
    store.replay(A, [(P(4), None)], True)
    store.end(A, False, sub)
    assert sub.dispatcher.replayed == [P(2), P(3), P(4)]
    assert sub.cursor.mark_delete_position == P(1)


def test_an_aborted_cumulative_ack_hands_back_only_what_the_dispatcher_passed() -> None:
    store, sub = _store()
    sub.cursor.mark_delete(P(1))
    sub.cursor.read_position = P(3)          # 2 was read (and held); 3 on are read anyway
    store.replay(A, [(P(6), None)], True)
    store.end(A, False, sub)
    assert sub.dispatcher.replayed == [P(2)]


def test_the_walk_of_an_aborted_cumulative_ack_is_bounded(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from broker.transactions import pending_ack
    monkeypatch.setattr(pending_ack, "MAX_REDELIVER_WALK", 3)
    store, sub = _store()
    store.replay(A, [(P(9), None)], True)
    store.end(A, False, sub)
    assert sub.dispatcher.replayed == [P(0), P(1), P(2)]
    assert "come back when the subscription rewinds" in caplog.text


def test_commit_of_a_cumulative_ack_moves_the_mark_delete_position() -> None:
    store, sub = _store()
    store.add(A, [(P(4), None)], True, sub)
    store.end(A, True, sub)
    assert sub.cursor.mark_delete_position == P(4)
    store.end(A, True, sub)   # idempotent: a re-run of phase two changes nothing
    assert store.committed_txns == 1


def test_an_ack_being_logged_already_conflicts() -> None:
    store, sub = _store()
    store.reserve(A, [(P(1), None)], False)
    store.reserve(A, [(P(9), None)], True)
    with pytest.raises(TransactionConflictError):
        store.check(B, [(P(1), None)], False, sub.cursor)
    with pytest.raises(TransactionConflictError):
        store.check(B, [(P(5), None)], False, sub.cursor)   # under A's cumulative being logged
    store.check(A, [(P(1), None)], False, sub.cursor)
    store.release(A, [(P(1), None)], False)
    store.release(A, [(P(9), None)], True)
    store.check(B, [(P(1), None)], False, sub.cursor)        # the record failed: free again
    store.check(B, [(P(5), None)], False, sub.cursor)


def _ack_set(batch_size: int, *acked: int) -> list[int]:
    """An ack set as the wire layer hands it on: a bit per message still unacknowledged,
    the bits past the batch set (normalised_ack_set)."""
    from broker.transactions.batch_acks import normalised_ack_set
    bits = (1 << batch_size) - 1
    for index in acked:
        bits &= ~(1 << index)
    return normalised_ack_set([bits], batch_size)


def test_different_batch_indexes_of_one_entry_do_not_conflict_the_same_one_does() -> None:
    store, sub = _store()
    sub.batch_acks[P(2)] = 0b1111
    sub.dispatcher.owner[P(2)] = object()        # the entry is with a consumer
    store.check(A, [(P(2), _ack_set(4, 0))], False, sub.cursor, sub.batch_acks)
    store.add(A, [(P(2), _ack_set(4, 0))], False, sub)
    store.check(B, [(P(2), _ack_set(4, 1))], False, sub.cursor, sub.batch_acks)
    store.add(B, [(P(2), _ack_set(4, 1))], False, sub)
    with pytest.raises(TransactionConflictError) as info:
        store.check(TxnId(0, 3), [(P(2), _ack_set(4, 1, 2))], False, sub.cursor,
                    sub.batch_acks)
    assert "pending ack status of transaction (0,2)" in info.value.message
    with pytest.raises(TransactionConflictError):   # the whole entry: its messages are held
        store.check(TxnId(0, 3), [(P(2), None)], False, sub.cursor, sub.batch_acks)
    with pytest.raises(TransactionConflictError):   # a cumulative ack over them
        store.check(TxnId(0, 3), [(P(3), None)], True, sub.cursor, sub.batch_acks)
    sub.batch_acks[P(2)] = 0b0111                   # index 3 acknowledged outside
    with pytest.raises(TransactionConflictError) as info:
        store.check(TxnId(0, 3), [(P(2), _ack_set(4, 3))], False, sub.cursor, sub.batch_acks)
    assert "already acknowledged" in info.value.message
    store.check(TxnId(0, 3), [(P(2), _ack_set(4, 2))], False, sub.cursor, sub.batch_acks)
    assert sub.dispatcher.acked == []             # a part-acked entry stays with its consumer


def test_batch_indexes_are_applied_at_commit_and_handed_back_at_abort() -> None:
    store, sub = _store()
    sub.batch_acks[P(2)] = 0b111
    store.add(A, [(P(2), _ack_set(3, 0))], False, sub)
    store.add(B, [(P(2), _ack_set(3, 1))], False, sub)
    # The entry's consumer left: it is delivered again without the held messages.
    assert store.held_indexes(P(2)) == 0b011
    store.end(A, False, sub)                      # abort: index 0 comes back ...
    assert sub.dispatcher.replayed == [P(2)]      # ... with a delivery of the entry
    assert store.held_indexes(P(2)) == 0b010
    store.end(B, True, sub)                       # commit: index 1 applied
    assert sub.batch_acks == {P(2): 0b101} and not sub.cursor.deleted
    store.add(TxnId(0, 3), [(P(2), _ack_set(3, 0, 2))], False, sub)
    store.end(TxnId(0, 3), True, sub)             # the last ones: the entry is acknowledged
    assert sub.cursor.deleted == {P(2)} and P(2) not in sub.batch_acks
    assert not store.active and store.idle
