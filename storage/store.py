"""SegmentStore: the root of Horae's local storage.

On-disk layout under root:
  LOCK                          flock()ed by the process that has the store open
  LEDGER_ID                     high-water mark of ledger/snapshot ids (storage/ids.py)
  metadata.db (+ -wal, -shm)    MetadataStore (SQLite, WAL, synchronous=FULL)
  ledgers/<encoded name>/       one managed ledger (topic):
      NAME                      its full name (the directory name is only an encoding)
      <ledger_id:020d>.seg      one segment file per ledger (storage/segments.py)
      cursors/<encoded>.cur     one file per cursor (storage/cursor.py)
  snapshots/<id:020d>.snap      bucket snapshots (storage/snapshots.py)
  trash/                        managed ledgers being deleted (renamed here first, atomically)

Threads: one group-commit writer thread (all segment writes), one I/O thread (cursor files,
snapshots, id counter, deletes: serialised), read threads (uncached reads, recovery scans),
one SQLite thread. The event loop never touches disk.

Recovery happens lazily per managed ledger in open_ledger (scan, truncate torn tails, drop
corrupt records); everything dropped is logged, counted and listed in recovery_report.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

from storage.cache import EntryCache
from storage.config import StorageConfig
from storage.cursor import CursorState, decode_cursor
from storage.errors import CorruptRecordError, StorageError
from storage.fileops import FileOps
from storage.ids import IdAllocator
from storage.ledger import LedgerContext, ManagedLedger, _Ledger, recovered_ledger
from storage.metadata import MetadataStore
from storage.segments import RecoveryEvent, load_index, scan_segment
from storage.snapshots import SnapshotStore
from storage.writer import GroupCommitWriter, SegmentFile, write_index_logged

log = logging.getLogger("horae.storage")

_MAX_PLAIN_NAME = 180


def encode_name(name: str) -> str:
    """A file-name-safe, reversible encoding (no '/', no '.'); long names are hashed."""
    encoded = quote(name, safe="").replace(".", "%2E")
    if len(encoded) > _MAX_PLAIN_NAME or not encoded:
        return "h-" + hashlib.sha256(name.encode()).hexdigest()[:48]
    return encoded


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """Everything recovery (and later reads) dropped since the store was opened."""

    events: tuple[RecoveryEvent, ...]
    corrupt_records: int  # records that failed their checks (recovery scans and reads)
    truncated_bytes: int  # bytes cut off torn segment tails
    dropped_entries: int  # entry ids that are now missing because their record was bad
    corrupt_cursors: int  # cursor files that failed their CRC (state reset to a new cursor)


class SegmentStore:
    def __init__(
        self, root: Path, config: StorageConfig, ops: FileOps, ids: IdAllocator,
        names: dict[str, Path], metadata: MetadataStore,
    ) -> None:
        self.root = root
        self.config = config
        self._ops = ops
        self._ids = ids
        self._names = names
        self.metadata = metadata
        self._loop = asyncio.get_running_loop()
        self._read_pool = ThreadPoolExecutor(
            max_workers=max(1, config.read_threads), thread_name_prefix="horae-storage-read"
        )
        self._io_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="horae-storage-io")
        self.snapshots = SnapshotStore(
            root / "snapshots", ops, ids, self._loop, self._io_pool, fsync=config.fsync
        )
        self.writer = GroupCommitWriter(
            self._loop, ops, ids, fsync=config.fsync,
            max_delay_ms=config.group_commit_max_delay_ms,
            max_batch_entries=config.group_commit_max_batch_entries,
            prezero_bytes=config.segment_prezero_bytes,
            prezero_min_bytes=config.segment_prezero_min_bytes,
            index_pool=self._io_pool,
        )
        self.cache = EntryCache(config.entry_cache_bytes)
        self._open: dict[str, ManagedLedger] = {}
        self._opening: dict[str, asyncio.Lock] = {}
        self._events: list[RecoveryEvent] = []
        self.corrupt_records_total = 0
        self.truncated_bytes_total = 0
        self.dropped_entries_total = 0
        self.corrupt_cursors_total = 0
        self._closed = False
        self._ctx = LedgerContext(
            self._loop, config, ops, ids, self.writer, self.cache, self._read_pool,
            self._io_pool, self._report, self._ledger_closed,
        )
        self._flush_task: asyncio.Task[None] | None = None
        self._lock_fd = -1
        if config.mark_delete_rate_limit_per_sec > 0:
            self._flush_task = self._loop.create_task(self._flush_loop())

    @classmethod
    async def open(
        cls, root: Path, config: StorageConfig | None = None, *, file_ops: FileOps | None = None
    ) -> SegmentStore:
        root = Path(root)
        config = config or StorageConfig()
        ops = file_ops or FileOps()
        loop = asyncio.get_running_loop()
        lock_fd = await loop.run_in_executor(None, _lock_root, root)
        try:
            names, ids = await loop.run_in_executor(None, _prepare_root, root, ops, config.fsync)
            metadata = await MetadataStore.open(root / "metadata.db")
        except BaseException:
            os.close(lock_fd)
            raise
        store = cls(root, config, ops, ids, names, metadata)
        store._lock_fd = lock_fd
        return store

    # -- recovery reporting ----------------------------------------------------------------

    def _report(self, event: RecoveryEvent) -> None:
        self._events.append(event)
        if event.kind in ("corrupt_record", "corrupt_read"):
            self.corrupt_records_total += 1
            self.dropped_entries_total += len(event.entry_ids)
        elif event.kind == "truncated_tail":
            self.truncated_bytes_total += event.length
        elif event.kind == "corrupt_cursor":
            self.corrupt_cursors_total += 1
        log.warning("storage recovery: %s", event)

    @property
    def recovery_report(self) -> RecoveryReport:
        return RecoveryReport(
            tuple(self._events), self.corrupt_records_total, self.truncated_bytes_total,
            self.dropped_entries_total, self.corrupt_cursors_total,
        )

    # -- managed ledgers -------------------------------------------------------------------

    def ledger_names(self) -> list[str]:
        return sorted(self._names)

    def _directory(self, name: str) -> Path:
        return self.root / "ledgers" / encode_name(name)

    async def open_ledger(self, name: str) -> ManagedLedger:
        """Open (recovering it) and start a new ledger; the open one if already open."""
        if self._closed:
            raise StorageError("store is closed")
        lock = self._opening.setdefault(name, asyncio.Lock())
        async with lock:
            ml = self._open.get(name)
            if ml is not None:
                return ml
            directory = self._directory(name)
            recovered, cursors, events, unindexed = await self._loop.run_in_executor(
                self._read_pool, _load_ledger_dir, self._ops, directory, name, self.config.fsync
            )
            for event in events:
                self._report(event)
            for led in unindexed:  # scanned: (re)write their indexes in the I/O thread
                segment = led.segment
                segment.index_job = self._io_pool.submit(
                    write_index_logged, self._ops, segment.path, segment.ledger_id,
                    segment.write_offset, segment.created_ms, segment.format,
                    segment.offsets, segment.lengths, led.size_bytes, sync=self.config.fsync,
                )
            ml = ManagedLedger(self._ctx, name, directory, recovered, cursors)
            self._names[name] = directory
            self._open[name] = ml
            return ml

    def _ledger_closed(self, ml: ManagedLedger) -> None:
        if self._open.get(ml.name) is ml:
            del self._open[ml.name]

    @property
    def open_ledgers(self) -> dict[str, ManagedLedger]:
        return dict(self._open)

    async def delete_ledger(self, name: str) -> None:
        """Close (if open) and delete a managed ledger with its cursors. No-op if unknown."""
        ml = self._open.get(name)
        if ml is not None:
            await ml.close()
        directory = self._names.pop(name, None) or self._directory(name)
        for ledger_id in _segment_ids(directory):
            self.cache.drop_ledger(ledger_id)
        trash = self.root / "trash" / uuid.uuid4().hex
        ops, fsync = self._ops, self.config.fsync

        def remove() -> None:
            if not directory.exists():
                return
            ops.replace(directory, trash)  # atomic: the ledger is gone even if rmtree is cut short
            if fsync:
                ops.fsync_dir(directory.parent)
            shutil.rmtree(trash, ignore_errors=True)

        await self._loop.run_in_executor(self._io_pool, remove)

    # -- lifecycle -------------------------------------------------------------------------

    async def _flush_loop(self) -> None:
        period = 1.0 / self.config.mark_delete_rate_limit_per_sec
        while True:
            await asyncio.sleep(period)
            for ml in list(self._open.values()):
                try:
                    await ml.flush_cursors()
                except Exception:
                    log.exception("storage: persisting cursors of %s failed", ml.name)

    async def flush(self) -> None:
        """Persist every dirty cursor now."""
        for ml in list(self._open.values()):
            await ml.flush_cursors()

    async def close(self) -> None:
        """Close every managed ledger (persisting cursors), stop the threads. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._flush_task is not None:
            self._flush_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flush_task
        for ml in list(self._open.values()):
            try:
                await ml.close()
            except Exception:  # keep closing the rest: their cursors deserve a flush too
                log.exception("storage: closing %s failed", ml.name)
        await self.writer.stop()
        loop = self._loop
        await loop.run_in_executor(None, self._io_pool.shutdown, True)
        await loop.run_in_executor(None, self._read_pool.shutdown, True)
        await self.metadata.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = -1

    def stats(self) -> dict[str, int]:
        writer = self.writer
        return {
            "group_commits": writer.batches,
            "group_committed_entries": writer.batched_entries,
            "fsyncs": writer.fsyncs,
            "failed_fsyncs": writer.failed_fsyncs,
            "prezero_writes": writer.prezero_writes,
            "prezero_bytes": writer.prezero_bytes,
            "cache_bytes": self.cache.size_bytes,
            "cache_hits": self.cache.hits,
            "cache_misses": self.cache.misses,
            "corrupt_records": self.corrupt_records_total,
            "truncated_bytes": self.truncated_bytes_total,
        }


def _segment_ids(directory: Path) -> list[int]:
    out: list[int] = []
    if directory.is_dir():
        for path in directory.glob("*.seg"):
            with contextlib.suppress(ValueError):
                out.append(int(path.stem))
    return sorted(out)


def _lock_root(root: Path) -> int:
    """Blocking: take the store's exclusive lock, so two processes never share a store."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StorageError(f"storage at {root} is in use by another process") from None
    return fd


def _prepare_root(root: Path, ops: FileOps, fsync: bool) -> tuple[dict[str, Path], IdAllocator]:
    """Blocking: create the layout, finish interrupted deletes, find names and the max id."""
    for sub in ("ledgers", "snapshots", "trash"):
        ops.mkdir(root / sub, sync=fsync)
    for leftover in (root / "trash").iterdir():
        shutil.rmtree(leftover, ignore_errors=True)
    names: dict[str, Path] = {}
    max_seen = -1
    for directory in (root / "ledgers").iterdir():
        if not directory.is_dir():
            continue
        name_file = directory / "NAME"
        if name_file.exists():
            name = ops.read_file(name_file).decode()
        elif not directory.name.startswith("h-"):
            name = unquote(directory.name)
        else:
            log.warning("storage: %s has no NAME file; ignored", directory)
            continue
        names[name] = directory
        max_seen = max([max_seen, *_segment_ids(directory)])
    for path in (root / "snapshots").iterdir():
        if path.suffix == ".tmp":
            path.unlink()
            continue
        with contextlib.suppress(ValueError):
            max_seen = max(max_seen, int(path.stem))
    ids = IdAllocator.load(ops, root / "LEDGER_ID", max_seen)
    return names, ids


def _load_ledger_dir(
    ops: FileOps, directory: Path, name: str, fsync: bool
) -> tuple[list[_Ledger], list[CursorState], list[RecoveryEvent], list[_Ledger]]:
    """Blocking: recover every segment of a managed ledger and load its cursors."""
    ops.mkdir(directory / "cursors", sync=fsync)
    if not (directory / "NAME").exists():
        ops.atomic_write(directory / "NAME", name.encode(), sync=fsync)
    events: list[RecoveryEvent] = []
    recovered: list[_Ledger] = []
    unindexed: list[_Ledger] = []
    segment_ids = _segment_ids(directory)
    for leftover in directory.glob("*.idx*"):
        # An interrupted index write, or the index of a segment deleted after it was written.
        if leftover.suffix != ".idx" or not leftover.with_suffix(".seg").exists():
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
    for ledger_id in segment_ids:
        path = directory / f"{ledger_id:020d}.seg"
        indexed = load_index(ops, path, ledger_id)
        result = indexed or scan_segment(ops, path, ledger_id, truncate=True)
        for kind, offset, length, entry_ids in result.events:
            events.append(RecoveryEvent(kind, name, ledger_id, offset, length, entry_ids))
        if result.removed:
            ops.unlink(path)
            if fsync:
                ops.fsync_dir(directory)
            continue
        segment = SegmentFile(ledger_id, path, result.created_ms)
        segment.format = result.format
        segment.offsets = result.offsets
        segment.lengths = result.lengths
        segment.write_offset = result.valid_end
        missing = (
            [i for i, off in enumerate(result.offsets) if off < 0]
            if result.offsets.count(-1) else []
        )
        led = recovered_ledger(segment, result.size_bytes, missing)
        recovered.append(led)
        # A scanned segment gets its index (re)written; not one with a bad header: the index
        # would never match it.
        if indexed is None and not any(e[0] == "bad_header" for e in result.events):
            unindexed.append(led)
    cursors: list[CursorState] = []
    for path in sorted((directory / "cursors").iterdir()):
        if path.suffix != ".cur":
            path.unlink()  # an interrupted atomic_write's temporary file
            continue
        try:
            cursors.append(decode_cursor(ops.read_file(path)))
        except CorruptRecordError as exc:
            log.error("storage: cursor file %s is corrupt (%s); it is ignored", path, exc)
            events.append(RecoveryEvent("corrupt_cursor", name, -1, 0, path.stat().st_size))
    return recovered, cursors, events, unindexed
