/* polyprof.collect._fastsection: the compiled polyprof.section (the hot path of user sections).
 *
 * Same behaviour as the pure-Python fallback `PySection` in pysection.py (which stays
 * the reference): context manager, begin()/end(), decorator (delegated to
 * recorder._decorate, so functools.wraps semantics are shared), keyword stats, the
 * recorder's listeners, and one (name, start_ns, end_ns, stats_or_None, thread_ident)
 * tuple appended to the active recorder's `sections` list per completed section.
 *
 * Why C: in Python a section costs two bytecode-level method calls, two clock-function
 * calls and an attribute store per field; here the same work is a handful of C calls,
 * and `section("x")` is created through vectorcall without an args tuple.
 *
 * Reuse: one object may be open several times at once (a module-level
 * `ATTN = section("attn")` used by several threads, or recursion). The first opening
 * uses the fields in the object (the "slot", the fast path of a fresh object); any
 * further one goes to a per-object dict {thread ident: [(t0, sections list), ...]}.
 * `__exit__` closes the latest opening of the calling thread; `end()` may also close
 * an opening made on another thread (begin() here, end() there).
 *
 * Open sections: each object with an opening not yet closed (its slot taken, or one on
 * its stacks of further openings) is on one intrusive doubly linked list (two pointer
 * stores at the opening and at the close, no allocation), so a session that stops while
 * the program runs on (a capture) can record the sections still open, cut at its stop
 * (`open_sections`). An object leaves the list only when its slot is free and its stacks
 * are empty: an opening on a stack outlives the slot's when the slot closes first (thread
 * A holds the slot, B opens the same object, A closes).
 *
 * Everything below runs with the GIL held; state changes never straddle a call that
 * can run Python code (allocation may run the GC, hence finalizers).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <time.h>

/* The active recorder (owned references), or NULL with no session. */
static PyObject *g_recorder;
static PyObject *g_sections;   /* g_recorder.sections (a list) */
static PyObject *g_listeners;  /* g_recorder.listeners (a list, mutated in place) */
static PyObject *g_decorate;   /* recorder._decorate(section, fn) */
static PyObject *g_task_key;   /* recorder._task_key(tid): tid, or (tid, task id) in an asyncio task */
/* The crash journal's growth hook (set_growth): called on the recording thread when the
 * sections list reaches g_grow_at entries; it returns the next size to call it at. One
 * comparison per section otherwise. */
static PyObject *g_grow_fn;
static Py_ssize_t g_grow_at = PY_SSIZE_T_MAX;
static PyObject *s_notify;     /* "notify" */

/* The clock of time.perf_counter_ns(): CLOCK_MONOTONIC on Linux; elsewhere Python's own. */
static inline int64_t
now_ns(void)
{
#if defined(__linux__)
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + (int64_t)ts.tv_nsec;
#elif PY_VERSION_HEX >= 0x030D0000
    PyTime_t t;
    (void)PyTime_PerfCounterRaw(&t);
    return (int64_t)t;
#else
    return (int64_t)_PyTime_GetPerfCounter();
#endif
}

typedef struct Section {
    PyObject_HEAD
    PyObject *name;
    PyObject *stats;   /* dict of keyword stats, or NULL when there are none */
    PyObject *list;    /* the slot: the sections list it records into; NULL when free */
    int64_t t0;        /* the slot's start */
    unsigned long tid; /* the slot's thread */
    PyObject *more;    /* NULL, or dict {ident: [(t0, list), ...]} of further openings */
    struct Section *open_prev, *open_next;  /* on g_open while an opening is not closed */
} Section;

/* The objects with an opening not yet closed (borrowed: an object unlinks itself when its
 * slot is free and its stacks are empty, or when it is deallocated). */
static Section *g_open;

static inline int
open_linked(Section *self)
{
    return g_open == self || self->open_prev != NULL;
}

static inline int
open_none(Section *self)
{
    return self->list == NULL && (self->more == NULL || PyDict_GET_SIZE(self->more) == 0);
}

/* Put self on g_open (once). */
static void
open_link(Section *self)
{
    if (open_linked(self))
        return;
    self->open_prev = NULL;
    self->open_next = g_open;
    if (g_open != NULL)
        g_open->open_prev = self;
    g_open = self;
}

static void
open_unlink(Section *self)
{
    if (self->open_prev != NULL)
        self->open_prev->open_next = self->open_next;
    else if (g_open == self)
        g_open = self->open_next;
    if (self->open_next != NULL)
        self->open_next->open_prev = self->open_prev;
    self->open_prev = self->open_next = NULL;
}

static PyTypeObject SectionType;

/* Tell the recorder's listeners (e.g. the torch plugin) about an enter or exit. */
static int
notify(PyObject *name, PyObject *is_enter)
{
    PyObject *rec = g_recorder, *r;
    if (rec == NULL || g_listeners == NULL || PyList_GET_SIZE(g_listeners) == 0)
        return 0;
    Py_INCREF(rec);
    r = PyObject_CallMethodObjArgs(rec, s_notify, name, is_enter, NULL);
    Py_DECREF(rec);
    if (r == NULL)
        return -1;  /* notify() swallows Exceptions; only BaseExceptions get here */
    Py_DECREF(r);
    return 0;
}

static PyObject *
section_new_impl(PyTypeObject *type, PyObject *name, PyObject *stats)
{
    Section *self = PyObject_New(Section, type);
    if (self == NULL) {
        Py_XDECREF(stats);
        return NULL;
    }
    Py_INCREF(name);
    self->name = name;
    self->stats = stats;  /* stolen */
    self->list = NULL;
    self->t0 = 0;
    self->tid = 0;
    self->more = NULL;
    self->open_prev = self->open_next = NULL;
    return (PyObject *)self;
}

/* @section over a function, without a name: pysection.bare names it after the function
   (rare: once per decorated function, so the module is imported here, not at load). */
static PyObject *
bare_decorator(PyObject *type, PyObject *fn)
{
    PyObject *mod = PyImport_ImportModule("polyprof.collect.pysection"), *out;
    if (mod == NULL)
        return NULL;
    out = PyObject_CallMethod(mod, "bare", "OO", type, fn);
    Py_DECREF(mod);
    return out;
}

/* section(name, **stats) without building an args tuple. */
static PyObject *
section_vectorcall(PyObject *type, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), nkw, i;
    PyObject *name = NULL, *stats = NULL;
    if (nargs > 1) {
        PyErr_Format(PyExc_TypeError, "section() takes 1 positional argument but %zd were given", nargs);
        return NULL;
    }
    if (nargs == 1)
        name = args[0];
    nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (i = 0; i < nkw; i++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, i), *value = args[nargs + i];
        if (PyUnicode_CompareWithASCIIString(key, "name") == 0) {
            if (name != NULL) {
                PyErr_SetString(PyExc_TypeError, "section() got multiple values for argument 'name'");
                Py_XDECREF(stats);
                return NULL;
            }
            name = value;
            continue;
        }
        if (stats == NULL && (stats = PyDict_New()) == NULL)
            return NULL;
        if (PyDict_SetItem(stats, key, value) < 0) {
            Py_DECREF(stats);
            return NULL;
        }
    }
    if (name == NULL) {
        PyErr_SetString(PyExc_TypeError, "section() missing 1 required positional argument: 'name'");
        Py_XDECREF(stats);
        return NULL;
    }
    if (nargs == 1 && stats == NULL && !PyUnicode_Check(name) && PyCallable_Check(name))
        return bare_decorator(type, name);  /* @polyprof.section without a name */
    return section_new_impl((PyTypeObject *)type, name, stats);
}

static PyObject *
section_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    return PyVectorcall_Call((PyObject *)type, args, kwds);
}

static void
section_dealloc(Section *self)
{
    open_unlink(self);  /* slot taken, or openings left on its stacks (abandoned) */
    Py_XDECREF(self->name);
    Py_XDECREF(self->stats);
    Py_XDECREF(self->list);
    Py_XDECREF(self->more);
    PyObject_Free(self);
}

/* The key of this thread's (or, inside an asyncio task, this task's) stack of further
 * openings: recorder._task_key(tid). Only the slow paths call it. New reference. */
static PyObject *
stack_key(unsigned long tid)
{
    PyObject *t = PyLong_FromUnsignedLong(tid), *key;
    if (t == NULL || g_task_key == NULL)
        return t;
    key = PyObject_CallOneArg(g_task_key, t);
    Py_DECREF(t);
    return key;
}

/* A further opening (the slot is taken): push (t0, list) on this thread's (task's) stack. */
static int
push_more(Section *self, PyObject *list, unsigned long tid)
{
    PyObject *key, *stack, *entry, *t0;
    int rc = -1;
    if (self->more == NULL) {
        PyObject *d = PyDict_New();
        if (d == NULL)
            return -1;
        if (self->more == NULL)  /* re-check: PyDict_New may have run other threads */
            self->more = d;
        else
            Py_DECREF(d);
    }
    if ((key = stack_key(tid)) == NULL)
        return -1;
    stack = PyDict_GetItemWithError(self->more, key);
    if (stack == NULL) {
        if (PyErr_Occurred() || (stack = PyList_New(0)) == NULL)
            goto done;
        if (PyDict_SetItem(self->more, key, stack) < 0) {
            Py_DECREF(stack);
            goto done;
        }
        Py_DECREF(stack);  /* the dict holds it; only this thread removes its key */
    }
    if ((t0 = PyLong_FromLongLong(now_ns())) == NULL)
        goto done;
    entry = PyTuple_Pack(2, t0, list);
    Py_DECREF(t0);
    if (entry == NULL)
        goto done;
    rc = PyList_Append(stack, entry);
    Py_DECREF(entry);
    if (rc == 0)
        open_link(self);  /* open while this opening is, even once the slot closes */
done:
    Py_DECREF(key);
    return rc;
}

static PyObject *
section_enter(Section *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *list = g_sections;
    unsigned long tid;
    if (list == NULL)  /* no session: near free */
        return Py_NewRef(self);
    Py_INCREF(list);
    if (g_listeners != NULL && PyList_GET_SIZE(g_listeners) > 0 && notify(self->name, Py_True) < 0) {
        Py_DECREF(list);
        return NULL;
    }
    tid = PyThread_get_thread_ident();
    if (self->list == NULL) {  /* fast path: a fresh (or not currently open) object */
        self->list = list;     /* the reference taken above */
        self->tid = tid;
        self->t0 = now_ns();
        open_link(self);
        return Py_NewRef(self);
    }
    if (push_more(self, list, tid) < 0) {
        Py_DECREF(list);
        return NULL;
    }
    Py_DECREF(list);
    return Py_NewRef(self);
}

/* The list reached g_grow_at: ask the hook for the next size. Whatever the hook does
 * wrong turns the hook off: it must never reach the program. */
static void
grown(void)
{
    PyObject *fn = g_grow_fn, *r;
    Py_ssize_t at = -1;
    g_grow_at = PY_SSIZE_T_MAX;  /* not re-entered while it runs */
    Py_INCREF(fn);
    r = PyObject_CallNoArgs(fn);
    if (r != NULL) {
        at = PyLong_AsSsize_t(r);
        Py_DECREF(r);
    }
    if (at < 0 || PyErr_Occurred()) {
        PyErr_Clear();
        if (g_grow_fn == fn)
            Py_CLEAR(g_grow_fn);
        at = PY_SSIZE_T_MAX;
    }
    if (g_grow_fn == fn)
        g_grow_at = at;
    Py_DECREF(fn);
}

/* Append (name, t0, t1, stats or None, tid) to list. */
static int
record(Section *self, PyObject *list, int64_t t0, int64_t t1, unsigned long tid)
{
    PyObject *stats = self->stats != NULL && PyDict_GET_SIZE(self->stats) > 0 ? self->stats : Py_None;
    PyObject *tup = PyTuple_New(5), *a, *b, *c;
    int rc;
    if (tup == NULL)
        return -1;
    a = PyLong_FromLongLong(t0);
    b = PyLong_FromLongLong(t1);
    c = PyLong_FromUnsignedLong(tid);
    if (a == NULL || b == NULL || c == NULL) {
        Py_XDECREF(a);
        Py_XDECREF(b);
        Py_XDECREF(c);
        Py_DECREF(tup);
        return -1;
    }
    Py_INCREF(self->name);
    Py_INCREF(stats);
    PyTuple_SET_ITEM(tup, 0, self->name);
    PyTuple_SET_ITEM(tup, 1, a);
    PyTuple_SET_ITEM(tup, 2, b);
    PyTuple_SET_ITEM(tup, 3, stats);
    PyTuple_SET_ITEM(tup, 4, c);
    /* A tuple of a str, ints and None can be in no reference cycle: untracking it now
     * spares the cyclic GC from walking every record the session keeps (as the GC
     * itself would do at its first pass over the tuple). */
    if (stats == Py_None && PyUnicode_CheckExact(self->name))
        PyObject_GC_UnTrack(tup);
    rc = PyList_Append(list, tup);
    Py_DECREF(tup);
    if (rc == 0 && PyList_GET_SIZE(list) >= g_grow_at && g_grow_fn != NULL)
        grown();
    return rc;
}

/* Close the latest opening of this thread (loose: else the slot, whoever opened it).
 * The latest is the one that started last: an opening pushed on this thread's stack
 * while another thread held the slot may be older than the slot this thread took
 * afterwards. Returns 1 if a section was recorded, 0 if nothing was open, -1 on error. */
static int
close_section(Section *self, int loose)
{
    int64_t t1, t0;
    unsigned long tid, otid;
    PyObject *list;
    int rc, slot_mine;
    if (self->list == NULL && self->more == NULL)
        return 0;  /* entered with no session: nothing to close */
    t1 = now_ns();
    tid = PyThread_get_thread_ident();
    slot_mine = self->list != NULL && self->tid == tid;
    if (self->more != NULL && PyDict_GET_SIZE(self->more) > 0) {
        PyObject *key = stack_key(tid), *stack, *entry;
        Py_ssize_t n;
        int tasked;
        if (key == NULL)
            return -1;
        /* in an asyncio task, an opening on this task's stack is its latest: the slot
         * may be another task's of this thread, whatever its start time */
        tasked = PyTuple_Check(key);
        slot_mine = self->list != NULL && self->tid == tid;  /* re-read: allocation ran */
        stack = PyDict_GetItemWithError(self->more, key);
        if (stack != NULL && (n = PyList_GET_SIZE(stack)) > 0) {
            entry = PyList_GET_ITEM(stack, n - 1);
            t0 = PyLong_AsLongLong(PyTuple_GET_ITEM(entry, 0));
            if (tasked || !slot_mine || t0 >= self->t0) {
                Py_INCREF(entry);
                Py_INCREF(stack);
                rc = PyList_SetSlice(stack, n - 1, n, NULL);
                if (rc == 0 && PyList_GET_SIZE(stack) == 0)
                    rc = PyDict_DelItem(self->more, key);
                if (open_none(self))
                    open_unlink(self);
                Py_DECREF(stack);
                Py_DECREF(key);
                if (rc == 0)
                    rc = record(self, PyTuple_GET_ITEM(entry, 1), t0, t1, tid);
                Py_DECREF(entry);
                return rc < 0 ? -1 : 1;
            }
        }
        Py_DECREF(key);
        if (PyErr_Occurred())
            return -1;
    }
    if (self->list == NULL || (!slot_mine && !loose))
        return 0;  /* not opened on this thread (e.g. entered before the session began) */
    list = self->list;  /* take the slot before anything that can run other threads */
    self->list = NULL;
    if (open_none(self))  /* else openings on its stacks are still open */
        open_unlink(self);
    t0 = self->t0;
    otid = self->tid;
    rc = record(self, list, t0, t1, otid);
    Py_DECREF(list);
    return rc < 0 ? -1 : 1;
}

static PyObject *
section_exit(Section *self, PyObject *const *args, Py_ssize_t nargs)
{
    int rc = close_section(self, 0);
    if (rc < 0 || (rc > 0 && notify(self->name, Py_False) < 0))
        return NULL;
    Py_RETURN_FALSE;
}

static PyObject *
section_end(Section *self, PyObject *Py_UNUSED(ignored))
{
    int rc = close_section(self, 1);
    if (rc < 0 || (rc > 0 && notify(self->name, Py_False) < 0))
        return NULL;
    Py_RETURN_NONE;
}

/* @section("x", **stats) on a function: the same wrapper as the Python fallback's. */
static PyObject *
section_call(Section *self, PyObject *args, PyObject *kwds)
{
    PyObject *fn;
    if ((kwds != NULL && PyDict_GET_SIZE(kwds) > 0) || !PyArg_UnpackTuple(args, "section", 1, 1, &fn)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "a section decorates one function");
        return NULL;
    }
    if (g_decorate == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "polyprof.collect.recorder did not configure _fastsection");
        return NULL;
    }
    return PyObject_CallFunctionObjArgs(g_decorate, (PyObject *)self, fn, NULL);
}

static PyObject *
get_stats(Section *self, void *Py_UNUSED(closure))
{
    if (self->stats == NULL && (self->stats = PyDict_New()) == NULL)  /* as mutable as Python's */
        return NULL;
    return Py_NewRef(self->stats);
}

static int
set_stats(Section *self, PyObject *value, void *Py_UNUSED(closure))
{
    if (value == NULL || !PyDict_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "stats must be a dict");
        return -1;
    }
    Py_INCREF(value);
    Py_XSETREF(self->stats, value);
    return 0;
}

static PyObject *
get_name(Section *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->name);
}

static int
set_name(Section *self, PyObject *value, void *Py_UNUSED(closure))
{
    if (value == NULL) {
        PyErr_SetString(PyExc_TypeError, "cannot delete a section's name");
        return -1;
    }
    Py_INCREF(value);
    Py_XSETREF(self->name, value);
    return 0;
}

static PyGetSetDef section_getset[] = {
    {"name", (getter)get_name, (setter)set_name, "the section's name", NULL},
    {"stats", (getter)get_stats, (setter)set_stats, "keyword stats attached to each record", NULL},
    {NULL},
};

static PyMethodDef section_methods[] = {
    {"__enter__", (PyCFunction)section_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))section_exit, METH_FASTCALL, NULL},
    {"begin", (PyCFunction)section_enter, METH_NOARGS, "Open the section (returns it)."},
    {"end", (PyCFunction)section_end, METH_NOARGS, "Close a section opened with begin()."},
    {NULL},
};

static PyTypeObject SectionType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "polyprof.collect._fastsection.section",
    .tp_basicsize = sizeof(Section),
    .tp_dealloc = (destructor)section_dealloc,
    .tp_call = (ternaryfunc)section_call,
    /* Not GC-tracked: a section holds a name and a stats dict, not itself, and tracking
     * would make every `section("x")` count towards a generation-0 collection. */
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A named span of host time: context manager, decorator, or begin()/end().\n\n"
              "``with polyprof.section(\"Self Attention\", layer=3): ...`` or\n"
              "``@polyprof.section(\"Embedding\")``. Keyword stats are attached to the event.\n"
              "Near free when no session is active (compiled; see recorder.IMPLEMENTATION).",
    .tp_methods = section_methods,
    .tp_getset = section_getset,
    .tp_new = section_new,
    .tp_vectorcall = section_vectorcall,
};

static PyObject *
activate(PyObject *Py_UNUSED(module), PyObject *rec)
{
    PyObject *sections = NULL, *listeners = NULL;
    if (rec != Py_None) {
        sections = PyObject_GetAttrString(rec, "sections");
        listeners = sections == NULL ? NULL : PyObject_GetAttrString(rec, "listeners");
        if (listeners == NULL || !PyList_CheckExact(sections) || !PyList_Check(listeners)) {
            if (listeners != NULL)
                PyErr_SetString(PyExc_TypeError, "recorder.sections and .listeners must be lists");
            Py_XDECREF(sections);
            Py_XDECREF(listeners);
            return NULL;
        }
        Py_INCREF(rec);
    }
    else {
        rec = NULL;
    }
    Py_XSETREF(g_recorder, rec);
    Py_XSETREF(g_sections, sections);
    Py_XSETREF(g_listeners, listeners);
    Py_RETURN_NONE;
}

static PyObject *
set_decorator(PyObject *Py_UNUSED(module), PyObject *fn)
{
    Py_INCREF(fn);
    Py_XSETREF(g_decorate, fn);
    Py_RETURN_NONE;
}

static PyObject *
set_task_key(PyObject *Py_UNUSED(module), PyObject *fn)
{
    Py_INCREF(fn);
    Py_XSETREF(g_task_key, fn);
    Py_RETURN_NONE;
}

static PyObject *
py_now_ns(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromLongLong(now_ns());
}

/* columns(sections, index, names) -> (codes, start, end, ident, stats_rows): the recorder's
 * section tuples (name, start_ns, end_ns, stats, ident) as native-endian buffers, in one
 * pass: codes are int32 indexes into `names` (a list, extended with each name new to
 * `index`, a dict name -> code kept by the caller), start/end/ident int64, stats_rows
 * the int32 rows whose stats are truthy (their JSON is made in Python). The crash
 * journal's thread runs this while a program may be recording a million sections a
 * second; collect/journal.py:_columns_py is the pure-Python equivalent. */
static PyObject *
columns(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *secs, *index, *names, *out = NULL;
    PyObject *b_codes = NULL, *b_start = NULL, *b_end = NULL, *b_ident = NULL, *rows = NULL;
    if (nargs != 3 || !PyList_Check(args[0]) || !PyDict_Check(args[1]) || !PyList_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "columns(list of section tuples, dict name -> code, list of names)");
        return NULL;
    }
    secs = args[0]; index = args[1]; names = args[2];
    Py_ssize_t n = PyList_GET_SIZE(secs);
    b_codes = PyBytes_FromStringAndSize(NULL, n * 4);
    b_start = PyBytes_FromStringAndSize(NULL, n * 8);
    b_end = PyBytes_FromStringAndSize(NULL, n * 8);
    b_ident = PyBytes_FromStringAndSize(NULL, n * 8);
    rows = PyList_New(0);
    if (!b_codes || !b_start || !b_end || !b_ident || !rows)
        goto done;
    int32_t *codes = (int32_t *)PyBytes_AS_STRING(b_codes);
    int64_t *start = (int64_t *)PyBytes_AS_STRING(b_start);
    int64_t *end = (int64_t *)PyBytes_AS_STRING(b_end);
    int64_t *ident = (int64_t *)PyBytes_AS_STRING(b_ident);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyList_GET_ITEM(secs, i);
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 5) {
            PyErr_Format(PyExc_ValueError, "section %zd is not a 5-tuple", i);
            goto done;
        }
        PyObject *name = PyTuple_GET_ITEM(t, 0);
        PyObject *code = PyDict_GetItemWithError(index, name);
        if (code == NULL) {
            if (PyErr_Occurred())
                goto done;
            code = PyLong_FromSsize_t(PyList_GET_SIZE(names));
            if (code == NULL || PyDict_SetItem(index, name, code) < 0 || PyList_Append(names, name) < 0) {
                Py_XDECREF(code);
                goto done;
            }
            Py_DECREF(code);  /* the dict holds it */
        }
        codes[i] = (int32_t)PyLong_AsLong(code);
        start[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(t, 1));
        end[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(t, 2));
        ident[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(t, 4));
        if (PyErr_Occurred())
            goto done;
        PyObject *stats = PyTuple_GET_ITEM(t, 3);
        if (stats != Py_None) {
            int truth = PyObject_IsTrue(stats);
            if (truth < 0)
                goto done;
            if (truth) {
                PyObject *row = PyLong_FromSsize_t(i);
                if (row == NULL || PyList_Append(rows, row) < 0) {
                    Py_XDECREF(row);
                    goto done;
                }
                Py_DECREF(row);
            }
        }
    }
    out = PyTuple_Pack(5, b_codes, b_start, b_end, b_ident, rows);
done:
    Py_XDECREF(b_codes);
    Py_XDECREF(b_start);
    Py_XDECREF(b_end);
    Py_XDECREF(b_ident);
    Py_XDECREF(rows);
    return out;
}

static PyObject *
set_growth(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t at;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "set_growth(fn or None, at)");
        return NULL;
    }
    at = PyLong_AsSsize_t(args[1]);
    if (at == -1 && PyErr_Occurred())
        return NULL;
    if (args[0] == Py_None) {
        Py_CLEAR(g_grow_fn);
        g_grow_at = PY_SSIZE_T_MAX;
        Py_RETURN_NONE;
    }
    Py_INCREF(args[0]);
    Py_XSETREF(g_grow_fn, args[0]);
    g_grow_at = at;
    Py_RETURN_NONE;
}

/* ---- the crash note: one line on fd 2 when the program dies of a fatal signal ----
 * fatal_note(b"...tail") installs a handler for SIGSEGV, SIGBUS, SIGILL, SIGFPE and
 * SIGABRT where the disposition is the default one (never over a program's handler or
 * faulthandler's, which chains to it); the handler writes "polyprof: the program was
 * killed by SIGxxx" and the tail with write() only, puts the previous disposition back
 * and raises the signal again, so the process ends as it would have. fatal_note(None)
 * puts the previous dispositions back. A C stack overflow has no stack left for a
 * handler (no alternate stack is set): the kernel's default action then, and no line. */
#if defined(__unix__) || defined(__APPLE__)
#include <signal.h>
#include <string.h>
#include <unistd.h>
#define HAVE_NOTE 1
static const int note_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
static const char *const note_names[] = {"SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT"};
#define N_NOTE (sizeof(note_signals) / sizeof(note_signals[0]))
static char note_tail[4096];
static size_t note_tail_len;
static struct sigaction note_previous[N_NOTE];
static volatile sig_atomic_t note_installed[N_NOTE];
static pid_t note_pid; /* a forked child (whose faulthandler may chain here) says nothing */

static void
note_write(const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = write(2, s, n);
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

static void
note_handler(int signum)
{
    static const char head[] = "polyprof: the program was killed by ";
    for (size_t i = 0; i < N_NOTE; i++) {
        if (note_signals[i] != signum)
            continue;
        if (note_installed[i] && getpid() == note_pid) {
            note_write(head, sizeof(head) - 1);
            note_write(note_names[i], strlen(note_names[i]));
            note_write(note_tail, note_tail_len);
        }
        sigaction(signum, &note_previous[i], NULL);
        note_installed[i] = 0;
        raise(signum); /* SA_NODEFER: delivered now, to what was there before */
        return;
    }
}
#endif

static PyObject *
fatal_note(PyObject *Py_UNUSED(module), PyObject *arg)
{
    long n_installed = 0;
#ifdef HAVE_NOTE
    struct sigaction now;
    if (arg == Py_None) {
        for (size_t i = 0; i < N_NOTE; i++) {
            if (note_installed[i] && sigaction(note_signals[i], NULL, &now) == 0 &&
                !(now.sa_flags & SA_SIGINFO) && now.sa_handler == note_handler)
                sigaction(note_signals[i], &note_previous[i], NULL);
            note_installed[i] = 0;
        }
        Py_RETURN_NONE;
    }
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "fatal_note() takes bytes or None");
        return NULL;
    }
    if ((size_t)PyBytes_GET_SIZE(arg) >= sizeof(note_tail)) {
        PyErr_SetString(PyExc_ValueError, "fatal_note(): the text is too long");
        return NULL;
    }
    for (size_t i = 0; i < N_NOTE; i++) /* the text changes only while no handler reads it */
        if (note_installed[i])
            Py_RETURN_NONE;
    note_pid = getpid();
    note_tail_len = (size_t)PyBytes_GET_SIZE(arg);
    memcpy(note_tail, PyBytes_AS_STRING(arg), note_tail_len);
    for (size_t i = 0; i < N_NOTE; i++) {
        struct sigaction act;
        if (sigaction(note_signals[i], NULL, &now) != 0 || (now.sa_flags & SA_SIGINFO) ||
            now.sa_handler != SIG_DFL)
            continue;
        memset(&act, 0, sizeof(act));
        act.sa_handler = note_handler;
        sigemptyset(&act.sa_mask);
        act.sa_flags = SA_NODEFER | SA_ONSTACK;
        if (sigaction(note_signals[i], &act, &note_previous[i]) == 0) {
            note_installed[i] = 1;
            n_installed++;
        }
    }
#else
    (void)arg;
#endif
    return PyLong_FromLong(n_installed);
}

/* open_sections(list) -> [(name, t0, stats or None, ident), ...]: the openings not yet
 * closed that record into `list` (a recorder's sections): of each object on g_open, its
 * slot (when taken) and the further openings on its stacks. The objects are held first (no
 * allocation while the list is walked: an allocation may run the GC, hence Python code
 * that opens or closes sections). */
static PyObject *
open_sections(PyObject *Py_UNUSED(module), PyObject *list)
{
    Py_ssize_t n = 0, i, j;
    Section *s, **held;
    PyObject *out, *tup;
    for (s = g_open; s != NULL; s = s->open_next)
        n++;
    held = PyMem_Malloc((size_t)(n > 0 ? n : 1) * sizeof(Section *));
    if (held == NULL)
        return PyErr_NoMemory();
    for (i = 0, s = g_open; s != NULL && i < n; s = s->open_next, i++) {
        Py_INCREF(s);
        held[i] = s;
    }
    n = i;
    out = PyList_New(0);
    for (i = 0; i < n && out != NULL; i++) {
        PyObject *name, *stats;
        s = held[i];
        /* owned: a finalizer run by an allocation below may assign the object's name or stats */
        name = Py_NewRef(s->name);
        stats = Py_NewRef(s->stats != NULL && PyDict_GET_SIZE(s->stats) > 0 ? s->stats : Py_None);
        if (s->list == list) {
            tup = Py_BuildValue("(OLOk)", name, (long long)s->t0, stats, s->tid);
            if (tup == NULL || PyList_Append(out, tup) < 0)
                Py_CLEAR(out);
            Py_XDECREF(tup);
        }
        if (out != NULL && s->more != NULL && PyDict_GET_SIZE(s->more) > 0) {
            PyObject *items = PyDict_Items(s->more);
            if (items == NULL)
                Py_CLEAR(out);
            for (j = 0; out != NULL && j < PyList_GET_SIZE(items); j++) {
                PyObject *key = PyTuple_GET_ITEM(PyList_GET_ITEM(items, j), 0);
                PyObject *stack = PyTuple_GET_ITEM(PyList_GET_ITEM(items, j), 1);
                PyObject *ident = PyTuple_Check(key) ? PyTuple_GET_ITEM(key, 0) : key;
                Py_ssize_t k;
                for (k = 0; out != NULL && PyList_Check(stack) && k < PyList_GET_SIZE(stack); k++) {
                    PyObject *entry = PyList_GET_ITEM(stack, k);
                    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2 || PyTuple_GET_ITEM(entry, 1) != list)
                        continue;
                    Py_INCREF(entry);  /* the allocations below may run code that pops it */
                    tup = PyTuple_Pack(4, name, PyTuple_GET_ITEM(entry, 0), stats, ident);
                    Py_DECREF(entry);
                    if (tup == NULL || PyList_Append(out, tup) < 0)
                        Py_CLEAR(out);
                    Py_XDECREF(tup);
                }
            }
            Py_XDECREF(items);
        }
        Py_DECREF(name);
        Py_DECREF(stats);
    }
    for (i = 0; i < n; i++)
        Py_DECREF(held[i]);
    PyMem_Free(held);
    return out;
}

static PyMethodDef module_methods[] = {
    {"open_sections", open_sections, METH_O,
     "open_sections(list): (name, start_ns, stats or None, ident) of each opening not yet closed that records "
     "into list."},
    {"fatal_note", fatal_note, METH_O,
     "fatal_note(tail): a line on fd 2 when a fatal signal ends the process (see the source); None: off."},
    {"columns", (PyCFunction)(void (*)(void))columns, METH_FASTCALL,
     "columns(sections, index, names): section tuples as buffers (see the source)."},
    {"activate", activate, METH_O, "Record sections into this Recorder (None: stop recording)."},
    {"set_decorator", set_decorator, METH_O, "The function(section, fn) that builds decorated wrappers."},
    {"set_task_key", set_task_key, METH_O, "The function(tid) keying further openings per thread or asyncio task."},
    {"set_growth", (PyCFunction)(void (*)(void))set_growth, METH_FASTCALL,
     "set_growth(fn, at): call fn() on the recording thread when the sections list reaches at entries; "
     "fn returns the next size (fn None: off)."},
    {"now_ns", py_now_ns, METH_NOARGS, "The clock sections use (that of time.perf_counter_ns)."},
    {NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "polyprof.collect._fastsection",
    .m_doc = "Compiled polyprof.section; recorder.py falls back to pure Python without it.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__fastsection(void)
{
    PyObject *m;
    if (PyType_Ready(&SectionType) < 0)
        return NULL;
    if ((s_notify = PyUnicode_InternFromString("notify")) == NULL)
        return NULL;
    if ((m = PyModule_Create(&module_def)) == NULL)
        return NULL;
    Py_INCREF(&SectionType);
    if (PyModule_AddObject(m, "section", (PyObject *)&SectionType) < 0) {
        Py_DECREF(&SectionType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
