/* loss.c - the loss functions with a reduction (0 none, 1 mean, 2 sum, as
 * PyTorch): nll_loss (1-d and spatial, class weights, ignore_index), mse,
 * smooth_l1, huber, binary_cross_entropy, and their backward ops.  Sums run
 * in float32 for the half types.
 *
 * Errors only the data shows are device-side checks (ops.h), raised at the
 * next host wait with PyTorch's exception type and message: nll_loss with a
 * target outside [0, C) that is not ignore_index (IndexError "Target N is out
 * of bounds"), binary_cross_entropy with an input outside [0, 1].  The program
 * itself computes what XLA does (the target contributes 0, the log is
 * clamped at -100).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ops/toolkit.h"

/* Loss reduction of a per-element loss l (acc type) to out dtype. */
static tpu_hlo_value_t reduce_loss(tpu_op_ctx_t *c, tpu_hlo_value_t l, int64_t reduction, tpu_dtype_t out) {
  tpu_hlo_type_t t = tpu_op_type(c, l);
  if (reduction == 0) return tpu_hlo_cast(c->f, l, out);
  tpu_hlo_value_t s = tpu_op_sum_all(c, l);
  if (reduction == 1) {
    int64_t n = tpu_hlo_type_numel(&t);
    s = DIV(c, s, tpu_hlo_scalar(c->f, t.dtype, (double)n));
  }
  return tpu_hlo_cast(c->f, s, out);
}

/* Gradient scale for a loss backward: grad_output broadcast to t (acc type),
 * divided by numel for mean. */
static tpu_hlo_value_t loss_grad_scale(tpu_op_ctx_t *c, int gi, int64_t reduction, const tpu_hlo_type_t *t) {
  tpu_hlo_value_t g = tpu_hlo_broadcast_to(c->f, tpu_hlo_cast(c->f, c->in[gi], t->dtype), t->rank, t->dims);
  if (reduction == 1) g = DIV(c, g, tpu_hlo_constant(c->f, *t, (double)tpu_hlo_type_numel(t)));
  return g;
}

/* ---- losses ------------------------------------------------------------------------ */

/* One-hot mask (pred, self's shape) of target along the class dim. */
static tpu_hlo_value_t onehot(tpu_op_ctx_t *c, const tpu_hlo_type_t *xt, int cdim, tpu_hlo_value_t target) {
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_type_t it = *xt;
  it.dtype = TPU_S64;
  int64_t keep[TPU_MAX_RANK];
  int nk = 0;
  for (int i = 0; i < xt->rank; i++)
    if (i != cdim) keep[nk++] = i;
  tpu_hlo_value_t tb = tpu_hlo_broadcast_in_dim(f, tpu_hlo_cast(f, target, TPU_S64), it, keep);
  return tpu_hlo_compare(f, "EQ", tpu_hlo_iota(f, it, cdim), tb);
}

typedef struct {
  int cdim;
  tpu_hlo_type_t xt, tt;
  tpu_dtype_t acc;
  tpu_hlo_value_t onehot; /* pred, xt shape */
  tpu_hlo_value_t w;      /* per-target weight, tt shape (acc) with ignored = 0 */
} nll_t;

static int nll_setup(tpu_op_ctx_t *c, int ix, int it, int iw, int64_t ignore, nll_t *s) {
  tpu_hlo_func_t *f = c->f;
  s->xt = tpu_op_type(c, c->in[ix]);
  s->tt = tpu_op_type(c, c->in[it]);
  if (s->xt.rank < 1) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: input tensor should be 1D or 2D", c->name);
    return 0;
  }
  s->cdim = s->xt.rank == 1 ? 0 : 1;
  int ok = s->tt.rank == s->xt.rank - 1;
  for (int i = 0, j = 0; ok && i < s->xt.rank; i++) {
    if (i == s->cdim) continue;
    ok = s->xt.dims[i] == s->tt.dims[j++];
  }
  if (!ok) {
    char b1[64], b2[64];
    if (s->xt.rank == 2 && s->tt.rank == 1)
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: Expected input batch_size (%lld) to match target batch_size (%lld).",
                  c->name, (long long)s->xt.dims[0], (long long)s->tt.dims[0]);
    else
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: input %s and target %s shapes do not match", c->name,
                  tpu_op_shape_str(&s->xt, b1, sizeof b1), tpu_op_shape_str(&s->tt, b2, sizeof b2));
    return 0;
  }
  if (!tpu_dtype_is_int(s->tt.dtype)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: expected scalar type Long but found %s", c->name,
                tpu_dtype_name(s->tt.dtype));
    return 0;
  }
  if (!tpu_op_check_float(c, s->xt.dtype)) return 0;
  s->acc = tpu_op_opmath(s->xt.dtype);
  s->onehot = onehot(c, &s->xt, s->cdim, c->in[it]);
  tpu_hlo_type_t wt = s->tt;
  wt.dtype = s->acc;
  tpu_hlo_value_t w;
  if (iw >= 0) {
    tpu_hlo_type_t pw = tpu_op_type(c, c->in[iw]);
    int64_t C = s->xt.dims[s->cdim];
    if (pw.rank != 1 || pw.dims[0] != C) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: weight tensor should be defined either for all %lld classes or no classes but got weight tensor of shape: [%lld]",
                  c->name, (long long)C, (long long)(pw.rank ? pw.dims[0] : 0));
      return 0;
    }
    tpu_hlo_type_t xa = s->xt;
    xa.dtype = s->acc;
    tpu_hlo_value_t wb = tpu_op_broadcast_along(c, tpu_hlo_cast(f, c->in[iw], s->acc), &xa, s->cdim);
    tpu_hlo_value_t sel = tpu_hlo_select(f, s->onehot, wb, tpu_hlo_constant(f, xa, 0.0));
    int64_t cd = s->cdim;
    w = tpu_op_sum(c, sel, &cd, 1);
  } else {
    w = tpu_hlo_constant(f, wt, 1.0);
  }
  tpu_hlo_type_t tt64 = s->tt;
  tt64.dtype = TPU_S64;
  tpu_hlo_value_t ign = tpu_hlo_compare(f, "EQ", tpu_hlo_cast(f, c->in[it], TPU_S64), tpu_hlo_constant_i64(f, tt64, ignore));
  s->w = tpu_hlo_select(f, ign, tpu_hlo_constant(f, wt, 0.0), w);
  return 1;
}

/* nll_loss (nll_loss_forward, nll_loss2d_forward): inputs (self [N,C,...] or
 * [C], target [N,...] or [], [weight [C]]); attrs [reduction, ignore_index,
 * has_weight] -> (output, total_weight). */
static void rule_nll_loss(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  int64_t red = tpu_op_int(c, 0), ignore = tpu_op_int(c, 1);
  int hw = (int)tpu_op_int(c, 2);
  nll_t s;
  if (!nll_setup(c, 0, 1, hw ? 2 : -1, ignore, &s)) return;
  { /* a target outside [0, C) that is not ignore_index: the payload is that target */
    tpu_hlo_value_t t = tpu_hlo_cast(f, c->in[1], TPU_S64);
    tpu_hlo_type_t t64 = tpu_op_type(c, t);
    tpu_hlo_value_t ign = tpu_hlo_compare(f, "EQ", t, tpu_hlo_constant_i64(f, t64, ignore));
    tpu_op_check_index(c, tpu_hlo_select(f, ign, tpu_hlo_constant_i64(f, t64, 0), t), 0, s.xt.dims[s.cdim],
                       TPU_OUT_OF_RANGE, "nll_loss(): Target " TPU_OP_PAYLOAD " is out of bounds.");
  }
  tpu_hlo_type_t xa = s.xt;
  xa.dtype = s.acc;
  tpu_hlo_value_t picked = tpu_hlo_select(f, s.onehot, tpu_hlo_cast(f, c->in[0], s.acc), tpu_hlo_constant(f, xa, 0.0));
  int64_t cd = s.cdim;
  tpu_hlo_value_t xv = tpu_op_sum(c, picked, &cd, 1); /* target shape */
  tpu_hlo_value_t loss = tpu_hlo_unary(f, "negate", MUL(c, xv, s.w));
  tpu_hlo_value_t out, total;
  if (red == 0) {
    out = tpu_hlo_cast(f, loss, s.xt.dtype);
    total = tpu_hlo_scalar(f, s.xt.dtype, 0.0);
  } else {
    tpu_hlo_value_t sum = tpu_op_sum_all(c, loss), tw = tpu_op_sum_all(c, s.w);
    out = red == 1 ? DIV(c, sum, tw) : sum;
    out = tpu_hlo_cast(f, out, s.xt.dtype);
    total = tpu_hlo_cast(f, tw, s.xt.dtype);
  }
  tpu_hlo_value_t outs[2] = {out, total};
  tpu_op_set_outputs(c, 2, outs);
}

/* nll_loss_backward (and nll_loss2d_backward): inputs (grad_output, self,
 * target, [weight], total_weight); attrs [reduction, ignore_index,
 * has_weight] -> grad_input (self's shape). */
static void rule_nll_loss_backward(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  int64_t red = tpu_op_int(c, 0), ignore = tpu_op_int(c, 1);
  int hw = (int)tpu_op_int(c, 2);
  if (c->nin != 4 + hw) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: expected %d inputs, got %d", c->name, 4 + hw, c->nin);
    return;
  }
  nll_t s;
  if (!nll_setup(c, 1, 2, hw ? 3 : -1, ignore, &s)) return;
  tpu_hlo_type_t wt = s.tt;
  wt.dtype = s.acc;
  tpu_hlo_value_t g = tpu_hlo_broadcast_to(f, tpu_hlo_cast(f, c->in[0], s.acc), wt.rank, wt.dims);
  if (red == 1) {
    tpu_hlo_value_t tw = tpu_hlo_broadcast_to(f, tpu_hlo_cast(f, c->in[3 + hw], s.acc), wt.rank, wt.dims);
    g = DIV(c, g, tw);
  }
  tpu_hlo_value_t per = tpu_hlo_unary(f, "negate", MUL(c, g, s.w));
  /* ignored targets get 0, as on CPU, even when total_weight is 0 (0 * inf) */
  tpu_hlo_type_t t64 = s.tt;
  t64.dtype = TPU_S64;
  tpu_hlo_value_t ign = tpu_hlo_compare(f, "EQ", tpu_hlo_cast(f, c->in[2], TPU_S64), tpu_hlo_constant_i64(f, t64, ignore));
  per = tpu_hlo_select(f, ign, tpu_hlo_constant(f, wt, 0.0), per);
  tpu_hlo_type_t xa = s.xt;
  xa.dtype = s.acc;
  int64_t keep[TPU_MAX_RANK];
  int nk = 0;
  for (int i = 0; i < s.xt.rank; i++)
    if (i != s.cdim) keep[nk++] = i;
  tpu_hlo_value_t pb = tpu_hlo_broadcast_in_dim(f, per, xa, keep);
  tpu_hlo_value_t r = tpu_hlo_select(f, s.onehot, pb, tpu_hlo_constant(f, xa, 0.0));
  tpu_op_set_output(c, tpu_hlo_cast(f, r, s.xt.dtype));
}

/* Broadcast shape of inputs a, b in acc type; both converted. */
static int pair(tpu_op_ctx_t *c, int ia, int ib, tpu_hlo_value_t *a, tpu_hlo_value_t *b, tpu_hlo_type_t *t) {
  tpu_hlo_value_t v[2] = {c->in[ia], c->in[ib]};
  int64_t d[TPU_MAX_RANK];
  int r = tpu_op_broadcast_shape(c, v, 2, d);
  if (r < 0) return 0;
  tpu_dtype_t dt = tpu_op_type(c, c->in[ia]).dtype;
  if (!tpu_op_check_float(c, dt)) return 0;
  tpu_dtype_t acc = tpu_op_opmath(dt);
  *t = tpu_hlo_type_make(acc, r, d);
  *a = tpu_hlo_broadcast_to(c->f, tpu_hlo_cast(c->f, c->in[ia], acc), r, d);
  *b = tpu_hlo_broadcast_to(c->f, tpu_hlo_cast(c->f, c->in[ib], acc), r, d);
  return 1;
}

/* mse_loss: inputs (self, target); attrs [reduction]. */
static void rule_mse_loss(tpu_op_ctx_t *c) {
  tpu_hlo_value_t a, b;
  tpu_hlo_type_t t;
  if (!pair(c, 0, 1, &a, &b, &t)) return;
  tpu_hlo_value_t d = SUB(c, a, b);
  tpu_op_set_output(c, reduce_loss(c, MUL(c, d, d), tpu_op_int(c, 0), tpu_op_type(c, c->in[0]).dtype));
}

/* mse_loss_backward: inputs (grad_output, self, target); attrs [reduction]. */
static void rule_mse_loss_backward(tpu_op_ctx_t *c) {
  tpu_hlo_value_t a, b;
  tpu_hlo_type_t t;
  if (!pair(c, 1, 2, &a, &b, &t)) return;
  tpu_hlo_value_t g = loss_grad_scale(c, 0, tpu_op_int(c, 0), &t);
  tpu_hlo_value_t r = MUL(c, MUL(c, tpu_hlo_constant(c->f, t, 2.0), SUB(c, a, b)), g);
  tpu_op_set_output(c, tpu_hlo_cast(c->f, r, tpu_op_type(c, c->in[1]).dtype));
}

/* smooth_l1_loss: inputs (self, target, beta); attrs [reduction]. */
static void rule_smooth_l1_loss(tpu_op_ctx_t *c) {
  tpu_hlo_value_t a, b;
  tpu_hlo_type_t t;
  if (!pair(c, 0, 1, &a, &b, &t)) return;
  tpu_hlo_value_t beta = tpu_op_scalar_as(c, c->in[2], t.dtype, &t);
  tpu_hlo_value_t z = tpu_hlo_unary(c->f, "abs", SUB(c, a, b));
  tpu_hlo_value_t half = tpu_hlo_constant(c->f, t, 0.5);
  tpu_hlo_value_t q = DIV(c, MUL(c, half, MUL(c, z, z)), beta);
  tpu_hlo_value_t l = SUB(c, z, MUL(c, half, beta));
  tpu_hlo_value_t loss = tpu_hlo_select(c->f, tpu_hlo_compare(c->f, "LT", z, beta), q, l);
  tpu_op_set_output(c, reduce_loss(c, loss, tpu_op_int(c, 0), tpu_op_type(c, c->in[0]).dtype));
}

/* smooth_l1_loss_backward: inputs (grad_output, self, target, beta); attrs [reduction]. */
static void rule_smooth_l1_loss_backward(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_value_t a, b;
  tpu_hlo_type_t t;
  if (!pair(c, 1, 2, &a, &b, &t)) return;
  tpu_hlo_value_t beta = tpu_op_scalar_as(c, c->in[3], t.dtype, &t);
  tpu_hlo_value_t g = loss_grad_scale(c, 0, tpu_op_int(c, 0), &t);
  tpu_hlo_value_t x = SUB(c, a, b);
  tpu_hlo_value_t nbeta = tpu_hlo_unary(f, "negate", beta);
  tpu_hlo_value_t r = DIV(c, x, beta);
  r = tpu_hlo_select(f, tpu_hlo_compare(f, "GT", x, beta), tpu_hlo_constant(c->f, t, 1.0), r);
  r = tpu_hlo_select(f, tpu_hlo_compare(f, "LT", x, nbeta), tpu_hlo_constant(c->f, t, -1.0), r);
  tpu_op_set_output(c, tpu_hlo_cast(f, MUL(c, r, g), tpu_op_type(c, c->in[1]).dtype));
}

/* huber_loss: inputs (self, target, delta); attrs [reduction]. */
static void rule_huber_loss(tpu_op_ctx_t *c) {
  tpu_hlo_value_t a, b;
  tpu_hlo_type_t t;
  if (!pair(c, 0, 1, &a, &b, &t)) return;
  tpu_hlo_value_t delta = tpu_op_scalar_as(c, c->in[2], t.dtype, &t);
  tpu_hlo_value_t z = tpu_hlo_unary(c->f, "abs", SUB(c, a, b));
  tpu_hlo_value_t half = tpu_hlo_constant(c->f, t, 0.5);
  tpu_hlo_value_t q = MUL(c, half, MUL(c, z, z));
  tpu_hlo_value_t l = MUL(c, delta, SUB(c, z, MUL(c, half, delta)));
  tpu_hlo_value_t loss = tpu_hlo_select(c->f, tpu_hlo_compare(c->f, "LT", z, delta), q, l);
  tpu_op_set_output(c, reduce_loss(c, loss, tpu_op_int(c, 0), tpu_op_type(c, c->in[0]).dtype));
}

/* huber_loss_backward: inputs (grad_output, self, target, delta); attrs [reduction]. */
static void rule_huber_loss_backward(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_value_t a, b;
  tpu_hlo_type_t t;
  if (!pair(c, 1, 2, &a, &b, &t)) return;
  tpu_hlo_value_t delta = tpu_op_scalar_as(c, c->in[3], t.dtype, &t);
  tpu_hlo_value_t g = loss_grad_scale(c, 0, tpu_op_int(c, 0), &t);
  tpu_hlo_value_t x = SUB(c, a, b);
  tpu_hlo_value_t r = tpu_hlo_select(f, tpu_hlo_compare(f, "GT", x, delta), delta, x);
  r = tpu_hlo_select(f, tpu_hlo_compare(f, "LT", x, tpu_hlo_unary(f, "negate", delta)), tpu_hlo_unary(f, "negate", delta), r);
  tpu_op_set_output(c, tpu_hlo_cast(f, MUL(c, r, g), tpu_op_type(c, c->in[1]).dtype));
}

/* binary_cross_entropy: inputs (self, target, [weight]); attrs [reduction,
 * has_weight].  loss = -w (y max(log x, -100) + (1-y) max(log1p(-x), -100)). */
static void rule_binary_cross_entropy(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  int hw = (int)tpu_op_int(c, 1);
  tpu_hlo_type_t xt0 = tpu_op_type(c, c->in[0]), yt0 = tpu_op_type(c, c->in[1]);
  if (!tpu_hlo_type_equal(&xt0, &yt0) && tpu_hlo_type_numel(&xt0) != tpu_hlo_type_numel(&yt0)) {
    char b1[64], b2[64];
    tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                "%s: Using a target size (%s) that is different to the input size (%s) is deprecated. Please "
                "ensure they have the same size.",
                c->name, tpu_op_shape_str(&yt0, b1, sizeof b1), tpu_op_shape_str(&xt0, b2, sizeof b2));
    return;
  }
  tpu_hlo_value_t x, y;
  tpu_hlo_type_t t;
  if (!pair(c, 0, 1, &x, &y, &t)) return;
  tpu_hlo_value_t m100 = tpu_hlo_constant(c->f, t, -100.0), one = tpu_hlo_constant(c->f, t, 1.0);
  if (tpu_hlo_type_numel(&t) > 0) /* NaN fails too, as on CPU */
    tpu_op_check(c, tpu_hlo_binary(f, "and", tpu_hlo_compare(f, "GE", x, tpu_hlo_constant(f, t, 0.0)),
                                   tpu_hlo_compare(f, "LE", x, one)),
                 TPU_HLO_NONE, TPU_INVALID_ARGUMENT,
                 "binary_cross_entropy(): all elements of input should be between 0 and 1");
  tpu_hlo_value_t lx = MAX(c, tpu_hlo_unary(f, "log", x), m100);
  tpu_hlo_value_t l1x = MAX(c, tpu_hlo_unary(f, "log_plus_one", tpu_hlo_unary(f, "negate", x)), m100);
  tpu_hlo_value_t loss = SUB(c, MUL(c, SUB(c, y, one), l1x),
                                MUL(c, y, lx));
  if (hw) loss = MUL(c, loss, tpu_hlo_broadcast_to(f, tpu_hlo_cast(f, c->in[2], t.dtype), t.rank, t.dims));
  tpu_op_set_output(c, reduce_loss(c, loss, tpu_op_int(c, 0), xt0.dtype));
}

/* binary_cross_entropy_backward: inputs (grad_output, self, target,
 * [weight]); attrs [reduction, has_weight]. */
static void rule_binary_cross_entropy_backward(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  int hw = (int)tpu_op_int(c, 1);
  tpu_hlo_value_t x, y;
  tpu_hlo_type_t t;
  if (!pair(c, 1, 2, &x, &y, &t)) return;
  tpu_hlo_value_t g = loss_grad_scale(c, 0, tpu_op_int(c, 0), &t);
  tpu_hlo_value_t den = MAX(c, MUL(c, SUB(c, tpu_hlo_constant(c->f, t, 1.0), x), x),
                               tpu_hlo_constant(c->f, t, 1e-12));
  tpu_hlo_value_t r = DIV(c, MUL(c, g, SUB(c, x, y)), den);
  if (hw) r = MUL(c, r, tpu_hlo_broadcast_to(f, tpu_hlo_cast(f, c->in[3], t.dtype), t.rank, t.dims));
  tpu_op_set_output(c, tpu_hlo_cast(f, r, tpu_op_type(c, c->in[1]).dtype));
}

const tpu_op_rule_t tpu_rules_loss[] = {
    {"nll_loss", rule_nll_loss, 2, 3},
    {"nll_loss_backward", rule_nll_loss_backward, 4, 5},
    {"mse_loss", rule_mse_loss, 2, 2},
    {"mse_loss_backward", rule_mse_loss_backward, 3, 3},
    {"smooth_l1_loss", rule_smooth_l1_loss, 3, 3},
    {"smooth_l1_loss_backward", rule_smooth_l1_loss_backward, 4, 4},
    {"huber_loss", rule_huber_loss, 3, 3},
    {"huber_loss_backward", rule_huber_loss_backward, 4, 4},
    {"binary_cross_entropy", rule_binary_cross_entropy, 2, 3},
    {"binary_cross_entropy_backward", rule_binary_cross_entropy_backward, 3, 4},
    {NULL, NULL, 0, 0},
};
