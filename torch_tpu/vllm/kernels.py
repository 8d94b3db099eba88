"""ATen versions of the Triton kernels vLLM runs on the device each step.

vLLM looks them up by the kernel's qualified name
(``vllm.triton_utils.dispatcher.register_kernels``); each one computes on
tpu tensors with ops the engine lowers, without reading anything back to
the host."""
import torch


def compute_slot_mapping(num_tokens, max_num_tokens, query_start_loc, positions, block_table,
                         block_table_stride, slot_mapping, KV_CACHE_BLOCK_SIZE, TOTAL_CP_WORLD_SIZE=1,
                         TOTAL_CP_RANK=0, CP_KV_CACHE_INTERLEAVE_SIZE=1, PAD_ID=-1, BLOCK_SIZE=1024):
    """slot_mapping[t] = block_table[req(t), pos(t) // bs] * bs + pos(t) % bs
    for the step's tokens, PAD_ID after them (vLLM's ComputeSlotMappingKernel)."""
    if TOTAL_CP_WORLD_SIZE != 1:
        raise NotImplementedError("tpu: context parallelism is not supported")
    if num_tokens:
        bs = KV_CACHE_BLOCK_SIZE
        device = positions.device
        pos = positions[:num_tokens].to(torch.int64)
        token = torch.arange(num_tokens, device=device, dtype=torch.int64)
        ends = query_start_loc[1:].to(torch.int64)
        req = (token[:, None] >= ends[None, :]).sum(dim=1)       # request of each token
        flat = block_table.reshape(-1)
        block = flat.index_select(0, req * block_table_stride + pos // bs).to(torch.int64)
        slot_mapping[:num_tokens] = block * bs + pos % bs
    if max_num_tokens > num_tokens:
        slot_mapping[num_tokens:max_num_tokens] = PAD_ID


OVERRIDES = {
    "vllm.v1.worker.block_table.ComputeSlotMappingKernel.kernel": compute_slot_mapping,
}
