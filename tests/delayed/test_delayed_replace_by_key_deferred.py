"""The topic's bulk acknowledgement of superseded positions: those the ledger has confirmed are
acknowledged at once, the rest (a run's own withheld entries, not confirmed while the run is
made durable) when the topic is told of new entries, each exactly once, never before its
ledger confirms it, on every ledger; and a group commit's keyed runs, queued by their sinks,
recorded together when the topic is told."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest

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


class _Told:
    """A run's own sink: what it was told."""

    def __init__(self) -> None:
        self.durable: list[tuple[int, int, int]] = []

    def entries_durable(self, ledger_id: int, first_entry_id: int, count: int) -> None:
        self.durable.append((ledger_id, first_entry_id, count))

    def entries_failed(self, count: int, error: BaseException) -> None:
        raise AssertionError("no run fails here")


def _keyed(key: str, at: int | None) -> bytes:
    from protocol import pulsar_pb as pb
    from protocol.metadata import encode_entry

    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1,
                            partition_key=key)
    if at is not None:
        md.deliver_at_time = at
    return encode_entry(md, b"job" if at is not None else b"")


def test_a_group_commits_runs_are_recorded_together_before_the_subscriptions_hear(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The sinks of a group commit's runs (several producers) only queue their keyed entries;
    the topic's flush (the ledger's listener, after every sink) records consecutive runs of
    one ledger with one record_run, in log order, and a run's own tombstone, confirmed by
    then, is acknowledged at once, not deferred. Runs of another ledger are recorded apart."""
    from broker.delayed.replace_by_key import KeyedSchedule, key_hash

    ledger = _Ledger(Position(3, 9))
    sub = _Sub(_Cursor(ledger))
    rbk: Any = TopicReplaceByKey(ledger, lambda: True,   # type: ignore[arg-type]
                                 lambda: [sub])
    schedule = rbk.sync([sub])
    assert isinstance(schedule, KeyedSchedule)
    # a key scheduled earlier, at 3:5
    schedule.record(3, 5, (((key_hash("a"), False),), False))
    calls: list[tuple[int, int, int]] = []
    real = KeyedSchedule.record_run

    def spy(self: KeyedSchedule, ledger_id: int, first: int, run: Any) -> None:
        calls.append((ledger_id, first, len(run)))
        real(self, ledger_id, first, run)

    monkeypatch.setattr(KeyedSchedule, "record_run", spy)
    runs = [([_keyed("a", 10), _keyed("b", 11)], 10),      # producer 1: 3:10-11
            ([_keyed("a", None), _keyed("c", 12)], 12),    # producer 2: 3:12-13, a tombstone
            ([_keyed("b", 13)], 0)]                        # ledger 4 after a rollover
    told = [_Told() for _ in runs]
    sinks = [rbk.sink_for(entries, inner) for (entries, _), inner in zip(runs, told, strict=True)]
    for i, (sink, (entries, first)) in enumerate(zip(sinks, runs, strict=True)):   # one group commit
        sink.entries_durable(3 if i < 2 else 4, first, len(entries))
    assert [t.durable for t in told] == [[(3, 10, 2)], [(3, 12, 2)], [(4, 0, 1)]]
    assert calls == [] and len(schedule) == 1          # queued, not recorded yet
    ledger.last_confirmed = Position(4, 0)
    rbk.flush()
    assert calls == [(3, 10, 4), (4, 0, 1)]             # two runs as one, then ledger 4
    assert schedule.superseded(Position(3, 5))          # a at 3:5 replaced by 3:10 ...
    assert schedule.superseded(Position(3, 10))         # ... which the tombstone cancelled
    assert schedule.superseded(Position(3, 12))         # the tombstone itself, withheld
    assert schedule.superseded(Position(3, 11))         # b at 3:11 replaced by 4:0
    assert not schedule.superseded(Position(3, 13))     # c pending
    assert sorted(sub.cursor.deleted) == [Position(3, 5), Position(3, 10), Position(3, 11),
                                          Position(3, 12)]
    assert not rbk._deferred                            # all confirmed: none waits
    rbk.flush()
    assert len(calls) == 2                              # nothing queued twice
