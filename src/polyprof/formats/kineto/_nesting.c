/* polyprof.formats.kineto._nesting: the slice that encloses each slice, in one C loop.
 *
 *   previous_greater(track, end, prev) -> None
 *       For slices sorted by track (then start, longest first), prev[i] = the nearest
 *       earlier slice on i's track whose end is greater than end[i], or -1. `track`
 *       holds int32 or int64, `end` int64, `prev` int32 or int64 (written), all
 *       C-contiguous and of one length.
 *
 * A monotonic stack kept in `prev` itself: the candidates of slice i are i-1, then
 * prev[i-1], prev[prev[i-1]], ... (each slice between two candidates ends no later than
 * the later one), so each slice is passed over at most once: linear, no memory beyond
 * `prev`. flows.py's NumPy pointer jumping (a few dozen whole-column rounds on deep
 * call trees) is the Python path the tests hold this one to.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static int contiguous(PyObject *obj, Py_buffer *view, int writable, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    if (view->ndim != 1 || (view->itemsize != 4 && view->itemsize != 8)) {
        PyErr_Format(PyExc_TypeError, "%s must be a 1-d array of 4- or 8-byte integers", what);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

#define TRACK(i) (t32 ? (int64_t)t32[i] : t64[i])
#define PREV(i) (p32 ? (int64_t)p32[i] : p64[i])

static PyObject *previous_greater(PyObject *self, PyObject *args) {
    PyObject *track_o, *end_o, *prev_o;
    if (!PyArg_ParseTuple(args, "OOO", &track_o, &end_o, &prev_o)) return NULL;
    Py_buffer tv, ev, pv;
    if (contiguous(track_o, &tv, 0, "track") < 0) return NULL;
    if (contiguous(end_o, &ev, 0, "end") < 0) {
        PyBuffer_Release(&tv);
        return NULL;
    }
    if (contiguous(prev_o, &pv, 1, "prev") < 0) {
        PyBuffer_Release(&tv);
        PyBuffer_Release(&ev);
        return NULL;
    }
    Py_ssize_t n = tv.shape[0];
    PyObject *result = NULL;
    if (ev.itemsize != 8 || ev.shape[0] != n || pv.shape[0] != n) {
        PyErr_SetString(PyExc_ValueError, "end must be int64, and track, end and prev of one length");
        goto done;
    }
    if (pv.itemsize == 4 && n > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "prev of int32 for more than 2**31 slices");
        goto done;
    }
    const int32_t *t32 = tv.itemsize == 4 ? (const int32_t *)tv.buf : NULL;
    const int64_t *t64 = (const int64_t *)tv.buf;
    const int64_t *end = (const int64_t *)ev.buf;
    int32_t *p32 = pv.itemsize == 4 ? (int32_t *)pv.buf : NULL;
    int64_t *p64 = (int64_t *)pv.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t c = (i > 0 && TRACK(i - 1) == TRACK(i)) ? (int64_t)(i - 1) : -1;
        while (c >= 0 && end[c] <= end[i]) c = PREV(c);
        if (p32) p32[i] = (int32_t)c; else p64[i] = c;
    }
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&tv);
    PyBuffer_Release(&ev);
    PyBuffer_Release(&pv);
    return result;
}

static PyMethodDef methods[] = {
    {"previous_greater", previous_greater, METH_VARARGS,
     "previous_greater(track, end, prev) -> None: the nearest earlier slice on the track that ends later."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_nesting", "The slice that encloses each slice, in one C loop.", -1, methods,
};

PyMODINIT_FUNC PyInit__nesting(void) { return PyModule_Create(&moduledef); }
