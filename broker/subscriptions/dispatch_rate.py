"""Subscription dispatch rate: Pulsar's ``DispatchRate`` delays dispatch, it never drops.

Theory of operation
-------------------
A :class:`DispatchRate` (messages and bytes per ``ratePeriodInSecond``; ``<= 0`` is no limit)
is resolved from the topic's ``subscriptionDispatchRate`` policy, else the namespace's, else
``dispatchThrottlingRatePerSubscriptionInMsg`` / ``...InByte`` (both 0 by default), and set on
the subscription at each SUBSCRIBE. The subscription's dispatcher asks its
:class:`DispatchRateLimiter` before each round how many messages it may still send in the
current period; the limiter reads the subscription's plain out counters (no hook on the send
path) and remembers their values when a period starts. At 0 the dispatcher reads nothing and
wakes when the period ends, as Pulsar's dispatcher re-schedules its read after the throttle
period. A round may pass the limit by the messages of one read (a batch), as in Pulsar. A topic's
``dispatchRate`` (else ``dispatchThrottlingRatePerTopicInMsg`` / ``...InByte``) is one
:class:`TopicDispatch` on the topic that every subscription's dispatcher asks as well, counting
what all of them sent; the smaller allowance wins. A rate ``relativeToPublishRate`` adds the
topic's publish rate (messages and bytes per second, as the stats measure it) to its limits, as
Pulsar's dispatch rate limiter does: a subscription may then keep up with what is published
plus the configured margin. Only the limits that are set (> 0) grow. A topic of a namespace in a resource group
(:mod:`broker.topics.resource_groups`) also asks its group's :class:`GroupDispatch`, which
counts what all its member topics dispatched; again the smaller allowance wins.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["NO_DISPATCH_RATE", "DispatchRate", "DispatchRateLimiter", "GroupDispatch",
           "TopicDispatch"]


@dataclass(frozen=True, slots=True)
class DispatchRate:
    """Pulsar's DispatchRate body, in its units."""

    msgs: int = -1          # dispatchThrottlingRateInMsg
    bytes: int = -1         # dispatchThrottlingRateInByte
    period_s: int = 1       # ratePeriodInSecond
    relative: bool = False  # relativeToPublishRate

    @property
    def limited(self) -> bool:
        return self.msgs > 0 or self.bytes > 0

    def plus_published(self, published: Callable[[], tuple[float, float]]) -> DispatchRate:
        """This rate, its set limits raised by the publish rate (messages, bytes per second)
        when it is relative to it; else itself."""
        if not self.relative:
            return self
        msgs_in, bytes_in = published()
        return DispatchRate(self.msgs + int(msgs_in) if self.msgs > 0 else self.msgs,
                            self.bytes + int(bytes_in) if self.bytes > 0 else self.bytes,
                            self.period_s)


NO_DISPATCH_RATE = DispatchRate()


class TopicDispatch:
    """A topic's ``dispatchRate``, shared by its subscriptions' dispatchers: each asks
    :meth:`allowance` with the topic's out counters (the sums over its subscriptions)."""

    def __init__(self, counters: Callable[[], tuple[int, int]],
                 published: Callable[[], tuple[float, float]] = lambda: (0.0, 0.0)) -> None:
        self.rate = NO_DISPATCH_RATE  # set at each SUBSCRIBE and policy change
        self._counters = counters
        #: the topic's publish rate (messages, bytes per second), for relative rates
        self.published = published
        self.limiter = DispatchRateLimiter()
        #: dispatcherPauseOnAckStatePersistent in force: the most acknowledged ranges a cursor
        #: may hold before new reads pause (0: the policy is off); :mod:`ack_state_pause`
        self.ack_state_ranges_limit = 0
        #: the resource group's dispatch quota this topic shares, else None
        self.group: GroupDispatch | None = None

    @property
    def limited(self) -> bool:
        """Is there a rate to ask, the topic's or its group's?"""
        return self.rate.limited or (self.group is not None and self.group.rate.limited)

    def counters(self) -> tuple[int, int]:
        """The topic's messages and bytes dispatched so far."""
        return self._counters()

    def join(self, group: GroupDispatch | None) -> None:
        """Share *group*'s quota (None: leave the one shared so far)."""
        if self.group is group:
            return
        if self.group is not None:
            self.group.discard(self)
        self.group = group
        if group is not None:
            group.add(self)

    def allowance(self, now: float) -> tuple[int, float]:
        """As :meth:`DispatchRateLimiter.allowance`, the smaller of the topic's and its
        group's; ``(-1, 0)`` without a limit."""
        allowed, wait = -1, 0.0
        if self.rate.limited:
            msgs, nbytes = self._counters()
            allowed, wait = self.limiter.allowance(self.rate.plus_published(self.published),
                                                   msgs, nbytes, now)
        group = self.group
        if allowed != 0 and group is not None and group.rate.limited:
            group_allowed, group_wait = group.allowance(now)
            if group_allowed == 0 or (group_allowed > 0 and (allowed < 0 or group_allowed < allowed)):
                allowed, wait = group_allowed, group_wait
        return allowed, wait


class GroupDispatch:
    """A resource group's dispatch quota, shared by its member topics' :class:`TopicDispatch`:
    it counts what they dispatched while members (what a topic sent before it joined does not
    count; members leave when their topic goes)."""

    def __init__(self) -> None:
        self.rate = NO_DISPATCH_RATE
        #: member -> its (messages, bytes) counters when last looked at
        self.members: weakref.WeakKeyDictionary[TopicDispatch, tuple[int, int]] = \
            weakref.WeakKeyDictionary()
        self.limiter = DispatchRateLimiter()
        self.used_msgs = 0
        self.used_bytes = 0

    def add(self, member: TopicDispatch) -> None:
        self.members[member] = member.counters()

    def discard(self, member: TopicDispatch) -> None:
        self.dispatched()
        self.members.pop(member, None)

    def dispatched(self) -> tuple[int, int]:
        """Messages and bytes the members dispatched while members, so far."""
        for member, (m0, b0) in list(self.members.items()):
            m, b = member.counters()
            self.used_msgs += max(0, m - m0)
            self.used_bytes += max(0, b - b0)
            self.members[member] = (m, b)
        return self.used_msgs, self.used_bytes

    def allowance(self, now: float) -> tuple[int, float]:
        msgs, nbytes = self.dispatched()
        return self.limiter.allowance(self.rate, msgs, nbytes, now)


class DispatchRateLimiter:
    """What one subscription dispatched in the current period (module docstring)."""

    def __init__(self) -> None:
        self._period_end = 0.0
        self._msgs_at_start = 0
        self._bytes_at_start = 0
        #: rounds held back by the rate (stats' dispatchThrottledMsgEventsBySubscriptionLimit)
        self.throttled_events = 0

    def allowance(self, rate: DispatchRate, msgs_out: int, bytes_out: int,
                  now: float) -> tuple[int, float]:
        """(messages that may go now, seconds until the period ends); ``-1`` messages when
        *rate* sets no message limit but its byte limit is not reached."""
        if now >= self._period_end:
            self._period_end = now + max(1, rate.period_s)
            self._msgs_at_start = msgs_out
            self._bytes_at_start = bytes_out
        wait = self._period_end - now
        if rate.bytes > 0 and bytes_out - self._bytes_at_start >= rate.bytes:
            self.throttled_events += 1
            return 0, wait
        if rate.msgs <= 0:
            return -1, wait
        left = rate.msgs - (msgs_out - self._msgs_at_start)
        if left <= 0:
            self.throttled_events += 1
            return 0, wait
        return left, wait
