"""cli/ talks to a broker over its public APIs only: no module of it imports ``broker``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.protocol.test_protocol_sans_io import imported_roots

ROOT = Path(__file__).resolve().parents[2]
CLI_DIR = ROOT / "cli"


def test_no_cli_module_imports_the_broker() -> None:
    modules = sorted(CLI_DIR.glob("**/*.py"))
    assert len(modules) >= 6
    offenders = {str(path.relative_to(ROOT)): sorted(imported_roots(path) & {"broker", "storage"})
                 for path in modules}
    assert {name: bad for name, bad in offenders.items() if bad} == {}


def test_loading_every_cli_module_loads_no_broker_module() -> None:
    code = ("import sys, cli.client.main, cli.client.commands, cli.client.perf, "
            "cli.client.connect\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('broker', 'storage'))\n"
            "print(bad)\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=True)
    assert run.stdout.strip() == "[]"
