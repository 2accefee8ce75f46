"""Wire-load benchmark: what a broker itself can take, measured with pre-built frames.

Theory of operation
-------------------
No client library: the generator speaks Pulsar's binary protocol through Horae's own sans-IO
codec (``protocol/``) on raw asyncio sockets, so the client costs almost nothing per message and
the broker is what is measured. Brokers run as child processes (:mod:`bench.brokers`): Horae as
``python -m broker serve`` (fsync before every receipt, its default), pulsar-lite 0.2.0 and
Apache Pulsar 4.0 standalone (bookie journal fsynced before each receipt, deduplication on; see
:mod:`bench.pulsar_peer`), each on free loopback ports with a temporary data directory, started
in the same run and measured round by round, alternately, after one uncounted warm-up round each (``--warmup`` messages:
the JVM compiles its hot paths then). ``--peers`` picks them (default
``horae,pulsar-lite,pulsar``; ``horae-nofsync`` and ``pulsar-nosync`` are the relaxed runs).

``--relaxed`` adds the comparison at equal durability: ``horae-nofsync`` (``journalSyncData =
false``: Horae makes no fsync or fdatasync) runs beside the others, and pulsar-lite (which never
syncs) with it. The default table stays Horae with an fsync before every receipt; the relaxed run
gets rows and ratios of its own (:func:`bench.peer_table.relaxed_table`: ``horae-nofsync``
against pulsar-lite and, if it ran, ``pulsar-nosync``), under its own heading.

One round against one broker, on a fresh topic:

1. a Shared subscription ``wl`` is created (initial position Earliest), then left;
2. publish: ``--connections`` connections each open a producer and keep ``--in-flight`` SENDs
   outstanding, writing the next frames (pre-built before the clock starts) as receipts come
   back, one ``write`` per socket read. Receipts must arrive in FIFO order; a receipt's latency
   is from the write of its SEND to the read that returned it. Publish msg/s is messages
   confirmed / (first write .. last receipt);
3. consume: one connection subscribes to ``wl`` (Shared), sends FLOW of ``--permits`` (1000,
   the clients' receiver queue), refills half of them at a time, and acks by message id, one
   ACK per ``--ack-batch`` messages received; consume msg/s is messages received / (FLOW ..
   last message). A consumer that gets nothing for 0.5 s re-sends FLOW and the round reports
   it ("stall FLOWs"): pulsar-lite 0.2.0 loses permits with windows of a few thousand.

``--batch B`` publishes entries of B messages in the real Pulsar batch format (outer
``num_messages_in_batch``, ``SingleMessageMetadata`` per message); FLOW permits and all counts are
in messages, the in-flight window in SENDs (entries). Broker CPU is read from
``/proc/PID/stat`` (all threads) around each phase and given per million messages; the
generator's own CPU is printed too, to show it is not the bottleneck. The broker's RSS is read
after each round (``/proc/PID/status``; for Pulsar, the JVM's), with its peak so far
(``VmHWM``); ``--rest S`` reads it once more S seconds after the last round, what each broker
keeps at rest after the work. For Horae the round line gives its event loop thread's CPU per
million messages published too (the main thread's ``/proc/PID/task/PID/stat``: the one thread
whose share of a core bounds the rate), and
its storage writer's work over the publish phase, from its ``/metrics`` read just before
and after it (outside the timing): group commits and fdatasyncs per second, entries per group
commit, and the share of the phase's wall time spent inside fdatasync (low: the disk is not
what bounds the rate).

Everything is bounded: a phase that does not finish within ``--timeout`` seconds fails the run;
child processes are terminated on exit. ``--profile DIR`` adds one extra Horae round under py-spy
(``--nonblocking``, raw collapsed stacks per phase) and prints its top frames, self and total.

Usage::

    .venv/bin/python bench/wire_load.py [--connections 4] [--in-flight 1000] [--size 1024]
        [--messages 100000] [--batch B] [--rounds 3] [--peers horae,pulsar-lite,pulsar]
        [--relaxed] [--profile DIR] [--json FILE]

Never part of the test run (``tests/bench/test_wire_load_smoke.py`` only checks the counts).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import shutil
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import uvloop

from bench.brokers import DEFAULT_PEERS, Broker, cpu_seconds, parse_peers, rss_mib, started
from bench.peer_table import format_table, relaxed_table, with_relaxed, without_relaxed_horae
from bench.profiling import PySpyRecorder, summarise_collapsed
from bench.wire_clients import Drainer, Publisher, frozen_heap, open_producer, subscribe
from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.metadata import encode_batch_payload, encode_entry


@dataclass(frozen=True)
class LoadSettings:
    connections: int = 4
    in_flight: int = 1000
    """SENDs (entries) outstanding per connection."""
    size: int = 1024
    """Payload bytes per message."""
    messages: int = 100_000
    batch: int = 0
    """Messages per entry in the batch format; 0 = unbatched."""
    permits: int = 1000
    """FLOW permits, refilled by half as the official clients do (receiverQueueSize 1000).
    Larger windows stall pulsar-lite 0.2.0 (it loses FLOW permits; see wire_clients.Drainer)."""
    ack_batch: int = 1000
    """Messages received before one ACK (by entry id) goes out; counted in messages because
    the broker's maxUnackedMessagesPerConsumer (50,000) is."""
    timeout_s: float = 300.0


@dataclass
class LoadResult:
    broker: str
    messages: int
    entries: int
    published: int = 0
    """Messages confirmed by SEND_RECEIPT."""
    receipts: int = 0
    consumed: int = 0
    """Distinct messages received by the consumer."""
    consumed_entries: int = 0
    duplicates: int = 0
    bad_checksums: int = 0
    stall_flows: int = 0
    """FLOWs the consumer re-sent after a 0.5 s stall (each costs the consume figure 0.5 s)."""
    publish_s: float = 0.0
    consume_s: float = 0.0
    latency_p50_ms: float = 0.0
    latency_p99_ms: float = 0.0
    broker_cpu_publish_s: float = 0.0
    broker_cpu_consume_s: float = 0.0
    loop_cpu_publish_s: float = 0.0
    """Horae only: its event loop thread's CPU over the publish phase (the broker's main
    thread, ``/proc/PID/task/PID/stat``)."""
    generator_cpu_publish_s: float = 0.0
    generator_cpu_consume_s: float = 0.0
    broker_rss_mib: float = 0.0
    """The broker's RSS after the round."""
    broker_peak_rss_mib: float = 0.0
    """The broker's peak RSS so far (``VmHWM``), read after the round."""
    figures: dict[str, float] = field(default_factory=dict)
    group_commit: dict[str, float] = field(default_factory=dict)
    """Horae only: its storage writer during the publish phase (from ``/metrics``): group
    commits and fdatasyncs per second, entries per group commit, and the share of the phase's
    wall time spent inside fdatasync."""

    def compute_figures(self) -> None:
        per_million = 1e6 / self.messages
        self.figures = {
            "publish (msg/s)": self.published / self.publish_s if self.publish_s else 0.0,
            "consume (msg/s)": self.consumed / self.consume_s if self.consume_s else 0.0,
            "receipt latency p50 (ms)": self.latency_p50_ms,
            "receipt latency p99 (ms)": self.latency_p99_ms,
            "broker CPU s/M msgs, publish": self.broker_cpu_publish_s * per_million,
            "broker CPU s/M msgs, consume": self.broker_cpu_consume_s * per_million,
            "generator CPU s/M msgs, publish": self.generator_cpu_publish_s * per_million,
            "generator CPU s/M msgs, consume": self.generator_cpu_consume_s * per_million,
            "broker RSS after round (MiB)": self.broker_rss_mib,
            "broker peak RSS (MiB)": self.broker_peak_rss_mib,
        }


HIGHER_IS_BETTER = frozenset({"publish (msg/s)", "consume (msg/s)"})

_WRITER_SERIES = ("horae_storage_group_commits_total",
                  "horae_storage_group_committed_entries_total",
                  "horae_storage_fsyncs_total", "horae_storage_fsync_seconds_total")


def writer_counters(broker: Broker) -> dict[str, float] | None:
    """Horae's group-commit writer counters from its ``/metrics`` (loopback), or None for a
    peer that has none. Read outside the timed phases: a scrape costs the broker CPU."""
    if broker.web_port is None or not broker.name.startswith("horae"):
        return None
    url = f"http://{broker.host}:{broker.web_port}/metrics"
    with urllib.request.urlopen(url, timeout=30) as resp:  # loopback only
        text = resp.read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        name = line.partition("{")[0]
        if name in _WRITER_SERIES:
            values[name] = float(line.rsplit(" ", 1)[1])
    return values if len(values) == len(_WRITER_SERIES) else None


def group_commit_figures(before: dict[str, float], after: dict[str, float],
                         seconds: float) -> dict[str, float]:
    """The writer's work between two :func:`writer_counters` readings *seconds* apart."""
    commits, entries, fsyncs, fsync_s = (after[k] - before[k] for k in _WRITER_SERIES)
    return {
        "group commits/s": commits / seconds,
        "entries per group commit": entries / commits if commits else 0.0,
        "fdatasyncs/s": fsyncs / seconds,
        "fdatasync busy %": 100.0 * fsync_s / seconds,
    }


# --------------------------------------------------------------------------- frames


@dataclass(frozen=True)
class ProducerFrames:
    """One connection's pre-built SEND frames, their first sequence ids and message counts."""

    name: str
    frames: list[bytes]
    first_sequence_ids: list[int]
    messages: int


def build_producer_frames(name: str, messages: int, settings: LoadSettings) -> ProducerFrames:
    payload = (bytes(range(256)) * (settings.size // 256 + 1))[: settings.size]
    publish_time = int(time.time() * 1000)
    frames: list[bytes] = []
    firsts: list[int] = []
    per_entry = settings.batch or 1
    for first in range(0, messages, per_entry):
        count = min(per_entry, messages - first)
        md = pb.MessageMetadata(producer_name=name, sequence_id=first, publish_time=publish_time)
        if settings.batch:
            last = first + count - 1
            md.num_messages_in_batch = count
            md.highest_sequence_id = last
            body = encode_batch_payload(
                (pb.SingleMessageMetadata(payload_size=len(payload), sequence_id=first + i), payload)
                for i in range(count)
            )
            frames.append(C.encode_send(1, first, encode_entry(md, body), num_messages=count,
                                        highest_sequence_id=last))
        else:
            frames.append(C.encode_send(1, first, encode_entry(md, payload)))
        firsts.append(first)
    return ProducerFrames(name, frames, firsts, messages)


def build_all_frames(settings: LoadSettings) -> list[ProducerFrames]:
    base, extra = divmod(settings.messages, settings.connections)
    return [build_producer_frames(f"wl-{c}", base + (c < extra), settings)
            for c in range(settings.connections)]


# --------------------------------------------------------------------------- one round


async def _await_phase(done: asyncio.Future[Any], timeout_s: float, what: str,
                       progress: Callable[[], str]) -> None:
    try:
        await asyncio.wait_for(done, timeout_s)
    except TimeoutError:
        raise RuntimeError(f"{what} did not finish within {timeout_s} s: {progress()}") from None


async def run_round(broker: Broker, topic: str, settings: LoadSettings,
                    producers: list[ProducerFrames],
                    on_phase: Callable[[str, str], None] | None = None) -> LoadResult:
    """Publish then consume on ``topic``; ``on_phase(phase, "start"|"stop")`` brackets each phase
    (the profiler hooks in there)."""
    result = LoadResult(broker.name, settings.messages, sum(len(p.frames) for p in producers))
    loop = asyncio.get_running_loop()
    (await subscribe(broker, topic)).close()

    conns = [await open_producer(broker, topic, p.name) for p in producers]
    dones = [loop.create_future() for _ in producers]
    pubs = [Publisher(conn, p.frames, p.first_sequence_ids, settings.in_flight, done)
            for conn, p, done in zip(conns, producers, dones, strict=True)]
    writer0 = writer_counters(broker)
    if on_phase:
        on_phase("publish", "start")
    loop0 = cpu_seconds(broker.pid, broker.pid)
    cpu0, gen0, t0 = cpu_seconds(broker.pid), time.process_time(), time.perf_counter()
    try:
        for pub in pubs:
            pub.start()
        await _await_phase(asyncio.gather(*dones), settings.timeout_s, "publish",
                           lambda: f"{sum(p.acked for p in pubs)} of {result.entries} receipts")
        result.publish_s = time.perf_counter() - t0
        result.generator_cpu_publish_s = time.process_time() - gen0
        result.broker_cpu_publish_s = cpu_seconds(broker.pid) - cpu0
        result.loop_cpu_publish_s = cpu_seconds(broker.pid, broker.pid) - loop0
    finally:
        if on_phase:
            on_phase("publish", "stop")
        for conn in conns:
            conn.on_lost = None
            conn.close()
    writer1 = writer_counters(broker) if writer0 is not None else None
    if writer0 is not None and writer1 is not None:
        result.group_commit = group_commit_figures(writer0, writer1, result.publish_s)
    result.receipts = sum(p.acked for p in pubs)
    result.published = sum(sum(_entry_messages(p, settings)[: pub.acked])
                           for p, pub in zip(producers, pubs, strict=True))
    latencies = sorted(lat for pub in pubs for lat in pub.latencies)
    if latencies:
        result.latency_p50_ms = latencies[len(latencies) // 2] * 1e3
        result.latency_p99_ms = latencies[(len(latencies) * 99) // 100] * 1e3

    conn = await subscribe(broker, topic)
    done = loop.create_future()
    drainer = Drainer(conn, batched=settings.batch > 0, permits=settings.permits,
                      ack_batch=settings.ack_batch, expected=result.published, done=done)
    if on_phase:
        on_phase("consume", "start")
    cpu0, gen0, t0 = cpu_seconds(broker.pid), time.process_time(), time.perf_counter()
    try:
        drainer.start()
        await _await_phase(done, settings.timeout_s, "consume",
                           lambda: f"{drainer.messages} of {result.published} messages")
        result.consume_s = time.perf_counter() - t0
        result.generator_cpu_consume_s = time.process_time() - gen0
        result.broker_cpu_consume_s = cpu_seconds(broker.pid) - cpu0
        drainer.flush_acks()
    finally:
        drainer.stop()
        if on_phase:
            on_phase("consume", "stop")
        conn.on_lost = None
        conn.close()
    result.consumed = drainer.messages
    result.consumed_entries = len(drainer.seen)
    result.duplicates = drainer.duplicates
    result.bad_checksums = drainer.bad_checksums
    result.stall_flows = drainer.stall_flows
    result.broker_rss_mib = rss_mib(broker.pid)
    result.broker_peak_rss_mib = rss_mib(broker.pid, "VmHWM")
    result.compute_figures()
    return result


def _entry_messages(producer: ProducerFrames, settings: LoadSettings) -> list[int]:
    per_entry = settings.batch or 1
    return [min(per_entry, producer.messages - first) for first in producer.first_sequence_ids]


def run_load(broker: Broker, topic: str, settings: LoadSettings,
             producers: list[ProducerFrames] | None = None,
             on_phase: Callable[[str, str], None] | None = None) -> LoadResult:
    """One round against ``broker`` on its own event loop (uvloop)."""
    producers = producers if producers is not None else build_all_frames(settings)
    with frozen_heap(), asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(run_round(broker, topic, settings, producers, on_phase))


# --------------------------------------------------------------------------- main


def print_table(settings: LoadSettings, rounds: int,
                results: dict[str, list[LoadResult]]) -> None:
    mode = f"batches of {settings.batch}" if settings.batch else "unbatched"
    head = (f"wire load: {settings.connections} conn x {settings.in_flight} SENDs in flight, "
            f"{settings.messages:,} x {settings.size} B, {mode}; best of {rounds} round(s)")
    names = list(results)
    figures = {fig: {n: [r.figures[fig] for r in results[n]] for n in names}
               for fig in next(iter(results.values()))[0].figures}
    lower = set(figures) - HIGHER_IS_BETTER
    default = without_relaxed_horae(names)
    if default:
        print()
        print(f"{head}; Horae and Pulsar fsync before every receipt")
        print(format_table(figures, default, lower, width=36))
    relaxed = relaxed_table(figures, names, lower, width=36)
    if relaxed:
        print()
        print(f"{head}; RELAXED, equal durability: horae-nofsync (journalSyncData=false) makes "
              "no fsync or fdatasync, nor does pulsar-lite (nor pulsar-nosync's journal)")
        print(relaxed)


def _check(result: LoadResult) -> None:
    if result.published != result.messages or result.consumed != result.published:
        raise RuntimeError(f"counts do not add up: {result}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--in-flight", type=int, default=1000, help="SENDs in flight per connection")
    parser.add_argument("--size", type=int, default=1024, help="payload bytes per message")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=0,
                        help="messages per batch entry (0 = unbatched)")
    parser.add_argument("--permits", type=int, default=1000)
    parser.add_argument("--ack-batch", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=20_000,
                        help="messages of an uncounted first round per peer (JIT, caches); 0: none")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per phase")
    parser.add_argument("--peers", default=",".join(DEFAULT_PEERS),
                        help="comma-separated peers to run: horae, pulsar-lite, pulsar, "
                             "horae-nofsync, pulsar-nosync")
    parser.add_argument("--relaxed", action="store_true",
                        help="also run horae-nofsync beside pulsar-lite (neither syncs) and "
                             "print that comparison at equal durability on its own")
    parser.add_argument("--profile", type=pathlib.Path, metavar="DIR",
                        help="one extra Horae round under py-spy; raw stacks go to DIR")
    parser.add_argument("--rest", type=float, default=0.0, metavar="S",
                        help="after the last round, wait S seconds and read each broker's RSS "
                             "(what it keeps at rest after the work); 0: not measured")
    parser.add_argument("--json", type=pathlib.Path, metavar="FILE", help="write all results")
    args = parser.parse_args(argv)
    if args.connections < 1 or args.in_flight < 1 or args.messages < args.connections:
        parser.error("need connections >= 1, in-flight >= 1 and messages >= connections")
    try:
        peers = parse_peers(args.peers)
    except ValueError as exc:
        parser.error(str(exc))
    if args.relaxed:
        peers = with_relaxed(peers)
    settings = LoadSettings(args.connections, args.in_flight, args.size, args.messages,
                            args.batch, args.permits, args.ack_batch, args.timeout)
    producers = build_all_frames(settings)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="horae-wire-load-"))
    results: dict[str, list[LoadResult]] = {}
    at_rest: dict[str, float] = {}
    token = os.getpid()
    try:
        with started(tmp, peers) as brokers:
            if args.warmup:
                warm = LoadSettings(args.connections, args.in_flight, args.size,
                                    max(args.warmup, args.connections), args.batch,
                                    args.permits, args.ack_batch, args.timeout)
                warm_frames = build_all_frames(warm)
                for broker in brokers:
                    _check(run_load(broker, f"persistent://public/default/wl-{token}-warm",
                                    warm, warm_frames))
                    print(f"warm-up {broker.name}: done", flush=True)
            for rnd in range(args.rounds):
                for broker in brokers:
                    topic = f"persistent://public/default/wl-{token}-{rnd}"
                    result = run_load(broker, topic, settings, producers)
                    _check(result)
                    results.setdefault(broker.name, []).append(result)
                    print(f"round {rnd + 1} {broker.name}: "
                          + ", ".join(f"{k} {v:,.2f}" for k, v in result.figures.items())
                          + f", stall FLOWs {result.stall_flows}"
                          + (f", loop CPU s/M msgs, publish "
                             f"{result.loop_cpu_publish_s * 1e6 / result.messages:,.2f}"
                             if broker.name.startswith("horae") else "")
                          + "".join(f", {k} {v:,.1f}" for k, v in result.group_commit.items()),
                          flush=True)
            if args.rest > 0:
                time.sleep(args.rest)   # the brokers rest together: one wait for all
                at_rest = {broker.name: rss_mib(broker.pid) for broker in brokers}
            horae = next((b for b in brokers if b.name == "horae"), None)
            if args.profile is not None and horae is not None:
                args.profile.mkdir(parents=True, exist_ok=True)
                recorder = PySpyRecorder(horae.pid, args.profile)
                run_load(horae, f"persistent://public/default/wl-{token}-profile", settings,
                         producers, recorder)
                for phase, path in recorder.outputs.items():
                    print(f"\npy-spy, Horae {phase} phase ({path}):")
                    print(summarise_collapsed(path.read_text(errors="replace")))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print_table(settings, args.rounds, results)
    if at_rest:
        print(f"broker RSS {args.rest:g} s after the last round (MiB): "
              + ", ".join(f"{name} {rss:.1f}" for name, rss in at_rest.items()))
    if args.json is not None:
        args.json.write_text(json.dumps(
            {"settings": asdict(settings),
             "results": {n: [asdict(r) for r in rs] for n, rs in results.items()},
             "rss_at_rest_mib": at_rest}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
