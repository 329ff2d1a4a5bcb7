/* pyprof.annotate._fastpayload: the op payload text built in C (optional accelerator).
 *
 * What and why: build(meta, args, kwargs, op_id, s0) returns exactly the text that
 * pyprof.annotate.ops.build_payload returns (stack_depth 1), byte for byte. Written in Python,
 * building that text is most of what pyprof adds to an op; between oneDNN/cuDNN calls the
 * interpreter runs with cold caches, and the same Python work costs 3-4x its hot timing (measured
 * on a ResNet-18 forward, see scripts/bench_init.py). Here the common cases (plain tensors, ints,
 * bools, None, floats, tuples of ints; the call-site walk) are done without the interpreter, and a
 * tensor's text, once written, is kept in a table keyed by every fact it holds (for plain dense
 * tensors read from their TensorImpl, at offsets verified at configure(): see tensor_key_read).
 *
 * It shares every cache with the Python code (handed over once by configure()), and for anything
 * it does not handle itself (a cache miss, a list, a string, a dtype, an int outside int64, ...)
 * it calls the very Python function the pure-Python path uses, so the two paths cannot drift
 * apart: the C side only reads caches the Python side fills. Not built (no compiler), the package
 * runs the pure-Python path; PYPROF_PURE_PYTHON=1 forces that path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <structmember.h>
#include "nvtx3/nvToolsExt.h" /* NVTX v3, header-only, vendored in csrc/nvtx3 */
#ifndef _WIN32
#  include <dlfcn.h>
#endif

/* CPython 3.11 and 3.12: the call-site walk reads the interpreter's own frames (as Cython and
 * greenlet do), instead of asking for a frame object per frame, which the interpreter then makes
 * and frees on every op. The layout is fixed within a minor version, and an extension is built per
 * minor version. Other versions use the public API only. */
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000 && !defined(PYPY_VERSION) \
    && !defined(PYPROF_NO_FRAME_WALK)
#  define PYPROF_FRAME_WALK 1
#  ifndef Py_BUILD_CORE
#    define Py_BUILD_CORE 1
#    define PYPROF_UNDEF_BUILD_CORE 1
#  endif
#  include "internal/pycore_frame.h"
#  ifdef PYPROF_UNDEF_BUILD_CORE
#    undef Py_BUILD_CORE
#  endif
#endif

static PyObject *T_tensor, *T_param;                   /* torch.Tensor, torch.nn.Parameter */
static PyObject *d_names, *d_floats, *d_dtypes, *d_devices; /* caches shared with Python */
static PyObject *f_tensor_json, *f_arg_json, *f_name_head, *f_float_json, *f_entry, *f_one;
static PyObject *f_dtype_json, *f_device_json;
static PyObject *f_cdtype_json, *f_any_autocast;
static PyObject *no_name_head, *empty_str;
static PyObject *s_shape, *s_dtype, *s_device, *s_is_contiguous, *s_requires_grad, *s_layout, *s_f_lasti;
static PyObject *o_strided, *o_qdtypes; /* torch.strided; describe.QUANTIZED_DTYPES (see put_tensor) */
static PyObject *s_packed, *s_arg_names;
static Py_ssize_t max_cached = 8192;
static int configured = 0;

/* -- the text is written into one buffer -------------------------------------------------------
 * (a list of part strings joined at the end allocated a str per argument, and a key tuple per
 * tensor for the Python side's text cache: most of the time was allocation and hashing). */
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

/* a str a Python fallback returned (stolen) */
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
    for (Py_ssize_t i = 0; i < n; i++) /* first: a SymInt, a bool or a slice goes to Python whole */
        if (!PyLong_CheckExact(PyTuple_GET_ITEM(t, i)))
            return 0;
    /* room for every item at once (20 digits and a sign, and a comma): then write in place */
    if (b->n + n * 22 > b->cap && wb_grow(b, n * 22) < 0)
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

/* cache[key] (a str the Python function fill(key) puts there when missing): a new reference */
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

static int
wb_bool(wbuf *b, PyObject *v)
{
    int t = PyObject_IsTrue(v);
    if (t < 0)
        return -1;
    return t ? WB_LIT(b, "true") : WB_LIT(b, "false");
}

/* -- a tensor's facts, read through torch's own getters ---------------------------------------
 * torch.Tensor and nn.Parameter take shape, dtype, device and requires_grad from getset
 * descriptors of torch._C.TensorBase, and is_contiguous from a method descriptor there, with the
 * plain object.__getattribute__. Where configure() finds exactly that (the same descriptor for both
 * types), the getter is called directly, skipping the attribute lookup; otherwise (a torch that
 * differs, a patched attribute) the lookup runs as in Python. */
typedef struct {
    PyObject *name;
    getter get;
    void *closure;
    PyObject *descr; /* keeps get alive */
} tensor_attr;
static tensor_attr a_shape, a_dtype, a_device, a_grad, a_layout;
static PyObject *m_is_contiguous; /* the method descriptor, or NULL: look it up per call */
/* its C function, called straight with no arguments where it takes (args, kwargs) (skipping the
 * descriptor's call, which makes an argument tuple per call); else NULL */
static PyCFunctionWithKeywords is_contiguous_fn = NULL;
static PyObject *no_args; /* () */

static void
tensor_attr_init(tensor_attr *a, PyObject *name)
{
    a->name = name;
    a->get = NULL;
    Py_CLEAR(a->descr);
    PyObject *d1 = PyObject_GetAttr(T_tensor, name), *d2 = d1 ? PyObject_GetAttr(T_param, name) : NULL;
    if (d1 != NULL && d1 == d2 && Py_IS_TYPE(d1, &PyGetSetDescr_Type)
            && ((PyGetSetDescrObject *)d1)->d_getset->get != NULL) {
        a->get = ((PyGetSetDescrObject *)d1)->d_getset->get;
        a->closure = ((PyGetSetDescrObject *)d1)->d_getset->closure;
        a->descr = Py_NewRef(d1);
    }
    Py_XDECREF(d1);
    Py_XDECREF(d2);
    PyErr_Clear();
}

static inline PyObject *
tensor_get(tensor_attr *a, PyObject *v)
{
    return a->get != NULL ? a->get(v, a->closure) : PyObject_GetAttr(v, a->name);
}

static void
tensor_attrs_init(void)
{
    tensor_attr_init(&a_shape, s_shape);
    tensor_attr_init(&a_dtype, s_dtype);
    tensor_attr_init(&a_device, s_device);
    tensor_attr_init(&a_grad, s_requires_grad);
    tensor_attr_init(&a_layout, s_layout);
    Py_CLEAR(m_is_contiguous);
    PyObject *m1 = PyObject_GetAttr(T_tensor, s_is_contiguous);
    PyObject *m2 = m1 ? PyObject_GetAttr(T_param, s_is_contiguous) : NULL;
    is_contiguous_fn = NULL;
    if (m1 != NULL && m1 == m2 && Py_IS_TYPE(m1, &PyMethodDescr_Type)) {
        m_is_contiguous = Py_NewRef(m1);
        PyMethodDef *md = ((PyMethodDescrObject *)m1)->d_method;
        if ((md->ml_flags & ~METH_COEXIST) == (METH_VARARGS | METH_KEYWORDS))
            is_contiguous_fn = (PyCFunctionWithKeywords)(void (*)(void))md->ml_meth;
    }
    Py_XDECREF(m1);
    Py_XDECREF(m2);
    PyErr_Clear();
}

/* -- the dtype and device texts, without a dict probe per tensor --------------------------------
 * describe.dtype_json / device_json fill and keep these texts in dicts keyed by dtype and device.
 * A dtype is a singleton, so a small table keyed by its address serves it. A device object is made
 * anew by every ``tensor.device`` (hashing and comparing it calls into torch twice); its value is a
 * c10::Device, a device type and an index of one byte each, stored right after the object header.
 * configure() checks that this holds for sample devices (same bytes exactly for equal devices),
 * and only then keys a small table by those two bytes; otherwise the dict is probed as before. */
typedef struct {
    uintptr_t key; /* dtypes: the dtype's address (dtypes live as long as torch); devices: see
                    * device_key(); 0 when empty */
    PyObject *text;
} text_slot;
static text_slot dtype_table[32], device_table[64];
static PyTypeObject *device_type = NULL; /* torch.device, where the two bytes were found to hold */

static inline uintptr_t
device_key(PyObject *dev) /* (type byte << 8 | index byte) + 1 */
{
    const unsigned char *p = (const unsigned char *)dev + sizeof(PyObject);
    return (uintptr_t)((p[0] << 8) | p[1]) + 1;
}

/* configure(device_samples=[...]): enable the device table if, over the samples, two devices have
 * the same two bytes exactly when they are equal. */
static int
device_probe(PyObject *samples)
{
    device_type = NULL;
    if (samples == NULL || !PyList_Check(samples) || PyList_GET_SIZE(samples) < 2)
        return 0;
    PyTypeObject *tp = Py_TYPE(PyList_GET_ITEM(samples, 0));
    if (tp->tp_basicsize < (Py_ssize_t)(sizeof(PyObject) + 2))
        return 0;
    Py_ssize_t n = PyList_GET_SIZE(samples);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyList_GET_ITEM(samples, i);
        if (Py_TYPE(a) != tp)
            return 0;
        for (Py_ssize_t j = 0; j < n; j++) {
            PyObject *b = PyList_GET_ITEM(samples, j);
            int eq = PyObject_RichCompareBool(a, b, Py_EQ);
            if (eq < 0)
                return -1;
            if (eq != (device_key(a) == device_key(b)))
                return 0;
        }
    }
    device_type = tp;
    for (size_t i = 0; i < sizeof device_table / sizeof device_table[0]; i++) {
        device_table[i].key = 0;
        Py_CLEAR(device_table[i].text);
    }
    return 0;
}

/* slot's text if it holds key, else cache[obj] (filled by fill(obj)), kept in slot: new reference */
static PyObject *
slot_text(text_slot *slot, uintptr_t key, PyObject *obj, PyObject *cache, PyObject *fill)
{
    if (slot->key == key)
        return Py_NewRef(slot->text);
    PyObject *t = cached_text(cache, obj, fill);
    if (t != NULL && PyUnicode_Check(t)) {
        slot->key = key;
        Py_XSETREF(slot->text, Py_NewRef(t));
    }
    return t;
}

/* describe.dtype_json(dtype): new reference */
static inline PyObject *
dtype_text(PyObject *dtype)
{
    uintptr_t key = (uintptr_t)dtype;
    return slot_text(&dtype_table[(key >> 4) & 31], key, dtype, d_dtypes, f_dtype_json);
}

/* describe.device_json(device): new reference */
static inline PyObject *
device_text(PyObject *dev)
{
    if (Py_TYPE(dev) != device_type)
        return cached_text(d_devices, dev, f_device_json);
    uintptr_t key = device_key(dev);
    return slot_text(&device_table[(key ^ (key >> 8)) & 63], key, dev, d_devices, f_device_json);
}

/* -- whole tensor texts, keyed by what they are made of ---------------------------------------
 * Most tensors an op sees were seen before with the same shape, dtype, device, contiguity and
 * requires_grad (describe._tensor_txt keeps the Python side's texts the same way). A small
 * direct-mapped table keeps the text written for such a key, so that a hit copies it whole instead
 * of writing the shape digit by digit and the other fields piece by piece. The key holds every
 * input of the text: the dims (up to TT_DIMS, all int64), the dtype's address (dtypes live as long
 * as torch), the device's two bytes (only where configure()'s probe enabled device_key), and the
 * two flags. */
#define TT_SLOTS 256
#define TT_DIMS 8
#define TT_TEXT 167 /* a slot is then 256 bytes on 64-bit platforms: four cache lines */
typedef struct {
    uintptr_t dtype;          /* 0: an empty slot */
    uintptr_t device;         /* device_key() */
    unsigned char contig, grad, ndim;
    long long dims[TT_DIMS];  /* the first ndim */
} tensor_key;
typedef struct {
    tensor_key key;
    unsigned char len;
    char text[TT_TEXT];       /* '"tensor","shape":[..],...}' (ASCII) */
} tensor_slot;
#if defined(__GNUC__) || defined(__clang__)
#  define ALIGN_TO_LINE __attribute__((aligned(64)))
#else
#  define ALIGN_TO_LINE
#endif
static tensor_slot tensor_table[TT_SLOTS] ALIGN_TO_LINE;
static unsigned long long tensor_hits = 0; /* texts served by the table (see info()) */

/* fill k from the getters' results: 1, or 0 where the table does not apply (nothing raised) */
static int
tensor_key_make(tensor_key *k, PyObject *shape, PyObject *dtype, PyObject *device, PyObject *contig,
                PyObject *grad)
{
    if (device_type == NULL || Py_TYPE(device) != device_type || !PyTuple_Check(shape)
            || (contig != Py_True && contig != Py_False) || (grad != Py_True && grad != Py_False))
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
    k->dtype = (uintptr_t)dtype;
    k->device = device_key(device);
    k->contig = contig == Py_True;
    k->grad = grad == Py_True;
    return 1;
}

static inline tensor_slot *
tensor_slot_of(const tensor_key *k)
{
    uint64_t h = (uint64_t)k->dtype ^ ((uint64_t)k->device << 32) ^ (uint64_t)(k->contig | k->grad << 1 | k->ndim << 2);
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

/* head, then the text the slot keeps (a table hit) */
static inline int
put_slot_text(wbuf *b, PyObject *head, const tensor_slot *slot)
{
    tensor_hits++;
    return wb_str(b, head) < 0 ? -1 : wb_put(b, slot->text, slot->len);
}

/* keep the text just written (from, to) for k, where it is ASCII and fits */
static void
tensor_slot_store(tensor_slot *s, const tensor_key *k, const char *from, Py_ssize_t len)
{
    if (len > TT_TEXT)
        return;
    for (Py_ssize_t i = 0; i < len; i++)
        if ((unsigned char)from[i] > 127)
            return;
    s->key = *k;
    memcpy(s->text, from, (size_t)len);
    s->len = (unsigned char)len;
}

static void
tensor_table_clear(void)
{
    memset(tensor_table, 0, sizeof tensor_table);
}

/* tensor.is_contiguous(), with RuntimeError (sparse and other layouts without strides) read as
 * False as the Python path does: new reference, or NULL with an exception */
static PyObject *
tensor_contiguous(PyObject *v)
{
    PyObject *contig;
    if (is_contiguous_fn != NULL)
        contig = is_contiguous_fn(v, no_args, NULL);
    else if (m_is_contiguous != NULL)
        contig = PyObject_Vectorcall(m_is_contiguous, &v, 1, NULL);
    else
        contig = PyObject_CallMethodNoArgs(v, s_is_contiguous);
    if (contig == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_RuntimeError))
            return NULL;
        PyErr_Clear();
        contig = Py_NewRef(Py_False);
    }
    return contig;
}

/* -- a tensor's facts read from its TensorImpl, where configure() verified the layout ---------------
 * torch's getters cost about 1.8k instructions for shape, dtype, device and is_contiguous (warning
 * handler, __torch_function__ check, a torch.Size and a torch.device made per call), more than the
 * rest of a tensor's text. The same facts sit in the tensor's c10::TensorImpl: the sizes (inline up
 * to five dims, else behind a pointer), the dtype's TypeMeta index, the optional<Device>, the
 * is_contiguous_ bit, and the DispatchKeySet. configure(layout_samples=...) finds where, on sample
 * tensors of every dtype, cpu and meta, contiguous and not, with one to five dims, by
 * comparing candidate offsets with what torch's getters and torch._C._dispatch_keys say; each field
 * must be found at exactly one offset, or nothing is read. Only tensors whose DispatchKeySet is one
 * of the plain dense sets (layout_keys: what plain samples had, and their CUDA twins) are read: every
 * kind of tensor whose sizes, device or contiguity are not those fields (nested, sparse, mkldnn,
 * quantized, conjugate/negative views, functionalized, vmapped, Python subclasses, other backends)
 * carries a key of its own. requires_grad lives in autograd metadata: it is asked of torch (see
 * "answers read from libtorch" below). A read
 * gives a key for the text table: a hit is served; a miss takes the getters, which store the text
 * under the key they find. Every 64th hit is checked against the getters too; a difference turns
 * the reads off for good (info()["tensor_reads"] then says so). */
#define LAYOUT_SCAN 208     /* bytes of a TensorImpl searched: torch asserts sizeof(TensorImpl) <= 26 * 8 */
#define INLINE_DIMS 5       /* c10::impl::SizesAndStrides keeps up to this many sizes inline (the
                             * probe's 5-dim samples check it); more dims: the getters */
static int reads_on = 0;
static unsigned long long reads_checked = 0, reads_served = 0;
static Py_ssize_t off_impl, off_keys, off_sizes, off_dtype, off_device, off_contig;
static unsigned char bit_contig;
#define MAX_PLAIN_KEYS 32
static unsigned long long plain_keys[MAX_PLAIN_KEYS];
static int n_plain_keys = 0;
static PyObject *dtype_by_index[256]; /* TypeMeta index -> torch.dtype (borrowed from the samples' dtypes, kept) */

static inline const unsigned char *
impl_of(PyObject *v)
{
    return *(const unsigned char *const *)((const char *)v + off_impl);
}

/* the raw facts of v into k (not grad): 1, or 0 where v is not read (not plain, or beyond the table) */
static int
tensor_key_read(tensor_key *k, PyObject *v)
{
    const unsigned char *impl = impl_of(v);
    if (impl == NULL)
        return 0;
    unsigned long long keys;
    memcpy(&keys, impl + off_keys, sizeof keys);
    int plain = 0;
    for (int i = 0; i < n_plain_keys; i++)
        if (plain_keys[i] == keys) {
            plain = 1;
            break;
        }
    if (!plain)
        return 0;
    size_t n;
    memcpy(&n, impl + off_sizes, sizeof n);
    if (n < 1 || n > INLINE_DIMS)
        return 0;
    memcpy(k->dims, impl + off_sizes + sizeof(size_t), n * sizeof(long long));
    unsigned short ti;
    memcpy(&ti, impl + off_dtype, sizeof ti);
    PyObject *dt = ti < 256 ? dtype_by_index[ti] : NULL;
    const unsigned char *dev = impl + off_device;
    if (dt == NULL || dev[2] != 1)
        return 0;
    k->ndim = (unsigned char)n;
    k->dtype = (uintptr_t)dt;
    k->device = (uintptr_t)((dev[0] << 8) | dev[1]) + 1; /* as device_key() of the torch.device */
    k->contig = (impl[off_contig] >> bit_contig) & 1;
    return 1;
}

/* the offsets (step apart, below LAYOUT_SCAN) where ok(sample, offset) holds for every sample:
 * the one offset, -1 where there is none, -2 where there are several */
typedef int (*layout_test)(PyObject *sample, const unsigned char *impl, Py_ssize_t off);

static Py_ssize_t
layout_find(PyObject *samples, Py_ssize_t step, Py_ssize_t room, layout_test ok)
{
    Py_ssize_t found = -1;
    for (Py_ssize_t off = 0; off + room <= LAYOUT_SCAN; off += step) {
        int all = 1;
        for (Py_ssize_t i = 0; all && i < PyList_GET_SIZE(samples); i++) {
            PyObject *s = PyList_GET_ITEM(samples, i);
            all = ok(s, impl_of(PyTuple_GET_ITEM(s, 0)), off);
        }
        if (all) {
            if (found >= 0)
                return -2;
            found = off;
        }
    }
    return found;
}

/* a sample is (tensor, dims: tuple of ints, dtype, device, contig: bool, keys: int) */
static int
test_keys(PyObject *s, const unsigned char *impl, Py_ssize_t off)
{
    unsigned long long keys, want = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(s, 5));
    memcpy(&keys, impl + off, sizeof keys);
    return keys == want;
}

static int
test_sizes(PyObject *s, const unsigned char *impl, Py_ssize_t off)
{
    PyObject *dims = PyTuple_GET_ITEM(s, 1);
    size_t n;
    memcpy(&n, impl + off, sizeof n);
    if (n != (size_t)PyTuple_GET_SIZE(dims) || n < 1 || n > INLINE_DIMS)
        return 0;
    const unsigned char *p = impl + off + sizeof(size_t);
    for (size_t i = 0; i < n; i++) {
        long long d;
        memcpy(&d, p + i * sizeof d, sizeof d);
        if (d != PyLong_AsLongLong(PyTuple_GET_ITEM(dims, (Py_ssize_t)i)))
            return 0;
    }
    return 1;
}

static PyObject *layout_samples_now; /* the samples test_dtype compares each sample with */

static int
test_dtype(PyObject *s, const unsigned char *impl, Py_ssize_t off)
{
    unsigned short a, b;
    memcpy(&a, impl + off, sizeof a);
    for (Py_ssize_t j = 0; j < PyList_GET_SIZE(layout_samples_now); j++) {
        PyObject *t = PyList_GET_ITEM(layout_samples_now, j);
        memcpy(&b, impl_of(PyTuple_GET_ITEM(t, 0)) + off, sizeof b);
        if ((a == b) != (PyTuple_GET_ITEM(s, 2) == PyTuple_GET_ITEM(t, 2)) || a >= 256)
            return 0;
    }
    return 1;
}

static int
test_device(PyObject *s, const unsigned char *impl, Py_ssize_t off)
{
    const unsigned char *want = (const unsigned char *)PyTuple_GET_ITEM(s, 3) + sizeof(PyObject);
    return impl[off] == want[0] && impl[off + 1] == want[1] && impl[off + 2] == 1;
}

static int probe_bit;

static int
test_contig(PyObject *s, const unsigned char *impl, Py_ssize_t off)
{
    return ((impl[off] >> probe_bit) & 1) == (PyTuple_GET_ITEM(s, 4) == Py_True);
}

/* configure(layout_samples=[...], layout_keys=[...]): find the fields (see above); reads stay off
 * unless every one is found exactly once. */
static int
layout_probe(PyObject *samples, PyObject *keys)
{
    reads_on = 0;
    memset(dtype_by_index, 0, sizeof dtype_by_index);
    if (samples == NULL || keys == NULL || !PyList_Check(samples) || !PyList_Check(keys)
            || PyList_GET_SIZE(samples) < 8 || PyList_GET_SIZE(keys) < 1
            || PyList_GET_SIZE(keys) > MAX_PLAIN_KEYS || device_type == NULL)
        return 0;
    off_impl = (Py_ssize_t)sizeof(PyObject); /* THPVariable: PyObject_HEAD, then at::Tensor (one pointer) */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(samples); i++) {
        PyObject *s = PyList_GET_ITEM(samples, i);
        if (!PyTuple_Check(s) || PyTuple_GET_SIZE(s) != 7 || !PyCapsule_CheckExact(PyTuple_GET_ITEM(s, 6))
                || (Py_TYPE(PyTuple_GET_ITEM(s, 0)) != (PyTypeObject *)T_tensor
                    && Py_TYPE(PyTuple_GET_ITEM(s, 0)) != (PyTypeObject *)T_param)
                || Py_TYPE(PyTuple_GET_ITEM(s, 3)) != device_type)
            return 0;
        PyObject *cap = PyTuple_GET_ITEM(s, 6);
        void *impl = PyCapsule_GetPointer(cap, PyCapsule_GetName(cap));
        if (impl == NULL) {
            PyErr_Clear();
            return 0;
        }
        if (impl_of(PyTuple_GET_ITEM(s, 0)) != impl)
            return 0;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys); i++) {
        plain_keys[i] = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(keys, i));
        if (PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
    }
    n_plain_keys = (int)PyList_GET_SIZE(keys);
    layout_samples_now = samples;
    off_keys = layout_find(samples, 8, 8, test_keys);
    off_sizes = layout_find(samples, 8, 8 + 8 * INLINE_DIMS, test_sizes);
    off_dtype = layout_find(samples, 2, 2, test_dtype);
    off_device = layout_find(samples, 1, 3, test_device);
    layout_samples_now = NULL;
    off_contig = -1;
    for (int bit = 0; bit < 8; bit++) {
        probe_bit = bit;
        Py_ssize_t o = layout_find(samples, 1, 1, test_contig);
        if (o == -2 || (o >= 0 && off_contig >= 0)) {
            off_contig = -2;
            break;
        }
        if (o >= 0) {
            off_contig = o;
            bit_contig = (unsigned char)bit;
        }
    }
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (off_keys < 0 || off_sizes < 0 || off_dtype < 0 || off_device < 0 || off_contig < 0)
        return 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(samples); i++) {
        PyObject *s = PyList_GET_ITEM(samples, i);
        unsigned short ti;
        memcpy(&ti, impl_of(PyTuple_GET_ITEM(s, 0)) + off_dtype, sizeof ti);
        dtype_by_index[ti] = PyTuple_GET_ITEM(s, 2); /* dtypes live as long as torch */
    }
    reads_on = 1;
    return 0;
}

/* -- answers read from libtorch's own C++ functions instead of through Python ---------------------
 * Three questions are asked on every op, and torch's Python bindings answer each through a warning
 * handler, a __torch_function__ check or pybind11's dispatcher, all thread-local lookups and cold
 * code between an op's kernels (per ResNet-18 forward: about 90k instructions and 5k
 * instruction-cache misses, a tenth of what pyprof added):
 *   requires_grad of a tensor: c10::TensorImpl::requires_grad() const (false without autograd
 *     metadata, else the metadata's answer), a non-virtual member function of libc10;
 *   torch.is_grad_enabled(): c10::GradMode::is_enabled(), libc10;
 *   torch._C._is_tracing(): torch::jit::tracer::getTracingState(), libtorch_cpu, which returns a
 *     reference to this thread's std::shared_ptr<TracingState>: tracing when its stored pointer (the
 *     first word) is not null.
 * configure(torch_lib=torch._C.__file__) looks them up by their exported (Itanium-mangled) names
 * through the library torch already loaded and its dependencies. None is used until checked
 * against the Python answer: requires_grad in configure(), on every layout sample and every grad
 * sample (tensors with and without autograd metadata, requiring grad or not; and again, with the
 * rest of a tensor's key, on every table miss and every 64th hit); the grad mode and the tracing
 * state by fastpath.load, which compares probe(name) with torch under enable_grad, no_grad and
 * inference_mode, and outside and inside a torch.jit.trace, and then calls use_direct(name, True).
 * Where a function is missing (other platforms, another torch) or disagrees, the Python call is
 * made as before. */
typedef const void *const *(*tracing_state_fn)(void);
typedef unsigned char (*grad_mode_fn)(void);   /* C++ bool: returned in the low byte */
typedef unsigned char (*impl_flag_fn)(const void *impl); /* a const member function: `this` comes first */
static tracing_state_fn tracing_state = NULL;
static grad_mode_fn grad_mode = NULL;
static impl_flag_fn impl_requires_grad = NULL;
static int tracing_direct_on = 0, grad_mode_direct_on = 0, grad_direct_on = 0;
static unsigned long long grad_direct_served = 0; /* requires_grad answered by the function (info()) */

static void
torch_lookup(PyObject *lib)
{
    tracing_state = NULL;
    grad_mode = NULL;
    impl_requires_grad = NULL;
    tracing_direct_on = grad_mode_direct_on = grad_direct_on = 0;
#ifndef _WIN32
    const char *path = lib != NULL && PyUnicode_Check(lib) ? PyUnicode_AsUTF8(lib) : NULL;
    if (path == NULL) {
        PyErr_Clear();
        return;
    }
    void *h = dlopen(path, RTLD_LAZY | RTLD_NOLOAD); /* torch loaded it: no new load, no side effect */
    if (h == NULL)
        return;
    /* dlsym through a handle searches that library and its dependencies (libtorch_cpu, libc10) */
    tracing_state = (tracing_state_fn)dlsym(h, "_ZN5torch3jit6tracer15getTracingStateEv");
    grad_mode = (grad_mode_fn)dlsym(h, "_ZN3c108GradMode10is_enabledEv");
    impl_requires_grad = (impl_flag_fn)dlsym(h, "_ZNK3c1010TensorImpl13requires_gradEv");
    dlclose(h); /* drops the count dlopen added; torch keeps the libraries loaded */
#else
    (void)lib;
#endif
}

/* the function agrees with torch's getter on every tensor of the layout samples and grad samples */
static int
grad_probe(PyObject *samples, PyObject *grad_samples)
{
    grad_direct_on = 0;
    if (!reads_on || impl_requires_grad == NULL || grad_samples == NULL || !PyList_Check(grad_samples)
            || PyList_GET_SIZE(grad_samples) < 4)
        return 0;
    int yes = 0, no = 0;
    for (int pass = 0; pass < 2; pass++) {
        PyObject *list = pass ? grad_samples : samples;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++) {
            PyObject *item = PyList_GET_ITEM(list, i);
            if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < 1)
                return 0;
            PyObject *t = PyTuple_GET_ITEM(item, 0);
            if ((Py_TYPE(t) != (PyTypeObject *)T_tensor && Py_TYPE(t) != (PyTypeObject *)T_param) || impl_of(t) == NULL)
                return 0;
            PyObject *g = tensor_get(&a_grad, t);
            if (g == NULL) {
                PyErr_Clear();
                return 0;
            }
            int same = (g == Py_True || g == Py_False) && (impl_requires_grad(impl_of(t)) != 0) == (g == Py_True);
            yes += g == Py_True;
            no += g == Py_False;
            Py_DECREF(g);
            if (!same)
                return 0;
        }
    }
    grad_direct_on = yes > 0 && no > 0; /* both answers seen */
    return 0;
}

/* requires_grad of a tensor tensor_key_read read: 1/0, -2 where the getter gave no bool, -1 error */
static int
read_grad(PyObject *v)
{
    if (grad_direct_on) {
        grad_direct_served++;
        return impl_requires_grad(impl_of(v)) != 0;
    }
    PyObject *g = tensor_get(&a_grad, v);
    if (g == NULL)
        return -1;
    int r = g == Py_True ? 1 : g == Py_False ? 0 : -2;
    Py_DECREF(g);
    return r;
}

/* Is v of a kind describe._tensor_json writes with a "kind" field (describe._odd_tensor): another
 * layout than torch.strided (sparse, mkldnn), or a quantized dtype? 1/0, -1 with an exception. Asked
 * of the tensors the TensorImpl reads did not vouch for (their dispatch keys are plain dense ones,
 * which none of these kinds has); a nested tensor is told by its shape getter raising (see
 * put_tensor). Without the two objects from configure() every such tensor is handed over. */
static int
tensor_is_odd(PyObject *v, PyObject *dtype)
{
    if (o_strided == NULL || o_qdtypes == NULL)
        return 1;
    PyObject *layout = tensor_get(&a_layout, v);
    if (layout == NULL)
        return -1;
    int odd = layout != o_strided;
    Py_DECREF(layout);
    if (!odd) {
        odd = PySet_Contains(o_qdtypes, dtype);
        if (odd < 0)
            return -1;
    }
    return odd;
}

/* describe._tensor_json: head + '"tensor","shape":[..],"dtype":..,"device":..,"contig":..,"grad":..}',
 * from the text table where the fields read (or, on a miss, torch's getters) find the tensor's key.
 * Other kinds of tensor (nested, sparse, mkldnn, quantized: see tensor_is_odd) are written by the
 * Python function, with their "kind", and never enter the table (its key holds no layout). */
static int
put_tensor(wbuf *b, PyObject *v, PyObject *head)
{
    tensor_key read;
    int have_read = 0;
    if (reads_on && tensor_key_read(&read, v)) {
        int g = read_grad(v);
        if (g == -1)
            return -1;
        have_read = g >= 0;
        read.grad = g == 1;
        if (have_read) {
            tensor_slot *hit = tensor_slot_of(&read);
            if (tensor_keys_equal(&hit->key, &read) && (++reads_checked & 63) != 0) {
                reads_served++;
                return put_slot_text(b, head, hit);
            }
        }
    }
    PyObject *contig = tensor_contiguous(v);
    if (contig == NULL)
        return -1;
    PyObject *shape = tensor_get(&a_shape, v);
    PyObject *dtype = shape ? tensor_get(&a_dtype, v) : NULL;
    PyObject *device = dtype ? tensor_get(&a_device, v) : NULL;
    PyObject *grad = device ? tensor_get(&a_grad, v) : NULL;
    PyObject *dts = NULL, *devs = NULL;
    int r = -1;
    if (shape == NULL && !have_read && PyErr_ExceptionMatches(PyExc_RuntimeError)) {
        PyErr_Clear(); /* a nested tensor has no sizes: the Python path describes it */
        goto python;
    }
    if (grad == NULL)
        goto done;
    if (!have_read) {
        int odd = tensor_is_odd(v, dtype);
        if (odd < 0)
            goto done;
        if (odd)
            goto python;
    }
    tensor_key key;
    tensor_slot *slot = NULL;
    if (tensor_key_make(&key, shape, dtype, device, contig, grad)) {
        if (have_read && !tensor_keys_equal(&read, &key))
            reads_on = 0; /* the fields read are not what torch says: never read again */
        slot = tensor_slot_of(&key);
        if (tensor_keys_equal(&slot->key, &key)) {
            r = put_slot_text(b, head, slot);
            goto done;
        }
    }
    dts = dtype_text(dtype);
    devs = dts ? device_text(device) : NULL;
    if (devs == NULL)
        goto done;
    if (!PyTuple_Check(shape)) /* torch.Size is a tuple; anything else: the Python path */
        goto python;
    Py_ssize_t mark = b->n;
    if (wb_str(b, head) < 0)
        goto done;
    Py_ssize_t start = b->n;
    if (WB_LIT(b, "\"tensor\",\"shape\":[") < 0)
        goto done;
    int dims = wb_int64s(b, shape); /* plain ints only (not SymInts, say) */
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
 * Two small open-addressing tables in front of callsite.py's dict cache, so that the walk up the
 * stack touches one table slot per frame instead of an int key, a dict probe and a list:
 * codes:  code object -> internal to torch/pyprof?   (as callsite._entry decides)
 * sites:  (code object, f_lasti) -> the JSON text    (as callsite._one writes it)
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
    code_slot *home = &code_table[h], *dst = home;
    for (int i = 0; i < PROBES; i++) {
        code_slot *sl = &code_table[(h + i) & (TABLE_SIZE - 1)];
        if (sl->code == NULL) {
            dst = sl;
            break;
        }
    }
    PyObject *old = dst->code;
    dst->code = Py_NewRef(code);
    dst->internal = internal;
    Py_XDECREF(old);
    return internal;
}

/* The call-site text cached for (code, lasti): a new reference, or NULL (no exception). */
static PyObject *
site_cached(PyObject *code, int lasti)
{
    size_t h = ptr_hash(code, (size_t)lasti + 1);
    for (int i = 0; i < PROBES; i++) {
        site_slot *sl = &site_table[(h + i) & (TABLE_SIZE - 1)];
        if (sl->code == code && sl->lasti == lasti)
            return Py_NewRef(sl->text);
        if (sl->code == NULL)
            break;
    }
    return NULL;
}

static PyObject *
site_text(PyObject *code, PyFrameObject *f) /* new reference, or NULL with an exception */
{
#if PY_VERSION_HEX >= 0x030B0000
    int lasti = PyFrame_GetLasti(f);
#else
    PyObject *lo = PyObject_GetAttr((PyObject *)f, s_f_lasti);
    if (lo == NULL)
        return NULL;
    int lasti = (int)PyLong_AsLong(lo);
    Py_DECREF(lo);
    if (lasti == -1 && PyErr_Occurred())
        return NULL;
#endif
    PyObject *hit = site_cached(code, lasti);
    if (hit != NULL)
        return hit;
    size_t h = ptr_hash(code, (size_t)lasti + 1);
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
    site_slot *dst = &site_table[h];
    for (int i = 0; i < PROBES; i++) {
        site_slot *sl = &site_table[(h + i) & (TABLE_SIZE - 1)];
        if (sl->code == NULL) {
            dst = sl;
            break;
        }
    }
    PyObject *old_code = dst->code, *old_text = dst->text;
    dst->code = Py_NewRef(code);
    dst->lasti = lasti;
    dst->text = Py_NewRef(text);
    Py_XDECREF(old_code);
    Py_XDECREF(old_text);
    return text;
}

/* The JSON text of the first frame outside torch/pyprof (callsite.call_site_json, depth 1), walked
 * through frame objects. */
static PyObject *
site_json_objects(void)
{
    PyFrameObject *f = PyEval_GetFrame(); /* borrowed; this call's Python caller (pyprof code) */
    Py_XINCREF(f);
    while (f != NULL) {
        PyObject *code = (PyObject *)PyFrame_GetCode(f);
        int internal = code_internal(code);
        if (internal < 0) {
            Py_DECREF(code);
            Py_DECREF(f);
            return NULL;
        }
        if (!internal) {
            PyObject *text = site_text(code, f);
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

static unsigned long long walk_hits = 0; /* call sites served by the direct walk (see info()) */

/* site_json_objects(), where the interpreter's frames can be read directly (PYPROF_FRAME_WALK): the
 * same walk (PyFrame_GetBack skips incomplete frames too, and PyFrame_GetLasti is the code-unit
 * index in bytes), served from the caches; a first sight of a call site takes the object walk,
 * which fills them. */
static PyObject *
site_json(void)
{
#ifdef PYPROF_FRAME_WALK
    _PyInterpreterFrame *f = PyThreadState_Get()->cframe->current_frame;
    for (; f != NULL; f = f->previous) {
        if (_PyFrame_IsIncomplete(f))
            continue;
        PyObject *code = (PyObject *)f->f_code;
        int internal = code_internal(code);
        if (internal < 0)
            return NULL;
        if (!internal) {
            int lasti = _PyInterpreterFrame_LASTI(f);
            PyObject *hit = site_cached(code, lasti < 0 ? -1 : lasti * (int)sizeof(_Py_CODEUNIT));
            if (hit != NULL) {
                walk_hits++;
                return hit;
            }
            break;
        }
    }
    if (f == NULL)
        return PyUnicode_FromString("[]");
#endif
    return site_json_objects();
}

/* ops.OpMeta and where its ``packed`` slot lives in an instance (configure(meta_type=...), where
 * ``packed`` is a plain __slots__ member): read there directly, instead of an attribute lookup per
 * op. NULL / 0: look it up. */
static PyTypeObject *meta_type = NULL;
static Py_ssize_t packed_offset = 0;

static void
packed_slot_init(PyObject *type)
{
    meta_type = NULL;
    packed_offset = 0;
    if (type == NULL || !PyType_Check(type))
        return;
    PyObject *d = PyDict_GetItemWithError(((PyTypeObject *)type)->tp_dict, s_packed); /* borrowed */
    if (d != NULL && Py_IS_TYPE(d, &PyMemberDescr_Type)) {
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        if ((m->type == T_OBJECT_EX || m->type == T_OBJECT) && !(m->flags & READ_RESTRICTED) && m->offset > 0) {
            meta_type = (PyTypeObject *)type;
            packed_offset = m->offset;
        }
    }
    PyErr_Clear();
}

/* meta.packed, (head, heads, names, lowp, composite), after meta.arg_names() filled it; new ref. */
static PyObject *
packed_meta(PyObject *meta)
{
    PyObject *packed = NULL;
    if (Py_TYPE(meta) == meta_type)
        packed = Py_XNewRef(*(PyObject **)((char *)meta + packed_offset));
    if (packed == NULL || packed == Py_None) {
        Py_XDECREF(packed);
        packed = PyObject_GetAttr(meta, s_packed);
    }
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
 * into *bp (initialised by the caller, who frees it); packed is meta.packed (see packed_meta).
 * 0, or -1 with an exception. */
static int
build_into(wbuf *bp, PyObject *meta, PyObject *packed, PyObject *args, PyObject *kwargs, PyObject *op_id,
           PyObject *s0)
{
    if (!PyTuple_Check(args) || !(kwargs == Py_None || PyDict_Check(kwargs))) {
        PyErr_SetString(PyExc_TypeError, "build: args must be a tuple and kwargs a dict");
        return -1;
    }
    PyObject *heads = PyTuple_GET_ITEM(packed, 1), *names = PyTuple_GET_ITEM(packed, 2);
    Py_ssize_t na = PyTuple_GET_SIZE(args), nk = kwargs == Py_None ? 0 : PyDict_GET_SIZE(kwargs);
    Py_ssize_t nh = PyTuple_GET_SIZE(heads), nn = PyTuple_GET_SIZE(names), k = 0;
#define b (*bp)
    if (wb_str(&b, PyTuple_GET_ITEM(packed, 0)) < 0)
        goto fail;
    for (Py_ssize_t i = 0; i < na; i++, k++) {
        PyObject *head = i < nh ? PyTuple_GET_ITEM(heads, i) : no_name_head;
        PyObject *name = i < nn ? PyTuple_GET_ITEM(names, i) : empty_str;
        if ((k && WB_LIT(&b, ",") < 0) || put_arg(&b, PyTuple_GET_ITEM(args, i), head, name) < 0)
            goto fail;
    }
    if (nk) {
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (PyDict_Next(kwargs, &pos, &key, &value)) {
            if (k++ && WB_LIT(&b, ",") < 0)
                goto fail;
            PyObject *head = cached_text(d_names, key, f_name_head);
            if (head == NULL)
                goto fail;
            Py_INCREF(key); /* held while Python fallbacks run */
            Py_INCREF(value);
            int r = put_arg(&b, value, head, key);
            Py_DECREF(head);
            Py_DECREF(key);
            Py_DECREF(value);
            if (r < 0)
                goto fail;
        }
    }
    if (WB_LIT(&b, "]") < 0)
        goto fail;
    int is_lowp = PyObject_IsTrue(PyTuple_GET_ITEM(packed, 3));
    if (is_lowp < 0)
        goto fail;
    if (is_lowp) {
        PyObject *on = PyObject_CallNoArgs(f_any_autocast);
        int any = on ? PyObject_IsTrue(on) : -1;
        Py_XDECREF(on);
        if (any < 0)
            goto fail;
        if (any && wb_str_steal(&b, PyObject_CallFunctionObjArgs(f_cdtype_json, meta, args, kwargs,
                                                                 NULL)) < 0)
            goto fail;
    }
    if (s0 != Py_None && (WB_LIT(&b, ",\"seq\":[") < 0 || wb_int(&b, s0) < 0 || WB_LIT(&b, "]") < 0))
        goto fail;
    if (WB_LIT(&b, ",\"id\":") < 0 || wb_int(&b, op_id) < 0 || WB_LIT(&b, ",\"trace\":") < 0
            || wb_str_steal(&b, site_json()) < 0 || WB_LIT(&b, "}") < 0)
        goto fail;
#undef b
    return 0;
fail:
    return -1;
}

/* build_into as a str (ops.build_payload's text): new reference, or NULL with an exception */
static PyObject *
build_text(PyObject *meta, PyObject *packed, PyObject *args, PyObject *kwargs, PyObject *op_id,
           PyObject *s0)
{
    wbuf b;
    wb_init(&b);
    if (build_into(&b, meta, packed, args, kwargs, op_id, s0) < 0) {
        wb_free(&b);
        return NULL;
    }
    return wb_finish(&b);
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
    PyObject *text = build_text(argv[0], packed, argv[1], argv[2], argv[3], argv[4]);
    Py_DECREF(packed);
    return text;
}

/* -- call(meta, fn, args, kwargs): ops.call_marked without the interpreter ------------------------ */
static PyObject *o_state, *o_ids, *f_tracing, *f_grad_enabled, *f_get_seq;
static PyObject *f_push, *f_pop, *f_hook_op, *f_build_py;
static PyObject *s_route;
/* the bits of S.route (state.py: ROUTE_*), which S.refresh() recomputes whenever a field changes */
#define ROUTE_NVTX 1
#define ROUTE_RECORDERS 2
#define ROUTE_NESTED 4
#define ROUTE_BACKWARD 8
#define ROUTE_DEPTH_ONE 16
static _Thread_local int busy = 0; /* inside an op that hides the ops it calls (ops.call_marked's tls.busy) */

/* The end of a try/finally around a call: ``out`` is what the call returned (NULL: its exception
 * was fetched into et/ev/etb), ``closed`` what the closing call returned. Gives back out, or NULL
 * with the call's exception restored, or NULL with the closing call's own exception if it raised. */
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

/* -- push/pop: emit.push/emit.pop, called only when a consumer is there --------------------------
 * emit.push hands the text to an NVTX tool (S.nvtx), a torch.profiler session
 * (torch.autograd.profiler._is_profiler_enabled) and the Recorders (S.recorders); with none of them
 * it does nothing and returns emit.NOTHING. The same three checks are made here first (S.nvtx and
 * S.recorders through the bits of S.route, which the caller read), so that a
 * range nobody consumes costs no Python call (the token is then emit.NOTHING, which emit.pop also
 * takes, so the Python code may close such a range too). */
static PyObject *o_profiler, *o_nothing, *o_nvtx_only, *s_prof_enabled;
static nvtxDomainHandle_t nv_domain = NULL; /* pyprof's NVTX domain (NULL from NVTX without a tool) */
static int nv_ready = 0;                    /* nvtx_domain() made it */

static int
attr_true(PyObject *obj, PyObject *name);
static PyObject *d_profiler; /* vars(torch.autograd.profiler): read on every range */

/* bool(obj.name), read from obj's __dict__ (d) where it is there (a dict probe instead of a full
 * attribute lookup), else by getattr: 1/0, or -1 with an exception */
static int
flag(PyObject *d, PyObject *obj, PyObject *name)
{
    PyObject *v = PyDict_GetItemWithError(d, name); /* borrowed */
    if (v != NULL)
        return PyObject_IsTrue(v);
    if (PyErr_Occurred())
        return -1;
    return attr_true(obj, name);
}

/* bool(obj.name) as flag() reads it, kept while the dict d is unchanged: the two module flags read
 * on every range (torch.autograd.profiler._is_profiler_enabled, torch.compiler._is_compiling_flag)
 * change only when a profiler or compile session starts or ends. "Unchanged" is the dict's version
 * tag (PEP 509: every change of a dict gives it a new tag, never reused), on CPython before 3.12;
 * 3.12 deprecates the tag (its replacement, dict watchers, is not used yet), so there, and for a
 * name found by getattr rather than in d, every call reads d. */
typedef struct {
    PyObject *d, *obj, *name; /* borrowed from configure()'s references */
    int value, known;
    uint64_t tag;
} flag_cache;
static flag_cache fc_profiler, fc_compiler;

static void
flag_cache_init(flag_cache *fc, PyObject *d, PyObject *obj, PyObject *name)
{
    fc->d = d;
    fc->obj = obj;
    fc->name = name;
    fc->known = 0;
}

/* bool(fc->obj.fc->name), read as flag() reads it: 1/0, or -1 with an exception */
static inline int
flag_of(flag_cache *fc)
{
#if PY_VERSION_HEX < 0x030C0000
    uint64_t tag = ((PyDictObject *)fc->d)->ma_version_tag;
    if (fc->known && fc->tag == tag)
        return fc->value;
    PyObject *v = PyDict_GetItemWithError(fc->d, fc->name); /* borrowed */
    if (v == NULL && PyErr_Occurred())
        return -1;
    if (v == Py_True || v == Py_False) { /* a bool's truth cannot change behind the dict */
        fc->value = v == Py_True;
        fc->known = 1;
        fc->tag = tag;
        return fc->value;
    }
#endif
    return flag(fc->d, fc->obj, fc->name);
}

/* torch.compiler's __dict__ and the name of its ``_is_compiling_flag`` (None/NULL on a torch without
 * it): the flag is True for a whole torch.compile or torch.export session. The Python wrappers only
 * ask ``torch.compiler.is_dynamo_compiling()`` (one frame; TorchDynamo folds it to True, so Dynamo
 * never traces into these C calls), and the check of the session flag is made here, where Dynamo
 * cannot see it: read from Python, Dynamo would guard on its value (True while compiling) and
 * recompile on every call. It keeps the ops that run for real during a compile session (a Python
 * decomposition or make_fx calling torch.* on fake tensors) from emitting markers. */
static PyObject *d_compiler, *o_compiler, *s_compiling_flag;

static inline int
compiling(void)
{
    return d_compiler == NULL ? 0 : flag_of(&fc_compiler);
}

/* bool(f()): 1/0, or -1 with an exception */
static int
call_true(PyObject *f)
{
    PyObject *v = PyObject_CallNoArgs(f);
    if (v == NULL)
        return -1;
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

/* torch._C._is_tracing() (see "answers read from libtorch"): 1/0, or -1 with an exception */
static inline int
tracing_now(void)
{
    return tracing_direct_on ? *tracing_state() != NULL : call_true(f_tracing);
}

/* torch.is_grad_enabled(): 1/0, or -1 with an exception */
static inline int
grad_enabled_now(void)
{
    return grad_mode_direct_on ? grad_mode() != 0 : call_true(f_grad_enabled);
}

/* probe(name): what the direct read of "tracing" or "grad_mode" says now (True/False), or None
 * where the function was not found */
static PyObject *
probe(PyObject *Py_UNUSED(module), PyObject *name)
{
    const char *n = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    if (n == NULL) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "probe(name: str)");
        return NULL;
    }
    if (strcmp(n, "tracing") == 0) {
        if (tracing_state == NULL)
            Py_RETURN_NONE;
        return PyBool_FromLong(*tracing_state() != NULL);
    }
    if (strcmp(n, "grad_mode") == 0) {
        if (grad_mode == NULL)
            Py_RETURN_NONE;
        return PyBool_FromLong(grad_mode() != 0);
    }
    PyErr_Format(PyExc_ValueError, "probe(): unknown name %R (tracing, grad_mode)", name);
    return NULL;
}

/* use_direct(name, on): call() reads "tracing" or "grad_mode" directly from now on (fastpath.load,
 * after its check); returns whether it does (False where the function was not found) */
static PyObject *
use_direct(PyObject *Py_UNUSED(module), PyObject *const *argv, Py_ssize_t argc)
{
    const char *n = argc == 2 && PyUnicode_Check(argv[0]) ? PyUnicode_AsUTF8(argv[0]) : NULL;
    int on = n != NULL ? PyObject_IsTrue(argv[1]) : -1;
    if (n == NULL || on < 0) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "use_direct(name: str, on: bool)");
        return NULL;
    }
    if (strcmp(n, "tracing") == 0)
        return PyBool_FromLong(tracing_direct_on = on && tracing_state != NULL);
    if (strcmp(n, "grad_mode") == 0)
        return PyBool_FromLong(grad_mode_direct_on = on && grad_mode != NULL);
    PyErr_Format(PyExc_ValueError, "use_direct(): unknown name %R (tracing, grad_mode)", argv[0]);
    return NULL;
}

/* S.route as S.refresh() last handed it over (set_route; state.py's route_sink), or -1 before
 * that: then it is read from S on every call. */
static long route_now = -1;

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

/* Push text as a range in pyprof's NVTX domain (an ASCII-type message holding UTF-8: what NVTX
 * tools read as text). Without a tool, NVTX's own stubs make this a no-op. */
static void
nv_push_utf8(const char *s) /* NUL-terminated */
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

/* emit.push(text[, cache=True]): a new reference to the token, or NULL with an exception.
 * An NVTX tool alone is served here (token emit.NVTX_ONLY); nobody at all gives emit.NOTHING. */
enum { TO_NOBODY, TO_NVTX, TO_PYTHON }; /* who takes a range: see consumers() */

/* Who takes a range now: nobody, an NVTX tool alone (served here), or emit.push (a torch.profiler
 * session or Recorders, or a tool whose domain is not made yet); -1 with an exception. */
static int
consumers(long route)
{
    int nv = (route & ROUTE_NVTX) != 0;
    int others = flag_of(&fc_profiler);
    if (others == 0)
        others = (route & ROUTE_RECORDERS) != 0;
    if (others < 0)
        return -1;
    if (others || (nv && !nv_ready))
        return TO_PYTHON;
    return nv ? TO_NVTX : TO_NOBODY;
}

static PyObject *
push_range(PyObject *text, int cache, long route)
{
    switch (consumers(route)) {
    case TO_PYTHON:
        return cache ? PyObject_CallFunctionObjArgs(f_push, text, Py_True, NULL)
                     : PyObject_CallOneArg(f_push, text);
    case TO_NVTX:
        if (nv_push(text) < 0)
            return NULL;
        return Py_NewRef(o_nvtx_only);
    case TO_NOBODY:
        return Py_NewRef(o_nothing);
    default:
        return NULL;
    }
}

/* push_range for an op's text still in its buffer b (freed here): where nobody consumes it, or an
 * NVTX tool alone (which gets the buffer's UTF-8 bytes, as nv_push would hand it the str's), no str
 * is made at all. A new reference to the token, or NULL with an exception. */
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

/* bool(getattr(obj, name)): 1/0, or -1 with an exception */
static int
attr_true(PyObject *obj, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL)
        return -1;
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

#define needs_grad(t) attr_true((t), s_requires_grad)

/* ops._wants_grad: does a tensor argument (or one in a list/tuple argument) require grad? */
static int
wants_grad(PyObject *args, PyObject *kwargs)
{
    PyTypeObject *tt = (PyTypeObject *)T_tensor;
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyTuple_GET_ITEM(args, i);
        if (PyObject_TypeCheck(a, tt)) {
            int r = needs_grad(a);
            if (r)
                return r;
        }
        else if (PyList_Check(a) || PyTuple_Check(a)) {
            PyObject *seq = PySequence_Fast(a, "");
            if (seq == NULL)
                return -1;
            Py_ssize_t m = PySequence_Fast_GET_SIZE(seq);
            for (Py_ssize_t j = 0; j < m; j++) {
                PyObject *x = PySequence_Fast_GET_ITEM(seq, j);
                if (PyObject_TypeCheck(x, tt)) {
                    int r = needs_grad(x);
                    if (r) {
                        Py_DECREF(seq);
                        return r;
                    }
                }
            }
            Py_DECREF(seq);
        }
    }
    if (kwargs != NULL) {
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (PyDict_Next(kwargs, &pos, &key, &value)) {
            if (PyObject_TypeCheck(value, tt)) {
                int r = needs_grad(value);
                if (r)
                    return r;
            }
        }
    }
    return 0;
}

/* The shared checks of call() and module_call(): (x, fn, args: tuple, kwargs: dict|None), set up.
 * Returns the kwargs to pass on (NULL when empty) through *kwargs, or -1 with an exception. */
static int
call_args(PyObject *const *argv, Py_ssize_t argc, const char *usage, int ready, PyObject **kwargs)
{
    if (argc != 4 || !PyTuple_Check(argv[2]) || !(argv[3] == Py_None || PyDict_Check(argv[3]))) {
        PyErr_SetString(PyExc_TypeError, usage);
        return -1;
    }
    if (!ready || o_state == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "pyprof._fastpayload: configure() first");
        return -1;
    }
    *kwargs = (argv[3] != Py_None && PyDict_GET_SIZE(argv[3])) ? argv[3] : NULL;
    return 0;
}

static PyObject *
call(PyObject *Py_UNUSED(module), PyObject *const *argv, Py_ssize_t argc)
{
    PyObject *kwargs;
    if (call_args(argv, argc, "call(meta, fn, args: tuple, kwargs: dict)", configured, &kwargs) < 0)
        return NULL;
    PyObject *meta = argv[0], *fn = argv[1], *args = argv[2];
    long route = state_route();
    if (route < 0)
        return NULL;
    if (busy && !(route & ROUTE_NESTED)) /* inside an op: nothing to emit, compiling or not */
        return PyObject_Call(fn, args, kwargs);
    int comp = compiling();
    if (comp)
        return comp < 0 ? NULL : PyObject_Call(fn, args, kwargs);
    int tracing = tracing_now();
    if (tracing < 0)
        return NULL;
    if (tracing)
        return PyObject_Call(fn, args, kwargs);

    PyObject *op_id = PyIter_Next(o_ids);
    if (op_id == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "pyprof: the op id counter ended");
        return NULL;
    }
    PyObject *s0 = NULL, *packed = NULL, *text = NULL, *tok = NULL, *out = NULL;
    int want = (route & ROUTE_BACKWARD) != 0;
    if (want > 0)
        want = grad_enabled_now();
    if (want > 0)
        want = wants_grad(args, kwargs);
    if (want < 0)
        goto fail;
    s0 = want ? PyObject_CallNoArgs(f_get_seq) : Py_NewRef(Py_None);
    if (s0 == NULL)
        goto fail;

    int depth_one = (route & ROUTE_DEPTH_ONE) != 0, built = -1;
    wbuf b; /* the text, where written here (depth one); else text holds the Python path's */
    wb_init(&b);
    packed = packed_meta(meta);
    if (packed != NULL) {
        if (depth_one)
            built = build_into(&b, meta, packed, args, argv[3], op_id, s0);
        else
            built = (text = PyObject_CallFunctionObjArgs(f_build_py, meta, args, argv[3], op_id, s0, NULL)) ? 0 : -1;
    }
    if (built < 0) {
        wb_free(&b);
        /* describing must never break the user's call (ops.call_marked: except Exception) */
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            goto fail;
        PyErr_Clear();
        Py_DECREF(op_id);
        Py_DECREF(s0);
        Py_XDECREF(packed);
        return PyObject_Call(fn, args, kwargs);
    }
    int composite = PyObject_IsTrue(PyTuple_GET_ITEM(packed, 4)); /* meta.composite */
    if (composite < 0) {
        wb_free(&b);
        goto fail;
    }
    tok = text != NULL ? push_range(text, 0, route) : push_built(&b, route); /* push_built frees b */
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
            if (r == NULL)
                later = -1;
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
    if (take(kw, "tensor_type", &T_tensor) || take(kw, "param_type", &T_param)
            || take(kw, "name_txt", &d_names) || take(kw, "float_txt", &d_floats)
            || take(kw, "dtype_txt", &d_dtypes) || take(kw, "device_txt", &d_devices)
            || take(kw, "dtype_json", &f_dtype_json) || take(kw, "device_json", &f_device_json)
            || take(kw, "tensor_json", &f_tensor_json)
            || take(kw, "arg_json", &f_arg_json) || take(kw, "name_head", &f_name_head)
            || take(kw, "float_json", &f_float_json) || take(kw, "entry", &f_entry)
            || take(kw, "one", &f_one) || take(kw, "cdtype_json", &f_cdtype_json)
            || take(kw, "any_autocast", &f_any_autocast) || take(kw, "no_name_head", &no_name_head)
            || take(kw, "state", &o_state) || take(kw, "ids", &o_ids)
            || take(kw, "tracing", &f_tracing) || take(kw, "grad_enabled", &f_grad_enabled)
            || take(kw, "get_seq", &f_get_seq) || take(kw, "push", &f_push) || take(kw, "pop", &f_pop)
            || take(kw, "profiler", &o_profiler) || take(kw, "nothing", &o_nothing)
            || take(kw, "nvtx_only", &o_nvtx_only)
            || take(kw, "hook_op", &f_hook_op) || take(kw, "build_payload", &f_build_py))
        return NULL;
    PyObject *comp = PyDict_GetItemString(kw, "compiler"); /* borrowed; None: no such flag */
    Py_CLEAR(d_compiler);
    Py_CLEAR(o_compiler);
    if (comp != NULL && comp != Py_None) {
        d_compiler = PyObject_GenericGetDict(comp, NULL);
        if (d_compiler == NULL || !PyDict_Check(d_compiler)) {
            Py_CLEAR(d_compiler);
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError, "configure(): compiler needs a __dict__");
            return NULL;
        }
        o_compiler = Py_NewRef(comp);
    }
    /* optional (an older caller lacks them: every tensor not read is then handed to Python) */
    PyObject *strided = PyDict_GetItemString(kw, "strided"), *qdtypes = PyDict_GetItemString(kw, "quantized_dtypes");
    Py_CLEAR(o_strided);
    Py_CLEAR(o_qdtypes);
    if (strided != NULL && qdtypes != NULL && PyAnySet_Check(qdtypes)) {
        o_strided = Py_NewRef(strided);
        o_qdtypes = Py_NewRef(qdtypes);
    }
    tensor_attrs_init();
    if (device_probe(PyDict_GetItemString(kw, "device_samples")) < 0)
        return NULL;
    tensor_table_clear(); /* its keys hold device_key() values and dtype addresses */
    packed_slot_init(PyDict_GetItemString(kw, "meta_type"));
    if (layout_probe(PyDict_GetItemString(kw, "layout_samples"), PyDict_GetItemString(kw, "layout_keys")) < 0)
        return NULL;
    torch_lookup(PyDict_GetItemString(kw, "torch_lib"));
    if (grad_probe(PyDict_GetItemString(kw, "layout_samples"), PyDict_GetItemString(kw, "grad_samples")) < 0)
        return NULL;
    route_now = -1;
    /* not vars(S): S has __slots__ (on CPython 3.11 a __dict__ made from an object's inline values
     * is a split dict, and the interpreter's LOAD_ATTR_WITH_HINT then falls back to a full
     * attribute lookup of S.idle on every wrapper call) */
    Py_XSETREF(d_profiler, PyObject_GenericGetDict(o_profiler, NULL));
    if (d_profiler == NULL || !PyDict_Check(d_profiler)) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "configure(): profiler needs a __dict__");
        return NULL;
    }
    flag_cache_init(&fc_profiler, d_profiler, o_profiler, s_prof_enabled);
    flag_cache_init(&fc_compiler, d_compiler, o_compiler, s_compiling_flag);
    if (!PyIter_Check(o_ids)) {
        PyErr_SetString(PyExc_TypeError, "configure(): ids must be an iterator");
        return NULL;
    }
    PyObject *mc = PyDict_GetItemString(kw, "max_cached");
    if (mc != NULL) {
        max_cached = PyLong_AsSsize_t(mc);
        if (max_cached == -1 && PyErr_Occurred())
            return NULL;
    }
    if (!PyDict_Check(d_names) || !PyDict_Check(d_floats) || !PyDict_Check(d_dtypes)
            || !PyDict_Check(d_devices)) {
        PyErr_SetString(PyExc_TypeError, "configure(): the caches must be dicts");
        return NULL;
    }
    configured = 1;
    Py_RETURN_NONE;
}

/* -- module_call(module, orig_call, args, kwargs): modules._call's range without the interpreter -- */
static PyObject *m_tls, *m_gen, *m_paths, *m_texts, *m_open, *m_close, *s_mods;
static int modules_configured = 0;

/* The weakref in a cache entry (a tuple (weakref, ...)) points at obj. */
static int
ref_is(PyObject *entry, PyObject *obj)
{
    PyObject *ref = PyTuple_GET_ITEM(entry, 0);
    if (!PyWeakref_Check(ref))
        return 0;
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *target = NULL;
    if (PyWeakref_GetRef(ref, &target) < 0) {
        PyErr_Clear();
        return 0;
    }
    int same = target == obj;
    Py_XDECREF(target);
    return same;
#else
    return PyWeakref_GET_OBJECT(ref) == obj;
#endif
}

/* table[id(obj)] (modules.py keys its caches by id), borrowed; NULL: missing, or an exception. */
static PyObject *
by_id(PyObject *table, PyObject *obj)
{
    PyObject *key = PyLong_FromVoidPtr(obj);
    if (key == NULL)
        return NULL;
    PyObject *v = PyDict_GetItemWithError(table, key);
    Py_DECREF(key);
    return v;
}

/* Push module's range (text) and append (module, token, path, gen) to this thread's stack st.
 * Returns 1, or -1 with an exception. */
static int
push_module(PyObject *module, PyObject *st, PyObject *path, PyObject *text, PyObject *gen)
{
    Py_INCREF(text);
    Py_INCREF(path);
    Py_INCREF(gen);
    long route = state_route();
    PyObject *tok = route < 0 ? NULL : push_range(text, 1, route);
    Py_DECREF(text);
    PyObject *item = tok ? PyTuple_Pack(4, module, tok, path, gen) : NULL;
    Py_XDECREF(tok);
    Py_DECREF(path);
    Py_DECREF(gen);
    if (item == NULL)
        return -1;
    int r = PyList_Append(st, item);
    Py_DECREF(item);
    return r < 0 ? -1 : 1;
}

/* What open_cached found in modules.py's caches for (module, root of the stack), kept so that the
 * next call of the same module under the same root skips the three dict probes (each keyed by a new
 * int from id()). Valid while mod_epoch is unchanged: modules.py calls modules_changed() whenever
 * those caches change (an entry added or replaced, a path map rebuilt, a module or root collected:
 * weakref callbacks run before the memory can be reused), so module and root are compared as
 * pointers only. A direct-mapped table: a collision just replaces the slot. */
typedef struct {
    PyObject *module, *root; /* not references: valid while epoch == mod_epoch */
    PyObject *path, *text;   /* references */
    unsigned long epoch;
} mod_slot;
#define MOD_TABLE_SIZE 1024
static mod_slot mod_table[MOD_TABLE_SIZE];
static unsigned long mod_epoch = 1; /* slots start at epoch 0: empty */

static PyObject *
modules_changed(PyObject *Py_UNUSED(unused_module), PyObject *Py_UNUSED(unused))
{
    mod_epoch++;
    Py_RETURN_NONE;
}

static inline mod_slot *
mod_slot_for(PyObject *module, PyObject *root)
{
    unsigned long long h = (unsigned long long)(size_t)module ^ ((unsigned long long)(size_t)root * 0x9E3779B97F4A7C15ULL);
    h ^= h >> 33; /* the finaliser of MurmurHash3: every address bit moves the slot */
    h *= 0xFF51AFD7ED558CCDULL;
    h ^= h >> 33;
    return &mod_table[h & (MOD_TABLE_SIZE - 1)];
}

/* modules._open's cache hit path: push the module's range and record it on this thread's stack.
 * Returns 1 done, 0 not handled here (the caller runs the Python _open), -1 error. */
static int
open_cached(PyObject *module, PyObject *st)
{
    PyObject *gen = PyList_GET_ITEM(m_gen, 0);
    Py_ssize_t depth = PyList_GET_SIZE(st);
    PyObject *path, *root = NULL;
    if (depth) {
        PyObject *top = PyList_GET_ITEM(st, depth - 1);
        PyObject *bottom = PyList_GET_ITEM(st, 0);
        if (PyTuple_Check(top) && PyTuple_GET_SIZE(top) == 4 && PyTuple_GET_ITEM(top, 3) == gen
                && PyTuple_Check(bottom) && PyTuple_GET_SIZE(bottom) == 4)
            root = PyTuple_GET_ITEM(bottom, 0);
    }
    if (!depth || root != NULL) {
        mod_slot *slot = mod_slot_for(module, root);
        if (slot->epoch == mod_epoch && slot->module == module && slot->root == root)
            return push_module(module, st, slot->path, slot->text, gen);
    }
    if (depth) {
        if (root == NULL)
            return 0; /* stale entries (or a foreign shape): the Python path closes them */
        PyObject *entry = by_id(m_paths, root);
        if (entry == NULL)
            return PyErr_Occurred() ? -1 : 0;
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2 || !ref_is(entry, root)
                || !PyDict_Check(PyTuple_GET_ITEM(entry, 1)))
            return 0;
        path = by_id(PyTuple_GET_ITEM(entry, 1), module);
        if (path == NULL)
            return PyErr_Occurred() ? -1 : 0;
    }
    else {
        path = empty_str;
    }
    PyObject *entry = by_id(m_texts, module);
    if (entry == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 3 || !ref_is(entry, module))
        return 0;
    int same = PyUnicode_Check(path) && PyUnicode_Check(PyTuple_GET_ITEM(entry, 1))
               && PyUnicode_Compare(PyTuple_GET_ITEM(entry, 1), path) == 0;
    if (!same)
        return PyErr_Occurred() ? -1 : 0;
    PyObject *text = PyTuple_GET_ITEM(entry, 2);
    if (!PyUnicode_Check(text))
        return 0;
    mod_slot *slot = mod_slot_for(module, root);
    Py_XSETREF(slot->path, Py_NewRef(path));
    Py_XSETREF(slot->text, Py_NewRef(text));
    slot->module = module;
    slot->root = root;
    slot->epoch = mod_epoch;
    return push_module(module, st, path, text, gen);
}

/* This thread's module stack, modules._tls.mods (created if missing), as a new reference, or NULL
 * with an exception. The list is kept per C thread too, with the id of the Python thread state it
 * belongs to, so that a module call costs no threading.local lookup; a thread whose Python thread
 * state was dropped and made anew (a C++ thread taking the GIL now and then) gets a new id, and
 * then the list is looked up again (modules.py makes it once per thread state and never rebinds it). */
static _Thread_local PyObject *tl_mods = NULL;      /* a reference */
static _Thread_local unsigned long long tl_mods_tstate = 0;

static PyObject *
module_stack(void)
{
    unsigned long long tid = PyThreadState_GetID(PyThreadState_Get());
    if (tl_mods != NULL && tl_mods_tstate == tid)
        return Py_NewRef(tl_mods);
    PyObject *st = PyObject_GetAttr(m_tls, s_mods);
    if (st == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return NULL;
        PyErr_Clear();
        st = PyList_New(0);
        if (st == NULL || PyObject_SetAttr(m_tls, s_mods, st) < 0) {
            Py_XDECREF(st);
            return NULL;
        }
    }
    if (!PyList_Check(st)) {
        Py_DECREF(st);
        PyErr_SetString(PyExc_TypeError, "pyprof: the module stack is not a list");
        return NULL;
    }
    Py_XSETREF(tl_mods, Py_NewRef(st));
    tl_mods_tstate = tid;
    return st;
}

/* orig(module, *args, **kwargs), by vectorcall from a stack of borrowed references (argv holds
 * module and args for the whole call), which spares a tuple per call */
static PyObject *
call_prepended(PyObject *orig, PyObject *module, PyObject *args, PyObject *kwargs)
{
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    PyObject *small[8], **stack = small;
    if (n + 1 > (Py_ssize_t)(sizeof small / sizeof small[0])) {
        stack = PyMem_Malloc((size_t)(n + 1) * sizeof(PyObject *));
        if (stack == NULL)
            return PyErr_NoMemory();
    }
    stack[0] = module;
    for (Py_ssize_t i = 0; i < n; i++)
        stack[i + 1] = PyTuple_GET_ITEM(args, i);
    PyObject *out = PyObject_VectorcallDict(orig, stack, (size_t)(n + 1), kwargs);
    if (stack != small)
        PyMem_Free(stack);
    return out;
}

static PyObject *
module_call(PyObject *Py_UNUSED(mod), PyObject *const *argv, Py_ssize_t argc)
{
    PyObject *kwargs;
    if (call_args(argv, argc, "module_call(module, orig_call, args: tuple, kwargs: dict)",
                  modules_configured, &kwargs) < 0)
        return NULL;
    PyObject *module = argv[0], *orig = argv[1], *args = argv[2];
    int comp = compiling();
    if (comp)
        return comp < 0 ? NULL : call_prepended(orig, module, args, kwargs);
    PyObject *st = module_stack();
    if (st == NULL)
        return NULL;
    int opened = open_cached(module, st);
    if (opened == 0) {
        PyObject *r = PyObject_CallOneArg(m_open, module); /* the Python path: fills the caches */
        opened = r ? 1 : -1;
        Py_XDECREF(r);
    }
    if (opened < 0) {
        Py_DECREF(st);
        return NULL;
    }
    PyObject *out = call_prepended(orig, module, args, kwargs);
    /* finally: close this module's range, keeping the call's exception unless closing raises */
    PyObject *et, *ev, *etb;
    PyErr_Fetch(&et, &ev, &etb);
    PyObject *r = NULL;
    Py_ssize_t depth = PyList_GET_SIZE(st);
    PyObject *top = depth ? PyList_GET_ITEM(st, depth - 1) : NULL;
    if (top != NULL && PyTuple_Check(top) && PyTuple_GET_SIZE(top) == 4
            && PyTuple_GET_ITEM(top, 0) == module) {
        /* st.pop(): the list gives up its last item (its reference passes to us) by shrinking its
         * length, as list.pop does for the last item before it resizes (Cython's fast pop does the
         * same); PyList_SetSlice's general slice code costs about a hundred instructions more */
        Py_SET_SIZE(st, depth - 1);
        r = pop_range(PyTuple_GET_ITEM(top, 1));
        Py_DECREF(top);
    }
    else {
        r = PyObject_CallOneArg(m_close, module);
    }
    Py_DECREF(st);
    return after_close(out, r, et, ev, etb);
}

static PyObject *
configure_modules(PyObject *Py_UNUSED(module), PyObject *args, PyObject *kw)
{
    if (kw == NULL || PyTuple_GET_SIZE(args)) {
        PyErr_SetString(PyExc_TypeError, "configure_modules() takes keyword arguments only");
        return NULL;
    }
    if (take(kw, "tls", &m_tls) || take(kw, "gen", &m_gen) || take(kw, "paths", &m_paths)
            || take(kw, "texts", &m_texts) || take(kw, "open", &m_open) || take(kw, "close", &m_close))
        return NULL;
    if (!PyList_Check(m_gen) || PyList_GET_SIZE(m_gen) != 1 || !PyDict_Check(m_paths)
            || !PyDict_Check(m_texts)) {
        PyErr_SetString(PyExc_TypeError, "configure_modules(): gen must be a 1-list, paths/texts dicts");
        return NULL;
    }
    modules_configured = 1;
    Py_RETURN_NONE;
}

/* info(): what configure() found, for the tests */
static PyObject *
info(PyObject *Py_UNUSED(unused_module), PyObject *Py_UNUSED(unused))
{
#ifdef PYPROF_FRAME_WALK
    PyObject *walk = Py_True;
#else
    PyObject *walk = Py_False;
#endif
    PyObject *layout = reads_on ? Py_BuildValue("{s:n,s:n,s:n,s:n,s:n,s:i}", "keys", off_keys, "sizes", off_sizes,
                                                "dtype", off_dtype, "device", off_device, "contig_byte", off_contig,
                                                "contig_bit", (int)bit_contig)
                                : Py_NewRef(Py_None);
    if (layout == NULL)
        return NULL;
    return Py_BuildValue("{s:O,s:O,s:O,s:O,s:K,s:O,s:N,s:K,s:O,s:K,s:O,s:O,s:O,s:O,s:K}", "device_table", device_type != NULL ? Py_True : Py_False,
                         "tensor_getters", a_shape.get != NULL ? Py_True : Py_False,
                         "contiguous_direct", is_contiguous_fn != NULL ? Py_True : Py_False,
                         "packed_slot", meta_type != NULL ? Py_True : Py_False, "tensor_hits", tensor_hits,
                         "tensor_reads", reads_on ? Py_True : Py_False, "tensor_layout", layout,
                         "tensor_reads_served", reads_served,
                         "grad_direct", grad_direct_on ? Py_True : Py_False, "grad_direct_served", grad_direct_served,
                         "tracing_direct", tracing_direct_on ? Py_True : Py_False,
                         "grad_mode_direct", grad_mode_direct_on ? Py_True : Py_False,
                         "route_kept", route_now >= 0 ? Py_True : Py_False,
                         "frame_walk", walk, "frame_walk_hits", walk_hits);
}

static PyMethodDef methods[] = {
    {"info", info, METH_NOARGS, "info() -> {'device_table', 'tensor_getters', 'contiguous_direct', 'packed_slot', 'tensor_reads', 'grad_direct', 'tracing_direct', 'grad_mode_direct', 'route_kept', 'frame_walk': bool, 'tensor_layout': offsets or None, 'tensor_hits', 'tensor_reads_served', 'grad_direct_served', 'frame_walk_hits': int}"},
    {"build", (PyCFunction)(void (*)(void))build, METH_FASTCALL,
     "build(meta, args, kwargs, op_id, s0) -> the op payload text (see ops.build_payload)"},
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     "configure(**shared): hand over the Python caches and fallbacks (once, at import)"},
    {"module_call", (PyCFunction)(void (*)(void))module_call, METH_FASTCALL,
     "module_call(module, orig_call, args, kwargs) -> orig_call(module, *args, **kwargs) in its range"},
    {"configure_modules", (PyCFunction)(void (*)(void))configure_modules, METH_VARARGS | METH_KEYWORDS,
     "configure_modules(**shared): hand over modules.py's thread-local stack, caches and fallbacks"},
    {"modules_changed", modules_changed, METH_NOARGS,
     "modules_changed(): modules.py's path/text caches changed (forget what module_call kept of them)"},
    {"nvtx_domain", nvtx_domain, METH_O, "nvtx_domain(name): create pyprof's NVTX domain (once)"},
    {"nvtx_push", nvtx_push, METH_O, "nvtx_push(text): push a range with this message in pyprof's NVTX domain"},
    {"nvtx_pop", nvtx_pop, METH_NOARGS, "nvtx_pop(): pop the innermost range of pyprof's NVTX domain"},
    {"set_route", (PyCFunction)(void (*)(void))set_route, METH_FASTCALL,
     "set_route(state, route): the ROUTE_* bits S.refresh() computed (kept here, read on every range)"},
    {"probe", probe, METH_O,
     "probe(name) -> 'tracing' or 'grad_mode' as libtorch's own function says it now (None: not found)"},
    {"use_direct", (PyCFunction)(void (*)(void))use_direct, METH_FASTCALL,
     "use_direct(name, on) -> whether call() now asks libtorch's function for 'tracing' or 'grad_mode'"},
    {"call", (PyCFunction)(void (*)(void))call, METH_FASTCALL,
     "call(meta, fn, args, kwargs) -> fn(*args, **kwargs) inside its op range (see ops.call_marked)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_fastpayload",
    "The op payload text built in C; see the comment at the top of _fastpayload.c.", -1, methods,
    NULL, NULL, NULL, NULL,
};

#define INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL

PyMODINIT_FUNC
PyInit__fastpayload(void)
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
    INTERN(s_prof_enabled, "_is_profiler_enabled");
    INTERN(s_mods, "mods");
    INTERN(s_compiling_flag, "_is_compiling_flag");
    INTERN(empty_str, "");
    if ((no_args = PyTuple_New(0)) == NULL)
        return NULL;
    return PyModule_Create(&moduledef);
}
