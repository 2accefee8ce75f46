/* The segment records' hot loops in C: the recovery scan's in-order run and the loop's
 * scattered reads from the page cache.
 *
 * Theory of operation
 * -------------------
 * Optional: built from pyproject.toml as an optional extension; storage/segments.py loads it
 * when present, and storage.segments._scan_in_order is the reference. It computes exactly what
 * the reference does, on the same bytes (tests/storage/test_storage_scan_accel.py compares
 * them over random, damaged and torn segments):
 *
 * scan_in_order(reference, crc32c, max_record_bytes, joined_crc_bytes,
 *               buf, size, off, data_end, last_id, bias, ident, offsets, lengths)
 *     -> (offset after the run, its last entry id, its data bytes)
 *     storage.segments._scan_in_order(buf, size, off, data_end, last_id, bias, ident,
 *     offsets, lengths): from off, while off < data_end and a whole record header lies within
 *     size, the record numbered last_id + 1 whose length (stored - bias) is in
 *     [0, max_record_bytes], which ends within size and whose CRC32C matches is appended
 *     (its offset to offsets, its data length to lengths) and the scan moves past it. The CRC
 *     covers the stored length, the entry id, the ledger id (ident, format 3; None for formats
 *     1 and 2) and the data, computed by the crc32c function given (the checksum library the
 *     project uses): over one joined copy for a record of at most joined_crc_bytes, over the
 *     prefix then the data in place for a larger one, as the reference does.
 *     Arguments outside what C integers hold here (an id beyond 64 bits, a size beyond the
 *     buffer, arrays of another item size) are handed to reference, which answers or raises.
 *
 * data_end(reference, buf, start, size) -> int
 *     storage.segments._data_end: the offset after the last non-zero byte in [start, size).
 *
 * read_records(reference, crc32c, fd, records, bias, ident, budget, found_any, max_read_bytes)
 *     -> (datas, budget left)
 *     storage.read_fds.read_records_py(fd, records, bias, ident, budget, found_any,
 *     max_read_bytes) with os's preadv2 and RWF_NOWAIT: the records (entry_id, offset, length)
 *     of one segment, each read from the page cache on its own without waiting for the disk
 *     (its header onto the stack, its data straight into the bytes object returned: no kept
 *     buffer, no copy) and checked as storage.segments.parse_records checks it: its data, or
 *     None for a record that fails its checks. It stops, in order, before a record once
 *     budget <= 0 and something was found (found_any, or an earlier record of this call),
 *     before one longer than max_read_bytes with its header, and at one the page cache does
 *     not hold whole (EAGAIN or a short read). A read that fails otherwise raises OSError when
 *     it is the first record's (the caller turns in-place reads off or drops the descriptor)
 *     and ends the run when it is a later one's. The GIL is kept: a read that never waits for
 *     the disk is shorter than a hand-over of the interpreter. Arguments outside what C
 *     integers hold here (or records not a list of 3-tuples) go to reference.
 *
 * The records are little-endian: u32 stored length, u32 crc, u64 entry id. The offsets and
 * lengths found are appended in one go at the end (array.frombytes), not one call each.
 * It reads only the buffer it is given, within size; no state.
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

#define HEADER 16

static inline uint32_t
u32le(const uint8_t *b)
{
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16)
           | ((uint32_t)b[3] << 24);
}

static inline uint64_t
u64le(const uint8_t *b)
{
    return (uint64_t)u32le(b) | ((uint64_t)u32le(b + 4) << 32);
}

static inline void
put_u32le(uint8_t *b, uint32_t v)
{
    b[0] = (uint8_t)v;
    b[1] = (uint8_t)(v >> 8);
    b[2] = (uint8_t)(v >> 16);
    b[3] = (uint8_t)(v >> 24);
}

static inline void
put_u64le(uint8_t *b, uint64_t v)
{
    put_u32le(b, (uint32_t)v);
    put_u32le(b + 4, (uint32_t)(v >> 32));
}

/* A growable array of fixed-size items, appended to its Python array at the end. */
typedef struct {
    char *data;
    Py_ssize_t used;
    Py_ssize_t room;
} Grow;

static int
grow_put(Grow *g, const void *item, Py_ssize_t size)
{
    if (g->used + size > g->room) {
        Py_ssize_t room = g->room ? g->room * 2 : 4096;
        while (room < g->used + size)
            room *= 2;
        char *data = PyMem_Realloc(g->data, (size_t)room);
        if (data == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        g->data = data;
        g->room = room;
    }
    memcpy(g->data + g->used, item, (size_t)size);
    g->used += size;
    return 0;
}

/* array.frombytes(g's bytes); 0 on success. */
static int
grow_flush(PyObject *array, Grow *g)
{
    if (g->used == 0)
        return 0;
    PyObject *bytes = PyBytes_FromStringAndSize(g->data, g->used);
    if (bytes == NULL)
        return -1;
    PyObject *done = PyObject_CallMethod(array, "frombytes", "O", bytes);
    Py_DECREF(bytes);
    if (done == NULL)
        return -1;
    Py_DECREF(done);
    return 0;
}

static int
item_size_is(PyObject *array, long expected)
{
    PyObject *size = PyObject_GetAttrString(array, "itemsize");
    if (size == NULL) {
        PyErr_Clear();
        return 0;
    }
    long value = PyLong_AsLong(size);
    Py_DECREF(size);
    if (value == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return value == expected;
}

/* An int argument within [lo, hi] as a long long; 0 when it is not one (no error set). */
static int
ll_arg(PyObject *obj, long long lo, long long hi, long long *out)
{
    if (!PyLong_Check(obj))
        return 0;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    if (v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}

/* An int argument within [0, 2**64) as an unsigned 64-bit value; 0 when it is not one. */
static int
u64_arg(PyObject *obj, uint64_t *out)
{
    if (!PyLong_Check(obj))
        return 0;
    unsigned long long v = PyLong_AsUnsignedLongLong(obj);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    *out = (uint64_t)v;
    return 1;
}

/* A crc32c call's result (a new reference, or NULL with an error) as a 32-bit value: 0 with
 * *value set, -1 with an error. */
static int
crc_result(PyObject *result, uint32_t *value)
{
    if (result == NULL)
        return -1;
    unsigned long crc = PyLong_AsUnsignedLong(result);
    Py_DECREF(result);
    if (crc == (unsigned long)-1 && PyErr_Occurred())
        return -1;
    *value = (uint32_t)crc;
    return 0;
}

/* The CRC32C of prefix then data (any buffer object) through crc32c, as parse_records computes
 * it (crc32c(data, crc32c(prefix))): 0 with *value set, -1 with an error. */
static int
prefixed_crc(PyObject *crc32c, const uint8_t *prefix, Py_ssize_t prefix_len, PyObject *data,
             uint32_t *value)
{
    PyObject *head = PyBytes_FromStringAndSize((const char *)prefix, prefix_len);
    if (head == NULL)
        return -1;
    PyObject *start = PyObject_CallOneArg(crc32c, head);
    Py_DECREF(head);
    if (start == NULL)
        return -1;
    PyObject *args[2] = {data, start};
    PyObject *result = PyObject_Vectorcall(crc32c, args, 2, NULL);
    Py_DECREF(start);
    return crc_result(result, value);
}

/* The record's CRC32C through crc32c: 0 with *value set, -1 with an error. */
static int
record_crc(PyObject *crc32c, const uint8_t *prefix, Py_ssize_t prefix_len, const uint8_t *data,
           Py_ssize_t length, Py_ssize_t joined_limit, uint32_t *value)
{
    if (length <= joined_limit) {
        PyObject *joined = PyBytes_FromStringAndSize(NULL, prefix_len + length);
        if (joined == NULL)
            return -1;
        char *to = PyBytes_AS_STRING(joined);
        memcpy(to, prefix, (size_t)prefix_len);
        memcpy(to + prefix_len, data, (size_t)length);
        PyObject *result = PyObject_CallOneArg(crc32c, joined);
        Py_DECREF(joined);
        return crc_result(result, value);
    }
    PyObject *view = PyMemoryView_FromMemory((char *)data, length, PyBUF_READ);
    if (view == NULL)
        return -1;
    int done = prefixed_crc(crc32c, prefix, prefix_len, view, value);
    Py_DECREF(view);
    return done;
}

static PyObject *
scan_in_order(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 13) {
        PyErr_SetString(PyExc_TypeError, "scan_in_order takes 13 arguments");
        return NULL;
    }
    PyObject *reference = args[0];
    PyObject *crc32c = args[1];
    PyObject *const *ref_args = args + 4;   /* the reference's own nine arguments */
    PyObject *offsets = args[11], *lengths = args[12];
    long long max_record, joined_limit, size, off, data_end, bias;
    PyObject *last_obj = args[8], *ident_obj = args[10];
    uint64_t ident = 0, last = 0;
    int has_ident = ident_obj != Py_None;
    int none_yet = 0;   /* last_id == -1: the next id expected is 0 */
    if (!ll_arg(args[2], 0, INT32_MAX, &max_record)
            || !ll_arg(args[3], 0, PY_SSIZE_T_MAX, &joined_limit)
            || !ll_arg(args[5], 0, PY_SSIZE_T_MAX, &size)
            || !ll_arg(args[6], 0, PY_SSIZE_T_MAX, &off)
            || !ll_arg(args[7], LLONG_MIN, LLONG_MAX, &data_end)
            || !ll_arg(args[9], INT32_MIN, INT32_MAX, &bias)
            || (has_ident && !u64_arg(ident_obj, &ident))
            || !item_size_is(offsets, 8) || !item_size_is(lengths, 4))
        return PyObject_Vectorcall(reference, ref_args, 9, NULL);
    long long minus_one;
    if (ll_arg(last_obj, -1, -1, &minus_one))
        none_yet = 1;
    else if (!u64_arg(last_obj, &last))
        return PyObject_Vectorcall(reference, ref_args, 9, NULL);
    Py_buffer view;
    if (PyObject_GetBuffer(args[4], &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        return PyObject_Vectorcall(reference, ref_args, 9, NULL);
    }
    if (size > view.len) {   /* the reference would read past the buffer (and raise) */
        PyBuffer_Release(&view);
        return PyObject_Vectorcall(reference, ref_args, 9, NULL);
    }
    const uint8_t *b = (const uint8_t *)view.buf;
    Grow found_offsets = {NULL, 0, 0}, found_lengths = {NULL, 0, 0};
    long long run_bytes = 0;
    int scanned = 0, failed = 0;
    uint8_t prefix[20];
    Py_ssize_t prefix_len = has_ident ? 20 : 12;
    while (off < data_end && off + HEADER <= size) {
        const uint8_t *h = b + off;
        uint32_t stored = u32le(h);
        uint32_t crc = u32le(h + 4);
        uint64_t entry_id = u64le(h + 8);
        long long length = (long long)stored - bias;
        long long start = off + HEADER;
        long long end = start + length;
        if (!none_yet && last == UINT64_MAX)
            break;   /* no 64-bit id follows it */
        uint64_t expected = none_yet ? 0 : last + 1;
        if (entry_id != expected || length < 0 || length > max_record || end > size)
            break;
        put_u32le(prefix, stored);
        put_u64le(prefix + 4, entry_id);
        if (has_ident)
            put_u64le(prefix + 12, ident);
        uint32_t value;
        if (record_crc(crc32c, prefix, prefix_len, b + start, (Py_ssize_t)length,
                       (Py_ssize_t)joined_limit, &value) < 0) {
            failed = 1;
            break;
        }
        if (value != crc)
            break;
        int64_t offset = (int64_t)off;
        int32_t data_length = (int32_t)length;
        if (grow_put(&found_offsets, &offset, 8) < 0
                || grow_put(&found_lengths, &data_length, 4) < 0) {
            failed = 1;
            break;
        }
        run_bytes += length;
        last = entry_id;
        none_yet = 0;
        scanned = 1;
        off = end;
    }
    PyBuffer_Release(&view);
    /* what was found is appended even when a call failed, as the reference would have */
    PyObject *error_type = NULL, *error_value = NULL, *error_tb = NULL;
    if (failed)
        PyErr_Fetch(&error_type, &error_value, &error_tb);
    int flushed = grow_flush(offsets, &found_offsets) == 0
                  && grow_flush(lengths, &found_lengths) == 0;
    PyMem_Free(found_offsets.data);
    PyMem_Free(found_lengths.data);
    if (failed) {
        if (flushed)
            PyErr_Restore(error_type, error_value, error_tb);
        else {
            Py_XDECREF(error_type);
            Py_XDECREF(error_value);
            Py_XDECREF(error_tb);
        }
        return NULL;
    }
    if (!flushed)
        return NULL;
    PyObject *last_id = scanned ? PyLong_FromUnsignedLongLong(last) : Py_NewRef(last_obj);
    if (last_id == NULL)
        return NULL;
    return Py_BuildValue("(LNL)", off, last_id, run_bytes);
}

/* data_end(reference, buf, start, size) -> int: storage.segments._data_end(buf, start, size),
 * the offset after the last non-zero byte in [start, size) (start when there is none), read in
 * place from the end backwards a word at a time (the pre-zeroed tail of an unsealed segment is
 * up to megabytes). A negative start or a size beyond the buffer goes to the reference. */
static PyObject *
data_end(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "data_end takes 4 arguments");
        return NULL;
    }
    long long start, size;
    if (!ll_arg(args[2], 0, PY_SSIZE_T_MAX, &start) || !ll_arg(args[3], 0, PY_SSIZE_T_MAX, &size))
        return PyObject_Vectorcall(args[0], args + 1, 3, NULL);
    if (start >= size)
        return Py_NewRef(args[2]);
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        return PyObject_Vectorcall(args[0], args + 1, 3, NULL);
    }
    if (size > view.len) {
        PyBuffer_Release(&view);
        return PyObject_Vectorcall(args[0], args + 1, 3, NULL);
    }
    const uint8_t *b = (const uint8_t *)view.buf;
    long long end = size;
    while (end > start && (end & 7))          /* to a word boundary of the offset */
        if (b[--end]) {
            end++;
            goto found;
        }
    while (end - 8 >= start) {
        uint64_t word;
        memcpy(&word, b + end - 8, 8);
        if (word)
            break;
        end -= 8;
    }
    while (end > start && !b[end - 1])
        end--;
found:
    PyBuffer_Release(&view);
    return PyLong_FromLongLong(end);
}


#ifdef RWF_NOWAIT
/* read_records(reference, crc32c, fd, records, bias, ident, budget, found_any, max_read_bytes)
 * (see the top of this file). */
static PyObject *
read_records(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "read_records takes 9 arguments");
        return NULL;
    }
    PyObject *reference = args[0], *crc32c = args[1], *records = args[3];
    PyObject *ident_obj = args[5];
    long long fd, bias, budget, max_read;
    uint64_t ident = 0;
    int has_ident = ident_obj != Py_None;
    int found_any = PyObject_IsTrue(args[7]);
    if (found_any < 0)
        return NULL;
    if (!ll_arg(args[2], 0, INT32_MAX, &fd) || !PyList_CheckExact(records)
            || !ll_arg(args[4], INT32_MIN, INT32_MAX, &bias)
            || !ll_arg(args[6], LLONG_MIN / 2, LLONG_MAX / 2, &budget)
            || !ll_arg(args[8], 0, PY_SSIZE_T_MAX, &max_read)
            || (has_ident && !u64_arg(ident_obj, &ident)))
        return PyObject_Vectorcall(reference, args + 2, 7, NULL);
    Py_ssize_t count = PyList_GET_SIZE(records);
    /* every record a (entry_id, offset, length) of C integers, checked before any read */
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *record = PyList_GET_ITEM(records, i);
        uint64_t entry_id;
        long long offset, length;
        if (!PyTuple_CheckExact(record) || PyTuple_GET_SIZE(record) != 3
                || !u64_arg(PyTuple_GET_ITEM(record, 0), &entry_id)
                || !ll_arg(PyTuple_GET_ITEM(record, 1), 0, LLONG_MAX / 2, &offset)
                || !ll_arg(PyTuple_GET_ITEM(record, 2), 0, INT32_MAX, &length))
            return PyObject_Vectorcall(reference, args + 2, 7, NULL);
    }
    PyObject *datas = PyList_New(0);
    if (datas == NULL)
        return NULL;
    uint8_t prefix[20];
    Py_ssize_t prefix_len = has_ident ? 20 : 12;
    int found = found_any;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (budget <= 0 && found)
            break;
        PyObject *record = PyList_GET_ITEM(records, i);
        uint64_t entry_id = (uint64_t)PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(record, 0));
        long long offset = PyLong_AsLongLong(PyTuple_GET_ITEM(record, 1));
        long long length = PyLong_AsLongLong(PyTuple_GET_ITEM(record, 2));
        if (HEADER + length > max_read)
            break;
        PyObject *data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)length);
        if (data == NULL) {
            Py_DECREF(datas);
            return NULL;
        }
        uint8_t header[HEADER];
        struct iovec iov[2] = {
            {header, HEADER}, {PyBytes_AS_STRING(data), (size_t)length},
        };
        ssize_t got = preadv2((int)fd, iov, 2, (off_t)offset, RWF_NOWAIT);
        if (got != HEADER + length) {
            int err = errno;
            Py_DECREF(data);
            if (got < 0 && err != EAGAIN && err != EWOULDBLOCK && i == 0) {
                Py_DECREF(datas);
                errno = err;
                return PyErr_SetFromErrno(PyExc_OSError);
            }
            break;   /* not all in the page cache, or a later record's failure: stop here */
        }
        uint32_t stored = u32le(header);
        uint32_t crc = u32le(header + 4);
        uint64_t got_id = u64le(header + 8);
        int ok = (long long)stored == length + bias && got_id == entry_id;
        if (ok) {
            put_u32le(prefix, stored);
            put_u64le(prefix + 4, entry_id);
            if (has_ident)
                put_u64le(prefix + 12, ident);
            uint32_t value;
            if (prefixed_crc(crc32c, prefix, prefix_len, data, &value) < 0) {
                Py_DECREF(data);
                Py_DECREF(datas);
                return NULL;
            }
            ok = value == crc;
        }
        if (!ok) {
            Py_DECREF(data);
            data = Py_NewRef(Py_None);
        } else {
            budget -= length;
            found = 1;
        }
        int failed = PyList_Append(datas, data);
        Py_DECREF(data);
        if (failed < 0) {
            Py_DECREF(datas);
            return NULL;
        }
    }
    return Py_BuildValue("(NL)", datas, budget);
}
#endif

static PyMethodDef methods[] = {
    {"data_end", (PyCFunction)(void (*)(void))data_end, METH_FASTCALL,
     "data_end(reference, buf, start, size) -> int"},
    {"scan_in_order", (PyCFunction)(void (*)(void))scan_in_order, METH_FASTCALL,
     "scan_in_order(reference, crc32c, max_record_bytes, joined_crc_bytes, buf, size, off, "
     "data_end, last_id, bias, ident, offsets, lengths) -> (off, last_id, run_bytes)"},
#ifdef RWF_NOWAIT
    {"read_records", (PyCFunction)(void (*)(void))read_records, METH_FASTCALL,
     "read_records(reference, crc32c, fd, records, bias, ident, budget, found_any, "
     "max_read_bytes) -> (datas, budget)"},
#endif
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "storage._scan_accel",
    "The C twins of storage.segments._scan_in_order and _data_end and of "
    "storage.read_fds.read_records_py (see those modules).", -1, methods,
};

PyMODINIT_FUNC
PyInit__scan_accel(void)
{
    return PyModule_Create(&module_def);
}
