"""Bucket tracker recovery with a large index: how long until the first due message, and until
every bucket is known, on the real segment store.

Usage: .venv/bin/python bench/delayed_restart.py [--pending 1000000] [--per-bucket 500]
           [--reads 16,1] [--cancel-every 10] [--old-format] [--compare-with CHECKOUT]
           [--build-with CHECKOUT] [--store DIR] [--rounds N]

This is the *store-building path*: it does not publish through a client. Positions are fed to
the bucket tracker directly (``--per-bucket`` indexes per ledger, so per bucket), the tracker
seals them into snapshots in the real ``SegmentStore`` and records them in a real cursor's
properties, as a broker does; every ``--cancel-every``-th position is acknowledged out of order
(an individual delete on the cursor, which recovery must not hand out again). The process then
drops everything without closing the tracker (what kill -9 leaves: durable snapshots and cursor
properties) and, in a fresh child process per ``--reads`` value, reopens the store and recovers:

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
- early / lost / duplicate / acknowledged handed out again, over the whole drain;
- ``*_cpu_s``: the process's CPU seconds (every thread) at each of these points, and at the
  last late message handed out (``caught_up_cpu_s``): steadier than wall times on a busy
  machine;
- memory per pending message when the index serves and when every first segment is in: the
  tracker's estimate (``index_bytes_*``, ``pulsar_delayed_message_index_size_bytes``) and the
  process's RSS growth from before the store's open (``rss_bytes_*``: the store, the cursor
  with its acknowledgements, the index).

``--reads`` sets how many snapshot reads recovery keeps in flight (``RECOVERY_READS``); 1 is
one read after another. ``--compare-with CHECKOUT`` runs the same recovery and drain (this
script) with another checkout's broker code on a copy of the same store: paired before/after.
A store whose snapshot format the other checkout cannot read (a newer segment layout) is
built with its code instead: ``--build-with CHECKOUT``, so both recover the same older store.
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
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
if sys.path and Path(sys.path[0]).resolve() == HERE / "bench":
    del sys.path[0]                  # bench/storage.py would shadow the storage package
#: the checkout whose broker code runs (``--compare-with`` sets it for the other checkout)
ROOT = Path(os.environ.get("HORAE_BENCH_ROOT", str(HERE))).resolve()
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TOPIC = "persistent://public/default/delayed-restart-bench"
SPREAD_MS = 3_600_000


def deliver_at(i: int, base: int) -> int:
    """Out of position order: a permutation of times over SPREAD_MS, the first 1% in the past."""
    return base - SPREAD_MS // 100 + (i * 2_654_435_761) % SPREAD_MS


async def build(root: Path, pending: int, per_bucket: int, cancel_every: int, base: int,
                old_format: bool) -> None:
    from broker.delayed.bucket import BucketDelayedDeliveryTracker
    from storage import SegmentStore
    from storage.config import StorageConfig

    store = await SegmentStore.open(root, StorageConfig(fsync=False,
                                                        max_entries_per_ledger=per_bucket))
    ledger = await store.open_ledger(TOPIC)
    cursor = await ledger.open_cursor("sub", initial_position="earliest")
    t = BucketDelayedDeliveryTracker(
        cursor=cursor, snapshots=store.snapshots, tick_time_ms=1, strict=True,
        on_due=lambda: None, loop=asyncio.get_running_loop(),
        clock_ms=lambda: base - SPREAD_MS,      # when published, nothing was due yet
        min_index_count_per_bucket=per_bucket)
    if not old_format:
        await t.recover()               # as a broker does on every subscription it opens
    started = time.perf_counter()
    acked = []
    starts: dict[int, int] = {}         # ledger id -> index of its entry 0
    last = None
    for chunk in range(0, pending, 10_000):
        positions = await asyncio.gather(*(ledger.append(b"d")
                                           for _ in range(min(10_000, pending - chunk))))
        for k, pos in enumerate(positions):
            i = chunk + k
            starts.setdefault(pos.ledger_id, i - pos.entry_id)
            t.add(pos, deliver_at(i, base))
            if cancel_every and i % cancel_every == 3:
                acked.append(pos)
            last = pos
    cursor.read_position = ledger.next_position(last)
    await t.wait_idle()
    for k in range(0, len(acked), 10_000):
        cursor.delete(acked[k:k + 10_000])
    await cursor.flush()
    sealed = t.sealed.ranges
    sealed_to = sealed[-1][1]
    after = [start for lid, start in starts.items() if lid > sealed_to]
    (root / "bench.json").write_text(json.dumps({
        "starts": {str(k): v for k, v in starts.items()}, "sealed_to_ledger": sealed_to,
        "sealed_count": min(after) if after else pending}))
    print(f"  built {pending:,} pending in {len(sealed):,} buckets "
          f"({len(acked):,} acknowledged out of order) in {time.perf_counter() - started:.1f} s")
    # no t.close(): the process goes away as after kill -9


async def recover(root: Path, pending: int, per_bucket: int, cancel_every: int, base: int,
                  reads: int, drain_s: float = 0.0) -> dict[str, object]:
    import broker.delayed.bucket_snapshots as bs
    from broker.delayed.bucket import BucketDelayedDeliveryTracker
    from storage import SegmentStore
    from storage.config import StorageConfig
    from storage.positions import Position

    bs.RECOVERY_READS = reads
    rss_before = _rss()
    t0 = time.perf_counter()
    c0 = time.process_time()          # CPU of every thread of the process
    cpu: dict[str, float] = {}
    layout = json.loads((root / "bench.json").read_text())
    starts = {int(k): v for k, v in layout["starts"].items()}
    sealed_to = layout["sealed_to_ledger"]
    store = await SegmentStore.open(root, StorageConfig(fsync=False,
                                                        max_entries_per_ledger=per_bucket))
    store_open = time.perf_counter() - t0
    cpu["store_open_cpu_s"] = time.process_time() - c0
    ledger = await store.open_ledger(TOPIC)
    cursor = await ledger.open_cursor("sub")
    ledger_open = time.perf_counter() - t0
    cpu["ledger_open_cpu_s"] = time.process_time() - c0
    cursor.read_position = Position(sealed_to + 1, 0)
    now = [base + 1]
    due = asyncio.Event()
    t = BucketDelayedDeliveryTracker(
        cursor=cursor, snapshots=store.snapshots, tick_time_ms=1, strict=True,
        on_due=due.set, loop=asyncio.get_running_loop(), clock_ms=lambda: now[0],
        min_index_count_per_bucket=per_bucket)
    await t.recover()
    serving = time.perf_counter() - t0
    cpu["recover_returned_cpu_s"] = time.process_time() - c0
    memory = {"index_bytes_at_serving": t.memory_bytes, "rss_bytes_at_serving": _rss() - rss_before}
    segments_in = None
    memberships_in = None
    seen = bytearray(pending)        # one byte per message: 10M fit where sets would not
    early = dup = acked_out = 0
    first_due = None
    catch_up: list[float] = []
    drained = False
    while True:                      # everything due while down, then the clock runs forward
        if memberships_in is None and not getattr(t.sealed, "reading", 0):
            memberships_in = time.perf_counter() - t0
            cpu["index_serving_cpu_s"] = time.process_time() - c0
        if segments_in is None and not t.sealed.loading:
            segments_in = time.perf_counter() - t0
            cpu["first_segments_in_cpu_s"] = time.process_time() - c0
            memory |= {"index_bytes_at_segments_in": t.memory_bytes,
                       "rss_bytes_at_segments_in": _rss() - rss_before}
        batch = t.get_scheduled(10_000)
        late_in_batch = False
        for ledger_id, entry_id in batch:
            i = starts[ledger_id] + entry_id
            at = time.perf_counter()
            if first_due is None:
                first_due = at - t0
                cpu["first_due_cpu_s"] = time.process_time() - c0
                first_at = at
            if deliver_at(i, base) > now[0]:
                early += 1
            if seen[i]:
                dup += 1
            seen[i] = 1
            if cancel_every and i % cancel_every == 3:
                acked_out += 1
            if deliver_at(i, base) <= base:
                catch_up.append((at - first_at) * 1000)
                late_in_batch = True
        if late_in_batch:            # CPU until the last late message so far (catch_up_n)
            cpu["caught_up_cpu_s"] = time.process_time() - c0
        if drain_s and time.perf_counter() - t0 > drain_s:
            break                    # the drain was cut short: nothing is counted lost
        if not batch and t.sealed.loading:
            due.clear()              # a first segment is on its way: woken when it is in
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(due.wait(), 0.2)
            continue
        if not batch:
            await t.wait_idle()
            if t.has_message_available():
                continue
            if now[0] > base + SPREAD_MS:
                drained = True
                break
            now[0] += 60_000 if t.has_message_available() or t.sealed.loading else SPREAD_MS
    lost = sum(1 for i in range(layout["sealed_count"])
               if not seen[i] and not (cancel_every and i % cancel_every == 3)
               ) if drained else None
    catch_up.sort()
    return {"reads": reads, "store_open_s": round(store_open, 3),
            "ledger_open_s": round(ledger_open, 3), "recover_returned_s": round(serving, 3),
            "index_serving_s": round(memberships_in, 3) if memberships_in is not None else None,
            "first_segments_in_s": round(segments_in, 3) if segments_in is not None else None,
            "first_due_s": round(first_due, 3) if first_due is not None else None,
            "catch_up_n": len(catch_up),
            "catch_up_p99_ms": round(catch_up[int(len(catch_up) * 0.99) - 1], 1)
            if catch_up else None,
            **{k: round(v, 3) for k, v in cpu.items()},
            "early": early, "lost": lost, "duplicate": dup,
            "acked_handed_out": acked_out, "handed_out": sum(seen), "drained": drained,
            **{k: round(v / pending, 2) if "bytes" in k else v for k, v in memory.items()}}


def _rss() -> int:
    """Resident set of this process (the store, the cursor with its acks, the index and the
    interpreter), bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pending", type=int, default=1_000_000)
    p.add_argument("--per-bucket", type=int, default=500, dest="per_bucket")
    p.add_argument("--reads", default="16,1")
    p.add_argument("--cancel-every", type=int, default=10, dest="cancel_every")
    p.add_argument("--compare-with", dest="compare_with",
                   help="another checkout of the project: this recovery with its broker code "
                        "runs on a copy of the same store too")
    p.add_argument("--old-format", action="store_true", dest="old_format",
                   help="build the store without the snapshot format property (an older "
                        "version's store: recovery takes the safe path)")
    p.add_argument("--build-with", dest="build_with",
                   help="build the store with another checkout's broker code (a store of that "
                        "version's snapshot format, which both checkouts can then recover)")
    p.add_argument("--drain-s", type=float, default=0.0, dest="drain_s",
                   help="stop draining after this many seconds (lost is then not counted)")
    p.add_argument("--store", help="keep the built store in this directory and reuse it when "
                                    "it is there already (same --pending and --per-bucket)")
    p.add_argument("--rounds", type=int, default=1,
                   help="run the recoveries (and the --compare-with one) this many times")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        root, reads, base = args.child.split(",")
        if reads == "0":
            asyncio.run(build(Path(root), args.pending, args.per_bucket, args.cancel_every,
                              int(base), args.old_format))
            return
        r = asyncio.run(recover(Path(root), args.pending, args.per_bucket, args.cancel_every,
                                int(base), int(reads), args.drain_s))
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
            subprocess.run([sys.executable, __file__, "--pending", str(args.pending),
                            "--per-bucket", str(args.per_bucket), "--cancel-every",
                            str(args.cancel_every),
                            *(["--old-format"] if args.old_format else []),
                            "--child", f"{root / 'built'},0,{base}"], check=True,
                           env={**os.environ, "HORAE_BENCH_ROOT": str(
                               Path(args.build_with).resolve() if args.build_with else HERE)})
        runs = [(int(x), str(HERE), "") for x in args.reads.split(",")]
        if args.compare_with:
            runs.append((16, str(Path(args.compare_with).resolve()), f" ({args.compare_with})"))
        for _ in range(args.rounds):
            for reads, code, label in runs:
                run = root / f"run-{reads}"
                shutil.rmtree(run, ignore_errors=True)
                shutil.copytree(root / "built", run)
                out = subprocess.run([sys.executable, __file__, "--pending", str(args.pending),
                                      "--per-bucket", str(args.per_bucket), "--cancel-every",
                                      str(args.cancel_every), "--drain-s", str(args.drain_s),
                                      "--child", f"{run},{reads},{base}"],
                                     check=True, capture_output=True, text=True,
                                     env={**os.environ, "HORAE_BENCH_ROOT": code}).stdout
                shutil.rmtree(run)
                load = os.getloadavg()[0]
                print(f"  recovery{label}, {reads} reads in flight (load {load:.1f}): "
                      f"{out.strip().splitlines()[-1]}", flush=True)

if __name__ == "__main__":
    main()
