"""Reschedule and cancel by key over the raw wire: operations/s and receipt latency, the broker
being the bound, beside plain delayed SENDs and the unbatched publish ceiling.

Theory of operation
-------------------
No client library (as ``bench/wire_load.py``): SEND frames are pre-built with Horae's sans-IO
codec and written on raw asyncio connections (:mod:`bench.wire_clients`), ``--producers``
connections each keeping ``--window`` SENDs in flight; a SEND's receipt latency is from the
write of its frame to the read that returned its receipt. One Horae broker
(``python -m broker serve``, fsync before every receipt; ``--no-fsync``: none, to tell the
disk's share of the receipt latency from the broker's) serves every phase; the namespace
``public/default`` has ``delayedDeliveryReplaceByKey`` on. One round, each phase on a fresh
topic:

1. *seed*: ``--keys`` keyed messages (``partition_key`` ``key-K``, ``deliver_at_time`` 1-2 h
   out), one per key; reported but not compared;
2. *by key*: ``--ops`` operations on the seeded keys, three in four a reschedule (the key
   again, a new deliver time) and one in four a cancel (the key and an empty payload: a
   tombstone). Key K is always sent by producer ``K % producers``, so each key's operations
   reach the log in the order they were sent;
3. *plain delayed*: as many delayed SENDs without a key (1-2 h out);
4. *raw*: as many unbatched SENDs without a deliver time (the publish ceiling), on a topic
   whose subscription was created and left (nothing dispatched meanwhile);
5. *raw, consumer*: the same with a consumer attached (each message read, sent and
   acknowledged): what a subscription that reads every entry costs, the fair reference for
   the plain delayed phase, whose subscription reads every entry too (and holds it).

Phases 1-3 and 5 have a Shared consumer attached (:class:`Holder`: a FLOW of ``--permits``, it
acknowledges whatever arrives), so each subscription's delayed-delivery tracker is live and the
broker acknowledges each replaced or cancelled version on it as the replacement is recorded.
Every deliver time is distinct (``base + slot * spacing``, slots a random permutation): a
scheduled message's deliver time names the operation that sent it.

After the by-key phase the check (:func:`check_schedule`): the subscription's ``msgBacklog``
equals the keys still scheduled, and the scheduled listing (REST ``delayedMessages``) holds
exactly one message per such key, the one its last operation sent; so each replaced or
cancelled version is acknowledged and no newest version is lost. ``--kill9`` then runs the
operations once more on a fresh broker, kills it -9 once half of them have receipts, restarts
it on the same data and checks the same against every state between the operations confirmed
and those sent (:func:`states_after_kill`). The tracker's index slots
(REST ``delayedMessages/histogram``: counted slots and ``staleIndexes``) are printed beside:
a replaced version leaves its tracker's time index lazily, when its old time comes.

Broker CPU (all threads, ``/proc/PID/stat``) is read around each phase; the load average is
printed with each round, since the machine's other work moves every absolute figure. Under
each phase a second line splits where a receipt's time goes: the share of the phase's wall
time the event-loop thread ran on a CPU (near 100%: SENDs queue for the loop) and was
runnable but waited for a CPU (the machine's other work; ``/proc/PID/task/PID/schedstat``),
and from the store's counters on ``/metrics`` the group commits (per second, entries each) and
the fdatasyncs (per second, mean duration, share of the phase's wall time); a third line
gives the share of the receipts slower than the phase's p99 whose SEND was written within
:data:`BEAT_WINDOW_S` of a whole second of the monotonic clock (``time.perf_counter`` here,
the event loop's clock in the broker), where the broker's periodic work wakes
(storage/pacing.py): near the window's 14% when the slow receipts fall anywhere, near 100%
when that work holds them. ``--rate R``
paces the SENDs (R a second in all, released every millisecond, the window still capping
what is in flight): the receipt latency at a given offered load rather than at saturation.
``--profile DIR`` adds a round whose three measured phases each run under py-spy (one stack
file per phase) and prints their top frames. ``--phases`` runs only some of the measured
phases (the seed and the check go with ``by-key``): with ``--rounds N``, N repetitions of
them on one broker. ``--opcodes`` runs the broker with ``bench/opcode_probe.py`` loaded and
prints, per measured phase, the Python opcodes each of its threads ran per SEND (the event
loop, the storage write and sync threads, the rest; counted until the loop is quiet after the
last receipt, so that the slowed dispatcher's holds of the phase's entries are in) and, with ``--top N``, the N functions
of the loop running the most: figures the machine's load cannot move (tracing slows the
broker several-fold, so that run's rates, latencies and CPU figures mean nothing).

Usage::

    .venv/bin/python bench/reschedule_wire.py [--keys 20000] [--ops 100000] [--producers 4]
        [--window 200] [--size 128] [--rounds 2] [--rate R] [--profile DIR] [--no-fsync]
        [--kill9] [--phases by-key,plain-delayed,raw,raw-consumer] [--opcodes [--top N]]

Never part of the test run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import random
import shutil
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import uvloop

from bench import opcode_probe
from bench.brokers import Broker, cpu_seconds, start_horae
from bench.profiling import PySpyRecorder, summarise_collapsed
from bench.wire_clients import (
    Publisher,
    RawConnection,
    connect,
    frozen_heap,
    lookup,
    open_producer,
)
from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.frames import Frame
from protocol.metadata import encode_entry

T = pb.BaseCommand
NAMESPACE = "public/default"
SUBSCRIPTION = "sub"
HOUR_MS = 3_600_000
_PONG = C.encode_pong()


# --------------------------------------------------------------------------- operations


@dataclass(frozen=True, slots=True)
class Op:
    """One SEND: ``key`` (None: no key), ``deliver_at`` (None: no deliver time; with a key,
    a tombstone)."""

    key: int | None
    deliver_at: int | None


class DeliverTimes:
    """Distinct deliver times spread over an hour from ``base``, in a random order."""

    def __init__(self, base_ms: int, count: int, rnd: random.Random) -> None:
        self.spacing = max(1, HOUR_MS // max(1, count))
        self.slots = list(range(count))
        rnd.shuffle(self.slots)
        self.base = base_ms
        self.next = 0

    def take(self) -> int:
        slot = self.slots[self.next]
        self.next += 1
        return self.base + slot * self.spacing


def keyed_ops(keys: int, ops: int, producers: int, rnd: random.Random,
              base_ms: int) -> tuple[list[list[Op]], list[list[Op]]]:
    """The seed (one reschedule per key) and ``ops`` operations (three in four a reschedule,
    one in four a cancel), each split by producer: key K goes to producer K % producers."""
    times = DeliverTimes(base_ms, keys + ops, rnd)
    seed: list[list[Op]] = [[] for _ in range(producers)]
    for k in range(keys):
        seed[k % producers].append(Op(k, times.take()))
    work: list[list[Op]] = [[] for _ in range(producers)]
    for i in range(ops):
        k = rnd.randrange(keys)
        work[k % producers].append(Op(k, None if i % 4 == 3 else times.take()))
    return seed, work


def plain_ops(count: int, producers: int, rnd: random.Random, base_ms: int | None) -> list[list[Op]]:
    """``count`` SENDs without a key, delayed (from ``base_ms``) or not (None)."""
    times = DeliverTimes(base_ms, count, rnd) if base_ms is not None else None
    return [[Op(None, times.take() if times else None) for _ in range(count // producers
                                                                     + (p < count % producers))]
            for p in range(producers)]


def build_frames(name: str, ops: Sequence[Op], size: int, first_sequence_id: int = 0) -> list[bytes]:
    """Pre-built SEND frames (producer id 1) for ``ops``."""
    payload = (bytes(range(256)) * (size // 256 + 1))[:size]
    publish_time = int(time.time() * 1000)
    frames = []
    for i, op in enumerate(ops):
        seq = first_sequence_id + i
        md = pb.MessageMetadata(producer_name=name, sequence_id=seq, publish_time=publish_time)
        body = payload
        if op.key is not None:
            md.partition_key = f"key-{op.key}"
            if op.deliver_at is None:
                body = b""
        if op.deliver_at is not None:
            md.deliver_at_time = op.deliver_at
        frames.append(C.encode_send(1, seq, encode_entry(md, body)))
    return frames


def final_state(ops: Sequence[Op], state: dict[int, int] | None = None) -> dict[int, int]:
    """Key -> deliver time of the message still scheduled after ``ops`` in order."""
    state = dict(state or {})
    for op in ops:
        assert op.key is not None
        if op.deliver_at is None:
            state.pop(op.key, None)
        else:
            state[op.key] = op.deliver_at
    return state


# --------------------------------------------------------------------------- consumer


class Holder:
    """A Shared consumer that keeps a FLOW window open and acknowledges what it receives."""

    def __init__(self, conn: RawConnection, permits: int) -> None:
        self.conn = conn
        self.permits = permits
        self.received = 0
        conn.handler = self.frames_received
        conn.write(C.encode_flow(1, permits))

    def frames_received(self, frames: list[Frame]) -> None:
        ids = []
        for frame in frames:
            cmd = frame.command
            if cmd.type == T.MESSAGE:
                mid = cmd.message.message_id
                ids.append((mid.ledgerId, mid.entryId))
            elif cmd.type == T.PING:
                self.conn.write(_PONG)
        if ids:
            self.received += len(ids)
            self.conn.write(C.encode_ack(1, ids) + C.encode_flow(1, len(ids)))


async def attach(broker: Broker, topic: str, permits: int | None) -> RawConnection:
    """Subscribe ``sub`` (Shared, Earliest) on ``topic``; with ``permits`` a :class:`Holder`
    takes the connection, without it the caller closes it (the subscription stays)."""
    conn = await connect(broker)
    await lookup(conn, topic, 1)
    await conn.request(C.encode_subscribe(topic, SUBSCRIPTION, 1, 1, 2, initial_position=1),
                       T.SUCCESS)
    if permits is not None:
        Holder(conn, permits)
    return conn


# --------------------------------------------------------------------------- REST


def rest(broker: Broker, method: str, path: str, body: bytes | None = None) -> tuple[int, Any]:
    req = urllib.request.Request(f"http://{broker.host}:{broker.web_port}{path}", data=body,
                                 method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        raw = resp.read()
        return int(resp.status), json.loads(raw) if raw else None


def enable_replace_by_key(broker: Broker) -> None:
    status, _ = rest(broker, "POST",
                     f"/admin/v2/namespaces/{NAMESPACE}/delayedDeliveryReplaceByKey", b"true")
    if status != 204:
        raise RuntimeError(f"enabling replace by key: HTTP {status}")


def _topic_path(topic: str) -> str:
    return "/admin/v2/persistent/" + topic.split("://", 1)[1]


def backlog(broker: Broker, topic: str) -> int:
    _, body = rest(broker, "GET", _topic_path(topic) + "/stats")
    return int(body["subscriptions"][SUBSCRIPTION]["msgBacklog"])


def scheduled(broker: Broker, topic: str) -> list[tuple[str | None, int]]:
    """(key, deliver time) of every message the subscription has scheduled (all pages)."""
    out: list[tuple[str | None, int]] = []
    after: str | None = None
    for _ in range(100_000):
        query = "?limit=1000" + (f"&after={urllib.parse.quote(after)}" if after else "")
        _, body = rest(broker, "GET", _topic_path(topic)
                       + f"/subscription/{SUBSCRIPTION}/delayedMessages{query}")
        out += [(m["key"], int(m["deliverAt"])) for m in body["messages"]]
        after = body["next"]
        if after is None:
            return out
    raise RuntimeError("the scheduled listing did not end")


def check_schedule(broker: Broker, topic: str,
                   acceptable: Callable[[dict[int, int]], bool]) -> tuple[bool, str]:
    """Does the subscription hold exactly one scheduled message per scheduled key, with a
    state ``acceptable`` says is right, and a backlog of just those? (verdict, details)"""
    listed = scheduled(broker, topic)
    state: dict[int, int] = {}
    strays = 0
    for key, at in listed:
        if key is None or not key.startswith("key-") or int(key[4:]) in state:
            strays += 1
            continue
        state[int(key[4:])] = at
    pending = backlog(broker, topic)
    ok = strays == 0 and pending == len(listed) and acceptable(state)
    return ok, f"backlog {pending:,}, scheduled {len(listed):,} ({strays} strays or duplicates)"


# --------------------------------------------------------------------------- publishing


@dataclass
class PhaseResult:
    name: str
    sends: int = 0
    seconds: float = 0.0
    broker_cpu_s: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    #: each receipt's SEND time (monotonic clock, seconds), in the order of latencies_ms
    sent_s: list[float] = field(default_factory=list)
    #: seconds the broker's event-loop thread (the process's main thread) ran on a CPU, and
    #: was runnable but waited for one (the machine's other work)
    loop_cpu_s: float = 0.0
    loop_wait_s: float = 0.0
    #: the store's counters over the phase (/metrics): group commits, entries, fsyncs, seconds
    storage: dict[str, float] = field(default_factory=dict)

    def split(self) -> str:
        """Where a receipt's time goes, from the phase's counters: the event loop's time on a
        CPU and waiting for one, the group commits (entries each), the fdatasyncs (mean, and
        their share of the phase's wall time; the mean includes the thread's wait for the
        interpreter after the call), the storage threads' waits for the interpreter after
        their writes and fdatasyncs and the loop's yields to them (storage/handoff.py), as
        shares of the wall time."""
        st, wall = self.storage, self.seconds or 1.0
        commits, fsyncs = st.get("group_commits", 0.0), st.get("fsyncs", 0.0)
        per_commit = st.get("group_committed_entries", 0.0) / commits if commits else 0.0
        mean_ms = 1e3 * st.get("fsync_seconds", 0.0) / fsyncs if fsyncs else 0.0
        per_op = 1e6 * self.loop_cpu_s / self.sends if self.sends else 0.0
        return (f"event loop {per_op:5.1f} us/op, on a CPU {100 * self.loop_cpu_s / wall:3.0f}%, "
                f"waiting for one "
                f"{100 * self.loop_wait_s / wall:3.0f}% of the time; "
                f"{commits / wall:7,.0f} group commits/s of {per_commit:5.1f} entries; "
                f"fdatasync {fsyncs / wall:6,.0f}/s, mean {mean_ms:5.2f} ms, "
                f"{100 * st.get('fsync_seconds', 0.0) / wall:3.0f}% of the time; storage "
                f"threads waiting for the interpreter "
                f"{100 * st.get('interpreter_wait_seconds', 0.0) / wall:3.0f}%, the loop "
                f"yielding to them {100 * st.get('interpreter_yield_seconds', 0.0) / wall:3.0f}%")

    def figures(self) -> dict[str, float]:
        lat = sorted(self.latencies_ms)

        def pct(p: float) -> float:
            return lat[min(len(lat) - 1, int(len(lat) * p / 100))] if lat else 0.0

        return {"ops/s": self.sends / self.seconds if self.seconds else 0.0,
                "p50 ms": pct(50), "p99 ms": pct(99), "p99.9 ms": pct(99.9),
                "broker CPU us/op": self.broker_cpu_s * 1e6 / self.sends if self.sends else 0.0,
                "slow near the beat": beat_share(self.sent_s, self.latencies_ms, pct(99))}


#: The part of each second, on the monotonic clock, counted as the broker's beat: the periodic
#: work (rates and housekeeping, cursor flush, heap check, disk check) wakes at whole seconds
#: of the loop's clock (storage/pacing.py), which is the same clock. 20 ms before (a SEND
#: written just before it waits out the beat's work too) to 120 ms after: 14% of the time.
BEAT_WINDOW_S = (-0.02, 0.12)


def beat_share(sent_s: list[float], latencies_ms: list[float], over_ms: float) -> float:
    """The share of the receipts slower than *over_ms* whose SEND was written within
    :data:`BEAT_WINDOW_S` of a whole second: about 0.14 when the slow ones fall anywhere,
    near 1 when the broker's periodic work holds them. NaN when none is that slow."""
    before, after = BEAT_WINDOW_S
    slow = near = 0
    for sent, lat in zip(sent_s, latencies_ms, strict=True):
        if lat <= over_ms:
            continue
        slow += 1
        frac = sent % 1.0
        if frac >= 1.0 + before or frac < after:
            near += 1
    return near / slow if slow else float("nan")


class PacedPublisher(Publisher):
    """A :class:`Publisher` that also keeps to ``rate`` SENDs a second (open loop, released
    every millisecond; ``window`` still caps what is in flight)."""

    def __init__(self, conn: RawConnection, frames: list[bytes], first_sequence_ids: list[int],
                 window: int, done: asyncio.Future[None], rate: float) -> None:
        super().__init__(conn, frames, first_sequence_ids, window, done)
        self.rate = rate
        self.t0 = 0.0

    def _send_upto(self, end: int, now: float) -> None:
        super()._send_upto(min(end, int((now - self.t0) * self.rate) + 1), now)

    def start(self) -> None:
        self.t0 = time.perf_counter()
        super().start()
        self._tick()

    def _tick(self) -> None:
        if self.done.done() or self.sent >= len(self.frames):
            return
        self._send_upto(self.acked + self.window, time.perf_counter())
        asyncio.get_running_loop().call_later(0.001, self._tick)


_STORAGE_COUNTERS = ("group_commits", "group_committed_entries", "fsyncs", "fsync_seconds",
                     "interpreter_wait_seconds", "interpreter_yield_seconds")


def storage_counters(broker: Broker) -> dict[str, float]:
    """The group-commit writer's counters from the broker's /metrics."""
    with urllib.request.urlopen(f"http://{broker.host}:{broker.web_port}/metrics",
                                timeout=30) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        name, _, rest = line.partition("{")
        if name.startswith("horae_storage_") and name.endswith("_total"):
            key = name[len("horae_storage_"):-len("_total")]
            if key in _STORAGE_COUNTERS:
                out[key] = float(rest.rpartition(" ")[2])
    return out


def thread_times(pid: int, tid: int) -> tuple[float, float]:
    """(seconds on a CPU, seconds runnable but waiting for one) of one thread
    (``/proc/PID/task/TID/schedstat``)."""
    with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as fh:
        on_cpu, waiting, _ = fh.read().split()
    return int(on_cpu) / 1e9, int(waiting) / 1e9


async def publish(broker: Broker, topic: str, name: str, frames: list[list[bytes]], window: int,
                  timeout_s: float, rate: float = 0.0) -> PhaseResult:
    """Publish each producer's frames with ``window`` in flight (and, with ``rate``, no more
    than that many SENDs a second in all); all receipts awaited."""
    loop = asyncio.get_running_loop()
    conns = [await open_producer(broker, topic, f"{name}-{p}") for p in range(len(frames))]
    dones = [loop.create_future() for _ in frames]
    pubs = [PacedPublisher(conn, f, list(range(len(f))), window, done, rate / len(frames))
            if rate > 0 else Publisher(conn, f, list(range(len(f))), window, done)
            for conn, f, done in zip(conns, frames, dones, strict=True)]
    result = PhaseResult(name, sum(len(f) for f in frames))
    try:
        with frozen_heap():
            counters0 = await asyncio.to_thread(storage_counters, broker)
            loop0 = thread_times(broker.pid, broker.pid)
            cpu0, t0 = cpu_seconds(broker.pid), time.perf_counter()
            for pub in pubs:
                pub.start()
            await asyncio.wait_for(asyncio.gather(*dones), timeout_s)
            result.seconds = time.perf_counter() - t0
            result.broker_cpu_s = cpu_seconds(broker.pid) - cpu0
            loop1 = thread_times(broker.pid, broker.pid)
            result.loop_cpu_s, result.loop_wait_s = loop1[0] - loop0[0], loop1[1] - loop0[1]
            counters = await asyncio.to_thread(storage_counters, broker)
            result.storage = {k: v - counters0.get(k, 0.0) for k, v in counters.items()}
    finally:
        for conn in conns:
            conn.on_lost = None
            conn.close()
    result.latencies_ms = [lat * 1e3 for pub in pubs for lat in pub.latencies]
    # receipts come in SEND order, so a producer's k-th latency is its k-th SEND's
    result.sent_s = [t for pub in pubs for t in pub.sent_at[:len(pub.latencies)]]
    return result


#: The measured phases a round may run (by key, plain delayed, raw, raw with a consumer: a
#: round runs those asked for in that order).
PHASES: Final = frozenset({"by-key", "plain-delayed", "raw", "raw-consumer"})
#: Each phase's name in the results.
_PHASE_NAMES: Final = {"by-key": "by key", "plain-delayed": "plain delayed",
                       "raw": "raw (no delay)", "raw-consumer": "raw, consumer"}


@dataclass(frozen=True)
class Settings:
    keys: int = 20_000
    ops: int = 100_000
    producers: int = 4
    window: int = 200
    size: int = 128
    permits: int = 1000
    timeout_s: float = 600.0
    #: SENDs a second in all, paced (0: as fast as the window allows)
    rate: float = 0.0
    #: the measured phases to run (the seed runs with the by-key phase)
    phases: frozenset[str] = PHASES


async def run_round(broker: Broker, tag: str, s: Settings, rnd: random.Random,
                    on_phase: Callable[[str, str], None] | None = None,
                    ) -> tuple[list[PhaseResult], tuple[bool, str]]:
    base = int(time.time() * 1000) + HOUR_MS
    keyed_topic = f"persistent://{NAMESPACE}/resched-{tag}"
    plain_topic = f"persistent://{NAMESPACE}/resched-plain-{tag}"
    raw_topic = f"persistent://{NAMESPACE}/resched-raw-{tag}"
    read_topic = f"persistent://{NAMESPACE}/resched-read-{tag}"
    seed, work = keyed_ops(s.keys, s.ops, s.producers, rnd, base)
    seed_frames = [build_frames(f"seed-{p}", ops, s.size) for p, ops in enumerate(seed)]
    work_frames = [build_frames(f"key-{p}", ops, s.size) for p, ops in enumerate(work)]
    plain_frames = [build_frames(f"plain-{p}", ops, s.size)
                    for p, ops in enumerate(plain_ops(s.ops, s.producers, rnd, base))]
    raw_frames = [build_frames(f"raw-{p}", ops, s.size)
                  for p, ops in enumerate(plain_ops(s.ops, s.producers, rnd, None))]
    read_frames = [build_frames(f"read-{p}", ops, s.size)
                   for p, ops in enumerate(plain_ops(s.ops, s.producers, rnd, None))]
    holders = [await attach(broker, keyed_topic, s.permits),
               await attach(broker, plain_topic, s.permits),
               await attach(broker, read_topic, s.permits)]
    (await attach(broker, raw_topic, None)).close()
    async def phase(label: str, topic: str, name: str, frames: list[list[bytes]]) -> PhaseResult:
        if on_phase:
            on_phase(label, "start")
        try:
            return await publish(broker, topic, name, frames, s.window, s.timeout_s, s.rate)
        finally:
            if on_phase:
                on_phase(label, "stop")

    try:
        results: list[PhaseResult] = []
        if "by-key" in s.phases:
            results.append(await publish(broker, keyed_topic, "seed", seed_frames, s.window,
                                         s.timeout_s))
            results.append(await phase("by-key", keyed_topic, "by key", work_frames))
        if "plain-delayed" in s.phases:
            results.append(await phase("plain-delayed", plain_topic, "plain delayed",
                                       plain_frames))
        if "raw" in s.phases:
            results.append(await phase("raw", raw_topic, "raw (no delay)", raw_frames))
        if "raw-consumer" in s.phases:
            results.append(await phase("raw-consumer", read_topic, "raw, consumer", read_frames))
        if "by-key" not in s.phases:
            return results, (True, "the by-key phase was not run: nothing to check")
        expected = final_state([op for ops in work for op in ops],
                               final_state([op for ops in seed for op in ops]))
        ok, details = await settle(broker, keyed_topic, lambda state: state == expected, 60.0)
        _, hist = await asyncio.to_thread(
            rest, broker, "GET",
            _topic_path(keyed_topic) + f"/subscription/{SUBSCRIPTION}/delayedMessages/histogram")
        pending = sum(int(b["count"]) for b in hist["bins"])
        details += (f"; tracker index slots {pending:,}, of which stale (replaced or cancelled, "
                    f"until their old time or a compaction) up to {int(hist['staleIndexes']):,}")
        return results, (ok, details)
    finally:
        for conn in holders:
            conn.close()


async def settle(broker: Broker, topic: str, acceptable: Callable[[dict[int, int]], bool],
                 timeout_s: float) -> tuple[bool, str]:
    """:func:`check_schedule` until it holds or ``timeout_s`` passed (acknowledgements and the
    tracker settle asynchronously; the broker has no event to wait on over REST)."""
    deadline = time.monotonic() + timeout_s
    while True:
        verdict = await asyncio.to_thread(check_schedule, broker, topic, acceptable)
        if verdict[0] or time.monotonic() > deadline:
            return verdict
        await asyncio.sleep(0.5)


class _WatchedPublisher(Publisher):
    """A publisher that reports each read of receipts (the kill is done from there)."""

    on_receipts: Callable[[], None] | None = None

    def frames_received(self, frames: list[Frame]) -> None:
        super().frames_received(frames)
        if self.on_receipts is not None:
            self.on_receipts()


async def publish_and_kill(broker: Broker, topic: str, work: list[list[Op]], window: int,
                           size: int, kill_after: int, timeout_s: float) -> list[tuple[int, int]]:
    """Publish ``work`` (one producer per list) and kill -9 the broker once ``kill_after``
    receipts came, SENDs in flight on every producer; each producer's (receipts, SENDs
    written) at the kill."""
    loop = asyncio.get_running_loop()
    conns = [await open_producer(broker, topic, f"work-{p}") for p in range(len(work))]
    killed: asyncio.Future[list[tuple[int, int]]] = loop.create_future()
    pubs: list[_WatchedPublisher] = []

    def maybe_kill() -> None:
        if not killed.done() and sum(p.acked for p in pubs) >= kill_after:
            broker.proc.kill()
            killed.set_result([(p.acked, p.sent) for p in pubs])

    for conn, ops in zip(conns, work, strict=True):
        pub = _WatchedPublisher(conn, build_frames(f"work-{len(pubs)}", ops, size),
                                list(range(len(ops))), window, loop.create_future())
        pub.on_receipts = maybe_kill
        pub.done.add_done_callback(lambda f: f.exception())   # lost connections: expected
        pubs.append(pub)
    for pub in pubs:
        pub.start()
    try:
        counts = await asyncio.wait_for(killed, timeout_s)
        await asyncio.to_thread(broker.proc.wait, timeout_s)
    finally:
        for conn in conns:
            conn.on_lost = None
            conn.close()
    return counts


def states_after_kill(seed: list[list[Op]], work: list[list[Op]],
                      counts: list[tuple[int, int]]) -> Callable[[dict[int, int]], bool]:
    """Which schedules are right after a kill at ``counts``: each producer's keys (K %
    producers) in the state after its seed and a prefix of its operations at least as long as
    its receipts and at most as long as its SENDs (the durable ones are such a prefix)."""
    producers = len(work)
    allowed: list[list[dict[int, int]]] = []
    for p, (acked, sent) in enumerate(counts):
        state = final_state(work[p][:acked], final_state(seed[p]))
        states = [state]
        for op in work[p][acked:sent]:
            state = final_state((op,), state)
            states.append(state)
        allowed.append(states)

    def acceptable(state: dict[int, int]) -> bool:
        return all({k: v for k, v in state.items() if k % producers == p} in allowed[p]
                   for p in range(producers))

    return acceptable


def run_kill9(tmp: pathlib.Path, s: Settings, rnd: random.Random,
              settle_s: float = 120.0) -> tuple[bool, str]:
    """Seed, then the operations killed -9 at half their receipts, restart on the same data,
    and check the schedule against :func:`states_after_kill`."""
    topic = f"persistent://{NAMESPACE}/resched-kill9-{os.getpid()}"
    seed, work = keyed_ops(s.keys, s.ops, s.producers, rnd, int(time.time() * 1000) + HOUR_MS)

    async def before_kill(broker: Broker) -> list[tuple[int, int]]:
        enable_replace_by_key(broker)
        consumer = await attach(broker, topic, s.permits)
        try:
            await publish(broker, topic, "seed",
                          [build_frames(f"seed-{p}", ops, s.size) for p, ops in enumerate(seed)],
                          s.window, s.timeout_s)
            return await publish_and_kill(broker, topic, work, s.window, s.size, s.ops // 2,
                                          s.timeout_s)
        finally:
            consumer.close()

    with start_horae(tmp, name="horae-kill9") as first:
        counts = asyncio.run(before_kill(first))
    if first.proc.returncode != -9:
        return False, f"the broker was not killed: exit {first.proc.returncode}"
    acceptable = states_after_kill(seed, work, counts)

    async def after_restart(broker: Broker) -> tuple[bool, str]:
        consumer = await attach(broker, topic, s.permits)   # the dispatcher reads the backlog
        try:
            return await settle(broker, topic, acceptable, settle_s)
        finally:
            consumer.close()

    started = time.perf_counter()
    with start_horae(tmp, name="horae-kill9") as second:
        ok, details = asyncio.run(after_restart(second))
    receipts, sends = sum(a for a, _ in counts), sum(b for _, b in counts)
    return ok, (f"killed with {receipts:,} receipts of {sends:,} SENDs written; after restart "
                f"({time.perf_counter() - started:.1f} s to a settled check): {details}")


class OpcodeRecorder:
    """An ``on_phase`` callback: the broker's opcodes per thread over each phase
    (:mod:`bench.opcode_probe`; the broker runs with it loaded)."""

    def __init__(self, pid: int, path: pathlib.Path) -> None:
        self.pid = pid
        self.path = path
        self._before: dict[str, dict[str, int]] = {}
        self.phases: dict[str, dict[str, Any]] = {}

    def __call__(self, phase: str, event: str) -> None:
        if event != "start":
            self._settle()
        now = opcode_probe.snapshot(self.pid, self.path, start=event == "start")
        if event == "start":
            self._before = now
        else:
            self.phases[phase] = opcode_probe.difference(now, self._before)


    def _settle(self, quiet: float = 0.002, timeout_s: float = 120.0) -> None:
        """Keep counting until the loop's count grows by less than ``quiet`` of the phase's
        in half a second (or ``timeout_s``): the traced dispatcher holds the phase's entries
        well after their receipts, and its work belongs to the phase."""
        def loop_total(counts: dict[str, dict[str, int]]) -> int:
            return sum(counts.get("loop", {}).values())

        base = loop_total(self._before)
        last = loop_total(opcode_probe.snapshot(self.pid, self.path, start=True))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            time.sleep(0.5)
            now = loop_total(opcode_probe.snapshot(self.pid, self.path, start=True))
            if now - last < quiet * max(1, now - base):
                return
            last = now


_THREADS: Final = (("loop", "event loop"), ("horae-storage-writer", "write thread"),
                   ("horae-storage-sync", "sync thread"))


def print_opcodes(recorder: OpcodeRecorder, results: list[PhaseResult], top: int) -> None:
    """Opcodes per SEND of each traced phase, per thread, and the loop's top functions."""
    sends = {r.name: r.sends for r in results}
    named = {name for name, _ in _THREADS}
    for phase, threads in recorder.phases.items():
        n = sends.get(_PHASE_NAMES[phase], 0) or 1
        parts = [f"{label} {sum(threads.get(name, {}).values()) / n:,.0f}"
                 for name, label in _THREADS]
        rest = sum(sum(c.values()) for name, c in threads.items() if name not in named)
        print(f"  opcodes per SEND, {phase}: {', '.join(parts)}, other threads {rest / n:,.0f}")
        for func, count in threads.get("loop", {}).most_common(top):
            print(f"    {count / n:8,.1f}  {func}")


def print_round(label: str, results: list[PhaseResult], verdict: tuple[bool, str]) -> None:
    load = os.getloadavg()
    print(f"{label} (load average {load[0]:.1f} / {load[1]:.1f}):")
    for r in results:
        f = r.figures()
        print(f"  {r.name:<16} {r.sends:>8,} SENDs  {f['ops/s']:>9,.0f} /s   receipt p50 "
              f"{f['p50 ms']:7.2f}  p99 {f['p99 ms']:7.2f}  p99.9 {f['p99.9 ms']:7.2f} ms   "
              f"broker CPU {f['broker CPU us/op']:6.1f} us/op")
        if r.storage:
            print(f"  {'':<16} {r.split()}")
        share = f["slow near the beat"]
        if share == share:   # not NaN
            low, high = BEAT_WINDOW_S
            print(f"  {'':<16} receipts over p99 sent within {low * 1e3:+.0f}..{high * 1e3:+.0f}"
                  f" ms of a whole second (the broker's beat, "
                  f"{100 * (high - low):.0f}% of the time): {100 * share:.0f}%")
    by = {r.name: r.figures()["ops/s"] for r in results}
    if by.get("by key") and by.get("plain delayed") and by.get("raw (no delay)"):
        print(f"  by key / plain delayed {by['by key'] / by['plain delayed']:.2f}x, "
              f"by key / raw {by['by key'] / by['raw (no delay)']:.2f}x")
    if by.get("raw, consumer") and by.get("plain delayed"):
        print(f"  plain delayed / raw with a consumer {by['plain delayed'] / by['raw, consumer']:.2f}x")
    print(f"  check: {'ok' if verdict[0] else 'MISMATCH'}: {verdict[1]}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--keys", type=int, default=20_000)
    ap.add_argument("--ops", type=int, default=100_000)
    ap.add_argument("--producers", type=int, default=4)
    ap.add_argument("--window", type=int, default=200, help="SENDs in flight per producer")
    ap.add_argument("--size", type=int, default=128, help="payload bytes of a reschedule")
    ap.add_argument("--permits", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per phase")
    ap.add_argument("--rate", type=float, default=0.0,
                    help="SENDs a second in all, paced (default: as fast as the window allows)")
    ap.add_argument("--no-fsync", action="store_true",
                    help="the broker does not fsync (journalSyncData=false): the receipt latency "
                         "without the disk's")
    ap.add_argument("--kill9", action="store_true",
                    help="then a fresh broker: the operations killed -9 at half, restart, check")
    ap.add_argument("--phases", default=",".join(sorted(PHASES)),
                    help="the measured phases to run, comma-separated, of "
                         f"{', '.join(sorted(PHASES))} (the seed runs with by-key)")
    ap.add_argument("--profile", type=pathlib.Path, metavar="DIR",
                    help="one extra round, each phase under py-spy; stacks go to DIR")
    ap.add_argument("--opcodes", action="store_true",
                    help="count the broker's Python opcodes per SEND, per thread (traced: the "
                         "run's rates and CPU figures mean nothing)")
    ap.add_argument("--top", type=int, default=0,
                    help="with --opcodes: the N functions of the loop running the most")
    args = ap.parse_args(argv)
    if min(args.keys, args.ops, args.producers, args.window) < 1 or args.keys < args.producers:
        ap.error("keys, ops, producers and window must be >= 1, keys >= producers")
    phases = frozenset(p.strip() for p in args.phases.split(",") if p.strip())
    if not phases or not phases <= PHASES:
        ap.error(f"--phases: a comma-separated choice of {', '.join(sorted(PHASES))}")
    s = Settings(args.keys, args.ops, args.producers, args.window, args.size, args.permits,
                 args.timeout, args.rate, phases)
    print(f"reschedule over the wire: {s.keys:,} keys, {s.ops:,} operations (3/4 reschedule, "
          f"1/4 cancel), {s.producers} producers x {s.window} in flight"
          f"{f', paced at {s.rate:,.0f}/s' if s.rate else ''}, {s.size} B payloads, "
          f"unbatched; {'no fsync' if args.no_fsync else 'fsync before every receipt'}",
          flush=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="horae-resched-wire-"))
    failed = False
    counts = tmp / "opcodes.json"
    env = {"PYTHONPATH": str(opcode_probe.SITE_DIR), opcode_probe.ENV: str(counts)} \
        if args.opcodes else None
    try:
        with start_horae(tmp, fsync=not args.no_fsync, env=env) as broker, \
                asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            enable_replace_by_key(broker)
            rnd = random.Random(7)
            for rnd_no in range(args.rounds):
                recorder = OpcodeRecorder(broker.pid, counts) if args.opcodes else None
                results, verdict = runner.run(run_round(broker, f"{os.getpid()}-{rnd_no}", s, rnd,
                                                        recorder))
                print_round(f"round {rnd_no + 1}" + (" (traced)" if recorder else ""), results,
                            verdict)
                if recorder is not None:
                    print_opcodes(recorder, results, args.top)
                failed |= not verdict[0]
            if args.profile is not None:
                args.profile.mkdir(parents=True, exist_ok=True)
                recorder = PySpyRecorder(broker.pid, args.profile)
                results, verdict = runner.run(run_round(broker, f"{os.getpid()}-profile", s, rnd,
                                                        recorder))
                print_round("profiled round (py-spy attached to each phase)", results,
                            verdict)
                for phase, path in recorder.outputs.items():
                    print(f"\npy-spy, Horae {phase} phase ({path}):")
                    print(summarise_collapsed(path.read_text(errors="replace")))
        if args.kill9:
            ok, details = run_kill9(tmp, s, random.Random(11))
            print(f"kill -9 at half the operations: {'ok' if ok else 'MISMATCH'}: {details}",
                  flush=True)
            failed |= not ok
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
