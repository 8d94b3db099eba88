/* module.c - the CPython extension torch_tpu._C (limited API, abi3).
 *
 * Thin: converts arguments, calls the runtime, turns a status into the
 * exception PyTorch raises for the same mistake (in exactly one place,
 * raise_status).  The per-op fast path lives here so that an eager op runs
 * no Python frame of ours: op() reads the tpu tensors' storage/view itself
 * and builds the result tensors itself, through torch callables handed over
 * once by set_factories().
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "runtime/runtime.h"

/* ---- errors ---------------------------------------------------------------- */

static PyObject *NotTpuError; /* an input is not a tpu tensor: Python slow path */
static PyObject *Unsupported; /* TPU_UNIMPLEMENTED: a case the engine cannot lower; kernels fall back to CPU */

#define TPU_SETREF(dst, val)  \
  do {                        \
    PyObject *old__ = (dst);  \
    (dst) = (val);            \
    Py_XDECREF(old__);        \
  } while (0)
#define CALL_NOARGS(o, name) PyObject_CallMethodObjArgs((o), (name), NULL) /* an input is not a tpu tensor: Python slow path */

static PyObject *raise_status(tpu_status_t st) {
  PyObject *exc;
  switch (tpu_status_code(st)) {
    case TPU_OUT_OF_RANGE: exc = PyExc_IndexError; break;
    case TPU_UNIMPLEMENTED: exc = Unsupported; break;
    case TPU_RESOURCE_EXHAUSTED: exc = PyExc_MemoryError; break;
    default: exc = PyExc_RuntimeError; break;
  }
  PyErr_SetString(exc, tpu_status_message(st));
  tpu_status_free(st);
  return NULL;
}

/* ---- Storage type ------------------------------------------------------------ */

typedef struct {
  PyObject_HEAD
  tpu_storage_t *s;
} StorageObject;

static PyTypeObject *StorageType;

static void Storage_dealloc(PyObject *self) {
  StorageObject *o = (StorageObject *)self;
  if (o->s) tpu_storage_release(o->s);
  o->s = NULL;
  PyTypeObject *tp = Py_TYPE(self);
  freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
  f(self);
  Py_DECREF(tp);
}

static PyObject *storage_wrap(tpu_storage_t *s) {
  allocfunc alloc = (allocfunc)PyType_GetSlot(StorageType, Py_tp_alloc);
  StorageObject *o = (StorageObject *)alloc(StorageType, 0);
  if (!o) {
    tpu_storage_release(s);
    return NULL;
  }
  o->s = s;
  return (PyObject *)o;
}

static PyObject *Storage_numel(PyObject *self, PyObject *unused) {
  return PyLong_FromLongLong(tpu_storage_numel(((StorageObject *)self)->s));
}
static PyObject *Storage_dtype(PyObject *self, PyObject *unused) {
  return PyLong_FromLong(tpu_storage_dtype(((StorageObject *)self)->s));
}
static PyObject *Storage_device(PyObject *self, PyObject *unused) {
  return PyLong_FromLong(tpu_storage_device(((StorageObject *)self)->s));
}
static PyObject *Storage_value_id(PyObject *self, PyObject *unused) {
  return PyLong_FromVoidPtr((void *)tpu_storage_value_id(((StorageObject *)self)->s));
}

static PyMethodDef Storage_methods[] = {
    {"numel", Storage_numel, METH_NOARGS, "elements in the base array"},
    {"dtype", Storage_dtype, METH_NOARGS, "engine dtype code"},
    {"device", Storage_device, METH_NOARGS, "device index"},
    {"value_id", Storage_value_id, METH_NOARGS, "identity of the current value"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot Storage_slots[] = {
    {Py_tp_dealloc, (void *)Storage_dealloc},
    {Py_tp_methods, (void *)Storage_methods},
    {Py_tp_doc, (void *)"A tpu storage: the current device value of one base array."},
    {0, NULL},
};

static PyType_Spec Storage_spec = {"torch_tpu._C.Storage", sizeof(StorageObject), 0, Py_TPFLAGS_DEFAULT,
                                   Storage_slots};

/* ---- torch objects handed over by set_factories ---------------------------------- */

static struct {
  PyObject *construct_storage; /* torch._C._construct_storage_from_data_pointer */
  PyObject *create_empty;      /* torch._C._acc.create_empty_tensor */
  PyObject *set_redispatch;    /* aten.set_.source_Storage_storage_offset.redispatch */
  PyObject *cpu_keyset;        /* DispatchKeySet(CPU) */
  PyObject *devices;           /* list: index -> torch.device("tpu:i") */
  PyObject *dtypes;            /* list: code -> torch.dtype (None where unsupported) */
  PyObject *dtype_codes;       /* dict: torch.dtype -> code */
  PyObject *empty_list;        /* [0] */
  PyObject *s_untyped_storage, *s_tpu, *s_stride, *s_storage_offset, *s_dtype, *s_shape;
} F;

static PyObject *set_factories(PyObject *self, PyObject *args) {
  PyObject *a, *b, *c, *d, *e, *g, *h;
  if (!PyArg_ParseTuple(args, "OOOOOOO", &a, &b, &c, &d, &e, &g, &h)) return NULL;
  TPU_SETREF(F.construct_storage, Py_NewRef(a));
  TPU_SETREF(F.create_empty, Py_NewRef(b));
  TPU_SETREF(F.set_redispatch, Py_NewRef(c));
  TPU_SETREF(F.cpu_keyset, Py_NewRef(d));
  TPU_SETREF(F.devices, Py_NewRef(e));
  TPU_SETREF(F.dtypes, Py_NewRef(g));
  TPU_SETREF(F.dtype_codes, Py_NewRef(h));
  if (!F.empty_list) F.empty_list = Py_BuildValue("[i]", 0);
  Py_RETURN_NONE;
}

/* ---- reading a tpu tensor ------------------------------------------------------------ */

static int read_int_seq(PyObject *seq, int64_t *out, int max, int *out_n) {
  PyObject *fast = PySequence_Tuple(seq);
  if (!fast) return -1;
  Py_ssize_t n = PyTuple_Size(fast);
  if (n > max) {
    Py_DECREF(fast);
    PyErr_Format(PyExc_RuntimeError, "tensors of rank %zd are not supported by tpu (max %d)", n, max);
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    out[i] = PyLong_AsLongLong(PyTuple_GetItem(fast, i));
    if (out[i] == -1 && PyErr_Occurred()) {
      Py_DECREF(fast);
      return -1;
    }
  }
  *out_n = (int)n;
  Py_DECREF(fast);
  return 0;
}

static int dtype_code_of(PyObject *dtype_obj) {
  PyObject *code = PyDict_GetItemWithError(F.dtype_codes, dtype_obj);
  if (!code) {
    if (!PyErr_Occurred()) {
      PyObject *r = PyObject_Repr(dtype_obj);
      PyErr_Format(PyExc_TypeError, "tpu does not support dtype %S", r ? r : dtype_obj);
      Py_XDECREF(r);
    }
    return -1;
  }
  return (int)PyLong_AsLong(code);
}

/* Fills in->storage (borrowed: the tensor keeps it alive) and in->view.
 * Returns 1 = ok, 0 = not a tpu tensor (no error set), -1 = error. */
static int read_tensor(PyObject *t, tpu_rt_input_t *in) {
  memset(in, 0, sizeof(*in));
  PyObject *us = CALL_NOARGS(t, F.s_untyped_storage);
  if (!us) return -1;
  PyObject *so = PyObject_GetAttr(us, F.s_tpu);
  Py_DECREF(us);
  if (!so) {
    if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
      PyErr_Clear();
      return 0;
    }
    return -1;
  }
  if (!PyObject_TypeCheck(so, StorageType)) {
    Py_DECREF(so);
    return 0;
  }
  in->storage = ((StorageObject *)so)->s;
  Py_DECREF(so); /* the torch storage object holds it */
  PyObject *shape = PyObject_GetAttr(t, F.s_shape);
  PyObject *stride = shape ? CALL_NOARGS(t, F.s_stride) : NULL;
  PyObject *off = stride ? CALL_NOARGS(t, F.s_storage_offset) : NULL;
  PyObject *dt = off ? PyObject_GetAttr(t, F.s_dtype) : NULL;
  int ok = dt != NULL;
  int n1 = 0, n2 = 0;
  if (ok) ok = read_int_seq(shape, in->view.sizes, TPU_MAX_RANK, &n1) == 0;
  if (ok) ok = read_int_seq(stride, in->view.strides, TPU_MAX_RANK, &n2) == 0;
  if (ok) {
    in->view.rank = n1;
    in->view.offset = PyLong_AsLongLong(off);
    int code = dtype_code_of(dt);
    ok = code > 0 && !PyErr_Occurred();
    in->view.dtype = (tpu_dtype_t)code;
  }
  Py_XDECREF(shape);
  Py_XDECREF(stride);
  Py_XDECREF(off);
  Py_XDECREF(dt);
  return ok ? 1 : -1;
}

/* Reads one op input: tpu tensor, Python scalar, or (dtype_code, number). */
static int read_input(PyObject *o, tpu_rt_input_t *in) {
  memset(in, 0, sizeof(*in));
  if (PyBool_Check(o)) {
    in->scalar_dtype = TPU_PRED;
    in->scalar_i = (o == Py_True);
    return 1;
  }
  if (PyLong_Check(o)) {
    in->scalar_dtype = TPU_S64;
    in->scalar_i = PyLong_AsLongLong(o);
    if (in->scalar_i == -1 && PyErr_Occurred()) return -1;
    in->scalar_f = (double)in->scalar_i;
    return 1;
  }
  if (PyFloat_Check(o)) {
    in->scalar_dtype = TPU_F32;
    in->scalar_f = PyFloat_AsDouble(o);
    return 1;
  }
  if (PyTuple_Check(o) && PyTuple_Size(o) == 2) {
    long code = PyLong_AsLong(PyTuple_GetItem(o, 0));
    if (code == -1 && PyErr_Occurred()) return -1;
    PyObject *v = PyTuple_GetItem(o, 1);
    in->scalar_dtype = (tpu_dtype_t)code;
    if (PyFloat_Check(v)) {
      in->scalar_f = PyFloat_AsDouble(v);
      in->scalar_i = (int64_t)in->scalar_f;
    } else {
      in->scalar_i = PyLong_AsLongLong(v);
      if (in->scalar_i == -1 && PyErr_Occurred()) return -1;
      in->scalar_f = (double)in->scalar_i;
    }
    if (tpu_dtype_is_float((tpu_dtype_t)code) && !PyFloat_Check(v)) in->scalar_f = PyFloat_AsDouble(v);
    return 1;
  }
  return read_tensor(o, in);
}

/* ---- making a tpu tensor --------------------------------------------------------------- */

static PyObject *make_tensor(tpu_storage_t *s /* ref moved in */, int rank, const int64_t *dims, tpu_dtype_t dt) {
  PyObject *so = storage_wrap(s);
  if (!so) return NULL;
  PyObject *dev = PyList_GetItem(F.devices, tpu_storage_device(s));
  PyObject *dtype = PyList_GetItem(F.dtypes, dt);
  if (!dev || !dtype || dtype == Py_None) {
    Py_DECREF(so);
    PyErr_Clear();
    PyErr_Format(PyExc_RuntimeError, "tpu: no torch dtype/device for engine dtype %d", (int)dt);
    return NULL;
  }
  int64_t numel = 1;
  for (int i = 0; i < rank; i++) numel *= dims[i];
  size_t nbytes = (size_t)numel * tpu_dtype_size(dt);
  /* the data pointer PyTorch sees is the engine storage's address: unique
   * while the storage lives, and never dereferenced (no tpu kernel reads it) */
  PyObject *ptr = PyLong_FromVoidPtr((void *)s);
  PyObject *nb = PyLong_FromSize_t(nbytes);
  PyObject *ts = (ptr && nb) ? PyObject_CallFunctionObjArgs(F.construct_storage, ptr, dev, nb, NULL) : NULL;
  Py_XDECREF(ptr);
  Py_XDECREF(nb);
  if (!ts || PyObject_SetAttr(ts, F.s_tpu, so) < 0) {
    Py_XDECREF(ts);
    Py_DECREF(so);
    return NULL;
  }
  Py_DECREF(so);
  PyObject *t = PyObject_CallFunctionObjArgs(F.create_empty, F.empty_list, dtype, NULL);
  PyObject *shape = PyTuple_New(rank), *stride = PyTuple_New(rank);
  if (!t || !shape || !stride) goto fail;
  int64_t st = 1;
  for (int i = rank - 1; i >= 0; i--) {
    PyTuple_SetItem(shape, i, PyLong_FromLongLong(dims[i]));
    PyTuple_SetItem(stride, i, PyLong_FromLongLong(st));
    st *= dims[i] > 1 ? dims[i] : 1;
  }
  PyObject *zero = PyLong_FromLong(0);
  PyObject *r = PyObject_CallFunctionObjArgs(F.set_redispatch, F.cpu_keyset, t, ts, zero, shape, stride, NULL);
  Py_DECREF(zero);
  Py_DECREF(shape);
  Py_DECREF(stride);
  Py_DECREF(ts);
  Py_XDECREF(r); /* set_ returns t itself */
  if (!r) {
    Py_DECREF(t);
    return NULL;
  }
  return t;
fail:
  Py_XDECREF(t);
  Py_XDECREF(shape);
  Py_XDECREF(stride);
  Py_DECREF(ts);
  return NULL;
}

/* ---- the C fast path of binary arithmetic -------------------------------------------------- */

/* A callable registered as the tpu kernel of add/sub/mul/div (.Tensor and
 * .Scalar): when both operands are tpu tensors of one dtype, or a tpu tensor
 * and a Python number of its kind, it runs the rule with no Python frame of
 * ours; anything else (promotion, alpha, CPU scalars, complex) goes to the
 * Python kernel it wraps. */
typedef struct {
  PyObject_HEAD
  const tpu_op_rule_t *rule;
  PyObject *slow;
  int float_only; /* true division: integer operands promote, slow path */
} FastBinaryObject;

static PyTypeObject *FastBinaryType;

/* The slow path: call the Python kernel with the same arguments. */
static PyObject *call_slow(PyObject *fn, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  PyObject *tuple = PyTuple_New(nargs);
  if (!tuple) return NULL;
  for (Py_ssize_t i = 0; i < nargs; i++) PyTuple_SetItem(tuple, i, Py_NewRef(args[i]));
  PyObject *kw = NULL;
  if (kwnames && PyTuple_Size(kwnames)) {
    kw = PyDict_New();
    for (Py_ssize_t i = 0; kw && i < PyTuple_Size(kwnames); i++)
      PyDict_SetItem(kw, PyTuple_GetItem(kwnames, i), args[nargs + i]);
  }
  PyObject *r = PyObject_Call(fn, tuple, kw);
  Py_DECREF(tuple);
  Py_XDECREF(kw);
  return r;
}

static PyObject *fast_binary_call(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  FastBinaryObject *k = (FastBinaryObject *)self;
  int fast = nargs == 2;
  if (fast && kwnames) { /* only alpha=1 */
    Py_ssize_t nk = PyTuple_Size(kwnames);
    for (Py_ssize_t i = 0; i < nk && fast; i++) {
      PyObject *v = args[nargs + i];
      fast = PyLong_Check(v) && !PyBool_Check(v) && PyLong_AsLong(v) == 1;
    }
  }
  tpu_rt_input_t in[2];
  if (fast) {
    int r = read_tensor(args[0], &in[0]);
    if (r < 0) return NULL;
    fast = r == 1 && in[0].view.dtype != TPU_PRED && !tpu_dtype_is_complex(in[0].view.dtype) &&
           (!k->float_only || tpu_dtype_is_float(in[0].view.dtype));
  }
  if (fast) {
    PyObject *o = args[1];
    if (PyFloat_Check(o)) {
      fast = tpu_dtype_is_float(in[0].view.dtype);
      memset(&in[1], 0, sizeof(in[1]));
      in[1].scalar_dtype = in[0].view.dtype == TPU_F64 ? TPU_F64 : TPU_F32;
      in[1].scalar_f = PyFloat_AsDouble(o);
    } else if (PyLong_Check(o) && !PyBool_Check(o)) {
      memset(&in[1], 0, sizeof(in[1]));
      int overflow = 0;
      long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
      fast = !overflow;
      in[1].scalar_dtype = tpu_dtype_is_float(in[0].view.dtype) ? (in[0].view.dtype == TPU_F64 ? TPU_F64 : TPU_F32)
                                                                 : TPU_S64;
      in[1].scalar_i = v;
      in[1].scalar_f = (double)v;
    } else {
      int r = read_tensor(o, &in[1]);
      if (r < 0) return NULL;
      fast = r == 1 && in[1].view.dtype == in[0].view.dtype;
    }
  }
  if (!fast) return call_slow(k->slow, args, nargs, kwnames);
  int64_t code = in[0].view.dtype;
  tpu_op_attrs_t attrs = {1, &code, 0, NULL};
  tpu_rt_output_t out[TPU_OP_MAX_OUTPUTS];
  int nout = 0;
  tpu_status_t st = tpu_rt_op(k->rule, in, 2, &attrs, out, &nout);
  if (st) return raise_status(st);
  for (int o = 1; o < nout; o++) tpu_storage_release(out[o].storage);
  return make_tensor(out[0].storage, out[0].type.rank, out[0].type.dims, out[0].type.dtype);
}

static void FastBinary_dealloc(PyObject *self) {
  FastBinaryObject *k = (FastBinaryObject *)self;
  Py_XDECREF(k->slow);
  PyTypeObject *tp = Py_TYPE(self);
  freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
  f(self);
  Py_DECREF(tp);
}

static PyType_Slot FastBinary_slots[] = {
    {Py_tp_dealloc, (void *)FastBinary_dealloc},
    {Py_tp_doc, (void *)"state of a C fast-path kernel"},
    {0, NULL},
};

static PyType_Spec FastBinary_spec = {"torch_tpu._C.FastBinary", sizeof(FastBinaryObject), 0, Py_TPFLAGS_DEFAULT,
                                      FastBinary_slots};

/* The kernel is a builtin function bound to its state: the dispatcher calls
 * it with METH_FASTCALL, no Python frame in between. */
static PyMethodDef fast_binary_def = {"tpu_fast_binary", (PyCFunction)(void (*)(void))fast_binary_call,
                                      METH_FASTCALL | METH_KEYWORDS, "C fast path of a binary tpu kernel"};

/* fast_binary(rule, slow_kernel) -> callable */
static PyObject *py_fast_binary(PyObject *self, PyObject *args) {
  const char *name;
  PyObject *slow;
  int float_only = 0;
  if (!PyArg_ParseTuple(args, "sO|p", &name, &slow, &float_only)) return NULL;
  const tpu_op_rule_t *rule = tpu_op_rule_find(name);
  if (!rule) {
    PyErr_Format(PyExc_ValueError, "no rule %s", name);
    return NULL;
  }
  allocfunc alloc = (allocfunc)PyType_GetSlot(FastBinaryType, Py_tp_alloc);
  FastBinaryObject *k = (FastBinaryObject *)alloc(FastBinaryType, 0);
  if (!k) return NULL;
  k->rule = rule;
  k->slow = Py_NewRef(slow);
  k->float_only = float_only;
  PyObject *fn = PyCFunction_NewEx(&fast_binary_def, (PyObject *)k, NULL);
  Py_DECREF(k);
  return fn;
}

/* ---- module functions ---------------------------------------------------------------------- */

static PyObject *py_init(PyObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"plugin", "num_devices", "mode", "cache_dir", "fused_max_nodes",
                           "mem_max_entries", "mem_max_bytes", "disk_max_entries", "disk_max_bytes", NULL};
  const char *plugin, *cache_dir = NULL;
  int ndev = 0, mode = 0, fmax = 0;
  long long me = 0, mb = 0, de = 0, db = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "s|iiziLLLL", kwlist, &plugin, &ndev, &mode, &cache_dir, &fmax, &me,
                                   &mb, &de, &db))
    return NULL;
  tpu_rt_config_t cfg = {.plugin_path = plugin, .num_devices = ndev, .mode = (tpu_eager_mode_t)mode,
                         .cache_dir = cache_dir, .fused_max_nodes = fmax, .mem_cache_max_entries = me,
                         .mem_cache_max_bytes = mb, .disk_cache_max_entries = de, .disk_cache_max_bytes = db};
  tpu_status_t st = tpu_rt_init(&cfg);
  if (st) return raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *py_find_plugin(PyObject *self, PyObject *args) {
  const char *dirs = NULL;
  if (!PyArg_ParseTuple(args, "|z", &dirs)) return NULL;
  char path[4096];
  tpu_status_t st = tpu_pjrt_find_plugin(dirs, path, sizeof(path));
  if (st) return raise_status(st);
  return PyUnicode_FromString(path);
}

static int read_attrs(PyObject *ints, PyObject *floats, int64_t *iv, int *ni, double *fv, int *nf, int maxn) {
  *ni = *nf = 0;
  if (ints && ints != Py_None) {
    PyObject *t = PySequence_Tuple(ints);
    if (!t) return -1;
    Py_ssize_t n = PyTuple_Size(t);
    if (n > maxn) {
      Py_DECREF(t);
      PyErr_SetString(PyExc_RuntimeError, "too many integer attributes");
      return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
      PyObject *x = PyTuple_GetItem(t, i);
      if (PyBool_Check(x)) iv[i] = x == Py_True;
      else iv[i] = PyLong_AsLongLong(x);
      if (iv[i] == -1 && PyErr_Occurred()) {
        Py_DECREF(t);
        return -1;
      }
    }
    *ni = (int)n;
    Py_DECREF(t);
  }
  if (floats && floats != Py_None) {
    PyObject *t = PySequence_Tuple(floats);
    if (!t) return -1;
    Py_ssize_t n = PyTuple_Size(t);
    if (n > 64) {
      Py_DECREF(t);
      PyErr_SetString(PyExc_RuntimeError, "too many float attributes");
      return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
      fv[i] = PyFloat_AsDouble(PyTuple_GetItem(t, i));
      if (fv[i] == -1.0 && PyErr_Occurred()) {
        Py_DECREF(t);
        return -1;
      }
    }
    *nf = (int)n;
    Py_DECREF(t);
  }
  return 0;
}

#define TPU_MAX_INTS 1024

/* op(rule, inputs, ints=None, floats=None) -> list of new tpu tensors.
 * Raises NotTpuError (with the input index) when an input is not a tpu
 * tensor, so the Python wrapper can take its slow path. */
static PyObject *py_op(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs < 2 || nargs > 4) {
    PyErr_SetString(PyExc_TypeError, "op(rule, inputs, ints=None, floats=None)");
    return NULL;
  }
  const char *name = PyUnicode_AsUTF8AndSize(args[0], NULL);
  if (!name) return NULL;
  const tpu_op_rule_t *rule = tpu_op_rule_find(name);
  if (!rule) {
    PyErr_Format(PyExc_NotImplementedError, "tpu: no lowering rule named '%s'", name);
    return NULL;
  }
  PyObject *inputs = PySequence_Tuple(args[1]);
  if (!inputs) return NULL;
  Py_ssize_t nin = PyTuple_Size(inputs);
  if (nin > TPU_OP_MAX_INPUTS) {
    Py_DECREF(inputs);
    PyErr_Format(PyExc_RuntimeError, "%s: too many inputs (%zd)", name, nin);
    return NULL;
  }
  tpu_rt_input_t in[TPU_OP_MAX_INPUTS];
  for (Py_ssize_t i = 0; i < nin; i++) {
    int r = read_input(PyTuple_GetItem(inputs, i), &in[i]);
    if (r <= 0) {
      Py_DECREF(inputs);
      if (r == 0) PyErr_Format(NotTpuError, "%zd", i);
      return NULL;
    }
  }
  int64_t iv[TPU_MAX_INTS];
  double fv[64];
  int ni, nf;
  if (read_attrs(nargs > 2 ? args[2] : NULL, nargs > 3 ? args[3] : NULL, iv, &ni, fv, &nf, TPU_MAX_INTS) < 0) {
    Py_DECREF(inputs);
    return NULL;
  }
  tpu_op_attrs_t attrs = {ni, iv, nf, fv};
  tpu_rt_output_t out[TPU_OP_MAX_OUTPUTS];
  int nout = 0;
  tpu_status_t st = tpu_rt_op(rule, in, (int)nin, &attrs, out, &nout);
  Py_DECREF(inputs); /* inputs kept storages alive until here */
  if (st) return raise_status(st);
  PyObject *res = PyList_New(nout);
  if (!res) {
    for (int o = 0; o < nout; o++) tpu_storage_release(out[o].storage);
    return NULL;
  }
  for (int o = 0; o < nout; o++) {
    PyObject *t = make_tensor(out[o].storage, out[o].type.rank, out[o].type.dims, out[o].type.dtype);
    if (!t) {
      for (int k = o + 1; k < nout; k++) tpu_storage_release(out[k].storage);
      Py_DECREF(res);
      return NULL;
    }
    PyList_SetItem(res, o, t);
  }
  return res;
}

/* write(dst_tensor, src) : src is a tpu tensor or a scalar input. */
static PyObject *py_write(PyObject *self, PyObject *args) {
  PyObject *dst, *src;
  if (!PyArg_ParseTuple(args, "OO", &dst, &src)) return NULL;
  tpu_rt_input_t d, s;
  int r = read_tensor(dst, &d);
  if (r <= 0) {
    if (r == 0) PyErr_SetString(NotTpuError, "dst");
    return NULL;
  }
  r = read_input(src, &s);
  if (r <= 0) {
    if (r == 0) PyErr_SetString(NotTpuError, "src");
    return NULL;
  }
  tpu_status_t st = tpu_rt_write(d.storage, &d.view, &s);
  if (st) return raise_status(st);
  Py_RETURN_NONE;
}

/* to_host(tensor, address, nbytes): dense row-major copy of the view. */
static PyObject *py_to_host(PyObject *self, PyObject *args) {
  PyObject *t;
  unsigned long long addr, nbytes;
  if (!PyArg_ParseTuple(args, "OKK", &t, &addr, &nbytes)) return NULL;
  tpu_rt_input_t in;
  int r = read_tensor(t, &in);
  if (r <= 0) {
    if (r == 0) PyErr_SetString(NotTpuError, "src");
    return NULL;
  }
  tpu_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = tpu_rt_view_to_host(in.storage, &in.view, (void *)(uintptr_t)addr, (size_t)nbytes);
  Py_END_ALLOW_THREADS
  if (st) return raise_status(st);
  Py_RETURN_NONE;
}

/* from_host(address, shape, dtype_code, device) -> new tpu tensor. */
static PyObject *py_from_host(PyObject *self, PyObject *args) {
  unsigned long long addr;
  PyObject *shape;
  int code, device;
  if (!PyArg_ParseTuple(args, "KOii", &addr, &shape, &code, &device)) return NULL;
  int64_t dims[TPU_MAX_RANK];
  int rank = 0;
  if (read_int_seq(shape, dims, TPU_MAX_RANK, &rank) < 0) return NULL;
  if (!tpu_dtype_valid(code)) {
    PyErr_Format(PyExc_TypeError, "tpu: unsupported dtype code %d", code);
    return NULL;
  }
  tpu_storage_t *s;
  tpu_status_t st = tpu_rt_storage_from_host(device, (tpu_dtype_t)code, dims, rank, (const void *)(uintptr_t)addr, &s);
  if (st) return raise_status(st);
  return make_tensor(s, rank, dims, (tpu_dtype_t)code);
}

static PyObject *py_is_tpu(PyObject *self, PyObject *t) {
  tpu_rt_input_t in;
  int r = read_tensor(t, &in);
  if (r < 0) {
    PyErr_Clear();
    Py_RETURN_FALSE;
  }
  return PyBool_FromLong(r);
}

static PyObject *py_flush(PyObject *self, PyObject *unused) {
  tpu_status_t st = tpu_rt_flush();
  if (st) return raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *py_synchronize(PyObject *self, PyObject *unused) {
  tpu_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = tpu_rt_synchronize();
  Py_END_ALLOW_THREADS
  if (st) return raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *py_set_mode(PyObject *self, PyObject *arg) {
  long m = PyLong_AsLong(arg);
  if (m == -1 && PyErr_Occurred()) return NULL;
  if (m < 0 || m > 2) {
    PyErr_SetString(PyExc_ValueError, "mode must be 0 (strict), 1 (debug) or 2 (fused)");
    return NULL;
  }
  tpu_status_t st = tpu_rt_set_mode((tpu_eager_mode_t)m);
  if (st) return raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *py_get_mode(PyObject *self, PyObject *unused) { return PyLong_FromLong(tpu_rt_mode()); }

static PyObject *py_stats(PyObject *self, PyObject *unused) {
  tpu_rt_stats_t s;
  tpu_rt_stats(&s);
  return Py_BuildValue(
      "{s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:d,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:i,s:L}",
      "mem_hits", (long long)s.mem_hits, "mem_misses", (long long)s.mem_misses, "disk_hits", (long long)s.disk_hits,
      "disk_misses", (long long)s.disk_misses, "disk_writes", (long long)s.disk_writes, "disk_errors",
      (long long)s.disk_errors, "compiles", (long long)s.compiles, "evictions", (long long)s.evictions,
      "disk_evictions", (long long)s.disk_evictions, "compile_seconds", s.compile_seconds, "mem_entries",
      (long long)s.mem_entries, "mem_bytes", (long long)s.mem_bytes, "disk_entries", (long long)s.disk_entries,
      "disk_bytes", (long long)s.disk_bytes, "executions", (long long)s.executions, "flushes", (long long)s.flushes,
      "ops_recorded", (long long)s.ops_recorded, "live_buffers", (long long)s.live_buffers, "live_values",
      (long long)s.live_values, "live_storages", (long long)s.live_storages, "scalar_cache_hits",
      (long long)s.scalar_cache_hits, "scalar_cache_misses", (long long)s.scalar_cache_misses,
      "scalar_cache_entries", (long long)s.scalar_cache_entries, "pending_nodes",
      tpu_rt_pending_nodes(), "disk_refused", (long long)s.disk_refused);
}

static PyObject *py_clear_cache(PyObject *self, PyObject *arg) {
  tpu_rt_clear_cache(PyObject_IsTrue(arg) == 1);
  Py_RETURN_NONE;
}

static PyObject *py_device_count(PyObject *self, PyObject *unused) { return PyLong_FromLong(tpu_rt_device_count()); }
static PyObject *py_platform(PyObject *self, PyObject *unused) { return PyUnicode_FromString(tpu_rt_platform()); }
static PyObject *py_identity(PyObject *self, PyObject *unused) { return PyUnicode_FromString(tpu_rt_identity()); }
static PyObject *py_initialized(PyObject *self, PyObject *unused) { return PyBool_FromLong(tpu_rt_initialized()); }

static PyObject *py_has_rule(PyObject *self, PyObject *arg) {
  const char *name = PyUnicode_AsUTF8AndSize(arg, NULL);
  if (!name) return NULL;
  return PyBool_FromLong(tpu_op_rule_find(name) != NULL);
}

static PyObject *py_rules(PyObject *self, PyObject *unused) {
  int n = tpu_op_rule_count();
  PyObject *l = PyList_New(n);
  if (!l) return NULL;
  for (int i = 0; i < n; i++) PyList_SetItem(l, i, PyUnicode_FromString(tpu_op_rule_at(i)->name));
  return l;
}

static PyObject *py_shutdown(PyObject *self, PyObject *unused) {
  tpu_rt_shutdown();
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"fast_binary", py_fast_binary, METH_VARARGS, "fast_binary(rule, slow_kernel, float_only=False) -> C kernel"},
    {"init", (PyCFunction)(void (*)(void))py_init, METH_VARARGS | METH_KEYWORDS, "initialise the runtime"},
    {"find_plugin", py_find_plugin, METH_VARARGS, "find_plugin(site_dirs) -> path"},
    {"set_factories", set_factories, METH_VARARGS, "hand over the torch callables used to make tensors"},
    {"op", (PyCFunction)(void (*)(void))py_op, METH_FASTCALL, "op(rule, inputs, ints, floats) -> [tensors]"},
    {"write", py_write, METH_VARARGS, "write(dst, src): dst[...] = src through the view machinery"},
    {"to_host", py_to_host, METH_VARARGS, "to_host(tensor, address, nbytes)"},
    {"from_host", py_from_host, METH_VARARGS, "from_host(address, shape, dtype_code, device) -> tensor"},
    {"is_tpu", py_is_tpu, METH_O, "is this a tpu tensor backed by the engine"},
    {"flush", py_flush, METH_NOARGS, "run pending (fused) work"},
    {"synchronize", py_synchronize, METH_NOARGS, "run pending work and wait"},
    {"set_mode", py_set_mode, METH_O, "set eager mode"},
    {"get_mode", py_get_mode, METH_NOARGS, "eager mode"},
    {"stats", py_stats, METH_NOARGS, "runtime and cache counters"},
    {"clear_cache", py_clear_cache, METH_O, "clear_cache(disk_too)"},
    {"device_count", py_device_count, METH_NOARGS, ""},
    {"platform", py_platform, METH_NOARGS, ""},
    {"identity", py_identity, METH_NOARGS, ""},
    {"initialized", py_initialized, METH_NOARGS, ""},
    {"has_rule", py_has_rule, METH_O, ""},
    {"rules", py_rules, METH_NOARGS, ""},
    {"shutdown", py_shutdown, METH_NOARGS, ""},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "torch_tpu._C", "torch_tpu engine", -1, methods};

PyMODINIT_FUNC PyInit__C(void) {
  PyObject *m = PyModule_Create(&moduledef);
  if (!m) return NULL;
  StorageType = (PyTypeObject *)PyType_FromSpec(&Storage_spec);
  if (!StorageType) return NULL;
  Py_INCREF((PyObject *)StorageType);
  PyModule_AddObject(m, "Storage", (PyObject *)StorageType);
  FastBinaryType = (PyTypeObject *)PyType_FromSpec(&FastBinary_spec);
  if (!FastBinaryType) return NULL;
  Unsupported = PyErr_NewException("torch_tpu._C.Unsupported", PyExc_NotImplementedError, NULL);
  Py_INCREF(Unsupported);
  PyModule_AddObject(m, "Unsupported", Unsupported);
  NotTpuError = PyErr_NewException("torch_tpu._C.NotTpuError", PyExc_TypeError, NULL);
  Py_INCREF(NotTpuError);
  PyModule_AddObject(m, "NotTpuError", NotTpuError);
  F.s_untyped_storage = PyUnicode_InternFromString("untyped_storage");
  F.s_tpu = PyUnicode_InternFromString("_tpu");
  F.s_stride = PyUnicode_InternFromString("stride");
  F.s_storage_offset = PyUnicode_InternFromString("storage_offset");
  F.s_dtype = PyUnicode_InternFromString("dtype");
  F.s_shape = PyUnicode_InternFromString("shape");
  return m;
}
