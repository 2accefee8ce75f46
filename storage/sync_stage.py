"""The sync stage of the group-commit writer: the thread that fdatasyncs what the write
stage wrote, and hands completed group commits back to the loop, in order.

Theory of operation (the writer's side is in storage/writer.py):
1. The write stage (the writer thread) writes a group of appends and hands the sync stage
   one SyncJob: the group's results (owner, batches, write error or None) in append order,
   and the files it wrote, each with the owner and the segment's write offset after the
   write (the end that a later fdatasync makes durable). A pre-zero step is a job with files
   and no results. The hand-off happens after the writes returned, so every fdatasync the
   sync thread starts after taking a job covers that job's writes.
2. The sync thread takes ALL jobs waiting (FIFO) as one round and fdatasyncs each file of
   the round ONCE, however many jobs wrote to it: several group commits written while the
   previous round's fdatasync ran share one. The write stage meanwhile writes the next
   group: writing and syncing overlap (double buffering). When the write stage has nothing
   more queued and this stage is idle (appenders in lockstep: nothing to overlap), it runs
   the round itself (run_if_idle), in order since nothing else is waiting, and saves the
   thread hand-off; it hands that round's outcome back (post_inline) once its bookkeeping
   for the group is done, before it takes more work, a control or a pre-zero write.
3. After the round's fdatasyncs, each owner of the round is judged once: it is good unless
   it is fenced (writer_fenced: a failed write in the write stage, a failed pre-zero, or a
   failed fdatasync of any of its files in this or an earlier round). A good owner's
   segments get synced_offset = the end its jobs wrote, and its batches complete. Every
   batch of a fenced owner fails (also one whose own fdatasync succeeded: it was written
   before the failure was known and no fsync after a failure proves anything, fsyncgate),
   and its segments are marked broken with fenced_ends = synced_offset. synced_offset only
   moves here, and never for a fenced owner, so fenced_ends never cuts an acknowledged entry.
4. One loop.call_soon_threadsafe per round hands every owner its batches, in append order
   (runs of consecutive good batches merged into one complete_appends call), inside the
   store user's CompletionScope when it gave one (the broker holds its connections' writes
   until the round is told, so each connection answers the whole round in one write).
5. The write stage counts jobs handed, this thread jobs finished (after the hand-back): the
   writer's drain() waits until they are equal, so controls (seal, delete, barriers) run
   after everything written before them is synced and completed. busy() names the segments
   a job still waiting or in progress will fdatasync: the fd LRU never closes those.
6. An unexpected error in a round is logged, and every batch of the round not yet handed
   back fails (its owner fenced): the thread never dies silently, nothing waits forever.
Only the writer (storage/writer.py) creates and calls this; all file operations through FileOps.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from storage.appends_in_flight import AppendsInFlight
from storage.errors import PersistenceError
from storage.fileops import FileOps
from storage.segment_file import AppendBatch, SegmentFile, WriteOwner, WriteState

log = logging.getLogger("horae.storage")

Result = tuple[WriteOwner, list[AppendBatch], BaseException | None]
"""An owner's batches of one group commit, in append order, and the error that failed them."""


class CompletionScope(Protocol):
    """What the store's user wraps each round's hand-back in, on the loop: ``begin()`` before
    the first owner is told its outcome, ``end()`` after the last (also when one failed)."""

    def begin(self) -> None: ...

    def end(self) -> None: ...


@dataclass(slots=True)
class SyncJob:
    """What the write stage wrote: results in append order, files -> (owner, written end)."""

    results: list[Result] = field(default_factory=list)
    files: dict[SegmentFile, tuple[WriteOwner, int]] = field(default_factory=dict)


def fence(owner: WriteOwner, exc: OSError, what: str,
          on_no_space: Callable[[], None] | None) -> PersistenceError:
    """Fence owner after a failed write/fdatasync (either stage); the error its batches get."""
    owner.writer_fenced = True
    log.error("storage writer: %s failed (%s); fencing the ledger", what, exc)
    if exc.errno == errno.ENOSPC and on_no_space is not None:
        on_no_space()
    error = PersistenceError(f"{what} failed: {exc}")
    error.__cause__ = exc
    return error


class SyncStage:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        ops: FileOps,
        *,
        fsync: bool,
        fenced_ends: dict[Path, int],
        in_flight: AppendsInFlight,
        on_no_space: Callable[[], None] | None = None,
        completion_scope: CompletionScope | None = None,
    ) -> None:
        self._loop = loop
        self._scope = completion_scope
        self._in_flight = in_flight  # counted out on the loop as each round comes back
        self._ops = ops
        self._fsync = fsync
        self.fenced_ends = fenced_ends  # shared with the writer (recovery reads it)
        self.on_no_space = on_no_space
        lock = self._lock = threading.Lock()  # (a bare ``with`` on it: no Python frame)
        self._cond = threading.Condition(lock)  # the sync thread waits here for jobs
        self._drained = threading.Condition(lock)  # drain() waits here (never the sync
        # thread: waking it for nothing each round costs a context switch and the GIL)
        self._jobs: list[SyncJob] = []  # under _cond
        self._handed = 0  # jobs handed over (under _cond)
        self._finished = 0  # jobs finished, their results handed back (under _cond)
        self._pending: dict[SegmentFile, int] = {}  # file -> unfinished jobs naming it
        self._stopping = False
        self._inline: list[Result] = []  # an inline round's outcome not handed back yet
        #                                  (write thread only; post_inline())
        # Figures (plain numbers, read at any time).
        self.batches = 0  # rounds that completed appends (group commits)
        self.batched_entries = 0
        self.fsyncs = 0
        self.failed_fsyncs = 0
        self.fsync_seconds = 0.0
        self.last_round_entries = 1  # appends the last round completed (the writer's wait target)
        self.batch_sizes: list[int] | None = None  # entries per round when set (benchmarks)
        self._thread = threading.Thread(target=self._run, name="horae-storage-sync", daemon=True)
        self._thread.start()

    # -- the write stage's side ------------------------------------------------------------

    def hand(self, job: SyncJob) -> None:
        """Queue a written job (write thread)."""
        with self._cond:
            self._jobs.append(job)
            self._handed += 1
            self._count(job, 1)
            self._cond.notify()

    def idle(self) -> bool:
        """Nothing handed over is unfinished."""
        with self._lock:
            return self._finished == self._handed

    def busy(self) -> set[SegmentFile]:
        """The files an unfinished job will still fdatasync (a snapshot: only the write thread
        adds to it)."""
        with self._lock:
            return set(self._pending)

    def drain(self) -> None:
        """Wait until every job handed over so far has been synced and handed back."""
        with self._cond:
            target = self._handed
            while self._finished < target:
                self._drained.wait()

    def stop(self) -> None:
        """Finish the jobs handed over, then end the thread (blocking)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join()

    # -- sync thread -----------------------------------------------------------------------

    def _take(self) -> list[SyncJob] | None:
        with self._cond:
            while not self._jobs:
                if self._stopping:
                    return None
                self._cond.wait()
            jobs, self._jobs = self._jobs, []
            return jobs

    def _run(self) -> None:
        while True:
            jobs = self._take()
            if jobs is None:
                return
            self._finish(jobs)

    def run_if_idle(self, job: SyncJob) -> bool:
        """Run job's round in the calling (write) thread if nothing is waiting or in progress
        here: in lockstep there is nothing to overlap, and this saves a thread hand-off per
        round. False (nothing done) when busy: hand() it instead.

        The job is never counted as handed or pending: it is synced before this returns,
        and only the write thread hands jobs, drains and asks busy(). Its outcome is handed
        back to the loop by post_inline(), which the write thread calls before anything else
        it does could make the loop wait (a control, a pre-zero write) and at the latest just
        before it waits for more work: the loop, woken by the hand-back, then finds the GIL
        free instead of waiting for the write thread's bookkeeping after the round."""
        with self._lock:
            if self._jobs or self._finished != self._handed or self._stopping:
                return False
        try:
            self._inline.extend(self._round([job], hand_back=False))
        except BaseException:  # a bug must not kill the write thread silently
            log.exception("storage writer: unexpected error in an inline sync round")
            self.post_inline()  # what came before first: outcomes reach the loop in order
            self._fail_round([job])
        return True

    def post_inline(self) -> None:
        """Hand the outcome of the inline rounds run so far back to the loop (write thread;
        see run_if_idle)."""
        if self._inline:
            results, self._inline = self._inline, []
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                self._loop.call_soon_threadsafe(self._hand_back, results)

    def _finish(self, jobs: list[SyncJob]) -> None:
        handed_back = False
        try:
            self._round(jobs)
            handed_back = True
        except BaseException:  # a bug must not kill the sync stage silently
            log.exception("storage writer: unexpected error in the sync stage")
        finally:
            if not handed_back:
                self._fail_round(jobs)
            with self._cond:
                self._finished += len(jobs)
                for job in jobs:
                    self._count(job, -1)
                self._drained.notify_all()

    def _count(self, job: SyncJob, delta: int) -> None:
        """Count job's files in or out of _pending (under _cond)."""
        pending = self._pending
        for segment in job.files:
            left = pending.get(segment, 0) + delta
            if left:
                pending[segment] = left
            else:
                del pending[segment]

    def _round(self, jobs: list[SyncJob], *, hand_back: bool = True) -> list[Result]:
        """Sync the round's files, judge its owners and hand its outcome back to the loop
        (or, hand_back=False, return it for post_inline)."""
        files: dict[SegmentFile, tuple[WriteOwner, int]]
        if len(jobs) == 1:
            files = jobs[0].files  # read only below
        else:
            files = {}
            for job in jobs:
                for segment, (owner, end) in job.files.items():
                    done = files.get(segment)
                    files[segment] = (owner, end if done is None else max(end, done[1]))
        failed: dict[int, PersistenceError] = {}  # owner -> its fdatasync failure
        if self._fsync:
            for segment, (owner, _) in files.items():
                if owner.writer_fenced:
                    continue  # fails below; never fsync again after a failure
                self._sync_file(segment, owner, failed)
        good: dict[int, bool] = {}  # each owner judged once, after every fdatasync
        for segment, (owner, end) in files.items():
            ok = good.setdefault(id(owner), not owner.writer_fenced)
            if ok and end > segment.synced_offset:
                segment.synced_offset = end
        runs: dict[int, list[Result]] = {}  # owner -> its runs, in append order
        entries = 0
        for job in jobs:
            for owner, batches, error in job.results:
                ok = good.setdefault(id(owner), not owner.writer_fenced)
                if error is None and not ok:
                    error = failed.get(id(owner)) or PersistenceError(
                        "ledger is fenced after an earlier write failure")
                if error is not None:
                    for b in batches:
                        self._mark_broken(b.segment)
                else:
                    for b in batches:
                        entries += len(b.datas)
                owner_runs = runs.setdefault(id(owner), [])
                if owner_runs and error is None and owner_runs[-1][2] is None:
                    owner_runs[-1][1].extend(batches)  # one complete_appends for both
                else:
                    owner_runs.append((owner, list(batches), error))
        results = [run for owner_runs in runs.values() for run in owner_runs]
        if entries:
            self.batches += 1
            self.batched_entries += entries
            self.last_round_entries = entries
            if self.batch_sizes is not None:
                self.batch_sizes.append(entries)
        if results and hand_back:
            # RuntimeError: the loop is closed, nobody is waiting any more.
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._hand_back, results)
            return []
        return results

    def _sync_file(self, segment: SegmentFile, owner: WriteOwner,
                   failed: dict[int, PersistenceError]) -> None:
        """fdatasync one file of the round; a failure fences its owner and breaks it."""
        started = time.perf_counter()
        try:
            self.fsyncs += 1
            self._ops.fdatasync(segment.fd)
        except OSError as exc:
            self.failed_fsyncs += 1
            segment.write_state = WriteState.BROKEN
            failed[id(owner)] = fence(owner, exc, "fdatasync", self.on_no_space)
        finally:
            self.fsync_seconds += time.perf_counter() - started

    def _mark_broken(self, segment: SegmentFile) -> None:
        """A segment of a fenced owner with writes no successful fdatasync covers (or after
        a failed one): sealing cuts it back, a reopen in this process too."""
        if segment.write_state is WriteState.BROKEN \
                or segment.write_offset > segment.synced_offset:
            segment.write_state = WriteState.BROKEN
            self.fenced_ends[segment.path] = segment.synced_offset

    def _fail_round(self, jobs: list[SyncJob]) -> None:
        results: list[Result] = []
        for job in jobs:
            for owner, batches, error in job.results:
                owner.writer_fenced = True
                for b in batches:
                    with contextlib.suppress(Exception):
                        self._mark_broken(b.segment)
                results.append((owner, batches, error or PersistenceError(
                    "the storage writer failed unexpectedly")))
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._hand_back, results)

    def _hand_back(self, results: list[Result]) -> None:
        """On the loop: one round's outcomes, inside the completion scope if there is one."""
        scope = self._scope
        if scope is None:
            _complete_batch(results, self._in_flight)
            return
        scope.begin()
        try:
            _complete_batch(results, self._in_flight)
        finally:
            scope.end()


def _complete_batch(results: list[Result], in_flight: AppendsInFlight) -> None:
    """On the loop: every owner learns the outcome of its batches, in append order."""
    in_flight.returned(sum(len(batches) for _, batches, _ in results))
    for owner, batches, error in results:
        try:
            owner.complete_appends(batches, error)
        except Exception:
            log.exception("storage: completing appends failed")
