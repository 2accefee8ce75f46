"""Consumer limits of a subscription: ``maxConsumersPerTopic`` and ``maxConsumersPerSubscription``.

Theory of operation
-------------------
A subscription checks :class:`ConsumerLimits` in the same event-loop step in which it appends
the consumer (``Subscription.add_consumer``, ``NonPersistentSubscription.add_consumer``), after
every await of the subscribe (topic load, subscription creation, a cursor revision or a
dispatcher switch it waited for). A check made before such an await would let a burst of
SUBSCRIBEs that all waited together pass it together. Counts are those of the topic
(``consumer_count`` of the subscription's owner) and of the subscription, read at that moment.

Errors and texts are Pulsar's: ConsumerBusy "Topic reached max consumers limit", then
"Subscription reached max consumers limit". 0 means no limit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from protocol.errors import ConsumerBusyError

__all__ = ["NO_CONSUMER_LIMITS", "ConsumerLimits"]


@dataclass(frozen=True, slots=True)
class ConsumerLimits:
    """Most consumers on one topic and on one subscription (0 = no limit)."""

    per_topic: int = 0
    per_subscription: int = 0

    def check(self, on_topic: Callable[[], int], on_subscription: int) -> None:
        """Raise ConsumerBusyError when one more consumer would pass a limit (*on_topic* is
        asked only when the topic has a limit)."""
        if self.per_topic > 0 and self.per_topic <= on_topic():
            raise ConsumerBusyError("Topic reached max consumers limit")
        if 0 < self.per_subscription <= on_subscription:
            raise ConsumerBusyError("Subscription reached max consumers limit")


NO_CONSUMER_LIMITS = ConsumerLimits()
