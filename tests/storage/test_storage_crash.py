"""Crash tests: SIGKILL a process appending through the store at random moments.

Each cycle starts tests/storage/crash_appender.py on the same data directory, lets it run
(sometimes killing it while it is still opening/recovering the store), kills it with
SIGKILL, then reopens the store in this process and checks:
- every entry the child printed as acknowledged is there with its exact bytes (length and
  blake2b hash), and each topic's acknowledged positions were printed in increasing order;
- no position is ever acknowledged twice (ids never reused) and each cycle's ledger ids are
  above every earlier cycle's;
- cursor files are never corrupt and never ahead of what was acknowledged;
- every bucket snapshot whose create() returned loads intact (all parts, exact bytes);
- recovery never fails to open.
Segments are pre-zeroed ahead of the write head in small steps (crash_appender.py), so kills
land in the middle of a pre-zero and every killed child leaves zero tails behind.
In half of the cycles a power loss is simulated before reopening, on each segment written in
that cycle, after its last acknowledged record (a segment with no acknowledged record:
anywhere, even inside its header), so recovery meets torn tails: one of
- truncation at a random byte (often inside the zero tail: the size change of a pre-zero
  step was not durable),
- zeroing from a random byte to the end, keeping the size (unsynced writes into the
  pre-zeroed region were lost),
- bit flips inside the zero tail (garbage where only zeros should be).
HORAE_CRASH_ITERATIONS sets the number of kill cycles (12 in the suite, 30 in a full run: tests/sampling.py).
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sampling import amount
from storage_testlib import flip_bit, segment_paths, zero_range

from storage import Position, SegmentStore
from storage.fileops import FileOps
from storage.segments import RECORD_HEADER_SIZE, scan_segment

SCRIPT = Path(__file__).with_name("crash_appender.py")
TOPICS = 3
ITERATIONS = int(amount("HORAE_CRASH_ITERATIONS", full=30, sample=12))


def _topic(i: int) -> str:
    return f"persistent://public/default/crash-{i}"


def _run_and_kill(root: Path, seed: int, rng: random.Random, log: Path) -> list[str]:
    with log.open("ab") as err:
        proc = subprocess.Popen([sys.executable, str(SCRIPT), str(root), str(seed)],
                                stdout=subprocess.PIPE, stderr=err)
    lines: list[str] = []
    ready = threading.Event()

    def reader() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode()
            if not line.endswith("\n"):
                break  # cut off by the kill: not a complete report
            if line == "READY\n":
                ready.set()
            else:
                lines.append(line)
        ready.set()

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        if rng.random() < 0.2:
            time.sleep(rng.uniform(0.0, 0.4))  # may land while the child is recovering
        else:
            assert ready.wait(30), "crash_appender did not start"
            time.sleep(rng.uniform(0.02, 0.4))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        thread.join(10)
    return lines


@pytest.mark.slow
async def test_sigkill_never_loses_an_acknowledged_entry(tmp_path: Path) -> None:
    root = tmp_path / "data"
    log = tmp_path / "child.log"
    rng = random.Random(int(os.environ.get("HORAE_CRASH_SEED", "20261122")))
    acked: dict[int, dict[Position, tuple[int, str]]] = {t: {} for t in range(TOPICS)}
    max_ledger_before = -1
    total_cycles_with_acks = 0
    truncated_tails = 0
    zero_tails = 0  # segments found with a pre-zeroed tail after a kill
    damage: dict[str, int] = {"truncate": 0, "zero": 0, "flip": 0}
    snapshots: dict[int, tuple[int, str]] = {}  # acknowledged and not being deleted
    deleted_snapshots: set[int] = set()  # delete() returned
    for cycle in range(ITERATIONS):
        lines = _run_and_kill(root, cycle + 1, rng, log)
        new: dict[int, list[tuple[Position, int, str]]] = {t: [] for t in range(TOPICS)}
        for line in lines:
            kind, *fields = line.split()
            if kind == "SNAP":
                snapshots[int(fields[0])] = (int(fields[1]), fields[2])
                continue
            if kind == "DELETING":
                del snapshots[int(fields[0])]
                continue
            if kind == "DEL":
                deleted_snapshots.add(int(fields[0]))
                continue
            topic, ledger_id, entry_id, length, digest = fields
            new[int(topic)].append((Position(int(ledger_id), int(entry_id)), int(length), digest))
        zero_tails += _count_zero_tails(root)
        if rng.random() < 0.5:
            _lose_unsynced_tails(root, new, max_ledger_before, rng, damage)
        cycle_ledgers = [p.ledger_id for t in new for p, _, _ in new[t]]
        if cycle_ledgers:
            total_cycles_with_acks += 1
            assert min(cycle_ledgers) > max_ledger_before, "ledger id reused across restarts"
            max_ledger_before = max(cycle_ledgers)
        for t in range(TOPICS):
            positions = [p for p, _, _ in new[t]]
            assert positions == sorted(positions), "acks of one topic out of order"
            for pos, length, digest in new[t]:
                assert pos not in acked[t], f"position {pos} acknowledged twice"
                acked[t][pos] = (length, digest)

        store = await SegmentStore.open(root)
        try:
            for t in range(TOPICS):
                if not (root / "ledgers").exists() or _topic(t) not in store.ledger_names():
                    assert not acked[t]
                    continue
                ml = await store.open_ledger(_topic(t))
                await _check_present(ml, [p for p, _, _ in new[t]], acked[t])
                if cycle == ITERATIONS - 1:
                    await _check_stream(ml, acked[t])  # everything ever acked, in order
                cursor = ml.cursors.get("sub")
                if cursor is not None and acked[t]:
                    assert cursor.mark_delete_position <= max(acked[t])
            await _check_snapshots(store, snapshots, deleted_snapshots)
            report = store.recovery_report
            truncated_tails += sum(e.kind == "truncated_tail" for e in report.events)
            assert report.corrupt_cursors == 0
            assert report.corrupt_records == 0  # a crash tears tails; it never corrupts the middle
        finally:
            await store.close()
    print(f"crash cycles={ITERATIONS} with_acks={total_cycles_with_acks} "
          f"snapshots_alive={len(snapshots)} "
          f"acked={sum(len(a) for a in acked.values())} truncated_tails_seen={truncated_tails} "
          f"zero_tails_seen={zero_tails} power_loss_damage={damage}")
    assert total_cycles_with_acks >= ITERATIONS // 2
    assert zero_tails > 0
    assert sum(len(a) for a in acked.values()) > 0


def _count_zero_tails(root: Path) -> int:
    count = 0
    for t in range(TOPICS):
        for path in segment_paths(root, _topic(t)):
            if path.stat().st_size >= 32:
                scan = scan_segment(FileOps(), path, int(path.stem), truncate=False)
                count += scan.zero_tail_bytes > 0
    return count


def _lose_unsynced_tails(root: Path, new: dict[int, list[tuple[Position, int, str]]],
                         max_ledger_before: int, rng: random.Random,
                         damage: dict[str, int]) -> None:
    """Simulate a power loss: damage this cycle's segments after their last acknowledged
    record (unsynced data may be lost or torn; acknowledged data may not)."""
    for t in range(TOPICS):
        for path in segment_paths(root, _topic(t)):
            ledger_id = int(path.stem)
            if ledger_id <= max_ledger_before:
                continue
            if path.with_suffix(".idx").exists():
                # A persisted index is written only after the sealed segment's last
                # fdatasync: everything in it was durable (acked or not, whatever the
                # child's log got to print), so a power loss cannot touch it.
                continue
            size = path.stat().st_size
            acked_ids = [p.entry_id for p, _, _ in new[t] if p.ledger_id == ledger_id]
            end = logical_end = 0
            if size >= 32:
                scan = scan_segment(FileOps(), path, ledger_id, truncate=False)
                logical_end = scan.valid_end  # after the last complete record, acked or not
                if acked_ids:
                    last = max(acked_ids)
                    end = scan.offsets[last] + RECORD_HEADER_SIZE + scan.lengths[last]
            mode = rng.choice(["truncate", "zero", "flip"])
            if mode == "flip" and logical_end < size and size > 32:
                damage[mode] += 1
                for _ in range(rng.randint(1, 3)):
                    flip_bit(path, rng.randrange(max(logical_end, 32), size), rng.randrange(8))
            elif mode == "zero" and end < size:
                damage[mode] += 1
                zero_range(path, rng.randint(end, size), size)
            else:
                damage["truncate"] += 1
                os.truncate(path, rng.randint(end, size))


async def _check_snapshots(store: SegmentStore, expected: dict[int, tuple[int, str]],
                           deleted: set[int]) -> None:
    """Every snapshot whose create() returned is complete; deleted ones stay deleted."""
    for snapshot_id, (segments, digest) in expected.items():
        parts = [await store.snapshots.load_metadata(snapshot_id)]
        parts += [await store.snapshots.load_segment(snapshot_id, i)
                  for i in range(1, segments + 1)]
        assert hashlib.blake2b(b"".join(parts), digest_size=8).hexdigest() == digest
    on_disk = set(store.snapshots.ids())
    assert set(expected) <= on_disk
    assert not deleted & on_disk


async def _check_stream(ml: object, expected: dict[Position, tuple[int, str]]) -> None:
    """One sequential read of the whole topic: positions strictly increase and every
    acknowledged entry is in the stream with its exact bytes."""
    from storage.ledger import ManagedLedger

    assert isinstance(ml, ManagedLedger)
    seen: dict[Position, bytes] = {}
    pos = Position(0, 0)
    last: Position | None = None
    while True:
        batch = await ml.read_entries(pos, 500)
        if not batch:
            break
        for entry in batch:
            assert last is None or entry.position > last
            last = entry.position
            seen[entry.position] = entry.data
        pos = ml.next_position(batch[-1].position)
    for p, (length, digest) in expected.items():
        data = seen.get(p)
        assert data is not None, f"acknowledged entry {p} missing from the stream"
        assert len(data) == length
        assert hashlib.blake2b(data, digest_size=8).hexdigest() == digest


async def _check_present(ml: object, wanted: list[Position],
                         expected: dict[Position, tuple[int, str]]) -> None:
    from storage.ledger import ManagedLedger

    assert isinstance(ml, ManagedLedger)
    for pos in wanted:
        entry = await ml.read_entry(pos)
        assert entry is not None, f"acknowledged entry {pos} lost"
        length, digest = expected[pos]
        assert len(entry.data) == length
        assert hashlib.blake2b(entry.data, digest_size=8).hexdigest() == digest
