/* polyprof.formats._kineto_memory: Kineto's [memory] args read from a batch's JSON text
 * straight into integer columns of the memory events alone.
 *
 * columns(text) takes one batch of args (`[args, ...]`, JSON). A memory event is an
 * element whose "Bytes" is an integer beside an integer "Total Allocated" or, as torch
 * 1.8 wrote them without totals, "Device Type" (integers other than INT64_MIN). For
 * those alone it returns their index in the batch and the integers under "Bytes",
 * "Addr", "Total Allocated", "Total Reserved", "Device Type" and "Device Id" as int64
 * columns (INT64_MIN where absent; an "Addr" in 2^63..2^64-1 keeps its bits), then: a
 * bit mask of the six columns that are absent somewhere, whether an "Addr" beyond int64
 * stands beside a negative or absent one (kineto_memory.py then reads the batch
 * otherwise), whether every memory event has the same ("Device Type", "Device Id"), and
 * whether the text holds "alloc_bytes" (quotes included: polyprof's own spelling, which
 * kineto_memory.py reads otherwise). What kineto_memory.py's msgspec path decodes into
 * its `_KinetoMemory` structs, without an object per event. It returns None for
 * anything that path would not read plainly, and kineto_memory.py then takes it: text
 * that is not strict JSON, an element that is not an object, one of these keys twice in
 * an object, a key with an escape, a value that is not an integer or out of range,
 * bytes beyond ASCII inside strings (left to msgspec's UTF-8 check), nesting deeper
 * than 64.
 *
 * One pass over the text: strings are scanned eight bytes at a time, the six keys as
 * torch writes them are recognised whole, and integers are read in the same pass that
 * checks them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_shared_vec.h" /* vec_t, vec_push */

typedef const uint8_t *ptr;

typedef struct {
    ptr end;
    int alloc_bytes; /* the text holds "alloc_bytes" (quotes included) */
} cur_t;

/* what a byte is inside a string: 0 plain, 1 '"', 2 '\\', 3 not allowed (control, beyond ASCII) */
static uint8_t STR[256];
/* JSON whitespace */
static uint8_t WS[256];

static void
tables(void)
{
    for (int b = 0; b < 256; b++) {
        STR[b] = b < 0x20 || b >= 0x80 ? 3 : b == '"' ? 1 : b == '\\' ? 2 : 0;
        WS[b] = b == ' ' || b == '\n' || b == '\r' || b == '\t';
    }
}

static inline ptr
ws(ptr p, ptr end)
{
    while (p < end && WS[*p])
        p++;
    return p;
}

#define ONES 0x0101010101010101ULL
#define HIGH 0x8080808080808080ULL

/* Whether any of 8 bytes is '"', '\\', below 0x20 or beyond ASCII. */
static inline int
special8(uint64_t w)
{
    uint64_t q = w ^ (ONES * '"'), b = w ^ (ONES * '\\');
    return (((q - ONES) & ~q) | ((b - ONES) & ~b) | (w - ONES * 0x20) | w) & HIGH ? 1 : 0;
}

static inline int
hexdigit(uint8_t b)
{
    return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
}

/* A string at p (its opening quote); *s, *e: its raw inside; *escaped: whether it has an
 * escape. Returns where it ends, or NULL. */
static ptr
string(cur_t *c, ptr p, ptr *s, ptr *e, int *escaped)
{
    ptr end = c->end;
    if (p >= end || *p != '"')
        return NULL;
    *s = ++p;
    *escaped = 0;
    ptr quote_end = NULL; /* where the last escaped quote ends */
    for (;;) {
        while (end - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            if (special8(w))
                break;
            p += 8;
        }
        if (p >= end)
            return NULL;
        switch (STR[*p]) {
        case 0:
            p++;
            continue;
        case 1:
            *e = p;
            /* the text holds "alloc_bytes" where a string is alloc_bytes, or ends with an
             * escaped quote and alloc_bytes (no other quote can start or end it in JSON) */
            if (p - *s >= 11 && (p - *s == 11 || quote_end == p - 11) && !memcmp(p - 11, "alloc_bytes", 11))
                c->alloc_bytes = 1;
            return p + 1;
        case 2: {
            *escaped = 1;
            if (end - p < 2)
                return NULL;
            uint8_t x = p[1];
            if (x == 'u') {
                if (end - p < 6 || !hexdigit(p[2]) || !hexdigit(p[3]) || !hexdigit(p[4]) || !hexdigit(p[5]))
                    return NULL;
                p += 6;
                continue;
            }
            if (!x || !strchr("\"\\/bfnrt", x))
                return NULL;
            p += 2;
            if (x == '"')
                quote_end = p;
            continue;
        }
        default:
            return NULL;
        }
    }
}

/* A JSON number at p; *integer: whether it had no fraction and no exponent. */
static ptr
number(ptr p, ptr end, int *integer)
{
    if (p < end && *p == '-')
        p++;
    if (p >= end || *p < '0' || *p > '9')
        return NULL;
    if (*p == '0')
        p++;
    else
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    *integer = 1;
    if (p < end && *p == '.') {
        *integer = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9')
            return NULL;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        *integer = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || *p < '0' || *p > '9')
            return NULL;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    return p;
}

/* Any JSON value at p (whitespace skipped first); where it ends, or NULL. */
static ptr
value(cur_t *c, ptr p, int depth)
{
    ptr s, e, end = c->end;
    int esc, integer;
    if (depth > 64)
        return NULL;
    p = ws(p, end);
    if (p >= end)
        return NULL;
    switch (*p) {
    case '"':
        return string(c, p, &s, &e, &esc);
    case '{':
    case '[': {
        uint8_t close = *p == '{' ? '}' : ']';
        int obj = close == '}';
        p = ws(p + 1, end);
        if (p < end && *p == close)
            return p + 1;
        for (;;) {
            if (obj) {
                if (!(p = string(c, ws(p, end), &s, &e, &esc)))
                    return NULL;
                p = ws(p, end);
                if (p >= end || *p != ':')
                    return NULL;
                p++;
            }
            if (!(p = value(c, p, depth + 1)))
                return NULL;
            p = ws(p, end);
            if (p >= end)
                return NULL;
            if (*p == ',') {
                p++;
                continue;
            }
            return *p == close ? p + 1 : NULL;
        }
    }
    case 't':
        return end - p >= 4 && !memcmp(p, "true", 4) ? p + 4 : NULL;
    case 'f':
        return end - p >= 5 && !memcmp(p, "false", 5) ? p + 5 : NULL;
    case 'n':
        return end - p >= 4 && !memcmp(p, "null", 4) ? p + 4 : NULL;
    default:
        return number(p, end, &integer);
    }
}

/* Eight digits (their values, bytes 0..9, the first one in the lowest byte) as a number. */
static inline uint64_t
eight_digits(uint64_t d)
{
    d = (d * 10) + (d >> 8);
    d = (((d & 0x000000FF000000FFULL) * (100 + (1000000ULL << 32))) +
         (((d >> 16) & 0x000000FF000000FFULL) * (1 + (10000ULL << 32)))) >>
        32;
    return d;
}

static const uint64_t POW10[9] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};

/* The digits at p (at least one) as *x; where they end, or NULL beyond 2^64-1. Eight
 * bytes at a time where the text allows: how many lead with a digit, their value. */
static inline ptr
digits(ptr p, ptr end, uint64_t *out)
{
    uint64_t x = 0;
    int total = 0;
    while (end - p >= 8) {
        uint64_t w, m;
        memcpy(&w, p, 8);
        w -= ONES * '0'; /* a byte below '0' borrows from the next: only bytes after it */
        m = ((w + ONES * 0x76) | w) & HIGH; /* the bytes that are not digits (and some after) */
        int n = m ? __builtin_ctzll(m) >> 3 : 8;
        if (!n || total + n > 19)
            break; /* the 20th digit onwards: checked one by one below */
        x = x * POW10[n] + eight_digits(w << (8 * (8 - n)));
        total += n;
        p += n;
        if (n < 8) {
            *out = x;
            return p;
        }
    }
    while (p < end && *p >= '0' && *p <= '9') {
        if (__builtin_mul_overflow(x, 10, &x) || __builtin_add_overflow(x, (uint64_t)(*p - '0'), &x))
            return NULL;
        p++;
    }
    *out = x;
    return p;
}

/* An integer at p: *v its two's complement bits, *kind 0 (0..2^63-1), 1 (negative), 2
 * (2^63..2^64-1). NULL where it is not an integer, or is out of range. */
static inline ptr
integer(ptr p, ptr end, uint64_t *v, int *kind)
{
    int neg = p < end && *p == '-';
    p += neg;
    if (p >= end || *p < '0' || *p > '9')
        return NULL;
    uint64_t x = 0;
    if (*p == '0')
        p++;
    else if (!(p = digits(p, end, &x)))
        return NULL;
    if (p < end && (*p == '.' || *p == 'e' || *p == 'E'))
        return NULL; /* a number, but not an integer */
    if (neg) {
        if (x > (uint64_t)1 << 63)
            return NULL;
        *v = (uint64_t)0 - x;
        *kind = x ? 1 : 0;
    } else {
        *v = x;
        *kind = x >> 63 ? 2 : 0;
    }
    return p;
}

enum { BYTES, ADDR, TOTAL, RESERVED, DTYPE, DID, NKEYS };
static const char *KEYS[NKEYS] = {"Bytes", "Addr", "Total Allocated", "Total Reserved", "Device Type", "Device Id"};

/* Which of KEYS the key s..e is (-1: none), by its length first. */
static inline int
which_key(ptr s, ptr e)
{
    int i;
    switch (e - s) {
    case 5: i = BYTES; break;
    case 4: i = ADDR; break;
    case 15: i = TOTAL; break;
    case 14: i = RESERVED; break;
    case 11: i = DTYPE; break;
    case 9: i = DID; break;
    default: return -1;
    }
    return memcmp(s, KEYS[i], (size_t)(e - s)) ? -1 : i;
}

/* One of KEYS spelt whole at p (just after its opening quote) with its closing quote:
 * its index and, in *after, where it ends (past the colon and one space where they
 * follow, as torch writes them: *colon); -1 otherwise (read as any other string). */
static inline int
known_key(ptr p, ptr end, ptr *after, int *colon)
{
    if (end - p < 18)
        return -1;
#define KEY(text, i)                                                                                               \
    if (!memcmp(p, text "\": ", sizeof(text) + 2)) {                                                               \
        *after = p + sizeof(text) + 2;                                                                             \
        *colon = 1;                                                                                                \
        return i;                                                                                                  \
    }                                                                                                              \
    if (!memcmp(p, text "\"", sizeof(text))) {                                                                     \
        *after = p + sizeof(text);                                                                                 \
        return i;                                                                                                  \
    }
    switch (*p) {
    case 'B': KEY("Bytes", BYTES) break;
    case 'A': KEY("Addr", ADDR) break;
    case 'T': KEY("Total Allocated", TOTAL) KEY("Total Reserved", RESERVED) break;
    case 'D': KEY("Device Type", DTYPE) KEY("Device Id", DID) break;
    }
#undef KEY
    return -1;
}

typedef struct {
    vec_t *cols;           /* the memory events' index in the batch, then KEYS' values */
    int absent;            /* bit i: KEYS[i] absent at some memory event */
    int big_addr, low_addr; /* an Addr beyond int64; a negative or absent one */
    int one_device;
    int64_t device[2];
    int64_t n;
} out_t;

static int
keep(out_t *o, int64_t index, const int64_t row[NKEYS], int kind)
{
    if (row[BYTES] == INT64_MIN || (row[TOTAL] == INT64_MIN && row[DTYPE] == INT64_MIN))
        return 0; /* not a memory event (the first ones, 2021, have "Device Type" but no "Total Allocated") */
    if (vec_push(&o->cols[0], &index, 8) < 0)
        return -1;
    for (int i = 0; i < NKEYS; i++) {
        if (vec_push(&o->cols[1 + i], &row[i], 8) < 0)
            return -1;
        if (row[i] == INT64_MIN)
            o->absent |= 1 << i;
    }
    o->big_addr |= kind == 2;
    o->low_addr |= kind == 1 || kind == 3;
    if (!o->n++) {
        o->device[0] = row[DTYPE];
        o->device[1] = row[DID];
    } else if (row[DTYPE] != o->device[0] || row[DID] != o->device[1]) {
        o->one_device = 0;
    }
    return 0;
}

enum { OK = 0, BAIL = 1, NOMEM = 2 };

/* The columns are gathered here, then copied out: kept from call to call (the GIL is held
 * throughout a call), so a load's batches reuse the same pages. */
static vec_t scratch[1 + NKEYS];

/* One object (p: its '{'): the keys' integers into row, the Addr's kind; where it ends. */
static ptr
object(cur_t *c, ptr p, int64_t row[NKEYS], int *addr_kind)
{
    ptr end = c->end;
    int seen = 0;
    if (p >= end || *p != '{')
        return NULL;
    p = ws(p + 1, end);
    if (p < end && *p == '}')
        return p + 1;
    for (;;) {
        ptr s, e;
        int esc, which, colon = 0;
        p = ws(p, end);
        if (p >= end || *p != '"')
            return NULL;
        if ((which = known_key(p + 1, end, &p, &colon)) < 0) {
            if (!(p = string(c, p, &s, &e, &esc)) || esc)
                return NULL;
            which = which_key(s, e);
        }
        if (!colon) {
            p = ws(p, end);
            if (p >= end || *p != ':')
                return NULL;
            p++;
        }
        p = ws(p, end);
        if (which >= 0) {
            uint64_t v;
            int k;
            if (seen & (1 << which) || !(p = integer(p, end, &v, &k)))
                return NULL;
            seen |= 1 << which;
            if (which == ADDR)
                *addr_kind = k;
            else if (k == 2)
                return NULL; /* beyond int64 */
            row[which] = (int64_t)v;
        } else if (!(p = value(c, p, 1))) {
            return NULL;
        }
        p = ws(p, end);
        if (p >= end)
            return NULL;
        if (*p == ',') {
            p++;
            continue;
        }
        return *p == '}' ? p + 1 : NULL;
    }
}

static int
scan(cur_t *c, ptr p, out_t *o)
{
    ptr end = c->end;
    p = ws(p, end);
    if (p >= end || *p != '[')
        return BAIL;
    p = ws(p + 1, end);
    if (p < end && *p == ']')
        return ws(p + 1, end) == end ? OK : BAIL;
    for (int64_t index = 0;; index++) {
        int64_t row[NKEYS] = {INT64_MIN, INT64_MIN, INT64_MIN, INT64_MIN, INT64_MIN, INT64_MIN};
        int kind = 3;
        if (!(p = object(c, ws(p, end), row, &kind)))
            return BAIL;
        if (keep(o, index, row, kind) < 0)
            return NOMEM;
        p = ws(p, end);
        if (p >= end)
            return BAIL;
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p == ']')
            return ws(p + 1, end) == end ? OK : BAIL;
        return BAIL;
    }
}

static PyObject *
columns(PyObject *self, PyObject *arg)
{
    Py_buffer buf;
    if (PyObject_GetBuffer(arg, &buf, PyBUF_SIMPLE) < 0)
        return NULL;
    cur_t c = {(ptr)buf.buf + buf.len, 0};
    out_t o;
    memset(&o, 0, sizeof o);
    o.one_device = 1;
    o.cols = scratch;
    for (int i = 0; i <= NKEYS; i++)
        scratch[i].n = 0;
    int rc = scan(&c, (ptr)buf.buf, &o);
    PyBuffer_Release(&buf);
    PyObject *out = NULL;
    if (rc == NOMEM) {
        PyErr_NoMemory();
    } else if (rc == BAIL) {
        out = Py_NewRef(Py_None);
    } else {
        out = PyTuple_New(1 + NKEYS + 4);
        for (int i = 0; out && i <= NKEYS; i++) {
            PyObject *b = PyBytes_FromStringAndSize(o.cols[i].p ? o.cols[i].p : "", (Py_ssize_t)o.cols[i].n);
            if (!b)
                Py_CLEAR(out);
            else
                PyTuple_SET_ITEM(out, i, b);
        }
        if (out) {
            PyTuple_SET_ITEM(out, NKEYS + 1, PyLong_FromLong(o.absent));
            PyTuple_SET_ITEM(out, NKEYS + 2, PyBool_FromLong(o.big_addr && o.low_addr));
            PyTuple_SET_ITEM(out, NKEYS + 3, PyBool_FromLong(o.one_device));
            PyTuple_SET_ITEM(out, NKEYS + 4, PyBool_FromLong(c.alloc_bytes));
            if (!PyTuple_GET_ITEM(out, NKEYS + 1))
                Py_CLEAR(out);
        }
    }
    return out;
}

static PyMethodDef methods[] = {
    {"columns", columns, METH_O,
     "columns(text) -> (index, bytes, addr, total, reserved, device type, device id, absent, mixed addr, one "
     "device, alloc_bytes): the memory events' index in the batch and their six columns as bytes of int64, the "
     "bit mask of columns absent somewhere, whether an Addr beyond int64 stands beside a negative or absent "
     "one, whether every memory event is on one device, whether \"alloc_bytes\" is in the text; or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_kineto_memory", "Kineto's [memory] args as integer columns.", -1, methods,
};

PyMODINIT_FUNC
PyInit__kineto_memory(void)
{
    tables();
    return PyModule_Create(&moduledef);
}
