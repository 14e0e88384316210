/* polyprof.formats.xspace._wire: the events of a serialized XSpace, as columns.
 *
 * One pass over the protobuf wire format, the whole XSpace: XSpace.planes (1) ->
 * XPlane.lines (3) -> XLine.events (4) -> XEvent fields and XEvent.stats (4) -> XStat
 * fields as columns; XPlane.event_metadata (4, map entries) -> XEventMetadata fields and
 * stats as columns; the small rest (plane ids, names, stats and stat metadata, line
 * fields, errors, warnings, hostnames) as Python objects. So reading never needs
 * protobuf's Python classes (importing them costs more than this whole walk). The pure-Python reference
 * is `decode.columns_from_messages` (the same columns from protobuf's own objects);
 * tests/test_xspace_decode.py checks the two agree on every shared trace and on
 * generated XSpaces.
 *
 * Protobuf semantics kept: unknown fields (and known fields with another wire type)
 * are skipped, groups included; the last value of a scalar field wins; the oneofs
 * (XEvent.data, XStat.value) end as the member set last; every string field is checked
 * as UTF-8. Anything malformed (a varint or a length running past its message, field
 * number 0, a stray end-group, text that is not UTF-8) raises ValueError (or
 * UnicodeDecodeError), and so does a map entry with two values (protobuf would merge
 * them); the caller then reads through protobuf, whose error it reports.
 *
 * columns(data) returns a tuple of bytes objects holding native-endian arrays, and one list:
 *   plane_lines  int64[planes]   lines per plane
 *   line_events  int64[lines]    events per line
 *   ev_mid, ev_off, ev_dur, ev_nocc  int64[events]  (off 0 where data is num_occurrences)
 *   ev_isnocc    uint8[events]   1 where XEvent.data is num_occurrences
 *   ev_stats     int64[events]   stats per event
 *   st_mid       int64[stats]
 *   st_kind      uint8[stats]    0 unset, 1 double, 2 uint64, 3 int64, 4 str, 5 bytes, 6 ref
 *   st_int       int64[stats]    uint64/int64/ref value (uint64 bits as int64)
 *   st_dbl       float64[stats]  double value
 *   plane_mds    int64[planes]   event metadata entries per plane (map entries, in file order)
 *   md_key       int64[entries]  the entry's key; md_stats, md_children int64[entries]: counts
 *   md_child     int64[...]      child ids; ms_mid, ms_kind, ms_int, ms_dbl: metadata stats
 *   objs         list            the str (decoded UTF-8) and bytes values of event stats
 *   mdtext       list            per entry: name, display name (str), metadata (bytes)
 *   mdobjs       list            the str and bytes values of metadata stats
 *   planes       list            per plane: (id, name, {stat metadata id: name}, [(stat id, kind, value)])
 *   lines        list            per line: (id, display_id, name, display_name, timestamp_ns, duration_ps)
 *   texts        list            [errors, warnings, hostnames]
 *
 * encode(...) is the way back for the writer: the same columns (one line's events, ref
 * values as stat ids, str/bytes values in `objs`) into the bytes of XLine.events entries,
 * field by field as protobuf's own serializer writes them (zero scalars omitted, the
 * XEvent.offset_ps oneof always present), so XLine.MergeFromString takes them in.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    char *p;
    size_t n, cap;
} vec_t;

static int
vec_push(vec_t *v, const void *x, size_t size)
{
    if (v->n + size > v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4096;
        while (cap < v->n + size)
            cap *= 2;
        char *q = PyMem_Realloc(v->p, cap);
        if (!q) {
            PyErr_NoMemory();
            return -1;
        }
        v->p = q;
        v->cap = cap;
    }
    memcpy(v->p + v->n, x, size);
    v->n += size;
    return 0;
}

enum { PLANE_LINES, LINE_EVENTS, EV_MID, EV_OFF, EV_DUR, EV_NOCC, EV_ISNOCC, EV_STATS,
       ST_MID, ST_KIND, ST_INT, ST_DBL,
       PLANE_MDS, MD_KEY, MD_STATS, MD_CHILDREN, MD_CHILD,
       MS_MID, MS_KIND, MS_INT, MS_DBL, N_VECS };

typedef struct {
    vec_t v[N_VECS];
    PyObject *objs;    /* the str/bytes values of event stats */
    PyObject *mdtext;  /* per metadata entry: name, display name, metadata bytes */
    PyObject *mdobjs;  /* the str/bytes values of metadata stats */
    PyObject *planes;  /* per plane: (id, name, {stat metadata id: name}, [(stat id, kind, value)]) */
    PyObject *lines;   /* per line: (id, display_id, name, display_name, timestamp_ns, duration_ps) */
    PyObject *texts;   /* XSpace.errors, warnings, hostnames: a tuple of three lists */
    const uint8_t *base;
} state_t;

#define PUSH(st, which, type, val)                                              \
    do {                                                                        \
        type _x = (val);                                                        \
        if (vec_push(&(st)->v[which], &_x, sizeof _x) < 0)                      \
            return -1;                                                          \
    } while (0)

static int
bad(const state_t *st, const uint8_t *at, const char *what)
{
    PyErr_Format(PyExc_ValueError, "%s at byte %zd", what, (Py_ssize_t)(at - st->base));
    return -1;
}

static inline int
varint(const state_t *st, const uint8_t **pp, const uint8_t *end, uint64_t *out)
{
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (p >= end)
            return bad(st, p, "varint runs past its message");
        uint8_t b = *p++;
        if (shift < 64)
            v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = v;
            *pp = p;
            return 0;
        }
    }
    return bad(st, p, "varint longer than 10 bytes");
}

/* The field at *pp: its number, wire type, and (for wire type 2) the payload span. */
static int
tag(const state_t *st, const uint8_t **pp, const uint8_t *end, uint32_t *field, int *wt)
{
    uint64_t t;
    const uint8_t *at = *pp;
    if (varint(st, pp, end, &t) < 0)
        return -1;
    if ((t >> 3) == 0 || (t >> 3) > 0x1FFFFFFF)
        return bad(st, at, "invalid field number");
    *field = (uint32_t)(t >> 3);
    *wt = (int)(t & 7);
    return 0;
}

static int
span(const state_t *st, const uint8_t **pp, const uint8_t *end, const uint8_t **s, const uint8_t **e)
{
    uint64_t len;
    if (varint(st, pp, end, &len) < 0)
        return -1;
    if (len > (uint64_t)(end - *pp))
        return bad(st, *pp, "length runs past its message");
    *s = *pp;
    *e = *pp + len;
    *pp = *e;
    return 0;
}

static int skip(const state_t *st, const uint8_t **pp, const uint8_t *end, uint32_t field, int wt, int depth);

static int
skip_group(const state_t *st, const uint8_t **pp, const uint8_t *end, uint32_t field, int depth)
{
    if (depth > 100)
        return bad(st, *pp, "groups nested too deep");
    while (*pp < end) {
        uint32_t f;
        int wt;
        if (tag(st, pp, end, &f, &wt) < 0)
            return -1;
        if (wt == 4)
            return f == field ? 0 : bad(st, *pp, "end-group tag does not match its group");
        if (skip(st, pp, end, f, wt, depth + 1) < 0)
            return -1;
    }
    return bad(st, *pp, "group runs past its message");
}

static int
skip(const state_t *st, const uint8_t **pp, const uint8_t *end, uint32_t field, int wt, int depth)
{
    uint64_t v;
    const uint8_t *s, *e;
    switch (wt) {
    case 0:
        return varint(st, pp, end, &v);
    case 1:
    case 5: {
        size_t n = wt == 1 ? 8 : 4;
        if ((size_t)(end - *pp) < n)
            return bad(st, *pp, "fixed-size field runs past its message");
        *pp += n;
        return 0;
    }
    case 2:
        return span(st, pp, end, &s, &e);
    case 3:
        return skip_group(st, pp, end, field, depth);
    default:
        return bad(st, *pp, "invalid wire type");
    }
}

/* One XStat into the stat columns starting at vector `at` (ST_MID or MS_MID), its
 * str/bytes value appended to `objs`. */
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
    if (kind == 4 || kind == 5) {
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
            if (span(st, &p, end, &s, &e) < 0 || xstat(st, s, e, ST_MID, st->objs) < 0)
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
            if (span(st, &p, end, &s, &e) < 0)
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
                if (plane(st, s, e) < 0)
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

static PyObject *
columns(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    state_t st;
    memset(&st, 0, sizeof st);
    PyObject *out = NULL;
    st.base = view.buf;
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
            PyObject *b = PyBytes_FromStringAndSize(st.v[i].p ? st.v[i].p : "", (Py_ssize_t)st.v[i].n);
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
    Py_XDECREF(st.objs);
    Py_XDECREF(st.mdtext);
    Py_XDECREF(st.mdobjs);
    Py_XDECREF(st.planes);
    Py_XDECREF(st.lines);
    Py_XDECREF(st.texts);
    PyBuffer_Release(&view);
    return out;
}


/* ------------------------------------------------------------------ writing */

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

static PyObject *
encode(PyObject *self, PyObject *args)
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

static PyMethodDef methods[] = {
    {"columns", columns, METH_O,
     "columns(data) -> tuple: the events and event stats of a serialized XSpace, as columns."},
    {"encode", encode, METH_VARARGS,
     "encode(mid, off, dur, nstats, st_mid, st_kind, st_int, st_dbl, objs) -> bytes: XLine.events "
     "(field 4) entries, as protobuf writes them."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_wire", "The events of a serialized XSpace, as columns.", -1, methods,
};

PyMODINIT_FUNC
PyInit__wire(void)
{
    return PyModule_Create(&moduledef);
}
