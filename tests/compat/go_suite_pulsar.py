"""Apache Pulsar 4.0 standalone configured as the Go client's CI configures it, for run_go_suite.sh.

Theory of operation
-------------------
``run_go_suite.sh -broker pulsar`` runs the Go client's suite against Pulsar itself instead of
Horae, to know which of its tests pass on Pulsar (the oracle) before judging Horae by them. The
suite's CI runs Pulsar in a container with ``integration-tests/conf/standalone.conf``; here that
file is read as is and written back with the container's paths (``/pulsar/certs``,
``/pulsar/tokens``) pointing into the module's ``integration-tests`` directory, plus the keys the
embedded bookie of :mod:`bench.pulsar_peer` needs (loopback, no bookie HTTP server, DbLedgerStorage,
one copy). The basic-auth file comes as ``-Dpulsar.auth.basic.conf``, as in the CI's image. The
metadata store is RocksDB (4.0's standalone default) where the CI sets
``PULSAR_STANDALONE_USE_ZOOKEEPER=1``: nothing the suite tests depends on it.

``start`` launches the JVM detached (it outlives this process), waits until the broker answers a
lookup with the suite's admin token, and prints the JVM's pid for the script to stop it.

Usage: ``python tests/compat/go_suite_pulsar.py start IT_DIR DIR`` (IT_DIR: the module's
integration-tests directory; DIR: where the data, the written config and ``pulsar.log`` go).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time
import urllib.error
import urllib.request

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.pulsar_peer import HEAP, JVM_OPTS, LOG4J2, runtime_jars  # noqa: E402

READY_TIMEOUT_S = 300.0
BOOKIE_PORT = 3181
#: Keys the standalone's embedded bookie and single-node metadata need (as bench.pulsar_peer).
EXTRA = {
    "metadataStoreUrl": "",
    "allowLoopback": "true",
    "httpServerEnabled": "false",
    "functionsWorkerEnabled": "false",
    "ledgerStorageClass": "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
    "diskUsageThreshold": "0.99",
    "diskUsageWarnThreshold": "0.99",
    "journalSyncData": "false",
}


def write_config(it_dir: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    """The suite's standalone.conf with its container paths replaced and :data:`EXTRA` set."""
    text = (it_dir / "conf" / "standalone.conf").read_text()
    text = text.replace("/pulsar/certs/", f"{it_dir / 'certs'}/")
    text = text.replace("/pulsar/tokens/", f"{it_dir / 'tokens'}/")
    lines = [line for line in text.splitlines()
             if line.split("=", 1)[0].strip() not in EXTRA]
    lines += [f"{k}={v}" for k, v in EXTRA.items()]
    conf = out / "standalone.conf"
    conf.write_text("\n".join(lines) + "\n")
    return conf


def ready(token: str) -> bool:
    def get(path: str) -> tuple[int, bytes]:
        req = urllib.request.Request(f"http://localhost:8080{path}",
                                     headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:  # loopback only
                return int(resp.status), resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, b""
        except OSError:
            return 0, b""

    status, body = get("/admin/v2/namespaces/public")
    if status != 200 or "public/default" not in json.loads(body or b"[]"):
        return False
    status, body = get("/lookup/v2/topic/persistent/public/default/ready-probe")
    return status == 200 and b"brokerUrl" in body


def start(it_dir: pathlib.Path, out: pathlib.Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    conf = write_config(it_dir, out)
    (out / "log4j2.xml").write_text(LOG4J2)
    lib = runtime_jars()
    java = os.environ.get("PULSAR_JAVA", "java")
    args = [java, *HEAP, *JVM_OPTS, f"-Dlog4j.configurationFile={out / 'log4j2.xml'}",
            f"-Djava.io.tmpdir={out}", f"-Dpulsar.auth.basic.conf={it_dir / 'conf' / '.htpasswd'}",
            "-cp", f"{lib}/*", "org.apache.pulsar.PulsarStandaloneStarter", "--config", str(conf),
            "--no-functions-worker", "--no-stream-storage",
            "--metadata-dir", str(out / "metadata"), "--bookkeeper-dir", str(out / "bookie"),
            "--zookeeper-dir", str(out / "zookeeper"), "--bookkeeper-port", str(BOOKIE_PORT)]
    with (out / "pulsar.log").open("wb") as log:
        proc = subprocess.Popen(args, cwd=out, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    token = (it_dir / "tokens" / "admin-token").read_text().strip()
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.stderr.write((out / "pulsar.log").read_text(errors="replace")[-4000:])
            return 1
        if ready(token):
            print(proc.pid)
            return 0
        time.sleep(0.5)  # a starting JVM: nothing to wait on but its answers
    proc.kill()
    sys.stderr.write(f"pulsar not ready within {READY_TIMEOUT_S} s\n"
                     + (out / "pulsar.log").read_text(errors="replace")[-4000:])
    return 1


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] != "start":
        sys.stderr.write(__doc__ or "")
        return 2
    return start(pathlib.Path(argv[1]).resolve(), pathlib.Path(argv[2]).resolve())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
