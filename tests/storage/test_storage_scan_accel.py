"""The recovery scan's in-order run in C against its pure-Python reference (storage/segments.py).

Both get the same records, numbered on or not, damaged, torn, cut short, followed by zeros,
in each record format; their results must be identical: the offset reached, the last entry id,
the data bytes, what was appended to the offsets and lengths, or the error raised. A whole
segment scan (scan_segment) with the C run gives the reference's index and events.
"""

from __future__ import annotations

import errno
import functools
import mmap
import os
from array import array
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from interpreters import run_fresh
from sampling import examples

from storage import segments
from storage.fileops import FileOps
from storage.segments import (
    _JOINED_CRC_BYTES,
    FORMAT_V2,
    FORMAT_V3,
    MAX_RECORD_BYTES,
    RECORD_HEADER,
    _scan_in_order,
    crc_identity,
    length_bias,
    record_crc,
)

accel = pytest.importorskip("storage._scan_accel",
                            reason="built without a C compiler: the reference runs alone")

LEDGER = 77
FORMATS = (1, FORMAT_V2, FORMAT_V3)


def _record(fmt: int, entry_id: int, data: bytes, ledger_id: int = LEDGER) -> bytes:
    stored = len(data) + length_bias(fmt)
    crc = record_crc(stored, entry_id, data, crc_identity(fmt, ledger_id))
    return RECORD_HEADER.pack(stored, crc, entry_id) + data


def _c_scan(buf: Any, size: int, off: int, data_end: int, last_id: int, bias: int,
            ident: int | None, offsets: array[int], lengths: array[int]) -> Any:
    from crc32c import crc32c

    return accel.scan_in_order(_scan_in_order, crc32c, MAX_RECORD_BYTES, _JOINED_CRC_BYTES,
                               buf, size, off, data_end, last_id, bias, ident, offsets,
                               lengths)


def _both(buf: Any, size: int, off: int, data_end: int, last_id: int, bias: int,
          ident: int | None) -> None:
    """Run both on the same arguments and compare everything they give or raise."""
    outcomes = []
    for scan in (_scan_in_order, _c_scan):
        offsets, lengths = array("q", [5]), array("i", [6])   # appended to, never replaced
        try:
            result: Any = scan(buf, size, off, data_end, last_id, bias, ident, offsets, lengths)
        except Exception as exc:   # compared: the same type from both
            result = type(exc)
        outcomes.append((result, offsets.tolist(), lengths.tolist()))
    assert outcomes[0] == outcomes[1]


@st.composite
def segments_bytes(draw: st.DrawFn) -> tuple[int, bytes, int, int]:
    """(format, bytes, first entry id, where the run starts): a run of records, then what can
    break it."""
    fmt = draw(st.sampled_from(FORMATS))
    first = draw(st.sampled_from([0, 1, 41, 2**32 - 2, 2**63 - 3, 2**64 - 3]))
    sizes = draw(st.lists(st.one_of(st.integers(0, 300), st.just(_JOINED_CRC_BYTES),
                                    st.just(_JOINED_CRC_BYTES + 1), st.integers(4097, 9000)),
                          max_size=12))
    out = bytearray(draw(st.binary(max_size=24)))   # whatever precedes the run
    start = len(out)
    entry_id = first
    for size in sizes:
        if entry_id >= 2**64:
            break
        if draw(st.integers(0, 9)) == 0:
            entry_id += draw(st.integers(1, 3))   # an id skipped
            if entry_id >= 2**64:
                break
        out += _record(fmt, entry_id, os.urandom(size))
        entry_id += 1
    for _ in range(draw(st.integers(0, 3))):   # a damaged byte anywhere
        if out:
            at = draw(st.integers(0, len(out) - 1))
            out[at] ^= draw(st.integers(1, 255))
    if draw(st.booleans()) and out:   # torn
        out = out[:draw(st.integers(0, len(out)))]
    out += bytes(draw(st.sampled_from([0, 7, 16, 40])))   # the pre-zeroed tail
    return fmt, bytes(out), first, start


@settings(max_examples=examples(full=3000, sample=400), deadline=None)
@given(segment=segments_bytes(), data=st.data())
def test_the_c_run_is_the_reference_run(segment: tuple[int, bytes, int, int],
                                        data: st.DataObject) -> None:
    fmt, buf, first, start = segment
    size = data.draw(st.sampled_from([len(buf), max(0, len(buf) - data.draw(st.integers(0, 40)))]))
    off = data.draw(st.one_of(st.just(start), st.integers(0, 30)))
    data_end = data.draw(st.sampled_from([size, len(buf) + 32, size - 17, 0, off + 1]))
    last_id = data.draw(st.one_of(st.just(first - 1), st.sampled_from([first, first - 2, -1])))
    ident = crc_identity(fmt, LEDGER)
    _both(buf, size, off, data_end, last_id, length_bias(fmt), ident)


def test_arguments_outside_c_integers_go_to_the_reference() -> None:
    buf = _record(FORMAT_V3, 0, b"x" * 20) + _record(FORMAT_V3, 1, b"y" * 5000)
    bias, ident = length_bias(FORMAT_V3), crc_identity(FORMAT_V3, LEDGER)
    _both(buf, len(buf), 0, len(buf), -1, bias, ident)                     # the usual case
    _both(buf, len(buf), 0, len(buf), 2**64 - 1, bias, ident)              # no id after it
    _both(buf, len(buf), 0, len(buf), 2**70, bias, ident)                  # beyond 64 bits
    _both(buf, len(buf), 0, len(buf), -5, bias, ident)
    _both(buf, len(buf), 0, len(buf), -1, bias, -1)                        # pack refuses it
    _both(buf, len(buf), 0, len(buf), -1, bias, 2**64)
    _both(buf, len(buf) + 100, 0, len(buf) + 100, -1, bias, ident)         # past the buffer
    _both(buf, len(buf), -3, len(buf), -1, bias, ident)
    _both(memoryview(buf), len(buf), 0, len(buf), -1, bias, ident)
    records = _record(1, 0, b"abc") + _record(1, 1, b"")
    _both(records, len(records), 0, len(records), -1, length_bias(1), None)
    with pytest.raises(TypeError):
        accel.scan_in_order(_scan_in_order)


def test_a_run_reaching_the_last_64_bit_id_stops_there() -> None:
    buf = _record(FORMAT_V3, 2**64 - 2, b"a") + _record(FORMAT_V3, 2**64 - 1, b"b")
    bias, ident = length_bias(FORMAT_V3), crc_identity(FORMAT_V3, LEDGER)
    offsets, lengths = array("q"), array("i")
    off, last_id, run_bytes = _c_scan(buf, len(buf), 0, len(buf), 2**64 - 3, bias, ident,
                                      offsets, lengths)
    assert (off, last_id, run_bytes) == (len(buf), 2**64 - 1, 2)
    assert offsets.tolist() == [0, 17] and lengths.tolist() == [1, 1]
    _both(buf, len(buf), 0, len(buf), 2**64 - 3, bias, ident)


def test_it_reads_a_segment_file_through_its_mmap(tmp_path: Path) -> None:
    records = b"".join(_record(FORMAT_V3, i, os.urandom(i % 700)) for i in range(2000))
    path = tmp_path / "f"
    path.write_bytes(records + bytes(64))
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        size = len(buf)
        _both(buf, size, 0, len(records), -1, length_bias(FORMAT_V3),
              crc_identity(FORMAT_V3, LEDGER))


def test_the_accelerator_is_what_the_scan_runs_when_built() -> None:
    assert segments.SCAN_ACCELERATED
    assert segments._scan_run.func is accel.scan_in_order   # type: ignore[attr-defined]


@pytest.mark.parametrize("damage", ["none", "middle", "torn"])
def test_a_whole_segment_scan_is_the_same_with_either(tmp_path: Path, damage: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from storage.segments import FILE_HEADER_SIZE, encode_file_header, scan_segment

    records = [_record(FORMAT_V3, i, os.urandom(50 + i % 300)) for i in range(3000)]
    body = bytearray(b"".join(records))
    if damage == "middle":
        body[len(body) // 2] ^= 0x5A
    elif damage == "torn":
        body = body[:len(body) - 77]
    image = encode_file_header(LEDGER, 1234) + bytes(body) + bytes(4096)
    assert len(encode_file_header(LEDGER, 1234)) == FILE_HEADER_SIZE
    results = []
    for run in (_scan_in_order, segments._scan_run):
        monkeypatch.setattr(segments, "_scan_run", run)
        path = tmp_path / f"{len(results)}.seg"
        path.write_bytes(image)
        result = scan_segment(FileOps(), path, LEDGER, truncate=False)
        results.append((result.offsets.tolist(), result.lengths.tolist(), result.size_bytes,
                        result.valid_end, result.events, result.zero_tail_bytes))
    assert results[0] == results[1]
    assert len(results[0][0]) >= 1


def test_without_the_extension_the_reference_scans(tmp_path: Path) -> None:
    # a fresh interpreter where the extension cannot be imported (an install without a compiler)
    code = (
        "import sys; sys.modules['storage._scan_accel'] = None\n"
        "from storage import segments\n"
        "assert not segments.SCAN_ACCELERATED and segments._scan_run is segments._scan_in_order\n"
        "from storage import read_fds\n"
        "assert read_fds._read_records is None\n"
        "print('reference')\n")
    assert run_fresh(code) == "reference"


@settings(max_examples=examples(full=3000, sample=500), deadline=None)
@given(head=st.binary(max_size=40), zeros=st.integers(0, 70_000), data=st.data())
def test_the_c_data_end_is_the_reference(head: bytes, zeros: int, data: st.DataObject) -> None:
    from storage.segments import _data_end

    buf = head + bytes(zeros)
    if data.draw(st.booleans()) and zeros:   # a lone non-zero byte somewhere in the zeros
        at = len(head) + data.draw(st.integers(0, zeros - 1))
        buf = buf[:at] + b"\x01" + buf[at + 1:]
    size = data.draw(st.sampled_from([len(buf), max(0, len(buf) - 9), len(buf) + 5]))
    start = data.draw(st.sampled_from([0, 1, 7, 8, 13, len(head), size, size + 3, -2]))
    outcomes = []
    for find in (_data_end, functools.partial(accel.data_end, _data_end)):
        try:
            outcomes.append(find(buf, start, size))
        except Exception as exc:
            outcomes.append(type(exc))
    assert outcomes[0] == outcomes[1]


def _data_end_by_rstrip(buf: Any, start: int, size: int) -> int:
    """The reference as it was: each chunk from the end stripped of zeros byte by byte."""
    end, probe = size, 4096
    while end > start:
        lo = max(start, end - probe)
        stripped = buf[lo:end].rstrip(b"\0")
        if stripped:
            return lo + len(stripped)
        end = lo
        probe = min(probe * 4, 256 * 1024)
    return start


@settings(max_examples=examples(full=2000, sample=300), deadline=None)
@given(head=st.binary(max_size=300), zeros=st.one_of(st.integers(0, 5000),
                                                    st.integers(0, 1_200_000)),
       data=st.data())
def test_the_reference_data_end_halves_to_what_stripping_found(head: bytes, zeros: int,
                                                               data: st.DataObject) -> None:
    from storage.segments import _data_end

    buf = head + bytes(zeros)
    if data.draw(st.booleans()) and zeros:   # a lone non-zero byte somewhere in the zeros
        at = len(head) + data.draw(st.integers(0, zeros - 1))
        buf = buf[:at] + bytes([data.draw(st.integers(1, 255))]) + buf[at + 1:]
    size = data.draw(st.sampled_from([len(buf), max(0, len(buf) - 9), len(buf) + 5]))
    start = data.draw(st.sampled_from([0, 1, 7, len(head), size, size + 3, -2]))
    assert _data_end(buf, start, size) == _data_end_by_rstrip(buf, start, size)


def test_the_reference_data_end_finds_a_last_byte_anywhere() -> None:
    from storage.segments import _data_end

    zeros = bytearray(21_000)   # chunks of 4096 and 16384 from the end, every halving's edge
    for at in range(len(zeros)):
        zeros[at] = 1
        assert _data_end(zeros, 0, len(zeros)) == at + 1
        assert _data_end(zeros, at + 1, len(zeros)) == at + 1
        zeros[at] = 0


def test_the_data_end_of_a_long_zero_tail_is_read_in_place(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"\x00" * 24 + b"record" + bytes(4 * 1024 * 1024))
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        assert accel.data_end(segments._data_end, buf, 0, len(buf)) == 30
        assert accel.data_end(segments._data_end, buf, 31, len(buf)) == 31
        assert segments._find_data_end(buf, 0, len(buf)) == 30


# ------------------------------------------------------------------ scattered reads in place

def _reference_reader() -> Any:
    """A ReadFds whose reference (read_records_py) reads through os, as the C twin does."""
    from storage.read_fds import ReadFds

    return ReadFds(None, FileOps(), None)   # type: ignore[arg-type]  # no loop or pool used


def _c_read(reference: Any) -> Any:
    from crc32c import crc32c

    return functools.partial(accel.read_records, reference, crc32c)


def _both_read(fd: int, records: Any, bias: int, ident: int | None, budget: int,
               found_any: bool, max_read: int) -> Any:
    """The C read and the reference on the same descriptor; what they give or raise must be
    the same: each record's data or None, the budget left, or the error's type and errno."""
    reference = _reference_reader().read_records_py
    outcomes = []
    for read in (reference, _c_read(reference)):
        try:
            result: Any = read(fd, records, bias, ident, budget, found_any, max_read)
        except Exception as exc:   # compared: the same type (and errno) from both
            result = (type(exc), getattr(exc, "errno", None))
        outcomes.append(result)
    assert outcomes[0] == outcomes[1]
    return outcomes[0]


@st.composite
def scattered(draw: st.DrawFn) -> tuple[int, bytes, list[tuple[int, int, int]]]:
    """(format, a segment's bytes, records of it to read): in order, some damaged on disk,
    some claimed at a wrong id, length or offset, some past the end of the file."""
    fmt = draw(st.sampled_from(FORMATS))
    sizes = draw(st.lists(st.one_of(st.integers(0, 300), st.integers(4000, 9000)),
                          min_size=1, max_size=20))
    out = bytearray(draw(st.binary(max_size=24)))
    index = []
    for entry_id, size in enumerate(sizes):
        index.append((entry_id, len(out), size))
        out += _record(fmt, entry_id, os.urandom(size))
    for _ in range(draw(st.integers(0, 3))):   # a damaged byte anywhere
        at = draw(st.integers(0, len(out) - 1))
        out[at] ^= draw(st.integers(1, 255))
    records = sorted(draw(st.lists(st.sampled_from(index), max_size=12, unique=True)))
    records = [draw(st.sampled_from([
        record,
        (record[0] + 1, record[1], record[2]),           # another id than the record's
        (record[0], record[1], record[2] + 1),           # a wrong length
        (record[0], record[1] + 1, record[2]),           # a wrong offset
        (record[0], len(out) + 5, record[2]),            # past the end: a short read
    ])) if draw(st.integers(0, 5)) == 0 else record for record in records]
    return fmt, bytes(out), records


@settings(max_examples=examples(full=1500, sample=200), deadline=None)
@given(segment=scattered(), budget=st.sampled_from([10**9, 0, -1, 1, 300, 5000]),
       found_any=st.booleans(), max_read=st.sampled_from([2 * 1024 * 1024, 16, 320, 5000]))
def test_the_c_scattered_read_is_the_reference(
        tmp_path_factory: pytest.TempPathFactory, segment: tuple[int, bytes, list[Any]],
        budget: int, found_any: bool, max_read: int) -> None:
    fmt, image, records = segment
    path = tmp_path_factory.mktemp("scattered") / "s"
    path.write_bytes(image)
    fd = os.open(path, os.O_RDONLY)
    try:
        _both_read(fd, records, length_bias(fmt), crc_identity(fmt, LEDGER), budget, found_any,
                   max_read)
    finally:
        os.close(fd)


def test_the_scattered_read_answers_each_record_and_stops_where_it_must(tmp_path: Path) -> None:
    datas = [os.urandom(n) for n in (10, 0, 700, 5000, 33)]
    image, index = bytearray(b"head"), []
    for entry_id, data in enumerate(datas):
        index.append((entry_id, len(image), len(data)))
        image += _record(FORMAT_V3, entry_id, data)
    damaged = index[2][1] + RECORD_HEADER.size + 5
    image[damaged] ^= 0x40
    path = tmp_path / "s"
    path.write_bytes(image)
    bias, ident = length_bias(FORMAT_V3), crc_identity(FORMAT_V3, LEDGER)
    fd = os.open(path, os.O_RDONLY)
    try:
        got, left = _both_read(fd, index, bias, ident, 10**6, False, 1 << 20)
        assert got == [datas[0], datas[1], None, datas[3], datas[4]]   # the damaged one: None
        assert left == 10**6 - (10 + 0 + 5000 + 33)
        # the budget: spent once something is found (here or by the caller), then it stops
        assert _both_read(fd, index, bias, ident, 5, False, 1 << 20) == ([datas[0]], -5)
        assert _both_read(fd, index, bias, ident, 0, True, 1 << 20) == ([], 0)
        assert _both_read(fd, index, bias, ident, 0, False, 1 << 20) == ([datas[0]], -10)
        # one longer than the largest read, or past the end of the file: it stops before it
        assert _both_read(fd, index, bias, ident, 10**6, False, 1000)[0] == [datas[0], datas[1], None]
        beyond = [index[0], (1, len(image) + 1, 10), index[3]]
        assert _both_read(fd, beyond, bias, ident, 10**6, False, 1 << 20)[0] == [datas[0]]
    finally:
        os.close(fd)
    # a failing first read raises (the caller drops the descriptor); a later one ends the run
    assert _both_read(fd, index, bias, ident, 10**6, False, 1 << 20) == (OSError, errno.EBADF)
    assert _both_read(fd, [], bias, ident, 10**6, False, 1 << 20) == ([], 10**6)


def test_scattered_read_arguments_outside_c_integers_go_to_the_reference(tmp_path: Path) -> None:
    path = tmp_path / "s"
    path.write_bytes(_record(FORMAT_V3, 2**64 - 1, b"last") + _record(FORMAT_V3, 0, b"x"))
    bias, ident = length_bias(FORMAT_V3), crc_identity(FORMAT_V3, LEDGER)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert _both_read(fd, [(2**64 - 1, 0, 4)], bias, ident, 99, False, 1 << 20) \
            == ([b"last"], 95)
        _both_read(fd, [(2**64, 0, 4)], bias, ident, 99, False, 1 << 20)   # beyond 64 bits
        _both_read(fd, [(0, 20, 1)], bias, ident, 2**70, False, 1 << 20)
        _both_read(fd, ((0, 20, 1),), bias, ident, 99, False, 1 << 20)     # not a list
        _both_read(fd, [[0, 20, 1]], bias, ident, 99, False, 1 << 20)      # not tuples
        _both_read(fd, [(0, -1, 1)], bias, ident, 99, False, 1 << 20)
        _both_read(fd, [(0, 20, 1)], bias, 2**64, 99, False, 1 << 20)
    finally:
        os.close(fd)
    with pytest.raises(TypeError):
        accel.read_records(len)


def test_the_loop_s_scattered_reads_run_in_c_where_the_file_ops_are_os_s() -> None:
    from storage.read_fds import ReadFds

    class Watching(FileOps):
        def pread_nowait(self, fd: int, buf: memoryview, offset: int) -> bool:
            return super().pread_nowait(fd, buf, offset)

    plain = ReadFds(None, FileOps(), None)   # type: ignore[arg-type]
    watched = ReadFds(None, Watching(), None)   # type: ignore[arg-type]
    assert plain._read_run.func is accel.read_records   # type: ignore[attr-defined]
    assert watched._read_run == watched.read_records_py   # a test's reads: each one seen
