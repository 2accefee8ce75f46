"""The event loop's CPU per unbatched SEND, in process: socket reads in, receipts out.

Usage:  .venv/bin/python bench/publish_path.py [--messages 100000] [--connections 4]
            [--read 65536] [--size 1024] [--rounds 5] [--fsync] [--profile]

No socket and no client process: an in-process broker (:func:`broker.embed.start_broker`, its
real topics and segment store, no fsync unless ``--fsync``) gets ``--connections``
:class:`~broker.net.connection.ServerConnection` objects over transports that keep what is
written to them. Each connection's producer SENDs are pre-built (``wire_load.py``'s frames: 1 KiB
plain messages), cut into reads of ``--read`` bytes (frames split across reads as a socket cuts
them) and handed to ``data_received`` on the broker's loop, one read per connection per loop
turn, while the connection is read: the broker's own back-pressure
(``maxPendingPublishRequestsPerConnection``, 1000) pauses it as a socket would. The loop waits
on an event (never spins) when every connection is paused.

Measured: the broker loop thread's CPU time (``time.thread_time`` on that thread, which the
machine's load stretches far less than wall time, and which leaves out the storage writer's
threads) from the first read to the last receipt, per SEND: decode, producer, topic, storage
append, completions, receipts and their writes, less uvloop's own socket work. Printed per
round and the median and best of ``--rounds``; each round a fresh topic. Receipts are checked
after the timing (every SEND answered once, in order). ``--profile`` prints a cProfile of the
last round.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from broker.embed import start_broker  # noqa: E402
from broker.net.connection import ServerConnection  # noqa: E402
from protocol import client_commands as C  # noqa: E402
from protocol import pulsar_pb as pb  # noqa: E402
from protocol.frames import NEED_DATA, Frame, FrameDecoder  # noqa: E402
from protocol.metadata import encode_entry  # noqa: E402

T = pb.BaseCommand


class KeepingTransport:
    """A transport that keeps what the broker writes and wakes the driver on every change."""

    def __init__(self, wake: asyncio.Event) -> None:
        self.chunks: list[bytes] = []
        self.reading = True
        self.closed = False
        self._wake = wake

    def write(self, data: bytes) -> None:
        self.chunks.append(bytes(data))
        self._wake.set()

    def writelines(self, parts: list[bytes]) -> None:
        self.chunks.extend(map(bytes, parts))
        self._wake.set()

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True
        self._wake.set()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5000), "sockname": ("127.0.0.1", 6650)}.get(
            name, default)

    def commands(self) -> list[pb.BaseCommand]:
        decoder = FrameDecoder()
        decoder.receive_data(b"".join(self.chunks))
        out = []
        while (frame := decoder.next_frame()) is not NEED_DATA:
            assert isinstance(frame, Frame)
            out.append(frame.command)
        return out


def send_stream(name: str, messages: int, size: int) -> bytes:
    """One producer's SENDs (producer id 1), as ``wire_load.py`` builds them."""
    payload = (bytes(range(256)) * (size // 256 + 1))[:size]
    publish_time = int(time.time() * 1000)
    return b"".join(
        C.encode_send(1, seq, encode_entry(
            pb.MessageMetadata(producer_name=name, sequence_id=seq, publish_time=publish_time),
            payload))
        for seq in range(messages))


async def _reply(transport: KeepingTransport, wake: asyncio.Event, kind: int) -> None:
    for _ in range(2000):
        if any(cmd.type == kind for cmd in transport.commands()):
            return
        wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), 0.01)
    raise RuntimeError(f"no {T.Type.Name(kind)} within 20 s")


async def _round(server: Any, topic: str, streams: list[bytes], read: int, messages: int,
                 prof: cProfile.Profile | None) -> float:
    """Publish every stream on its own connection; the loop thread's CPU seconds."""
    wake = asyncio.Event()
    conns: list[tuple[ServerConnection, KeepingTransport]] = []
    for index in range(len(streams)):
        conn = ServerConnection(server.service, server, publish_buffer=server.publish_buffer,
                                output_pauses=server.output_pauses)
        transport = KeepingTransport(wake)
        conn.connection_made(transport)  # type: ignore[arg-type]
        conn.data_received(C.encode_connect())
        await _reply(transport, wake, T.CONNECTED)
        conn.data_received(C.encode_producer(topic, 1, 1, f"pp-{index}"))
        await _reply(transport, wake, T.PRODUCER_SUCCESS)
        transport.chunks.clear()
        conns.append((conn, transport))
    reads = [[stream[at:at + read] for at in range(0, len(stream), read)] for stream in streams]
    cursors = [0] * len(streams)
    if prof is not None:
        prof.enable()
    cpu0 = time.thread_time()
    while True:
        fed = False
        for index, (conn, transport) in enumerate(conns):
            at = cursors[index]
            if transport.reading and at < len(reads[index]):
                conn.data_received(reads[index][at])
                cursors[index] = at + 1
                fed = True
        if fed:
            await asyncio.sleep(0)
            continue
        if all(cursors[i] == len(reads[i]) and conn.throttle.pending_requests == 0
               for i, (conn, _) in enumerate(conns)):
            break
        wake.clear()
        await wake.wait()
    for _ in range(2):  # the last receipts' flush (broker.net.output: the next loop turn)
        await asyncio.sleep(0)
    cpu = time.thread_time() - cpu0
    if prof is not None:
        prof.disable()
    for (conn, transport), stream_messages in zip(conns, [messages] * len(conns), strict=True):
        receipts = [cmd.send_receipt.sequence_id for cmd in transport.commands()
                    if cmd.type == T.SEND_RECEIPT]
        if receipts != list(range(stream_messages)):
            raise RuntimeError(f"receipts out of order or missing: {len(receipts)}")
        conn.connection_lost(None)
    return cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=100_000, help="SENDs in all")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--read", type=int, default=65536, help="bytes per socket read")
    parser.add_argument("--size", type=int, default=1024, help="payload bytes per message")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--fsync", action="store_true", help="fdatasync before each receipt")
    parser.add_argument("--profile", action="store_true", help="cProfile of the last round")
    args = parser.parse_args(argv)
    per_conn = args.messages // args.connections
    streams = [send_stream(f"pp-{c}", per_conn, args.size) for c in range(args.connections)]
    sends = per_conn * args.connections
    results: list[float] = []
    with tempfile.TemporaryDirectory(prefix="publish-path-") as tmp, \
            start_broker(data_dir=Path(tmp), config_overrides={
                "journalSyncData": args.fsync}) as broker:
        for r in range(args.rounds):
            last = r == args.rounds - 1
            prof = cProfile.Profile(time.thread_time) if args.profile and last else None
            cpu = broker.call(_round, broker.server, f"persistent://public/default/pp-{r}",
                              streams, args.read, per_conn, prof, timeout=600)
            results.append(cpu / sends * 1e6)
            print(f"round {r + 1}: loop CPU {results[-1]:.2f} us per SEND", flush=True)
            if prof is not None:
                pstats.Stats(prof).sort_stats("tottime").print_stats(30)
    print(f"loop CPU per SEND: median {statistics.median(results):.2f} us, best "
          f"{min(results):.2f} us ({args.rounds} rounds of {sends:,} x {args.size} B, "
          f"{args.connections} connections, reads of {args.read} B, "
          f"{'fsync' if args.fsync else 'no fsync'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
