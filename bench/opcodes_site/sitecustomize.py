"""Loaded by a ``horae serve`` process started with this directory on ``PYTHONPATH``: starts the
opcode counter of ``bench/opcode_probe.py`` when ``HORAE_OPCODES`` names its output file (the
probe is loaded from its file, so nothing is added to the process's import path)."""

import os
import sys

if os.environ.get("HORAE_OPCODES") and "serve" in sys.argv:
    import importlib.util

    _spec = importlib.util.spec_from_file_location(
        "horae_opcode_probe", os.path.join(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))), "opcode_probe.py"))
    assert _spec is not None and _spec.loader is not None
    _probe = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_probe)
    _probe.install(os.environ["HORAE_OPCODES"])
