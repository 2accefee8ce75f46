"""The broker's work per one-at-a-time message, per thread: CPU and Python opcodes.

Usage:  .venv/bin/python bench/lone_path.py [--mode sync|e2e] [--messages 3000]
            [--warmup 500] [--opcodes] [--top 0]

Theory of operation
-------------------
The broker runs in this process (:func:`broker.embed.start_broker`, fsync on, the defaults);
the official client (pulsar-client, 1 KiB messages, batching off) runs in a child process, so
this process holds the broker's threads only. ``--mode sync`` sends one message at a time
(the sync-send workload of ``compare_peer.py``); ``--mode e2e`` sends one at a time while a
Shared consumer receives and acknowledges each (its end-to-end workload). After
``--warmup`` uncounted messages the child waits for a go, sends ``--messages`` more and
reports its rate and latency percentiles.

Around the counted messages the CPU time of the event loop's thread and of the storage
write thread is read from ``/proc/self/task/TID/stat`` (user and system, per message). That
figure moves with the machine's load (caches, preemption); ``--opcodes`` also counts the
Python bytecode instructions each of the two threads executes per message
(``sys.settrace`` with ``f_trace_opcodes``, installed on each thread), which no other process
can change: the interpreter's share of the work, for comparing two trees on a busy machine
(the tracing slows the broker several-fold, so its CPU and latency figures then mean
nothing). ``--top N`` lists the N functions that run the most opcodes per message.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Callable

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from opcode_probe import OpcodeCounter

from broker.embed import BrokerHandle, start_broker
from storage.writer import CallInWriter

CLIENT = textwrap.dedent(r'''
    import os, struct, sys, threading, time
    import pulsar
    url, mode, n, warm = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    client = pulsar.Client(url, operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    payload = os.urandom(1024)
    topic = "persistent://public/default/lone-" + mode
    latencies = []
    if mode == "sync":
        producer = client.create_producer(topic, batching_enabled=False)
        def run(k, record):
            for _ in range(k):
                t = time.perf_counter()
                producer.send(payload)
                if record:
                    latencies.append(time.perf_counter() - t)
    else:
        consumer = client.subscribe(topic, "e2e", consumer_type=pulsar.ConsumerType.Shared,
                                    receiver_queue_size=1000)
        producer = client.create_producer(topic, batching_enabled=False)
        body = payload[8:]
        def run(k, record):
            def produce():
                for _ in range(k):
                    producer.send(struct.pack("<q", time.perf_counter_ns()) + body)
            sender = threading.Thread(target=produce)
            sender.start()
            for _ in range(k):
                msg = consumer.receive(30000)
                if record:
                    sent = struct.unpack_from("<q", msg.data())[0]
                    latencies.append((time.perf_counter_ns() - sent) / 1e9)
                consumer.acknowledge(msg)
            sender.join()
    run(warm, False)
    print("ready", flush=True)
    sys.stdin.readline()
    t0 = time.perf_counter()
    run(n, True)
    elapsed = time.perf_counter() - t0
    latencies.sort()
    print("done %.1f %.1f %.1f" % (n / elapsed, latencies[len(latencies) // 2] * 1e6,
                                   latencies[len(latencies) * 99 // 100] * 1e6), flush=True)
    sys.stdin.readline()
    client.close()
''')

_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def thread_cpu(tid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of thread *tid* of this process."""
    with open(f"/proc/self/task/{tid}/stat", "rb") as fh:
        stat = fh.read()
    fields = stat[stat.rindex(b")") + 2:].split()
    return int(fields[11]) / _TICKS_PER_S, int(fields[12]) / _TICKS_PER_S


def in_writer(handle: BrokerHandle, fn: Callable[[], None]) -> None:
    """Run *fn* in the storage write thread (a control record, handled in queue order)."""
    ran = threading.Event()

    def call() -> None:
        fn()
        ran.set()

    writer = handle.call(lambda: handle.service.store.writer)
    handle.call(lambda: writer._control(CallInWriter(call)))
    if not ran.wait(30):
        raise RuntimeError("the write thread did not run the probe")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", choices=("sync", "e2e"), default="sync")
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--opcodes", action="store_true")
    parser.add_argument("--top", type=int, default=0)
    args = parser.parse_args(argv)
    n = args.messages
    with tempfile.TemporaryDirectory(prefix="lone-path-") as tmp, \
            start_broker(data_dir=pathlib.Path(tmp) / "data") as handle:
        tids = {"loop": handle.call(threading.get_native_id)}
        found: list[int] = []
        in_writer(handle, lambda: found.append(threading.get_native_id()))
        tids["write thread"] = found[0]
        child = subprocess.Popen(
            [sys.executable, "-c", CLIENT, handle.service_url, args.mode, str(n),
             str(args.warmup)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert child.stdin is not None and child.stdout is not None
        try:
            if child.stdout.readline().strip() != "ready":
                raise RuntimeError("the client failed during the warm-up")
            counters = {name: OpcodeCounter() for name in tids}
            if args.opcodes:
                handle.call(sys.settrace, counters["loop"])
                in_writer(handle, lambda: sys.settrace(counters["write thread"]))
                for counter in counters.values():
                    counter.reset()
            before = {name: thread_cpu(tid) for name, tid in tids.items()}
            child.stdin.write("go\n")
            child.stdin.flush()
            reply = child.stdout.readline().split()
            after = {name: thread_cpu(tid) for name, tid in tids.items()}
            if args.opcodes:
                handle.call(sys.settrace, None)
                in_writer(handle, lambda: sys.settrace(None))
            child.stdin.write("bye\n")
            child.stdin.flush()
            child.wait(60)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        if len(reply) != 4 or reply[0] != "done":
            raise RuntimeError(f"the client failed: {reply}")
        rate, p50, p99 = map(float, reply[1:])
        if args.opcodes:   # traced: the times mean nothing
            print(f"{args.mode}: {n} messages, traced, load {os.getloadavg()[0]:.1f}")
        else:
            print(f"{args.mode}: {n} messages, {rate:,.0f} msg/s, p50 {p50:,.0f} us, "
                  f"p99 {p99:,.0f} us, load {os.getloadavg()[0]:.1f}")
        for name in tids:
            if args.opcodes:
                opcodes = sum(counters[name].per_code.values()) / n
                print(f"  {name}: {opcodes:,.0f} Python opcodes/msg")
            else:
                user = (after[name][0] - before[name][0]) / n * 1e6
                system = (after[name][1] - before[name][1]) / n * 1e6
                print(f"  {name}: CPU {user + system:.0f} us/msg ({user:.0f} user, "
                      f"{system:.0f} system)")
            for code, count in counters[name].per_code.most_common(args.top):
                where = "/".join(code.co_filename.split("/")[-2:])
                print(f"    {count / n:8.1f}  {code.co_qualname} ({where}:{code.co_firstlineno})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
