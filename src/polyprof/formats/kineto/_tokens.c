/* polyprof.formats.kineto._tokens: a slice of the traceEvents array -> event columns, in C.
 *
 * The streaming tokenizer of the Kineto reader. slicing.py cuts the array into slices of
 * whole events (text `{...}, {...}, ...`, no brackets); `Tokenizer.scan(text, stop)`
 * reads text[0:stop] once and writes, without a Python object per event:
 *
 *   - the events (ph X, i/I, B): phase codes, pid/tid codes, name/category string ids,
 *     ts and dur as exact int64 ns (from the digits: up to three decimals, as
 *     numbers.py reads them), and their args' JSON text joined by commas;
 *   - the flow endpoints (ph s, t, f with an integer id): category, pid, tid codes,
 *     id, phase, ts, and whether each binds to the slice enclosing it (bp "e", s, t);
 *   - the other events (metadata, counters, E, async, unknown phases): their index in
 *     the slice and their text as one JSON array, for the Python parser (collector.py);
 *   - the names of the events' args (each distinct name once, as its UTF-8 bytes), or
 *     None where some event's args are not an object or hold an escaped name: what a
 *     lookup of a deferred arg asks first, whether any event has it (deferred.py);
 *   - the args taken by name (`take(names)`, args.py's BY_ROW: an op's shapes, a kernel's
 *     launch configuration, ...), kept across slices and given once at the end
 *     (`taken()`): per name, the rows of the events that have it (counted over the
 *     slices read) and a code of its value's JSON text, exact, into the distinct texts;
 *     None where some event's args were not read exactly (escaped or repeated names...).
 *
 * Codes come from three tables kept across slices (pid, tid, strings), keyed by each
 * value's JSON text. A value new to a table gets a provisional code -1-k (k: its place
 * among this slice's new values, `pending`); tokenized.py numbers the new values exactly
 * as the Python path does and hands the codes back (`learn`), so both paths give the
 * same codes. Tokens are only a key, never a value: "7" and 7 are two keys that
 * tokenized.py maps to one code.
 *
 * It is stricter than msgspec, never looser: anything it does not read exactly as the
 * Python path does (numbers it would have to round, escaped keys, values of odd types,
 * bind_id/flow_in/flow_out, invalid UTF-8, surrogate escapes, nesting past 64, and
 * any JSON error) makes `scan` return None, and the caller reads that slice with msgspec
 * (slicing.py + collector.py: the fallback, which is what tests hold this to).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_DEPTH 64
#define UNSET INT64_MIN
/* phase codes, as events.py */
enum { P_X, P_I, P_B, P_E, P_C, P_S, P_T, P_F, P_M, P_OTHER, P_AB, P_AE, P_AN };

typedef const unsigned char *cp;

/* ---------------------------------------------------------------- growable buffers */
typedef struct { char *p; size_t len, cap; } Buf;

static int grow(Buf *b, size_t more) {
    if (b->len + more <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more) cap *= 2;
    char *p = PyMem_Realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}
static inline int put(Buf *b, const void *src, size_t n) {
    if (grow(b, n)) return -1;
    memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}
static inline int put64(Buf *b, int64_t v) { return put(b, &v, 8); }
static inline int put32(Buf *b, int32_t v) { return put(b, &v, 4); }
static inline int put8(Buf *b, int8_t v) { return put(b, &v, 1); }

/* ---------------------------------------------------------------- code tables */
typedef struct { uint64_t hash; size_t off; uint32_t len; int32_t epoch; int64_t code; int64_t prov; } Entry;
typedef struct {
    Entry *slots; size_t cap, used;
    Buf arena;     /* the keys' bytes */
    Buf pending;   /* (arena offset, length) of this slice's new keys, in order */
} Table;

static uint64_t hash_of(cp s, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ULL;
    return h ? h : 1;
}

static int table_grow(Table *t) {
    size_t cap = t->cap ? t->cap * 2 : 1024;
    Entry *s = PyMem_Calloc(cap, sizeof(Entry));
    if (!s) return -1;
    for (size_t i = 0; i < t->cap; i++) {
        Entry *e = &t->slots[i];
        if (!e->hash) continue;
        size_t j = e->hash & (cap - 1);
        while (s[j].hash) j = (j + 1) & (cap - 1);
        s[j] = *e;
    }
    PyMem_Free(t->slots);
    t->slots = s;
    t->cap = cap;
    return 0;
}

static Entry *find(Table *t, cp key, size_t n, uint64_t h) {
    size_t j = h & (t->cap - 1);
    for (;;) {
        Entry *e = &t->slots[j];
        if (!e->hash || (e->hash == h && e->len == n && !memcmp(t->arena.p + e->off, key, n))) return e;
        j = (j + 1) & (t->cap - 1);
    }
}

/* The code of a key: its code, or a provisional -1-k for a value new in this slice.
 * UNSET on memory error. */
static int64_t lookup(Table *t, cp key, size_t n, int32_t epoch) {
    if ((t->used + 1) * 2 > t->cap && table_grow(t)) return UNSET;
    uint64_t h = hash_of(key, n);
    Entry *e = find(t, key, n, h);
    if (e->hash) {
        if (e->code != UNSET) return e->code;
    } else {
        e->hash = h;
        e->off = t->arena.len;
        e->len = (uint32_t)n;
        e->code = UNSET;
        e->epoch = epoch - 1;
        t->used++;
        if (put(&t->arena, key, n)) return UNSET;
    }
    if (e->epoch != epoch) {  /* new in this slice (or left by a slice read the other way) */
        e->epoch = epoch;
        size_t rec[2] = {e->off, e->len};
        e->prov = (int64_t)(t->pending.len / sizeof(rec));
        if (put(&t->pending, rec, sizeof(rec))) return UNSET;
    }
    return -1 - e->prov;
}

/* ---------------------------------------------------------------- validating scanner */
static const unsigned char HEX[256] = {
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1, ['8'] = 1,
    ['9'] = 1, ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['A'] = 1, ['B'] = 1,
    ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1};
/* 1: ends the fast run of a string: '"', '\\', control characters, non-ASCII */
static unsigned char STOP[256];

static inline cp ws(cp p, cp end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

static int hexval(unsigned char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }

/* p at the opening quote -> past the closing one; NULL if not a string we read exactly.
 * *esc: whether it holds an escape. */
static cp string(cp p, cp end, int *esc) {
    p++;
    *esc = 0;
    for (;;) {
        while (p + 4 <= end && !(STOP[p[0]] | STOP[p[1]] | STOP[p[2]] | STOP[p[3]])) p += 4;
        while (p < end && !STOP[*p]) p++;
        if (p >= end) return NULL;
        unsigned char c = *p;
        if (c == '"') return p + 1;
        if (c == '\\') {
            *esc = 1;
            if (p + 1 >= end) return NULL;
            c = p[1];
            if (c == 'u') {
                if (p + 6 > end || !HEX[p[2]] || !HEX[p[3]] || !HEX[p[4]] || !HEX[p[5]]) return NULL;
                int v = (hexval(p[2]) << 12) | (hexval(p[3]) << 8);
                if (v >= 0xD800 && v <= 0xDFFF) return NULL;  /* surrogates: msgspec's reading */
                p += 6;
            } else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' ||
                       c == 't') {
                p += 2;
            } else {
                return NULL;
            }
            continue;
        }
        if (c < 0x20) return NULL;
        /* UTF-8, as Python's decoder takes it */
        size_t need;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c >= 0xE0 && c <= 0xEF) { need = 2; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
        else if (c >= 0xF0 && c <= 0xF4) { need = 3; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
        else return NULL;
        if (p + need >= end) return NULL;
        if (p[1] < lo || p[1] > hi) return NULL;
        for (size_t k = 2; k <= need; k++)
            if (p[k] < 0x80 || p[k] > 0xBF) return NULL;
        p += need + 1;
    }
}

typedef struct { int neg, digits, frac, exp; } Num;

/* p at a number -> past it; NULL if not JSON's number grammar. */
static cp number(cp p, cp end, Num *n) {
    n->neg = n->digits = n->frac = n->exp = 0;
    if (p < end && *p == '-') { n->neg = 1; p++; }
    if (p >= end) return NULL;
    if (*p == '0') { p++; n->digits = 1; }
    else if (*p >= '1' && *p <= '9') { while (p < end && *p >= '0' && *p <= '9') { p++; n->digits++; } }
    else return NULL;
    if (p < end && *p == '.') {
        p++;
        while (p < end && *p >= '0' && *p <= '9') { p++; n->frac++; }
        if (!n->frac) return NULL;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        while (p < end && *p >= '0' && *p <= '9') { p++; n->exp++; }
        if (!n->exp) return NULL;
    }
    return p;
}

/* What the args text of a slice holds, for the checks collector.py makes of each batch:
 * numbers msgspec may find out of range (args.py `_big_numbers`), the memory events'
 * markers (kineto_memory.MARKERS), and ids.py's "absent" number. Supersets: a flag
 * set where nothing is there only sends the batch to the check. */
typedef struct { int risky, memory, absent; } Flags;

static void mark_string(Flags *f, cp q, cp r) {  /* the string token q..r */
    size_t len = (size_t)(r - q) - 2;
    if (!f || len < 11) return;
    if ((r[-2] == 'd' && len >= 15 && !memcmp(r - 16, "Total Allocated", 15)) ||
        (r[-2] == 'e' && !memcmp(r - 12, "Device Type", 11)) ||  /* the first ones (2021): no totals */
        (r[-2] == 's' && !memcmp(r - 12, "alloc_bytes", 11)))
        f->memory = 1;
    for (cp x = q + 1; len >= 19 && x + 19 <= r - 1; x++) {
        x = memchr(x, '9', (size_t)(r - 1 - x));
        if (!x || x + 19 > r - 1) break;
        if (!memcmp(x, "9223372036854775808", 19)) { f->absent = 1; break; }
    }
}

/* Any JSON value -> past it; NULL if not valid (or not read exactly). `strict`: the value
 * is decoded by msgspec as a Python value (so numbers must fit: no exponent, <= 18 digits). */
static cp value(cp p, cp end, int depth, int strict, Flags *f) {
    if (p >= end) return NULL;
    int esc;
    Num n;
    cp q = p;
    switch (*p) {
    case '"':
        p = string(p, end, &esc);
        if (p) mark_string(f, q, p);
        return p;
    case '{': case '[': {
        unsigned char close = *p == '{' ? '}' : ']';
        if (depth >= MAX_DEPTH) return NULL;
        p = ws(p + 1, end);
        if (p < end && *p == close) return p + 1;
        for (;;) {
            if (close == '}') {
                if (p >= end || *p != '"') return NULL;
                q = p;
                if (!(p = string(p, end, &esc))) return NULL;
                mark_string(f, q, p);
                p = ws(p, end);
                if (p >= end || *p != ':') return NULL;
                p = ws(p + 1, end);
            }
            if (!(p = value(p, end, depth + 1, strict, f))) return NULL;
            p = ws(p, end);
            if (p >= end) return NULL;
            if (*p == close) return p + 1;
            if (*p != ',') return NULL;
            p = ws(p + 1, end);
        }
    }
    case 't': return end - p >= 4 && !memcmp(p, "true", 4) ? p + 4 : NULL;
    case 'f': return end - p >= 5 && !memcmp(p, "false", 5) ? p + 5 : NULL;
    case 'n': return end - p >= 4 && !memcmp(p, "null", 4) ? p + 4 : NULL;
    default:
        p = number(p, end, &n);
        if (p && strict && (n.exp || n.digits + n.frac > 18)) return NULL;
        if (p && f) {  /* a double's range, an int's 4300 digits (args.py); ids.py's number */
            f->risky |= n.exp || n.digits >= 200 || n.frac >= 200;
            f->absent |= n.digits >= 19;
        }
        return p;
    }
}

/* ---------------------------------------------------------------- one event */
enum { K_PH, K_NAME, K_CAT, K_PID, K_TID, K_TS, K_DUR, K_ARGS, K_ID, K_ID2, K_BIND, K_BP, K_FIN, K_FOUT, K_N };
static const char *KEYS[K_N] = {"ph", "name", "cat", "pid", "tid", "ts", "dur", "args", "id", "id2",
                                "bind_id", "bp", "flow_in", "flow_out"};

/* ids.py's eager ids of one event's args: "correlation" and "External id" when they are
 * integers; ok 0 where ids.py must read them (other types, other spellings, twice). */
typedef struct { int64_t corr, ext; int ok; } Ids;
/* the names of an event's args: where each is in the text (without its quotes); `ok` 0
 * where they cannot be told (args not an object, an escaped name, more than MAX_ARG_NAMES) */
#define MAX_ARG_NAMES 64
typedef struct { cp at[MAX_ARG_NAMES]; uint32_t len[MAX_ARG_NAMES]; int n, ok; } Names;
/* the args taken by name (`take`): at most MAX_TAKE names, found by their length first */
#define MAX_TAKE 32
#define TAKE_LEN 64
typedef struct { int n; const char *name[MAX_TAKE]; size_t len[MAX_TAKE]; uint32_t by_len[TAKE_LEN + 1]; } Take;
typedef struct { cp at[K_N], to[K_N]; int esc[K_N]; unsigned seen; Flags flags; Ids ids; Names names;
                 const Take *take; cp tat[MAX_TAKE], tto[MAX_TAKE]; uint32_t tseen; int tbad; } Ev;

/* Which taken name an arg name is (-1: none). */
static int taken(const Take *t, cp k, size_t n) {
    if (n > TAKE_LEN || !t->by_len[n]) return -1;
    for (uint32_t m = t->by_len[n]; m; m &= m - 1) {
        int i = __builtin_ctz(m);
        if (!memcmp(t->name[i], k, n)) return i;
    }
    return -1;
}

static int key_of(cp k, size_t n) {
    for (int i = 0; i < K_N; i++)
        if (strlen(KEYS[i]) == n && !memcmp(KEYS[i], k, n)) return i;
    return -1;
}

static int plain_int(cp p, cp e, int64_t *out) {
    Num n;
    if (number(p, e, &n) != e || n.frac || n.exp || n.digits > 18) return 0;
    int neg = *p == '-';
    int64_t v = 0;
    for (p += neg; p < e; p++) v = v * 10 + (*p - '0');
    *out = neg ? -v : v;
    return 1;
}

/* An event's args value -> past it, its flags and ids. */
static cp args_value(cp p, cp end, Ev *ev) {
    Ids *ids = &ev->ids;
    Names *nm = &ev->names;
    nm->n = 0;
    if (*p != '{') {
        ids->ok = 0;
        nm->ok = 0;
        return value(p, end, 1, 0, &ev->flags);
    }
    p = ws(p + 1, end);
    if (p < end && *p == '}') return p + 1;
    for (;;) {
        int esc, which = 0;
        if (p >= end || *p != '"') return NULL;
        cp k = p, ke = string(p, end, &esc);
        if (!ke) return NULL;
        mark_string(&ev->flags, k, ke);
        size_t kl = (size_t)(ke - k) - 2;
        if (esc || nm->n == MAX_ARG_NAMES) nm->ok = 0;
        else {
            nm->at[nm->n] = k + 1;
            nm->len[nm->n++] = (uint32_t)kl;
        }
        if (esc) ids->ok = 0;
        else if (kl == 11 && !memcmp(k + 1, "correlation", 11)) which = 1;
        else if (kl == 11 && !memcmp(k + 1, "External id", 11)) which = 2;
        else if ((kl == 14 && !memcmp(k + 1, "correlation_id", 14)) || (kl == 11 && !memcmp(k + 1, "external_id", 11)))
            ids->ok = 0;
        int tk = esc || !ev->take->n ? -1 : taken(ev->take, k + 1, kl);
        p = ws(ke, end);
        if (p >= end || *p != ':') return NULL;
        p = ws(p + 1, end);
        cp v = p;
        if (!(p = value(p, end, 2, 0, &ev->flags))) return NULL;
        if (tk >= 0) {
            if (ev->tseen & (1u << tk)) ev->tbad = 1;  /* twice in one event: the Python path's reading */
            ev->tseen |= 1u << tk;
            ev->tat[tk] = v;
            ev->tto[tk] = p;
        }
        if (which) {
            int64_t *slot = which == 1 ? &ids->corr : &ids->ext, x;
            if (*slot != UNSET || !plain_int(v, p, &x)) ids->ok = 0;
            else *slot = x;
        }
        p = ws(p, end);
        if (p >= end) return NULL;
        if (*p == '}') return p + 1;
        if (*p != ',') return NULL;
        p = ws(p + 1, end);
    }
}

/* p at '{' -> past '}'; NULL if we do not read it exactly. */
static cp event(cp p, cp end, Ev *ev) {
    ev->seen = 0;
    memset(&ev->flags, 0, sizeof(Flags));
    ev->ids.corr = ev->ids.ext = UNSET;
    ev->ids.ok = 1;
    ev->names.n = 0;
    ev->names.ok = 1;
    ev->tseen = 0;
    ev->tbad = 0;
    p = ws(p + 1, end);
    if (p < end && *p == '}') return p + 1;
    for (;;) {
        int esc;
        if (p >= end || *p != '"') return NULL;
        cp k = p + 1, ke = string(p, end, &esc);
        if (!ke || esc) return NULL;  /* an escaped key may spell a field's name */
        int id = key_of(k, (size_t)(ke - 1 - k));
        p = ws(ke, end);
        if (p >= end || *p != ':') return NULL;
        p = ws(p + 1, end);
        cp v = p;
        if (id < 0) {
            p = value(p, end, 1, 0, NULL);
        } else {
            if (ev->seen & (1u << id)) return NULL;  /* twice: msgspec keeps the last */
            ev->seen |= 1u << id;
            ev->esc[id] = 0;
            if (id == K_ARGS) p = args_value(p, end, ev);
            else if (*v == '"') p = string(p, end, &ev->esc[id]);
            else p = value(p, end, 1, !(id == K_TS || id == K_DUR), NULL);
            ev->at[id] = v;
            ev->to[id] = p;
        }
        if (!p) return NULL;
        p = ws(p, end);
        if (p >= end) return NULL;
        if (*p == '}') return p + 1;
        if (*p != ',') return NULL;
        p = ws(p + 1, end);
    }
}

/* A time's text -> exact ns; 0 if not a plain number of at most three decimals well
 * within int64 ns (numbers.py reads those the same from the digits). */
static int ns_of(cp p, cp e, int64_t *out) {
    Num n;
    cp q = number(p, e, &n);
    if (q != e || n.exp || n.frac > 3 || n.digits > 16) return 0;
    if (n.neg) p++;
    int64_t whole = 0, frac = 0;
    for (int i = 0; i < n.digits; i++) whole = whole * 10 + (*p++ - '0');
    if (whole >= 4000000000000000LL) return 0;  /* near the +-2**62 ns limit: numbers.py says */
    if (n.frac) {
        p++;
        for (int i = 0; i < n.frac; i++) frac = frac * 10 + (*p++ - '0');
        for (int i = n.frac; i < 3; i++) frac *= 10;
    }
    int64_t v = whole * 1000 + frac;
    *out = n.neg ? -v : v;
    return 1;
}

/* A pid/tid token usable as a key: a string, null, or an integer of <= 18 digits. */
static int id_token(Ev *ev, int k) {
    if (!(ev->seen & (1u << k))) return 1;
    cp p = ev->at[k];
    if (*p == '"' || *p == 'n') return 1;
    Num n;
    return number(p, ev->to[k], &n) == ev->to[k] && !n.frac && !n.exp;
}

static int phase(Ev *ev) {
    if (!(ev->seen & (1u << K_PH)) || *ev->at[K_PH] != '"' || ev->to[K_PH] - ev->at[K_PH] < 3) return P_OTHER;
    if (ev->esc[K_PH]) return -1;  /* escaped: the Python path */
    switch (ev->at[K_PH][1]) {
    case 'X': return P_X;
    case 'i': case 'I': return P_I;
    case 'B': return P_B;
    case 'E': return P_E;
    case 'C': return P_C;
    case 's': return P_S;
    case 't': return P_T;
    case 'f': return P_F;
    case 'M': return P_M;
    case 'b': return P_AB;
    case 'e': return P_AE;
    case 'n': return P_AN;
    default: return P_OTHER;
    }
}

/* ---------------------------------------------------------------- the tokenizer */
enum { C_PH, C_PID, C_TID, C_NAME, C_CAT, C_TS, C_DUR, C_ARGS, C_CORR, C_EXT,
       F_CAT, F_PID, F_TID, F_ID, F_PH, F_TS, F_ENC, R_IDX, R_TEXT, NBUF };
enum { T_PID, T_TID, T_STR };

typedef struct {
    PyObject_HEAD
    Table tables[3];
    int32_t epoch;
    Buf out[NBUF];
    Flags flags;  /* of the events' args in this slice */
    int ids_ok;
    Table names;  /* the args' names: this slice's are its pending keys */
    int names_ok;
    Names last[4];  /* the arg names of recent events of other names (most events repeat some) */
    int next_last;
    Take take;  /* the names taken (`take`) and, per name: */
    Table values[MAX_TAKE];  /* its distinct value texts; a code is its place among them (Entry.code) */
    Buf offs[MAX_TAKE];  /* each code's (arena offset, length) */
    Buf trow[MAX_TAKE], tcode[MAX_TAKE];  /* the events with it (int32 rows) and their codes (int32) */
    size_t tmark[MAX_TAKE];  /* trow's length before this slice (a slice not read: cut back to it) */
    int64_t rows;  /* events of the slices read so far: the first row of this slice's */
    int take_ok;  /* every event's args read exactly for the taken names, in every slice read */
    PyObject *take_names;  /* the tuple of str that `take` holds */
} Tok;

static const unsigned char EMPTY_STR[] = "\"\"", NULL_TOK[] = "null", NO_ARGS[] = "{}";

/* The code of field k (absent: `dflt`, n bytes) through table t. */
static int64_t code_of(Tok *s, Ev *ev, int k, int t, const unsigned char *dflt, size_t n) {
    if (ev->seen & (1u << k)) return lookup(&s->tables[t], ev->at[k], (size_t)(ev->to[k] - ev->at[k]), s->epoch);
    return lookup(&s->tables[t], dflt, n, s->epoch);
}

/* An event's arg names into this slice's (`s->names`): each name new to the slice
 * becomes one of its pending keys; 1, or -1 on memory error. */
static int arg_names(Tok *s, Names *nm) {
    if (!nm->ok) {
        s->names_ok = 0;
        return 1;
    }
    for (int r = 0; r < 4; r++) {
        Names *last = &s->last[r];
        int same = nm->n == last->n;
        for (int k = 0; same && k < nm->n; k++)
            same = nm->len[k] == last->len[k] && !memcmp(nm->at[k], last->at[k], nm->len[k]);
        if (same) return 1;  /* the names of a recent event: in the table already */
    }
    for (int k = 0; k < nm->n; k++)
        if (lookup(&s->names, nm->at[k], nm->len[k], s->epoch) == UNSET) return -1;
    Names *slot = &s->last[s->next_last];
    slot->n = nm->n;
    memcpy(slot->at, nm->at, (size_t)nm->n * sizeof(cp));
    memcpy(slot->len, nm->len, (size_t)nm->n * sizeof(uint32_t));
    s->next_last = (s->next_last + 1) & 3;
    return 1;
}

/* The code of a taken value: its place among the distinct texts of its name (a new one
 * appended); -1 on memory error. */
/* A taken value's hash, eight bytes at a time (values are longer than the codes' keys). */
static uint64_t hash_wide(cp s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ n, w;
    for (; n >= 8; s += 8, n -= 8) {
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
    }
    if (n) {
        w = 0;
        memcpy(&w, s, n);
        h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
    }
    return h ? h : 1;
}

static int64_t value_code(Tok *s, int k, cp v, size_t n) {
    Table *t = &s->values[k];
    if ((t->used + 1) * 2 > t->cap && table_grow(t)) return -1;
    uint64_t h = hash_wide(v, n);
    Entry *e = find(t, v, n, h);
    if (!e->hash) {
        e->hash = h;
        e->off = t->arena.len;
        e->len = (uint32_t)n;
        e->code = (int64_t)(s->offs[k].len / (2 * sizeof(size_t)));
        t->used++;
        size_t rec[2] = {e->off, n};
        if (put(&t->arena, v, n) || put(&s->offs[k], rec, sizeof(rec))) return -1;
    }
    return e->code;
}

/* The taken args of the event just written: its row and each value's code. 0, or -1 on
 * memory error. */
static int take_values(Tok *s, Ev *ev) {
    if (ev->tbad || !ev->names.ok) {  /* an escaped name may spell a taken one; repeated: the last counts */
        s->take_ok = 0;
        return 0;
    }
    int64_t row = s->rows + (int64_t)s->out[C_PH].len - 1;
    if (row > INT32_MAX) {
        s->take_ok = 0;
        return 0;
    }
    for (uint32_t m = ev->tseen; m; m &= m - 1) {
        int k = __builtin_ctz(m);
        int64_t code = value_code(s, k, ev->tat[k], (size_t)(ev->tto[k] - ev->tat[k]));
        if (code < 0 || code > INT32_MAX || put32(&s->trow[k], (int32_t)row) || put32(&s->tcode[k], (int32_t)code))
            return -1;
    }
    return 0;
}

/* 1: written; 0: not one we read (the Python path); -1: memory error. */
static int common(Tok *s, Ev *ev, int ph) {
    if (ev->seen & ((1u << K_BIND) | (1u << K_FIN) | (1u << K_FOUT))) return 0;  /* flows v2: flows.py */
    if (!id_token(ev, K_PID) || !id_token(ev, K_TID)) return 0;
    for (int k = K_NAME; k <= K_CAT; k++)
        if ((ev->seen & (1u << k)) && *ev->at[k] != '"') return 0;
    int64_t ts, dur = 0;
    if (!(ev->seen & (1u << K_TS)) || !ns_of(ev->at[K_TS], ev->to[K_TS], &ts)) return 0;
    if (ph == P_X && (ev->seen & (1u << K_DUR)) && !ns_of(ev->at[K_DUR], ev->to[K_DUR], &dur)) return 0;
    int64_t pid = code_of(s, ev, K_PID, T_PID, NULL_TOK, 4), tid = code_of(s, ev, K_TID, T_TID, NULL_TOK, 4);
    int64_t name = code_of(s, ev, K_NAME, T_STR, EMPTY_STR, 2), cat = code_of(s, ev, K_CAT, T_STR, EMPTY_STR, 2);
    if (pid == UNSET || tid == UNSET || name == UNSET || cat == UNSET) return -1;
    if (name > INT32_MAX || cat > INT32_MAX) return 0;
    Buf *o = s->out;
    if (o[C_ARGS].len && put(&o[C_ARGS], ",", 1)) return -1;
    int bad = put8(&o[C_PH], (int8_t)ph) || put64(&o[C_PID], pid) || put64(&o[C_TID], tid) ||
              put32(&o[C_NAME], (int32_t)name) || put32(&o[C_CAT], (int32_t)cat) || put64(&o[C_TS], ts) ||
              put64(&o[C_DUR], dur) || put64(&o[C_CORR], ev->ids.corr) || put64(&o[C_EXT], ev->ids.ext) ||
              ((ev->seen & (1u << K_ARGS)) ? put(&o[C_ARGS], ev->at[K_ARGS], (size_t)(ev->to[K_ARGS] - ev->at[K_ARGS]))
                                           : put(&o[C_ARGS], NO_ARGS, 2));
    s->flags.risky |= ev->flags.risky;
    s->flags.memory |= ev->flags.memory;
    s->flags.absent |= ev->flags.absent;
    s->ids_ok &= ev->ids.ok;
    if (bad) return -1;
    if (!(ev->seen & (1u << K_ARGS))) return 1;
    if (s->take.n && s->take_ok && (ev->tseen || !ev->names.ok) && take_values(s, ev) < 0) return -1;
    return arg_names(s, &ev->names);
}

/* A flow endpoint with a non-negative integer id (others: flows.py names them). */
static int flow(Tok *s, Ev *ev, int ph) {
    if (ev->seen & ((1u << K_BIND) | (1u << K_FIN) | (1u << K_FOUT) | (1u << K_ID2) | (1u << K_ARGS))) return 0;
    if (!(ev->seen & (1u << K_ID)) || !id_token(ev, K_PID) || !id_token(ev, K_TID)) return 0;
    if ((ev->seen & (1u << K_CAT)) && *ev->at[K_CAT] != '"') return 0;
    Num n;
    cp p = ev->at[K_ID];
    if (number(p, ev->to[K_ID], &n) != ev->to[K_ID] || n.neg || n.frac || n.exp || n.digits > 18) return 0;
    int64_t id = 0, ts;
    for (; p < ev->to[K_ID]; p++) id = id * 10 + (*p - '0');
    if (!(ev->seen & (1u << K_TS)) || !ns_of(ev->at[K_TS], ev->to[K_TS], &ts)) return 0;
    int8_t enclosing = ph != P_F;
    if (ph == P_F && (ev->seen & (1u << K_BP)) && *ev->at[K_BP] == '"') {
        if (ev->esc[K_BP]) return 0;
        enclosing = ev->to[K_BP] - ev->at[K_BP] == 3 && ev->at[K_BP][1] == 'e';
    }
    int64_t cat = code_of(s, ev, K_CAT, T_STR, EMPTY_STR, 2);
    int64_t pid = code_of(s, ev, K_PID, T_PID, NULL_TOK, 4), tid = code_of(s, ev, K_TID, T_TID, NULL_TOK, 4);
    if (pid == UNSET || tid == UNSET || cat == UNSET) return -1;
    Buf *o = s->out;
    int bad = put64(&o[F_CAT], cat) || put64(&o[F_PID], pid) || put64(&o[F_TID], tid) || put64(&o[F_ID], id) ||
              put8(&o[F_PH], (int8_t)ph) || put64(&o[F_TS], ts) || put8(&o[F_ENC], enclosing);
    return bad ? -1 : 1;
}

static int rare(Tok *s, cp start, cp stop, Py_ssize_t i) {
    Buf *t = &s->out[R_TEXT];
    return put64(&s->out[R_IDX], (int64_t)i) || put(t, t->len ? "," : "[", 1) || put(t, start, (size_t)(stop - start))
           ? -1 : 1;
}

/* 1: every event read; 0: the Python path; -1: memory error. *count: events. */
static int scan_events(Tok *s, cp p, cp end, Py_ssize_t *count) {
    Py_ssize_t i = 0;
    Ev ev;
    ev.take = &s->take;
    p = ws(p, end);
    if (p >= end) return 0;
    for (;;) {
        if (*p != '{') return 0;
        cp start = p;
        if (!(p = event(p, end, &ev))) return 0;
        int ph = phase(&ev), r;
        if (ph < 0) return 0;
        if (ph <= P_B) r = common(s, &ev, ph);
        else if (ph == P_S || ph == P_T || ph == P_F) r = flow(s, &ev, ph);
        else r = rare(s, start, p, i);
        if (r <= 0) return r;
        i++;
        p = ws(p, end);
        if (p >= end) break;
        if (*p != ',') return 0;
        p = ws(p + 1, end);
        if (p >= end) return 0;  /* a trailing comma: lenient.py repairs it */
    }
    if (s->out[R_TEXT].len && put(&s->out[R_TEXT], "]", 1)) return -1;
    *count = i;
    return 1;
}

static PyObject *pending_keys(Table *t) {
    size_t n = t->pending.len / (2 * sizeof(size_t));
    size_t *rec = (size_t *)t->pending.p;
    PyObject *out = PyList_New((Py_ssize_t)n);
    for (size_t k = 0; out && k < n; k++) {
        PyObject *b = PyBytes_FromStringAndSize(t->arena.p + rec[2 * k], (Py_ssize_t)rec[2 * k + 1]);
        if (!b) { Py_CLEAR(out); break; }
        PyList_SET_ITEM(out, (Py_ssize_t)k, b);
    }
    return out;
}

/* The buffers of what was taken, freed; nothing is taken any more (`taken` gave it). */
static void take_free(Tok *s) {
    for (int k = 0; k < MAX_TAKE; k++) {
        PyMem_Free(s->values[k].slots);
        PyMem_Free(s->values[k].arena.p);
        PyMem_Free(s->values[k].pending.p);
        PyMem_Free(s->offs[k].p);
        PyMem_Free(s->trow[k].p);
        PyMem_Free(s->tcode[k].p);
        memset(&s->values[k], 0, sizeof(Table));
        s->offs[k] = s->trow[k] = s->tcode[k] = (Buf){NULL, 0, 0};
    }
    s->take_ok = 0;
}

/* taken() -> None (nothing taken, or some event's args not read exactly), else (names,
 * per name (rows int32 bytes, codes int32 bytes, the distinct values' texts by code)).
 * Once: its buffers are freed (a big load's peak comes after). */
static PyObject *tok_taken(Tok *s, PyObject *unused) {
    if (!s->take.n || !s->take_ok) {
        take_free(s);
        Py_RETURN_NONE;
    }
    PyObject *per = PyTuple_New(s->take.n);
    for (int k = 0; per && k < s->take.n; k++) {
        size_t n = s->offs[k].len / (2 * sizeof(size_t));
        size_t *rec = (size_t *)s->offs[k].p;
        PyObject *values = PyList_New((Py_ssize_t)n);
        for (size_t j = 0; values && j < n; j++) {
            PyObject *b = PyBytes_FromStringAndSize(s->values[k].arena.p + rec[2 * j], (Py_ssize_t)rec[2 * j + 1]);
            if (!b) Py_CLEAR(values);
            else PyList_SET_ITEM(values, (Py_ssize_t)j, b);
        }
        const char *rows = s->trow[k].p ? s->trow[k].p : "", *codes = s->tcode[k].p ? s->tcode[k].p : "";
        PyObject *item = values ? Py_BuildValue("(y#y#N)", rows, (Py_ssize_t)s->trow[k].len, codes,
                                                (Py_ssize_t)s->tcode[k].len, values) : NULL;
        if (!item) Py_CLEAR(per);
        else PyTuple_SET_ITEM(per, k, item);
    }
    PyObject *out = per ? Py_BuildValue("(ON)", s->take_names, per) : NULL;
    take_free(s);
    return out;
}

/* take(names): the args called one of names (a tuple of at most MAX_TAKE str) taken from
 * every event read from now on (before the first scan). */
static PyObject *tok_take(Tok *s, PyObject *args) {
    PyObject *names;
    if (!PyArg_ParseTuple(args, "O!", &PyTuple_Type, &names)) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    if (s->take.n || n > MAX_TAKE) {
        PyErr_SetString(PyExc_ValueError, "take: once, at most 32 names");
        return NULL;
    }
    Take t;
    memset(&t, 0, sizeof(t));
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len;
        PyObject *name = PyTuple_GET_ITEM(names, i);
        const char *u = PyUnicode_Check(name) ? PyUnicode_AsUTF8AndSize(name, &len) : NULL;
        if (!u) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "take: names must be str");
            return NULL;
        }
        if (len > TAKE_LEN) {
            PyErr_SetString(PyExc_ValueError, "take: a name of more than 64 bytes");
            return NULL;
        }
        t.name[i] = u;  /* kept alive by s->take_names */
        t.len[i] = (size_t)len;
        t.by_len[len] |= 1u << i;
    }
    t.n = (int)n;
    Py_INCREF(names);
    Py_XSETREF(s->take_names, names);
    s->take = t;
    s->take_ok = 1;
    Py_RETURN_NONE;
}

static PyObject *tok_scan(Tok *s, PyObject *args) {
    Py_buffer view;
    Py_ssize_t stop;
    if (!PyArg_ParseTuple(args, "y*n", &view, &stop)) return NULL;
    if (stop < 0 || stop > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "stop out of range");
        return NULL;
    }
    s->epoch++;
    for (int t = 0; t < 3; t++) s->tables[t].pending.len = 0;
    s->names.pending.len = 0;
    s->names_ok = 1;
    for (int r = 0; r < 4; r++) s->last[r].n = -1;
    for (int b = 0; b < NBUF; b++) s->out[b].len = 0;
    memset(&s->flags, 0, sizeof(Flags));
    s->ids_ok = 1;
    for (int k = 0; k < s->take.n; k++) s->tmark[k] = s->trow[k].len;
    int take_was_ok = s->take_ok;
    Py_ssize_t count = 0;
    int r = scan_events(s, (cp)view.buf, (cp)view.buf + stop, &count);
    PyBuffer_Release(&view);
    if (r < 0) return PyErr_NoMemory();
    if (r == 0) {  /* not read: its events' taken args left out, as if never seen */
        for (int k = 0; k < s->take.n; k++) s->trow[k].len = s->tcode[k].len = s->tmark[k];
        s->take_ok = take_was_ok;
        Py_RETURN_NONE;
    }
    s->rows += (Py_ssize_t)s->out[C_PH].len;
    if (s->rows > INT32_MAX) s->take_ok = 0;  /* rows past int32: nothing taken (taken.py looks up int32 rows) */
    PyObject *res = PyTuple_New(NBUF + 4);
    if (!res) return NULL;
    PyTuple_SET_ITEM(res, 0, PyLong_FromSsize_t(count));
    for (int b = 0; b < NBUF; b++) {
        Buf *o = &s->out[b];
        PyTuple_SET_ITEM(res, b + 1, b == C_ARGS || b == R_TEXT ? PyBytes_FromStringAndSize(o->p, (Py_ssize_t)o->len)
                                                                 : PyByteArray_FromStringAndSize(o->p, (Py_ssize_t)o->len));
    }
    PyObject *keys = PyTuple_New(3);
    if (keys)
        for (int t = 0; t < 3; t++) PyTuple_SET_ITEM(keys, t, pending_keys(&s->tables[t]));
    PyTuple_SET_ITEM(res, NBUF + 1, keys);
    PyTuple_SET_ITEM(res, NBUF + 2, Py_BuildValue("(iii)", s->ids_ok && !s->flags.absent, s->flags.risky,
                                                  s->flags.memory));
    PyObject *names = Py_None;
    if (s->names_ok) names = pending_keys(&s->names);
    else Py_INCREF(names);
    PyTuple_SET_ITEM(res, NBUF + 3, names);
    for (Py_ssize_t k = 0; k < NBUF + 4; k++) {
        PyObject *x = PyTuple_GET_ITEM(res, k);
        if (!x || (k == NBUF + 1 && (!PyTuple_GET_ITEM(x, 0) || !PyTuple_GET_ITEM(x, 1) || !PyTuple_GET_ITEM(x, 2)))) {
            Py_DECREF(res);
            return NULL;
        }
    }
    return res;
}

static PyObject *tok_learn(Tok *s, PyObject *args) {
    int t;
    Py_buffer codes;
    if (!PyArg_ParseTuple(args, "iy*", &t, &codes)) return NULL;
    Table *tab = t >= 0 && t < 3 ? &s->tables[t] : NULL;
    size_t n = tab ? tab->pending.len / (2 * sizeof(size_t)) : 0;
    if (!tab || (size_t)codes.len != n * 8) {
        PyBuffer_Release(&codes);
        PyErr_SetString(PyExc_ValueError, "learn: one int64 code per pending key of table 0, 1 or 2");
        return NULL;
    }
    size_t *rec = (size_t *)tab->pending.p;
    for (size_t k = 0; k < n; k++) {
        cp key = (cp)tab->arena.p + rec[2 * k];
        Entry *e = find(tab, key, rec[2 * k + 1], hash_of(key, rec[2 * k + 1]));
        memcpy(&e->code, (char *)codes.buf + 8 * k, 8);
    }
    tab->pending.len = 0;
    PyBuffer_Release(&codes);
    Py_RETURN_NONE;
}

static void tok_dealloc(Tok *s) {
    for (int t = 0; t < 3; t++) {
        PyMem_Free(s->tables[t].slots);
        PyMem_Free(s->tables[t].arena.p);
        PyMem_Free(s->tables[t].pending.p);
    }
    for (int b = 0; b < NBUF; b++) PyMem_Free(s->out[b].p);
    PyMem_Free(s->names.slots);
    PyMem_Free(s->names.arena.p);
    PyMem_Free(s->names.pending.p);
    take_free(s);
    Py_XDECREF(s->take_names);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyMethodDef tok_methods[] = {
    {"scan", (PyCFunction)tok_scan, METH_VARARGS,
     "scan(text, stop) -> tuple | None: the events of text[:stop] as columns (tokenized.py reads the "
     "tuple; its last item: the args' names as a list of UTF-8 bytes, or None); None where the Python path "
     "must read this slice."},
    {"take", (PyCFunction)tok_take, METH_VARARGS,
     "take(names): the args called one of names (tuple of str, at most 32) taken from every event read from "
     "now on (taken() gives them)."},
    {"taken", (PyCFunction)tok_taken, METH_NOARGS,
     "taken() -> (names, per name (rows int32 bytes, codes int32 bytes, distinct values' texts by code)) | None: "
     "the args taken from the slices read (None: none asked for, or some event's args not read exactly); once: "
     "then None."},
    {"learn", (PyCFunction)tok_learn, METH_VARARGS,
     "learn(table, codes): the codes (int64 bytes) of the last scan's new keys of table 0 (pid), 1 (tid) "
     "or 2 (strings), in order."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject TokType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "polyprof.formats.kineto._tokens.Tokenizer",
    .tp_basicsize = sizeof(Tok),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)tok_dealloc,
    .tp_methods = tok_methods,
    .tp_doc = "The tables and buffers of one file's tokenizing (one per reader).",
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_tokens", "Slices of Kineto traceEvents -> event columns, in C.", -1, NULL,
};

PyMODINIT_FUNC PyInit__tokens(void) {
    for (int c = 0; c < 256; c++) STOP[c] = c == '"' || c == '\\' || c < 0x20 || c >= 0x80;
    if (PyType_Ready(&TokType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    Py_INCREF(&TokType);
    if (PyModule_AddObject(m, "Tokenizer", (PyObject *)&TokType) < 0) {
        Py_DECREF(&TokType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
