"""Positions and entries: the values that cross the storage boundary.

A position is Pulsar's message id without partition or batch index: (ledger_id, entry_id).
Ledger ids increase across the whole store and entry ids start at 0 in every ledger, so the
natural tuple order of positions is the order in which entries were appended to a topic.
Entry id -1 is the conventional "before the first entry of this ledger" position (Pulsar's
mark-delete of a cursor that has acknowledged nothing in that ledger).
"""

from __future__ import annotations

from typing import NamedTuple


class Position(NamedTuple):
    """A NamedTuple, not a dataclass: positions are built, hashed and compared per message on
    the dispatch and ack paths (a 1,000-id ACK builds 1,000), and a tuple does all three in
    C (a frozen dataclass's ``__init__``, ``__hash__`` and ``__lt__`` run Python code: ~9% of
    the consume profile, bench/wire_load_baseline.md). Order and equality are the tuple's."""

    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"


class Entry(NamedTuple):
    """An entry read back: its position and its bytes. A NamedTuple for the reason
    :class:`Position` is one: a herd read from disk builds one per message, and a frozen
    dataclass's ``__init__`` is Python code (two ``object.__setattr__`` calls) where a tuple's
    is C. A reader that builds many at once calls ``tuple.__new__(Entry, (position, data))``
    (and the same for :class:`Position`), which skips the Python ``__new__`` that
    ``NamedTuple`` generates."""

    position: Position
    data: bytes
