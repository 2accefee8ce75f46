"""bench/reschedule_wire.py's share of slow receipts sent near the broker's one-second beat."""

from __future__ import annotations

import math

from bench.reschedule_wire import BEAT_WINDOW_S, PhaseResult, beat_share


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


def test_the_split_gives_the_storage_threads_wait_for_the_interpreter() -> None:
    phase = PhaseResult("by key", sends=100_000, seconds=2.0, loop_cpu_s=1.5,
                        storage={"group_commits": 1000.0, "group_committed_entries": 100_000.0,
                                 "fsyncs": 1000.0, "fsync_seconds": 0.6,
                                 "interpreter_wait_seconds": 0.5,
                                 "interpreter_yield_seconds": 0.02})
    line = phase.split()
    assert "event loop  15.0 us/op" in line
    assert "fdatasync    500/s, mean  0.60 ms,  30% of the time" in line
    assert "storage threads waiting for the interpreter  25%" in line
    assert "the loop yielding to them   1%" in line
