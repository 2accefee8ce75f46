"""The command-line clients import nothing from the server: ``cli/`` never reaches ``broker``.

Two walks. Statically, every ``import`` of every module under ``cli/`` (function-local ones
included) is read from its syntax tree. Dynamically, a fresh interpreter imports every ``cli``
module and then every module they name (so a lazy import such as the message-id encoder's
``protocol`` is loaded too, with whatever it pulls in), and reports ``sys.modules``: no
``broker`` module and no aiohttp (the clients need the standard library, ``protocol/`` and, for
``horae-client``, the official client).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLI_DIR = ROOT / "cli"
#: Top-level packages a client may import besides the standard library.
ALLOWED_PROJECT = frozenset({"cli", "protocol"})
PROJECT = frozenset({"broker", "storage", "jobs", "cli", "protocol"})
IMPORT_TIMEOUT_S = 60

IMPORT_ALL = """
import importlib, importlib.util, json, pkgutil, sys
import cli
names = sorted(m.name for m in pkgutil.walk_packages(cli.__path__, "cli.")
               if not m.name.endswith(".__main__"))
for name in names:
    importlib.import_module(name)
for name in json.loads(sys.argv[1]):
    try:   # "from package import name": name is a submodule, or an attribute of package
        found = importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        found = False
    if found:
        importlib.import_module(name)
print(json.dumps({"imported": names, "modules": sorted(sys.modules)}))
"""


def imported_modules(path: Path) -> set[str]:
    """Every absolute module name *path* imports, at any depth of its syntax tree; for
    ``from package import name`` also ``package.name`` (which may be a submodule)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _cli_modules() -> list[Path]:
    modules = sorted(CLI_DIR.glob("**/*.py"))
    assert len(modules) >= 8, modules   # cli/, cli/admin/ and its six modules at least
    return modules


def test_cli_modules_name_no_server_package() -> None:
    offenders = {}
    for path in _cli_modules():
        roots = {name.split(".")[0] for name in imported_modules(path)}
        bad = sorted((roots & PROJECT) - ALLOWED_PROJECT)
        if bad:
            offenders[str(path.relative_to(ROOT))] = bad
    assert offenders == {}


def test_importing_every_cli_module_loads_nothing_from_broker() -> None:
    named = sorted({name for path in _cli_modules() for name in imported_modules(path)
                    if name.split(".")[0] in ALLOWED_PROJECT})
    proc = subprocess.run([sys.executable, "-I", "-c", IMPORT_ALL, json.dumps(named)],
                          cwd=ROOT, capture_output=True, text=True, timeout=IMPORT_TIMEOUT_S,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert "cli.admin.main" in report["imported"]
    assert "protocol.pulsar_pb" in report["modules"]   # the lazy import was followed
    loaded = report["modules"]
    assert [m for m in loaded if m == "broker" or m.startswith("broker.")] == []
    assert [m for m in loaded if m.split(".")[0] in ("aiohttp", "storage", "jobs")] == []


def test_import_walker_sees_function_local_imports(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import json\ndef f():\n    from broker.admin import app\n")
    assert imported_modules(sample) == {"json", "broker.admin", "broker.admin.app"}
