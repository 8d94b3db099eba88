"""SGLang's KV memory on tpu: the pool in the layout of the ragged paged
attention kernel, and a paged allocator that keeps its free pages on the
host.

:class:`TpuMHATokenToKVPool` (the platform's MHA pool, for every attention
backend): one tensor per layer, ``[slots, num_kv_heads, 2 * head_dim]`` (a
token's key then its value), slots padded to whole pages.  SGLang's own
views stay what its code expects: ``k_buffer[l]`` / ``v_buffer[l]`` are the
halves ``[size + page_size, H, D]`` of that tensor (strided views), so
get_key_buffer / get_value_buffer, the torch_native backend and the pool's
moves work unchanged; a step's keys and values are written with one
``index_copy_`` of ``cat([k, v], -1)``.  The kernel reads the same tensor as
``[slots / page_size, page_size, H, 2D]`` (`paged_kv`): SGLang's pages are
the kernel's blocks.  16-bit caches are kept as their bits (int16,
ragged.cache_storage: the pool's store_dtype).

:class:`TpuPagedTokenToKVPoolAllocator` (the platform's paged allocator):
SGLang's, on the host.  On the device, every page taken shortens the free
list, and each new length made the ops that read it (slicing, the naive
allocation kernels' gathers) new programs: a steady decode compiled one
every few steps.  On the host they are numpy-speed torch CPU ops, and the
slots it hands out, the radix tree's indices and the request-to-token table
(step.py) all stay host tensors; the step's slots go to the device padded
with the step's inputs (step.py `pad`).
"""
import torch
from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

from torch_tpu.vllm import ragged


class TpuMHATokenToKVPool(MHATokenToKVPool):
    """MHA KV pool in the kernel's layout (see the module docstring)."""

    def _create_buffers_normal(self):
        if self.kv_cache_layout != "nhd" or self.head_dim != self.v_head_dim:
            raise NotImplementedError(f"tpu KV pool: layout {self.kv_cache_layout!r}, head dims "
                                      f"{self.head_dim}/{self.v_head_dim} (needs nhd, equal head dims)")
        self.store_dtype = ragged.cache_storage(self.dtype)
        rows = self.size + self.page_size
        padded = -(-rows // self.page_size) * self.page_size
        d = self.head_dim
        self.kv_buffer = [torch.zeros((padded, self.head_num, 2 * d), dtype=self.store_dtype, device=self.device)
                          for _ in range(self.layer_num)]
        self.k_buffer = [kv[:rows, :, :d] for kv in self.kv_buffer]
        self.v_buffer = [kv[:rows, :, d:] for kv in self.kv_buffer]

    def _store_kv_layer(self, layer_idx, loc, cache_k, cache_v):
        # cache_k / cache_v already in store_dtype (set_kv_buffer)
        n = loc.shape[0]
        new = torch.cat([cache_k.reshape(n, self.head_num, self.head_dim),
                         cache_v.reshape(n, self.head_num, self.v_head_dim)], dim=-1)
        self.kv_buffer[layer_idx].index_copy_(0, loc.to(self.device, torch.int64), new)

    def paged_kv(self, layer_id):
        """Layer layer_id's cache as the kernel reads it: [pages, page_size,
        H, 2D] in store_dtype."""
        kv = self.kv_buffer[layer_id - self.start_layer]
        return kv.view(-1, self.page_size, self.head_num, 2 * self.head_dim)



class TpuPagedTokenToKVPoolAllocator(PagedTokenToKVPoolAllocator):
    """SGLang's paged allocator on the host (see the module docstring)."""

    def __init__(self, size, page_size, dtype, device, kvcache, need_sort):
        super().__init__(size, page_size, dtype, "cpu", kvcache, need_sort)
