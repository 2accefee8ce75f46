"""Recovery of one managed ledger's directory: segments, their indexes, cursor files.

Blocking; run by SegmentStore.open_ledger in a read thread, before the ManagedLedger exists.
A sealed segment whose record in the directory's sealed-segment manifest still matches the
listing and the segment's size is taken from the record without opening a file of it
(UNCHECKED: checked against its files at its first read, storage/sealed_checks.py); the open
appends the records the manifest lacked and rewrites it when it is mostly stale
(storage/sealed_manifest.py). For every other segment: one the writer fenced in this process
is first cut back to its last durably synced offset (and synced); then its persisted index is
used if it still matches, else the segment is scanned (torn tails cut, bad records dropped and
reported) and fdatasynced, so nothing a crash could still take away is served or replayed (an
index is only ever written after its segment's last fdatasync, so an indexed segment is
durable).
Cursor files are loaded with their fallbacks (storage/cursor_files.py). Leftover temporary
index files and indexes of vanished segments are removed.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from storage.cursor_files import CursorFiles, LoadedCursor
from storage.errors import PersistenceError
from storage.fileops import FileOps
from storage.ledger_state import LedgerState, recovered_ledger
from storage.sealed_manifest import (
    SealedRecord,
    append_records,
    read_manifest,
    rewrite_manifest,
    too_large,
)
from storage.segment_file import IndexResidency, SegmentFile
from storage.segments import RecoveryEvent, load_index, load_index_summary, scan_segment

log = logging.getLogger("horae.storage")


@dataclass(slots=True)
class RecoveredDir:
    ledgers: list[LedgerState]
    cursors: list[LoadedCursor]
    events: list[RecoveryEvent]
    unindexed: list[LedgerState]  # scanned: their indexes are to be (re)written


def _names(directory: Path) -> set[str]:
    """Every name in directory (one listing; empty if it is not a directory)."""
    try:
        with os.scandir(directory) as entries:
            return {entry.name for entry in entries}
    except (FileNotFoundError, NotADirectoryError):
        return set()


def _ids(names: Iterable[str]) -> list[int]:
    out: list[int] = []
    for name in names:
        if name.endswith(".seg"):
            with contextlib.suppress(ValueError):
                out.append(int(name[:-4]))
    return sorted(out)


def segment_ids(directory: Path) -> list[int]:
    return _ids(_names(directory))


def _size(path: str) -> int:
    """A file's size, -1 if it cannot be stat'ed (then the manifest's record is not trusted)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


def _keep_manifest(
    ops: FileOps, directory: Path, manifest: dict[int, SealedRecord], stored: int,
    to_record: list[SealedRecord], ledgers: list[LedgerState],
) -> None:
    """Bring the sealed-segment manifest up to date with what this open checked: append the
    records it lacked, or rewrite it when most of its records name segments gone since
    (trimmed, deleted). Advisory (storage/sealed_manifest.py): a failure is logged only."""
    try:
        if too_large(stored + len(to_record), len(ledgers)):
            latest = dict(manifest)
            latest.update((r.ledger_id, r) for r in to_record)
            rewrite_manifest(ops, directory, [latest[led.ledger_id] for led in ledgers
                                              if led.ledger_id in latest])
        else:
            append_records(ops, directory, to_record)
    except OSError as exc:
        log.warning("storage: updating the sealed-segment manifest of %s failed (%s)",
                    directory, exc)


def _cut_to_synced(ops: FileOps, path: Path, synced: int) -> None:
    """A segment fenced in this process: drop every byte after its last durable sync."""
    fd = ops.open(path, os.O_RDWR)
    try:
        if os.fstat(fd).st_size > synced:
            ops.ftruncate(fd, synced)
        ops.fsync(fd)
    finally:
        ops.close(fd)


def load_ledger_dir(
    ops: FileOps, directory: Path, name: str, fsync: bool, fenced_ends: Mapping[Path, int],
) -> RecoveredDir:
    """Blocking: recover every segment of a managed ledger and load its cursors. Raises
    PersistenceError if a segment fenced in this process cannot be cut back and synced."""
    ops.mkdir(directory / "cursors", sync=fsync)
    if not (directory / "NAME").exists():
        ops.atomic_write(directory / "NAME", name.encode(), sync=fsync)
    out = RecoveredDir([], [], [], [])
    names = _names(directory)  # one listing: the segments, their indexes, leftovers
    for leftover in [n for n in names if ".idx" in n]:
        # An interrupted index write, or the index of a segment deleted after it was written.
        stem, _, suffix = leftover.rpartition(".")
        if suffix != "idx" or not stem or stem + ".seg" not in names:
            with contextlib.suppress(FileNotFoundError):
                ops.unlink(directory / leftover)
            names.discard(leftover)
    where = os.fspath(directory)
    manifest, stored = read_manifest(ops, directory)
    to_record: list[SealedRecord] = []
    for ledger_id in _ids(names):
        stem = f"{ledger_id:020d}"
        synced = fenced_ends.get(directory / f"{stem}.seg") if fenced_ends else None
        record = manifest.get(ledger_id)
        if (
            record is not None and synced is None and not record.missing
            and f"{stem}.idx" in names and _size(f"{where}/{stem}.seg") == record.segment_size
        ):
            # The manifest's record still matches the listing and the segment's size: no
            # file of this segment is opened now; its first read checks them
            # (storage/sealed_checks.py) before anything of it is served.
            segment = SegmentFile(ledger_id, f"{where}/{stem}.seg", record.created_ms)
            segment.format = record.format
            segment.write_offset = segment.synced_offset = record.segment_size
            segment.index = IndexResidency.UNCHECKED
            out.ledgers.append(
                recovered_ledger(segment, record.entries, record.size_bytes, []))
            continue
        path = directory / f"{stem}.seg"
        if synced is not None:
            try:
                _cut_to_synced(ops, path, synced)
            except OSError as exc:
                raise PersistenceError(
                    f"segment {path.name} of {name} failed a sync and cannot be cut back to "
                    f"its last synced offset {synced}: {exc}"
                ) from exc
            with contextlib.suppress(FileNotFoundError):
                ops.unlink(path.with_suffix(".idx"))
            names.discard(f"{stem}.idx")
        summary = (
            load_index_summary(ops, f"{where}/{stem}.seg", f"{where}/{stem}.idx", ledger_id)
            if f"{stem}.idx" in names else None
        )
        if summary is not None and not summary.missing:
            # Indexed, durable (its index was written after its last sync), nothing missing:
            # no arrays are built; the IndexPager pages them in for reads, so opening a huge
            # ledger holds one segment's index at a time.
            checked = SealedRecord(ledger_id, summary.entries, summary.size_bytes,
                                   summary.created_ms, summary.valid_end, summary.format, 0)
            if checked != record:
                to_record.append(checked)
            segment = SegmentFile(ledger_id, path, summary.created_ms)
            segment.format = summary.format
            segment.write_offset = segment.synced_offset = summary.valid_end
            segment.page_out()
            out.ledgers.append(recovered_ledger(segment, summary.entries, summary.size_bytes, []))
            continue
        # An index with missing entries: its arrays give their ids.
        indexed = load_index(ops, path, ledger_id) if summary is not None else None
        # A scanned segment is synced by the scan (before anything in it is served or
        # replayed); an indexed one is durable (its index was written after its last sync).
        result = indexed or scan_segment(ops, path, ledger_id, truncate=True, sync=fsync)
        for kind, offset, length, entry_ids in result.events:
            out.events.append(RecoveryEvent(kind, name, ledger_id, offset, length, entry_ids))
        if result.removed:
            ops.unlink(path)
            if fsync:
                ops.fsync_dir(directory)
            continue
        segment = SegmentFile(ledger_id, path, result.created_ms)
        segment.format = result.format
        segment.offsets = result.offsets
        segment.lengths = result.lengths
        segment.write_offset = segment.synced_offset = result.valid_end
        # An index's header counts its missing ids (decode_index checked it); a scan's not.
        count = result.missing if result.missing >= 0 else result.offsets.count(-1)
        missing = [i for i, off in enumerate(result.offsets) if off < 0] if count else []
        led = recovered_ledger(segment, result.entries, result.size_bytes, missing)
        out.ledgers.append(led)
        if indexed is not None:
            # Durable on disk: keep no arrays (the IndexPager pages them in for reads), so
            # opening a huge ledger holds one segment's index at a time.
            segment.page_out()
        # A scanned segment gets its index (re)written; not one with a bad header: the index
        # would never match it.
        if indexed is None and not any(e[0] == "bad_header" for e in result.events):
            out.unindexed.append(led)
    _keep_manifest(ops, directory, manifest, stored, to_record, out.ledgers)
    out.cursors = CursorFiles(ops, directory / "cursors", fsync=fsync).load()
    for found in out.cursors:
        label = found.name if found.name is not None else found.stem
        for path, size, reason in found.corrupt:
            out.events.append(RecoveryEvent("corrupt_cursor", name, -1, 0, size,
                                            detail=f"{path.name}: {reason}"))
        if found.fallback != "none":
            out.events.append(RecoveryEvent("cursor_fallback", name, -1, 0, 0,
                                            detail=f"{label}: {found.fallback}"))
    return out
