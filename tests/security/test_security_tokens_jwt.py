"""The JWT matrix: what the token provider accepts and what it refuses (unit level)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from broker.security.errors import AuthenticationError, SecurityConfigError
from broker.security.token_auth import TokenAuthenticator

SECRET = b"s" * 32
OTHER_SECRET = b"o" * 32


def _rsa_pair() -> tuple[rsa.RSAPrivateKey, bytes]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    der = key.public_key().public_bytes(serialization.Encoding.DER,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)
    return key, der


@pytest.fixture(scope="module")
def rsa_pair() -> tuple[rsa.RSAPrivateKey, bytes]:
    return _rsa_pair()


def _hs(claims: dict[str, object], key: bytes = SECRET, alg: str = "HS256") -> str:
    return jwt.encode(claims, key, algorithm=alg)


def _unsigned(claims: dict[str, object]) -> str:
    def b64(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    return (b64(json.dumps({"alg": "none", "typ": "JWT"}).encode()) + "."
            + b64(json.dumps(claims).encode()) + ".")


def _refusal(auth: TokenAuthenticator, token: str) -> str:
    with pytest.raises(AuthenticationError) as info:
        auth.authenticate(token)
    return info.value.detail


def test_valid_hs256_token_gives_sub_and_expiry() -> None:
    exp = int(time.time()) + 600
    identity = TokenAuthenticator(secret_key=SECRET).authenticate(_hs({"sub": "alice", "exp": exp}))
    assert identity.role == "alice"
    assert identity.expires_at_ms == exp * 1000


def test_token_without_exp_never_expires() -> None:
    identity = TokenAuthenticator(secret_key=SECRET).authenticate(_hs({"sub": "bob"}))
    assert identity.expires_at_ms is None


def test_role_from_custom_claim_and_list_claim() -> None:
    auth = TokenAuthenticator(secret_key=SECRET, role_claim="role")
    assert auth.authenticate(_hs({"sub": "x", "role": "ops"})).role == "ops"
    assert auth.authenticate(_hs({"role": ["first", "second"]})).role == "first"


# Times are offsets from when the test runs (not from collection: a whole suite takes minutes).
@pytest.mark.parametrize("claims, reason", [
    ({"sub": "a", "exp": -5}, "Signature has expired"),
    ({"sub": "a", "nbf": 3600}, "not yet valid"),
    ({"exp": 3600}, "no role"),
    ({"sub": ""}, "no role"),
    ({"sub": "   "}, "no role"),
])
def test_claims_refused(claims: dict[str, object], reason: str) -> None:
    now = int(time.time())
    claims = {k: now + v if k in ("exp", "nbf") and isinstance(v, int) else v for k, v in claims.items()}
    detail = _refusal(TokenAuthenticator(secret_key=SECRET), _hs(claims))
    assert detail.startswith("Failed to authentication token: ")
    assert reason in detail


def test_alg_none_refused() -> None:
    detail = _refusal(TokenAuthenticator(secret_key=SECRET), _unsigned({"sub": "admin"}))
    assert "alg" in detail


def test_wrong_secret_refused() -> None:
    detail = _refusal(TokenAuthenticator(secret_key=SECRET), _hs({"sub": "a"}, OTHER_SECRET))
    assert "Signature verification failed" in detail


@pytest.mark.parametrize("token", ["garbage", "a.b.c", "....", "eyJhbGciOiJIUzI1NiJ9.e30"])
def test_garbage_refused(token: str) -> None:
    detail = _refusal(TokenAuthenticator(secret_key=SECRET), token)
    assert detail.startswith("Failed to authentication token: ")


def test_blank_token_refused() -> None:
    assert _refusal(TokenAuthenticator(secret_key=SECRET), "  ") == "Blank token found"


def test_rs256_token_accepted_with_der_public_key(rsa_pair: tuple[rsa.RSAPrivateKey, bytes]) -> None:
    private, public_der = rsa_pair
    token = jwt.encode({"sub": "svc"}, private, algorithm="RS256")
    assert TokenAuthenticator(public_key=public_der).authenticate(token).role == "svc"


def test_hs_rs_confusion_refused(rsa_pair: tuple[rsa.RSAPrivateKey, bytes]) -> None:
    """An HS256 token whose HMAC secret is the broker's *public* key must not pass."""
    _, public_der = rsa_pair
    pem = serialization.load_der_public_key(public_der).public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    for secret in (public_der, pem):
        header = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').rstrip(b"=")
        body = base64.urlsafe_b64encode(b'{"sub":"admin"}').rstrip(b"=")
        signing_input = header + b"." + body
        sig = hmac.new(secret, signing_input, hashlib.sha256).digest()  # forged by hand
        token = (signing_input + b"." + base64.urlsafe_b64encode(sig).rstrip(b"=")).decode()
        detail = _refusal(TokenAuthenticator(public_key=public_der), token)
        assert "alg value is not allowed" in detail


def test_rs256_token_signed_by_other_key_refused(rsa_pair: tuple[rsa.RSAPrivateKey, bytes]) -> None:
    _, public_der = rsa_pair
    other, _ = _rsa_pair()
    token = jwt.encode({"sub": "svc"}, other, algorithm="RS256")
    assert "Signature verification failed" in _refusal(TokenAuthenticator(public_key=public_der), token)


def test_es256_public_key_and_wrong_alg_family_config() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)
    auth = TokenAuthenticator(public_key=pem, public_alg="ES256")
    assert auth.authenticate(jwt.encode({"sub": "e"}, key, algorithm="ES256")).role == "e"
    with pytest.raises(SecurityConfigError) as info:
        TokenAuthenticator(public_key=pem, public_alg="RS256")
    assert "tokenPublicAlg" in str(info.value)


def test_short_secret_and_missing_key_refused_at_startup() -> None:
    with pytest.raises(SecurityConfigError) as short:
        TokenAuthenticator(secret_key=b"short")
    assert "at least 32 bytes" in str(short.value)
    with pytest.raises(SecurityConfigError) as neither:
        TokenAuthenticator()
    assert "exactly one" in str(neither.value)


def test_audience_checked_when_configured() -> None:
    auth = TokenAuthenticator(secret_key=SECRET, audience_claim="aud", audience="horae")
    assert auth.authenticate(_hs({"sub": "a", "aud": ["x", "horae"]})).role == "a"
    assert "not contains this broker: horae" in _refusal(auth, _hs({"sub": "a", "aud": "other"}))
    assert "Found null Audience" in _refusal(auth, _hs({"sub": "a"}))
    with pytest.raises(SecurityConfigError):
        TokenAuthenticator(secret_key=SECRET, audience_claim="aud")
