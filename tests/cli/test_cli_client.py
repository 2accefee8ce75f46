"""``horae-client produce|consume|read`` against a real Horae: pulsar-client's flags and output,
delayed delivery, and refusals that fail at once with the reason."""

from __future__ import annotations

import base64
import logging
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jwt
import pytest

from cli.client.commands import parse_duration_ms
from cli.client.connect import UsageError

if TYPE_CHECKING:
    from tests.security.conftest import Pki

ROOT = Path(__file__).resolve().parents[2]
SECRET = b"c" * 32
TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"
TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
#: A refusal must end the command well before the client's 30 s operation timeout.
FAST_S = 15.0


def horae_client(url: str, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli.client.main", "--url", url, *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def _messages(stdout: str) -> list[str]:
    lines = stdout.splitlines()
    return [lines[i + 1] for i, line in enumerate(lines) if line == "----- got message -----"]


def test_produce_consume_and_read_with_pulsar_clients_flags_and_output(broker: Any) -> None:
    url = broker.service_url
    sent = horae_client(url, "produce", "cli-basic", "-m", "hello,world", "-k", "k1",
                        "-p", "a=1,b=2", "-n", "2")
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.strip() == "4 messages successfully produced"
    got = horae_client(url, "consume", "cli-basic", "-s", "sub", "-p", "Earliest", "-n", "4")
    assert got.returncode == 0, got.stderr
    messages = _messages(got.stdout)
    assert [m.split("content:", 1)[1] for m in messages] == ["hello", "world", "hello", "world"]
    assert all(", key:[k1], properties:[a=1, b=2], content:" in m for m in messages)
    assert messages[0].startswith("publishTime:[") and ", eventTime:[0], " in messages[0]
    assert got.stdout.strip().endswith("4 messages successfully consumed")
    again = horae_client(url, "read", "cli-basic", "-m", "earliest", "-n", "1", "--hex")
    assert again.returncode == 0, again.stderr
    (first,) = _messages(again.stdout)
    assert first.endswith("content:00000000 68 65 6C 6C 6F" + " " * 34 + "hello")
    assert again.stdout.strip().endswith("1 messages successfully read")


def test_consume_shared_gets_a_delayed_message_only_after_its_delay(broker: Any) -> None:
    url = broker.service_url
    ready = horae_client(url, "produce", "cli-delay", "-m", "warm")  # creates the topic
    assert ready.returncode == 0, ready.stderr
    first = horae_client(url, "consume", "cli-delay", "-s", "sub", "-t", "Shared",
                         "-p", "Earliest", "-n", "1")
    assert first.returncode == 0 and _messages(first.stdout)[0].endswith("content:warm")
    started = time.monotonic()
    sent = horae_client(url, "produce", "cli-delay", "-m", "later", "--deliver-after", "3s")
    assert sent.returncode == 0, sent.stderr
    got = horae_client(url, "consume", "cli-delay", "-s", "sub", "-t", "Shared", "-n", "1")
    assert got.returncode == 0, got.stderr
    assert _messages(got.stdout)[0].endswith("content:later")
    assert time.monotonic() - started >= 3.0


def test_usage_errors_exit_2_with_the_reason(broker: Any) -> None:
    url = broker.service_url
    cases = [
        (["produce", "t", "-m", "x", "-n", "1001"], "Please do not send more than 1000 messages"),
        (["produce", "t"], "Please supply message content with either --messages or --files"),
        (["produce", "t", "-m", "x", "--deliver-after", "soon"], "bad duration 'soon'"),
        (["consume", "t", "-s", "s", "-t", "Round_Robin"], "subscription type 'Round_Robin'"),
        (["read", "t", "-m", "12"], "start message id '12'"),
        (["--auth-plugin", "com.example.Nope", "produce", "t", "-m", "x"],
         "unsupported --auth-plugin"),
    ]
    for args, fragment in cases:
        run = horae_client(url, *args)
        assert run.returncode == 2, (args, run.stdout, run.stderr)
        assert fragment in run.stderr, (args, run.stderr)


def test_durations() -> None:
    assert [parse_duration_ms(v) for v in ("500ms", "10s", "5m", "2h", "1d", "3")] == [
        500, 10_000, 300_000, 7_200_000, 86_400_000, 3000]
    with pytest.raises(UsageError):
        parse_duration_ms("-1s")


@pytest.fixture
def token_broker(broker_factory: Callable[..., Any]) -> Any:
    return broker_factory(config_overrides={
        "authenticationEnabled": True, "authenticationProviders": TOKEN_PROVIDER,
        "tokenSecretKey": "data:;base64," + base64.b64encode(SECRET).decode()})


def test_refused_tokens_fail_at_once_with_the_reason_and_a_good_one_works(
        token_broker: Any, tmp_path: Path) -> None:
    url = token_broker.service_url
    wrong_key = jwt.encode({"sub": "alice"}, b"w" * 32, algorithm="HS256")
    for auth in ([], ["--auth-plugin", TOKEN_PLUGIN, "--auth-params", "token:" + wrong_key]):
        started = time.monotonic()
        run = horae_client(url, *auth, "produce", "cli-auth", "-m", "x")
        assert time.monotonic() - started < FAST_S
        assert run.returncode == 1, run.stdout
        assert "refused the connection: AuthenticationError: Failed to authenticate" in run.stderr
    # Without the check, the official client retries the refused CONNECT until its operation
    # timeout and reports a Timeout, as it does against Pulsar.
    slow = horae_client(url, "--no-connect-check", "--operation-timeout", "2", "produce",
                        "cli-auth", "-m", "x")
    assert slow.returncode == 1 and "Timeout" in slow.stderr, slow.stderr
    assert slow.stdout.strip() == "0 messages successfully produced"
    token_file = tmp_path / "alice.jwt"
    token_file.write_text(jwt.encode({"sub": "alice"}, SECRET, algorithm="HS256") + "\n")
    ok = horae_client(url, "--auth-plugin", TOKEN_PLUGIN, "--auth-params",
                      f"file://{token_file}", "produce", "cli-auth", "-m", "x")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == "1 messages successfully produced"


def test_plaintext_to_a_tls_port_and_a_closed_port_fail_at_once(
        broker_factory: Callable[..., Any], pki: Pki, free_port: Callable[[], int],
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="horae.security.tls")
    broker = broker_factory(config_overrides={
        "brokerServicePortTls": 0, "tlsCertificateFilePath": str(pki.server.cert),
        "tlsKeyFilePath": str(pki.server.key), "tlsTrustCertsFilePath": str(pki.ca.path)})
    tls_port = broker.server.broker_port_tls
    started = time.monotonic()
    run = horae_client(f"pulsar://127.0.0.1:{tls_port}", "produce", "cli-tls", "-m", "x")
    assert time.monotonic() - started < FAST_S
    assert run.returncode == 1
    assert "the port may be a TLS port: use pulsar+ssl://" in run.stderr, run.stderr
    # The broker says why at WARN (the event loop alone drops the handshake silently).
    assert any(r.levelno == logging.WARNING and "TLS handshake refused (WRONG_VERSION_NUMBER): "
               "the client spoke plaintext to the TLS port" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]
    ok = horae_client(f"pulsar+ssl://127.0.0.1:{tls_port}", "--tlsTrustCertsFilePath",
                      str(pki.ca.path), "produce", "cli-tls", "-m", "x")
    assert ok.returncode == 0, ok.stderr
    wrong_way = horae_client(f"pulsar+ssl://127.0.0.1:{broker.server.broker_port}",
                             "--tlsTrustCertsFilePath", str(pki.ca.path), "produce", "t", "-m", "x")
    assert wrong_way.returncode == 1 and "TLS handshake with" in wrong_way.stderr
    closed = horae_client(f"pulsar://127.0.0.1:{free_port()}", "produce", "t", "-m", "x")
    assert closed.returncode == 1 and "cannot connect to 127.0.0.1:" in closed.stderr
