// kernels_views.cpp - the view kernels of tpu: PyTorch's own metadata
// kernels (a view is sizes, strides and an offset over a shared storage; the
// engine reads a view by them), registered in C++ so that a view, the most
// frequent op of a model's forward, runs no Python.  Complex <-> real views
// too: a float view of a complex storage is read through a bitcast (without
// them view_as_real fell back to CPU and returned a copy, so in-place writes
// through it were lost).
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

#include "torch/tpu_torch.h"

namespace torch_tpu {
namespace {

// Tensor.set_(storage, offset, size, stride): PyTorch's checks, then the
// metadata; a view reaching past the storage grows it in place, as CPU does
// (through the engine's resize: ATen's CPU resize would copy host bytes).
at::Tensor& tpu_set_storage(at::Tensor& self, c10::Storage source, int64_t storage_offset, c10::IntArrayRef size,
                            c10::IntArrayRef stride) {
  at::native::checkSetStorage(self, source, storage_offset, size, stride);
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  impl->set_storage_offset(storage_offset);
  if (stride.data()) impl->set_sizes_and_strides(size, stride);
  else impl->set_sizes_contiguous(size);
  size_t itemsize = self.itemsize();
  size_t need = stride.data() ? at::detail::computeStorageNbytes(size, stride, itemsize, storage_offset)
                              : at::detail::computeStorageNbytesContiguous(size, itemsize, storage_offset);
  if (c10::multiply_integers(size) > 0 && need > impl->storage().nbytes()) resize_storage(impl->storage(), need);
  return self;
}

}  // namespace
}  // namespace torch_tpu

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("unfold", TORCH_FN(at::native::unfold));
  m.impl("set_.source_Storage", TORCH_FN(at::native::set_));
  m.impl("set_.source_Tensor", TORCH_FN(at::native::set_tensor_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(torch_tpu::tpu_set_storage));
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
}
