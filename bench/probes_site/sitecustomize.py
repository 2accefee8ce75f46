"""Loaded by a ``horae serve`` process started with this directory on ``PYTHONPATH``: starts each
probe of bench/ whose variable names its output file, ``HORAE_LOOP_TURNS`` (the loop-turn probe
of ``bench/loop_turns.py``) and ``HORAE_OPCODES`` (the opcode counter of
``bench/opcode_probe.py``). A probe is loaded from its file, so nothing is added to the
process's import path."""

import os
import sys

_PROBES = {"HORAE_LOOP_TURNS": "loop_turns.py", "HORAE_OPCODES": "opcode_probe.py"}

if "serve" in sys.argv:
    import importlib.util

    _bench = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for _variable, _file in _PROBES.items():
        _out = os.environ.get(_variable)
        if not _out:
            continue
        _spec = importlib.util.spec_from_file_location(
            "horae_probe_" + _file[:-3], os.path.join(_bench, _file))
        assert _spec is not None and _spec.loader is not None
        _probe = importlib.util.module_from_spec(_spec)
        _spec.loader.exec_module(_probe)
        _probe.install(_out)
