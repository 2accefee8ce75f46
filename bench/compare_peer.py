"""Horae vs pulsar-lite 0.2.0 vs Apache Pulsar 4.0 with the same official-client workload.

Starts Horae (``python -m broker serve``, fsync before every receipt, the default), the
pulsar-lite binary and Apache Pulsar standalone (bookie journal fsynced before each receipt,
deduplication on: :mod:`bench.pulsar_peer`), each on free ports with its data in a temporary
directory, then drives each in turn with pulsar-client 3.13:

1. async publish of N x S bytes, batching off   (msgs/s, first send to last receipt)
2. async publish of N x S bytes, batching on    (msgs/s)
3. Shared consume of workload 1's N messages with an ack per message   (msgs/s)
4. synchronous send of M messages               (msgs/s, i.e. 1 / round-trip latency),
   with the p50 and p99 of the per-send round trip (us)
5. end to end: E synchronous sends while a Shared consumer receives and acks; each message
   carries its send time, so its latency is send -> receive in the consumer (p50, p99, us)

Each peer first runs one uncounted warm-up round (``--warmup``: that fraction of every count;
the JVM compiles its hot paths then). Around each workload the broker's CPU seconds (``/proc/PID/stat``, all threads; for Pulsar the
JVM's) are read and given per million messages, and so is the client's own CPU (this process:
the official client's Python and C++ threads); after the round its RSS and its peak RSS
(``VmHWM``). Every figure is printed for each peer with Horae's ratio to it (above 1 = Horae
ahead: Horae/peer for rates, peer/Horae for latency, CPU and memory; :mod:`bench.peer_table`).

The sync-send and end-to-end figures are the most sensitive to other load on the machine: each
Horae round trip has two thread hand-offs (loop -> storage writer -> loop) and an fdatasync,
each of which waits for a CPU when the machine is busy; run several rounds and compare p50s.

Usage: ``.venv/bin/python bench/compare_peer.py [--messages 50000] [--size 1024] [--sync 5000]
[--e2e 5000] [--peers horae,pulsar-lite,pulsar] [--rounds 1] [--json FILE]``; the peers
``horae-nofsync`` and ``pulsar-nosync`` (Pulsar standalone's shipped ``journalSyncData=false``)
are the relaxed runs. Never part of the test run.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence

import pulsar

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from bench.brokers import DEFAULT_PEERS, Broker, cpu_seconds, parse_peers, rss_mib, started
from bench.peer_table import format_table


def client_for(url: str) -> pulsar.Client:
    return pulsar.Client(url, operation_timeout_seconds=30,
                         logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


def async_publish(client: pulsar.Client, topic: str, n: int, payload: bytes,
                  batching: bool) -> float:
    producer = client.create_producer(
        topic, batching_enabled=batching, batching_max_messages=1000,
        batching_max_publish_delay_ms=10, max_pending_messages=5000, block_if_queue_full=True,
        send_timeout_millis=120_000)
    producer.send(payload)  # warm the connection and the topic
    done = threading.Event()
    count = [0]
    failed = [0]

    def on_sent(res: pulsar.Result, _mid: object) -> None:
        count[0] += 1
        if res != pulsar.Result.Ok:
            failed[0] += 1
        if count[0] == n:
            done.set()

    t0 = time.perf_counter()
    for _ in range(n):
        producer.send_async(payload, on_sent)
    if not done.wait(600):
        raise RuntimeError(f"only {count[0]} of {n} receipts")
    elapsed = time.perf_counter() - t0
    producer.close()
    if failed[0]:
        raise RuntimeError(f"{failed[0]} sends failed")
    return n / elapsed


def shared_consume(client: pulsar.Client, topic: str, n: int) -> float:
    consumer = client.subscribe(topic, "bench", consumer_type=pulsar.ConsumerType.Shared,
                                initial_position=pulsar.InitialPosition.Earliest,
                                receiver_queue_size=1000)
    first = consumer.receive(30_000)
    consumer.acknowledge(first)
    t0 = time.perf_counter()
    for _ in range(n - 1):
        consumer.acknowledge(consumer.receive(30_000))
    elapsed = time.perf_counter() - t0
    consumer.close()
    return (n - 1) / elapsed


def sync_send(client: pulsar.Client, topic: str, n: int,
              payload: bytes) -> tuple[float, float, float]:
    """(msgs/s, p50 us, p99 us) of n sends with one message in flight."""
    producer = client.create_producer(topic)
    producer.send(payload)
    clock = time.perf_counter
    latencies = [0.0] * n
    t0 = clock()
    for i in range(n):
        started = clock()
        producer.send(payload)
        latencies[i] = clock() - started
    elapsed = clock() - t0
    producer.close()
    latencies.sort()
    return n / elapsed, latencies[n // 2] * 1e6, latencies[(n * 99) // 100] * 1e6


def end_to_end(client: pulsar.Client, topic: str, n: int, payload: bytes) -> tuple[float, float]:
    """(p50 us, p99 us) of send -> receive for n messages, one send in flight."""
    p50, p99, _send_p50 = end_to_end_sends(client, topic, n, payload)
    return p50, p99


def end_to_end_sends(client: pulsar.Client, topic: str, n: int,
                     payload: bytes) -> tuple[float, float, float]:
    """:func:`end_to_end`, also timing each send's own round trip: (e2e p50 us, e2e p99 us,
    send p50 us)."""
    consumer = client.subscribe(topic, "e2e", consumer_type=pulsar.ConsumerType.Shared,
                                receiver_queue_size=1000)
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(payload)
    consumer.acknowledge(consumer.receive(30_000))
    body = payload[8:]
    sends = [0] * n
    failure: list[BaseException] = []

    def produce() -> None:
        clock = time.perf_counter_ns
        try:
            for i in range(n):
                started = clock()
                producer.send(struct.pack("<q", started) + body)
                sends[i] = clock() - started
        except BaseException as exc:  # reported by the consuming thread
            failure.append(exc)

    sender = threading.Thread(target=produce, daemon=True)
    latencies = [0] * n
    sender.start()
    try:
        for i in range(n):
            msg = consumer.receive(30_000)
            latencies[i] = time.perf_counter_ns() - struct.unpack_from("<q", msg.data())[0]
            consumer.acknowledge(msg)
    finally:
        sender.join(60)
    if failure:
        raise RuntimeError(f"end-to-end producer failed: {failure[0]}")
    producer.close()
    consumer.close()
    latencies.sort()
    sends.sort()
    return latencies[n // 2] / 1e3, latencies[(n * 99) // 100] / 1e3, sends[n // 2] / 1e3


def _client_cpu() -> float:
    """CPU seconds of this process (the official client: its Python and C++ threads)."""
    times = os.times()
    return times.user + times.system


def _cpu_per_million(broker: Broker, results: dict[str, float], phase: str, messages: int,
                     work: Callable[[], float]) -> float:
    cpu0, client0 = cpu_seconds(broker.pid), _client_cpu()
    value = work()
    results[f"broker CPU s/M msgs, {phase}"] = (cpu_seconds(broker.pid) - cpu0) / messages * 1e6
    results[f"client CPU s/M msgs, {phase}"] = (_client_cpu() - client0) / messages * 1e6
    return value


def run_workload(broker: Broker, args: argparse.Namespace, rnd: int) -> dict[str, float]:
    payload = os.urandom(max(args.size, 8))
    client = client_for(broker.url)
    results: dict[str, float] = {}
    cpu: dict[str, float] = {}
    try:
        rnd_name = "warm" if rnd < 0 else str(rnd)
        t_plain = f"persistent://public/default/bench-plain-{rnd_name}"
        t_batch = f"persistent://public/default/bench-batch-{rnd_name}"
        # the subscription exists before publishing so that the consume reads what was published
        client.subscribe(t_plain, "bench", consumer_type=pulsar.ConsumerType.Shared,
                         initial_position=pulsar.InitialPosition.Earliest).close()
        results["async publish, batching off (msg/s)"] = _cpu_per_million(
            broker, cpu, "publish unbatched", args.messages,
            lambda: async_publish(client, t_plain, args.messages, payload, False))
        results["async publish, batching on (msg/s)"] = _cpu_per_million(
            broker, cpu, "publish batched", args.messages,
            lambda: async_publish(client, t_batch, args.messages, payload, True))
        results["Shared consume + ack each (msg/s)"] = _cpu_per_million(
            broker, cpu, "consume + ack", args.messages,
            lambda: shared_consume(client, t_plain, args.messages + 1))
        latency: dict[str, float] = {}

        def sync() -> float:
            rate, latency["p50"], latency["p99"] = sync_send(
                client, f"persistent://public/default/bench-sync-{rnd_name}", args.sync, payload)
            return rate

        results["sync send (msg/s)"] = _cpu_per_million(broker, cpu, "sync send", args.sync,
                                                        sync)
        results["sync send p50 latency (us)"] = latency["p50"]
        results["sync send p99 latency (us)"] = latency["p99"]
        if args.e2e:
            e2e: dict[str, float] = {}

            def run_e2e() -> float:
                e2e["p50"], e2e["p99"] = end_to_end(
                    client, f"persistent://public/default/bench-e2e-{rnd_name}", args.e2e, payload)
                return 0.0

            _cpu_per_million(broker, cpu, "end to end", args.e2e, run_e2e)
            results["end-to-end p50 latency (us)"] = e2e["p50"]
            results["end-to-end p99 latency (us)"] = e2e["p99"]
        results.update(cpu)
        results["broker RSS after round (MiB)"] = rss_mib(broker.pid)
        results["broker peak RSS (MiB)"] = rss_mib(broker.pid, "VmHWM")
    finally:
        client.close()
    return results


def measure_rounds(peers: list[str], args: argparse.Namespace, counts: Sequence[str],
                   workload: Callable[[Broker, argparse.Namespace, int], dict[str, float]],
                   ) -> tuple[dict[str, dict[str, list[float]]], dict[str, str], list[str]]:
    """Start *peers*, run *workload* once per peer as an uncounted warm-up (the *counts*
    fields of *args* scaled by ``args.warmup``; none when it is 0), then ``args.rounds`` rounds
    over the peers in turn; returns every figure per peer (one value per round), the peers'
    versions, and the rounds a peer other than Horae failed (printed as they happen; that
    round's figures are left out and the others go on: pulsar-lite now and then stops
    dispatching under the Java client). A failure of Horae's stops the run."""
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="horae-bench-"))
    figures: dict[str, dict[str, list[float]]] = {}
    failures: list[str] = []
    try:
        with started(tmp, peers) as brokers:
            versions = {b.name: b.version for b in brokers}
            if args.warmup > 0:
                warm = argparse.Namespace(**vars(args))
                for field in counts:
                    setattr(warm, field, max(int(getattr(args, field) * args.warmup), 10))
                for broker in brokers:
                    workload(broker, warm, -1)
                    print(f"warm-up {broker.name}: done", flush=True)
            for rnd in range(args.rounds):
                for broker in brokers:
                    print(f"round {rnd + 1}: {broker.name} ...", flush=True)
                    try:
                        got = workload(broker, args, rnd)
                    except Exception as exc:   # a peer's failure is reported, not Horae's
                        if broker.name.startswith("horae"):
                            raise
                        failures.append(f"round {rnd + 1}: {broker.name}: {exc}")
                        print(f"round {rnd + 1}: {broker.name} FAILED, its figures left "
                              f"out: {exc}", flush=True)
                        continue
                    for k, v in got.items():
                        figures.setdefault(k, {}).setdefault(broker.name, []).append(v)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return figures, versions, failures


def is_lower_better(figure: str) -> bool:
    return figure.endswith("(us)") or figure.endswith("(MiB)") or "CPU" in figure


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--sync", type=int, default=5_000)
    parser.add_argument("--e2e", type=int, default=5_000,
                        help="messages in the end-to-end latency workload (0: skip it)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--warmup", type=float, default=0.2,
                        help="an uncounted first round per peer at this fraction of every "
                             "count (JIT, caches); 0: none")
    parser.add_argument("--peers", default=",".join(DEFAULT_PEERS),
                        help="comma-separated peers to run: horae, pulsar-lite, pulsar, "
                             "horae-nofsync, pulsar-nosync")
    parser.add_argument("--json", type=pathlib.Path, metavar="FILE", help="write all figures")
    args = parser.parse_args(argv)
    try:
        peers = parse_peers(args.peers)
    except ValueError as exc:
        parser.error(str(exc))

    figures, versions, failures = measure_rounds(peers, args, ("messages", "sync", "e2e"),
                                                 run_workload)
    print()
    print(f"official client: {args.messages} x {args.size} B async, {args.sync} sync, "
          f"{args.e2e} end to end; best of {args.rounds} round(s); Horae and Pulsar fsync "
          "before every receipt")
    print(format_table(figures, peers, {f for f in figures if is_lower_better(f)}))
    for failure in failures:
        print(f"left out: {failure}")
    if args.json is not None:
        args.json.write_text(json.dumps({"settings": vars(args) | {"json": str(args.json)},
                                         "versions": versions, "figures": figures,
                                         "failures": failures}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
