/* polyprof.formats._kineto_memory: Kineto's [memory] args read from a batch's JSON text
 * straight into integer columns.
 *
 * columns(text) takes one batch of args (`[args, ...]`, JSON) and returns, for every
 * element, the integers under "Bytes", "Addr", "Total Allocated", "Total Reserved",
 * "Device Type" and "Device Id" as six int64 columns (INT64_MIN where absent) and one
 * uint8 column saying what each "Addr" was (0: 0..2^63-1, 1: negative, 2: 2^63..2^64-1,
 * its bits kept, 3: absent), and whether the text holds "alloc_bytes" (quotes included:
 * polyprof's own spelling, which kineto_memory.py reads otherwise). What kineto_memory.py's msgspec path decodes into its
 * `_KinetoMemory` structs, without an object per event. It returns None for anything
 * that path would not read plainly, and kineto_memory.py then takes it: text that is
 * not strict JSON, an element that is not an object, one of these keys twice in an
 * object, a key with an escape, a value that is not an integer or out of range, bytes
 * beyond ASCII inside strings (left to msgspec's UTF-8 check), nesting deeper than 64.
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
        if (!q)
            return -1;
        v->p = q;
        v->cap = cap;
    }
    memcpy(v->p + v->n, x, size);
    v->n += size;
    return 0;
}

typedef struct {
    const uint8_t *p, *end;
    int alloc_bytes; /* the text holds "alloc_bytes" (quotes included) */
} cur_t;

enum { OK = 0, BAIL = 1, NOMEM = 2 };

static inline void
ws(cur_t *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t'))
        c->p++;
}

static inline int
hexdigit(uint8_t b)
{
    return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
}

/* A string at c->p (its opening quote); *s, *e: its raw inside; *escaped: whether it has an escape. */
static int
string(cur_t *c, const uint8_t **s, const uint8_t **e, int *escaped)
{
    if (c->p >= c->end || *c->p != '"')
        return BAIL;
    c->p++;
    *s = c->p;
    *escaped = 0;
    const uint8_t *quote_end = NULL; /* where the last escaped quote ends */
    while (c->p < c->end) {
        uint8_t b = *c->p;
        if (b == '"') {
            *e = c->p++;
            /* the text holds "alloc_bytes" where a string is alloc_bytes, or ends with an
             * escaped quote and alloc_bytes (no other quote can start or end it in JSON) */
            if (*e - *s >= 11 && !memcmp(*e - 11, "alloc_bytes", 11) && (*e - *s == 11 || quote_end == *e - 11))
                c->alloc_bytes = 1;
            return OK;
        }
        if (b < 0x20 || b >= 0x80)
            return BAIL;
        if (b == '\\') {
            *escaped = 1;
            if (c->end - c->p < 2)
                return BAIL;
            uint8_t x = c->p[1];
            if (x == 'u') {
                if (c->end - c->p < 6 || !hexdigit(c->p[2]) || !hexdigit(c->p[3]) || !hexdigit(c->p[4]) ||
                    !hexdigit(c->p[5]))
                    return BAIL;
                c->p += 6;
                continue;
            }
            if (!strchr("\"\\/bfnrt", x) || !x)
                return BAIL;
            c->p += 2;
            if (x == '"')
                quote_end = c->p;
            continue;
        }
        c->p++;
    }
    return BAIL;
}

/* A JSON number; *integer: whether it had no fraction and no exponent. */
static int
number(cur_t *c, int *integer)
{
    const uint8_t *p = c->p;
    if (p < c->end && *p == '-')
        p++;
    if (p >= c->end || *p < '0' || *p > '9')
        return BAIL;
    if (*p == '0')
        p++;
    else
        while (p < c->end && *p >= '0' && *p <= '9')
            p++;
    *integer = 1;
    if (p < c->end && *p == '.') {
        *integer = 0;
        p++;
        if (p >= c->end || *p < '0' || *p > '9')
            return BAIL;
        while (p < c->end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < c->end && (*p == 'e' || *p == 'E')) {
        *integer = 0;
        p++;
        if (p < c->end && (*p == '+' || *p == '-'))
            p++;
        if (p >= c->end || *p < '0' || *p > '9')
            return BAIL;
        while (p < c->end && *p >= '0' && *p <= '9')
            p++;
    }
    c->p = p;
    return OK;
}

static int
value(cur_t *c, int depth)
{
    const uint8_t *s, *e;
    int esc, integer;
    if (depth > 64)
        return BAIL;
    ws(c);
    if (c->p >= c->end)
        return BAIL;
    switch (*c->p) {
    case '"':
        return string(c, &s, &e, &esc);
    case '{':
    case '[': {
        uint8_t close = *c->p == '{' ? '}' : ']';
        int obj = close == '}';
        c->p++;
        ws(c);
        if (c->p < c->end && *c->p == close) {
            c->p++;
            return OK;
        }
        for (;;) {
            if (obj) {
                ws(c);
                if (string(c, &s, &e, &esc) != OK)
                    return BAIL;
                ws(c);
                if (c->p >= c->end || *c->p != ':')
                    return BAIL;
                c->p++;
            }
            if (value(c, depth + 1) != OK)
                return BAIL;
            ws(c);
            if (c->p >= c->end)
                return BAIL;
            if (*c->p == ',') {
                c->p++;
                continue;
            }
            if (*c->p == close) {
                c->p++;
                return OK;
            }
            return BAIL;
        }
    }
    case 't':
        if (c->end - c->p >= 4 && !memcmp(c->p, "true", 4)) {
            c->p += 4;
            return OK;
        }
        return BAIL;
    case 'f':
        if (c->end - c->p >= 5 && !memcmp(c->p, "false", 5)) {
            c->p += 5;
            return OK;
        }
        return BAIL;
    case 'n':
        if (c->end - c->p >= 4 && !memcmp(c->p, "null", 4)) {
            c->p += 4;
            return OK;
        }
        return BAIL;
    default:
        return number(c, &integer);
    }
}

/* An integer value: *v its two's complement bits, *kind 0 (0..2^63-1), 1 (negative), 2 (2^63..2^64-1). */
static int
integer(cur_t *c, uint64_t *v, int *kind)
{
    const uint8_t *start = c->p;
    int is_int;
    if (c->p >= c->end || (*c->p != '-' && (*c->p < '0' || *c->p > '9')))
        return BAIL;
    if (number(c, &is_int) != OK || !is_int)
        return BAIL;
    const uint8_t *p = start;
    int neg = *p == '-';
    if (neg)
        p++;
    uint64_t x = 0;
    for (; p < c->p; p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (x > (UINT64_MAX - d) / 10)
            return BAIL;
        x = x * 10 + d;
    }
    if (neg) {
        if (x > (uint64_t)1 << 63)
            return BAIL;
        *v = (uint64_t)0 - x;
        *kind = x ? 1 : 0;
    } else {
        *v = x;
        *kind = x >> 63 ? 2 : 0;
    }
    return OK;
}

static const char *KEYS[6] = {"Bytes", "Addr", "Total Allocated", "Total Reserved", "Device Type", "Device Id"};
enum { ADDR = 1 };

/* Which of KEYS the key s..e is (-1: none), by its length first. */
static inline int
which_key(const uint8_t *s, const uint8_t *e)
{
    int i;
    switch (e - s) {
    case 5: i = 0; break;
    case 4: i = 1; break;
    case 15: i = 2; break;
    case 14: i = 3; break;
    case 11: i = 4; break;
    case 9: i = 5; break;
    default: return -1;
    }
    return memcmp(s, KEYS[i], (size_t)(e - s)) ? -1 : i;
}

static int
scan(cur_t *c, vec_t *cols, vec_t *addr_kind)
{
    ws(c);
    if (c->p >= c->end || *c->p != '[')
        return BAIL;
    c->p++;
    ws(c);
    if (c->p < c->end && *c->p == ']') {
        c->p++;
        goto tail;
    }
    for (;;) {
        int64_t row[6];
        uint8_t kind = 3;
        int seen = 0;
        for (int i = 0; i < 6; i++)
            row[i] = INT64_MIN;
        ws(c);
        if (c->p >= c->end || *c->p != '{')
            return BAIL;
        c->p++;
        ws(c);
        if (c->p < c->end && *c->p == '}') {
            c->p++;
        } else {
            for (;;) {
                const uint8_t *s, *e;
                int esc;
                ws(c);
                if (string(c, &s, &e, &esc) != OK || esc)
                    return BAIL;
                ws(c);
                if (c->p >= c->end || *c->p != ':')
                    return BAIL;
                c->p++;
                ws(c);
                int which = which_key(s, e);
                if (which >= 0) {
                    uint64_t v;
                    int k;
                    if (seen & (1 << which) || integer(c, &v, &k) != OK)
                        return BAIL;
                    seen |= 1 << which;
                    if (which == ADDR)
                        kind = (uint8_t)k;
                    else if (k == 2)
                        return BAIL; /* beyond int64 */
                    row[which] = (int64_t)v;
                } else if (value(c, 1) != OK) {
                    return BAIL;
                }
                ws(c);
                if (c->p >= c->end)
                    return BAIL;
                if (*c->p == ',') {
                    c->p++;
                    continue;
                }
                if (*c->p == '}') {
                    c->p++;
                    break;
                }
                return BAIL;
            }
        }
        for (int i = 0; i < 6; i++)
            if (vec_push(&cols[i], &row[i], 8) < 0)
                return NOMEM;
        if (vec_push(addr_kind, &kind, 1) < 0)
            return NOMEM;
        ws(c);
        if (c->p >= c->end)
            return BAIL;
        if (*c->p == ',') {
            c->p++;
            continue;
        }
        if (*c->p == ']') {
            c->p++;
            break;
        }
        return BAIL;
    }
tail:
    ws(c);
    return c->p == c->end ? OK : BAIL;
}

static PyObject *
columns(PyObject *self, PyObject *arg)
{
    Py_buffer buf;
    if (PyObject_GetBuffer(arg, &buf, PyBUF_SIMPLE) < 0)
        return NULL;
    cur_t c = {buf.buf, (const uint8_t *)buf.buf + buf.len, 0};
    vec_t cols[7];
    memset(cols, 0, sizeof cols);
    int rc = scan(&c, cols, &cols[6]);
    PyBuffer_Release(&buf);
    PyObject *out = NULL;
    if (rc == NOMEM) {
        PyErr_NoMemory();
    } else if (rc == BAIL) {
        out = Py_None;
        Py_INCREF(out);
    } else {
        out = PyTuple_New(8);
        if (out)
            PyTuple_SET_ITEM(out, 7, PyBool_FromLong(c.alloc_bytes));
        for (int i = 0; out && i < 7; i++) {
            PyObject *b = PyBytes_FromStringAndSize(cols[i].p ? cols[i].p : "", (Py_ssize_t)cols[i].n);
            if (!b)
                Py_CLEAR(out);
            else
                PyTuple_SET_ITEM(out, i, b);
        }
    }
    for (int i = 0; i < 7; i++)
        PyMem_Free(cols[i].p);
    return out;
}

static PyMethodDef methods[] = {
    {"columns", columns, METH_O,
     "columns(text) -> (bytes, addr, total, reserved, device type, device id, addr kind, alloc_bytes): the "
     "columns as bytes of int64 (uint8 for addr kind), whether \"alloc_bytes\" is in the text; or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_kineto_memory", "Kineto's [memory] args as integer columns.", -1, methods,
};

PyMODINIT_FUNC
PyInit__kineto_memory(void)
{
    return PyModule_Create(&moduledef);
}
