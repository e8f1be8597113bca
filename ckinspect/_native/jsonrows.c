/* A list of flat records as JSON, in one C pass: the JSON report's tensor list (report/json_report.py), one small dict
 * per tensor, 50,000 of them for a big checkpoint, where json's own C encoder spends most of its time on the many small
 * strings it joins.
 *
 * encode(rows, layout=None) -> str, or None
 *     exactly json.dumps(rows, allow_nan=False, separators=(", ", ": "), check_circular=False) (ensure_ascii, as
 *     json.dumps escapes by default) for a list of dicts whose keys are str and whose values are str, int, True,
 *     False, None, or a list of those; None for anything else (a float, a nested dict, a subclass), which the caller
 *     then gives to json.dumps. Never a different answer, only the same one sooner.
 *     layout (open, close, key, sep), ASCII strings: that text with `open` and `close` in place of its brackets and
 *     `sep` in place of the ", " before each row whose first key is `key` (the report's one line per tensor), as
 *     the caller would otherwise splice it, with no copy of the whole text.
 *
 * Portable C99, the CPython API every 3.10-3.13 has.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define DECLINE 1 /* not done here: the caller takes json.dumps */
#define FAILED (-1) /* a Python exception is set */

typedef struct {
    char *buf;
    Py_ssize_t len, cap;
} Out;

static int grow(Out *o, Py_ssize_t more)
{
    Py_ssize_t cap;
    char *buf;
    if (o->len + more <= o->cap)
        return 0;
    cap = o->cap ? o->cap : 1 << 16;
    while (cap < o->len + more) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return FAILED;
        }
        cap *= 2;
    }
    buf = (char *)PyMem_Realloc(o->buf, (size_t)cap);
    if (buf == NULL) {
        PyErr_NoMemory();
        return FAILED;
    }
    o->buf = buf;
    o->cap = cap;
    return 0;
}

static int put(Out *o, const char *s, Py_ssize_t n)
{
    if (grow(o, n) < 0)
        return FAILED;
    memcpy(o->buf + o->len, s, (size_t)n);
    o->len += n;
    return 0;
}

static const char HEX[] = "0123456789abcdef"; /* json's Py_hexdigits */

static Py_ssize_t escape_one(Py_UCS4 c, char *out) /* _json.c's ascii_escape_unichar */
{
    Py_ssize_t n = 0;
    out[n++] = '\\';
    switch (c) {
    case '\\': out[n++] = '\\'; break;
    case '"': out[n++] = '"'; break;
    case '\b': out[n++] = 'b'; break;
    case '\f': out[n++] = 'f'; break;
    case '\n': out[n++] = 'n'; break;
    case '\r': out[n++] = 'r'; break;
    case '\t': out[n++] = 't'; break;
    default:
        if (c >= 0x10000) { /* a UTF-16 surrogate pair */
            Py_UCS4 v = 0xd800 | (((c - 0x10000) >> 10) & 0x3ff);
            out[n++] = 'u';
            out[n++] = HEX[(v >> 12) & 0xf];
            out[n++] = HEX[(v >> 8) & 0xf];
            out[n++] = HEX[(v >> 4) & 0xf];
            out[n++] = HEX[v & 0xf];
            c = 0xdc00 | ((c - 0x10000) & 0x3ff);
            out[n++] = '\\';
        }
        out[n++] = 'u';
        out[n++] = HEX[(c >> 12) & 0xf];
        out[n++] = HEX[(c >> 8) & 0xf];
        out[n++] = HEX[(c >> 4) & 0xf];
        out[n++] = HEX[c & 0xf];
    }
    return n;
}

static int put_str(Out *o, PyObject *s) /* json's encode_basestring_ascii, quotes included */
{
    Py_ssize_t i, n;
    int kind;
    const void *data;
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(s) < 0)
        return FAILED;
#endif
    n = PyUnicode_GET_LENGTH(s);
    kind = PyUnicode_KIND(s);
    data = PyUnicode_DATA(s);
    if (n > (PY_SSIZE_T_MAX - 2) / 12 || grow(o, 2 + 12 * n) < 0) /* at most 12 bytes a character */
        return FAILED;
    o->buf[o->len++] = '"';
    for (i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= ' ' && c <= '~' && c != '\\' && c != '"')
            o->buf[o->len++] = (char)c;
        else
            o->len += escape_one(c, o->buf + o->len);
    }
    o->buf[o->len++] = '"';
    return 0;
}

static int put_scalar(Out *o, PyObject *v)
{
    if (v == Py_None)
        return put(o, "null", 4);
    if (v == Py_True)
        return put(o, "true", 4);
    if (v == Py_False)
        return put(o, "false", 5);
    if (PyUnicode_CheckExact(v))
        return put_str(o, v);
    if (PyLong_CheckExact(v)) {
        char digits[32];
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow)
            return DECLINE; /* a huge int: json.dumps spells it */
        if (x == -1 && PyErr_Occurred())
            return FAILED;
        return put(o, digits, (Py_ssize_t)PyOS_snprintf(digits, sizeof digits, "%lld", x));
    }
    return DECLINE;
}

static int put_value(Out *o, PyObject *v)
{
    Py_ssize_t i;
    int done;
    if (!PyList_CheckExact(v))
        return put_scalar(o, v);
    if (put(o, "[", 1) < 0)
        return FAILED;
    for (i = 0; i < PyList_GET_SIZE(v); i++) {
        if (i && put(o, ", ", 2) < 0)
            return FAILED;
        done = put_scalar(o, PyList_GET_ITEM(v, i));
        if (done != 0)
            return done;
    }
    return put(o, "]", 1);
}

static int put_row(Out *o, PyObject *row)
{
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    int first = 1, done;
    if (!PyDict_CheckExact(row))
        return DECLINE;
    if (put(o, "{", 1) < 0)
        return FAILED;
    while (PyDict_Next(row, &pos, &key, &value)) {
        if (!PyUnicode_CheckExact(key))
            return DECLINE;
        if ((!first && put(o, ", ", 2) < 0) || put_str(o, key) < 0 || put(o, ": ", 2) < 0)
            return FAILED;
        first = 0;
        done = put_value(o, value);
        if (done != 0)
            return done;
    }
    return put(o, "}", 1);
}

/* The separator before row i: `sep` where the row's first key is `key` (the report's line per tensor), else ", " */
static int put_between(Out *o, PyObject *row, PyObject *key, PyObject *sep)
{
    Py_ssize_t pos = 0;
    PyObject *first, *value;
    if (key != NULL && PyDict_CheckExact(row) && PyDict_Next(row, &pos, &first, &value) &&
        PyUnicode_CheckExact(first) && PyUnicode_Compare(first, key) == 0)
        return put(o, PyUnicode_AsUTF8(sep), PyUnicode_GET_LENGTH(sep));
    return put(o, ", ", 2);
}

static PyObject *encode(PyObject *module, PyObject *args)
{
    Out o = {NULL, 0, 0};
    Py_ssize_t i;
    int done = 0;
    PyObject *rows, *layout = Py_None, *open = NULL, *close = NULL, *key = NULL, *sep = NULL, *text;
    if (!PyArg_ParseTuple(args, "O|O", &rows, &layout))
        return NULL;
    if (layout != Py_None && !PyArg_ParseTuple(layout, "UUUU", &open, &close, &key, &sep))
        return NULL;
    if ((open && !PyUnicode_IS_ASCII(open)) || (close && !PyUnicode_IS_ASCII(close)) ||
        (sep && !PyUnicode_IS_ASCII(sep))) {
        PyErr_SetString(PyExc_ValueError, "encode: the layout's strings must be ASCII");
        return NULL;
    }
    if (!PyList_CheckExact(rows))
        Py_RETURN_NONE;
    if (put(&o, open ? PyUnicode_AsUTF8(open) : "[", open ? PyUnicode_GET_LENGTH(open) : 1) < 0)
        return NULL;
    for (i = 0; i < PyList_GET_SIZE(rows) && done == 0; i++) {
        if (i)
            done = put_between(&o, PyList_GET_ITEM(rows, i), key, sep);
        if (done == 0)
            done = put_row(&o, PyList_GET_ITEM(rows, i));
    }
    if (done == 0)
        done = put(&o, close ? PyUnicode_AsUTF8(close) : "]", close ? PyUnicode_GET_LENGTH(close) : 1);
    if (done != 0) {
        PyMem_Free(o.buf);
        if (done == FAILED)
            return NULL;
        Py_RETURN_NONE;
    }
    text = PyUnicode_DecodeASCII(o.buf, o.len, "strict");
    PyMem_Free(o.buf);
    return text;
}

static PyMethodDef methods[] = {
    {"encode", encode, METH_VARARGS,
     "encode(rows, layout=None) -> json.dumps(rows, separators=(', ', ': ')) for a list of flat dicts, or None (use "
     "json.dumps); layout (open, close, key, sep): open and close instead of the brackets, sep instead of ', ' "
     "before each row whose first key is key"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "jsonrows",
                                       "a list of flat records as JSON in one C pass (see jsonrows.c)", -1, methods};

PyMODINIT_FUNC PyInit_jsonrows(void) { return PyModule_Create(&moduledef); }
