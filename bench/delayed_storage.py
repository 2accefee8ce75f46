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

``--pulsar`` then runs the same workloads on Apache Pulsar 4.0 standalone (bench/pulsar_peer.py,
one JVM, a topic per workload, ``managedLedgerMaxEntriesPerLedger`` = ``--per-ledger`` and no
minimum rollover time, as Horae's ledgers here): the same entries (metadata with the same
deliver times, the same payloads) sent unbatched over the raw wire, a Shared consumer
acknowledging every message it is given (the ones not delayed: Pulsar holds the others in its
tracker), then the topic trimmed through its admin API (``POST .../trim``, which deletes the
ledgers below the subscription's mark-delete position) and ``kept`` read as the topic's
``storageSize``: every ledger Pulsar keeps, the open one included.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if sys.path and Path(sys.path[0]).resolve() == ROOT / "bench":
    del sys.path[0]                  # bench/storage.py would shadow the storage package
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TOPIC = "persistent://public/default/delayed-storage"


#: months ahead of any run: nothing falls due while the figures are read
DUE_MS = 1_900_000_000_000


def message(i: int, size: int, delayed: bool) -> bytes:
    """Message ``i`` as stored: metadata (delayed: a deliver time months ahead, spread over a
    year) and a payload of ``size`` bytes."""
    from protocol import pulsar_pb as pb
    from protocol.metadata import encode_entry

    md = pb.MessageMetadata(producer_name="bench", sequence_id=i,
                            publish_time=1_700_000_000_000)
    if delayed:
        md.deliver_at_time = DUE_MS + (i * 7_919 % 365) * 86_400_000
    return encode_entry(md, b"x" * size)


async def run(name: str, delayed: Callable[[int], bool], messages: int, size: int,
              per_ledger: int, copy: bool) -> dict[str, object]:
    from broker.delayed.relocate import relocate_held
    from storage import SegmentStore
    from storage.config import StorageConfig
    from storage.positions import Position

    def message_(i: int) -> bytes:
        return message(i, size, delayed(i))

    with tempfile.TemporaryDirectory(prefix="horae-delayed-storage-") as tmp:
        store = await SegmentStore.open(Path(tmp), StorageConfig(
            fsync=False, max_entries_per_ledger=per_ledger))
        ledger = await store.open_ledger(TOPIC)
        cursor = await ledger.open_cursor("sub", initial_position="earliest")
        pending: set[Position] = set()
        pending_bytes = 0
        for chunk in range(0, messages, 5_000):
            n = min(5_000, messages - chunk)
            entries = [message_(chunk + k) for k in range(n)]
            positions = await asyncio.gather(*(ledger.append(e) for e in entries))
            acked = []
            for k, p in enumerate(positions):
                if delayed(chunk + k):
                    pending.add(p)
                    pending_bytes += len(entries[k])
                else:
                    acked.append(p)
            cursor.delete(acked)
        last = message_(messages)
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


async def run_pulsar(broker: Any, name: str, delayed: Callable[[int], bool], messages: int,
                     size: int) -> dict[str, object]:
    """One workload on Pulsar (module docstring): the bytes its topic keeps after the
    acknowledgements and a trim."""
    from bench.delayed_pulsar import Holder
    from bench.processes import admin_request
    from bench.wire_clients import Publisher, open_producer, subscribe
    from protocol import commands as C

    topic = f"{TOPIC}-{name}"
    web = f"http://{broker.host}:{broker.web_port}"
    holder = Holder(await subscribe(broker, topic))
    try:
        conn = await open_producer(broker, topic, f"storage-{name}")
        pending = pending_bytes = 0
        frames: list[bytes] = []
        for i in range(messages):
            entry = message(i, size, delayed(i))
            if delayed(i):
                pending += 1
                pending_bytes += len(entry)
            frames.append(C.encode_send(1, i, entry))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # receipts counted in any order: Pulsar 4.0.7 answered SENDs across a ledger rollover
        # out of order here (1,000 in flight); this bench needs every SEND confirmed
        publisher = Publisher(conn, frames, list(range(messages)), 1000, done, in_order=False)
        publisher.start()
        await asyncio.wait_for(done, 600)
        conn.close()
        if publisher.out_of_order:
            print(f"    ({name}: {publisher.out_of_order} receipts came before an earlier "
                  f"SEND's)", flush=True)
        # every message not delayed delivered and acknowledged (the holder acks on receipt)
        deadline = time.monotonic() + 600
        while holder.delivered < messages - pending and time.monotonic() < deadline:
            await asyncio.sleep(0.2)   # polling the consumer's count: it has no event
        if holder.delivered != messages - pending:
            raise RuntimeError(f"{name}: {holder.delivered} of {messages - pending} delivered")
        await asyncio.sleep(2)   # the last ACKs reach the cursor
        trim = f"/admin/v2/{topic.replace('://', '/')}/trim"
        status = await asyncio.to_thread(admin_request, web, "POST", trim, timeout_s=120)
        if status not in (200, 204):
            raise RuntimeError(f"{name}: trim answered HTTP {status}")
        kept = await _settled_storage(web, topic)
    finally:
        holder.close()
    return {"workload": name, "pending": pending, "pending_bytes": pending_bytes,
            "written_bytes": None, "kept_bytes": kept, "write_amp": "-",
            "kept_per_pending": round(kept / pending_bytes, 2) if pending_bytes else None}


async def _settled_storage(web: str, topic: str) -> int:
    """The topic's ``storageSize`` once two reads a second apart agree (the trim deletes
    ledgers in the background)."""
    from bench.processes import topic_stats

    last = -1
    for _ in range(120):
        now = int((await asyncio.to_thread(topic_stats, web, topic))["storageSize"])
        if now == last:
            return now
        last = now
        await asyncio.sleep(1.0)   # polling stats: nothing to wait on but their answers
    return last


def _print_row(mode: str, r: dict[str, Any]) -> None:
    written = "-" if r["written_bytes"] is None else f"{r['written_bytes'] / 1e6:.1f}"
    print(f"{mode:<6} {r['workload']:<12} {r['pending']:>9,} "
          f"{r['pending_bytes'] / 1e6:>11.1f} {written:>11} {r['write_amp']:>10} "
          f"{r['kept_bytes'] / 1e6:>9.1f} {r['kept_per_pending']:>13}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--per-ledger", type=int, default=5_000, dest="per_ledger")
    p.add_argument("--mode", choices=("both", "hold", "copy"), default="both")
    p.add_argument("--pulsar", action="store_true",
                   help="also the same workloads on Apache Pulsar 4.0 standalone")
    args = p.parse_args()
    modes = ["hold", "copy"] if args.mode == "both" else [args.mode]
    first = args.messages // 100
    workloads: list[tuple[str, Callable[[int], bool]]] = [
        ("all", lambda i: True),
        ("every-10", lambda i: i % 10 == 0),
        ("every-1000", lambda i: i % 1000 == 0),
        ("first-1pct", lambda i: i < first),
    ]
    print(f"{'mode':<6} {'workload':<12} {'pending':>9} {'pending MB':>11} {'written MB':>11} "
          f"{'write amp.':>10} {'kept MB':>9} {'kept/pending':>13}")
    for mode in modes:
        for name, rule in workloads:
            _print_row(mode, asyncio.run(run(name, rule, args.messages, args.size,
                                             args.per_ledger, mode == "copy")))
    if args.pulsar:
        asyncio.run(_pulsar_rows(workloads, args))


async def _pulsar_rows(workloads: list[tuple[str, Callable[[int], bool]]],
                       args: argparse.Namespace) -> None:
    from bench.pulsar_peer import start_pulsar_standalone

    conf = {"managedLedgerMaxEntriesPerLedger": str(args.per_ledger),
            "managedLedgerMinLedgerRolloverTimeMinutes": "0"}
    with tempfile.TemporaryDirectory(prefix="horae-delayed-storage-pulsar-") as tmp, \
            start_pulsar_standalone(Path(tmp), extra=conf) as broker:
        for name, rule in workloads:
            _print_row("pulsar", await run_pulsar(broker, name, rule, args.messages, args.size))


if __name__ == "__main__":
    main()
