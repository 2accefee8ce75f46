"""SnapshotStore: delayed-delivery bucket snapshots (PIP-195), one crash-safe file each.

Pulsar stores a bucket snapshot as a ledger whose entry 0 is the SnapshotMetadata and
entries 1..N the SnapshotSegments; Horae keeps the same numbering in one file per snapshot,
``snapshots/<id:020d>.snap``, ids drawn from the store-wide ledger id allocator (so they are
never reused). The bytes are opaque here (delayed_index.proto is the broker's business).

File format: b"HSNP" | version u8 | n_parts u32 | n_parts x (length u64, crc32c u32)
| header crc32c u32 | part 0 (metadata) | part 1 .. part N (segments).
create() writes a temporary file, fsyncs it, renames it into place and fsyncs the directory
before returning, so a snapshot id the broker has seen always names a complete file. A part
that fails its CRC raises CorruptRecordError; it is never returned.

A snapshot may carry a *summary* (a few opaque bytes, ``create(..., summary=)``), kept apart in
``summaries.log`` (:mod:`storage.snapshot_summaries`) so that a recovery can read every
snapshot's summary in one read: advisory, never synced, absent for a snapshot whose record was
lost (its reader then opens the snapshot).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import struct
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from pathlib import Path

from crc32c import crc32c

from storage.errors import CorruptRecordError, SnapshotNotFoundError
from storage.fileops import FileOps
from storage.ids import IdAllocator
from storage.snapshot_summaries import SummaryLog

_MAGIC = b"HSNP"
_HEAD = struct.Struct("<4sBI")
_PART = struct.Struct("<QI")
_U32 = struct.Struct("<I")

#: A snapshot file up to this size is read whole, in one read: a recovery reads the metadata
#: (and then the first segment) of thousands of small snapshots, and the syscalls of reading
#: the header, the table and the part apart cost more than copying a few kilobytes more.
WHOLE_READ_BYTES = 64 << 10


def snapshot_name(snapshot_id: int) -> str:
    return f"{snapshot_id:020d}.snap"


def _part(snapshot_id: int, index: int, read: Callable[[int, int], bytes]) -> bytes:
    """Part ``index`` of a snapshot file, ``read(length, offset)`` giving its bytes; the
    header and the part CRC-checked."""
    head = read(_HEAD.size, 0)
    if len(head) != _HEAD.size:
        raise CorruptRecordError(f"snapshot {snapshot_id}: short header")
    magic, _version, n_parts = _HEAD.unpack(head)
    if magic != _MAGIC or n_parts > 1 << 24:
        raise CorruptRecordError(f"snapshot {snapshot_id}: bad header")
    table = read(n_parts * _PART.size + 4, _HEAD.size)
    if len(table) != n_parts * _PART.size + 4:
        raise CorruptRecordError(f"snapshot {snapshot_id}: short header")
    (crc,) = _U32.unpack_from(table, n_parts * _PART.size)
    if crc32c(table[:-4], crc32c(head)) != crc:
        raise CorruptRecordError(f"snapshot {snapshot_id}: header CRC mismatch")
    if not 0 <= index < n_parts:
        raise SnapshotNotFoundError(f"snapshot {snapshot_id} has no part {index}")
    offset = _HEAD.size + len(table)
    for i in range(index):
        offset += _PART.unpack_from(table, i * _PART.size)[0]
    length, part_crc = _PART.unpack_from(table, index * _PART.size)
    part = read(length, offset)
    if len(part) != length or crc32c(part) != part_crc:
        raise CorruptRecordError(f"snapshot {snapshot_id} part {index}: CRC mismatch")
    return part


def encode_snapshot(parts: list[bytes]) -> bytes:
    table = b"".join(_PART.pack(len(p), crc32c(p)) for p in parts)
    head = _HEAD.pack(_MAGIC, 1, len(parts)) + table
    return b"".join([head, _U32.pack(crc32c(head)), *parts])


class SnapshotStore:
    def __init__(
        self, directory: Path, ops: FileOps, ids: IdAllocator, loop: asyncio.AbstractEventLoop,
        io_pool: Executor, *, fsync: bool = True,
    ) -> None:
        self.directory = directory
        self._ops = ops
        self._ids = ids
        self._loop = loop
        self._pool = io_pool
        self._fsync = fsync
        self._where = os.fspath(directory)
        # snapshot id -> file size in bytes, -1 until known (the first read, or size_bytes())
        self._sizes: dict[int, int] = {}
        self._summaries = SummaryLog(directory, ops)
        # one listing, no path objects and no stat: a store holds a snapshot per bucket, tens
        # of thousands, and a stat each was most of the store's open
        with contextlib.suppress(FileNotFoundError), os.scandir(directory) as entries:
            for entry in entries:
                name = entry.name
                if name.endswith(".snap"):
                    with contextlib.suppress(ValueError):
                        self._sizes[int(name[:-5])] = -1

    def ids(self) -> list[int]:
        return sorted(self._sizes)

    def _path(self, snapshot_id: int) -> Path:
        return self.directory / snapshot_name(snapshot_id)

    async def create(self, metadata: bytes, segments: list[bytes], summary: bytes = b"") -> int:
        """Store a snapshot; durable when this returns (its summary is not: module docstring).
        Returns its id."""
        snapshot_id = self._ids.allocate()
        data = encode_snapshot([bytes(metadata), *(bytes(s) for s in segments)])
        path = self._path(snapshot_id)

        def write() -> None:
            self._ids.ensure_durable(snapshot_id)
            self._ops.atomic_write(path, data, sync=self._fsync)
            if summary:
                self._summaries.append([(snapshot_id, summary)])

        await self._loop.run_in_executor(self._pool, write)
        self._sizes[snapshot_id] = len(data)
        return snapshot_id

    def _read_part(self, snapshot_id: int, index: int) -> bytes:
        """Blocking (IO pool): part ``index`` of a snapshot, CRC-checked."""
        got = self._read_parts(snapshot_id, [index])[0]
        if isinstance(got, Exception):
            raise got
        return got

    def _read_parts(self, snapshot_id: int, indexes: Sequence[int]) -> list[bytes | Exception]:
        """Blocking (IO pool): parts of one snapshot, CRC-checked, the file opened once (and,
        when small, read once); each result the part or its error."""
        try:
            return self._read_parts_of(snapshot_id, indexes)
        except Exception as exc:                # the file itself: every part fails
            return [exc] * len(indexes)

    def _read_parts_of(self, snapshot_id: int, indexes: Sequence[int]
                       ) -> list[bytes | Exception]:
        size = self._sizes.get(snapshot_id)
        if size is None:
            raise SnapshotNotFoundError(f"no snapshot {snapshot_id}")
        ops = self._ops
        try:    # a str path: recovery reads tens of thousands of these
            fd = ops.open(f"{self._where}/{snapshot_name(snapshot_id)}", os.O_RDONLY)
        except FileNotFoundError as exc:
            raise SnapshotNotFoundError(f"no snapshot {snapshot_id}") from exc
        try:
            if size < 0:                            # not known since the store's open
                size = os.fstat(fd).st_size
                if snapshot_id in self._sizes:
                    self._sizes[snapshot_id] = size
            if size <= WHOLE_READ_BYTES:
                whole = ops.pread(fd, size, 0)      # header, table and parts in one read

                def read(length: int, offset: int) -> bytes:
                    return whole[offset:offset + length]
            else:
                def read(length: int, offset: int) -> bytes:
                    return ops.pread(fd, length, offset)
            out: list[bytes | Exception] = []
            for index in indexes:
                try:
                    out.append(_part(snapshot_id, index, read))
                except (CorruptRecordError, SnapshotNotFoundError) as exc:
                    out.append(exc)
            return out
        finally:
            ops.close(fd)

    async def _load_part(self, snapshot_id: int, index: int) -> bytes:
        if snapshot_id not in self._sizes:
            raise SnapshotNotFoundError(f"no snapshot {snapshot_id}")
        return await self._loop.run_in_executor(self._pool, self._read_part, snapshot_id, index)

    async def load_parts(self, parts: Sequence[tuple[int, int]]) -> list[bytes | Exception]:
        """Several parts, ``(snapshot id, part index)`` (0 = metadata), read in one IO job:
        a recovery reading thousands of snapshots pays one hand-off per batch, not per part.
        Each result is the part's bytes or the error :meth:`load_metadata` /
        :meth:`load_segment` would raise for it (``SnapshotNotFoundError``,
        ``CorruptRecordError``, ``OSError``)."""

        def read_all() -> list[bytes | Exception]:
            # per part: one bad file fails only its own parts; neighbouring parts of one
            # snapshot (its metadata and first segment) are read with one open
            out: list[bytes | Exception] = []
            k, n = 0, len(parts)
            while k < n:
                snapshot_id = parts[k][0]
                end = k + 1
                while end < n and parts[end][0] == snapshot_id:
                    end += 1
                out.extend(self._read_parts(snapshot_id, [index for _, index in parts[k:end]]))
                k = end
            return out

        return await self._loop.run_in_executor(self._pool, read_all)

    async def summaries(self) -> dict[int, bytes]:
        """The summary of every snapshot that has one (one read of ``summaries.log``)."""
        live = frozenset(self._sizes)
        return await self._loop.run_in_executor(self._pool, self._summaries.read, live)

    async def add_summaries(self, items: Sequence[tuple[int, bytes]]) -> None:
        """Summaries of snapshots written without one (advisory: not synced)."""
        await self._loop.run_in_executor(self._pool, self._summaries.append, list(items))

    async def load_metadata(self, snapshot_id: int) -> bytes:
        return await self._load_part(snapshot_id, 0)

    async def load_segment(self, snapshot_id: int, index: int) -> bytes:
        """Segment index 1..N (Pulsar numbering: entry 0 is the metadata)."""
        if index < 1:
            raise SnapshotNotFoundError(f"segment index {index} < 1")
        return await self._load_part(snapshot_id, index)

    async def delete(self, snapshot_id: int) -> None:
        """Delete a snapshot (a no-op if it does not exist)."""
        self._sizes.pop(snapshot_id, None)
        path = self._path(snapshot_id)

        def remove() -> None:
            try:
                self._ops.unlink(path)
            except FileNotFoundError:
                return
            if self._fsync:
                self._ops.fsync_dir(path.parent)

        await self._loop.run_in_executor(self._pool, remove)

    def size_bytes(self, snapshot_id: int) -> int:
        """The snapshot file's size (a stat the first time, unless a read saw it)."""
        try:
            size = self._sizes[snapshot_id]
        except KeyError:
            raise SnapshotNotFoundError(f"no snapshot {snapshot_id}") from None
        if size < 0:
            try:
                size = os.stat(self._path(snapshot_id)).st_size
            except FileNotFoundError:
                raise SnapshotNotFoundError(f"no snapshot {snapshot_id}") from None
            if snapshot_id in self._sizes:
                self._sizes[snapshot_id] = size
        return size

    @property
    def total_size_bytes(self) -> int:
        total = 0
        for snapshot_id in list(self._sizes):
            with contextlib.suppress(SnapshotNotFoundError):
                total += self.size_bytes(snapshot_id)
        return total
