"""The trackers' precise wake-up (broker/delayed/wake.py): one timerfd per event loop runs each
callback at or after its wall-clock time, never before, in time order; cancelled ones never
run; the heap stays bounded by the live handles and the descriptor is closed when none is
left. A tracker's timer on the real wall clock and a real loop uses it; elsewhere the loop's
own timers."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from interpreters import run_fresh

from broker.delayed import wake as wake_module
from broker.delayed.tracker import DeadlineTimer, wall_clock_ms, wall_clock_ms_exact
from broker.delayed.wake import PreciseWake, WakeHandle, precise_wake

pytestmark = pytest.mark.skipif(not wake_module.AVAILABLE,
                                reason="no timerfd here (built without a compiler, or not "
                                       "Linux): the trackers use the loop's timers")

MS = 1_000_000


@pytest.fixture(autouse=True)
def _close_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The descriptor closed on the loop turn after the last live handle went, not a second
    later (what the tests look at)."""
    monkeypatch.setattr(wake_module, "IDLE_CLOSE_S", 0.0)


async def _closed(wake: PreciseWake) -> bool:
    for _ in range(100):   # the idle close is a loop callback: a few turns at most
        if not wake.open:
            return True
        await asyncio.sleep(0)
    return False


async def test_callbacks_run_at_or_after_their_time_in_time_order() -> None:
    wake = PreciseWake(asyncio.get_running_loop())
    ran: list[tuple[int, int]] = []
    done = asyncio.Event()
    start = time.time_ns()
    whens = [start + k * MS // 3 for k in (9, 2, 5, 2, 14, 0)]   # unsorted, one tie, one due
    for i, when in enumerate(whens):
        def callback(i: int = i) -> None:
            ran.append((i, time.time_ns()))
            if len(ran) == len(whens):
                done.set()
        assert wake.call_at_ns(when, callback) is not None
    await asyncio.wait_for(done.wait(), 30)
    assert sorted(i for i, _ in ran) == list(range(len(whens)))
    assert all(at >= whens[i] for i, at in ran)                       # never early
    assert [whens[i] for i, _ in ran] == sorted(whens)                # in time order
    assert [i for i, _ in ran][1:3] == [1, 3]                         # a tie: as armed
    assert await _closed(wake)                                        # none live: closed


async def test_a_cancelled_handle_never_runs_and_the_heap_stays_bounded() -> None:
    wake = PreciseWake(asyncio.get_running_loop())
    ran: list[int] = []
    far = time.time_ns() + 3_600_000 * MS
    keep = wake.call_at_ns(far, lambda: ran.append(-1))
    assert keep is not None
    for i in range(2000):   # re-aimed over and over: each old handle cancelled
        handle = wake.call_at_ns(far - i * MS, lambda i=i: ran.append(i))   # type: ignore[misc]
        assert handle is not None
        handle.cancel()
        handle.cancel()                                               # twice: counted once
        assert len(wake._heap) <= 2 * 1 + wake_module._STALE_SLACK + 1
    soon = time.time_ns() + 2 * MS
    done = asyncio.Event()
    assert wake.call_at_ns(soon, done.set) is not None
    await asyncio.wait_for(done.wait(), 30)
    assert ran == [] and wake.open                                    # the far one still live
    keep.cancel()
    assert wake._heap == [] and await _closed(wake)


async def test_a_failing_callback_is_reported_and_the_others_still_run() -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        wake = PreciseWake(loop)
        done = asyncio.Event()
        now = time.time_ns()

        def fail() -> None:
            raise RuntimeError("boom")

        wake.call_at_ns(now, fail)
        wake.call_at_ns(now + 1, done.set)
        await asyncio.wait_for(done.wait(), 30)
        assert len(reported) == 1 and isinstance(reported[0]["exception"], RuntimeError)
    finally:
        loop.set_exception_handler(None)


async def test_a_callback_that_arms_the_next_keeps_the_descriptor() -> None:
    wake = PreciseWake(asyncio.get_running_loop())
    fds: list[int] = []
    done = asyncio.Event()

    def again(left: int) -> None:
        fds.append(wake._fd)
        if left:
            wake.call_at_ns(time.time_ns() + MS // 2, lambda: again(left - 1))
        else:
            done.set()

    wake.call_at_ns(time.time_ns(), lambda: again(20))
    await asyncio.wait_for(done.wait(), 30)
    assert len(fds) == 21 and len(set(fds)) == 1                      # never closed between
    assert await _closed(wake)


async def test_a_tracker_timer_on_the_wall_clock_uses_the_loop_s_wake() -> None:
    loop = asyncio.get_running_loop()
    fired: list[float] = []
    done = asyncio.Event()

    def on_fire() -> None:
        fired.append(wall_clock_ms_exact())
        done.set()

    timer = DeadlineTimer(loop, wall_clock_ms, 1, on_fire, exact_ms=wall_clock_ms_exact)
    deadline = wall_clock_ms() + 5
    timer.update(deadline)
    assert isinstance(timer._handle, WakeHandle)
    assert precise_wake(loop) is timer._wake
    await asyncio.wait_for(done.wait(), 30)
    assert fired[0] >= deadline                                       # never early
    # a timer on another clock (a test's) aims the loop's own timers
    other = DeadlineTimer(loop, wall_clock_ms, 1, lambda: None)
    other.update(wall_clock_ms() + 60_000)
    assert isinstance(other._handle, asyncio.TimerHandle)
    other.cancel()
    assert precise_wake(object()) is None                             # not an event loop


def test_without_the_extension_the_trackers_use_the_loop_s_timers() -> None:
    code = (
        "import sys; sys.modules['broker.delayed._packed_accel'] = None\n"
        "import asyncio\n"
        "from broker.delayed import wake\n"
        "from broker.delayed.tracker import DeadlineTimer, wall_clock_ms, wall_clock_ms_exact\n"
        "assert not wake.AVAILABLE\n"
        "async def main():\n"
        "    loop = asyncio.get_running_loop()\n"
        "    assert wake.precise_wake(loop) is None\n"
        "    t = DeadlineTimer(loop, wall_clock_ms, 1, lambda: None, exact_ms=wall_clock_ms_exact)\n"
        "    t.update(wall_clock_ms() + 60_000)\n"
        "    assert isinstance(t._handle, asyncio.TimerHandle)\n"
        "    t.cancel()\n"
        "asyncio.run(main())\n"
        "print('loop timers')\n")
    assert run_fresh(code) == "loop timers"


async def test_a_firing_whose_round_arms_the_next_a_turn_later_keeps_the_descriptor(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wake_module, "IDLE_CLOSE_S", 30.0)
    loop = asyncio.get_running_loop()
    wake = PreciseWake(loop)
    fds: list[int] = []
    done = asyncio.Event()

    def fired(left: int) -> None:   # as a tracker's: the next deadline armed by a later round
        fds.append(wake._fd)
        if left:
            loop.call_soon(lambda: wake.call_at_ns(time.time_ns() + MS // 4,
                                                   lambda: fired(left - 1)))
        else:
            done.set()

    wake.call_at_ns(time.time_ns(), lambda: fired(10))
    await asyncio.wait_for(done.wait(), 30)
    assert len(fds) == 11 and len(set(fds)) == 1 and wake.open        # kept while in use
    wake._close_if_idle()                                             # the idle check's turn
    assert not wake.open


async def test_no_descriptor_to_be_had_warns_once_and_asks_again_later(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.get_running_loop()
    asked: list[float] = []
    real_open = wake_module.timerfd_open

    def refused() -> int:
        asked.append(loop.time())
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(wake_module, "timerfd_open", refused)
    wake = PreciseWake(loop)
    fired = asyncio.Event()
    with caplog.at_level("WARNING", logger="horae.delayed"):
        # a tracker re-aiming its timer many times meanwhile: the loop's timers each time
        assert all(wake.call_at_ns(time.time_ns() + MS, fired.set) is None for _ in range(500))
        timer = DeadlineTimer(loop, wall_clock_ms, 1, fired.set, exact_ms=wall_clock_ms_exact)
        timer._wake = wake
        timer.update(wall_clock_ms() + 2)
        assert isinstance(timer._handle, asyncio.TimerHandle)
        await asyncio.wait_for(fired.wait(), 30)                      # still fires
    assert len(asked) == 1                       # asked once within the retry window
    assert sum("no timerfd" in r.getMessage() for r in caplog.records) == 1
    # past the window it is asked for again, and used once it can be had
    monkeypatch.setattr(wake_module, "timerfd_open", real_open)
    wake._retry_at = loop.time()
    handle = wake.call_at_ns(time.time_ns() + MS, lambda: None)
    assert isinstance(handle, WakeHandle) and wake.open
    handle.cancel()
    assert await _closed(wake)
