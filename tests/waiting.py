"""Bounded waiting for tests: poll a condition until it holds, or fail saying what never happened.

``wait_until(condition)`` (threads, subprocesses, official clients) and
``await wait_until_async(condition)`` (inside the event loop under test) call ``condition``
until it returns something truthy and return that value, so a test can poll and keep what it
saw (``samples = wait_until(lambda: scraped_if_drained())``). When ``timeout_s`` passes first
they raise :class:`WaitTimeout` (an ``AssertionError``, so pytest reports it as a failed check)
naming ``message``, the time waited and the last value seen.

Use them where there is no event to wait on (state owned by another thread or process, a
scrape, a file another process writes); a test that can await a future or an event does that
instead. Tests import this module as ``from waiting import wait_until`` (``tests/`` is on
``sys.path`` through its conftest).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_INTERVAL_S = 0.02


class WaitTimeout(AssertionError):
    """The condition did not hold within the timeout."""


def _failure(message: str, timeout_s: float, last: object, calls: int) -> WaitTimeout:
    what = message or "condition"
    return WaitTimeout(f"{what}: not met within {timeout_s:g} s ({calls} checks; last value {last!r})")


def wait_until(
    condition: Callable[[], T],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    interval_s: float = DEFAULT_INTERVAL_S,
    message: str = "",
) -> T:
    """Call ``condition`` every ``interval_s`` until it returns a truthy value; return it.

    Checked once more at the deadline, so a slow last check still counts. Raises
    :class:`WaitTimeout` when the value stays falsy for ``timeout_s`` seconds.
    """
    deadline = time.monotonic() + timeout_s
    calls = 0
    while True:
        value = condition()
        calls += 1
        if value:
            return value
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _failure(message, timeout_s, value, calls)
        time.sleep(min(interval_s, remaining))


async def wait_until_async(
    condition: Callable[[], T],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    interval_s: float = DEFAULT_INTERVAL_S,
    message: str = "",
) -> T:
    """The event-loop form of :func:`wait_until`, for a test running on the loop under test.

    ``condition`` is a plain callable, checked on the loop; between checks the test sleeps on
    the loop for ``interval_s`` (``0`` yields one loop iteration), so the tasks under test run.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    calls = 0
    while True:
        value = condition()
        calls += 1
        if value:
            return value
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise _failure(message, timeout_s, value, calls)
        await asyncio.sleep(min(interval_s, remaining))
