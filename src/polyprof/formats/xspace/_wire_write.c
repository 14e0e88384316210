/* polyprof.formats.xspace._wire, writing: one line's events from columns into the
 * bytes of XLine.events entries, as protobuf's serializer writes them (see _wire.c). */
#include "_wire.h"

static int
put_varint(vec_t *v, uint64_t x)
{
    uint8_t b[10];
    int n = 0;
    do {
        b[n] = (uint8_t)(x & 0x7F);
        x >>= 7;
        if (x)
            b[n] |= 0x80;
        n++;
    } while (x);
    return vec_push(v, b, n);
}

static int
varint_len(uint64_t x)
{
    int n = 1;
    while (x >= 0x80) {
        x >>= 7;
        n++;
    }
    return n;
}

/* Size of one XStat message body, as protobuf (proto3) writes it. */
static Py_ssize_t
stat_size(int64_t mid, uint8_t kind, int64_t ival, Py_ssize_t objlen)
{
    Py_ssize_t n = mid ? 1 + varint_len((uint64_t)mid) : 0;
    switch (kind) {
    case 1: return n + 9;
    case 2: case 3: case 6: return n + 1 + varint_len((uint64_t)ival);
    case 4: case 5: return n + 1 + varint_len((uint64_t)objlen) + objlen;
    default: return n;
    }
}

typedef struct {
    Py_buffer b[8];
    int n;
} bufs_t;

static const void *
get_buf(bufs_t *bs, PyObject *o, Py_ssize_t itemsize, Py_ssize_t *count)
{
    Py_buffer *v = &bs->b[bs->n];
    if (PyObject_GetBuffer(o, v, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    bs->n++;
    if (v->len % itemsize) {
        PyErr_SetString(PyExc_ValueError, "column size is not a whole number of items");
        return NULL;
    }
    *count = v->len / itemsize;
    return v->buf;
}

/* The bytes of a span of str/bytes values: UTF-8 for str (a borrowed pointer). */
static const char *
obj_bytes(PyObject *o, Py_ssize_t *len)
{
    if (PyUnicode_Check(o))
        return PyUnicode_AsUTF8AndSize(o, len);
    if (PyBytes_Check(o)) {
        *len = PyBytes_GET_SIZE(o);
        return PyBytes_AS_STRING(o);
    }
    PyErr_SetString(PyExc_TypeError, "str or bytes stat values expected");
    return NULL;
}

PyObject *
wire_encode(PyObject *self, PyObject *args)
{
    PyObject *a[8], *objs, *out = NULL;
    if (!PyArg_ParseTuple(args, "OOOOOOOOO!:encode", &a[0], &a[1], &a[2], &a[3], &a[4], &a[5], &a[6], &a[7],
                          &PyList_Type, &objs))
        return NULL;
    bufs_t bs;
    bs.n = 0;
    vec_t v = {NULL, 0, 0};
    Py_ssize_t ne, n1, n2, n3, ns, s1, s2, s3;
    const int64_t *mid = get_buf(&bs, a[0], 8, &ne), *off = NULL, *dur = NULL, *nst = NULL;
    const int64_t *smid = NULL, *sint = NULL;
    const uint8_t *skind = NULL;
    const double *sdbl = NULL;
    if (mid && (off = get_buf(&bs, a[1], 8, &n1)) && (dur = get_buf(&bs, a[2], 8, &n2))
        && (nst = get_buf(&bs, a[3], 8, &n3)) && (smid = get_buf(&bs, a[4], 8, &ns))
        && (skind = get_buf(&bs, a[5], 1, &s1)) && (sint = get_buf(&bs, a[6], 8, &s2))
        && (sdbl = get_buf(&bs, a[7], 8, &s3))) {
        if (n1 != ne || n2 != ne || n3 != ne || s1 != ns || s2 != ns || s3 != ns) {
            PyErr_SetString(PyExc_ValueError, "columns of different lengths");
            goto done;
        }
        Py_ssize_t s = 0, o = 0, nobj = PyList_GET_SIZE(objs);
        for (Py_ssize_t e = 0; e < ne; e++) {
            if (nst[e] < 0 || nst[e] > ns - s) {
                PyErr_SetString(PyExc_ValueError, "stat counts run past the stat columns");
                goto done;
            }
            /* sizes first: the event's length prefix, then each stat's */
            Py_ssize_t size = (mid[e] ? 1 + varint_len((uint64_t)mid[e]) : 0) + 1 + varint_len((uint64_t)off[e])
                              + (dur[e] ? 1 + varint_len((uint64_t)dur[e]) : 0);
            Py_ssize_t oo = o;
            for (Py_ssize_t k = s; k < s + nst[e]; k++) {
                Py_ssize_t len = 0;
                if (skind[k] == 4 || skind[k] == 5) {
                    if (oo >= nobj) {
                        PyErr_SetString(PyExc_ValueError, "fewer str/bytes values than str/bytes stats");
                        goto done;
                    }
                    if (!obj_bytes(PyList_GET_ITEM(objs, oo++), &len))
                        goto done;
                }
                Py_ssize_t ss = stat_size(smid[k], skind[k], sint[k], len);
                size += 1 + varint_len((uint64_t)ss) + ss;
            }
            if (vec_push(&v, "\x22", 1) < 0 || put_varint(&v, (uint64_t)size) < 0)
                goto done;
            if (mid[e] && (vec_push(&v, "\x08", 1) < 0 || put_varint(&v, (uint64_t)mid[e]) < 0))
                goto done;
            if (vec_push(&v, "\x10", 1) < 0 || put_varint(&v, (uint64_t)off[e]) < 0)
                goto done;
            if (dur[e] && (vec_push(&v, "\x18", 1) < 0 || put_varint(&v, (uint64_t)dur[e]) < 0))
                goto done;
            for (Py_ssize_t k = s; k < s + nst[e]; k++) {
                Py_ssize_t len = 0;
                const char *p = NULL;
                if (skind[k] == 4 || skind[k] == 5)
                    p = obj_bytes(PyList_GET_ITEM(objs, o++), &len);
                Py_ssize_t ss = stat_size(smid[k], skind[k], sint[k], len);
                if (vec_push(&v, "\x22", 1) < 0 || put_varint(&v, (uint64_t)ss) < 0)
                    goto done;
                if (smid[k] && (vec_push(&v, "\x08", 1) < 0 || put_varint(&v, (uint64_t)smid[k]) < 0))
                    goto done;
                switch (skind[k]) {
                case 1:
                    if (vec_push(&v, "\x11", 1) < 0 || vec_push(&v, &sdbl[k], 8) < 0)
                        goto done;
                    break;
                case 2: case 3: case 6: {
                    const char *t = skind[k] == 2 ? "\x18" : skind[k] == 3 ? "\x20" : "\x38";
                    if (vec_push(&v, t, 1) < 0 || put_varint(&v, (uint64_t)sint[k]) < 0)
                        goto done;
                    break;
                }
                case 4: case 5:
                    if (vec_push(&v, skind[k] == 4 ? "\x2a" : "\x32", 1) < 0 || put_varint(&v, (uint64_t)len) < 0
                        || vec_push(&v, p, (size_t)len) < 0)
                        goto done;
                    break;
                default:
                    break;
                }
            }
            s += nst[e];
        }
        if (s != ns || o != nobj) {
            PyErr_SetString(PyExc_ValueError, "stat columns longer than the events' stat counts");
            goto done;
        }
        out = PyBytes_FromStringAndSize(v.p ? v.p : "", (Py_ssize_t)v.n);
    }
done:
    PyMem_Free(v.p);
    for (int i = 0; i < bs.n; i++)
        PyBuffer_Release(&bs.b[i]);
    return out;
}
