/* polyprof.analyze._nest: the nesting of spans on their threads (analyze/nesting.py's
 * `parents`), in one C loop instead of a sort of the ends, a binary search per span
 * and a NumPy pass per nesting level.
 *
 *   depths(thread, start, end, depth, parent) -> None
 *
 * Every argument is a C-contiguous int64 buffer of one length n; depth and parent are
 * written. The spans come sorted by (thread, start) (nesting.py sorts them by thread,
 * start and longest first). depth[i]: how many spans before i on its thread are still
 * open at its start (end > start[i]), as `derive.intervals.nesting_depth` counts them;
 * parent[i]: the nearest position before i whose depth is depth[i] - 1 (-1 for depth 0,
 * or none), as nesting.py's per-level search finds it. Open spans are kept in a min-heap
 * of their ends, emptied where the thread changes. The order is not checked: spans out
 * of order give other depths, never a read or write out of bounds.
 *
 *   depths(thread, start, end, depth, parent, after) -> None
 *
 * The same, and after[i] (written): the first position after i on its thread whose
 * depth is at most depth[i], or where its thread's run ends (the next thread's first
 * position, or n): where the spans nest, the end of i's subtree (a stack of positions
 * of rising depth).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_shared_cols.h" /* Col, get: the int64 arrays given */

static void heap_push(int64_t *h, Py_ssize_t *len, int64_t v) {
    Py_ssize_t i = (*len)++;
    while (i > 0) {
        Py_ssize_t up = (i - 1) / 2;
        if (h[up] <= v) break;
        h[i] = h[up];
        i = up;
    }
    h[i] = v;
}

static void heap_pop(int64_t *h, Py_ssize_t *len) {
    int64_t v = h[--(*len)];
    Py_ssize_t i = 0, n = *len;
    for (;;) {
        Py_ssize_t l = 2 * i + 1, r = l + 1, m = i;
        int64_t mv = v;
        if (l < n && h[l] < mv) { m = l; mv = h[l]; }
        if (r < n && h[r] < mv) { m = r; mv = h[r]; }
        if (m == i) break;
        h[i] = h[m];
        i = m;
    }
    if (n > 0) h[i] = v;
}

static void run(const int64_t *thread, const int64_t *start, const int64_t *end, int64_t *depth, int64_t *parent,
                int64_t *after, Py_ssize_t n, int64_t *heap, int64_t *last, int64_t *stack) {
    Py_ssize_t len = 0, top = 0;
    for (Py_ssize_t d = 0; d < n; d++) last[d] = -1;  /* the latest position of each depth */
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i && thread[i] != thread[i - 1]) {  /* another thread: nothing of it open */
            len = 0;
            if (after) while (top) after[stack[--top]] = i;
        }
        while (len && heap[0] <= start[i]) heap_pop(heap, &len);
        Py_ssize_t d = len;  /* < n: at most i spans before i */
        depth[i] = d;
        parent[i] = d ? last[d - 1] : -1;
        last[d] = i;
        heap_push(heap, &len, end[i]);
        if (after) {
            while (top && depth[stack[top - 1]] >= d) after[stack[--top]] = i;
            stack[top++] = i;
        }
    }
    if (after) while (top) after[stack[--top]] = n;
}

static PyObject *depths(PyObject *self, PyObject *args) {
    PyObject *o[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
    static const char *names[6] = {"thread", "start", "end", "depth", "parent", "after"};
    if (!PyArg_UnpackTuple(args, "depths", 5, 6, &o[0], &o[1], &o[2], &o[3], &o[4], &o[5]))
        return NULL;
    int want = o[5] != NULL ? 6 : 5;
    Col c[6];
    int got = 0, ok = 0;
    int64_t *work = NULL;
    if (get_all(o, c, want, 3, names, &got) < 0) goto done;
    Py_ssize_t n = c[0].n;
    for (int i = 1; i < want; i++)
        if (c[i].n != n) {
            PyErr_SetString(PyExc_ValueError, "depths: lengths disagree");
            goto done;
        }
    work = PyMem_Malloc((size_t)(n ? 3 * n : 1) * sizeof(int64_t));
    if (work == NULL) { PyErr_NoMemory(); goto done; }
    Py_BEGIN_ALLOW_THREADS
    run(c[0].p, c[1].p, c[2].p, c[3].p, c[4].p, want == 6 ? c[5].p : NULL, n, work, work + n, work + 2 * n);
    Py_END_ALLOW_THREADS
    ok = 1;
done:
    PyMem_Free(work);
    release_all(c, got);
    if (!ok) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"depths", depths, METH_VARARGS, "Each span's nesting depth and parent on its thread (see the module's source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_nest", NULL, -1, methods};

PyMODINIT_FUNC PyInit__nest(void) { return PyModule_Create(&module); }
