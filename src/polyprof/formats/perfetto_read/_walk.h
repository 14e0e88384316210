/* polyprof.formats.perfetto_read._walk: what the parsing (_walk_parse.c) and the walk
 * (_walk.c) share: growable buffers, the protobuf wire-format primitives, what a packet,
 * a track event and an annotation say, the cached sequence state, the Walker. */
#ifndef POLYPROF_PERFETTO_WALK_H
#define POLYPROF_PERFETTO_WALK_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_shared_vec.h" /* vec_t, vec_push: growable buffers */

#define PUSH(v, type, val)                                                      \
    do {                                                                        \
        type _x = (val);                                                        \
        if (vec_push((v), &_x, sizeof _x) < 0)                                  \
            return -1;                                                          \
    } while (0)

/* ------------------------------------------------------------------ the wire format */
/* Each returns 0, or -1 for bytes that are not what protobuf would read plainly (no
 * Python error set: the packet goes to the Python path, which says what is wrong). */
static inline int
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

static inline int
rd_tag(const uint8_t **pp, const uint8_t *end, uint32_t *field, int *wt)
{
    uint64_t t;
    if (rd_varint(pp, end, &t) < 0 || (t >> 3) == 0 || (t >> 3) > 0x1FFFFFFF)
        return -1;
    *field = (uint32_t)(t >> 3);
    *wt = (int)(t & 7);
    return 0;
}

static inline int
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
static inline int
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

static inline uint64_t
rd_fixed64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* A repeated integer field's items, packed (wire type 2) or not (0 varint, 1 fixed64),
 * appended to `out` as (tagged, value) pairs of uint64. */
static inline int
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
    size_t cap_seqs, n_seqs;
    vec_t cat_iids, cats, flows, anns; /* one packet's repeated parts */
} Walker;

/* _walk_parse.c: the fields of a packet, a track event, an annotation, interned data;
 * FAST, or SLOW for what the walk leaves to collector.py (FAIL: a Python error). */
int pw_parse_packet(const uint8_t *p, const uint8_t *end, packet_t *k);
int pw_parse_annotation(const uint8_t *p, const uint8_t *end, annotation_t *a);
int pw_parse_event(Walker *w, const uint8_t *p, const uint8_t *end, event_t *e);
int pw_check_interned(const uint8_t *p, const uint8_t *end);

/* _walk_tables.c: Python helpers, the cached sequence state, the outputs of an event. */
int pw_as_long(PyObject *o, long long *out);
int pw_intern(Walker *w, PyObject *s, long long *id);
int pw_skip_count(Walker *w, const char *why);
int pw_get_int(PyObject *d, uint64_t key, PyObject **out);
int pw_seq_load(Walker *w, seq_t *q);
void pw_seq_clear(Walker *w);
seq_t *pw_seq_get(Walker *w, uint32_t id);
void pw_stats_clear(Walker *w);
int pw_annotation(Walker *w, seq_t *q, const annotation_t *a, int64_t row);
int pw_category(Walker *w, seq_t *q, long long *cat);
int pw_name_of(Walker *w, seq_t *q, const event_t *e, long long *name);
int pw_flows(Walker *w, seq_t *q, int64_t row);
int pw_intern_table(Walker *w, const uint8_t *p, const uint8_t *end, uint32_t field, PyObject *d, int ids);
PyObject *pw_match(PyObject *self, PyObject *args); /* _walk_match.c */

#endif
