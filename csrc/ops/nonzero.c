/* nonzero.c - the coordinates of a tensor's non-zero elements (nonzero,
 * nonzero_static, argwhere, boolean-mask indexing).  See ops.h for how a
 * rule is written.
 *
 * nonzero's result has a data-dependent shape [count, rank].  The rule has a
 * static one: it writes the coordinates into `rows` rows (the element count
 * for nonzero, `size` for nonzero_static), pads the rest with `fill`, and
 * returns the count as a second, 0-d output.  The Python adapter reads that
 * count (one 8-byte device->host read, the only host work) and returns the
 * first `count` rows as a view, so the program depends only on the input's
 * shape, never on the data.
 *
 * The computation: flat mask m (x != 0, row-major), pos = inclusive cumsum
 * of m - 1 (a log-step scan), each non-zero element's flat index scattered
 * to row pos (zero elements target row `rows`: out of bounds, dropped by the
 * scatter), then each row's flat index unravelled into coordinates. */
#include <string.h>

#include "ops/ops.h"

typedef tpu_hlo_value_t V;

/* Inclusive prefix sum of a 1-D s64 value (Hillis-Steele). */
static V nz_cumsum(tpu_op_ctx_t *c, V y, int64_t n) {
  V zero = tpu_hlo_scalar(c->f, TPU_S64, 0);
  for (int64_t k = 1; k < n; k *= 2) {
    int64_t start = 0, limit = n - k, lo = k, hi = 0, in = 0;
    V shifted = tpu_hlo_pad(c->f, tpu_hlo_slice(c->f, y, &start, &limit, NULL), zero, &lo, &hi, &in);
    y = tpu_hlo_binary(c->f, "add", y, shifted);
  }
  return y;
}

/* nonzero: x (any shape, any real dtype or bool; at least one element);
 * ints [rows, fill].  -> (coords s64 [rows, max(rank, 1)] (rows past the
 * count hold `fill`; a 0-d x is treated as [1]), count s64 0-d). */
static void rule_nonzero(tpu_op_ctx_t *c) {
  int64_t rows = tpu_op_int(c, 0), fill = tpu_op_int(c, 1);
  if (tpu_hlo_func_status(c->f)) return;
  tpu_hlo_type_t t = tpu_op_type(c, c->in[0]);
  if (tpu_dtype_is_complex(t.dtype)) {
    tpu_op_fail(c, TPU_UNIMPLEMENTED, "nonzero: complex input (%s)", tpu_dtype_name(t.dtype));
    return;
  }
  int64_t n = tpu_hlo_type_numel(&t);
  if (n == 0 || rows < 0) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "nonzero: %s input with %lld elements and %lld rows (needs >= 1 element)",
                tpu_dtype_name(t.dtype), (long long)n, (long long)rows);
    return;
  }
  int rank = t.rank ? t.rank : 1;
  int64_t dims[TPU_MAX_RANK];
  for (int i = 0; i < rank; i++) dims[i] = t.rank ? t.dims[i] : 1;
  tpu_hlo_type_t vt = tpu_hlo_type_make(TPU_S64, 1, &n);
  V flat = tpu_hlo_reshape(c->f, c->in[0], 1, &n);
  V m = t.dtype == TPU_PRED ? flat
                            : tpu_hlo_compare(c->f, "NE", flat, tpu_hlo_constant(c->f, tpu_op_type(c, flat), 0));
  V ms64 = tpu_hlo_convert(c->f, m, TPU_S64);
  V incl = nz_cumsum(c, ms64, n);
  int64_t last = n - 1;
  V count = tpu_hlo_reshape(c->f, tpu_hlo_slice(c->f, incl, &last, &n, NULL), 0, NULL);
  if (rows == 0) {
    tpu_hlo_type_t ot = tpu_hlo_type_make(TPU_S64, 2, (int64_t[]){0, rank});
    V outs[2] = {tpu_hlo_constant_i64(c->f, ot, 0), count};
    tpu_op_set_outputs(c, 2, outs);
    return;
  }
  /* row of each element: pos for non-zero ones, `rows` (dropped) otherwise */
  V pos = tpu_hlo_binary(c->f, "subtract", incl, tpu_hlo_constant_i64(c->f, vt, 1));
  V target = tpu_hlo_select(c->f, m, pos, tpu_hlo_constant_i64(c->f, vt, rows));
  tpu_hlo_type_t rt = tpu_hlo_type_make(TPU_S64, 1, &rows);
  V slots = tpu_hlo_constant_i64(c->f, rt, -1);
  tpu_hlo_scatter_dims_t sd;
  memset(&sd, 0, sizeof sd);
  sd.ninserted = 1;
  sd.inserted_window_dims[0] = 0;
  sd.nscatter_map = 1;
  sd.scatter_dims_to_operand_dims[0] = 0;
  sd.index_vector_dim = 1;
  sd.indices_are_sorted = false;
  V idx = tpu_hlo_reshape(c->f, target, 2, (int64_t[]){n, 1});
  V flat_idx = tpu_hlo_scatter(c->f, slots, idx, tpu_hlo_iota(c->f, vt, 0), &sd, "replace");
  V valid = tpu_hlo_compare(c->f, "GE", flat_idx, tpu_hlo_constant_i64(c->f, rt, 0));
  V fillv = tpu_hlo_constant_i64(c->f, rt, fill);
  V parts[TPU_MAX_RANK];
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; d--) {
    V q = tpu_hlo_binary(c->f, "divide", flat_idx, tpu_hlo_constant_i64(c->f, rt, stride));
    V r = tpu_hlo_binary(c->f, "remainder", q, tpu_hlo_constant_i64(c->f, rt, dims[d]));
    parts[d] = tpu_hlo_reshape(c->f, tpu_hlo_select(c->f, valid, r, fillv), 2, (int64_t[]){rows, 1});
    stride *= dims[d];
  }
  V coords = rank == 1 ? parts[0] : tpu_hlo_concatenate(c->f, parts, rank, 1);
  V outs[2] = {coords, count};
  tpu_op_set_outputs(c, 2, outs);
}

const tpu_op_rule_t tpu_rules_nonzero[] = {
    {"nonzero", rule_nonzero, 1, 1},
    {NULL, NULL, 0, 0},
};
