"""The event loop's time per cursor save when the cursor holds many acknowledged-out-of-order ids.

Usage: .venv/bin/python bench/cursor_save.py [--ids 1000000,10000000] [--ledgers 200,2000]
           [--touched 1,100] [--saves 20] [--rounds 1] [--compare-with CHECKOUT]

A cursor (storage/cursor.py) of ``--ids`` acknowledged ids spread over ``--ledgers`` ledgers of
50,000 entries (every tenth entry of each, as out-of-order acks leave them: one bitmap per
ledger, ~8 KB serialized each) on the store's own cursor set (CursorSet: the real save, its
I/O thread and files, no fsync) whose ledgers are a stand-in view. Then ``--saves`` times: a
batch of 100 acks in each of ``--touched`` ledgers, then a save (``flush``), as a catch-up
acknowledges between the background flushes. Per save it prints:

- ``loop_ms``: the longest stretch the save holds the loop (from ``flush()`` until it waits
  for the I/O thread: the encode), mean and max over the saves;
- ``loop_cpu_ms``: CPU of the loop's thread in that stretch;
- ``save_cpu_ms``: CPU of every thread for the whole save (the join, CRC and write too);
- ``bytes``: the cursor file.

``--compare-with CHECKOUT`` runs the same in a child process with another checkout's code,
alternated with this one's (paired, same minutes).
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
if sys.path and Path(sys.path[0]).resolve() == HERE / "bench":
    del sys.path[0]                  # bench/storage.py would shadow the storage package
#: the checkout whose code runs (``--compare-with`` sets it for the other checkout's child)
ROOT = Path(os.environ.get("HORAE_BENCH_ROOT", str(HERE))).resolve()
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PER_LEDGER = 50_000
FIRST = 10


class _Ledgers:
    """A LedgerView of *n* complete ledgers of PER_LEDGER entries, ids FIRST.. (the last one
    current)."""

    def __init__(self, n: int) -> None:
        from storage.positions import Position
        self._position = Position
        self.first_ledger_id = FIRST
        self.current_ledger_id = FIRST + n - 1
        self.last_confirmed = Position(self.current_ledger_id, PER_LEDGER - 1)

    def ledger_extent(self, ledger_id: int) -> tuple[int, bool, Any]:
        if FIRST <= ledger_id <= self.current_ledger_id:
            return PER_LEDGER, ledger_id != self.current_ledger_id, None
        return 0, True, None

    def ledger_after(self, ledger_id: int) -> int | None:
        return ledger_id + 1 if FIRST - 1 <= ledger_id < self.current_ledger_id else None

    def entries_between(self, start_exclusive: Any, end_inclusive: Any) -> int:
        def flat(p: Any) -> int:
            return int((p.ledger_id - FIRST) * PER_LEDGER + p.entry_id)
        return max(0, flat(end_inclusive) - flat(start_exclusive))

    def next_position(self, pos: Any) -> Any:
        if pos.entry_id + 1 < PER_LEDGER or pos.ledger_id >= self.current_ledger_id:
            return self._position(pos.ledger_id, pos.entry_id + 1)
        return self._position(pos.ledger_id + 1, 0)


async def measure(root: Path, ids: int, ledgers: int, touched: int, saves: int
                  ) -> dict[str, Any]:
    from pyroaring import BitMap

    from storage.cursor_files import CursorFiles
    from storage.cursors import CursorSet
    from storage.fileops import FileOps

    loop = asyncio.get_running_loop()
    view = _Ledgers(ledgers)
    (root / "cursors").mkdir()
    pool = ThreadPoolExecutor(2)
    cursors = CursorSet(view, CursorFiles(FileOps(), root / "cursors", fsync=False),  # type: ignore[arg-type]
                        loop, pool, lambda _id: None, [])
    cursor = await cursors.open("sub", "earliest")
    per = ids // ledgers
    step = PER_LEDGER // per
    for k in range(ledgers):   # entry 0 stays unacknowledged: mark-delete does not move
        cursor.delete_entry_ids(FIRST + k, BitMap(range(1 + k % (step - 1), PER_LEDGER, step)))
    assert len(cursor.individually_deleted) == per * ledgers
    await cursor.flush()                         # the first save encodes every bitmap
    stalls: list[float] = []
    loop_cpu = save_cpu = 0.0
    for s in range(saves):
        for t in range(touched):   # 100 new acks in each touched ledger
            ledger_id = FIRST + (s * touched + t) % ledgers
            offset = (ledger_id - FIRST) % (step - 1) + 1 + 1 + s % (step - 2)
            cursor.delete_entry_ids(ledger_id, BitMap(range(offset, offset + 100 * step, step)))
        p0, c0, w0 = time.process_time(), time.thread_time(), time.perf_counter()
        task = asyncio.ensure_future(cursor.flush())
        await asyncio.sleep(0)                   # the save's first step: until it waits
        stalls.append(time.perf_counter() - w0)
        loop_cpu += time.thread_time() - c0
        await task
        save_cpu += time.process_time() - p0
    size = cursor.persisted_size_bytes
    await cursors.close()
    pool.shutdown()
    return {"ids": ids, "ledgers": ledgers, "touched": touched, "saves": saves,
            "loop_ms": round(sum(stalls) * 1000 / saves, 3),
            "loop_max_ms": round(max(stalls) * 1000, 3),
            "loop_cpu_ms": round(loop_cpu * 1000 / saves, 3),
            "save_cpu_ms": round(save_cpu * 1000 / saves, 3), "bytes": size}


def _child(code: Path, ids: int, ledgers: int, touched: int, saves: int) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--child", f"{ids},{ledgers},{touched}",
                          "--saves", str(saves)],
                         check=True, capture_output=True, text=True,
                         env={**os.environ, "HORAE_BENCH_ROOT": str(code)}).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ids", default="1000000,10000000")
    p.add_argument("--ledgers", default="200,2000", help="one per --ids value")
    p.add_argument("--touched", default="1,100", help="ledgers acknowledged in between saves")
    p.add_argument("--saves", type=int, default=20)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--compare-with", dest="compare_with",
                   help="another checkout: the same saves with its code, alternated")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child is not None:
        ids, ledgers, touched = (int(x) for x in args.child.split(","))
        with tempfile.TemporaryDirectory(prefix="horae-cursor-save-") as tmp:
            r = asyncio.run(measure(Path(tmp), ids, ledgers, touched, args.saves))
        print(json.dumps(r))
        return
    codes = [("this", HERE)]
    if args.compare_with:
        codes.append((str(args.compare_with), Path(args.compare_with).resolve()))
    sizes = list(zip((int(x) for x in args.ids.split(",")),
                     (int(x) for x in args.ledgers.split(",")), strict=True))
    for _ in range(args.rounds):
        for ids, ledgers in sizes:
            for touched in (int(x) for x in args.touched.split(",")):
                for label, code in codes:
                    r = _child(code, ids, ledgers, touched, args.saves)
                    print(f"  {ids:>10,} ids / {ledgers:,} ledgers, {touched:>4} touched "
                          f"[{label}] (load {os.getloadavg()[0]:.1f}): loop {r['loop_ms']:.2f} "
                          f"ms (max {r['loop_max_ms']:.2f}), loop CPU {r['loop_cpu_ms']:.2f} "
                          f"ms, save CPU {r['save_cpu_ms']:.2f} ms, file {r['bytes']:,} B",
                          flush=True)


if __name__ == "__main__":
    main()
