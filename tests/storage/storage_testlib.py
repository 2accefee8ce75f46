"""Helpers shared by the storage tests (imported by file name; no conftest needed)."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import struct
from collections.abc import Sequence
from pathlib import Path

from crc32c import crc32c
from pyroaring import BitMap

from storage import SegmentStore, StorageConfig
from storage.fileops import FileOps
from storage.names import encode_name
from storage.positions import Position
from storage.segments import (
    SEGMENT_MAGIC_V1,
    encode_file_header,
    encode_record_header,
    record_crc,
    segment_name,
)


class FaultyFileOps(FileOps):
    """A file layer whose fdatasync / writev / pwrite can be made to fail with EIO
    (pwrite is only used by the writer to pre-zero segments)."""

    def __init__(self) -> None:
        self.fail_fdatasync = False
        self.fail_writev = False
        self.fail_pwrite = False
        self.fdatasync_calls = 0
        self.pwrite_calls = 0

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        self.pwrite_calls += 1
        if self.fail_pwrite:
            raise OSError(errno.EIO, "injected EIO (pwrite)")
        return super().pwrite(fd, data, offset)

    def fdatasync(self, fd: int) -> None:
        self.fdatasync_calls += 1
        if self.fail_fdatasync:
            raise OSError(errno.EIO, "injected EIO (fdatasync)")
        super().fdatasync(fd)

    def writev(self, fd: int, buffers: Sequence[bytes | memoryview]) -> int:
        if self.fail_writev:
            raise OSError(errno.EIO, "injected EIO (writev)")
        return super().writev(fd, buffers)


def ledger_dir(root: Path, name: str) -> Path:
    return root / "ledgers" / encode_name(name)


def write_segment(directory: Path, ledger_id: int, payloads: Sequence[bytes], *,
                  zero_tail: int = 0) -> Path:
    """Write a complete segment file directly (fast bulk setup for big-state tests), with
    zero_tail bytes of zeros after the records (what the writer pre-zeroes ahead)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / segment_name(ledger_id)
    parts = [encode_file_header(ledger_id, 0)]
    for entry_id, data in enumerate(payloads):
        parts.append(encode_record_header(entry_id, data, ledger_id=ledger_id))
        parts.append(data)
    parts.append(bytes(zero_tail))
    path.write_bytes(b"".join(parts))
    return path


def write_segment_v1(directory: Path, ledger_id: int, payloads: Sequence[bytes]) -> Path:
    """A segment in format 1 (magic HORAESG1, length field = data size), as older code wrote."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / segment_name(ledger_id)
    head = struct.pack("<8sQQI", SEGMENT_MAGIC_V1, ledger_id, 0, 0)
    parts = [head, struct.pack("<I", crc32c(head))]
    for entry_id, data in enumerate(payloads):
        parts.append(struct.pack("<IIQ", len(data), record_crc(len(data), entry_id, data),
                                 entry_id))
        parts.append(data)
    path.write_bytes(b"".join(parts))
    return path


def zero_range(path: Path, start: int, end: int) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        os.pwrite(fd, bytes(end - start), start)
    finally:
        os.close(fd)


def segment_paths(root: Path, name: str) -> list[Path]:
    return sorted(ledger_dir(root, name).glob("*.seg"))


def copy_store(src: Path, dst: Path) -> Path:
    """Copy a store, possibly live (as a crash leaves it): a file that vanishes meanwhile (an
    index's temporary file renamed by the I/O thread) is skipped, as a crash would lose it."""

    def copy(s: str, d: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            shutil.copy2(s, d)

    shutil.copytree(src, dst, copy_function=copy)
    return dst


def flip_bit(path: Path, byte_offset: int, bit: int) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        (byte,) = os.pread(fd, 1, byte_offset)
        os.pwrite(fd, bytes([byte ^ (1 << bit)]), byte_offset)
    finally:
        os.close(fd)


async def open_store(root: Path, **kw: object) -> SegmentStore:
    """A segment store at *root* with these StorageConfig fields (the rest defaults)."""
    return await SegmentStore.open(root, StorageConfig(**kw))  # type: ignore[arg-type]


class ExtentLedgers:
    """A cursor's LedgerView of ledgers of fixed sizes (ledger id -> entries): the last one is
    current, every other one sealed; an id not among them no longer exists."""

    def __init__(self, extents: dict[int, int]) -> None:
        self.extents = extents
        self.order = sorted(extents)
        self.current_ledger_id = self.order[-1]
        self.last_confirmed = Position(self.current_ledger_id, extents[self.current_ledger_id] - 1)

    def ledger_extent(self, ledger_id: int) -> tuple[int, bool, BitMap | None]:
        return self.extents.get(ledger_id, 0), ledger_id != self.current_ledger_id, None

    def ledger_after(self, ledger_id: int) -> int | None:
        return next((lid for lid in self.order if lid > ledger_id), None)

    def entries_between(self, start_exclusive: Position, end_inclusive: Position) -> int:
        def flat(p: Position) -> int:
            before = sum(n for lid, n in self.extents.items() if lid < p.ledger_id)
            return before + min(p.entry_id + 1, self.extents.get(p.ledger_id, 0))
        return max(0, flat(end_inclusive) - flat(start_exclusive))

    def next_position(self, pos: Position) -> Position:
        if pos.entry_id + 1 < self.extents.get(pos.ledger_id, 0):
            return Position(pos.ledger_id, pos.entry_id + 1)
        following = self.ledger_after(pos.ledger_id)
        return Position(following, 0) if following is not None else \
            Position(pos.ledger_id, pos.entry_id + 1)
