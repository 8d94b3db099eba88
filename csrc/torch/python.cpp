// python.cpp - the module torch_tpu._C: its init, and the entry points that
// touch tensors (the engine-only ones are csrc/python/module.c).
//
// The per-op path runs no Python frame of ours: op() reads the tpu inputs'
// TensorImpls directly (storage, sizes, strides, offset, dtype), records and
// runs the rule, and builds the result tensors in C++ (make_tensor), each
// wrapped once for Python.  Errors become exceptions in one place,
// tpu_py_raise_status (module.c).
#include <Python.h>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/autograd/python_variable.h>

#include "torch/memory_history.h"
#include "torch/tpu_torch.h"

extern "C" {
#include "python/module.h"
PyObject* tpu_torch_configure(PyObject*, PyObject* args);
PyObject* tpu_torch_set_starter(PyObject*, PyObject* fn);
PyObject* tpu_torch_register_fast_kernel(PyObject*, PyObject* args);
PyObject* tpu_torch_pow_scalar_code(PyObject*, PyObject* args);
void tpu_torch_register_hooks(void);
}

namespace torch_tpu {
int c10d_register(PyObject* module);  // c10d_backend.cpp: the tpu_dist backend's constructor

namespace {

PyObject* g_not_tpu = nullptr;     // an input is not a tpu tensor: Python slow path
PyObject* g_unsupported = nullptr; // TPU_UNIMPLEMENTED: the op falls back to CPU

// ---- reading inputs ------------------------------------------------------------------
// 1 = a tpu tensor, 0 = not one (no error set), -1 = error set.
int read_at_tensor(const at::Tensor& t, tpu_rt_input_t* in) {
  if (!t.defined() || t.device().type() != kTpu) return 0;
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  int64_t offset = 0;
  tpu_storage_t* s = tensor_storage(impl, &offset);
  if (!s) return 0;
  int64_t rank = impl->dim();
  if (rank > TPU_MAX_RANK) {
    PyErr_Format(PyExc_RuntimeError, "tensors of rank %lld are not supported by tpu (max %d)", (long long)rank,
                 TPU_MAX_RANK);
    return -1;
  }
  tpu_dtype_t code = dtype_code(impl->dtype().toScalarType());
  if (code == TPU_DTYPE_INVALID) {
    PyErr_Format(PyExc_TypeError, "tpu does not support dtype %s", dtype_name(impl->dtype().toScalarType()).c_str());
    return -1;
  }
  in->storage = s;
  in->view.dtype = code;
  in->view.rank = static_cast<int>(rank);
  c10::IntArrayRef sizes = impl->sizes(), strides = impl->strides();
  for (int64_t d = 0; d < rank; d++) {
    in->view.sizes[d] = sizes[d];
    in->view.strides[d] = strides[d];
  }
  in->view.offset = offset;
  return 1;
}

int read_tensor(PyObject* o, tpu_rt_input_t* in) {
  memset(in, 0, sizeof(*in));
  if (!THPVariable_Check(o)) return 0;
  return read_at_tensor(THPVariable_Unpack(o), in);
}

// One op input: tpu tensor, Python scalar, or (dtype_code, number).
int read_input(PyObject* o, tpu_rt_input_t* in) {
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
    in->scalar_f = static_cast<double>(in->scalar_i);
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
    PyObject* v = PyTuple_GetItem(o, 1);
    in->scalar_dtype = static_cast<tpu_dtype_t>(code);
    if (PyFloat_Check(v)) {
      in->scalar_f = PyFloat_AsDouble(v);
      in->scalar_i = static_cast<int64_t>(in->scalar_f);
    } else {
      in->scalar_i = PyLong_AsLongLong(v);
      if (in->scalar_i == -1 && PyErr_Occurred()) return -1;
      in->scalar_f = static_cast<double>(in->scalar_i);
    }
    if (tpu_dtype_is_float(static_cast<tpu_dtype_t>(code)) && !PyFloat_Check(v)) in->scalar_f = PyFloat_AsDouble(v);
    return 1;
  }
  if (!THPVariable_Check(o)) return 0;
  return read_at_tensor(THPVariable_Unpack(o), in);
}

// Non-tensor attributes: ints and floats (part of the program's cache key).
constexpr int kMaxInts = 1024;
constexpr int kMaxFloats = 64;

int read_attrs(PyObject* ints, PyObject* floats, int64_t* iv, int* ni, double* fv, int* nf) {
  *ni = *nf = 0;
  if (ints && ints != Py_None) {
    PyObject* t = PySequence_Fast(ints, "ints must be a sequence");
    if (!t) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(t);
    if (n > kMaxInts) {
      Py_DECREF(t);
      PyErr_SetString(PyExc_RuntimeError, "too many integer attributes");
      return -1;
    }
    PyObject** items = PySequence_Fast_ITEMS(t);
    for (Py_ssize_t i = 0; i < n; i++) {
      iv[i] = PyBool_Check(items[i]) ? (items[i] == Py_True) : PyLong_AsLongLong(items[i]);
      if (iv[i] == -1 && PyErr_Occurred()) {
        Py_DECREF(t);
        return -1;
      }
    }
    *ni = static_cast<int>(n);
    Py_DECREF(t);
  }
  if (floats && floats != Py_None) {
    PyObject* t = PySequence_Fast(floats, "floats must be a sequence");
    if (!t) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(t);
    if (n > kMaxFloats) {
      Py_DECREF(t);
      PyErr_SetString(PyExc_RuntimeError, "too many float attributes");
      return -1;
    }
    PyObject** items = PySequence_Fast_ITEMS(t);
    for (Py_ssize_t i = 0; i < n; i++) {
      fv[i] = PyFloat_AsDouble(items[i]);
      if (fv[i] == -1.0 && PyErr_Occurred()) {
        Py_DECREF(t);
        return -1;
      }
    }
    *nf = static_cast<int>(n);
    Py_DECREF(t);
  }
  return 0;
}

// ---- results --------------------------------------------------------------------------------
PyObject* wrap(tpu_rt_output_t* out) {
  return THPVariable_Wrap(make_tensor(out->storage, out->type.rank, out->type.dims, out->type.dtype));
}

PyObject* wrap_outputs(tpu_rt_output_t* out, int n) {
  PyObject* res = PyList_New(n);
  if (!res) {
    for (int o = 0; o < n; o++) tpu_storage_release(out[o].storage);
    return nullptr;
  }
  for (int o = 0; o < n; o++) {
    PyObject* t = wrap(&out[o]);
    if (!t) {
      for (int k = o + 1; k < n; k++) tpu_storage_release(out[k].storage);
      Py_DECREF(res);
      return nullptr;
    }
    PyList_SET_ITEM(res, o, t);
  }
  return res;
}

const tpu_op_rule_t* rule_arg(PyObject* name_obj) {
  const char* name = PyUnicode_AsUTF8AndSize(name_obj, nullptr);
  if (!name) return nullptr;
  const tpu_op_rule_t* rule = tpu_op_rule_find(name);
  if (!rule) PyErr_Format(PyExc_NotImplementedError, "tpu: no lowering rule named '%s'", name);
  return rule;
}

// Reads inputs[first:] from a sequence; raises NotTpuError(index) for a
// tensor that is not on tpu.
int read_inputs(PyObject* seq, tpu_rt_input_t* in, int first, int* out_n) {
  PyObject* fast = PySequence_Fast(seq, "inputs must be a sequence");
  if (!fast) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  if (n + first > TPU_OP_MAX_INPUTS) {
    Py_DECREF(fast);
    PyErr_Format(PyExc_RuntimeError, "too many inputs (%zd)", n);
    return -1;
  }
  PyObject** items = PySequence_Fast_ITEMS(fast);
  for (Py_ssize_t i = 0; i < n; i++) {
    int r = read_input(items[i], &in[first + i]);
    if (r <= 0) {
      Py_DECREF(fast);
      if (r == 0) PyErr_Format(g_not_tpu, "%zd", i);
      return -1;
    }
  }
  Py_DECREF(fast);  // the tensors stay alive: the caller's sequence holds them
  *out_n = first + static_cast<int>(n);
  return 0;
}

// A C++ exception from the C++ layer (ensure_started, generators ...) as a
// Python exception.
template <typename F>
PyObject* guarded(F&& f) {
  try {
    return f();
  } catch (python_error& e) {
    e.restore();
    return nullptr;
  } catch (...) {
    torch::translate_exception_to_python(std::current_exception());
    return nullptr;
  }
}

// ---- module functions -----------------------------------------------------------------------

// op(rule, inputs, ints=None, floats=None, device=None) -> list of new tpu
// tensors.  An op with no tensor input runs on `device` (default: this
// thread's current tpu device).
PyObject* py_op(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 2 || nargs > 5) {
    PyErr_SetString(PyExc_TypeError, "op(rule, inputs, ints=None, floats=None, device=None)");
    return nullptr;
  }
  int device = current_device();
  if (nargs > 4 && args[4] != Py_None) {
    device = static_cast<int>(PyLong_AsLong(args[4]));
    if (device == -1 && PyErr_Occurred()) return nullptr;
  }
  const tpu_op_rule_t* rule = rule_arg(args[0]);
  if (!rule) return nullptr;
  tpu_rt_input_t in[TPU_OP_MAX_INPUTS];
  int nin = 0;
  if (read_inputs(args[1], in, 0, &nin) < 0) return nullptr;
  int64_t iv[kMaxInts];
  double fv[kMaxFloats];
  int ni, nf;
  if (read_attrs(nargs > 2 ? args[2] : nullptr, nargs > 3 ? args[3] : nullptr, iv, &ni, fv, &nf) < 0) return nullptr;
  tpu_op_attrs_t attrs = {ni, iv, nf, fv};
  tpu_rt_output_t out[TPU_OP_MAX_OUTPUTS];
  int nout = 0;
  tpu_status_t st = tpu_rt_op_on(device, rule, in, nin, &attrs, out, &nout);
  if (st) return tpu_py_raise_status(st);
  return wrap_outputs(out, nout);
}

// to_device(tensor, device) -> a dense copy of a tpu tensor on another tpu device.
PyObject* py_to_device(PyObject*, PyObject* args) {
  PyObject* t;
  int device;
  if (!PyArg_ParseTuple(args, "Oi", &t, &device)) return nullptr;
  tpu_rt_input_t in;
  int r = read_tensor(t, &in);
  if (r <= 0) {
    if (r == 0) PyErr_SetString(g_not_tpu, "src");
    return nullptr;
  }
  tpu_storage_t* s = nullptr;
  tpu_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = tpu_rt_view_to_device(in.storage, &in.view, device, &s);
  Py_END_ALLOW_THREADS
  if (st) return tpu_py_raise_status(st);
  return guarded([&]() -> PyObject* { return THPVariable_Wrap(make_tensor(s, in.view.rank, in.view.sizes, in.view.dtype)); });
}

// collective(kind, reduce, tensors) -> new tensors, one per member: a
// collective across this process's tpu devices (tpu_rt_collective; kind 0
// all_reduce, 1 all_gather, 2 reduce_scatter), one tensor per device.
PyObject* py_collective(PyObject*, PyObject* args) {
  int kind;
  const char* reduce;
  PyObject* seq;
  if (!PyArg_ParseTuple(args, "izO", &kind, &reduce, &seq)) return nullptr;
  PyObject* fast = PySequence_Fast(seq, "collective: tensors must be a sequence");
  if (!fast) return nullptr;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  if (n < 1 || n > TPU_PJRT_MAX_DEVICES) {
    Py_DECREF(fast);
    PyErr_Format(PyExc_ValueError, "collective: takes 1 to %d tensors, got %zd", TPU_PJRT_MAX_DEVICES, n);
    return nullptr;
  }
  tpu_storage_t* storages[TPU_PJRT_MAX_DEVICES];
  tpu_view_t views[TPU_PJRT_MAX_DEVICES];
  for (Py_ssize_t i = 0; i < n; i++) {
    tpu_rt_input_t in;
    int r = read_tensor(PySequence_Fast_GET_ITEM(fast, i), &in);
    if (r <= 0) {
      Py_DECREF(fast);
      if (r == 0) PyErr_Format(g_not_tpu, "collective: tensor %zd is not a tpu tensor", i);
      return nullptr;
    }
    storages[i] = in.storage;
    views[i] = in.view;
  }
  tpu_storage_t* outs[TPU_PJRT_MAX_DEVICES];
  tpu_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = tpu_rt_collective(static_cast<tpu_rt_collective_t>(kind), reduce, storages, views, static_cast<int>(n), outs);
  Py_END_ALLOW_THREADS
  Py_DECREF(fast);  // the tensors kept their storages alive until here
  if (st) return tpu_py_raise_status(st);
  int64_t dims[TPU_MAX_RANK];
  int rank = views[0].rank;
  for (int d = 0; d < rank; d++) dims[d] = views[0].sizes[d];
  if (kind == TPU_RT_ALL_GATHER) dims[0] *= n;
  if (kind == TPU_RT_REDUCE_SCATTER) dims[0] /= n;
  return guarded([&]() -> PyObject* {
    std::vector<at::Tensor> results;  // each takes its storage's reference
    for (Py_ssize_t i = 0; i < n; i++) results.push_back(make_tensor(outs[i], rank, dims, views[0].dtype));
    PyObject* list = PyList_New(n);
    for (Py_ssize_t i = 0; list && i < n; i++) PyList_SET_ITEM(list, i, THPVariable_Wrap(results[i]));
    return list;
  });
}

// op_random(rule, generator_or_None, device_index, inputs, ints=None, floats=None)
// -> list of new tpu tensors (the generator's state is input 0 and the
// advanced state, the rule's last output, stays with the generator).
PyObject* py_op_random(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 4 || nargs > 6) {
    PyErr_SetString(PyExc_TypeError, "op_random(rule, generator, device, inputs, ints=None, floats=None)");
    return nullptr;
  }
  return guarded([&]() -> PyObject* {
    const tpu_op_rule_t* rule = rule_arg(args[0]);
    if (!rule) return nullptr;
    long device = PyLong_AsLong(args[2]);
    if (device == -1 && PyErr_Occurred()) return nullptr;
    at::Generator gen;
    if (args[1] == Py_None) {
      gen = default_generator(static_cast<c10::DeviceIndex>(device));
    } else if (THPGenerator_Check(args[1])) {
      gen = reinterpret_cast<THPGenerator*>(args[1])->cdata;
      TORCH_CHECK(gen.device().type() == kTpu, "Expected a 'tpu' device type for generator but found '",
                  gen.device().type(), "'");
    } else {
      PyErr_SetString(PyExc_TypeError, "op_random: generator must be a torch.Generator or None");
      return nullptr;
    }
    tpu_rt_input_t in[TPU_OP_MAX_INPUTS];
    int nin = 0;
    if (read_inputs(args[3], in, 1, &nin) < 0) return nullptr;
    int64_t iv[kMaxInts];
    double fv[kMaxFloats];
    int ni, nf;
    if (read_attrs(nargs > 4 ? args[4] : nullptr, nargs > 5 ? args[5] : nullptr, iv, &ni, fv, &nf) < 0) return nullptr;
    tpu_op_attrs_t attrs = {ni, iv, nf, fv};
    tpu_rt_output_t out[TPU_OP_MAX_OUTPUTS];
    int nout = 0;
    run_random(rule, gen, in, nin, &attrs, out, &nout);
    return wrap_outputs(out, nout);
  });
}

// write(dst, src): dst[...] = src (a tpu tensor of dst's dtype, or a scalar input).
PyObject* py_write(PyObject*, PyObject* args) {
  PyObject *dst, *src;
  if (!PyArg_ParseTuple(args, "OO", &dst, &src)) return nullptr;
  tpu_rt_input_t d, s;
  int r = read_tensor(dst, &d);
  if (r <= 0) {
    if (r == 0) PyErr_SetString(g_not_tpu, "dst");
    return nullptr;
  }
  r = read_input(src, &s);
  if (r <= 0) {
    if (r == 0) PyErr_SetString(g_not_tpu, "src");
    return nullptr;
  }
  tpu_status_t st = tpu_rt_write(d.storage, &d.view, &s);
  if (st) return tpu_py_raise_status(st);
  Py_RETURN_NONE;
}

// to_host(tensor, address, nbytes): dense row-major copy of the view.
PyObject* py_to_host(PyObject*, PyObject* args) {
  PyObject* t;
  unsigned long long addr, nbytes;
  if (!PyArg_ParseTuple(args, "OKK", &t, &addr, &nbytes)) return nullptr;
  tpu_rt_input_t in;
  int r = read_tensor(t, &in);
  if (r <= 0) {
    if (r == 0) PyErr_SetString(g_not_tpu, "src");
    return nullptr;
  }
  tpu_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = tpu_rt_view_to_host(in.storage, &in.view, reinterpret_cast<void*>(static_cast<uintptr_t>(addr)),
                           static_cast<size_t>(nbytes));
  Py_END_ALLOW_THREADS
  if (st) return tpu_py_raise_status(st);
  Py_RETURN_NONE;
}

// from_host(address, shape, dtype_code, device, non_blocking=False) -> tensor.
// A non-blocking copy from pinned memory returns before the copy is done.
PyObject* py_from_host(PyObject*, PyObject* args) {
  unsigned long long addr;
  PyObject* shape;
  int code, device, non_blocking = 0;
  if (!PyArg_ParseTuple(args, "KOii|p", &addr, &shape, &code, &device, &non_blocking)) return nullptr;
  return guarded([&]() -> PyObject* {
    ensure_started();
    int64_t dims[TPU_MAX_RANK];
    PyObject* fast = PySequence_Fast(shape, "shape must be a sequence");
    if (!fast) return nullptr;
    Py_ssize_t rank = PySequence_Fast_GET_SIZE(fast);
    if (rank > TPU_MAX_RANK) {
      Py_DECREF(fast);
      PyErr_Format(PyExc_RuntimeError, "tensors of rank %zd are not supported by tpu (max %d)", rank, TPU_MAX_RANK);
      return nullptr;
    }
    for (Py_ssize_t i = 0; i < rank; i++) {
      dims[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
      if (dims[i] == -1 && PyErr_Occurred()) {
        Py_DECREF(fast);
        return nullptr;
      }
    }
    Py_DECREF(fast);
    if (!tpu_dtype_valid(code)) {
      PyErr_Format(PyExc_TypeError, "tpu: unsupported dtype code %d", code);
      return nullptr;
    }
    const void* data = reinterpret_cast<const void*>(static_cast<uintptr_t>(addr));
    tpu_storage_t* s = nullptr;
    if (non_blocking && is_pinned_ptr(data))
      s = upload_pinned(static_cast<c10::DeviceIndex>(device), static_cast<tpu_dtype_t>(code), dims,
                        static_cast<int>(rank), data);
    if (!s) {
      tpu_status_t st;
      Py_BEGIN_ALLOW_THREADS
      st = tpu_rt_storage_from_host(device, static_cast<tpu_dtype_t>(code), dims, static_cast<int>(rank), data, &s);
      Py_END_ALLOW_THREADS
      if (st) return tpu_py_raise_status(st);
    }
    return THPVariable_Wrap(make_tensor(s, static_cast<int>(rank), dims, static_cast<tpu_dtype_t>(code)));
  });
}

PyObject* py_is_tpu(PyObject*, PyObject* t) {
  tpu_rt_input_t in;
  int r = read_tensor(t, &in);
  if (r < 0) {
    PyErr_Clear();
    Py_RETURN_FALSE;
  }
  return PyBool_FromLong(r);
}

// storage_info(tensor) -> (engine storage id, value id or 0, nbytes): for tests.
PyObject* py_storage_info(PyObject*, PyObject* t) {
  tpu_rt_input_t in;
  int r = read_tensor(t, &in);
  if (r <= 0) {
    if (r == 0) PyErr_SetString(g_not_tpu, "not a tpu tensor");
    return nullptr;
  }
  return Py_BuildValue("(KKK)", (unsigned long long)(uintptr_t)in.storage,
                       (unsigned long long)(uintptr_t)tpu_storage_value_id(in.storage),
                       (unsigned long long)tpu_storage_nbytes(in.storage));
}

// memory_info(device) -> dict
PyObject* py_memory_info(PyObject*, PyObject* arg) {
  long device = PyLong_AsLong(arg);
  if (device == -1 && PyErr_Occurred()) return nullptr;
  return guarded([&]() -> PyObject* {
    ensure_started();
    check_device_index(static_cast<c10::DeviceIndex>(device));
    tpu_rt_memory_info_t mi;
    tpu_status_t st = tpu_rt_memory_info(static_cast<int>(device), &mi);
    if (st) return tpu_py_raise_status(st);
    const tpu_pjrt_memory_stats_t& m = mi.stats;
    return Py_BuildValue("{s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L}", "bytes_in_use",
                         (long long)m.bytes_in_use, "peak_bytes_in_use", (long long)m.peak_bytes_in_use,
                         "bytes_allocated", (long long)m.bytes_allocated, "bytes_freed", (long long)m.bytes_freed,
                         "num_buffers", (long long)m.num_buffers, "num_allocs", (long long)m.num_allocs, "num_frees",
                         (long long)m.num_frees, "plugin_bytes_in_use", (long long)m.plugin_bytes_in_use,
                         "plugin_bytes_limit", (long long)m.plugin_bytes_limit, "plugin_peak_bytes_in_use",
                         (long long)m.plugin_peak_bytes_in_use, "total_bytes", (long long)mi.total_bytes,
                         "free_bytes", (long long)mi.free_bytes, "limit_bytes", (long long)mi.limit_bytes,
                         "peak_num_buffers", (long long)m.peak_num_buffers);
  });
}

PyObject* py_set_memory_limit(PyObject*, PyObject* args) {
  int device;
  long long bytes;
  if (!PyArg_ParseTuple(args, "iL", &device, &bytes)) return nullptr;
  return guarded([&]() -> PyObject* {
    ensure_started();
    check_device_index(static_cast<c10::DeviceIndex>(device));
    tpu_status_t st = tpu_rt_set_memory_limit(device, bytes);
    if (st) return tpu_py_raise_status(st);
    Py_RETURN_NONE;
  });
}

// ---- devices, generators, streams ----------------------------------------------------------------

PyObject* py_device_count(PyObject*, PyObject*) {
  return guarded([&]() -> PyObject* { return PyLong_FromLong(device_count()); });
}

PyObject* py_get_device(PyObject*, PyObject*) { return PyLong_FromLong(current_device()); }

PyObject* py_set_device(PyObject*, PyObject* arg) {
  long i = PyLong_AsLong(arg);
  if (i == -1 && PyErr_Occurred()) return nullptr;
  return guarded([&]() -> PyObject* {
    check_device_index(static_cast<c10::DeviceIndex>(i));
    set_current_device(static_cast<c10::DeviceIndex>(i));
    Py_RETURN_NONE;
  });
}

// default_generator(index) -> the device's default torch.Generator
PyObject* py_default_generator(PyObject*, PyObject* arg) {
  long i = PyLong_AsLong(arg);
  if (i == -1 && PyErr_Occurred()) return nullptr;
  return guarded([&]() -> PyObject* { return THPGenerator_Wrap(default_generator(static_cast<c10::DeviceIndex>(i))); });
}

PyObject* py_register_hooks(PyObject*, PyObject*) {
  tpu_torch_register_hooks();
  Py_RETURN_NONE;
}

PyObject* py_started(PyObject*, PyObject*) { return PyBool_FromLong(started()); }

PyObject* py_ensure_started(PyObject*, PyObject*) {
  return guarded([&]() -> PyObject* {
    ensure_started();
    Py_RETURN_NONE;
  });
}

// ---- the C fast path of binary arithmetic -------------------------------------------------------
// A callable registered as the tpu kernel of add/sub/mul/div (.Tensor and
// .Scalar): both operands tpu tensors of one dtype, or a tpu tensor and a
// Python number of its kind, run the rule with no Python frame of ours;
// anything else (promotion, alpha != 1, CPU scalars, complex) calls the
// Python kernel it wraps.
struct FastBinary {
  PyObject_HEAD const tpu_op_rule_t* rule;
  PyObject* slow;
  int float_only;  // true division: integer operands promote, slow path
};

PyTypeObject* g_fast_type = nullptr;

PyObject* call_slow(PyObject* fn, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return PyObject_Vectorcall(fn, args, static_cast<size_t>(nargs), kwnames);
}

PyObject* fast_binary_call(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  auto* k = reinterpret_cast<FastBinary*>(self);
  bool fast = nargs == 2;
  if (fast && kwnames) {  // only alpha=1
    Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < nk && fast; i++) {
      PyObject* v = args[nargs + i];
      fast = PyLong_Check(v) && !PyBool_Check(v) && PyLong_AsLong(v) == 1;
    }
  }
  tpu_rt_input_t in[2];
  if (fast) {
    int r = read_tensor(args[0], &in[0]);
    if (r < 0) return nullptr;
    fast = r == 1 && in[0].view.dtype != TPU_PRED && !tpu_dtype_is_complex(in[0].view.dtype) &&
           (!k->float_only || tpu_dtype_is_float(in[0].view.dtype));
  }
  if (fast) {
    PyObject* o = args[1];
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
      in[1].scalar_f = static_cast<double>(v);
    } else {
      int r = read_tensor(o, &in[1]);
      if (r < 0) return nullptr;
      fast = r == 1 && in[1].view.dtype == in[0].view.dtype;
    }
  }
  if (!fast) return call_slow(k->slow, args, nargs, kwnames);
  int64_t code = in[0].view.dtype;
  tpu_op_attrs_t attrs = {1, &code, 0, nullptr};
  tpu_rt_output_t out[TPU_OP_MAX_OUTPUTS];
  int nout = 0;
  tpu_status_t st = tpu_rt_op(k->rule, in, 2, &attrs, out, &nout);
  if (st) {
    if (tpu_status_code(st) == TPU_UNIMPLEMENTED) {  // the one fallback behaviour: the slow kernel decides
      tpu_status_free(st);
      return call_slow(k->slow, args, nargs, kwnames);
    }
    return tpu_py_raise_status(st);
  }
  for (int o = 1; o < nout; o++) tpu_storage_release(out[o].storage);
  return wrap(&out[0]);
}

void fast_dealloc(PyObject* self) {
  Py_XDECREF(reinterpret_cast<FastBinary*>(self)->slow);
  PyTypeObject* tp = Py_TYPE(self);
  tp->tp_free(self);
  Py_DECREF(tp);
}

PyMethodDef fast_binary_def = {"tpu_fast_binary", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(fast_binary_call)),
                               METH_FASTCALL | METH_KEYWORDS, "C fast path of a binary tpu kernel"};

// fast_binary(rule, slow_kernel, float_only=False) -> callable
PyObject* py_fast_binary(PyObject*, PyObject* args) {
  const char* name;
  PyObject* slow;
  int float_only = 0;
  if (!PyArg_ParseTuple(args, "sO|p", &name, &slow, &float_only)) return nullptr;
  const tpu_op_rule_t* rule = tpu_op_rule_find(name);
  if (!rule) {
    PyErr_Format(PyExc_ValueError, "no rule %s", name);
    return nullptr;
  }
  auto* k = PyObject_New(FastBinary, g_fast_type);
  if (!k) return nullptr;
  k->rule = rule;
  k->slow = Py_NewRef(slow);
  k->float_only = float_only;
  PyObject* fn = PyCFunction_NewEx(&fast_binary_def, reinterpret_cast<PyObject*>(k), nullptr);
  Py_DECREF(k);
  return fn;
}

PyType_Slot fast_slots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(fast_dealloc)},
    {Py_tp_doc, const_cast<char*>("state of a C fast-path kernel")},
    {0, nullptr},
};
PyType_Spec fast_spec = {"torch_tpu._C.FastBinary", sizeof(FastBinary), 0, Py_TPFLAGS_DEFAULT, fast_slots};

#define FASTCALL(f) reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(f))

PyMethodDef torch_methods[] = {
    {"op", FASTCALL(py_op), METH_FASTCALL, "op(rule, inputs, ints, floats, device) -> [tensors]"},
    {"op_random", FASTCALL(py_op_random), METH_FASTCALL,
     "op_random(rule, generator, device, inputs, ints, floats) -> [tensors]"},
    {"write", py_write, METH_VARARGS, "write(dst, src): dst[...] = src through the view machinery"},
    {"to_host", py_to_host, METH_VARARGS, "to_host(tensor, address, nbytes)"},
    {"to_device", py_to_device, METH_VARARGS, "to_device(tensor, device) -> copy on another tpu device"},
    {"collective", py_collective, METH_VARARGS, "collective(kind, reduce, tensors) -> a result per device"},
    {"from_host", py_from_host, METH_VARARGS, "from_host(address, shape, dtype_code, device, non_blocking) -> tensor"},
    {"is_tpu", py_is_tpu, METH_O, "is this a tpu tensor backed by the engine"},
    {"storage_info", py_storage_info, METH_O, "(storage id, value id, nbytes) of a tpu tensor's storage"},
    {"memory_info", py_memory_info, METH_O, "memory_info(device) -> dict"},
    {"set_memory_limit", py_set_memory_limit, METH_VARARGS, "set_memory_limit(device, bytes)"},
    {"fast_binary", py_fast_binary, METH_VARARGS, "fast_binary(rule, slow_kernel, float_only=False) -> C kernel"},
    {"pow_scalar_code", tpu_torch_pow_scalar_code, METH_VARARGS,
     "pow_scalar_code(tensor, exponent): the pow_scalar rule's exponent code, 0 for the pow rule"},
    {"register_fast_kernel", tpu_torch_register_fast_kernel, METH_VARARGS,
     "register_fast_kernel(overload, python_kernel): the C++ kernel of an elementwise overload (arith.cpp)"},
    {"_configure", tpu_torch_configure, METH_VARARGS, "_configure(plugin_path, error, device_count_hint)"},
    {"_set_starter", tpu_torch_set_starter, METH_O, "the callable that starts the engine on first use"},
    {"_register_hooks", py_register_hooks, METH_NOARGS, "registers the PrivateUse1 hooks"},
    {"device_count", py_device_count, METH_NOARGS, "tpu devices (without starting the CPU plugin)"},
    {"get_device", py_get_device, METH_NOARGS, "this thread's current tpu device"},
    {"set_device", py_set_device, METH_O, "sets this thread's current tpu device"},
    {"default_generator", py_default_generator, METH_O, "default_generator(index) -> torch.Generator"},
    {"started", py_started, METH_NOARGS, "has the engine started"},
    {"ensure_started", py_ensure_started, METH_NOARGS, "starts the engine (plugin + kernels) if needed"},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace
}  // namespace torch_tpu

PyMODINIT_FUNC PyInit__C(void) {
  PyObject* m = tpu_py_engine_module();
  if (!m) return nullptr;
  if (PyModule_AddFunctions(m, torch_tpu::torch_methods) < 0) return nullptr;
  if (PyModule_AddFunctions(m, torch_tpu::memory_history_methods) < 0) return nullptr;
  torch_tpu::g_fast_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&torch_tpu::fast_spec));
  if (!torch_tpu::g_fast_type) return nullptr;
  torch_tpu::g_not_tpu = PyObject_GetAttrString(m, "NotTpuError");
  torch_tpu::g_unsupported = PyObject_GetAttrString(m, "Unsupported");
  if (!torch_tpu::g_not_tpu || !torch_tpu::g_unsupported) return nullptr;
  PyObject* torch_mod = PyImport_ImportModule("torch");
  PyObject* oom = torch_mod ? PyObject_GetAttrString(torch_mod, "OutOfMemoryError") : nullptr;
  Py_XDECREF(torch_mod);
  if (!oom) return nullptr;
  tpu_py_set_oom_error(oom);  // kept for the process
  if (torch_tpu::c10d_register(m) < 0) return nullptr;
  return m;
}
