"""In-memory tracker: order, cutoff semantics, one timer, cancel, fixed-delay detection."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import pytest
from delayed_testlib import T0, DueCounter, FakeLoop
from pyroaring import BitMap

from broker.config import BrokerConfig
from broker.delayed import create_tracker
from broker.delayed.in_memory import InMemoryDelayedDeliveryTracker
from broker.delayed.indexed import COMPACT_FLOOR
from broker.delayed.packed import POSITION_BITS, POSITION_MASK, PackedTimeIndex, take_members
from broker.delayed.policy import resolve_policy
from broker.delayed.tracker import DeadlineTimer, DelayedOperationType
from storage.positions import Position


def make(loop: FakeLoop, *, strict: bool = True, tick: int = 100, lookahead: int = 0,
         on_due: DueCounter | None = None) -> InMemoryDelayedDeliveryTracker:
    return InMemoryDelayedDeliveryTracker(tick_time_ms=tick, strict=strict,
                                          on_due=on_due or DueCounter(), loop=loop,
                                          fixed_delay_lookahead=lookahead,
                                          clock_ms=loop.clock_ms)


def test_due_positions_come_out_in_deliver_time_order_batches_ascending() -> None:
    loop = FakeLoop()
    t = make(loop)
    rnd = random.Random(3)
    expected = {}
    for entry in range(500):
        at = T0 + rnd.randrange(1, 10_000)
        assert t.add(Position(1, entry), at)
        expected[(1, entry)] = at
    assert len(t) == 500
    got: list[tuple[int, int]] = []
    now = T0
    while len(got) < 500:
        now += 250
        loop.now_ms = now
        batch = t.get_scheduled(1_000_000)
        assert batch == sorted(batch)
        for pos in batch:
            assert expected[pos] <= now
            assert expected[pos] > now - 250
        got.extend(batch)
    assert sorted(got) == sorted(expected)
    assert len(t) == 0


def test_strict_mode_is_never_early() -> None:
    loop = FakeLoop()
    t = make(loop, strict=True, tick=1000)
    assert t.add(Position(1, 1), T0 + 5000)
    assert t.add(Position(1, 2), T0 + 1) is True
    assert t.add(Position(1, 3), T0) is False            # due now: deliver normally
    loop.now_ms = T0 + 4999
    assert t.get_scheduled(10) == [(1, 2)]
    assert not t.has_message_available()
    loop.now_ms = T0 + 5000
    assert t.has_message_available()
    assert t.get_scheduled(10) == [(1, 1)]


def test_non_strict_mode_is_at_most_one_tick_early() -> None:
    loop = FakeLoop()
    t = make(loop, strict=False, tick=1000)
    assert t.add(Position(1, 1), T0 + 1000) is False      # within one tick: deliver now
    assert t.add(Position(1, 2), T0 + 1001)
    assert t.add(Position(1, 3), T0 + 5000)
    loop.now_ms = T0 + 3999
    assert t.get_scheduled(10) == [(1, 2)]
    assert t.get_scheduled(10) == []
    loop.now_ms = T0 + 4000
    assert t.get_scheduled(10) == [(1, 3)]


def test_one_timer_armed_for_the_earliest_deadline_and_rearmed_only_when_it_moves() -> None:
    loop = FakeLoop()
    due = DueCounter()
    t = make(loop, strict=True, tick=10, on_due=due)
    for i in range(100):
        t.add(Position(1, i), T0 + 1000 + i)
    assert loop.call_at_count == 1
    assert [h.when for h in loop.pending] == [(T0 + 1000) / 1000]
    t.add(Position(2, 0), T0 + 500)                     # earlier: re-armed once
    assert loop.call_at_count == 2
    assert len(loop.pending) == 1
    loop.advance_to(T0 + 499)
    assert due.calls == 0
    loop.advance_to(T0 + 500)
    assert due.calls == 1
    assert t.get_scheduled(10) == [(2, 0)]
    # the dispatcher's read re-aims the timer at the next deadline (not earlier)
    assert [h.when for h in loop.pending] == [(T0 + 1000) / 1000]
    loop.advance_to(T0 + 1000)
    assert due.calls == 2


def test_non_strict_timer_fires_at_most_once_per_tick() -> None:
    loop = FakeLoop()
    due = DueCounter()
    t = make(loop, strict=False, tick=100, on_due=due)
    t.add(Position(1, 0), T0 + 200)
    t.add(Position(1, 1), T0 + 210)
    loop.advance_to(T0 + 100)                 # one tick before the first deadline
    assert due.calls == 1
    assert t.get_scheduled(10) == [(1, 0)]
    # next aim T0+110 (210 - tick) but the last firing was at T0+100: not before T0+200
    assert [round(h.when * 1000) for h in loop.pending] == [T0 + 200]


def test_strict_timer_fires_at_most_once_per_millisecond() -> None:
    loop = FakeLoop()
    due = DueCounter()
    t = make(loop, strict=True, tick=100, on_due=due)
    t.add(Position(1, 0), T0 + 10)
    t.add(Position(1, 1), T0 + 10)
    t.add(Position(1, 2), T0 + 11)
    loop.advance_to(T0 + 10)
    assert due.calls == 1
    assert t.get_scheduled(10) == [(1, 0), (1, 1)]
    assert [round(h.when * 1000) for h in loop.pending] == [T0 + 11]


def test_non_strict_timer_fires_one_tick_before_the_deadline() -> None:
    loop = FakeLoop()
    due = DueCounter()
    t = make(loop, strict=False, tick=100, on_due=due)
    t.add(Position(1, 0), T0 + 5000)
    assert [round(h.when * 1000) for h in loop.pending] == [T0 + 4900]
    loop.advance_to(T0 + 4900)
    assert due.calls == 1
    assert t.get_scheduled(5) == [(1, 0)]


def test_early_timer_wakeup_does_not_wake_the_dispatcher() -> None:
    loop = FakeLoop()
    due = DueCounter()
    t = make(loop, strict=True, tick=1, on_due=due)
    t.add(Position(1, 0), T0 + 50)
    handle = loop.pending[0]
    loop.now_ms = T0 + 49                      # the loop fired a millisecond early
    handle.cancelled = True
    handle.callback()
    assert due.calls == 0
    assert [round(h.when * 1000) for h in loop.pending] == [T0 + 50]


def test_cancel_removes_and_is_never_delivered() -> None:
    loop = FakeLoop()
    t = make(loop)
    t.add(Position(1, 1), T0 + 100)
    t.add(Position(1, 2), T0 + 200)
    assert t.contains(Position(1, 1))
    assert t.cancel(Position(1, 1))
    assert not t.contains(Position(1, 1))
    assert not t.cancel(Position(1, 1))
    assert len(t) == 1
    assert t.apply_delay_operation(DelayedOperationType.CANCEL, Position(9, 9), T0 - 1) is False  # past
    assert t.apply_delay_operation(DelayedOperationType.CANCEL, Position(9, 9), T0 + 300) is True  # pending
    loop.now_ms = T0 + 1000
    assert t.get_scheduled(10) == [(1, 2)]
    assert len(t) == 0


def test_cancelled_head_moves_the_timer_to_the_next_message() -> None:
    loop = FakeLoop()
    t = make(loop, tick=1)
    t.add(Position(1, 1), T0 + 100)
    t.add(Position(1, 2), T0 + 300)
    t.cancel(Position(1, 1))
    assert [round(h.when * 1000) for h in loop.pending] == [T0 + 300]


def test_re_read_entry_is_indexed_once() -> None:
    loop = FakeLoop()
    t = make(loop)
    assert t.add(Position(5, 5), T0 + 100)
    assert t.add(Position(5, 5), T0 + 100)
    assert len(t) == 1
    loop.now_ms = T0 + 100
    assert t.get_scheduled(10) == [(5, 5)]


def test_max_messages_is_respected_and_the_rest_stays() -> None:
    loop = FakeLoop()
    t = make(loop)
    for i in range(10):
        t.add(Position(1, i), T0 + 10)
    loop.now_ms = T0 + 10
    first = t.get_scheduled(4)
    assert len(first) == 4
    rest = t.get_scheduled(100)
    assert sorted(first + rest) == [(1, i) for i in range(10)]


def test_positions_that_do_not_pack_into_64_bits_still_work() -> None:
    loop = FakeLoop()
    t = make(loop)
    big = 1 << 40
    assert t.add(Position(big, 3), T0 + 10)
    assert t.add(Position(1, 1), T0 + 20)
    assert t.contains(Position(big, 3))
    loop.now_ms = T0 + 30
    assert t.get_scheduled(10) == [(1, 1), (big, 3)]


def test_fixed_delay_detection_pauses_once_the_lookahead_is_full() -> None:
    loop = FakeLoop()
    t = make(loop, strict=False, tick=100, lookahead=10)
    for i in range(9):
        t.add(Position(1, i), T0 + 10_000 + i * 10)
    assert not t.should_pause_all_deliveries()
    t.add(Position(1, 9), T0 + 10_090)
    assert t.should_pause_all_deliveries()
    loop.now_ms = T0 + 9_950                   # head due (non-strict): deliver, do not pause
    assert not t.should_pause_all_deliveries()


def test_out_of_order_delays_disable_fixed_delay_detection_until_empty() -> None:
    loop = FakeLoop()
    t = make(loop, strict=False, tick=100, lookahead=3)
    t.add(Position(1, 0), T0 + 10_000)
    t.add(Position(1, 1), T0 + 9_950)                    # within a tick: still "fixed"
    t.add(Position(1, 2), T0 + 5_000)                    # earlier by more than a tick
    t.add(Position(1, 3), T0 + 10_100)
    assert not t.should_pause_all_deliveries()
    loop.now_ms = T0 + 20_000
    assert len(t.get_scheduled(100)) == 4
    for i in range(3):
        t.add(Position(2, i), T0 + 30_000 + i)
    assert t.should_pause_all_deliveries()


def test_a_due_message_counts_against_fixed_delay_detection() -> None:
    loop = FakeLoop()
    t = make(loop, strict=True, tick=100, lookahead=2)
    assert t.add(Position(1, 0), T0) is False
    t.add(Position(1, 1), T0 + 5000)
    t.add(Position(1, 2), T0 + 5001)
    assert not t.should_pause_all_deliveries()


def test_clear_forgets_everything_and_disarms() -> None:
    loop = FakeLoop()
    t = make(loop)
    t.add(Position(1, 1), T0 + 100)
    t.clear()
    assert len(t) == 0
    assert not t.contains(Position(1, 1))
    assert loop.pending == []
    loop.now_ms = T0 + 1000
    assert t.get_scheduled(10) == []


def test_memory_is_packed_under_24_bytes_per_message() -> None:
    loop = FakeLoop()
    t = make(loop, strict=False, tick=1000)
    rnd = random.Random(1)
    n = 50_000
    for i in range(n):
        t.add(Position(10 + i // 20_000, i % 20_000), T0 + 1000 + rnd.randrange(3_600_000))
    assert t.memory_bytes / n < 24


def test_packed_index_survives_splits_and_interleaved_pops() -> None:
    index = PackedTimeIndex()
    rnd = random.Random(7)
    model: list[tuple[int, int]] = []
    for step in range(20_000):
        if rnd.random() < 0.7:
            ts = rnd.randrange(1000)
            index.push(ts, step)
            model.append((ts, step))
        else:
            bound = rnd.randrange(1000)
            out: list[int] = []
            index.pop_upto(bound, 50, out)
            model.sort()
            due = [p for ts, p in model if ts <= bound][:len(out)]
            assert sorted(out) == sorted(due) or len(out) == 50
            taken = set(out)
            model = [(ts, p) for ts, p in model if p not in taken]
        assert len(index) == len(model)
    assert sorted(index.items()) == sorted(model)


async def test_factory_picks_the_in_memory_tracker_and_wires_the_policy() -> None:
    config = BrokerConfig(is_delayed_delivery_deliver_at_time_strict=True,
                          delayed_delivery_fixed_delay_detection_lookahead=7)
    policy = resolve_policy(config, {"tickTime": 25}, None)
    tracker = create_tracker(config, policy, on_due=lambda: None,
                             loop=asyncio.get_running_loop())
    assert isinstance(tracker, InMemoryDelayedDeliveryTracker)
    assert (tracker.tick_time_ms, tracker.strict) == (25, True)
    await tracker.close()


def test_a_loop_wakeup_before_the_deadline_re_aims_without_tick_spacing() -> None:
    loop = FakeLoop()
    due = DueCounter()
    t = make(loop, strict=True, tick=1000, on_due=due)
    t.add(Position(1, 0), T0 + 5000)
    handle = loop.pending[0]
    loop.now_ms = T0 + 4999                   # fired one millisecond early
    handle.cancelled = True
    handle.callback()
    assert due.calls == 0
    assert [round(h.when * 1000) for h in loop.pending] == [T0 + 5000]   # not T0 + 5999
    loop.advance_to(T0 + 5000)
    assert due.calls == 1


def test_real_loop_timer_wakes_the_dispatcher_when_due_and_never_early() -> None:
    import uvloop

    from broker.delayed.tracker import wall_clock_ms

    async def scenario() -> list[int]:
        loop = asyncio.get_running_loop()
        woke = asyncio.Event()
        lateness: list[int] = []
        t = InMemoryDelayedDeliveryTracker(tick_time_ms=10, strict=True, on_due=woke.set,
                                           loop=loop)
        start = wall_clock_ms()
        for i, delay in enumerate((30, 60, 90)):
            t.add(Position(1, i), start + delay)
        got = 0
        while got < 3:
            await asyncio.wait_for(woke.wait(), 5)
            woke.clear()
            now = wall_clock_ms()
            for pos in t.get_scheduled(10):
                lateness.append(now - (start + (30, 60, 90)[pos[1]]))
                got += 1
        await t.close()
        return lateness

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        lateness = runner.run(scenario())
    assert all(0 <= late < 200 for late in lateness), lateness


def test_the_default_configuration_never_delivers_early() -> None:
    loop = FakeLoop()
    policy = resolve_policy(BrokerConfig(), None, None)
    assert policy.strict and policy.tick_time_ms == 1000
    t = make(loop, strict=policy.strict, tick=policy.tick_time_ms)
    assert t.add(Position(1, 0), T0 + 5000)
    loop.now_ms = T0 + 4999
    assert not t.has_message_available()      # Pulsar's default would hand it out a tick early
    loop.now_ms = T0 + 5000
    assert t.has_message_available()


def test_strict_firings_are_not_held_a_tick_apart() -> None:
    loop = FakeLoop()
    due = DueCounter()
    t = make(loop, strict=True, tick=1000, on_due=due)
    t.add(Position(1, 0), T0 + 5000)
    loop.advance_to(T0 + 5000)
    assert due.calls == 1
    assert [p[:2] for p in t.get_scheduled(10)] == [(1, 0)]
    t.add(Position(1, 1), T0 + 5007)                   # due 7 ms after the last firing
    assert [round(h.when * 1000) for h in loop.pending] == [T0 + 5007]   # not T0 + 6000
    loop.advance_to(T0 + 5007)
    assert due.calls == 2


def test_non_strict_firings_stay_a_tick_apart() -> None:
    loop = FakeLoop()
    due = DueCounter()
    t = make(loop, strict=False, tick=1000, on_due=due)
    t.add(Position(1, 0), T0 + 5000)
    loop.advance_to(T0 + 4000)                # one tick early, Pulsar's window
    assert due.calls == 1
    t.get_scheduled(10)
    t.add(Position(1, 1), T0 + 5500)
    assert [round(h.when * 1000) for h in loop.pending] == [T0 + 5000]


def test_the_packed_index_keeps_entries_of_one_time_in_position_order() -> None:
    # few distinct times, positions pushed out of order: ties span chunk boundaries
    index = PackedTimeIndex()
    rnd = random.Random(11)
    model: list[tuple[int, int]] = []
    packed = list(range(6000))
    rnd.shuffle(packed)
    for step, p in enumerate(packed):
        ts = rnd.randrange(3)
        index.push(ts, p)
        model.append((ts, p))
        if step % 1500 == 1499:                 # consume a head part on the way
            out: list[int] = []
            index.pop_upto(0, 700, out)
            model.sort()
            assert out == [p for _, p in model[:len(out)]]
            model = model[len(out):]
    model.sort()
    assert list(index.items()) == model
    head_ts = model[0][0]
    assert index.peek_run(head_ts, 5000) == [p for ts, p in model if ts == head_ts][:5000]


def test_the_timer_aims_at_the_exact_deadline_and_never_calls_back_before_it() -> None:
    now = [T0 + 0.6]                            # epoch ms with their fraction
    armed: list[tuple[float, Callable[[], object]]] = []

    class Handle:
        def cancel(self) -> None:
            return

    class Loop:
        def time(self) -> float:
            return 100.0

        def call_at(self, when: float, callback: Callable[[], object], /) -> Any:
            armed.append((when, callback))
            return Handle()

    fired: list[float] = []
    timer = DeadlineTimer(Loop(), lambda: int(now[0]), 1, lambda: fired.append(now[0]),
                          exact_ms=lambda: now[0])
    timer.update(T0 + 10)
    assert (armed[-1][0] - 100.0) * 1000 == pytest.approx(9.4, abs=1e-3)   # not 10: from the fraction
    now[0] = T0 + 9.8                           # a loop with ms timers woke early
    armed[-1][1]()
    assert fired == []
    assert (armed[-1][0] - 100.0) * 1000 == pytest.approx(0.2, abs=1e-3)   # the remainder
    now[0] = T0 + 10.0
    armed[-1][1]()
    assert fired == [T0 + 10.0]


@pytest.mark.parametrize("strict", [True, False])
def test_a_run_of_adds_does_what_one_add_per_position_does(strict: bool) -> None:
    """add_run (a dispatcher's read held in one call) against one add per position, from the
    same state: re-read positions, due ones, ones cancelled in advance (PIP-423), positions
    that do not pack, times in and out of order; same answers, contents, hand-out order,
    fixed-delay state and timer."""
    rnd = random.Random(11)
    for trial in range(60):
        one_loop, run_loop = FakeLoop(), FakeLoop()
        one = make(one_loop, strict=strict, lookahead=5)
        run = make(run_loop, strict=strict, lookahead=5)
        before = rnd.randrange(0, 20)
        for t in (one, run):                     # the same history before the run
            for entry in range(before):
                t.add(Position(1, entry), T0 + 500 + 10 * entry)
            t.cancel_delayed(Position(2, 3), T0 + 5_000)
        ordered = trial % 3 == 0
        positions, times = [], []
        for k in range(rnd.randrange(1, 120)):
            kind = rnd.random()
            if kind < 0.1:
                pos = Position(1, rnd.randrange(0, 25))          # maybe tracked already
            elif kind < 0.15:
                pos = Position(1 << 33, k)                      # does not pack
            elif kind < 0.2:
                pos = Position(2, 3)                            # cancelled in advance
            else:
                pos = Position(2, 10 + k)
            if ordered:
                at = T0 + 1_000 + 10 * k
            else:
                at = T0 + rnd.choice((-50, 0, 1, 60, 99, 100, 101, rnd.randrange(1, 20_000)))
            positions.append(pos)
            times.append(at)
        if pos == Position(2, 3):
            times[-1] = T0 + 5_000
        expected = [i for i, (p, at) in enumerate(zip(positions, times, strict=True)) if not one.add(p, at)]
        assert run.add_run(positions, times) == expected
        assert len(run) == len(one)
        assert run._fixed_delay == one._fixed_delay
        assert run._highest_ms == one._highest_ms
        assert run.timer.target_ms == one.timer.target_ms
        assert run.should_pause_all_deliveries() == one.should_pause_all_deliveries()
        for loop in (one_loop, run_loop):
            loop.now_ms = T0 + 30_000
        assert run.get_scheduled(10_000) == one.get_scheduled(10_000)


@pytest.mark.parametrize("strict", [True, False])
def test_a_run_of_one_ledger_in_bulk_does_what_one_add_per_position_does(
        strict: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """add_run's bulk path (fresh positions of one ledger, no cancel waiting: one membership
    union) against one add per position, from the same state: ordered and random times,
    positions out of order, one tracked already, a duplicate, a due one, a second ledger, a
    compaction sweep under way; same answers, contents, hand-out order, fixed-delay state and
    timer, and the bulk path taken where it applies."""
    from broker.delayed import indexed

    bulk = 0
    real = indexed.IndexedPositions.add_entry_ids

    def counted(self: Any, ledger_id: int, entry_ids: list[int], times: list[int]) -> bool:
        nonlocal bulk
        done: bool = real(self, ledger_id, entry_ids, times)
        bulk += done
        return done

    monkeypatch.setattr(indexed.IndexedPositions, "add_entry_ids", counted)
    rnd = random.Random(23)
    spoilers = ["none", "tracked", "duplicate", "due", "ledger", "sweep"]
    for trial in range(120):
        spoiler = spoilers[trial % len(spoilers)]
        one_loop, run_loop = FakeLoop(), FakeLoop()
        one = make(one_loop, strict=strict, lookahead=5)
        run = make(run_loop, strict=strict, lookahead=5)
        before = rnd.randrange(0, 20)
        for t in (one, run):                     # the same history before the run
            for entry in range(before):
                t.add(Position(1, entry), T0 + 500 + 10 * entry)
        n = rnd.randrange(2, 150)
        positions = [Position(2, 10 + k) for k in range(n)]
        if trial % 4 == 1:
            rnd.shuffle(positions)
        if trial % 3 == 0:
            times = [T0 + 1_000 + 10 * k for k in range(n)]
        else:
            times = [T0 + rnd.randrange(200, 20_000) for _ in range(n)]
        if spoiler == "tracked":
            for t in (one, run):
                t.add(positions[n // 2], T0 + 7_000)
        elif spoiler == "duplicate":
            positions[-1] = positions[0]
        elif spoiler == "due":
            times[n // 2] = T0 - 5
        elif spoiler == "ledger":
            positions[-1] = Position(3, 0)
        elif spoiler == "sweep":
            for t in (one, run):                 # a compaction under way: bulk adds are kept
                t._positions._sweep = indexed._Sweep(list(t._positions.members))
        bulk_before = bulk
        expected = [i for i, (p, at) in enumerate(zip(positions, times, strict=True))
                    if not one.add(p, at)]
        assert run.add_run(positions, times) == expected
        assert (bulk > bulk_before) == (spoiler in ("none", "sweep")), spoiler
        if spoiler == "sweep":
            kept = run._positions._sweep
            assert kept is not None
            assert all(((2 << 32) | p.entry_id) in kept.keep for p in positions)
            for t in (one, run):
                t._positions._sweep = None
        assert len(run) == len(one)
        assert run._fixed_delay == one._fixed_delay
        assert run._highest_ms == one._highest_ms
        assert run.timer.target_ms == one.timer.target_ms
        assert run.should_pause_all_deliveries() == one.should_pause_all_deliveries()
        for loop in (one_loop, run_loop):
            loop.now_ms = T0 + 30_000
        assert run.get_scheduled(10_000) == one.get_scheduled(10_000)


def test_a_run_of_cancels_does_what_one_cancel_per_position_does() -> None:
    """cancel_run (positions superseded together) against one cancel per position: same
    count, contents, timer and hand-out order, also when it empties the tracker."""
    rnd = random.Random(5)
    for trial in range(40):
        one_loop, run_loop = FakeLoop(), FakeLoop()
        one, run = make(one_loop), make(run_loop)
        tracked = [Position(1 << 33 if k % 17 == 0 else 1, k) for k in range(rnd.randrange(1, 200))]
        times = [T0 + rnd.randrange(1, 10_000) for _ in tracked]
        for t in (one, run):
            for pos, at in zip(tracked, times, strict=True):
                t.add(pos, at)
        if trial % 4 == 0:
            gone = list(tracked)                                   # all of them
        else:
            gone = rnd.sample(tracked, rnd.randrange(0, len(tracked) + 1))
        gone += [Position(1, 10_000 + k) for k in range(3)]       # never tracked
        assert run.cancel_run(gone) == sum(one.cancel(pos) for pos in gone)
        assert len(run) == len(one)
        assert run.timer.target_ms == one.timer.target_ms
        for loop in (one_loop, run_loop):
            loop.now_ms = T0 + 20_000
        assert run.get_scheduled(10_000) == one.get_scheduled(10_000)


def test_cancelling_a_ledgers_entry_ids_does_what_one_cancel_per_position_does() -> None:
    """cancel_entry_ids (one ledger's superseded entry ids as a bitmap: one bitmap difference)
    against one cancel per position: same count, contents, index bound, timer and
    hand-out order, also when it empties the tracker or the ledger is not tracked."""
    rnd = random.Random(11)
    for trial in range(60):
        one_loop, run_loop = FakeLoop(), FakeLoop()
        one, run = make(one_loop), make(run_loop)
        tracked = [Position(1 + k % 3, k) for k in range(rnd.randrange(1, 6000))]
        times = [T0 + rnd.randrange(1, 10_000) for _ in tracked]
        for t in (one, run):
            for pos, at in zip(tracked, times, strict=True):
                t.add(pos, at)
        for _ in range(3):
            ledger_id = rnd.choice((1, 2, 3, 9))
            mine = [pos.entry_id for pos in tracked if pos.ledger_id == ledger_id]
            ids = mine if trial % 5 == 0 else rnd.sample(mine, rnd.randrange(0, len(mine) + 1))
            ids += [100_000 + k for k in range(3)]                    # never tracked
            want = sum(one.cancel(Position(ledger_id, e)) for e in ids)
            assert run.cancel_entry_ids(ledger_id, BitMap(ids)) == want
            assert len(run) == len(one)
            assert run.timer.target_ms == one.timer.target_ms
            # compaction checked once per call, not per position: the same bound holds
            indexed = run._positions
            assert indexed.indexed <= 2 * indexed.count + COMPACT_FLOOR
        for loop in (one_loop, run_loop):
            loop.now_ms = T0 + 20_000
        assert run.get_scheduled(10_000) == one.get_scheduled(10_000)


def test_taking_members_in_bulk_equals_taking_them_one_by_one() -> None:
    """``take_members`` on buffers of one ledger (the bulk path), of two ledgers, with a
    position twice, with positions no longer members: the same positions out, in buffer
    order, and the same members left, as a position-by-position reference."""
    def reference(buf: list[int], members: dict[int, BitMap], out: list[Position]) -> int:
        taken = 0
        for packed in buf:
            lid, eid = packed >> POSITION_BITS, packed & POSITION_MASK
            bm = members.get(lid)
            if bm is not None and eid in bm:
                bm.remove(eid)
                if not bm:
                    del members[lid]
                out.append(Position(lid, eid))
                taken += 1
        return taken

    rng = random.Random(7)
    for case in range(300):
        ledgers = [3] if case % 2 else [3, 9]
        pool = [(lid << POSITION_BITS) | e for lid in ledgers for e in range(0, 400, 1 + case % 3)]
        buf = rng.sample(pool, rng.randint(0, 60))
        if case % 5 == 0 and buf:
            buf.append(buf[0])                     # a position twice
        keep = [p for p in pool if rng.random() > (0.2 if case % 7 == 0 else 0.0)]
        members_a: dict[int, BitMap] = {}
        for packed in keep:
            members_a.setdefault(packed >> POSITION_BITS, BitMap()).add(packed & POSITION_MASK)
        members_b = {lid: BitMap(bm) for lid, bm in members_a.items()}
        out_a: list[Position] = []
        out_b: list[Position] = []
        assert take_members(buf, members_a, out_a) == reference(buf, members_b, out_b)
        assert out_a == out_b
        assert members_a == members_b
    whole = [(5 << POSITION_BITS) | e for e in range(100)]
    members = {5: BitMap(range(100))}
    out: list[Position] = []
    assert take_members(whole, members, out) == 100 and members == {}
    assert out == [Position(5, e) for e in range(100)]


@pytest.mark.parametrize("method", ["push_run", "push_run_py"])
def test_a_run_pushed_at_once_equals_pushing_each_entry(method: str) -> None:
    """PackedTimeIndex.push_run (its C twin when built) and its reference push_run_py against
    one push per pair: the same entries in the same order (time, then position), the chunks
    within their bound and their maxima right, with times the index holds already (ties,
    across chunks), duplicates within the run, runs before, inside and after the index, large
    runs forcing several splits, and a consumed head."""
    rnd = random.Random(3)
    for trial in range(400):
        one, bulk = PackedTimeIndex(), PackedTimeIndex()
        span = rnd.choice((10, 1000, 10**6))
        for _ in range(rnd.randrange(0, 5000 if trial % 40 == 0 else 300)):
            at, packed = rnd.randrange(span), rnd.randrange(1 << 40)
            one.push(at, packed)
            bulk.push(at, packed)
        if rnd.random() < 0.3 and len(one):
            out_one: list[int] = []
            out_bulk: list[int] = []
            bound = rnd.randrange(span)
            one.pop_upto(bound, rnd.randrange(1, 3000), out_one)
            bulk.pop_upto(bound, len(out_one), out_bulk)
            assert out_one == out_bulk
        for _ in range(rnd.randrange(1, 5)):
            n = rnd.randrange(0, 600)
            times = [rnd.randrange(span) if rnd.random() < 0.8 else rnd.randrange(span, 2 * span)
                     for _ in range(n)]
            positions = [rnd.randrange(1 << 40) for _ in range(n)]
            if n and rnd.random() < 0.2:     # a pair twice in the run
                k = rnd.randrange(n)
                times[k], positions[k] = times[0], positions[0]
            for at, packed in zip(times, positions, strict=True):
                one.push(at, packed)
            getattr(bulk, method)(times, positions)
            assert len(one) == len(bulk)
            assert list(one.items()) == list(bulk.items())
            assert all(len(col) <= 2048 for col in bulk._ts)
            assert bulk._maxes == [col[-1] for col in bulk._ts]


def test_the_c_run_insert_refuses_what_the_reference_refuses() -> None:
    from broker.delayed import packed

    if packed._insert_run is None:
        pytest.skip("built without a compiler: push_run is the reference")
    index = PackedTimeIndex()
    index.push(5, 1)
    with pytest.raises(ValueError):
        index.push_run([1, 2, 3, 4], [1, 2, 3])
    with pytest.raises(TypeError):
        index.push_run([1, 2, "x", 4], [1, 2, 3, 4])
    with pytest.raises(OverflowError):
        index.push_run([1, 2, 3, 4], [1, 2, 3, -4])
    assert list(index.items()) == [(5, 1)] and len(index) == 1
