/* pyprof.annotate._fastpayload: the op range path in C (an optional accelerator).
 *
 * What: build(meta, args, kwargs, op_id, s0) returns exactly the text that
 * pyprof.annotate.ops.build_payload returns (stack_depth 1), byte for byte, and call(meta, fn, args,
 * kwargs) is ops.call_marked: payload, push, the call, pop, backward hooks.
 *
 * Why: written in Python, building that text is most of what pyprof adds to an op. Here it is
 * written into one buffer, a tensor's text seen before is copied whole from a small table, the call
 * site is cached per (code object, instruction offset), and an NVTX range is pushed through the
 * vendored NVTX v3 header without a Python call.
 *
 * Rules: only CPython's public C API and torch's public Python attributes (no torch C++ symbols, no
 * object layouts, no interpreter internals). Everything this file does not handle itself (a list, a
 * string, a dtype argument, an int outside int64, a tensor of another kind than plain strided, a cache
 * miss) is handed to the very Python function the pure-Python path uses, so the two cannot drift
 * apart; the tests check both paths write byte-identical payloads. Not built (no compiler), the
 * package runs the pure-Python path; PYPROF_PURE_PYTHON=1 forces that path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include "nvtx3/nvToolsExt.h" /* NVTX v3, header-only, vendored in csrc/nvtx3 */

/* -- what configure() hands over: types, Python caches and fallbacks --------------------------- */
static PyObject *T_tensor, *T_param;                        /* torch.Tensor, torch.nn.Parameter */
static PyObject *d_names, *d_floats, *d_dtypes, *d_devices; /* describe.py's text caches */
static PyObject *f_tensor_json, *f_arg_json, *f_name_head, *f_float_json, *f_entry, *f_one;
static PyObject *f_dtype_json, *f_device_json, *f_cdtype_json, *f_any_autocast;
static PyObject *no_name_head, *o_strided, *o_qdtypes;
static PyObject *o_state, *o_ids, *f_tracing, *f_grad_enabled, *f_compiling, *f_get_seq;
static PyObject *f_push, *f_pop, *f_hook_op, *f_build_py, *o_nothing, *o_nvtx_only, *d_profiler;
static Py_ssize_t max_cached = 8192;
static int configured = 0;

/* interned attribute names, made by the module's exec slot */
static PyObject *s_shape, *s_dtype, *s_device, *s_is_contiguous, *s_requires_grad, *s_layout;
static PyObject *s_f_lasti, *s_packed, *s_arg_names, *s_route, *s_prof_enabled, *empty_str;

/* -- the text is written into one buffer ------------------------------------------------------ */
typedef struct {
    char *p;
    Py_ssize_t n, cap;
    int ascii;         /* only ASCII written so far: the str is made by one copy */
    char small[1536];  /* most payloads fit; longer ones move to the heap */
} wbuf;

static void
wb_init(wbuf *b)
{
    b->p = b->small;
    b->n = 0;
    b->cap = (Py_ssize_t)sizeof b->small;
    b->ascii = 1;
}

static void
wb_free(wbuf *b)
{
    if (b->p != b->small)
        PyMem_Free(b->p);
    b->p = b->small;
}

static int
wb_grow(wbuf *b, Py_ssize_t extra)
{
    Py_ssize_t cap = b->cap;
    while (cap < b->n + extra)
        cap *= 2;
    char *p = b->p == b->small ? PyMem_Malloc(cap) : PyMem_Realloc(b->p, cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (b->p == b->small)
        memcpy(p, b->small, b->n);
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int
wb_put(wbuf *b, const char *s, Py_ssize_t n)
{
    if (b->n + n > b->cap && wb_grow(b, n) < 0)
        return -1;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

#define WB_LIT(b, lit) wb_put((b), (lit), (Py_ssize_t)(sizeof(lit) - 1))

/* a str, as UTF-8 */
static int
wb_str(wbuf *b, PyObject *s)
{
    if (!PyUnicode_Check(s)) {
        PyErr_SetString(PyExc_TypeError, "pyprof: a payload piece is not a str");
        return -1;
    }
    if (PyUnicode_IS_ASCII(s))
        return wb_put(b, (const char *)PyUnicode_DATA(s), PyUnicode_GET_LENGTH(s));
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(s, &n);
    if (u == NULL)
        return -1;
    b->ascii = 0;
    return wb_put(b, u, n);
}

/* a str a Python fallback returned (a new reference, released here) */
static int
wb_str_steal(wbuf *b, PyObject *s)
{
    if (s == NULL)
        return -1;
    int r = wb_str(b, s);
    Py_DECREF(s);
    return r;
}

/* v in decimal at dst (at most 20 characters); returns how many were written */
static inline Py_ssize_t
ll_digits(char *dst, long long v)
{
    char tmp[24];
    int i = (int)sizeof tmp;
    unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    do {
        tmp[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        tmp[--i] = '-';
    memcpy(dst, tmp + i, sizeof tmp - i);
    return (Py_ssize_t)sizeof tmp - i;
}

static int
wb_ll(wbuf *b, long long v)
{
    if (b->n + 21 > b->cap && wb_grow(b, 21) < 0)
        return -1;
    b->n += ll_digits(b->p + b->n, v);
    return 0;
}

/* a Python int as str() writes it: in C for int64, else by str() */
static int
wb_int(wbuf *b, PyObject *v)
{
    if (PyLong_CheckExact(v)) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (x == -1 && PyErr_Occurred())
            return -1;
        if (!overflow)
            return wb_ll(b, x);
    }
    return wb_str_steal(b, PyObject_Str(v));
}

/* The items of a tuple, comma-separated, when all are exact ints within int64: 1 written, 0 not
 * (nothing written: the caller hands the value to the Python path), -1 with an exception. */
static int
wb_int64s(wbuf *b, PyObject *t)
{
    Py_ssize_t n = PyTuple_GET_SIZE(t), mark = b->n;
    for (Py_ssize_t i = 0; i < n; i++) /* a SymInt, a bool or a slice: the Python path, whole */
        if (!PyLong_CheckExact(PyTuple_GET_ITEM(t, i)))
            return 0;
    if (b->n + n * 22 > b->cap && wb_grow(b, n * 22) < 0) /* room for all: then write in place */
        return -1;
    char *out = b->p + b->n;
    for (Py_ssize_t i = 0; i < n; i++) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(t, i), &overflow);
        if (x == -1 && PyErr_Occurred())
            return -1;
        if (overflow) {
            b->n = mark;
            return 0;
        }
        if (i)
            *out++ = ',';
        out += ll_digits(out, x);
    }
    b->n = out - b->p;
    return 1;
}

static PyObject *
wb_finish(wbuf *b)
{
    PyObject *r;
    if (b->ascii) {
        r = PyUnicode_New(b->n, 127);
        if (r != NULL)
            memcpy(PyUnicode_DATA(r), b->p, b->n);
    }
    else {
        r = PyUnicode_DecodeUTF8(b->p, b->n, NULL);
    }
    wb_free(b);
    return r;
}

static int
wb_bool(wbuf *b, PyObject *v)
{
    int t = PyObject_IsTrue(v);
    if (t < 0)
        return -1;
    return t ? WB_LIT(b, "true") : WB_LIT(b, "false");
}

/* cache[key], or fill(key) (which puts it there) when missing: a new reference */
static PyObject *
cached_text(PyObject *cache, PyObject *key, PyObject *fill)
{
    PyObject *s = PyDict_GetItemWithError(cache, key);
    if (s != NULL)
        return Py_NewRef(s);
    if (PyErr_Occurred())
        return NULL;
    return PyObject_CallOneArg(fill, key);
}

/* -- whole tensor texts, keyed by what they are made of ---------------------------------------
 * Most tensors an op sees were seen before with the same shape, dtype, device, contiguity and
 * requires_grad. A small direct-mapped table keeps the text written for such a key, so that a hit
 * copies it whole instead of writing the shape digit by digit and the other fields piece by piece.
 * The facts come from torch's public getters. dtype and device are keyed by the address of their
 * text (from describe.py's caches); a slot holds a reference to both texts, so an address it keeps
 * cannot be reused by another object while the slot lives. */
#define TT_SLOTS 256
#define TT_DIMS 8
#define TT_TEXT 160
typedef struct {
    PyObject *dtype, *device; /* the texts; NULL dtype: an empty slot */
    unsigned char contig, grad, ndim;
    long long dims[TT_DIMS];  /* the first ndim */
} tensor_key;
typedef struct {
    tensor_key key;           /* holds references to its two texts */
    unsigned char len;
    char text[TT_TEXT];       /* '"tensor","shape":[..],...}' (ASCII) */
} tensor_slot;
static tensor_slot tensor_table[TT_SLOTS];
static unsigned long long tensor_hits = 0; /* texts served by the table (see info()) */

/* fill k from the getters' results: 1, or 0 where the table does not apply (nothing raised) */
static int
tensor_key_make(tensor_key *k, PyObject *shape, PyObject *dts, PyObject *devs, PyObject *contig,
                PyObject *grad)
{
    if (!PyTuple_Check(shape) || (contig != Py_True && contig != Py_False)
            || (grad != Py_True && grad != Py_False))
        return 0;
    Py_ssize_t n = PyTuple_GET_SIZE(shape);
    if (n < 1 || n > TT_DIMS)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = PyTuple_GET_ITEM(shape, i);
        if (!PyLong_CheckExact(d))
            return 0;
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(d, &overflow);
        if (overflow || (x == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return 0;
        }
        k->dims[i] = x;
    }
    k->ndim = (unsigned char)n;
    k->dtype = dts;
    k->device = devs;
    k->contig = contig == Py_True;
    k->grad = grad == Py_True;
    return 1;
}

static inline tensor_slot *
tensor_slot_of(const tensor_key *k)
{
    uint64_t h = (uint64_t)(uintptr_t)k->dtype ^ ((uint64_t)(uintptr_t)k->device << 17)
                 ^ (uint64_t)(k->contig | k->grad << 1 | k->ndim << 2);
    for (int i = 0; i < k->ndim; i++)
        h = (h ^ (uint64_t)k->dims[i]) * 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return &tensor_table[h & (TT_SLOTS - 1)];
}

static inline int
tensor_keys_equal(const tensor_key *a, const tensor_key *b)
{
    return a->dtype == b->dtype && a->device == b->device && a->contig == b->contig && a->grad == b->grad
           && a->ndim == b->ndim && memcmp(a->dims, b->dims, sizeof(long long) * (size_t)a->ndim) == 0;
}

/* keep the text just written (from, len) for k, where it is ASCII and fits */
static void
tensor_slot_store(tensor_slot *s, const tensor_key *k, const char *from, Py_ssize_t len)
{
    if (len > TT_TEXT)
        return;
    for (Py_ssize_t i = 0; i < len; i++)
        if ((unsigned char)from[i] > 127)
            return;
    PyObject *old_dtype = s->key.dtype, *old_device = s->key.device;
    s->key = *k;
    Py_INCREF(k->dtype);
    Py_INCREF(k->device);
    memcpy(s->text, from, (size_t)len);
    s->len = (unsigned char)len;
    Py_XDECREF(old_dtype);
    Py_XDECREF(old_device);
}

static void
tensor_table_clear(void)
{
    for (int i = 0; i < TT_SLOTS; i++) {
        Py_CLEAR(tensor_table[i].key.dtype);
        Py_CLEAR(tensor_table[i].key.device);
    }
}

/* tensor.is_contiguous(), with RuntimeError (layouts without strides) read as False as the Python
 * path does: new reference, or NULL with an exception */
static PyObject *
tensor_contiguous(PyObject *v)
{
    PyObject *contig = PyObject_CallMethodNoArgs(v, s_is_contiguous);
    if (contig == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_RuntimeError))
            return NULL;
        PyErr_Clear();
        contig = Py_NewRef(Py_False);
    }
    return contig;
}

/* Is v of a kind describe._tensor_json writes with a "kind" field: another layout than
 * torch.strided (sparse, mkldnn), or a quantized dtype? 1/0, -1 with an exception. */
static int
tensor_is_odd(PyObject *v, PyObject *dtype)
{
    PyObject *layout = PyObject_GetAttr(v, s_layout);
    if (layout == NULL)
        return -1;
    int odd = layout != o_strided;
    Py_DECREF(layout);
    return odd ? 1 : PySet_Contains(o_qdtypes, dtype);
}

/* describe._tensor_json: head + '"tensor","shape":[..],"dtype":..,"device":..,"contig":..,"grad":..}'.
 * Other kinds (nested: its shape getter raises; sparse, mkldnn, quantized: tensor_is_odd) are written
 * by the Python function, with their "kind", and never enter the table. */
static int
put_tensor(wbuf *b, PyObject *v, PyObject *head)
{
    PyObject *contig = tensor_contiguous(v);
    if (contig == NULL)
        return -1;
    PyObject *shape = PyObject_GetAttr(v, s_shape);
    PyObject *dtype = shape ? PyObject_GetAttr(v, s_dtype) : NULL;
    PyObject *device = dtype ? PyObject_GetAttr(v, s_device) : NULL;
    PyObject *grad = device ? PyObject_GetAttr(v, s_requires_grad) : NULL;
    PyObject *dts = NULL, *devs = NULL;
    int r = -1;
    if (shape == NULL && PyErr_ExceptionMatches(PyExc_RuntimeError)) {
        PyErr_Clear(); /* a nested tensor has no sizes */
        goto python;
    }
    if (grad == NULL)
        goto done;
    int odd = tensor_is_odd(v, dtype);
    if (odd < 0)
        goto done;
    if (odd || !PyTuple_Check(shape)) /* torch.Size is a tuple; anything else: the Python path */
        goto python;
    dts = cached_text(d_dtypes, dtype, f_dtype_json);
    devs = dts ? cached_text(d_devices, device, f_device_json) : NULL;
    if (devs == NULL)
        goto done;
    tensor_key key;
    tensor_slot *slot = NULL;
    if (tensor_key_make(&key, shape, dts, devs, contig, grad)) {
        slot = tensor_slot_of(&key);
        if (tensor_keys_equal(&slot->key, &key)) {
            tensor_hits++;
            r = wb_str(b, head) < 0 ? -1 : wb_put(b, slot->text, slot->len);
            goto done;
        }
    }
    Py_ssize_t mark = b->n;
    if (wb_str(b, head) < 0)
        goto done;
    Py_ssize_t start = b->n;
    if (WB_LIT(b, "\"tensor\",\"shape\":[") < 0)
        goto done;
    int dims = wb_int64s(b, shape);
    if (dims < 0)
        goto done;
    if (dims == 0) {
        b->n = mark;
        goto python;
    }
    if (WB_LIT(b, "],\"dtype\":") < 0 || wb_str(b, dts) < 0 || WB_LIT(b, ",\"device\":") < 0
            || wb_str(b, devs) < 0 || WB_LIT(b, ",\"contig\":") < 0 || wb_bool(b, contig) < 0
            || WB_LIT(b, ",\"grad\":") < 0 || wb_bool(b, grad) < 0 || WB_LIT(b, "}") < 0)
        goto done;
    if (slot != NULL)
        tensor_slot_store(slot, &key, b->p + start, b->n - start);
    r = 0;
    goto done;
python:
    r = wb_str_steal(b, PyObject_CallFunctionObjArgs(f_tensor_json, v, head, NULL));
done:
    Py_DECREF(contig);
    Py_XDECREF(shape);
    Py_XDECREF(dtype);
    Py_XDECREF(device);
    Py_XDECREF(grad);
    Py_XDECREF(dts);
    Py_XDECREF(devs);
    return r;
}

/* the orjson text of a float (describe.float_json), cached in d_floats; new reference */
static PyObject *
float_text(PyObject *v)
{
    double x = PyFloat_AS_DOUBLE(v);
    PyObject *txt = NULL;
    int cacheable = x != 0.0; /* 0.0 == -0.0 as dict keys, but they are written differently */
    if (cacheable) {
        txt = PyDict_GetItemWithError(d_floats, v);
        if (txt != NULL)
            return Py_NewRef(txt);
        if (PyErr_Occurred())
            return NULL;
    }
    txt = PyObject_CallOneArg(f_float_json, v);
    if (txt != NULL && cacheable) {
        if (PyDict_GET_SIZE(d_floats) >= max_cached)
            PyDict_Clear(d_floats);
        if (PyDict_SetItem(d_floats, v, txt) < 0)
            Py_CLEAR(txt);
    }
    return txt;
}

/* describe.arg_json: one argument; what is not written here is written by the Python function */
static int
put_arg(wbuf *b, PyObject *v, PyObject *head, PyObject *name)
{
    PyTypeObject *t = Py_TYPE(v);
    if ((PyObject *)t == T_tensor || (PyObject *)t == T_param)
        return put_tensor(b, v, head);
    if (v == Py_None)
        return wb_str(b, head) < 0 ? -1 : WB_LIT(b, "\"NoneType\",\"value\":null}");
    if (t == &PyBool_Type)
        return wb_str(b, head) < 0 ? -1 : v == Py_True ? WB_LIT(b, "\"bool\",\"value\":true}")
                                                       : WB_LIT(b, "\"bool\",\"value\":false}");
    if (t == &PyLong_Type) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (x == -1 && PyErr_Occurred())
            return -1;
        if (!overflow)
            return (wb_str(b, head) < 0 || WB_LIT(b, "\"int\",\"value\":") < 0 || wb_ll(b, x) < 0)
                   ? -1 : WB_LIT(b, "}");
    }
    else if (t == &PyFloat_Type) {
        PyObject *txt = float_text(v);
        if (txt == NULL)
            return -1;
        int r = (wb_str(b, head) < 0 || WB_LIT(b, "\"float\",\"value\":") < 0 || wb_str(b, txt) < 0)
                ? -1 : WB_LIT(b, "}");
        Py_DECREF(txt);
        return r;
    }
    else if (t == &PyTuple_Type) { /* a tuple of int64 ints (stride=(1, 1)): written here */
        Py_ssize_t mark = b->n;
        if (wb_str(b, head) < 0 || WB_LIT(b, "\"tuple\",\"value\":[") < 0)
            return -1;
        int ints = wb_int64s(b, v);
        if (ints < 0)
            return -1;
        if (ints)
            return WB_LIT(b, "]}");
        b->n = mark; /* other items, or beyond int64: the Python path decides */
    }
    return wb_str_steal(b, PyObject_CallFunctionObjArgs(f_arg_json, v, head, name, NULL));
}

/* -- the call site ------------------------------------------------------------------------------
 * The first frame outside torch/pyprof, walked with the public frame API. Two small
 * open-addressing tables in front of callsite.py's dict cache:
 *   codes: code object -> internal to torch/pyprof?   (as callsite._entry decides)
 *   sites: (code object, f_lasti) -> the JSON text    (as callsite._one writes it)
 * Like the Python cache they hold strong references to the code objects (so an address is never
 * reused while its slot lives); a full probe run evicts the home slot. Misses ask the Python code. */
#define TABLE_BITS 12
#define TABLE_SIZE (1 << TABLE_BITS)
#define PROBES 8
typedef struct { PyObject *code; int internal; } code_slot;
typedef struct { PyObject *code; int lasti; PyObject *text; } site_slot;
static code_slot code_table[TABLE_SIZE];
static site_slot site_table[TABLE_SIZE];

static inline size_t
ptr_hash(const void *p, size_t extra)
{
    size_t h = ((size_t)p >> 4) ^ (extra * 0x9E3779B97F4A7C15ull);
    h ^= h >> 17;
    return h & (TABLE_SIZE - 1);
}

/* the slot to fill for hash h: the first empty one of the probe run, else the home slot */
#define FREE_SLOT(table, h, dst)                                        \
    do {                                                                \
        dst = &table[h];                                                \
        for (int i_ = 0; i_ < PROBES; i_++)                             \
            if (table[(h + i_) & (TABLE_SIZE - 1)].code == NULL) {      \
                dst = &table[(h + i_) & (TABLE_SIZE - 1)];              \
                break;                                                  \
            }                                                           \
    } while (0)

static int
code_internal(PyObject *code) /* 1/0, or -1 with an exception */
{
    size_t h = ptr_hash(code, 0);
    for (int i = 0; i < PROBES; i++) {
        code_slot *sl = &code_table[(h + i) & (TABLE_SIZE - 1)];
        if (sl->code == code)
            return sl->internal;
        if (sl->code == NULL)
            break;
    }
    PyObject *e = PyObject_CallOneArg(f_entry, code); /* callsite._entry: [code, internal, ...] */
    if (e == NULL)
        return -1;
    int internal = -1;
    if (PyList_Check(e) && PyList_GET_SIZE(e) == 4)
        internal = PyObject_IsTrue(PyList_GET_ITEM(e, 1));
    else
        PyErr_SetString(PyExc_TypeError, "pyprof: unexpected call-site cache entry");
    Py_DECREF(e);
    if (internal < 0)
        return -1;
    code_slot *dst;
    FREE_SLOT(code_table, h, dst);
    PyObject *old = dst->code;
    dst->code = Py_NewRef(code);
    dst->internal = internal;
    Py_XDECREF(old);
    return internal;
}

static int
frame_lasti(PyFrameObject *f) /* f_lasti, or -2 with an exception */
{
#if PY_VERSION_HEX >= 0x030B0000
    return PyFrame_GetLasti(f);
#else
    PyObject *lo = PyObject_GetAttr((PyObject *)f, s_f_lasti);
    if (lo == NULL)
        return -2;
    long lasti = PyLong_AsLong(lo);
    Py_DECREF(lo);
    return lasti == -1 && PyErr_Occurred() ? -2 : (int)lasti;
#endif
}

static PyObject *
site_text(PyObject *code, PyFrameObject *f) /* new reference, or NULL with an exception */
{
    int lasti = frame_lasti(f);
    if (lasti == -2)
        return NULL;
    size_t h = ptr_hash(code, (size_t)lasti + 1);
    for (int i = 0; i < PROBES; i++) {
        site_slot *sl = &site_table[(h + i) & (TABLE_SIZE - 1)];
        if (sl->code == code && sl->lasti == lasti)
            return Py_NewRef(sl->text);
        if (sl->code == NULL)
            break;
    }
    PyObject *e = PyObject_CallOneArg(f_entry, code);
    if (e == NULL)
        return NULL;
    PyObject *r = PyObject_CallFunctionObjArgs(f_one, e, (PyObject *)f, NULL); /* callsite._one */
    Py_DECREF(e);
    if (r == NULL)
        return NULL;
    PyObject *text = NULL;
    if (PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 2 && PyUnicode_Check(PyTuple_GET_ITEM(r, 0)))
        text = Py_NewRef(PyTuple_GET_ITEM(r, 0));
    else
        PyErr_SetString(PyExc_TypeError, "pyprof: unexpected call-site text entry");
    Py_DECREF(r);
    if (text == NULL)
        return NULL;
    site_slot *dst;
    FREE_SLOT(site_table, h, dst);
    PyObject *old_code = dst->code, *old_text = dst->text;
    dst->code = Py_NewRef(code);
    dst->lasti = lasti;
    dst->text = Py_NewRef(text);
    Py_XDECREF(old_code);
    Py_XDECREF(old_text);
    return text;
}

/* The JSON text of the first frame outside torch/pyprof (callsite.call_site_json, depth 1). */
static PyObject *
site_json(void)
{
    PyFrameObject *f = PyEval_GetFrame(); /* borrowed; this call's Python caller (pyprof code) */
    Py_XINCREF(f);
    while (f != NULL) {
        PyObject *code = (PyObject *)PyFrame_GetCode(f);
        int internal = code_internal(code);
        if (internal != 1) {
            PyObject *text = internal == 0 ? site_text(code, f) : NULL;
            Py_DECREF(code);
            Py_DECREF(f);
            return text;
        }
        Py_DECREF(code);
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    return PyUnicode_FromString("[]");
}

/* -- the payload ---------------------------------------------------------------------------------- */

/* meta.packed, (head, heads, names, lowp, composite), after meta.arg_names() filled it; new ref. */
static PyObject *
packed_meta(PyObject *meta)
{
    PyObject *packed = PyObject_GetAttr(meta, s_packed);
    if (packed == Py_None) {
        Py_DECREF(packed);
        PyObject *r = PyObject_CallMethodNoArgs(meta, s_arg_names);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
        packed = PyObject_GetAttr(meta, s_packed);
    }
    if (packed != NULL && !(PyTuple_Check(packed) && PyTuple_GET_SIZE(packed) == 5
                            && PyTuple_Check(PyTuple_GET_ITEM(packed, 1))
                            && PyTuple_Check(PyTuple_GET_ITEM(packed, 2)))) {
        Py_DECREF(packed);
        PyErr_SetString(PyExc_TypeError, "pyprof: meta.packed is not (head, heads, names, lowp, composite)");
        return NULL;
    }
    return packed;
}

/* Write the payload text (ops.build_payload at stack_depth 1) of meta's op called with args/kwargs
 * into b (initialised by the caller, who frees it); packed is meta.packed. 0, or -1 with an exception. */
static int
build_into(wbuf *b, PyObject *meta, PyObject *packed, PyObject *args, PyObject *kwargs, PyObject *op_id,
           PyObject *s0)
{
    if (!PyTuple_Check(args) || !(kwargs == Py_None || PyDict_Check(kwargs))) {
        PyErr_SetString(PyExc_TypeError, "build: args must be a tuple and kwargs a dict");
        return -1;
    }
    PyObject *heads = PyTuple_GET_ITEM(packed, 1), *names = PyTuple_GET_ITEM(packed, 2);
    Py_ssize_t na = PyTuple_GET_SIZE(args), nk = kwargs == Py_None ? 0 : PyDict_GET_SIZE(kwargs);
    Py_ssize_t nh = PyTuple_GET_SIZE(heads), nn = PyTuple_GET_SIZE(names), k = 0;
    if (wb_str(b, PyTuple_GET_ITEM(packed, 0)) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < na; i++, k++) {
        PyObject *head = i < nh ? PyTuple_GET_ITEM(heads, i) : no_name_head;
        PyObject *name = i < nn ? PyTuple_GET_ITEM(names, i) : empty_str;
        if ((k && WB_LIT(b, ",") < 0) || put_arg(b, PyTuple_GET_ITEM(args, i), head, name) < 0)
            return -1;
    }
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (nk && PyDict_Next(kwargs, &pos, &key, &value)) {
        if (k++ && WB_LIT(b, ",") < 0)
            return -1;
        PyObject *head = cached_text(d_names, key, f_name_head);
        if (head == NULL)
            return -1;
        Py_INCREF(key); /* held while Python fallbacks run */
        Py_INCREF(value);
        int r = put_arg(b, value, head, key);
        Py_DECREF(head);
        Py_DECREF(key);
        Py_DECREF(value);
        if (r < 0)
            return -1;
    }
    if (WB_LIT(b, "]") < 0)
        return -1;
    int lowp = PyObject_IsTrue(PyTuple_GET_ITEM(packed, 3));
    if (lowp > 0) {
        PyObject *on = PyObject_CallNoArgs(f_any_autocast);
        lowp = on ? PyObject_IsTrue(on) : -1;
        Py_XDECREF(on);
    }
    if (lowp < 0 || (lowp && wb_str_steal(b, PyObject_CallFunctionObjArgs(f_cdtype_json, meta, args, kwargs,
                                                                          NULL)) < 0))
        return -1;
    if (s0 != Py_None && (WB_LIT(b, ",\"seq\":[") < 0 || wb_int(b, s0) < 0 || WB_LIT(b, "]") < 0))
        return -1;
    if (WB_LIT(b, ",\"id\":") < 0 || wb_int(b, op_id) < 0 || WB_LIT(b, ",\"trace\":") < 0
            || wb_str_steal(b, site_json()) < 0 || WB_LIT(b, "}") < 0)
        return -1;
    return 0;
}

static PyObject *
build(PyObject *Py_UNUSED(module), PyObject *const *argv, Py_ssize_t argc)
{
    if (argc != 5) {
        PyErr_SetString(PyExc_TypeError, "build(meta, args, kwargs, op_id, s0)");
        return NULL;
    }
    if (!configured) {
        PyErr_SetString(PyExc_RuntimeError, "pyprof._fastpayload: configure() first");
        return NULL;
    }
    PyObject *packed = packed_meta(argv[0]);
    if (packed == NULL)
        return NULL;
    wbuf b;
    wb_init(&b);
    int r = build_into(&b, argv[0], packed, argv[1], argv[2], argv[3], argv[4]);
    Py_DECREF(packed);
    if (r < 0) {
        wb_free(&b);
        return NULL;
    }
    return wb_finish(&b);
}

/* -- push and pop -------------------------------------------------------------------------------
 * emit.push hands a range to an NVTX tool (S.nvtx), a torch.profiler session (the flag configure()
 * names: profiler[profiler_flag]) and the Recorders (S.recorders). The same checks are
 * made here first, so that a range nobody consumes costs no Python call (token emit.NOTHING) and an
 * NVTX tool alone is served here (token emit.NVTX_ONLY); emit.pop takes both tokens too. */
#define ROUTE_NVTX 1 /* the bits of S.route (state.py: ROUTE_*) */
#define ROUTE_RECORDERS 2
#define ROUTE_NESTED 4
#define ROUTE_BACKWARD 8
#define ROUTE_DEPTH_ONE 16
static long route_now = -1; /* S.route as S.refresh() last handed it over (set_route), -1: read S */
static nvtxDomainHandle_t nv_domain = NULL; /* pyprof's NVTX domain (NULL from NVTX without a tool) */
static int nv_ready = 0;                    /* nvtx_domain() made it */

static int
truth_of(PyObject *v) /* bool(v) of a new reference, released: 1/0, -1 with an exception */
{
    if (v == NULL)
        return -1;
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

static long
state_route(void) /* S.route, or -1 with an exception */
{
    if (route_now >= 0)
        return route_now;
    PyObject *v = PyObject_GetAttr(o_state, s_route);
    if (v == NULL)
        return -1;
    long r = PyLong_AsLong(v);
    Py_DECREF(v);
    return r;
}

/* set_route(state, route): S.refresh() hands over the new bits (ignored for any other state object) */
static PyObject *
set_route(PyObject *Py_UNUSED(module), PyObject *const *argv, Py_ssize_t argc)
{
    if (argc != 2 || !PyLong_Check(argv[1])) {
        PyErr_SetString(PyExc_TypeError, "set_route(state, route: int)");
        return NULL;
    }
    if (argv[0] == o_state) {
        long r = PyLong_AsLong(argv[1]);
        if (r == -1 && PyErr_Occurred())
            return NULL;
        route_now = r < 0 ? -1 : r;
    }
    Py_RETURN_NONE;
}

/* Push a NUL-terminated UTF-8 text as a range in pyprof's NVTX domain (an ASCII-type message: what
 * NVTX tools read as text). Without a tool, NVTX's own stubs make this a no-op. */
static void
nv_push_utf8(const char *s)
{
    nvtxEventAttributes_t a;
    memset(&a, 0, sizeof a);
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = s;
    nvtxDomainRangePushEx(nv_domain, &a);
}

static int
nv_push(PyObject *text)
{
    const char *s = PyUnicode_AsUTF8(text);
    if (s == NULL)
        return -1;
    nv_push_utf8(s);
    return 0;
}

enum { TO_NOBODY, TO_NVTX, TO_PYTHON };

/* Who takes a range now: nobody, an NVTX tool alone (served here), or emit.push (a torch.profiler
 * session or Recorders, or a tool whose domain is not made yet); -1 with an exception. */
static int
consumers(long route)
{
    int nv = (route & ROUTE_NVTX) != 0;
    PyObject *v = PyDict_GetItemWithError(d_profiler, s_prof_enabled); /* borrowed */
    int others = v != NULL ? PyObject_IsTrue(v) : PyErr_Occurred() ? -1 : 0;
    if (others == 0)
        others = (route & ROUTE_RECORDERS) != 0;
    if (others < 0)
        return -1;
    if (others || (nv && !nv_ready))
        return TO_PYTHON;
    return nv ? TO_NVTX : TO_NOBODY;
}

/* emit.push(text): a new reference to the token, or NULL with an exception */
static PyObject *
push_range(PyObject *text, long route)
{
    switch (consumers(route)) {
    case TO_PYTHON:
        return PyObject_CallOneArg(f_push, text);
    case TO_NVTX:
        return nv_push(text) < 0 ? NULL : Py_NewRef(o_nvtx_only);
    case TO_NOBODY:
        return Py_NewRef(o_nothing);
    default:
        return NULL;
    }
}

/* push_range for a text still in its buffer b (freed here): where nobody consumes it, or an NVTX
 * tool alone (which gets the buffer's bytes), no str is made at all. */
static PyObject *
push_built(wbuf *b, long route)
{
    int to = consumers(route);
    if (to == TO_PYTHON) {
        PyObject *text = wb_finish(b), *tok = NULL;
        if (text != NULL)
            tok = PyObject_CallOneArg(f_push, text);
        Py_XDECREF(text);
        return tok;
    }
    int ok = to >= 0 && (to != TO_NVTX || wb_put(b, "", 1) == 0); /* the terminating NUL */
    if (ok && to == TO_NVTX)
        nv_push_utf8(b->p);
    wb_free(b);
    if (!ok)
        return NULL;
    return Py_NewRef(to == TO_NVTX ? o_nvtx_only : o_nothing);
}

/* emit.pop(token): a new reference to None, or NULL with an exception */
static PyObject *
pop_range(PyObject *tok)
{
    if (tok == o_nothing)
        Py_RETURN_NONE;
    if (tok == o_nvtx_only && nv_ready) {
        nvtxDomainRangePop(nv_domain);
        Py_RETURN_NONE;
    }
    return PyObject_CallOneArg(f_pop, tok);
}

/* nvtx_domain(name): create pyprof's NVTX domain (once; emit.nvtx_attached calls it when a tool is
 * there). nvtx_push(text) / nvtx_pop(): a range in it (what emit.push/pop use for NVTX). */
static PyObject *
nvtx_domain(PyObject *Py_UNUSED(module), PyObject *name)
{
    if (!nv_ready) {
        const char *s = PyUnicode_AsUTF8(name);
        if (s == NULL)
            return NULL;
        nv_domain = nvtxDomainCreateA(s);
        nv_ready = 1;
    }
    Py_RETURN_NONE;
}

static PyObject *
nvtx_push(PyObject *Py_UNUSED(module), PyObject *text)
{
    if (!nv_ready) {
        PyErr_SetString(PyExc_RuntimeError, "pyprof._fastpayload: nvtx_domain() first");
        return NULL;
    }
    if (nv_push(text) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
nvtx_pop(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(unused))
{
    if (nv_ready)
        nvtxDomainRangePop(nv_domain);
    Py_RETURN_NONE;
}

/* -- call(meta, fn, args, kwargs): ops.call_marked ------------------------------------------------ */
static _Thread_local int busy = 0; /* inside an op that hides the ops it calls (call_marked's tls.busy) */

/* The end of a try/finally around a call: out is what the call returned (NULL: its exception was
 * fetched into et/ev/etb), closed what the closing call returned. Gives back out, or NULL with the
 * call's exception restored, or NULL with the closing call's own exception if it raised. */
static PyObject *
after_close(PyObject *out, PyObject *closed, PyObject *et, PyObject *ev, PyObject *etb)
{
    if (closed == NULL) {
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(etb);
        Py_XDECREF(out);
        return NULL;
    }
    Py_DECREF(closed);
    PyErr_Restore(et, ev, etb);
    return out;
}

static int
tensor_wants_grad(PyObject *v) /* a tensor that requires grad: 1/0, -1 with an exception */
{
    if (!PyObject_TypeCheck(v, (PyTypeObject *)T_tensor))
        return 0;
    return truth_of(PyObject_GetAttr(v, s_requires_grad));
}

/* ops._wants_grad: does a tensor argument (or one in a list/tuple argument) require grad? */
static int
wants_grad(PyObject *args, PyObject *kwargs)
{
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyTuple_GET_ITEM(args, i);
        int r = 0;
        if (PyList_Check(a) || PyTuple_Check(a)) {
            PyObject *seq = PySequence_Fast(a, "");
            if (seq == NULL)
                return -1;
            for (Py_ssize_t j = 0; r == 0 && j < PySequence_Fast_GET_SIZE(seq); j++)
                r = tensor_wants_grad(PySequence_Fast_GET_ITEM(seq, j));
            Py_DECREF(seq);
        }
        else {
            r = tensor_wants_grad(a);
        }
        if (r)
            return r;
    }
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (kwargs != NULL && PyDict_Next(kwargs, &pos, &key, &value)) {
        int r = tensor_wants_grad(value);
        if (r)
            return r;
    }
    return 0;
}

static PyObject *
call(PyObject *Py_UNUSED(module), PyObject *const *argv, Py_ssize_t argc)
{
    if (argc != 4 || !PyTuple_Check(argv[2]) || !(argv[3] == Py_None || PyDict_Check(argv[3]))) {
        PyErr_SetString(PyExc_TypeError, "call(meta, fn, args: tuple, kwargs: dict)");
        return NULL;
    }
    if (!configured) {
        PyErr_SetString(PyExc_RuntimeError, "pyprof._fastpayload: configure() first");
        return NULL;
    }
    PyObject *meta = argv[0], *fn = argv[1], *args = argv[2];
    PyObject *kwargs = (argv[3] != Py_None && PyDict_GET_SIZE(argv[3])) ? argv[3] : NULL;
    long route = state_route();
    if (route < 0)
        return NULL;
    if (busy && !(route & ROUTE_NESTED)) /* inside an op: nothing to emit */
        return PyObject_Call(fn, args, kwargs);
    int skip = truth_of(PyObject_CallNoArgs(f_compiling)); /* a torch.compile session: no markers */
    if (skip == 0)
        skip = truth_of(PyObject_CallNoArgs(f_tracing)); /* torch.jit.trace records the op */
    if (skip)
        return skip < 0 ? NULL : PyObject_Call(fn, args, kwargs);

    PyObject *op_id = PyIter_Next(o_ids);
    if (op_id == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "pyprof: the op id counter ended");
        return NULL;
    }
    PyObject *s0 = NULL, *packed = NULL, *text = NULL, *tok = NULL, *out = NULL;
    int want = (route & ROUTE_BACKWARD) != 0;
    if (want > 0)
        want = truth_of(PyObject_CallNoArgs(f_grad_enabled));
    if (want > 0)
        want = wants_grad(args, kwargs);
    if (want < 0)
        goto fail;
    s0 = want ? PyObject_CallNoArgs(f_get_seq) : Py_NewRef(Py_None);
    if (s0 == NULL)
        goto fail;

    int built = -1, composite = -1;
    wbuf b; /* the text, where written here (depth one); else text holds the Python path's */
    wb_init(&b);
    packed = packed_meta(meta);
    if (packed != NULL) {
        if (route & ROUTE_DEPTH_ONE)
            built = build_into(&b, meta, packed, args, argv[3], op_id, s0);
        else
            built = (text = PyObject_CallFunctionObjArgs(f_build_py, meta, args, argv[3], op_id, s0, NULL)) ? 0 : -1;
    }
    if (built == 0)
        composite = PyObject_IsTrue(PyTuple_GET_ITEM(packed, 4)); /* meta.composite */
    if (composite < 0) {
        wb_free(&b);
        /* describing must never break the user's call (call_marked: except Exception) */
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            goto fail;
        PyErr_Clear();
        Py_DECREF(op_id);
        Py_DECREF(s0);
        Py_XDECREF(packed);
        Py_XDECREF(text);
        return PyObject_Call(fn, args, kwargs);
    }
    tok = text != NULL ? push_range(text, route) : push_built(&b, route); /* push_built frees b */
    Py_CLEAR(text);
    if (tok == NULL)
        goto fail;
    busy = !composite;
    out = PyObject_Call(fn, args, kwargs);
    busy = 0;
    {   /* finally: pop */
        PyObject *et, *ev, *etb;
        PyErr_Fetch(&et, &ev, &etb);
        out = after_close(out, pop_range(tok), et, ev, etb);
    }
    if (out == NULL)
        goto fail;
    if (s0 != Py_None) {
        PyObject *s1 = PyObject_CallNoArgs(f_get_seq);
        if (s1 == NULL)
            goto fail;
        int later = PyObject_RichCompareBool(s1, s0, Py_GT);
        if (later > 0) {
            PyObject *r = PyObject_CallFunctionObjArgs(f_hook_op, out, s0, s1, op_id, NULL);
            later = r == NULL ? -1 : 0;
            Py_XDECREF(r);
        }
        Py_DECREF(s1);
        if (later < 0)
            goto fail;
    }
    Py_DECREF(op_id);
    Py_DECREF(s0);
    Py_DECREF(packed);
    Py_DECREF(tok);
    return out;
fail:
    Py_XDECREF(out);
    Py_XDECREF(op_id);
    Py_XDECREF(s0);
    Py_XDECREF(packed);
    Py_XDECREF(text);
    Py_XDECREF(tok);
    return NULL;
}

/* -- configure(**shared) ----------------------------------------------------------------------- */
static int
take(PyObject *kw, const char *name, PyObject **slot)
{
    PyObject *v = PyDict_GetItemString(kw, name); /* borrowed */
    if (v == NULL) {
        PyErr_Format(PyExc_KeyError, "configure(): missing %s", name);
        return -1;
    }
    Py_XSETREF(*slot, Py_NewRef(v));
    return 0;
}

static PyObject *
configure(PyObject *Py_UNUSED(module), PyObject *args, PyObject *kw)
{
    if (kw == NULL || PyTuple_GET_SIZE(args)) {
        PyErr_SetString(PyExc_TypeError, "configure() takes keyword arguments only");
        return NULL;
    }
    configured = 0;
    PyObject *limit = NULL;
    if (take(kw, "tensor_type", &T_tensor) || take(kw, "param_type", &T_param)
            || take(kw, "name_txt", &d_names) || take(kw, "float_txt", &d_floats)
            || take(kw, "dtype_txt", &d_dtypes) || take(kw, "device_txt", &d_devices)
            || take(kw, "dtype_json", &f_dtype_json) || take(kw, "device_json", &f_device_json)
            || take(kw, "tensor_json", &f_tensor_json) || take(kw, "arg_json", &f_arg_json)
            || take(kw, "name_head", &f_name_head) || take(kw, "float_json", &f_float_json)
            || take(kw, "entry", &f_entry) || take(kw, "one", &f_one)
            || take(kw, "cdtype_json", &f_cdtype_json) || take(kw, "any_autocast", &f_any_autocast)
            || take(kw, "no_name_head", &no_name_head) || take(kw, "strided", &o_strided)
            || take(kw, "quantized_dtypes", &o_qdtypes) || take(kw, "state", &o_state)
            || take(kw, "ids", &o_ids) || take(kw, "tracing", &f_tracing)
            || take(kw, "grad_enabled", &f_grad_enabled) || take(kw, "compiling", &f_compiling)
            || take(kw, "get_seq", &f_get_seq) || take(kw, "push", &f_push) || take(kw, "pop", &f_pop)
            || take(kw, "nothing", &o_nothing) || take(kw, "nvtx_only", &o_nvtx_only)
            || take(kw, "hook_op", &f_hook_op) || take(kw, "build_payload", &f_build_py)
            || take(kw, "profiler", &d_profiler) || take(kw, "profiler_flag", &s_prof_enabled)
            || take(kw, "max_cached", &limit)) {
        Py_XDECREF(limit);
        return NULL;
    }
    max_cached = PyLong_AsSsize_t(limit);
    Py_DECREF(limit);
    /* profiler[profiler_flag]: whether torch.profiler records, read on every range */
    if (max_cached < 0 || !PyDict_Check(d_profiler) || !PyUnicode_Check(s_prof_enabled)
            || !PyAnySet_Check(o_qdtypes) || !PyIter_Check(o_ids) || !PyDict_Check(d_names)
            || !PyDict_Check(d_floats) || !PyDict_Check(d_dtypes) || !PyDict_Check(d_devices)) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "configure(): max_cached must be an int >= 0, profiler a dict, profiler_flag "
                                         "a str, quantized_dtypes a set, ids an iterator, the caches dicts");
        return NULL;
    }
    tensor_table_clear();
    route_now = -1;
    configured = 1;
    Py_RETURN_NONE;
}

/* info(): counters, for the tests and benchmarks */
static PyObject *
info(PyObject *Py_UNUSED(unused_module), PyObject *Py_UNUSED(unused))
{
    return Py_BuildValue("{s:K,s:O}", "tensor_hits", tensor_hits, "route_kept",
                         route_now >= 0 ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"info", info, METH_NOARGS, "info() -> {'tensor_hits': int, 'route_kept': bool}"},
    {"build", (PyCFunction)(void (*)(void))build, METH_FASTCALL,
     "build(meta, args, kwargs, op_id, s0) -> the op payload text (see ops.build_payload)"},
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     "configure(**shared): hand over the Python caches and fallbacks (see fastpath.load)"},
    {"call", (PyCFunction)(void (*)(void))call, METH_FASTCALL,
     "call(meta, fn, args, kwargs) -> fn(*args, **kwargs) inside its op range (see ops.call_marked)"},
    {"set_route", (PyCFunction)(void (*)(void))set_route, METH_FASTCALL,
     "set_route(state, route): the ROUTE_* bits S.refresh() computed (kept here, read on every range)"},
    {"nvtx_domain", nvtx_domain, METH_O, "nvtx_domain(name): create pyprof's NVTX domain (once)"},
    {"nvtx_push", nvtx_push, METH_O, "nvtx_push(text): push a range with this message in pyprof's NVTX domain"},
    {"nvtx_pop", nvtx_pop, METH_NOARGS, "nvtx_pop(): pop the innermost range of pyprof's NVTX domain"},
    {NULL, NULL, 0, NULL},
};

#define INTERN(var, text) \
    if (var == NULL && (var = PyUnicode_InternFromString(text)) == NULL) return -1

static int
exec_module(PyObject *Py_UNUSED(module))
{
    INTERN(s_shape, "shape");
    INTERN(s_dtype, "dtype");
    INTERN(s_device, "device");
    INTERN(s_is_contiguous, "is_contiguous");
    INTERN(s_requires_grad, "requires_grad");
    INTERN(s_layout, "layout");
    INTERN(s_f_lasti, "f_lasti");
    INTERN(s_packed, "packed");
    INTERN(s_arg_names, "arg_names");
    INTERN(s_route, "route");
    INTERN(empty_str, "");
    return 0;
}

/* Multi-phase initialisation. The state above is process-wide (one torch, one set of patches), so
 * the module declares that it needs the GIL and does not support subinterpreters. */
static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, exec_module},
#if PY_VERSION_HEX >= 0x030C0000
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
#if PY_VERSION_HEX >= 0x030D0000
    {Py_mod_gil, Py_MOD_GIL_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_fastpayload",
    "The op range path in C; see the comment at the top of _fastpayload.c.", 0, methods, slots,
    NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__fastpayload(void)
{
    return PyModuleDef_Init(&moduledef);
}
