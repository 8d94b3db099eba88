/* pooling.c - max / average / adaptive pooling over 2 spatial dims (with
 * indices, ceil_mode, count_include_pad, divisor_override, as PyTorch) and
 * their backward ops, max_unpool2d, and fractional max pooling in 2-d and
 * 3-d.  Inputs are N C H W or unbatched
 * C H W; sums and divisors run in float32 for the half types.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/toolkit.h"

typedef tpu_hlo_value_t V;

/* ---- pooling ----------------------------------------------------------------- */

/* PyTorch's pooling_output_shape. */
static int64_t pool_out(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil, int ceil_mode) {
  int64_t num = in + 2 * pad - dil * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t o = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
  if (ceil_mode && (o - 1) * stride >= in + pad) o--;
  return o;
}

typedef struct {
  int64_t k[2], s[2], p[2], d[2];
  int ceil_mode;
  int64_t in[2], out[2];
  int batched;
  int64_t lead[2]; /* N, C (N = 1 when unbatched) */
} pool_t;

/* Common checks.  x: [N,C,H,W] or [C,H,W]. */
static int pool_setup(tpu_op_ctx_t *c, const tpu_hlo_type_t *xt, pool_t *pl) {
  if (xt->rank != 3 && xt->rank != 4) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: Expected 3D or 4D (batch mode) tensor for input, got %dD", c->name,
                xt->rank);
    return 0;
  }
  pl->batched = xt->rank == 4;
  pl->lead[0] = pl->batched ? xt->dims[0] : 1;
  pl->lead[1] = xt->dims[xt->rank - 3];
  for (int i = 0; i < 2; i++) {
    pl->in[i] = xt->dims[xt->rank - 2 + i];
    if (pl->k[i] <= 0 || pl->s[i] <= 0 || pl->d[i] <= 0) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: kernel size, stride and dilation should be greater than zero",
                  c->name);
      return 0;
    }
    if (pl->p[i] < 0 || pl->p[i] > pl->k[i] / 2) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                  "%s: pad should be at most half of effective kernel size, but got pad=%lld, kernel_size=%lld",
                  c->name, (long long)pl->p[i], (long long)pl->k[i]);
      return 0;
    }
    pl->out[i] = pool_out(pl->in[i], pl->k[i], pl->p[i], pl->s[i], pl->d[i], pl->ceil_mode);
    if (pl->out[i] < 1) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                  "%s: Given input size: (%lldx%lldx%lld). Calculated output size: (%lldx%lldx%lld). Output size "
                  "is too small",
                  c->name, (long long)pl->lead[1], (long long)pl->in[0], (long long)pl->in[1],
                  (long long)pl->lead[1], (long long)pl->out[0], (long long)pl->out[1]);
      return 0;
    }
  }
  return 1;
}

/* x as [N, C, H, W] (adds the batch dim when unbatched). */
static tpu_hlo_value_t pool_4d(tpu_op_ctx_t *c, tpu_hlo_value_t x, const pool_t *pl, int64_t h, int64_t w) {
  int64_t d[4] = {pl->lead[0], pl->lead[1], h, w};
  const tpu_hlo_type_t *t = tpu_hlo_type_of(c->f, x);
  if (t && t->rank == 4) return x;
  return tpu_hlo_reshape(c->f, x, 4, d);
}

static tpu_hlo_value_t pool_unbatch(tpu_op_ctx_t *c, tpu_hlo_value_t y, const pool_t *pl) {
  if (pl->batched) return y;
  return tpu_op_unbatch(c, y);
}

/* Running (value, index) max over candidate slices; PyTorch's rule: a
 * candidate replaces the best if it is greater or NaN. */
static void argmax_step(tpu_op_ctx_t *c, tpu_hlo_value_t *best, tpu_hlo_value_t *bidx, tpu_hlo_value_t v,
                           tpu_hlo_value_t idx, int is_float) {
  if (*best == TPU_HLO_NONE) {
    *best = v;
    *bidx = idx;
    return;
  }
  tpu_hlo_value_t upd = tpu_hlo_compare(c->f, "GT", v, *best);
  if (is_float) upd = tpu_hlo_binary(c->f, "or", upd, tpu_hlo_compare(c->f, "NE", v, v));
  *best = tpu_hlo_select(c->f, upd, v, *best);
  *bidx = tpu_hlo_select(c->f, upd, idx, *bidx);
}

static int pool_attrs(tpu_op_ctx_t *c, pool_t *pl, int with_dil) {
  int i = 0;
  memset(pl, 0, sizeof *pl);
  pl->k[0] = tpu_op_int(c, i++); pl->k[1] = tpu_op_int(c, i++);
  pl->s[0] = tpu_op_int(c, i++); pl->s[1] = tpu_op_int(c, i++);
  pl->p[0] = tpu_op_int(c, i++); pl->p[1] = tpu_op_int(c, i++);
  if (with_dil) {
    pl->d[0] = tpu_op_int(c, i++);
    pl->d[1] = tpu_op_int(c, i++);
  } else {
    pl->d[0] = pl->d[1] = 1;
  }
  pl->ceil_mode = (int)tpu_op_int(c, i++);
  return i;
}

/* max_pool2d_with_indices: inputs (self [N,C,H,W] or [C,H,W]); attrs
 * [kH, kW, sH, sW, padH, padW, dilH, dilW, ceil_mode] -> (values, indices
 * s64: flat h*W + w into the input plane, as PyTorch). */
static void rule_max_pool2d_with_indices(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  pool_t pl;
  pool_attrs(c, &pl, 1);
  tpu_hlo_type_t xt = tpu_op_type(c, c->in[0]);
  if (!pool_setup(c, &xt, &pl)) return;
  tpu_hlo_value_t x = pool_4d(c, c->in[0], &pl, pl.in[0], pl.in[1]);
  int64_t lo[4] = {0, 0, pl.p[0], pl.p[1]}, hi[4] = {0, 0, 0, 0}, in0[4] = {0, 0, 0, 0};
  for (int i = 0; i < 2; i++) {
    int64_t need = (pl.out[i] - 1) * pl.s[i] + pl.d[i] * (pl.k[i] - 1) + 1 - pl.in[i] - pl.p[i];
    hi[2 + i] = need > 0 ? need : 0;
  }
  tpu_hlo_value_t xp = tpu_hlo_pad(f, x, tpu_op_lowest(c, xt.dtype), lo, hi, in0);
  int64_t od[4] = {pl.lead[0], pl.lead[1], pl.out[0], pl.out[1]};
  tpu_hlo_type_t ot = tpu_hlo_type_make(TPU_S64, 4, od);
  tpu_hlo_value_t ioh = tpu_hlo_iota(f, ot, 2), iow = tpu_hlo_iota(f, ot, 3);
  /* base row / col: oh*s - p */
  tpu_hlo_value_t rbase = SUB(c, MUL(c, ioh, tpu_hlo_constant_i64(f, ot, pl.s[0])),
                                 tpu_hlo_constant_i64(f, ot, pl.p[0]));
  tpu_hlo_value_t cbase = SUB(c, MUL(c, iow, tpu_hlo_constant_i64(f, ot, pl.s[1])),
                                 tpu_hlo_constant_i64(f, ot, pl.p[1]));
  tpu_hlo_value_t best = TPU_HLO_NONE, bidx = TPU_HLO_NONE;
  int is_float = tpu_dtype_is_float(xt.dtype);
  for (int64_t a = 0; a < pl.k[0]; a++) {
    for (int64_t b = 0; b < pl.k[1]; b++) {
      int64_t st[4] = {0, 0, a * pl.d[0], b * pl.d[1]};
      int64_t lim[4] = {pl.lead[0], pl.lead[1], st[2] + (pl.out[0] - 1) * pl.s[0] + 1,
                        st[3] + (pl.out[1] - 1) * pl.s[1] + 1};
      int64_t strd[4] = {1, 1, pl.s[0], pl.s[1]};
      tpu_hlo_value_t v = tpu_hlo_slice(f, xp, st, lim, strd);
      tpu_hlo_value_t r = ADD(c, rbase, tpu_hlo_constant_i64(f, ot, a * pl.d[0]));
      tpu_hlo_value_t cc = ADD(c, cbase, tpu_hlo_constant_i64(f, ot, b * pl.d[1]));
      tpu_hlo_value_t idx = ADD(c, MUL(c, r, tpu_hlo_constant_i64(f, ot, pl.in[1])), cc);
      argmax_step(c, &best, &bidx, v, idx, is_float);
    }
  }
  tpu_hlo_value_t outs[2] = {pool_unbatch(c, best, &pl), pool_unbatch(c, bidx, &pl)};
  tpu_op_set_outputs(c, 2, outs);
}

/* Scatter-add of grad [N,C,OH,OW] at flat plane indices idx into a zero
 * [N,C,H,W] (max-pool backward). */
static tpu_hlo_value_t plane_scatter_add(tpu_op_ctx_t *c, tpu_hlo_value_t grad, tpu_hlo_value_t idx,
                                            const pool_t *pl) {
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_type_t gt = tpu_op_type(c, grad);
  tpu_dtype_t acc = tpu_op_opmath(gt.dtype);
  int64_t nc = pl->lead[0] * pl->lead[1], hw = pl->in[0] * pl->in[1], ohw = pl->out[0] * pl->out[1];
  int64_t d3[3] = {nc, ohw, 1};
  tpu_hlo_type_t it = tpu_hlo_type_make(TPU_S64, 3, d3);
  tpu_hlo_value_t i3 = tpu_hlo_reshape(f, tpu_hlo_cast(f, idx, TPU_S64), 3, d3);
  tpu_hlo_value_t base = MUL(c, tpu_hlo_iota(f, it, 0), tpu_hlo_constant_i64(f, it, hw));
  int64_t d2[2] = {nc * ohw, 1};
  tpu_hlo_value_t flat = tpu_hlo_reshape(f, ADD(c, i3, base), 2, d2);
  int64_t d1 = nc * ohw;
  tpu_hlo_value_t upd = tpu_hlo_reshape(f, tpu_hlo_cast(f, grad, acc), 1, &d1);
  int64_t zn = nc * hw;
  tpu_hlo_value_t zero = tpu_hlo_constant(f, tpu_hlo_type_make(acc, 1, &zn), 0.0);
  tpu_hlo_scatter_dims_t sd;
  memset(&sd, 0, sizeof sd);
  sd.ninserted = 1;
  sd.inserted_window_dims[0] = 0;
  sd.nscatter_map = 1;
  sd.scatter_dims_to_operand_dims[0] = 0;
  sd.index_vector_dim = 1;
  tpu_hlo_value_t r = tpu_hlo_scatter(f, zero, flat, upd, &sd, "add");
  int64_t d4[4] = {pl->lead[0], pl->lead[1], pl->in[0], pl->in[1]};
  r = tpu_hlo_cast(f, tpu_hlo_reshape(f, r, 4, d4), gt.dtype);
  return pool_unbatch(c, r, pl);
}

/* max_pool2d_with_indices_backward: inputs (grad_output, self, indices);
 * attrs as max_pool2d_with_indices.  Gradient routed through the indices
 * (exactly PyTorch's tie behaviour). */
static void rule_max_pool2d_with_indices_backward(tpu_op_ctx_t *c) {
  pool_t pl;
  pool_attrs(c, &pl, 1);
  tpu_hlo_type_t xt = tpu_op_type(c, c->in[1]);
  if (!pool_setup(c, &xt, &pl)) return;
  tpu_hlo_type_t gt = tpu_op_type(c, c->in[0]), it = tpu_op_type(c, c->in[2]);
  if (tpu_hlo_type_numel(&gt) != pl.lead[0] * pl.lead[1] * pl.out[0] * pl.out[1] ||
      tpu_hlo_type_numel(&it) != tpu_hlo_type_numel(&gt)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: grad_output / indices shape does not match the pooling output",
                c->name);
    return;
  }
  tpu_op_set_output(c, plane_scatter_add(c, c->in[0], c->in[2], &pl));
}

/* Per-output divisors of avg_pool2d, [OH, OW] in dtype acc. */
static tpu_hlo_value_t avg_divisor(tpu_op_ctx_t *c, const pool_t *pl, int count_include_pad, tpu_dtype_t acc) {
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_value_t len[2];
  for (int i = 0; i < 2; i++) {
    tpu_hlo_type_t t = tpu_hlo_type_make(TPU_S64, 1, &pl->out[i]);
    tpu_hlo_value_t o = tpu_hlo_iota(f, t, 0);
    tpu_hlo_value_t hs = SUB(c, MUL(c, o, tpu_hlo_constant_i64(f, t, pl->s[i])),
                                tpu_hlo_constant_i64(f, t, pl->p[i]));
    tpu_hlo_value_t he = MIN(c, ADD(c, hs, tpu_hlo_constant_i64(f, t, pl->k[i])),
                                tpu_hlo_constant_i64(f, t, pl->in[i] + pl->p[i]));
    tpu_hlo_value_t l;
    if (count_include_pad) {
      l = SUB(c, he, hs);
    } else {
      tpu_hlo_value_t a = MAX(c, hs, tpu_hlo_constant_i64(f, t, 0));
      tpu_hlo_value_t b = MIN(c, he, tpu_hlo_constant_i64(f, t, pl->in[i]));
      l = SUB(c, b, a);
    }
    len[i] = tpu_hlo_convert(f, l, acc);
  }
  tpu_hlo_type_t t2 = tpu_hlo_type_make(acc, 2, pl->out);
  int64_t d0 = 0, d1 = 1;
  return MUL(c, tpu_hlo_broadcast_in_dim(f, len[0], t2, &d0),
                tpu_hlo_broadcast_in_dim(f, len[1], t2, &d1));
}

static int avg_attrs(tpu_op_ctx_t *c, pool_t *pl, int *cip, int64_t *divisor) {
  int i = pool_attrs(c, pl, 0);
  *cip = (int)tpu_op_int(c, i);
  *divisor = tpu_op_int(c, i + 1);
  return 1;
}

/* Divisor broadcast to [N,C,OH,OW] (acc type). */
static tpu_hlo_value_t avg_div_full(tpu_op_ctx_t *c, const pool_t *pl, int cip, int64_t divisor, tpu_dtype_t acc) {
  int64_t od[4] = {pl->lead[0], pl->lead[1], pl->out[0], pl->out[1]};
  tpu_hlo_type_t ot = tpu_hlo_type_make(acc, 4, od);
  if (divisor) return tpu_hlo_constant(c->f, ot, (double)divisor);
  int64_t keep[2] = {2, 3};
  return tpu_hlo_broadcast_in_dim(c->f, avg_divisor(c, pl, cip, acc), ot, keep);
}

/* avg_pool2d: inputs (self); attrs [kH, kW, sH, sW, padH, padW, ceil_mode,
 * count_include_pad, divisor_override (0 = none)]. */
static void rule_avg_pool2d(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  pool_t pl;
  int cip;
  int64_t divisor;
  avg_attrs(c, &pl, &cip, &divisor);
  tpu_hlo_type_t xt = tpu_op_type(c, c->in[0]);
  if (!pool_setup(c, &xt, &pl)) return;
  if (!tpu_op_check_float(c, xt.dtype)) return;
  tpu_dtype_t acc = tpu_op_opmath(xt.dtype);
  tpu_hlo_value_t x = tpu_hlo_cast(f, pool_4d(c, c->in[0], &pl, pl.in[0], pl.in[1]), acc);
  int64_t lo[4] = {0, 0, pl.p[0], pl.p[1]}, hi[4] = {0, 0, 0, 0}, in0[4] = {0, 0, 0, 0};
  for (int i = 0; i < 2; i++) hi[2 + i] = (pl.out[i] - 1) * pl.s[i] + pl.k[i] - pl.in[i] - pl.p[i];
  tpu_hlo_value_t xp = tpu_hlo_pad(f, x, tpu_hlo_scalar(f, acc, 0.0), lo, hi, in0);
  int64_t win[4] = {1, 1, pl.k[0], pl.k[1]}, str[4] = {1, 1, pl.s[0], pl.s[1]};
  tpu_hlo_value_t s = tpu_hlo_reduce_window(f, xp, tpu_hlo_scalar(f, acc, 0.0), win, str, NULL, NULL, NULL, "add");
  tpu_hlo_value_t y = DIV(c, s, avg_div_full(c, &pl, cip, divisor, acc));
  tpu_op_set_output(c, pool_unbatch(c, tpu_hlo_cast(f, y, xt.dtype), &pl));
}

/* avg_pool2d_backward: inputs (grad_output, self); attrs as avg_pool2d. */
static void rule_avg_pool2d_backward(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  pool_t pl;
  int cip;
  int64_t divisor;
  avg_attrs(c, &pl, &cip, &divisor);
  tpu_hlo_type_t xt = tpu_op_type(c, c->in[1]);
  if (!pool_setup(c, &xt, &pl)) return;
  if (!tpu_op_check_float(c, xt.dtype)) return;
  tpu_dtype_t acc = tpu_op_opmath(xt.dtype);
  tpu_hlo_value_t g = tpu_hlo_cast(f, pool_4d(c, c->in[0], &pl, pl.out[0], pl.out[1]), acc);
  g = DIV(c, g, avg_div_full(c, &pl, cip, divisor, acc));
  /* transpose of reduce_window(sum, k, s) over the padded input */
  int64_t lo[4] = {0, 0, pl.k[0] - 1, pl.k[1] - 1}, hi[4] = {0, 0, pl.k[0] - 1, pl.k[1] - 1};
  int64_t inter[4] = {0, 0, pl.s[0] - 1, pl.s[1] - 1};
  tpu_hlo_value_t gp = tpu_hlo_pad(f, g, tpu_hlo_scalar(f, acc, 0.0), lo, hi, inter);
  int64_t win[4] = {1, 1, pl.k[0], pl.k[1]};
  tpu_hlo_value_t r = tpu_hlo_reduce_window(f, gp, tpu_hlo_scalar(f, acc, 0.0), win, NULL, NULL, NULL, NULL, "add");
  /* r covers the padded input [-p, H + hi): undo the padding */
  int64_t lo2[4] = {0, 0, -pl.p[0], -pl.p[1]}, hi2[4] = {0, 0, 0, 0}, z[4] = {0, 0, 0, 0};
  for (int i = 0; i < 2; i++) hi2[2 + i] = -((pl.out[i] - 1) * pl.s[i] + pl.k[i] - pl.in[i] - pl.p[i]);
  r = tpu_hlo_pad(f, r, tpu_hlo_scalar(f, acc, 0.0), lo2, hi2, z);
  tpu_op_set_output(c, pool_unbatch(c, tpu_hlo_cast(f, r, xt.dtype), &pl));
}

/* Adaptive pooling matrix [O, I] (acc type): row i averages [start, end). */
static tpu_hlo_value_t adaptive_matrix(tpu_op_ctx_t *c, int64_t O, int64_t I, tpu_dtype_t acc) {
  tpu_hlo_func_t *f = c->f;
  int64_t d[2] = {O, I};
  tpu_hlo_type_t it = tpu_hlo_type_make(TPU_S64, 2, d);
  tpu_hlo_value_t oi = tpu_hlo_iota(f, it, 0), ii = tpu_hlo_iota(f, it, 1);
  tpu_hlo_value_t cI = tpu_hlo_constant_i64(f, it, I), cO = tpu_hlo_constant_i64(f, it, O);
  tpu_hlo_value_t start = DIV(c, MUL(c, oi, cI), cO);
  tpu_hlo_value_t one = tpu_hlo_constant_i64(f, it, 1);
  tpu_hlo_value_t end = tpu_hlo_binary(c->f, "divide",
                               ADD(c, MUL(c, ADD(c, oi, one), cI),
                                      SUB(c, cO, one)),
                               cO);
  tpu_hlo_value_t in = tpu_hlo_binary(f, "and", tpu_hlo_compare(f, "GE", ii, start), tpu_hlo_compare(f, "LT", ii, end));
  tpu_hlo_type_t ft = tpu_hlo_type_make(acc, 2, d);
  tpu_hlo_value_t w = DIV(c, tpu_hlo_constant(f, ft, 1.0), tpu_hlo_convert(f, SUB(c, end, start), acc));
  return tpu_hlo_select(f, in, w, tpu_hlo_constant(f, ft, 0.0));
}

/* x [..., A, B] (rank r) with Ma [A', A], Mb [B', B] -> [..., A', B']. */
static tpu_hlo_value_t apply_2d(tpu_op_ctx_t *c, tpu_hlo_value_t x, tpu_hlo_value_t Ma, tpu_hlo_value_t Mb) {
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_type_t t = tpu_op_type(c, x);
  int r = t.rank;
  tpu_hlo_dot_dims_t dd;
  memset(&dd, 0, sizeof dd);
  dd.ncontract = 1;
  dd.lhs_contract[0] = r - 1;
  dd.rhs_contract[0] = 1;
  tpu_hlo_value_t y = tpu_hlo_dot_general(f, x, Mb, &dd, TPU_DTYPE_INVALID); /* [..., A, B'] */
  dd.lhs_contract[0] = r - 2;
  y = tpu_hlo_dot_general(f, y, Ma, &dd, TPU_DTYPE_INVALID); /* [..., B', A'] */
  int64_t perm[TPU_MAX_RANK];
  for (int i = 0; i < r; i++) perm[i] = i;
  perm[r - 2] = r - 1;
  perm[r - 1] = r - 2;
  return tpu_hlo_transpose(f, y, perm);
}

static tpu_hlo_value_t transpose2(tpu_op_ctx_t *c, tpu_hlo_value_t m) {
  int64_t perm[2] = {1, 0};
  return tpu_hlo_transpose(c->f, m, perm);
}

/* _adaptive_avg_pool2d: inputs (self [N,C,H,W] or [C,H,W]); attrs [OH, OW]. */
static void rule_adaptive_avg_pool2d(tpu_op_ctx_t *c) {
  tpu_hlo_type_t xt = tpu_op_type(c, c->in[0]);
  int64_t OH = tpu_op_int(c, 0), OW = tpu_op_int(c, 1);
  if (xt.rank != 3 && xt.rank != 4) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: Expected 3D or 4D tensor, but got %dD", c->name, xt.rank);
    return;
  }
  if (OH < 0 || OW < 0) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: output_size must be non-negative", c->name);
    return;
  }
  if (!tpu_op_check_float(c, xt.dtype)) return;
  tpu_dtype_t acc = tpu_op_opmath(xt.dtype);
  int64_t H = xt.dims[xt.rank - 2], W = xt.dims[xt.rank - 1];
  tpu_hlo_value_t y = apply_2d(c, tpu_hlo_cast(c->f, c->in[0], acc), adaptive_matrix(c, OH, H, acc),
                                  adaptive_matrix(c, OW, W, acc));
  tpu_op_set_output(c, tpu_hlo_cast(c->f, y, xt.dtype));
}

/* _adaptive_avg_pool2d_backward: inputs (grad_output, self). */
static void rule_adaptive_avg_pool2d_backward(tpu_op_ctx_t *c) {
  tpu_hlo_type_t gt = tpu_op_type(c, c->in[0]), xt = tpu_op_type(c, c->in[1]);
  if (gt.rank != xt.rank || gt.rank < 3) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: grad_output and input ranks differ", c->name);
    return;
  }
  tpu_dtype_t acc = tpu_op_opmath(xt.dtype);
  int r = xt.rank;
  tpu_hlo_value_t Mh = adaptive_matrix(c, gt.dims[r - 2], xt.dims[r - 2], acc);
  tpu_hlo_value_t Mw = adaptive_matrix(c, gt.dims[r - 1], xt.dims[r - 1], acc);
  tpu_hlo_value_t y = apply_2d(c, tpu_hlo_cast(c->f, c->in[0], acc), transpose2(c, Mh), transpose2(c, Mw));
  tpu_op_set_output(c, tpu_hlo_cast(c->f, y, xt.dtype));
}

/* adaptive_max_pool2d: inputs (self [N,C,H,W] or [C,H,W]); attrs [OH, OW]
 * -> (values, indices s64 flat into the plane). */
static void rule_adaptive_max_pool2d(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_type_t xt = tpu_op_type(c, c->in[0]);
  int64_t O[2] = {tpu_op_int(c, 0), tpu_op_int(c, 1)};
  if (xt.rank != 3 && xt.rank != 4) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: Expected 3D or 4D tensor, but got %dD", c->name, xt.rank);
    return;
  }
  pool_t pl;
  memset(&pl, 0, sizeof pl);
  pl.batched = xt.rank == 4;
  pl.lead[0] = pl.batched ? xt.dims[0] : 1;
  pl.lead[1] = xt.dims[xt.rank - 3];
  pl.in[0] = xt.dims[xt.rank - 2];
  pl.in[1] = xt.dims[xt.rank - 1];
  pl.out[0] = O[0];
  pl.out[1] = O[1];
  if (O[0] <= 0 || O[1] <= 0 || pl.in[0] <= 0 || pl.in[1] <= 0 || O[0] > 4096 || O[1] > 4096) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: unsupported output size (%lld, %lld) for input %lldx%lld", c->name,
                (long long)O[0], (long long)O[1], (long long)pl.in[0], (long long)pl.in[1]);
    return;
  }
  tpu_hlo_value_t x = pool_4d(c, c->in[0], &pl, pl.in[0], pl.in[1]);
  int64_t kmax[2] = {0, 0};
  for (int a = 0; a < 2; a++)
    for (int64_t i = 0; i < O[a]; i++) {
      int64_t s = i * pl.in[a] / O[a], e = ((i + 1) * pl.in[a] + O[a] - 1) / O[a];
      if (e - s > kmax[a]) kmax[a] = e - s;
    }
  int64_t rows[4096], cols[4096];
  int64_t od[4] = {pl.lead[0], pl.lead[1], O[0], O[1]};
  tpu_hlo_type_t ot = tpu_hlo_type_make(TPU_S64, 4, od);
  tpu_hlo_value_t best = TPU_HLO_NONE, bidx = TPU_HLO_NONE;
  int is_float = tpu_dtype_is_float(xt.dtype);
  for (int64_t a = 0; a < kmax[0]; a++) {
    for (int64_t i = 0; i < O[0]; i++) {
      int64_t s = i * pl.in[0] / O[0], e = ((i + 1) * pl.in[0] + O[0] - 1) / O[0];
      rows[i] = s + a < e ? s + a : e - 1;
    }
    tpu_hlo_value_t xr = tpu_op_take_const(c, x, 2, rows, O[0]); /* [N,C,OH,W] */
    tpu_hlo_value_t rv = tpu_hlo_constant_i64s(f, tpu_hlo_type_make(TPU_S64, 1, &O[0]), rows);
    int64_t k2 = 2;
    tpu_hlo_value_t rfull = tpu_hlo_broadcast_in_dim(f, rv, ot, &k2);
    for (int64_t b = 0; b < kmax[1]; b++) {
      for (int64_t j = 0; j < O[1]; j++) {
        int64_t s = j * pl.in[1] / O[1], e = ((j + 1) * pl.in[1] + O[1] - 1) / O[1];
        cols[j] = s + b < e ? s + b : e - 1;
      }
      tpu_hlo_value_t v = tpu_op_take_const(c, xr, 3, cols, O[1]);
      tpu_hlo_value_t cv = tpu_hlo_constant_i64s(f, tpu_hlo_type_make(TPU_S64, 1, &O[1]), cols);
      int64_t k3 = 3;
      tpu_hlo_value_t cfull = tpu_hlo_broadcast_in_dim(f, cv, ot, &k3);
      tpu_hlo_value_t idx = ADD(c, MUL(c, rfull, tpu_hlo_constant_i64(f, ot, pl.in[1])), cfull);
      argmax_step(c, &best, &bidx, v, idx, is_float);
    }
  }
  tpu_hlo_value_t outs[2] = {pool_unbatch(c, best, &pl), pool_unbatch(c, bidx, &pl)};
  tpu_op_set_outputs(c, 2, outs);
}

/* adaptive_max_pool2d_backward: inputs (grad_output, self, indices). */
static void rule_adaptive_max_pool2d_backward(tpu_op_ctx_t *c) {
  tpu_hlo_type_t xt = tpu_op_type(c, c->in[1]), gt = tpu_op_type(c, c->in[0]);
  if (xt.rank != 3 && xt.rank != 4) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: Expected 3D or 4D tensor, but got %dD", c->name, xt.rank);
    return;
  }
  pool_t pl;
  memset(&pl, 0, sizeof pl);
  pl.batched = xt.rank == 4;
  pl.lead[0] = pl.batched ? xt.dims[0] : 1;
  pl.lead[1] = xt.dims[xt.rank - 3];
  pl.in[0] = xt.dims[xt.rank - 2];
  pl.in[1] = xt.dims[xt.rank - 1];
  pl.out[0] = gt.dims[gt.rank - 2];
  pl.out[1] = gt.dims[gt.rank - 1];
  tpu_op_set_output(c, plane_scatter_add(c, c->in[0], c->in[2], &pl));
}

/* max_unpool2d: (x [N, C, H, W], indices [N, C, H, W] s64); ints [oh, ow]
 * -> [N, C, oh, ow]: zeros with out[n, c].flat[indices] = x.  Indices out
 * of range are dropped (PyTorch raises); duplicates keep one of the values. */
static void rule_max_unpool2d(tpu_op_ctx_t *c) {
  tpu_hlo_type_t t = tpu_op_type(c, c->in[0]), it = tpu_op_type(c, c->in[1]);
  int64_t oh = tpu_op_int(c, 0), ow = tpu_op_int(c, 1);
  if (t.rank != 4 || it.rank != 4 || !tpu_dtype_is_int(it.dtype)) {
    tpu_op_fail(c, TPU_UNIMPLEMENTED, "max_unpool2d: expected 4-d input and indices");
    return;
  }
  for (int i = 0; i < 4; i++)
    if (t.dims[i] != it.dims[i]) {
      tpu_op_fail(c, TPU_UNIMPLEMENTED, "max_unpool2d: indices shape differs");
      return;
    }
  int64_t R = t.dims[0] * t.dims[1], M = t.dims[2] * t.dims[3], O = oh * ow;
  int64_t d2[2] = {R, M}, flat = R * M, d1[2] = {R * M, 1};
  V idx = tpu_hlo_reshape(c->f, tpu_hlo_cast(c->f, c->in[1], TPU_S64), 2, d2);
  tpu_hlo_type_t rt = tpu_hlo_type_make(TPU_S64, 2, d2);
  V row = tpu_hlo_iota(c->f, rt, 0);
  /* out-of-range indices go past the end (dropped by the scatter) */
  V bad = OR(c, CMPK(c, "LT", idx, 0.0), CMPK(c, "GE", idx, (double)O));
  V pos = ADD(c, MUL(c, row, tpu_hlo_constant_i64(c->f, rt, O)), idx);
  pos = SEL(c, bad, tpu_hlo_constant_i64(c->f, rt, R * O), pos);
  pos = tpu_hlo_reshape(c->f, pos, 2, d1);
  V upd = tpu_hlo_reshape(c->f, c->in[0], 1, &flat);
  int64_t ro = R * O;
  V z = tpu_hlo_constant(c->f, tpu_hlo_type_make(t.dtype, 1, &ro), 0.0);
  tpu_hlo_scatter_dims_t s;
  memset(&s, 0, sizeof s);
  s.ninserted = 1;
  s.nscatter_map = 1;
  s.index_vector_dim = 1;
  V r = flat == 0 ? z : tpu_hlo_scatter(c->f, z, pos, upd, &s, "replace");
  int64_t d4[4] = {t.dims[0], t.dims[1], oh, ow};
  tpu_op_set_output(c, tpu_hlo_reshape(c->f, r, 4, d4));
}

/* ---- fractional max pooling ---------------------------------------------- */

/* Fractional max pooling (Graham 2014), 2-d and 3-d.  PyTorch's CPU kernel, followed exactly: for every (batch, plane) and every
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
 * family's scatter_add rule, called by the adapter). */

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

const tpu_op_rule_t tpu_rules_pooling[] = {
    {"max_pool2d_with_indices", rule_max_pool2d_with_indices, 1, 1},
    {"max_pool2d_with_indices_backward", rule_max_pool2d_with_indices_backward, 3, 3},
    {"avg_pool2d", rule_avg_pool2d, 1, 1},
    {"avg_pool2d_backward", rule_avg_pool2d_backward, 2, 2},
    {"adaptive_avg_pool2d", rule_adaptive_avg_pool2d, 1, 1},
    {"adaptive_avg_pool2d_backward", rule_adaptive_avg_pool2d_backward, 2, 2},
    {"adaptive_max_pool2d", rule_adaptive_max_pool2d, 1, 1},
    {"adaptive_max_pool2d_backward", rule_adaptive_max_pool2d_backward, 3, 3},
    {"max_unpool2d", rule_max_unpool2d, 2, 2},
    {"fractional_max_pool", rule_fractional_max_pool, 2, 2},
    {NULL, NULL, 0, 0},
};
