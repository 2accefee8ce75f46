/* The interpreter handed to a storage thread back from a write or an fdatasync.
 *
 * Theory of operation
 * -------------------
 * Optional: built from pyproject.toml as an optional extension; storage/handoff.py loads it
 * when present, and otherwise uses os.pwrite, os.writev and os.fdatasync and never yields
 * (what ran before this module).
 *
 * Why. Under uvloop the event loop lets go of the interpreter lock (the GIL) between any two
 * of its callbacks (uv_run runs without it, each callback takes it) and takes it straight
 * back. CPython 3.11 lets a thread that waits for the lock ask its holder to let go only after
 * a whole switch interval (5 ms) in which the lock was never released; every release restarts
 * that wait, and the loop, already on a CPU, wins every race to take the lock back. So a
 * storage thread back from its fdatasync, whose next step is to hand a group commit to the
 * loop, waits for the lock for as long as the loop stays busy with callbacks: after a few
 * milliseconds of periodic work the loop catches up on socket reads for tens of
 * milliseconds, and every receipt waits all that time.
 *
 * How. The storage threads' blocking calls go through the three functions below, which count
 * the calling thread as waiting (one atomic counter, no lock) from the system call's return
 * until the thread holds the interpreter again. The loop calls yield_to_waiting() between two
 * pieces of its own work (each socket read it is handed, broker/net/connection.py): when a
 * thread is counted it lets go of the interpreter, sleeps on the counter (a futex; woken by
 * the last thread to get the lock) until no thread is counted, max_us at most, and takes the
 * lock back, after the storage thread's own next release. When none is counted it is one
 * atomic read.
 *
 * pwrite(fd, data, offset) -> int, writev(fd, buffers) -> int, fdatasync(fd) -> None
 *     As os.pwrite, os.writev and os.fdatasync (the same results and errors), counting the
 *     thread as above.
 * waiting() -> int
 *     How many threads are counted now.
 * stats() -> (waits, seconds waited, yields, seconds yielded)
 *     Since the start: the counted waits and their total time (each from the system call's
 *     return to the interpreter held), the loop's yields and their total time (from letting
 *     go of the interpreter to holding it again). /metrics exports them.
 * yield_to_waiting(max_us) -> bool
 *     Whether it let go of the interpreter (a thread was counted).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

/* Threads back from a system call, not yet holding the interpreter. */
static atomic_int waiting_threads;
/* The loop sleeps in yield_to_waiting: the last thread to get the interpreter wakes it. */
static atomic_int loop_yielding;
/* Figures for /metrics: the waits counted and their total, the loop's yields and theirs. */
static atomic_ullong waits, waited_ns, yields, yielded_ns;
/* When the calling thread was counted (one wait at a time per thread). */
static _Thread_local unsigned long long counted_at_ns;

static unsigned long long
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
}

#define MAX_IOV 1024

static void
wake_loop(void)
{
#ifdef __linux__
    syscall(SYS_futex, &waiting_threads, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#endif
}

/* Sleeps until waiting_threads moves from seen, or left_us passes. */
static void
sleep_on_count(int seen, double left_us)
{
#ifdef __linux__
    struct timespec ts = {0, (long)(left_us * 1000.0)};
    syscall(SYS_futex, &waiting_threads, FUTEX_WAIT_PRIVATE, seen, &ts, NULL, 0);
#else
    (void)seen;
    struct timespec ts = {0, (long)((left_us < 20.0 ? left_us : 20.0) * 1000.0)};
    nanosleep(&ts, NULL);
#endif
}

/* Right after a system call, still without the interpreter. */
static inline void
counted(void)
{
    counted_at_ns = now_ns();
    atomic_fetch_add_explicit(&waiting_threads, 1, memory_order_acq_rel);
}

/* The thread holds the interpreter again. */
static inline void
uncounted(void)
{
    atomic_fetch_add_explicit(&waits, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&waited_ns, now_ns() - counted_at_ns, memory_order_relaxed);
    if (atomic_fetch_sub_explicit(&waiting_threads, 1, memory_order_acq_rel) == 1
            && atomic_load_explicit(&loop_yielding, memory_order_acquire)) {
        wake_loop();
    }
}

/* Runs `call` without the interpreter, keeps its errno in `err`, and counts the thread from
 * the call's return until it holds the interpreter again: the one place that order lives. */
#define COUNTED_CALL(result, err, call) \
    Py_BEGIN_ALLOW_THREADS \
    (result) = (call); \
    (err) = errno; \
    counted(); \
    Py_END_ALLOW_THREADS \
    uncounted()

static PyObject *
handoff_fdatasync(PyObject *module, PyObject *arg)
{
    int fd = PyObject_AsFileDescriptor(arg);
    if (fd < 0) {
        return NULL;
    }
    int rc, err;
    COUNTED_CALL(rc, err, fdatasync(fd));
    if (rc != 0) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

static PyObject *
handoff_pwrite(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "pwrite(fd, data, offset) takes 3 arguments");
        return NULL;
    }
    int fd = PyObject_AsFileDescriptor(args[0]);
    if (fd < 0) {
        return NULL;
    }
    long long offset = PyLong_AsLongLong(args[2]);
    if (offset == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    ssize_t n;
    int err;
    COUNTED_CALL(n, err, pwrite(fd, view.buf, (size_t)view.len, (off_t)offset));
    PyBuffer_Release(&view);
    if (n < 0) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromSsize_t(n);
}

static PyObject *
handoff_writev(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "writev(fd, buffers) takes 2 arguments");
        return NULL;
    }
    int fd = PyObject_AsFileDescriptor(args[0]);
    if (fd < 0) {
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[1], "writev() arg 2 must be a sequence");
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    if (count > MAX_IOV) {   /* what the kernel answers os.writev */
        Py_DECREF(seq);
        errno = EINVAL;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    struct iovec iov[MAX_IOV];
    Py_buffer views[MAX_IOV];
    Py_ssize_t got = 0;
    for (; got < count; got++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, got), &views[got],
                               PyBUF_SIMPLE) < 0) {
            break;
        }
        iov[got].iov_base = views[got].buf;
        iov[got].iov_len = (size_t)views[got].len;
    }
    PyObject *result = NULL;
    if (got == count) {
        ssize_t n;
        int err;
        COUNTED_CALL(n, err, writev(fd, iov, (int)count));
        if (n < 0) {
            errno = err;
            PyErr_SetFromErrno(PyExc_OSError);
        }
        else {
            result = PyLong_FromSsize_t(n);
        }
    }
    for (Py_ssize_t i = 0; i < got; i++) {
        PyBuffer_Release(&views[i]);
    }
    Py_DECREF(seq);
    return result;
}

static PyObject *
handoff_waiting(PyObject *module, PyObject *unused)
{
    return PyLong_FromLong(atomic_load_explicit(&waiting_threads, memory_order_acquire));
}

static double
now_us(void)
{
    return (double)now_ns() / 1e3;
}

static PyObject *
handoff_stats(PyObject *module, PyObject *unused)
{
    return Py_BuildValue(
        "(KdKd)", atomic_load_explicit(&waits, memory_order_relaxed),
        (double)atomic_load_explicit(&waited_ns, memory_order_relaxed) / 1e9,
        atomic_load_explicit(&yields, memory_order_relaxed),
        (double)atomic_load_explicit(&yielded_ns, memory_order_relaxed) / 1e9);
}

static PyObject *
handoff_yield(PyObject *module, PyObject *arg)
{
    long max_us = PyLong_AsLong(arg);
    if (max_us == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (atomic_load_explicit(&waiting_threads, memory_order_acquire) <= 0 || max_us <= 0) {
        Py_RETURN_FALSE;
    }
    unsigned long long started = now_ns();
    Py_BEGIN_ALLOW_THREADS
    atomic_store_explicit(&loop_yielding, 1, memory_order_release);
    double deadline = (double)started / 1e3 + (double)max_us;
    for (;;) {
        int seen = atomic_load_explicit(&waiting_threads, memory_order_acquire);
        double left = deadline - now_us();
        if (seen <= 0 || left <= 0) {
            break;
        }
        sleep_on_count(seen, left);
    }
    atomic_store_explicit(&loop_yielding, 0, memory_order_release);
    Py_END_ALLOW_THREADS
    atomic_fetch_add_explicit(&yields, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&yielded_ns, now_ns() - started, memory_order_relaxed);
    Py_RETURN_TRUE;
}

static PyMethodDef handoff_methods[] = {
    {"fdatasync", handoff_fdatasync, METH_O,
     "os.fdatasync, the thread counted as waiting until it holds the interpreter again."},
    {"pwrite", (PyCFunction)(void (*)(void))handoff_pwrite, METH_FASTCALL,
     "os.pwrite, the thread counted as waiting until it holds the interpreter again."},
    {"writev", (PyCFunction)(void (*)(void))handoff_writev, METH_FASTCALL,
     "os.writev, the thread counted as waiting until it holds the interpreter again."},
    {"waiting", handoff_waiting, METH_NOARGS,
     "How many threads are back from a system call and wait for the interpreter."},
    {"stats", handoff_stats, METH_NOARGS,
     "(waits, seconds waited, loop yields, seconds the loop yielded) since the start."},
    {"yield_to_waiting", handoff_yield, METH_O,
     "Let the counted threads take the interpreter, max_us at most; whether any was counted."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef handoff_module = {
    PyModuleDef_HEAD_INIT, "_handoff",
    "The interpreter handed to a storage thread back from a write or an fdatasync.", -1,
    handoff_methods,
};

PyMODINIT_FUNC
PyInit__handoff(void)
{
    return PyModule_Create(&handoff_module);
}
