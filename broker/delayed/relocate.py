"""Copy-forward of long-delayed messages: ledgers held only by pending delayed entries are trimmed.

A pending delayed message holds its subscription's mark-delete position back, and with it every
ledger from the one holding it on, whatever share of those ledgers is acknowledged. The
:class:`DelayedRelocator` (one per persistent topic, ticked by the topic's housekeeping) finds
the leading sealed ledgers that are held **only** by pending delayed entries: for every durable
subscription, each entry of the ledger is acknowledged or tracked (pending, not handed out) by
that subscription's delayed tracker. For such a ledger whose pending bytes are under
:data:`MAX_PENDING_SHARE` of it, it copies those entries (original bytes, original positions)
into the managed ledger's side segments (storage/relocation.py: copy durable, then index
durable), then asks the topic's trimmer for a trim, which deletes the ledger's segment and keeps
a ghost of it in the ledger list (cursors unchanged); reads of the ghost's positions
(dispatcher, peek, get-message-by-id, the tracker's rebuild after a restart) are served from the
copies with the original ids.

What is never worked around: an entry unacknowledged and not tracked by some subscription (a
slow ordinary consumer, a message handed out and not yet acknowledged, an entry not yet read
into the tracker) stops the walk; so does a non-durable reader that has not passed the ledger,
and retention (the trimmer's bound). Each pending byte is written at most twice (the ledger,
one copy): copies are never copied again.

Copies every subscription has acknowledged are released at each run (a side segment with no
live entry left is deleted): per relocated ledger, its live entry ids are intersected with each
cursor's acknowledgements (mark-delete position and individual-ack bitmap), bitmap operations
whose Python cost is one step per (relocated ledger, subscription), not one per copy.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from pyroaring import BitMap

from broker.delayed.tracker import DelayedDeliveryTracker
from protocol.errors import ProtocolError
from protocol.send_accel import peek_dispatch
from storage.individually_deleted import IndividuallyDeleted
from storage.ledger import ManagedLedger
from storage.positions import Position

log = logging.getLogger("horae.delayed.relocate")

__all__ = ["MAX_ENTRIES_PER_RUN", "MAX_PENDING_SHARE", "RELOCATE_INTERVAL_S", "DelayedRelocator",
           "TrackedPending", "Walk", "relocate_held"]

#: A ledger is copied forward while its pending bytes are below this share of it (above it, the
#: ledger already keeps little else: kept/pending <= 1 / 0.9 ~ 1.11).
MAX_PENDING_SHARE = 0.9
#: At most this many ledgers copied per run (a run's reads and writes stay short).
MAX_LEDGERS_PER_RUN = 4
#: Seconds between runs for one topic.
RELOCATE_INTERVAL_S = 30.0
READ_CHUNK = 1_000
#: Entries a run looks at, at most (a few bitmap operations per ledger on the event loop, one
#: Python step per entry where a cursor or tracker cannot answer in bulk): a run over a large
#: backlog (100M pending) resumes where the previous one stopped instead.
MAX_ENTRIES_PER_RUN = 1_000_000


@dataclass
class Walk:
    """Where the next run of :func:`relocate_held` starts: after ledger ``resume_after`` (None:
    at the first ledger), and how many entries a run may look at."""

    resume_after: int | None = None
    max_entries: int = MAX_ENTRIES_PER_RUN


class Holder(Protocol):
    """What the walk asks of a subscription's cursor."""

    @property
    def mark_delete_position(self) -> Position: ...

    def is_deleted(self, pos: Position) -> bool: ...


PendingAt = Callable[[Position], bool]
"""pending(pos): is the entry tracked (pending, not handed out) by the subscription?"""


class TrackedPending:
    """A subscription's tracker as the walk asks it: a :data:`PendingAt` that can also name a
    ledger's pending entries at once (:meth:`DelayedDeliveryTracker.pending_entry_ids`)."""

    __slots__ = ("_tracker",)

    def __init__(self, tracker: DelayedDeliveryTracker) -> None:
        self._tracker = tracker

    def __call__(self, pos: Position) -> bool:
        return self._tracker.contains(pos)

    def entry_ids(self, ledger_id: int, entries: int) -> BitMap | None:
        return self._tracker.pending_entry_ids(ledger_id, entries)


async def relocate_held(
    ledger: ManagedLedger, holders: list[tuple[Holder, PendingAt]], *,
    up_to_ledger_id: int | None = None, readers: Iterable[Position] = (),
    max_ledgers: int = MAX_LEDGERS_PER_RUN, max_share: float = MAX_PENDING_SHARE,
    min_delay_ms: int = 0, now_ms: int | None = None, near_due: set[int] | None = None,
    walk: Walk | None = None,
) -> list[int]:
    """Copy forward the pending entries of the sealed ledgers held only by them; the ledger
    ids copied (now trimmable). *holders*: one (cursor, pending) per durable subscription;
    *readers*: non-durable readers' positions (a ledger they have not passed is left alone);
    *up_to_ledger_id*: what retention keeps (None: nothing). A ledger whose pending share is
    *max_share* or more is passed over (it keeps little else); the walk stops at the first
    ledger an entry of which is held by something else than a pending delayed message. A
    ledger none of whose pending entries is due *min_delay_ms* or more after *now_ms* (default:
    the wall clock) is passed over too: it frees itself soon. Such a ledger never becomes worth
    copying (due times stay, holds only go): its id is added to *near_due*, and ledgers already
    there are passed over without a look. With *walk*, the run starts after the ledger where
    the previous one stopped for its entry budget, looks at no more entries than that budget
    (the ledgers after wait for the next run) and lets the event loop run between ledgers; a
    run that reaches the end of the walk (or its stop) sends the next one back to the first
    ledger."""
    if not holders or ledger.trim_blockers or ledger.closed:
        return []
    slowest_reader = min(readers, default=None)
    done: list[int] = []
    relocated = ledger.relocated
    resume_after = walk.resume_after if walk is not None else None
    if walk is not None:
        walk.resume_after = None       # unless this run stops for its budget
    looked_at = 0
    for info in ledger.ledgers[:-1]:  # the last one is the current ledger
        lid = info.ledger_id
        if resume_after is not None and lid <= resume_after:
            continue      # looked at by the previous run
        last = Position(lid, info.entries - 1)
        if not info.sealed:
            break
        if up_to_ledger_id is not None and lid > up_to_ledger_id:
            break
        if slowest_reader is not None and slowest_reader < last:
            break
        if all(h.mark_delete_position >= last for h, _ in holders):
            continue  # consumed: the trimmer's own
        if relocated.is_relocated(lid) or (near_due is not None and lid in near_due):
            continue
        if walk is not None:
            if looked_at and looked_at + info.entries > walk.max_entries:
                walk.resume_after = lid - 1    # the next run starts at this ledger
                break
            looked_at += info.entries
            if looked_at > info.entries:
                await asyncio.sleep(0)   # the loop runs between ledgers
                if ledger.closed:
                    break
        held = _held_entries(lid, info.entries, holders)
        if held is None:
            break  # something else holds it (an entry is in a subscription's backlog)
        if info.entries and len(held) >= max_share * info.entries:
            continue  # dense: copying would free little
        records = await _read_records(ledger, lid, list(held))
        if records is None:
            break
        pending_bytes = sum(len(d) for _, _, d in records)
        if info.entries and pending_bytes >= max_share * info.size_bytes:
            continue
        if min_delay_ms > 0 and records:
            now = int(time.time() * 1000) if now_ms is None else now_ms
            if max(due for _, due, _ in records) < now + min_delay_ms:
                if near_due is not None:
                    near_due.add(lid)
                continue  # all due soon: the ledger frees itself, a copy would be wasted
        # The acks that let the other entries go are made durable first (a restart must not
        # find one of them unacknowledged with its bytes gone); then the holds are checked
        # again (an entry handed out meanwhile has left its tracker: the walk stops).
        await ledger.flush_cursors()
        if _held_entries(lid, info.entries, holders) is None:
            break  # (entries acknowledged meanwhile were copied anyway: released later)
        await relocated.relocate(lid, info.entries, info.created_ms, records)
        done.append(lid)
        log.info("managed ledger %s: %d pending delayed entries of ledger %d copied forward "
                 "(%d of %d bytes)", ledger.name, len(records), lid, pending_bytes,
                 info.size_bytes)
        if len(done) >= max_ledgers:
            break
    return done


def _held_entries(lid: int, entries: int,
                  holders: list[tuple[Holder, PendingAt]]) -> BitMap | None:
    """The entry ids of *lid* some subscription still holds (no I/O), or None when
    one is held by a subscription that does not track it as a pending delayed message.

    A subscription holds what its cursor has not acknowledged; each one's part is found with
    bitmaps when its cursor and its tracker can tell theirs at once (a broker's always can: a
    ledger of 50,000 entries position by position held the loop ~50 ms), else position by
    position."""
    held = BitMap()
    for cursor, pending in holders:
        unacked = _unacknowledged(lid, entries, cursor)
        tracked = pending.entry_ids(lid, entries) if isinstance(pending, TrackedPending) \
            else None
        if unacked is None or tracked is None:
            ids = _held_one_by_one(lid, entries, cursor, pending)
            if ids is None:
                return None
            held.update(ids)
        elif unacked <= tracked:
            held |= unacked
        else:
            return None
    return held


def _unacknowledged(lid: int, entries: int, cursor: Holder) -> BitMap | None:
    """The entry ids below *entries* of *lid* that :meth:`Holder.is_deleted` says no to, or
    None when the cursor has no acknowledgement bitmaps to tell them at once."""
    deleted = getattr(cursor, "individually_deleted", None)
    if not isinstance(deleted, IndividuallyDeleted):
        return None
    md = cursor.mark_delete_position
    ids = BitMap()
    if md.ledger_id > lid:
        return ids
    first = md.entry_id + 1 if md.ledger_id == lid else 0
    if first < entries:
        ids.add_range(max(first, 0), entries)
        acked = deleted.bitmaps.get(lid)
        if acked:
            ids -= acked
    return ids


def _held_one_by_one(lid: int, entries: int, cursor: Holder,
                     pending: PendingAt) -> list[int] | None:
    held: list[int] = []
    for entry_id in range(entries):
        pos = Position(lid, entry_id)
        if cursor.is_deleted(pos):
            continue
        if not pending(pos):
            return None
        held.append(entry_id)
    return held


async def _read_records(ledger: ManagedLedger, lid: int,
                        held: list[int]) -> list[tuple[int, int, bytes]] | None:
    """(entry_id, deliver_at, data) of the held entries; None if one is missing or is not a
    delayed message after all."""
    out: list[tuple[int, int, bytes]] = []
    want = set(held)
    i = 0
    while i < len(held):
        got = await ledger.read_entries(Position(lid, held[i]), READ_CHUNK)
        got = [e for e in got if e.position.ledger_id == lid]
        if not got:
            break
        for entry in got:
            if entry.position.entry_id not in want:
                continue
            try:
                due = peek_dispatch(entry.data)[1]
            except ProtocolError:
                due = None
            if due is None:
                return None
            out.append((entry.position.entry_id, due, entry.data))
        last = got[-1].position.entry_id
        while i < len(held) and held[i] <= last:
            i += 1
    return out if len(out) == len(held) else None


class Acker(Protocol):
    """What the release asks of a subscription's cursor."""

    @property
    def mark_delete_position(self) -> Position: ...

    @property
    def individually_deleted(self) -> IndividuallyDeleted: ...


async def release_acknowledged(ledger: ManagedLedger, holders: Iterable[Acker]) -> int:
    """Drop the copies every subscription has acknowledged; the count dropped."""
    live_ids = ledger.relocated.live_ids()
    if not any(live_ids.values()):
        return 0
    cursors = [(c.mark_delete_position, c.individually_deleted.copies()) for c in holders]
    done: list[Position] = []
    for lid, live in live_ids.items():
        if not live:
            continue
        gone = BitMap(live)
        for md, acked in cursors:
            if md.ledger_id > lid or (md.ledger_id == lid and md.entry_id >= live.max()):
                continue  # everything of lid acknowledged by this cursor
            mine = acked.get(lid)
            if md.ledger_id == lid and md.entry_id >= 0:
                upto = BitMap(range(md.entry_id + 1))
                mine = upto if mine is None else mine | upto
            if mine is None:
                gone = BitMap()
                break
            gone &= mine
            if not gone:
                break
        done.extend(Position(lid, e) for e in gone)
    return await ledger.relocated.release(done) if done else 0


class RelocatedSubscription(Protocol):
    @property
    def durable(self) -> bool: ...

    @property
    def cursor(self) -> object: ...

    @property
    def delayed_tracker(self) -> DelayedDeliveryTracker | None: ...


class RelocatedTopic(Protocol):
    """What the relocator needs of its topic."""

    @property
    def ledger(self) -> ManagedLedger: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def serving(self) -> bool: ...

    @property
    def full(self) -> str: ...


class DelayedRelocator:
    """One topic's copy-forward runs (see the module docstring)."""

    def __init__(self, topic: RelocatedTopic,
                 subscriptions: Callable[[], Iterable[RelocatedSubscription]],
                 retention_bound: Callable[[], int | None],
                 trim_now: Callable[[], Awaitable[None]], *, enabled: bool = True,
                 min_delay_ms: int = 0, interval_s: float = RELOCATE_INTERVAL_S) -> None:
        self._topic = topic
        #: False: nothing is copied (copies made earlier are still released when acknowledged).
        self.enabled = enabled
        self._min_delay_ms = min_delay_ms
        self._interval_s = interval_s
        #: Ledgers passed over as due soon (never worth a copy later); pruned to the ledger list.
        self._near_due: set[int] = set()
        #: Where the next run's walk starts and its entry budget.
        self._walk = Walk()
        self._subscriptions = subscriptions
        self._bound = retention_bound
        self._trim_now = trim_now
        self._last = topic.loop.time()
        self.task: asyncio.Task[None] | None = None
        self.ledgers_relocated = 0

    def tick(self, now: float) -> None:
        """Once a second (the topic's housekeeping): a run every *interval_s*."""
        if self.task is not None or now - self._last < self._interval_s:
            return
        self._last = now
        if (next(iter(self._subscriptions()), None) is None
                and not any(self._topic.ledger.relocated.live_ids().values())):
            return   # no copy to release, no subscription to hold one: a run would do nothing
        self.task = self._topic.loop.create_task(self.run())

    async def run(self) -> None:
        topic = self._topic
        try:
            if not topic.serving:
                return
            holders: list[tuple[Holder, PendingAt]] = []
            ackers: list[Acker] = []
            readers: list[Position] = []
            for sub in self._subscriptions():
                cursor = sub.cursor
                if not sub.durable:
                    readers.append(cursor.mark_delete_position)  # type: ignore[attr-defined]
                    continue
                tracker = sub.delayed_tracker
                holders.append((cursor, _pending_in(tracker)))  # type: ignore[arg-type]
                ackers.append(cursor)  # type: ignore[arg-type]
            ledger = topic.ledger
            await release_acknowledged(ledger, ackers)
            if not self.enabled:
                return
            self._near_due.intersection_update(info.ledger_id for info in ledger.ledgers)
            done = await relocate_held(ledger, holders, up_to_ledger_id=self._bound(),
                                       readers=readers, min_delay_ms=self._min_delay_ms,
                                       near_due=self._near_due, walk=self._walk)
            if done:
                self.ledgers_relocated += len(done)
                await self._trim_now()
        except Exception:
            log.exception("copying delayed entries forward on %s failed", topic.full)
        finally:
            self.task = None

    async def close(self) -> None:
        if self.task is not None:
            await asyncio.wait([self.task])


def _pending_in(tracker: DelayedDeliveryTracker | None) -> PendingAt:
    if tracker is None:
        return lambda pos: False
    return TrackedPending(tracker)
