"""Ragged paged attention on tpu: one program per token bucket.

A step of vLLM holds any mix of requests: decodes (one query each),
prefills, chunks of a long prefill, requests whose prompt starts with
cached blocks.  Padding each dimension of that mix to its own bucket
(requests, longest query, longest context) multiplies the programs; here
the step's attention is one StableHLO kernel (``torch_tpu.library``) whose
shapes depend on the token bucket T and the model alone.  What differs from
step to step enters as runtime inputs, built on the host (`plan`):

- the step's queries are cut into *items* of up to TQ consecutive query
  rows of one request (a decode is one item, a 100-token prefill seven);
  ``q_index [N, TQ]`` says which token each row is, ``q_pos [N, TQ]`` its
  position in its request (what it may see: keys at positions <= it);
- ``tables [N, MB]`` holds each item's request block table (vLLM's block
  ids, padded with the null block 0);
- items are taken W at a time (a *group*), sorted by how far they read so a
  group's items read about as far; ``chunks [NG]`` is how many chunks of KB
  blocks a group reads (its longest item), ``groups [1]`` how many groups
  the step has.

The kernel loops over the groups (a while loop whose trip count is the
runtime ``groups``), and per group over its chunks (``chunks[g]``): it
gathers the W x KB blocks of the chunk from the paged cache, computes the
scores of the group's W x TQ query rows against them with the causal
visibility test, and folds them into an online softmax (running maximum,
sum and weighted values, as flash attention does).  So a decode-only step
reads each request's context once, W requests side by side, and a long
prefill runs W query tiles of it side by side; nothing is padded to the
longest request of the step.  N (the items) is bounded by the token bucket:
at most T / TQ tiles plus one partial tile per request.

Layout of the paged cache as attention.py keeps it: ``[num_blocks,
block_size, num_kv_heads, 2 * head_size]`` (a token's key then its value).
Queries are float32 inside (the cache's dtype is converted per chunk).
This module needs no vLLM: tests/python/test_ragged_attention.py checks it
against plain attention on CPU.
"""
import functools

import numpy as np
import torch

KB = 8      # blocks per chunk


class Variant:
    """How a kernel cuts queries: items of up to tq query rows, w items side
    by side.  Decodes (one query each) run as items of one row, many side
    by side; prefills as tiles of several rows, so a tile's keys are read
    once for its rows."""

    def __init__(self, name, tq, w):
        self.name, self.tq, self.w = name, tq, w

    def num_items(self, num_tokens, max_reqs):
        """N: items a step of num_tokens (the bucket) tokens can need, a
        multiple of w.  Decode: one per request.  Prefill: a prefill request
        has at least two queries, its last tile may be partial: at most
        T / tq full tiles plus one per request."""
        reqs = min(num_tokens, max(int(max_reqs), 1))
        if self.tq == 1:
            n = reqs
        else:
            n = -(-num_tokens // self.tq) + min(num_tokens // 2, reqs)
        return max(-(-n // self.w) * self.w, self.w)


DECODE = Variant("decode", 1, 32)
PREFILL = Variant("prefill", 8, 16)
VARIANTS = (DECODE, PREFILL)


def table_width(max_blocks):
    """MB: a request's block table padded to whole chunks."""
    return -(-int(max_blocks) // KB) * KB


def _items(var, reqs, starts, ctx, qlens, table, num_tokens, max_reqs, block_size, row_base, out_index):
    """One variant's inputs for the requests `reqs` (indices); writes its
    tokens' output rows (row_base + row in its [N * tq] rows) into
    out_index.  Returns (q_index, q_pos, tables, chunks, groups)."""
    tq, w = var.tq, var.w
    n_max = var.num_items(num_tokens, max_reqs)
    mb = table_width(table.shape[1])
    tiles = -(-qlens[reqs] // tq)
    item_req = np.repeat(reqs, tiles)
    item_row = (np.arange(int(tiles.sum())) - np.repeat(np.cumsum(tiles) - tiles, tiles)) * tq
    n = item_req.shape[0]
    if n > n_max:
        raise ValueError(f"tpu ragged attention: {n} {var.name} items exceed the bucket's {n_max} "
                         f"({len(reqs)} requests, bucket of {num_tokens} tokens)")
    # how far each item reads: its last row's position + 1
    rows_in = np.minimum(qlens[item_req] - item_row, tq)
    reach = ctx[item_req] + item_row + rows_in
    order = np.argsort(-reach, kind="stable")  # farthest first: a group's items read about as far
    item_req, item_row, rows_in, reach = item_req[order], item_row[order], rows_in[order], reach[order]
    r = np.arange(tq)[None, :]
    valid = r < rows_in[:, None]
    q_index = np.zeros((n_max, tq), np.int64)
    q_pos = np.zeros((n_max, tq), np.int32)
    q_index[:n] = np.where(valid, starts[item_req][:, None] + item_row[:, None] + r, 0)
    q_pos[:n] = np.where(valid, ctx[item_req][:, None] + item_row[:, None] + r, 0)
    tables = np.zeros((n_max, mb), np.int32)
    width = min(mb, table.shape[1])
    tables[:n, :width] = table[item_req, :width]
    n_groups = -(-n // w)
    chunks = np.zeros(n_max // w, np.int32)
    chunks[:n_groups] = -(-reach[::w] // (KB * block_size))
    rows = row_base + np.arange(n)[:, None] * tq + r
    out_index[q_index[:n][valid]] = rows[valid]
    return q_index, q_pos, tables, chunks, np.array([n_groups], np.int32)


def plan(starts, seq_lens, table, num_tokens, max_reqs, block_size):
    """The host-side inputs of one step (numpy; see the module docstring).

    starts: [R + 1] query start offsets of the step's requests in the
    flattened tokens; seq_lens: [R] each request's length after this step
    (context + queries); table: [R, >= blocks] block ids; num_tokens: the
    step's token bucket T; max_reqs: the scheduler's max_num_seqs.
    Returns ({variant name: (q_index [N, tq], q_pos [N, tq], tables [N, MB],
    chunks [N / w], groups [1])}, out_index [T]): out_index[t] is the row of
    token t in the decode kernel's [N * 1] output rows followed by the
    prefill kernel's [N * tq]."""
    starts = np.asarray(starts, np.int64)
    seq_lens = np.asarray(seq_lens, np.int64)
    table = np.asarray(table)
    qlens = starts[1:] - starts[:-1]
    ctx = seq_lens - qlens
    out_index = np.zeros(num_tokens, np.int64)  # padding tokens read row 0
    per, base = {}, 0
    for var in VARIANTS:
        reqs = np.flatnonzero(qlens == 1) if var.tq == 1 else np.flatnonzero(qlens > 1)
        per[var.name] = _items(var, reqs, starts, ctx, qlens, table, num_tokens, max_reqs, block_size, base,
                               out_index)
        base += per[var.name][0].size
    return per, out_index


def _t(shape, elem):
    return "tensor<" + "".join(f"{d}x" for d in shape) + elem + ">"


HOST_KERNEL = "torch_tpu_paged_attention"  # csrc/kernels/kernels.h
_KIND = {None: 0, "bf16": 1, "f16": 2}
HOST_MAX_D = 512  # head sizes the host kernel takes (PA_MAX_D)


def host_kernel():
    """Whether programs call the engine's C kernel (csrc/kernels/
    paged_attention.c, on the XLA CPU plugin, whose programs run in host
    memory) instead of the StableHLO kernel: XLA's CPU code for the
    StableHLO kernel's gathers and batches of tiny dots is slow (11-15 ms a
    layer for 8 decodes over 300 tokens against 1.2 ms: bench/attention.py).
    TORCH_TPU_HOST_KERNELS=0 turns it off."""
    import os

    from torch_tpu import _C

    return os.environ.get("TORCH_TPU_HOST_KERNELS", "1") != "0" and _C.host_kernel(HOST_KERNEL)


def host_kernel_text(query_shape, kv_shape, kv_elem, variant_shapes, scale, kv_real=None):
    """The step's attention as one custom call of the host kernel
    (csrc/kernels/kernels.h): @main(query [T, Hq, D] f32, kv, out_index [T]
    i64, then per variant q_index [N, tq] i64, q_pos [N, tq] i32, tables
    [N, MB] i32, chunks [N / w] i32, groups [1] i32) -> [T, Hq, D] f32; the
    softmax scale and the cache's element kind are a constant operand."""
    Q = _t(query_shape, "f32")
    ins = [Q, _t(kv_shape, kv_elem), _t(query_shape[:1], "i64")]
    names = ["%q", "%kv", "%oi"]
    for v, (qi, pos, tab, ch) in enumerate(variant_shapes):
        ins += [_t(qi, "i64"), _t(pos, "i32"), _t(tab, "i32"), _t(ch, "i32"), _t((1,), "i32")]
        names += [f"%qi{v}", f"%pos{v}", f"%tab{v}", f"%ch{v}", f"%gr{v}"]
    kind = _KIND[kv_real] if kv_elem == "i16" else 0
    P = _t((2,), "f32")
    args = ", ".join(f"{n}: {t}" for n, t in zip(names, ins))
    operands = names[:3] + ["%params"] + names[3:]
    types = ins[:3] + [P] + ins[3:]
    return (f"func.func @main({args}) -> {Q} {{\n"
            f"  %params = stablehlo.constant dense<[{float(scale)!r}, {float(kind)!r}]> : {P}\n"
            f"  %r = stablehlo.custom_call @{HOST_KERNEL}({', '.join(operands)}) "
            f"{{api_version = 4 : i32}} : ({', '.join(types)}) -> {Q}\n"
            f"  return %r : {Q}\n}}\n")


@functools.lru_cache(maxsize=None)
def kernel_text(n, tq, w, hq, hkv, d, num_blocks, block_size, mb, kv_elem, scale, kv_real=None):
    """The StableHLO of the attention for N = n items of tq rows, w side by
    side (see the module docstring): @main(q [N, tq, Hq, D] f32, kv [NB, BS, Hkv, 2D] kv_elem,
    tables [N, MB] i32, q_pos [N, tq] i32, chunks [N / w] i32, groups [1]
    i32) -> [N, tq, Hq, D] f32.  kv_elem "i16": a cache of kv_real ("bf16",
    "f16") values kept as their bits."""
    TQ, W = tq, w
    g = hq // hkv
    r = TQ * g             # query rows per kv head of an item
    kc = KB * block_size   # keys per chunk
    ng = n // W
    f32 = "f32"
    Q = _t((n, TQ, hq, d), f32)
    KV = _t((num_blocks, block_size, hkv, 2 * d), kv_elem)
    TAB = _t((n, mb), "i32")
    POS = _t((n, TQ), "i32")
    CH = _t((ng,), "i32")
    I = _t((), "i32")
    S = _t((W, hkv, r, kc), f32)       # scores of a chunk
    ROW = _t((W, hkv, r), f32)         # per query row: max, sum
    ACC = _t((W, hkv, r, d), f32)
    QG = _t((W, hkv, r, d), f32)
    PB = _t((W, hkv, r, kc), "i32")    # positions, broadcast
    BL = _t((W, kc, hkv, 2 * d), kv_elem)
    KV32 = _t((W, kc, hkv, 2 * d), f32)
    K = _t((W, kc, hkv, d), f32)
    OUTG = _t((W, TQ, hq, d), f32)
    lines = []
    emit = lines.append
    emit(f"func.func @main(%q: {Q}, %kv: {KV}, %tab: {TAB}, %pos: {POS}, %chunks: {CH}, "
         f"%groups: {_t((1,), 'i32')}) -> {Q} {{")
    emit(f"  %zero_i = stablehlo.constant dense<0> : {I}")
    emit(f"  %one_i = stablehlo.constant dense<1> : {I}")
    emit(f"  %w_i = stablehlo.constant dense<{W}> : {I}")
    emit(f"  %kb_i = stablehlo.constant dense<{KB}> : {I}")
    emit(f"  %kc_i = stablehlo.constant dense<{kc}> : {I}")
    emit(f"  %ng1 = stablehlo.slice %groups [0:1] : ({_t((1,), 'i32')}) -> {_t((1,), 'i32')}")
    emit(f"  %ng = stablehlo.reshape %ng1 : ({_t((1,), 'i32')}) -> {I}")
    emit(f"  %out0 = stablehlo.constant dense<0.0> : {Q}")
    emit(f"  %res:2 = stablehlo.while(%gi = %zero_i, %out = %out0) : {I}, {Q}")
    emit("   cond {")
    emit(f"    %c = stablehlo.compare LT, %gi, %ng : ({I}, {I}) -> tensor<i1>")
    emit("    stablehlo.return %c : tensor<i1>")
    emit("  } do {")
    emit(f"    %start = stablehlo.multiply %gi, %w_i : {I}")
    # the group's queries, [W, Hkv, TQ * G, D], scaled
    emit(f"    %qg0 = stablehlo.dynamic_slice %q, %start, %zero_i, %zero_i, %zero_i, sizes = [{W}, {TQ}, {hq}, {d}] "
         f": ({Q}, {I}, {I}, {I}, {I}) -> {_t((W, TQ, hq, d), f32)}")
    emit(f"    %qg1 = stablehlo.reshape %qg0 : ({_t((W, TQ, hq, d), f32)}) -> {_t((W, TQ, hkv, g, d), f32)}")
    emit(f"    %qg2 = stablehlo.transpose %qg1, dims = [0, 2, 1, 3, 4] : ({_t((W, TQ, hkv, g, d), f32)}) -> "
         f"{_t((W, hkv, TQ, g, d), f32)}")
    emit(f"    %qg3 = stablehlo.reshape %qg2 : ({_t((W, hkv, TQ, g, d), f32)}) -> {QG}")
    emit(f"    %scale = stablehlo.constant dense<{float(scale)!r}> : {QG}")
    emit(f"    %qg = stablehlo.multiply %qg3, %scale : {QG}")
    # the group's block tables and query positions
    emit(f"    %tg = stablehlo.dynamic_slice %tab, %start, %zero_i, sizes = [{W}, {mb}] : ({TAB}, {I}, {I}) -> "
         f"{_t((W, mb), 'i32')}")
    emit(f"    %pg0 = stablehlo.dynamic_slice %pos, %start, %zero_i, sizes = [{W}, {TQ}] : ({POS}, {I}, {I}) -> "
         f"{_t((W, TQ), 'i32')}")
    emit(f"    %pg1 = stablehlo.broadcast_in_dim %pg0, dims = [0, 2] : ({_t((W, TQ), 'i32')}) -> "
         f"{_t((W, hkv, TQ, g), 'i32')}")
    emit(f"    %pg2 = stablehlo.reshape %pg1 : ({_t((W, hkv, TQ, g), 'i32')}) -> {_t((W, hkv, r), 'i32')}")
    emit(f"    %pg = stablehlo.broadcast_in_dim %pg2, dims = [0, 1, 2] : ({_t((W, hkv, r), 'i32')}) -> {PB}")
    emit(f"    %nc1 = stablehlo.dynamic_slice %chunks, %gi, sizes = [1] : ({CH}, {I}) -> {_t((1,), 'i32')}")
    emit(f"    %nc = stablehlo.reshape %nc1 : ({_t((1,), 'i32')}) -> {I}")
    emit(f"    %m0 = stablehlo.constant dense<0xFF800000> : {ROW}")
    emit(f"    %l0 = stablehlo.constant dense<0.0> : {ROW}")
    emit(f"    %a0 = stablehlo.constant dense<0.0> : {ACC}")
    emit(f"    %in:4 = stablehlo.while(%ci = %zero_i, %m = %m0, %l = %l0, %acc = %a0) : {I}, {ROW}, {ROW}, {ACC}")
    emit("     cond {")
    emit(f"      %c2 = stablehlo.compare LT, %ci, %nc : ({I}, {I}) -> tensor<i1>")
    emit("      stablehlo.return %c2 : tensor<i1>")
    emit("    } do {")
    emit(f"      %col = stablehlo.multiply %ci, %kb_i : {I}")
    emit(f"      %ids0 = stablehlo.dynamic_slice %tg, %zero_i, %col, sizes = [{W}, {KB}] : ({_t((W, mb), 'i32')}, "
         f"{I}, {I}) -> {_t((W, KB), 'i32')}")
    emit(f"      %ids = stablehlo.reshape %ids0 : ({_t((W, KB), 'i32')}) -> {_t((W, KB, 1), 'i32')}")
    emit(f"      %blk = \"stablehlo.gather\"(%kv, %ids) <{{dimension_numbers = #stablehlo.gather<offset_dims = "
         f"[2, 3, 4], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 2>, "
         f"indices_are_sorted = false, slice_sizes = array<i64: 1, {block_size}, {hkv}, {2 * d}>}}> : "
         f"({KV}, {_t((W, KB, 1), 'i32')}) -> {_t((W, KB, block_size, hkv, 2 * d), kv_elem)}")
    emit(f"      %blk1 = stablehlo.reshape %blk : ({_t((W, KB, block_size, hkv, 2 * d), kv_elem)}) -> {BL}")
    kv32 = "%blk1"
    if kv_elem == "i16":  # a 16-bit float cache kept as its bits (see `attention`)
        BLF = _t((W, kc, hkv, 2 * d), kv_real)
        emit(f"      %blkf = stablehlo.bitcast_convert %blk1 : ({BL}) -> {BLF}")
        emit(f"      %kv32 = stablehlo.convert %blkf : ({BLF}) -> {KV32}")
        kv32 = "%kv32"
    elif kv_elem != f32:
        emit(f"      %kv32 = stablehlo.convert %blk1 : ({BL}) -> {KV32}")
        kv32 = "%kv32"
    emit(f"      %k = stablehlo.slice {kv32} [0:{W}, 0:{kc}, 0:{hkv}, 0:{d}] : ({KV32}) -> {K}")
    emit(f"      %v = stablehlo.slice {kv32} [0:{W}, 0:{kc}, 0:{hkv}, {d}:{2 * d}] : ({KV32}) -> {K}")
    emit(f"      %s0 = stablehlo.dot_general %qg, %k, batching_dims = [0, 1] x [0, 2], "
         f"contracting_dims = [3] x [3] : ({QG}, {K}) -> {S}")
    # visibility: key position (chunk start + column) <= the row's position
    emit(f"      %kst = stablehlo.multiply %ci, %kc_i : {I}")
    emit(f"      %kst_b = stablehlo.broadcast_in_dim %kst, dims = [] : ({I}) -> {PB}")
    emit(f"      %col_i = stablehlo.iota dim = 3 : {PB}")
    emit(f"      %kpos = stablehlo.add %kst_b, %col_i : {PB}")
    emit(f"      %vis = stablehlo.compare LE, %kpos, %pg : ({PB}, {PB}) -> {_t((W, hkv, r, kc), 'i1')}")
    emit(f"      %ninf = stablehlo.constant dense<0xFF800000> : {S}")
    emit(f"      %s = stablehlo.select %vis, %s0, %ninf : {_t((W, hkv, r, kc), 'i1')}, {S}")
    emit(f"      %ninf0 = stablehlo.constant dense<0xFF800000> : tensor<f32>")
    emit(f"      %cmax = stablehlo.reduce(%s init: %ninf0) applies stablehlo.maximum across dimensions = [3] : "
         f"({S}, tensor<f32>) -> {ROW}")
    emit(f"      %mn = stablehlo.maximum %m, %cmax : {ROW}")
    # rows that have seen no key yet keep -inf: shift by 0 there
    emit(f"      %ninf_r = stablehlo.constant dense<0xFF800000> : {ROW}")
    emit(f"      %zero_r = stablehlo.constant dense<0.0> : {ROW}")
    emit(f"      %none = stablehlo.compare EQ, %mn, %ninf_r : ({ROW}, {ROW}) -> {_t((W, hkv, r), 'i1')}")
    emit(f"      %shift = stablehlo.select %none, %zero_r, %mn : {_t((W, hkv, r), 'i1')}, {ROW}")
    emit(f"      %shift_b = stablehlo.broadcast_in_dim %shift, dims = [0, 1, 2] : ({ROW}) -> {S}")
    emit(f"      %sd = stablehlo.subtract %s, %shift_b : {S}")
    emit(f"      %p = stablehlo.exponential %sd : {S}")
    emit(f"      %md = stablehlo.subtract %m, %shift : {ROW}")
    emit(f"      %alpha = stablehlo.exponential %md : {ROW}")
    emit(f"      %zero0 = stablehlo.constant dense<0.0> : tensor<f32>")
    emit(f"      %psum = stablehlo.reduce(%p init: %zero0) applies stablehlo.add across dimensions = [3] : "
         f"({S}, tensor<f32>) -> {ROW}")
    emit(f"      %la = stablehlo.multiply %l, %alpha : {ROW}")
    emit(f"      %ln = stablehlo.add %la, %psum : {ROW}")
    emit(f"      %pv = stablehlo.dot_general %p, %v, batching_dims = [0, 1] x [0, 2], "
         f"contracting_dims = [3] x [1] : ({S}, {K}) -> {ACC}")
    emit(f"      %alpha_b = stablehlo.broadcast_in_dim %alpha, dims = [0, 1, 2] : ({ROW}) -> {ACC}")
    emit(f"      %aa = stablehlo.multiply %acc, %alpha_b : {ACC}")
    emit(f"      %an = stablehlo.add %aa, %pv : {ACC}")
    emit(f"      %cn = stablehlo.add %ci, %one_i : {I}")
    emit(f"      stablehlo.return %cn, %mn, %ln, %an : {I}, {ROW}, {ROW}, {ACC}")
    emit("    }")
    # out = acc / l (rows that saw nothing: l = 0, divided by 1)
    emit(f"    %lz = stablehlo.compare EQ, %in#2, %l0 : ({ROW}, {ROW}) -> {_t((W, hkv, r), 'i1')}")
    emit(f"    %one_r = stablehlo.constant dense<1.0> : {ROW}")
    emit(f"    %lsafe = stablehlo.select %lz, %one_r, %in#2 : {_t((W, hkv, r), 'i1')}, {ROW}")
    emit(f"    %l_b = stablehlo.broadcast_in_dim %lsafe, dims = [0, 1, 2] : ({ROW}) -> {ACC}")
    emit(f"    %o0 = stablehlo.divide %in#3, %l_b : {ACC}")
    emit(f"    %o1 = stablehlo.reshape %o0 : ({ACC}) -> {_t((W, hkv, TQ, g, d), f32)}")
    emit(f"    %o2 = stablehlo.transpose %o1, dims = [0, 2, 1, 3, 4] : ({_t((W, hkv, TQ, g, d), f32)}) -> "
         f"{_t((W, TQ, hkv, g, d), f32)}")
    emit(f"    %o3 = stablehlo.reshape %o2 : ({_t((W, TQ, hkv, g, d), f32)}) -> {OUTG}")
    emit(f"    %outn = stablehlo.dynamic_update_slice %out, %o3, %start, %zero_i, %zero_i, %zero_i : "
         f"({Q}, {OUTG}, {I}, {I}, {I}, {I}) -> {Q}")
    emit(f"    %gn = stablehlo.add %gi, %one_i : {I}")
    emit(f"    stablehlo.return %gn, %outn : {I}, {Q}")
    emit("  }")
    emit(f"  return %res#1 : {Q}")
    emit("}")
    return "\n".join(lines) + "\n"


_ELEM = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}


@functools.lru_cache(maxsize=None)
def _op(scale, tq, w):
    """The custom op of one variant and softmax scale (the text depends on
    the inputs' shapes: one kernel variant each)."""
    from torch_tpu import library

    def text(q, kv, tables, q_pos, chunks, groups, real):
        n, _, hq, d = q.shape
        num_blocks, block_size, hkv, _ = kv.shape
        elem = "i16" if kv.dtype == torch.int16 else _ELEM[kv.dtype]
        return kernel_text(n, tq, w, hq, hkv, d, num_blocks, block_size, tables.shape[1], elem, scale, real)

    ops = {}
    for dtype, real in _ELEM.items():
        name = (f"torch_tpu_vllm::ragged_attention_{real}_{tq}x{w}_" +
                repr(float(scale)).replace(".", "_").replace("-", "m"))
        ops[dtype] = library.stablehlo_op(name, functools.partial(text, real=real), num_inputs=6)
    return ops


@functools.lru_cache(maxsize=None)
def _host_op(scale):
    """The custom op of the host kernel's call for a softmax scale, one per
    cache value dtype (the text depends on the inputs' shapes)."""
    from torch_tpu import library

    def text(query, kv, out_index, *per, real):
        elem = "i16" if kv.dtype == torch.int16 else _ELEM[kv.dtype]
        shapes = tuple(tuple(tuple(x.shape) for x in per[k:k + 4]) for k in range(0, len(per), 5))
        return host_kernel_text(tuple(query.shape), tuple(kv.shape), elem, shapes, scale, real)

    ops = {}
    for dtype, real in _ELEM.items():
        name = f"torch_tpu_vllm::ragged_attention_host_{real}_" + repr(float(scale)).replace(".", "_").replace("-", "m")
        ops[dtype] = library.stablehlo_op(name, functools.partial(text, real=real),
                                          num_inputs=3 + 5 * len(VARIANTS))
    return ops


def cache_storage(dtype):
    """The dtype a KV cache of `dtype` values is kept in: 16-bit floats as
    their bits (int16).  XLA CPU widens a bfloat16 gather to float32 by
    converting its operand, the whole cache, on every call (outside the
    kernel's loop); an int16 gather moves the blocks' bits and the kernel
    converts only those.  (The cache is written with `to_storage`.)"""
    return torch.int16 if dtype in (torch.bfloat16, torch.float16) else dtype


def to_storage(t, dtype):
    """t as `dtype` values in the cache's storage dtype."""
    t = t.to(dtype)
    return t.view(torch.int16) if cache_storage(dtype) is torch.int16 else t


def attention(query, kv_cache, per, out_index, scale, kv_dtype=None):
    """softmax(q k^T * scale, causal) v for every token of the step.

    query [T, Hq, D]; kv_cache [NB, BS, Hkv, 2D] of kv_dtype values
    (int16 storage for 16-bit floats: `cache_storage`; kv_dtype defaults to
    the cache's dtype); per and out_index: `plan`'s, on the device.
    Returns [T, Hq, D] float32 (row t: token t)."""
    kv_dtype = kv_dtype or kv_cache.dtype
    t, hq, d = query.shape
    if host_kernel() and kv_cache.dtype in (torch.float32, torch.int16) and d <= HOST_MAX_D:
        # one call: the C kernel gathers each item's rows and places each
        # token's result itself
        ins = [x for var in VARIANTS for x in per[var.name]]
        return _host_op(float(scale))[kv_dtype](query.float().contiguous(), kv_cache, out_index, *ins)
    outs = []
    for var in VARIANTS:
        q_index, q_pos, tables, chunks, groups = per[var.name]
        n = q_index.shape[0]
        q = query.index_select(0, q_index.reshape(-1)).float().view(n, var.tq, hq, d)
        out = _op(float(scale), var.tq, var.w)[kv_dtype](q, kv_cache, tables, q_pos, chunks, groups)
        outs.append(out.view(n * var.tq, hq, d))
    return torch.cat(outs).index_select(0, out_index)
