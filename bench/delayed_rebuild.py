"""Replace-by-key at topic load: how long the rebuild of the keyed schedule takes by backlog.

Usage: .venv/bin/python bench/delayed_rebuild.py [--backlogs 50000,200000] [--keys 10000]

On the real segment store (in process, no broker): a topic holds a backlog of delayed messages
with keys (``--keys`` distinct keys, so most are replaced by a later version) that no
subscription has acknowledged; the topic is then loaded again with the replace-by-key policy on
and the rebuild (``TopicReplaceByKey.rebuild``: read the backlog from the oldest mark-delete
position, classify every entry, record its key) is timed. Topic load waits for it, so the
first dispatch after a restart does too.
"""

from __future__ import annotations

import argparse
import asyncio
import struct
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if sys.path and Path(sys.path[0]).resolve() == ROOT / "bench":
    del sys.path[0]                  # bench/storage.py would shadow the storage package
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TOPIC = "persistent://public/default/delayed-rebuild"


def entry(i: int, keys: int, now_ms: int) -> bytes:
    from protocol import pulsar_pb as pb

    md = pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=now_ms,
                            partition_key=f"job-{i % keys}",
                            deliver_at_time=now_ms + 86_400_000 + i)
    raw = md.SerializeToString()
    return struct.pack(">I", len(raw)) + raw + b"payload-%d" % i


async def run(backlog: int, keys: int) -> dict[str, Any]:
    from broker.topics.replace_by_key import TopicReplaceByKey
    from storage import SegmentStore
    from storage.config import StorageConfig

    now = time.time_ns() // 1_000_000
    with tempfile.TemporaryDirectory(prefix="horae-delayed-rebuild-") as tmp:
        store = await SegmentStore.open(Path(tmp), StorageConfig(fsync=False))
        ledger = await store.open_ledger(TOPIC)
        cursor = await ledger.open_cursor("sub", initial_position="earliest")
        for chunk in range(0, backlog, 5_000):
            await asyncio.gather(*(ledger.append(entry(i, keys, now))
                                   for i in range(chunk, min(chunk + 5_000, backlog))))
        await store.close()
        store = await SegmentStore.open(Path(tmp), StorageConfig(fsync=False))
        ledger = await store.open_ledger(TOPIC)
        cursor = await ledger.open_cursor("sub")
        sub = SimpleNamespace(cursor=cursor, sub_type=None, durable=True,
                              delayed=SimpleNamespace(replacements=None,
                                                      forget=lambda _positions: None))
        topic = TopicReplaceByKey(ledger, lambda: True, lambda: [sub])
        topic.sync([sub])
        started = time.perf_counter()
        read = await topic.rebuild([sub])     # type: ignore[list-item]
        elapsed = time.perf_counter() - started
        schedule = topic.schedule
        await store.close()
    return {"backlog": backlog, "read": read, "rebuild_s": round(elapsed, 3),
            "entries_per_s": round(read / elapsed) if elapsed else None,
            "keys": len(schedule) if schedule is not None else None}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backlogs", default="50000,200000")
    p.add_argument("--keys", type=int, default=10_000)
    args = p.parse_args()
    for backlog in (int(x) for x in args.backlogs.split(",")):
        r = asyncio.run(run(backlog, args.keys))
        print(f"backlog {r['backlog']:>9,}: rebuild read {r['read']:,} entries in "
              f"{r['rebuild_s']} s ({r['entries_per_s']:,} entries/s), {r['keys']} keys")


if __name__ == "__main__":
    main()
