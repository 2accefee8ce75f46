"""``horae-admin``'s credentials and TLS, as pulsar-admin takes them.

Theory of operation
-------------------
pulsar-admin authenticates with ``--auth-plugin CLASS --auth-params PARAMS`` (and trusts an
HTTPS server with ``--tls-trust-cert-path`` / ``--tls-allow-insecure``); Horae accepts the same
flags plus ``--token`` as a short form of the token plugin. :func:`admin_auth` turns them into
an :class:`AdminAuth`: extra HTTP headers and, for ``https://`` URLs, an SSL context (which
also carries the client certificate of the TLS plugin). Plugins, by Pulsar's class name or its
short name:

* ``org.apache.pulsar.client.impl.auth.AuthenticationToken`` / ``token``: params
  ``token:<jwt>``, ``file:///path`` (the file holds the token) or the bare token;
  ``Authorization: Bearer``.
* ``org.apache.pulsar.client.impl.auth.AuthenticationBasic`` / ``basic``: params JSON
  ``{"userId": ..., "password": ...}``; ``Authorization: Basic``.
* ``org.apache.pulsar.client.impl.auth.AuthenticationTls`` / ``tls``: params
  ``tlsCertFile:<pem>,tlsKeyFile:<pem>``; the certificate is presented in the TLS handshake.

Bad flags are :class:`ValueError` with a message naming the flag (the CLI exits 2). Reading the
token or certificate files happens here, once, before any request.
"""

from __future__ import annotations

import base64
import json
import pathlib
import ssl
from dataclasses import dataclass, field

__all__ = ["AdminAuth", "admin_auth"]

_PKG = "org.apache.pulsar.client.impl.auth."
_PLUGINS = {
    _PKG + "AuthenticationToken": "token", "token": "token",
    _PKG + "AuthenticationBasic": "basic", "basic": "basic",
    _PKG + "AuthenticationTls": "tls", "tls": "tls",
}


@dataclass(frozen=True, slots=True)
class AdminAuth:
    headers: dict[str, str] = field(default_factory=dict)
    ssl_context: ssl.SSLContext | None = None


def _token(params: str) -> str:
    if params.startswith("token:"):
        return params[len("token:"):].strip()
    if params.startswith("file:"):
        path = params[len("file:"):].removeprefix("//")
        return pathlib.Path(path).read_text().strip()
    return params.strip()


def _tls_params(params: str) -> tuple[str, str]:
    values = dict(item.split(":", 1) for item in params.split(",") if ":" in item)
    cert, key = values.get("tlsCertFile"), values.get("tlsKeyFile")
    if not cert or not key:
        raise ValueError("--auth-params for the TLS plugin: tlsCertFile:<pem>,tlsKeyFile:<pem>")
    return cert, key


def admin_auth(*, auth_plugin: str | None, auth_params: str | None, token: str | None,
               tls_trust_cert_path: str | None, tls_allow_insecure: bool,
               https: bool = True) -> AdminAuth:
    """The headers and SSL context the flags ask for (see the module doc).

    With ``https=False`` (a plain http admin URL) no SSL context is made unless a client
    certificate is given (it is still loaded, so a bad one is reported): loading the system's
    CA store takes about a tenth of a second that a plain request does not need."""
    if token is not None and auth_plugin is not None:
        raise ValueError("use either --token or --auth-plugin, not both")
    kind = "token" if token is not None else None
    if auth_plugin is not None:
        kind = _PLUGINS.get(auth_plugin.strip())
        if kind is None:
            raise ValueError(f"--auth-plugin: unknown plugin {auth_plugin!r}; use one of "
                             f"{sorted(k for k in _PLUGINS if '.' in k)}")
    params = token if token is not None else (auth_params or "")
    headers: dict[str, str] = {}
    client_cert: tuple[str, str] | None = None
    try:
        if kind == "token":
            headers["Authorization"] = f"Bearer {_token(params)}"
        elif kind == "basic":
            doc = json.loads(params)
            pair = f"{doc['userId']}:{doc['password']}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        elif kind == "tls":
            client_cert = _tls_params(params)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"--auth-params: cannot use them with the {kind} plugin: {exc}") from None
    if not https and client_cert is None:
        return AdminAuth(headers, None)
    context = ssl.create_default_context(cafile=tls_trust_cert_path or None)
    if tls_allow_insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if client_cert is not None:
        try:
            context.load_cert_chain(*client_cert)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"--auth-params: cannot load the client certificate: {exc}") from None
    return AdminAuth(headers, context)
