// core.cpp - lazy start, status -> exception, dtype codes, current device.
#include <Python.h>

#include <atomic>
#include <string>

#include <c10/util/Exception.h>
#include <torch/csrc/Exceptions.h>

#include "torch/memory_history.h"
#include "torch/tpu_torch.h"

namespace torch_tpu {

// ---- lazy start ---------------------------------------------------------------
// `import torch` must not load a plugin: torch_tpu computes at import only
// where the plugin is (a few stat calls), and the engine starts, with the
// kernels registered, on the first thing that needs the device.  The start
// itself is Python (plugin discovery, configuration from the environment,
// kernel registration): the callable handed over by set_starter().

static std::atomic<bool> g_started{false};
static PyObject* g_starter = nullptr;  // torch_tpu._start
static std::string g_plugin;           // "" = none found
static std::string g_plugin_error;     // why none was found
static int g_device_count_hint = -1;   // before start; -1 = unknown

bool started() {
  if (g_started.load(std::memory_order_acquire)) return true;
  if (tpu_rt_initialized()) {
    g_started.store(true, std::memory_order_release);
    return true;
  }
  return false;
}

bool plugin_available() { return started() || !g_plugin.empty(); }

void ensure_started() {
  if (started()) {
    TORCH_CHECK(!tpu_rt_forked(), TPU_FORKED_MSG);
    return;
  }
  TORCH_CHECK(g_starter != nullptr, "torch_tpu is not imported: `import torch_tpu` starts the tpu device");
  // The GIL serialises starts (the starter is idempotent); no lock of ours
  // is held while waiting for it.
  PyGILState_STATE gil = PyGILState_Ensure();
  if (started()) {
    PyGILState_Release(gil);
    return;
  }
  PyObject* r = PyObject_CallNoArgs(g_starter);
  if (!r) {
    // keep the Python exception (its type and message) for the caller
    python_error err;
    err.persist();
    PyGILState_Release(gil);
    throw err;
  }
  Py_DECREF(r);
  PyGILState_Release(gil);
  TORCH_CHECK(tpu_rt_initialized(), "torch_tpu: the tpu engine did not start");
  g_started.store(true, std::memory_order_release);
}

c10::DeviceIndex device_count() {
  if (started()) return static_cast<c10::DeviceIndex>(tpu_rt_device_count());
  if (g_plugin.empty()) return 0;
  if (g_device_count_hint >= 0) return static_cast<c10::DeviceIndex>(g_device_count_hint);
  try {
    ensure_started();
  } catch (...) {
    return 0;
  }
  return static_cast<c10::DeviceIndex>(tpu_rt_device_count());
}

void check_device_index(c10::DeviceIndex index) {
  c10::DeviceIndex n = device_count();
  TORCH_CHECK(index >= 0 && index < n, "Invalid device index tpu:", static_cast<int>(index), " (", static_cast<int>(n),
              " tpu device", n == 1 ? "" : "s", " available)");
}

// ---- status -> exception ------------------------------------------------------------

void throw_status(tpu_status_t st) {
  tpu_code_t code = tpu_status_code(st);
  std::string msg = tpu_status_message(st);
  tpu_status_free(st);
  switch (code) {
    case TPU_OUT_OF_RANGE:
      TORCH_CHECK_INDEX(false, msg);
    case TPU_RESOURCE_EXHAUSTED:
      if (g_memory_history_on.load(std::memory_order_relaxed)) msg += memory_history_oom_note(msg.c_str());
      TORCH_CHECK_WITH(OutOfMemoryError, false, msg);
    case TPU_UNIMPLEMENTED:
      TORCH_CHECK_NOT_IMPLEMENTED(false, msg);
    default:
      TORCH_CHECK(false, msg);
  }
}

// ---- dtypes (the engine's codes are PJRT's element types) -------------------------------

tpu_dtype_t dtype_code(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Bool: return TPU_PRED;
    case c10::ScalarType::Char: return TPU_S8;
    case c10::ScalarType::Short: return TPU_S16;
    case c10::ScalarType::Int: return TPU_S32;
    case c10::ScalarType::Long: return TPU_S64;
    case c10::ScalarType::Byte: return TPU_U8;
    case c10::ScalarType::UInt16: return TPU_U16;
    case c10::ScalarType::UInt32: return TPU_U32;
    case c10::ScalarType::UInt64: return TPU_U64;
    case c10::ScalarType::Half: return TPU_F16;
    case c10::ScalarType::Float: return TPU_F32;
    case c10::ScalarType::Double: return TPU_F64;
    case c10::ScalarType::BFloat16: return TPU_BF16;
    case c10::ScalarType::ComplexFloat: return TPU_C64;
    case c10::ScalarType::ComplexDouble: return TPU_C128;
    case c10::ScalarType::Float8_e5m2: return TPU_F8E5M2;
    case c10::ScalarType::Float8_e4m3fn: return TPU_F8E4M3FN;
    case c10::ScalarType::Float8_e5m2fnuz: return TPU_F8E5M2FNUZ;
    case c10::ScalarType::Float8_e4m3fnuz: return TPU_F8E4M3FNUZ;
    default: return TPU_DTYPE_INVALID;
  }
}

std::string dtype_name(c10::ScalarType t) { return "torch." + std::string(c10::getDtypeNames(t).first); }

c10::ScalarType scalar_type(tpu_dtype_t code) {
  switch (code) {
    case TPU_PRED: return c10::ScalarType::Bool;
    case TPU_S8: return c10::ScalarType::Char;
    case TPU_S16: return c10::ScalarType::Short;
    case TPU_S32: return c10::ScalarType::Int;
    case TPU_S64: return c10::ScalarType::Long;
    case TPU_U8: return c10::ScalarType::Byte;
    case TPU_U16: return c10::ScalarType::UInt16;
    case TPU_U32: return c10::ScalarType::UInt32;
    case TPU_U64: return c10::ScalarType::UInt64;
    case TPU_F16: return c10::ScalarType::Half;
    case TPU_F32: return c10::ScalarType::Float;
    case TPU_F64: return c10::ScalarType::Double;
    case TPU_BF16: return c10::ScalarType::BFloat16;
    case TPU_C64: return c10::ScalarType::ComplexFloat;
    case TPU_C128: return c10::ScalarType::ComplexDouble;
    case TPU_F8E5M2: return c10::ScalarType::Float8_e5m2;
    case TPU_F8E4M3FN: return c10::ScalarType::Float8_e4m3fn;
    case TPU_F8E5M2FNUZ: return c10::ScalarType::Float8_e5m2fnuz;
    case TPU_F8E4M3FNUZ: return c10::ScalarType::Float8_e4m3fnuz;
    default: TORCH_CHECK(false, "tpu: no torch dtype for engine dtype ", static_cast<int>(code));
  }
}

// ---- current device (per thread, as CUDA's) -----------------------------------------------

static thread_local c10::DeviceIndex t_device = 0;

c10::DeviceIndex current_device() { return t_device; }
void set_current_device(c10::DeviceIndex index) { t_device = index; }

}  // namespace torch_tpu

// ---- configuration from Python ----------------------------------------------------------------

extern "C" {

// _configure(plugin_path or None, error_message, device_count_hint)
PyObject* tpu_torch_configure(PyObject*, PyObject* args) {
  const char* plugin = nullptr;
  const char* error = nullptr;
  int hint = -1;
  if (!PyArg_ParseTuple(args, "zzi", &plugin, &error, &hint)) return nullptr;
  torch_tpu::g_plugin = plugin ? plugin : "";
  torch_tpu::g_plugin_error = error ? error : "";
  torch_tpu::g_device_count_hint = hint;
  Py_RETURN_NONE;
}

PyObject* tpu_torch_set_starter(PyObject*, PyObject* fn) {
  Py_XSETREF(torch_tpu::g_starter, Py_NewRef(fn));
  Py_RETURN_NONE;
}

}  // extern "C"
