/* The torch.save pickle (data.pkl) decoded in one pass: CPython's C unpickler's semantics for the opcodes
 * torch.save writes, the scan's facts noted on the way, tensors and storages built as their records directly.
 *
 * decode(data, start, find_class, persistent_load, codes, max_events, max_line, min_objects, fast) walks one pickle from `start` and
 * gives (value, asked, end, protocol, torch_opcodes, stack_globals), or None: None whenever it meets anything
 * it does not do exactly as CPython's unpickler (_pickle.c) does it: an opcode outside the table `codes`
 * allows, a declared length past the bytes, a memo index other than the next one, a line or a string that
 * does not decode, a stand-in that raises, a stack underflow, no STOP. The caller then takes the pure-Python
 * way (pickle_scan.scan_decoding), which gives the answer; this pass never gives a different one, only the
 * same one sooner. Nothing here imports or calls what a pickle names: globals go to `find_class` (the
 * restricted unpickler's), persistent ids to `persistent_load`, calls only to what those handed back.
 *
 * Bounded as the pure path is: no recursion (the stack, the marks and the memo are arrays that grow with the
 * opcodes read, so with the bytes), every length checked against the bytes before it is used.
 *
 * `codes`: 256 bytes, per opcode byte 0 (not done here: decline), 1 (done, one torch's weights_only unpickler
 * implements), 2 (done, one it lacks: the result's torch_opcodes is then False). The table is built in Python
 * from pickletools.opcodes (pickle_scan.NATIVE_CODES).
 * `fast`: None, or (rebuild, tensor_type, tensor_fields, storage_fields, storages, size): a REDUCE of `rebuild` (the
 * _rebuild_tensor(_v2) stand-in) on (StorageRef, offset, size, stride, ...) of plain ints is built here as
 * rebuild itself builds it (tensor_type with the 7 fields set through their slot descriptors); anything else
 * calls `rebuild`. `storages`: None, or (dict, key prefix, (StorageRef, its 5 slots), _StorageType, its dtype,
 * untyped and itemsize slots, every, on_every): persistent_load's first branch (a StorageCollector's), done here
 * (fast_storage); every other persistent id goes to persistent_load. `size`: the torch.Size stand-in, whose REDUCE
 * on one exact tuple is that tuple here (the stand-in's tuple(dims) returns it), not a call into Python.
 *
 * Portable C99 (no compiler builtins: MSVC builds it), the limited set of CPython's API every 3.10-3.13 has.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

typedef struct {
    PyObject **items;
    Py_ssize_t len, cap;
} Vec;

static int vec_push(Vec *v, PyObject *o) /* steals o */
{
    if (v->len == v->cap) {
        Py_ssize_t cap = v->cap ? v->cap * 2 : 64;
        PyObject **items = (PyObject **)PyMem_Realloc(v->items, (size_t)cap * sizeof(PyObject *));
        if (items == NULL) {
            Py_DECREF(o);
            PyErr_NoMemory();
            return -1;
        }
        v->items = items;
        v->cap = cap;
    }
    v->items[v->len++] = o;
    return 0;
}

static void vec_clear(Vec *v)
{
    Py_ssize_t i;
    for (i = 0; i < v->len; i++)
        Py_XDECREF(v->items[i]);
    PyMem_Free(v->items);
    v->items = NULL;
    v->len = v->cap = 0;
}

typedef struct {
    Py_ssize_t *at;
    Py_ssize_t len, cap;
} Marks;

static int marks_push(Marks *m, Py_ssize_t at)
{
    if (m->len == m->cap) {
        Py_ssize_t cap = m->cap ? m->cap * 2 : 32;
        Py_ssize_t *grown = (Py_ssize_t *)PyMem_Realloc(m->at, (size_t)cap * sizeof(Py_ssize_t));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        m->at = grown;
        m->cap = cap;
    }
    m->at[m->len++] = at;
    return 0;
}

/* What the walk holds; DECLINE means "not done here": the caller takes the pure path. */
#define DECLINE (-1)

typedef struct {
    const unsigned char *p;
    Py_ssize_t pos, end;
    Vec stack, memo;
    Marks marks;
    PyObject *find_class, *persistent_load, *asked;
    const unsigned char *codes;
    Py_ssize_t events, max_events, stack_globals, max_line, made, min_objects;
    int protocol, torch_opcodes;
    PyObject *rebuild, *tensor_type, *tensor_fields, *storage_fields, *size;
    PyObject *storages, *key_prefix, *ref_fields, *stype_type, *stype_fields, *every, *on_every;
} Walk;

static Py_ssize_t fence(Walk *w) { return w->marks.len ? w->marks.at[w->marks.len - 1] : 0; }

/* CPython's Pdata_pop: nothing below the last mark; NULL (no exception) on underflow */
static PyObject *pop(Walk *w)
{
    if (w->stack.len <= fence(w))
        return NULL;
    return w->stack.items[--w->stack.len];
}

/* Steals o; a NULL o (an exception set) declines. Every object built is counted: past `min_objects`, more
 * than one per 3 bytes read declines (a torch.save pickle builds 0.2; 10 MB of EMPTY_DICT would be ten million
 * dicts), as pickle_scan.BoundedInput stops CPython's unpickler. */
static int push(Walk *w, PyObject *o)
{
    if (o == NULL)
        return DECLINE;
    if (++w->made > w->min_objects && w->made > w->pos / 3) {
        Py_DECREF(o);
        return DECLINE;
    }
    return vec_push(&w->stack, o);
}

static PyObject *top(Walk *w) { return w->stack.len > fence(w) ? w->stack.items[w->stack.len - 1] : NULL; }

static int need(Walk *w, Py_ssize_t n) { return n >= 0 && w->end - w->pos >= n; }

static unsigned long long le(const unsigned char *s, int n)
{
    unsigned long long x = 0;
    int i;
    for (i = n - 1; i >= 0; i--)
        x = (x << 8) | s[i];
    return x;
}

/* The items since the last mark as a tuple, the mark dropped (CPython's Pdata_poptuple after marker()) */
static PyObject *pop_mark_tuple(Walk *w)
{
    Py_ssize_t start, n, i;
    PyObject *t;
    if (w->marks.len == 0)
        return NULL;
    start = w->marks.at[--w->marks.len];
    n = w->stack.len - start;
    t = PyTuple_New(n);
    if (t == NULL)
        return NULL;
    for (i = 0; i < n; i++)
        PyTuple_SET_ITEM(t, i, w->stack.items[start + i]);
    w->stack.len = start;
    return t;
}

static PyObject *pop_tuple(Walk *w, Py_ssize_t n)
{
    Py_ssize_t i, start = w->stack.len - n;
    PyObject *t;
    if (start < fence(w))
        return NULL;
    t = PyTuple_New(n);
    if (t == NULL)
        return NULL;
    for (i = 0; i < n; i++)
        PyTuple_SET_ITEM(t, i, w->stack.items[start + i]);
    w->stack.len = start;
    return t;
}

static int sized(Walk *w, int width, const unsigned char **s, Py_ssize_t *n)
{
    unsigned long long size;
    if (!need(w, width))
        return DECLINE;
    size = le(w->p + w->pos, width);
    w->pos += width;
    if (size > (unsigned long long)(w->end - w->pos))
        return DECLINE; /* a declared length past the bytes: the pure path says where it ends */
    *s = w->p + w->pos;
    *n = (Py_ssize_t)size;
    w->pos += (Py_ssize_t)size;
    return 0;
}

static int line(Walk *w, const unsigned char **s, Py_ssize_t *n) /* with its newline, as _Unpickler_Readline */
{
    const unsigned char *nl = (const unsigned char *)memchr(w->p + w->pos, '\n', (size_t)(w->end - w->pos));
    if (nl == NULL)
        return DECLINE;
    *s = w->p + w->pos;
    *n = (Py_ssize_t)(nl - *s) + 1;
    w->pos += *n;
    return 0;
}

static int global(Walk *w, PyObject *module, PyObject *name, int stacked) /* steals both */
{
    PyObject *entry, *found;
    if (module == NULL || name == NULL || ++w->events > w->max_events)
        goto fail;
    entry = Py_BuildValue("(OOO)", module, name, stacked ? Py_True : Py_False);
    if (entry == NULL || PyList_Append(w->asked, entry) < 0) {
        Py_XDECREF(entry);
        goto fail;
    }
    Py_DECREF(entry);
    found = PyObject_CallFunctionObjArgs(w->find_class, module, name, NULL);
    Py_DECREF(module);
    Py_DECREF(name);
    return push(w, found);
fail:
    Py_XDECREF(module);
    Py_XDECREF(name);
    return DECLINE;
}

static int memo_put(Walk *w, Py_ssize_t index)
{
    PyObject *value = top(w);
    if (value == NULL || index > w->memo.len)
        return DECLINE; /* a sparse index: the pure path bounds it */
    Py_INCREF(value);
    if (index == w->memo.len)
        return vec_push(&w->memo, value);
    Py_XSETREF(w->memo.items[index], value);
    return 0;
}

static int memo_get(Walk *w, unsigned long long index)
{
    PyObject *value;
    if (index >= (unsigned long long)w->memo.len)
        return DECLINE;
    value = w->memo.items[index];
    Py_INCREF(value);
    return vec_push(&w->stack, value); /* shared, not built: not counted */
}

/* The fast tensor: _rebuild_tensor's own checks (unpickler.py), then the record built with no Python frame */
static PyObject *get_field(PyObject *fields, Py_ssize_t i, PyObject *obj)
{
    PyObject *d = PyTuple_GET_ITEM(fields, i);
    return Py_TYPE(d)->tp_descr_get(d, obj, (PyObject *)Py_TYPE(obj));
}

static int set_field(PyObject *fields, Py_ssize_t i, PyObject *obj, PyObject *value)
{
    PyObject *d = PyTuple_GET_ITEM(fields, i);
    return Py_TYPE(d)->tp_descr_set(d, obj, value);
}

static int negative(PyObject *v) /* an exact int's sign, through the API every version has */
{
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    return overflow < 0 || (overflow == 0 && x < 0);
}

static int plain_ints(PyObject *t, int nonnegative)
{
    Py_ssize_t i;
    if (!PyTuple_CheckExact(t))
        return 0;
    for (i = 0; i < PyTuple_GET_SIZE(t); i++) {
        PyObject *v = PyTuple_GET_ITEM(t, i);
        if (!PyLong_CheckExact(v) || (nonnegative && negative(v)))
            return 0;
    }
    return 1;
}

static PyObject *fast_tensor(Walk *w, PyObject *args)
{
    PyObject *storage, *offset, *size, *stride, *tensor, *dtype = NULL, *key = NULL, *values[7];
    PyTypeObject *type = (PyTypeObject *)w->tensor_type;
    int i, failed = 0;
    if (PyTuple_GET_SIZE(args) < 4)
        return NULL;
    storage = PyTuple_GET_ITEM(args, 0);
    offset = PyTuple_GET_ITEM(args, 1);
    size = PyTuple_GET_ITEM(args, 2);
    stride = PyTuple_GET_ITEM(args, 3);
    if ((PyObject *)Py_TYPE(storage) != PyTuple_GET_ITEM(w->storage_fields, 0) || !PyLong_CheckExact(offset) || negative(offset) || !plain_ints(size, 1) || !plain_ints(stride, 0))
        return NULL;
    key = get_field(w->storage_fields, 1, storage);
    dtype = get_field(w->storage_fields, 2, storage);
    if (key == NULL || dtype == NULL) {
        Py_XDECREF(key);
        Py_XDECREF(dtype);
        return NULL;
    }
    tensor = type->tp_alloc(type, 0);
    if (tensor != NULL) {
        PyObject *group = PyTuple_GET_ITEM(w->tensor_fields, 7);
        values[0] = PyTuple_GET_ITEM(w->tensor_fields, 8); /* "" */
        values[1] = dtype;
        values[2] = size;
        values[3] = stride;
        values[4] = key;
        values[5] = offset;
        values[6] = group;
        for (i = 0; i < 7 && !failed; i++)
            failed = set_field(w->tensor_fields, i, tensor, values[i]) < 0;
        if (failed)
            Py_CLEAR(tensor);
    }
    Py_DECREF(key);
    Py_DECREF(dtype);
    return tensor;
}

/* StorageCollector.__call__'s first branch (pickle_findings.py), for ('storage', type, key, location, numel, ...)
 * as torch.save writes it: the collector's StorageRef for the key, or a new one built slot by slot as
 * StorageRef.__init__ does; NULL (no exception) for anything else, which the collector itself then takes. */
static PyObject *fast_storage(Walk *w, PyObject *pid)
{
    PyObject *key, *ref, *stype, *numel, *location, *values[5] = {NULL, NULL, NULL, NULL, NULL};
    PyTypeObject *type = (PyTypeObject *)PyTuple_GET_ITEM(w->ref_fields, 0);
    int i, failed = 0;
    Py_ssize_t count;
    if (!PyTuple_CheckExact(pid) || PyTuple_GET_SIZE(pid) < 5 || !PyUnicode_CheckExact(PyTuple_GET_ITEM(pid, 2)))
        return NULL;
    key = PyTuple_GET_ITEM(pid, 2);
    ref = PyDict_GetItemWithError(w->storages, key);
    if (ref != NULL) {
        Py_INCREF(ref);
        return ref;
    }
    if (PyErr_Occurred())
        return NULL;
    stype = PyTuple_GET_ITEM(pid, 1);
    location = PyTuple_GET_ITEM(pid, 3);
    numel = PyTuple_GET_ITEM(pid, 4);
    if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(pid, 0)) ||
        PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(pid, 0), "storage") != 0 ||
        (PyObject *)Py_TYPE(stype) != w->stype_type || !PyUnicode_CheckExact(location) || !PyLong_CheckExact(numel) ||
        negative(numel))
        return NULL;
    values[0] = PyUnicode_Concat(w->key_prefix, key);
    values[1] = get_field(w->stype_fields, 0, stype); /* dtype */
    values[4] = get_field(w->stype_fields, 1, stype); /* untyped */
    values[3] = get_field(w->stype_fields, 2, stype); /* itemsize, then nbytes */
    if (values[3] != NULL)
        Py_SETREF(values[3], PyNumber_Multiply(numel, values[3]));
    Py_INCREF(location);
    values[2] = location;
    for (i = 0; i < 5; i++)
        failed |= values[i] == NULL;
    ref = failed ? NULL : type->tp_alloc(type, 0);
    for (i = 0; i < 5 && ref != NULL; i++)
        if (set_field(w->ref_fields, i + 1, ref, values[i]) < 0)
            Py_CLEAR(ref);
    for (i = 0; i < 5; i++)
        Py_XDECREF(values[i]);
    if (ref == NULL || PyDict_SetItem(w->storages, key, ref) < 0) {
        Py_XDECREF(ref);
        return NULL;
    }
    count = PyDict_GET_SIZE(w->storages);
    if (PyLong_AsSsize_t(w->every) > 0 && count % PyLong_AsSsize_t(w->every) == 0) {
        PyObject *done = PyObject_CallFunction(w->on_every, "n", count); /* the TUI's count of storages */
        if (done == NULL) {
            Py_DECREF(ref);
            return NULL;
        }
        Py_DECREF(done);
    }
    return ref;
}

static int reduce(Walk *w)
{
    PyObject *args = pop(w), *callable, *result = NULL;
    if (args == NULL)
        return DECLINE;
    callable = pop(w);
    if (callable == NULL || !PyTuple_Check(args)) {
        Py_DECREF(args);
        Py_XDECREF(callable);
        return DECLINE;
    }
    if (callable == w->rebuild && PyTuple_CheckExact(args)) {
        result = fast_tensor(w, args);
        if (result == NULL && PyErr_Occurred()) {
            Py_DECREF(args);
            Py_DECREF(callable);
            return DECLINE;
        }
    }
    else if (callable == w->size && PyTuple_CheckExact(args) && PyTuple_GET_SIZE(args) == 1 &&
             PyTuple_CheckExact(PyTuple_GET_ITEM(args, 0))) {
        result = PyTuple_GET_ITEM(args, 0); /* torch.Size(dims): tuple(dims), the exact tuple itself */
        Py_INCREF(result);
    }
    if (result == NULL)
        result = PyObject_Call(callable, args, NULL);
    Py_DECREF(args);
    Py_DECREF(callable);
    return push(w, result);
}

static int build(Walk *w)
{
    PyObject *state = pop(w), *inst, *setstate, *result;
    if (state == NULL)
        return DECLINE;
    inst = top(w);
    if (inst == NULL) {
        Py_DECREF(state);
        return DECLINE;
    }
    /* CPython looks __setstate__ up on the instance; without one it updates __dict__ / slots: not done here */
    setstate = PyObject_GetAttrString(inst, "__setstate__");
    if (setstate == NULL) {
        Py_DECREF(state);
        return DECLINE;
    }
    result = PyObject_CallOneArg(setstate, state);
    Py_DECREF(setstate);
    Py_DECREF(state);
    if (result == NULL)
        return DECLINE;
    Py_DECREF(result);
    return 0;
}

static int set_items(Walk *w, Py_ssize_t from)
{
    PyObject *target;
    Py_ssize_t i, n = w->stack.len - from;
    if (from < 1 || n % 2)
        return DECLINE; /* odd: CPython's "odd number of items for SETITEMS" */
    target = w->stack.items[from - 1];
    for (i = from; i < w->stack.len; i += 2)
        if (PyObject_SetItem(target, w->stack.items[i], w->stack.items[i + 1]) < 0)
            return DECLINE;
    for (i = from; i < w->stack.len; i++)
        Py_DECREF(w->stack.items[i]);
    w->stack.len = from;
    return 0;
}

static int append_items(Walk *w, Py_ssize_t from)
{
    PyObject *target;
    Py_ssize_t i;
    if (from < 1)
        return DECLINE;
    target = w->stack.items[from - 1];
    if (!PyList_CheckExact(target))
        return DECLINE; /* CPython calls extend/append on anything else: not done here */
    for (i = from; i < w->stack.len; i++)
        if (PyList_Append(target, w->stack.items[i]) < 0)
            return DECLINE;
    for (i = from; i < w->stack.len; i++)
        Py_DECREF(w->stack.items[i]);
    w->stack.len = from;
    return 0;
}

/* The marked frame's items go into the object under the mark (SETITEMS, APPENDS): CPython's marker() and
 * then the object at index mark - 1, which must lie above the previous mark */
static int marked(Walk *w, Py_ssize_t *from)
{
    Py_ssize_t below;
    if (w->marks.len == 0)
        return DECLINE;
    *from = w->marks.at[--w->marks.len];
    below = w->marks.len ? w->marks.at[w->marks.len - 1] : 0;
    if (*from <= below)
        return DECLINE;
    return 0;
}

static int step(Walk *w, unsigned char op)
{
    const unsigned char *s;
    Py_ssize_t n, from;
    PyObject *a, *b;
    switch (op) {
    case 0x80: /* PROTO */
        if (!need(w, 1) || w->p[w->pos] > 5)
            return DECLINE;
        w->protocol = w->p[w->pos++];
        return 0;
    case 0x95: /* FRAME: the frame must be within the bytes; CPython does nothing more with it */
        if (!need(w, 8) || le(w->p + w->pos, 8) > (unsigned long long)(w->end - w->pos - 8))
            return DECLINE;
        w->pos += 8;
        return 0;
    case '(': /* MARK */
        return marks_push(&w->marks, w->stack.len);
    case '}': /* EMPTY_DICT */
        return push(w, PyDict_New());
    case ']': /* EMPTY_LIST */
        return push(w, PyList_New(0));
    case ')': /* EMPTY_TUPLE */
        return push(w, PyTuple_New(0));
    case 'N':
        Py_INCREF(Py_None);
        return push(w, Py_None);
    case 0x88: /* NEWTRUE */
        Py_INCREF(Py_True);
        return push(w, Py_True);
    case 0x89: /* NEWFALSE */
        Py_INCREF(Py_False);
        return push(w, Py_False);
    case 'J': /* BININT */
        if (!need(w, 4))
            return DECLINE;
    {
        long long v = (long long)le(w->p + w->pos, 4);
        w->pos += 4;
        return push(w, PyLong_FromLongLong(v >= 0x80000000LL ? v - 0x100000000LL : v));
    }
    case 'K': /* BININT1 */
        if (!need(w, 1))
            return DECLINE;
        return push(w, PyLong_FromLong(w->p[w->pos++]));
    case 'M': /* BININT2 */
        if (!need(w, 2))
            return DECLINE;
        w->pos += 2;
        return push(w, PyLong_FromLong((long)le(w->p + w->pos - 2, 2)));
    case 0x8a: { /* LONG1: up to 8 bytes here (two's complement, little-endian) */
        unsigned long long x;
        long long v;
        if (!need(w, 1) || w->p[w->pos] > 8 || !need(w, 1 + w->p[w->pos]))
            return DECLINE;
        n = w->p[w->pos++];
        if (n == 0)
            return push(w, PyLong_FromLong(0));
        x = le(w->p + w->pos, (int)n);
        w->pos += n;
        if (n < 8 && (x >> (8 * n - 1)) & 1)
            x |= ~0ULL << (8 * n);
        memcpy(&v, &x, sizeof v);
        return push(w, PyLong_FromLongLong(v));
    }
    case 'G': /* BINFLOAT, big-endian */
        if (!need(w, 8))
            return DECLINE;
        w->pos += 8;
#if PY_VERSION_HEX >= 0x030B0000
        return push(w, PyFloat_FromDouble(PyFloat_Unpack8((const char *)w->p + w->pos - 8, 0)));
#else
        return push(w, PyFloat_FromDouble(_PyFloat_Unpack8(w->p + w->pos - 8, 0)));
#endif
    case 'X': /* BINUNICODE */
    case 0x8c: /* SHORT_BINUNICODE */
    case 0x8d: /* BINUNICODE8 */
        if (sized(w, op == 'X' ? 4 : op == 0x8c ? 1 : 8, &s, &n) < 0)
            return DECLINE;
        return push(w, PyUnicode_DecodeUTF8((const char *)s, n, "surrogatepass"));
    case 'B': /* BINBYTES */
    case 'C': /* SHORT_BINBYTES */
    case 0x8e: /* BINBYTES8 */
        if (sized(w, op == 'B' ? 4 : op == 'C' ? 1 : 8, &s, &n) < 0)
            return DECLINE;
        return push(w, PyBytes_FromStringAndSize((const char *)s, n));
    case 'q': /* BINPUT */
        if (!need(w, 1))
            return DECLINE;
        return memo_put(w, w->p[w->pos++]);
    case 'r': /* LONG_BINPUT */
        if (!need(w, 4))
            return DECLINE;
        w->pos += 4;
        return memo_put(w, (Py_ssize_t)le(w->p + w->pos - 4, 4));
    case 0x94: /* MEMOIZE */
        return memo_put(w, w->memo.len);
    case 'h': /* BINGET */
        if (!need(w, 1))
            return DECLINE;
        return memo_get(w, w->p[w->pos++]);
    case 'j': /* LONG_BINGET */
        if (!need(w, 4))
            return DECLINE;
        w->pos += 4;
        return memo_get(w, le(w->p + w->pos - 4, 4));
    case 'c': { /* GLOBAL: two lines, each decoded as UTF-8 without its newline, as _pickle's load_global */
        const unsigned char *s2;
        Py_ssize_t n2;
        if (line(w, &s, &n) < 0 || n < 2 || n - 1 > w->max_line || line(w, &s2, &n2) < 0 || n2 < 2 ||
            n2 - 1 > w->max_line)
            return DECLINE;
        a = PyUnicode_DecodeUTF8((const char *)s, n - 1, "strict");
        b = a ? PyUnicode_DecodeUTF8((const char *)s2, n2 - 1, "strict") : NULL;
        return global(w, a, b, 0);
    }
    case 0x93: /* STACK_GLOBAL: both names exact str, or CPython refuses */
        b = pop(w);
        a = b ? pop(w) : NULL;
        w->stack_globals++;
        if (a == NULL || !PyUnicode_CheckExact(a) || !PyUnicode_CheckExact(b)) {
            Py_XDECREF(a);
            Py_XDECREF(b);
            return DECLINE;
        }
        return global(w, a, b, 1);
    case 'Q': /* BINPERSID */
        a = pop(w);
        if (a == NULL)
            return DECLINE;
        b = w->storages ? fast_storage(w, a) : NULL;
        if (b == NULL && !PyErr_Occurred())
            b = PyObject_CallOneArg(w->persistent_load, a);
        Py_DECREF(a);
        return push(w, b);
    case 'R': /* REDUCE */
        return reduce(w);
    case 'b': /* BUILD */
        return build(w);
    case 't': /* TUPLE */
        return push(w, pop_mark_tuple(w));
    case 0x85: /* TUPLE1 */
    case 0x86: /* TUPLE2 */
    case 0x87: /* TUPLE3 */
        return push(w, pop_tuple(w, op - 0x84));
    case 's': /* SETITEM */
        if (w->stack.len - fence(w) < 3)
            return DECLINE;
        return set_items(w, w->stack.len - 2);
    case 'u': /* SETITEMS */
        if (marked(w, &from) < 0)
            return DECLINE;
        return set_items(w, from);
    case 'a': /* APPEND */
        if (w->stack.len - fence(w) < 2)
            return DECLINE;
        return append_items(w, w->stack.len - 1);
    case 'e': /* APPENDS */
        if (marked(w, &from) < 0)
            return DECLINE;
        return append_items(w, from);
    default:
        return DECLINE;
    }
}

static PyObject *decode(PyObject *module, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t start;
    PyObject *codes, *fast, *result = NULL, *value;
    Walk w;
    memset(&w, 0, sizeof w);
    if (!PyArg_ParseTuple(args, "y*nOOSnnnO", &view, &start, &w.find_class, &w.persistent_load, &codes,
                          &w.max_events, &w.max_line, &w.min_objects, &fast))
        return NULL;
    if (PyBytes_GET_SIZE(codes) != 256 || start < 0 || start > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "decode: codes must be 256 bytes and start within the data");
        return NULL;
    }
    if (fast != Py_None && (!PyTuple_Check(fast) || PyTuple_GET_SIZE(fast) != 6)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError,
                        "decode: fast must be None or (rebuild, type, fields, storage fields, storages, size)");
        return NULL;
    }
    if (fast != Py_None) {
        w.rebuild = PyTuple_GET_ITEM(fast, 0);
        w.tensor_type = PyTuple_GET_ITEM(fast, 1);
        w.tensor_fields = PyTuple_GET_ITEM(fast, 2);
        w.storage_fields = PyTuple_GET_ITEM(fast, 3);
        w.size = PyTuple_GET_ITEM(fast, 5);
        if (PyTuple_GET_ITEM(fast, 4) != Py_None) {
            PyObject *st = PyTuple_GET_ITEM(fast, 4);
            if (!PyTuple_Check(st) || PyTuple_GET_SIZE(st) != 7 || !PyDict_Check(PyTuple_GET_ITEM(st, 0)) ||
                !PyUnicode_CheckExact(PyTuple_GET_ITEM(st, 1)) || !PyTuple_Check(PyTuple_GET_ITEM(st, 2)) ||
                PyTuple_GET_SIZE(PyTuple_GET_ITEM(st, 2)) != 6 || !PyTuple_Check(PyTuple_GET_ITEM(st, 4)) ||
                PyTuple_GET_SIZE(PyTuple_GET_ITEM(st, 4)) != 3 || !PyLong_Check(PyTuple_GET_ITEM(st, 5))) {
                PyBuffer_Release(&view);
                PyErr_SetString(PyExc_ValueError, "decode: malformed storage tuple");
                return NULL;
            }
            w.storages = PyTuple_GET_ITEM(st, 0);
            w.key_prefix = PyTuple_GET_ITEM(st, 1);
            w.ref_fields = PyTuple_GET_ITEM(st, 2);
            w.stype_type = PyTuple_GET_ITEM(st, 3);
            w.stype_fields = PyTuple_GET_ITEM(st, 4);
            w.every = PyTuple_GET_ITEM(st, 5);
            w.on_every = PyTuple_GET_ITEM(st, 6);
        }
        if (!PyType_Check(w.tensor_type) || !PyTuple_Check(w.tensor_fields) ||
            PyTuple_GET_SIZE(w.tensor_fields) != 9 || !PyTuple_Check(w.storage_fields) ||
            PyTuple_GET_SIZE(w.storage_fields) != 3) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_ValueError, "decode: malformed fast tuple");
            return NULL;
        }
    }
    w.p = (const unsigned char *)view.buf;
    w.pos = start;
    w.end = view.len;
    w.codes = (const unsigned char *)PyBytes_AS_STRING(codes);
    w.torch_opcodes = 1;
    w.asked = PyList_New(0);
    if (w.asked == NULL)
        goto done;
    while (w.pos < w.end) {
        unsigned char op = w.p[w.pos++];
        unsigned char kind = w.codes[op];
        if (kind == 0)
            goto decline;
        if (kind == 2)
            w.torch_opcodes = 0;
        if (op == '.') { /* STOP: the top of the stack, above the last mark */
            value = pop(&w);
            if (value == NULL)
                goto decline;
            result = Py_BuildValue("(NOniin)", value, w.asked, w.pos, w.protocol, w.torch_opcodes,
                                   w.stack_globals);
            goto done;
        }
        if (step(&w, op) < 0)
            goto decline;
    }
decline:
    if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_Exception))
        goto done; /* KeyboardInterrupt and the like: the user's, not the pickle's */
    PyErr_Clear(); /* whatever went wrong, the pure path meets it again and says what it is */
    Py_INCREF(Py_None);
    result = Py_None;
done:
    Py_XDECREF(w.asked);
    vec_clear(&w.stack);
    vec_clear(&w.memo);
    PyMem_Free(w.marks.at);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS,
     "decode(data, start, find_class, persistent_load, codes, max_events, max_line, min_objects, fast) -> (value, asked, end, protocol, "
     "torch_opcodes, stack_globals) or None (not done here: take the pure path)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "pickle_walk",
                                       "torch.save's data.pkl decoded in one C pass (see pickle_walk.c)", -1,
                                       methods};

PyMODINIT_FUNC PyInit_pickle_walk(void) { return PyModule_Create(&moduledef); }
