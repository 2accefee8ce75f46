"""Message expiry on a subscription: Pulsar's ``expireMessages`` and message TTL.

Theory of operation
-------------------
Expiring acknowledges, on the subscription's cursor, every unacknowledged entry published
before a cut-off (or up to a message id), as Pulsar's ``PersistentMessageExpiryMonitor``
moves the cursor: the entries stay in the ledger for other subscriptions, this one no longer
has them in its backlog. The first entry at or after the cut-off is found by a binary search
over publish times (:meth:`SubscriptionResets.first_published_at_or_after`); the entries
before it that are not already acknowledged are acknowledged through the subscription's
reset controller, so a delayed-delivery tracker forgets them and no read in flight delivers
them (PIP-269 revisions).

Counters for the subscription's stats (``totalMsgExpired``, ``lastExpireTimestamp``,
``msgRateExpired``) live on the subscription (:class:`ExpiryCounters`). Called by the admin API
(``expireMessages``) and by the topic's TTL housekeeping (:mod:`broker.topics.retention`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from broker.subscriptions.dispatchers.cursors import SubscriptionCursor
from broker.subscriptions.resets import CursorResets
from storage.ledger import ManagedLedger
from storage.positions import Position

__all__ = ["ExpiringSubscription", "ExpiryCounters", "expire_before", "expire_up_to"]

RATE_WINDOW_S = 60.0


@dataclass(slots=True)
class ExpiryCounters:
    """What a subscription's stats report about expiry."""

    total_expired: int = 0
    last_expire_ms: int = 0
    _recent: list[tuple[float, int]] = field(default_factory=list)

    def record(self, entries: int) -> None:
        now = time.monotonic()
        self.total_expired += entries
        self.last_expire_ms = int(time.time() * 1000)
        self._recent = [(t, n) for t, n in self._recent if now - t < RATE_WINDOW_S]
        self._recent.append((now, entries))

    def rate(self) -> float:
        """Entries expired per second over the last minute."""
        now = time.monotonic()
        return sum(n for t, n in self._recent if now - t < RATE_WINDOW_S) / RATE_WINDOW_S


class ExpiringSubscription(Protocol):
    """What expiry uses of a subscription (:class:`broker.subscriptions.subscription.Subscription`)."""

    @property
    def cursor(self) -> SubscriptionCursor: ...

    @property
    def ledger(self) -> ManagedLedger: ...

    @property
    def resets(self) -> CursorResets: ...

    @property
    def expiry(self) -> ExpiryCounters: ...


async def expire_before(sub: ExpiringSubscription, cutoff_ms: int) -> int:
    """Acknowledge every entry published before *cutoff_ms*; returns how many were not yet."""
    end = await sub.resets.first_published_at_or_after(cutoff_ms)
    return await _expire(sub, end, inclusive=False)


async def expire_up_to(sub: ExpiringSubscription, last: Position) -> int:
    """Acknowledge every entry up to and including *last*."""
    return await _expire(sub, last, inclusive=True)


async def _expire(sub: ExpiringSubscription, bound: Position, *, inclusive: bool) -> int:
    cursor = sub.cursor
    ledger = sub.ledger
    tail = ledger.last_confirmed
    if tail is None:
        return 0
    positions: list[Position] = []
    pos = cursor.mark_delete_position
    while pos < tail:
        pos = ledger.next_position(pos)
        if pos > bound or (pos == bound and not inclusive):
            break
        if not cursor.is_deleted(pos):
            positions.append(pos)
    if positions:
        await sub.resets.acknowledge_positions(positions)
    sub.expiry.record(len(positions))
    return len(positions)
