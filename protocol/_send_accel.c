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
 * scan_metadata(fallback, single, min_batched_message_bytes, entry, max_message_size)
 *     protocol.metadata_scan.scan_publish_metadata (fallback is that very function; single is
 *     its SINGLE, returned as itself; min_batched_message_bytes is entry_shape's
 *     MIN_BATCHED_MESSAGE_BYTES): the required fields, then varint fields and the
 *     length-delimited ones the scan skips, walked in order to the metadata's end; the result
 *     is the scan's (the last deliver_at_time's varint bytes, the batch test on
 *     num_messages_in_batch). A compression, a chunk field, properties, anything the scan
 *     declines or that does not end where the metadata ends: fallback(entry, max_message_size)
 *     answers.
 *
 * encode_message_run(crc32c, by_reference_bytes, consumer_id, partition, positions, entries)
 *     -> list[bytes]
 *     protocol.hot_commands.encode_message_run_py: the MESSAGE frames of a run of plain entries
 *     to one consumer. b"".join of the result is the reference's frames byte for byte; an entry
 *     of at least by_reference_bytes is a buffer of its own (the entry object itself, written
 *     by reference), and every other byte is joined into as few buffers as that allows (what
 *     protocol.framing.coalesce makes of the reference's buffers). Ids are ints in
 *     [-2**63, 2**64) (a negative one is a 10-byte varint, as the reference's); entries bytes.
 *
 * ack_positions(Position, command) -> list[Position] | None
 *     A CommandAck's message ids as positions when every one names a whole entry (see the
 *     function); None sends the caller to its reference, the ids read one by one from the
 *     parsed command (broker/net/consumers.py). Never raises on any bytes.
 *
 * peek_dispatch(fallback, entry) -> (int, int | None)
 *     protocol.metadata.peek_dispatch: an entry's (num_messages_in_batch, deliver_at_time or
 *     None). Its metadata is walked field by field when it is flat: every field of a known wire
 *     type (varint, 64-bit, length-delimited, 32-bit), within the metadata, a field MessageMetadata
 *     declares carrying its declared wire type, no sub-message (properties, encryption keys).
 *     Then the result is what upb's parse gives (the last value of a field wins; the batch size
 *     is an int32, 1 when absent). Anything else -- a stored form with broker entry metadata,
 *     a sub-message, a field number 0, a group, a truncated or overlong varint -- is answered
 *     by fallback(entry), the reference itself, which returns or raises what it must.
 *
 * They read only the buffers they are given (bytes or bytearray), within their length; no state.
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

/* The scan's required prefix of an entry's metadata: [metadataSize] 0a L producer_name 10 v
 * sequence_id 18 v publish_time (L a length of 1..4 bytes, v a varint of 1..10), the metadata
 * within the n bytes. 0 with *end the metadata's end and *p just after publish_time; -1 when
 * the entry does not start so (the scan declines it, or a caller hands it on). */
static int
required_prefix(const uint8_t *b, Py_ssize_t n, Py_ssize_t *end, Py_ssize_t *p)
{
    uint64_t value;
    if (n < 6)
        return -1;
    long long declared = 4 + (long long)u32be(b);
    if (declared > n || b[4] != 0x0A)
        return -1;
    Py_ssize_t e = (Py_ssize_t)declared, at;
    if (b[5] < 0x80) {
        at = 6 + b[5];
    } else {
        Py_ssize_t q = 5;
        if (read_varint(b, &q, e, 4, &value) < 0 || (long long)value > e)
            return -1;
        at = q + (Py_ssize_t)value;
    }
    if (at >= e || b[at] != 0x10)
        return -1;
    at++;
    if (read_varint(b, &at, e, 10, &value) < 0 || at >= e || b[at] != 0x18)
        return -1;
    at++;
    if (read_varint(b, &at, e, 10, &value) < 0)
        return -1;
    *end = e;
    *p = at;
    return 0;
}

static PyObject *
plain_metadata(PyObject *module, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *b = (const uint8_t *)view.buf;
    int plain = 0;
    uint64_t value;
    Py_ssize_t end, p;
    if (required_prefix(b, view.len, &end, &p) < 0)
        goto done;
    while (p < end) {
        if (!unread_scalar_tag(b, &p, end))
            goto done; /* a field the scan captures, a length-delimited one, or no field */
        if (read_varint(b, &p, end, 10, &value) < 0)
            goto done;
    }
    plain = 1;
done:
    PyBuffer_Release(&view);
    return Py_NewRef(plain ? Py_True : Py_False);
}

/* scan_publish_metadata's tags of the length-delimited fields it skips (5 replicated_from,
 * 6 partition_key, 7 replicate_to, 14 encryption_algo, 15 encryption_param, 16 schema_version,
 * 18 ordering_key, 26 uuid); properties (4) is not among them (its value is checked). */
static inline int
skipped_bytes_tag(const uint8_t *b, Py_ssize_t *p, Py_ssize_t end)
{
    uint8_t tag = b[*p];
    if (tag == 0x2A || tag == 0x32 || tag == 0x3A || tag == 0x72 || tag == 0x7A) {
        *p += 1;
        return 1;
    }
    if ((tag == 0x82 || tag == 0x92 || tag == 0xD2) && *p + 1 < end && b[*p + 1] == 0x01) {
        *p += 2;
        return 1;
    }
    return 0;
}

static PyObject *
scan_metadata(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "scan_metadata takes 5 arguments");
        return NULL;
    }
    PyObject *fallback = args[0], *single = args[1], *entry = args[3];
    long long min_batched = PyLong_AsLongLong(args[2]);
    if (min_batched == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(entry, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *b = (const uint8_t *)view.buf;
    Py_ssize_t n = view.len;
    uint64_t value;
    Py_ssize_t end, p;
    if (required_prefix(b, n, &end, &p) < 0)
        goto reference;
    int captured = 0;                 /* a field the scan captures, or a length-delimited one */
    int has_messages = 0;
    uint64_t messages = 0;
    Py_ssize_t delayed_at = -1, delayed_len = 0;
    while (p < end) {
        if (unread_scalar_tag(b, &p, end)) {
            if (read_varint(b, &p, end, 10, &value) < 0)
                goto reference;
            continue;
        }
        uint8_t tag = b[p];
        if (tag == 0x58) {                                  /* 11 num_messages_in_batch */
            p++;
            if (read_varint(b, &p, end, 10, &messages) < 0)
                goto reference;
            has_messages = captured = 1;
        } else if (tag == 0x98 && p + 1 < end && b[p + 1] == 0x01) {   /* 19 deliver_at_time */
            p += 2;
            Py_ssize_t at = p;
            if (read_varint(b, &p, end, 10, &value) < 0)
                goto reference;
            delayed_at = at;
            delayed_len = p - at;
            captured = 1;
        } else if (tag == 0x48) {                           /* 9 uncompressed_size */
            p++;
            if (read_varint(b, &p, end, 10, &value) < 0)
                goto reference;
            captured = 1;      /* read only with a compression or a chunk, which go below */
        } else if (skipped_bytes_tag(b, &p, end)) {
            uint64_t length;
            if (read_varint(b, &p, end, 4, &length) < 0 || length > (uint64_t)(end - p))
                goto reference;
            p += (Py_ssize_t)length;
            captured = 1;
        } else {
            /* compression, the chunk fields, properties, or a field the scan declines: the
             * reference answers */
            goto reference;
        }
    }
    Py_ssize_t payload = n - end;
    PyBuffer_Release(&view);
    if (!captured)
        return Py_NewRef(single);
    long long count = 1;
    if (has_messages) {
        count = (long long)(int32_t)(uint32_t)messages;
        if (count < 1 || count * min_batched > (long long)payload)
            return Py_NewRef(Py_None);
    }
    PyObject *result = PyTuple_New(3);
    if (result == NULL)
        return NULL;
    PyObject *count_obj = PyLong_FromLongLong(count);
    PyObject *delayed = delayed_at < 0 ? Py_NewRef(Py_None)
        : PyBytes_FromStringAndSize((const char *)b + delayed_at, delayed_len);
    if (count_obj == NULL || delayed == NULL) {
        Py_XDECREF(count_obj);
        Py_XDECREF(delayed);
        Py_DECREF(result);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, count_obj);
    PyTuple_SET_ITEM(result, 1, Py_NewRef(Py_False));
    PyTuple_SET_ITEM(result, 2, delayed);
    return result;
reference:
    PyBuffer_Release(&view);
    return PyObject_CallFunctionObjArgs(fallback, entry, args[4], NULL);
}

/* The protobuf varint of an int in [-2**63, 2**64) (negatives as 10-byte two's complement):
 * its length, written to out (10 bytes of room); -1 with an exception set otherwise. */
static int
int_varint(PyObject *value, uint8_t *out)
{
    if (!PyLong_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "an id must be an int");
        return -1;
    }
    int overflow = 0;
    long long signed_value = PyLong_AsLongLongAndOverflow(value, &overflow);
    uint64_t v;
    if (overflow == 0) {
        if (signed_value == -1 && PyErr_Occurred())
            return -1;
        v = (uint64_t)signed_value;
    } else if (overflow > 0) {
        v = PyLong_AsUnsignedLongLong(value);
        if (v == (uint64_t)-1 && PyErr_Occurred())
            return -1;
    } else {
        PyErr_SetString(PyExc_OverflowError, "an id below -2**63");
        return -1;
    }
    int n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v & 0x7F) | 0x80;
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

static inline void
put_u32be(uint8_t *b, uint32_t v)
{
    b[0] = (uint8_t)(v >> 24);
    b[1] = (uint8_t)(v >> 16);
    b[2] = (uint8_t)(v >> 8);
    b[3] = (uint8_t)v;
}

/* One frame of a run, measured before anything is written. */
typedef struct {
    PyObject *entry;        /* borrowed from the entries sequence */
    Py_ssize_t entry_len;
    Py_ssize_t ledger_at;   /* offset of its ledger's varint in the ledger buffer */
    uint8_t ledger_len;
    uint8_t entry_no_len;
    uint8_t entry_no[10];
    uint8_t by_reference;
} RunFrame;

/* A MESSAGE head: header (8) + BaseCommand prefix 08 09 4a L (4) + consumer 08 v 12 + M +
 * 08 ledger 10 entry [18 partition] + magic and CRC (6). At most 8 + 4 + 12 + 1 + 33 + 6. */
#define MAX_HEAD 64

static PyObject *
encode_message_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "encode_message_run takes 6 arguments");
        return NULL;
    }
    PyObject *crc32c = args[0];
    Py_ssize_t by_reference = PyLong_AsSsize_t(args[1]);
    if (by_reference == -1 && PyErr_Occurred())
        return NULL;
    uint8_t consumer[10], partition[10];
    int consumer_len = int_varint(args[2], consumer);
    if (consumer_len < 0)
        return NULL;
    int partition_len = 0; /* with its tag: 0 when None */
    if (args[3] != Py_None) {
        partition_len = int_varint(args[3], partition);
        if (partition_len < 0)
            return NULL;
        partition_len += 1;
    }
    PyObject *positions = PySequence_Fast(args[4], "positions must be a sequence");
    if (positions == NULL)
        return NULL;
    PyObject *entries = PySequence_Fast(args[5], "entries must be a sequence");
    if (entries == NULL) {
        Py_DECREF(positions);
        return NULL;
    }
    PyObject *result = NULL, *chunk = NULL;
    RunFrame *frames = NULL;
    uint8_t *ledgers = NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(positions);
    if (PySequence_Fast_GET_SIZE(entries) != n) {
        /* what zip(strict=True) says of sequences of different lengths */
        PyErr_SetString(PyExc_ValueError, "positions and entries differ in length");
        goto done;
    }
    result = PyList_New(0);
    if (result == NULL || n == 0)
        goto done;
    frames = PyMem_Malloc((size_t)n * sizeof(RunFrame));
    ledgers = PyMem_Malloc((size_t)n * 10); /* a ledger's varint per change of ledger */
    if (frames == NULL || ledgers == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    PyObject **pos_items = PySequence_Fast_ITEMS(positions);
    PyObject **entry_items = PySequence_Fast_ITEMS(entries);
    /* pass 1: every frame's ids and sizes (an error here leaves nothing half written) */
    PyObject *last_ledger = NULL;
    Py_ssize_t ledgers_used = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        RunFrame *f = &frames[i];
        PyObject *pos = pos_items[i];
        if (!PyTuple_Check(pos) || PyTuple_GET_SIZE(pos) != 2) {
            PyErr_SetString(PyExc_TypeError, "a position must be a (ledger id, entry id) tuple");
            goto fail;
        }
        PyObject *ledger_id = PyTuple_GET_ITEM(pos, 0);
        int same = 0;
        if (last_ledger != NULL) {
            same = PyObject_RichCompareBool(ledger_id, last_ledger, Py_EQ);
            if (same < 0)
                goto fail;
        }
        if (same) {
            f->ledger_at = frames[i - 1].ledger_at;
            f->ledger_len = frames[i - 1].ledger_len;
        } else {
            int len = int_varint(ledger_id, ledgers + ledgers_used);
            if (len < 0)
                goto fail;
            f->ledger_at = ledgers_used;
            f->ledger_len = (uint8_t)len;
            ledgers_used += len;
            last_ledger = ledger_id;
        }
        int entry_no_len = int_varint(PyTuple_GET_ITEM(pos, 1), f->entry_no);
        if (entry_no_len < 0)
            goto fail;
        f->entry_no_len = (uint8_t)entry_no_len;
        PyObject *entry = entry_items[i];
        if (!PyBytes_Check(entry)) {
            PyErr_SetString(PyExc_TypeError, "an entry must be bytes");
            goto fail;
        }
        f->entry = entry;
        f->entry_len = PyBytes_GET_SIZE(entry);
        if (f->entry_len > (Py_ssize_t)UINT32_MAX - 128) {
            PyErr_SetString(PyExc_OverflowError, "an entry too large for a frame");
            goto fail;
        }
        f->by_reference = f->entry_len >= by_reference;
    }
    /* pass 2: each buffer of joined frames sized to its end (the next entry by reference),
     * then written */
    const int lead_base = consumer_len + 3; /* 08 consumer 12, then the MessageIdData length */
    Py_ssize_t i = 0;
    while (i < n) {
        Py_ssize_t size = 0, j = i;
        for (; j < n; j++) {
            RunFrame *f = &frames[j];
            size += 8 + 4 + lead_base + 2 + f->ledger_len + f->entry_no_len + partition_len + 6;
            if (f->by_reference) {
                j++;
                break;
            }
            size += f->entry_len;
        }
        chunk = PyBytes_FromStringAndSize(NULL, size);
        if (chunk == NULL)
            goto fail;
        uint8_t *w = (uint8_t *)PyBytes_AS_STRING(chunk);
        for (; i < j; i++) {
            RunFrame *f = &frames[i];
            PyObject *crc = PyObject_CallOneArg(crc32c, f->entry);
            if (crc == NULL)
                goto fail;
            unsigned long crc_value = PyLong_AsUnsignedLong(crc);
            Py_DECREF(crc);
            if (crc_value == (unsigned long)-1 && PyErr_Occurred())
                goto fail;
            int mid = 2 + f->ledger_len + f->entry_no_len + partition_len; /* MessageIdData */
            uint32_t command_size = (uint32_t)(lead_base + mid + 4);
            put_u32be(w, (uint32_t)(command_size + 10 + f->entry_len));
            put_u32be(w + 4, command_size);
            w += 8;
            *w++ = 0x08;
            *w++ = 0x09;
            *w++ = 0x4A;
            *w++ = (uint8_t)(lead_base + mid);
            *w++ = 0x08;
            memcpy(w, consumer, (size_t)consumer_len);
            w += consumer_len;
            *w++ = 0x12;
            *w++ = (uint8_t)mid;
            *w++ = 0x08;
            memcpy(w, ledgers + f->ledger_at, f->ledger_len);
            w += f->ledger_len;
            *w++ = 0x10;
            memcpy(w, f->entry_no, f->entry_no_len);
            w += f->entry_no_len;
            if (partition_len) {
                *w++ = 0x18;
                memcpy(w, partition, (size_t)(partition_len - 1));
                w += partition_len - 1;
            }
            *w++ = 0x0E;
            *w++ = 0x01;
            put_u32be(w, (uint32_t)crc_value);
            w += 4;
            if (!f->by_reference) {
                memcpy(w, PyBytes_AS_STRING(f->entry), (size_t)f->entry_len);
                w += f->entry_len;
            }
        }
        if (PyList_Append(result, chunk) < 0)
            goto fail;
        Py_CLEAR(chunk);
        if (frames[j - 1].by_reference && PyList_Append(result, frames[j - 1].entry) < 0)
            goto fail;
    }
    goto done;
fail:
    Py_CLEAR(chunk);
    Py_CLEAR(result);
done:
    PyMem_Free(frames);
    PyMem_Free(ledgers);
    Py_DECREF(positions);
    Py_DECREF(entries);
    return result;
}

/* MessageMetadata's field numbers 1..30: the wire type each is declared with (0 varint,
 * 2 length-delimited), -1 for a number it does not declare (an unknown field: skipped, as upb
 * keeps it aside), 9 for a sub-message (the walk leaves those to the reference). */
static const signed char METADATA_WIRE_TYPE[31] = {
    /* 0 */ -1,
    /* 1 producer_name */ 2, /* 2 sequence_id */ 0, /* 3 publish_time */ 0,
    /* 4 properties */ 9, /* 5 replicated_from */ 2, /* 6 partition_key */ 2,
    /* 7 replicate_to */ 2, /* 8 compression */ 0, /* 9 uncompressed_size */ 0,
    /* 10 */ -1, /* 11 num_messages_in_batch */ 0, /* 12 event_time */ 0,
    /* 13 encryption_keys */ 9, /* 14 encryption_algo */ 2, /* 15 encryption_param */ 2,
    /* 16 schema_version */ 2, /* 17 partition_key_b64_encoded */ 0, /* 18 ordering_key */ 2,
    /* 19 deliver_at_time */ 0, /* 20 marker_type */ 0, /* 21 */ -1,
    /* 22 txnid_least_bits */ 0, /* 23 txnid_most_bits */ 0, /* 24 highest_sequence_id */ 0,
    /* 25 null_value */ 0, /* 26 uuid */ 2, /* 27 num_chunks_from_msg */ 0,
    /* 28 total_chunk_msg_size */ 0, /* 29 chunk_id */ 0, /* 30 null_partition_key */ 0,
};

/* One field of a flat metadata from *p (< end), as upb reads it: its number and its value (a
 * varint's value, or a length-delimited field's length with *value_at at its first byte), *p
 * moved past it. 0 for a field; -1 when the reference must answer (a field number 0 or beyond
 * protobuf's, a declared field with another wire type, a sub-message, a group, a truncated or
 * overlong varint, a value beyond end). */
static int
next_flat_field(const uint8_t *b, Py_ssize_t *p, Py_ssize_t end, uint64_t *field,
                uint64_t *value, Py_ssize_t *value_at)
{
    uint64_t key;
    if (read_varint(b, p, end, 5, &key) < 0)
        return -1;
    *field = key >> 3;
    int wire_type = (int)(key & 7);
    if (*field == 0 || *field > 0x1FFFFFFF)
        return -1;
    if (*field <= 30) {
        int declared = METADATA_WIRE_TYPE[*field];
        if (declared == 9 || (declared >= 0 && declared != wire_type))
            return -1;
    }
    *value = 0;
    *value_at = *p;
    if (wire_type == 0) {
        if (read_varint(b, p, end, 10, value) < 0 || (*p - *value_at == 10 && b[*p - 1] > 1))
            return -1;
    } else if (wire_type == 1) {
        if (end - *p < 8)
            return -1;
        *p += 8;
    } else if (wire_type == 2) {
        if (read_varint(b, p, end, 5, value) < 0 || *value > (uint64_t)(end - *p))
            return -1;
        *value_at = *p;
        *p += (Py_ssize_t)*value;
    } else if (wire_type == 5) {
        if (end - *p < 4)
            return -1;
        *p += 4;
    } else {
        return -1;   /* a group, or no wire type at all */
    }
    return 0;
}

static PyObject *
peek_dispatch(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "peek_dispatch takes 2 arguments");
        return NULL;
    }
    PyObject *fallback = args[0];
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *b = (const uint8_t *)view.buf;
    Py_ssize_t n = view.len;
    int32_t messages = 1;
    int64_t deliver_at = 0;
    int has_deliver_at = 0;
    if (n < 4)
        goto reference;
    uint32_t size = u32be(b);
    if ((Py_ssize_t)size > n - 4)
        goto reference;   /* a stored form with broker entry metadata, or malformed */
    Py_ssize_t p = 4, end = 4 + (Py_ssize_t)size;
    while (p < end) {
        uint64_t field, value;
        Py_ssize_t value_at;
        if (next_flat_field(b, &p, end, &field, &value, &value_at) < 0)
            goto reference;
        if (field == 11) {
            messages = (int32_t)(uint32_t)value;
        } else if (field == 19) {
            deliver_at = (int64_t)value;
            has_deliver_at = 1;
        }
    }
    PyBuffer_Release(&view);
    PyObject *count = PyLong_FromLong(messages);
    if (count == NULL)
        return NULL;
    PyObject *due = has_deliver_at ? PyLong_FromLongLong(deliver_at) : Py_NewRef(Py_None);
    if (due == NULL) {
        Py_DECREF(count);
        return NULL;
    }
    PyObject *result = PyTuple_New(2);
    if (result == NULL) {
        Py_DECREF(count);
        Py_DECREF(due);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, count);
    PyTuple_SET_ITEM(result, 1, due);
    return result;
reference:
    PyBuffer_Release(&view);
    return PyObject_CallOneArg(fallback, args[1]);
}

/* What keyed_run needs of one entry's metadata, walked as upb parses it. */
typedef struct {
    Py_ssize_t key_at, key_len;    /* partition_key (key_at < 0: absent) */
    int null_value;
    uint64_t compression;
    int has_uncompressed;
    uint32_t uncompressed;
    int has_deliver_at;
    int64_t deliver_at;
} KeyedFields;

/* Walk a flat metadata over [4, end) field by field (next_flat_field, as peek_dispatch does);
 * 0 when walked, -1 when the reference must answer (a sub-message, a batch, an unknown
 * compression, malformed bytes). */
static int
walk_keyed(const uint8_t *b, Py_ssize_t end, KeyedFields *f)
{
    Py_ssize_t p = 4;
    f->key_at = -1;
    f->key_len = 0;
    f->null_value = 0;
    f->compression = 0;
    f->has_uncompressed = 0;
    f->uncompressed = 0;
    f->has_deliver_at = 0;
    f->deliver_at = 0;
    while (p < end) {
        uint64_t field, value;
        Py_ssize_t value_at;
        if (next_flat_field(b, &p, end, &field, &value, &value_at) < 0)
            return -1;
        switch (field) {
        case 6:
            f->key_at = value_at;
            f->key_len = (Py_ssize_t)value;
            break;
        case 8:
            if (value > 4)
                return -1;   /* a value the enum does not know: protobuf keeps it aside */
            f->compression = value;
            break;
        case 9:
            f->has_uncompressed = 1;
            f->uncompressed = (uint32_t)value;
            break;
        case 11:
            return -1;       /* a batch: the reference opens it */
        case 19:
            f->has_deliver_at = 1;
            f->deliver_at = (int64_t)value;
            break;
        case 25:
            f->null_value = value != 0;
            break;
        default:
            break;
        }
    }
    return 0;
}

/* One entry's (keys, time) as classify_run gives them, new references in *keys and *time:
 * 1 when answered here, 0 when the reference must answer, -1 with an exception set. */
static int
keyed_one(PyObject *entry, PyObject *hash128, PyObject *withheld, PyObject *unknown,
          PyObject *kwnames, PyObject **keys, PyObject **time)
{
    Py_buffer view;
    if (PyObject_GetBuffer(entry, &view, PyBUF_SIMPLE) < 0)
        return -1;
    const uint8_t *b = (const uint8_t *)view.buf;
    Py_ssize_t size = view.len, end;
    int answer = 0;
    KeyedFields f;
    if (size > 6 && b[4] == 0x0A && b[5] < 0x80) {
        Py_ssize_t start = 6 + b[5];
        long long declared = 4 + (long long)u32be(b);
        Py_ssize_t high = declared < size ? (Py_ssize_t)declared : size;
        if (start >= high || (memchr(b + start, 0x32, (size_t)(high - start)) == NULL
                              && memchr(b + start, 0x58, (size_t)(high - start)) == NULL)) {
            answer = 1;      /* no partition_key or batch tag: nothing, without a walk */
            goto nothing;
        }
        if (declared > size)
            goto done;
        end = (Py_ssize_t)declared;
    } else if (size < 4) {
        answer = 1;
        goto nothing;
    } else {
        long long declared = 4 + (long long)u32be(b);
        if (declared > size)
            goto done;
        end = (Py_ssize_t)declared;
    }
    if (walk_keyed(b, end, &f) < 0)
        goto done;
    answer = 1;
    if (f.key_at < 0)
        goto nothing;
    int tombstone = f.null_value || (f.compression == 0 ? size == end
                                     : f.has_uncompressed && f.uncompressed == 0);
    if (!tombstone && !f.has_deliver_at)
        goto nothing;
    PyObject *key_bytes = PyBytes_FromStringAndSize((const char *)b + f.key_at, f.key_len);
    PyBuffer_Release(&view);
    if (key_bytes == NULL)
        return -1;
    PyObject *call_args[3] = {key_bytes, NULL, Py_False};
    call_args[1] = PyLong_FromLong(0);
    PyObject *hash = call_args[1] == NULL ? NULL
        : PyObject_Vectorcall(hash128, call_args, 2, kwnames);
    Py_XDECREF(call_args[1]);
    Py_DECREF(key_bytes);
    if (hash == NULL)
        return -1;
    PyObject *flag = tombstone ? Py_True : Py_False;
    PyObject *pair = PyTuple_Pack(2, hash, flag);
    Py_DECREF(hash);
    PyObject *pairs = pair == NULL ? NULL : PyTuple_Pack(1, pair);
    Py_XDECREF(pair);
    *keys = pairs == NULL ? NULL : PyTuple_Pack(2, pairs, flag);
    Py_XDECREF(pairs);
    if (*keys == NULL)
        return -1;
    if (tombstone)
        *time = Py_NewRef(withheld);
    else if (f.deliver_at > 0)
        *time = PyLong_FromLongLong(f.deliver_at);
    else
        *time = Py_NewRef(unknown);
    if (*time == NULL) {
        Py_CLEAR(*keys);
        return -1;
    }
    return 1;
nothing:
    *keys = Py_NewRef(Py_None);
    *time = Py_NewRef(unknown);
done:
    PyBuffer_Release(&view);
    return answer;
}

static PyObject *
keyed_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "keyed_run takes 5 arguments");
        return NULL;
    }
    PyObject *fallback = args[0], *hash128 = args[1], *withheld = args[2], *unknown = args[3];
    PyObject *seq = PySequence_Fast(args[4], "entries must be iterable");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *kwnames = Py_BuildValue("(s)", "signed");
    PyObject *keys = PyList_New(n), *times = PyList_New(n);
    Py_ssize_t nothing = 0;
    if (kwnames == NULL || keys == NULL || times == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *entry = PySequence_Fast_GET_ITEM(seq, i);
        PyObject *found = NULL, *time = NULL;
        int answered = keyed_one(entry, hash128, withheld, unknown, kwnames, &found, &time);
        if (answered < 0)
            goto fail;
        if (answered == 0) {
            PyObject *one = PyObject_CallOneArg(fallback, entry);
            if (one == NULL)
                goto fail;
            if (!PyTuple_Check(one) || PyTuple_GET_SIZE(one) != 2) {
                Py_DECREF(one);
                PyErr_SetString(PyExc_TypeError, "the reference must return (keys, time)");
                goto fail;
            }
            found = Py_NewRef(PyTuple_GET_ITEM(one, 0));
            time = Py_NewRef(PyTuple_GET_ITEM(one, 1));
            Py_DECREF(one);
        }
        if (found == Py_None)
            nothing++;
        PyList_SET_ITEM(keys, i, found);
        PyList_SET_ITEM(times, i, time);
    }
    Py_DECREF(seq);
    Py_DECREF(kwnames);
    PyObject *count = PyLong_FromSsize_t(nothing);
    if (count == NULL) {
        Py_DECREF(keys);
        Py_DECREF(times);
        return NULL;
    }
    PyObject *result = PyTuple_Pack(3, keys, times, count);
    Py_DECREF(keys);
    Py_DECREF(times);
    Py_DECREF(count);
    return result;
fail:
    Py_DECREF(seq);
    Py_XDECREF(kwnames);
    Py_XDECREF(keys);
    Py_XDECREF(times);
    return NULL;
}

/* One length-delimited or scalar field's end from its tag's wire type, within [p, end): 0 and
 * *p past it, -1 when it is not well formed (a group, a wire type protobuf does not have). */
static int
skip_field(const uint8_t *b, Py_ssize_t *p, Py_ssize_t end, unsigned wire_type)
{
    uint64_t v;
    switch (wire_type) {
    case 0:
        return read_varint(b, p, end, 10, &v);
    case 1:
        if (end - *p < 8)
            return -1;
        *p += 8;
        return 0;
    case 2:
        if (read_varint(b, p, end, 10, &v) < 0 || v > (uint64_t)(end - *p))
            return -1;
        *p += (Py_ssize_t)v;
        return 0;
    case 5:
        if (end - *p < 4)
            return -1;
        *p += 4;
        return 0;
    default:
        return -1;
    }
}

/* ack_positions(Position, command) -> list[Position] | None
 *
 * command: a CommandAck's bytes. The positions (ledgerId, entryId) of its message ids, in
 * order, when every id names a whole entry: no ack_set values (a batch index acknowledgement),
 * both ids below 2**63 (the others are wire_position's). The id's other fields (partition,
 * batch_index, batch_size, first_chunk_message_id, unknown ones) are passed over, as the
 * reference reads only those three; a repeated field's last value wins, as in upb's parse.
 * None for anything else -- an ack_set value, an id at or past 2**63, a field of another wire
 * type than declared, bytes that are not well formed -- and the caller reads the ids one by
 * one from the parsed command. */
static PyObject *
ack_positions(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "ack_positions takes 2 arguments");
        return NULL;
    }
    if (!PyType_Check(args[0]) || !PyType_IsSubtype((PyTypeObject *)args[0], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "Position must be a tuple type");
        return NULL;
    }
    PyTypeObject *position = (PyTypeObject *)args[0];
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *b = (const uint8_t *)view.buf;
    Py_ssize_t end = view.len, p = 0;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        goto error;
    while (p < end) {
        uint64_t tag;
        if (read_varint(b, &p, end, 5, &tag) < 0 || tag >> 3 == 0 || tag >> 32)
            goto other;
        unsigned wire_type = (unsigned)(tag & 7);
        if (tag >> 3 != 3) {   /* not a message id: consumer_id, ack_type, properties... */
            if (skip_field(b, &p, end, wire_type) < 0)
                goto other;
            continue;
        }
        uint64_t length;
        if (wire_type != 2 || read_varint(b, &p, end, 10, &length) < 0
                || length > (uint64_t)(end - p))
            goto other;
        Py_ssize_t id_end = p + (Py_ssize_t)length;
        uint64_t ledger_id = 0, entry_id = 0;
        while (p < id_end) {
            uint64_t id_tag, value;
            if (read_varint(b, &p, id_end, 5, &id_tag) < 0 || id_tag >> 3 == 0 || id_tag >> 32)
                goto other;
            unsigned field = (unsigned)(id_tag >> 3), type = (unsigned)(id_tag & 7);
            if (field == 1 || field == 2) {
                /* 9 bytes hold 63 bits: an id at or past 2**63 is declined here */
                if (type != 0 || read_varint(b, &p, id_end, 9, &value) < 0)
                    goto other;
                if (field == 1)
                    ledger_id = value;
                else
                    entry_id = value;
            }
            else if (field == 5) {   /* ack_set: an empty packed run holds no value */
                uint64_t run;
                Py_ssize_t q = p;
                if (type != 2 || read_varint(b, &q, id_end, 10, &run) < 0 || run != 0)
                    goto other;
                p = q;
            }
            else if (skip_field(b, &p, id_end, type) < 0)
                goto other;
        }
        PyObject *pos = position->tp_alloc(position, 2);
        if (pos == NULL)
            goto error;
        PyObject *l = PyLong_FromUnsignedLongLong(ledger_id);
        PyObject *e = PyLong_FromUnsignedLongLong(entry_id);
        PyTuple_SET_ITEM(pos, 0, l);
        PyTuple_SET_ITEM(pos, 1, e);
        if (l == NULL || e == NULL || PyList_Append(out, pos) < 0) {
            Py_DECREF(pos);
            goto error;
        }
        Py_DECREF(pos);
    }
    PyBuffer_Release(&view);
    return out;
other:
    Py_DECREF(out);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
error:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return NULL;
}

static PyMethodDef methods[] = {
    {"decode_sends", (PyCFunction)(void (*)(void))decode_sends, METH_FASTCALL,
     "decode_sends(SendFrame, crc32c, buf, pos, max_frame_size, out) -> int"},
    {"plain_metadata", (PyCFunction)plain_metadata, METH_O,
     "plain_metadata(entry) -> bool"},
    {"encode_message_run", (PyCFunction)(void (*)(void))encode_message_run, METH_FASTCALL,
     "encode_message_run(crc32c, by_reference_bytes, consumer_id, partition, positions, "
     "entries) -> list[bytes]"},
    {"scan_metadata", (PyCFunction)(void (*)(void))scan_metadata, METH_FASTCALL,
     "scan_metadata(fallback, single, min_batched_message_bytes, entry, max_message_size) -> "
     "(messages, partial, deliver_at varint) | None"},
    {"keyed_run", (PyCFunction)(void (*)(void))keyed_run, METH_FASTCALL,
     "keyed_run(fallback, hash128, withheld, unknown, entries) -> (keys, times, nothing)"},
    {"ack_positions", (PyCFunction)(void (*)(void))ack_positions, METH_FASTCALL,
     "ack_positions(Position, command) -> list[Position] | None"},
    {"peek_dispatch", (PyCFunction)(void (*)(void))peek_dispatch, METH_FASTCALL,
     "peek_dispatch(fallback, entry) -> (messages, deliver_at_time or None)"},
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
