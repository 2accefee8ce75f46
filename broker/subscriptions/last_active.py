"""A durable subscription's last activity: Pulsar's ManagedCursor ``lastActive``.

Theory of operation
-------------------
Pulsar's subscription updates its cursor's lastActive when a consumer is added or removed and
on every acknowledgement (``PersistentSubscription.addConsumer`` / ``removeConsumer`` /
``acknowledgeMessage``), and the cursor persists it with its mark-delete position, so
subscription expiration (``checkInactiveSubscriptions``: ``now - lastActive > expiration``)
counts from the last activity even across a broker crash. Horae keeps it as a cursor property
(:data:`LAST_ACTIVE_PROPERTY`, epoch milliseconds) set at the same moments and on a position
reset. Setting it only changes the cursor's in-memory state: it is written with the cursor's
next save, the rate-limited background save an acknowledgement already causes (no save of its
own per ack), and a kill -9 keeps the value of the last save. A non-durable subscription's
in-memory cursor has nothing to keep. The internal stats leave the property out (Pulsar keeps
lastActive outside the cursor's properties).
"""

from __future__ import annotations

import time

from storage.cursor import ManagedCursor

__all__ = ["LAST_ACTIVE_PROPERTY", "last_active_s", "mark_active"]

#: the cursor property holding the subscription's last activity (epoch ms)
LAST_ACTIVE_PROPERTY = "#horae.internal.subscription.lastActive"


def mark_active(cursor: object) -> None:
    """The subscription of *cursor* is active now (kept with the cursor's next save)."""
    if isinstance(cursor, ManagedCursor):
        cursor.set_property(LAST_ACTIVE_PROPERTY, str(int(time.time() * 1000)))


def last_active_s(cursor: object) -> float | None:
    """The last activity *cursor* keeps (epoch seconds), if it keeps one."""
    properties = getattr(cursor, "properties", None)
    value = properties.get(LAST_ACTIVE_PROPERTY) if isinstance(properties, dict) else None
    try:
        return int(value) / 1000.0 if value is not None else None
    except ValueError:
        return None
