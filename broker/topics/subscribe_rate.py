"""Topic subscribe rate: Pulsar's ``SubscribeRate`` caps the SUBSCRIBEs of one consumer.

Theory of operation
-------------------
One :class:`SubscribeRateLimiter` per topic (persistent or not). Its :class:`SubscribeRate`
(``subscribeThrottlingRatePerConsumer`` SUBSCRIBEs per ``ratePeriodInSecond``; ``<= 0`` is no
limit) is resolved from the topic's ``subscribeRate`` policy, else the namespace's, else
``subscribeThrottlingRatePerConsumer`` / ``subscribeRatePeriodPerConsumerInSecond`` (0, 30),
and set at each SUBSCRIBE before :meth:`SubscribeRateLimiter.admit` is asked. A consumer is
named as Pulsar's ``ConsumerIdentifier`` does: the client's address, the consumer name and its
id. One past the rate in its period is refused with NotAllowed "Subscribe limited by subscribe
rate limit per consumer.", as Pulsar answers. The table is bounded (:data:`MAX_TRACKED`):
expired periods are dropped first, then the oldest.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.errors import NotAllowedError

__all__ = ["NO_SUBSCRIBE_RATE", "SubscribeRate", "SubscribeRateLimiter"]

#: Most consumers whose current period one topic remembers.
MAX_TRACKED = 10_000

REFUSED = "Subscribe limited by subscribe rate limit per consumer."


@dataclass(frozen=True, slots=True)
class SubscribeRate:
    """Pulsar's SubscribeRate body."""

    per_consumer: int = -1   # subscribeThrottlingRatePerConsumer
    period_s: int = 30       # ratePeriodInSecond

    @property
    def limited(self) -> bool:
        return self.per_consumer > 0


NO_SUBSCRIBE_RATE = SubscribeRate()


class SubscribeRateLimiter:
    """SUBSCRIBEs per consumer in its current period (module docstring)."""

    def __init__(self) -> None:
        self.rate = NO_SUBSCRIBE_RATE
        self._periods: dict[tuple[str, str, int], tuple[float, int]] = {}

    def admit(self, consumer: tuple[str, str, int], now: float) -> None:
        """Count one SUBSCRIBE of *consumer* (address, name, id); NotAllowed past the rate."""
        rate = self.rate
        if not rate.limited:
            if self._periods:
                self._periods.clear()
            return
        periods = self._periods
        end, count = periods.get(consumer, (0.0, 0))
        if now >= end:
            end, count = now + max(1, rate.period_s), 0
        if count >= rate.per_consumer:
            raise NotAllowedError(REFUSED)
        periods.pop(consumer, None)
        if len(periods) >= MAX_TRACKED:
            for key in [k for k, (e, _) in periods.items() if e <= now]:
                del periods[key]
            while len(periods) >= MAX_TRACKED:
                del periods[next(iter(periods))]
        periods[consumer] = (end, count + 1)
