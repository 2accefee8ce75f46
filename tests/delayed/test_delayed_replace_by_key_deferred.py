"""The topic's bulk acknowledgement of superseded positions: those the ledger has confirmed are
acknowledged at once, the rest (a run's own withheld entries, not confirmed while the run is
made durable) when the topic is told of new entries, each exactly once, never before its
ledger confirms it, on every ledger."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from broker.delayed.replace_by_key import ledger_bitmaps
from broker.topics.replace_by_key import TopicReplaceByKey
from protocol.sub_types import SubType
from storage.positions import Position


@dataclass
class _Ledger:
    last_confirmed: Position | None = None


@dataclass
class _Cursor:
    ledger: _Ledger
    deleted: list[Position] = field(default_factory=list)

    def delete(self, positions: Iterable[Position]) -> None:
        positions = list(positions)
        last = self.ledger.last_confirmed
        assert last is not None and all(p <= last for p in positions), "not confirmed yet"
        self.deleted += positions


@dataclass
class _Delayed:
    forgotten: list[Position] = field(default_factory=list)

    def forget(self, positions: Iterable[Position]) -> None:
        self.forgotten += positions


@dataclass
class _Sub:
    cursor: _Cursor
    delayed: _Delayed = field(default_factory=_Delayed)
    sub_type: SubType | None = SubType.Shared
    durable: bool = False


def test_superseded_positions_acknowledged_once_each_when_confirmed() -> None:
    rnd = random.Random(5)
    for _ in range(60):
        ledger = _Ledger()
        sub = _Sub(_Cursor(ledger))
        rbk: Any = TopicReplaceByKey(ledger, lambda: True,   # type: ignore[arg-type]
                                     lambda s=sub: [s])
        told: set[int] = set()
        ledger_id, next_entry = 3, 0
        for _ in range(rnd.randrange(1, 12)):
            if rnd.random() < 0.2:
                ledger_id, next_entry = ledger_id + 1, 0
            run = rnd.randrange(1, 30)
            first = next_entry
            next_entry += run
            # superseded: older positions (confirmed) and some of this run's own (not yet)
            older = [p for p in told_candidates(ledger, rnd) if p not in told]
            own = [(ledger_id << 32) + e for e in range(first, first + run) if rnd.random() < 0.4]
            packed = older + own
            if not packed:
                continue
            told.update(packed)
            rbk._acknowledge(packed, ledger_bitmaps(packed))
            ledger.last_confirmed = Position(ledger_id, first + run - 1)
            rbk.flush()
        expected = sorted(Position(p >> 32, p & 0xFFFF_FFFF) for p in told)
        assert sorted(sub.cursor.deleted) == expected       # each once, all of them
        assert sorted(sub.delayed.forgotten) == expected
        assert not rbk._deferred


def told_candidates(ledger: _Ledger, rnd: random.Random) -> list[int]:
    """A few positions at or below the ledger's last confirmed entry."""
    last = ledger.last_confirmed
    if last is None:
        return []
    return sorted({(last.ledger_id << 32) + rnd.randrange(0, last.entry_id + 1)
                   for _ in range(rnd.randrange(0, 5))})
