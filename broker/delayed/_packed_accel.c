/* The delayed index's C helpers: PackedTimeIndex.push_run's loop, and the timerfd calls of
 * the trackers' precise wake-up.
 *
 * Theory of operation
 * -------------------
 * Optional: built from pyproject.toml as an optional extension; broker/delayed/packed.py uses
 * it when present, and PackedTimeIndex.push_run_py is the reference. The result is the
 * reference's, entry for entry (tests/delayed/test_delayed_packed_accel.py compares the two
 * indexes over random runs, ties, heads and splits):
 *
 * insert_run(index, ts_cols, pos_cols, maxes, times, packed) -> (inserted, touched)
 *     The pairs (times[k], packed[k]) sorted by (time, position), each inserted after the one
 *     before, exactly as the reference's loop does: the chunk and the offset in it searched
 *     from where the last one went; an entry past its chunk's last time appended to it. A pair
 *     whose time the chunk holds already (a run of one time is ordered by position, possibly
 *     across chunks) is handed to index.push(ts, packed) itself, which counts it and may split
 *     chunks; the search then starts over from the chunk maxima and index._head, as the
 *     reference's does. Returns how many pairs were inserted here (the caller adds them to
 *     its length) and the indexes of the chunks touched, as the reference lists
 *     them (the caller splits those over their size). ts_cols / pos_cols are the index's lists of array('q') / array('Q') chunks
 *     and maxes its list of chunk maxima; the index must not be empty and the run must hold
 *     at least one pair. Times are int64, positions uint64.
 *
 * timerfd_open() -> fd
 * timerfd_arm(fd, epoch_ns)
 *     A non-blocking, close-on-exec timerfd on CLOCK_REALTIME (the clock of deliver times), and
 *     its one-shot expiry set to the absolute time epoch_ns (0 disarms it): the descriptor
 *     turns readable at that time itself (broker/delayed/wake.py). Python 3.11's os module has
 *     no timerfd calls. OSError from the kernel as os would raise it.
 *
 * The chunk columns are read through the buffer protocol and grown with the arrays' own
 * insert and append (so an array's memory is only ever managed by the array module).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#ifdef __linux__
#include <sys/timerfd.h>
#include <time.h>
#endif

typedef struct {
    int64_t ts;
    uint64_t pos;
} Pair;

static int
pair_cmp(const void *a, const void *b)
{
    const Pair *x = a, *y = b;
    if (x->ts != y->ts)
        return x->ts < y->ts ? -1 : 1;
    if (x->pos != y->pos)
        return x->pos < y->pos ? -1 : 1;
    return 0;
}

/* bisect_left over maxes[lo:] for ts; -1 with an exception set on a non-int. */
static Py_ssize_t
bisect_maxes(PyObject *maxes, int64_t ts, Py_ssize_t lo)
{
    Py_ssize_t hi = PyList_GET_SIZE(maxes);
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        long long v = PyLong_AsLongLong(PyList_GET_ITEM(maxes, mid));
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (v < ts)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The chunk's time column: its length and bisect_left(col, ts, lo); -1 with an exception set
 * when it is not a buffer of int64. *at_j is col[j] when j < len. */
static int
bisect_col(PyObject *col, int64_t ts, Py_ssize_t lo, Py_ssize_t *len, Py_ssize_t *j,
           int64_t *at_j)
{
    Py_buffer view;
    if (PyObject_GetBuffer(col, &view, PyBUF_FORMAT) < 0)
        return -1;
    if (view.itemsize != 8 || view.format == NULL || view.format[0] != 'q'
            || view.format[1] != '\0') {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "time columns must be array('q')");
        return -1;
    }
    const int64_t *v = (const int64_t *)view.buf;
    Py_ssize_t n = view.len / 8, hi = n;
    if (lo > n)
        lo = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (v[mid] < ts)
            lo = mid + 1;
        else
            hi = mid;
    }
    *len = n;
    *j = lo;
    *at_j = lo < n ? v[lo] : 0;
    PyBuffer_Release(&view);
    return 0;
}

static int
call2(PyObject *obj, PyObject *name, PyObject *a, PyObject *b)
{
    PyObject *args[3] = {obj, a, b};
    PyObject *r = PyObject_VectorcallMethod(name, args, b == NULL ? 2 : 3, NULL);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

static PyObject *s_insert, *s_append, *s_push, *s_head;

static int
note(PyObject *touched, Py_ssize_t i)
{
    PyObject *v = PyLong_FromSsize_t(i);
    if (v == NULL)
        return -1;
    int r = PyList_Append(touched, v);
    Py_DECREF(v);
    return r;
}

/* index._head as a Py_ssize_t; -1 with an exception set. */
static Py_ssize_t
read_head(PyObject *index)
{
    PyObject *h = PyObject_GetAttr(index, s_head);
    if (h == NULL)
        return -1;
    Py_ssize_t v = PyLong_AsSsize_t(h);
    Py_DECREF(h);
    return v;
}

static PyObject *
insert_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "insert_run takes 6 arguments");
        return NULL;
    }
    PyObject *index = args[0], *ts_cols = args[1], *pos_cols = args[2], *maxes = args[3];
    if (!PyList_Check(ts_cols) || !PyList_Check(pos_cols) || !PyList_Check(maxes)) {
        PyErr_SetString(PyExc_TypeError, "chunks and maxima must be lists");
        return NULL;
    }
    PyObject *times = PySequence_Fast(args[4], "times must be a sequence");
    if (times == NULL)
        return NULL;
    PyObject *packed = PySequence_Fast(args[5], "positions must be a sequence");
    if (packed == NULL) {
        Py_DECREF(times);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(times);
    Pair *pairs = NULL;
    PyObject *result = NULL;
    PyObject *touched = PyList_New(0);
    if (touched == NULL)
        goto done;
    if (n != PySequence_Fast_GET_SIZE(packed)) {
        PyErr_SetString(PyExc_ValueError, "times and positions differ in length");
        goto done;
    }
    if (n == 0 || PyList_GET_SIZE(maxes) == 0) {
        PyErr_SetString(PyExc_ValueError, "insert_run needs a pair and a non-empty index");
        goto done;
    }
    pairs = PyMem_Malloc(sizeof(Pair) * (size_t)n);
    if (pairs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        long long t = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(times, k));
        if (t == -1 && PyErr_Occurred())
            goto done;
        unsigned long long p = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(packed, k));
        if (p == (unsigned long long)-1 && PyErr_Occurred())
            goto done;
        pairs[k].ts = t;
        pairs[k].pos = p;
    }
    qsort(pairs, (size_t)n, sizeof(Pair), pair_cmp);

    Py_ssize_t last = PyList_GET_SIZE(maxes) - 1;
    Py_ssize_t i = bisect_maxes(maxes, pairs[0].ts, 0);
    if (i < 0)
        goto done;
    if (i > last)
        i = last;
    Py_ssize_t inserted = 0, lo = 0;
    if (note(touched, i) < 0)
        goto done;
    if (i == 0 && (lo = read_head(index)) < 0 && PyErr_Occurred())
        goto done;
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t ts = pairs[k].ts;
        uint64_t one = pairs[k].pos;
        long long max_i = PyLong_AsLongLong(PyList_GET_ITEM(maxes, i));
        if (max_i == -1 && PyErr_Occurred())
            goto done;
        if (max_i < ts && i < last) {
            i = bisect_maxes(maxes, ts, i + 1);
            if (i < 0)
                goto done;
            if (i > last)
                i = last;
            lo = 0;
            if (note(touched, i) < 0)
                goto done;
            max_i = PyLong_AsLongLong(PyList_GET_ITEM(maxes, i));
            if (max_i == -1 && PyErr_Occurred())
                goto done;
        }
        PyObject *ts_col = PyList_GET_ITEM(ts_cols, i), *pos_col = PyList_GET_ITEM(pos_cols, i);
        Py_ssize_t len, j;
        int64_t at_j;
        if (bisect_col(ts_col, ts, lo, &len, &j, &at_j) < 0)
            goto done;
        PyObject *t_obj = PyLong_FromLongLong(ts);
        if (t_obj == NULL)
            goto done;
        PyObject *p_obj = PyLong_FromUnsignedLongLong(one);
        if (p_obj == NULL) {
            Py_DECREF(t_obj);
            goto done;
        }
        if (ts > max_i || lo >= len) {     /* the tail (lo is there after a tail one) */
            int bad = call2(ts_col, s_append, t_obj, NULL) < 0
                      || call2(pos_col, s_append, p_obj, NULL) < 0
                      || PyList_SetItem(maxes, i, Py_NewRef(t_obj)) < 0;
            Py_DECREF(t_obj);
            Py_DECREF(p_obj);
            if (bad)
                goto done;
            lo = len + 1;
            inserted++;
            continue;
        }
        if (at_j == ts) {                  /* this time is held: by position, as push does */
            int bad = call2(index, s_push, t_obj, p_obj) < 0;
            Py_DECREF(t_obj);
            Py_DECREF(p_obj);
            if (bad)
                goto done;
            last = PyList_GET_SIZE(maxes) - 1;    /* push may have split a chunk */
            i = bisect_maxes(maxes, ts, 0);
            if (i < 0)
                goto done;
            if (i > last)
                i = last;
            if (note(touched, i) < 0 || (i < last && note(touched, i + 1) < 0))
                goto done;      /* (i + 1: the upper half of a split) */
            lo = 0;
            if (i == 0 && (lo = read_head(index)) < 0 && PyErr_Occurred())
                goto done;
            continue;
        }
        PyObject *j_obj = PyLong_FromSsize_t(j);
        if (j_obj == NULL) {
            Py_DECREF(t_obj);
            Py_DECREF(p_obj);
            goto done;
        }
        int bad = call2(ts_col, s_insert, j_obj, t_obj) < 0
                  || call2(pos_col, s_insert, j_obj, p_obj) < 0;
        Py_DECREF(j_obj);
        Py_DECREF(t_obj);
        Py_DECREF(p_obj);
        if (bad)
            goto done;
        lo = j + 1;
        inserted++;
    }
    result = Py_BuildValue("(nO)", inserted, touched);
done:
    Py_XDECREF(touched);
    PyMem_Free(pairs);
    Py_DECREF(times);
    Py_DECREF(packed);
    return result;
}


#ifdef __linux__
static PyObject *
timerfd_open(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(unused))
{
    int fd = timerfd_create(CLOCK_REALTIME, TFD_NONBLOCK | TFD_CLOEXEC);
    if (fd < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    return PyLong_FromLong(fd);
}

static PyObject *
timerfd_arm(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "timerfd_arm takes 2 arguments");
        return NULL;
    }
    long fd = PyLong_AsLong(args[0]);
    if (fd == -1 && PyErr_Occurred())
        return NULL;
    if (fd < 0 || fd > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "timerfd_arm: not a descriptor");
        return NULL;
    }
    long long when = PyLong_AsLongLong(args[1]);
    if (when == -1 && PyErr_Occurred())
        return NULL;
    if (when < 0) {
        PyErr_SetString(PyExc_ValueError, "timerfd_arm: a negative time");
        return NULL;
    }
    struct itimerspec spec = {{0, 0}, {(time_t)(when / 1000000000LL), (long)(when % 1000000000LL)}};
    if (timerfd_settime((int)fd, TFD_TIMER_ABSTIME, &spec, NULL) < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}
#endif

static PyMethodDef methods[] = {
    {"insert_run", (PyCFunction)(void (*)(void))insert_run, METH_FASTCALL,
     "insert_run(index, ts_cols, pos_cols, maxes, times, packed) -> (inserted, touched)"},
#ifdef __linux__
    {"timerfd_open", (PyCFunction)timerfd_open, METH_NOARGS, "timerfd_open() -> fd"},
    {"timerfd_arm", (PyCFunction)(void (*)(void))timerfd_arm, METH_FASTCALL,
     "timerfd_arm(fd, epoch_ns): the absolute expiry (0 disarms)"},
#endif
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "broker.delayed._packed_accel",
    "The C twin of PackedTimeIndex.push_run's loop (see broker/delayed/packed.py) and the "
    "timerfd calls of broker/delayed/wake.py.", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__packed_accel(void)
{
    s_insert = PyUnicode_InternFromString("insert");
    s_append = PyUnicode_InternFromString("append");
    s_push = PyUnicode_InternFromString("push");
    s_head = PyUnicode_InternFromString("_head");
    if (s_insert == NULL || s_append == NULL || s_push == NULL || s_head == NULL)
        return NULL;
    return PyModule_Create(&module_def);
}
