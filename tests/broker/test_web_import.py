"""aiohttp imported by ``horae serve`` without its client's default contexts loading a CA file.

Each case runs in a fresh interpreter: the environment variable and the import are
process-wide, and other tests have imported aiohttp in this one.
"""

from __future__ import annotations

import json
import os
import pathlib
import ssl
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

_SCRIPT = r"""
import json, os, ssl
from broker.web_import import import_aiohttp

first = import_aiohttp()
again = import_aiohttp()
import aiohttp.connector as connector

print(json.dumps({
    "first": first, "again": again,
    "verified": connector._SSL_CONTEXT_VERIFIED.cert_store_stats()["x509"],
    "unverified": connector._SSL_CONTEXT_UNVERIFIED.cert_store_stats()["x509"],
    "env": os.environ.get("SSL_CERT_FILE"),
    "later": ssl.create_default_context().cert_store_stats()["x509"],
}))
"""


def _run(env_file: str | None) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k != "SSL_CERT_FILE"}
    if env_file is not None:
        env["SSL_CERT_FILE"] = env_file
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def _one_certificate(tmp_path: pathlib.Path) -> pathlib.Path:
    """A CA file holding the first certificate of the system's bundle."""
    bundle = pathlib.Path(ssl.get_default_verify_paths().openssl_cafile)
    if not bundle.is_file():
        pytest.skip(f"no system CA bundle at {bundle}")
    text = bundle.read_text()
    end = "-----END CERTIFICATE-----"
    begin = text.index("-----BEGIN CERTIFICATE-----")
    path = tmp_path / "one.pem"
    path.write_text(text[begin:text.index(end, begin) + len(end)] + "\n")
    return path


def test_aiohttp_contexts_load_no_ca_file_and_the_environment_is_put_back() -> None:
    out = _run(None)
    assert out["first"] is True and out["again"] is False
    assert out["verified"] == 0 and out["unverified"] == 0
    assert out["env"] is None
    # a context made after the import loads the default CA file as it always did
    expected = ssl.create_default_context().cert_store_stats()["x509"]
    assert out["later"] == expected


def test_a_ca_file_set_by_the_operator_is_kept(tmp_path: pathlib.Path) -> None:
    ca = _one_certificate(tmp_path)
    out = _run(str(ca))
    assert out["verified"] == 0
    assert out["env"] == str(ca)
    assert out["later"] == 1
