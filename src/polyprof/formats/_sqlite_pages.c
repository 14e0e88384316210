/* polyprof.formats._sqlite_pages: integer columns of an SQLite table read from its pages.
 *
 * The readers of SQLite exports (Nsight Systems, rocpd) read a few integer columns of
 * every row of large tables. Through sqlite3 that is SQLite's VM per row and value and a
 * Python object per value (or a text per column to parse); here the table's B-tree is
 * walked in C, page by page (pread, one page per level of the tree held at a time), and
 * each wanted column of each row is decoded from its record straight into an int64
 * buffer. The file is read in runs of 1 MiB (a table's pages mostly follow each other).
 * The file format is SQLite's published one (https://sqlite.org/fileformat2.html):
 *
 *   columns(path, page_size, reserved, root, want, nulls) -> list[bytearray]
 *       path: the database file (not in WAL mode: the caller checks); page_size and
 *       reserved: the header's (bytes 16-17 and 20); root: the table's root page;
 *       want: per output column, the record's column index, or -1 for the rowid;
 *       nulls: per output column, the value a NULL (or a column the record lacks, as
 *       rows written before an ALTER TABLE ADD COLUMN) reads as.
 *       Returns one bytearray of native int64 per output column, rows in rowid order.
 *       ValueError: the pages are not a well-formed table B-tree (a damaged file);
 *       TypeError: a wanted column holds a real, a text or a blob.
 *   texts(path, page_size, reserved, root, col) -> (bytearray, bytearray, list[bytes])
 *       The rows whose column col holds a text (NULLs skipped): their rowids and the
 *       code of each one's text (int64), and the distinct texts in order of first
 *       appearance (a hash table over their bytes, so each distinct text is one
 *       object). TypeError: the column holds a number or a blob in some row.
 *
 * sqlite_db.py decides when this applies (a rowid table, no generated columns, no
 * defaults on added columns, plain column names) and holds the SQL path the tests hold
 * this one to.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>

#define MAX_DEPTH 40
#define MAX_WANT 256
#define BLOCK (1 << 20) /* bytes read per pread: a table's pages mostly lie in runs */

typedef struct {
    int fd;
    uint32_t page_size, usable, npages;
    uint64_t visited;
    unsigned char *pages[MAX_DEPTH]; /* one page buffer per tree level */
    unsigned char *block;            /* the last BLOCK-aligned run of the file read */
    off_t block_at;
    size_t block_len;
    unsigned char *scratch;          /* a payload that spills onto overflow pages */
    size_t scratch_cap;
    int nwant, maxcol;
    int want[MAX_WANT];
    int64_t nulls[MAX_WANT];
    PyObject *out[MAX_WANT];         /* bytearrays, grown by doubling */
    Py_ssize_t n, cap;
    uint32_t *types;                 /* per record column up to maxcol: serial type */
    uint64_t *offs;                  /* ... and its body offset */
    int text_col;                    /* texts(): the column read, else -1 */
    struct Distinct *distinct;
} Ctx;

/* texts(): the distinct texts met so far, numbered in order of first appearance, in an
 * open-addressing hash table over their bytes (kept one after another in an arena). */
typedef struct Distinct {
    uint64_t *slot_hash;
    int64_t *slot_code;             /* -1: empty */
    size_t nslots, n, cap;
    size_t *off, *len;              /* per code: where its bytes are in the arena */
    unsigned char *arena;
    size_t arena_len, arena_cap;
} Distinct;

static void distinct_free(Distinct *d) {
    PyMem_Free(d->slot_hash);
    PyMem_Free(d->slot_code);
    PyMem_Free(d->off);
    PyMem_Free(d->len);
    PyMem_Free(d->arena);
}

static int distinct_rehash(Distinct *d, size_t nslots) {
    uint64_t *h = PyMem_Malloc(nslots * sizeof *h);
    int64_t *cd = PyMem_Malloc(nslots * sizeof *cd);
    if (!h || !cd) { PyMem_Free(h); PyMem_Free(cd); PyErr_NoMemory(); return -1; }
    for (size_t i = 0; i < nslots; i++) cd[i] = -1;
    for (size_t i = 0; i < d->nslots; i++) {
        if (d->slot_code[i] < 0) continue;
        size_t j = d->slot_hash[i] & (nslots - 1);
        while (cd[j] >= 0) j = (j + 1) & (nslots - 1);
        h[j] = d->slot_hash[i];
        cd[j] = d->slot_code[i];
    }
    PyMem_Free(d->slot_hash);
    PyMem_Free(d->slot_code);
    d->slot_hash = h;
    d->slot_code = cd;
    d->nslots = nslots;
    return 0;
}

/* The code of the text p[0:n], numbering it if new; -1 on error. */
static int64_t distinct_code(Distinct *d, const unsigned char *p, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    if (2 * (d->n + 1) > d->nslots && distinct_rehash(d, d->nslots ? 2 * d->nslots : 64) < 0) return -1;
    size_t j = h & (d->nslots - 1);
    for (; d->slot_code[j] >= 0; j = (j + 1) & (d->nslots - 1)) {
        int64_t k = d->slot_code[j];
        if (d->slot_hash[j] == h && d->len[k] == n && !memcmp(d->arena + d->off[k], p, n)) return k;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 64;
        size_t *off = PyMem_Realloc(d->off, cap * sizeof *off), *len = off ? PyMem_Realloc(d->len, cap * sizeof *len) : NULL;
        if (off) d->off = off;
        if (!off || !len) { PyErr_NoMemory(); return -1; }
        d->len = len;
        d->cap = cap;
    }
    if (d->arena_len + n > d->arena_cap) {
        size_t cap = 2 * (d->arena_len + n) + 256;
        unsigned char *a = PyMem_Realloc(d->arena, cap);
        if (!a) { PyErr_NoMemory(); return -1; }
        d->arena = a;
        d->arena_cap = cap;
    }
    if (n) memcpy(d->arena + d->arena_len, p, n);
    d->off[d->n] = d->arena_len;
    d->len[d->n] = n;
    d->arena_len += n;
    d->slot_hash[j] = h;
    d->slot_code[j] = (int64_t)d->n;
    return (int64_t)d->n++;
}

static int malformed(const char *what) {
    PyErr_Format(PyExc_ValueError, "malformed table b-tree: %s", what);
    return -1;
}

/* An SQLite varint at p (at most 9 bytes, never past end); bytes used, 0 if cut. */
static inline int varint(const unsigned char *p, const unsigned char *end, uint64_t *v) {
    uint64_t x = 0;
    for (int i = 0; i < 8; i++) {
        if (p + i >= end) return 0;
        x = (x << 7) | (p[i] & 0x7f);
        if (!(p[i] & 0x80)) { *v = x; return i + 1; }
    }
    if (p + 8 >= end) return 0;
    *v = (x << 8) | p[8];
    return 9;
}

static inline uint32_t u16(const unsigned char *p) { return ((uint32_t)p[0] << 8) | p[1]; }
static inline uint32_t u32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static int read_page(Ctx *c, uint32_t pgno, unsigned char *buf) {
    if (pgno < 1 || pgno > c->npages) return malformed("page number out of range");
    if (++c->visited > c->npages) return malformed("a page is reached twice");
    off_t at = (off_t)(pgno - 1) * c->page_size;
    if (!(c->block_len && at >= c->block_at && at + c->page_size <= c->block_at + (off_t)c->block_len)) {
        off_t start = at - at % BLOCK;
        size_t got = 0;
        c->block_len = 0;
        while (got < BLOCK) {
            ssize_t r = pread(c->fd, c->block + got, BLOCK - got, start + (off_t)got);
            if (r < 0) { PyErr_SetFromErrno(PyExc_OSError); return -1; }
            if (r == 0) break;
            got += (size_t)r;
        }
        c->block_at = start;
        c->block_len = got;
        if (at + c->page_size > start + (off_t)got) return malformed("the file ends inside a page");
    }
    memcpy(buf, c->block + (at - c->block_at), c->page_size);
    return 0;
}

static int grow(Ctx *c) {
    Py_ssize_t cap = c->cap ? c->cap * 2 : 4096;
    for (int i = 0; i < c->nwant; i++)
        if (PyByteArray_Resize(c->out[i], cap * 8) < 0) return -1;
    c->cap = cap;
    return 0;
}

/* The integer of serial type t at body p (t in 0..9; NULL reads as null). */
static inline int64_t decode_int(uint32_t t, const unsigned char *p, int64_t null) {
    uint64_t u;
    switch (t) {
    case 0: return null;
    case 1: return (int8_t)p[0];
    case 2: return (int16_t)u16(p);
    case 3: u = ((uint64_t)p[0] << 16) | u16(p + 1); return (int64_t)(u ^ 0x800000u) - 0x800000;
    case 4: return (int32_t)u32(p);
    case 5: u = ((uint64_t)u16(p) << 32) | u32(p + 2); return (int64_t)(u ^ 0x800000000000u) - 0x800000000000;
    case 6: return (int64_t)(((uint64_t)u32(p) << 32) | u32(p + 4));
    case 8: return 0;
    default: return 1; /* 9 */
    }
}

static const int INT_SIZE[10] = {0, 1, 2, 3, 4, 6, 8, 8, 0, 0};

/* Where a value of serial type t that starts at off ends, for a record of n bytes: past
 * n it is n + 1 (a serial type's size may be near 2**63; two such must not wrap around
 * to an offset inside the record). */
static inline uint64_t body_end(uint64_t off, uint64_t t, uint64_t n) {
    uint64_t size = t < 10 ? (uint64_t)INT_SIZE[t] : t >= 12 ? (t - 12) / 2 : 0;
    return off > n || size > n - off ? n + 1 : off + size;
}


/* texts(): a row's text (if not NULL) as its rowid and the code of its text. */
static int row_text(Ctx *c, int64_t rowid, const unsigned char *rec, uint64_t n) {
    const unsigned char *end = rec + n;
    uint64_t hsize, t = 0, off;
    int k = varint(rec, end, &hsize);
    if (!k || hsize > n || hsize < (uint64_t)k) return malformed("record header");
    const unsigned char *h = rec + k, *hend = rec + hsize;
    off = hsize;
    for (int col = 0; col <= c->text_col; col++) {
        if (h >= hend) return 0; /* a record without the column: NULL */
        int m = varint(h, hend, &t);
        if (!m) return malformed("record header");
        h += m;
        if (col < c->text_col) off = body_end(off, t, n);
    }
    if (t == 0) return 0;
    if (t < 13 || !(t & 1)) {
        PyErr_SetString(PyExc_TypeError, "a column read as text holds a number or a blob");
        return -1;
    }
    uint64_t len = (t - 13) / 2;
    if (off > n || len > n - off) return malformed("record body shorter than its header");
    int64_t code = distinct_code(c->distinct, rec + off, (size_t)len);
    if (code < 0) return -1;
    if (c->n == c->cap && grow(c) < 0) return -1;
    ((int64_t *)PyByteArray_AS_STRING(c->out[0]))[c->n] = rowid;
    ((int64_t *)PyByteArray_AS_STRING(c->out[1]))[c->n] = code;
    c->n++;
    return 0;
}

/* One row's record (the whole payload, n bytes at rec) into the output columns. */
static int row(Ctx *c, int64_t rowid, const unsigned char *rec, uint64_t n) {
    if (c->text_col >= 0) return row_text(c, rowid, rec, n);
    const unsigned char *end = rec + n;
    uint64_t hsize;
    int k = varint(rec, end, &hsize);
    if (!k || hsize > n || hsize < (uint64_t)k) return malformed("record header");
    const unsigned char *h = rec + k, *hend = rec + hsize;
    uint64_t off = hsize;
    int ncol = 0;
    while (h < hend && ncol <= c->maxcol) {
        uint64_t t;
        int m = varint(h, hend, &t);
        if (!m) return malformed("record header");
        h += m;
        c->types[ncol] = t > 0xFFFFFFFFu ? 0xFFFFFFFFu : (uint32_t)t;
        c->offs[ncol] = off;
        off = body_end(off, t, n);
        ncol++;
    }
    if (c->n == c->cap && grow(c) < 0) return -1;
    for (int i = 0; i < c->nwant; i++) {
        int col = c->want[i];
        int64_t v;
        if (col < 0) v = rowid;
        else if (col >= ncol) v = c->nulls[i];
        else {
            uint32_t t = c->types[col];
            if (t == 7 || t >= 10) {
                PyErr_SetString(PyExc_TypeError, "a column read as integers holds a real, a text or a blob");
                return -1;
            }
            if (c->offs[col] + (uint64_t)INT_SIZE[t] > n) return malformed("record body shorter than its header");
            v = decode_int(t, rec + c->offs[col], c->nulls[i]);
        }
        ((int64_t *)PyByteArray_AS_STRING(c->out[i]))[c->n] = v;
    }
    c->n++;
    return 0;
}

/* A leaf cell at p (page buffer pg): its payload, gathered from overflow pages if it spills. */
static int leaf_cell(Ctx *c, const unsigned char *pg, uint32_t off) {
    const unsigned char *end = pg + c->usable, *p = pg + off;
    if (off >= c->usable) return malformed("cell offset");
    uint64_t size, rowid;
    int k = varint(p, end, &size);
    if (!k) return malformed("cell");
    p += k;
    k = varint(p, end, &rowid);
    if (!k) return malformed("cell");
    p += k;
    uint64_t U = c->usable, X = U - 35;
    if (size <= X) {
        if (p + size > end) return malformed("cell past its page");
        return row(c, (int64_t)rowid, p, size);
    }
    if (size > 0x7FFFFFFF) return malformed("payload size");
    uint64_t M = ((U - 12) * 32 / 255) - 23, K = M + ((size - M) % (U - 4));
    uint64_t local = K <= X ? K : M;
    if (p + local + 4 > end) return malformed("cell past its page");
    if (size - local > (uint64_t)c->npages * (U - 4)) return malformed("payload larger than the file");
    if (size > c->scratch_cap) {
        unsigned char *s = PyMem_Realloc(c->scratch, size);
        if (!s) { PyErr_NoMemory(); return -1; }
        c->scratch = s;
        c->scratch_cap = size;
    }
    memcpy(c->scratch, p, local);
    uint64_t have = local;
    uint32_t next = u32(p + local);
    unsigned char *ov = c->pages[MAX_DEPTH - 1]; /* overflow pages never need a tree level */
    while (have < size) {
        if (read_page(c, next, ov) < 0) return -1;
        uint64_t take = size - have < U - 4 ? size - have : U - 4;
        memcpy(c->scratch + have, ov + 4, take);
        have += take;
        next = u32(ov);
    }
    return row(c, (int64_t)rowid, c->scratch, size);
}

static int walk(Ctx *c, uint32_t pgno, int depth) {
    if (depth >= MAX_DEPTH - 1) return malformed("tree too deep");
    if (!c->pages[depth] && !(c->pages[depth] = PyMem_Malloc(c->page_size))) { PyErr_NoMemory(); return -1; }
    unsigned char *pg = c->pages[depth];
    if (read_page(c, pgno, pg) < 0) return -1;
    uint32_t h = pgno == 1 ? 100 : 0;
    unsigned char type = pg[h];
    uint32_t ncells = u16(pg + h + 3);
    if (type == 0x0D) {
        if (h + 8 + 2 * ncells > c->usable) return malformed("cell count");
        for (uint32_t i = 0; i < ncells; i++)
            if (leaf_cell(c, pg, u16(pg + h + 8 + 2 * i)) < 0) return -1;
        return 0;
    }
    if (type != 0x05) return malformed("not a table b-tree page");
    if (h + 12 + 2 * ncells > c->usable) return malformed("cell count");
    /* children are read into deeper buffers, so this page stays as it is */
    for (uint32_t i = 0; i < ncells; i++) {
        uint32_t off = u16(pg + h + 12 + 2 * i);
        if (off + 4 > c->usable) return malformed("cell offset");
        if (walk(c, u32(pg + off), depth + 1) < 0) return -1;
    }
    return walk(c, u32(pg + h + 8), depth + 1);
}

/* Opens the file and walks the table from root; c->nwant outputs in c->out. */
static int run(Ctx *c, PyObject *path, unsigned int page_size, unsigned int reserved, unsigned int root) {
    if (page_size < 512 || page_size > 65536 || (page_size & (page_size - 1)) || reserved > 255 ||
        page_size - reserved < 480)
        return malformed("page size");
    for (int i = 0; i < c->nwant; i++)
        if (!(c->out[i] = PyByteArray_FromStringAndSize(NULL, 0))) return -1;
    c->page_size = page_size;
    c->usable = page_size - reserved;
    c->fd = open(PyBytes_AS_STRING(path), O_RDONLY | O_CLOEXEC);
    if (c->fd < 0) { PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path); return -1; }
    struct stat st;
    if (fstat(c->fd, &st) < 0) { PyErr_SetFromErrno(PyExc_OSError); return -1; }
    c->npages = (uint32_t)(st.st_size / page_size);
    if (!(c->pages[MAX_DEPTH - 1] = PyMem_Malloc(page_size)) || !(c->block = PyMem_Malloc(BLOCK))) {
        PyErr_NoMemory();
        return -1;
    }
    if (walk(c, root, 0) < 0) return -1;
    for (int i = 0; i < c->nwant; i++)
        if (PyByteArray_Resize(c->out[i], c->n * 8) < 0) return -1;
    return 0;
}

static void release(Ctx *c, PyObject *path) {
    if (c->fd >= 0) close(c->fd);
    for (int i = 0; i < MAX_DEPTH; i++) PyMem_Free(c->pages[i]);
    PyMem_Free(c->block);
    for (int i = 0; i < MAX_WANT; i++) Py_XDECREF(c->out[i]);
    PyMem_Free(c->scratch);
    PyMem_Free(c->types);
    PyMem_Free(c->offs);
    if (c->distinct) distinct_free(c->distinct);
    Py_DECREF(path);
}

static PyObject *columns(PyObject *self, PyObject *args) {
    PyObject *path, *want, *nulls;
    unsigned int page_size, reserved, root;
    if (!PyArg_ParseTuple(args, "O&IIIO!O!", PyUnicode_FSConverter, &path, &page_size, &reserved, &root,
                          &PyTuple_Type, &want, &PyTuple_Type, &nulls))
        return NULL;
    Ctx c;
    memset(&c, 0, sizeof c);
    c.fd = -1;
    c.text_col = -1;
    PyObject *result = NULL;
    Py_ssize_t nw = PyTuple_GET_SIZE(want);
    if (nw < 1 || nw > MAX_WANT || PyTuple_GET_SIZE(nulls) != nw) {
        PyErr_SetString(PyExc_ValueError, "want and nulls: 1 to 256 columns, as many of each");
        goto done;
    }
    c.nwant = (int)nw;
    c.maxcol = -1;
    for (int i = 0; i < c.nwant; i++) {
        long w = PyLong_AsLong(PyTuple_GET_ITEM(want, i));
        long long z = PyLong_AsLongLong(PyTuple_GET_ITEM(nulls, i));
        if (PyErr_Occurred()) goto done;
        if (w < -1 || w > 32767) { PyErr_SetString(PyExc_ValueError, "column index out of range"); goto done; }
        c.want[i] = (int)w;
        c.nulls[i] = z;
        if (w > c.maxcol) c.maxcol = (int)w;
    }
    c.types = PyMem_Malloc(sizeof(uint32_t) * (size_t)(c.maxcol + 2));
    c.offs = PyMem_Malloc(sizeof(uint64_t) * (size_t)(c.maxcol + 2));
    if (!c.types || !c.offs) { PyErr_NoMemory(); goto done; }
    if (run(&c, path, page_size, reserved, root) < 0 || !(result = PyList_New(c.nwant))) goto done;
    for (int i = 0; i < c.nwant; i++) {
        PyList_SET_ITEM(result, i, c.out[i]);
        c.out[i] = NULL;
    }
done:
    release(&c, path);
    return result;
}

static PyObject *texts(PyObject *self, PyObject *args) {
    PyObject *path;
    unsigned int page_size, reserved, root;
    int col;
    if (!PyArg_ParseTuple(args, "O&IIIi", PyUnicode_FSConverter, &path, &page_size, &reserved, &root, &col))
        return NULL;
    Ctx c;
    Distinct d;
    memset(&c, 0, sizeof c);
    memset(&d, 0, sizeof d);
    c.fd = -1;
    c.distinct = &d;
    c.nwant = 2;
    c.text_col = col;
    PyObject *result = NULL, *values = NULL;
    if (col < 0 || col > 32767) { PyErr_SetString(PyExc_ValueError, "column index out of range"); goto done; }
    if (run(&c, path, page_size, reserved, root) < 0 || !(values = PyList_New((Py_ssize_t)d.n))) goto done;
    for (size_t i = 0; i < d.n; i++) {
        PyObject *b = PyBytes_FromStringAndSize((const char *)d.arena + d.off[i], (Py_ssize_t)d.len[i]);
        if (!b) goto done;
        PyList_SET_ITEM(values, (Py_ssize_t)i, b);
    }
    result = Py_BuildValue("OOO", c.out[0], c.out[1], values);
done:
    Py_XDECREF(values);
    release(&c, path);
    return result;
}

static PyMethodDef methods[] = {
    {"columns", columns, METH_VARARGS, "Integer columns of an SQLite table, read from its pages."},
    {"texts", texts, METH_VARARGS, "A text column's rows with text: rowids, codes, distinct texts (bytes)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_sqlite_pages", NULL, -1, methods};

PyMODINIT_FUNC PyInit__sqlite_pages(void) { return PyModule_Create(&module); }
