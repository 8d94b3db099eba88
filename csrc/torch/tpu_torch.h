// tpu_torch.h - the thin C++ layer between PyTorch's device interfaces and
// the C engine (internal to csrc/torch).
//
// PyTorch asks a device backend for C++ objects: an at::Allocator (and a
// c10::DeviceAllocator for torch.accelerator's memory API), the
// PrivateUse1 hooks (generators, pinned memory, storage resize), a
// DeviceGuardImplInterface (device index, streams, events), a Generator.
// Each lives in one file here and delegates every decision to the engine
// (csrc/runtime), which stays C11 and knows nothing of PyTorch.
//
//   core.cpp       lazy start, status -> exception, dtypes, current device
//   storage.cpp    tpu storages as DataPtrs, the allocator, memory stats,
//                  storage resize, the pinned host allocator
//   device.cpp     PrivateUse1 hooks, the device guard, streams and events
//   generator.cpp  the device Generator over the engine's RNG state
//   kernels.cpp    ATen kernels written in C++ (factories, fast arithmetic)
//   python.cpp     the Python entry points of torch_tpu._C that touch tensors
//
// A tpu tensor is an ordinary TensorImpl (PrivateUse1 key) whose storage's
// DataPtr carries the engine storage (tpu_storage_t) as its context: the
// data pointer itself is a unique fake device address (never dereferenced;
// distinct storages never overlap, as safetensors and DDP assume).
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/core/Storage.h>

#include <ATen/core/Tensor.h>

extern "C" {
#include "runtime/event.h"
#include "runtime/runtime.h"
}

namespace torch_tpu {

constexpr c10::DeviceType kTpu = c10::DeviceType::PrivateUse1;

// ---- core.cpp ---------------------------------------------------------------
// Starts the engine (plugin + kernels) on first use; throws naming what to
// set or install when no plugin can be loaded.
void ensure_started();
bool started();
// Plugin found at import (without loading it).
bool plugin_available();
// Devices: the client's count once started; before that the count known
// from the configuration (the CPU plugin's), else it starts the engine.
c10::DeviceIndex device_count();
void check_device_index(c10::DeviceIndex index);

// A status -> the c10 exception PyTorch raises for the same mistake (for
// callers inside PyTorch: hooks, allocator, kernels).  Frees st.
[[noreturn]] void throw_status(tpu_status_t st);
inline void check(tpu_status_t st) {
  if (st) throw_status(st);
}

tpu_dtype_t dtype_code(c10::ScalarType t);  // TPU_DTYPE_INVALID if unsupported
std::string dtype_name(c10::ScalarType t);  // as Python prints it: "torch.complex32"
c10::ScalarType scalar_type(tpu_dtype_t code);

c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex index);

// ---- storage.cpp ------------------------------------------------------------
// A DataPtr owning one reference of `s` (moved in).
c10::DataPtr make_data_ptr(tpu_storage_t* s, c10::DeviceIndex device, size_t nbytes);
// The engine storage of a PyTorch storage, or NULL if it is not a tpu one.
tpu_storage_t* storage_of(const c10::Storage& storage);
// The engine storage behind a tpu tensor and the tensor's offset into it in
// elements (also for a storage PyTorch wrapped around one of our addresses:
// DLPack, from_blob); NULL if there is none.
tpu_storage_t* tensor_storage(const c10::TensorImpl* impl, int64_t* out_offset);
// A contiguous tpu tensor over `s` (reference moved in).
at::Tensor make_tensor(tpu_storage_t* s, int rank, const int64_t* dims, tpu_dtype_t dtype);
c10::Allocator* device_allocator();
c10::Allocator* pinned_allocator();
bool is_pinned_ptr(const void* p);
void resize_storage(const c10::Storage& storage, size_t nbytes);
c10::Device device_from_ptr(const void* p);
// Non-blocking host -> device copy from pinned memory: the storage is
// returned at once; the pinned block stays held until the copy is done.
tpu_storage_t* upload_pinned(c10::DeviceIndex device, tpu_dtype_t dtype, const int64_t* dims, int rank,
                             const void* data);

// ---- generator.cpp ----------------------------------------------------------
const at::Generator& default_generator(c10::DeviceIndex index);
at::Generator new_generator(c10::DeviceIndex index);
// Runs a random rule: the generator's state is input 0 and the last output
// the advanced state, kept by the generator (atomically, under its mutex).
void run_random(const tpu_op_rule_t* rule, const at::Generator& gen, tpu_rt_input_t* inputs, int nin,
                const tpu_op_attrs_t* attrs, tpu_rt_output_t* outputs, int* out_n);

}  // namespace torch_tpu
