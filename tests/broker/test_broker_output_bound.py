"""A peer that never reads cannot make the broker queue its answers without limit.

Past ``pulsarChannelWriteBufferHighWaterMark`` bytes of unsent output the broker stops reading
that connection (PIP-434's ``pulsarChannelPauseReceivingRequestsIfUnwritable``, on by default
in Horae) and reads it again below ``pulsarChannelWriteBufferLowWaterMark``. The flooding peers
here are raw sockets fed by a thread with blocking writes, so the broker's stop shows as the
writer blocking; what the broker holds for them is read from the in-process connection's
transport; a healthy official client works beside them; and once the flooder reads, every
answer arrives, in order.
"""

from __future__ import annotations

import socket
import threading
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from broker_rawclient import make_entry
from conftest import make_client
from rest import http_json
from waiting import wait_until

from broker.net.throttle import OutputPauses, PublishBuffer, ReadThrottle
from broker.subscriptions.consumer import HOLD_FRAMES
from broker.subscriptions.dispatchers import base as dispatch_base
from broker.subscriptions.dispatchers.base import MAX_READ_ENTRIES
from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.frames import NEED_DATA, Frame, FrameDecoder
from protocol.topic_list import encode_watch_topic_list, encode_watch_topic_update, topics_hash

T = pb.BaseCommand
HIGH = 16 * 1024
LOW = 8 * 1024
#: uvloop hands at most 256 KiB to one data_received; the answers to one read are no bigger
#: than the read for PINGs, and the broker may have taken one more read before the pause
#: became visible to the test: what the broker may hold beyond the high water mark.
ONE_READ = 256 * 1024
BOUND = HIGH + 2 * ONE_READ
OVERRIDES = {
    "pulsarChannelWriteBufferHighWaterMark": HIGH,
    "pulsarChannelWriteBufferLowWaterMark": LOW,
    "journalSyncData": False,
}


class _Reader:
    def __init__(self) -> None:
        self.reading = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


def test_output_full_is_a_reason_of_its_own_and_counted() -> None:
    pauses = OutputPauses()
    throttle = ReadThrottle(PublishBuffer(0), 2, lambda: None, pauses)
    reader = _Reader()
    throttle.attach(reader)
    throttle.output_full(True)
    throttle.output_full(True)  # one pause, however often the transport says so
    assert not reader.reading and pauses.paused_times == 1 and pauses.paused_connections == 1
    throttle.started(2, 0)  # the request limit holds it too
    throttle.output_full(False)
    assert not reader.reading and pauses.paused_connections == 0
    throttle.finished(2, 0)
    assert reader.reading
    throttle.output_full(True)
    throttle.detach()  # a lost connection is no longer counted as paused
    assert pauses.paused_times == 2 and pauses.paused_connections == 0


# ---------------------------------------------------------------------------- on the wire


class Flooder:
    """A raw connection whose writes run on a thread (blocking when the broker stops reading)
    and whose reads happen only when the test says so."""

    def __init__(self, broker: Any) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # A small receive window: the kernel holds little of what the broker sends.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.connect(("127.0.0.1", broker.broker_port))
        self.sock.settimeout(20.0)
        self.port = self.sock.getsockname()[1]
        self.decoder = FrameDecoder()
        self.sent_all = threading.Event()
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def close(self) -> None:
        self.sock.close()
        if self._thread is not None:
            self._thread.join(10)

    def request(self, data: bytes) -> pb.BaseCommand:
        self.sock.sendall(data)
        return self.next_frame().command

    def next_frame(self) -> Frame:
        while True:
            frame = self.decoder.next_frame()
            if frame is not NEED_DATA:
                return frame  # type: ignore[return-value]
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("broker closed the connection")
            self.decoder.receive_data(data)

    def write_in_background(self, chunks: Iterator[bytes]) -> None:
        def run() -> None:
            try:
                for chunk in chunks:
                    self.sock.sendall(chunk)
                self.sent_all.set()
            except BaseException as exc:  # reported by the test
                self.error = exc

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()


@pytest.fixture
def flooders() -> Iterator[list[Flooder]]:
    made: list[Flooder] = []
    yield made
    for flooder in made:
        flooder.close()


def _server_side(broker: Any, port: int) -> Any:
    """The broker's connection for the flooder, its kernel send buffer made small (as over a
    slow network): the kernel then holds little of what the broker sends, the rest is the
    broker's to hold or not."""
    def find() -> Any:
        return next((c for c in broker.server.connections
                     if c.remote_address.endswith(f":{port}")), None)

    conn = wait_until(lambda: broker.call(find), message="the broker's side of the flooder")
    sock = broker.call(lambda: conn._transport.get_extra_info("socket"))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    return conn


def _buffered(broker: Any, conn: Any) -> int:
    """Bytes the broker holds for *conn*: its transport's buffer and frames queued to flush."""
    return int(broker.call(lambda: conn._transport.get_write_buffer_size()
                           + conn._output.queued))


def _healthy_pair_works(broker: Any, topic: str, count: int = 20) -> None:
    client = make_client(broker.service_url)
    try:
        consumer = client.subscribe(topic, "healthy")
        producer = client.create_producer(topic)
        for i in range(count):
            producer.send(f"m{i}".encode())
        got = [consumer.receive(timeout_millis=10_000).data() for _ in range(count)]
        assert got == [f"m{i}".encode() for i in range(count)]
    finally:
        client.close()


def _scrape(broker: Any) -> str:
    with urllib.request.urlopen(broker.web_url + "/metrics", timeout=10) as resp:
        return str(resp.read().decode())


def _sample(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not exported")


def _paused_or_over(broker: Any, conn: Any) -> Callable[[], bool]:
    """True once the broker stopped reading the flooder, or holds more than the bound for it.
    (The kernel's socket buffers may take all the flooder writes: its writer need not block.)"""
    return lambda: bool(broker.call(lambda: conn.throttle.paused)) \
        or _buffered(broker, conn) > BOUND


def test_ping_flood_from_a_peer_that_never_reads_stays_bounded(
        broker_factory: Callable[..., Any], flooders: list[Flooder]) -> None:
    broker = broker_factory(config_overrides=OVERRIDES)
    flooder = Flooder(broker)
    flooders.append(flooder)
    assert flooder.request(C.encode_connect("flooder", 20)).type == T.CONNECTED
    conn = _server_side(broker, flooder.port)
    ping = C.encode_ping()
    chunk = ping * (64 * 1024 // len(ping))
    chunks = 64  # 4 MiB of PINGs: 4 MiB of PONGs if the broker answered them all
    flooder.write_in_background(iter([chunk] * chunks))
    wait_until(_paused_or_over(broker, conn), timeout_s=60,
               message="broker stopped reading the flooder")
    held = _buffered(broker, conn)
    assert held <= BOUND, f"broker holds {held} bytes of PONGs for a peer that never reads"
    assert flooder.error is None
    _healthy_pair_works(broker, "persistent://public/default/beside-a-ping-flood")
    metrics = _scrape(broker)
    assert _sample(metrics, "horae_connections_output_paused") == 1
    assert _sample(metrics, "horae_connection_output_paused_total") >= 1
    # The flooder reads at last: one PONG for every PING, nothing else.
    pings = chunks * (len(chunk) // len(ping))
    for _ in range(pings):
        assert flooder.next_frame().command.type == T.PONG
    assert flooder.sent_all.wait(30) and flooder.error is None
    wait_until(lambda: not broker.call(lambda: conn.throttle.paused),
               message="broker reads the flooder again")


def test_producer_that_never_reads_receipts_is_not_read_and_gets_every_receipt_in_order(
        broker_factory: Callable[..., Any], flooders: list[Flooder]) -> None:
    broker = broker_factory(config_overrides=OVERRIDES)
    flooder = Flooder(broker)
    flooders.append(flooder)
    topic = "persistent://public/default/receipts-unread"
    assert flooder.request(C.encode_connect("flooder", 20)).type == T.CONNECTED
    reply = flooder.request(C.encode_producer(topic, 1, 1, "unread", 0))
    assert reply.type == T.PRODUCER_SUCCESS, reply
    conn = _server_side(broker, flooder.port)
    sends = 40_000
    per_chunk = 200
    entry = make_entry(b"p", producer_name="unread")

    def chunks() -> Iterator[bytes]:
        for start in range(0, sends, per_chunk):
            yield b"".join(C.encode_send(1, seq, entry) for seq in range(start, start + per_chunk))

    flooder.write_in_background(chunks())
    wait_until(_paused_or_over(broker, conn), timeout_s=60,
               message="broker stopped reading the producer")
    held = _buffered(broker, conn)
    assert held <= BOUND, f"broker holds {held} bytes of receipts for a peer that never reads"
    assert flooder.error is None
    wait_until(lambda: broker.call(lambda: conn.throttle.output_paused),
               message="not read because of its unread receipts")
    _healthy_pair_works(broker, "persistent://public/default/beside-unread-receipts")
    # Every SEND is answered, in order, once the producer reads.
    for seq in range(sends):
        cmd = flooder.next_frame().command
        assert cmd.type == T.SEND_RECEIPT, cmd
        assert cmd.send_receipt.sequence_id == seq
    assert flooder.sent_all.wait(30) and flooder.error is None


def test_no_pause_when_pausing_is_turned_off(broker_factory: Callable[..., Any],
                                             flooders: list[Flooder]) -> None:
    broker = broker_factory(config_overrides={
        **OVERRIDES, "pulsarChannelPauseReceivingRequestsIfUnwritable": False})
    flooder = Flooder(broker)
    flooders.append(flooder)
    assert flooder.request(C.encode_connect("flooder", 20)).type == T.CONNECTED
    conn = _server_side(broker, flooder.port)
    ping = C.encode_ping()
    flooder.write_in_background(iter([ping * (64 * 1024 // len(ping))] * 8))
    assert flooder.sent_all.wait(30), "the broker stopped reading with pausing off"
    assert not broker.call(lambda: conn.throttle.output_paused)


@pytest.mark.parametrize("backlog", [False, True], ids=["live", "backlog"])
def test_dispatch_to_a_consumer_that_never_reads_stops_at_the_high_water_mark(
        broker_factory: Callable[..., Any], flooders: list[Flooder],
        monkeypatch: pytest.MonkeyPatch, backlog: bool) -> None:
    """FLOW permits do not bound what a consumer that never reads costs (it may give a
    million); the connection's writability does: dispatch rounds stop once its output passed
    the high water mark. Beyond it the broker holds at most one round (MAX_READ_ENTRIES
    entries) and the few frames the consumer may keep for the dispatcher's next slice
    (HOLD_FRAMES), however many rounds fit in one slice on a busy machine."""
    # a busy machine's slice: every round of the backlog fits in it (the rounds run in process)
    monkeypatch.setattr(dispatch_base, "DISPATCH_SLICE_S", 5.0)
    broker = broker_factory(config_overrides=OVERRIDES)
    topic = "persistent://public/default/never-read"
    reader = Flooder(broker)
    flooders.append(reader)
    assert reader.request(C.encode_connect("reader", 20)).type == T.CONNECTED
    reply = reader.request(C.encode_subscribe(topic, "slow", pb.CommandSubscribe.Shared, 1, 1))
    assert reply.type == T.SUCCESS, reply
    conn = _server_side(broker, reader.port)
    if not backlog:
        reader.sock.sendall(C.encode_flow(1, 1_000_000))
    payload = b"x" * 1024
    count = 3000  # 3 MiB of messages
    client = make_client(broker.service_url)
    try:
        producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        # The payloads stay referenced until flushed (the client may read them late).
        payloads = [payload + str(i).encode() for i in range(count)]
        for data in payloads:
            producer.send_async(data, lambda res, msg_id: None)
        producer.flush()
        _healthy_pair_works(broker, "persistent://public/default/beside-a-slow-consumer")
    finally:
        client.close()
    if backlog:  # all of it published before the permits: rounds back to back
        reader.sock.sendall(C.encode_flow(1, 1_000_000))
    wait_until(lambda: broker.call(lambda: conn.writes_paused),
               message="the consumer's connection is not writable")
    frame = len(payload) + 200  # an entry and its MESSAGE frame
    held = _buffered(broker, conn)
    # the transport's buffer below the mark, the connection's queue below it, then the frames
    # of one flush: the consumer's kept frames and the round that made it write them
    bound = 2 * HIGH + (HOLD_FRAMES + MAX_READ_ENTRIES) * frame
    assert held <= bound, f"broker holds {held} bytes for a consumer that never reads"
    # The consumer reads at last: every message, in order.
    seen = 0
    while seen < count:
        frame = reader.next_frame()
        if frame.command.type == T.MESSAGE:
            assert frame.entry is not None and frame.entry.endswith(str(seen).encode())
            seen += 1


def _apply_watch_updates(reader: Flooder, topics: set[str], expected: set[str]) -> str:
    """Read the watcher's updates into *topics* until it holds *expected*; the last hash."""
    digest = ""
    for _ in range(100_000):  # bounded: the socket's timeout ends a stalled read
        if topics == expected and digest:
            return digest
        cmd = reader.next_frame().command
        assert cmd.type == T.WATCH_TOPIC_UPDATE, cmd
        update = cmd.watchTopicUpdate
        topics.update(update.new_topics)
        topics.difference_update(update.deleted_topics)
        digest = update.topics_hash
    raise AssertionError("the watcher's updates never reached the namespace's topics")


def test_topic_list_updates_for_a_watcher_that_never_reads_are_bounded_and_coalesced(
        broker_factory: Callable[..., Any], flooders: list[Flooder]) -> None:
    """A pattern consumer's connection that stops reading while other clients create and delete
    many matching topics: the broker holds no more than the high water mark and one update for
    it, and once it reads again it learns the net change in one update, the hash of the
    namespace's list as it is then."""
    broker = broker_factory(config_overrides=OVERRIDES)
    reader = Flooder(broker)
    flooders.append(reader)
    assert reader.request(C.encode_connect("watcher", 20)).type == T.CONNECTED
    success = reader.request(encode_watch_topic_list(
        1, 7, "public/default", "persistent://public/default/churn-.*"))
    assert success.type == T.WATCH_TOPIC_LIST_SUCCESS, success
    assert list(success.watchTopicListSuccess.topic) == []
    conn = _server_side(broker, reader.port)
    partitions = 400
    base = "/admin/v2/persistent/public/default"
    for k in range(12):  # 12 x 400 partitions created, all but the last topic's deleted
        status, _ = http_json(broker.web_url, "PUT", f"{base}/churn-{k}/partitions",
                              str(partitions).encode())
        assert status == 204
        if k < 11:
            status, _ = http_json(broker.web_url, "DELETE", f"{base}/churn-{k}/partitions")
            assert status == 204
    assert broker.call(lambda: conn.writes_paused), "the watcher's connection stayed writable"
    held = _buffered(broker, conn)
    update = len(encode_watch_topic_update(
        7, [f"persistent://public/default/churn-0-partition-{partitions}"], [], "0" * 8))
    assert held <= 2 * HIGH + update, f"broker holds {held} bytes of topic-list updates"
    expected = {f"persistent://public/default/churn-11-partition-{i}" for i in range(partitions)}
    digest = _apply_watch_updates(reader, set(), expected)
    assert digest == topics_hash(expected)
