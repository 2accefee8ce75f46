"""The client options every ``horae-client`` command shares, and a CONNECT check that fails fast.

Theory of operation
-------------------
:class:`ClientOptions` holds ``pulsar-client``'s global flags (``--url``, ``--auth-plugin``,
``--auth-params``, the TLS flags, ``--listener-name``); :func:`authentication` maps Pulsar's
authentication plugin class names (and their short names) with their ``--auth-params`` to the
official Python client's authentication objects, and :func:`make_client` builds the
``pulsar.Client``.

Why :func:`check_connect`: the official Python client (its C++ core) treats any answer to its
CONNECT but CONNECTED, and a connection closed before one, as a dropped connection, and retries
until its operation timeout (30 s). That is what it does against Pulsar as well: a refused token,
a missing one, or a plaintext client on a TLS port all look like a slow broker, then a
``Timeout``. Before the command builds its client, :func:`check_connect` opens one connection to
the first host of a ``pulsar://`` or ``pulsar+ssl://`` URL, sends the CONNECT the client would
send (same method name and credentials; the client certificate on TLS) and reads the first
answer: CONNECTED passes; ERROR (``AuthenticationError: Failed to authenticate``), a close
without an answer, a TLS failure or a refused TCP connection raise :class:`ConnectRefused` with
what happened and what to check, within ``timeout_s``. It is skipped for ``http(s)://`` service
URLs (the client's lookups go over HTTP there) and for plugins whose credentials only the client
can obtain (OAuth 2).
"""

from __future__ import annotations

import json
import socket
import ssl
import struct
import urllib.parse
from dataclasses import dataclass
from typing import Any, Final

from protocol import pulsar_pb as pb
from protocol.framing import encode_command
from protocol.limits import PROTOCOL_VERSION

__all__ = [
    "DEFAULT_SERVICE_URL",
    "ClientOptions",
    "ConnectRefused",
    "UsageError",
    "authentication",
    "check_connect",
    "make_client",
]

DEFAULT_SERVICE_URL: Final = "pulsar://localhost:6650/"
CLIENT_VERSION: Final = "horae-client"
#: The first answer to CONNECT is small (CONNECTED or ERROR); a peer announcing more is not a
#: Pulsar broker.
_MAX_ANSWER_BYTES: Final = 64 * 1024

_PLUGIN = "org.apache.pulsar.client.impl.auth."
_TOKEN = {"token", _PLUGIN + "AuthenticationToken", "AuthenticationToken"}
_TLS = {"tls", _PLUGIN + "AuthenticationTls", "AuthenticationTls"}
_BASIC = {"basic", _PLUGIN + "AuthenticationBasic", "AuthenticationBasic"}
_OAUTH2 = {"oauth2", _PLUGIN + "oauth2.AuthenticationOAuth2", "AuthenticationOAuth2"}


class UsageError(Exception):
    """A bad flag value (exit code 2)."""


class ConnectRefused(Exception):
    """The broker refused or dropped our CONNECT; the text says what happened and what to check."""


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """``pulsar-client``'s global flags."""

    service_url: str = DEFAULT_SERVICE_URL
    auth_plugin: str | None = None
    auth_params: str | None = None
    tls_trust_certs_file_path: str | None = None
    tls_allow_insecure_connection: bool = False
    tls_enable_hostname_verification: bool = False
    listener_name: str | None = None
    operation_timeout_s: int = 30
    connect_check: bool = True


@dataclass(frozen=True, slots=True)
class _Credentials:
    """What CONNECT carries for a plugin: its method name, data and client certificate."""

    method: str
    data: bytes = b""
    cert_file: str | None = None
    key_file: str | None = None
    checkable: bool = True


def _params(text: str) -> dict[str, str]:
    """``--auth-params``: JSON, or Pulsar's ``key1:val1,key2:val2`` form."""
    text = text.strip()
    if text.startswith("{"):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--auth-params is not valid JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise UsageError("--auth-params JSON must be an object")
        return {str(k): str(v) for k, v in parsed.items()}
    out: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition(":")
        if not sep:
            raise UsageError(f"--auth-params item {item!r} is not key:value")
        out[key.strip()] = value.strip()
    return out


def _token_of(params: str) -> str:
    """Pulsar's AuthenticationToken parameters: ``token:XXX``, ``file:///path``, ``{"token":..}``
    or the bare token."""
    text = params.strip()
    if text.startswith("{"):
        text = _params(text).get("token", "")
    if text.startswith("token:"):
        return text[len("token:"):].strip()
    if text.startswith("file:"):
        path = urllib.parse.urlparse(text).path
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read().strip()
        except OSError as exc:
            raise UsageError(f"cannot read the token file {path}: {exc.strerror}") from None
    return text


def _credentials(options: ClientOptions) -> _Credentials:
    plugin, params = options.auth_plugin, options.auth_params or ""
    if not plugin:
        return _Credentials("none")
    if plugin in _TOKEN:
        token = _token_of(params)
        if not token:
            raise UsageError("--auth-params holds no token (use token:XXX or file:///path)")
        return _Credentials("token", token.encode())
    if plugin in _BASIC:
        p = _params(params)
        user, password = p.get("userId"), p.get("password")
        if not user or password is None:
            raise UsageError('basic authentication needs --auth-params '
                             '\'{"userId":"...","password":"..."}\'')
        return _Credentials("basic", f"{user}:{password}".encode())
    if plugin in _TLS:
        p = _params(params)
        cert, key = p.get("tlsCertFile"), p.get("tlsKeyFile")
        if not cert or not key:
            raise UsageError("TLS authentication needs --auth-params "
                             "tlsCertFile:/path/cert.pem,tlsKeyFile:/path/key.pem")
        return _Credentials("tls", cert_file=cert, key_file=key)
    if plugin in _OAUTH2:
        return _Credentials("oauth2", checkable=False)
    raise UsageError(f"unsupported --auth-plugin {plugin!r}; use AuthenticationToken, "
                     "AuthenticationBasic, AuthenticationTls or AuthenticationOAuth2 "
                     f"(as {_PLUGIN}...)")


def authentication(options: ClientOptions) -> Any:
    """The official client's authentication object for the options (None without a plugin)."""
    import pulsar

    creds = _credentials(options)
    if creds.method == "none":
        return None
    if creds.method == "token":
        return pulsar.AuthenticationToken(creds.data.decode())
    if creds.method == "basic":
        user, _, password = creds.data.decode().partition(":")
        return pulsar.AuthenticationBasic(user, password)
    if creds.method == "tls":
        return pulsar.AuthenticationTLS(creds.cert_file, creds.key_file)
    return pulsar.AuthenticationOauth2(options.auth_params or "")


def make_client(options: ClientOptions) -> Any:
    """A ``pulsar.Client`` for the options, after :func:`check_connect` (unless disabled)."""
    import pulsar

    if options.connect_check:
        check_connect(options)
    kw: dict[str, Any] = {
        "authentication": authentication(options),
        "operation_timeout_seconds": options.operation_timeout_s,
        "tls_allow_insecure_connection": options.tls_allow_insecure_connection,
        "tls_validate_hostname": options.tls_enable_hostname_verification,
        # The C++ core logs every connection at INFO: only its warnings, on stderr (stdout is
        # the commands' output). Its own file logger: a Python logger called from the client's
        # threads can abort the process at exit ("terminate called without an active
        # exception"), and its console logger writes to stdout.
        "logger": pulsar.FileLogger(pulsar.LoggerLevel.Warn, "/dev/stderr"),
    }
    if options.tls_trust_certs_file_path:
        kw["tls_trust_certs_file_path"] = options.tls_trust_certs_file_path
    if options.listener_name:
        kw["listener_name"] = options.listener_name
    try:
        return pulsar.Client(options.service_url, **kw)
    except (ValueError, pulsar.PulsarException) as exc:
        raise UsageError(f"--url {options.service_url!r}: {exc}") from None


# --- the CONNECT check ----------------------------------------------------------------------

def _first_host(url: str) -> tuple[str, int, bool] | None:
    """``(host, port, tls)`` of the first host of a binary service URL; None for HTTP URLs."""
    scheme, sep, rest = url.strip().partition("://")
    if not sep:
        raise UsageError(f"--url {url!r} is not a service URL (pulsar://host:6650)")
    scheme = scheme.lower()
    if scheme in ("http", "https"):
        return None
    if scheme not in ("pulsar", "pulsar+ssl"):
        raise UsageError(f"--url {url!r}: the scheme must be pulsar, pulsar+ssl, http or https")
    tls = scheme == "pulsar+ssl"
    first = rest.split("/", 1)[0].split(",", 1)[0]
    parsed = urllib.parse.urlsplit("//" + first)
    try:
        port = parsed.port or (6651 if tls else 6650)
    except ValueError:
        raise UsageError(f"--url {url!r}: bad port") from None
    if not parsed.hostname:
        raise UsageError(f"--url {url!r}: no host")
    return parsed.hostname, port, tls


def _connect_frame(creds: _Credentials) -> bytes:
    cmd = pb.BaseCommand(type=pb.BaseCommand.CONNECT)
    cmd.connect.client_version = CLIENT_VERSION
    cmd.connect.protocol_version = PROTOCOL_VERSION
    cmd.connect.auth_method_name = creds.method
    if creds.data:
        cmd.connect.auth_data = creds.data
    cmd.connect.feature_flags.supports_auth_refresh = True
    return encode_command(cmd)


def _tls_context(options: ClientOptions, creds: _Credentials) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=options.tls_trust_certs_file_path or None)
    context.check_hostname = options.tls_enable_hostname_verification
    if options.tls_allow_insecure_connection:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if creds.cert_file and creds.key_file:
        try:
            context.load_cert_chain(creds.cert_file, creds.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(f"cannot load the client certificate {creds.cert_file}: {exc}") from None
    return context


def _read_exact(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            break
        chunks += chunk
    return bytes(chunks)


def check_connect(options: ClientOptions, timeout_s: float = 10.0) -> None:
    """Send the client's CONNECT once and raise :class:`ConnectRefused` unless the broker answers
    CONNECTED (see the module doc)."""
    target = _first_host(options.service_url)
    creds = _credentials(options)
    if target is None or not creds.checkable:
        return
    host, port, tls = target
    where = f"{host}:{port}"
    hint_plain = ("the port may be a TLS port: use pulsar+ssl:// (with --tlsTrustCertsFilePath)"
                  if not tls else "")
    try:
        raw = socket.create_connection((host, port), timeout=timeout_s)
    except OSError as exc:
        raise ConnectRefused(f"cannot connect to {where}: {exc.strerror or exc}") from None
    try:
        sock: socket.socket = raw
        if tls:
            try:
                sock = _tls_context(options, creds).wrap_socket(raw, server_hostname=host)
            except ssl.SSLError as exc:
                raise ConnectRefused(
                    f"TLS handshake with {where} failed: {exc.reason or exc}; if the port is not "
                    "a TLS port use pulsar://, else check --tlsTrustCertsFilePath") from None
            except ssl.CertificateError as exc:
                raise ConnectRefused(f"TLS handshake with {where} failed: {exc}") from None
        sock.sendall(_connect_frame(creds))
        head = _read_exact(sock, 4)
        if len(head) < 4:
            detail = f"{where} closed the connection without answering CONNECT"
            raise ConnectRefused(f"{detail}; {hint_plain}" if hint_plain else detail)
        (size,) = struct.unpack(">I", head)
        if not 4 <= size <= _MAX_ANSWER_BYTES:
            raise ConnectRefused(f"{where} does not speak Pulsar's binary protocol "
                                 f"(answered a {size}-byte frame to CONNECT)")
        frame = _read_exact(sock, size)
        (cmd_size,) = struct.unpack(">I", frame[:4]) if len(frame) >= 4 else (0,)
        if len(frame) < size or cmd_size > size - 4:
            raise ConnectRefused(f"{where} closed the connection in the middle of its answer")
        answer = pb.BaseCommand.FromString(frame[4:4 + cmd_size])
    except TimeoutError:
        raise ConnectRefused(f"{where} did not answer CONNECT within {timeout_s:g} s") from None
    except ConnectionError as exc:
        detail = f"{where} dropped the connection before answering CONNECT ({exc})"
        raise ConnectRefused(f"{detail}; {hint_plain}" if hint_plain else detail) from None
    except ValueError as exc:  # protobuf DecodeError
        raise ConnectRefused(f"{where} answered CONNECT with something that is not a "
                             f"Pulsar command: {exc}") from None
    finally:
        raw.close()
    if answer.type == pb.BaseCommand.ERROR:
        code = pb.ServerError.Name(answer.error.error)
        advice = ""
        if answer.error.error == pb.AuthenticationError:
            advice = (" (check --auth-plugin and --auth-params: the broker's log says which "
                      "provider refused and why)")
        raise ConnectRefused(f"{where} refused the connection: {code}: "
                             f"{answer.error.message}{advice}")
    if answer.type != pb.BaseCommand.CONNECTED and answer.type != pb.BaseCommand.AUTH_CHALLENGE:
        raise ConnectRefused(f"{where} answered CONNECT with "
                             f"{pb.BaseCommand.Type.Name(answer.type)}")

