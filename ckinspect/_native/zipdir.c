/* The zip layer's two per-member loops (ckinspect/io/zipdir.py) in C: the central directory's entries, and where
 * each member's bytes start (its local header). A torch.save of 50,000 tensors has 50,000 members: in Python these
 * two loops cost more than decoding its pickle.
 *
 * central(directory, count, base, member_type) -> list of member_type, or None
 *     read_directory's loop over the directory's bytes: each entry as member_type (a tuple subclass, ZipMember)
 *     (name decoded as UTF-8 with "replace", base + header offset, method, compressed size, size, CRC-32, flags),
 *     the 32-bit fields marked 0xFFFFFFFF taken from the zip64 extra field as zipdir.zip64_extra takes them.
 *     None whenever an entry is anything but whole and well-formed (a bad signature, the directory ending inside
 *     an entry, a zip64 field shorter than it says): the Python loop then runs and says what is wrong, so this
 *     never gives an answer the Python loop would not.
 *
 * local_offsets(read_at, block, members) -> list of int or None
 *     data_offsets's loop: per member (a tuple whose item 1 is its local header's offset), the position of its
 *     first byte (header + 30 + name length + extra length, read from the local header), or None where the local
 *     header is missing (the caller makes the ZipError); headers are read a block at a time through read_at.
 *
 * in_order(members, folder, keys) -> int or None
 *     Where the members named folder + key, for each key of `keys` (a dict) in its order, lie one after the other
 *     (torch.save's storages: `archive/data/0`, `archive/data/1` ...) with no member after them bearing one of
 *     those names: the index of the first; the member a dict of the members by name (the last of each name) gives
 *     for folder + key is then the one in its place. None otherwise (the caller looks them up one by one).
 *
 * Portable C99, the CPython API every 3.10-3.13 has.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define CENTRAL_SIZE 46
#define LOCAL_SIZE 30
#define ZIP64_MARK 0xFFFFFFFFULL

static unsigned long long le(const unsigned char *s, int n)
{
    unsigned long long x = 0;
    int i;
    for (i = n - 1; i >= 0; i--)
        x = (x << 8) | s[i];
    return x;
}

/* zipdir.zip64_extra for a central entry: the marked fields (size, compressed size, header offset, in that order)
 * from the zip64 field of `extra`; 0 done (or no zip64 field: unchanged), -1 when struct.unpack_from would fail */
static int zip64_fields(const unsigned char *extra, Py_ssize_t len, unsigned long long *fields[3])
{
    Py_ssize_t i = 0, at, count, k, used = 0;
    unsigned long long size;
    while (i + 4 <= len) {
        size = le(extra + i + 2, 2);
        if (le(extra + i, 2) == 1)
            break;
        i += 4 + (Py_ssize_t)size;
    }
    if (i + 4 > len)
        return 0; /* no zip64 field */
    at = i + 4;
    count = (Py_ssize_t)le(extra + i + 2, 2) / 8;
    if (at + count * 8 > len)
        return -1;
    for (k = 0; k < 3; k++) {
        if (*fields[k] == ZIP64_MARK && used < count) {
            *fields[k] = le(extra + at + 8 * used, 8);
            used++;
        }
    }
    return 0;
}

static PyObject *member(PyTypeObject *type, const unsigned char *e, const unsigned char *dir, Py_ssize_t pos,
                        Py_ssize_t len, long long base, int *malformed)
{
    unsigned long long flags = le(e + 8, 2), method = le(e + 10, 2), crc = le(e + 16, 4), csize = le(e + 20, 4),
                       usize = le(e + 24, 4), hoff = le(e + 42, 4);
    Py_ssize_t nlen = (Py_ssize_t)le(e + 28, 2), xlen = (Py_ssize_t)le(e + 30, 2);
    Py_ssize_t name_end = pos + CENTRAL_SIZE + nlen;
    PyObject *m, *values[7];
    int i;
    if (name_end + xlen > len) { /* a name or extra field the directory cuts: the Python loop decides */
        *malformed = 1;
        return NULL;
    }
    if (xlen && (usize == ZIP64_MARK || csize == ZIP64_MARK || hoff == ZIP64_MARK)) {
        unsigned long long *fields[3] = {&usize, &csize, &hoff};
        if (zip64_fields(dir + name_end, xlen, fields) < 0) {
            *malformed = 1;
            return NULL;
        }
    }
    if (hoff > (unsigned long long)LLONG_MAX - (unsigned long long)(base < 0 ? 0 : base)) {
        *malformed = 1;
        return NULL;
    }
    values[0] = PyUnicode_DecodeUTF8((const char *)dir + pos + CENTRAL_SIZE, nlen, "replace");
    values[1] = PyLong_FromLongLong(base + (long long)hoff);
    values[2] = PyLong_FromUnsignedLongLong(method);
    values[3] = PyLong_FromUnsignedLongLong(csize);
    values[4] = PyLong_FromUnsignedLongLong(usize);
    values[5] = PyLong_FromUnsignedLongLong(crc);
    values[6] = PyLong_FromUnsignedLongLong(flags);
    m = type->tp_alloc(type, 7);
    for (i = 0; i < 7; i++) {
        if (values[i] == NULL || m == NULL) {
            Py_XDECREF(values[i]);
            continue;
        }
        PyTuple_SET_ITEM(m, i, values[i]);
    }
    for (i = 0; i < 7 && m != NULL; i++)
        if (values[i] == NULL)
            Py_CLEAR(m);
    return m;
}

static PyObject *central(PyObject *module, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t count, index, pos = 0;
    long long base;
    PyObject *type, *members;
    int malformed = 0;
    if (!PyArg_ParseTuple(args, "y*nLO", &view, &count, &base, &type))
        return NULL;
    if (!PyType_Check(type) || !PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "central: member_type must be a tuple subclass");
        return NULL;
    }
    members = PyList_New(0);
    for (index = 0; members != NULL && index < count; index++) {
        const unsigned char *dir = (const unsigned char *)view.buf, *e = dir + pos;
        PyObject *m;
        if (pos + CENTRAL_SIZE > view.len || memcmp(e, "PK\x01\x02", 4) != 0) {
            malformed = 1;
            break;
        }
        m = member((PyTypeObject *)type, e, dir, pos, view.len, base, &malformed);
        if (m == NULL || PyList_Append(members, m) < 0) {
            Py_XDECREF(m);
            break;
        }
        Py_DECREF(m);
        pos += CENTRAL_SIZE + (Py_ssize_t)le(e + 28, 2) + (Py_ssize_t)le(e + 30, 2) + (Py_ssize_t)le(e + 32, 2);
    }
    PyBuffer_Release(&view);
    if (members != NULL && (malformed || PyErr_Occurred())) {
        Py_CLEAR(members);
        if (malformed && !PyErr_Occurred())
            Py_RETURN_NONE;
    }
    return members;
}

static PyObject *local_offsets(PyObject *module, PyObject *args)
{
    PyObject *read_at, *members, *seq, *out = NULL, *block = NULL;
    Py_buffer view;
    Py_ssize_t block_size, n, i;
    long long block_start = -1;
    int have_view = 0;
    if (!PyArg_ParseTuple(args, "OnO", &read_at, &block_size, &members))
        return NULL;
    seq = PySequence_Fast(members, "local_offsets: members must be a sequence");
    if (seq == NULL)
        return NULL;
    n = PySequence_Fast_GET_SIZE(seq);
    out = PyList_New(n);
    for (i = 0; out != NULL && i < n; i++) {
        PyObject *m = PySequence_Fast_GET_ITEM(seq, i), *value;
        long long pos, rel;
        const unsigned char *h;
        if (!PyTuple_Check(m) || PyTuple_GET_SIZE(m) < 2 || !PyLong_Check(PyTuple_GET_ITEM(m, 1))) {
            PyErr_SetString(PyExc_TypeError, "local_offsets: a member is not a ZipMember");
            Py_CLEAR(out);
            break;
        }
        pos = PyLong_AsLongLong(PyTuple_GET_ITEM(m, 1));
        if (pos == -1 && PyErr_Occurred()) {
            Py_CLEAR(out);
            break;
        }
        rel = pos - block_start;
        if (rel < 0 || !have_view || rel + LOCAL_SIZE > view.len) {
            /* headers lie in file order: the next ones come along with this block */
            if (have_view) {
                PyBuffer_Release(&view);
                have_view = 0;
            }
            Py_XSETREF(block, PyObject_CallFunction(read_at, "Ln", pos, block_size));
            if (block == NULL || PyObject_GetBuffer(block, &view, PyBUF_SIMPLE) < 0) {
                Py_CLEAR(out);
                break;
            }
            have_view = 1;
            block_start = pos;
            rel = 0;
        }
        h = (const unsigned char *)view.buf + rel;
        if (rel + LOCAL_SIZE > view.len || memcmp(h, "PK\x03\x04", 4) != 0) {
            Py_INCREF(Py_None);
            value = Py_None;
        } else {
            value = PyLong_FromLongLong(pos + LOCAL_SIZE + (long long)le(h + 26, 2) + (long long)le(h + 28, 2));
            if (value == NULL) {
                Py_CLEAR(out);
                break;
            }
        }
        PyList_SET_ITEM(out, i, value);
    }
    if (have_view)
        PyBuffer_Release(&view);
    Py_XDECREF(block);
    Py_DECREF(seq);
    return out;
}

static PyObject *name_of(PyObject *members, Py_ssize_t i) /* borrowed; NULL (no exception) if not a member */
{
    PyObject *m = PyList_GET_ITEM(members, i);
    if (!PyTuple_Check(m) || PyTuple_GET_SIZE(m) < 1 || !PyUnicode_Check(PyTuple_GET_ITEM(m, 0)))
        return NULL;
    return PyTuple_GET_ITEM(m, 0);
}

/* 1 when name == folder + key, 0 when not, -1 on error */
static int named(PyObject *name, PyObject *folder, PyObject *key)
{
    Py_ssize_t split = PyUnicode_GET_LENGTH(folder), length = PyUnicode_GET_LENGTH(name);
    Py_ssize_t head, tail;
    if (length != split + PyUnicode_GET_LENGTH(key))
        return 0;
    head = PyUnicode_Tailmatch(name, folder, 0, split, -1);
    if (head != 1)
        return (int)head;
    tail = PyUnicode_Tailmatch(name, key, split, length, 1);
    return (int)tail;
}

static PyObject *in_order(PyObject *module, PyObject *args)
{
    PyObject *members, *folder, *keys, *key, *value, *name;
    Py_ssize_t n, count, start, i, pos = 0, split;
    int match;
    if (!PyArg_ParseTuple(args, "O!UO!", &PyList_Type, &members, &folder, &PyDict_Type, &keys))
        return NULL;
    n = PyList_GET_SIZE(members);
    count = PyDict_GET_SIZE(keys);
    if (count == 0 || !PyDict_Next(keys, &pos, &key, &value) || !PyUnicode_Check(key))
        Py_RETURN_NONE;
    for (start = 0; start < n; start++) { /* the first member named for the first key */
        name = name_of(members, start);
        match = name == NULL ? 0 : named(name, folder, key);
        if (match < 0)
            return NULL;
        if (match)
            break;
    }
    if (start + count > n)
        Py_RETURN_NONE;
    for (i = 1; PyDict_Next(keys, &pos, &key, &value); i++) { /* the others, one after the other */
        name = name_of(members, start + i);
        if (name == NULL || !PyUnicode_Check(key))
            Py_RETURN_NONE;
        match = named(name, folder, key);
        if (match <= 0) {
            if (match < 0)
                return NULL;
            Py_RETURN_NONE;
        }
    }
    split = PyUnicode_GET_LENGTH(folder);
    for (i = start + count; i < n; i++) { /* none after them bears one of their names */
        PyObject *rest;
        Py_ssize_t head;
        name = name_of(members, i);
        if (name == NULL)
            Py_RETURN_NONE;
        head = PyUnicode_GET_LENGTH(name) >= split ? PyUnicode_Tailmatch(name, folder, 0, split, -1) : 0;
        if (head < 0)
            return NULL;
        if (!head)
            continue;
        rest = PyUnicode_Substring(name, split, PyUnicode_GET_LENGTH(name));
        match = rest == NULL ? -1 : PyDict_Contains(keys, rest);
        Py_XDECREF(rest);
        if (match) {
            if (match < 0)
                return NULL;
            Py_RETURN_NONE;
        }
    }
    return PyLong_FromSsize_t(start);
}

static PyMethodDef methods[] = {
    {"in_order", in_order, METH_VARARGS,
     "in_order(members, folder, keys) -> the index of the members named folder + each key, one after the other "
     "and named by no later member; None otherwise"},
    {"central", central, METH_VARARGS,
     "central(directory, count, base, member_type) -> list of member_type, or None (the Python loop decides)"},
    {"local_offsets", local_offsets, METH_VARARGS,
     "local_offsets(read_at, block, members) -> each member's data offset, or None where its local header is missing"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "zipdir",
                                       "the zip layer's per-member loops in C (see zipdir.c)", -1, methods};

PyMODINIT_FUNC PyInit_zipdir(void) { return PyModule_Create(&moduledef); }
