"""Storage held by long delays: bytes the ledgers keep per byte of pending delayed messages.

Usage: .venv/bin/python bench/delayed_storage.py [--messages 200000] [--size 1024]
                                                   [--mode both|hold|copy]

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
holding the oldest pending message on is kept, whatever share of it is acknowledged (mode
``hold``). Mode ``copy`` runs the copy-forward first (broker/delayed/relocate.py: the pending
entries of ledgers held only by them are copied to due-time side segments, then the ledgers
are trimmed); ``kept`` then counts the side segments too. ``both`` (the default) prints the
two, one after the other. ``write amp.`` is bytes written to disk per byte appended.
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
              per_ledger: int, copy: bool) -> dict[str, object]:
    from broker.delayed.relocate import relocate_held
    from protocol import pulsar_pb as pb
    from protocol.metadata import encode_entry
    from storage import SegmentStore
    from storage.config import StorageConfig
    from storage.positions import Position

    due = 1_900_000_000_000          # months ahead
    body = b"x" * size

    def message(i: int) -> bytes:
        md = pb.MessageMetadata(producer_name="bench", sequence_id=i,
                                publish_time=1_700_000_000_000)
        if delayed(i):
            md.deliver_at_time = due + (i * 7_919 % 365) * 86_400_000  # spread over a year
        return encode_entry(md, body)

    with tempfile.TemporaryDirectory(prefix="horae-delayed-storage-") as tmp:
        store = await SegmentStore.open(Path(tmp), StorageConfig(
            fsync=False, max_entries_per_ledger=per_ledger))
        ledger = await store.open_ledger(TOPIC)
        cursor = await ledger.open_cursor("sub", initial_position="earliest")
        pending: set[Position] = set()
        pending_bytes = 0
        for chunk in range(0, messages, 5_000):
            n = min(5_000, messages - chunk)
            entries = [message(chunk + k) for k in range(n)]
            positions = await asyncio.gather(*(ledger.append(e) for e in entries))
            acked = []
            for k, p in enumerate(positions):
                if delayed(chunk + k):
                    pending.add(p)
                    pending_bytes += len(entries[k])
                else:
                    acked.append(p)
            cursor.delete(acked)
        last = message(messages)
        await ledger.append(last)                # roll: the last ledger holding data is sealed
        await cursor.flush()
        appended = ledger.total_size_bytes
        if copy:
            holders = [(cursor, lambda pos: pos in pending)]
            while await relocate_held(ledger, holders, max_ledgers=1_000):
                pass
        written = appended + ledger.relocated.size_bytes   # the copies are written once
        await ledger.trim()
        kept = ledger.total_size_bytes - len(last)
        await store.close()
    return {"workload": name, "pending": len(pending), "pending_bytes": pending_bytes,
            "written_bytes": written, "kept_bytes": kept,
            "write_amp": round(written / appended, 2),
            "kept_per_pending": round(kept / pending_bytes, 2) if pending_bytes else None}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--per-ledger", type=int, default=5_000, dest="per_ledger")
    p.add_argument("--mode", choices=("both", "hold", "copy"), default="both")
    args = p.parse_args()
    modes = ["hold", "copy"] if args.mode == "both" else [args.mode]
    first = args.messages // 100
    workloads: list[tuple[str, Callable[[int], bool]]] = [
        ("all", lambda i: True),
        ("every-10", lambda i: i % 10 == 0),
        ("every-1000", lambda i: i % 1000 == 0),
        ("first-1pct", lambda i: i < first),
    ]
    print(f"{'mode':<5} {'workload':<12} {'pending':>9} {'pending MB':>11} {'written MB':>11} "
          f"{'write amp.':>10} {'kept MB':>9} {'kept/pending':>13}")
    for mode in modes:
        for name, rule in workloads:
            r = asyncio.run(run(name, rule, args.messages, args.size, args.per_ledger,
                                mode == "copy"))
            print(f"{mode:<5} {name:<12} {r['pending']:>9,} "
                  f"{r['pending_bytes'] / 1e6:>11.1f} "  # type: ignore[operator]
                  f"{r['written_bytes'] / 1e6:>11.1f} {r['write_amp']:>10} "  # type: ignore[operator]
                  f"{r['kept_bytes'] / 1e6:>9.1f} "  # type: ignore[operator]
                  f"{r['kept_per_pending']:>13}")


if __name__ == "__main__":
    main()
