/* polyprof's growable byte buffer, shared by the compiled readers (xspace._wire,
 * perfetto_read._walk, formats._kineto_memory): columns are appended value by value
 * and handed to Python as bytes. Headers named lowlevel/_shared_*.h are part of every
 * extension's build stamp (polyprof.lowlevel.compiled.sources). */
#ifndef POLYPROF_SHARED_VEC_H
#define POLYPROF_SHARED_VEC_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    char *p;
    size_t n, cap;
} vec_t;

/* Appends ``size`` bytes; 0, or -1 with MemoryError set. */
static inline int
vec_push(vec_t *v, const void *x, size_t size)
{
    if (v->n + size > v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4096;
        while (cap < v->n + size)
            cap *= 2;
        char *q = PyMem_Realloc(v->p, cap);
        if (!q) {
            PyErr_NoMemory();
            return -1;
        }
        v->p = q;
        v->cap = cap;
    }
    memcpy(v->p + v->n, x, size);
    v->n += size;
    return 0;
}

#endif
