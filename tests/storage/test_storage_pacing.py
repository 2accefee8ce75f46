"""Periodic work on one beat (storage.pacing): the next multiple of the period, a wake just
before a beat counted as on it, and tasks started apart aiming at the same beat."""

from __future__ import annotations

import asyncio

import pytest

from storage.pacing import BEAT_SLACK_S, sleep_to_beat, until_beat


@pytest.mark.parametrize(("now", "period", "expected"), [
    (10.25, 1.0, 0.75),
    (10.0, 1.0, 1.0),                          # on a beat: the next one
    (10.999, 1.0, 1.001),                      # just before one: counted as on it
    (10.0 - BEAT_SLACK_S * 2, 1.0, BEAT_SLACK_S * 2),
    (95.0, 30.0, 25.0),
    (0.3, 0.5, 0.2),
])
def test_until_beat_is_the_next_multiple_of_the_period(now: float, period: float,
                                                        expected: float) -> None:
    assert until_beat(now, period) == pytest.approx(expected)


async def test_tasks_started_apart_aim_at_the_same_beat(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = asyncio.get_running_loop()
    aimed: list[float] = []
    real_sleep = asyncio.sleep

    async def recording_sleep(delay: float) -> None:
        aimed.append(loop.time() + delay)

    for period in (1.0, 1.0, 30.0):
        monkeypatch.setattr(asyncio, "sleep", recording_sleep)
        await sleep_to_beat(period)
        monkeypatch.setattr(asyncio, "sleep", real_sleep)
        await asyncio.sleep(0.013)     # the next task starts a little later
    # (the clock read here moves on from the one sleep_to_beat read: microseconds)
    assert all(min(t % 1.0, 1.0 - t % 1.0) < 1e-3 for t in aimed)
    assert round(aimed[1] - aimed[0]) in (0, 1)
