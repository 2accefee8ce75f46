"""ManagedCursor: a subscription's acknowledgement state, and its on-disk format.

State: mark_delete_position (every entry <= it is acknowledged), individually deleted entries
beyond it as one pyroaring BitMap per ledger (entry ids are < 2**32), read_position (next
entry to read), revision (PIP-269 cursor state revision, set by the broker), properties
(str -> str). Acks only touch the in-memory bitmaps; the mark-delete position advances over
contiguous runs of acknowledged (or recovery-dropped, i.e. missing) entries, across ledgers.

Bounds: a cursor only ever records positions of entries that exist. Acks (delete,
delete_entry_ids, mark_delete) of a position beyond last_confirmed or outside its ledger's
extent are ignored, as Pulsar's ManagedCursorImpl refuses them ("Invalid mark deleted
position"); a reset beyond the end lands on the end (Pulsar's asyncResetCursor: "latest"), one
on a missing entry on the next entry that exists. So a client or admin naming a future id can
neither swallow messages published later nor make the ledger-id allocator (which counts ids
cursors reference) jump, and entry ids stay below MAX_ENTRY_ID (pyroaring's uint32).

Ownership: the managed ledger owns its cursors. A cursor sees the ledger only through the
narrow LedgerView protocol below (extents of ledgers, the next ledger, the current ledger id,
last confirmed, entries between) and saves itself through a SaveCursor callback the ledger
hands it (storage/cursor_files.py does the file work). The ledger ends a cursor with close()
or retire() (deleted: never written again); nothing else touches a cursor's internals.

Persistence: a save takes the whole state at one moment on the loop, as immutable pieces of
the file (an :class:`EncodedCursor`): the head, the properties' kept bytes and one kept record
per ledger's bitmap, of which only those whose bitmap changed since the last save are made
again (storage/individually_deleted.py). The save callback joins and checksums the pieces and
writes the file in the store's I/O threads, never on the loop; at most
mark_delete_rate_limit_per_sec times a second by the store's background flush, plus on
flush() and close(). One save at a time per cursor (a lock);
a retired cursor is never saved again, and retire() waits for a save in flight, so a deleted
cursor's file cannot be written back. The ack state is never truncated however fragmented
it is: persisted_size_bytes says what it costs. dirty_since / save_failures / last_save_error
make the ack durability window visible (store stats).

File format (little endian), version 1:
  b"HCUR" | version u8 | name_len u16 | name utf-8
  | md_ledger i64 | md_entry i64 | read_ledger i64 | read_entry i64 | revision u64
  | n_props u32 | n_props x (key_len u32, key utf-8, value_len u32, value utf-8)
  | n_bitmaps u32 | n_bitmaps x (ledger_id i64, size u32, BitMap.serialize() [portable format])
  | crc32c u32 of everything before it
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Protocol

from crc32c import crc32c
from pyroaring import BitMap

from storage.cursor_properties import CursorProperties, encode_properties
from storage.errors import CorruptRecordError, StorageError
from storage.individually_deleted import (
    BITMAP_HEAD,
    MAX_ENTRY_ID,
    IndividuallyDeleted,
    bitmap_record,
    count_record,
)
from storage.positions import Position
from storage.to_the_end import to_the_end

CURSOR_MAGIC = b"HCUR"
CURSOR_VERSION = 1
_HEAD = struct.Struct("<4sBH")
_POSITIONS = struct.Struct("<qqqqQ")
_U32 = struct.Struct("<I")


@dataclass(slots=True)
class CursorState:
    """The persisted part of a cursor (decoded form of a .cur file)."""

    name: str
    mark_delete: Position
    read_position: Position
    revision: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    bitmaps: dict[int, BitMap] = field(default_factory=dict)
    persisted_size_bytes: int = 0  # not persisted: the size of the file it was loaded from
    #: not persisted: encode_properties(properties) as the file it was loaded from held them
    #: (the first save after a restart need not encode tens of thousands of them again)
    properties_blob: bytes | None = None


@dataclass(frozen=True, slots=True)
class EncodedCursor:
    """A cursor file as immutable pieces taken on the loop at one moment (a save's snapshot):
    :meth:`chunks` joins and checksums them, the work of the thread that writes the file."""

    pieces: tuple[bytes | memoryview, ...]
    size: int
    """Bytes of the file (the pieces and the CRC)."""

    def chunks(self) -> tuple[bytes, bytes]:
        """(everything before the CRC, the CRC): the file is their concatenation. Blocking
        work for a thread (both release the GIL for large files)."""
        body = b"".join(self.pieces)
        return body, _U32.pack(crc32c(body))

    def data(self) -> bytes:
        return b"".join(self.chunks())


def _head(state: CursorState) -> bytes:
    name = state.name.encode()
    md, rd = state.mark_delete, state.read_position
    return b"".join((
        _HEAD.pack(CURSOR_MAGIC, CURSOR_VERSION, len(name)),
        name,
        _POSITIONS.pack(md.ledger_id, md.entry_id, rd.ledger_id, rd.entry_id, state.revision),
    ))


def encoded_cursor(state: CursorState, properties: list[bytes | memoryview],
                   records: list[bytes]) -> EncodedCursor:
    """The file of *state* as pieces: *properties* is :func:`encode_properties` of its
    properties as pieces, *records* the bitmaps' part (storage/individually_deleted.py): all
    immutable."""
    pieces = (_head(state), *properties, *records)
    return EncodedCursor(pieces, sum(map(len, pieces)) + _U32.size)


def encode_cursor(state: CursorState, properties: bytes | bytearray | None = None) -> bytes:
    """The whole file of *state* at once. *properties*: :func:`encode_properties` of
    ``state.properties`` when the caller has it (a cursor keeps it:
    storage/cursor_properties.py), ``state.properties`` is then unused."""
    props = encode_properties(state.properties) if properties is None else bytes(properties)
    bitmaps = [(lid, bm) for lid, bm in sorted(state.bitmaps.items()) if bm]
    records = [count_record(len(bitmaps)), *(bitmap_record(lid, bm) for lid, bm in bitmaps)]
    return encoded_cursor(state, [props], records).data()


def decode_cursor(data: bytes, *, bitmaps: bool = True) -> CursorState:
    """Raises CorruptRecordError on any framing or CRC problem. bitmaps=False: the
    individually deleted bitmaps are not deserialized (each ledger id they name maps to an
    empty BitMap): what a scan for the ledger ids a cursor mentions needs."""
    if len(data) < _HEAD.size + _POSITIONS.size + 12:
        raise CorruptRecordError("cursor file too short")
    (crc,) = _U32.unpack_from(data, len(data) - 4)
    body = memoryview(data)[:-4]
    if crc32c(body) != crc:
        raise CorruptRecordError("cursor file CRC mismatch")
    try:
        magic, version, name_len = _HEAD.unpack_from(data, 0)
        if magic != CURSOR_MAGIC or version != CURSOR_VERSION:
            raise CorruptRecordError(f"not a cursor file (magic {magic!r}, version {version})")
        off = _HEAD.size
        name = bytes(body[off : off + name_len]).decode()
        off += name_len
        ml, me, rl, re_, revision = _POSITIONS.unpack_from(data, off)
        off += _POSITIONS.size
        props_start = off
        (n_props,) = _U32.unpack_from(data, off)
        off += 4
        props: dict[str, str] = {}
        u32 = _U32.unpack_from
        end = len(body)
        for _ in range(n_props):   # tens of thousands with a bucketed delayed tracker
            (klen,) = u32(data, off)
            off += 4
            if off + klen > end:
                raise CorruptRecordError("cursor property past the end")
            key = str(data[off : off + klen], "utf-8")
            off += klen
            (vlen,) = u32(data, off)
            off += 4
            if off + vlen > end:
                raise CorruptRecordError("cursor property past the end")
            props[key] = str(data[off : off + vlen], "utf-8")
            off += vlen
        props_end = off
        (n_bitmaps,) = u32(data, off)
        off += 4
        found: dict[int, BitMap] = {}
        head = BITMAP_HEAD.unpack_from
        head_size = BITMAP_HEAD.size
        for _ in range(n_bitmaps):
            ledger_id, size = head(data, off)
            off += head_size
            if off + size > end:
                raise CorruptRecordError("cursor bitmap past the end")
            found[ledger_id] = BitMap.deserialize(data[off : off + size]) if bitmaps else BitMap()
            off += size
        if off != end:
            raise CorruptRecordError("trailing bytes in cursor file")
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        raise CorruptRecordError(f"malformed cursor file: {exc}") from exc
    return CursorState(
        name, Position(ml, me), Position(rl, re_), revision, props, found, len(data),
        bytes(data[props_start:props_end]),
    )


class LedgerView(Protocol):
    """What a cursor may ask of its managed ledger (loop only)."""

    @property
    def last_confirmed(self) -> Position | None: ...

    @property
    def current_ledger_id(self) -> int: ...

    def ledger_extent(self, ledger_id: int) -> tuple[int, bool, BitMap | None]:
        """(confirmed entry count, complete: no entry will ever be added, missing entry ids);
        (0, True, None) for a ledger that does not exist (any more)."""
        ...

    def ledger_after(self, ledger_id: int) -> int | None:
        """The id of the ledger following ledger_id, if any."""
        ...

    def entries_between(self, start_exclusive: Position, end_inclusive: Position) -> int: ...

    def next_position(self, pos: Position) -> Position: ...


SaveCursor = Callable[[str, EncodedCursor, int], Awaitable[None]]
"""save(cursor name, encoded state, highest ledger id the state mentions): durable on return
(the encoded state's pieces are joined and checksummed where the file is written)."""


def peek_cursor_name(data: bytes) -> str:
    """The name in a cursor file's header, without checking the CRC (recovering the name of a
    damaged cursor). Raises CorruptRecordError, struct.error or UnicodeDecodeError."""
    magic, _version, name_len = _HEAD.unpack_from(data, 0)
    if magic != CURSOR_MAGIC or len(data) < _HEAD.size + name_len:
        raise CorruptRecordError("not a cursor file")
    return data[_HEAD.size : _HEAD.size + name_len].decode()


_LEDGER_ID, _ENTRY_ID = itemgetter(0), itemgetter(1)


def _run_end(bitmap: BitMap, start: int) -> int:
    """Last id of the run of consecutive ids in bitmap that starts at start (start in bitmap)."""
    good = 1
    bad = 2
    while bitmap.contains_range(start, start + bad):
        good = bad
        bad *= 2
    while bad - good > 1:  # invariant: [start, start+good) in bitmap, [start, start+bad) not
        mid = (good + bad) // 2
        if bitmap.contains_range(start, start + mid):
            good = mid
        else:
            bad = mid
    return start + good - 1


class ManagedCursor:
    """One subscription's position and acks on a ManagedLedger. Loop-only, except persistence."""

    def __init__(self, ledger: LedgerView, save: SaveCursor, state: CursorState,
                 on_dirty: Callable[[], None] | None = None) -> None:
        """*on_dirty*: told each time the cursor goes from saved to holding unsaved changes
        (the store's flush visits only ledgers whose cursors said so)."""
        self._ledger = ledger
        self._save = save
        self._on_dirty = on_dirty
        self.name = state.name
        self._md = state.mark_delete
        self._read = state.read_position
        self._revision = state.revision
        #: with their encoded bytes: a bucketed delayed tracker keeps one property per bucket
        self._properties = CursorProperties(state.properties, state.properties_blob)
        self.individually_deleted = IndividuallyDeleted(state.bitmaps)
        """The entries acknowledged one by one beyond the mark-delete position (this cursor
        writes them; others count, copy and ask about a range of positions)."""
        self._bitmaps: dict[int, BitMap] = state.bitmaps   # the same dict, written here alone
        # Unsaved changes since (monotonic); None: nothing unsaved. A loaded state is on disk.
        self._dirty_since: float | None = None
        self._saving_since: float | None = None   # the oldest change of a save in flight
        if state.persisted_size_bytes == 0:
            self._touch()
        self._lock = asyncio.Lock()
        self._closed = False
        self._retired = False
        self.save_failures = 0
        """Saves that failed (each is retried by the next flush; the state stays dirty)."""
        self.last_save_error: BaseException | None = None
        """The error of the last save if it failed, None once a save succeeded."""
        self.persisted_size_bytes = state.persisted_size_bytes
        """Size in bytes of the last persisted state (0 before the first persist)."""
        self.persist_count = 0

    # -- positions -------------------------------------------------------------------------

    @property
    def mark_delete_position(self) -> Position:
        return self._md

    @property
    def read_position(self) -> Position:
        return self._read

    @read_position.setter
    def read_position(self, pos: Position) -> None:
        self._read = pos
        self._touch()

    @property
    def revision(self) -> int:
        return self._revision

    @revision.setter
    def revision(self, value: int) -> None:
        self._revision = value
        self._touch()

    @property
    def properties(self) -> dict[str, str]:
        """A copy; change it with set_property/remove_property so the change is persisted."""
        return self._properties.copy()

    def set_property(self, key: str, value: str) -> None:
        """O(1) Python however many properties there are. Raises UnicodeEncodeError (nothing
        changed) for a string the file cannot hold."""
        self._properties.set(key, value)
        self._touch()

    def remove_property(self, key: str) -> None:
        if self._properties.remove(key):
            self._touch()

    def _touch(self) -> None:
        if self._dirty_since is None:
            self._dirty_since = time.monotonic()
            if self._on_dirty is not None:
                self._on_dirty()

    @property
    def dirty_since(self) -> float | None:
        """time.monotonic() of the oldest change not yet durable (None: nothing unsaved); a
        change whose save is in flight is not durable yet."""
        if self._saving_since is None:
            return self._dirty_since
        if self._dirty_since is None:
            return self._saving_since
        return min(self._saving_since, self._dirty_since)

    @property
    def dirty(self) -> bool:
        """True while some change is not yet durable (including one being written now)."""
        return self._dirty_since is not None or self._lock.locked()

    # -- acks ------------------------------------------------------------------------------

    def is_deleted(self, pos: Position) -> bool:
        if pos <= self._md:
            return True
        if not 0 <= pos.entry_id < MAX_ENTRY_ID:
            return False  # no such entry: never acknowledged (and no bitmap can hold it)
        bitmap = self._bitmaps.get(pos.ledger_id)
        return bitmap is not None and pos.entry_id in bitmap

    def deleted_in(self, ledger_id: int) -> tuple[int, BitMap | None]:
        """What :meth:`is_deleted` reads for the entries of one ledger, for a caller asking
        about many of them: (the highest entry id acknowledged cumulatively, -1 for none and
        ``MAX_ENTRY_ID`` for all; the ledger's individually acknowledged ids, live, or None).
        An entry id ``e`` in ``[0, MAX_ENTRY_ID)`` is deleted iff ``e <= through`` or ``e`` is
        in the bitmap. A :meth:`delete` or :meth:`mark_delete` may change both: ask again
        after one."""
        md = self._md
        if ledger_id < md.ledger_id:
            return MAX_ENTRY_ID, None
        through = md.entry_id if ledger_id == md.ledger_id else -1
        return through, self._bitmaps.get(ledger_id)

    def _exists(self, pos: Position) -> bool:
        """Is pos an entry the ledger has confirmed (at or before last_confirmed, inside its
        ledger's extent)? An ack of anything else is ignored (module docstring)."""
        lac = self._ledger.last_confirmed
        if lac is None or pos > lac or pos.entry_id < 0:
            return False
        return pos.entry_id < self._ledger.ledger_extent(pos.ledger_id)[0]

    def delete(self, positions: Iterable[Position]) -> None:
        """Individual acks. Positions at or before the mark-delete position are ignored, and so
        are positions of entries that do not exist (beyond last_confirmed or outside their
        ledger's extent: a client or admin naming a future id must not lose that message)."""
        md_ledger, md_entry = self._md.ledger_id, self._md.entry_id
        bitmaps = self._bitmaps
        lac = self._ledger.last_confirmed
        if lac is None:
            return
        extent = self._ledger.ledger_extent
        lac_ledger, lac_entry = lac
        if type(positions) is list and positions:
            # The usual ACK: ids of one ledger, every one an entry beyond mark-delete. Checked
            # for the whole list at once and added in one bitmap call (the loop below takes
            # anything else, id by id, with the same rules).
            ledger_id = positions[0][0]
            if md_ledger <= ledger_id <= lac_ledger and \
                    list(map(_LEDGER_ID, positions)).count(ledger_id) == len(positions):
                entry_ids = list(map(_ENTRY_ID, positions))
                low = md_entry + 1 if ledger_id == md_ledger else 0
                end = lac_entry + 1 if ledger_id == lac_ledger else extent(ledger_id)[0]
                if low <= min(entry_ids) and max(entry_ids) < end:
                    bitmap = bitmaps.get(ledger_id)
                    if bitmap is None:
                        bitmap = bitmaps[ledger_id] = BitMap()
                    bitmap.update(entry_ids)
                    self.individually_deleted.changed(ledger_id)
                    self._touch()
                    self.advance()
                    return
        # an earlier ledger's extent, looked up once per run of its ids (an ACK's are in order)
        extent_ledger, extent_end = -1, 0
        changed = self.individually_deleted.changed
        for pos in positions:
            ledger_id, entry_id = pos
            if ledger_id < md_ledger or (ledger_id == md_ledger and entry_id <= md_entry):
                continue
            if entry_id < 0 or ledger_id > lac_ledger:
                continue  # not an entry of this topic (yet): ignored, as Pulsar's asyncDelete
            if ledger_id == lac_ledger:
                if entry_id > lac_entry:
                    continue
            else:
                if ledger_id != extent_ledger:
                    extent_ledger, extent_end = ledger_id, extent(ledger_id)[0]
                if entry_id >= extent_end:
                    continue
            bitmap = bitmaps.get(ledger_id)
            if bitmap is None:
                bitmap = bitmaps[ledger_id] = BitMap()
            bitmap.add(entry_id)
            changed(ledger_id)
        self._touch()
        self.advance()

    def delete_entry_ids(self, ledger_id: int, entry_ids: Iterable[int] | BitMap) -> None:
        """Bulk individual acks of entry ids of one ledger (straight into its bitmap)."""
        if ledger_id < self._md.ledger_id:
            return
        incoming = entry_ids if isinstance(entry_ids, BitMap) else BitMap(
            e for e in entry_ids if 0 <= e < MAX_ENTRY_ID)
        end = self._ledger.ledger_extent(ledger_id)[0]
        if incoming and incoming.max() >= end:  # entries that do not exist (yet): ignored
            incoming = incoming.copy()
            incoming.remove_range(end, MAX_ENTRY_ID)
        if not incoming:
            return
        bitmap = self._bitmaps.get(ledger_id)
        if bitmap is None:
            bitmap = self._bitmaps[ledger_id] = BitMap()
        bitmap |= incoming
        if ledger_id == self._md.ledger_id and self._md.entry_id >= 0:
            bitmap.remove_range(0, self._md.entry_id + 1)
        self.individually_deleted.changed(ledger_id)
        self._touch()
        self.advance()

    def mark_delete(self, pos: Position) -> None:
        """Cumulative ack of every entry <= pos. A position beyond last_confirmed (or an entry
        id outside its ledger) is ignored, as Pulsar's asyncMarkDelete refuses it ("Invalid
        mark deleted position"): acknowledging a future id must not swallow future messages."""
        if pos <= self._md:
            return
        if pos.entry_id == -1:  # "before the first entry of pos.ledger_id"
            lac = self._ledger.last_confirmed
            if lac is None or pos > lac:
                return
        elif not self._exists(pos):
            return
        self._md = pos
        self._touch()
        self.advance(force_prune=True)

    def reset(self, pos: Position) -> None:
        """Next read is pos; mark-delete becomes the position just before it; acks at/after pos
        (and all individual acks) are cleared. The revision is the broker's to bump.

        A target beyond the end (after the entry that follows last_confirmed) becomes the end,
        as Pulsar's asyncResetCursor turns a position past every entry into "latest": the next
        read is the next message published, and no id the ledger never issued is stored."""
        ledger = self._ledger
        end = self._end_position()
        if pos.entry_id < 0:
            pos = Position(pos.ledger_id, 0)
        if pos >= end:
            pos = end
        else:
            entries = ledger.ledger_extent(pos.ledger_id)[0]
            if pos.entry_id >= entries:  # no such entry: the next one that exists (Pulsar's)
                pos = ledger.next_position(Position(pos.ledger_id, entries - 1))
        self._read = pos
        self._md = Position(pos.ledger_id, pos.entry_id - 1)
        for ledger_id in self._bitmaps:
            self.individually_deleted.changed(ledger_id)
        self._bitmaps.clear()
        self._touch()
        self.advance()

    def _end_position(self) -> Position:
        """The position the next published entry will get (or has, in a later ledger)."""
        ledger = self._ledger
        lac = ledger.last_confirmed
        if lac is None:
            return Position(ledger.current_ledger_id, 0)
        return ledger.next_position(lac)

    @property
    def backlog(self) -> int:
        """Entries after the mark-delete position, up to last_confirmed, not yet acknowledged."""
        ledger = self._ledger
        lac = ledger.last_confirmed
        if lac is None or lac <= self._md:
            return 0
        between = ledger.entries_between(self._md, lac)
        acked = 0
        for ledger_id, bitmap in self._bitmaps.items():
            if ledger_id < lac.ledger_id:
                acked += len(bitmap)
            elif ledger_id == lac.ledger_id:
                acked += bitmap.range_cardinality(0, lac.entry_id + 1)
        return max(0, between - acked)

    def advance(self, *, force_prune: bool = False) -> None:
        """Move mark-delete over acked or missing entries, then drop bitmaps it has passed.
        The ledger calls it when entries went missing (recovery, a corrupt read)."""
        ledger = self._ledger
        ledger_id, entry_id = self._md.ledger_id, self._md.entry_id
        bitmaps = self._bitmaps
        moved = force_prune
        while True:
            end, complete, missing = ledger.ledger_extent(ledger_id)
            if entry_id + 1 < end:
                nxt = entry_id + 1
                bitmap = bitmaps.get(ledger_id)
                if bitmap is not None and nxt in bitmap:
                    entry_id = min(_run_end(bitmap, nxt), end - 1)
                    moved = True
                    continue
                if missing is not None and nxt in missing:
                    entry_id = min(_run_end(missing, nxt), end - 1)
                    moved = True
                    continue
                break
            if not complete:
                break
            following = ledger.ledger_after(ledger_id)
            if following is None:
                break
            next_end, _, next_missing = ledger.ledger_extent(following)
            next_bitmap = bitmaps.get(following)
            if next_end == 0 or (next_bitmap is not None and 0 in next_bitmap) or (
                next_missing is not None and 0 in next_missing
            ):
                if next_end == 0 and following == ledger.current_ledger_id:
                    break
                ledger_id, entry_id = following, -1
                moved = True
                continue
            break
        if not moved:
            return
        self._touch()
        self._md = Position(ledger_id, entry_id)
        changed = self.individually_deleted.changed
        for key in [k for k in bitmaps if k < ledger_id]:
            del bitmaps[key]
            changed(key)
        bitmap = bitmaps.get(ledger_id)
        if bitmap is not None:
            changed(ledger_id)
            if entry_id >= 0:
                bitmap.remove_range(0, entry_id + 1)
            if not bitmap:
                del bitmaps[ledger_id]
        if self._read <= self._md:
            self._read = ledger.next_position(self._md)

    # -- persistence -----------------------------------------------------------------------

    def state(self, *, properties: bool = True) -> CursorState:
        """properties=False: without a copy of the properties (a save encodes them from
        their kept bytes)."""
        return CursorState(
            self.name, self._md, self._read, self._revision,
            self._properties.copy() if properties else {},
            {lid: bm for lid, bm in self._bitmaps.items() if bm},
        )

    async def flush(self) -> None:
        """Persist the current state now (durable when this returns). A retired (deleted)
        cursor is never written."""
        async with self._lock:
            since = self._dirty_since
            if since is None or self._retired:
                return
            self._dirty_since = None
            self._saving_since = since
            try:
                data = encoded_cursor(CursorState(self.name, self._md, self._read,
                                                  self._revision),
                                      self._properties.pieces(),
                                      self.individually_deleted.records())
                _, cancelled = await to_the_end(self._save(self.name, data,
                                                           self._referenced_ledger()))
            except BaseException as exc:
                self._saving_since = None
                # Changed meanwhile or not: the older change is the oldest unsaved one.
                current = self._dirty_since
                if current is None:
                    self._touch()   # dirty again: the next flush retries
                self._dirty_since = since if current is None else min(since, current)
                if isinstance(exc, Exception):
                    self.save_failures += 1
                    self.last_save_error = exc
                raise
            self._saving_since = None
            self.last_save_error = None
            self.persisted_size_bytes = data.size
            self.persist_count += 1
            if cancelled:   # the caller's cancel, taken once the write was over
                raise asyncio.CancelledError

    def _referenced_ledger(self) -> int:
        return max([self._md.ledger_id, self._read.ledger_id, *self._bitmaps])

    async def close(self) -> None:
        """Persist what is dirty, then stop. Idempotent."""
        if self._closed:
            return
        await self.flush()
        self._closed = True

    async def retire(self) -> None:
        """The cursor is being deleted: wait for a save in flight, and never save again."""
        self._closed = True
        async with self._lock:
            self._retired = True
            self._dirty_since = None

    @property
    def closed(self) -> bool:
        return self._closed

    def check_open(self) -> None:
        if self._closed:
            raise StorageError(f"cursor {self.name} is closed")
