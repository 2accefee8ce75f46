"""RelocatedEntries: pending delayed entries copied out of a ledger so the ledger can be trimmed.

Theory of operation
-------------------
A ledger whose entries are all acknowledged by every subscription except some delayed messages
due far ahead is *held only by pending delayed entries*. Those entries are copied forward,
original bytes and original positions, into side segments under the managed ledger's
``relocated/`` directory, one segment per (due-time window, ledger), so that a window's
segment becomes fully acknowledged at about one time and is deleted whole. Then the ledger's
segment file may be deleted while its :class:`~storage.ledger_state.LedgerState` stays in the
ledger list as a *ghost* (same entry count, no bytes): cursors keep their positions and
individual acks over it unchanged, and reads of its positions are served from here, with the
original position, so consumers receive and acknowledge the original message id.

Durability order (each step durable before the next; every crash state keeps every pending
entry somewhere):

1. ``write_copy``: the side segments, fsynced, and the directory fsynced. Killed here: the
   segments are orphans (no index names them) and :func:`load_relocated` deletes them; the
   ledger is untouched.
2. ``write_index``: ``<ledger>.idx`` (ledger id, entry count, created time and, per copied
   entry, its segment, offset, length and due time) written to a temporary file, fsynced,
   renamed, directory fsynced. Killed here: the ledger and the copy both exist; reads use the
   ledger; the next trim may delete it.
3. The ledger's segment is deleted by the managed ledger's trim (storage/ledger.py). After
   that, :func:`load_relocated` reports the ledger as a ghost (indexed, segment gone) and the
   managed ledger recreates its ghost state.

Record layout in a side segment: ``<I entry_id><I length><I crc32>`` then the entry bytes (the
ledger id is in the segment's name, offsets and due times in the index; 12 bytes a record keep
small messages' copies within a few percent of their size).

Releasing: :meth:`RelocatedEntries.release` drops entries every subscription has acknowledged;
a segment with no live entry left is deleted. The index file of a ledger goes when its ghost
leaves the ledger list (every cursor's mark-delete is past it). An index naming a segment that
is gone (released before a restart) loads without those entries: a segment is only deleted once
every entry in it was acknowledged by every subscription.

Owned by one ManagedLedger (loop side); writes and deletes run in the pool given (the store's
I/O thread), reads in the read pool. Imports
nothing above storage.positions.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import struct
import zlib
from collections.abc import Iterable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path

from pyroaring import BitMap

from storage.positions import Position

__all__ = ["DEFAULT_WINDOW_MS", "HEADER", "Copied", "RelocatedEntries", "RelocatedState",
           "load_relocated", "write_copy", "write_index"]

log = logging.getLogger("horae.storage")

HEADER = struct.Struct("<III")  # entry id (< 2**32, as cursors), length, crc32
#: Due-time window of one side segment (an hour: delays of months spread over a few thousand).
DEFAULT_WINDOW_MS = 3_600_000
DIRECTORY = "relocated"


@dataclass(frozen=True, slots=True)
class Copied:
    """Where one relocated entry lives."""

    segment: str
    offset: int     # of the entry bytes (after the header)
    length: int
    deliver_at: int


@dataclass(slots=True)
class RelocatedState:
    """What :func:`load_relocated` found (and what ``write_index`` made durable)."""

    #: indexed ledger id -> (entry count, created_ms)
    ledgers: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: ledger id -> entry id -> where its copy lives
    entries: dict[int, dict[int, Copied]] = field(default_factory=dict)
    #: side segment name -> its size in bytes
    segments: dict[str, int] = field(default_factory=dict)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_copy(directory: Path, ledger_id: int,
               records: Iterable[tuple[int, int, bytes]], window_ms: int,
               fsync: bool) -> tuple[dict[int, Copied], dict[str, int]]:
    """Step 1 (I/O thread): append ``(entry_id, deliver_at, data)`` records to the ledger's side
    segments by due-time window; durable before return. Returns where each entry went and the
    segments' sizes."""
    directory.mkdir(parents=True, exist_ok=True)
    by_window: dict[int, list[tuple[int, int, bytes]]] = {}
    for entry_id, deliver_at, data in records:
        by_window.setdefault(deliver_at // window_ms, []).append((entry_id, deliver_at, data))
    placed: dict[int, Copied] = {}
    sizes: dict[str, int] = {}
    for window, group in sorted(by_window.items()):
        name = f"{window:012d}-{ledger_id}.seg"
        chunks: list[bytes] = []
        offset = 0
        for entry_id, deliver_at, data in sorted(group, key=lambda r: (r[1], r[0])):
            header = HEADER.pack(entry_id, len(data), zlib.crc32(data))
            chunks.append(header)
            chunks.append(data)
            offset += HEADER.size
            placed[entry_id] = Copied(name, offset, len(data), deliver_at)
            offset += len(data)
        path = directory / name
        with open(path, "wb") as f:
            f.write(b"".join(chunks))
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        sizes[name] = offset
    if fsync:
        _fsync_dir(directory)
    return placed, sizes


def write_index(directory: Path, ledger_id: int, entries: int, created_ms: int,
                placed: dict[int, Copied], fsync: bool) -> None:
    """Step 2 (I/O thread): the ledger's index, atomically (temporary file, fsync, rename,
    directory fsync). From here on the ledger's segment may be deleted."""
    body = json.dumps({
        "ledger_id": ledger_id, "entries": entries, "created_ms": created_ms,
        "copies": [[e, c.segment, c.offset, c.length, c.deliver_at]
                   for e, c in sorted(placed.items())],
    }, separators=(",", ":")).encode()
    tmp = directory / f"{ledger_id}.idx.tmp"
    with open(tmp, "wb") as f:
        f.write(body)
        f.flush()
        if fsync:
            os.fsync(f.fileno())
    os.replace(tmp, directory / f"{ledger_id}.idx")
    if fsync:
        _fsync_dir(directory)


def load_relocated(ledger_directory: Path) -> RelocatedState:
    """I/O thread, at open: the indexes, their live entries and segments; orphan segments
    (copied but never indexed: killed between steps 1 and 2) and temporary files deleted."""
    state = RelocatedState()
    directory = ledger_directory / DIRECTORY
    if not directory.is_dir():
        return state
    names = {p.name for p in directory.iterdir()}
    present = {n: (directory / n).stat().st_size for n in names if n.endswith(".seg")}
    referenced: set[str] = set()
    for name in sorted(names):
        if name.endswith(".tmp"):
            (directory / name).unlink(missing_ok=True)
            continue
        if not name.endswith(".idx"):
            continue
        doc = json.loads((directory / name).read_bytes())
        ledger_id = int(doc["ledger_id"])
        state.ledgers[ledger_id] = (int(doc["entries"]), int(doc["created_ms"]))
        live: dict[int, Copied] = {}
        for entry_id, segment, offset, length, deliver_at in doc["copies"]:
            referenced.add(segment)
            if segment in present:
                live[int(entry_id)] = Copied(segment, int(offset), int(length), int(deliver_at))
        state.entries[ledger_id] = live
    for name, size in present.items():
        if name in referenced:
            state.segments[name] = size
        else:
            (directory / name).unlink(missing_ok=True)
    return state


def _read(directory: Path, wanted: list[tuple[int, Copied]]) -> list[tuple[int, bytes | None]]:
    out: list[tuple[int, bytes | None]] = []
    handles: dict[str, int] = {}
    try:
        for entry_id, c in wanted:
            fd = handles.get(c.segment)
            if fd is None:
                try:
                    fd = handles[c.segment] = os.open(directory / c.segment, os.O_RDONLY)
                except FileNotFoundError:
                    out.append((entry_id, None))
                    continue
            header = os.pread(fd, HEADER.size, c.offset - HEADER.size)
            data = os.pread(fd, c.length, c.offset)
            ok = len(header) == HEADER.size and len(data) == c.length
            if ok:
                got_entry, length, crc = HEADER.unpack(header)
                ok = got_entry == entry_id and length == c.length and zlib.crc32(data) == crc
            out.append((entry_id, data if ok else None))
    finally:
        for fd in handles.values():
            os.close(fd)
    return out


def _unlink(paths: list[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


class RelocatedEntries:
    """The relocated entries of one managed ledger (loop side; I/O in *pool*)."""

    def __init__(self, ledger_directory: Path, state: RelocatedState, *, fsync: bool,
                 loop: asyncio.AbstractEventLoop, pool: Executor,
                 read_pool: Executor | None = None,
                 window_ms: int = DEFAULT_WINDOW_MS) -> None:
        self.directory = ledger_directory / DIRECTORY
        self._fsync = fsync
        self._loop = loop
        self._pool = pool
        self._read_pool = read_pool or pool
        self._window_ms = window_ms
        self.ledgers = state.ledgers
        self._entries = state.entries
        self._segments = state.segments
        self._live: dict[str, int] = {}
        #: ledger id -> the entry ids with a live copy (for release by bitmap operations)
        self._ids: dict[int, BitMap] = {}
        for lid, live in self._entries.items():
            self._ids[lid] = BitMap(live)
            for c in live.values():
                self._live[c.segment] = self._live.get(c.segment, 0) + 1
        #: Ledgers whose own segment is gone (their state in the ledger list is a ghost).
        self.ghosts: set[int] = set()

    def is_relocated(self, ledger_id: int) -> bool:
        """Indexed: the ledger's segment may be deleted."""
        return ledger_id in self.ledgers

    def __contains__(self, pos: object) -> bool:
        return (isinstance(pos, Position)
                and pos.entry_id in self._entries.get(pos.ledger_id, {}))

    def __len__(self) -> int:
        return sum(len(v) for v in self._entries.values())

    @property
    def size_bytes(self) -> int:
        """Bytes of the side segments (records and their headers) and nothing else."""
        return sum(self._segments.values())

    def deliver_at(self, pos: Position) -> int | None:
        c = self._entries.get(pos.ledger_id, {}).get(pos.entry_id)
        return None if c is None else c.deliver_at

    async def relocate(self, ledger_id: int, entries: int, created_ms: int,
                       records: list[tuple[int, int, bytes]]) -> None:
        """Copy ``(entry_id, deliver_at, data)`` records of *ledger_id* (``entries`` entries
        in all), then index them, each durable before the next."""
        directory, fsync = self.directory, self._fsync
        placed, sizes = await self._loop.run_in_executor(
            self._pool, write_copy, directory, ledger_id, records, self._window_ms, fsync)
        await self._loop.run_in_executor(
            self._pool, write_index, directory, ledger_id, entries, created_ms, placed, fsync)
        self.ledgers[ledger_id] = (entries, created_ms)
        self._entries[ledger_id] = placed
        self._ids[ledger_id] = BitMap(placed)
        self._segments.update(sizes)
        for c in placed.values():
            self._live[c.segment] = self._live.get(c.segment, 0) + 1

    async def read(self, ledger_id: int, start_entry: int, end_entry: int,
                   max_entries: int) -> list[tuple[int, bytes]]:
        """Relocated entries of *ledger_id* with ids in [start_entry, end_entry), in id order,
        at most *max_entries* (copies failing their checks are left out)."""
        live = self._entries.get(ledger_id)
        if not live or max_entries <= 0:
            return []
        wanted = sorted((e, c) for e, c in live.items() if start_entry <= e < end_entry)
        wanted = wanted[:max_entries]
        if not wanted:
            return []
        got = await self._loop.run_in_executor(self._read_pool, _read, self.directory, wanted)
        for entry_id, data in got:
            if data is None:
                log.error("relocated entry %d:%d in %s failed its checks: not served",
                          ledger_id, entry_id, self.directory)
        return [(e, d) for e, d in got if d is not None]

    async def release(self, positions: Iterable[Position]) -> int:
        """Drop entries every subscription has acknowledged; delete segments left with none.
        Returns how many entries were dropped."""
        gone: list[Path] = []
        dropped = 0
        for pos in positions:
            live = self._entries.get(pos.ledger_id)
            c = None if live is None else live.pop(pos.entry_id, None)
            if c is None:
                continue
            dropped += 1
            self._ids[pos.ledger_id].discard(pos.entry_id)
            left = self._live[c.segment] - 1
            if left:
                self._live[c.segment] = left
            else:
                del self._live[c.segment]
                self._segments.pop(c.segment, None)
                gone.append(self.directory / c.segment)
        if gone:
            await self._loop.run_in_executor(self._pool, _unlink, gone)
        return dropped

    def live_positions(self) -> list[Position]:
        return [Position(lid, e) for lid, live in self._entries.items() for e in live]

    def live_ids(self) -> dict[int, BitMap]:
        """Ledger id -> entry ids with a live copy (the stored bitmaps: do not change them)."""
        return self._ids

    async def forget_ledger(self, ledger_id: int) -> None:
        """The ghost left the ledger list (every cursor is past it): its index and any segment
        still holding its entries go."""
        await self.release([Position(ledger_id, e) for e in list(self._entries.get(ledger_id, ()))])
        self.ledgers.pop(ledger_id, None)
        self._entries.pop(ledger_id, None)
        self._ids.pop(ledger_id, None)
        self.ghosts.discard(ledger_id)
        await self._loop.run_in_executor(
            self._pool, _unlink, [self.directory / f"{ledger_id}.idx"])
