/* polyprof.formats.perfetto_read._walk: the TracePacket stream walked in C, into columns.
 *
 * The compiled twin of collector.py for the packets that make nearly every trace: track
 * events (slice begin / end, instants, counters) with their names, categories, debug
 * annotations and flow ids, and the interned data (event names, categories, annotation
 * names, string values) they refer to. One pass over the wire format, no protobuf
 * objects: each event becomes a row of the columns collector.py builds, written here
 * into growable buffers that `take()` hands over as bytes.
 *
 * The state a sequence carries (interned strings, defaults, validity), the track codes
 * and the builder's strings stay the Python objects collector.py uses (`Sequence`,
 * `Tracks.uuids`, `TraceBuilder.intern`), read and updated here in file order, so the
 * Python path can take any packet in between. A packet this walk does not read exactly
 * as collector.py would (descriptors, clock snapshots, GPU messages, legacy events,
 * extra and thread counters, nested annotations, sequence-scoped clocks, anything
 * malformed or unusual on the wire) is left to Python: `walk` stops before it, with no
 * side effect that the Python path would not repeat identically (a sequence made, a
 * state cleared: both idempotent), and says where it ends. Semantics kept from
 * protobuf: unknown fields skipped, the last value of a scalar wins, a oneof holds the
 * member set last, repeated scalars packed or not, strings decoded as UTF-8 with
 * replacement (collector.py's `text`).
 *
 * walked.py is the Python side; tests/test_perfetto_walk.py holds the two paths to the
 * same Trace. Parsing is _walk_parse.c, the shared
 * state and the outputs _walk_tables.c, what they share _walk.h.
 */
#include "_walk.h"


static const char KIND_CHARS[N_KINDS] = {'b', 'u', 'i', 'f', 's'};

/* ------------------------------------------------------------------ one packet */
/* FAST: read (output written), SLOW: left to Python untouched but for idempotent
 * state, 2: Python's own rows must be flushed first, FAIL: a Python error. */
static int
packet(Walker *w, const uint8_t *p, const uint8_t *end, int64_t *n, int pending)
{
    packet_t k;
    event_t e;
    if (pw_parse_packet(p, end, &k) != FAST)
        return SLOW;
    if (k.n_interned && pw_check_interned(k.in, k.in_end) != FAST)
        return SLOW;
    if (k.n_te) {
        int rc = pw_parse_event(w, k.te, k.te_end, &e);
        if (rc != FAST)
            return rc;
        if (!k.has_ts || k.ts > (uint64_t)INT64_MAX || e.has_time_us)
            return SLOW; /* legacy microsecond times (they win over the packet's), no time at all: collector.py */
    }
    seq_t *q = pw_seq_get(w, k.seq);
    if (!q)
        return FAIL;
    if (k.n_te) {
        uint32_t clock = k.has_clock ? k.clock : q->clock;
        if ((clock >= 64 && clock < 128) || (!e.has_track && !q->has_track))
            return SLOW; /* sequence-scoped clocks, tracks from a thread descriptor */
        if (pending)
            return 2;
    }
    if ((k.flags & 1) || k.cleared) {
        PyObject *r = PyObject_CallMethod(q->seq, "reset", NULL);
        if (!r)
            return FAIL;
        Py_DECREF(r);
        if (pw_seq_load(w, q) < 0)
            return FAIL;
    } else if (k.dropped) {
        PyObject *r = PyObject_CallMethod(q->seq, "lost", NULL); /* also drops the legacy delta base */
        if (!r)
            return FAIL;
        Py_DECREF(r);
        q->valid = 0;
    }
    if ((k.flags & 2) && !q->valid)
        return pw_skip_count(w, "packets needing incremental state lost with a dropped packet") < 0 ? FAIL : FAST;
    if (k.n_interned) {
        if (pw_intern_table(w, k.in, k.in_end, 2, q->names, 1) < 0 || pw_intern_table(w, k.in, k.in_end, 1, q->cats, 1) < 0 ||
            pw_intern_table(w, k.in, k.in_end, 3, q->anames, 0) < 0 ||
            pw_intern_table(w, k.in, k.in_end, 29, q->values, 0) < 0)
            return FAIL;
    }
    if (!k.n_te)
        return FAST;
    int64_t clock = k.has_clock ? k.clock : q->clock, ts = (int64_t)k.ts;
    long long track;
    uint64_t uuid = e.has_track ? e.track : q->track;
    PyObject *code;
    if (pw_get_int(w->uuids, uuid, &code) < 0)
        return FAIL;
    if (code) {
        track = PyLong_AsLongLong(code);
        if (track == -1 && PyErr_Occurred())
            return FAIL;
    } else if (pw_as_long(PyObject_CallMethod(w->tracks, "of_uuid", "K", (unsigned long long)uuid), &track) < 0) {
        return FAIL;
    }
    if (e.type == 4) { /* a counter */
        double value = e.value_which == 1 ? (double)e.ivalue : e.dvalue;
        PyObject *inc = PyObject_CallMethod(w->tracks, "incremental", "L", track);
        if (!inc)
            return FAIL;
        int is_inc = PyObject_IsTrue(inc);
        Py_DECREF(inc);
        if (is_inc < 0)
            return FAIL;
        if (is_inc) {
            PyObject *v = e.value_which == 1 ? PyLong_FromLongLong(e.ivalue) : PyFloat_FromDouble(e.dvalue);
            if (!v)
                return FAIL;
            PyObject *r = PyObject_CallMethod(w->col, "_running", "LOO", track, v, q->seq);
            Py_DECREF(v);
            if (!r)
                return FAIL;
            value = PyFloat_AsDouble(r);
            Py_DECREF(r);
            if (value == -1.0 && PyErr_Occurred())
                return FAIL;
        }
        if (vec_push(&w->out[C_TRACK], &track, 8) < 0 || vec_push(&w->out[C_TS], &ts, 8) < 0 ||
            vec_push(&w->out[C_CLOCK], &clock, 8) < 0 || vec_push(&w->out[C_VALUE], &value, 8) < 0)
            return FAIL;
        return FAST;
    }
    int64_t row = (*n)++, dur = 0;
    int8_t kind = (int8_t)e.type;
    long long name = 0, cat = 0;
    if (e.type != 2 && (pw_name_of(w, q, &e, &name) < 0 || pw_category(w, q, &cat) < 0))
        return FAIL;
    int32_t name32 = (int32_t)name, cat32 = (int32_t)cat;
    if (vec_push(&w->out[EV_KIND], &kind, 1) < 0 || vec_push(&w->out[EV_TRACK], &track, 8) < 0 ||
        vec_push(&w->out[EV_TS], &ts, 8) < 0 || vec_push(&w->out[EV_CLOCK], &clock, 8) < 0 ||
        vec_push(&w->out[EV_DUR], &dur, 8) < 0 || vec_push(&w->out[EV_NAME], &name32, 4) < 0 ||
        vec_push(&w->out[EV_CAT], &cat32, 4) < 0)
        return FAIL;
    if (e.type != 2) {
        annotation_t *a = (annotation_t *)w->anns.p;
        for (size_t i = 0; i < w->anns.n / sizeof(annotation_t); i++)
            if (pw_annotation(w, q, &a[i], row) < 0)
                return FAIL;
    }
    return pw_flows(w, q, row) < 0 ? FAIL : FAST;
}

/* ------------------------------------------------------------------ the type */
static PyObject *
walker_walk(Walker *w, PyObject *args)
{
    Py_buffer buf;
    Py_ssize_t pos;
    long long n;
    int pending;
    if (!PyArg_ParseTuple(args, "y*nLp", &buf, &pos, &n, &pending))
        return NULL;
    const uint8_t *base = buf.buf, *end = base + buf.len;
    int status = 0;
    Py_ssize_t next = pos;
    int64_t rows = n;
    while (pos < buf.len) {
        const uint8_t *p = base + pos, *s, *e;
        if (*p != 0x0A || (p++, rd_span(&p, end, &s, &e)) < 0) {
            PyErr_Format(PyExc_ValueError, "not a whole packet at byte %zd", pos);
            status = FAIL;
            break;
        }
        next = e - base;
        int rc = packet(w, s, e, &rows, pending);
        if (rc == FAIL) {
            status = FAIL;
            break;
        }
        if (rc != FAST) {
            status = rc;
            break;
        }
        pos = next;
    }
    PyBuffer_Release(&buf);
    pw_seq_clear(w); /* the Python path may change any sequence before the next walk */
    if (status == FAIL)
        return NULL;
    return Py_BuildValue("nLin", pos, (long long)rows, status, next);
}

static PyObject *
bytes_of(vec_t *v)
{
    PyObject *b = PyBytes_FromStringAndSize(v->p ? v->p : "", (Py_ssize_t)v->n);
    v->n = 0;
    return b;
}

static PyObject *
walker_take(Walker *w, PyObject *unused)
{
    PyObject *out = PyTuple_New(N_OUT + 1);
    if (!out)
        return NULL;
    for (int i = 0; i < N_OUT; i++) {
        PyObject *b = bytes_of(&w->out[i]);
        if (!b) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, b);
    }
    PyObject *stats = PyList_New(0);
    if (!stats) {
        Py_DECREF(out);
        return NULL;
    }
    PyTuple_SET_ITEM(out, N_OUT, stats);
    for (size_t i = 0; i < w->n_stats; i++) {
        stat_t *s = &w->stats[i];
        PyObject *rows = bytes_of(&s->rows);
        PyObject *vals = s->kind == KIND_S ? (Py_INCREF(s->objs), s->objs) : bytes_of(&s->vals);
        PyObject *item = rows && vals ? Py_BuildValue("(OCNN)", s->key, KIND_CHARS[s->kind], rows, vals) : NULL;
        if (!item) {
            Py_XDECREF(rows);
            Py_XDECREF(vals);
            Py_DECREF(out);
            return NULL;
        }
        int rc = PyList_Append(stats, item);
        Py_DECREF(item);
        if (rc < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    pw_stats_clear(w);
    return out;
}

static PyObject *
walker_pending(Walker *w, PyObject *unused)
{
    return PyBool_FromLong(w->out[EV_KIND].n || w->out[C_TRACK].n || w->out[FLOWS].n || w->n_stats);
}

static int
walker_init(Walker *w, PyObject *args, PyObject *kw)
{
    PyObject *col, *tracks, *uuids, *intern_, *strings, *texts;
    if (!PyArg_ParseTuple(args, "OOO!OO!O!", &col, &tracks, &PyDict_Type, &uuids, &intern_, &PyList_Type, &strings,
                          &PyDict_Type, &texts))
        return -1;
    PyObject *objs[] = {col, tracks, uuids, intern_, strings, texts};
    PyObject **slots[] = {&w->col, &w->tracks, &w->uuids, &w->intern, &w->strings, &w->texts};
    for (int i = 0; i < 6; i++) {
        Py_INCREF(objs[i]);
        Py_XSETREF(*slots[i], objs[i]);
    }
    if (!w->stat_index && !(w->stat_index = PyDict_New()))
        return -1;
    return 0;
}

static int
walker_traverse(Walker *w, visitproc visit, void *arg)
{
    Py_VISIT(w->col);
    Py_VISIT(w->tracks);
    Py_VISIT(w->uuids);
    Py_VISIT(w->intern);
    Py_VISIT(w->strings);
    Py_VISIT(w->texts);
    Py_VISIT(w->stat_index);
    return 0;
}

static int
walker_clear(Walker *w)
{
    pw_seq_clear(w);
    pw_stats_clear(w);
    Py_CLEAR(w->col);
    Py_CLEAR(w->tracks);
    Py_CLEAR(w->uuids);
    Py_CLEAR(w->intern);
    Py_CLEAR(w->strings);
    Py_CLEAR(w->texts);
    Py_CLEAR(w->stat_index);
    return 0;
}

static void
walker_dealloc(Walker *w)
{
    PyObject_GC_UnTrack(w);
    walker_clear(w);
    for (int i = 0; i < N_OUT; i++)
        PyMem_Free(w->out[i].p);
    vec_t *tmp[] = {&w->slots, &w->cat_iids, &w->cats, &w->flows, &w->anns};
    for (int i = 0; i < 5; i++)
        PyMem_Free(tmp[i]->p);
    PyMem_Free(w->stats);
    PyMem_Free(w->seqs);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

/* ------------------------------------------------------------------ packet framing */
/* frame(buf) -> the offset of the first packet at which the Python framing must look:
 * every packet before it is whole (tag 0x0a, a plain length varint, inside `buf`). */
static PyObject *
frame(PyObject *self, PyObject *arg)
{
    Py_buffer buf;
    if (PyObject_GetBuffer(arg, &buf, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *base = buf.buf, *end = base + buf.len, *p = base;
    while (p < end) {
        const uint8_t *q = p, *s, *e;
        if (*q != 0x0A)
            break;
        q++;
        if (rd_span(&q, end, &s, &e) < 0 || e - s > (1 << 30))
            break;
        p = e;
    }
    Py_ssize_t pos = p - base;
    PyBuffer_Release(&buf);
    return PyLong_FromSsize_t(pos);
}

static PyMethodDef walker_methods[] = {
    {"walk", (PyCFunction)walker_walk, METH_VARARGS,
     "walk(data, pos, n, pending) -> (pos, n, status, next): packets read from pos until the end (status 0), "
     "one left to Python (1: it ends at next) or Python's rows to flush first (2)."},
    {"take", (PyCFunction)walker_take, METH_NOARGS,
     "take() -> the columns written since the last take, as bytes, and the stats [(key, kind, rows, values)]."},
    {"pending", (PyCFunction)walker_pending, METH_NOARGS, "pending() -> whether anything waits to be taken."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject WalkerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "polyprof.formats.perfetto_read._walk.Walker",
    .tp_basicsize = sizeof(Walker),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Walker(collector, tracks, uuids, intern, strings, texts): TracePackets into columns.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)walker_init,
    .tp_dealloc = (destructor)walker_dealloc,
    .tp_traverse = (traverseproc)walker_traverse,
    .tp_clear = (inquiry)walker_clear,
    .tp_methods = walker_methods,
};

static PyMethodDef methods[] = {
    {"frame", frame, METH_O, "frame(buf) -> offset of the first packet that is not plainly whole in buf."},
    {"match", pw_match, METH_VARARGS,
     "match(kind, track, ts) -> (begins, ends, orphans): slice begins and the ends closing them, paired per "
     "track in time order (slices.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_walk", "Perfetto TracePackets walked into columns.", -1, methods,
};

PyMODINIT_FUNC
PyInit__walk(void)
{
    if (PyType_Ready(&WalkerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m)
        return NULL;
    Py_INCREF(&WalkerType);
    if (PyModule_AddObject(m, "Walker", (PyObject *)&WalkerType) < 0) {
        Py_DECREF(&WalkerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
