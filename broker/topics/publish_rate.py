"""Topic publish rate: Pulsar's ``PublishRate`` throttles by pausing reads, never by refusing.

Theory of operation
-------------------
One :class:`PublishRateLimiter` per topic (persistent or not). Its :class:`PublishRate`
(messages and bytes per second; ``<= 0`` is no limit) is resolved from the topic's
``publishRate`` policy, else the namespace's, else ``maxPublishRatePerTopicInMessages`` /
``maxPublishRatePerTopicInBytes`` (0 by default), and set on the topic whenever a producer is
created or a policy changes (:mod:`broker.topics.live_policies`). Each socket read of SENDs for a
producer is recorded (:meth:`record`) after the SENDs were taken; once the current one-second
window holds more than the rate allows, the answer is the time left in the window, and every
connection with a producer on the topic stops being read until then
(:meth:`broker.net.throttle.ReadThrottle.rate_held`), as Pulsar turns Netty's autoread off for
all the topic's producers until its rate limiter's next tick. The SENDs already read are stored
and answered; TCP pushes back on the client. ``limited_times`` counts the windows cut short
(``publishRateLimitedTimes`` in the stats, ``pulsar_publish_rate_limit_times``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NO_PUBLISH_RATE", "PublishRate", "PublishRateLimiter"]


@dataclass(frozen=True, slots=True)
class PublishRate:
    """Pulsar's PublishRate body, per second."""

    msgs: int = -1   # publishThrottlingRateInMsg
    bytes: int = -1  # publishThrottlingRateInByte

    @property
    def limited(self) -> bool:
        return self.msgs > 0 or self.bytes > 0


NO_PUBLISH_RATE = PublishRate()


class PublishRateLimiter:
    """What one topic was sent in the current one-second window (module docstring)."""

    def __init__(self) -> None:
        self.rate = NO_PUBLISH_RATE
        self.limited_times = 0
        self._window_end = 0.0
        self._msgs = 0
        self._bytes = 0

    def record(self, messages: int, nbytes: int, now: float) -> float:
        """Count a read's SENDs; the seconds its connection must not be read (0: none)."""
        rate = self.rate
        if not rate.limited:
            return 0.0
        if now >= self._window_end:
            self._window_end = now + 1.0
            self._msgs = 0
            self._bytes = 0
        self._msgs += messages
        self._bytes += nbytes
        if (0 < rate.msgs <= self._msgs) or (0 < rate.bytes <= self._bytes):
            self.limited_times += 1
            return self._window_end - now
        return 0.0
