/* polyprof.formats.kineto._gather: one field of many decoded trace events, in one C loop.
 *
 * The reader decodes a slice of events into msgspec structs (events.py `_Event`) and
 * makes a column of each field it keeps. In Python that is a comprehension per field
 * (`[table[e.pid] for e in evs]`, then `np.array`): an interpreted step and a Python
 * int per event and field. Here:
 *
 *   codes(events, field, table, itemsize) -> bytearray | None
 *       table[event.field] for every event, as native signed integers of `itemsize`
 *       bytes (1, 4 or 8); None as soon as a value is not in `table` (or cannot be
 *       hashed), or a code does not fit: the caller then takes its Python path, which
 *       handles (and numbers) such values.
 *   values(events, field) -> list
 *       event.field for every event.
 *
 * `field` is the struct's member descriptor (`_Event.__dict__["pid"]`): its slot is read
 * directly. Every event must be an instance of exactly that struct type (else None /
 * TypeError), so the slot is there; a slot left empty is None / TypeError too.
 * gather.py holds the Python path the tests hold this one to.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

/* The slot offset and owner type of a member descriptor of an object slot; -1 if not one. */
static Py_ssize_t slot_of(PyObject *field, PyTypeObject **owner) {
    if (!Py_IS_TYPE(field, &PyMemberDescr_Type)) {
        PyErr_SetString(PyExc_TypeError, "field must be a member descriptor of the event struct");
        return -1;
    }
    PyMemberDescrObject *d = (PyMemberDescrObject *)field;
    if (d->d_member->type != T_OBJECT_EX && d->d_member->type != T_OBJECT) {
        PyErr_SetString(PyExc_TypeError, "field must be an object slot");
        return -1;
    }
    *owner = d->d_common.d_type;
    return d->d_member->offset;
}

static inline PyObject *slot(PyObject *ev, PyTypeObject *owner, Py_ssize_t offset) {
    if (Py_TYPE(ev) != owner) return NULL;
    return *(PyObject **)((char *)ev + offset);
}

static PyObject *codes(PyObject *self, PyObject *args) {
    PyObject *events, *field, *table;
    int itemsize;
    if (!PyArg_ParseTuple(args, "O!OO!i", &PyList_Type, &events, &field, &PyDict_Type, &table, &itemsize))
        return NULL;
    if (itemsize != 1 && itemsize != 4 && itemsize != 8) {
        PyErr_SetString(PyExc_ValueError, "itemsize must be 1, 4 or 8");
        return NULL;
    }
    PyTypeObject *owner;
    Py_ssize_t offset = slot_of(field, &owner);
    if (offset < 0) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(events);
    long long lo = itemsize == 1 ? INT8_MIN : itemsize == 4 ? INT32_MIN : INT64_MIN;
    long long hi = itemsize == 1 ? INT8_MAX : itemsize == 4 ? INT32_MAX : INT64_MAX;
    PyObject *out = PyByteArray_FromStringAndSize(NULL, n * itemsize);
    if (!out) return NULL;
    char *buf = PyByteArray_AS_STRING(out);
    PyObject *last_key = NULL;  /* runs of one value (a thread's events) look up once */
    long long last_code = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = slot(PyList_GET_ITEM(events, i), owner, offset);
        if (!v) goto other;
        long long c;
        if (v == last_key) {
            c = last_code;
        } else {
            PyObject *code = PyDict_GetItemWithError(table, v);  /* borrowed */
            if (!code) {
                if (PyErr_Occurred()) PyErr_Clear();  /* unhashable: the Python path says what */
                goto other;
            }
            if (!PyLong_CheckExact(code)) goto other;
            int overflow = 0;
            c = PyLong_AsLongLongAndOverflow(code, &overflow);
            if (overflow || c < lo || c > hi) goto other;
            last_key = v;  /* borrowed: the list holds the event, the event its value */
            last_code = c;
        }
        if (itemsize == 8) {
            int64_t x = (int64_t)c;
            memcpy(buf + i * 8, &x, 8);
        } else if (itemsize == 4) {
            int32_t x = (int32_t)c;
            memcpy(buf + i * 4, &x, 4);
        } else {
            buf[i] = (char)(int8_t)c;
        }
    }
    return out;
other:
    Py_DECREF(out);
    Py_RETURN_NONE;
}

static PyObject *values(PyObject *self, PyObject *args) {
    PyObject *events, *field;
    if (!PyArg_ParseTuple(args, "O!O", &PyList_Type, &events, &field)) return NULL;
    PyTypeObject *owner;
    Py_ssize_t offset = slot_of(field, &owner);
    if (offset < 0) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(events);
    PyObject *out = PyList_New(n);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = slot(PyList_GET_ITEM(events, i), owner, offset);
        if (!v) {
            Py_DECREF(out);
            PyErr_SetString(PyExc_TypeError, "an event is not of the struct type, or lacks the field");
            return NULL;
        }
        Py_INCREF(v);
        PyList_SET_ITEM(out, i, v);
    }
    return out;
}

static PyMethodDef methods[] = {
    {"codes", codes, METH_VARARGS,
     "codes(events, field, table, itemsize) -> bytearray | None: table[event.field] for every event, as "
     "native integers of itemsize bytes; None where a value is not in table or a code does not fit."},
    {"values", values, METH_VARARGS, "values(events, field) -> list: event.field for every event."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_gather", "One field of many decoded Kineto events, in one C loop.", -1, methods,
};

PyMODINIT_FUNC PyInit__gather(void) { return PyModule_Create(&moduledef); }
