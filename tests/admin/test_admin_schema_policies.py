"""Namespace schema auto-update policies: ``isAllowAutoUpdateSchema`` and
``schemaAutoUpdateCompatibilityStrategy`` with Pulsar's paths, answers and enforcement (a
producer or consumer bringing a schema the topic does not have is refused while auto-update is
off), kept across a restart; and their ``horae-admin`` commands."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from typing import Any

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, Record, String, StringSchema

from cli.admin.main import main
from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import ServerError
from tests.broker.broker_rawclient import RawClient, make_entry

from .conftest import Api, http

NS = "/admin/v2/namespaces/public/default"
ALLOW = NS + "/isAllowAutoUpdateSchema"
STRATEGY = NS + "/schemaAutoUpdateCompatibilityStrategy"
TOPIC = "persistent://public/default/"


class Point(Record):
    x = Integer()
    y = Integer()


class BadPoint(Record):
    x = String()
    y = Integer()


def _ok(reply: Any, status: int = 204) -> Any:
    assert reply.status == status, (reply.status, reply.body)
    return reply.body


def test_routes_answer_as_pulsar(api: Api) -> None:
    assert _ok(api("GET", ALLOW), 200) is True           # isAllowAutoUpdateSchemaEnabled
    assert _ok(api("GET", STRATEGY)) is None              # unset: Pulsar's null, no body
    _ok(api("POST", ALLOW, False))
    assert _ok(api("GET", ALLOW), 200) is False
    _ok(api("PUT", STRATEGY, "Backward"))
    assert _ok(api("GET", STRATEGY), 200) == "Backward"
    doc = _ok(api("GET", NS), 200)
    assert doc["is_allow_auto_update_schema"] is False
    assert doc["schema_auto_update_compatibility_strategy"] == "Backward"
    assert api("POST", ALLOW, "yes").status == 400
    assert api("PUT", STRATEGY, "Sideways").status == 400
    assert _ok(api("GET", STRATEGY), 200) == "Backward"
    for path in (ALLOW, STRATEGY):
        reply = api("GET", path.replace("/default/", "/nope/"))
        assert (reply.status, reply.reason) == (404, "Namespace does not exist")
    # no DELETE in Pulsar: the path is the bundle-deletion route, which refuses the name
    assert api("DELETE", ALLOW).status == 412
    _ok(api("POST", ALLOW, True))
    assert _ok(api("GET", ALLOW), 200) is True


def _get_or_create(service_url: str, topic: str, schema_json: bytes) -> Any:
    with RawClient(service_url) as raw:
        raw.handshake()
        cmd = pb.BaseCommand(type=pb.BaseCommand.GET_OR_CREATE_SCHEMA)
        cmd.getOrCreateSchema.request_id = 7
        cmd.getOrCreateSchema.topic = topic
        cmd.getOrCreateSchema.schema.name = "x"
        cmd.getOrCreateSchema.schema.schema_data = schema_json
        cmd.getOrCreateSchema.schema.type = pb.Schema.Avro
        return raw.request(C.encode_command(cmd)).getOrCreateSchemaResponse


def test_auto_update_off_refuses_schemas_the_topic_does_not_have(
        broker: Any, client: Any, api: Api) -> None:
    known, fresh, idle = TOPIC + "au-known", TOPIC + "au-fresh", TOPIC + "au-idle"
    client.create_producer(known, schema=AvroSchema(Point)).close()   # registers version 0
    _ok(api("POST", ALLOW, False))
    # the registered schema still works, for producers and consumers
    producer = client.create_producer(known, schema=AvroSchema(Point))
    consumer = client.subscribe(known, "s", schema=AvroSchema(Point))
    producer.send(Point(x=1, y=2))
    assert consumer.receive(timeout_millis=10_000).value().x == 1
    producer.close()
    consumer.close()
    # a schema the topic lacks is refused: on a topic with another, and on one with none
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(known, schema=StringSchema())
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(fresh, schema=StringSchema())
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(idle, "s", schema=StringSchema())
    client.create_producer(fresh).close()                  # no schema: accepted, as in Pulsar
    refused = _get_or_create(broker.service_url, known, json.dumps(BadPoint.schema()).encode())
    assert refused.error_code == ServerError.IncompatibleSchema
    assert refused.error_message == "Schema not found and schema auto updating is disabled."
    stored = http(broker.web_url, "GET", "/admin/v2/schemas/public/default/au-known/schema")
    found = _get_or_create(broker.service_url, known, stored.body["data"].encode())
    assert not found.HasField("error_code") and struct.unpack(">q", found.schema_version) == (0,)
    status = http(broker.web_url, "GET", "/admin/v2/schemas/public/default/au-fresh/schema")
    assert status.status == 404                            # nothing was registered
    _ok(api("POST", ALLOW, True))
    client.create_producer(fresh, schema=StringSchema()).close()


def test_auto_update_strategy_applies_while_the_namespace_strategy_is_undefined(
        client: Any, api: Api) -> None:
    topic = TOPIC + "au-strategy"
    client.create_producer(topic, schema=AvroSchema(Point)).close()
    _ok(api("PUT", STRATEGY, "AlwaysCompatible"))
    client.create_producer(topic, schema=AvroSchema(BadPoint)).close()   # any change accepted
    _ok(api("PUT", STRATEGY, "AutoUpdateDisabled"))                     # ALWAYS_INCOMPATIBLE
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=StringSchema())
    _ok(api("PUT", NS + "/schemaCompatibilityStrategy", "ALWAYS_COMPATIBLE"))  # wins when set
    client.create_producer(topic, schema=StringSchema()).close()


def test_policies_survive_a_restart(broker_factory: Any, tmp_path: Any) -> None:
    data = tmp_path / "restart"
    first = broker_factory(data_dir=data)
    assert http(first.web_url, "POST", ALLOW, False).status == 204
    assert http(first.web_url, "PUT", STRATEGY, "Forward").status == 204
    first.stop()
    second = broker_factory(data_dir=data)
    assert http(second.web_url, "GET", ALLOW).body is False
    assert http(second.web_url, "GET", STRATEGY).body == "Forward"


def _cli(capsys: pytest.CaptureFixture[str], broker: Any, *argv: str) -> tuple[int, Any, str]:
    code = main(["--admin-url", broker.web_url, *argv])
    captured = capsys.readouterr()
    out = captured.out.strip()
    try:
        return code, json.loads(out) if out else None, captured.err
    except json.JSONDecodeError:
        return code, out, captured.err


def test_horae_admin_commands(broker: Any, api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    ns = "public/default"
    run = lambda *argv: _cli(capsys, broker, *argv)  # noqa: E731
    assert run("namespaces", "get-is-allow-auto-update-schema", ns)[:2] == (0, True)
    assert run("namespaces", "set-is-allow-auto-update-schema", ns, "--disable")[0] == 0
    assert run("namespaces", "get-is-allow-auto-update-schema", ns)[:2] == (0, False)
    assert run("namespaces", "set-is-allow-auto-update-schema", ns, "-e")[0] == 0
    assert api("GET", ALLOW).body is True
    assert run("namespaces", "set-schema-autoupdate-strategy", ns, "-c", "none")[0] == 0
    assert run("namespaces", "get-schema-autoupdate-strategy", ns)[:2] == (0, "AlwaysCompatible")
    assert run("namespaces", "set-schema-autoupdate-strategy", ns, "--disabled")[0] == 0
    assert api("GET", STRATEGY).body == "AutoUpdateDisabled"
    code, _, err = run("namespaces", "set-schema-autoupdate-strategy", ns)
    assert code != 0 and "Either --compatibility or --disabled must be specified" in err
    with pytest.raises(SystemExit):    # argparse: one of --enable / --disable is required
        main(["--admin-url", broker.web_url, "namespaces", "set-is-allow-auto-update-schema", ns])
    capsys.readouterr()


def _rsa_pair(tmp_path: Any) -> tuple[str, str]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is needed to make the test's RSA key pair")
    private, public = tmp_path / "private.pem", tmp_path / "public.pem"
    subprocess.run([openssl, "genrsa", "-out", str(private), "2048"], check=True,
                   capture_output=True, timeout=60)
    subprocess.run([openssl, "rsa", "-in", str(private), "-pubout", "-out", str(public)],
                   check=True, capture_output=True, timeout=60)
    return str(public), str(private)


def test_encryption_required_refuses_unencrypted_producers(
        client: Any, api: Api, tmp_path: Any, capsys: pytest.CaptureFixture[str],
        broker: Any) -> None:
    enc = NS + "/encryptionRequired"
    assert _ok(api("GET", enc), 200) is False
    early = TOPIC + "enc-early"
    with RawClient(broker.service_url) as raw:
        raw.handshake()
        assert raw.create_producer(early).HasField("producer_success")
        raw.send(C.encode_send(1, 0, make_entry(b"before")))
        assert raw.recv_command().HasField("send_receipt")
        _ok(api("POST", enc, True))
        # a producer attached before is disconnected, as Pulsar's Producer.checkEncryption
        # does; its reconnection is refused
        closed = raw.recv_command()
        assert closed.HasField("close_producer") and closed.close_producer.producer_id == 1
        again = raw.create_producer(early, producer_id=2)
    assert again.HasField("error")
    assert (again.error.error, again.error.message) == (
        ServerError.MetadataError, f"Encryption is required in {early}")
    _ok(api("POST", enc, False))
    assert api("POST", enc, "yes").status == 400
    assert _cli(capsys, broker, "namespaces", "set-encryption-required", "public/default",
                "-e")[0] == 0
    assert _cli(capsys, broker, "namespaces", "get-encryption-required",
                "public/default")[:2] == (0, True)
    assert _ok(api("GET", NS), 200)["encryption_required"] is True
    topic = TOPIC + "enc"
    # MetadataError, which the official clients retry until their operation timeout (as
    # against Pulsar): the refusal as sent
    with RawClient(broker.service_url) as raw:
        raw.handshake()
        cmd = pb.BaseCommand(type=pb.BaseCommand.PRODUCER)
        cmd.producer.topic, cmd.producer.producer_id, cmd.producer.request_id = topic, 1, 9
        refused = raw.request(C.encode_command(cmd)).error
        # a producer that says it encrypts but sends a message without encryption keys
        cmd.producer.encrypted, cmd.producer.request_id = True, 10
        assert raw.request(C.encode_command(cmd)).HasField("producer_success")
        raw.send(C.encode_send(1, 0, make_entry(b"plain")))
        plain = raw.recv_command().send_error
    assert refused.error == ServerError.MetadataError
    assert refused.message == f"Encryption is required in {topic}"
    assert (plain.error, plain.message) == (ServerError.MetadataError,
                                            "Messages must be encrypted")
    public, private = _rsa_pair(tmp_path)
    keys = pulsar.CryptoKeyReader(public, private)
    producer = client.create_producer(topic, encryption_key="k", crypto_key_reader=keys)
    consumer = client.subscribe(topic, "s", crypto_key_reader=keys)
    producer.send(b"secret")
    assert consumer.receive(timeout_millis=10_000).data() == b"secret"
    producer.close()
    consumer.close()
    _ok(api("POST", enc, False))
    client.create_producer(topic).close()


def test_broker_wide_encryption_require_on_producer(broker_factory: Any) -> None:
    broker = broker_factory(config_overrides={"encryptionRequireOnProducer": True})
    topic = TOPIC + "enc-broker"
    with RawClient(broker.service_url) as raw:
        raw.handshake()
        refused = raw.create_producer(topic)
        cmd = pb.BaseCommand(type=pb.BaseCommand.PRODUCER)
        cmd.producer.topic, cmd.producer.producer_id, cmd.producer.request_id = topic, 2, 99
        cmd.producer.encrypted = True
        accepted = raw.request(C.encode_command(cmd))
    assert refused.HasField("error")
    assert (refused.error.error, refused.error.message) == (
        ServerError.MetadataError, f"Encryption is required in {topic}")
    assert accepted.HasField("producer_success")
    # the namespace policy is untouched: the switch is the broker's
    assert http(broker.web_url, "GET", NS + "/encryptionRequired").body is False
