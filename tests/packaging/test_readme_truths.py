"""The README's operational facts match the code: the data directory layout of the Backup
section is storage's, and the Security quick start runs the checkout's commands."""

from __future__ import annotations

import pathlib
import re

from broker.server import STORE_DIR_NAME
from storage import store

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _section(title: str) -> str:
    """From the heading line *title* to the next heading of the same or a higher level."""
    start = README.index("\n" + title + "\n")
    level = title.split(" ")[0]
    ends = [README.find("\n" + "#" * n + " ", start + len(title) + 2)
            for n in range(2, len(level) + 1)]  # "# " lines are also shell comments
    found = [e for e in ends if e != -1]
    return README[start:min(found) if found else None]


def test_backup_section_names_the_store_directory_and_everything_in_it() -> None:
    backup = _section("### Backup and restore")
    assert f"dataDir/{STORE_DIR_NAME}/" in backup
    layout = store.__doc__ or ""
    names = re.findall(r"^  ([A-Za-z_.]+/?)", layout.split("On-disk layout under root:")[1],
                       re.MULTILINE)
    assert {"LOCK", "LEDGER_ID", "metadata.db", "ledgers/", "snapshots/", "trash/"} <= set(names)
    for name in names:
        assert f"`{name}`" in backup, name


def test_security_quick_start_uses_the_venv_commands_and_says_to_stop_the_first_broker() -> None:
    security = _section("## Security")
    quick = security[:security.index("What is enforced")]
    bare = [line for line in quick.splitlines()
            if re.match(r"\s*(horae|horae-admin)\s", line)]
    assert bare == []
    assert ".venv/bin/horae serve" in quick
    assert "6650/8080" in quick                    # why the first broker must stop
    assert "mkdir -p secure-demo && cd secure-demo" in quick   # its files stay out of the checkout
    assert "pulsar.Timeout" in security
