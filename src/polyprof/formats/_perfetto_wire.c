/* polyprof.formats._perfetto_wire: the two loops of perfetto_wire.py's batch encoding in C.
 *
 * A batch is (data uint8, lens int64): n byte strings concatenated, their lengths.
 *   varints(values uint64) -> (data bytes, lens bytes): each value as a protobuf varint;
 *   join(out uint8, parts [(data, lens)]): message by message concatenation of batches with
 *     equally many entries into `out` (sized by the caller: the sum of every part's lens);
 *   track_events(...): whole TracePackets of track events from columns, in two passes
 *     (sizes, then bytes), as writers/perfetto.py's NumPy path joins them field by field.
 * perfetto_wire.py keeps the NumPy versions (POLYPROF_PURE_PYTHON=1, or no extension);
 * tests/test_perfetto.py holds both to the same bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *
varints(PyObject *self, PyObject *arg)
{
    Py_buffer in;
    if (PyObject_GetBuffer(arg, &in, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    Py_ssize_t n = in.len / 8;
    const uint64_t *v = in.buf;
    PyObject *data = PyBytes_FromStringAndSize(NULL, n * 10);
    PyObject *lens = PyBytes_FromStringAndSize(NULL, n * 8);
    if (!data || !lens) {
        Py_XDECREF(data);
        Py_XDECREF(lens);
        PyBuffer_Release(&in);
        return NULL;
    }
    uint8_t *d = (uint8_t *)PyBytes_AS_STRING(data), *p = d;
    int64_t *l = (int64_t *)PyBytes_AS_STRING(lens);
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t x;
        memcpy(&x, (const char *)v + 8 * i, 8);
        uint8_t *start = p;
        while (x >= 0x80) {
            *p++ = (uint8_t)(x | 0x80);
            x >>= 7;
        }
        *p++ = (uint8_t)x;
        l[i] = p - start;
    }
    PyBuffer_Release(&in);
    if (_PyBytes_Resize(&data, p - d) < 0) {
        Py_DECREF(lens);
        return NULL;
    }
    return Py_BuildValue("(NN)", data, lens);
}

static PyObject *
join(PyObject *self, PyObject *args)
{
    Py_buffer out;
    PyObject *parts;
    if (!PyArg_ParseTuple(args, "w*O!", &out, &PyList_Type, &parts))
        return NULL;
    Py_ssize_t k = PyList_GET_SIZE(parts), n = -1;
    Py_buffer *bufs = PyMem_Calloc(2 * (size_t)(k ? k : 1), sizeof(Py_buffer));
    const uint8_t **src = PyMem_Calloc((size_t)(k ? k : 1), sizeof(uint8_t *));
    const uint8_t **src_end = PyMem_Calloc((size_t)(k ? k : 1), sizeof(uint8_t *));
    Py_ssize_t got = 0;
    PyObject *result = NULL;
    if (!bufs || !src || !src_end) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t j = 0; j < k; j++) {
        PyObject *item = PyList_GET_ITEM(parts, j);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
            PyErr_SetString(PyExc_TypeError, "join: parts are (data, lens) pairs");
            goto done;
        }
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(item, 0), &bufs[2 * j], PyBUF_C_CONTIGUOUS) < 0)
            goto done;
        got = 2 * j + 1;
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(item, 1), &bufs[2 * j + 1], PyBUF_C_CONTIGUOUS) < 0)
            goto done;
        got = 2 * j + 2;
        Py_ssize_t m = bufs[2 * j + 1].len / 8;
        if (n >= 0 && m != n) {
            PyErr_SetString(PyExc_ValueError, "join: batches of different lengths");
            goto done;
        }
        n = m;
        src[j] = bufs[2 * j].buf;
        src_end[j] = src[j] + bufs[2 * j].len;
    }
    uint8_t *o = out.buf, *o_end = o + out.len;
    for (Py_ssize_t i = 0; i < n; i++) {
        for (Py_ssize_t j = 0; j < k; j++) {
            int64_t len;
            memcpy(&len, (const char *)bufs[2 * j + 1].buf + 8 * i, 8);
            if (len < 0 || len > src_end[j] - src[j] || len > o_end - o) {
                PyErr_SetString(PyExc_ValueError, "join: lengths run past the data or the output");
                goto done;
            }
            memcpy(o, src[j], (size_t)len);
            o += len;
            src[j] += len;
        }
    }
    if (o != o_end) {
        PyErr_SetString(PyExc_ValueError, "join: the output is not the sum of the lengths");
        goto done;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    for (Py_ssize_t j = 0; j < got; j++)
        PyBuffer_Release(&bufs[j]);
    PyMem_Free(bufs);
    PyMem_Free(src);
    PyMem_Free(src_end);
    PyBuffer_Release(&out);
    return result;
}

/* ------------------------------------------------------------------ whole packets */
static inline int
vlen(uint64_t x)
{
    int n = 1;
    while (x >= 0x80) {
        x >>= 7;
        n++;
    }
    return n;
}

static inline uint8_t *
put(uint8_t *p, uint64_t x)
{
    while (x >= 0x80) {
        *p++ = (uint8_t)(x | 0x80);
        x >>= 7;
    }
    *p++ = (uint8_t)x;
    return p;
}

static inline uint8_t *
put64(uint8_t *p, uint64_t x)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(x >> (8 * i));
    return p + 8;
}

/* DebugAnnotation value fields by kind: int (4), uint (3), double (5, fixed64), bool (2),
 * string iid (17) */
static const uint16_t VALUE_TAG[5] = {4 << 3, 3 << 3, (5 << 3) | 1, 2 << 3, 17 << 3};

typedef struct {
    Py_buffer b;
    int held;
} arg_t;

static int
arg(PyObject *o, arg_t *a, Py_ssize_t itemsize, Py_ssize_t n, const char *what)
{
    if (o == Py_None)
        return 0;
    if (PyObject_GetBuffer(o, &a->b, PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    a->held = 1;
    if (a->b.len % itemsize || (n >= 0 && a->b.len / itemsize != n)) {
        PyErr_Format(PyExc_ValueError, "track_events: %s has the wrong length", what);
        return -1;
    }
    return 0;
}

#define I64(a, i) (((const int64_t *)(a).b.buf)[i])
#define U64(a, i) (((const uint64_t *)(a).b.buf)[i])

/* track_events(ts, seq, type, uuid, name, cat, named, counter, at, key, kind, bits, flow_at,
 * flow_id, term_at, term_id) -> bytes: the packets (Trace.packet fields, whole) of m track
 * events as writers/perfetto.py's NumPy path encodes them, field by field: TracePacket
 * {timestamp 8, `seq` (constant fields), track_event 11 {type 9, track_uuid 11,
 * [double_counter_value 44], [name_iid 10, category_iids 3 where `named`],
 * debug_annotations 4 {name_iid 1, value}..., flow_ids 47..., terminating_flow_ids 48...}}.
 * The repeated parts come as items sorted by their packet (`at`, non-decreasing). */
static PyObject *
track_events(PyObject *self, PyObject *args)
{
    PyObject *o[16];
    if (!PyArg_UnpackTuple(args, "track_events", 16, 16, &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7],
                           &o[8], &o[9], &o[10], &o[11], &o[12], &o[13], &o[14], &o[15]))
        return NULL;
    arg_t a[16];
    memset(a, 0, sizeof a);
    PyObject *out = NULL;
    Py_ssize_t m = -1;
    static const Py_ssize_t size[16] = {8, 1, 8, 8, 8, 8, 1, 8, 8, 8, 1, 8, 8, 8, 8, 8};
    static const char *names[16] = {"ts", "seq", "type", "uuid", "name", "cat", "named", "counter", "at", "key",
                                    "kind", "bits", "flow_at", "flow_id", "term_at", "term_id"};
    for (int i = 0; i < 16; i++) {
        Py_ssize_t want = i == 1 ? -1 : (i <= 7 ? m : -1);
        if (i >= 9 && i <= 11)
            want = a[8].b.len / 8;
        if (i == 13 || i == 15)
            want = a[i - 1].b.len / 8;
        if (arg(o[i], &a[i], size[i], want, names[i]) < 0)
            goto done;
        if (i == 0)
            m = a[0].b.len / 8;
    }
    if (!a[0].held || !a[1].held || !a[2].held || !a[3].held || !a[6].held || !a[8].held || !a[12].held ||
        !a[14].held) {
        PyErr_SetString(PyExc_TypeError, "track_events: a required column is None");
        goto done;
    }
    int named_any = a[4].held && a[5].held;
    Py_ssize_t n_items = a[8].b.len / 8, n_flow = a[12].b.len / 8, n_term = a[14].b.len / 8;
    const uint8_t *named = a[6].b.buf, *kind = a[10].held ? a[10].b.buf : NULL;
    const uint8_t *seq = a[1].b.buf;
    Py_ssize_t seq_len = a[1].b.len;
    for (Py_ssize_t j = 0; j < n_items; j++)
        if (kind[j] > 4 || I64(a[8], j) < 0 || I64(a[8], j) >= m || (j && I64(a[8], j) < I64(a[8], j - 1))) {
            PyErr_SetString(PyExc_ValueError, "track_events: annotation items out of order or range");
            goto done;
        }
    for (int f = 12; f <= 14; f += 2)
        for (Py_ssize_t j = 0; j < a[f].b.len / 8; j++)
            if (I64(a[f], j) < 0 || I64(a[f], j) >= m || (j && I64(a[f], j) < I64(a[f], j - 1))) {
                PyErr_SetString(PyExc_ValueError, "track_events: flow items out of order or range");
                goto done;
            }
    /* pass 1: sizes */
    size_t total = 0;
    Py_ssize_t ji = 0, jf = 0, jt = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        uint64_t te = 1 + vlen((uint64_t)I64(a[2], i)) + 1 + vlen((uint64_t)I64(a[3], i));
        if (a[7].held)
            te += 2 + 8;
        if (named_any && named[i])
            te += 1 + vlen((uint64_t)I64(a[4], i)) + 1 + vlen((uint64_t)I64(a[5], i));
        for (; ji < n_items && I64(a[8], ji) == i; ji++) {
            uint64_t item = 1 + vlen((uint64_t)I64(a[9], ji)) + (kind[ji] == 4 ? 2 : 1) +
                            (kind[ji] == 2 ? 8 : (uint64_t)vlen(U64(a[11], ji)));
            te += 1 + vlen(item) + item;
        }
        for (; jf < n_flow && I64(a[12], jf) == i; jf++)
            te += 2 + 8;
        for (; jt < n_term && I64(a[14], jt) == i; jt++)
            te += 2 + 8;
        uint64_t body = 1 + vlen((uint64_t)I64(a[0], i)) + (uint64_t)seq_len + 1 + vlen(te) + te;
        total += 1 + vlen(body) + body;
    }
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (!out)
        goto done;
    /* pass 2: the bytes (the sizes again, as they are written) */
    uint8_t *p = (uint8_t *)PyBytes_AS_STRING(out);
    ji = jf = jt = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        uint64_t te = 1 + vlen((uint64_t)I64(a[2], i)) + 1 + vlen((uint64_t)I64(a[3], i));
        if (a[7].held)
            te += 2 + 8;
        if (named_any && named[i])
            te += 1 + vlen((uint64_t)I64(a[4], i)) + 1 + vlen((uint64_t)I64(a[5], i));
        Py_ssize_t ji0 = ji;
        for (; ji < n_items && I64(a[8], ji) == i; ji++) {
            uint64_t item = 1 + vlen((uint64_t)I64(a[9], ji)) + (kind[ji] == 4 ? 2 : 1) +
                            (kind[ji] == 2 ? 8 : (uint64_t)vlen(U64(a[11], ji)));
            te += 1 + vlen(item) + item;
        }
        Py_ssize_t jf0 = jf, jt0 = jt;
        for (; jf < n_flow && I64(a[12], jf) == i; jf++)
            te += 2 + 8;
        for (; jt < n_term && I64(a[14], jt) == i; jt++)
            te += 2 + 8;
        uint64_t body = 1 + vlen((uint64_t)I64(a[0], i)) + (uint64_t)seq_len + 1 + vlen(te) + te;
        *p++ = 0x0A;
        p = put(p, body);
        *p++ = 8 << 3;
        p = put(p, (uint64_t)I64(a[0], i));
        memcpy(p, seq, (size_t)seq_len);
        p += seq_len;
        *p++ = (11 << 3) | 2;
        p = put(p, te);
        *p++ = 9 << 3;
        p = put(p, (uint64_t)I64(a[2], i));
        *p++ = 11 << 3;
        p = put(p, (uint64_t)I64(a[3], i));
        if (a[7].held) {
            uint64_t bits;
            memcpy(&bits, (const char *)a[7].b.buf + 8 * i, 8);
            p = put(p, (44 << 3) | 1);
            p = put64(p, bits);
        }
        if (named_any && named[i]) {
            *p++ = 10 << 3;
            p = put(p, (uint64_t)I64(a[4], i));
            *p++ = 3 << 3;
            p = put(p, (uint64_t)I64(a[5], i));
        }
        for (Py_ssize_t j = ji0; j < ji; j++) {
            uint64_t item = 1 + vlen((uint64_t)I64(a[9], j)) + (kind[j] == 4 ? 2 : 1) +
                            (kind[j] == 2 ? 8 : (uint64_t)vlen(U64(a[11], j)));
            *p++ = (4 << 3) | 2;
            p = put(p, item);
            *p++ = 1 << 3;
            p = put(p, (uint64_t)I64(a[9], j));
            p = put(p, VALUE_TAG[kind[j]]);
            p = kind[j] == 2 ? put64(p, U64(a[11], j)) : put(p, U64(a[11], j));
        }
        for (Py_ssize_t j = jf0; j < jf; j++) {
            p = put(p, (47 << 3) | 1);
            p = put64(p, U64(a[13], j));
        }
        for (Py_ssize_t j = jt0; j < jt; j++) {
            p = put(p, (48 << 3) | 1);
            p = put64(p, U64(a[15], j));
        }
    }
    if (p != (uint8_t *)PyBytes_AS_STRING(out) + total) {
        PyErr_SetString(PyExc_RuntimeError, "track_events: sizes and bytes disagree");
        Py_CLEAR(out);
    }
done:
    for (int i = 0; i < 16; i++)
        if (a[i].held)
            PyBuffer_Release(&a[i].b);
    return out;
}

static PyMethodDef methods[] = {
    {"varints", varints, METH_O, "varints(values uint64) -> (data, lens): protobuf varints, as bytes."},
    {"join", join, METH_VARARGS, "join(out, [(data, lens), ...]): batches joined message by message into out."},
    {"track_events", track_events, METH_VARARGS,
     "track_events(ts, seq, type, uuid, name, cat, named, counter, at, key, kind, bits, flow_at, flow_id, term_at, "
     "term_id) -> bytes: whole TracePackets of track events."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_perfetto_wire", "Protobuf batch encoding loops.", -1, methods,
};

PyMODINIT_FUNC
PyInit__perfetto_wire(void)
{
    return PyModule_Create(&moduledef);
}
