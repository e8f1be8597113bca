/* pickle_findings.check_views' loop over a checkpoint's tensors in C: each tensor descriptor's fields checked to be
 * what the unpickler makes, and the byte past its view's last element held against its storage's size. 50,000
 * tensors took as long in Python as listing their storages.
 *
 * check(tensors, storages, bits, tensor_slots, storage_slots) -> (dropped, bad), or None
 *     tensors, a list of TensorInfo; storages, a list as long of the StorageInfo each views (None where the reader
 *     lists none); bits, a dict of bits per element by dtype (every dtype the tensors name); tensor_slots,
 *     TensorInfo's name, dtype, shape, stride, storage_key, storage_offset and group descriptors; storage_slots,
 *     StorageInfo's offset and nbytes descriptors. dropped: the indices of the descriptors whose fields are not of
 *     the types the unpickler makes (_last_element gives None); bad: the indices of the views that reach past the
 *     bytes of their storage. None where a number does not fit in 64 bits or a dtype is not in `bits`: the caller's
 *     own loop then decides, with Python's integers.
 *
 * Portable C99, the CPython API every 3.10-3.13 has.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define MALFORMED 1 /* _last_element's None */
#define DECLINE 2   /* beyond 64 bits, an unknown dtype: the Python loop */

static PyObject *get(PyObject *slots, Py_ssize_t i, PyObject *obj) /* new reference, or NULL */
{
    PyObject *d = PyTuple_GET_ITEM(slots, i);
    return Py_TYPE(d)->tp_descr_get(d, obj, (PyObject *)Py_TYPE(obj));
}

static int as_ll(PyObject *v, long long *out) /* 0, or DECLINE past 64 bits */
{
    int overflow;
    *out = PyLong_AsLongLongAndOverflow(v, &overflow);
    return overflow ? DECLINE : 0;
}

/* a + b * c into *out, DECLINE on overflow */
static int add_mul(long long a, long long b, long long c, long long *out)
{
    long long product;
    if (b != 0 && c != 0) {
        if ((b > 0 ? (c > 0 ? b > LLONG_MAX / c : c < LLONG_MIN / b) : (c > 0 ? b < LLONG_MIN / c : b < LLONG_MAX / c)))
            return DECLINE;
    }
    product = b * c;
    if ((product > 0 && a > LLONG_MAX - product) || (product < 0 && a < LLONG_MIN - product))
        return DECLINE;
    *out = a + product;
    return 0;
}

/* _last_element: 0 with *last set (-1: no element), MALFORMED, or DECLINE; the fields are borrowed */
static int last_element(PyObject **f, long long *last)
{
    PyObject *shape = f[2], *stride = f[3];
    Py_ssize_t i, n;
    int empty = 0, done;
    if (!PyTuple_CheckExact(shape) || !PyTuple_CheckExact(stride) || PyTuple_GET_SIZE(shape) != PyTuple_GET_SIZE(stride) ||
        !PyLong_CheckExact(f[5]) || !PyUnicode_CheckExact(f[1]) || !PyUnicode_CheckExact(f[4]) ||
        !PyUnicode_CheckExact(f[0]) || !PyUnicode_CheckExact(f[6]))
        return MALFORMED;
    if ((done = as_ll(f[5], last)) != 0)
        return done;
    if (*last < 0)
        return MALFORMED;
    n = PyTuple_GET_SIZE(shape);
    for (i = 0; i < n; i++) {
        PyObject *size = PyTuple_GET_ITEM(shape, i), *step = PyTuple_GET_ITEM(stride, i);
        long long s, t;
        if (!PyLong_CheckExact(size) || !PyLong_CheckExact(step))
            return MALFORMED;
        if ((done = as_ll(size, &s)) != 0 || (done = as_ll(step, &t)) != 0)
            return done;
        if (s < 0)
            return MALFORMED;
        if (s == 0)
            empty = 1;
        if ((done = add_mul(*last, s - 1, t, last)) != 0)
            return done;
    }
    if (empty)
        *last = -1;
    return 0;
}

/* One tensor against its storage: 0 fine, MALFORMED (dropped), 3 (reaches past its storage), DECLINE, -1 error */
static int judge(PyObject *t, PyObject *storage, PyObject *bits, PyObject *tensor_slots, PyObject *storage_slots)
{
    PyObject *f[7] = {NULL}, *offset = NULL, *nbytes = NULL, *b;
    long long last = 0, size, per, end;
    int i, verdict = 0;
    for (i = 0; i < 7 && verdict == 0; i++)
        if ((f[i] = get(tensor_slots, i, t)) == NULL)
            verdict = -1;
    if (verdict == 0)
        verdict = last_element(f, &last);
    if (verdict == 0 && last >= 0 && storage != Py_None) {
        offset = get(storage_slots, 0, storage);
        nbytes = offset == NULL ? NULL : get(storage_slots, 1, storage);
        if (nbytes == NULL) {
            verdict = -1;
        } else if (!PyLong_CheckExact(nbytes) || (offset != Py_None && !PyLong_CheckExact(offset))) {
            verdict = DECLINE;
        } else if ((verdict = as_ll(nbytes, &size)) == 0 && !(offset == Py_None && size == 0)) {
            b = PyDict_GetItemWithError(bits, f[1]); /* borrowed */
            if (b == NULL || !PyLong_CheckExact(b))
                verdict = PyErr_Occurred() ? -1 : DECLINE;
            else if ((verdict = as_ll(b, &per)) == 0) {
                if (last == LLONG_MAX || per < 0)
                    verdict = DECLINE;
                else if ((verdict = add_mul(7, last + 1, per, &end)) == 0 && (end >> 3) > size)
                    verdict = 3; /* ((last + 1) * bits + 7) >> 3 > storage.nbytes */
            }
        }
    }
    for (i = 0; i < 7; i++)
        Py_XDECREF(f[i]);
    Py_XDECREF(offset);
    Py_XDECREF(nbytes);
    return verdict;
}

static PyObject *check(PyObject *module, PyObject *args)
{
    PyObject *tensors, *storages, *bits, *tensor_slots, *storage_slots, *dropped, *bad, *result = NULL;
    Py_ssize_t i, n;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!", &PyList_Type, &tensors, &PyList_Type, &storages, &PyDict_Type, &bits,
                          &PyTuple_Type, &tensor_slots, &PyTuple_Type, &storage_slots))
        return NULL;
    n = PyList_GET_SIZE(tensors);
    if (PyList_GET_SIZE(storages) != n || PyTuple_GET_SIZE(tensor_slots) != 7 || PyTuple_GET_SIZE(storage_slots) != 2) {
        PyErr_SetString(PyExc_ValueError, "check: a storage for each tensor, 7 tensor slots, 2 storage slots");
        return NULL;
    }
    dropped = PyList_New(0);
    bad = PyList_New(0);
    for (i = 0; dropped != NULL && bad != NULL && i < n; i++) {
        int verdict = judge(PyList_GET_ITEM(tensors, i), PyList_GET_ITEM(storages, i), bits, tensor_slots,
                            storage_slots);
        PyObject *index;
        if (verdict == 0)
            continue;
        if (verdict < 0 || verdict == DECLINE)
            break;
        index = PyLong_FromSsize_t(i);
        if (index == NULL || PyList_Append(verdict == MALFORMED ? dropped : bad, index) < 0) {
            Py_XDECREF(index);
            break;
        }
        Py_DECREF(index);
    }
    if (dropped != NULL && bad != NULL && !PyErr_Occurred())
        result = i == n ? PyTuple_Pack(2, dropped, bad) : (Py_INCREF(Py_None), Py_None);
    Py_XDECREF(dropped);
    Py_XDECREF(bad);
    return result;
}

static PyMethodDef methods[] = {
    {"check", check, METH_VARARGS,
     "check(tensors, storages, bits, tensor_slots, storage_slots) -> (dropped, bad) indices, or None (the Python "
     "loop decides)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "views",
                                       "check_views' loop over the tensors in C (see views.c)", -1, methods};

PyMODINIT_FUNC PyInit_views(void) { return PyModule_Create(&moduledef); }
