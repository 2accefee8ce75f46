"""A whole broker restarted on a large delayed index: from the process's start, when the first
due message reaches a consumer through the wire, when the index serves, how the messages due
while it was down catch up, and what the broker's CPU was at each point.

Usage: .venv/bin/python bench/delayed_restart_broker.py --store DIR --pending N
           [--ack-every 10] [--cancel-every 0] [--delays hour|fixed|year] [--work DIR]
           [--permits 1000] [--after-s 2] [--timeout-s 600] [--rounds 1] [--keep]
           [--py-spy FILE] [--py-spy-rate 50] [--broker-root CHECKOUT] [--compare-with CHECKOUT]

``--store DIR`` is a store ``bench/delayed_restart.py --store DIR --build-only`` built (its
``built`` directory and ``base``; the shape options must be the ones it was built with). Each
round copies ``DIR/built`` to ``WORK/run/horae/store`` (the segment store of a broker whose
data directory is ``WORK/run/horae``: ``broker/server.py``'s ``STORE_DIR_NAME``; then
``os.sync()``: no writeback of the copy ahead of the broker's fsyncs) and starts the real
broker process there as bench/brokers.py does (``python -m broker serve`` on free
loopback ports, its own process) with three settings of its config file:

- ``delayedDeliveryTrackerFactoryClassName``: the bucket tracker (Pulsar's and Horae's default
  is the in-memory one, which keeps nothing across a restart and would read every entry
  again);
- ``delayedDeliveryTickTimeMillis = 1`` and ``isDelayedDeliveryDeliverAtTimeStrict = true``:
  the tracker of ``bench/delayed_restart.py`` (nothing handed out before its time);
- the managed ledger and bucket sizes are the defaults the store was built with.

The store's deliver times are fixed when it is built (``base``: the first 1% of the span
before it). The broker runs with its delayed-delivery clock (``broker.delayed.tracker``'s
wall clock, the one every tracker reads) set back so that it reads ``base + 1`` ms at the
process's start, as ``bench/delayed_restart.py``'s recovery does, and runs forward in real time
from there; nothing else in the broker is changed. The bench's cursor ``sub`` is the durable
subscription ``sub`` (a broker names a subscription's cursor after it); the topic is
``delayed_restart.TOPIC`` in ``public/default``, loaded (with its subscription and its
tracker's recovery) by the consumer's lookup and subscribe, as after a real restart where the
clients reconnect at once.

The consumer speaks the raw wire (``bench/wire_clients.py``'s connection: no client library in
the measurement, ~1-2 µs of this process's CPU per message): it connects as soon as the port
accepts, LOOKUPs, SUBSCRIBEs Shared to ``sub``, keeps ``--permits`` permits flowing and
acknowledges everything it receives (one ACK per socket read). Measured from the broker
process's start (``Popen``; it starts as installed: the checkout's ``.pyc`` files are written
first, :func:`bench.processes.compile_sources`):

- ``listening``: the first accepted connection; ``subscribed``: SUBSCRIBE answered (the topic
  loaded, the subscription and its tracker recovered up to ``recover()``'s return);
- ``first due``: the first message received; ``first overdue``: the first of those due while
  down;
- ``index serving``: the broker's log line ``delayed index of cursor sub serving`` (every
  bucket's membership read: ``broker/delayed/bucket_snapshots.py``), stamped when this process
  reads it;
- ``caught up``: the last of the messages due while down (sealed buckets, due at ``base``,
  neither acknowledged nor cancelled) received; ``catch-up p50 / p99``: of those, from the
  first receipt to each one's;
- ``*_cpu_s``: the broker process's CPU seconds (every thread, ``/proc``) at each point;
  ``*_loop_cpu_s``: its main thread's alone (the event loop) at the receipts; ``catch_up_us`` /
  ``catch_up_loop_us``: CPU-µs (every thread / the loop's) per message due while down, from
  the first of them received to the last;
- counters: ``early`` (received before its deliver time on the broker's clock), ``duplicate``,
  ``acked_received`` / ``cancelled_received`` (acknowledged or cancelled before the kill),
  ``overdue_lost`` (due while down, not received by the end); ``tail_received``: messages of
  the last, unsealed bucket (what a kill -9 leaves to be read again from the ledger), counted
  apart: the broker reads each again and holds it until its deliver time (early ones among
  them are counted as ``early`` too). A store built before its entries carried message
  metadata (no ``entries`` in its ``bench.json``) has bare ``b"d"`` entries, which a broker
  reads as plain messages and delivers at once: there the tail is not checked for early.

The run ends ``--after-s`` after both the catch-up and the index serving (or at
``--timeout-s``); then the broker is killed (SIGKILL: nothing of a graceful stop is measured)
and the copy deleted (``--keep`` keeps it). ``--py-spy FILE`` records the broker with py-spy
(``--threads``, 50 samples a second, ``--py-spy-rate``) from the start to the end (flamegraph SVG; collapsed
stacks for a name ending in ``.txt``; speedscope JSON, samples in time order with the idle
ones, for ``.json``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

HERE = Path(__file__).resolve().parent.parent
if sys.path and Path(sys.path[0]).resolve() == HERE / "bench":
    del sys.path[0]                  # bench/storage.py would shadow the storage package
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from bench.delayed_restart import (  # noqa: E402
    ACK_AT,
    CANCEL_AT,
    SPREADS,
    TOPIC,
    _overdue,
)
from bench.processes import cpu_seconds, free_port, rss_mib  # noqa: E402

SUBSCRIPTION = "sub"
#: py-spy's output format by the file's suffix (an SVG flamegraph otherwise); speedscope's
#: JSON keeps the samples in time order, with the idle ones (``--idle``): what waits, and when
SPY_FORMATS = {".txt": ["--format", "raw"], ".json": ["--format", "speedscope", "--idle"]}
SERVING_LINE = re.compile(r"delayed index of cursor (\S+) serving")
#: bucket tracker settings of the bench's tracker (``bench/delayed_restart.py``'s _tracker)
CONFIG = """delayedDeliveryTrackerFactoryClassName = \
"org.apache.pulsar.broker.delayed.BucketDelayedDeliveryTrackerFactory"
delayedDeliveryTickTimeMillis = 1
isDelayedDeliveryDeliverAtTimeStrict = true
"""


def serve(shift_ms: int, argv: list[str]) -> int:
    """The broker, with its delayed-delivery clock ``shift_ms`` behind the wall clock (the
    code of ``HORAE_BENCH_ROOT``'s checkout when it is set: ``--broker-root``)."""
    root = os.environ.get("HORAE_BENCH_ROOT")
    if root:
        sys.path.insert(0, str(Path(root).resolve()))
    import broker.delayed.tracker as tracker
    from broker.cli import main as broker_main

    wall_ms, exact_ms = tracker.wall_clock_ms, tracker.wall_clock_ms_exact
    tracker.wall_clock_ms = lambda: wall_ms() - shift_ms                 # type: ignore[assignment]
    tracker.wall_clock_ms_exact = lambda: exact_ms() - shift_ms         # type: ignore[assignment]
    return broker_main(argv)


class LogWatch:
    """Reads the broker's output in a thread: every line to the log file, the moments (since
    ``t0``) and broker CPU seconds of the lines that matter."""

    def __init__(self, stream: TextIO, log: Path, pid: int, t0: float) -> None:
        self.stream, self.log, self.pid, self.t0 = stream, log, pid, t0
        self.serving: tuple[float, float] | None = None
        self.serving_event = threading.Event()
        self.warnings: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with self.log.open("w") as out:
            for line in self.stream:
                out.write(line)
                out.flush()
                if self.serving is None and (m := SERVING_LINE.search(line)) \
                        and m.group(1) == SUBSCRIPTION:
                    self.serving = (time.perf_counter() - self.t0, _cpu(self.pid))
                    self.serving_event.set()
                elif (" WARNING " in line or " ERROR " in line or "Traceback" in line) \
                        and len(self.warnings) < 20:
                    self.warnings.append(line.strip()[:300])


def _cpu(pid: int, thread: int | None = None) -> float:
    try:
        return cpu_seconds(pid, thread)
    except OSError:
        return float("nan")


class Receiver:
    """The Shared consumer's side: every MESSAGE checked against the store's layout, then
    acknowledged; permits refilled by half."""

    def __init__(self, layout: dict[str, Any], shape: argparse.Namespace, base: int,
                 overdue: int) -> None:
        from protocol import commands as C
        from protocol import pulsar_pb as pb

        self.C, self.T = C, pb.BaseCommand
        self.conn: Any = None
        self.shape, self.base = shape, base
        self.shift_ms = self.pid = 0
        self.t0 = 0.0
        self.starts = {int(k): v for k, v in layout["starts"].items()}
        self.sealed_count = layout["sealed_count"]
        #: the tail's deliver times are in its entries (held until due), not a bare b"d"
        self.tail_timed = layout.get("entries") == "messages"
        self.seen = bytearray(shape.pending)
        self.overdue = overdue
        self.received = self.early = self.dup = self.acked_out = self.cancelled_out = 0
        self.tail = self.caught_up = 0
        self.catch_up: list[float] = []
        self.early_max_ms = 0
        #: (message id, message number, its time and the broker's clock at receipt (ms since
        #: base), receipt (s since the start)) of the first few early ones
        self.early_samples: list[tuple[Any, ...]] = []
        self.first: float | None = None
        self.marks: dict[str, float] = {}
        self.since_flow = 0
        self.done = asyncio.Event()

    def start(self, conn: Any, pid: int, t0: float, shift_ms: int) -> None:
        """Take the subscribed connection's frames and send the first FLOW. Everything the
        checks need was made before (``seen`` alone is 100 MB at 100M): a client's answer
        to SUBSCRIBE is its FLOW, at once."""
        self.conn, self.pid, self.t0, self.shift_ms = conn, pid, t0, shift_ms
        conn.handler = self.frames_received
        conn.write(self.C.encode_flow(1, self.shape.permits))

    def _mark(self, name: str, at: float) -> None:
        self.marks[f"{name}_s"] = round(at - self.t0, 3)
        self.marks[f"{name}_cpu_s"] = _cpu(self.pid)
        self.marks[f"{name}_loop_cpu_s"] = _cpu(self.pid, self.pid)

    def frames_received(self, frames: list[Any]) -> None:
        now = time.perf_counter()
        clock = time.time_ns() // 1_000_000 - self.shift_ms     # the broker's delayed clock
        T = self.T
        starts, seen, base, sealed = self.starts, self.seen, self.base, self.sealed_count
        shape = self.shape
        ack_every, cancel_every = shape.ack_every, shape.cancel_every
        spread = SPREADS[shape.delays]
        start = base - spread // 100
        fixed = shape.delays == "fixed"
        pending = max(shape.pending, 1)
        acks: list[tuple[int, int]] = []
        late = False
        for frame in frames:
            cmd = frame.command
            if cmd.type == T.MESSAGE:
                mid = cmd.message.message_id
                key = (mid.ledgerId, mid.entryId)
                acks.append(key)
                i = starts[key[0]] + key[1]
                if self.first is None:
                    self.first = now
                    self._mark("first_due", now)
                self.received += 1
                if seen[i]:
                    self.dup += 1
                seen[i] = 1
                if ack_every and i % ack_every == ACK_AT:
                    self.acked_out += 1
                elif cancel_every and i % cancel_every == CANCEL_AT:
                    self.cancelled_out += 1
                if i >= sealed:
                    self.tail += 1
                    if not self.tail_timed:
                        continue
                # delayed_restart.deliver_at(), inlined
                when = (start + i * spread // pending if fixed
                        else start + (i * 2_654_435_761) % spread)
                if when > clock:
                    self.early += 1
                    self.early_max_ms = max(self.early_max_ms, when - clock)
                    if len(self.early_samples) < 5:
                        self.early_samples.append((key, i, when - base, clock - base,
                                                   round(now - self.t0, 3)))
                if when <= base and i < sealed:
                    if not self.caught_up:
                        self._mark("first_overdue", now)
                    self.catch_up.append((now - self.first) * 1000)
                    self.caught_up += 1
                    late = True
            elif cmd.type == T.PING:
                self.conn.write(self.C.encode_pong())
        if acks:
            self.conn.write(self.C.encode_ack(1, acks))
            self.since_flow += len(acks)
            if self.since_flow >= shape.permits // 2:
                self.conn.write(self.C.encode_flow(1, self.since_flow))
                self.since_flow = 0
        if late and self.caught_up >= self.overdue and "caught_up_s" not in self.marks:
            self._mark("caught_up", now)
            self.done.set()


class _Command:
    """A frame as far as this consumer reads it: its command (the payload is not parsed)."""

    __slots__ = ("command",)

    def __init__(self, command: Any) -> None:
        self.command = command


def _command_only_connection() -> Any:
    """bench/wire_clients.py's connection, framing the stream itself and parsing each frame's
    command only: the receipt checks need the message id alone, and a store built before its
    entries carried message metadata holds bare ``b"d"`` entries, which the codec's frame
    decoder rightly refuses."""
    import struct

    from bench.wire_clients import RawConnection
    from protocol import pulsar_pb as pb

    header = struct.Struct(">II").unpack_from
    parse = pb.BaseCommand.FromString
    ping = pb.BaseCommand.PING

    class CommandOnly(RawConnection):
        def __init__(self) -> None:
            super().__init__()
            self.buf = bytearray()

        def data_received(self, data: bytes) -> None:
            buf = self.buf
            buf += data
            pos, size = 0, len(buf)
            frames: list[_Command] = []
            while size - pos >= 8:
                total, command_size = header(buf, pos)
                if pos + 4 + total > size:
                    break
                frames.append(_Command(parse(bytes(buf[pos + 8:pos + 8 + command_size]))))
                pos += 4 + total
            del buf[:pos]
            if self.handler is not None:
                self.handler(frames)  # type: ignore[arg-type]
                return
            for frame in frames:
                if frame.command.type == ping:
                    self.write(_pong())
                else:
                    self.replies.put_nowait(frame.command)

    return CommandOnly


def _pong() -> bytes:
    from protocol import commands as C

    return C.encode_pong()


async def _connect(port: int, t0: float, proc: subprocess.Popen[str], timeout_s: float
                   ) -> tuple[Any, float]:
    RawConnection = _command_only_connection()
    loop = asyncio.get_running_loop()
    deadline = time.perf_counter() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError("the broker exited before listening")
        try:
            _, conn = await loop.create_connection(RawConnection, "127.0.0.1", port)
            return conn, time.perf_counter()
        except OSError:
            if time.perf_counter() > deadline:
                raise
            await asyncio.sleep(0.005)


def _store_subscription_type(root: Path) -> None:
    """The copy's cursor as a broker that ran the subscription leaves it: with its type stored
    (the store was built without a broker; a subscription whose type is new saves it before
    its SUBSCRIBE is answered, a cost a restarted broker does not pay). The newest generation
    of the cursor file is rewritten in place; nothing else of the copy is touched (the tail a
    kill -9 leaves stays unindexed)."""
    from broker.subscriptions.subscription import SUBSCRIPTION_TYPE_PROPERTY
    from protocol.sub_types import SubType
    from storage.cursor import decode_cursor, encode_cursor

    (path,) = (root / "ledgers").glob("*/cursors/sub.cur")
    state = decode_cursor(path.read_bytes())
    state.properties[SUBSCRIPTION_TYPE_PROPERTY] = SubType.Shared.name
    path.write_bytes(encode_cursor(state))


async def one_round(args: argparse.Namespace, run: Path) -> dict[str, Any]:
    from bench.wire_clients import REQUEST_TIMEOUT_S
    from protocol import commands as C
    from protocol import pulsar_pb as pb

    store = Path(args.store)
    base = int((store / "base").read_text())
    layout = json.loads((store / "built" / "bench.json").read_text())
    data = run / "horae"
    shutil.rmtree(run, ignore_errors=True)
    data.mkdir(parents=True)
    c = time.perf_counter()
    shutil.copytree(store / "built", data / "store")
    _store_subscription_type(data / "store")
    # the copy's dirty pages written back before the start: a broker restarted after a kill
    # has no gigabytes of writeback ahead of its own fsyncs
    os.sync()
    copy_s = time.perf_counter() - c
    (run / "broker.toml").write_text(CONFIG)
    # counted before the start: seconds of CPU at 100M, which would hold the consumer's loop
    # (and its PING answers) once it is connected
    overdue = _overdue(layout["sealed_count"], base, args.delays, args.pending, args.ack_every,
                       args.cancel_every)
    # as installed: .pyc present (the broker's checkout, and this bench, which runs it). Not
    # imported at the top: the broker's process imports this file with bench.delayed_restart
    # putting the broker's checkout first on sys.path, whose bench.processes may predate it.
    from bench.processes import compile_sources

    compile_sources(Path(args.broker_root or HERE).resolve())
    compile_sources(HERE, ("bench",))
    receiver = Receiver(layout, args, base, overdue)
    port, web = free_port(), free_port()
    t0 = time.perf_counter()
    shift_ms = time.time_ns() // 1_000_000 - (base + 1)
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--serve", str(shift_ms), "serve",
         "--data-dir", str(data), "--broker-port", str(port), "--web-port", str(web),
         "--bind-address", "127.0.0.1", "--advertised-address", "127.0.0.1",
         "--config", str(run / "broker.toml")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=str(HERE),
        env={**os.environ, "HORAE_BENCH_ROOT": str(Path(args.broker_root or HERE).resolve())})
    spy = None
    result: dict[str, Any] = {"copy_s": round(copy_s, 1)}
    try:
        assert proc.stdout is not None
        watch = LogWatch(proc.stdout, run.parent / f"{run.name}-broker.log", proc.pid, t0)
        if args.py_spy:
            spy = subprocess.Popen(
                [str(Path(sys.executable).parent / "py-spy"), "record", "--threads",
                 "-r", str(args.py_spy_rate), "-p", str(proc.pid), "-o", args.py_spy,
                 "--nonblocking", *SPY_FORMATS.get(Path(args.py_spy).suffix, [])],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        conn, listening = await _connect(port, t0, proc, args.timeout_s)
        result |= {"listening_s": round(listening - t0, 3), "listening_cpu_s": _cpu(proc.pid)}
        await conn.request(C.encode_connect("delayed-restart-broker"), pb.BaseCommand.CONNECTED)
        cmd = await conn.request(C.encode_lookup(TOPIC, 1), pb.BaseCommand.LOOKUP_RESPONSE)
        if cmd.lookupTopicResponse.response != pb.CommandLookupTopicResponse.Connect:
            raise RuntimeError(f"lookup: {cmd}")
        conn.write(C.encode_subscribe(TOPIC, SUBSCRIPTION, 1, 1, 2))   # 1: Shared
        deadline = t0 + args.timeout_s
        while True:
            left = deadline - time.perf_counter()
            cmd = await asyncio.wait_for(conn.replies.get(), min(left, REQUEST_TIMEOUT_S * 20))
            if cmd.type == pb.BaseCommand.SUCCESS:
                break
            if cmd.type != pb.BaseCommand.PING:
                raise RuntimeError(f"subscribe: {cmd}")
            conn.write(C.encode_pong())
        subscribed = time.perf_counter()
        result |= {"subscribed_s": round(subscribed - t0, 3), "subscribed_cpu_s": _cpu(proc.pid)}
        receiver.start(conn, proc.pid, t0, shift_ms)
        # a checkout from before the serving log line: the catch-up alone ends the run
        logs_serving = "delayed index of cursor" in (
            Path(args.broker_root or HERE) / "broker/delayed/bucket_snapshots.py").read_text()
        while time.perf_counter() < deadline and proc.poll() is None:
            if receiver.done.is_set() and (watch.serving_event.is_set() or not logs_serving):
                break
            await asyncio.sleep(0.05)
        end = min(deadline, time.perf_counter() + args.after_s)
        while time.perf_counter() < end and proc.poll() is None:
            await asyncio.sleep(0.05)
        cu = sorted(receiver.catch_up)
        result |= receiver.marks
        marks = receiver.marks
        if "caught_up_cpu_s" in marks and receiver.caught_up > 1:
            for key, suffix in (("catch_up_us", "cpu_s"), ("catch_up_loop_us", "loop_cpu_s")):
                spent = marks[f"caught_up_{suffix}"] - marks[f"first_overdue_{suffix}"]
                result[key] = round(spent * 1e6 / (receiver.caught_up - 1), 1)
        if watch.serving is not None:
            result |= {"index_serving_s": round(watch.serving[0], 3),
                       "index_serving_cpu_s": watch.serving[1]}
        result |= {
            "end_s": round(time.perf_counter() - t0, 3), "end_cpu_s": _cpu(proc.pid),
            "rss_mib": round(rss_mib(proc.pid), 1),
            "peak_rss_mib": round(rss_mib(proc.pid, "VmHWM"), 1),
            "overdue": receiver.overdue, "caught_up": receiver.caught_up,
            "overdue_lost": receiver.overdue - receiver.caught_up,
            "catch_up_p50_ms": round(cu[len(cu) // 2], 1) if cu else None,
            "catch_up_p99_ms": round(cu[max(int(len(cu) * 0.99) - 1, 0)], 1) if cu else None,
            "received": receiver.received, "early": receiver.early, "early_max_ms": receiver.early_max_ms,
            "early_samples": receiver.early_samples, "duplicate": receiver.dup,
            "acked_received": receiver.acked_out, "cancelled_received": receiver.cancelled_out,
            "tail_received": receiver.tail, "broker_warnings": watch.warnings}
        conn.close()
    finally:
        if spy is not None and spy.poll() is None:
            spy.send_signal(signal.SIGINT)       # py-spy writes its file on SIGINT
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if spy is not None:
            try:
                spy.wait(30)
            except subprocess.TimeoutExpired:
                spy.kill()
                spy.wait()
        if not args.keep:
            shutil.rmtree(run, ignore_errors=True)
    return result


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--serve":
        raise SystemExit(serve(int(sys.argv[2]), sys.argv[3:]))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--store", required=True,
                   help="a store bench/delayed_restart.py --store DIR built (read only)")
    p.add_argument("--pending", type=int, required=True)
    p.add_argument("--ack-every", type=int, default=10, dest="ack_every")
    p.add_argument("--cancel-every", type=int, default=0, dest="cancel_every")
    p.add_argument("--delays", choices=sorted(SPREADS), default="hour")
    p.add_argument("--work", default="",
                   help="where the copies go (default: a directory beside --store)")
    p.add_argument("--permits", type=int, default=1000,
                   help="the consumer's receiver queue (FLOW permits)")
    p.add_argument("--after-s", type=float, default=2.0, dest="after_s")
    p.add_argument("--timeout-s", type=float, default=600.0, dest="timeout_s")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--broker-root", default="", dest="broker_root",
                   help="run the broker with this checkout's code (default: this one)")
    p.add_argument("--compare-with", default="", dest="compare_with",
                   help="each round, also run the broker with this checkout's code "
                        "(alternated, this checkout first)")
    p.add_argument("--keep", action="store_true", help="keep the copy and its broker log")
    p.add_argument("--py-spy", default="", dest="py_spy",
                   help="record the broker with py-spy into this SVG (.txt: collapsed stacks; "
                        ".json: speedscope, in time order, idle samples too)")
    p.add_argument("--py-spy-rate", type=int, default=50, dest="py_spy_rate",
                   help="py-spy's samples per second")
    args = p.parse_args()
    work = Path(args.work) if args.work else Path(args.store).parent
    work.mkdir(parents=True, exist_ok=True)
    roots = [args.broker_root or str(HERE)] + ([args.compare_with] if args.compare_with else [])
    for k in range(args.rounds):
        for root in roots:
            args.broker_root = root
            load = os.getloadavg()[0]
            r = asyncio.run(one_round(args, work / f"broker-run-{os.getpid()}-{k}"))
            print(f"  whole broker, {root} (load {load:.1f} -> {os.getloadavg()[0]:.1f}): "
                  f"{json.dumps(r)}", flush=True)


if __name__ == "__main__":
    main()
