"""What the official client spends per message against a broker, and what it receives.

Runs the official-client workloads of :mod:`bench.compare_peer` (async publish with batching
off and on, sync send, end to end) against one broker at a time, several rounds, and reads
around each workload:

- the client process's CPU per message, split by thread (``/proc/self/task/*/schedstat`` run
  time, grouped by thread name: the Python thread, the C++ client's I/O thread, its listener
  and timer threads), and each thread group's voluntary / involuntary context switches;
- with ``--wire``, a loopback capture (``tcpdump``) of the workload, parsed here: per
  direction the TCP segments carrying data, bytes, and the Pulsar frames by command, and how
  many frames end in each segment (what one client read finds);
- with ``--syscalls``, the client's system calls (``perf stat -e raw_syscalls:sys_enter``).

The broker is Horae from a source tree (``--peer horae`` runs this tree, ``horae=/path`` another
one, each with its own ``.venv``) or Apache Pulsar standalone (``--peer pulsar``).

Usage: ``.venv/bin/python bench/client_cost.py --peer horae --rounds 3 [--messages 20000]
[--sync 3000] [--e2e 3000] [--fanout N] [--wire] [--syscalls] [--pin CPU | --split]
[--only async-off,sync,e2e]`` (the workloads: async-off, async-on, consume, which drains what
async-off published and so comes after it, sync, e2e).
Never part of the test run.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import pathlib
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator

import pulsar
from google.protobuf.message import DecodeError

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from bench.brokers import Broker, _running, cpu_seconds, free_port, start_pulsar
from bench.compare_peer import (
    async_publish,
    client_for,
    end_to_end_sends,
    shared_consume,
    sync_send,
)
from bench.processes import compile_sources
from protocol import pulsar_pb as pb

COMMANDS = {6: "SEND", 7: "SEND_RECEIPT", 9: "MESSAGE", 10: "ACK", 11: "FLOW", 18: "PING",
            19: "PONG", 38: "ACK_RESPONSE"}


@contextlib.contextmanager
def start_horae_tree(tmp: pathlib.Path, root: pathlib.Path) -> Iterator[Broker]:
    port, web = free_port(), free_port()
    tmp.mkdir(parents=True, exist_ok=True)
    data, log = tmp / "horae", tmp / "horae.log"
    python = root / ".venv" / "bin" / "python"
    args = [str(python), "-m", "broker", "serve", "--data-dir", str(data), "--broker-port",
            str(port), "--web-port", str(web), "--bind-address", "127.0.0.1",
            "--advertised-address", "127.0.0.1", "--log-level", "WARNING"]
    compile_sources(root)   # started as installed: .pyc present
    with log.open("wb") as fh:
        proc = subprocess.Popen(args, cwd=root, stdout=fh, stderr=subprocess.STDOUT)
    with _running(Broker("horae", "127.0.0.1", port, proc, data, log, web)) as broker:
        yield broker


def thread_times() -> dict[str, list[int]]:
    """Thread name -> [run ns, voluntary switches, involuntary switches, threads] summed."""
    out: dict[str, list[int]] = {}
    for task in pathlib.Path("/proc/self/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            run_ns = int((task / "schedstat").read_text().split()[0])
            vol = invol = 0
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches"):
                    vol = int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches"):
                    invol = int(line.split()[1])
        except (FileNotFoundError, ProcessLookupError):
            continue
        name = "main" if int(task.name) == os.getpid() else f"{name}-{task.name}"
        acc = out.setdefault(name, [0, 0, 0, 0])
        acc[0] += run_ns
        acc[1] += vol
        acc[2] += invol
        acc[3] += 1
    return out


def thread_delta(before: dict[str, list[int]],
                 after: dict[str, list[int]]) -> dict[str, list[int]]:
    return {name: [a - b for a, b in zip(vals, before.get(name, [0, 0, 0, 0]), strict=True)]
            for name, vals in after.items()}


# --- the loopback capture ----------------------------------------------------------------


def read_pcap(path: pathlib.Path) -> Iterator[tuple[float, int, int, bytes]]:
    """(time, source port, destination port, TCP payload) of each captured IPv4 TCP packet."""
    raw = path.read_bytes()
    magic = struct.unpack_from("<I", raw)[0]
    endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    nano = magic in (0xA1B23C4D, 0x4D3CB2A1)
    linktype = struct.unpack_from(endian + "I", raw, 20)[0]
    link_len = {1: 14, 113: 16, 276: 20}.get(linktype, 14)
    off = 24
    while off + 16 <= len(raw):
        sec, frac, incl, _orig = struct.unpack_from(endian + "IIII", raw, off)
        off += 16
        pkt = raw[off:off + incl]
        off += incl
        ip = pkt[link_len:]
        if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 6:
            continue
        ihl = (ip[0] & 15) * 4
        total = struct.unpack_from(">H", ip, 2)[0]
        tcp = ip[ihl:total]
        sport, dport = struct.unpack_from(">HH", tcp)
        doff = (tcp[12] >> 4) * 4
        yield sec + frac / (1e9 if nano else 1e6), sport, dport, bytes(tcp[doff:])


def wire_stats(path: pathlib.Path, broker_port: int) -> dict[str, collections.Counter[str]]:
    """Per direction ('to client', 'to broker'): segments, bytes, frames by command, and the
    number of segments in which k frames end ('ends k')."""
    streams: dict[tuple[int, int], bytearray] = {}
    stats: dict[str, collections.Counter[str]] = {"to client": collections.Counter(),
                                                  "to broker": collections.Counter()}
    for _t, sport, dport, payload in read_pcap(path):
        if not payload:
            continue
        direction = "to client" if sport == broker_port else "to broker"
        st = stats[direction]
        st["segments"] += 1
        st["bytes"] += len(payload)
        buf = streams.setdefault((sport, dport), bytearray())
        buf += payload
        ends = 0
        pos = 0
        while len(buf) - pos >= 4:
            size = struct.unpack_from(">I", buf, pos)[0]
            if len(buf) - pos < 4 + size:
                break
            frame = buf[pos + 8:pos + 4 + size]
            ctype = 0
            if len(frame) >= 2 and frame[0] == 0x08:
                ctype = frame[1]
            st["frame " + COMMANDS.get(ctype, str(ctype))] += 1
            ends += 1
            pos += 4 + size
        del buf[:pos]
        st[f"ends {min(ends, 9)}"] += 1
    return stats


def publish_timeline(path: pathlib.Path, broker_port: int) -> dict[str, float]:
    """What the client batched and when the receipts came: messages per SEND (per entry), the
    client's pending messages (sent, not yet receipted) at each SEND, each SEND's time to its
    receipt, receipts per segment that carries any, and SENDs per segment to the broker."""
    streams: dict[tuple[int, int], bytearray] = {}
    sent_at: dict[tuple[int, int], tuple[float, int]] = {}
    sizes: list[int] = []
    pending_at_send: list[int] = []
    waits: list[float] = []
    receipt_segments: list[int] = []
    send_segments: list[int] = []
    pending = 0
    for t, sport, dport, payload in read_pcap(path):
        if not payload:
            continue
        to_client = sport == broker_port
        buf = streams.setdefault((sport, dport), bytearray())
        buf += payload
        pos = 0
        receipts = sends = 0
        while len(buf) - pos >= 8:
            size, cmd_size = struct.unpack_from(">II", buf, pos)
            if len(buf) - pos < 4 + size:
                break
            try:
                cmd = pb.BaseCommand.FromString(bytes(buf[pos + 8:pos + 8 + cmd_size]))
            except DecodeError:  # joined mid-frame: drop what is buffered, sync on a segment
                pos = len(buf)
                break
            pos += 4 + size
            if cmd.type == pb.BaseCommand.SEND and not to_client:
                n = cmd.send.num_messages or 1
                sent_at[(cmd.send.producer_id, cmd.send.sequence_id)] = (t, n)
                sizes.append(n)
                pending_at_send.append(pending)
                pending += n
                sends += 1
            elif cmd.type == pb.BaseCommand.SEND_RECEIPT and to_client:
                key = (cmd.send_receipt.producer_id, cmd.send_receipt.sequence_id)
                if key in sent_at:
                    t0, n = sent_at.pop(key)
                    waits.append(t - t0)
                    pending -= n
                receipts += 1
        del buf[:pos]
        if receipts:
            receipt_segments.append(receipts)
        if sends:
            send_segments.append(sends)
    if not sizes:
        return {}

    def pct(values: list[float] | list[int], q: float) -> float:
        ordered = sorted(values)
        return float(ordered[min(len(ordered) - 1, int(len(ordered) * q))]) if ordered else 0.0

    return {"SENDs": len(sizes), "msgs/SEND mean": sum(sizes) / len(sizes),
            "msgs/SEND p10": pct(sizes, 0.1), "msgs/SEND p50": pct(sizes, 0.5),
            "pending at SEND p50": pct(pending_at_send, 0.5),
            "pending at SEND p90": pct(pending_at_send, 0.9),
            "SEND->receipt p50 ms": pct(waits, 0.5) * 1e3,
            "SEND->receipt p90 ms": pct(waits, 0.9) * 1e3,
            "receipts/segment": sum(receipt_segments) / max(1, len(receipt_segments)),
            "SENDs/segment": sum(send_segments) / max(1, len(send_segments))}


@contextlib.contextmanager
def capture(path: pathlib.Path | None, port: int) -> Iterator[None]:
    if path is None:
        yield
        return
    proc = subprocess.Popen(["tcpdump", "-i", "lo", "-s", "0", "-B", "65536", "-w", str(path),
                             "-U", f"tcp port {port}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    time.sleep(0.5)
    try:
        yield
    finally:
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
        if b"dropped by kernel" in err and b" 0 packets dropped by kernel" not in err:
            print("  tcpdump:", err.decode(errors="replace").strip().splitlines()[-1])


# the system calls counted by name with --syscalls: the allocator's (the callback thread's
# Python thread state maps and unmaps its frame stack per callback), the wake-ups (futex: the
# GIL, the client's semaphores and condition variables) and the socket's; beside them the
# interprocessor interrupts the client sends (mostly a futex wake-up of a thread on the other
# CPU; also a TLB flush there after an munmap)
SYSCALLS = ("mmap", "munmap", "madvise", "brk", "mprotect", "futex", "epoll_wait", "recvfrom",
            "recvmsg", "sendmsg", "sendto", "write", "writev", "read")


@contextlib.contextmanager
def syscall_count(enabled: bool, result: dict[str, float]) -> Iterator[None]:
    if not enabled:
        yield
        return
    out = pathlib.Path(tempfile.mktemp(prefix="client-cost-perf-"))
    events = ",".join(["raw_syscalls:sys_enter", "context-switches", "cpu-migrations",
                       "page-faults", "ipi:ipi_send_cpu", "ipi:ipi_send_cpumask"]
                      + [f"syscalls:sys_enter_{name}" for name in SYSCALLS])
    proc = subprocess.Popen(["perf", "stat", "-x", ",", "-o", str(out), "-e", events,
                             "-p", str(os.getpid())], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        for line in out.read_text().splitlines():
            parts = line.split(",")
            if len(parts) > 2 and parts[0].strip().isdigit():
                result[parts[2].removeprefix("syscalls:sys_enter_").removeprefix("ipi:")] = float(
                    parts[0])
        out.unlink(missing_ok=True)


def split_threads() -> None:
    """The Python main thread on CPU 0, every other thread of this process on CPU 1."""
    me = os.getpid()
    for task in pathlib.Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(task.name), {0} if int(task.name) == me else {1})


def _usage() -> os.times_result:
    """This process's user and system CPU (all its threads, those gone too), in µs steps."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return os.times_result((usage.ru_utime, usage.ru_stime, 0.0, 0.0, 0.0))


#: The workloads ``--only`` may name, in the order a round would run them all; ``consume``
#: drains what ``async-off`` published in the same round.
WORKLOADS = ("async-off", "async-on", "consume", "sync", "e2e")


def run(broker: Broker, args: argparse.Namespace, rnd: int) -> None:
    payload = os.urandom(1024)
    client = client_for(broker.url)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="client-cost-"))
    try:
        t_plain = f"persistent://public/default/cc-plain-{rnd}"
        client.subscribe(t_plain, "bench", consumer_type=pulsar.ConsumerType.Shared,
                         initial_position=pulsar.InitialPosition.Earliest).close()
        lat: dict[str, float] = {}

        def sync() -> float:
            topic = f"persistent://public/default/cc-sync-{rnd}"
            # --fanout: that many subscriptions with a consumer whose queue never fills, so
            # every send is dispatched to each of them (the receipt's commit has consumers)
            consumers = [client.subscribe(topic, f"fan-{i}", receiver_queue_size=args.sync + 10)
                         for i in range(args.fanout)]
            rate, lat["p50"], _p99 = sync_send(client, topic, args.sync, payload)
            for consumer in consumers:
                consumer.close()
            return rate

        def e2e() -> float:
            lat["p50"], _p99, lat["send p50"] = end_to_end_sends(
                client, f"persistent://public/default/cc-e2e-{rnd}", args.e2e, payload)
            return 0.0

        work: dict[str, tuple[int, Callable[[], float]]] = {
            "async-off": (args.messages,
                          lambda: async_publish(client, t_plain, args.messages, payload, False)),
            "async-on": (args.messages, lambda: async_publish(
                client, f"persistent://public/default/cc-batch-{rnd}", args.messages, payload,
                True)),
            "consume": (args.messages, lambda: shared_consume(client, t_plain, args.messages + 1)),
            "sync": (args.sync, sync),
            "e2e": (args.e2e, e2e),
        }
        for name in args.only.split(","):
            count, fn = work[name]
            lat.clear()
            sys_counts: dict[str, float] = {}
            pcap = tmp / f"{name}.pcap" if args.wire else None
            if args.split:
                split_threads()
            with capture(pcap, broker.port), syscall_count(args.syscalls, sys_counts):
                load = os.getloadavg()[0]
                b0, c0, th0 = cpu_seconds(broker.pid), _usage(), thread_times()
                value = fn()
                b1, c1, th1 = cpu_seconds(broker.pid), _usage(), thread_times()
            client_s = (c1.user + c1.system) - (c0.user + c0.system)
            per = 1e6 / count
            extra = "".join(f" {k} {v:.0f} us" for k, v in lat.items())
            rate = f" {value:,.0f} msg/s" if value else ""
            print(f"[{broker.name} r{rnd} {name} load {load:.1f}]{rate}{extra}  client "
                  f"{client_s * per:.1f} us/msg (user {(c1.user - c0.user) * per:.1f} sys "
                  f"{(c1.system - c0.system) * per:.1f})  broker {(b1 - b0) * per:.1f} us/msg",
                  flush=True)
            for tname, (run_ns, vol, invol, _threads) in sorted(
                    thread_delta(th0, th1).items(), key=lambda kv: -kv[1][0]):
                if run_ns < 1e6 and vol + invol < count // 100:
                    continue
                print(f"    {tname:<18} run {run_ns / 1e3 / count:6.1f} us/msg  "
                      f"vol {vol / count:5.2f}  invol {invol / count:5.2f} per msg")
            if sys_counts:
                print("    perf: " + "  ".join(f"{k} {v / count:.3f}/msg"
                                               for k, v in sys_counts.items() if v))
            if pcap is not None:
                for direction, st in wire_stats(pcap, broker.port).items():
                    frames = {k[6:]: v for k, v in st.items() if k.startswith("frame ")}
                    ends = {k[5:]: v for k, v in sorted(st.items()) if k.startswith("ends ")}
                    print(f"    {direction}: {st['segments'] / count:.2f} segments/msg, "
                          f"{st['bytes'] / count:.0f} B/msg, frames/msg "
                          + " ".join(f"{k} {v / count:.3f}" for k, v in frames.items())
                          + "; segments ending k frames " + str(ends))
                timeline = publish_timeline(pcap, broker.port)
                if timeline:
                    print("    publish: " + "  ".join(
                        f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}"
                        for k, v in timeline.items()))
    finally:
        client.close()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--peer", default="horae",
                        help="horae (this tree), horae=/path/to/tree, or pulsar")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--sync", type=int, default=3_000)
    parser.add_argument("--e2e", type=int, default=3_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="async-off,async-on,sync,e2e")
    parser.add_argument("--wire", action="store_true", help="capture loopback with tcpdump")
    parser.add_argument("--syscalls", action="store_true", help="perf stat the client")
    parser.add_argument("--pin", type=int, metavar="CPU",
                        help="run the client's threads on this CPU only (the brokers on any)")
    parser.add_argument("--fanout", type=int, default=0,
                        help="subscriptions with a consumer on the sync-send topic")
    parser.add_argument("--split", action="store_true",
                        help="the client's Python main thread on CPU 0, its other threads on 1")
    args = parser.parse_args()
    only = args.only.split(",")
    unknown = [name for name in only if name not in WORKLOADS]
    if unknown:
        parser.error(f"--only: unknown workload {', '.join(unknown)} (known: {', '.join(WORKLOADS)})")
    if "consume" in only and ("async-off" not in only
                              or only.index("async-off") > only.index("consume")):
        parser.error("--only: consume drains what async-off published: list async-off before it")
    if args.wire and shutil.which("tcpdump") is None:
        parser.error("--wire captures with tcpdump, which is not installed here")
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="client-cost-broker-"))
    try:
        with contextlib.ExitStack() as stack:
            brokers = []
            for i, peer in enumerate(args.peer.split(",")):
                if peer == "pulsar":
                    starter: contextlib.AbstractContextManager[Broker] = start_pulsar(tmp)
                else:
                    root = pathlib.Path(peer.partition("=")[2]
                                        or pathlib.Path(__file__).parent.parent)
                    starter = start_horae_tree(tmp / str(i), root.resolve())
                broker = stack.enter_context(starter)
                broker.name = peer.rsplit("/", 1)[-1]
                brokers.append(broker)
            if args.pin is not None:
                os.sched_setaffinity(0, {args.pin})  # the client's threads inherit it
            warm = argparse.Namespace(**vars(args))
            warm.messages, warm.sync, warm.e2e = 2000, 300, 300
            warm.wire = warm.syscalls = False
            for broker in brokers:
                with contextlib.redirect_stdout(open(os.devnull, "w")):
                    run(broker, warm, -1)
            for rnd in range(args.rounds):
                for broker in brokers:
                    run(broker, args, rnd)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
