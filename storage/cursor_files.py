"""CursorFiles: one managed ledger's cursors/ directory, two generations per cursor.

Owns the files ``cursors/<encoded name>.cur`` (newest generation) and ``.cur.prev`` (the
one before it); the cursor's own format is storage/cursor.py's. Blocking: called from the
store's I/O threads only, every file operation through FileOps.

save(name, data): write ``.cur.tmp`` (an EncodedCursor is joined and checksummed here, in the
I/O thread) and fsync it, rename ``.cur`` over ``.cur.prev``, rename
``.cur.tmp`` over ``.cur``, fsync the directory. A crash at any point leaves the newest or the
previous complete generation (between the renames only ``.cur.prev``); bit rot in the
newest leaves the previous one.

load(): per cursor, the newest generation that decodes; if neither does, the cursor's name
(from the file name, or from the damaged file's own header for hashed names) so the ledger
can recreate it at the earliest position: duplicates, never loss. A cursor whose name cannot
be recovered is reported as lost (the ledger then refuses to trim: its backlog is unknown).
Temporary files left by a crash are removed. Files an older version stored under a stem that
is no longer the name's (storage/names.py: a short name beginning ``h-``) are renamed to the
name's stem first, generation by generation (a crash in between leaves each generation under
one of the two stems, and the next load finishes the move).

scan_cursor_files(): what every cursor file (both generations) mentions, read at store open
without opening a managed ledger (opening starts a new ledger): the highest ledger id and the
snapshot ids the properties name (the store's open-time sweep of orphan snapshots).

remove(name): unlink ``.cur.prev`` first, then ``.cur``, then fsync the directory; a crash in
between leaves the newest generation (the delete did not happen), never an older one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from storage.cursor import CursorState, EncodedCursor, decode_cursor, peek_cursor_name
from storage.errors import CorruptRecordError
from storage.fileops import FileOps
from storage.names import (
    HASHED_PREFIX,
    decode_name,
    encode_name,
    legacy_plain_name,
    legacy_stem,
)

log = logging.getLogger("horae.storage")

CURRENT = ".cur"
PREVIOUS = ".cur.prev"
TEMPORARY = ".cur.tmp"

Fallback = Literal["none", "previous", "earliest", "lost"]


@dataclass(slots=True)
class LoadedCursor:
    """One cursor found on disk. state is None for "earliest" (recreate it at the earliest
    position) and "lost" (name unknown); corrupt lists the damaged files and why."""

    name: str | None
    state: CursorState | None
    fallback: Fallback
    stem: str
    corrupt: list[tuple[Path, int, str]]  # (path, size, reason)


class CursorFiles:
    def __init__(self, ops: FileOps, directory: Path, *, fsync: bool) -> None:
        self._ops = ops
        self.directory = directory
        self._fsync = fsync

    def _path(self, name: str, suffix: str) -> Path:
        return self.directory / (encode_name(name) + suffix)

    def save(self, name: str, data: bytes | EncodedCursor) -> None:
        ops = self._ops
        chunks = data.chunks() if isinstance(data, EncodedCursor) else (data,)
        current = self._path(name, CURRENT)
        tmp = self._path(name, TEMPORARY)
        fd = ops.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            for chunk in chunks:
                ops.write_all(fd, chunk)
            if self._fsync:
                ops.fsync(fd)
        finally:
            ops.close(fd)
        with contextlib.suppress(FileNotFoundError):
            ops.replace(current, self._path(name, PREVIOUS))
        ops.replace(tmp, current)
        if self._fsync:
            ops.fsync_dir(self.directory)

    def remove(self, name: str) -> None:
        removed = False
        for suffix in (PREVIOUS, CURRENT, TEMPORARY):
            try:
                self._ops.unlink(self._path(name, suffix))
                removed = True
            except FileNotFoundError:
                continue
        if removed and self._fsync:
            self._ops.fsync_dir(self.directory)

    def load(self) -> list[LoadedCursor]:
        stems = self._stems()
        legacy = {stem: name for stem in stems if stem.startswith(HASHED_PREFIX)
                  for name in [self._legacy_name(stem)] if name is not None}
        if legacy:
            for stem, name in legacy.items():
                self._move_stem(stem, encode_name(name))
            if self._fsync:
                self._ops.fsync_dir(self.directory)
            stems = self._stems()
        return [self._load_one(stem) for stem in sorted(stems)]

    def _stems(self) -> set[str]:
        stems: set[str] = set()
        for path in sorted(self.directory.iterdir()):
            stem, suffix = _split(path.name)
            if suffix == TEMPORARY or suffix is None:
                with contextlib.suppress(FileNotFoundError):
                    self._ops.unlink(path)  # an interrupted save, or a stray file
                continue
            stems.add(stem)
        return stems

    def _legacy_name(self, stem: str) -> str | None:
        """The cursor name when *stem* is an older version's stem for it (not encode_name's):
        read from the newest readable header, else from the stem when it cannot be a hash."""
        for suffix in (CURRENT, PREVIOUS):
            try:
                data = self._ops.read_file(self.directory / (stem + suffix))
            except FileNotFoundError:
                continue
            try:
                name = peek_cursor_name(data)
            except (CorruptRecordError, struct.error, UnicodeDecodeError):
                continue
            if encode_name(name) == stem:
                return None
            if legacy_stem(name) == stem:
                return name
        return legacy_plain_name(stem)

    def _move_stem(self, old: str, new: str) -> None:
        """Rename each generation of *old* to *new*, unless *new* has that generation already
        (written since, by this version: newer)."""
        for suffix in (CURRENT, PREVIOUS):
            source = self.directory / (old + suffix)
            if not source.exists():
                continue
            target = self.directory / (new + suffix)
            if target.exists():
                self._ops.unlink(source)
                log.info("storage: cursor file %s removed (%s is newer)", source.name, target.name)
            else:
                self._ops.replace(source, target)
                log.info("storage: cursor file %s renamed to %s", source.name, target.name)

    def _load_one(self, stem: str) -> LoadedCursor:
        corrupt: list[tuple[Path, int, str]] = []
        peeked: str | None = None
        for suffix, fallback in ((CURRENT, "none"), (PREVIOUS, "previous")):
            path = self.directory / (stem + suffix)
            try:
                data = self._ops.read_file(path)
            except FileNotFoundError:
                continue
            try:
                state = decode_cursor(data)
            except CorruptRecordError as exc:
                corrupt.append((path, len(data), str(exc)))
                peeked = peeked or _peek(data, stem)
                continue
            if encode_name(state.name) != stem:
                corrupt.append((path, len(data), f"names cursor {state.name!r}"))
                continue
            if corrupt or fallback != "none":
                state.persisted_size_bytes = 0  # not the newest generation: save it again
                return LoadedCursor(state.name, state, "previous", stem, corrupt)
            return LoadedCursor(state.name, state, "none", stem, corrupt)
        name = decode_name(stem) or peeked
        if name is None:
            return LoadedCursor(None, None, "lost", stem, corrupt)
        return LoadedCursor(name, None, "earliest", stem, corrupt)


def _split(file_name: str) -> tuple[str, str | None]:
    for suffix in (TEMPORARY, PREVIOUS, CURRENT):
        if file_name.endswith(suffix):
            return file_name[: -len(suffix)], suffix
    return file_name, None


def _peek(data: bytes, stem: str) -> str | None:
    """The name in a damaged cursor file's header, if it is the name the file is named for."""
    try:
        name = peek_cursor_name(data)
    except (CorruptRecordError, struct.error, UnicodeDecodeError):
        return None
    return name if encode_name(name) == stem else None


SnapshotKey = Callable[[str], bool]
"""Whether a cursor property of this key records a snapshot id (its decimal value): the
store's user says which properties are references (the broker's bucket keys), storage alone
cannot know."""


@dataclass(slots=True)
class CursorScan:
    """What the cursor files of a store mention (both generations), read at store open."""

    max_ledger_id: int = -1
    snapshot_ids: set[int] = field(default_factory=set)  # values of snapshot-key properties
    unreadable: list[Path] = field(default_factory=list)  # their references are unknown


def scan_cursor_files(ops: FileOps, ledger_directory: Path, into: CursorScan,
                      is_snapshot_key: SnapshotKey | None) -> None:
    """Blocking: add what a managed ledger's cursor files mention to into: the highest ledger
    id (the id allocator must never hand it out again) and, given is_snapshot_key, every
    snapshot id a property names."""
    directory = ledger_directory / "cursors"
    if not directory.is_dir():
        return
    for path in sorted(directory.iterdir()):
        if _split(path.name)[1] not in (CURRENT, PREVIOUS):
            continue
        try:
            state = decode_cursor(ops.read_file(path), bitmaps=False)  # ledger ids only
        except (CorruptRecordError, OSError):
            into.unreadable.append(path)
            continue
        into.max_ledger_id = max([into.max_ledger_id, state.mark_delete.ledger_id,
                                  state.read_position.ledger_id, *state.bitmaps])
        if is_snapshot_key is not None:
            into.snapshot_ids.update(int(value) for key, value in state.properties.items()
                                     if value.isdigit() and is_snapshot_key(key))
