"""Horae vs pulsar-lite 0.2.0 with the same official-client workload.

Starts Horae (``python -m broker serve``, fsync before every receipt, the default) and the
pulsar-lite binary, each on free ports with its data in a temporary directory, then drives
each in turn with pulsar-client 3.13:

1. async publish of N x S bytes, batching off   (msgs/s, first send to last receipt)
2. async publish of N x S bytes, batching on    (msgs/s)
3. Shared consume of workload 1's N messages with an ack per message   (msgs/s)
4. synchronous send of M messages               (msgs/s, i.e. 1 / round-trip latency),
   with the p50 and p99 of the per-send round trip (us)

and prints each figure for both and the Horae/pulsar-lite ratio (target: every ratio >= 0.8;
for the latency lines the ratio is pulsar-lite/Horae, so higher is better there too).

The sync-send figure is the most sensitive to other load on the machine: each Horae round trip
has two thread hand-offs (loop -> storage writer -> loop) and an fdatasync, each of which
waits for a CPU when the machine is busy; run several rounds and compare p50 latencies.

Usage: ``.venv/bin/python bench/compare_peer.py [--messages 50000] [--size 1024] [--sync 5000]
[--only horae|pulsar-lite] [--rounds 1]``. Never part of the test run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import shutil
import sys
import tempfile
import threading
import time
from typing import Any

import pulsar

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from bench.brokers import Broker, start_horae, start_pulsar_lite


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


def run_workload(broker: Broker, args: argparse.Namespace, rnd: int) -> dict[str, float]:
    payload = os.urandom(args.size)
    client = client_for(broker.url)
    results: dict[str, float] = {}
    try:
        t_plain = f"persistent://public/default/bench-plain-{rnd}"
        t_batch = f"persistent://public/default/bench-batch-{rnd}"
        # the subscription exists before publishing so that the consume reads what was published
        client.subscribe(t_plain, "bench", consumer_type=pulsar.ConsumerType.Shared,
                         initial_position=pulsar.InitialPosition.Earliest).close()
        results["async publish, batching off (msg/s)"] = async_publish(
            client, t_plain, args.messages, payload, False)
        results["async publish, batching on (msg/s)"] = async_publish(
            client, t_batch, args.messages, payload, True)
        results["Shared consume + ack each (msg/s)"] = shared_consume(
            client, t_plain, args.messages + 1)
        rate, p50, p99 = sync_send(
            client, f"persistent://public/default/bench-sync-{rnd}", args.sync, payload)
        results["sync send (msg/s)"] = rate
        results["sync send p50 latency (us)"] = p50
        results["sync send p99 latency (us)"] = p99
    finally:
        client.close()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--sync", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--only", choices=["horae", "pulsar-lite"])
    parser.add_argument("--no-fsync-too", action="store_true",
                        help="also run Horae with journalSyncData=false (pulsar-lite does not "
                             "fsync per receipt either) and print its figures")
    args = parser.parse_args(argv)

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="horae-bench-"))
    figures: dict[str, dict[str, list[float]]] = {}
    try:
        starters: list[tuple[str, Any]] = [("horae", start_horae),
                                           ("pulsar-lite", start_pulsar_lite)]
        if args.no_fsync_too and args.only is None:
            starters.append(("horae-nofsync", lambda t: start_horae(t, fsync=False)))
        with contextlib.ExitStack() as stack:
            brokers = [stack.enter_context(start(tmp)) for name, start in starters
                       if args.only in (None, name)]
            for rnd in range(args.rounds):
                for broker in brokers:
                    print(f"round {rnd + 1}: {broker.name} ...", flush=True)
                    for k, v in run_workload(broker, args, rnd).items():
                        figures.setdefault(k, {}).setdefault(broker.name, []).append(v)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print()
    print(f"{args.messages} x {args.size} B async, {args.sync} sync; best of {args.rounds} round(s); "
          f"Horae fsyncs before every receipt")
    extra = any("horae-nofsync" in per for per in figures.values())
    head = f"{'workload':40} {'horae':>12} {'pulsar-lite':>12} {'ratio':>7}"
    if extra:
        head += f" {'horae-nofsync':>14} {'ratio':>7}"
    print(head)
    for k, per in figures.items():
        latency = k.endswith("(us)")  # lower is better: best = min, ratio = peer / Horae
        best = min if latency else max
        h = best(per.get("horae", [0.0]))
        p = best(per.get("pulsar-lite", [0.0]))
        line = f"{k:40} {h:12,.0f} {p:12,.0f} {_ratio(p, h) if latency else _ratio(h, p)}"
        if extra:
            n = best(per.get("horae-nofsync", [0.0]))
            line += f" {n:14,.0f} {_ratio(p, n) if latency else _ratio(n, p)}"
        print(line)
    return 0


def _ratio(a: float, b: float) -> str:
    return f"{a / b:7.2f}" if a and b else "    n/a"


if __name__ == "__main__":

    raise SystemExit(main())
