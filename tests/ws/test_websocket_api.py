"""Pulsar's WebSocket API against a real broker, with a real WebSocket client (aiohttp's).

The frames are those of Pulsar's documentation ("Pulsar WebSocket API"): the producer example
(``payload``, ``properties``, ``context``), the consumer's acks, negative acks, ``permit`` in
pull mode, ``isEndOfTopic``, the reader's ``messageId``; and the official Python client on the
other side, so both directions meet what a binary client sees.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any

import aiohttp
import pytest
from conftest import make_client

from tests.ws.conftest import b64, eventually, receive, unb64, ws_base

TOPIC = "persistent/public/default/ws-topic"


async def _stats(http: aiohttp.ClientSession, broker: Any, topic: str = TOPIC) -> Any:
    async with http.get(f"{broker.web_url}/admin/v2/{topic}/stats") as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


async def _produce(http: aiohttp.ClientSession, broker: Any, n: int, *, topic: str = TOPIC,
                   prefix: str = "m", query: str = "", **extra: Any) -> list[str]:
    """Publish *n* messages (``m0``...) through the producer endpoint; their message ids."""
    ids = []
    async with http.ws_connect(f"{ws_base(broker)}/ws/v2/producer/{topic}{query}") as ws:
        for i in range(n):
            await ws.send_str(json.dumps({"payload": b64(f"{prefix}{i}".encode()),
                                          "context": str(i),
                                          **extra}))
        for i in range(n):
            ack = await receive(ws)
            assert ack["result"] == "ok" and ack["context"] == str(i), ack
            ids.append(ack["messageId"])
    return ids


async def test_documented_round_trip(broker: Any, http: aiohttp.ClientSession) -> None:
    base = ws_base(broker)
    consumer = await http.ws_connect(f"{base}/ws/v2/consumer/{TOPIC}/my-sub")
    async with http.ws_connect(f"{base}/ws/v2/producer/{TOPIC}") as producer:
        await producer.send_str(json.dumps({
            "payload": "SGVsbG8gV29ybGQ=", "properties": {"key1": "value1", "key2": "value2"},
            "context": 5, "key": "my-key"}))
        ack = await receive(producer)
    assert ack["result"] == "ok" and ack["context"] == "5"
    msg = await receive(consumer)
    assert msg["messageId"] == ack["messageId"]
    assert unb64(msg["payload"]) == b"Hello World"
    assert msg["properties"] == {"key1": "value1", "key2": "value2"}
    assert msg["key"] == "my-key" and msg["redeliveryCount"] == 0
    assert msg["publishTime"].endswith("Z")
    await consumer.send_str(json.dumps({"messageId": msg["messageId"]}))

    async def drained() -> bool:
        return (await _stats(http, broker))["subscriptions"]["my-sub"]["msgBacklog"] == 0

    await eventually(drained, "the WebSocket ack reached the subscription")
    await consumer.close()


async def test_binary_client_and_websocket_meet(broker: Any, http: aiohttp.ClientSession) -> None:
    import pulsar

    client = make_client(broker.service_url)
    try:
        sub = client.subscribe("ws-meet", "bin", consumer_type=pulsar.ConsumerType.Shared)
        ids = await _produce(http, broker, 1, topic="persistent/public/default/ws-meet",
                             properties={"p": "1"}, key="k1")
        got = await asyncio.to_thread(sub.receive, 10_000)
        assert got.data() == b"m0" and got.properties() == {"p": "1"}
        assert got.partition_key() == "k1"
        assert (got.message_id().ledger_id(), got.message_id().entry_id()) == \
            _ids(ids[0])
        async with http.ws_connect(f"{ws_base(broker)}/ws/v2/reader/persistent/public/default/"
                                   "ws-meet?messageId=earliest") as reader:
            producer = client.create_producer("ws-meet", batching_enabled=True,
                                              batching_max_publish_delay_ms=50)
            for i in range(3):
                producer.send_async(f"b{i}".encode(), None, properties={"i": str(i)})
            await asyncio.to_thread(producer.flush)
            seen = [await receive(reader) for _ in range(4)]
        assert [unb64(m["payload"]) for m in seen] == [b"m0", b"b0", b"b1", b"b2"]
        assert [m["properties"] for m in seen[1:]] == [{"i": "0"}, {"i": "1"}, {"i": "2"}]
        assert len({m["messageId"] for m in seen}) == 4
    finally:
        client.close()


def _ids(message_id: str) -> tuple[int, int]:
    from broker.websocket.frames import decode_message_id

    ref = decode_message_id(message_id)
    return ref.ledger_id, ref.entry_id


async def test_batch_messages_acked_one_by_one(broker: Any, http: aiohttp.ClientSession) -> None:
    client = make_client(broker.service_url)
    try:
        consumer = await http.ws_connect(
            f"{ws_base(broker)}/ws/v2/consumer/persistent/public/default/ws-batch/s"
            "?subscriptionType=Shared")
        producer = client.create_producer("ws-batch", batching_enabled=True,
                                          batching_max_publish_delay_ms=50)
        for i in range(4):
            producer.send_async(f"x{i}".encode(), None)
        await asyncio.to_thread(producer.flush)
        msgs = [await receive(consumer) for _ in range(4)]
        assert {_ids(m["messageId"]) for m in msgs} == {_ids(msgs[0]["messageId"])}  # one entry
        for m in msgs[:3]:
            await consumer.send_str(json.dumps({"messageId": m["messageId"]}))
        topic = "persistent/public/default/ws-batch"

        async def backlog() -> int:
            return int((await _stats(http, broker, topic))["subscriptions"]["s"]["msgBacklog"])

        assert await backlog() == 1  # three of four acked: the entry stays
        await consumer.send_str(json.dumps({"messageId": msgs[3]["messageId"]}))

        async def empty() -> bool:
            return await backlog() == 0

        await eventually(empty, "the last batch index acked the entry")
        await consumer.close()
    finally:
        client.close()


async def test_reader_starts_after_the_given_id(broker: Any, http: aiohttp.ClientSession) -> None:
    ids = await _produce(http, broker, 3)
    url = f"{ws_base(broker)}/ws/v2/reader/{TOPIC}"
    async with http.ws_connect(url, params={"messageId": ids[0]}) as reader:
        first = await receive(reader)
        assert (first["messageId"], unb64(first["payload"])) == (ids[1], b"m1")
        await reader.send_str(json.dumps({"messageId": first["messageId"]}))
        second = await receive(reader)
        assert unb64(second["payload"]) == b"m2"
        await reader.send_str(json.dumps({"type": "isEndOfTopic"}))
        assert await receive(reader) == {"endOfTopic": False}
    async with http.ws_connect(f"{ws_base(broker)}/ws/v2/reader/{TOPIC}") as latest:
        await _produce(http, broker, 1)
        assert unb64((await receive(latest))["payload"]) == b"m0"  # only what came after


async def test_delayed_delivery_from_the_producer(broker: Any, http: aiohttp.ClientSession) -> None:
    topic = "persistent/public/default/ws-delayed"
    consumer = await http.ws_connect(
        f"{ws_base(broker)}/ws/v2/consumer/{topic}/d?subscriptionType=Shared")
    sent_at = time.time()
    await _produce(http, broker, 1, topic=topic, prefix="at", deliverAt=int((sent_at + 1.5) * 1000))
    await _produce(http, broker, 1, topic=topic, prefix="after", deliverAfterMs=800)
    await _produce(http, broker, 1, topic=topic, prefix="now")
    arrivals = []
    for _ in range(3):
        msg = await receive(consumer)
        arrivals.append((unb64(msg["payload"]), time.time() - sent_at))
        await consumer.send_str(json.dumps({"messageId": msg["messageId"]}))
    assert [payload for payload, _ in arrivals] == [b"now0", b"after0", b"at0"]
    assert arrivals[1][1] >= 0.8 - 0.05 and arrivals[2][1] >= 1.5 - 0.05
    await consumer.close()


async def test_negative_ack_redelivers(broker: Any, http: aiohttp.ClientSession) -> None:
    consumer = await http.ws_connect(
        f"{ws_base(broker)}/ws/v2/consumer/{TOPIC}/n?subscriptionType=Shared"
        "&negativeAckRedeliveryDelay=100")
    await _produce(http, broker, 1)
    msg = await receive(consumer)
    await consumer.send_str(json.dumps({"type": "negativeAcknowledge",
                                        "messageId": msg["messageId"]}))
    again = await receive(consumer)
    assert again["messageId"] == msg["messageId"] and again["redeliveryCount"] == 1
    await consumer.close()


async def test_ack_timeout_redelivers(broker: Any, http: aiohttp.ClientSession) -> None:
    consumer = await http.ws_connect(
        f"{ws_base(broker)}/ws/v2/consumer/{TOPIC}/t?subscriptionType=Shared"
        "&ackTimeoutMillis=1000")
    await _produce(http, broker, 1)
    msg = await receive(consumer)
    again = await receive(consumer)
    assert again["messageId"] == msg["messageId"] and again["redeliveryCount"] == 1
    await consumer.close()


async def test_pull_mode_waits_for_permits(broker: Any, http: aiohttp.ClientSession) -> None:
    consumer = await http.ws_connect(
        f"{ws_base(broker)}/ws/v2/consumer/{TOPIC}/p?pullMode=true&subscriptionType=Shared")
    await _produce(http, broker, 3)
    await consumer.send_str(json.dumps({"type": "isEndOfTopic"}))
    assert await receive(consumer) == {"endOfTopic": False}  # no message came before it
    await consumer.send_str(json.dumps({"type": "permit", "permitMessages": 2}))
    got = [unb64((await receive(consumer))["payload"]) for _ in range(2)]
    assert got == [b"m0", b"m1"]
    await consumer.send_str(json.dumps({"type": "isEndOfTopic"}))
    assert await receive(consumer) == {"endOfTopic": False}  # the third waits for a permit
    await consumer.send_str(json.dumps({"type": "permit"}))  # no permitMessages: refused
    closed = await consumer.receive(timeout=10)
    assert closed.type == aiohttp.WSMsgType.CLOSE and closed.data == 1003
    assert "Failed to de-serialize from JSON" in closed.extra


async def test_push_mode_holds_at_most_the_receiver_queue(broker: Any,
                                                          http: aiohttp.ClientSession) -> None:
    queue = 4
    await _produce(http, broker, 12)
    consumer = await http.ws_connect(
        f"{ws_base(broker)}/ws/v2/consumer/{TOPIC}/q?subscriptionType=Shared"
        f"&receiverQueueSize={queue}")
    # the subscription was made after the messages: start it at the first one
    async with http.post(f"{broker.web_url}/admin/v2/{TOPIC}/subscription/q/resetcursor/0") \
            as resp:
        assert resp.status == 204, await resp.text()
    await consumer.close()
    consumer = await http.ws_connect(
        f"{ws_base(broker)}/ws/v2/consumer/{TOPIC}/q?subscriptionType=Shared"
        f"&receiverQueueSize={queue}")
    first = [await receive(consumer) for _ in range(queue)]

    async def sent_out() -> int:
        sub = (await _stats(http, broker))["subscriptions"]["q"]
        return int(sum(c["msgOutCounter"] for c in sub["consumers"]))

    async def permits_used() -> bool:
        return await sent_out() >= 2 * queue

    # queue unacked by the client, and as many held back (the client's receiver queue)
    await eventually(permits_used, "the broker used the permits given back")
    await consumer.send_str(json.dumps({"type": "isEndOfTopic"}))
    assert await receive(consumer) == {"endOfTopic": False}  # unacked: nothing more came
    assert await sent_out() == 2 * queue  # the broker sent no more than it was allowed
    await consumer.send_str(json.dumps({"messageId": first[0]["messageId"]}))
    assert unb64((await receive(consumer))["payload"]) == f"m{queue}".encode()
    await consumer.close()


async def test_end_of_topic_after_terminate(broker: Any, http: aiohttp.ClientSession) -> None:
    topic = "persistent/public/default/ws-end"
    consumer = await http.ws_connect(f"{ws_base(broker)}/ws/v2/consumer/{topic}/e")
    await _produce(http, broker, 1, topic=topic)
    msg = await receive(consumer)
    async with http.post(f"{broker.web_url}/admin/v2/{topic}/terminate") as resp:
        assert resp.status == 200, await resp.text()
    await consumer.send_str(json.dumps({"messageId": msg["messageId"]}))

    async def reached() -> bool:
        await consumer.send_str(json.dumps({"type": "isEndOfTopic"}))
        return bool((await receive(consumer))["endOfTopic"])

    await eventually(reached, "isEndOfTopic after the topic was terminated")
    with pytest.raises(aiohttp.WSServerHandshakeError) as info:
        await http.ws_connect(f"{ws_base(broker)}/ws/v2/producer/{topic}")
    assert info.value.status == 503  # Pulsar's answer for TopicTerminatedException
    await consumer.close()


async def test_refusals_before_the_upgrade(broker: Any, http: aiohttp.ClientSession) -> None:
    base = ws_base(broker)
    async with http.get(f"{broker.web_url}/ws/v2/producer/{TOPIC}") as resp:
        assert resp.status == 400
    for path, status, reason in (
        (f"/ws/v2/consumer/{TOPIC}/s?subscriptionType=Bogus", 400,
         "Invalid query params: Invalid subscriptionType Bogus"),
        (f"/ws/v2/producer/{TOPIC}?sendTimeoutMillis=soon", 400,
         'Invalid query params: For input string: "soon"'),
        (f"/ws/v2/reader/{TOPIC}?messageId=garbage", 400, None),
        ("/ws/v2/producer/persistent/no-such-tenant/default/t", 404, None),
        (f"/ws/v2/producer/{TOPIC}?encryptionKeys=k1", 500,
         "Failed to create producer/consumer: Can't add encryption key without configuring "
         "cryptoKeyReaderFactoryClassName"),
    ):
        with pytest.raises(aiohttp.WSServerHandshakeError) as info:
            await http.ws_connect(base + path)
        assert info.value.status == status, path
        if reason is not None:
            async with http.get(broker.web_url + path, headers={
                    "Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}) as resp:
                assert (await resp.json())["reason"] == reason


async def test_second_exclusive_consumer_is_busy(broker: Any, http: aiohttp.ClientSession) -> None:
    url = f"{ws_base(broker)}/ws/v2/consumer/{TOPIC}/x"
    first = await http.ws_connect(url)
    with pytest.raises(aiohttp.WSServerHandshakeError) as info:
        await http.ws_connect(url)
    assert info.value.status == 409
    await first.close()


async def test_bad_frames_close_or_answer(broker: Any, http: aiohttp.ClientSession) -> None:
    async with http.ws_connect(f"{ws_base(broker)}/ws/v2/producer/{TOPIC}") as producer:
        await producer.send_str("{not json")
        assert (await receive(producer))["result"] == "send-error:3"
        await producer.send_str(json.dumps({"payload": "%%%", "context": "c"}))
        bad = await receive(producer)
        assert bad["result"] == "send-error:7" and bad["context"] == "c"
        await producer.send_str(json.dumps({"payload": b64(b"ok")}))
        assert (await receive(producer))["result"] == "ok"  # the session goes on
    async with http.ws_connect(f"{ws_base(broker)}/ws/v2/producer/{TOPIC}?maxPendingMessages=2",
                               autoping=False) as producer:
        for _ in range(5):  # pings take no answer slot
            await producer.ping(b"x")
            pong = await producer.receive(timeout=10)
            assert pong.type == aiohttp.WSMsgType.PONG and pong.data == b"x"
        await producer.send_str(json.dumps({"payload": b64(b"after pings")}))
        assert (await receive(producer))["result"] == "ok"
        await producer.send_bytes(b"binary")
        closed = await producer.receive(timeout=10)
        assert closed.type == aiohttp.WSMsgType.CLOSE and closed.data == 1003
    consumer = await http.ws_connect(f"{ws_base(broker)}/ws/v2/consumer/{TOPIC}/bad")
    await consumer.send_str(json.dumps({"messageId": "@@@"}))
    closed = await consumer.receive(timeout=10)
    assert closed.type == aiohttp.WSMsgType.CLOSE and closed.data == 1003


async def test_unsubscribe(broker: Any, http: aiohttp.ClientSession) -> None:
    consumer = await http.ws_connect(f"{ws_base(broker)}/ws/v2/consumer/{TOPIC}/gone")
    await consumer.send_str(json.dumps({"type": "unsubscribe"}))
    closed = await consumer.receive(timeout=10)
    assert closed.type == aiohttp.WSMsgType.CLOSE and closed.data == 1000
    assert "gone" not in (await _stats(http, broker))["subscriptions"]


async def test_disabled_service_has_no_endpoints(broker_factory: Any,
                                                 http: aiohttp.ClientSession) -> None:
    off = broker_factory(config_overrides={"webSocketServiceEnabled": False})
    with pytest.raises(aiohttp.WSServerHandshakeError) as info:
        await http.ws_connect(f"{ws_base(off)}/ws/v2/producer/{TOPIC}")
    assert info.value.status == 404


async def test_sessions_survive_a_topic_unload(broker: Any, http: aiohttp.ClientSession) -> None:
    topic = "persistent/public/default/ws-unload"
    base = ws_base(broker)
    consumer = await http.ws_connect(f"{base}/ws/v2/consumer/{topic}/u?subscriptionType=Shared")
    reader = await http.ws_connect(f"{base}/ws/v2/reader/{topic}?messageId=earliest")
    producer = await http.ws_connect(f"{base}/ws/v2/producer/{topic}")
    await producer.send_str(json.dumps({"payload": b64(b"before")}))
    assert (await receive(producer))["result"] == "ok"
    first = await receive(consumer)
    await consumer.send_str(json.dumps({"messageId": first["messageId"]}))
    assert unb64((await receive(reader))["payload"]) == b"before"
    async with http.put(f"{broker.web_url}/admin/v2/{topic}/unload") as resp:
        assert resp.status == 204, await resp.text()
    await producer.send_str(json.dumps({"payload": b64(b"after"), "context": "a"}))
    ack = await receive(producer)
    assert ack["result"] == "ok" and ack["context"] == "a"  # the producer came back by itself
    assert unb64((await receive(consumer))["payload"]) == b"after"
    assert unb64((await receive(reader))["payload"]) == b"after"  # not "before" again
    for ws in (producer, consumer, reader):
        await ws.close()


async def test_consumer_follows_a_cursor_reset(broker: Any, http: aiohttp.ClientSession) -> None:
    topic = "persistent/public/default/ws-reset"
    consumer = await http.ws_connect(f"{ws_base(broker)}/ws/v2/consumer/{topic}/r")
    await _produce(http, broker, 3, topic=topic)
    for i in range(3):
        msg = await receive(consumer)
        assert unb64(msg["payload"]) == f"m{i}".encode()
        await consumer.send_str(json.dumps({"messageId": msg["messageId"]}))
    async with http.post(f"{broker.web_url}/admin/v2/{topic}/subscription/r/resetcursor/0") \
            as resp:
        assert resp.status == 204, await resp.text()
    again = [unb64((await receive(consumer))["payload"]) for _ in range(3)]
    assert again == [b"m0", b"m1", b"m2"]
    await consumer.close()


async def test_dead_letter_topic_after_max_redeliveries(broker: Any,
                                                        http: aiohttp.ClientSession) -> None:
    topic = "persistent/public/default/ws-dlq"
    base = ws_base(broker)
    consumer = await http.ws_connect(
        f"{base}/ws/v2/consumer/{topic}/s?subscriptionType=Shared&maxRedeliverCount=1"
        "&negativeAckRedeliveryDelay=0")
    ids = await _produce(http, broker, 1, topic=topic, properties={"p": "v"}, key="k")
    for count in (0, 1):
        msg = await receive(consumer)
        assert (msg["messageId"], msg["redeliveryCount"]) == (ids[0], count)
        await consumer.send_str(json.dumps({"type": "negativeAcknowledge",
                                            "messageId": msg["messageId"]}))
    dlq = f"{topic}-s-DLQ"  # Pulsar's default name: <topic>-<subscription>-DLQ

    async def letter() -> Any:
        async with http.ws_connect(f"{base}/ws/v2/reader/{dlq}?messageId=earliest") as reader:
            try:
                return await receive(reader, timeout=0.5)
            except TimeoutError:
                return None

    dead = await eventually(letter, "the message reached the dead-letter topic")
    assert unb64(dead["payload"]) == b"m0" and dead["key"] == "k"
    assert dead["properties"]["p"] == "v"
    assert dead["properties"]["REAL_TOPIC"] == "persistent://public/default/ws-dlq"
    assert dead["properties"]["ORIGIN_MESSAGE_ID"] == "{}:{}:-1".format(*_ids(ids[0]))

    async def acked() -> bool:
        stats = await _stats(http, broker, topic)
        return stats["subscriptions"]["s"]["msgBacklog"] == 0

    await eventually(acked, "the dead-lettered message was acknowledged")
    await consumer.close()


async def _stalled(broker: Any, http: aiohttp.ClientSession, topic: str, *, total: int,
                   queue: int, size: int) -> int:
    """Publish *total* messages of *size* bytes to a pull-mode consumer that never reads its
    socket; return how many the broker sent it once it stopped, after checking that the
    consumer then reads them all, in order."""
    slow_http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(
        socket_factory=_small_receive_buffer))
    consumer = await slow_http.ws_connect(
        f"{ws_base(broker)}/ws/v2/consumer/{topic}/slow?pullMode=true&receiverQueueSize={queue}",
        max_msg_size=0)
    await consumer.send_str(json.dumps({"type": "permit", "permitMessages": total}))
    async with http.ws_connect(f"{ws_base(broker)}/ws/v2/producer/{topic}") as producer:
        for i in range(total):
            payload = i.to_bytes(4, "big") * (size // 4)
            await producer.send_str(json.dumps({"payload": b64(payload)}))
        for _ in range(total):
            assert (await receive(producer))["result"] == "ok"

    async def sent_out() -> int:
        sub = (await _stats(http, broker, topic))["subscriptions"]["slow"]
        return int(sum(c["msgOutCounter"] for c in sub["consumers"]))

    last = -1

    async def settled() -> bool:
        nonlocal last
        now = await sent_out()
        stable, last = now == last, now
        if not stable:
            await asyncio.sleep(0.5)
        return stable

    await eventually(settled, "the broker stopped sending to the consumer that does not read")
    stalled = last
    for i in range(total):
        msg = await receive(consumer)
        assert unb64(msg["payload"])[:4] == i.to_bytes(4, "big")
    await consumer.close()
    await slow_http.close()
    return stalled


def _small_receive_buffer(addr_info: Any) -> socket.socket:
    """A client socket with a fixed 256 KiB receive buffer: the kernel's autotuning (up to
    ``tcp_rmem``'s maximum, tens of MB) would otherwise hide how much the session holds."""
    family, kind, proto, _, _ = addr_info
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 * 1024)
    return sock


async def test_a_client_that_stops_reading_stops_the_broker(broker: Any,
                                                            http: aiohttp.ClientSession) -> None:
    # The consumer has not read a byte: its socket buffers fill, the session stops writing and
    # then asks the broker for no more than its receiver queue.
    stalled = await _stalled(broker, http, "persistent/public/default/ws-slow", total=300,
                             queue=10, size=64 * 1024)
    assert 0 < stalled < 300


async def test_large_messages_are_bounded_by_bytes(broker: Any,
                                                   http: aiohttp.ClientSession) -> None:
    # 80 messages of 512 KiB (about 700 kB of JSON each) with the largest receiver queue: what
    # the session holds is bounded by MAX_BUFFERED_BYTES, not by 1000 messages.
    stalled = await _stalled(broker, http, "persistent/public/default/ws-large", total=80,
                             queue=1000, size=512 * 1024)
    assert 0 < stalled < 80


async def test_non_persistent_topic(broker: Any, http: aiohttp.ClientSession) -> None:
    topic = "non-persistent/public/default/ws-np"
    consumer = await http.ws_connect(
        f"{ws_base(broker)}/ws/v2/consumer/{topic}/np?subscriptionType=Shared")
    await _produce(http, broker, 2, topic=topic)
    got = [await receive(consumer) for _ in range(2)]
    assert [unb64(m["payload"]) for m in got] == [b"m0", b"m1"]
    for m in got:
        await consumer.send_str(json.dumps({"messageId": m["messageId"]}))
    await consumer.close()


async def test_named_producer_resend_is_stored_once(broker: Any,
                                                    http: aiohttp.ClientSession) -> None:
    topic = "persistent/public/default/ws-dedup"
    url = f"{ws_base(broker)}/ws/v2/producer/{topic}?producerName=ws-p"
    async with http.ws_connect(url) as producer:
        await producer.send_str(json.dumps({"payload": b64(b"once"), "sequenceId": 7}))
        first = await receive(producer)
    async with http.ws_connect(url) as producer:  # the same name again: its re-send
        await producer.send_str(json.dumps({"payload": b64(b"once"), "sequenceId": 7}))
        again = await receive(producer)
        await producer.send_str(json.dumps({"payload": b64(b"next")}))  # continues after 7
        after = await receive(producer)
    assert first["result"] == again["result"] == after["result"] == "ok"
    assert again["messageId"] == first["messageId"]  # de-duplicated: answered with its first id
    assert after["messageId"] != first["messageId"]
    async with http.ws_connect(f"{ws_base(broker)}/ws/v2/reader/{topic}?messageId=earliest") as r:
        assert [unb64((await receive(r))["payload"]) for _ in range(2)] == [b"once", b"next"]


@pytest.mark.parametrize("codec,client_codec", [("ZLIB", "ZLib"), ("LZ4", "LZ4"),
                                                ("ZSTD", "ZSTD"), ("SNAPPY", "SNAPPY")])
async def test_compression_both_ways(broker: Any, http: aiohttp.ClientSession, codec: str,
                                     client_codec: str) -> None:
    import pulsar

    name = f"ws-{codec.lower()}"
    topic = f"persistent/public/default/{name}"
    client = make_client(broker.service_url)
    try:
        binary = client.subscribe(name, "bin")
        consumer = await http.ws_connect(f"{ws_base(broker)}/ws/v2/consumer/{topic}/ws")
        text = b"compress me " * 200
        await _produce(http, broker, 1, topic=topic, prefix=text.decode(),
                       query=f"?compressionType={codec}")
        got = await asyncio.to_thread(binary.receive, 10_000)
        assert got.data() == text + b"0"  # the official client decompresses what the session stored
        stats = await _stats(http, broker, topic)
        assert 0 < stats["storageSize"] < len(text) // 2  # and it was stored compressed
        producer = client.create_producer(
            name, compression_type=getattr(pulsar.CompressionType, client_codec))
        await asyncio.to_thread(producer.send, text)
        first, second = await receive(consumer), await receive(consumer)
        assert unb64(first["payload"]) == text + b"0" and unb64(second["payload"]) == text
        await consumer.close()
    finally:
        client.close()


async def test_broker_shutdown_closes_sessions_with_1001(broker_factory: Any,
                                                         http: aiohttp.ClientSession) -> None:
    stopping = broker_factory()
    base = ws_base(stopping)
    consumer = await http.ws_connect(f"{base}/ws/v2/consumer/{TOPIC}/bye")
    producer = await http.ws_connect(f"{base}/ws/v2/producer/{TOPIC}")
    # a bound, not an expectation: sessions must not hold the shutdown for their reconnects
    await asyncio.wait_for(asyncio.to_thread(stopping.stop), 20)
    for ws in (consumer, producer):
        closed = await ws.receive(timeout=10)
        assert closed.type == aiohttp.WSMsgType.CLOSE and closed.data == 1001
        assert closed.extra == "Broker is shutting down"


async def test_idle_sessions_and_oversized_frames_are_closed(broker_factory: Any,
                                                             http: aiohttp.ClientSession) -> None:
    small = broker_factory(config_overrides={"webSocketSessionIdleTimeoutMillis": 300,
                                             "webSocketMaxTextFrameSize": 1024})
    base = ws_base(small)
    idle = await http.ws_connect(f"{base}/ws/v2/consumer/{TOPIC}/idle")
    closed = await idle.receive(timeout=10)
    assert closed.type == aiohttp.WSMsgType.CLOSE and closed.data == 1001
    assert closed.extra == "Connection Idle Timeout"
    async with http.ws_connect(f"{base}/ws/v2/producer/{TOPIC}") as producer:
        await producer.send_str(json.dumps({"payload": b64(b"x" * 2000)}))
        closed = await producer.receive(timeout=10)
        assert closed.type == aiohttp.WSMsgType.CLOSE and closed.data == 1009


async def test_producer_batching(broker: Any, http: aiohttp.ClientSession) -> None:
    topic = "persistent/public/default/ws-batching"
    consumer = await http.ws_connect(
        f"{ws_base(broker)}/ws/v2/consumer/{topic}/b?subscriptionType=Shared")
    url = (f"{ws_base(broker)}/ws/v2/producer/{topic}"
           "?batchingEnabled=true&batchingMaxMessages=3&batchingMaxPublishDelay=1000")
    async with http.ws_connect(url) as producer:
        for i in range(4):
            await producer.send_str(json.dumps({"payload": b64(f"b{i}".encode()),
                                                "context": str(i), "properties": {"i": str(i)}}))
        # three fill a batch; the fourth waits for the delay, or for a message sent on its own
        await producer.send_str(json.dumps({"payload": b64(b"delayed"), "context": "d",
                                            "deliverAfterMs": 1}))
        acks = [await receive(producer) for _ in range(5)]
    assert [a["context"] for a in acks] == ["0", "1", "2", "3", "d"]
    assert all(a["result"] == "ok" for a in acks)
    from broker.websocket.frames import decode_message_id

    refs = [decode_message_id(a["messageId"]) for a in acks]
    # a batch of one goes out as a plain message, as the client sends it
    assert [(r.batch_index, r.batch_size) for r in refs] == \
        [(0, 3), (1, 3), (2, 3), (-1, 0), (-1, 0)]
    assert len({(r.ledger_id, r.entry_id) for r in refs[:3]}) == 1
    got = [await receive(consumer) for _ in range(5)]
    assert sorted(unb64(m["payload"]) for m in got) == [b"b0", b"b1", b"b2", b"b3", b"delayed"]
    assert {m["messageId"] for m in got} == {a["messageId"] for a in acks}
    assert [m["properties"] for m in got if m["payload"] == b64(b"b1")] == [{"i": "1"}]
    await consumer.close()
