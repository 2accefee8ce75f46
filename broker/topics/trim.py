"""Ledger trimming for one topic: when to ask storage to delete sealed ledgers, and when not to.

Theory of operation
-------------------
One :class:`LedgerTrimmer` per loaded topic (``Topic.trimmer``). The topic's housekeeping
(once a second, off the hot path) calls :meth:`LedgerTrimmer.tick`; sealed ledgers that every
cursor has passed are then deleted by ``ManagedLedger.trim`` (Pulsar without retention: with
no subscription that means every sealed ledger the dedup snapshot covers).

1. A trim is tried when its trigger changes -- the slowest subscription's mark-delete
   position moved, or a ledger rolled over (:meth:`trigger`) -- or every
   :data:`RETENTION_CHECK_INTERVAL_S` (Pulsar's retentionCheckIntervalInSeconds), and at most
   once per :data:`TRIM_MIN_INTERVAL_S`.
2. Never at load: :meth:`reset_trigger` records the trigger as it is when the topic loads,
   so only what happens from then on starts a trim (a restart must not drop what a
   subscriber created right after it would read).
3. Storage only knows durable cursors, so a trim is skipped (:meth:`safe`) while it would
   delete a ledger a reader (in-memory cursor) has not passed, and while a subscription is
   being created. Delayed-delivery trackers only hold positions above their cursor's
   mark-delete position, so they need no check.
4. Never while storage cannot trust a cursor (a cursor was recovered from its previous
   generation or from nothing after damage, until it is saved again): storage checks that
   itself, and ``ManagedLedger.trim()`` returns None when it refuses; the trimmer then marks
   the topic :attr:`suspended` (logged once) and leaves the trigger unconsumed, so the trim is
   retried at the next tick and runs once the cursor is good again.
5. One trim at a time, as a task (:attr:`task`); it checks :meth:`safe` again right before
   calling ``trim()``, which decides synchronously, before its first await. The topic's close
   waits for it (:meth:`close`).

Called by :class:`broker.topics.topic.Topic` only; it reads the topic's ledger and subscriptions
through :class:`TrimmedTopic`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Iterable
from typing import Protocol

from broker.subscriptions.subscription import Subscription
from storage.ledger import ManagedLedger
from storage.ledger_state import LedgerInfo
from storage.positions import Position


class TrimmedSubscriptions(Protocol):
    """The topic's subscriptions (:class:`broker.topics.topic_subscriptions.TopicSubscriptions`)."""

    def values(self) -> Iterable[Subscription]: ...

    @property
    def creating_subscription(self) -> bool:
        """A subscription is being created (its cursor may not be known to storage yet)."""
        ...


class TrimmedTopic(Protocol):
    """What the trimmer reads of its topic (:class:`broker.topics.topic.Topic`)."""

    full: str

    @property
    def serving(self) -> bool:
        """Neither fenced nor closed."""
        ...

    @property
    def ledger(self) -> ManagedLedger: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def subscriptions(self) -> TrimmedSubscriptions: ...

    def retention(self) -> tuple[int, int]:
        """(retentionTimeInMinutes, retentionSizeInMB) in force; -1 is unlimited."""
        ...

    async def before_trim(self) -> None:
        """Record what the ledgers about to be deleted hold and must outlive them."""
        ...

__all__ = ["RETENTION_CHECK_INTERVAL_S", "TRIM_MIN_INTERVAL_S", "LedgerTrimmer",
           "retention_bound"]

log = logging.getLogger("horae.topic")

#: At most one trim per this many seconds per topic.
TRIM_MIN_INTERVAL_S = 1.0
#: A trim is also tried this often without a trigger (Pulsar's retentionCheckIntervalInSeconds).
RETENTION_CHECK_INTERVAL_S = 120.0


def retention_bound(infos: list[LedgerInfo], minutes: int, size_mb: int,
                    now_ms: int) -> int | None:
    """The highest ledger id retention lets a trim delete (None: no limit; -1: none).

    As Pulsar's ManagedLedger: oldest first, a consumed ledger may go when it is expired (it
    was closed -- the next one created -- more than *minutes* ago) or when what would remain
    is over *size_mb*; the first ledger that is neither stops the walk. -1 means unlimited.
    """
    if minutes == 0 and size_mb == 0:
        return None
    total = sum(i.size_bytes for i in infos)
    freed = 0
    bound = -1
    for info, successor in itertools.pairwise(infos):
        expired = minutes >= 0 and now_ms - successor.created_ms > minutes * 60_000
        over_size = size_mb >= 0 and total - freed > size_mb * 1024 * 1024
        if not (expired or over_size):
            break
        freed += info.size_bytes
        bound = info.ledger_id
    return bound


class LedgerTrimmer:
    """Decides when the topic's managed ledger is trimmed (see the module docstring)."""

    def __init__(self, topic: TrimmedTopic) -> None:
        self.topic = topic
        self.trimmed_ledgers = 0
        self.suspended = False  # rule 4: a cursor storage cannot trust blocks trimming
        self.task: asyncio.Task[None] | None = None  # the trim in progress
        self.marker: tuple[Position | None, int] = (None, 0)      # the trigger at the last decision
        self.last_trim = topic.loop.time()            # loop time of the last decision

    def reset_trigger(self) -> None:
        """At load: only changes from now on ask for a trim (rule 2)."""
        self.marker = self.trigger()

    def tick(self, now: float) -> None:
        """Once a second (the topic's housekeeping): start a trim if one is due and safe."""
        topic = self.topic
        if self.task is not None or topic.subscriptions.creating_subscription:
            return
        if now - self.last_trim < TRIM_MIN_INTERVAL_S:
            return
        marker = self.trigger()
        if marker == self.marker and not self.suspended \
                and now - self.last_trim < RETENTION_CHECK_INTERVAL_S:
            return
        self.marker = marker
        self.last_trim = now
        if topic.ledger.ledger_count < 2:
            return  # the current ledger is never deleted: nothing to decide
        if self.safe(self.bound()):
            self.task = topic.loop.create_task(self._trim())

    def trigger(self) -> tuple[Position | None, int]:
        """(slowest subscription mark-delete position, ledger count): a change asks for a trim."""
        topic = self.topic
        marks = [s.cursor.mark_delete_position for s in topic.subscriptions.values()]
        return (min(marks) if marks else None), topic.ledger.ledger_count

    def bound(self) -> int | None:
        """What retention keeps: see :func:`retention_bound`."""
        minutes, size_mb = self.topic.retention()
        if minutes == 0 and size_mb == 0:
            return None  # no retention: no need to list the ledgers
        return retention_bound(self.topic.ledger.ledgers, minutes, size_mb,
                               int(time.time() * 1000))

    def safe(self, up_to: int | None = None) -> bool:
        """True when ManagedLedger.trim(bound) would delete something and nothing it would
        delete is still needed by a reader (storage only sees durable cursors)."""
        topic = self.topic
        ledger = topic.ledger
        if topic.subscriptions.creating_subscription or ledger.closed:
            return False
        durable = [c.mark_delete_position for c in ledger.cursors.values()]
        bound = min(durable) if durable else None
        doomed: list[Position] = []  # last entry of each ledger trim() would delete
        infos = ledger.ledgers
        relocated = ledger.relocated
        for info in infos[:-1]:  # the last one is the current ledger: never deleted
            if not info.sealed:
                break
            last = Position(info.ledger_id, info.entries - 1)
            # Held: kept, unless its pending delayed entries were copied forward; then its
            # segment may go (once: then it is a ghost, broker/delayed/relocate.py).
            if bound is not None and bound < last and (
                    not relocated.is_relocated(info.ledger_id)
                    or info.ledger_id in relocated.ghosts):
                continue
            if up_to is not None and info.ledger_id > up_to:
                break
            doomed.append(last)
        if not doomed:
            return False
        readers = [s.cursor.mark_delete_position for s in topic.subscriptions.values()
                   if not s.durable]
        if readers and min(readers) < doomed[-1]:
            log.debug("trim of %s deferred: a reader has not passed the ledgers", topic.full)
            return False
        return True

    async def trim_now(self, *, keep_retained: bool = True) -> None:
        """Trim at once (the admin API's trim and truncate), after a trim in progress; with
        *keep_retained* False what retention keeps goes too (Pulsar's truncate)."""
        while self.task is not None:
            await asyncio.wait([self.task])
        self.task = self.topic.loop.create_task(self._trim(keep_retained=keep_retained))
        await asyncio.wait([self.task])

    async def _trim(self, *, keep_retained: bool = True) -> None:
        topic = self.topic
        try:
            await topic.before_trim()
            # Checked again right before: trim() decides synchronously, before its first await.
            up_to = self.bound() if keep_retained else None
            if topic.serving and self.safe(up_to):
                deleted = await topic.ledger.trim(up_to)
                if deleted is None:  # rule 4: retried at the next tick
                    if not self.suspended:
                        self.suspended = True
                        log.warning("trimming %s suspended: %s", topic.full,
                                    topic.ledger.trim_blockers)
                    return
                if self.suspended:
                    self.suspended = False
                    log.info("trimming %s resumed: cursor state is durable again", topic.full)
                self.trimmed_ledgers += len(deleted)
        except Exception:
            log.exception("trimming %s failed", topic.full)
        finally:
            self.task = None

    async def close(self) -> None:
        """Wait for a trim in progress (the topic is closing its ledger)."""
        if self.task is not None:
            await asyncio.wait([self.task])
