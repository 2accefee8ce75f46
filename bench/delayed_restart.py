"""Bucket tracker recovery with a large index: how long until the first due message, and until
every bucket is known, on the real segment store.

Usage: .venv/bin/python bench/delayed_restart.py [--pending 1000000] [--layout stress|default]
           [--per-bucket N] [--per-ledger N]
           [--reads 16,1] [--ack-every 10] [--cancel-every 0] [--delays hour|fixed|year]
           [--slow-build] [--old-format] [--compare-with CHECKOUT] [--build-with CHECKOUT]
           [--store DIR] [--build-only] [--rounds N] [--drain-s S]
           [--drain greedy|yield|serve-first] [--batch N] [--profile FILE (with --child)]

This is the *store-building path*: it does not publish through a client. The store is built
in a child process through the storage layer and the tracker, as a broker's publish and
dispatch leave it (each entry a delayed message as a client publishes it: its metadata with
its deliver time, a one-byte payload) (``--per-ledger`` entries per ledger, ``--per-bucket`` indexes per bucket;
``--layout stress``, the default, is 500 of each: 200,000 buckets at 100M; ``--layout
default`` is a default broker's, managedLedgerMaxEntriesPerLedger and
delayedDeliveryMinIndexCountPerBucket from broker/config.py, 50,000 each: 2,000): ledger
segments, the tracker's bucket snapshots (and their summaries) recorded in a real cursor's
properties, every ``--ack-every``-th message acknowledged out of order (individual deletes on
the cursor, which recovery must not hand out again) and every ``--cancel-every``-th cancelled
(PIP-423, as the subscription's cancel does it: the tracker's ``cancel_delayed`` verdict, then
the message acknowledged on the cursor, the cancel's durable record; a version that journalled
its cancels writes its cancel journal too, which recovery then reads; never handed out either). Deliver
times (``--delays``) are a permutation of the messages over an hour (dense: many per ms at
scale) or a year, or a fixed delay after a steady publish (in position order); the first 1%
of the span is in the past when recovery starts. Two builders write the same store:

- the bulk one (default): the entries go through the ledger's ``append_run`` (the publish
  path's) 100,000 at a time, each bucket's time-ordered columns are computed whole and sealed
  by the tracker's own snapshot side (the call the tracker makes when a later ledger arrives
  at a full mutable bucket), the acks go in per ledger (``delete_entry_ids``), the cancels
  through ``cancel_delayed`` after the build, and their acks per ledger; about 5-9 CPU-µs per
  message;
- ``--slow-build`` (and ``--old-format``, ``--build-with``): one ``append`` future and one
  tracker ``add`` per message, 18-19 CPU-µs per message. tests/bench/
  test_delayed_restart_build.py checks that both stores recover to the same hand-outs at the
  same clock times.

Neither fsyncs per write (``fsync=False``); one ``os.sync()`` ends the build. The build prints
its CPU seconds (every thread of the child) and the store's size. The child then drops
everything without closing the tracker (what kill -9 leaves: durable snapshots and cursor
properties) and, in a fresh child process per ``--reads`` value, on a copy of the store,
recovery reopens it and drains the tracker:

- ``first due``: from the store's open to the first due position handed out (messages due
  while "down": the earliest bucket's times are in the past);
- ``store open`` / ``ledger open``: until the segment store is open / the ledger and its
  cursor (with the bucket properties) are;
- ``recover returned``: until ``recover()`` returned: the tracker hands out what is due from
  then on (with the snapshots' summaries, before every bucket's metadata is read);
- ``index serving``: until every bucket's membership is known (every metadata read: the
  tracker answers re-reads and cancels of every ledger), or every metadata and first segment
  (``--old-format``: a store built without the snapshot format property, as an older version
  leaves it, recovered the safe way);
- ``first segments in``: until every bucket's first segment is loaded (or parked, not due soon);
- ``catch-up p99``: of the positions due while down, the time from the first hand-out to
  each one's hand-out, p99 (ms);
- ``catch-up p50`` likewise;
- early / lost / duplicate / acknowledged or cancelled handed out, over the whole drain (lost
  is counted only when the drain ran to the end: ``--drain-s`` cuts it);
- ``*_cpu_s``: the process's CPU seconds (every thread) at each of these points, and at the
  last late message handed out (``caught_up_cpu_s``): steadier than wall times on a busy
  machine;
- ``split``: the CPU seconds of each thread (a pool's workers together) and the seconds the
  garbage collector ran (with its runs per generation), at index serving and at the end;
  ``--profile FILE`` on a recovery child writes the event loop thread's cProfile (CPU time);
- memory per pending message when the index serves and when every first segment is in: the
  tracker's estimate (``index_bytes_*``, ``pulsar_delayed_message_index_size_bytes``) and the
  process's RSS growth from before the store's open (``rss_bytes_*``: the store, the cursor
  with its acknowledgements, the index).

``--drain`` sets how the drain asks for due positions, ``--batch`` at most how many a call
(10,000): ``greedy`` asks again at once while a call returns some (the loop runs nothing else
meanwhile), ``yield`` lets the loop turn once between calls (as a dispatcher that awaits its
read of each batch does; it asks for 100), ``serve-first`` asks for none until every
membership is in. ``--reads`` sets how many snapshot reads recovery keeps in flight (``RECOVERY_READS``); 1 is
one read after another. ``--compare-with CHECKOUT`` runs the same recovery and drain (this
script) with another checkout's broker code on a copy of the same store: paired before/after.
A store whose snapshot format the other checkout cannot read (a newer segment layout) is
built with its code instead: ``--build-with CHECKOUT``, so both recover the same older store.
``--retired``: this checkout also recovers a copy of the store whose cancel journal (an older
version's) a first start retired, once (the cancels applied as acknowledgements): the state
of every start after an upgrade, beside the first start's (the store as built).
The drain never waits for background reads before asking for due positions (as a dispatcher
woken by ``on_due``). The end-to-end kill -9 of a broker process with the official client is
``bench/delayed_e2e.py --kill9``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from array import array
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
if sys.path and Path(sys.path[0]).resolve() == HERE / "bench":
    del sys.path[0]                  # bench/storage.py would shadow the storage package
#: the checkout whose broker code runs (``--compare-with`` sets it for the other checkout)
ROOT = Path(os.environ.get("HORAE_BENCH_ROOT", str(HERE))).resolve()
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TOPIC = "persistent://public/default/delayed-restart-bench"

#: How the deliver times spread: ``hour`` and ``year`` are permutations of positions over that
#: span (1 ms precision: many messages per ms over an hour at scale, one in ~300 ms at 100M
#: over a year), ``fixed`` a fixed delay after a steady publish over an hour (times in
#: position order). The first 1% of the span is in the past at the restart.
SPREADS = {"hour": 3_600_000, "fixed": 3_600_000, "year": 365 * 86_400_000}

#: Residues of the acknowledged (``i % ack_every``) and cancelled (``i % cancel_every``)
#: messages: different, so with equal (or even) moduli no message is both.
ACK_AT = 3
CANCEL_AT = 8

#: Messages appended per run (and sealed, cancelled, persisted) by the bulk builder.
BULK_CHUNK = 100_000

#: The producer every stored message names (its sequence id is the message's number).
PRODUCER = "delayed-restart-bench"
#: bench.json's ``entries``: what the store's entries are (:func:`entries`). A store without
#: the key was built when they were a bare ``b"d"`` without metadata, which a broker reads as
#: plain messages (its dispatcher's parse of each fails and is caught; the last ledger's are
#: delivered at once).
ENTRIES = "messages"


def deliver_at(i: int, base: int, delays: str = "hour", pending: int = 1) -> int:
    """The deliver time of the ``i``-th message (``SPREADS``)."""
    spread = SPREADS[delays]
    if delays == "fixed":
        return base - spread // 100 + i * spread // max(pending, 1)
    return base - spread // 100 + (i * 2_654_435_761) % spread


def entries(first: int, count: int, base: int, delays: str = "hour", pending: int = 1
            ) -> list[bytes]:
    """The stored entries of messages ``first .. first + count - 1``, each as a client publishes
    a delayed message: its ``MessageMetadata`` (producer, sequence id = the message's number,
    publish time, ``deliver_at_time`` = :func:`deliver_at`) and a one-byte payload. A broker
    restarted on the store reads them as it reads any publish: the dispatcher parses each one
    it sends, and the last ledger's (the mutable bucket's, which a kill -9 leaves unindexed)
    go back into the tracker until they fall due."""
    from protocol import pulsar_pb as pb
    from protocol.metadata import encode_entry

    published = base - SPREADS[delays]
    meta = pb.MessageMetadata
    return [encode_entry(meta(producer_name=PRODUCER, sequence_id=i, publish_time=published,
                              deliver_at_time=deliver_at(i, base, delays, pending)), b"d")
            for i in range(first, first + count)]


def _tracker(cursor: Any, store: Any, per_bucket: int, clock_ms: Any,
             on_due: Any = lambda: None) -> Any:
    from broker.delayed.bucket import BucketDelayedDeliveryTracker

    return BucketDelayedDeliveryTracker(
        cursor=cursor, snapshots=store.snapshots, tick_time_ms=1, strict=True,
        on_due=on_due, loop=asyncio.get_running_loop(), clock_ms=clock_ms,
        min_index_count_per_bucket=per_bucket)


def _write_layout(root: Path, t: Any, starts: dict[int, int], pending: int) -> int:
    """bench.json: where each ledger's entry 0 is in the message numbering, and how many
    messages the sealed buckets hold (what recovery must hand out), and what its entries are
    (``ENTRIES``). Returns the bucket count."""
    sealed = t.sealed.ranges
    sealed_to = sealed[-1][1] if sealed else -1
    after = [start for lid, start in starts.items() if lid > sealed_to]
    (root / "bench.json").write_text(json.dumps({
        "starts": {str(k): v for k, v in starts.items()}, "sealed_to_ledger": sealed_to,
        "sealed_count": min(after) if after else pending, "entries": ENTRIES}))
    return len(sealed)


async def build(root: Path, pending: int, per_bucket: int, ack_every: int, base: int,
                old_format: bool, cancel_every: int = 0, delays: str = "hour",
                per_ledger: int = 0) -> None:
    """The slow path: every message appended with its own future and added to the tracker,
    as a broker's publish and dispatch do one by one."""
    from storage import SegmentStore
    from storage.config import StorageConfig

    per_ledger = per_ledger or per_bucket
    store = await SegmentStore.open(root, StorageConfig(fsync=False,
                                                        max_entries_per_ledger=per_ledger))
    ledger = await store.open_ledger(TOPIC)
    cursor = await ledger.open_cursor("sub", initial_position="earliest")
    # when published, nothing was due yet
    t = _tracker(cursor, store, per_bucket, lambda: base - SPREADS[delays])
    if not old_format:
        await t.recover()               # as a broker does on every subscription it opens
    started = time.perf_counter()
    acked = []
    cancelled = []
    starts: dict[int, int] = {}         # ledger id -> index of its entry 0
    last = None
    for chunk in range(0, pending, 10_000):
        positions = await asyncio.gather(*map(ledger.append, entries(
            chunk, min(10_000, pending - chunk), base, delays, pending)))
        for k, pos in enumerate(positions):
            i = chunk + k
            starts.setdefault(pos.ledger_id, i - pos.entry_id)
            t.add(pos, deliver_at(i, base, delays, pending))
            if ack_every and i % ack_every == ACK_AT:
                acked.append(pos)
            elif cancel_every and i % cancel_every == CANCEL_AT:
                cancelled.append((pos, deliver_at(i, base, delays, pending)))
            last = pos
    cursor.read_position = ledger.next_position(last)
    await t.wait_idle()
    for pos, at in cancelled:           # PIP-423 cancels: the verdict, then the ack
        t.cancel_delayed(pos, at)
    await _cancels_durable(t)
    acked_and_cancelled = acked + [pos for pos, _ in cancelled]
    for k in range(0, len(acked_and_cancelled), 10_000):
        cursor.delete(acked_and_cancelled[k:k + 10_000])
    _settle(t, [pos for pos, _ in cancelled])
    await cursor.flush()
    await t.wait_idle()
    buckets = _write_layout(root, t, starts, pending)
    os.sync()
    print(f"  built {pending:,} pending in {buckets:,} buckets ({len(acked):,} acknowledged "
          f"out of order, {len(cancelled):,} cancelled) in {time.perf_counter() - started:.1f} s")
    # no t.close(): the process goes away as after kill -9


class _Run:
    """DurableSink of one append_run: the (ledger, first entry, count) pieces it landed in."""

    def __init__(self, count: int) -> None:
        self.left = count
        self.pieces: list[tuple[int, int, int]] = []
        self.error: BaseException | None = None
        self.done = asyncio.Event()

    def entries_durable(self, ledger_id: int, first_entry_id: int, count: int) -> None:
        self.pieces.append((ledger_id, first_entry_id, count))
        self.left -= count
        if self.left <= 0:
            self.done.set()

    def entries_failed(self, count: int, error: BaseException) -> None:
        self.error = error
        self.done.set()


def _columns(group: list[tuple[int, int, int, int]], base: int, delays: str, pending: int
             ) -> tuple[array[int], array[int], dict[int, Any]]:
    """A bucket's content as the mutable bucket hands it to the seal: (time, packed position)
    columns in (time, position) order, and the entry ids per ledger."""
    from pyroaring import BitMap

    from broker.delayed.packed import POSITION_BITS

    pairs: list[tuple[int, int]] = []
    members: dict[int, BitMap] = {}
    spread = SPREADS[delays]
    start = base - spread // 100
    for ledger_id, first, count, i0 in group:
        high = ledger_id << POSITION_BITS
        indexes = range(i0, i0 + count)
        if delays == "fixed":       # deliver_at(), inlined: 100M calls are a minute of CPU
            times = [start + i * spread // max(pending, 1) for i in indexes]
        else:
            times = [start + (i * 2_654_435_761) % spread for i in indexes]
        pairs.extend(zip(times, range(high | first, high | (first + count)), strict=True))
        bm = members.setdefault(ledger_id, BitMap())
        bm.add_range(first, first + count)
    if delays != "fixed":
        pairs.sort()
    ts_col = array("q", [p[0] for p in pairs])
    pos_col = array("Q", [p[1] for p in pairs])
    return ts_col, pos_col, members


async def build_bulk(root: Path, pending: int, per_bucket: int, ack_every: int, base: int,
                     cancel_every: int = 0, delays: str = "hour", per_ledger: int = 0) -> None:
    """The same store as :func:`build`, in bulk: the entries go in runs through the ledger's
    ``append_run`` (the publish path's), each bucket's columns are computed whole and sealed
    by the tracker's own snapshot side (what the tracker does with its mutable bucket when a
    later ledger arrives), the acknowledgements go in per ledger (``delete_entry_ids``) and the
    cancels through the tracker's ``cancel_delayed``. No fsync per write (the store is opened
    with ``fsync=False``, as :func:`build`'s), one sync at the end."""
    from storage import SegmentStore
    from storage.config import StorageConfig
    from storage.positions import Position

    per_ledger = per_ledger or per_bucket
    store = await SegmentStore.open(root, StorageConfig(fsync=False,
                                                        max_entries_per_ledger=per_ledger))
    ledger = await store.open_ledger(TOPIC)
    cursor = await ledger.open_cursor("sub", initial_position="earliest")
    t = _tracker(cursor, store, per_bucket, lambda: base - SPREADS[delays])
    await t.recover()
    started = time.perf_counter()
    starts: dict[int, int] = {}         # ledger id -> index of its entry 0
    extents: dict[int, int] = {}        # ledger id -> entries
    group: list[tuple[int, int, int, int]] = []   # the mutable bucket: (ledger, first, n, i)
    group_count = 0
    sealed: list[list[tuple[int, int, int, int]]] = []   # the sealed buckets' groups
    acked = cancelled = 0
    seal = t._snapshots.seal            # the tracker's seal of its mutable bucket
    cancelled_ids: dict[int, list[int]] = {}    # ledger id -> entry ids cancelled

    def cancel(group: list[tuple[int, int, int, int]]) -> int:
        n = 0
        if not cancel_every:
            return n
        for ledger_id, first, count, i0 in group:
            i = i0 + (CANCEL_AT - i0) % cancel_every
            ids = cancelled_ids.setdefault(ledger_id, [])
            while i < i0 + count:
                if not (ack_every and i % ack_every == ACK_AT):
                    t.cancel_delayed(Position(ledger_id, first + i - i0),
                                     deliver_at(i, base, delays, pending))
                    ids.append(first + i - i0)
                    n += 1
                i += cancel_every
        return n

    i = 0
    while i < pending:
        run = _Run(min(BULK_CHUNK, pending - i))
        ledger.append_run(entries(i, run.left, base, delays, pending), run)
        await run.done.wait()
        if run.error is not None:
            raise run.error
        for ledger_id, first, count in run.pieces:
            starts.setdefault(ledger_id, i - first)
            extents[ledger_id] = first + count
            # the tracker's rule: a position of a later ledger seals a full mutable bucket
            if group and ledger_id > group[-1][0] and group_count >= per_bucket:
                ts_col, pos_col, members = _columns(group, base, delays, pending)
                seal(group[0][0], group[-1][0], ts_col, pos_col, members)
                sealed.append(group)
                group, group_count = [], 0
            group.append((ledger_id, first, count, i))
            group_count += count
            i += count
        await t.wait_idle()             # snapshots written: memory stays bounded
    for ledger_id, first, count, i0 in group:   # the last bucket stays mutable (in memory)
        for k in range(count):
            t.add(Position(ledger_id, first + k), deliver_at(i0 + k, base, delays, pending))
    # The cancels after the build, as build() does: all in one go, so the cancel journal
    # (one snapshot of every live cancel, rewritten on a change) is written once, not per run.
    for done in (*sealed, group):
        cancelled += cancel(done)
    last = max(extents)
    cursor.read_position = ledger.next_position(Position(last, extents[last] - 1))
    await t.wait_idle()
    await _cancels_durable(t)
    # ... and each cancelled message acknowledged, as the subscription's cancel does
    for ledger_id, ids in cancelled_ids.items():
        cursor.delete_entry_ids(ledger_id, ids)
        _settle(t, [Position(ledger_id, e) for e in ids])
    if ack_every:
        for ledger_id, n in extents.items():
            i0 = starts[ledger_id]
            first = (ACK_AT - i0) % ack_every
            ids = range(first, n, ack_every)
            acked += len(ids)
            cursor.delete_entry_ids(ledger_id, ids)
    await cursor.flush()
    await t.wait_idle()
    buckets = _write_layout(root, t, starts, pending)
    os.sync()
    print(f"  built {pending:,} pending in {buckets:,} buckets ({acked:,} acknowledged out of "
          f"order, {cancelled:,} cancelled) in bulk in {time.perf_counter() - started:.1f} s")
    # no t.close(): the process goes away as after kill -9


async def _cancels_durable(t: Any) -> None:
    """What a cancel waits for in the tracker before its ack: a version that journals its
    cancels writes the journal; one whose record is the ack has nothing to wait for."""
    persist = getattr(t, "persist_cancels", None)
    if persist is not None:
        await persist()


def _settle(t: Any, positions: list[Any]) -> None:
    """The acks are on the cursor: the cancels are no longer in flight (where there is such
    a thing)."""
    settle = getattr(t, "cancel_settled", None)
    if settle is not None:
        for pos in positions:
            settle(pos)


def _overdue(n: int, base: int, delays: str, pending: int, ack_every: int,
             cancel_every: int, seen: bytearray | None = None) -> int:
    """How many of the first ``n`` messages were due when recovery started (time <= base) and
    neither acknowledged nor cancelled (what the catch-up must hand out); with ``seen``, how
    many of those were handed out. Vectorised with numpy when it is there (100M messages),
    else one by one."""
    try:
        import numpy as np
    except ImportError:
        return sum(1 for i in range(n) if deliver_at(i, base, delays, pending) <= base
                   and not (ack_every and i % ack_every == ACK_AT)
                   and not (cancel_every and i % cancel_every == CANCEL_AT)
                   and (seen is None or seen[i]))
    spread = SPREADS[delays]
    total = 0
    for lo in range(0, n, 10_000_000):
        idx = np.arange(lo, min(n, lo + 10_000_000), dtype=np.int64)
        # deliver_at() - base + spread // 100, in int64 (< 2^63 for i < 3.4e9)
        offset = (idx * spread // max(pending, 1) if delays == "fixed"
                  else (idx * 2_654_435_761) % spread)
        keep = offset <= spread // 100
        if ack_every:
            keep &= idx % ack_every != ACK_AT
        if cancel_every:
            keep &= idx % cancel_every != CANCEL_AT
        if seen is not None:
            keep &= np.frombuffer(seen, dtype=np.uint8, count=len(idx), offset=lo) != 0
        total += int(np.count_nonzero(keep))
    return total


async def recover(root: Path, pending: int, per_bucket: int, ack_every: int, base: int,
                  reads: int, drain_s: float = 0.0, cancel_every: int = 0,
                  delays: str = "hour", log: list[tuple[int, int]] | None = None,
                  until_caught_up: bool = False, per_ledger: int = 0,
                  profile: str = "", drain: str = "greedy", batch_size: int = 10_000
                  ) -> dict[str, object]:
    """Reopen the store after the kill, recover the tracker and drain it (module docstring);
    ``log`` gets (message number, clock) of every hand-out, in order. ``profile``: where to
    write the event loop thread's cProfile (its CPU time), from the store's open to the end.
    ``drain``: ``greedy`` asks for the next batch at once while one comes (the loop runs
    nothing else meanwhile), ``yield`` lets the loop run once between batches (as a
    dispatcher that sends each batch does), ``serve-first`` asks for none until every
    membership is in (the index serving without the late hand-out beside it); ``batch_size``:
    the most asked for at a time (a dispatcher asks for up to 100, a read's worth)."""
    import broker.delayed.bucket_snapshots as bs
    from storage import SegmentStore
    from storage.config import StorageConfig
    from storage.positions import Position

    bs.RECOVERY_READS = reads
    per_ledger = per_ledger or per_bucket
    spread = SPREADS[delays]
    layout = json.loads((root / "bench.json").read_text())
    overdue = _overdue(layout["sealed_count"], base, delays, pending, ack_every, cancel_every)
    rss_before = _rss()
    gc_clock = _GcClock()
    threads0 = _threads_cpu()
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile(time.thread_time)
        profiler.enable()
    t0 = time.perf_counter()
    c0 = time.process_time()          # CPU of every thread of the process
    cpu: dict[str, float] = {}
    split: dict[str, object] = {}    # GC and CPU per thread at serving and at the end
    starts = {int(k): v for k, v in layout["starts"].items()}
    sealed_to = layout["sealed_to_ledger"]
    store = await SegmentStore.open(root, StorageConfig(fsync=False,
                                                        max_entries_per_ledger=per_ledger))
    store_open = time.perf_counter() - t0
    cpu["store_open_cpu_s"] = time.process_time() - c0
    ledger = await store.open_ledger(TOPIC)
    cursor = await ledger.open_cursor("sub")
    ledger_open = time.perf_counter() - t0
    cpu["ledger_open_cpu_s"] = time.process_time() - c0
    cursor.read_position = Position(sealed_to + 1, 0)
    now = [base + 1]
    due = asyncio.Event()
    t = _tracker(cursor, store, per_bucket, lambda: now[0], due.set)
    await t.recover()
    serving = time.perf_counter() - t0
    cpu["recover_returned_cpu_s"] = time.process_time() - c0
    memory = {"index_bytes_at_serving": t.memory_bytes, "rss_bytes_at_serving": _rss() - rss_before,
              # of the index: the cancel book (PIP-423 cancels, restored from their journal)
              "cancel_book_bytes": t._cancels.memory_bytes}
    segments_in = None
    memberships_in = None
    seen = bytearray(pending)        # one byte per message: 100M fit where sets would not
    early = dup = acked_out = cancelled_out = caught_up = 0
    first_due = None
    catch_up: list[float] = []
    drained = False
    while True:                      # everything due while down, then the clock runs forward
        if memberships_in is None and not getattr(t.sealed, "reading", 0):
            memberships_in = time.perf_counter() - t0
            cpu["index_serving_cpu_s"] = time.process_time() - c0
            split["at_serving"] = {"gc_s": gc_clock.seconds(), "gc_runs": gc_clock.runs(),
                                   "threads_cpu_s": _threads_cpu(threads0)}
        if segments_in is None and not t.sealed.loading:
            segments_in = time.perf_counter() - t0
            cpu["first_segments_in_cpu_s"] = time.process_time() - c0
            memory |= {"index_bytes_at_segments_in": t.memory_bytes,
                       "rss_bytes_at_segments_in": _rss() - rss_before}
        if drain == "serve-first" and memberships_in is None:
            await asyncio.sleep(0.01)
            continue
        batch = t.get_scheduled(batch_size)
        if batch and drain == "yield":
            await asyncio.sleep(0)
        late_in_batch = False
        for ledger_id, entry_id in batch:
            i = starts[ledger_id] + entry_id
            at = time.perf_counter()
            if first_due is None:
                first_due = at - t0
                cpu["first_due_cpu_s"] = time.process_time() - c0
                first_at = at
            when = deliver_at(i, base, delays, pending)
            if when > now[0]:
                early += 1
            if seen[i]:
                dup += 1
            seen[i] = 1
            if ack_every and i % ack_every == ACK_AT:
                acked_out += 1
            elif cancel_every and i % cancel_every == CANCEL_AT:
                cancelled_out += 1
            if when <= base:
                catch_up.append((at - first_at) * 1000)
                late_in_batch = True
                caught_up += 1
            if log is not None:
                log.append((i, now[0]))
        if late_in_batch:            # CPU until the last late message so far (catch_up_n)
            cpu["caught_up_cpu_s"] = time.process_time() - c0
        if (drain_s and time.perf_counter() - t0 > drain_s) or (
                until_caught_up and caught_up >= overdue and segments_in is not None
                and memberships_in is not None):
            break                    # the drain was cut short: only the overdue are counted
        if not batch and t.sealed.loading:
            due.clear()              # a first segment is on its way: woken when it is in
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(due.wait(), 0.2)
            continue
        if not batch:
            await t.wait_idle()
            if t.has_message_available():
                continue
            if now[0] > base + spread:
                drained = True
                break
            now[0] += 60_000 if t.has_message_available() or t.sealed.loading else spread
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(profile)
    split["at_end"] = {"gc_s": gc_clock.seconds(), "gc_runs": gc_clock.runs(),
                       "threads_cpu_s": _threads_cpu(threads0)}
    gc_clock.close()
    lost = None
    if drained:                      # not handed out, neither acknowledged nor cancelled
        n = layout["sealed_count"]
        lost = seen[:n].count(0)
        if ack_every:
            lost -= seen[ACK_AT:n:ack_every].count(0)
        if cancel_every:
            skipped = seen[CANCEL_AT:n:cancel_every].count(0)
            if ack_every:            # the ones acknowledged as well are counted already
                skipped -= sum(1 for i in range(CANCEL_AT, n, cancel_every)
                               if i % ack_every == ACK_AT and not seen[i])
            lost -= skipped
    overdue_lost = None
    if lost is None:                 # the overdue ones never handed out (all of them are due)
        overdue_lost = overdue - _overdue(layout["sealed_count"], base, delays, pending,
                                          ack_every, cancel_every, seen)
    catch_up.sort()
    return {"reads": reads, "store_open_s": round(store_open, 3),
            "ledger_open_s": round(ledger_open, 3), "recover_returned_s": round(serving, 3),
            "index_serving_s": round(memberships_in, 3) if memberships_in is not None else None,
            "first_segments_in_s": round(segments_in, 3) if segments_in is not None else None,
            "first_due_s": round(first_due, 3) if first_due is not None else None,
            "catch_up_n": len(catch_up), "overdue": overdue,
            "catch_up_p50_ms": round(catch_up[len(catch_up) // 2], 1) if catch_up else None,
            "catch_up_p99_ms": round(catch_up[int(len(catch_up) * 0.99) - 1], 1)
            if catch_up else None,
            **{k: round(v, 3) for k, v in cpu.items()},
            "early": early, "lost": lost, "overdue_lost": overdue_lost, "duplicate": dup,
            "acked_handed_out": acked_out, "cancelled_handed_out": cancelled_out,
            "handed_out": len(seen) - seen.count(0), "drained": drained,
            "rss_bytes_total": _rss(), "split": split,
            **{k: round(v / pending, 2) if "bytes" in k else v for k, v in memory.items()}}


async def retire(root: Path, per_bucket: int) -> None:
    """Retire the store's cancel journal as a first start does (its targets acknowledged on
    the cursor, the property and the snapshot dropped), and nothing else."""
    from broker.delayed.cancel_journal import retire_journal
    from storage import SegmentStore
    from storage.config import StorageConfig

    store = await SegmentStore.open(root, StorageConfig(fsync=False,
                                                        max_entries_per_ledger=per_bucket))
    ledger = await store.open_ledger(TOPIC)
    cursor = await ledger.open_cursor("sub")
    print(f"  retired a cancel journal of {await retire_journal(cursor, store.snapshots):,} "
          "cancels")
    await store.close()
    os.sync()


class _GcClock:
    """Wall seconds the cyclic garbage collector ran (every generation, every thread), and
    how many runs per generation, from ``gc.callbacks``."""

    def __init__(self) -> None:
        import gc

        self._gc = gc
        self._total = 0.0
        self._start = 0.0
        self._runs = [0, 0, 0]
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self._total += time.perf_counter() - self._start
            self._runs[info["generation"]] += 1

    def seconds(self) -> float:
        return round(self._total, 3)

    def runs(self) -> list[int]:
        return list(self._runs)

    def close(self) -> None:
        self._gc.callbacks.remove(self._callback)


def _threads_cpu(since: dict[str, float] | None = None) -> dict[str, float]:
    """CPU seconds (user + system) of this process's threads, by thread name (a pool's
    workers together), less ``since``; the threads that ended are not counted."""
    import re
    import threading

    names = {t.native_id: re.sub(r"_\d+$", "", t.name) for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue                 # ended meanwhile
        name = names.get(int(tid), "other")
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return {k: round(v - (since or {}).get(k, 0.0), 2) for k, v in sorted(out.items())}


def _rss() -> int:
    """Resident set of this process (the store, the cursor with its acks, the index and the
    interpreter), bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


#: ``--layout stress``: entries per ledger and indexes per bucket (200,000 buckets at 100M).
STRESS_PER_BUCKET = 500


def _apply_layout(args: argparse.Namespace) -> None:
    """Fill ``per_bucket`` / ``per_ledger`` from ``--layout`` where not given: the stress
    layout, or a default broker's (the configuration's own defaults, so the two cannot
    drift apart)."""
    if args.layout == "default":
        from broker.config import BrokerConfig

        config = BrokerConfig()
        bucket = config.delayed_delivery_min_index_count_per_bucket
        ledger = config.managed_ledger_max_entries_per_ledger
    else:
        bucket = ledger = STRESS_PER_BUCKET
    args.per_bucket = args.per_bucket or bucket
    args.per_ledger = args.per_ledger or (ledger if args.layout == "default"
                                          else args.per_bucket)


def _shape(args: argparse.Namespace) -> list[str]:
    """The options that shape the store, for the child processes."""
    return ["--pending", str(args.pending), "--per-bucket", str(args.per_bucket),
            "--per-ledger", str(args.per_ledger),
            "--ack-every", str(args.ack_every), "--cancel-every", str(args.cancel_every),
            "--delays", args.delays]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pending", type=int, default=1_000_000)
    p.add_argument("--layout", choices=("stress", "default"), default="stress",
                   help="stress: 500 entries per ledger and per bucket (many small buckets); "
                        "default: a default broker's (managedLedgerMaxEntriesPerLedger and "
                        "delayedDeliveryMinIndexCountPerBucket of broker/config.py); "
                        "--per-bucket / --per-ledger override either")
    p.add_argument("--per-bucket", type=int, default=0, dest="per_bucket",
                   help="indexes per bucket (the tracker seals past it)")
    p.add_argument("--per-ledger", type=int, default=0, dest="per_ledger",
                   help="entries per ledger (the ledger rolls over past it; default: as many "
                        "as per bucket)")
    p.add_argument("--reads", default="16,1")
    p.add_argument("--ack-every", type=int, default=10, dest="ack_every",
                   help="acknowledge every N-th message out of order (0: none)")
    p.add_argument("--cancel-every", type=int, default=0, dest="cancel_every",
                   help="cancel every N-th message (PIP-423, the tracker's cancel journal; "
                        "0: none)")
    p.add_argument("--delays", choices=sorted(SPREADS), default="hour",
                   help="deliver times: a permutation over an hour or a year, or in order "
                        "(a fixed delay)")
    p.add_argument("--slow-build", action="store_true", dest="slow_build",
                   help="build message by message (one append future and one tracker add "
                        "each) instead of in bulk")
    p.add_argument("--compare-with", dest="compare_with",
                   help="another checkout of the project: this recovery with its broker code "
                        "runs on a copy of the same store too")
    p.add_argument("--old-format", action="store_true", dest="old_format",
                   help="build the store without the snapshot format property (an older "
                        "version's store: recovery takes the safe path; message by message)")
    p.add_argument("--build-with", dest="build_with",
                   help="build the store with another checkout's broker code (a store of that "
                        "version's snapshot format, which both checkouts can then recover; "
                        "message by message)")
    p.add_argument("--drain-s", type=float, default=0.0, dest="drain_s",
                   help="stop draining after this many seconds (lost is then counted among "
                        "the messages due while down only)")
    p.add_argument("--until-caught-up", action="store_true", dest="until_caught_up",
                   help="stop draining once every message due while down is handed out "
                        "and the index serves with every first segment in")
    p.add_argument("--store", help="keep the built store in this directory and reuse it when "
                                    "it is there already (same shape options)")
    p.add_argument("--build-only", action="store_true", dest="build_only",
                   help="build the store (--store) and stop")
    p.add_argument("--rounds", type=int, default=1,
                   help="run the recoveries (and the --compare-with one) this many times")
    p.add_argument("--retired", action="store_true",
                   help="also recover (this checkout) a copy of the store whose cancel journal "
                        "an earlier start retired (its cancels applied as acknowledgements, "
                        "once): the steady state after an upgrade from a version that "
                        "journalled cancels (--build-with such a version)")
    p.add_argument("--profile", default="",
                   help="(with --child) write the event loop thread's cProfile (CPU time) here")
    p.add_argument("--drain", choices=("greedy", "yield", "serve-first"), default="greedy",
                   help="(with --child) how the drain asks for due messages (recover())")
    p.add_argument("--batch", type=int, default=10_000,
                   help="(with --child) the most due messages the drain asks for at a time")
    p.add_argument("--log", help=argparse.SUPPRESS)
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    _apply_layout(args)
    if args.child:
        root, reads, base = args.child.split(",")
        if reads == "retire":
            asyncio.run(retire(Path(root), args.per_bucket))
            return
        if reads == "0":
            if args.slow_build or args.old_format:
                asyncio.run(build(Path(root), args.pending, args.per_bucket, args.ack_every,
                                  int(base), args.old_format, args.cancel_every, args.delays,
                                  args.per_ledger))
            else:
                asyncio.run(build_bulk(Path(root), args.pending, args.per_bucket,
                                       args.ack_every, int(base), args.cancel_every,
                                       args.delays, args.per_ledger))
            return
        log: list[tuple[int, int]] | None = [] if args.log else None
        r = asyncio.run(recover(Path(root), args.pending, args.per_bucket, args.ack_every,
                                int(base), int(reads), args.drain_s, args.cancel_every,
                                args.delays, log, args.until_caught_up, args.per_ledger,
                                args.profile, args.drain, args.batch))
        if args.log:
            Path(args.log).write_text(json.dumps(log))
        print(json.dumps(r))
        return
    with contextlib.ExitStack() as stack:
        if args.store:
            tmp = args.store
            Path(tmp).mkdir(parents=True, exist_ok=True)
        else:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="horae-delayed-restart-"))
        root = Path(tmp)
        if (root / "built" / "bench.json").exists():
            base = int((root / "base").read_text())
            print(f"  reusing the store in {root / 'built'}")
        else:
            base = time.time_ns() // 1_000_000
            (root / "base").write_text(str(base))
            c0 = os.times()
            subprocess.run([sys.executable, __file__, *_shape(args),
                            *(["--old-format"] if args.old_format else []),
                            *(["--slow-build"] if args.slow_build else []),
                            "--child", f"{root / 'built'},0,{base}"], check=True,
                           env={**os.environ, "HORAE_BENCH_ROOT": str(
                               Path(args.build_with).resolve() if args.build_with else HERE)})
            c1 = os.times()
            cpu = c1.children_user + c1.children_system - c0.children_user - c0.children_system
            size = sum(f.stat().st_size for f in (root / "built").rglob("*") if f.is_file())
            print(f"  build: {cpu:.1f} CPU-s ({cpu * 1e6 / max(args.pending, 1):.2f} µs per "
                  f"message), {size / 1e6:,.0f} MB on disk (load {os.getloadavg()[0]:.1f})",
                  flush=True)
        if args.build_only:
            return
        runs = [(int(x), str(HERE), "", "built") for x in args.reads.split(",")]
        if args.retired:
            if not (root / "retired" / "bench.json").exists():
                shutil.rmtree(root / "retired", ignore_errors=True)
                shutil.copytree(root / "built", root / "retired")
                subprocess.run([sys.executable, __file__, *_shape(args),
                                "--child", f"{root / 'retired'},retire,{base}"], check=True,
                               env={**os.environ, "HORAE_BENCH_ROOT": str(HERE)})
            runs += [(int(x), str(HERE), " (journal retired)", "retired")
                     for x in args.reads.split(",")]
        if args.compare_with:
            runs.append((16, str(Path(args.compare_with).resolve()), f" ({args.compare_with})",
                         "built"))
        for _ in range(args.rounds):
            for reads, code, label, source in runs:
                run = root / f"run-{reads}"
                shutil.rmtree(run, ignore_errors=True)
                shutil.copytree(root / source, run)
                out = subprocess.run([sys.executable, __file__, *_shape(args),
                                      "--drain-s", str(args.drain_s),
                                      *(["--until-caught-up"] if args.until_caught_up else []),
                                      "--child", f"{run},{reads},{base}"],
                                     check=True, capture_output=True, text=True,
                                     env={**os.environ, "HORAE_BENCH_ROOT": code}).stdout
                shutil.rmtree(run)
                load = os.getloadavg()[0]
                print(f"  recovery{label}, {reads} reads in flight (load {load:.1f}): "
                      f"{out.strip().splitlines()[-1]}", flush=True)


if __name__ == "__main__":
    main()
