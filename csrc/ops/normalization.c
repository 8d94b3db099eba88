/* normalization.c - batch norm (training with running-stat updates, eval)
 * and layer norm, forward and backward.  Statistics run in float32 for the
 * half types; optional weight / bias / running stats are passed only when
 * present (has_* attrs say which), positional in the order each rule's
 * comment gives; backward ops emit only the grads their output_mask asks for.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ops/toolkit.h"

/* Broadcast x of shape `keep` (x's dims correspond to dims `keep_dims` of t). */
static tpu_hlo_value_t bcast_keep(tpu_op_ctx_t *c, tpu_hlo_value_t x, const tpu_hlo_type_t *t,
                                     const int64_t *keep_dims) {
  const tpu_hlo_type_t *xt = tpu_hlo_type_of(c->f, x);
  if (!xt) return TPU_HLO_NONE;
  tpu_hlo_type_t to = *t;
  to.dtype = xt->dtype;
  return tpu_hlo_broadcast_in_dim(c->f, x, to, keep_dims);
}


/* ---- batch norm ------------------------------------------------------------- */

/* native_batch_norm: inputs (input [N,C,...], [weight], [bias],
 * [running_mean, running_var], momentum, eps); attrs [training, has_weight,
 * has_bias, has_running, stat_dtype].  Outputs: training -> (out,
 * save_mean [C], save_invstd [C] (stat_dtype)) plus (new_running_mean,
 * new_running_var) when has_running (running_var updated with the unbiased
 * batch variance, as PyTorch); eval -> (out) only (the adapter makes the
 * empty save tensors). */
static void rule_native_batch_norm(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  int training = (int)tpu_op_int(c, 0), hw = (int)tpu_op_int(c, 1), hb = (int)tpu_op_int(c, 2),
      hr = (int)tpu_op_int(c, 3);
  tpu_dtype_t sdt = (tpu_dtype_t)tpu_op_int(c, 4);
  int need = 1 + hw + hb + 2 * hr + 2;
  if (c->nin != need) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: expected %d inputs for the given flags, got %d", c->name, need, c->nin);
    return;
  }
  int iw = 1, ib = 1 + hw, irm = 1 + hw + hb, irv = irm + 1, imom = 1 + hw + hb + 2 * hr, ieps = imom + 1;
  tpu_hlo_type_t xt = tpu_op_type(c, c->in[0]);
  if (xt.rank < 2) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: running_mean should contain %lld elements not ...; input must have at least 2 dims",
                c->name, (long long)(xt.rank ? xt.dims[0] : 0));
    return;
  }
  if (!tpu_op_check_float(c, xt.dtype)) return;
  if (!training && !hr) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: running_mean must be defined in evaluation mode", c->name);
    return;
  }
  int64_t C = xt.dims[1];
  for (int i = 1; i < imom; i++) {
    tpu_hlo_type_t pt = tpu_op_type(c, c->in[i]);
    if (pt.rank != 1 || pt.dims[0] != C) {
      char b1[64];
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: expected weight/bias/running stats of %lld elements, got %s",
                  c->name, (long long)C, tpu_op_shape_str(&pt, b1, sizeof b1));
      return;
    }
  }
  tpu_dtype_t acc = tpu_op_opmath(xt.dtype);
  tpu_hlo_type_t at = xt;
  at.dtype = acc;
  int64_t rd[TPU_MAX_RANK];
  int nrd = 0;
  int64_t n = 1;
  for (int i = 0; i < xt.rank; i++)
    if (i != 1) {
      rd[nrd++] = i;
      n *= xt.dims[i];
    }
  tpu_hlo_value_t x = tpu_hlo_cast(f, c->in[0], acc);
  tpu_hlo_type_t ct = tpu_hlo_type_make(acc, 1, &C);
  tpu_hlo_value_t eps = tpu_op_scalar_as(c, c->in[ieps], acc, &ct);
  tpu_hlo_value_t mean, var, invstd;
  if (training) {
    mean = DIV(c, tpu_op_sum(c, x, rd, nrd), tpu_hlo_constant(f, ct, (double)n));
    tpu_hlo_value_t xc = SUB(c, x, tpu_op_broadcast_along(c, mean, &at, 1));
    var = DIV(c, tpu_op_sum(c, MUL(c, xc, xc), rd, nrd), tpu_hlo_constant(f, ct, (double)n));
  } else {
    mean = tpu_hlo_cast(f, c->in[irm], acc);
    var = tpu_hlo_cast(f, c->in[irv], acc);
  }
  invstd = tpu_hlo_unary(f, "rsqrt", ADD(c, var, eps));
  tpu_hlo_value_t scale = invstd, shift;
  if (hw) scale = MUL(c, scale, tpu_hlo_cast(f, c->in[iw], acc));
  shift = tpu_hlo_unary(f, "negate", MUL(c, mean, scale));
  if (hb) shift = ADD(c, shift, tpu_hlo_cast(f, c->in[ib], acc));
  tpu_hlo_value_t y = ADD(c, MUL(c, x, tpu_op_broadcast_along(c, scale, &at, 1)), tpu_op_broadcast_along(c, shift, &at, 1));
  tpu_hlo_value_t outs[5];
  int no = 0;
  outs[no++] = tpu_hlo_cast(f, y, xt.dtype);
  if (training) {
    outs[no++] = tpu_hlo_cast(f, mean, sdt);
    outs[no++] = tpu_hlo_cast(f, invstd, sdt);
    if (hr) {
      tpu_hlo_value_t m = tpu_op_scalar_as(c, c->in[imom], acc, &ct);
      tpu_hlo_value_t one_m = SUB(c, tpu_hlo_constant(f, ct, 1.0), m);
      tpu_dtype_t rmd = tpu_op_type(c, c->in[irm]).dtype, rvd = tpu_op_type(c, c->in[irv]).dtype;
      tpu_hlo_value_t rm = ADD(c, MUL(c, one_m, tpu_hlo_cast(f, c->in[irm], acc)),
                                  MUL(c, m, mean));
      double corr = n > 1 ? (double)n / (double)(n - 1) : INFINITY;
      tpu_hlo_value_t uv = MUL(c, var, tpu_hlo_constant(f, ct, corr));
      tpu_hlo_value_t rv = ADD(c, MUL(c, one_m, tpu_hlo_cast(f, c->in[irv], acc)),
                                  MUL(c, m, uv));
      outs[no++] = tpu_hlo_cast(f, rm, rmd);
      outs[no++] = tpu_hlo_cast(f, rv, rvd);
    }
  }
  tpu_op_set_outputs(c, no, outs);
}

/* native_batch_norm_backward: inputs (grad_out, input, [weight],
 * [running_mean, running_var], [save_mean, save_invstd], eps); attrs
 * [train, has_weight, has_running, has_save, mask0, mask1, mask2].
 * train uses save_mean/save_invstd; eval uses the running stats.  Emits the
 * masked gradients in order (grad_input, grad_weight, grad_bias); grad_weight
 * and grad_bias take the weight's dtype (the input's when absent). */
static void rule_native_batch_norm_backward(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  int train = (int)tpu_op_int(c, 0), hw = (int)tpu_op_int(c, 1), hr = (int)tpu_op_int(c, 2),
      hs = (int)tpu_op_int(c, 3);
  int m[3] = {(int)tpu_op_int(c, 4), (int)tpu_op_int(c, 5), (int)tpu_op_int(c, 6)};
  int need = 2 + hw + 2 * hr + 2 * hs + 1;
  if (c->nin != need) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: expected %d inputs for the given flags, got %d", c->name, need, c->nin);
    return;
  }
  int iw = 2, irm = 2 + hw, irv = irm + 1, ism = 2 + hw + 2 * hr, isi = ism + 1, ieps = need - 1;
  if ((train && !hs) || (!train && !hr)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: %s must be defined", c->name, train ? "save_mean" : "running_mean");
    return;
  }
  tpu_hlo_type_t xt = tpu_op_type(c, c->in[1]);
  tpu_dtype_t acc = tpu_op_opmath(xt.dtype);
  tpu_hlo_type_t at = xt;
  at.dtype = acc;
  int64_t C = xt.dims[1];
  tpu_hlo_type_t ct = tpu_hlo_type_make(acc, 1, &C);
  int64_t rd[TPU_MAX_RANK];
  int nrd = 0;
  int64_t n = 1;
  for (int i = 0; i < xt.rank; i++)
    if (i != 1) {
      rd[nrd++] = i;
      n *= xt.dims[i];
    }
  tpu_hlo_value_t x = tpu_hlo_cast(f, c->in[1], acc), g = tpu_hlo_cast(f, c->in[0], acc);
  tpu_hlo_value_t mean, invstd;
  if (train) {
    mean = tpu_hlo_cast(f, c->in[ism], acc);
    invstd = tpu_hlo_cast(f, c->in[isi], acc);
  } else {
    mean = tpu_hlo_cast(f, c->in[irm], acc);
    invstd = tpu_hlo_unary(f, "rsqrt", ADD(c, tpu_hlo_cast(f, c->in[irv], acc), tpu_op_scalar_as(c, c->in[ieps], acc, &ct)));
  }
  tpu_hlo_value_t w = hw ? tpu_hlo_cast(f, c->in[iw], acc) : tpu_hlo_constant(f, ct, 1.0);
  tpu_dtype_t wdt = hw ? tpu_op_type(c, c->in[iw]).dtype : xt.dtype;
  tpu_hlo_value_t xc = SUB(c, x, tpu_op_broadcast_along(c, mean, &at, 1));
  tpu_hlo_value_t sum_g = tpu_op_sum(c, g, rd, nrd);
  tpu_hlo_value_t dotp = tpu_op_sum(c, MUL(c, g, xc), rd, nrd);
  tpu_hlo_value_t outs[3];
  int no = 0;
  if (m[0]) {
    tpu_hlo_value_t gi;
    if (train) {
      tpu_hlo_value_t nn = tpu_hlo_constant(f, ct, (double)n);
      tpu_hlo_value_t gmean = DIV(c, sum_g, nn);
      tpu_hlo_value_t proj = DIV(c, MUL(c, dotp, MUL(c, invstd, invstd)), nn);
      tpu_hlo_value_t t = SUB(c, g, MUL(c, xc, tpu_op_broadcast_along(c, proj, &at, 1)));
      t = SUB(c, t, tpu_op_broadcast_along(c, gmean, &at, 1));
      gi = MUL(c, t, tpu_op_broadcast_along(c, MUL(c, invstd, w), &at, 1));
    } else {
      gi = MUL(c, g, tpu_op_broadcast_along(c, MUL(c, invstd, w), &at, 1));
    }
    outs[no++] = tpu_hlo_cast(f, gi, xt.dtype);
  }
  if (m[1]) outs[no++] = tpu_hlo_cast(f, MUL(c, dotp, invstd), wdt);
  if (m[2]) outs[no++] = tpu_hlo_cast(f, sum_g, wdt);
  if (!no) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: output_mask selects no gradient", c->name);
    return;
  }
  tpu_op_set_outputs(c, no, outs);
}

/* ---- layer norm -------------------------------------------------------------- */

static int ln_setup(tpu_op_ctx_t *c, const tpu_hlo_type_t *xt, int64_t nnorm, int *axis, int64_t *M) {
  if (nnorm < 1 || nnorm > xt->rank) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: normalized_shape of %lld dims does not fit input of %d dims",
                c->name, (long long)nnorm, xt->rank);
    return 0;
  }
  *axis = xt->rank - (int)nnorm;
  *M = 1;
  for (int i = *axis; i < xt->rank; i++) *M *= xt->dims[i];
  return 1;
}

/* Stats shape: x.shape[:axis] + [1]*nnorm. */
static tpu_hlo_value_t ln_stat_shape(tpu_op_ctx_t *c, tpu_hlo_value_t s, const tpu_hlo_type_t *xt, int axis) {
  int64_t d[TPU_MAX_RANK];
  for (int i = 0; i < xt->rank; i++) d[i] = i < axis ? xt->dims[i] : 1;
  return tpu_hlo_reshape(c->f, s, xt->rank, d);
}

/* native_layer_norm: inputs (input, [weight], [bias], eps); attrs [nnorm
 * (number of trailing normalized dims), has_weight, has_bias, stat_dtype]
 * -> (out, mean, rstd) with mean/rstd of shape input.shape[:axis] + [1]*nnorm. */
static void rule_native_layer_norm(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  int64_t nnorm = tpu_op_int(c, 0);
  int hw = (int)tpu_op_int(c, 1), hb = (int)tpu_op_int(c, 2);
  tpu_dtype_t sdt = (tpu_dtype_t)tpu_op_int(c, 3);
  if (c->nin != 2 + hw + hb) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: expected %d inputs for the given flags, got %d", c->name, 2 + hw + hb, c->nin);
    return;
  }
  tpu_hlo_type_t xt = tpu_op_type(c, c->in[0]);
  int axis;
  int64_t M;
  if (!ln_setup(c, &xt, nnorm, &axis, &M)) return;
  if (!tpu_op_check_float(c, xt.dtype)) return;
  for (int i = 1; i <= hw + hb; i++) {
    tpu_hlo_type_t pt = tpu_op_type(c, c->in[i]);
    int ok = pt.rank == nnorm;
    for (int d = 0; ok && d < pt.rank; d++) ok = pt.dims[d] == xt.dims[axis + d];
    if (!ok) {
      char b1[64], b2[64];
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: Expected weight/bias to be of same shape as normalized_shape, but got weight of shape %s and input of shape %s",
                  c->name, tpu_op_shape_str(&pt, b1, sizeof b1), tpu_op_shape_str(&xt, b2, sizeof b2));
      return;
    }
  }
  tpu_dtype_t acc = tpu_op_opmath(xt.dtype);
  tpu_hlo_type_t at = xt;
  at.dtype = acc;
  int64_t rd[TPU_MAX_RANK], keep[TPU_MAX_RANK], lead[TPU_MAX_RANK], wkeep[TPU_MAX_RANK];
  int nrd = 0;
  for (int i = axis; i < xt.rank; i++) rd[nrd++] = i;
  for (int i = 0; i < axis; i++) keep[i] = i;
  for (int i = 0; i < nrd; i++) wkeep[i] = axis + i;
  for (int i = 0; i < axis; i++) lead[i] = xt.dims[i];
  tpu_hlo_type_t lt = tpu_hlo_type_make(acc, axis, lead);
  tpu_hlo_value_t x = tpu_hlo_cast(f, c->in[0], acc);
  tpu_hlo_value_t mean = DIV(c, tpu_op_sum(c, x, rd, nrd), tpu_hlo_constant(f, lt, (double)M));
  tpu_hlo_value_t xc = SUB(c, x, bcast_keep(c, mean, &at, keep));
  tpu_hlo_value_t var = DIV(c, tpu_op_sum(c, MUL(c, xc, xc), rd, nrd), tpu_hlo_constant(f, lt, (double)M));
  tpu_hlo_value_t rstd = tpu_hlo_unary(f, "rsqrt", ADD(c, var, tpu_op_scalar_as(c, c->in[1 + hw + hb], acc, &lt)));
  tpu_hlo_value_t y = MUL(c, xc, bcast_keep(c, rstd, &at, keep));
  if (hw) y = MUL(c, y, bcast_keep(c, tpu_hlo_cast(f, c->in[1], acc), &at, wkeep));
  if (hb) y = ADD(c, y, bcast_keep(c, tpu_hlo_cast(f, c->in[1 + hw], acc), &at, wkeep));
  tpu_hlo_value_t outs[3] = {tpu_hlo_cast(f, y, xt.dtype), ln_stat_shape(c, tpu_hlo_cast(f, mean, sdt), &xt, axis),
                             ln_stat_shape(c, tpu_hlo_cast(f, rstd, sdt), &xt, axis)};
  tpu_op_set_outputs(c, 3, outs);
}

/* native_layer_norm_backward: inputs (grad_out, input, mean, rstd, [weight],
 * [bias]); attrs [nnorm, has_weight, has_bias, mask0, mask1, mask2].
 * Emits the masked gradients in order. */
static void rule_native_layer_norm_backward(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  int64_t nnorm = tpu_op_int(c, 0);
  int hw = (int)tpu_op_int(c, 1), hb = (int)tpu_op_int(c, 2);
  int m[3] = {(int)tpu_op_int(c, 3), (int)tpu_op_int(c, 4), (int)tpu_op_int(c, 5)};
  if (c->nin != 4 + hw + hb) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: expected %d inputs for the given flags, got %d", c->name, 4 + hw + hb, c->nin);
    return;
  }
  tpu_hlo_type_t xt = tpu_op_type(c, c->in[1]);
  int axis;
  int64_t M;
  if (!ln_setup(c, &xt, nnorm, &axis, &M)) return;
  tpu_dtype_t acc = tpu_op_opmath(xt.dtype);
  tpu_hlo_type_t at = xt;
  at.dtype = acc;
  int64_t rd[TPU_MAX_RANK], keep[TPU_MAX_RANK], lead[TPU_MAX_RANK], wkeep[TPU_MAX_RANK], ld[TPU_MAX_RANK];
  int nrd = 0;
  for (int i = axis; i < xt.rank; i++) rd[nrd++] = i;
  for (int i = 0; i < axis; i++) keep[i] = ld[i] = i;
  for (int i = 0; i < nrd; i++) wkeep[i] = axis + i;
  for (int i = 0; i < axis; i++) lead[i] = xt.dims[i];
  tpu_hlo_type_t lt = tpu_hlo_type_make(acc, axis, lead);
  tpu_hlo_value_t x = tpu_hlo_cast(f, c->in[1], acc), g = tpu_hlo_cast(f, c->in[0], acc);
  tpu_hlo_value_t mean = tpu_hlo_reshape(f, tpu_hlo_cast(f, c->in[2], acc), axis, lead);
  tpu_hlo_value_t rstd = tpu_hlo_reshape(f, tpu_hlo_cast(f, c->in[3], acc), axis, lead);
  tpu_hlo_value_t xhat = MUL(c, SUB(c, x, bcast_keep(c, mean, &at, keep)),
                                bcast_keep(c, rstd, &at, keep));
  tpu_hlo_value_t outs[3];
  int no = 0;
  if (m[0]) {
    tpu_hlo_value_t gw = hw ? MUL(c, g, bcast_keep(c, tpu_hlo_cast(f, c->in[4], acc), &at, wkeep)) : g;
    tpu_hlo_value_t Mc = tpu_hlo_constant(f, lt, (double)M);
    tpu_hlo_value_t a = DIV(c, tpu_op_sum(c, gw, rd, nrd), Mc);
    tpu_hlo_value_t b = DIV(c, tpu_op_sum(c, MUL(c, gw, xhat), rd, nrd), Mc);
    tpu_hlo_value_t t = SUB(c, gw, bcast_keep(c, a, &at, keep));
    t = SUB(c, t, MUL(c, xhat, bcast_keep(c, b, &at, keep)));
    t = MUL(c, t, bcast_keep(c, rstd, &at, keep));
    outs[no++] = tpu_hlo_cast(f, t, xt.dtype);
  }
  (void)ld;
  int64_t lead_dims[TPU_MAX_RANK];
  for (int i = 0; i < axis; i++) lead_dims[i] = i;
  if (m[1]) {
    tpu_dtype_t wdt = hw ? tpu_op_type(c, c->in[4]).dtype : xt.dtype;
    outs[no++] = tpu_hlo_cast(f, tpu_op_sum(c, MUL(c, g, xhat), lead_dims, axis), wdt);
  }
  if (m[2]) {
    tpu_dtype_t bdt = hb ? tpu_op_type(c, c->in[4 + hw]).dtype : xt.dtype;
    outs[no++] = tpu_hlo_cast(f, tpu_op_sum(c, g, lead_dims, axis), bdt);
  }
  if (!no) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: output_mask selects no gradient", c->name);
    return;
  }
  tpu_op_set_outputs(c, no, outs);
}

const tpu_op_rule_t tpu_rules_normalization[] = {
    {"native_batch_norm", rule_native_batch_norm, 3, 7},
    {"native_batch_norm_backward", rule_native_batch_norm_backward, 3, 8},
    {"native_layer_norm", rule_native_layer_norm, 2, 4},
    {"native_layer_norm_backward", rule_native_layer_norm_backward, 4, 6},
    {NULL, NULL, 0, 0},
};
