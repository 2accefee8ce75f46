"""Replace-by-key at topic load: how long the rebuild of the keyed schedule takes by backlog.

Usage: .venv/bin/python bench/delayed_rebuild.py [--backlogs 50000,200000] [--keys 10000]
           [--tail 0.01]

On the real segment store (in process, no broker): a topic holds a backlog of delayed messages
with keys (``--keys`` distinct keys, so most are replaced by a later version) that no
subscription has acknowledged; the topic is then loaded again with the replace-by-key policy on
and the rebuild (``TopicReplaceByKey.rebuild``) is timed, store open included, twice on the same
store: ``full`` reads the backlog from the oldest mark-delete position, classifies every entry
and records its key (no schedule snapshot); ``snapshot`` restores the schedule snapshot written
when all but the last ``--tail`` share of the backlog was in, and reads only the entries after
what it covers. Topic load waits for it, so the first dispatch after a restart does too.
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


async def _load(root: Path, with_snapshot: bool) -> tuple[Any, Any, Any, float, int]:
    """A topic load's rebuild, timed: (topic side, store, metadata, seconds, entries read)."""
    from broker.delayed.keyed_snapshot import KeyedSnapshots
    from broker.topics.replace_by_key import TopicReplaceByKey
    from storage import SegmentStore
    from storage.config import StorageConfig
    from storage.metadata import MetadataStore

    started = time.perf_counter()
    store = await SegmentStore.open(root, StorageConfig(fsync=False))
    md = await MetadataStore.open(root / "m.db")
    ledger = await store.open_ledger(TOPIC)
    cursor = await ledger.open_cursor("sub", initial_position="earliest")
    sub = SimpleNamespace(cursor=cursor, sub_type=None, durable=True,
                          delayed=SimpleNamespace(replacements=None,
                                                  forget=lambda _positions: None,
                                                  forget_entry_ids=lambda _ledger, _ids: None))
    snapshots = (KeyedSnapshots(store.snapshots, md, TOPIC, loop=asyncio.get_running_loop())
                 if with_snapshot else None)
    topic = TopicReplaceByKey(ledger, lambda: True, lambda: [sub], snapshots)
    topic.sync([sub])
    read = await topic.rebuild([sub])     # type: ignore[list-item]
    return topic, store, md, time.perf_counter() - started, read


async def _append(root: Path, first: int, last: int, keys: int, now: int,
                  topic: Any = None) -> None:
    from broker.delayed.replace_by_key import classify
    from storage import SegmentStore
    from storage.config import StorageConfig

    store = await SegmentStore.open(root, StorageConfig(fsync=False))
    ledger = await store.open_ledger(TOPIC)
    await ledger.open_cursor("sub", initial_position="earliest")
    for chunk in range(first, last, 5_000):
        datas = [entry(i, keys, now) for i in range(chunk, min(chunk + 5_000, last))]
        positions = await asyncio.gather(*(ledger.append(d) for d in datas))
        if topic is not None and topic.schedule is not None:   # recorded as a broker does
            for pos, data in sorted(zip(positions, datas, strict=True)):
                found = classify(data)
                if found is not None:
                    topic.schedule.record(pos.ledger_id, pos.entry_id, found)
    await store.close()


async def run(backlog: int, keys: int, tail: float) -> dict[str, Any]:
    now = time.time_ns() // 1_000_000
    head = backlog - int(backlog * tail)
    with tempfile.TemporaryDirectory(prefix="horae-delayed-rebuild-") as tmp:
        root = Path(tmp)
        await _append(root, 0, head, keys, now)
        # a load with the snapshot store, a snapshot written (housekeeping), then the tail
        topic, store, md, _, _ = await _load(root, True)
        assert topic._snapshots is not None
        await topic._snapshots.save(topic.schedule)
        await md.close()
        await store.close()
        await _append(root, head, backlog, keys, now, topic)   # then kill -9
        results: dict[str, Any] = {"backlog": backlog, "keys": keys, "tail": backlog - head}
        for label, with_snapshot in (("full", False), ("snapshot", True)):
            topic, store, md, elapsed, read = await _load(root, with_snapshot)
            results[label] = {"rebuild_s": round(elapsed, 3), "read": read,
                              "keys": len(topic.schedule)}
            await md.close()
            await store.close()
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backlogs", default="50000,200000")
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--tail", type=float, default=0.01,
                   help="share of the backlog appended after the schedule snapshot")
    args = p.parse_args()
    for backlog in (int(x) for x in args.backlogs.split(",")):
        r = asyncio.run(run(backlog, args.keys, args.tail))
        for label in ("full", "snapshot"):
            x = r[label]
            print(f"backlog {r['backlog']:>9,} ({r['tail']:,} after the snapshot), {label:>8} "
                  f"load: rebuild read {x['read']:,} entries in {x['rebuild_s']} s, "
                  f"{x['keys']:,} keys")


if __name__ == "__main__":
    main()
