"""TLS server contexts from Pulsar's broker.conf names, reloaded when the files change.

Theory of operation
-------------------
:func:`build_server_context` turns the ``tls*`` settings into an :class:`ssl.SSLContext`:

* ``tlsCertificateFilePath`` + ``tlsKeyFilePath``: the broker's certificate chain and key (PEM);
* ``tlsTrustCertsFilePath``: CAs that client certificates must chain to;
* ``tlsRequireTrustedClientCertOnConnect``: client certificate required (``CERT_REQUIRED``);
  otherwise, with a trust file, requested but optional (``CERT_OPTIONAL``, which the TLS
  authentication provider needs); ``tlsAllowInsecureConnection`` with no trust file asks for
  none. Python's ssl module cannot accept an *untrusted* certificate while still asking for
  one, so unlike Pulsar an untrusted client certificate always fails the handshake;
* ``tlsProtocols``: ``TLSv1.2`` and/or ``TLSv1.3``; never lower (TLS 1.2 is the floor);
* ``tlsCiphers``: TLS 1.2 suites in OpenSSL or IANA spelling (IANA ``TLS_x_WITH_y`` names
  are translated); TLS 1.3 suites cannot be restricted by Python and are all strong.

:class:`ReloadingServerContext` keeps one *listening* context for the life of the server
(``loop.create_server(ssl=...)`` fixes its context at bind time). Its SNI callback, which
OpenSSL calls in every handshake (with or without SNI), swaps in the newest built context, so
new connections get a renewed certificate and established ones keep theirs. The files are
checked every ``tlsCertRefreshCheckDurationSec`` (:meth:`ReloadingServerContext.run`) by
(mtime, size); the check and the rebuild read files, so they run in a worker thread. A
rebuild that fails (a half-written key, a key not matching its certificate) keeps the
previous context and is retried at the next check.

A handshake that fails is dropped by the event loop without a word (it logs TLS errors only in
debug mode); the listening context's :class:`HandshakeReportingSSLObject` logs each at WARN with
OpenSSL's reason (at most once per 10 s per reason, with the count in between), and says so
when the peer spoke plaintext (``WRONG_VERSION_NUMBER``: a
``pulsar://`` client on the TLS port), the mistake a client otherwise only sees as a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass

from broker.config import BrokerConfig
from broker.security.errors import SecurityConfigError

__all__ = [
    "HANDSHAKE_WARN_INTERVAL_S",
    "HandshakeReportingSSLObject",
    "HandshakeReports",
    "ReloadingServerContext",
    "TlsSettings",
    "build_server_context",
    "iana_to_openssl_cipher",
]

log = logging.getLogger("horae.security.tls")

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """The TLS-related settings, apart from the rest of the config (easy to build in tests)."""

    certificate_file: str
    key_file: str
    trust_certs_file: str = ""
    allow_insecure_connection: bool = False
    require_trusted_client_cert: bool = False
    protocols: tuple[str, ...] = ()
    ciphers: tuple[str, ...] = ()
    refresh_check_seconds: float = 300.0

    @classmethod
    def from_config(cls, config: BrokerConfig) -> TlsSettings:
        def split(value: str) -> tuple[str, ...]:
            return tuple(v.strip() for v in value.split(",") if v.strip())

        return cls(
            certificate_file=config.tls_certificate_file_path,
            key_file=config.tls_key_file_path,
            trust_certs_file=config.tls_trust_certs_file_path,
            allow_insecure_connection=config.tls_allow_insecure_connection,
            require_trusted_client_cert=config.tls_require_trusted_client_cert_on_connect,
            protocols=split(config.tls_protocols),
            ciphers=split(config.tls_ciphers),
            refresh_check_seconds=float(config.tls_cert_refresh_check_duration_sec))

    def watched_files(self) -> tuple[str, ...]:
        return tuple(f for f in (self.certificate_file, self.key_file, self.trust_certs_file) if f)


def iana_to_openssl_cipher(name: str) -> str:
    """``TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384`` -> ``ECDHE-RSA-AES256-GCM-SHA384``;
    other names (already OpenSSL's) unchanged."""
    if not (name.startswith("TLS_") and "_WITH_" in name):
        return name
    kx, _, cipher = name[len("TLS_"):].partition("_WITH_")
    cipher = cipher.replace("AES_128", "AES128").replace("AES_256", "AES256")
    cipher = cipher.replace("CHACHA20_POLY1305_SHA256", "CHACHA20_POLY1305")
    return f"{kx}_{cipher}".replace("_", "-")


def _apply_protocols(ctx: ssl.SSLContext, protocols: tuple[str, ...]) -> None:
    if not protocols:
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        return
    unknown = [p for p in protocols if p not in _VERSIONS]
    if unknown:
        raise SecurityConfigError(
            f"tlsProtocols: {unknown[0]!r} is not allowed; use TLSv1.2 and/or TLSv1.3 "
            "(Horae never negotiates below TLS 1.2)")
    versions = sorted(_VERSIONS[p] for p in protocols)
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]


def _apply_ciphers(ctx: ssl.SSLContext, ciphers: tuple[str, ...]) -> None:
    tls12 = []
    for original in ciphers:
        if original.startswith(("TLS_AES_", "TLS_CHACHA20_")):
            continue  # a TLS 1.3 suite: Python cannot restrict those (all are strong)
        name = iana_to_openssl_cipher(original)
        try:    # a bare context: a default one would load the system's CA bundle per name
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).set_ciphers(name)
        except ssl.SSLError:
            raise SecurityConfigError(f"tlsCiphers: unknown cipher suite {original!r}") from None
        tls12.append(name)
    if tls12:
        ctx.set_ciphers(":".join(tls12))


def build_server_context(settings: TlsSettings) -> ssl.SSLContext:
    """A server context for *settings*. Blocking (reads files); SecurityConfigError if unusable."""
    if not settings.certificate_file or not settings.key_file:
        raise SecurityConfigError(
            "a TLS listener needs tlsCertificateFilePath and tlsKeyFilePath")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    _apply_protocols(ctx, settings.protocols)
    _apply_ciphers(ctx, settings.ciphers)
    try:
        ctx.load_cert_chain(settings.certificate_file, settings.key_file)
    except FileNotFoundError as exc:
        raise SecurityConfigError(f"TLS certificate or key file not found: {exc.filename}") from None
    except (ssl.SSLError, OSError) as exc:
        raise SecurityConfigError(
            f"cannot load tlsCertificateFilePath/tlsKeyFilePath: {exc}") from None
    if settings.trust_certs_file:
        try:
            ctx.load_verify_locations(cafile=settings.trust_certs_file)
        except (ssl.SSLError, OSError) as exc:
            raise SecurityConfigError(f"cannot load tlsTrustCertsFilePath: {exc}") from None
        ctx.verify_mode = (ssl.CERT_REQUIRED if settings.require_trusted_client_cert
                           else ssl.CERT_OPTIONAL)
    elif settings.require_trusted_client_cert:
        raise SecurityConfigError(
            "tlsRequireTrustedClientCertOnConnect needs tlsTrustCertsFilePath")
    else:
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _fingerprint(paths: tuple[str, ...]) -> tuple[tuple[int, int], ...]:
    out = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            out.append((-1, -1))
        else:
            out.append((st.st_mtime_ns, st.st_size))
    return tuple(out)


#: OpenSSL's reasons when the first bytes are not a TLS ClientHello: a plaintext client.
_PLAINTEXT_REASONS = frozenset({"WRONG_VERSION_NUMBER", "HTTP_REQUEST", "HTTPS_PROXY_REQUEST",
                                "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG",
                                "UNKNOWN_PROTOCOL"})
#: A failed handshake is logged at most once per this many seconds per reason (a retrying
#: client or a scanner would flood the log), with the count of those not logged since.
HANDSHAKE_WARN_INTERVAL_S = 10.0


class HandshakeReports:
    """The WARN lines of failed handshakes for one listening context, rate-limited per OpenSSL
    reason (a bounded set). Called on the event loop only."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last: dict[str, float] = {}
        self._unreported: dict[str, int] = {}
        self.failures = 0

    def failed(self, exc: ssl.SSLError) -> None:
        self.failures += 1
        reason = str(exc.reason or type(exc).__name__)[:64]
        now = self._clock()
        last = self._last.get(reason)
        if last is not None and now - last < HANDSHAKE_WARN_INTERVAL_S:
            self._unreported[reason] = self._unreported.get(reason, 0) + 1
            return
        self._last[reason] = now
        more = self._unreported.pop(reason, 0)
        tail = f" ({more} more since the last report)" if more else ""
        if reason in _PLAINTEXT_REASONS:
            log.warning("TLS handshake refused (%s): the client spoke plaintext to the TLS port "
                        "(pulsar:// or http:// instead of pulsar+ssl:// or https://)%s",
                        reason, tail)
        else:
            log.warning("TLS handshake refused (%s): %s%s", reason, exc, tail)


class HandshakeReportingSSLObject(ssl.SSLObject):
    """The listening context's TLS sessions: a failed handshake goes to :attr:`reports` (the
    event loop drops it silently). A peer that closes mid-handshake (a port probe) is not
    reported. Each :class:`ReloadingServerContext` binds a subclass to its own reports."""

    reports: HandshakeReports | None = None

    def do_handshake(self) -> None:
        try:
            super().do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, ssl.SSLEOFError,
                ssl.SSLZeroReturnError):
            raise
        except ssl.SSLError as exc:
            if self.reports is not None:
                self.reports.failed(exc)
            raise


class ReloadingServerContext:
    """A listening SSL context whose certificate follows the files (see the module doc)."""

    def __init__(self, settings: TlsSettings) -> None:
        self._settings = settings
        self._fingerprint = _fingerprint(settings.watched_files())
        self._current = build_server_context(settings)
        # The listening context only hands each handshake over to the current one; it still
        # needs a certificate of its own for OpenSSL to accept it as a server context.
        self.listening = build_server_context(settings)
        self.listening.sni_callback = self._select
        self.handshake_reports = HandshakeReports()
        self.listening.sslobject_class = type(
            "ListeningSSLObject", (HandshakeReportingSSLObject,),
            {"reports": self.handshake_reports})
        self.reloads = 0

    @property
    def current(self) -> ssl.SSLContext:
        return self._current

    def _select(self, sslobj: ssl.SSLObject, server_name: str | None,
                _listening: ssl.SSLContext) -> None:
        sslobj.context = self._current

    def check(self) -> bool:
        """Rebuild if a watched file changed. Blocking; True when a new context took effect."""
        fingerprint = _fingerprint(self._settings.watched_files())
        if fingerprint == self._fingerprint:
            return False
        try:
            fresh = build_server_context(self._settings)
        except SecurityConfigError as exc:
            log.warning("TLS certificate files changed but cannot be loaded (keeping the "
                        "previous certificate, retrying at the next check): %s", exc)
            return False
        self._current = fresh
        self._fingerprint = fingerprint
        self.reloads += 1
        log.info("TLS certificate reloaded from %s", self._settings.certificate_file)
        return True

    async def run(self, stop: asyncio.Event) -> None:
        """Check every ``refresh_check_seconds`` (off the loop) until *stop* is set."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self._settings.refresh_check_seconds)
            if not stop.is_set():
                await asyncio.to_thread(self.check)
