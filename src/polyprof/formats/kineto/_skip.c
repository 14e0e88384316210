/* polyprof.formats.kineto._skip: the extent of one JSON value read in pieces, checked as it goes.
 *
 *   Skipper().feed(buf, start) -> int
 *       Reads buf[start:] on from where the last piece ended: the index in buf just past
 *       the value's end, or -1 (the value goes on: feed the next piece; the bytes read
 *       may be let go), or -2 (a fault: .what says what is wrong, .at its byte counted
 *       from the value's first byte).
 *   Skipper().finish() -> int
 *       At the end of the input: 1 the value ended there (a number), 0 it did not, -2 a
 *       fault (a raw control character in a string never closed, which lenient.py mends
 *       only in a closed one).
 *   Skipper().holds -> False
 *       The bytes a feed has read are not read again: the caller may let them go.
 *
 * Used by toplevel.py for a top-level value of a Chrome/Kineto JSON object too long to
 * read (a `systemTraceEvents` string, a `stackFrames` object of hundreds of MB): nothing
 * is built and nothing is kept, so its memory is this object's stack of open brackets;
 * a feed runs without the GIL (ranks' files are read in threads at once).
 * A value is checked as msgspec checks a value it skips (json_skip in msgspec's _core.c:
 * the same faults at the same bytes, in its words; UTF-8 is not checked), with what
 * lenient.py mends accepted: a raw control character in a string, and a comma followed
 * (after white space) by a closing bracket. toplevel.py's Python path (msgspec on the
 * value's whole text, lenient.repair where msgspec finds a fault) is what the tests
 * hold this one to.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "structmember.h"

enum {
    V_VALUE, V_ARR_FIRST, V_ARR_NEXT, V_ARR_ELEM, V_OBJ_FIRST, V_OBJ_NEXT, V_OBJ_KEY, V_COLON,
    V_STR, V_ESC, V_HEX, V_LOW, V_LIT, V_MINUS, V_ZERO, V_INT, V_DOT,
    V_FRAC, V_E, V_ESIGN, V_EXP, V_COMMA, V_DONE, V_FAULT
};

typedef struct {
    PyObject_HEAD
    int state;
    int saved;              /* V_COMMA: the state the comma came in */
    int key;                /* V_STR: the string is an object's key */
    unsigned char *stack;   /* open brackets: 1 an object, 0 an array */
    Py_ssize_t depth, cap;
    long long seen;         /* bytes of the value read before this piece */
    long long mark;         /* a literal's first byte; a comma's byte; where a low surrogate's '\\' must be */
    long long odd;          /* V_COMMA: the first \f or \v after the comma (lenient's \s, not JSON's), or -1 */
    const char *lit;        /* V_LIT: the rest of the literal */
    int hex_n;              /* V_HEX, V_LOW: the bytes of the escape read */
    unsigned int cp;
    const char *bad;        /* V_HEX, V_LOW, V_LIT: the fault found, said once the bytes msgspec reads are read */
    long long bad_at;
    const char *ctl;        /* the first raw control character of the string read (lenient.py mends it, */
    long long ctl_at;       /* where the string closes), or -1 */
    const char *what;       /* the fault's words (after feed gave -2), or NULL */
    long long at;
} Skipper;

/* bytes a string's plain run stops at: '"', '\\' (a raw control character is mended by lenient.py); and
 * with the control characters, until the string's first */
static unsigned char SPECIAL[256], SPECIAL_CTL[256];

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

#define WS(c) ((c) == ' ' || (c) == '\n' || (c) == '\r' || (c) == '\t')
#define DIGIT(c) ((c) >= '0' && (c) <= '9')

static int push(Skipper *s, unsigned char what) {
    if (s->depth == s->cap) {
        Py_ssize_t cap = s->cap ? 2 * s->cap : 64;
        unsigned char *st = PyMem_RawRealloc(s->stack, cap);  /* (raw: run() holds no GIL) */
        if (st == NULL) return -1;
        s->stack = st;
        s->cap = cap;
    }
    s->stack[s->depth++] = what;
    return 0;
}

/* A value just ended: 1 when it is the whole value, else the state its container reads next in. */
static int ended(Skipper *s) {
    if (s->depth == 0) {
        s->state = V_DONE;
        return 1;
    }
    s->state = s->stack[s->depth - 1] ? V_OBJ_NEXT : V_ARR_NEXT;
    return 0;
}

/* What msgspec says of a byte that cannot come next in `state` (a value's start, a key's, ...). */
static const char *unexpected(int state) {
    switch (state) {
    case V_ARR_NEXT: return "expected ',' or ']'";
    case V_OBJ_NEXT: return "expected ',' or '}'";
    case V_OBJ_FIRST: case V_OBJ_KEY: return "expected '\"'";
    case V_COLON: return "expected ':'";
    default: return "invalid character";
    }
}

/* The state a comma kept (not followed by a closing bracket) leads to, or -1: a fault at the comma. */
static int after_comma(int state) {
    if (state == V_ARR_NEXT) return V_ARR_ELEM;
    if (state == V_OBJ_NEXT) return V_OBJ_KEY;
    return -1;
}

static Py_ssize_t fail(Skipper *s, const char *what, long long at) {
    s->what = what;
    s->at = at;
    s->state = V_FAULT;
    return -2;
}

/* The value's first byte `c` at p (not white space): -3 out of memory, -2 a fault, 0 read on. */
static Py_ssize_t begin(Skipper *s, unsigned char c, long long pos) {
    switch (c) {
    case '{':
        if (push(s, 1) < 0) return -3;
        s->state = V_OBJ_FIRST;
        return 0;
    case '[':
        if (push(s, 0) < 0) return -3;
        s->state = V_ARR_FIRST;
        return 0;
    case '"': s->state = V_STR; s->key = 0; s->ctl_at = -1; return 0;
    case 't': s->lit = "rue"; break;
    case 'f': s->lit = "alse"; break;
    case 'n': s->lit = "ull"; break;
    case '-': s->state = V_MINUS; return 0;
    case '0': s->state = V_ZERO; return 0;
    default:
        if (c >= '1' && c <= '9') {
            s->state = V_INT;
            return 0;
        }
        return fail(s, "invalid character", pos);
    }
    s->state = V_LIT;
    s->mark = pos;
    s->bad = NULL;
    return 0;
}

static Py_ssize_t run(Skipper *s, const unsigned char *b, Py_ssize_t start, Py_ssize_t n) {
    const unsigned char *p = b + start, *e = b + n;
    long long base = s->seen - start;  /* the value's byte of buf[0] */
#define POS(q) (base + ((q) - b))
#define FAIL(msg, at) return fail(s, (msg), (at))
    while (p < e) {
        unsigned char c = *p;
        Py_ssize_t r;
        switch (s->state) {
        case V_STR:
            if (s->ctl_at < 0) {  /* (the first raw control character of a string is marked: see finish) */
                while (p < e && !SPECIAL_CTL[*p]) p++;
                if (p < e && *p < 0x20) {
                    s->ctl = "invalid character";
                    s->ctl_at = POS(p++);
                    continue;
                }
            } else while (p < e && !SPECIAL[*p]) p++;
            if (p == e) goto more;
            if (*p++ == '\\') {
                s->state = V_ESC;
                continue;
            }
            if (s->key) {
                s->key = 0;
                s->state = V_COLON;
            } else if (ended(s)) goto done;
            continue;
        case V_ESC:
            p++;
            if (c == 'u') {
                s->state = V_HEX;
                s->hex_n = 0;
                s->cp = 0;
                s->bad = NULL;
            } else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' ||
                       c == 't' || c < 0x20) {  /* (a raw control character: lenient.py escapes it) */
                if (c < 0x20 && s->ctl_at < 0) {
                    s->ctl = "invalid escaped character";
                    s->ctl_at = POS(p - 1);
                }
                s->state = V_STR;
            } else FAIL("invalid escaped character", POS(p - 1));
            continue;
        case V_HEX: case V_LOW: {  /* (msgspec reads 4 bytes, and 6 after a high surrogate, before it judges) */
            int h = hexval(c);
            p++;
            if (s->state == V_LOW && s->hex_n < 2) {
                if (c != (s->hex_n ? 'u' : '\\') && s->bad == NULL) {
                    s->bad = "unexpected end of hex escape";
                    s->bad_at = s->mark;
                }
                s->hex_n++;
                continue;
            }
            if (h < 0 && s->bad == NULL) {
                s->bad = "invalid character in unicode escape";
                s->bad_at = POS(p);  /* (msgspec: the byte after it) */
            }
            s->cp = (s->cp << 4) | (unsigned)(h & 15);
            if (++s->hex_n < (s->state == V_LOW ? 6 : 4)) continue;
            if (s->bad != NULL) FAIL(s->bad, s->bad_at);
            if (s->state == V_LOW || (0xDC00 <= s->cp && s->cp <= 0xDFFF)) {
                if (s->state != V_LOW || s->cp < 0xDC00 || s->cp > 0xDFFF) FAIL("invalid utf-16 surrogate pair", POS(p));
                s->state = V_STR;
            } else if (0xD800 <= s->cp && s->cp <= 0xDBFF) {  /* a high surrogate: a low one must follow */
                s->state = V_LOW;
                s->mark = POS(p);
                s->hex_n = 0;
                s->cp = 0;
            } else s->state = V_STR;
            continue;
        }
        case V_LIT:  /* (msgspec reads the literal's length before it judges) */
            if (c != (unsigned char)*s->lit && s->bad == NULL) {
                s->bad = "invalid character";
                s->bad_at = s->mark + 1;
            }
            p++;
            if (*++s->lit) continue;
            if (s->bad != NULL) FAIL(s->bad, s->bad_at);
            if (ended(s)) goto done;
            continue;
        case V_MINUS:
            if (!DIGIT(c)) FAIL("invalid character", POS(p));
            p++;
            s->state = c == '0' ? V_ZERO : V_INT;
            continue;
        case V_ZERO:
            if (DIGIT(c)) FAIL("invalid number", POS(p));
            goto integer_end;
        case V_INT:
            while (p < e && DIGIT(*p)) p++;
            if (p == e) goto more;
            c = *p;
        integer_end:
            if (c == '.') {
                p++;
                s->state = V_DOT;
                continue;
            }
            goto fraction_end;
        case V_DOT:
            if (!DIGIT(c)) FAIL("invalid number", POS(p));
            p++;
            s->state = V_FRAC;
            continue;
        case V_FRAC:
            while (p < e && DIGIT(*p)) p++;
            if (p == e) goto more;
            c = *p;
        fraction_end:
            if (c == 'e' || c == 'E') {
                p++;
                s->state = V_E;
                continue;
            }
            goto number_end;
        case V_E:
            if (c == '+' || c == '-') {
                p++;
                s->state = V_ESIGN;
                continue;
            }
            /* fall through */
        case V_ESIGN:
            if (!DIGIT(c)) FAIL("invalid number", POS(p));
            p++;
            s->state = V_EXP;
            continue;
        case V_EXP:
            while (p < e && DIGIT(*p)) p++;
            if (p == e) goto more;
        number_end:
            if (ended(s)) goto done;
            continue;  /* the byte after the number, read in its container's state */
        case V_COMMA:
            if (WS(c) || c == '\f' || c == '\v') {
                if (!WS(c) && s->odd < 0) s->odd = POS(p);
                p++;
                continue;
            }
            if (c == ']' || c == '}') {  /* a trailing comma: lenient.py drops it */
                s->state = s->saved;
                if (s->odd >= 0) FAIL(unexpected(s->state), s->odd);
                continue;  /* the bracket, read as if the comma had not been */
            }
            s->state = after_comma(s->saved);
            if (s->state < 0) FAIL(unexpected(s->saved), s->mark);
            if (s->odd >= 0) FAIL(unexpected(s->state == V_ARR_ELEM ? V_VALUE : s->state), s->odd);
            continue;  /* the byte after the comma, read in the state the comma led to */
        case V_DONE:
            goto done;
        case V_FAULT:
            return -2;
        default:  /* the states that read white space, commas and brackets */
            if (WS(c)) {
                p++;
                continue;
            }
            if (c == ',') {
                s->saved = s->state;
                s->state = V_COMMA;
                s->mark = POS(p++);
                s->odd = -1;
                continue;
            }
            if (c == ']' && (s->state == V_ARR_FIRST || s->state == V_ARR_NEXT)) {
                p++;
                s->depth--;
                if (ended(s)) goto done;
                continue;
            }
            if (c == '}' && (s->state == V_OBJ_FIRST || s->state == V_OBJ_NEXT)) {
                p++;
                s->depth--;
                if (ended(s)) goto done;
                continue;
            }
            if (s->state == V_ARR_ELEM && c == ']') FAIL("trailing comma in array", POS(p));
            if (s->state == V_OBJ_KEY && c == '}') FAIL("trailing comma in object", POS(p));
            if (s->state == V_OBJ_FIRST || s->state == V_OBJ_KEY) {
                if (c != '"') FAIL("expected '\"'", POS(p));
                p++;
                s->state = V_STR;
                s->key = 1;
                s->ctl_at = -1;
                continue;
            }
            if (s->state == V_COLON) {
                if (c != ':') FAIL("expected ':'", POS(p));
                p++;
                s->state = V_VALUE;
                continue;
            }
            if (s->state == V_ARR_NEXT || s->state == V_OBJ_NEXT) FAIL(unexpected(s->state), POS(p));
            r = begin(s, c, POS(p));  /* V_VALUE, V_ARR_FIRST, V_ARR_ELEM: a value */
            if (r < 0) return r;
            p++;
            continue;
        }
    }
more:
    s->seen += n - start;
    return -1;
done:
    s->seen += (p - b) - start;
    return p - b;
#undef POS
#undef FAIL
}

static PyObject *skipper_feed(Skipper *s, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "y*n", &view, &start)) return NULL;
    if (start < 0 || start > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "start out of range");
        return NULL;
    }
    Py_ssize_t r;
    if (s->state == V_FAULT) r = -2;
    else if (s->state == V_DONE) r = start;
    else {
        Py_BEGIN_ALLOW_THREADS  /* (the buffer stays exported, so it cannot be resized meanwhile) */
        r = run(s, (const unsigned char *)view.buf, start, view.len);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&view);
    if (r == -3) return PyErr_NoMemory();
    return PyLong_FromSsize_t(r);
}

static PyObject *skipper_finish(Skipper *s, PyObject *unused) {
    int st = s->state;
    if ((st == V_STR || st == V_ESC || st == V_HEX || st == V_LOW) && s->ctl_at >= 0) {
        /* a string never closed: lenient.py mends no control character in it, msgspec refuses the first */
        return PyLong_FromSsize_t(fail(s, s->ctl, s->ctl_at));
    }
    if (st == V_COMMA) {  /* a comma last: no closing bracket follows, so it is kept (and may be a fault) */
        int next = after_comma(s->saved);
        Py_ssize_t r = 0;
        if (next < 0) r = fail(s, unexpected(s->saved), s->mark);
        else if (s->odd >= 0) r = fail(s, unexpected(next == V_ARR_ELEM ? V_VALUE : next), s->odd);
        return PyLong_FromSsize_t(r);
    }
    if ((st == V_ZERO || st == V_INT || st == V_FRAC || st == V_EXP) && s->depth == 0) s->state = V_DONE;
    return PyLong_FromLong(s->state == V_DONE);
}

static int skipper_init(Skipper *s, PyObject *args, PyObject *kw) {
    if (!PyArg_ParseTuple(args, ":Skipper")) return -1;
    s->state = V_VALUE;
    s->depth = 0;
    s->seen = 0;
    s->key = 0;
    s->at = -1;
    s->ctl_at = -1;
    s->what = NULL;
    return 0;
}

static void skipper_dealloc(Skipper *s) {
    PyMem_RawFree(s->stack);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyMethodDef skipper_methods[] = {
    {"feed", (PyCFunction)skipper_feed, METH_VARARGS,
     "feed(buf, start) -> the index past the value's end in buf, -1 (read on) or -2 (a fault: .what, .at)"},
    {"finish", (PyCFunction)skipper_finish, METH_NOARGS,
     "finish() -> 1 the value ended at the end of the input, 0 not, -2 a fault (.what, .at)"},
    {NULL, NULL, 0, NULL},
};

static PyObject *skipper_what(Skipper *s, void *unused) {
    if (s->what == NULL) Py_RETURN_NONE;
    return PyUnicode_FromString(s->what);
}

static PyMemberDef skipper_members[] = {
    {"at", T_LONGLONG, offsetof(Skipper, at), READONLY, "the fault's byte, from the value's first"},
    {NULL, 0, 0, 0, NULL},
};

static PyObject *skipper_holds(Skipper *s, void *unused) { Py_RETURN_FALSE; }

static PyGetSetDef skipper_getset[] = {
    {"what", (getter)skipper_what, NULL, "what is wrong (after feed or finish gave -2)", NULL},
    {"holds", (getter)skipper_holds, NULL, "whether the value's text must stay in the buffer while it is read: no", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SkipperType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "polyprof.formats.kineto._skip.Skipper",
    .tp_basicsize = sizeof(Skipper),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The extent of one JSON value read in pieces, checked as msgspec skips a value.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)skipper_init,
    .tp_dealloc = (destructor)skipper_dealloc,
    .tp_methods = skipper_methods,
    .tp_members = skipper_members,
    .tp_getset = skipper_getset,
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_skip", "The extent of one JSON value read in pieces, checked as it goes.", -1, NULL,
};

PyMODINIT_FUNC PyInit__skip(void) {
    SPECIAL['"'] = SPECIAL['\\'] = SPECIAL_CTL['"'] = SPECIAL_CTL['\\'] = 1;
    for (int c = 0; c < 0x20; c++) SPECIAL_CTL[c] = 1;
    if (PyType_Ready(&SkipperType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    Py_INCREF(&SkipperType);
    if (PyModule_AddObject(m, "Skipper", (PyObject *)&SkipperType) < 0) {
        Py_DECREF(&SkipperType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
