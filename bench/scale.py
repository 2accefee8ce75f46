"""Scale benchmark: many idle connections, many topics, a long backlog; Horae and its peers.

Theory of operation
-------------------
Each peer of ``--peers`` (default ``horae,pulsar-lite,pulsar``; :mod:`bench.brokers`) runs in
turn, alone, as a child process: Horae with fsync on, pulsar-lite 0.2.0, Apache Pulsar 4.0
standalone (journal fsynced, deduplication on). The generator speaks the wire through Horae's
own codec (:mod:`bench.wire_clients`). The soft RLIMIT_NOFILE of this process is raised to its
hard limit first, and the brokers inherit it. Three phases, each bounded by ``--timeout``
seconds:

1. idle connections: ``--connections`` connections complete CONNECT (``--concurrency`` at a
   time); the broker's RSS (``/proc/PID/status`` VmRSS) is read before and after, then its
   CPU over ``--idle-seconds`` of nothing happening (keep-alive only);
2. topics: ``--topics`` topics get one producer each (a LOOKUP, then PRODUCER, as a client
   does), spread over those connections; after ``--idle-warmup`` seconds, RSS and idle CPU
   again (Horae writes its metric snapshots every ``--export-interval`` seconds meanwhile, by
   default its own default, 60: a window of 60 s holds one), then RSS after that window and
   the wall time of the metric snapshots Horae started in it (``export_wall_s_mean`` /
   ``_max``: from a file's ``epoch_ms`` to its mtime). Then every connection is closed;
3. backlog: a Shared subscription is created, ``--backlog`` messages of ``--size`` bytes are
   published in entries of ``--batch`` messages (one connection, ``--in-flight`` SENDs), then
   one consumer drains them (FLOW 1000 refilled by half, acks per 1,000 messages) while RSS
   is sampled every 0.5 s: read throughput in messages/s and entries/s, RSS before, max and
   after (a flat memory line is the target).

With ``--metrics-seconds S`` (> 0) phase 2 is followed, topics still open, by a metrics phase:
the broker writes a metric snapshot every ``--export-interval`` seconds
(``metricsExportIntervalSeconds``) while one connection PINGs the broker every 10 ms for S
seconds (the PONG round trip is how long the event loop was unavailable: its maximum is the
longest stall), and ``/metrics`` is scraped once (its wall time, its size). Then the same PING
probe runs for S seconds with no scrape (the exports alone). Peers without a web port
(pulsar-lite) skip it.

After the last peer a table gives every figure per peer and Horae's ratio to each (above 1 =
Horae ahead; :mod:`bench.peer_table`). RSS is the broker process's (for Pulsar, the JVM's).

Loopback only, free ports, temporary data directory removed on exit. Never run by the tests.

Usage::

    .venv/bin/python bench/scale.py [--connections 10000] [--topics 10000]
        [--idle-seconds 10] [--idle-warmup 0] [--backlog 10000000] [--batch 100] [--size 100]
        [--json FILE] [--profile DIR]
        [--metrics-seconds 0] [--export-interval 60] [--peers horae,pulsar-lite,pulsar]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import pathlib
import resource
import shutil
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import uvloop

from bench.brokers import (
    DEFAULT_PEERS,
    STARTERS,
    Broker,
    cpu_seconds,
    parse_peers,
    rss_mib,
    start_horae,
)
from bench.peer_table import format_table
from bench.profiling import PySpyRecorder, summarise_collapsed
from bench.wire_clients import (
    Drainer,
    Publisher,
    RawConnection,
    connect,
    frozen_heap,
    lookup,
    subscribe,
)
from bench.wire_load import LoadSettings, ProducerFrames, build_producer_frames
from protocol import commands as C
from protocol import pulsar_pb as pb

T = pb.BaseCommand


def raise_nofile() -> int:
    """Raise the soft descriptor limit to the hard one (children inherit it); returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


async def idle_cpu_percent(broker: Broker, seconds: float) -> float:
    cpu0, t0 = cpu_seconds(broker.pid), time.perf_counter()
    await asyncio.sleep(seconds)  # measuring idleness: nothing to wait on but the clock
    return 100.0 * (cpu_seconds(broker.pid) - cpu0) / (time.perf_counter() - t0)


def export_walls(data: pathlib.Path, start_ms: float, end_ms: float) -> dict[str, float]:
    """Wall time of the metric snapshots Horae started in [start_ms, end_ms]: from the
    ``epoch_ms`` in a file's name (taken as the export starts) to the file's mtime (written,
    before the fsync and rename). Nothing for a peer that writes no snapshots."""
    walls = []
    for path in (data / "metrics").glob("date=*/metrics-*.jsonl.gz"):
        ts_ms = int(path.name.rsplit("-", 1)[1].split(".", 1)[0])
        if start_ms <= ts_ms <= end_ms:
            walls.append(path.stat().st_mtime - ts_ms / 1000)
    if not walls:
        return {}
    return {"exports_in_idle_window": float(len(walls)),
            "export_wall_s_mean": sum(walls) / len(walls), "export_wall_s_max": max(walls)}


async def open_connections(broker: Broker, count: int, concurrency: int,
                           timeout_s: float) -> list[RawConnection]:
    gate = asyncio.Semaphore(concurrency)

    async def one() -> RawConnection:
        async with gate:
            return await connect(broker)

    return list(await asyncio.wait_for(asyncio.gather(*(one() for _ in range(count))),
                                       timeout_s))


async def open_producers(conns: list[RawConnection], topics: int, concurrency: int,
                         timeout_s: float) -> None:
    gate = asyncio.Semaphore(concurrency)
    # One request at a time per connection: replies are matched by order on its queue.
    locks = [asyncio.Lock() for _ in conns]

    async def one(i: int) -> None:
        conn = conns[i % len(conns)]
        topic = f"persistent://public/default/scale-{i}"
        async with gate, locks[i % len(conns)]:
            await lookup(conn, topic, 2 * i + 1)
            await conn.request(C.encode_producer(topic, i + 1, 2 * i + 2, f"scale-{i}"),
                               T.PRODUCER_SUCCESS)

    await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(topics))), timeout_s)


async def ping_stalls(conn: RawConnection, seconds: float) -> list[float]:
    """PING every 10 ms for *seconds*: the PONG round trips (s), sorted."""
    rtts: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        await conn.request(C.encode_ping(), T.PONG)
        rtts.append(time.perf_counter() - t0)
        await asyncio.sleep(0.01)  # the probe's period, not a wait for an event
    return sorted(rtts)


def _scrape(url: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=600) as response:  # loopback only
        size = len(response.read())
    return time.perf_counter() - t0, size


async def metrics_phase(broker: Broker, args: argparse.Namespace, out: dict[str, Any]) -> None:
    loop = asyncio.get_running_loop()
    conn = await connect(broker)
    url = f"http://{broker.host}:{broker.web_port}/metrics"
    cpu0 = cpu_seconds(broker.pid)
    probe = loop.create_task(ping_stalls(conn, args.metrics_seconds))
    scrape_s, size = await loop.run_in_executor(None, _scrape, url)
    rtts = await probe
    out["metrics_scrape_s"] = scrape_s
    out["metrics_scrape_mib"] = size / 2**20
    out["ping_max_ms_with_scrape"] = rtts[-1] * 1000
    cpu1 = cpu_seconds(broker.pid)
    rtts = await ping_stalls(conn, args.metrics_seconds)
    out["ping_max_ms_exports_only"] = rtts[-1] * 1000
    out["ping_p99_ms_exports_only"] = rtts[int(len(rtts) * 0.99)] * 1000
    out["broker_cpu_pct_exports_only"] = (100.0 * (cpu_seconds(broker.pid) - cpu1)
                                          / args.metrics_seconds)
    out["broker_cpu_s_scrape_phase"] = cpu1 - cpu0
    conn.close()


async def backlog_phase(broker: Broker, args: argparse.Namespace, out: dict[str, Any]) -> None:
    topic = "persistent://public/default/scale-backlog"
    (await subscribe(broker, topic)).close()
    settings = LoadSettings(connections=1, in_flight=args.in_flight, size=args.size,
                            messages=args.backlog, batch=args.batch)
    frames = build_producer_frames("scale-backlog", args.backlog, settings)
    with frozen_heap():
        await _publish_and_drain(broker, args, out, topic, frames)


async def _publish_and_drain(broker: Broker, args: argparse.Namespace, out: dict[str, Any],
                             topic: str, frames: ProducerFrames) -> None:
    loop = asyncio.get_running_loop()
    conn = await connect(broker)
    await lookup(conn, topic, 1)
    await conn.request(C.encode_producer(topic, 1, 2, frames.name), T.PRODUCER_SUCCESS)
    done: asyncio.Future[None] = loop.create_future()
    pub = Publisher(conn, frames.frames, frames.first_sequence_ids, args.in_flight, done)
    with profiled(broker, args, "backlog-publish"):
        t0 = time.perf_counter()
        pub.start()
        await asyncio.wait_for(done, args.timeout)
        out["backlog_publish_msgs_per_s"] = args.backlog / (time.perf_counter() - t0)
    conn.on_lost = None
    conn.close()
    out["rss_before_drain_mib"] = rss_mib(broker.pid)

    consumer = await subscribe(broker, topic)
    drained: asyncio.Future[None] = loop.create_future()
    drainer = Drainer(consumer, batched=args.batch > 0, permits=1000, ack_batch=1000,
                      expected=args.backlog, done=drained)
    samples: list[float] = []

    async def sample() -> None:
        while not drained.done():
            samples.append(rss_mib(broker.pid))
            await asyncio.sleep(0.5)  # a sampling period, not a wait for an event

    sampler = loop.create_task(sample())
    with profiled(broker, args, "drain"):
        cpu0, t0 = cpu_seconds(broker.pid), time.perf_counter()
        drainer.start()
        try:
            await asyncio.wait_for(drained, args.timeout)
            # before the sampler's last sleep ends: that wait is no part of the drain
            elapsed = time.perf_counter() - t0
            cpu = cpu_seconds(broker.pid) - cpu0
        finally:
            drainer.stop()
            await sampler
    drainer.flush_acks()
    out["drain_msgs_per_s"] = drainer.messages / elapsed
    out["drain_entries_per_s"] = len(drainer.seen) / elapsed
    out["drain_broker_cpu_s_per_M_msgs"] = cpu / drainer.messages * 1e6
    out["drain_rss_max_mib"] = max(samples) if samples else float("nan")
    out["drain_rss_samples_mib"] = [round(s, 1) for s in samples[:: max(1, len(samples) // 20)]]
    out["rss_after_drain_mib"] = rss_mib(broker.pid)
    consumer.on_lost = None
    consumer.close()


@contextlib.contextmanager
def profiled(broker: Broker, args: argparse.Namespace, phase: str) -> Iterator[None]:
    """With ``--profile``, py-spy records Horae over the block and its summary is printed."""
    recorder = (PySpyRecorder(broker.pid, args.profile)
                if args.profile and broker.name.startswith("horae") else None)
    if recorder is None:
        yield
        return
    args.profile.mkdir(parents=True, exist_ok=True)
    recorder(phase, "start")
    try:
        yield
    finally:
        recorder(phase, "stop")
        path = recorder.outputs[phase]
        print(f"py-spy, Horae over the {phase} phase ({path}):")
        print(summarise_collapsed(path.read_text(errors="replace")) if path.exists()
              else "no samples written")


async def idle_window(broker: Broker, args: argparse.Namespace, phase: str) -> float:
    """Broker CPU % over ``--idle-seconds`` of nothing happening (py-spy'd with
    ``--profile``)."""
    with profiled(broker, args, phase):
        return await idle_cpu_percent(broker, args.idle_seconds)


async def run(broker: Broker, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"rss_start_mib": rss_mib(broker.pid)}
    t0 = time.perf_counter()
    conns = await open_connections(broker, args.connections, args.concurrency, args.timeout)
    out["connect_s"] = time.perf_counter() - t0
    out["rss_idle_connections_mib"] = rss_mib(broker.pid)
    out["idle_cpu_pct_connections"] = await idle_window(broker, args, "idle-connections")
    if args.topics:
        t0 = time.perf_counter()
        await open_producers(conns, args.topics, args.concurrency, args.timeout)
        out["topics_s"] = time.perf_counter() - t0
        out["rss_topics_mib"] = rss_mib(broker.pid)
        if args.idle_warmup > 0:
            await asyncio.sleep(args.idle_warmup)  # waiting for time to pass, nothing else
        window_start_ms = time.time() * 1000
        out["idle_cpu_pct_topics"] = await idle_window(broker, args, "idle-topics")
        out["rss_after_idle_topics_mib"] = rss_mib(broker.pid)
        out.update(export_walls(broker.data, window_start_ms, time.time() * 1000))
        if args.metrics_seconds > 0 and broker.web_port is not None:
            await metrics_phase(broker, args, out)
    for conn in conns:
        conn.close()
    if args.backlog:
        await backlog_phase(broker, args, out)
    return out


LISTS = ("drain_rss_samples_mib",)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--topics", type=int, default=10_000, help="topics, one producer each")
    parser.add_argument("--concurrency", type=int, default=200, help="handshakes in flight")
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--idle-warmup", type=float, default=0.0,
                        help="seconds to wait, topics open, before their idle window (lets "
                             "the first metric export that meets every topic pass)")
    parser.add_argument("--backlog", type=int, default=10_000_000, help="messages")
    parser.add_argument("--batch", type=int, default=100, help="messages per entry (0: none)")
    parser.add_argument("--size", type=int, default=100, help="payload bytes per message")
    parser.add_argument("--in-flight", type=int, default=100, help="SENDs in flight (backlog)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per phase")
    parser.add_argument("--json", type=pathlib.Path, metavar="FILE")
    parser.add_argument("--metrics-seconds", type=float, default=0.0,
                        help="metrics phase: PING probe seconds (0: no metrics phase)")
    parser.add_argument("--export-interval", type=int, default=60,
                        help="metricsExportIntervalSeconds of the Horae broker (default: the "
                             "broker's own, 60)")
    parser.add_argument("--profile", type=pathlib.Path, metavar="DIR",
                        help="py-spy Horae over the idle windows, the backlog publish and "
                             "the drain into DIR")
    parser.add_argument("--peers", default=",".join(DEFAULT_PEERS),
                        help="comma-separated peers, run one after another: horae, pulsar-lite, "
                             "pulsar, horae-nofsync, pulsar-nosync")
    args = parser.parse_args()
    try:
        peers = parse_peers(args.peers)
    except ValueError as exc:
        parser.error(str(exc))
    nofile = raise_nofile()
    if nofile < args.connections + 1000:
        parser.error(f"RLIMIT_NOFILE is {nofile}: too low for {args.connections} connections")
    config = f"metricsExportIntervalSeconds = {args.export_interval}\n"
    results: dict[str, dict[str, Any]] = {}
    for name in peers:
        tmp = pathlib.Path(tempfile.mkdtemp(prefix="horae-scale-"))
        starter = STARTERS[name]
        if name == "horae":
            def starter(t: pathlib.Path) -> Any:
                return start_horae(t, config=config)
        try:
            with starter(tmp) as broker, asyncio.Runner(
                    loop_factory=uvloop.new_event_loop) as runner:
                print(f"{name} ...", flush=True)
                results[name] = out = runner.run(run(broker, args))
                out["version"] = broker.version
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        for key, value in out.items():
            if not isinstance(value, str):
                print(f"  {key:36} {value if isinstance(value, list) else f'{value:,.2f}'}",
                      flush=True)
    keys = [k for k in results[peers[0]] if k not in LISTS and k != "version"]
    figures = {k: {n: [results[n][k]] for n in peers if k in results[n]} for k in keys}
    print()
    print(f"scale: {args.connections:,} connections, {args.topics:,} topics, backlog "
          f"{args.backlog:,} x {args.size} B in entries of {args.batch}; Horae and Pulsar fsync "
          "before every receipt")
    print(format_table(figures, peers, {k for k in keys if not k.endswith("_per_s")}))
    if args.json:
        args.json.write_text(json.dumps(
            {"settings": vars(args) | {"json": str(args.json), "profile": str(args.profile),
                                       "nofile": nofile}, "results": results}, indent=2))


if __name__ == "__main__":
    main()
