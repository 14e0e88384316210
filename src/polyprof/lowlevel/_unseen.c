/* polyprof.lowlevel._unseen: polyprof's work kept out of the program's profilers.
 *
 * A Python profile function (torch.profiler's with_stack tracer, cProfile) sees every
 * Python frame of every thread state, and every call of a built-in function made from
 * Python code. What it does not see: C code that calls no Python while it has no
 * thread state, calls of objects that are not built-in functions (the eval loop
 * reports C calls only for those), and frames run while the thread's profile function
 * is off. So:
 *
 * - Quiet(fn, then=None): a callable (not a built-in function) that calls fn with the
 *   calling thread's profile function off, then puts it back; with ``then``, it next
 *   calls then(*args) with the profile function on and returns that result (a hook
 *   that must let the program's own work be seen); with ``failed``, a ``then`` that
 *   raises is followed by failed(*args), unseen, before its exception goes on.
 * - Gated(fn): calls fn while holding the gate, the lock a Ticker holds while its
 *   thread has a thread state (waiting for it at most a second). Wrapped around the
 *   start of a profiler that walks the thread states (torch's _enable_profiler), it
 *   never finds a Ticker's.
 * - Ticker(fn, first_s): a native thread that waits with no thread state; at each
 *   wake-up it takes the gate, makes a thread state, calls fn() (which returns the
 *   seconds until the next call, or None to end), and drops the thread state again.
 *   stop(timeout_s) ends it (never calling fn again) and waits for it. Out of memory
 *   (a program at its RLIMIT_AS), a wake-up with no room for a thread state skips its
 *   call (CPython cannot fail that allocation: a NULL dereference in 3.11, a fatal
 *   error in 3.12+), and a MemoryError from fn is cleared: neither prints, both are
 *   counted (memory_errors()), and the next call comes after fn's last delay.
 * - exec_frameless(code, globals): exec with no frame under the code's (the script of
 *   `polyprof run` sees itself at the bottom of the stack, as under plain python).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

static PyThread_type_lock gate = NULL;
static unsigned long gate_owner = 0; /* thread ident holding the gate, 0 if none */

static void gate_enter(void) {
    PyThread_acquire_lock(gate, WAIT_LOCK);
    gate_owner = PyThread_get_thread_ident();
}

static void gate_leave(void) {
    gate_owner = 0;
    PyThread_release_lock(gate);
}

/* ---- Quiet ---------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *fn;
    PyObject *then;
    PyObject *failed;
} Quiet;

static PyObject *quiet_call(Quiet *self, PyObject *args, PyObject *kw) {
    PyThreadState *ts = PyThreadState_Get();
    Py_tracefunc f = ts->c_profilefunc;
    PyObject *obj = ts->c_profileobj;
    if (f != NULL) {
        Py_XINCREF(obj);
        PyEval_SetProfile(NULL, NULL);
    }
    PyObject *res = PyObject_Call(self->fn, args, kw);
    if (f != NULL) {
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        PyEval_SetProfile(f, obj);
        Py_XDECREF(obj);
        PyErr_Restore(t, v, tb);
    }
    if (res == NULL || self->then == NULL)
        return res;
    Py_DECREF(res);
    res = PyObject_Call(self->then, args, kw);
    if (res == NULL && self->failed != NULL) {
        /* then raised: failed(*args), unseen like fn, and then's exception goes on */
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        Quiet undo = {.fn = self->failed};
        PyObject *r = quiet_call(&undo, args, kw);
        if (r == NULL)
            PyErr_WriteUnraisable(self->failed);
        Py_XDECREF(r);
        PyErr_Restore(t, v, tb);
    }
    return res;
}

static int quiet_init(Quiet *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"fn", "then", "failed", NULL};
    PyObject *fn, *then = Py_None, *failed = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OO:Quiet", names, &fn, &then, &failed))
        return -1;
    if (!PyCallable_Check(fn) || (then != Py_None && !PyCallable_Check(then))
        || (failed != Py_None && !PyCallable_Check(failed))) {
        PyErr_SetString(PyExc_TypeError, "Quiet: fn, then and failed must be callable");
        return -1;
    }
    Py_INCREF(fn);
    Py_XSETREF(self->fn, fn);
    Py_XSETREF(self->then, then == Py_None ? NULL : (Py_INCREF(then), then));
    Py_XSETREF(self->failed, failed == Py_None ? NULL : (Py_INCREF(failed), failed));
    return 0;
}

static int quiet_traverse(Quiet *self, visitproc visit, void *arg) {
    Py_VISIT(self->fn);
    Py_VISIT(self->then);
    Py_VISIT(self->failed);
    return 0;
}

static int quiet_clear(Quiet *self) {
    Py_CLEAR(self->fn);
    Py_CLEAR(self->then);
    Py_CLEAR(self->failed);
    return 0;
}

static void quiet_dealloc(Quiet *self) {
    PyObject_GC_UnTrack(self);
    quiet_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* As a class attribute it binds like a function (a method hook). */
static PyObject *quiet_get(PyObject *self, PyObject *obj, PyObject *type) {
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, obj);
}

/* A Quiet put in a module's or class's place of a function (``then``) looks like it:
   its name, qualified name, module and ``__wrapped__`` (so ``inspect.signature`` gives
   its signature), and it pickles by reference as that function does. */
static PyObject *quiet_shown(Quiet *self) {
    return self->then != NULL ? self->then : self->fn;
}

static PyObject *quiet_attr(Quiet *self, void *name) {
    return PyObject_GetAttrString(quiet_shown(self), (const char *)name);
}

static PyObject *quiet_wrapped(Quiet *self, void *closure) {
    PyObject *shown = quiet_shown(self);
    Py_INCREF(shown);
    return shown;
}

static PyObject *quiet_reduce(Quiet *self, PyObject *unused) {
    return PyObject_GetAttrString(quiet_shown(self), "__qualname__");
}

static PyGetSetDef quiet_getset[] = {
    {"__wrapped__", (getter)quiet_wrapped, NULL, "the function it stands for", NULL},
    {"__name__", (getter)quiet_attr, NULL, NULL, "__name__"},
    {"__qualname__", (getter)quiet_attr, NULL, NULL, "__qualname__"},
    {"__module__", (getter)quiet_attr, NULL, NULL, "__module__"},
    {NULL},
};

static PyMethodDef quiet_methods[] = {
    {"__reduce__", (PyCFunction)quiet_reduce, METH_NOARGS, "pickled by reference, as the function it stands for"},
    {NULL},
};

static PyTypeObject QuietType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "polyprof.lowlevel._unseen.Quiet",
    .tp_basicsize = sizeof(Quiet),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Quiet(fn, then=None, failed=None): fn(*args) unseen by the thread's profile function, then then(*args) seen; if then raises, failed(*args) unseen.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)quiet_init,
    .tp_call = (ternaryfunc)quiet_call,
    .tp_descr_get = quiet_get,
    .tp_getset = quiet_getset,
    .tp_methods = quiet_methods,
    .tp_traverse = (traverseproc)quiet_traverse,
    .tp_clear = (inquiry)quiet_clear,
    .tp_dealloc = (destructor)quiet_dealloc,
};

/* ---- Gated ---------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *fn;
    unsigned long calls;
} Gated;

/* At most GATE_WAIT_US for the gate: a Ticker's call that waits for something the
 * caller holds (a lock around the profiler's start) must not deadlock the program; past
 * it the call goes on ungated (the worst then: a polyprof thread seen by the profiler). */
#define GATE_WAIT_US 1000000

static PyObject *gated_call(Gated *self, PyObject *args, PyObject *kw) {
    int held = 0;
    if (gate_owner != PyThread_get_thread_ident()) {
        Py_BEGIN_ALLOW_THREADS
        held = PyThread_acquire_lock_timed(gate, GATE_WAIT_US, 0) == PY_LOCK_ACQUIRED;
        Py_END_ALLOW_THREADS
        if (held)
            gate_owner = PyThread_get_thread_ident();
    }
    self->calls++;
    PyObject *res = PyObject_Call(self->fn, args, kw);
    if (held)
        gate_leave();
    return res;
}

static int gated_init(Gated *self, PyObject *args, PyObject *kw) {
    PyObject *fn;
    if (!PyArg_ParseTuple(args, "O:Gated", &fn))
        return -1;
    Py_INCREF(fn);
    Py_XSETREF(self->fn, fn);
    return 0;
}

static int gated_traverse(Gated *self, visitproc visit, void *arg) {
    Py_VISIT(self->fn);
    return 0;
}

static int gated_clear(Gated *self) {
    Py_CLEAR(self->fn);
    return 0;
}

static void gated_dealloc(Gated *self) {
    PyObject_GC_UnTrack(self);
    gated_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *gated_wrapped(Gated *self, void *closure) {
    Py_INCREF(self->fn);
    return self->fn;
}

static PyObject *gated_calls(Gated *self, void *closure) {
    return PyLong_FromUnsignedLong(self->calls);
}

static PyGetSetDef gated_getset[] = {
    {"__wrapped__", (getter)gated_wrapped, NULL, "the function called", NULL},
    {"calls", (getter)gated_calls, NULL, "how many times it was called", NULL},
    {NULL},
};

static PyTypeObject GatedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "polyprof.lowlevel._unseen.Gated",
    .tp_basicsize = sizeof(Gated),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Gated(fn): fn(*args) while no Ticker thread has a thread state.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)gated_init,
    .tp_call = (ternaryfunc)gated_call,
    .tp_getset = gated_getset,
    .tp_traverse = (traverseproc)gated_traverse,
    .tp_clear = (inquiry)gated_clear,
    .tp_dealloc = (destructor)gated_dealloc,
};

/* ---- Ticker --------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *fn;
    double first_s;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pid_t pid;
    int started, stopping, done, joined;
    unsigned long calls;
    double last_wait; /* what fn returned last (first_s before): the retry after a MemoryError */
} Ticker;

/* wake-ups skipped or calls failed for want of memory, every Ticker together */
static unsigned long memory_errors = 0;

/* Room for the thread state PyGILState_Ensure makes (a few hundred bytes to a few KiB,
 * by version, from malloc) and the first objects of fn's call, probed in this thread's
 * own malloc arena just before (malloc itself, not PyMem_RawMalloc: tracemalloc's hook
 * would make a thread state; the pointer goes through a volatile, so the pair stays). */
#define ROOM_PROBE_BYTES (64 * 1024)
static void *volatile room_probe;

/* the wait before a call that memory prevented is tried again: fn's last delay, kept
 * between 50 ms (no busy loop while the program is out of memory) and 1 s (a one-shot
 * timer's first delay may be long) */
static double retry_wait(const Ticker *t) {
    return t->last_wait < 0.05 ? 0.05 : t->last_wait > 1.0 ? 1.0 : t->last_wait;
}

static int room_for_a_call(void) {
    room_probe = malloc(ROOM_PROBE_BYTES);
    if (room_probe == NULL)
        return 0;
    free(room_probe);
    room_probe = NULL;
    return 1;
}

static void deadline_after(struct timespec *ts, double s) {
    clock_gettime(CLOCK_MONOTONIC, ts);
    if (s < 0)
        s = 0;
    if (s > 1e6)
        s = 1e6;
    long long ns = (long long)(s * 1e9) + ts->tv_nsec;
    ts->tv_sec += (time_t)(ns / 1000000000LL);
    ts->tv_nsec = (long)(ns % 1000000000LL);
}

/* One call of fn with a thread state made for it; returns the next wait, < 0 to end. */
static double ticker_call(Ticker *t) {
    double next = -1;
    gate_enter();
#if PY_VERSION_HEX >= 0x030D0000
    if (Py_IsFinalizing()) {
#else
    if (_Py_IsFinalizing()) {
#endif
        ;
    } else if (!room_for_a_call()) { /* no thread state can be made now: try again later */
        __atomic_fetch_add(&memory_errors, 1, __ATOMIC_RELAXED); /* no GIL held here */
        next = retry_wait(t);
    } else {
        PyGILState_STATE g = PyGILState_Ensure();
        PyObject *r = PyObject_CallNoArgs(t->fn);
        if (r == NULL && PyErr_ExceptionMatches(PyExc_MemoryError)) {
            PyErr_Clear(); /* never into the program's stderr: counted, called again later */
            __atomic_fetch_add(&memory_errors, 1, __ATOMIC_RELAXED);
            next = retry_wait(t);
        } else if (r == NULL) {
            PyErr_WriteUnraisable(t->fn);
        } else if (r != Py_None) {
            next = PyFloat_AsDouble(r);
            if (next == -1 && PyErr_Occurred()) {
                PyErr_WriteUnraisable(t->fn);
                next = -1;
            } else {
                t->last_wait = next;
            }
        }
        Py_XDECREF(r);
        t->calls++;
        PyGILState_Release(g); /* made by Ensure: the thread state is deleted here */
    }
    gate_leave();
    return next;
}

static void *ticker_main(void *arg) {
    Ticker *t = (Ticker *)arg;
    struct timespec deadline;
    double wait = t->first_s;
    pthread_mutex_lock(&t->mu);
    while (!t->stopping) {
        deadline_after(&deadline, wait);
        int rc = 0;
        while (!t->stopping && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&t->cv, &t->mu, &deadline);
        if (t->stopping)
            break;
        pthread_mutex_unlock(&t->mu);
        wait = ticker_call(t);
        pthread_mutex_lock(&t->mu);
        if (wait < 0)
            break;
    }
    t->done = 1;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

static int ticker_init(Ticker *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"fn", "first_s", NULL};
    PyObject *fn;
    double first = 0;
    if (self->started) {
        PyErr_SetString(PyExc_RuntimeError, "Ticker: already started");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|d:Ticker", names, &fn, &first))
        return -1;
    Py_INCREF(fn);
    Py_XSETREF(self->fn, fn);
    self->first_s = first;
    self->last_wait = first;
    pthread_mutex_init(&self->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&self->cv, &ca);
    pthread_condattr_destroy(&ca);
    self->pid = getpid();
    Py_INCREF(self); /* the thread's reference, dropped by stop() once it has ended */
    if (pthread_create(&self->thread, NULL, ticker_main, self) != 0) {
        Py_DECREF(self);
        PyErr_SetString(PyExc_OSError, "Ticker: cannot start a thread");
        return -1;
    }
    self->started = 1;
    return 0;
}

static PyObject *ticker_stop(Ticker *self, PyObject *args) {
    double timeout = 5.0;
    if (!PyArg_ParseTuple(args, "|d:stop", &timeout))
        return NULL;
    if (!self->started || self->joined)
        Py_RETURN_TRUE;
    if (self->pid != getpid()) { /* a forked child: that thread is not here */
        self->joined = 1;
        Py_RETURN_TRUE;
    }
    if (pthread_equal(self->thread, pthread_self())) { /* from fn itself: ends after it */
        self->stopping = 1;
        Py_RETURN_FALSE;
    }
    int done;
    Py_BEGIN_ALLOW_THREADS
    struct timespec deadline;
    deadline_after(&deadline, timeout);
    pthread_mutex_lock(&self->mu);
    self->stopping = 1;
    pthread_cond_broadcast(&self->cv);
    int rc = 0;
    while (!self->done && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&self->cv, &self->mu, &deadline);
    done = self->done;
    pthread_mutex_unlock(&self->mu);
    if (done)
        pthread_join(self->thread, NULL);
    Py_END_ALLOW_THREADS
    if (!done) {
        pthread_detach(self->thread); /* fn overran: it ends on its own, never called again */
        self->joined = 1;
        Py_RETURN_FALSE;
    }
    self->joined = 1;
    Py_DECREF(self); /* the thread's reference */
    Py_RETURN_TRUE;
}

static PyObject *ticker_alive(Ticker *self, void *closure) {
    return PyBool_FromLong(self->started && !self->joined && self->pid == getpid() && !self->done);
}

static PyObject *ticker_calls(Ticker *self, void *closure) {
    return PyLong_FromUnsignedLong(self->calls);
}

static int ticker_traverse(Ticker *self, visitproc visit, void *arg) {
    Py_VISIT(self->fn);
    return 0;
}

static void ticker_dealloc(Ticker *self) {
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->fn);
    if (self->started) {
        pthread_mutex_destroy(&self->mu);
        pthread_cond_destroy(&self->cv);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef ticker_methods[] = {
    {"stop", (PyCFunction)ticker_stop, METH_VARARGS,
     "stop(timeout_s=5.0): end the thread (fn is not called again); True once it has ended"},
    {NULL},
};

static PyGetSetDef ticker_getset[] = {
    {"alive", (getter)ticker_alive, NULL, "the thread runs", NULL},
    {"calls", (getter)ticker_calls, NULL, "how many times fn was called", NULL},
    {NULL},
};

static PyTypeObject TickerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "polyprof.lowlevel._unseen.Ticker",
    .tp_basicsize = sizeof(Ticker),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Ticker(fn, first_s=0): fn() on a native thread after first_s, then after each "
              "float it returns, until it returns None or stop() is called.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)ticker_init,
    .tp_methods = ticker_methods,
    .tp_getset = ticker_getset,
    .tp_traverse = (traverseproc)ticker_traverse,
    .tp_dealloc = (destructor)ticker_dealloc,
};

/* ---- exec_frameless ------------------------------------------------------------- */

/* Where the thread state keeps its innermost frame, which a new frame takes as its caller. */
#if PY_VERSION_HEX >= 0x030D0000
#define CURRENT_FRAME(ts) ((ts)->current_frame)
#elif PY_VERSION_HEX >= 0x030B0000
#define CURRENT_FRAME(ts) ((ts)->cframe->current_frame)
#endif
/* the thread's count of Python frames toward sys.getrecursionlimit() (remaining = limit - depth) */
#if PY_VERSION_HEX >= 0x030C0000
#define RECURSION_REMAINING(ts) ((ts)->py_recursion_remaining)
#define RECURSION_LIMIT(ts) ((ts)->py_recursion_limit)
#else
#define RECURSION_REMAINING(ts) ((ts)->recursion_remaining)
#define RECURSION_LIMIT(ts) ((ts)->recursion_limit)
#endif

static PyObject *exec_frameless(PyObject *mod, PyObject *args) {
    PyObject *code, *globals;
    if (!PyArg_ParseTuple(args, "O!O!:exec_frameless", &PyCode_Type, &code, &PyDict_Type, &globals))
        return NULL;
    /* as exec() does: code that reads __builtins__ from its globals (PyImport_Import) finds them */
    int has = PyDict_GetItemString(globals, "__builtins__") != NULL;
    if (!has && PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins()) < 0)
        return NULL;
#ifdef CURRENT_FRAME
    PyThreadState *ts = PyThreadState_Get();
    struct _PyInterpreterFrame *saved = CURRENT_FRAME(ts);
    /* the frames beneath do not count toward the recursion limit either: the code gets
       the depth it has under python, and sys.getrecursionlimit() is unchanged */
    int below = RECURSION_LIMIT(ts) - RECURSION_REMAINING(ts);
    RECURSION_REMAINING(ts) += below;
    CURRENT_FRAME(ts) = NULL;
    PyObject *res = PyEval_EvalCode(code, globals, globals);
    CURRENT_FRAME(ts) = saved;
    RECURSION_REMAINING(ts) -= below;
    if (RECURSION_REMAINING(ts) < 50) /* the code lowered the limit below the frames beneath */
        Py_SetRecursionLimit(RECURSION_LIMIT(ts) + 50 - RECURSION_REMAINING(ts));
    return res;
#else
    return PyEval_EvalCode(code, globals, globals); /* not loaded on this version: PyInit refuses */
#endif
}

/* ---- module --------------------------------------------------------------------- */

static PyObject *after_fork_in_child(PyObject *mod, PyObject *unused) {
    /* the parent's Ticker may have held the gate at fork: that thread is not here */
    gate = PyThread_allocate_lock();
    gate_owner = 0;
    if (gate == NULL)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyObject *memory_errors_get(PyObject *mod, PyObject *unused) {
    return PyLong_FromUnsignedLong(__atomic_load_n(&memory_errors, __ATOMIC_RELAXED));
}

static PyMethodDef module_methods[] = {
    {"memory_errors", memory_errors_get, METH_NOARGS,
     "memory_errors(): Ticker wake-ups skipped, or calls failed, for want of memory so far"},
    {"exec_frameless", exec_frameless, METH_VARARGS,
     "exec_frameless(code, globals): exec(code, globals) with no frame beneath the code's"},
    {"after_fork_in_child", after_fork_in_child, METH_NOARGS, "a new gate in a forked child"},
    {NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_unseen", "polyprof's work kept out of the program's profilers", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__unseen(void) {
#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030E0000
    PyErr_SetString(PyExc_ImportError, "_unseen: built for CPython 3.11 to 3.13 only");
    return NULL;
#endif
    gate = PyThread_allocate_lock();
    if (gate == NULL)
        return PyErr_NoMemory();
    if (PyType_Ready(&QuietType) < 0 || PyType_Ready(&GatedType) < 0 || PyType_Ready(&TickerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&QuietType);
    Py_INCREF(&GatedType);
    Py_INCREF(&TickerType);
    if (PyModule_AddObject(m, "Quiet", (PyObject *)&QuietType) < 0 ||
        PyModule_AddObject(m, "Gated", (PyObject *)&GatedType) < 0 ||
        PyModule_AddObject(m, "Ticker", (PyObject *)&TickerType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
