"""``horae tokens``: keys and tokens made by the CLI validate with the broker's provider."""

from __future__ import annotations

import base64
import json
import pathlib
import time

import pytest

from broker.cli import main as horae_main
from broker.security.token_auth import TokenAuthenticator
from broker.security.tokens_cli import main, parse_relative_time


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out.strip(), err.strip()


def test_secret_key_round_trip(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = tmp_path / "secret.key"
    assert _run(capsys, "create-secret-key", "--output", str(key))[0] == 0
    assert len(key.read_bytes()) == 32
    code, token, _ = _run(capsys, "create", "--secret-key", f"file://{key}", "--subject", "alice",
                          "--expiry-time", "1h")
    assert code == 0
    identity = TokenAuthenticator(secret_key=key.read_bytes()).authenticate(token)
    assert identity.role == "alice"
    assert identity.expires_at_ms is not None
    assert 3500 <= identity.expires_at_ms / 1000 - time.time() <= 3600
    code, out, _ = _run(capsys, "validate", "-sk", str(key), token)
    assert code == 0
    assert json.loads(out)["sub"] == "alice"


def test_base64_secret_key_as_data_url(capsys: pytest.CaptureFixture[str]) -> None:
    code, encoded, _ = _run(capsys, "create-secret-key", "-a", "HS512", "--base64")
    assert code == 0
    assert len(base64.b64decode(encoded)) == 64
    code, token, _ = _run(capsys, "create", "-sk", f"data:;base64,{encoded}", "-s", "bob",
                          "-a", "HS512")
    assert code == 0
    code, out, _ = _run(capsys, "show", token)
    header, _, claims = out.partition("\n---\n")
    assert json.loads(header)["alg"] == "HS512"
    assert json.loads(claims) == {"sub": "bob"}


@pytest.mark.parametrize("alg", ["RS256", "ES256"])
def test_key_pair_round_trip(alg: str, tmp_path: pathlib.Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    private, public = tmp_path / "private.key", tmp_path / "public.key"
    assert _run(capsys, "create-key-pair", "-a", alg, "--output-private-key", str(private),
                "--output-public-key", str(public))[0] == 0
    code, token, _ = _run(capsys, "create", "-pk", str(private), "-s", "svc")
    assert code == 0
    auth = TokenAuthenticator(public_key=public.read_bytes(), public_alg=alg)
    assert auth.authenticate(token).role == "svc"
    token_file = tmp_path / "token.txt"
    token_file.write_text(token + "\n")
    assert _run(capsys, "validate", "-pk", str(public), "-a", alg, "-f", str(token_file))[0] == 0


def test_validate_refuses_expired_and_foreign_tokens(tmp_path: pathlib.Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    mine, theirs = tmp_path / "mine.key", tmp_path / "theirs.key"
    _run(capsys, "create-secret-key", "-o", str(mine))
    _run(capsys, "create-secret-key", "-o", str(theirs))
    _, foreign, _ = _run(capsys, "create", "-sk", str(theirs), "-s", "x")
    code, _, err = _run(capsys, "validate", "-sk", str(mine), foreign)
    assert code == 1
    assert "Signature verification failed" in err
    _, expired, _ = _run(capsys, "create", "-sk", str(mine), "-s", "x", "-e", "0s")
    code, _, err = _run(capsys, "validate", "-sk", str(mine), expired)
    assert code == 1
    assert "expired" in err


def test_usage_errors(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = tmp_path / "k"
    _run(capsys, "create-secret-key", "-o", str(key))
    code, _, err = _run(capsys, "create", "-sk", str(key), "-s", "x", "-e", "soon")
    assert code == 2
    assert "invalid relative time" in err
    code, _, err = _run(capsys, "show", "not-a-token")
    assert code == 1
    assert "Invalid token" in err


def test_relative_times() -> None:
    assert [parse_relative_time(t) for t in ("90", "30s", "10m", "2h", "7d", "1w", "1y")] == [
        90, 30, 600, 7200, 604800, 604800, 31536000]


def test_horae_tokens_subcommand(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = tmp_path / "k"
    assert horae_main(["tokens", "create-secret-key", "-o", str(key)]) == 0
    assert key.stat().st_size == 32
