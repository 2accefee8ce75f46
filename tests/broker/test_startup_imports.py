"""What a started broker has imported: libraries of features it is not configured for stay out.

cryptography and PyJWT (TLS client certificates, tokens), bcrypt and passlib (basic
authentication) and cramjam (WebSocket payload compression) are imported on first use; each
maps megabytes of code and tables that a broker without those features would carry for its
whole life. The broker runs in a fresh interpreter (a subprocess), so modules other tests
imported do not count.
"""

from __future__ import annotations

import base64
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

#: Top-level modules a broker with the default configuration must not import while starting
#: and answering a health check.
LAZY_MODULES = frozenset({"cryptography", "jwt", "passlib", "bcrypt", "cramjam"})

_SCRIPT = r"""
import json, sys, urllib.request
from broker.embed import start_broker

overrides = json.loads(sys.argv[2])
token = overrides.pop("_token", None)
with start_broker(data_dir=sys.argv[1], config_overrides=overrides) as broker:
    request = urllib.request.Request(broker.web_url + "/admin/v2/brokers/health")
    if token:
        request.add_header("Authorization", "Bearer " + token)
    try:
        status = urllib.request.urlopen(request, timeout=30).status
    except urllib.error.HTTPError as exc:
        status = exc.code
    print(json.dumps({"status": status,
                      "modules": sorted({name.split(".")[0] for name in sys.modules})}))
"""


def _started_modules(tmp_path: pathlib.Path, overrides: dict[str, object]) -> tuple[int, set[str]]:
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path / "data"),
                           json.dumps(overrides)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    return answer["status"], set(answer["modules"])


def test_default_broker_leaves_feature_libraries_unimported(tmp_path: pathlib.Path) -> None:
    status, modules = _started_modules(tmp_path, {})
    assert status == 200
    assert "aiohttp" in modules and "broker" in modules   # the listing is of the broker's process
    assert not modules & LAZY_MODULES, sorted(modules & LAZY_MODULES)


def test_token_authentication_imports_what_it_uses(tmp_path: pathlib.Path) -> None:
    secret = b"s" * 32
    import jwt

    token = jwt.encode({"sub": "admin"}, secret, algorithm="HS256")
    status, modules = _started_modules(tmp_path, {
        "authenticationEnabled": True,
        "authorizationEnabled": True,
        "superUserRoles": "admin",
        "authenticationProviders":
            "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
        "tokenSecretKey": "data:;base64," + base64.b64encode(secret).decode(),
        "_token": token,
    })
    assert status == 200   # the token was checked by the lazily imported provider
    assert {"jwt", "cryptography"} <= modules
    assert not modules & {"passlib", "cramjam"}   # (cryptography itself loads bcrypt)
