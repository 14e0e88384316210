/* polyprof's int64 array arguments, shared by the compiled analyses (analyze._longest,
 * analyze._nest): a buffer taken from a NumPy int64 array (C-contiguous; writable
 * where asked), or a TypeError naming the argument; several at once, and released.
 * Headers named lowlevel/_shared_*.h are part of every extension's build stamp (polyprof.lowlevel.compiled.sources). */
#ifndef POLYPROF_SHARED_COLS_H
#define POLYPROF_SHARED_COLS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef struct {
    Py_buffer b;
    int64_t *p;
    Py_ssize_t n;
} Col;

static inline int get(PyObject *o, Col *c, int writable, const char *name) {
    if (PyObject_GetBuffer(o, &c->b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    const char *f = c->b.format ? c->b.format : "B";
    if (c->b.itemsize != 8 || !(f[0] == 'q' || f[0] == 'l' || ((f[0] == '<' || f[0] == '=') && (f[1] == 'q' || f[1] == 'l')))) {
        PyBuffer_Release(&c->b);
        PyErr_Format(PyExc_TypeError, "%s must be an int64 array", name);
        return -1;
    }
    c->p = (int64_t *)c->b.buf;
    c->n = c->b.len / 8;
    return 0;
}

/* o[0..n) into c[0..n), from ``first_writable`` on writable; *got: how many were taken
 * (all n, or those before the one that failed: release_all(c, *got) either way). */
static inline int get_all(PyObject *const *o, Col *c, int n, int first_writable, const char *const *names, int *got) {
    for (*got = 0; *got < n; (*got)++)
        if (get(o[*got], &c[*got], *got >= first_writable, names[*got]) < 0)
            return -1;
    return 0;
}

static inline void release_all(Col *c, int got) {
    for (int i = 0; i < got; i++)
        PyBuffer_Release(&c[i].b);
}

#endif
