"""Workloads run on CrashFS and the checks run on every post-crash state (how the harness
works: crashfs.py).

Workloads mark each promise the store made, right after the await that made it returned:
  ("sent", topic, seq)                 an append was issued (its bytes are payload(topic, seq))
  ("ack", topic, ledger, entry, seq)   its future completed: it must survive
  ("served", topic, ledger, entry, seq) a read returned it: it must survive (nothing unsynced
                                        is served)
  ("cursor", topic, name, ledger, entry, acks)  flush() returned with mark-delete >= this
                                        and these individual acks ((ledger, entry), ...)
  ("trim_start", topic, ledger, entry) / ("trimmed", topic, ids)  trim() began / returned
  ("cursor_delete_start"|"cursor_deleted", topic, name)
  ("snapshot", id, digest) / ("snapshot_delete_start"|"snapshot_deleted", id)
  ("ledger_delete_start"|"ledger_deleted", topic)
check_state() opens the real store on a materialised state and returns the broken promises:
an acknowledged or served entry missing or different; an entry that was never sent or out of
order (corruption served); a cursor missing, corrupt or behind its flushed mark-delete; a
deleted cursor, snapshot, topic or trimmed ledger back; a snapshot missing or different; an
id handed out again (LEDGER_ID lost).
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crashfs import CrashFS

from storage import ManagedLedger, Position, SegmentStore, StorageConfig

TA = "persistent://public/default/crash-a"
TB = "persistent://public/default/" + "long-" * 40  # hashed directory: needs its NAME file
TC = "persistent://public/default/crash-doomed"
PROBE = "persistent://public/default/crashfs-id-probe"

WORKLOAD_CONFIG = StorageConfig(
    max_entries_per_ledger=10, mark_delete_rate_limit_per_sec=0, group_commit_max_delay_ms=0,
    segment_prezero_bytes=8192, segment_prezero_min_bytes=4096, read_threads=1,
    entry_cache_bytes=1 << 20,
)
CHECK_CONFIG = StorageConfig(mark_delete_rate_limit_per_sec=0, fsync=False, read_threads=1,
                             group_commit_max_delay_ms=0, segment_prezero_bytes=0)


def payload(topic: str, seq: int) -> bytes:
    rng = random.Random(f"{topic}|{seq}")
    return f"{seq}|".encode() + rng.randbytes(rng.randrange(8, 2000))


def digest(parts: list[bytes]) -> str:
    h = hashlib.blake2b()
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.hexdigest()


class Workload:
    """Drives a store on a CrashFS and marks every promise it returns."""

    def __init__(self, store: SegmentStore, fs: CrashFS, seqs: dict[str, int] | None = None
                 ) -> None:
        self.store = store
        self.fs = fs
        self.seqs = seqs if seqs is not None else {}
        self.acked: dict[str, list[Position]] = {}

    async def append(self, ml: ManagedLedger, count: int) -> list[Position]:
        async def one(seq: int) -> Position:
            self.fs.mark("sent", ml.name, seq)
            pos = await ml.append(payload(ml.name, seq))
            self.fs.mark("ack", ml.name, pos.ledger_id, pos.entry_id, seq)
            self.acked.setdefault(ml.name, []).append(pos)
            return pos

        start = self.seqs.get(ml.name, 0)
        self.seqs[ml.name] = start + count
        return list(await asyncio.gather(*(one(start + i) for i in range(count))))

    async def flush_cursor(self, ml: ManagedLedger, name: str) -> None:
        cursor = ml.cursors[name]
        md = cursor.mark_delete_position
        acks = tuple((lid, eid) for lid, bm in sorted(cursor.individually_deleted.copies().items())
                     for eid in bm)
        await cursor.flush()
        self.fs.mark("cursor", ml.name, name, md.ledger_id, md.entry_id, acks)

    async def open_cursor(self, ml: ManagedLedger, name: str) -> None:
        await ml.open_cursor(name, initial_position="earliest")
        md = ml.cursors[name].mark_delete_position
        self.fs.mark("cursor", ml.name, name, md.ledger_id, md.entry_id, ())

    async def snapshot(self, n: int) -> int:
        parts = [f"meta-{n}".encode(), *(bytes([n, i]) * (50 + 30 * i) for i in range(3))]
        sid = await self.store.snapshots.create(parts[0], parts[1:])
        self.fs.mark("snapshot", sid, digest(parts))
        return sid

    async def delete_snapshot(self, sid: int) -> None:
        self.fs.mark("snapshot_delete_start", sid)
        await self.store.snapshots.delete(sid)
        self.fs.mark("snapshot_deleted", sid)

    async def trim(self, ml: ManagedLedger) -> None:
        marks = [c.mark_delete_position for c in ml.cursors.values()]
        cut = min(marks)
        self.fs.mark("trim_start", ml.name, cut.ledger_id, cut.entry_id)
        self.fs.mark("trimmed", ml.name, tuple(await ml.trim()))

    async def serve_all(self, ml: ManagedLedger) -> None:
        """Read everything (as a consumer would) and mark it served."""
        first = ml.first_position
        if first is None:
            return
        pos = Position(first.ledger_id, 0)
        while True:
            entries = await ml.read_entries(pos, 50)
            if not entries:
                return
            for e in entries:
                seq = int(bytes(e.data).split(b"|", 1)[0])
                self.fs.mark("served", ml.name, e.position.ledger_id, e.position.entry_id, seq)
            pos = ml.next_position(entries[-1].position)


async def main_workload(w: Workload) -> None:
    """Appends across rollovers on two topics (one with a hashed directory), cursor acks and
    flushes, trim, cursor delete, snapshot create/delete, a topic deleted with the newest
    ids (so only LEDGER_ID remembers them)."""
    store = w.store
    ma = await store.open_ledger(TA)
    mb = await store.open_ledger(TB)
    await w.open_cursor(ma, "sub")
    await w.open_cursor(mb, "doomed")
    for _ in range(4):
        await asyncio.gather(w.append(ma, 3), w.append(mb, 2))
    s1 = await w.snapshot(1)
    ma.cursors["sub"].delete(w.acked[TA][:11])
    await w.flush_cursor(ma, "sub")
    await w.trim(ma)
    w.fs.mark("cursor_delete_start", TB, "doomed")
    await mb.delete_cursor("doomed")
    w.fs.mark("cursor_deleted", TB, "doomed")
    await asyncio.gather(w.append(ma, 4), w.append(mb, 3))
    await w.snapshot(2)
    await w.delete_snapshot(s1)
    ma.cursors["sub"].delete(w.acked[TA][11:13] + w.acked[TA][14:16])
    await w.flush_cursor(ma, "sub")
    mc = await store.open_ledger(TC)
    await w.append(mc, 3)
    s3 = await w.snapshot(3)
    w.fs.mark("ledger_delete_start", TC)
    await store.delete_ledger(TC)
    w.fs.mark("ledger_deleted", TC)
    await w.delete_snapshot(s3)
    await asyncio.gather(w.append(ma, 2), w.append(mb, 2))


async def recovery_workload(w: Workload) -> None:
    """After a process crash: recover, serve everything, append, ack and flush."""
    ma = await w.store.open_ledger(TA)
    mb = await w.store.open_ledger(TB)
    await w.serve_all(ma)
    await w.serve_all(mb)
    await asyncio.gather(w.append(ma, 3), w.append(mb, 2))
    if "sub" in ma.cursors:
        last = ma.last_confirmed
        if last is not None:
            ma.cursors["sub"].mark_delete(last)
        await w.flush_cursor(ma, "sub")


async def record(root: Path, workload: Callable[[Workload], Awaitable[None]], *,
                 fs: CrashFS | None = None, config: StorageConfig = WORKLOAD_CONFIG,
                 seqs: dict[str, int] | None = None) -> CrashFS:
    """Run workload on a store at root through a CrashFS (new unless given), close it."""
    fs = fs or CrashFS(root)
    store = await SegmentStore.open(root, config, file_ops=fs)
    try:
        await workload(Workload(store, fs, seqs))
    finally:
        await store.close()
    return fs


@dataclass(slots=True)
class Expect:
    acks: dict[str, dict[Position, int]] = field(default_factory=dict)
    sent: dict[str, set[int]] = field(default_factory=dict)
    trim_cut: dict[str, Position] = field(default_factory=dict)
    trimmed: dict[str, set[int]] = field(default_factory=dict)
    topics: dict[str, str] = field(default_factory=dict)  # live, deleting, deleted
    cursors: dict[tuple[str, str], tuple[Position, tuple[tuple[int, int], ...]] | str] = field(
        default_factory=dict)
    snapshots: dict[int, str] = field(default_factory=dict)  # digest, deleting, deleted
    max_id: int = -1


def expectations(marks: list[tuple[Any, ...]]) -> Expect:
    ex = Expect()
    for m in marks:
        kind = m[0]
        if kind == "sent":
            ex.sent.setdefault(m[1], set()).add(m[2])
            ex.topics[m[1]] = "live"
        elif kind in ("ack", "served"):
            ex.acks.setdefault(m[1], {})[Position(m[2], m[3])] = m[4]
            ex.max_id = max(ex.max_id, m[2])
            ex.topics[m[1]] = "live"
        elif kind == "cursor":
            ex.cursors[(m[1], m[2])] = (Position(m[3], m[4]), m[5])
            ex.topics[m[1]] = "live"
        elif kind == "trim_start":
            ex.trim_cut[m[1]] = max(ex.trim_cut.get(m[1], Position(-1, -1)), Position(m[2], m[3]))
        elif kind == "trimmed":
            ex.trimmed.setdefault(m[1], set()).update(m[2])
        elif kind == "cursor_delete_start":
            ex.cursors[(m[1], m[2])] = "deleting"
        elif kind == "cursor_deleted":
            ex.cursors[(m[1], m[2])] = "deleted"
        elif kind == "snapshot":
            ex.snapshots[m[1]] = m[2]
            ex.max_id = max(ex.max_id, m[1])
        elif kind == "snapshot_delete_start":
            ex.snapshots[m[1]] = "deleting"
        elif kind == "snapshot_deleted":
            ex.snapshots[m[1]] = "deleted"
        elif kind == "ledger_delete_start":
            ex.topics[m[1]] = "deleting"
        elif kind == "ledger_deleted":
            ex.topics[m[1]] = "deleted"
    return ex


async def check_state(root: Path, marks: list[tuple[Any, ...]]) -> list[str]:
    """The promises (marks) the store at root breaks; [] if it keeps them all."""
    ex = expectations(marks)
    problems: list[str] = []
    store = await SegmentStore.open(root, CHECK_CONFIG)
    try:
        # First: the first id this store hands out must be above every id ever handed out.
        probe = await store.open_ledger(PROBE)
        pos = await probe.append(b"probe")
        if pos.ledger_id <= ex.max_id:
            problems.append(f"ledger id {pos.ledger_id} handed out again (ids up to "
                            f"{ex.max_id} were in use): LEDGER_ID lost")
        names = set(store.ledger_names())
        for topic, status in sorted(ex.topics.items()):
            if status == "deleted":
                if topic in names:
                    problems.append(f"{topic}: deleted topic is back")
            elif status == "live":
                if topic not in names and (ex.acks.get(topic) or _has_cursor(ex, topic)):
                    problems.append(f"{topic}: topic lost")
                    continue
                problems += await _check_topic(store, topic, ex)
        for sid, want in sorted(ex.snapshots.items()):
            if want == "deleted":
                if sid in store.snapshots.ids():
                    problems.append(f"snapshot {sid}: deleted snapshot is back")
            elif want != "deleting":
                problems += await _check_snapshot(store, sid, want)
        if store.recovery_report.corrupt_cursors:
            problems.append(f"{store.recovery_report.corrupt_cursors} corrupt cursor file(s)")
    finally:
        await store.close()
    return problems


def _has_cursor(ex: Expect, topic: str) -> bool:
    return any(t == topic and isinstance(v, tuple) for (t, _), v in ex.cursors.items())


async def _check_topic(store: SegmentStore, topic: str, ex: Expect) -> list[str]:
    problems: list[str] = []
    ml = await store.open_ledger(topic)
    served: dict[Position, bytes] = {}
    first = ml.first_position
    if first is not None:
        pos = Position(first.ledger_id, 0)
        while True:
            entries = await ml.read_entries(pos, 500)
            if not entries:
                break
            for e in entries:
                served[e.position] = bytes(e.data)
            pos = ml.next_position(entries[-1].position)
    sent = ex.sent.get(topic, set())
    last_seq = -1
    for position in sorted(served):
        data = served[position]
        head = data.split(b"|", 1)[0]
        seq = int(head) if head.isdigit() else -1
        if seq not in sent or data != payload(topic, seq):
            problems.append(f"{topic} {position}: served bytes that were never sent (corrupt)")
        elif seq <= last_seq:
            problems.append(f"{topic} {position}: seq {seq} served out of order")
        last_seq = max(last_seq, seq)
    cut = ex.trim_cut.get(topic, Position(-1, -1))
    for position, seq in sorted(ex.acks.get(topic, {}).items()):
        if position <= cut:
            continue  # acknowledged by every cursor and being trimmed: may be gone
        got = served.get(position)
        if got is None:
            problems.append(f"{topic} {position}: acknowledged/served entry (seq {seq}) lost")
        elif got != payload(topic, seq):
            problems.append(f"{topic} {position}: acknowledged entry has other bytes")
    present = {info.ledger_id for info in ml.ledgers}
    for ledger_id in sorted(ex.trimmed.get(topic, set()) & present):
        problems.append(f"{topic}: trimmed ledger {ledger_id} is back")
    for (t, name), want in sorted(ex.cursors.items(), key=lambda kv: kv[0]):
        if t != topic:
            continue
        cursor = ml.cursors.get(name)
        if want == "deleted" and cursor is not None:
            problems.append(f"{topic}: deleted cursor {name} is back")
        elif isinstance(want, tuple):
            md, acks = want
            if cursor is None:
                problems.append(f"{topic}: cursor {name} lost")
            elif cursor.mark_delete_position < md:
                problems.append(f"{topic}: cursor {name} mark-delete "
                                f"{cursor.mark_delete_position} behind flushed {md}")
            else:
                lost = [p for p in (Position(*a) for a in acks)
                        if p > cursor.mark_delete_position and not cursor.is_deleted(p)]
                if lost:
                    problems.append(f"{topic}: cursor {name} lost flushed acks {lost}")
    return problems


async def _check_snapshot(store: SegmentStore, sid: int, want: str) -> list[str]:
    if sid not in store.snapshots.ids():
        return [f"snapshot {sid}: lost"]
    try:
        parts = [await store.snapshots.load_metadata(sid)]
        for i in range(1, 4):
            parts.append(await store.snapshots.load_segment(sid, i))
    except Exception as exc:  # any failure to load it is the finding
        return [f"snapshot {sid}: unreadable ({exc!r})"]
    if digest(parts) != want:
        return [f"snapshot {sid}: other bytes"]
    return []
