"""A sample of the Go client's own suite (pulsar-client-go) passes against Horae.

Runs ``run_go_suite.sh`` with a ``-run`` filter naming a dozen representative tests of the
``pulsar`` package: produce/consume, batching, Shared and Key_Shared, delayed delivery, seek,
readers, schemas, TLS and token authentication. About 20 s once Go's build cache holds the
suite. The whole suite is run by hand (the README's
Compatibility section); this keeps CI honest about the client that is neither Python nor C++.

Skipped, with the reason, when ``go`` is missing, when the module cannot be downloaded from the
Go module proxy, or when no private network namespace can be made (the suite hard-codes
localhost:6650/6651/8080/8443, so it never runs on the host's network here). The first run on
a machine also compiles the suite and its dependencies (several minutes on two cores); later
runs reuse Go's build cache.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
SCRIPT = HERE / "run_go_suite.sh"
MODULE = "github.com/apache/pulsar-client-go"
VERSION = "v0.19.0"

SAMPLE = (
    "TestProducerConsumer",
    "TestBatchMessageReceive",
    "TestConsumerShared",
    "TestConsumerKeyShared",
    "TestDelayRelative",
    "TestDelayAbsolute",
    "TestConsumerSeek",
    "TestReader",
    "TestReaderOnSpecificMessage",
    "TestJsonSchema",
    "TestAvroSchema",
    "TestTLSConnection",
    "TestTLSAuth",
    "TestTokenAuth",
)

#: Generous bound for the whole script: a cold build of the suite is most of it.
RUN_TIMEOUT_S = 1500


def _go_module_dir(go: str, tmp: pathlib.Path) -> str | None:
    done = subprocess.run([go, "mod", "download", "-json", f"{MODULE}@{VERSION}"], cwd=tmp,
                          capture_output=True, text=True, timeout=300, check=False)
    try:
        info = json.loads(done.stdout)
    except json.JSONDecodeError:
        return None
    return info.get("Dir") if done.returncode == 0 else None


def _can_isolate() -> bool:
    unshare = shutil.which("unshare")
    if unshare is None or shutil.which("ip") is None:
        return False
    return subprocess.run([unshare, "-n", "true"], capture_output=True,
                          check=False).returncode == 0


@pytest.mark.slow
@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_go_client_suite_sample_passes(tmp_path: pathlib.Path) -> None:
    go = shutil.which("go")
    if go is None:
        pytest.skip("go is not installed")
    if not _can_isolate():
        pytest.skip("cannot make a private network namespace (unshare -n needs root and ip)")
    if _go_module_dir(go, tmp_path) is None:
        pytest.skip(f"{MODULE}@{VERSION} cannot be downloaded from the Go module proxy")

    out = tmp_path / "out"
    env = {**os.environ, "HORAE_PYTHON": sys.executable, "GO_CLIENT_VERSION": VERSION}
    done = subprocess.run(
        ["bash", str(SCRIPT), "-pkg", "pulsar", "-timeout", "2m", "-out", str(out),
         "-run", "^(" + "|".join(SAMPLE) + ")$"],
        env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    report = (out / "report.txt").read_text() if (out / "report.txt").exists() else ""
    assert (out / "results.json").exists(), done.stdout[-4000:] + done.stderr[-4000:]
    results = {r["name"]: r["status"] for r in json.loads((out / "results.json").read_text())}
    assert results == dict.fromkeys(SAMPLE, "passed"), report
    assert done.returncode == 0, report
