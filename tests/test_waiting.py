"""tests/waiting.py: the shared bounded wait returns what it saw, or fails naming what never happened."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from waiting import WaitTimeout, wait_until, wait_until_async


def test_wait_until_returns_the_first_truthy_value() -> None:
    counter = itertools.count()
    assert wait_until(lambda: (n := next(counter)) >= 3 and n, interval_s=0) == 3


def test_wait_until_times_out_naming_the_condition_and_the_last_value() -> None:
    with pytest.raises(WaitTimeout) as caught:
        wait_until(lambda: [], timeout_s=0.05, interval_s=0.01, message="the list fills")
    text = str(caught.value)
    assert text.startswith("the list fills: not met within 0.05 s")
    assert "last value []" in text
    assert isinstance(caught.value, AssertionError)


async def test_wait_until_async_lets_loop_tasks_run_between_checks() -> None:
    done = asyncio.Event()
    asyncio.get_running_loop().call_later(0.02, done.set)
    assert await wait_until_async(done.is_set, timeout_s=5) is True


async def test_wait_until_async_times_out_with_the_message() -> None:
    with pytest.raises(WaitTimeout) as caught:
        await wait_until_async(lambda: None, timeout_s=0.03, interval_s=0.01, message="never")
    assert str(caught.value).startswith("never: not met within 0.03 s")
