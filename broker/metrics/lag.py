"""Event-loop lag: a timer that measures how late it fires, and its two metric families.

Theory of operation
-------------------
:class:`LoopLagProbe` arms one ``call_later`` timer for each beat of ``interval_s`` (once a
second, on the beat the broker's other periodic work shares, :mod:`storage.pacing`: no
wake-up of its own); when it fires it records how much later than planned that was (the time
the loop spent on other callbacks).
Bucket counts are plain ints (non-cumulative, overflow last), read at scrape time by
:func:`loop_lag_families`: ``horae_event_loop_lag_seconds`` (the last lag) and
``horae_event_loop_lag_histogram_seconds``. Start the probe on the loop it measures (the admin
app's on_startup); :meth:`LoopLagProbe.stop` cancels it. Loop thread only, no locks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric

from broker.metrics.exposition import cumulative
from storage.pacing import until_beat

__all__ = ["LOOP_LAG_BOUNDS_S", "LoopLagProbe", "loop_lag_families"]

#: Event-loop lag histogram buckets (seconds).
LOOP_LAG_BOUNDS_S: tuple[float, ...] = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                                        2.5, 5.0)


class LoopLagProbe:
    """Measures event-loop lag (see the module docstring)."""

    def __init__(self, interval_s: float = 1.0,
                 bounds_s: Sequence[float] = LOOP_LAG_BOUNDS_S) -> None:
        self.interval_s = interval_s
        self.bounds_s = tuple(bounds_s)
        self.last_lag_s = 0.0
        self.max_lag_s = 0.0
        self.buckets = [0] * (len(self.bounds_s) + 1)
        self.sum_s = 0.0
        self.count = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._expected = 0.0

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop or asyncio.get_running_loop()
        self._schedule()

    def _schedule(self) -> None:
        assert self._loop is not None
        now = self._loop.time()
        delay = until_beat(now, self.interval_s)
        self._expected = now + delay
        self._handle = self._loop.call_later(delay, self._tick)

    def _tick(self) -> None:
        assert self._loop is not None
        self.record(max(0.0, self._loop.time() - self._expected))
        self._schedule()

    def record(self, lag_s: float) -> None:
        self.last_lag_s = lag_s
        self.max_lag_s = max(self.max_lag_s, lag_s)
        self.sum_s += lag_s
        self.count += 1
        for i, bound in enumerate(self.bounds_s):
            if lag_s <= bound:
                self.buckets[i] += 1
                return
        self.buckets[-1] += 1

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    @property
    def running(self) -> bool:
        return self._handle is not None


def loop_lag_families(probe: LoopLagProbe) -> Iterator[Metric]:
    yield GaugeMetricFamily("horae_event_loop_lag_seconds",
                            "How late the last event-loop probe timer fired (seconds)",
                            value=probe.last_lag_s)
    hist = HistogramMetricFamily("horae_event_loop_lag_histogram_seconds",
                                 "Distribution of event-loop probe lateness (seconds)")
    hist.add_metric([], cumulative(probe.buckets, probe.bounds_s), sum_value=probe.sum_s)
    yield hist
