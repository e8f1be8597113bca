/* The `.metadata` pickle of a torch.distributed.checkpoint save, decoded into columns.
 *
 * A 70B + AdamW save over 1024 ranks declares 2.2 million chunks and as many storage records: built as
 * Python objects (what pickle.load and the general path make) they cost ~2 KB each. This decoder runs
 * the opcodes FileSystemWriter's pickle.dump emits (protocols 2 to 5) on compact 8-byte values and hands
 * back one Python object per entry plus flat int64 columns per chunk and per storage record.
 *
 * It is strict: any opcode, global, shape or sharing it does not know (a mutable container fetched from
 * the memo, a memo index no pickler writes, an opcode crossing its frame, a field of an unexpected type)
 * ends it with None, and the caller takes the general path, which judges and decodes every pickle. So it
 * changes how fast a save torch wrote is listed, never what is found in another file. Bounded: every
 * value it keeps was pushed by at least one byte of input; nothing recurses.
 *
 * decode(source, size, dtypes) -> None | (globals, version, planner_data, entries, storage_records, chunk_item,
 *     chunk_numel, offsets_index, offsets_pool, sizes_index, sizes_pool, item_path, item_offset,
 *     item_length, paths)
 *   source: the pickle's bytes (any buffer), or read_at(offset, length) -> bytes, called for windows of
 *   `window` bytes (8 MiB) in order: the file is then never held whole; size: its length.
 *   dtypes: {torch attribute name: dtype name} the global `torch.<name>` may name (its stand-in string).
 *   globals: [(module, name, opcode)] distinct, in order of first appearance (as the scan lists them).
 *   entries: [(fqn, is_bytes, dtype, size, first_chunk, chunk_count, bytes_item)] in state_dict order.
 *   chunk_*: per chunk (entries' chunks in order): the storage record it names (-1: none), its numel;
 *   offsets/sizes of chunk i are pool[index[i]:index[i+1]].  item_*: per storage record: the index of its
 *   relative path in `paths`, its offset and length.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef uint64_t V;
/* tuples: T_TUPLE (in the pool), T_PTUPLE (0 to 2 ints in [0, 2**28) packed in the value: most of a chunk's
   offsets and sizes), T_WRAP (a 1-tuple of a tuple: torch.Size's REDUCE argument), each costing no pool word;
   T_SIZE holds its dims tuple as T_WRAP does */
enum { T_NONE, T_BOOL, T_INT, T_STR, T_TUPLE, T_SIZE, T_GLOBAL, T_OBJ, T_DICT, T_LIST, T_OPAQUE, T_DTYPE,
       T_PTUPLE, T_WRAP };
#define TAG(v) ((int)((v)&15u))
#define PAY(v) ((v) >> 4)
#define MK(tag, p) ((((V)(p)) << 4) | (V)(tag))
#define INTVAL(v) (((int64_t)(v)) >> 4)
#define ABSENT MK(T_NONE, 1) /* a field BUILD did not set */
#define INT_LIMIT ((int64_t)1 << 58)

/* the globals accepted: DCP's records (built here), then the callables REDUCE may call */
enum { G_METADATA, G_TSM, G_BSM, G_TPROPS, G_CHUNK, G_MINDEX, G_SINFO, G_SMETA, G_RECORDS,
       G_MEMFMT = G_RECORDS, G_LAYOUT, G_SIZE, G_PATH };
static const int NFIELDS[G_RECORDS] = {4, 3, 0, 1, 2, 3, 4, 0};
/* field keys (BUILD's dict keys) by record: -1 ends */
enum { K_NONE, K_SDM, K_PLANNER, K_STORAGE, K_SMETA, K_VERSION, K_PROPERTIES, K_SIZE, K_CHUNKS, K_OFFSETS,
       K_SIZES, K_FQN, K_OFFSET, K_INDEX, K_RELPATH, K_LENGTH, K_TRANSFORMS, K_OTHER };
static const char *KEYNAMES[] = {"", "state_dict_metadata", "planner_data", "storage_data", "storage_meta",
                                 "version", "properties", "size", "chunks", "offsets", "sizes", "fqn",
                                 "offset", "index", "relative_path", "length", "transform_descriptors"};
#define NKEYS 17

typedef struct { V *v; size_t n, cap; } Vec;
typedef struct { int64_t *v; size_t n, cap; } IVec;

typedef struct {
    const unsigned char *d; /* the window: bytes [base, base + wlen) of the pickle */
    size_t n, pos, frame_end, base, wlen; /* pos, frame_end (0: outside a frame): offsets in the pickle */
    PyObject *read_at, *window; /* read_at(offset, length) when streamed, and the bytes of the window */
    size_t window_bytes; /* what each read asks for */
    Vec stack, memo, pool;
    IVec marks;
    Vec **conts; size_t nconts, capconts; /* lists and dicts; NULL once consumed */
    PyObject *strings, *string_ids; /* list of str; {str: id} */
    unsigned char *keycode; size_t capkey;
    PyObject *dtypes, *dtype_names; /* the caller's map; list of dtype names by id */
    PyObject *globals, *seen_globals;
} D;

static int grow(void **p, size_t *cap, size_t need, size_t item) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * item);
    if (!q) return -1;
    *p = q; *cap = c;
    return 0;
}
static int vpush(Vec *s, V x) {
    if (s->n == s->cap && grow((void **)&s->v, &s->cap, s->n + 1, sizeof(V))) return -1;
    s->v[s->n++] = x;
    return 0;
}
static int ipush(IVec *s, int64_t x) {
    if (s->n == s->cap && grow((void **)&s->v, &s->cap, s->n + 1, sizeof(int64_t))) return -1;
    s->v[s->n++] = x;
    return 0;
}

/* ---- values */
static int64_t pool_alloc(D *d, size_t words) {
    if (grow((void **)&d->pool.v, &d->pool.cap, d->pool.n + words, sizeof(V))) return -1;
    int64_t at = (int64_t)d->pool.n;
    d->pool.n += words;
    return at;
}
#define SMALL ((uint64_t)1 << 28)
#define IS_TUPLE(v) (TAG(v) == T_TUPLE || TAG(v) == T_PTUPLE || TAG(v) == T_WRAP)
static V unwrap(uint64_t p) { return (p & 1) ? MK(T_PTUPLE, p >> 1) : MK(T_TUPLE, p >> 1); }
static uint64_t wrapped(V tuple) { return (PAY(tuple) << 1) | (TAG(tuple) == T_PTUPLE); }
static int small_int(V v) { return TAG(v) == T_INT && INTVAL(v) >= 0 && (uint64_t)INTVAL(v) < SMALL; }
/* a tuple of `k` items (pool form: pool[at] = length, items after) */
static int new_tuple(D *d, const V *items, size_t k, V *out) {
    if (k <= 2 && (k < 1 || small_int(items[0])) && (k < 2 || small_int(items[1]))) {
        uint64_t a = k >= 1 ? (uint64_t)INTVAL(items[0]) : 0, b = k >= 2 ? (uint64_t)INTVAL(items[1]) : 0;
        *out = MK(T_PTUPLE, k | (a << 2) | (b << 30));
        return 0;
    }
    if (k == 1 && (TAG(items[0]) == T_TUPLE || TAG(items[0]) == T_PTUPLE)) {
        *out = MK(T_WRAP, wrapped(items[0]));
        return 0;
    }
    int64_t at = pool_alloc(d, k + 1);
    if (at < 0) return -1;
    d->pool.v[at] = k;
    memcpy(d->pool.v + at + 1, items, k * sizeof(V));
    *out = MK(T_TUPLE, at);
    return 0;
}
static size_t tlen(D *d, V t) {
    return TAG(t) == T_TUPLE ? (size_t)d->pool.v[PAY(t)] : TAG(t) == T_PTUPLE ? (size_t)(PAY(t) & 3) : 1;
}
static V titem(D *d, V t, size_t i) {
    if (TAG(t) == T_TUPLE) return d->pool.v[PAY(t) + 1 + i];
    if (TAG(t) == T_PTUPLE) return MK(T_INT, (PAY(t) >> (i ? 30 : 2)) & (SMALL - 1));
    return unwrap(PAY(t));
}
#define DIMS(size) unwrap(PAY(size)) /* a T_SIZE's tuple of ints */
/* a record: pool[at] = kind | built << 8, fields after */
static int64_t new_record(D *d, int kind) {
    int64_t at = pool_alloc(d, 1 + NFIELDS[kind]);
    if (at < 0) return -1;
    d->pool.v[at] = (V)kind;
    for (int i = 0; i < NFIELDS[kind]; i++) d->pool.v[at + 1 + i] = ABSENT;
    return at;
}
#define RKIND(d, at) ((int)((d)->pool.v[at] & 0xff))
#define RBUILT(d, at) ((d)->pool.v[at] >> 8)
#define RFIELD(d, at, i) ((d)->pool.v[(at) + 1 + (i)])

/* a list or dict: NULL while empty (most are a record's state, applied at BUILD without ever being filled),
   CONSUMED once applied */
static Vec consumed_, empty_;
#define CONSUMED (&consumed_)
static int64_t new_cont(D *d) {
    if (d->nconts == d->capconts && grow((void **)&d->conts, &d->capconts, d->nconts + 1, sizeof(Vec *))) return -1;
    d->conts[d->nconts] = NULL;
    return (int64_t)d->nconts++;
}
static void free_cont(D *d, size_t id) {
    Vec *c = d->conts[id];
    if (c && c != CONSUMED) { free(c->v); free(c); }
    d->conts[id] = CONSUMED;
}
/* the items of a list or dict, or NULL once consumed */
static Vec *items_of(D *d, V v) {
    Vec *c = d->conts[PAY(v)];
    return c == CONSUMED ? NULL : c ? c : &empty_;
}

/* a str, interned by content; its id */
static int64_t intern(D *d, const char *s, Py_ssize_t n) {
    PyObject *str = PyUnicode_DecodeUTF8(s, n, "surrogatepass");
    if (!str) return -1;
    PyObject *found = PyDict_GetItemWithError(d->string_ids, str);
    if (found) { Py_DECREF(str); return PyLong_AsLongLong(found); }
    if (PyErr_Occurred()) { Py_DECREF(str); return -1; }
    Py_ssize_t id = PyList_GET_SIZE(d->strings);
    PyObject *idobj = PyLong_FromSsize_t(id);
    if (!idobj || PyDict_SetItem(d->string_ids, str, idobj) || PyList_Append(d->strings, str)) {
        Py_XDECREF(idobj); Py_DECREF(str); return -1;
    }
    Py_DECREF(idobj);
    if (grow((void **)&d->keycode, &d->capkey, (size_t)id + 1, 1)) { Py_DECREF(str); return -1; }
    d->keycode[id] = K_OTHER;
    for (int k = 1; k < NKEYS; k++)
        if (PyUnicode_CompareWithASCIIString(str, KEYNAMES[k]) == 0) { d->keycode[id] = (unsigned char)k; break; }
    Py_DECREF(str);
    return id;
}
/* a str as C text; NULL for one holding a NUL (a C comparison would read only its head: "torch\0x" is not
   "torch") or one that does not encode */
static const char *str_utf8(D *d, V v) {
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(d->strings, (Py_ssize_t)PAY(v)), &n);
    return s && strlen(s) == (size_t)n ? s : NULL;
}

/* ---- globals */
static int note_global(D *d, const char *module, const char *name, const char *opcode) {
    PyObject *key = Py_BuildValue("(ss)", module, name);
    if (!key) return -1;
    int has = PySet_Contains(d->seen_globals, key);
    if (has < 0 || (!has && PySet_Add(d->seen_globals, key))) { Py_DECREF(key); return -1; }
    Py_DECREF(key);
    if (has) return 0;
    PyObject *ref = Py_BuildValue("(sss)", module, name, opcode);
    if (!ref) return -1;
    int r = PyList_Append(d->globals, ref);
    Py_DECREF(ref);
    return r;
}
/* the value a global names, or -1: not one this decoder builds (declined) */
static int64_t resolve_global(D *d, const char *module, const char *name, V *out) {
    static const char *META = "torch.distributed.checkpoint.metadata";
    static const char *const RECS[] = {"Metadata", "TensorStorageMetadata", "BytesStorageMetadata",
                                       "TensorProperties", "ChunkStorageMetadata", "MetadataIndex"};
    if (strcmp(module, META) == 0) {
        for (int i = 0; i < 6; i++)
            if (strcmp(name, RECS[i]) == 0) { *out = MK(T_GLOBAL, i); return 0; }
        if (strcmp(name, "StorageMeta") == 0) { *out = MK(T_GLOBAL, G_SMETA); return 0; }
        if (strcmp(name, "_MEM_FORMAT_ENCODING") == 0) { *out = MK(T_GLOBAL, G_MEMFMT); return 0; }
        return -1;
    }
    if (strcmp(module, "torch.distributed.checkpoint.filesystem") == 0 && strcmp(name, "_StorageInfo") == 0) {
        *out = MK(T_GLOBAL, G_SINFO); return 0;
    }
    if (strcmp(module, "torch.serialization") == 0 && strcmp(name, "_get_layout") == 0) {
        *out = MK(T_GLOBAL, G_LAYOUT); return 0;
    }
    if (strcmp(module, "pathlib") == 0 && (strcmp(name, "PosixPath") == 0 || strcmp(name, "PurePosixPath") == 0)) {
        *out = MK(T_GLOBAL, G_PATH); return 0;
    }
    if (strcmp(module, "torch") == 0) {
        if (strcmp(name, "Size") == 0) { *out = MK(T_GLOBAL, G_SIZE); return 0; }
        PyObject *dname = PyDict_GetItemString(d->dtypes, name);
        if (!dname || !PyUnicode_Check(dname)) return -1;
        Py_ssize_t n = PyList_GET_SIZE(d->dtype_names);
        for (Py_ssize_t i = 0; i < n; i++)
            if (PyList_GET_ITEM(d->dtype_names, i) == dname) { *out = MK(T_DTYPE, i); return 0; }
        if (PyList_Append(d->dtype_names, dname)) return -1;
        *out = MK(T_DTYPE, n);
        return 0;
    }
    return -1;
}

/* ---- reading */
static int declined_at; /* the source line that declined last: why() (tests, debugging) */
#define DECLINE do { declined_at = __LINE__; goto decline; } while (0)
#define WINDOW ((size_t)8 << 20) /* 50 reads for the 404 MB .metadata of 1024 ranks */
/* bytes [pos, pos + k) in the window (read further when streamed); -1: past the data or the read failed */
static int refill(D *d, size_t k) {
    if (!d->read_at) return -1;
    size_t want = k > d->window_bytes ? k : d->window_bytes;
    if (want > d->n - d->pos) want = d->n - d->pos;
    PyObject *w = PyObject_CallFunction(d->read_at, "nn", (Py_ssize_t)d->pos, (Py_ssize_t)want);
    if (!w) return -1;
    if (!PyBytes_Check(w) || (size_t)PyBytes_GET_SIZE(w) != want) { Py_DECREF(w); return -1; } /* it changed */
    Py_XSETREF(d->window, w);
    d->d = (const unsigned char *)PyBytes_AS_STRING(w);
    d->base = d->pos;
    d->wlen = want;
    return 0;
}
#define NEED(k) do { size_t lim_ = d->frame_end ? d->frame_end : d->n; \
                     if ((k) > lim_ - d->pos) DECLINE; \
                     if (d->pos + (k) > d->base + d->wlen && refill(d, (k))) DECLINE; } while (0)
#define AT(p) (d->d + ((p) - d->base)) /* a pointer to byte p of the pickle, within the window */
#define FENCE (d->marks.n ? (size_t)d->marks.v[d->marks.n - 1] : 0)
#define POP(x) do { if (d->stack.n <= FENCE) DECLINE; (x) = d->stack.v[--d->stack.n]; } while (0)
#define PUSH(x) do { if (vpush(&d->stack, (x))) DECLINE; } while (0)

static uint64_t le(const unsigned char *p, int k) {
    uint64_t x = 0;
    for (int i = k - 1; i >= 0; i--) x = (x << 8) | p[i];
    return x;
}
static int int_value(int64_t x, V *out) {
    if (x >= INT_LIMIT || x <= -INT_LIMIT) return -1;
    *out = MK(T_INT, (uint64_t)x);
    return 0;
}

/* may the memo hand this value out again? Mutable containers, half-built records and the records keyed
   by identity (MetadataIndex) or holding a chunk list never are in what torch writes */
static int shareable(D *d, V v) {
    int t = TAG(v);
    if (t == T_DICT || t == T_LIST) return 0;
    if (t == T_OBJ) {
        int64_t at = (int64_t)PAY(v);
        int kind = RKIND(d, at);
        return RBUILT(d, at) && kind != G_MINDEX && kind != G_TSM && kind != G_METADATA;
    }
    return 1;
}

/* BUILD of a record from a dict state's items (key, value, key, value ...) */
static int build_fields(D *d, int64_t at, const V *kv, size_t n) {
    int kind = RKIND(d, at);
    if (RBUILT(d, at) || kind == G_TPROPS || kind == G_BSM) return -1;
    for (size_t i = 0; i < n; i += 2) {
        V k = kv[i], v = kv[i + 1];
        if (TAG(k) != T_STR) return -1;
        int code = d->keycode[PAY(k)], slot = -1;
        switch (kind) {
        case G_METADATA: slot = code == K_SDM ? 0 : code == K_PLANNER ? 1 : code == K_STORAGE ? 2
                              : code == K_VERSION ? 3 : code == K_SMETA ? -2 : -1; break;
        case G_TSM: slot = code == K_PROPERTIES ? 0 : code == K_SIZE ? 1 : code == K_CHUNKS ? 2 : -1; break;
        case G_CHUNK: slot = code == K_OFFSETS ? 0 : code == K_SIZES ? 1 : -1; break;
        case G_MINDEX: slot = code == K_FQN ? 0 : code == K_OFFSET ? 1 : code == K_INDEX ? 2 : -1; break;
        case G_SINFO: slot = code == K_RELPATH ? 0 : code == K_OFFSET ? 1 : code == K_LENGTH ? 2
                           : code == K_TRANSFORMS ? 3 : -1; break;
        case G_SMETA: slot = -2; break; /* checkpoint_id, save_id, ...: not listed */
        default: return -1;
        }
        if (slot == -1) return -1;
        if (slot >= 0) RFIELD(d, at, slot) = v;
    }
    d->pool.v[at] |= (V)1 << 8;
    return 0;
}

static int build(D *d, V inst, V state) {
    if (TAG(inst) != T_OBJ) return -1;
    int64_t at = (int64_t)PAY(inst);
    if (RBUILT(d, at)) return -1;
    if (RKIND(d, at) == G_TPROPS) { /* __getstate__: (dtype, layout, requires_grad, memory_format, pin_memory) */
        if (!IS_TUPLE(state) || tlen(d, state) == 0 || TAG(titem(d, state, 0)) != T_DTYPE) return -1;
        RFIELD(d, at, 0) = titem(d, state, 0);
        d->pool.v[at] |= (V)1 << 8;
        return 0;
    }
    if (TAG(state) != T_DICT) return -1;
    Vec *c = items_of(d, state);
    if (!c || build_fields(d, at, c->v, c->n)) return -1;
    free_cont(d, PAY(state)); /* the state lives on in the record's fields only */
    return 0;
}

static int reduce(D *d, V callable, V args, V *out) {
    if (TAG(callable) != T_GLOBAL || !IS_TUPLE(args)) return -1;
    size_t k = tlen(d, args);
    switch ((int)PAY(callable)) {
    case G_SIZE: { /* torch.Size((dims...)) */
        if (TAG(args) != T_WRAP) return -1;
        V dims = unwrap(PAY(args));
        for (size_t i = 0; i < tlen(d, dims); i++)
            if (TAG(titem(d, dims, i)) != T_INT) return -1;
        *out = MK(T_SIZE, PAY(args));
        return 0;
    }
    case G_LAYOUT:
        if (k != 1 || TAG(titem(d, args, 0)) != T_STR) return -1;
        *out = MK(T_OPAQUE, 0);
        return 0;
    case G_MEMFMT:
        if (k != 1 || TAG(titem(d, args, 0)) != T_INT) return -1;
        *out = MK(T_OPAQUE, 0);
        return 0;
    case G_PATH:
        for (size_t i = 0; i < k; i++)
            if (TAG(titem(d, args, i)) != T_STR) return -1;
        *out = MK(T_OPAQUE, 0);
        return 0;
    default:
        return -1;
    }
}

/* run the opcodes to STOP; 0 with the result on the stack, -1 declined (a Python error may be set) */
static int run(D *d) {
    for (;;) {
        if (d->frame_end && d->pos == d->frame_end) d->frame_end = 0;
        NEED(1);
        unsigned char op = *AT(d->pos);
        d->pos++;
        V x, y, z;
        switch (op) {
        case 0x80: NEED(1); if (*AT(d->pos) < 2 || *AT(d->pos) > 5) DECLINE; d->pos++; break; /* PROTO */
        case 0x95: { /* FRAME */
            NEED(8);
            uint64_t len = le(AT(d->pos), 8);
            d->pos += 8;
            if (d->frame_end || len > d->n - d->pos) DECLINE;
            d->frame_end = len ? d->pos + len : 0;
            break;
        }
        case '.': /* STOP */
            if (d->stack.n != 1 || d->marks.n || (d->frame_end && d->pos != d->frame_end) || d->pos != d->n) DECLINE;
            return 0;
        case '(': if (ipush(&d->marks, (int64_t)d->stack.n)) DECLINE; break;
        case ')': PUSH(MK(T_PTUPLE, 0)); break;
        case 0x85: case 0x86: case 0x87: { /* TUPLE1..3 */
            size_t k = op - 0x84u;
            if (d->stack.n < k || FENCE > d->stack.n - k) DECLINE;
            if (new_tuple(d, d->stack.v + d->stack.n - k, k, &x)) DECLINE;
            d->stack.n -= k;
            PUSH(x);
            break;
        }
        case 't': { /* TUPLE */
            if (!d->marks.n) DECLINE;
            size_t m = (size_t)d->marks.v[--d->marks.n];
            if (new_tuple(d, d->stack.v + m, d->stack.n - m, &x)) DECLINE;
            d->stack.n = m;
            PUSH(x);
            break;
        }
        case ']': { int64_t c = new_cont(d); if (c < 0) DECLINE; PUSH(MK(T_LIST, c)); break; }
        case '}': { int64_t c = new_cont(d); if (c < 0) DECLINE; PUSH(MK(T_DICT, c)); break; }
        case 'a': case 'e': case 's': case 'u': { /* APPEND, APPENDS, SETITEM, SETITEMS */
            size_t from;
            if (op == 'a' || op == 's') {
                if (d->stack.n < (op == 'a' ? 2u : 3u)) DECLINE;
                from = d->stack.n - (op == 'a' ? 1 : 2);
            } else {
                if (!d->marks.n) DECLINE;
                from = (size_t)d->marks.v[--d->marks.n];
                if (from == 0) DECLINE;
            }
            if (FENCE > from - 1) DECLINE; /* the container lies above the enclosing mark */
            V target = d->stack.v[from - 1];
            size_t k = d->stack.n - from;
            if (TAG(target) != ((op == 'a' || op == 'e') ? T_LIST : T_DICT) || ((op == 's' || op == 'u') && k % 2))
                DECLINE;
            Vec *c = d->conts[PAY(target)];
            if (c == CONSUMED) DECLINE;
            if (!c && op == 'u' && from >= 2 && FENCE <= from - 2 && d->pos < (d->frame_end ? d->frame_end : d->n) &&
                d->pos < d->base + d->wlen && *AT(d->pos) == 'b' && TAG(d->stack.v[from - 2]) == T_OBJ) {
                /* SETITEMS then BUILD of a record's fresh state: its fields straight from the stack */
                if (build_fields(d, (int64_t)PAY(d->stack.v[from - 2]), d->stack.v + from, k)) DECLINE;
                d->conts[PAY(target)] = CONSUMED;
                d->stack.n = from - 1;
                d->pos++;
                break;
            }
            if (!c && !(c = d->conts[PAY(target)] = calloc(1, sizeof(Vec)))) DECLINE;
            if (grow((void **)&c->v, &c->cap, c->n + k, sizeof(V))) DECLINE;
            memcpy(c->v + c->n, d->stack.v + from, k * sizeof(V));
            c->n += k;
            d->stack.n = from;
            break;
        }
        case 0x94: if (d->stack.n <= FENCE || vpush(&d->memo, d->stack.v[d->stack.n - 1])) DECLINE; break; /* MEMOIZE */
        case 'q': case 'r': { /* BINPUT, LONG_BINPUT: only the next index, as picklers write them */
            int k = op == 'q' ? 1 : 4;
            NEED((size_t)k);
            uint64_t i = le(AT(d->pos), k);
            d->pos += k;
            if (i != d->memo.n || d->stack.n <= FENCE || vpush(&d->memo, d->stack.v[d->stack.n - 1])) DECLINE;
            break;
        }
        case 'h': case 'j': { /* BINGET, LONG_BINGET */
            int k = op == 'h' ? 1 : 4;
            NEED((size_t)k);
            uint64_t i = le(AT(d->pos), k);
            d->pos += k;
            if (i >= d->memo.n || !shareable(d, d->memo.v[i])) DECLINE;
            PUSH(d->memo.v[i]);
            break;
        }
        case 0x8c: case 'X': case 0x8d: { /* SHORT_BINUNICODE, BINUNICODE, BINUNICODE8 */
            int k = op == 0x8c ? 1 : op == 'X' ? 4 : 8;
            NEED((size_t)k);
            uint64_t len = le(AT(d->pos), k);
            d->pos += k;
            NEED(len);
            int64_t id = intern(d, (const char *)AT(d->pos), (Py_ssize_t)len);
            if (id < 0) DECLINE;
            d->pos += len;
            PUSH(MK(T_STR, id));
            break;
        }
        case 'K': NEED(1); x = MK(T_INT, *AT(d->pos)); d->pos += 1; PUSH(x); break;
        case 'M': NEED(2); x = MK(T_INT, le(AT(d->pos), 2)); d->pos += 2; PUSH(x); break;
        case 'J': NEED(4); if (int_value((int32_t)(uint32_t)le(AT(d->pos), 4), &x)) DECLINE; d->pos += 4; PUSH(x); break;
        case 0x8a: { /* LONG1: little-endian two's complement */
            NEED(1);
            size_t k = *AT(d->pos);
            d->pos++;
            if (k > 8) DECLINE;
            NEED(k);
            uint64_t u = k ? le(AT(d->pos), (int)k) : 0;
            if (k && k < 8 && (*AT(d->pos + k - 1) & 0x80)) u |= ~(uint64_t)0 << (8 * k);
            d->pos += k;
            if (int_value((int64_t)u, &x)) DECLINE;
            PUSH(x);
            break;
        }
        case 'N': PUSH(MK(T_NONE, 0)); break;
        case 0x88: PUSH(MK(T_BOOL, 1)); break;
        case 0x89: PUSH(MK(T_BOOL, 0)); break;
        case 0x93: case 'c': { /* STACK_GLOBAL, GLOBAL */
            const char *module, *name;
            char mbuf[128], nbuf[128];
            if (op == 0x93) {
                POP(y); POP(x);
                if (TAG(x) != T_STR || TAG(y) != T_STR) DECLINE;
                module = str_utf8(d, x); name = str_utf8(d, y);
                if (!module || !name) DECLINE;
            } else {
                char *bufs[2] = {mbuf, nbuf};
                for (int part = 0; part < 2; part++) {
                    size_t lim = d->frame_end ? d->frame_end : d->n, j = d->pos;
                    size_t look = lim - d->pos < sizeof(mbuf) ? lim - d->pos : sizeof(mbuf);
                    NEED(look);
                    while (j < d->pos + look && *AT(j) != '\n') {
                        if (*AT(j) < 0x21 || *AT(j) > 0x7e) DECLINE;
                        j++;
                    }
                    if (j >= d->pos + look) DECLINE; /* no newline within a name's length */
                    memcpy(bufs[part], AT(d->pos), j - d->pos);
                    bufs[part][j - d->pos] = 0;
                    d->pos = j + 1;
                }
                module = mbuf; name = nbuf;
            }
            if (resolve_global(d, module, name, &z) < 0) DECLINE;
            if (note_global(d, module, name, op == 0x93 ? "STACK_GLOBAL" : "GLOBAL")) DECLINE;
            PUSH(z);
            break;
        }
        case 0x81: { /* NEWOBJ: cls.__new__(cls) of one of DCP's records */
            POP(y); POP(x);
            if (TAG(x) != T_GLOBAL || PAY(x) >= G_RECORDS || !IS_TUPLE(y) || tlen(d, y) != 0) DECLINE;
            int64_t r = new_record(d, (int)PAY(x));
            if (r < 0) DECLINE;
            if (PAY(x) == G_BSM) d->pool.v[r] |= (V)1 << 8; /* nothing to BUILD: complete as made */
            PUSH(MK(T_OBJ, r));
            break;
        }
        case 'R': POP(y); POP(x); if (reduce(d, x, y, &z)) DECLINE; PUSH(z); break;
        case 'b': /* BUILD */
            POP(y);
            if (!d->stack.n || (d->marks.n && (size_t)d->marks.v[d->marks.n - 1] >= d->stack.n)) DECLINE;
            if (build(d, d->stack.v[d->stack.n - 1], y)) DECLINE;
            break;
        default:
            DECLINE;
        }
        /* POP must not reach below the innermost mark: CPython's unpickler refuses that */
        if (d->marks.n && (size_t)d->marks.v[d->marks.n - 1] > d->stack.n) DECLINE;
    }
decline:
    return -1;
}

/* ---- the columns */

static uint64_t mix(uint64_t h, uint64_t x) { /* murmur3's finalizer over the running hash */
    h ^= x;
    h ^= h >> 33; h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}
/* a key's offsets as the table keeps them: the tuple of a torch.Size, or None. Tuples are canonical where they are
   packed (new_tuple packs every tuple of at most two small ints), so two packed keys are equal when their bits are */
static V key_dims(V offsets) { return TAG(offsets) == T_SIZE ? DIMS(offsets) : MK(T_NONE, 0); }
/* the hash of a key (fqn, offsets or None), as the pure path's dict tells them apart */
static uint64_t key_hash(D *d, V fqn, V dims) {
    uint64_t h = mix(0x51ed27, PAY(fqn));
    if (TAG(dims) == T_NONE) return mix(h, 0xdead);
    size_t k = tlen(d, dims);
    h = mix(h, k);
    for (size_t i = 0; i < k; i++) h = mix(h, titem(d, dims, i));
    return h;
}
static int same_dims(D *d, V a, V b) {
    if (a == b) return 1;
    if (TAG(a) != T_TUPLE || TAG(b) != T_TUPLE) return 0; /* a packed tuple or None equals only itself */
    size_t k = tlen(d, a);
    if (tlen(d, b) != k) return 0;
    for (size_t i = 0; i < k; i++)
        if (titem(d, a, i) != titem(d, b, i)) return 0;
    return 1;
}

/* storage records by key, grouped by fqn: the records of one fqn (about one a rank) sit together in `keys`, in the
   file's order, so that a tensor's chunks are matched against its own records through a small table that stays in
   the cache. One table of every record (2.2 million at 1024 ranks) is far larger than the caches: there each
   lookup was a miss, and the cost of one grew with the save. The last record of a key wins. */
#define EMPTY_SLOT UINT32_MAX
typedef struct { V dims; uint32_t rec; } Key;
typedef struct {
    size_t *start; /* per string id f: its records are keys[start[f] .. start[f + 1]) */
    Key *keys;
    size_t nstr;
    Key *slot; /* the table of one fqn's records, open addressing; rec EMPTY_SLOT: empty */
    size_t mask, cap;
    size_t fqn; /* whose records the table holds (nstr: none yet) */
} Table;
static Key *find_slot(D *d, Table *tab, V dims, uint64_t h) {
    for (size_t at = h & tab->mask;; at = (at + 1) & tab->mask) {
        Key *slot = tab->slot + at;
        if (slot->rec == EMPTY_SLOT || same_dims(d, slot->dims, dims)) return slot;
    }
}
static uint64_t dims_hash(D *d, V dims) { return key_hash(d, MK(T_STR, 0), dims); }
/* the table of fqn f's records; -1: out of memory */
static int table_of(D *d, Table *tab, size_t f) {
    if (tab->fqn == f) return 0;
    size_t n = tab->start[f + 1] - tab->start[f], cap = 8;
    while (cap < 2 * n + 2) cap *= 2;
    if (cap > tab->cap) {
        Key *grown = realloc(tab->slot, cap * sizeof(Key));
        if (!grown) return -1;
        tab->slot = grown;
        tab->cap = cap;
    }
    tab->mask = cap - 1;
    for (size_t i = 0; i < cap; i++) tab->slot[i].rec = EMPTY_SLOT;
    for (const Key *k = tab->keys + tab->start[f], *end = k + n; k < end; k++)
        *find_slot(d, tab, k->dims, dims_hash(d, k->dims)) = *k;
    tab->fqn = f;
    return 0;
}
/* the index of the storage record of (fqn, offsets), -1: none; -2: out of memory */
static int64_t lookup(D *d, Table *tab, V fqn, V off) {
    if (PAY(fqn) >= tab->nstr) return -1;
    if (table_of(d, tab, PAY(fqn))) return -2;
    V dims = key_dims(off);
    Key *slot = find_slot(d, tab, dims, dims_hash(d, dims));
    return slot->rec == EMPTY_SLOT ? -1 : (int64_t)slot->rec;
}
static void free_table(Table *tab) { free(tab->start); free(tab->keys); free(tab->slot); }

static PyObject *int_tuple(D *d, V t) {
    size_t k = tlen(d, t);
    PyObject *out = PyTuple_New((Py_ssize_t)k);
    if (!out) return NULL;
    for (size_t i = 0; i < k; i++) {
        PyObject *x = PyLong_FromLongLong(INTVAL(titem(d, t, i)));
        if (!x) { Py_DECREF(out); return NULL; }
        PyTuple_SET_ITEM(out, (Py_ssize_t)i, x);
    }
    return out;
}
/* a column handed to Python without a copy (at 1024 ranks the columns are 170 MB): the IVec's memory, owned by
   a Column and seen through a memoryview (read-only bytes, compared by content, as bytes were) */
typedef struct { PyObject_HEAD int64_t *v; size_t n; } Column;
static int column_buffer(PyObject *self, Py_buffer *view, int flags) {
    Column *c = (Column *)self;
    return PyBuffer_FillInfo(view, self, c->v, (Py_ssize_t)(c->n * sizeof(int64_t)), 1, flags);
}
static void column_dealloc(PyObject *self) {
    free(((Column *)self)->v);
    Py_TYPE(self)->tp_free(self);
}
static PyBufferProcs COLUMN_BUFFER = {column_buffer, NULL};
static PyTypeObject ColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ckinspect._native.dcpmeta.Column",
    .tp_basicsize = sizeof(Column),
    .tp_dealloc = column_dealloc,
    .tp_as_buffer = &COLUMN_BUFFER,
    .tp_flags = Py_TPFLAGS_DEFAULT,
};
static PyObject *ivec_column(IVec *v) {
    if (!v->v && !(v->v = malloc(sizeof(int64_t)))) return PyErr_NoMemory(); /* an empty column has an address */
    Column *c = PyObject_New(Column, &ColumnType);
    if (!c) return NULL;
    c->v = v->v;
    c->n = v->n;
    v->v = NULL; /* the Column owns it now */
    PyObject *out = PyMemoryView_FromObject((PyObject *)c);
    Py_DECREF(c);
    return out;
}

/* planner_data: {str: tuple of str/int}, or None; NULL (with an error) for any other shape */
static PyObject *planner(D *d, V v) {
    if (TAG(v) == T_NONE) Py_RETURN_NONE;
    Vec *c = TAG(v) == T_DICT ? items_of(d, v) : NULL;
    if (!c) { PyErr_SetString(PyExc_ValueError, "planner_data of another shape"); return NULL; }
    PyObject *out = PyDict_New();
    if (!out) return NULL;
    for (size_t i = 0; i < c->n; i += 2) {
        V k = c->v[i], p = c->v[i + 1];
        if (TAG(k) != T_STR || !IS_TUPLE(p) || TAG(p) == T_WRAP) goto bad;
        size_t n = tlen(d, p);
        PyObject *path = PyTuple_New((Py_ssize_t)n);
        if (!path) goto fail;
        for (size_t j = 0; j < n; j++) {
            V e = titem(d, p, j);
            PyObject *x;
            if (TAG(e) == T_STR) { x = PyList_GET_ITEM(d->strings, (Py_ssize_t)PAY(e)); Py_INCREF(x); }
            else if (TAG(e) == T_INT) x = PyLong_FromLongLong(INTVAL(e));
            else { Py_DECREF(path); goto bad; }
            if (!x) { Py_DECREF(path); goto fail; }
            PyTuple_SET_ITEM(path, (Py_ssize_t)j, x);
        }
        int r = PyDict_SetItem(out, PyList_GET_ITEM(d->strings, (Py_ssize_t)PAY(k)), path);
        Py_DECREF(path);
        if (r) goto fail;
    }
    return out;
bad:
    PyErr_SetString(PyExc_ValueError, "planner_data of another shape");
fail:
    Py_DECREF(out);
    return NULL;
}

static int built(D *d, V v, int kind) {
    return TAG(v) == T_OBJ && RKIND(d, PAY(v)) == kind && RBUILT(d, PAY(v));
}
static int push_dims(IVec *pool, D *d, V dims) {
    for (size_t q = 0; q < tlen(d, dims); q++)
        if (ipush(pool, INTVAL(titem(d, dims, q)))) return -1;
    return 0;
}

typedef struct {
    IVec c_item, c_numel, o_index, o_pool, s_index, s_pool, i_path, i_offset, i_length;
} Cols;

/* one TensorStorageMetadata entry's chunks into the columns; -1: declined */
static int tensor_chunks(D *d, Cols *c, Table *tab, V fqn, int64_t r) {
    V chunks = RFIELD(d, r, 2);
    Vec *cl = TAG(chunks) == T_LIST ? items_of(d, chunks) : NULL;
    if (!cl) return -1;
    for (size_t j = 0; j < cl->n; j++) {
        V ch = cl->v[j];
        if (!built(d, ch, G_CHUNK)) return -1;
        V off = RFIELD(d, PAY(ch), 0), sz = RFIELD(d, PAY(ch), 1);
        if (TAG(off) != T_SIZE || TAG(sz) != T_SIZE) return -1;
        V dims = DIMS(sz);
        int64_t numel = 1;
        for (size_t q = 0; q < tlen(d, dims); q++)
            if (__builtin_mul_overflow(numel, INTVAL(titem(d, dims, q)), &numel)) return -1;
        int64_t item = lookup(d, tab, fqn, off);
        if (item == -2 || push_dims(&c->o_pool, d, DIMS(off)) || push_dims(&c->s_pool, d, dims) ||
            ipush(&c->o_index, (int64_t)c->o_pool.n) || ipush(&c->s_index, (int64_t)c->s_pool.n) ||
            ipush(&c->c_item, item) || ipush(&c->c_numel, numel))
            return -1;
    }
    return 0;
}

/* one row of `entries`; NULL with no error set: declined */
static PyObject *entry_row(D *d, Cols *c, Table *tab, PyObject *fqn_obj, V fqn, V e) {
    if (TAG(e) != T_OBJ || !RBUILT(d, PAY(e))) return NULL;
    int64_t r = (int64_t)PAY(e);
    if (RKIND(d, r) == G_BSM) {
        int64_t item = lookup(d, tab, fqn, MK(T_NONE, 0));
        return item == -2 ? NULL : Py_BuildValue("(OiOOnnL)", fqn_obj, 1, Py_None, Py_None, (Py_ssize_t)c->c_item.n,
                                                 (Py_ssize_t)0, (long long)item);
    }
    if (RKIND(d, r) != G_TSM) return NULL;
    V props = RFIELD(d, r, 0), size = RFIELD(d, r, 1);
    if (!built(d, props, G_TPROPS) || TAG(size) != T_SIZE) return NULL;
    size_t first = c->c_item.n;
    if (tensor_chunks(d, c, tab, fqn, r)) return NULL;
    PyObject *dims = int_tuple(d, DIMS(size));
    if (!dims) return NULL;
    PyObject *dtype = PyList_GET_ITEM(d->dtype_names, (Py_ssize_t)PAY(RFIELD(d, PAY(props), 0)));
    return Py_BuildValue("(OiONnnL)", fqn_obj, 0, dtype, dims, (Py_ssize_t)first, (Py_ssize_t)(c->c_item.n - first),
                         (long long)-1);
}

/* the storage records: their columns, and their keys grouped by fqn (a count, then each key in its place); -1:
   declined */
static int storage_records(D *d, Cols *c, Table *tab, Vec *items) {
    size_t nitems = items->n / 2;
    tab->nstr = (size_t)PyList_GET_SIZE(d->strings);
    tab->fqn = tab->nstr;
    if (nitems >= EMPTY_SLOT || !(tab->start = calloc(tab->nstr + 2, sizeof(size_t))) ||
        !(tab->keys = malloc((nitems ? nitems : 1) * sizeof(Key))))
        return -1;
    for (size_t i = 0; i < nitems; i++) {
        V k = items->v[2 * i], w = items->v[2 * i + 1];
        if (!built(d, k, G_MINDEX) || !built(d, w, G_SINFO)) return -1;
        V fqn = RFIELD(d, PAY(k), 0), off = RFIELD(d, PAY(k), 1);
        V rel = RFIELD(d, PAY(w), 0), wo = RFIELD(d, PAY(w), 1), wl = RFIELD(d, PAY(w), 2), tr = RFIELD(d, PAY(w), 3);
        /* an absent offset is the class default, None */
        if (TAG(fqn) != T_STR || !(TAG(off) == T_SIZE || TAG(off) == T_NONE)) return -1;
        if (TAG(rel) != T_STR || TAG(wo) != T_INT || TAG(wl) != T_INT || TAG(tr) != T_NONE) return -1;
        if (ipush(&c->i_path, (int64_t)PAY(rel)) || ipush(&c->i_offset, INTVAL(wo)) ||
            ipush(&c->i_length, INTVAL(wl)))
            return -1;
        tab->start[PAY(fqn) + 2]++;
    }
    for (size_t f = 2; f < tab->nstr + 2; f++) tab->start[f] += tab->start[f - 1];
    for (size_t i = 0; i < nitems; i++) { /* start[f + 1] is where fqn f's next key goes, then where f's keys end */
        V k = items->v[2 * i];
        tab->keys[tab->start[PAY(RFIELD(d, PAY(k), 0)) + 1]++] = (Key){key_dims(RFIELD(d, PAY(k), 1)), (uint32_t)i};
    }
    return 0;
}

static PyObject *columns(D *d) {
    PyObject *result = NULL, *entries = NULL, *order = NULL, *plan = NULL, *version = NULL, *row = NULL;
    Cols c;
    memset(&c, 0, sizeof c);
    Table tab = {0};
    V top = d->stack.v[0];
    if (!built(d, top, G_METADATA)) DECLINE;
    int64_t meta = (int64_t)PAY(top);
    V sdm = RFIELD(d, meta, 0), pd = RFIELD(d, meta, 1), sd = RFIELD(d, meta, 2), ver = RFIELD(d, meta, 3);
    Vec *md = TAG(sdm) == T_DICT ? items_of(d, sdm) : NULL, *items = TAG(sd) == T_DICT ? items_of(d, sd) : NULL;
    if (!md || !items) DECLINE;
    if (TAG(ver) == T_STR) { version = PyList_GET_ITEM(d->strings, (Py_ssize_t)PAY(ver)); Py_INCREF(version); }
    else if (TAG(ver) == T_NONE) { version = Py_None; Py_INCREF(version); }
    else DECLINE;
    if (!(plan = planner(d, pd)) || storage_records(d, &c, &tab, items)) DECLINE;
    /* state_dict_metadata in dict order (an fqn given twice keeps its first place and its last value) */
    if (!(order = PyDict_New())) DECLINE;
    for (size_t i = 0; i < md->n; i += 2) {
        if (TAG(md->v[i]) != T_STR) DECLINE;
        PyObject *at = PyLong_FromSize_t(i);
        int r = at ? PyDict_SetItem(order, PyList_GET_ITEM(d->strings, (Py_ssize_t)PAY(md->v[i])), at) : -1;
        Py_XDECREF(at);
        if (r) DECLINE;
    }
    if (!(entries = PyList_New(0)) || ipush(&c.o_index, 0) || ipush(&c.s_index, 0)) DECLINE;
    PyObject *fqn_obj, *at_obj;
    Py_ssize_t it = 0;
    while (PyDict_Next(order, &it, &fqn_obj, &at_obj)) {
        size_t i = PyLong_AsSize_t(at_obj);
        if (!(row = entry_row(d, &c, &tab, fqn_obj, md->v[i], md->v[i + 1])) || PyList_Append(entries, row)) DECLINE;
        Py_CLEAR(row);
    }
    free_table(&tab);
    memset(&tab, 0, sizeof tab);
    result = Py_BuildValue("(OOOOnNNNNNNNNNO)", d->globals, version, plan, entries, (Py_ssize_t)(items->n / 2),
                           ivec_column(&c.c_item), ivec_column(&c.c_numel), ivec_column(&c.o_index),
                           ivec_column(&c.o_pool), ivec_column(&c.s_index), ivec_column(&c.s_pool),
                           ivec_column(&c.i_path), ivec_column(&c.i_offset), ivec_column(&c.i_length), d->strings);
decline:
    Py_XDECREF(row); Py_XDECREF(entries); Py_XDECREF(order); Py_XDECREF(plan); Py_XDECREF(version);
    free(c.c_item.v); free(c.c_numel.v); free(c.o_index.v); free(c.o_pool.v); free(c.s_index.v); free(c.s_pool.v);
    free(c.i_path.v); free(c.i_offset.v); free(c.i_length.v); free_table(&tab);
    return result;
}

static void release(D *d) {
    free(d->stack.v); free(d->memo.v); free(d->pool.v); free(d->marks.v); free(d->keycode);
    for (size_t i = 0; i < d->nconts; i++) free_cont(d, i);
    free(d->conts);
    Py_XDECREF(d->strings); Py_XDECREF(d->string_ids); Py_XDECREF(d->dtype_names);
    Py_XDECREF(d->globals); Py_XDECREF(d->seen_globals); Py_XDECREF(d->window);
}

static PyObject *decode(PyObject *self, PyObject *args) {
    PyObject *source, *dtypes;
    Py_ssize_t size, window = (Py_ssize_t)WINDOW;
    if (!PyArg_ParseTuple(args, "OnO!|n", &source, &size, &PyDict_Type, &dtypes, &window)) return NULL;
    if (size < 0 || window < 1) { PyErr_SetString(PyExc_ValueError, "negative size or window"); return NULL; }
    D d;
    memset(&d, 0, sizeof d);
    d.window_bytes = (size_t)window;
    Py_buffer buf;
    int whole = PyObject_CheckBuffer(source);
    if (whole) {
        if (PyObject_GetBuffer(source, &buf, PyBUF_SIMPLE)) return NULL;
        if (buf.len != size) { PyBuffer_Release(&buf); PyErr_SetString(PyExc_ValueError, "size"); return NULL; }
        d.d = buf.buf;
        d.wlen = (size_t)buf.len;
    } else if (PyCallable_Check(source)) {
        d.read_at = source;
    } else {
        PyErr_SetString(PyExc_TypeError, "source: a buffer or read_at(offset, length)");
        return NULL;
    }
    d.n = (size_t)size;
    d.dtypes = dtypes;
    d.strings = PyList_New(0);
    d.string_ids = PyDict_New();
    d.dtype_names = PyList_New(0);
    d.globals = PyList_New(0);
    d.seen_globals = PySet_New(NULL);
    PyObject *out = NULL;
    if (d.strings && d.string_ids && d.dtype_names && d.globals && d.seen_globals && run(&d) == 0) {
        free(d.memo.v); /* nothing refers to the memo after STOP */
        d.memo.v = NULL;
        Py_CLEAR(d.window);
        out = columns(&d);
    }
    release(&d);
    if (whole) PyBuffer_Release(&buf);
    if (!out) {
        if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_MemoryError) &&
            !PyErr_ExceptionMatches(PyExc_UnicodeDecodeError) && !PyErr_ExceptionMatches(PyExc_ValueError))
            return NULL; /* a failing read_at or a bug here, not a declined file: let it be seen */
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return out;
}

static PyObject *why(PyObject *self, PyObject *unused) { return PyLong_FromLong(declined_at); }

static PyMethodDef METHODS[] = {
    {"why", why, METH_NOARGS, "The source line of the last decline (0: none yet)."},
    {"decode", decode, METH_VARARGS,
     "decode(source, size, dtypes[, window]): a DCP .metadata pickle as columns, or None: take the general path."},
    {NULL, NULL, 0, NULL},
};
static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "dcpmeta", NULL, -1, METHODS};
PyMODINIT_FUNC PyInit_dcpmeta(void) {
    if (PyType_Ready(&ColumnType) < 0) return NULL;
    return PyModule_Create(&MODULE);
}
