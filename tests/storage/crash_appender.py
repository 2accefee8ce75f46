"""Crash-test workload (run as a subprocess by test_storage_crash.py; not a test module).

Usage: python crash_appender.py ROOT SEED
Opens the store at ROOT, then 16 concurrent appenders write random payloads to 3 topics
forever (segments pre-zeroed in small steps, see main()). Each acknowledged append is printed, flushed, as
  ACK <topic> <ledger_id> <entry_id> <length> <blake2b-64 hex>
after its future resolved (i.e. after the group commit's fdatasync). Each topic has a cursor
"sub" that individually acks every entry it appended (persisted at 50/s). The parent kills
this process with SIGKILL at a random moment. Meanwhile bucket snapshots are created (printed
as ``SNAP <id> <segments> <blake2b of all parts>`` once create() returned) and some deleted
(``DELETING <id>`` before delete(), ``DEL <id>`` once it returned).
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import uvloop

from storage import SegmentStore, StorageConfig

TOPICS = 3
APPENDERS = 16


async def main(root: Path, seed: int) -> None:
    rng = random.Random(seed)
    config = StorageConfig(
        max_entries_per_ledger=rng.choice([50, 500, 50_000]),
        mark_delete_rate_limit_per_sec=50.0,
        group_commit_max_delay_ms=rng.choice([0.0, 1.0]),
        # Small pre-zero steps make the writer pre-zero every few batches, so kills land
        # in the middle of one (zeros half written, not yet synced) often.
        segment_prezero_bytes=rng.choice([16 * 1024, 256 * 1024, 4 * 1024 * 1024]),
        segment_prezero_min_bytes=rng.choice([4096, 64 * 1024]),
    )
    store = await SegmentStore.open(root, config)
    ledgers = [await store.open_ledger(f"persistent://public/default/crash-{i}")
               for i in range(TOPICS)]
    cursors = [await ml.open_cursor("sub", initial_position="earliest") for ml in ledgers]
    out = sys.stdout
    out.write("READY\n")
    out.flush()

    async def appender(k: int) -> None:
        r = random.Random(seed * 1000 + k)
        i = 0
        while True:
            topic = r.randrange(TOPICS)
            payload = f"{seed}:{k}:{i}:".encode() + r.randbytes(r.randrange(0, 1500))
            pos = await ledgers[topic].append(payload)
            digest = hashlib.blake2b(payload, digest_size=8).hexdigest()
            out.write(f"ACK {topic} {pos.ledger_id} {pos.entry_id} {len(payload)} {digest}\n")
            out.flush()
            cursors[topic].delete([pos])
            i += 1

    async def snapshotter() -> None:
        r = random.Random(seed * 7919)
        created: list[int] = []
        while True:
            parts = [r.randbytes(r.randrange(0, 3000)) for _ in range(r.randrange(1, 5))]
            snapshot_id = await store.snapshots.create(parts[0], parts[1:])
            digest = hashlib.blake2b(b"".join(parts), digest_size=8).hexdigest()
            out.write(f"SNAP {snapshot_id} {len(parts) - 1} {digest}\n")
            out.flush()
            created.append(snapshot_id)
            if len(created) > 3 and r.random() < 0.5:
                victim = created.pop(r.randrange(len(created)))
                out.write(f"DELETING {victim}\n")  # from here on it may or may not exist
                out.flush()
                await store.snapshots.delete(victim)
                out.write(f"DEL {victim}\n")
                out.flush()
            await asyncio.sleep(0.01)

    await asyncio.gather(snapshotter(), *(appender(k) for k in range(APPENDERS)))


if __name__ == "__main__":
    uvloop.run(main(Path(sys.argv[1]), int(sys.argv[2])))
