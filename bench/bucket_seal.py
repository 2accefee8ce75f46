"""CPU per bucket seal of the bucket tracker when the cursor already records many buckets.

Usage: .venv/bin/python bench/bucket_seal.py [--buckets 2000,20000,200000] [--seals 100]
           [--entries 100] [--rounds 1] [--compare-with CHECKOUT]

Every sealed bucket's persist records the bucket in a cursor property and flushes the cursor
(storage/cursor.py: the whole cursor file is written again, its properties included). The
cursor of a bucketed delayed tracker holds one property per bucket: 2,000 for 100M pending
messages in a default broker's layout (50,000 indexes per bucket), 200,000 in 500-entry
buckets. This bench gives a real tracker on a real segment store (no fsync) a cursor holding
``--buckets`` bucket properties, then seals ``--seals`` more buckets of ``--entries`` indexes
each through the tracker's own seal (snapshot written in the executor, property set, cursor
flushed), one after the other (each seal's persist done before the next, as buckets sealed
minutes apart), and prints per seal:

- ``loop_cpu_ms``: CPU of the event loop's thread (the cursor encode runs there);
- ``process_cpu_ms``: CPU of every thread (the snapshot encode and the file writes too);
- ``cursor_bytes``: the cursor file one flush writes;
- ``python_calls``: Python function calls on the loop's thread per seal (C calls too, as
  ``sys.setprofile`` sees them), counted over ``--seals`` more seals after the timed ones: a
  figure the machine's load cannot move.

``--compare-with CHECKOUT`` runs the same in a child process with another checkout's code,
alternated with this one's (paired, same minutes). The buckets already recorded are cursor
properties only (the tracker is not told about them): what grows with their number in a seal
is the cursor's work.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
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
#: the checkout whose code runs (``--compare-with`` sets it for the other checkout's child)
ROOT = Path(os.environ.get("HORAE_BENCH_ROOT", str(HERE))).resolve()
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TOPIC = "persistent://public/default/bucket-seal-bench"


async def measure(root: Path, buckets: int, seals: int, entries: int) -> dict[str, Any]:
    from pyroaring import BitMap

    from broker.delayed.bucket import BucketDelayedDeliveryTracker
    from broker.delayed.bucket_records import BUCKET_KEY_PREFIX, bucket_key
    from broker.delayed.packed import POSITION_BITS
    from storage import SegmentStore
    from storage.config import StorageConfig

    store = await SegmentStore.open(root, StorageConfig(fsync=False))
    ledger = await store.open_ledger(TOPIC)
    cursor = await ledger.open_cursor("sub", initial_position="earliest")
    now = time.time_ns() // 1_000_000
    t = BucketDelayedDeliveryTracker(
        cursor=cursor, snapshots=store.snapshots, tick_time_ms=1, strict=True,
        on_due=lambda: None, loop=asyncio.get_running_loop(), clock_ms=lambda: now)
    await t.recover()
    # the buckets recorded already: ledger ids and snapshot ids as a long-lived topic has them
    for b in range(buckets):
        cursor.set_property(bucket_key(1_000 + b, 1_000 + b), str(500_000 + b))
    await cursor.flush()
    seal = t._snapshots.seal            # the tracker's seal of its mutable bucket
    later = now + 86_400_000            # not due for a day: the segments stay parked
    loop_cpu = process_cpu = 0.0
    for k in range(seals):
        ledger_id = 1_000 + buckets + k
        high = ledger_id << POSITION_BITS
        ts_col = array("q", range(later, later + entries))
        pos_col = array("Q", range(high, high + entries))
        members = {ledger_id: BitMap(range(entries))}
        c0, p0 = time.thread_time(), time.process_time()
        seal(ledger_id, ledger_id, ts_col, pos_col, members)
        await t.wait_idle()             # snapshot written, property set, cursor flushed
        loop_cpu += time.thread_time() - c0
        process_cpu += time.process_time() - p0
    calls = [0]

    def count(frame: Any, event: str, arg: Any) -> None:
        if event in ("call", "c_call"):
            calls[0] += 1

    for k in range(seals, 2 * seals):   # the same seals again, counted
        ledger_id = 1_000 + buckets + k
        high = ledger_id << POSITION_BITS
        ts_col = array("q", range(later, later + entries))
        pos_col = array("Q", range(high, high + entries))
        members = {ledger_id: BitMap(range(entries))}
        sys.setprofile(count)
        seal(ledger_id, ledger_id, ts_col, pos_col, members)
        await t.wait_idle()
        sys.setprofile(None)
    recorded = sum(1 for key in cursor.properties if key.startswith(BUCKET_KEY_PREFIX))
    assert recorded == buckets + 2 * seals, "every seal recorded its bucket"
    size = cursor.persisted_size_bytes
    await t.close()
    await store.close()
    return {"buckets": buckets, "seals": seals,
            "loop_cpu_ms": round(loop_cpu * 1000 / seals, 3),
            "process_cpu_ms": round(process_cpu * 1000 / seals, 3), "cursor_bytes": size,
            "python_calls": round(calls[0] / seals)}


def _child(code: Path, buckets: int, seals: int, entries: int) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--child", str(buckets), "--seals",
                          str(seals), "--entries", str(entries)],
                         check=True, capture_output=True, text=True,
                         env={**os.environ, "HORAE_BENCH_ROOT": str(code)}).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--buckets", default="2000,20000,200000",
                   help="bucket properties the cursor holds before the seals")
    p.add_argument("--seals", type=int, default=100)
    p.add_argument("--entries", type=int, default=100, help="indexes per sealed bucket")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--compare-with", dest="compare_with",
                   help="another checkout: the same seals with its code, alternated")
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child is not None:
        with tempfile.TemporaryDirectory(prefix="horae-bucket-seal-") as tmp:
            r = asyncio.run(measure(Path(tmp), args.child, args.seals, args.entries))
        print(json.dumps(r))
        return
    codes = [("", HERE)]
    if args.compare_with:
        codes.append((f" ({args.compare_with})", Path(args.compare_with).resolve()))
    for _ in range(args.rounds):
        for n in (int(x) for x in args.buckets.split(",")):
            for label, code in codes:
                r = _child(code, n, args.seals, args.entries)
                print(f"  {n:>7,} buckets{label} (load {os.getloadavg()[0]:.1f}): "
                      f"{r['loop_cpu_ms']:.3f} ms loop CPU, {r['process_cpu_ms']:.3f} ms "
                      f"process CPU, {r['python_calls']:,} Python calls per seal, cursor file "
                      f"{r['cursor_bytes']:,} B", flush=True)


if __name__ == "__main__":
    main()
