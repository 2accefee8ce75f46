"""Message deduplication: a re-sent message is stored once and answered with its original id.

Theory of operation
-------------------
Why it is on by default. Pulsar makes this optional (``brokerDeduplicationEnabled``, default
false); Horae's default is true: the C++/Python client closes the connection on any
SEND_ERROR but ChecksumError and, once the producer is re-created, re-sends its whole pending
queue. Sends pipelined behind a rejected one (e.g. by the delayed-delivery publish guard)
were already stored; their receipts died with the connection. Without deduplication every
such reconnect would store them again. It costs one comparison per SEND. A namespace or
topic policy (``deduplicationEnabled``, :mod:`broker.topics.policies`) can turn it off: then
re-sends are stored again and PRODUCER_SUCCESS says ``last_sequence_id = -1``, as Pulsar; the
sequence states are still kept, so turning it back on needs no recovery.

What it owns. One :class:`MessageDeduplication` per topic (``Topic.dedup``) owns a
:class:`SequenceState` per producer name (the client re-uses the name the broker assigned)
and the topic's ``pulsar.dedup`` cursor (Pulsar's name; it is not a subscription). A state
keeps the highest sequence id appended (``pushed``, durable or in flight) and persisted
(``persisted``, its receipt was produced), the message ids of the last :data:`RECEIPT_WINDOW`
persisted entries (``window``), and the producer incarnations that may still have sends in
flight. The key of a SEND is the highest sequence id it carries (:func:`send_key`:
``highest_sequence_id`` if set, else ``sequence_id + num_messages - 1``, batches of the C++
client).

Invariants: ``persisted <= pushed``; ``window`` is sorted by key; every persisted key
``>= floor`` is in the window.

The SEND path (:class:`broker.topics.producer.Producer`) does the hot part itself on the state it
was given by :meth:`MessageDeduplication.attach`: ``key > pushed`` is a new message (then
``pushed = key``), and a durable append is recorded with :meth:`SequenceState.record`.
Anything else is a re-send (or a sequence going backwards), decided by
:meth:`MessageDeduplication.resend`:

* persisted and still in the window -> SEND_RECEIPT with the original message id;
* still in flight on an earlier incarnation of the producer -> answered with that append;
* at or above ``floor`` -> it was never stored (rejected by the publish guard, failed):
  published like a new message;
* below ``floor`` -> the publish guard still runs (a message it rejects is rejected again),
  then Pulsar's deduplication answer: a receipt with message id -1:-1 (:data:`UNKNOWN_ID`,
  uint64 on the wire). It means "already stored, its id is no longer known": the C++ client
  completes the send with that id (``ProducerImpl::ackReceived`` only matches sequence ids).

Chunks other than the last of a message share its sequence id: they are appended without
touching the state (a re-sent one is stored again unless its message is already complete);
the last chunk is deduplicated like any message.

PRODUCER_SUCCESS carries ``last_sequence_id`` = the highest persisted id of that name, as
Pulsar does with deduplication; a client that never got a receipt continues its sequence
from there (its pending re-sends keep their ids).

How it survives restarts. The ``pulsar.dedup`` cursor holds one property per producer name
(its highest persisted id) and a mark-delete position P such that the properties cover every
entry <= P. :meth:`MessageDeduplication.snapshot` writes them once a second (the topic's
housekeeping) and on topic close; storage persists cursor state atomically at its rate
limit. On load (:meth:`start_recovery`, or the first producer's :meth:`prepare`) the states
are rebuilt from the properties plus a replay (metadata only) of every entry after P -- so a
crash loses nothing; the replay is about two seconds of ingest at most -- and of the last
:data:`TAIL_REPLAY_ENTRIES` entries, for the message ids of the receipt windows. The cursor
also keeps trimming from deleting entries the replay needs. Names idle for
:data:`PRODUCER_INACTIVITY_S` are forgotten (Pulsar's
brokerDeduplicationProducerInactivityTimeoutMinutes, 6 h).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections import deque
from itertools import repeat
from typing import Protocol, cast

from protocol import pulsar_pb as pb
from protocol.errors import ServiceNotReadyError
from storage.cursor import ManagedCursor
from storage.ledger import ManagedLedger
from storage.positions import Position


class SequencedProducer(Protocol):
    """What deduplication asks of a producer (:class:`broker.topics.producer.Producer`)."""

    seq_state: SequenceState
    closed: bool

    @property
    def name(self) -> str: ...

    @property
    def pending(self) -> int: ...

    def pending_append(self, key: int) -> asyncio.Future[Position] | None: ...

    def drain_finished(self) -> None: ...


class DedupTopic(Protocol):
    """What deduplication asks of its topic (:class:`broker.topics.topic.Topic`)."""

    full: str
    closed: bool
    fenced: bool

    @property
    def ledger(self) -> ManagedLedger: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def check_publish(self, entry: bytes) -> tuple[bytes, int, bool]: ...

    def dedup_enabled(self) -> bool: ...

__all__ = ["DEDUP_CURSOR", "UNKNOWN_ID", "MessageDeduplication", "SequenceState",
           "is_partial_chunk", "send_key"]

log = logging.getLogger("horae.dedup")

#: The cursor holding the per-producer-name sequence snapshot (Pulsar's name for it).
DEDUP_CURSOR = "pulsar.dedup"
#: Message ids remembered per producer name, to answer re-sends with their original ids.
RECEIPT_WINDOW = 256
#: Entries replayed from the ledger's tail on load, for those ids (bounded in bytes too).
TAIL_REPLAY_ENTRIES = 1000
TAIL_REPLAY_BYTES = 4 * 1024 * 1024
#: A producer name not attached for this long is forgotten (Pulsar: 360 minutes)...
PRODUCER_INACTIVITY_S = 6 * 3600.0
#: ... and its receipt window is dropped after this long (the highest id is kept).
WINDOW_IDLE_S = 600.0
_NO_FLOOR = -(1 << 64)  # below every key: nothing was stored before the window
#: Pulsar's deduplication answer for a re-send older than what is remembered: -1:-1
#: (uint64 on the wire).
UNKNOWN_ID = (1 << 64) - 1


class SequenceState:
    """What one producer name has appended and persisted on one topic (module docstring)."""

    __slots__ = ("floor", "idle_since", "name", "persisted", "producers", "pushed",
                 "snapshotted", "window")

    def __init__(self, name: str, persisted: int = -1, *, floor: int = _NO_FLOOR,
                 snapshotted: int | None = None) -> None:
        self.name = name
        self.pushed = persisted          # highest key appended (durable or in flight)
        self.persisted = persisted       # highest key durable (its receipt was produced)
        self.floor = floor               # every persisted key >= floor is in the window
        self.window: deque[tuple[int, int, int]] = deque()  # (key, ledger, entry), ascending
        self.producers: list[SequencedProducer] = []  # incarnations that may have sends in flight
        self.snapshotted = snapshotted   # persisted value in the dedup cursor
        self.idle_since = 0.0

    def record(self, key: int, ledger_id: int, entry_id: int) -> None:
        """A send with this key is durable at (ledger_id, entry_id)."""
        window = self.window
        if key > self.persisted:
            self.persisted = key
        if not window or key > window[-1][0]:
            window.append((key, ledger_id, entry_id))
        else:  # a gap filled late (re-sent after a rejection): keep the window sorted
            i = bisect.bisect_left(window, key, key=_first)
            if i < len(window) and window[i][0] == key:
                return
            window.insert(i, (key, ledger_id, entry_id))
        if len(window) > RECEIPT_WINDOW:
            evicted = window.popleft()[0]
            if evicted >= self.floor:
                self.floor = evicted + 1

    def record_run(self, keys: list[int | None], ledger_id: int, first_entry_id: int) -> None:
        """:meth:`record` for consecutive entries ``first_entry_id..`` of one ledger whose keys
        are *keys* (None: not a dedup key). A run's keys ascend, so when they all follow the
        window they are appended at once; anything else goes through :meth:`record`."""
        window = self.window
        ascending = cast("list[int]", keys)  # checked just below: no None in it
        if not keys or None in keys or (window and ascending[0] <= window[-1][0]):
            for offset, key in enumerate(keys):
                if key is not None:
                    self.record(key, ledger_id, first_entry_id + offset)
            return
        if ascending[-1] > self.persisted:
            self.persisted = ascending[-1]
        window.extend(zip(ascending, repeat(ledger_id),
                          range(first_entry_id, first_entry_id + len(keys))))
        excess = len(window) - RECEIPT_WINDOW
        if excess > 0:
            for _ in range(excess - 1):
                window.popleft()
            evicted = window.popleft()[0]  # the highest evicted key
            if evicted >= self.floor:
                self.floor = evicted + 1

    def stored_at(self, key: int) -> tuple[int, int] | None:
        window = self.window
        i = bisect.bisect_left(window, key, key=_first)
        if i < len(window) and window[i][0] == key:
            return window[i][1], window[i][2]
        return None

    def in_flight(self, key: int) -> asyncio.Future[Position] | None:
        """The pending append of *key* on any incarnation of this producer, if any."""
        for producer in self.producers:
            fut = producer.pending_append(key)
            if fut is not None:
                return fut
        return None

    def drop_window(self) -> None:
        if self.window:
            self.floor = max(self.floor, self.window[-1][0] + 1)
            self.window.clear()


def _first(item: tuple[int, int, int]) -> int:
    return item[0]


def send_key(sequence_id: int, highest_sequence_id: int, messages: int = 1) -> int:
    """The deduplication key of a send: the highest sequence id it carries (the Java client
    sets highest_sequence_id on batches; the C++ client numbers a batch's messages from
    sequence_id on). :meth:`broker.topics.producer.Producer.on_sends` computes the same inline."""
    key = highest_sequence_id if highest_sequence_id > sequence_id else sequence_id
    return max(key, sequence_id + messages - 1)


def is_partial_chunk(entry: bytes) -> bool:
    """True for a chunk other than the last of its message (metadata-only parse; rare path)."""
    md = _metadata(entry)
    return md is not None and _is_partial(md)


def _is_partial(md: pb.MessageMetadata) -> bool:
    return md.HasField("num_chunks_from_msg") and md.chunk_id < md.num_chunks_from_msg - 1


def _metadata(entry: bytes) -> pb.MessageMetadata | None:
    if len(entry) < 4:
        return None
    size = int.from_bytes(entry[:4], "big")
    try:
        md: pb.MessageMetadata = pb.MessageMetadata.FromString(entry[4:4 + size])
    except Exception:
        return None
    return md


class MessageDeduplication:
    """The per-producer-name sequence states of one topic, and their persistence."""

    def __init__(self, topic: DedupTopic) -> None:
        self.topic = topic
        self.ledger = topic.ledger
        self.states: dict[str, SequenceState] = {}
        self.cursor: ManagedCursor | None = None
        self.ready = False
        self._recovery: asyncio.Future[None] | None = None

    # ------------------------------------------------------------------ recovery

    async def prepare(self) -> None:
        """Recover once (concurrent callers wait for the same recovery)."""
        if self.ready:
            return
        if self.topic.closed or self.topic.fenced:
            raise ServiceNotReadyError(f"Topic {self.topic.full} is being closed or reloaded")
        if self._recovery is None:
            self._recovery = asyncio.ensure_future(self._recover())
        await asyncio.shield(self._recovery)

    def start_recovery(self) -> None:
        """Recover in the background (topic load, when a snapshot exists)."""
        if self._recovery is None and not self.ready:
            self._recovery = asyncio.ensure_future(self._recover())
            self._recovery.add_done_callback(_log_failure)

    async def _recover(self) -> None:
        try:
            await self._recover_states()
        except BaseException:
            self._recovery = None  # the next producer tries again
            raise

    async def _recover_states(self) -> None:
        ledger = self.ledger
        end = ledger.last_confirmed
        cursor = ledger.cursors.get(DEDUP_CURSOR)
        states: dict[str, SequenceState] = {}
        after: Position | None = None
        if cursor is not None:
            after = cursor.mark_delete_position
            for name, value in cursor.properties.items():
                try:
                    highest = int(value)
                except ValueError:
                    continue
                states[name] = SequenceState(name, highest, floor=highest + 1,
                                             snapshotted=highest)
        else:
            cursor = await ledger.open_cursor(DEDUP_CURSOR, initial_position="latest")
        start = _tail_start(ledger)
        if after is not None:
            resume = ledger.next_position(after)
            start = resume if start is None else min(start, resume)
        if end is not None and start is not None and start <= end:
            try:
                await _replay(ledger, start, end, states)
            except Exception:
                # Better a possible duplicate than a topic that cannot take producers.
                log.exception("replaying %s for producer sequences failed", ledger.name)
        for state in states.values():
            state.pushed = max(state.pushed, state.persisted)
        self.states = states
        self.cursor = cursor
        self.ready = True

    # ------------------------------------------------------------------ producers

    def attach(self, producer: SequencedProducer) -> None:
        """Give *producer* the state of its name (``producer.seq_state``), created if new."""
        state = self.states.get(producer.name)
        if state is None:
            state = self.states[producer.name] = SequenceState(producer.name)
        state.producers.append(producer)
        state.idle_since = 0.0
        producer.seq_state = state

    def resend(self, state: SequenceState, entry: bytes,
               key: int) -> tuple[asyncio.Future[Position] | None, int | None]:
        """Decide on a SEND whose *key* is not above ``state.pushed`` (module docstring).

        Returns ``(future, key)``: answer the send with that future's position without
        appending; or ``(None, key)``: publish it as new, recorded under key (None for a
        chunk other than the last, which is no deduplication key). Raises what the publish
        guard raises for a re-send older than the window.
        """
        if not self.topic.dedup_enabled():
            return None, None  # deduplication is off by policy: stored again, as Pulsar
        stored = state.stored_at(key)
        if stored is not None:
            return self._resolved(*stored), key
        if is_partial_chunk(entry):
            # A chunk before the last of a message not stored yet: stored again (its
            # message completes with the last chunk, which is deduplicated).
            return None, None
        original = state.in_flight(key)
        if original is not None:
            return original, key
        if key >= state.floor:  # never stored (rejected or failed before): a new message
            return None, key
        # Older than what is remembered. The guard still answers what it rejects (a message
        # it rejected before was never stored); anything else is a duplicate.
        self.topic.check_publish(entry)
        return self._resolved(UNKNOWN_ID, UNKNOWN_ID), key

    def _resolved(self, ledger_id: int, entry_id: int) -> asyncio.Future[Position]:
        fut: asyncio.Future[Position] = self.topic.loop.create_future()
        fut.set_result(Position(ledger_id, entry_id))
        return fut

    # ------------------------------------------------------------------ snapshots

    def snapshot(self, now: float) -> None:
        """Write every name's highest persisted id and the position they cover into the
        dedup cursor (storage persists it at its rate limit, atomically)."""
        cursor = self.cursor
        if not self.ready or cursor is None or self.ledger.closed:
            return
        last = self.ledger.last_confirmed
        states = self.states
        for state in states.values():
            for producer in state.producers:
                producer.drain_finished()  # every durable entry is now in the states
        forget: list[str] = []
        for name, state in states.items():
            if state.producers:
                state.producers = [p for p in state.producers if not p.closed or p.pending]
            if state.persisted != state.snapshotted and state.persisted >= 0:
                cursor.set_property(name, str(state.persisted))
                state.snapshotted = state.persisted
            if state.producers:
                state.idle_since = 0.0
            elif state.idle_since == 0.0:
                state.idle_since = now
            else:
                idle = now - state.idle_since
                if idle > PRODUCER_INACTIVITY_S:
                    forget.append(name)
                elif idle > WINDOW_IDLE_S:
                    state.drop_window()
        for name in forget:
            del states[name]
            cursor.remove_property(name)
        if last is not None and last > cursor.mark_delete_position:
            cursor.mark_delete(last)

    def close(self, now: float) -> None:
        """Last snapshot before the ledger closes (entries still completing are covered by
        the replay on the next load). Never raises: closing the topic goes on."""
        try:
            self.snapshot(now)
        except Exception:
            log.exception("dedup snapshot of %s failed", self.topic.full)


def _log_failure(fut: asyncio.Future[None]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.error("recovering producer sequences failed: %s", fut.exception())


def _tail_start(ledger: ManagedLedger) -> Position | None:
    """The first of the last TAIL_REPLAY_ENTRIES entries (fewer when they are large)."""
    remaining = TAIL_REPLAY_ENTRIES
    budget = float(TAIL_REPLAY_BYTES)
    start: Position | None = None
    for info in reversed(ledger.ledgers):
        if info.entries <= 0:
            continue
        average = max(1.0, info.size_bytes / info.entries)
        take = min(info.entries, remaining, int(budget // average))
        if take <= 0:
            break
        start = Position(info.ledger_id, info.entries - take)
        remaining -= take
        budget -= take * average
        if take < info.entries or remaining <= 0:
            break
    return start


async def _replay(ledger: ManagedLedger, start: Position, end: Position,
                  states: dict[str, SequenceState]) -> None:
    """Rebuild the states from the entries in [start, end] (metadata only)."""
    pos = start
    while True:
        entries = await ledger.read_entries(pos, 256, 4 * 1024 * 1024)
        if not entries:
            return
        for e in entries:
            if e.position > end:
                return
            md = _metadata(e.data)
            if md is None or not md.HasField("producer_name") or _is_partial(md):
                continue
            key = send_key(md.sequence_id, md.highest_sequence_id, md.num_messages_in_batch)
            name = md.producer_name
            state = states.get(name)
            if state is None:
                # Unknown before this entry: keys below it are answered as duplicates.
                state = states[name] = SequenceState(name, floor=key)
            state.record(key, e.position.ledger_id, e.position.entry_id)
        last = entries[-1].position
        if last >= end:
            return
        pos = ledger.next_position(last)
