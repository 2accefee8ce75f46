"""DelayedDelivery: the tracker built on first use from the factory, the policy pushed down,
positions in and out, and the wake-up going to the dispatcher that drives it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from delayed_testlib import T0, FakeLoop

from broker.delayed.delivery import DelayedDelivery
from broker.delayed.in_memory import InMemoryDelayedDeliveryTracker
from broker.delayed.policy import DelayPolicy
from broker.delayed.tracker import DelayedDeliveryTracker
from storage.positions import Position

POLICY = DelayPolicy(active=True, tick_time_ms=100, max_delay_ms=0, fixed_delay_ms=0,
                     strict=True)


class Factory:
    """Builds in-memory trackers on a fake loop and remembers each one."""

    def __init__(self, loop: FakeLoop) -> None:
        self.loop = loop
        self.built: list[InMemoryDelayedDeliveryTracker] = []

    def __call__(self, policy: DelayPolicy, on_due: Callable[[], None]) -> DelayedDeliveryTracker:
        tracker = InMemoryDelayedDeliveryTracker(
            tick_time_ms=policy.tick_time_ms, strict=policy.strict, on_due=on_due,
            loop=self.loop, clock_ms=self.loop.clock_ms)
        self.built.append(tracker)
        return tracker


def test_no_tracker_until_a_delayed_entry_is_held_and_none_while_inactive() -> None:
    factory = Factory(FakeLoop())
    delayed = DelayedDelivery(factory, dataclasses.replace(POLICY, active=False))
    assert delayed.hold(Position(1, 0), T0 + 1000) is False     # inactive: deliver it now
    assert delayed.due(10) == [] and not delayed.paused() and len(delayed) == 0
    assert delayed.skip_held(Position(1, 0)) == 0
    assert factory.built == []
    delayed.set_policy(POLICY)
    assert delayed.hold(Position(1, 0), T0 + 1000) is True
    assert len(factory.built) == 1 and delayed.tracker is factory.built[0]
    assert delayed.hold(Position(1, 1), T0 + 2000) is True
    assert len(factory.built) == 1 and len(delayed) == 2


def test_positions_go_in_and_come_out_as_positions() -> None:
    loop = FakeLoop()
    delayed = DelayedDelivery(Factory(loop), POLICY)
    for entry in (3, 1, 2):
        assert delayed.hold(Position(7, entry), T0 + 500)
    assert delayed.due(10) == []                                # not due yet
    loop.advance_to(T0 + 500)
    out = delayed.due(10)
    assert out == [Position(7, 1), Position(7, 2), Position(7, 3)]
    assert all(type(p) is Position for p in out)
    assert len(delayed) == 0


def test_a_pushed_policy_reaches_the_tracker() -> None:
    factory = Factory(FakeLoop())
    delayed = DelayedDelivery(factory, POLICY)
    delayed.hold(Position(1, 0), T0 + 10_000)
    delayed.set_policy(dataclasses.replace(POLICY, tick_time_ms=250))
    assert factory.built[0].tick_time_ms == 250
    assert delayed.policy.tick_time_ms == 250


def test_the_tracker_wakes_the_dispatcher_it_was_handed_to() -> None:
    loop = FakeLoop()
    delayed = DelayedDelivery(Factory(loop), POLICY)
    woken: list[str] = []
    delayed.wake_with(lambda: woken.append("first"))
    delayed.wake_with(lambda: woken.append("second"))           # a new dispatcher took over
    delayed.hold(Position(1, 0), T0 + 300)
    loop.advance_to(T0 + 300)
    assert woken == ["second"]
    delayed.wake_with(None)                                     # handed to no dispatcher
    delayed.hold(Position(1, 1), T0 + 600)
    assert delayed.due(10) == [Position(1, 0)]
    loop.advance_to(T0 + 600)
    assert woken == ["second"]
    assert delayed.due(10) == [Position(1, 1)]


async def test_release_closes_the_tracker_and_the_next_use_builds_a_new_one() -> None:
    factory = Factory(FakeLoop())
    delayed = DelayedDelivery(factory, POLICY)
    delayed.hold(Position(1, 0), T0 + 1000)
    await delayed.release()
    assert delayed.tracker is None and len(delayed) == 0 and delayed.memory_bytes == 0
    delayed.hold(Position(1, 1), T0 + 1000)
    assert len(factory.built) == 2 and delayed.tracker is factory.built[1]


def test_forget_and_clear_drop_tracked_positions() -> None:
    delayed = DelayedDelivery(Factory(FakeLoop()), POLICY)
    for entry in range(4):
        delayed.hold(Position(2, entry), T0 + 1000 + entry)
    delayed.forget([Position(2, 1), Position(2, 9)])
    assert len(delayed) == 3 and delayed.skip_held(Position(2, 0)) == 1
    delayed.clear()
    assert len(delayed) == 0 and delayed.skip_held(Position(2, 0)) == 0
