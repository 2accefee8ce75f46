"""Storage benchmark: durable appends vs raw os.write+fdatasync, sealed reads, cursor size.

Run: .venv/bin/python bench/storage.py [--entries N] [--dir PATH]
Prints, in one run (uvloop):
1. durable append throughput: 1 KiB entries, 64 concurrent appenders on the loop, group
   commit; then two raw baselines that write the same bytes (record headers included) with
   os.write + os.fdatasync replaying the exact sequence of batch sizes the store used, one on
   a growing file (every fdatasync also commits the new file size) and one on a file whose
   region was pre-zeroed (written zeros, synced) beforehand; the ratios store/raw (target
   >= 0.7). The store pre-zeroes its segments ahead of the write head (storage/writer.py),
   so store/raw(pre-zeroed) is the like-for-like comparison (slightly conservative: the raw
   file's zeroing is not timed, the store's amortised zeroing is); store/raw(growing) is
   what the old baseline printed.
2. sync append latency: one appender, one append in flight at a time (await each), as a
   synchronous Pulsar producer does; p50/p99, next to a raw pwrite+fdatasync of one record
   on a pre-zeroed file and on a growing file.
0. open_ledger time for 1M entries of 100 B (--open-entries) in 20 segments: every segment
   scanned (no indexes: the old code's path), with the sealed segments' persisted indexes,
   and with the last segment unindexed (as after a crash).
3. sequential read throughput of a sealed ledger (reopened: nothing cached, disk reads in
   read threads; the OS page cache is warm).
4. cursor persisted bytes per acked entry: 1M distinct random individual acks over 20 ledgers,
   persisted through ManagedCursor.flush (target <= 1 byte); plus the same measure at other
   ack densities, computed with the same encoder.
With --prealloc-probe it only runs the probe that chose how segments are pre-allocated:
one 1040-byte pwrite + fdatasync at a time on a file prepared four ways (nothing: growing;
posix_fallocate; fallocate(FALLOC_FL_ZERO_RANGE); written zeros + fdatasync), the modes
rotated in blocks of 25 syncs so the neighbours' I/O noise spreads over all of them.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import ctypes.util
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import uvloop
from pyroaring import BitMap

from storage import Position, SegmentStore, StorageConfig
from storage.cursor import CursorState, encode_cursor
from storage.names import encode_name
from storage.segments import (
    RECORD_HEADER_SIZE,
    encode_file_header,
    encode_record_header,
    segment_name,
)

ENTRY = 1024
APPENDERS = 64


class RawReplay:
    """The baseline: the same bytes (records with headers) with os.write + os.fdatasync.

    prezero=False: a growing file (each fdatasync also commits the new size). prezero=True:
    before each (timed) replay the region it will write is filled with written zeros and
    fdatasync'ed (untimed), so the timed fdatasyncs overwrite allocated, initialised blocks."""

    def __init__(self, path: Path, *, prezero: bool) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.prezero = prezero
        self.record = os.urandom(RECORD_HEADER_SIZE + ENTRY)
        self.buffers: dict[int, bytes] = {}
        self.offset = 0

    def _zero_ahead(self, nbytes: int) -> None:
        zeros = bytes(1 << 20)
        end = self.offset + nbytes
        for at in range(self.offset, end, len(zeros)):
            os.pwrite(self.fd, zeros[: min(len(zeros), end - at)], at)
        os.fdatasync(self.fd)

    def replay(self, batch_sizes: list[int]) -> float:
        for n in batch_sizes:
            if n not in self.buffers:
                self.buffers[n] = self.record * n
        if self.prezero:
            self._zero_ahead(sum(batch_sizes) * len(self.record))
        offset = self.offset
        start = time.perf_counter()
        for n in batch_sizes:
            data = self.buffers[n]
            os.pwrite(self.fd, data, offset)
            os.fdatasync(self.fd)
            offset += len(data)
        elapsed = time.perf_counter() - start
        self.offset = offset
        return sum(batch_sizes) / elapsed

    def latencies(self, count: int) -> list[float]:
        """count single-record pwrite+fdatasync, one at a time (seconds each)."""
        if self.prezero:
            self._zero_ahead(count * len(self.record))
        out: list[float] = []
        for _ in range(count):
            start = time.perf_counter()
            os.pwrite(self.fd, self.record, self.offset)
            os.fdatasync(self.fd)
            out.append(time.perf_counter() - start)
            self.offset += len(self.record)
        return out

    def close(self) -> None:
        os.close(self.fd)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def bench_append(
    root: Path, per_round: int, rounds: int, raws: list[RawReplay], fsync: bool = True
) -> list[tuple[float, list[float], float]]:
    """Rounds of per_round appends by 64 appenders, each followed by raw replays of that
    round's exact batch sizes. Returns (store entries/s, [raw entries/s], avg batch) per
    round."""
    store = await SegmentStore.open(root, StorageConfig(fsync=fsync))
    ml = await store.open_ledger("persistent://bench/append/t")
    payload = os.urandom(ENTRY)
    await asyncio.gather(*(ml.append(payload) for _ in range(APPENDERS)))  # warm-up
    per = per_round // APPENDERS

    async def appender() -> None:
        for _ in range(per):
            await ml.append(payload)

    out: list[tuple[float, list[float], float]] = []
    for _ in range(rounds):
        store.writer.batch_sizes = []
        start = time.perf_counter()
        await asyncio.gather(*(appender() for _ in range(APPENDERS)))
        rate = per * APPENDERS / (time.perf_counter() - start)
        sizes = list(store.writer.batch_sizes)
        raw_rates = [raw.replay(sizes) for raw in raws]
        out.append((rate, raw_rates, sum(sizes) / len(sizes)))
    writer = store.writer
    if fsync and hasattr(writer, "prezero_writes"):
        print(f"  (store pre-zeroing during the append rounds: {writer.prezero_writes} steps, "
              f"{writer.prezero_bytes / 1e6:.0f} MB of zeros, {writer.prezero_seconds:.2f} s of "
              f"writer time vs {writer.fsync_seconds:.2f} s in append fdatasyncs)")
    await store.close()
    return out


async def bench_sync_latency(
    root: Path, rounds: int, per_round: int, raws: list[RawReplay]
) -> tuple[list[float], list[list[float]]]:
    """One appender awaiting each append (a synchronous producer), in rounds alternating with
    the raw single-record baselines. Returns (store latencies, [raw latencies]) in seconds."""
    store = await SegmentStore.open(root, StorageConfig())
    ml = await store.open_ledger("persistent://bench/sync/t")
    payload = os.urandom(ENTRY)
    for _ in range(20):  # warm-up: the segment exists and has zeros ahead
        await ml.append(payload)
    lat: list[float] = []
    raw_lat: list[list[float]] = [[] for _ in raws]
    perf = time.perf_counter
    for _ in range(rounds):
        for _ in range(per_round):
            start = perf()
            await ml.append(payload)
            lat.append(perf() - start)
        for i, raw in enumerate(raws):
            raw_lat[i].extend(raw.latencies(per_round))
    await store.close()
    return lat, raw_lat


async def bench_read(root: Path, total: int) -> tuple[float, float, float]:
    name = "persistent://bench/read/t"
    store = await SegmentStore.open(root, StorageConfig(max_entries_per_ledger=total + 1))
    ml = await store.open_ledger(name)
    payload = os.urandom(ENTRY)
    for start in range(0, total, 5000):
        await asyncio.gather(*(ml.append(payload) for _ in range(min(5000, total - start))))
    first = ml.first_position
    await store.close()
    assert first is not None
    t0 = time.perf_counter()
    store = await SegmentStore.open(root, StorageConfig(entry_cache_bytes=0))
    ml = await store.open_ledger(name)
    recovery = time.perf_counter() - t0
    read = 0
    pos: Position = first
    t0 = time.perf_counter()
    while True:
        got = await ml.read_entries(pos, 1000, 8 << 20)
        if not got:
            break
        read += len(got)
        pos = ml.next_position(got[-1].position)
    elapsed = time.perf_counter() - t0
    await store.close()
    assert read == total, (read, total)
    return total / elapsed, total * ENTRY / elapsed / 1e6, total * ENTRY / recovery / 1e6


def _bulk_segments(directory: Path, ledgers: int, per_ledger: int) -> None:
    directory.mkdir(parents=True)
    (directory / "NAME").write_text("persistent://bench/cursor/t")
    header = encode_record_header  # local alias: this loop writes millions of records
    for ledger_id in range(ledgers):
        parts = [encode_file_header(ledger_id, 0)]
        parts += [header(i, b"", ledger_id=ledger_id) for i in range(per_ledger)]
        (directory / segment_name(ledger_id)).write_bytes(b"".join(parts))


async def bench_open_ledger(root: Path, total: int, entry: int = 100,
                            per_ledger: int = 50_000) -> tuple[float, float, float]:
    """open_ledger time for a topic of total entries of entry bytes (segments written
    directly, default rollover size): (first open: every segment scanned, as after a crash
    or as before persisted indexes; reopen after a clean close: sealed segments load their
    index; reopen with the indexes of all but the last segment: a crash in the open ledger)."""
    name = "persistent://bench/open/t"
    directory = root / "ledgers" / encode_name(name)
    directory.mkdir(parents=True)
    (directory / "NAME").write_text(name)
    payload = os.urandom(entry)
    record = encode_record_header
    for ledger_id in range(0, -(-total // per_ledger)):
        count = min(per_ledger, total - ledger_id * per_ledger)
        parts = [encode_file_header(ledger_id, 0)]
        for i in range(count):
            parts += (record(i, payload, ledger_id=ledger_id), payload)
        (directory / segment_name(ledger_id)).write_bytes(b"".join(parts))
    times: list[float] = []
    for _ in range(2):
        store = await SegmentStore.open(root, StorageConfig())
        t0 = time.perf_counter()
        ml = await store.open_ledger(name)
        times.append(time.perf_counter() - t0)
        assert ml.number_of_entries == total, ml.number_of_entries
        await store.close()
    # A crash: the last data segment lost its index (it was the open ledger).
    last = max(int(p.stem) for p in directory.glob("*.seg") if p.stat().st_size > 32)
    for p in directory.glob(f"{last:020d}.idx"):
        p.unlink()
    store = await SegmentStore.open(root, StorageConfig())
    t0 = time.perf_counter()
    ml = await store.open_ledger(name)
    times.append(time.perf_counter() - t0)
    assert ml.number_of_entries == total
    await store.close()
    return times[0], times[1], times[2]


async def bench_cursor(root: Path, ledgers: int = 20, per_ledger: int = 100_000,
                       acks: int = 1_000_000) -> tuple[int, float]:
    name = "persistent://bench/cursor/t"
    _bulk_segments(root / "ledgers" / encode_name(name), ledgers, per_ledger)
    store = await SegmentStore.open(root, StorageConfig())
    ml = await store.open_ledger(name)
    cursor = await ml.open_cursor("s", initial_position="earliest")
    rng = random.Random(7)
    by_ledger: dict[int, list[int]] = {}
    for flat in rng.sample(range(1, ledgers * per_ledger), acks):
        by_ledger.setdefault(flat // per_ledger, []).append(flat % per_ledger)
    for ledger_id, ids in by_ledger.items():
        cursor.delete_entry_ids(ledger_id, ids)
    assert len(cursor.individually_deleted) == acks
    await cursor.flush()
    size = cursor.persisted_size_bytes
    await store.close()
    return size, size / acks


def cursor_size_at_density(acks: int, ledgers: int, per_ledger: int) -> float:
    rng = random.Random(3)
    bitmaps: dict[int, BitMap] = {}
    for flat in rng.sample(range(1, ledgers * per_ledger), acks):
        bitmaps.setdefault(flat // per_ledger, BitMap()).add(flat % per_ledger)
    state = CursorState("s", Position(0, -1), Position(0, 0), 0, {}, bitmaps)
    return len(encode_cursor(state)) / acks


def prealloc_probe(directory: Path, rotations: int = 60, block: int = 25) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)

    def zero_range(fd: int, size: int) -> None:
        if libc.fallocate(fd, 0x10, ctypes.c_long(0), ctypes.c_long(size)) != 0:  # ZERO_RANGE
            raise OSError(ctypes.get_errno(), "fallocate(FALLOC_FL_ZERO_RANGE)")

    def written_zeros(fd: int, size: int) -> None:
        zeros = bytes(1 << 20)
        for at in range(0, size, len(zeros)):
            os.pwrite(fd, zeros[: min(len(zeros), size - at)], at)

    modes = {
        "growing file": lambda fd, size: None,
        "posix_fallocate": lambda fd, size: os.posix_fallocate(fd, 0, size),
        "fallocate(ZERO_RANGE)": zero_range,
        "written zeros": written_zeros,
    }
    record = os.urandom(RECORD_HEADER_SIZE + ENTRY)
    size = rotations * block * len(record) + (1 << 20)
    fds: dict[str, int] = {}
    lat: dict[str, list[float]] = {name: [] for name in modes}
    for name, prepare in modes.items():
        fd = os.open(directory / f"probe-{len(fds)}", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        prepare(fd, size)
        os.fdatasync(fd)
        fds[name] = fd
    offset = 0
    perf = time.perf_counter
    for _ in range(rotations):
        for name, fd in fds.items():
            for i in range(block):
                start = perf()
                os.pwrite(fd, record, offset + i * len(record))
                os.fdatasync(fd)
                lat[name].append(perf() - start)
        offset += block * len(record)
    for fd in fds.values():
        os.close(fd)
    print(f"pre-allocation probe: {rotations * block} x (1040-byte pwrite + fdatasync) per mode")
    for name, values in lat.items():
        print(f"  {name:22s} p25 {1e3 * percentile(values, 0.25):.3f}  p50 "
              f"{1e3 * percentile(values, 0.5):.3f}  p75 {1e3 * percentile(values, 0.75):.3f}  "
              f"mean {1e3 * statistics.mean(values):.3f} ms")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=6_400, help="appends per round")
    parser.add_argument("--rounds", type=int, default=25, help="alternating store/raw rounds")
    parser.add_argument("--sync-appends", type=int, default=2_000,
                        help="appends of the single-appender latency run")
    parser.add_argument("--sync-rounds", type=int, default=10,
                        help="alternating store/raw rounds of the latency run")
    parser.add_argument("--read-entries", type=int, default=100_000)
    parser.add_argument("--open-entries", type=int, default=1_000_000,
                        help="entries (100 B) of the open_ledger measurement")
    parser.add_argument("--only-open", action="store_true",
                        help="only measure open_ledger")
    parser.add_argument("--only-append", action="store_true",
                        help="only measure durable append against the raw baselines")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: tmp)")
    parser.add_argument("--prealloc-probe", action="store_true",
                        help="only run the fdatasync probe of pre-allocation strategies")
    args = parser.parse_args()
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="horae-bench-", dir=args.dir))
    try:
        if args.prealloc_probe:
            prealloc_probe(base)
            return
        print(f"storage benchmark in {base} (uvloop, {os.cpu_count()} cpus)")
        n = args.open_entries
        if not args.only_append:
            scan, indexed, crashed = await bench_open_ledger(base / "open", n)
            print(f"open_ledger for {n:,} entries (100 B, {-(-n // 50_000)} segments): "
                  f"{scan:.3f} s scanning every segment (no index: first open / old code), "
                  f"{indexed:.3f} s with persisted indexes (after a clean close), "
                  f"{crashed:.3f} s with the last segment unindexed (after a crash)")
        if args.only_open:
            return
        # Short alternating store/raw rounds: the disk's fsync latency drifts a lot on shared
        # machines, so each store round is compared with a raw replay right after it.
        raws = [RawReplay(base / "raw-growing.bin", prezero=False),
                RawReplay(base / "raw-prezeroed.bin", prezero=True)]
        pairs = await bench_append(base / "append", args.entries, args.rounds, raws)
        rate = statistics.median(p[0] for p in pairs)
        avg = statistics.mean(p[2] for p in pairs)
        print(f"durable append: median {rate:,.0f} entries/s ({rate * ENTRY / 1e6:.1f} MB/s of "
              f"1 KiB entries), {APPENDERS} appenders, avg group commit {avg:.1f} entries, "
              f"{args.rounds} rounds of {args.entries:,}")
        labels = ["growing file (the old baseline)",
                  "pre-zeroed file (the like-for-like one: the store pre-zeroes too; the raw "
                  "zeroing is untimed, the store's amortised zeroing is inside its time)"]
        for i, label in enumerate(labels):
            raw = statistics.median(p[1][i] for p in pairs)
            ratios = sorted(p[0] / p[1][i] for p in pairs)
            print(f"raw os.write+fdatasync, same batch sizes, {label}: median {raw:,.0f} "
                  f"entries/s (~{1e3 * avg / raw:.2f} ms per write+fdatasync)")
            print(f"  ratio store/raw({label.split(' (')[0]}): median "
                  f"{statistics.median(ratios):.2f} (quartiles {ratios[len(ratios) // 4]:.2f}.."
                  f"{ratios[3 * len(ratios) // 4]:.2f}; target >= 0.7)")
        if args.only_append:
            for raw in raws:
                raw.close()
            return
        lat, raw_lat = await bench_sync_latency(base / "sync", args.sync_rounds,
                                                args.sync_appends // args.sync_rounds, raws)
        for raw in raws:
            raw.close()
        print(f"sync append latency p50/p99: {1e3 * percentile(lat, 0.5):.3f} / "
              f"{1e3 * percentile(lat, 0.99):.3f} ms (one append in flight, {len(lat):,} appends, "
              f"mean {1e3 * statistics.mean(lat):.3f} ms = {len(lat) / sum(lat):,.0f} appends/s)")
        for i, label in enumerate(("growing file", "pre-zeroed file")):
            r = raw_lat[i]
            print(f"  raw pwrite+fdatasync of one record, {label}: p50/p99 "
                  f"{1e3 * percentile(r, 0.5):.3f} / {1e3 * percentile(r, 0.99):.3f} ms "
                  f"(mean {1e3 * statistics.mean(r):.3f} ms)")
        ((cpu_rate, _, _),) = await bench_append(
            base / "append-nofsync", args.entries * 4, 1, [], fsync=False
        )
        print(f"CPU cost without fsync (fsync=False): {cpu_rate:,.0f} entries/s = "
              f"{1e6 / cpu_rate:.1f} us per entry (loop + writer thread)")
        eps, mbps, scan = await bench_read(base / "read", args.read_entries)
        print(f"sealed ledger sequential read: {eps:,.0f} entries/s ({mbps:.0f} MB/s), "
              f"open_ledger of it {scan:.0f} MB/s (sealed: its persisted index is loaded)")
        size, per_ack = await bench_cursor(base / "cursor")
        print(f"cursor: 1,000,000 random acks over 20 ledgers x 100,000 entries -> {size:,} "
              f"bytes persisted, {per_ack:.3f} bytes/acked entry (target <= 1)")
        for per_ledger in (50_010, 200_000, 1_000_000):
            acks = min(1_000_000, 20 * per_ledger - 1)
            density = acks / (20 * per_ledger)
            print(f"  density {density:.0%} (20 ledgers x {per_ledger:,} entries, {acks:,} acks): "
                  f"{cursor_size_at_density(acks, 20, per_ledger):.3f} bytes/acked entry")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    uvloop.run(main())
