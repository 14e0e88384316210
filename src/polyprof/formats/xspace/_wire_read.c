/* polyprof.formats.xspace._wire, reading: a serialized XSpace into columns (what
 * `columns(data)` returns is described in _wire.c). */
#include "_wire.h"

/* FNV-1a over a value's bytes, its kind (4 str, 5 bytes) mixed in, then MurmurHash3's
 * finalizer (so the table's low bits depend on every byte). */
static uint64_t
text_hash(const uint8_t *s, Py_ssize_t n, uint8_t kind)
{
    uint64_t h = 0xcbf29ce484222325ULL ^ kind;
    for (Py_ssize_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 0x100000001b3ULL;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h;
}

/* Probes before a value is given an object of its own, unshared: a file crafted so that
 * many values collide costs at most this many comparisons a stat. */
#define TEXT_PROBES 64

static int
text_grow(text_set_t *t)
{
    size_t cap = t->cap ? t->cap * 2 : 1024;
    text_slot_t *slots = PyMem_Calloc(cap, sizeof *slots);
    if (!slots) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < t->cap; i++) {
        if (t->slots[i].index) {
            size_t j = (size_t)t->slots[i].hash & (cap - 1);
            while (slots[j].index)
                j = (j + 1) & (cap - 1);
            slots[j] = t->slots[i];
        }
    }
    PyMem_Free(t->slots);
    t->slots = slots;
    t->cap = cap;
    return 0;
}

/* The place in st->objs of the str (kind 4) or bytes (5) value s..e: the object made for
 * the first stat with these bytes and kind, or a new one appended. -1 on error. */
static int64_t
text_index(state_t *st, const uint8_t *s, const uint8_t *e, uint8_t kind)
{
    text_set_t *t = &st->seen;
    if (2 * (t->used + 1) > t->cap && text_grow(t) < 0)
        return -1;
    Py_ssize_t n = e - s;
    uint64_t h = text_hash(s, n, kind);
    size_t j = (size_t)h & (t->cap - 1);
    int probes = 0;
    for (; t->slots[j].index && probes < TEXT_PROBES; j = (j + 1) & (t->cap - 1), probes++) {
        text_slot_t *x = &t->slots[j];
        if (x->hash == h && x->n == n && memcmp(x->s, s, (size_t)n) == 0
            && (PyUnicode_Check(PyList_GET_ITEM(st->objs, x->index - 1)) == (kind == 4)))
            return x->index - 1;
    }
    PyObject *o = kind == 4 ? PyUnicode_DecodeUTF8((const char *)s, n, NULL)
                            : PyBytes_FromStringAndSize((const char *)s, n);
    if (!o)
        return -1;
    int rc = PyList_Append(st->objs, o);
    Py_DECREF(o);
    if (rc < 0)
        return -1;
    if (t->slots[j].index) /* TEXT_PROBES taken: not shared */
        return PyList_GET_SIZE(st->objs) - 1;
    t->slots[j] = (text_slot_t){s, n, h, PyList_GET_SIZE(st->objs)};
    t->used++;
    return t->slots[j].index - 1;
}

/* One XStat into the stat columns starting at vector `at` (ST_MID or MS_MID). With
 * `objs` NULL (event stats) every value goes into the int column: a double as its bits
 * (the double column stays empty), a str/bytes value as its place among the distinct
 * values (text_index); else a double into the double column, a str/bytes value appended
 * to `objs`. */
static int
xstat(state_t *st, const uint8_t *p, const uint8_t *end, int at, PyObject *objs)
{
    int64_t mid = 0, ival = 0;
    double dval = 0.0;
    uint8_t kind = 0;
    const uint8_t *s = NULL, *e = NULL;
    while (p < end) {
        uint32_t f;
        int wt;
        uint64_t v;
        if (tag(st, &p, end, &f, &wt) < 0)
            return -1;
        if (wt == 0 && (f == 1 || f == 3 || f == 4 || f == 7)) {
            if (varint(st, &p, end, &v) < 0)
                return -1;
            if (f == 1)
                mid = (int64_t)v;
            else {
                ival = (int64_t)v;
                kind = f == 3 ? 2 : f == 4 ? 3 : 6;
            }
        } else if (wt == 1 && f == 2) {
            if (end - p < 8)
                return bad(st, p, "double runs past its message");
            memcpy(&dval, p, 8);
            p += 8;
            kind = 1;
        } else if (wt == 2 && (f == 5 || f == 6)) {
            if (span(st, &p, end, &s, &e) < 0)
                return -1;
            kind = f == 5 ? 4 : 5;
        } else if (skip(st, &p, end, f, wt, 0) < 0) {
            return -1;
        }
    }
    if (kind != 2 && kind != 3 && kind != 6)
        ival = 0; /* only the oneof member set last has a value */
    if (kind != 1)
        dval = 0.0;
    if (!objs) { /* an event stat: one int64 value column (the double's bits, a text's place) */
        if (kind == 1)
            memcpy(&ival, &dval, 8);
        else if ((kind == 4 || kind == 5) && (ival = text_index(st, s, e, kind)) < 0)
            return -1;
    } else if (kind == 4 || kind == 5) {
        PyObject *o = kind == 4 ? PyUnicode_DecodeUTF8((const char *)s, e - s, NULL)
                                : PyBytes_FromStringAndSize((const char *)s, e - s);
        if (!o)
            return -1;
        int rc = PyList_Append(objs, o);
        Py_DECREF(o);
        if (rc < 0)
            return -1;
    }
    PUSH(st, at, int64_t, mid);
    PUSH(st, at + 1, uint8_t, kind);
    PUSH(st, at + 2, int64_t, ival);
    if (objs)
        PUSH(st, at + 3, double, dval);
    return 0;
}

static int
event(state_t *st, const uint8_t *p, const uint8_t *end)
{
    int64_t mid = 0, off = 0, dur = 0, nocc = 0, nstats = 0;
    uint8_t isnocc = 0;
    while (p < end) {
        uint32_t f;
        int wt;
        uint64_t v;
        const uint8_t *s, *e;
        if (tag(st, &p, end, &f, &wt) < 0)
            return -1;
        if (wt == 0 && (f == 1 || f == 2 || f == 3 || f == 5)) {
            if (varint(st, &p, end, &v) < 0)
                return -1;
            if (f == 1)
                mid = (int64_t)v;
            else if (f == 2) {
                off = (int64_t)v;
                nocc = 0;
                isnocc = 0;
            } else if (f == 3)
                dur = (int64_t)v;
            else {
                nocc = (int64_t)v;
                off = 0;
                isnocc = 1;
            }
        } else if (wt == 2 && f == 4) {
            if (span(st, &p, end, &s, &e) < 0 || xstat(st, s, e, ST_MID, NULL) < 0)
                return -1;
            nstats++;
        } else if (skip(st, &p, end, f, wt, 0) < 0) {
            return -1;
        }
    }
    PUSH(st, EV_MID, int64_t, mid);
    PUSH(st, EV_OFF, int64_t, off);
    PUSH(st, EV_DUR, int64_t, dur);
    PUSH(st, EV_NOCC, int64_t, nocc);
    PUSH(st, EV_ISNOCC, uint8_t, isnocc);
    PUSH(st, EV_STATS, int64_t, nstats);
    return 0;
}


static int
append_text(PyObject *list, const uint8_t *s, const uint8_t *e, int is_str)
{
    Py_ssize_t n = s ? e - s : 0;
    const char *p = s ? (const char *)s : "";
    PyObject *o = is_str ? PyUnicode_DecodeUTF8(p, n, NULL) : PyBytes_FromStringAndSize(p, n);
    if (!o)
        return -1;
    int rc = PyList_Append(list, o);
    Py_DECREF(o);
    return rc;
}

/* XEventMetadata: id (1), name (2), metadata (3), display_name (4), stats (5), child_id (6). */
static int
event_metadata(state_t *st, const uint8_t *p, const uint8_t *end, int64_t *nstats, int64_t *nchild)
{
    const uint8_t *ns = NULL, *ne = NULL, *ds = NULL, *de = NULL, *ms = NULL, *me = NULL;
    while (p < end) {
        uint32_t f;
        int wt;
        uint64_t v;
        const uint8_t *s, *e;
        if (tag(st, &p, end, &f, &wt) < 0)
            return -1;
        if (wt == 2 && f >= 2 && f <= 6) {
            if (span(st, &p, end, &s, &e) < 0)
                return -1;
            if (f == 2) {
                ns = s;
                ne = e;
            } else if (f == 3) {
                ms = s;
                me = e;
            } else if (f == 4) {
                ds = s;
                de = e;
            } else if (f == 5) {
                if (xstat(st, s, e, MS_MID, st->mdobjs) < 0)
                    return -1;
                (*nstats)++;
            } else {
                while (s < e) { /* packed child ids */
                    if (varint(st, &s, e, &v) < 0)
                        return -1;
                    PUSH(st, MD_CHILD, int64_t, (int64_t)v);
                    (*nchild)++;
                }
            }
        } else if (wt == 0 && f == 6) {
            if (varint(st, &p, end, &v) < 0)
                return -1;
            PUSH(st, MD_CHILD, int64_t, (int64_t)v);
            (*nchild)++;
        } else if (skip(st, &p, end, f, wt, 0) < 0) {
            return -1;
        }
    }
    if (append_text(st->mdtext, ns, ne, 1) < 0 || append_text(st->mdtext, ds, de, 1) < 0
        || append_text(st->mdtext, ms, me, 0) < 0)
        return -1;
    return 0;
}

/* The key (1) and value (2) of a map entry. Returns 1, or 0 for an entry protobuf
 * drops (one holding any other field: upb keeps it among the plane's unknown fields);
 * a value given twice (protobuf would merge them) is left to protobuf (ValueError). */
static int
map_entry(const state_t *st, const uint8_t *p, const uint8_t *end, int64_t *key, const uint8_t **vs,
          const uint8_t **ve)
{
    int values = 0, unknown = 0;
    *key = 0;
    *vs = *ve = NULL;
    while (p < end) {
        uint32_t f;
        int wt;
        uint64_t x;
        const uint8_t *s, *e;
        if (tag(st, &p, end, &f, &wt) < 0)
            return -1;
        if (wt == 0 && f == 1) {
            if (varint(st, &p, end, &x) < 0)
                return -1;
            *key = (int64_t)x;
        } else if (wt == 2 && f == 2) {
            if (values++)
                return bad(st, p, "a map entry with two values");
            if (span(st, &p, end, &s, &e) < 0)
                return -1;
            *vs = s;
            *ve = e;
        } else {
            unknown = 1;
            if (skip(st, &p, end, f, wt, 0) < 0)
                return -1;
        }
    }
    return unknown ? 0 : 1;
}

/* One XPlane.event_metadata map entry; 1 if added, 0 if dropped. */
static int
metadata_entry(state_t *st, const uint8_t *p, const uint8_t *end)
{
    int64_t key, nstats = 0, nchild = 0;
    const uint8_t *vs, *ve;
    int rc = map_entry(st, p, end, &key, &vs, &ve);
    if (rc <= 0)
        return rc;
    if (event_metadata(st, vs ? vs : p, vs ? ve : p, &nstats, &nchild) < 0)
        return -1;
    PUSH(st, MD_KEY, int64_t, key);
    PUSH(st, MD_STATS, int64_t, nstats);
    PUSH(st, MD_CHILDREN, int64_t, nchild);
    return 1;
}

static PyObject *
utf8(const state_t *st, const uint8_t *s, const uint8_t *e)
{
    return s ? PyUnicode_DecodeUTF8((const char *)s, e - s, NULL) : PyUnicode_FromStringAndSize("", 0);
}

/* XLine: id (1), display_id (10), name (2), display_name (11), timestamp_ns (3),
 * duration_ps (9), events (4). */
static int
line(state_t *st, const uint8_t *p, const uint8_t *end)
{
    int64_t n = 0, v[4] = {0, 0, 0, 0}; /* id, display_id, timestamp_ns, duration_ps */
    const uint8_t *ns = NULL, *ne = NULL, *ds = NULL, *de = NULL;
    while (p < end) {
        uint32_t f;
        int wt;
        uint64_t x;
        const uint8_t *s, *e;
        if (tag(st, &p, end, &f, &wt) < 0)
            return -1;
        if (wt == 0 && (f == 1 || f == 10 || f == 3 || f == 9)) {
            if (varint(st, &p, end, &x) < 0)
                return -1;
            v[f == 1 ? 0 : f == 10 ? 1 : f == 3 ? 2 : 3] = (int64_t)x;
        } else if (wt == 2 && (f == 2 || f == 4 || f == 11)) {
            if (span(st, &p, end, &s, &e) < 0)
                return -1;
            if (f == 4) {
                if (event(st, s, e) < 0)
                    return -1;
                n++;
            } else if (f == 2) {
                ns = s;
                ne = e;
            } else {
                ds = s;
                de = e;
            }
        } else if (skip(st, &p, end, f, wt, 0) < 0) {
            return -1;
        }
    }
    PUSH(st, LINE_EVENTS, int64_t, n);
    PyObject *name = utf8(st, ns, ne), *shown = name ? utf8(st, ds, de) : NULL;
    PyObject *t = shown ? Py_BuildValue("(LLOOLL)", (long long)v[0], (long long)v[1], name, shown, (long long)v[2],
                                        (long long)v[3]) : NULL;
    Py_XDECREF(name);
    Py_XDECREF(shown);
    if (!t)
        return -1;
    int rc = PyList_Append(st->lines, t);
    Py_DECREF(t);
    return rc;
}

/* One XStat as a Python tuple (stat metadata id, kind code, value); the value of a
 * uint64 or ref stat is a Python int of the unsigned value. */
static PyObject *
stat_tuple(state_t *st, const uint8_t *p, const uint8_t *end)
{
    PyObject *objs = PyList_New(0);
    if (!objs)
        return NULL;
    PyObject *out = NULL;
    size_t at = st->v[MS_MID].n; /* decode into the metadata-stat columns, then take it back out */
    if (xstat(st, p, end, MS_MID, objs) == 0) {
        int64_t mid, ival;
        uint8_t kind;
        double dval;
        memcpy(&mid, st->v[MS_MID].p + at, 8);
        memcpy(&kind, st->v[MS_KIND].p + at / 8, 1);
        memcpy(&ival, st->v[MS_INT].p + at, 8);
        memcpy(&dval, st->v[MS_DBL].p + at, 8);
        st->v[MS_MID].n -= 8;
        st->v[MS_KIND].n -= 1;
        st->v[MS_INT].n -= 8;
        st->v[MS_DBL].n -= 8;
        PyObject *val = kind == 1 ? PyFloat_FromDouble(dval)
                      : kind == 3 ? PyLong_FromLongLong(ival)
                      : (kind == 2 || kind == 6) ? PyLong_FromUnsignedLongLong((uint64_t)ival)
                      : (kind == 4 || kind == 5) ? Py_NewRef(PyList_GET_ITEM(objs, 0))
                      : Py_NewRef(Py_None);
        if (val) {
            out = Py_BuildValue("(LiO)", (long long)mid, (int)kind, val);
            Py_DECREF(val);
        }
    }
    Py_DECREF(objs);
    return out;
}

/* One XPlane.stat_metadata map entry: value XStatMetadata (id 1, name 2, description 3)
 * into the dict {key: name}. */
static int
stat_metadata_entry(state_t *st, const uint8_t *p, const uint8_t *end, PyObject *names)
{
    int64_t key;
    const uint8_t *s, *e, *ns = NULL, *ne = NULL;
    int rc = map_entry(st, p, end, &key, &s, &e);
    if (rc <= 0)
        return rc;
    while (s && s < e) {
        uint32_t g;
        int wt;
        const uint8_t *s2, *e2;
        if (tag(st, &s, e, &g, &wt) < 0)
            return -1;
        if (wt == 2 && (g == 2 || g == 3)) {
            if (span(st, &s, e, &s2, &e2) < 0)
                return -1;
            if (g == 2) {
                ns = s2;
                ne = e2;
            } else { /* the description: checked as UTF-8, as protobuf does */
                PyObject *d = utf8(st, s2, e2);
                if (!d)
                    return -1;
                Py_DECREF(d);
            }
        } else if (skip(st, &s, e, g, wt, 0) < 0) {
            return -1;
        }
    }
    PyObject *k = PyLong_FromLongLong(key), *name = k ? utf8(st, ns, ne) : NULL;
    rc = name ? PyDict_SetItem(names, k, name) : -1;
    Py_XDECREF(k);
    Py_XDECREF(name);
    return rc;
}

/* Planes, lines and metadata entries a file may hold: each costs Python objects of a
 * hundred bytes or more, and each takes two bytes of wire data at least (an empty
 * message), where a profile's take tens (an id, a name, times, events); so a file holding
 * more than MAX_ITEMS_BASE plus one per ITEM_BYTES bytes is refused (OverflowError) rather
 * than read into some hundred times its size (the test data's profiles: 31 bytes an item
 * and more, 190 and more above 1 kB). */
#define MAX_ITEMS_BASE 65536
#define ITEM_BYTES 16

static int
count_item(state_t *st)
{
    if (++st->items <= st->max_items)
        return 0;
    PyErr_Format(PyExc_OverflowError,
                 "holds more planes, lines and metadata entries than a profile of %lld bytes (over %lld: a "
                 "profile's take tens of bytes each)", (long long)st->size, (long long)st->max_items);
    return -1;
}

/* XPlane: id (1), name (2), lines (3), event_metadata (4), stat_metadata (5), stats (6). */
static int
plane_fields(state_t *st, const uint8_t *p, const uint8_t *end, PyObject *names, PyObject *stats, int64_t *id,
             const uint8_t **ns, const uint8_t **ne)
{
    int64_t nlines = 0, nmd = 0;
    while (p < end) {
        uint32_t f;
        int wt;
        uint64_t x;
        const uint8_t *s, *e;
        if (tag(st, &p, end, &f, &wt) < 0)
            return -1;
        if (wt == 0 && f == 1) {
            if (varint(st, &p, end, &x) < 0)
                return -1;
            *id = (int64_t)x;
        } else if (wt == 2 && f >= 2 && f <= 6) {
            if (span(st, &p, end, &s, &e) < 0 || (f >= 3 && f <= 5 && count_item(st) < 0))
                return -1;
            if (f == 2) {
                *ns = s;
                *ne = e;
            } else if (f == 3) {
                if (line(st, s, e) < 0)
                    return -1;
                nlines++;
            } else if (f == 4) {
                int rc = metadata_entry(st, s, e);
                if (rc < 0)
                    return -1;
                nmd += rc;
            } else if (f == 5) {
                if (stat_metadata_entry(st, s, e, names) < 0)
                    return -1;
            } else {
                PyObject *t = stat_tuple(st, s, e);
                int rc = t ? PyList_Append(stats, t) : -1;
                Py_XDECREF(t);
                if (rc < 0)
                    return -1;
            }
        } else if (skip(st, &p, end, f, wt, 0) < 0) {
            return -1;
        }
    }
    PUSH(st, PLANE_LINES, int64_t, nlines);
    PUSH(st, PLANE_MDS, int64_t, nmd);
    return 0;
}

static int
plane(state_t *st, const uint8_t *p, const uint8_t *end)
{
    PyObject *names = PyDict_New(), *stats = PyList_New(0), *name = NULL, *t = NULL;
    int64_t id = 0;
    const uint8_t *ns = NULL, *ne = NULL;
    int rc = -1;
    if (names && stats && plane_fields(st, p, end, names, stats, &id, &ns, &ne) == 0 && (name = utf8(st, ns, ne))
        && (t = Py_BuildValue("(LOOO)", (long long)id, name, names, stats)))
        rc = PyList_Append(st->planes, t);
    Py_XDECREF(names);
    Py_XDECREF(stats);
    Py_XDECREF(name);
    Py_XDECREF(t);
    return rc;
}

/* XSpace: planes (1), errors (2), warnings (3), hostnames (4). */
static int
space(state_t *st, const uint8_t *p, const uint8_t *end)
{
    while (p < end) {
        uint32_t f;
        int wt;
        const uint8_t *s, *e;
        if (tag(st, &p, end, &f, &wt) < 0)
            return -1;
        if (wt == 2 && f >= 1 && f <= 4) {
            if (span(st, &p, end, &s, &e) < 0)
                return -1;
            if (f == 1) {
                if (count_item(st) < 0 || plane(st, s, e) < 0)
                    return -1;
            } else {
                PyObject *t = utf8(st, s, e);
                int rc = t ? PyList_Append(PyTuple_GET_ITEM(st->texts, f - 2), t) : -1;
                Py_XDECREF(t);
                if (rc < 0)
                    return -1;
            }
        } else if (skip(st, &p, end, f, wt, 0) < 0) {
            return -1;
        }
    }
    return 0;
}

PyObject *
wire_columns(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    state_t st;
    memset(&st, 0, sizeof st);
    PyObject *out = NULL;
    st.base = view.buf;
    st.size = (int64_t)view.len;
    st.max_items = MAX_ITEMS_BASE + st.size / ITEM_BYTES;
    st.objs = PyList_New(0);
    st.mdtext = PyList_New(0);
    st.mdobjs = PyList_New(0);
    st.planes = PyList_New(0);
    st.lines = PyList_New(0);
    st.texts = Py_BuildValue("([][][])");
    if (st.objs && st.mdtext && st.mdobjs && st.planes && st.lines && st.texts
        && space(&st, st.base, st.base + view.len) == 0) {
        out = PyTuple_New(N_VECS + 6);
        for (int i = 0; out && i < N_VECS; i++) {
            /* each buffer freed once copied: a big file's columns are held twice one at a time */
            PyObject *b = PyBytes_FromStringAndSize(st.v[i].p ? st.v[i].p : "", (Py_ssize_t)st.v[i].n);
            PyMem_Free(st.v[i].p);
            st.v[i].p = NULL;
            if (!b) {
                Py_CLEAR(out);
                break;
            }
            PyTuple_SET_ITEM(out, i, b);
        }
        if (out) {
            PyObject *lists[6] = {st.objs, st.mdtext, st.mdobjs, st.planes, st.lines, st.texts};
            for (int i = 0; i < 6; i++) {
                Py_INCREF(lists[i]);
                PyTuple_SET_ITEM(out, N_VECS + i, lists[i]);
            }
        }
    }
    for (int i = 0; i < N_VECS; i++)
        PyMem_Free(st.v[i].p);
    PyMem_Free(st.seen.slots);
    Py_XDECREF(st.objs);
    Py_XDECREF(st.mdtext);
    Py_XDECREF(st.mdobjs);
    Py_XDECREF(st.planes);
    Py_XDECREF(st.lines);
    Py_XDECREF(st.texts);
    PyBuffer_Release(&view);
    return out;
}
