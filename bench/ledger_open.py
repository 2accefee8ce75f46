"""Opening a managed ledger of many small segments: CPU and wall time of store open + ledger open.

Run: .venv/bin/python bench/ledger_open.py [--segments 20000] [--per-segment 50] [--rounds 3]
         [--compare-with CHECKOUT] [--store DIR]

What it builds (once, with this checkout's storage code): one topic of ``--segments`` sealed
segments of ``--per-segment`` 10-byte entries, each with its persisted index (``.idx``), as a
delayed-delivery tracker's snapshot ledgers leave them (one small ledger per bucket), one
more of a single entry, and one cursor with a property; the store is closed cleanly, so every
segment is sealed and indexed. Then, per round, in a fresh child process: ``SegmentStore.open``
and ``open_ledger`` of that topic, the process's CPU seconds and the wall time of each, and
the ledger and entry counts. ``--compare-with CHECKOUT`` runs each round with the other
checkout's storage code too, right after this one's, on the same store: paired before/after.
"""

from __future__ import annotations

import argparse
import asyncio
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
    del sys.path[0]  # bench/storage.py would shadow the storage package
ROOT = Path(os.environ.get("HORAE_BENCH_ROOT", str(HERE))).resolve()
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from storage import SegmentStore, StorageConfig  # noqa: E402

TOPIC = "persistent://bench/ledger-open/snapshots"
PAYLOAD = b"0123456789"


async def build(root: Path, segments: int, per_segment: int) -> int:
    """The store: `segments` sealed ledgers of `per_segment` entries and an open one."""
    config = StorageConfig(mark_delete_rate_limit_per_sec=0, max_entries_per_ledger=per_segment,
                           fsync=False)
    store = await SegmentStore.open(root, config)
    ml = await store.open_ledger(TOPIC)
    batch = 1000
    total = segments * per_segment + 1
    written = 0
    while written < total:
        n = min(batch, total - written)
        await asyncio.gather(*(ml.append(PAYLOAD) for _ in range(n)))
        written += n
    cursor = await ml.open_cursor("bench", initial_position="earliest")
    cursor.set_property("bucket", "1")
    await store.close()
    return total


async def measure(root: Path) -> dict[str, float]:
    """Child process: open the store, then the topic."""
    c0, t0 = time.process_time(), time.perf_counter()
    store = await SegmentStore.open(root, StorageConfig(mark_delete_rate_limit_per_sec=0))
    c1, t1 = time.process_time(), time.perf_counter()
    ml = await store.open_ledger(TOPIC)
    c2, t2 = time.process_time(), time.perf_counter()
    out = {"store_cpu": c1 - c0, "store_wall": t1 - t0, "ledger_cpu": c2 - c1,
           "ledger_wall": t2 - t1, "entries": ml.number_of_entries,
           "ledgers": len(ml.ledgers)}
    await store.close()
    return out


def run_child(checkout: Path, root: Path) -> dict[str, float]:
    env = dict(os.environ, HORAE_BENCH_ROOT=str(checkout))
    proc = subprocess.run([sys.executable, __file__, "--child", str(root)], check=True,
                          capture_output=True, text=True, env=env)
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--segments", type=int, default=20_000)
    parser.add_argument("--per-segment", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compare-with", type=Path, default=None, help="another checkout")
    parser.add_argument("--store", type=Path, default=None,
                        help="reuse (or build into) this store directory; kept afterwards")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    import uvloop

    if args.child:
        print(json.dumps(uvloop.run(measure(args.child))))
        return
    base = args.store or Path(tempfile.mkdtemp(prefix="horae-ledger-open-"))
    try:
        if not (base / "ledgers").exists():
            t0 = time.perf_counter()
            total = uvloop.run(build(base, args.segments, args.per_segment))
            print(f"built {total:,} entries in {args.segments + 1:,} segments in "
                  f"{time.perf_counter() - t0:.1f} s under {base}")
        runs = [("this", HERE)] + ([("other", args.compare_with.resolve())]
                                   if args.compare_with else [])
        print(f"{'code':>6} {'store cpu':>9} {'store s':>8} {'ledger cpu':>10} "
              f"{'ledger s':>9} {'ledgers':>8} {'entries':>10}")
        for _ in range(args.rounds):
            for label, checkout in runs:
                r = run_child(checkout, base)
                print(f"{label:>6} {r['store_cpu']:>9.3f} {r['store_wall']:>8.3f} "
                      f"{r['ledger_cpu']:>10.3f} {r['ledger_wall']:>9.3f} "
                      f"{r['ledgers']:>8,} {r['entries']:>10,}", flush=True)
    finally:
        if args.store is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
