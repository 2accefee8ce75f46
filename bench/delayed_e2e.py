"""End-to-end delayed-delivery benchmark through the official client against a broker subprocess.

Usage:  .venv/bin/python bench/delayed_e2e.py [--messages 20000] [--span-s 10] [--lead-ms 3000]
            [--tick-ms 0] [--early] [--trackers in-memory,bucket] [--pulsar]
            [--pending 1000000[,10000000]] [--restart-trackers bucket,in-memory] [--kill9]
            [--probes 100] [--later-s 20] [--herd 1000000] [--herd-consumers 4] [--no-lateness]
            [--no-restart] [--loop-turns]

Every Horae scenario starts ``python -m broker serve`` (the real CLI) on free 127.0.0.1 ports
with a TOML config written next to a fresh data directory, drives it with ``pulsar-client`` 3.x
and stops it with SIGTERM. The config used is printed.

Lateness (``--messages`` over ``--span-s``, once per tracker; due rate = messages / span): one
Shared consumer subscribes first, then one producer publishes ``--messages`` messages with
``deliver_at`` spread uniformly (seeded) over ``--span-s`` seconds starting ``--lead-ms`` after
the start of publishing (so publishing is over before the first one is due: the count due
before publishing ended is printed), using ``send_async`` with a bounded in-flight window. The
payload carries the deliver time; the consumer stamps each message when ``receive()`` returns it
to the application and acknowledges it (the process's heap, the payloads built to publish
among it, is collected and frozen before it receives: a full collection of it at the window's
start held the consumer for tens of ms). Lateness = receive time - deliver_at (ms, same host
clock; deliver_at has 1 ms precision, so up to 1 ms of it is that rounding). Also printed: the
broker's CPU seconds from the first due message received to the last, per message. The broker
runs with its default delayed-delivery settings (strict: never early) unless ``--tick-ms`` or
``--early`` (Pulsar's default early window) is given. ``--loop-turns`` also prints the
broker's event-loop turns in the due window (``bench/loop_turns.py``: the CPU time of each
turn, which the machine's load does not stretch, and the collections). Targets in the default configuration:
none early, p99 <= 5 ms, p99.9 <= 20 ms. ``--pulsar`` runs the same rounds on Pulsar 4.0
standalone (``bench/pulsar_peer.py``) with its defaults (tick 1 s, not strict: up to a tick
early) and on a namespace whose ``delayedDelivery`` policy sets a 1 ms tick (the comparable
precision), then prints the rows side by side (ratio = Pulsar / Horae: above 1 = Horae ahead).

Restart (``--restart-trackers`` x ``--pending``): ``--pending`` messages delayed 1-2 h (none
due during the run) are published while a Shared consumer is attached, so the dispatcher indexes
them all (waits until the subscription's ``msgDelayed`` reaches the count). Then ``--probes``
messages due 0.5 s later and ``--probes`` due ``--later-s`` later are published, the broker is
stopped (SIGTERM, or kill -9 with ``--kill9``) and restarted on the same data directory and
ports once the first probes are due. A consumer subscribes to the delayed subscription as soon
as the port listens. Printed, in seconds since ``Popen``: listening, subscribed, a publish
receipt, the first and the last probe that fell due while the broker was down; then the
lateness of the later probes, and how many messages came early or twice (expected: none).
Target: the first due message <= 1 s after the consumer subscribed, the later ones on time.
With ``--pulsar`` each round runs on Pulsar 4.0 standalone too, with its tracker of the same
name, on a namespace with a 1 ms tick, stopped and started again on the same data and ports
(``bench/pulsar_peer.py``'s ``relaunch``), then the rounds side by side.

Herd (``--herd N``, first tracker of ``--trackers``; with ``--pulsar`` then the same on Pulsar 4.0
standalone with a 1 ms tick, and the two side by side): N messages due in the same millisecond,
5 s after publishing ends if it runs at 3,000 msg/s or faster (``--herd-publish-rate``). From publishing's end a raw connection PINGs every 5 ms
(``bench/loop_stall.py``'s pinger: the event loop's stalls) and another producer sends one
message at a time on another topic; printed: how long the herd took to arrive, the consume
rate, and the PING and publish latencies before and during it (targets: all within 8 s,
publish p99 up by at most 5 ms). One official Python consumer acknowledging each message
takes about 25,000 msg/s and shares this process's GIL with the measuring threads:
``--herd-consumers N`` runs N consumers in processes of their own instead
(``--herd-receiver-queue``: their receiver queue, 1,000 by default). Printed too, over the
herd: the machine's busy cores (every process), the share of the time the broker's event loop
thread ran, the consumer processes' CPU per message, the broker's read / write system calls
per message, and the broker's part of the other topic's publishes (its write-latency histogram
of that topic over the herd: from the loop's read of a SEND to its receipt's write, so the
client's own time and the wait for the loop to read the socket are left out).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import loop_turns  # noqa: E402
from bench.processes import (  # noqa: E402
    admin_request,
    compile_sources,
    cpu_seconds,
    topic_stats,
    wait_port,
)

PYTHON = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv").exists() else sys.executable
TOPIC = "persistent://public/default/delayed-e2e"
SUB = "delayed-sub"
LATENESS_P99_TARGET_MS = 5.0
LATENESS_P999_TARGET_MS = 20.0
RESTART_TARGET_S = 3.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    return json.dumps(str(v))


class BrokerProc:
    """``python -m broker serve`` with a config file; same ports across restarts."""

    def __init__(self, data_dir: Path, config: dict[str, object]) -> None:
        self.data_dir = data_dir
        self.broker_port = free_port()
        self.web_port = free_port()
        self.conf = data_dir.parent / f"{data_dir.name}.toml"
        self.conf.write_text("".join(f"{k} = {toml_value(v)}\n" for k, v in config.items()))
        self.service_url = f"pulsar://127.0.0.1:{self.broker_port}"
        self.web_url = f"http://127.0.0.1:{self.web_port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        self.env: dict[str, str] = {}   # added to the process's environment
        self.topic = TOPIC              # the restart scenario's topic

    def start(self) -> float:
        """Start the process; returns the perf_counter time just before Popen."""
        args = [PYTHON, "-m", "broker", "serve", "--data-dir", str(self.data_dir),
                "--broker-port", str(self.broker_port), "--web-port", str(self.web_port),
                "--bind-address", "127.0.0.1", "--advertised-address", "127.0.0.1",
                "--config", str(self.conf), "--log-level", "WARNING"]
        compile_sources(ROOT)   # started as installed: .pyc present
        log = self.log_path.open("ab")
        self.started_at = time.perf_counter()
        self.proc = subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env})
        log.close()
        return self.started_at

    def wait_listening(self, timeout: float = 60.0) -> float:
        """Poll until the binary port accepts a TCP connection; returns that time."""
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited:\n{self.log_path.read_text(errors='replace')}")
            try:
                with socket.create_connection(("127.0.0.1", self.broker_port), timeout=0.2):
                    return time.perf_counter()
            except OSError:
                time.sleep(0.002)  # polling a port: there is nothing to wait on
        raise RuntimeError("broker did not start listening")

    def stop(self, *, kill: bool = False, timeout: float = 120.0) -> float:
        """SIGTERM (or SIGKILL) and wait; returns seconds the exit took."""
        if self.proc is None or self.proc.poll() is not None:
            return 0.0
        t = time.perf_counter()
        self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            print(f"  (broker did not exit within {timeout:.0f} s of SIGTERM: killed)")
        return time.perf_counter() - t

    def stats(self) -> dict[str, Any]:
        return topic_stats(self.web_url, self.topic)

    def msg_delayed(self) -> int:
        return _msg_delayed(self.web_url, self.topic)


def _msg_delayed(web_url: str, topic: str) -> int:
    """The subscription's ``msgDelayed`` (-1 while the stats cannot be read)."""
    try:
        return int(topic_stats(web_url, topic)["subscriptions"][SUB].get("msgDelayed", 0))
    except Exception:
        return -1


#: Pulsar's delayed-delivery tracker factories by the names ``--restart-trackers`` takes
PULSAR_TRACKERS = {
    "in-memory": "org.apache.pulsar.broker.delayed.InMemoryDelayedDeliveryTrackerFactory",
    "bucket": "org.apache.pulsar.broker.delayed.BucketDelayedDeliveryTrackerFactory",
}


class PulsarProc:
    """Pulsar 4.0 standalone behind :class:`BrokerProc`'s interface (bench/pulsar_peer.py):
    the first :meth:`start` launches it, writes a namespace whose delayed-delivery policy sets
    a 1 ms tick (the precision Horae's figures are held to) and waits until it serves; each
    later one starts the same process again on the same data and ports
    (:func:`bench.pulsar_peer.relaunch`). Readiness after a restart is the binary port
    accepting, as for Horae; the client's lookups wait for the rest."""

    def __init__(self, work: Path, name: str, extra: dict[str, str]) -> None:
        self.work, self.name, self.extra = work, name, extra
        self.broker: Any = None
        self.topic = "persistent://public/tick1/delayed-e2e"
        self.service_url = self.web_url = ""
        self.data_dir = work / name

    @property
    def pid(self) -> int:
        assert self.broker is not None
        return int(self.broker.pid)

    def start(self) -> float:
        from bench.pulsar_peer import launch_standalone, relaunch

        if self.broker is not None:
            return relaunch(self.broker, kill=False)
        t0 = time.perf_counter()
        self.broker = launch_standalone(self.work, name=self.name, extra=self.extra)
        self.service_url = self.broker.url
        self.web_url = f"http://{self.broker.host}:{self.broker.web_port}"
        _tick1_namespace(self.web_url)
        return t0

    def wait_listening(self, timeout: float = 240.0) -> float:
        wait_port(self.broker.port, self.broker.proc, self.broker.log, timeout)
        return time.perf_counter()

    def stop(self, *, kill: bool = False, timeout: float = 120.0) -> float:
        if self.broker is None or self.broker.proc.poll() is not None:
            return 0.0
        t = time.perf_counter()
        if kill:
            self.broker.proc.kill()
            self.broker.proc.wait(timeout)
        else:
            self.broker.stop()
        return time.perf_counter() - t

    def msg_delayed(self) -> int:
        return _msg_delayed(self.web_url, self.topic)


def client(url: str) -> Any:
    import pulsar

    return pulsar.Client(url, operation_timeout_seconds=30,
                         logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * len(s)) - 1))]


def publish(producer: Any, payloads: list[tuple[bytes, int | None]], window: int) -> int:
    """send_async with at most ``window`` in flight; returns the number of failed sends."""
    sem = threading.Semaphore(window)
    failed = [0]
    done = threading.Event()
    remaining = [len(payloads)]
    lock = threading.Lock()

    import pulsar

    def callback(res: Any, _msg_id: Any) -> None:
        if res != pulsar.Result.Ok:
            failed[0] += 1
        sem.release()
        with lock:
            remaining[0] -= 1
            if remaining[0] == 0:
                done.set()

    for payload, deliver_at in payloads:
        sem.acquire()
        if deliver_at is None:
            producer.send_async(payload, callback)
        else:
            producer.send_async(payload, callback, deliver_at=deliver_at)
    if payloads:
        done.wait(600)
    return failed[0]


# ------------------------------------------------------------------------------ lateness

def lateness_round(service_url: str, topic: str, label: str, pid: int,
                   args: argparse.Namespace) -> dict[str, Any]:
    """One lateness measurement against a running broker (Horae or Pulsar), and the broker's
    CPU seconds from the first due message received to the last."""
    import pulsar

    c = client(service_url)
    try:
        consumer = c.subscribe(topic, SUB, consumer_type=pulsar.ConsumerType.Shared,
                               receiver_queue_size=1000)
        producer = c.create_producer(topic, batching_enabled=False,
                                     max_pending_messages=2000, block_if_queue_full=True,
                                     send_timeout_millis=0)
        rnd = random.Random(7)
        start_ms = time.time_ns() // 1_000_000 + args.lead_ms
        span_ms = args.span_s * 1000
        deliver = [start_ms + rnd.randrange(span_ms) for _ in range(args.messages)]
        payloads = [(str(d).encode(), d) for d in deliver]
        t = time.perf_counter()
        failed = publish(producer, payloads, 1000)
        publish_s = time.perf_counter() - t
        published_late = sum(1 for d in deliver if d < start_ms - args.lead_ms + publish_s * 1000)
        gc.collect()
        gc.freeze()
        lateness: list[float] = []
        due_times: list[int] = []
        deadline = time.perf_counter() + args.span_s + args.lead_ms / 1000 + 60
        cpu_first = cpu_last = 0.0
        while len(lateness) < args.messages - failed and time.perf_counter() < deadline:
            try:
                msg = consumer.receive(timeout_millis=1000)
            except pulsar.Timeout:
                continue
            now = time.time_ns() / 1_000_000
            if not lateness:
                cpu_first = cpu_seconds(pid)
            lateness.append(now - int(msg.data()))
            due_times.append(int(msg.data()))
            consumer.acknowledge(msg)
        cpu_last = cpu_seconds(pid)
        producer.close()
        consumer.close()
    finally:
        c.close()
    early = sum(1 for x in lateness if x < 0)
    res = {
        "peer": label, "sent": args.messages, "failed_sends": failed,
        "due_per_s": round(args.messages / args.span_s),
        "publish_s": round(publish_s, 2), "due_before_published": published_late,
        "received": len(lateness),
        "p50_ms": round(pct(lateness, 50), 2) if lateness else None,
        "p99_ms": round(pct(lateness, 99), 2) if lateness else None,
        "p999_ms": round(pct(lateness, 99.9), 2) if lateness else None,
        "min_ms": round(min(lateness), 2) if lateness else None,
        "max_ms": round(max(lateness), 2) if lateness else None,
        "mean_ms": round(statistics.fmean(lateness), 2) if lateness else None,
        "early": early,
        "broker_cpu_us_per_due": round((cpu_last - cpu_first) / max(1, len(lateness)) * 1e6, 1),
        "due_window_ms": [start_ms, start_ms + span_ms],
    }
    ok = (res["received"] == args.messages and early == 0 and lateness
          and pct(lateness, 99) <= LATENESS_P99_TARGET_MS
          and pct(lateness, 99.9) <= LATENESS_P999_TARGET_MS)
    print(f"  [{label}] published {args.messages} in {publish_s:.2f} s ({failed} failed, "
          f"{published_late} due before publishing ended); received {len(lateness)}; due rate "
          f"{res['due_per_s']:,}/s; broker CPU {res['broker_cpu_us_per_due']} us per due message")
    print(f"  [{label}] lateness p50 {res['p50_ms']} ms  p99 {res['p99_ms']} ms  p99.9 "
          f"{res['p999_ms']} ms  min {res['min_ms']} ms  max {res['max_ms']} ms  early {early}"
          f"   (target p99 <= {LATENESS_P99_TARGET_MS:.0f} ms, p99.9 <= "
          f"{LATENESS_P999_TARGET_MS:.0f} ms, none early) -> {'OK' if ok else 'MISSED'}")
    late = sorted(d - start_ms for d, x in zip(due_times, lateness, strict=True)
                  if x > LATENESS_P999_TARGET_MS)
    if late:
        print(f"  [{label}] {len(late)} later than {LATENESS_P999_TARGET_MS:.0f} ms, due "
              f"+{late[0]} to +{late[-1]} ms into the due window (median +{late[len(late) // 2]})")
    res["late_due_offsets_ms"] = [late[0], late[len(late) // 2], late[-1]] if late else []
    res["ok"] = bool(ok)
    return res


def run_lateness(work: Path, tracker: str, args: argparse.Namespace) -> dict[str, Any]:
    config: dict[str, Any] = {"delayedDeliveryTrackerFactoryClassName": tracker}
    if args.tick_ms:
        config["delayedDeliveryTickTimeMillis"] = args.tick_ms
    if args.early:
        config["isDelayedDeliveryDeliverAtTimeStrict"] = False
    print(f"\n[lateness] horae tracker={tracker} config={config} messages={args.messages} "
          f"span={args.span_s} s lead={args.lead_ms} ms")
    broker = BrokerProc(work / f"lateness-{tracker}", config)
    turns_file = work / f"loop-turns-{tracker}.json"
    if args.loop_turns:
        broker.env = {"PYTHONPATH": str(loop_turns.SITE_DIR), loop_turns.ENV: str(turns_file)}
    broker.start()
    broker.wait_listening()
    try:
        assert broker.proc is not None
        res = lateness_round(broker.service_url, TOPIC + "-" + tracker, f"horae {tracker}",
                             broker.proc.pid, args)
    finally:
        broker.stop()
    if args.loop_turns and turns_file.exists():
        start, end = res["due_window_ms"]
        turns = loop_turns.summary(turns_file, start, end + max(100.0, res["max_ms"] or 0.0),
                                  res["received"])
        res["loop_turns"] = turns
        cpu, wall = turns["turn_cpu_ms"], turns["turn_wall_ms"]
        print(f"  [horae {tracker}] loop turns in the due window: {turns['turns']} measured; "
              f"CPU p50 {cpu['p50']} p99 {cpu['p99']} p99.9 {cpu['p999']} max {cpu['max']} ms "
              f"(over 2/4/6 ms: {'/'.join(map(str, turns['turns_cpu_over_ms'].values()))}); "
              f"wall p99 {wall['p99']} max {wall['max']} ms; loop thread "
              f"{turns['loop_cpu_us_per_message']} us per due message; full collections "
              f"{turns['full_collections_cpu_ms']} ms CPU")
    return res


def _tick1_namespace(web: str) -> None:
    """Pulsar's ``public/tick1``: a namespace whose delayed-delivery policy sets a 1 ms tick
    (the precision Horae's figures are held to)."""
    status = admin_request(web, "PUT", "/admin/v2/namespaces/public/tick1")
    assert status in (200, 204), f"create namespace: HTTP {status}"
    status = admin_request(web, "POST", "/admin/v2/namespaces/public/tick1/delayedDelivery",
                           {"active": True, "tickTime": 1})
    assert status in (200, 204), f"delayedDelivery policy: HTTP {status}"


def run_lateness_pulsar(work: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Pulsar 4.0 standalone (bench/pulsar_peer.py), once with its defaults (tick 1 s, not
    strict: up to a tick early) and once on a namespace whose delayed-delivery policy sets a
    1 ms tick (the comparable precision: at most 1 ms early)."""
    from bench.pulsar_peer import start_pulsar_standalone

    out = []
    print("\n[lateness] pulsar 4.0 standalone (starting)")
    with start_pulsar_standalone(work) as pulsar_broker:
        web = f"http://{pulsar_broker.host}:{pulsar_broker.web_port}"
        out.append(lateness_round(pulsar_broker.url, "persistent://public/default/delayed-e2e",
                                  "pulsar default tick 1000 ms", pulsar_broker.pid, args))
        _tick1_namespace(web)
        out.append(lateness_round(pulsar_broker.url, "persistent://public/tick1/delayed-e2e",
                                  "pulsar tick 1 ms", pulsar_broker.pid, args))
    return out


def print_side_by_side(rows: list[dict[str, Any]]) -> None:
    """Lateness per peer; each Pulsar row's ratios are against the first Horae row (Pulsar /
    Horae: above 1 = Horae ahead)."""
    horae = next((r for r in rows if r["peer"].startswith("horae")), None)
    print("\n| peer | due/s | received | early | p50 ms | p99 ms | p99.9 ms | max ms | "
          "CPU us/due | p99 ratio | p99.9 ratio | CPU ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratio99 = ratio999 = ratio_cpu = "-"
        if horae is not None and not r["peer"].startswith("horae") and horae["p99_ms"] \
                and r["p99_ms"] is not None:
            ratio99 = f"{r['p99_ms'] / horae['p99_ms']:.2f}x"
            ratio999 = f"{r['p999_ms'] / horae['p999_ms']:.2f}x"
            if horae["broker_cpu_us_per_due"]:
                ratio_cpu = f"{r['broker_cpu_us_per_due'] / horae['broker_cpu_us_per_due']:.2f}x"
        print(f"| {r['peer']} | {r['due_per_s']:,} | {r['received']} | {r['early']} | "
              f"{r['p50_ms']} | {r['p99_ms']} | {r['p999_ms']} | {r['max_ms']} | "
              f"{r['broker_cpu_us_per_due']} | {ratio99} | {ratio999} | {ratio_cpu} |")


# ------------------------------------------------------------------------------ restart

def fill_pending(broker: BrokerProc | PulsarProc, n: int, window: int) -> dict[str, Any]:
    import pulsar

    c = client(broker.service_url)
    try:
        consumer = c.subscribe(broker.topic, SUB, consumer_type=pulsar.ConsumerType.Shared)
        producer = c.create_producer(broker.topic, batching_enabled=False,
                                     max_pending_messages=window,
                                     block_if_queue_full=True, send_timeout_millis=0)
        now = time.time_ns() // 1_000_000
        rnd = random.Random(11)
        t = time.perf_counter()
        chunk = 50_000
        failed = 0
        for start in range(0, n, chunk):
            payloads = [(b"d%d" % (now + 3_600_000 + rnd.randrange(3_600_000)),
                         now + 3_600_000 + rnd.randrange(3_600_000))
                        for _ in range(min(chunk, n - start))]
            failed += publish(producer, payloads, window)
        publish_s = time.perf_counter() - t
        print(f"  published {n} delayed messages in {publish_s:.1f} s "
              f"({n / publish_s:,.0f} msg/s, {failed} failed)")
        t = time.perf_counter()
        delayed = -1
        deadline = time.perf_counter() + 600
        while time.perf_counter() < deadline:
            delayed = broker.msg_delayed()
            if delayed >= n - failed:
                break
            time.sleep(0.5)  # polling the admin API for the tracker count
        index_s = time.perf_counter() - t
        print(f"  tracker holds {delayed} (indexing finished {index_s:.1f} s after publishing)")
        producer.close()
        consumer.close()
    finally:
        c.close()
    return {"published": n - failed, "publish_s": round(publish_s, 1), "indexed": delayed}


def publish_probes(broker: BrokerProc | PulsarProc, due_in_ms: int, later_ms: int, n: int
                   ) -> tuple[int, int]:
    """After the fill: ``n`` messages due ``due_in_ms`` from now (due while the broker is down)
    and ``n`` due ``later_ms`` from now (due after the restart). Returns both deliver times."""
    c = client(broker.service_url)
    try:
        producer = c.create_producer(broker.topic, batching_enabled=False)
        now = time.time_ns() // 1_000_000
        due_at, later_at = now + due_in_ms, now + later_ms
        payloads = ([(b"due:%d" % due_at, due_at)] * n) + ([(b"later:%d" % later_at, later_at)] * n)
        failed = publish(producer, payloads, 1000)
        assert failed == 0, f"{failed} probe sends failed"
        producer.close()
    finally:
        c.close()
    return due_at, later_at


def measure_restart(broker: BrokerProc | PulsarProc, pending: int, probes: int, due_at: int,
                    later_at: int, watch_s: float) -> dict[str, Any]:
    """Restart on the same data; a consumer subscribes as soon as the port listens (again
    after each failed attempt, for up to 10 minutes: a broker may accept connections before
    it serves the topic). Times are seconds since ``Popen``; lateness of the probes due after
    the restart in ms."""
    import pulsar

    t0 = broker.start()
    listening = broker.wait_listening() - t0
    c = client(broker.service_url)
    first_due = all_due = None
    due_seen = later_seen = early = other = 0
    later_lateness: list[float] = []
    try:
        give_up = time.perf_counter() + 600
        while True:
            try:
                consumer = c.subscribe(broker.topic, SUB,
                                       consumer_type=pulsar.ConsumerType.Shared,
                                       receiver_queue_size=1000)
                break
            except pulsar.PulsarException:
                if time.perf_counter() > give_up:
                    raise
        subscribed = time.perf_counter() - t0
        producer = c.create_producer(broker.topic, batching_enabled=False)
        producer.send(b"after-restart-probe")
        t_publish = time.perf_counter() - t0
        deadline = time.perf_counter() + max(60.0, (later_at - time.time() * 1000) / 1000 + 60)
        while (due_seen < probes or later_seen < probes) and time.perf_counter() < deadline:
            try:
                msg = consumer.receive(timeout_millis=100)
            except pulsar.Timeout:
                continue
            now_ms = time.time_ns() / 1_000_000
            t = time.perf_counter() - t0
            data = msg.data()
            consumer.acknowledge(msg)
            if data.startswith(b"due:"):
                due_seen += 1
                first_due = first_due if first_due is not None else t
                if due_seen == probes:
                    all_due = t
            elif data.startswith(b"later:"):
                later_seen += 1
                later_lateness.append(now_ms - later_at)
                early += now_ms < later_at
            elif data.startswith(b"d"):
                early += 1   # one of the pending messages due in 1-2 h
            else:
                other += 1
        watch_end = time.perf_counter() + watch_s
        while time.perf_counter() < watch_end:
            try:
                msg = consumer.receive(timeout_millis=100)
            except pulsar.Timeout:
                continue
            consumer.acknowledge(msg)
            if msg.data().startswith((b"due:", b"later:", b"d")):
                early += 1  # a duplicate probe or a pending message: neither may come
        delayed = broker.msg_delayed()
        producer.close()
        consumer.close()
    finally:
        c.close()
    return {"listening_s": round(listening, 3), "subscribed_s": round(subscribed, 3),
            "publish_receipt_s": round(t_publish, 3),
            "first_due_s": round(first_due, 3) if first_due is not None else None,
            "all_due_s": round(all_due, 3) if all_due is not None else None,
            "due_received": due_seen, "later_received": later_seen,
            "later_lateness_max_ms": round(max(later_lateness), 1) if later_lateness else None,
            "later_lateness_min_ms": round(min(later_lateness), 1) if later_lateness else None,
            "early_or_duplicate": early, "msg_delayed_after": delayed,
            "expected_delayed": pending}


def run_restart(work: Path, tracker: str, pending: int, args: argparse.Namespace) -> dict[str, Any]:
    """The restart round (:func:`restart_round`) on a Horae broker with ``tracker``."""
    config: dict[str, Any] = {"delayedDeliveryTrackerFactoryClassName": tracker}
    if args.tick_ms:  # else the broker's default tick
        config["delayedDeliveryTickTimeMillis"] = args.tick_ms
    stop = "kill -9" if args.kill9 else "SIGTERM"
    print(f"\n[restart] horae tracker={tracker} config={config} pending={pending} stop={stop}")
    broker = BrokerProc(work / f"restart-{tracker}-{pending}", config)
    broker.start()
    broker.wait_listening()
    try:
        return restart_round(broker, f"horae {tracker}", tracker, pending, args)
    finally:
        broker.stop()


def run_restart_pulsar(work: Path, tracker: str, pending: int, args: argparse.Namespace
                       ) -> dict[str, Any]:
    """The restart round on Pulsar 4.0 standalone with its tracker of the same name
    (``PULSAR_TRACKERS``), on a namespace with a 1 ms tick (:class:`PulsarProc`)."""
    stop = "kill -9" if args.kill9 else "SIGTERM"
    extra = {"delayedDeliveryTrackerFactoryClassName": PULSAR_TRACKERS[tracker]}
    print(f"\n[restart] pulsar 4.0 standalone tracker={tracker} tick 1 ms pending={pending} "
          f"stop={stop} (starting)")
    broker = PulsarProc(work, f"pulsar-restart-{tracker}-{pending}", extra)
    broker.start()
    try:
        return restart_round(broker, f"pulsar {tracker}", tracker, pending, args)
    finally:
        broker.stop()


def restart_round(broker: BrokerProc | PulsarProc, label: str, tracker: str, pending: int,
                  args: argparse.Namespace) -> dict[str, Any]:
    """Fill ``pending`` delayed messages, publish the probes, stop the broker (SIGTERM, or
    kill -9 with ``--kill9``) and measure its restart (:func:`measure_restart`)."""
    stop = "kill -9" if args.kill9 else "SIGTERM"
    out: dict[str, Any] = {"peer": label, "tracker": tracker, "pending": pending, "stop": stop,
                           "fill": fill_pending(broker, pending, args.window)}
    du = sum(f.stat().st_size for f in broker.data_dir.rglob("*") if f.is_file())
    print(f"  [{label}] data dir {du / 1e6:.0f} MB")
    due_at, later_at = publish_probes(broker, 500, 500 + int(args.later_s * 1000), args.probes)
    stop_s = broker.stop(kill=args.kill9)
    while time.time() * 1000 <= due_at:   # the first probes fall due while the broker is down
        time.sleep(0.01)
    r = measure_restart(broker, out["fill"]["indexed"], args.probes, due_at, later_at,
                        args.watch_s)
    r["stop_s"] = round(stop_s, 2)
    ok = (r["first_due_s"] is not None and r["first_due_s"] - r["subscribed_s"] <= 1.0
          and r["due_received"] == args.probes and r["later_received"] == args.probes
          and r["early_or_duplicate"] == 0
          and r["later_lateness_max_ms"] is not None and r["later_lateness_max_ms"] <= 50)
    r["ok"] = ok
    print(f"  [{label}] after {stop}: listening {r['listening_s']} s, consumer subscribed "
          f"{r['subscribed_s']} s, publish+receipt {r['publish_receipt_s']} s, first due "
          f"{r['first_due_s']} s, all {args.probes} due {r['all_due_s']} s since process start; "
          f"{r['later_received']} due {args.later_s:.0f} s later: lateness "
          f"{r['later_lateness_min_ms']}..{r['later_lateness_max_ms']} ms; early or duplicate "
          f"{r['early_or_duplicate']}; msgDelayed now {r['msg_delayed_after']} (expected "
          f"{r['expected_delayed']}) -> {'OK' if ok else 'MISSED'} (target: first due <= 1 s "
          f"after the consumer subscribed, the later ones on time)")
    out[stop] = r
    return out


def print_restart_side_by_side(rows: list[dict[str, Any]]) -> None:
    """Restart rounds per peer and tracker; seconds since the process's ``Popen``."""
    print("\n| peer | pending | stop | listening s | subscribed s | first due s | all due s | "
          "later lateness max ms | early or duplicate | ok |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        r = row[row["stop"]]
        print(f"| {row['peer']} | {row['pending']:,} | {row['stop']} | {r['listening_s']} | "
              f"{r['subscribed_s']} | {r['first_due_s']} | {r['all_due_s']} | "
              f"{r['later_lateness_max_ms']} | {r['early_or_duplicate']} | {r['ok']} |")


# ------------------------------------------------------------------------------ herd

def _publish_latencies(service_url: str, topic: str, stop: threading.Event,
                       out: list[tuple[float, float]]) -> None:
    """One-at-a-time sends on ``topic`` until ``stop``: (perf_counter, seconds) each."""
    c = client(service_url)
    try:
        producer = c.create_producer(topic, batching_enabled=False)
        while not stop.is_set():
            t = time.perf_counter()
            producer.send(b"x")
            out.append((t, time.perf_counter() - t))
            stop.wait(0.005)
        producer.close()
    finally:
        c.close()


class BrokerScrape(NamedTuple):
    """One ``/metrics`` reading of a Horae broker during a herd (:func:`_scrape`)."""

    #: ``pulsar_storage_write_latency`` of the other topic: cumulative count per upper bound
    #: in ms, ``inf`` last (each publish from the loop's read of its SEND to its receipt's
    #: write, the broker's part of a publish alone)
    write_latency: dict[float, float]
    #: the entry cache's ``horae_storage_cache_hits_total`` / ``_misses_total`` (whether a
    #: herd is read from memory or from disk)
    cache_hits: float
    cache_misses: float


NO_SCRAPE = BrokerScrape({}, 0.0, 0.0)
"""What a peer without Horae's series reads as."""


def _scrape(web_url: str, topic: str) -> BrokerScrape:
    """The broker's figures of *topic* and its entry cache (:class:`BrokerScrape`)."""
    with urllib.request.urlopen(f"{web_url}/metrics", timeout=30) as r:
        text = r.read().decode()
    label = f'topic="{topic}"'
    latency: dict[float, float] = {}
    cache = {"hits": 0.0, "misses": 0.0}
    for line in text.splitlines():
        if line.startswith("pulsar_storage_write_latency_bucket{") and label in line:
            le = line.split('le="', 1)[1].split('"', 1)[0]
            latency[float(le)] = float(line.rsplit(" ", 1)[1])
        elif line.startswith(("horae_storage_cache_hits_total{",
                              "horae_storage_cache_misses_total{")):
            cache[line[len("horae_storage_cache_"):].split("_", 1)[0]] = float(
                line.rsplit(" ", 1)[1])
    return BrokerScrape(latency, cache["hits"], cache["misses"])


def _broker_part(start: dict[float, float], end: dict[float, float]) -> tuple[int, float | None,
                                                                               float | None]:
    """(publishes, share answered within 5 ms, the bucket bound their p99 falls in) between
    two write-latency histograms (:attr:`BrokerScrape.write_latency`)."""
    delta = {le: end.get(le, 0.0) - start.get(le, 0.0) for le in sorted(end)}
    count = int(delta.get(float("inf"), 0.0))
    if not count:
        return 0, None, None
    p99 = next((le for le, n in delta.items() if n >= 0.99 * count), None)
    return count, round(delta.get(5.0, 0.0) / count, 3), p99


def _syscalls(pid: int) -> tuple[int, int]:
    """Read and write system calls of process ``pid`` so far (``/proc/PID/io`` syscr, syscw:
    socket reads and writes, and the storage's)."""
    with open(f"/proc/{pid}/io") as fh:
        fields = dict(line.split(": ") for line in fh.read().splitlines())
    return int(fields["syscr"]), int(fields["syscw"])


def _loop_thread_cpu(pid: int) -> float:
    """CPU seconds of process ``pid``'s main thread (the broker's event loop) so far."""
    with open(f"/proc/{pid}/task/{pid}/stat", "rb") as fh:
        stat = fh.read()
    fields = stat[stat.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine_busy() -> tuple[float, float, float]:
    """(busy CPU seconds of every core, wall seconds, stolen CPU seconds) so far, from
    ``/proc/stat`` (busy: all but idle and iowait; stolen: time the hypervisor ran something
    else while this machine's cores had work, part of busy)."""
    with open("/proc/stat") as fh:
        cpu = [int(x) for x in fh.readline().split()[1:]]
    ticks = os.sysconf("SC_CLK_TCK")
    return (sum(cpu) - cpu[3] - cpu[4]) / ticks, time.monotonic(), cpu[7] / ticks


def _herd_consumer(service_url: str, topic: str, due_at: int, ready: Any, stop: Any,
                   received: Any, results: Any, receiver_queue: int = 1000) -> None:
    """One Shared consumer of the herd in a process of its own (``--herd-consumers``): the
    consume rate is not bound by one Python client, and the measuring threads do not share its
    GIL. Adds to ``received`` as it goes; puts (count, early, first, last, CPU seconds of this
    process -- every thread of the client -- from the first message to the last) on
    ``results``."""
    import pulsar

    c = client(service_url)
    got = early = pending = 0
    first = last = None
    cpu_first = cpu_last = 0.0
    try:
        consumer = c.subscribe(topic, SUB, consumer_type=pulsar.ConsumerType.Shared,
                               receiver_queue_size=receiver_queue)
        ready.release()
        while not stop.is_set():
            try:
                msg = consumer.receive(timeout_millis=200)
            except pulsar.Timeout:
                if pending:                     # idle: report the remainder
                    with received.get_lock():
                        received.value += pending
                    pending = 0
                continue
            now = time.perf_counter()
            if time.time_ns() // 1_000_000 < due_at:
                early += 1
            if first is None:
                first, cpu_first = now, time.process_time()
            last = now
            got += 1
            pending += 1
            consumer.acknowledge(msg)
            if pending >= 500:
                cpu_last = time.process_time()
                with received.get_lock():
                    received.value += pending
                pending = 0
        if pending:
            cpu_last = time.process_time()
        with received.get_lock():
            received.value += pending
        consumer.close()
    finally:
        c.close()
        results.put((got, early, first, last, max(0.0, cpu_last - cpu_first)))


def _herd_consumers(service_url: str, topic: str, count: int, due_at: int,
                    receiver_queue: int = 1000) -> tuple[Any, Any, Any, list[Any]]:
    """Start ``count`` consumer processes and wait until each has subscribed."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    ready, stop, received, results = ctx.Semaphore(0), ctx.Event(), ctx.Value("q", 0), ctx.Queue()
    procs = [ctx.Process(target=_herd_consumer,
                         args=(service_url, topic, due_at, ready, stop, received, results,
                               receiver_queue), daemon=True)
             for _ in range(count)]
    for proc in procs:
        proc.start()
    for _ in procs:
        if not ready.acquire(timeout=60):
            raise RuntimeError("a herd consumer process did not subscribe")
    return stop, received, results, procs


@dataclass(frozen=True)
class HerdTarget:
    """A running broker a herd round is measured on."""

    label: str
    service_url: str
    web_url: str
    pid: int
    #: the herd's topic; the one-at-a-time publishes go to ``topic + "-other"``
    topic: str
    #: Horae: its write-latency histogram (the broker's part of a publish) and its event-loop
    #: thread (the process's main thread) are read; a JVM has neither
    horae: bool


def run_herd(work: Path, tracker: str, args: argparse.Namespace) -> dict[str, Any]:
    """The herd round (:func:`herd_round`) on a Horae broker with ``tracker``."""
    config: dict[str, Any] = {"delayedDeliveryTrackerFactoryClassName": tracker}
    print(f"\n[herd] horae tracker={tracker} config={config} messages={args.herd} consumer "
          f"processes={args.herd_consumers or 'none (one consumer in this process)'}"
          + (f" receiver queue {args.herd_receiver_queue}" if args.herd_consumers else ""))
    broker = BrokerProc(work / f"herd-{tracker}", config)
    broker.start()
    broker.wait_listening()
    try:
        assert broker.proc is not None
        res = herd_round(HerdTarget(f"horae {tracker}", broker.service_url, broker.web_url,
                                    broker.proc.pid, TOPIC + "-herd", horae=True), args)
    finally:
        broker.stop()
    res["tracker"] = tracker
    return res


def run_herd_pulsar(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The herd round on Pulsar 4.0 standalone (bench/pulsar_peer.py: its defaults, the
    bookie's journal synced before a receipt), on a namespace whose delayed-delivery policy
    sets a 1 ms tick: the precision Horae's herd is held to (Pulsar's default 1 s tick, not
    strict, would hand the herd out up to a second before its time)."""
    from bench.pulsar_peer import start_pulsar_standalone

    print(f"\n[herd] pulsar 4.0 standalone, tick 1 ms (starting) messages={args.herd} consumer "
          f"processes={args.herd_consumers or 'none (one consumer in this process)'}")
    with start_pulsar_standalone(work, name="pulsar-herd") as pulsar_broker:
        web = f"http://{pulsar_broker.host}:{pulsar_broker.web_port}"
        _tick1_namespace(web)
        res = herd_round(HerdTarget("pulsar tick 1 ms", pulsar_broker.url, web,
                                    pulsar_broker.pid, "persistent://public/tick1/delayed-e2e-herd",
                                    horae=False), args)
    res["tracker"] = "pulsar in-memory"
    return res


def herd_round(target: HerdTarget, args: argparse.Namespace) -> dict[str, Any]:
    """``--herd`` messages all due in the same millisecond. Meanwhile a PING every 5 ms on a
    raw connection (bench/loop_stall.py's pinger: the event loop's stalls) and one-at-a-time
    publishes on another topic (their latency): both before the herd falls due (quiet) and
    while it is delivered."""
    import pulsar

    sys.path.insert(0, str(ROOT / "tests" / "broker"))
    from bench.loop_stall import pinger

    label, pid, herd_topic = target.label, target.pid, target.topic
    other_topic = herd_topic + "-other"
    c = client(target.service_url)
    stop = threading.Event()
    pings: list[float] = []
    sends: list[tuple[float, float]] = []
    threads = [threading.Thread(target=pinger, args=(target.service_url, stop, pings),
                                daemon=True),
               threading.Thread(target=_publish_latencies,
                                args=(target.service_url, other_topic, stop, sends),
                                daemon=True)]
    procs: list[Any] = []
    consumer: Any = None
    try:
        # due 5 s after publishing ends if it runs at >= --herd-publish-rate (3,000 msg/s)
        lead_ms = args.herd * 1000 // max(1, args.herd_publish_rate) + 5000
        due_at = time.time_ns() // 1_000_000 + lead_ms
        if args.herd_consumers:
            p_stop, p_received, p_results, procs = _herd_consumers(
                target.service_url, herd_topic, args.herd_consumers, due_at,
                args.herd_receiver_queue)
            due_at = time.time_ns() // 1_000_000 + lead_ms
        else:
            consumer = c.subscribe(herd_topic, SUB, consumer_type=pulsar.ConsumerType.Shared,
                                   receiver_queue_size=1000)
        producer = c.create_producer(herd_topic, batching_enabled=False,
                                     max_pending_messages=5000, block_if_queue_full=True,
                                     send_timeout_millis=0)
        t = time.perf_counter()
        failed = publish(producer, [(b"h", due_at)] * args.herd, 5000)
        publish_s = time.perf_counter() - t
        now_ms = time.time_ns() // 1_000_000
        if now_ms >= due_at - 3000:
            print(f"  [{label}] publishing took {publish_s:.1f} s: the quiet window is shorter "
                  f"than 3 s")
        for th in threads:
            th.start()
        herd_start = time.perf_counter() + (due_at - time.time_ns() // 1_000_000) / 1000
        print(f"  [{label}] published; the herd falls due in "
              f"{herd_start - time.perf_counter():.1f} s (broker pid {pid})", flush=True)
        stop.wait(max(0.0, herd_start - time.perf_counter() - 0.01))
        quiet_count = len(pings)
        scrape_start = _scrape(target.web_url, other_topic) if target.horae else NO_SCRAPE
        cpu_start = cpu_seconds(pid)
        io_start, busy_start = _syscalls(pid), _machine_busy()
        loop_start = _loop_thread_cpu(pid)
        got = early = 0
        client_cpu = 0.0
        first = last = None
        deadline = herd_start + 600
        while consumer is None and time.perf_counter() < deadline \
                and p_received.value < args.herd - failed:
            time.sleep(0.05)
        while consumer is not None and got < args.herd - failed \
                and time.perf_counter() < deadline:
            try:
                msg = consumer.receive(timeout_millis=1000)
            except pulsar.Timeout:
                continue
            now = time.perf_counter()
            if time.time_ns() // 1_000_000 < due_at:
                early += 1
            first = first if first is not None else now
            last = now
            got += 1
            consumer.acknowledge(msg)
        cpu_end = cpu_seconds(pid)
        io_end, busy_end = _syscalls(pid), _machine_busy()
        loop_end = _loop_thread_cpu(pid)
        scrape_end = _scrape(target.web_url, other_topic) if target.horae else NO_SCRAPE
        if procs:
            p_stop.set()
            for _ in procs:
                n, e, f, la, cpu = p_results.get(timeout=60)
                client_cpu += cpu
                got += n
                early += e
                if f is not None:
                    first = f if first is None else min(first, f)
                    last = la if last is None else max(last, la)
        after_end = time.perf_counter() + 1.0
        stop.wait(max(0.0, after_end - time.perf_counter()))
        stop.set()
        for th in threads:
            th.join(60)
        producer.close()
        if consumer is not None:
            consumer.close()
    finally:
        stop.set()
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
        c.close()
    quiet_pings = [x * 1000 for x in pings[:quiet_count]] or [0.0]
    herd_pings = [x * 1000 for x in pings[quiet_count:]] or [0.0]
    herd_end = last if last is not None else herd_start
    quiet_sends = [d * 1000 for t0, d in sends if t0 < herd_start]
    herd_sends = [d * 1000 for t0, d in sends if herd_start <= t0 <= herd_end]
    deliver_s = (herd_end - herd_start) if last is not None else None
    broker_count, broker_within_5ms, broker_p99_bound = _broker_part(scrape_start.write_latency,
                                                                   scrape_end.write_latency)
    loop_cpu = (loop_end - loop_start) if target.horae else None
    res = {"peer": label, "messages": args.herd, "failed": failed,
           "publish_s": round(publish_s, 1), "received": got, "early": early,
           "first_after_due_ms": round((first - herd_start) * 1000, 1) if first else None,
           "all_delivered_s": round(deliver_s, 2) if deliver_s is not None else None,
           "consume_per_s": round(got / deliver_s) if deliver_s else None,
           "broker_cpu_us_per_message": round((cpu_end - cpu_start) / max(1, got) * 1e6, 1),
           "ping_quiet_max_ms": round(max(quiet_pings), 1),
           "ping_quiet_p99_ms": round(pct(quiet_pings, 99), 1),
           "ping_max_ms": round(max(herd_pings), 1),
           "ping_p99_ms": round(pct(herd_pings, 99), 1),
           "publish_quiet_p99_ms": round(pct(quiet_sends, 99), 2) if quiet_sends else None,
           "publish_herd_p50_ms": round(pct(herd_sends, 50), 2) if herd_sends else None,
           "publish_herd_p99_ms": round(pct(herd_sends, 99), 2) if herd_sends else None,
           "publish_herd_count": len(herd_sends), "consumer_processes": args.herd_consumers,
           "publish_herd_broker_count": broker_count,
           "publish_herd_broker_within_5ms": broker_within_5ms,
           "publish_herd_broker_p99_bound_ms": broker_p99_bound,
           "client_cpu_us_per_message": round(client_cpu / max(1, got) * 1e6, 1) if procs else None,
           "broker_loop_cpu_us_per_message": (round(loop_cpu / max(1, got) * 1e6, 1)
                                              if loop_cpu is not None else None),
           "broker_loop_busy": (round(loop_cpu / max(1e-9, busy_end[1] - busy_start[1]), 2)
                                if loop_cpu is not None else None),
           "machine_busy_cores": round((busy_end[0] - busy_start[0])
                                       / max(1e-9, busy_end[1] - busy_start[1]), 2),
           "machine_steal_cores": round((busy_end[2] - busy_start[2])
                                        / max(1e-9, busy_end[1] - busy_start[1]), 3),
           "broker_cache_hits": int(scrape_end.cache_hits - scrape_start.cache_hits),
           "broker_cache_misses": int(scrape_end.cache_misses - scrape_start.cache_misses),
           "broker_reads_per_message": round((io_end[0] - io_start[0]) / max(1, got), 3),
           "broker_writes_per_message": round((io_end[1] - io_start[1]) / max(1, got), 3)}
    print(f"  [{label}] published {args.herd} in {publish_s:.1f} s; received {got} "
          f"({early} early), the first {res['first_after_due_ms']} ms after the due time, all within "
          f"{res['all_delivered_s']} s ({res['consume_per_s']} msg/s; target all within 8 s); "
          f"broker CPU {res['broker_cpu_us_per_message']} us per message (due to all received), "
          f"its event loop thread's {res['broker_loop_cpu_us_per_message']}")
    print(f"  [{label}] meanwhile: the machine's cores busy {res['machine_busy_cores']} (all processes; "
          f"stolen by the hypervisor {res['machine_steal_cores']}), "
          f"the broker's event loop thread {res['broker_loop_busy']} of the time; "
          f"the consumer processes' CPU {res['client_cpu_us_per_message']} us per message; the "
          f"broker's read / write system calls {res['broker_reads_per_message']} / "
          f"{res['broker_writes_per_message']} per message")
    print(f"  [{label}] other topic's one-at-a-time publish p99: quiet {res['publish_quiet_p99_ms']} ms, "
          f"during the herd {res['publish_herd_p99_ms']} ms (p50 {res['publish_herd_p50_ms']}, "
          f"{len(herd_sends)} sends; target +5 ms at most); PING round trip during the herd "
          f"p99 {res['ping_p99_ms']} ms, max {res['ping_max_ms']} ms (quiet p99 "
          f"{res['ping_quiet_p99_ms']}, max {res['ping_quiet_max_ms']} ms)")
    if target.horae:
        print(f"  [{label}] the broker's part of those publishes (its write-latency histogram "
              f"of the other topic over the herd: SEND read to receipt written): "
              f"{broker_within_5ms} of {broker_count} within 5 ms, p99 in the bucket up to "
              f"{broker_p99_bound} ms; the entry cache over the herd: {res['broker_cache_hits']} "
              f"entries read from it, {res['broker_cache_misses']} lookups missed (read from "
              f"disk)")
    return res


def print_herd_side_by_side(rows: list[dict[str, Any]]) -> None:
    """The herd per peer; ratios Pulsar / Horae (above 1 = Horae ahead)."""
    horae = rows[0]
    print("\n| peer | received | early | all delivered in s | consume msg/s | broker CPU us/msg "
          "| publish p99 quiet -> herd ms | PING p99 herd ms | time ratio | CPU ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        time_ratio = cpu_ratio = "-"
        if r is not horae and horae["all_delivered_s"] and r["all_delivered_s"]:
            time_ratio = f"{r['all_delivered_s'] / horae['all_delivered_s']:.2f}x"
            if horae["broker_cpu_us_per_message"]:
                cpu = r["broker_cpu_us_per_message"] / horae["broker_cpu_us_per_message"]
                cpu_ratio = f"{cpu:.2f}x"
        print(f"| {r['peer']} | {r['received']} | {r['early']} | {r['all_delivered_s']} | "
              f"{r['consume_per_s']} | {r['broker_cpu_us_per_message']} | "
              f"{r['publish_quiet_p99_ms']} -> {r['publish_herd_p99_ms']} | {r['ping_p99_ms']} | "
              f"{time_ratio} | {cpu_ratio} |")





def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--messages", type=int, default=20_000)
    p.add_argument("--span-s", type=int, default=10, dest="span_s")
    p.add_argument("--lead-ms", type=int, default=3000, dest="lead_ms")
    p.add_argument("--tick-ms", type=int, default=0, dest="tick_ms",
                   help="delayedDeliveryTickTimeMillis for the lateness run (0: the broker's default)")
    p.add_argument("--early", action="store_true",
                   help="lateness run with isDelayedDeliveryDeliverAtTimeStrict=false (Pulsar's default)")
    p.add_argument("--trackers", default="in-memory,bucket")
    p.add_argument("--pulsar", action="store_true",
                   help="lateness: also Pulsar 4.0 standalone, default tick and a 1 ms tick; "
                        "herd and restart: also Pulsar 4.0 standalone with a 1 ms tick (restart: "
                        "with its tracker of the same name)")
    p.add_argument("--pending", default="1000000",
                   help="restart: comma-separated pending counts, one run each")
    p.add_argument("--restart-trackers", default="bucket", dest="restart_trackers")
    p.add_argument("--probes", type=int, default=100,
                   help="restart: messages due while the broker is down, and as many due later")
    p.add_argument("--later-s", type=float, default=20.0, dest="later_s",
                   help="restart: the later probes are due this long after they were published")
    p.add_argument("--window", type=int, default=5000, help="send_async in-flight window")
    p.add_argument("--watch-s", type=float, default=2.0, dest="watch_s")
    p.add_argument("--kill9", action="store_true", help="restart after kill -9 (else SIGTERM)")
    p.add_argument("--no-lateness", action="store_true", dest="no_lateness")
    p.add_argument("--no-restart", action="store_true", dest="no_restart")
    p.add_argument("--herd", type=int, default=0,
                   help="also: this many messages due in the same millisecond (0: no herd run)")
    p.add_argument("--herd-consumers", type=int, default=0, dest="herd_consumers",
                   help="herd: this many consumer processes (0: one consumer in this process)")
    p.add_argument("--herd-publish-rate", type=int, default=3000, dest="herd_publish_rate",
                   help="herd: the publish rate (msg/s) the herd's due time is set for: due "
                        "N / rate seconds after publishing starts, plus 5 (a faster publish "
                        "leaves a longer quiet window before it)")
    p.add_argument("--herd-receiver-queue", type=int, default=1000, dest="herd_receiver_queue",
                   help="herd: each consumer process's receiver_queue_size")
    p.add_argument("--loop-turns", action="store_true", dest="loop_turns",
                   help="lateness: also the broker's loop turns in the due window "
                        "(bench/loop_turns.py): CPU and wall time per turn, collections")
    p.add_argument("--keep", action="store_true", help="keep the data directories")
    p.add_argument("--json", help="also write the results to this file")
    args = p.parse_args()

    work = Path(tempfile.mkdtemp(prefix="horae-delayed-e2e-"))
    results: dict[str, Any] = {"args": vars(args)}
    try:
        if not args.no_lateness:
            rows = []
            for tracker in args.trackers.split(","):
                rows.append(run_lateness(work, tracker.strip(), args))
                results[f"lateness-{tracker}"] = rows[-1]
            if args.pulsar:
                for r in run_lateness_pulsar(work, args):
                    rows.append(r)
                    results[f"lateness-{r['peer']}"] = r
            print_side_by_side(rows)
        if args.herd:
            results["herd"] = run_herd(work, args.trackers.split(",")[0].strip(), args)
            if args.pulsar:
                results["herd-pulsar"] = run_herd_pulsar(work, args)
                print_herd_side_by_side([results["herd"], results["herd-pulsar"]])
        if not args.no_restart:
            rows = []
            for tracker in args.restart_trackers.split(","):
                for pending in args.pending.split(","):
                    rows.append(run_restart(work, tracker.strip(), int(pending), args))
                    results[f"restart-{tracker}-{pending}"] = rows[-1]
                    if args.pulsar:
                        rows.append(run_restart_pulsar(work, tracker.strip(), int(pending), args))
                        results[f"restart-pulsar-{tracker}-{pending}"] = rows[-1]
            print_restart_side_by_side(rows)
    finally:
        if args.keep:
            print(f"data kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print("\n" + json.dumps(results, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
