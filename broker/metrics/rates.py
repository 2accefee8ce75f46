"""Measurement primitives that topics, producers, subscriptions and consumers keep.

Owns :class:`RateMeter` (per-second rates of monotonically increasing counters over a sliding
window), the bounds of the publish-latency histogram, and :func:`iso_ms`, the timestamp format
of Pulsar's stats documents. Pure values and arithmetic: no IO, no clock of its own (callers
pass the loop time), no import of anything above this package. Called by every layer that
keeps counters; read at scrape time by :mod:`broker.metrics.collector`.
"""

from __future__ import annotations

import time
from collections import deque

__all__ = ["PUBLISH_LATENCY_BUCKETS_MS", "RATE_WINDOW_S", "RateMeter", "iso_ms"]

#: Rates are averaged over this many seconds of samples.
RATE_WINDOW_S = 10.0

#: Upper bounds (ms) of the publish-latency histogram: Pulsar's pulsar_storage_write_latency
#: buckets (0.5 ms ... 1 s); one more bucket counts everything slower.
PUBLISH_LATENCY_BUCKETS_MS: tuple[float, ...] = (0.5, 1.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0,
                                                 1000.0)


class RateMeter:
    """Per-second rates of monotonically increasing counters over a sliding window.

    Sampling may pause while the counters stand still (the service samples only the topics
    that were active lately): :meth:`resume` then says since when they may have moved, so
    the next sample measures from there and not from before the pause. Counters start at
    zero, so a meter never sampled resumes from zeros."""

    __slots__ = ("_resume_at", "_samples", "_window")

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self._window = window_s
        self._samples: deque[tuple[float, tuple[float, ...]]] = deque()
        self._resume_at: float | None = None

    def resume(self, since: float) -> None:
        """The counters stood still (at their last sample, or at zero) until *since*."""
        self._resume_at = since

    def sample(self, now: float, values: tuple[float, ...]) -> None:
        samples = self._samples
        since = self._resume_at
        if since is not None:
            self._resume_at = None
            still = samples[-1][1] if samples else tuple(0 for _ in values)
            samples.clear()
            samples.append((min(since, now), still))
        samples.append((now, values))
        while len(samples) > 2 and now - samples[0][0] > self._window:
            samples.popleft()

    def rates(self, now: float, values: tuple[float, ...]) -> tuple[float, ...]:
        since = self._resume_at
        if since is not None:   # read between a resume and the next sample
            t0 = since
            old = self._samples[-1][1] if self._samples else tuple(0 for _ in values)
        elif not self._samples:
            return (0.0,) * len(values)
        else:
            t0, old = self._samples[0]
        dt = now - t0
        if dt <= 0.5 or values == old:  # too short a span to mean anything, or flat
            return (0.0,) * len(values)
        return tuple(max(0.0, (v - o) / dt) for v, o in zip(values, old, strict=True))


def iso_ms(ms: int) -> str:
    """*ms* since the epoch as Pulsar's stats print it (ISO 8601, UTC, milliseconds)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"
