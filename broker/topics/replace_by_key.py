"""A topic's side of replace-by-key: the policy switch, recording durable entries, the
rebuild after a load, pruning (see :mod:`broker.delayed.replace_by_key` for the rules).

Theory of operation
-------------------
:class:`TopicReplaceByKey` is owned by the topic. :meth:`~TopicReplaceByKey.sync` follows the
``delayedDeliveryReplaceByKey`` policy (the topic calls it on every appended run and every
housekeeping tick, so a change applies to the next message; the policy is resolved again only
when the policy records changed since, one comparison per run): switched on, a fresh
:class:`~broker.delayed.replace_by_key.KeyedSchedule` is handed to every subscription's
delayed delivery; switched off, it is taken back and messages flow as before.

While on, :meth:`~TopicReplaceByKey.sink_for` classifies a run's entries and, when any is
keyed, wraps the run's sink so that, as they become durable, they are queued for the schedule;
the ledger's listener for the group commit (the topic's, through :meth:`~TopicReplaceByKey.flush`)
records every queued run at once, consecutive runs of one ledger as one run
(:meth:`~TopicReplaceByKey.record_durable`), before any subscription hears of the new entries
and in the same loop callback as the producers' receipts, which leave only after it while the
server holds its writes for the group commit. Policy or not, the same wrapper notes
the deliver times learnt at publish (``known_times``, :mod:`broker.delayed.known_times`),
which every subscription's delayed delivery is handed (:meth:`~TopicReplaceByKey.adopt`). Each position the schedule supersedes
is acknowledged at once on every subscription that delays messages (Shared, Key_Shared, or a
durable one whose type is not known yet) and dropped from its tracker.

:meth:`~TopicReplaceByKey.rebuild` (topic load, policy on) reads the backlog from the oldest
position a subscription has not acknowledged to the last entry and records every keyed entry:
the same state the previous run had, recovered from the log itself; the topic awaits it before
any subscription dispatches. With a schedule snapshot (:mod:`broker.delayed.keyed_snapshot`,
written now and then at housekeeping) it restores that and reads only the log after what the
snapshot covers. :meth:`~TopicReplaceByKey.prune` (housekeeping) forgets what
every subscription has acknowledged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Final, Protocol

from pyroaring import BitMap

from broker.delayed.delivery import DelayedDelivery
from broker.delayed.keyed_snapshot import KeyedSnapshots
from broker.delayed.known_times import CheckedTimes, KnownDeliverTimes, deliver_times
from broker.delayed.replace_by_key import EntryKeys, KeyedSchedule, classify_run
from protocol.sub_types import SubType
from storage.cursor import ManagedCursor
from storage.ledger import ManagedLedger
from storage.positions import Entry, Position
from storage.segment_file import DurableSink

__all__ = ["TopicReplaceByKey"]

#: Entries read per step of a rebuild.
REBUILD_READ: Final = 1000
_ENTRY_MASK: Final = 0xFFFF_FFFF


def _confirmed_bound(last: Position | None) -> int:
    """The packed position of ``last_confirmed`` (below every entry when there is none)."""
    if last is None:
        return -1
    return (last.ledger_id << 32) + last.entry_id   # entry -1: below the ledger's first entry


class _Acknowledged(Protocol):
    @property
    def mark_delete_position(self) -> Position: ...

    def delete(self, positions: Iterable[Position]) -> None: ...


class KeyedSubscription(Protocol):
    """What the rebuild and the pruning need of a subscription."""

    @property
    def delayed(self) -> DelayedDelivery: ...

    @property
    def cursor(self) -> _Acknowledged: ...

    @property
    def sub_type(self) -> SubType | None: ...

    @property
    def durable(self) -> bool: ...


_Durable = tuple[KeyedSchedule, int, int, list["EntryKeys | None"]]
"""A durable run's keyed entries waiting to be recorded: (schedule, ledger id, first entry
id, what each entry schedules or cancels)."""


class _RecordingSink:
    """Notes a run's deliver times learnt at publish and, as they become durable, queues its
    keyed entries for the schedule (if any: :meth:`TopicReplaceByKey.record_durable` records
    them, before the subscriptions hear of them), then passes the news on to the run's own
    sink."""

    __slots__ = ("_done", "_keys", "_known", "_records", "_schedule", "_sink", "_times")

    def __init__(self, sink: DurableSink, known: KnownDeliverTimes, times: list[int],
                 schedule: KeyedSchedule | None = None,
                 keys: list[EntryKeys | None] | None = None,
                 records: list[_Durable] | None = None) -> None:
        self._sink = sink
        self._known = known
        self._times = times
        self._schedule = schedule
        self._keys = keys
        if schedule is not None and records is None:
            raise ValueError("a schedule's sink needs the topic's queue of durable runs")
        self._records = [] if records is None else records
        self._done = 0

    def entries_durable(self, ledger_id: int, first_entry_id: int, count: int) -> None:
        start = self._done
        self._known.note(ledger_id, first_entry_id, self._times[start:start + count])
        if self._schedule is not None and self._keys is not None:
            self._records.append((self._schedule, ledger_id, first_entry_id,
                                  self._keys[start:start + count]))
        self._done = start + count
        self._sink.entries_durable(ledger_id, first_entry_id, count)

    def entries_failed(self, count: int, error: BaseException) -> None:
        self._done += count
        self._sink.entries_failed(count, error)


class TopicReplaceByKey:
    """The replace-by-key schedule of one topic while its policy is on (module docstring)."""

    __slots__ = ("_deferred", "_durable", "_enabled", "_generation", "_ledger", "_snapshots",
                 "_subscriptions", "_synced", "known_times", "schedule")

    def __init__(self, ledger: ManagedLedger, enabled: Callable[[], bool],
                 subscriptions: Callable[[], Iterable[KeyedSubscription]],
                 snapshots: KeyedSnapshots | None = None, *,
                 generation: Callable[[], int] | None = None) -> None:
        self._ledger = ledger
        self._snapshots = snapshots
        self._enabled = enabled
        # What *enabled* reads changes only when this count moves (the policy records'
        # generation): sync resolves the policy again then, not on every run. None: always.
        self._generation = generation
        self._synced: int | None = None  # the generation sync last resolved the policy at
        self._subscriptions = subscriptions
        #: Entry ids superseded and not confirmed yet, per ledger (see :meth:`_acknowledge`).
        self._deferred: dict[int, BitMap] = {}
        #: Durable runs of keyed entries not recorded yet, in log order (the sinks queue
        #: them; :meth:`record_durable` records them).
        self._durable: list[_Durable] = []
        self.schedule: KeyedSchedule | None = None
        #: The deliver times learnt at publish, policy or not (every subscription's delayed
        #: delivery is handed it: its dispatcher holds those entries unread).
        self.known_times = KnownDeliverTimes()

    def _acknowledge(self, packed: list[int], bitmaps: list[tuple[int, BitMap]]) -> None:
        """Positions were superseded (packed ``ledger_id << 32 | entry_id``, one run's worth,
        and as one bitmap of entry ids per ledger): acknowledge them on every subscription
        that delays messages and drop them from their trackers. A withheld entry of the run
        being made durable is not confirmed in the ledger yet (cursors ignore it): it waits
        for :meth:`flush`. The split is made on the bitmaps (a run's own entries are the
        highest ids of its ledger): no loop over the positions."""
        if max(packed) <= _confirmed_bound(self._ledger.last_confirmed):
            self._acknowledge_now(bitmaps)      # all of them confirmed
            return
        now = self._split(bitmaps, self._deferred)
        if now:
            self._acknowledge_now(now)

    def _split(self, bitmaps: Iterable[tuple[int, BitMap]],
               deferred: dict[int, BitMap]) -> list[tuple[int, BitMap]]:
        """The entry ids of ``bitmaps`` the ledger has confirmed, per ledger; those it has not
        go into ``deferred`` (new bitmaps: ``bitmaps``' own are not changed)."""
        last = self._ledger.last_confirmed
        bound_ledger, bound_entry = (last.ledger_id, last.entry_id) if last is not None \
            else (-1, -1)
        now: list[tuple[int, BitMap]] = []
        for ledger_id, ids in bitmaps:
            if ledger_id < bound_ledger or (ledger_id == bound_ledger
                                            and ids.max() <= bound_entry):
                now.append((ledger_id, ids))
                continue
            later = ids
            if ledger_id == bound_ledger and ids.min() <= bound_entry:
                confirmed = ids.copy()
                confirmed.remove_range(bound_entry + 1, _ENTRY_MASK + 1)
                now.append((ledger_id, confirmed))
                later = ids - confirmed
            waiting = deferred.get(ledger_id)
            if waiting is None:
                deferred[ledger_id] = later.copy() if later is ids else later
            else:
                waiting |= later
        return now

    def record_durable(self) -> None:
        """Record the keyed entries of the runs made durable since the last call, in log
        order: consecutive runs of one ledger (the runs of one group commit, whatever their
        producers) as one :meth:`KeyedSchedule.record_run`. The ledger calls its listeners
        once per group commit, after every run's sink (and after ``last_confirmed`` moved
        over them); the topic's listener calls this through :meth:`flush` before any
        subscription hears of the new entries, and within the same loop callback as the
        sinks, so a replacement is in force before its producer's receipt can be acted on.
        Its own positions are confirmed by then, so a run's tombstones are acknowledged at
        once rather than deferred."""
        queued = self._durable
        if not queued:
            return
        pending = queued.copy()
        queued.clear()      # in place: the sinks of runs still in flight hold this list
        schedule, ledger_id, first, keys = pending[0]   # each run's keys are its own slice
        for later, later_ledger, later_first, later_keys in pending[1:]:
            if later is schedule and later_ledger == ledger_id \
                    and later_first == first + len(keys):
                keys.extend(later_keys)
                continue
            schedule.record_run(ledger_id, first, keys)
            schedule, ledger_id, first, keys = later, later_ledger, later_first, later_keys
        schedule.record_run(ledger_id, first, keys)

    def flush(self) -> None:
        """Record the keyed entries made durable since (:meth:`record_durable`), and
        acknowledge the withheld entries that have been confirmed since (the topic calls
        this when it tells its subscriptions of new entries)."""
        if self._durable:
            self.record_durable()
        deferred = self._deferred
        if not deferred:
            return
        self._deferred = {}
        now = self._split(sorted(deferred.items()), self._deferred)
        if now:
            self._acknowledge_now(now)

    def _acknowledge_now(self, bitmaps: list[tuple[int, BitMap]]) -> None:
        """Bulk acknowledgement: one bitmap per ledger into each cursor (one cursor update per
        run, not per position), then the positions leave the trackers."""
        positions: list[Position] | None = None
        for sub in self._subscriptions():
            kind = sub.sub_type
            if not (sub.durable if kind is None else SubType(kind).shares_messages):
                continue
            cursor = sub.cursor
            delayed = sub.delayed
            if isinstance(cursor, ManagedCursor):
                for ledger_id, bm in bitmaps:
                    cursor.delete_entry_ids(ledger_id, bm)
                    delayed.forget_entry_ids(ledger_id, bm)
                continue
            if positions is None:       # a non-durable subscription's cursor in memory
                positions = [Position(ledger_id, entry_id)
                             for ledger_id, ids in bitmaps for entry_id in ids]
            cursor.delete(positions)
            delayed.forget(positions)

    def sync(self, subscriptions: Iterable[KeyedSubscription]) -> KeyedSchedule | None:
        """Follow the policy; returns the schedule in force."""
        if self._generation is not None:
            generation = self._generation()
            if generation == self._synced:
                return self.schedule   # the policy's inputs did not change since
            self._synced = generation
        on = self._enabled()
        if on and self.schedule is None:
            self.schedule = KeyedSchedule(self._acknowledge)
            self.adopt_all(subscriptions)
        elif not on and self.schedule is not None:
            self.schedule = None
            self._deferred = {}
            self._durable.clear()
            self.adopt_all(subscriptions)
        return self.schedule

    def adopt_all(self, subscriptions: Iterable[KeyedSubscription]) -> None:
        for sub in subscriptions:
            self.adopt(sub)

    def adopt(self, sub: KeyedSubscription) -> None:
        """A subscription joined the topic: it follows the schedule in force and is handed the
        deliver times learnt at publish."""
        delayed = sub.delayed
        delayed.replacements = self.schedule
        delayed.known_times = self.known_times

    def sink_for(self, entries: Sequence[bytes], sink: DurableSink,
                 checked: CheckedTimes | None = None) -> DurableSink:
        """The sink to append a run with: the run's own, or one that notes the deliver times
        the publish check found (``checked``, taken by the entries; consumed either way) and
        records its keyed entries first."""
        if self._durable:   # durable runs the listener has not recorded (never expected)
            self.record_durable()
        schedule = self.schedule
        if schedule is None:
            varints = checked.take(entries) if checked is not None else None
            if varints is None:
                return sink
            return _RecordingSink(sink, self.known_times, deliver_times(varints))
        keys, times, nothing = classify_run(entries)
        if nothing == len(keys):
            varints = checked.take(entries) if checked is not None else None
            if varints is None:
                return sink
            return _RecordingSink(sink, self.known_times, deliver_times(varints))
        if checked is not None and nothing:
            varints = checked.take(entries)
            if varints is not None:     # a keyed entry's time from its classification,
                times = [t if found is not None else checked_at             # another's
                         for found, t, checked_at in zip(keys, times, deliver_times(varints),
                                                         strict=True)]
        elif checked is not None:   # every entry's time comes from its classification
            checked.forget()
        return _RecordingSink(sink, self.known_times, times, schedule, keys, self._durable)

    async def rebuild(self, subscriptions: Sequence[KeyedSubscription]) -> int:
        """Record the keyed entries of the backlog (topic load); returns entries read."""
        schedule = self.schedule
        ledger = self._ledger
        last = ledger.last_confirmed
        if schedule is None or last is None or not subscriptions:
            return 0
        acknowledged = min(s.cursor.mark_delete_position for s in subscriptions)
        pos = ledger.next_position(acknowledged)
        covered = await self._snapshots.load(schedule) if self._snapshots is not None else None
        if covered is not None:
            # the snapshot plus only the log after what it covers (keyed_snapshot)
            schedule.prune_fully(acknowledged)
            after = ledger.next_position(Position(covered >> 32, covered & 0xFFFF_FFFF))
            pos = max(pos, after)
        read = 0
        while pos <= last:
            entries = await ledger.read_entries(pos, REBUILD_READ)
            if not entries:
                break
            within = [entry for entry in entries if entry.position <= last]
            _record_entries(schedule, within)
            if len(within) < len(entries):
                return read
            read += len(entries)
            pos = ledger.next_position(entries[-1].position)
        return read

    def prune(self, subscriptions: Sequence[KeyedSubscription]) -> None:
        """Forget what every subscription acknowledged (housekeeping)."""
        schedule = self.schedule
        if schedule is not None and subscriptions:
            schedule.prune(min(s.cursor.mark_delete_position for s in subscriptions))
        if schedule is not None and self._snapshots is not None:
            self._snapshots.maybe_save(schedule)


def _record_entries(schedule: KeyedSchedule, entries: Sequence[Entry]) -> None:
    """Record entries read back from the log, a run of consecutive ids at a time."""
    run: list[EntryKeys | None] = []
    ledger_id = first = -1
    found = classify_run([entry.data for entry in entries])[0]
    for entry, keys in zip(entries, found, strict=True):
        pos = entry.position
        if run and (pos.ledger_id != ledger_id or pos.entry_id != first + len(run)):
            schedule.record_run(ledger_id, first, run)
            run = []
        if not run:
            ledger_id, first = pos.ledger_id, pos.entry_id
        run.append(keys)
    if run:
        schedule.record_run(ledger_id, first, run)
