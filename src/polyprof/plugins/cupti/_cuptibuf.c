/* CUPTI activity buffers kept as bytes, walked in C: no Python object per record.
 *
 * CUPTI asks its client for empty buffers and hands them back full (the two callbacks
 * of cuptiActivityRegisterCallbacks). cupti-python's own registration turns every
 * record of a full buffer into a Python object before the client sees it; this module
 * registers two C callbacks instead, with the libcupti that cupti-python loaded (its
 * functions' addresses come from Python, see buffers.py), so a completed buffer costs
 * one walk with cuptiActivityGetNextRecord, without the GIL:
 *
 *   - the buffer is kept as it is (its valid bytes), less the runtime and driver calls
 *     configured as not kept (calls that only query state: counted, with their time,
 *     and their bytes moved out so the buffer shrinks);
 *   - each record's offset and kind go to two growing arrays;
 *   - the strings a record points to (a kernel's name, an NVTX marker's name and
 *     domain) are copied into the batch's arena while CUPTI keeps them alive; the
 *     record's string slots hold the arena offsets (-1: a NULL pointer). A kind's
 *     strings may be cached by pointer within one buffer (kernel names are shared by
 *     every launch of a kernel; NVTX names are not, and are copied each time).
 *
 * take() hands the batches to Python as bytes and frees them; collect() decodes them
 * (decode.py) with NumPy. The fake CUPTI of tests/test_cupti.py drives the same two
 * callbacks through request_address()/complete_address(), with a walker of its own.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef void (*RequestFn)(uint8_t **buffer, size_t *size, size_t *max_records);
typedef void (*CompleteFn)(void *ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid);
typedef int (*RegisterFn)(RequestFn, CompleteFn);
typedef int (*NextFn)(uint8_t *buffer, size_t valid, void **record);
typedef int (*DroppedFn)(void *ctx, uint32_t stream, size_t *dropped);

#define MAX_KIND 128
#define ERROR_MAX_LIMIT_REACHED 12 /* CUPTI_ERROR_MAX_LIMIT_REACHED: the end of a buffer's records */
#define CACHE_SLOTS 512
#define KIND_DRIVER 4
#define KIND_RUNTIME 5
#define MAX_CBID 4096 /* the callback ids of cupti_runtime_cbid.h / cupti_driver_cbid.h are below */

typedef struct Batch {
    struct Batch *next;
    uint8_t *buf;
    size_t valid;
    int64_t *offs;
    int32_t *kinds;
    int64_t *strs; /* two per record */
    size_t n, cap;
    char *arena;
    size_t alen, acap;
    int failed; /* out of memory while walking: the batch keeps what it had */
} Batch;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static Batch *head = NULL, *tail = NULL;
static NextFn next_fn = NULL;
static DroppedFn dropped_fn = NULL;
static size_t buffer_bytes = 8u << 20;
static int32_t str_off[MAX_KIND][2];
static int str_cache[MAX_KIND];
static uint64_t n_requested = 0, n_completed = 0, n_records = 0, n_dropped = 0, n_request_failed = 0,
                n_walk_failed = 0, n_bytes = 0, n_not_kept = 0;
/* calls not kept: [0] driver, [1] runtime, by callback id; their count and time */
static uint8_t not_kept[2][MAX_CBID];
static int any_not_kept = 0; /* whether not_kept names any call: else no counting per buffer */
static uint64_t not_kept_count[2][MAX_CBID], not_kept_ns[2][MAX_CBID];

static int api_slot(int32_t kind) { return kind == KIND_DRIVER ? 0 : kind == KIND_RUNTIME ? 1 : -1; }

/* Move the kept records (kinds[i] >= 0) of a walked buffer to its front, in order, with
 * their offsets and string slots, and shrink the buffer to them. Each record runs to the
 * next one's offset (the last to the buffer's valid end): the padding goes with it. */
static void compact(Batch *b) {
    size_t w = 0, k = 0;
    for (size_t i = 0; i < b->n; i++) {
        size_t off = (size_t)b->offs[i];
        size_t end = i + 1 < b->n ? (size_t)b->offs[i + 1] : b->valid;
        if (b->kinds[i] < 0) continue;
        if (w != off) memmove(b->buf + w, b->buf + off, end - off);
        b->offs[k] = (int64_t)w;
        b->kinds[k] = b->kinds[i];
        b->strs[2 * k] = b->strs[2 * i];
        b->strs[2 * k + 1] = b->strs[2 * i + 1];
        w += end - off;
        k++;
    }
    b->n = k;
    b->valid = w;
    uint8_t *smaller = realloc(b->buf, w ? w : 8);
    if (smaller) b->buf = smaller;
    if (k) { /* the record arrays too: a failed shrink keeps the larger block */
        int64_t *o = realloc(b->offs, k * sizeof(int64_t));
        if (o) b->offs = o;
        int32_t *t = realloc(b->kinds, k * sizeof(int32_t));
        if (t) b->kinds = t;
        int64_t *st = realloc(b->strs, k * 2 * sizeof(int64_t));
        if (st) b->strs = st;
        b->cap = k;
    }
}

static void on_request(uint8_t **buffer, size_t *size, size_t *max_records) {
    void *p = NULL;
    if (posix_memalign(&p, 8, buffer_bytes) != 0) p = NULL;
    pthread_mutex_lock(&lock);
    n_requested++;
    if (!p) n_request_failed++;
    pthread_mutex_unlock(&lock);
    *buffer = (uint8_t *)p;
    *size = p ? buffer_bytes : 0;
    *max_records = 0;
}

static int grow(Batch *b) {
    size_t cap = b->cap ? b->cap * 2 : 4096;
    int64_t *o = realloc(b->offs, cap * sizeof(int64_t));
    if (!o) return -1;
    b->offs = o;
    int32_t *k = realloc(b->kinds, cap * sizeof(int32_t));
    if (!k) return -1;
    b->kinds = k;
    int64_t *s = realloc(b->strs, cap * 2 * sizeof(int64_t));
    if (!s) return -1;
    b->strs = s;
    b->cap = cap;
    return 0;
}

static int64_t copy_string(Batch *b, const char *p) {
    size_t len = strlen(p) + 1;
    if (b->alen + len > b->acap) {
        size_t cap = b->acap ? b->acap : 4096;
        while (cap < b->alen + len) cap *= 2;
        char *a = realloc(b->arena, cap);
        if (!a) return -1;
        b->arena = a;
        b->acap = cap;
    }
    memcpy(b->arena + b->alen, p, len);
    int64_t at = (int64_t)b->alen;
    b->alen += len;
    return at;
}

typedef struct {
    const char *ptr;
    int64_t at;
} Slot;

static int64_t cached_string(Batch *b, Slot *cache, const char *p) {
    size_t h = ((uintptr_t)p >> 3) * 2654435761u % CACHE_SLOTS;
    for (size_t i = 0; i < CACHE_SLOTS; i++) {
        Slot *s = &cache[(h + i) % CACHE_SLOTS];
        if (s->ptr == p) return s->at;
        if (s->ptr == NULL) {
            int64_t at = copy_string(b, p);
            if (at >= 0) {
                s->ptr = p;
                s->at = at;
            }
            return at;
        }
    }
    return copy_string(b, p); /* the cache is full: copy */
}

static void on_complete(void *ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)size;
    Batch *b = calloc(1, sizeof(Batch));
    if (!b) {
        free(buffer);
        pthread_mutex_lock(&lock);
        n_completed++;
        n_walk_failed++;
        pthread_mutex_unlock(&lock);
        return;
    }
    b->buf = buffer;
    b->valid = buffer ? valid : 0;
    Slot *cache = calloc(CACHE_SLOTS, sizeof(Slot));
    void *rec = NULL;
    /* this buffer's calls not kept (count, then time, per callback id), added to the
     * totals under the lock; with none configured, or without the memory, every call is kept */
    uint64_t (*counted)[2][MAX_CBID] = any_not_kept ? calloc(2, sizeof *counted) : NULL;
    size_t skipped = 0;
    NextFn next = next_fn;
    if (b->valid && next) {
        int rc;
        while ((rc = next(buffer, b->valid, &rec)) == 0 && rec) {
            if (b->n == b->cap && grow(b) != 0) {
                b->failed = 1;
                break;
            }
            uint8_t *r = (uint8_t *)rec;
            int32_t kind;
            memcpy(&kind, r, sizeof kind);
            b->offs[b->n] = (int64_t)(r - buffer);
            b->kinds[b->n] = kind;
            int64_t *slots = b->strs + 2 * b->n;
            slots[0] = slots[1] = -1;
            int api = api_slot(kind);
            uint32_t cbid = 0;
            if (api >= 0) memcpy(&cbid, r + 4, sizeof cbid);
            if (api >= 0 && cbid < MAX_CBID && not_kept[api][cbid] && counted) {
                uint64_t start, end;
                memcpy(&start, r + 8, sizeof start);
                memcpy(&end, r + 16, sizeof end);
                counted[0][api][cbid]++;
                counted[1][api][cbid] += end > start ? end - start : 0;
                b->kinds[b->n] = -1; /* moved out by compact() */
                skipped++;
            } else if (kind >= 0 && kind < MAX_KIND) {
                for (int j = 0; j < 2; j++) {
                    int32_t off = str_off[kind][j];
                    if (off < 0) continue;
                    const char *p;
                    memcpy(&p, r + off, sizeof p);
                    if (p) slots[j] = (str_cache[kind] && cache) ? cached_string(b, cache, p) : copy_string(b, p);
                }
            }
            b->n++;
        }
        if (rc != 0 && rc != ERROR_MAX_LIMIT_REACHED) b->failed = 1; /* e.g. a kind this CUPTI cannot size */
    }
    free(cache);
    if (skipped) compact(b);
    size_t dropped = 0;
    if (dropped_fn && dropped_fn(ctx, stream, &dropped) != 0) dropped = 0;
    pthread_mutex_lock(&lock);
    n_completed++;
    n_records += b->n;
    n_bytes += b->valid;
    n_dropped += dropped;
    if (b->failed) n_walk_failed++;
    if (skipped) {
        n_not_kept += skipped;
        for (int a = 0; a < 2; a++)
            for (int c = 0; c < MAX_CBID; c++)
                if (counted[0][a][c]) {
                    not_kept_count[a][c] += counted[0][a][c];
                    not_kept_ns[a][c] += counted[1][a][c];
                }
    }
    if (tail) tail->next = b;
    else head = b;
    tail = b;
    pthread_mutex_unlock(&lock);
    free(counted);
}

static void free_batch(Batch *b) {
    free(b->buf);
    free(b->offs);
    free(b->kinds);
    free(b->strs);
    free(b->arena);
    free(b);
}

static Batch *detach(void) {
    pthread_mutex_lock(&lock);
    Batch *b = head;
    head = tail = NULL;
    pthread_mutex_unlock(&lock);
    return b;
}

/* configure(next_address, dropped_address, buffer_bytes, string_fields, calls_not_kept)
 * string_fields: sequence of (kind, offset, offset2, cache) with -1 for no second field;
 * calls_not_kept: sequence of (kind, cbid), kind 4 (driver) or 5 (runtime) */
static PyObject *configure(PyObject *self, PyObject *args) {
    unsigned long long next_addr, dropped_addr;
    Py_ssize_t nbytes;
    PyObject *table, *skip = NULL;
    if (!PyArg_ParseTuple(args, "KKnO|O", &next_addr, &dropped_addr, &nbytes, &table, &skip)) return NULL;
    static uint8_t skip_table[2][MAX_CBID];
    memset(skip_table, 0, sizeof skip_table);
    int any = 0;
    if (skip) {
        PyObject *calls = PySequence_Fast(skip, "calls_not_kept must be a sequence");
        if (!calls) return NULL;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(calls); i++) {
            int kind, cbid;
            if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(calls, i), "ii", &kind, &cbid)) {
                Py_DECREF(calls);
                return NULL;
            }
            if (api_slot(kind) < 0 || cbid < 0 || cbid >= MAX_CBID) {
                Py_DECREF(calls);
                PyErr_Format(PyExc_ValueError, "calls_not_kept: (%d, %d) is not a driver or runtime callback id", kind,
                             cbid);
                return NULL;
            }
            skip_table[api_slot(kind)][cbid] = 1;
            any = 1;
        }
        Py_DECREF(calls);
    }
    if (nbytes < 4096 || nbytes % 8) {
        PyErr_SetString(PyExc_ValueError, "buffer_bytes must be a multiple of 8, at least 4096");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(table, "string_fields must be a sequence");
    if (!seq) return NULL;
    int32_t offs[MAX_KIND][2];
    int cache[MAX_KIND];
    for (int k = 0; k < MAX_KIND; k++) offs[k][0] = offs[k][1] = -1, cache[k] = 0;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        int kind, o1, o2, c;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "iiip", &kind, &o1, &o2, &c)) {
            Py_DECREF(seq);
            return NULL;
        }
        if (kind < 0 || kind >= MAX_KIND) {
            Py_DECREF(seq);
            PyErr_Format(PyExc_ValueError, "activity kind %d out of range", kind);
            return NULL;
        }
        offs[kind][0] = o1;
        offs[kind][1] = o2;
        cache[kind] = c;
    }
    Py_DECREF(seq);
    pthread_mutex_lock(&lock);
    next_fn = (NextFn)(uintptr_t)next_addr;
    dropped_fn = (DroppedFn)(uintptr_t)dropped_addr;
    buffer_bytes = (size_t)nbytes;
    memcpy(str_off, offs, sizeof offs);
    memcpy(str_cache, cache, sizeof cache);
    memcpy(not_kept, skip_table, sizeof not_kept);
    any_not_kept = any;
    pthread_mutex_unlock(&lock);
    Py_RETURN_NONE;
}

/* register_callbacks(register_address) -> CUptiResult of cuptiActivityRegisterCallbacks */
static PyObject *register_callbacks(PyObject *self, PyObject *args) {
    unsigned long long addr;
    if (!PyArg_ParseTuple(args, "K", &addr)) return NULL;
    if (!addr) {
        PyErr_SetString(PyExc_ValueError, "no cuptiActivityRegisterCallbacks address");
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ((RegisterFn)(uintptr_t)addr)(on_request, on_complete);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(rc);
}

static PyObject *request_address(PyObject *self, PyObject *noargs) {
    return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)on_request);
}

static PyObject *complete_address(PyObject *self, PyObject *noargs) {
    return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)on_complete);
}

/* take() -> list of (records, offsets, kinds, strings, arena): the completed buffers
 * as bytes (offsets int64, kinds int32, strings int64 pairs), oldest first; freed here */
static PyObject *take(PyObject *self, PyObject *noargs) {
    Batch *b = detach();
    PyObject *out = PyList_New(0);
    while (b) {
        Batch *next = b->next;
        if (out) {
            /* y# makes None of a NULL pointer: an empty buffer (or one with no records) has some */
            PyObject *t = Py_BuildValue("(y#y#y#y#y#)", b->buf ? (const char *)b->buf : "", (Py_ssize_t)b->valid,
                                        b->offs ? (const char *)b->offs : "", (Py_ssize_t)(b->n * sizeof(int64_t)),
                                        b->kinds ? (const char *)b->kinds : "", (Py_ssize_t)(b->n * sizeof(int32_t)),
                                        b->strs ? (const char *)b->strs : "", (Py_ssize_t)(b->n * 2 * sizeof(int64_t)),
                                        b->arena ? b->arena : "", (Py_ssize_t)b->alen);
            if (!t || PyList_Append(out, t) != 0) Py_CLEAR(out);
            Py_XDECREF(t);
        }
        free_batch(b);
        b = next;
    }
    return out;
}

static PyObject *discard(PyObject *self, PyObject *noargs) {
    Batch *b = detach();
    while (b) {
        Batch *next = b->next;
        free_batch(b);
        b = next;
    }
    Py_RETURN_NONE;
}

static PyObject *counts(PyObject *self, PyObject *noargs) {
    pthread_mutex_lock(&lock);
    PyObject *d = Py_BuildValue("{sKsKsKsKsKsKsKsK}", "calls_not_kept", (unsigned long long)n_not_kept,
                                "buffers_requested", (unsigned long long)n_requested,
                                "buffers_completed", (unsigned long long)n_completed, "records",
                                (unsigned long long)n_records, "dropped", (unsigned long long)n_dropped,
                                "buffers_not_allocated", (unsigned long long)n_request_failed, "walks_cut_short",
                                (unsigned long long)n_walk_failed, "bytes", (unsigned long long)n_bytes);
    pthread_mutex_unlock(&lock);
    return d;
}

/* calls_not_kept() -> list of (kind, cbid, count, total ns) of the calls not kept */
static PyObject *calls_not_kept(PyObject *self, PyObject *noargs) {
    PyObject *out = PyList_New(0);
    pthread_mutex_lock(&lock);
    for (int a = 0; a < 2 && out; a++)
        for (int c = 0; c < MAX_CBID && out; c++) {
            if (!not_kept_count[a][c]) continue;
            PyObject *t = Py_BuildValue("(iiKK)", a ? KIND_RUNTIME : KIND_DRIVER, c,
                                        (unsigned long long)not_kept_count[a][c], (unsigned long long)not_kept_ns[a][c]);
            if (!t || PyList_Append(out, t) != 0) Py_CLEAR(out);
            Py_XDECREF(t);
        }
    pthread_mutex_unlock(&lock);
    return out;
}

static PyObject *reset_counts(PyObject *self, PyObject *noargs) {
    pthread_mutex_lock(&lock);
    n_requested = n_completed = n_records = n_dropped = n_request_failed = n_walk_failed = n_bytes = n_not_kept = 0;
    memset(not_kept_count, 0, sizeof not_kept_count);
    memset(not_kept_ns, 0, sizeof not_kept_ns);
    pthread_mutex_unlock(&lock);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(next_address, dropped_address, buffer_bytes, string_fields[, calls_not_kept])"},
    {"register_callbacks", register_callbacks, METH_VARARGS,
     "register_callbacks(address of cuptiActivityRegisterCallbacks) -> CUptiResult"},
    {"request_address", request_address, METH_NOARGS, "address of the buffer-requested callback"},
    {"complete_address", complete_address, METH_NOARGS, "address of the buffer-completed callback"},
    {"take", take, METH_NOARGS, "the completed buffers as bytes, oldest first (and free them)"},
    {"discard", discard, METH_NOARGS, "free the completed buffers"},
    {"counts", counts, METH_NOARGS, "buffers requested/completed, records, dropped records, bytes"},
    {"calls_not_kept", calls_not_kept, METH_NOARGS, "(kind, cbid, count, total ns) of each call not kept"},
    {"reset_counts", reset_counts, METH_NOARGS, "zero the counts"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cuptibuf",
                                    "CUPTI activity buffers walked in C (see buffers.py)", -1, methods};

PyMODINIT_FUNC PyInit__cuptibuf(void) { return PyModule_Create(&module); }
