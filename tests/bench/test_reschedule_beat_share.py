"""bench/reschedule_wire.py's share of slow receipts sent near the broker's one-second beat."""

from __future__ import annotations

import math

from bench.reschedule_wire import BEAT_WINDOW_S, beat_share


def test_slow_receipts_at_the_beat_count_and_the_others_do_not() -> None:
    sent = [100.05, 100.5, 101.99, 102.3, 103.11]
    lat = [30.0, 1.0, 25.0, 40.0, 20.0]
    # slow (over 10 ms): 100.05 (in), 101.99 (in: 10 ms before the beat), 102.3 (out),
    # 103.11 (in)
    assert beat_share(sent, lat, 10.0) == 3 / 4


def test_spread_slow_receipts_give_about_the_windows_share_of_time() -> None:
    sent = [i / 1000 for i in range(10_000)]
    lat = [50.0] * len(sent)
    low, high = BEAT_WINDOW_S
    assert math.isclose(beat_share(sent, lat, 10.0), high - low, abs_tol=0.002)


def test_no_slow_receipt_gives_nan() -> None:
    assert math.isnan(beat_share([1.0, 2.5], [1.0, 2.0], 5.0))
    assert math.isnan(beat_share([], [], 0.0))
