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

A topic of a namespace in a resource group (:mod:`broker.topics.resource_groups`) also has
that group's limiter as its ``group``, shared with every other member topic: a read is counted
in both, and the longer hold wins.
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
        #: the resource group's limiter shared with other topics, else None
        self.group: PublishRateLimiter | None = None
        self.limited_times = 0
        #: what was counted here (a group's ``pulsar_resource_group_*_used``)
        self.used_msgs = 0
        self.used_bytes = 0
        self._window_end = 0.0
        self._msgs = 0
        self._bytes = 0

    @property
    def active(self) -> bool:
        """Is there a rate to count against, its own or its group's?"""
        return self.rate.limited or (self.group is not None and self.group.rate.limited)

    def record(self, messages: int, nbytes: int, now: float) -> float:
        """Count a read's SENDs; the seconds its connection must not be read (0: none)."""
        group = self.group
        hold = 0.0 if group is None else group.record(messages, nbytes, now)
        rate = self.rate
        self.used_msgs += messages
        self.used_bytes += nbytes
        if not rate.limited:
            return hold
        if now >= self._window_end:
            self._window_end = now + 1.0
            self._msgs = 0
            self._bytes = 0
        self._msgs += messages
        self._bytes += nbytes
        if (0 < rate.msgs <= self._msgs) or (0 < rate.bytes <= self._bytes):
            self.limited_times += 1
            return max(hold, self._window_end - now)
        return hold
