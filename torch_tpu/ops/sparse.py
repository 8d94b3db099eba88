"""Sparse COO tensors on tpu (the SparsePrivateUse1 key).

A sparse tpu tensor is PyTorch's own SparseTensorImpl whose indices and
values are dense tpu tensors.  The kernels that only build, read or alias
that structure are device-neutral in ATen but registered per backend, so
they are reached here through the SparseCPU kernel (redispatch): the
constructors, _indices / _values, sparse_dim / dense_dim / _nnz,
is_coalesced, the resize ops, copy_sparse_to_sparse_, empty and zero_.
On the device, composed of dense ops: to_dense and dense + sparse add (a
scatter-add of the values), sparse x dense mm / addmm (a row gather of the
dense operand, scaled by the values, summed into the output rows),
sparse_mask, coalesce (torch.unique over linearized indices: one host
read) and dense -> sparse (nonzero: one host read): what torch.sparse.mm
and nn.Embedding / EmbeddingBag(sparse=True) with SGD, SparseAdam or
Adagrad meet.  Every other sparse op runs through the CPU fallback
(tensors copied over and back, sparse ones as sparse), counted and warned
as any other.
"""
import torch

from .._dispatch import Unsupported, impl

aten = torch.ops.aten
_KEY = "SparsePrivateUse1"
_SPARSE_CPU = torch._C.DispatchKeySet(torch._C.DispatchKey.SparseCPU)

_STRUCTURAL = ["_sparse_coo_tensor_with_dims_and_tensors", "_sparse_coo_tensor_with_dims", "_indices", "_values",
               "indices", "values", "sparse_dim", "dense_dim", "_nnz", "is_coalesced", "_coalesced_", "_dimI",
               "_dimV", "sparse_resize_", "sparse_resize_and_clear_", "copy_sparse_to_sparse_", "zero_"]


def _through_sparse_cpu(op):
    return lambda *args, **kwargs: op.redispatch(_SPARSE_CPU, *args, **kwargs)


for _name in _STRUCTURAL:
    _packet = getattr(aten, _name)
    for _overload in _packet.overloads():
        _op = getattr(_packet, _overload)
        impl(f"{_name}.{_overload}" if _overload != "default" else _name, _through_sparse_cpu(_op), key=_KEY)

impl("empty.memory_format", _through_sparse_cpu(aten.empty.memory_format), key=_KEY)


def _is_sparse(t):
    return isinstance(t, torch.Tensor) and t.layout == torch.sparse_coo


def _copy_from(self, dst, non_blocking=False):
    """copy_ between two sparse tensors, one of them on tpu (PyTorch routes a
    tpu copy here before its own sparse check)."""
    if not (_is_sparse(self) and _is_sparse(dst)):
        raise RuntimeError("copy_() between dense and sparse Tensors is not implemented! Found self type = "
                           f"{dst.type()} and src type = {self.type()}")
    src = self if self.device == dst.device else self.to(dst.device)
    return aten.copy_sparse_to_sparse_.default.redispatch(_SPARSE_CPU, dst, src, non_blocking)


impl("_copy_from", _copy_from, key=_KEY)


def _scatter_into(dense, sparse, alpha):
    """dense (modified) += alpha * sparse, duplicates summed."""
    if sparse._nnz():
        values = sparse._values()
        if alpha != 1:
            values = values * alpha
        dense.index_put_(tuple(sparse._indices()), values.to(dense.dtype), accumulate=True)
    return dense


def _to_dense(self, dtype=None, masked_grad=None):
    return _scatter_into(torch.zeros(self.shape, dtype=dtype or self.dtype, device=self.device), self, 1)


impl("_to_dense", _to_dense, key=_KEY)


def _spmm(sparse, dense):
    """sparse [n, m] (2 sparse dims, no dense dims) @ dense [m, k] -> dense [n, k]."""
    if (sparse.sparse_dim() != 2 or sparse.dense_dim() != 0 or _is_sparse(dense) or dense.dim() != 2
            or dense.device != sparse.device):
        raise Unsupported()
    if sparse.shape[1] != dense.shape[0]:
        raise RuntimeError(f"addmm: Argument #3 (dense): Expected dim 0 size {sparse.shape[1]}, got {dense.shape[0]}")
    if sparse.dtype != dense.dtype:
        raise RuntimeError(f"expected mat1 and mat2 to have the same dtype, but got: {sparse.dtype} != {dense.dtype}")
    out = torch.zeros(sparse.shape[0], dense.shape[1], dtype=dense.dtype, device=dense.device)
    if sparse._nnz():
        rows, cols = sparse._indices()
        out.index_add_(0, rows, dense.index_select(0, cols) * sparse._values().unsqueeze(1))
    return out


def _mm(self, mat2):
    if not _is_sparse(self):
        raise Unsupported()
    return _spmm(self, mat2)


def _addmm(self, mat1, mat2, *, beta=1, alpha=1):
    if not _is_sparse(mat1) or _is_sparse(self):
        raise Unsupported()
    prod = _spmm(mat1, mat2)
    if alpha != 1:
        prod = prod * alpha
    if beta == 0:
        return prod.expand(torch.broadcast_shapes(self.shape, prod.shape)).clone()
    return prod + (self if beta == 1 else self * beta)


impl("mm", _mm, key=_KEY)
impl("addmm", _addmm, key=_KEY)


# ---- what sparse gradients meet in an optimizer step ------------------------------------------


def _check_add(dense, sparse):
    if dense.shape != sparse.shape:
        raise RuntimeError(f"add: expected 'self' and 'other' to have same size, but self has size "
                           f"{list(dense.shape)} while other has size {list(sparse.shape)} (FYI: dense-sparse "
                           "addition does not currently support broadcasting)")


def _add(self, other, *, alpha=1):
    if not isinstance(other, torch.Tensor) or _is_sparse(self) == _is_sparse(other):
        raise Unsupported()  # sparse + sparse, sparse + scalar: the CPU kernels
    dense, sparse = (other, self) if _is_sparse(self) else (self, other)
    _check_add(dense, sparse)
    dtype = torch.result_type(self, other)
    if _is_sparse(self):  # sparse + alpha * dense
        return _scatter_into(dense.to(dtype) * alpha, sparse, 1)
    return _scatter_into(dense.to(dtype, copy=True), sparse, alpha)


def _add_(self, other, *, alpha=1):
    if _is_sparse(self) or not _is_sparse(other):
        raise Unsupported()
    _check_add(self, other)
    if not torch.can_cast(torch.result_type(self, other), self.dtype):
        raise RuntimeError(f"result type {torch.result_type(self, other)} can't be cast to the desired output "
                           f"type {self.dtype}")
    return _scatter_into(self, other, alpha)


impl("add.Tensor", _add, key=_KEY)
impl("add_.Tensor", _add_, key=_KEY)


def _sparse_mask(self, mask):
    """self's entries at mask's indices, as a sparse tensor shaped like mask."""
    if _is_sparse(self) or self.shape != mask.shape:
        raise Unsupported()
    indices = mask._indices()
    values = self[tuple(indices[:mask.sparse_dim()])] if mask._nnz() else \
        self.new_empty((0, *self.shape[mask.sparse_dim():]))
    return torch.sparse_coo_tensor(indices, values, self.shape, is_coalesced=mask.is_coalesced(),
                                   check_invariants=False)


impl("sparse_mask", _sparse_mask, key=_KEY)


def _coalesce(self):
    """Duplicate indices summed, indices sorted (row-major), as CPU's kernel."""
    nnz, sdim = self._nnz(), self.sparse_dim()
    indices, values = self._indices(), self._values()
    if nnz < 2:
        return torch.sparse_coo_tensor(indices.clone(), values.clone(), self.shape, is_coalesced=True,
                                       check_invariants=False)
    strides = [1] * sdim
    for d in range(sdim - 2, -1, -1):
        strides[d] = strides[d + 1] * int(self.shape[d + 1])
    linear = (indices * torch.tensor(strides, device=indices.device).unsqueeze(1)).sum(0)
    unique, inverse = torch.unique(linear, sorted=True, return_inverse=True)
    summed = values.new_zeros((unique.numel(), *values.shape[1:])).index_add_(0, inverse, values)
    out_indices = torch.stack([(unique // s) % int(n) for s, n in zip(strides, self.shape[:sdim])])
    return torch.sparse_coo_tensor(out_indices, summed, self.shape, is_coalesced=True, check_invariants=False)


impl("_coalesce", _coalesce, key=_KEY)


# ---- dense -> sparse (a PrivateUse1 kernel: its input is dense) -----------------------------------


def _dense_to_coo(self, sparse_dim):
    if self.dim() == 0 or not 0 < sparse_dim <= self.dim():
        raise Unsupported()  # CPU's result or error
    nonzero = self != 0
    if sparse_dim < self.dim():
        nonzero = nonzero.flatten(sparse_dim).any(-1)
    indices = nonzero.nonzero().t()
    values = self[tuple(indices)]
    return torch.sparse_coo_tensor(indices, values, self.shape, is_coalesced=True, check_invariants=False)


def _to_sparse(self, *, layout=None, blocksize=None, dense_dim=None):
    if layout not in (None, torch.sparse_coo) or blocksize is not None:
        raise Unsupported()
    return _dense_to_coo(self, self.dim() - (dense_dim or 0))


impl("_to_sparse", _to_sparse)
impl("_to_sparse.sparse_dim", lambda self, sparse_dim: _dense_to_coo(self, sparse_dim))
