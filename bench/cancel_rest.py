"""REST cancels of scheduled messages per second, end to end (PIP-423 first form).

Usage:  .venv/bin/python bench/cancel_rest.py [--messages 5000] [--concurrency 1,16]
            [--compare-with CHECKOUT] [--rounds N]

Starts ``python -m broker serve`` (bench/delayed_e2e.py's BrokerProc: free 127.0.0.1 ports, a
fresh data directory) with the bucket tracker
(``delayedDeliveryTrackerFactoryClassName = "bucket"``), attaches one Shared consumer, and
publishes ``--messages`` messages delayed 1-2 h with the official client (their message ids
and deliver times kept), then waits until the subscription's ``msgDelayed`` holds them all.
Then, for each ``--concurrency`` level, a disjoint share of the messages is cancelled with
``POST /admin/v2/persistent/public/default/<topic>/cancelDelayedMessage?ledgerId=&entryId=
&deliverAt=&subscriptionNames=<sub>`` from that many concurrent HTTP requests (aiohttp,
keep-alive). Each 204 means the cancel is durable: the message acknowledged on the
subscription and its cursor flushed (that acknowledgement is the cancel's record). Prints
cancels/s, latency p50/p99, the broker process's CPU per cancel (/proc: steadier than wall
time on a busy machine) and the status codes; at the end ``msgDelayed`` must have dropped by
the number of 204s. ``--compare-with CHECKOUT --rounds N``: the same rounds on a broker of
another checkout right after, alternated N times (paired before/after).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import delayed_e2e
from delayed_e2e import SUB, TOPIC, BrokerProc, client, pct

CONFIG = {"delayedDeliveryTrackerFactoryClassName": "bucket",
          "isDelayedDeliveryDeliverAtTimeStrict": True}


def publish_delayed(broker: BrokerProc, n: int) -> list[tuple[int, int, int]]:
    """(ledgerId, entryId, deliverAt) of n messages delayed 1-2 h, all indexed by the
    subscription's tracker when this returns."""
    import pulsar

    c = client(broker.service_url)
    try:
        consumer = c.subscribe(TOPIC, SUB, consumer_type=pulsar.ConsumerType.Shared)
        producer = c.create_producer(TOPIC, batching_enabled=False, max_pending_messages=1000,
                                     block_if_queue_full=True, send_timeout_millis=0)
        now = time.time_ns() // 1_000_000
        rnd = random.Random(7)
        out: list[tuple[int, int, int]] = []
        failed = [0]
        for _ in range(n):
            at = now + 3_600_000 + rnd.randrange(3_600_000)

            def sent(res: Any, msg_id: Any, at: int = at) -> None:
                if res == pulsar.Result.Ok:
                    out.append((msg_id.ledger_id(), msg_id.entry_id(), at))
                else:
                    failed[0] += 1

            producer.send_async(b"d%d" % at, sent, deliver_at=at)
        producer.flush()
        deadline = time.perf_counter() + 300
        while len(out) + failed[0] < n and time.perf_counter() < deadline:
            time.sleep(0.05)  # the client's callbacks run on its own thread
        while broker.msg_delayed() < len(out) and time.perf_counter() < deadline:
            time.sleep(0.2)  # polling the admin API for the tracker count
        producer.close()
        consumer.close()  # the subscription (and its tracker's snapshots) stay
    finally:
        c.close()
    return out


async def cancel_all(web_url: str, targets: list[tuple[int, int, int]], concurrency: int
                     ) -> tuple[float, list[float], Counter[int]]:
    import aiohttp

    path = f"{web_url}/admin/v2/persistent/{TOPIC.split('://', 1)[1]}/cancelDelayedMessage"
    queue = list(reversed(targets))
    latencies: list[float] = []
    codes: Counter[int] = Counter()

    async def worker(session: aiohttp.ClientSession) -> None:
        while queue:
            ledger_id, entry_id, at = queue.pop()
            t = time.perf_counter()
            async with session.post(path, params={
                    "ledgerId": str(ledger_id), "entryId": str(entry_id),
                    "deliverAt": str(at), "subscriptionNames": SUB}) as r:
                await r.read()
                codes[r.status] += 1
            latencies.append(time.perf_counter() - t)

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        elapsed = time.perf_counter() - t0
    return elapsed, latencies, codes


def broker_cpu_s(pid: int) -> float:
    """User + system CPU seconds of the broker process so far (/proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def broker_writes(pid: int) -> int:
    """Write syscalls of the broker process so far (/proc/PID/io ``syscw``)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("syscw:"):
            return int(line.split()[1])
    return 0


def run(messages: int, levels: list[int], label: str) -> None:
    """One broker (this module's checkout, or the one ``delayed_e2e.ROOT`` names), one round
    per concurrency level."""
    work = Path(tempfile.mkdtemp(prefix="horae-cancel-rest-"))
    broker = BrokerProc(work / "data", CONFIG)
    try:
        broker.start()
        broker.wait_listening()
        assert broker.proc is not None
        print(f"{label}broker {broker.web_url} config={CONFIG}")
        targets = publish_delayed(broker, messages)
        before = broker.msg_delayed()
        print(f"{label}published {len(targets):,} messages delayed 1-2 h; msgDelayed {before:,}")
        random.Random(3).shuffle(targets)
        share = len(targets) // len(levels)
        applied = 0
        for i, level in enumerate(levels):
            part = targets[i * share:(i + 1) * share]
            cpu0 = broker_cpu_s(broker.proc.pid)
            writes0 = broker_writes(broker.proc.pid)
            elapsed, lat, codes = asyncio.run(cancel_all(broker.web_url, part, level))
            cpu = broker_cpu_s(broker.proc.pid) - cpu0
            writes = broker_writes(broker.proc.pid) - writes0
            applied += codes.get(204, 0)
            print(f"{label}concurrency {level:>3}: {len(part):,} cancels in {elapsed:.2f} s = "
                  f"{len(part) / elapsed:,.0f} cancels/s; latency p50 {1e3 * pct(lat, 50):.2f} "
                  f"ms, p99 {1e3 * pct(lat, 99):.2f} ms; broker {1e6 * cpu / len(part):,.0f} "
                  f"CPU-us/cancel, {writes / len(part):.2f} write syscalls/cancel; status {dict(sorted(codes.items()))} "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)
        after = broker.msg_delayed()
        print(f"{label}msgDelayed {before:,} -> {after:,} (expected {before - applied:,}): "
              f"{'OK' if after == before - applied else 'MISMATCH'}")
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--concurrency", default="1,16",
                        help="comma-separated concurrent request counts (one round each)")
    parser.add_argument("--compare-with", dest="compare_with",
                        help="another checkout: its broker runs the same rounds after this "
                             "one's, alternated --rounds times (paired before/after)")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    here = (delayed_e2e.ROOT, delayed_e2e.PYTHON)
    for _ in range(args.rounds):
        delayed_e2e.ROOT, delayed_e2e.PYTHON = here
        run(args.messages, levels, "")
        if args.compare_with:
            other = Path(args.compare_with).resolve()
            venv = other / ".venv" / "bin" / "python"
            delayed_e2e.ROOT = other
            delayed_e2e.PYTHON = str(venv) if venv.exists() else sys.executable
            run(args.messages, levels, f"({args.compare_with}) ")


if __name__ == "__main__":
    main()
