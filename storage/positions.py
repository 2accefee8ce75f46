"""Positions and entries: the values that cross the storage boundary.

A position is Pulsar's message id without partition or batch index: (ledger_id, entry_id).
Ledger ids increase across the whole store and entry ids start at 0 in every ledger, so the
natural tuple order of positions is the order in which entries were appended to a topic.
Entry id -1 is the conventional "before the first entry of this ledger" position (Pulsar's
mark-delete of a cursor that has acknowledged nothing in that ledger).
"""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True)
class Entry:
    position: Position
    data: bytes
