"""The write thread's condition variable (storage/wakeup.py): no lost wake-up, no unheld release."""

from __future__ import annotations

import threading

from storage.wakeup import Wakeup

JOIN_S = 60.0


def test_a_notify_without_a_waiter_is_not_kept() -> None:
    mutex = threading.Lock()
    wakeup = Wakeup(mutex)
    with mutex:
        wakeup.notify()
        assert wakeup.wait(0.01) is False  # as Condition.notify: nobody waited, nothing kept


def test_a_waiting_thread_is_woken_by_a_notify() -> None:
    mutex = threading.Lock()
    wakeup = Wakeup(mutex)
    items: list[int] = []
    woken: list[bool] = []
    waiting = threading.Event()

    def waiter() -> None:
        with mutex:
            waiting.set()
            while not items:
                woken.append(wakeup.wait())

    thread = threading.Thread(target=waiter)
    thread.start()
    assert waiting.wait(JOIN_S)
    with mutex:
        items.append(1)
        wakeup.notify()
    thread.join(JOIN_S)
    assert not thread.is_alive()
    assert woken and woken[-1] is True


def test_notifies_racing_timeouts_lose_no_item_and_never_release_twice() -> None:
    """Many notifiers against one waiter whose waits time out constantly (the writer's
    group-commit gathering waits with a deadline): every item is taken, no notify raises."""
    mutex = threading.Lock()
    wakeup = Wakeup(mutex)
    queue: list[int] = []
    per_thread, threads = 3000, 4
    taken: list[int] = []
    errors: list[BaseException] = []

    def waiter() -> None:
        try:
            while len(taken) < per_thread * threads:
                with mutex:
                    while not queue:
                        wakeup.wait(0.00005)
                    taken.extend(queue)
                    queue.clear()
        except BaseException as exc:  # reported below
            errors.append(exc)

    def notifier(base: int) -> None:
        try:
            for i in range(per_thread):
                with mutex:
                    queue.append(base + i)
                    wakeup.notify()
        except BaseException as exc:  # reported below
            errors.append(exc)

    workers = [threading.Thread(target=notifier, args=(n * per_thread,)) for n in range(threads)]
    consumer = threading.Thread(target=waiter)
    consumer.start()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(JOIN_S)
    consumer.join(JOIN_S)
    assert not consumer.is_alive()
    assert errors == []
    assert sorted(taken) == list(range(per_thread * threads))


def test_a_wait_after_a_notify_that_raced_its_timeout_blocks_again() -> None:
    """The signal a late notify gave is taken by the wait it raced: the next wait without a
    notify times out instead of returning at once."""
    mutex = threading.Lock()
    wakeup = Wakeup(mutex)
    for _ in range(200):
        notified = threading.Event()

        def late_notify(notified: threading.Event = notified) -> None:
            with mutex:
                wakeup.notify()
            notified.set()

        with mutex:
            timer = threading.Timer(0.0005, late_notify)
            timer.start()
            wakeup.wait(0.0005)
        timer.join(JOIN_S)
        assert notified.wait(JOIN_S)
        with mutex:
            assert wakeup.wait(0.001) is False
