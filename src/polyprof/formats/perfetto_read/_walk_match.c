/* polyprof.formats.perfetto_read._walk.match: slice begins and ends paired by one walk of
 * the rows in file order, a stack per track (slices.py has the same in NumPy, the
 * reference it is tested against). Memory: the begins, their ends and one link per
 * begin, with one stack top per track code; nothing per row beyond the inputs. */
#include "_walk.h"

enum { K_BEGIN = 1, K_END = 2 }; /* collector.BEGIN, collector.END */

/* match(kind: int8 buffer, track: int64 buffer) -> (begins: bytes of int64 rows in file
 * order, ends: bytes of int64, the row of the end closing each begin or -1, orphans:
 * the ends that closed nothing), or None where the track codes are not small
 * non-negative integers (the NumPy reference then). */
PyObject *
pw_match(PyObject *self, PyObject *args)
{
    Py_buffer kb, tb;
    if (!PyArg_ParseTuple(args, "y*y*", &kb, &tb))
        return NULL;
    PyObject *out = NULL, *bb = NULL, *eb = NULL;
    int64_t *top = NULL, *link = NULL;
    const int8_t *kind = kb.buf;
    const int64_t *track = tb.buf;
    Py_ssize_t n = kb.len;
    if (tb.len != n * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "match: kind and track differ in length");
        goto done;
    }
    Py_ssize_t nb = 0;
    int64_t hi = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (kind[i] != K_BEGIN && kind[i] != K_END)
            continue;
        if (track[i] < 0 || track[i] > 4 * (int64_t)n + (1 << 20)) {
            out = Py_NewRef(Py_None);
            goto done;
        }
        if (track[i] > hi)
            hi = track[i];
        nb += kind[i] == K_BEGIN;
    }
    bb = PyBytes_FromStringAndSize(NULL, nb * (Py_ssize_t)sizeof(int64_t));
    eb = PyBytes_FromStringAndSize(NULL, nb * (Py_ssize_t)sizeof(int64_t));
    top = PyMem_Malloc((size_t)(hi + 1) * sizeof(int64_t) + 1);
    link = PyMem_Malloc((size_t)nb * sizeof(int64_t) + 1);
    if (!bb || !eb || !top || !link) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    int64_t *begins = (int64_t *)PyBytes_AS_STRING(bb), *ends = (int64_t *)PyBytes_AS_STRING(eb);
    for (int64_t t = 0; t <= hi; t++)
        top[t] = -1;
    Py_ssize_t b = 0, orphans = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (kind[i] == K_BEGIN) {
            int64_t t = track[i];
            begins[b] = i;
            ends[b] = -1;
            link[b] = top[t];
            top[t] = b++;
        } else if (kind[i] == K_END) {
            int64_t t = track[i], open = top[t];
            if (open < 0) {
                orphans++;
            } else {
                ends[open] = i;
                top[t] = link[open];
            }
        }
    }
    out = Py_BuildValue("(OOn)", bb, eb, orphans);
done:
    Py_XDECREF(bb);
    Py_XDECREF(eb);
    PyMem_Free(top);
    PyMem_Free(link);
    PyBuffer_Release(&kb);
    PyBuffer_Release(&tb);
    return out;
}
