/* polyprof.formats.xspace._wire: what the reading (_wire_read.c) and writing
 * (_wire_write.c) halves share: growable buffers, the decoder's state and column
 * numbering, and the protobuf wire-format primitives (varints, tags, spans, skipping
 * unknown fields). */
#ifndef POLYPROF_XSPACE_WIRE_H
#define POLYPROF_XSPACE_WIRE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_shared_vec.h" /* vec_t, vec_push: growable buffers */

enum { PLANE_LINES, LINE_EVENTS, EV_MID, EV_OFF, EV_DUR, EV_NOCC, EV_ISNOCC, EV_STATS,
       ST_MID, ST_KIND, ST_INT, ST_DBL,
       PLANE_MDS, MD_KEY, MD_STATS, MD_CHILDREN, MD_CHILD,
       MS_MID, MS_KIND, MS_INT, MS_DBL, N_VECS };

/* The distinct str/bytes values of event stats seen so far: open addressing over their
 * bytes in the input (alive for the whole walk), so a value repeated a million times is
 * one Python object. `index` is the value's place in state_t.objs plus one (0: empty). */
typedef struct {
    const uint8_t *s;
    Py_ssize_t n;
    uint64_t hash;
    int64_t index;
} text_slot_t;

typedef struct {
    text_slot_t *slots;
    size_t cap, used; /* cap a power of two, or 0 */
} text_set_t;

typedef struct {
    vec_t v[N_VECS];
    text_set_t seen;   /* the event stats' distinct values, by their bytes and kind */
    PyObject *objs;    /* the distinct str/bytes values of event stats, first seen first */
    PyObject *mdtext;  /* per metadata entry: name, display name, metadata bytes */
    PyObject *mdobjs;  /* the str/bytes values of metadata stats */
    PyObject *planes;  /* per plane: (id, name, {stat metadata id: name}, [(stat id, kind, value)]) */
    PyObject *lines;   /* per line: (id, display_id, name, display_name, timestamp_ns, duration_ps) */
    PyObject *texts;   /* XSpace.errors, warnings, hostnames: a tuple of three lists */
    const uint8_t *base;
    int64_t size, items, max_items; /* planes, lines and metadata entries: each a Python object */
} state_t;

#define PUSH(st, which, type, val)                                              \
    do {                                                                        \
        type _x = (val);                                                        \
        if (vec_push(&(st)->v[which], &_x, sizeof _x) < 0)                      \
            return -1;                                                          \
    } while (0)

static inline int
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
static inline int
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

static inline int
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

static inline int skip(const state_t *st, const uint8_t **pp, const uint8_t *end, uint32_t field, int wt, int depth);

static inline int
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

static inline int
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

PyObject *wire_columns(PyObject *self, PyObject *arg);
PyObject *wire_encode(PyObject *self, PyObject *args);

#endif
