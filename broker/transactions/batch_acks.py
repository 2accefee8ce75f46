"""Batch-index acknowledgements pending in transactions, on one subscription.

Theory of operation: an ACK of some messages of a batch entry carries an ack set (Java BitSet
words, a set bit a message still unacknowledged). The wire layer sets the bits past the
batch's size too (:func:`normalised_ack_set`), so the messages a transaction acknowledges are
exactly the clear bits (:func:`acked_indexes`). As Pulsar's PendingAckHandleImpl, transactions
acknowledging different messages of one entry do not conflict; one acknowledging a message
another transaction holds, or one the subscription already acknowledged, does. While pending,
the held messages are left out of the ack set a (re)delivery of the entry carries
(:meth:`BatchIndexAcks.held`), so a consumer that gets the entry again (its first one left)
does not get them; an abort hands them back, a commit applies them to the subscription.
"""

from __future__ import annotations

from collections.abc import Iterator

from broker.transactions.ids import TxnId
from storage.positions import Position

__all__ = ["BatchIndexAcks", "acked_indexes", "normalised_ack_set"]

_WORD = 0xFFFFFFFFFFFFFFFF


def _bits(words: list[int]) -> int:
    bits = 0
    for i, word in enumerate(words):
        bits |= (word & _WORD) << (64 * i)
    return bits


def acked_indexes(words: list[int]) -> int:
    """The messages an ack set acknowledges, as a bit mask (bit i: message i)."""
    return ~_bits(words) & ((1 << (64 * len(words))) - 1)


def normalised_ack_set(words: list[int], batch_size: int | None) -> list[int]:
    """*words* with every bit from *batch_size* on set (no message there to acknowledge), in
    whole words covering the batch; as given when the size is unknown."""
    if batch_size is None or batch_size <= 0:
        return words
    count = max(len(words), (batch_size + 63) // 64)
    bits = _bits(words) | (((1 << (64 * count)) - 1) & ~((1 << batch_size) - 1))
    out = []
    for i in range(count):
        word = (bits >> (64 * i)) & _WORD
        out.append(word - (1 << 64) if word >= 1 << 63 else word)
    return out


class BatchIndexAcks:
    """Per entry, the messages each transaction acknowledged (pending) or is logging
    (reserved)."""

    __slots__ = ("_pending", "_reserved")

    def __init__(self) -> None:
        self._pending: dict[Position, dict[TxnId, int]] = {}
        self._reserved: dict[Position, list[tuple[TxnId, int]]] = {}

    def _others(self, txn: TxnId, pos: Position) -> Iterator[tuple[TxnId, int]]:
        for other, acked in self._pending.get(pos, {}).items():
            if other != txn:
                yield other, acked
        for other, acked in self._reserved.get(pos, ()):
            if other != txn:
                yield other, acked

    def conflict(self, txn: TxnId, pos: Position, acked: int | None) -> TxnId | None:
        """Another transaction holding messages of *pos* that *acked* (None: the whole entry)
        acknowledges too."""
        for other, held in self._others(txn, pos):
            if acked is None or held & acked:
                return other
        return None

    def holder_up_to(self, txn: TxnId, upto: Position) -> tuple[Position, TxnId] | None:
        """An entry at or before *upto* another transaction holds messages of."""
        for table in (self._pending, self._reserved):
            for pos, holders in table.items():
                if pos > upto:
                    continue
                entries = holders.items() if isinstance(holders, dict) else holders
                for other, _ in entries:
                    if other != txn:
                        return pos, other
        return None

    def reserve(self, txn: TxnId, pos: Position, acked: int) -> None:
        self._reserved.setdefault(pos, []).append((txn, acked))

    def release(self, txn: TxnId, pos: Position, acked: int) -> None:
        held = self._reserved.get(pos)
        if held is None:
            return
        try:
            held.remove((txn, acked))
        except ValueError:
            return
        if not held:
            del self._reserved[pos]

    def add(self, txn: TxnId, pos: Position, acked: int) -> None:
        holders = self._pending.setdefault(pos, {})
        holders[txn] = holders.get(txn, 0) | acked

    def drop(self, txn: TxnId, pos: Position) -> None:
        holders = self._pending.get(pos)
        if holders is not None and holders.pop(txn, None) is not None and not holders:
            del self._pending[pos]

    def held(self, pos: Position) -> int:
        """Messages of *pos* pending in any transaction (0: none)."""
        holders = self._pending.get(pos)
        if not holders:
            return 0
        mask = 0
        for acked in holders.values():
            mask |= acked
        return mask

    def __len__(self) -> int:
        return len(self._pending) + len(self._reserved)

    def __bool__(self) -> bool:
        return bool(self._pending) or bool(self._reserved)
