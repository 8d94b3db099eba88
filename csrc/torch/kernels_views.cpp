// kernels_views.cpp - complex <-> real views on tpu as PyTorch's own
// metadata kernels (a float view of a complex storage: the engine reads a
// view with another dtype than its storage through a bitcast).  Without
// them view_as_real fell back to CPU and returned a copy, so in-place
// writes through it (dist.all_reduce on a complex tensor) were lost.
#include <ATen/core/Tensor.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <torch/library.h>

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
}
