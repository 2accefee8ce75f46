"""A minimal blocking Pulsar client built on protocol/ encoders, for wire-level tests.

It speaks exactly what a test tells it to, so tests can send what the official client never
would (bad CRCs, unexpected commands, garbage) and see the broker's exact answer.
"""

from __future__ import annotations

import itertools
import socket
import time

from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.frames import NEED_DATA, Frame, FrameDecoder
from protocol.metadata import encode_batch_payload, encode_entry

T = pb.BaseCommand


def make_entry(payload: bytes, *, sequence_id: int = 0, producer_name: str = "raw",
               publish_time: int | None = None, **fields: object) -> bytes:
    md = pb.MessageMetadata(producer_name=producer_name, sequence_id=sequence_id,
                            publish_time=publish_time or int(time.time() * 1000))
    for k, v in fields.items():
        setattr(md, k, v)
    return encode_entry(md, payload)


def make_batch_entry(messages: list[bytes], *, sequence_id: int = 0, producer_name: str = "raw",
                     **fields: object) -> bytes:
    """A batch entry as clients write it: ``num_messages_in_batch`` and a batch payload with
    one SingleMessageMetadata per message."""
    payload = encode_batch_payload(
        (pb.SingleMessageMetadata(payload_size=len(data), sequence_id=sequence_id + index), data)
        for index, data in enumerate(messages))
    return make_entry(payload, sequence_id=sequence_id, producer_name=producer_name,
                      num_messages_in_batch=len(messages), **fields)


class RawClient:
    def __init__(self, service_url: str, *, timeout: float = 5.0) -> None:
        host, port = service_url.removeprefix("pulsar://").rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.decoder = FrameDecoder()
        self.request_ids = itertools.count(1)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self, timeout: float | None = None) -> Frame:
        """The next frame; raises ConnectionError if the broker closed the connection."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            frame = self.decoder.next_frame()
            if frame is not NEED_DATA:
                return frame  # type: ignore[return-value]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no frame from the broker")
            self.sock.settimeout(remaining)
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("broker closed the connection")
            self.decoder.receive_data(data)

    def recv_command(self, timeout: float | None = None, *, skip_pings: bool = True) -> pb.BaseCommand:
        while True:
            frame = self.recv_frame(timeout)
            if skip_pings and frame.command.type == T.PING:
                self.send(C.encode_pong())
                continue
            return frame.command

    def is_closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True once the broker closed the connection (EOF or reset) within *timeout*."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                return False
            except (ConnectionResetError, BrokenPipeError):
                return True
            if not data:
                return True
        return False

    def handshake(self, protocol_version: int = 20) -> pb.CommandConnected:
        self.send(C.encode_connect("Horae-rawclient", protocol_version))
        cmd = self.recv_command()
        assert cmd.type == T.CONNECTED, cmd
        return cmd.connected

    def request(self, data: bytes) -> pb.BaseCommand:
        self.send(data)
        return self.recv_command()

    def create_producer(self, topic: str, producer_id: int = 1, *, name: str | None = None,
                        access_mode: int = 0) -> pb.BaseCommand:
        return self.request(C.encode_producer(topic, producer_id, next(self.request_ids),
                                              name, access_mode))
