/* grouped_mm.c - grouped matrix multiply (torch._grouped_mm,
 * F.grouped_mm), the kernel of Mixture-of-Experts layers (see ops.h for how
 * a rule is written).
 *
 * Groups are given by `offs` (int32, monotone): group g covers positions
 * [offs[g-1], offs[g]) of the jagged dimension (offs[-1] = 0 before the
 * first group); positions at or past offs[G-1] belong to no group and give
 * zeros (CUDA and CPU leave them unwritten).  The layouts, as PyTorch's:
 *
 *   a [S, K]    b [G, K, N]  offs [G]  -> [S, N]     rows of a are jagged
 *   a [M, K]    b [K, N]     offs [G]  -> [G, M, N]  the contraction is jagged
 *   a [G, M, K] b [K, N]     offs [G]  -> [M, N]     columns of b are jagged
 *   a [G, M, K] b [G, K, N]  no offs   -> [G, M, N]  a batched matmul
 *
 * Offsets are device values, so the groups cannot become static slices:
 * each case is one dense dot_general over every group followed by a
 * group-membership mask (a select) and a sum over groups (or a mask on the
 * contraction).  That is G times the FLOPs of the jagged product, but it is
 * one static-shape program with no host read of the offsets, under eager and
 * torch.compile alike; MoE layers have few experts per device.
 */
#include <string.h>

#include "ops/ops.h"

typedef tpu_hlo_value_t V;

/* mask [G, L] (i1): position l is in group g.  offs: [G] integer values. */
static V gmm_group_mask(tpu_op_ctx_t *c, V offs, int64_t G, int64_t L) {
  tpu_hlo_func_t *f = c->f;
  V end = tpu_hlo_cast(f, offs, TPU_S64);
  V start;
  if (G == 1) {
    start = tpu_hlo_constant(f, tpu_hlo_type_make(TPU_S64, 1, &G), 0);
  } else {
    int64_t lo = 0, hi = G - 1, one = 1, st = 1;
    V head = tpu_hlo_slice(f, end, &lo, &hi, &st); /* offs[0 .. G-2] */
    V zero = tpu_hlo_constant(f, tpu_hlo_type_make(TPU_S64, 1, &one), 0);
    V parts[2] = {zero, head};
    start = tpu_hlo_concatenate(f, parts, 2, 0);
  }
  int64_t dims[2] = {G, L};
  tpu_hlo_type_t t = tpu_hlo_type_make(TPU_S64, 2, dims);
  int64_t d0 = 0;
  V pos = tpu_hlo_iota(f, t, 1);
  V s = tpu_hlo_broadcast_in_dim(f, start, t, &d0);
  V e = tpu_hlo_broadcast_in_dim(f, end, t, &d0);
  return tpu_hlo_binary(f, "and", tpu_hlo_compare(f, "GE", pos, s), tpu_hlo_compare(f, "LT", pos, e));
}

/* Zeroes x [.., G at dim gdim, .., L at dim ldim, ..] where position l is
 * not in group g. */
static V gmm_apply_mask(tpu_op_ctx_t *c, V x, V mask, int64_t gdim, int64_t ldim) {
  tpu_hlo_type_t t = tpu_op_type(c, x);
  tpu_hlo_type_t mt = t;
  mt.dtype = TPU_PRED;
  int64_t dims[2] = {gdim, ldim};
  V m = tpu_hlo_broadcast_in_dim(c->f, mask, mt, dims);
  return tpu_hlo_select(c->f, m, x, tpu_hlo_constant(c->f, t, 0));
}

static V gmm_sum(tpu_op_ctx_t *c, V x, int64_t dim) {
  tpu_dtype_t dt = tpu_op_type(c, x).dtype;
  return tpu_hlo_reduce(c->f, x, tpu_hlo_scalar(c->f, dt, 0), &dim, 1, "add");
}

/* grouped_mm: a, b[, offs]; ints [out dtype (0: a's)]. */
static void rule_grouped_mm(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_type_t at = tpu_op_type(c, c->in[0]);
  tpu_hlo_type_t bt = tpu_op_type(c, c->in[1]);
  tpu_dtype_t out_dt = tpu_op_nints(c) > 0 && tpu_op_int(c, 0) ? (tpu_dtype_t)tpu_op_int(c, 0) : at.dtype;
  int has_offs = c->nin > 2;
  char ab[96], bb[96];
  tpu_op_shape_str(&at, ab, sizeof ab);
  tpu_op_shape_str(&bt, bb, sizeof bb);
  if (at.dtype != bt.dtype || !tpu_dtype_is_float(at.dtype)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "grouped_mm: expected floating operands of one dtype, got %s and %s",
                tpu_dtype_name(at.dtype), tpu_dtype_name(bt.dtype));
    return;
  }
  if ((at.rank != 2 && at.rank != 3) || (bt.rank != 2 && bt.rank != 3)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "grouped_mm: Multiplicands must be 2D or 3D but got mat_a.dim()=%d and "
                "mat_b.dim()=%d", at.rank, bt.rank);
    return;
  }
  if ((at.rank == 2 || bt.rank == 2) != has_offs) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, has_offs ? "grouped_mm: Offsets tensor provided, but is not needed for "
                "3D/3D multiplicand layouts." : "grouped_mm: Offsets tensor not provided, but is needed for %dD/%dD "
                "multiplicand layouts.", at.rank, bt.rank);
    return;
  }
  int64_t G = 0;
  if (has_offs) {
    tpu_hlo_type_t ot = tpu_op_type(c, c->in[2]);
    if (ot.rank != 1 || !tpu_dtype_is_int(ot.dtype)) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "grouped_mm: Offsets tensor must be a 1D integer (int32) tensor");
      return;
    }
    G = ot.dims[0];
  }
  int64_t ka = at.dims[at.rank - 1], kb = bt.dims[bt.rank - 2];
  if (ka != kb) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "grouped_mm: contraction dimension of mat_a and mat_b must match "
                "(mat_a %s, mat_b %s)", ab, bb);
    return;
  }
  /* half operands accumulate in f32, as linalg.c's products */
  tpu_dtype_t acc = (at.dtype == TPU_F16 || at.dtype == TPU_BF16) ? TPU_F32 : TPU_DTYPE_INVALID;
  tpu_hlo_dot_dims_t dd;
  memset(&dd, 0, sizeof dd);
  dd.ncontract = 1;
  V res;
  V a = c->in[0], b = c->in[1];
  if (at.rank == 2 && bt.rank == 3) {
    /* [S, K] x [G, K, N] -> [S, G, N], keep g == group(row), sum over G */
    if (bt.dims[0] != G) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "grouped_mm: mat_b has %lld groups but offs has %lld",
                  (long long)bt.dims[0], (long long)G);
      return;
    }
    dd.lhs_contract[0] = 1;
    dd.rhs_contract[0] = 1;
    V all = tpu_hlo_dot_general(f, a, b, &dd, acc);
    V mask = gmm_group_mask(c, c->in[2], G, at.dims[0]);
    res = gmm_sum(c, gmm_apply_mask(c, all, mask, 1, 0), 1);
  } else if (at.rank == 2 && bt.rank == 2) {
    /* [M, K] x [K, N], K jagged -> [G, M, N]: a masked per group, then one dot */
    int64_t M = at.dims[0], K = at.dims[1];
    int64_t gdims[3] = {G, M, K}, keep[2] = {1, 2};
    V ag = tpu_hlo_broadcast_in_dim(f, a, tpu_hlo_type_make(at.dtype, 3, gdims), keep);
    V mask = gmm_group_mask(c, c->in[2], G, K);
    ag = gmm_apply_mask(c, ag, mask, 0, 2);
    dd.lhs_contract[0] = 2;
    dd.rhs_contract[0] = 0;
    res = tpu_hlo_dot_general(f, ag, b, &dd, acc);
  } else if (at.rank == 3 && bt.rank == 2) {
    /* [G, M, K] x [K, N], N jagged -> [G, M, N] masked on (g, n), summed over G */
    if (at.dims[0] != G) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "grouped_mm: mat_a has %lld groups but offs has %lld",
                  (long long)at.dims[0], (long long)G);
      return;
    }
    dd.lhs_contract[0] = 2;
    dd.rhs_contract[0] = 0;
    V all = tpu_hlo_dot_general(f, a, b, &dd, acc);
    V mask = gmm_group_mask(c, c->in[2], G, bt.dims[1]);
    res = gmm_sum(c, gmm_apply_mask(c, all, mask, 0, 2), 0);
  } else {
    if (at.dims[0] != bt.dims[0]) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "grouped_mm: batch sizes of mat_a %s and mat_b %s must match", ab, bb);
      return;
    }
    dd.nbatch = 1;
    dd.lhs_batch[0] = 0;
    dd.rhs_batch[0] = 0;
    dd.lhs_contract[0] = 2;
    dd.rhs_contract[0] = 1;
    res = tpu_hlo_dot_general(f, a, b, &dd, acc);
  }
  tpu_op_set_output(c, tpu_hlo_cast(f, res, out_dt));
}

const tpu_op_rule_t tpu_rules_grouped_mm[] = {
    {"grouped_mm", rule_grouped_mm, 2, 3},
    {NULL, NULL, 0, 0},
};
