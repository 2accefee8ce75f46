"""SegmentStore: the root of Horae's local storage.

On-disk layout under root:
  LOCK                          flock()ed by the process that has the store open
  LEDGER_ID                     high-water mark of ledger/snapshot ids (storage/ids.py)
  metadata.db (+ -wal, -shm)    MetadataStore (SQLite, WAL, synchronous=FULL)
  ledgers/<encoded name>/       one managed ledger (topic):
      NAME                      its full name (the directory name is only an encoding)
      <ledger_id:020d>.seg      one segment file per ledger (storage/segments.py)
      cursors/<encoded>.cur     one file per cursor (storage/cursor.py)
      relocated/<window>-<ledger_id>.seg, <ledger_id>.idx
                                pending delayed entries copied out of trimmed ledgers
                                (storage/relocation.py)
  snapshots/<id:020d>.snap      bucket snapshots (storage/snapshots.py)
  trash/                        managed ledgers being deleted (renamed here first, atomically)

Threads: one group-commit writer thread (all segment writes), one I/O thread (cursor files,
snapshots, id counter, deletes: serialised), read threads (uncached reads, recovery scans),
one SQLite thread. The event loop never touches disk.

Recovery happens lazily per managed ledger in open_ledger (scan, truncate torn tails, drop
corrupt records); everything dropped is logged, counted and listed in recovery_report.

Lifecycle and races: one asyncio lock per managed ledger name serialises open_ledger and
delete_ledger of that name; close() marks the store closed first, and an open_ledger that
was recovering meanwhile refuses to register its ledger (LedgerClosedError), so close never
leaves a ledger behind. Disk usage is watched by storage/diskusage.py (read-only mode).
stats() is one typed StorageStats value for the broker's /metrics; health_problems() words
what is wrong (read-only, failing cursor saves, trim-unsafe ledgers, fenced ledgers).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import shutil
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from storage.cache import EntryCache
from storage.cache_eviction import CacheEviction
from storage.config import StorageConfig
from storage.cursor_files import CursorScan, SnapshotKey, scan_cursor_files
from storage.diskusage import DiskMonitor, MeasureSpace, statvfs_space
from storage.errors import LedgerClosedError, StorageError
from storage.fileops import FileOps
from storage.handoff import stats as handoff_stats
from storage.ids import IdAllocator
from storage.index_pages import IndexPager
from storage.ledger import LedgerContext, ManagedLedger
from storage.limits import raise_nofile_limit
from storage.metadata import MetadataStore
from storage.names import HASHED_PREFIX, decode_name, encode_name, legacy_plain_name
from storage.pacing import sleep_to_beat
from storage.read_fds import ReadFds
from storage.recovery import RecoveredDir, load_ledger_dir, segment_ids
from storage.relocation import load_relocated
from storage.segments import RecoveryEvent
from storage.shadow import ShadowLedger
from storage.snapshots import SnapshotStore
from storage.stats import StorageStats
from storage.sync_stage import CompletionScope
from storage.to_the_end import finish
from storage.writer import GroupCommitWriter

log = logging.getLogger("horae.storage")

@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """Everything recovery (and later reads) dropped since the store was opened."""

    events: tuple[RecoveryEvent, ...]
    corrupt_records: int  # records that failed their checks (recovery scans and reads)
    truncated_bytes: int  # bytes cut off torn segment tails
    dropped_entries: int  # entry ids that are now missing because their record was bad
    corrupt_cursors: int  # cursor files that failed their checks
    cursor_fallbacks: int  # cursors recovered from a previous generation / the earliest position


@dataclass(frozen=True, slots=True)
class OrphanSweep:
    """The open-time sweep of orphan snapshots (SegmentStore.open's is_snapshot_key): what
    the cursor files (both generations) name, what went, and what was kept because some
    cursor file could not be read (its references are unknown)."""

    referenced: frozenset[int]  # snapshot ids some cursor property names
    removed: tuple[int, ...]  # stored snapshots no cursor names: deleted
    kept: tuple[int, ...]  # orphans kept while a cursor file is unreadable
    unreadable: tuple[Path, ...]  # cursor files that did not decode


class SegmentStore:
    def __init__(
        self, root: Path, config: StorageConfig, ops: FileOps, ids: IdAllocator,
        names: dict[str, Path], metadata: MetadataStore,
        measure_space: MeasureSpace = statvfs_space,
        completion_scope: CompletionScope | None = None,
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
        self._cursor_pool = ThreadPoolExecutor(
            max_workers=max(1, config.cursor_save_threads),
            thread_name_prefix="horae-storage-cursor",
        )
        self.snapshots = SnapshotStore(
            root / "snapshots", ops, ids, self._loop, self._io_pool, fsync=config.fsync
        )
        self.writer = GroupCommitWriter(
            self._loop, ops, ids, fsync=config.fsync,
            max_delay_ms=config.group_commit_max_delay_ms,
            max_batch_entries=config.group_commit_max_batch_entries,
            prezero_bytes=config.segment_prezero_bytes,
            prezero_min_bytes=config.segment_prezero_min_bytes,
            prezero_max_batch_bytes=config.segment_prezero_max_batch_bytes,
            index_pool=self._io_pool,
            max_open_segments=config.max_open_segment_files,
            early_sync_bytes=config.group_commit_early_sync_bytes,
            completion_scope=completion_scope,
        )
        self.cache = EntryCache(config.entry_cache_bytes)
        self.cache_eviction = CacheEviction(
            self._loop, self.cache, threshold_s=config.entry_cache_eviction_threshold_s,
            interval_s=config.entry_cache_eviction_interval_s)
        self.pager = IndexPager(self._loop, ops, self._read_pool, config.index_cache_bytes)
        self.writer.index_hook = self.pager.watch
        #: Descriptors for reads the page cache answers on the loop (storage/read_fds.py).
        self.read_fds = ReadFds(self._loop, ops, self._read_pool)
        self._open: dict[str, ManagedLedger] = {}
        self._opening: dict[str, asyncio.Lock] = {}
        self._events: list[RecoveryEvent] = []
        self.corrupt_records_total = 0
        self.truncated_bytes_total = 0
        self.dropped_entries_total = 0
        self.corrupt_cursors_total = 0
        self.cursor_fallbacks_total = 0
        self.appends_refused_read_only = 0  # of closed managed ledgers (open ones count theirs)
        self._closed = False
        self.disk = DiskMonitor(
            self._loop, root, high=config.disk_usage_threshold,
            low=config.disk_usage_lwm_threshold,
            interval_s=config.disk_check_interval_ms / 1000.0, measure=measure_space,
        )
        self.writer.on_no_space = self._no_space
        # Ledgers a cursor of which reported unsaved changes since their last flush: the
        # rate-limited flush visits these, not every open ledger (10,000 idle topics cost
        # nothing between flushes).
        self._dirty_cursors: set[ManagedLedger] = set()
        self._ctx = LedgerContext(
            self._loop, config, ops, ids, self.writer, self.cache, self._read_pool,
            self._io_pool, self._cursor_pool, self.disk, self.pager, self.read_fds,
            self._report,
            self._ledger_closed, self._dirty_cursors.add,
        )
        self._flush_task: asyncio.Task[None] | None = None
        self._lock_fd = -1
        self.orphan_sweep: OrphanSweep | None = None
        """What open()'s sweep of orphan snapshots did (None without is_snapshot_key)."""
        if config.mark_delete_rate_limit_per_sec > 0:
            self._flush_task = self._loop.create_task(self._flush_loop())

    @classmethod
    async def open(
        cls, root: Path, config: StorageConfig | None = None, *, file_ops: FileOps | None = None,
        measure_space: MeasureSpace = statvfs_space, is_snapshot_key: SnapshotKey | None = None,
        completion_scope: CompletionScope | None = None,
    ) -> SegmentStore:
        """Open (creating) the store at root. measure_space: how disk usage is measured
        (tests inject a fake); the first measurement is taken before this returns.
        is_snapshot_key: which cursor properties record snapshot ids (the broker's bucket
        keys); given it, snapshots no such property names are deleted before this returns
        (_prepare_root; the outcome is orphan_sweep). Without it every snapshot is kept.
        completion_scope: what each group commit's outcomes are told inside, on the loop
        (storage/sync_stage.py; the broker holds its connections' writes meanwhile)."""
        root = Path(root)
        config = config or StorageConfig()
        ops = file_ops or FileOps()
        loop = asyncio.get_running_loop()
        lock_fd = await loop.run_in_executor(None, _lock_root, root)
        try:
            names, ids, sweep = await loop.run_in_executor(
                None, _prepare_root, root, ops, config.fsync, is_snapshot_key
            )
            metadata = await MetadataStore.open(root / "metadata.db")
        except BaseException:
            os.close(lock_fd)
            raise
        store = cls(root, config, ops, ids, names, metadata, measure_space, completion_scope)
        store._lock_fd = lock_fd
        store.orphan_sweep = sweep
        if config.disk_usage_threshold < 1:
            await store.disk.check()
            store.disk.start()
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
        elif event.kind == "cursor_fallback":
            self.cursor_fallbacks_total += 1
        log.warning("storage recovery: %s", event)

    @property
    def recovery_report(self) -> RecoveryReport:
        return RecoveryReport(
            tuple(self._events), self.corrupt_records_total, self.truncated_bytes_total,
            self.dropped_entries_total, self.corrupt_cursors_total, self.cursor_fallbacks_total,
        )

    # -- managed ledgers -------------------------------------------------------------------

    def ledger_names(self) -> list[str]:
        return sorted(self._names)

    def has_ledger(self, name: str) -> bool:
        """Whether the store knows the managed ledger *name* (O(1): a topic lookup asks)."""
        return name in self._names

    def _directory(self, name: str) -> Path:
        return self.root / "ledgers" / encode_name(name)

    async def open_ledger(self, name: str) -> ManagedLedger:
        """Open (recovering it) and start a new ledger; the open one if already open."""
        self._check_open()
        async with self._name_lock(name):
            self._check_open()
            ml = self._open.get(name)
            if ml is not None:
                return ml
            directory = self._directory(name)
            found = await self._recover(directory, name)
            self._check_open()  # close() began while reading: its pools may be shut down
            for event in found.events:
                self._report(event)
            for led in found.unindexed:  # scanned: (re)write their indexes in the I/O thread
                self.writer.submit_index(led.segment, led.size_bytes)
            relocated = await finish(self._loop.run_in_executor(
                self._read_pool, load_relocated, directory))
            self._check_open()  # close() began while recovering: register nothing
            ml = ManagedLedger(self._ctx, name, directory, found.ledgers, found.cursors,
                               relocated)
            self._names[name] = directory
            self._open[name] = ml
            return ml

    async def open_shadow_ledger(self, name: str, source: ManagedLedger) -> ManagedLedger:
        """Open *name* as a shadow of the open *source* (storage/shadow.py): the source's
        entries, the shadow's own cursors (recovered from its directory); the open one if
        already open. The caller closes it before it closes the source."""
        self._check_open()
        async with self._name_lock(name):
            self._check_open()
            ml = self._open.get(name)
            if ml is not None:
                return ml
            if source.closed:
                raise LedgerClosedError(f"managed ledger {source.name} is closed")
            directory = self._directory(name)
            found = await self._recover(directory, name)
            self._check_open()
            ml = ShadowLedger(self._ctx, name, directory, source, found.cursors)
            self._names[name] = directory
            self._open[name] = ml
            return ml

    async def _recover(self, directory: Path, name: str) -> RecoveredDir:
        """Recover a ledger directory in a read thread, under the name's lock. To its end even
        if the caller is cancelled (a topic load's request task, when its connection goes): the
        recovery goes on in its thread (cutting segments back, removing leftovers, writing the
        sealed manifest), and the next open of the name would recover the directory beside it.
        The cancel is raised after."""
        return await finish(self._loop.run_in_executor(
            self._read_pool, load_ledger_dir, self._ops, directory, name,
            self.config.fsync, self.writer.fenced_ends,
        ))

    def _no_space(self) -> None:
        """Writer thread: a write failed with ENOSPC; measure disk usage now."""
        with contextlib.suppress(RuntimeError):  # the loop is closed
            self._loop.call_soon_threadsafe(self.disk.check_soon)

    def _check_open(self) -> None:
        if self._closed:
            raise LedgerClosedError("store is closed")

    def _name_lock(self, name: str) -> asyncio.Lock:
        return self._opening.setdefault(name, asyncio.Lock())

    def _ledger_closed(self, ml: ManagedLedger) -> None:
        if self._open.get(ml.name) is ml:
            del self._open[ml.name]
            self.appends_refused_read_only += ml.appends_refused_read_only

    @property
    def open_ledgers(self) -> dict[str, ManagedLedger]:
        return dict(self._open)

    async def delete_ledger(self, name: str) -> None:
        """Close (if open) and delete a managed ledger with its cursors. No-op if unknown.
        Serialised with open_ledger of the same name."""
        async with self._name_lock(name):
            # To its end under the lock even if the caller is cancelled (the broker's close
            # cancels the housekeeping that deletes inactive topics): the removal in the I/O
            # thread goes on regardless, and an open of the same name beside it would recover
            # the doomed directory and append into it as it goes.
            await finish(self._delete_locked(name))

    async def _delete_locked(self, name: str) -> None:
        ml = self._open.get(name)
        if ml is not None:
            await ml.close()
        directory = self._names.pop(name, None) or self._directory(name)
        # Listing the directory is disk I/O: the io pool does it, the loop drops the cache.
        for ledger_id in await self._loop.run_in_executor(self._io_pool, segment_ids, directory):
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
            await sleep_to_beat(period)   # with the broker's other periodic work
            # Only ledgers whose cursors reported unsaved changes: idle topics cost nothing.
            if not self._dirty_cursors:
                continue
            reported = list(self._dirty_cursors)
            self._dirty_cursors.clear()   # the same set: the ledgers' context adds to it
            ledgers = [ml for ml in reported if ml.cursor_set.any_dirty]
            if not ledgers:
                continue
            results = await asyncio.gather(*(ml.flush_cursors() for ml in ledgers),
                                           return_exceptions=True)
            for ml, result in zip(ledgers, results, strict=True):
                if isinstance(result, Exception):
                    log.error("storage: persisting cursors of %s failed: %s", ml.name, result)
                if ml.cursor_set.any_dirty and not ml.closed:
                    self._dirty_cursors.add(ml)   # failed, or a save was in flight: next time

    async def flush(self) -> None:
        """Persist every dirty cursor now (cursors in parallel over the cursor threads)."""
        ledgers = list(self._open.values())
        results = await asyncio.gather(*(ml.flush_cursors() for ml in ledgers),
                                       return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def close(self) -> None:
        """Close every managed ledger (persisting cursors), stop the threads. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await self.disk.stop()
        self.cache_eviction.close()
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
        for fd in self.read_fds.close():   # in the pool: a close may free a trimmed file
            await loop.run_in_executor(self._read_pool, self._ops.close, fd)
        await loop.run_in_executor(None, self._cursor_pool.shutdown, True)
        await loop.run_in_executor(None, self._io_pool.shutdown, True)
        await loop.run_in_executor(None, self._read_pool.shutdown, True)
        await self.metadata.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = -1

    def trim_unsafe(self) -> dict[str, dict[str, str]]:
        """Open managed ledgers whose trimming is suspended (name -> cursor -> why): a cursor
        was recovered from a fallback and not saved again yet, or could not be recovered."""
        return {name: ml.trim_blockers for name, ml in self._open.items() if ml.cursor_set.trim_blockers}

    def stats(self) -> StorageStats:
        writer = self.writer
        ledgers = list(self._open.values())
        now = time.monotonic()
        oldest = 0.0
        save_failures = failing = trim_unsafe = refused = fenced = 0
        relocated_entries = relocated_bytes = relocated_ledgers = 0
        for ml in ledgers:   # one pass over the open ledgers for every per-ledger figure
            cursors = ml.cursor_set
            age, total, bad = cursors.health(now)
            if age > oldest:
                oldest = age
            save_failures += total
            failing += bad
            if cursors.trim_blockers:
                trim_unsafe += 1
            refused += ml.appends_refused_read_only
            if ml.fenced:
                fenced += 1
            relocated = ml.relocated
            if relocated.ledgers or relocated.ghosts:
                relocated_entries += len(relocated)
                relocated_bytes += relocated.size_bytes
                relocated_ledgers += len(relocated.ghosts)
        waits, waited_s, yields, yielded_s = handoff_stats()
        return StorageStats(
            group_commits=writer.batches,
            group_committed_entries=writer.batched_entries,
            fsyncs=writer.fsyncs,
            failed_fsyncs=writer.failed_fsyncs,
            fsync_seconds=writer.fsync_seconds,
            prezero_writes=writer.prezero_writes,
            prezero_bytes=writer.prezero_bytes,
            cache_bytes=self.cache.size_bytes,
            cache_hits=self.cache.hits,
            cache_misses=self.cache.misses,
            corrupt_records=self.corrupt_records_total,
            truncated_bytes=self.truncated_bytes_total,
            dropped_entries=self.dropped_entries_total,
            corrupt_cursors=self.corrupt_cursors_total,
            cursor_fallbacks=self.cursor_fallbacks_total,
            oldest_unsaved_ack_seconds=oldest,
            cursor_save_failures=save_failures,
            cursors_failing_save=failing,
            trim_unsafe_ledgers=trim_unsafe,
            read_only=self.disk.read_only,
            read_only_entered=self.disk.read_only_entered,
            appends_refused_read_only=self.appends_refused_read_only + refused,
            disk_usage=self.disk.usage,
            open_ledgers=len(ledgers),
            fenced_ledgers=fenced,
            relocated_entries=relocated_entries,
            relocated_bytes=relocated_bytes,
            relocated_ledgers=relocated_ledgers,
            interpreter_waits=waits,
            interpreter_wait_seconds=waited_s,
            interpreter_yields=yields,
            interpreter_yield_seconds=yielded_s,
        )

    def health_problems(self) -> list[str]:
        """What is wrong with storage now, in words (empty: healthy)."""
        stats = self.stats()
        problems: list[str] = []
        if stats.read_only:
            problems.append(f"storage is read-only: disk {stats.disk_usage:.1%} used")
        if stats.cursors_failing_save:
            problems.append(f"{stats.cursors_failing_save} cursor(s) failing to save")
        if stats.trim_unsafe_ledgers:
            problems.append(f"trimming suspended on {stats.trim_unsafe_ledgers} topic(s): "
                            "cursor state recovered from a fallback")
        if stats.fenced_ledgers:
            problems.append(f"{stats.fenced_ledgers} managed ledger(s) fenced after a write "
                            "failure")
        return problems


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


def _rename_to_stem(ops: FileOps, directory: Path, stem: str, fsync: bool) -> Path:
    """A managed ledger directory an older version named differently (storage/names.py) moves
    to its name's stem, unless a directory holds that stem already (then it stays put)."""
    if directory.name == stem:
        return directory
    target = directory.with_name(stem)
    if target.exists():
        log.warning("storage: %s and %s name the same managed ledger; %s is ignored",
                    directory, target, directory)
        return target
    ops.replace(directory, target)
    if fsync:
        ops.fsync_dir(directory.parent)
    log.info("storage: managed ledger directory %s renamed to %s", directory.name, stem)
    return target


def _prepare_root(
    root: Path, ops: FileOps, fsync: bool, is_snapshot_key: SnapshotKey | None
) -> tuple[dict[str, Path], IdAllocator, OrphanSweep | None]:
    """Blocking: create the layout, finish interrupted deletes, find names and the max id
    (segments, snapshots, and every ledger id a cursor file mentions: a cursor may name a
    ledger that has no segment, e.g. the empty current ledger at a crash), and, given
    is_snapshot_key, collect orphan snapshots: a snapshot is live while some cursor property
    of that kind (of either generation) names its id; one no cursor names was left by a
    crash between its creation and the cursor update, or belongs to a deleted subscription
    or topic. Nothing is collected if any cursor file is unreadable (its references are
    unknown). Runs before any managed ledger is open: nothing creates a snapshot meanwhile."""
    raise_nofile_limit()
    for sub in ("ledgers", "snapshots", "trash"):
        ops.mkdir(root / sub, sync=fsync)
    for leftover in (root / "trash").iterdir():
        shutil.rmtree(leftover, ignore_errors=True)  # renamed here durably: contents are dead
    names: dict[str, Path] = {}
    max_seen = -1
    cursors = CursorScan()
    for directory in sorted((root / "ledgers").iterdir()):
        if not directory.is_dir():
            continue
        name_file = directory / "NAME"
        if name_file.exists():
            name = ops.read_file(name_file).decode()
        elif not directory.name.startswith(HASHED_PREFIX):
            name = decode_name(directory.name) or directory.name
        elif (legacy := legacy_plain_name(directory.name)) is not None:
            name = legacy
        else:
            log.warning("storage: %s has no NAME file; ignored", directory)
            continue
        max_seen = max([max_seen, *segment_ids(directory)])
        scan_cursor_files(ops, directory, cursors, is_snapshot_key)
        names[name] = _rename_to_stem(ops, directory, encode_name(name), fsync)
    max_seen = max(max_seen, cursors.max_ledger_id)
    orphans: list[tuple[int, Path]] = []
    snapshots = root / "snapshots"
    with os.scandir(snapshots) as entries:  # names only: one snapshot per bucket, many
        names_found = [entry.name for entry in entries]
    for entry_name in names_found:
        stem, dot, suffix = entry_name.rpartition(".")  # as Path.stem / Path.suffix
        if not dot:
            stem = entry_name
        if suffix == "tmp" and stem:
            ops.unlink(snapshots / entry_name)  # an interrupted snapshot write
            continue
        with contextlib.suppress(ValueError):
            snapshot_id = int(stem)
            max_seen = max(max_seen, snapshot_id)
            if is_snapshot_key is not None and snapshot_id not in cursors.snapshot_ids:
                orphans.append((snapshot_id, snapshots / entry_name))
    orphans.sort()
    # The allocator first: its high-water mark must cover the orphans' ids before they go.
    ids = IdAllocator.load(ops, root / "LEDGER_ID", max_seen)
    if is_snapshot_key is None:
        return names, ids, None
    unreadable = tuple(cursors.unreadable)
    referenced = frozenset(cursors.snapshot_ids)
    if orphans and unreadable:
        log.warning("storage: %d snapshot(s) no readable cursor refers to are kept: %d cursor "
                    "file(s) could not be read (%s)", len(orphans), len(unreadable),
                    ", ".join(str(p) for p in unreadable[:3]))
        return names, ids, OrphanSweep(referenced, (), tuple(i for i, _ in orphans), unreadable)
    for _, path in orphans:
        ops.unlink(path)
    if orphans:
        if fsync:
            ops.fsync_dir(root / "snapshots")
        log.info("storage: removed %d orphan snapshot(s) no cursor refers to", len(orphans))
    return names, ids, OrphanSweep(referenced, tuple(i for i, _ in orphans), (), unreadable)
