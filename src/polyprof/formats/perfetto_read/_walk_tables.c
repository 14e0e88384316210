/* polyprof.formats.perfetto_read._walk, state and outputs: the Python objects the walk
 * shares with collector.py (each sequence's tables, the track codes, the builder's
 * strings) read and updated, and what a track event writes: its name and category, its
 * annotations as stat columns, its flow ids (see _walk.c). */
#include "_walk.h"

/* ------------------------------------------------------------------ Python helpers */
static PyObject *
text(const uint8_t *s, const uint8_t *e)
{
    return PyUnicode_DecodeUTF8((const char *)s, e - s, "replace");
}

int
pw_as_long(PyObject *o, long long *out)
{
    if (!o)
        return -1;
    *out = PyLong_AsLongLong(o);
    Py_DECREF(o);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* The builder's id of a string (the reference is taken). */
int
pw_intern(Walker *w, PyObject *s, long long *id)
{
    if (!s)
        return -1;
    PyObject *r = PyObject_CallOneArg(w->intern, s);
    Py_DECREF(s);
    return pw_as_long(r, id);
}

int
pw_skip_count(Walker *w, const char *why)
{
    PyObject *r = PyObject_CallMethod(w->col, "skip", "s", why);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

int
pw_get_int(PyObject *d, uint64_t key, PyObject **out)
{
    PyObject *k = PyLong_FromUnsignedLongLong(key);
    if (!k)
        return -1;
    *out = PyDict_GetItemWithError(d, k); /* borrowed */
    Py_DECREF(k);
    return *out || !PyErr_Occurred() ? 0 : -1;
}

/* ------------------------------------------------------------------ sequences */
int
pw_seq_load(Walker *w, seq_t *q)
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
    if (pw_as_long(PyObject_GetAttrString(q->seq, "clock"), &v) < 0)
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

void
pw_seq_clear(Walker *w)
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
    w->n_seqs = 0;
}

/* The cached state of sequence `id` (open addressing; the table grows when half full, to
 * MAX_SEQS slots; past that it is emptied and filled again: a cache of collector.py's state). */
#define MAX_SEQS ((size_t)1 << 14)

seq_t *
pw_seq_get(Walker *w, uint32_t id)
{
    if (!w->cap_seqs) {
        w->seqs = PyMem_Calloc(64, sizeof(seq_t));
        if (!w->seqs) {
            PyErr_NoMemory();
            return NULL;
        }
        w->cap_seqs = 64;
    }
    uint32_t h = id; /* every bit of the id mixed into the low ones (ids 64 apart would share a slot) */
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    h *= 0x846ca68bu;
    h ^= h >> 16;
    size_t mask = w->cap_seqs - 1, i = h & mask;
    while (w->seqs[i].used) {
        if (w->seqs[i].id == id)
            return &w->seqs[i];
        i = (i + 1) & mask;
    }
    /* A new sequence: kept at most half full, so a probe always ends at a free slot (a
     * full table would loop forever on the next new id: 100 sequences were enough). */
    if ((w->n_seqs + 1) * 2 > w->cap_seqs) { /* start the cache afresh, twice as large up to a bound */
        pw_seq_clear(w);
        if (w->cap_seqs >= MAX_SEQS)
            return pw_seq_get(w, id);
        seq_t *bigger = PyMem_Calloc(w->cap_seqs * 2, sizeof(seq_t));
        if (!bigger) {
            PyErr_NoMemory();
            return NULL;
        }
        PyMem_Free(w->seqs);
        w->seqs = bigger;
        w->cap_seqs *= 2;
        return pw_seq_get(w, id);
    }
    seq_t *q = &w->seqs[i];
    q->seq = PyObject_CallMethod(w->col, "sequence", "I", id);
    if (!q->seq)
        return NULL;
    q->used = 1;
    q->id = id;
    w->n_seqs++;
    if (pw_seq_load(w, q) < 0)
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

void
pw_stats_clear(Walker *w)
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
int
pw_annotation(Walker *w, seq_t *q, const annotation_t *a, int64_t row)
{
    if (a->kind < 0)
        return 0;
    PyObject *key;
    if (a->name_which == 1) {
        PyObject *k;
        if (pw_get_int(q->anames, a->name_iid, &k) < 0)
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
        if (pw_get_int(q->values, a->u, &found) < 0)
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
int
pw_category(Walker *w, seq_t *q, long long *cat)
{
    size_t n_iids = w->cat_iids.n / (2 * sizeof(uint64_t)), n_cats = w->cats.n / (2 * sizeof(void *));
    if (n_iids) {
        uint64_t *iid = (uint64_t *)w->cat_iids.p;
        PyObject *parts = PyList_New((Py_ssize_t)n_iids);
        if (!parts)
            return -1;
        for (size_t i = 0; i < n_iids; i++) {
            PyObject *id, *s;
            if (pw_get_int(q->cats, iid[2 * i + 1], &id) < 0)
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
        return pw_intern(w, joined, cat);
    fail:
        Py_DECREF(parts);
        return -1;
    }
    if (n_cats) {
        const uint8_t **sp = (const uint8_t **)w->cats.p;
        if (n_cats == 1)
            return pw_intern(w, text(sp[0], sp[1]), cat);
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
        return pw_intern(w, joined, cat);
    }
    return pw_intern(w, PyUnicode_FromString(""), cat);
}

int
pw_name_of(Walker *w, seq_t *q, const event_t *e, long long *name)
{
    if (e->name_which == 1) {
        PyObject *id;
        if (pw_get_int(q->names, e->name_iid, &id) < 0)
            return -1;
        if (id) {
            *name = PyLong_AsLongLong(id);
            return *name == -1 && PyErr_Occurred() ? -1 : 0;
        }
        if (pw_intern(w, PyUnicode_FromFormat("<name iid %llu not interned>", (unsigned long long)e->name_iid),
                   name) < 0)
            return -1;
        return pw_skip_count(w, "event names not interned on their sequence (named by iid)");
    }
    if (e->name_which == 2)
        return pw_intern(w, text(e->name_s, e->name_e), name);
    return pw_intern(w, PyUnicode_FromString(""), name);
}

int
pw_flows(Walker *w, seq_t *q, int64_t row)
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
int
pw_intern_table(Walker *w, const uint8_t *p, const uint8_t *end, uint32_t field, PyObject *d, int ids)
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
            if (pw_intern(w, value, &id) < 0)
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
