"""Broker CPU per dispatched message on the delivery and acknowledgement path, in process.

Usage:  .venv/bin/python bench/dispatch_path.py [--messages 50000] [--consumers 4]
            [--mode herd|backlog] [--rounds 3] [--profile] [--from-disk] [--probe]

No client, no socket: a real segment store (fsync off) and a real Shared subscription whose
consumers write into connections that only count bytes, so the figure is the broker's own
Python work per message, measured as this thread's CPU time (``time.thread_time``), which the
machine's load changes far less than wall time. Two phases per round:

- **dispatch**: ``--mode herd``: every entry carries the same ``deliver_at`` a little ahead, the
  dispatcher reads and holds them all in the delayed tracker (not measured), then, once they
  are due, the consumers get their permits and the time from there to the last MESSAGE frame
  written is measured (tracker hand-out, entry reads, routing, MESSAGE encoding, writes).
  ``--mode spread``: the same, but each entry falls due at a random time within ``--span-ms``
  (scattered positions, a few each millisecond, as in ``delayed_e2e.py``'s lateness run); the
  consumers have their permits before the first falls due and the loop's CPU over the whole
  span is measured, with how long after its deliver time each MESSAGE frame was written.
  ``--mode backlog``: plain entries, the same from the first permit to the last frame.
  ``--mode single``: one entry appended at a time (one send in flight, as the end-to-end
  figure of ``compare_peer.py``), from the subscription told of it to its frame written; its
  ACK phase includes the dispatch round the ACK schedules, if any.
- **ack**: the ids each consumer received go back as individual ACK commands of 1,000 ids
  (the official clients' grouping), through the connection side's ACK handler.

``--from-disk`` empties the entry cache before the herd falls due (as when its entries aged out
while they waited: read back from disk); "all threads" is the process's CPU over the phase
(the read threads included). ``--probe``: while the herd is dispatched, one-at-a-time appends
to another ledger of the same store (fsync off: the interpreter and the threads, not the disk),
their latency printed.

Printed: microseconds of CPU per message for each phase, the best of ``--rounds`` (each round
a fresh store and subscription). ``--profile`` prints a cProfile of the last round's phases.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from opcode_probe import OpcodeCounter  # noqa: E402

from broker.config import BrokerConfig  # noqa: E402
from broker.delayed import DelayPolicy, TrackerFactory  # noqa: E402
from broker.net.consumers import ConsumerSide  # noqa: E402
from broker.subscriptions.consumer import Consumer  # noqa: E402
from broker.subscriptions.dispatch_rate import TopicDispatch  # noqa: E402
from broker.subscriptions.selectors import new_selector  # noqa: E402
from broker.subscriptions.subscription import Subscription  # noqa: E402
from protocol import pulsar_pb as pb  # noqa: E402
from protocol.frames import NEED_DATA, FrameDecoder  # noqa: E402
from protocol.metadata import encode_entry  # noqa: E402
from storage.config import StorageConfig  # noqa: E402
from storage.store import SegmentStore  # noqa: E402


class CountingConnection:
    """A consumer's connection that keeps the written bytes (decoded after the timing)."""

    protocol_version = 20
    remote_address = "127.0.0.1:1"
    client_version = "bench"
    writes_paused = False
    service = type("NoTransactions", (), {"transactions": None})()

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.stamps: list[tuple[float, int]] = []
        """(wall-clock time, chunks written by then) after each write"""

    def write(self, data: bytes) -> None:
        self.chunks.append(data)
        self.stamps.append((time.time(), len(self.chunks)))

    def writelines(self, parts: list[bytes]) -> None:
        self.chunks.extend(parts)
        self.stamps.append((time.time(), len(self.chunks)))

    def written_at(self) -> list[tuple[float, int]]:
        """(time written, entry id) of every MESSAGE frame."""
        out = []
        decoder = FrameDecoder()
        done = 0
        for at, upto in self.stamps:
            decoder.receive_data(b"".join(self.chunks[done:upto]))
            done = upto
            while (frame := decoder.next_frame()) is not NEED_DATA:
                if frame.command.type == pb.BaseCommand.MESSAGE:
                    out.append((at, frame.command.message.message_id.entryId))
        return out

    def hold_reading(self, held: bool) -> None:
        """An ACK applied in slices holds the connection's reading: nothing is read here."""

    def message_ids(self) -> list[pb.MessageIdData]:
        decoder = FrameDecoder()
        decoder.receive_data(b"".join(self.chunks))
        out = []
        while (frame := decoder.next_frame()) is not NEED_DATA:
            if frame.command.type == pb.BaseCommand.MESSAGE:
                out.append(frame.command.message.message_id)
        return out


class _Subscriptions(dict[str, Any]):
    def remove_subscription(self, sub: Any) -> None:
        self.pop(sub.name, None)

    def consumer_count(self) -> int:
        return sum(len(sub.consumers) for sub in self.values())

    def update_caching(self) -> None:
        """The ledger keeps caching its new entries (a ledger on its own caches them)."""


class BenchTopic:
    """What a subscription asks of its topic, without the broker around it."""

    full = "persistent://public/default/dispatch-path"
    failover_delay_s = 0.0
    read_ahead_ms = BrokerConfig().delayed_delivery_read_ahead_millis

    def __init__(self, ledger: Any) -> None:
        self.ledger = ledger
        self.partition_index = -1
        self.terminated = False
        self.subscriptions = _Subscriptions()
        self.topic_dispatch = TopicDispatch(lambda: (0, 0))

    def transaction_view(self, subscription: str) -> None:
        return None

    def touch(self) -> None:
        pass

    @property
    def delivery(self) -> BenchTopic:
        return self

    def new_key_shared_selector(self, sticky: bool) -> Any:
        return new_selector(sticky, consistent_hashing=True)

    def delay_policy(self) -> DelayPolicy:
        return DelayPolicy(active=True, tick_time_ms=1, max_delay_ms=0, fixed_delay_ms=0,
                           strict=True)

    def tracker_factory(self, cursor: Any | None) -> TrackerFactory:
        return TrackerFactory(BrokerConfig(), asyncio.get_running_loop())


async def _round(args: argparse.Namespace, work: Path,
                 prof: cProfile.Profile | None) -> tuple[float, float]:
    store = await SegmentStore.open(work, StorageConfig(fsync=False))
    try:
        ledger = await store.open_ledger(BenchTopic.full)
        herd = args.mode in ("herd", "spread")
        # far enough ahead that every entry is read and held before it falls due
        due_at = int(time.time() * 1000) + 5000 + args.messages // 4
        now = int(time.time() * 1000)
        spread = args.span_ms if args.mode == "spread" else 0
        rnd = random.Random(7)
        deliver: list[int] = []   # by entry id (one ledger, from 0)
        entries = []
        for i in range(0 if args.mode == "single" else args.messages):
            md = pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=now)
            if herd:
                md.deliver_at_time = due_at + (rnd.randrange(spread) if spread else 0)
                deliver.append(md.deliver_at_time)
            entries.append(encode_entry(md, b"x" * args.payload))
        for start in range(0, len(entries), 1000):  # a publisher's window: group commits
            await asyncio.gather(*(ledger.append(e) for e in entries[start:start + 1000]))
        sub = await Subscription.open(BenchTopic(ledger), "s", durable=True,
                                      initial_position="earliest")
        conns = []
        consumers = []
        for cid in range(args.consumers):
            conn = CountingConnection()
            side = ConsumerSide(conn)  # type: ignore[arg-type]
            consumer = Consumer(side, cid, name=f"c{cid}", sub_type=pb.CommandSubscribe.Shared)
            side.attach(consumer, sub)
            await sub.add_consumer(consumer)
            conns.append(conn)
            consumers.append((side, consumer))
        dispatcher = sub.dispatcher
        assert dispatcher is not None
        loop = asyncio.get_running_loop()
        if herd:
            for _, consumer in consumers:
                consumer.permits = 1   # reading starts; every entry read is held
            deadline = loop.time() + 120
            while (dispatcher.delayed is None or len(dispatcher.delayed) < args.messages) \
                    and loop.time() < deadline:
                for _, consumer in consumers:
                    consumer.permits = 1000
                dispatcher.schedule()
                await asyncio.sleep(0.01)
            for _, consumer in consumers:
                consumer.permits = 0
            held = 0 if dispatcher.delayed is None else len(dispatcher.delayed)
            if held != args.messages:
                raise SystemExit(f"only {held} of {args.messages} held before they fell due "
                                 "(a loaded machine: try fewer --messages)")
            if args.from_disk:   # as when the herd's entries aged out of the cache
                store.cache.evict_oldest(store.cache.size_bytes + 1)
            # a spread is dispatched as it falls due: the permits are there before the first
            while int(time.time() * 1000) <= due_at - (50 if spread else 0):
                await asyncio.sleep(0.01)

        def sent() -> int:
            return sum(c.msg_out_counter for _, c in consumers)

        if args.mode == "single":
            return await _one_at_a_time(args, ledger, sub, consumers, prof)

        if prof is not None:
            prof.enable()
        probe_ledger = await store.open_ledger(BenchTopic.full + "-probe") if args.probe else None
        probe_ms: list[float] = []
        counter = OpcodeCounter() if args.opcodes else None
        if counter is not None:
            sys.settrace(counter)
        t0, p0 = time.thread_time(), time.process_time()
        for _, consumer in consumers:
            consumer.permits = args.messages
        dispatcher.schedule()
        w0 = time.perf_counter()
        poll_s = 0.005 if spread else 0.0005
        while sent() < args.messages:
            if probe_ledger is not None:   # another topic's one-at-a-time publish
                s0 = time.perf_counter()
                await probe_ledger.append(b"p" * 100)
                probe_ms.append((time.perf_counter() - s0) * 1000)
            else:   # not a busy wait: the loop thread's CPU is the dispatcher's
                await asyncio.sleep(poll_s)
        while dispatcher._task is not None:   # the last round's flush
            await asyncio.sleep(0.0005)
        args.wall_s = time.perf_counter() - w0
        args.probe_ms = sorted(probe_ms)
        dispatch_cpu = time.thread_time() - t0
        args.process_us = (time.process_time() - p0) / args.messages * 1e6
        if counter is not None:
            sys.settrace(None)
            args.opcode_counts = counter.per_code
        if prof is not None:
            prof.disable()
        if spread:   # how long after its deliver time each message was written
            args.late_ms = sorted(at * 1000 - deliver[entry_id]
                                  for conn in conns for at, entry_id in conn.written_at())
        acks = []
        for (side, consumer), conn in zip(consumers, conns, strict=True):
            ids = conn.message_ids()
            for start in range(0, len(ids), 1000):
                cmd = pb.CommandAck(consumer_id=consumer.consumer_id,
                                    ack_type=pb.CommandAck.Individual)
                cmd.message_id.extend(ids[start:start + 1000])
                acks.append((side, cmd))
        if prof is not None:
            prof.enable()
        if counter is not None:
            counter = OpcodeCounter()
            sys.settrace(counter)
        t0 = time.thread_time()
        for side, cmd in acks:
            side.handle_ack(cmd)
        for side, _ in consumers:   # an ACK of many ids is applied in slices
            while side._sliced.busy:
                await asyncio.sleep(0)
        ack_cpu = time.thread_time() - t0
        if counter is not None:
            sys.settrace(None)
            args.ack_opcodes = sum(counter.per_code.values()) / args.messages
        if prof is not None:
            prof.disable()
        assert sub.cursor.mark_delete_position == ledger.last_confirmed, "not all acked"
        await sub.close()
        await sub.cursor.close()   # its last save, before the store goes
        return dispatch_cpu / args.messages * 1e6, ack_cpu / args.messages * 1e6
    finally:
        await store.close()


async def _one_at_a_time(args: argparse.Namespace, ledger: Any, sub: Any,
                         consumers: list[Any], prof: cProfile.Profile | None
                         ) -> tuple[float, float]:
    """``--mode single``: one new entry at a time (the end-to-end workload: one send in
    flight), from the subscription being told of it to its frame written; then its ACK."""
    dispatcher = sub.dispatcher
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=int(time.time() * 1000))
    entry = encode_entry(md, b"x" * args.payload)
    for _, consumer in consumers:
        consumer.permits = 1000
    dispatch_cpu = ack_cpu = 0.0
    n = min(args.messages, 5000)
    for _ in range(n):
        await ledger.append(entry)
        await asyncio.sleep(0)
        if prof is not None:
            prof.enable()
        t0 = time.thread_time()
        before = sum(c.msg_out_counter for _, c in consumers)
        sub.on_new_entries()
        while sum(c.msg_out_counter for _, c in consumers) == before \
                or dispatcher._task is not None:
            await asyncio.sleep(0)
        dispatch_cpu += time.thread_time() - t0
        owner = dispatcher.owner.get(ledger.last_confirmed)
        for c_side, c in consumers:
            if c is owner:
                cmd = pb.CommandAck(consumer_id=c.consumer_id, ack_type=pb.CommandAck.Individual)
                mid = cmd.message_id.add()
                mid.ledgerId, mid.entryId = ledger.last_confirmed
                t0 = time.thread_time()
                c_side.handle_ack(cmd)
                while dispatcher._task is not None:   # the round the ACK scheduled, if any
                    await asyncio.sleep(0)
                ack_cpu += time.thread_time() - t0
        if prof is not None:
            prof.disable()
        for _, c in consumers:
            c.permits = 1000
    await sub.close()
    await sub.cursor.close()
    return dispatch_cpu / n * 1e6, ack_cpu / n * 1e6


async def _main(args: argparse.Namespace) -> None:
    best_d = best_a = best_p = float("inf")
    prof = None
    for r in range(args.rounds):
        if args.profile and r == args.rounds - 1:
            prof = cProfile.Profile()
        with tempfile.TemporaryDirectory(prefix="horae-dispatch-path-") as tmp:
            d, a = await _round(args, Path(tmp), prof)
        p = getattr(args, "process_us", float("nan"))
        probe = ""
        if args.probe and args.probe_ms:
            ms = args.probe_ms
            probe = (f"; herd {args.wall_s:.2f} s, probe appends {len(ms)} p50 "
                     f"{ms[len(ms) // 2]:.2f} p99 {ms[min(len(ms) - 1, len(ms) * 99 // 100)]:.2f} "
                     f"max {ms[-1]:.2f} ms")
        threads = f" (all threads {p:.2f})" if p == p else ""   # not measured: nan
        if getattr(args, "late_ms", None):
            ms = args.late_ms
            probe += (f"; written after the deliver time p50 {ms[len(ms) // 2]:.2f} p99 "
                      f"{ms[min(len(ms) - 1, len(ms) * 99 // 100)]:.2f} max {ms[-1]:.2f} ms"
                      f", {sum(1 for x in ms if x < 0)} early")
        print(f"  round {r + 1}: dispatch {d:.2f} us/msg{threads}, "
              f"ack {a:.2f} us/msg{probe}", flush=True)
        if args.opcodes:   # traced: the times mean nothing, the counts do
            counts = args.opcode_counts
            print(f"  round {r + 1}: the loop thread ran {sum(counts.values()) / args.messages:,.1f}"
                  f" Python opcodes per message while dispatching, {args.ack_opcodes:,.1f} per "
                  "message acknowledged", flush=True)
            for code, n in counts.most_common(args.top):
                print(f"    {n / args.messages:8.2f}  {code.co_qualname} "
                      f"({Path(code.co_filename).name}:{code.co_firstlineno})")
        best_d, best_a, best_p = min(best_d, d), min(best_a, a), min(best_p, p)
    print(f"{args.mode} {args.messages} x {args.payload} B, {args.consumers} consumers: "
          f"dispatch {best_d:.2f} us/msg"
          + (f" (all threads {best_p:.2f})" if best_p < float("inf") else "")
          + f", ack {best_a:.2f} us/msg "
          f"(best of {args.rounds})" + (", the herd read from disk" if args.from_disk else ""))
    if prof is not None:
        pstats.Stats(prof).sort_stats("tottime").print_stats(35)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=50_000)
    p.add_argument("--consumers", type=int, default=4)
    p.add_argument("--payload", type=int, default=100, help="payload bytes per message")
    p.add_argument("--mode", choices=("herd", "spread", "backlog", "single"), default="herd")
    p.add_argument("--span-ms", type=int, default=2000, dest="span_ms",
                   help="spread: the entries fall due at random over this many ms (as "
                        "delayed_e2e.py's lateness run: scattered positions, a few per ms)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--probe", action="store_true",
                   help="while the herd is dispatched, one-at-a-time appends to "
                        "another ledger, their latency printed")
    p.add_argument("--opcodes", action="store_true",
                   help="count the loop thread's Python opcodes while dispatching (traced: "
                        "the times mean nothing then)")
    p.add_argument("--top", type=int, default=0,
                   help="--opcodes: list the N functions that run the most opcodes per message")
    p.add_argument("--from-disk", action="store_true", dest="from_disk",
                   help="herd: empty the entry cache before it falls due (read from disk)")
    args = p.parse_args()
    try:
        import uvloop
        uvloop.run(_main(args))
    except ImportError:
        asyncio.run(_main(args))


if __name__ == "__main__":
    main()
