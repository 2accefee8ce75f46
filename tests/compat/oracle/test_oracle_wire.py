"""Refusals on the wire against Pulsar 4.0 standalone: the same requests, the same answers.

Each scenario makes requests a broker must refuse (or answer specially) — through raw frames
(``tests/broker/broker_rawclient.py``: the exact command and server error code) and through
the official Python client (the exception it raises) — against Horae and against Pulsar, in
topic names of its own, and records one observation a request: the answering command's type
with its ``ServerError`` name, the client's exception class, or that the connection was
closed. The two records must be equal except where :data:`ALLOWED` lists the difference with
its reason. ``HORAE_ORACLE=full`` runs every scenario, otherwise the sample.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from broker_rawclient import RawClient, make_entry
from clients import client_for
from peers import Peer, Peers, unique_names

from protocol import commands as C
from protocol import pulsar_pb as pb

FULL = os.environ.get("HORAE_ORACLE") == "full"
T = pb.BaseCommand
EXCLUSIVE, SHARED, FAILOVER = 0, 1, 2
Record = dict[str, str]
UNANSWERED_S = 3.0
"""How long a request Pulsar leaves unanswered is waited for."""


def answer(cmd: pb.BaseCommand) -> str:
    """One command as an observation: its type, with the error code it carries if any."""
    name = T.Type.Name(cmd.type)
    if cmd.type == T.ERROR:
        return f"ERROR {pb.ServerError.Name(cmd.error.error)}"
    if cmd.type == T.SEND_ERROR:
        return f"SEND_ERROR {pb.ServerError.Name(cmd.send_error.error)}"
    if cmd.type == T.ACK_RESPONSE and cmd.ackResponse.HasField("error"):
        return f"ACK_RESPONSE {pb.ServerError.Name(cmd.ackResponse.error)}"
    if cmd.type == T.LOOKUP_RESPONSE:
        r = cmd.lookupTopicResponse
        kind = pb.CommandLookupTopicResponse.LookupType.Name(r.response)
        return f"LOOKUP_RESPONSE {kind}" + (
            f" {pb.ServerError.Name(r.error)}" if r.HasField("error") else "")
    if cmd.type == T.PRODUCER_SUCCESS and not cmd.producer_success.producer_ready:
        return "PRODUCER_SUCCESS not ready"
    return name


def _request_id(cmd: pb.BaseCommand) -> int | None:
    for field in ("success", "error", "producer_success", "lookupTopicResponse",
                  "partitionMetadataResponse", "getLastMessageIdResponse", "ackResponse"):
        if cmd.HasField(field):
            return int(getattr(cmd, field).request_id)
    if cmd.HasField("send_error") or cmd.HasField("send_receipt"):
        return None
    return -1


def request(raw: RawClient, data: bytes, *, timeout: float = 10.0) -> str:
    """Send one request and return the answer carrying its request id (or, for a SEND, the
    receipt or send error), skipping what the broker sends meanwhile about other requests."""
    sent = pb.BaseCommand()
    sent.ParseFromString(data[8:8 + int.from_bytes(data[4:8], "big")])
    wanted = next((int(getattr(sent, f).request_id) for f in (
        "producer", "subscribe", "seek", "unsubscribe", "lookupTopic", "partitionMetadata",
        "getLastMessageId", "ack") if sent.HasField(f) and getattr(sent, f).HasField(
            "request_id")), None)
    try:
        raw.send(data)
        for _ in range(20):
            cmd = raw.recv_command(timeout)
            rid = _request_id(cmd)
            if wanted is None or rid == wanted or rid is None:
                return answer(cmd)
        return "no answer"
    except ConnectionError:
        return "connection closed"
    except TimeoutError:
        return "no answer"


def quiet(raw: RawClient, timeout: float = 1.0) -> str:
    """What the broker sends unasked within *timeout* (for commands without a response)."""
    try:
        return answer(raw.recv_command(timeout))
    except ConnectionError:
        return "connection closed"
    except TimeoutError:
        return "no answer"


@contextlib.contextmanager
def raw_client(peer: Peer, topic: str) -> Iterator[RawClient]:
    """A connection that looked *topic* up first, as every client does (Pulsar serves a topic
    only once its namespace bundle is owned, which a lookup brings about)."""
    with RawClient(peer.service_url, timeout=10.0) as raw:
        raw.handshake()
        looked_up = request(raw, C.encode_lookup(topic, _rid(raw)))
        assert looked_up == "LOOKUP_RESPONSE Connect", looked_up
        yield raw


def _rid(raw: RawClient) -> int:
    return next(raw.request_ids)


def exception_name(action: Callable[[], Any]) -> str:
    try:
        action()
    except Exception as exc:  # the official client's exception class is the observation
        return type(exc).__name__
    return "ok"


# --- the scenarios: each takes a peer and a topic name, returns {label: observation} -------
def producer_refusals(peer: Peer, topic: str) -> Record:
    out: Record = {}
    with raw_client(peer, topic) as raw:
        out["first"] = request(raw, C.encode_producer(topic, 2, _rid(raw), "oracle-p"))
        out["same name"] = request(raw, C.encode_producer(topic, 3, _rid(raw), "oracle-p"))
        out["exclusive beside shared"] = request(raw, C.encode_producer(
            topic, 4, _rid(raw), access_mode=pb.ProducerAccessMode.Exclusive))
        out["send unknown producer"] = (raw.send(C.encode_send(
            99, 0, make_entry(b"x"))), quiet(raw))[1]
    return out


def producer_exclusive(peer: Peer, topic: str) -> Record:
    out: Record = {}
    with raw_client(peer, topic) as raw:
        out["exclusive"] = request(raw, C.encode_producer(
            topic, 1, _rid(raw), access_mode=pb.ProducerAccessMode.Exclusive))
        out["shared beside exclusive"] = request(raw, C.encode_producer(topic, 2, _rid(raw)))
        out["wait for exclusive"] = request(raw, C.encode_producer(
            topic, 3, _rid(raw), access_mode=pb.ProducerAccessMode.WaitForExclusive))
    return out


def consumer_refusals(peer: Peer, topic: str) -> Record:
    out: Record = {}
    with raw_client(peer, topic) as raw:
        out["exclusive"] = request(raw, C.encode_subscribe(topic, "s", EXCLUSIVE, 2, _rid(raw)))
        out["second exclusive"] = request(raw, C.encode_subscribe(
            topic, "s", EXCLUSIVE, 3, _rid(raw)))
        out["other type"] = request(raw, C.encode_subscribe(topic, "s", SHARED, 4, _rid(raw)))
        out["same consumer id"] = request(raw, C.encode_subscribe(
            topic, "s2", SHARED, 2, _rid(raw)))
        out["empty subscription name"] = request(raw, C.encode_subscribe(
            topic, "", SHARED, 5, _rid(raw)))
        out["reserved subscription"] = request(raw, C.encode_subscribe(
            topic, "pulsar.dedup", SHARED, 6, _rid(raw)))
    return out


def unsubscribe_refusals(peer: Peer, topic: str) -> Record:
    out: Record = {}
    with raw_client(peer, topic) as raw:
        out["first"] = request(raw, C.encode_subscribe(topic, "s", SHARED, 1, _rid(raw)))
        out["second"] = request(raw, C.encode_subscribe(topic, "s", SHARED, 2, _rid(raw)))
        out["unsubscribe with another consumer"] = request(
            raw, C.encode_unsubscribe(1, _rid(raw)))
        out["unsubscribe unknown consumer"] = request(raw, C.encode_unsubscribe(42, _rid(raw)))
    return out


def seek_refusals(peer: Peer, topic: str) -> Record:
    out: Record = {}
    with raw_client(peer, topic) as raw:
        out["producer"] = request(raw, C.encode_producer(topic, 1, _rid(raw)))
        out["send"] = request(raw, C.encode_send(1, 0, make_entry(b"m0")))
        out["subscribe"] = request(raw, C.encode_subscribe(topic, "s", EXCLUSIVE, 1, _rid(raw),
                                                           initial_position=1))
        out["seek unknown consumer"] = request(raw, C.encode_seek(42, _rid(raw),
                                                                  message_id=(0, 0)))
        out["seek time unknown consumer"] = request(raw, C.encode_seek(42, _rid(raw),
                                                                       publish_time=0))
        out["seek without position"] = request(raw, C.encode_seek(1, _rid(raw)))
        out["seek to a missing ledger"] = request(
            raw, C.encode_seek(1, _rid(raw), message_id=(987654321, 0)))
        out["seek by time"] = request(raw, C.encode_seek(1, _rid(raw), publish_time=1))
    return out


def ack_refusals(peer: Peer, topic: str) -> Record:
    out: Record = {}
    with raw_client(peer, topic) as raw:
        out["subscribe shared"] = request(raw, C.encode_subscribe(topic, "s", SHARED, 1,
                                                                  _rid(raw)))
        # Pulsar never answers this one: wait less than a whole request timeout for it
        out["ack unknown consumer"] = request(raw, C.encode_ack(42, [(1, 1)],
                                                                request_id=_rid(raw)),
                                              timeout=UNANSWERED_S)
        out["cumulative on shared"] = request(raw, C.encode_ack(1, [(1, 1)], cumulative=True,
                                                                request_id=_rid(raw)))
        out["ack without receipt, unknown consumer"] = (
            raw.send(C.encode_ack(43, [(1, 1)])), quiet(raw))[1]
        out["redeliver unknown consumer"] = (raw.send(C.encode_redeliver(44)), quiet(raw))[1]
        out["flow unknown consumer"] = (raw.send(C.encode_flow(45, 10)), quiet(raw))[1]
    return out


def last_message_id(peer: Peer, topic: str) -> Record:
    out: Record = {}
    with raw_client(peer, topic) as raw:
        out["subscribe"] = request(raw, C.encode_subscribe(topic, "s", EXCLUSIVE, 1, _rid(raw)))
        raw.send(C.encode_get_last_message_id(1, _rid(raw)))
        cmd = raw.recv_command()
        mid = cmd.getLastMessageIdResponse.last_message_id
        out["empty topic"] = f"{answer(cmd)} ledger {'-1' if mid.ledgerId == 2**64 - 1 or mid.ledgerId == -1 else '>=0'} entry {mid.entryId if mid.entryId < 2**63 else mid.entryId - 2**64}"
        out["unknown consumer"] = request(raw, C.encode_get_last_message_id(42, _rid(raw)))
    return out


def lookup_refusals(peer: Peer, topic: str) -> Record:
    with raw_client(peer, topic) as raw:
        return {
            "lookup": request(raw, C.encode_lookup(topic, _rid(raw))),
            "missing namespace": request(raw, C.encode_lookup(
                "persistent://public/missing-ns/t", _rid(raw))),
            "missing tenant": request(raw, C.encode_lookup("persistent://nope/ns/t", _rid(raw))),
            "partitioned metadata, missing namespace": request(raw, C.encode_partitioned_metadata(
                "persistent://public/missing-ns/t", _rid(raw))),
        }


def terminated_topic(peer: Peer, topic: str) -> Record:
    out: Record = {}
    with raw_client(peer, topic) as raw:
        out["producer"] = request(raw, C.encode_producer(topic, 1, _rid(raw)))
        out["send"] = request(raw, C.encode_send(1, 0, make_entry(b"m0")))
    status = peer.http("POST", "/admin/v2/persistent/" + topic.split("://", 1)[1] + "/terminate")
    out["terminate"] = str(status.status)
    with raw_client(peer, topic) as raw:
        out["producer after"] = request(raw, C.encode_producer(topic, 1, _rid(raw)))
        out["consumer after"] = request(raw, C.encode_subscribe(topic, "s", SHARED, 1, _rid(raw),
                                                                initial_position=1))
    return out


def official_client(peer: Peer, topic: str) -> Record:
    import pulsar

    out: Record = {}
    with client_for(peer, operation_timeout_seconds=10) as client:
        first = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Exclusive)
        out["second exclusive consumer"] = exception_name(
            lambda: client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Exclusive))
        out["shared on exclusive"] = exception_name(
            lambda: client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared))
        producer = client.create_producer(topic, producer_name="oracle-named")
        out["same producer name"] = exception_name(
            lambda: client.create_producer(topic, producer_name="oracle-named"))
        out["exclusive producer beside shared"] = exception_name(
            lambda: client.create_producer(topic,
                                           access_mode=pulsar.ProducerAccessMode.Exclusive))
        out["missing namespace"] = exception_name(
            lambda: client.create_producer("persistent://public/missing-ns/t"))
        producer.close()
        first.close()
    return out


def _namespace_with(peer: Peer, scenario: str, policies: dict[str, Any]) -> str:
    """A tenant and namespace of the scenario's own, created with *policies* (Pulsar's
    Policies fields, so both brokers hold them before the first lookup); its topic name."""
    names = unique_names(scenario)
    tenant = peer.http("PUT", f"/admin/v2/tenants/{names['t']}",
                       {"adminRoles": [], "allowedClusters": ["standalone"]})
    namespace = peer.http("PUT", f"/admin/v2/namespaces/{names['t']}/{names['ns']}", policies)
    assert (tenant.status, namespace.status) == (204, 204), (tenant, namespace)
    return f"persistent://{names['t']}/{names['ns']}/{names['topic']}"


def limit_refusals(peer: Peer, _: str) -> Record:
    """The namespace's producer, consumer and subscription limits, refused on the wire."""
    topic = _namespace_with(peer, "limit refusals", {
        "max_producers_per_topic": 1, "max_consumers_per_subscription": 1,
        "max_subscriptions_per_topic": 2})
    out: Record = {}
    with raw_client(peer, topic) as raw:
        out["producer"] = request(raw, C.encode_producer(topic, 1, _rid(raw)))
        out["producer over the limit"] = request(raw, C.encode_producer(topic, 2, _rid(raw)))
        out["consumer"] = request(raw, C.encode_subscribe(topic, "s1", SHARED, 1, _rid(raw)))
        out["consumer over the subscription's limit"] = request(
            raw, C.encode_subscribe(topic, "s1", SHARED, 2, _rid(raw)))
        out["second subscription"] = request(
            raw, C.encode_subscribe(topic, "s2", SHARED, 3, _rid(raw)))
        out["subscription over the limit"] = request(
            raw, C.encode_subscribe(topic, "s3", SHARED, 4, _rid(raw)))
        out["close producer"] = request(raw, C.encode_close_producer(1, _rid(raw)))
        out["producer after a close"] = request(raw, C.encode_producer(topic, 5, _rid(raw)))
    return out


def creation_refusals(peer: Peer, _: str) -> Record:
    """Subscription types and automatic subscription/topic creation turned off."""
    topic = _namespace_with(peer, "creation refusals", {})
    namespace = "/admin/v2/namespaces/" + topic.split("://", 1)[1].rsplit("/", 1)[0]
    for path, body in (("subscriptionTypesEnabled", ["Shared"]),
                       ("autoSubscriptionCreation", {"allowAutoSubscriptionCreation": False}),
                       ("autoTopicCreation", {"allowAutoTopicCreation": False,
                                              "topicType": "non-partitioned"})):
        assert peer.http("POST", f"{namespace}/{path}", body).status == 204, path
    out: Record = {}
    with RawClient(peer.service_url, timeout=10.0) as raw:
        raw.handshake()
        out["lookup of a missing topic"] = request(raw, C.encode_lookup(topic, _rid(raw)))
        out["producer on a missing topic"] = request(raw, C.encode_producer(topic, 1, _rid(raw)))
    out["create topic"] = str(peer.http(
        "PUT", "/admin/v2/persistent/" + topic.split("://", 1)[1]).status)
    with raw_client(peer, topic) as raw:
        out["producer"] = request(raw, C.encode_producer(topic, 1, _rid(raw)))
        out["new subscription"] = request(raw, C.encode_subscribe(topic, "s", SHARED, 1,
                                                                  _rid(raw)))
    out["create subscription"] = str(peer.http(
        "PUT", "/admin/v2/persistent/" + topic.split("://", 1)[1] + "/subscription/s").status)
    with raw_client(peer, topic) as raw:
        out["exclusive, not enabled"] = request(raw, C.encode_subscribe(
            topic, "s", EXCLUSIVE, 1, _rid(raw)))
        out["shared on the created subscription"] = request(raw, C.encode_subscribe(
            topic, "s", SHARED, 2, _rid(raw)))
    return out


SCENARIOS: dict[str, Callable[[Peer, str], Record]] = {
    "limit refusals": limit_refusals,
    "creation refusals": creation_refusals,
    "producer refusals": producer_refusals,
    "exclusive producer": producer_exclusive,
    "consumer refusals": consumer_refusals,
    "unsubscribe refusals": unsubscribe_refusals,
    "seek refusals": seek_refusals,
    "ack refusals": ack_refusals,
    "last message id": last_message_id,
    "lookup refusals": lookup_refusals,
    "terminated topic": terminated_topic,
    "official client": official_client,
}
SAMPLE = ("consumer refusals", "seek refusals", "ack refusals")

#: (scenario, label) -> the observation pair ``(horae, pulsar)`` that stays, and why.
#: (A request for a topic of a namespace that does not exist is compared through the official
#: client and LOOKUP: Pulsar answers any other raw request for a topic it was not asked to
#: look up with ServiceNotReady.)
ALLOWED: dict[tuple[str, str], tuple[tuple[str, str], str]] = {
    ("ack refusals", "ack unknown consumer"): (
        ("ACK_RESPONSE ConsumerNotFound", "no answer"),
        "Pulsar drops an ACK for a consumer the connection does not have, even one asking for "
        "a receipt, so the client waits out its operation timeout; Horae answers the receipt "
        "with ConsumerNotFound"),
}

RUN = list(SCENARIOS) if FULL else list(SAMPLE)


@pytest.mark.parametrize("scenario", RUN)
def test_wire_answers_as_pulsar(peers: Peers, scenario: str) -> None:
    records = {}
    for peer in peers.both():
        topic = f"persistent://public/default/{unique_names(scenario)['topic']}"
        records[peer.name] = SCENARIOS[scenario](peer, topic)
    horae, pulsar = records["horae"], records["pulsar"]
    assert horae.keys() == pulsar.keys()
    unexplained, stale = [], []
    for label in horae:
        pair = (horae[label], pulsar[label])
        allowed = ALLOWED.get((scenario, label))
        if pair[0] != pair[1] and (allowed is None or allowed[0] != pair):
            unexplained.append(f"{label}: horae {pair[0]!r}, pulsar {pair[1]!r}")
        if allowed is not None and pair[0] == pair[1]:
            stale.append(f"{label}: both {pair[0]!r} ({allowed[1]})")
    assert not unexplained and not stale, (
        "differences from Pulsar:\n  " + "\n  ".join(unexplained)
        + ("\nallowed differences that no longer show:\n  " + "\n  ".join(stale) if stale else ""))
