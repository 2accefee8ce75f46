"""The bulk store builder of bench/delayed_restart.py writes what the message-by-message path
writes: recovered after the kill, both stores hand out the same messages at the same clock
times, with the same counts (acknowledged and cancelled ones never), for each delay shape."""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "delayed_restart.py"
BASE = 1_900_000_000_000
#: not a multiple of the bucket size: the last bucket stays mutable and partly filled
SHAPE = ["--pending", "3130", "--per-bucket", "100", "--ack-every", "10", "--cancel-every",
         "10"]


def _run(*args: str) -> str:
    return subprocess.run([sys.executable, str(SCRIPT), *args], check=True,
                          capture_output=True, text=True, timeout=240).stdout


def _build_and_recover(root: Path, delays: str, slow: bool) -> tuple[dict[str, object],
                                                                      list[list[int]]]:
    shape = [*SHAPE, "--delays", delays]
    _run(*shape, *(["--slow-build"] if slow else []), "--child", f"{root},0,{BASE}")
    log = root.parent / f"{root.name}.log.json"
    out = _run(*shape, "--log", str(log), "--child", f"{root},16,{BASE}")
    return json.loads(out.strip().splitlines()[-1]), json.loads(log.read_text())


@pytest.mark.parametrize("delays", ["hour", "fixed", "year"])
def test_bulk_store_recovers_as_the_slow_one(tmp_path: Path, delays: str) -> None:
    slow, slow_log = _build_and_recover(tmp_path / "slow", delays, slow=True)
    bulk, bulk_log = _build_and_recover(tmp_path / "bulk", delays, slow=False)
    # 31 buckets of 100 sealed (the 31st ledger's entries are the mutable bucket, in memory
    # only: re-read by a dispatcher after a restart, not by this recovery)
    sealed = 3100 - 310 - 310
    assert slow["drained"] and bulk["drained"]
    # the same messages at the same clock times; among those handed out at one time (the
    # catch-up of what fell due while down) the order follows which buckets came in first
    assert sorted(map(tuple, slow_log)) == sorted(map(tuple, bulk_log))
    for log in (slow_log, bulk_log):
        assert [t for _, t in log] == sorted(t for _, t in log)
    assert len(bulk_log) == sealed == bulk["handed_out"]
    for key in ("early", "lost", "duplicate", "acked_handed_out", "cancelled_handed_out"):
        assert slow[key] == bulk[key] == 0, key
    assert slow["catch_up_n"] == bulk["catch_up_n"] > 0
    handed = {i for i, _ in bulk_log}
    assert not any(i % 10 in (3, 8) for i in handed)
    assert max(handed) < 3100


def test_buckets_of_several_ledgers_recover_everything(tmp_path: Path) -> None:
    """``--per-ledger`` apart from ``--per-bucket`` (a default broker's layout is 50,000 of
    each; here 3 ledgers of 100 per bucket of 300): the bulk store recovers every sealed
    message, none early, lost, duplicated, acknowledged or cancelled."""
    root = tmp_path / "bulk"
    shape = ["--pending", "3130", "--per-bucket", "300", "--per-ledger", "100",
             "--ack-every", "10", "--cancel-every", "10"]
    built = _run(*shape, "--child", f"{root},0,{BASE}")
    assert "in 10 buckets" in built, built
    out = json.loads(_run(*shape, "--child", f"{root},16,{BASE}").strip().splitlines()[-1])
    assert out["drained"]
    # 10 buckets of 3 ledgers sealed; the last 130 entries are the mutable bucket
    assert out["handed_out"] == 3000 - 300 - 300
    for key in ("early", "lost", "duplicate", "acked_handed_out", "cancelled_handed_out"):
        assert out[key] == 0, key


def test_the_default_layout_is_the_broker_configuration_s() -> None:
    """``--layout default`` takes entries per ledger and indexes per bucket from the broker's
    configuration defaults, ``--layout stress`` is 500 of each."""
    spec = importlib.util.spec_from_file_location("delayed_restart", SCRIPT)
    assert spec is not None and spec.loader is not None
    delayed_restart = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(delayed_restart)
    from broker.config import BrokerConfig

    config = BrokerConfig()
    for argv, expected in (
        (["--layout", "default"], (config.delayed_delivery_min_index_count_per_bucket,
                                   config.managed_ledger_max_entries_per_ledger)),
        ([], (500, 500)),
        (["--per-bucket", "800"], (800, 800)),
        (["--layout", "default", "--per-ledger", "7"],
         (config.delayed_delivery_min_index_count_per_bucket, 7)),
    ):
        args = argparse.Namespace(layout="stress", per_bucket=0, per_ledger=0)
        for flag, value in zip(argv[::2], argv[1::2], strict=True):
            setattr(args, flag[2:].replace("-", "_"), value if flag == "--layout" else int(value))
        delayed_restart._apply_layout(args)
        assert (args.per_bucket, args.per_ledger) == expected, argv


def test_every_drain_hands_out_the_same_messages(tmp_path: Path) -> None:
    """``--drain yield`` / ``serve-first`` and a dispatcher's ``--batch`` change when the
    drain asks, not what it gets: copies of one store hand out the same messages at the same
    clock times as the greedy drain, none early, lost, duplicated or acknowledged; each run
    reports the GC seconds and the CPU per thread, and ``--profile`` writes a cProfile."""
    import pstats
    import shutil

    root = tmp_path / "built"
    _run(*SHAPE, "--delays", "hour", "--child", f"{root},0,{BASE}")
    logs = {}
    for name, extra in (("greedy", []), ("yield", ["--drain", "yield", "--batch", "7"]),
                        ("serve-first", ["--drain", "serve-first", "--profile",
                                         str(tmp_path / "loop.pstats")])):
        run = tmp_path / name
        shutil.copytree(root, run)
        log = tmp_path / f"{name}.log.json"
        out = json.loads(_run(*SHAPE, "--delays", "hour", "--log", str(log), *extra,
                              "--child", f"{run},16,{BASE}").strip().splitlines()[-1])
        assert out["drained"], name
        for key in ("early", "lost", "duplicate", "acked_handed_out", "cancelled_handed_out"):
            assert out[key] == 0, (name, key)
        split = out["split"]
        for at in ("at_serving", "at_end"):
            assert split[at]["gc_s"] >= 0 and len(split[at]["gc_runs"]) == 3, (name, at)
            assert "MainThread" in split[at]["threads_cpu_s"], (name, at)
        logs[name] = sorted(map(tuple, json.loads(log.read_text())))
    assert logs["greedy"] == logs["yield"] == logs["serve-first"]
    assert len(logs["greedy"]) == 3100 - 310 - 310
    stats = pstats.Stats(str(tmp_path / "loop.pstats"))
    assert any(name == "get_scheduled" for _, _, name in stats.stats)  # type: ignore[attr-defined]


@pytest.mark.parametrize("slow", [False, True])
def test_stored_entries_are_delayed_messages(tmp_path: Path, slow: bool) -> None:
    """Each entry either builder stores is a message as a client publishes it: its metadata
    names the bench's producer, its number as the sequence id and its deliver time, which a
    restarted broker reads again for the messages a kill -9 left unindexed."""
    import asyncio

    from protocol import pulsar_pb as pb
    from protocol.metadata import split_entry
    from storage import SegmentStore
    from storage.config import StorageConfig
    from storage.positions import Position

    spec = importlib.util.spec_from_file_location("delayed_restart", SCRIPT)
    assert spec is not None and spec.loader is not None
    delayed_restart = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(delayed_restart)
    root = tmp_path / "store"
    _run(*SHAPE, "--delays", "year", *(["--slow-build"] if slow else []),
         "--child", f"{root},0,{BASE}")
    layout = json.loads((root / "bench.json").read_text())
    assert layout["entries"] == delayed_restart.ENTRIES

    async def read_all() -> list[tuple[int, bytes]]:
        store = await SegmentStore.open(root, StorageConfig(fsync=False))
        try:
            ledger = await store.open_ledger(delayed_restart.TOPIC)
            out = []
            for info in ledger.ledgers:
                got = await ledger.read_entries(Position(info.ledger_id, 0), info.entries)
                out += [(layout["starts"][str(info.ledger_id)] + e.position.entry_id, e.data)
                        for e in got]
            return out
        finally:
            await store.close()

    stored = asyncio.run(read_all())
    assert [i for i, _ in stored] == list(range(3130))
    for i, data in stored:
        md = pb.MessageMetadata.FromString(split_entry(data)[0])
        assert (md.producer_name, md.sequence_id) == (delayed_restart.PRODUCER, i)
        assert md.deliver_at_time == delayed_restart.deliver_at(i, BASE, "year", 3130)
        assert bytes(split_entry(data)[1]) == b"d"
