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

Being on by default, it must be exact where Pulsar's is not: sequence ids from one producer
may arrive out of order (the C++ client sends a delayed message at once, outside the batch it
is accumulating, with an id from that batch's range). Pulsar keeps one high-water mark per
name and drops anything at or below it -- here the whole batch. Horae keys a send by its
identity ``[sequence_id, key]`` and keeps, per name, which ids were stored
(:mod:`broker.topics.dedup_state`): each send is stored once and answered with its own id.

What it owns. One :class:`MessageDeduplication` per topic (``Topic.dedup``) owns a
:class:`~broker.topics.dedup_state.SequenceState` per producer name (the client re-uses the
name the broker assigned) and the topic's ``pulsar.dedup`` cursor (Pulsar's name; it is not a
subscription).

The SEND path (:class:`broker.topics.producer.Producer`) does the hot part itself on the state it
was given by :meth:`MessageDeduplication.attach`: ``sequence_id == next_seq`` is a new send in
order (then ``next_seq = key + 1``); a forward jump (``key`` above every key appended) is new
too; a durable append is recorded with :meth:`SequenceState.record`. Anything else is decided
by :meth:`MessageDeduplication.resend`:

* stored and still in the receipt window -> SEND_RECEIPT with the original message id;
* still in flight on an incarnation of the producer -> answered with that append;
* never stored (:meth:`SequenceState.never_stored`: a gap left by a refused send, a batch
  behind out-of-order delayed messages) -> published like a new message;
* else it was stored and its id is forgotten -> the publish guard still runs (a message it
  rejects is rejected again), then Pulsar's deduplication answer: a receipt with message id
  -1:-1 (:data:`UNKNOWN_ID`, uint64 on the wire). The C++ client completes the send with it.

Chunks other than the last of a message share its sequence id: they are appended without
touching the state (a re-sent one is stored again unless its message is already complete);
the last chunk is deduplicated like any message.

PRODUCER_SUCCESS carries ``last_sequence_id`` = the highest persisted id of that name, as
Pulsar does with deduplication; a client that never got a receipt continues its sequence
from there (its pending re-sends keep their ids).

How it survives restarts. The ``pulsar.dedup`` cursor holds one property per producer name
(its stored ranges, :meth:`IdRanges.encode`: ``"0:41"`` in order) and a mark-delete position
P such that the properties cover every entry <= P. :meth:`MessageDeduplication.snapshot`
writes them once a second (the topic's housekeeping) and on topic close; storage persists
cursor state atomically at its rate limit. On load (:meth:`start_recovery`, or the first
producer's :meth:`prepare`) the states are rebuilt from the properties plus a replay
(metadata only) of every entry after P -- so a crash loses nothing; the replay is about two
seconds of ingest at most -- and of the last :data:`TAIL_REPLAY_ENTRIES` entries, for the
message ids of the receipt windows. A name first seen after P is new since the snapshot: the
replay gives all it stored. The cursor also keeps trimming from deleting entries the replay
needs.

Bounds. Per name: :data:`~broker.topics.dedup_state.RECEIPT_WINDOW` ids and
:data:`~broker.topics.dedup_state.MAX_ID_RANGES` ranges. Per topic: at most
``brokerDeduplicationMaxNumberOfProducers`` names (Pulsar's key and default, 10,000); past
it the least recently active names without a connected producer are evicted, in memory and
from the cursor, and counted (:attr:`MessageDeduplication.evicted_producers`). An evicted
name is forgotten: if it comes back it starts as a new name (``last_sequence_id = -1``), and
a re-send of something it stored before is stored again. Names idle for
:data:`PRODUCER_INACTIVITY_S` are forgotten too (Pulsar's
brokerDeduplicationProducerInactivityTimeoutMinutes, 6 h).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from broker.topics.dedup_state import NO_FLOOR, IdRanges, InFlight, SequenceState, send_key
from protocol import pulsar_pb as pb
from protocol.errors import ServiceNotReadyError
from protocol.metadata import split_entry
from storage.cursor import ManagedCursor
from storage.ledger import ManagedLedger
from storage.positions import Position


class SequencedProducer(InFlight, Protocol):
    """What deduplication asks of a producer (:class:`broker.topics.producer.Producer`)."""

    seq_state: SequenceState

    @property
    def name(self) -> str: ...


class DedupTopic(Protocol):
    """What deduplication asks of its topic (:class:`broker.topics.topic.Topic`)."""

    full: str

    @property
    def serving(self) -> bool:
        """Neither fenced nor closed."""
        ...

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
#: Entries replayed from the ledger's tail on load, for those ids (bounded in bytes too).
TAIL_REPLAY_ENTRIES = 1000
TAIL_REPLAY_BYTES = 4 * 1024 * 1024
#: A producer name not attached for this long is forgotten (Pulsar: 360 minutes)...
PRODUCER_INACTIVITY_S = 6 * 3600.0
#: ... and its receipt window is dropped after this long (the stored ranges are kept).
WINDOW_IDLE_S = 600.0
#: Pulsar's brokerDeduplicationMaxNumberOfProducers default.
DEFAULT_MAX_PRODUCERS = 10_000
#: Pulsar's deduplication answer for a re-send older than what is remembered: -1:-1
#: (uint64 on the wire).
UNKNOWN_ID = (1 << 64) - 1


def is_partial_chunk(entry: bytes) -> bool:
    """True for a chunk other than the last of its message (metadata-only parse; rare path)."""
    md = _metadata(entry)
    return md is not None and _is_partial(md)


def _is_partial(md: pb.MessageMetadata) -> bool:
    return md.HasField("num_chunks_from_msg") and md.chunk_id < md.num_chunks_from_msg - 1


def _metadata(entry: bytes) -> pb.MessageMetadata | None:
    try:
        md: pb.MessageMetadata = pb.MessageMetadata.FromString(split_entry(entry)[0])
    except Exception:
        return None
    return md


class MessageDeduplication:
    """The per-producer-name sequence states of one topic, and their persistence."""

    def __init__(self, topic: DedupTopic, max_producers: int = DEFAULT_MAX_PRODUCERS) -> None:
        self.topic = topic
        self.ledger = topic.ledger
        self.max_producers = max_producers
        # Ordered from the least to the most recently active (attached, or left idle).
        self.states: dict[str, SequenceState] = {}
        self.cursor: ManagedCursor | None = None
        self.ready = False
        self.evicted_producers = 0  # names evicted over max_producers (a counter)
        self._recovery: asyncio.Future[None] | None = None

    # ------------------------------------------------------------------ recovery

    async def prepare(self) -> None:
        """Recover once (concurrent callers wait for the same recovery)."""
        if self.ready:
            return
        if not self.topic.serving:
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
                    stored = IdRanges.decode(value)
                except ValueError:
                    log.warning("ignoring the unreadable sequence snapshot of %s on %s",
                                name, self.topic.full)
                    continue
                state = SequenceState(name, stored)
                state.floor = state.persisted + 1  # ids below: none in the window yet
                state.snapshotted = stored.changes
                states[name] = state
        else:
            cursor = await ledger.open_cursor(DEDUP_CURSOR, initial_position="latest")
        start = _tail_start(ledger)
        if after is not None:
            resume = ledger.next_position(after)
            start = resume if start is None else min(start, resume)
        if end is not None and start is not None and start <= end:
            try:
                await _replay(ledger, start, end, after, states)
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
        """Give *producer* the state of its name (``producer.seq_state``), created if new
        (evicting idle names over ``max_producers``)."""
        states = self.states
        state = states.pop(producer.name, None)
        if state is None:
            self._evict(len(states) + 1 - self.max_producers)
            state = SequenceState(producer.name)
        states[producer.name] = state  # the most recently active
        state.producers.append(producer)
        state.idle_since = 0.0
        producer.seq_state = state

    def _evict(self, excess: int) -> None:
        """Forget *excess* names, the least recently active first, skipping names with a
        connected producer or sends still to answer."""
        if excess <= 0:
            return
        victims: list[str] = []
        for name, state in self.states.items():
            if not state.attached():
                victims.append(name)
                if len(victims) == excess:
                    break
        cursor = self.cursor
        for name in victims:
            del self.states[name]
            if cursor is not None:
                cursor.remove_property(name)
        self.evicted_producers += len(victims)

    def resend(self, state: SequenceState, entry: bytes, sequence_id: int,
               key: int) -> tuple[asyncio.Future[Position] | None, int | None]:
        """Decide on a SEND ``[sequence_id, key]`` that is not in order (module docstring).

        Returns ``(future, key)``: answer the send with that future's position without
        appending; or ``(None, key)``: publish it as new, recorded under key (None for a
        chunk other than the last, which is no deduplication key). Raises what the publish
        guard raises for a re-send whose id is forgotten.
        """
        if not self.topic.dedup_enabled():
            return None, None  # deduplication is off by policy: stored again, as Pulsar
        stored = state.stored_at(sequence_id, key)
        if stored is not None:
            return self._resolved(*stored), key
        if is_partial_chunk(entry):
            # A chunk before the last of a message not stored yet: stored again (its
            # message completes with the last chunk, which is deduplicated).
            return None, None
        original = state.in_flight(sequence_id, key)
        if original is not None:
            return original, key
        if state.never_stored(sequence_id, key):
            return None, key
        # Stored, its id forgotten. The guard still answers what it rejects (a message it
        # rejected before was never stored); anything else is a duplicate.
        self.topic.check_publish(entry)
        return self._resolved(UNKNOWN_ID, UNKNOWN_ID), key

    def _resolved(self, ledger_id: int, entry_id: int) -> asyncio.Future[Position]:
        fut: asyncio.Future[Position] = self.topic.loop.create_future()
        fut.set_result(Position(ledger_id, entry_id))
        return fut

    # ------------------------------------------------------------------ snapshots

    def snapshot(self, now: float) -> None:
        """Write every name's stored ranges and the position they cover into the dedup
        cursor (storage persists it at its rate limit, atomically)."""
        cursor = self.cursor
        if not self.ready or cursor is None or self.ledger.closed:
            return
        last = self.ledger.last_confirmed
        states = self.states
        for state in states.values():
            for producer in state.producers:
                producer.drain_finished()  # every durable entry is now in the states
        forget: list[str] = []
        went_idle: list[str] = []
        active: list[str] = []
        for name, state in states.items():
            if state.producers:
                state.producers = [p for p in state.producers if not p.closed or p.pending]
            stored = state.stored
            if stored.changes != state.snapshotted and stored:
                cursor.set_property(name, stored.encode())
                state.snapshotted = stored.changes
            if state.producers:
                state.idle_since = 0.0
                active.append(name)
            elif state.idle_since == 0.0:
                state.idle_since = now
                went_idle.append(name)
            else:
                idle = now - state.idle_since
                if idle > PRODUCER_INACTIVITY_S:
                    forget.append(name)
                elif idle > WINDOW_IDLE_S:
                    state.drop_window()
        for name in went_idle:  # last active now: evicted after the names idle for longer
            states[name] = states.pop(name)
        if went_idle:
            # and the names still attached after them, active at this very moment: one that
            # goes idle before the next snapshot is then evicted after these, not before
            for name in active:
                states[name] = states.pop(name)
        for name in forget:
            del states[name]
            cursor.remove_property(name)
        self._evict(len(states) - self.max_producers)
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
                  snapshot_at: Position | None, states: dict[str, SequenceState]) -> None:
    """Rebuild the states from the entries in [start, end] (metadata only). Entries after
    *snapshot_at* (the dedup cursor's mark-delete position) are all replayed: a name first
    seen there is new since the snapshot. Entries at or before it only give message ids to
    names the snapshot holds (a name missing from it was forgotten or evicted); without a
    snapshot a name first seen is taken to have stored every id below its first one."""
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
            seq = md.sequence_id
            key = send_key(seq, md.highest_sequence_id, md.num_messages_in_batch)
            name = md.producer_name
            state = states.get(name)
            snapshotted = snapshot_at is not None and e.position <= snapshot_at
            if state is None:
                if snapshotted:
                    continue
                state = states[name] = (
                    SequenceState(name) if snapshot_at is not None
                    else SequenceState(name, IdRanges([NO_FLOOR, seq - 1]), floor=key))
            state.record(seq, key, e.position.ledger_id, e.position.entry_id,
                         in_ranges=snapshotted)
        last = entries[-1].position
        if last >= end:
            return
        pos = ledger.next_position(last)
