/* polyprof.formats.kineto._args: one batch of deferred Kineto args, grouped by arg name.
 *
 * groups(text, base, skip) walks the JSON text "[args, args, ...]" of one batch (one
 * element per event, from row `base`) once, and returns, per arg name in order of first
 * appearance (skipping the names in the set `skip`):
 *
 *     name -> (rows, joined, lens)
 *
 *   rows    bytes: int64[n], the rows of the events that have the arg, ascending
 *   joined  bytes: "[v1,v2,...]", each value's JSON text exactly as in the batch
 *   lens    bytes: int64[n], the length of each value's text
 *
 * what the pure-Python path (deferred._raw_groups: msgspec's list[dict[str, Raw]], then
 * grouping by arg-name shape) gives, without a Python object per event or per value.
 * names(text) walks the same way and returns the set of every arg name (what a
 * lookup of a key asks first: whether any event has it).
 *
 * select(text, base, names, rows) takes only the events of `rows` (int64 bytes,
 * ascending, the batch's rows) and only the args called one of `names` (a tuple of str),
 * the other events skipped over without reading their args (what
 * deferred.DeferredArgs.rows decodes: an op's input shapes, for a few thousand of a
 * trace's events). Per name that has a value there:
 *
 *     name -> (rows, codes, joined, lens)
 *
 *   rows    bytes: int64[n], the rows of the events that have the arg, ascending
 *   codes   bytes: int64[n], each row's value as an index into the distinct values
 *   joined  bytes: "[v1,v2,...]", each distinct value's JSON text once, in order of
 *           first appearance (an op's shapes repeat over its calls)
 *   lens    bytes: int64[d], the length of each distinct value's text
 * Only the plain case is taken: every element an object, names without escapes, no name
 * twice in one object. Anything else (or text that is not JSON) raises ValueError, and
 * the caller takes the Python path, which handles every case. The text was checked at
 * load (UTF-8, JSON numbers in range), so values are not checked here.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_NAMES 4096   /* distinct arg names in one batch; more: ValueError */
#define MAX_IN_OBJECT 256 /* args of one event; more: ValueError */

typedef struct {
    const char *key;   /* into the text */
    Py_ssize_t len;
    uint64_t hash;
    int skipped;
    /* growable: rows, value lengths, joined text */
    int64_t *rows, *lens;
    Py_ssize_t n, cap;
    char *text;
    Py_ssize_t tlen, tcap;
} Group;

typedef struct {
    Group *groups;
    int values; /* 0: names only (no values kept) */
    Py_ssize_t n;
    Py_ssize_t *slots; /* open addressing: index + 1, 0 empty */
    Py_ssize_t nslots;
} Table;

static int fail(const char *why) {
    PyErr_SetString(PyExc_ValueError, why);
    return -1;
}

static uint64_t fnv(const char *s, Py_ssize_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static inline int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static Py_ssize_t skip_ws(const char *s, Py_ssize_t i, Py_ssize_t end) {
    while (i < end && is_ws(s[i])) i++;
    return i;
}

/* End (one past) of the string starting at s[i] == '"'; -1 if unterminated. */
static Py_ssize_t string_end(const char *s, Py_ssize_t i, Py_ssize_t end) {
    for (i++; i < end; i++) {
        if (s[i] == '\\') i++;
        else if (s[i] == '"') return i + 1;
    }
    return -1;
}

/* End (one past) of the JSON value starting at s[i]; -1 if malformed or cut. */
static Py_ssize_t value_end(const char *s, Py_ssize_t i, Py_ssize_t end) {
    if (i >= end) return -1;
    char c = s[i];
    if (c == '"') return string_end(s, i, end);
    if (c == '{' || c == '[') {
        Py_ssize_t depth = 0;
        for (; i < end; i++) {
            c = s[i];
            if (c == '"') {
                i = string_end(s, i, end);
                if (i < 0) return -1;
                i--;
            } else if (c == '{' || c == '[') {
                depth++;
            } else if (c == '}' || c == ']') {
                if (--depth == 0) return i + 1;
            }
        }
        return -1;
    }
    Py_ssize_t start = i;  /* a number, true, false, null */
    while (i < end && !is_ws(s[i]) && s[i] != ',' && s[i] != '}' && s[i] != ']') i++;
    return i > start ? i : -1;
}

/* `ptr` resized to `cap` items (PyMem_Realloc); the enclosing function returns -1 if not. */
#define GROW(ptr, cap)                                                             \
    do {                                                                           \
        void *q_ = PyMem_Realloc((ptr), (size_t)(cap) * sizeof *(ptr));           \
        if (!q_) return -1;                                                        \
        (ptr) = q_;                                                                \
    } while (0)

/* Room in a "[v,v,...]" text of tlen bytes for vlen more and a separator. */
static int text_room(char **text, Py_ssize_t tlen, Py_ssize_t *tcap, Py_ssize_t vlen) {
    if (tlen + vlen + 2 <= *tcap) return 0;
    Py_ssize_t cap = *tcap ? 2 * *tcap : 1024;
    while (cap < tlen + vlen + 2) cap *= 2;
    GROW(*text, cap);
    *tcap = cap;
    return 0;
}

static Group *find(Table *t, const char *key, Py_ssize_t len, PyObject *skip, int *err) {
    uint64_t h = fnv(key, len);
    Py_ssize_t mask = t->nslots - 1, j = (Py_ssize_t)(h & (uint64_t)mask);
    for (;;) {
        Py_ssize_t g = t->slots[j];
        if (!g) break;
        Group *gr = &t->groups[g - 1];
        if (gr->hash == h && gr->len == len && memcmp(gr->key, key, (size_t)len) == 0) return gr;
        j = (j + 1) & mask;
    }
    if (t->n >= MAX_NAMES) {
        *err = fail("too many arg names");
        return NULL;
    }
    Group *gr = &t->groups[t->n];
    memset(gr, 0, sizeof(Group));
    gr->key = key;
    gr->len = len;
    gr->hash = h;
    PyObject *name = PyUnicode_DecodeUTF8(key, len, NULL);
    if (!name) {
        *err = -1;
        return NULL;
    }
    int in = PySet_Contains(skip, name);
    Py_DECREF(name);
    if (in < 0) {
        *err = -1;
        return NULL;
    }
    gr->skipped = in;
    t->slots[j] = ++t->n;
    return gr;
}

static int add(Group *g, int64_t row, const char *v, Py_ssize_t vlen) {
    if (g->n == g->cap) {
        Py_ssize_t cap = g->cap ? 2 * g->cap : 64;
        GROW(g->rows, cap);
        GROW(g->lens, cap);
        g->cap = cap;
    }
    if (text_room(&g->text, g->tlen, &g->tcap, vlen) < 0) return -1;
    g->text[g->tlen++] = g->n ? ',' : '[';
    memcpy(g->text + g->tlen, v, (size_t)vlen);
    g->tlen += vlen;
    g->rows[g->n] = row;
    g->lens[g->n] = vlen;
    g->n++;
    return 0;
}

/* One args object at s[i] == '{': its args added to their groups; the end, or -1. */
static Py_ssize_t object(Table *t, const char *s, Py_ssize_t i, Py_ssize_t end, int64_t row, PyObject *skip) {
    Group *seen[MAX_IN_OBJECT];
    int nseen = 0, err = 0;
    i = skip_ws(s, i + 1, end);
    if (i < end && s[i] == '}') return i + 1;
    for (;;) {
        if (i >= end || s[i] != '"') return fail("an arg name expected");
        Py_ssize_t kend = string_end(s, i, end);
        if (kend < 0) return fail("unterminated arg name");
        if (memchr(s + i + 1, '\\', (size_t)(kend - i - 2))) return fail("an escaped arg name");
        Group *g = find(t, s + i + 1, kend - i - 2, skip, &err);
        if (!g) return -1;
        for (int k = 0; k < nseen; k++)
            if (seen[k] == g) return fail("an arg name twice in one event");
        if (nseen == MAX_IN_OBJECT) return fail("too many args in one event");
        seen[nseen++] = g;
        i = skip_ws(s, kend, end);
        if (i >= end || s[i] != ':') return fail("':' expected");
        i = skip_ws(s, i + 1, end);
        Py_ssize_t vend = value_end(s, i, end);
        if (vend < 0) return fail("a malformed arg value");
        if (t->values && !g->skipped && add(g, row, s + i, vend - i) < 0) {
            PyErr_NoMemory();
            return -1;
        }
        i = skip_ws(s, vend, end);
        if (i < end && s[i] == ',') {
            i = skip_ws(s, i + 1, end);
            continue;
        }
        if (i < end && s[i] == '}') return i + 1;
        return fail("',' or '}' expected");
    }
}

static PyObject *result(Table *t) {
    PyObject *out = PyDict_New();
    if (!out) return NULL;
    for (Py_ssize_t k = 0; k < t->n; k++) {
        Group *g = &t->groups[k];
        if (g->skipped || !g->n) continue;
        g->text[g->tlen++] = ']';  /* add() kept room for it */
        PyObject *name = PyUnicode_DecodeUTF8(g->key, g->len, NULL);
        PyObject *v = name ? Py_BuildValue("(y#y#y#)", (const char *)g->rows, g->n * (Py_ssize_t)sizeof(int64_t),
                                           g->text, g->tlen, (const char *)g->lens,
                                           g->n * (Py_ssize_t)sizeof(int64_t)) : NULL;
        if (!v || PyDict_SetItem(out, name, v) < 0) {
            Py_XDECREF(name);
            Py_XDECREF(v);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(name);
        Py_DECREF(v);
    }
    return out;
}

/* The names of every arg of a batch, as a set of str. */
static PyObject *names_of(Table *t) {
    PyObject *out = PySet_New(NULL);
    if (!out) return NULL;
    for (Py_ssize_t k = 0; k < t->n; k++) {
        PyObject *name = PyUnicode_DecodeUTF8(t->groups[k].key, t->groups[k].len, NULL);
        if (!name || PySet_Add(out, name) < 0) {
            Py_XDECREF(name);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(name);
    }
    return out;
}

static PyObject *walk(PyObject *args, int values) {
    Py_buffer buf;
    long long base = 0;
    PyObject *skip = NULL;
    if (values) {
        if (!PyArg_ParseTuple(args, "y*LO", &buf, &base, &skip)) return NULL;
        if (!PyAnySet_Check(skip)) {
            PyBuffer_Release(&buf);
            PyErr_SetString(PyExc_TypeError, "skip must be a set");
            return NULL;
        }
        Py_INCREF(skip);
    } else {
        if (!PyArg_ParseTuple(args, "y*", &buf)) return NULL;
        skip = PyFrozenSet_New(NULL);  /* every name */
        if (!skip) {
            PyBuffer_Release(&buf);
            return NULL;
        }
    }
    const char *s = buf.buf;
    Py_ssize_t end = buf.len, i;
    Table t = {0};
    PyObject *out = NULL;
    t.values = values;
    t.nslots = 8192;  /* a power of two, above twice MAX_NAMES */
    t.slots = PyMem_Calloc((size_t)t.nslots, sizeof(Py_ssize_t));
    t.groups = PyMem_Malloc(MAX_NAMES * sizeof(Group));
    if (!t.slots || !t.groups) {
        PyErr_NoMemory();
        goto done;
    }
    i = skip_ws(s, 0, end);
    if (i >= end || s[i] != '[') {
        fail("'[' expected");
        goto done;
    }
    i = skip_ws(s, i + 1, end);
    int64_t row = base;
    if (i < end && s[i] == ']') {
        i++;
    } else {
        for (;;) {
            if (i >= end || s[i] != '{') {
                fail("an args object expected");
                goto done;
            }
            i = object(&t, s, i, end, row++, skip);
            if (i < 0) goto done;
            i = skip_ws(s, i, end);
            if (i < end && s[i] == ',') {
                i = skip_ws(s, i + 1, end);
                continue;
            }
            if (i < end && s[i] == ']') {
                i++;
                break;
            }
            fail("',' or ']' expected");
            goto done;
        }
    }
    if (skip_ws(s, i, end) != end) {
        fail("text after the args");
        goto done;
    }
    out = values ? result(&t) : names_of(&t);
done:
    for (Py_ssize_t k = 0; t.groups && k < t.n; k++) {
        PyMem_Free(t.groups[k].rows);
        PyMem_Free(t.groups[k].lens);
        PyMem_Free(t.groups[k].text);
    }
    PyMem_Free(t.groups);
    PyMem_Free(t.slots);
    PyBuffer_Release(&buf);
    Py_DECREF(skip);
    return out;
}

/* ---------------------------------------------------------------- select */
#define MAX_SELECT 16  /* names asked for at once; more: ValueError */

/* The values of one name asked for: each row's code into the distinct values (their
 * texts joined, each once: an op's shapes repeat over its calls). */
typedef struct {
    const char *key;
    Py_ssize_t len;
    int64_t *rows, *codes;
    Py_ssize_t n, cap;
    char *text;  /* "[v,v,...]" of the distinct values */
    Py_ssize_t tlen, tcap;
    int64_t *offs, *lens;  /* each distinct value's place in text */
    uint64_t *hashes;
    Py_ssize_t nd, dcap;
    Py_ssize_t *slots;  /* open addressing: distinct index + 1, 0 empty */
    Py_ssize_t nslots;
} Sel;

static int sel_grow_slots(Sel *g) {
    Py_ssize_t n = g->nslots ? 2 * g->nslots : 256;
    Py_ssize_t *slots = PyMem_Calloc((size_t)n, sizeof(Py_ssize_t));
    if (!slots) return -1;
    for (Py_ssize_t d = 0; d < g->nd; d++) {
        Py_ssize_t j = (Py_ssize_t)(g->hashes[d] & (uint64_t)(n - 1));
        while (slots[j]) j = (j + 1) & (n - 1);
        slots[j] = d + 1;
    }
    PyMem_Free(g->slots);
    g->slots = slots;
    g->nslots = n;
    return 0;
}

/* The code of value v (its distinct index, a new one if not seen); -1 on memory error. */
static int64_t sel_code(Sel *g, const char *v, Py_ssize_t vlen) {
    if ((g->nd + 1) * 2 > g->nslots && sel_grow_slots(g) < 0) return -1;
    uint64_t h = fnv(v, vlen);
    Py_ssize_t mask = g->nslots - 1, j = (Py_ssize_t)(h & (uint64_t)mask);
    for (;;) {
        Py_ssize_t d = g->slots[j];
        if (!d) break;
        d--;
        if (g->hashes[d] == h && g->lens[d] == vlen && memcmp(g->text + g->offs[d], v, (size_t)vlen) == 0) return d;
        j = (j + 1) & mask;
    }
    if (g->nd == g->dcap) {
        Py_ssize_t cap = g->dcap ? 2 * g->dcap : 64;
        GROW(g->offs, cap);
        GROW(g->lens, cap);
        GROW(g->hashes, cap);
        g->dcap = cap;
    }
    if (text_room(&g->text, g->tlen, &g->tcap, vlen) < 0) return -1;
    g->text[g->tlen++] = g->nd ? ',' : '[';
    memcpy(g->text + g->tlen, v, (size_t)vlen);
    g->offs[g->nd] = g->tlen;
    g->lens[g->nd] = vlen;
    g->hashes[g->nd] = h;
    g->tlen += vlen;
    g->slots[j] = g->nd + 1;
    return g->nd++;
}

static int sel_add(Sel *g, int64_t row, const char *v, Py_ssize_t vlen) {
    int64_t code = sel_code(g, v, vlen);
    if (code < 0) return -1;
    if (g->n == g->cap) {
        Py_ssize_t cap = g->cap ? 2 * g->cap : 64;
        GROW(g->rows, cap);
        GROW(g->codes, cap);
        g->cap = cap;
    }
    g->rows[g->n] = row;
    g->codes[g->n++] = code;
    return 0;
}

/* One wanted event's args object at s[i] == '{': the values of the names asked for
 * added to their groups; the end, or -1. */
static Py_ssize_t selected(Sel *want, Py_ssize_t nwant, const char *s, Py_ssize_t i, Py_ssize_t end,
                           int64_t row) {
    int seen[MAX_SELECT] = {0};
    i = skip_ws(s, i + 1, end);
    if (i < end && s[i] == '}') return i + 1;
    for (;;) {
        if (i >= end || s[i] != '"') return fail("an arg name expected");
        Py_ssize_t kend = string_end(s, i, end);
        if (kend < 0) return fail("unterminated arg name");
        const char *key = s + i + 1;
        Py_ssize_t klen = kend - i - 2;
        if (memchr(key, '\\', (size_t)klen)) return fail("an escaped arg name");
        Py_ssize_t w = 0;
        while (w < nwant && !(want[w].len == klen && memcmp(want[w].key, key, (size_t)klen) == 0)) w++;
        i = skip_ws(s, kend, end);
        if (i >= end || s[i] != ':') return fail("':' expected");
        i = skip_ws(s, i + 1, end);
        Py_ssize_t vend = value_end(s, i, end);
        if (vend < 0) return fail("a malformed arg value");
        if (w < nwant) {
            if (seen[w]++) return fail("an arg name twice in one event");
            if (sel_add(&want[w], row, s + i, vend - i) < 0) {
                PyErr_NoMemory();
                return -1;
            }
        }
        i = skip_ws(s, vend, end);
        if (i < end && s[i] == ',') {
            i = skip_ws(s, i + 1, end);
            continue;
        }
        if (i < end && s[i] == '}') return i + 1;
        return fail("',' or '}' expected");
    }
}

static PyObject *sel_result(Sel *want, Py_ssize_t nwant) {
    PyObject *out = PyDict_New();
    if (!out) return NULL;
    for (Py_ssize_t k = 0; k < nwant; k++) {
        Sel *g = &want[k];
        if (!g->n) continue;
        g->text[g->tlen++] = ']';  /* sel_code kept room for it */
        PyObject *name = PyUnicode_DecodeUTF8(g->key, g->len, NULL);
        PyObject *v = name ? Py_BuildValue("(y#y#y#y#)", (const char *)g->rows, g->n * (Py_ssize_t)sizeof(int64_t),
                                           (const char *)g->codes, g->n * (Py_ssize_t)sizeof(int64_t),
                                           g->text, g->tlen, (const char *)g->lens,
                                           g->nd * (Py_ssize_t)sizeof(int64_t)) : NULL;
        if (!v || PyDict_SetItem(out, name, v) < 0) {
            Py_XDECREF(name);
            Py_XDECREF(v);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(name);
        Py_DECREF(v);
    }
    return out;
}

static PyObject *select_args(PyObject *self, PyObject *args) {
    Py_buffer buf, rows_buf;
    long long base = 0;
    PyObject *names = NULL, *out = NULL;
    if (!PyArg_ParseTuple(args, "y*LO!y*", &buf, &base, &PyTuple_Type, &names, &rows_buf)) return NULL;
    Sel want[MAX_SELECT];
    Py_ssize_t nwant = PyTuple_GET_SIZE(names), k;
    memset(want, 0, sizeof(want));
    const char *s = buf.buf;
    Py_ssize_t end = buf.len, i;
    const int64_t *rows = rows_buf.buf;
    Py_ssize_t nrows = rows_buf.len / (Py_ssize_t)sizeof(int64_t), next = 0;
    if (nwant > MAX_SELECT) {
        nwant = 0;
        fail("too many arg names asked for");
        goto done;
    }
    for (k = 0; k < nwant; k++) {
        PyObject *name = PyTuple_GET_ITEM(names, k);
        if (!PyUnicode_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "names must be str");
            goto done;
        }
        want[k].key = PyUnicode_AsUTF8AndSize(name, &want[k].len);
        if (!want[k].key) goto done;
    }
    i = skip_ws(s, 0, end);
    if (i >= end || s[i] != '[') {
        fail("'[' expected");
        goto done;
    }
    i = skip_ws(s, i + 1, end);
    int64_t row = base;
    while (next < nrows && rows[next] < row) next++;  /* rows before the batch: none of its events */
    if (i < end && s[i] == ']') {
        i++;
    } else {
        for (;;) {
            if (next >= nrows) {  /* every row asked for is read: the rest is not looked at */
                i = end;
                break;
            }
            if (rows[next] == row) {
                if (i >= end || s[i] != '{') {
                    fail("an args object expected");
                    goto done;
                }
                i = selected(want, nwant, s, i, end, row);
                next++;
            } else {
                i = value_end(s, i, end);
                if (i < 0) fail("a malformed args value");
            }
            if (i < 0) goto done;
            row++;
            while (next < nrows && rows[next] < row) next++;  /* not ascending: skipped */
            i = skip_ws(s, i, end);
            if (i < end && s[i] == ',') {
                i = skip_ws(s, i + 1, end);
                continue;
            }
            if (i < end && s[i] == ']') {
                i++;
                break;
            }
            fail("',' or ']' expected");
            goto done;
        }
    }
    if (skip_ws(s, i, end) != end) {
        fail("text after the args");
        goto done;
    }
    out = sel_result(want, nwant);
done:
    for (k = 0; k < nwant; k++) {
        PyMem_Free(want[k].rows);
        PyMem_Free(want[k].codes);
        PyMem_Free(want[k].text);
        PyMem_Free(want[k].offs);
        PyMem_Free(want[k].lens);
        PyMem_Free(want[k].hashes);
        PyMem_Free(want[k].slots);
    }
    PyBuffer_Release(&buf);
    PyBuffer_Release(&rows_buf);
    return out;
}

static PyObject *groups(PyObject *self, PyObject *args) { return walk(args, 1); }

static PyObject *names(PyObject *self, PyObject *args) { return walk(args, 0); }

static PyMethodDef methods[] = {
    {"names", names, METH_VARARGS,
     "names(text) -> set: the names of every arg of one batch; ValueError outside the plain case."},
    {"groups", groups, METH_VARARGS,
     "groups(text, base, skip) -> {name: (rows int64 bytes, joined JSON bytes, lens int64 bytes)}: one batch "
     "of args grouped by arg name; ValueError outside the plain case."},
    {"select", select_args, METH_VARARGS,
     "select(text, base, names, rows) -> {name: (rows int64 bytes, codes int64 bytes, distinct values' joined "
     "JSON bytes, their lens int64 bytes)}: the args called one of the tuple names of the events of rows (int64 "
     "bytes, ascending) only; ValueError outside the plain case."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_args", "Deferred Kineto args grouped by name, in one walk of their text.", -1, methods,
};

PyMODINIT_FUNC PyInit__args(void) { return PyModule_Create(&moduledef); }
