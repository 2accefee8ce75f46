"""TopicActivity: which loaded topics moved lately, so the once-a-second tick visits only those.

Theory of operation
-------------------
A topic calls :meth:`TopicActivity.touch` whenever one of its rate counters moves: a publish
is answered, a dispatch sends entries, an ack is applied. :meth:`tick` (the service's
one-second timer) then visits:

1. every topic touched within :data:`QUIET_AFTER_S` (the rate window and two ticks more):
   its rate meters are sampled and its housekeeping runs. After that long without a touch
   its meters hold one flat window (every rate is 0) and it leaves the active set. A topic
   touched again has its meters resumed from the previous tick first (it stood still until
   then), so its first rates measure the last second and not the whole pause. A topic just
   loaded is not active: its counters start at zero, and its meters resume from zeros;
2. a slice of all the loaded topics, sized so that each one is visited once per sweep
   (``sweep_s``: the shortest of a minute and the TTL and backlog-quota check intervals),
   for the housekeeping that time alone makes due (retention, message TTL, backlog quota,
   deduplication forgetting idle producer names). Pulsar runs those checks over every topic
   on intervals of the same order (``retentionCheckIntervalInSeconds`` 120,
   ``backlogQuotaCheckIntervalInSeconds`` 60, ``messageExpiryCheckIntervalInMinutes`` 5).

So 10,000 idle topics cost a sweep of ~170 topics a second, not 10,000 rate samples and
housekeepings. Invariants: a topic leaves the active set when it closes (:meth:`forget`); one topic
whose sampling or housekeeping raises is logged and skipped, never stops the tick.
Called on the broker loop only (by the topics and :class:`broker.topics.service.BrokerService`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import Protocol

from broker.metrics.rates import RATE_WINDOW_S

__all__ = ["QUIET_AFTER_S", "SWEEP_MAX_S", "ActiveTopic", "TopicActivity"]

log = logging.getLogger("horae.topics.activity")

#: A topic untouched for this long has flat rate meters and leaves the active set.
QUIET_AFTER_S = RATE_WINDOW_S + 2.0
#: Every loaded topic gets its housekeeping at least this often.
SWEEP_MAX_S = 60.0


class RateSampling(Protocol):
    """A topic's rate meters (:class:`broker.topics.meters.TopicMeters`)."""

    def sample_rates(self, now: float) -> None: ...

    def resume_rates(self, since: float) -> None: ...


class ActiveTopic(Protocol):
    """What the tick asks of a topic (implemented by :class:`broker.topics.topic.Topic`)."""

    full: str

    @property
    def meters(self) -> RateSampling: ...

    def housekeeping(self, now: float) -> None: ...


class TopicActivity:
    """The active set and the sweep (see the module docstring)."""

    def __init__(self, sweep_s: float = SWEEP_MAX_S, tick_s: float = 1.0) -> None:
        self.sweep_s = max(tick_s, min(sweep_s, SWEEP_MAX_S))
        self.tick_s = tick_s
        self._touched: set[ActiveTopic] = set()
        self._active: dict[ActiveTopic, float] = {}   # topic -> last tick that saw it touched
        self._sweep: list[ActiveTopic] = []            # what is left of this sweep round
        self._budget = 1                               # sweep topics per tick this round
        self._prev_tick: float | None = None

    def touch(self, topic: ActiveTopic) -> None:
        """*topic*'s counters moved (hot path: two lookups and a set insertion). A topic
        that was quiet resumes its meters from the last tick: it stood still until then."""
        touched = self._touched
        if topic not in touched:
            if topic not in self._active and self._prev_tick is not None:
                topic.meters.resume_rates(self._prev_tick)
            touched.add(topic)

    def forget(self, topic: ActiveTopic) -> None:
        """*topic* was unloaded."""
        self._touched.discard(topic)
        self._active.pop(topic, None)

    @property
    def active_count(self) -> int:
        return len(self._active)

    def is_active(self, topic: ActiveTopic) -> bool:
        return topic in self._active or topic in self._touched

    def tick(self, now: float, loaded: Iterable[ActiveTopic]) -> None:
        """Sample and housekeep the active topics, then the sweep's slice of *loaded*."""
        self._prev_tick = now
        touched, self._touched = self._touched, set()
        active = self._active
        for topic in touched:
            active[topic] = now
        for topic, last in list(active.items()):
            try:
                topic.meters.sample_rates(now)
                topic.housekeeping(now)
            except Exception:  # one topic's failure must not stop the tick for all
                log.exception("housekeeping of %s failed", topic.full)
            if now - last >= QUIET_AFTER_S:
                del active[topic]   # its meters now hold one flat window
        if not self._sweep:
            self._sweep = list(loaded)
            self._sweep.reverse()   # popped from the end: oldest first
            self._budget = max(1, math.ceil(len(self._sweep) * self.tick_s / self.sweep_s))
        sweep = self._sweep
        for _ in range(min(self._budget, len(sweep))):
            topic = sweep.pop()
            if topic not in active:   # an unloaded one's housekeeping does nothing
                try:
                    topic.housekeeping(now)
                except Exception:
                    log.exception("housekeeping of %s failed", topic.full)
