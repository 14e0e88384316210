/* NumPy's large arrays, during a big load, made from pages the load already holds.
 *
 * A NumPy data-memory handler (PyDataMem_SetHandler, NumPy >= 1.22) that lowlevel/heap.py
 * installs only around a reader's call (``heap.reusing_freed_pages``). Without it, every
 * array of 32 MB or more (glibc's largest mmap threshold) is a fresh mapping that the
 * kernel faults in and zeroes, and takes back when the array is freed: at 50M events a
 * load's columns and temporaries are ~480 B of new memory per event, and the kernel's
 * share of the load grows with the trace (docs/benchmarks.md, "Linear growth to 50M
 * trace events").
 *
 * Requests of at least ``min_block`` bytes are mappings of their own (whole pages, their
 * address page-aligned, listed in ``live``). Freed while a load runs, such a mapping is
 * kept (up to ``limit`` bytes in all). A later request takes the smallest kept block that
 * holds it (the rest of that block stays kept), or, when none does, a fresh reservation
 * is filled with the largest kept blocks, moved into it by mremap (their pages move,
 * resident, without a copy or a fault), and only the rest is faulted in new. So what is
 * resident is never more than what is live plus what is kept, and what is kept was
 * live: the peak does not grow. ``release()`` unmaps every kept block (at the load's
 * end, and where the reader trims the heap). Smaller requests, and reallocations of
 * blocks that are not ours, go to NumPy's default handler, unchanged.
 *
 * An array keeps its handler for life, so blocks made during a load are freed here after
 * the handler is removed: with no load running they are unmapped at once. One mutex
 * guards the lists: NumPy may free from any thread.
 *
 * Built without NumPy's headers (so without NumPy at build time): the handler's layout
 * (version 1) and the three entries of NumPy's C API table used here are NumPy's stable
 * ABI, looked up at import as NumPy's own import_array() does; a NumPy older than 1.22
 * (no handlers) makes the import fail, and heap.py does without.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MREMAP_MAYMOVE
#define MREMAP_MAYMOVE 1
#endif
#ifndef MREMAP_FIXED
#define MREMAP_FIXED 2
#endif

#define MAX_BLOCKS 4096
#define MAX_SIZE ((size_t)1 << 60)

typedef struct { char *addr; size_t len; } block;

/* NumPy's PyDataMemAllocator and PyDataMem_Handler (version 1), numpy/ndarraytypes.h */
typedef struct {
    void *ctx;
    void *(*malloc)(void *ctx, size_t size);
    void *(*calloc)(void *ctx, size_t nelem, size_t elsize);
    void *(*realloc)(void *ctx, void *ptr, size_t new_size);
    void (*free)(void *ctx, void *ptr, size_t size);
} PyDataMemAllocator;

typedef struct {
    char name[127];
    uint8_t version;
    PyDataMemAllocator allocator;
} PyDataMem_Handler;

/* entries of NumPy's C API table (numpy/__multiarray_api.h) */
#define API_FEATURE_VERSION 211  /* unsigned int PyArray_GetNDArrayCFeatureVersion(void) */
#define API_SET_HANDLER 304      /* PyObject *PyDataMem_SetHandler(PyObject *) */
#define API_DEFAULT_HANDLER 306  /* PyObject *PyDataMem_DefaultHandler */
#define NUMPY_1_22_API 0x0000000f
static PyObject *(*set_handler)(PyObject *) = NULL;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static block live[MAX_BLOCKS];  /* our mappings in use by arrays */
static block kept[MAX_BLOCKS];  /* our mappings freed, kept for reuse */
static size_t n_live = 0, n_kept = 0, kept_bytes = 0;
static size_t limit = 0;               /* bytes kept at most */
static size_t min_block = 8 << 20;     /* requests at least this big are our mappings */
static int loads = 0;                  /* installs in force (nested loads) */
static size_t page = 4096;
static PyDataMemAllocator *dflt = NULL; /* NumPy's default handler's functions */
/* what the tests and the benchmark read */
static unsigned long long n_reused = 0, n_fresh = 0, n_moved = 0, n_dropped = 0;
static unsigned long long bytes_reused = 0, bytes_fresh = 0, n_split_moves = 0, n_copied = 0;
static size_t kept_peak = 0; /* the most bytes kept at once */

static size_t round_page(size_t n) { return (n + page - 1) & ~(page - 1); }

static void drop(block *list, size_t *n, size_t i)
{
    list[i] = list[--*n];
}

/* A freed mapping: kept while a load runs and there is room, else unmapped. */
static void keep(char *addr, size_t len)
{
    if (loads && n_kept < MAX_BLOCKS && kept_bytes + len <= limit) {
        kept[n_kept].addr = addr;
        kept[n_kept].len = len;
        n_kept++;
        kept_bytes += len;
        if (kept_bytes > kept_peak) kept_peak = kept_bytes;
    } else {
        munmap(addr, len);
        n_dropped++;
    }
}

static void drop_kept(size_t i)
{
    kept_bytes -= kept[i].len;
    drop(kept, &n_kept, i);
}

/* Move the resident pages of [src, src + len) to dst (both page-aligned). One mremap when
 * the range is one mapping; a block assembled from moved parts is several, which mremap
 * cannot move at once on every kernel: then each half, down to single mappings. Pages
 * that cannot be moved are unmapped (dst's are then faulted in new). */
static void move_pages(char *src, size_t len, char *dst, int depth)
{
    if (mremap(src, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, dst) != MAP_FAILED) return;
    n_split_moves++;
    size_t half = (len / 2) & ~(page - 1);
    if (half == 0 || depth >= 48) {
        munmap(src, len);
        return;
    }
    move_pages(src, half, dst, depth + 1);
    move_pages(src + half, len - half, dst + half, depth + 1);
}

/* len bytes (whole pages), kept pages first; NULL on failure. *reused: whether any
 * kept page was used. Holds the lock. */
static char *take(size_t len, int *reused)
{
    size_t best = (size_t)-1;
    *reused = 0;
    for (size_t i = 0; i < n_kept; i++)
        if (kept[i].len >= len && (best == (size_t)-1 || kept[i].len < kept[best].len)) best = i;
    if (best != (size_t)-1) {
        char *a = kept[best].addr;
        size_t blen = kept[best].len;
        drop_kept(best);
        if (blen > len) keep(a + len, blen - len);  /* the rest stays kept */
        n_reused++;
        bytes_reused += len;
        *reused = 1;
        return a;
    }
    char *dst = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (dst == MAP_FAILED) return NULL;
    size_t filled = 0;
    while (n_kept && filled < len) { /* the largest kept blocks moved in, resident */
        size_t big = 0;
        for (size_t i = 1; i < n_kept; i++)
            if (kept[i].len > kept[big].len) big = i;
        char *a = kept[big].addr;
        size_t blen = kept[big].len, part = blen < len - filled ? blen : len - filled;
        drop_kept(big);
        move_pages(a, part, dst + filled, 0);
        if (blen > part) keep(a + part, blen - part);
        filled += part;
        n_moved++;
    }
    if (filled) *reused = 1;
    bytes_reused += filled;
    bytes_fresh += len - filled;
    n_fresh++;
    return dst;
}

/* Our mapping for size bytes, or NULL (then NumPy's default handler makes it). */
static void *big_alloc(size_t size, int zero)
{
    size_t len = round_page(size);
    int reused = 0;
    char *p = NULL;
    pthread_mutex_lock(&lock);
    if (n_live < MAX_BLOCKS) {
        p = take(len, &reused);
        if (p != NULL) {
            live[n_live].addr = p;
            live[n_live].len = len;
            n_live++;
        }
    }
    pthread_mutex_unlock(&lock);
    if (p != NULL && zero && reused) memset(p, 0, size);  /* moved pages hold old data */
    return p;
}

/* The index of ptr among our live mappings, or -1 (only page-aligned pointers can be
 * ours: malloc's never are). Holds the lock. */
static Py_ssize_t find_live(void *ptr)
{
    if (((uintptr_t)ptr & (page - 1)) != 0) return -1;
    for (size_t i = 0; i < n_live; i++)
        if (live[i].addr == ptr) return (Py_ssize_t)i;
    return -1;
}

static void *hc_malloc(void *ctx, size_t size)
{
    (void)ctx;
    if (size >= min_block && size <= MAX_SIZE) {
        void *p = big_alloc(size, 0);
        if (p != NULL) return p;
    }
    return dflt->malloc(dflt->ctx, size);
}

static void *hc_calloc(void *ctx, size_t n, size_t elsize)
{
    (void)ctx;
    if (elsize && n <= MAX_SIZE / elsize && n * elsize >= min_block) {
        void *p = big_alloc(n * elsize, 1);
        if (p != NULL) return p;
    }
    return dflt->calloc(dflt->ctx, n, elsize);
}

static void hc_free(void *ctx, void *ptr, size_t size)
{
    (void)ctx;
    if (ptr == NULL) return;
    pthread_mutex_lock(&lock);
    Py_ssize_t i = find_live(ptr);
    if (i >= 0) {
        size_t len = live[i].len;
        drop(live, &n_live, (size_t)i);
        keep((char *)ptr, len);
        pthread_mutex_unlock(&lock);
        return;
    }
    pthread_mutex_unlock(&lock);
    dflt->free(dflt->ctx, ptr, size);
}

static void *hc_realloc(void *ctx, void *ptr, size_t size)
{
    if (ptr == NULL) return hc_malloc(ctx, size);
    pthread_mutex_lock(&lock);
    Py_ssize_t i = find_live(ptr);
    if (i < 0) {
        pthread_mutex_unlock(&lock);
        return dflt->realloc(dflt->ctx, ptr, size);  /* not ours: NumPy's, as it was made */
    }
    size_t len = live[i].len, want = round_page(size ? size : 1);
    if (want == len || size > MAX_SIZE) {
        pthread_mutex_unlock(&lock);
        return size > MAX_SIZE ? NULL : ptr;
    }
    char *p = mremap(ptr, len, want, MREMAP_MAYMOVE);
    if (p != MAP_FAILED) {
        live[i].addr = p;
        live[i].len = want;
        pthread_mutex_unlock(&lock);
        return p;
    }
    pthread_mutex_unlock(&lock);
    /* several mappings (a block assembled from moved parts): a new block, copied */
    p = hc_malloc(ctx, size);
    if (p == NULL) return NULL;
    memcpy(p, ptr, len < size ? len : size);
    hc_free(ctx, ptr, len);
    pthread_mutex_lock(&lock);
    n_copied++;
    pthread_mutex_unlock(&lock);
    return p;
}

static PyDataMem_Handler handler = {
    "polyprof_reuse_freed_pages",
    1,
    {NULL, hc_malloc, hc_calloc, hc_realloc, hc_free},
};

static PyObject *capsule = NULL;

static void release_all(void)
{
    while (n_kept) {
        munmap(kept[n_kept - 1].addr, kept[n_kept - 1].len);
        drop_kept(n_kept - 1);
    }
}

static PyObject *install(PyObject *self, PyObject *args)
{
    (void)self;
    Py_ssize_t lim, minb;
    if (!PyArg_ParseTuple(args, "nn", &lim, &minb)) return NULL;
    if (lim < 0 || minb < (Py_ssize_t)page) {
        PyErr_SetString(PyExc_ValueError, "limit >= 0 and min_block of a page or more");
        return NULL;
    }
    PyObject *old = set_handler(capsule);
    if (old == NULL) return NULL;
    pthread_mutex_lock(&lock);
    if (loads++ == 0) {
        limit = (size_t)lim;
        min_block = (size_t)minb;
    }
    pthread_mutex_unlock(&lock);
    return old;
}

static PyObject *uninstall(PyObject *self, PyObject *old)
{
    (void)self;
    if (!PyCapsule_IsValid(old, "mem_handler")) {
        PyErr_SetString(PyExc_ValueError, "uninstall: not a NumPy memory handler");
        return NULL;
    }
    PyObject *mine = set_handler(old);
    if (mine == NULL) return NULL;
    Py_DECREF(mine);
    pthread_mutex_lock(&lock);
    if (loads > 0) loads--;
    if (loads == 0) release_all();
    pthread_mutex_unlock(&lock);
    Py_RETURN_NONE;
}

static PyObject *release(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    pthread_mutex_lock(&lock);
    size_t n = kept_bytes;
    release_all();
    pthread_mutex_unlock(&lock);
    return PyLong_FromSize_t(n);
}

static PyObject *stats(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    pthread_mutex_lock(&lock);
    size_t live_bytes = 0;
    for (size_t i = 0; i < n_live; i++) live_bytes += live[i].len;
    PyObject *d = Py_BuildValue(
        "{s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:i,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K}", "live_blocks", (Py_ssize_t)n_live, "live_bytes",
        (Py_ssize_t)live_bytes, "kept_blocks", (Py_ssize_t)n_kept, "kept_bytes", (Py_ssize_t)kept_bytes, "kept_peak", (Py_ssize_t)kept_peak, "limit",
        (Py_ssize_t)limit, "min_block", (Py_ssize_t)min_block, "loads", loads, "reused", n_reused, "fresh", n_fresh,
        "moved", n_moved, "dropped", n_dropped, "bytes_reused", bytes_reused, "bytes_fresh", bytes_fresh,
        "split_moves", n_split_moves, "copied", n_copied);
    pthread_mutex_unlock(&lock);
    return d;
}

static PyMethodDef methods[] = {
    {"install", install, METH_VARARGS,
     "install(limit, min_block) -> the handler replaced: large arrays from kept pages, in this context"},
    {"uninstall", uninstall, METH_O, "uninstall(old): put back the handler install returned; the last releases"},
    {"release", release, METH_NOARGS, "release() -> bytes unmapped: every kept block"},
    {"stats", stats, METH_NOARGS, "stats() -> dict: live and kept blocks and bytes, reuse counts"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_heapcache", NULL, -1, methods};

/* NumPy's C API table, as import_array() finds it; NULL with ImportError set. */
static void **numpy_api(void)
{
    PyObject *mod = PyImport_ImportModule("numpy._core._multiarray_umath");
    if (mod == NULL) {
        PyErr_Clear();
        mod = PyImport_ImportModule("numpy.core._multiarray_umath");  /* NumPy 1.x */
        if (mod == NULL) return NULL;
    }
    PyObject *cap = PyObject_GetAttrString(mod, "_ARRAY_API");
    Py_DECREF(mod);
    if (cap == NULL) return NULL;
    void **api = PyCapsule_CheckExact(cap) ? PyCapsule_GetPointer(cap, NULL) : NULL;
    Py_DECREF(cap);  /* the table lives as long as NumPy's module, which is never unloaded */
    if (api == NULL) {
        PyErr_Clear();
        PyErr_SetString(PyExc_ImportError, "NumPy's C API table not found");
        return NULL;
    }
    unsigned int (*feature)(void) = (unsigned int (*)(void))api[API_FEATURE_VERSION];
    if (feature() < NUMPY_1_22_API) {
        PyErr_SetString(PyExc_ImportError, "NumPy older than 1.22: no data memory handlers");
        return NULL;
    }
    return api;
}

PyMODINIT_FUNC PyInit__heapcache(void)
{
    void **api = numpy_api();
    if (api == NULL) return NULL;
    set_handler = (PyObject * (*)(PyObject *)) api[API_SET_HANDLER];
    PyDataMem_Handler *d = PyCapsule_GetPointer(*(PyObject **)api[API_DEFAULT_HANDLER], "mem_handler");
    if (d == NULL) return NULL;
    dflt = &d->allocator;
    long ps = sysconf(_SC_PAGESIZE);
    if (ps > 0) page = (size_t)ps;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    capsule = PyCapsule_New(&handler, "mem_handler", NULL);
    if (capsule == NULL) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(capsule); /* arrays hold it for life: the module keeps one more reference, never dropped */
    if (PyModule_AddObject(m, "handler", capsule) < 0) {
        Py_DECREF(capsule);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
