"""Periodic work on one beat: the broker's and the store's timers wake the event loop together.

Theory of operation
-------------------
What an idle broker costs is mostly its wake-ups: each time the event loop leaves ``epoll``
for a timer, the machine pays for the wake, and on a virtual machine that lets an idle vCPU
halt a wake-up is charged a few milliseconds of CPU (a bare uvloop process that only sleeps,
woken three times a second, took 1.9% of a core on the benchmark machine). The broker's
periodic tasks -- the once-a-second rates and housekeeping tick, the cursor flush, the disk
check, the heap check, the loop-lag probe, the keep-alive round, the metric export -- each
slept its own period from whenever it last finished, so they woke the loop at as many
different moments every second.

:func:`sleep_to_beat` sleeps until the next multiple of the period on the loop's clock
instead of a period from now: tasks whose periods divide one another (1 s, 30 s, 60 s) come
due at the same instant and run in one loop iteration, one wake-up. A task whose work ran past
its beat waits for the following one (no burst of catch-up runs); a wake a little early (the
loop's timers have millisecond resolution) counts as on the beat. The period of a task is
unchanged on average; only its phase is shared.
"""

from __future__ import annotations

import asyncio
from typing import Final

__all__ = ["BEAT_SLACK_S", "sleep_to_beat", "until_beat"]

#: A wake this close before a beat counts as on it (the loop's timers round to milliseconds).
BEAT_SLACK_S: Final = 0.002


def until_beat(now: float, period: float) -> float:
    """Seconds from ``now`` (the loop's clock) to the next multiple of ``period`` that is
    more than :data:`BEAT_SLACK_S` away."""
    left = period - (now % period)
    return left if left > BEAT_SLACK_S else left + period


async def sleep_to_beat(period: float) -> None:
    """Sleep until the next beat of ``period`` (module docstring)."""
    loop = asyncio.get_running_loop()
    await asyncio.sleep(until_beat(loop.time(), period))
