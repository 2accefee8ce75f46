"""The dispatch loop shared by every subscription type.

Theory of operation
-------------------
A dispatcher moves entries from the subscription's cursor to its consumers within their FLOW
permits. It never runs two reads at once: :meth:`Dispatcher.schedule` (called on FLOW, new
entries, acks, redelivery, consumer changes and the delayed tracker's ``on_due``) asks for a
round on the next loop turn; that turn starts one task that loops over :meth:`_dispatch_once`
until a round makes no progress. The one-message-in-flight case needs no task: when the round
would read one new entry, still in the entry cache, with nothing else to do (no replay, nothing
due, no key hashes, dispatch rate or transaction), :func:`_lone_round` makes it in the loop
callback itself, with the same checks in the same order, and starts the task only if another
round is due. New entries (:func:`round_now`) make that round at once when none is under way.

One round:

1. due delayed positions (:meth:`DelayedDelivery.due <broker.delayed.delivery.DelayedDelivery.due>`)
   join the *replay* set; while that set is empty (nothing waits for a redelivery) and the
   dispatcher routes without key hashes, up to one read's worth of them is read and sent
   straight away instead (the common case of a stream of due messages: no sorted-set insert
   and removal per message); what no consumer takes then, or what the read left over, joins
   the replay set, and a reset during that read drops them as it drops the replay set;
2. replay positions (redeliveries, handed-back messages, due delayed messages) are read and sent
   first, in position order, with their original message id and redelivery count;
3. then up to ``MAX_READ_ENTRIES`` (bounded by the permits) new entries are read from
   ``cursor.read_position`` and the read position advances past them.

Cursor revisions (PIP-269, :mod:`broker.subscriptions.revision`): no round starts while a reset
runs (``revisions.under_revision``); every read and replay read remembers the revision it was
started under and its result is discarded when it completes under a newer one (or while a reset
runs); every queued frame carries that revision and :meth:`flush_consumers`, just before
writing, drops the frames whose revision became outdated and hands their positions back (one
check per consumer and flush: frames queue in revision order). A reset calls :meth:`Dispatcher.reset` (everything derived is
dropped: replay set, queued frames, pending lists and unacked counts, owners, Key_Shared
ownership) or, for the forward resets that keep the consumers (skip, skip by ids),
:meth:`Dispatcher.on_skipped` (queued frames are dropped and go back to the replay set, the
skipped positions are forgotten everywhere; pending messages the reset did not skip stay with
their consumer -- dropping them would lose them).
Acknowledged entries are skipped (``cursor.is_deleted``). Shared and Key_Shared dispatchers are
given the subscription's delayed delivery when they are created (``delayed``); they drive it and
are the ones its tracker wakes. A fresh entry whose ``deliver_at_time`` it holds back waits in
the tracker (those of one read due after the tracker's cutoff are handed to it in one call
when the read has been gone through); replays are never re-tracked. New delayed messages whose
deliver times were learnt at publish are held without being read
(:mod:`broker.subscriptions.dispatchers.known_holds`). An entry the topic's replace-by-key schedule says
was superseded (``delayed.replacements``) is acknowledged unseen, read fresh or fallen due.
Subclasses decide who gets an entry (:meth:`_route`) and how many entries a round may read
(:meth:`_budget`); an entry nobody can take now waits in the replay set.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from itertools import islice
from operator import itemgetter
from operator import sub as _difference
from typing import Protocol

from sortedcontainers import SortedSet

from broker.delayed.delivery import DelayedDelivery
from broker.subscriptions.ack_state_pause import must_pause
from broker.subscriptions.consumer import Consumer
from broker.subscriptions.dispatch_rate import DispatchRate, DispatchRateLimiter, TopicDispatch
from broker.subscriptions.dispatchers.cursors import SubscriptionCursor
from broker.subscriptions.dispatchers.known_holds import hold_known
from broker.subscriptions.dispatchers.read_ahead import ReadAhead
from broker.subscriptions.revision import RevisionSource
from broker.transactions.dispatch_view import HIDE, DispatchView
from protocol.errors import ProtocolError
from protocol.metadata import EntryInfo, parse_entry, sticky_key_hash
from protocol.send_accel import peek_dispatch
from protocol.sub_types import SubType
from storage import appends_in_flight
from storage.ledger import ManagedLedger
from storage.positions import Entry, Position

__all__ = ["MAX_READ_ENTRIES", "DispatchContext", "Dispatcher", "round_after_ack", "round_now"]

_entry_position = itemgetter(0)   # an Entry's position (its first field)
_ledger_id = itemgetter(0)        # a Position's fields
_entry_id = itemgetter(1)


def _no_neighbours(positions: list[Position]) -> bool:
    """True when ``positions`` are of one ledger, in order, and no two follow each other (a
    delayed index's scattered due positions): each is a read of its own. Computed with C-level
    calls, not a Python step per position."""
    if len(set(map(_ledger_id, positions))) != 1:
        return False
    ids = list(map(_entry_id, positions))
    steps: list[int] = list(map(_difference, islice(ids, 1, None), ids))
    return min(steps) > 1

log = logging.getLogger("horae.subscriptions.dispatchers")

MAX_READ_ENTRIES = 100  # Pulsar's dispatcherMaxReadBatchSize
MAX_REPLAY_READ = 500
MAX_REPLAY_SCAN = 20_000  # positions examined per round without reading them (Key_Shared)
#: Longest run of back-to-back rounds before the dispatcher yields to the event loop (s): with
#: about 20 us of work per message and up to MAX_READ_ENTRIES per round, a round or two. A
#: delayed message falling due while a slice runs waits for its timer until the slice ends.
DISPATCH_SLICE_S = 0.001
#: A yield whose loop turn took longer than this found other work: other connections' frames
#: (publishes, FLOW, ACK) or the storage threads' completions.
BUSY_TURN_S = 0.0001
#: Then, every second time, the dispatcher also pauses this long before its next slice (others
#: get a third of the loop's time at least): an idle loop waits in the poller, which lets the
#: storage writer threads (a publish's write) take the interpreter instead of waiting out its
#: switch interval behind back-to-back slices.
DISPATCH_PAUSE_S = 0.001
#: While the store holds appends (a publish on any topic waits for its write and fdatasync),
#: a slice's end waits instead for them to come back, this long at most: the storage threads
#: take the interpreter at once (storage/appends_in_flight.py, where the bound is measured).
APPENDS_WAIT_S = appends_in_flight.WAIT_S
#: A dispatcher that has been behind its work for more than this many slices in a row (each
#: slice's last round read as much as a round reads: a herd falling due, a backlog) writes
#: every consumer's queued frames at least every this many slices; between them a consumer's
#: few frames wait for the next slice (:meth:`Consumer.holds_queued`): fewer, larger writes,
#: each of which wakes a client. Otherwise they are written at every slice's end: a stream of
#: messages falling due a few each millisecond, kept busy by other work (an ACK's slices) or
#: catching up after a long loop turn, would otherwise hold each millisecond's frames for
#: several slices, every one of them late by that.
HOLD_SLICES = 4


class DispatchContext(Protocol):
    """What a dispatcher may ask of the subscription that owns it (implemented by
    :class:`broker.subscriptions.subscription.Subscription`): its cursor and ledger, the
    redelivery and batch-ack books, and its out counters."""

    name: str
    partition_index: int
    read_compacted: bool
    msg_out_counter: int
    bytes_out_counter: int
    redelivery_counts: dict[Position, int]
    batch_acks: dict[Position, int]
    #: maxUnackedMessagesPerSubscription of a Shared/Key_Shared subscription (0: no limit)
    max_unacked_messages: int
    #: subscriptionDispatchRate: dispatch waits for the next period past it
    dispatch_rate: DispatchRate
    #: new reads paused by dispatcherPauseOnAckStatePersistent at the last look (the metric)
    paused_on_ack_state: bool

    @property
    def topic_dispatch(self) -> TopicDispatch:
        """The topic's ``dispatchRate``, shared by its subscriptions."""
        ...

    @property
    def cursor(self) -> SubscriptionCursor: ...

    @property
    def ledger(self) -> ManagedLedger: ...

    @property
    def revisions(self) -> RevisionSource:
        """The cursor's revision controller (PIP-269)."""
        ...

    def compacted_out(self, pos: Position) -> bool:
        """A read_compacted subscription skips *pos*: compaction superseded it."""
        ...

    def touch(self) -> None:
        """The out counters moved: the topic's rate meters need sampling again."""
        ...

    def transaction_view(self) -> DispatchView | None:
        """Transactions' say this round: the max read position, entries to acknowledge
        unseen (markers, aborted messages) or hold (acknowledged in an open transaction)."""
        ...


class Dispatcher:
    """Base dispatcher: replay set, pending-ack index, read loop."""

    sub_type: SubType | None = None  # set by each concrete dispatcher
    needs_hash = False

    def __init__(self, sub: DispatchContext, delayed: DelayedDelivery | None = None) -> None:
        self.sub = sub
        #: The subscription's delayed delivery, driven here (Shared/Key_Shared); None = this
        #: dispatcher delivers every entry as it is read.
        self.delayed = delayed
        #: reads the first due entries ahead of a deliver time after a quiet spell
        self.read_ahead: ReadAhead | None = None
        if delayed is not None:
            self.read_ahead = ReadAhead(delayed, self._read_positions,
                                        lambda: bool(self.consumers) and not self._closed,
                                        MAX_READ_ENTRIES)
            delayed.wake_with(self._on_due, self.read_ahead.wake)
        self.consumers: list[Consumer] = []
        self.replay: SortedSet = SortedSet()
        self.replay_hash: dict[Position, int] = {}
        self.hashes_in_replay: Counter[int] = Counter()
        self.owner: dict[Position, Consumer] = {}
        self._avg_messages_per_entry = 1.0  # sizes reads so batches do not overshoot permits
        #: the round under way: its task, or the loop callback that starts it (None: idle)
        self._task: asyncio.Task[None] | asyncio.Handle | None = None
        self._again = False
        self._closed = False
        #: Due positions taken from the tracker and being read outside the replay set (round
        #: step 1); a reset empties it, as it empties the replay set.
        self._due_in_flight: list[Position] = []
        #: maxUnackedMessagesPerSubscription reached (stats' blockedSubscriptionOnUnackedMsgs)
        self.blocked_on_unacked = False
        #: the last round read as much as a round reads (more is waiting): frames may be held
        self._behind = False
        self.rate_limiter = DispatchRateLimiter()
        self._rate_wake: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ consumers

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self.schedule()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        self.hand_back(consumer, None, count_redelivery=False)
        self.schedule()

    def after_subscribe(self, consumer: Consumer) -> None:
        """Hook run after SUCCESS was written (Failover notifies the active consumer)."""

    # ------------------------------------------------------------------ pending / replay

    def add_replay(self, position: Position, sticky_hash: int | None = None) -> None:
        if position in self.replay:
            return
        self.replay.add(position)
        if sticky_hash is not None and self.needs_hash:
            self.replay_hash[position] = sticky_hash
            self.hashes_in_replay[sticky_hash] += 1

    def discard_replay(self, position: Position) -> None:
        if position in self.replay:
            self.replay.discard(position)
            h = self.replay_hash.pop(position, None)
            if h is not None:
                n = self.hashes_in_replay[h] - 1
                if n > 0:
                    self.hashes_in_replay[h] = n
                else:
                    del self.hashes_in_replay[h]

    def _released(self, consumer: Consumer, position: Position, sticky_hash: int) -> None:
        """Hook: a pending message left ``consumer`` (acked or handed back)."""

    def hand_back(
        self, consumer: Consumer, positions: list[Position] | None, *, count_redelivery: bool
    ) -> int:
        """Move pending messages of ``consumer`` (all when ``positions`` is None) to the replay set.
        Frames queued for it and not written yet are dropped first when all of them go back
        (they would reach the client as well as their redelivery), written first otherwise
        (the client names only what it received) unless a reset outdated them (then
        :meth:`flush_consumers` drops them and hands them back)."""
        oldest = consumer.oldest_queued_revision
        if oldest is not None:
            if positions is None:
                consumer.drop_queued()
            elif not self.sub.revisions.is_outdated(oldest):
                consumer.flush()
        targets = list(consumer.pending) if positions is None else positions
        counts = self.sub.redelivery_counts
        moved = 0
        for pos in targets:
            item = consumer.take_pending(pos)
            if item is None:
                continue
            if self.owner.get(pos) is consumer:
                del self.owner[pos]
            self._released(consumer, pos, item[1])
            if count_redelivery:
                counts[pos] = counts.get(pos, 0) + 1
            if not self.sub.cursor.is_deleted(pos):
                self.add_replay(pos, item[1])
            moved += 1
        if moved:
            self.schedule()
        return moved

    def on_acked(self, positions: list[Position]) -> None:
        """Acknowledged positions: forget them everywhere. Done per owner for the whole list
        (an ACK's ids are usually all pending on the consumer that sent it)."""
        owner_pop = self.owner.pop
        if len(positions) == 1:   # an ACK of one id (sync acknowledgements): no grouping
            pos = positions[0]
            consumer = owner_pop(pos, None)
            if consumer is not None:
                item = consumer.take_pending(pos)
                if item is not None:
                    self._released(consumer, pos, item[1])
            if self.replay:
                self.discard_replay(pos)
            counts = self.sub.redelivery_counts
            if counts:
                counts.pop(pos, None)
            if self._due_in_flight and pos in self._due_in_flight:
                self._due_in_flight.remove(pos)
            return
        owners = [owner_pop(pos, None) for pos in positions]
        released = self._released if type(self)._released is not Dispatcher._released else None
        first = owners[0] if owners else None
        if first is not None and owners.count(first) == len(owners):
            groups: dict[Consumer, list[Position]] = {first: positions}
        else:
            groups = {}
            for pos, consumer in zip(positions, owners, strict=True):
                if consumer is not None:
                    mine = groups.get(consumer)
                    if mine is None:
                        groups[consumer] = [pos]
                    else:
                        mine.append(pos)
        for consumer, mine in groups.items():
            items = consumer.take_pending_many(mine)
            if released is not None:
                for pos, item in zip(mine, items, strict=True):
                    if item is not None:
                        released(consumer, pos, item[1])
        if self.replay:
            for pos in positions:
                self.discard_replay(pos)
        counts = self.sub.redelivery_counts
        if counts:
            for pos in positions:
                counts.pop(pos, None)
        if self._due_in_flight:   # acknowledged while being read as due: not sent, not kept
            gone = set(positions)
            self._due_in_flight[:] = [p for p in self._due_in_flight if p not in gone]

    def reset(self) -> None:
        """Forget every derived position -- queued frames, pending, owners, replay -- (a cursor
        reset that moves the read position is under way)."""
        for consumer in self.consumers:
            consumer.drop_queued()
            for pos in list(consumer.pending):
                item = consumer.take_pending(pos)
                if item is not None:
                    self._released(consumer, pos, item[1])
        self.owner.clear()
        self._due_in_flight = []
        self.replay.clear()
        self.replay_hash.clear()
        self.hashes_in_replay.clear()

    def on_skipped(self, positions: list[Position]) -> None:
        """A forward reset keeping the consumers acknowledged ``positions``: frames queued but
        not written go back to the replay set (their permits back), then the skipped positions
        are forgotten everywhere."""
        for consumer in self.consumers:
            dropped = consumer.drop_queued()
            if dropped:
                self.hand_back(consumer, dropped, count_redelivery=False)
        self.on_acked(positions)

    # ------------------------------------------------------------------ scheduling

    def _on_due(self) -> None:
        """The delayed tracker has positions due: a round takes them, started from the
        tracker's timer itself (a loop callback of its own), not a loop turn later."""
        if self.consumers:
            round_now(self)

    def schedule(self) -> None:
        if self._closed:
            return
        if self._task is not None:
            self._again = True
            return
        # the round starts on the next loop turn, as a task's first step would: a lone new
        # entry (one message in flight) is sent then without a task (:func:`_start_round`)
        self._task = asyncio.get_running_loop().call_soon(_start_round, self)

    async def _run(self) -> None:
        clock = time.perf_counter
        try:
            slice_end = clock() + DISPATCH_SLICE_S
            busy_yields = slices = behind_for = 0
            in_flight = self.sub.ledger.appends_in_flight
            while not self._closed:
                self._again = False
                progressed = await self._dispatch_once()
                if not self._again and (not progressed or _drained(self)):
                    break
                if clock() < slice_end:
                    # a consumer's many queued frames go out now: they count against its
                    # connection's high water mark only once written, and until then the
                    # next round would see the consumer writable however much it holds
                    self.flush_consumers(hold=True)
                else:
                    # let other connections' frames (publishes, FLOW, ACK) in: a herd of due
                    # messages or a long backlog holds the loop for one slice at most, and
                    # while others have work, for two thirds of the time at most. In a
                    # backlog that lasts, a consumer's few queued frames wait for the next
                    # slice (fewer writes, each of which wakes its client), every frame at
                    # least every HOLD_SLICES; otherwise they go now.
                    slices += 1
                    behind_for = behind_for + 1 if self._behind else 0
                    self.flush_consumers(hold=behind_for > HOLD_SLICES
                                         and slices % HOLD_SLICES != 0)
                    turn = clock()
                    await asyncio.sleep(0)
                    if in_flight.batches:
                        # a publish waiting for the storage threads gets the interpreter
                        # now, not after the switch interval (storage/appends_in_flight.py)
                        await in_flight.handed_back(APPENDS_WAIT_S)
                    elif clock() - turn > BUSY_TURN_S:
                        busy_yields += 1
                        if not busy_yields % 2:
                            await asyncio.sleep(DISPATCH_PAUSE_S)
                    slice_end = clock() + DISPATCH_SLICE_S
        except Exception:  # a failed read must not kill dispatching for good
            log.exception("dispatch failed on %s", self.sub.name)
            asyncio.get_running_loop().call_later(0.1, self.schedule)
        finally:
            self._task = None
            self.flush_consumers()

    async def close(self) -> None:
        self._closed = True
        if self._rate_wake is not None:
            self._rate_wake.cancel()
            self._rate_wake = None
        task = self._task
        if isinstance(task, asyncio.Handle):   # a round not started yet: it never will
            task.cancel()
            self._task = None
        elif task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.read_ahead is not None:
            await self.read_ahead.close()

    # ------------------------------------------------------------------ policy hooks

    def _budget(self) -> int:
        """How many messages may be sent this round (0 = do not read)."""
        if self._blocked_on_unacked_messages():
            return 0
        consumers = self.consumers
        if len(consumers) == 1:   # one consumer: its permits, no generator
            only = consumers[0]
            return only.permits if only.available else 0
        return sum(c.permits for c in consumers if c.available)

    def _rate_limited(self, budget: int) -> int:
        """*budget* cut to what ``subscriptionDispatchRate`` and the topic's ``dispatchRate``
        still allow in this period; at 0
        a round is scheduled for the period's end (:mod:`broker.subscriptions.dispatch_rate`)."""
        rate = self.sub.dispatch_rate
        topic_dispatch = self.sub.topic_dispatch
        if budget <= 0 or not (rate.limited or topic_dispatch.limited):
            return budget
        loop = asyncio.get_running_loop()
        now = loop.time()
        allowed, wait_s = -1, 0.0
        if rate.limited:
            allowed, wait_s = self.rate_limiter.allowance(
                rate.plus_published(topic_dispatch.published), self.sub.msg_out_counter,
                self.sub.bytes_out_counter, now)
        if allowed != 0:
            topic_allowed, topic_wait_s = topic_dispatch.allowance(now)
            if topic_allowed == 0 or (topic_allowed > 0 and
                                      (allowed < 0 or topic_allowed < allowed)):
                allowed, wait_s = topic_allowed, topic_wait_s
        if allowed == 0:
            if self._rate_wake is None:
                self._rate_wake = loop.call_later(wait_s, self._rate_period_ended)
            return 0
        return budget if allowed < 0 else min(budget, allowed)

    def _rate_period_ended(self) -> None:
        self._rate_wake = None
        self.schedule()

    def _blocked_on_unacked_messages(self) -> bool:
        """Shared/Key_Shared: once the consumers hold ``maxUnackedMessagesPerSubscription``
        unacknowledged messages nothing more is read until they fall to half of it, as
        Pulsar's dispatcher does (acks schedule a round, which looks again)."""
        limit = self.sub.max_unacked_messages
        if limit <= 0 or self.sub_type is None or not self.sub_type.shares_messages:
            self.blocked_on_unacked = False
            return False
        consumers = self.consumers
        unacked = consumers[0].unacked_messages if len(consumers) == 1 else \
            sum(c.unacked_messages for c in consumers)
        self.blocked_on_unacked = (unacked > limit // 2 if self.blocked_on_unacked
                                   else unacked >= limit)
        return self.blocked_on_unacked

    def _may_read_new(self) -> bool:
        """False while the delayed tracker asks to pause (fixed-delay detection, a full
        late-entry index), or while the cursor's acknowledgement state could not be persisted
        whole under dispatcherPauseOnAckStatePersistent (:mod:`ack_state_pause`)."""
        delayed = self.delayed
        if delayed is not None and delayed.paused():
            return False
        paused = must_pause(self.sub.cursor, self.sub.topic_dispatch.ack_state_ranges_limit)
        self.sub.paused_on_ack_state = paused   # the metric's figure
        return not paused

    def _route(self, position: Position, info: EntryInfo | None, sticky_hash: int,
               from_replay: bool, blocked: set[int]) -> Consumer | None:
        raise NotImplementedError

    # ------------------------------------------------------------------ the round

    async def _dispatch_once(self) -> bool:
        sub = self.sub
        revisions = sub.revisions
        if not self.consumers or revisions.under_revision:
            return False  # the reset schedules a round when it ends
        budget = self._rate_limited(self._budget())
        if budget <= 0:
            return False
        cursor = sub.cursor
        ledger = sub.ledger
        revision = revisions.revision
        progressed = False
        self._behind = False
        blocked: set[int] = set()
        delayed = self.delayed
        if delayed is not None:
            take = min(budget, MAX_READ_ENTRIES)
            if self.needs_hash:
                # Key_Shared takes more than a read's worth, so that blocked keys do not hide
                # others, but no more than the replay scan looks at: a herd stays in the
                # compact index instead of moving into the replay set whole.
                room = MAX_REPLAY_SCAN - len(self.replay)
                wanted = min(max(budget, MAX_READ_ENTRIES), room)
                got = delayed.due(wanted) if wanted > 0 else []
                self._behind = len(got) >= wanted   # the take filled (or the replay full)
                for pos in got:
                    self.add_replay(pos)
            elif self.replay:
                # Only what this round's replay read can take leaves the tracker: a herd
                # stays in the compact index instead of growing the replay set by the
                # permits every round.
                wanted = take - len(self.replay)
                got = delayed.due(wanted) if wanted > 0 else []
                self._behind = len(got) >= wanted   # the take filled (or the replay full)
                for pos in got:
                    self.add_replay(pos)
            else:
                # The trackers hand out in (due time, position) order across all their
                # sources, each batch sorted by position. Only one read's worth leaves the
                # tracker, so the next round takes the rest on this path too, never through
                # the replay set.
                direct = sorted(delayed.due(take))
                self._behind = len(direct) == take
                if direct:
                    if await self._send_due(direct, revision):
                        return True
                    progressed = True
                    budget = self._rate_limited(self._budget())
        if self.replay and budget > 0:
            if self.needs_hash:
                positions = self._replay_candidates(blocked)
            else:
                positions = list(islice(self.replay, min(budget, MAX_READ_ENTRIES)))
            before = len(self.replay)
            self._behind = self._behind or before > len(positions)
            entries, missing = await self._read_positions(positions)
            if revisions.is_outdated(revision) or self._closed:
                return True  # a reset ran meanwhile: this replay read is stale
            for pos in missing:
                self.discard_replay(pos)  # trimmed or dropped: nothing to redeliver
            sent = self._deliver(entries, from_replay=True, blocked=blocked, revision=revision,
                                 txn=sub.transaction_view())
            if sent or len(self.replay) < before:
                progressed = True
            budget = self._rate_limited(self._budget())
        # Replays go strictly first, except on Key_Shared where blocked keys may wait while
        # other keys move on (their order is kept per key by the hash rules).
        if budget > 0 and (not self.replay or self.needs_hash) and self._may_read_new():
            last = ledger.last_confirmed
            txn = sub.transaction_view()
            if txn is not None:
                last = txn.read_limit(last)   # an open transaction holds later entries back
            read_from = cursor.read_position
            held_unread = False
            if delayed is not None and last is not None and read_from <= last:
                read_from = self._skip_held(delayed, read_from, last)
                # delayed messages whose deliver times were learnt at publish: held unread
                held_unread = (txn is None and not sub.read_compacted and read_from <= last
                               and hold_known(delayed, cursor, ledger, read_from, last,
                                              self.add_replay))
                progressed = progressed or held_unread
            if not held_unread and last is not None and read_from <= last:
                # One new entry (one message in flight at a time) still in the entry cache:
                # taken without an await, so nothing became durable or changed meanwhile.
                hit = ledger.cached_entry(read_from) if read_from == last else None
                if hit is not None:
                    entries = [hit]
                else:
                    wanted = min(max(1, int(budget / self._avg_messages_per_entry)),
                                 MAX_READ_ENTRIES)
                    entries = await ledger.read_entries(read_from, wanted)
                    self._behind = self._behind or len(entries) == wanted
                    if revisions.is_outdated(revision) or self._closed:
                        return True  # a reset ran meanwhile: this read is stale
                    # The read returns what became durable while it ran too, and transactions
                    # classified those entries before: ask again now, and cap the read.
                    txn = sub.transaction_view()
                if txn is not None and entries:
                    limit = txn.read_limit(ledger.last_confirmed)
                    if limit is None or entries[-1].position > limit:
                        entries = [e for e in entries if limit is not None and e.position <= limit]
                if entries:
                    if cursor.read_position == read_from:
                        cursor.read_position = ledger.next_position(entries[-1].position)
                    progressed = True
                    self._deliver(entries, from_replay=False, blocked=blocked,
                                  revision=revision, txn=txn)
        return progressed   # the frames queued are written by _run (flush_consumers)

    async def _send_due(self, due: list[Position], revision: int) -> bool:
        """Read and send positions that just fell due, outside the replay set (round step 1).
        Returns True when a reset ran during the read (the round is over)."""
        self._due_in_flight = due
        asked = len(due)
        entries, missing = await self._read_positions(due)
        if self._due_in_flight is not due:  # a reset dropped them, with the replay set
            return True
        self._due_in_flight = []
        outdated = self.sub.revisions.is_outdated(revision) or self._closed
        if not outdated and len(entries) == asked == len(due):
            # the usual read: every position read, none acknowledged meanwhile (an ack
            # during the read takes its position out of ``due``)
            self._deliver(entries, from_replay=True, blocked=set(), revision=revision,
                          txn=self.sub.transaction_view(), direct=True)
            return False
        if outdated:  # a forward reset (skip) ran: what it did not acknowledge waits
            entries = []
        still = set(due)   # less what was acknowledged (or skipped) during the read
        entries = [e for e in entries if e.position in still]
        read = {e.position for e in entries}
        gone = set(missing)
        is_deleted = self.sub.cursor.is_deleted
        for pos in due:  # what the read left for later waits in the replay set
            if pos not in read and pos not in gone and not is_deleted(pos):
                self.add_replay(pos)
        if outdated:
            return True
        self._deliver(entries, from_replay=True, blocked=set(), revision=revision,
                      txn=self.sub.transaction_view(), direct=True)
        return False

    def flush_consumers(self, hold: bool = False) -> None:
        """Write every consumer's queued frames (``hold``: not those a consumer may keep for
        the next slice, :meth:`Consumer.holds_queued`). The last guard before the socket (a
        reset normally dropped them already): frames made under a revision that is now
        outdated are dropped and handed back (pending, owner, Key_Shared ownership and the
        replay set updated), never written."""
        revisions = self.sub.revisions
        for consumer in self.consumers:
            oldest = consumer.oldest_queued_revision
            if oldest is None:
                continue
            if revisions.is_outdated(oldest):
                dropped = consumer.drop_queued(revisions.is_outdated)
                self.hand_back(consumer, dropped, count_redelivery=False)
            if not (hold and consumer.holds_queued()):
                consumer.flush()

    def _skip_held(self, delayed: DelayedDelivery, read_from: Position,
                   last: Position) -> Position:
        """Move the read position over runs the tracker already holds instead of reading them:
        after a restart the bucket tracker's sealed ranges (up to whole ledgers) would
        otherwise be read and parsed entry by entry only to be answered "tracked"."""
        ledger = self.sub.ledger
        pos = read_from
        for _ in range(64):     # bounded work per round; the next round goes on
            end = delayed.skip_held(pos)
            if end == pos.entry_id:
                break
            pos = ledger.next_position(Position(pos.ledger_id, end - 1))
            if pos > last:
                break
        if pos != read_from:
            self.sub.cursor.read_position = pos
        return pos

    def _replay_candidates(self, blocked: set[int]) -> list[Position]:
        """Replay positions worth reading now (Key_Shared): positions whose key hash is known
        to be blocked are skipped without a read, so keys of a slow consumer at the head of the
        replay set cannot hide the entries other consumers could take."""
        out: list[Position] = []
        replay_hash = self.replay_hash
        for scanned, pos in enumerate(self.replay):
            if len(out) >= MAX_REPLAY_READ or scanned >= MAX_REPLAY_SCAN:
                break
            h = replay_hash.get(pos)
            if h is not None:
                if h in blocked:
                    continue
                if not self._hash_routable(h):
                    blocked.add(h)
                    continue
            out.append(pos)
        return out

    def _hash_routable(self, sticky_hash: int) -> bool:
        return True

    async def _read_positions(
        self, positions: list[Position]
    ) -> tuple[list[Entry], list[Position]]:
        """Read scattered positions (in position order, as every caller passes them), one store
        read per run of consecutive entries.

        Returns the entries and the positions known not to exist any more. A run cut short by
        the read's byte limit leaves its tail neither read nor missing: it stays for next time.
        """
        ledger = self.sub.ledger
        out: list[Entry] = []
        missing: list[Position] = []
        i = 0
        n = len(positions)
        if n > 1:
            first, last = positions[0], positions[-1]
            if first.ledger_id == last.ledger_id and last.entry_id - first.entry_id == n - 1 \
                    and len(set(positions)) == n:
                # one run (a herd falling due, a replay of consecutive entries): one read
                # without looking at the positions one by one
                got = await ledger.read_entries(first, n)
                k = len(got)
                while k and got[k - 1].position > last:   # past a missing entry: next ledger
                    k -= 1
                if k != len(got):
                    got = got[:k]
                if k == n:
                    return got, missing
                if got:
                    found = {e.position for e in got}
                    end = got[-1].position
                    return got, [p for p in positions if p < end and p not in found]
                if await ledger.read_entry(first) is None:
                    missing.append(first)  # the next round retries the rest of the run
                return out, missing
        singles: list[Position] = []
        if n > 1 and _no_neighbours(positions):
            singles, i = positions, n   # scattered due positions: no run to look for
        while i < n:
            start = positions[i]
            j = i + 1
            while (
                j < n
                and positions[j].ledger_id == start.ledger_id
                and positions[j].entry_id == start.entry_id + (j - i)
            ):
                j += 1
            if j - i == 1:
                singles.append(start)   # read together below: one read-thread job
            else:
                run = positions[i:j]
                in_run = set(run)
                got = [e for e in await ledger.read_entries(start, j - i) if e.position in in_run]
                if got:
                    out.extend(got)
                    found = {e.position for e in got}
                    last = got[-1].position
                    missing.extend(p for p in run if p < last and p not in found)
                elif await ledger.read_entry(start) is None:
                    missing.append(start)  # the next round retries the rest of the run
            i = j
        if singles:
            # due positions are scattered (a delayed index's order is not the log's): the
            # entries not cached come from disk in one job, not one job (and wake-up) each
            got, gone = await ledger.read_positions(singles)
            missing.extend(gone)
            if out:
                out.extend(got)
                out.sort(key=_entry_position)
            else:
                out = got
        return out, missing

    def _deliver(self, entries: list[Entry], *, from_replay: bool, blocked: set[int],
                 revision: int, txn: DispatchView | None = None,
                 direct: bool = False) -> int:
        """Route and queue entries; returns the number of entries sent. ``direct``: replays
        that are not in the replay set (due positions read straight away); one no consumer
        can take joins it."""
        sub = self.sub
        cursor = sub.cursor
        is_deleted = cursor.is_deleted
        # Acknowledged entries are skipped: one question for the whole list when none of it is
        # (the usual case, a herd falling due or new entries read), one per entry otherwise.
        # Entries come in position order (every caller's: reads and sorted position lists) and
        # nothing below acknowledges an entry ahead of the one at hand, so the answer holds
        # for the whole loop.
        check_acked = bool(entries) and (
            entries[0].position <= cursor.mark_delete_position
            or cursor.individually_deleted.any_between(entries[0].position,
                                                       entries[-1].position))
        counts = sub.redelivery_counts
        batch_acks = sub.batch_acks
        read_compacted = sub.read_compacted  # once per round, not per entry
        delayed = None if from_replay else self.delayed
        replacements = self.delayed.replacements if self.delayed is not None else None
        superseded = replacements.superseded if replacements is not None else None
        needs_hash = self.needs_hash
        replay = self.replay
        check_replay = from_replay and not direct   # entries of the replay set
        route = self._route
        owner = self.owner
        # the Key_Shared bookkeeping hook; a no-op for the others (not called per entry)
        sent_hook = self._sent if type(self)._sent is not Dispatcher._sent else None
        avg = self._avg_messages_per_entry
        # Fresh entries due after the tracker's cutoff (looked up at the first delayed one) are
        # held together, in one tracker call at the end.
        hold_after: int | None = None
        looked_up = False
        held: list[Position] = []
        held_at: list[int] = []
        sent = msg_out = bytes_out = 0
        try:  # the counters stay exact even if an entry fails to encode
            for entry in entries:
                pos = entry.position
                if check_replay and pos not in replay:
                    continue  # acked or reset while we were reading
                if check_acked and is_deleted(pos):
                    if from_replay:
                        self.discard_replay(pos)
                    continue
                if superseded is not None and superseded(pos):
                    cursor.delete((pos,))  # replaced or cancelled by key: acknowledged unseen
                    if from_replay:
                        self.discard_replay(pos)
                    continue
                if txn is not None:
                    verdict = txn.verdict(pos)
                    if verdict:
                        if verdict == HIDE:
                            cursor.delete((pos,))  # a marker or an aborted message: acked unseen
                        if from_replay:
                            self.discard_replay(pos)
                        continue
                if read_compacted and sub.compacted_out(pos):
                    cursor.delete((pos,))  # superseded by compaction: acknowledged unseen
                    if from_replay:
                        self.discard_replay(pos)
                    continue
                data = entry.data
                # Only a key-routing dispatcher needs the EntryInfo; the others read two fields.
                info: EntryInfo | None = None
                try:
                    if needs_hash:
                        info = parse_entry(data)
                        messages, deliver_at = info.messages, info.deliver_at_time
                    else:
                        messages, deliver_at = peek_dispatch(data)
                except ProtocolError:
                    info, messages, deliver_at = None, 1, None
                if delayed is not None and deliver_at is not None:
                    if not looked_up:
                        hold_after, looked_up = delayed.hold_after_ms(), True
                    if hold_after is not None and deliver_at > hold_after:
                        held.append(pos)
                        held_at.append(deliver_at)
                        continue
                    if delayed.hold(pos, deliver_at):
                        continue
                ack_set = batch_acks.get(pos) if batch_acks else None
                if ack_set is not None and not ack_set & ((1 << messages) - 1):
                    cursor.delete((pos,))   # every message acknowledged by batch index
                    del batch_acks[pos]
                    if from_replay:
                        self.discard_replay(pos)
                    continue
                if txn is not None:
                    ack_set = txn.ack_set(pos, ack_set, messages)
                    if ack_set == 0:   # every message left is pending in a transaction: held
                        if from_replay:
                            self.discard_replay(pos)
                        continue
                sticky_hash = sticky_key_hash(info.sticky_key) if info is not None else 0
                consumer = route(pos, info, sticky_hash, from_replay, blocked)
                if consumer is None:
                    if not from_replay or direct:
                        self.add_replay(pos, sticky_hash)
                    elif needs_hash and pos not in self.replay_hash:
                        self.discard_replay(pos)
                        self.add_replay(pos, sticky_hash)
                    continue
                if check_replay:
                    self.discard_replay(pos)
                avg = 0.9 * avg + 0.1 * messages
                consumer.send(
                    pos,
                    data,
                    messages=messages,
                    sticky_hash=sticky_hash,
                    redelivery_count=counts.get(pos, 0) if counts else 0,
                    ack_set=_to_longs(ack_set, messages) if ack_set is not None else None,
                    revision=revision,
                )
                owner[pos] = consumer
                if sent_hook is not None:
                    sent_hook(consumer, sticky_hash)
                msg_out += messages
                bytes_out += len(data)
                sent += 1
        finally:
            self._avg_messages_per_entry = avg
            if held and delayed is not None:
                for i in delayed.hold_run(held, held_at):
                    self.add_replay(held[i])    # fell due meanwhile: delivered as a due one
            if sent:
                sub.msg_out_counter += msg_out
                sub.bytes_out_counter += bytes_out
                sub.touch()
        return sent

    def _sent(self, consumer: Consumer, sticky_hash: int) -> None:
        """Hook: a message with ``sticky_hash`` went to ``consumer``."""


def _drained(dispatcher: Dispatcher) -> bool:
    """Would another round of ``dispatcher`` find nothing to do? Nothing waits for a replay or
    a due read, the read position is past the last entry and no tracked message is due: then
    the round after one that made progress is spared (it would make none). Whatever brings
    work later -- new entries, acks, FLOW, a due time, a reset -- schedules a round."""
    if dispatcher.replay or dispatcher._due_in_flight:
        return False
    sub = dispatcher.sub
    last = sub.ledger.last_confirmed
    if last is not None and sub.cursor.read_position <= last:
        return False
    tracker = dispatcher.delayed.tracker if dispatcher.delayed is not None else None
    return tracker is None or not tracker.has_message_available()


def round_now(dispatcher: Dispatcher) -> None:
    """:meth:`Dispatcher.schedule`, except that when no round is under way or asked for the
    round is made at once, not on the next loop turn: for a caller that is a loop callback
    of its own and in the middle of nothing else (the store's hand-back of a group commit:
    new entries became durable), so that a lone new entry reaches its consumer without
    another loop turn, in the same held write as its receipt."""
    if dispatcher._task is None and not dispatcher._closed:
        _start_round(dispatcher)
    else:
        dispatcher.schedule()


def _start_round(dispatcher: Dispatcher) -> None:
    """The round :meth:`Dispatcher.schedule` asked for: :func:`_lone_round` when it can make
    it whole, else the dispatch task (which makes every kind of round)."""
    dispatcher._task = None
    if dispatcher._closed:
        return
    try:
        if _lone_round(dispatcher):
            return
    except Exception:   # as in the task: logged, and a round tries again later
        log.exception("dispatch failed on %s", dispatcher.sub.name)
        asyncio.get_running_loop().call_later(0.1, dispatcher.schedule)
        return
    if dispatcher._task is not None:   # a round was asked for meanwhile: it goes on from there
        dispatcher._again = True
        return
    dispatcher._task = asyncio.get_running_loop().create_task(dispatcher._run())


def _lone_round(d: Dispatcher) -> bool:
    """The round of the one-message-in-flight case, made without a task: at most one new
    entry, taken from the entry cache, and nothing else to do (no replay or due position, no
    key hashes, no dispatch rate, no transaction). It makes exactly what
    :meth:`Dispatcher._dispatch_once` would make of that state, checks in the same order,
    then looks whether another round could do anything, as :meth:`Dispatcher._run` does.
    Returns True when the round is over; False when the task must run one: nothing was
    read or sent then, or this round was made and another is due (a later entry, a schedule
    meanwhile)."""
    sub = d.sub
    if d.needs_hash or d.replay or d._due_in_flight or not d.consumers:
        return False
    if sub.revisions.under_revision:
        return False
    delayed = d.delayed
    tracker = delayed.tracker if delayed is not None else None
    if tracker is not None and tracker.has_message_available():
        return False   # due positions: the task's round step 1
    if sub.dispatch_rate.limited or sub.topic_dispatch.limited:
        return False
    if d._budget() <= 0 or not d._may_read_new():
        return True    # the task's round would read nothing either
    if sub.transaction_view() is not None:
        return False   # the task's round asks transactions where reading must stop
    ledger = sub.ledger
    last = ledger.last_confirmed
    if last is None:
        return True
    cursor = sub.cursor
    read_from = cursor.read_position
    if read_from > last:
        return True
    if delayed is not None and tracker is not None:   # no tracker: nothing held to skip
        read_from = d._skip_held(delayed, read_from, last)
        if read_from > last:
            return True
    if read_from != last:
        return False   # more than one entry: the task reads them
    hit = ledger.cached_entry(read_from)
    if hit is None:
        return False
    d._again = False
    cursor.read_position = ledger.next_position(last)
    consumer = _send_lone(d, hit, sub.revisions.revision)
    if consumer is None:
        d.flush_consumers()
        return not d._again and _drained(d)
    consumer.flush()   # made now, under the current revision: nothing to drop
    # _drained: the replay set and the due positions were left empty, the read position is
    # past the last entry; only the tracker may have something due by now
    tracker = delayed.tracker if delayed is not None else None
    return not d._again and (tracker is None or not tracker.has_message_available())


def _send_lone(d: Dispatcher, entry: Entry, revision: int) -> Consumer | None:
    """What :meth:`Dispatcher._deliver` does with one fresh entry, for the plain case: not
    acknowledged, superseded or compacted out, no batch index acknowledged, no delivery time,
    no per-consumer bookkeeping of the dispatcher (Key_Shared). Anything else goes through
    ``_deliver`` itself (then None is returned, as when no consumer takes the entry and it
    waits in the replay set). Returns the consumer it was queued for."""
    sub = d.sub
    pos, data = entry.position, entry.data
    delayed = d.delayed
    replacements = delayed.replacements if delayed is not None else None
    if sub.batch_acks or sub.read_compacted or sub.cursor.is_deleted(pos) \
            or (replacements is not None and replacements.superseded(pos)) \
            or type(d)._sent is not Dispatcher._sent:
        d._deliver([entry], from_replay=False, blocked=set(), revision=revision)
        return None
    try:
        messages, deliver_at = peek_dispatch(data)
    except ProtocolError:
        messages, deliver_at = 1, None
    if deliver_at is not None and delayed is not None:
        d._deliver([entry], from_replay=False, blocked=set(), revision=revision)
        return None
    consumer = d._route(pos, None, 0, False, set())
    if consumer is None:
        d.add_replay(pos, 0)
        return None
    d._avg_messages_per_entry = 0.9 * d._avg_messages_per_entry + 0.1 * messages
    counts = sub.redelivery_counts
    consumer.send(pos, data, messages=messages,
                  redelivery_count=counts.get(pos, 0) if counts else 0, revision=revision)
    d.owner[pos] = consumer
    sub.msg_out_counter += messages
    sub.bytes_out_counter += len(data)
    sub.touch()
    return consumer


def round_after_ack(dispatcher: Dispatcher) -> bool:
    """Could a round scheduled by an ACK do anything? Not when the dispatcher is
    :func:`_drained` (nothing to replay, read or fall due), routes without key hashes (an ACK
    may unblock a Key_Shared hash) and shows no blocked or paused state a round would look at
    again (the subscription blocked on unacknowledged messages, new reads paused on the ack
    state): then the round would read nothing and change no figure. A round under way is
    told to go again as before."""
    if dispatcher._task is not None or dispatcher.needs_hash or dispatcher.blocked_on_unacked:
        return True
    if dispatcher.sub.paused_on_ack_state:
        return True
    return not _drained(dispatcher)


def _to_longs(bits: int, size: int) -> list[int]:
    """A Python int bitmask as Java's BitSet.toLongArray (signed int64 words)."""
    words = []
    for i in range(max(1, (size + 63) // 64)):
        w = (bits >> (64 * i)) & 0xFFFFFFFFFFFFFFFF
        words.append(w - (1 << 64) if w >= 1 << 63 else w)
    return words
