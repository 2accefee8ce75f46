"""The storage threads' wake-ups: the write thread's wait (storage/wakeup.py) and the one
ordered channel back to the loop (storage/handback.py), whichever way the loop is woken."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import pytest

from storage import SegmentStore, StorageConfig
from storage.handback import Handback
from storage.wakeup import Wakeup

WAIT_S = 10.0


def _waiter(wakeup: Wakeup, state: dict[str, int], woken: threading.Event) -> threading.Thread:
    """A thread that waits, under the lock, until state["work"] is set, like the writer."""

    def run() -> None:
        with wakeup.lock:
            while not state["work"]:
                wakeup.wait()
            state["seen"] = state["work"]
        woken.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_claimed_wake_up_wakes_the_waiting_thread_and_none_is_lost() -> None:
    wakeup = Wakeup()
    try:
        for _ in range(50):  # the wake-up races the thread's entry into its wait
            state = {"work": 0, "seen": 0}
            woken = threading.Event()
            thread = _waiter(wakeup, state, woken)
            with wakeup.lock:
                state["work"] = 7
                claimed = wakeup.claim()
            if claimed:
                wakeup.wake()
            assert woken.wait(WAIT_S), "the waiting thread was never woken"
            thread.join(WAIT_S)
            assert state["seen"] == 7
    finally:
        wakeup.close()


def test_a_wake_up_is_claimed_once_per_wait_and_a_timed_wait_ends() -> None:
    wakeup = Wakeup()
    try:
        with wakeup.lock:
            assert not wakeup.claim(), "nobody waits: no system call is worth making"
            started = time.monotonic()
            wakeup.wait(0.05)  # nobody wakes it: returns at the timeout, the lock held again
            assert time.monotonic() - started >= 0.04
            assert not wakeup.claim()
        entered = threading.Event()
        claims: list[bool] = []

        def waker() -> None:
            entered.wait(WAIT_S)
            deadline = time.monotonic() + WAIT_S
            while time.monotonic() < deadline:
                with wakeup.lock:
                    first = wakeup.claim()
                    if first:  # the wait began: a second claim before it ends gets nothing
                        claims.append(first)
                        claims.append(wakeup.claim())
                        break
            wakeup.wake()

        thread = threading.Thread(target=waker, daemon=True)
        thread.start()
        with wakeup.lock:
            entered.set()
            wakeup.wait(WAIT_S)
        thread.join(WAIT_S)
        assert claims == [True, False]
    finally:
        wakeup.close()


async def test_hand_backs_run_on_the_loop_in_the_order_posted_whichever_wake_up_comes_first(
) -> None:
    loop = asyncio.get_running_loop()
    handback = Handback(loop)
    ran: list[tuple[int, bool]] = []
    done = asyncio.Event()
    total = 400

    def item(i: int) -> None:
        ran.append((i, threading.current_thread() is threading.main_thread()))
        if i == total - 1:
            done.set()

    def post_all() -> None:
        for i in range(total):  # both wake-ups interleaved, as the two storage threads do
            if i % 3:
                handback.post(lambda i=i: item(i))
            else:
                handback.post_and_wait(lambda i=i: item(i))

    thread = threading.Thread(target=post_all, daemon=True)
    thread.start()
    await asyncio.wait_for(done.wait(), WAIT_S)
    thread.join(WAIT_S)
    handback.close()
    assert [i for i, _ in ran] == list(range(total))
    assert all(on_loop for _, on_loop in ran), "a hand-back ran off the loop's thread"


async def test_a_hand_back_that_raises_does_not_stop_the_ones_after_it() -> None:
    handback = Handback(asyncio.get_running_loop())
    ran: list[int] = []
    done = asyncio.Event()

    def boom() -> None:
        raise RuntimeError("a bug in a completion")

    handback.post_and_wait(boom)
    handback.post_and_wait(lambda: ran.append(1))
    handback.post(done.set)
    await asyncio.wait_for(done.wait(), WAIT_S)
    handback.close()
    assert ran == [1]


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_lone_appends_are_answered_and_a_closed_store_leaves_no_descriptor(
        tmp_path: Path) -> None:
    before = _open_fds()
    store = await SegmentStore.open(tmp_path, StorageConfig())
    ml = await store.open_ledger("persistent://public/default/wakeups")
    for i in range(200):  # one at a time: each group synced by the write thread, handed back
        # without the GIL, the writer woken without it
        position = await asyncio.wait_for(ml.append(b"%04d" % i), WAIT_S)
        assert position.entry_id == i
    assert store.stats().group_commits == 200
    await store.close()
    assert _open_fds() == before


async def test_without_eventfd_the_writer_is_woken_and_stops_through_its_condition(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "eventfd")  # as on a system without it
    store = await SegmentStore.open(tmp_path, StorageConfig())
    ml = await store.open_ledger("persistent://public/default/no-eventfd")
    for i in range(20):
        assert (await asyncio.wait_for(ml.append(b"%02d" % i), WAIT_S)).entry_id == i
    await asyncio.wait_for(store.close(), WAIT_S)  # the idle writer hears of the stop
