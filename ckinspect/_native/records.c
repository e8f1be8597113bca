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

static PyMethodDef methods[] = {
    {"replaced", replaced, METH_VARARGS,
     "replaced(type, slots, objs, index, values) -> each object, or a copy of it with slots[index] set to "
     "values[i] where that field differs; None when an object is not exactly of type"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "records",
                                       "slotted records copied with one field changed, in C (see records.c)", -1,
                                       methods};

PyMODINIT_FUNC PyInit_records(void) { return PyModule_Create(&moduledef); }
