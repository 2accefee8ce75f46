"""Delayed-delivery tracker benchmark: memory per message and add / get-scheduled throughput.

Usage:  .venv/bin/python bench/delayed.py [--in-memory N] [--bucket N] [--quick]
        .venv/bin/python bench/delayed.py --handout 4,20

Every scenario runs in a fresh subprocess so that the memory figure is the process's resident
set growth while the index is built (``/proc/self/statm``, after ``gc.collect()`` and
``malloc_trim(0)``), which includes what CRoaring allocates with malloc (tracemalloc cannot
see that); the tracker's own estimate (``memory_bytes``, the value exported as
``pulsar_delayed_message_index_size_bytes``) is printed next to it.

Workload: positions are read in order from ledgers of 50,000 entries (storage's default
rollover), each message delayed by a uniform random 2 s .. 1 h (seeded), tick 1000 ms,
non-strict (Pulsar's defaults). Scenarios:

- ``heap``: the peer: a plain ``heapq`` of ``(deliver_at, ledger_id, entry_id)`` tuples, what
  a straightforward Python broker would keep (apache/pulsar#15146 territory).
- ``in-memory``: InMemoryDelayedDeliveryTracker at 1M messages (target <= 24 B/message).
- ``bucket``: BucketDelayedDeliveryTracker at 10M messages with Pulsar's defaults (50,000
  indexes per bucket, segments of <= 5,000 indexes / 300 s), snapshots written through the
  real storage SnapshotStore in a temporary directory (target <= 4 B/message in memory: only
  the loaded segments and bitmaps stay).

- ``cancels``: PIP-423 tracker-level cancels, each settled after its verdict (as the
  subscription does once the cancelled message's acknowledgement, the cancel's durable record,
  is on the cursor). 1M cancels of untracked messages (pending: only the gauge's count per
  deliver-time slot is kept), then 1M cancels of tracked messages (applied: index cleared);
  rates per CPU-second and the memory left per cancel.

add = tracker.add() rate while building; get-scheduled = rate of draining everything with
get_scheduled(1000) once the clock is past the last deadline. The bucket tracker is first
closed and a new one recovers from the snapshots (timed: the tracker's share of a restart),
then drained: that includes loading every segment back from disk. Rates are per CPU-second of the process
(``time.process_time``, all threads), so they stay meaningful on a busy machine.

``--handout N,N,...``: the bucket tracker's hand-out as a dispatcher drives it under random
delays, in process: N sealed buckets of 25,000 deliver times spread over 5 s (and half a bucket
in the mutable one, snapshots on the real store), the clock stepped by 1 ms and by 10 ms (a
dispatcher behind by a few turns), takes of 100 until one comes back short. It prints the event
loop thread's CPU per message handed out and per call (re-aiming the timer included).

``--scale N,N,...`` (index memory at scale): the bucket tracker holding N pending messages for
three workloads, each published at a simulated 100,000 messages/s (the clock follows the
publish time), exact 1 ms deliver times:

- ``fixed``: every message delayed by 1 h (due time grows with the entry id);
- ``dense``: uniform 2 s .. 1 h (at 100M, ~28,000 messages due per second of that hour);
- ``year``: uniform 2 s .. 365 days.

It prints RSS growth and the index estimate per message, the indexes in memory, the segments
on disk, the add rate and the process's peak RSS (interpreter included; buckets whose snapshot
is not written yet hold their segments), per size, so the per-message figure can be read for
flatness.
``--pulsar N,N,...`` adds the same workloads (``--kinds``, N messages each) on Apache Pulsar 4.0
standalone in the same run (:mod:`bench.delayed_pulsar`: a fresh JVM per figure, heap
``--pulsar-heap``, trackers ``--pulsar-trackers in-memory,bucket``, extra settings
``--pulsar-conf k=v,...``): published over the raw wire (unbatched, as clients send delayed
messages, each SEND with its own ``deliver_at_time``), read into its delayed index by a connected
Shared consumer, then ``msgDelayed``, ``pulsar_delayed_message_index_size_bytes``, the JVM's RSS
and live-heap growth, the publish rate and the broker's CPU per message.

The end-to-end figures through the official client are in ``bench/delayed_e2e.py``: lateness
of 20,000 messages due over 10 s (strict, 10 ms tick; in-memory and bucket trackers) and the
restart of a bucket-tracker broker subprocess holding 1M pending delayed messages (seconds until
it serves producers and consumers again, SIGTERM and kill -9).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import gc
import heapq
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

T0 = 1_700_000_000_000
ENTRIES_PER_LEDGER = 50_000
SPAN_MS = 3_600_000
TICK_MS = 1000


def rss_bytes() -> int:
    gc.collect()
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def workload(n: int, seed: int = 1) -> Any:
    rnd = random.Random(seed).randrange
    for i in range(n):
        yield 10 + i // ENTRIES_PER_LEDGER, i % ENTRIES_PER_LEDGER, T0 + 2000 + rnd(SPAN_MS)


#: Simulated publish rate of the scale workloads, messages per ms.
PUBLISH_PER_MS = 100
DAY_MS = 86_400_000
SCALE_KINDS = ("fixed", "dense", "year")


def scale_workload(kind: str, n: int, seed: int = 1) -> Any:
    """(ledger_id, entry_id, publish_ms, deliver_at_ms) of the scale workloads."""
    rnd = random.Random(seed).randrange
    for i in range(n):
        published = T0 + i // PUBLISH_PER_MS
        if kind == "fixed":
            at = published + SPAN_MS
        elif kind == "dense":
            at = published + 2000 + rnd(SPAN_MS)
        else:
            at = published + 2000 + rnd(365 * DAY_MS)
        yield 10 + i // ENTRIES_PER_LEDGER, i % ENTRIES_PER_LEDGER, published, at


def scale_deliver_times(kind: str, n: int) -> Any:
    """The deliver times of :func:`scale_workload`, ms after its first publish."""
    return (at - T0 for _, _, _, at in scale_workload(kind, n))


def positions(n: int, seed: int = 1, ledger_offset: int = 0) -> Any:
    """The workload as a dispatcher hands it to a tracker: (Position, deliver_at_ms)."""
    from storage.positions import Position

    for ledger_id, entry_id, at in workload(n, seed):
        yield Position(ledger_offset + ledger_id, entry_id), at


class Clock:
    def __init__(self) -> None:
        self.now_ms = T0

    def __call__(self) -> int:
        return self.now_ms


def run_heap(n: int) -> dict[str, Any]:
    items = workload(n)
    before = rss_bytes()
    heap: list[tuple[int, int, int]] = []
    start = time.process_time()
    for ledger_id, entry_id, at in items:
        heapq.heappush(heap, (at, ledger_id, entry_id))
    add_s = time.process_time() - start
    grown = rss_bytes() - before
    start = time.process_time()
    cutoff = T0 + 2 * SPAN_MS
    got = 0
    while heap and heap[0][0] <= cutoff:
        heapq.heappop(heap)
        got += 1
    get_s = time.process_time() - start
    assert got == n
    return {"n": n, "rss_bytes": grown, "estimate_bytes": None, "add_per_s": n / add_s,
            "get_per_s": n / get_s}


async def run_in_memory(n: int) -> dict[str, Any]:
    from broker.delayed.in_memory import InMemoryDelayedDeliveryTracker

    items = positions(n)
    clock = Clock()
    loop = asyncio.get_running_loop()
    before = rss_bytes()
    tracker = InMemoryDelayedDeliveryTracker(tick_time_ms=TICK_MS, strict=False,
                                             on_due=lambda: None, loop=loop, clock_ms=clock,
                                             fixed_delay_lookahead=0)
    add = tracker.add
    start = time.process_time()
    for pos, at in items:
        add(pos, at)
    add_s = time.process_time() - start
    grown = rss_bytes() - before
    estimate = tracker.memory_bytes
    assert len(tracker) == n
    clock.now_ms = T0 + 2 * SPAN_MS
    start = time.process_time()
    got = 0
    while True:
        batch = tracker.get_scheduled(1000)
        if not batch:
            break
        got += len(batch)
    get_s = time.process_time() - start
    assert got == n
    await tracker.close()
    return {"n": n, "rss_bytes": grown, "estimate_bytes": estimate, "add_per_s": n / add_s,
            "get_per_s": n / get_s}


async def run_bucket(n: int) -> dict[str, Any]:
    from broker.delayed.bucket import BucketDelayedDeliveryTracker
    from storage import SegmentStore
    from storage.config import StorageConfig

    with tempfile.TemporaryDirectory(prefix="horae-bench-") as tmp:
        store = await SegmentStore.open(Path(tmp), StorageConfig(fsync=False))
        ledger = await store.open_ledger("persistent://public/default/bench")
        cursor = await ledger.open_cursor("sub", initial_position="earliest")
        items = positions(n)
        clock = Clock()
        loop = asyncio.get_running_loop()
        before = rss_bytes()
        tracker = BucketDelayedDeliveryTracker(
            cursor=cursor, snapshots=store.snapshots, tick_time_ms=TICK_MS, strict=False,
            on_due=lambda: None, loop=loop, clock_ms=clock)
        add = tracker.add
        start = time.process_time()
        for i, (pos, at) in enumerate(items):
            add(pos, at)
            if i % 50_000 == 0:
                await asyncio.sleep(0)      # let snapshot writes progress, as a broker would
        await tracker.wait_idle()
        add_s = time.process_time() - start
        grown = rss_bytes() - before
        estimate = tracker.memory_bytes
        stats = {"buckets": tracker.bucket_count, "loaded": tracker.loaded_index_count,
                 "snapshot_bytes": tracker.snapshot_size_bytes}
        assert len(tracker) == n
        await tracker.close()
        # Restart: a new tracker on the same cursor and snapshots recovers from the metadata
        # and the first segment of each bucket (the unsealed tail is re-read by a dispatcher).
        tracker = BucketDelayedDeliveryTracker(
            cursor=cursor, snapshots=store.snapshots, tick_time_ms=TICK_MS, strict=False,
            on_due=lambda: None, loop=loop, clock_ms=clock)
        wall = time.perf_counter()
        await tracker.recover()
        stats["recover_s"] = time.perf_counter() - wall
        stats["recovered"] = len(tracker)
        stats["recovered_estimate_bytes"] = tracker.memory_bytes
        assert n - 50_000 <= len(tracker) <= n
        clock.now_ms = T0 + 2 * SPAN_MS
        start = time.process_time()
        got = 0
        while True:
            batch = tracker.get_scheduled(1000)
            got += len(batch)
            if not batch:
                if not tracker.sealed.loading:
                    break
                await tracker.wait_idle()
        await tracker.wait_idle()
        get_s = time.process_time() - start
        assert got == stats["recovered"], (got, stats["recovered"])
        stats["ops"] = {f"{t}/{s}": v for (t, s), v in tracker.op_count.items() if v}
        await tracker.close()
        await store.close()
    return {"n": n, "rss_bytes": grown, "estimate_bytes": estimate, "add_per_s": n / add_s,
            "get_per_s": got / get_s, **stats}


async def run_scale(kind: str, n: int) -> dict[str, Any]:
    from broker.delayed.bucket import BucketDelayedDeliveryTracker
    from storage import SegmentStore
    from storage.config import StorageConfig
    from storage.positions import Position

    with tempfile.TemporaryDirectory(prefix="horae-bench-") as tmp:
        store = await SegmentStore.open(Path(tmp), StorageConfig(fsync=False))
        ledger = await store.open_ledger("persistent://public/default/bench")
        cursor = await ledger.open_cursor("sub", initial_position="earliest")
        clock = Clock()
        loop = asyncio.get_running_loop()
        before = rss_bytes()
        tracker = BucketDelayedDeliveryTracker(
            cursor=cursor, snapshots=store.snapshots, tick_time_ms=TICK_MS, strict=False,
            on_due=lambda: None, loop=loop, clock_ms=clock)
        add = tracker.add
        start = time.process_time()
        for i, (ledger_id, entry_id, published, at) in enumerate(scale_workload(kind, n)):
            if i % 50_000 == 0:
                clock.now_ms = published
                tracker.has_message_available()     # what the timer does as time goes by
            if i % 1_000 == 0:
                # a loop turn per read's worth of entries, as a dispatcher gives: a bucket's
                # snapshot write needs several (encode, store, cursor), and until it is
                # durable the bucket's segments stay in memory
                await asyncio.sleep(0)
            add(Position(ledger_id, entry_id), at)
        await tracker.wait_idle()
        tracker.has_message_available()
        await tracker.wait_idle()
        add_s = time.process_time() - start
        grown = rss_bytes() - before
        result = {"kind": kind, "n": n, "rss_bytes": grown, "estimate_bytes": tracker.memory_bytes,
                  "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "add_per_s": n / add_s, "buckets": tracker.bucket_count,
                  "loaded": tracker.loaded_index_count,
                  "snapshot_bytes": tracker.snapshot_size_bytes}
        assert len(tracker) == n
        await tracker.close()
        await store.close()
    return result


async def run_cancels(n: int) -> dict[str, Any]:
    """Tracker-level cancels (PIP-423), each settled right after its verdict as the
    subscription does once its acknowledgement is on the cursor: untracked targets (pending)
    and tracked ones (applied); what the tracker still holds after them."""
    from broker.delayed.cancels import CancelResult
    from broker.delayed.in_memory import InMemoryDelayedDeliveryTracker

    clock = Clock()
    loop = asyncio.get_running_loop()
    pending = list(positions(n, seed=2))
    before = rss_bytes()
    tracker = InMemoryDelayedDeliveryTracker(tick_time_ms=TICK_MS, strict=False,
                                             on_due=lambda: None, loop=loop, clock_ms=clock)
    cancel = tracker.cancel_delayed
    settle = tracker.cancel_settled
    start = time.process_time()
    for pos, at in pending:
        cancel(pos, at)
        settle(pos)
    pending_s = time.process_time() - start
    grown = rss_bytes() - before
    estimate = tracker.memory_bytes
    assert tracker.cancel_stats().pending == n
    del pending
    other = InMemoryDelayedDeliveryTracker(tick_time_ms=TICK_MS, strict=False,
                                           on_due=lambda: None, loop=loop, clock_ms=clock)
    items = list(positions(n, ledger_offset=10_000))
    for pos, at in items:
        other.add(pos, at)
    cancel = other.cancel_delayed
    settle = other.cancel_settled
    start = time.process_time()
    applied = 0
    for pos, at in items:
        applied += cancel(pos, at) is CancelResult.APPLIED
        settle(pos)
    applied_s = time.process_time() - start
    assert applied == n and len(other) == 0
    await tracker.close()
    await other.close()
    return {"n": n, "rss_bytes": grown, "estimate_bytes": estimate,
            "pending_per_s": n / pending_s, "applied_per_s": n / applied_s}


async def run_handout(buckets: int, step_ms: int, take: int, per_bucket: int = 25_000,
                      span_ms: int = 5_000) -> dict[str, Any]:
    """The bucket tracker's hand-out under random delays, as a dispatcher drives it: sealed
    buckets of ``per_bucket`` deliver times spread uniformly over ``span_ms`` (and half a
    bucket in the mutable one), the clock stepped by ``step_ms``, takes of ``take`` until one
    comes back short; the event loop thread's CPU per message handed out."""
    from broker.delayed.bucket import BucketDelayedDeliveryTracker
    from storage import SegmentStore
    from storage.config import StorageConfig
    from storage.positions import Position

    lead = 40_000
    with tempfile.TemporaryDirectory(prefix="horae-bench-") as tmp:
        store = await SegmentStore.open(Path(tmp), StorageConfig(fsync=False))
        ledger = await store.open_ledger("persistent://public/default/bench")
        cursor = await ledger.open_cursor("sub", initial_position="earliest")
        clock = Clock()
        tracker = BucketDelayedDeliveryTracker(
            cursor=cursor, snapshots=store.snapshots, tick_time_ms=1, strict=True,
            on_due=lambda: None, loop=asyncio.get_running_loop(), clock_ms=clock,
            min_index_count_per_bucket=per_bucket)
        rnd = random.Random(1).randrange
        for b in range(buckets + 1):        # a later ledger seals the one before
            for e in range(per_bucket if b < buckets else per_bucket // 2):
                tracker.add(Position(b + 1, e), T0 + lead + rnd(span_ms))
            await asyncio.sleep(0)
        await tracker.wait_idle()
        sealed = len(tracker.sealed.ranges)
        handed = calls = 0
        cpu = 0.0
        now = T0 + lead
        while now < T0 + lead + span_ms + step_ms:
            now += step_ms
            clock.now_ms = now
            while True:
                started = time.thread_time()
                got = tracker.get_scheduled(take)
                cpu += time.thread_time() - started
                calls += 1
                handed += len(got)
                if len(got) < take:
                    break
            await tracker.wait_idle()       # a segment read meanwhile comes in
        await tracker.close()
        await store.close()
    assert handed == buckets * per_bucket + per_bucket // 2, handed   # every one, once
    return {"buckets": sealed, "step_ms": step_ms, "take": take, "handed_out": handed,
            "calls": calls, "us_per_message": cpu * 1e6 / max(handed, 1),
            "us_per_call": cpu * 1e6 / max(calls, 1)}


def print_handout(bucket_counts: list[int], steps: tuple[int, ...] = (1, 10),
                  take: int = 100) -> None:
    print(f"bucket tracker hand-out under random delays (25,000 deliver times a sealed bucket "
          f"over 5 s, takes of {take}; Python {sys.version.split()[0]})")
    print(f"{'sealed':>8}{'step ms':>9}{'handed out':>12}{'calls':>8}{'µs/msg':>9}{'µs/call':>9}")
    for buckets in bucket_counts:
        for step in steps:
            r = asyncio.run(run_handout(buckets, step, take))
            print(f"{r['buckets']:>8}{step:>9}{r['handed_out']:>12,}{r['calls']:>8,}"
                  f"{r['us_per_message']:>9.2f}{r['us_per_call']:>9.1f}", flush=True)


def child(scenario: str, n: int) -> None:
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    if scenario.startswith("scale-"):
        result = asyncio.run(run_scale(scenario[len("scale-"):], n))
    elif scenario == "heap":
        result = run_heap(n)
    elif scenario == "in-memory":
        result = asyncio.run(run_in_memory(n))
    elif scenario == "cancels":
        result = asyncio.run(run_cancels(n))
    else:
        result = asyncio.run(run_bucket(n))
    print(json.dumps(result))


def measure(scenario: str, n: int) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--child", scenario, "--n", str(n)],
                         capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{scenario} failed:\n{out.stderr}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def print_scale(sizes: list[int], kinds: tuple[str, ...] = SCALE_KINDS) -> None:
    print(f"bucket tracker at scale (exact 1 ms deliver times, {ENTRIES_PER_LEDGER} entries/ledger,"
          f" {PUBLISH_PER_MS * 1000:,} msg/s simulated publish; Python {sys.version.split()[0]})")
    print(f"{'workload':10}{'messages':>13}{'RSS B/msg':>11}{'est B/msg':>11}{'in memory':>12}"
          f"{'buckets':>9}{'disk B/msg':>11}{'add/cpu-s':>12}{'peak MiB':>10}")
    for kind in kinds:
        for n in sizes:
            r = measure(f"scale-{kind}", n)
            print(f"{kind:10}{n:>13,}{r['rss_bytes'] / n:>11.3f}{r['estimate_bytes'] / n:>11.3f}"
                  f"{r['loaded']:>12,}{r['buckets']:>9,}{r['snapshot_bytes'] / n:>11.1f}"
                  f"{r['add_per_s']:>12,.0f}{r['peak_rss_bytes'] / 1048576:>10,.0f}", flush=True)
    print("targets: <= 1 B/msg fixed or dense, <= 4 B/msg random over a year, at 100M")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--in-memory", type=int, default=1_000_000, dest="in_memory")
    parser.add_argument("--bucket", type=int, default=10_000_000,
                        help=f"bucket tracker messages (at least {ENTRIES_PER_LEDGER:,}: a "
                             "bucket is sealed, and recovered after a restart, per ledger)")
    parser.add_argument("--cancels", type=int, default=1_000_000)
    parser.add_argument("--only-cancels", action="store_true", dest="only_cancels",
                        help="run only the cancel scenario")
    parser.add_argument("--quick", action="store_true", help="100k / 1M messages")
    parser.add_argument("--scale", help="bucket tracker index memory at these sizes (N,N,...)")
    parser.add_argument("--kinds", default=",".join(SCALE_KINDS),
                        help="--scale workloads to run (fixed,dense,year)")
    parser.add_argument("--pulsar", default="",
                        help="the --scale workloads on Pulsar 4.0 standalone at these sizes "
                             "(N,N,...; bench/delayed_pulsar.py)")
    parser.add_argument("--pulsar-trackers", default="in-memory", dest="pulsar_trackers",
                        help="Pulsar's trackers to run: in-memory,bucket")
    parser.add_argument("--pulsar-heap", default="2g", dest="pulsar_heap",
                        help="Pulsar's -Xmx (e.g. 6g)")
    parser.add_argument("--pulsar-conf", default="", dest="pulsar_conf",
                        help="extra Pulsar settings, key=value,key=value")
    parser.add_argument("--pulsar-lead-s", type=float, default=1800.0, dest="pulsar_lead_s",
                        help="seconds from the start to the first deliver time on Pulsar")
    parser.add_argument("--handout", default="",
                        help="only the bucket tracker's hand-out under random delays, with "
                             "these numbers of sealed buckets (N,N,...), the clock stepped by "
                             "1 and 10 ms")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.quick and not (args.scale or args.pulsar or args.only_cancels) \
            and args.bucket < ENTRIES_PER_LEDGER:
        parser.error(f"--bucket {args.bucket:,}: below {ENTRIES_PER_LEDGER:,} no bucket is "
                     "sealed, so the restart has nothing to recover")
    if args.child:
        child(args.child, args.n)
        return
    if args.handout:
        print_handout([int(x) for x in args.handout.split(",")])
        return
    if args.scale or args.pulsar:
        if args.scale:
            print_scale([int(x) for x in args.scale.split(",")], tuple(args.kinds.split(",")))
        if args.pulsar:
            from bench.delayed_pulsar import run_pulsar

            extra = dict(kv.split("=", 1) for kv in args.pulsar_conf.split(",") if kv)
            run_pulsar([int(x) for x in args.pulsar.split(",")], tuple(args.kinds.split(",")),
                       args.pulsar_trackers.split(","), scale_deliver_times,
                       heap=args.pulsar_heap, extra=extra, lead_s=args.pulsar_lead_s)
        return
    n_mem, n_bucket = (100_000, 1_000_000) if args.quick else (args.in_memory, args.bucket)
    c = measure("cancels", args.cancels)
    print(f"cancels (PIP-423, tracker level, each settled after its verdict): {c['n']:,} "
          f"pending cancels leave {c['rss_bytes'] / c['n']:.2f} B/cancel RSS "
          f"({c['estimate_bytes'] / c['n']:.2f} estimated; their durable record is the "
          f"cursor's ack); {c['pending_per_s']:,.0f} pending cancels/cpu-s, "
          f"{c['applied_per_s']:,.0f} applied cancels/cpu-s")
    if args.only_cancels:
        return
    rows = [("peer: heapq of tuples", measure("heap", n_mem)),
            ("in-memory tracker", measure("in-memory", n_mem)),
            ("bucket tracker", measure("bucket", n_bucket))]
    peer = rows[0][1]
    print(f"delayed-delivery trackers (uniform 2 s..1 h delays, {ENTRIES_PER_LEDGER} entries/ledger,"
          f" tick {TICK_MS} ms, Python {sys.version.split()[0]})")
    print(f"{'':24}{'messages':>11}{'RSS B/msg':>11}{'est B/msg':>11}{'x peer':>8}"
          f"{'add/cpu-s':>12}{'get/cpu-s':>12}")
    for name, r in rows:
        per = r["rss_bytes"] / r["n"]
        est = f"{r['estimate_bytes'] / r['n']:.2f}" if r["estimate_bytes"] is not None else "-"
        ratio = per / (peer["rss_bytes"] / peer["n"])
        print(f"{name:24}{r['n']:>11,}{per:>11.2f}{est:>11}{ratio:>8.3f}"
              f"{r['add_per_s']:>12,.0f}{r['get_per_s']:>12,.0f}")
    bucket = rows[2][1]
    print(f"bucket tracker: {bucket['buckets']} buckets, {bucket['loaded']:,} indexes loaded, "
          f"{bucket['snapshot_bytes'] / bucket['n']:.1f} snapshot bytes/msg on disk")
    print(f"bucket tracker restart: recover() of {bucket['recovered']:,} pending messages took "
          f"{bucket['recover_s']:.2f} s (metadata + first segment per bucket, no backlog read); "
          f"{bucket['recovered_estimate_bytes'] / bucket['recovered']:.2f} B/msg in memory after; "
          f"get/cpu-s above measured on the recovered tracker; ops after restart {bucket['ops']}")
    print("targets: in-memory <= 24 B/msg (Pulsar's Java index); bucket <= 4 B/msg in memory")


if __name__ == "__main__":
    main()
