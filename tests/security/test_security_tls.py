"""TLS server contexts: client certificates, trust, protocol floor, and certificate reload."""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import pytest

from broker.config_loading import load_config
from broker.security.authentication import TlsCertAuthenticator
from broker.security.errors import SecurityConfigError
from broker.security.tls import (
    ReloadingServerContext,
    TlsSettings,
    build_server_context,
    iana_to_openssl_cipher,
)

if TYPE_CHECKING:
    from tests.security.conftest import Issued, Pki

HANDSHAKE_TIMEOUT_S = 10.0


def _settings(pki: Pki, **kw: object) -> TlsSettings:
    base: dict[str, object] = {"certificate_file": str(pki.server.cert),
                               "key_file": str(pki.server.key),
                               "trust_certs_file": str(pki.ca.path)}
    base.update(kw)
    return TlsSettings(**base)  # type: ignore[arg-type]


def _client_context(pki: Pki, *, cert: Issued | None = None, trust: str | None = None,
                    max_version: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=trust or str(pki.ca.path))
    if cert is not None:
        ctx.load_cert_chain(str(cert.cert), str(cert.key))
    if max_version is not None:  # let the client offer old versions: the server must refuse
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
        ctx.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
        ctx.maximum_version = max_version
    return ctx


@asynccontextmanager
async def _server(ctx: ssl.SSLContext) -> AsyncIterator[tuple[int, list[bytes | None]]]:
    """A TLS echo-less server on 127.0.0.1:0 recording each peer's certificate (DER)."""
    peers: list[bytes | None] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ssl_object = writer.get_extra_info("ssl_object")
        peers.append(ssl_object.getpeercert(binary_form=True))
        writer.write(b"hello")
        await writer.drain()
        await reader.read()  # until the client closes
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ctx)
    try:
        yield server.sockets[0].getsockname()[1], peers
    finally:
        server.close()
        await server.wait_closed()


async def _exchange(port: int, ctx: ssl.SSLContext) -> tuple[bytes, bytes | None]:
    """Connect, read the greeting; returns it and the server certificate seen (DER)."""
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost"),
        HANDSHAKE_TIMEOUT_S)
    try:
        greeting = await asyncio.wait_for(reader.readexactly(5), HANDSHAKE_TIMEOUT_S)
        return greeting, writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()


async def _refused(port: int, ctx: ssl.SSLContext) -> BaseException:
    with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)) as info:
        await _exchange(port, ctx)
    return info.value


async def test_trusted_client_certificate_gives_tls_role(pki: Pki) -> None:
    async with _server(build_server_context(_settings(pki))) as (port, peers):
        greeting, _ = await _exchange(port, _client_context(pki, cert=pki.client))
    assert greeting == b"hello"
    assert TlsCertAuthenticator().authenticate(peers[0]) == "alice"


async def test_client_without_certificate_accepted_unless_required(pki: Pki) -> None:
    async with _server(build_server_context(_settings(pki))) as (port, peers):
        greeting, _ = await _exchange(port, _client_context(pki))
    assert greeting == b"hello"
    assert peers == [None]
    strict = build_server_context(_settings(pki, require_trusted_client_cert=True))
    async with _server(strict) as (port, peers):
        await _refused(port, _client_context(pki))
        await _refused(port, _client_context(pki, cert=pki.untrusted_client))
        greeting, _ = await _exchange(port, _client_context(pki, cert=pki.client))
    assert greeting == b"hello"
    assert len(peers) == 1


async def test_client_refuses_server_signed_by_unknown_ca(pki: Pki) -> None:
    async with _server(build_server_context(_settings(pki))) as (port, peers):
        error = await _refused(port, _client_context(pki, trust=str(pki.other_ca.path)))
    assert isinstance(error, ssl.SSLCertVerificationError)
    assert peers == []


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
async def test_tls_below_1_2_refused(pki: Pki) -> None:
    async with _server(build_server_context(_settings(pki))) as (port, peers):
        await _refused(port, _client_context(pki, max_version=ssl.TLSVersion.TLSv1_1))
    assert peers == []


def test_tls_protocols_and_ciphers_settings(pki: Pki) -> None:
    only13 = build_server_context(_settings(pki, protocols=("TLSv1.3",)))
    assert only13.minimum_version == ssl.TLSVersion.TLSv1_3
    default = build_server_context(_settings(pki))
    assert default.minimum_version == ssl.TLSVersion.TLSv1_2
    with pytest.raises(SecurityConfigError) as old:
        build_server_context(_settings(pki, protocols=("TLSv1.1", "TLSv1.2")))
    assert "TLSv1.1" in str(old.value)
    ciphers = build_server_context(_settings(
        pki, ciphers=("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "TLS_AES_128_GCM_SHA256")))
    names = {c["name"] for c in ciphers.get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert names == {"ECDHE-ECDSA-AES256-GCM-SHA384"}
    with pytest.raises(SecurityConfigError) as bad:
        build_server_context(_settings(pki, ciphers=("NOT-A-CIPHER",)))
    assert "NOT-A-CIPHER" in str(bad.value)


def test_iana_cipher_names_translated() -> None:
    assert iana_to_openssl_cipher("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256") == "ECDHE-RSA-AES128-GCM-SHA256"
    assert iana_to_openssl_cipher("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256") == "ECDHE-RSA-CHACHA20-POLY1305"
    assert iana_to_openssl_cipher("ECDHE-RSA-AES256-GCM-SHA384") == "ECDHE-RSA-AES256-GCM-SHA384"


def test_settings_from_config_and_missing_files(pki: Pki) -> None:
    config = load_config(None, {
        "brokerServicePortTls": 0, "tlsCertificateFilePath": str(pki.server.cert),
        "tlsKeyFilePath": str(pki.server.key), "tlsProtocols": "TLSv1.3, TLSv1.2",
        "tlsCertRefreshCheckDurationSec": 5})
    settings = TlsSettings.from_config(config)
    assert settings.protocols == ("TLSv1.3", "TLSv1.2")
    assert settings.refresh_check_seconds == 5.0
    assert build_server_context(settings).verify_mode == ssl.CERT_NONE
    with pytest.raises(SecurityConfigError):
        build_server_context(TlsSettings(certificate_file="", key_file=""))
    with pytest.raises(SecurityConfigError) as missing:
        build_server_context(TlsSettings(certificate_file="/nonexistent/c.pem",
                                         key_file="/nonexistent/k.pem"))
    assert "not found" in str(missing.value)


def _touch_later(*paths: object) -> None:
    for path in paths:
        st = os.stat(str(path))
        os.utime(str(path), ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


async def test_reload_serves_new_certificate_to_new_connections(pki: Pki) -> None:
    reloading = ReloadingServerContext(_settings(pki))
    first = pki.server.der
    async with _server(reloading.listening) as (port, _):
        _, seen_before = await _exchange(port, _client_context(pki))
        renewed = pki.issue("localhost", server=True)  # same file names, new certificate
        _touch_later(renewed.cert, renewed.key)
        assert reloading.check() is True
        _, seen_after = await _exchange(port, _client_context(pki))
    assert seen_before == first
    assert seen_after == renewed.der != first
    assert reloading.check() is False  # nothing changed since


async def test_broken_files_keep_previous_certificate(pki: Pki) -> None:
    reloading = ReloadingServerContext(_settings(pki))
    pki.server.key.write_text("not a key")
    _touch_later(pki.server.key)
    assert reloading.check() is False
    async with _server(reloading.listening) as (port, _):
        _, seen = await _exchange(port, _client_context(pki))
    assert seen == pki.server.der


async def _wait_until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


async def test_reloader_task_checks_every_refresh_interval(pki: Pki) -> None:
    reloading = ReloadingServerContext(_settings(pki, refresh_check_seconds=0.05))
    stop = asyncio.Event()
    task = asyncio.create_task(reloading.run(stop))
    try:
        renewed = pki.issue("localhost", server=True)
        _touch_later(renewed.cert, renewed.key)
        await _wait_until(lambda: reloading.reloads == 1)
    finally:
        stop.set()
        await asyncio.wait_for(task, HANDSHAKE_TIMEOUT_S)
    assert task.done() and task.exception() is None


def test_failed_handshakes_are_reported_at_most_once_per_interval_per_reason(
        caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from broker.security.tls import HANDSHAKE_WARN_INTERVAL_S, HandshakeReports

    now = [0.0]
    reports = HandshakeReports(clock=lambda: now[0])
    plaintext = ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number")
    plaintext.reason = "WRONG_VERSION_NUMBER"
    other = ssl.SSLError(1, "[SSL: NO_SHARED_CIPHER] no shared cipher")
    other.reason = "NO_SHARED_CIPHER"
    caplog.set_level(logging.WARNING, logger="horae.security.tls")
    for _ in range(5):
        reports.failed(plaintext)
    reports.failed(other)
    now[0] = HANDSHAKE_WARN_INTERVAL_S
    reports.failed(plaintext)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "TLS handshake refused (WRONG_VERSION_NUMBER): the client spoke plaintext to the TLS port "
        "(pulsar:// or http:// instead of pulsar+ssl:// or https://)",
        "TLS handshake refused (NO_SHARED_CIPHER): [SSL: NO_SHARED_CIPHER] no shared cipher",
        "TLS handshake refused (WRONG_VERSION_NUMBER): the client spoke plaintext to the TLS port "
        "(pulsar:// or http:// instead of pulsar+ssl:// or https://) (4 more since the last "
        "report)",
    ]
    assert reports.failures == 7
