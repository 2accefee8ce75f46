/* The unbatched publish hot loop in C: a read's consecutive SENDs of the usual layout, and the
 * metadata scan's plain-message verdict.
 *
 * Theory of operation
 * -------------------
 * Optional: built from pyproject.toml as an optional extension; protocol/send_accel.py loads it
 * when present, and the pure-Python functions there are the reference. Each function here
 * computes exactly what its Python twin does, on the same bytes (tests/protocol/
 * test_protocol_send_accel.py compares them over random, mutated and truncated frames):
 *
 * decode_sends(SendFrame, crc32c, buf, pos, max_frame_size, out) -> int
 *     send_accel.decode_sends_py: from pos, while a whole frame is buffered whose header is
 *     valid and whose command is a SEND that protocol.send_path.parse_send accepts, append its
 *     SendFrame to out and move on; return the position of the first frame not taken. Never
 *     raises on any bytes (a frame not taken is left to the generic decoder, which judges it).
 *
 * plain_metadata(entry) -> bool
 *     send_accel.plain_metadata_py: scan_publish_metadata(entry) is SINGLE.
 *
 * Both read only the buffer they are given (bytes or bytearray), within its length; no state.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* A varint of at most max_bytes bytes (max_bytes - 1 continuation bytes, then one below 0x80)
 * within [*p, end): its value, *p moved past it; -1 when there is none. */
static inline int
read_varint(const uint8_t *b, Py_ssize_t *p, Py_ssize_t end, int max_bytes, uint64_t *value)
{
    Py_ssize_t at = *p;
    uint64_t v = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (at >= end)
            return -1;
        uint8_t byte = b[at++];
        if (shift < 64)
            v |= (uint64_t)(byte & 0x7F) << shift;
        shift += 7;
        if (byte < 0x80) {
            *p = at;
            *value = v;
            return 0;
        }
    }
    return -1;
}

static inline uint32_t
u32be(const uint8_t *b)
{
    return ((uint32_t)b[0] << 24) | ((uint32_t)b[1] << 16) | ((uint32_t)b[2] << 8) | b[3];
}

/* parse_send's command grammar over [pos, end): 08 06 32 L 08 v 10 v [18 v28] [20 00] [28 00]
 * [30 v] [38 00] [40 00], v of 1..9 bytes, v28 of 1..4. 0 when it matches. */
static int
parse_command(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, uint64_t *producer,
              uint64_t *sequence, uint64_t *num_messages, uint64_t *highest)
{
    if (end - pos < 4 || b[pos] != 0x08 || b[pos + 1] != 0x06 || b[pos + 2] != 0x32
            || b[pos + 3] >= 0x80)
        return -1;
    Py_ssize_t p = pos + 4;
    if (p >= end || b[p] != 0x08)
        return -1;
    p++;
    if (read_varint(b, &p, end, 9, producer) < 0)
        return -1;
    if (p >= end || b[p] != 0x10)
        return -1;
    p++;
    if (read_varint(b, &p, end, 9, sequence) < 0)
        return -1;
    *num_messages = 1;
    *highest = 0;
    if (p < end && b[p] == 0x18) {
        Py_ssize_t q = p + 1;
        if (read_varint(b, &q, end, 4, num_messages) == 0)
            p = q;
        else
            return -1; /* 18 left unmatched: nothing after it takes it */
    }
    if (p + 1 < end && b[p] == 0x20 && b[p + 1] == 0x00)
        p += 2;
    if (p + 1 < end && b[p] == 0x28 && b[p + 1] == 0x00)
        p += 2;
    if (p < end && b[p] == 0x30) {
        Py_ssize_t q = p + 1;
        if (read_varint(b, &q, end, 9, highest) == 0)
            p = q;
        else
            return -1;
    }
    if (p + 1 < end && b[p] == 0x38 && b[p + 1] == 0x00)
        p += 2;
    if (p + 1 < end && b[p] == 0x40 && b[p + 1] == 0x00)
        p += 2;
    return p == end ? 0 : -1;
}

static PyObject *
decode_sends(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "decode_sends takes 6 arguments");
        return NULL;
    }
    if (!PyType_Check(args[0]) || !PyType_IsSubtype((PyTypeObject *)args[0], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "SendFrame must be a tuple type");
        return NULL;
    }
    PyTypeObject *send_frame = (PyTypeObject *)args[0];
    PyObject *crc32c = args[1];
    Py_ssize_t pos = PyLong_AsSsize_t(args[3]);
    if (pos == -1 && PyErr_Occurred())
        return NULL;
    if (pos < 0) {
        PyErr_SetString(PyExc_ValueError, "pos must not be negative");
        return NULL;
    }
    long long max_size = PyLong_AsLongLong(args[4]);
    if (max_size == -1 && PyErr_Occurred())
        return NULL;
    PyObject *out = args[5];
    if (!PyList_Check(out)) {
        PyErr_SetString(PyExc_TypeError, "out must be a list");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[2], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *b = (const uint8_t *)view.buf;
    Py_ssize_t size = view.len;
    while (size - pos >= 12) {
        long long total = u32be(b + pos);
        long long command_size = u32be(b + pos + 4);
        long long frame_end = pos + 4 + total;
        if (!(total <= max_size && 4 <= command_size && command_size <= total - 4
              && frame_end <= size && b[pos + 9] == 0x06 && b[pos + 8] == 0x08))
            break;
        Py_ssize_t command = pos + 8;
        Py_ssize_t command_end = command + (Py_ssize_t)command_size;
        /* parse_send: the send sub-message fills the command, room for the CRC trailer */
        if (b[command + 3] + 4 != command_end - command || frame_end - command_end < 10)
            break;
        uint64_t producer, sequence, num_messages, highest;
        if (parse_command(b, command, command_end, &producer, &sequence, &num_messages,
                          &highest) < 0)
            break;
        const uint8_t *t = b + command_end;
        unsigned magic = ((unsigned)t[0] << 8) | t[1];
        uint32_t expected = u32be(t + 2);
        uint32_t metadata_size = u32be(t + 6);
        if (magic != 0x0E01 || (long long)metadata_size > frame_end - command_end - 10)
            break;
        PyObject *entry = PyBytes_FromStringAndSize((const char *)(t + 6),
                                                    (Py_ssize_t)(frame_end - command_end - 6));
        if (entry == NULL)
            goto error;
        PyObject *crc = PyObject_CallOneArg(crc32c, entry);
        if (crc == NULL) {
            Py_DECREF(entry);
            goto error;
        }
        unsigned long crc_value = PyLong_AsUnsignedLong(crc);
        Py_DECREF(crc);
        if (crc_value == (unsigned long)-1 && PyErr_Occurred()) {
            Py_DECREF(entry);
            goto error;
        }
        PyObject *frame = send_frame->tp_alloc(send_frame, 7);
        if (frame == NULL) {
            Py_DECREF(entry);
            goto error;
        }
        PyObject *items[7] = {
            PyLong_FromUnsignedLongLong(producer),
            PyLong_FromUnsignedLongLong(sequence),
            PyLong_FromUnsignedLongLong(num_messages),
            PyLong_FromUnsignedLongLong(highest),
            entry,
            Py_NewRef(crc_value == expected ? Py_True : Py_False),
            PyLong_FromUnsignedLong(metadata_size),
        };
        int failed = 0;
        for (int i = 0; i < 7; i++) {
            if (items[i] == NULL)
                failed = 1;
            PyTuple_SET_ITEM(frame, i, items[i]);
        }
        if (failed || PyList_Append(out, frame) < 0) {
            Py_DECREF(frame);
            goto error;
        }
        Py_DECREF(frame);
        pos = (Py_ssize_t)frame_end;
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(pos);
error:
    PyBuffer_Release(&view);
    return NULL;
}

/* The tags of the varint fields scan_publish_metadata reads past without capturing: 12, and
 * 17 20 22 23 24 25 30 (two-byte tags ending in 01). */
static inline int
unread_scalar_tag(const uint8_t *b, Py_ssize_t *p, Py_ssize_t end)
{
    uint8_t tag = b[*p];
    if (tag == 0x60) {
        *p += 1;
        return 1;
    }
    if ((tag == 0x88 || tag == 0xA0 || tag == 0xB0 || tag == 0xB8 || tag == 0xC0 || tag == 0xC8
         || tag == 0xF0) && *p + 1 < end && b[*p + 1] == 0x01) {
        *p += 2;
        return 1;
    }
    return 0;
}

static PyObject *
plain_metadata(PyObject *module, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *b = (const uint8_t *)view.buf;
    Py_ssize_t n = view.len;
    int plain = 0;
    uint64_t value;
    if (n < 6)
        goto done;
    long long end = 4 + (long long)u32be(b);
    if (end > n || b[4] != 0x0A)
        goto done;
    Py_ssize_t p;
    if (b[5] < 0x80) {
        p = 6 + b[5];
    } else {
        Py_ssize_t q = 5;
        if (read_varint(b, &q, (Py_ssize_t)end, 4, &value) < 0)
            goto done;
        if ((long long)value > end)
            goto done;
        p = q + (Py_ssize_t)value;
    }
    if (p >= end || b[p] != 0x10)
        goto done;
    p++;
    if (read_varint(b, &p, (Py_ssize_t)end, 10, &value) < 0)
        goto done;
    if (p >= end || b[p] != 0x18)
        goto done;
    p++;
    if (read_varint(b, &p, (Py_ssize_t)end, 10, &value) < 0)
        goto done;
    while (p < end) {
        if (!unread_scalar_tag(b, &p, (Py_ssize_t)end))
            goto done; /* a field the scan captures, a length-delimited one, or no field */
        if (read_varint(b, &p, (Py_ssize_t)end, 10, &value) < 0)
            goto done;
    }
    plain = 1;
done:
    PyBuffer_Release(&view);
    return Py_NewRef(plain ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"decode_sends", (PyCFunction)(void (*)(void))decode_sends, METH_FASTCALL,
     "decode_sends(SendFrame, crc32c, buf, pos, max_frame_size, out) -> int"},
    {"plain_metadata", (PyCFunction)plain_metadata, METH_O,
     "plain_metadata(entry) -> bool"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "protocol._send_accel",
    "C twins of protocol.send_accel's pure-Python functions (see that module).", -1, methods,
};

PyMODINIT_FUNC
PyInit__send_accel(void)
{
    return PyModule_Create(&module_def);
}
