"""The real CONNECT frame of pulsar-client 3.13 (C++ 4.2.0) decodes as protocol version 20.

``fixtures/pulsar_client_3_13_connect.bin`` holds the first bytes the official client sent to a
bare listening socket. Recapture it with
``PYTHONPATH=. .venv/bin/python tests/protocol/test_protocol_client_connect.py --write``.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from protocol.frames import NEED_DATA, Frame, FrameDecoder

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "pulsar_client_3_13_connect.bin"
CAPTURE_TIMEOUT_S = 10.0


def capture_first_frame_from_official_client() -> bytes:
    """Listen on 127.0.0.1:0, let ``pulsar.Client.create_producer`` connect, and return the bytes
    of its first frame (the client then fails: nobody answers)."""
    import pulsar

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(CAPTURE_TIMEOUT_S)
        port = listener.getsockname()[1]
        client = pulsar.Client(
            f"pulsar://127.0.0.1:{port}",
            operation_timeout_seconds=2,
            connection_timeout_ms=2000,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        )
        failure: list[BaseException] = []

        def produce() -> None:
            try:
                client.create_producer("capture-topic")
            except Exception as exc:  # expected: the fake server never answers
                failure.append(exc)

        worker = threading.Thread(target=produce, name="capture-create-producer", daemon=True)
        worker.start()
        try:
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(CAPTURE_TIMEOUT_S)
                received = b""
                deadline = time.monotonic() + CAPTURE_TIMEOUT_S
                # Read exactly one frame: 4-byte total size, then that many bytes.
                while time.monotonic() < deadline:
                    if len(received) >= 4 and len(received) >= 4 + int.from_bytes(received[:4], "big"):
                        break
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    received += chunk
        finally:
            listener.close()
            worker.join(CAPTURE_TIMEOUT_S)
            client.close()
        assert not worker.is_alive(), "create_producer did not give up"
        total = int.from_bytes(received[:4], "big")
        return received[: 4 + total]


def decode_single_frame(data: bytes) -> Frame:
    decoder = FrameDecoder()
    decoder.receive_data(data)
    frame = decoder.next_frame()
    assert frame is not NEED_DATA
    assert decoder.next_frame() is NEED_DATA
    assert decoder.buffered == 0
    return frame


def assert_is_cpp_client_connect(frame: Frame) -> None:
    from protocol import pulsar_pb as pb

    assert frame.command.type == pb.BaseCommand.CONNECT
    connect = frame.command.connect
    assert connect.protocol_version == 20
    assert connect.client_version.startswith("Pulsar-CPP-v4")
    assert frame.entry is None


def test_committed_fixture_decodes_to_connect_v20() -> None:
    frame = decode_single_frame(FIXTURE.read_bytes())
    assert_is_cpp_client_connect(frame)
    assert frame.command.connect.auth_method_name == "none"
    assert frame.command.connect.feature_flags.supports_broker_entry_metadata


def test_generated_module_parses_the_fixture_command() -> None:
    from protocol.generated import pulsar_api_pb2

    data = FIXTURE.read_bytes()
    command_size = int.from_bytes(data[4:8], "big")
    cmd = pulsar_api_pb2.BaseCommand()
    cmd.ParseFromString(data[8 : 8 + command_size])
    assert cmd.type == 2
    assert cmd.connect.protocol_version == 20


@pytest.mark.timeout(60)
def test_installed_client_still_sends_connect_v20() -> None:
    frame = decode_single_frame(capture_first_frame_from_official_client())
    assert_is_cpp_client_connect(frame)


if __name__ == "__main__":
    if "--write" in sys.argv:
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        FIXTURE.write_bytes(capture_first_frame_from_official_client())
        print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size} bytes)")
