"""JWT token authentication (Pulsar's ``AuthenticationProviderToken``), on PyJWT.

Theory of operation
-------------------
A :class:`TokenAuthenticator` holds exactly one validation key, fixed at start-up:
``tokenSecretKey`` (an HMAC secret, HS256/384/512) or ``tokenPublicKey`` (an RSA or EC public
key, DER as ``pulsar tokens create-key-pair`` writes it, or PEM), with ``tokenPublicAlg``
(default RS256) naming the algorithm family. The algorithms a token may claim are an explicit
allow-list derived from that key: HMAC names for a secret, RS/PS names for an RSA key, ES names
for an EC key. So ``alg: none`` is never accepted, and an HS256 token signed with the *public*
key as its secret (the classic HS/RS confusion) is refused before any signature check.

:meth:`TokenAuthenticator.authenticate` verifies the signature, ``exp`` and ``nbf`` (no leeway,
as Pulsar), the audience when ``tokenAudienceClaim`` is set, and takes the role from ``sub`` or
``tokenAuthClaim`` (a string, or a list whose first item is one, as Pulsar). A missing or empty
role is refused: an empty role would match grants meant for nobody. The expiry is returned
(:attr:`TokenIdentity.expires_at_ms`) so the connection can send AUTH_CHALLENGE before it
passes. Error details follow Pulsar's "Failed to authentication token: ..." (sic).

Pure CPU work (no IO after construction): safe to call on the event loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import load_der_public_key, load_pem_public_key
from jwt.types import Options

from broker.security.errors import AuthenticationError, SecurityConfigError

__all__ = [
    "EC_ALGORITHMS",
    "HMAC_ALGORITHMS",
    "RSA_ALGORITHMS",
    "TokenAuthenticator",
    "TokenIdentity",
]

HMAC_ALGORITHMS = ("HS256", "HS384", "HS512")
RSA_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
EC_ALGORITHMS = ("ES256", "ES384", "ES512")

#: jjwt (Pulsar's JWT library) refuses HMAC keys shorter than 256 bits; so does Horae.
MIN_SECRET_KEY_BYTES = 32

_FAILED = "Failed to authentication token: "


@dataclass(frozen=True, slots=True)
class TokenIdentity:
    """A verified token's role and expiry (epoch ms; None = no ``exp`` claim)."""

    role: str
    expires_at_ms: int | None


def _load_public_key(data: bytes, setting: str) -> rsa.RSAPublicKey | ec.EllipticCurvePublicKey:
    try:
        key: Any = load_der_public_key(data)
    except ValueError:
        try:
            key = load_pem_public_key(data)
        except ValueError:
            raise SecurityConfigError(f"{setting}: not a DER or PEM public key") from None
    if not isinstance(key, rsa.RSAPublicKey | ec.EllipticCurvePublicKey):
        raise SecurityConfigError(f"{setting}: only RSA and EC public keys are supported")
    return key


class TokenAuthenticator:
    """Validates Pulsar JWTs against one configured key (see the module doc)."""

    method_name = "token"

    def __init__(self, *, secret_key: bytes | None = None, public_key: bytes | None = None,
                 public_alg: str = "RS256", role_claim: str = "sub",
                 audience_claim: str | None = None, audience: str | None = None) -> None:
        if (secret_key is None) == (public_key is None):
            raise SecurityConfigError(
                "token authentication needs exactly one of tokenSecretKey or tokenPublicKey")
        self._key: Any
        if secret_key is not None:
            if len(secret_key) < MIN_SECRET_KEY_BYTES:
                raise SecurityConfigError(
                    f"tokenSecretKey: an HMAC key must be at least {MIN_SECRET_KEY_BYTES} bytes, "
                    f"not {len(secret_key)}")
            self._key = secret_key
            self._algorithms: tuple[str, ...] = HMAC_ALGORITHMS
        else:
            assert public_key is not None
            key = _load_public_key(public_key, "tokenPublicKey")
            family = RSA_ALGORITHMS if isinstance(key, rsa.RSAPublicKey) else EC_ALGORITHMS
            if public_alg not in family:
                raise SecurityConfigError(
                    f"tokenPublicAlg {public_alg!r} does not fit a "
                    f"{'RSA' if family is RSA_ALGORITHMS else 'EC'} key; use one of {list(family)}")
            self._key = key
            self._algorithms = family
        if not role_claim:
            raise SecurityConfigError("tokenAuthClaim must not be blank")
        if audience_claim and not audience:
            raise SecurityConfigError(
                f"Token Audience Claim [{audience_claim}] configured, but Audience stands for "
                "this broker not.")
        self._role_claim = role_claim
        self._audience_claim = audience_claim or None
        self._audience = audience or None

    @property
    def algorithms(self) -> tuple[str, ...]:
        """The ``alg`` values a token may carry (the allow-list)."""
        return self._algorithms

    def authenticate(self, token: str) -> TokenIdentity:
        """The identity in *token*, or :class:`AuthenticationError` with Pulsar's text."""
        if not token.strip():
            raise AuthenticationError("Blank token found", method=self.method_name,
                                      reason="INVALID_AUTH_DATA")
        options: Options = {"verify_aud": False, "require": []}
        try:
            claims: Mapping[str, Any] = jwt.decode(
                token.strip(), self._key, algorithms=list(self._algorithms), options=options)
        except jwt.PyJWTError as exc:
            raise AuthenticationError(_FAILED + str(exc), method=self.method_name,
                                      reason="INVALID_TOKEN") from None
        self._check_audience(claims)
        role = self._role_of(claims)
        exp = claims.get("exp")
        expires_at_ms = int(exp * 1000) if isinstance(exp, int | float) else None
        return TokenIdentity(role=role, expires_at_ms=expires_at_ms)

    def _check_audience(self, claims: Mapping[str, Any]) -> None:
        if self._audience_claim is None:
            return
        found = claims.get(self._audience_claim)
        if found is None:
            raise AuthenticationError(
                _FAILED + f"Found null Audience in token, for claimed field: {self._audience_claim}",
                method=self.method_name, reason="INVALID_TOKEN")
        audiences = found if isinstance(found, list) else [found]
        if not all(isinstance(a, str) for a in audiences):
            raise AuthenticationError(
                f"Audiences in token is not in expected format: {found}", method=self.method_name,
                reason="INVALID_AUDIENCES")
        if self._audience not in audiences:
            raise AuthenticationError(
                f"Audiences in token: [{', '.join(audiences)}] not contains this broker: "
                f"{self._audience}", method=self.method_name, reason="INVALID_AUDIENCES")

    def _role_of(self, claims: Mapping[str, Any]) -> str:
        value = claims.get(self._role_claim)
        if isinstance(value, list) and value:
            value = value[0]
        if not isinstance(value, str) or not value.strip():
            raise AuthenticationError(
                _FAILED + f"no role in the token's {self._role_claim!r} claim",
                method=self.method_name, reason="INVALID_TOKEN")
        return value
