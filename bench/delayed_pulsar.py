"""The delayed-delivery index workloads of ``bench/delayed.py --scale`` on Apache Pulsar 4.0.

Theory of operation
-------------------
One Pulsar 4.0 standalone JVM per (tracker, workload, size) (:mod:`bench.pulsar_peer`, fresh
data directory, heap ``--pulsar-heap``), so each RSS figure is that workload's alone. The
messages are published over the raw wire (:mod:`bench.wire_clients`: ``CONNECTIONS``
producers, ``IN_FLIGHT`` SENDs outstanding each, unbatched as clients send delayed messages),
each SEND's ``MessageMetadata`` carrying its own ``deliver_at_time``: the workload's deliver
time (:func:`bench.delayed.scale_workload`, simulated publish at 100,000 msg/s, exact ms) moved
onto the wall clock by a constant ``lead``, so no message falls due before the figures are read
and the tracker holds all it read, as Horae's side does (the spread and order of the deliver
times, which is what the index's size depends on, are the workload's). Messages go round-robin
over the producers (message *i* on producer ``i % CONNECTIONS``) in chunks of ``CHUNK``
frames built between publish phases, so memory stays bounded and the publish rate counts only
the time on the wire.

A Shared subscription is created before the first SEND and its consumer stays connected with
``PERMITS`` permits for the whole run (a dispatcher reads only while a consumer has permits;
none are spent, since nothing falls due; a message delivered anyway is counted, acked and
its permit returned, and reported as ``early``). Then:

- ``indexed``: the subscription's ``msgDelayed`` (topic stats), polled until it reaches the
  count or stops moving;
- the index: ``pulsar_delayed_message_index_*`` of ``/metrics`` after one refresh
  (``statsUpdateFrequencyInSecs``, set to :data:`STATS_EVERY_S`): ``pulsar_delayed_message_index_size_bytes`` is the
  tracker's own estimate, the bucket tracker adds its bucket and snapshot figures;
- the JVM: RSS growth from just before the first SEND to after the metrics refresh, and the
  growth of its live heap over the same span (a full collection, ``jcmd PID GC.run``, then
  ``GC.heap_info``'s used, before and after), with ``-Xmx``, so one can see whether the
  heap bounds anything;
- the live heap the subscription's delete frees (its dispatcher and tracker go with it): the
  on-heap part of the index (4.0's in-memory tracker keeps its whole index off the heap, in
  pooled direct buffers: a priority queue of (deliver_at, ledger, entry) triples, 24 B per
  message, whose capacity is the tracker's estimate; freed pooled buffers stay in the pool,
  so no JVM figure shows them go);
- the broker's CPU seconds over the publish phases per message (``/proc/PID/stat``), which
  the machine's load moves less than the publish rate.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import uvloop

from bench.processes import Broker, cpu_seconds, rss_mib
from bench.wire_clients import (
    SUBSCRIPTION,
    Publisher,
    RawConnection,
    open_producer,
    subscribe,
)
from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.frames import Frame
from protocol.metadata import encode_entry

CONNECTIONS = 4
IN_FLIGHT = 1000
CHUNK = 200_000
PERMITS = 1000
LEAD_S = 1800.0
"""How far past the start the workload's first deliver time is put on the wall clock."""
READ_IN_TIMEOUT_S = 1800.0
STABLE_POLLS = 3
POLL_S = 5.0
STATS_EVERY_S = 10
"""``statsUpdateFrequencyInSecs`` of the runs (Pulsar's default is 60): how often it refreshes
the topic figures its ``/metrics`` serve."""
METRICS_REFRESH_S = STATS_EVERY_S + 3.0

TRACKERS = {
    "in-memory": "org.apache.pulsar.broker.delayed.InMemoryDelayedDeliveryTrackerFactory",
    "bucket": "org.apache.pulsar.broker.delayed.BucketDelayedDeliveryTrackerFactory",
}
T = pb.BaseCommand
_PONG = C.encode_pong()


@dataclass
class PulsarRun:
    """One workload on one broker: what :func:`measure` reads."""

    kind: str
    n: int
    published: int = 0
    publish_s: float = 0.0
    build_s: float = 0.0
    broker_cpu_publish_s: float = 0.0
    indexed: int = 0
    read_in_s: float = 0.0
    early: int = 0
    rss_growth_bytes: float = 0.0
    heap_live_bytes: float = 0.0
    """Growth of the heap's live bytes (after a full collection) over the run."""
    heap_freed_bytes: float = 0.0
    """Live heap freed by deleting the subscription afterwards (its tracker with it)."""
    heap_max_bytes: float = 0.0
    index: dict[str, float] = field(default_factory=dict)
    """``pulsar_delayed_message_index_*`` series of the topic (summed over labels)."""

    @property
    def index_bytes(self) -> float:
        return self.index.get("pulsar_delayed_message_index_size_bytes", 0.0)


# --------------------------------------------------------------------------- frames


def build_chunk(items: list[tuple[int, int]], connections: int, base_ms: int,
                publish_ms: int) -> list[tuple[list[bytes], list[int]]]:
    """SEND frames of ``items`` = [(message number, deliver_at_ms)], message *i* on producer
    ``i % connections`` with sequence id ``i // connections``: per producer (frames, seqs)."""
    out: list[tuple[list[bytes], list[int]]] = [([], []) for _ in range(connections)]
    names = [f"dl-{c}" for c in range(connections)]
    send, entry, meta = C.encode_send, encode_entry, pb.MessageMetadata
    for i, at in items:
        c = i % connections
        seq = i // connections
        md = meta(producer_name=names[c], sequence_id=seq, publish_time=publish_ms,
                  deliver_at_time=base_ms + at)
        frames, seqs = out[c]
        frames.append(send(1, seq, entry(md, b"x")))
        seqs.append(seq)
    return out


async def publish_delayed(broker: Broker, topic: str, deliver_at: Iterator[int], n: int,
                          run: PulsarRun, *, base_ms: int, connections: int = CONNECTIONS,
                          in_flight: int = IN_FLIGHT, chunk: int = CHUNK,
                          timeout_s: float = 600.0) -> None:
    """Publish ``n`` one-byte messages whose deliver times (relative, ms) come from
    ``deliver_at``, ``deliver_at_time = base_ms + that``; fills ``run``'s publish figures."""
    loop = asyncio.get_running_loop()
    conns = [await open_producer(broker, topic, f"dl-{c}") for c in range(connections)]
    numbered = enumerate(itertools.islice(deliver_at, n))
    try:
        while batch := list(itertools.islice(numbered, chunk)):
            t0 = time.perf_counter()
            parts = build_chunk(batch, connections, base_ms, int(time.time() * 1000))
            run.build_s += time.perf_counter() - t0
            dones = [loop.create_future() for _ in conns]
            pubs = [Publisher(conn, frames, seqs, in_flight, done)
                    for conn, (frames, seqs), done in zip(conns, parts, dones, strict=True)]
            cpu0, t0 = cpu_seconds(broker.pid), time.perf_counter()
            for pub in pubs:
                pub.start()
            await asyncio.wait_for(asyncio.gather(*dones), timeout_s)
            run.publish_s += time.perf_counter() - t0
            run.broker_cpu_publish_s += cpu_seconds(broker.pid) - cpu0
            run.published += sum(pub.acked for pub in pubs)
    finally:
        for conn in conns:
            conn.on_lost = None
            conn.close()


class Holder:
    """The subscription's Shared consumer: keeps ``permits`` outstanding so the dispatcher
    reads; counts (and acks, returning the permit) any message it is given."""

    def __init__(self, conn: RawConnection, permits: int = PERMITS) -> None:
        self.conn = conn
        self.delivered = 0
        self.lost: str | None = None
        conn.handler = self.frames_received
        conn.on_lost = self._lost
        conn.write(C.encode_flow(1, permits))

    def _lost(self, why: str) -> None:
        self.lost = why

    def frames_received(self, frames: list[Frame]) -> None:
        acks: list[tuple[int, int]] = []
        for frame in frames:
            cmd = frame.command
            if cmd.type == T.MESSAGE:
                mid = cmd.message.message_id
                acks.append((mid.ledgerId, mid.entryId))
            elif cmd.type == T.PING:
                self.conn.write(_PONG)
        if acks:
            self.delivered += len(acks)
            self.conn.write(C.encode_ack(1, acks) + C.encode_flow(1, len(acks)))

    def close(self) -> None:
        self.conn.on_lost = None
        self.conn.close()


# --------------------------------------------------------------------------- admin reads


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as resp:  # loopback only
        body: bytes = resp.read()
    return body


def msg_delayed(broker: Broker, topic: str) -> int:
    path = topic.replace("persistent://", "persistent/")
    stats = json.loads(_get(f"http://{broker.host}:{broker.web_port}/admin/v2/{path}/stats"))
    return int(stats["subscriptions"][SUBSCRIPTION]["msgDelayed"])


_SERIES = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def metric_series(text: str, prefix: str, topic: str | None = None) -> dict[str, float]:
    """Sums of the Prometheus series named ``prefix*`` (of ``topic``'s lines if given; the
    per-subscription lines that repeat a topic's figure are left out)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        m = _SERIES.match(line)
        labels = m.group(2) or "" if m is not None else ""
        if m is None or (topic is not None and f'topic="{topic}"' not in labels):
            continue
        if 'subscription="' in labels:   # the topic's line already counts its subscriptions
            continue
        with contextlib.suppress(ValueError):
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
    return out


def metrics_text(broker: Broker) -> str:
    return _get(f"http://{broker.host}:{broker.web_port}/metrics/").decode()


async def wait_read_in(broker: Broker, topic: str, n: int, *, poll_s: float = POLL_S,
                       stable_polls: int = STABLE_POLLS,
                       timeout_s: float = READ_IN_TIMEOUT_S) -> int:
    """``msgDelayed`` once it reaches ``n`` or has not moved for ``stable_polls`` polls."""
    held, same, deadline = -1, 0, time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        now_held = await asyncio.to_thread(msg_delayed, broker, topic)
        if now_held >= n:
            return now_held
        same = same + 1 if now_held == held else 0
        if same >= stable_polls:
            return now_held
        held = now_held
        await asyncio.sleep(poll_s)  # polling stats: nothing to wait on but their answers
    return held


def live_heap(broker: Broker) -> tuple[float, float]:
    """(heap used after a full collection, ``-Xmx``) of a JVM broker, bytes (``jcmd``)."""
    def jcmd(*what: str) -> str:
        return subprocess.run(["jcmd", str(broker.pid), *what], check=True, capture_output=True,
                              text=True, timeout=300).stdout

    jcmd("GC.run")
    used = re.search(r"heap\s+total \d+K, used (\d+)K", jcmd("GC.heap_info"))
    max_ = re.search(r"MaxHeapSize=(\d+)", jcmd("VM.flags"))
    return (float(used.group(1)) * 1024 if used else float("nan"),
            float(max_.group(1)) if max_ else float("nan"))


# --------------------------------------------------------------------------- one run


async def measure(broker: Broker, kind: str, n: int, deliver_at: Iterator[int], *,
                  lead_s: float = LEAD_S, refresh_s: float = METRICS_REFRESH_S,
                  jvm: bool = True) -> PulsarRun:
    """Publish ``n`` messages of workload ``kind`` to a fresh topic, let the dispatcher read
    them into its tracker, then read the figures (module docstring)."""
    topic = f"persistent://public/default/delayed-{kind}-{n}"
    run = PulsarRun(kind, n)
    holder = Holder(await subscribe(broker, topic))
    try:
        await asyncio.sleep(2)  # settle: a JVM's RSS has no event to wait on
        heap0 = (await asyncio.to_thread(live_heap, broker))[0] if jvm else 0.0
        rss0 = rss_mib(broker.pid) * 1048576
        base_ms = int(time.time() * 1000 + lead_s * 1000)
        await publish_delayed(broker, topic, deliver_at, n, run, base_ms=base_ms)
        t0 = time.perf_counter()
        run.indexed = await wait_read_in(broker, topic, n)
        run.read_in_s = time.perf_counter() - t0
        # Pulsar refreshes its Prometheus topic figures every statsUpdateFrequencyInSecs:
        # read the index after a refresh.
        await asyncio.sleep(refresh_s)
        text = await asyncio.to_thread(metrics_text, broker)
        run.index = metric_series(text, "pulsar_delayed_message_index", topic)
        run.rss_growth_bytes = rss_mib(broker.pid) * 1048576 - rss0
        if jvm:
            heap1, run.heap_max_bytes = await asyncio.to_thread(live_heap, broker)
            run.heap_live_bytes = heap1 - heap0
        run.early = holder.delivered
        if holder.lost is not None:
            raise RuntimeError(f"consumer of {topic}: {holder.lost}")
    finally:
        holder.close()
    if jvm:
        # The subscription's delete closes its dispatcher and tracker: the live heap it frees
        # is the index as the JVM holds it (the tracker's estimate is its bitmaps' own count)
        try:
            await asyncio.to_thread(delete_subscription, broker, topic)
        except OSError as exc:   # the figures above stand without this one
            print(f"    deleting the subscription failed: {exc}", flush=True)
            run.heap_freed_bytes = float("nan")
        else:
            heap2, _ = await asyncio.to_thread(live_heap, broker)
            run.heap_freed_bytes = heap1 - heap2
    return run


def delete_subscription(broker: Broker, topic: str) -> None:
    path = topic.replace("persistent://", "persistent/")
    url = (f"http://{broker.host}:{broker.web_port}/admin/v2/{path}/subscription/"
           f"{SUBSCRIPTION}?force=true")
    request = urllib.request.Request(url, method="DELETE")
    with urllib.request.urlopen(request, timeout=300) as resp:  # loopback only
        resp.read()


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


HEADER = (f"{'tracker':10}{'workload':9}{'messages':>12}{'indexed':>12}{'index B/msg':>12}"
          f"{'B/indexed':>10}{'RSS B/msg':>10}{'heap B/msg':>11}{'publish/s':>10}"
          f"{'cpu us/msg':>11}{'read-in s':>10}{'early':>6}  load")


def row(tracker: str, r: PulsarRun, load: str) -> str:
    return (f"{tracker:10}{r.kind:9}{r.n:>12,}{r.indexed:>12,}{r.index_bytes / r.n:>12.3f}"
            f"{r.index_bytes / max(r.indexed, 1):>10.3f}{r.rss_growth_bytes / r.n:>10.2f}"
            f"{r.heap_live_bytes / r.n:>11.2f}"
            f"{r.published / r.publish_s if r.publish_s else 0:>10,.0f}"
            f"{r.broker_cpu_publish_s * 1e6 / max(r.published, 1):>11.1f}"
            f"{r.read_in_s:>10.0f}{r.early:>6}  {load}")


def run_pulsar(sizes: list[int], kinds: tuple[str, ...], trackers: list[str],
               deliver_times: Callable[[str, int], Iterator[int]], *, heap: str,
               extra: Mapping[str, str] | None = None, lead_s: float = LEAD_S) -> None:
    """The ``--scale`` workloads on Pulsar 4.0 standalone, one fresh JVM per figure;
    ``deliver_times(kind, n)`` gives each message's deliver time relative to the first
    publish, ms (:func:`bench.delayed.scale_deliver_times`)."""
    from bench.pulsar_peer import start_pulsar_standalone

    print(f"Apache Pulsar 4.0 standalone, -Xmx{heap}, raw-wire publish ({CONNECTIONS} producers x "
          f"{IN_FLIGHT} in flight, unbatched, 1-byte payloads), deliver times lead {lead_s:.0f} s"
          + (f", {dict(extra)}" if extra else ""))
    print(HEADER, flush=True)
    for tracker in trackers:
        for n in sizes:
            for kind in kinds:
                conf = {"delayedDeliveryTrackerFactoryClassName": TRACKERS[tracker],
                        "statsUpdateFrequencyInSecs": str(STATS_EVERY_S), **(extra or {})}
                with tempfile.TemporaryDirectory(prefix="horae-bench-pulsar-") as tmp, \
                        start_pulsar_standalone(Path(tmp), sync=False, extra=conf,
                                                heap=heap) as broker:
                    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                        r = runner.run(measure(broker, kind, n, deliver_times(kind, n),
                                               lead_s=lead_s))
                    extra_series = {k.removeprefix("pulsar_delayed_message_index_"): v
                                    for k, v in r.index.items()
                                    if k != "pulsar_delayed_message_index_size_bytes"}
                    oom = "OutOfMemoryError" in broker.log.read_text(errors="replace")
                print(row(tracker, r, load_average()), flush=True)
                print(f"    heap live +{r.heap_live_bytes / 1048576:,.0f} MiB of "
                      f"{r.heap_max_bytes / 1048576:,.0f}, "
                      f"{r.heap_freed_bytes / r.n:.2f} B/msg of live heap freed by deleting "
                      f"the subscription"
                      f"; publish {r.publish_s:.0f} s "
                      f"(+{r.build_s:.0f} s building frames); {extra_series or ''}"
                      f"{'; OutOfMemoryError in its log' if oom else ''}", flush=True)
