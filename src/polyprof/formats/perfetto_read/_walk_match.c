/* polyprof.formats.perfetto_read._walk.match: slice begins and ends paired per track in
 * time order, stable (file order where times tie), as Perfetto's trace processor sorts
 * by (time, position in the file) before it parses; slices.py has the same in NumPy,
 * the reference it is tested against.
 *
 * Most tracks are already in time order in the file: those are paired by one walk in
 * file order, a stack per track. A track whose times go back somewhere (Chrome's async
 * tracks written from two packet sequences: begins on one, ends on another) has its
 * rows set aside as (time, row, begin slot), sorted by (time, row), and walked after.
 * Memory: the begins, their ends and one link per begin, a stack top and a flag per
 * track code, and the set-aside rows of the tracks out of order; nothing per row of the
 * tracks in order beyond the inputs. */
#include "_walk.h"

#include <stdlib.h>

enum { K_BEGIN = 1, K_END = 2 }; /* collector.BEGIN, collector.END */

typedef struct {
    int64_t ts, row, slot; /* slot: the begin's index in the begins, -1 for an end */
} aside_t;

static int
aside_cmp(const void *a, const void *b)
{
    const aside_t *x = a, *y = b;
    if (x->ts != y->ts)
        return x->ts < y->ts ? -1 : 1;
    return (x->row > y->row) - (x->row < y->row); /* rows are distinct: a total order */
}

/* Marks in late[t] each track whose begin/end times ever go back in file order, using
 * top[] as the latest time seen per track; returns how many rows those tracks hold. */
static Py_ssize_t
find_late(Py_ssize_t n, const int8_t *kind, const int64_t *track, const int64_t *ts, int64_t hi, int64_t *top,
          char *late)
{
    for (int64_t t = 0; t <= hi; t++) {
        top[t] = INT64_MIN;
        late[t] = 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (kind[i] != K_BEGIN && kind[i] != K_END)
            continue;
        int64_t t = track[i];
        if (ts[i] < top[t])
            late[t] = 1;
        else
            top[t] = ts[i];
    }
    Py_ssize_t m = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        m += (kind[i] == K_BEGIN || kind[i] == K_END) && late[track[i]];
    return m;
}

/* match(kind: int8 buffer, track: int64 buffer, ts: int64 buffer) -> (begins: bytes of
 * int64 rows in file order, ends: bytes of int64, the row of the end closing each begin
 * or -1, orphans: the ends that closed nothing), or None where the track codes are not
 * small non-negative integers (the NumPy reference then). */
PyObject *
pw_match(PyObject *self, PyObject *args)
{
    Py_buffer kb, tb, sb;
    if (!PyArg_ParseTuple(args, "y*y*y*", &kb, &tb, &sb))
        return NULL;
    PyObject *out = NULL, *bb = NULL, *eb = NULL;
    int64_t *top = NULL, *link = NULL;
    char *late = NULL;
    aside_t *aside = NULL;
    const int8_t *kind = kb.buf;
    const int64_t *track = tb.buf, *ts = sb.buf;
    Py_ssize_t n = kb.len;
    if (tb.len != n * (Py_ssize_t)sizeof(int64_t) || sb.len != n * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "match: kind, track and ts differ in length");
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
    late = PyMem_Malloc((size_t)(hi + 1) + 1);
    link = PyMem_Malloc((size_t)nb * sizeof(int64_t) + 1);
    if (!bb || !eb || !top || !late || !link) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t m = find_late(n, kind, track, ts, hi, top, late), a = 0;
    aside = PyMem_Malloc((size_t)m * sizeof(aside_t) + 1);
    if (!aside) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *begins = (int64_t *)PyBytes_AS_STRING(bb), *ends = (int64_t *)PyBytes_AS_STRING(eb);
    for (int64_t t = 0; t <= hi; t++)
        top[t] = -1;
    Py_ssize_t b = 0, orphans = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (kind[i] != K_BEGIN && kind[i] != K_END)
            continue;
        int64_t t = track[i];
        if (kind[i] == K_BEGIN) {
            begins[b] = i;
            ends[b] = -1;
            if (late[t]) {
                aside[a++] = (aside_t){ts[i], i, b};
                b++;
                continue;
            }
            link[b] = top[t];
            top[t] = b++;
        } else if (late[t]) {
            aside[a++] = (aside_t){ts[i], i, -1};
        } else if (top[t] < 0) {
            orphans++;
        } else {
            ends[top[t]] = i;
            top[t] = link[top[t]];
        }
    }
    qsort(aside, (size_t)m, sizeof(aside_t), aside_cmp);
    for (Py_ssize_t j = 0; j < m; j++) { /* the tracks out of order, by (time, row) */
        int64_t t = track[aside[j].row], s = aside[j].slot;
        if (s >= 0) {
            link[s] = top[t];
            top[t] = s;
        } else if (top[t] < 0) {
            orphans++;
        } else {
            ends[top[t]] = aside[j].row;
            top[t] = link[top[t]];
        }
    }
    out = Py_BuildValue("(OOn)", bb, eb, orphans);
done:
    Py_XDECREF(bb);
    Py_XDECREF(eb);
    PyMem_Free(top);
    PyMem_Free(late);
    PyMem_Free(link);
    PyMem_Free(aside);
    PyBuffer_Release(&kb);
    PyBuffer_Release(&tb);
    PyBuffer_Release(&sb);
    return out;
}
