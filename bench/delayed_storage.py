"""Storage held by long delays: bytes the ledgers keep per byte of pending delayed messages.

Usage: .venv/bin/python bench/delayed_storage.py [--messages 200000] [--size 1024]

On the real segment store (in process, no broker): a topic receives ``--messages`` messages of
``--size`` bytes; a share of them is delayed for months (pending), every other one is
acknowledged at once by the subscription, out of order, as a consumer does. Then the ledgers
are trimmed as the broker's trimmer does and the bytes the topic still keeps are compared with
the bytes of the pending messages (``kept / pending``; the target is <= 1.1 whatever the spread).
Workloads (how the pending messages sit in the backlog):

- ``all``: every message delayed (nothing to trim; the floor: the store's own overhead);
- ``every-N``: one message in N delayed, spread evenly through the backlog;
- ``first-1pct``: the first 1% delayed, then only messages consumed at once (one early
  long-delayed message holds back everything after it).

A pending delayed message holds the mark-delete position back, so every ledger from the one
holding the oldest pending message on is kept, whatever share of it is acknowledged.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if sys.path and Path(sys.path[0]).resolve() == ROOT / "bench":
    del sys.path[0]                  # bench/storage.py would shadow the storage package
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TOPIC = "persistent://public/default/delayed-storage"


async def run(name: str, delayed: Callable[[int], bool], messages: int, size: int,
              per_ledger: int) -> dict[str, object]:
    from storage import SegmentStore
    from storage.config import StorageConfig

    with tempfile.TemporaryDirectory(prefix="horae-delayed-storage-") as tmp:
        store = await SegmentStore.open(Path(tmp), StorageConfig(
            fsync=False, max_entries_per_ledger=per_ledger))
        ledger = await store.open_ledger(TOPIC)
        cursor = await ledger.open_cursor("sub", initial_position="earliest")
        payload = b"x" * size
        pending = 0
        for chunk in range(0, messages, 5_000):
            n = min(5_000, messages - chunk)
            positions = await asyncio.gather(*(ledger.append(payload) for _ in range(n)))
            acked = [p for k, p in enumerate(positions) if not delayed(chunk + k)]
            pending += n - len(acked)
            cursor.delete(acked)
        await ledger.append(payload)             # roll: the last ledger holding data is sealed
        await cursor.flush()
        written = ledger.total_size_bytes
        await ledger.trim()
        kept = ledger.total_size_bytes - len(payload)
        await store.close()
    pending_bytes = pending * size
    return {"workload": name, "pending": pending, "pending_bytes": pending_bytes,
            "written_bytes": written, "kept_bytes": kept,
            "kept_per_pending": round(kept / pending_bytes, 2) if pending_bytes else None}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--per-ledger", type=int, default=5_000, dest="per_ledger")
    args = p.parse_args()
    first = args.messages // 100
    workloads: list[tuple[str, Callable[[int], bool]]] = [
        ("all", lambda i: True),
        ("every-10", lambda i: i % 10 == 0),
        ("every-1000", lambda i: i % 1000 == 0),
        ("first-1pct", lambda i: i < first),
    ]
    print(f"{'workload':<12} {'pending':>9} {'pending MB':>11} {'written MB':>11} "
          f"{'kept MB':>9} {'kept/pending':>13}")
    for name, rule in workloads:
        r = asyncio.run(run(name, rule, args.messages, args.size, args.per_ledger))
        print(f"{name:<12} {r['pending']:>9,} {r['pending_bytes'] / 1e6:>11.1f} "  # type: ignore[operator]
              f"{r['written_bytes'] / 1e6:>11.1f} {r['kept_bytes'] / 1e6:>9.1f} "  # type: ignore[operator]
              f"{r['kept_per_pending']:>13}")


if __name__ == "__main__":
    main()
