/* The four profiling timestamps of many OpenCL events in one C loop.
 *
 * pyopencl's Event.get_profiling_info is a Python call per timestamp (about 1 us each),
 * four per recorded command: most of the OpenCL plugin's cost at stop. This calls the
 * OpenCL ICD loader's clGetEventProfilingInfo (its address handed in from Python, taken
 * from the loader pyopencl itself uses) for every event, without the GIL. No OpenCL
 * header is needed: the signature and the four parameter names are fixed by the OpenCL
 * specification.
 *
 * times(fn, events, out, status): fn the function's address; events a buffer of n int64
 * cl_event handles (held alive by the caller's pyopencl Event objects); out a writable
 * buffer of 4n int64 (queued, submit, start, end), -1 where a call failed; status a
 * writable buffer of n int32, the first failing call's error code (0: all four ok).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stddef.h>

typedef int32_t (*get_info_fn)(void *event, uint32_t param, size_t size, void *value, size_t *size_ret);

static const uint32_t PARAMS[4] = {0x1280, 0x1281, 0x1282, 0x1283}; /* QUEUED SUBMIT START END */

static PyObject *times(PyObject *self, PyObject *args) {
    unsigned long long fn_addr;
    Py_buffer events, out, status;
    if (!PyArg_ParseTuple(args, "Ky*w*w*", &fn_addr, &events, &out, &status))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = events.len / (Py_ssize_t)sizeof(int64_t);
    if (fn_addr == 0) {
        PyErr_SetString(PyExc_ValueError, "times: no clGetEventProfilingInfo address");
    } else if (events.len % (Py_ssize_t)sizeof(int64_t) || out.len != 4 * events.len
               || status.len != n * (Py_ssize_t)sizeof(int32_t)) {
        PyErr_SetString(PyExc_ValueError, "times: events must be n int64, out 4n int64, status n int32");
    } else {
        get_info_fn get = (get_info_fn)(uintptr_t)fn_addr;
        const int64_t *ev = (const int64_t *)events.buf;
        int64_t *ts = (int64_t *)out.buf;
        int32_t *st = (int32_t *)status.buf;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            st[i] = 0;
            for (int j = 0; j < 4; j++) {
                uint64_t v = 0;
                int32_t rc = ev[i] ? get((void *)(uintptr_t)ev[i], PARAMS[j], sizeof v, &v, NULL) : -58;
                if (rc != 0) {
                    if (st[i] == 0)
                        st[i] = rc;
                    ts[4 * i + j] = -1;
                } else {
                    ts[4 * i + j] = (int64_t)v;
                }
            }
        }
        Py_END_ALLOW_THREADS
        Py_INCREF(Py_None);
        result = Py_None;
    }
    PyBuffer_Release(&events);
    PyBuffer_Release(&out);
    PyBuffer_Release(&status);
    return result;
}

static PyMethodDef methods[] = {
    {"times", times, METH_VARARGS, "times(fn, events, out, status): profiling timestamps of many events."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_profinfo", NULL, -1, methods};

PyMODINIT_FUNC PyInit__profinfo(void) { return PyModule_Create(&module); }
