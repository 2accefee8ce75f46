"""``horae tokens``: create and inspect JWT keys and tokens, as Pulsar's ``pulsar tokens``.

Theory of operation
-------------------
Five subcommands with Pulsar's flags, interchangeable with its tool (same key files: raw
secret bytes, DER PKCS#8 private keys, DER X.509 public keys; PEM is accepted on input too):

* ``create-secret-key [-a HS256] [-o FILE] [-b]``: a random HMAC key of the algorithm's size,
  raw to FILE (or stdout), or base64 text with ``--base64``;
* ``create-key-pair [-a RS256] --output-private-key F --output-public-key F``: RSA 2048 for
  RS*/PS*, the matching NIST curve for ES256/384/512;
* ``create -s SUBJECT [-e 1y] (-sk KEY | -pk KEY) [-a ALG] [-hs k=v ...]``: prints a token;
  ``-e`` takes Pulsar's relative times (``30s``, ``10m``, ``2h``, ``7d``, ``1w``, ``1y``);
* ``show [TOKEN | -i | -f FILE]``: prints the header and claims *without* verifying them;
* ``validate [TOKEN | -i | -f FILE] (-sk KEY | -pk KEY) [-a ALG]``: prints the claims of a
  valid token; exit 1 with the reason otherwise.

Keys are named as the broker's settings are (``data:``, ``file:``, ``env:``, a path, base64).
Exit codes: 0 success, 1 invalid token or unusable key, 2 usage error.
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import secrets
import sys
import time
from collections.abc import Sequence
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from broker.security.errors import AuthenticationError, SecurityConfigError
from broker.security.sources import read_secret
from broker.security.token_auth import (
    EC_ALGORITHMS,
    HMAC_ALGORITHMS,
    RSA_ALGORITHMS,
    TokenAuthenticator,
)

__all__ = ["build_parser", "main", "parse_relative_time"]

_SECRET_BYTES = {"HS256": 32, "HS384": 48, "HS512": 64}
_CURVES: dict[str, ec.EllipticCurve] = {
    "ES256": ec.SECP256R1(), "ES384": ec.SECP384R1(), "ES512": ec.SECP521R1()}
_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


def parse_relative_time(text: str) -> int:
    """Seconds in Pulsar's relative time (``100``, ``30s``, ``10m``, ``2h``, ``7d``, ``1w``, ``1y``)."""
    match = re.fullmatch(r"(\d+)([smhdwy]?)", text.strip().lower())
    if match is None:
        raise ValueError(f"invalid relative time {text!r} (e.g. 30s, 10m, 2h, 7d, 1w, 1y)")
    return int(match.group(1)) * _UNITS_S[match.group(2) or "s"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="horae tokens", description="Create and inspect JWT keys and tokens (as `pulsar tokens`).")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    sk = sub.add_parser("create-secret-key", help="create a secret key for HS256/384/512 tokens")
    sk.add_argument("-a", "--signature-algorithm", default="HS256", choices=HMAC_ALGORITHMS)
    sk.add_argument("-o", "--output", metavar="FILE", help="write the key here (default stdout)")
    sk.add_argument("-b", "--base64", action="store_true", help="encode the key in base64")

    kp = sub.add_parser("create-key-pair", help="create a private/public key pair")
    kp.add_argument("-a", "--signature-algorithm", default="RS256",
                    choices=RSA_ALGORITHMS + EC_ALGORITHMS)
    kp.add_argument("--output-private-key", required=True, metavar="FILE")
    kp.add_argument("--output-public-key", required=True, metavar="FILE")

    cr = sub.add_parser("create", help="create a token")
    cr.add_argument("-s", "--subject", required=True, help="the role the token stands for")
    cr.add_argument("-e", "--expiry-time", metavar="TIME", help="relative expiry (e.g. 1y, 30d)")
    cr.add_argument("-a", "--signature-algorithm", choices=HMAC_ALGORITHMS + RSA_ALGORITHMS + EC_ALGORITHMS)
    key = cr.add_mutually_exclusive_group(required=True)
    key.add_argument("-sk", "--secret-key", metavar="KEY", help="HMAC key (data:, file:, env:, path)")
    key.add_argument("-pk", "--private-key", metavar="KEY", help="private key (data:, file:, env:, path)")
    cr.add_argument("-hs", "--headers", action="append", default=[], metavar="K=V",
                    help="extra header (repeatable)")

    for name, helptext in (("show", "print a token's header and claims (no verification)"),
                           ("validate", "verify a token and print its claims")):
        cmd = sub.add_parser(name, help=helptext)
        cmd.add_argument("token", nargs="?", help="the token (or use -i / -f)")
        cmd.add_argument("-i", "--stdin", action="store_true", help="read the token from stdin")
        cmd.add_argument("-f", "--token-file", metavar="FILE", help="read the token from a file")
        if name == "validate":
            vkey = cmd.add_mutually_exclusive_group(required=True)
            vkey.add_argument("-sk", "--secret-key", metavar="KEY")
            vkey.add_argument("-pk", "--public-key", metavar="KEY")
            cmd.add_argument("-a", "--signature-algorithm", default="RS256",
                             choices=RSA_ALGORITHMS + EC_ALGORITHMS,
                             help="algorithm of a public key (default RS256)")
    return parser


def _write(path: str | None, data: bytes) -> None:
    if path is None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        with open(path, "wb") as fh:
            fh.write(data)


def _create_secret_key(args: argparse.Namespace) -> int:
    key = secrets.token_bytes(_SECRET_BYTES[args.signature_algorithm])
    _write(args.output, base64.b64encode(key) if args.base64 else key)
    return 0


def _create_key_pair(args: argparse.Namespace) -> int:
    alg = args.signature_algorithm
    private: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
    if alg in RSA_ALGORITHMS:
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    else:
        private = ec.generate_private_key(_CURVES[alg])
    _write(args.output_private_key, private.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    _write(args.output_public_key, private.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo))
    return 0


def _load_private_key(data: bytes) -> Any:
    try:
        return serialization.load_der_private_key(data, password=None)
    except ValueError:
        try:
            return serialization.load_pem_private_key(data, password=None)
        except ValueError:
            raise SecurityConfigError("--private-key: not a DER or PEM private key") from None


def _create(args: argparse.Namespace) -> int:
    claims: dict[str, Any] = {"sub": args.subject}
    if args.expiry_time:
        claims["exp"] = int(time.time()) + parse_relative_time(args.expiry_time)
    headers: dict[str, Any] = {}
    for item in args.headers:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise ValueError(f"--headers wants KEY=VALUE, not {item!r}")
        headers[k] = v
    key: Any
    if args.secret_key is not None:
        key = read_secret(args.secret_key, setting="--secret-key")
        alg = args.signature_algorithm or "HS256"
        if alg not in HMAC_ALGORITHMS:
            raise ValueError(f"a secret key signs {list(HMAC_ALGORITHMS)}, not {alg}")
    else:
        key = _load_private_key(read_secret(args.private_key, setting="--private-key"))
        family = RSA_ALGORITHMS if isinstance(key, rsa.RSAPrivateKey) else EC_ALGORITHMS
        alg = args.signature_algorithm or family[0]
        if alg not in family:
            raise ValueError(f"this private key signs {list(family)}, not {alg}")
    print(jwt.encode(claims, key, algorithm=alg, headers=headers or None))
    return 0


def _read_token(args: argparse.Namespace) -> str:
    if args.stdin:
        return sys.stdin.read().strip()
    if args.token_file:
        with open(args.token_file, encoding="utf-8") as fh:
            return fh.read().strip()
    if args.token:
        return str(args.token).strip()
    raise ValueError("give a token, -i/--stdin or -f/--token-file")


def _show(args: argparse.Namespace) -> int:
    token = _read_token(args)
    try:
        header = jwt.get_unverified_header(token)
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError as exc:
        print(f"Invalid token: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(header))
    print("---")
    print(json.dumps(claims))
    return 0


def _validate(args: argparse.Namespace) -> int:
    token = _read_token(args)
    if args.secret_key is not None:
        auth = TokenAuthenticator(secret_key=read_secret(args.secret_key, setting="--secret-key"))
    else:
        auth = TokenAuthenticator(public_key=read_secret(args.public_key, setting="--public-key"),
                                  public_alg=args.signature_algorithm)
    try:
        auth.authenticate(token)
    except AuthenticationError as exc:
        print(exc.detail, file=sys.stderr)
        return 1
    print(json.dumps(jwt.decode(token, options={"verify_signature": False})))
    return 0


_COMMANDS = {
    "create-secret-key": _create_secret_key,
    "create-key-pair": _create_key_pair,
    "create": _create,
    "show": _show,
    "validate": _validate,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        return _COMMANDS[args.command](args)
    except SecurityConfigError as exc:
        print(f"horae tokens: {exc}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as exc:
        print(f"horae tokens: {exc}", file=sys.stderr)
        return 2
