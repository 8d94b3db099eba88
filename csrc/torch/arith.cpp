// arith.cpp - the elementwise hot path as C++ kernels: add, sub, mul, div,
// pow (and their in-place forms are Python's) and the one-input float ops
// (exp, log, rsqrt, tanh, neg, relu, silu, ...; TPU_FAST_UNARY below): the
// dispatcher calls these with the GIL released and they run no Python.
// Each takes the common cases itself - tpu tensors, Python numbers and 0-d
// CPU tensors of real dtypes, with PyTorch's type promotion
// (at::result_type); a unary op only floating tpu tensors - and hands
// everything else (complex, integer results of pow and the float ops, bool
// subtraction, alpha checks, other devices) to the Python kernel of the same
// overload, which owns the errors and the CPU fallback.  Python registers
// the pairs at start (register_fast_kernel).
#include <Python.h>

#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include <ATen/core/Tensor.h>
#include <ATen/ops/result_type.h>
#include <c10/core/Scalar.h>
#include <c10/util/Exception.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/library.h>

#include "torch/tpu_torch.h"

namespace torch_tpu {
namespace {

enum class Op { kAdd, kSub, kMul, kDiv, kPow };

const char* rule_name(Op op) {
  switch (op) {
    case Op::kAdd: return "add";
    case Op::kSub: return "sub";
    case Op::kMul: return "mul";
    case Op::kDiv: return "div";
    case Op::kPow: return "pow";
  }
  return "?";
}

const tpu_op_rule_t* rule_of(Op op) {
  static const tpu_op_rule_t* rules[5];
  auto i = static_cast<int>(op);
  if (!rules[i]) rules[i] = tpu_op_rule_find(rule_name(op));
  return rules[i];
}

// The engine dtype PyTorch computes a Scalar coefficient in for dtype dt.
tpu_dtype_t compute_code(c10::ScalarType dt) {
  if (dt == c10::ScalarType::Double) return TPU_F64;
  if (c10::isFloatingType(dt)) return TPU_F32;
  if (dt == c10::ScalarType::Bool) return TPU_PRED;
  return TPU_S64;
}

// A number as a 0-d engine input of dtype code.
void scalar_input(const c10::Scalar& s, tpu_dtype_t code, tpu_rt_input_t* in) {
  memset(in, 0, sizeof(*in));
  in->scalar_dtype = code;
  if (tpu_dtype_is_float(code)) {
    in->scalar_f = s.toDouble();
    in->scalar_i = static_cast<int64_t>(in->scalar_f);
  } else if (code == TPU_PRED) {
    in->scalar_i = s.toBool();
    in->scalar_f = static_cast<double>(in->scalar_i);
  } else {
    in->scalar_i = s.isFloatingPoint() ? static_cast<int64_t>(s.toDouble()) : s.toLong();
    in->scalar_f = static_cast<double>(in->scalar_i);
  }
}

// A tensor operand: a tpu tensor's view, or a 0-d CPU tensor as a number.
bool tensor_input(const at::Tensor& t, tpu_dtype_t code, tpu_rt_input_t* in) {
  memset(in, 0, sizeof(*in));
  if (t.device().type() == kTpu) {
    c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    if (impl->dim() > TPU_MAX_RANK || t.is_conj() || t.is_neg()) return false;
    int64_t offset = 0;
    tpu_storage_t* s = tensor_storage(impl, &offset);
    tpu_dtype_t own = dtype_code(impl->dtype().toScalarType());
    if (!s || own == TPU_DTYPE_INVALID) return false;
    in->storage = s;
    in->view.dtype = own;
    in->view.rank = static_cast<int>(impl->dim());
    c10::IntArrayRef sizes = impl->sizes(), strides = impl->strides();
    for (int64_t d = 0; d < impl->dim(); d++) {
      in->view.sizes[d] = sizes[d];
      in->view.strides[d] = strides[d];
    }
    in->view.offset = offset;
    return true;
  }
  if (t.device().is_cpu() && t.dim() == 0 && !t.is_complex()) {
    scalar_input(t.item(), code, in);
    return true;
  }
  return false;
}

// Result dtype and whether the fast path takes it.
std::optional<c10::ScalarType> result_dtype(Op op, c10::ScalarType dt) {
  if (c10::isComplexType(dt) || dtype_code(dt) == TPU_DTYPE_INVALID) return std::nullopt;
  if (op == Op::kDiv && !c10::isFloatingType(dt)) dt = c10::typeMetaToScalarType(c10::get_default_dtype());
  if (op == Op::kSub && dt == c10::ScalarType::Bool) return std::nullopt;  // the Python kernel raises
  if (op == Op::kPow && !c10::isFloatingType(dt)) return std::nullopt;    // integer powers: Python's checks
  return dt;
}

bool alpha_is_one(const c10::Scalar& alpha) {
  return !alpha.isComplex() && !alpha.isBoolean() && alpha.toDouble() == 1.0;
}

// nullopt: not a case the fast path takes.
std::optional<at::Tensor> run_fast(Op op, const at::Tensor& self, const at::Tensor* other_t, const c10::Scalar* other_s,
                                   const c10::Scalar& alpha) {
  if (!started()) return std::nullopt;
  if (op == Op::kSub && (self.scalar_type() == c10::ScalarType::Bool ||
                         (other_t && other_t->scalar_type() == c10::ScalarType::Bool) ||
                         (other_s && other_s->isBoolean())))
    return std::nullopt;  // any bool operand: the Python kernel raises, as CPU does
  c10::ScalarType dt0 = other_t ? at::result_type(self, *other_t) : at::result_type(self, *other_s);
  auto dt = result_dtype(op, dt0);
  if (!dt) return std::nullopt;
  bool one = alpha_is_one(alpha);
  if (!one) {
    // alpha checks (bool / float alpha on integers) belong to the Python kernel
    if (alpha.isBoolean() || alpha.isComplex()) return std::nullopt;
    if (alpha.isFloatingPoint() && !c10::isFloatingType(*dt)) return std::nullopt;
  }
  tpu_dtype_t code = dtype_code(*dt);
  tpu_rt_input_t in[3];
  if (!tensor_input(self, code, &in[0])) return std::nullopt;
  if (other_t) {
    if (!tensor_input(*other_t, code, &in[1])) return std::nullopt;
  } else {
    if (other_s->isComplex()) return std::nullopt;
    scalar_input(*other_s, code, &in[1]);
  }
  int nin = 2;
  if (!one) scalar_input(alpha, compute_code(*dt), &in[nin++]);
  int64_t attr = code;
  tpu_op_attrs_t attrs = {1, &attr, 0, nullptr};
  tpu_rt_output_t out[TPU_OP_MAX_OUTPUTS];
  int nout = 0;
  tpu_status_t st = tpu_rt_op(rule_of(op), in, nin, &attrs, out, &nout);
  if (st) {
    if (tpu_status_code(st) == TPU_UNIMPLEMENTED) {  // the Python kernel decides (CPU fallback)
      tpu_status_free(st);
      return std::nullopt;
    }
    throw_status(st);
  }
  for (int o = 1; o < nout; o++) tpu_storage_release(out[o].storage);
  return make_tensor(out[0].storage, out[0].type.rank, out[0].type.dims, out[0].type.dtype);
}

// ---- the Python kernels the fast path hands over to ----------------------------------------
std::mutex g_slow_lock;
std::unordered_map<std::string, PyObject*> g_slow;  // overload name -> Python kernel

PyObject* slow_kernel(const char* name) {
  std::lock_guard<std::mutex> g(g_slow_lock);
  auto it = g_slow.find(name);
  TORCH_CHECK(it != g_slow.end(), "tpu: no Python kernel registered for ", name);
  return it->second;
}

PyObject* scalar_to_py(const c10::Scalar& s) {
  if (s.isBoolean()) return PyBool_FromLong(s.toBool());
  if (s.isIntegral(false)) return PyLong_FromLongLong(s.toLong());
  if (s.isComplex()) {
    auto c = s.toComplexDouble();
    return PyComplex_FromDoubles(c.real(), c.imag());
  }
  return PyFloat_FromDouble(s.toDouble());
}

// Calls the Python kernel of `name` with args (a new reference, or NULL
// after a failed build) and kwargs; raises its exception as PyTorch's.
at::Tensor call_python(const char* name, PyObject* args, PyObject* kwargs) {
  PyObject* fn = slow_kernel(name);
  PyObject* r = args ? PyObject_Call(fn, args, kwargs) : nullptr;
  Py_XDECREF(args);
  Py_XDECREF(kwargs);
  if (!r || !THPVariable_Check(r)) {
    if (r) {
      Py_DECREF(r);
      PyErr_Format(PyExc_TypeError, "tpu: the kernel of %s returned a non-tensor", name);
    }
    python_error err;
    err.persist();
    throw err;
  }
  at::Tensor out = THPVariable_Unpack(r);
  Py_DECREF(r);
  return out;
}

struct Gil {
  PyGILState_STATE s = PyGILState_Ensure();
  ~Gil() { PyGILState_Release(s); }
};

at::Tensor call_slow(const char* name, const at::Tensor& self, const at::Tensor* other_t, const c10::Scalar* other_s,
                     const c10::Scalar* alpha) {
  Gil gil;
  PyObject* a = THPVariable_Wrap(self);
  PyObject* b = other_t ? THPVariable_Wrap(*other_t) : scalar_to_py(*other_s);
  PyObject* args = (a && b) ? PyTuple_Pack(2, a, b) : nullptr;
  Py_XDECREF(a);
  Py_XDECREF(b);
  PyObject* kwargs = nullptr;
  if (args && alpha && !alpha_is_one(*alpha)) {
    kwargs = PyDict_New();
    PyObject* al = scalar_to_py(*alpha);
    if (!kwargs || !al || PyDict_SetItemString(kwargs, "alpha", al) < 0) {
      Py_XDECREF(al);
      Py_CLEAR(kwargs);
      Py_CLEAR(args);
    } else {
      Py_DECREF(al);
    }
  }
  return call_python(name, args, kwargs);
}

at::Tensor call_slow_unary(const char* name, const at::Tensor& self) {
  Gil gil;
  PyObject* a = THPVariable_Wrap(self);
  PyObject* args = a ? PyTuple_Pack(1, a) : nullptr;
  Py_XDECREF(a);
  return call_python(name, args, nullptr);
}

// A one-input float op (attrs [dtype], or [dtype, extra] with extra >= 0): a
// floating tpu tensor in, the same dtype out; nullopt for every other case.
std::optional<at::Tensor> run_unary(const char* rule_name, const tpu_op_rule_t** rule, const at::Tensor& self,
                                    int64_t extra = -1) {
  if (!started() || self.device().type() != kTpu || !c10::isFloatingType(self.scalar_type())) return std::nullopt;
  tpu_dtype_t code = dtype_code(self.scalar_type());
  tpu_rt_input_t in;
  if (code == TPU_DTYPE_INVALID || !tensor_input(self, code, &in)) return std::nullopt;
  if (!*rule) *rule = tpu_op_rule_find(rule_name);
  int64_t attr[2] = {code, extra};
  tpu_op_attrs_t attrs = {extra >= 0 ? 2 : 1, attr, 0, nullptr};
  tpu_rt_output_t out[TPU_OP_MAX_OUTPUTS];
  int nout = 0;
  tpu_status_t st = tpu_rt_op(*rule, &in, 1, &attrs, out, &nout);
  if (st) {
    if (tpu_status_code(st) == TPU_UNIMPLEMENTED) {
      tpu_status_free(st);
      return std::nullopt;
    }
    throw_status(st);
  }
  for (int o = 1; o < nout; o++) tpu_storage_release(out[o].storage);
  return make_tensor(out[0].storage, out[0].type.rank, out[0].type.dims, out[0].type.dtype);
}

// ---- the kernels --------------------------------------------------------------------------------
template <Op op>
at::Tensor binary_tensor(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha, const char* name) {
  if (auto r = run_fast(op, self, &other, nullptr, alpha)) return *r;
  return call_slow(name, self, &other, nullptr, &alpha);
}

template <Op op>
at::Tensor binary_scalar(const at::Tensor& self, const c10::Scalar& other, const c10::Scalar& alpha, const char* name) {
  if (auto r = run_fast(op, self, nullptr, &other, alpha)) return *r;
  return call_slow(name, self, nullptr, &other, &alpha);
}

at::Tensor add_tensor(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {
  return binary_tensor<Op::kAdd>(a, b, alpha, "add.Tensor");
}
at::Tensor add_scalar(const at::Tensor& a, const c10::Scalar& b, const c10::Scalar& alpha) {
  return binary_scalar<Op::kAdd>(a, b, alpha, "add.Scalar");
}
at::Tensor sub_tensor(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {
  return binary_tensor<Op::kSub>(a, b, alpha, "sub.Tensor");
}
at::Tensor sub_scalar(const at::Tensor& a, const c10::Scalar& b, const c10::Scalar& alpha) {
  return binary_scalar<Op::kSub>(a, b, alpha, "sub.Scalar");
}
at::Tensor mul_tensor(const at::Tensor& a, const at::Tensor& b) {
  return binary_tensor<Op::kMul>(a, b, c10::Scalar(1), "mul.Tensor");
}
at::Tensor mul_scalar(const at::Tensor& a, const c10::Scalar& b) {
  return binary_scalar<Op::kMul>(a, b, c10::Scalar(1), "mul.Scalar");
}
at::Tensor div_tensor(const at::Tensor& a, const at::Tensor& b) {
  return binary_tensor<Op::kDiv>(a, b, c10::Scalar(1), "div.Tensor");
}
at::Tensor div_scalar(const at::Tensor& a, const c10::Scalar& b) {
  return binary_scalar<Op::kDiv>(a, b, c10::Scalar(1), "div.Scalar");
}
at::Tensor pow_tensor_tensor(const at::Tensor& a, const at::Tensor& b) {
  return binary_tensor<Op::kPow>(a, b, c10::Scalar(1), "pow.Tensor_Tensor");
}
// The exponents PyTorch's CPU kernel computes without std::pow, as the
// pow_scalar rule's codes (0: none); the exponent is then part of the
// program (x ** 2 a multiply) instead of a runtime scalar.
int pow_code(const at::Tensor& a, const c10::Scalar& b) {
  if (b.isComplex() || b.isBoolean() || !c10::isFloatingType(a.scalar_type())) return 0;
  double e = b.toDouble();
  int k = e == 0.5 ? 1 : e == -0.5 ? 2 : e == -1.0 ? 3 : e == 2.0 ? 4 : e == 3.0 ? 5 : e == -2.0 ? 6 : 0;
  // float16 takes std::pow for 0.5, -0.5 and -1 on CPU (pow(-0.0, -0.5) is
  // +inf, rsqrt's -inf)
  return a.scalar_type() == c10::ScalarType::Half && k <= 3 ? 0 : k;
}

at::Tensor pow_tensor_scalar(const at::Tensor& a, const c10::Scalar& b) {
  if (int k = pow_code(a, b)) {
    static const tpu_op_rule_t* rule = nullptr;
    if (auto r = run_unary("pow_scalar", &rule, a, k)) return *r;
  }
  return binary_scalar<Op::kPow>(a, b, c10::Scalar(1), "pow.Tensor_Scalar");
}

// The one-input float ops: each aten overload's name is its rule's.
#define TPU_FAST_UNARY(X)                                                                                           \
  X(exp) X(exp2) X(expm1) X(log) X(log2) X(log10) X(log1p) X(sqrt) X(rsqrt) X(reciprocal) X(sigmoid) X(tanh)      \
  X(sin) X(cos) X(tan) X(asin) X(acos) X(atan) X(sinh) X(cosh) X(asinh) X(acosh) X(atanh) X(erf) X(erfc)         \
  X(erfinv) X(floor) X(ceil) X(trunc) X(frac) X(sign) X(abs) X(neg) X(relu) X(silu) X(mish) X(hardsigmoid)       \
  X(hardswish)

#define TPU_UNARY_KERNEL(name)                                        \
  at::Tensor unary_##name(const at::Tensor& self) {                   \
    static const tpu_op_rule_t* rule = nullptr;                       \
    if (auto r = run_unary(#name, &rule, self)) return *r;            \
    return call_slow_unary(#name, self);                              \
  }
TPU_FAST_UNARY(TPU_UNARY_KERNEL)
#undef TPU_UNARY_KERNEL

torch::Library* g_lib = nullptr;

}  // namespace
}  // namespace torch_tpu

// pow_scalar_code(tensor, exponent): the pow_scalar rule's code for
// tensor ** exponent (0: the pow rule); the Python kernels (in-place, out=,
// foreach) ask here, so every form of pow computes as torch.pow does.
extern "C" PyObject* tpu_torch_pow_scalar_code(PyObject*, PyObject* args) {
  PyObject *t, *e;
  if (!PyArg_ParseTuple(args, "OO", &t, &e)) return nullptr;
  if (!THPVariable_Check(t) || PyBool_Check(e) || !(PyLong_Check(e) || PyFloat_Check(e))) return PyLong_FromLong(0);
  double v = PyFloat_Check(e) ? PyFloat_AsDouble(e) : PyLong_AsDouble(e);
  if (v == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();  // an int too large for a double: no special exponent
    return PyLong_FromLong(0);
  }
  return PyLong_FromLong(torch_tpu::pow_code(THPVariable_Unpack(t), c10::Scalar(v)));
}

// register_fast_kernel(overload, python_kernel): registers the C++ kernel of
// an overload ("add.Tensor" ...) with the Python kernel it hands over to.
extern "C" PyObject* tpu_torch_register_fast_kernel(PyObject*, PyObject* args) {
  const char* name;
  PyObject* fn;
  if (!PyArg_ParseTuple(args, "sO", &name, &fn)) return nullptr;
  using namespace torch_tpu;
  try {
    std::string n(name);
    {
      std::lock_guard<std::mutex> g(g_slow_lock);
      auto it = g_slow.find(n);
      if (it != g_slow.end()) {
        Py_DECREF(it->second);
        it->second = Py_NewRef(fn);
        Py_RETURN_NONE;  // already registered: the handover changes only
      }
      g_slow[n] = Py_NewRef(fn);
    }
    if (!g_lib)
      g_lib = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    if (n == "add.Tensor") g_lib->impl("add.Tensor", TORCH_FN(add_tensor));
    else if (n == "add.Scalar") g_lib->impl("add.Scalar", TORCH_FN(add_scalar));
    else if (n == "sub.Tensor") g_lib->impl("sub.Tensor", TORCH_FN(sub_tensor));
    else if (n == "sub.Scalar") g_lib->impl("sub.Scalar", TORCH_FN(sub_scalar));
    else if (n == "mul.Tensor") g_lib->impl("mul.Tensor", TORCH_FN(mul_tensor));
    else if (n == "mul.Scalar") g_lib->impl("mul.Scalar", TORCH_FN(mul_scalar));
    else if (n == "div.Tensor") g_lib->impl("div.Tensor", TORCH_FN(div_tensor));
    else if (n == "div.Scalar") g_lib->impl("div.Scalar", TORCH_FN(div_scalar));
    else if (n == "pow.Tensor_Tensor") g_lib->impl("pow.Tensor_Tensor", TORCH_FN(pow_tensor_tensor));
    else if (n == "pow.Tensor_Scalar") g_lib->impl("pow.Tensor_Scalar", TORCH_FN(pow_tensor_scalar));
#define TPU_UNARY_REGISTER(name) else if (n == #name) g_lib->impl(#name, TORCH_FN(unary_##name));
    TPU_FAST_UNARY(TPU_UNARY_REGISTER)
#undef TPU_UNARY_REGISTER
    else {
      std::lock_guard<std::mutex> g(g_slow_lock);
      Py_DECREF(g_slow[n]);
      g_slow.erase(n);
      PyErr_Format(PyExc_ValueError, "tpu: no C++ kernel for %s", name);
      return nullptr;
    }
  } catch (...) {
    torch::translate_exception_to_python(std::current_exception());
    return nullptr;
  }
  Py_RETURN_NONE;
}
