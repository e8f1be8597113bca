/* Slotted records (ckinspect/record.py) copied with one field changed, many at a time: a checkpoint's layout gives
 * each of its 50,000 tensors a group, and a TensorInfo is never changed once built (any change is a new one), so
 * each gets a copy; a Python __init__ per copy costs more than the rest of applying the layout.
 *
 * replaced(type, slots, objs, index, values) -> list, or None
 *     type, a record type; slots, its slot descriptors (every slot it has, in __init__'s order); objs, a list of
 *     objects of exactly that type (None otherwise: the caller copies them itself); values, a list as long as objs.
 *     Item i of the result is objs[i] itself where its field slots[index] already equals values[i] (==), else a new
 *     record with every slot copied from objs[i] and slots[index] set to values[i]: what
 *     `type(*fields, with that one replaced)` builds, with no Python frame. Exceptions (a slot not set, a
 *     comparison that raises) propagate.
 *
 * stored(found, located, cd_start, file, big, info_type, info_slots, ref_slots) -> dict, or None
 *     torch_zip._storages_from_members' loop for the storages as torch.save writes them: found, a list of
 *     (StorageRef, ZipMember) pairs; located, each member's data offset (an int, or the ZipError its local header
 *     gave); info_type and info_slots, StorageInfo and its 11 slot descriptors in __init__'s order; ref_slots,
 *     StorageRef's key, dtype, location, nbytes and untyped descriptors. Where every member is stored (method 0),
 *     located, ends before the directory (cd_start) and holds at least its storage's bytes, the StorageInfo of
 *     each by its key, as the loop builds them (big-endian where `big` and the storage is typed); None otherwise
 *     (the loop then runs, and says what is wrong with which).
 *
 * Portable C99, the CPython API every 3.10-3.13 has.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *copy_with(PyObject *obj, PyObject *slots, Py_ssize_t index, PyObject *value)
{
    PyTypeObject *type = Py_TYPE(obj);
    PyObject *clone = type->tp_alloc(type, 0);
    Py_ssize_t i, n = PyTuple_GET_SIZE(slots);
    for (i = 0; clone != NULL && i < n; i++) {
        PyObject *d = PyTuple_GET_ITEM(slots, i), *field;
        int failed;
        if (i == index) {
            Py_INCREF(value);
            field = value;
        } else {
            field = Py_TYPE(d)->tp_descr_get(d, obj, (PyObject *)type);
        }
        failed = field == NULL || Py_TYPE(d)->tp_descr_set(d, clone, field) < 0;
        Py_XDECREF(field);
        if (failed)
            Py_CLEAR(clone);
    }
    return clone;
}

static int owns_slots(PyTypeObject *type, PyObject *slots)
{
    Py_ssize_t i;
    for (i = 0; i < PyTuple_GET_SIZE(slots); i++) {
        PyObject *d = PyTuple_GET_ITEM(slots, i);
        if (Py_TYPE(d) != &PyMemberDescr_Type || PyDescr_TYPE(d) != type)
            return 0;
    }
    return 1;
}

static PyObject *replaced(PyObject *module, PyObject *args)
{
    PyObject *type, *objs, *slots, *values, *out;
    Py_ssize_t index, i, n;
    if (!PyArg_ParseTuple(args, "O!O!O!nO!", &PyType_Type, &type, &PyTuple_Type, &slots, &PyList_Type, &objs, &index,
                          &PyList_Type, &values))
        return NULL;
    n = PyList_GET_SIZE(objs);
    if (PyList_GET_SIZE(values) != n || index < 0 || index >= PyTuple_GET_SIZE(slots) ||
        !owns_slots((PyTypeObject *)type, slots) || ((PyTypeObject *)type)->tp_dictoffset != 0) {
        PyErr_SetString(PyExc_ValueError, "replaced: a slotted type and its own slots, values as long as objs");
        return NULL;
    }
    for (i = 0; i < n; i++)
        if ((PyObject *)Py_TYPE(PyList_GET_ITEM(objs, i)) != type)
            Py_RETURN_NONE; /* a subclass, or another object: the caller's own loop */
    out = PyList_New(n);
    for (i = 0; out != NULL && i < n; i++) {
        PyObject *obj = PyList_GET_ITEM(objs, i), *value = PyList_GET_ITEM(values, i), *d, *old, *item;
        int same;
        d = PyTuple_GET_ITEM(slots, index);
        old = Py_TYPE(d)->tp_descr_get(d, obj, (PyObject *)Py_TYPE(obj));
        same = old == NULL ? -1 : PyObject_RichCompareBool(old, value, Py_EQ);
        Py_XDECREF(old);
        if (same < 0) {
            Py_CLEAR(out);
            break;
        }
        if (same) {
            Py_INCREF(obj);
            item = obj;
        } else {
            item = copy_with(obj, slots, index, value);
            if (item == NULL) {
                Py_CLEAR(out);
                break;
            }
        }
        PyList_SET_ITEM(out, i, item);
    }
    return out;
}

static PyObject *field(PyObject *slots, Py_ssize_t i, PyObject *obj) /* new reference, or NULL */
{
    PyObject *d = PyTuple_GET_ITEM(slots, i);
    return Py_TYPE(d)->tp_descr_get(d, obj, (PyObject *)Py_TYPE(obj));
}

/* 1 when the member is stored (method 0), located, ends before the directory and holds at least the storage's
 * bytes (the loop's plain case), 0 when not, -1 on error */
static int in_place(PyObject *member, PyObject *located, PyObject *nbytes, long long cd_start)
{
    PyObject *method, *size;
    long long at, length, need;
    int overflow = 0;
    if (!PyTuple_Check(member) || PyTuple_GET_SIZE(member) < 7 || !PyLong_CheckExact(located) ||
        !PyLong_CheckExact(nbytes))
        return 0;
    method = PyTuple_GET_ITEM(member, 2);
    size = PyTuple_GET_ITEM(member, 4);
    if (!PyLong_CheckExact(method) || !PyLong_CheckExact(size) || !PyLong_CheckExact(PyTuple_GET_ITEM(member, 5)))
        return 0;
    if (PyLong_AsLongAndOverflow(method, &overflow) != 0 || overflow)
        return PyErr_Occurred() ? -1 : 0;
    at = PyLong_AsLongLongAndOverflow(located, &overflow);
    length = overflow ? 0 : PyLong_AsLongLongAndOverflow(size, &overflow);
    need = overflow ? 0 : PyLong_AsLongLongAndOverflow(nbytes, &overflow);
    if (PyErr_Occurred())
        return -1;
    return !overflow && at >= 0 && length >= 0 && at <= cd_start - length && length >= need;
}

/* The StorageInfo of one (ref, member) pair stored in place, its key in *key (new references); NULL with no
 * exception when the pair is not the plain case, NULL with one on error */
static PyObject *stored_info(PyObject *pair, PyObject *located, long long cd_start, PyObject *file, int big,
                             PyTypeObject *type, PyObject *info_slots, PyObject *ref_slots, PyObject **key)
{
    PyObject *ref, *member, *nbytes, *values[11], *info = NULL;
    int i, plain;
    *key = NULL;
    if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2)
        return NULL;
    ref = PyTuple_GET_ITEM(pair, 0);
    member = PyTuple_GET_ITEM(pair, 1);
    nbytes = field(ref_slots, 3, ref);
    plain = nbytes == NULL ? -1 : in_place(member, located, nbytes, cd_start);
    Py_XDECREF(nbytes);
    if (plain <= 0)
        return NULL;
    values[0] = field(ref_slots, 0, ref); /* key */
    values[1] = field(ref_slots, 1, ref); /* dtype */
    values[7] = field(ref_slots, 2, ref); /* location */
    values[8] = Py_False;                 /* `big and not ref.untyped` */
    if (big) {
        PyObject *untyped = field(ref_slots, 4, ref);
        int truth = untyped == NULL ? -1 : PyObject_Not(untyped);
        Py_XDECREF(untyped);
        values[8] = truth < 0 ? NULL : truth ? Py_True : Py_False;
    }
    Py_XINCREF(values[8]);
    values[2] = PyTuple_GET_ITEM(member, 4); /* the member's size */
    values[3] = file;
    values[4] = located;
    values[5] = PyTuple_GET_ITEM(member, 5); /* its CRC-32 */
    values[6] = PyTuple_GET_ITEM(member, 0); /* its name */
    values[9] = Py_None;                     /* deflated */
    values[10] = Py_None;                    /* extents */
    for (i = 2; i < 11; i++)
        if (i != 7 && i != 8)
            Py_INCREF(values[i]);
    plain = 1;
    for (i = 0; i < 11; i++)
        plain &= values[i] != NULL;
    if (plain)
        info = type->tp_alloc(type, 0);
    for (i = 0; info != NULL && i < 11; i++) {
        PyObject *d = PyTuple_GET_ITEM(info_slots, i);
        if (Py_TYPE(d)->tp_descr_set(d, info, values[i]) < 0)
            Py_CLEAR(info);
    }
    for (i = 1; i < 11; i++)
        Py_XDECREF(values[i]);
    if (info == NULL)
        Py_XDECREF(values[0]);
    else
        *key = values[0];
    return info;
}

static PyObject *stored(PyObject *module, PyObject *args)
{
    PyObject *found, *located, *file, *type, *info_slots, *ref_slots, *out;
    long long cd_start;
    int big;
    Py_ssize_t i, n;
    if (!PyArg_ParseTuple(args, "O!O!LOpO!O!O!", &PyList_Type, &found, &PyList_Type, &located, &cd_start, &file, &big,
                          &PyType_Type, &type, &PyTuple_Type, &info_slots, &PyTuple_Type, &ref_slots))
        return NULL;
    n = PyList_GET_SIZE(found);
    if (PyList_GET_SIZE(located) != n || PyTuple_GET_SIZE(info_slots) != 11 || PyTuple_GET_SIZE(ref_slots) != 5 ||
        !owns_slots((PyTypeObject *)type, info_slots)) {
        PyErr_SetString(PyExc_ValueError, "stored: found and located of one length, StorageInfo's 11 slots, 5 of "
                                          "StorageRef's");
        return NULL;
    }
    out = PyDict_New();
    for (i = 0; out != NULL && i < n; i++) {
        PyObject *key, *info = stored_info(PyList_GET_ITEM(found, i), PyList_GET_ITEM(located, i), cd_start, file,
                                           big, (PyTypeObject *)type, info_slots, ref_slots, &key);
        int failed;
        if (info == NULL) {
            Py_CLEAR(out);
            if (!PyErr_Occurred())
                Py_RETURN_NONE; /* not the plain case: the caller's loop */
            break;
        }
        failed = PyDict_SetItem(out, key, info) < 0;
        Py_DECREF(key);
        Py_DECREF(info);
        if (failed)
            Py_CLEAR(out);
    }
    return out;
}

static PyMethodDef methods[] = {
    {"stored", stored, METH_VARARGS,
     "stored(found, located, cd_start, file, big, info_type, info_slots, ref_slots) -> {key: StorageInfo} where "
     "every storage is stored in place, else None"},
    {"replaced", replaced, METH_VARARGS,
     "replaced(type, slots, objs, index, values) -> each object, or a copy of it with slots[index] set to "
     "values[i] where that field differs; None when an object is not exactly of type"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "records",
                                       "slotted records copied with one field changed, in C (see records.c)", -1,
                                       methods};

PyMODINIT_FUNC PyInit_records(void) { return PyModule_Create(&moduledef); }
