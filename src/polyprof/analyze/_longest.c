/* polyprof.analyze._longest: the two passes of the longest path through a dependency
 * graph (longest_path.py), in one C loop each.
 *
 *   passes(order, i_ptr, ins, o_ptr, outs, src, dst, w, fwd, best, bwd) -> None
 *
 * Every argument is a C-contiguous int64 buffer (NumPy arrays); fwd, best and bwd are
 * written. n nodes, m edges: order (n) the nodes in topological order; i_ptr / o_ptr
 * (n + 1) where each node's incoming / outgoing edges start in ins / outs (m edge
 * indices, in insertion order); src, dst, w (m) the edges. Forward, over `order`: a node
 * with incoming edges takes the first inserted of its best ones (strictly greater wins),
 * kept only where that length is >= 0 (fwd[v], best[v]); fwd starts at 0 and best at -1
 * (the caller fills them). Backward, over `order` reversed: bwd[u] is the greatest
 * w[e] + bwd[dst[e]] over its outgoing edges, at least 0. Exactly the Python loops of
 * longest_path.py (`_passes_python`), which tests/test_critical_path.py holds this to.
 * Indices out of range raise ValueError before anything is written.
 *
 *   kahn(pos, o_ptr, out_dst, indeg, order) -> count
 *
 * Kahn's walk (longest_path.py's `_kahn`): ready nodes taken in ascending `pos` (n, a
 * permutation of 0..n-1); o_ptr (n + 1) and out_dst (m) each node's successors; indeg
 * (n) is consumed; order (n) receives the nodes; returns how many were placed (fewer
 * than n: a cycle).
 *
 *   walk(best, src, end, out) -> count
 *
 * The path back from node `end`: e = best[v] while e >= 0 (an edge index into src), then
 * v = src[e]; the edges are written to out (its length bounds the walk: a longer chain
 * raises ValueError) last first, and their number returned (longest_path.py's loop,
 * `_walk_python`).
 *
 *   csr(src, dst, i_ptr, ins, o_ptr, outs) -> None
 *
 * The edges grouped by node (longest_path.py's `_csr`, a stable sort by node and the
 * offsets): n = len(i_ptr) - 1 nodes, m edges; src, dst (m) in [0, n). Written: ins (m)
 * the edge indices ordered by dst, ties in edge order (`np.argsort(dst, kind="stable")`),
 * i_ptr (n + 1) where each node's run starts in ins; outs and o_ptr likewise by src. One
 * counting pass each instead of a comparison sort.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_shared_cols.h" /* Col, get: the int64 arrays given */

/* every value of c in [0, hi) (hi_inclusive: [0, hi]) */
static int in_range(const Col *c, Py_ssize_t hi, int hi_inclusive, const char *name) {
    for (Py_ssize_t i = 0; i < c->n; i++) {
        int64_t v = c->p[i];
        if (v < 0 || v > hi || (!hi_inclusive && v == hi)) {
            PyErr_Format(PyExc_ValueError, "%s[%zd] = %lld is out of range", name, i, (long long)v);
            return -1;
        }
    }
    return 0;
}

/* pointers ascend from 0 to m */
static int pointers(const Col *c, Py_ssize_t m, const char *name) {
    if (in_range(c, m, 1, name) < 0) return -1;
    if (c->p[0] != 0 || c->p[c->n - 1] != m) {
        PyErr_Format(PyExc_ValueError, "%s must run from 0 to the number of edges", name);
        return -1;
    }
    for (Py_ssize_t i = 1; i < c->n; i++)
        if (c->p[i] < c->p[i - 1]) {
            PyErr_Format(PyExc_ValueError, "%s must not decrease", name);
            return -1;
        }
    return 0;
}

enum { ORDER, IPTR, INS, OPTR, OUTS, SRC, DST, W, FWD, BEST, BWD, NCOL };
static const char *NAMES[NCOL] = {"order", "i_ptr", "ins", "o_ptr", "outs", "src", "dst", "w", "fwd", "best", "bwd"};

static int check(Col *c) {
    Py_ssize_t n = c[ORDER].n, m = c[SRC].n;
    if (c[IPTR].n != n + 1 || c[OPTR].n != n + 1 || c[INS].n != m || c[OUTS].n != m || c[DST].n != m ||
        c[W].n != m || c[FWD].n != n || c[BEST].n != n || c[BWD].n != n) {
        PyErr_SetString(PyExc_ValueError, "passes: lengths disagree (n nodes, m edges)");
        return -1;
    }
    if (in_range(&c[ORDER], n, 0, NAMES[ORDER]) < 0 || in_range(&c[SRC], n, 0, NAMES[SRC]) < 0 ||
        in_range(&c[DST], n, 0, NAMES[DST]) < 0 || in_range(&c[INS], m, 0, NAMES[INS]) < 0 ||
        in_range(&c[OUTS], m, 0, NAMES[OUTS]) < 0 || pointers(&c[IPTR], m, NAMES[IPTR]) < 0 ||
        pointers(&c[OPTR], m, NAMES[OPTR]) < 0)
        return -1;
    return 0;
}

static void run(Col *c) {
    const int64_t *order = c[ORDER].p, *i_ptr = c[IPTR].p, *ins = c[INS].p, *o_ptr = c[OPTR].p;
    const int64_t *outs = c[OUTS].p, *src = c[SRC].p, *dst = c[DST].p, *w = c[W].p;
    int64_t *fwd = c[FWD].p, *best = c[BEST].p, *bwd = c[BWD].p;
    Py_ssize_t n = c[ORDER].n;
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t v = order[k], lo = i_ptr[v], hi = i_ptr[v + 1];
        if (lo == hi) continue;
        int64_t be = ins[lo], b = fwd[src[be]] + w[be];
        for (int64_t j = lo + 1; j < hi; j++) {
            int64_t e = ins[j], x = fwd[src[e]] + w[e];
            if (x > b) { b = x; be = e; }
        }
        if (b >= 0) { fwd[v] = b; best[v] = be; }
    }
    for (Py_ssize_t k = n - 1; k >= 0; k--) {
        int64_t u = order[k], lo = o_ptr[u], hi = o_ptr[u + 1];
        if (lo == hi) continue;
        int64_t b = 0;
        for (int64_t j = lo; j < hi; j++) {
            int64_t e = outs[j], x = w[e] + bwd[dst[e]];
            if (x > b) b = x;
        }
        bwd[u] = b;
    }
}

static PyObject *passes(PyObject *self, PyObject *args) {
    PyObject *o[NCOL];
    if (!PyArg_UnpackTuple(args, "passes", NCOL, NCOL, &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7],
                           &o[8], &o[9], &o[10]))
        return NULL;
    Col c[NCOL];
    int got = 0, ok = 0;
    if (get_all(o, c, NCOL, FWD, NAMES, &got) < 0) goto done;
    if (check(c) < 0) goto done;
    Py_BEGIN_ALLOW_THREADS
    run(c);
    Py_END_ALLOW_THREADS
    ok = 1;
done:
    release_all(c, got);
    if (!ok) return NULL;
    Py_RETURN_NONE;
}

/* a binary min-heap of node ids keyed by pos */
static void heap_push(int64_t *h, Py_ssize_t *len, int64_t v, const int64_t *pos) {
    Py_ssize_t i = (*len)++;
    while (i > 0) {
        Py_ssize_t up = (i - 1) / 2;
        if (pos[h[up]] <= pos[v]) break;
        h[i] = h[up];
        i = up;
    }
    h[i] = v;
}

static int64_t heap_pop(int64_t *h, Py_ssize_t *len, const int64_t *pos) {
    int64_t top = h[0], v = h[--(*len)];
    Py_ssize_t i = 0, n = *len;
    for (;;) {
        Py_ssize_t l = 2 * i + 1, r = l + 1, m = i;
        int64_t mv = v;
        if (l < n && pos[h[l]] < pos[mv]) { m = l; mv = h[l]; }
        if (r < n && pos[h[r]] < pos[mv]) { m = r; mv = h[r]; }
        if (m == i) break;
        h[i] = h[m];
        i = m;
    }
    if (n > 0) h[i] = v;
    return top;
}

static PyObject *kahn(PyObject *self, PyObject *args) {
    PyObject *o[5];
    static const char *names[5] = {"pos", "o_ptr", "out_dst", "indeg", "order"};
    if (!PyArg_UnpackTuple(args, "kahn", 5, 5, &o[0], &o[1], &o[2], &o[3], &o[4]))
        return NULL;
    Col c[5];
    int got = 0, ok = 0;
    Py_ssize_t placed = 0;
    int64_t *heap = NULL;
    if (get_all(o, c, 5, 3, names, &got) < 0) goto done;
    Py_ssize_t n = c[0].n, m = c[2].n;
    if (c[1].n != n + 1 || c[3].n != n || c[4].n != n) {
        PyErr_SetString(PyExc_ValueError, "kahn: lengths disagree (n nodes, m edges)");
        goto done;
    }
    if (in_range(&c[0], n, 0, "pos") < 0 || in_range(&c[2], n, 0, "out_dst") < 0 ||
        (n && pointers(&c[1], m, "o_ptr") < 0))
        goto done;
    heap = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (heap == NULL) { PyErr_NoMemory(); goto done; }
    {
        const int64_t *pos = c[0].p, *o_ptr = c[1].p, *out_dst = c[2].p;
        int64_t *indeg = c[3].p, *order = c[4].p;
        Py_ssize_t len = 0;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t v = 0; v < n; v++)
            if (indeg[v] == 0) heap_push(heap, &len, v, pos);
        while (len > 0 && placed < n) {
            int64_t v = heap_pop(heap, &len, pos);
            order[placed++] = v;
            for (int64_t j = o_ptr[v]; j < o_ptr[v + 1]; j++) {
                int64_t d = out_dst[j];
                if (--indeg[d] == 0) heap_push(heap, &len, d, pos);
            }
        }
        Py_END_ALLOW_THREADS
    }
    ok = 1;
done:
    PyMem_Free(heap);
    release_all(c, got);
    if (!ok) return NULL;
    return PyLong_FromSsize_t(placed);
}

static PyObject *walk(PyObject *self, PyObject *args) {
    PyObject *ob, *os, *oo;
    long long end;
    if (!PyArg_ParseTuple(args, "OOLO:walk", &ob, &os, &end, &oo))
        return NULL;
    Col best, src, out;
    if (get(ob, &best, 0, "best") < 0) return NULL;
    if (get(os, &src, 0, "src") < 0) { PyBuffer_Release(&best.b); return NULL; }
    if (get(oo, &out, 1, "out") < 0) { PyBuffer_Release(&best.b); PyBuffer_Release(&src.b); return NULL; }
    Py_ssize_t k = 0;
    int bad = 0;
    int64_t v = end;
    for (;;) {
        if (v < 0 || v >= best.n) { bad = 1; break; }
        int64_t e = best.p[v];
        if (e < 0) break;
        if (e >= src.n || k >= out.n) { bad = 2; break; }
        out.p[k++] = e;
        v = src.p[e];
    }
    PyBuffer_Release(&best.b);
    PyBuffer_Release(&src.b);
    PyBuffer_Release(&out.b);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, bad == 1 ? "walk: a node out of range" : "walk: an edge out of range, or a cycle");
        return NULL;
    }
    return PyLong_FromSsize_t(k);
}


/* ptr (n + 1) and idx (m): the edges in stable order of key (n counting slots in tmp) */
static void group(const int64_t *key, Py_ssize_t m, Py_ssize_t n, int64_t *ptr, int64_t *idx, int64_t *tmp) {
    for (Py_ssize_t v = 0; v <= n; v++) ptr[v] = 0;
    for (Py_ssize_t e = 0; e < m; e++) ptr[key[e] + 1]++;
    for (Py_ssize_t v = 0; v < n; v++) ptr[v + 1] += ptr[v];
    for (Py_ssize_t v = 0; v < n; v++) tmp[v] = ptr[v];
    for (Py_ssize_t e = 0; e < m; e++) idx[tmp[key[e]]++] = e;
}

static PyObject *csr(PyObject *self, PyObject *args) {
    PyObject *o[6];
    static const char *names[6] = {"src", "dst", "i_ptr", "ins", "o_ptr", "outs"};
    if (!PyArg_UnpackTuple(args, "csr", 6, 6, &o[0], &o[1], &o[2], &o[3], &o[4], &o[5]))
        return NULL;
    Col c[6];
    int got = 0, ok = 0;
    int64_t *tmp = NULL;
    if (get_all(o, c, 6, 2, names, &got) < 0) goto done;
    Py_ssize_t m = c[0].n, n = c[2].n - 1;
    if (n < 0 || c[1].n != m || c[3].n != m || c[4].n != n + 1 || c[5].n != m) {
        PyErr_SetString(PyExc_ValueError, "csr: lengths disagree (n + 1 pointers, m edges)");
        goto done;
    }
    if (in_range(&c[0], n, 0, "src") < 0 || in_range(&c[1], n, 0, "dst") < 0) goto done;
    tmp = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (tmp == NULL) { PyErr_NoMemory(); goto done; }
    Py_BEGIN_ALLOW_THREADS
    group(c[1].p, m, n, c[2].p, c[3].p, tmp);
    group(c[0].p, m, n, c[4].p, c[5].p, tmp);
    Py_END_ALLOW_THREADS
    ok = 1;
done:
    PyMem_Free(tmp);
    release_all(c, got);
    if (!ok) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"passes", passes, METH_VARARGS, "The forward and backward passes of the longest path (see the module's source)."},
    {"kahn", kahn, METH_VARARGS, "Kahn's walk in pos order (see the module's source)."},
    {"csr", csr, METH_VARARGS, "The edges grouped by destination and by source (see the module's source)."},
    {"walk", walk, METH_VARARGS, "The best edges back from a node (see the module's source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_longest", NULL, -1, methods};

PyMODINIT_FUNC PyInit__longest(void) { return PyModule_Create(&module); }
