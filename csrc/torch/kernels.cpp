// kernels.cpp - ATen kernels of the tpu device written in C++: factories
// (no Python frame, and no device work until a value is needed), resize,
// and module conversion's compatibility question.  Everything else is in
// torch_tpu/ops (Python adapters over the engine's rules).
#include <ATen/core/Tensor.h>
#include <ATen/EmptyTensor.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/MemoryFormat.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>
#include <c10/util/accumulate.h>
#include <torch/library.h>

#include "torch/tpu_torch.h"

namespace torch_tpu {
namespace {

c10::DeviceIndex device_index_of(std::optional<c10::Device> device) {
  c10::DeviceIndex i = device && device->has_index() ? device->index() : current_device();
  check_device_index(i);
  return i;
}

tpu_dtype_t checked_dtype(c10::ScalarType t, const char* op) {
  tpu_dtype_t code = dtype_code(t);
  TORCH_CHECK_TYPE(code != TPU_DTYPE_INVALID, "tpu does not support dtype ", dtype_name(t), " (in ", op, ")");
  return code;
}

// A tensor over a new engine storage of `nbytes` bytes with no value yet.
at::Tensor empty_with_bytes(c10::IntArrayRef size, c10::ScalarType dtype, c10::DeviceIndex device, int64_t numel_storage,
                            const char* op) {
  tpu_storage_t* s = nullptr;
  check(tpu_rt_storage_empty(device, checked_dtype(dtype, op), numel_storage, &s));
  size_t nbytes = tpu_storage_nbytes(s);
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, make_data_ptr(s, device, nbytes), device_allocator(),
                       /*resizable=*/true);
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                          caffe2::TypeMeta::fromScalarType(dtype));
  t.unsafeGetTensorImpl()->set_sizes_contiguous(size);
  return t;
}

void check_sizes(c10::IntArrayRef size) {
  for (int64_t s : size) TORCH_CHECK(s >= 0, "Trying to create tensor with negative dimension ", s, ": ", size);
}

at::Tensor tpu_empty(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                     std::optional<c10::Device> device, std::optional<bool> pin_memory,
                     std::optional<c10::MemoryFormat> memory_format) {
  ensure_started();
  TORCH_CHECK(!layout || *layout == c10::Layout::Strided, "tpu: only strided tensors are supported, got ", *layout);
  check_sizes(size);
  c10::ScalarType dt = dtype.value_or(c10::get_default_dtype_as_scalartype());
  at::Tensor t = empty_with_bytes(size, dt, device_index_of(device), c10::multiply_integers(size), "aten::empty");
  c10::MemoryFormat mf = memory_format.value_or(c10::MemoryFormat::Contiguous);
  if (mf != c10::MemoryFormat::Contiguous && mf != c10::MemoryFormat::Preserve)
    t.unsafeGetTensorImpl()->empty_tensor_restride(mf);
  return t;
}

at::Tensor tpu_empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                             std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                             std::optional<bool> pin_memory) {
  ensure_started();
  check_sizes(size);
  TORCH_CHECK(size.size() == stride.size(), "empty_strided: mismatch in length of strides and shape");
  c10::ScalarType dt = dtype.value_or(c10::get_default_dtype_as_scalartype());
  size_t itemsize = c10::elementSize(dt);
  size_t nbytes = at::detail::computeStorageNbytes(size, stride, itemsize);
  at::Tensor t = empty_with_bytes({static_cast<int64_t>(nbytes / itemsize)}, dt, device_index_of(device),
                                  static_cast<int64_t>(nbytes / itemsize), "aten::empty_strided");
  t.unsafeGetTensorImpl()->set_sizes_and_strides(size, stride);
  return t;
}

// Tensor.resize_: grows the storage in place (every alias keeps seeing it,
// old elements kept), as ATen does for CPU and CUDA.
const at::Tensor& tpu_resize_(const at::Tensor& self, c10::IntArrayRef size,
                              std::optional<c10::MemoryFormat> memory_format) {
  check_sizes(size);
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  int64_t numel = c10::multiply_integers(size);
  size_t need = static_cast<size_t>(impl->storage_offset() + numel) * self.itemsize();
  if (numel > 0 && need > impl->storage().nbytes()) resize_storage(impl->storage(), need);
  impl->set_sizes_contiguous(size);
  if (memory_format && *memory_format != c10::MemoryFormat::Preserve)
    impl->empty_tensor_restride(*memory_format);
  return self;
}

// nn.Module conversion (.to, .cuda-style moves) keeps Parameter objects when
// the old and new tensors are "shallow-copy compatible": as CPU and CUDA
// dense tensors are, so are CPU and tpu ones (the TensorImpl is the same
// class; `param.data = moved` swaps storage and keys).
bool tpu_has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    return t.layout() == c10::Layout::Strided && (t.device().is_cpu() || t.device().type() == kTpu) &&
           !t.is_quantized() && !t.is_nested();
  };
  if (self.unsafeGetTensorImpl()->key_set() == from.unsafeGetTensorImpl()->key_set()) return true;
  return dense(self) && dense(from);
}

}  // namespace
}  // namespace torch_tpu

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(torch_tpu::tpu_empty));
  m.impl("empty_strided", TORCH_FN(torch_tpu::tpu_empty_strided));
  m.impl("resize_", TORCH_FN(torch_tpu::tpu_resize_));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(torch_tpu::tpu_has_compatible_shallow_copy_type));
}
