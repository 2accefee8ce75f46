"""Pulsar's ``dispatcherPauseOnAckStatePersistent``: dispatch of new entries pauses while the
cursor's acknowledgement state could not be persisted whole.

Theory of operation: Pulsar persists at most ``managedLedgerMaxUnackedRangesToPersist`` ranges
of individually acknowledged positions beyond the mark-delete position; past that, a restart
would redeliver acknowledged messages. With the policy on (topic over namespace over the
broker's ``dispatcherPauseOnAckStatePersistentEnabled``), its dispatchers stop reading new
entries while the cursor holds more ranges than that, and resume once acknowledgements bring
the count back (an acknowledgement schedules a dispatch round, which looks again).
Redeliveries still go out, as in Pulsar (only normal reads pause), so consumers can acknowledge
their way out. The topic's :class:`broker.subscriptions.dispatch_rate.TopicDispatch` carries
the limit in force (``ack_state_ranges_limit``, 0 = off), set at each SUBSCRIBE and policy
change; only durable cursors (storage's ``ManagedCursor``) are checked.

A range is a run of consecutive acknowledged entry ids within one ledger, as Pulsar's range
set counts them.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyroaring import BitMap

from storage.cursor import ManagedCursor

__all__ = ["acked_ranges", "must_pause"]


def acked_ranges(bitmaps: Mapping[int, BitMap]) -> int:
    """How many runs of consecutive acknowledged entry ids the per-ledger bitmaps hold."""
    return sum(len(b) - b.intersection_cardinality(b.shift(1)) for b in bitmaps.values() if b)


def must_pause(cursor: object, limit: int) -> bool:
    """Does a cursor holding more than *limit* acknowledged ranges pause new reads?"""
    if limit <= 0 or not isinstance(cursor, ManagedCursor):
        return False
    if len(cursor.individually_deleted) <= limit:
        return False   # fewer acknowledged entries than the limit: fewer ranges too
    return acked_ranges(cursor.individually_deleted.bitmaps) > limit
