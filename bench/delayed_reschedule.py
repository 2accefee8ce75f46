"""Reschedules and cancels by key per second, with publish-receipt latency (replace by key).

Usage:  .venv/bin/python bench/delayed_reschedule.py [--keys 20000] [--ops 100000]
                                                     [--window 200] [--producers 2]
                                                     [--index-keys 1000000]

Starts ``python -m broker serve`` (bench/delayed_e2e.py's BrokerProc: free 127.0.0.1 ports, a
fresh data directory, strict deliver times), turns ``delayedDeliveryReplaceByKey`` on for
``public/default`` over REST, attaches one Shared consumer, and publishes ``--keys`` keyed
messages delayed 1-2 h with the official client. Then ``--ops`` operations, each a
reschedule (the key again, a new deliver time 1-2 h out) or, one in four, a cancel (the key
and an empty payload), from ``--producers`` producers (unbatched, ``send_async`` with at most
``--window`` in flight each). Prints operations/s and receipt latency (send_async to its
callback) p50/p99/p99.9; then the same number of plain delayed messages without keys on a
second topic in the same broker, for the cost of the policy beside the publish path alone.
At the end the subscription's ``msgBacklog`` must equal the keys still scheduled, each key's
replaced versions acknowledged unseen.

Then, in this process, the index alone: ``--index-keys`` distinct keys recorded into a
:class:`broker.delayed.replace_by_key.KeyedSchedule` (bytes per key from tracemalloc, and
records/s including the entry classification the broker does per keyed entry).
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import threading
import time
import tracemalloc
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from delayed_e2e import BrokerProc, client, pct

CONFIG = {"isDelayedDeliveryDeliverAtTimeStrict": True}
TOPIC = "persistent://public/default/reschedule"
PLAIN_TOPIC = "persistent://public/default/reschedule-plain"
SUB = "sub"
HOUR_MS = 3_600_000


def rest(broker: BrokerProc, method: str, path: str, body: bytes | None = None) -> int:
    req = urllib.request.Request(broker.web_url + path, data=body, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return int(resp.status)


def stats(broker: BrokerProc, topic: str) -> dict[str, Any]:
    import json
    path = "/admin/v2/persistent/" + topic.split("://", 1)[1] + "/stats"
    with urllib.request.urlopen(broker.web_url + path, timeout=30) as resp:
        return dict(json.loads(resp.read()))


def timed_publish(producers: list[Any], ops: list[tuple[bytes, str | None, int | None]],
                  window: int) -> tuple[float, list[float], int]:
    """Publish ``ops`` (payload, key, deliver_at) round-robin over ``producers``, each with at
    most ``window`` in flight; returns (seconds, receipt latencies in ms, failures)."""
    import pulsar

    latencies: list[float] = []
    failed = [0]
    lock = threading.Lock()
    done = threading.Event()
    remaining = [len(ops)]
    sems = [threading.Semaphore(window) for _ in producers]

    def make_callback(sem: threading.Semaphore, t0: float) -> Any:
        def callback(res: Any, _msg_id: Any) -> None:
            elapsed = (time.perf_counter() - t0) * 1000
            with lock:
                if res != pulsar.Result.Ok:
                    failed[0] += 1
                latencies.append(elapsed)
                remaining[0] -= 1
                if remaining[0] == 0:
                    done.set()
            sem.release()
        return callback

    start = time.perf_counter()
    for i, (payload, key, deliver_at) in enumerate(ops):
        n = i % len(producers)
        sems[n].acquire()
        kw: dict[str, Any] = {}
        if key is not None:
            kw["partition_key"] = key
        if deliver_at is not None:
            kw["deliver_at"] = deliver_at
        producers[n].send_async(payload, make_callback(sems[n], time.perf_counter()), **kw)
    if ops:
        done.wait(600)
    return time.perf_counter() - start, latencies, failed[0]


def report(label: str, seconds: float, latencies: list[float], failed: int) -> None:
    n = len(latencies)
    print(f"  {label:<34} {n / seconds:>9,.0f} /s   receipt p50 {pct(latencies, 50):6.2f} ms"
          f"   p99 {pct(latencies, 99):6.2f} ms   p99.9 {pct(latencies, 99.9):6.2f} ms"
          f"   failed {failed}")


def run_broker(args: argparse.Namespace, work: Path) -> None:
    import pulsar

    broker = BrokerProc(work / "broker", CONFIG)
    broker.start()
    broker.wait_listening()
    try:
        deadline = time.monotonic() + 60
        while True:     # the web port opens after the binary one
            try:
                status = rest(broker, "POST", "/admin/v2/namespaces/public/default/"
                              "delayedDeliveryReplaceByKey", b"true")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        assert status == 204, status
        c = client(broker.service_url)
        try:
            consumer = c.subscribe(TOPIC, SUB, consumer_type=pulsar.ConsumerType.Shared)
            plain_consumer = c.subscribe(PLAIN_TOPIC, SUB,
                                         consumer_type=pulsar.ConsumerType.Shared)

            def producers(topic: str) -> list[Any]:
                return [c.create_producer(topic, batching_enabled=False,
                                          max_pending_messages=args.window,
                                          block_if_queue_full=True, send_timeout_millis=0)
                        for _ in range(args.producers)]

            keyed, plain = producers(TOPIC), producers(PLAIN_TOPIC)
            rnd = random.Random(7)
            now = time.time_ns() // 1_000_000
            seed = [(b"job-%d" % k, f"key-{k}", now + HOUR_MS + rnd.randrange(HOUR_MS))
                    for k in range(args.keys)]
            print(f"[seed] {args.keys:,} keys delayed 1-2 h")
            report("seed (first message per key)", *timed_publish(keyed, list(seed),
                                                                  args.window))
            ops: list[tuple[bytes, str | None, int | None]] = []
            live = set(range(args.keys))
            for i in range(args.ops):
                k = rnd.randrange(args.keys)
                if i % 4 == 3:
                    ops.append((b"", f"key-{k}", None))
                    live.discard(k)
                else:
                    ops.append((b"job-%d-%d" % (k, i), f"key-{k}",
                                now + HOUR_MS + rnd.randrange(HOUR_MS)))
                    live.add(k)
            print(f"[replace by key] {args.ops:,} operations (3/4 reschedules, 1/4 cancels), "
                  f"{args.producers} producers x window {args.window}")
            report("reschedule + cancel by key", *timed_publish(keyed, ops, args.window))
            plain_ops = [(b"job-%d" % i, None, now + HOUR_MS + rnd.randrange(HOUR_MS))
                         for i in range(args.ops)]
            report("same count, plain delayed (no key)",
                   *timed_publish(plain, plain_ops, args.window))
            deadline = time.monotonic() + 120
            backlog = -1
            while time.monotonic() < deadline:
                backlog = int(stats(broker, TOPIC)["subscriptions"][SUB]["msgBacklog"])
                if backlog == len(live):
                    break
                time.sleep(0.5)   # polling the broker's stats: there is nothing to wait on
            verdict = "ok" if backlog == len(live) else "MISMATCH"
            print(f"  backlog after replacements: {backlog:,} (keys still scheduled: "
                  f"{len(live):,}) {verdict}")
            consumer.close()
            plain_consumer.close()
        finally:
            c.close()
    finally:
        broker.stop()


def run_index(args: argparse.Namespace) -> None:
    from broker.delayed.replace_by_key import KeyedSchedule, classify, key_hash
    from protocol import pulsar_pb as pb
    from protocol.metadata import encode_entry

    n = args.index_keys
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    schedule = KeyedSchedule()
    for i in range(n):
        schedule.record(1 + (i >> 20), i & 0xFFFFF,
                        (((key_hash(f"order-{i:09d}"), False),), False))
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    print(f"[index] {n:,} keys: {held / n:.1f} B per key (tracemalloc), "
          f"memory_bytes {schedule.memory_bytes / n:.1f} B per key")
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1,
                            partition_key="order-000000001", deliver_at_time=2)
    entry = encode_entry(md, b"x" * 64)
    rounds = 200_000
    t = time.perf_counter()
    for i in range(rounds):
        keys = classify(entry)
        assert keys is not None
        schedule.record(99, i, keys)
    per_s = rounds / (time.perf_counter() - t)
    print(f"[index] classify + record of a keyed entry: {per_s:,.0f} /s on one core "
          f"({1e6 / per_s:.2f} us each)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--keys", type=int, default=20_000)
    ap.add_argument("--ops", type=int, default=100_000)
    ap.add_argument("--window", type=int, default=200)
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--index-keys", type=int, default=1_000_000)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="horae-reschedule-"))
    try:
        run_broker(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    run_index(args)


if __name__ == "__main__":
    main()
