/* nn.c - neural-network rules: convolution, pooling, normalisation,
 * embedding, losses (see ops.h for how a rule is written).
 *
 * Conventions shared by the rules below
 * -------------------------------------
 * - Layouts are PyTorch's: NC<spatial> activations, O I/g <spatial> weights.
 * - Reductions (norm statistics, loss sums, pooling divisors) run in the
 *   accumulation type (f32 for bf16/f16, else the input type) and round once.
 * - Python scalars (eps, momentum, beta, delta) are 0-d runtime inputs.
 * - Optional tensors (weight, bias, running stats) are passed only when
 *   present; a has_* attr says which are there, so inputs are positional in
 *   the order the rule's comment gives, absent ones skipped.
 * - Backward rules with an output_mask emit only the requested gradients, in
 *   order (the adapter returns None for the others).
 * - reduction codes are PyTorch's: 0 none, 1 mean, 2 sum.
 *
 * What XLA cannot do like PyTorch CPU (documented, not raised):
 * - nll_loss with a target outside [0, C) that is not ignore_index: PyTorch
 *   raises "Target N is out of bounds"; here that element contributes 0 (as
 *   if its weight were 0).
 * - binary_cross_entropy with inputs outside [0, 1]: PyTorch raises; here the
 *   log is clamped at -100 as for in-range values (NaN for negative inputs).
 * - embedding with an index outside [0, num_weights): XLA clamps the gather.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/ops.h"

/* ---- helpers ----------------------------------------------------------------- */

static tpu_dtype_t nn_acc(tpu_dtype_t dt) { return (dt == TPU_BF16 || dt == TPU_F16) ? TPU_F32 : dt; }

static int nn_float_check(tpu_op_ctx_t *c, tpu_dtype_t dt) {
  if (!tpu_dtype_is_float(dt)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: \"%s\" not implemented for '%s'", c->name, c->name,
                tpu_dtype_name(dt));
    return 0;
  }
  return 1;
}

/* 0-d input i as dtype dt broadcast to type t. */
static tpu_hlo_value_t nn_scalar_in(tpu_op_ctx_t *c, int i, tpu_dtype_t dt, const tpu_hlo_type_t *t) {
  tpu_hlo_value_t s = tpu_hlo_cast(c->f, c->in[i], dt);
  return tpu_hlo_broadcast_to(c->f, s, t->rank, t->dims);
}

static tpu_hlo_value_t nn_const(tpu_op_ctx_t *c, const tpu_hlo_type_t *t, double v) {
  return tpu_hlo_constant(c->f, *t, v);
}

static tpu_hlo_value_t nn_bin(tpu_op_ctx_t *c, const char *op, tpu_hlo_value_t a, tpu_hlo_value_t b) {
  return tpu_hlo_binary(c->f, op, a, b);
}

/* Sum of x over dims (x in its own type). */
static tpu_hlo_value_t nn_sum(tpu_op_ctx_t *c, tpu_hlo_value_t x, const int64_t *dims, int nd) {
  const tpu_hlo_type_t *t = tpu_hlo_type_of(c->f, x);
  if (!t) return TPU_HLO_NONE;
  if (nd == 0) return x;
  return tpu_hlo_reduce(c->f, x, tpu_hlo_scalar(c->f, t->dtype, 0.0), dims, nd, "add");
}

static tpu_hlo_value_t nn_sum_all(tpu_op_ctx_t *c, tpu_hlo_value_t x) {
  const tpu_hlo_type_t *t = tpu_hlo_type_of(c->f, x);
  if (!t) return TPU_HLO_NONE;
  int64_t d[TPU_MAX_RANK];
  for (int i = 0; i < t->rank; i++) d[i] = i;
  return nn_sum(c, x, d, t->rank);
}

/* A vector v [C] broadcast along dim `dim` of type t. */
static tpu_hlo_value_t nn_bcast_dim(tpu_op_ctx_t *c, tpu_hlo_value_t v, const tpu_hlo_type_t *t, int64_t dim) {
  const tpu_hlo_type_t *vt = tpu_hlo_type_of(c->f, v);
  if (!vt) return TPU_HLO_NONE;
  tpu_hlo_type_t to = *t;
  to.dtype = vt->dtype;
  return tpu_hlo_broadcast_in_dim(c->f, v, to, &dim);
}

/* Broadcast x of shape `keep` (x's dims correspond to dims `keep_dims` of t). */
static tpu_hlo_value_t nn_bcast_keep(tpu_op_ctx_t *c, tpu_hlo_value_t x, const tpu_hlo_type_t *t,
                                     const int64_t *keep_dims) {
  const tpu_hlo_type_t *xt = tpu_hlo_type_of(c->f, x);
  if (!xt) return TPU_HLO_NONE;
  tpu_hlo_type_t to = *t;
  to.dtype = xt->dtype;
  return tpu_hlo_broadcast_in_dim(c->f, x, to, keep_dims);
}

/* Loss reduction of a per-element loss l (acc type) to out dtype. */
static tpu_hlo_value_t nn_reduce_loss(tpu_op_ctx_t *c, tpu_hlo_value_t l, int64_t reduction, tpu_dtype_t out) {
  tpu_hlo_type_t t = tpu_op_type(c, l);
  if (reduction == 0) return tpu_hlo_cast(c->f, l, out);
  tpu_hlo_value_t s = nn_sum_all(c, l);
  if (reduction == 1) {
    int64_t n = tpu_hlo_type_numel(&t);
    s = nn_bin(c, "divide", s, tpu_hlo_scalar(c->f, t.dtype, (double)n));
  }
  return tpu_hlo_cast(c->f, s, out);
}

/* Gradient scale for a loss backward: grad_output broadcast to t (acc type),
 * divided by numel for mean. */
static tpu_hlo_value_t nn_loss_grad_scale(tpu_op_ctx_t *c, int gi, int64_t reduction, const tpu_hlo_type_t *t) {
  tpu_hlo_value_t g = tpu_hlo_broadcast_to(c->f, tpu_hlo_cast(c->f, c->in[gi], t->dtype), t->rank, t->dims);
  if (reduction == 1) g = nn_bin(c, "divide", g, nn_const(c, t, (double)tpu_hlo_type_numel(t)));
  return g;
}

/* ---- convolution ------------------------------------------------------------ */
/* Attr layout shared by convolution and convolution_backward:
 *   ints = [nsp, transposed, groups, stride[nsp], padding[nsp], dilation[nsp],
 *           output_padding[nsp] (, output_mask[3] for backward)]            */
typedef struct {
  int nsp;
  int transposed;
  int64_t groups;
  int64_t stride[TPU_MAX_RANK], pad[TPU_MAX_RANK], dil[TPU_MAX_RANK], opad[TPU_MAX_RANK];
} nn_conv_params_t;

static int nn_conv_params(tpu_op_ctx_t *c, nn_conv_params_t *p) {
  int64_t nsp = tpu_op_int(c, 0);
  if (nsp < 1 || nsp > TPU_MAX_RANK - 2 || tpu_op_nints(c) < 3 + 4 * nsp) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: malformed convolution attributes", c->name);
    return 0;
  }
  p->nsp = (int)nsp;
  p->transposed = (int)tpu_op_int(c, 1);
  p->groups = tpu_op_int(c, 2);
  for (int i = 0; i < p->nsp; i++) {
    p->stride[i] = tpu_op_int(c, 3 + i);
    p->pad[i] = tpu_op_int(c, 3 + p->nsp + i);
    p->dil[i] = tpu_op_int(c, 3 + 2 * p->nsp + i);
    p->opad[i] = tpu_op_int(c, 3 + 3 * p->nsp + i);
    if (p->stride[i] < 1) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: non-positive stride is not supported", c->name);
      return 0;
    }
    if (p->pad[i] < 0) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: negative padding is not supported", c->name);
      return 0;
    }
    if (p->dil[i] < 1) {
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: dilation should be greater than zero", c->name);
      return 0;
    }
  }
  if (p->groups < 1) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: non-positive groups is not supported", c->name);
    return 0;
  }
  return 1;
}

/* The convolution every case reduces to: NC<sp> lhs, O I <sp> kernel. */
typedef struct {
  int nsp;
  int64_t stride[TPU_MAX_RANK], lo[TPU_MAX_RANK], hi[TPU_MAX_RANK];
  int64_t lhs_dil[TPU_MAX_RANK], rhs_dil[TPU_MAX_RANK];
  int64_t groups;
} nn_gconv_t;

static int64_t nn_dilate(int64_t s, int64_t d) { return s == 0 ? 0 : 1 + d * (s - 1); }

/* Weight [Cin, Cout/g, k] of a transposed conv -> [Cout, Cin/g, k] reversed
 * (or back: the transform is an involution up to the group reshape, so
 * `inverse` swaps the roles). */
static tpu_hlo_value_t nn_swap_kernel(tpu_op_ctx_t *c, tpu_hlo_value_t w, int64_t g, int inverse) {
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_type_t t = tpu_op_type(c, w);
  int nsp = t.rank - 2;
  /* [A, B, k] with A = g * A/g  ->  [g, A/g, B, k] -> [g, B, A/g, k] -> [g*B, A/g, k] */
  int64_t A = t.dims[0], B = t.dims[1];
  int64_t d5[TPU_MAX_RANK + 1], perm[TPU_MAX_RANK + 1], d3[TPU_MAX_RANK];
  d5[0] = g; d5[1] = A / g; d5[2] = B;
  for (int i = 0; i < nsp; i++) d5[3 + i] = t.dims[2 + i];
  perm[0] = 0; perm[1] = 2; perm[2] = 1;
  for (int i = 0; i < nsp; i++) perm[3 + i] = 3 + i;
  d3[0] = g * B; d3[1] = A / g;
  for (int i = 0; i < nsp; i++) d3[2 + i] = t.dims[2 + i];
  (void)inverse;
  tpu_hlo_value_t r = tpu_hlo_reshape(f, w, nsp + 3, d5);
  r = tpu_hlo_transpose(f, r, perm);
  r = tpu_hlo_reshape(f, r, nsp + 2, d3);
  int64_t sd[TPU_MAX_RANK];
  for (int i = 0; i < nsp; i++) sd[i] = 2 + i;
  return tpu_hlo_reverse(f, r, sd, nsp);
}

static tpu_hlo_value_t nn_gconv_fwd(tpu_op_ctx_t *c, tpu_hlo_value_t x, tpu_hlo_value_t k, const nn_gconv_t *g) {
  tpu_hlo_conv_dims_t d;
  tpu_hlo_conv_dims_nchw(&d, g->nsp);
  for (int i = 0; i < g->nsp; i++) {
    d.strides[i] = g->stride[i];
    d.padding[2 * i] = g->lo[i];
    d.padding[2 * i + 1] = g->hi[i];
    d.lhs_dilation[i] = g->lhs_dil[i];
    d.rhs_dilation[i] = g->rhs_dil[i];
  }
  d.feature_group_count = g->groups;
  d.batch_group_count = 1;
  return tpu_hlo_convolution(c->f, x, k, &d);
}

/* d(conv)/d(lhs): grad [N, O, out] , kernel [O, I/g, k] -> [N, C, in]. */
static tpu_hlo_value_t nn_gconv_vjp_lhs(tpu_op_ctx_t *c, tpu_hlo_value_t grad, tpu_hlo_value_t k,
                                        const nn_gconv_t *g, const int64_t *in_sp) {
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_type_t kt = tpu_op_type(c, k), gt = tpu_op_type(c, grad);
  int nsp = g->nsp;
  int64_t G = g->groups;
  if (G > 1) { /* [O, I/g, k] -> [g, O/g, I/g, k] -> [O/g, g, I/g, k] -> [O/g, I, k] */
    int64_t d5[TPU_MAX_RANK + 1], perm[TPU_MAX_RANK + 1], d3[TPU_MAX_RANK];
    d5[0] = G; d5[1] = kt.dims[0] / G; d5[2] = kt.dims[1];
    perm[0] = 1; perm[1] = 0; perm[2] = 2;
    d3[0] = kt.dims[0] / G; d3[1] = G * kt.dims[1];
    for (int i = 0; i < nsp; i++) {
      d5[3 + i] = kt.dims[2 + i];
      perm[3 + i] = 3 + i;
      d3[2 + i] = kt.dims[2 + i];
    }
    k = tpu_hlo_reshape(f, k, nsp + 3, d5);
    k = tpu_hlo_transpose(f, k, perm);
    k = tpu_hlo_reshape(f, k, nsp + 2, d3);
  }
  int64_t sd[TPU_MAX_RANK];
  for (int i = 0; i < nsp; i++) sd[i] = 2 + i;
  k = tpu_hlo_reverse(f, k, sd, nsp);
  tpu_hlo_conv_dims_t d;
  tpu_hlo_conv_dims_nchw(&d, nsp);
  d.k_out_feature = 1;
  d.k_in_feature = 0;
  for (int i = 0; i < nsp; i++) {
    int64_t lhs_d = nn_dilate(in_sp[i], g->lhs_dil[i]);
    int64_t rhs_d = nn_dilate(kt.dims[2 + i], g->rhs_dil[i]);
    int64_t out_d = nn_dilate(gt.dims[2 + i], g->stride[i]);
    int64_t before = rhs_d - g->lo[i] - 1;
    int64_t after = lhs_d + rhs_d - 1 - out_d - before;
    d.strides[i] = g->lhs_dil[i];
    d.lhs_dilation[i] = g->stride[i];
    d.rhs_dilation[i] = g->rhs_dil[i];
    d.padding[2 * i] = before;
    d.padding[2 * i + 1] = after;
  }
  d.feature_group_count = G;
  d.batch_group_count = 1;
  return tpu_hlo_convolution(f, grad, k, &d);
}

/* d(conv)/d(kernel): x [N, C, in], grad [N, O, out] -> [O, I/g, k]. */
static tpu_hlo_value_t nn_gconv_vjp_rhs(tpu_op_ctx_t *c, tpu_hlo_value_t grad, tpu_hlo_value_t x,
                                        const nn_gconv_t *g, const int64_t *k_sp) {
  tpu_hlo_type_t xt = tpu_op_type(c, x), gt = tpu_op_type(c, grad);
  int nsp = g->nsp;
  tpu_hlo_conv_dims_t d;
  tpu_hlo_conv_dims_nchw(&d, nsp);
  d.in_batch = 1;
  d.in_feature = 0;
  d.k_out_feature = 1;
  d.k_in_feature = 0;
  d.out_batch = 1;
  d.out_feature = 0;
  for (int i = 0; i < nsp; i++) {
    int64_t lhs_d = nn_dilate(xt.dims[2 + i], g->lhs_dil[i]);
    int64_t rhs_d = nn_dilate(k_sp[i], g->rhs_dil[i]);
    int64_t out_d = nn_dilate(gt.dims[2 + i], g->stride[i]);
    d.strides[i] = g->rhs_dil[i];
    d.lhs_dilation[i] = g->lhs_dil[i];
    d.rhs_dilation[i] = g->stride[i];
    d.padding[2 * i] = g->lo[i];
    d.padding[2 * i + 1] = (out_d - lhs_d) + (rhs_d - g->lo[i] - 1);
  }
  d.feature_group_count = 1;
  d.batch_group_count = g->groups;
  return tpu_hlo_convolution(c->f, x, grad, &d);
}

/* Checks shapes like PyTorch and fills the general convolution.  x must be
 * batched (rank nsp + 2) here. */
static int nn_conv_setup(tpu_op_ctx_t *c, const nn_conv_params_t *p, const tpu_hlo_type_t *xt,
                         const tpu_hlo_type_t *wt, nn_gconv_t *g) {
  char b1[128], b2[128];
  int nsp = p->nsp;
  if (wt->rank != nsp + 2 || xt->rank != nsp + 2) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                "%s: Expected %d-dimensional input for %d-dimensional weight %s, but got %d-dimensional "
                "input of size %s instead",
                c->name, nsp + 2, wt->rank, tpu_op_shape_str(wt, b1, sizeof b1), xt->rank, tpu_op_shape_str(xt, b2, sizeof b2));
    return 0;
  }
  if (xt->dtype != wt->dtype) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                "%s: Input type (%s) and weight type (%s) should be the same", c->name,
                tpu_dtype_name(xt->dtype), tpu_dtype_name(wt->dtype));
    return 0;
  }
  if (!nn_float_check(c, xt->dtype)) return 0;
  int64_t G = p->groups;
  int64_t cin = xt->dims[1];
  int64_t exp_cin = p->transposed ? wt->dims[0] : wt->dims[1] * G;
  if (cin != exp_cin || (!p->transposed && wt->dims[0] % G) || (p->transposed && wt->dims[0] % G)) {
    if (p->transposed)
      tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                  "%s: Given transposed=1, weight of size %s, expected input%s to have %lld channels, but "
                  "got %lld channels instead",
                  c->name, tpu_op_shape_str(wt, b1, sizeof b1), tpu_op_shape_str(xt, b2, sizeof b2), (long long)wt->dims[0],
                  (long long)cin);
    else
      tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                  "%s: Given groups=%lld, weight of size %s, expected input%s to have %lld channels, but "
                  "got %lld channels instead",
                  c->name, (long long)G, tpu_op_shape_str(wt, b1, sizeof b1), tpu_op_shape_str(xt, b2, sizeof b2),
                  (long long)(wt->dims[1] * G), (long long)cin);
    return 0;
  }
  g->nsp = nsp;
  g->groups = G;
  for (int i = 0; i < nsp; i++) {
    int64_t k = wt->dims[2 + i], in = xt->dims[2 + i];
    if (!p->transposed) {
      int64_t eff = p->dil[i] * (k - 1) + 1;
      if (in + 2 * p->pad[i] < eff) {
        tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                    "%s: Calculated padded input size per channel: (%lld). Kernel size: (%lld). Kernel "
                    "size can't be greater than actual input size",
                    c->name, (long long)(in + 2 * p->pad[i]), (long long)eff);
        return 0;
      }
      g->stride[i] = p->stride[i];
      g->lo[i] = g->hi[i] = p->pad[i];
      g->lhs_dil[i] = 1;
      g->rhs_dil[i] = p->dil[i];
    } else {
      if (p->opad[i] >= p->stride[i] && p->opad[i] >= p->dil[i]) {
        tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                    "%s: output padding must be smaller than either stride or dilation, but got "
                    "output_padding: %lld, stride: %lld, dilation: %lld",
                    c->name, (long long)p->opad[i], (long long)p->stride[i], (long long)p->dil[i]);
        return 0;
      }
      int64_t e = p->dil[i] * (k - 1);
      g->stride[i] = 1;
      g->lo[i] = e - p->pad[i];
      g->hi[i] = e - p->pad[i] + p->opad[i];
      g->lhs_dil[i] = p->stride[i];
      g->rhs_dil[i] = p->dil[i];
      if ((in - 1) * p->stride[i] - 2 * p->pad[i] + e + p->opad[i] + 1 <= 0) {
        tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: Output size is too small", c->name);
        return 0;
      }
    }
  }
  return 1;
}

/* Adds a leading batch dim to an unbatched input (rank nsp + 1). */
static tpu_hlo_value_t nn_batchify(tpu_op_ctx_t *c, tpu_hlo_value_t x, int nsp, int *added) {
  tpu_hlo_type_t t = tpu_op_type(c, x);
  *added = 0;
  if (t.rank != nsp + 1) return x;
  int64_t d[TPU_MAX_RANK];
  d[0] = 1;
  for (int i = 0; i < t.rank; i++) d[i + 1] = t.dims[i];
  *added = 1;
  return tpu_hlo_reshape(c->f, x, t.rank + 1, d);
}

static tpu_hlo_value_t nn_unbatchify(tpu_op_ctx_t *c, tpu_hlo_value_t x) {
  tpu_hlo_type_t t = tpu_op_type(c, x);
  return tpu_hlo_reshape(c->f, x, t.rank - 1, t.dims + 1);
}

/* convolution / convolution_overrideable: inputs (input, weight[, bias]);
 * attrs [nsp, transposed, groups, stride[nsp], padding[nsp], dilation[nsp],
 * output_padding[nsp]].  Input N C <sp> (or unbatched C <sp>); weight
 * O I/g <sp> (transposed: I O/g <sp>); bias [O]. */
static void rule_convolution(tpu_op_ctx_t *c) {
  nn_conv_params_t p;
  if (!nn_conv_params(c, &p)) return;
  int unb;
  tpu_hlo_value_t x = nn_batchify(c, c->in[0], p.nsp, &unb);
  tpu_hlo_type_t xt = tpu_op_type(c, x), wt = tpu_op_type(c, c->in[1]);
  nn_gconv_t g;
  if (!nn_conv_setup(c, &p, &xt, &wt, &g)) return;
  tpu_hlo_value_t k = p.transposed ? nn_swap_kernel(c, c->in[1], p.groups, 0) : c->in[1];
  tpu_hlo_value_t y = nn_gconv_fwd(c, x, k, &g);
  if (c->nin > 2) {
    tpu_hlo_type_t yt = tpu_op_type(c, y);
    tpu_hlo_type_t bt = tpu_op_type(c, c->in[2]);
    if (bt.rank != 1 || bt.dims[0] != yt.dims[1]) {
      char b1[64];
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: Given weight of size %s, expected bias to be 1-dimensional with %lld elements, but got bias of size %s instead",
                  c->name, tpu_op_shape_str(&wt, b1, sizeof b1), (long long)yt.dims[1], "(other)");
      return;
    }
    y = nn_bin(c, "add", y, nn_bcast_dim(c, tpu_hlo_cast(c->f, c->in[2], yt.dtype), &yt, 1));
  }
  if (unb) y = nn_unbatchify(c, y);
  tpu_op_set_output(c, y);
}

/* convolution_backward / convolution_backward_overrideable: inputs
 * (grad_output, input, weight); attrs as convolution, then output_mask[3]
 * (grad_input, grad_weight, grad_bias).  Emits the masked gradients in order;
 * grad_bias = grad_output summed over all dims but 1. */
static void rule_convolution_backward(tpu_op_ctx_t *c) {
  nn_conv_params_t p;
  if (!nn_conv_params(c, &p)) return;
  int base = 3 + 4 * p.nsp;
  int m0 = (int)tpu_op_int(c, base), m1 = (int)tpu_op_int(c, base + 1), m2 = (int)tpu_op_int(c, base + 2);
  int unb, unb2;
  tpu_hlo_value_t go = nn_batchify(c, c->in[0], p.nsp, &unb2);
  tpu_hlo_value_t x = nn_batchify(c, c->in[1], p.nsp, &unb);
  tpu_hlo_type_t xt = tpu_op_type(c, x), wt = tpu_op_type(c, c->in[2]);
  nn_gconv_t g;
  if (!nn_conv_setup(c, &p, &xt, &wt, &g)) return;
  tpu_hlo_value_t outs[3];
  int n = 0;
  tpu_hlo_value_t k = p.transposed ? nn_swap_kernel(c, c->in[2], p.groups, 0) : c->in[2];
  tpu_hlo_type_t kt = tpu_op_type(c, k);
  if (m0) {
    tpu_hlo_value_t gi = nn_gconv_vjp_lhs(c, go, k, &g, xt.dims + 2);
    outs[n++] = unb ? nn_unbatchify(c, gi) : gi;
  }
  if (m1) {
    tpu_hlo_value_t gk = nn_gconv_vjp_rhs(c, go, x, &g, kt.dims + 2);
    if (p.transposed) gk = nn_swap_kernel(c, gk, p.groups, 1);
    outs[n++] = gk;
  }
  if (m2) {
    tpu_hlo_type_t gt = tpu_op_type(c, go);
    tpu_dtype_t acc = nn_acc(gt.dtype);
    int64_t dims[TPU_MAX_RANK];
    int nd = 0;
    for (int i = 0; i < gt.rank; i++)
      if (i != 1) dims[nd++] = i;
    outs[n++] = tpu_hlo_cast(c->f, nn_sum(c, tpu_hlo_cast(c->f, go, acc), dims, nd), gt.dtype);
  }
  if (n == 0) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: output_mask selects no gradient", c->name);
    return;
  }
  tpu_op_set_outputs(c, n, outs);
}

/* ---- pooling ----------------------------------------------------------------- */

/* PyTorch's pooling_output_shape. */
static int64_t nn_pool_out(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil, int ceil_mode) {
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
} nn_pool_t;

/* Common checks.  x: [N,C,H,W] or [C,H,W]. */
static int nn_pool_setup(tpu_op_ctx_t *c, const tpu_hlo_type_t *xt, nn_pool_t *pl) {
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
    pl->out[i] = nn_pool_out(pl->in[i], pl->k[i], pl->p[i], pl->s[i], pl->d[i], pl->ceil_mode);
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
static tpu_hlo_value_t nn_pool_4d(tpu_op_ctx_t *c, tpu_hlo_value_t x, const nn_pool_t *pl, int64_t h, int64_t w) {
  int64_t d[4] = {pl->lead[0], pl->lead[1], h, w};
  const tpu_hlo_type_t *t = tpu_hlo_type_of(c->f, x);
  if (t && t->rank == 4) return x;
  return tpu_hlo_reshape(c->f, x, 4, d);
}

static tpu_hlo_value_t nn_pool_unbatch(tpu_op_ctx_t *c, tpu_hlo_value_t y, const nn_pool_t *pl) {
  if (pl->batched) return y;
  return nn_unbatchify(c, y);
}

/* Lowest value of a dtype (max-pool padding). */
static tpu_hlo_value_t nn_lowest(tpu_op_ctx_t *c, tpu_dtype_t dt) {
  switch (dt) {
    case TPU_S8: return tpu_hlo_constant_i64(c->f, tpu_hlo_type_scalar(dt), INT8_MIN);
    case TPU_S16: return tpu_hlo_constant_i64(c->f, tpu_hlo_type_scalar(dt), INT16_MIN);
    case TPU_S32: return tpu_hlo_constant_i64(c->f, tpu_hlo_type_scalar(dt), INT32_MIN);
    case TPU_S64: return tpu_hlo_constant_i64(c->f, tpu_hlo_type_scalar(dt), INT64_MIN);
    case TPU_U8: case TPU_U16: case TPU_U32: case TPU_U64: case TPU_PRED:
      return tpu_hlo_constant_i64(c->f, tpu_hlo_type_scalar(dt), 0);
    default: return tpu_hlo_scalar(c->f, dt, -INFINITY);
  }
}

/* Running (value, index) max over candidate slices; PyTorch's rule: a
 * candidate replaces the best if it is greater or NaN. */
static void nn_argmax_step(tpu_op_ctx_t *c, tpu_hlo_value_t *best, tpu_hlo_value_t *bidx, tpu_hlo_value_t v,
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

static int nn_pool_attrs(tpu_op_ctx_t *c, nn_pool_t *pl, int with_dil) {
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
  nn_pool_t pl;
  nn_pool_attrs(c, &pl, 1);
  tpu_hlo_type_t xt = tpu_op_type(c, c->in[0]);
  if (!nn_pool_setup(c, &xt, &pl)) return;
  tpu_hlo_value_t x = nn_pool_4d(c, c->in[0], &pl, pl.in[0], pl.in[1]);
  int64_t lo[4] = {0, 0, pl.p[0], pl.p[1]}, hi[4] = {0, 0, 0, 0}, in0[4] = {0, 0, 0, 0};
  for (int i = 0; i < 2; i++) {
    int64_t need = (pl.out[i] - 1) * pl.s[i] + pl.d[i] * (pl.k[i] - 1) + 1 - pl.in[i] - pl.p[i];
    hi[2 + i] = need > 0 ? need : 0;
  }
  tpu_hlo_value_t xp = tpu_hlo_pad(f, x, nn_lowest(c, xt.dtype), lo, hi, in0);
  int64_t od[4] = {pl.lead[0], pl.lead[1], pl.out[0], pl.out[1]};
  tpu_hlo_type_t ot = tpu_hlo_type_make(TPU_S64, 4, od);
  tpu_hlo_value_t ioh = tpu_hlo_iota(f, ot, 2), iow = tpu_hlo_iota(f, ot, 3);
  /* base row / col: oh*s - p */
  tpu_hlo_value_t rbase = nn_bin(c, "subtract", nn_bin(c, "multiply", ioh, tpu_hlo_constant_i64(f, ot, pl.s[0])),
                                 tpu_hlo_constant_i64(f, ot, pl.p[0]));
  tpu_hlo_value_t cbase = nn_bin(c, "subtract", nn_bin(c, "multiply", iow, tpu_hlo_constant_i64(f, ot, pl.s[1])),
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
      tpu_hlo_value_t r = nn_bin(c, "add", rbase, tpu_hlo_constant_i64(f, ot, a * pl.d[0]));
      tpu_hlo_value_t cc = nn_bin(c, "add", cbase, tpu_hlo_constant_i64(f, ot, b * pl.d[1]));
      tpu_hlo_value_t idx = nn_bin(c, "add", nn_bin(c, "multiply", r, tpu_hlo_constant_i64(f, ot, pl.in[1])), cc);
      nn_argmax_step(c, &best, &bidx, v, idx, is_float);
    }
  }
  tpu_hlo_value_t outs[2] = {nn_pool_unbatch(c, best, &pl), nn_pool_unbatch(c, bidx, &pl)};
  tpu_op_set_outputs(c, 2, outs);
}

/* Scatter-add of grad [N,C,OH,OW] at flat plane indices idx into a zero
 * [N,C,H,W] (max-pool backward). */
static tpu_hlo_value_t nn_plane_scatter_add(tpu_op_ctx_t *c, tpu_hlo_value_t grad, tpu_hlo_value_t idx,
                                            const nn_pool_t *pl) {
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_type_t gt = tpu_op_type(c, grad);
  tpu_dtype_t acc = nn_acc(gt.dtype);
  int64_t nc = pl->lead[0] * pl->lead[1], hw = pl->in[0] * pl->in[1], ohw = pl->out[0] * pl->out[1];
  int64_t d3[3] = {nc, ohw, 1};
  tpu_hlo_type_t it = tpu_hlo_type_make(TPU_S64, 3, d3);
  tpu_hlo_value_t i3 = tpu_hlo_reshape(f, tpu_hlo_cast(f, idx, TPU_S64), 3, d3);
  tpu_hlo_value_t base = nn_bin(c, "multiply", tpu_hlo_iota(f, it, 0), tpu_hlo_constant_i64(f, it, hw));
  int64_t d2[2] = {nc * ohw, 1};
  tpu_hlo_value_t flat = tpu_hlo_reshape(f, nn_bin(c, "add", i3, base), 2, d2);
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
  return nn_pool_unbatch(c, r, pl);
}

/* max_pool2d_with_indices_backward: inputs (grad_output, self, indices);
 * attrs as max_pool2d_with_indices.  Gradient routed through the indices
 * (exactly PyTorch's tie behaviour). */
static void rule_max_pool2d_with_indices_backward(tpu_op_ctx_t *c) {
  nn_pool_t pl;
  nn_pool_attrs(c, &pl, 1);
  tpu_hlo_type_t xt = tpu_op_type(c, c->in[1]);
  if (!nn_pool_setup(c, &xt, &pl)) return;
  tpu_hlo_type_t gt = tpu_op_type(c, c->in[0]), it = tpu_op_type(c, c->in[2]);
  if (tpu_hlo_type_numel(&gt) != pl.lead[0] * pl.lead[1] * pl.out[0] * pl.out[1] ||
      tpu_hlo_type_numel(&it) != tpu_hlo_type_numel(&gt)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: grad_output / indices shape does not match the pooling output",
                c->name);
    return;
  }
  tpu_op_set_output(c, nn_plane_scatter_add(c, c->in[0], c->in[2], &pl));
}

/* Per-output divisors of avg_pool2d, [OH, OW] in dtype acc. */
static tpu_hlo_value_t nn_avg_divisor(tpu_op_ctx_t *c, const nn_pool_t *pl, int count_include_pad, tpu_dtype_t acc) {
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_value_t len[2];
  for (int i = 0; i < 2; i++) {
    tpu_hlo_type_t t = tpu_hlo_type_make(TPU_S64, 1, &pl->out[i]);
    tpu_hlo_value_t o = tpu_hlo_iota(f, t, 0);
    tpu_hlo_value_t hs = nn_bin(c, "subtract", nn_bin(c, "multiply", o, tpu_hlo_constant_i64(f, t, pl->s[i])),
                                tpu_hlo_constant_i64(f, t, pl->p[i]));
    tpu_hlo_value_t he = nn_bin(c, "minimum", nn_bin(c, "add", hs, tpu_hlo_constant_i64(f, t, pl->k[i])),
                                tpu_hlo_constant_i64(f, t, pl->in[i] + pl->p[i]));
    tpu_hlo_value_t l;
    if (count_include_pad) {
      l = nn_bin(c, "subtract", he, hs);
    } else {
      tpu_hlo_value_t a = nn_bin(c, "maximum", hs, tpu_hlo_constant_i64(f, t, 0));
      tpu_hlo_value_t b = nn_bin(c, "minimum", he, tpu_hlo_constant_i64(f, t, pl->in[i]));
      l = nn_bin(c, "subtract", b, a);
    }
    len[i] = tpu_hlo_convert(f, l, acc);
  }
  tpu_hlo_type_t t2 = tpu_hlo_type_make(acc, 2, pl->out);
  int64_t d0 = 0, d1 = 1;
  return nn_bin(c, "multiply", tpu_hlo_broadcast_in_dim(f, len[0], t2, &d0),
                tpu_hlo_broadcast_in_dim(f, len[1], t2, &d1));
}

static int nn_avg_attrs(tpu_op_ctx_t *c, nn_pool_t *pl, int *cip, int64_t *divisor) {
  int i = nn_pool_attrs(c, pl, 0);
  *cip = (int)tpu_op_int(c, i);
  *divisor = tpu_op_int(c, i + 1);
  return 1;
}

/* Divisor broadcast to [N,C,OH,OW] (acc type). */
static tpu_hlo_value_t nn_avg_div_full(tpu_op_ctx_t *c, const nn_pool_t *pl, int cip, int64_t divisor, tpu_dtype_t acc) {
  int64_t od[4] = {pl->lead[0], pl->lead[1], pl->out[0], pl->out[1]};
  tpu_hlo_type_t ot = tpu_hlo_type_make(acc, 4, od);
  if (divisor) return tpu_hlo_constant(c->f, ot, (double)divisor);
  int64_t keep[2] = {2, 3};
  return tpu_hlo_broadcast_in_dim(c->f, nn_avg_divisor(c, pl, cip, acc), ot, keep);
}

/* avg_pool2d: inputs (self); attrs [kH, kW, sH, sW, padH, padW, ceil_mode,
 * count_include_pad, divisor_override (0 = none)]. */
static void rule_avg_pool2d(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  nn_pool_t pl;
  int cip;
  int64_t divisor;
  nn_avg_attrs(c, &pl, &cip, &divisor);
  tpu_hlo_type_t xt = tpu_op_type(c, c->in[0]);
  if (!nn_pool_setup(c, &xt, &pl)) return;
  if (!nn_float_check(c, xt.dtype)) return;
  tpu_dtype_t acc = nn_acc(xt.dtype);
  tpu_hlo_value_t x = tpu_hlo_cast(f, nn_pool_4d(c, c->in[0], &pl, pl.in[0], pl.in[1]), acc);
  int64_t lo[4] = {0, 0, pl.p[0], pl.p[1]}, hi[4] = {0, 0, 0, 0}, in0[4] = {0, 0, 0, 0};
  for (int i = 0; i < 2; i++) hi[2 + i] = (pl.out[i] - 1) * pl.s[i] + pl.k[i] - pl.in[i] - pl.p[i];
  tpu_hlo_value_t xp = tpu_hlo_pad(f, x, tpu_hlo_scalar(f, acc, 0.0), lo, hi, in0);
  int64_t win[4] = {1, 1, pl.k[0], pl.k[1]}, str[4] = {1, 1, pl.s[0], pl.s[1]};
  tpu_hlo_value_t s = tpu_hlo_reduce_window(f, xp, tpu_hlo_scalar(f, acc, 0.0), win, str, NULL, NULL, NULL, "add");
  tpu_hlo_value_t y = nn_bin(c, "divide", s, nn_avg_div_full(c, &pl, cip, divisor, acc));
  tpu_op_set_output(c, nn_pool_unbatch(c, tpu_hlo_cast(f, y, xt.dtype), &pl));
}

/* avg_pool2d_backward: inputs (grad_output, self); attrs as avg_pool2d. */
static void rule_avg_pool2d_backward(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  nn_pool_t pl;
  int cip;
  int64_t divisor;
  nn_avg_attrs(c, &pl, &cip, &divisor);
  tpu_hlo_type_t xt = tpu_op_type(c, c->in[1]);
  if (!nn_pool_setup(c, &xt, &pl)) return;
  if (!nn_float_check(c, xt.dtype)) return;
  tpu_dtype_t acc = nn_acc(xt.dtype);
  tpu_hlo_value_t g = tpu_hlo_cast(f, nn_pool_4d(c, c->in[0], &pl, pl.out[0], pl.out[1]), acc);
  g = nn_bin(c, "divide", g, nn_avg_div_full(c, &pl, cip, divisor, acc));
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
  tpu_op_set_output(c, nn_pool_unbatch(c, tpu_hlo_cast(f, r, xt.dtype), &pl));
}

/* Adaptive pooling matrix [O, I] (acc type): row i averages [start, end). */
static tpu_hlo_value_t nn_adaptive_matrix(tpu_op_ctx_t *c, int64_t O, int64_t I, tpu_dtype_t acc) {
  tpu_hlo_func_t *f = c->f;
  int64_t d[2] = {O, I};
  tpu_hlo_type_t it = tpu_hlo_type_make(TPU_S64, 2, d);
  tpu_hlo_value_t oi = tpu_hlo_iota(f, it, 0), ii = tpu_hlo_iota(f, it, 1);
  tpu_hlo_value_t cI = tpu_hlo_constant_i64(f, it, I), cO = tpu_hlo_constant_i64(f, it, O);
  tpu_hlo_value_t start = nn_bin(c, "divide", nn_bin(c, "multiply", oi, cI), cO);
  tpu_hlo_value_t one = tpu_hlo_constant_i64(f, it, 1);
  tpu_hlo_value_t end = nn_bin(c, "divide",
                               nn_bin(c, "add", nn_bin(c, "multiply", nn_bin(c, "add", oi, one), cI),
                                      nn_bin(c, "subtract", cO, one)),
                               cO);
  tpu_hlo_value_t in = tpu_hlo_binary(f, "and", tpu_hlo_compare(f, "GE", ii, start), tpu_hlo_compare(f, "LT", ii, end));
  tpu_hlo_type_t ft = tpu_hlo_type_make(acc, 2, d);
  tpu_hlo_value_t w = nn_bin(c, "divide", tpu_hlo_constant(f, ft, 1.0), tpu_hlo_convert(f, nn_bin(c, "subtract", end, start), acc));
  return tpu_hlo_select(f, in, w, tpu_hlo_constant(f, ft, 0.0));
}

/* x [..., A, B] (rank r) with Ma [A', A], Mb [B', B] -> [..., A', B']. */
static tpu_hlo_value_t nn_apply_2d(tpu_op_ctx_t *c, tpu_hlo_value_t x, tpu_hlo_value_t Ma, tpu_hlo_value_t Mb) {
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

static tpu_hlo_value_t nn_transpose2(tpu_op_ctx_t *c, tpu_hlo_value_t m) {
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
  if (!nn_float_check(c, xt.dtype)) return;
  tpu_dtype_t acc = nn_acc(xt.dtype);
  int64_t H = xt.dims[xt.rank - 2], W = xt.dims[xt.rank - 1];
  tpu_hlo_value_t y = nn_apply_2d(c, tpu_hlo_cast(c->f, c->in[0], acc), nn_adaptive_matrix(c, OH, H, acc),
                                  nn_adaptive_matrix(c, OW, W, acc));
  tpu_op_set_output(c, tpu_hlo_cast(c->f, y, xt.dtype));
}

/* _adaptive_avg_pool2d_backward: inputs (grad_output, self). */
static void rule_adaptive_avg_pool2d_backward(tpu_op_ctx_t *c) {
  tpu_hlo_type_t gt = tpu_op_type(c, c->in[0]), xt = tpu_op_type(c, c->in[1]);
  if (gt.rank != xt.rank || gt.rank < 3) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: grad_output and input ranks differ", c->name);
    return;
  }
  tpu_dtype_t acc = nn_acc(xt.dtype);
  int r = xt.rank;
  tpu_hlo_value_t Mh = nn_adaptive_matrix(c, gt.dims[r - 2], xt.dims[r - 2], acc);
  tpu_hlo_value_t Mw = nn_adaptive_matrix(c, gt.dims[r - 1], xt.dims[r - 1], acc);
  tpu_hlo_value_t y = nn_apply_2d(c, tpu_hlo_cast(c->f, c->in[0], acc), nn_transpose2(c, Mh), nn_transpose2(c, Mw));
  tpu_op_set_output(c, tpu_hlo_cast(c->f, y, xt.dtype));
}

/* Gathers x [N,C,H,W] at constant indices idx[L] along dim. */
static tpu_hlo_value_t nn_take_const(tpu_op_ctx_t *c, tpu_hlo_value_t x, int dim, const int64_t *idx, int64_t L) {
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_type_t t = tpu_op_type(c, x);
  int64_t d2[2] = {L, 1};
  tpu_hlo_value_t iv = tpu_hlo_constant_i64s(f, tpu_hlo_type_make(TPU_S64, 2, d2), idx);
  tpu_hlo_gather_dims_t gd;
  memset(&gd, 0, sizeof gd);
  for (int i = 0; i < t.rank; i++) {
    if (i != dim) gd.offset_dims[gd.noffset++] = i;
    gd.slice_sizes[i] = i == dim ? 1 : t.dims[i];
  }
  gd.ncollapsed = 1;
  gd.collapsed_slice_dims[0] = dim;
  gd.nstart_map = 1;
  gd.start_index_map[0] = dim;
  gd.index_vector_dim = 1;
  return tpu_hlo_gather(f, x, iv, &gd);
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
  nn_pool_t pl;
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
  tpu_hlo_value_t x = nn_pool_4d(c, c->in[0], &pl, pl.in[0], pl.in[1]);
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
    tpu_hlo_value_t xr = nn_take_const(c, x, 2, rows, O[0]); /* [N,C,OH,W] */
    tpu_hlo_value_t rv = tpu_hlo_constant_i64s(f, tpu_hlo_type_make(TPU_S64, 1, &O[0]), rows);
    int64_t k2 = 2;
    tpu_hlo_value_t rfull = tpu_hlo_broadcast_in_dim(f, rv, ot, &k2);
    for (int64_t b = 0; b < kmax[1]; b++) {
      for (int64_t j = 0; j < O[1]; j++) {
        int64_t s = j * pl.in[1] / O[1], e = ((j + 1) * pl.in[1] + O[1] - 1) / O[1];
        cols[j] = s + b < e ? s + b : e - 1;
      }
      tpu_hlo_value_t v = nn_take_const(c, xr, 3, cols, O[1]);
      tpu_hlo_value_t cv = tpu_hlo_constant_i64s(f, tpu_hlo_type_make(TPU_S64, 1, &O[1]), cols);
      int64_t k3 = 3;
      tpu_hlo_value_t cfull = tpu_hlo_broadcast_in_dim(f, cv, ot, &k3);
      tpu_hlo_value_t idx = nn_bin(c, "add", nn_bin(c, "multiply", rfull, tpu_hlo_constant_i64(f, ot, pl.in[1])), cfull);
      nn_argmax_step(c, &best, &bidx, v, idx, is_float);
    }
  }
  tpu_hlo_value_t outs[2] = {nn_pool_unbatch(c, best, &pl), nn_pool_unbatch(c, bidx, &pl)};
  tpu_op_set_outputs(c, 2, outs);
}

/* adaptive_max_pool2d_backward: inputs (grad_output, self, indices). */
static void rule_adaptive_max_pool2d_backward(tpu_op_ctx_t *c) {
  tpu_hlo_type_t xt = tpu_op_type(c, c->in[1]), gt = tpu_op_type(c, c->in[0]);
  if (xt.rank != 3 && xt.rank != 4) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: Expected 3D or 4D tensor, but got %dD", c->name, xt.rank);
    return;
  }
  nn_pool_t pl;
  memset(&pl, 0, sizeof pl);
  pl.batched = xt.rank == 4;
  pl.lead[0] = pl.batched ? xt.dims[0] : 1;
  pl.lead[1] = xt.dims[xt.rank - 3];
  pl.in[0] = xt.dims[xt.rank - 2];
  pl.in[1] = xt.dims[xt.rank - 1];
  pl.out[0] = gt.dims[gt.rank - 2];
  pl.out[1] = gt.dims[gt.rank - 1];
  tpu_op_set_output(c, nn_plane_scatter_add(c, c->in[0], c->in[2], &pl));
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
  if (!nn_float_check(c, xt.dtype)) return;
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
  tpu_dtype_t acc = nn_acc(xt.dtype);
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
  tpu_hlo_value_t eps = nn_scalar_in(c, ieps, acc, &ct);
  tpu_hlo_value_t mean, var, invstd;
  if (training) {
    mean = nn_bin(c, "divide", nn_sum(c, x, rd, nrd), tpu_hlo_constant(f, ct, (double)n));
    tpu_hlo_value_t xc = nn_bin(c, "subtract", x, nn_bcast_dim(c, mean, &at, 1));
    var = nn_bin(c, "divide", nn_sum(c, nn_bin(c, "multiply", xc, xc), rd, nrd), tpu_hlo_constant(f, ct, (double)n));
  } else {
    mean = tpu_hlo_cast(f, c->in[irm], acc);
    var = tpu_hlo_cast(f, c->in[irv], acc);
  }
  invstd = tpu_hlo_unary(f, "rsqrt", nn_bin(c, "add", var, eps));
  tpu_hlo_value_t scale = invstd, shift;
  if (hw) scale = nn_bin(c, "multiply", scale, tpu_hlo_cast(f, c->in[iw], acc));
  shift = tpu_hlo_unary(f, "negate", nn_bin(c, "multiply", mean, scale));
  if (hb) shift = nn_bin(c, "add", shift, tpu_hlo_cast(f, c->in[ib], acc));
  tpu_hlo_value_t y = nn_bin(c, "add", nn_bin(c, "multiply", x, nn_bcast_dim(c, scale, &at, 1)), nn_bcast_dim(c, shift, &at, 1));
  tpu_hlo_value_t outs[5];
  int no = 0;
  outs[no++] = tpu_hlo_cast(f, y, xt.dtype);
  if (training) {
    outs[no++] = tpu_hlo_cast(f, mean, sdt);
    outs[no++] = tpu_hlo_cast(f, invstd, sdt);
    if (hr) {
      tpu_hlo_value_t m = nn_scalar_in(c, imom, acc, &ct);
      tpu_hlo_value_t one_m = nn_bin(c, "subtract", tpu_hlo_constant(f, ct, 1.0), m);
      tpu_dtype_t rmd = tpu_op_type(c, c->in[irm]).dtype, rvd = tpu_op_type(c, c->in[irv]).dtype;
      tpu_hlo_value_t rm = nn_bin(c, "add", nn_bin(c, "multiply", one_m, tpu_hlo_cast(f, c->in[irm], acc)),
                                  nn_bin(c, "multiply", m, mean));
      double corr = n > 1 ? (double)n / (double)(n - 1) : INFINITY;
      tpu_hlo_value_t uv = nn_bin(c, "multiply", var, tpu_hlo_constant(f, ct, corr));
      tpu_hlo_value_t rv = nn_bin(c, "add", nn_bin(c, "multiply", one_m, tpu_hlo_cast(f, c->in[irv], acc)),
                                  nn_bin(c, "multiply", m, uv));
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
  tpu_dtype_t acc = nn_acc(xt.dtype);
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
    invstd = tpu_hlo_unary(f, "rsqrt", nn_bin(c, "add", tpu_hlo_cast(f, c->in[irv], acc), nn_scalar_in(c, ieps, acc, &ct)));
  }
  tpu_hlo_value_t w = hw ? tpu_hlo_cast(f, c->in[iw], acc) : tpu_hlo_constant(f, ct, 1.0);
  tpu_dtype_t wdt = hw ? tpu_op_type(c, c->in[iw]).dtype : xt.dtype;
  tpu_hlo_value_t xc = nn_bin(c, "subtract", x, nn_bcast_dim(c, mean, &at, 1));
  tpu_hlo_value_t sum_g = nn_sum(c, g, rd, nrd);
  tpu_hlo_value_t dotp = nn_sum(c, nn_bin(c, "multiply", g, xc), rd, nrd);
  tpu_hlo_value_t outs[3];
  int no = 0;
  if (m[0]) {
    tpu_hlo_value_t gi;
    if (train) {
      tpu_hlo_value_t nn = tpu_hlo_constant(f, ct, (double)n);
      tpu_hlo_value_t gmean = nn_bin(c, "divide", sum_g, nn);
      tpu_hlo_value_t proj = nn_bin(c, "divide", nn_bin(c, "multiply", dotp, nn_bin(c, "multiply", invstd, invstd)), nn);
      tpu_hlo_value_t t = nn_bin(c, "subtract", g, nn_bin(c, "multiply", xc, nn_bcast_dim(c, proj, &at, 1)));
      t = nn_bin(c, "subtract", t, nn_bcast_dim(c, gmean, &at, 1));
      gi = nn_bin(c, "multiply", t, nn_bcast_dim(c, nn_bin(c, "multiply", invstd, w), &at, 1));
    } else {
      gi = nn_bin(c, "multiply", g, nn_bcast_dim(c, nn_bin(c, "multiply", invstd, w), &at, 1));
    }
    outs[no++] = tpu_hlo_cast(f, gi, xt.dtype);
  }
  if (m[1]) outs[no++] = tpu_hlo_cast(f, nn_bin(c, "multiply", dotp, invstd), wdt);
  if (m[2]) outs[no++] = tpu_hlo_cast(f, sum_g, wdt);
  if (!no) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: output_mask selects no gradient", c->name);
    return;
  }
  tpu_op_set_outputs(c, no, outs);
}

/* ---- layer norm -------------------------------------------------------------- */

static int nn_ln_setup(tpu_op_ctx_t *c, const tpu_hlo_type_t *xt, int64_t nnorm, int *axis, int64_t *M) {
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
static tpu_hlo_value_t nn_ln_stat_shape(tpu_op_ctx_t *c, tpu_hlo_value_t s, const tpu_hlo_type_t *xt, int axis) {
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
  if (!nn_ln_setup(c, &xt, nnorm, &axis, &M)) return;
  if (!nn_float_check(c, xt.dtype)) return;
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
  tpu_dtype_t acc = nn_acc(xt.dtype);
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
  tpu_hlo_value_t mean = nn_bin(c, "divide", nn_sum(c, x, rd, nrd), tpu_hlo_constant(f, lt, (double)M));
  tpu_hlo_value_t xc = nn_bin(c, "subtract", x, nn_bcast_keep(c, mean, &at, keep));
  tpu_hlo_value_t var = nn_bin(c, "divide", nn_sum(c, nn_bin(c, "multiply", xc, xc), rd, nrd), tpu_hlo_constant(f, lt, (double)M));
  tpu_hlo_value_t rstd = tpu_hlo_unary(f, "rsqrt", nn_bin(c, "add", var, nn_scalar_in(c, 1 + hw + hb, acc, &lt)));
  tpu_hlo_value_t y = nn_bin(c, "multiply", xc, nn_bcast_keep(c, rstd, &at, keep));
  if (hw) y = nn_bin(c, "multiply", y, nn_bcast_keep(c, tpu_hlo_cast(f, c->in[1], acc), &at, wkeep));
  if (hb) y = nn_bin(c, "add", y, nn_bcast_keep(c, tpu_hlo_cast(f, c->in[1 + hw], acc), &at, wkeep));
  tpu_hlo_value_t outs[3] = {tpu_hlo_cast(f, y, xt.dtype), nn_ln_stat_shape(c, tpu_hlo_cast(f, mean, sdt), &xt, axis),
                             nn_ln_stat_shape(c, tpu_hlo_cast(f, rstd, sdt), &xt, axis)};
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
  if (!nn_ln_setup(c, &xt, nnorm, &axis, &M)) return;
  tpu_dtype_t acc = nn_acc(xt.dtype);
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
  tpu_hlo_value_t xhat = nn_bin(c, "multiply", nn_bin(c, "subtract", x, nn_bcast_keep(c, mean, &at, keep)),
                                nn_bcast_keep(c, rstd, &at, keep));
  tpu_hlo_value_t outs[3];
  int no = 0;
  if (m[0]) {
    tpu_hlo_value_t gw = hw ? nn_bin(c, "multiply", g, nn_bcast_keep(c, tpu_hlo_cast(f, c->in[4], acc), &at, wkeep)) : g;
    tpu_hlo_value_t Mc = tpu_hlo_constant(f, lt, (double)M);
    tpu_hlo_value_t a = nn_bin(c, "divide", nn_sum(c, gw, rd, nrd), Mc);
    tpu_hlo_value_t b = nn_bin(c, "divide", nn_sum(c, nn_bin(c, "multiply", gw, xhat), rd, nrd), Mc);
    tpu_hlo_value_t t = nn_bin(c, "subtract", gw, nn_bcast_keep(c, a, &at, keep));
    t = nn_bin(c, "subtract", t, nn_bin(c, "multiply", xhat, nn_bcast_keep(c, b, &at, keep)));
    t = nn_bin(c, "multiply", t, nn_bcast_keep(c, rstd, &at, keep));
    outs[no++] = tpu_hlo_cast(f, t, xt.dtype);
  }
  (void)ld;
  int64_t lead_dims[TPU_MAX_RANK];
  for (int i = 0; i < axis; i++) lead_dims[i] = i;
  if (m[1]) {
    tpu_dtype_t wdt = hw ? tpu_op_type(c, c->in[4]).dtype : xt.dtype;
    outs[no++] = tpu_hlo_cast(f, nn_sum(c, nn_bin(c, "multiply", g, xhat), lead_dims, axis), wdt);
  }
  if (m[2]) {
    tpu_dtype_t bdt = hb ? tpu_op_type(c, c->in[4 + hw]).dtype : xt.dtype;
    outs[no++] = tpu_hlo_cast(f, nn_sum(c, g, lead_dims, axis), bdt);
  }
  if (!no) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: output_mask selects no gradient", c->name);
    return;
  }
  tpu_op_set_outputs(c, no, outs);
}

/* ---- embedding ----------------------------------------------------------------- */

/* embedding: inputs (weight [V, D], indices (any shape, integer)) ->
 * indices.shape + [D].  No attrs (padding_idx only matters for backward). */
static void rule_embedding(tpu_op_ctx_t *c) {
  tpu_hlo_type_t wt = tpu_op_type(c, c->in[0]), it = tpu_op_type(c, c->in[1]);
  if (wt.rank != 2) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: 'weight' must be 2-D", c->name);
    return;
  }
  if (!tpu_dtype_is_int(it.dtype)) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT,
                "%s: Expected tensor for argument #1 'indices' to have one of the following scalar types: "
                "Long, Int; but got %s instead",
                c->name, tpu_dtype_name(it.dtype));
    return;
  }
  tpu_hlo_gather_dims_t gd;
  memset(&gd, 0, sizeof gd);
  gd.noffset = 1;
  gd.offset_dims[0] = it.rank;
  gd.ncollapsed = 1;
  gd.collapsed_slice_dims[0] = 0;
  gd.nstart_map = 1;
  gd.start_index_map[0] = 0;
  gd.index_vector_dim = it.rank;
  gd.slice_sizes[0] = 1;
  gd.slice_sizes[1] = wt.dims[1];
  tpu_op_set_output(c, tpu_hlo_gather(c->f, c->in[0], c->in[1], &gd));
}

/* embedding_dense_backward: inputs (grad [..., D], indices [...]); attrs
 * [num_weights, padding_idx (-1 none), scale_grad_by_freq] -> [V, D]. */
static void rule_embedding_dense_backward(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  int64_t V = tpu_op_int(c, 0), pad = tpu_op_int(c, 1);
  int scale = (int)tpu_op_int(c, 2);
  tpu_hlo_type_t gt = tpu_op_type(c, c->in[0]), it = tpu_op_type(c, c->in[1]);
  if (gt.rank != it.rank + 1) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: grad must have one more dim than indices", c->name);
    return;
  }
  int64_t D = gt.dims[gt.rank - 1], L = tpu_hlo_type_numel(&it);
  tpu_dtype_t acc = nn_acc(gt.dtype);
  int64_t gd2[2] = {L, D}, id2[2] = {L, 1};
  tpu_hlo_value_t g = tpu_hlo_reshape(f, tpu_hlo_cast(f, c->in[0], acc), 2, gd2);
  tpu_hlo_value_t idx = tpu_hlo_reshape(f, tpu_hlo_cast(f, c->in[1], TPU_S64), 2, id2);
  tpu_hlo_type_t g2t = tpu_hlo_type_make(acc, 2, gd2);
  tpu_hlo_scatter_dims_t sd;
  memset(&sd, 0, sizeof sd);
  sd.nwindow = 1;
  sd.update_window_dims[0] = 1;
  sd.ninserted = 1;
  sd.inserted_window_dims[0] = 0;
  sd.nscatter_map = 1;
  sd.scatter_dims_to_operand_dims[0] = 0;
  sd.index_vector_dim = 1;
  if (pad >= 0) {
    int64_t k0 = 0;
    tpu_hlo_value_t i1 = tpu_hlo_reshape(f, idx, 1, &L);
    tpu_hlo_value_t isp = tpu_hlo_compare(f, "EQ", i1, tpu_hlo_constant_i64(f, tpu_hlo_type_make(TPU_S64, 1, &L), pad));
    tpu_hlo_type_t pt = tpu_hlo_type_make(TPU_PRED, 2, gd2);
    g = tpu_hlo_select(f, tpu_hlo_broadcast_in_dim(f, isp, pt, &k0), tpu_hlo_constant(f, g2t, 0.0), g);
  }
  if (scale) {
    tpu_hlo_type_t vt = tpu_hlo_type_make(acc, 1, &V);
    tpu_hlo_scatter_dims_t s1;
    memset(&s1, 0, sizeof s1);
    s1.ninserted = 1;
    s1.nscatter_map = 1;
    s1.index_vector_dim = 1;
    tpu_hlo_value_t cnt = tpu_hlo_scatter(f, tpu_hlo_constant(f, vt, 0.0), idx,
                                          tpu_hlo_constant(f, tpu_hlo_type_make(acc, 1, &L), 1.0), &s1, "add");
    tpu_hlo_gather_dims_t gdm;
    memset(&gdm, 0, sizeof gdm);
    gdm.ncollapsed = 1;
    gdm.nstart_map = 1;
    gdm.index_vector_dim = 1;
    gdm.slice_sizes[0] = 1;
    tpu_hlo_value_t per = tpu_hlo_gather(f, cnt, idx, &gdm); /* [L] */
    int64_t k0 = 0;
    g = nn_bin(c, "divide", g, tpu_hlo_broadcast_in_dim(f, per, g2t, &k0));
  }
  int64_t od[2] = {V, D};
  tpu_hlo_value_t r = tpu_hlo_scatter(f, tpu_hlo_constant(f, tpu_hlo_type_make(acc, 2, od), 0.0), idx, g, &sd, "add");
  tpu_op_set_output(c, tpu_hlo_cast(f, r, gt.dtype));
}

/* ---- losses ------------------------------------------------------------------------ */

/* One-hot mask (pred, self's shape) of target along the class dim. */
static tpu_hlo_value_t nn_onehot(tpu_op_ctx_t *c, const tpu_hlo_type_t *xt, int cdim, tpu_hlo_value_t target) {
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
} nn_nll_t;

static int nn_nll_setup(tpu_op_ctx_t *c, int ix, int it, int iw, int64_t ignore, nn_nll_t *s) {
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
  if (!nn_float_check(c, s->xt.dtype)) return 0;
  s->acc = nn_acc(s->xt.dtype);
  s->onehot = nn_onehot(c, &s->xt, s->cdim, c->in[it]);
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
    tpu_hlo_value_t wb = nn_bcast_dim(c, tpu_hlo_cast(f, c->in[iw], s->acc), &xa, s->cdim);
    tpu_hlo_value_t sel = tpu_hlo_select(f, s->onehot, wb, tpu_hlo_constant(f, xa, 0.0));
    int64_t cd = s->cdim;
    w = nn_sum(c, sel, &cd, 1);
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
  nn_nll_t s;
  if (!nn_nll_setup(c, 0, 1, hw ? 2 : -1, ignore, &s)) return;
  tpu_hlo_type_t xa = s.xt;
  xa.dtype = s.acc;
  tpu_hlo_value_t picked = tpu_hlo_select(f, s.onehot, tpu_hlo_cast(f, c->in[0], s.acc), tpu_hlo_constant(f, xa, 0.0));
  int64_t cd = s.cdim;
  tpu_hlo_value_t xv = nn_sum(c, picked, &cd, 1); /* target shape */
  tpu_hlo_value_t loss = tpu_hlo_unary(f, "negate", nn_bin(c, "multiply", xv, s.w));
  tpu_hlo_value_t out, total;
  if (red == 0) {
    out = tpu_hlo_cast(f, loss, s.xt.dtype);
    total = tpu_hlo_scalar(f, s.xt.dtype, 0.0);
  } else {
    tpu_hlo_value_t sum = nn_sum_all(c, loss), tw = nn_sum_all(c, s.w);
    out = red == 1 ? nn_bin(c, "divide", sum, tw) : sum;
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
  nn_nll_t s;
  if (!nn_nll_setup(c, 1, 2, hw ? 3 : -1, ignore, &s)) return;
  tpu_hlo_type_t wt = s.tt;
  wt.dtype = s.acc;
  tpu_hlo_value_t g = tpu_hlo_broadcast_to(f, tpu_hlo_cast(f, c->in[0], s.acc), wt.rank, wt.dims);
  if (red == 1) {
    tpu_hlo_value_t tw = tpu_hlo_broadcast_to(f, tpu_hlo_cast(f, c->in[3 + hw], s.acc), wt.rank, wt.dims);
    g = nn_bin(c, "divide", g, tw);
  }
  tpu_hlo_value_t per = tpu_hlo_unary(f, "negate", nn_bin(c, "multiply", g, s.w));
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
static int nn_pair(tpu_op_ctx_t *c, int ia, int ib, tpu_hlo_value_t *a, tpu_hlo_value_t *b, tpu_hlo_type_t *t) {
  tpu_hlo_value_t v[2] = {c->in[ia], c->in[ib]};
  int64_t d[TPU_MAX_RANK];
  int r = tpu_op_broadcast_shape(c, v, 2, d);
  if (r < 0) return 0;
  tpu_dtype_t dt = tpu_op_type(c, c->in[ia]).dtype;
  if (!nn_float_check(c, dt)) return 0;
  tpu_dtype_t acc = nn_acc(dt);
  *t = tpu_hlo_type_make(acc, r, d);
  *a = tpu_hlo_broadcast_to(c->f, tpu_hlo_cast(c->f, c->in[ia], acc), r, d);
  *b = tpu_hlo_broadcast_to(c->f, tpu_hlo_cast(c->f, c->in[ib], acc), r, d);
  return 1;
}

/* mse_loss: inputs (self, target); attrs [reduction]. */
static void rule_mse_loss(tpu_op_ctx_t *c) {
  tpu_hlo_value_t a, b;
  tpu_hlo_type_t t;
  if (!nn_pair(c, 0, 1, &a, &b, &t)) return;
  tpu_hlo_value_t d = nn_bin(c, "subtract", a, b);
  tpu_op_set_output(c, nn_reduce_loss(c, nn_bin(c, "multiply", d, d), tpu_op_int(c, 0), tpu_op_type(c, c->in[0]).dtype));
}

/* mse_loss_backward: inputs (grad_output, self, target); attrs [reduction]. */
static void rule_mse_loss_backward(tpu_op_ctx_t *c) {
  tpu_hlo_value_t a, b;
  tpu_hlo_type_t t;
  if (!nn_pair(c, 1, 2, &a, &b, &t)) return;
  tpu_hlo_value_t g = nn_loss_grad_scale(c, 0, tpu_op_int(c, 0), &t);
  tpu_hlo_value_t r = nn_bin(c, "multiply", nn_bin(c, "multiply", nn_const(c, &t, 2.0), nn_bin(c, "subtract", a, b)), g);
  tpu_op_set_output(c, tpu_hlo_cast(c->f, r, tpu_op_type(c, c->in[1]).dtype));
}

/* smooth_l1_loss: inputs (self, target, beta); attrs [reduction]. */
static void rule_smooth_l1_loss(tpu_op_ctx_t *c) {
  tpu_hlo_value_t a, b;
  tpu_hlo_type_t t;
  if (!nn_pair(c, 0, 1, &a, &b, &t)) return;
  tpu_hlo_value_t beta = nn_scalar_in(c, 2, t.dtype, &t);
  tpu_hlo_value_t z = tpu_hlo_unary(c->f, "abs", nn_bin(c, "subtract", a, b));
  tpu_hlo_value_t half = nn_const(c, &t, 0.5);
  tpu_hlo_value_t q = nn_bin(c, "divide", nn_bin(c, "multiply", half, nn_bin(c, "multiply", z, z)), beta);
  tpu_hlo_value_t l = nn_bin(c, "subtract", z, nn_bin(c, "multiply", half, beta));
  tpu_hlo_value_t loss = tpu_hlo_select(c->f, tpu_hlo_compare(c->f, "LT", z, beta), q, l);
  tpu_op_set_output(c, nn_reduce_loss(c, loss, tpu_op_int(c, 0), tpu_op_type(c, c->in[0]).dtype));
}

/* smooth_l1_loss_backward: inputs (grad_output, self, target, beta); attrs [reduction]. */
static void rule_smooth_l1_loss_backward(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_value_t a, b;
  tpu_hlo_type_t t;
  if (!nn_pair(c, 1, 2, &a, &b, &t)) return;
  tpu_hlo_value_t beta = nn_scalar_in(c, 3, t.dtype, &t);
  tpu_hlo_value_t g = nn_loss_grad_scale(c, 0, tpu_op_int(c, 0), &t);
  tpu_hlo_value_t x = nn_bin(c, "subtract", a, b);
  tpu_hlo_value_t nbeta = tpu_hlo_unary(f, "negate", beta);
  tpu_hlo_value_t r = nn_bin(c, "divide", x, beta);
  r = tpu_hlo_select(f, tpu_hlo_compare(f, "GT", x, beta), nn_const(c, &t, 1.0), r);
  r = tpu_hlo_select(f, tpu_hlo_compare(f, "LT", x, nbeta), nn_const(c, &t, -1.0), r);
  tpu_op_set_output(c, tpu_hlo_cast(f, nn_bin(c, "multiply", r, g), tpu_op_type(c, c->in[1]).dtype));
}

/* huber_loss: inputs (self, target, delta); attrs [reduction]. */
static void rule_huber_loss(tpu_op_ctx_t *c) {
  tpu_hlo_value_t a, b;
  tpu_hlo_type_t t;
  if (!nn_pair(c, 0, 1, &a, &b, &t)) return;
  tpu_hlo_value_t delta = nn_scalar_in(c, 2, t.dtype, &t);
  tpu_hlo_value_t z = tpu_hlo_unary(c->f, "abs", nn_bin(c, "subtract", a, b));
  tpu_hlo_value_t half = nn_const(c, &t, 0.5);
  tpu_hlo_value_t q = nn_bin(c, "multiply", half, nn_bin(c, "multiply", z, z));
  tpu_hlo_value_t l = nn_bin(c, "multiply", delta, nn_bin(c, "subtract", z, nn_bin(c, "multiply", half, delta)));
  tpu_hlo_value_t loss = tpu_hlo_select(c->f, tpu_hlo_compare(c->f, "LT", z, delta), q, l);
  tpu_op_set_output(c, nn_reduce_loss(c, loss, tpu_op_int(c, 0), tpu_op_type(c, c->in[0]).dtype));
}

/* huber_loss_backward: inputs (grad_output, self, target, delta); attrs [reduction]. */
static void rule_huber_loss_backward(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  tpu_hlo_value_t a, b;
  tpu_hlo_type_t t;
  if (!nn_pair(c, 1, 2, &a, &b, &t)) return;
  tpu_hlo_value_t delta = nn_scalar_in(c, 3, t.dtype, &t);
  tpu_hlo_value_t g = nn_loss_grad_scale(c, 0, tpu_op_int(c, 0), &t);
  tpu_hlo_value_t x = nn_bin(c, "subtract", a, b);
  tpu_hlo_value_t r = tpu_hlo_select(f, tpu_hlo_compare(f, "GT", x, delta), delta, x);
  r = tpu_hlo_select(f, tpu_hlo_compare(f, "LT", x, tpu_hlo_unary(f, "negate", delta)), tpu_hlo_unary(f, "negate", delta), r);
  tpu_op_set_output(c, tpu_hlo_cast(f, nn_bin(c, "multiply", r, g), tpu_op_type(c, c->in[1]).dtype));
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
  if (!nn_pair(c, 0, 1, &x, &y, &t)) return;
  tpu_hlo_value_t m100 = nn_const(c, &t, -100.0), one = nn_const(c, &t, 1.0);
  tpu_hlo_value_t lx = nn_bin(c, "maximum", tpu_hlo_unary(f, "log", x), m100);
  tpu_hlo_value_t l1x = nn_bin(c, "maximum", tpu_hlo_unary(f, "log_plus_one", tpu_hlo_unary(f, "negate", x)), m100);
  tpu_hlo_value_t loss = nn_bin(c, "subtract", nn_bin(c, "multiply", nn_bin(c, "subtract", y, one), l1x),
                                nn_bin(c, "multiply", y, lx));
  if (hw) loss = nn_bin(c, "multiply", loss, tpu_hlo_broadcast_to(f, tpu_hlo_cast(f, c->in[2], t.dtype), t.rank, t.dims));
  tpu_op_set_output(c, nn_reduce_loss(c, loss, tpu_op_int(c, 0), xt0.dtype));
}

/* binary_cross_entropy_backward: inputs (grad_output, self, target,
 * [weight]); attrs [reduction, has_weight]. */
static void rule_binary_cross_entropy_backward(tpu_op_ctx_t *c) {
  tpu_hlo_func_t *f = c->f;
  int hw = (int)tpu_op_int(c, 1);
  tpu_hlo_value_t x, y;
  tpu_hlo_type_t t;
  if (!nn_pair(c, 1, 2, &x, &y, &t)) return;
  tpu_hlo_value_t g = nn_loss_grad_scale(c, 0, tpu_op_int(c, 0), &t);
  tpu_hlo_value_t den = nn_bin(c, "maximum", nn_bin(c, "multiply", nn_bin(c, "subtract", nn_const(c, &t, 1.0), x), x),
                               nn_const(c, &t, 1e-12));
  tpu_hlo_value_t r = nn_bin(c, "divide", nn_bin(c, "multiply", g, nn_bin(c, "subtract", x, y)), den);
  if (hw) r = nn_bin(c, "multiply", r, tpu_hlo_broadcast_to(f, tpu_hlo_cast(f, c->in[3], t.dtype), t.rank, t.dims));
  tpu_op_set_output(c, tpu_hlo_cast(f, r, tpu_op_type(c, c->in[1]).dtype));
}

const tpu_op_rule_t tpu_rules_nn[] = {
    {"convolution", rule_convolution, 2, 3},
    {"convolution_backward", rule_convolution_backward, 3, 3},
    {"max_pool2d_with_indices", rule_max_pool2d_with_indices, 1, 1},
    {"max_pool2d_with_indices_backward", rule_max_pool2d_with_indices_backward, 3, 3},
    {"avg_pool2d", rule_avg_pool2d, 1, 1},
    {"avg_pool2d_backward", rule_avg_pool2d_backward, 2, 2},
    {"adaptive_avg_pool2d", rule_adaptive_avg_pool2d, 1, 1},
    {"adaptive_avg_pool2d_backward", rule_adaptive_avg_pool2d_backward, 2, 2},
    {"adaptive_max_pool2d", rule_adaptive_max_pool2d, 1, 1},
    {"adaptive_max_pool2d_backward", rule_adaptive_max_pool2d_backward, 3, 3},
    {"native_batch_norm", rule_native_batch_norm, 3, 7},
    {"native_batch_norm_backward", rule_native_batch_norm_backward, 3, 8},
    {"native_layer_norm", rule_native_layer_norm, 2, 4},
    {"native_layer_norm_backward", rule_native_layer_norm_backward, 4, 6},
    {"embedding", rule_embedding, 2, 2},
    {"embedding_dense_backward", rule_embedding_dense_backward, 2, 2},
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
