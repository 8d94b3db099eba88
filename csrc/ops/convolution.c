/* convolution.c - convolution (any number of spatial dims, groups,
 * stride, padding, dilation, transposed) and its backward, and im2col /
 * col2im (nn.Unfold / nn.Fold).  Layouts are PyTorch's: N C <spatial>
 * activations, O I/g <spatial> weights; sums run in float32 for the half
 * types; a backward with an output_mask emits only the requested grads.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/toolkit.h"

typedef tpu_hlo_value_t V;

/* ---- convolution ------------------------------------------------------------ */
/* Attr layout shared by convolution and convolution_backward:
 *   ints = [nsp, transposed, groups, stride[nsp], padding[nsp], dilation[nsp],
 *           output_padding[nsp] (, output_mask[3] for backward)]            */
typedef struct {
  int nsp;
  int transposed;
  int64_t groups;
  int64_t stride[TPU_MAX_RANK], pad[TPU_MAX_RANK], dil[TPU_MAX_RANK], opad[TPU_MAX_RANK];
} conv_params_t;

static int conv_params(tpu_op_ctx_t *c, conv_params_t *p) {
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
} gconv_t;

static int64_t dilate(int64_t s, int64_t d) { return s == 0 ? 0 : 1 + d * (s - 1); }

/* Weight [Cin, Cout/g, k] of a transposed conv -> [Cout, Cin/g, k] reversed
 * (or back: the transform is an involution up to the group reshape, so
 * `inverse` swaps the roles). */
static tpu_hlo_value_t swap_kernel(tpu_op_ctx_t *c, tpu_hlo_value_t w, int64_t g, int inverse) {
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

static tpu_hlo_value_t gconv_fwd(tpu_op_ctx_t *c, tpu_hlo_value_t x, tpu_hlo_value_t k, const gconv_t *g) {
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
static tpu_hlo_value_t gconv_vjp_lhs(tpu_op_ctx_t *c, tpu_hlo_value_t grad, tpu_hlo_value_t k,
                                        const gconv_t *g, const int64_t *in_sp) {
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
    int64_t lhs_d = dilate(in_sp[i], g->lhs_dil[i]);
    int64_t rhs_d = dilate(kt.dims[2 + i], g->rhs_dil[i]);
    int64_t out_d = dilate(gt.dims[2 + i], g->stride[i]);
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
static tpu_hlo_value_t gconv_vjp_rhs(tpu_op_ctx_t *c, tpu_hlo_value_t grad, tpu_hlo_value_t x,
                                        const gconv_t *g, const int64_t *k_sp) {
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
    int64_t lhs_d = dilate(xt.dims[2 + i], g->lhs_dil[i]);
    int64_t rhs_d = dilate(k_sp[i], g->rhs_dil[i]);
    int64_t out_d = dilate(gt.dims[2 + i], g->stride[i]);
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
static int conv_setup(tpu_op_ctx_t *c, const conv_params_t *p, const tpu_hlo_type_t *xt,
                         const tpu_hlo_type_t *wt, gconv_t *g) {
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
  if (!tpu_op_check_float(c, xt->dtype)) return 0;
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

/* convolution / convolution_overrideable: inputs (input, weight[, bias]);
 * attrs [nsp, transposed, groups, stride[nsp], padding[nsp], dilation[nsp],
 * output_padding[nsp]].  Input N C <sp> (or unbatched C <sp>); weight
 * O I/g <sp> (transposed: I O/g <sp>); bias [O]. */
static void rule_convolution(tpu_op_ctx_t *c) {
  conv_params_t p;
  if (!conv_params(c, &p)) return;
  int unb;
  tpu_hlo_value_t x = tpu_op_batch(c, c->in[0], p.nsp, &unb);
  tpu_hlo_type_t xt = tpu_op_type(c, x), wt = tpu_op_type(c, c->in[1]);
  gconv_t g;
  if (!conv_setup(c, &p, &xt, &wt, &g)) return;
  tpu_hlo_value_t k = p.transposed ? swap_kernel(c, c->in[1], p.groups, 0) : c->in[1];
  tpu_hlo_value_t y = gconv_fwd(c, x, k, &g);
  if (c->nin > 2) {
    tpu_hlo_type_t yt = tpu_op_type(c, y);
    tpu_hlo_type_t bt = tpu_op_type(c, c->in[2]);
    if (bt.rank != 1 || bt.dims[0] != yt.dims[1]) {
      char b1[64];
      tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: Given weight of size %s, expected bias to be 1-dimensional with %lld elements, but got bias of size %s instead",
                  c->name, tpu_op_shape_str(&wt, b1, sizeof b1), (long long)yt.dims[1], "(other)");
      return;
    }
    y = ADD(c, y, tpu_op_broadcast_along(c, tpu_hlo_cast(c->f, c->in[2], yt.dtype), &yt, 1));
  }
  if (unb) y = tpu_op_unbatch(c, y);
  tpu_op_set_output(c, y);
}

/* convolution_backward / convolution_backward_overrideable: inputs
 * (grad_output, input, weight); attrs as convolution, then output_mask[3]
 * (grad_input, grad_weight, grad_bias).  Emits the masked gradients in order;
 * grad_bias = grad_output summed over all dims but 1. */
static void rule_convolution_backward(tpu_op_ctx_t *c) {
  conv_params_t p;
  if (!conv_params(c, &p)) return;
  int base = 3 + 4 * p.nsp;
  int m0 = (int)tpu_op_int(c, base), m1 = (int)tpu_op_int(c, base + 1), m2 = (int)tpu_op_int(c, base + 2);
  int unb, unb2;
  tpu_hlo_value_t go = tpu_op_batch(c, c->in[0], p.nsp, &unb2);
  tpu_hlo_value_t x = tpu_op_batch(c, c->in[1], p.nsp, &unb);
  tpu_hlo_type_t xt = tpu_op_type(c, x), wt = tpu_op_type(c, c->in[2]);
  gconv_t g;
  if (!conv_setup(c, &p, &xt, &wt, &g)) return;
  tpu_hlo_value_t outs[3];
  int n = 0;
  tpu_hlo_value_t k = p.transposed ? swap_kernel(c, c->in[2], p.groups, 0) : c->in[2];
  tpu_hlo_type_t kt = tpu_op_type(c, k);
  if (m0) {
    tpu_hlo_value_t gi = gconv_vjp_lhs(c, go, k, &g, xt.dims + 2);
    outs[n++] = unb ? tpu_op_unbatch(c, gi) : gi;
  }
  if (m1) {
    tpu_hlo_value_t gk = gconv_vjp_rhs(c, go, x, &g, kt.dims + 2);
    if (p.transposed) gk = swap_kernel(c, gk, p.groups, 1);
    outs[n++] = gk;
  }
  if (m2) {
    tpu_hlo_type_t gt = tpu_op_type(c, go);
    tpu_dtype_t acc = tpu_op_opmath(gt.dtype);
    int64_t dims[TPU_MAX_RANK];
    int nd = 0;
    for (int i = 0; i < gt.rank; i++)
      if (i != 1) dims[nd++] = i;
    outs[n++] = tpu_hlo_cast(c->f, tpu_op_sum(c, tpu_hlo_cast(c->f, go, acc), dims, nd), gt.dtype);
  }
  if (n == 0) {
    tpu_op_fail(c, TPU_INVALID_ARGUMENT, "%s: output_mask selects no gradient", c->name);
    return;
  }
  tpu_op_set_outputs(c, n, outs);
}

/* ---- im2col / col2im ------------------------------------------------------------------ */

typedef struct {
  int64_t k[2], d[2], p[2], s[2];
} win_t;

static int win_read(tpu_op_ctx_t *c, int at, win_t *w) {
  for (int i = 0; i < 2; i++) {
    w->k[i] = tpu_op_int(c, at + i);
    w->d[i] = tpu_op_int(c, at + 2 + i);
    w->p[i] = tpu_op_int(c, at + 4 + i);
    w->s[i] = tpu_op_int(c, at + 6 + i);
    if (w->k[i] < 1 || w->d[i] < 1 || w->p[i] < 0 || w->s[i] < 1) {
      tpu_op_fail(c, TPU_UNIMPLEMENTED, "%s: bad window", c->name);
      return 0;
    }
  }
  return tpu_hlo_func_status(c->f) == NULL;
}

/* Index table of one axis: idx[k * nout + o] = o * s + k * d. */
static int64_t *win_table(tpu_op_ctx_t *c, const win_t *w, int i, int64_t nout) {
  int64_t *idx = tpu_op_index_table(c, w->k[i] * nout);
  if (!idx) return NULL;
  for (int64_t k = 0; k < w->k[i]; k++)
    for (int64_t o = 0; o < nout; o++) idx[k * nout + o] = o * w->s[i] + k * w->d[i];
  return idx;
}

static int64_t win_out(const win_t *w, int i, int64_t in) {
  return (in + 2 * w->p[i] - (w->d[i] * (w->k[i] - 1) + 1)) / w->s[i] + 1;
}

/* im2col: x [N, C, H, W]; ints [kernel[2], dilation[2], padding[2],
 * stride[2]] -> [N, C*kh*kw, oh*ow]. */
static void rule_im2col(tpu_op_ctx_t *c) {
  win_t w;
  if (!win_read(c, 0, &w)) return;
  tpu_hlo_type_t t = tpu_op_type(c, c->in[0]);
  if (t.rank != 4) {
    tpu_op_fail(c, TPU_UNIMPLEMENTED, "im2col: expected a 4-d input");
    return;
  }
  int64_t N = t.dims[0], C = t.dims[1], oh = win_out(&w, 0, t.dims[2]), ow = win_out(&w, 1, t.dims[3]);
  if (oh < 1 || ow < 1) {
    tpu_op_fail(c, TPU_UNIMPLEMENTED, "im2col: empty output");
    return;
  }
  int64_t lo[4] = {0, 0, w.p[0], w.p[1]}, in0[4] = {0, 0, 0, 0};
  V x = tpu_hlo_pad(c->f, c->in[0], tpu_hlo_scalar(c->f, t.dtype, 0.0), lo, lo, in0);
  int64_t *ih = win_table(c, &w, 0, oh), *iw = win_table(c, &w, 1, ow);
  if (ih && iw) {
    x = tpu_op_take_const(c, x, 2, ih, w.k[0] * oh);
    x = tpu_op_take_const(c, x, 3, iw, w.k[1] * ow);
    int64_t d6[6] = {N, C, w.k[0], oh, w.k[1], ow}, perm[6] = {0, 1, 2, 4, 3, 5};
    int64_t d3[3] = {N, C * w.k[0] * w.k[1], oh * ow};
    x = tpu_hlo_reshape(c->f, x, 6, d6);
    x = tpu_hlo_transpose(c->f, x, perm);
    tpu_op_set_output(c, tpu_hlo_reshape(c->f, x, 3, d3));
  }
  free(ih);
  free(iw);
}

/* col2im: x [N, C*kh*kw, L]; ints [out_h, out_w, kernel[2], dilation[2],
 * padding[2], stride[2]] -> [N, C, out_h, out_w] (overlaps summed). */
static void rule_col2im(tpu_op_ctx_t *c) {
  win_t w;
  if (!win_read(c, 2, &w)) return;
  int64_t H = tpu_op_int(c, 0), W = tpu_op_int(c, 1);
  tpu_hlo_type_t t = tpu_op_type(c, c->in[0]);
  int64_t kk = w.k[0] * w.k[1];
  int64_t oh = win_out(&w, 0, H), ow = win_out(&w, 1, W);
  if (t.rank != 3 || t.dims[1] % kk || oh < 1 || ow < 1 || t.dims[2] != oh * ow) {
    tpu_op_fail(c, TPU_UNIMPLEMENTED, "col2im: shape mismatch");
    return;
  }
  tpu_dtype_t dt = t.dtype;
  int64_t N = t.dims[0], C = t.dims[1] / kk;
  V x = tpu_hlo_cast(c->f, c->in[0], tpu_op_opmath(dt));
  int64_t d6[6] = {N, C, w.k[0], w.k[1], oh, ow}, perm[6] = {0, 1, 2, 4, 3, 5};
  int64_t d4[4] = {N, C, w.k[0] * oh, w.k[1] * ow};
  x = tpu_hlo_reshape(c->f, x, 6, d6);
  x = tpu_hlo_transpose(c->f, x, perm);
  x = tpu_hlo_reshape(c->f, x, 4, d4);
  int64_t Hp = H + 2 * w.p[0], Wp = W + 2 * w.p[1];
  int64_t *ih = win_table(c, &w, 0, oh), *iw = win_table(c, &w, 1, ow);
  if (ih && iw) {
    int64_t z1[4] = {N, C, w.k[0] * oh, Wp}, z2[4] = {N, C, Hp, Wp};
    x = tpu_op_put_const(c, tpu_hlo_constant(c->f, tpu_hlo_type_make(tpu_op_opmath(dt), 4, z1), 0.0), 3, iw, w.k[1] * ow, x, "add");
    x = tpu_op_put_const(c, tpu_hlo_constant(c->f, tpu_hlo_type_make(tpu_op_opmath(dt), 4, z2), 0.0), 2, ih, w.k[0] * oh, x, "add");
    int64_t st[4] = {0, 0, w.p[0], w.p[1]}, lim[4] = {N, C, w.p[0] + H, w.p[1] + W};
    tpu_op_finish(c, tpu_hlo_slice(c->f, x, st, lim, NULL), dt);
  }
  free(ih);
  free(iw);
}


const tpu_op_rule_t tpu_rules_convolution[] = {
    {"convolution", rule_convolution, 2, 3},
    {"convolution_backward", rule_convolution_backward, 3, 3},
    {"im2col", rule_im2col, 1, 1},
    {"col2im", rule_col2im, 1, 1},
    {NULL, NULL, 0, 0},
};
