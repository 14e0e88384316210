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
 * same Trace.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------------ growable buffers */
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

#define PUSH(v, type, val)                                                      \
    do {                                                                        \
        type _x = (val);                                                        \
        if (vec_push((v), &_x, sizeof _x) < 0)                                  \
            return -1;                                                          \
    } while (0)

/* ------------------------------------------------------------------ the wire format */
/* Each returns 0, or -1 for bytes that are not what protobuf would read plainly (no
 * Python error set: the packet goes to the Python path, which says what is wrong). */
static int
rd_varint(const uint8_t **pp, const uint8_t *end, uint64_t *out)
{
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (p >= end)
            return -1;
        uint8_t b = *p++;
        if (shift == 63 && (b & 0x7E))
            return -1; /* bits past 64 */
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = v;
            *pp = p;
            return 0;
        }
    }
    return -1;
}

static int
rd_tag(const uint8_t **pp, const uint8_t *end, uint32_t *field, int *wt)
{
    uint64_t t;
    if (rd_varint(pp, end, &t) < 0 || (t >> 3) == 0 || (t >> 3) > 0x1FFFFFFF)
        return -1;
    *field = (uint32_t)(t >> 3);
    *wt = (int)(t & 7);
    return 0;
}

static int
rd_span(const uint8_t **pp, const uint8_t *end, const uint8_t **s, const uint8_t **e)
{
    uint64_t len;
    if (rd_varint(pp, end, &len) < 0 || len > (uint64_t)(end - *pp))
        return -1;
    *s = *pp;
    *e = *pp + len;
    *pp = *e;
    return 0;
}

/* An unknown field skipped (groups and invalid wire types: left to protobuf). */
static int
rd_skip(const uint8_t **pp, const uint8_t *end, int wt)
{
    uint64_t v;
    const uint8_t *s, *e;
    switch (wt) {
    case 0:
        return rd_varint(pp, end, &v);
    case 1:
    case 5: {
        size_t n = wt == 1 ? 8 : 4;
        if ((size_t)(end - *pp) < n)
            return -1;
        *pp += n;
        return 0;
    }
    case 2:
        return rd_span(pp, end, &s, &e);
    default:
        return -1;
    }
}

static uint64_t
rd_fixed64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* A repeated integer field's items, packed (wire type 2) or not (0 varint, 1 fixed64),
 * appended to `out` as (tagged, value) pairs of uint64. */
static int
rd_repeated(const uint8_t **pp, const uint8_t *end, int wt, int fixed, uint64_t tagged, vec_t *out)
{
    uint64_t v;
    if (wt == 2) {
        const uint8_t *s, *e;
        if (rd_span(pp, end, &s, &e) < 0)
            return -1;
        while (s < e) {
            if (fixed) {
                if (e - s < 8)
                    return -1;
                v = rd_fixed64(s);
                s += 8;
            } else if (rd_varint(&s, e, &v) < 0) {
                return -1;
            }
            PUSH(out, uint64_t, tagged);
            PUSH(out, uint64_t, v);
        }
        return 0;
    }
    if (wt != (fixed ? 1 : 0))
        return -1;
    if (fixed) {
        if (end - *pp < 8)
            return -1;
        v = rd_fixed64(*pp);
        *pp += 8;
    } else if (rd_varint(pp, end, &v) < 0) {
        return -1;
    }
    PUSH(out, uint64_t, tagged);
    PUSH(out, uint64_t, v);
    return 0;
}

/* ------------------------------------------------------------------ what a packet says */
enum { FAST = 0, SLOW = 1, FAIL = -1 };
enum { KIND_B, KIND_U, KIND_I, KIND_F, KIND_S, N_KINDS };
static const char KIND_CHARS[N_KINDS] = {'b', 'u', 'i', 'f', 's'};

typedef struct {
    int has_ts, has_clock, cleared, n_te, n_interned;
    uint64_t ts;
    uint32_t clock, seq, flags, dropped;
    const uint8_t *te, *te_end, *in, *in_end;
} packet_t;

typedef struct {
    int has_type, has_track, name_which, value_which, has_time_us;
    int32_t type;
    uint64_t track, name_iid;
    int64_t ivalue;
    double dvalue;
    const uint8_t *name_s, *name_e;
} event_t;

typedef struct {
    int name_which; /* 0 none, 1 iid, 2 text */
    int kind;       /* -1 none, KIND_* */
    int value_how;  /* for KIND_S: 0 text, 1 iid */
    uint64_t name_iid, u;
    double d;
    const uint8_t *name_s, *name_e, *str_s, *str_e;
} annotation_t;

typedef struct {
    uint32_t id;
    int used, valid, has_track;
    uint32_t clock;
    uint64_t track;
    PyObject *seq, *names, *cats, *anames, *values;
} seq_t;

typedef struct {
    PyObject *key; /* str */
    int kind;
    vec_t rows, vals;
    PyObject *objs; /* KIND_S: the values */
} stat_t;

enum { EV_KIND, EV_TRACK, EV_TS, EV_CLOCK, EV_DUR, EV_NAME, EV_CAT, C_TRACK, C_TS, C_CLOCK, C_VALUE, FLOWS,
       N_OUT };

typedef struct {
    PyObject_HEAD
    PyObject *col, *tracks, *uuids, *intern, *strings, *texts;
    vec_t out[N_OUT];
    stat_t *stats;
    size_t n_stats, cap_stats;
    PyObject *stat_index; /* key -> int: its slots' base in `slots` */
    vec_t slots;          /* int64 per (key, kind): the stat's index, or -1 */
    seq_t *seqs;
    size_t cap_seqs;
    vec_t cat_iids, cats, flows, anns; /* one packet's repeated parts */
} Walker;

/* ------------------------------------------------------------------ parsing (no side effects) */
static int
parse_packet(const uint8_t *p, const uint8_t *end, packet_t *k)
{
    memset(k, 0, sizeof *k);
    while (p < end) {
        uint32_t f;
        int wt;
        uint64_t v;
        if (rd_tag(&p, end, &f, &wt) < 0)
            return SLOW;
        switch (f) {
        case 8: case 58: case 10: case 13: case 41: case 42: case 79: case 87:
            if (wt != 0 || rd_varint(&p, end, &v) < 0)
                return SLOW;
            if (f == 8) {
                k->has_ts = 1;
                k->ts = v;
            } else if (f == 58) {
                k->has_clock = 1;
                k->clock = (uint32_t)v;
            } else if (f == 10) {
                k->seq = (uint32_t)v;
            } else if (f == 13) {
                k->flags = (uint32_t)v;
            } else if (f == 41) {
                k->cleared = v != 0;
            } else if (f == 42) {
                k->dropped = (uint32_t)v;
            }
            break;
        case 11:
            if (wt != 2 || rd_span(&p, end, &k->te, &k->te_end) < 0 || ++k->n_te > 1)
                return SLOW;
            break;
        case 12:
            if (wt != 2 || rd_span(&p, end, &k->in, &k->in_end) < 0 || ++k->n_interned > 1)
                return SLOW;
            break;
        case 2: case 6: case 43: case 44: case 52: case 53: case 59: case 60:
            return SLOW; /* read by collector.py */
        default:
            if (rd_skip(&p, end, wt) < 0)
                return SLOW;
        }
    }
    return FAST;
}

static int
parse_annotation(const uint8_t *p, const uint8_t *end, annotation_t *a)
{
    memset(a, 0, sizeof *a);
    a->kind = -1;
    while (p < end) {
        uint32_t f;
        int wt;
        uint64_t v;
        if (rd_tag(&p, end, &f, &wt) < 0)
            return SLOW;
        switch (f) {
        case 1: case 2: case 3: case 4: case 7: case 17:
            if (wt != 0 || rd_varint(&p, end, &v) < 0)
                return SLOW;
            if (f == 1) {
                a->name_which = 1;
                a->name_iid = v;
            } else {
                a->kind = f == 2 ? KIND_B : f == 4 ? KIND_I : f == 17 ? KIND_S : KIND_U;
                a->value_how = 1;
                a->u = v;
            }
            break;
        case 5:
            if (wt != 1 || end - p < 8)
                return SLOW;
            v = rd_fixed64(p);
            memcpy(&a->d, &v, 8);
            p += 8;
            a->kind = KIND_F;
            break;
        case 6: case 9: case 10:
            if (wt != 2)
                return SLOW;
            if (f == 10) {
                if (rd_span(&p, end, &a->name_s, &a->name_e) < 0)
                    return SLOW;
                a->name_which = 2;
            } else {
                if (rd_span(&p, end, &a->str_s, &a->str_e) < 0)
                    return SLOW;
                a->kind = KIND_S;
                a->value_how = 0;
            }
            break;
        case 11: case 12:
            return SLOW; /* nested: collector.py */
        default:
            if (rd_skip(&p, end, wt) < 0)
                return SLOW;
        }
    }
    return FAST;
}

/* The fields of a TrackEvent this walk reads; SLOW for any it leaves to collector.py. */
static int
parse_event(Walker *w, const uint8_t *p, const uint8_t *end, event_t *e)
{
    memset(e, 0, sizeof *e);
    w->cat_iids.n = w->cats.n = w->flows.n = w->anns.n = 0;
    while (p < end) {
        uint32_t f;
        int wt;
        uint64_t v;
        const uint8_t *s, *se;
        if (rd_tag(&p, end, &f, &wt) < 0)
            return SLOW;
        switch (f) {
        case 9: case 11: case 10: case 30: case 1: case 16:
            if (wt != 0 || rd_varint(&p, end, &v) < 0)
                return SLOW;
            if (f == 9) {
                e->has_type = 1;
                e->type = (int32_t)(uint32_t)v;
            } else if (f == 11) {
                e->has_track = 1;
                e->track = v;
            } else if (f == 10) {
                e->name_which = 1;
                e->name_iid = v;
            } else if (f == 30) {
                e->value_which = 1;
                e->ivalue = (int64_t)v;
            } else {
                e->has_time_us = 1;
            }
            break;
        case 44:
            if (wt != 1 || end - p < 8)
                return SLOW;
            v = rd_fixed64(p);
            memcpy(&e->dvalue, &v, 8);
            p += 8;
            e->value_which = 2;
            break;
        case 23:
            if (wt != 2 || rd_span(&p, end, &e->name_s, &e->name_e) < 0)
                return SLOW;
            e->name_which = 2;
            break;
        case 22:
            if (wt != 2 || rd_span(&p, end, &s, &se) < 0)
                return SLOW;
            if (vec_push(&w->cats, &s, sizeof s) < 0 || vec_push(&w->cats, &se, sizeof se) < 0)
                return FAIL;
            break;
        case 3:
            if (rd_repeated(&p, end, wt, 0, 0, &w->cat_iids) < 0)
                return PyErr_Occurred() ? FAIL : SLOW;
            break;
        case 47: case 48: case 36: case 42: {
            uint64_t which = f == 47 ? 0 : f == 48 ? 1 : f == 36 ? 2 : 3;
            if (rd_repeated(&p, end, wt, f >= 47, which, &w->flows) < 0)
                return PyErr_Occurred() ? FAIL : SLOW;
            break;
        }
        case 4: {
            annotation_t a;
            if (wt != 2 || rd_span(&p, end, &s, &se) < 0 || parse_annotation(s, se, &a) != FAST)
                return SLOW;
            if (vec_push(&w->anns, &a, sizeof a) < 0)
                return FAIL;
            break;
        }
        case 2: case 17: case 8: case 20: case 31: case 12: case 45: case 46: case 6:
            return SLOW; /* thread time and instructions, extra counters, legacy events */
        default:
            if (rd_skip(&p, end, wt) < 0)
                return SLOW;
        }
    }
    if (!e->has_type || e->type < 1 || e->type > 4)
        return SLOW; /* untyped, legacy or unknown types: collector.py (and its counts) */
    if (e->type == 4 && !e->value_which)
        return SLOW;
    return FAST;
}

/* InternedData: only the tables this walk keeps (names, categories, annotation names,
 * string values); each entry {iid = 1, name or str = 2} must read plainly. */
static int
check_interned(const uint8_t *p, const uint8_t *end)
{
    while (p < end) {
        uint32_t f;
        int wt;
        const uint8_t *s, *e;
        if (rd_tag(&p, end, &f, &wt) < 0)
            return SLOW;
        if (f == 1 || f == 2 || f == 3 || f == 29) {
            if (wt != 2 || rd_span(&p, end, &s, &e) < 0)
                return SLOW;
            while (s < e) {
                uint32_t g;
                int gw;
                uint64_t v;
                const uint8_t *a, *b;
                if (rd_tag(&s, e, &g, &gw) < 0)
                    return SLOW;
                if (g == 1) {
                    if (gw != 0 || rd_varint(&s, e, &v) < 0)
                        return SLOW;
                } else if (g == 2) {
                    if (gw != 2 || rd_span(&s, e, &a, &b) < 0)
                        return SLOW;
                } else if (rd_skip(&s, e, gw) < 0) {
                    return SLOW;
                }
            }
        } else if (f == 23 || f == 24) {
            return SLOW; /* graphics contexts, GPU specifications: collector.py */
        } else if (rd_skip(&p, end, wt) < 0) {
            return SLOW;
        }
    }
    return FAST;
}

/* ------------------------------------------------------------------ Python helpers */
static PyObject *
text(const uint8_t *s, const uint8_t *e)
{
    return PyUnicode_DecodeUTF8((const char *)s, e - s, "replace");
}

static int
as_long(PyObject *o, long long *out)
{
    if (!o)
        return -1;
    *out = PyLong_AsLongLong(o);
    Py_DECREF(o);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* The builder's id of a string (the reference is taken). */
static int
intern(Walker *w, PyObject *s, long long *id)
{
    if (!s)
        return -1;
    PyObject *r = PyObject_CallOneArg(w->intern, s);
    Py_DECREF(s);
    return as_long(r, id);
}

static int
skip_count(Walker *w, const char *why)
{
    PyObject *r = PyObject_CallMethod(w->col, "skip", "s", why);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

static int
get_int(PyObject *d, uint64_t key, PyObject **out)
{
    PyObject *k = PyLong_FromUnsignedLongLong(key);
    if (!k)
        return -1;
    *out = PyDict_GetItemWithError(d, k); /* borrowed */
    Py_DECREF(k);
    return *out || !PyErr_Occurred() ? 0 : -1;
}

/* ------------------------------------------------------------------ sequences */
static int
seq_load(Walker *w, seq_t *q)
{
    static const char *names[] = {"names", "cats", "anames", "values"};
    PyObject **slots[] = {&q->names, &q->cats, &q->anames, &q->values};
    for (int i = 0; i < 4; i++) {
        PyObject *d = PyObject_GetAttrString(q->seq, names[i]);
        if (!d)
            return -1;
        if (!PyDict_Check(d)) {
            Py_DECREF(d);
            PyErr_SetString(PyExc_TypeError, "a sequence's tables must be dicts");
            return -1;
        }
        Py_XSETREF(*slots[i], d);
    }
    PyObject *o = PyObject_GetAttrString(q->seq, "valid");
    if (!o)
        return -1;
    q->valid = PyObject_IsTrue(o);
    Py_DECREF(o);
    long long v;
    if (as_long(PyObject_GetAttrString(q->seq, "clock"), &v) < 0)
        return -1;
    q->clock = (uint32_t)v;
    o = PyObject_GetAttrString(q->seq, "track");
    if (!o)
        return -1;
    q->has_track = o != Py_None;
    if (q->has_track) {
        q->track = PyLong_AsUnsignedLongLong(o);
        if (q->track == (uint64_t)-1 && PyErr_Occurred()) {
            Py_DECREF(o);
            return -1;
        }
    }
    Py_DECREF(o);
    return q->valid < 0 ? -1 : 0;
}

static void
seq_clear(Walker *w)
{
    for (size_t i = 0; i < w->cap_seqs; i++) {
        seq_t *q = &w->seqs[i];
        if (q->used) {
            Py_CLEAR(q->seq);
            Py_CLEAR(q->names);
            Py_CLEAR(q->cats);
            Py_CLEAR(q->anames);
            Py_CLEAR(q->values);
            q->used = 0;
        }
    }
}

/* The cached state of sequence `id` (open addressing; the table grows when half full). */
static seq_t *
seq_get(Walker *w, uint32_t id)
{
    if (!w->cap_seqs) {
        w->seqs = PyMem_Calloc(64, sizeof(seq_t));
        if (!w->seqs) {
            PyErr_NoMemory();
            return NULL;
        }
        w->cap_seqs = 64;
    }
    size_t mask = w->cap_seqs - 1, i = (id * 2654435761u) & mask, used = 0;
    while (w->seqs[i].used) {
        if (w->seqs[i].id == id)
            return &w->seqs[i];
        i = (i + 1) & mask;
        used++;
    }
    if (used * 2 > w->cap_seqs) { /* a long probe: start the cache afresh, twice as large */
        seq_clear(w);
        seq_t *bigger = PyMem_Calloc(w->cap_seqs * 2, sizeof(seq_t));
        if (!bigger) {
            PyErr_NoMemory();
            return NULL;
        }
        PyMem_Free(w->seqs);
        w->seqs = bigger;
        w->cap_seqs *= 2;
        return seq_get(w, id);
    }
    seq_t *q = &w->seqs[i];
    q->seq = PyObject_CallMethod(w->col, "sequence", "I", id);
    if (!q->seq)
        return NULL;
    q->used = 1;
    q->id = id;
    if (seq_load(w, q) < 0)
        return NULL;
    return q;
}

/* ------------------------------------------------------------------ outputs */
static int
stat_slot(Walker *w, PyObject *key, int kind, stat_t **out)
{
    PyObject *base = PyDict_GetItemWithError(w->stat_index, key);
    int64_t b;
    if (!base) {
        if (PyErr_Occurred())
            return -1;
        b = (int64_t)(w->slots.n / sizeof(int64_t));
        for (int i = 0; i < N_KINDS; i++)
            PUSH(&w->slots, int64_t, -1);
        PyObject *o = PyLong_FromLongLong(b);
        if (!o || PyDict_SetItem(w->stat_index, key, o) < 0) {
            Py_XDECREF(o);
            return -1;
        }
        Py_DECREF(o);
    } else {
        b = PyLong_AsLongLong(base);
    }
    int64_t *slot = (int64_t *)w->slots.p + b + kind;
    if (*slot < 0) {
        if (w->n_stats == w->cap_stats) {
            size_t cap = w->cap_stats ? w->cap_stats * 2 : 16;
            stat_t *q = PyMem_Realloc(w->stats, cap * sizeof(stat_t));
            if (!q) {
                PyErr_NoMemory();
                return -1;
            }
            w->stats = q;
            w->cap_stats = cap;
        }
        stat_t *s = &w->stats[w->n_stats];
        memset(s, 0, sizeof *s);
        Py_INCREF(key);
        s->key = key;
        s->kind = kind;
        if (kind == KIND_S && !(s->objs = PyList_New(0)))
            return -1;
        *slot = (int64_t)w->n_stats++;
    }
    *out = &w->stats[*slot];
    return 0;
}

static void
stats_clear(Walker *w)
{
    for (size_t i = 0; i < w->n_stats; i++) {
        stat_t *s = &w->stats[i];
        Py_CLEAR(s->key);
        Py_CLEAR(s->objs);
        PyMem_Free(s->rows.p);
        PyMem_Free(s->vals.p);
    }
    w->n_stats = 0;
    w->slots.n = 0;
    if (w->stat_index)
        PyDict_Clear(w->stat_index);
}

/* One annotation of event `row` as a stat (collector.py's `_annotation` and `_stat`). */
static int
annotation(Walker *w, seq_t *q, const annotation_t *a, int64_t row)
{
    if (a->kind < 0)
        return 0;
    PyObject *key;
    if (a->name_which == 1) {
        PyObject *k;
        if (get_int(q->anames, a->name_iid, &k) < 0)
            return -1;
        if (k)
            Py_INCREF(k);
        key = k ? k : PyUnicode_FromFormat("<annotation iid %llu>", (unsigned long long)a->name_iid);
    } else if (a->name_which == 2) {
        key = text(a->name_s, a->name_e);
    } else {
        key = PyUnicode_FromString("");
    }
    if (!key)
        return -1;
    stat_t *s;
    int rc = stat_slot(w, key, a->kind, &s);
    Py_DECREF(key);
    if (rc < 0)
        return -1;
    PUSH(&s->rows, int64_t, row);
    switch (a->kind) {
    case KIND_B:
        PUSH(&s->vals, uint8_t, a->u != 0);
        return 0;
    case KIND_U:
    case KIND_I:
        PUSH(&s->vals, uint64_t, a->u);
        return 0;
    case KIND_F:
        PUSH(&s->vals, double, a->d);
        return 0;
    }
    PyObject *v;
    if (a->value_how == 1) {
        PyObject *found;
        if (get_int(q->values, a->u, &found) < 0)
            return -1;
        if (found)
            Py_INCREF(found);
        v = found ? found : PyUnicode_FromString("");
    } else {
        v = text(a->str_s, a->str_e);
    }
    if (!v)
        return -1;
    PyObject *same = PyDict_SetDefault(w->texts, v, v); /* one object per distinct text */
    Py_DECREF(v);
    if (!same)
        return -1;
    return PyList_Append(s->objs, same);
}

/* The category of an event (collector.py: one interned category as it is, several or a
 * missing one joined by commas). */
static int
category(Walker *w, seq_t *q, long long *cat)
{
    size_t n_iids = w->cat_iids.n / (2 * sizeof(uint64_t)), n_cats = w->cats.n / (2 * sizeof(void *));
    if (n_iids) {
        uint64_t *iid = (uint64_t *)w->cat_iids.p;
        PyObject *parts = PyList_New((Py_ssize_t)n_iids);
        if (!parts)
            return -1;
        for (size_t i = 0; i < n_iids; i++) {
            PyObject *id, *s;
            if (get_int(q->cats, iid[2 * i + 1], &id) < 0)
                goto fail;
            if (id && n_iids == 1) {
                Py_DECREF(parts);
                *cat = PyLong_AsLongLong(id);
                return *cat == -1 && PyErr_Occurred() ? -1 : 0;
            }
            if (id) {
                Py_ssize_t k = PyLong_AsSsize_t(id);
                if (k == -1 && PyErr_Occurred())
                    goto fail;
                s = PyList_GetItem(w->strings, k);
                if (!s)
                    goto fail;
                Py_INCREF(s);
            } else {
                s = PyUnicode_FromString("");
                if (!s)
                    goto fail;
            }
            PyList_SET_ITEM(parts, (Py_ssize_t)i, s);
        }
        PyObject *sep = PyUnicode_FromString(",");
        PyObject *joined = sep ? PyUnicode_Join(sep, parts) : NULL;
        Py_XDECREF(sep);
        Py_DECREF(parts);
        return intern(w, joined, cat);
    fail:
        Py_DECREF(parts);
        return -1;
    }
    if (n_cats) {
        const uint8_t **sp = (const uint8_t **)w->cats.p;
        if (n_cats == 1)
            return intern(w, text(sp[0], sp[1]), cat);
        PyObject *parts = PyList_New((Py_ssize_t)n_cats);
        if (!parts)
            return -1;
        for (size_t i = 0; i < n_cats; i++) {
            PyObject *s = text(sp[2 * i], sp[2 * i + 1]);
            if (!s) {
                Py_DECREF(parts);
                return -1;
            }
            PyList_SET_ITEM(parts, (Py_ssize_t)i, s);
        }
        PyObject *sep = PyUnicode_FromString(",");
        PyObject *joined = sep ? PyUnicode_Join(sep, parts) : NULL;
        Py_XDECREF(sep);
        Py_DECREF(parts);
        return intern(w, joined, cat);
    }
    return intern(w, PyUnicode_FromString(""), cat);
}

static int
name_of(Walker *w, seq_t *q, const event_t *e, long long *name)
{
    if (e->name_which == 1) {
        PyObject *id;
        if (get_int(q->names, e->name_iid, &id) < 0)
            return -1;
        if (id) {
            *name = PyLong_AsLongLong(id);
            return *name == -1 && PyErr_Occurred() ? -1 : 0;
        }
        if (intern(w, PyUnicode_FromFormat("<name iid %llu not interned>", (unsigned long long)e->name_iid),
                   name) < 0)
            return -1;
        return skip_count(w, "event names not interned on their sequence (named by iid)");
    }
    if (e->name_which == 2)
        return intern(w, text(e->name_s, e->name_e), name);
    return intern(w, PyUnicode_FromString(""), name);
}

static int
flows(Walker *w, seq_t *q, int64_t row)
{
    static const int64_t term[4] = {0, 1, 0, 1};
    uint64_t *f = (uint64_t *)w->flows.p;
    size_t n = w->flows.n / (2 * sizeof(uint64_t));
    for (uint64_t which = 0; which < 4; which++) {
        int64_t space = which < 2 ? 0 : (int64_t)q->id + 1;
        for (size_t i = 0; i < n; i++) {
            if (f[2 * i] != which)
                continue;
            PUSH(&w->out[FLOWS], int64_t, space);
            PUSH(&w->out[FLOWS], int64_t, (int64_t)f[2 * i + 1]);
            PUSH(&w->out[FLOWS], int64_t, row);
            PUSH(&w->out[FLOWS], int64_t, term[which]);
        }
    }
    return 0;
}

/* Entries of table `field` of an InternedData into a sequence dict: iid -> the builder's
 * id of the name (`ids`), or iid -> the text itself. */
static int
intern_table(Walker *w, const uint8_t *p, const uint8_t *end, uint32_t field, PyObject *d, int ids)
{
    while (p < end) {
        uint32_t f = 0, g = 0;
        int wt = 0, gw = 0;
        uint64_t iid = 0, v = 0;
        const uint8_t *s = NULL, *e = NULL, *ns = NULL, *ne = NULL;
        if (rd_tag(&p, end, &f, &wt) < 0)
            goto bad;
        if (f != field || wt != 2) {
            if (rd_skip(&p, end, wt) < 0)
                goto bad;
            continue;
        }
        if (rd_span(&p, end, &s, &e) < 0)
            goto bad;
        ns = ne = s;
        while (s < e) {
            if (rd_tag(&s, e, &g, &gw) < 0)
                goto bad;
            if (g == 1 && gw == 0) {
                if (rd_varint(&s, e, &v) < 0)
                    goto bad;
                iid = v;
            } else if (g == 2 && gw == 2) {
                if (rd_span(&s, e, &ns, &ne) < 0)
                    goto bad;
            } else if (rd_skip(&s, e, gw) < 0) {
                goto bad;
            }
        }
        PyObject *value = text(ns, ne);
        if (!value)
            return -1;
        if (ids) {
            long long id;
            if (intern(w, value, &id) < 0)
                return -1;
            value = PyLong_FromLongLong(id);
            if (!value)
                return -1;
        }
        PyObject *k = PyLong_FromUnsignedLongLong(iid);
        int rc = k ? PyDict_SetItem(d, k, value) : -1;
        Py_XDECREF(k);
        Py_DECREF(value);
        if (rc < 0)
            return -1;
    }
    return 0;
bad: /* check_interned read it all before */
    PyErr_SetString(PyExc_RuntimeError, "interned data changed between its check and its reading");
    return -1;
}

/* ------------------------------------------------------------------ one packet */
/* FAST: read (output written), SLOW: left to Python untouched but for idempotent
 * state, 2: Python's own rows must be flushed first, FAIL: a Python error. */
static int
packet(Walker *w, const uint8_t *p, const uint8_t *end, int64_t *n, int pending)
{
    packet_t k;
    event_t e;
    if (parse_packet(p, end, &k) != FAST)
        return SLOW;
    if (k.n_interned && check_interned(k.in, k.in_end) != FAST)
        return SLOW;
    if (k.n_te) {
        int rc = parse_event(w, k.te, k.te_end, &e);
        if (rc != FAST)
            return rc;
        if (!k.has_ts || k.ts > (uint64_t)INT64_MAX)
            return SLOW; /* legacy microsecond times, no time at all: collector.py */
    }
    seq_t *q = seq_get(w, k.seq);
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
        if (seq_load(w, q) < 0)
            return FAIL;
    } else if (k.dropped) {
        if (PyObject_SetAttrString(q->seq, "valid", Py_False) < 0)
            return FAIL;
        q->valid = 0;
    }
    if ((k.flags & 2) && !q->valid)
        return skip_count(w, "packets needing incremental state lost with a dropped packet") < 0 ? FAIL : FAST;
    if (k.n_interned) {
        if (intern_table(w, k.in, k.in_end, 2, q->names, 1) < 0 || intern_table(w, k.in, k.in_end, 1, q->cats, 1) < 0 ||
            intern_table(w, k.in, k.in_end, 3, q->anames, 0) < 0 ||
            intern_table(w, k.in, k.in_end, 29, q->values, 0) < 0)
            return FAIL;
    }
    if (!k.n_te)
        return FAST;
    int64_t clock = k.has_clock ? k.clock : q->clock, ts = (int64_t)k.ts;
    long long track;
    uint64_t uuid = e.has_track ? e.track : q->track;
    PyObject *code;
    if (get_int(w->uuids, uuid, &code) < 0)
        return FAIL;
    if (code) {
        track = PyLong_AsLongLong(code);
        if (track == -1 && PyErr_Occurred())
            return FAIL;
    } else if (as_long(PyObject_CallMethod(w->tracks, "of_uuid", "K", (unsigned long long)uuid), &track) < 0) {
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
    if (e.type != 2 && (name_of(w, q, &e, &name) < 0 || category(w, q, &cat) < 0))
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
            if (annotation(w, q, &a[i], row) < 0)
                return FAIL;
    }
    return flows(w, q, row) < 0 ? FAIL : FAST;
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
    seq_clear(w); /* the Python path may change any sequence before the next walk */
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
    stats_clear(w);
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
    seq_clear(w);
    stats_clear(w);
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
