/* fractional_pool.c - fractional max pooling (Graham 2014), 2-d and 3-d
 * (see ops.h for how a rule is written).
 *
 * PyTorch's CPU kernel, followed exactly: for every (batch, plane) and every
 * spatial dim d, one random sample u in [0, 1) places the output windows:
 *   alpha    = (in_d - pool_d) / (out_d - 1)          (in the input dtype)
 *   start[i] = (int)((i + u) * alpha) - (int)(u * alpha)   for i < out_d - 1
 *   start[out_d - 1] = in_d - pool_d
 * and each output is the max of the pool window at those starts, with the
 * index (flat in the plane) of the first maximum in row-major window order,
 * or of the last NaN when the window holds NaNs (the CPU loop's
 * `val > max || isnan(val)`).  The samples of a plane are ordered (W, H) in
 * 2-d and (T, H, W) in 3-d, as PyTorch's.
 *
 * The backward is a scatter-add of the gradient at those indices (the index
 * family's scatter_add rule, called by the adapter).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/ops.h"

/* fractional_max_pool: inputs (self [N, C, S_1..S_k], samples [N, C, k]
 * (self's dtype)); attrs [k (2 or 3), pool[k], out[k]].  -> (values [N, C,
 * out_1..out_k], indices s64 (flat in the S plane), same shape). */
static void rule_fractional_max_pool(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  int k = (int)tpu_op_int(c, 0);
  if (k != 2 && k != 3) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: %d spatial dims (2 or 3 supported)", c->name, k);
    return;
  }
  int64_t pool[3], out[3], in[3];
  for (int d = 0; d < k; d++) {
    pool[d] = tpu_op_int(c, 1 + d);
    out[d] = tpu_op_int(c, 1 + k + d);
  }
  tpu_hlo_type_t xt = tpu_op_type(c, c->in[0]), st = tpu_op_type(c, c->in[1]);
  char b1[64], b2[64];
  if (xt.rank != 2 + k || !tpu_dtype_is_float(xt.dtype)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: expected a %dD float input [N, C, ...], got %s of %s", c->name, 2 + k,
                tpu_op_shape_str(&xt, b1, sizeof b1), tpu_dtype_name(xt.dtype));
    return;
  }
  int64_t N = xt.dims[0], C = xt.dims[1], M = N * C, plane = 1;
  if (st.rank != 3 || st.dims[0] != N || st.dims[1] != C || st.dims[2] != k || st.dtype != xt.dtype) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: expected samples of shape [%lld, %lld, %d] and dtype %s, got %s of %s",
                c->name, (long long)N, (long long)C, k, tpu_dtype_name(xt.dtype), tpu_op_shape_str(&st, b2, sizeof b2),
                tpu_dtype_name(st.dtype));
    return;
  }
  for (int d = 0; d < k; d++) {
    in[d] = xt.dims[2 + d];
    plane *= in[d];
    if (pool[d] < 1 || out[d] < 1 || out[d] + pool[d] - 1 > in[d]) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: pool %lld and output %lld do not fit input size %lld (dim %d)",
                  c->name, (long long)pool[d], (long long)out[d], (long long)in[d], d);
      return;
    }
  }
  if (M == 0) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: empty input %s", c->name, tpu_op_shape_str(&xt, b1, sizeof b1));
    return;
  }
  tpu_dtype_t dt = xt.dtype;
  /* F = [M, out_1..out_k, pool_1..pool_k]: every element of every window */
  int R = 1 + 2 * k;
  int64_t F[TPU_MAX_RANK];
  F[0] = M;
  for (int d = 0; d < k; d++) {
    F[1 + d] = out[d];
    F[1 + k + d] = pool[d];
  }
  tpu_hlo_type_t ft = tpu_hlo_type_make(TPU_S64, R, F);
  int64_t m2[2] = {M, k};
  tpu_hlo_value_t smp = tpu_hlo_reshape(f, c->in[1], 2, m2);
  tpu_hlo_value_t idx = TPU_HLO_NONE;
  int64_t stride = plane;
  for (int d = 0; d < k; d++) {
    stride /= in[d];
    int sidx = k == 2 ? 1 - d : d; /* 2-d samples are (W, H) */
    int64_t s0[2] = {0, sidx}, s1[2] = {M, sidx + 1}, one[2] = {1, 1};
    tpu_hlo_value_t u = tpu_hlo_reshape(f, tpu_hlo_slice(f, smp, s0, s1, one), 1, &M);
    int64_t mo[2] = {M, out[d]};
    tpu_hlo_type_t mot = tpu_hlo_type_make(dt, 2, mo), mos = tpu_hlo_type_make(TPU_S64, 2, mo);
    int64_t d0 = 0;
    tpu_hlo_value_t uu = tpu_hlo_broadcast_in_dim(f, u, mot, &d0);
    tpu_hlo_value_t i_s = tpu_hlo_iota(f, mos, 1);
    tpu_hlo_value_t seq;
    tpu_hlo_value_t last = tpu_hlo_constant(f, mos, (double)(in[d] - pool[d]));
    if (out[d] > 1) {
      /* alpha rounded to the input dtype, as the CPU kernel's scalar_t alpha */
      double alpha = dt == TPU_F64 ? (double)(in[d] - pool[d]) / (double)(out[d] - 1)
                                   : (double)((float)(in[d] - pool[d]) / (float)(out[d] - 1));
      tpu_hlo_value_t al = tpu_hlo_constant(f, mot, alpha);
      tpu_hlo_value_t a = tpu_hlo_binary(f, "multiply", tpu_hlo_binary(f, "add", tpu_hlo_iota(f, mot, 1), uu), al);
      tpu_hlo_value_t b = tpu_hlo_binary(f, "multiply", uu, al);
      seq = tpu_hlo_binary(f, "subtract", tpu_hlo_convert(f, a, TPU_S64), tpu_hlo_convert(f, b, TPU_S64));
      tpu_hlo_value_t is_last = tpu_hlo_compare(f, "EQ", i_s, tpu_hlo_constant(f, mos, (double)(out[d] - 1)));
      seq = tpu_hlo_select(f, is_last, last, seq);
    } else {
      seq = last;
    }
    /* window positions along d: start + p, times the plane stride of d */
    int64_t mop[3] = {M, out[d], pool[d]};
    tpu_hlo_type_t mopt = tpu_hlo_type_make(TPU_S64, 3, mop);
    int64_t bd[2] = {0, 1};
    tpu_hlo_value_t pos = tpu_hlo_binary(f, "add", tpu_hlo_broadcast_in_dim(f, seq, mopt, bd), tpu_hlo_iota(f, mopt, 2));
    pos = tpu_hlo_binary(f, "multiply", pos, tpu_hlo_constant(f, mopt, (double)stride));
    int64_t into[3] = {0, 1 + d, 1 + k + d};
    tpu_hlo_value_t part = tpu_hlo_broadcast_in_dim(f, pos, ft, into);
    idx = idx == TPU_HLO_NONE ? part : tpu_hlo_binary(f, "add", idx, part);
  }
  /* gather every window element from the flat input */
  int64_t total = M * plane;
  tpu_hlo_value_t base = tpu_hlo_binary(f, "multiply", tpu_hlo_iota(f, ft, 0), tpu_hlo_constant(f, ft, (double)plane));
  tpu_hlo_value_t gidx = tpu_hlo_binary(f, "add", idx, base);
  tpu_hlo_gather_dims_t gd;
  memset(&gd, 0, sizeof gd);
  gd.ncollapsed = 1;
  gd.collapsed_slice_dims[0] = 0;
  gd.nstart_map = 1;
  gd.start_index_map[0] = 0;
  gd.index_vector_dim = R;
  gd.slice_sizes[0] = 1;
  tpu_hlo_value_t flat = tpu_hlo_reshape(f, c->in[0], 1, &total);
  tpu_hlo_value_t v = tpu_hlo_gather(f, flat, gidx, &gd);
  /* one window per row: [M, out..., P] */
  int64_t W[TPU_MAX_RANK], P = 1;
  W[0] = M;
  for (int d = 0; d < k; d++) {
    W[1 + d] = out[d];
    P *= pool[d];
  }
  W[1 + k] = P;
  int wr = 2 + k, red = 1 + k;
  v = tpu_hlo_reshape(f, v, wr, W);
  idx = tpu_hlo_reshape(f, idx, wr, W);
  tpu_hlo_type_t wt = tpu_hlo_type_make(dt, wr, W), ws = tpu_hlo_type_make(TPU_S64, wr, W);
  tpu_hlo_value_t iota_p = tpu_hlo_iota(f, ws, red);
  tpu_hlo_value_t isnan_v = tpu_hlo_compare(f, "NE", v, v);
  tpu_hlo_value_t last_nan = tpu_hlo_reduce(f, tpu_hlo_select(f, isnan_v, iota_p, tpu_hlo_constant(f, ws, -1.0)),
                                            tpu_hlo_scalar(f, TPU_S64, -1.0), (int64_t[]){red}, 1, "maximum");
  tpu_hlo_value_t vm = tpu_hlo_select(f, isnan_v, tpu_hlo_constant(f, wt, -INFINITY), v);
  tpu_hlo_value_t mx = tpu_hlo_reduce(f, vm, tpu_hlo_scalar(f, dt, -INFINITY), (int64_t[]){red}, 1, "maximum");
  int64_t keep[TPU_MAX_RANK];
  for (int i = 0; i < red; i++) keep[i] = i;
  tpu_hlo_value_t is_max = tpu_hlo_compare(f, "EQ", vm, tpu_hlo_broadcast_in_dim(f, mx, wt, keep));
  tpu_hlo_value_t first = tpu_hlo_reduce(f, tpu_hlo_select(f, is_max, iota_p, tpu_hlo_constant(f, ws, (double)P)),
                                         tpu_hlo_scalar(f, TPU_S64, (double)P), (int64_t[]){red}, 1, "minimum");
  tpu_hlo_type_t ot = tpu_hlo_type_make(TPU_S64, red, W);
  tpu_hlo_value_t has_nan = tpu_hlo_compare(f, "GE", last_nan, tpu_hlo_constant(f, ot, 0.0));
  tpu_hlo_value_t pick = tpu_hlo_select(f, has_nan, last_nan, first);
  tpu_hlo_value_t hit = tpu_hlo_compare(f, "EQ", iota_p, tpu_hlo_broadcast_in_dim(f, pick, ws, keep));
  tpu_hlo_value_t oidx = tpu_hlo_reduce(f, tpu_hlo_select(f, hit, idx, tpu_hlo_constant(f, ws, -1.0)),
                                        tpu_hlo_scalar(f, TPU_S64, -1.0), (int64_t[]){red}, 1, "maximum");
  tpu_hlo_type_t ovt = tpu_hlo_type_make(dt, red, W);
  tpu_hlo_value_t oval = tpu_hlo_select(f, has_nan, tpu_hlo_constant(f, ovt, NAN), mx);
  int64_t O[TPU_MAX_RANK];
  O[0] = N;
  O[1] = C;
  for (int d = 0; d < k; d++) O[2 + d] = out[d];
  tpu_hlo_value_t outs[2] = {tpu_hlo_reshape(f, oval, 2 + k, O), tpu_hlo_reshape(f, oidx, 2 + k, O)};
  tpu_op_set_outputs(c, 2, outs);
}

const tpu_op_rule_t tpu_rules_fractional_pool[] = {
    {"fractional_max_pool", rule_fractional_max_pool, 2, 2},
    {NULL, NULL, 0, 0},
};
